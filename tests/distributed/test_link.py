"""DGCMomentum between 2 hosts (network namespaces) joined by a 1 Gbit/s link (tools/netlab.py,
tools/link_experiment.py, tools/link_worker.py): wire bytes, a killed worker, resume, an outage.

Needs root and network namespaces: skipped without them, except under CI=true, where a
skip would hide the whole file and the tests fail instead.  One uninterrupted run, one
with a 5 s outage, one with a SIGKILLed worker and one resumed from a checkpoint of the
killed run, each on a fresh lab; the small MLP on synthetic data (no scikit-learn).
"""
import contextlib
import os
import shutil
import statistics
import subprocess

import pytest

from tools import link_experiment as experiment
from tools import netlab

pytestmark = pytest.mark.netns

RUN = "dgc-paddle"        # warm-up over 40 steps: the last stage (0.999) from step 32 on
STEPS = 300               # ~10 ms each: long enough for a fault to land mid-training
CKPT_EVERY = 100
KILL_AT, LINKDOWN_AT, OUTAGE_S = 120, 60, 5.0
KILL_BOUND_S = 120.0      # host 0's msrun must be gone this long after the kill
JOB_TIMEOUT_S = 240.0

# What one host's tx_bytes grows by in a DGC step among N hosts (measured on veth pairs and
# a bridge, 2 and 4 hosts, small and big MLP):
#   tx_bytes = wire_bytes + 66 B x tx_packets + 30 B x 2 (N - 1) x collectives
# - wire_bytes: DGCMomentum.exchange_stats()'s payload model of MindSpore's CPU collectives
#   (an AllGather of b bytes per worker sends 2 (N - 1) b, an AllReduce of B sends
#   4 (N - 1) / N B: twice a ring's);
# - 66 B per packet counted: Ethernet 14 + IPv4 20 + TCP 20 + 12 of timestamp options.  A
#   veth hands TSO/GSO super-packets of up to 64 KiB to the counters, so a "packet" is
#   one send (or one ACK), not a 1500-byte frame; on a 1500-MTU wire the same headers
#   would be 66 / 1448 = 4.6% of the payload, plus ACKs;
# - MindSpore's framing of its messages, 30 B per message, 2 (N - 1) messages per
#   collective; a DGC step runs 4 (signature AllGather, dense AllReduce, index and value
#   AllGathers).  Measured after subtracting the two terms above: 230-240 B per step at 2
#   hosts and 700-750 B at 4, at every warm-up stage (7 KB to 610 KB of payload).
HEADER_BYTES_PER_PACKET = 66
FRAMING_BYTES_PER_MESSAGE = 30
COLLECTIVES_PER_DGC_STEP = 4

_LABS = []  # every lab this module built: none of their namespaces may outlive the module


def _lab_or_skip():
    """A 2-host, 1 Gbit/s lab; skip (fail under CI=true) when this machine cannot build one."""
    reason = None
    if os.geteuid() != 0:
        reason = "needs root (network namespaces, veth, tc)"
    elif not (shutil.which("ip") and shutil.which("tc")):
        reason = "needs iproute2 (ip, tc)"
    lab = netlab.Lab(hosts=2, rate="1gbit")
    if reason is None:
        try:
            lab.build()
        except netlab.NetlabError as exc:
            reason = f"cannot build network namespaces here: {exc}"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: not skipping)")
        pytest.skip(reason)
    _LABS.append(lab)
    return lab


def _job(out, fault=None, resume=None, eval_after=False):
    """One RUN job on a fresh lab, files in `out`; the lab is gone when it returns."""
    args = (["--ckpt-every", str(CKPT_EVERY)] + (["--resume", str(resume)] if resume else [])
            + ["--eval-after"] * eval_after)
    with contextlib.closing(_lab_or_skip()) as lab:
        return experiment.run_job(lab, RUN, STEPS, str(out), model="small", data="synthetic",
                                  eval_every=100, fault=fault, timeout=JOB_TIMEOUT_S,
                                  hang_bound=KILL_BOUND_S, worker_args=args, log=lambda line: None)


def _finished(job):
    """The job's per-rank results, after asserting that it ended normally."""
    tails = {h: lines[-4:] for h, lines in job["errors"].items()}
    assert job["ended"] == "finished" and job["exit_codes"] == [0, 0], (job["exit_codes"], tails)
    assert all(r is not None for r in job["results"])
    return job["results"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    return _job(tmp_path_factory.mktemp("straight"))


@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    """With --eval-after: rank 0 evaluates its kept parameters once training ends."""
    return _job(tmp_path_factory.mktemp("outage"),
                fault={"kind": "linkdown", "step": LINKDOWN_AT, "seconds": OUTAGE_S},
                eval_after=True)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    out = tmp_path_factory.mktemp("killed")
    return out, _job(out, fault={"kind": "kill", "step": KILL_AT, "seconds": None})


def test_replicas_identical_and_every_stage_reached(straight):
    results = _finished(straight)
    assert results[0]["sha256"] == results[1]["sha256"]
    assert results[0]["steps_log"]["stage"][-1] == len(results[0]["sparsity"]) - 1
    assert results[0]["final_test_acc"] > 0.5  # it learned (10 classes: chance is 0.1)


def test_wire_bytes_match_the_model(straight):
    """Each host's measured tx bytes per step at the last stage (median) against
    exchange_stats()['wire_bytes'] plus the protocol overhead above, within 10%."""
    for rank, result in enumerate(_finished(straight)):
        stats = result["exchange_stats"][-1]
        assert "wire_bytes" in stats, f"exchange_stats() has no 'wire_bytes': {sorted(stats)}"
        assert stats["stage"] == len(result["sparsity"]) - 1 and stats["workers"] == 2
        log = result["steps_log"]
        last = experiment.last_stage_steps(result)
        assert len(last) > 100
        tx = statistics.median(log["tx_bytes"][i] for i in last)
        packets = statistics.median(log["tx_packets"][i] for i in last)
        messages = 2 * (stats["workers"] - 1) * COLLECTIVES_PER_DGC_STEP
        model = (stats["wire_bytes"] + HEADER_BYTES_PER_PACKET * packets
                 + FRAMING_BYTES_PER_MESSAGE * messages)
        assert abs(tx - model) <= 0.10 * model, (rank, tx, model, stats)
        # what went over the link came back the other way: the peer's payload, not loopback
        assert statistics.median(log["rx_bytes"][i] for i in last) >= stats["wire_bytes"]


def test_first_step_broadcasts_nothing_when_the_replicas_agree(straight):
    """Both workers start from the same seed: the first step compares parameter digests
    (one more small AllGather) instead of broadcasting rank 0's parameters, which would
    add about twice the parameters' bytes to host 0's first step.

    Steps 0 and 1 are counted together: a host's step ends when its peer's bytes have
    arrived, which can be before the last of its own have left the shaped link's queue,
    and those then count in the next step (tens of KB, now and then)."""
    for result in _finished(straight):
        stats = result["exchange_stats"][0]
        log = result["steps_log"]
        assert stats["step"] == 0 and log["stage"][1] == stats["stage"]  # same wire bytes
        messages = 2 * (stats["workers"] - 1) * (2 * COLLECTIVES_PER_DGC_STEP + 1)
        packets = log["tx_packets"][0] + log["tx_packets"][1]
        model = (2 * stats["wire_bytes"] + HEADER_BYTES_PER_PACKET * packets
                 + FRAMING_BYTES_PER_MESSAGE * messages)
        tx = log["tx_bytes"][0] + log["tx_bytes"][1]
        assert abs(tx - model) <= 0.10 * model, (log["tx_bytes"][:2], model)
        broadcast = 2 * 4 * result["params"]
        assert broadcast > 0.5 * model  # would not go unnoticed


def test_link_outage_stalls_then_finishes_with_the_same_bits(straight, outage):
    results = _finished(outage)
    fault = outage["fault"]
    assert fault["at_step"] < STEPS and fault["down_s"] >= OUTAGE_S
    assert max(results[0]["steps_log"]["time_s"]) > 0.8 * OUTAGE_S  # training did stall
    assert {r["sha256"] for r in results} == {straight["results"][0]["sha256"]}


def test_evaluation_after_training_matches_evaluation_between_steps(straight, outage):
    """The outage run evaluates rank 0's copies of its parameters after training: the same
    accuracies at the same steps as the straight run's evaluations between its steps (the
    two runs step the same bits), and the other rank evaluates the final parameters."""
    def accuracies(result):
        return [(e["step"], e["test_acc"]) for e in result["evals"]]

    straight0, (outage0, outage1) = _finished(straight)[0], _finished(outage)
    assert len(accuracies(straight0)) == STEPS // 100 + 1
    assert accuracies(outage0) == accuracies(straight0)
    assert accuracies(outage1) == [(STEPS, straight0["final_test_acc"])]


def test_killed_worker_ends_the_other_host_within_the_bound(killed):
    _, job = killed
    fault = job["fault"]
    assert fault["at_step"] >= KILL_AT and job["ended"] == "finished", fault  # not a hang
    assert fault["host0_exit_code"] not in (0, None)
    assert fault["host0_exit_after_kill_s"] < KILL_BOUND_S
    assert any("The node: 1 is timed out" in line for line in job["errors"]["host0"]), job["errors"]


def test_resume_from_checkpoint_matches_the_uninterrupted_run(straight, killed):
    out, job = killed
    assert job["results"] == [None, None]  # the killed run did not finish
    resumed = _finished(_job(out, resume=CKPT_EVERY))
    assert [r["start_step"] for r in resumed] == [CKPT_EVERY] * 2
    assert {r["sha256"] for r in resumed} == {straight["results"][0]["sha256"]}


def test_no_namespace_or_interface_left(straight, outage, killed):
    """Runs last (file order): every lab of this module is gone, veths and all."""
    assert len(_LABS) >= 3
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for lab in _LABS:
        assert lab.existing_namespaces() == []
        assert lab.prefix not in listed and lab.prefix not in links
