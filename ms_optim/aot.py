"""Every MindSpore AOT op of ms_optim, built in one place.

Four things live here and nowhere else:

- **Calls by name.**  Which tensors a kernel takes, and in which order, is
  declared once, with its constants, in ``ops/core/contract.h``; the library
  reports it (``signature(entry)``).  An op is built with each slot's dtype
  given by name (``native_op``), and called with its tensors given by name
  (``caller``, ``arrange_arrays``): a missing name is an error, and no argument
  order is written on this side.
- **Constants layouts.**  A kernel's fixed hyper-parameters travel as one
  float32 tensor whose layout is a C++ struct declared by a list of field
  names in the same file, the one place they are written: the library reports
  the list (``msopt_consts_layout``), and ``consts(kernel, **values)`` builds
  the tensor by name from it (a missing or unknown name is a ValueError).
- **Bucketing** (``buckets``), on the model of apex's ``multi_tensor_apply``:
  the parameters are cut into runs of at most ``MAX_TENSORS`` (of one dtype
  where a kernel's inputs must share it), and each run is stepped by one
  multi-tensor op; the bucket of small parameters (``bucket_sparsity``) is one
  op whatever its size.  A MindSpore kernel launch
  costs more than a small parameter's update (benchmarks/README.md#where-a-steps-time-goes).
- **The op builders**: ``host_step_op`` for every host-moment step kernel (one
  whose moments live on the host, as AdamOffload's: each slot's dtype follows
  from its role, so a new such kernel needs no builder), and one function for each other native kernel, returning a
  ``mindspore.ops.Custom`` pinned to the host CPU (``_custom_op``); those of
  Lamb and its sum of squares and of DGC's select, propose, take and apply take
  ``device="GPU"`` for the CUDA library's entry of the same declaration (ops/cuda/).
"""
import ctypes
import keyword
import zlib

from mindspore import Tensor, ops
from mindspore import dtype as mstype
from mindspore.ops import CustomRegOp, DataType

from . import _cuda, _native, _slots

MAX_TENSORS = 256  # parameters per multi-tensor op

_FORMATS = {mstype.float32: DataType.F32_Default, mstype.float16: DataType.F16_Default,
            mstype.float64: DataType.F64_Default, mstype.bfloat16: DataType.BF16_Default,
            mstype.int32: DataType.I32_Default, mstype.int8: DataType.I8_Default,
            mstype.uint8: DataType.U8_Default}

def consts(kernel, **values):
    """The float32 constants tensor of `kernel`, its fields given by name (bools as 0/1), in
    the order ops/core/contract.h declares them (``_native.consts_values``)."""
    return Tensor(consts_array(kernel, **values))


def consts_array(kernel, **values):
    """consts() as a numpy array (for calling a kernel directly, in tests and benchmarks)."""
    return _native.consts_values(kernel, **values)


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


# ------------------------------------------------------- calls by name --

_signatures = {}


def signature(entry):
    """The slots of AOT kernel `entry`, in call order, as the library declares them."""
    if entry not in _signatures:
        _signatures[entry] = _slots.parse(_native.aot_signature(entry))
    return _signatures[entry]


def call_order(entry):
    """The inputs of `entry` as ``(name, multi)`` pairs: a slot of several tensors takes a
    tuple."""
    return tuple((s.name, s.multi) for s in signature(entry) if not s.output)


_callers = {}


def caller(entry):
    """The function ``f(op, **slots)`` that calls `op`, an op of `entry`, on its input slots
    given by name (a slot of several tensors as a tuple; names `entry` does not declare are
    not used, so a caller of several entries can pass their union), for a cell's
    ``construct``.

    Its text is written here from the declaration, ``def f(op, u, v, grad, consts, ks,
    **unused): return op(*u, *v, *grad, consts, ks)`` for DGC's select, and handed to
    MindSpore's parser as the function's ``source`` (its mechanism for functions without a
    source file): called with keywords, it compiles as fast as the op called on its tensors
    directly, where picking the slots out of a dict of keywords inside the graph costs
    MindSpore about 30 ms per call site and branch (benchmarks/README.md#the-first-step)."""
    if entry not in _callers:
        slots = call_order(entry)
        clash = [n for n, _ in slots if n in ("op", "unused") or keyword.iskeyword(n)
                 or not n.isidentifier()]
        if clash:
            raise ValueError(f"native kernel {entry}: slot names {clash} cannot name "
                             f"arguments of its caller")
        params = "".join(f"{name}, " for name, _ in slots)
        args = ", ".join(("*" if multi else "") + name for name, multi in slots)
        name = f"call_{entry}"
        text = f"def {name}(op, {params}**unused):\n    return op({args})\n"
        scope = {"__name__": __name__}
        # the file name in <>: nothing reads it from disk, MindSpore reads `source`
        exec(compile(text, f"<ms_optim.aot.caller {entry}>", "exec"), scope)
        fn = scope[name]
        fn.source = (text.splitlines(keepends=True), 1)
        _callers[entry] = fn
    return _callers[entry]


def first_index(entry, name, k):
    """The position of slot `name`'s first tensor among the inputs of a call of `entry` on
    `k` parameters (before any ``"rest"`` slot)."""
    at = 0
    for s in signature(entry):
        if s.name == name:
            return at
        if s.arity == "rest":
            break
        at += k if s.arity == "each" else 1
    raise ValueError(f"native kernel {entry} has no slot {name!r} before a variable one")


def arrange_arrays(entry, **named):
    """The flat array list (inputs, then outputs) of a direct call of `entry` (through
    ``ms_optim.testing``), from its tensors given by name; ValueError naming a missing or
    unknown slot, or slots of one tensor per parameter whose lengths differ."""
    return _slots.flat_arrays(entry, signature(entry), named)


def native_op(entry, k, dtypes, out_shape, out_dtype, inplace, rest=0, device="CPU", key=None):
    """A ``mindspore.ops.Custom`` running AOT kernel `entry` on `k` parameters (and `rest`
    tensors in a ``"rest"`` slot): `dtypes` gives each slot's dtype by name, one mindspore
    dtype for all its tensors or a sequence of one per tensor.  ValueError naming a
    missing or unknown slot.  `device`: "CPU" (the host library, the op pinned to the
    host) or "GPU" (the CUDA library's entry of the same declaration, one of
    ``ms_optim._cuda.kernels()``).  `key`: what else tells this op's registration from
    others of the same inputs (an output size its inputs do not give)."""
    slots = signature(entry)
    _slots.check_names(entry, dtypes, [s.name for s in slots])
    names = {False: [], True: []}
    formats = []
    for s in slots:
        n = {"each": k, "rest": rest}.get(s.arity, 1)
        d = dtypes[s.name]
        each = tuple(d) if isinstance(d, (tuple, list)) else (d,) * n
        if len(each) != n:
            raise ValueError(f"native kernel {entry}: slot {s.name} takes {n} dtypes, got "
                             f"{len(each)}")
        formats.extend(_FORMATS[x] for x in each)
        names[s.output].extend([s.name] if s.arity in ("one", "count") else
                               [f"{s.name}{i}" for i in range(n)])
    return _custom_op(entry, out_shape, out_dtype, tuple(names[False]), tuple(names[True]),
                      tuple(formats), inplace, device, key)


def _custom_op(entry, out_shape, out_dtype, inputs, outputs, formats, inplace, device,
               key=None):
    """The ``mindspore.ops.Custom`` AOT op of `entry`: on the host CPU (pinned there
    whatever the device target), or with `device` "GPU" the CUDA library's entry of that
    name.  inputs/outputs: names; formats: the ``DataType`` of each; inplace: the op writes
    into its Parameter inputs, so MindSpore must keep it and order it against other reads
    (``side_effect_mem``)."""
    # MindSpore keeps one registration per name: ops of one entry with different input
    # counts (multi-tensor kernels) or dtypes (the digest of float32 and of float16
    # parameters), or with the same inputs and outputs of other sizes (two packs of the
    # same gradients), need names of their own.
    crc = zlib.crc32(repr([formats] if key is None else [formats, key]).encode())
    suffix = "_gpu" if device == "GPU" else ""
    reg = CustomRegOp(f"{entry}_{len(inputs)}_{crc:08x}{suffix}")
    for i, name in enumerate(inputs):
        reg = reg.input(i, name)
    for i, name in enumerate(outputs):
        reg = reg.output(i, name)
    reg = reg.dtype_format(*formats)
    func = _cuda.aot_func(entry) if device == "GPU" else _native.aot_func(entry)
    op = ops.Custom(func, out_shape=out_shape, out_dtype=out_dtype, func_type="aot",
                    reg_info=reg.target(device).get_op_info())
    if inplace:
        op.add_prim_attr("side_effect_mem", True)
    if device == "CPU":
        op.set_device("CPU")
    return op


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


def host_step_entry(rule, delta, scaled):
    """The entry of host-moment step kernel `rule` (e.g. "adam"; ops/aot/aot_<rule>.cpp):
    ``ms_optim_<rule>[_q8]_<inplace|delta>``, int8 (scaled) moments or not."""
    return f"ms_optim_{rule}{'_q8' if scaled else ''}_{'delta' if delta else 'inplace'}"


# A host step's slots by role: the parameter's dtype for param, grad and delta, the moment
# storage's for m and v, int32 for key, float32 for every other slot (scales, rates, consts,
# done).
_HOST_STEP_INT32 = ("key",)


def host_step_op(rule, k, dtype, delta, moment_dtype="float32"):
    """The multi-tensor op of host-moment step kernel `rule` (e.g. "adam") over `k`
    parameters of `dtype` (float32 or float16), moments stored as `moment_dtype`
    (MOMENT_DTYPES): in place (-> done) or delta (-> one step per parameter, shaped and typed
    as its gradient).  Every slot's dtype comes from its role in the entry's declaration
    (``host_step_entry``), so a new host-moment kernel needs no builder of its own."""
    m_dtype, v_dtype, scaled = moment_storage(moment_dtype)
    entry = host_step_entry(rule, delta, scaled)
    by_role = dict(param=dtype, grad=dtype, delta=dtype, m=m_dtype, v=v_dtype)
    dtypes = {s.name: by_role.get(s.name, mstype.int32 if s.name in _HOST_STEP_INT32
                                  else mstype.float32)
              for s in signature(entry)}
    if delta:
        g = first_index(entry, "grad", k)
        return native_op(entry, k, dtypes, inplace=True,
                         out_shape=lambda *shapes: tuple(shapes[g:g + k]) if k > 1 else shapes[g],
                         out_dtype=lambda *dts: tuple(dts[g:g + k]) if k > 1 else dts[g])
    f32 = mstype.float32
    return native_op(entry, k, dtypes, inplace=True,
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32)


# ------------------------------------------------------------------ Lamb --

def lamb_op(k, device="CPU"):
    """Multi-tensor Lamb step over `k` float32 parameters (ops/aot/aot_lamb.cpp, or
    ops/cuda/lamb.cu with device "GPU"); its output holds the k trust ratios."""
    f32 = mstype.float32
    return native_op("ms_optim_lamb", k, dict.fromkeys(
        ("param", "m", "v", "grad", "lr", "wd", "gscale", "powers", "consts", "ratios"), f32),
        out_shape=lambda *shapes: [k], out_dtype=lambda *dts: f32, inplace=True,
        device=device)


def sumsq_op(k, device="CPU"):
    """The sum of the squares of every element of k float32 inputs, float32[1]."""
    f32 = mstype.float32
    return native_op("ms_optim_sumsq", k, dict(grad=f32, sumsq=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=False,
                     device=device)


# ------------------------------------------------------------------- DGC --

def topk_abs_op(k):
    """The k entries of largest |x| of a float32 input: (idx int32[k], val float32[k])."""
    return native_op("ms_optim_topk_abs", 0,
                     dict(x=mstype.float32, idx=mstype.int32, val=mstype.float32),
                     out_shape=lambda x: ([k], [k]),
                     out_dtype=lambda x: (mstype.int32, mstype.float32), inplace=False)


def _dgc_entries_op(entry, count, ks, slots, outs, device="CPU", rest=0):
    """A DGC kernel over `count` parameters' float32 residuals whose outputs `outs`
    (mindspore dtypes) each hold sum(ks) entries, blocks of k_j side by side: one per
    parameter of a multi-tensor select (the bucket's block of the fused exchange buffer),
    or one for the selection over the bucket of small parameters.  `slots`: the inputs'
    dtypes by name; `rest`: how many tensors a "rest" slot holds."""
    total = int(sum(ks))
    op = native_op(entry, count, slots, rest=rest,
                   out_shape=lambda *shapes: tuple([total] for _ in outs) if len(outs) > 1
                   else [total],
                   out_dtype=lambda *dts: tuple(outs) if len(outs) > 1 else outs[0],
                   inplace=True, device=device)
    # Ops that differ only in their output-shape function compare equal, and under msrun
    # MindSpore merges two such ops (the second's k used for both): the ks are an attribute.
    op.add_prim_attr("ms_optim_ks", tuple(int(k) for k in ks))
    return op


def dgc_select_multi_op(ks, device="CPU"):
    """DGC's local step for len(ks) = K float32 parameters in one op (ops/aot/aot_dgc.cpp):
    idx int32[L] and val float32[L], L = sum(ks), parameter j's k_j selections side by
    side, the bucket's block of the fused exchange buffer; u and v updated in place."""
    f32, i32 = mstype.float32, mstype.int32
    return _dgc_entries_op("ms_optim_dgc_select_multi", len(ks), ks,
                           dict(u=f32, v=f32, grad=f32, consts=f32, ks=i32, idx=i32, val=f32),
                           (i32, f32), device)


def dgc_propose_multi_op(ks, device="CPU"):
    """The first half of DGC's local step for len(ks) float32 parameters in one op
    (ops/aot/aot_dgc.cpp): idx int32[sum(ks)], each parameter's top-k indices of its
    accumulated residual; u and v updated in place, nothing masked."""
    f32, i32 = mstype.float32, mstype.int32
    return _dgc_entries_op("ms_optim_dgc_propose_multi", len(ks), ks,
                           dict(u=f32, v=f32, grad=f32, consts=f32, ks=i32, idx=i32), (i32,),
                           device)


def dgc_take_multi_op(k, device="CPU"):
    """The second half at shared indices for k float32 parameters (ops/aot/aot_dgc.cpp): val
    float32, shaped as idx (the exchanged index buffer, read as its layout input says), v at
    each parameter's indices; u and v set to 0 there."""
    f32, i32 = mstype.float32, mstype.int32
    return native_op("ms_optim_dgc_take_multi", k,
                     dict(u=f32, v=f32, idx=i32, layout=i32, val=f32),
                     out_shape=lambda *shapes: shapes[2 * k], out_dtype=lambda *dts: f32,
                     inplace=True, device=device)


def dgc_bucket_select_op(count, k, src_dtypes):
    """DGC's local step for the bucket of `count` small parameters in one op
    (ops/aot/aot_dgc.cpp): u and v updated in place with their gradients (src[gidx[j]],
    among the step's whole gradient tuple of `src_dtypes`), then the `k` entries of largest
    |v| over the concatenation, idx int32[k] (positions in it, ascending) and val float32[k]
    (v there); u and v set to 0 there."""
    f32, i32 = mstype.float32, mstype.int32
    return _dgc_entries_op("ms_optim_dgc_bucket_select", count, (k,),
                           dict(u=f32, v=f32, src=tuple(src_dtypes), consts=f32, gidx=i32,
                                idx=i32, val=f32), (i32, f32), rest=len(src_dtypes))


def dgc_bucket_propose_op(count, k, src_dtypes):
    """The first half of dgc_bucket_select_op: idx int32[k], nothing masked."""
    f32, i32 = mstype.float32, mstype.int32
    return _dgc_entries_op("ms_optim_dgc_bucket_propose", count, (k,),
                           dict(u=f32, v=f32, src=tuple(src_dtypes), consts=f32, gidx=i32,
                                idx=i32), (i32,), rest=len(src_dtypes))


def dgc_bucket_take_op(count):
    """The second half at shared positions (ops/aot/aot_dgc.cpp): val float32 shaped as idx,
    v at each position of the bucket's concatenation (0 where a position repeats); u and v
    set to 0 there."""
    f32, i32 = mstype.float32, mstype.int32
    return native_op("ms_optim_dgc_bucket_take", count, dict(u=f32, v=f32, idx=i32, val=f32),
                     out_shape=lambda *shapes: shapes[2 * count], out_dtype=lambda *dts: f32,
                     inplace=True)


def dgc_bucket_apply_op(dtypes):
    """p_j -= lr_j * mean over parameter j's positions in the bucket's concatenation, for
    parameters of `dtypes` (float32 or float16, each its own; ops/aot/aot_dgc.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_dgc_bucket_apply", len(dtypes),
                     dict(param=tuple(dtypes), mean=f32, lr=f32, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True)


def dgc_bucket_apply_entries_op(dtypes):
    """dgc_bucket_apply_op's update from (idx, val) entries at the bucket's positions and
    the number of workers: mean = scatter_add(0, idx, val) / ranks, applied where idx names
    (ops/aot/aot_dgc.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_dgc_bucket_apply_entries", len(dtypes),
                     dict(param=tuple(dtypes), idx=mstype.int32, val=f32, lr=f32, ranks=f32,
                          done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True)


def dgc_apply_multi_op(k, dtype, device="CPU"):
    """p -= lr * scatter_add(every worker's values) / R for k parameters of `dtype`
    (ops/aot/aot_dgc.cpp)."""
    f32, i32 = mstype.float32, mstype.int32
    return native_op("ms_optim_dgc_apply_multi", k,
                     dict(param=dtype, idx=i32, val=f32, lr=f32, layout=i32, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True,
                     device=device)


def dgc_momentum_op(dtypes, src_dtypes):
    """DGC's dense momentum for K parameters of `dtypes` (float32, or float16 stepped in
    float32), their gradients among the sources of `src_dtypes` (ops/aot/aot_dgc.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_dgc_momentum", len(dtypes),
                     dict(param=tuple(dtypes), u=f32, src=tuple(src_dtypes), lr=f32, consts=f32,
                          gidx=mstype.int32, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True,
                     rest=len(src_dtypes))


def dgc_momentum_flat_op(dtypes):
    """dgc_momentum_op with the K parameters' gradients one after another in one float32
    buffer, the dense exchange's (ops/aot/aot_dense.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_dgc_momentum_flat", len(dtypes),
                     dict(param=tuple(dtypes), u=f32, flat=f32, lr=f32, consts=f32, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True)


def pack_op(src_dtypes, total, dtype=mstype.float32):
    """The sources src[gidx[j]] (of `dtype`) one after another in one buffer of `total`
    elements, among the sources of `src_dtypes` (ops/aot/aot_dense.cpp)."""
    return native_op("ms_optim_pack", 0,
                     dict(src=tuple(src_dtypes), gidx=mstype.int32, flat=dtype),
                     out_shape=lambda *shapes: [total], out_dtype=lambda *dts: dtype,
                     inplace=False, rest=len(src_dtypes), key=total)


def unpack_op(dst_dtypes, dtype):
    """pack_op's reverse, in place: dst[gidx[j]] (of `dtype`, among tensors of
    `dst_dtypes`) takes its elements of the packed buffer (ops/aot/aot_dense.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_unpack", 0,
                     dict(dst=tuple(dst_dtypes), gidx=mstype.int32, flat=dtype, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32,
                     inplace=True, rest=len(dst_dtypes))


def dgc_flush_flat_op(dtypes):
    """DGC's flush of the residuals of K parameters of `dtypes` (float32, or float16
    stepped in float32) from the workers' mean of their packed v's and u's
    (ops/aot/aot_dense.cpp)."""
    f32 = mstype.float32
    return native_op("ms_optim_dgc_flush_flat", len(dtypes),
                     dict(param=tuple(dtypes), u=f32, v=f32, mean=f32, lr=f32, done=f32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: f32, inplace=True)


def check_replicas_op():
    """Fails unless every worker's gathered int32 row (model signature, step, the state's
    world size, rank and digest of residual kinds) is the same, the world size the
    optimizer state was saved by is this run's, and each parameter's residuals in the state
    are of a kind this run can step on; its message is DGCMomentum's error."""
    i32 = mstype.int32
    return native_op("ms_optim_check_replicas", 0,
                     dict(signatures=i32, width=i32, world=i32, residuals=i32,
                          names=mstype.uint8, roles=i32, ok=i32),
                     out_shape=lambda *shapes: [1], out_dtype=lambda *dts: i32, inplace=False)


def digest_op(k, dtype):
    """A 64-bit digest (int32[2]) of k tensors of `dtype`."""
    i32 = mstype.int32
    return native_op("ms_optim_digest", k, dict(p=dtype, digest=i32),
                     out_shape=lambda *shapes: [2], out_dtype=lambda *dts: i32, inplace=False)
