"""Steady-state step time of optimizers, side by side, in one run.

What it measures: for each total parameter count N (``--sizes``, default
1e6, 1e7 and 2.5e7 float32 parameters) and each parameter layout
(``--layouts``), every selected optimizer is built on fresh parameters and
stepped with a fixed set of random gradients held in the graph (as
``nn.TrainOneStepCell`` holds them: one call is one jit-compiled optimizer
step in MindSpore GRAPH_MODE on CPU, with no per-gradient argument passing).
After ``--warmup`` steps (the first one compiles) it times ``--steps`` steps one
by one with ``time.perf_counter()`` and reports the median step time, ns per
parameter (median seconds * 1e9 / N) and the ratios of the median step times
in ``RATIOS``.  The optimizers of one size are timed interleaved, one step of
each per round in a rotating order, so a drift of the machine's memory
bandwidth during the run affects them all alike; they are all alive at once.

Layouts: ``resnet50`` (ResNet-50's 161 tensors, scaled to N) and ``equal4`` (4 equal
tensors); ``python -m benchmarks.layouts --size N`` lists them (benchmarks/layouts.py).

How to run, from the repository root::

    python -m benchmarks.bench_optimizers
    python -m benchmarks.bench_optimizers --sizes 1e6 --steps 5 --only AdamOffload
    python -m benchmarks.bench_optimizers --layouts equal4 --only Lamb nn.Adam
    OMP_NUM_THREADS=2 python -m benchmarks.bench_optimizers --json results/bench.json

With nn.Adam and both Lamb paths selected, each size also prints the
"memory floor": the speed-up over ``impl="ops"`` that a Lamb kernel would
reach moving its minimum of 40 bytes per parameter at nn.Adam's bytes per
second (nn.Adam moves 28), to read the 10x bar against.

The project's targets (``RATIOS``, ``TOPK_BARS``) are printed for every layout
and size as "target ... <= bar: met / not met"; they are meant for a 2-core
machine, and on other core counts they are indicative.  They are reported, not
enforced: the exit status is 0 unless an optimizer failed to run, or
``--check`` is given and a target is not met (then 1).
The thread count (OMP_NUM_THREADS, else os.cpu_count()) and the SIMD path of
the native kernels (``ms_optim.native_info()["isa"]``) are printed with the results.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import mindspore as ms
from mindspore import nn, ops

import ms_optim
from benchmarks.kernel_alone_dgc import dgc_kernel_alone_step
from benchmarks.layouts import LAYOUTS, layout_sizes
from examples.common.cli import parameter_count
from ms_optim import aot
from ms_optim.testing import prepare_kernel

# (name, factory(params) -> optimizer). One line per optimizer; the factory
# runs only when the entry is selected, so entries may name optimizers that a
# given checkout lacks (they are reported as errors, the others still run).
OPTIMIZERS = [
    ("ms_optim.AdamOffload", lambda p: ms_optim.AdamOffload(p, learning_rate=1e-3)),
    ("ms_optim.AdamOffload[bf16]", lambda p: ms_optim.AdamOffload(p, learning_rate=1e-3,
                                                                  moment_dtype="bfloat16")),
    ("ms_optim.AdamOffload[int8]", lambda p: ms_optim.AdamOffload(p, learning_rate=1e-3,
                                                                  moment_dtype="int8")),
    ("ms_optim.Lion", lambda p: ms_optim.Lion(p, learning_rate=1e-4)),
    ("ms_optim.Lion[int8]", lambda p: ms_optim.Lion(p, learning_rate=1e-4, moment_dtype="int8")),
    ("nn.AdamOffload", lambda p: nn.AdamOffload(p, learning_rate=1e-3)),
    ("nn.Adam", lambda p: nn.Adam(p, learning_rate=1e-3)),
    ("ms_optim.Lamb", lambda p: ms_optim.Lamb(p, learning_rate=1e-3)),
    ("ms_optim.Lamb[ops]", lambda p: ms_optim.Lamb(p, learning_rate=1e-3, impl="ops")),
    ("nn.Momentum", lambda p: nn.Momentum(p, learning_rate=1e-3, momentum=0.9)),
    # compressing from the first step at the final sparsity: the steady state after warm-up
    ("ms_optim.DGCMomentum", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, sparsity=[0.999])),
    # and the tensors below the compression size as one bucket at 0.9
    ("ms_optim.DGCMomentum[bucket]", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, sparsity=[0.999],
        bucket_sparsity=0.9)),
]

# (numerator, denominator, bar, layouts, sizes): median step time of numerator /
# denominator, a target met when <= bar (a 2-core machine), judged at the sizes in
# [lo, hi] parameters of the given layouts (None: every layout / size).
ONE_M, ABOUT_25M = (500_000, 2_000_000), (20_000_000, 30_000_000)
RATIOS = [
    ("ms_optim.AdamOffload", "nn.AdamOffload", 0.5, None, None),
    ("ms_optim.AdamOffload", "nn.Adam", 1.15, None, None),
    ("ms_optim.AdamOffload", "nn.Adam", 0.5, ("resnet50",), ONE_M),
    ("ms_optim.AdamOffload", "nn.Adam", 0.9, ("resnet50",), ABOUT_25M),
    # compact moments, at 25M parameters
    ("ms_optim.AdamOffload[int8]", "nn.Adam", 0.65, None, ABOUT_25M),
    ("ms_optim.AdamOffload[int8]", "nn.AdamOffload", 0.5, None, ABOUT_25M),
    ("ms_optim.AdamOffload[bf16]", "nn.Adam", 0.85, None, ABOUT_25M),
    # Lion moves 20 bytes per parameter where Adam moves 28
    ("ms_optim.Lion", "nn.Adam", 0.8, None, ABOUT_25M),
    ("ms_optim.Lamb", "nn.Adam", 1.6, None, None),
    ("ms_optim.Lamb", "nn.Adam", 0.5, ("resnet50",), ONE_M),
    ("ms_optim.Lamb", "nn.Adam", 1.5, ("resnet50",), ABOUT_25M),
    ("ms_optim.Lamb", "ms_optim.Lamb[ops]", 0.1, None, None),  # native at least 10x faster
    ("ms_optim.DGCMomentum", "nn.Momentum", 2.5, None, None),
    ("ms_optim.DGCMomentum", "nn.Momentum", 1.0, ("resnet50",), ONE_M),
    ("ms_optim.DGCMomentum", "nn.Momentum", 1.5, ("resnet50",), ABOUT_25M),
]
# Each optimizer's MindSpore step against its own kernel(s) alone on the same buffers
# (ctypes, no MindSpore; see KERNEL_ALONE): the framework's share of the step.
ALONE_BAR, ALONE_SIZES = 1.10, ABOUT_25M
# The first step (compilation included) of DGCMomentum with ResNet-50's 161 tensors, seconds.
DGC_COMPILE_BAR = 2.0


def applies(layouts, sizes, layout, n):
    """True when a target for `layouts`/`sizes` (None: all) is judged at this layout and size."""
    return ((layouts is None or layout in layouts)
            and (sizes is None or sizes[0] <= n <= sizes[1]))


# Memory traffic per parameter of one step from DRAM, float32 (reads + writes):
# Adam reads p, m, v, g and writes p, m, v; a Lamb step with a trust ratio
# cannot change an element before the whole tensor's norms are known, so it
# reads p, m, v, g and writes m, v in one pass, then reads p, m, v (the
# direction recomputed) and writes p in a second.
ADAM_BYTES, LAMB_BYTES = 28, 40


def lamb_speedup_ceiling(medians):
    """What a Lamb kernel as efficient per byte as nn.Adam would gain over the ops path in
    this run: ops / nn.Adam time, times ADAM_BYTES / LAMB_BYTES.  An estimate for tensors
    streamed from DRAM; where tensors stay in cache between the passes, or nn.Adam pays a
    kernel launch per tensor, a Lamb kernel can do better."""
    if "ms_optim.Lamb[ops]" in medians and "nn.Adam" in medians:
        return medians["ms_optim.Lamb[ops]"] / medians["nn.Adam"] * ADAM_BYTES / LAMB_BYTES
    return None


# Top-k of |x| alone (DGC's selection): n, k, and bars on native / other time.
TOPK_N, TOPK_K = 25_000_000, 25_000
TOPK_BARS = [("ops.topk", 1 / 20), ("numpy argpartition", 1 / 8)]


def thread_count():
    """OMP_NUM_THREADS when set, else os.cpu_count()."""
    env = os.environ.get("OMP_NUM_THREADS")
    return (int(env) if env and env.strip().isdigit() else os.cpu_count()), bool(env)


def _powers():
    """The beta powers input of the kernels alone (step 1 of beta1 0.9, beta2 0.999)."""
    return aot.consts_array("powers", beta1_power=0.9, beta2_power=0.999)


def _state_buffers(sizes, seed):
    """Random float32 parameters and zero moments m, v of `sizes`, for a kernel alone."""
    rng = np.random.default_rng(seed)
    return ([rng.standard_normal(n, dtype=np.float32) for n in sizes],
            [np.zeros(n, np.float32) for n in sizes], [np.zeros(n, np.float32) for n in sizes])


def _adam_alone(sizes, grads, moment_dtype="float32"):
    """ms_optim.AdamOffload's kernel on its own buffers: one multi-tensor call per bucket, with
    its moments stored as `moment_dtype` (zero moments; int8: zero scales too, and the
    rounding key of step 1)."""
    p, _, _ = _state_buffers(sizes, seed=7)
    mt, vt, scaled = aot.moment_storage(moment_dtype)
    mnp, vnp = (ops.zeros(1, t).asnumpy().dtype for t in (mt, vt))  # numpy's view of each
    m, v = [np.zeros(n, mnp) for n in sizes], [np.zeros(n, vnp) for n in sizes]
    if scaled:
        blocks = [-(-n // aot.q8_block()) for n in sizes]
        m_scale, v_scale = ([np.zeros(b, np.float32) for b in blocks] for _ in range(2))
    hyper = dict(lr=np.float32([1e-3]), wd=np.zeros(1, np.float32), powers=_powers(),
                 consts=aot.consts_array("adam", beta1=0.9, beta2=0.999, eps=1e-8,
                                             inv_scale=1.0, nesterov=False))
    calls = []
    for lo, hi in aot.buckets([0] * len(sizes)):
        scale_slots = dict(m_scale=m_scale[lo:hi], v_scale=v_scale[lo:hi],
                           key=np.array([1, lo], np.int32)) if scaled else {}
        calls.append(prepare_kernel(aot.host_step_entry("adam", False, scaled), param=p[lo:hi],
                                    m=m[lo:hi], v=v[lo:hi], grad=grads[lo:hi],
                                    done=np.zeros(1, np.float32), **scale_slots, **hyper))
    return lambda: [c() for c in calls]


def _lamb_alone(sizes, grads):
    """ms_optim.Lamb's kernel (weight decay 0.01: the trust-ratio path) on its own buffers."""
    p, m, v = _state_buffers(sizes, seed=8)
    calls = []
    consts = aot.consts_array("lamb", beta1=0.9, beta2=0.999, eps=1e-6, clip_norm=0.0,
                                  clip_lo=-np.inf, clip_hi=np.inf, always_adapt=False)
    for lo, hi in aot.buckets([0] * len(sizes)):
        calls.append(prepare_kernel(
            "ms_optim_lamb", param=p[lo:hi], m=m[lo:hi], v=v[lo:hi], grad=grads[lo:hi],
            lr=np.float32([1e-3]), wd=np.float32([0.01]), gscale=np.float32([1.0]),
            powers=_powers(), consts=consts, ratios=np.zeros(hi - lo, np.float32)))
    return lambda: [c() for c in calls]


def _dgc_alone(sizes, grads):
    """DGCMomentum's kernels (select, apply, dense momentum) on their own buffers."""
    return dgc_kernel_alone_step(sizes, grads)


# optimizer name -> maker(tensor sizes, gradient arrays) of a callable running one step of
# its native kernels alone on numpy buffers of those sizes
KERNEL_ALONE = {"ms_optim.AdamOffload": _adam_alone,
                "ms_optim.AdamOffload[bf16]": lambda s, g: _adam_alone(s, g, "bfloat16"),
                "ms_optim.AdamOffload[int8]": lambda s, g: _adam_alone(s, g, "int8"),
                "ms_optim.Lamb": _lamb_alone, "ms_optim.DGCMomentum": _dgc_alone}
ALONE_PREFIX = "kernel alone: "


class _Step(nn.Cell):
    """One optimizer step on gradients held in the graph, its output consumed as
    nn.TrainOneStepCell consumes it (``F.depend``): a step returns a scalar, whatever the
    optimizer returns (Lamb's trust ratios are not read back to Python)."""

    def __init__(self, opt, grads):
        super().__init__()
        self.opt = opt
        self.grads = grads
        self.done = ms.Tensor(0, ms.int32)

    def construct(self):
        return ops.depend(self.done, self.opt(self.grads))


def make_params(sizes, tag, seed):
    """Fresh float32 Parameters, uniquely named per optimizer entry."""
    rng = np.random.default_rng(seed)
    return [ms.Parameter(ms.Tensor(rng.standard_normal(s, dtype=np.float32)),
                         name=f"{tag}.w{i}")
            for i, s in enumerate(sizes)]


def make_grads(sizes, seed):
    """Gradients as graph-held Parameters, shared by every optimizer entry."""
    rng = np.random.default_rng(seed + 1)
    return ms.ParameterTuple(
        ms.Parameter(ms.Tensor(rng.standard_normal(s, dtype=np.float32) * np.float32(1e-2)),
                     name=f"grad{i}", requires_grad=False) for i, s in enumerate(sizes))


def synchronize(result):
    """Block until the step has finished.

    On CPU a GRAPH_MODE cell call returns only after the graph ran (the
    optimizers return plain Python bools then, and ms.runtime.synchronize()
    only logs that CPU is unsupported), so nothing more is needed; on a
    device, synchronize the streams; any Tensor output is read back.
    """
    if ms.get_context("device_target") != "CPU":
        ms.runtime.synchronize()
    for r in (result if isinstance(result, (tuple, list)) else (result,)):
        if isinstance(r, ms.Tensor):
            r.asnumpy()


def bench_size(entries, sizes, grads, n, warmup, steps, seed):
    """Step times of every optimizer, interleaved: each round times one step of each, in a
    rotating order, so drifts of the machine's memory bandwidth hit all of them alike.

    Returns {name: (times, compile_s, finite)} and {name: error message}.
    """
    built, errors = {}, {}
    for idx, (name, factory) in enumerate(entries):
        try:
            params = make_params(sizes, f"b{n}_{idx}", seed)
            step = _Step(factory(params), grads)
            t0 = time.perf_counter()
            synchronize(step())  # compiles
            compile_s = time.perf_counter() - t0
            for _ in range(max(0, warmup - 1)):
                synchronize(step())
            built[name] = (step, params, compile_s, [])
        except Exception as exc:  # report and go on with the other entries
            errors[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            gc.collect()
    grad_arrays = None
    for name, _ in entries:
        if name in built and name in KERNEL_ALONE:
            if grad_arrays is None:
                grad_arrays = [g.asnumpy() for g in grads]
            try:
                run = KERNEL_ALONE[name](sizes, grad_arrays)
                for _ in range(max(1, warmup)):
                    run()
                built[ALONE_PREFIX + name] = (run, None, 0.0, [])
            except Exception as exc:  # report and go on
                errors[ALONE_PREFIX + name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    names = list(built)
    for r in range(steps):
        for name in names[r % len(names):] + names[:r % len(names)] if names else []:
            step, _, _, times = built[name]
            t0 = time.perf_counter()
            synchronize(step())
            times.append(time.perf_counter() - t0)
    results = {}
    for name, (step, params, compile_s, times) in built.items():
        # A step that produced NaN/inf would make the comparison meaningless.
        finite = params is None or bool(np.isfinite(params[0].asnumpy()[:1024]).all())
        results[name] = (times, compile_s, finite)
    del built
    gc.collect()
    return results, errors


class _NativeTopk(nn.Cell):
    def __init__(self, k):
        super().__init__()
        self.op = aot.topk_abs_op(k)

    def construct(self, x):
        return self.op(x)


class _OpsTopk(nn.Cell):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def construct(self, x):
        return ops.topk(ops.abs(x), self.k)


def bench_topk(n, k, steps, seed):
    """Median seconds of the native top-k, ops.topk (both GRAPH_MODE cells) and numpy."""
    x_np = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    x = ms.Tensor(x_np)
    timings = {}
    for name, fn in [("ms_optim native", _NativeTopk(k)), ("ops.topk", _OpsTopk(k)),
                     ("numpy argpartition",
                      lambda a: np.argpartition(np.abs(x_np), n - k)[n - k:])]:
        arg = x_np if name.startswith("numpy") else x
        synchronize(fn(arg))  # compile / warm up
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            synchronize(fn(arg))
            times.append(time.perf_counter() - t0)
        timings[name] = float(np.median(times))
    # the native selection is the exact set numpy finds
    idx = _NativeTopk(k)(x)[0].asnumpy()
    assert set(idx.tolist()) == set(np.argpartition(np.abs(x_np), n - k)[n - k:].tolist())
    return timings


def judge(value, bar):
    """Verdict of one target "value <= bar": "met", or "not met" (also for a missing value)."""
    return "met" if value is not None and value <= bar else "not met"


def exit_status(errors, unmet, check):
    """1 when an optimizer failed to run, or with --check when a target was not met; else 0."""
    if errors:
        return 1
    if check and unmet:
        print(f"--check: {unmet} target(s) not met")
        return 1
    return 0


def target_line(verdict, what, value, bar):
    """One printed line of a target, labelled as a target (not a test result)."""
    shown = "n/a" if value is None else f"{value:.4g}"
    return f"  target {what} <= {bar}: {verdict} ({shown})"


def print_targets(report, threads):
    """Prints every ratio of report["ratios"] against its target, records the verdicts in
    report["bars"]; returns how many targets were not met."""
    if not report["ratios"]:
        return 0
    print(f"\nTargets, at every layout and size (meant for 2 cores; here {threads} threads):")
    unmet = 0
    for r in report["ratios"]:
        verdict = judge(r["ratio"], r["bar"])
        unmet += verdict != "met"
        what = f"{r['layout']} N = {r['size']:,}: {r['numerator']} / {r['denominator']}"
        print(target_line(verdict, what, r["ratio"], r["bar"]))
        report["bars"].append(dict(r, verdict=verdict))
    return unmet


def judge_topk(timings, report):
    """Prints the top-k targets (native time / other time <= bar), records them in
    report["topk"]; returns how many were not met."""
    native = timings["ms_optim native"]
    report["topk"] = {"n": TOPK_N, "k": TOPK_K, "seconds": timings, "bars": []}
    unmet = 0
    for other, bar in TOPK_BARS:
        ratio = native / timings[other]
        verdict = judge(ratio, bar)
        unmet += verdict != "met"
        print(target_line(verdict, f"native / {other}", ratio, round(bar, 4))
              + f"  ({1 / ratio:.1f}x faster; target >= {1 / bar:.0f}x)")
        report["topk"]["bars"].append({"other": other, "ratio": ratio, "bar": bar,
                                       "verdict": verdict})
    return unmet


def run_topk(steps, seed, report):
    """Times the top-k selections, prints them and their targets; returns the unmet count."""
    timings = bench_topk(TOPK_N, TOPK_K, max(5, steps // 2), seed)
    print(f"\nTop-k of |x|, n = {TOPK_N:,}, k = {TOPK_K:,} (median ms):")
    for name, sec in timings.items():
        print(f"  {name:20s} {sec * 1e3:9.2f}")
    return judge_topk(timings, report)


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.3f}"


def run_size(entries, layout, sizes, described, args, report):
    """Times every entry on one layout and size, prints the table; returns the error count."""
    n = sum(sizes)
    grads = make_grads(sizes, args.seed)
    results, failed = bench_size(entries, sizes, grads, n, args.warmup, args.steps, args.seed)
    medians, rows, errors = {}, [], 0
    names = [name for name, _ in entries]
    names += [ALONE_PREFIX + name for name in names if name in KERNEL_ALONE]
    for name in names:
        if name not in failed and name not in results:
            continue
        if name in failed:
            errors += 1
            rows.append((name, None, None, None, failed[name]))
            report["results"].append({"layout": layout, "size": n, "optimizer": name,
                                      "error": failed[name]})
            continue
        times, compile_s, finite = results[name]
        med = statistics.median(times)
        medians[name] = med
        note = "" if finite else "non-finite params!"
        rows.append((name, med * 1e3, med * 1e9 / n, compile_s, note))
        report["results"].append({
            "layout": layout, "size": n, "tensors": len(sizes), "optimizer": name,
            "median_s": med, "ns_per_param": med * 1e9 / n, "min_s": min(times),
            "max_s": max(times), "compile_s": compile_s, "step_times_s": times,
            "finite": finite})

    print(f"\n[{layout}] N = {n:,} float32 parameters, {len(sizes)} tensors ({described})")
    width = max(len("optimizer"), *(len(r[0]) for r in rows))
    print(f"  {'optimizer':<{width}}  {'ms/step':>10}  {'ns/param':>9}  {'compile s':>9}")
    for name, ms_step, nsp, comp, note in rows:
        if ms_step is None:
            print(f"  {name:<{width}}  {'error':>10}  {'':>9}  {'':>9}  {note}")
        else:
            print(f"  {name:<{width}}  {ms_step:>10.3f}  {nsp:>9.3f}  {comp:>9.2f}  {note}")
    selected = set(names)
    ratios = [(num, den, bar) for num, den, bar, lays, szs in RATIOS if applies(lays, szs, layout, n)]
    if applies(None, ALONE_SIZES, layout, n):
        ratios += [(name, ALONE_PREFIX + name, ALONE_BAR) for name in KERNEL_ALONE]
    for num, den, bar in ratios:
        if num not in selected or den not in selected:
            continue
        ratio = medians[num] / medians[den] if num in medians and den in medians else None
        print(f"  ratio {num} / {den} = {fmt_ratio(ratio)}   (target <= {bar})")
        report["ratios"].append({"layout": layout, "size": n, "numerator": num,
                                 "denominator": den, "ratio": ratio, "bar": bar})
    dgc = "ms_optim.DGCMomentum"
    if layout == "resnet50" and dgc in results:
        compile_s = results[dgc][1]
        print(f"  compile {dgc} ({len(sizes)} tensors) = {compile_s:.2f} s   "
              f"(target <= {DGC_COMPILE_BAR})")
        report["ratios"].append({"layout": layout, "size": n, "numerator": f"{dgc} compile s",
                                 "denominator": None, "ratio": compile_s,
                                 "bar": DGC_COMPILE_BAR})
    ceiling = lamb_speedup_ceiling(medians)
    if ceiling is not None:
        print(f"  memory floor: a Lamb kernel moving {LAMB_BYTES} B/param (nn.Adam: {ADAM_BYTES}) "
              f"at nn.Adam's bytes per second would be {ceiling:.1f}x faster than "
              f"ms_optim.Lamb[ops]")
        report["lamb_speedup_ceiling"].append({"layout": layout, "size": n, "ceiling": ceiling})
    return errors


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_optimizers",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=parameter_count,
                        default=[1_000_000, 10_000_000, 25_000_000],
                        help="total float32 parameter counts (e.g. 1e6 1e7 2.5e7)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per optimizer")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps first, the compiling one included (>= 1)")
    parser.add_argument("--only", nargs="+", default=None, metavar="SUBSTR",
                        help="run only optimizers whose name contains one of these substrings")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS),
                        help="parameter layouts to run (see above)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the parameters and gradients")
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 when a target is not met (default: only report)")
    parser.add_argument("--json", metavar="PATH", help="also write all numbers as JSON here")
    parser.add_argument("--no-topk", action="store_true",
                        help=f"skip the top-k comparison (n = {TOPK_N:,}, k = {TOPK_K:,})")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    args.warmup = max(1, args.warmup)

    entries = [(n, f) for n, f in OPTIMIZERS
               if not args.only or any(s in n for s in args.only)]
    if not entries:
        parser.error(f"--only {args.only} selects none of: {', '.join(n for n, _ in OPTIMIZERS)}")

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")

    threads, from_env = thread_count()
    isa = ms_optim.native_info()["isa"]
    sizes_sorted = sorted(set(args.sizes))
    print(f"ms_optim {ms_optim.__version__}, mindspore {ms.__version__}, numpy {np.__version__}, "
          f"python {platform.python_version()}")
    print(f"threads: {threads} ({'OMP_NUM_THREADS' if from_env else 'os.cpu_count()'}), "
          f"cpu_count: {os.cpu_count()}, ms_optim isa: {isa}")
    print(f"mode: GRAPH_MODE, device: CPU, layouts: {', '.join(args.layouts)}, "
          f"warmup: {args.warmup}, timed steps: {args.steps}, statistic: median")

    report = {
        "meta": {"ms_optim": ms_optim.__version__, "mindspore": ms.__version__,
                 "numpy": np.__version__, "python": platform.python_version(),
                 "machine": platform.machine(), "threads": threads,
                 "threads_from": "OMP_NUM_THREADS" if from_env else "os.cpu_count()",
                 "cpu_count": os.cpu_count(), "isa": isa, "steps": args.steps,
                 "warmup": args.warmup, "layouts": args.layouts, "seed": args.seed},
        "results": [], "ratios": [], "bars": [], "lamb_speedup_ceiling": [],
    }
    errors = 0
    for layout in args.layouts:
        for n_asked in sizes_sorted:
            sizes, described = layout_sizes(layout, n_asked)
            errors += run_size(entries, layout, sizes, described, args, report)
            gc.collect()

    unmet = print_targets(report, threads)
    if not args.no_topk:
        unmet += run_topk(args.steps, args.seed, report)

    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
        print(f"\nwrote {args.json}")
    return exit_status(errors, unmet, args.check)


if __name__ == "__main__":
    sys.exit(main())
