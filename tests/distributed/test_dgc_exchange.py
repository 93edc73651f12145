"""DGC's exchange: the per-stage choice between gathering the selections and
all-reducing the sparsified gradient, the shared-index exchanges (union and
leader), their byte model, and the parameter digest that spares the first
step's broadcast."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor

import ms_optim
from ms_optim import testing
from ms_optim.dgc import exchange
from tests.kernels.errors import rejects
from tests.sizes import SIZE_PARAMS

SHAPES = [(130, 129), (20000,), (7, 3)]
WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=f"w{i}")
            for i, s in enumerate(SHAPES)]


def _train(exchange, impl, steps=10):
    params = _params()
    opt = ms_optim.DGCMomentum(params, 0.05, 0.9, rampup_begin_step=2, rampup_step=6,
                               sparsity=[0.75, 0.99, 0.999], exchange=exchange, impl=impl)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        opt(tuple(Tensor(rng.standard_normal(s).astype(np.float32)) for s in SHAPES))
    return [p.asnumpy() for p in params] + [u.asnumpy() for u in opt.u] + \
        [v.asnumpy() for v in opt.v]


@pytest.mark.parametrize("impl", ["native", pytest.param("ops", marks=pytest.mark.slow)])
def test_allreduce_of_sparsified_gradient_gives_the_gathered_bits(impl):
    gathered, summed = _train("allgather", impl), _train("allreduce", impl)
    for a, b in zip(gathered, summed):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(gathered[0], _params()[0].asnumpy())  # it trained


@pytest.mark.parametrize("shared", ["leader", "union"])
@pytest.mark.parametrize("impl", ["native", pytest.param("ops", marks=pytest.mark.slow)])
def test_shared_index_exchanges_on_one_worker_are_the_exact_exchange(impl, shared):
    """With one worker the shared indices are that worker's own top-k: the exact exchange's
    bits."""
    exact, other = _train("allgather", impl), _train(shared, impl)
    for a, b in zip(exact, other):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shared", ["leader", "union"])
def test_shared_index_exchanges_across_several_buckets(monkeypatch, shared):
    """One compressed parameter per multi-tensor op: each take op fills its parameters'
    entries of the one value buffer, and the step keeps the exact exchange's bits."""
    exact = _train("allgather", "native")
    monkeypatch.setattr(ms_optim.aot, "MAX_TENSORS", 1)
    for a, b in zip(exact, _train(shared, "native")):
        np.testing.assert_array_equal(a, b)


def test_shared_index_exchange_bytes():
    """Per worker: the leader's k int32 indices broadcast and k float32 values all-reduced,
    whatever the number of workers; the union's max(1, k // N) indices per parameter gathered
    and the values at every worker's all-reduced, which stays near k while k >= N and grows
    past it; the wire bytes follow the measured collectives (wire.py)."""
    opt = ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=0, exchange="leader")
    k = int(130 * 129 * 0.001) + int(20000 * 0.001)
    small, control = 21, 9 * 4  # control: the replica check's row, gathered every step
    stats = {n: opt.exchange_stats(0, workers=n) for n in (2, 8, 64)}
    for n, s in stats.items():
        assert s["exchange"] == "leader" and s["selected"] == k
        assert s["bytes"] == 8 * k + 4 * small
        ring = 2 * (n - 1) / n  # a ring's share; MindSpore's collectives send twice it
        assert s["wire_bytes"] == round(2 * ring * 4 * small + 2 * (n - 1) * control
                                        + ring * 4 * k + 2 * ring * 4 * k)
    gathered = ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=0,
                                    exchange="allgather")
    checks = 2 * 63 * control  # the replica check's gather, the same for both
    assert (gathered.exchange_stats(0, workers=64)["wire_bytes"] - checks
            > 10 * (stats[64]["wire_bytes"] - checks))
    union = ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=0, exchange="union")
    for n in (2, 8, 64):  # each worker proposes k // n indices per parameter (at least one)
        s = union.exchange_stats(0, workers=n)
        proposed = max(1, 16 // n) + max(1, 20 // n)
        assert s["exchange"] == "union" and s["selected"] == n * proposed
        assert s["bytes"] == 4 * proposed + 4 * n * proposed + 4 * small
        ring = 2 * (n - 1) / n
        assert s["wire_bytes"] == round(2 * ring * 4 * small + 2 * (n - 1) * control
                                        + 2 * (n - 1) * 4 * proposed
                                        + 2 * ring * 4 * n * proposed)


def test_exchange_chosen_per_stage_for_the_world_size():
    opt = ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=10, rampup_step=100,
                               sparsity=WARMUP)
    comp = 130 * 129 + 20000
    small = 21
    assert opt.exchange_stats(9)["exchange"] == "dense"
    # Paddle's warning: 32 workers gathering 25% each would send 8x the dense gradient; the
    # union sends each worker's 131 + 156 proposals (k // 32 of k = 4192 and 5000) as
    # indices and the values at all 32 workers' proposals
    first = opt.exchange_stats(10, workers=32)
    applied = 32 * (4192 // 32 + 5000 // 32)
    assert first["exchange"] == "union" and first["selected"] == applied == 9184
    assert first["bytes"] == 4 * small + 4 * applied // 32 + 4 * applied
    assert opt.exchange_stats(10, workers=2)["exchange"] == "allgather"
    by_workers = {n: [opt.exchange_stats(10 + 20 * s, workers=n)["exchange"] for s in range(5)]
                  for n in (2, 3, 8, 32, 512)}
    assert by_workers[2] == ["allgather"] * 5
    # 3 workers, the exact exchanges only: gathering the 9192 entries at 0.75 (8 * 9192 *
    # 2 * 2 = 294144 bytes) costs less than all-reducing the 36770 floats (4 * 36770 * 2 *
    # 2 * 2/3 = 392213)
    assert by_workers[3] == ["allgather"] * 5
    # from 4 workers the union of shared indices, which sends fewer bytes at every stage
    assert by_workers[8] == by_workers[32] == by_workers[512] == ["union"] * 5
    last = opt.exchange_stats(500, workers=4)
    k = [int(130 * 129 * 0.001), int(20000 * 0.001)]
    assert last["exchange"] == "union"
    assert last["selected"] == sum(4 * (kj // 4) for kj in k) == sum(k)  # 16 and 20
    # three signature values, the step, the state's world size and rank and digest of
    # residual kinds, gathered every step; each worker's quarter of the indices gathered
    # (2 (N-1) b) and the values at all of them all-reduced (1.5 * 2 B)
    control = 9 * 4
    assert last["wire_bytes"] == round(1.5 * 2 * 4 * small + 2 * 3 * control
                                       + 2 * 3 * 4 * sum(k) // 4 + 1.5 * 2 * 4 * sum(k))
    assert last["dense_wire_bytes"] == round(1.5 * 2 * 4 * (comp + small))
    one = opt.exchange_stats(500)
    assert one["workers"] == 1 and one["wire_bytes"] == 0


def test_forced_exchange_and_bad_arguments():
    opt = ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=0, exchange="allreduce")
    assert opt.exchange_stats(0, workers=2)["exchange"] == "allreduce"
    with pytest.raises(ValueError, match="'exchange'"):
        ms_optim.DGCMomentum(_params(), 0.1, 0.9, rampup_begin_step=0, exchange="gather")
    with pytest.raises(ValueError, match="'workers'"):
        opt.exchange_stats(0, workers=0)
    with pytest.raises(TypeError, match="'workers'"):
        opt.exchange_stats(0, workers=2.5)


def _digest(*arrays):
    out = np.zeros(2, np.int32)
    testing.call_kernel("ms_optim_digest", p=[np.ascontiguousarray(a) for a in arrays], digest=out)
    return tuple(out)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("n", SIZE_PARAMS)
def test_digest_sees_every_bit(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(5).astype(dtype)
    base = _digest(x, y)
    assert _digest(x.copy(), y.copy()) == base
    for pos in {0, n // 2, n - 1}:
        flipped = x.copy()
        flipped.view(np.uint8)[pos * x.itemsize + x.itemsize - 1] ^= 1
        assert _digest(flipped, y) != base, pos
    assert _digest(y, x) != base  # order of the tensors counts
    assert _digest(x[:-1], y) != base  # and their sizes


def test_digest_rejects_bad_input():
    rejects("ms_optim_digest", "MSOPT_ERR_SIZE",
            r"^digest must have 2 element\(s\), got 3$", slot="digest",
            p=[np.ones(3, np.float32)], digest=np.zeros(3, np.int32))
    rejects("ms_optim_digest", "MSOPT_ERR_DTYPE", "^p0 has unsupported dtype complex64$", slot="p",
            p=[np.ones(3, np.complex64)], digest=np.zeros(2, np.int32))
    rejects("ms_optim_digest", "MSOPT_ERR_ARGS",
            r"^expected 1K \+ 1 tensors \(p:each -> digest\), got 1$",
            arrays=[np.zeros(2, np.int32)])


def test_digest_ops_of_two_dtypes_in_one_graph():
    """Parameters of two dtypes with the same count per bucket: each digest op keeps its
    own dtype (one registration per entry, input count and dtypes), so its result is
    the digest of the parameters' own bytes."""
    rng = np.random.default_rng(3)
    p32 = [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=f"a{i}")
           for i, s in enumerate([(5, 7), (16385,)])]
    p16 = [Parameter(Tensor(rng.standard_normal(s).astype(np.float16)), name=f"b{i}")
           for i, s in enumerate([(3,), (16383,)])]
    params = [p32[0], p16[0], p32[1], p16[1]]
    groups = exchange.ReplicaSync._digest_groups(params)
    # (how the parameters are picked: a run of consecutive ones or None, and the indices;
    # the op)
    assert [how for how, _ in groups] == [(None, (0, 2)), (None, (1, 3))]
    one_dtype = exchange.ReplicaSync._digest_groups(p32 + p32)
    assert [how for how, _ in one_dtype] == [((0, 4), (0, 1, 2, 3))]

    class Digests(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.ops = tuple(op for _, op in groups)

        def construct(self, a, b, c, d):
            return self.ops[0](a, c), self.ops[1](b, d)

    got = Digests()(*params)
    assert tuple(got[0].asnumpy()) == _digest(p32[0].asnumpy(), p32[1].asnumpy())
    assert tuple(got[1].asnumpy()) == _digest(p16[0].asnumpy(), p16[1].asnumpy())
