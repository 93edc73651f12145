"""AdamOffload: Adam whose moments live and are computed on the host CPU."""
from mindspore.ops import functional as F

from . import _checks, aot
from ._base import _ALWAYS
from ._host import HostMomentOptimizer
from ._step import resolve_impl


class AdamOffload(HostMomentOptimizer):
    r"""Adam whose moments live in host memory and are updated there by a native CPU kernel.

    The API and the update rule of MindSpore's (deprecated) ``nn.AdamOffload``.  Each step,
    for every parameter :math:`w` with gradient :math:`g` (divided by `loss_scale`, plus the
    weight decay :math:`\lambda w` unless `adamw`):

    .. math::
        \begin{array}{l}
            m_{t} = \beta_1 m_{t-1} + (1-\beta_1) g, \quad
            v_{t} = \beta_2 v_{t-1} + (1-\beta_2) g^2, \\
            l_t = \alpha \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}, \quad
            w_{t} = w_{t-1} - l_t \frac{m_{t}}{\sqrt{v_{t}}+\epsilon}
        \end{array}

    :math:`\alpha` is `learning_rate`, :math:`\beta_1, \beta_2` are `beta1` and `beta2`,
    :math:`\epsilon` is `eps`, :math:`\lambda` is `weight_decay`.  With `use_nesterov` the
    numerator is :math:`\beta_1 m_t + (1-\beta_1) g`.  With `adamw` the decay is
    decoupled and there is no bias correction (``nn.AdamWeightDecay``'s rule):
    :math:`w_t = w_{t-1} - \alpha (m_t / (\sqrt{v_t} + \epsilon) + \lambda w_{t-1})`.

    The moments are the Parameters ``moment1`` and ``moment2`` (so checkpoints carry them),
    kept on the host CPU and updated in place by one fused pass of a native kernel (a
    MindSpore AOT custom op pinned to the CPU); one op steps a bucket of up to 256
    parameters of one dtype.  They never occupy device memory.

    Note:
        - `moment_dtype` sets how the moments are stored: ``"float32"`` (8 bytes per
          parameter), ``"bfloat16"`` (4 bytes, rounded to nearest even) or ``"int8"``
          (about 2.03 bytes: 8-bit codes in blocks of 256 elements with one float32
          absmax scale per block, in the Parameters ``moment1_scale`` and
          ``moment2_scale``).  The update itself is always computed in float32.
          ``host_state_nbytes()`` returns the bytes of state held on the host.
        - Without parameter groups, `weight_decay` applies only to the parameters whose
          names contain neither "beta" nor "gamma" (MindSpore's rule); a group's
          ``"weight_decay"`` applies to the whole group.
        - Parameters must be float32 or float16; the moments are kept as set by
          `moment_dtype` in either case.
        - ``current_lr()`` returns the learning rate of the next step as a float (a list,
          one per group, when groups set their own ``"lr"``); ``set_lr(value)`` sets a
          fixed rate for every group (RuntimeError while a schedule drives the rate).

    Args:
        params (Union[list[Parameter], list[dict]]): The parameters to update, or a list of
            parameter groups: dicts with the keys ``"params"`` (required), ``"lr"``,
            ``"weight_decay"`` and ``"order_params"``, as in MindSpore's optimizers.  Each
            parameter may appear once.
        learning_rate (Union[float, int, Tensor, Iterable, LearningRateSchedule], optional):
            A number >= 0, a scalar or 1-D Tensor (or numpy array), an Iterable of per-step
            values (read once: a generator is taken) or a ``LearningRateSchedule``; every
            value finite and >= 0.  A list (or 1-D Tensor) has a value per step: a run past
            its end raises ValueError, naming it, when the optimizer is called from Python
            (PyNative); inside a compiled train step (GRAPH_MODE) MindSpore's Gather raises
            RuntimeError at that step.  Default: ``1e-3``.
        beta1 (float, optional): Decay rate of the first moment, in (0.0, 1.0).
            Default: ``0.9``.
        beta2 (float, optional): Decay rate of the second moment, in (0.0, 1.0).
            Default: ``0.999``.
        eps (float, optional): Added to :math:`\sqrt{v}`; must be greater than 0 also when
            rounded to float32 (``1e-46`` is 0 there).  Default: ``1e-8``.
        use_locking (bool, optional): Accepted for compatibility with ``nn.AdamOffload``
            and checked to be a bool; it has no effect (each bucket of parameters is
            updated by one kernel call).  Default: ``False``.
        use_nesterov (bool, optional): Use Nesterov momentum.  Default: ``False``.
        weight_decay (Union[float, int, Cell], optional): L2 penalty, a number >= 0, or a
            Cell that maps the global step to the weight decay.  Default: ``0.0``.
        loss_scale (Union[float, int], optional): The gradients are divided by it; must be
            finite and greater than 0.  Default: ``1.0``.
        impl (str, optional): Where the parameter update runs.  ``"native"``: the kernel
            that updates the moments also updates the parameter (host memory, CPU device
            target).  ``"delta"``: the kernel returns the step and ``param += step`` runs
            on the parameter's device (GPU/Ascend).  ``"auto"``: ``"native"`` on a CPU
            device target, else ``"delta"``.  Default: ``"auto"``.
        moment_dtype (str, optional): ``"float32"``, ``"bfloat16"`` or ``"int8"``, as in
            the note above.  Default: ``"float32"``.
        adamw (bool, optional): Decoupled weight decay without bias correction
            (``nn.AdamWeightDecay``'s rule).  The other defaults stay ``nn.Adam``'s:
            ``nn.AdamWeightDecay`` defaults to ``eps=1e-6``, so pass ``eps=1e-6`` to step as
            it does.  Default: ``False``.

    Inputs:
        - **gradients** (tuple[Tensor]) - The gradients of `params`, of the same shapes.

    Outputs:
        bool, ``True`` (the updates are side effects on the Parameters).

    Raises:
        TypeError: If a keyword argument is not one of the constructor's (the message
            names the argument meant: ``lr`` -> ``learning_rate``, a misspelling).
        TypeError: If `params` is not a list of Parameter or a list of dict (a single
            Parameter or dict included), or mixes them.
        TypeError: If `learning_rate` is not an int, float, Tensor, Iterable or
            LearningRateSchedule (a bool included).
        TypeError: If `beta1`, `beta2` or `eps` is not a float, or `loss_scale` is not a
            float or an int (numpy's are taken, a bool is neither).
        TypeError: If `weight_decay` is neither a float, an int nor a Cell.
        TypeError: If `use_locking`, `use_nesterov` or `adamw` is not a bool.
        TypeError: If a parameter is neither float32 nor float16.
        ValueError: If `params` is empty, or a parameter is given twice (the same object,
            or two Parameters of one name).
        ValueError: If `learning_rate` (or a group's ``"lr"``) is less than 0 or not finite,
            a Tensor or numpy array of more than one dimension, or a sequence that is empty,
            nested, or holds a value less than 0 or not finite.
        ValueError: If `beta1` or `beta2` is not in range (0.0, 1.0).
        ValueError: If `eps` is not greater than 0 in float32, or `loss_scale` is not
            finite and greater than 0.
        ValueError: If `weight_decay` is less than 0 or not finite.
        ValueError: If a parameter group sets ``"grad_centralization"`` (not supported).
        TypeError: If `impl` or `moment_dtype` is not a str.
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

        Verified on CPU, where ``impl="native"`` and ``impl="delta"`` are both tested.  On
        GPU and Ascend, ``impl="auto"`` runs ``"delta"`` through MindSpore's host/device
        mechanism (the host op beside device ops, as ``nn.AdamOffload``); that path is not
        tested on those devices.

    Examples:
        >>> import numpy as np
        >>> import mindspore as ms
        >>> from mindspore import nn
        >>> import ms_optim
        >>> net = nn.Dense(4, 2, weight_init="ones", bias_init="zeros")
        >>> opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=1e-3,
        ...                            weight_decay=1e-4)
        >>> opt.host_state_nbytes()  # two float32 moments of 10 elements, two beta powers
        88
        >>> train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        >>> x = ms.Tensor(np.ones((8, 4), np.float32))
        >>> y = ms.Tensor(np.zeros((8, 2), np.float32))
        >>> float(train(x, y))  # one step; the loss before it
        16.0
        >>> print(net.weight.asnumpy().round(4))  # Adam's first step: each weight moves by lr
        [[0.999 0.999 0.999 0.999]
         [0.999 0.999 0.999 0.999]]
        >>> # or hand the optimizer to ms.Model
        >>> data = ms.dataset.NumpySlicesDataset(
        ...     (np.ones((8, 4), np.float32), np.zeros((8, 2), np.float32)),
        ...     column_names=["x", "y"], shuffle=False).batch(4)
        >>> model = ms.Model(net, loss_fn=nn.MSELoss(), optimizer=opt)
        >>> model.train(1, data, dataset_sink_mode=False)
        >>> int(opt.global_step.asnumpy()[0])  # one step above, two batches here
        3

    See docs/adam_offload.md for the paths, the moment storage, float16 and checkpoints.
    """

    _NAME = "AdamOffload"
    RULE = "adam"
    MOMENTS = ("moment1", "moment2")
    POWERS = True
    # moment_dtype and adamw appear in repr only when they differ from the defaults
    _REPR_OMITS = {"use_locking": _ALWAYS, "moment_dtype": "float32", "adamw": False}

    def __init__(self, params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
                 use_locking=False, use_nesterov=False, weight_decay=0.0, loss_scale=1.0,
                 impl="auto", moment_dtype="float32", adamw=False):
        cls = self._NAME
        params = _checks.check_params(cls, params)
        learning_rate = _checks.check_learning_rate(cls, learning_rate)
        beta1 = _checks.check_open_unit(cls, "beta1", _checks.check_float(cls, "beta1", beta1),
                                        in_float32=True)
        beta2 = _checks.check_open_unit(cls, "beta2", _checks.check_float(cls, "beta2", beta2),
                                        in_float32=True)
        eps = _checks.check_float32_positive(cls, "eps", _checks.check_float(cls, "eps", eps))
        _checks.check_bool(cls, "use_locking", use_locking)
        _checks.check_bool(cls, "use_nesterov", use_nesterov)
        _checks.check_bool(cls, "adamw", adamw)
        _checks.check_choice(cls, "moment_dtype", moment_dtype, aot.MOMENT_DTYPES)
        weight_decay = _checks.check_weight_decay(cls, weight_decay)
        loss_scale = _checks.check_loss_scale(cls, loss_scale)
        impl = resolve_impl(cls, impl, ("native", "delta"), "delta")
        # The native kernel divides by the loss scale itself (after the decay, as scale_grad
        # would); on the delta path the device does both first.
        fields = dict(beta1=beta1, beta2=beta2, eps=eps,
                      inv_scale=1.0 / loss_scale if impl == "native" else 1.0,
                      nesterov=use_nesterov)
        consts = (aot.consts("adam_ext", decoupled=1, **fields) if adamw
                  else aot.consts("adam", **fields))
        self._build(params, locals(), learning_rate, weight_decay, loss_scale, impl,
                    moment_dtype, consts, decoupled=adamw, betas=(beta1, beta2))
        self.use_nesterov = use_nesterov
        self.adamw = adamw

    def host_state_nbytes(self):
        """Bytes of optimizer state in host memory: the moments, their scales (int8) and
        the beta powers."""
        state = (tuple(self.moment1) + tuple(self.moment2) + tuple(self.moment1_scale)
                 + tuple(self.moment2_scale) + (self.beta1_power, self.beta2_power))
        return sum(int(p.nbytes) for p in state)

    def _apply_delta(self, param, step, lr, wd):
        """AdamW's delta-path update on the device: p + (step - lr * wd * p)."""
        return F.assign_add(param, step - F.cast(lr * wd, F.dtype(param)) * param)
