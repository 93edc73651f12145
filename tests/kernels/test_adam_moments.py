"""AdamOffload's compact moments (bfloat16, block-wise int8): their codecs' rounding and special
values, the kernels against the numpy rules of reference.py on blocks of special values, and
the kernels' checks of the moments.  The kernels against the rules on every size, path and
ISA are tests/kernels/test_host_step_kernels.py's."""
import numpy as np
import pytest

import mindspore as ms

from ms_optim import aot, reference, testing
from tests.kernels.errors import rejects, rejects_one_bad
from tests.moments import Moments

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
B = reference.Q8_BLOCK
def _entry(kind, delta):
    q8 = "_q8" if kind == "int8" else ""
    return f"ms_optim_adam{q8}_{'delta' if delta else 'inplace'}"


def _state(n, dtype, kind, seed, spread=3.0):
    """p, moments, rng; the moments' magnitudes vary over `spread` decades along the tensor,
    so that blocks differ in scale and hold both large and tiny values."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(dtype)
    mag = (10.0 ** (-spread * rng.random(n))).astype(np.float32)
    m = (rng.standard_normal(n) * 0.1 * mag).astype(np.float32)
    v = (rng.random(n) * 0.01 * mag * mag).astype(np.float32)
    return p, Moments(kind, m, v), rng


def _consts(t, nesterov, inv_scale, decoupled):
    b1p, b2p = np.float32(BETA1) ** t, np.float32(BETA2) ** t
    if decoupled:
        c = aot.consts_array("adam_ext", beta1=BETA1, beta2=BETA2, eps=EPS,
                                 inv_scale=inv_scale, nesterov=nesterov, decoupled=1)
    else:
        c = aot.consts_array("adam", beta1=BETA1, beta2=BETA2, eps=EPS, inv_scale=inv_scale,
                                 nesterov=nesterov)
    return dict(powers=np.array([b1p, b2p], np.float32), consts=c), b1p, b2p


def _moments(moms):
    """The kernel's moment slots, by name, of the Moments `moms` (one per tensor): m and v,
    and for int8 moments their scales."""
    named = dict(m=[s.m for s in moms], v=[s.v for s in moms])
    if moms[0].scales:
        named.update(m_scale=[s.scales[0] for s in moms], v_scale=[s.scales[1] for s in moms])
    return named


def _step(states, grads, lr, wd, t, nesterov, inv_scale, delta, decoupled=False, first=0):
    """One kernel call on the tensors `states` [(p, Moments)] at step t, the first of them
    parameter `first` of its optimizer; returns the deltas (delta path)."""
    kind = states[0][1].kind
    consts, _, _ = _consts(t, nesterov, inv_scale, decoupled)
    moms = _moments([s for _, s in states])
    if kind == "int8":
        consts["key"] = np.array([t, first], np.int32)
    if delta:
        outs = [np.full(g.size, 7, g.dtype) for g in grads]
        testing.call_kernel(_entry(kind, True), **moms, grad=grads, lr=lr, **consts, delta=outs)
        return outs
    done = np.ones(1, np.float32)
    testing.call_kernel(_entry(kind, False), param=[p for p, _ in states], **moms, grad=grads,
                        lr=lr, wd=wd, **consts, done=done)
    assert done[0] == 0
    return None


def _ref_step(p, mom, g, lr, wd, t, nesterov, inv_scale, delta, decoupled=False, index=0):
    """The reference's step t of parameter `index` of its optimizer."""
    _, b1p, b2p = _consts(t, nesterov, inv_scale, decoupled)
    return reference.adam_compact_step(p, *mom.ref_args()[:2], g, lr, BETA1, BETA2, EPS, b1p, b2p,
                                       mom.kind, *mom.ref_args()[2:], weight_decay=wd,
                                       inv_scale=inv_scale, nesterov=nesterov, delta=delta,
                                       decoupled=decoupled,
                                       q8_key=reference.q8_tensor_key(t, index))


# ----------------------------------------------------------- the codes alone --

def test_bfloat16_rounding_is_nearest_even_like_mindspore():
    """reference.bf16_bits against MindSpore's own float32 -> bfloat16 cast: ties, subnormals,
    overflow to inf; NaN stays NaN."""
    rng = np.random.default_rng(3)
    x = np.concatenate([
        (2.0 ** rng.uniform(-140, 128, 100_000) * rng.choice([-1, 1], 100_000)).astype(np.float32),
        np.float32([1.00390625, 1.01171875, -1.00390625, 0.0, -0.0, np.inf, -np.inf, 3.4e38,
                    1e-45, 1.2e-38]),
        rng.integers(0, 2 ** 32, 10_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    finite = ~np.isnan(x)
    with np.errstate(over="ignore"):
        want = ms.Tensor(x[finite]).astype(ms.bfloat16).asnumpy().view(np.uint16)
    np.testing.assert_array_equal(reference.bf16_bits(x[finite]), want)
    bits = reference.bf16_bits(x[~finite])
    assert np.isnan(reference.bf16_value(bits)).all()
    np.testing.assert_array_equal(reference.bf16_value(reference.bf16_bits(np.float32([1.5, -2]))),
                                  np.float32([1.5, -2]))


@pytest.mark.parametrize("fmt", [reference.Q8_M, reference.Q8_V])
def test_q8_code_is_monotone_and_rounds_to_nearest_even(fmt):
    top = reference.q8_top_code(fmt)
    codes = np.arange(top + 1)
    vals = reference.q8_value(codes, fmt)
    assert vals[0] == 0 and np.all(np.diff(vals) > 0) and vals[-1] == 1
    np.testing.assert_array_equal(reference.q8_encode(vals, fmt), codes)
    mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
    exact = mids.astype(np.float64) == (vals[:-1].astype(np.float64) + vals[1:]) / 2
    got = reference.q8_encode(mids, fmt)
    np.testing.assert_array_equal(got[exact], np.where(codes[:-1] % 2 == 0, codes[:-1],
                                                       codes[1:])[exact])
    above = np.nextafter(mids, np.float32(2))
    # between 0 and the smallest code (2^(1-2^E) (1 + 2^-M)) everything flushes to 0
    np.testing.assert_array_equal(reference.q8_encode(above, fmt)[1:], codes[2:])
    tiny = np.float32(2.0 ** (1 - (1 << fmt[0])))
    np.testing.assert_array_equal(reference.q8_encode(np.float32([tiny * 0.99, tiny * 1.2]), fmt),
                                  [0, 2])
    np.testing.assert_array_equal(reference.q8_encode(np.float32([1.0, 1.5]), fmt), [top, top])


@pytest.mark.parametrize("fmt", [reference.Q8_M, reference.Q8_V])
def test_q8_stochastic_rounding_is_unbiased(fmt):
    """Over all 2^16 values of the random bits, a magnitude's mean stored value is itself
    (within 2^-16 of a code step): it rounds up with probability its dropped fraction.
    Exact codes never move, and 0 random bits round down (truncation)."""
    rng = np.random.default_rng(5)
    tiny = 2.0 ** (2 - (1 << fmt[0]))  # above the lowest binade (code 0 is 0, not its start)
    y = np.float32(tiny * 2.0 ** rng.uniform(0, -np.log2(tiny), 64))
    r = np.arange(1 << 16, dtype=np.uint32)
    codes = reference.q8_encode(np.repeat(y, r.size), fmt, np.tile(r, y.size))
    mean = reference.q8_value(codes, fmt).astype(np.float64).reshape(y.size, -1).mean(axis=1)
    lo = reference.q8_value(reference.q8_encode(y, fmt, np.zeros(y.size, np.uint32)), fmt)
    hi = reference.q8_value(reference.q8_encode(y, fmt, np.full(y.size, 0xffff, np.uint32)), fmt)
    assert np.all(lo <= y) and np.all(hi >= y) and np.all(lo < hi)
    assert np.all(np.abs(mean - y) <= (hi - lo) * 2.0 ** -16 * 1.0001)
    vals = reference.q8_value(np.arange(1, reference.q8_top_code(fmt) + 1), fmt)
    for bits in (0, 0x7fff, 0xffff):
        got = reference.q8_encode(vals, fmt, np.full(vals.size, bits, np.uint32))
        np.testing.assert_array_equal(got, np.arange(1, vals.size + 1))


def test_q8_rounding_bits_follow_the_documented_hash():
    """reference's vectorized hash against the rule written out on Python integers
    (docs/algorithms.md; the kernels match the reference bit for bit above), and distinct
    steps and parameters give unrelated bits."""
    def mix(x):
        for shift, mul in ((16, 0x7feb352d), (15, 0x846ca68b)):
            x = ((x ^ (x >> shift)) * mul) & 0xffffffff
        return x ^ (x >> 16)

    golden = 0x9e3779b9
    for step, index in ((1, 0), (2, 7), (123456, 3), (2 ** 31 - 1, 255)):
        key = mix((mix(step) + index * golden) & 0xffffffff)
        assert int(reference.q8_tensor_key(step, index)) == key
        def bits(j):
            x = (key + j * golden) & 0xffffffff
            x = ((x ^ (x >> 16)) * 0x7feb352d) & 0xffffffff
            return x ^ (x >> 15)

        want = [bits(j) for j in (0, 1, 1000, 70001)]
        got = reference.q8_round_bits(reference.q8_tensor_key(step, index), 70002)
        assert [int(got[j]) for j in (0, 1, 1000, 70001)] == want
    k = [reference.q8_tensor_key(t, i) for t in (1, 2) for i in (0, 1)]
    assert len({int(x) for x in k}) == 4
    a, b = reference.q8_round_bits(k[0], 4096), reference.q8_round_bits(k[1], 4096)
    assert np.mean(a == b) < 0.01 and 0.45 < np.mean(a & 1) < 0.55


def test_int8_v_follows_shrinking_gradients():
    """The bias stochastic rounding removes.  In each block one element keeps its gradient
    scale (it holds the absmax) while the others' gradients shrink to 0.3x at step 100:
    their v should decay by 0.1% a step, less than half a code step, so rounding to nearest
    keeps their old codes (v 1.5x too large by step 400, the steps 17% short).  Rounded
    stochastically, the stored v's mean follows float32's within 3% at every step."""
    n = 8 * B
    others = np.arange(n) % B != 0

    def run(stochastic):
        rng = np.random.default_rng(0)
        v = np.zeros(n, np.float32)
        vq, vs = reference.q8_quantize(v, False)
        ratios = []
        for t in range(1, 401):
            g = rng.standard_normal(n).astype(np.float32)
            if t > 100:
                g[others] *= np.float32(0.3)
            v = np.float32(BETA2) * v + np.float32(1 - BETA2) * g * g
            v8 = reference.q8_dequantize(vq, vs, False)
            v8 = np.float32(BETA2) * v8 + np.float32(1 - BETA2) * g * g
            bits = reference.q8_round_bits(reference.q8_tensor_key(t, 0), n) if stochastic \
                else None
            vq, vs = reference.q8_quantize(v8, False, bits)
            stored = reference.q8_dequantize(vq, vs, False)
            ratios.append(stored[others].mean() / v[others].mean())
        return np.array(ratios)

    assert np.abs(run(True) - 1).max() < 0.03
    assert run(False)[-1] > 1.3  # the scenario does stall rounding to nearest


def test_q8_block_absmax_is_stored_exactly():
    """The largest element of a block is its scale times code 1.0, not rounded down: a code
    whose top value were below 1 would shrink every block's largest moment on every step."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(2 * B + 3).astype(np.float32)
    for signed in (True, False):
        y = x if signed else np.abs(x)
        back = reference.q8_dequantize(*reference.q8_quantize(y, signed), signed)
        for b in range(3):
            i = b * B + int(np.argmax(np.abs(y[b * B:(b + 1) * B])))
            assert back[i] == y[i]


def test_int8_tiny_v_keeps_the_smallest_code_in_kernel_and_reference(isa):
    """A v below the smallest code of its block is stored as that code, never 0, by the
    kernel exactly as by the reference.  The case it matters for: one gradient spike puts a
    block's v absmax 1e11 above its neighbours' while their m stays representable; with v
    flushed to 0 their steps were m / eps (1e5 x lr).  Kept, no element moves more than lr
    a step.  Gradients spread over 12 decades, and exact zeros, cover the rest."""
    n = 2 * B + 7
    rng = np.random.default_rng(9)
    p = rng.standard_normal(n).astype(np.float32)
    mom = Moments("int8", np.zeros(n, np.float32), np.zeros(n, np.float32))
    p0, rp, rmom = p.copy(), p.copy(), mom.copy()
    lr, wd = np.array(1e-3, np.float32), np.array(0.0, np.float32)
    steps = 60
    for t in range(1, steps + 1):
        g = np.ones(n, np.float32)
        g[0] = 1e6 if t == 1 else 0.0  # block 0: the spike
        g[B:] = (rng.standard_normal(n - B) * 10.0 ** (-12 * rng.random(n - B)))
        g[B::97] = 0
        _step([(p, mom)], [g], lr, wd, t, False, 1.0, False)
        _ref_step(rp, rmom, g, lr, wd, t, False, 1.0, False)
        mom.assert_equal(rmom)
        np.testing.assert_array_equal(p, rp)
    assert np.all(mom.v[1:B] != 0)
    assert np.abs(p - p0).max() <= steps * 1e-3 * 1.01


@pytest.mark.parametrize("delta", [False, True])
def test_int8_whole_blocks_with_special_values_match_reference(isa, delta):
    """Whole blocks (the AVX2 encoder's 32-element steps) and a partial one, holding NaN,
    +-inf, -0.0, exact zeros, the largest floats and values below each block's smallest
    code: codes, scales and parameters bit for bit as the reference, over three steps."""
    n = 4 * B + 37
    rng = np.random.default_rng(11)
    p = rng.standard_normal(n).astype(np.float32)
    mom = Moments("int8", np.zeros(n, np.float32), np.zeros(n, np.float32))
    rp, rmom = p.copy(), mom.copy()
    lr, wd = np.array(1e-3, np.float32), np.array(0.0, np.float32)
    seen = np.zeros(n, bool)
    for t in range(1, 4):
        g = (rng.standard_normal(n) * 10.0 ** (-9 * rng.random(n))).astype(np.float32)
        g[::41] = 0.0
        g[3::43] = -0.0
        seen |= g != 0
        g[B + 5], g[B + 70], g[2 * B + 1], g[4 * B + 3] = np.nan, np.inf, -np.inf, np.nan
        g[3 * B + 9], g[3 * B + 200] = 3.4e38, -3.4e38
        outs = _step([(p, mom)], [g], lr, wd, t, False, 1.0, delta)
        with np.errstate(over="ignore", invalid="ignore"):
            ref = _ref_step(rp, rmom, g, lr, wd, t, False, 1.0, delta)
        mom.assert_equal(rmom)
        if delta:
            np.testing.assert_array_equal(outs[0], ref)
        else:
            np.testing.assert_array_equal(p, rp)
    # block 0 (no special values): v is nonzero exactly where a gradient was
    np.testing.assert_array_equal(mom.v[:B] != 0, seen[:B])
    # an inf moment makes its block's scale inf: the whole block is non-finite from then
    # on (float32 moments would poison only the element; either way the step is lost)
    assert not np.isfinite(reference.q8_dequantize(mom.m, mom.scales[0], True)[B:2 * B]).any()


def test_int8_adam_tracks_float32_adam_over_many_steps():
    """300 steps of noisy gradients with per-element scales spread over decades: int8 moments
    move the parameters by the same amount as float32 moments (2%) and keep v's mean level (a
    systematic shrink of the stored moments, e.g. from a saturating top code, shows here as
    a larger step: it did, by 12%, with v at 0.6x)."""
    rng = np.random.default_rng(0)
    n = 16 * B
    spread = np.exp(rng.standard_normal(n)).astype(np.float32) * 1e-3
    p0 = rng.standard_normal(n).astype(np.float32)
    p, m, v = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
    pq, mq, vq = p0.copy(), np.zeros(n, np.int8), np.zeros(n, np.uint8)
    ms_, vs = np.zeros(n // B, np.float32), np.zeros(n // B, np.float32)
    for t in range(1, 301):
        g = ((0.5 + rng.standard_normal(n)) * spread).astype(np.float32)
        bp1, bp2 = np.float32(BETA1 ** t), np.float32(BETA2 ** t)
        reference.adam_offload_step(p, m, v, g, 1e-3, BETA1, BETA2, EPS, bp1, bp2)
        reference.adam_compact_step(pq, mq, vq, g, 1e-3, BETA1, BETA2, EPS, bp1, bp2, "int8",
                                    ms_, vs, q8_key=reference.q8_tensor_key(t, 0))
    moved, moved_q = np.linalg.norm(p - p0), np.linalg.norm(pq - p0)
    assert abs(moved_q / moved - 1) < 0.02
    assert np.linalg.norm((pq - p0) - (p - p0)) / moved < 0.08
    # v's level: the stored values' mean (stochastic rounding keeps the expectation; their
    # median sits lower, the rounding noise being skewed)
    assert abs(reference.q8_dequantize(vq, vs, False).mean() / v.mean() - 1) < 0.02


def test_q8_quantize_round_trip_error_and_special_blocks():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(3 * B + 5) * 10.0 ** rng.uniform(-2, 0, 3 * B + 5)).astype(np.float32)
    x[B:2 * B] = 0  # an all-zero block: scale 0
    for signed in (True, False):
        y = x if signed else np.abs(x)
        codes, scale = reference.q8_quantize(y, signed)
        assert codes.dtype == (np.int8 if signed else np.uint8) and scale.size == 4
        assert scale[1] == 0 and not codes[B:2 * B].any()
        back = reference.q8_dequantize(codes, scale, signed)
        fmt = reference.Q8_M if signed else reference.Q8_V
        big = np.abs(y) > np.repeat(scale, B)[:y.size] * 2.0 ** (1 - (1 << fmt[0]))
        rel = np.abs(back - y)[big] / np.abs(y)[big]
        assert rel.max() <= 2.0 ** -(fmt[1] + 1) * 1.0001
        assert np.all(np.sign(back[back != 0]) == np.sign(y[back != 0]))


# ------------------------------------------------------------------ errors --

def _call(kind, delta=False, sizes=(5, 300)):
    """The tensors of a valid two-tensor call with `kind` moments, by slot name."""
    states = [_state(n, np.float32, kind, seed=n) for n in sizes]
    grads = [np.ones(n, np.float32) for n in sizes]
    consts, _, _ = _consts(1, False, 1.0, False)
    moms = _moments([s for _, s, _ in states])
    if kind == "int8":
        consts["key"] = np.array([1, 0], np.int32)
    if delta:
        return dict(**moms, grad=grads, lr=np.ones(1, np.float32), **consts,
                    delta=[np.zeros(n, np.float32) for n in sizes])
    return dict(param=[p for p, _, _ in states], **moms, grad=grads, lr=np.ones(1, np.float32),
                wd=np.zeros(1, np.float32), **consts, done=np.zeros(1, np.float32))


BAD = [  # (kind, delta, slot, tensor of the slot or None, replacement, code, message)
    ("bfloat16", False, "v", 0, np.ones(5, np.float32), "MSOPT_ERR_DTYPE",
     r"^moments m0, v0 must be float32 \(or all bfloat16.*as m0 \(bfloat16\), got bfloat16 and "
     r"float32$"),
    ("bfloat16", False, "v", 1, np.ones(300, np.float16), "MSOPT_ERR_DTYPE",
     r"^moments m1, v1 must be float32 \(or all bfloat16.*as m0 \(bfloat16\), got bfloat16 and "
     r"float16$"),
    ("int8", False, "m", 0, np.ones(5, np.uint8), "MSOPT_ERR_DTYPE",
     "^moments m0, v0 must be int8 and uint8, got uint8 and uint8$"),
    ("int8", False, "v", 1, np.ones(300, np.int8), "MSOPT_ERR_DTYPE",
     "^moments m1, v1 must be int8 and uint8, got int8 and int8$"),
    ("int8", False, "m_scale", 0, np.ones(2, np.float32), "MSOPT_ERR_SIZE",
     r"^m_scale0 must have 1 element\(s\) \(one per 256\), got 2$"),
    ("int8", False, "v_scale", 1, np.ones(1, np.float32), "MSOPT_ERR_SIZE",
     r"^v_scale1 must have 2 element\(s\) \(one per 256\), got 1$"),
    ("int8", False, "m_scale", 1, np.ones(2, np.float16), "MSOPT_ERR_DTYPE",
     "^m_scale1 must be float32, got float16$"),
    ("int8", True, "m_scale", 0, np.ones(2, np.float32), "MSOPT_ERR_SIZE",
     r"^m_scale0 must have 1 element\(s\) \(one per 256\), got 2$"),
    ("int8", False, "m", 1, np.ones(299, np.int8), "MSOPT_ERR_SIZE",
     "^m1 has 299 elements, param1 300$"),
    ("int8", False, "v", 0, np.ones(4, np.uint8), "MSOPT_ERR_SIZE", "^v0 has 4 elements, param0 5$"),
    ("int8", False, "consts", None, np.ones(7, np.float32), "MSOPT_ERR_SIZE",
     "^consts must have 5 or 6 elements, got 7$"),
    ("int8", False, "key", None, np.ones(2, np.float32), "MSOPT_ERR_DTYPE",
     "^key must be int32, got float32$"),
    ("int8", True, "key", None, np.ones(3, np.int32), "MSOPT_ERR_SIZE",
     r"^key must have 2 elements \(step, first parameter\), got 3$"),
]


@pytest.mark.parametrize("kind,delta,slot,index,bad,code,message", BAD)
def test_kernel_rejects_bad_moments(kind, delta, slot, index, bad, code, message):
    rejects_one_bad(_entry(kind, delta), lambda: _call(kind, delta), slot, index, bad, code,
                    message)


def test_int8_moments_need_the_q8_kernel_and_counts_are_checked():
    call = _call("int8")
    plain = {name: x for name, x in call.items() if name not in ("m_scale", "v_scale", "key")}
    rejects("ms_optim_adam_inplace", "MSOPT_ERR_DTYPE",
            r"^moments m0, v0 must be float32 .*, as m0 \(int8\), got int8 and uint8$", slot="m",
            **plain)
    rejects("ms_optim_adam_q8_inplace", "MSOPT_ERR_ARGS",
            r"^expected 6K \+ 6 tensors \(param:each m:each v:each m_scale:each v_scale:each "
            r"grad:each lr wd powers consts key -> done\), got 17$",
            arrays=aot.arrange_arrays("ms_optim_adam_q8_inplace", **call)[:-1])
    delta = aot.arrange_arrays("ms_optim_adam_q8_delta", **_call("int8", True, sizes=(5,)))
    rejects("ms_optim_adam_q8_delta", "MSOPT_ERR_ARGS",
            r"^expected 6K \+ 4 tensors \(m:each v:each m_scale:each v_scale:each grad:each lr "
            r"powers consts key -> delta:each\), got 9$", arrays=delta[:-1])


def test_block_size_matches_the_library():
    assert aot.q8_block() == reference.Q8_BLOCK
