"""Python binding of the C library for parameter servers (``ms_optim.h``).

The functions live in the package's native library (the same file as the
kernels, built by ``pip install``); this module declares their signatures
(``_SIGNATURES``) on the ctypes handle of ``_native.lib()``, and wraps a
handle in :class:`Optimizer`.  It is also how other languages find the library:

    include_dir()   directory holding ms_optim.h   (-I)
    library_path()  the shared library              (-L its directory, -lms_optim)

Example::

    import numpy as np
    from ms_optim import capi
    opt = capi.Optimizer("adam", "lr=0.001,weight_decay=0.01", np.zeros((100, 8), np.float32),
                         row_width=8)
    opt.update_rows([3, 17, 3], np.ones((3, 8), np.float32))
    weights = opt.weights()
    blob = opt.state()            # bytes; capi.Optimizer.restore(blob) continues bit for bit

Errors raise :class:`CapiError` with the library's code and message.
"""
import ctypes
import os

import numpy as np

from ms_optim import _native

OK = 0
ERR_NULL = -1
ERR_HANDLE = -2
ERR_SIZE = -3
ERR_DTYPE = -4
ERR_CONFIG = -5
ERR_ROW = -6
ERR_STATE = -7
ERR_NOMEM = -8
ERR_INTERNAL = -9
ERROR_NAMES = {ERR_NULL: "MSOPT_ERR_NULL", ERR_HANDLE: "MSOPT_ERR_HANDLE",
               ERR_SIZE: "MSOPT_ERR_SIZE", ERR_DTYPE: "MSOPT_ERR_DTYPE",
               ERR_CONFIG: "MSOPT_ERR_CONFIG", ERR_ROW: "MSOPT_ERR_ROW",
               ERR_STATE: "MSOPT_ERR_STATE", ERR_NOMEM: "MSOPT_ERR_NOMEM",
               ERR_INTERNAL: "MSOPT_ERR_INTERNAL"}

# msopt_dtype values (PaddlePaddle's element types)
INT32, UINT32, INT64, UINT64, FLOAT32, FLOAT64 = range(6)
DTYPES = {np.dtype(np.int32): INT32, np.dtype(np.uint32): UINT32, np.dtype(np.int64): INT64,
          np.dtype(np.uint64): UINT64, np.dtype(np.float32): FLOAT32,
          np.dtype(np.float64): FLOAT64}
NUMPY_DTYPES = {v: k for k, v in DTYPES.items()}

OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "lamb")

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int
_SIGNATURES = {
    "msopt_create": (_INT, [ctypes.c_char_p, ctypes.c_char_p, _INT, _P, _I64, _I64,
                            ctypes.POINTER(_P)]),
    "msopt_restore": (_INT, [_P, _I64, ctypes.POINTER(_P)]),
    "msopt_update": (_INT, [_P, _INT, _P, _I64]),
    "msopt_update_rows": (_INT, [_P, _INT, _P, _I64, _P]),
    "msopt_apply_diff": (_INT, [_P, _INT, _P, _I64]),
    "msopt_get_weights": (_INT, [_P, _P, _I64]),
    "msopt_get_state": (_INT, [_P, ctypes.POINTER(_P), ctypes.POINTER(_I64)]),
    "msopt_info": (_INT, [_P, ctypes.POINTER(_INT), ctypes.POINTER(_I64), ctypes.POINTER(_I64),
                          ctypes.POINTER(_I64)]),
    "msopt_free": (None, [_P]),
    "msopt_release": (_INT, [_P]),
    "msopt_last_error": (ctypes.c_char_p, []),
    "msopt_ps_isa": (ctypes.c_char_p, []),
}

class CapiError(RuntimeError):
    """A C library call failed: ``code`` is the MSOPT_ERR_* value, ``message`` its text."""

    def __init__(self, code, message):
        self.code = code
        self.message = message
        super().__init__(f"{ERROR_NAMES.get(code, code)}: {message}")


def include_dir():
    """Directory holding ms_optim.h (pass it to the C compiler as -I)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops", "include")


def header_path():
    return os.path.join(include_dir(), "ms_optim.h")


def library_path():
    """The shared library with the C functions (libms_optim.so in the package)."""
    return _native.library_path()


def lib():
    """The native library (``_native.lib()``, which names the file if it is missing or
    broken) with the C library's signatures declared."""
    return _native.lib_with(_SIGNATURES, "the C library")


def last_error():
    return lib().msopt_last_error().decode()


def check(rc):
    """Raise CapiError for a negative return code (message from msopt_last_error)."""
    if rc != OK:
        raise CapiError(rc, last_error())
    return rc


def kernel_isa():
    """The instruction set the C library's kernels run with (follows _native.select_isa)."""
    return lib().msopt_ps_isa().decode()


def config_text(config):
    """The library's ``"key=value,..."`` text of a config given as text or as a dict.

    A dict maps key names (str) to bool (written true/false), int, float or str
    values; None or {} is the empty config.  Anything else raises TypeError
    naming the argument.
    """
    if config is None:
        return ""
    if isinstance(config, str):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"config must be a str or a dict, got {type(config).__name__}")
    items = []
    for key, value in config.items():
        if not isinstance(key, str):
            raise TypeError(f"config keys must be str, got {type(key).__name__} ({key!r})")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (int, float, np.integer, np.floating)):
            value = repr(value.item() if isinstance(value, np.generic) else value)
        elif not isinstance(value, str):
            raise TypeError(f"config[{key!r}] must be a bool, int, float or str, "
                            f"got {type(value).__name__}")
        items.append(f"{key}={value}")
    return ",".join(items)


def _array(a, dtype, what):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"{what} has dtype {a.dtype}, the parameter is {dtype}")
    return np.ascontiguousarray(a)


class Optimizer:
    """One handle of the C library: a parameter copy and its optimizer state.

    optimizer: one of OPTIMIZERS; config: ``"key=value,..."`` (ms_optim.h) or a
    dict such as ``{"lr": 0.001, "nesterov": True}`` (see :func:`config_text`);
    param: numpy array of int32/uint32/int64/uint64/float32/float64, copied;
    row_width: 0 for a flat parameter, or the width of the rows that
    :meth:`update_rows` addresses (a 2-D param's second dimension by default).
    """

    def __init__(self, optimizer, config, param, row_width=None, _handle=None):
        self._handle = None
        if _handle is not None:
            self._handle = _handle
        else:
            param = np.ascontiguousarray(param)
            if param.dtype not in DTYPES:
                raise TypeError(f"param dtype {param.dtype} is not supported "
                                f"(one of {', '.join(str(d) for d in DTYPES)})")
            if row_width is None:
                row_width = param.shape[-1] if param.ndim == 2 else 0
            if not isinstance(optimizer, str):
                raise TypeError(f"optimizer must be a str (one of {', '.join(OPTIMIZERS)}), "
                                f"got {type(optimizer).__name__}")
            config = config_text(config)
            out = _P()
            check(lib().msopt_create(optimizer.encode(), config.encode(), DTYPES[param.dtype],
                                     param.ctypes.data, param.size, row_width,
                                     ctypes.byref(out)))
            self._handle = out
        self._read_info()

    @classmethod
    def restore(cls, state):
        """A new handle from a blob of :meth:`state`."""
        state = bytes(state)
        buf = ctypes.create_string_buffer(state, max(len(state), 1))
        out = _P()
        check(lib().msopt_restore(ctypes.cast(buf, _P), len(state), ctypes.byref(out)))
        return cls(None, None, None, _handle=out)

    def _read_info(self):
        d, n, w, s = _INT(), _I64(), _I64(), _I64()
        check(lib().msopt_info(self.handle, ctypes.byref(d), ctypes.byref(n), ctypes.byref(w),
                               ctypes.byref(s)))
        self.dtype = NUMPY_DTYPES[d.value]
        self.numel = n.value
        self.row_width = w.value
        return s.value

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("the optimizer was released")
        return self._handle

    @property
    def step(self):
        return self._read_info()

    def update(self, grad):
        """On Parameter Server, dense: one step with a gradient of the parameter's size and dtype."""
        g = _array(grad, self.dtype, "grad")
        check(lib().msopt_update(self.handle, DTYPES[self.dtype], g.ctypes.data, g.size))

    def update_rows(self, rows, values):
        """On Parameter Server, sparse: rows (int64 ids) with values (len(rows) x row_width)."""
        r = np.asarray(rows)
        if r.size and r.dtype.kind not in "iu":
            raise TypeError(f"rows must be integer ids, got dtype {r.dtype}")
        r = np.ascontiguousarray(r, dtype=np.int64).ravel()
        v = _array(values, self.dtype, "values")
        if self.row_width > 0 and v.size != r.size * self.row_width:
            raise ValueError(f"values has {v.size} elements, expected {r.size} rows x "
                             f"{self.row_width}")
        check(lib().msopt_update_rows(self.handle, DTYPES[self.dtype], r.ctypes.data, r.size,
                                      v.ctypes.data))

    def apply_diff(self, diff):
        """On Client: param += diff (integers wrap around)."""
        d = _array(diff, self.dtype, "diff")
        check(lib().msopt_apply_diff(self.handle, DTYPES[self.dtype], d.ctypes.data, d.size))

    def weights(self):
        """A copy of the parameter (flat, or rows x row_width), every row up to date."""
        out = np.empty(self.numel, self.dtype)
        check(lib().msopt_get_weights(self.handle, out.ctypes.data, out.size))
        return out.reshape(-1, self.row_width) if self.row_width else out

    def state(self):
        """The serialized state (bytes), every row up to date first."""
        ptr, n = _P(), _I64()
        check(lib().msopt_get_state(self.handle, ctypes.byref(ptr), ctypes.byref(n)))
        try:
            return ctypes.string_at(ptr, n.value)
        finally:
            lib().msopt_free(ptr)

    def close(self):
        if self._handle is not None:
            handle, self._handle = self._handle, None
            check(lib().msopt_release(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._handle is not None:
                lib().msopt_release(self._handle)
        except Exception:  # interpreter shutdown: nothing to report to
            pass
