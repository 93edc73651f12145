"""The base class of every ms_optim optimizer (``Optimizer``): construction, learning-rate
access, repr, and the graph-side helpers of a step.

A subclass's ``__init__`` is bound once, when the class is made: unknown keywords are
refused with one hint, a missing argument names the optimizer, and the arguments are kept
for ``repr`` (``_record_args``).  Its step is the one ``construct`` here (gradients checked
and flattened, ``_prepare``, ``_open_step``, then the subclass's ``_update``); DGCMomentum
alone has its own.  Inside ``construct``, ``check_gradients``,
``bucket_values``, ``per_param_values`` and ``unscale_and_clip`` (``_step.GraphHelpers``) and the
beta powers (``_init_beta_powers``, ``_advance_beta_powers``) are the shared pieces.

``get_lr()`` is MindSpore's ``nn.Optimizer.get_lr`` (called inside
``construct``; it returns the rate as graph values), with one check where the
rate is a list: a step past its last value raises ValueError.  From Python:

- ``current_lr()``: the learning rate of the next step as a Python float, or,
  when parameter groups set their own ``'lr'``, a list with one float per
  group in the order the groups were given (``'order_params'`` entries
  skipped).  A schedule (LearningRateSchedule, list or 1-D Tensor) is
  evaluated at the optimizer's ``global_step``.
- ``set_lr(value)``: sets a fixed learning rate (a float or int >= 0) for
  every parameter, every group included, from the next step on.  It raises
  TypeError for a non-number, ValueError for a negative or non-finite value,
  and RuntimeError when the rate is a schedule (LearningRateSchedule, list or
  1-D Tensor, for the optimizer or any group): the schedule would be
  silently discarded.
"""
import functools
import inspect
import math
import numbers

from mindspore import Parameter, Tensor
from mindspore import nn
from mindspore.common.initializer import initializer
from mindspore.graph.api import jit
from mindspore.nn import Cell
from mindspore import dtype as mstype
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

from . import _checks
from ._step import GraphHelpers

_ALWAYS = object()  # in _REPR_OMITS: the argument is never shown


def _fmt(value):
    """A short, readable form of one constructor argument."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, Tensor):
        if value.ndim == 0:
            return f"Tensor({value.asnumpy().item()!r})"
        return f"Tensor(shape={tuple(value.shape)})"
    if isinstance(value, (list, tuple)):
        # Parameters by name; a plain list or tuple (a subclass such as ParameterTuple may
        # not take names)
        names = [v.name if isinstance(v, Parameter) else v for v in value]
        value = names if isinstance(value, list) else tuple(names)
        if len(value) <= 8 and all(isinstance(v, (numbers.Real, str)) for v in value):
            return repr(value)
        return f"{type(value).__name__}(len={len(value)})"
    if isinstance(value, LearningRateSchedule):
        return type(value).__name__
    if isinstance(value, Cell) or not callable(value):
        text = repr(value)  # clip cells and regularizers show their settings
        if "\n" not in text and len(text) <= 80 and " object at 0x" not in text:
            return text
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return type(value).__name__


def _missing(signature, args, kwargs):
    """Every required argument of `signature` (self's included) that a call with `args`
    (after self) and `kwargs` leaves out, as a phrase; "" when none is missing."""
    required = [p.name for p in signature.parameters.values()
                if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    missing = [n for n in required[1 + len(args):] if n not in kwargs]
    if not missing:
        return ""
    names = ", ".join(f"'{n}'" for n in missing)
    return f"missing {len(missing)} required argument{'s' * (len(missing) > 1)}: {names}"


def _capturing(cls, init):
    """`init` (an optimizer's own __init__) behind one binding of its arguments: an unknown
    keyword raises the TypeError of ``_checks.check_keywords`` (naming the argument meant,
    with the class's ``_KEYWORD_NAMES`` and ``_KEYWORD_NOTE``), a missing or surplus
    argument a TypeError naming the optimizer, and the arguments, defaults applied, are
    kept in declaration order as ``self._arguments`` (``params`` left out) before `init`
    runs, for ``repr`` (``_record_args``)."""
    signature = inspect.signature(init)
    valid = set(signature.parameters)

    @functools.wraps(init)
    def capture(self, *args, **kwargs):
        unknown = {k: v for k, v in kwargs.items() if k not in valid}
        _checks.check_keywords(cls._NAME, init, unknown, cls._KEYWORD_NAMES, cls._KEYWORD_NOTE)
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            missing = str(exc).startswith("missing") and _missing(signature, args, kwargs)
            raise TypeError(f"For '{cls._NAME}', {missing or exc}.") from None
        bound.apply_defaults()
        object.__setattr__(self, "_arguments", {k: v for k, v in bound.arguments.items()
                                                if k not in ("self", "params")})
        init(self, *args, **kwargs)
    return capture


class Optimizer(GraphHelpers, nn.Optimizer):
    """The base of the ms_optim optimizers (an ``nn.Optimizer``).

    A subclass's ``__init__`` is wrapped once, when the class is made (``_capturing``):
    its arguments are bound and checked for unknown keywords before it runs, and kept
    for ``repr``.  ``_REPR_OMITS`` names the arguments ``repr`` leaves out: always
    (value ``_ALWAYS``), or when they have the given value."""

    _NAME = "Optimizer"
    _KEYWORD_NAMES = None  # other APIs' keyword -> this optimizer's, for the hint
    _KEYWORD_NOTE = ""
    _REPR_OMITS = {}
    _arguments = {}
    _lr_steps = None  # set by _record_args: the length of a learning-rate list
    _lr_past_message = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        # a subclass (a user's) whose __init__ forwards **kwargs to ours is left as it is:
        # the keywords it forwards are bound, checked and captured by the __init__ it calls
        if init is not None and not any(p.kind is inspect.Parameter.VAR_KEYWORD
                                        for p in inspect.signature(init).parameters.values()):
            cls.__init__ = _capturing(cls, init)

    def _record_args(self, params, values, **extra):
        """Keeps the constructor's arguments for ``repr`` and the group layout for
        ``current_lr`` (call after ``nn.Optimizer.__init__``).  `values`: the constructor's
        ``locals()``, where its checks left each argument normalized under its own name;
        the captured arguments are shown with those values, then `extra`, with
        ``_REPR_OMITS`` left out."""
        hyper = {k: values.get(k, v) for k, v in self._arguments.items()}
        hyper.update(extra)
        shown = tuple((k, _fmt(v)) for k, v in hyper.items()
                      if k not in self._REPR_OMITS
                      or (self._REPR_OMITS[k] is not _ALWAYS and v != self._REPR_OMITS[k]))
        object.__setattr__(self, "_repr_args", shown)
        index = {id(p): i for i, p in enumerate(self._parameters)}
        firsts = ()
        if params and isinstance(params[0], dict):
            for g in params:
                if "order_params" in g or not g.get("params"):
                    continue
                firsts += (index[id(g["params"][0])],)
        object.__setattr__(self, "_group_firsts", firsts)
        # a learning-rate list (or 1-D Tensor) holds one value per step: the first step
        # with none, and what a step that reaches it raises (get_lr)
        object.__setattr__(self, "_lr_steps", self._lr_list_length())
        object.__setattr__(self, "_lr_past_message", None if self._lr_steps is None else (
            f"For '{self._NAME}', the 'learning_rate' list has {self._lr_steps} value(s), one "
            f"per step, and the run went past them (step {self._lr_steps}, counted from 0, has "
            f"none): give a value for every step of the run, or a LearningRateSchedule."))

    def __repr__(self):
        args = ", ".join(f"{k}={v}" for k, v in getattr(self, "_repr_args", ()))
        sep = ", " if args else ""
        return f"{self._NAME}({args}{sep}params={len(self._parameters)})"

    # ------------------------------------------------------------ beta powers --

    def _init_beta_powers(self, beta1, beta2):
        """beta1^t and beta2^t kept in Parameters (checkpointed), advanced once per step."""
        self.beta1 = Tensor([beta1], mstype.float32)
        self.beta2 = Tensor([beta2], mstype.float32)
        self.beta1_power = Parameter(initializer(1, [1], mstype.float32), name="beta1_power")
        self.beta2_power = Parameter(initializer(1, [1], mstype.float32), name="beta2_power")

    def _advance_beta_powers(self):
        """The powers for this step (t = 1 on the first), stored for the next."""
        beta1_power = self.beta1_power * self.beta1
        self.beta1_power = beta1_power
        beta2_power = self.beta2_power * self.beta2
        self.beta2_power = beta2_power
        return beta1_power, beta2_power

    # The one step of AdamOffload, Lion and Lamb: the gradients checked and flattened,
    # `_prepare`'d (the host-moment delta path's decay and loss scale), the step opened
    # (`_open_step`, with the beta powers when POWERS), then `_update`.  DGCMomentum has its
    # own construct: nothing is counted before the workers' check passes.
    POWERS = False

    @jit(backend="ms_backend")  # compiled in PyNative too, as MindSpore's optimizers
    def construct(self, gradients):
        gradients = self._prepare(self.flatten_gradients(self.check_gradients(gradients)))
        lr, weight_decay, beta1_power, beta2_power = self._open_step(self.POWERS)
        return self._update(gradients, lr, weight_decay, beta1_power, beta2_power)

    def _prepare(self, gradients):
        """The gradients as the update takes them (inside ``construct``)."""
        return gradients

    def _update(self, gradients, lr, weight_decay, beta1_power, beta2_power):
        """The step's update of every parameter (inside ``construct``)."""
        raise NotImplementedError(f"{type(self).__name__} defines _update")

    def _open_step(self, powers):
        """Every step's opening, in one order: this step's learning rates and weight decays
        (read before global_step counts the step, as a schedule reads it), global_step
        counted, and with `powers` beta1^t and beta2^t advanced.  Returns (lr, weight
        decay, beta1^t, beta2^t), the powers None without `powers`.  (DGCMomentum counts
        its step only after the workers' check has passed.)"""
        lr = self.get_lr()
        weight_decay = self.get_weight_decay()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        if not powers:
            return lr, weight_decay, None, None
        beta1_power, beta2_power = self._advance_beta_powers()
        return lr, weight_decay, beta1_power, beta2_power

    # --------------------------------------------------------------- a step --

    def __call__(self, *args, **kwargs):
        # Called from Python (PyNative, or the optimizer stepped on its own; a compiled
        # train step compiles construct instead): the gradients are checked here first, so
        # that a mistake raises its own message before MindSpore compiles anything (which
        # would wrap it in a graph traceback and write analyze_fail.ir) -- their type on
        # every call, their count, shapes and dtypes on the first.
        gradients = self._call_gradients(args, kwargs)
        self._check_python_gradients(gradients)
        return super().__call__(gradients)

    def _call_gradients(self, args, kwargs):
        """The gradients of a call from Python, ``opt(gradients)`` or
        ``opt(gradients=...)``: TypeError naming the optimizer for any other arguments."""
        if len(args) + len(kwargs) == 1 and (args or "gradients" in kwargs):
            return args[0] if args else kwargs["gradients"]
        got = f"{len(args)} positional argument{'s' * (len(args) != 1)}" if args else ""
        if kwargs:
            got += f"{' and ' * bool(args)}the keyword arguments {sorted(kwargs)}"
        got = got or "none"
        raise TypeError(f"For '{self._NAME}', the optimizer is called with one argument, the "
                        f"gradients of its parameters (a tuple of Tensors, as "
                        f"mindspore.value_and_grad returns them), but got {got}.")

    def _check_python_gradients(self, gradients):
        cls = self._NAME
        if isinstance(gradients, (tuple, list)):
            for i, g in enumerate(gradients):
                if not isinstance(g, Tensor):
                    kind = f"{type(g).__module__}.{type(g).__name__}".replace("builtins.", "")
                    raise TypeError(f"For '{cls}', the gradients must be mindspore Tensors, but "
                                    f"gradient {i} is a {kind}: pass the Tensors that "
                                    f"mindspore.value_and_grad returns (or mindspore.Tensor(x)).")
        if not getattr(self, "_gradients_checked", False):
            self.check_gradients(gradients)
            object.__setattr__(self, "_gradients_checked", True)

    def _lr_list_length(self):
        """The number of values of the shortest learning-rate list (or 1-D Tensor) of the
        optimizer or its groups, or None when no rate is one."""
        if not self.dynamic_lr:
            return None
        lrs = self.learning_rate if self.is_group_lr else (self.learning_rate,)
        # a list or 1-D Tensor: nn.Optimizer's iterator Cell over a Parameter of values
        lengths = [lr.learning_rate.shape[0] for lr in lrs
                   if isinstance(getattr(lr, "learning_rate", None), Parameter)
                   and lr.learning_rate.ndim == 1]
        return min(lengths) if lengths else None

    def get_lr(self):
        """``nn.Optimizer.get_lr``, after one check where a rate is a list (or 1-D Tensor):
        a step past its last value raises ValueError naming it, inside a compiled train
        step too (where the list's lookup would fail with MindSpore's Gather message).  The
        check is compiled only for a list, so other rates cost nothing more."""
        if self._lr_steps is not None:
            if self.global_step >= self._lr_steps:
                raise ValueError(self._lr_past_message)
        return nn.Optimizer.get_lr(self)

    # ---------------------------------------------------------- learning rate --

    @staticmethod
    def _lr_value(lr, step):
        if isinstance(lr, Parameter) or isinstance(lr, Tensor):
            return float(lr.asnumpy().reshape(-1)[0])
        return float(lr(step).asnumpy().reshape(-1)[0])  # a schedule Cell

    def current_lr(self):
        """The learning rate of the next step: a float, or one float per group when
        parameter groups set their own 'lr' (see ms_optim._base); ValueError past the end
        of a learning-rate list, as the step raises."""
        if self._lr_steps is not None and int(self.global_step.asnumpy().reshape(-1)[0]) \
                >= self._lr_steps:
            raise ValueError(self._lr_past_message)
        if self.is_group_lr:
            return [self._lr_value(self.learning_rate[i], self.global_step)
                    for i in self._group_firsts]
        return self._lr_value(self.learning_rate, self.global_step)

    def set_lr(self, value):
        """Sets a fixed learning rate for every parameter and group from the next step on
        (see ms_optim._base)."""
        cls = self._NAME
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"For '{cls}', set_lr() takes a float or an int, but got "
                            f"{type(value).__name__}: {value!r}.")
        try:
            rate = float(value)
        except OverflowError:  # an int beyond float's range
            rate = math.inf
        if not (math.isfinite(rate) and 0 <= rate <= _checks.F32_MAX):
            raise ValueError(f"For '{cls}', set_lr() takes a finite learning rate >= 0 (at most "
                             f"{_checks.F32_MAX:.7g}: finite in float32, the type the update "
                             f"computes in), but got {_checks.shown(value)}.")
        value = rate
        if self.dynamic_lr:
            raise RuntimeError(f"For '{cls}', set_lr() cannot be used while a learning rate "
                               f"schedule (LearningRateSchedule, list or 1-D Tensor) drives the "
                               f"rate: it would be discarded. Build the optimizer with a float "
                               f"learning rate to set it by hand.")
        lrs = self.learning_rate if self.is_group_lr else (self.learning_rate,)
        done = set()
        for lr in lrs:
            if id(lr) not in done:
                lr.set_data(Tensor(float(value), mstype.float32))
                done.add(id(lr))
