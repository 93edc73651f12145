"""ms_optim: communication- and memory-efficient optimizers for MindSpore.

- ``AdamOffload``: Adam (``nn.AdamOffload``'s API) with its moments in host memory,
  stored as float32, bfloat16 or int8, updated by a fused native CPU kernel.
- ``Lion``: Lion (Chen et al., 2023) with its one moment in host memory, stored as float32,
  bfloat16 or int8, updated by a fused native CPU kernel.
- ``Lamb``: PaddlePaddle's Lamb, with a fused native CPU kernel and a MindSpore-ops path.
- ``DGCMomentum``: momentum SGD with Deep Gradient Compression (PaddlePaddle's
  ``DGCMomentumOptimizer``), for data-parallel training.
- ``clip``: ``ClipGradByGlobalNorm``, ``ClipGradByNorm`` and ``ClipGradByValue``, the
  ``grad_clip`` of Lamb (DGCMomentum takes ``ClipGradByNorm``).
- ``regularizer``: ``L1Decay`` and ``L2Decay``, DGCMomentum's ``regularization``.
- ``native_info()``: what the native kernels run with; ``last_native_error()``: why
  the last native kernel call failed; ``NativeLibraryError``: the native library is
  missing or broken.
- ``ms_optim.capi``: the C library for parameter servers, from Python.

Every optimizer subclasses ``mindspore.nn.Optimizer``; see each class's docstring.
"""
from . import clip, regularizer
from .adam_offload import AdamOffload
from .dgc import DGCMomentum
from .lamb import Lamb
from .lion import Lion
from ._native import NativeLibraryError, last_native_error, native_info

__all__ = ["AdamOffload", "DGCMomentum", "Lamb", "Lion", "clip", "regularizer", "NativeLibraryError",
           "last_native_error", "native_info"]
__version__ = "0.1.0"
