"""DGCMomentum's sparsity="auto" in one process: the rule that picks the sparsity from the
measured steps (against a plain numpy reference of it), the step clock, and one worker's
steps, which are dense (msrun's workers: tests/distributed/test_dgc_msrun.py)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore import dtype as mstype

import ms_optim
from ms_optim.dgc import auto
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
    return auto.AutoSparsity(0, 1, stage_bytes, dense_bytes), stage_bytes, dense_bytes


def _reference_choice(dense_s, probe_s, stage_bytes, dense_bytes):
    """The rule in numpy (float64): each sparsity's step modeled as the probe's plus its
    extra bytes at the rate the two measured steps imply, times STEP_RATIO; dense unless a
    sparsity is faster by that measure and the probe was shorter than dense."""
    if not 0 < probe_s < dense_s:
        return auto.DENSE
    per_byte = (dense_s - probe_s) / (dense_bytes - stage_bytes[-1])
    cost = [r * (probe_s + per_byte * (b - stage_bytes[-1]))
            for r, b in zip(auto.STEP_RATIO, stage_bytes)]
    best = int(np.argmin(cost))
    return best if cost[best] < dense_s else auto.DENSE


def test_choice_matches_the_reference_rule():
    rule, stage_bytes, dense_bytes = _mlp_auto()
    cases = [(d, p) for d in (0.005, 0.09, 0.3, 1.47, 15.0)
             for p in (0.0, 0.004, 0.05, 0.09, 0.1, 0.12, 0.2, 1.0)]
    seen = set()
    for dense_s, probe_s in cases:
        want = _reference_choice(dense_s, probe_s, stage_bytes, dense_bytes)
        got = int(rule.decide(Tensor(np.array([dense_s, probe_s], np.float32))).asnumpy()[0])
        assert got == want, (dense_s, probe_s)
        seen.add(got)
    assert auto.DENSE in seen and len(seen) >= 3  # dense and several sparsities


def test_choice_on_links_of_the_link_experiment():
    """Measured steps of the MLP between two hosts (benchmarks/README.md): dense 1.47 s and
    0.1 s at 0.999 on 1 Gbit/s compress; on a link where dense costs no more than the probe,
    or the probe was not measured, it stays dense."""
    rule, _, _ = _mlp_auto()
    pick = lambda d, p: int(rule.decide(Tensor(np.array([d, p], np.float32))).asnumpy()[0])
    assert pick(1.47, 0.1) >= 0
    assert pick(14.7, 0.1) >= pick(1.47, 0.1)  # a slower link is never denser
    assert pick(0.09, 0.1) == auto.DENSE
    assert pick(0.1, 0.0) == auto.DENSE
    assert pick(0.0, 0.0) == auto.DENSE


class _Clock(nn.Cell):
    def __init__(self):
        super().__init__()
        self.clock = Parameter(Tensor(np.zeros(3, np.float64)), name="clock")
        self.op = auto.clock_op()
        self.order = ms_optim.aot.call_order("ms_optim_step_clock")

    @ms.jit
    def construct(self, slot, after):
        return ms_optim.aot.call(self.op, self.order, clock=self.clock, slot=slot,
                                 after=after)


def test_step_clock_keeps_the_least_interval_per_slot():
    import time
    clock = _Clock()
    after = Tensor(np.zeros(1, np.int32))
    waits = [(-1, 0.0), (0, 0.05), (0, 0.02), (-1, 0.01), (1, 0.03), (1, 0.06)]
    for slot, wait in waits:
        time.sleep(wait)
        best = clock(Tensor(np.array([slot], np.int32)), after).asnumpy()
    assert 0.02 <= best[0] < 0.05 and 0.03 <= best[1] < 0.06
    np.testing.assert_array_equal(best, clock.clock.asnumpy()[1:].astype(np.float32))
    with pytest.raises(RuntimeError):  # a slot past the clock's
        clock(Tensor(np.array([2], np.int32)), after)


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
