"""Argument validation shared by the optimizers.

One check per call; every message names the optimizer, the argument and the
bad value.  Numpy integers and floats are accepted wherever Python ints and
floats are, and returned as Python numbers (MindSpore's nn.Optimizer takes
only those); booleans, Python's and numpy's, are never accepted where numbers
are expected.
"""
from collections.abc import Iterable, Mapping, Set
import difflib
import inspect
import math
import numbers

import numpy as np

from mindspore import Parameter, Tensor
from mindspore.nn import Cell
from mindspore.nn.learning_rate_schedule import LearningRateSchedule


def _is_number(value):
    """A real number, Python's or numpy's, that is not a bool (np.bool_ is not numbers.Real)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_python(value):
    """A number as a Python int (integers) or float (the others)."""
    return int(value) if isinstance(value, numbers.Integral) else float(value)


# float32's largest finite value: the kernels and graphs compute in float32, where a larger
# number is infinite
F32_MAX = float(np.finfo(np.float32).max)


def shown(value):
    """`value` for a message: an int too long to read as its count of digits."""
    if isinstance(value, numbers.Integral) and abs(int(value)) >= 10**20:
        return f"an int of {len(str(abs(int(value))))} digits"
    return value


def as_float(cls, name, value):
    """float(value), with ValueError naming the argument for an int too large for a float
    (Python's float raises a bare OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"For '{cls}', the {_quoted(name)} must be finite, but got "
                         f"{shown(value)}.") from None


def _quoted(name):
    """An argument's name in quotes; a phrase that quotes its own key stays as it is."""
    return name if "'" in name else f"'{name}'"


# Keyword names that users bring from other optimizers (torch.optim, MindSpore's nn, Paddle),
# and the argument they mean here when the constructor has it.
_OTHER_NAMES = {"lr": "learning_rate", "learningrate": "learning_rate", "nesterov": "use_nesterov",
                "epsilon": "eps", "eps": "epsilon", "clip_norm": "grad_clip",
                "max_grad_norm": "grad_clip"}


def check_keywords(cls, init, kwargs, names=None, note=""):
    """TypeError for the first keyword argument in `kwargs` that `init` (a constructor)
    does not take, naming the optimizer `cls` and the argument it most likely means: its own
    name in `names` (other APIs' names -> the constructor's, with `note`), a common other
    API's name, or the closest spelling."""
    if not kwargs:
        return
    valid = [p.name for p in inspect.signature(init).parameters.values()
             if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
    key = next(iter(kwargs))
    meant = (names or {}).get(key)
    if meant is None:
        meant = _OTHER_NAMES.get(key)
        if meant not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.7)
            meant = close[0] if close else None
        note = ""
    hint = f"; did you mean '{meant}'?" if meant else f"; it takes {', '.join(valid)}."
    if key == "betas" and {"beta1", "beta2"} <= set(valid):  # torch's pair
        hint, note = "; pass betas=(b1, b2) as beta1=b1, beta2=b2.", ""
    raise TypeError(f"For '{cls}', got an unexpected keyword argument '{key}'{hint}{note}")


def check_bool(cls, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be a bool, but got "
                        f"{type(value).__name__}: {value!r}.")
    return value


def check_float(cls, name, value, allow_int=False):
    """A float (or an int when allow_int), Python's or numpy's, returned as a Python float."""
    ok = isinstance(value, (float, np.floating)) or (
        allow_int and isinstance(value, (int, np.integer)) and not isinstance(value, bool))
    if not ok:
        want = "a float or an int" if allow_int else "a float"
        raise TypeError(f"For '{cls}', the '{name}' must be {want}, but got "
                        f"{type(value).__name__}: {value!r}.")
    return as_float(cls, name, value)


def check_int(cls, name, value):
    """An int, Python's or numpy's, returned as a Python int."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"For '{cls}', the '{name}' must be an int, but got "
                        f"{type(value).__name__}: {value!r}.")
    return int(value)


def check_finite(cls, name, value):
    """Not NaN or infinite, also as a float (an int of 2**1024 or more is not)."""
    try:
        finite = math.isfinite(value)
    except OverflowError:
        finite = False
    if not finite:
        raise ValueError(f"For '{cls}', the {_quoted(name)} must be finite, but got "
                         f"{shown(value)}.")
    return value


def check_open_unit(cls, name, value, include_zero=False, in_float32=False):
    """0 < value < 1, or 0 <= value < 1 with `include_zero`; with `in_float32` also after
    rounding to float32, the type the update computes in (0.99999999999 is 1 there: a
    moment that never decays)."""
    low = "[0.0" if include_zero else "(0.0"
    inside = (lambda x: (x >= 0.0 if include_zero else x > 0.0) and x < 1.0)
    if not inside(value):
        raise ValueError(f"For '{cls}', the '{name}' must be in range {low}, 1.0), but got {value}.")
    as_f32 = float(np.float32(value))
    if in_float32 and not inside(as_f32):
        raise ValueError(f"For '{cls}', the '{name}' must be in range {low}, 1.0) also in float32 "
                         f"(the type the update computes in), but got {value!r}, which is "
                         f"{as_f32} in float32.")
    return value


def check_float32_finite(cls, name, value):
    """|value| at most float32's largest finite value (about 3.4e38): a larger one is
    infinite in float32, the type the update computes in."""
    if not abs(value) <= F32_MAX:
        raise ValueError(f"For '{cls}', the {_quoted(name)} must be finite in float32 (the type "
                         f"the update computes in: between -{F32_MAX:.7g} and {F32_MAX:.7g}), "
                         f"but got {value}.")
    return value


def check_positive(cls, name, value):
    if not value > 0:
        raise ValueError(f"For '{cls}', the '{name}' must be greater than 0, but got {value}.")
    return value


def check_non_negative(cls, name, value):
    if not value >= 0:
        raise ValueError(f"For '{cls}', the {_quoted(name)} must be greater than or equal to 0, "
                         f"but got {value}.")
    return value


def check_float32_positive(cls, name, value):
    """value > 0 also after rounding to float32, the type the kernels compute in.

    An eps of 1e-46 is 0 in float32: the update would divide 0 by 0 (NaN weights).
    """
    check_positive(cls, name, value)
    as_f32 = float(np.float32(value)) if value <= F32_MAX else float("inf")
    if not 0.0 < as_f32 < float("inf"):
        raise ValueError(f"For '{cls}', the '{name}' must be greater than 0 and finite in float32 "
                         f"(the type the update computes in), but got {value!r}, which is "
                         f"{as_f32} in float32.")
    return value


def check_choice(cls, name, value, choices):
    """`value` if it is one of `choices` (strings): TypeError for another type (an array
    included, which `in` cannot compare), ValueError for another string."""
    if not isinstance(value, str):
        raise TypeError(f"For '{cls}', the '{name}' must be a str, one of {list(choices)}, but "
                        f"got {type(value).__name__}: {value!r}.")
    if value not in choices:
        raise ValueError(f"For '{cls}', the '{name}' must be one of {list(choices)}, "
                         f"but got {value!r}.")
    return value


GROUP_KEYS = ("params", "lr", "weight_decay", "order_params")


def _check_group(cls, index, group):
    """One parameter group: its keys, and its 'lr' and 'weight_decay' checked as the
    optimizer's own (returned normalized, in a copy of the dict)."""
    if "order_params" in group:
        return group  # MindSpore checks that the dict holds nothing else
    if "params" not in group:
        raise KeyError(f"For '{cls}', parameter group {index} must have the key 'params' (its "
                       f"list of Parameters), but has the keys {sorted(group)}.")
    if isinstance(group["params"], Parameter):
        raise TypeError(f"For '{cls}', the 'params' of parameter group {index} must be a list "
                        f"of Parameter, but got a single Parameter ('{group['params'].name}'); "
                        f"put it in a list.")
    for key in group:
        if key == "grad_centralization":
            raise ValueError(f"For '{cls}', parameter group {index} sets 'grad_centralization', "
                             f"which {cls} does not support (MindSpore's gradient "
                             f"centralization); remove the key.")
        if key not in GROUP_KEYS:
            raise KeyError(f"For '{cls}', the keys of parameter group {index} must be among "
                           f"{list(GROUP_KEYS)}, but got {key!r}.")
    group = dict(group)
    if "lr" in group:
        group["lr"] = check_learning_rate(cls, group["lr"], f"'lr' of parameter group {index}")
    if "weight_decay" in group:
        group["weight_decay"] = check_weight_decay(
            cls, group["weight_decay"], f"'weight_decay' of parameter group {index}")
    return group


def check_params(cls, params):
    """A non-empty list of Parameters, or of group dicts, each parameter given once.

    Group dicts are copied with their 'params' made lists (so a generator is read once),
    their 'lr' and 'weight_decay' checked as `check_learning_rate` and `check_weight_decay`
    check the optimizer's own and normalized alike.  The key 'grad_centralization'
    (MindSpore's) raises ValueError: no optimizer here implements it.  A parameter given
    twice (the same object, or two Parameters of one name) raises ValueError naming it: the
    optimizer's state is named after the parameters.  A parameter without elements (a
    dimension of 0) raises ValueError naming it: its state could not be allocated.
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
        params = [_check_group(cls, i, g) for i, g in enumerate(params)]
        flat = [p for g in params if isinstance(g.get("params"), list) for p in g["params"]]
        # by name, as MindSpore matches 'order_params' to the groups' parameters
        held = {p.name for p in flat if isinstance(p, Parameter)}
        for i, g in enumerate(params):
            order = g.get("order_params")
            if order is None or not isinstance(order, Iterable):
                continue
            order = list(order)  # a generator read once, here
            params[i] = dict(g, order_params=order)
            for p in order:
                if isinstance(p, Parameter) and p.name not in held:
                    raise ValueError(f"For '{cls}', the 'order_params' of parameter group {i} "
                                     f"names parameter '{p.name}', which no group's 'params' "
                                     f"holds; every parameter it orders must be in a group.")
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
        if p.size == 0:
            raise ValueError(f"For '{cls}', parameter '{p.name}' has no elements (shape "
                             f"{tuple(p.shape)}): it has nothing to update; leave it out of "
                             f"'params'.")
    return params


_LR_KINDS = "a float, int, Tensor, Iterable or LearningRateSchedule"


def _check_lr_values(cls, name, values):
    """The entries of a Tensor or numpy learning rate (0-D or 1-D): numbers, at least one,
    each finite and >= 0."""
    what = _quoted(name)
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        raise TypeError(f"For '{cls}', the entries of {what} must be integers or floats, but got "
                        f"dtype {values.dtype}.")
    if values.ndim == 0:
        check_finite(cls, name, values.item())
        check_non_negative(cls, name, values.item())
        check_float32_finite(cls, name, values.item())
        return
    if values.size == 0:
        raise ValueError(f"For '{cls}', the {what} must not be empty: it holds one rate per step.")
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0) & (values <= F32_MAX)))
    if bad.size:
        value = values[bad[0]]
        why = (", which is infinite in float32 (the type the update computes in)"
               if np.isfinite(value) and value > F32_MAX else "")
        raise ValueError(f"For '{cls}', every entry of {what} must be finite and greater than or "
                         f"equal to 0, but entry {bad[0]} is {value}{why}.")


def check_learning_rate(cls, value, name="learning_rate"):
    """The learning rate, checked and returned in a form nn.Optimizer takes:

    - a number, Python's or numpy's (not a bool), finite and >= 0: a Python int or float;
    - a Tensor or numpy array, 0-D (a fixed rate) or 1-D (one rate per step, not empty), its
      entries finite and >= 0: the Tensor as given, the array as a Python number (0-D) or a
      list (1-D);
    - a LearningRateSchedule, as given;
    - another Iterable of per-step rates (list, tuple, generator, ...; not a str, bytes, dict
      or set): read once (as nn.Optimizer reads it, a generator included) into a list, or a
      tuple for a tuple; not empty, every entry a number finite and >= 0 (an entry that is
      itself a sequence raises ValueError: the rates are 1-D).
    """
    what = _quoted(name)
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"For '{cls}', the {what} must be {_LR_KINDS}, but got bool.")
    if _is_number(value):
        check_finite(cls, name, value)
        check_non_negative(cls, name, value)
        check_float32_finite(cls, name, value)
        return _as_python(value)
    if isinstance(value, (Tensor, np.ndarray)):
        kind = "Tensor" if isinstance(value, Tensor) else "numpy array"
        if value.ndim > 1:
            raise ValueError(f"For '{cls}', a {kind} {what} must be a scalar or 1-D (one rate "
                             f"per step), but got shape {tuple(value.shape)}.")
        values = value.asnumpy() if isinstance(value, Tensor) else value
        _check_lr_values(cls, name, values)
        if isinstance(value, Tensor):
            return value
        return _as_python(values.item()) if values.ndim == 0 else values.tolist()
    if isinstance(value, LearningRateSchedule):
        return value
    if isinstance(value, (Mapping, Set)):
        raise TypeError(f"For '{cls}', the {what} must be {_LR_KINDS}; per-step rates must come "
                        f"in order (a list, tuple, 1-D array or generator), but got "
                        f"{type(value).__name__}.")
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        entries = list(value)
        for i, entry in enumerate(entries):
            if isinstance(entry, (Tensor, np.ndarray)) and entry.ndim == 0:  # one number
                entry = entries[i] = (entry.asnumpy() if isinstance(entry, Tensor)
                                      else entry).item()
            if _is_number(entry):
                continue
            if isinstance(entry, (Iterable, Tensor, np.ndarray)) and not isinstance(entry, str):
                raise ValueError(f"For '{cls}', the {what} must be 1-D (one rate per step), but "
                                 f"entry {i} is a {type(entry).__name__}.")
            raise TypeError(f"For '{cls}', every entry of {what} must be a float or an int, but "
                            f"entry {i} is {type(entry).__name__}: {entry!r}.")
        entries = [_as_python(v) for v in entries]
        as_floats = [as_float(cls, f"entry {i} of {what}", v) for i, v in enumerate(entries)]
        _check_lr_values(cls, name, np.array(as_floats, dtype=np.float64).reshape(-1))
        return tuple(entries) if isinstance(value, tuple) else entries
    raise TypeError(f"For '{cls}', the {what} must be {_LR_KINDS}, but got "
                    f"{type(value).__name__}.")


def check_weight_decay(cls, value, name="weight_decay"):
    """A number, Python's or numpy's (not a bool), finite and >= 0, returned as a Python
    float; or a Cell of the global step, as given."""
    if isinstance(value, Cell):
        return value
    if not _is_number(value):
        raise TypeError(f"For '{cls}', the {_quoted(name)} must be a float, an int or a Cell, "
                        f"but got {type(value).__name__}: {value!r}.")
    value = check_finite(cls, name, as_float(cls, name, value))
    check_non_negative(cls, name, value)
    return check_float32_finite(cls, name, value)


def check_loss_scale(cls, value):
    """A float or an int, Python's or numpy's, finite and > 0, returned as a Python float;
    it and its reciprocal (the gradients are multiplied by it) finite in float32."""
    value = check_float(cls, "loss_scale", value, allow_int=True)
    check_finite(cls, "loss_scale", value)
    check_positive(cls, "loss_scale", value)
    if not 1.0 / F32_MAX <= value <= F32_MAX:
        raise ValueError(f"For '{cls}', the 'loss_scale' and its reciprocal must be finite in "
                         f"float32 (the type the update computes in): 'loss_scale' in "
                         f"[{1.0 / F32_MAX:.7g}, {F32_MAX:.7g}], but got {value}.")
    return value


def check_decay_times_scale(cls, params, weight_decay, loss_scale):
    """Each number of `weight_decay` and the groups' (`params`, as ``check_params`` returns
    it) times `loss_scale` at most float32's largest: nn.Optimizer keeps that product, in
    float32, and the update divides the loss scale back out."""
    decays = [("weight_decay", weight_decay)] + [
        (f"'weight_decay' of parameter group {i}", g["weight_decay"])
        for i, g in enumerate(params) if isinstance(g, dict) and "weight_decay" in g]
    for name, wd in decays:
        if _is_number(wd) and wd * loss_scale > F32_MAX:
            raise ValueError(f"For '{cls}', the {_quoted(name)} times the 'loss_scale' must be "
                             f"finite in float32 (MindSpore's optimizer keeps the product), but "
                             f"got {wd} * {loss_scale} = {wd * loss_scale:.7g}.")


def check_param_dtypes(cls, parameters, allowed):
    """Every Parameter's dtype is one of `allowed` (mindspore dtypes)."""
    for p in parameters:
        if p.dtype not in allowed:
            names = ", ".join(str(d) for d in allowed)
            raise TypeError(f"For '{cls}', parameter '{p.name}' has dtype {p.dtype}; "
                            f"supported: {names}.")
