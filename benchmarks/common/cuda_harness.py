"""The CUDA kernels run from numpy arrays and PyTorch tensors, without MindSpore: the GPU
tests (tests/gpu) and benchmarks.cuda_kernels.

A GPU machine may have PyTorch and no MindSpore: the framework-free modules of ms_optim
(``reference``, ``_native``, ``_cuda``, ``_slots``) are then imported from the source tree
without the package's ``__init__`` (which imports MindSpore).  Device arrays are PyTorch
tensors; the kernels read them through ``__cuda_array_interface__``.
"""
import importlib.machinery
import importlib.util
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _framework_free_package():
    try:
        import mindspore  # noqa: F401  (the package imports normally)
    except ImportError:
        if "ms_optim" not in sys.modules:
            spec = importlib.machinery.ModuleSpec("ms_optim", None, is_package=True)
            module = importlib.util.module_from_spec(spec)
            module.__path__ = [str(ROOT / "ms_optim")]
            sys.modules["ms_optim"] = module


_framework_free_package()
from ms_optim import _cuda, _native, _slots, reference  # noqa: E402

__all__ = ["consts", "cpu", "gpu", "to_device", "reference", "cuda_library"]
cuda_library = _cuda
# a kernel's constants by name, in the library's order (ops/core/contract.h)
consts = _native.consts_values


def _map(fn, named):
    return {k: [fn(x) for x in v] if isinstance(v, list) else fn(v) for k, v in named.items()}


def to_device(named):
    """PyTorch device copies of the numpy arrays `named` (by slot name; a slot may hold a
    list of arrays)."""
    import torch

    return _map(lambda a: torch.from_numpy(np.ascontiguousarray(a).copy()).cuda(), named)


def gpu(entry, **named):
    """Runs CUDA entry `entry` on copies of the numpy arrays `named` (by slot name) on the
    current PyTorch stream, waits, raises on a device-side failure; returns every slot's
    arrays after the call."""
    import torch

    dev = to_device(named)
    stream = torch.cuda.current_stream().cuda_stream
    _cuda.call(entry, stream, **dev)
    _cuda.status(stream)
    return _map(lambda t: t.cpu().numpy(), dev)


def cpu(entry, **named):
    """The CPU library's kernel `entry` on copies of `named`; every slot's arrays after."""
    arrays = _map(lambda a: np.ascontiguousarray(a).copy(), named)
    slots = _slots.parse(_native.aot_signature(entry))
    _native.call_aot(entry, _slots.flat_arrays(entry, slots, arrays))
    return arrays
