"""What every ms_optim optimizer's step shares: the names of its implementations, the one
order of gradient preprocessing, and the graph-side helpers (``GraphHelpers``).

One vocabulary of implementations, resolved in one place:

- ``"native"``: the fused native kernels update the parameters in place: on
  the host CPU (the choice on a CPU device target), or, for the optimizers
  that have CUDA kernels (Lamb, DGCMomentum), on a GPU device target in the
  GPU's memory (``kernel_device``), where the CUDA library is built;
- ``"delta"``: AdamOffload on GPU/Ascend: the host kernel updates the moments
  and returns the step; the device only adds it (the moments never occupy
  device memory);
- ``"ops"``: the same rule from plain MindSpore ops, run wherever the
  parameters are (Lamb and DGCMomentum on GPU/Ascend);
- ``"auto"``: ``"native"`` on a CPU device target, and on a GPU device target
  for the optimizers with CUDA kernels; else the optimizer's device choice.

Where the CUDA library was not built (no nvcc at install), ``"native"`` on a
GPU device target falls back to the device choice, with one logged warning.

One order of gradient preprocessing, for every optimizer and path: the loss
scale is divided out first, then the gradient is clipped (Lamb's
``grad_clip``, DGC's local clip), then weight decay applies (coupled into the
gradient for AdamOffload and DGC, decoupled in Lamb's direction).  A native
kernel that fuses these steps keeps that order inside its loop, with
MindSpore's one exception: AdamOffload matches ``nn.AdamOffload``, which adds
the decay to the still-scaled gradient with a weight decay premultiplied by
the loss scale (the same value up to rounding).

Per-parameter values (learning rate and weight decay with parameter groups)
reach a multi-tensor op as one tensor per bucket (``bucket_values``), and a rule mapped
over the parameters (Lamb's ops path) as one tensor per parameter (``per_param_values``).
"""
import logging

import numpy as np
from mindspore import context, ops
from mindspore.ops import constexpr
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from . import _checks, _cuda

logger = logging.getLogger("ms_optim")

_scale = C.MultitypeFuncGraph("ms_optim_scale_grad")


@_scale.register("Tensor", "Tensor")
def _run_scale(factor, grad):
    return grad * F.cast(factor, F.dtype(grad))

_shape_of = C.MultitypeFuncGraph("ms_optim_shape_of")
_dtype_of = C.MultitypeFuncGraph("ms_optim_dtype_of")


@_shape_of.register("Tensor")
def _tensor_shape(x):
    return F.shape(x)


@_dtype_of.register("Tensor")
def _tensor_dtype(x):
    return F.dtype(x)


@constexpr
def _compare_gradients(cls, names, shapes, dtypes, got_shapes, got_dtypes):
    """check_gradients' comparison, run in Python while MindSpore compiles: the first
    gradient whose shape (ValueError) or dtype (TypeError) is not its parameter's."""
    for name, shape, dtype, got_shape, got_dtype in zip(names, shapes, dtypes, got_shapes,
                                                        got_dtypes):
        if tuple(got_shape) != shape:
            raise ValueError(f"For '{cls}', the gradient of parameter '{name}' must have its "
                             f"shape {shape}, but got {tuple(got_shape)}.")
        if got_dtype != dtype:
            raise TypeError(f"For '{cls}', the gradient of parameter '{name}' must have its "
                            f"dtype {dtype}, but got {got_dtype}.")
    return True


def resolve_impl(cls, impl, supported, device_choice, cuda=False):
    """The implementation to run: `impl` checked against "auto" + `supported` (ValueError
    naming the valid choices otherwise), "auto" resolved by the device target.  `cuda`:
    the optimizer's native path has CUDA kernels, so "native" runs on a GPU device target
    when the CUDA library is built, and falls back to `device_choice` with one logged
    warning when it is not."""
    _checks.check_choice(cls, "impl", impl, ("auto",) + tuple(supported))
    target = context.get_context("device_target")
    on_gpu = cuda and target == "GPU"
    if impl == "auto":
        impl = "native" if target == "CPU" or on_gpu else device_choice
    if impl == "native" and on_gpu:
        try:
            _cuda.lib()
        except _cuda.CudaLibraryError as exc:
            logger.warning("%s: %s; running impl=%r instead of 'native'.", cls,
                           str(exc).rstrip("."), device_choice)
            impl = device_choice
    return impl


def kernel_device(impl, cuda=False):
    """Where the native kernels of an optimizer with `impl` run: "GPU" for the CUDA kernels
    (`cuda`: it has them) on a GPU device target, else "CPU" (the host)."""
    on_gpu = cuda and context.get_context("device_target") == "GPU"
    return "GPU" if impl == "native" and on_gpu else "CPU"


def fault_in(params):
    """`params`, new zeros Parameters of a state that a host kernel reads and writes in
    place, with their memory written once now on a CPU device target; returns `params`.

    A new zeros tensor's memory is mapped lazily.  Left so, the first step's kernel reads
    each page as the system's shared zero page, then faults again when it writes the page,
    and every such fault interrupts the kernel's other threads to flush their address
    translations, all of it on the first step.  Written here, from one thread before any
    kernel runs, each page faults once.  Nothing changes where the data is not the
    host's (another device target, or a Parameter whose initialization MindSpore defers).
    """
    if context.get_context("device_target") == "CPU":
        for p in params:
            if not p.has_init:
                # on a CPU target asnumpy() is a view of the Parameter's memory
                p.asnumpy().reshape(-1).view(np.uint8)[...] = 0
    return params


class GraphHelpers:
    """Mixin of the graph-side helpers (placed before ``nn.Optimizer`` in the bases, or
    before ``nn.Cell`` in those of a step Cell such as DGC's)."""

    def _init_graph_helpers(self):
        self.stack = ops.Stack()
        self.map_types = C.Map()
        # what check_gradients compares each gradient with (constants of the graph)
        params = getattr(self, "_parameters", ())
        self.expected_grad_names = tuple(p.name for p in params)
        self.expected_grad_shapes = tuple(tuple(p.shape) for p in params)
        self.expected_grad_dtypes = tuple(p.dtype for p in params)

    def check_gradients(self, gradients):
        """The gradients against the parameters, before anything steps: a tuple
        (TypeError), one per parameter (ValueError), each of its parameter's shape
        (ValueError) and dtype (TypeError), the parameter named.  The shapes and dtypes
        are constants of the graph, gathered by one map and compared in Python while
        MindSpore compiles (``_compare_gradients``), so GRAPH_MODE raises while compiling,
        a step that passes costs nothing, and the check adds no graph node per parameter."""
        if not isinstance(gradients, tuple):
            raise TypeError(f"For '{self._NAME}', the gradients must be a tuple (one per "
                            f"parameter, as mindspore.value_and_grad returns them), but got "
                            f"{type(gradients).__name__}.")
        if len(gradients) != len(self.expected_grad_shapes):
            raise ValueError(f"For '{self._NAME}', the number of gradients must equal the "
                             f"number of parameters, {len(self.expected_grad_shapes)}, but got "
                             f"{len(gradients)}.")
        _compare_gradients(self._NAME, self.expected_grad_names, self.expected_grad_shapes,
                           self.expected_grad_dtypes, self.map_types(_shape_of, gradients),
                           self.map_types(_dtype_of, gradients))
        return gradients

    def unscale_and_clip(self, gradients, scaled, inv_scale, clip):
        """The first two steps of the one preprocessing order, for the paths that run them
        as graph ops: the loss scale divided out (``g * inv_scale`` when `scaled`), then
        `clip` (an ``ms_optim.clip`` Cell, or None).  Decay comes after, in each rule."""
        if scaled:
            gradients = self.map_(F.partial(_scale, inv_scale), gradients)
        if clip is not None:
            gradients = clip(gradients)
        return gradients

    def bucket_values(self, values, lo, hi, each):
        """Parameters lo..hi's values as one input of a multi-tensor op: a float32[hi - lo]
        stack of the per-parameter values when `each`, else the shared value."""
        if each:
            return self.stack(values[lo:hi])
        return values

    def per_param_values(self, lr, weight_decay, count):
        """With groups, (a learning rate per parameter, a weight decay per parameter) as
        tuples of `count`, for an ops path's rule mapped over the parameters (in reverse
        order, ``map_reverse``, as MindSpore's optimizers map).  Without groups a rule binds
        the one rate and decay with its other shared values instead: a tuple of one tensor
        per parameter, repeated, costs MindSpore seconds to compile with a hundred
        parameters."""
        lrs = lr if self.is_group_lr else (lr,) * count
        wds = weight_decay if self.is_group else (weight_decay,) * count
        return lrs, wds
