"""The declaration of each native kernel's tensors (ops/core/contract.h), as the
library reports it and as every call is assembled from it; the error codes and
messages of the adapters, and last_native_error()."""
import ctypes

import numpy as np
import pytest
from mindspore import Tensor
from mindspore import dtype as mstype

import ms_optim
from ms_optim import _native, aot, testing
from tests.kernels.errors import rejects


def _f32(*shape):
    return np.zeros(shape, np.float32)


def test_every_exported_kernel_is_declared_and_every_declared_kernel_is_exported():
    names = testing.kernel_names()
    assert len(names) == len(set(names)) >= 12
    handle = ctypes.CDLL(_native.library_path())
    for name in names:
        assert hasattr(handle, name), name
        assert aot.signature(name), name
    with pytest.raises(ValueError, match="unknown native kernel 'ms_optim_nope'"):
        aot.signature("ms_optim_nope")


def test_the_reported_signatures_hold_the_declared_slots_in_order():
    sig = aot.signature("ms_optim_adam_q8_delta")
    assert [(s.name, s.arity, s.output) for s in sig] == [
        ("m", "each", False), ("v", "each", False), ("m_scale", "each", False),
        ("v_scale", "each", False), ("grad", "each", False), ("lr", "one", False),
        ("powers", "one", False), ("consts", "one", False), ("key", "one", False),
        ("delta", "each", True)]
    mom = {s.name: s.arity for s in aot.signature("ms_optim_dgc_momentum")}
    assert mom == {"param": "each", "u": "each", "src": "rest", "lr": "one", "consts": "one",
                   "gidx": "count", "done": "one"}
    assert aot.call_order("ms_optim_lamb") == (
        ("param", True), ("m", True), ("v", True), ("grad", True), ("lr", False),
        ("wd", False), ("gscale", False), ("powers", False), ("consts", False))
    assert aot.first_index("ms_optim_adam_q8_delta", "grad", 3) == 12


def test_caller_puts_named_tensors_in_the_declared_order():
    call = aot.caller("ms_optim_dgc_apply_multi")
    assert call is aot.caller("ms_optim_dgc_apply_multi")
    args = call(lambda *a: a, layout="L", lr="r", val="V", idx="I", param=("p0", "p1"),
                unused="x")
    assert args == ("p0", "p1", "I", "V", "r", "L")
    with pytest.raises(TypeError, match="layout"):
        call(lambda *a: a, param=("p0",), idx="I", val="V", lr="r")


def test_caller_of_no_slots_and_refused_slot_names(monkeypatch):
    orders = {"none": (), "op": (("op", False),), "keyword": (("lambda", True),),
              "odd": (("a-b", False),)}
    monkeypatch.setattr(aot, "call_order", orders.__getitem__)
    monkeypatch.setattr(aot, "_callers", {})
    assert aot.caller("none")(lambda *a: a, extra=1) == ()
    for entry in ("op", "keyword", "odd"):
        with pytest.raises(ValueError, match=f"native kernel {entry}: slot names .* cannot"):
            aot.caller(entry)


def test_every_kernels_caller_follows_its_declaration():
    """Each slot named by a distinct value (a pair for a slot of several tensors), given in
    the reverse of the declared order: the op gets them in the declared order."""
    for entry in testing.kernel_names():
        order = aot.call_order(entry)
        named = {name: (f"{name}.0", f"{name}.1") if multi else name for name, multi in order}
        expected = []
        for name, multi in order:
            expected.extend(named[name] if multi else [named[name]])
        args = aot.caller(entry)(lambda *a: a, **dict(reversed(list(named.items()))))
        assert args == tuple(expected), entry


def test_named_calls_reject_missing_unknown_and_uneven_slots():
    good = dict(grad=[_f32(3)], sumsq=_f32(1))
    testing.call_kernel("ms_optim_sumsq", **good)
    assert good["sumsq"][0] == 0.0
    with pytest.raises(ValueError, match=r"missing \['sumsq'\], unknown \['out'\]"):
        testing.call_kernel("ms_optim_sumsq", grad=[_f32(3)], out=_f32(1))
    with pytest.raises(ValueError, match="per-parameter slots differ in length"):
        testing.call_kernel("ms_optim_dgc_select_multi", u=[_f32(4)], v=[_f32(4), _f32(4)],
                            grad=[_f32(4)], consts=_f32(2), ks=np.ones(1, np.int32),
                            idx=np.zeros(1, np.int32), val=_f32(1))
    with pytest.raises(TypeError, match="by slot name"):
        testing.call_kernel("ms_optim_sumsq")


def test_ops_are_built_with_every_slot_typed_by_name():
    with pytest.raises(ValueError, match=r"missing \['sumsq'\]"):
        aot.native_op("ms_optim_sumsq", 2, dict(grad=mstype.float32),
                          out_shape=lambda *s: [1], out_dtype=lambda *d: mstype.float32,
                          inplace=False)
    with pytest.raises(ValueError, match="slot param takes 2 dtypes, got 1"):
        aot.native_op("ms_optim_dgc_momentum", 2,
                          dict(param=(mstype.float32,), u=mstype.float32, src=(mstype.float32,),
                               lr=mstype.float32, consts=mstype.float32, gidx=mstype.int32,
                               done=mstype.float32),
                          out_shape=lambda *s: [1], out_dtype=lambda *d: mstype.float32,
                          inplace=True, rest=1)


def _apply_call(idx, layout):
    """ms_optim_dgc_apply_multi on one float32[10] parameter, by slot name."""
    return dict(param=[_f32(10)], idx=np.asarray(idx, np.int32),
                val=np.ones(len(idx), np.float32), lr=np.float32([1.0]),
                layout=np.asarray(layout, np.int32), done=_f32(1))


def _select_call(ks, k_total):
    """ms_optim_dgc_select_multi on one float32[4] tensor, by slot name."""
    return dict(u=[_f32(4)], v=[_f32(4)], grad=[_f32(4)], consts=_f32(2),
                ks=np.array(ks, np.int32), idx=np.zeros(k_total, np.int32), val=_f32(k_total))


# the replica check's one parameter, named w, large and not in dense_params
ONE_NAME = dict(names=np.frombuffer(b"w\0", np.uint8).copy(), roles=np.zeros(1, np.int32))


# `call`: the tensors by slot name, or the flat list (arrays=) for a malformed tensor count
@pytest.mark.parametrize("entry, call, code, message", [
    ("ms_optim_sumsq", dict(arrays=[_f32(1)]), "MSOPT_ERR_ARGS",
     r"expected 1K \+ 1 tensors \(grad:each -> sumsq\), got 1"),
    ("ms_optim_topk_abs", dict(arrays=[_f32(4), np.zeros(2, np.int32)]), "MSOPT_ERR_ARGS",
     r"expected 0 \+ 3 tensors \(x -> idx val\), got 2"),
    ("ms_optim_sumsq", dict(grad=[np.zeros(3)], sumsq=_f32(1)), "MSOPT_ERR_DTYPE",
     "grad0 must be float32, got float64"),
    ("ms_optim_sumsq", dict(grad=[_f32(3)], sumsq=_f32(2)), "MSOPT_ERR_SIZE",
     r"sumsq must have 1 element\(s\), got 2"),
    ("ms_optim_topk_abs", dict(x=_f32(4), idx=np.zeros(2, np.int32), val=_f32(3)),
     "MSOPT_ERR_SIZE", "idx and val must have the same length, got 2 and 3"),
    ("ms_optim_dgc_apply_multi", _apply_call([3, 10], [1, 0, 2]), "MSOPT_ERR_VALUE",
     r"param0: index 10 of block 0 outside \[0, 10\)"),
    ("ms_optim_dgc_apply_multi", _apply_call([3, 4], [3, 0, 2]), "MSOPT_ERR_VALUE",
     "layout.0. = 3 blocks do not divide the 2 entries"),
    ("ms_optim_dgc_apply_multi", _apply_call([3, 4], [1, 0, 2, 5]), "MSOPT_ERR_SIZE",
     "layout must have 1 . 2K = 3 elements, got 4"),
    ("ms_optim_dgc_select_multi", _select_call([5], 5), "MSOPT_ERR_VALUE",
     r"ks\[0\] = 5 is outside \[1, 4\]"),
    ("ms_optim_dgc_select_multi", _select_call([1, 1], 1), "MSOPT_ERR_SIZE",
     "ks must have 1 elements .one per parameter., got 2"),
    ("ms_optim_dgc_momentum", dict(param=[_f32(4)], u=[_f32(4)], src=[_f32(4)],
                                   lr=np.float32([1.0]), consts=_f32(2),
                                   gidx=np.array([1], np.int32), done=_f32(1)),
     "MSOPT_ERR_VALUE", r"gidx\[0\] = 1 is outside \[0, 1\)"),
    ("ms_optim_dgc_momentum", dict(arrays=[_f32(4), _f32(4), np.float32([1.0]), _f32(2),
                                           np.array([0, 0, 0], np.int32), _f32(1)]),
     "MSOPT_ERR_ARGS", r"gidx holds 3 element\(s\), which does not fit 6 tensors"),
    ("ms_optim_check_replicas", dict(signatures=np.array([1, 2, 2, 0, 0, 0, -1,
                                                          1, 3, 2, 1, 0, 0, -1], np.int32),
                                     width=np.array([7], np.int32),
                                     world=np.array([2, 2], np.int32),
                                     residuals=np.zeros(2, np.int32), **ONE_NAME,
                                     ok=np.zeros(1, np.int32)),
     "MSOPT_ERR_REPLICA", "workers disagree on the model"),
    ("ms_optim_check_replicas", dict(signatures=np.array([1, 2, 2, 0, 0, 1], np.int32),
                                     width=np.array([5], np.int32),
                                     world=np.array([2, 2], np.int32),
                                     residuals=np.zeros(2, np.int32), **ONE_NAME,
                                     ok=np.zeros(1, np.int32)),
     "MSOPT_ERR_VALUE", "6 signature values are not rows of width 5"),
    ("ms_optim_check_replicas", dict(signatures=np.array([1, 2, 2, 0, 0], np.int32),
                                     width=np.array([5], np.int32),
                                     world=np.array([4, 2], np.int32),
                                     residuals=np.zeros(2, np.int32), **ONE_NAME,
                                     ok=np.zeros(1, np.int32)),
     "MSOPT_ERR_REPLICA", "holds the residuals of 4 worker"),
    ("ms_optim_check_replicas", dict(signatures=np.array([1, 2, 2, 0, 0], np.int32),
                                     width=np.array([5], np.int32),
                                     world=np.array([2, 2], np.int32),
                                     residuals=np.array([1, 0], np.int32),
                                     **ONE_NAME, ok=np.zeros(1, np.int32)),
     "MSOPT_ERR_REPLICA",
     "holds residuals of gradients for parameter 'w' and this run sends it dense"),
    ("ms_optim_check_replicas", dict(signatures=np.array([1, 2, 2, 0, 0], np.int32),
                                     width=np.array([5], np.int32),
                                     world=np.array([2, 2], np.int32),
                                     residuals=np.array([5, 1], np.int32),
                                     **ONE_NAME, ok=np.zeros(1, np.int32)),
     "MSOPT_ERR_VALUE", r"dgc_residual_kind of parameter 'w' is 5, not a residual kind"),
])
def test_each_check_has_its_own_code_and_message(entry, call, code, message, capfd):
    what = rejects(entry, code, message, **call)
    native = ms_optim.last_native_error()
    assert native == f"{entry}: {what}", native
    assert f"ms_optim: {native} (code " in capfd.readouterr().err


def test_a_failing_op_inside_mindspore_leaves_its_message_for_last_native_error():
    # a kernel run by MindSpore, on MindSpore's own thread: its RuntimeError carries only
    # the code, the message is kept for ms_optim.last_native_error()
    op = aot.dgc_apply_multi_op(1, mstype.float32)
    args = (Tensor(_f32(10)), Tensor(np.array([3, 12], np.int32)), Tensor(np.ones(2, np.float32)),
            Tensor(np.float32([1.0])), Tensor(np.array([1, 0, 2], np.int32)))
    with pytest.raises(RuntimeError):
        op(*args).asnumpy()
    assert ms_optim.last_native_error() == (
        "ms_optim_dgc_apply_multi: param0: index 12 of block 0 outside [0, 10)")
