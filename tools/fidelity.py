"""Does AdamOffload train as well with bfloat16 or int8 moments as with float32 ones?

Trains the tasks of tools/fidelity_tasks.py (digits, charlm, autoencoder and
convnet by default) for seeds 0..N-1 with each ``moment_dtype``; float32 is
the baseline and always runs.  For one seed every dtype starts from the same
initial weights and sees the same batches, so only the storage of the moments
differs.  Each run gives one held-out metric, lower is better: cross-entropy
for the classifiers and the language model, mean squared error for the
regressions.

Reported, per task and dtype: the metric's difference from float32's in
percent, (d - f32) / f32 * 100, for each seed and its mean over the seeds.
The bars hold the mean's absolute value, since a lower loss is a different
training run too, not a faithful one: bfloat16 within 1%, int8 within 2%.
Across all the (task, seed) pairs run: in how many pairs the dtype's metric is
larger than float32's, and the two-sided sign-test p-value of that count (ties
left out); the bar: int8 worse in at most half of the pairs (rounded up).

The held-out task, diabetes, is set aside: nothing is tuned on it, the suite
runs it only when asked (``--heldout``, or ``--tasks diabetes``), once, at the
end, and its rows are marked "held out".  When it runs with other tasks, the
sign test is also given for the other tasks alone.

Writes DIR/fidelity.json (every run's metric and time, the settings, the
summary) and, when matplotlib is installed, DIR/fidelity.png (the mean percent
difference per task and dtype).  Run from the repository root:

    python -m tools.fidelity                     # 4 tasks x 3 seeds x 3 dtypes, into results/
    python -m tools.fidelity --tasks convnet --seeds 1 --dtypes int8
    python -m tools.fidelity --heldout           # once, at the end: adds diabetes
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np

from examples.common.cli import positive_int
from tools.fidelity_tasks import DTYPES, TASKS, use_cpu_graph_mode

DEFAULT_TASKS = [name for name, task in TASKS.items() if not task.held_out]
HELD_OUT_TASKS = [name for name, task in TASKS.items() if task.held_out]
# Bars on |mean percent difference from float32| over the seeds, per task.
MEAN_BAR_PERCENT = {"bfloat16": 1.0, "int8": 2.0}
# Bars on the share of (task, seed) pairs in which a dtype's metric is larger than float32's.
WORSE_SHARE_BAR = {"int8": 0.5}


# ------------------------------------------------------------------ summary --

def sign_test(worse, better):
    """Two-sided sign-test p-value of `worse` pairs against `better` ones (binomial, p = 1/2)."""
    n = worse + better
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(worse, better) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def compare_pairs(metrics, tasks, dtype):
    """How `dtype` compares with float32 over the (task, seed) pairs of `tasks`."""
    pairs = [(d, f) for task in tasks
             for d, f in zip(metrics[task][dtype], metrics[task]["float32"])]
    worse = sum(d > f for d, f in pairs)
    better = sum(d < f for d, f in pairs)
    out = {"pairs": len(pairs), "worse": worse, "better": better,
           "ties": len(pairs) - worse - better, "p_two_sided": sign_test(worse, better)}
    if dtype in WORSE_SHARE_BAR:
        out["bar_worse_at_most"] = math.ceil(WORSE_SHARE_BAR[dtype] * len(pairs))
        out["met"] = worse <= out["bar_worse_at_most"]
    return out


def summarize(metrics, held_out=()):
    """The differences from float32 and the bars judged.  `metrics`: {task: {dtype: [metric
    per seed]}}, float32 among the dtypes; `held_out`: which of the tasks are held out."""
    tasks = {}
    for task, by_dtype in metrics.items():
        base = np.array(by_dtype["float32"], dtype=np.float64)
        tasks[task] = {"held_out": task in held_out, "float32": base.tolist(), "vs_float32": {}}
        for dtype, values in by_dtype.items():
            if dtype == "float32":
                continue
            pct = (np.array(values, dtype=np.float64) - base) / base * 100
            mean = float(pct.mean())
            tasks[task]["vs_float32"][dtype] = {
                "percent_per_seed": pct.tolist(), "mean_percent": mean,
                "bar_percent": MEAN_BAR_PERCENT[dtype], "met": abs(mean) <= MEAN_BAR_PERCENT[dtype]}
    dtypes = [d for d in next(iter(metrics.values())) if d != "float32"]
    groups = {"all tasks run": list(metrics)}
    development = [t for t in metrics if t not in held_out]
    if development and len(development) < len(metrics):
        groups["development tasks"] = development
    sign_tests = {group: {dtype: compare_pairs(metrics, names, dtype) for dtype in dtypes}
                  for group, names in groups.items()}
    return {"tasks": tasks, "sign_tests": sign_tests}


def task_label(name, held_out):
    return f"{name} (held out)" if held_out else name


def report(summary):
    """The summary as a compact table."""
    print("\nHeld-out metric (lower is better) against float32 moments, "
          "(d - f32) / f32 * 100:")
    print(f"  {'task':21s} {'float32':>8s}  {'dtype':8s}  {'per seed (%)':24s} "
          f"{'mean (%)':>8s}  bar")
    for task, row in summary["tasks"].items():
        head = f"{task_label(task, row['held_out']):21s} {np.mean(row['float32']):8.4f}"
        if not row["vs_float32"]:
            print(f"  {head}")
        for dtype, s in row["vs_float32"].items():
            seeds = " ".join(f"{p:+7.2f}" for p in s["percent_per_seed"])
            print(f"  {head}  {dtype:8s}  {seeds:24s} {s['mean_percent']:+8.2f}  "
                  f"|mean| <= {s['bar_percent']:g}%: {'met' if s['met'] else 'NOT met'}")
            head = " " * len(head)
    if any(summary["sign_tests"].values()):
        print("\n(task, seed) pairs in which the dtype's metric is larger than float32's:")
    for group, by_dtype in summary["sign_tests"].items():
        for dtype, s in by_dtype.items():
            bar = (f"; bar: at most {s['bar_worse_at_most']}: "
                   f"{'met' if s['met'] else 'NOT met'}" if "met" in s else "")
            print(f"  {group:18s} {dtype:8s}  worse in {s['worse']:2d} of {s['pairs']:2d} "
                  f"({s['ties']} ties), two-sided sign test p = {s['p_two_sided']:.3f}{bar}")


def plot(summary, path):
    """Bar chart of the mean percent difference from float32 per task and dtype."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(summary["tasks"])
    dtypes = list(summary["tasks"][tasks[0]]["vs_float32"])
    width = 0.8 / len(dtypes)
    fig, ax = plt.subplots(figsize=(1.6 * len(tasks) + 3, 4.5))
    for j, dtype in enumerate(dtypes):
        means = [summary["tasks"][t]["vs_float32"][dtype]["mean_percent"] for t in tasks]
        ax.bar(np.arange(len(tasks)) + j * width, means, width, label=dtype)
        for sign in (1, -1):
            ax.axhline(sign * MEAN_BAR_PERCENT[dtype], color=f"C{j}", linestyle=":", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(tasks)) + width * (len(dtypes) - 1) / 2)
    ax.set_xticklabels([task_label(t, summary["tasks"][t]["held_out"]).replace(" (", "\n(")
                        for t in tasks])
    ax.set_ylabel("held-out metric vs float32 (%), mean over seeds")
    ax.set_title("AdamOffload moments against float32 (dotted: the bars)")
    ax.legend(title="moment_dtype")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------- main --

def build_parser():
    ap = argparse.ArgumentParser(prog="python -m tools.fidelity",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", choices=list(TASKS), default=DEFAULT_TASKS,
                    help=f"tasks to run (default: {' '.join(DEFAULT_TASKS)}; "
                         f"{', '.join(HELD_OUT_TASKS)} is held out and runs only when named)")
    ap.add_argument("--heldout", action="store_true",
                    help=f"adds the held-out task ({', '.join(HELD_OUT_TASKS)}): run it once, "
                         "at the end")
    ap.add_argument("--seeds", type=positive_int, default=3, metavar="N",
                    help="seeds 0..N-1 (default 3)")
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES),
                    help="moment dtypes (float32 is always run: it is the baseline)")
    for name, task in TASKS.items():
        ap.add_argument(f"--{name}-{task.unit}", type=positive_int, metavar="N",
                        help=f"{name}: training {task.unit} (default {task.default_length})")
    ap.add_argument("--out", default="results", help="output folder (default results)")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    names = list(dict.fromkeys(args.tasks + (HELD_OUT_TASKS if args.heldout else [])))
    names.sort(key=lambda n: TASKS[n].held_out)  # the held-out task last
    dtypes = ["float32"] + [d for d in args.dtypes if d != "float32"]
    seeds = list(range(args.seeds))
    use_cpu_graph_mode()

    tasks = {n: TASKS[n](getattr(args, f"{n}_{TASKS[n].unit}")) for n in names}
    metrics, runs = {}, []
    t0 = time.perf_counter()
    for name, task in tasks.items():
        print(f"== {task_label(name, task.held_out)}: "
              f"{task.length} {task.unit}, seeds {seeds}, moments {' '.join(dtypes)}; "
              f"metric: {task.metric}", flush=True)
        metrics[name] = {d: [] for d in dtypes}
        for seed in seeds:
            for dtype in dtypes:
                start = time.perf_counter()
                value = task.run(seed, dtype)
                metrics[name][dtype].append(value)
                runs.append({"task": name, "seed": seed, "moment_dtype": dtype, "metric": value,
                             "seconds": round(time.perf_counter() - start, 2)})
    summary = summarize(metrics, held_out=[n for n in names if TASKS[n].held_out])
    report(summary)
    print(f"\n{len(runs)} runs in {time.perf_counter() - t0:.0f}s")

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fidelity.json")
    settings = {"tasks": names, "seeds": seeds, "dtypes": dtypes, "out": args.out}
    with open(path, "w") as fh:
        json.dump({"settings": settings,
                   "tasks": {n: task.describe() for n, task in tasks.items()},
                   "runs": runs, "metrics": metrics, "summary": summary}, fh, indent=2)
    if len(dtypes) > 1:
        try:
            plot(summary, os.path.join(args.out, "fidelity.png"))
            print(f"plot: {os.path.join(args.out, 'fidelity.png')}")
        except ImportError:
            print("matplotlib is not installed: no plot (pip install -e '.[examples]')")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
