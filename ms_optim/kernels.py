"""Every MindSpore AOT op of ms_optim, built in one place.

Three things live here and nowhere else:

- **Constants layouts.**  A kernel's fixed hyper-parameters travel as one
  float32 tensor whose layout is a C++ struct declared by a list of field
  names in ``ops/core/contract.h``.  ``LAYOUTS`` declares the same names once on
  this side; ``consts(kernel, **values)`` builds the tensor by name (a
  missing or unknown name is a ValueError), and the first op built for a
  kernel compares the names with the library's own list
  (``msopt_consts_layout``), so the two ends cannot drift apart silently.
- **Bucketing** (``buckets``), on the model of apex's ``multi_tensor_apply``:
  the parameters are cut into runs of one dtype of at most ``MAX_TENSORS``,
  and each run is stepped by one multi-tensor op.  A MindSpore kernel launch
  costs more than a small parameter's update (benchmarks/README.md#where-a-steps-time-goes).
- **The op factories**: one function per native kernel, returning a
  ``mindspore.ops.Custom`` pinned to the host CPU (``_native.aot_op``).
"""
import ctypes

import numpy as np
from mindspore import Tensor
from mindspore import dtype as mstype
from mindspore.ops import DataType

from . import _native

MAX_TENSORS = 256  # parameters per multi-tensor op

_F32, _F16, _I32 = DataType.F32_Default, DataType.F16_Default, DataType.I32_Default
_BF16, _I8, _U8 = DataType.BF16_Default, DataType.I8_Default, DataType.U8_Default
_FORMATS = {mstype.float32: _F32, mstype.float16: _F16, mstype.float64: DataType.F64_Default,
            mstype.bfloat16: DataType.BF16_Default, mstype.int32: _I32, mstype.int8: _I8,
            mstype.uint8: _U8}

# The field names of each constants struct of ops/core/contract.h, in order.
LAYOUTS = {
    "adam": ("beta1", "beta2", "eps", "inv_scale", "nesterov"),
    "adam_ext": ("beta1", "beta2", "eps", "inv_scale", "nesterov", "decoupled"),
    "lamb": ("beta1", "beta2", "eps", "clip_norm", "clip_lo", "clip_hi", "always_adapt"),
    "dgc": ("momentum", "nesterov"),
    "powers": ("beta1_power", "beta2_power"),
}
_checked = set()


def check_layout(kernel):
    """Compares LAYOUTS[kernel] with the library's layout; NativeLibraryError on a mismatch."""
    if kernel in _checked:
        return
    handle = _native.lib_with({"msopt_consts_layout": (ctypes.c_char_p, [ctypes.c_char_p])},
                              "msopt_consts_layout")
    raw = handle.msopt_consts_layout(kernel.encode())
    native = tuple(raw.decode().split()) if raw is not None else None
    if native != LAYOUTS[kernel]:
        raise _native.NativeLibraryError(
            f"the constants of kernel '{kernel}' differ between ms_optim/kernels.py "
            f"{LAYOUTS[kernel]} and the library {_native.library_path()} {native}; rebuild it "
            f"with 'pip install .'.")
    _checked.add(kernel)


def consts(kernel, **values):
    """The float32 constants tensor of `kernel`, its fields given by name (bools as 0/1)."""
    names = LAYOUTS[kernel]
    missing = [n for n in names if n not in values]
    unknown = [n for n in values if n not in names]
    if missing or unknown:
        raise ValueError(f"constants of kernel '{kernel}': missing {missing}, unknown {unknown}; "
                         f"its fields are {names}")
    return Tensor(np.array([float(values[n]) for n in names], np.float32))


def consts_array(kernel, **values):
    """consts() as a numpy array (for calling a kernel directly, in tests and benchmarks)."""
    return consts(kernel, **values).asnumpy()


def buckets(keys, max_tensors=None):
    """(lo, hi) ranges over a sequence of `keys` (one per parameter, e.g. its dtype): the
    contiguous runs of equal keys, each cut into pieces of at most `max_tensors`
    (default: the module's MAX_TENSORS at the time of the call).

    One multi-tensor op steps one range: all its inputs share a dtype, so one
    registration covers them.  A network whose dtypes alternate gets one range
    per run.
    """
    max_tensors = MAX_TENSORS if max_tensors is None else max_tensors
    out, lo, n = [], 0, len(keys)
    while lo < n:
        hi = lo + 1
        while hi < n and hi - lo < max_tensors and keys[hi] == keys[lo]:
            hi += 1
        out.append((lo, hi))
        lo = hi
    return tuple(out)


def _names(k, *kinds):
    return tuple(f"{kind}{i}" for kind in kinds for i in range(k))


def _fmt(dtype):
    return _FORMATS[dtype]


# ------------------------------------------------------------------ Adam --

MOMENT_DTYPES = ("float32", "bfloat16", "int8")


def q8_block():
    """Elements per block of int8 moments (one float32 scale each), as the library has it."""
    handle = _native.lib_with({"ms_optim_q8_block": (ctypes.c_int64, [])}, "ms_optim_q8_block")
    return int(handle.ms_optim_q8_block())


def moment_storage(moment_dtype):
    """(m dtype, v dtype, scaled) of AdamOffload's moments stored as `moment_dtype`."""
    return {"float32": (mstype.float32, mstype.float32, False),
            "bfloat16": (mstype.bfloat16, mstype.bfloat16, False),
            "int8": (mstype.int8, mstype.uint8, True)}[moment_dtype]


def adam_op(k, dtype, delta, moment_dtype="float32"):
    """Multi-tensor Adam step over `k` parameters of `dtype` (float32 or float16), moments
    stored as `moment_dtype` (MOMENT_DTYPES; ops/aot/aot_adam.cpp).

    In place (``delta=False``): inputs param[k], m[k], v[k], [m_scale[k], v_scale[k] for int8],
    grad[k], lr (1 or k), wd (1 or k), powers float32[2], consts (LAYOUTS["adam"] or
    ["adam_ext"]); output float32[1].
    Delta: inputs m[k], v[k], [scales], grad[k], lr, powers, consts; outputs the k steps,
    each shaped and typed as its gradient.
    """
    check_layout("adam")
    check_layout("adam_ext")
    check_layout("powers")
    p = _fmt(dtype)
    mt, vt, scaled = moment_storage(moment_dtype)
    mom = (_FORMATS[mt],) * k + (_FORMATS[vt],) * k
    mom_names = _names(k, "m", "v")
    if scaled:
        mom += (_F32,) * (2 * k)
        mom_names += _names(k, "m_scale", "v_scale")
    q8 = "_q8" if scaled else ""
    nin = len(mom_names)
    if delta:
        op = _native.aot_op(
            f"ms_optim_adam{q8}_delta",
            out_shape=lambda *shapes: tuple(shapes[nin:nin + k]) if k > 1 else shapes[nin],
            out_dtype=lambda *dtypes: tuple(dtypes[nin:nin + k]) if k > 1 else dtypes[nin],
            inputs=mom_names + _names(k, "grad") + ("lr", "powers", "consts"),
            outputs=_names(k, "delta"),
            dtype_formats=[mom + (p,) * k + (_F32,) * 3 + (p,) * k], inplace=True)
    else:
        op = _native.aot_op(
            f"ms_optim_adam{q8}_inplace", out_shape=lambda *shapes: [1],
            out_dtype=lambda *dtypes: mstype.float32,
            inputs=_names(k, "param") + mom_names + _names(k, "grad") + ("lr", "wd", "powers",
                                                                         "consts"),
            outputs=("done",),
            dtype_formats=[(p,) * k + mom + (p,) * k + (_F32,) * 5], inplace=True)
    return op


# ------------------------------------------------------------------ Lamb --

def lamb_op(k):
    """Multi-tensor Lamb step: inputs param[k], m[k], v[k], grad[k] (float32), lr (1 or k),
    wd (1 or k), gscale (scalar), powers float32[2], consts (LAYOUTS["lamb"]); output the
    k trust ratios, float32[k]."""
    check_layout("lamb")
    check_layout("powers")
    return _native.aot_op(
        "ms_optim_lamb", out_shape=lambda *shapes: [k], out_dtype=lambda *dtypes: mstype.float32,
        inputs=_names(k, "param", "m", "v", "grad") + ("lr", "wd", "gscale", "powers", "consts"),
        outputs=("ratios",), dtype_formats=[(_F32,) * (4 * k + 6)], inplace=True)


def sumsq_op(k):
    """The sum of the squares of every element of k float32 inputs, float32[1]."""
    return _native.aot_op(
        "ms_optim_sumsq", out_shape=lambda *shapes: [1], out_dtype=lambda *dtypes: mstype.float32,
        inputs=_names(k, "grad"), outputs=("sumsq",), dtype_formats=[(_F32,) * (k + 1)],
        inplace=False)


# ------------------------------------------------------------------- DGC --

def topk_abs_op(k):
    """The k entries of largest |x| of a float32 input: (idx int32[k], val float32[k])."""
    return _native.aot_op(
        "ms_optim_topk_abs", out_shape=lambda x: ([k], [k]),
        out_dtype=lambda x: (mstype.int32, mstype.float32), inputs=("x",),
        outputs=("idx", "val"), dtype_formats=[(_F32, _I32, _F32)], inplace=False)


def dgc_select_multi_op(ks):
    """DGC's local step for len(ks) = K parameters in one op: u[K], v[K], grad[K] (float32),
    consts float32[2] (momentum, nesterov), ks int32[K] -> (idx int32[L], val float32[L]),
    L = sum(ks): parameter j's k_j selections side by side, the bucket's block of the fused
    exchange buffer.  u and v updated in place."""
    n, total = len(ks), int(sum(ks))
    op = _native.aot_op(
        "ms_optim_dgc_select_multi", out_shape=lambda *shapes: ([total], [total]),
        out_dtype=lambda *dtypes: (mstype.int32, mstype.float32),
        inputs=_names(n, "u", "v", "grad") + ("consts", "ks"), outputs=("idx", "val"),
        dtype_formats=[(_F32,) * (3 * n + 1) + (_I32, _I32, _F32)], inplace=True)
    # Ops that differ only in their output-shape function compare equal, and under msrun
    # MindSpore merged two of them (the second's k used for both): the ks become an attribute.
    op.add_prim_attr("ms_optim_ks", tuple(int(k) for k in ks))
    return op


def dgc_apply_multi_op(k, dtype):
    """p -= lr * scatter_add(every worker's values) / R for k parameters of `dtype`: inputs
    param[k], idx int32[R*L], val float32[R*L], lr float32 (1 or k), layout int32[1 + 2k]
    (R, the k offsets, the k counts); output float32[1]."""
    return _native.aot_op(
        "ms_optim_dgc_apply_multi", out_shape=lambda *shapes: [1],
        out_dtype=lambda *dtypes: mstype.float32,
        inputs=_names(k, "param") + ("idx", "val", "lr", "layout"), outputs=("done",),
        dtype_formats=[(_fmt(dtype),) * k + (_I32, _F32, _F32, _I32, _F32)], inplace=True)


def dgc_momentum_op(dtypes, src_dtypes):
    """DGC's dense momentum for K parameters of `dtypes` (float32, or float16 stepped in
    float32): inputs param[K], u[K] (float32), src (gradients of `src_dtypes`, parameter
    j's is src[gidx[j]], float32), lr float32 (1 or K), consts float32[2] (momentum,
    nesterov), gidx int32[K]; output float32[1]."""
    k = len(dtypes)
    return _native.aot_op(
        "ms_optim_dgc_momentum", out_shape=lambda *shapes: [1],
        out_dtype=lambda *dtypes: mstype.float32,
        inputs=_names(k, "param", "u") + _names(len(src_dtypes), "src") + ("lr", "consts", "gidx"),
        outputs=("done",),
        dtype_formats=[tuple(_fmt(d) for d in dtypes) + (_F32,) * k
                       + tuple(_fmt(d) for d in src_dtypes) + (_F32, _F32, _I32, _F32)],
        inplace=True)


def check_replicas_op():
    """Fails unless every worker's gathered int32 signature is the same."""
    return _native.aot_op(
        "ms_optim_check_replicas", out_shape=lambda *shapes: [1],
        out_dtype=lambda *dtypes: mstype.int32, inputs=("signatures", "width"),
        outputs=("ok",), dtype_formats=[(_I32, _I32, _I32)], inplace=False)


def digest_op(k, dtype):
    """A 64-bit digest (int32[2]) of k tensors of `dtype`."""
    return _native.aot_op(
        "ms_optim_digest", out_shape=lambda *shapes: [2], out_dtype=lambda *dtypes: mstype.int32,
        inputs=_names(k, "p"), outputs=("digest",),
        dtype_formats=[(_fmt(dtype),) * k + (_I32,)], inplace=False)
