"""ms_optim.Lamb: the native and ops paths against the numpy reference (Paddle's rule), groups,
schedules, buckets, clipping (tests/optimizers/test_common.py has the checks every optimizer
passes)."""
import numpy as np
import pytest

from mindspore import Parameter, Tensor

import ms_optim
from ms_optim import reference
from ms_optim.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from tests.helpers import HalvingLR, named_params, random_grads, reference_lamb, values


def _make_params():
    rng = np.random.default_rng(0)
    shapes = {"dense.weight": (37, 11), "dense.bias": (11,), "zero.weight": (5, 3),
              "big.weight": (130, 129)}
    return [Parameter(Tensor(np.zeros(s, np.float32) if name.startswith("zero")
                             else rng.standard_normal(s).astype(np.float32)), name=name)
            for name, s in shapes.items()]


def _grads(params, rng, scale):
    return [(rng.standard_normal(p.shape) * scale).astype(np.float32) for p in params]


def _reference_run(params, grad_seq, lr_at, wd_of, clip, loss_scale, always_adapt=False):
    step = reference_lamb(params, lr_at, wd_of, clip, loss_scale, always_adapt)
    for grads in grad_seq:
        out = step(grads)
    return out


CLIPS = {"none": lambda: None, "global": lambda: ClipGradByGlobalNorm(2.0),
         "norm": lambda: ClipGradByNorm(1.5), "value": lambda: ClipGradByValue(0.4, -0.3)}


# the ops path with a global-norm clip in the default tier, its other clips in the slow one
@pytest.mark.parametrize("impl, clip", [("native", c) for c in sorted(CLIPS)] + [
    ("ops", c) if c == "global" else pytest.param("ops", c, marks=pytest.mark.slow)
    for c in sorted(CLIPS)])
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


@pytest.mark.parametrize("impl", [pytest.param("native", marks=pytest.mark.slow), "ops"])
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


@pytest.mark.parametrize("bucket", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_native_buckets_of_parameters(bucket, monkeypatch):
    """Parameters split over several multi-tensor kernel calls step as with one call:
    groups (per-parameter lr and weight decay), exclusions and the global clip."""
    monkeypatch.setattr(ms_optim.aot, "MAX_TENSORS", bucket)
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


def test_group_weight_decay_is_lambs():
    """A group's 'weight_decay' (MindSpore's name) sets Lamb's decay for its parameters; the
    others keep Lamb's default."""
    params = named_params()
    opt = ms_optim.Lamb([{"params": params[:1], "weight_decay": 0.5},
                         {"params": params[1:]}], learning_rate=0.01)
    want = values(params)
    grads = random_grads(params)
    opt(grads)
    # the group's 0.5 for the first parameter, Lamb's default 0.01 for the others
    for w, g, wd in zip(want, grads, [0.5, 0.01, 0.01]):
        reference.lamb_step(w, np.zeros_like(w), np.zeros_like(w), g.asnumpy(), 0.01, 0.9, 0.999,
                            1e-6, np.float32(0.9), np.float32(0.999), wd, False)
    for w, p in zip(want, params):
        np.testing.assert_allclose(p.asnumpy(), w, rtol=1e-6, atol=1e-7, err_msg=p.name)


@pytest.mark.parametrize("build,exc,name", [
    (lambda: ClipGradByGlobalNorm(0.0), ValueError, "clip_norm"),
    (lambda: ClipGradByGlobalNorm("1"), TypeError, "clip_norm"),
    (lambda: ClipGradByNorm(-1), ValueError, "clip_norm"),
    (lambda: ClipGradByValue(-1.0), ValueError, "max"),
    (lambda: ClipGradByValue(1.0, min=2.0), ValueError, "min"),
    (lambda: ClipGradByValue("1"), TypeError, "max"),
    # NaN or infinite in float32, the clip's tensors
    (lambda: ClipGradByValue(1.0, min=float("nan")), ValueError, "'min' must be finite"),
    (lambda: ClipGradByValue(float("nan"), min=0.0), ValueError, "'max' must be finite"),
    (lambda: ClipGradByValue(1e39), ValueError, "'max' must be finite in float32"),
    (lambda: ClipGradByNorm(float("inf")), ValueError, "'clip_norm' must be finite"),
    (lambda: ClipGradByGlobalNorm(10**400), ValueError, "'clip_norm' must be finite"),
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
