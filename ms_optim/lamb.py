"""Lamb with PaddlePaddle's semantics: a fused native CPU kernel and a portable ops path."""
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from . import _checks, kernels
from ._api import OptimizerAPI
from ._state import BetaPowers
from ._step import StepSkeleton, resolve_impl
from .clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue, check_grad_clip


_ZERO = Tensor(0.0, mstype.float32)
_ONE = Tensor(1.0, mstype.float32)

_ops_step = C.MultitypeFuncGraph("ms_optim_lamb_ops")
@_ops_step.register("Tuple", "Tensor", "Tensor", "Bool", "Tensor", "Tensor", "Tensor", "Tensor")
def _run_ops(head, lr, weight_decay, decay_flag, param, m, v, grad):
    """The same rule from plain MindSpore ops (GPU/Ascend); returns the trust ratio.

    head: (beta1, beta2, eps, beta1_power, beta2_power, always_adapt), shared.
    """
    beta1, beta2, eps, beta1_power, beta2_power, always_adapt = head
    weight_decay = weight_decay if decay_flag else _ZERO
    next_m = beta1 * m + (_ONE - beta1) * grad
    next_v = beta2 * v + (_ONE - beta2) * grad * grad
    r = (next_m / (_ONE - beta1_power)) / (ops.sqrt(next_v / (_ONE - beta2_power)) + eps) \
        + weight_decay * param
    p_norm = ops.sqrt(ops.reduce_sum(param * param))
    r_norm = ops.sqrt(ops.reduce_sum(r * r))
    use_ratio = ops.logical_and(p_norm > _ZERO, r_norm > _ZERO)
    if not always_adapt:
        use_ratio = ops.logical_and(use_ratio, weight_decay > _ZERO)
    ratio = ops.select(use_ratio, p_norm / r_norm, _ONE)
    ratio = F.depend(ratio, F.assign(m, next_m))
    ratio = F.depend(ratio, F.assign(v, next_v))
    return F.depend(ratio, F.assign(param, param - (lr * ratio) * r))


# MindSpore's nn.Lamb names -> this Lamb's (PaddlePaddle's)
_MINDSPORE_NAMES = {"weight_decay": "lamb_weight_decay", "eps": "epsilon"}


def _reject_mindspore_names(cls, kwargs):
    """TypeError for unexpected keyword arguments, naming Lamb's own name for MindSpore's."""
    for key in kwargs:
        if key in _MINDSPORE_NAMES:
            raise TypeError(f"For '{cls}', got an unexpected keyword argument '{key}': Lamb "
                            f"follows PaddlePaddle's names, use '{_MINDSPORE_NAMES[key]}' "
                            f"instead (MindSpore's nn.Lamb calls it '{key}').")
        raise TypeError(f"For '{cls}', got an unexpected keyword argument '{key}'.")


class Lamb(OptimizerAPI, StepSkeleton, BetaPowers, nn.Optimizer):
    r"""LAMB (You et al., 2019) with PaddlePaddle's ``paddle.optimizer.Lamb`` semantics.

    .. math::
        m_t = \beta_1 m_{t-1} + (1-\beta_1) g,\quad
        v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2 \\
        r_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon} + \lambda w,\quad
        w_t = w_{t-1} - \eta \, \rho \, r_t

    with trust ratio :math:`\rho = \|w\| / \|r_t\|` when :math:`\lambda > 0` or
    ``always_adapt``, falling back to 1 when either norm is 0; otherwise
    :math:`\rho = 1` (a bias-corrected Adam step).  :math:`\epsilon` sits
    outside the square root and the ratio is not clipped.

    Warning:
        Formulations differ: MindSpore's own ``nn.Lamb`` clips the ratio to
        [0, 10] and puts eps inside the square root, torch-optimizer has no bias
        correction, NVIDIA apex pre-clips the global gradient norm.  This is
        PaddlePaddle's variant.

    ``lamb_weight_decay`` applies to every parameter except those for which
    ``exclude_from_weight_decay_fn(param)`` returns True (called once per
    parameter at construction); a group's ``weight_decay`` overrides it.
    Gradients are divided by ``loss_scale``, then clipped by ``grad_clip``.

    ``impl="native"`` runs one fused multi-tensor CPU kernel for up to 256
    parameters (per parameter: moments, update direction and both squared
    norms in one pass, norms in double, then the trust-ratio update;
    clipping fused in); ``impl="ops"`` builds the same rule from plain
    MindSpore ops for GPU/Ascend; ``"auto"`` picks native on
    a CPU device target.  State (``moment1``, ``moment2``, ``beta1_power``,
    ``beta2_power``, ``global_step``) lives in Parameters.  A step returns
    the trust ratios it applied, a float32 Tensor with one entry per parameter.

    Args:
        params (Union[list[Parameter], list[dict]]): float32 parameters or groups
            ("params", "lr", "weight_decay", "order_params").
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule]): default 0.001.
        lamb_weight_decay (float): decoupled weight decay, >= 0. Default 0.01.
        beta1 (float): in (0, 1). Default 0.9.
        beta2 (float): in (0, 1). Default 0.999.
        epsilon (float): > 0. Default 1e-6.
        grad_clip (ClipGradByGlobalNorm | ClipGradByNorm | ClipGradByValue, optional).
        exclude_from_weight_decay_fn (callable, optional): param -> bool.
        always_adapt (bool): apply the trust ratio even without weight decay.
        loss_scale (float): gradients are divided by it. Default 1.0.
        impl (str): "auto", "native" or "ops".

    The argument names are PaddlePaddle's: MindSpore's ``weight_decay=`` and
    ``eps=`` raise a TypeError naming ``lamb_weight_decay`` and ``epsilon``
    (inside a parameter group, ``"weight_decay"`` is the group's key, as usual).
    ``epsilon`` must stay above 0 in float32 (1e-46 is 0 there: ValueError).

    Learning rate: ``get_lr()`` is MindSpore's ``nn.Optimizer.get_lr`` (used
    inside ``construct``); from Python, ``current_lr()`` returns the next
    step's rate as a float (one per group when groups set their own 'lr') and
    ``set_lr(value)`` sets a fixed rate for all groups (RuntimeError while a
    schedule drives it), as on every ms_optim optimizer (see ``ms_optim._api``).

    Example:
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(16, 4)
        >>> opt = ms_optim.Lamb(net.trainable_params(), learning_rate=0.01,
        ...                     grad_clip=ms_optim.clip.ClipGradByGlobalNorm(1.0),
        ...                     exclude_from_weight_decay_fn=lambda p: "bias" in p.name)

    References:
        You et al., "Large Batch Optimization for Deep Learning: Training BERT in
        76 minutes", ICLR 2020.
    """

    _NAME = "Lamb"

    def __init__(self, params, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9,
                 beta2=0.999, epsilon=1e-6, grad_clip=None, exclude_from_weight_decay_fn=None,
                 always_adapt=False, loss_scale=1.0, impl="auto", **kwargs):
        cls = self._NAME
        _reject_mindspore_names(cls, kwargs)
        params = _checks.check_params(cls, params)
        _checks.check_learning_rate(cls, learning_rate)
        lamb_weight_decay = _checks.check_weight_decay(cls, lamb_weight_decay, "lamb_weight_decay")
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1, True))
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2, True))
        epsilon = _checks.check_float32_positive(cls, "epsilon",
                                                 _checks.check_float(cls, "epsilon", epsilon, True))
        check_grad_clip(cls, grad_clip)
        if exclude_from_weight_decay_fn is not None and not callable(exclude_from_weight_decay_fn):
            raise TypeError(f"For '{cls}', the 'exclude_from_weight_decay_fn' must be callable or "
                            f"None, but got {type(exclude_from_weight_decay_fn).__name__}.")
        _checks.check_bool(cls, "always_adapt", always_adapt)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        impl = resolve_impl(cls, impl, ("native", "ops"), "ops")
        # The loss scale is handled here, not by the base class (which would fold it into the
        # weight decay: Lamb's decay is decoupled from the gradient).
        super().__init__(learning_rate, params, lamb_weight_decay, 1.0)
        _checks.check_param_dtypes(cls, self._parameters, (mstype.float32,))
        self.loss_scale = loss_scale

        self._record_args(params, learning_rate=learning_rate,
                          lamb_weight_decay=lamb_weight_decay, beta1=beta1, beta2=beta2,
                          epsilon=epsilon, grad_clip=grad_clip,
                          exclude_from_weight_decay_fn=exclude_from_weight_decay_fn,
                          always_adapt=always_adapt, loss_scale=loss_scale, impl=impl)
        self.impl = impl
        self.grad_clip = grad_clip
        self.always_adapt = always_adapt
        exclude = exclude_from_weight_decay_fn or (lambda p: False)
        self.lamb_decay_flags = tuple(not bool(exclude(p)) for p in self._parameters)
        self._init_beta_powers(beta1, beta2)
        self._init_skeleton()
        self.eps = Tensor([epsilon], mstype.float32)
        self.moment1 = self._parameters.clone(prefix="moment1", init="zeros")
        self.moment2 = self._parameters.clone(prefix="moment2", init="zeros")
        self.inv_scale = Tensor([1.0 / loss_scale], mstype.float32)
        self.concat = ops.Concat()
        self.global_clip = isinstance(grad_clip, ClipGradByGlobalNorm)
        if impl == "native":
            clip_norm = grad_clip.clip_norm if isinstance(grad_clip, ClipGradByNorm) else 0.0
            lo, hi = ((grad_clip.min, grad_clip.max) if isinstance(grad_clip, ClipGradByValue)
                      else (-np.inf, np.inf))
            self.consts = kernels.consts("lamb", beta1=beta1, beta2=beta2, eps=epsilon,
                                         clip_norm=clip_norm, clip_lo=lo, clip_hi=hi,
                                         always_adapt=always_adapt)
            self._init_native_buckets()

    def _init_native_buckets(self):
        """One multi-tensor kernel per bucket of up to kernels.MAX_TENSORS parameters.

        Each bucket is one MindSpore op that steps all its parameters (a kernel
        launch per parameter costs more than a small parameter's update).
        Per bucket: the op, its (start, stop) in the parameter list, the
        weight-decay mask of its parameters (None when all of them decay) and,
        with a global-norm clip, the op summing the squares of its gradients.
        """
        self.buckets = kernels.buckets([p.dtype for p in self._parameters])
        ops_, masks, sumsq_ops = [], [], []
        for b, (lo, hi) in enumerate(self.buckets):
            op = kernels.lamb_op(hi - lo)
            op.add_prim_attr("ms_optim_bucket", b)
            ops_.append(op)
            flags = self.lamb_decay_flags[lo:hi]
            masks.append(None if all(flags) else Tensor(np.array(flags, np.float32)))
            if self.global_clip:
                sumsq = kernels.sumsq_op(hi - lo)
                sumsq.add_prim_attr("ms_optim_bucket", b)
                sumsq_ops.append(sumsq)
        self.lamb_ops = tuple(ops_)
        self.decay_masks = tuple(masks)
        self.sumsq_ops = tuple(sumsq_ops)

    # ----------------------------------------------------------------- step --

    def construct(self, gradients):
        params = self._parameters
        gradients = self.flatten_gradients(gradients)
        lr = self.get_lr()
        weight_decay = self.get_weight_decay()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        beta1_power, beta2_power = self._advance_beta_powers()
        if self.impl == "native":
            powers = self.concat((beta1_power, beta2_power))
            grad_scale = self.inv_scale
            if self.global_clip:
                # one multi-tensor op per bucket sums the squares of all its gradients
                sq_norms = ()
                for b, (lo, hi) in enumerate(self.buckets):
                    sq_norms = sq_norms + (self.sumsq_ops[b](*gradients[lo:hi]),)
                # the squared norms are of the loss-scaled gradients
                grad_scale = self.inv_scale * self.grad_clip.factor(sq_norms, self.inv_scale)
            return self._native_step(params, gradients, lr, weight_decay, grad_scale, powers)
        gradients = self.unscale_and_clip(gradients, self.loss_scale != 1.0, self.inv_scale,
                                          self.grad_clip)
        head = (self.beta1, self.beta2, self.eps, beta1_power, beta2_power, self.always_adapt)
        ratios = self.map_params(F.partial(_ops_step, head), lr, weight_decay,
                                 self.lamb_decay_flags, params, self.moment1, self.moment2,
                                 gradients)
        return self.stack(ratios)

    def _native_step(self, params, gradients, lr, weight_decay, grad_scale, powers):
        """Every bucket's multi-tensor kernel; the trust ratios, float32[K]."""
        ratios = ()
        for b, (lo, hi) in enumerate(self.buckets):
            lr_b = self.per_tensor(lr, lo, hi, self.is_group_lr)
            wd_b = self.per_tensor(weight_decay, lo, hi, self.is_group)
            if self.decay_masks[b] is not None:
                wd_b = wd_b * self.decay_masks[b]
            args = (params[lo:hi] + self.moment1[lo:hi] + self.moment2[lo:hi]
                    + gradients[lo:hi] + (lr_b, wd_b, grad_scale, powers, self.consts))
            ratios = ratios + (self.lamb_ops[b](*args),)
        return self.concat(ratios) if len(ratios) > 1 else ratios[0]
