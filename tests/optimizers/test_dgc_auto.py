"""DGCMomentum's sparsity="auto" in one process: the rule that picks the sparsity from the
measured steps (against a plain numpy reference of it), the step clock, and one worker's
steps, which are dense (msrun's workers: tests/distributed/test_dgc_msrun.py)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore import dtype as mstype

import ms_optim
from ms_optim.dgc import auto, wire
from ms_optim.dgc.density import SPARSITY_CHOICES
from tests.nets import WideNet

# the link experiment's big MLP: 64-4096-4096-10
MLP_SHAPES = [(4096, 64), (4096,), (4096, 4096), (4096,), (10, 4096), (10,)]


def _mlp_auto(workers=2):
    """AutoSparsity of a DGCMomentum over the big MLP's shapes, its bytes modeled for
    `workers` workers (the rule does not depend on the world it is built in)."""
    params = [Parameter(Tensor(np.zeros(s, np.float32)), name=f"p{i}")
              for i, s in enumerate(MLP_SHAPES)]
    opt = ms_optim.DGCMomentum(params, 0.05, 0.9, 0, sparsity="auto")
    stage_bytes = [opt._stats_at(s, 0, workers)["wire_bytes"]
                   for s in range(len(SPARSITY_CHOICES))]
    dense_bytes = opt._stats_at(None, 0, workers)["wire_bytes"]
    elements = sum(p.size for p in params)
    rule = auto.AutoSparsity(0, 1, stage_bytes, dense_bytes, elements)
    # the chunks' wire bytes as the rule prices them, among `workers`
    rule.chunk_bytes = tuple(wire.allreduce_wire_bytes(4 * n, workers)
                             for n in rule.chunk_elements)
    return rule, stage_bytes, dense_bytes


def _reference_choice(measured, stage_bytes, dense_bytes, chunk_bytes):
    """The rule in numpy (float64): the chunks' line gives the latency and seconds per wire
    byte; dense is the compute plus its bytes at that rate, each sparsity the probe's step
    plus its extra bytes, times STEP_RATIO; dense unless every measurement is there and a
    sparsity is faster by that measure."""
    compute, probe, small, large = measured
    per_byte = max(large - small, 0.0) / (chunk_bytes[1] - chunk_bytes[0])
    latency = max(small - per_byte * chunk_bytes[0], 0.0)
    dense = compute + latency + per_byte * dense_bytes
    cost = [r * (compute + probe + per_byte * (b - stage_bytes[-1]))
            for r, b in zip(auto.STEP_RATIO, stage_bytes)]
    best = int(np.argmin(cost))
    if min(measured) <= 0 or cost[best] >= dense:
        return auto.DENSE
    return best


def _pick(rule, measured):
    return int(rule.decide(Tensor(np.array(measured, np.float32))).asnumpy()[0])


def test_choice_matches_the_reference_rule():
    rule, stage_bytes, dense_bytes = _mlp_auto()
    assert rule.chunk_elements == (17_088_522 // 64, 4 * (17_088_522 // 64))  # 17.1M
    seen = set()
    for compute in (0.0, 0.01, 0.09, 0.5):
        for probe in (0.0, 0.002, 0.01, 0.05):
            # the chunks of 1 and 4 MB at 10 Gbit/s, 1 Gbit/s, 100 Mbit/s, and latency alone
            for small, large in ((0.002, 0.008), (0.017, 0.068), (0.17, 0.68),
                                 (0.001, 0.001), (0.003, 0.002)):
                measured = (compute, probe, small, large)
                want = _reference_choice(measured, stage_bytes, dense_bytes, rule.chunk_bytes)
                assert _pick(rule, measured) == want, measured
                seen.add(want)
    assert auto.DENSE in seen and len(seen) >= 3  # dense and several sparsities


def test_choice_on_links_of_the_link_experiment():
    """The MLP's compute (0.07 s) and 0.999 step (0.02 s of exchange and update) between two
    hosts: compressed at 1 Gbit/s, sparser at 100 Mbit/s; dense where the link costs nothing
    (the chunks take no longer than a latency), or a measurement is missing."""
    rule, _, _ = _mlp_auto()
    at_1g = _pick(rule, (0.07, 0.02, 0.017, 0.068))
    at_100m = _pick(rule, (0.07, 0.02, 0.17, 0.68))
    assert at_1g >= 0 and at_100m >= at_1g
    assert _pick(rule, (0.07, 0.02, 0.001, 0.001)) == auto.DENSE
    assert _pick(rule, (0.07, 0.0, 0.017, 0.068)) == auto.DENSE


def _params(shapes, dtype=np.float32):
    return [Parameter(Tensor(np.zeros(s, dtype)), name=f"p{i}") for i, s in enumerate(shapes)]


def test_dense_head_is_the_last_weight_up_to_its_share():
    share = auto.HEAD_SHARE
    assert share == 0.004
    # (ndims, sizes, compressible): 4 of 1,000 is exactly the share
    assert auto.dense_head([2, 2], [996, 4], [True, True]) == 1
    assert auto.dense_head([2, 2], [995, 5], [True, True]) is None
    # the last weight, whatever 1-D parameters follow it
    assert auto.dense_head([2, 1, 2, 1], [10000, 5, 7, 7], [True, False, True, False]) == 2
    # a last weight too small to compress (or of another dtype) leaves the others alone
    assert auto.dense_head([2, 2], [10000, 7], [True, False]) is None
    # nothing else compressed: no head
    assert auto.dense_head([2, 2], [10000, 7], [False, True]) is None
    assert auto.dense_head([1], [10000], [True]) is None
    assert auto.dense_head([], [], []) is None


def test_auto_sends_a_small_last_layer_dense_unless_dense_params_says():
    """A 16 x 1024 classifier is 0.38% of its MLP's compressible weights (the link
    experiment's 4096 x 10 one is 0.24%): with sparsity="auto" it is sent dense, as the hand
    recipe's dense_params does; an empty dense_params compresses it, a given one is used as
    it is, and a last layer above the share or too small to compress changes nothing."""
    mlp = [(1024, 64), (1024,), (4096, 1024), (4096,), (16, 1024), (16,)]
    opt = ms_optim.DGCMomentum(_params(mlp), 0.05, 0.9, 0, sparsity="auto")
    assert opt.compressed_params == ["p0", "p2"]
    assert opt.exchange_stats(0)["auto"]["dense_head"] == "p4"
    for none in ([], ()):
        opt = ms_optim.DGCMomentum(_params(mlp), 0.05, 0.9, 0, sparsity="auto",
                                   dense_params=none)
        assert opt.compressed_params == ["p0", "p2", "p4"]
        assert opt.exchange_stats(0)["auto"]["dense_head"] is None
    opt = ms_optim.DGCMomentum(_params(mlp), 0.05, 0.9, 0, sparsity="auto",
                               dense_params=["p0"])
    assert opt.compressed_params == ["p2", "p4"]
    assert opt.exchange_stats(0)["auto"]["dense_head"] is None
    # a fixed sparsity compresses what it can
    opt = ms_optim.DGCMomentum(_params(mlp), 0.05, 0.9, 0, sparsity=[0.99])
    assert opt.compressed_params == ["p0", "p2", "p4"]
    # 32,768 of 4,292,608 compressible elements (0.76%): above the share
    opt = ms_optim.DGCMomentum(_params(mlp[:4] + [(32, 1024)]), 0.05, 0.9, 0,
                               sparsity="auto")
    assert opt.compressed_params == ["p0", "p2", "p4"]
    # a 1024 x 2 head, too small to compress: the layer before it stays compressed
    opt = ms_optim.DGCMomentum(_params(mlp[:4] + [(2, 4096), (2,)]), 0.05, 0.9, 0,
                               sparsity="auto")
    assert opt.compressed_params == ["p0", "p2"]
    assert opt.exchange_stats(0)["auto"]["dense_head"] is None


def test_large_chunk_runs_where_it_costs_at_most_the_probing_steps():
    """The larger chunk (4 times the smaller's floats) runs where, at the smaller chunk's
    seconds per float, it takes at most the probing steps' compute and exchange together;
    elsewhere its time is the smaller one's scaled by the floats (no latency), and the
    choice is the one the scaled pair gives."""
    rule, stage_bytes, dense_bytes = _mlp_auto()
    assert rule.chunk_scale == 4.0
    for measured, pays in (((0.07, 0.02, 0.017, 0.0), True),     # 1 Gbit/s: 0.068 <= 0.27
                           ((0.07, 0.02, 0.0675, 0.0), True),    # 0.27 <= 0.27
                           ((0.07, 0.02, 0.068, 0.0), False),    # 0.272 > 0.27
                           ((0.07, 0.02, 0.17, 0.0), False),     # 100 Mbit/s
                           ((0.002, 0.001, 0.0001, 0.0), True)):  # a fast host pair
        got = rule.large_chunk_pays(Tensor(np.array(measured, np.float32)))
        assert bool(got.asnumpy()) == pays, measured
    scaled = rule.without_large_chunk(Tensor(np.float32([0.07, 0.02, 0.17, 0.0]))).asnumpy()
    np.testing.assert_array_equal(scaled, np.float32([0.07, 0.02, 0.17, 0.17 * 4.0]))
    assert _pick(rule, tuple(scaled)) == _reference_choice(
        tuple(float(v) for v in scaled), stage_bytes, dense_bytes, rule.chunk_bytes)
    # the line through the origin: seconds per wire byte from the smaller chunk alone
    dense, _ = rule.modeled_steps(Tensor(scaled))
    per_byte = 0.17 / rule.chunk_bytes[0]
    np.testing.assert_allclose(float(dense.asnumpy()), 0.07 + per_byte * dense_bytes,
                               rtol=1e-5)


class _Clock(nn.Cell):
    def __init__(self):
        super().__init__()
        self.clock = Parameter(Tensor(np.zeros(5, np.float64)), name="clock")
        self.op = auto.clock_op()
        self.call = ms_optim.aot.caller("ms_optim_step_clock")

    @ms.jit
    def construct(self, slot, after):
        return self.call(self.op, clock=self.clock, slot=slot, after=after)


def test_workers_samples_combine_slowest_step_and_least_chunks():
    """Every worker decides on the largest compute and probe step of all workers', and on
    the least of each chunk (one worker's chunk also holds its wait for the other)."""
    gathered = np.array([[0.003, 0.0024, 0.0043, 0.0061],
                         [0.0066, 0.0021, 0.0014, 0.0057],
                         [0.004, 0.0030, 0.0050, 0.0000]], np.float32)
    got = auto.AutoSparsity.combine(Tensor(gathered)).asnumpy()
    np.testing.assert_array_equal(got, np.float32([0.0066, 0.0030, 0.0014, 0.0]))


def test_step_clock_keeps_the_least_interval_per_slot():
    import time
    clock = _Clock()
    after = Tensor(np.zeros(1, np.int32))
    waits = [(-1, 0.0), (0, 0.05), (0, 0.02), (-1, 0.01), (3, 0.03), (3, 0.06)]
    for slot, wait in waits:
        time.sleep(wait)
        best = clock(Tensor(np.array([slot], np.int32)), after).asnumpy()
    assert 0.02 <= best[0] < 0.05 and 0.03 <= best[3] < 0.06 and best[1] == best[2] == 0
    np.testing.assert_array_equal(best, clock.clock.asnumpy()[1:].astype(np.float32))
    with pytest.raises(RuntimeError):  # a slot past the clock's
        clock(Tensor(np.array([4], np.int32)), after)


def _train(make_opt, host):
    ms.set_seed(1)
    net = WideNet(n_in=16, hidden=1100, n_out=4)
    opt = make_opt(net.trainable_params())
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                 reduction="mean"))
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((32, 16)).astype(np.float32))
    y = Tensor(rng.integers(0, 4, 32).astype(np.int32))
    if host:
        grad_fn = ms.value_and_grad(loss, None, opt.parameters)
        for _ in range(9):
            opt(grad_fn(x, y)[1])
    else:
        cell = nn.TrainOneStepCell(loss, opt)
        for _ in range(9):
            cell(x, y)
    return opt, [p.asnumpy() for p in net.trainable_params()]


@pytest.mark.parametrize("host", [False, True])
def test_one_worker_steps_dense_as_momentum(host):
    """With one worker nothing is exchanged: every step is nn.Momentum's, bit for bit, and
    the choice (dense) is there from the start."""
    opt, got = _train(lambda p: ms_optim.DGCMomentum(p, 0.05, 0.9, 0, sparsity="auto"), host)
    _, want = _train(lambda p: nn.Momentum(p, 0.05, 0.9), host)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert [opt.stage(t) for t in range(12)] == [None] * 12
    stats = opt.exchange_stats()
    assert stats["exchange"] == "dense"
    assert stats["auto"]["decided"] and stats["auto"]["sparsity"] is None
    assert opt.auto.choice.name == auto.CHOICE_NAME and opt.auto.choice.dtype == mstype.int32
