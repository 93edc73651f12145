"""ms_optim.DGCMomentum: the native and ops paths against the numpy reference (DGCReference),
exchange statistics, float16 parameters, warnings, the recursion limit
(tests/optimizers/test_common.py has the checks every optimizer passes)."""
import warnings

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, context, nn

import ms_optim
from ms_optim import dgc, reference
from ms_optim.clip import ClipGradByNorm
from ms_optim.regularizer import L1Decay, L2Decay
from tests.helpers import assert_close_to_mindspore, cosine_lrs, named_params
from tests.optim_db import DGC_BASE

WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]


SHAPES = [(130, 129), (20000,), (7, 3), (11,)]  # two compressed, two dense


def _params(seed=0, names=("fc.weight", "emb.table", "fc2.weight", "fc2.bias")):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=n)
            for s, n in zip(SHAPES, names)]


CONFIGS = {
    "plain": dict(),
    "nesterov_clip": dict(use_nesterov=True, local_grad_clip_norm=20.0),
    "grad_clip_l1": dict(grad_clip=ClipGradByNorm(20.0), regularization=L1Decay(1e-3)),
    "l2_loss_scale": dict(regularization=L2Decay(1e-2), loss_scale=8.0),
    "weight_decay_nesterov": dict(weight_decay=1e-2, use_nesterov=True),
}


def _reference_for(params, cfg):
    kw = dict(nesterov=cfg.get("use_nesterov", False), loss_scale=cfg.get("loss_scale", 1.0))
    clip = cfg.get("local_grad_clip_norm") or (cfg["grad_clip"].clip_norm if "grad_clip" in cfg else None)
    reg = cfg.get("regularization")
    wd = [cfg.get("weight_decay", 0.0)] * len(params)
    if isinstance(reg, L2Decay):
        wd = [reg.coeff] * len(params)
    return reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 5, 30, WARMUP,
                                  clip_norm=clip, l1=reg.coeff if isinstance(reg, L1Decay) else 0.0,
                                  wd=wd, **kw)


def _plain_native_first(cases):
    """`cases` (impl, config) as parameters: the native path's configurations in the default
    tier (between them every option: weight decay, L1 and L2, both clips, the loss scale),
    the ops path's (seconds each) in the slow one."""
    return [pytest.param(impl, config, marks=() if impl == "native" else pytest.mark.slow)
            for impl, config in cases]


@pytest.mark.parametrize("impl,config", _plain_native_first(
    [("native", c) for c in sorted(CONFIGS)] + [("ops", "plain"), ("ops", "nesterov_clip")]))
def test_optimizer_matches_reference(impl, config):
    cfg = CONFIGS[config]
    params = _params()
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=5,
                               rampup_step=30, sparsity=WARMUP, impl=impl, **cfg)
    ref = _reference_for(params, cfg)
    assert opt.compressed_params == ["fc.weight", "emb.table"]
    rng = np.random.default_rng(2)
    scale = cfg.get("loss_scale", 1.0)
    for _ in range(64):  # dense steps 0-4, then every warm-up stage, then 0.999
        grads = [(rng.standard_normal(s) * scale).astype(np.float32) for s in SHAPES]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], 0.05)
    # The gradient preprocessing (clip norm in float32, sign, decay) runs in MindSpore ops,
    # the reference in numpy: agreement to float32 rounding accumulated over 64 steps.
    got = [p.asnumpy() for p in params] + [opt.v[j].asnumpy() for j in range(len(opt.comp_ids))] \
        + [opt.u[i].asnumpy() for i in opt.comp_ids]
    want = ref.params + [ref.v[0][i] for i in opt.comp_ids] + [ref.u[0][i] for i in opt.comp_ids]
    assert_close_to_mindspore(got, want)


# ---------------------------------------------------------------- dense_params --

@pytest.mark.parametrize("impl,bucket", [
    ("native", None),
    pytest.param("ops", None, marks=pytest.mark.slow),
    pytest.param("native", 0.9, marks=pytest.mark.slow)])
def test_dense_params_match_reference(impl, bucket):
    """A parameter large enough to compress, asked dense, takes the dense path on every step
    (and a small one stays out of the bucket): parameters and residuals hold the
    reference's bits through the dense steps and both stages."""
    params = _params()
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=2,
                               rampup_step=4, sparsity=[0.9, 0.99], impl=impl,
                               bucket_sparsity=bucket, dense_params=["emb.table", params[3]])
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 2, 4, [0.9, 0.99],
                                 bucket_sparsity=bucket, dense=(1, 3))
    assert opt.compressed_params == ["fc.weight"]
    assert opt.bucketed_params == ([] if bucket is None else ["fc2.weight"])
    _fold_run(opt, ref, [0.05] * 12)
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.asnumpy(), ref.params[i], err_msg=f"p{i}")
        np.testing.assert_array_equal(opt.u[i].asnumpy(), ref.u[0][i], err_msg=f"u{i}")
    for j, i in enumerate(opt.comp_ids):
        np.testing.assert_array_equal(opt.v[j].asnumpy(), ref.v[0][i], err_msg=f"v{i}")


def test_dense_params_are_sent_whole():
    """exchange_stats counts the parameter asked dense with the small ones; it warns of
    nothing, and repr names it."""
    params = _params()
    plain = ms_optim.DGCMomentum(params, 0.05, 0.9, 0, sparsity=[0.99])
    opt, warned = _uncompressed_warnings(params, rampup_begin_step=0, sparsity=[0.99],
                                         dense_params=[params[1]])
    assert warned == []
    assert "dense_params=['emb.table']" in repr(opt)
    got, was = opt.exchange_stats(0, workers=2), plain.exchange_stats(0, workers=2)
    assert got["dense_part_bytes"] == was["dense_part_bytes"] + 4 * 20000
    assert got["selected"] == was["selected"] - 200
    assert got["dense_bytes"] == was["dense_bytes"]


def test_dense_params_name_each_parameter_once():
    params = _params()
    with pytest.raises(ValueError, match="'dense_params' names 'fc.weight' twice"):
        ms_optim.DGCMomentum(params, 0.05, 0.9, 0, dense_params=["fc.weight", params[0]])
    stranger = Parameter(Tensor(np.zeros(3, np.float32)), name="other.weight")
    with pytest.raises(ValueError, match="'other.weight', which is not one of"):
        ms_optim.DGCMomentum(params, 0.05, 0.9, 0, dense_params=[stranger])
    with pytest.raises(TypeError, match="'dense_params'"):
        ms_optim.DGCMomentum(params, 0.05, 0.9, 0, dense_params={"fc.weight"})


# ------------------------------------------------------------ lr_in_residuals --

def _fold_run(opt, ref, lrs, shapes=SHAPES, dtypes=None, seed=5):
    """The optimizer and the reference over len(lrs) steps of random gradients (float32,
    or of `dtypes`)."""
    rng = np.random.default_rng(seed)
    for lr in lrs:
        grads = [rng.standard_normal(s).astype(d)
                 for s, d in zip(shapes, dtypes or [np.float32] * len(shapes))]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], lr)


@pytest.mark.parametrize("impl,bucket", [
    ("native", None),
    pytest.param("ops", None, marks=pytest.mark.slow),
    pytest.param("native", 0.9, marks=pytest.mark.slow),
    pytest.param("ops", 0.9, marks=pytest.mark.slow)])
def test_lr_in_residuals_matches_reference(impl, bucket):
    """Under a cosine schedule, through the dense steps 0-2 and both stages: parameters and
    residuals hold the reference's bits."""
    lrs = cosine_lrs(24)
    params = _params()
    opt = ms_optim.DGCMomentum(params, learning_rate=lrs, momentum=0.9, rampup_begin_step=3,
                               rampup_step=6, sparsity=[0.9, 0.999], impl=impl,
                               bucket_sparsity=bucket, lr_in_residuals=True)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 3, 6, [0.9, 0.999],
                                 bucket_sparsity=bucket, lr_in_residuals=True)
    _fold_run(opt, ref, lrs)
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.asnumpy(), ref.params[i], err_msg=f"p{i}")
        np.testing.assert_array_equal(opt.u[i].asnumpy(), ref.u[0][i], err_msg=f"u{i}")
    for j, i in enumerate(opt.comp_ids):
        np.testing.assert_array_equal(opt.v[j].asnumpy(), ref.v[0][i], err_msg=f"v{i}")
    for j, i in enumerate(opt.bucket_ids):
        np.testing.assert_array_equal(opt.bucket_v[j].asnumpy(), ref.v[0][i], err_msg=f"v{i}")


@pytest.mark.slow
def test_lr_in_residuals_float16_nesterov_matches_reference():
    """Float16 parameters (folded in float32) with Nesterov momentum and the bucket, under a
    cosine schedule: the reference's bits."""
    lrs = cosine_lrs(20)
    params = _f16_params(np.random.default_rng(8))
    opt = ms_optim.DGCMomentum(params, learning_rate=lrs, momentum=0.9, rampup_begin_step=2,
                               sparsity=[0.99], use_nesterov=True, bucket_sparsity=0.9,
                               lr_in_residuals=True)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 2, 1, [0.99],
                                 nesterov=True, bucket_sparsity=0.9, lr_in_residuals=True)
    _fold_run(opt, ref, lrs, F16_SHAPES, F16_DTYPES, seed=9)
    for i, p in enumerate(params):
        np.testing.assert_array_equal(p.asnumpy(), ref.params[i], err_msg=f"p{i}")


def test_lr_in_residuals_with_group_learning_rates():
    """Each group folds its own rate: without a bucket the parameters do not interact, so
    each group follows the reference run at its rate."""
    params = _params()
    groups = [{"params": params[:1], "lr": 0.1}, {"params": params[1:], "lr": 0.02}]
    opt = ms_optim.DGCMomentum(groups, learning_rate=0.05, momentum=0.9, rampup_begin_step=2,
                               sparsity=[0.99], lr_in_residuals=True)
    refs = {lr: reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 2, 1, [0.99],
                                       lr_in_residuals=True) for lr in (0.1, 0.02)}
    rng = np.random.default_rng(6)
    for _ in range(6):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        opt(tuple(Tensor(g) for g in grads))
        for lr, ref in refs.items():
            ref.step([grads], lr)
    for i, lr in enumerate((0.1, 0.02, 0.02, 0.02)):
        np.testing.assert_array_equal(params[i].asnumpy(), refs[lr].params[i], err_msg=f"p{i}")


def test_lr_in_residuals_differs_only_when_the_rate_changes():
    """The reference's rule: at a constant rate, learning-rate-scaled residuals give the
    default rule's parameters up to float32 rounding (the residuals are lr times the
    default's); under a decaying rate an entry kept in a residual is applied at the rate of
    the steps that produced it, and the parameters move apart."""
    def run(lrs, fold, shapes=SHAPES[:2]):
        rng = np.random.default_rng(0)
        ref = reference.DGCReference([rng.standard_normal(s).astype(np.float32) for s in shapes],
                                     0.9, 0, 1, [0.99], lr_in_residuals=fold)
        for lr in lrs:
            ref.step([[rng.standard_normal(s).astype(np.float32) for s in shapes]], lr)
        return ref
    constant = [np.float32(0.05)] * 20
    plain, folded = run(constant, False), run(constant, True)
    for a, b in zip(plain.params, folded.params):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(folded.v[0][0], np.float32(0.05) * plain.v[0][0], rtol=1e-4,
                               atol=1e-6)
    decaying = cosine_lrs(20)
    plain, folded = run(decaying, False), run(decaying, True)
    assert max(np.abs(a - b).max() for a, b in zip(plain.params, folded.params)) > 1e-3


def test_exchange_stats_and_stages():
    opt = ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=10,
                               rampup_step=100, sparsity=WARMUP)
    dense = sum(int(np.prod(s)) for s in SHAPES)
    before = opt.exchange_stats(9)
    assert before["stage"] is None and before["bytes"] == 4 * dense
    assert [opt.stage(s) for s in (10, 29, 30, 109, 110, 10_000)] == [0, 0, 1, 4, 4, 4]
    last = opt.exchange_stats(500)
    k = [int(16770 * 0.001), int(20000 * 0.001)]
    assert k == [16, 20]
    assert last["elements"] == 21 + 11 + sum(k)
    assert last["bytes"] == 4 * (21 + 11) + 8 * sum(k)
    assert last["compression"] == pytest.approx(4 * dense / last["bytes"])
    assert opt.exchange_stats()["step"] == 0
    assert opt.exchange_stats(np.int64(500)) == last
    for bad in ("a", 1.5, True, None):
        with pytest.raises(TypeError, match="For 'DGCMomentum', the 'step' must be an int"):
            opt.stage(bad)
    for bad in ("a", 1.5, True):
        with pytest.raises(TypeError, match="For 'DGCMomentum', the 'step' must be an int"):
            opt.exchange_stats(bad)
    with pytest.raises(ValueError, match="For 'DGCMomentum', the 'step' must be greater than "
                                         "or equal to 0, but got -1"):
        opt.stage(-1)
    with pytest.raises(ValueError, match="the 'step' must be greater than or equal to 0"):
        opt.exchange_stats(-1)


def _signature(**kwargs):
    args = dict(learning_rate=0.1, momentum=0.9, rampup_begin_step=10, sparsity=WARMUP)
    params = kwargs.pop("params", None) or _params()
    opt = ms_optim.DGCMomentum(params, **{**args, **kwargs})
    return opt.replicas.signature.asnumpy().tolist()


def test_the_workers_signature_holds_the_settings_and_the_names():
    """The row every worker all-gathers before each step: workers built with another
    momentum, rate, decay, clip or implementation, or with the same shapes under other names
    or in another order, are refused instead of drifting apart."""
    base = _signature()
    assert _signature() == base
    for other in (dict(momentum=0.8), dict(use_nesterov=True), dict(learning_rate=0.05),
                  dict(learning_rate=[0.1] * 20), dict(learning_rate=[0.1] * 21),
                  dict(weight_decay=1e-4), dict(loss_scale=2.0), dict(local_grad_clip_norm=1.0),
                  dict(impl="ops"), dict(exchange="allreduce"),
                  dict(params=_params(names=("a", "emb.table", "fc2.weight", "fc2.bias")))):
        assert _signature(**other) != base, other
    assert _signature(learning_rate=[0.1] * 20) != _signature(learning_rate=[0.1] * 21)


def test_a_worker_that_msrun_launched_must_have_called_init(monkeypatch):
    """Before mindspore.communication.init(), MindSpore answers msrun's RANK_SIZE as the
    world's size: the optimizer refuses to be built rather than train each worker alone."""
    monkeypatch.setenv("RANK_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"DGCMomentum is built in one of 2 workers "
                                           r"\(RANK_SIZE=2, as msrun sets it\), but "
                                           r"mindspore.communication.init\(\) has not been called"):
        ms_optim.DGCMomentum(_params(), 0.1, 0.9, 10)
    monkeypatch.setenv("RANK_SIZE", "1")
    assert ms_optim.DGCMomentum(_params(), 0.1, 0.9, 10).nranks == 1


def test_bad_regularizer_coefficients():
    with pytest.raises(ValueError, match="coeff"):
        L1Decay(-1.0)
    with pytest.raises(TypeError, match="coeff"):
        L2Decay("0.1")
    for bad in (float("nan"), float("inf")):
        for cls in (L1Decay, L2Decay):
            with pytest.raises(ValueError, match="'coeff' must be finite"):
                cls(bad)


def test_at_least_one_entry_is_sent():
    """A sparsity that rounds k down to 0 still sends one entry per compressed parameter."""
    params = _params()
    opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                               sparsity=[0.99999])
    assert opt.stage_k == ((1, 1),)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 0, 1, [0.99999])
    rng = np.random.default_rng(4)
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], 0.1)
    assert_close_to_mindspore([p.asnumpy() for p in params], ref.params)


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["native", "ops"])
def test_as_many_parameters_as_resnet50(impl, monkeypatch):
    """161 parameters (ResNet-50's count).  impl="ops" steps each parameter in graph code,
    which needs more than MindSpore's default max_call_depth of 1000: the optimizer raises
    it.  impl="native" steps them with multi-tensor ops and maps, in a graph that compiles
    within the default limit (the limit is left alone).  Both match the reference."""
    monkeypatch.setattr(ms_optim.dgc.checks, "_call_depth_set", 0)
    shapes = [(8,)] * 150 + [(16384,)] * 11
    rng = np.random.default_rng(7)
    params = [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=f"w{i}")
              for i, s in enumerate(shapes)]
    opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=1,
                               sparsity=[0.999], impl=impl, loss_scale=2.0, weight_decay=1e-3)
    # raised with mindspore.set_recursion_limit, which get_context does not see
    if impl == "ops":
        assert ms_optim.dgc.checks._call_depth_set >= 1000 + 16 * len(shapes)
    else:
        assert ms_optim.dgc.checks._call_depth_set == 0
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 1, 1, [0.999],
                                 wd=[1e-3] * len(shapes), loss_scale=2.0)
    for _ in range(3):  # one dense warm-up step, then compressed
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], 0.1)
    assert_close_to_mindspore([p.asnumpy() for p in params], ref.params)


# ---------------------------------------------------------------- float16 --

F16_SHAPES = [(130, 129), (20000,), (7, 3), (11,)]
F16_DTYPES = [np.float16, np.float16, np.float32, np.float16]  # compressed: the first two
F16_CONFIGS = {**CONFIGS, "l1_nesterov": dict(regularization=L1Decay(1e-3), use_nesterov=True)}


def _f16_params(rng):
    return [Parameter(Tensor(rng.standard_normal(s).astype(d)), name=n) for s, d, n in
            zip(F16_SHAPES, F16_DTYPES, ("fc.weight", "emb.table", "fc2.weight", "fc2.bias"))]


def _f16_run(impl, config, steps):
    """Trains float16 parameters and the reference side by side for `steps` steps."""
    cfg = F16_CONFIGS[config]
    rng = np.random.default_rng(0)
    params = _f16_params(rng)
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=5,
                               rampup_step=30, sparsity=WARMUP, impl=impl, **cfg)
    ref = _reference_for(params, cfg)
    scale = cfg.get("loss_scale", 1.0)
    for _ in range(steps):
        grads = [(rng.standard_normal(s) * scale).astype(d) for s, d in zip(F16_SHAPES, F16_DTYPES)]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], 0.05)
    return params, opt, ref


@pytest.mark.parametrize("impl,config", _plain_native_first([("native", c) for c in (
    "plain", "l2_loss_scale", "weight_decay_nesterov", "l1_nesterov")]
    + [("ops", "plain"), ("ops", "l1_nesterov")]))
def test_float16_optimizer_matches_reference(impl, config):
    """float16 parameters of >= 16384 elements are compressed with float32 residuals and match
    the reference bit for bit through the dense steps 0-4, every warm-up stage and 0.999
    (ops.topk met no ties at the k-th magnitude with these data)."""
    params, opt, ref = _f16_run(impl, config, 64)
    assert opt.compressed_params == ["fc.weight", "emb.table"]
    assert [u.dtype for u in opt.u] == [ms.float32, ms.float32, ms.float32, ms.float16]
    assert [v.dtype for v in opt.v] == [ms.float32, ms.float32]
    comp = list(opt.comp_ids)
    got = [params[i].asnumpy() for i in comp] + [opt.u[i].asnumpy() for i in comp] \
        + [v.asnumpy() for v in opt.v]
    want = [ref.params[i] for i in comp] + [ref.u[0][i] for i in comp] \
        + [ref.v[0][i] for i in comp]
    for a, e in zip(got, want):
        assert a.dtype == e.dtype
        np.testing.assert_array_equal(a, e)
    # the float32 parameter among them is unaffected by its float16 neighbours
    assert_close_to_mindspore([params[2].asnumpy()], [ref.params[2]])


@pytest.mark.slow
@pytest.mark.parametrize("config", ["nesterov_clip", "grad_clip_l1"])
def test_float16_local_clipping_in_float32(config):
    """Clipping a float16 parameter's gradient happens in float32: over the dense steps (no
    selection, so no near-ties to flip) u matches to float32 rounding (the norms are summed in
    other orders) and p to within two float16 roundings."""
    params, opt, ref = _f16_run("native", config, 5)
    comp = list(opt.comp_ids)
    assert_close_to_mindspore([opt.u[i].asnumpy() for i in comp], [ref.u[0][i] for i in comp])
    for i in comp:
        np.testing.assert_allclose(params[i].asnumpy().astype(np.float32),
                                   ref.params[i].astype(np.float32), rtol=2 ** -9, atol=2 ** -24)


def _uncompressed_warnings(params, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = ms_optim.DGCMomentum(params, **{**DGC_BASE, **kwargs})
    return opt, [str(w.message) for w in caught if "exchanged dense" in str(w.message)]


def test_large_uncompressed_parameter_warns_once():
    rng = np.random.default_rng(0)
    params = [Parameter(Tensor(rng.standard_normal(20000)), name="big64"),  # float64
              Parameter(Tensor(rng.standard_normal(16384).astype(np.float16)), name="big16"),
              Parameter(Tensor(rng.standard_normal(16383)), name="small64"),
              Parameter(Tensor(rng.standard_normal(16384).astype(np.float32)), name="big32"),
              Parameter(Tensor(rng.standard_normal((128, 128))), name="square64")]
    opt, warned = _uncompressed_warnings(params)
    assert opt.compressed_params == ["big16", "big32"]
    assert len(warned) == 2
    assert "'big64' (float64, 20000 elements)" in warned[0] and "float32 and float16" in warned[0]
    assert "'square64' (float64, 16384 elements)" in warned[1]


def test_a_network_too_small_to_compress_warns_once():
    net = nn.Dense(10, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = ms_optim.DGCMomentum(net.trainable_params(), **DGC_BASE)
    assert opt.compressed_params == []
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert messages[0].startswith("DGCMomentum compresses none of its 2 parameter(s)")
    assert "16384 elements or more" in messages[0] and "the largest here has 20" in messages[0]
    assert caught[0].filename == __file__  # attributed to the caller
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ms_optim.DGCMomentum(nn.Dense(128, 128).trainable_params(), **DGC_BASE)
    assert not caught


def test_bfloat16_parameters(monkeypatch):
    """MindSpore 2.10 has no bfloat16 Assign (nor MatMul, Sub, Reshape) on CPU: a bfloat16
    parameter is rejected there; on another target it is sent dense, with one warning."""
    big = Parameter(Tensor(np.ones(20000, np.float32), ms.bfloat16), name="big_bf16")
    small = Parameter(Tensor(np.ones(8, np.float32), ms.bfloat16), name="small_bf16")
    with pytest.raises(TypeError, match="'big_bf16' is bfloat16"):
        ms_optim.DGCMomentum([big, small], **DGC_BASE)
    real = ms_optim.dgc.optimizer.context.get_context
    monkeypatch.setattr(ms_optim.dgc.optimizer.context, "get_context",
                        lambda key: "GPU" if key == "device_target" else real(key))
    opt, warned = _uncompressed_warnings([big, small], impl="ops")
    assert opt.compressed_params == [] and opt.impl == "ops"
    assert len(warned) == 1 and "'big_bf16'" in warned[0] and "bfloat16" in warned[0]


# ---------------------------------------------------------- recursion limit --

def test_raises_recursion_limit_without_set_context(monkeypatch, capfd):
    calls = []
    real = ms.set_recursion_limit
    monkeypatch.setattr(ms, "set_recursion_limit", lambda n: (calls.append(n), real(n))[1])

    def no_set_context(**kw):
        raise AssertionError(f"context.set_context({kw}) called")

    monkeypatch.setattr(context, "set_context", no_set_context)
    monkeypatch.setattr(ms, "set_context", no_set_context)
    monkeypatch.setattr(dgc.checks, "_call_depth_set", 0)
    count = 80
    params = named_params(shapes={f"w{i}": (3,) for i in range(count)})
    # impl="ops" steps each parameter in graph code (impl="native" needs no raise)
    ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                         impl="ops")
    assert calls == [1000 + 16 * count]
    assert dgc.checks._call_depth_set == 1000 + 16 * count
    # never lowered: a smaller optimizer built afterwards leaves the limit alone
    ms_optim.DGCMomentum(named_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                         impl="ops")
    assert calls == [1000 + 16 * count]
    err = capfd.readouterr().err
    assert "deprecated" not in err and "max_call_depth" not in err


def test_never_lowers_max_call_depth_of_context(monkeypatch):
    calls = []
    monkeypatch.setattr(ms, "set_recursion_limit", calls.append)
    monkeypatch.setattr(dgc.checks, "_call_depth_set", 0)
    real_get = context.get_context
    monkeypatch.setattr(context, "get_context",
                        lambda key: 100000 if key == "max_call_depth" else real_get(key))
    ms_optim.DGCMomentum(named_params(shapes={f"w{i}": (3,) for i in range(40)}), learning_rate=0.1,
                         momentum=0.9, rampup_begin_step=0, impl="ops")
    assert calls == []


def test_reference_schedule_agrees_with_the_plan():
    """reference.dgc_k and DGC_MIN_NUMEL are written apart from ms_optim.dgc.schedule, which
    the optimizer steps by: they agree on every step of a range of warm-ups, sizes and
    bucket sparsities."""
    from ms_optim.dgc import schedule
    assert reference.DGC_MIN_NUMEL == schedule.MIN_COMPRESSED_NUMEL
    sparsities = ([0.999], [0.75, 0.9375, 0.984375, 0.996, 0.999], [0.5, 0.9, 0.99])
    for sparsity in sparsities:
        for begin, rampup in ((0, 1), (3, 7), (10, 168), (0, 5)):
            for numel in (1, 7, 16384, 16385, 1_000_003, 25_557_032):
                for bucket in (None, 0.9, 0.9999):
                    for step in range(begin, begin + rampup + 3):
                        stage = schedule.stage_index(step, begin, rampup, len(sparsity))
                        s = sparsity[stage]
                        if bucket is not None:
                            s = schedule.bucket_stage_sparsity(s, bucket)
                        assert reference.dgc_k(numel, step, begin, rampup, sparsity, bucket) \
                            == schedule.selected_k(numel, s), (sparsity, begin, numel, step)


class _Tuples(nn.Cell):
    """plan.pick, flatten, cut and assign_each in one graph over `params`: the tensors at
    `ids` doubled through one float32 buffer and assigned back."""

    def __init__(self, params, ids):
        super().__init__()
        self.params = tuple(params)
        self.how = dgc.plan.index_pick(ids)
        picked = [params[i] for i in ids]
        self.cut_plan = dgc.plan.cut_plan([int(np.prod(p.shape)) for p in picked])
        self.two = Tensor(2.0, ms.float32)

    def construct(self):
        picked = dgc.plan.pick(self.params, self.how)
        flat = dgc.plan.flatten(picked, ms.float32) * self.two
        return ms.ops.depend(self.two, dgc.plan.assign_each(picked, dgc.plan.cut(
            flat, picked, self.cut_plan)))


def test_dgc_graph_tuples_of_many_tensors_compile_and_match_numpy():
    """The step's tuples of one tensor per parameter (plan.pick by index, flatten into one
    buffer, cut back in each tensor's shape and dtype) are one Map each: with 700 tensors
    (a tuple grown in a loop passes MindSpore's call-depth limit of 1000 at about 500)
    the graph compiles, and every picked tensor is doubled in its own dtype while the
    others keep their values."""
    rng = np.random.default_rng(5)
    shapes = [(1 + i % 7,) if i % 3 else (2, 1 + i % 5) for i in range(700)]
    dtypes = [np.float16 if i % 4 == 1 else np.float32 for i in range(700)]
    values = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    params = [Parameter(Tensor(v), name=f"t{i}") for i, v in enumerate(values)]
    ids = tuple(i for i in range(700) if i % 5 != 2)  # not consecutive: the Map over indices
    _Tuples(params, ids)()
    for i, (p, v) in enumerate(zip(params, values)):
        want = (v.astype(np.float32) * 2).astype(v.dtype) if i in ids else v
        assert p.asnumpy().dtype == v.dtype
        np.testing.assert_array_equal(p.asnumpy(), want, err_msg=p.name)
