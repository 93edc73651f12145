"""DGCMomentum's native kernels alone, without a MindSpore graph.

``dgc_kernel_alone(sizes)`` times the work of one DGCMomentum step (impl="native",
one worker, sparsity 0.999, float32 parameters) done by calling the kernels directly
on numpy buffers through ``ms_optim.testing.call_kernel`` (checked once, then timed with
the ctypes arguments prepared once, ``testing.prepare_kernel``): the multi-tensor select over
the compressed parameters (writing the fused exchange buffer), the multi-tensor apply
from it, and the dense momentum of the small parameters, bucketed as the optimizer
buckets them.  The step's floor: what the optimizer inside MindSpore adds on top is
launch and graph overhead.

    python -m benchmarks.kernel_alone_dgc --sizes 1e6 2.56e7
"""
import argparse
import statistics
import time

import numpy as np

from benchmarks.layouts import resnet50_sizes
from examples.common.cli import positive_int
from ms_optim import aot
from ms_optim.dgc import schedule
from ms_optim.testing import call_kernel, prepare_kernel

SPARSITY = 0.999
MOMENTUM = 0.9
LR = 1e-3


def _step_calls(sizes, seed, grads=None):
    """The kernel calls of one step, as a list of (entry, tensors by slot name); `grads`
    (float32 arrays of `sizes`) default to random ones of the scale the bench uses."""
    plan = schedule.DGCPlan(sizes, [True] * len(sizes), (SPARSITY,), 0, 1)
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
    if grads is None:
        grads = [rng.standard_normal(n, dtype=np.float32) * np.float32(1e-2) for n in sizes]
    grads = [np.ascontiguousarray(g, np.float32).reshape(-1) for g in grads]
    u = [np.zeros(n, np.float32) for n in sizes]
    comp, dense = plan.comp_ids, plan.dense_ids
    v = [np.zeros(sizes[i], np.float32) for i in comp]
    ks = plan.stage_k[0]
    consts = aot.consts_array("dgc", momentum=MOMENTUM, nesterov=False)
    lr = np.array([LR], np.float32)
    calls = []
    idx = np.zeros(plan.block[0], np.int32)
    val = np.zeros(plan.block[0], np.float32)
    for lo, hi in aot.buckets((0,) * len(comp)):
        ids = comp[lo:hi]
        off = plan.stage_offsets[0][lo]
        width = sum(ks[lo:hi])
        calls.append(("ms_optim_dgc_select_multi", dict(
            u=[u[i] for i in ids], v=v[lo:hi], grad=[grads[i] for i in ids], consts=consts,
            ks=np.array(ks[lo:hi], np.int32), idx=idx[off:off + width],
            val=val[off:off + width])))
    for lo, hi in aot.buckets((0,) * len(comp)):
        ids = comp[lo:hi]
        layout = np.array((1,) + plan.stage_offsets[0][lo:hi] + ks[lo:hi], np.int32)
        calls.append(("ms_optim_dgc_apply_multi", dict(
            param=[params[i] for i in ids], idx=idx, val=val, lr=lr, layout=layout,
            done=np.zeros(1, np.float32))))
    for lo, hi in aot.buckets((0,) * len(dense)):
        ids = dense[lo:hi]
        calls.append(("ms_optim_dgc_momentum", dict(
            param=[params[i] for i in ids], u=[u[i] for i in ids], src=grads, lr=lr,
            consts=consts, gidx=np.array(ids, np.int32), done=np.zeros(1, np.float32))))
    return calls


def dgc_kernel_alone_step(sizes, grads=None, seed=0):
    """A callable running one DGC step's native kernels on buffers of `sizes` (with these
    gradient arrays when given), checked once through call_kernel, then with the ctypes
    arguments prepared once (``prepare_kernel``): the kernels' time only."""
    calls = _step_calls([int(n) for n in sizes], seed, grads)
    for entry, tensors in calls:  # checked (and the buffers' pages touched) once
        call_kernel(entry, **tensors)
    runs = [prepare_kernel(entry, **tensors) for entry, tensors in calls]
    return lambda: [run() for run in runs]


def dgc_kernel_alone(sizes, steps=10, seed=0):
    """Median seconds of one DGC step's native kernels on tensors of `sizes` elements."""
    step = dgc_kernel_alone_step(sizes, seed=seed)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_alone_dgc",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 2.56e7],
                        help="total parameters; ResNet-50's layout scaled to each (>= 1000)")
    parser.add_argument("--steps", type=positive_int, default=10,
                        help="timed steps (median reported)")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1000:
        parser.error("every size must be >= 1000")
    for n in args.sizes:
        sizes, _ = resnet50_sizes(int(n))
        t = dgc_kernel_alone(sizes, args.steps)
        print(f"N = {sum(sizes):,} ({len(sizes)} tensors): kernel alone {t * 1e3:.3f} ms/step, "
              f"{t * 1e9 / sum(sizes):.3f} ns/param")


if __name__ == "__main__":
    main()
