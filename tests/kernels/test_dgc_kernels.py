"""DGCMomentum's native kernels (top-k, selection and residuals, the shared-index exchanges'
propose and take, apply, dense momentum, the replica check) against the numpy reference, per
ISA."""
import numpy as np
import pytest

from ms_optim import aot, reference, testing
from tests.kernels.errors import rejects
from tests.sizes import EDGE_SIZES, SIZE_PARAMS

WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]


def _topk(x, k):
    idx, val = np.zeros(k, np.int32), np.zeros(k, np.float32)
    testing.call_kernel("ms_optim_topk_abs", x=x, idx=idx, val=val)
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
    if kind == "nan_inf":  # NaN above inf above every number, whatever the threshold lands on
        x = rng.standard_normal(n).astype(np.float32)
        x[::97], x[5::89], x[n // 2] = np.nan, -np.inf, np.nan
        return x
    raise ValueError(kind)


@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("kind", ["random", "negative", "all_equal", "ties", "nan_inf"])
def test_topk_matches_reference(isa, n, kind):
    rng = np.random.default_rng(n)
    x = _inputs(kind, n, rng)
    for k in sorted({1, max(1, n // 4), max(1, n // 1000), n}):
        _check_topk(x, k)


def _cpu_sample_positions(n):
    """The elements kernels/topk.cpp samples for its threshold: one in 256 (4096 to 16384 of
    them), each at a hashed place in its window of n // m."""
    m = min(n, 16384, max(4096, n // 256))
    stride = n // m
    j = np.arange(m, dtype=np.uint64)
    offset = ((j * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)) % np.uint64(stride)
    return (j * np.uint64(stride) + offset).astype(np.int64)


def test_topk_sample_misjudged_both_ways():
    """Data built against the sample: the exact fallback must take over."""
    n = 1_000_003
    sampled = _cpu_sample_positions(n)
    m = sampled.size
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
        testing.call_kernel("ms_optim_dgc_select_multi", u=[u], v=[v], grad=[g],
                            consts=_consts(nesterov), ks=np.array([k], np.int32), idx=idx, val=val)
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
    testing.call_kernel("ms_optim_dgc_apply_multi", param=[p], idx=np.concatenate(idx_all),
                        val=np.concatenate(val_all), lr=np.array(0.1, np.float32),
                        layout=np.array([ranks, k_other, k], np.int32),
                        done=np.zeros(1, np.float32))
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
    testing.call_kernel("ms_optim_dgc_apply_multi", param=[p], idx=np.concatenate(idx_all),
                        val=np.concatenate(val_all), lr=np.array(lr),
                        layout=np.array([ranks, k_other, k], np.int32),
                        done=np.zeros(1, np.float32))
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
    testing.call_kernel("ms_optim_dgc_apply_multi", param=[p], idx=idx, val=val,
                        lr=np.array(0.125, np.float32), layout=np.array([ranks, 0, 1], np.int32),
                        done=np.zeros(1, np.float32))
    assert p.view(np.uint16).tolist() == [14335, np.float16(0.25).view(np.uint16)]


# ------------------------------------------------- multi-tensor kernels --

MULTI_SIZES = [1, 7, 16383, 16385, 40_001]


def _consts(nesterov):
    return aot.consts_array("dgc", momentum=0.9, nesterov=nesterov)


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
        testing.call_kernel("ms_optim_dgc_select_multi", u=u, v=v, grad=g,
                            consts=_consts(nesterov), ks=np.array(ks, np.int32), idx=idx, val=val)
        want = [reference.dgc_select(ru[j], rv[j], g[j], 0.9, ks[j], nesterov)
                for j in range(len(sizes))]
        np.testing.assert_array_equal(idx, np.concatenate([w[0] for w in want]))
        np.testing.assert_array_equal(val, np.concatenate([w[1] for w in want]))
        for j in range(len(sizes)):
            np.testing.assert_array_equal(u[j], ru[j])
            np.testing.assert_array_equal(v[j], rv[j])


def _propose(u, v, g, ks, nesterov):
    idx = np.zeros(sum(ks), np.int32)
    testing.call_kernel("ms_optim_dgc_propose_multi", u=u, v=v, grad=g, consts=_consts(nesterov),
                        ks=np.array(ks, np.int32), idx=idx)
    return idx


def _take(u, v, idx, ks, blocks=1):
    """The take kernel on `blocks` blocks of the fused buffer `idx` (each parameter's k side
    by side in each block)."""
    layout = np.array([blocks] + list(np.cumsum([0] + ks[:-1])) + list(ks), np.int32)
    val = np.zeros(idx.size, np.float32)
    testing.call_kernel("ms_optim_dgc_take_multi", u=u, v=v, idx=idx, layout=layout, val=val)
    return val


def _reference_take(u, v, idx, ks, blocks=1):
    """reference.dgc_take per parameter on its entries of every block, in block order, put
    back at their positions."""
    val = np.zeros(idx.size, np.float32)
    block, offsets = idx.size // blocks, np.cumsum([0] + ks[:-1])
    for j, k in enumerate(ks):
        where = np.concatenate([w * block + offsets[j] + np.arange(k) for w in range(blocks)])
        val[where] = reference.dgc_take(u[j], v[j], idx[where])
    return val


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("shared", ["leader", "union"])
def test_propose_and_take_kernels_match_reference(isa, nesterov, kind, shared):
    """The shared-index exchanges' halves over tensors of odd sizes, three workers, three
    steps: every worker's propose is the reference's (indices; u and v updated, nothing
    masked), and each worker's take is the reference's (values; u and v masked there) at the
    leader's indices, or at every worker's proposals side by side (an index two workers
    propose is taken once)."""
    rng = np.random.default_rng(5)
    sizes = MULTI_SIZES
    workers = 3
    u = [[np.zeros(n, np.float32) for n in sizes] for _ in range(workers)]
    v = [[np.zeros(n, np.float32) for n in sizes] for _ in range(workers)]
    ru = [[x.copy() for x in w] for w in u]
    rv = [[x.copy() for x in w] for w in v]
    repeats = 0
    for step in range(3):
        ks = [max(1, int(n * (1 - WARMUP[step + 2]))) for n in sizes]
        proposals = []
        for w in range(workers):
            g = [_inputs(kind, n, rng) for n in sizes]
            proposals.append(_propose(u[w], v[w], g, ks, nesterov))
            want = [reference.dgc_propose(ru[w][j], rv[w][j], g[j], 0.9, ks[j], nesterov)
                    for j in range(len(sizes))]
            np.testing.assert_array_equal(proposals[w], np.concatenate(want))
            for j in range(len(sizes)):
                np.testing.assert_array_equal(u[w][j], ru[w][j])
                np.testing.assert_array_equal(v[w][j], rv[w][j])
        if shared == "leader":
            idx, blocks = proposals[reference.dgc_leader(step, workers)], 1
        else:
            idx, blocks = np.concatenate(proposals), workers
            offsets = np.cumsum([0] + ks)
            repeats += sum(workers * ks[j] - np.unique(np.concatenate(
                [p[offsets[j]:offsets[j + 1]] for p in proposals])).size for j in range(len(ks)))
        for w in range(workers):
            val = _take(u[w], v[w], idx, ks, blocks)
            np.testing.assert_array_equal(val, _reference_take(ru[w], rv[w], idx, ks, blocks))
            for j in range(len(sizes)):
                np.testing.assert_array_equal(u[w][j], ru[w][j])
                np.testing.assert_array_equal(v[w][j], rv[w][j])
    if shared == "union" and kind == "ties":
        assert repeats > 0  # indices two workers proposed: taken once


def test_propose_then_take_is_select(isa):
    """On one worker the two halves are the select, bit for bit (outputs and residuals)."""
    rng = np.random.default_rng(9)
    sizes = MULTI_SIZES
    ks = [max(1, n // 97) for n in sizes]
    u1 = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    v1 = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    u2, v2 = [x.copy() for x in u1], [x.copy() for x in v1]
    g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    idx, val = np.zeros(sum(ks), np.int32), np.zeros(sum(ks), np.float32)
    testing.call_kernel("ms_optim_dgc_select_multi", u=u1, v=v1, grad=g, consts=_consts(False),
                        ks=np.array(ks, np.int32), idx=idx, val=val)
    proposed = _propose(u2, v2, g, ks, False)
    np.testing.assert_array_equal(proposed, idx)
    np.testing.assert_array_equal(_take(u2, v2, proposed, ks), val)
    for a, b in zip(u1 + v1, u2 + v2):
        np.testing.assert_array_equal(a, b)


def test_take_kernel_rejects_bad_indices_before_writing():
    """An index outside its tensor fails before any residual changes; so do a wrong dtype, a
    layout that does not fit and a val that is not idx's length."""
    take = "ms_optim_dgc_take_multi"
    u = [np.ones(10, np.float32), np.ones(5, np.float32)]
    v = [np.full(10, 2.0, np.float32), np.full(5, 3.0, np.float32)]
    layout = np.array([1, 0, 2, 2, 1], np.int32)

    def call(**bad):
        good = dict(u=[x.copy() for x in u], v=[x.copy() for x in v],
                    idx=np.array([3, 4, 2], np.int32), layout=layout, val=np.zeros(3, np.float32))
        return {**good, **bad}

    for bad, message in [
            (np.array([3, 4, 5], np.int32), r"^param1: index 5 of block 0 outside \[0, 5\)$"),
            (np.array([3, -1, 2], np.int32), r"^param0: index -1 of block 0 outside \[0, 10\)$")]:
        args = call(idx=bad)
        rejects(take, "MSOPT_ERR_VALUE", message, **args)
        for got, want in zip(args["u"] + args["v"], u + v):
            np.testing.assert_array_equal(got, want)
    rejects(take, "MSOPT_ERR_VALUE", r"^param1's entries \(offset 2, k 2\) do not fit a block of 3$",
            **call(layout=np.array([1, 0, 2, 2, 2], np.int32)))
    rejects(take, "MSOPT_ERR_VALUE", "^layout\\[0\\] = 2 blocks do not divide the 3 entries$",
            **call(layout=np.array([2, 0, 2, 2, 1], np.int32)))
    rejects(take, "MSOPT_ERR_SIZE", "^idx and val must have the same length, got 3 and 2$",
            **call(val=np.zeros(2, np.float32)))
    rejects(take, "MSOPT_ERR_DTYPE", "^v1 must be float32, got float64$", slot="v",
            **call(v=[v[0].copy(), np.zeros(5)]))
    rejects("ms_optim_dgc_propose_multi", "MSOPT_ERR_SIZE", "^the ks sum to 2, idx holds 3$",
            slot="ks", u=[u[0].copy()], v=[v[0].copy()], grad=[np.zeros(10, np.float32)],
            consts=_consts(False), ks=np.array([2], np.int32), idx=np.zeros(3, np.int32))


# ------------------------------------------------ the bucket's kernels --
#
# One selection over the concatenation of the tensors: the reference is the per-tensor rule
# on the concatenated arrays (reference.dgc_select, dgc_propose, dgc_take).

BUCKET_SIZES = [1, 7, 16383, 5, 16385]


def _joint(arrays):
    return np.concatenate(arrays)


def _split(joint, like):
    return np.split(joint, np.cumsum([a.size for a in like])[:-1])


def _sources(grads, rng):
    """The bucket kernels' src and gidx: the step's whole gradient tuple, the bucket's
    gradients in a shuffled order among other parameters' (NaN: read, they would show)."""
    src, gidx = [np.ones(3, np.float16)], np.zeros(len(grads), np.int32)
    for j in rng.permutation(len(grads)):
        gidx[j] = len(src)
        src += [grads[j], np.full(2, np.nan, np.float32)]
    return dict(src=src, gidx=gidx)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_bucket_select_kernel_matches_reference(isa, nesterov, kind):
    """Tensors of odd sizes, k from one entry to every one: positions in the concatenation
    (ascending, ties to the lower), values, and each tensor's residuals updated and masked
    are the reference's on the concatenated arrays, step after step."""
    rng = np.random.default_rng(13)
    u = [np.zeros(n, np.float32) for n in BUCKET_SIZES]
    v = [np.zeros(n, np.float32) for n in BUCKET_SIZES]
    ru, rv = _joint(u), _joint(v)
    total = ru.size
    for k in [1, 3, total // 100, total // 7, total - 1, total]:
        g = [_inputs(kind, n, rng) for n in BUCKET_SIZES]
        idx, val = np.zeros(k, np.int32), np.zeros(k, np.float32)
        testing.call_kernel("ms_optim_dgc_bucket_select", u=u, v=v, **_sources(g, rng),
                            consts=_consts(nesterov), idx=idx, val=val)
        want_idx, want_val = reference.dgc_select(ru, rv, _joint(g), 0.9, k, nesterov)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(val, want_val)
        for got, want in zip(u + v, _split(ru, u) + _split(rv, v)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shared", ["leader", "union"])
def test_bucket_propose_and_take_kernels_match_reference(isa, shared):
    """Three workers, three steps: each worker's proposal is the reference's (u and v
    updated, nothing masked) and its take at the leader's positions, or at every worker's
    side by side (a position two workers propose is taken once), is the reference's."""
    rng = np.random.default_rng(17)
    workers, total = 3, sum(BUCKET_SIZES)
    u = [[np.zeros(n, np.float32) for n in BUCKET_SIZES] for _ in range(workers)]
    v = [[np.zeros(n, np.float32) for n in BUCKET_SIZES] for _ in range(workers)]
    ru, rv = [_joint(w) for w in u], [_joint(w) for w in v]
    repeats = 0
    for step, k in enumerate([total // 50, 1, total // 3]):
        proposals = []
        for w in range(workers):
            g = [_inputs("ties", n, rng) for n in BUCKET_SIZES]
            idx = np.zeros(k, np.int32)
            testing.call_kernel("ms_optim_dgc_bucket_propose", u=u[w], v=v[w],
                                **_sources(g, rng), consts=_consts(False), idx=idx)
            np.testing.assert_array_equal(
                idx, reference.dgc_propose(ru[w], rv[w], _joint(g), 0.9, k))
            proposals.append(idx)
        idx = (proposals[reference.dgc_leader(step, workers)] if shared == "leader"
               else np.concatenate(proposals))
        repeats += idx.size - np.unique(idx).size
        for w in range(workers):
            val = np.zeros(idx.size, np.float32)
            testing.call_kernel("ms_optim_dgc_bucket_take", u=u[w], v=v[w], idx=idx, val=val)
            np.testing.assert_array_equal(val, reference.dgc_take(ru[w], rv[w], idx))
            for got, want in zip(u[w] + v[w], _split(ru[w], u[w]) + _split(rv[w], v[w])):
                np.testing.assert_array_equal(got, want)
    if shared == "union":
        assert repeats > 0  # positions two workers proposed: taken once


@pytest.mark.parametrize("group_lr", [False, True])
def test_bucket_apply_kernel_matches_reference(isa, group_lr):
    """Tensors of odd sizes and both dtypes in one op: each gets p -= lr_j * mean over its
    positions, in float32 and (float16) rounded once, as the ops rule computes it."""
    rng = np.random.default_rng(19)
    dtypes = [np.float16, np.float32, np.float32, np.float16, np.float32]
    params = [rng.standard_normal(n).astype(d) for n, d in zip(BUCKET_SIZES, dtypes)]
    mean = rng.standard_normal(sum(BUCKET_SIZES)).astype(np.float32)
    lr = (rng.uniform(0.01, 0.5, len(params)) if group_lr else np.array([0.1])).astype(np.float32)
    want = [(p.astype(np.float32) - lr[j if group_lr else 0] * m).astype(p.dtype)
            for j, (p, m) in enumerate(zip(params, _split(mean, params)))]
    done = np.ones(1, np.float32)
    testing.call_kernel("ms_optim_dgc_bucket_apply", param=params, mean=mean, lr=lr, done=done)
    for got, w in zip(params, want):
        np.testing.assert_array_equal(got, w)


def _bucket_apply_from_entries(params, idx, val, lr, ranks):
    """The numpy rule: the dense apply of mean = scatter_add(0, idx, val) / ranks, each
    position's values summed from 0 in entry order."""
    mean = np.zeros(sum(p.size for p in params), np.float32)
    np.add.at(mean, idx, val)
    mean = mean / np.float32(ranks)
    return [(p.astype(np.float32) - lr[j if lr.size > 1 else 0] * m).astype(p.dtype)
            for j, (p, m) in enumerate(zip(params, _split(mean, params)))]


@pytest.mark.parametrize("ranks,group_lr", [(1, False), (2, True), (3, False), (8, True)])
def test_bucket_apply_entries_kernel_matches_reference(isa, ranks, group_lr):
    """Every worker's entries at the bucket's positions (in blocks, positions repeated
    within and across blocks, empty tensors, both dtypes) give the dense apply's bits:
    p_j -= lr_j * scatter_add(0, idx, val) / ranks over tensor j's positions."""
    rng = np.random.default_rng(29 + ranks)
    sizes = [0] + BUCKET_SIZES[:3] + [0] + BUCKET_SIZES[3:]
    dtypes = [np.float32, np.float16, np.float32, np.float16, np.float32, np.float16,
              np.float32]
    params = [rng.standard_normal(n).astype(d) for n, d in zip(sizes, dtypes)]
    total = sum(sizes)
    blocks = [np.sort(rng.choice(total, 997, replace=False)) for _ in range(ranks)]
    idx = np.concatenate(blocks + [np.array([0, total - 1, 8, 8], np.int64)]).astype(np.int32)
    val = (rng.standard_normal(idx.size) * 10.0 ** rng.integers(-4, 4, idx.size))
    val = val.astype(np.float32)
    val[:3] = [-0.0, np.inf, np.nan]
    lr = (rng.uniform(0.01, 0.5, len(params)) if group_lr else np.array([0.1])).astype(np.float32)
    want = _bucket_apply_from_entries(params, idx, val, lr, ranks)
    done = np.ones(1, np.float32)
    testing.call_kernel("ms_optim_dgc_bucket_apply_entries", param=params, idx=idx, val=val,
                        lr=lr, ranks=np.array([ranks], np.float32), done=done)
    for got, w in zip(params, want):
        np.testing.assert_array_equal(got.view(np.uint8), w.view(np.uint8))
    assert done[0] == 0.0


def test_bucket_apply_entries_rejects_bad_input_before_writing():
    """A position outside the bucket, idx and val of two lengths, a ranks that is not one
    float32 or a parameter of another dtype fail before any parameter changes."""
    params = [np.ones(10, np.float32), np.ones(5, np.float16)]
    ok = dict(idx=np.array([0, 14], np.int32), val=np.ones(2, np.float32),
              lr=np.ones(1, np.float32), ranks=np.ones(1, np.float32),
              done=np.zeros(1, np.float32))
    for change, code, message in [
            (dict(idx=np.array([3, 15], np.int32)), "MSOPT_ERR_VALUE",
             r"^idx\[1\] = 15 is outside \[0, 15\) \(the bucket's elements\)$"),
            (dict(val=np.ones(3, np.float32)), "MSOPT_ERR_SIZE",
             "^idx and val must have the same length, got 2 and 3$"),
            (dict(ranks=np.ones(2, np.float32)), "MSOPT_ERR_SIZE", r"\branks\b"),
            (dict(lr=np.ones(3, np.float32)), "MSOPT_ERR_SIZE", r"\blr\b")]:
        rejects("ms_optim_dgc_bucket_apply_entries", code, message, param=params,
                **{**ok, **change})
    rejects("ms_optim_dgc_bucket_apply_entries", "MSOPT_ERR_DTYPE",
            r"^param1 must be float32 or float16, got float64$", slot="param",
            param=[params[0], np.ones(5)], **ok)
    for p in params:
        np.testing.assert_array_equal(p, 1.0)


def test_bucket_kernels_skip_empty_tensors(isa):
    """Tensors of no elements at the start, in the middle and at the end hold no position:
    the selection, the take and the apply are those of the bucket without them."""
    rng = np.random.default_rng(23)
    sizes = [0, 7, 0, 16385, 5, 0]
    u = [np.zeros(n, np.float32) for n in sizes]
    v = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    ru, rv = _joint(u), _joint(v)
    k = 50
    idx, val = np.zeros(k, np.int32), np.zeros(k, np.float32)
    testing.call_kernel("ms_optim_dgc_bucket_select", u=u, v=v, **_sources(g, rng),
                        consts=_consts(True),
                        idx=idx, val=val)
    want_idx, want_val = reference.dgc_select(ru, rv, _joint(g), 0.9, k, True)
    np.testing.assert_array_equal(idx, want_idx)
    np.testing.assert_array_equal(val, want_val)
    for got, want in zip(u + v, _split(ru, u) + _split(rv, v)):
        np.testing.assert_array_equal(got, want)
    at = np.array([0, 6, 7, 16391, 16392, 16396], np.int32)  # each tensor's first and last
    taken = np.zeros(at.size, np.float32)
    testing.call_kernel("ms_optim_dgc_bucket_take", u=u, v=v, idx=at, val=taken)
    np.testing.assert_array_equal(taken, reference.dgc_take(ru, rv, at))
    params = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    mean = rng.standard_normal(sum(sizes)).astype(np.float32)
    want = [p - np.float32(0.5) * m for p, m in zip(params, _split(mean, params))]
    testing.call_kernel("ms_optim_dgc_bucket_apply", param=params, mean=mean,
                        lr=np.array([0.5], np.float32), done=np.zeros(1, np.float32))
    for got, w in zip(params, want):
        np.testing.assert_array_equal(got, w)


def test_bucket_kernels_reject_bad_input_before_writing():
    """A position outside the bucket, a k outside [1, its elements], a val that is not
    idx's length, a wrong dtype, a gradient of another size or a gidx outside the gradient
    tuple fail before any residual changes."""
    rng = np.random.default_rng(31)
    u = [np.ones(10, np.float32), np.ones(5, np.float32)]
    v = [np.full(10, 2.0, np.float32), np.full(5, 3.0, np.float32)]
    g = [np.ones(10, np.float32), np.ones(5, np.float32)]

    def state():
        return dict(u=[x.copy() for x in u], v=[x.copy() for x in v])

    for bad, message in [(np.array([3, 15, 2], np.int32), r"^idx\[1\] = 15 is outside \[0, 15\)"),
                         (np.array([-1], np.int32), r"^idx\[0\] = -1 is outside \[0, 15\)")]:
        args = state()
        rejects("ms_optim_dgc_bucket_take", "MSOPT_ERR_VALUE", message + r" \(the bucket's "
                r"elements\)$", **args, idx=bad, val=np.zeros(bad.size, np.float32))
        for got, want in zip(args["u"] + args["v"], u + v):
            np.testing.assert_array_equal(got, want)
    args = state()
    rejects("ms_optim_dgc_bucket_take", "MSOPT_ERR_SIZE", "^val must have idx's length 2, got 3$",
            **args, idx=np.array([0, 1], np.int32), val=np.zeros(3, np.float32))
    for got, want in zip(args["u"] + args["v"], u + v):
        np.testing.assert_array_equal(got, want)
    for k in (0, 16):
        args = state()
        rejects("ms_optim_dgc_bucket_select", "MSOPT_ERR_SIZE",
                rf"^idx holds k = {k} entries, outside \[1, 15\] \(the bucket's elements\)$",
                **args, **_sources(g, rng), consts=_consts(False),
                idx=np.zeros(k, np.int32), val=np.zeros(k, np.float32))
        for got, want in zip(args["u"] + args["v"], u + v):
            np.testing.assert_array_equal(got, want)
    bad = [(dict(src=[g[0], np.ones(5)], gidx=np.array([0, 1], np.int32)), "MSOPT_ERR_DTYPE",
            r"^src1 \(the gradient of u1\) must be float32, got float64$"),
           (dict(src=[g[0], g[0]], gidx=np.array([0, 1], np.int32)), "MSOPT_ERR_SIZE",
            r"^src1 \(the gradient of u1\) has 10 elements, u1 5$"),
           (dict(src=[g[0], g[1]], gidx=np.array([0, 2], np.int32)), "MSOPT_ERR_VALUE",
            r"^gidx\[1\] = 2 is outside \[0, 2\)$")]
    for sources, code, message in bad:
        for entry, out in (("ms_optim_dgc_bucket_propose", {}),
                           ("ms_optim_dgc_bucket_select", dict(val=np.zeros(2, np.float32)))):
            args = state()
            rejects(entry, code, message, **args, **sources, consts=_consts(False),
                    idx=np.zeros(2, np.int32), **out)
            for got, want in zip(args["u"] + args["v"], u + v):
                np.testing.assert_array_equal(got, want)
    params = [np.ones(10, np.float32), np.ones(5, np.float16)]
    rejects("ms_optim_dgc_bucket_apply", "MSOPT_ERR_SIZE",
            r"^mean must hold the bucket's 15 elements, got 14$", param=params,
            mean=np.ones(14, np.float32), lr=np.ones(1, np.float32), done=np.zeros(1, np.float32))
    rejects("ms_optim_dgc_bucket_apply", "MSOPT_ERR_DTYPE",
            r"^param1 must be float32 or float16, got float64$", slot="param",
            param=[params[0], np.ones(5)], mean=np.ones(15, np.float32),
            lr=np.ones(1, np.float32), done=np.zeros(1, np.float32))
    np.testing.assert_array_equal(params[0], 1.0)


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
    testing.call_kernel("ms_optim_dgc_apply_multi", param=p, idx=np.concatenate(idx_all),
                        val=np.concatenate(val_all), lr=lrs, layout=layout,
                        done=np.zeros(1, np.float32))
    for j, n in enumerate(sizes):
        lr = lrs[j if group_lr else 0]
        want = (before[j].astype(np.float32) - lr * reference.dgc_aggregate(n, sels[j])).astype(dtype)
        np.testing.assert_array_equal(p[j].view(np.uint8), want.view(np.uint8))


def _momentum_by_sources(p, u, g, lrs, nesterov):
    """ms_optim_dgc_momentum, tensor j's gradient picked from a longer list by index (a
    float64 source it does not name is never read)."""
    src = [np.zeros(2)] + g[::-1]  # tensor j's gradient at 1 + (len - 1 - j)
    gidx = np.array([len(g) - j for j in range(len(g))], np.int32)
    testing.call_kernel("ms_optim_dgc_momentum", param=p, u=u, src=src, lr=lrs,
                        consts=_consts(nesterov), gidx=gidx, done=np.zeros(1, np.float32))


def _momentum_flat(p, u, g, lrs, nesterov):
    """ms_optim_dgc_momentum_flat, the gradients one after another in one buffer (the dense
    exchange's)."""
    testing.call_kernel("ms_optim_dgc_momentum_flat", param=p, u=u, flat=np.concatenate(g),
                        lr=lrs, consts=_consts(nesterov), done=np.zeros(1, np.float32))


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("group_lr", [False, True])
@pytest.mark.parametrize("call", [_momentum_by_sources, _momentum_flat],
                         ids=["by_sources", "flat"])
def test_momentum_kernel_matches_reference(isa, nesterov, group_lr, call):
    """The dense momentum of float32 and (widened) float16 parameters of odd sizes, their
    gradients given either way, against reference.dgc_momentum bit for bit."""
    rng = np.random.default_rng(3)
    sizes = MULTI_SIZES + [1_000_003]
    dtypes = [np.float32, np.float16] * 3
    p = [rng.standard_normal(n).astype(d) for n, d in zip(sizes, dtypes)]
    u = [np.zeros(n, np.float32) for n in sizes]
    rp, ru = [x.copy() for x in p], [x.copy() for x in u]
    lrs = np.array([0.05 * (j + 1) for j in range(len(sizes))] if group_lr else [0.05], np.float32)
    for _ in range(3):
        g = [rng.standard_normal(n).astype(np.float32) for n in sizes]
        call(p, u, g, lrs, nesterov)
        for j in range(len(sizes)):
            reference.dgc_momentum(rp[j], ru[j], g[j], lrs[j if group_lr else 0], 0.9, nesterov)
    for j in range(len(sizes)):
        np.testing.assert_array_equal(u[j], ru[j])
        np.testing.assert_array_equal(p[j].view(np.uint8), rp[j].view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("sizes", [[1], [7, 16383, 16385], MULTI_SIZES + [1_000_003]])
def test_pack_and_unpack_copy_the_named_tensors(sizes, dtype):
    """ms_optim_pack: src[gidx[j]] for j in order, as np.concatenate, with tensors the op
    does not name (of another dtype among them) left unread; ms_optim_unpack writes them
    back in place, leaving the others as they were; over the threads from the largest."""
    rng = np.random.default_rng(len(sizes))
    g = [(rng.standard_normal(n) * 100).astype(dtype) for n in sizes]
    other = np.zeros(3, np.int8 if dtype == np.float64 else np.float64)
    src = [other] + g[::-1]
    gidx = np.array([len(sizes) - j for j in range(len(sizes))], np.int32)
    flat = np.full(sum(sizes), 77, dtype)
    testing.call_kernel("ms_optim_pack", src=src, gidx=gidx, flat=flat)
    np.testing.assert_array_equal(flat.view(np.uint8), np.concatenate(g).view(np.uint8))
    dst = [other.copy()] + [np.zeros_like(x) for x in g[::-1]]
    testing.call_kernel("ms_optim_unpack", dst=dst, gidx=gidx, flat=flat,
                        done=np.zeros(1, np.float32))
    np.testing.assert_array_equal(dst[0], other)
    for j in range(len(sizes)):
        np.testing.assert_array_equal(dst[gidx[j]].view(np.uint8), g[j].view(np.uint8))


@pytest.mark.parametrize("group_lr", [False, True])
def test_flush_flat_kernel_matches_reference(isa, group_lr):
    """The flush of float32 and float16 parameters of odd sizes from one buffer of the v
    means, then the u means, against reference.dgc_flush bit for bit; v ends all zero."""
    rng = np.random.default_rng(5)
    sizes = MULTI_SIZES + [1_000_003]
    dtypes = [np.float32, np.float16] * 3
    p = [rng.standard_normal(n).astype(d) for n, d in zip(sizes, dtypes)]
    u = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    v = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    mean_v = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    mean_u = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    rp, ru, rv = [x.copy() for x in p], [x.copy() for x in u], [x.copy() for x in v]
    lrs = np.array([0.05 * (j + 1) for j in range(len(sizes))] if group_lr else [0.05], np.float32)
    testing.call_kernel("ms_optim_dgc_flush_flat", param=p, u=u, v=v,
                        mean=np.concatenate(mean_v + mean_u), lr=lrs,
                        done=np.zeros(1, np.float32))
    for j in range(len(sizes)):
        reference.dgc_flush(rp[j], ru[j], rv[j], mean_u[j], mean_v[j],
                            lrs[j if group_lr else 0])
        np.testing.assert_array_equal(p[j].view(np.uint8), rp[j].view(np.uint8))
        np.testing.assert_array_equal(u[j].view(np.uint8), ru[j].view(np.uint8))
        np.testing.assert_array_equal(v[j].view(np.uint8), rv[j].view(np.uint8))
        assert not v[j].any()


def test_pack_and_momentum_flat_reject_bad_input():
    x, z1 = np.zeros(10, np.float32), np.zeros(1, np.float32)
    pack = "ms_optim_pack"
    rejects(pack, "MSOPT_ERR_VALUE", r"^gidx\[1\] = 2 is outside \[0, 2\)$", slot="gidx",
            src=[x, x], gidx=np.array([0, 2], np.int32), flat=np.zeros(20, np.float32))
    rejects(pack, "MSOPT_ERR_DTYPE", r"^src1 must be float32 \(flat's dtype\), got float64$",
            slot="src", src=[x, np.zeros(10)], gidx=np.array([0, 1], np.int32),
            flat=np.zeros(20, np.float32))
    rejects(pack, "MSOPT_ERR_SIZE", "^flat has 19 elements, the tensors 20$", slot="flat",
            src=[x, x], gidx=np.array([0, 1], np.int32), flat=np.zeros(19, np.float32))
    rejects(pack, "MSOPT_ERR_DTYPE", r"^src0 must be float64 \(flat's dtype\), got float32$",
            slot="src", src=[x, x], gidx=np.array([0, 1], np.int32), flat=np.zeros(20))
    unpack = "ms_optim_unpack"
    rejects(unpack, "MSOPT_ERR_VALUE", r"^gidx\[0\] = -1 is outside \[0, 2\)$", slot="gidx",
            dst=[x, x], gidx=np.array([-1], np.int32), flat=np.zeros(10, np.float32), done=z1)
    rejects(unpack, "MSOPT_ERR_SIZE", "^flat has 21 elements, the tensors 20$", slot="flat",
            dst=[x, x], gidx=np.array([0, 1], np.int32), flat=np.zeros(21, np.float32), done=z1)
    rejects(unpack, "MSOPT_ERR_VALUE", r"^gidx\[1\] = 0 names the tensor gidx\[0\] names$",
            slot="gidx", dst=[x, x], gidx=np.array([0, 0], np.int32),
            flat=np.zeros(20, np.float32), done=z1)
    rejects(unpack, "MSOPT_ERR_DTYPE", "^flat's dtype complex64 is not one a tensor has$",
            slot="flat", dst=[x], gidx=np.array([0], np.int32), flat=np.zeros(10, np.complex64),
            done=z1)
    rejects(unpack, "MSOPT_ERR_DTYPE", r"^dst1 must be float16 \(flat's dtype\), got float32$",
            slot="dst", dst=[np.zeros(10, np.float16), x], gidx=np.array([0, 1], np.int32),
            flat=np.zeros(20, np.float16), done=z1)
    mom = "ms_optim_dgc_momentum_flat"

    def momentum(**bad):
        call = dict(param=[x, x], u=[x, x], flat=np.zeros(20, np.float32), lr=z1,
                    consts=_consts(False), done=z1)
        return {**call, **bad}

    rejects(mom, "MSOPT_ERR_SIZE", "^flat has 21 elements, the parameters 20$", slot="flat",
            **momentum(flat=np.zeros(21, np.float32)))
    rejects(mom, "MSOPT_ERR_DTYPE", "^flat must be float32, got float16$", slot="flat",
            **momentum(flat=np.zeros(20, np.float16)))
    rejects(mom, "MSOPT_ERR_DTYPE", "^param1 must be float32 or float16, got float64$",
            slot="param", **momentum(param=[x, np.zeros(10)]))
    rejects(mom, "MSOPT_ERR_SIZE", "^u1 has 9 elements, param1 10$", slot="u",
            **momentum(u=[x, np.zeros(9, np.float32)]))
    rejects(mom, "MSOPT_ERR_SIZE", "^lr must have 1 or 2 elements, got 3$", slot="lr",
            **momentum(lr=np.zeros(3, np.float32)))


def test_flush_flat_rejects_bad_input():
    x, z1 = np.zeros(10, np.float32), np.zeros(1, np.float32)

    def flush(**bad):
        call = dict(param=[x, x], u=[x, x], v=[x, x], mean=np.zeros(40, np.float32), lr=z1,
                    done=z1)
        return {**call, **bad}

    op = "ms_optim_dgc_flush_flat"
    rejects(op, "MSOPT_ERR_SIZE", "^mean has 20 elements, twice the parameters' 20$",
            slot="mean", **flush(mean=np.zeros(20, np.float32)))
    rejects(op, "MSOPT_ERR_DTYPE", "^mean must be float32, got float64$", slot="mean",
            **flush(mean=np.zeros(40)))
    rejects(op, "MSOPT_ERR_DTYPE", "^param1 must be float32 or float16, got float64$",
            slot="param", **flush(param=[x, np.zeros(10)]))
    rejects(op, "MSOPT_ERR_SIZE", "^v1 has 9 elements, param1 10$", slot="v",
            **flush(v=[x, np.zeros(9, np.float32)]))
    rejects(op, "MSOPT_ERR_DTYPE", "^u1 must be float32, got float16$", slot="u",
            **flush(u=[x, np.zeros(10, np.float16)]))
    rejects(op, "MSOPT_ERR_SIZE", "^lr must have 1 or 2 elements, got 3$", slot="lr",
            **flush(lr=np.zeros(3, np.float32)))


def test_multi_kernels_reject_bad_input():
    x, z1 = np.zeros(10, np.float32), np.zeros(1, np.float32)
    ks = np.array([2], np.int32)
    sel = "ms_optim_dgc_select_multi"

    def select(**bad):
        call = dict(u=[x], v=[x], grad=[x], consts=_consts(False), ks=ks,
                    idx=np.zeros(2, np.int32), val=np.zeros(2, np.float32))
        return {**call, **bad}

    rejects(sel, "MSOPT_ERR_ARGS", r"^expected 3K \+ 4 tensors \(u:each v:each grad:each consts "
            r"ks:count -> idx val\), got 5$",
            arrays=[x, x, x, _consts(False), np.zeros(2, np.int32)])
    rejects(sel, "MSOPT_ERR_DTYPE", "^grad0 must be float32, got float64$", slot="grad",
            **select(grad=[np.zeros(10)]))
    rejects(sel, "MSOPT_ERR_SIZE", "^v0 has 9 elements, u0 10$", slot="v",
            **select(v=[np.zeros(9, np.float32)]))
    rejects(sel, "MSOPT_ERR_VALUE", r"^ks\[0\] = 11 is outside \[1, 10\]$", slot="ks",
            **select(ks=np.array([11], np.int32), idx=np.zeros(11, np.int32),
                     val=np.zeros(11, np.float32)))
    rejects(sel, "MSOPT_ERR_SIZE", "^the ks sum to 2, idx holds 3$", slot="ks",
            **select(idx=np.zeros(3, np.int32), val=np.zeros(3, np.float32)))
    rejects(sel, "MSOPT_ERR_SIZE", r"^consts must have 2 element\(s\), got 1$", slot="consts",
            **select(consts=z1))
    app = "ms_optim_dgc_apply_multi"
    one = np.array([1], np.int32)

    def apply(**bad):
        call = dict(param=[x], idx=one, val=np.ones(1, np.float32), lr=z1,
                    layout=np.array([1, 0, 1], np.int32), done=z1)
        return {**call, **bad}

    rejects(app, "MSOPT_ERR_ARGS", r"^expected 1K \+ 5 tensors \(param:each idx val lr layout -> "
            r"done\), got 4$",
            arrays=[one, np.ones(1, np.float32), z1, np.array([1, 0, 1], np.int32)])
    rejects(app, "MSOPT_ERR_DTYPE", "^param1 must be float32, got float16$", slot="param",
            **apply(param=[x, np.zeros(10, np.float16)],
                    layout=np.array([1, 0, 0, 1, 0], np.int32)))
    rejects(app, "MSOPT_ERR_DTYPE", "^param0 must be float32, got float64$", slot="param",
            **apply(param=[np.zeros(10)]))
    rejects(app, "MSOPT_ERR_VALUE", r"^param0: index 10 of block 0 outside \[0, 10\)$",
            slot="param", **apply(idx=np.array([10], np.int32)))
    rejects(app, "MSOPT_ERR_VALUE", r"^param0's entries \(offset 1, k 2\) do not fit a block of 2$",
            slot="param",
            **apply(idx=np.array([1, 2], np.int32), val=np.ones(2, np.float32),
                    layout=np.array([1, 1, 2], np.int32)))
    rejects(app, "MSOPT_ERR_VALUE", r"^layout\[0\] = 2 blocks do not divide the 3 entries$",
            slot="layout", **apply(idx=np.array([1, 2, 3], np.int32), val=np.ones(3, np.float32),
                                   layout=np.array([2, 0, 1], np.int32)))
    rejects(app, "MSOPT_ERR_SIZE", r"^lr must have 1 element\(s\), got 3$", slot="lr",
            **apply(lr=np.zeros(3, np.float32)))
    mom = "ms_optim_dgc_momentum"
    gidx = np.array([0], np.int32)

    def momentum(**bad):
        call = dict(param=[x], u=[x], src=[x], lr=z1, consts=_consts(False), gidx=gidx, done=z1)
        return {**call, **bad}

    rejects(mom, "MSOPT_ERR_ARGS", r"^gidx holds 1 element\(s\), which does not fit 6 tensors "
            r"\(param:each u:each src:rest lr consts gidx:count -> done\)$", slot="gidx",
            arrays=[x, x, z1, _consts(False), gidx, z1])
    rejects(mom, "MSOPT_ERR_VALUE", r"^gidx\[0\] = 1 is outside \[0, 1\)$", slot="gidx",
            **momentum(gidx=np.array([1], np.int32)))
    rejects(mom, "MSOPT_ERR_DTYPE", r"^src0 \(the gradient of param0\) must be float32, got "
            "float64$", slot="src",
            **momentum(src=[np.zeros(10)]))
    rejects(mom, "MSOPT_ERR_SIZE", r"^src0 \(the gradient of param0\) has 9 elements, param0 10$",
            slot="src",
            **momentum(src=[np.zeros(9, np.float32)]))
    rejects(mom, "MSOPT_ERR_DTYPE", "^param0 must be float32 or float16, got float64$",
            slot="param", **momentum(param=[np.zeros(10)]))
    rejects(mom, "MSOPT_ERR_SIZE", r"^lr must have 1 element\(s\), got 2$", slot="lr",
            **momentum(lr=np.zeros(2, np.float32)))
    rejects(mom, "MSOPT_ERR_ARGS", r"^gidx holds 3 element\(s\), which does not fit 7 tensors "
            r"\(param:each u:each src:rest lr consts gidx:count -> done\)$",
            slot="gidx", **momentum(gidx=np.zeros(3, np.int32)))


# residuals: the state's residual kind per parameter, then this run's (0 none, 1 gradients,
# 2 learning-rate-scaled gradients)
DISAGREE = (r"^the workers disagree on the model or the step \(every rank's signature is "
            r"printed above\): build the same network and optimizer on every worker, with the "
            r"same settings, and start them at the same step$")
KIND_WORDS = ("no residuals", "residuals of gradients",
              "residuals of learning-rate-scaled gradients")


def _row(step=0, world=1, rank=None, digest=(0, 0), expected=-1):
    """A worker's gathered row: a model signature (3 values), the step, then its optimizer
    state's world size, the rank that saved it (None: the row's own), digest of residual
    kinds and the step its branch was compiled for (-1: any)."""
    return [3, 100, 7, step, world, rank, *digest, expected]


ROW = len(_row())


def _rows(*rows):
    """Rows in rank order, each row's rank None set to its place."""
    values = [r if v is None else v for r, row in enumerate(rows) for v in row]
    return dict(signatures=np.array(values, np.int32), width=np.array([ROW], np.int32))


def _names(n):
    """n parameters' names, w0 to w<n-1>, each ended by a NUL byte."""
    return np.frombuffer(b"".join(b"w%d\0" % j for j in range(n)), np.uint8).copy()


def _check(residuals, out, roles=None, **call):
    """Calls the replica check of one worker on `residuals` (the state's kinds, this run's),
    its parameters named w0, w1, ... with `roles` (default 0: large, not in dense_params)."""
    n = len(residuals) // 2
    call = dict(dict(_rows(_row()), world=np.array([1, 1], np.int32), names=_names(n)), **call)
    roles = np.zeros(n, np.int32) if roles is None else np.array(roles, np.int32)
    return dict(call, residuals=np.array(residuals, np.int32), roles=roles, ok=out)


@pytest.mark.parametrize("saved, mine", [
    ([0], [0]), ([1], [1]), ([2], [2]), ([0, 1, 2], [0, 1, 2]),
    # a parameter sent dense that this run compresses in the bucket: its momentum carries over
    ([0], [1]), ([1, 0, 0], [1, 1, 1])])
def test_replica_check_kernel(saved, mine):
    out = np.zeros(1, np.int32)
    two = np.array([2, 2], np.int32)
    testing.call_kernel("ms_optim_check_replicas",
                        **_check(saved + mine, out, **_rows(_row(world=2), _row(world=2)),
                                 world=two))
    assert out[0] == 1
    out[0] = 0
    other = _row(world=2)
    other[1] = 101
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA", DISAGREE,
            **_check(saved + mine, out, **_rows(_row(world=2), other), world=two))
    assert out[0] == 0


@pytest.mark.parametrize("differ, message", [
    # another model, or the same at another step, is named first, whatever else differs
    (dict(step=5), DISAGREE),
    (dict(step=5, world=4, digest=(9, 9)), DISAGREE),
    (dict(world=4), r"^rank 2's optimizer state holds the residuals of 4 worker\(s\) and rank "
                    r"0's of 3: resume every worker from the checkpoints of one save$"),
    # the world size is named before the residual kinds
    (dict(world=4, digest=(9, 9)), r"^rank 2's optimizer state holds the residuals of 4 "
                                   r"worker\(s\)"),
    (dict(digest=(5, 7)), "^rank 2's optimizer state holds other residual kinds than rank 0's: "
                          "resume every worker from the checkpoints of one save$"),
    (dict(digest=(6, 6)), "^rank 2's optimizer state holds other residual kinds"),
])
def test_replica_check_refuses_workers_of_other_states(differ, message):
    """Every worker's row ends with its optimizer state's world size and a digest of its
    residual kinds: a worker whose state differs from rank 0's (which it alone may refuse)
    fails the check on every worker, rank 0 and the others included."""
    same = dict(world=3, digest=(5, 6))
    out = np.zeros(1, np.int32)
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA", message,
            **_check([1, 1], out, **_rows(_row(**same), _row(**same),
                                          _row(**dict(same, **differ)), _row(**same)),
                     world=np.array([3, 3], np.int32)))
    assert out[0] == 0


@pytest.mark.parametrize("saved, mine, which, roles, advice", [
    ([1], [0], 0, [1], "lr_in_residuals=False and bucket_sparsity=None, without 'w0' in "
                       "dense_params"),
    ([2], [0], 0, [2], "lr_in_residuals=True and a bucket_sparsity"),
    ([1], [2], 0, [0], "lr_in_residuals=False and bucket_sparsity=None"),
    ([2], [1], 0, [0], "lr_in_residuals=True and bucket_sparsity=None"),
    ([0], [2], 0, [0], "lr_in_residuals=False and bucket_sparsity=None, with 'w0' in "
                       "dense_params"),
    ([0], [2], 0, [2], "lr_in_residuals=False and bucket_sparsity=None"),
    ([1, 0, 1], [1, 2, 1], 1, [0, 2, 2], "lr_in_residuals=False and a bucket_sparsity"),
    ([1, 1, 1], [1, 0, 0], 1, [0, 2, 2], "lr_in_residuals=False and a bucket_sparsity"),
    ([0, 0, 2], [1, 1, 1], 2, [0, 2, 0], "lr_in_residuals=True and bucket_sparsity=None")])
def test_replica_check_refuses_residuals_it_cannot_step_on(saved, mine, which, roles, advice):
    """residuals holds the state's kind per parameter, then this run's: residuals that this
    run would drop (sent dense) or read as the other kind (the learning rate folded in or
    not) are refused, naming the first such parameter and the settings that saved them:
    lr_in_residuals when any residuals fold the rate, a bucket when a small parameter (role
    2) holds residuals, and dense_params when this run names the parameter (role 1) or a
    large parameter without residuals was sent dense."""
    out = np.zeros(1, np.int32)
    now = ("sends it dense, which would drop the update they hold" if mine[which] == 0
           else f"would step {KIND_WORDS[mine[which]]}")
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA",
            rf"^the optimizer state holds {KIND_WORDS[saved[which]]} for parameter 'w{which}' "
            rf"and this run {now}: construct the optimizer with {advice}, as the state was "
            rf"saved, to resume from it \(docs/dgc.md#resuming-with-other-settings\)$",
            **_check(saved + mine, out, roles))
    assert out[0] == 0


@pytest.mark.parametrize("kinds", [[0], [0, 1, 0]])
def test_replica_check_rejects_an_odd_number_of_kinds(kinds):
    rejects("ms_optim_check_replicas", "MSOPT_ERR_SIZE",
            rf"^residuals must be int32\[2n\] \(the state's residual kind per parameter, this "
            rf"run's\), got {len(kinds)} elements$",
            slot="residuals", **_check(kinds, np.zeros(1, np.int32)))


@pytest.mark.parametrize("kinds, at", [([3, 1], 0), ([1, -1], 1), ([0, 0, 0, 7], 3),
                                       ([0, 9, 0, 7], 1)])
def test_replica_check_rejects_unknown_kinds(kinds, at):
    """An unknown kind in the state (the first half, checked first) names its parameter; one
    of this run's is the caller's error."""
    n = len(kinds) // 2
    message = (rf"^the optimizer state's dgc_residual_kind of parameter 'w{at}' is {kinds[at]}, "
               rf"not a residual kind \(0, 1 or 2\), which DGCMomentum does not write: load a "
               rf"checkpoint that it saved$" if at < n else
               rf"^residuals\[{at}\] is {kinds[at]}, not a residual kind \(0, 1 or 2\)$")
    rejects("ms_optim_check_replicas", "MSOPT_ERR_VALUE", message,
            slot=None if at < n else "residuals", **_check(kinds, np.zeros(1, np.int32)))


@pytest.mark.parametrize("names, roles, code, message", [
    (b"w0", [0], "MSOPT_ERR_VALUE", "^names must end with a NUL byte$"),
    (b"w0\0w1\0", [0], "MSOPT_ERR_SIZE",
     r"^names must hold 1 NUL-ended names \(one per parameter\), got 2$"),
    (b"w0\0", [0, 0], "MSOPT_ERR_SIZE",
     r"^roles must have 1 elements \(one per parameter\), got 2$")])
def test_replica_check_rejects_names_and_roles_of_another_count(names, roles, code, message):
    rejects("ms_optim_check_replicas", code, message,
            slot="roles" if "roles" in message else "names",
            **_check([1, 1], np.zeros(1, np.int32), roles,
                     names=np.frombuffer(names, np.uint8).copy()))


@pytest.mark.parametrize("rows, message", [
    # every worker loaded rank 0's state
    ((dict(rank=0), dict(rank=0)), "^rank 1's optimizer state holds the residuals of rank 0: "
                                   "load each worker's own checkpoint"),
    # two workers swapped their files
    ((dict(rank=1), dict(rank=0)), "^rank 0's optimizer state holds the residuals of rank 1"),
    ((dict(), dict(), dict(rank=1)), "^rank 2's optimizer state holds the residuals of rank 1"),
    # one process on a state saved by rank 1 (of a run resized to one worker elsewhere)
    ((dict(rank=1, world=1),), "^rank 0's optimizer state holds the residuals of rank 1"),
])
def test_replica_check_refuses_another_ranks_state(rows, message):
    """Each worker's row holds the rank that saved its state, which must be the row's own:
    every worker refuses a run in which one holds another rank's residuals (whose own would
    be lost, the other's applied twice)."""
    world = next((r["world"] for r in rows if "world" in r), len(rows))
    rows = [dict(dict(world=world), **r) for r in rows]
    out = np.zeros(1, np.int32)
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA", message,
            **_check([1, 1], out, **_rows(*[_row(**r) for r in rows]),
                     world=np.array([world, world], np.int32)))
    assert out[0] == 0


@pytest.mark.parametrize("width", [5, 1, 0])
def test_replica_check_rejects_rows_without_the_state(width):
    """A row must hold more than the state's 4 values and the compiled step."""
    rejects("ms_optim_check_replicas", "MSOPT_ERR_VALUE",
            rf"^6 signature values are not rows of width {width} \(more than 5\)$",
            slot="width", **_check([1, 1], np.zeros(1, np.int32),
                                   signatures=np.arange(6, dtype=np.int32),
                                   width=np.array([width], np.int32)))


@pytest.mark.parametrize("saved, nranks", [(4, 2), (4, 8), (4, 1), (1, 2)])
def test_replica_check_refuses_residuals_of_another_world_size(saved, nranks):
    out = np.zeros(1, np.int32)
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA",
            rf"^the optimizer state holds the residuals of {saved} worker\(s\) and this run has "
            rf"{nranks}: convert the checkpoints with "
            rf"ms_optim.dgc.resize_checkpoints\(files, world_size={nranks}, dest=...\) and load "
            rf"those \(docs/dgc.md#resuming-at-another-number-of-workers\)$",
            **_check([0, 0], out, **_rows(*[_row(world=saved)] * nranks),
                     world=np.array([saved, nranks], np.int32)))
    assert out[0] == 0
    rejects("ms_optim_check_replicas", "MSOPT_ERR_SIZE",
            r"^world must be int32\[2\] \(the state's world size, this run's\), got 1 elements$",
            slot="world", **_check([0, 0], out, world=np.array([1], np.int32)))


@pytest.mark.parametrize("expected, at", [((4, -1), 0), ((-1, 4), 1), ((4, 6), 0)])
def test_replica_check_fails_a_branch_compiled_for_another_step(expected, at):
    """A worker whose branch was compiled for another step than the rows' fails the check
    on every worker with MSOPT_ERR_STALE, after every refusal of the state; -1 (a branch
    chosen on the device) and the rows' own step pass."""
    out = np.zeros(1, np.int32)
    rows = [_row(step=5, expected=e) for e in expected]
    rejects("ms_optim_check_replicas", "MSOPT_ERR_STALE",
            rf"^rank {at} compiled the step for step {expected[at]}, and global_step is 5$",
            **_check([1, 1], out, **_rows(*rows), world=np.array([1, 1], np.int32)))
    assert out[0] == 0
    rows = [_row(step=5, world=2, expected=e) for e in expected]
    rejects("ms_optim_check_replicas", "MSOPT_ERR_REPLICA", "holds the residuals of 2 worker",
            **_check([1, 1], out, **_rows(*rows), world=np.array([2, 1], np.int32)))
    testing.call_kernel("ms_optim_check_replicas",
                        **_check([1, 1], out, **_rows(*[_row(step=5, expected=e)
                                                          for e in (5, -1)])))
    assert out[0] == 1


def test_kernels_reject_bad_input():
    x = np.zeros(10, np.float32)
    # k is the length of idx and val
    rejects("ms_optim_topk_abs", "MSOPT_ERR_SIZE",
            r"^idx holds k = 11 entries, outside \[1, 10\] \(the elements of x\)$", slot="idx",
            x=x, idx=np.zeros(11, np.int32), val=np.zeros(11, np.float32))
    rejects("ms_optim_topk_abs", "MSOPT_ERR_DTYPE", "^idx must be int32, got float32$", slot="idx",
            x=x,
            idx=np.zeros(3, np.float32), val=np.zeros(3, np.float32))
