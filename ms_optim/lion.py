"""Lion: the sign of an interpolated momentum, its one moment on the host CPU."""
from mindspore.ops import functional as F

from . import _checks, aot
from ._host import HostMomentOptimizer
from ._step import resolve_impl


class Lion(HostMomentOptimizer):
    r"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"), its moment
    in host memory, updated there by a native CPU kernel.

    Each step, for every parameter :math:`w` with gradient :math:`g` (divided by
    `loss_scale`):

    .. math::
        \begin{array}{l}
            c_t = \beta_1 m_{t-1} + (1-\beta_1) g, \quad
            w_t = w_{t-1} (1 - \alpha\lambda) - \alpha\,\mathrm{sign}(c_t), \\
            m_t = \beta_2 m_{t-1} + (1-\beta_2) g
        \end{array}

    :math:`\alpha` is `learning_rate`, :math:`\beta_1, \beta_2` are `beta1` and `beta2`,
    :math:`\lambda` is `weight_decay` (decoupled, as AdamW's), and
    :math:`\mathrm{sign}(0) = 0`.  Every element moves by exactly :math:`\alpha` (plus the
    decay), so Lion's learning rate is usually 3 to 10 times smaller than AdamW's and its
    weight decay 3 to 10 times larger.  A NaN or infinite gradient makes the parameter NaN,
    as with Adam.

    Lion keeps one moment where Adam keeps two: ``moment``, a Parameter per parameter (so
    checkpoints carry it), kept on the host CPU and updated in place by one fused pass of a
    native kernel (a MindSpore AOT custom op pinned to the CPU); one op steps a bucket of up
    to 256 parameters of one dtype.

    Note:
        - `moment_dtype` sets how the moment is stored: ``"float32"`` (4 bytes per
          parameter), ``"bfloat16"`` (2 bytes, rounded to nearest even) or ``"int8"``
          (about 1.02 bytes: AdamOffload's 8-bit codes of its first moment in blocks of
          256 elements, one float32 absmax scale per block in ``moment_scale``).  The
          update is always computed in float32.  ``host_state_nbytes()`` returns the
          bytes of state held on the host.
        - Without parameter groups, `weight_decay` applies only to the parameters whose
          names contain neither "beta" nor "gamma" (MindSpore's rule); a group's
          ``"weight_decay"`` applies to the whole group.  A Cell `weight_decay` maps the
          global step to the decay.
        - Parameters must be float32 or float16.
        - ``current_lr()`` returns the learning rate of the next step; ``set_lr(value)``
          sets a fixed rate for every group (RuntimeError while a schedule drives it).

    Args:
        params (Union[list[Parameter], list[dict]]): The parameters to update, or a list of
            parameter groups: dicts with the keys ``"params"`` (required), ``"lr"``,
            ``"weight_decay"`` and ``"order_params"``, as in MindSpore's optimizers.  Each
            parameter may appear once.
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule], optional):
            A number >= 0, a scalar or 1-D Tensor (or numpy array), an Iterable of per-step
            values or a ``LearningRateSchedule``; every value finite and >= 0.  A list (or
            1-D Tensor) has a value per step: a run past its end raises ValueError, naming
            it, when the optimizer is called from Python (PyNative); inside a compiled
            train step (GRAPH_MODE) MindSpore's Gather raises RuntimeError at that step.
            Default: ``1e-4``.
        beta1 (float, optional): The interpolation whose sign is the step, in (0.0, 1.0).
            Default: ``0.9``.
        beta2 (float, optional): The decay rate of the moment, in (0.0, 1.0).
            Default: ``0.99``.
        weight_decay (Union[float, int, Cell], optional): Decoupled weight decay, a number
            >= 0, or a Cell that maps the global step to it.  Default: ``0.0``.
        loss_scale (Union[float, int], optional): The gradients are divided by it; must be
            finite and greater than 0.  Default: ``1.0``.
        impl (str, optional): Where the parameter update runs.  ``"native"``: the kernel
            that updates the moment also updates the parameter (host memory, CPU device
            target).  ``"delta"``: the kernel returns the step and the parameter's device
            applies the decay and adds it (GPU/Ascend).  ``"auto"``: ``"native"`` on a CPU
            device target, else ``"delta"``.  Default: ``"auto"``.
        moment_dtype (str, optional): ``"float32"``, ``"bfloat16"`` or ``"int8"``, as in
            the note above.  Default: ``"float32"``.

    Inputs:
        - **gradients** (tuple[Tensor]) - The gradients of `params`, of the same shapes.

    Outputs:
        bool, ``True`` (the updates are side effects on the Parameters).

    Raises:
        TypeError: If a keyword argument is not one of the constructor's (the message
            names the argument meant: ``lr`` -> ``learning_rate``, a misspelling).
        TypeError: If `params` is not a list of Parameter or a list of dict, or mixes them.
        TypeError: If `learning_rate` is not an int, float, Tensor, Iterable or
            LearningRateSchedule (a bool included).
        TypeError: If `beta1` or `beta2` is not a float, or `loss_scale` is not a float or
            an int.
        TypeError: If `weight_decay` is neither a float, an int nor a Cell.
        TypeError: If a parameter is neither float32 nor float16.
        TypeError: If `impl` or `moment_dtype` is not a str.
        ValueError: If `params` is empty, or a parameter is given twice.
        ValueError: If `learning_rate` (or a group's ``"lr"``) is less than 0 or not finite,
            or a sequence that is empty, nested, or holds such a value.
        ValueError: If `beta1` or `beta2` is not in range (0.0, 1.0).
        ValueError: If `loss_scale` is not finite and greater than 0, or `weight_decay`
            is less than 0 or not finite.
        ValueError: If a parameter group sets ``"grad_centralization"`` (not supported).
        ValueError: If `impl` is not one of ``"auto"``, ``"native"``, ``"delta"``, or
            `moment_dtype` not one of ``"float32"``, ``"bfloat16"``, ``"int8"``.
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

        Verified on CPU, where ``impl="native"`` and ``impl="delta"`` are both tested; on
        GPU and Ascend, ``"delta"`` runs as AdamOffload's does (not tested there).

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(4, 2, weight_init="ones", bias_init="zeros")
        >>> opt = ms_optim.Lion(net.trainable_params(), learning_rate=1e-3)
        >>> opt.host_state_nbytes()  # one float32 moment of 10 elements
        40
        >>> train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        >>> x = ms.Tensor(np.ones((8, 4), np.float32))
        >>> y = ms.Tensor(np.zeros((8, 2), np.float32))
        >>> float(train(x, y))  # one step; the loss before it
        16.0
        >>> print(net.weight.asnumpy().round(4))  # every weight moves by lr
        [[0.999 0.999 0.999 0.999]
         [0.999 0.999 0.999 0.999]]

    See docs/lion.md for the moment storage, the paths and checkpoints.
    """

    _NAME = "Lion"
    RULE = "lion"
    MOMENTS = ("moment",)
    _REPR_OMITS = {"moment_dtype": "float32"}  # shown when it is not the default

    def __init__(self, params, learning_rate=1e-4, beta1=0.9, beta2=0.99, weight_decay=0.0,
                 loss_scale=1.0, impl="auto", moment_dtype="float32"):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        learning_rate = _checks.check_learning_rate(cls, learning_rate)
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1),
                                        in_float32=True)
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2),
                                        in_float32=True)
        _checks.check_choice(cls, "moment_dtype", moment_dtype, aot.MOMENT_DTYPES)
        weight_decay = _checks.check_weight_decay(cls, weight_decay)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        impl = resolve_impl(cls, impl, ("native", "delta"), "delta")
        # the native kernel divides by the loss scale itself; on the delta path the device
        # does it first.
        consts = aot.consts("lion", beta1=beta1, beta2=beta2,
                            inv_scale=1.0 / loss_scale if impl == "native" else 1.0)
        self._build(params, locals(), learning_rate, weight_decay, loss_scale, impl,
                    moment_dtype, consts, decoupled=True)

    def host_state_nbytes(self):
        """Bytes of optimizer state in host memory: the moment and its scales (int8)."""
        return sum(int(p.nbytes) for p in tuple(self.moment) + tuple(self.moment_scale))

    def _apply_delta(self, param, step, lr, wd):
        """The delta path's update on the device: p * (1 - lr * wd) + step, the native
        kernel's rule (rules::lion_apply)."""
        keep = F.cast(1.0 - lr * wd, F.dtype(param))
        return F.assign(param, param * keep + step)
