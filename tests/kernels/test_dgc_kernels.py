"""DGCMomentum's native kernels (top-k, selection and residuals, apply, dense momentum, the
replica check) against the numpy reference, per ISA."""
import numpy as np
import pytest

from ms_optim import _native, kernels, reference
from tests.sizes import EDGE_SIZES, SIZE_PARAMS

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


@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("kind", ["random", "negative", "all_equal", "ties"])
def test_topk_matches_reference(isa, n, kind):
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


@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("nesterov", [False, True])
def test_select_kernel_matches_reference(isa, n, nesterov):
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


@pytest.mark.parametrize("n", EDGE_SIZES)
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_apply_kernel_param_dtypes(isa, n, ranks, dtype):
    """float16 params: p = f16(f32(p) - lr * sum(values) / R) on the touched elements, the others
    unchanged; float32 params keep the float32 rule.  Another parameter's entries come first in
    each worker's block, so the layout's offset is used."""
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


@pytest.mark.parametrize("nesterov", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_select_multi_kernel_matches_reference(isa, nesterov, kind):
    """One op over tensors of odd sizes: each tensor's selection is the reference's, written
    side by side (the fused exchange buffer), residuals updated and masked.  "ties": a few
    magnitudes shared by many entries (the sample misjudges: the exact fallback runs)."""
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


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("group_lr", [False, True])
def test_apply_multi_kernel_matches_reference(isa, ranks, dtype, group_lr):
    """Every tensor of the bucket gets p -= lr_j * scatter_add(every worker's values) / R
    from its own entries of the fused buffers (a tensor outside the bucket comes first)."""
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


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("group_lr", [False, True])
def test_momentum_kernel_matches_reference(isa, nesterov, group_lr):
    """The dense momentum of float32 and (widened) float16 parameters of odd sizes, their
    gradients picked from a longer list by index, against reference.dgc_momentum bit for bit;
    a source the op does not name (float64) is never read."""
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
