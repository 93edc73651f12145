"""The CUDA library as the install builds it where nvcc is found (no GPU needed here): it is
built, its entries are declared as the CPU library's, and it refuses wrong tensors on the host,
naming them, before it touches a device.  Its kernels are tested on a GPU (tests/gpu)."""
import os
import shutil

import numpy as np
import pytest

import ms_optim
from ms_optim import _cuda, aot, testing

built = pytest.mark.skipif(not _cuda.available(),
                           reason="the CUDA library is not built (no nvcc at install)")


def test_built_where_nvcc_is_found():
    """As setup.py looks for nvcc: on PATH, else in $CUDA_HOME/bin; MSOPT_CUDA=0 skips it."""
    home = os.environ.get("CUDA_HOME")
    nvcc = shutil.which("nvcc") or (home and shutil.which(os.path.join(home, "bin", "nvcc")))
    if not nvcc or os.environ.get("MSOPT_CUDA") == "0":
        pytest.skip("no nvcc, or MSOPT_CUDA=0: the install builds no CUDA library")
    assert _cuda.available(), f"{_cuda.library_path()} was not built although {nvcc} is there"


@built
def test_entries_are_declared_as_the_cpu_librarys():
    assert set(_cuda.kernels()) == {
        "ms_optim_lamb", "ms_optim_sumsq", "ms_optim_dgc_select_multi",
        "ms_optim_dgc_propose_multi", "ms_optim_dgc_take_multi", "ms_optim_dgc_apply_multi"}
    for entry in _cuda.kernels():
        assert _cuda.signature(entry) == aot.signature(entry), entry
    with pytest.raises(ValueError, match="has no kernel 'ms_optim_adam_inplace'"):
        _cuda.signature("ms_optim_adam_inplace")


class DeviceArray:
    """Stands for a device tensor: only its description is read before the checks fail."""

    def __init__(self, shape, typestr="<f4"):
        self.__cuda_array_interface__ = {"data": (0, False), "shape": tuple(shape),
                                         "typestr": typestr, "strides": None, "version": 3}


def _select(**change):
    call = dict(u=[DeviceArray((100,)), DeviceArray((50,))],
                v=[DeviceArray((100,)), DeviceArray((50,))],
                grad=[DeviceArray((100,)), DeviceArray((50,))], consts=DeviceArray((2,)),
                ks=DeviceArray((2,), "<i4"), idx=DeviceArray((3,), "<i4"),
                val=DeviceArray((3,)))
    call.update(change)
    return call


@built
@pytest.mark.parametrize("entry, change, message", [
    ("ms_optim_dgc_select_multi", dict(u=[DeviceArray((100,), "<f8"), DeviceArray((50,))]),
     "ms_optim_dgc_select_multi: u0 must be float32, got float64"),
    ("ms_optim_dgc_select_multi", dict(v=[DeviceArray((100,)), DeviceArray((49,))]),
     "ms_optim_dgc_select_multi: v1 has 49 elements, u1 50"),
    ("ms_optim_dgc_select_multi", dict(val=DeviceArray((4,))),
     "idx and val must have the same length, got 3 and 4"),
    ("ms_optim_dgc_select_multi", dict(consts=DeviceArray((3,))),
     "consts must have 2 element"),
    ("ms_optim_dgc_select_multi", dict(ks=DeviceArray((2,))), "ks must be int32, got float32"),
])
def test_host_checks_name_the_tensor(entry, change, message):
    with pytest.raises(RuntimeError, match=message):
        _cuda.call(entry, **_select(**change))


@built
def test_a_call_of_the_wrong_arity_is_refused():
    flat = [DeviceArray((10,))] * 4
    with pytest.raises(RuntimeError, match=r"expected 3K \+ 4 tensors .* got 4"):
        _cuda.prepare("ms_optim_dgc_select_multi", flat)()


@built
def test_lamb_and_apply_check_their_sizes_on_the_host():
    p = [DeviceArray((10,)), DeviceArray((20,))]
    one = DeviceArray((1,))
    with pytest.raises(RuntimeError, match="ratios must have 2 element"):
        _cuda.call("ms_optim_lamb", param=p, m=p, v=p, grad=p, lr=one, wd=one, gscale=one,
                   powers=DeviceArray((2,)), consts=DeviceArray((7,)), ratios=one)
    with pytest.raises(RuntimeError, match=r"layout must have 1 \+ 2K = 5 elements, got 3"):
        _cuda.call("ms_optim_dgc_apply_multi", param=p, idx=DeviceArray((4,), "<i4"),
                   val=DeviceArray((4,)), lr=one, layout=DeviceArray((3,), "<i4"), done=one)
    with pytest.raises(RuntimeError, match="param1 must be float32, got float16"):
        _cuda.call("ms_optim_dgc_apply_multi", param=[p[0], DeviceArray((20,), "<f2")],
                   idx=DeviceArray((4,), "<i4"), val=DeviceArray((4,)), lr=one,
                   layout=DeviceArray((5,), "<i4"), done=one)


@built
def test_last_native_error_is_the_latest_failure_of_either_library():
    with pytest.raises(RuntimeError):
        _cuda.call("ms_optim_dgc_select_multi", **_select(ks=DeviceArray((2,))))
    assert ms_optim.last_native_error() == (
        "ms_optim_dgc_select_multi: ks must be int32, got float32")
    with pytest.raises(RuntimeError):
        testing.call_kernel("ms_optim_sumsq", grad=[np.zeros(3)], sumsq=np.zeros(1, np.float32))
    assert ms_optim.last_native_error() == "ms_optim_sumsq: grad0 must be float32, got float64"
    with pytest.raises(RuntimeError):
        _cuda.call("ms_optim_sumsq", grad=[DeviceArray((3,), "<f8")], sumsq=DeviceArray((1,)))
    assert ms_optim.last_native_error() == "ms_optim_sumsq: grad0 must be float32, got float64"
    with pytest.raises(RuntimeError):
        _cuda.call("ms_optim_lamb", **dict.fromkeys(("param", "m", "v", "grad"),
                                                    [DeviceArray((4,))]),
                   lr=DeviceArray((1,)), wd=DeviceArray((1,)), gscale=DeviceArray((2,)),
                   powers=DeviceArray((2,)), consts=DeviceArray((7,)), ratios=DeviceArray((1,)))
    assert "ms_optim_lamb: gscale must have 1 element" in ms_optim.last_native_error()


@built
def test_the_cuda_library_lists_only_its_own_kernels():
    with pytest.raises(AttributeError):
        _cuda.lib().msopt_aot_kernels  # the CPU library's list of every entry
    assert "ms_optim_adam_inplace" in testing.kernel_names()


@built
def test_device_arrays_must_be_contiguous():
    strided = DeviceArray((10,))
    strided.__cuda_array_interface__["strides"] = (8,)
    with pytest.raises(TypeError, match="C-contiguous"):
        _cuda.call("ms_optim_sumsq", grad=[strided], sumsq=DeviceArray((1,)))
