"""Lamb with PaddlePaddle's semantics: a fused native CPU kernel and a portable ops path."""
import mindspore as ms
import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype
from mindspore.ops import composite as C
from mindspore.ops import functional as F
from mindspore.ops import operations as P

from . import _checks, aot
from ._base import Optimizer
from ._step import fault_in, kernel_device, resolve_impl
from .clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue, check_grad_clip


_ZERO = Tensor(0.0, mstype.float32)
_ONE = Tensor(1.0, mstype.float32)

# The ops path's rule is a call that MindSpore compiles once per distinct shape and argument
# form (ms.no_inline), not ~40 ops inlined per parameter into the step's graph: ResNet-50's
# 161 tensors have 28 shapes.  What each such compilation costs is the rule's graph, so the
# rule is written small: MindSpore's primitives themselves (the ones that `*`, `+`, `-` and
# `>` on two Tensors resolve to, without the operator dispatch that would be specialized with
# each shape), the step's scalars computed once outside, and its arguments Tensors and bools,
# no tuple (MindSpore would unpack a tuple with each shape too).  Its quotients are RealDiv's:
# the same bits as `/` (Div), without the buffers that MindSpore's CPU Div allocates, whose
# first touch made up half of the first step.
_MUL, _ADD, _SUB, _DIV = P.Mul(), P.Add(), P.Sub(), P.RealDiv()
_GT, _AND, _SQRT, _SUM, _SELECT = P.Greater(), P.LogicalAnd(), P.Sqrt(), P.ReduceSum(), P.Select()
_ops_step = C.MultitypeFuncGraph("ms_optim_lamb_ops")


@_ops_step.register(*("Tensor",) * 7, "Bool", "Tensor", "Tensor", "Bool", *("Tensor",) * 4)
@ms.no_inline
def _rule(beta1, rest1, beta2, rest2, eps, correct1, correct2, always_adapt, lr,
          weight_decay, decay_flag, param, m, v, grad):
    """Lamb's rule (the class docstring) from plain MindSpore ops, for GPU/Ascend; returns
    the trust ratio.  rest1, rest2: 1 - beta1, 1 - beta2; correct1, correct2: 1 - beta1^t,
    1 - beta2^t; with `lr` and `weight_decay` the same for every parameter without groups.

    m' = beta1 m + rest1 g,  v' = beta2 v + (rest2 g) g,
    r = (m' / correct1) / (sqrt(v' / correct2) + eps) + weight_decay w,
    w' = w - (lr ratio) r.
    """
    weight_decay = weight_decay if decay_flag else _ZERO
    next_m = _ADD(_MUL(beta1, m), _MUL(rest1, grad))
    next_v = _ADD(_MUL(beta2, v), _MUL(_MUL(rest2, grad), grad))
    r = _ADD(_DIV(_DIV(next_m, correct1), _ADD(_SQRT(_DIV(next_v, correct2)), eps)),
             _MUL(weight_decay, param))
    p_norm = _SQRT(_SUM(_MUL(param, param), ()))
    r_norm = _SQRT(_SUM(_MUL(r, r), ()))
    use_ratio = _AND(_GT(p_norm, _ZERO), _GT(r_norm, _ZERO))
    if not always_adapt:
        use_ratio = _AND(use_ratio, _GT(weight_decay, _ZERO))
    ratio = _SELECT(use_ratio, _DIV(p_norm, r_norm), _ONE)
    ratio = F.depend(ratio, F.assign(m, next_m))
    ratio = F.depend(ratio, F.assign(v, next_v))
    return F.depend(ratio, F.assign(param, _SUB(param, _MUL(_MUL(lr, ratio), r))))


# MindSpore's nn.Lamb names -> this Lamb's (PaddlePaddle's)
_MINDSPORE_NAMES = {"weight_decay": "lamb_weight_decay", "eps": "epsilon"}


class Lamb(Optimizer):
    r"""LAMB (You et al., 2019) with PaddlePaddle's ``paddle.optimizer.Lamb`` semantics.

    Each step, for every parameter :math:`w` with gradient :math:`g` (divided by
    `loss_scale`, then clipped by `grad_clip`):

    .. math::
        \begin{array}{l}
            m_t = \beta_1 m_{t-1} + (1-\beta_1) g, \quad
            v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2, \\
            r_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \epsilon}
                  + \lambda w_{t-1}, \quad
            w_t = w_{t-1} - \eta \, \rho \, r_t
        \end{array}

    :math:`\eta` is `learning_rate`, :math:`\lambda` is `lamb_weight_decay`,
    :math:`\epsilon` is `epsilon`.  The trust ratio is :math:`\rho = \|w_{t-1}\| / \|r_t\|`
    when :math:`\lambda > 0` or `always_adapt` (1 when either norm is 0), otherwise
    :math:`\rho = 1` (a bias-corrected Adam step).  :math:`\epsilon` sits outside the
    square root and the ratio is not clipped.

    .. warning::
        Formulations of LAMB differ: MindSpore's own ``nn.Lamb`` clips the ratio to
        [0, 10], puts eps inside the square root and skips parameters named "beta" or
        "gamma"; this is PaddlePaddle's variant.  The argument names are PaddlePaddle's
        too: MindSpore's ``weight_decay=`` and ``eps=`` raise a TypeError naming
        `lamb_weight_decay` and `epsilon` (inside a parameter group, ``"weight_decay"`` is
        the group's key, as usual).

    Note:
        - `lamb_weight_decay` applies to every parameter, biases and normalization
          weights included, except those for which `exclude_from_weight_decay_fn`
          returns True; a group's ``"weight_decay"`` replaces it for that group.
        - The state (``moment1``, ``moment2``, ``beta1_power``, ``beta2_power``,
          ``global_step``) is kept in Parameters, so checkpoints carry it.
        - ``current_lr()`` returns the learning rate of the next step as a float (a list,
          one per group, when groups set their own ``"lr"``); ``set_lr(value)`` sets a
          fixed rate for every group (RuntimeError while a schedule drives the rate).

    Args:
        params (Union[list[Parameter], list[dict]]): The float32 parameters to update, or a
            list of parameter groups: dicts with the keys ``"params"`` (required),
            ``"lr"``, ``"weight_decay"`` and ``"order_params"``, as in MindSpore's
            optimizers.  Each parameter may appear once.
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule], optional):
            A number >= 0, a scalar or 1-D Tensor (or numpy array), an Iterable of per-step
            values (read once: a generator is taken) or a ``LearningRateSchedule``; every
            value finite and >= 0.  A list (or 1-D Tensor) has a value per step: a run past
            its end raises ValueError, naming it, when the optimizer is called from Python
            (PyNative); inside a compiled train step (GRAPH_MODE) MindSpore's Gather raises
            RuntimeError at that step.  Default: ``0.001``.
        lamb_weight_decay (Union[float, int, Cell], optional): Decoupled weight decay
            :math:`\lambda`, a number >= 0, or a Cell that maps the global step to it.
            Default: ``0.01``.
        beta1 (float, optional): Decay rate of the first moment, in (0.0, 1.0).
            Default: ``0.9``.
        beta2 (float, optional): Decay rate of the second moment, in (0.0, 1.0).
            Default: ``0.999``.
        epsilon (float, optional): Added to the square root; must be greater
            than 0 also when rounded to float32 (``1e-46`` is 0 there).  Default: ``1e-6``.
        grad_clip (Union[ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue], optional):
            A clip from ``ms_optim.clip``, applied to the gradients after the loss scale
            is divided out.  ``None`` does not clip.  Default: ``None``.
        exclude_from_weight_decay_fn (Callable[[Parameter], bool], optional): Called once
            per parameter at construction; a parameter for which it returns True takes no
            weight decay (and so no trust ratio unless `always_adapt`).  ``None``
            excludes none.  Default: ``None``.
        always_adapt (bool, optional): Apply the trust ratio also to parameters without
            weight decay.  Default: ``False``.
        loss_scale (Union[float, int], optional): The gradients are divided by it; must be
            finite and greater than 0.  Default: ``1.0``.
        impl (str, optional): ``"native"``: one fused multi-tensor kernel per bucket of
            up to 256 parameters, clipping included: the CPU kernel on a CPU device
            target, the CUDA kernel on a GPU one (``ops/cuda/lamb.cu``, where the install
            found nvcc; else ``"ops"``, with a logged warning).  ``"ops"``: the same rule
            from plain MindSpore ops, run wherever the parameters are.  ``"auto"``:
            ``"native"`` on a CPU or GPU device target, else ``"ops"``.  Default:
            ``"auto"``.

    Inputs:
        - **gradients** (tuple[Tensor]) - The gradients of `params`, of the same shapes.

    Outputs:
        Tensor of float32 and shape :math:`(N,)`, :math:`N` the number of parameters: the
        trust ratio :math:`\rho` each parameter's update used.

    Raises:
        TypeError: If a keyword argument is not one of the constructor's, MindSpore's
            `weight_decay` and `eps` included (the message names the argument meant:
            ``weight_decay`` -> ``lamb_weight_decay``, ``lr`` -> ``learning_rate``, a
            misspelling).
        TypeError: If `params` is not a list of Parameter or a list of dict (a single
            Parameter or dict included), or mixes them.
        TypeError: If `learning_rate` is not an int, float, Tensor, Iterable or
            LearningRateSchedule (a bool included).
        TypeError: If `lamb_weight_decay` is neither a float, an int nor a Cell.
        TypeError: If `beta1`, `beta2` or `epsilon` is not a float, or `loss_scale` is not a
            float or an int (numpy's are taken, a bool is neither).
        TypeError: If `grad_clip` is not None or one of the ``ms_optim.clip`` classes.
        TypeError: If `exclude_from_weight_decay_fn` is neither callable nor None.
        TypeError: If `always_adapt` is not a bool.
        TypeError: If a parameter is not float32.
        ValueError: If `params` is empty, or a parameter is given twice (the same object,
            or two Parameters of one name).
        ValueError: If `learning_rate` (or a group's ``"lr"``) is less than 0 or not finite,
            a Tensor or numpy array of more than one dimension, or a sequence that is empty,
            nested, or holds a value less than 0 or not finite.
        ValueError: If `lamb_weight_decay` is less than 0 or not finite.
        ValueError: If `beta1` or `beta2` is not in range (0.0, 1.0).
        ValueError: If `epsilon` is not greater than 0 in float32, or `loss_scale` is not
            finite and greater than 0.
        ValueError: If a parameter group sets ``"grad_centralization"`` (not supported).
        TypeError: If `impl` is not a str.
        ValueError: If `impl` is not one of ``"auto"``, ``"native"``, ``"ops"``.
        ValueError: If a number above is finite as a Python number but not in float32, the
            type the update computes in: a beta that rounds to 1.0, a learning rate or
            weight decay above 3.4e38, a `loss_scale` outside [2.9e-39, 3.4e38] (its
            reciprocal scales the gradients).
        ValueError: If a parameter has no elements (a dimension of 0).
        TypeError: If the optimizer is called with other arguments than the gradients
            (``opt(gradients)``), or with none.
        KeyError: If a parameter group lacks ``"params"``, or has a key other than
            ``"params"``, ``"lr"``, ``"weight_decay"`` and ``"order_params"``.

    Supported Platforms:
        ``CPU`` ``GPU`` ``Ascend``

        Verified on CPU, where ``impl="native"`` and ``impl="ops"`` are both tested.  On
        GPU, ``impl="native"`` runs the CUDA kernel, which is tested on a GPU against the
        reference and the CPU kernel (tests/gpu) but not inside MindSpore's GPU build.  On
        Ascend, ``impl="auto"`` runs ``"ops"`` (plain MindSpore ops), not tested there.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(4, 2, weight_init="ones", bias_init="zeros")
        >>> opt = ms_optim.Lamb(net.trainable_params(), learning_rate=0.01,
        ...                     grad_clip=ms_optim.clip.ClipGradByGlobalNorm(1.0),
        ...                     exclude_from_weight_decay_fn=lambda p: "bias" in p.name)
        >>> grad_fn = ms.value_and_grad(nn.WithLossCell(net, nn.MSELoss()), None, opt.parameters)
        >>> x = ms.Tensor(np.ones((8, 4), np.float32))
        >>> y = ms.Tensor(np.zeros((8, 2), np.float32))
        >>> loss, grads = grad_fn(x, y)
        >>> ratios = opt(grads)  # one step; the trust ratios of the weight and the bias
        >>> print(ratios.asnumpy().round(4))
        [0.9901 1.    ]
        >>> print(net.weight.asnumpy()[0].round(4))  # 1 - 0.01 * 0.9901 * (1 + 0.01)
        [0.99 0.99 0.99 0.99]

    References:
        You et al., "Large Batch Optimization for Deep Learning: Training BERT in
        76 minutes", ICLR 2020.

    See docs/lamb.md for the kernel, clipping and the differences from ``nn.Lamb``.
    """

    _NAME = "Lamb"
    _KEYWORD_NAMES = _MINDSPORE_NAMES
    _KEYWORD_NOTE = " Lamb follows PaddlePaddle's names; MindSpore's nn.Lamb's differ."

    def __init__(self, params, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9,
                 beta2=0.999, epsilon=1e-6, grad_clip=None, exclude_from_weight_decay_fn=None,
                 always_adapt=False, loss_scale=1.0, impl="auto"):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        learning_rate = _checks.check_learning_rate(cls, learning_rate)
        lamb_weight_decay = _checks.check_weight_decay(cls, lamb_weight_decay, "lamb_weight_decay")
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1),
                                        in_float32=True)
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2),
                                        in_float32=True)
        epsilon = _checks.check_float32_positive(cls, "epsilon",
                                                 _checks.check_float(cls, "epsilon", epsilon))
        check_grad_clip(cls, grad_clip)
        if exclude_from_weight_decay_fn is not None and not callable(exclude_from_weight_decay_fn):
            raise TypeError(f"For '{cls}', the 'exclude_from_weight_decay_fn' must be callable or "
                            f"None, but got {type(exclude_from_weight_decay_fn).__name__}.")
        _checks.check_bool(cls, "always_adapt", always_adapt)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        impl = resolve_impl(cls, impl, ("native", "ops"), "ops", cuda=True)
        # The loss scale is handled here, not by the base class (which would fold it into the
        # weight decay: Lamb's decay is decoupled from the gradient).
        super().__init__(learning_rate, params, lamb_weight_decay, 1.0)
        _checks.check_param_dtypes(cls, self._parameters, (mstype.float32,))
        self.loss_scale = loss_scale

        self._record_args(params, locals())
        self.impl = impl
        self.kernel_device = kernel_device(impl, cuda=True)
        self.grad_clip = grad_clip
        self.always_adapt = always_adapt
        exclude = exclude_from_weight_decay_fn or (lambda p: False)
        self.lamb_decay_flags = tuple(not bool(exclude(p)) for p in self._parameters)
        self._init_beta_powers(beta1, beta2)
        self._init_graph_helpers()
        self.eps = Tensor([epsilon], mstype.float32)
        self.moment1 = fault_in(self._parameters.clone(prefix="moment1", init="zeros"))
        self.moment2 = fault_in(self._parameters.clone(prefix="moment2", init="zeros"))
        self.inv_scale = Tensor([1.0 / loss_scale], mstype.float32)
        self.concat = ops.Concat()
        self.global_clip = isinstance(grad_clip, ClipGradByGlobalNorm)
        if impl == "native":
            clip_norm = grad_clip.clip_norm if isinstance(grad_clip, ClipGradByNorm) else 0.0
            lo, hi = ((grad_clip.min, grad_clip.max) if isinstance(grad_clip, ClipGradByValue)
                      else (-np.inf, np.inf))
            self.consts = aot.consts("lamb", beta1=beta1, beta2=beta2, eps=epsilon,
                                         clip_norm=clip_norm, clip_lo=lo, clip_hi=hi,
                                         always_adapt=always_adapt)
            self._init_native_buckets()

    def _init_native_buckets(self):
        """One multi-tensor kernel per bucket of up to aot.MAX_TENSORS parameters.

        Each bucket is one MindSpore op that steps all its parameters (a kernel
        launch per parameter costs more than a small parameter's update).
        Per bucket: the op, its (start, stop) in the parameter list, the
        weight-decay mask of its parameters (None when all of them decay) and,
        with a global-norm clip, the op summing the squares of its gradients.
        """
        self.buckets = aot.buckets([p.dtype for p in self._parameters])
        ops_, masks, sumsq_ops = [], [], []
        for b, (lo, hi) in enumerate(self.buckets):
            op = aot.lamb_op(hi - lo, self.kernel_device)
            op.add_prim_attr("ms_optim_bucket", b)
            ops_.append(op)
            flags = self.lamb_decay_flags[lo:hi]
            masks.append(None if all(flags) else Tensor(np.array(flags, np.float32)))
            if self.global_clip:
                sumsq = aot.sumsq_op(hi - lo, self.kernel_device)
                sumsq.add_prim_attr("ms_optim_bucket", b)
                sumsq_ops.append(sumsq)
        self.lamb_ops = tuple(ops_)
        self.lamb_call = aot.caller("ms_optim_lamb")
        self.sumsq_call = aot.caller("ms_optim_sumsq")
        self.decay_masks = tuple(masks)
        self.sumsq_ops = tuple(sumsq_ops)

    # ----------------------------------------------------------------- step --

    POWERS = True

    def _update(self, gradients, lr, weight_decay, beta1_power, beta2_power):
        params = self._parameters
        if self.impl == "native":
            powers = self.concat((beta1_power, beta2_power))
            grad_scale = self.inv_scale
            if self.global_clip:
                # one multi-tensor op per bucket sums the squares of all its gradients
                sq_norms = ()
                for b, (lo, hi) in enumerate(self.buckets):
                    sq_norms = sq_norms + (self.sumsq_call(self.sumsq_ops[b],
                                                           grad=gradients[lo:hi]),)
                # the squared norms are of the loss-scaled gradients
                grad_scale = self.inv_scale * self.grad_clip.factor(sq_norms, self.inv_scale)
            return self._native_step(params, gradients, lr, weight_decay, grad_scale, powers)
        gradients = self.unscale_and_clip(gradients, self.loss_scale != 1.0, self.inv_scale,
                                          self.grad_clip)
        # the step's scalars, computed once for every parameter, of shape () (so that the
        # rule keeps a 0-d parameter's shape; the beta powers are float32[1])
        b1, b2, eps = self.beta1.reshape(()), self.beta2.reshape(()), self.eps.reshape(())
        flag = self.always_adapt
        r1, r2 = _SUB(_ONE, b1), _SUB(_ONE, b2)
        c1, c2 = _SUB(_ONE, beta1_power).reshape(()), _SUB(_ONE, beta2_power).reshape(())
        per_param = (self.lamb_decay_flags, params, self.moment1, self.moment2, gradients)
        if self.is_group_lr or self.is_group:
            lrs, wds = self.per_param_values(lr, weight_decay, len(params))
            ratios = self.map_reverse(F.partial(_ops_step, b1, r1, b2, r2, eps, c1, c2, flag),
                                      lrs, wds, *per_param)
        else:
            ratios = self.map_reverse(F.partial(_ops_step, b1, r1, b2, r2, eps, c1, c2, flag,
                                                lr, weight_decay), *per_param)
        return self.stack(ratios)

    def _native_step(self, params, gradients, lr, weight_decay, grad_scale, powers):
        """Every bucket's multi-tensor kernel; the trust ratios, float32[K]."""
        ratios = ()
        for b, (lo, hi) in enumerate(self.buckets):
            lr_b = self.bucket_values(lr, lo, hi, self.is_group_lr)
            wd_b = self.bucket_values(weight_decay, lo, hi, self.is_group)
            if self.decay_masks[b] is not None:
                wd_b = wd_b * self.decay_masks[b]
            ratios = ratios + (self.lamb_call(
                self.lamb_ops[b], param=params[lo:hi], m=self.moment1[lo:hi],
                v=self.moment2[lo:hi], grad=gradients[lo:hi], lr=lr_b, wd=wd_b,
                gscale=grad_scale, powers=powers, consts=self.consts),)
        return self.concat(ratios) if len(ratios) > 1 else ratios[0]
