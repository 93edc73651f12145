"""Argument validation shared by the optimizers.

One check per call; every message names the optimizer, the argument and the
bad value.  Booleans are never accepted where numbers are expected.
"""
from collections.abc import Iterable
import numbers

import numpy as np

from mindspore import Parameter, Tensor
from mindspore.nn import Cell
from mindspore.nn.learning_rate_schedule import LearningRateSchedule


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_bool(cls, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be a bool, but got "
                        f"{type(value).__name__}: {value!r}.")
    return value


def check_float(cls, name, value, allow_int=False):
    """A float (or an int when allow_int) returned as float."""
    ok = isinstance(value, float) or (allow_int and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        want = "a float or an int" if allow_int else "a float"
        raise TypeError(f"For '{cls}', the '{name}' must be {want}, but got "
                        f"{type(value).__name__}: {value!r}.")
    return float(value)


def check_int(cls, name, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be an int, but got "
                        f"{type(value).__name__}: {value!r}.")
    return value


def check_open_unit(cls, name, value, include_zero=False):
    """0 < value < 1, or 0 <= value < 1 with `include_zero`."""
    if not ((value >= 0.0 if include_zero else value > 0.0) and value < 1.0):
        low = "[0.0" if include_zero else "(0.0"
        raise ValueError(f"For '{cls}', the '{name}' must be in range {low}, 1.0), but got {value}.")
    return value


def check_positive(cls, name, value):
    if not value > 0:
        raise ValueError(f"For '{cls}', the '{name}' must be greater than 0, but got {value}.")
    return value


def check_non_negative(cls, name, value):
    if not value >= 0:
        raise ValueError(f"For '{cls}', the '{name}' must be greater than or equal to 0, "
                         f"but got {value}.")
    return value


def check_float32_positive(cls, name, value):
    """value > 0 also after rounding to float32, the type the kernels compute in.

    An eps of 1e-46 is 0 in float32: the update would divide 0 by 0 (NaN weights).
    """
    check_positive(cls, name, value)
    as_f32 = float(np.float32(value)) if value <= float(np.finfo(np.float32).max) else float("inf")
    if not 0.0 < as_f32 < float("inf"):
        raise ValueError(f"For '{cls}', the '{name}' must be greater than 0 and finite in float32 "
                         f"(the type the update computes in), but got {value!r}, which is "
                         f"{as_f32} in float32.")
    return value


def check_choice(cls, name, value, choices):
    if value not in choices:
        raise ValueError(f"For '{cls}', the '{name}' must be one of {list(choices)}, "
                         f"but got {value!r}.")
    return value


def check_params(cls, params):
    """A non-empty list of Parameters, or of group dicts, each parameter given once.

    Group dicts are copied with their 'params' made lists (so a generator is read once).
    A parameter given twice (the same object, or two Parameters of one name) raises
    ValueError naming it: the optimizer's state is named after the parameters.
    """
    if isinstance(params, (Parameter, dict)) or not isinstance(params, Iterable):
        raise TypeError(f"For '{cls}', the 'params' must be a list of Parameter or a list of dict, "
                        f"but got {type(params).__name__}.")
    params = list(params)
    if not params:
        raise ValueError(f"For '{cls}', the 'params' must not be empty.")
    kinds = {Parameter if isinstance(p, Parameter) else dict if isinstance(p, dict) else None
             for p in params}
    if None in kinds or len(kinds) != 1:
        bad = next((p for p in params if not isinstance(p, (Parameter, dict))), params[0])
        raise TypeError(f"For '{cls}', every element of 'params' must be a Parameter, or every "
                        f"element a dict, but got an element of type {type(bad).__name__}.")
    if kinds == {dict}:
        params = [dict(g, params=list(g["params"])) if isinstance(g.get("params"), Iterable)
                  and not isinstance(g["params"], Parameter) else g for g in params]
        flat = [p for g in params if isinstance(g.get("params"), list) for p in g["params"]]
    else:
        flat = params
    seen_ids, seen_names = set(), set()
    for p in flat:
        if not isinstance(p, Parameter):
            continue  # MindSpore's own check names it
        if id(p) in seen_ids or p.name in seen_names:
            how = "twice" if id(p) in seen_ids else "twice (two Parameters of that name)"
            raise ValueError(f"For '{cls}', parameter '{p.name}' is given {how} in 'params'; "
                             f"each parameter must appear once (in one group only).")
        seen_ids.add(id(p))
        seen_names.add(p.name)
    return params


def check_learning_rate(cls, value, name="learning_rate"):
    """float/int >= 0, Tensor (scalar or 1-D), Iterable or LearningRateSchedule."""
    if isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be a float, int, Tensor, Iterable or "
                        f"LearningRateSchedule, but got bool.")
    if _is_number(value):
        if value < 0:
            raise ValueError(f"For '{cls}', the '{name}' must be greater than or equal to 0, "
                             f"but got {value}.")
        return value
    if isinstance(value, Tensor):
        if value.ndim > 1:
            raise ValueError(f"For '{cls}', a Tensor '{name}' must be a scalar or 1-D, "
                             f"but got shape {value.shape}.")
        return value
    if isinstance(value, (LearningRateSchedule, Iterable)) and not isinstance(value, (str, bytes)):
        return value
    raise TypeError(f"For '{cls}', the '{name}' must be a float, int, Tensor, Iterable or "
                    f"LearningRateSchedule, but got {type(value).__name__}.")


def check_weight_decay(cls, value, name="weight_decay"):
    """float/int >= 0, or a Cell of the global step."""
    if isinstance(value, Cell):
        return value
    if not _is_number(value):
        raise TypeError(f"For '{cls}', the '{name}' must be a float, an int or a Cell, but got "
                        f"{type(value).__name__}: {value!r}.")
    return check_non_negative(cls, name, float(value))


def check_loss_scale(cls, value):
    value = check_float(cls, "loss_scale", value, allow_int=True)
    return check_positive(cls, "loss_scale", value)


def check_param_dtypes(cls, parameters, allowed):
    """Every Parameter's dtype is one of `allowed` (mindspore dtypes)."""
    for p in parameters:
        if p.dtype not in allowed:
            names = ", ".join(str(d) for d in allowed)
            raise TypeError(f"For '{cls}', parameter '{p.name}' has dtype {p.dtype}; "
                            f"supported: {names}.")
