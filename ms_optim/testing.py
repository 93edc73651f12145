"""Helpers for tests and benchmarks that reach the native kernels directly; not needed to train.

The optimizers run their native kernels as MindSpore AOT Custom ops.  The
helpers here run the same kernel entries on numpy arrays through ctypes,
without MindSpore (to check a kernel against a reference, or to time it
alone), and expose the few pieces of an optimizer's step that a benchmark
times on their own:

- ``call_kernel(entry, **tensors)``: runs one kernel entry once, in place;
- ``prepare_kernel(entry, **tensors)``: a callable running it with its ctypes
  arguments built once (what the kernel costs alone);
- ``kernel_signature(entry)``: the tensors it takes, by name;
- ``select_isa(name)``: forces the kernels of one instruction set;
- ``override_kernel(entry, func)``: Custom ops built inside the ``with`` call
  another AOT function in place of `entry` (a timing shim, for instance);
- ``kernels_from(path)``: inside the ``with``, ``prepare_kernel`` and
  ``call_kernel`` run another build's kernels (two builds timed side by side);
- ``advance_beta_powers(opt)``: the beta powers step of the Adam-family
  optimizers, for a cell that times it.

The kernel entries are those of ``kernel_names()``.  Their tensors are given by
slot name, as the library declares them (``kernel_signature``): numpy arrays,
C-contiguous, a list of arrays for a slot of one tensor per parameter, of the
shapes and dtypes the kernel's op takes (ms_optim/aot.py builds those ops);
the kernel writes its outputs, and its in-place inputs, into them.  A test of
argument checking may instead pass the flat list itself (``arrays=``).
"""
import contextlib

from . import _native, aot

__all__ = ["advance_beta_powers", "call_kernel", "kernel_names", "kernel_signature",
           "kernels_from", "override_kernel", "prepare_kernel", "select_isa"]


def kernel_names():
    """The names of the native kernel entries that ``call_kernel`` and ``prepare_kernel``
    run."""
    return _native.aot_kernels()


def kernel_signature(entry):
    """The slots of native kernel `entry` in call order: ``(name, arity, output)`` tuples,
    arity ``"one"``, ``"each"`` (one tensor per parameter), ``"count"`` (one tensor of one
    element per parameter) or ``"rest"``."""
    return aot.signature(entry)


def _arrays(entry, arrays, tensors):
    if (arrays is None) == (not tensors):
        raise TypeError("give the kernel's tensors by slot name, or the flat list as arrays=")
    return arrays if arrays is not None else aot.arrange_arrays(entry, **tensors)


def call_kernel(entry, arrays=None, **tensors):
    """Runs native kernel `entry` once on numpy arrays given by slot name, in place.

    The arrays are checked first: ValueError for a missing or unknown slot, TypeError for
    an array that is not a C-contiguous numpy array.  Raises RuntimeError with the kernel's
    message when the kernel returns an error code (a shape, dtype or argument count it does
    not take), and NativeLibraryError when the library is missing or broken.
    """
    _native.call_aot(entry, _arrays(entry, arrays, tensors))


def prepare_kernel(entry, arrays=None, **tensors):
    """A zero-argument callable running native kernel `entry` on numpy arrays given by slot
    name, for timing.

    The ctypes arguments are built once, here, and the callable keeps the arrays alive, so
    a call costs the kernel alone, without MindSpore and without per-call marshalling.  The
    arrays are checked as by ``call_kernel`` (ValueError or TypeError here); a call raises
    RuntimeError with the kernel's message when the kernel returns an error code.
    """
    return _native.prepare_aot(entry, _arrays(entry, arrays, tensors))


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
    if entry not in kernel_names():
        raise ValueError(f"unknown native kernel {entry!r}")
    real = _native.aot_func
    _native.aot_func = lambda name: func if name == entry else real(name)
    try:
        yield
    finally:
        _native.aot_func = real


@contextlib.contextmanager
def kernels_from(path):
    """Within the ``with`` block, ``prepare_kernel`` and ``call_kernel`` run the kernels of
    the library at `path`, another build of ms_optim's native library loaded beside this
    one (a copy of it made elsewhere), so that two builds of a kernel can be timed in one
    process, their calls alternating.  A callable prepared inside keeps that build's
    kernel.  That build runs the instruction set it picks itself (``MS_OPTIM_ISA`` in the
    environment reaches both; ``select_isa`` reaches this one only).

    Raises NativeLibraryError when `path` is missing or does not load, and ValueError when
    it is this package's own library, lays out a kernel's constants otherwise, or declares
    the tensors of a kernel it is asked to run otherwise."""
    other = _native.other_build(path)
    saved = _native._ENTRY_LIBRARY
    _native._ENTRY_LIBRARY = other
    try:
        yield
    finally:
        _native._ENTRY_LIBRARY = saved


def advance_beta_powers(opt):
    """beta1^t and beta2^t for this step of Adam-family optimizer `opt` (AdamOffload, Lamb),
    stored for the next step, as its step computes them: callable inside a cell's
    ``construct``, to time that part of the step alone."""
    return opt._advance_beta_powers()
