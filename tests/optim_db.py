"""One row per optimizer: what the shared checks of tests/optimizers/test_common.py need to know
about it, after PyTorch's OptimizerInfo (torch/testing/_internal/common_optimizers.py).

A row holds how to build the optimizer (its class and the arguments it cannot do without), the
implementations it has and which pairs of them must agree, its state as comparable arrays, the
arguments it refuses (with the exception and a pattern naming the argument) and edge values it
takes, its repr, the runs that are saved and resumed from a checkpoint, and a run through
ms.Model with the reference it must follow.  An optimizer added to OPTIMIZERS gets every shared
check.  The training cases take seconds each: those beyond one per kind of check carry the slow
marker (README.md, Tests).
"""
import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from ms_optim import reference
from ms_optim.clip import ClipGradByGlobalNorm, ClipGradByNorm
from ms_optim.regularizer import L2Decay
from tests.helpers import (HalvingLR, PolyLR, assert_close_to_mindspore, batch, fit_and_score,
                           fit_reference, make_net, reference_lamb, values)
from tests.moments import adam_state, bits
from tests.nets import WideNet


@dataclasses.dataclass(frozen=True)
class ErrorInput:
    """Keyword arguments the constructor refuses, with `error` whose message matches `match`.

    With `groups` (Parameters -> a list of group dicts) the optimizer is built over those
    groups instead of the Parameters.  `id` names the case (default: the kwargs).
    """
    kwargs: Dict[str, Any]
    error: type
    match: str
    groups: Optional[Callable] = None
    id: str = ""

    @property
    def label(self):
        return self.id or kwargs_label(self.kwargs)


def _show(value):
    """A test id's form of one argument: numpy numbers, arrays and Tensors by kind."""
    def text(array):  # numpy's shortest form of each entry, on one line
        return " ".join(np.array2string(array, separator=", ").split())

    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({text(np.asarray(value))})"
    if isinstance(value, np.ndarray):
        return f"np.array({text(value)})"
    if isinstance(value, Tensor):
        return f"Tensor({text(value.asnumpy())})"
    return repr(value)


def kwargs_label(kwargs):
    """Keyword arguments as a one-line test id: beta1=np.float32(0.9), eps=1e-08."""
    return ", ".join(f"{k}={_show(v)}" for k, v in kwargs.items())


def _group(**keys):
    """Two parameter groups: the first Parameter with `keys`, the others plain."""
    return lambda params: [{"params": params[:1], **keys}, {"params": params[1:]}]


def shared_error_inputs(name, decay="weight_decay"):
    """What every optimizer refuses, the same way: learning rates (numbers, arrays, Tensors
    and sequences, checked entry by entry), loss scales, weight decays (the argument
    `decay`), and parameter groups' keys and values.  Each message names the optimizer
    `name` and the argument."""
    lr = f"For '{name}', the 'learning_rate'"
    every_lr = f"For '{name}', every entry of 'learning_rate'"
    nonneg = "must be greater than or equal to 0"
    finite_nonneg = "must be finite and greater than or equal to 0"
    return [
        # other APIs' names and misspellings point to the argument meant, the same way
        ErrorInput(dict(lr=0.01), TypeError,
                   rf"For '{name}', got an unexpected keyword argument 'lr'; did you mean "
                   r"'learning_rate'\?"),
        ErrorInput(dict(los_scale=2.0), TypeError,
                   rf"For '{name}', got an unexpected keyword argument 'los_scale'; did you "
                   r"mean 'loss_scale'\?"),
        ErrorInput(dict(learning_rate=float("inf")), ValueError, f"{lr} must be finite"),
        ErrorInput(dict(learning_rate=float("nan")), ValueError, f"{lr} must be finite"),
        ErrorInput(dict(learning_rate=np.float32(-1e-3)), ValueError, f"{lr} {nonneg}"),
        ErrorInput(dict(learning_rate=np.bool_(True)), TypeError, f"{lr} must be a float"),
        ErrorInput(dict(learning_rate=[]), ValueError, f"{lr} must not be empty"),
        ErrorInput(dict(learning_rate=[1e-3, -1e-3]), ValueError,
                   f"{every_lr} {finite_nonneg}, but entry 1 is -0.001"),
        ErrorInput(dict(learning_rate=(0.1, float("nan"))), ValueError,
                   f"{every_lr} {finite_nonneg}, but entry 1 is nan"),
        ErrorInput(dict(learning_rate=[0.1, float("inf")]), ValueError,
                   f"{every_lr} {finite_nonneg}"),
        ErrorInput(dict(learning_rate=[["0.1"]]), ValueError,
                   f"{lr} must be 1-D .*entry 0 is a list"),
        ErrorInput(dict(learning_rate=["0.1"]), TypeError,
                   f"{every_lr} must be a float or an int, but entry 0 is str"),
        ErrorInput(dict(learning_rate=[0.1, True]), TypeError, f"{every_lr} .*entry 1 is bool"),
        ErrorInput(dict(learning_rate={0.1, 0.2}), TypeError, f"{lr} .*in order"),
        ErrorInput(dict(learning_rate={0: 0.1}), TypeError, f"{lr} .*in order"),
        ErrorInput(dict(learning_rate=np.ones((2, 2), np.float32)), ValueError,
                   rf"For '{name}', a numpy array 'learning_rate' must be a scalar or 1-D "
                   rf".*\(2, 2\)"),
        ErrorInput(dict(learning_rate=np.array([0.1, -0.1])), ValueError,
                   f"{every_lr} {finite_nonneg}, but entry 1 is -0.1"),
        ErrorInput(dict(learning_rate=np.array([], np.float32)), ValueError,
                   f"{lr} must not be empty"),
        ErrorInput(dict(learning_rate=np.array(["0.1"])), TypeError,
                   f"For '{name}', the entries of 'learning_rate' must be integers or floats"),
        ErrorInput(dict(learning_rate=Tensor(np.array([0.1, np.inf], np.float32))), ValueError,
                   f"{every_lr} {finite_nonneg}, but entry 1 is inf"),
        ErrorInput(dict(learning_rate=Tensor(-0.1)), ValueError, f"{lr} {nonneg}"),
        ErrorInput(dict(learning_rate=Tensor(np.ones((2, 2), np.float32))), ValueError,
                   f"For '{name}', a Tensor 'learning_rate' must be a scalar or 1-D"),
        ErrorInput(dict(loss_scale=float("inf")), ValueError,
                   f"For '{name}', the 'loss_scale' must be finite, but got inf"),
        ErrorInput(dict(loss_scale=float("nan")), ValueError,
                   f"For '{name}', the 'loss_scale' must be finite, but got nan"),
        ErrorInput(dict(loss_scale=np.float32(-1.0)), ValueError,
                   f"For '{name}', the 'loss_scale' must be greater than 0"),
        ErrorInput(dict(loss_scale=np.bool_(True)), TypeError,
                   f"For '{name}', the 'loss_scale' must be a float or an int"),
        # finite as Python floats, but not in float32, where the update computes (or, an
        # int, not even as a Python float)
        ErrorInput(dict(learning_rate=1e39), ValueError, f"{lr} must be finite in float32"),
        ErrorInput(dict(learning_rate=[0.1, 1e39]), ValueError,
                   f"{every_lr} {finite_nonneg}, but entry 1 is 1e\\+39, which is infinite in "
                   f"float32"),
        ErrorInput(dict(learning_rate=[0.1, 10**400]), ValueError,
                   f"For '{name}', the entry 1 of 'learning_rate' must be finite, but got an int "
                   f"of 401 digits", id="learning_rate=[0.1, 10**400]"),
        ErrorInput(dict(learning_rate=10**400), ValueError, f"{lr} must be finite",
                   id="learning_rate=10**400"),
        ErrorInput(dict(loss_scale=1e-40), ValueError,
                   f"For '{name}', the 'loss_scale' and its reciprocal must be finite in float32"),
        ErrorInput(dict(loss_scale=1e39), ValueError,
                   f"For '{name}', the 'loss_scale' and its reciprocal must be finite in float32"),
        ErrorInput(dict(loss_scale=10**400), ValueError,
                   f"For '{name}', the 'loss_scale' must be finite, but got an int of 401 digits",
                   id="loss_scale=10**400"),
        ErrorInput({decay: 1e39}, ValueError,
                   f"For '{name}', the '{decay}' must be finite in float32"),
        ErrorInput({decay: 10**400}, ValueError,
                   f"For '{name}', the '{decay}' must be finite, but got an int of 401 digits",
                   id=f"{decay}=10**400"),
        # parameter groups: MindSpore's 'grad_centralization' is refused, not ignored
        *[ErrorInput({}, ValueError,
                     f"For '{name}', parameter group 0 sets 'grad_centralization', which {name} "
                     f"does not support", groups=_group(grad_centralization=gc),
                     id=f"group grad_centralization={gc}") for gc in (True, False)],
        ErrorInput({}, KeyError, f"For '{name}', the keys of parameter group 0 .*'momentum'",
                   groups=_group(momentum=0.9), id="group key momentum"),
        ErrorInput({}, ValueError, f"For '{name}', the 'lr' of parameter group 0 {nonneg}",
                   groups=_group(lr=np.float32(-0.1)), id="group lr=-0.1"),
        ErrorInput({}, ValueError,
                   f"For '{name}', every entry of 'lr' of parameter group 0 {finite_nonneg}",
                   groups=_group(lr=[0.1, float("nan")]), id="group lr=[0.1, nan]"),
        ErrorInput({}, TypeError, f"For '{name}', the 'lr' of parameter group 0 must be a float",
                   groups=_group(lr=True), id="group lr=True"),
        ErrorInput({}, ValueError,
                   f"For '{name}', the 'weight_decay' of parameter group 0 must be finite",
                   groups=_group(weight_decay=float("inf")), id="group weight_decay=inf"),
        ErrorInput({}, KeyError, f"For '{name}', parameter group 0 must have the key 'params'",
                   groups=lambda ps: [{"lr": 0.1}, {"params": ps}], id="group without params"),
        ErrorInput({}, TypeError,
                   f"For '{name}', the 'params' of parameter group 0 must be a list of "
                   f"Parameter, but got a single Parameter",
                   groups=lambda ps: [{"params": ps[0]}, {"params": ps[1:]}],
                   id="group params=Parameter"),
        ErrorInput({}, ValueError,
                   f"For '{name}', the 'order_params' of parameter group 1 names parameter "
                   f"'fc.weight', which no group's 'params' holds",
                   groups=lambda ps: [{"params": ps[1:]}, {"order_params": ps}],
                   id="order_params outside the groups"),
    ]


def shared_valid_inputs():
    """Learning rates every optimizer takes as numpy arrays: 0-D (a fixed rate) and 1-D (one
    rate per step).  Numpy numbers are in each row's own valid inputs."""
    return [dict(learning_rate=np.array(0.01)),
            dict(learning_rate=np.array([0.02, 0.01], np.float32))]


@dataclasses.dataclass(frozen=True)
class Run:
    """One optimizer's training run: its parameters, state and step losses afterwards."""
    params: list
    state: list
    losses: list


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Two implementations trained side by side from the same network and batch.

    build(impl) -> (net, opt); data() -> (x, y); check(first, second) compares their Runs.
    """
    id: str
    first: str
    second: str
    build: Callable
    data: Callable
    steps: int
    check: Callable
    sens: float = 1.0
    marks: Tuple = ()


@dataclasses.dataclass(frozen=True)
class CheckpointCase:
    """`steps` steps uninterrupted against half, save, a fresh build, load, the other half.

    build() -> (net, opt); data() -> (x, y); saved: {checkpoint name: dtype} the file holds.
    """
    id: str
    build: Callable
    data: Callable
    steps: int
    saved: Dict[str, Any] = dataclasses.field(default_factory=dict)
    marks: Tuple = ()


@dataclasses.dataclass(frozen=True)
class ModelCase:
    """Training through ms.Model (GRAPH_MODE) against a reference run of the same steps.

    data() -> (xs, ys); build() -> (net, opt); reference(xs, ys, epochs, build_net) ->
    (parameters, step losses [epoch, step], accuracy or None), its network from build_net()
    (build()'s, with the same initial weights); the trained model's last epoch's mean loss is
    below loss_ratio times its first step's, and its accuracy on the training data above
    min_acc.
    """
    data: Callable
    build: Callable
    epochs: int
    reference: Callable
    loss_ratio: float
    min_acc: float
    marks: Tuple = ()


@dataclasses.dataclass(frozen=True)
class ReprCase:
    """repr(optimizer built with kwargs()): `exact`, or `start` ... `end`."""
    kwargs: Callable
    exact: Optional[str] = None
    start: str = ""
    end: str = ""


@dataclasses.dataclass(frozen=True)
class OptimizerInfo:
    name: str
    cls: type
    required: Dict[str, Any]          # keyword arguments it cannot do without
    impls: Tuple[str, ...]            # its implementations, the default on CPU first
    state: Callable                   # opt -> its state as comparable arrays
    error_inputs: Sequence[ErrorInput]
    valid_inputs: Sequence[Dict[str, Any]]  # edge values it takes
    repr_case: ReprCase
    agreements: Sequence[Agreement]
    checkpoints: Sequence[CheckpointCase]
    model: ModelCase

    def make(self, params, **kwargs):
        """The optimizer over `params`, with its required arguments unless `kwargs` sets them."""
        return self.cls(params, **{**self.required, **kwargs})


@dataclasses.dataclass(frozen=True)
class HostStep:
    """A host-moment step kernel (entries ms_optim_<rule>_inplace, _delta, _q8_inplace and
    _q8_delta, declared in ops/core/contract.h) and its numpy rule, for
    tests/kernels/test_host_step_kernels.py.  `signed`: per moment slot, whether its values
    take either sign (int8 codes signed) or not; `variants`: name -> (constants layout,
    values by field); `powers`: whether it takes beta1^t and beta2^t; `step(p, moments, g, lr,
    wd, consts, powers, delta)`: the float32 rule on float32 moments in place, returning the
    step (delta) or updating p."""
    rule: str
    signed: Dict[str, bool]
    variants: Dict[str, Tuple[str, Dict[str, float]]]
    powers: bool
    step: Callable


SLOW = (pytest.mark.slow,)


# ------------------------------------------------------------------ checks --

def bit_identical(first, second):
    assert len(first.params + first.state) == len(second.params + second.state)
    for a, b in zip(first.params + first.state, second.params + second.state):
        np.testing.assert_array_equal(a, b)


def params_within(rtol, atol):
    """Parameters agree to rtol/atol (compared in float32)."""
    def check(first, second):
        for a, b in zip(first.params, second.params):
            np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=rtol,
                                       atol=atol)
    return check


def second_to_float32_rounding_of_first(first, second):
    assert_close_to_mindspore(second.params, first.params)


def params_and_last_loss_within(rtol, atol, loss_rel):
    def check(first, second):
        for a, b in zip(first.params, second.params):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
        assert first.losses[-1] == pytest.approx(second.losses[-1], rel=loss_rel)
    return check


def model_reference(make_theirs):
    """The reference of a ModelCase: MindSpore's own optimizer, make_theirs(params), trained the
    same way."""
    def run(xs, ys, epochs, build_net):
        net = build_net()
        losses, acc = fit_and_score(net, make_theirs(net.trainable_params()), xs, ys, epochs)
        return values(net.trainable_params()), losses, acc
    return run


# -------------------------------------------------------------- AdamOffload --

def _adam_delta_case(dtype, marks=(), **kwargs):
    sens = kwargs.pop("sens", 1.0)

    def build(impl):
        net = make_net(seed=4, dtype=dtype)
        return net, ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.01,
                                         weight_decay=0.01, use_nesterov=True, impl=impl,
                                         **kwargs)

    npdt = {ms.float32: np.float32, ms.float16: np.float16}[dtype]
    if dtype == ms.float16:  # the delta is rounded to float16 before it is added
        check = params_within(5e-3, 5e-3)
    elif kwargs.get("adamw"):  # the device applies the decay apart from the step: rounding differs
        check = second_to_float32_rounding_of_first
    else:
        check = bit_identical
    label = "-".join([str(npdt.__name__)] + [f"{k}={v}" for k, v in kwargs.items()])
    return Agreement(label, "native", "delta", build, lambda: batch(dtype=npdt), 8, check,
                     sens=sens, marks=marks)


def _adam_checkpoint(kind):
    def build():
        net = make_net(seed=7)
        if kind == "float32":
            opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=PolyLR(),
                                       weight_decay=0.01, use_nesterov=True)
        else:
            opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.01,
                                       weight_decay=0.01, use_nesterov=True, moment_dtype=kind)
        return net, opt

    saved = {"float32": {"moment1.fc1.weight": ms.float32, "moment2.fc1.weight": ms.float32},
             "bfloat16": {"moment1.fc1.weight": ms.bfloat16, "moment2.fc1.weight": ms.bfloat16},
             "int8": {"moment1.fc1.weight": ms.int8, "moment2.fc1.weight": ms.uint8,
                      "moment1_scale.fc1.weight": ms.float32,
                      "moment2_scale.fc1.weight": ms.float32}}[kind]
    return CheckpointCase(kind, build, batch, 20, saved, marks=() if kind == "float32" else SLOW)


def _adam_model_data():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((256, 6)).astype(np.float32)
    return xs, (xs[:, 0] + xs[:, 1] > 0).astype(np.int32)


def _adam_model():
    net = make_net(seed=2)
    return net, ms_optim.AdamOffload(net.trainable_params(), 0.01)


ADAM_OFFLOAD = OptimizerInfo(
    name="AdamOffload",
    cls=ms_optim.AdamOffload,
    required={},
    impls=("native", "delta"),
    state=adam_state,
    error_inputs=[
        ErrorInput(dict(learning_rate="0.1"), TypeError, "learning_rate"),
        ErrorInput(dict(learning_rate=True), TypeError, "learning_rate"),
        ErrorInput(dict(learning_rate=-0.1), ValueError, "learning_rate"),
        ErrorInput(dict(beta1=1), TypeError, "beta1"),
        ErrorInput(dict(beta2="0.9"), TypeError, "beta2"),
        ErrorInput(dict(eps=1), TypeError, "eps"),
        ErrorInput(dict(loss_scale="1"), TypeError, "loss_scale"),
        ErrorInput(dict(loss_scale=True), TypeError, "loss_scale"),
        ErrorInput(dict(weight_decay="0.1"), TypeError, "weight_decay"),
        ErrorInput(dict(weight_decay=None), TypeError, "weight_decay"),
        ErrorInput(dict(use_locking=1), TypeError, "use_locking"),
        ErrorInput(dict(use_nesterov="yes"), TypeError, "use_nesterov"),
        ErrorInput(dict(loss_scale=0.0), ValueError, "loss_scale"),
        ErrorInput(dict(loss_scale=-2), ValueError, "loss_scale"),
        ErrorInput(dict(eps=0.0), ValueError, "eps"),
        ErrorInput(dict(eps=-1e-8), ValueError, "eps"),
        ErrorInput(dict(eps=1e-46), ValueError, "For 'AdamOffload', the 'eps' .*float32"),
        ErrorInput(dict(eps=1e300), ValueError, "'eps'"),
        ErrorInput(dict(beta1=0.0), ValueError, "beta1"),
        ErrorInput(dict(beta1=1.0), ValueError, "beta1"),
        ErrorInput(dict(beta2=1.5), ValueError, "beta2"),
        ErrorInput(dict(beta2=0.99999999999), ValueError,
                   r"For 'AdamOffload', the 'beta2' must be in range \(0.0, 1.0\) also in float32"),
        # nn.Optimizer keeps weight_decay * loss_scale, in float32
        ErrorInput(dict(weight_decay=10.0, loss_scale=1e38), ValueError,
                   r"For 'AdamOffload', the 'weight_decay' times the 'loss_scale' must be finite "
                   r"in float32 .* but got 10.0 \* 1e\+38 = 1e\+39"),
        ErrorInput(dict(weight_decay=-0.01), ValueError, "weight_decay"),
        ErrorInput(dict(moment_dtype="float16"), ValueError, "moment_dtype"),
        ErrorInput(dict(moment_dtype=8), TypeError, "moment_dtype.*must be a str"),
        ErrorInput(dict(adamw=1), TypeError, "adamw"),
        ErrorInput(dict(impl="gpu"), ValueError, "impl"),
        ErrorInput(dict(impl="inplace"), ValueError, "impl"),
        # numpy numbers as Python's: an integer is no float, a bool no number, a range is a range
        ErrorInput(dict(eps=np.int64(1)), TypeError,
                   "For 'AdamOffload', the 'eps' must be a float"),
        ErrorInput(dict(beta2=np.bool_(True)), TypeError, "For 'AdamOffload', the 'beta2'"),
        ErrorInput(dict(beta1=np.float32(1.0)), ValueError,
                   r"'beta1' must be in range \(0.0, 1.0\)"),
        ErrorInput(dict(weight_decay=float("inf")), ValueError,
                   "For 'AdamOffload', the 'weight_decay' must be finite"),
        ErrorInput(dict(weight_decay=np.bool_(False)), TypeError, "'weight_decay'"),
        *shared_error_inputs("AdamOffload"),
    ],
    valid_inputs=[dict(eps=1e-40),  # subnormal but > 0 in float32
                  dict(learning_rate=np.float32(1e-3), beta1=np.float32(0.9),
                       beta2=np.float64(0.99), eps=np.float32(1e-7),
                       weight_decay=np.float32(0.01), loss_scale=np.int64(2)),
                  *shared_valid_inputs()],
    repr_case=ReprCase(lambda: dict(learning_rate=HalvingLR()),
                       exact="AdamOffload(learning_rate=HalvingLR, beta1=0.9, beta2=0.999, "
                             "eps=1e-08, use_nesterov=False, weight_decay=0.0, loss_scale=1.0, "
                             "impl='native', params=3)"),
    agreements=[_adam_delta_case(ms.float32, loss_scale=2.0, sens=2.0),
                _adam_delta_case(ms.float16, SLOW, loss_scale=2.0, sens=2.0)]
    + [_adam_delta_case(ms.float32, SLOW, moment_dtype=kind, adamw=adamw)
       for kind in ("float32", "bfloat16", "int8") for adamw in (False, True)],
    checkpoints=[_adam_checkpoint(kind) for kind in ("float32", "bfloat16", "int8")],
    model=ModelCase(_adam_model_data, _adam_model, 5,
                    model_reference(lambda params: nn.AdamOffload(params, 0.01)),
                    loss_ratio=0.5, min_acc=0.9, marks=SLOW),
)


def _adam_host_step(p, moments, g, lr, wd, c, powers, delta):
    (m, v), (b1p, b2p) = moments, powers
    if delta:
        if c.get("decoupled"):  # AdamW's step before its decay: no bias correction
            b1p = b2p = np.float32(0.0)
        return reference.adam_delta(m, v, g, lr, c["beta1"], c["beta2"], c["eps"], b1p, b2p,
                                    bool(c["nesterov"]), c["inv_scale"])
    if c.get("decoupled"):
        return reference.adamw_step(p, m, v, g, lr, c["beta1"], c["beta2"], c["eps"], wd,
                                    c["inv_scale"])
    return reference.adam_offload_step(p, m, v, g, lr, c["beta1"], c["beta2"], c["eps"], b1p,
                                       b2p, wd, c["inv_scale"], bool(c["nesterov"]))


_ADAM_CONSTS = dict(beta1=0.9, beta2=0.999, eps=1e-8, inv_scale=0.25, nesterov=0)
ADAM_HOST_STEP = HostStep(
    rule="adam", signed=dict(m=True, v=False), powers=True, step=_adam_host_step,
    variants=dict(plain=("adam", _ADAM_CONSTS),
                  nesterov=("adam", dict(_ADAM_CONSTS, nesterov=1)),
                  adamw=("adam_ext", dict(_ADAM_CONSTS, decoupled=1))))


# --------------------------------------------------------------------- Lamb --

def _lamb_agreement_build(impl):
    net = make_net(seed=9)
    return net, ms_optim.Lamb(net.trainable_params(), learning_rate=0.02,
                              grad_clip=ClipGradByGlobalNorm(1.0), impl=impl)


def _lamb_checkpoint():
    net = make_net(seed=8)
    return net, ms_optim.Lamb(net.trainable_params(), learning_rate=HalvingLR(),
                              grad_clip=ClipGradByGlobalNorm(1.0))


def _lamb_model_data():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((256, 6)).astype(np.float32)
    return xs, (xs[:, 0] - xs[:, 2] > 0).astype(np.int32)


def _lamb_model():
    net = make_net(seed=2)
    return net, ms_optim.Lamb(net.trainable_params(), learning_rate=0.02,
                              grad_clip=ClipGradByNorm(1.0))


def _lamb_model_reference(xs, ys, epochs, build_net):
    """The numpy Lamb driven by the gradients at its own parameters (computed by MindSpore)."""
    net = build_net()
    step = reference_lamb(net.trainable_params(), lambda t, p: 0.02, lambda p: 0.01,
                          ClipGradByNorm(1.0), 1.0)
    losses = fit_reference(net, xs, ys, epochs, step)
    return values(net.trainable_params()), losses, None


LAMB = OptimizerInfo(
    name="Lamb",
    cls=ms_optim.Lamb,
    required={},
    impls=("native", "ops"),
    state=lambda opt: values(opt.moment1) + values(opt.moment2),
    error_inputs=[
        ErrorInput(dict(beta1=0.0), ValueError, "beta1"),
        ErrorInput(dict(beta1=1.0), ValueError, "beta1"),
        ErrorInput(dict(beta2=1.2), ValueError, "beta2"),
        ErrorInput(dict(beta1=0.99999999999), ValueError,
                   r"For 'Lamb', the 'beta1' must be in range \(0.0, 1.0\) also in float32"),
        ErrorInput(dict(beta2="x"), TypeError, "beta2"),
        ErrorInput(dict(epsilon=0.0), ValueError, "epsilon"),
        ErrorInput(dict(epsilon=-1e-6), ValueError, "epsilon"),
        ErrorInput(dict(epsilon=1e-46), ValueError, "For 'Lamb', the 'epsilon' .*float32"),
        ErrorInput(dict(epsilon=1e300), ValueError, "'epsilon'"),
        ErrorInput(dict(lamb_weight_decay=-0.1), ValueError, "lamb_weight_decay"),
        ErrorInput(dict(lamb_weight_decay="0.1"), TypeError, "lamb_weight_decay"),
        ErrorInput(dict(exclude_from_weight_decay_fn=3), TypeError,
                   "exclude_from_weight_decay_fn"),
        ErrorInput(dict(learning_rate=-1.0), ValueError, "learning_rate"),
        ErrorInput(dict(learning_rate="fast"), TypeError, "learning_rate"),
        ErrorInput(dict(grad_clip=1.0), TypeError, "grad_clip"),
        ErrorInput(dict(grad_clip=nn.ClipByNorm()), TypeError, "grad_clip"),
        ErrorInput(dict(always_adapt=1), TypeError, "always_adapt"),
        ErrorInput(dict(loss_scale=0.0), ValueError, "loss_scale"),
        ErrorInput(dict(impl="cuda"), ValueError, "impl"),
        # MindSpore's names for Lamb's own arguments point to them
        ErrorInput(dict(weight_decay=0.1), TypeError, "'weight_decay'.*'lamb_weight_decay'"),
        ErrorInput(dict(eps=0.1), TypeError, "'eps'.*'epsilon'"),
        ErrorInput(dict(momentum=0.9), TypeError,
                   "unexpected keyword argument 'momentum'; it takes params, learning_rate"),
        # as AdamOffload: betas and epsilon are floats (numpy's too), never ints
        ErrorInput(dict(beta1=1), TypeError,
                   "For 'Lamb', the 'beta1' must be a float, but got int"),
        ErrorInput(dict(beta2=np.int64(0)), TypeError, "For 'Lamb', the 'beta2' must be a float"),
        ErrorInput(dict(epsilon=1), TypeError, "For 'Lamb', the 'epsilon' must be a float"),
        ErrorInput(dict(beta1=np.float32(0.0)), ValueError,
                   r"'beta1' must be in range \(0.0, 1.0\)"),
        ErrorInput(dict(lamb_weight_decay=float("inf")), ValueError,
                   "For 'Lamb', the 'lamb_weight_decay' must be finite"),
        ErrorInput(dict(loss_scale=True), TypeError, "loss_scale"),
        *shared_error_inputs("Lamb", decay="lamb_weight_decay"),
    ],
    valid_inputs=[dict(epsilon=1e-40),  # subnormal but > 0 in float32
                  dict(learning_rate=np.float64(0.01), lamb_weight_decay=np.int32(0),
                       beta1=np.float32(0.9), beta2=np.float32(0.999),
                       epsilon=np.float32(1e-6), loss_scale=np.float32(1.0)),
                  *shared_valid_inputs()],
    repr_case=ReprCase(lambda: dict(grad_clip=ClipGradByGlobalNorm(1.0)),
                       exact="Lamb(learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, "
                             "beta2=0.999, epsilon=1e-06, "
                             "grad_clip=ClipGradByGlobalNorm(clip_norm=1.0), "
                             "exclude_from_weight_decay_fn=None, always_adapt=False, "
                             "loss_scale=1.0, impl='native', params=3)"),
    agreements=[Agreement("global_clip", "native", "ops", _lamb_agreement_build,
                          lambda: batch(n=32), 20, params_and_last_loss_within(1e-4, 1e-5, 1e-4),
                          marks=SLOW)],
    checkpoints=[CheckpointCase("schedule_global_clip", _lamb_checkpoint, batch, 12, marks=SLOW)],
    model=ModelCase(_lamb_model_data, _lamb_model, 6, _lamb_model_reference,
                    loss_ratio=0.3, min_acc=0.9),
)


# --------------------------------------------------------------------- Lion --

def _lion_delta_case(dtype, marks=(), **kwargs):
    def build(impl):
        net = make_net(seed=5, dtype=dtype)
        return net, ms_optim.Lion(net.trainable_params(), learning_rate=0.01, weight_decay=0.5,
                                  loss_scale=2.0, impl=impl, **kwargs)

    npdt = {ms.float32: np.float32, ms.float16: np.float16}[dtype]
    # float32: the device applies the kernel's rule (p * keep + step), so the bits agree;
    # float16: the step is rounded to float16 before it is added
    check = bit_identical if dtype == ms.float32 else params_within(5e-3, 5e-3)
    label = "-".join([str(npdt.__name__)] + [f"{k}={v}" for k, v in kwargs.items()])
    return Agreement(label, "native", "delta", build, lambda: batch(dtype=npdt), 8, check,
                     sens=2.0, marks=marks)


def _lion_checkpoint(kind):
    def build():
        net = make_net(seed=7)
        return net, ms_optim.Lion(net.trainable_params(), learning_rate=PolyLR(),
                                  weight_decay=0.1, moment_dtype=kind)

    saved = {"float32": {"moment.fc1.weight": ms.float32},
             "bfloat16": {"moment.fc1.weight": ms.bfloat16},
             "int8": {"moment.fc1.weight": ms.int8, "moment_scale.fc1.weight": ms.float32}}[kind]
    return CheckpointCase(kind, build, batch, 20, saved, marks=() if kind == "float32" else SLOW)


def _lion_model():
    net = make_net(seed=2)
    return net, ms_optim.Lion(net.trainable_params(), 0.01, weight_decay=0.1)


def _lion_model_reference(xs, ys, epochs, build_net):
    """The numpy Lion (reference.lion_step) driven by the gradients at its own parameters
    (computed by MindSpore); no decay of the parameters named beta or gamma (MindSpore's
    rule)."""
    net = build_net()
    params = net.trainable_params()
    state = [(p.asnumpy().copy(), np.zeros(p.shape, np.float32)) for p in params]
    wds = [0.0 if "beta" in p.name or "gamma" in p.name else 0.1 for p in params]

    def step(grads):
        for (rp, rm), g, wd in zip(state, grads, wds):
            reference.lion_step(rp, rm, g, 0.01, 0.9, 0.99, weight_decay=wd)
        return [rp for rp, _ in state]

    losses = fit_reference(net, xs, ys, epochs, step)
    return values(net.trainable_params()), losses, None


LION = OptimizerInfo(
    name="Lion",
    cls=ms_optim.Lion,
    required={},
    impls=("native", "delta"),
    state=lambda opt: [bits(p.asnumpy()) for p in tuple(opt.moment) + tuple(opt.moment_scale)],
    error_inputs=[
        ErrorInput(dict(beta1=0.0), ValueError, r"For 'Lion', the 'beta1' must be in range"),
        ErrorInput(dict(beta2=1.0), ValueError, r"For 'Lion', the 'beta2' must be in range"),
        ErrorInput(dict(beta2=0.99999999999), ValueError,
                   r"For 'Lion', the 'beta2' must be in range \(0.0, 1.0\) also in float32 .* "
                   r"which is 1.0 in float32"),
        ErrorInput(dict(loss_scale=1e38), ValueError,
                   r"For 'Lion', the 'weight_decay' of parameter group 0 times the 'loss_scale' "
                   r"must be finite in float32", groups=_group(weight_decay=10.0),
                   id="group weight_decay=10 loss_scale=1e38"),
        ErrorInput(dict(beta1=1), TypeError, "For 'Lion', the 'beta1' must be a float"),
        ErrorInput(dict(weight_decay=-0.1), ValueError, "'weight_decay'"),
        ErrorInput(dict(weight_decay="0.1"), TypeError, "'weight_decay'"),
        ErrorInput(dict(moment_dtype="float16"), ValueError, "moment_dtype"),
        ErrorInput(dict(moment_dtype=8), TypeError, "moment_dtype.*must be a str"),
        ErrorInput(dict(impl="ops"), ValueError, "impl"),
        # Adam's arguments and other Lion implementations' names
        ErrorInput(dict(eps=1e-8), TypeError, "For 'Lion', got an unexpected keyword argument "
                   "'eps'; it takes params, learning_rate, beta1, beta2, weight_decay"),
        ErrorInput(dict(betas=(0.9, 0.99)), TypeError,
                   r"'betas'; pass betas=\(b1, b2\) as beta1=b1, beta2=b2\."),
        *shared_error_inputs("Lion"),
    ],
    valid_inputs=[dict(learning_rate=np.float32(1e-3), beta1=np.float32(0.95),
                       beta2=np.float64(0.98), weight_decay=np.float32(0.01),
                       loss_scale=np.int64(2)),
                  *shared_valid_inputs()],
    repr_case=ReprCase(lambda: dict(learning_rate=HalvingLR()),
                       exact="Lion(learning_rate=HalvingLR, beta1=0.9, beta2=0.99, "
                             "weight_decay=0.0, loss_scale=1.0, impl='native', params=3)"),
    agreements=[_lion_delta_case(ms.float32)]
    + [_lion_delta_case(ms.float32, SLOW, moment_dtype=kind) for kind in ("bfloat16", "int8")]
    + [_lion_delta_case(ms.float16, SLOW)],
    checkpoints=[_lion_checkpoint(kind) for kind in ("float32", "bfloat16", "int8")],
    model=ModelCase(_adam_model_data, _lion_model, 5, _lion_model_reference,
                    loss_ratio=0.5, min_acc=0.9, marks=SLOW),
)


LION_HOST_STEP = HostStep(
    rule="lion", signed=dict(m=True), powers=False,
    step=lambda p, moments, g, lr, wd, c, powers, delta: reference.lion_step(
        p, moments[0], g, lr, c["beta1"], c["beta2"], wd, c["inv_scale"], delta),
    variants=dict(plain=("lion", dict(beta1=0.9, beta2=0.99, inv_scale=0.25))))


# -------------------------------------------------------------- DGCMomentum --

DGC_BASE = dict(learning_rate=0.1, momentum=0.9, rampup_begin_step=0)


def wide_dgc(dtype=ms.float32, impl="native", bucket_sparsity=None, **extra):
    """WideNet and a DGCMomentum compressing its first weight: dense steps 0-1, then sparsity
    0.9 for 4 steps, then 0.99 (with `bucket_sparsity`, the other parameters as a bucket;
    `extra` overrides DGCMomentum's other arguments)."""
    ms.set_seed(1)
    net = WideNet(dtype)
    kwargs = dict(learning_rate=0.05, momentum=0.9, rampup_begin_step=2, rampup_step=4,
                  sparsity=[0.9, 0.99], impl=impl, bucket_sparsity=bucket_sparsity)
    opt = ms_optim.DGCMomentum(net.trainable_params(), **{**kwargs, **extra})
    assert opt.compressed_params == ["fc1.weight"]
    assert len(opt.bucketed_params) == (0 if bucket_sparsity is None else 3)
    return net, opt


def _wide_batch(dtype=np.float32):
    return lambda: batch(n=32, n_in=64, dtype=dtype)


def _dgc_model_data():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((256, 64)).astype(np.float32)
    return xs, xs[:, :3].argmax(1).astype(np.int32)


def _dgc_model_reference(xs, ys, epochs, build_net):
    """DGCReference (wide_dgc's hyper-parameters) driven by the gradients at its own parameters
    (computed by MindSpore)."""
    net = build_net()  # the same initial weights
    ref = reference.DGCReference(values(net.trainable_params()), 0.9, 2, 4, [0.9, 0.99])

    def step(grads):
        ref.step([grads], 0.05)
        return ref.params

    losses = fit_reference(net, xs, ys, epochs, step)
    return values(net.trainable_params()), losses, None


DGC_MOMENTUM = OptimizerInfo(
    name="DGCMomentum",
    cls=ms_optim.DGCMomentum,
    required=DGC_BASE,
    impls=("native", "ops"),
    state=lambda opt: values(opt.u) + values(opt.v),
    error_inputs=[
        ErrorInput(dict(momentum=-0.1), ValueError, "momentum"),
        ErrorInput(dict(momentum="0.9"), TypeError, "momentum"),
        *[ErrorInput(dict(momentum=m), ValueError,
                     r"For 'DGCMomentum', the 'momentum' must be in range \[0.0, 1.0\)")
          for m in (1, 1.0, 1.5)],
        ErrorInput(dict(momentum=0.99999999999), ValueError,
                   r"For 'DGCMomentum', the 'momentum' must be in range \[0.0, 1.0\) also in "
                   r"float32"),
        ErrorInput(dict(rampup_begin_step=-1), ValueError, "rampup_begin_step"),
        # the step count is an int32 in the graph
        ErrorInput(dict(rampup_begin_step=2**31), ValueError,
                   r"'rampup_begin_step' \+ 'rampup_step' must be at most 2147483647"),
        ErrorInput(dict(rampup_begin_step=2**31 - 10, rampup_step=10), ValueError,
                   r"'rampup_begin_step' \+ 'rampup_step' must be at most 2147483647"),
        ErrorInput(dict(local_grad_clip_norm=1e-50), ValueError,
                   r"'local_grad_clip_norm' must be greater than 0 and finite in float32"),
        ErrorInput(dict(rampup_begin_step=1.5), TypeError, "rampup_begin_step"),
        ErrorInput(dict(rampup_step=0), ValueError, "rampup_step"),
        ErrorInput(dict(sparsity=[]), ValueError, "sparsity"),
        ErrorInput(dict(sparsity=[0.9, 1.0]), ValueError, "sparsity"),
        ErrorInput(dict(sparsity=[-0.1]), ValueError, "sparsity"),
        ErrorInput(dict(sparsity=[0.99, 0.9]), ValueError, "sparsity"),
        ErrorInput(dict(sparsity=0.999), TypeError, "sparsity"),
        ErrorInput(dict(sparsity=["0.9"]), TypeError, "sparsity"),
        ErrorInput(dict(sparsity="Auto"), ValueError, "sparsity"),
        ErrorInput(dict(num_trainers=0), ValueError, "num_trainers"),
        ErrorInput(dict(num_trainers=2), ValueError, "num_trainers"),
        ErrorInput(dict(num_trainers=1.0), TypeError, "num_trainers"),
        ErrorInput(dict(use_nesterov=1), TypeError, "use_nesterov"),
        ErrorInput(dict(local_grad_clip_norm=0.0), ValueError, "local_grad_clip_norm"),
        ErrorInput(dict(grad_clip=ClipGradByGlobalNorm(1.0)), TypeError, "grad_clip"),
        ErrorInput(dict(grad_clip=ClipGradByNorm(1.0), local_grad_clip_norm=1.0), ValueError,
                   "grad_clip"),
        ErrorInput(dict(regularization="l2"), TypeError, "regularization"),
        ErrorInput(dict(regularization=L2Decay(0.1), weight_decay=0.1), ValueError,
                   "regularization"),
        ErrorInput(dict(learning_rate=-1.0), ValueError, "learning_rate"),
        ErrorInput(dict(loss_scale=0), ValueError, "loss_scale"),
        ErrorInput(dict(impl="gpu"), ValueError, "impl"),
        ErrorInput(dict(bucket_sparsity=1.0), ValueError, "bucket_sparsity"),
        ErrorInput(dict(bucket_sparsity=-0.5), ValueError, "bucket_sparsity"),
        ErrorInput(dict(bucket_sparsity=float("nan")), ValueError, "bucket_sparsity"),
        ErrorInput(dict(bucket_sparsity="0.9"), TypeError, "bucket_sparsity"),
        ErrorInput(dict(bucket_sparsity=[0.9]), TypeError, "bucket_sparsity"),
        ErrorInput(dict(bucket_sparsity=True), TypeError, "bucket_sparsity"),
        ErrorInput(dict(lr_in_residuals=1), TypeError, "lr_in_residuals"),
        ErrorInput(dict(lr_in_residuals="yes"), TypeError, "lr_in_residuals"),
        ErrorInput(dict(lr_in_residuals=None), TypeError, "lr_in_residuals"),
        ErrorInput(dict(dense_params="weight"), TypeError, "dense_params"),
        ErrorInput(dict(dense_params=[0]), TypeError, "dense_params"),
        ErrorInput(dict(dense_params=["no.such.weight"]), ValueError,
                   "'dense_params' names 'no.such.weight', which is not one of"),
        # numpy integers are ints, numpy bools are not
        ErrorInput(dict(rampup_begin_step=np.int64(-1)), ValueError,
                   "For 'DGCMomentum', the 'rampup_begin_step' must be greater than or equal to 0"),
        ErrorInput(dict(rampup_begin_step=np.bool_(True)), TypeError,
                   "For 'DGCMomentum', the 'rampup_begin_step' must be an int"),
        ErrorInput(dict(rampup_step=True), TypeError, "'rampup_step' must be an int"),
        ErrorInput(dict(num_trainers=np.int64(2)), ValueError, "'num_trainers' is 2"),
        ErrorInput(dict(momentum=np.float32(1.0)), ValueError,
                   r"For 'DGCMomentum', the 'momentum' must be in range \[0.0, 1.0\)"),
        ErrorInput(dict(local_grad_clip_norm=np.float32(0.0)), ValueError, "local_grad_clip_norm"),
        ErrorInput(dict(weight_decay=float("inf")), ValueError,
                   "For 'DGCMomentum', the 'weight_decay' must be finite"),
        *shared_error_inputs("DGCMomentum"),
    ],
    valid_inputs=[dict(momentum=0.0),
                  dict(learning_rate=np.float32(0.1), momentum=np.float32(0.9),
                       rampup_begin_step=np.int64(10), rampup_step=np.int32(2),
                       num_trainers=np.int64(1), local_grad_clip_norm=np.float32(10.0),
                       weight_decay=np.float64(0.01), loss_scale=np.int64(2),
                       bucket_sparsity=np.float32(0.5)),
                  dict(bucket_sparsity=0),
                  dict(lr_in_residuals=True, bucket_sparsity=0.9),
                  dict(sparsity="auto", bucket_sparsity=0.9),
                  *shared_valid_inputs()],
    repr_case=ReprCase(lambda: dict(learning_rate=0.1, momentum=0.9, rampup_begin_step=5,
                                    sparsity=[0.75, 0.999]),
                       start="DGCMomentum(learning_rate=0.1, momentum=0.9, rampup_begin_step=5, "
                             "rampup_step=1, sparsity=(0.75, 0.999), ",
                       end="impl='native', exchange='auto', bucket_sparsity=None, "
                           "lr_in_residuals=False, dense_params=None, nranks=1, params=3)"),
    # the same selections, sums and residual updates in either: the same bits
    agreements=[Agreement("dense_and_both_stages", "native", "ops",
                          lambda impl: wide_dgc(impl=impl), _wide_batch(), 12, bit_identical),
                Agreement("bucket", "native", "ops",
                          lambda impl: wide_dgc(impl=impl, bucket_sparsity=0.8), _wide_batch(),
                          12, bit_identical)],
    checkpoints=[
        CheckpointCase("float32", wide_dgc, _wide_batch(), 12,
                       {"fc1.weight": ms.float32, "dgc_u.fc1.weight": ms.float32,
                        "dgc_v.fc1.weight": ms.float32}, marks=SLOW),
        # a float16 network: float32 residuals for the compressed weight, its own dtype for the
        # others
        CheckpointCase("float16", lambda: wide_dgc(ms.float16), _wide_batch(np.float16), 12,
                       {"fc1.weight": ms.float16, "dgc_u.fc1.weight": ms.float32,
                        "dgc_v.fc1.weight": ms.float32, "dgc_u.fc1.bias": ms.float16},
                       marks=SLOW),
        # the bucket of the small float16 parameters: float32 residuals u and v
        CheckpointCase("float16_bucket", lambda: wide_dgc(ms.float16, bucket_sparsity=0.8),
                       _wide_batch(np.float16), 12,
                       {"fc1.bias": ms.float16, "dgc_u.fc1.bias": ms.float32,
                        "dgc_v.fc1.bias": ms.float32, "dgc_v.fc2.weight": ms.float32}),
        # learning-rate-scaled residuals under a decaying rate: the step's rate is read from
        # the restored global step
        CheckpointCase("lr_in_residuals_decaying",
                       lambda: wide_dgc(learning_rate=list(np.linspace(0.05, 0.005, 24)),
                                        lr_in_residuals=True, bucket_sparsity=0.8),
                       _wide_batch(), 12,
                       {"dgc_u.fc1.weight": ms.float32, "dgc_v.fc1.weight": ms.float32,
                        "dgc_v.fc1.bias": ms.float32}, marks=SLOW),
    ],
    model=ModelCase(_dgc_model_data, lambda: wide_dgc(), 8, _dgc_model_reference,
                    loss_ratio=0.1, min_acc=0.95, marks=SLOW),
)


OPTIMIZERS = [ADAM_OFFLOAD, LAMB, LION, DGC_MOMENTUM]
HOST_STEPS = [ADAM_HOST_STEP, LION_HOST_STEP]
