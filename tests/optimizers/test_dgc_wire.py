"""DGC's wire model (ms_optim/dgc/wire.py) as plain Python: loaded from its file without
MindSpore, checked against bytes computed by hand, and against what
DGCMomentum.exchange_stats reports."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIRE_PY = os.path.join(ROOT, "ms_optim", "dgc", "wire.py")


def load_wire():
    """wire.py as a module of its own (ms_optim/__init__.py, and MindSpore, never run)."""
    spec = importlib.util.spec_from_file_location("dgc_wire_alone", WIRE_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wire = load_wire()

# tests/distributed/test_dgc_exchange.py's model: two compressed parameters and a small one
COMPRESSED = (130 * 129, 20000)
SMALL = 7 * 3
SIGNATURE_BYTES = 36  # the replica check gathers 3 signature values, the step, the state's world
# size and rank, a 64-bit digest of its residual kinds and the step its branch was compiled
# for, int32


def test_wire_py_imports_no_mindspore():
    code = ("import importlib.util, sys\n"
            "sys.modules['mindspore'] = None  # any import of it fails\n"
            f"spec = importlib.util.spec_from_file_location('w', {WIRE_PY!r})\n"
            "w = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(w)\n"
            "assert not [m for m in sys.modules if m.startswith(('mindspore.', 'ms_optim'))]\n"
            "print(w.allreduce_wire_bytes(1000, 2))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["2000.0"]


def test_collectives_by_hand():
    # AllReduce of B bytes: 2 * 2 (N-1)/N * B per host; AllGather of b: 2 (N-1) * b
    assert wire.allreduce_wire_bytes(1000, 1) == 0.0
    assert wire.allreduce_wire_bytes(1000, 2) == 2000.0
    assert wire.allreduce_wire_bytes(1000, 4) == 3000.0
    assert wire.allreduce_wire_bytes(1000, 8) == 3500.0
    assert wire.allgather_wire_bytes(1000, 1) == 0.0
    assert wire.allgather_wire_bytes(1000, 2) == 2000.0
    assert wire.allgather_wire_bytes(1000, 4) == 6000.0


@pytest.mark.parametrize("selected, elements, nranks, expected", [
    (333, 1000, 3, "allgather"),   # 8 * 333 * 4 = 10656 < 4 * 1000 * 4 * 2/3 = 10666.7
    (334, 1000, 3, "allreduce"),
    (499, 1000, 2, "allgather"),   # 16 * 499 < 8 * 1000
    (500, 1000, 2, "allreduce"),   # a tie goes to the AllReduce
    (999, 1000, 1, "allgather"),   # one worker sends nothing: the gather
])
def test_cheaper_exchange(selected, elements, nranks, expected):
    assert wire.choose_sparse_exchange(selected, elements, nranks) == expected
    assert wire.stage_exchange("auto", selected, elements, nranks) == expected
    assert wire.stage_exchange("allgather", selected, elements, nranks) == "allgather"
    assert wire.stage_exchange("allreduce", selected, elements, nranks) == "allreduce"


@pytest.mark.parametrize("selected, elements, nranks, expected", [
    # 62 proposals each, 248 in all: 4 * 62 index bytes gathered (2 * 3 * 248 = 1488) and
    # 4 * 248 value bytes all-reduced (3 * 992 = 2976), 4464 against a gather's 11952
    (249, 1000, 4, "union"),
    # every element selected: 6000 + 12000 against the AllReduce's 12000
    (1000, 1000, 4, "allreduce"),
    # one entry: each of the 4 workers still proposes one (24 + 48 bytes), the gather 48
    (1, 1000, 4, "allgather"),
    (249, 1000, 8, "union"),
])
def test_union_from_four_workers(selected, elements, nranks, expected):
    assert wire.UNION_FROM_WORKERS == 4
    assert wire.choose_sparse_exchange(selected, elements, nranks) == expected
    assert wire.stage_exchange("auto", selected, elements, nranks) == expected


def _stats(exchange, selected, workers, stage=1, sparsity=0.99):
    return wire.exchange_stats(step=7, stage=stage, sparsity=sparsity, workers=workers,
                               exchange=exchange, selected=selected, small_elements=SMALL,
                               compressed_elements=sum(COMPRESSED),
                               signature_bytes=SIGNATURE_BYTES)


def test_gathered_stage_by_hand():
    s = _stats("allgather", selected=367, workers=4)
    assert s["selected"] == 367 and s["elements"] == 21 + 367
    assert s["dense_part_bytes"] == 84 and s["sparse_part_bytes"] == 8 * 367
    assert s["bytes"] == 84 + 2936
    # among 4: an AllReduce of 84 bytes (3 B), AllGathers of 36 and 2936 bytes (6 b)
    assert s["wire_bytes"] == 252 + 216 + 17616
    assert s["dense_elements"] == 36791 and s["dense_bytes"] == 147164
    assert s["dense_wire_bytes"] == 3 * 147164
    assert s["compression"] == 147164 / 3020
    assert (s["step"], s["stage"], s["sparsity"], s["workers"], s["exchange"]) == \
        (7, 1, 0.99, 4, "allgather")


def test_reduced_stage_and_dense_step_by_hand():
    s = _stats("allreduce", selected=9193, workers=4)
    # the sparsified gradient travels whole, in float32
    assert s["selected"] == 9193 and s["elements"] == 36791
    assert s["sparse_part_bytes"] == 147080 and s["bytes"] == 147164
    assert s["wire_bytes"] == 252 + 216 + 3 * 147080 and s["compression"] == 1.0
    d = _stats("dense", selected=9193, workers=2, stage=None, sparsity=None)
    assert d["selected"] == 0 and d["elements"] == 36791 and d["bytes"] == 147164
    assert d["wire_bytes"] == 168 + 72 + 2 * 147080 and d["dense_wire_bytes"] == 2 * 147164
    one = _stats("allgather", selected=367, workers=1)
    assert one["wire_bytes"] == 0 and one["dense_wire_bytes"] == 0


def test_agrees_with_dgc_momentum():
    """DGCMomentum.exchange_stats is this model fed the optimizer's sizes."""
    import numpy as np
    from mindspore import Parameter, Tensor

    import ms_optim
    from ms_optim.dgc import schedule
    from ms_optim.dgc.plan import applied_entries

    shapes = [(130, 129), (20000,), (7, 3)]
    sparsity = [0.75, 0.9375, 0.984375, 0.996, 0.999]
    params = [Parameter(Tensor(np.zeros(s, np.float32)), name=f"w{i}")
              for i, s in enumerate(shapes)]
    opt = ms_optim.DGCMomentum(params, 0.1, 0.9, rampup_begin_step=10, rampup_step=100,
                               sparsity=sparsity)
    for step in (0, 9, 10, 40, 75, 200):
        for workers in (1, 2, 4, 32):
            stage = schedule.stage_index(step, 10, 100, len(sparsity))
            ks = [] if stage is None else [schedule.selected_k(n, sparsity[stage])
                                           for n in COMPRESSED]
            exchange = "dense" if stage is None else wire.choose_sparse_exchange(
                sum(ks), sum(COMPRESSED), workers)
            selected = 0 if stage is None else applied_entries(ks, exchange, workers)
            expected = wire.exchange_stats(
                step=step, stage=stage, sparsity=None if stage is None else sparsity[stage],
                workers=workers, exchange=exchange, selected=selected, small_elements=SMALL,
                compressed_elements=sum(COMPRESSED), signature_bytes=SIGNATURE_BYTES)
            assert opt.exchange_stats(step, workers=workers) == expected
    assert opt.exchange_stats(10, workers=2)["exchange"] == "allgather"  # 0.75
    assert opt.exchange_stats(10, workers=32)["exchange"] == "union"
    assert opt.exchange_stats(200, workers=32)["exchange"] == "union"  # 0.999
