"""ms_optim: communication- and memory-efficient optimizers for MindSpore."""
from . import clip, regularizer
from .adam_offload import AdamOffload
from .dgc import DGCMomentum
from .lamb import Lamb
from ._native import NativeLibraryError, native_info

__all__ = ["AdamOffload", "DGCMomentum", "Lamb", "clip", "regularizer", "NativeLibraryError",
           "native_info"]
__version__ = "0.1.0"
