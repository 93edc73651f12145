"""The one loader of ms_optim's native libraries (the CPU library, the CUDA library; the
C library is the CPU one), and what every library reports of its AOT kernels.

A ``Library`` is loaded with ctypes at first use, never at import, with a table of
function signatures declared; a missing file, one that cannot load or one that lacks a
symbol raises the library's own exception class, naming the file and saying to
reinstall.  Further tables are declared once each (``with_signatures``).  Neither
MindSpore nor numpy is imported here, and nothing of ms_optim.
"""
import ctypes
import os
import threading

# Every library's AOT entries take MindSpore's AOT arguments.
AOT_ARGTYPES = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_char_p),
                ctypes.c_void_p, ctypes.c_void_p]
# What a library reports of its failures and of its AOT kernels (ops/core/contract.h
# declares them): ops/core/errors.cpp and ops/aot/call.cpp, linked into the CPU and the CUDA
# library alike.
REPORT_SIGNATURES = {
    "msopt_last_error": (ctypes.c_char_p, []),
    "msopt_aot_signature": (ctypes.c_char_p, [ctypes.c_char_p]),
    "msopt_last_kernel_error": (ctypes.c_char_p, []),
    "msopt_last_kernel_error_time": (ctypes.c_int64, []),
    "msopt_last_kernel_error_code": (ctypes.c_int, []),
}


def package_file(name):
    """Absolute path of file `name` inside the installed package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def declare(handle, signatures):
    """Sets restype/argtypes from {name: (restype, argtypes)}; AttributeError if one is missing."""
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes


class Library:
    """A native library of the package, loaded once on first use.

    path: a callable returning its path (read at load time); signatures: what is declared
    when it loads; error: the exception class raised when it cannot be used; missing: the
    message when the file is absent.
    """

    def __init__(self, path, signatures, error, missing):
        self.path = path
        self.signatures = dict(signatures)
        self.error = error
        self.missing = missing
        self.handle = None
        self.declared = set()
        self._lock = threading.Lock()

    def get(self):
        """The loaded ctypes handle."""
        if self.handle is not None:
            return self.handle
        with self._lock:
            if self.handle is None:
                path = self.path()
                if not os.path.isfile(path):
                    raise self.error(self.missing.format(path=path))
                try:
                    handle = ctypes.CDLL(path)
                    declare(handle, self.signatures)
                except (OSError, AttributeError) as exc:
                    raise self.error(f"ms_optim library {path} cannot be loaded ({exc}); "
                                     f"reinstall with 'pip install .'.") from exc
                self.declared = set(self.signatures)
                self.handle = handle
        return self.handle

    def with_signatures(self, signatures, what):
        """The handle with a further table of signatures declared, once per function name
        (callers may pass a fresh table on every call); a missing symbol raises the
        library's error naming the file and `what`."""
        handle = self.get()
        if not self.declared.issuperset(signatures):
            with self._lock:
                try:
                    declare(handle, signatures)
                except AttributeError as exc:
                    raise self.error(f"ms_optim library {self.path()} lacks {what} ({exc}); "
                                     f"reinstall with 'pip install .'.") from exc
                self.declared.update(signatures)
        return handle

    def loaded(self):
        """True when this process has loaded the library."""
        return self.handle is not None


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


def aot_function(handle, entry):
    """The ctypes function of AOT entry `entry` of `handle`, its signature declared."""
    fn = getattr(handle, entry)
    fn.restype, fn.argtypes = ctypes.c_int, AOT_ARGTYPES
    return fn
