"""ms_optim.dgc.choose_sparsity: the densest sparsity whose modeled exchange fits the budget."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor

import ms_optim
from ms_optim.dgc import choose_sparsity, density, wire

MLP = [64 * 4096, 4096, 4096 * 4096, 4096, 4096 * 10, 10]   # the link experiment's big MLP


def test_densest_choice_within_the_budget():
    """The pick's exchange fits budget * step_s; every denser choice's does not."""
    for gbit in (0.1, 1.0, 10.0):
        for step_s in (0.01, 0.09, 1.0):
            s = choose_sparsity(MLP, workers=2, link_gbit_s=gbit, step_s=step_s, budget=0.5)
            cost = lambda x: density.exchange_seconds(MLP, x, workers=2, link_gbit_s=gbit)
            denser = [c for c in density.SPARSITY_CHOICES if c < s]
            assert all(cost(c) > 0.5 * step_s for c in denser)
            assert cost(s) <= 0.5 * step_s or s == max(density.SPARSITY_CHOICES)


def test_faster_link_or_longer_step_is_never_sparser():
    picks = [choose_sparsity(MLP, workers=2, link_gbit_s=g, step_s=0.09)
             for g in (0.01, 0.1, 1.0, 10.0, 100.0)]
    assert picks == sorted(picks, reverse=True) and picks[0] == 0.999 and picks[-1] == 0.9
    picks = [choose_sparsity(MLP, workers=2, link_gbit_s=1.0, step_s=t)
             for t in (0.001, 0.09, 10.0)]
    assert picks == [0.999, 0.98, 0.9]


def test_nothing_fits_gives_the_sparsest_choice():
    assert choose_sparsity(MLP, workers=2, link_gbit_s=1e-6, step_s=1e-3,
                           choices=[0.99, 0.9]) == 0.99


def test_seconds_are_the_optimizers_wire_bytes_over_the_rate():
    """exchange_seconds models what DGCMomentum.exchange_stats reports, for each exchange
    and number of workers (less the replica check's signature gather)."""
    shapes = [(130, 129), (20000,), (7, 3), (3000,)]
    params = [Parameter(Tensor(np.zeros(s, np.float32)), name=f"w{i}")
              for i, s in enumerate(shapes)]
    cases = [(ex, None) for ex in ("auto", "allgather", "allreduce", "union", "leader")]
    for exchange, bucket in cases + [("auto", 0.9), ("leader", 0.5)]:
        opt = ms_optim.DGCMomentum(params, 0.1, 0.9, rampup_begin_step=0, sparsity=[0.99],
                                   exchange=exchange, bucket_sparsity=bucket)
        for workers in (2, 4, 32):
            stats = opt.exchange_stats(0, workers=workers)
            signature = wire.allgather_wire_bytes(36, workers)  # 9 int32 per worker
            seconds = density.exchange_seconds([p.size for p in params], 0.99,
                                               workers=workers, link_gbit_s=2.0,
                                               exchange=exchange, bucket_sparsity=bucket)
            assert seconds * 2e9 / 8 == pytest.approx(stats["wire_bytes"] - signature, abs=1)


def test_takes_parameters():
    params = [Parameter(Tensor(np.zeros((4096, 4096), np.float32)), name="w"),
              Parameter(Tensor(np.zeros(10, np.float32)), name="b")]
    assert (choose_sparsity(params, workers=2, link_gbit_s=1.0, step_s=0.09)
            == choose_sparsity([4096 * 4096, 10], workers=2, link_gbit_s=1.0, step_s=0.09))


def test_parameters_that_are_not_compressed_count_dense():
    """A float64 parameter is never compressed: its elements go dense whatever the sparsity,
    as DGCMomentum sends them."""
    big64 = Parameter(Tensor(np.zeros((4096, 4096), np.float64)), name="w64")
    big32 = Parameter(Tensor(np.zeros((4096, 4096), np.float32)), name="w32")
    dense = density.exchange_seconds([big64.size], 0.999, workers=2, link_gbit_s=1.0,
                                     compressible=[False])
    assert dense == pytest.approx(wire.allreduce_wire_bytes(4 * big64.size, 2) * 8 / 1e9)
    assert choose_sparsity([big64], workers=2, link_gbit_s=1.0, step_s=0.09) == 0.999
    assert choose_sparsity([big32], workers=2, link_gbit_s=1.0, step_s=0.09) == 0.98


def test_dense_params_are_modeled_dense():
    """A compressible parameter named in dense_params costs what DGCMomentum sends for it
    dense, so the pick can get sparser; given by Parameter or by name alike."""
    params = [Parameter(Tensor(np.zeros(n, np.float32)), name=f"fc{i}.w")
              for i, n in enumerate(MLP)]
    head = params[4]   # the 4096 x 10 classifier
    picks = [choose_sparsity(params, workers=2, link_gbit_s=1.0, step_s=0.092, **kw)
             for kw in ({}, {"dense_params": [head]}, {"dense_params": ["fc4.w"]})]
    assert picks == [0.98, 0.99, 0.99]
    # an iterator is read once
    assert choose_sparsity(iter(params), workers=2, link_gbit_s=1.0, step_s=0.092,
                           dense_params=[head]) == 0.99
    assert choose_sparsity(iter(MLP), workers=2, link_gbit_s=1.0, step_s=0.092) == 0.98
    opt = ms_optim.DGCMomentum(params, 0.1, 0.9, rampup_begin_step=0, sparsity=[0.99],
                               dense_params=[head])
    stats = opt.exchange_stats(0, workers=2)
    signature = wire.allgather_wire_bytes(36, 2)
    seconds = density.exchange_seconds(MLP, 0.99, workers=2, link_gbit_s=2.0,
                                       compressible=[True] * 4 + [False, True])
    assert seconds * 2e9 / 8 == pytest.approx(stats["wire_bytes"] - signature, abs=1)


@pytest.mark.parametrize("kwargs, error, name", [
    ({"params": "w"}, TypeError, "'params'"),
    ({"params": []}, ValueError, "'params'"),
    ({"params": [1.5]}, TypeError, "'params'"),
    ({"workers": 0}, ValueError, "'workers'"),
    ({"workers": 2.0}, TypeError, "'workers'"),
    ({"link_gbit_s": 0}, ValueError, "'link_gbit_s'"),
    ({"link_gbit_s": "1"}, TypeError, "'link_gbit_s'"),
    ({"step_s": float("nan")}, ValueError, "'step_s'"),
    ({"budget": -0.5}, ValueError, "'budget'"),
    ({"exchange": "ring"}, ValueError, "'exchange'"),
    ({"bucket_sparsity": 1.0}, ValueError, "'bucket_sparsity'"),
    ({"bucket_sparsity": "0.9"}, TypeError, "'bucket_sparsity'"),
    ({"choices": []}, ValueError, "'choices'"),
    ({"choices": [0.9, 1.0]}, ValueError, "'choices'"),
    ({"dense_params": "l0"}, TypeError, "'dense_params'"),
    ({"dense_params": ["l0"]}, ValueError, "'dense_params' names 'l0'"),   # sizes: no names
])
def test_bad_arguments_are_named(kwargs, error, name):
    args = dict(params=MLP, workers=2, link_gbit_s=1.0, step_s=0.09)
    args.update(kwargs)
    with pytest.raises(error, match=name):
        choose_sparsity(**args)


def test_a_bucket_can_make_the_pick_denser():
    """Small parameters sent dense take link time the bucket gives back to the large ones."""
    sizes = [300_000] + [8_000] * 40  # 320,000 small elements, dense or bucketed at 0.9
    plain = choose_sparsity(sizes, workers=2, link_gbit_s=1.0, step_s=0.046)
    bucketed = choose_sparsity(sizes, workers=2, link_gbit_s=1.0, step_s=0.046,
                               bucket_sparsity=0.9)
    assert (plain, bucketed) == (0.95, 0.9)
