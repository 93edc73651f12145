"""DGCMomentum: Deep Gradient Compression (Lin et al., ICLR 2018) for MindSpore.

- ``optimizer``: ``DGCMomentum``: its arguments, state and ``construct``;
- ``reports``: what it reports of itself (``compressed_params``, ``stage``,
  ``exchange_stats``);
- ``checks``: what the constructor checks (``validate``), and the recursion limit;
- ``grads``: the maps over a worker's gradients before the exchange;
- ``schedule``: ``DGCPlan``, which parameters are compressed, their k per warm-up stage
  and the stage of a step, plain Python (the numpy reference writes its own);
- ``plan``: the step's op-level plans, refined from ``DGCPlan``;
- ``steps`` and ``bucket``: the step's Cells (``bucket``: the small parameters' bucket),
  where every native DGC kernel is built and called;
- ``exchange``: what crosses the workers;
- ``wire``: the bytes on the wire and ``exchange_stats``' arithmetic, plain Python;
- ``checkpoints``: ``resize_checkpoints``, one step's per-worker checkpoints converted
  for another number of workers;
- ``density``: ``choose_sparsity``, the densest sparsity whose exchange fits a share of
  the step on a given link;
- ``auto``: ``sparsity="auto"``, the run's own steps timed and the sparsity chosen from
  them, or dense.
"""
from .checkpoints import resize_checkpoints
from .density import choose_sparsity
from .optimizer import DGCMomentum

__all__ = ["DGCMomentum", "choose_sparsity", "resize_checkpoints"]
