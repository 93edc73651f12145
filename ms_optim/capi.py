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
import re

import numpy as np

from ms_optim import _native

_INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops", "include")


def _error_codes():
    """The MSOPT_OK and MSOPT_ERR_* codes as ms_optim.h defines them ({name: value}): the
    header is the one place they are written; the C++ sources include it too."""
    with open(os.path.join(_INCLUDE_DIR, "ms_optim.h")) as f:
        text = f.read()
    return {name: int(value) for name, value in
            re.findall(r"^#define (MSOPT_(?:OK|ERR_[A-Z]+)) \(?(-?\d+)\)?", text, re.M)}


ERROR_CODES = _error_codes()
OK = ERROR_CODES["MSOPT_OK"]
ERR_NULL = ERROR_CODES["MSOPT_ERR_NULL"]
ERR_HANDLE = ERROR_CODES["MSOPT_ERR_HANDLE"]
ERR_SIZE = ERROR_CODES["MSOPT_ERR_SIZE"]
ERR_DTYPE = ERROR_CODES["MSOPT_ERR_DTYPE"]
ERR_CONFIG = ERROR_CODES["MSOPT_ERR_CONFIG"]
ERR_ROW = ERROR_CODES["MSOPT_ERR_ROW"]
ERR_STATE = ERROR_CODES["MSOPT_ERR_STATE"]
ERR_NOMEM = ERROR_CODES["MSOPT_ERR_NOMEM"]
ERR_INTERNAL = ERROR_CODES["MSOPT_ERR_INTERNAL"]
ERR_ARGS = ERROR_CODES["MSOPT_ERR_ARGS"]
ERR_VALUE = ERROR_CODES["MSOPT_ERR_VALUE"]
ERR_REPLICA = ERROR_CODES["MSOPT_ERR_REPLICA"]
ERR_STALE = ERROR_CODES["MSOPT_ERR_STALE"]
ERROR_NAMES = {value: name for name, value in ERROR_CODES.items() if name != "MSOPT_OK"}

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
    return _INCLUDE_DIR


def header_path():
    """Path of ms_optim.h."""
    return os.path.join(include_dir(), "ms_optim.h")


def library_path():
    """The shared library with the C functions (libms_optim.so in the package)."""
    return _native.library_path()


def lib():
    """The native library (``_native.lib()``, which names the file if it is missing or
    broken) with the C library's signatures declared."""
    return _native.lib_with(_SIGNATURES, "the C library")


def last_error():
    """The message of this thread's most recent failed C library call ("" if none)."""
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
        return _c_text("config", config)
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
        # a ',' or '=' would be read as the text's own separators: another key
        for what, text in (("config key", key), (f"config[{key!r}]", value)):
            if not text or any(c in text for c in ",=\0"):
                raise ValueError(f"{what} must be a non-empty str without ',', '=' or NUL, "
                                 f"got {text!r}")
        items.append(f"{key}={value}")
    return ",".join(items)


def _c_text(what, text):
    """`text` for the library, which reads a C string: ValueError if it holds a NUL (the
    library would stop reading there)."""
    if "\0" in text:
        raise ValueError(f"{what} must not contain a NUL character, got {text!r}")
    return text


def _array(a, dtype, what):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy array, got {type(a).__name__}")
    if a.dtype != dtype:
        raise TypeError(f"{what} has dtype {a.dtype}, the parameter is {dtype}")
    return np.ascontiguousarray(a)


def _like_param(a, dtype, shape, what):
    """`a` as _array, of the parameter's shape or flat with as many elements (ValueError)."""
    a = _array(a, dtype, what)
    numel = int(np.prod(shape))
    if a.shape != tuple(shape) and a.shape != (numel,):
        raise ValueError(f"{what} has shape {a.shape}, the parameter {tuple(shape)} (or flat, "
                         f"({numel},))")
    return a


class Optimizer:
    """One handle of the C library for parameter servers: a copy of a parameter and its
    optimizer state.

    The optimizers are PaddlePaddle's parameter-server set, ``"sgd"``, ``"momentum"``,
    ``"adagrad"``, ``"adam"`` and ``"lamb"`` (:data:`OPTIMIZERS`), configured by
    ``"key=value,..."`` text or a dict: ``lr``, ``momentum``, ``nesterov``, ``beta1``,
    ``beta2``, ``eps``, ``weight_decay``, ``l1``, ``l2``, ``lr_policy``, ``lr_decay_a``,
    ``lr_decay_b`` (each optimizer takes the keys it uses; their meaning, defaults and
    ranges are in ``ms_optim.h``, see :func:`include_dir`).  A server holding the
    parameter either steps the optimizer with gradients (:meth:`update`, dense, or
    :meth:`update_rows`, some rows of a matrix) or adds a model difference
    (:meth:`apply_diff`).  :meth:`weights` reads the parameter, :meth:`state` serializes
    everything and :meth:`restore` continues from it bit for bit.  A handle can be used as
    a context manager; :meth:`close` (or leaving the ``with`` block) releases it.

    Args:
        optimizer (str): One of ``"sgd"``, ``"momentum"``, ``"adagrad"``, ``"adam"``,
            ``"lamb"``.
        config (Union[str, dict, None]): ``"key=value,..."``, or a dict such as
            ``{"lr": 0.001, "nesterov": True}`` (see :func:`config_text`).  ``lr`` is
            required for float parameters.
        param (numpy.ndarray): The initial parameter, int32, uint32, int64, uint64,
            float32 or float64 (copied).  Integer parameters take :meth:`apply_diff` only.
        row_width (int, optional): 0 for a flat parameter, or the width of the rows that
            :meth:`update_rows` addresses (it must divide ``param.size``).  Default:
            ``None``, meaning ``param.shape[1]`` for a 2-D `param`, else 0.

    Raises:
        TypeError: If `param` is not a numpy array or its dtype is not one of the six
            above, `optimizer` is not a str, or `config` is neither a str, a dict nor None
            (or a dict key is not a str, or a value not a bool, int, float or str), or
            `row_width` is not an int.
        ValueError: If `optimizer` or `config` holds a NUL character, a dict key or str
            value of `config` is empty or holds ',' or '=', or `row_width` is negative.
        CapiError: If the library rejects the arguments: ``MSOPT_ERR_CONFIG`` for an
            unknown optimizer, an unknown, repeated or unused key, a missing ``lr``, or a
            value out of range; ``MSOPT_ERR_SIZE`` for an empty `param` or a `row_width`
            that does not divide its size.

    Supported Platforms:
        ``CPU``

        A host C library (``libms_optim.so``, ``ms_optim.h``) called through ctypes; it
        uses neither MindSpore nor a device.  Verified on x86-64 CPUs (AVX-512, AVX2 and
        scalar kernels).

    Examples:
        >>> import numpy as np
        >>> from ms_optim import capi
        >>> opt = capi.Optimizer("sgd", {"lr": 0.5}, np.zeros((4, 2), np.float32))
        >>> opt.row_width  # a 2-D parameter: rows of its second dimension
        2
        >>> opt.update_rows([1, 3, 1], np.ones((3, 2), np.float32))  # row 1 twice: summed
        >>> opt.weights()
        array([[ 0. ,  0. ],
               [-1. , -1. ],
               [ 0. ,  0. ],
               [-0.5, -0.5]], dtype=float32)
        >>> opt.step
        1
        >>> blob = opt.state()  # bytes
        >>> with capi.Optimizer.restore(blob) as copy:
        ...     np.array_equal(copy.weights(), opt.weights())
        True
        >>> opt.close()
    """

    def __init__(self, optimizer, config, param, row_width=None, _handle=None):
        """Creates a handle holding a copy of `param` and the state of `optimizer`.

        Args:
            optimizer (str): ``"sgd"``, ``"momentum"``, ``"adagrad"``, ``"adam"`` or
                ``"lamb"``.
            config (Union[str, dict, None]): ``"key=value,..."`` or a dict (see
                :func:`config_text` and ``ms_optim.h``); ``lr`` is required for float
                parameters.
            param (numpy.ndarray): int32, uint32, int64, uint64, float32 or float64;
                copied.
            row_width (int, optional): 0 (flat) or the row width :meth:`update_rows`
                addresses, dividing ``param.size``.  Default: ``None``, meaning
                ``param.shape[1]`` for a 2-D `param`, else 0.
            _handle: Internal: an existing C handle to wrap (used by :meth:`restore`).

        Raises:
            TypeError: If `param` is not a numpy array or its dtype is not one of the six
                above, `optimizer` is not a str, `config` is not a str, a dict of str keys
                to bool/int/float/str values, or None, or `row_width` is not an int.
            ValueError: If `optimizer` or `config` holds a NUL character, a dict key or str
                value of `config` is empty or holds ',' or '=', or `row_width` is negative.
            CapiError: ``MSOPT_ERR_CONFIG`` for an unknown optimizer or a bad config,
                ``MSOPT_ERR_SIZE`` for an empty `param` or a `row_width` that does not
                divide its size.

        Examples:
            >>> import numpy as np
            >>> from ms_optim import capi
            >>> with capi.Optimizer("adam", "lr=0.001,weight_decay=0.01",
            ...                     np.zeros(8, np.float32)) as opt:
            ...     opt.update(np.ones(8, np.float32))
            ...     print(opt.step, opt.weights()[:2])
            1 [-0.001 -0.001]
        """
        self._handle = None
        if _handle is not None:
            self._handle = _handle
            self.optimizer = optimizer
        else:
            if not isinstance(param, np.ndarray):
                raise TypeError(f"param must be a numpy array, got {type(param).__name__} "
                                f"(convert it with numpy.asarray(..., dtype) first)")
            param = np.ascontiguousarray(param)
            if param.dtype not in DTYPES:
                raise TypeError(f"param dtype {param.dtype} is not supported "
                                f"(one of {', '.join(str(d) for d in DTYPES)})")
            if row_width is None:
                row_width = param.shape[-1] if param.ndim == 2 else 0
            if not isinstance(row_width, (int, np.integer)) or isinstance(row_width, bool):
                raise TypeError(f"row_width must be an int, got {type(row_width).__name__} "
                                f"({row_width!r})")
            if not 0 <= row_width < 2**63:
                raise ValueError(f"row_width must be 0 (a flat parameter) or a row width in "
                                 f"[1, 2**63), got {row_width}")
            row_width = int(row_width)
            if not isinstance(optimizer, str):
                raise TypeError(f"optimizer must be a str (one of {', '.join(OPTIMIZERS)}), "
                                f"got {type(optimizer).__name__}")
            _c_text("optimizer", optimizer)
            config = config_text(config)
            out = _P()
            check(lib().msopt_create(optimizer.encode(), config.encode(), DTYPES[param.dtype],
                                     param.ctypes.data, param.size, row_width,
                                     ctypes.byref(out)))
            self._handle = out
            self.optimizer = optimizer
        self._read_info()
        if _handle is not None:
            self.shape = (self.numel // self.row_width, self.row_width) if self.row_width else (
                self.numel,)
        else:
            self.shape = param.shape

    def __repr__(self):
        if self._handle is None:
            return f"capi.Optimizer({self.optimizer!r}, released)"
        return (f"capi.Optimizer({self.optimizer!r}, {self.dtype}, shape={self.shape}, "
                f"row_width={self.row_width}, step={self.step})")

    @classmethod
    def restore(cls, state):
        """A new handle from a blob of :meth:`state` (bytes-like): the same parameter,
        optimizer, configuration, state and step count.  CapiError ``MSOPT_ERR_STATE`` if
        the blob is truncated or corrupted; TypeError if `state` is not bytes-like."""
        try:
            state = bytes(memoryview(state))  # a buffer: bytes, bytearray, array, mmap, ...
        except TypeError:
            raise TypeError(f"state must be bytes-like (what Optimizer.state() returns), got "
                            f"{type(state).__name__}") from None
        buf = ctypes.create_string_buffer(state, max(len(state), 1))
        out = _P()
        check(lib().msopt_restore(ctypes.cast(buf, _P), len(state), ctypes.byref(out)))
        # the optimizer's number is the header's u32 at offset 16 (docs/capi.md)
        algo = int.from_bytes(state[16:20], "little")
        return cls(OPTIMIZERS[algo], None, None, _handle=out)

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
        """The C library's handle; ValueError once :meth:`close` released it."""
        if self._handle is None:
            raise ValueError("the optimizer was released")
        return self._handle

    @property
    def step(self):
        """The number of completed optimizer steps (:meth:`update` / :meth:`update_rows`)."""
        return self._read_info()

    def update(self, grad):
        """On Parameter Server, dense: one optimizer step with `grad`, a numpy array of the
        parameter's dtype (TypeError otherwise) and shape, or flat (ValueError
        otherwise).  Float parameters only (``MSOPT_ERR_DTYPE`` for integer ones)."""
        g = _like_param(grad, self.dtype, self.shape, "grad")
        check(lib().msopt_update(self.handle, DTYPES[self.dtype], g.ctypes.data, g.size))

    def update_rows(self, rows, values):
        """On Parameter Server, sparse: one optimizer step in which only the rows `rows`
        (integer ids, TypeError otherwise) change, with gradients `values` (a numpy array
        of the parameter's dtype holding ``len(rows) x row_width`` elements, ValueError
        otherwise).  Duplicate ids are summed in order; an id out of range is CapiError
        ``MSOPT_ERR_ROW``.  The rows' optimizer state is updated lazily (only the rows
        given); the step count advances for the whole parameter."""
        r = np.asarray(rows)
        if r.size and r.dtype.kind not in "iu":
            raise TypeError(f"rows must be integer ids, got dtype {r.dtype}")
        if r.size and r.dtype.kind == "u" and r.max() > np.iinfo(np.int64).max:
            raise CapiError(ERR_ROW, f"msopt_update_rows: rows[{int(np.argmax(r))}] = "
                                     f"{int(r.max())} is out of range [0, {self.shape[0]})")
        r = np.ascontiguousarray(r, dtype=np.int64).ravel()
        v = _array(values, self.dtype, "values")
        if self.row_width > 0 and (v.size != r.size * self.row_width
                                   or v.ndim > 1 and v.shape != (r.size, self.row_width)):
            raise ValueError(f"values has shape {v.shape}, expected {r.size} rows x "
                             f"{self.row_width}, ({r.size}, {self.row_width}) or flat")
        check(lib().msopt_update_rows(self.handle, DTYPES[self.dtype], r.ctypes.data, r.size,
                                      v.ctypes.data))

    def apply_diff(self, diff):
        """On Client: ``param += diff``, `diff` a numpy array of the parameter's dtype and
        shape, or flat (integers wrap around).  Not an optimizer step."""
        d = _like_param(diff, self.dtype, self.shape, "diff")
        check(lib().msopt_apply_diff(self.handle, DTYPES[self.dtype], d.ctypes.data, d.size))

    def weights(self):
        """A copy of the parameter as a numpy array (flat, or rows x row_width), every row
        up to date."""
        out = np.empty(self.numel, self.dtype)
        check(lib().msopt_get_weights(self.handle, out.ctypes.data, out.size))
        return out.reshape(-1, self.row_width) if self.row_width else out

    def state(self):
        """The serialized parameter and optimizer state (bytes), every row brought up to
        date first; :meth:`restore` continues from it."""
        ptr, n = _P(), _I64()
        check(lib().msopt_get_state(self.handle, ctypes.byref(ptr), ctypes.byref(n)))
        try:
            return ctypes.string_at(ptr, n.value)
        finally:
            lib().msopt_free(ptr)

    def close(self):
        """Releases the handle (a second call does nothing); the other methods raise
        ValueError afterwards."""
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
