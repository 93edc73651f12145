"""The Python face of the native library (ms_optim/libms_optim.so), without MindSpore.

``lib()`` loads it through the package's one loader (``_loader``), its signatures
declared once in ``_SIGNATURES``; ``aot_func`` names an AOT kernel entry for a
MindSpore Custom op (``ms_optim.aot`` builds them), ``prepare_aot`` and ``call_aot``
run one on numpy arrays, and ``native_info``, ``last_native_error`` and
``select_isa`` report on and steer the kernels.

Nothing is loaded at import: a missing or broken library raises
``NativeLibraryError`` naming the file at first use.
"""
import ctypes
import os

from . import _cuda, _loader

_LIB_NAME = "libms_optim.so"

# name: (restype, argtypes)
_SIGNATURES = {
    **_loader.REPORT_SIGNATURES,
    "msopt_isa": (ctypes.c_char_p, []),
    "msopt_select_isa": (ctypes.c_int, [ctypes.c_char_p]),
    "msopt_f32_to_f16": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    "msopt_f16_to_f32": (None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    "msopt_aot_kernels": (ctypes.c_char_p, []),
    "msopt_consts_layout": (ctypes.c_char_p, [ctypes.c_char_p]),
    "msopt_consts_layouts": (ctypes.c_char_p, []),
}


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
    return _loader.package_file(_LIB_NAME)


_LIBRARY = _loader.Library(
    lambda: library_path(), _SIGNATURES, NativeLibraryError,
    "ms_optim native library not found: {path}. It is built when the package is installed; "
    "reinstall with 'pip install .' (needs g++ with OpenMP).")


def lib():
    """The native library loaded with ctypes, signatures declared."""
    return _LIBRARY.get()


def lib_with(signatures, what):
    """lib() with a further table of signatures declared once per function name (callers
    may pass a fresh table on every call); a missing symbol raises NativeLibraryError
    naming the file and `what`."""
    return _LIBRARY.with_signatures(signatures, what)


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
    return tuple(lib().msopt_aot_kernels().decode().split())


def aot_signature(entry):
    """The tensors AOT kernel `entry` takes, as the library declares them
    (ops/core/contract.h): a string like ``"param:each m:each lr wd -> done"``.
    ValueError for an unknown entry."""
    raw = lib().msopt_aot_signature(entry.encode())
    if raw is None:
        raise ValueError(f"unknown native kernel {entry!r}; the library has {aot_kernels()}")
    return raw.decode()


def consts_layout(kernel):
    """The field names of `kernel`'s constants (a name of MSOPT_CONSTS_LAYOUTS, e.g.
    "lamb"), in the order ops/core/contract.h declares them, as the library reports them;
    ValueError for an unknown kernel."""
    raw = lib().msopt_consts_layout(kernel.encode())
    if raw is None:
        raise ValueError(f"no constants layout named {kernel!r}")
    return tuple(raw.decode().split())


def consts_values(kernel, **values):
    """`kernel`'s constants as a float32 numpy array, its fields given by name (bools as
    0/1); ValueError naming the missing and unknown fields."""
    import numpy as np

    names = consts_layout(kernel)
    missing = [n for n in names if n not in values]
    unknown = [n for n in values if n not in names]
    if missing or unknown:
        raise ValueError(f"constants of kernel '{kernel}': missing {missing}, unknown {unknown}; "
                         f"its fields are {names}")
    return np.array([float(values[n]) for n in names], np.float32)


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
    return last_kernel_failure()[1]


def last_kernel_failure():
    """(code, message) of the most recent failed native kernel call on any thread, of the
    CPU library or of the CUDA kernels where they run; (0, "") when none failed."""
    libraries = [lib()]
    if _cuda.loaded():
        libraries.append(_cuda.lib())
    return max((h.msopt_last_kernel_error_time(), h.msopt_last_kernel_error_code(),
                h.msopt_last_kernel_error().decode()) for h in libraries)[1:]


# prepare_aot's kernels when not this package's library: another build of it, loaded by
# testing.kernels_from (a _loader.Library), or None
_ENTRY_LIBRARY = None


def other_build(path):
    """Another build of the native library at `path`, loaded beside this one (its own
    handle, its own symbols) to time the same kernels of two builds in one process:
    NativeLibraryError when it is missing or does not load; ValueError when it is this
    package's own file (the loader would hand back this build) or lays out a kernel's
    constants otherwise (the constants arrays are built by this build's layouts)."""
    path = os.path.abspath(path)
    if os.path.isfile(path) and os.path.samefile(path, library_path()):
        raise ValueError(f"{path} is this package's own native library; copy the other "
                         "build elsewhere")
    # what an earlier build has too (msopt_consts_layouts may be newer than it)
    reads = {k: _SIGNATURES[k]
             for k in ("msopt_consts_layout", "msopt_aot_signature", "msopt_last_error")}
    other = _loader.Library(lambda: path, reads, NativeLibraryError,
                            "no native library at {path} to compare with this one.")
    handle = other.get()
    for name in lib().msopt_consts_layouts().decode().split():
        mine, raw = consts_layout(name), handle.msopt_consts_layout(name.encode())
        theirs = None if raw is None else tuple(raw.decode().split())
        if theirs != mine:
            raise ValueError(f"the library at {path} lays out the constants of {name!r} as "
                             f"{theirs}, this one as {mine}")
    return other


def _aot_entry(entry):
    """The ctypes function of AOT kernel `entry`, its signature declared, and the last
    error message of its library: this package's, or the build testing.kernels_from
    names, which must declare `entry` alike."""
    declared = aot_signature(entry)  # ValueError for an unknown entry
    if _ENTRY_LIBRARY is None:
        return _loader.aot_function(lib(), entry), last_error
    other = _ENTRY_LIBRARY.get()
    raw = other.msopt_aot_signature(entry.encode())
    theirs = None if raw is None else raw.decode()
    if theirs != declared:
        raise ValueError(f"the library at {_ENTRY_LIBRARY.path()} declares {entry!r} as "
                         f"{theirs!r}, this one as {declared!r}")
    return (_loader.aot_function(other, entry),
            lambda: other.msopt_last_error().decode())


def aot_func(entry):
    """The ``"path:function"`` string MindSpore's AOT Custom op expects, checked to load."""
    aot_signature(entry)  # fails here, naming the file or the entry, if either is wrong
    return f"{library_path()}:{entry}"


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
    fn, last = _aot_entry(entry)
    return _loader.aot_runner(entry, fn, [(a.ctypes.data, a.shape, str(a.dtype)) for a in arrays],
                              arrays, last)


def call_aot(entry, arrays):
    """Run an AOT kernel directly on numpy arrays (inputs then outputs), in place.

    Used by tests to check a kernel without MindSpore; raises RuntimeError with
    the kernel's message when it returns an error code.
    """
    prepare_aot(entry, arrays)()
