"""The Python face of the CUDA kernel library (ms_optim/libms_optim_cuda.so).

The library is built at install time where nvcc is found (setup.py).  Its
entries take MindSpore's AOT arguments with device pointers and the CUDA
stream, and share the CPU library's declarations (``ops/core/contract.h``):
on a GPU device target the optimizers build their ops on them
(``ms_optim.aot.native_op(..., device="GPU")``).

This module needs neither MindSpore nor a GPU to load the library and read
what it declares; ``call`` runs an entry on any arrays that expose
``__cuda_array_interface__`` (PyTorch, CuPy, Numba), which is how the kernels
are tested on a GPU machine without MindSpore.  Nothing is loaded at import.
"""
import ctypes

from . import _loader, _slots

LIB_NAME = "libms_optim_cuda.so"

# the CUDA entries, and those it shares with the CPU library (ops/core/errors.cpp, ops/aot/call.cpp)
_SIGNATURES = {
    "msopt_cuda_kernels": (ctypes.c_char_p, []),
    "msopt_cuda_device": (ctypes.c_char_p, []),
    "msopt_cuda_status": (ctypes.c_int, [ctypes.c_void_p]),
    **_loader.REPORT_SIGNATURES,
}
# __cuda_array_interface__'s typestr -> the dtype names MindSpore passes to AOT kernels
_DTYPES = {"<f4": "float32", "<f2": "float16", "<i4": "int32", "<f8": "float64",
           "<i8": "int64", "|i1": "int8", "|u1": "uint8", "<i2": "int16"}


class CudaLibraryError(RuntimeError):
    """The CUDA kernel library is missing (not built: no nvcc at install) or cannot load."""


def library_path():
    """Absolute path of the CUDA library inside the installed package."""
    return _loader.package_file(LIB_NAME)


_LIBRARY = _loader.Library(
    lambda: library_path(), _SIGNATURES, CudaLibraryError,
    "ms_optim's CUDA kernels are not built: {path} is missing. They are built by "
    "'pip install .' where nvcc is on PATH or in $CUDA_HOME/bin.")


def lib():
    """The CUDA library loaded with ctypes, signatures declared; CudaLibraryError if it was
    not built or cannot be loaded."""
    return _LIBRARY.get()


def loaded():
    """True when this process has loaded the CUDA library (an optimizer built its ops)."""
    return _LIBRARY.loaded()


def available():
    """True when the CUDA library was built and loads (a GPU is not needed to load it)."""
    try:
        lib()
    except CudaLibraryError:
        return False
    return True


def kernels():
    """The AOT kernel entries the CUDA library has."""
    return tuple(lib().msopt_cuda_kernels().decode().split())


def device():
    """The current CUDA device, e.g. ``"NVIDIA H100 80GB HBM3, sm_90"``, or why there is none."""
    return lib().msopt_cuda_device().decode()


def signature(entry):
    """The slots of CUDA entry `entry` (ValueError for one the library lacks)."""
    have = kernels()
    if entry not in have:
        raise ValueError(f"the CUDA library has no kernel {entry!r}; it has {have}")
    return _slots.parse(lib().msopt_aot_signature(entry.encode()).decode())


def aot_func(entry):
    """The ``"path:function"`` string of CUDA entry `entry` for MindSpore's AOT Custom op,
    checked to load (CudaLibraryError, or ValueError for an entry the library lacks)."""
    signature(entry)
    return f"{library_path()}:{entry}"


def status(stream=0):
    """Waits for `stream` (an integer cudaStream_t, 0: the default stream) and raises
    RuntimeError with the library's message when a kernel found a value it could only read
    on the device (ks, a layout, an index) out of range; that call changed none of its
    inputs and marked its outputs refused (docs/gpu.md#errors)."""
    rc = lib().msopt_cuda_status(ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"code {rc}: {lib().msopt_last_error().decode()}")


def _describe(array):
    face = array.__cuda_array_interface__
    if face.get("strides") is not None:
        raise TypeError("the CUDA kernels take C-contiguous device arrays")
    typestr = face["typestr"]
    if typestr not in _DTYPES:
        raise TypeError(f"unsupported element type {typestr}")
    return face["data"][0], tuple(face["shape"]), _DTYPES[typestr]


def prepare(entry, arrays, stream=0):
    """A callable running CUDA entry `entry` on `arrays` (inputs, then outputs: device
    arrays with ``__cuda_array_interface__``, C-contiguous, kept alive by the callable) on
    `stream` (an integer cudaStream_t), its arguments built once.  Raises RuntimeError with
    the entry's message when it returns an error code."""
    handle = lib()
    fn = _loader.aot_function(handle, entry)
    arrays = list(arrays)
    return _loader.aot_runner(entry, fn, [_describe(a) for a in arrays], arrays,
                              lambda: handle.msopt_last_error().decode(), stream)


def prepare_named(entry, stream=0, **tensors):
    """``prepare`` on device arrays given by slot name (a list for a slot of one tensor per
    parameter), in the order the entry declares."""
    return prepare(entry, _slots.flat_arrays(entry, signature(entry), tensors), stream)


def call(entry, stream=0, **tensors):
    """Runs CUDA entry `entry` once on device arrays given by slot name (a list for a slot
    of one tensor per parameter), queued on `stream`."""
    prepare_named(entry, stream, **tensors)()
