"""Framework-free numpy update rules: the single source of truth for tests.

Each function is the plain rule of one optimizer step, written for clarity and
evaluated in float32 with the same operation order as the native kernels, so
the kernels can be checked against it elementwise (bit for bit where the
kernels are built without floating-point contraction).  Arrays are updated in
place; the functions return what the optimizer would send elsewhere.
"""
import numpy as np

f32 = np.float32


def adam_lr_t(lr, beta1_power, beta2_power):
    """MindSpore's bias-corrected step size lr * sqrt(1 - beta2^t) / (1 - beta1^t), in float32."""
    return f32(lr) * np.sqrt(f32(1) - f32(beta2_power)) / (f32(1) - f32(beta1_power))


def adam_delta(m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, nesterov=False,
               inv_scale=1.0):
    """One AdamOffload moment update (m, v in place, float32); returns the float32 step.

    g is the gradient after weight decay and before dividing by the loss scale
    (MindSpore's order), `inv_scale` = 1 / loss_scale, `beta*_power` = beta^t.
    """
    b1, b2 = f32(beta1), f32(beta2)
    c1, c2 = f32(1) - b1, f32(1) - b2
    g = g.astype(f32) * f32(inv_scale)
    m[...] = b1 * m + c1 * g
    v[...] = b2 * v + c2 * g * g
    num = b1 * m + c1 * g if nesterov else m
    return -adam_lr_t(lr, beta1_power, beta2_power) * (num / (np.sqrt(v) + f32(eps)))


def adam_offload_step(p, m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power,
                      weight_decay=0.0, inv_scale=1.0, nesterov=False):
    """One AdamOffload step updating p (float32 or float16), m, v (float32) in place.

    weight_decay is added as wd * p to the still loss-scaled gradient, i.e. it is
    the optimizer's weight decay multiplied by the loss scale (MindSpore stores it so).
    """
    p32 = p.astype(f32)
    g = g.astype(f32)
    if weight_decay != 0:
        g = g + f32(weight_decay) * p32
    delta = adam_delta(m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, nesterov,
                       inv_scale)
    p[...] = (p32 + delta).astype(p.dtype)
    return delta


# ------------------------------------------------ compact AdamOffload moments --
# docs/algorithms.md §1.1: bfloat16 by round to nearest even; int8 by blocks of
# Q8_BLOCK elements, one float32 absmax per block, each element's |x| / absmax
# coded as a small float (Q8_M: sign + 7 bits, Q8_V: 8 bits, no sign).

Q8_BLOCK = 256
Q8_M = (4, 3)  # (exponent bits, mantissa bits) of the signed first moment's magnitude
Q8_V = (5, 3)  # ... of the unsigned second moment


def bf16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even; a NaN stays a quiet NaN."""
    u = np.ascontiguousarray(x, f32).view(np.uint32)
    rounded = (u + np.uint32(0x7fff) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    nan = (u & np.uint32(0x7fffffff)) > np.uint32(0x7f800000)
    return np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), rounded).astype(np.uint16)


def bf16_value(bits):
    """bfloat16 bits (uint16) -> float32, exact."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(f32)


def q8_encode(y, fmt, rbits=None):
    """Codes of magnitudes y in [0, 1] (float32) in the small float fmt = (E, M) without
    subnormals: code 0 is 0, code c > 0 is 2^(c div 2^M - 2^E + 1) * (1 + (c mod 2^M) / 2^M).
    Integer arithmetic on the float32 bits: the exponent rebiased, the dropped mantissa bits
    rounded, the result clamped to [0, Q8 top code]; the top code is exactly 1, so a block's
    absmax element is stored exactly (values below about 2^(1 - 2^E) become 0; anything above
    1 saturates at 1, and so does a NaN, whatever its sign bit: the bits are read as a
    non-negative integer).

    Rounding: stochastic with `rbits` (random integers, their low 16 bits added just below
    the kept mantissa bits, so y rounds up with probability its dropped fraction: the kernels'
    rule); to nearest, ties to even, without (the code map alone, for comparisons)."""
    e_bits, m_bits = fmt
    shift = 23 - m_bits
    ax = np.ascontiguousarray(y, f32).view(np.uint32).astype(np.int64)
    if rbits is None:
        add = ((1 << (shift - 1)) - 1) + ((ax >> shift) & 1)
    else:
        add = (np.asarray(rbits).astype(np.int64) & 0xffff) << (shift - 16)
    code = (ax - ((128 - (1 << e_bits)) << 23) + add) >> shift
    return np.clip(code, 0, q8_top_code(fmt)).astype(np.uint32)


GOLDEN = np.uint32(0x9e3779b9)  # rules::kQ8Golden


def q8_mix(x):
    """rules::q8_mix, the 32-bit integer hash of the rounding bits, on uint32 arrays."""
    x = np.asarray(x, np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7feb352d)
        x = x ^ (x >> np.uint32(15))
        x = x * np.uint32(0x846ca68b)
        return x ^ (x >> np.uint32(16))


def q8_tensor_key(step, index):
    """The rounding key of the parameter at position `index` among an optimizer's parameters
    at `step` (global_step after the step's increment)."""
    with np.errstate(over="ignore"):
        return q8_mix(q8_mix(np.uint32(step & 0xffffffff))
                      + np.uint32(index & 0xffffffff) * GOLDEN)


def q8_round_bits(key, n):
    """The 32 random bits of elements 0..n-1 of a tensor with rounding `key`: the low 16
    round m's code, the high 16 v's (the first multiply of q8_mix on key + j * GOLDEN)."""
    with np.errstate(over="ignore"):
        x = np.uint32(key) + np.arange(n, dtype=np.uint64).astype(np.uint32) * GOLDEN
        x = (x ^ (x >> np.uint32(16))) * np.uint32(0x7feb352d)
        return x ^ (x >> np.uint32(15))


def q8_top_code(fmt):
    """The code of 1.0 (the largest one used): exponent field 2^E - 1, mantissa 0."""
    return ((1 << fmt[0]) - 1) << fmt[1]


def q8_value(code, fmt):
    """float32 magnitudes of codes (the inverse of q8_encode on its grid), exact."""
    e_bits, m_bits = fmt
    c = np.asarray(code).astype(np.uint32)
    bits = (c << np.uint32(23 - m_bits)) + np.uint32((128 - (1 << e_bits)) << 23)
    return np.where(c == 0, np.uint32(0), bits).astype(np.uint32).view(f32)


def _blocks(x):
    """x (1-D float32) padded with zeros to whole Q8_BLOCK blocks, shaped [blocks, Q8_BLOCK]."""
    nb = -(-x.size // Q8_BLOCK)
    out = np.zeros(nb * Q8_BLOCK, f32)
    out[:x.size] = x
    return out.reshape(nb, Q8_BLOCK)


def q8_quantize(x, signed, rbits=None):
    """Block-wise quantization of float32 x: (codes int8 for signed / uint8, scales float32[blocks]).

    scale = max |x| of the block (NaN ignored); a block whose absmax is below the smallest
    normal float32 (zero included) gets scale 0 and codes 0.  Code = q8_encode(|x| * (1 / scale))
    with the sign applied as a negative int8 for signed moments.  Unsigned (v): a y = |x| / scale
    > 0 too small for the smallest code gets that code, not 0, so that m / sqrt(v) cannot blow up
    where m survived and v flushed (a larger v only shortens that element's step).
    `rbits`: q8_round_bits of the tensor (m rounds with their low 16 bits, v with their high
    16), or None to round to nearest.
    """
    fmt = Q8_M if signed else Q8_V
    b = _blocks(np.ravel(x).astype(f32))
    mag = np.abs(b)
    scale = np.max(np.where(np.isnan(mag), f32(0), mag), axis=1).astype(f32)
    scale = np.where(scale < np.finfo(f32).tiny, f32(0), scale)
    r = None
    if rbits is not None:  # m's bits are the low 16, v's the high 16; padded like the blocks
        bits = np.asarray(rbits, np.uint32)
        r = np.zeros(b.size, np.uint32)
        r[:np.size(x)] = bits if signed else bits >> np.uint32(16)
        r = r.reshape(b.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.where(scale > 0, f32(1) / scale, f32(0)).astype(f32)
        y = mag * inv[:, None]
        code = q8_encode(y, fmt, r)
    if not signed:  # a positive v is never stored as 0: at least the smallest code
        code = np.where(y > 0, np.maximum(code, 1), code)
    code = code.reshape(-1)[:np.size(x)]
    if signed:
        neg = np.signbit(b).reshape(-1)[:np.size(x)]
        return np.where(neg, -code.astype(np.int32), code.astype(np.int32)).astype(np.int8), scale
    return code.astype(np.uint8), scale


def q8_dequantize(codes, scale, signed):
    """float32 values of block-quantized codes: value(|code|) * scale, negated for a negative code."""
    fmt = Q8_M if signed else Q8_V
    c = np.ravel(codes).astype(np.int32)
    mag = q8_value(np.abs(c), fmt) * np.repeat(np.asarray(scale, f32), Q8_BLOCK)[:c.size]
    return np.where(c < 0, -mag, mag).astype(f32)


def compact_step(step, moments, signed, moment_dtype, scales=None, q8_key=None):
    """Runs `step(*moments32)`, a float32 rule that updates its moments in place, on moments
    stored as `moment_dtype`, and returns what it returns: "float32" (the moments as they
    are), "bfloat16" (uint16 bits) or "int8" (codes, int8 where `signed` says so per moment
    and uint8 otherwise, with float32 `scales` per block).  The moments are decoded to
    float32, stepped, and encoded again, in place; int8 codes round stochastically, every
    moment with the same bits, q8_round_bits(q8_key)."""
    if moment_dtype == "float32":
        return step(*moments)
    if moment_dtype == "int8" and q8_key is None:
        raise ValueError("compact_step: int8 moments need q8_key (q8_tensor_key)")
    if moment_dtype == "bfloat16":
        wide = [bf16_value(m) for m in moments]
    else:
        wide = [q8_dequantize(m, s, sg) for m, s, sg in zip(moments, scales, signed)]
    out = step(*wide)
    if moment_dtype == "bfloat16":
        for m, w in zip(moments, wide):
            m[...] = bf16_bits(w)
    else:
        bits = q8_round_bits(q8_key, np.size(wide[0]))
        for m, s, sg, w in zip(moments, scales, signed, wide):
            m[...], s[...] = q8_quantize(w, sg, bits)
    return out


def adam_compact_step(p, m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, moment_dtype,
                      m_scale=None, v_scale=None, weight_decay=0.0, inv_scale=1.0, nesterov=False,
                      delta=False, decoupled=False, q8_key=None):
    """adam_offload_step (delta=False, p updated) or adam_delta (delta=True, returns the step)
    with moments stored as `moment_dtype` (compact_step: m signed, v not)."""
    def step(m32, v32):
        if delta:
            return adam_delta(m32, v32, g, lr, beta1, beta2, eps, beta1_power, beta2_power,
                              nesterov, inv_scale)
        if decoupled:
            return adamw_step(p, m32, v32, g, lr, beta1, beta2, eps, weight_decay, inv_scale)
        return adam_offload_step(p, m32, v32, g, lr, beta1, beta2, eps, beta1_power,
                                 beta2_power, weight_decay, inv_scale, nesterov)
    return compact_step(step, (m, v), (True, False), moment_dtype, (m_scale, v_scale), q8_key)


def adamw_step(p, m, v, g, lr, beta1, beta2, eps, weight_decay, inv_scale=1.0):
    """One step of MindSpore's nn.AdamWeightDecay rule on p (float32 or float16), m, v in place:
    no bias correction, decoupled decay p -= lr * (m / (sqrt(v) + eps) + wd * p)."""
    p32 = p.astype(f32)
    b1, b2 = f32(beta1), f32(beta2)
    g = g.astype(f32) * f32(inv_scale)
    m[...] = b1 * m + (f32(1) - b1) * g
    v[...] = b2 * v + (f32(1) - b2) * g * g
    update = m / (np.sqrt(v) + f32(eps))
    if weight_decay != 0:
        update = update + f32(weight_decay) * p32
    p[...] = (p32 + -(f32(lr) * update)).astype(p.dtype)


def lion_sign(c):
    """sign(c) in float32 with sign(0) = 0 (the signed zero itself), otherwise
    sign(c) + (c - c): +-1 for a finite c, NaN for a NaN or infinite c (an overflow shows in
    the parameter)."""
    c = np.asarray(c, f32)
    with np.errstate(invalid="ignore"):
        return np.where(c == 0, c, np.where(c < 0, f32(-1), f32(1)) + (c - c)).astype(f32)


def lion_step(p, m, g, lr, beta1, beta2, weight_decay=0.0, inv_scale=1.0, delta=False):
    """One Lion step (Chen et al., 2023) on p (float32 or float16) and m (float32) in place:
    g' = g * inv_scale, c = beta1 * m + (1 - beta1) * g', m = beta2 * m + (1 - beta2) * g',
    p = p * (1 - lr * wd) - lr * sign(c).  With `delta` p is not touched (it may be None) and
    the step -lr * sign(c) is returned (the decay is the caller's)."""
    b1, b2 = f32(beta1), f32(beta2)
    g = g.astype(f32) * f32(inv_scale)
    c = b1 * m + (f32(1) - b1) * g
    m[...] = b2 * m + (f32(1) - b2) * g
    step = -f32(lr) * lion_sign(c)
    if delta:
        return step
    keep = f32(1) - f32(lr) * f32(weight_decay)
    p[...] = (p.astype(f32) * keep + step).astype(p.dtype)
    return step


def lion_compact_step(p, m, g, lr, beta1, beta2, moment_dtype, m_scale=None, weight_decay=0.0,
                      inv_scale=1.0, delta=False, q8_key=None):
    """lion_step with m stored as `moment_dtype` (compact_step: m signed)."""
    return compact_step(
        lambda m32: lion_step(p, m32, g, lr, beta1, beta2, weight_decay, inv_scale, delta),
        (m,), (True,), moment_dtype, (m_scale,), q8_key)


def clip_by_global_norm(grads, clip_norm):
    """Paddle's ClipGradByGlobalNorm: every g *= c / max(||all grads||, c) (norm in float64)."""
    gn = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads))
    factor = f32(clip_norm / max(gn, clip_norm))
    return [g.astype(f32) * factor for g in grads]


def clip_by_norm(g, clip_norm):
    """Paddle's ClipGradByNorm for one tensor: if ||g|| > c, g *= c / ||g||."""
    norm = np.sqrt(np.sum(np.square(g.astype(np.float64))))
    return g.astype(f32) * f32(clip_norm / norm) if norm > clip_norm else g.astype(f32)


def clip_by_value(g, max_value, min_value=None):
    """Paddle's ClipGradByValue: clamp to [min, max], min defaulting to -max."""
    lo = -max_value if min_value is None else min_value
    return np.minimum(np.maximum(g.astype(f32), f32(lo)), f32(max_value))


def lamb_direction(p, m, v, g, beta1, beta2, eps, beta1_power, beta2_power, weight_decay):
    """Updates m, v in place and returns Lamb's direction r, in p's dtype:
    (m / bc1) / (sqrt(v / bc2) + eps) + wd * p, with the kernels' reciprocals (rules.h)."""
    t = p.dtype.type
    b1, b2 = t(beta1), t(beta2)
    m[...] = b1 * m + (t(1) - b1) * g
    v[...] = b2 * v + (t(1) - b2) * g * g
    inv_bc1 = t(1) / (t(1) - t(beta1_power))
    inv_sqrt_bc2 = t(1) / np.sqrt(t(1) - t(beta2_power))
    return (m * inv_bc1) / (np.sqrt(v) * inv_sqrt_bc2 + t(eps)) + t(weight_decay) * p


def lamb_step(p, m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, weight_decay,
              always_adapt=False, grad_scale=1.0, clip_norm=0.0, clip_lo=-np.inf,
              clip_hi=np.inf):
    """One Lamb step (PaddlePaddle's rule, docs/algorithms.md §2) on float32 p, m, v in place.

    The gradient is first multiplied by `grad_scale` (1/loss_scale, times a global
    clip factor), then, if clip_norm > 0, scaled down to that norm, then clamped
    to [clip_lo, clip_hi].  Returns the trust ratio used.
    """
    s = f32(grad_scale)
    if clip_norm > 0:
        norm = np.sqrt(np.sum(np.square(g.astype(np.float64)))) * float(s)
        if norm > float(f32(clip_norm)):
            s = s * f32(float(f32(clip_norm)) / norm)
    g = np.minimum(np.maximum(g.astype(f32) * s, f32(clip_lo)), f32(clip_hi))
    r = lamb_direction(p, m, v, g, beta1, beta2, eps, beta1_power, beta2_power, weight_decay)
    ratio = f32(1)
    if weight_decay > 0 or always_adapt:
        p_norm = np.sqrt(np.sum(np.square(p.astype(np.float64))))
        r_norm = np.sqrt(np.sum(np.square(r.astype(np.float64))))
        if p_norm > 0 and r_norm > 0:
            ratio = f32(p_norm / r_norm)
    p -= (f32(lr) * ratio) * r
    return ratio


def magnitude_keys(x):
    """|x| as integers, the order every selection follows (core/radix.h): the float32 bits
    with the sign cleared, which order like |x| for numbers and put a NaN above +inf."""
    return np.ascontiguousarray(x, f32).view(np.uint32) & np.uint32(0x7fffffff)


def topk_abs(x, k):
    """The k entries of largest |x| (a NaN above +inf), ties to the lower index: (ascending
    int32 indices, x[indices])."""
    x = x.reshape(-1)
    keys = magnitude_keys(x).astype(np.int64)
    order = np.lexsort((np.arange(x.size), -keys))  # by key descending, then index
    idx = np.sort(order[:k]).astype(np.int32)
    return idx, x[idx]


# DGC's schedule (PaddlePaddle's DGCMomentumOptimizer): a parameter of at least
# DGC_MIN_NUMEL elements is compressed; the warm-up spreads the sparsities evenly over
# rampup_step steps from rampup_begin_step on, and the last one holds after.  Written here
# apart from ms_optim.dgc.schedule, which the optimizer uses, so that a mistake in either shows
# as a disagreement in the tests.
DGC_MIN_NUMEL = 16384


def dgc_stage(step, rampup_begin_step, rampup_step, stages):
    """The warm-up stage of `step` (counted from 0, at or after rampup_begin_step)."""
    return min((step - rampup_begin_step) * stages // rampup_step, stages - 1)


def dgc_k(numel, step, rampup_begin_step, rampup_step, sparsity, bucket_sparsity=None):
    """Elements a compressed parameter (or the bucket of small ones, with its
    `bucket_sparsity`, never sparser than the stage's) of `numel` elements sends at `step`,
    once compressing: at least one."""
    s = sparsity[dgc_stage(step, rampup_begin_step, rampup_step, len(sparsity))]
    if bucket_sparsity is not None:
        s = min(s, bucket_sparsity)
    return max(1, int(numel * (1 - s)))


def dgc_propose(u, v, g, momentum, k, nesterov=False):
    """The first half of DGC's local step, on float32 u, v in place: momentum correction,
    then the indices of the exact top-k of |v| (ascending, ties to the lower index)."""
    m = f32(momentum)
    if nesterov:
        u[...] = m * (u + g)
        v[...] = v + u + g
    else:
        u[...] = m * u + g
        v[...] = v + u
    return topk_abs(v, k)[0]


def dgc_take(u, v, idx):
    """The second half, at the indices `idx` (from this worker or others): the values of v
    there, then momentum factor masking (u and v set to 0 there).  An index that repeats
    takes its value at its first entry and 0 at the later ones."""
    idx = np.asarray(idx).reshape(-1)
    val = np.zeros(idx.size, f32)
    _, first = np.unique(idx, return_index=True)
    val[first] = v.reshape(-1)[idx[first]]
    u.reshape(-1)[idx] = 0
    v.reshape(-1)[idx] = 0
    return val


def dgc_select(u, v, g, momentum, k, nesterov=False):
    """DGC's local step on float32 u, v in place: momentum correction, exact top-k of |v|,
    momentum factor masking.  Returns (indices, values) to exchange."""
    idx = dgc_propose(u, v, g, momentum, k, nesterov)
    return idx, dgc_take(u, v, idx)


def dgc_leader(step, nranks):
    """The worker whose indices every worker takes at `step` with the leader exchange."""
    return step % nranks


def dgc_aggregate(numel, selections):
    """G = scatter_add(zeros, all indices, all values) / number of workers (rank order)."""
    G = np.zeros(numel, f32)
    for idx, val in selections:
        np.add.at(G, idx, val)
    return G / f32(len(selections))


def dgc_momentum(p, u, g, lr, momentum, nesterov=False):
    """DGC's dense momentum on float32 u, g in place: u = m*u + g; p -= lr * step with
    step = u (Nesterov: g + m*u), in float32, rounded once to p's dtype."""
    m = f32(momentum)
    u[...] = m * u + g
    step = g + m * u if nesterov else u
    p[...] = (p.astype(f32) - f32(lr) * step).astype(p.dtype)


def dgc_flush(p, u, v, mean_u, mean_v, lr):
    """DGC's residuals flushed where sparsity="auto" goes dense, in place: p -= lr * mean_v
    in float32, rounded once to p's dtype; u = mean_u; v = 0 (the means: the workers'
    mean of u and of v)."""
    p[...] = (p.astype(f32) - f32(lr) * mean_v).astype(p.dtype)
    u[...] = mean_u
    v[...] = 0


class DGCReference:
    """Data-parallel DGCMomentum (docs/algorithms.md §3) over `nranks` workers in numpy.

    params: list of arrays (shared by the workers); per parameter `wd` (L2
    through MindSpore's weight_decay, or the L2Decay coefficient) and `l1`.
    step() takes each worker's gradient list and updates the parameters in place.
    Float32 and float16 parameters of at least `min_numel` elements are
    compressed; a compressed float16 one has float32 residuals u, v, its
    gradient and value enter the local step in float32, and each new value is
    computed in float32 and rounded once to float16.

    `exchange` "exact" applies the mean of every worker's own selection
    (DGCMomentum's "allgather" and "allreduce", which differ only in the
    collective); "leader" and "union" the exchanges of shared indices: every
    worker takes its values at the indices worker ``t % nranks`` proposes at
    step t (leader), or at every worker's ``union_k`` proposals side by side
    (union; an index proposed twice is taken once), and the mean of those is
    applied (docs/algorithms.md §3).

    With a `bucket_sparsity`, the float32 and float16 parameters below `min_numel`
    elements are compressed together from `rampup_begin_step` on: the same local step on
    their concatenation (float32 u, v, as a compressed parameter's), one exact top-k of
    ``dgc_k(total, ..., bucket_sparsity)`` entries over all of them (with "leader" and
    "union" as for a compressed parameter), the mean of every worker's selection applied
    (DGCMomentum's ``bucket_sparsity``).

    The parameters whose indices are in `dense` are never compressed, alone or in the
    bucket (DGCMomentum's ``dense_params``).

    With `lr_in_residuals`, a compressed or bucketed parameter's local gradient is
    multiplied by the step's learning rate (float32) once prepared, at every step, and the
    parameter is stepped with a learning rate of 1: u and v hold learning-rate-scaled
    updates (DGCMomentum's ``lr_in_residuals``).
    """

    def __init__(self, params, momentum, rampup_begin_step, rampup_step=1, sparsity=(0.999,),
                 nesterov=False, clip_norm=None, l1=0.0, wd=None, nranks=1, loss_scale=1.0,
                 min_numel=DGC_MIN_NUMEL, exchange="exact",
                 bucket_sparsity=None, lr_in_residuals=False, dense=()):
        if exchange not in ("exact", "leader", "union"):
            raise ValueError(f"exchange must be 'exact', 'leader' or 'union', got {exchange!r}")
        self.params = params
        self.exchange = exchange
        self.momentum, self.nesterov = f32(momentum), nesterov
        self.begin, self.rampup_step, self.sparsity = rampup_begin_step, rampup_step, sparsity
        self.clip = None if clip_norm is None else clip_norm * nranks ** -0.5
        self.l1 = l1
        self.wd = wd if wd is not None else [0.0] * len(params)
        self.nranks, self.inv_scale = nranks, f32(1.0 / loss_scale)
        able = [p.dtype in (np.float32, np.float16) and i not in dense
                for i, p in enumerate(params)]
        self.compressed = [a and p.size >= min_numel for a, p in zip(able, params)]
        self.bucket_sparsity = bucket_sparsity
        self.bucketed = [bucket_sparsity is not None and a and 0 < p.size < min_numel
                         for a, p in zip(able, params)]
        # float32 residuals and float32 math for the compressed and the bucketed parameters
        self.wide = [c or b for c, b in zip(self.compressed, self.bucketed)]
        self.folded = [lr_in_residuals and w for w in self.wide]
        # residuals: float32 for compressed parameters, else of the parameter's dtype
        self.u = [[np.zeros(p.shape, f32 if c else p.dtype) for p, c in zip(params, self.wide)]
                  for _ in range(nranks)]
        self.v = [[np.zeros(p.shape, f32 if c else p.dtype) for p, c in zip(params, self.wide)]
                  for _ in range(nranks)]
        self.t = 0

    def _local(self, g, p, wd):
        g = g.astype(f32) * self.inv_scale
        if self.clip is not None:
            g = clip_by_norm(g, self.clip)
        if wd:
            g = g + f32(wd) * p
        if self.l1:
            g = g + f32(self.l1) * np.sign(p)
        return g

    def step(self, worker_grads, lr):
        lr_given = f32(lr)
        bucket = {}  # bucketed parameter -> (its value in float32, every worker's gradient)
        for j, p in enumerate(self.params):
            # a compressed parameter enters the local step in float32
            value = p.astype(f32) if self.wide[j] else p
            local = [self._local(worker_grads[w][j], value, self.wd[j]) for w in range(self.nranks)]
            lr = lr_given
            if self.folded[j]:
                local = [g * lr_given for g in local]
                lr = f32(1.0)
            if self.bucketed[j] and self.t >= self.begin:
                bucket[j] = (value, local)
                continue
            if not self.compressed[j] or self.t < self.begin:
                G = local[0].copy()
                for g in local[1:]:
                    G = G + g
                G = G / f32(self.nranks)
                for w in range(self.nranks):
                    u = self.u[w][j]
                    u[...] = self.momentum * u + G
                step = G + self.momentum * self.u[0][j] if self.nesterov else self.u[0][j]
            else:
                k = dgc_k(p.size, self.t, self.begin, self.rampup_step, self.sparsity)
                step = self._compressed_mean([self.u[w][j] for w in range(self.nranks)],
                                             [self.v[w][j] for w in range(self.nranks)],
                                             local, k).reshape(p.shape)
            if self.wide[j]:  # float32 math, one rounding to the parameter's dtype
                p[...] = (value - lr * step).astype(p.dtype)
            else:
                p -= lr * step
        if bucket:
            self._bucket_step(bucket, f32(1.0) if any(self.folded) else lr_given)
        self.t += 1

    def _compressed_mean(self, us, vs, gs, k):
        """The mean over the workers of a compressed step selecting `k` entries, flat: every
        worker's residuals `us`, `vs` (updated in place) and local gradient `gs`, crossing
        as `exchange` says (with "leader" and "union" every worker takes shared indices)."""
        numel = us[0].size
        if self.exchange in ("leader", "union"):
            if self.exchange == "union":
                k = max(1, k // self.nranks)  # each worker's share of the union
            idx = [dgc_propose(us[w], vs[w], gs[w], self.momentum, k, self.nesterov)
                   for w in range(self.nranks)]
            idx = (idx[dgc_leader(self.t, self.nranks)] if self.exchange == "leader"
                   else np.concatenate(idx))  # every worker's proposals, rank order
            total = dgc_take(us[0], vs[0], idx)
            for w in range(1, self.nranks):  # rank order
                total = total + dgc_take(us[w], vs[w], idx)
            return dgc_aggregate(numel, [(idx, total)]) / f32(self.nranks)
        return dgc_aggregate(numel, [dgc_select(us[w], vs[w], gs[w], self.momentum, k,
                                                self.nesterov) for w in range(self.nranks)])

    def _bucket_step(self, bucket, lr):
        """The bucketed parameters' compressed step, on the concatenation of each worker's
        residuals and gradients (in parameter order), crossing the workers as `exchange`
        says."""
        ids = sorted(bucket)
        bounds = np.cumsum([0] + [self.params[j].size for j in ids])
        numel = int(bounds[-1])
        k = dgc_k(numel, self.t, self.begin, self.rampup_step, self.sparsity,
                  self.bucket_sparsity)
        us = [np.concatenate([self.u[w][j].reshape(-1) for j in ids]) for w in range(self.nranks)]
        vs = [np.concatenate([self.v[w][j].reshape(-1) for j in ids]) for w in range(self.nranks)]
        gs = [np.concatenate([bucket[j][1][w].reshape(-1) for j in ids])
              for w in range(self.nranks)]
        G = self._compressed_mean(us, vs, gs, k)
        for n, j in enumerate(ids):
            lo, hi = bounds[n], bounds[n + 1]
            for w in range(self.nranks):
                self.u[w][j][...] = us[w][lo:hi].reshape(self.params[j].shape)
                self.v[w][j][...] = vs[w][lo:hi].reshape(self.params[j].shape)
            p = self.params[j]
            p[...] = (bucket[j][0] - lr * G[lo:hi].reshape(p.shape)).astype(p.dtype)
