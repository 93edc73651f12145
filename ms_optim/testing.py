"""Helpers for tests and benchmarks that reach the native kernels directly; not needed to train.

The optimizers run their native kernels as MindSpore AOT Custom ops.  The
helpers here run the same kernel entries on numpy arrays through ctypes,
without MindSpore (to check a kernel against a reference, or to time it
alone), and expose the few pieces of an optimizer's step that a benchmark
times on their own:

- ``call_kernel(entry, arrays)``: runs one kernel entry once, in place;
- ``prepare_kernel(entry, arrays)``: a callable running it with its ctypes
  arguments built once (what the kernel costs alone);
- ``select_isa(name)``: forces the kernels of one instruction set;
- ``override_kernel(entry, func)``: Custom ops built inside the ``with`` call
  another AOT function in place of `entry` (a timing shim, for instance);
- ``advance_beta_powers(opt)``: the beta powers step of the Adam-family
  optimizers, for a cell that times it.

The kernel entries are those of ``KERNELS``.  The arrays are numpy arrays,
C-contiguous, the kernel's inputs then its outputs, in the order and of the
shapes and dtypes the kernel's op takes (ms_optim/kernels.py builds those ops);
the kernel writes its outputs, and its in-place inputs, into them.
"""
import contextlib

from . import _native

__all__ = ["KERNELS", "advance_beta_powers", "call_kernel", "override_kernel",
           "prepare_kernel", "select_isa"]

KERNELS = _native.AOT_KERNELS
"""The names of the native kernel entries that ``call_kernel`` and ``prepare_kernel`` run."""


def call_kernel(entry, arrays):
    """Runs native kernel `entry` once on numpy `arrays` (inputs then outputs), in place.

    The arrays are checked first (C-contiguous numpy arrays, else TypeError).  Raises
    RuntimeError with the kernel's message when the kernel returns an error code (a shape,
    dtype or argument count it does not take), and NativeLibraryError when the library is
    missing or broken.
    """
    _native.call_aot(entry, arrays)


def prepare_kernel(entry, arrays):
    """A zero-argument callable running native kernel `entry` on numpy `arrays`, for timing.

    The ctypes arguments are built once, here, and the callable keeps the arrays alive, so
    a call costs the kernel alone, without MindSpore and without per-call marshalling.  The
    arrays are checked as by ``call_kernel`` (TypeError here); a call raises RuntimeError
    with the kernel's message when the kernel returns an error code.
    """
    return _native.prepare_aot(entry, arrays)


def select_isa(name):
    """Forces the kernels of instruction set `name` ('avx512', 'avx2' or 'scalar') for this
    process; ValueError when this CPU or build lacks it.  ``ms_optim.native_info()['isa']``
    tells which one runs."""
    _native.select_isa(name)


@contextlib.contextmanager
def override_kernel(entry, func):
    """Within the ``with`` block, Custom ops built for native kernel `entry` call `func`
    instead: ``"path/to/lib.so:function"``, an AOT function with the kernel's signature
    (a shim that times the kernel and calls it, for instance).  Ops built before or after
    the block, and other entries, are not affected."""
    if entry not in KERNELS:
        raise ValueError(f"unknown native kernel {entry!r}")
    real = _native.aot_func
    _native.aot_func = lambda name: func if name == entry else real(name)
    try:
        yield
    finally:
        _native.aot_func = real


def advance_beta_powers(opt):
    """beta1^t and beta2^t for this step of Adam-family optimizer `opt` (AdamOffload, Lamb),
    stored for the next step, as its step computes them: callable inside a cell's
    ``construct``, to time that part of the step alone."""
    return opt._advance_beta_powers()
