"""DGCMomentum's bucket of small parameters (``bucket_sparsity``): the native and ops
paths against the numpy reference's rule, on odd sizes, float16, Nesterov and the warm-up
stages; per-parameter learning rates; what exchange_stats counts; the plan."""
import warnings

import numpy as np
import pytest

from mindspore import Parameter, Tensor

import ms_optim
from ms_optim import reference
from ms_optim.dgc.schedule import DGCPlan, bucket_stage_sparsity, selected_k

# two compressed parameters, and small ones of odd sizes (1, 7, 16383: one below the
# compression size) for the bucket
SHAPES = [(130, 129), (20000,), (1,), (7,), (3, 5), (16383,)]
WARMUP = [0.75, 0.9375, 0.999]


def _params(dtype=np.float32, shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.standard_normal(s).astype(dtype)), name=f"p{i}")
            for i, s in enumerate(shapes)]


def _grads(rng, shapes=SHAPES):
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _step_both(opt, ref, seed, steps, lr, shapes=SHAPES, dtype=np.float32):
    """`steps` steps of random gradients (`dtype`) through the optimizer and the reference."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        grads = [g.astype(dtype) for g in _grads(rng, shapes)]
        opt(tuple(Tensor(g) for g in grads))
        ref.step([grads], lr)


def _assert_params_equal(params, ref, ids=None):
    """Parameters `ids` (default: all) hold the reference's bits."""
    for i in range(len(params)) if ids is None else ids:
        np.testing.assert_array_equal(params[i].asnumpy(), ref.params[i], err_msg=f"p{i}")


@pytest.mark.parametrize("impl", ["native", "ops"])
@pytest.mark.parametrize("dtype,nesterov", [(np.float32, False), (np.float32, True),
                                            (np.float16, False)])
def test_bucket_matches_reference(impl, dtype, nesterov):
    """Dense steps 0-2, every warm-up stage (the bucket at min(stage, 0.9)), then 0.999 with
    the bucket at 0.9: parameters and residuals equal the reference's bits."""
    params = _params(dtype)
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=3,
                               rampup_step=8, sparsity=WARMUP, use_nesterov=nesterov,
                               impl=impl, bucket_sparsity=0.9)
    assert opt.compressed_params == ["p0", "p1"]
    assert opt.bucketed_params == ["p2", "p3", "p4", "p5"]
    numel = 1 + 7 + 15 + 16383
    assert opt.plan.bucket_k == (numel // 4, selected_k(numel, 0.9), selected_k(numel, 0.9))
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 3, 8, WARMUP,
                                 nesterov=nesterov, bucket_sparsity=0.9)
    _step_both(opt, ref, 2, 16, 0.05, dtype=dtype)
    _assert_params_equal(params, ref)
    for j, i in enumerate(opt.bucket_ids):
        assert opt.bucket_v[j].name == f"dgc_v.p{i}"
        np.testing.assert_array_equal(opt.bucket_v[j].asnumpy(), ref.v[0][i], err_msg=f"v{i}")
        np.testing.assert_array_equal(opt.u[i].asnumpy(), ref.u[0][i], err_msg=f"u{i}")
        assert opt.u[i].asnumpy().dtype == np.float32  # widened, as a compressed parameter's
    # the bucket selected across parameters: its residuals hold what was not sent
    v = np.concatenate([v.asnumpy().reshape(-1) for v in opt.bucket_v])
    assert 0 < np.count_nonzero(v) < v.size


def test_a_bucket_of_mixed_dtypes_matches_across_impls():
    """float16 and float32 small parameters in one bucket (one native apply op for both
    dtypes): the native kernels and the ops give the same bits, step after step."""
    def run(impl):
        params = _params()
        for i in (2, 4):  # two of the bucket's four parameters in float16
            params[i] = Parameter(Tensor(params[i].asnumpy().astype(np.float16)), name=f"p{i}")
        opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9,
                                   rampup_begin_step=1, sparsity=[0.99], impl=impl,
                                   bucket_sparsity=0.9)
        assert opt.bucketed_params == ["p2", "p3", "p4", "p5"]
        rng = np.random.default_rng(3)
        history = []
        for _ in range(6):
            grads = [g.astype(p.asnumpy().dtype) for g, p in zip(_grads(rng), params)]
            opt(tuple(Tensor(g) for g in grads))
            history.append([p.asnumpy().copy() for p in params])
        return history
    native, ops = run("native"), run("ops")
    for step, (a, b) in enumerate(zip(native, ops)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}, p{i}")


@pytest.mark.parametrize("exchange", ["allreduce", "leader", "union"])
def test_bucket_follows_the_exchange(exchange):
    """The bucket crosses the workers as `exchange` says (with one worker each is the exact
    step): the reference's bits, and exchange_stats names the bucket's exchange."""
    params = _params()
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=2,
                               sparsity=[0.99], exchange=exchange, bucket_sparsity=0.9)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 2, 1, [0.99],
                                 bucket_sparsity=0.9,
                                 exchange="exact" if exchange == "allreduce" else exchange)
    _step_both(opt, ref, 7, 6, 0.05)
    _assert_params_equal(params, ref)
    k, numel = selected_k(16406, 0.9), 16406
    stats = opt.exchange_stats(10, workers=4)
    assert stats["bucket_exchange"] == exchange
    assert stats["bucket_bytes"] == {"allreduce": 4 * numel, "leader": 8 * k,
                                     "union": 4 * (k // 4) + 4 * 4 * (k // 4)}[exchange]


def test_selection_spans_the_bucket():
    """One step of the bucket alone: exactly k entries of the concatenation move, chosen by
    |gradient| across every small parameter (a large gradient in a small tensor wins)."""
    shapes = [(20000,), (1,), (7,), (40,)]
    params = _params(shapes=shapes)
    before = [p.asnumpy().copy() for p in params]
    opt = ms_optim.DGCMomentum(params, learning_rate=1.0, momentum=0.0, rampup_begin_step=0,
                               sparsity=[0.99], bucket_sparsity=0.875)
    assert opt.plan.bucket_k == (selected_k(48, 0.875),) == (6,)
    grads = [np.zeros(s, np.float32) for s in shapes]
    grads[1][0] = 100.0  # the one-element tensor holds the largest entry
    grads[3][:] = np.arange(1, 41, dtype=np.float32) * np.float32(0.01)
    opt(tuple(Tensor(g) for g in grads))
    moved = [np.flatnonzero(p.asnumpy().reshape(-1) != b.reshape(-1))
             for p, b in zip(params, before)]
    assert list(moved[1]) == [0] and moved[2].size == 0
    assert list(moved[3]) == [35, 36, 37, 38, 39]


def test_group_learning_rates_apply_per_parameter():
    """The bucket applies each parameter's own learning rate: a group at lr 0 never moves,
    the other follows the reference's bits at its rate, and the residuals (which no
    learning rate touches) are the reference's for both."""
    params = _params()
    groups = [{"params": params[:4], "lr": 0.1}, {"params": params[4:], "lr": 0.0}]
    before = [p.asnumpy().copy() for p in params]
    opt = ms_optim.DGCMomentum(groups, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                               sparsity=[0.99], bucket_sparsity=0.5)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 0, 1, [0.99],
                                 bucket_sparsity=0.5)
    _step_both(opt, ref, 3, 4, 0.1)
    _assert_params_equal(params, ref, range(4))
    for i in (4, 5):
        np.testing.assert_array_equal(params[i].asnumpy(), before[i], err_msg=f"p{i}")
    for j, i in enumerate(opt.bucket_ids):
        np.testing.assert_array_equal(opt.bucket_v[j].asnumpy(), ref.v[0][i], err_msg=f"v{i}")
    assert np.count_nonzero(opt.bucket_v[-1].asnumpy()) > 0


@pytest.mark.parametrize("impl", ["native", "ops"])
def test_a_bucket_of_one_parameter_selecting_one_entry(impl):
    """A bucket of one 5-element parameter at 0.9 selects k = 1 entry a step: the
    reference's bits."""
    shapes = [(20000,), (5,)]
    params = _params(shapes=shapes)
    opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9, rampup_begin_step=1,
                               sparsity=[0.999], impl=impl, bucket_sparsity=0.9)
    assert opt.bucketed_params == ["p1"] and opt.plan.bucket_k == (1,)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 1, 1, [0.999],
                                 bucket_sparsity=0.9)
    _step_both(opt, ref, 11, 6, 0.05, shapes)
    _assert_params_equal(params, ref)
    np.testing.assert_array_equal(opt.bucket_v[0].asnumpy(), ref.v[0][1])
    assert np.count_nonzero(opt.bucket_v[0].asnumpy()) == 4  # one of 5 taken each step


def exact_exchange(opt, step, workers):
    """opt.exchange_stats at `step` among `workers` with the union left out of "auto"."""
    from ms_optim.dgc import wire
    union_from, wire.UNION_FROM_WORKERS = wire.UNION_FROM_WORKERS, workers + 1
    try:
        return opt.exchange_stats(step, workers=workers)
    finally:
        wire.UNION_FROM_WORKERS = union_from


def test_exchange_stats_count_the_bucket():
    opt = ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=3,
                               rampup_step=8, sparsity=WARMUP, bucket_sparsity=0.9)
    numel, large = 16406, 130 * 129 + 20000
    before = opt.exchange_stats(0)
    assert before["bytes"] == 4 * (numel + large) == before["dense_bytes"]
    assert before["bucket_exchange"] is None and before["bucket_bytes"] == 0
    k = selected_k(numel, 0.9)
    last = opt.exchange_stats(100)
    assert last["bucket_exchange"] == "allgather" and last["bucket_selected"] == k
    assert last["bucket_bytes"] == 8 * k and last["dense_part_bytes"] == 0
    assert last["bytes"] == 8 * (16 + 20) + 8 * k
    assert last["dense_bytes"] == 4 * (numel + large)
    # among 16 workers gathering k entries from each costs more than the dense bucket, and
    # the union of shared indices less than both: each worker's k // 16 indices, and the
    # values at every worker's
    wide = opt.exchange_stats(100, workers=16)
    applied = 16 * (k // 16)
    assert wide["bucket_exchange"] == "union" and wide["bucket_selected"] == applied
    assert wide["bucket_bytes"] == 4 * applied // 16 + 4 * applied
    assert exact_exchange(opt, 100, 16)["bucket_exchange"] == "allreduce"
    # the same dict without a bucket: the small parameters dense
    plain = ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=3,
                                 rampup_step=8, sparsity=WARMUP).exchange_stats(100)
    assert plain["dense_part_bytes"] == 4 * numel and plain["bucket_bytes"] == 0
    assert plain["dense_bytes"] == last["dense_bytes"]


def test_a_bucket_alone_is_compression():
    """Small parameters only: no 'compresses none' warning with a bucket, and its step
    matches the reference."""
    shapes = [(7, 3), (11,), (300,)]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ms_optim.DGCMomentum(_params(shapes=shapes), learning_rate=0.1, momentum=0.9,
                             rampup_begin_step=0)
    assert any("compresses none" in str(w.message) for w in seen)
    params = _params(shapes=shapes)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        opt = ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=2,
                                   sparsity=[0.99], bucket_sparsity=0.75)
    assert not any("compresses none" in str(w.message) for w in seen)
    ref = reference.DGCReference([p.asnumpy().copy() for p in params], 0.9, 2, 1, [0.99],
                                 bucket_sparsity=0.75)
    _step_both(opt, ref, 5, 6, 0.1, shapes)
    _assert_params_equal(params, ref)


def test_plan_bucket():
    plan = DGCPlan([20000, 1, 16383, 5], [True, True, True, False], [0.5, 0.99], 0, 2,
                   bucket_sparsity=0.9)
    assert plan.comp_ids == (0,) and plan.bucket_ids == (1, 2) and plan.dense_ids == (3,)
    assert plan.bucket_offsets == (0, 1) and plan.bucket_numel == 16384
    assert plan.bucket_k == (8192, selected_k(16384, 0.9))
    assert bucket_stage_sparsity(0.5, 0.9) == 0.5 and bucket_stage_sparsity(0.999, 0.9) == 0.9
    none = DGCPlan([20000, 1], [True, True], [0.99], 0, 1)
    assert none.bucket_ids == () and none.bucket_k == () and none.dense_ids == (1,)
