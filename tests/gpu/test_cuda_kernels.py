"""The CUDA kernels (ms_optim/ops/cuda/) on a GPU, element by element against
ms_optim/reference.py and against the CPU library's kernels on the same inputs, bit for bit
(Lamb's trust ratio, a sum of squares in double, to rounding).

Needs PyTorch with a CUDA device and the CUDA library (built by the install where nvcc is
found); elsewhere the module is skipped.  No MindSpore is needed: on a GPU machine without
it, run ``python -m pytest --noconftest -o addopts= tests/gpu``.
"""
import numpy as np
import pytest

from benchmarks.common.cuda_harness import consts, cpu, cuda_library, gpu, reference, to_device
from tests.sizes import EDGE_SIZES

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
if not cuda_library.available():
    pytest.skip("the CUDA library is not built (no nvcc at install)", allow_module_level=True)

pytestmark = pytest.mark.cuda

SIZES = EDGE_SIZES + [1_000_003]
WARMUP = [0.75, 0.9375, 0.999]
f32 = np.float32


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _values(kind, n, rng):
    if kind == "random":
        return rng.standard_normal(n).astype(f32)
    if kind == "ties":  # a few magnitudes, each shared by many entries of both signs
        return (rng.integers(0, 4, n) * rng.choice([-1, 1], n)).astype(f32)
    if kind == "all_equal":
        return np.full(n, -2.5, f32)
    raise ValueError(kind)


def _dgc_consts(nesterov):
    return consts("dgc", momentum=0.9, nesterov=nesterov)


# ----------------------------------------------------------------- select --

def _select_steps(sizes, kind, nesterov, seed, entry="ms_optim_dgc_select_multi"):
    """Three warm-up steps of one multi-tensor call over tensors of `sizes`: the CUDA kernel
    against the reference's rule and the CPU kernel, bit for bit."""
    rng = np.random.default_rng(seed)
    u = [np.zeros(n, f32) for n in sizes]
    v = [np.zeros(n, f32) for n in sizes]
    for sparsity in WARMUP:
        g = [_values(kind, n, rng) for n in sizes]
        ks = np.array([max(1, int(n * (1 - sparsity))) for n in sizes], np.int32)
        total = int(ks.sum())
        call = dict(u=u, v=v, grad=g, consts=_dgc_consts(nesterov), ks=ks,
                    idx=np.full(total, -1, np.int32))
        if entry == "ms_optim_dgc_select_multi":
            call["val"] = np.zeros(total, f32)
        got, ref = gpu(entry, **call), cpu(entry, **call)
        ru, rv = [x.copy() for x in u], [x.copy() for x in v]
        want_idx, want_val = [], []
        for j, k in enumerate(ks):
            if entry == "ms_optim_dgc_select_multi":
                idx, val = reference.dgc_select(ru[j], rv[j], g[j], 0.9, int(k), nesterov)
                want_val.append(val)
            else:
                idx = reference.dgc_propose(ru[j], rv[j], g[j], 0.9, int(k), nesterov)
            want_idx.append(idx)
        np.testing.assert_array_equal(got["idx"], np.concatenate(want_idx))
        if want_val:
            np.testing.assert_array_equal(got["val"], np.concatenate(want_val))
        for j in range(len(sizes)):
            np.testing.assert_array_equal(got["u"][j], ru[j])
            np.testing.assert_array_equal(got["v"][j], rv[j])
        for name in call:
            if isinstance(got[name], list):
                for a, b in zip(got[name], ref[name]):
                    same_bits(a, b)
            else:
                same_bits(got[name], ref[name])
        u, v = got["u"], got["v"]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("kind", ["random", "ties", "all_equal"])
def test_select_one_tensor(n, nesterov, kind):
    _select_steps([n], kind, nesterov, seed=n)


@pytest.mark.parametrize("kind", ["random", "ties"])
def test_select_many_tensors_in_one_call(kind):
    # tensors smaller and larger than a block (4096 elements), in one launch each pass
    _select_steps([16385, 1, 4097, 7, 300_001, 16383, 4096], kind, False, seed=3)


def test_select_k_equals_n():
    rng = np.random.default_rng(0)
    n = 5000
    g = rng.standard_normal(n).astype(f32)
    call = dict(u=[np.zeros(n, f32)], v=[np.zeros(n, f32)], grad=[g], consts=_dgc_consts(False),
                ks=np.array([n], np.int32), idx=np.zeros(n, np.int32), val=np.zeros(n, f32))
    got = gpu("ms_optim_dgc_select_multi", **call)
    np.testing.assert_array_equal(got["idx"], np.arange(n, dtype=np.int32))
    np.testing.assert_array_equal(got["val"], g)
    assert not got["v"][0].any() and not got["u"][0].any()


@pytest.mark.parametrize("kind", ["random", "ties"])
def test_propose_many_tensors(kind):
    _select_steps([16385, 7, 100_003], kind, True, seed=5, entry="ms_optim_dgc_propose_multi")


# ------------------------------------------- inputs that defeat the guess --
# The select lists, per data block of 4096 elements, the keys at or above a guess drawn
# from a sample of the tensor; a data block with too many is read again from v, and a
# guess that fewer than k keys reach sends the whole tensor down the full path.  Each
# input below takes one of those paths; the results must be the CPU library's, bit for
# bit, whichever it takes.

def _sample_positions(n):
    """The elements the select's guess samples in a tensor of n (select_init in
    ops/cuda/dgc_select.cu): one at a hashed place in each of S strata of n // S."""
    S = n if n <= 256 else min(max(n // 64, 256), 2048)
    stride = np.uint64(n // S)
    s = np.arange(S, dtype=np.uint64)
    h = (s * np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF)
    return (s * stride + ((h * stride) >> np.uint64(32))).astype(np.int64)


def _hard_values(kind, n, rng):
    v = rng.standard_normal(n).astype(f32)
    if kind == "mostly_zeros":  # fewer nonzeros than k: the k-th key is 0
        v[:] = 0
        v[rng.choice(n, 100, replace=False)] = rng.standard_normal(100)
    elif kind == "sparse_nonzeros":
        v[:] = 0
        v[rng.choice(n, 5000, replace=False)] = rng.standard_normal(5000)
    elif kind == "nan_inf":  # NaN above inf, both above every number
        at = rng.choice(n, n // 50, replace=False)
        v[at[: n // 100]] = np.nan
        v[at[n // 100:]] = np.inf * rng.choice([-1, 1], at.size - n // 100)
    elif kind == "hot_blocks":  # data blocks with far more large keys than a list holds
        v[n // 5:n // 5 + 60_000] *= 1000
    elif kind == "guess_fails":  # large keys only where the guess samples: fewer than k
        v *= 1e-3
        v[_sample_positions(n)] = 7.0
    elif kind != "random":
        raise ValueError(kind)
    return v


def same_bits_or_nan(a, b):
    """Bit for bit, except that a NaN matches any NaN: the GPU's arithmetic writes its
    own NaN (0x7fffffff) where the CPU's keeps the input's payload."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        a, b = np.where(np.isnan(a), 0, a).astype(a.dtype), np.where(np.isnan(b), 0, b).astype(b.dtype)
    same_bits(a, b)


def _select_once(vs, ks):
    """One select with u = 0 and grad = 0 (so the residuals it selects from are `vs`):
    the CUDA kernel against the CPU library, bit for bit (a NaN as a NaN); returns the
    CUDA results."""
    zeros = [np.zeros(v.size, f32) for v in vs]
    total = int(np.sum(ks))
    call = dict(u=zeros, v=vs, grad=zeros, consts=_dgc_consts(False),
                ks=np.array(ks, np.int32), idx=np.full(total, -1, np.int32),
                val=np.zeros(total, f32))
    got, ref = gpu("ms_optim_dgc_select_multi", **call), cpu("ms_optim_dgc_select_multi", **call)
    for name in call:
        for a, b in zip(*((got[name], ref[name]) if isinstance(got[name], list)
                          else ([got[name]], [ref[name]]))):
            same_bits_or_nan(a, b)
    return got


@pytest.mark.parametrize("kind, k", [
    ("mostly_zeros", 1000), ("sparse_nonzeros", 1000), ("nan_inf", 1000), ("nan_inf", 50_000),
    ("hot_blocks", 1000), ("hot_blocks", 100_000), ("guess_fails", 4000), ("random", 1),
    ("random", 1_000_003)])
def test_select_hard_inputs(kind, k):
    n = 1_000_003
    v = _hard_values(kind, n, np.random.default_rng(k))
    got = _select_once([v], [k])
    want_idx, want_val = reference.topk_abs(v, k)
    np.testing.assert_array_equal(got["idx"], want_idx)
    same_bits_or_nan(got["val"], want_val)


def test_select_every_path_in_one_call():
    """k == n, a failed guess, overflowing data blocks, a listed tensor and one element,
    side by side in one call."""
    rng = np.random.default_rng(11)
    n = 200_003
    vs = [rng.standard_normal(7).astype(f32), _hard_values("guess_fails", n, rng),
          _hard_values("hot_blocks", n, rng), rng.standard_normal(16385).astype(f32),
          np.array([-3.0], f32)]
    _select_once(vs, [7, 4000, 70_000, 16, 1])


def test_select_is_repeatable():
    rng = np.random.default_rng(12)
    vs = [_hard_values("hot_blocks", 1_000_003, rng), rng.standard_normal(50_000).astype(f32)]
    first, again = _select_once(vs, [5000, 50]), _select_once(vs, [5000, 50])
    same_bits(first["idx"], again["idx"])
    same_bits(first["val"], again["val"])


# ------------------------------------------------- take and apply: blocks --

def _blocks(rng, sizes, ks, ranks, foreign=3, ascending=True):
    """R blocks of a fused buffer: `foreign` entries of another call's tensors, then each
    tensor's run of k_j indices (drawn from its first half, so the blocks overlap)."""
    idx, runs = [], []
    for _ in range(ranks):
        idx.append(rng.integers(0, 1 << 20, foreign).astype(np.int32))
        block_runs = []
        for n, k in zip(sizes, ks):
            run = np.sort(rng.choice(max(k, n // 2), k, replace=False)).astype(np.int32)
            if not ascending:
                run = rng.permutation(run)
            idx.append(run)
            block_runs.append(run)
        runs.append(block_runs)
    offsets = np.cumsum([foreign] + list(ks[:-1]))
    layout = np.array([ranks] + list(offsets) + list(ks), np.int32)
    return np.concatenate(idx), layout, runs


@pytest.mark.parametrize("ranks", [1, 3, 17])
def test_take_at_shared_indices(ranks):
    rng = np.random.default_rng(ranks)
    sizes, ks = [16385, 7, 50_001], [300, 7, 2000]
    idx, layout, runs = _blocks(rng, sizes, ks, ranks)
    call = dict(u=[rng.standard_normal(n).astype(f32) for n in sizes],
                v=[rng.standard_normal(n).astype(f32) for n in sizes], idx=idx, layout=layout,
                val=np.full(idx.size, 7.0, f32))
    got, ref = gpu("ms_optim_dgc_take_multi", **call), cpu("ms_optim_dgc_take_multi", **call)
    for name in ("u", "v"):
        for a, b in zip(got[name], ref[name]):
            same_bits(a, b)
    same_bits(got["val"], ref["val"])
    # the reference's rule, tensor by tensor, over its entries in block order
    block = idx.size // ranks
    for j in range(len(sizes)):
        u, v = call["u"][j].copy(), call["v"][j].copy()
        want = reference.dgc_take(u, v, np.concatenate([runs[r][j] for r in range(ranks)]))
        at = np.concatenate([r * block + layout[1 + j] + np.arange(ks[j]) for r in range(ranks)])
        np.testing.assert_array_equal(got["val"][at], want)
        np.testing.assert_array_equal(got["u"][j], u)
        np.testing.assert_array_equal(got["v"][j], v)
    foreign = np.concatenate([r * block + np.arange(3) for r in range(ranks)])
    assert not got["val"][foreign].any()  # entries of no tensor of this call: 0


@pytest.mark.parametrize("ranks", [1, 2, 5, 17])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("group_lr", [False, True])
def test_apply_sums_blocks_in_rank_order(ranks, dtype, group_lr):
    rng = np.random.default_rng(ranks * 7 + group_lr)
    sizes, ks = [16385, 7, 1_000_003], [500, 3, 20_000]
    idx, layout, runs = _blocks(rng, sizes, ks, ranks)
    val = rng.standard_normal(idx.size).astype(f32)
    lr = (np.array([0.1, 0.2, 0.05], f32) if group_lr else np.array(0.1, f32))
    p = [(rng.standard_normal(n) * 0.05).astype(dtype) for n in sizes]
    call = dict(param=p, idx=idx, val=val, lr=lr, layout=layout, done=np.ones(1, f32))
    got, ref = gpu("ms_optim_dgc_apply_multi", **call), cpu("ms_optim_dgc_apply_multi", **call)
    for a, b in zip(got["param"], ref["param"]):
        same_bits(a, b)
    assert got["done"][0] == 0
    block = idx.size // ranks
    for j, n in enumerate(sizes):
        sels = [(runs[r][j], val[r * block + layout[1 + j]:][:ks[j]]) for r in range(ranks)]
        lr_j = lr[j] if group_lr else lr
        want = (p[j].astype(f32) - lr_j * reference.dgc_aggregate(n, sels)).astype(dtype)
        np.testing.assert_array_equal(got["param"][j], want)


@pytest.mark.parametrize("ranks", [1, 2])
def test_apply_float16_is_rounded_once(ranks):
    """0.5 - s with s just below 1.5 float16 ulps of the result: rounded once it is 0.4998
    (bits 14335); rounding s to float16 first, or subtracting in float16, gives 0.4995."""
    s = f32(1.5 * 2 ** -12 - 2 ** -24)
    got = gpu("ms_optim_dgc_apply_multi", param=[np.array([0.5, 0.25], np.float16)],
              idx=np.zeros(ranks, np.int32), val=np.full(ranks, 8 * s, f32),
              lr=np.array(0.125, f32), layout=np.array([ranks, 0, 1], np.int32),
              done=np.zeros(1, f32))
    assert got["param"][0].view(np.uint16).tolist() == [14335, np.float16(0.25).view(np.uint16)]


# -------------------------------------------------------------------- Lamb --

BETA1, BETA2, EPS = 0.9, 0.999, 1e-6


def _lamb_clip(clip_value):
    """The value clip's bounds as the kernels take them (float32; -inf, +inf without)."""
    lo, hi = (-clip_value, clip_value) if clip_value else (-np.inf, np.inf)
    return f32(lo), f32(hi)


def _lamb_call(rng, sizes, wd, lr, always_adapt, clip_norm, clip_value, step=3):
    lo, hi = _lamb_clip(clip_value)
    return dict(
        param=[rng.standard_normal(n).astype(f32) for n in sizes],
        m=[(rng.standard_normal(n) * 0.1).astype(f32) for n in sizes],
        v=[(rng.random(n) * 0.01).astype(f32) for n in sizes],
        grad=[(rng.standard_normal(n) * 2).astype(f32) for n in sizes],
        lr=lr, wd=wd, gscale=np.array([0.5], f32),
        powers=np.array([BETA1 ** step, BETA2 ** step], f32),
        consts=consts("lamb", beta1=BETA1, beta2=BETA2, eps=EPS, clip_norm=clip_norm,
                      clip_lo=lo, clip_hi=hi, always_adapt=always_adapt),
        ratios=np.zeros(len(sizes), f32))


@pytest.mark.parametrize("sizes", [[n] for n in SIZES] + [[16385, 1, 4097, 300_001, 7]],
                         ids=lambda sizes: "n" + "_".join(map(str, sizes)))
@pytest.mark.parametrize("wd, always_adapt, clip_norm, clip_value", [
    (0.01, False, 0.0, 0.0), (0.0, False, 0.0, 0.0), (0.0, True, 0.0, 0.0),
    (0.01, False, 3.0, 0.0), (0.01, False, 0.0, 0.5)])
def test_lamb(sizes, wd, always_adapt, clip_norm, clip_value):
    rng = np.random.default_rng(len(sizes) * 1000 + sizes[0] % 1000)
    K = len(sizes)
    group = K > 1
    lr = np.linspace(0.01, 0.02, K).astype(f32) if group else np.array([0.01], f32)
    wds = (np.array([wd * (j % 2) for j in range(K)], f32) if group and wd
           else np.array([wd], f32))
    call = _lamb_call(rng, sizes, wds, lr, always_adapt, clip_norm, clip_value)
    got, ref = gpu("ms_optim_lamb", **call), cpu("ms_optim_lamb", **call)
    lo, hi = _lamb_clip(clip_value)
    for j, n in enumerate(sizes):
        p, m, v = (call[k][j].copy() for k in ("param", "m", "v"))
        lr_j, wd_j = lr[j if group else 0], wds[j if wds.size > 1 else 0]
        ratio = reference.lamb_step(p, m, v, call["grad"][j], lr_j, BETA1, BETA2, EPS,
                                    BETA1 ** 3, BETA2 ** 3, wd_j, always_adapt, 0.5, clip_norm,
                                    lo, hi)
        same_bits(got["m"][j], m)
        same_bits(got["v"][j], v)
        np.testing.assert_allclose(got["ratios"][j], ratio, rtol=1e-6)
        if not clip_norm:  # the step bit for bit at the kernel's ratio: p - (lr * ratio) * r
            g = call["grad"][j] * f32(0.5)
            if clip_value:
                g = np.minimum(np.maximum(g, lo), hi)
            p0, m0, v0 = (call[k][j].copy() for k in ("param", "m", "v"))
            r = reference.lamb_direction(p0, m0, v0, g, BETA1, BETA2, EPS, BETA1 ** 3,
                                          BETA2 ** 3, wd_j)
            same_bits(got["param"][j], p0 - (f32(lr_j) * got["ratios"][j]) * r)
        np.testing.assert_allclose(got["param"][j], p, rtol=1e-5, atol=1e-7)
        same_bits(got["m"][j], ref["m"][j])
        same_bits(got["v"][j], ref["v"][j])
        np.testing.assert_allclose(got["ratios"][j], ref["ratios"][j], rtol=1e-6)


@pytest.mark.parametrize("sizes", [[1], [16385, 7, 1_000_003]])
def test_sumsq(sizes):
    rng = np.random.default_rng(len(sizes))
    grads = [rng.standard_normal(n).astype(f32) for n in sizes]
    got = gpu("ms_optim_sumsq", grad=grads, sumsq=np.zeros(1, f32))
    want = sum(np.sum(np.square(g.astype(np.float64))) for g in grads)
    np.testing.assert_allclose(got["sumsq"][0], want, rtol=1e-6)


# ----------------------------------------- values only the device reads --

# The outputs a refused call writes: no index, no value.
REFUSED_OUTPUTS = {"ms_optim_dgc_select_multi": ("idx", "val"),
                   "ms_optim_dgc_propose_multi": ("idx",), "ms_optim_dgc_take_multi": ("val",)}


def _refused(entry, match, **named):
    """Runs `entry` on device copies of `named`; the status check must raise `match`, every
    input must be as it was, and the outputs read as refusals (indices -1, values NaN)."""
    dev = to_device(named)
    stream = torch.cuda.current_stream().cuda_stream
    cuda_library.call(entry, stream, **dev)
    with pytest.raises(RuntimeError, match=match):
        cuda_library.status(stream)
    for k, v in named.items():
        got = [b.cpu().numpy() for b in (dev[k] if isinstance(v, list) else [dev[k]])]
        if k in REFUSED_OUTPUTS.get(entry, ()):
            assert (got[0] == -1).all() if k == "idx" else np.isnan(got[0]).all(), k
            continue
        for a, b in zip(v if isinstance(v, list) else [v], got):
            same_bits(b, np.ascontiguousarray(a))
    cuda_library.status(stream)  # reported once, then clear


def _select_call(ks, n=1000):
    rng = np.random.default_rng(0)
    total = int(np.sum(ks))
    return dict(u=[np.ones(n, f32), np.ones(n, f32)], v=[np.ones(n, f32)] * 2,
                grad=[rng.standard_normal(n).astype(f32)] * 2, consts=_dgc_consts(False),
                ks=np.array(ks, np.int32), idx=np.zeros(max(total, 1), np.int32),
                val=np.zeros(max(total, 1), f32))


def test_select_refuses_k_outside_the_tensor():
    _refused("ms_optim_dgc_select_multi", r"ks\[1\] = 0 is outside \[1, 1000\]",
             **_select_call([5, 0]))
    _refused("ms_optim_dgc_select_multi", r"ks\[0\] = 1001 is outside \[1, 1000\]",
             **_select_call([1001, 5]))


def test_select_refuses_ks_that_do_not_sum_to_idx():
    call = _select_call([5, 6])
    call["idx"], call["val"] = np.zeros(12, np.int32), np.zeros(12, f32)
    _refused("ms_optim_dgc_select_multi", r"the ks sum to 11, idx holds 12", **call)


def _apply_call(idx, layout, n=100):
    return dict(param=[np.ones(n, f32)], idx=np.array(idx, np.int32),
                val=np.ones(len(idx), f32), lr=np.array(0.1, f32),
                layout=np.array(layout, np.int32), done=np.ones(1, f32))


def test_apply_refuses_bad_runs_and_layouts():
    _refused("ms_optim_dgc_apply_multi", r"indices of block 1 do not ascend at entry 1",
             **_apply_call([1, 2, 5, 3], [2, 0, 2]))
    _refused("ms_optim_dgc_apply_multi", r"param0: index 100 of block 0 outside \[0, 100\)",
             **_apply_call([1, 100], [1, 0, 2]))
    _refused("ms_optim_dgc_apply_multi", r"layout\[0\] = 3 blocks do not divide the 4 entries",
             **_apply_call([1, 2, 3, 4], [3, 0, 1]))
    _refused("ms_optim_dgc_apply_multi", r"param0's entries \(offset 1, k 2\) do not fit",
             **_apply_call([1, 2], [1, 1, 2]))


def test_apply_refuses_overlapping_parameters():
    call = dict(param=[np.ones(10, f32), np.ones(10, f32)], idx=np.array([1, 2, 3, 4], np.int32),
                val=np.ones(4, f32), lr=np.array(0.1, f32),
                layout=np.array([1, 0, 1, 2, 2], np.int32), done=np.ones(1, f32))
    _refused("ms_optim_dgc_apply_multi", r"entry 1 of a block belongs to param0 and param1",
             **call)


def test_a_refused_select_makes_the_apply_after_it_refuse():
    """No wait between the calls, as in a training step: the select's refusal leaves no
    entries, the apply refuses them, and nothing is stepped."""
    sel = to_device(_select_call([5, 0]))
    n = 1000
    app = to_device(dict(param=[np.ones(n, f32), np.ones(n, f32)], done=np.ones(1, f32),
                         lr=np.array(0.1, f32), layout=np.array([1, 0, 5, 5, 0], np.int32)))
    params, done = app["param"], app["done"]
    stream = torch.cuda.current_stream().cuda_stream
    torch.cuda._sleep(200_000_000)  # the GPU busy for a while: both calls wait in the queue
    cuda_library.call("ms_optim_dgc_select_multi", stream, **sel)
    cuda_library.call("ms_optim_dgc_apply_multi", stream, idx=sel["idx"], val=sel["val"], **app)
    with pytest.raises(RuntimeError, match=r"ks\[1\] = 0 .* 1 later call\(s\) were refused too"):
        cuda_library.status(stream)
    for p in params:
        assert (p.cpu().numpy() == 1).all()
    assert done.cpu().numpy()[0] == 1
    cuda_library.status(stream)


def test_take_refuses_unsorted_runs():
    n = 50
    _refused("ms_optim_dgc_take_multi", r"do not ascend",
             u=[np.ones(n, f32)], v=[np.ones(n, f32)], idx=np.array([4, 3], np.int32),
             layout=np.array([1, 0, 2], np.int32), val=np.zeros(2, f32))


def test_a_refusal_is_reported_by_a_later_call():
    dev = to_device(_select_call([5, 0]))
    stream = torch.cuda.current_stream().cuda_stream
    cuda_library.call("ms_optim_dgc_select_multi", stream, **dev)
    torch.cuda.synchronize()  # the failing kernel has run: the next call sees it
    good = to_device(_select_call([5, 6]))
    with pytest.raises(RuntimeError, match=r"an earlier call failed: "
                       r"ms_optim_dgc_select_multi: ks\[1\] = 0"):
        cuda_library.call("ms_optim_dgc_select_multi", stream, **good)
    cuda_library.call("ms_optim_dgc_select_multi", stream, **good)  # cleared: runs
    cuda_library.status(stream)


def test_host_checks_name_the_tensor():
    call = _select_call([5, 6])
    call["u"] = [np.ones(1000, np.float64), np.ones(1000, f32)]
    dev = to_device(call)
    with pytest.raises(RuntimeError, match=r"u0 must be float32, got float64"):
        cuda_library.call("ms_optim_dgc_select_multi", 0, **dev)
