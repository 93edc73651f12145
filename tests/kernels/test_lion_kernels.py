"""Lion's native kernels (ops/kernels/lion.h) against reference.lion_step and
lion_compact_step, elementwise and bit for bit: every entry (in place and delta, each moment
storage), per ISA, float32 and float16 data, odd sizes, one call over many tensors, and the
thread count."""
import numpy as np
import pytest

from ms_optim import aot, reference, testing
from tests.kernels.errors import rejects, rejects_one_bad
from tests.kernels.threads import by_thread_count
from tests.moments import BF16
from tests.sizes import SIZE_PARAMS

BETA1, BETA2 = 0.9, 0.99
B = reference.Q8_BLOCK
KINDS = ("float32", "bfloat16", "int8")


class Moment:
    """One tensor's Lion moment stored as `kind`: the kernel's arrays and the reference's."""

    def __init__(self, kind, m):
        self.kind = kind
        self.scale = None
        if kind == "float32":
            self.m = m.astype(np.float32)
        elif kind == "bfloat16":
            self.m = reference.bf16_bits(m).view(BF16)
        else:
            self.m, self.scale = reference.q8_quantize(m, True)

    def copy(self):
        other = Moment.__new__(Moment)
        other.kind, other.m = self.kind, self.m.copy()
        other.scale = None if self.scale is None else self.scale.copy()
        return other

    def ref_m(self):
        return self.m.view(np.uint16) if self.kind == "bfloat16" else self.m

    def assert_equal(self, other):
        view = {"float32": np.uint32, "bfloat16": np.uint16, "int8": np.uint8}[self.kind]
        np.testing.assert_array_equal(self.m.view(view), other.m.view(view))
        if self.scale is not None:
            np.testing.assert_array_equal(self.scale, other.scale)


def _state(n, dtype, kind, seed):
    """p, the moment, rng; the moment's magnitudes spread over 3 decades, and about 1 in 16
    elements of g made to cancel m exactly so that c = 0 (sign 0) is reached."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(dtype)
    m = (rng.standard_normal(n) * 0.1 * 10.0 ** (-3 * rng.random(n))).astype(np.float32)
    return p, Moment(kind, m), rng


def _grad(rng, moms, dtype):
    """A gradient for the moments `moms` (a tensor's and its reference's copy); about 1 in
    16 elements have m = 0 (in both copies) and g = 0, of either sign, so that
    beta1 * m + (1 - beta1) * g' is a zero (sign 0)."""
    n = moms[0].m.size
    g = (rng.standard_normal(n) * 4).astype(dtype)
    zero = rng.random(n) < 1 / 16
    signed = np.where(rng.random(int(zero.sum())) < 0.5, -0.0, 0.0)
    g[zero] = signed.astype(dtype)
    for mom in moms:
        if mom.kind == "float32":
            mom.m[zero] = signed
    return g


def _call(states, grads, lr, wd, t, inv_scale, delta, first=0):
    """One kernel call over `states` [(p, Moment)] at step t; returns the deltas (delta)."""
    kind = states[0][1].kind
    scaled = kind == "int8"
    named = dict(m=[s.m for _, s in states], grad=grads, lr=lr,
                 consts=aot.consts_array("lion", beta1=BETA1, beta2=BETA2, inv_scale=inv_scale))
    if scaled:
        named.update(m_scale=[s.scale for _, s in states], key=np.array([t, first], np.int32))
    if delta:
        outs = [np.full(g.size, 7, g.dtype) for g in grads]
        testing.call_kernel(aot.host_step_entry("lion", True, scaled), **named, delta=outs)
        return outs
    done = np.ones(1, np.float32)
    testing.call_kernel(aot.host_step_entry("lion", False, scaled),
                        param=[p for p, _ in states], wd=wd, **named, done=done)
    assert done[0] == 0
    return None


def _ref(p, mom, g, lr, wd, t, inv_scale, delta, index=0):
    if mom.kind == "float32":
        return reference.lion_step(p, mom.m, g, lr, BETA1, BETA2, wd, inv_scale, delta)
    return reference.lion_compact_step(p, mom.ref_m(), g, lr, BETA1, BETA2, mom.kind, mom.scale,
                                       wd, inv_scale, delta,
                                       q8_key=reference.q8_tensor_key(t, index))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("delta", [False, True], ids=["inplace", "delta"])
def test_kernel_matches_reference(isa, kind, dtype, n, delta):
    p, mom, rng = _state(n, dtype, kind, seed=n)
    rp, rmom = p.copy(), mom.copy()
    for t in (1, 2, 3):
        g = _grad(rng, (mom, rmom), dtype)
        lr, wd = np.array([1e-2 * t], np.float32), np.array([0.3], np.float32)
        got = _call([(p, mom)], [g], lr, wd, t, 0.25, delta)
        want = _ref(rp, rmom, g, lr[0], 0.0 if delta else wd[0], t, 0.25, delta)
        if delta:
            np.testing.assert_array_equal(got[0], want.astype(dtype))
    mom.assert_equal(rmom)
    np.testing.assert_array_equal(p, rp)
    if not delta:
        assert np.any(p != _state(n, dtype, kind, seed=n)[0])


def test_sign_of_zero_is_zero_and_nan_stays_nan(isa):
    """c = 0 (either sign) leaves the parameter to its decay; a NaN gradient makes it NaN;
    c of either sign moves it by lr."""
    p = np.float32([1.0, 1.0, 1.0, 1.0, 1.0])
    m = np.float32([0.0, -0.0, 0.0, 1.0, -1e-30])
    g = np.float32([0.0, -0.0, np.nan, 0.0, 0.0])
    _call([(p, Moment("float32", m))], [g], np.float32([0.5]), np.float32([0.0]), 1, 1.0, False)
    np.testing.assert_array_equal(p, np.float32([1.0, 1.0, np.nan, 0.5, 1.5]))


# Sizes around the block (256) and the parallel threshold, so tensor ends, block edges and
# the threads' shares meet in every way.
MULTI_SIZES = [1, B - 1, B, B + 1, 40000, 7, 2 * B + 3, 16383, 70001, 32768, 16385, 250003]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("delta", [False, True], ids=["inplace", "delta"])
def test_multi_tensor_call_matches_reference(isa, kind, delta):
    k = len(MULTI_SIZES)
    states = [_state(n, np.float32, kind, seed=i) for i, n in enumerate(MULTI_SIZES)]
    refs = [(p.copy(), mom.copy()) for p, mom, _ in states]
    lr = (1e-3 * (1 + np.arange(k))).astype(np.float32)
    wd = np.where(np.arange(k) % 3 == 1, 0.0, 0.1 * (1 + np.arange(k))).astype(np.float32)
    for t in (1, 2):
        grads = [(rng.standard_normal(p.size) * 4).astype(np.float32) for p, _, rng in states]
        outs = _call([(p, mom) for p, mom, _ in states], grads, lr, wd, t, 0.5, delta, first=5)
        for i, ((rp, rmom), g) in enumerate(zip(refs, grads)):
            want = _ref(rp, rmom, g, lr[i], 0.0 if delta else wd[i], t, 0.5, delta, index=5 + i)
            if delta:
                np.testing.assert_array_equal(outs[i], want)
    for (p, mom, _), (rp, rmom) in zip(states, refs):
        mom.assert_equal(rmom)
        if not delta:
            np.testing.assert_array_equal(p, rp)


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_bits_do_not_depend_on_the_thread_count(kind):
    def run():
        states = [_state(n, np.float32, kind, seed=i) for i, n in enumerate(MULTI_SIZES)]
        rng = np.random.default_rng(9)
        grads = [(rng.standard_normal(p.size) * 4).astype(np.float32) for p, _, _ in states]
        _call([(p, mom) for p, mom, _ in states], grads, np.float32([1e-2]), np.float32([0.1]),
              1, 1.0, False)
        return states

    results = by_thread_count(run)
    for other in results[1:]:
        for (p, mom, _), (q, mom2, _) in zip(results[0], other):
            np.testing.assert_array_equal(p, q)
            mom.assert_equal(mom2)


def _one_call(kind, delta=False):
    p, mom, rng = _state(300, np.float32, kind, seed=1)
    named = dict(m=[mom.m], grad=[np.ones(300, np.float32)], lr=np.float32([0.1]),
                 consts=aot.consts_array("lion", beta1=BETA1, beta2=BETA2, inv_scale=1.0))
    if kind == "int8":
        named.update(m_scale=[mom.scale], key=np.array([1, 0], np.int32))
    if delta:
        return dict(named, delta=[np.zeros(300, np.float32)])
    return dict(named, param=[p], wd=np.float32([0.0]), done=np.zeros(1, np.float32))


@pytest.mark.parametrize("kind, delta, slot, index, bad, code, message", [
    ("float32", False, "m", 0, np.zeros(300, np.float64), "MSOPT_ERR_DTYPE",
     r"^moment m0 must be float32"),
    ("float32", False, "grad", 0, np.zeros(299, np.float32), "MSOPT_ERR_SIZE", r"grad0"),
    ("float32", False, "lr", None, np.float32([0.1, 0.2]), "MSOPT_ERR_SIZE", r"^lr"),
    ("float32", False, "consts", None, np.zeros(4, np.float32), "MSOPT_ERR_SIZE", r"^consts"),
    ("float32", True, "delta", 0, np.zeros(300, np.float16), "MSOPT_ERR_DTYPE", r"^delta0"),
    ("int8", False, "m", 0, np.zeros(300, np.uint8), "MSOPT_ERR_DTYPE", r"^moment m0 must be int8"),
    ("int8", False, "m_scale", 0, np.zeros(1, np.float32), "MSOPT_ERR_SIZE",
     r"^m_scale0 must have 2 element\(s\) \(one per 256\), got 1$"),
    ("int8", True, "key", None, np.zeros(3, np.int32), "MSOPT_ERR_SIZE", r"^key must have 2"),
])
def test_kernel_rejects_bad_arguments(kind, delta, slot, index, bad, code, message):
    rejects_one_bad(aot.host_step_entry("lion", delta, kind == "int8"),
                    lambda: _one_call(kind, delta), slot, index, bad, code, message)


def test_int8_moment_needs_the_q8_kernel():
    call = {k: v for k, v in _one_call("int8").items() if k not in ("m_scale", "key")}
    rejects("ms_optim_lion_inplace", "MSOPT_ERR_DTYPE", r"^moment m0 must be float32 .*got int8$",
            slot="m", **call)
