"""An optimizer called from Python (``opt(grads)``: a PyNative loop, or the optimizer alone in
GRAPH_MODE) steps to the same bits as the same optimizer compiled into a caller's graph (a Cell
whose construct calls it, as TrainOneStepCell does, in GRAPH_MODE).

DGCMomentum takes two routes: called from Python, it reads its step on the host and runs the
graph of that step's branch (warm-up, or one sparsity stage); compiled into a caller's graph, it
branches on the device.  Its schedule here crosses every branch, and the steps are checked
against the numpy reference too.
"""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from ms_optim.reference import DGCReference
from tests.helpers import named_params, values
from tests.optim_db import OPTIMIZERS

STEPS = 7


class Caller(nn.Cell):
    """A graph that calls the optimizer, as TrainOneStepCell does."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def construct(self, grads):
        return self.opt(grads)


@pytest.fixture
def restore_mode():
    before = ms.get_context("mode")
    yield
    ms.set_context(mode=before)


def _dgc(params):
    # dense steps 0-1, then sparsities 0.75, 0.9, 0.99 over steps 2-4, 0.99 after
    return ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=2,
                                rampup_step=3, sparsity=[0.75, 0.9, 0.99])


def _dgc_params():
    rng = np.random.default_rng(0)
    return [ms.Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=n)
            for n, s in (("w", (128, 160)), ("b", (7,)), ("w2", (160, 130)))]


def _grads(params, step):
    rng = np.random.default_rng(100 + step)
    return tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in params)


def _run(make_opt, make_params, route):
    """The parameters and the optimizer's Parameters after STEPS steps by `route`."""
    params = make_params()
    opt = make_opt(params)
    if route == "pynative":
        ms.set_context(mode=ms.PYNATIVE_MODE)
        call = opt
    elif route == "graph, alone":
        ms.set_context(mode=ms.GRAPH_MODE)
        call = opt
    else:
        ms.set_context(mode=ms.GRAPH_MODE)
        call = Caller(opt)
    for step in range(STEPS):
        call(_grads(params, step))
    return values(params) + [p.asnumpy().copy() for p in opt.get_parameters()]


ROUTES = ("pynative", "graph, alone")
_IN_A_CALLER = {}


def _in_a_caller(make_opt, make_params):
    """_run's "graph, in a caller" route, the tests' expected values: computed once per
    optimizer and parameter maker (a fresh run each time would give the same bits)."""
    key = (make_opt, make_params)
    if key not in _IN_A_CALLER:
        _IN_A_CALLER[key] = _run(make_opt, make_params, "graph, in a caller")
    return _IN_A_CALLER[key]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("info", OPTIMIZERS, ids=[i.name for i in OPTIMIZERS])
def test_called_from_python_matches_compiled_in_a_graph(info, route, restore_mode):
    make_params = named_params if info.cls is not ms_optim.DGCMomentum else _dgc_params
    make_opt = info.make if info.cls is not ms_optim.DGCMomentum else _dgc
    expected = _in_a_caller(make_opt, make_params)
    got = _run(make_opt, make_params, route)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_dgc_branches_from_python_follow_the_reference(restore_mode):
    """The host-chosen branches are the schedule's: the DGC reference, step by step, to float32
    rounding, through the warm-up and each stage."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _dgc_params()
    opt = _dgc(params)
    assert opt.compressed_params == ["w", "w2"]
    assert [opt.stage(t) for t in range(STEPS)] == [None, None, 0, 1, 2, 2, 2]
    ref = DGCReference(values(params), 0.9, 2, 3, [0.75, 0.9, 0.99])
    for step in range(STEPS):
        grads = _grads(params, step)
        opt(grads)
        ref.step([[g.asnumpy() for g in grads]], 0.1)
        for p, r in zip(params, ref.params):
            np.testing.assert_allclose(p.asnumpy(), r, rtol=1e-6, atol=1e-6)


def _dgc_bucket(params):
    # as _dgc, the small parameters as one bucket at 0.8: it selects 0.75 of its entries at
    # stage 0, then 0.8 at stages 1 and 2, which share one bucket branch on the device
    return ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=2,
                                rampup_step=3, sparsity=[0.75, 0.9, 0.99], bucket_sparsity=0.8)


def _dgc_bucket_params():
    return _dgc_params() + [ms.Parameter(Tensor(np.random.default_rng(1).standard_normal(
        (40, 50)).astype(np.float32)), name="c")]


@pytest.mark.parametrize("route", ROUTES)
def test_dgc_bucket_branches_of_its_own_match_the_stages_called_from_python(route,
                                                                          restore_mode):
    """Compiled into a caller's graph, the bucket branches on its own selections (stages that
    select alike share a branch) apart from the compressed parameters' stages; called from
    Python, each step runs its stage whole.  Both routes reach the same bits."""
    opt = _dgc_bucket(_dgc_bucket_params())
    assert opt.bucketed_params == ["b", "c"] and opt.plan.bucket_k == (501, 401, 401)
    assert [s for s, _ in opt.stage_bounds] == [0, 1, 2]
    assert [s for s, _ in opt.bucket_stage_bounds] == [0, 1]
    expected = _in_a_caller(_dgc_bucket, _dgc_bucket_params)
    got = _run(_dgc_bucket, _dgc_bucket_params, route)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_dgc_reads_its_step_after_a_checkpoint_is_loaded(restore_mode):
    """A step count loaded into global_step picks the branch of that step."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _dgc_params()
    opt = _dgc(params)
    for step in range(3):
        opt(_grads(params, step))
    state = {p.name: Tensor(p.asnumpy()) for p in params + list(opt.get_parameters())}

    params2 = _dgc_params()
    opt2 = _dgc(params2)
    ms.load_param_into_net(opt2, {k: ms.Parameter(v, name=k) for k, v in state.items()})
    for p2, p in zip(params2, params):
        p2.set_data(Tensor(p.asnumpy()))
    assert int(opt2.global_step.asnumpy().reshape(-1)[0]) == 3
    for step in range(3, STEPS):
        opt(_grads(params, step))
        opt2(_grads(params2, step))
    for a, b in zip(values(params) + values(opt.get_parameters()),
                    values(params2) + values(opt2.get_parameters())):
        np.testing.assert_array_equal(a, b)


def test_dgc_counts_its_steps_and_follows_global_step_set_between_them(restore_mode, capfd):
    """Called from Python, DGCMomentum counts its steps on the host instead of reading
    global_step each step; when global_step moves between two of them (here a step of a
    compiled caller), the next step runs the branch of global_step's value, to the same bits
    as the steps of one route, and its retry writes nothing to stderr."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = _dgc_params()
    opt = _dgc(params)
    caller = Caller(opt)
    for step in range(STEPS):
        if step in (1, 3):  # compiled steps: the count falls behind, from warm-up to stage
            ms.set_context(mode=ms.GRAPH_MODE)
            caller(_grads(params, step))
            ms.set_context(mode=ms.PYNATIVE_MODE)
        else:
            opt(_grads(params, step))
    assert opt._host_step == STEPS
    assert "ms_optim:" not in capfd.readouterr().err
    expected = _in_a_caller(_dgc, _dgc_params)
    got = values(params) + [p.asnumpy().copy() for p in opt.get_parameters()]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_dgc_branch_of_each_step():
    """The constants __call__ compiles in: -1 for the dense warm-up, else the stage; with
    nothing compressed there is no warm-up, and every step takes the first stage's branch (the
    dense momentum), as the graph's own branches do."""
    opt = _dgc(_dgc_params())
    assert [opt._branch_at(t) for t in range(6)] == [
        (-1, False), (-1, False), (0, False), (1, False), (2, False), (2, False)]
    small = ms_optim.DGCMomentum(named_params(), learning_rate=0.1, momentum=0.9,
                                 rampup_begin_step=5, rampup_step=2, sparsity=[0.9, 0.99])
    assert small.compressed_params == [] and not small.host_branches
    assert [small._branch_at(t)[0] for t in (0, 4, 5, 9)] == [0, 0, 0, 1]
