"""AdamOffload: Adam whose moments live and are computed on the host CPU."""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.common.initializer import initializer
from mindspore.ops import functional as F

from . import _checks, kernels
from ._api import OptimizerAPI
from ._state import BetaPowers
from ._step import StepSkeleton, resolve_impl


class AdamOffload(OptimizerAPI, StepSkeleton, BetaPowers, nn.Optimizer):
    r"""Adam with its moments kept and updated in host memory by a native CPU kernel.

    The API and the update rule of MindSpore's (deprecated) ``nn.AdamOffload``:

    .. math::
        m_{t+1} = \beta_1 m_t + (1-\beta_1) g,\quad
        v_{t+1} = \beta_2 v_t + (1-\beta_2) g^2,\quad
        l = \alpha \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t},\quad
        w_{t+1} = w_t - l \frac{m_{t+1}}{\sqrt{v_{t+1}}+\epsilon}

    With ``use_nesterov`` the numerator is :math:`\beta_1 m_{t+1} + (1-\beta_1) g`.
    Weight decay adds ``weight_decay * w`` to the gradient; without groups it
    applies only to parameters whose names contain neither "beta" nor "gamma".

    The moments ``moment1``/``moment2`` are float32 Parameters (so checkpoints
    carry them) updated in place by one fused pass of a native kernel pinned to
    the host CPU (a MindSpore AOT custom op, AVX-512/AVX2/scalar chosen at run
    time, OpenMP threads).  One op steps a bucket of up to 256 parameters of
    one dtype (a multi-tensor kernel: all their elements split once over the
    threads).  On a CPU device target the same pass also updates the
    parameter (``impl="native"``); on GPU/Ascend the host kernel returns the
    step and only ``param += step`` runs on the device (``impl="delta"``), so
    the moments never occupy device memory.  Parameters may be float32 or
    float16.

    ``moment_dtype`` sets how the moments are stored (docs/ALGORITHMS.md §1.1):
    "float32" (8 bytes per parameter), "bfloat16" (4: rounded to nearest even)
    or "int8" (about 2.03: m and v as 8-bit codes in blocks of 256 elements,
    one float32 absmax scale per block for each, kept in the Parameters
    ``moment1_scale``/``moment2_scale``).  The kernel decodes them to float32,
    steps and encodes them again in its one pass; the update math is the
    float32 rule.  ``host_state_nbytes()`` counts the bytes held.

    bfloat16 parameters are refused: MindSpore 2.10 on CPU has no bfloat16
    MatMul (a bfloat16 ``nn.Dense`` fails forward and backward), AssignAdd
    (the delta path's update) or Adam kernel, though an AOT op does receive
    bfloat16 tensors (dtype string "bfloat16").

    ``adamw=True`` replaces the coupled L2 decay by ``nn.AdamWeightDecay``'s
    rule: no bias correction, ``p -= lr * (m / (sqrt(v) + eps) + wd * p)``.

    Args:
        params (Union[list[Parameter], list[dict]]): parameters, or groups with
            keys "params", "lr", "weight_decay", "order_params".
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule]): default 1e-3.
        beta1 (float): in (0, 1). Default 0.9.
        beta2 (float): in (0, 1). Default 0.999.
        eps (float): > 0, added to :math:`\sqrt{v}`. Default 1e-8.
        use_locking (bool): accepted for API compatibility; each parameter's
            update is a single kernel call, so there is nothing to lock.
        use_nesterov (bool): Nesterov momentum. Default False.
        weight_decay (Union[float, int, Cell]): L2 penalty, >= 0, or a Cell of
            the global step. Default 0.0.
        loss_scale (float): gradients are divided by it. Default 1.0.
        impl (str): "auto" (default), "native" or "delta", as above
            (``ms_optim._step``; "inplace", the old name of "native", is accepted).
        moment_dtype (str): "float32" (default), "bfloat16" or "int8", as above.
        adamw (bool): decoupled weight decay (``nn.AdamWeightDecay``'s rule). Default False.

    Inputs:
        gradients (tuple[Tensor]): gradients of ``params``.

    Outputs:
        tuple[bool], all True.

    Raises:
        TypeError: `learning_rate` is not an int, float, Tensor, Iterable or LearningRateSchedule.
        TypeError: an element of `params` is neither a Parameter nor a dict.
        TypeError: `beta1`, `beta2`, `eps` or `loss_scale` is not a float.
        TypeError: `weight_decay` is neither a float, an int nor a Cell.
        TypeError: `use_locking`, `use_nesterov` or `adamw` is not a bool.
        ValueError: `moment_dtype` is not one of "float32", "bfloat16", "int8".
        TypeError: a parameter is neither float32 nor float16.
        ValueError: `loss_scale` or `eps` is not greater than 0 (`eps` in float32:
            1e-46 is 0 there).
        ValueError: a parameter is given twice (same object or same name).
        ValueError: `beta1` or `beta2` is not in range (0.0, 1.0).
        ValueError: `weight_decay` is less than 0.

    Learning rate: ``get_lr()`` is MindSpore's ``nn.Optimizer.get_lr`` (used
    inside ``construct``); from Python, ``current_lr()`` returns the next
    step's rate as a float (one per group when groups set their own 'lr') and
    ``set_lr(value)`` sets a fixed rate for all groups (RuntimeError while a
    schedule drives it), as on every ms_optim optimizer (see ``ms_optim._api``).

    Example:
        >>> import mindspore as ms
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(4, 2)
        >>> opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=1e-3)
        >>> model = ms.Model(net, loss_fn=nn.MSELoss(), optimizer=opt)
    """

    _NAME = "AdamOffload"

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 use_locking=False, use_nesterov=False, weight_decay=0.0, loss_scale=1.0,
                 impl="auto", moment_dtype="float32", adamw=False):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        _checks.check_learning_rate(cls, learning_rate)
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1))
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2))
        eps = _checks.check_float32_positive(cls, "eps", _checks.check_float(cls, "eps", eps))
        _checks.check_bool(cls, "use_locking", use_locking)
        _checks.check_bool(cls, "use_nesterov", use_nesterov)
        _checks.check_bool(cls, "adamw", adamw)
        _checks.check_choice(cls, "moment_dtype", moment_dtype, kernels.MOMENT_DTYPES)
        _checks.check_weight_decay(cls, weight_decay)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        impl = resolve_impl(cls, impl, ("native", "delta"), "delta", {"inplace": "native"})
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        _checks.check_param_dtypes(cls, self._parameters, (mstype.float32, mstype.float16))

        # the options of issue 14 appear in repr only when set
        extra = {} if moment_dtype == "float32" else {"moment_dtype": moment_dtype}
        if adamw:
            extra["adamw"] = True
        self._record_args(params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                          use_nesterov=use_nesterov, weight_decay=weight_decay,
                          loss_scale=loss_scale, impl=impl, **extra)
        self.impl = impl
        self.use_nesterov = use_nesterov
        self.moment_dtype = moment_dtype
        self.adamw = adamw
        self._init_beta_powers(beta1, beta2)
        self._init_skeleton()
        # The native kernel divides by the loss scale itself (after the decay,
        # as scale_grad would); on the delta path the device does both first.
        fields = dict(beta1=beta1, beta2=beta2, eps=eps,
                      inv_scale=1.0 / loss_scale if impl == "native" else 1.0,
                      nesterov=use_nesterov)
        self.consts = (kernels.consts("adam_ext", decoupled=1, **fields) if adamw
                       else kernels.consts("adam", **fields))
        # AdamW's decay is not scaled by the loss scale (nn.Optimizer stores wd * loss_scale)
        self.inv_loss_scale = 1.0 / loss_scale
        m_dtype, v_dtype, self.scaled = kernels.moment_storage(moment_dtype)
        self.moment1 = self._host_state("moment1", m_dtype)
        self.moment2 = self._host_state("moment2", v_dtype)
        if self.scaled:
            block = kernels.q8_block()
            self.moment1_scale = self._host_state("moment1_scale", mstype.float32, block)
            self.moment2_scale = self._host_state("moment2_scale", mstype.float32, block)
        else:
            self.moment1_scale = self.moment2_scale = ParameterTuple(())
        self.concat = ops.Concat()
        self.buckets = kernels.buckets([p.dtype for p in self._parameters])
        self.adam_ops = tuple(kernels.adam_op(hi - lo, self._parameters[lo].dtype, impl == "delta",
                                              moment_dtype)
                              for lo, hi in self.buckets)
        # weight decay per parameter: MindSpore's decay flags (no groups: parameters named
        # beta/gamma are not decayed) as a 0/1 mask per bucket, None where all or none decay
        flags = tuple(f and self.exec_weight_decay for f in self.decay_flags)
        self.decay_masks = tuple(None if all(flags[lo:hi]) or not any(flags[lo:hi]) else
                                 Tensor(np.array(flags[lo:hi], np.float32))
                                 for lo, hi in self.buckets)
        # a bucket none of whose parameters decay gets a constant 0 (no graph op)
        self.no_decay = tuple(not any(flags[lo:hi]) for lo, hi in self.buckets)
        self.zero_wd = Tensor(0.0, mstype.float32)

    def _host_state(self, prefix, dtype, block=None):
        """Zeros of `dtype` shaped like each parameter (or one per `block` elements of it,
        flat), named like MindSpore's clone()."""
        def shape(p):
            return p.shape if block is None else (-(-int(np.prod(p.shape)) // block),)
        return ParameterTuple(
            Parameter(initializer("zeros", shape(p), dtype), name=f"{prefix}.{p.name}")
            for p in self._parameters)

    def host_state_nbytes(self):
        """Bytes of optimizer state in host memory: the moments, their scales (int8) and
        the beta powers."""
        state = (tuple(self.moment1) + tuple(self.moment2) + tuple(self.moment1_scale)
                 + tuple(self.moment2_scale) + (self.beta1_power, self.beta2_power))
        return sum(int(p.nbytes) for p in state)

    def construct(self, gradients):
        params = self._parameters
        gradients = self.flatten_gradients(gradients)
        if self.impl == "delta":
            if not self.adamw:
                gradients = self.decay_weight(gradients)
            gradients = self.scale_grad(gradients)
        lr = self.get_lr()
        weight_decay = self.get_weight_decay()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        beta1_power, beta2_power = self._advance_beta_powers()
        powers = self.concat((beta1_power, beta2_power))
        done = True
        for b, (lo, hi) in enumerate(self.buckets):
            lr_b = self.per_tensor(lr, lo, hi, self.is_group_lr)
            state = self.moment1[lo:hi] + self.moment2[lo:hi]
            if self.scaled:
                state = state + self.moment1_scale[lo:hi] + self.moment2_scale[lo:hi]
            state = state + gradients[lo:hi]
            if self.impl == "delta":
                deltas = self.adam_ops[b](*state, lr_b, powers, self.consts)
                if hi - lo == 1:
                    deltas = (deltas,)
                for j in range(hi - lo):
                    step = deltas[j]
                    if self.adamw and self.decay_flags[lo + j] and self.exec_weight_decay:
                        step = step - self._adamw_decay(lr, weight_decay, lo + j, params[lo + j])
                    done = F.depend(done, F.assign_add(params[lo + j], step))
            else:
                if self.no_decay[b]:
                    wd_b = self.zero_wd
                else:
                    wd_b = self.per_tensor(weight_decay, lo, hi, self.is_group)
                    if self.decay_masks[b] is not None:
                        wd_b = wd_b * self.decay_masks[b]
                if self.adamw:
                    wd_b = wd_b * self.inv_loss_scale
                done = F.depend(done, self.adam_ops[b](*(params[lo:hi] + state), lr_b, wd_b,
                                                        powers, self.consts))
        return done

    def _adamw_decay(self, lr, weight_decay, i, param):
        """The delta path's AdamW decay of parameter i, lr * wd * p, on the device."""
        lr_i = lr[i] if self.is_group_lr else lr
        wd_i = (weight_decay[i] if self.is_group else weight_decay) * self.inv_loss_scale
        return F.cast(lr_i * wd_i, F.dtype(param)) * param
