"""AdamOffload's native kernels on what the generated tests (test_host_step_kernels.py) do not
reach: every float16 bit pattern and conversion, one call over many tensors of float16 data,
and the Adam entries' own checks."""
import numpy as np
import pytest

from ms_optim import _native, aot, reference, testing
from tests.kernels.errors import rejects, rejects_one_bad

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def _state(n, dtype, seed):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(dtype)
    m = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v = (rng.random(n) * 0.01).astype(np.float32)
    return p, m, v, rng


def _hyper(lr, wd, t, nesterov, inv_scale):
    """lr, wd, {powers, consts} (the kernel's slots of those names, consts built by field
    name), beta1^t, beta2^t."""
    lr = np.array(lr, np.float32)
    wd = np.array(wd, np.float32)
    b1p, b2p = np.float32(BETA1) ** t, np.float32(BETA2) ** t
    consts = dict(powers=np.array([b1p, b2p], np.float32),
                  consts=aot.consts_array("adam", beta1=BETA1, beta2=BETA2, eps=EPS,
                                              inv_scale=inv_scale, nesterov=nesterov))
    return lr, wd, consts, b1p, b2p


def test_float16_special_values_round_trip(isa):
    """With lr = 0 a float16 parameter goes to float32 and back unchanged: every bit pattern."""
    p = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    g = np.zeros_like(p)
    m, v = np.zeros(p.size, np.float32), np.zeros(p.size, np.float32)
    lr, _, consts, _, _ = _hyper(0.0, 0.0, 1, False, 1.0)
    before = p.copy()
    testing.call_kernel("ms_optim_adam_inplace", param=[p], m=[m], v=[v], grad=[g], lr=lr,
                        wd=np.zeros((), np.float32), **consts, done=np.zeros(1, np.float32))
    nan = np.isnan(before)
    np.testing.assert_array_equal(p.view(np.uint16)[~nan], before.view(np.uint16)[~nan])
    assert np.isnan(p[nan]).all()


def test_float16_conversions_match_numpy(isa):
    """float32 -> float16 rounds to nearest even (subnormals, overflow to inf, NaN) as numpy;
    float16 -> float32 is exact for every bit pattern."""
    rng = np.random.default_rng(5)
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h32 = halves.astype(np.float32)
    finite = h32[np.isfinite(h32)]
    midpoints = (finite[:-1] + np.diff(finite) / 2).astype(np.float32)  # exact ties (float32)
    mags = 2.0 ** rng.uniform(-30, 17, 200_000)
    x = np.concatenate([h32[~np.isnan(h32)], midpoints, np.nextafter(midpoints, np.float32(np.inf)),
                        (mags * rng.choice([-1, 1], mags.size)).astype(np.float32),
                        np.array([65504, 65519.99, 65520, 1e9, -1e9, 6e-8, 2.9e-8, 3e-8, 0.0, -0.0,
                                  np.inf, -np.inf], np.float32)])
    got = np.empty(x.size, np.uint16)
    _native.lib().msopt_f32_to_f16(x.ctypes.data, got.ctypes.data, x.size)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(got, want)
    nan = np.array([np.nan, -np.nan], np.float32)
    out = np.empty(2, np.uint16)
    _native.lib().msopt_f32_to_f16(nan.ctypes.data, out.ctypes.data, 2)
    assert np.isnan(out.view(np.float16)).all()
    back = np.empty(halves.size, np.float32)
    _native.lib().msopt_f16_to_f32(halves.view(np.uint16).ctypes.data, back.ctypes.data, halves.size)
    np.testing.assert_array_equal(back.view(np.uint32)[~np.isnan(h32)],
                                  h32.view(np.uint32)[~np.isnan(h32)])
    assert np.isnan(back[np.isnan(h32)]).all()


# Mixed sizes around the parallel threshold: one call's elements are split over the threads
# as one range, so tensor boundaries fall inside and between the threads' shares.
MULTI_SIZES = [1, 40000, 7, 16383, 70001, 32768, 16385, 32767, 250003]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("delta", [False, True])
def test_multi_tensor_call_matches_reference(isa, dtype, delta):
    """One call on many tensors, each with its own lr and weight decay, equals the reference
    step of each tensor alone, bit for bit."""
    k = len(MULTI_SIZES)
    states = [_state(n, dtype, seed=i) for i, n in enumerate(MULTI_SIZES)]
    refs = [(p.copy(), m.copy(), v.copy()) for p, m, v, _ in states]
    lr = (1e-3 * (1 + np.arange(k))).astype(np.float32)
    wd = np.where(np.arange(k) % 3 == 1, 0.0, 0.01 * (1 + np.arange(k))).astype(np.float32)
    for t in (1, 2):
        grads = [(rng.standard_normal(p.size) * 4).astype(dtype) for p, _, _, rng in states]
        _, _, consts, b1p, b2p = _hyper(0.0, 0.0, t, nesterov=t == 2, inv_scale=0.5)
        if delta:
            outs = [np.zeros(p.size, dtype) for p, _, _, _ in states]
            testing.call_kernel("ms_optim_adam_delta", m=[x[1] for x in states],
                                v=[x[2] for x in states], grad=grads, lr=lr, **consts, delta=outs)
        else:
            testing.call_kernel("ms_optim_adam_inplace", param=[x[0] for x in states],
                                m=[x[1] for x in states], v=[x[2] for x in states], grad=grads,
                                lr=lr, wd=wd, **consts, done=np.zeros(1, np.float32))
        for i, ((rp, rm, rv), g) in enumerate(zip(refs, grads)):
            if delta:
                want = reference.adam_delta(rm, rv, g, lr[i], BETA1, BETA2, EPS, b1p, b2p,
                                            nesterov=t == 2, inv_scale=0.5)
                np.testing.assert_array_equal(outs[i], want.astype(dtype))
            else:
                reference.adam_offload_step(rp, rm, rv, g, lr[i], BETA1, BETA2, EPS, b1p, b2p,
                                            weight_decay=wd[i], inv_scale=0.5, nesterov=t == 2)
    for (p, m, v, _), (rp, rm, rv) in zip(states, refs):
        np.testing.assert_array_equal(m, rm)
        np.testing.assert_array_equal(v, rv)
        if not delta:
            np.testing.assert_array_equal(p, rp)


def _two_tensor_call(dtype=np.float32):
    """The tensors of a valid two-tensor in-place call, by slot name: parameters of 5 and 3
    elements."""
    lr, wd, consts, _, _ = _hyper(0.1, 0.0, 1, False, 1.0)
    return dict(param=[np.ones(5, dtype), np.ones(3, dtype)],
                m=[np.ones(5, np.float32), np.ones(3, np.float32)],
                v=[np.ones(5, np.float32), np.ones(3, np.float32)],
                grad=[np.ones(5, dtype), np.ones(3, dtype)], lr=lr.reshape(1), wd=wd.reshape(1),
                **consts, done=np.zeros(1, np.float32))


BAD_INPLACE_ARGS = [  # (slot, tensor of the slot or None, replacement, code, message)
    ("param", 0, np.ones(5, np.float64), "MSOPT_ERR_DTYPE",
     r"^param0 and grad0 must all be float32 \(as grad0\), got float64 and float32$"),
    ("grad", 0, np.ones(5, np.float64), "MSOPT_ERR_DTYPE",
     "^grad0 must be float32 or float16, got float64$"),
    ("param", 1, np.ones(3, np.float16), "MSOPT_ERR_DTYPE",
     r"^param1 and grad1 must all be float32 \(as grad0\), got float16 and float32$"),
    ("m", 0, np.ones(5, np.float16), "MSOPT_ERR_DTYPE",
     r"^moments m0, v0 must be float32 .*, as m0 \(float16\), got float16 and float32$"),
    ("v", 1, np.ones(4, np.float32), "MSOPT_ERR_SIZE", "^v1 has 4 elements, param1 3$"),
    ("lr", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE", "^lr must have 1 or 2 elements, got 3$"),
    ("wd", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE", "^wd must have 1 or 2 elements, got 3$"),
    ("powers", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE",
     r"^powers must have 2 element\(s\), got 3$"),
    ("consts", None, np.ones(7, np.float32), "MSOPT_ERR_SIZE",
     "^consts must have 5 or 6 elements, got 7$"),
    ("done", None, np.ones(2, np.float32), "MSOPT_ERR_SIZE",
     r"^done must have 1 element\(s\), got 2$"),
]


@pytest.mark.parametrize("slot,index,bad,code,message", BAD_INPLACE_ARGS)
def test_kernel_rejects_bad_arguments(slot, index, bad, code, message):
    rejects_one_bad("ms_optim_adam_inplace", _two_tensor_call, slot, index, bad, code, message)


def test_kernel_rejects_bad_argument_counts():
    args = aot.arrange_arrays("ms_optim_adam_inplace", **_two_tensor_call())
    rejects("ms_optim_adam_inplace", "MSOPT_ERR_ARGS",
            r"^expected 4K \+ 5 tensors \(param:each m:each v:each grad:each lr wd powers consts "
            r"-> done\), got 12$", arrays=args[:-1])
    m, v, g = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    _, _, consts, _, _ = _hyper(0.1, 0.0, 1, False, 1.0)
    good = dict(m=[m], v=[v], grad=[g], lr=np.ones(1, np.float32), **consts,
                delta=[np.zeros(4, np.float32)])
    rejects("ms_optim_adam_delta", "MSOPT_ERR_ARGS",
            r"^expected 4K \+ 3 tensors \(m:each v:each grad:each lr powers consts -> "
            r"delta:each\), got 6$",
            arrays=aot.arrange_arrays("ms_optim_adam_delta", **good)[:-1])
    rejects("ms_optim_adam_delta", "MSOPT_ERR_DTYPE",
            r"^delta0 and grad0 must all be float32 \(as grad0\), got float16 and float32$",
            slot="delta", **{**good, "delta": [np.zeros(4, np.float16)]})


def test_constants_are_built_by_name_from_the_library_layout():
    """The constants' order is contract.h's alone: aot.consts reads it from the library and
    places each value by name; a missing or unknown name is refused."""
    assert _native.consts_layout("lamb") == ("beta1", "beta2", "eps", "clip_norm", "clip_lo",
                                             "clip_hi", "always_adapt")
    np.testing.assert_array_equal(
        aot.consts_array("lamb", always_adapt=True, clip_hi=2.0, clip_lo=-2.0, clip_norm=0.5,
                         eps=1e-6, beta2=0.999, beta1=0.9),
        np.float32([0.9, 0.999, 1e-6, 0.5, -2.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="missing \\['nesterov'\\], unknown \\['nesterov_'\\]"):
        aot.consts("adam", beta1=0.9, beta2=0.999, eps=1e-8, inv_scale=1.0, nesterov_=0)
    with pytest.raises(ValueError, match="no constants layout named 'adamw'"):
        _native.consts_layout("adamw")


def test_isa_selection():
    assert _native.isa() in ("scalar", "avx2", "avx512")
    with pytest.raises(ValueError, match="not supported|unknown"):
        _native.select_isa("sse9")
