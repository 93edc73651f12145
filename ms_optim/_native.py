"""The Python face of the native library (ms_optim/libms_optim.so).

Two ways in, one library:
- ``aot_op`` builds a ``mindspore.ops.Custom`` AOT op bound to one kernel
  entry point, pinned to the host CPU.
- ``lib()`` loads the library with ctypes (every symbol's signature declared
  once in ``_SIGNATURES``), for tests and the C ABI.

Nothing is loaded at import: a missing or broken library raises
``NativeLibraryError`` naming the file at first use.
"""
import ctypes
import os
import threading
import zlib

_LIB_NAME = "libms_optim.so"
_lock = threading.Lock()
_lib = None

# name: (restype, argtypes)
_SIGNATURES = {
    "msopt_last_error": (ctypes.c_char_p, []),
    "msopt_isa": (ctypes.c_char_p, []),
    "msopt_select_isa": (ctypes.c_int, [ctypes.c_char_p]),
    "msopt_f32_to_f16": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    "msopt_f16_to_f32": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
}
AOT_ARGTYPES = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_void_p, ctypes.c_void_p]
# What a library reports of its AOT kernels (ops/aot/signatures.h declares them) and of their
# failures: ops/aot/call.cpp, linked into the CPU and the CUDA library alike (_cuda.py).
AOT_REPORT_SIGNATURES = {
    "msopt_aot_signature": (ctypes.c_char_p, [ctypes.c_char_p]),
    "msopt_last_kernel_error": (ctypes.c_char_p, []),
    "msopt_last_kernel_error_time": (ctypes.c_int64, []),
}
_AOT_SIGNATURES = {"msopt_aot_kernels": (ctypes.c_char_p, []), **AOT_REPORT_SIGNATURES}


class NativeLibraryError(RuntimeError):
    """The native kernel library (``libms_optim.so`` in the package) is missing, cannot be
    loaded, or lacks a symbol.

    Raised at the first use of a native kernel (building an optimizer whose path needs
    one, ``native_info()``, ``ms_optim.capi``), never at ``import ms_optim``; the message
    names the file and says to reinstall with ``pip install .`` (which compiles the
    library; it needs g++ with OpenMP).  A subclass of ``RuntimeError``.

    Supported Platforms:
        ``CPU``

    Examples:
        >>> import ms_optim
        >>> try:
        ...     info = ms_optim.native_info()
        ... except ms_optim.NativeLibraryError as err:  # the library was not built
        ...     print(err)
        >>> issubclass(ms_optim.NativeLibraryError, RuntimeError)
        True
    """


def library_path():
    """Absolute path of the native library inside the installed package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


def declare(handle, signatures):
    """Sets restype/argtypes from {name: (restype, argtypes)}; AttributeError if one is missing."""
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes


def open_library(path, signatures, error, missing):
    """``ctypes.CDLL(path)`` with `signatures` declared.  Raises `error` (an exception class)
    with the message `missing` when the file is absent, or naming the file and the reason
    when it cannot be loaded or lacks a symbol."""
    if not os.path.isfile(path):
        raise error(missing)
    try:
        handle = ctypes.CDLL(path)
        declare(handle, signatures)
    except (OSError, AttributeError) as exc:
        raise error(f"ms_optim library {path} cannot be loaded ({exc}); reinstall with "
                    f"'pip install .'.") from exc
    return handle


def lib():
    """The native library loaded with ctypes, signatures declared."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            _lib = open_library(
                path, _SIGNATURES, NativeLibraryError,
                f"ms_optim native library not found: {path}. It is built when the package is "
                f"installed; reinstall with 'pip install .' (needs g++ with OpenMP).")
    return _lib


_declared = set()  # the function names lib_with has declared


def lib_with(signatures, what):
    """lib() with a further table of signatures declared once (for another binding).

    Declared once per function name: callers may pass a fresh table on every call.  A
    missing symbol raises NativeLibraryError naming the file and `what`.
    """
    handle = lib()
    if not _declared.issuperset(signatures):
        with _lock:
            try:
                declare(handle, signatures)
            except AttributeError as exc:
                raise NativeLibraryError(
                    f"ms_optim native library {library_path()} lacks {what} ({exc}); "
                    f"reinstall with 'pip install .'.") from exc
            _declared.update(signatures)
    return handle


def isa():
    """The instruction set the kernels run with: 'avx512', 'avx2' or 'scalar'."""
    return lib().msopt_isa().decode()


def select_isa(name):
    """Force the kernels of one instruction set for this process (for tests and benchmarks)."""
    if lib().msopt_select_isa(name.encode()) != 0:
        raise ValueError(lib().msopt_last_error().decode())


_INFO_SIGNATURES = {
    "msopt_supported_isas": (ctypes.c_char_p, []),
    "msopt_kernel_threads": (ctypes.c_int, []),
    "msopt_build_flags": (ctypes.c_char_p, []),
}


def native_info():
    """What the native kernels run with.

    Returns:
        dict, with the keys

        - ``isa`` (str): the instruction set in use, ``"avx512"``, ``"avx2"`` or
          ``"scalar"`` (the best this CPU supports; the environment variable
          ``MS_OPTIM_ISA`` forces one);
        - ``supported_isas`` (list[str]): those this CPU runs;
        - ``kernel_threads`` (int): OpenMP threads per kernel (``OMP_NUM_THREADS``);
        - ``library`` (str): the path of the loaded library;
        - ``build_flags`` (str): the compiler and flags it was built with (common
          flags, then each instruction set's own).

    Raises:
        NativeLibraryError: If the native library is missing or cannot be loaded.

    Supported Platforms:
        ``CPU``

        The kernels run on the host CPU (x86-64) whatever the device target.

    Examples:
        >>> import ms_optim
        >>> info = ms_optim.native_info()
        >>> sorted(info)
        ['build_flags', 'isa', 'kernel_threads', 'library', 'supported_isas']
        >>> info["isa"] in info["supported_isas"]
        True
    """
    handle = lib_with(_INFO_SIGNATURES, "native_info's symbols")
    return {"isa": isa(),
            "supported_isas": handle.msopt_supported_isas().decode().split(", "),
            "kernel_threads": int(handle.msopt_kernel_threads()),
            "library": library_path(),
            "build_flags": handle.msopt_build_flags().decode()}


def last_error():
    return lib().msopt_last_error().decode()


def aot_kernels():
    """The names of the library's AOT kernel entries (``ms_optim_lamb``, ...)."""
    handle = lib_with(_AOT_SIGNATURES, "the AOT kernel declarations")
    return tuple(handle.msopt_aot_kernels().decode().split())


def aot_signature(entry):
    """The tensors AOT kernel `entry` takes, as the library declares them
    (ops/aot/signatures.h): a string like ``"param:each m:each lr wd -> done"``.
    ValueError for an unknown entry."""
    handle = lib_with(_AOT_SIGNATURES, "the AOT kernel declarations")
    raw = handle.msopt_aot_signature(entry.encode())
    if raw is None:
        raise ValueError(f"unknown native kernel {entry!r}; the library has {aot_kernels()}")
    return raw.decode()


def last_native_error():
    """Why the most recent native kernel call failed.

    A native kernel that rejects its tensors returns an error code, and MindSpore's
    ``RuntimeError`` shows only that code ("Return value from CPU AOT kernel ... is
    -3"); the kernel's own message, naming the kernel, the tensor and what was wrong,
    is kept here (and written to stderr as ``ms_optim: ...``).  The optimizers check
    their arguments and gradients before a kernel sees them, so a message here points
    at a tensor that changed behind the optimizer's back, or at a bug.

    Returns:
        str, the message of the most recent failed kernel call on any thread, of the CPU
        library or, where the optimizers run them, of the CUDA kernels (``docs/gpu.md``);
        ``""`` when none failed.  Its codes are the C library's (``docs/capi.md``), e.g.
        ``MSOPT_ERR_SIZE`` (-3) for a wrong element count.

    Raises:
        NativeLibraryError: If the native library is missing or cannot be loaded.

    Supported Platforms:
        ``CPU``

    Examples:
        >>> import ms_optim
        >>> isinstance(ms_optim.last_native_error(), str)
        True
    """
    from . import _cuda

    libraries = [lib_with(_AOT_SIGNATURES, "msopt_last_kernel_error")]
    if _cuda.loaded():
        libraries.append(_cuda.lib())
    return max((h.msopt_last_kernel_error_time(), h.msopt_last_kernel_error().decode())
               for h in libraries)[1]


def _aot_entry(entry):
    """The ctypes function of AOT kernel `entry`, its signature declared."""
    aot_signature(entry)  # ValueError for an unknown entry
    fn = getattr(lib(), entry)
    fn.restype, fn.argtypes = ctypes.c_int, AOT_ARGTYPES
    return fn


def aot_func(entry):
    """The ``"path:function"`` string MindSpore's AOT Custom op expects, checked to load."""
    aot_signature(entry)  # fails here, naming the file or the entry, if either is wrong
    return f"{library_path()}:{entry}"


def aot_op(entry, out_shape, out_dtype, inputs, outputs, dtype_formats, inplace, device="CPU"):
    """A ``mindspore.ops.Custom`` AOT op running `entry` on the host CPU, or with
    ``device="GPU"`` the CUDA library's entry of that name on the GPU (``_cuda``).

    inputs/outputs: names; dtype_formats: tuples of ``DataType`` per supported
    combination; inplace: the op writes into its Parameter inputs, so MindSpore
    must keep it and order it against other reads (``side_effect_mem``).
    """
    from mindspore import ops
    from mindspore.ops import CustomRegOp

    from . import _cuda

    # MindSpore keeps one registration per name: ops of one entry with
    # different input counts (multi-tensor kernels) or dtypes (the digest of
    # float32 and of float16 parameters) need names of their own.
    formats = zlib.crc32(repr(dtype_formats).encode())
    suffix = "_gpu" if device == "GPU" else ""
    reg = CustomRegOp(f"{entry}_{len(inputs)}_{formats:08x}{suffix}")
    for i, name in enumerate(inputs):
        reg = reg.input(i, name)
    for i, name in enumerate(outputs):
        reg = reg.output(i, name)
    for combo in dtype_formats:
        reg = reg.dtype_format(*combo)
    reg_info = reg.target(device).get_op_info()
    func = _cuda.aot_func(entry) if device == "GPU" else aot_func(entry)
    op = ops.Custom(func, out_shape=out_shape, out_dtype=out_dtype, func_type="aot",
                    reg_info=reg_info)
    if inplace:
        op.add_prim_attr("side_effect_mem", True)
    if device == "CPU":  # pinned to the host whatever the device target
        op.set_device("CPU")
    return op


def aot_runner(entry, fn, buffers, keep, last, stream=None):
    """A callable running the ctypes AOT function `fn` of kernel `entry` on `buffers`
    ((address, shape, dtype name) each: inputs, then outputs) and `stream`, its argument
    arrays built once; `keep`: objects the callable keeps alive; `last()`: the library's
    last error message, for the RuntimeError raised when the kernel returns an error code."""
    n = len(buffers)
    ptrs = (ctypes.c_void_p * n)(*[b[0] for b in buffers])
    ndims = (ctypes.c_int * n)(*[len(b[1]) for b in buffers])
    shape_bufs = [(ctypes.c_int64 * max(len(b[1]), 1))(*b[1]) for b in buffers]
    shapes = (ctypes.POINTER(ctypes.c_int64) * n)(
        *[ctypes.cast(s, ctypes.POINTER(ctypes.c_int64)) for s in shape_bufs])
    dtypes = (ctypes.c_char_p * n)(*[b[2].encode() for b in buffers])
    stream = ctypes.c_void_p(stream)

    def run():
        rc = fn(n, ptrs, ndims, shapes, dtypes, stream, None)
        if rc != 0:
            raise RuntimeError(f"{entry} failed with code {rc}: {last()}")

    run.keep = (keep, shape_bufs)
    return run


def prepare_aot(entry, arrays):
    """A callable that runs AOT kernel `entry` on numpy `arrays` (inputs then outputs,
    C-contiguous, kept alive by the callable) with the argument arrays built once: what
    the kernel costs alone, without MindSpore and without per-call marshalling.  Raises
    RuntimeError with the kernel's message when it returns an error code."""
    import numpy as np

    arrays = list(arrays)
    for a in arrays:
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous):
            raise TypeError("AOT kernels take C-contiguous numpy arrays")
    return aot_runner(entry, _aot_entry(entry),
                      [(a.ctypes.data, a.shape, str(a.dtype)) for a in arrays], arrays,
                      last_error)


def call_aot(entry, arrays):
    """Run an AOT kernel directly on numpy arrays (inputs then outputs), in place.

    Used by tests to check a kernel without MindSpore; raises RuntimeError with
    the kernel's message when it returns an error code.
    """
    prepare_aot(entry, arrays)()
