"""DGCMomentum: top-k and residual kernels, and the optimizer, against the numpy reference."""
import warnings

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor

import ms_optim
from ms_optim import _native, kernels, reference
from ms_optim.clip import ClipGradByGlobalNorm, ClipGradByNorm
from ms_optim.regularizer import L1Decay, L2Decay
from tests.helpers import (assert_checkpoint_resumes, assert_close_to_mindspore, assert_trained, batch,
                      fit_and_score, fit_reference, train_cell, values)
from tests.nets import WideNet

ISAS = [name for name in ("scalar", "avx2", "avx512")
        if _native.lib().msopt_select_isa(name.encode()) == 0]
SIZES = [1, 7, 16383, 16385, 1_000_003]
WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]


def _topk(x, k):
    idx, val = np.zeros(k, np.int32), np.zeros(k, np.float32)
    _native.call_aot("ms_optim_topk_abs", [x, idx, val])
    return idx, val


def _check_topk(x, k):
    idx, val = _topk(x, k)
    want_idx, want_val = reference.topk_abs(x, k)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(val, want_val)


def _inputs(kind, n, rng):
    if kind == "random":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "negative":
        return -np.abs(rng.standard_normal(n)).astype(np.float32)
    if kind == "all_equal":
        return np.full(n, -2.5, np.float32)
    if kind == "ties":  # a few magnitudes, each shared by many entries of both signs
        return (rng.integers(0, 4, n) * rng.choice([-1, 1], n)).astype(np.float32)
    raise ValueError(kind)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["random", "negative", "all_equal", "ties"])
def test_topk_matches_reference(isa, n, kind, fresh_isa):
    _native.select_isa(isa)
    rng = np.random.default_rng(n)
    x = _inputs(kind, n, rng)
    for k in sorted({1, max(1, n // 4), max(1, n // 1000), n}):
        _check_topk(x, k)


def test_topk_sample_misjudged_both_ways():
    """Data built against the strided sample: the exact fallback must take over."""
    n = 1_000_003
    m = n // 64  # the sample topk.cpp takes: every 64th element, at least 4096, at most 65536
    stride = n // m
    sampled = np.arange(m) * stride + stride // 2
    rng = np.random.default_rng(0)
    # too few candidates: the sampled entries are the large ones
    x = (rng.random(n) * 1e-3).astype(np.float32)
    x[sampled] = 100 + rng.random(m).astype(np.float32)
    _check_topk(x, 50_000)
    # too many: the sampled entries are tiny, everything else ties just above them
    x = np.full(n, 1.0, np.float32)
    x[sampled] = 1e-6
    _check_topk(x, 25)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_select_kernel_matches_reference(isa, n, nesterov, fresh_isa):
    _native.select_isa(isa)
    rng = np.random.default_rng(n + 7)
    u, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    ru, rv = u.copy(), v.copy()
    for step in range(4):
        g = rng.standard_normal(n).astype(np.float32)
        k = max(1, int(n * (1 - WARMUP[step])))
        idx, val = np.zeros(k, np.int32), np.zeros(k, np.float32)
        # one tensor through the multi-tensor op (K = 1)
        _native.call_aot("ms_optim_dgc_select_multi",
                         [u, v, g, _consts(nesterov), np.array([k], np.int32), idx, val])
        want_idx, want_val = reference.dgc_select(ru, rv, g, 0.9, k, nesterov)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(val, want_val)
        np.testing.assert_array_equal(u, ru)
        np.testing.assert_array_equal(v, rv)


@pytest.mark.parametrize("ranks, n, k, ascending", [
    (3, 5000, 300, True),           # one cursor per worker, one thread
    (2, 1_000_003, 40_000, True),   # split over the threads by index range
    (5, 200_003, 30_000, True),
    (16, 70_001, 3_000, True),      # the most workers merged with cursors
    (17, 70_001, 3_000, True),      # more: the general merge
    (3, 200_003, 30_000, False),    # runs not ascending: the general merge
])
def test_apply_kernel_sums_workers_in_rank_order(ranks, n, k, ascending):
    """Fused buffers of `ranks` workers, 2 parameters each; the second parameter's entries
    applied.  Selections overlap across workers (drawn from the first quarter of the indices)."""
    k_other = 40
    rng = np.random.default_rng(ranks)
    sels, idx_all, val_all = [], [], []
    for _ in range(ranks):
        idx = np.sort(rng.choice(n // 4, k, replace=False)).astype(np.int32)
        if not ascending:
            idx = rng.permutation(idx)
        val = rng.standard_normal(k).astype(np.float32)
        sels.append((idx, val))
        other = rng.integers(0, 10, k_other).astype(np.int32)  # another parameter's entries
        idx_all += [other, idx]
        val_all += [rng.standard_normal(k_other).astype(np.float32), val]
    p = rng.standard_normal(n).astype(np.float32)
    want = p - np.float32(0.1) * reference.dgc_aggregate(n, sels)
    _native.call_aot("ms_optim_dgc_apply_multi", [p, np.concatenate(idx_all), np.concatenate(val_all),
                                            np.array(0.1, np.float32),
                                            np.array([ranks, k_other, k], np.int32),
                                            np.zeros(1, np.float32)])
    np.testing.assert_array_equal(p, want)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 7, 16383, 16385])
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_apply_kernel_param_dtypes(isa, n, ranks, dtype, fresh_isa):
    """float16 params: p = f16(f32(p) - lr * sum(values) / R) on the touched elements, the others
    unchanged; float32 params keep the float32 rule.  Another parameter's entries come first in
    each worker's block, so the layout's offset is used."""
    _native.select_isa(isa)
    rng = np.random.default_rng(n * 10 + ranks)
    k, k_other, lr = max(1, n // 3), 5, np.float32(0.1)
    # steps as large as the values: their low bits decide the rounding of the result
    p = (rng.standard_normal(n) * 0.05).astype(dtype)
    if n > 100:
        p[:3] = np.array([0.0, -0.0, 6e-8], dtype)  # zeros and a float16 subnormal
    before = p.copy()
    sels, idx_all, val_all = [], [], []
    for _ in range(ranks):  # overlapping selections when ranks == 2
        idx = np.sort(rng.choice(n, k, replace=False)).astype(np.int32)
        val = (rng.standard_normal(k) * 0.5).astype(np.float32)
        sels.append((idx, val))
        idx_all += [rng.integers(0, n, k_other).astype(np.int32), idx]
        val_all += [rng.standard_normal(k_other).astype(np.float32), val]
    want = (before.astype(np.float32) - lr * reference.dgc_aggregate(n, sels)).astype(dtype)
    _native.call_aot("ms_optim_dgc_apply_multi", [p, np.concatenate(idx_all), np.concatenate(val_all),
                                            np.array(lr), np.array([ranks, k_other, k], np.int32),
                                            np.zeros(1, np.float32)])
    assert p.dtype == dtype
    np.testing.assert_array_equal(p.view(np.uint8), want.view(np.uint8))
    assert (want != before).any()  # the step changed something at this precision


@pytest.mark.parametrize("ranks", [1, 2])
def test_apply_kernel_float16_is_not_rounded_twice(ranks):
    """0.5 - s with s just below 1.5 float16 ulps of the result: rounded once it is 0.4998
    (bits 14335); rounding s to float16 first, or subtracting in float16, gives 0.4995."""
    s = np.float32(1.5 * 2 ** -12 - 2 ** -24)
    p = np.array([0.5, 0.25], np.float16)
    # lr 0.125 and values 8 s: lr * (sum / ranks) is s exactly
    idx = np.zeros(ranks, np.int32)
    val = np.full(ranks, 8 * s, np.float32)
    _native.call_aot("ms_optim_dgc_apply_multi", [p, idx, val, np.array(0.125, np.float32),
                                            np.array([ranks, 0, 1], np.int32),
                                            np.zeros(1, np.float32)])
    assert p.view(np.uint16).tolist() == [14335, np.float16(0.25).view(np.uint16)]


# ------------------------------------------------- multi-tensor kernels --

MULTI_SIZES = [1, 7, 16383, 16385, 40_001]


def _consts(nesterov):
    return kernels.consts_array("dgc", momentum=0.9, nesterov=nesterov)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_select_multi_kernel_matches_reference(isa, nesterov, kind, fresh_isa):
    """One op over tensors of odd sizes: each tensor's selection is the reference's, written
    side by side (the fused exchange buffer), residuals updated and masked.  "ties": a few
    magnitudes shared by many entries (the sample misjudges: the exact fallback runs)."""
    _native.select_isa(isa)
    rng = np.random.default_rng(11)
    sizes = MULTI_SIZES + [1_000_003]
    u = [np.zeros(n, np.float32) for n in sizes]
    v = [np.zeros(n, np.float32) for n in sizes]
    ru, rv = [x.copy() for x in u], [x.copy() for x in v]
    for step in range(3):
        g = [_inputs(kind, n, rng) for n in sizes]
        ks = [max(1, int(n * (1 - WARMUP[step + 2]))) for n in sizes]
        idx, val = np.zeros(sum(ks), np.int32), np.zeros(sum(ks), np.float32)
        _native.call_aot("ms_optim_dgc_select_multi",
                         u + v + g + [_consts(nesterov), np.array(ks, np.int32), idx, val])
        want = [reference.dgc_select(ru[j], rv[j], g[j], 0.9, ks[j], nesterov)
                for j in range(len(sizes))]
        np.testing.assert_array_equal(idx, np.concatenate([w[0] for w in want]))
        np.testing.assert_array_equal(val, np.concatenate([w[1] for w in want]))
        for j in range(len(sizes)):
            np.testing.assert_array_equal(u[j], ru[j])
            np.testing.assert_array_equal(v[j], rv[j])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("group_lr", [False, True])
def test_apply_multi_kernel_matches_reference(isa, ranks, dtype, group_lr, fresh_isa):
    """Every tensor of the bucket gets p -= lr_j * scatter_add(every worker's values) / R
    from its own entries of the fused buffers (a tensor outside the bucket comes first)."""
    _native.select_isa(isa)
    rng = np.random.default_rng(ranks)
    sizes = MULTI_SIZES
    ks = [max(1, n // 7) for n in sizes]
    k_other = 3
    offsets = [k_other + sum(ks[:j]) for j in range(len(sizes))]
    lrs = np.array([0.1 * (j + 1) for j in range(len(sizes))] if group_lr else [0.1], np.float32)
    p = [(rng.standard_normal(n) * 0.05).astype(dtype) for n in sizes]
    before = [x.copy() for x in p]
    idx_all, val_all, sels = [], [], [[] for _ in sizes]
    for _ in range(ranks):
        idx_all.append(rng.integers(0, 5, k_other).astype(np.int32))
        val_all.append(rng.standard_normal(k_other).astype(np.float32))
        for j, n in enumerate(sizes):
            idx = np.sort(rng.choice(n, ks[j], replace=False)).astype(np.int32)
            val = rng.standard_normal(ks[j]).astype(np.float32)
            sels[j].append((idx, val))
            idx_all.append(idx)
            val_all.append(val)
    layout = np.array([ranks] + offsets + ks, np.int32)
    _native.call_aot("ms_optim_dgc_apply_multi", p + [np.concatenate(idx_all),
                                                      np.concatenate(val_all), lrs, layout,
                                                      np.zeros(1, np.float32)])
    for j, n in enumerate(sizes):
        lr = lrs[j if group_lr else 0]
        want = (before[j].astype(np.float32) - lr * reference.dgc_aggregate(n, sels[j])).astype(dtype)
        np.testing.assert_array_equal(p[j].view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("group_lr", [False, True])
def test_momentum_kernel_matches_reference(isa, nesterov, group_lr, fresh_isa):
    """The dense momentum of float32 and (widened) float16 parameters of odd sizes, their
    gradients picked from a longer list by index, against reference.dgc_momentum bit for bit;
    a source the op does not name (float64) is never read."""
    _native.select_isa(isa)
    rng = np.random.default_rng(3)
    sizes = MULTI_SIZES + [1_000_003]
    dtypes = [np.float32, np.float16] * 3
    p = [rng.standard_normal(n).astype(d) for n, d in zip(sizes, dtypes)]
    u = [np.zeros(n, np.float32) for n in sizes]
    rp, ru = [x.copy() for x in p], [x.copy() for x in u]
    lrs = np.array([0.05 * (j + 1) for j in range(len(sizes))] if group_lr else [0.05], np.float32)
    for _ in range(3):
        g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
        src = [np.zeros(2)] + g[::-1]  # tensor j's gradient at 1 + (len - 1 - j)
        gidx = np.array([len(sizes) - j for j in range(len(sizes))], np.int32)
        _native.call_aot("ms_optim_dgc_momentum", p + u + src + [lrs, _consts(nesterov), gidx,
                                                                np.zeros(1, np.float32)])
        for j in range(len(sizes)):
            reference.dgc_momentum(rp[j], ru[j], g[j], lrs[j if group_lr else 0], 0.9, nesterov)
    for j in range(len(sizes)):
        np.testing.assert_array_equal(u[j], ru[j])
        np.testing.assert_array_equal(p[j].view(np.uint8), rp[j].view(np.uint8))


def test_multi_kernels_reject_bad_input():
    x, z1 = np.zeros(10, np.float32), np.zeros(1, np.float32)
    ks = np.array([2], np.int32)
    sel = "ms_optim_dgc_select_multi"
    with pytest.raises(RuntimeError, match="3K \\+ 4 tensors"):
        _native.call_aot(sel, [x, x, x, _consts(False), np.zeros(2, np.int32)])
    with pytest.raises(RuntimeError, match="must be float32"):
        _native.call_aot(sel, [x, x, np.zeros(10), _consts(False), ks, np.zeros(2, np.int32),
                               np.zeros(2, np.float32)])
    with pytest.raises(RuntimeError, match="sizes of tensor 0 differ"):
        _native.call_aot(sel, [x, np.zeros(9, np.float32), x, _consts(False), ks,
                               np.zeros(2, np.int32), np.zeros(2, np.float32)])
    with pytest.raises(RuntimeError, match="outside \\[1, 10\\]"):
        _native.call_aot(sel, [x, x, x, _consts(False), np.array([11], np.int32),
                               np.zeros(11, np.int32), np.zeros(11, np.float32)])
    with pytest.raises(RuntimeError, match="ks sum to 2, the outputs hold 3"):
        _native.call_aot(sel, [x, x, x, _consts(False), ks, np.zeros(3, np.int32),
                               np.zeros(3, np.float32)])
    with pytest.raises(RuntimeError, match="consts"):
        _native.call_aot(sel, [x, x, x, z1, ks, np.zeros(2, np.int32), np.zeros(2, np.float32)])
    app = "ms_optim_dgc_apply_multi"
    one = np.array([1], np.int32)
    with pytest.raises(RuntimeError, match="K \\+ 5 tensors"):
        _native.call_aot(app, [one, np.ones(1, np.float32), z1, np.array([1, 0, 1], np.int32)])
    with pytest.raises(RuntimeError, match="all float32 or all float16"):
        _native.call_aot(app, [x, np.zeros(10, np.float16), one, np.ones(1, np.float32), z1,
                               np.array([1, 0, 0, 1, 0], np.int32), z1])
    with pytest.raises(RuntimeError, match="all float32 or all float16, got float64"):
        _native.call_aot(app, [np.zeros(10), one, np.ones(1, np.float32), z1,
                               np.array([1, 0, 1], np.int32), z1])
    with pytest.raises(RuntimeError, match="index 10 outside"):
        _native.call_aot(app, [x, np.array([10], np.int32), np.ones(1, np.float32), z1,
                               np.array([1, 0, 1], np.int32), z1])
    with pytest.raises(RuntimeError, match="do not fit"):
        _native.call_aot(app, [x, np.array([1, 2], np.int32), np.ones(2, np.float32), z1,
                               np.array([1, 1, 2], np.int32), z1])
    with pytest.raises(RuntimeError, match="not 2 workers' blocks"):
        _native.call_aot(app, [x, np.array([1, 2, 3], np.int32), np.ones(3, np.float32), z1,
                               np.array([2, 0, 1], np.int32), z1])
    with pytest.raises(RuntimeError, match="lr/layout/done malformed"):
        _native.call_aot(app, [x, one, np.ones(1, np.float32), np.zeros(3, np.float32),
                               np.array([1, 0, 1], np.int32), z1])
    mom = "ms_optim_dgc_momentum"
    gidx = np.array([0], np.int32)
    with pytest.raises(RuntimeError, match="2K \\+ M \\+ 4 tensors"):
        _native.call_aot(mom, [x, x, z1, _consts(False), gidx, z1])
    with pytest.raises(RuntimeError, match="gidx\\[0\\] = 1 is outside \\[0, 1\\)"):
        _native.call_aot(mom, [x, x, x, z1, _consts(False), np.array([1], np.int32), z1])
    with pytest.raises(RuntimeError, match="gradient of tensor 0 must be float32, got float64"):
        _native.call_aot(mom, [x, x, np.zeros(10), z1, _consts(False), gidx, z1])
    with pytest.raises(RuntimeError, match="has 9 elements, not 10"):
        _native.call_aot(mom, [x, x, np.zeros(9, np.float32), z1, _consts(False), gidx, z1])
    with pytest.raises(RuntimeError, match="param 0 must be float32 or float16, got float64"):
        _native.call_aot(mom, [np.zeros(10), x, x, z1, _consts(False), gidx, z1])
    with pytest.raises(RuntimeError, match="lr must be"):
        _native.call_aot(mom, [x, x, x, np.zeros(2, np.float32), _consts(False), gidx, z1])
    with pytest.raises(RuntimeError, match="does not fit"):
        _native.call_aot(mom, [x, x, x, z1, _consts(False), np.zeros(3, np.int32), z1])


def test_replica_check_kernel():
    out = np.zeros(1, np.int32)
    same = np.array([3, 100, 7] * 2, np.int32)
    _native.call_aot("ms_optim_check_replicas", [same, np.array([3], np.int32), out])
    assert out[0] == 1
    with pytest.raises(RuntimeError, match="disagree"):
        _native.call_aot("ms_optim_check_replicas", [np.array([3, 100, 7, 3, 101, 7], np.int32),
                                                     np.array([3], np.int32), out])


def test_kernels_reject_bad_input():
    x = np.zeros(10, np.float32)
    with pytest.raises(RuntimeError, match="k"):
        _native.call_aot("ms_optim_topk_abs", [x, np.zeros(11, np.int32), np.zeros(11, np.float32)])
    with pytest.raises(RuntimeError, match="int32"):
        _native.call_aot("ms_optim_topk_abs", [x, np.zeros(3, np.float32), np.zeros(3, np.float32)])


# ------------------------------------------------------------ the optimizer --

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


@pytest.mark.parametrize("impl,config", [("native", c) for c in sorted(CONFIGS)]
                         + [("ops", "plain"), ("ops", "nesterov_clip")])
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


def _wide_dgc(dtype=ms.float32):
    ms.set_seed(1)
    net = WideNet(dtype)
    opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.05, momentum=0.9,
                               rampup_begin_step=2, rampup_step=4, sparsity=[0.9, 0.99])
    assert opt.compressed_params == ["fc1.weight"]
    return net, opt


def test_checkpoint_resume_matches_uninterrupted(tmp_path):
    def build():
        net, opt = _wide_dgc()
        return net, opt, train_cell(net, opt)

    assert_checkpoint_resumes(build, 12, *batch(n=32, n_in=64), str(tmp_path / "dgc.ckpt"),
                              lambda net, opt: values(net.trainable_params()) + values(opt.u)
                              + values(opt.v))


def test_trains_with_model_in_graph_mode():
    """ms.Model training (dense steps, both warm-up stages) steps as DGCReference driven
    by the gradients at its own parameters (computed by MindSpore)."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((256, 64)).astype(np.float32)
    ys = xs[:, :3].argmax(1).astype(np.int32)
    net, opt = _wide_dgc()
    losses, acc = fit_and_score(net, opt, xs, ys, epochs=8)
    ref_net, _ = _wide_dgc()  # the same initial weights
    ref = reference.DGCReference(values(ref_net.trainable_params()), 0.9, 2, 4, [0.9, 0.99])

    def step(grads):  # _wide_dgc's hyper-parameters
        ref.step([grads], 0.05)
        return ref.params

    ref_losses = fit_reference(ref_net, xs, ys, 8, step)
    assert_close_to_mindspore(values(net.trainable_params()), values(ref_net.trainable_params()))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    assert_trained(losses, acc, loss_ratio=0.1, min_acc=0.95)


BASE = dict(learning_rate=0.1, momentum=0.9, rampup_begin_step=0)
ERRORS = [
    (dict(momentum=-0.1), ValueError, "momentum"),
    (dict(momentum="0.9"), TypeError, "momentum"),
    (dict(rampup_begin_step=-1), ValueError, "rampup_begin_step"),
    (dict(rampup_begin_step=1.5), TypeError, "rampup_begin_step"),
    (dict(rampup_step=0), ValueError, "rampup_step"),
    (dict(sparsity=[]), ValueError, "sparsity"),
    (dict(sparsity=[0.9, 1.0]), ValueError, "sparsity"),
    (dict(sparsity=[-0.1]), ValueError, "sparsity"),
    (dict(sparsity=[0.99, 0.9]), ValueError, "sparsity"),
    (dict(sparsity=0.999), TypeError, "sparsity"),
    (dict(sparsity=["0.9"]), TypeError, "sparsity"),
    (dict(num_trainers=0), ValueError, "num_trainers"),
    (dict(num_trainers=2), ValueError, "num_trainers"),
    (dict(num_trainers=1.0), TypeError, "num_trainers"),
    (dict(use_nesterov=1), TypeError, "use_nesterov"),
    (dict(local_grad_clip_norm=0.0), ValueError, "local_grad_clip_norm"),
    (dict(grad_clip=ClipGradByGlobalNorm(1.0)), TypeError, "grad_clip"),
    (dict(grad_clip=ClipGradByNorm(1.0), local_grad_clip_norm=1.0), ValueError, "grad_clip"),
    (dict(regularization="l2"), TypeError, "regularization"),
    (dict(regularization=L2Decay(0.1), weight_decay=0.1), ValueError, "regularization"),
    (dict(learning_rate=-1.0), ValueError, "learning_rate"),
    (dict(loss_scale=0), ValueError, "loss_scale"),
    (dict(impl="gpu"), ValueError, "impl"),
]


@pytest.mark.parametrize("kwargs,exc,name", ERRORS, ids=[str(k) for k, _, _ in ERRORS])
def test_bad_arguments_raise_naming_the_argument(kwargs, exc, name):
    with pytest.raises(exc, match=name):
        ms_optim.DGCMomentum(_params(), **{**BASE, **kwargs})


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


@pytest.mark.parametrize("impl", ["native", "ops"])
def test_as_many_parameters_as_resnet50(impl, monkeypatch):
    """161 parameters (ResNet-50's count).  impl="ops" steps each parameter in graph code,
    which needs more than MindSpore's default max_call_depth of 1000: the optimizer raises
    it.  impl="native" steps them with multi-tensor ops and maps, in a graph that compiles
    within the default limit (the limit is left alone).  Both match the reference."""
    monkeypatch.setattr(ms_optim.dgc, "_call_depth_set", 0)
    shapes = [(8,)] * 150 + [(16384,)] * 11
    rng = np.random.default_rng(7)
    params = [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=f"w{i}")
              for i, s in enumerate(shapes)]
    opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=1,
                               sparsity=[0.999], impl=impl, loss_scale=2.0, weight_decay=1e-3)
    # raised with mindspore.set_recursion_limit, which get_context does not see
    if impl == "ops":
        assert ms_optim.dgc._call_depth_set >= 1000 + 16 * len(shapes)
    else:
        assert ms_optim.dgc._call_depth_set == 0
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


@pytest.mark.parametrize("impl,config", [("native", c) for c in (
    "plain", "l2_loss_scale", "weight_decay_nesterov", "l1_nesterov")]
    + [("ops", "plain"), ("ops", "l1_nesterov")])
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


def test_float16_network_checkpoint_carries_float32_residuals(tmp_path):
    """A float16 network through dense steps and both stages; the checkpoint holds float32
    u and v for the compressed weight and resumes bit for bit."""
    path = str(tmp_path / "dgc16.ckpt")

    def build():
        net, opt = _wide_dgc(ms.float16)
        return net, opt, train_cell(net, opt)

    assert_checkpoint_resumes(build, 12, *batch(n=32, n_in=64, dtype=np.float16), path,
                              lambda net, opt: values(net.trainable_params()) + values(opt.u)
                              + values(opt.v))
    saved = ms.load_checkpoint(path)
    assert saved["fc1.weight"].dtype == ms.float16
    assert saved["dgc_u.fc1.weight"].dtype == ms.float32
    assert saved["dgc_v.fc1.weight"].dtype == ms.float32
    assert saved["dgc_u.fc1.bias"].dtype == ms.float16  # not compressed: its own dtype


def _uncompressed_warnings(params, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = ms_optim.DGCMomentum(params, **{**BASE, **kwargs})
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


def test_bfloat16_parameters(monkeypatch):
    """MindSpore 2.10 has no bfloat16 Assign (nor MatMul, Sub, Reshape) on CPU: a bfloat16
    parameter is rejected there; on another target it is sent dense, with one warning."""
    big = Parameter(Tensor(np.ones(20000, np.float32), ms.bfloat16), name="big_bf16")
    small = Parameter(Tensor(np.ones(8, np.float32), ms.bfloat16), name="small_bf16")
    with pytest.raises(TypeError, match="'big_bf16' is bfloat16"):
        ms_optim.DGCMomentum([big, small], **BASE)
    real = ms_optim.dgc.context.get_context
    monkeypatch.setattr(ms_optim.dgc.context, "get_context",
                        lambda key: "GPU" if key == "device_target" else real(key))
    opt, warned = _uncompressed_warnings([big, small], impl="ops")
    assert opt.compressed_params == [] and opt.impl == "ops"
    assert len(warned) == 1 and "'big_bf16'" in warned[0] and "bfloat16" in warned[0]
