"""The checks every optimizer passes, driven by its row of tests/optim_db.py: construction errors
and edge values, implementations and their agreement, checkpoint resume, training through
ms.Model, the learning-rate API, parameter groups and duplicates, repr."""
import resource

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore.common.initializer import initializer

import ms_optim
from ms_optim import _native
from tests.helpers import (CpuLossScaleCell, HalvingLR, assert_checkpoint_resumes,
                           assert_close_to_mindspore, assert_trained, batch, fit_and_score,
                           named_params, random_grads, train_cell, values)
from tests.nets import WideNet
from tests.optim_db import OPTIMIZERS, Run, kwargs_label

def _cases(field):
    """(info, case) for every case of `field` of every row, with the case's marks."""
    return [pytest.param(info, case, id=f"{info.name}-{case.id}", marks=case.marks)
            for info in OPTIMIZERS for case in getattr(info, field)]


optimizers = pytest.mark.parametrize("info", OPTIMIZERS, ids=[i.name for i in OPTIMIZERS])


# ------------------------------------------------------------- construction --

ERROR_CASES = [pytest.param(info, case, id=f"{info.name}-{case.label}")
               for info in OPTIMIZERS for case in info.error_inputs]


@pytest.mark.parametrize("info, case", ERROR_CASES)
def test_bad_arguments_raise_naming_the_argument(info, case):
    params = named_params()
    with pytest.raises(case.error, match=case.match):
        info.make(case.groups(params) if case.groups else params, **case.kwargs)


@optimizers
def test_learning_rate_generator_is_read_once_as_a_schedule(info):
    """A generator of per-step rates is taken as nn.Optimizer takes it: read once, in order."""
    opt = info.make(named_params(), learning_rate=(0.02 / 2 ** i for i in range(3)))
    assert opt.dynamic_lr
    for step, want in enumerate([0.02, 0.01, 0.005]):
        opt.global_step.set_data(Tensor([step], ms.int32))
        assert opt.current_lr() == pytest.approx(want)


VALID_CASES = [pytest.param(info, kwargs, id=f"{info.name}-{kwargs_label(kwargs)}")
               for info in OPTIMIZERS for kwargs in info.valid_inputs]


@pytest.mark.parametrize("info, kwargs", VALID_CASES)
def test_edge_values_are_accepted(info, kwargs):
    params = named_params()
    opt = info.make(params, **kwargs)
    before = values(params)
    opt(random_grads(params))
    after = values(params)
    assert all(np.isfinite(a).all() for a in after)
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))


@optimizers
@pytest.mark.parametrize("params", [None, 3, "w", [], [1, 2], [{"params": []}, "x"]])
def test_bad_params_raise(info, params):
    with pytest.raises((TypeError, ValueError), match="params"):
        info.make(params)


@optimizers
def test_integer_parameters_rejected(info):
    p = Parameter(Tensor(np.zeros(3, np.int32)), name="counts")
    with pytest.raises(TypeError, match="counts"):
        info.make([p])


@optimizers
def test_missing_library_fails_at_first_use_naming_the_file(info, monkeypatch, tmp_path):
    missing = str(tmp_path / "libms_optim.so")
    monkeypatch.setattr(_native._LIBRARY, "handle", None)
    monkeypatch.setattr(_native, "library_path", lambda: missing)
    with pytest.raises(ms_optim.NativeLibraryError, match="libms_optim.so"):
        info.make(named_params())
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not an ELF file")
    monkeypatch.setattr(_native, "library_path", lambda: str(broken))
    with pytest.raises(ms_optim.NativeLibraryError, match="broken.so"):
        _native.isa()


@optimizers
def test_no_deprecation_warning(info, capfd):
    params = named_params()
    capfd.readouterr()
    info.make(params)
    captured = capfd.readouterr()
    assert "deprecated" not in (captured.out + captured.err).lower()


@optimizers
def test_constructor_signature_is_the_declared_one(info):
    """The argument capture wraps __init__ without changing what help() and inspect show:
    the declared arguments, no **kwargs; a positional call binds as declared."""
    import inspect
    cls = type(info.make(named_params()))
    names = list(inspect.signature(cls.__init__).parameters)
    assert names[:2] == ["self", "params"] and "kwargs" not in names
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD
                   for p in inspect.signature(cls).parameters.values())
    opt = info.make(named_params(), learning_rate=0.25)
    assert opt._arguments["learning_rate"] == 0.25
    assert "params" not in opt._arguments
    assert list(opt._arguments) == names[2:]


@optimizers
def test_a_subclass_that_forwards_keywords_builds_and_a_missing_argument_is_named(info):
    import inspect
    base = type(info.make(named_params()))

    class Forwarding(base):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)

    required = [n for n, p in inspect.signature(base).parameters.items()
                if p.default is inspect.Parameter.empty and n != "params"]
    kwargs = {n: 0.1 if n == "learning_rate" else 0.9 if n == "momentum" else 0
              for n in required}
    opt = Forwarding(named_params(), **{**kwargs, "learning_rate": 0.25})
    assert opt._arguments["learning_rate"] == 0.25
    with pytest.raises(TypeError, match=rf"^For '{info.name}', got an unexpected keyword "
                                        r"argument 'lr'"):
        Forwarding(named_params(), lr=0.1, **kwargs)
    if required:  # every missing argument named at once
        names = ", ".join(f"'{n}'" for n in required)
        plural = "s" * (len(required) > 1)
        with pytest.raises(TypeError, match=rf"^For '{info.name}', missing {len(required)} "
                                            rf"required argument{plural}: {names}\.$"):
            base(named_params())
    # an argument given twice is that mistake, whatever else is missing
    with pytest.raises(TypeError, match=rf"^For '{info.name}', multiple values for argument "
                                        r"'learning_rate'"):
        base(named_params(), 0.1, learning_rate=0.1)


@optimizers
def test_repr_shows_hyper_parameters(info):
    case = info.repr_case
    opt = info.make(named_params(), **case.kwargs())
    text = repr(opt)
    if case.exact is not None:
        assert text == case.exact
    else:
        assert text.startswith(case.start) and text.endswith(case.end), text
    assert str(opt) == text


# ---------------------------------------------------------- implementations --

@optimizers
def test_impls_by_name_and_the_default_on_cpu(info):
    assert info.make(named_params()).impl == info.impls[0]
    for impl in info.impls:
        assert info.make(named_params(), impl=impl).impl == impl


def _write_faults(param):
    """The page faults this process takes writing zeros over `param`'s memory, and its
    pages (4 KiB)."""
    data = param.asnumpy().view(np.uint8)  # a view of the memory on a CPU target
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    data[...] = 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, data.size // 4096


@optimizers
def test_the_state_memory_is_mapped_at_construction(info):
    """The state the host kernels read and write is written once when the optimizer is
    built (_step.fault_in), so the first step does not fault on every page of it; a fresh
    zeros Parameter of the same size faults on nearly every page."""
    size = 1 << 24  # 64 MiB: above the C allocator's largest threshold for mapping anew
    params = [Parameter(Tensor(np.full((size,), 0.5, np.float32)), name="w")]
    opt = info.make(params)
    own = {p.name for p in params}
    state = [p for p in opt.get_parameters() if p.name not in own and p.size >= size]
    assert state, "no state as large as a parameter"
    for p in state:
        faults, pages = _write_faults(p)
        assert faults < pages // 10, (p.name, faults, pages)
    fresh = Parameter(initializer("zeros", (size,), ms.float32), name="fresh")
    faults, pages = _write_faults(fresh)
    assert faults > pages // 2, (faults, pages)


def _train(build, impl, data, steps, sens, state):
    net, opt = build(impl)
    assert opt.impl == impl
    cell = train_cell(net, opt, sens=sens)
    x, y = data()
    losses = [float(cell(x, y).asnumpy()) for _ in range(steps)]
    return Run(values(net.trainable_params()), state(opt), losses)


@pytest.mark.parametrize("info, case", _cases("agreements"))
def test_impls_agree_in_training(info, case):
    """The same network and batch trained with each of two implementations."""
    first, second = (_train(case.build, impl, case.data, case.steps, case.sens, info.state)
                     for impl in (case.first, case.second))
    case.check(first, second)


# --------------------------------------------------------------- checkpoints --

@pytest.mark.parametrize("info, case", _cases("checkpoints"))
def test_checkpoint_resume_matches_uninterrupted(info, case, tmp_path):
    def build():
        net, opt = case.build()
        return net, opt, train_cell(net, opt)

    path = str(tmp_path / f"{info.name}.ckpt")
    assert_checkpoint_resumes(build, case.steps, *case.data(), path,
                              lambda net, opt: values(net.trainable_params()) + info.state(opt))
    saved = ms.load_checkpoint(path)
    for name, dtype in case.saved.items():
        assert saved[name].dtype == dtype, name


# ------------------------------------------------------- dynamic loss scale --

@pytest.mark.slow
@optimizers
def test_a_step_skipped_for_overflow_leaves_every_parameter_as_it_was(info):
    """Under MindSpore's dynamic loss scale (nn.TrainOneStepWithLossScaleCell with
    DynamicLossScaleUpdateCell, as ms.Model's amp_level="O2" trains), a step whose gradients
    overflow leaves the weights and every Parameter of the optimizer (moments, residuals,
    global_step) as they were, and training goes on.  WideNet, whose first weight
    DGCMomentum compresses from the first step."""
    ms.set_seed(1)
    net = WideNet()
    kwargs = dict(rampup_begin_step=0, sparsity=[0.9]) if info.name == "DGCMomentum" else {}
    opt = info.make(net.trainable_params(), **kwargs)
    manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 10, scale_factor=2,
                                            scale_window=1000)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = CpuLossScaleCell(nn.WithLossCell(net, loss_fn), opt, scale_sense=manager)
    cell.set_train()
    x, y = batch(n=32, n_in=64)
    for _ in range(3):
        assert not cell(x, y)[1]

    def everything():
        return {p.name: p.asnumpy().copy() for p in net.trainable_params()} | {
            name: p.asnumpy().copy() for name, p in opt.parameters_and_names()}

    before = everything()
    cell.scale_sense.set_data(Tensor(np.float32(2.0 ** 120)))  # overflows these gradients
    assert cell(x * 1e6, y)[1]
    after = everything()
    assert after.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)
    assert int(opt.global_step.asnumpy().reshape(-1)[0]) == 3
    cell.scale_sense.set_data(Tensor(np.float32(2.0 ** 10)))
    losses = [float(cell(x, y)[0].asnumpy()) for _ in range(20)]
    assert np.isfinite(losses).all() and losses[-1] < 0.95 * losses[0], losses


# ----------------------------------------------------------------- ms.Model --

@pytest.mark.parametrize("info", [pytest.param(i, marks=i.model.marks, id=i.name)
                                  for i in OPTIMIZERS])
def test_trains_with_model_in_graph_mode(info):
    """ms.Model training steps as the row's reference, to float32 rounding, and learns."""
    case = info.model
    xs, ys = case.data()
    net, opt = case.build()
    losses, acc = fit_and_score(net, opt, xs, ys, epochs=case.epochs)
    ref_params, ref_losses, ref_acc = case.reference(xs, ys, case.epochs, lambda: case.build()[0])
    assert_close_to_mindspore(values(net.trainable_params()), ref_params)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    if ref_acc is not None:
        assert acc == ref_acc
    assert_trained(losses, acc, loss_ratio=case.loss_ratio, min_acc=case.min_acc)


@optimizers
def test_gradient_mistakes_raise_before_anything_compiles(info, tmp_path, monkeypatch):
    """Called from Python, a step checks its gradients itself: one clear message, no graph
    traceback and no analyze_fail.ir written into the user's folder."""
    monkeypatch.chdir(tmp_path)
    params = named_params()
    opt = info.make(params)
    grads = random_grads(params)
    with pytest.raises(TypeError, match=rf"^For '{info.name}', the gradients must be mindspore "
                                        r"Tensors, but gradient 0 is a numpy.ndarray"):
        opt(tuple(g.asnumpy() for g in grads))
    with pytest.raises(ValueError, match=rf"^For '{info.name}', the number of gradients must "
                                         rf"equal the number of parameters, {len(params)}, but "
                                         r"got 1\.$"):
        opt(grads[:1])
    bad = (Tensor(np.ones((3, 3), np.float32)),) + grads[1:]
    with pytest.raises(ValueError, match=rf"^For '{info.name}', the gradient of parameter "
                                         rf"'{params[0].name}' must have its shape"):
        opt(bad)
    assert not list(tmp_path.rglob("*.ir"))
    opt(grads)  # then the right ones step


@optimizers
def test_a_learning_rate_list_shorter_than_the_run_names_itself(info):
    params = named_params()
    opt = info.make(params, learning_rate=[0.01, 0.005])
    opt(random_grads(params))
    opt(random_grads(params, seed=2))
    past = (rf"^For '{info.name}', the 'learning_rate' list has 2 value\(s\), one per step, and "
            r"the run went past them \(step 2")
    with pytest.raises(ValueError, match=past):
        opt(random_grads(params, seed=3))
    with pytest.raises(ValueError, match=past):  # and the rate of that step, asked for
        opt.current_lr()


@optimizers
def test_the_optimizer_is_called_with_the_gradients_alone(info):
    """opt(gradients) or opt(gradients=...): any other arguments raise TypeError naming the
    optimizer before anything runs (DGCMomentum's construct takes the host's branch
    arguments after the gradients: a user's extra argument must not pick a branch)."""
    params = named_params()
    before = values(params)
    opt = info.make(params)
    grads = random_grads(params)
    called = rf"^For '{info.name}', the optimizer is called with one argument, the gradients"
    for args, kwargs, got in [((), {}, "none"), ((grads, 0), {}, "2 positional arguments"),
                              ((grads,), dict(x=1), r"1 positional argument and the keyword "
                                                    r"arguments \['x'\]"),
                              ((), dict(grads=grads), r"the keyword arguments \['grads'\]")]:
        with pytest.raises(TypeError, match=rf"{called}.*but got {got}\.$"):
            opt(*args, **kwargs)
    assert [np.array_equal(a, b) for a, b in zip(values(params), before)] == [True] * 3
    opt(gradients=grads)
    assert not any(np.array_equal(a, b) for a, b in zip(values(params), before))


@optimizers
def test_a_0d_parameter_steps_as_a_one_element_one(info):
    """A parameter of shape () (a learnable scalar, as nn.Adam takes one) steps to the bits
    of the same value held in shape (1,), with every implementation."""
    for impl in info.impls:
        runs = []
        for shape in ((), (1,)):
            params = [Parameter(Tensor(np.full(shape, 1.5, np.float32)), name="scale"),
                      *named_params()]
            opt = info.make(params, impl=impl)
            for seed in (1, 2, 3):
                grads = random_grads(params[1:], seed=seed)
                opt((Tensor(np.full(shape, 0.25 * seed, np.float32)),) + grads)
            assert params[0].shape == shape
            runs.append([v.reshape(-1) for v in values(params)])
        for a, b in zip(*runs):
            np.testing.assert_array_equal(a, b, err_msg=impl)


@optimizers
def test_a_parameter_without_elements_is_refused_naming_it(info):
    params = named_params() + [Parameter(Tensor(np.zeros((0, 3), np.float32)), name="empty")]
    with pytest.raises(ValueError, match=rf"^For '{info.name}', parameter 'empty' has no "
                                         r"elements \(shape \(0, 3\)\)"):
        info.make(params)


# ------------------------------------------------------------ learning rate --

# one optimizer in the default tier (each case compiles a train step), all four in the slow one
@pytest.mark.parametrize("info", [pytest.param(i, id=i.name, marks=() if i.name == "Lamb"
                                               else pytest.mark.slow) for i in OPTIMIZERS])
def test_a_learning_rate_list_shorter_than_a_compiled_run_names_itself(info):
    """Inside a compiled train step the list's lookup would fail with MindSpore's Gather
    message; get_lr's check raises first, naming the list."""
    net = nn.Dense(4, 2)
    opt = info.make(net.trainable_params(), learning_rate=[0.01, 0.005, 0.001])
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    x, y = Tensor(np.ones((3, 4), np.float32)), Tensor(np.zeros((3, 2), np.float32))
    for _ in range(3):
        step(x, y)
    with pytest.raises(ValueError, match=rf"^For '{info.name}', the 'learning_rate' list has 3 "
                                         r"value\(s\), one per step, and the run went past them "
                                         r"\(step 3, counted from 0"):
        step(x, y)


@optimizers
def test_get_lr_is_mindspores(info):
    opt = info.make(named_params(), learning_rate=0.01)
    assert isinstance(opt.get_lr(), Parameter)
    assert opt.get_lr() is nn.Optimizer.get_lr(opt)
    listed = info.make(named_params(), learning_rate=[0.01, 0.005])
    np.testing.assert_array_equal(listed.get_lr().asnumpy(),
                                  nn.Optimizer.get_lr(listed).asnumpy())


@optimizers
def test_current_lr_and_set_lr_drive_training(info):
    params = named_params()
    opt = info.make(params, learning_rate=0.01)
    assert isinstance(opt.current_lr(), float)
    assert opt.current_lr() == pytest.approx(0.01)
    opt.set_lr(0)
    assert opt.current_lr() == 0.0
    before = values(params)
    opt(random_grads(params))
    for a, p in zip(before, params):
        np.testing.assert_array_equal(a, p.asnumpy())
    opt.set_lr(0.1)
    assert opt.current_lr() == pytest.approx(0.1)
    opt(random_grads(params, seed=2))
    assert all(not np.array_equal(a, p.asnumpy()) for a, p in zip(before, params))


@optimizers
def test_set_lr_refuses_bad_values(info):
    opt = info.make(named_params(), learning_rate=0.01)
    for bad in ("0.1", True, None, Tensor(0.1)):
        with pytest.raises(TypeError, match=f"For '{info.name}', set_lr"):
            opt.set_lr(bad)
    for bad in (-1.0, float("nan"), float("inf"), 1e39, 10**400):
        with pytest.raises(ValueError, match=f"For '{info.name}', set_lr"):
            opt.set_lr(bad)
    assert opt.current_lr() == pytest.approx(0.01)


@optimizers
@pytest.mark.parametrize("schedule", ["cell", pytest.param("list", marks=pytest.mark.slow)])
def test_set_lr_refuses_a_schedule(info, schedule):
    lr = HalvingLR() if schedule == "cell" else [0.02, 0.01, 0.005]
    params = named_params()
    opt = info.make(params, learning_rate=lr)
    assert opt.current_lr() == pytest.approx(0.02)
    opt(random_grads(params))
    assert opt.current_lr() == pytest.approx(0.01)
    with pytest.raises(RuntimeError, match="schedule"):
        opt.set_lr(0.1)


# ---------------------------------------------------------- parameter groups --

@optimizers
def test_current_lr_and_set_lr_with_groups(info):
    params = named_params()
    groups = [{"params": params[:1], "lr": 0.05}, {"params": params[1:2]},
              {"params": params[2:], "lr": 0.2}]
    opt = info.make(groups, learning_rate=0.01)
    assert opt.current_lr() == pytest.approx([0.05, 0.01, 0.2])
    opt.set_lr(0.0)
    assert opt.current_lr() == [0.0, 0.0, 0.0]
    before = values(params)
    opt(random_grads(params))
    for a, p in zip(before, params):
        np.testing.assert_array_equal(a, p.asnumpy())
    # groups without their own 'lr': one float
    plain = info.make([{"params": params[:1]}, {"params": params[1:]}], learning_rate=0.03)
    assert plain.current_lr() == pytest.approx(0.03)


@optimizers
def test_groups_given_as_generators(info):
    params = named_params()
    opt = info.make([{"params": (p for p in params[:1]), "lr": 0.1},
                     {"params": iter(params[1:])}])
    assert len(opt.parameters) == 3
    assert opt.current_lr() == pytest.approx([0.1, info.make(named_params()).current_lr()])
    # 'order_params' too, read once (the check of its names does not use it up)
    params = named_params()
    opt = info.make([{"params": params, "lr": 0.1},
                     {"order_params": (p for p in reversed(params))}])
    assert [p.name for p in opt.parameters] == [p.name for p in reversed(params)]


@optimizers
def test_same_parameter_twice(info):
    params = named_params()
    with pytest.raises(ValueError, match=f"For '{info.name}', parameter 'fc.bias' is given twice"):
        info.make(params + [params[1]])
    with pytest.raises(ValueError, match="'fc.weight' is given twice"):
        info.make([{"params": params}, {"params": params[:1], "lr": 0.1}])
    twin = Parameter(Tensor(np.zeros((5, 3), np.float32)), name="out.weight")
    with pytest.raises(ValueError, match="'out.weight' is given twice .*name"):
        info.make(params + [twin])
