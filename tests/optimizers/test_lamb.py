"""ms_optim.Lamb: the native and ops paths against the numpy reference (Paddle's rule), groups,
schedules, clipping."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

import ms_optim
from ms_optim import reference
from ms_optim.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from tests.helpers import (assert_checkpoint_resumes, assert_close_to_mindspore, assert_trained, batch,
                           fit_and_score, fit_reference, make_net, train_cell, values)


def _make_params():
    rng = np.random.default_rng(0)
    shapes = {"dense.weight": (37, 11), "dense.bias": (11,), "zero.weight": (5, 3),
              "big.weight": (130, 129)}
    return [Parameter(Tensor(np.zeros(s, np.float32) if name.startswith("zero")
                             else rng.standard_normal(s).astype(np.float32)), name=name)
            for name, s in shapes.items()]


def _grads(params, rng, scale):
    return [(rng.standard_normal(p.shape) * scale).astype(np.float32) for p in params]


class HalvingLR(LearningRateSchedule):
    def construct(self, global_step):
        return 0.02 / (1.0 + ms.ops.cast(global_step, ms.float32))


def _reference_lamb(params, lr_at, wd_of, clip, loss_scale, always_adapt=False):
    """The numpy Lamb from the values of `params`: returns step(grads) -> the parameters
    after one more step (lr_at(t, p), t counting from 0, and wd_of(p) per parameter)."""
    state = [(p.asnumpy().copy(), np.zeros(p.shape, np.float32), np.zeros(p.shape, np.float32))
             for p in params]
    inv = np.float32(1.0 / loss_scale)
    done = [0]

    def step(grads):
        done[0] += 1
        t = done[0]
        kw, scale = {}, inv
        if isinstance(clip, ClipGradByGlobalNorm):
            grads = reference.clip_by_global_norm([g * inv for g in grads], clip.clip_norm)
            scale = 1.0
        elif isinstance(clip, ClipGradByNorm):
            kw = dict(clip_norm=clip.clip_norm)
        elif isinstance(clip, ClipGradByValue):
            kw = dict(clip_lo=clip.min, clip_hi=clip.max)
        for p, (rp, rm, rv), g in zip(params, state, grads):
            reference.lamb_step(rp, rm, rv, g, lr_at(t - 1, p), 0.9, 0.999, 1e-6,
                                np.float32(0.9) ** t, np.float32(0.999) ** t, wd_of(p),
                                always_adapt, grad_scale=scale, **kw)
        return [s[0] for s in state]

    return step


def _reference_run(params, grad_seq, lr_at, wd_of, clip, loss_scale, always_adapt=False):
    step = _reference_lamb(params, lr_at, wd_of, clip, loss_scale, always_adapt)
    for grads in grad_seq:
        out = step(grads)
    return out


CLIPS = {"none": lambda: None, "global": lambda: ClipGradByGlobalNorm(2.0),
         "norm": lambda: ClipGradByNorm(1.5), "value": lambda: ClipGradByValue(0.4, -0.3)}


@pytest.mark.parametrize("impl", ["native", "ops"])
@pytest.mark.parametrize("clip", sorted(CLIPS))
def test_optimizer_matches_reference(impl, clip):
    params = _make_params()
    rng = np.random.default_rng(1)
    seq = [_grads(params, rng, 4.0) for _ in range(6)]
    excluded = lambda p: p.name.endswith("bias")  # noqa: E731
    opt = ms_optim.Lamb(params, learning_rate=0.01, lamb_weight_decay=0.02, grad_clip=CLIPS[clip](),
                        exclude_from_weight_decay_fn=excluded, loss_scale=4.0, impl=impl)
    want = _reference_run(_make_params(), seq, lambda t, p: 0.01,
                          lambda p: 0.0 if excluded(p) else 0.02, CLIPS[clip](), 4.0)
    first = opt(tuple(Tensor(g) for g in seq[0]))
    for grads in seq[1:]:
        opt(tuple(Tensor(g) for g in grads))
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.asnumpy(), w, rtol=2e-5, atol=2e-6, err_msg=p.name)
    ratios = [float(r.asnumpy().reshape(-1)[0]) for r in first]
    names = [p.name for p in params]
    assert ratios[names.index("dense.bias")] == 1.0        # excluded: no trust ratio
    assert ratios[names.index("zero.weight")] == 1.0       # zero norm (first step): 1
    assert ratios[names.index("dense.weight")] != 1.0


@pytest.mark.parametrize("impl", ["native", "ops"])
def test_groups_schedule_and_always_adapt(impl):
    params = _make_params()
    rng = np.random.default_rng(2)
    seq = [_grads(params, rng, 1.0) for _ in range(5)]
    groups = [{"params": params[:2], "weight_decay": 0.0, "lr": HalvingLR()},
              {"params": params[2:], "weight_decay": 0.05},
              {"order_params": params}]
    opt = ms_optim.Lamb(groups, learning_rate=0.005, always_adapt=True, impl=impl)
    first = {p.name for p in params[:2]}
    want = _reference_run(
        _make_params(), seq,
        lambda t, p: np.float32(0.02) / (np.float32(1) + np.float32(t)) if p.name in first else 0.005,
        lambda p: 0.0 if p.name in first else 0.05, None, 1.0, always_adapt=True)
    for grads in seq:
        opt(tuple(Tensor(g) for g in grads))
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.asnumpy(), w, rtol=2e-5, atol=2e-6, err_msg=p.name)


@pytest.mark.parametrize("bucket", [1, 3])
def test_native_buckets_of_parameters(bucket, monkeypatch):
    """Parameters split over several multi-tensor kernel calls step as with one call:
    groups (per-parameter lr and weight decay), exclusions and the global clip."""
    monkeypatch.setattr(ms_optim.kernels, "MAX_TENSORS", bucket)
    params = _make_params()
    rng = np.random.default_rng(4)
    seq = [_grads(params, rng, 2.0) for _ in range(4)]
    groups = [{"params": params[:3], "weight_decay": 0.03, "lr": 0.02},
              {"params": params[3:], "weight_decay": 0.01}]
    excluded = lambda p: p.name.endswith("bias")  # noqa: E731
    opt = ms_optim.Lamb(groups, learning_rate=0.005, grad_clip=ClipGradByGlobalNorm(3.0),
                        exclude_from_weight_decay_fn=excluded, impl="native")
    assert len(opt.buckets) == -(-len(params) // bucket)
    first = {p.name for p in params[:3]}
    want = _reference_run(
        _make_params(), seq, lambda t, p: 0.02 if p.name in first else 0.005,
        lambda p: 0.0 if excluded(p) else (0.03 if p.name in first else 0.01),
        ClipGradByGlobalNorm(3.0), 1.0)
    ratios = [opt(tuple(Tensor(g) for g in grads)) for grads in seq]
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.asnumpy(), w, rtol=2e-5, atol=2e-6, err_msg=p.name)
    assert ratios[0].shape == (len(params),)
    assert ratios[0].asnumpy()[[p.name for p in params].index("dense.bias")] == 1.0


def test_native_and_ops_agree_in_training():
    x, y = batch(n=32)
    results = []
    for impl in ("native", "ops"):
        net = make_net(seed=9)
        cell = train_cell(net, ms_optim.Lamb(net.trainable_params(), learning_rate=0.02,
                                             grad_clip=ClipGradByGlobalNorm(1.0), impl=impl))
        for _ in range(20):
            loss = cell(x, y)
        results.append((values(net.trainable_params()), float(loss.asnumpy())))
    for a, b in zip(results[0][0], results[1][0]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert results[0][1] == pytest.approx(results[1][1], rel=1e-4)  # the last step's losses


def test_trains_with_model_in_graph_mode():
    """ms.Model training steps as the numpy Lamb driven by the gradients at its own
    parameters (computed by MindSpore)."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((256, 6)).astype(np.float32)
    ys = (xs[:, 0] - xs[:, 2] > 0).astype(np.int32)
    net = make_net(seed=2)
    opt = ms_optim.Lamb(net.trainable_params(), learning_rate=0.02, grad_clip=ClipGradByNorm(1.0))
    losses, acc = fit_and_score(net, opt, xs, ys, epochs=6)
    ref_net = make_net(seed=2)
    step = _reference_lamb(ref_net.trainable_params(), lambda t, p: 0.02, lambda p: 0.01,
                           ClipGradByNorm(1.0), 1.0)
    ref_losses = fit_reference(ref_net, xs, ys, 6, step)
    assert_close_to_mindspore(values(net.trainable_params()), values(ref_net.trainable_params()))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_trained(losses, acc, loss_ratio=0.3, min_acc=0.9)


def test_checkpoint_resume_matches_uninterrupted(tmp_path):
    def build():
        net = make_net(seed=8)
        opt = ms_optim.Lamb(net.trainable_params(), learning_rate=HalvingLR(),
                            grad_clip=ClipGradByGlobalNorm(1.0))
        return net, opt, train_cell(net, opt)

    assert_checkpoint_resumes(build, 12, *batch(), str(tmp_path / "lamb.ckpt"),
                              lambda net, opt: values(net.trainable_params()) + values(opt.moment1)
                              + values(opt.moment2))


def test_get_lr_and_set_lr():
    params = _make_params()
    opt = ms_optim.Lamb(params, learning_rate=0.01)
    assert opt.current_lr() == pytest.approx(0.01)
    opt.set_lr(0.5)
    assert opt.current_lr() == pytest.approx(0.5)
    # the new rate drives the next step: lr 0 leaves parameters unchanged
    opt.set_lr(0)
    before = values(params)
    opt(tuple(Tensor(np.ones(p.shape, np.float32)) for p in params))
    for a, p in zip(before, params):
        np.testing.assert_array_equal(a, p.asnumpy())
    with pytest.raises(TypeError, match="set_lr"):
        opt.set_lr("0.1")
    with pytest.raises(ValueError, match="set_lr"):
        opt.set_lr(-1.0)
    scheduled = ms_optim.Lamb(_make_params(), learning_rate=HalvingLR())
    assert scheduled.current_lr() == pytest.approx(0.02)
    with pytest.raises(RuntimeError, match="schedule"):
        scheduled.set_lr(0.1)


ERRORS = [
    (dict(beta1=0.0), ValueError, "beta1"), (dict(beta1=1.0), ValueError, "beta1"),
    (dict(beta2=1.2), ValueError, "beta2"), (dict(beta2="x"), TypeError, "beta2"),
    (dict(epsilon=0.0), ValueError, "epsilon"), (dict(epsilon=-1e-6), ValueError, "epsilon"),
    (dict(lamb_weight_decay=-0.1), ValueError, "lamb_weight_decay"),
    (dict(lamb_weight_decay="0.1"), TypeError, "lamb_weight_decay"),
    (dict(exclude_from_weight_decay_fn=3), TypeError, "exclude_from_weight_decay_fn"),
    (dict(learning_rate=-1.0), ValueError, "learning_rate"),
    (dict(learning_rate="fast"), TypeError, "learning_rate"),
    (dict(learning_rate=Tensor(np.ones((2, 2), np.float32))), ValueError, "learning_rate"),
    (dict(grad_clip=1.0), TypeError, "grad_clip"),
    (dict(grad_clip=nn.ClipByNorm()), TypeError, "grad_clip"),
    (dict(always_adapt=1), TypeError, "always_adapt"),
    (dict(loss_scale=0.0), ValueError, "loss_scale"),
    (dict(impl="cuda"), ValueError, "impl"),
]


@pytest.mark.parametrize("kwargs,exc,name", ERRORS, ids=[str(k) for k, _, _ in ERRORS])
def test_bad_arguments_raise_naming_the_argument(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        ms_optim.Lamb(_make_params(), **kwargs)


@pytest.mark.parametrize("build,exc,name", [
    (lambda: ClipGradByGlobalNorm(0.0), ValueError, "clip_norm"),
    (lambda: ClipGradByGlobalNorm("1"), TypeError, "clip_norm"),
    (lambda: ClipGradByNorm(-1), ValueError, "clip_norm"),
    (lambda: ClipGradByValue(-1.0), ValueError, "max"),
    (lambda: ClipGradByValue(1.0, min=2.0), ValueError, "min"),
    (lambda: ClipGradByValue("1"), TypeError, "max"),
])
def test_bad_clip_values(build, exc, name):
    with pytest.raises(exc, match=name):
        build()


@pytest.mark.parametrize("clip", ["global", "norm", "value"])
def test_clip_cells_match_reference_in_graph_mode(clip):
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s).astype(np.float32) * 3 for s in [(4, 5), (7,), (300,)]]
    cell = CLIPS[clip]()
    got = [g.asnumpy() for g in cell(tuple(Tensor(g) for g in grads))]
    if clip == "global":
        want = reference.clip_by_global_norm(grads, 2.0)
    elif clip == "norm":
        want = [reference.clip_by_norm(g, 1.5) for g in grads]
    else:
        want = [reference.clip_by_value(g, 0.4, -0.3) for g in grads]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    if clip == "global":
        assert np.sqrt(sum(np.sum(a.astype(np.float64) ** 2) for a in got)) == pytest.approx(2.0, rel=1e-5)
