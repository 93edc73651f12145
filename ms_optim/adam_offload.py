"""AdamOffload: Adam whose moments live and are computed on the host CPU."""
from mindspore import Parameter, ParameterTuple, Tensor, context, nn, ops
from mindspore import dtype as mstype
from mindspore.common.initializer import initializer
from mindspore.ops import DataType
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from . import _checks, _native
from ._api import OptimizerAPI
from ._state import BetaPowers

_ZERO = Tensor(0.0, mstype.float32)
_F32, _F16 = DataType.F32_Default, DataType.F16_Default

_inplace_step = C.MultitypeFuncGraph("ms_optim_adam_offload_inplace")
_delta_step = C.MultitypeFuncGraph("ms_optim_adam_offload_delta")


@_inplace_step.register("Function", "Tensor", "Tensor", "Tensor", "Bool", "Tensor", "Tensor",
                        "Tensor", "Tensor")
def _run_inplace(op, consts, lr, weight_decay, decay_flag, param, m, v, grad):
    """One fused host pass: decay, unscale, moments and the parameter update."""
    weight_decay = weight_decay if decay_flag else _ZERO
    return F.depend(True, op(param, m, v, grad, lr, weight_decay, consts))


@_delta_step.register("Function", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor")
def _run_delta(op, consts, lr, param, m, v, grad):
    """Moments and step on the host; only the step is added to the device parameter."""
    delta = op(m, v, grad, lr, consts)
    return F.depend(True, F.assign_add(param, delta))


class AdamOffload(OptimizerAPI, BetaPowers, nn.Optimizer):
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
    time, OpenMP threads).  On a CPU device target the same pass also updates
    the parameter (``impl="inplace"``); on GPU/Ascend the host kernel returns
    the step and only ``param += step`` runs on the device (``impl="delta"``),
    so the moments never occupy device memory.  Parameters may be float32 or
    float16 (moments stay float32).

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
        impl (str): "auto" (default), "inplace" or "delta", as above.

    Inputs:
        gradients (tuple[Tensor]): gradients of ``params``.

    Outputs:
        tuple[bool], all True.

    Raises:
        TypeError: `learning_rate` is not an int, float, Tensor, Iterable or LearningRateSchedule.
        TypeError: an element of `params` is neither a Parameter nor a dict.
        TypeError: `beta1`, `beta2`, `eps` or `loss_scale` is not a float.
        TypeError: `weight_decay` is neither a float, an int nor a Cell.
        TypeError: `use_locking` or `use_nesterov` is not a bool.
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
                 impl="auto"):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        _checks.check_learning_rate(cls, learning_rate)
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1))
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2))
        eps = _checks.check_float32_positive(cls, "eps", _checks.check_float(cls, "eps", eps))
        _checks.check_bool(cls, "use_locking", use_locking)
        _checks.check_bool(cls, "use_nesterov", use_nesterov)
        _checks.check_weight_decay(cls, weight_decay)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        _checks.check_choice(cls, "impl", impl, ("auto", "inplace", "delta"))
        super().__init__(learning_rate, params, weight_decay, loss_scale)
        _checks.check_param_dtypes(cls, self._parameters, (mstype.float32, mstype.float16))

        if impl == "auto":
            impl = "inplace" if context.get_context("device_target") == "CPU" else "delta"
        self._record_args(params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                          use_nesterov=use_nesterov, weight_decay=weight_decay,
                          loss_scale=loss_scale, impl=impl)
        self.impl = impl
        self.use_nesterov = use_nesterov
        self._init_beta_powers(beta1, beta2)
        # The inplace kernel divides by the loss scale itself (after the decay,
        # as scale_grad would); on the delta path the device does both first.
        inv_scale = 1.0 / loss_scale if impl == "inplace" else 1.0
        self._static_consts = (Tensor([eps], mstype.float32), Tensor([inv_scale], mstype.float32),
                               Tensor([1.0 if use_nesterov else 0.0], mstype.float32))
        self.moment1 = self._host_state("moment1")
        self.moment2 = self._host_state("moment2")
        self.decay_flags_eff = tuple(f and self.exec_weight_decay for f in self.decay_flags)
        self.concat = ops.Concat()
        if impl == "inplace":
            self.op = _native.aot_op(
                "ms_optim_adam_inplace", out_shape=lambda *shapes: [1],
                out_dtype=lambda *dtypes: mstype.float32,
                inputs=("param", "m", "v", "grad", "lr", "wd", "consts"), outputs=("done",),
                dtype_formats=[(_F32,) * 8, (_F16, _F32, _F32, _F16, _F32, _F32, _F32, _F32)],
                inplace=True)
        else:
            self.op = _native.aot_op(
                "ms_optim_adam_delta", out_shape=lambda m, v, g, lr, c: g,
                out_dtype=lambda m, v, g, lr, c: g,
                inputs=("m", "v", "grad", "lr", "consts"), outputs=("delta",),
                dtype_formats=[(_F32,) * 6, (_F32, _F32, _F16, _F32, _F32, _F16)], inplace=True)

    def _host_state(self, prefix):
        """float32 zeros shaped like each parameter, named like MindSpore's clone()."""
        return ParameterTuple(
            Parameter(initializer("zeros", p.shape, mstype.float32), name=f"{prefix}.{p.name}")
            for p in self._parameters)

    def construct(self, gradients):
        params = self._parameters
        gradients = self.flatten_gradients(gradients)
        if self.impl == "delta":
            gradients = self.decay_weight(gradients)
            gradients = self.scale_grad(gradients)
        lr = self.get_lr()
        weight_decay = self.get_weight_decay()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        beta1_power, beta2_power = self._advance_beta_powers()
        eps, inv_scale, nesterov = self._static_consts
        consts = self.concat((self.beta1, self.beta2, eps, beta1_power, beta2_power, inv_scale,
                              nesterov))
        if self.impl == "delta":
            if self.is_group_lr:
                return self.map_reverse(F.partial(_delta_step, self.op, consts), lr, params,
                                        self.moment1, self.moment2, gradients)
            return self.map_reverse(F.partial(_delta_step, self.op, consts, lr), params,
                                    self.moment1, self.moment2, gradients)
        if self.is_group_lr:
            return self.map_reverse(F.partial(_inplace_step, self.op, consts), lr, weight_decay,
                                    self.decay_flags_eff, params, self.moment1, self.moment2,
                                    gradients)
        if self.is_group:
            return self.map_reverse(F.partial(_inplace_step, self.op, consts, lr), weight_decay,
                                    self.decay_flags_eff, params, self.moment1, self.moment2,
                                    gradients)
        return self.map_reverse(F.partial(_inplace_step, self.op, consts, lr, weight_decay),
                                self.decay_flags_eff, params, self.moment1, self.moment2,
                                gradients)
