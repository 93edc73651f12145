"""DGCMomentum: Deep Gradient Compression (Lin et al., ICLR 2018) for MindSpore."""
from .optimizer import DGCMomentum

__all__ = ["DGCMomentum"]
