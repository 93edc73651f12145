"""Lamb's native kernels (the multi-tensor step, the sum of squares) against the numpy
reference (Paddle's rule), per ISA."""
import numpy as np
import pytest

from ms_optim import aot, reference, testing
from tests.kernels.errors import rejects, rejects_one_bad
from tests.sizes import SIZE_PARAMS, SIZES

INF = np.float32(np.inf)


def _kernel_consts(t, clip_norm=0.0, lo=-INF, hi=INF, always_adapt=False):
    """The kernel's slots powers (beta1^t, beta2^t) and consts, consts built by field name as
    the optimizer builds them."""
    powers = np.array([np.float32(0.9) ** t, np.float32(0.999) ** t], np.float32)
    return dict(powers=powers,
                consts=aot.consts_array("lamb", beta1=0.9, beta2=0.999, eps=1e-6,
                                            clip_norm=clip_norm, clip_lo=lo, clip_hi=hi,
                                            always_adapt=always_adapt))


KERNEL_CASES = {
    "plain": dict(wd=0.01),
    "no_decay": dict(wd=0.0),
    "no_decay_always_adapt": dict(wd=0.0, always_adapt=True),
    "clip_norm": dict(wd=0.01, clip_norm=0.5, grad_scale=0.25),
    "clip_value": dict(wd=0.02, lo=-0.3, hi=0.2),
    "zero_param": dict(wd=0.01, zero=True),
}


@pytest.mark.parametrize("n", SIZE_PARAMS)
@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_kernel_matches_reference(isa, n, case):
    c = KERNEL_CASES[case]
    rng = np.random.default_rng(n)
    p = np.zeros(n, np.float32) if c.get("zero") else rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    rp, rm, rv = p.copy(), m.copy(), v.copy()
    for t in (1, 2, 3):
        g = rng.standard_normal(n).astype(np.float32)
        consts = _kernel_consts(t, c.get("clip_norm", 0.0), c.get("lo", -INF), c.get("hi", INF),
                                c.get("always_adapt", False))
        ratio = np.zeros(1, np.float32)
        lr = np.float32(0.01 * t)
        testing.call_kernel("ms_optim_lamb", param=[p], m=[m], v=[v], grad=[g], lr=np.array(lr),
                            wd=np.array(c["wd"], np.float32),
                            gscale=np.array(c.get("grad_scale", 1.0), np.float32), **consts,
                            ratios=ratio)
        powers = consts["powers"]
        want = reference.lamb_step(rp, rm, rv, g, lr, 0.9, 0.999, 1e-6, powers[0], powers[1],
                                   c["wd"], c.get("always_adapt", False),
                                   grad_scale=c.get("grad_scale", 1.0),
                                   clip_norm=c.get("clip_norm", 0.0), clip_lo=c.get("lo", -INF),
                                   clip_hi=c.get("hi", INF))
        # norms are summed in double in a different order than numpy's: the ratio may differ
        # in its last float32 bit, everything before it is bit-identical
        np.testing.assert_allclose(ratio[0], want, rtol=3e-7)
        np.testing.assert_array_equal(m, rm)
        np.testing.assert_array_equal(v, rv)
        np.testing.assert_allclose(p, rp, rtol=1e-6, atol=1e-7)
        rp[...] = p  # continue from the kernel's parameter so the check stays elementwise
        if (c.get("zero") and t == 1) or (c["wd"] == 0 and not c.get("always_adapt")):
            assert ratio[0] == 1.0  # zero parameter norm, or no decay: no trust ratio


# A tensor of at least half of a call's elements (on 2 threads; lamb_team_min) is split
# over the threads, the others run whole on several threads at once, largest first:
# 600001 is split, the sizes around kParallelMin (32768) run whole.
MULTI_SIZES = [1, 40000, 7, 16383, 600001, 70001, 32768, 16385, 32767]


def _multi_step(tensors, lr, wd, t, gscale=1.0, **clip):
    """One call of the multi-tensor kernel on [(p, m, v, g)]; returns the ratios."""
    k = len(tensors)
    consts = _kernel_consts(t, clip.get("clip_norm", 0.0), clip.get("lo", -INF),
                            clip.get("hi", INF), clip.get("always_adapt", False))
    ratios = np.zeros(k, np.float32)
    testing.call_kernel("ms_optim_lamb", param=[x[0] for x in tensors], m=[x[1] for x in tensors],
                        v=[x[2] for x in tensors], grad=[x[3] for x in tensors],
                        lr=np.asarray(lr, np.float32), wd=np.asarray(wd, np.float32),
                        gscale=np.array(gscale, np.float32), **consts, ratios=ratios)
    return ratios


@pytest.mark.parametrize("case", ["plain", "clip_norm", "clip_value", "always_adapt"])
def test_multi_tensor_kernel_matches_reference(isa, case):
    """One call on many tensors of mixed sizes, each with its own lr and weight decay, equals
    the reference step of each tensor on its own (m, v bit-identical)."""
    clip = {"plain": {}, "clip_norm": dict(clip_norm=3.0), "clip_value": dict(lo=-0.2, hi=0.3),
            "always_adapt": dict(always_adapt=True)}[case]
    rng = np.random.default_rng(len(case))
    k = len(MULTI_SIZES)
    lr = (0.01 * (1 + np.arange(k))).astype(np.float32)
    wd = np.where(np.arange(k) % 3 == 1, 0.0, 0.01 * (1 + np.arange(k))).astype(np.float32)
    tensors = [(rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32),
                np.zeros(n, np.float32), None) for n in MULTI_SIZES]
    tensors[2][0][...] = 0.0  # a zero parameter: ratio 1 on the first step
    refs = [tuple(a.copy() for a in x[:3]) for x in tensors]
    for t in (1, 2):
        grads = [rng.standard_normal(n).astype(np.float32) for n in MULTI_SIZES]
        tensors = [x[:3] + (g,) for x, g in zip(tensors, grads)]
        ratios = _multi_step(tensors, lr, wd, t, gscale=0.5, **clip)
        for i, ((p, m, v, g), (rp, rm, rv)) in enumerate(zip(tensors, refs)):
            want = reference.lamb_step(rp, rm, rv, g, lr[i], 0.9, 0.999, 1e-6, np.float32(0.9) ** t,
                                       np.float32(0.999) ** t, wd[i],
                                       clip.get("always_adapt", False), grad_scale=0.5,
                                       clip_norm=clip.get("clip_norm", 0.0),
                                       clip_lo=clip.get("lo", -INF), clip_hi=clip.get("hi", INF))
            np.testing.assert_allclose(ratios[i], want, rtol=3e-7, err_msg=f"tensor {i}")
            np.testing.assert_array_equal(m, rm, err_msg=f"tensor {i}")
            np.testing.assert_array_equal(v, rv, err_msg=f"tensor {i}")
            np.testing.assert_allclose(p, rp, rtol=1e-6, atol=1e-7, err_msg=f"tensor {i}")
            rp[...] = p
            if wd[i] == 0 and not clip.get("always_adapt"):
                assert ratios[i] == 1.0
        assert ratios[2] == 1.0 or t > 1


def test_multi_tensor_kernel_shared_lr_and_wd_equal_per_tensor_values():
    rng = np.random.default_rng(5)
    make = lambda: [(rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32),  # noqa: E731
                     np.zeros(n, np.float32), rng.standard_normal(n).astype(np.float32))
                    for n in MULTI_SIZES]
    shared = make()
    each = [tuple(a.copy() for a in x) for x in shared]
    k = len(MULTI_SIZES)
    r1 = _multi_step(shared, [0.03], [0.02], 1)
    r2 = _multi_step(each, np.full(k, 0.03), np.full(k, 0.02), 1)
    np.testing.assert_array_equal(r1, r2)
    for a, b in zip(shared, each):
        np.testing.assert_array_equal(a[0], b[0])


def _two_tensor_call():
    """The tensors of a valid two-tensor call, by slot name: parameters of 5 elements."""
    return dict(param=[np.ones(5, np.float32) for _ in range(2)],
                m=[np.ones(5, np.float32) for _ in range(2)],
                v=[np.ones(5, np.float32) for _ in range(2)],
                grad=[np.ones(5, np.float32) for _ in range(2)], lr=np.ones(2, np.float32),
                wd=np.ones(1, np.float32), gscale=np.ones((), np.float32), **_kernel_consts(1),
                ratios=np.zeros(2, np.float32))


BAD_MULTI_ARGS = [  # (slot, tensor of the slot or None, replacement, code, message)
    ("m", 1, np.ones(4, np.float32), "MSOPT_ERR_SIZE", "^m1 has 4 elements, param1 5$"),
    ("lr", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE", "^lr must have 1 or 2 elements, got 3$"),
    ("wd", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE", "^wd must have 1 or 2 elements, got 3$"),
    ("ratios", None, np.zeros(1, np.float32), "MSOPT_ERR_SIZE",
     r"^ratios must have 2 element\(s\), got 1$"),
    ("powers", None, np.ones(3, np.float32), "MSOPT_ERR_SIZE",
     r"^powers must have 2 element\(s\), got 3$"),
    ("consts", None, np.ones(9, np.float32), "MSOPT_ERR_SIZE",
     r"^consts must have 7 element\(s\), got 9$"),
    ("v", 1, np.ones(5, np.float64), "MSOPT_ERR_DTYPE", "^v1 must be float32, got float64$"),
]


@pytest.mark.parametrize("slot,index,bad,code,message", BAD_MULTI_ARGS)
def test_multi_tensor_kernel_rejects_bad_arguments(slot, index, bad, code, message):
    rejects_one_bad("ms_optim_lamb", _two_tensor_call, slot, index, bad, code, message)


def test_multi_tensor_kernel_rejects_a_bad_argument_count():
    args = aot.arrange_arrays("ms_optim_lamb", **_two_tensor_call())
    rejects("ms_optim_lamb", "MSOPT_ERR_ARGS",
            r"^expected 4K \+ 6 tensors \(param:each m:each v:each grad:each lr wd gscale powers "
            r"consts -> ratios\), got 13$", arrays=args[:-1])


def test_sumsq_kernel():
    """One call sums the squares of every element of all its inputs (in double)."""
    xs = [np.random.default_rng(n).standard_normal(n).astype(np.float32) for n in SIZES]
    for inputs in [[x] for x in xs] + [xs]:
        out = np.zeros(1, np.float32)
        testing.call_kernel("ms_optim_sumsq", grad=inputs, sumsq=out)
        want = sum(np.sum(x.astype(np.float64) ** 2) for x in inputs)
        np.testing.assert_allclose(out[0], want, rtol=1e-6)


@pytest.mark.parametrize("call, code, slot, message", [
    (dict(arrays=[np.zeros(1, np.float32)]), "MSOPT_ERR_ARGS", None,
     r"^expected 1K \+ 1 tensors \(grad:each -> sumsq\), got 1$"),
    (dict(grad=[np.ones(3, np.float64)], sumsq=np.zeros(1, np.float32)), "MSOPT_ERR_DTYPE", "grad",
     "^grad0 must be float32, got float64$"),
    (dict(grad=[np.ones(3, np.float32)], sumsq=np.zeros(2, np.float32)), "MSOPT_ERR_SIZE", "sumsq",
     r"^sumsq must have 1 element\(s\), got 2$"),
])
def test_sumsq_kernel_rejects_bad_arguments(call, code, slot, message):
    rejects("ms_optim_sumsq", code, message, slot=slot, **call)
