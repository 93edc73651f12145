"""What DGCMomentum checks at construction: its arguments (``validate``), the dtypes
of its parameters, and the recursion limit its step's graph needs."""
import numbers
import warnings
from dataclasses import dataclass
from typing import Optional

import mindspore
from mindspore import context, log as logger, nn
from mindspore import dtype as mstype

from .. import _checks
from .._step import resolve_impl
from ..clip import ClipGradByNorm, check_grad_clip
from .schedule import MIN_COMPRESSED_NUMEL
from ..regularizer import L1Decay, L2Decay
from .wire import EXCHANGES

# dtypes of the parameters DGC compresses (residuals u, v and exchanged values are float32)
COMPRESSED_DTYPES = (mstype.float32, mstype.float16)
# the last step the stages may start at: global_step is an int32 in the graph
_MAX_STEP = 2**31 - 1

# MindSpore's graph compiler counts nested calls while it evaluates impl="ops"'s
# per-parameter loops: about 10 per parameter (ResNet-50's 161 parameters need
# between 1,500 and 2,000), against a default limit of 1,000.  The native step
# has no such loops on one worker and needs no raise (measured, 161 parameters).
_CALL_DEPTH_PER_PARAM = 16
_CALL_DEPTH_BASE = 1000
# The highest recursion limit this package set: mindspore.set_recursion_limit has no
# getter and get_context("max_call_depth") does not see it.
_call_depth_set = 0


# warnings.warn's stacklevel of the code that called DGCMomentum(...): above this module's
# function are the constructor and its argument capture (_base._capturing)
_CALLER = 4


def raise_call_depth(num_params):
    """Raises MindSpore's recursion limit to what the step's graph needs, never lowers it.

    Uses ``mindspore.set_recursion_limit`` (``set_context(max_call_depth=...)`` is
    deprecated and logs a warning).  "Never lower" knows the larger of
    ``get_context("max_call_depth")`` and the highest limit this package set; a limit the
    user set with ``set_recursion_limit`` cannot be read back, so a higher one set that way
    before building a DGCMomentum may be lowered to what the step needs.
    """
    global _call_depth_set
    needed = _CALL_DEPTH_BASE + _CALL_DEPTH_PER_PARAM * num_params
    current = max(context.get_context("max_call_depth"), _call_depth_set)
    if current < needed:
        logger.info(f"DGCMomentum: raising the recursion limit (max_call_depth) to {needed} "
                    f"for {num_params} parameters.")
        mindspore.set_recursion_limit(needed)
        _call_depth_set = needed


def check_bfloat16(cls, parameters, target):
    """bfloat16 parameters cannot be updated on CPU (MindSpore 2.10 lacks the kernels)."""
    if target != "CPU":
        return
    for p in parameters:
        if p.dtype == mstype.bfloat16:
            raise TypeError(
                f"For '{cls}', parameter '{p.name}' is bfloat16, which MindSpore 2.10 cannot "
                f"update on CPU: its CPU kernels for Assign, Sub, Reshape and MatMul have no "
                f"bfloat16 (of the ops a step needs, only Cast, Add, Mul and Concat take it). "
                f"Use float16 or float32 on CPU.")


def dense_mask(cls, dense_params, names):
    """Per parameter (of `names`), whether `dense_params` asks it to be sent dense: None, or
    a list or tuple of Parameters or parameter names, each naming one of them once."""
    if dense_params is None:
        return (False,) * len(names)
    if not isinstance(dense_params, (list, tuple)):
        raise TypeError(f"For '{cls}', the 'dense_params' must be None or a list or tuple of "
                        f"Parameters or parameter names, but got {type(dense_params).__name__}.")
    asked = []
    for entry in dense_params:
        if not isinstance(entry, (str, mindspore.Parameter)):
            raise TypeError(f"For '{cls}', every entry of 'dense_params' must be a Parameter "
                            f"or a parameter name, but got {type(entry).__name__}: {entry!r}.")
        name = entry if isinstance(entry, str) else entry.name
        if name not in names:
            raise ValueError(f"For '{cls}', 'dense_params' names '{name}', which is not one of "
                             f"the parameters in 'params'.")
        if name in asked:
            raise ValueError(f"For '{cls}', 'dense_params' names '{name}' twice.")
        asked.append(name)
    return tuple(n in asked for n in names)


def warn_uncompressed(cls, parameters, is_compressed, bucketed=False, asked_dense=None):
    """One warning per parameter large enough to compress that is sent dense anyway (unless
    `asked_dense` says the caller asked for it), and one when no parameter is compressed,
    alone or in a bucket (`bucketed`) (attributed to the caller of DGCMomentum's
    constructor)."""
    asked_dense = asked_dense or (False,) * len(parameters)
    for p, compressed, asked in zip(parameters, is_compressed, asked_dense):
        if compressed or asked or p.size < MIN_COMPRESSED_NUMEL:
            continue
        why = ("bfloat16 is never compressed (MindSpore 2.10 has no CPU kernels to build "
               "and check that path with)" if p.dtype == mstype.bfloat16 else
               "only float32 and float16 parameters are compressed")
        warnings.warn(f"{cls}: parameter '{p.name}' ({str(p.dtype).lower()}, {p.size} elements) "
                      f"is exchanged dense on every step: {why}.", UserWarning,
                      stacklevel=_CALLER)
    if parameters and not any(is_compressed) and not bucketed and not any(asked_dense):
        warnings.warn(f"{cls} compresses none of its {len(parameters)} parameter(s): only float32 "
                      f"and float16 parameters of {MIN_COMPRESSED_NUMEL} elements or more are "
                      f"compressed, and the largest here has {max(p.size for p in parameters)}. "
                      f"Every step is plain momentum with every gradient sent in full; use "
                      f"mindspore.nn.Momentum for this network.", UserWarning,
                      stacklevel=_CALLER)


def check_sparsity(cls, sparsity):
    """The warm-up sparsities as a tuple of floats in [0, 1), non-decreasing, or "auto"."""
    if isinstance(sparsity, str):
        if sparsity != "auto":
            raise ValueError(f"For '{cls}', the 'sparsity' must be \"auto\" or a list or tuple "
                             f"of floats, but got {sparsity!r}.")
        return sparsity
    if isinstance(sparsity, numbers.Real) or not isinstance(sparsity, (list, tuple)):
        raise TypeError(f"For '{cls}', the 'sparsity' must be \"auto\" or a list or tuple of "
                        f"floats, but got {type(sparsity).__name__}.")
    if not sparsity:
        raise ValueError(f"For '{cls}', the 'sparsity' must not be empty.")
    for s in sparsity:
        if not isinstance(s, numbers.Real) or isinstance(s, bool):
            raise TypeError(f"For '{cls}', every 'sparsity' entry must be a float, but got "
                            f"{type(s).__name__}: {s!r}.")
        if not 0.0 <= s < 1.0:
            raise ValueError(f"For '{cls}', every 'sparsity' entry must be in [0, 1), but got {s}.")
    if any(b < a for a, b in zip(sparsity, sparsity[1:])):
        raise ValueError(f"For '{cls}', the 'sparsity' warm-up must not decrease, but got "
                         f"{list(sparsity)}.")
    return tuple(float(s) for s in sparsity)


@dataclass(frozen=True)
class Checked:
    """DGCMomentum's arguments that ``validate`` normalizes (numpy numbers made Python's)."""
    learning_rate: object  # as _checks.check_learning_rate returns it
    momentum: float
    rampup_begin_step: int
    rampup_step: int
    sparsity: object  # a tuple of floats, or "auto"
    local_grad_clip_norm: Optional[float]
    num_trainers: Optional[int]
    weight_decay: object  # a float or a Cell
    loss_scale: float
    impl: str  # "native" or "ops": "auto" resolved by the device target
    bucket_sparsity: Optional[float]


def validate(cls, *, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity,
             use_nesterov, local_grad_clip_norm, num_trainers, regularization, grad_clip,
             weight_decay, loss_scale, impl, exchange, bucket_sparsity, lr_in_residuals,
             dense_params):
    """DGCMomentum's argument checks, in the order of its signature (every argument but
    `params`, as the constructor captured them); returns a Checked.

    `num_trainers` is checked against the world size later, once the optimizer knows it,
    and `dense_params` against the parameters' names (``dense_mask``).
    """
    learning_rate = _checks.check_learning_rate(cls, learning_rate)
    momentum = _checks.check_open_unit(
        cls, "momentum", _checks.check_float(cls, "momentum", momentum, allow_int=True),
        include_zero=True, in_float32=True)
    rampup_begin_step = _checks.check_non_negative(
        cls, "rampup_begin_step", _checks.check_int(cls, "rampup_begin_step", rampup_begin_step))
    rampup_step = _checks.check_int(cls, "rampup_step", rampup_step)
    if rampup_step < 1:
        raise ValueError(f"For '{cls}', the 'rampup_step' must be >= 1, but got {rampup_step}.")
    if rampup_begin_step + rampup_step > _MAX_STEP:
        raise ValueError(f"For '{cls}', 'rampup_begin_step' + 'rampup_step' must be at most "
                         f"{_MAX_STEP} (the step count is an int32 in the graph), but got "
                         f"{rampup_begin_step} + {rampup_step}.")
    sparsity = check_sparsity(cls, sparsity)
    _checks.check_bool(cls, "use_nesterov", use_nesterov)
    if local_grad_clip_norm is not None:
        local_grad_clip_norm = _checks.check_float32_positive(
            cls, "local_grad_clip_norm",
            _checks.check_float(cls, "local_grad_clip_norm", local_grad_clip_norm, True))
    check_grad_clip(cls, grad_clip, allowed=(ClipGradByNorm,))
    if grad_clip is not None and local_grad_clip_norm is not None:
        raise ValueError(f"For '{cls}', give either 'grad_clip' or 'local_grad_clip_norm', "
                         f"not both.")
    if num_trainers is not None:
        num_trainers = _checks.check_int(cls, "num_trainers", num_trainers)
    if num_trainers is not None and num_trainers < 1:
        raise ValueError(f"For '{cls}', the 'num_trainers' must be >= 1, but got {num_trainers}.")
    if regularization is not None and not isinstance(regularization, (L1Decay, L2Decay)):
        raise TypeError(f"For '{cls}', the 'regularization' must be None, "
                        f"ms_optim.regularizer.L1Decay or L2Decay, but got "
                        f"{type(regularization).__name__}.")
    weight_decay = _checks.check_weight_decay(cls, weight_decay)
    if regularization is not None and (isinstance(weight_decay, nn.Cell) or weight_decay != 0):
        raise ValueError(f"For '{cls}', set either 'weight_decay' or 'regularization', not both.")
    loss_scale = _checks.check_loss_scale(cls, loss_scale)
    impl = resolve_impl(cls, impl, ("native", "ops"), "ops", cuda=True)
    _checks.check_choice(cls, "exchange", exchange, EXCHANGES)
    if bucket_sparsity is not None:
        bucket_sparsity = _checks.check_open_unit(cls, "bucket_sparsity", _checks.check_float(
            cls, "bucket_sparsity", bucket_sparsity, allow_int=True), include_zero=True)
    _checks.check_bool(cls, "lr_in_residuals", lr_in_residuals)
    return Checked(learning_rate=learning_rate, momentum=momentum,
                   rampup_begin_step=rampup_begin_step, rampup_step=rampup_step,
                   sparsity=sparsity, local_grad_clip_norm=local_grad_clip_norm,
                   num_trainers=num_trainers, weight_decay=weight_decay, loss_scale=loss_scale,
                   impl=impl, bucket_sparsity=bucket_sparsity)
