"""DGC where it pays: time to accuracy of dense and DGC training over a shaped link between hosts.

Needs root (network namespaces, veth, tc; see tools/netlab.py).  From the
repository root, with the environment active:

    python -m tools.link_experiment                        # 2 hosts, 1gbit, big MLP, digits
    python -m tools.link_experiment --rate 10gbit --runs dense,dgc-999 \\
        --steps dense=60,dgc-999=200
    python -m tools.link_experiment --model small --data synthetic --runs dgc-999 \\
        --fault linkdown@20:5                              # host 1 offline 5 s at step 20
    python -m tools.link_experiment --runs dgc-999 --fault kill@20   # SIGKILL host 1's worker

Every run gets a fresh lab (hosts, link, addresses): its counters start at
zero, no socket or port state and no fault of an earlier run carries over, and
building one takes a fraction of a second.  In it one msrun per host starts
tools/link_worker.py; host 0's msrun also runs the scheduler on host 0's
address.  While a run goes, a line every few steps follows rank 0's progress.

Output in OUT: link_results.json (configuration; per run: per-step time and
each host's tx/rx bytes and packets, the eval curve, final accuracy, compile
time, DGC's exchange stats, whether the replicas ended identical, what a fault
did) and link_results.png (left: test accuracy against training time; right:
each host's bytes sent per step, log scale), plus each run's folder with the
workers' files and msrun logs.  A summary table is printed at the end: per run
the first step's time (the workers meet at a barrier before it, so it holds only
the graph's first launch), the median step time overall and from the first step
at the last sparsity stage, the median bytes each host sent per step (same two
spans), the final test accuracy, and for two accuracies, the dense float32 run's
final one and --target (0.93 unless told): the step and training time of the first
eval at or above it, the steps as a multiple of the dense float32 run's, and how
many times sooner in training time than dense float32 and dense float16
(`dense-fp16`: the gradients all-reduced in float16) it is reached, when those
runs are among the runs.

Exit code: 0 when every run finished with identical replicas (or, with a fault,
behaved as reported without hanging), 1 otherwise, 2 when the lab could not be
built (not root, or `ip`/`tc` refused).
"""
import argparse
import glob
import json
import os
import re
import signal
import statistics
import sys
import time

from tools import link_worker, netlab

# msrun runs the worker as a file, in the run's folder; netlab puts the root on PYTHONPATH
WORKER = os.path.abspath(link_worker.__file__)
POLL_S = 0.2


# ------------------------------------------------------------------ options --

def parse_steps(text, runs):
    """'200' (every run), 'dense=60,dgc-999=200', or '100,dense=60' -> {run: steps} for
    `runs`; RUN=STEPS of a recipe not among `runs` is ignored, of an unknown one refused."""
    default, per_run = None, {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.rpartition("=")
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"--steps {text!r}: {part!r} is not STEPS or RUN=STEPS "
                             f"with STEPS >= 1")
        if not sep:
            default = int(value)
        elif name not in link_worker.RECIPES:
            raise ValueError(f"--steps {text!r}: {name!r} is not a recipe "
                             f"({sorted(link_worker.RECIPES)})")
        else:
            per_run[name] = int(value)
    missing = [r for r in runs if r not in per_run and default is None]
    if missing:
        raise ValueError(f"--steps {text!r}: no step count for {missing} (give STEPS for all)")
    return {r: per_run.get(r, default) for r in runs}


def parse_fault(text):
    """'linkdown@STEP:SECONDS' or 'kill@STEP' -> {'kind', 'step', 'seconds'}."""
    m = re.fullmatch(r"linkdown@(\d+):(\d+(?:\.\d+)?)|kill@(\d+)", text.strip())
    if not m:
        raise ValueError(f"--fault {text!r}: expected linkdown@STEP:SECONDS or kill@STEP")
    if m.group(3) is not None:
        return {"kind": "kill", "step": int(m.group(3)), "seconds": None}
    return {"kind": "linkdown", "step": int(m.group(1)), "seconds": float(m.group(2))}


# --------------------------------------------------------------- one run --

def last_progress(out, rank):
    """Steps rank `rank` has finished (from its progress file), 0 before the first."""
    try:
        with open(os.path.join(out, f"progress.rank{rank}"), "rb") as fh:
            lines = fh.read().split()
        return int(lines[-1]) if lines else 0
    except (OSError, ValueError):
        return 0


def error_lines(log_dir, limit=12):
    """Distinct lines of MindSpore's logs in `log_dir` that report an error or a timeout."""
    pattern = re.compile(r"ERROR|CRITICAL|Traceback|Error:|timed out|timeout", re.I)
    found = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))):
        with open(path, errors="replace") as fh:
            for line in fh:
                text = re.sub(r"^\[\w+\] \w+\(\d+,\w+,\w+\):\S+ ", "", line.strip())
                if pattern.search(line) and "Topology build timed out., retry" not in line \
                        and text not in found:
                    found.append(text)
    return found[:limit]


class Fault:
    """Injects one fault into a running job once rank 0 reaches its step, and records it."""

    def __init__(self, spec, lab, out):
        self.spec, self.lab, self.out = spec, lab, out
        self.report = dict(spec) if spec else None
        self.t_start = self.t_end = None

    def poll(self, step, now):
        """Acts when due: starts the fault at spec['step'], ends a link outage after its time."""
        if not self.spec:
            return
        if self.t_start is None and step >= self.spec["step"]:
            self.t_start = now
            self.report.update(at_step=step, at_s=now)  # at_s: seconds since the launch
            if self.spec["kind"] == "kill":
                pid = int(open(os.path.join(self.out, "pid.rank1")).read())
                os.kill(pid, signal.SIGKILL)
                self.report["killed_pid"] = pid
            else:
                self.lab.set_link(1, up=False)
        elif (self.spec["kind"] == "linkdown" and self.t_start is not None and self.t_end is None
              and now - self.t_start >= self.spec["seconds"]):
            self.lab.set_link(1, up=True)
            self.t_end = now
            self.report["down_s"] = now - self.t_start


def supervise(lab, procs, out, steps, fault, timeout, hang_bound, log):
    """Waits for every msrun while following rank 0 and injecting the fault; gives up at
    `timeout` s, or `hang_bound` s after a kill fault.  Returns (each msrun's exit time
    relative to the start, None if still running; what ended the wait)."""
    t0 = time.monotonic()
    exits = [None] * len(procs)
    shown, every = 0, max(1, steps // 10)
    ended = "finished"
    while any(e is None for e in exits):
        now = time.monotonic() - t0
        for i, proc in enumerate(procs):
            if exits[i] is None and proc.poll() is not None:
                exits[i] = now
        step = last_progress(out, 0)
        fault.poll(step, now)
        if step >= shown + every or (step == steps and shown < steps):
            shown = step
            log(f"    step {step}/{steps}  {now:6.1f}s")
        if fault.t_start is not None and fault.spec["kind"] == "kill" \
                and now - fault.t_start > hang_bound:
            ended = "hang"
        elif now > timeout:
            ended = "timeout"
        if ended != "finished":
            break
        time.sleep(POLL_S)
    return exits, ended


def collect(out, lab):
    """Each rank's result.rank<r>.json (None where missing); checks rank r ran on host r."""
    results = []
    for h in lab.hosts:
        path = os.path.join(out, f"result.rank{h.index}.json")
        result = json.load(open(path)) if os.path.exists(path) else None
        if result is not None and result["dev"] != h.dev:
            raise RuntimeError(f"rank {h.index} counted {result['dev']}, not host {h.index}'s "
                               f"{h.dev}: msrun assigned ranks differently")
        results.append(result)
    return results


def run_job(lab, run, steps, out, *, model="big", data="digits", eval_every=10, seed=0,
            fault=None, timeout=1200.0, hang_bound=150.0, worker_args=(), log=print):
    """One training job on `lab` (built; closed on return): one msrun per host running
    link_worker.py with recipe `run` for `steps` steps, files in `out` (an earlier job's
    results there are removed, its checkpoints kept for --resume).  Returns a dict
    with the exit codes, the per-rank results, the fault report and the msrun logs' errors."""
    os.makedirs(out, exist_ok=True)
    for stale in ("result.rank*.json", "progress.rank*", "pid.rank*"):  # of an earlier job here
        for path in glob.glob(os.path.join(out, stale)):
            os.remove(path)
    args = ["--run", run, "--model", model, "--data", data, "--steps", str(steps),
            "--eval-every", str(eval_every), "--seed", str(seed), "--out", out] + list(worker_args)
    port, procs = lab.free_port(), []
    t0 = time.monotonic()
    for h in lab.hosts:
        with open(os.path.join(out, f"msrun.host{h.index}.txt"), "w") as stdout:
            procs.append(lab.msrun(h.index, len(lab.hosts), port,
                                   os.path.join(out, f"log.host{h.index}"), WORKER,
                                   args + ["--dev", h.dev], stdout=stdout, cwd=out))
    injector = Fault(fault, lab, out)
    exits, ended = supervise(lab, procs, out, steps, injector, timeout, hang_bound, log)
    qdisc = lab.qdisc_stats()
    lab.close()  # kills whatever is left (after a timeout or a hang)
    codes = [p.returncode for p in procs]
    job = {"run": run, "steps": steps, "exit_codes": codes, "exit_s": exits, "ended": ended,
           "wall_s": time.monotonic() - t0, "results": collect(out, lab), "fault": injector.report,
           "qdisc": qdisc,
           "errors": {f"host{h.index}": error_lines(os.path.join(out, f"log.host{h.index}"))
                      for h in lab.hosts}}
    if fault and fault["kind"] == "kill" and injector.t_start is not None:
        injector.report["host0_exit_code"] = codes[0]
        injector.report["host0_exit_after_kill_s"] = (
            None if exits[0] is None else exits[0] - injector.t_start)
        injector.report["hang"] = ended == "hang"
    return job


# ---------------------------------------------------------------- analysis --

def last_stage_steps(result):
    """Indices into the step log of the run's last steps at one sparsity stage: from the
    first step after the last change of stage (all steps for a dense run; for
    sparsity="auto", the steps of its choice)."""
    stages = result["steps_log"]["stage"]
    if result["sparsity"] is None or not stages:
        return list(range(len(stages)))
    changes = [i for i in range(1, len(stages)) if stages[i] != stages[i - 1]]
    return list(range(changes[-1] if changes else 0, len(stages)))


def median_at(values, idx):
    return statistics.median(values[i] for i in idx) if idx else None


def first_eval(evals, target):
    """The first eval at or above `target` accuracy (None: never)."""
    return next((e for e in evals if e["test_acc"] >= target), None)


def reach(evals, target, baselines):
    """How `evals` reach accuracy `target`: the steps and training time of the first eval
    at or above it, the steps as a multiple of the dense float32 run's steps to it, and
    the speed-up in training time over each run of `baselines` ({name: evals}) that
    reaches it (None where a run never does)."""
    e = first_eval(evals, target)
    out = {"target": target, "steps": e and e["step"], "time_s": e and e["train_time_s"],
           "steps_over_dense": None, "speedup": {}}
    for name, base_evals in baselines.items():
        b = first_eval(base_evals, target)
        out["speedup"][name] = (None if e is None or b is None or not e["train_time_s"]
                                else b["train_time_s"] / e["train_time_s"])
        if name == "dense" and e is not None and b is not None and b["step"]:
            out["steps_over_dense"] = e["step"] / b["step"]
    return out


def summarize(job, dense_final=None, target=None, baselines=None):
    """The summary numbers of one finished job (None for a job without results).  With
    the dense float32 run's final accuracy `dense_final`, and the accuracy `target`: how
    the run reaches each (``reach``) against `baselines` ({run: evals} of the dense
    float32 run and of the dense float16 one)."""
    results = job["results"]
    if any(r is None for r in results):
        return None
    r0 = results[0]
    log = r0["steps_log"]
    warm = last_stage_steps(r0)
    every = list(range(len(log["time_s"])))
    baselines = baselines or {}
    to_dense = None if dense_final is None else reach(r0["evals"], dense_final, baselines)
    to_target = None if target is None else reach(r0["evals"], target, baselines)
    return {
        "first_step_s": log["time_s"][0],
        "median_step_s": median_at(log["time_s"], every),
        "median_step_s_last_stage": median_at(log["time_s"], warm),
        "median_tx_mb_per_host": [median_at(r["steps_log"]["tx_bytes"], every) / 1e6
                                  for r in results],
        "median_tx_mb_per_host_last_stage": [
            None if not warm else median_at(r["steps_log"]["tx_bytes"], warm) / 1e6
            for r in results],
        "final_test_acc": r0["final_test_acc"],
        "train_time_s": r0["train_time_s"],
        "compile_s": [r["compile_s"] for r in results],
        "to_dense_acc": to_dense,
        "to_target": to_target,
        "replicas_identical": len({r["sha256"] for r in results}) == 1,
    }


def run_record(job):
    """What link_results.json keeps of a job: the per-step and per-host series, not the
    raw result files (those stay in the run's folder)."""
    results = job["results"]
    done = [r for r in results if r is not None]
    keep = {k: job[k] for k in ("run", "steps", "exit_codes", "exit_s", "ended", "wall_s",
                                "fault", "errors", "qdisc")}
    if done:
        r0 = done[0]
        keep.update({
            "step_time_s": r0["steps_log"]["time_s"], "stage": r0["steps_log"]["stage"],
            "loss": r0["steps_log"]["loss"], "evals": r0["evals"], "sparsity": r0["sparsity"],
            "final_test_acc": r0["final_test_acc"], "exchange_stats": r0["exchange_stats"],
            "compressed_params": r0["compressed_params"], "params": r0["params"],
        })
        for key in link_worker.COUNTERS:
            keep[key] = [r["steps_log"][key] if r else None for r in results]
        keep["compile_s"] = [r["compile_s"] if r else None for r in results]
        keep["sha256"] = [r["sha256"] if r else None for r in results]
        keep["replicas_identical"] = (len(done) == len(results)
                                      and len({r["sha256"] for r in done}) == 1)
    return keep


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def _reach_cells(r):
    """Table cells of a ``reach``: 'steps (x dense's steps)', 'seconds', 'fp32x / fp16x'."""
    if r is None or r["steps"] is None:
        return "-", "-", "-"
    ratio = r["steps_over_dense"]
    speed = [r["speedup"].get(name) for name in ("dense", "dense-fp16")]
    return (f"{r['steps']}" + ("" if ratio is None else f" ({ratio:.2f}x)"),
            _fmt(r["time_s"], ".2f"), " / ".join(_fmt(v, ".1f") + "x" for v in speed))


def summary_table(records):
    """Plain-text table of the runs' summaries."""
    header = ("run", "1st step s", "step s", "step s (last stage)", "tx MB/step per host",
              "(last stage)", "final acc", "to dense acc: steps", "s", "sooner fp32 / fp16",
              "to target: steps", "s", "sooner fp32 / fp16", "replicas")
    rows = []
    for name, rec in records.items():
        s = rec.get("summary")
        if s is None:
            rows.append((name,) + ("-",) * (len(header) - 2)
                        + (f"no result: {rec['ended']}, exit {rec['exit_codes']}",))
            continue
        rows.append((name, _fmt(s["first_step_s"], ".2f"), _fmt(s["median_step_s"], ".4f"),
                     _fmt(s["median_step_s_last_stage"], ".4f"),
                     " / ".join(_fmt(v, ".4f") for v in s["median_tx_mb_per_host"]),
                     " / ".join(_fmt(v, ".4f") for v in s["median_tx_mb_per_host_last_stage"]),
                     _fmt(s["final_test_acc"], ".4f"))
                    + _reach_cells(s["to_dense_acc"]) + _reach_cells(s["to_target"])
                    + ("identical" if s["replicas_identical"] else "DIFFER",))
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [header] + rows]
    return "\n".join([lines[0], "-" * len(lines[0])] + lines[1:])


def fault_lines(records):
    """One line per run with a fault: what it did."""
    out = []
    for name, rec in records.items():
        f = rec["fault"]
        if not f:
            continue
        if f["kind"] == "kill":
            out.append(f"{name}: SIGKILL of host 1's worker at step {f.get('at_step')}: "
                       f"host 0's msrun exit code {f.get('host0_exit_code')} after "
                       f"{_fmt(f.get('host0_exit_after_kill_s'), '.1f')} s"
                       f"{' (HANG: killed at the bound)' if f.get('hang') else ''}; host 0 logged: "
                       f"{rec['errors']['host0'][:3]}")
        else:
            times = rec.get("step_time_s") or []
            out.append(f"{name}: host 1's link down {_fmt(f.get('down_s'), '.1f')} s at step "
                       f"{f.get('at_step')}; exit codes {rec['exit_codes']}; longest step "
                       f"{_fmt(max(times) if times else None, '.1f')} s; replicas identical: "
                       f"{rec.get('replicas_identical')}")
    return out


def plot(records, path, title):
    """Test accuracy against training time (all of it, and zoomed on the last points with
    the dense run's final accuracy as a line), and bytes sent per step per host."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, zoom, wire) = plt.subplots(1, 3, figsize=(16, 4.5))
    target = records.get("dense", {}).get("summary", {}).get("final_test_acc")
    for name, rec in records.items():
        if "evals" not in rec:
            continue
        for ax in (acc, zoom):
            ax.plot([e["train_time_s"] for e in rec["evals"]],
                    [e["test_acc"] for e in rec["evals"]], marker=".", label=name)
        for host, tx in enumerate(rec["tx_bytes"]):
            if tx:
                wire.plot(range(1, len(tx) + 1), [max(b, 1) for b in tx], lw=1,
                          label=f"{name}, host {host}")
    acc.set(xlabel="training time (s, eval excluded)", ylabel="test accuracy",
            title="time to accuracy")
    zoom.set(xlabel="training time (s, log scale)", ylabel="test accuracy", xscale="symlog",
             ylim=(0.9, 1.0), title="zoomed: top 10 points")
    if target is not None:
        zoom.axhline(target, color="gray", ls="--", lw=1, label="dense's final accuracy")
    wire.set(xlabel="step", ylabel="bytes sent per step (tx_bytes)", yscale="log",
             title="each host's wire bytes per step")
    for ax in (acc, zoom, wire):
        ax.grid(True, alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------- main --

def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.link_experiment",
                                     description=__doc__.splitlines()[0])
    netlab.add_lab_arguments(parser)
    parser.add_argument("--runs", default="dense,dgc,dgc-paddle,dgc-999",
                        help="comma-separated recipes of tools/link_worker.py: "
                             f"{', '.join(sorted(link_worker.RECIPES))}")
    link_worker.add_model_arguments(parser)
    parser.add_argument("--steps", default="150",
                        help="steps per run: STEPS for all, RUN=STEPS,... or both "
                             "(e.g. 100,dense=60)")
    parser.add_argument("--eval-every", type=int, default=5, help="evaluate every this many steps")
    parser.add_argument("--eval-after", action="store_true",
                        help="evaluate after training, on rank 0's parameters kept at each "
                             "evaluated step (a copy each, held in memory until then), so that no "
                             "evaluation runs between the steps (where sparsity='auto' would time "
                             "it as the step's compute)")
    parser.add_argument("--lr", type=float, default=0.05, help="peak learning rate, every run")
    parser.add_argument("--target", type=float, default=0.93,
                        help="test accuracy whose steps and time to reach the summary reports, "
                             "beside the dense float32 run's final accuracy")
    parser.add_argument("--lr-schedule", default="cosine", choices=["cosine", "constant"],
                        help="cosine: from --lr down to 0 at each run's last step")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and batch order")
    parser.add_argument("--out", default="results/link", help="output folder")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds a run may take before it is killed and reported")
    parser.add_argument("--fault", default=None,
                        help="inject into every run: linkdown@STEP:SECONDS (host 1's link down for "
                             "SECONDS once rank 0 has done STEP steps) or kill@STEP (SIGKILL "
                             "host 1's worker then)")
    parser.add_argument("--hang-bound", type=float, default=150.0,
                        help="after a kill fault, seconds before the job is killed and "
                             "reported as a hang")
    args = parser.parse_args(argv)
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    try:
        unknown = [r for r in args.runs if r not in link_worker.RECIPES]
        if unknown or not args.runs:
            raise ValueError(f"--runs: unknown {unknown}; have {sorted(link_worker.RECIPES)}")
        if args.hosts < 2:
            raise ValueError(f"--hosts must be >= 2, got {args.hosts}")
        if args.eval_every < 1 or args.timeout <= 0 or args.hang_bound <= 0 or args.lr <= 0:
            raise ValueError("--eval-every, --lr, --timeout and --hang-bound must be positive")
        if not 0 < args.target <= 1:
            raise ValueError(f"--target must be in (0, 1], got {args.target}")
        netlab.parse_rate(args.rate)
        netlab.parse_delay(args.delay)
        args.steps = parse_steps(args.steps, args.runs)
        args.fault = parse_fault(args.fault) if args.fault else None
        if args.fault and args.fault["step"] >= min(args.steps.values()):
            raise ValueError(f"--fault at step {args.fault['step']}: every run must go past it "
                             f"(steps {args.steps})")
    except ValueError as exc:
        parser.error(str(exc))
    return args


def experiment(args):
    """Every run on a fresh lab; returns {run: record (run_record) with its summary}."""
    jobs = {}
    for run in args.runs:
        with netlab.Lab(args.hosts, args.rate, args.delay, args.cores) as lab:
            print(f"== {run}: {args.steps[run]} steps, {lab.describe()}", flush=True)
            jobs[run] = run_job(lab, run, args.steps[run],
                                os.path.abspath(os.path.join(args.out, run)),
                                model=args.model, data=args.data, eval_every=args.eval_every,
                                seed=args.seed, fault=args.fault, timeout=args.timeout,
                                hang_bound=args.hang_bound,
                                worker_args=["--lr", str(args.lr),
                                             "--lr-schedule", args.lr_schedule]
                                + ["--eval-after"] * args.eval_after,
                                log=lambda line: print(line, flush=True))
        print(f"   exit codes {jobs[run]['exit_codes']} ({jobs[run]['ended']}), "
              f"{jobs[run]['wall_s']:.1f} s", flush=True)
    baselines = {name: jobs[name]["results"][0]["evals"] for name in ("dense", "dense-fp16")
                 if name in jobs and None not in jobs[name]["results"]}
    dense_final = baselines["dense"][-1]["test_acc"] if "dense" in baselines else None
    return {run: dict(run_record(job), summary=summarize(job, dense_final, args.target,
                                                         baselines))
            for run, job in jobs.items()}


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        records = experiment(args)
    except netlab.NetlabError as exc:
        print(f"link_experiment: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("link_experiment: interrupted; hosts and their processes removed", file=sys.stderr)
        return 130
    config = dict(vars(args))
    config.update(tbf_burst_bytes=netlab.tbf_burst(netlab.parse_rate(args.rate)),
                  widths=link_worker.MODELS[args.model],
                  recipes={r: link_worker.RECIPES[r] for r in args.runs})
    with open(os.path.join(args.out, "link_results.json"), "w") as fh:
        json.dump({"config": config, "runs": records}, fh, indent=1)
    png = os.path.join(args.out, "link_results.png")
    plot(records, png, f"{args.hosts} hosts, {args.rate} per direction, delay {args.delay}, "
                       f"{args.model} model on {args.data}")
    print()
    print(summary_table(records))
    for line in fault_lines(records):
        print(line)
    print(f"results: {os.path.join(args.out, 'link_results.json')}\nplot:    {png}")
    ok = all(rec["fault"] or (rec.get("replicas_identical")
                              and rec["exit_codes"] == [0] * args.hosts)
             for rec in records.values())
    hang = any(rec["fault"] and rec["fault"].get("hang") for rec in records.values())
    return 0 if ok and not hang else 1


if __name__ == "__main__":
    sys.exit(main())
