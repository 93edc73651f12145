"""Python-side helpers shared by the optimizers: learning rate access and repr.

``get_lr()`` stays MindSpore's ``nn.Optimizer.get_lr`` (called inside
``construct``; it returns the rate as graph values).  From Python:

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
import math
import numbers

from mindspore import Parameter, Tensor
from mindspore.nn import Cell
from mindspore import dtype as mstype
from mindspore.nn.learning_rate_schedule import LearningRateSchedule


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


class OptimizerAPI:
    """Mixin for the ms_optim optimizers (placed before ``nn.Optimizer`` in the bases)."""

    _NAME = "Optimizer"

    def _record_args(self, params, **hyper):
        """Keeps the constructor's hyper-parameters for ``repr`` and the group layout for
        ``current_lr`` (call after ``nn.Optimizer.__init__``)."""
        object.__setattr__(self, "_repr_args", tuple((k, _fmt(v)) for k, v in hyper.items()))
        index = {id(p): i for i, p in enumerate(self._parameters)}
        firsts = ()
        if params and isinstance(params[0], dict):
            for g in params:
                if "order_params" in g or not g.get("params"):
                    continue
                firsts += (index[id(g["params"][0])],)
        object.__setattr__(self, "_group_firsts", firsts)

    def __repr__(self):
        args = ", ".join(f"{k}={v}" for k, v in getattr(self, "_repr_args", ()))
        sep = ", " if args else ""
        return f"{self._NAME}({args}{sep}params={len(self._parameters)})"

    # ---------------------------------------------------------- learning rate --

    @staticmethod
    def _lr_value(lr, step):
        if isinstance(lr, Parameter) or isinstance(lr, Tensor):
            return float(lr.asnumpy().reshape(-1)[0])
        return float(lr(step).asnumpy().reshape(-1)[0])  # a schedule Cell

    def current_lr(self):
        """The learning rate of the next step: a float, or one float per group when
        parameter groups set their own 'lr' (see ms_optim._api)."""
        if self.is_group_lr:
            return [self._lr_value(self.learning_rate[i], self.global_step)
                    for i in self._group_firsts]
        return self._lr_value(self.learning_rate, self.global_step)

    def set_lr(self, value):
        """Sets a fixed learning rate for every parameter and group from the next step on
        (see ms_optim._api)."""
        cls = self._NAME
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"For '{cls}', set_lr() takes a float or an int, but got "
                            f"{type(value).__name__}: {value!r}.")
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"For '{cls}', set_lr() takes a finite learning rate >= 0, but got "
                             f"{value}.")
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
