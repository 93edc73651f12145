"""DGCMomentum across workers launched with msrun (tests/distributed/dgc_worker.py): 2, and
4 resumed at 2 and at 8."""
import glob
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import mindspore as ms

from ms_optim import dgc, reference
from tests.distributed import dgc_worker as worker
from tests.helpers import assert_close_to_mindspore

pytestmark = pytest.mark.msrun

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _msrun(mode, out, workers=2, extra=()):
    """Runs the worker script on `workers` local workers; returns (exit code, every
    worker's log)."""
    bindir = os.path.dirname(sys.executable)
    # the worker imports tests.nets: the repository root on its path
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    cmd = [os.path.join(bindir, "msrun"), f"--worker_num={workers}",
           f"--local_worker_num={workers}",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
           f"--log_dir={out}/log", "--join=True",
           os.path.join(HERE, "dgc_worker.py"), "--mode", mode, "--out", str(out), *extra]
    proc = subprocess.run(cmd, env=env, cwd=str(out), capture_output=True, text=True, timeout=300)
    logs = "".join(open(f).read() for f in sorted(glob.glob(f"{out}/log/worker_*.log")))
    return proc.returncode, logs


def _results(out, workers=2):
    return [open(os.path.join(out, f"rank{r}.txt")).read() for r in range(workers)]


def _msrun_ok(mode, out, workers=2):
    """Runs `mode` on `workers` workers, which must all exit 0 with "ok"."""
    rc, logs = _msrun(mode, out, workers)
    assert rc == 0, logs[-4000:]
    assert _results(out, workers) == ["ok"] * workers


def _arrays(out, workers):
    """Every worker's rank<r>.npz."""
    return [np.load(os.path.join(out, f"rank{r}.npz")) for r in range(workers)]


def _reference(init, nranks, exchange, bucket_sparsity=None, lr_in_residuals=False):
    """The numpy rule of worker.CONFIG from the parameters `init` (a worker's npz)."""
    cfg = worker.CONFIG
    return reference.DGCReference([init[f"init{i}"].copy() for i in range(4)], cfg["momentum"],
                                  cfg["rampup_begin_step"], cfg["rampup_step"], cfg["sparsity"],
                                  nesterov=cfg["use_nesterov"],
                                  clip_norm=cfg["local_grad_clip_norm"], nranks=nranks,
                                  exchange=exchange, bucket_sparsity=bucket_sparsity,
                                  lr_in_residuals=lr_in_residuals)


@pytest.fixture(scope="module")
def exchange_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dgc_exchange")
    _msrun_ok("exchange", out)
    return _arrays(out, 2)


def test_replicas_identical_after_training(exchange_run):
    a, b = exchange_run
    assert not np.array_equal(a["init0"], b["init0"])  # the workers started apart
    for key in a.files:
        if key.startswith(("param", "ops_param", "ar_param", "model")):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # the ms.Model run moved the parameters, identically
    assert not np.array_equal(a["model0"], a["straight0"])


def test_first_step_gives_every_worker_rank_0s_parameters_of_every_dtype(exchange_run):
    a, b = exchange_run
    for i in range(4):
        assert not np.array_equal(a[f"mixed_init{i}"], b[f"mixed_init{i}"])
        for run in (a, b):
            np.testing.assert_array_equal(run[f"mixed{i}"], a[f"mixed_init{i}"])


def test_aggregate_matches_reference_of_the_exchange(exchange_run):
    """Known per-worker gradients: the result equals the numpy rule of the exchange."""
    a, b = exchange_run
    cfg = worker.CONFIG
    ref = _reference(a, 2, "exact")
    for t in range(worker.STEPS):
        ref.step([worker.known_grads(0, t), worker.known_grads(1, t)], cfg["learning_rate"])
    for tag in ("", "ops_"):  # the native kernels and the plain-ops path
        assert_close_to_mindspore([a[f"{tag}param{i}"] for i in range(4)], ref.params)
        for rank, run in enumerate((a, b)):  # each worker keeps its own residuals
            assert_close_to_mindspore([run[f"{tag}u{i}"] for i in range(4)], ref.u[rank])
            assert_close_to_mindspore([run[f"{tag}v0"], run[f"{tag}v1"]], ref.v[rank][:2])
    assert not np.array_equal(a["v0"], b["v0"])
    # the dense all-reduce of the sparsified gradient gives the gathered path's bits, and so
    # does a native op per parameter (each reading its part of the dense exchange's buffer)
    for key in [k for k in a.files if k.startswith(("param", "u", "v"))]:
        for run in (a, b):
            np.testing.assert_array_equal(run[f"ar_{key}"], run[key], err_msg=key)
            np.testing.assert_array_equal(run[f"one_{key}"], run[key], err_msg=key)
    # compressed step: 16 + 20 selected (index + value) and 32 dense floats per worker
    assert int(a["exchange_bytes"]) == 8 * (16 + 20) + 4 * (21 + 11)
    assert int(a["ar_exchange_bytes"]) == 4 * (130 * 129 + 20000) + 4 * (21 + 11)


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dgc_shared")
    _msrun_ok("shared", out, workers=3)
    return _arrays(out, 3)


# what a worker sends per step with shared indices: the large parameters' 16 + 20 entries
# (leader: the indices broadcast and the values summed; union: 5 + 6 of them each worker's,
# gathered, and the values at all of them summed), the bucket's 3 (leader: as the large
# parameters; union: max(1, 3 // 3) = 1 index each, gathered, and 3 values), or the 21 + 11
# floats of the small parameters sent dense
SHARED_LARGE_BYTES = {"leader": 8 * (16 + 20), "union": 4 * (5 + 6) + 4 * 3 * (5 + 6)}
SHARED_BUCKET_BYTES = {"leader": 8 * 3, "union": 4 * 1 + 4 * 3}


@pytest.mark.parametrize("exchange", ["leader", "union"])
def test_shared_index_exchanges_match_reference_and_keep_replicas_identical(shared_run,
                                                                            exchange):
    """exchange="leader" and "union" with 3 workers, small parameters sent dense (by the
    impl worker.SHARED_RUNS names): the parameters are bitwise identical on every worker, in a
    Python loop and in a compiled TrainOneStepCell, and equal the reference's rule; each
    worker keeps the rest in its own residuals."""
    runs = shared_run
    cfg = worker.CONFIG
    ref = _reference(runs[0], 3, exchange)
    for t in range(worker.STEPS):
        ref.step([worker.known_grads(r, t) for r in range(3)], cfg["learning_rate"])
    same = [key for key in runs[0].files
            if key.startswith((f"{exchange}_param", f"{exchange}_model"))
            and not key.startswith(f"{exchange}_model_v")]
    assert len(same) == 4 + 4  # the known steps', the network's 4 parameters
    for key in same:
        for other in runs[1:]:
            np.testing.assert_array_equal(runs[0][key], other[key], err_msg=key)
    model_v = f"{exchange}_model_v0"
    assert not np.array_equal(runs[0][model_v], runs[1][model_v])  # residuals differ
    tag = f"{exchange}_"
    assert_close_to_mindspore([runs[0][f"{tag}param{i}"] for i in range(4)], ref.params)
    for rank, run in enumerate(runs):
        assert_close_to_mindspore([run[f"{tag}u{i}"] for i in range(4)], ref.u[rank])
        assert_close_to_mindspore([run[f"{tag}v0"], run[f"{tag}v1"]], ref.v[rank][:2])
    assert int(runs[0][f"{tag}exchange_bytes"]) == SHARED_LARGE_BYTES[exchange] + 4 * (21 + 11)


def _bucket_reference(runs, exchange, bucket_sparsity, lr_in_residuals=False):
    """The reference's rule over the 3 workers' known gradients, from the runs' start (at
    the rates worker.FOLD_LRS with `lr_in_residuals`)."""
    ref = _reference(runs[0], 3, exchange, bucket_sparsity=bucket_sparsity,
                     lr_in_residuals=lr_in_residuals)
    for t in range(worker.STEPS):
        lr = worker.FOLD_LRS[t] if lr_in_residuals else worker.CONFIG["learning_rate"]
        ref.step([worker.known_grads(r, t) for r in range(3)], lr)
    return ref


def _check_bucket_run(runs, tag, ref):
    """The runs' parameters under `tag` are bitwise identical on every worker and follow
    `ref`; each worker's u, v and bucket residuals follow its own."""
    for i in range(4):
        for other in runs[1:]:
            np.testing.assert_array_equal(runs[0][f"{tag}param{i}"], other[f"{tag}param{i}"])
    assert_close_to_mindspore([runs[0][f"{tag}param{i}"] for i in range(4)], ref.params)
    for rank, run in enumerate(runs):
        assert_close_to_mindspore([run[f"{tag}u{i}"] for i in range(4)], ref.u[rank])
        assert_close_to_mindspore([run[f"{tag}v0"], run[f"{tag}v1"]], ref.v[rank][:2])
        assert_close_to_mindspore([run[f"{tag}bucket_v{j}"] for j in range(2)], ref.v[rank][2:])


@pytest.mark.parametrize("bucket", [90, 50])
def test_bucket_matches_reference_and_keeps_replicas_identical(shared_run, bucket):
    """bucket_sparsity with 3 workers (0.9: the entries gathered, in one collective or, as
    for a bucket of more than 2**24 elements, two; 0.5: the sparsified bucket all-reduced):
    the parameters are bitwise identical on every worker and equal the
    reference's rule; each worker keeps its own residuals.  The all-reduced run also has
    learning-rate-scaled residuals under a decaying rate (lr_in_residuals)."""
    runs = shared_run
    ref = _bucket_reference(runs, "exact", bucket / 100, lr_in_residuals=bucket == 50)
    tags = [f"bucket{bucket}_"] + ([f"bucket{bucket}_split_"] if bucket == 90 else [])
    for tag in tags:
        _check_bucket_run(runs, tag, ref)
    assert not np.array_equal(runs[0][f"{tags[0]}bucket_v0"], runs[1][f"{tags[0]}bucket_v0"])
    # the large parameters' 16 + 20 entries, then the bucket's: 3 gathered entries, or the
    # 32 floats of the sparsified bucket
    bucket_bytes = {90: 8 * 3, 50: 4 * 32}[bucket]
    assert int(runs[0][f"{tags[0]}exchange_bytes"]) == 8 * (16 + 20) + bucket_bytes


@pytest.mark.parametrize("exchange, tag", worker.BUCKET_SHARED_RUNS)
def test_bucket_with_shared_indices(shared_run, exchange, tag):
    """The bucket follows exchange="leader" and "union" as the large parameters do (by the
    impl worker.SHARED_RUNS names, and the union by the native kernels too): the reference's
    rule, bitwise identical replicas, and what a worker sends (SHARED_BUCKET_BYTES)."""
    runs = shared_run
    _check_bucket_run(runs, tag, _bucket_reference(runs, exchange, 0.9))
    assert int(runs[0][f"{tag}exchange_bytes"]) == (SHARED_LARGE_BYTES[exchange]
                                                    + SHARED_BUCKET_BYTES[exchange])


def test_checkpoint_per_rank_resumes_exactly(exchange_run):
    for run in exchange_run:
        keys = [k for k in run.files if k.startswith("straight")]
        assert len(keys) == 2 * 4 + 1  # fc1/fc2 weight and bias, their u, fc1.weight's v
        for key in keys:
            np.testing.assert_array_equal(run[key], run[key.replace("straight", "resumed")], err_msg=key)


def test_data_parallel_never_silently_reduces_dense(tmp_path):
    rc, logs = _msrun("data_parallel", tmp_path)
    assert rc == 0, logs[-4000:]
    for result in _results(tmp_path):
        lines = result.splitlines()
        assert lines[0].startswith("construct: ") and "'data_parallel'" in lines[0]
        assert lines[1].startswith("compile: ") and "STAND_ALONE" in lines[1]


def test_mismatched_models_fail_cleanly(tmp_path):
    rc, logs = _msrun("mismatch", tmp_path)  # finishing at all (no hang) is part of the test
    assert rc == 0, logs[-4000:]
    for result in _results(tmp_path):
        assert result.startswith("error: ValueError: For 'DGCMomentum', the workers disagree "
                                 "on the model or the step"), result
    assert logs.count("DGCMomentum workers were built with different models") == 2


def test_workers_at_different_steps_fail_cleanly(tmp_path):
    rc, logs = _msrun("step_mismatch", tmp_path)
    assert rc == 0, logs[-4000:]
    for result in _results(tmp_path):
        assert result.startswith("error: ValueError: For 'DGCMomentum', the workers disagree "
                                 "on the model or the step"), result
    # each rank's row: 3 signature values, the step, the state's world size, its rank and
    # digest, and the step its branch was compiled for (its own, or -1 in a compiled step)
    rows = [logs.split(f"rank {r}: ")[1].split("\n")[0].split() for r in (0, 1)]
    assert [len(r) for r in rows] == [9, 9] and rows[0][:3] == rows[1][:3]
    assert (rows[0][3], rows[1][3]) == ("0", "5") and rows[0][4] == rows[1][4]
    assert (rows[0][5], rows[1][5]) == ("0", "1") and rows[0][6:8] == rows[1][6:8]
    assert all(r[8] in (r[3], "-1") for r in rows)


@pytest.mark.parametrize("case, mine, theirs", [
    ("world", "holds the residuals of 4 worker(s) and rank 0's of 2",
     "the optimizer state holds the residuals of 4 worker(s) and this run has 2: convert"),
    ("kinds", "holds other residual kinds than rank 0's",
     "the optimizer state holds residuals of learning-rate-scaled gradients for parameter 'w0' "
     "and this run would step residuals of gradients")])
def test_a_state_one_worker_refuses_is_refused_by_every_worker(tmp_path, case, mine, theirs):
    """Rank 1 alone holds a state saved by 4 workers, or one of other residual kinds: it
    refuses it, and rank 0, whose own state is fine, refuses the step too, naming rank 1,
    instead of going on to a collective that rank 1 never joins."""
    rc, logs = _msrun("state_mismatch", tmp_path, extra=["--case", case])
    assert rc == 0, logs[-4000:]
    own, other = _results(tmp_path)
    assert own == (f"error: ValueError: For 'DGCMomentum', rank 1's optimizer state {mine}: "
                   f"resume every worker from the checkpoints of one save.\nglobal_step 0")
    assert other.startswith(f"error: ValueError: For 'DGCMomentum', {theirs}"), other
    assert other.endswith("\nglobal_step 0")


def _saved(tmp_path_factory, workers):
    """One step's checkpoints of a run of `workers`, one per worker, in rank order."""
    out = tmp_path_factory.mktemp(f"dgc_saved{workers}")
    _msrun_ok("save", out, workers=workers)
    return [str(out / f"saved{workers}" / f"rank{r}.ckpt") for r in range(workers)]


@pytest.fixture(scope="module")
def saved_at_4(tmp_path_factory):
    return _saved(tmp_path_factory, 4)


def test_residuals_of_another_world_size_are_refused(saved_at_4, tmp_path):
    """Loaded as they are at 2 workers, the 4 workers' residuals are refused on every
    worker, never silently dropped (the check compares the two counts, whatever they are)."""
    rc, logs = _msrun("resume_refused", tmp_path, 2, ["--ckpt", saved_at_4[0]])
    assert rc == 0, logs[-4000:]
    assert all(r.startswith("error: ") for r in _results(tmp_path, 2))
    assert logs.count("the optimizer state holds the residuals of 4 worker(s) and this run "
                      "has 2") == 2


@pytest.fixture(scope="module")
def saved_at_2(tmp_path_factory):
    return _saved(tmp_path_factory, 2)


def test_another_ranks_residuals_are_refused(saved_at_2, tmp_path):
    """Every worker loads rank 0's file (a common slip for rank{rank}.ckpt): refused on every
    worker, naming the rank, never trained on (rank 1's residuals would be lost and rank
    0's applied twice); each worker's own file resumes."""
    rc, logs = _msrun("resume_refused", tmp_path, 2, ["--ckpt", saved_at_2[0]])
    assert rc == 0, logs[-4000:]
    assert all(r.startswith("error: ") for r in _results(tmp_path, 2))
    assert logs.count("rank 1's optimizer state holds the residuals of rank 0: load each "
                      "worker's own checkpoint") == 2
    (tmp_path / "own").mkdir()
    rc, logs = _msrun("resume", tmp_path / "own", 2,
                      ["--ckpt", saved_at_2[0].replace("rank0", "rank{rank}")])
    assert rc == 0, logs[-4000:]
    assert _results(tmp_path / "own", 2) == ["ok", "ok"]


@pytest.mark.parametrize("workers", [2, 8])
def test_resume_at_another_world_size(saved_at_4, tmp_path, workers):
    old = [ms.load_checkpoint(f) for f in saved_at_4]
    (tmp_path / "run").mkdir()
    # converted, every worker holds the mean of the 4 workers' residuals: their pending
    # update, sum / world size, is the same
    files = dgc.resize_checkpoints(saved_at_4, workers,
                                   str(tmp_path / "resized" / "rank{rank}.ckpt"))
    new = [ms.load_checkpoint(f) for f in files]
    residuals = [k for k in old[0] if k.startswith(("dgc_u.", "dgc_v."))]
    assert any(k.startswith("dgc_v.") for k in residuals)
    for key in residuals:
        before = sum(c[key].asnumpy().astype(np.float64) for c in old) / 4
        after = sum(c[key].asnumpy().astype(np.float64) for c in new) / workers
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7, err_msg=key)
        assert np.abs(before).max() > 0, key
    rc, logs = _msrun("resume", tmp_path / "run", workers,
                      ["--ckpt", str(tmp_path / "resized" / "rank{rank}.ckpt")])
    assert rc == 0, logs[-4000:]
    assert _results(tmp_path / "run", workers) == ["ok"] * workers
    models = _arrays(tmp_path / "run", workers)
    for key in models[0].files:  # the parameters stay identical on every worker
        for other in models[1:]:
            np.testing.assert_array_equal(models[0][key], other[key], err_msg=key)


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dgc_auto")
    _msrun_ok("auto", out)
    return _arrays(out, 2)


@pytest.mark.parametrize("run", sorted(worker.AUTO_RUNS))
def test_auto_sparsity_same_choice_on_every_worker_and_resumes(auto_run, run):
    """sparsity="auto" in a compiled train step: step 0 dense (rampup_begin_step 1), the
    probe at the sparsest choice on steps 1-3, then the choice (measured, or forced dense or
    0.98; with impl="ops", and with the bucket): the same on both workers, kept through a
    checkpoint, replicas identical."""
    a, b = auto_run
    forced = worker.AUTO_RUNS[run]
    choice = int(a[f"{run}_choice"][0])
    assert int(b[f"{run}_choice"][0]) == choice
    assert int(a[f"{run}_resumed_choice"][0]) == choice
    if forced is not None:
        assert choice == forced
    probe = len(dgc.density.SPARSITY_CHOICES) - 1
    assert a[f"{run}_stages"].tolist() == [-1] + [probe] * 3 + [choice] * 8
    assert a[f"{run}_sampled"].all()  # compute, the probe's exchange, the link's two chunks
    for key in a.files:
        if key.startswith(f"{run}_straight"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            np.testing.assert_array_equal(a[key], a[key.replace("straight", "resumed")],
                                          err_msg=key)
    if choice < 0:  # leaving the probe flushed the residuals: one state on both workers
        for key in a.files:
            if key.startswith(f"{run}_u"):
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            if key.startswith((f"{run}_v", f"{run}_bucket_v")):
                assert not a[key].any(), key
        if run == "dense_bucket":
            assert f"{run}_bucket_v0" in a.files
    else:
        assert not np.array_equal(a[f"{run}_u0"], b[f"{run}_u0"])  # each its own residuals


@pytest.mark.parametrize("run", sorted(worker.FLUSH_RUNS))
def test_auto_sparsity_flushes_native_and_graph_code_alike(auto_run, run):
    """Going dense, the native flush (one packed buffer) and graph code (one tensor per
    parameter) leave the same bits: parameters, u, and v cleared, the bucket's too."""
    for arrays in auto_run:
        keys = [k for k in arrays.files if k.startswith(f"graph_flush_{run}_")]
        assert any("bucket_v" in k for k in keys) and any("_u" in k for k in keys)
        for key in keys:
            np.testing.assert_array_equal(arrays[key], arrays[key[len("graph_flush_"):]],
                                          err_msg=key)


@pytest.mark.parametrize("run", ["host_dense", "host_sparse"])
def test_auto_sparsity_from_python_keeps_replicas_identical(auto_run, run):
    a, b = auto_run
    for key in a.files:
        if key.startswith(f"{run}_param"):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert int(a[f"{run}_choice"][0]) == int(b[f"{run}_choice"][0])
    compressed_u_equal = np.array_equal(a[f"{run}_u0"], b[f"{run}_u0"])
    assert compressed_u_equal == (run == "host_dense")


@pytest.mark.parametrize("run", ["from_fixed", "from_fixed_host"])
def test_auto_sparsity_resumed_from_a_fixed_sparsity_steps_dense(auto_run, run):
    """A state saved by DGCMomentum(sparsity=[0.98]) at step 9, loaded by a sparsity="auto"
    run past its probe (steps 1-3): it never chose, so it steps dense from there, after
    flushing the residuals; the workers stay identical."""
    a, b = auto_run
    assert int(a[f"{run}_choice"][0]) == int(b[f"{run}_choice"][0]) == -1
    for key in a.files:
        if key.startswith((f"{run}_straight", f"{run}_u")):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        if key.startswith(f"{run}_v"):
            assert not a[key].any(), key
