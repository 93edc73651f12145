"""Where a MindSpore optimizer step's time goes, measured piece by piece.

Each line times one GRAPH_MODE cell call (median of --steps calls) on the
host CPU, for a parameter layout (--layout: by default ResNet-50's 161
tensors scaled to about --size parameters, as benchmarks/bench_optimizers.py):

- the floor of a graph call (a cell that returns a constant);
- the graph ops an optimizer runs around its kernel (beta powers, concat);
- a no-op AOT Custom op (a probe compiled by this benchmark, doing nothing)
  with 1 input, and with all the tensors as inputs of one op, and one probe
  op per tensor: MindSpore's cost per Custom op and per op input;
- the same with the inputs marked as written in place (side_effect_mem);
- an op that busy-waits (a second probe, touching no memory) for 0 and 12 ms: the
  call's wall time and the calling thread's CPU time besides the wait, how many
  Python functions one call of its cell runs, and a small Python loop right after
  the same wait through ctypes;
- the native Adam kernel alone (ctypes, no MindSpore) and inside MindSpore;
- AdamOffload's step split in three by a timing shim (compiled here, linked
  to the library) that MindSpore calls in place of the Adam entry: from the
  Python call to the kernel's entry, the kernel itself, and from its exit
  back to Python;
- the same step with the no-op probe in place of the Adam entry: everything
  the step costs but the kernel's work;
- OpenMP: a 2-thread kernel call on a small tensor against a 1-thread one.

The findings are written up in benchmarks/README.md#where-a-steps-time-goes.  Run, from the repository root:
    python -m benchmarks.profile_step [--size 1e6] [--steps 50] [--layout equal4]
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import mindspore as ms
from mindspore import nn, ops
from mindspore.ops import CustomRegOp, DataType

import ms_optim
from benchmarks.layouts import LAYOUTS, layout_sizes
from ms_optim import aot
from ms_optim.testing import advance_beta_powers, override_kernel, prepare_kernel

_PROBE = r"""
#include <cstdint>
extern "C" int probe_noop(int, void **, int *, int64_t **, const char **, void *, void *) {
  return 0;
}
"""


# Busy-waits for the time set by probe_set_wait (no memory touched): a long kernel without
# the kernel's traffic.
_WAIT = r"""
#include <chrono>
#include <cstdint>
static double wait_ms = 0.0;
extern "C" void probe_set_wait(double ms) { wait_ms = ms; }
extern "C" int probe_wait(int, void **, int *, int64_t **, const char **, void *, void *) {
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration<double, std::milli>(wait_ms);
  while (std::chrono::steady_clock::now() < until) {
  }
  return 0;
}
"""


# Calls the library's Adam entry and records when it was entered and how long it ran.
_SHIM = r"""
#include <chrono>
#include <cstdint>
extern "C" int ms_optim_adam_inplace(int, void **, int *, int64_t **, const char **, void *,
                                     void *);
using Clock = std::chrono::steady_clock;
static Clock::time_point mark, entered, left;
extern "C" int timed_adam(int n, void **p, int *nd, int64_t **s, const char **d, void *a,
                          void *b) {
  entered = Clock::now();
  const int rc = ms_optim_adam_inplace(n, p, nd, s, d, a, b);
  left = Clock::now();
  return rc;
}
extern "C" void timed_mark() { mark = Clock::now(); }
static double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
extern "C" double timed_to_entry() { return ms(mark, entered); }
extern "C" double timed_kernel() { return ms(entered, left); }
"""


def build_probe(tmp, name="probe", source=_PROBE, link=()):
    src, lib = os.path.join(tmp, f"{name}.cpp"), os.path.join(tmp, f"lib{name}.so")
    with open(src, "w") as fh:
        fh.write(source)
    subprocess.check_call(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", src, "-o", lib,
                           *link])
    return lib


def build_shim(tmp):
    """The timing shim, linked to the loaded library (same file: the same instance)."""
    libdir = os.path.dirname(ms_optim.native_info()["library"])
    lib = build_probe(tmp, "shim", _SHIM, ["-L" + libdir, "-lms_optim", "-Wl,-rpath," + libdir])
    handle = ctypes.CDLL(lib)
    for fn in ("timed_to_entry", "timed_kernel"):
        getattr(handle, fn).restype = ctypes.c_double
    return lib, handle


def split_step(step, shim, alone, steps):
    """Medians (ms) of: Python call to kernel entry, the kernel, kernel exit to return, and
    of the kernel alone (`alone`), timed after each step so that both see the same machine
    (a machine's memory bandwidth can drift by tens of percent over minutes)."""
    parts = []
    for i in range(steps + 2):
        shim.timed_mark()
        t0 = time.perf_counter()
        step()
        total = (time.perf_counter() - t0) * 1e3
        t1 = time.perf_counter()
        alone()
        alone_ms = (time.perf_counter() - t1) * 1e3
        if i >= 2:
            to_entry, kernel = shim.timed_to_entry(), shim.timed_kernel()
            parts.append((to_entry, kernel, total - to_entry - kernel, alone_ms))
    return [float(np.median(col)) for col in zip(*parts)]


def probe_op(lib, k, inplace, func="probe_noop"):
    reg = CustomRegOp(f"{func}_{k}_{int(inplace)}")
    for i in range(k):
        reg = reg.input(i, f"x{i}")
    reg = reg.output(0, "y").dtype_format(*([DataType.F32_Default] * (k + 1)))
    op = ops.Custom(f"{lib}:{func}", out_shape=lambda *s: [1],
                    out_dtype=lambda *d: ms.float32, func_type="aot",
                    reg_info=reg.target("CPU").get_op_info())
    if inplace:
        op.add_prim_attr("side_effect_mem", True)
    op.set_device("CPU")
    return op


class Const(nn.Cell):
    def construct(self):
        return True


class GraphOps(nn.Cell):
    """What AdamOffload's construct computes besides its kernel: lr, global step, powers."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def construct(self):
        opt = self.opt
        lr = opt.get_lr()
        opt.assignadd(opt.global_step, opt.global_step_increase_tensor)
        b1, b2 = advance_beta_powers(opt)
        return ops.concat((b1, b2)) + lr


class OneOp(nn.Cell):
    def __init__(self, op, params):
        super().__init__()
        self.op, self.params = op, params

    def construct(self):
        return self.op(*self.params)


class OpEach(nn.Cell):
    def __init__(self, op, params):
        super().__init__()
        self.op, self.params = op, params

    def construct(self):
        done = ()
        for p in self.params:
            done = done + (self.op(p),)
        return done


class Step(nn.Cell):
    def __init__(self, opt, grads):
        super().__init__()
        self.opt, self.grads = opt, grads

    def construct(self):
        return self.opt(self.grads)


def call_past_wait(cell, set_wait, wait_ms, steps):
    """Medians (ms) of a call of `cell`, whose one op busy-waits `wait_ms`, less the wait:
    its wall time, and the calling thread's CPU time."""
    set_wait(wait_ms)
    cell()
    cell()
    wall, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.thread_time()
        cell()
        cpu.append((time.thread_time() - c0) * 1e3 - wait_ms)
        wall.append((time.perf_counter() - t0) * 1e3 - wait_ms)
    return float(np.median(wall)), float(np.median(cpu))


def python_after_wait(waits, wait_ms, steps):
    """Median (ms) of a small Python loop run right after the wait probe, called through
    ctypes (no MindSpore): how much slower plain Python runs after such a wait."""
    waits.probe_set_wait(wait_ms)
    times = []
    for _ in range(steps):
        waits.probe_wait(0, None, None, None, None, None, None)
        t0 = time.perf_counter()
        stored = {}
        for i in range(3000):
            stored[i] = i
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def python_calls(cell):
    """(Python functions, built-in functions) one call of `cell` runs, counted by
    sys.setprofile: the size of MindSpore's call path in Python."""
    cell()
    counts = {"call": 0, "c_call": 0}

    def count(frame, event, arg):
        if event in counts:
            counts[event] += 1

    sys.setprofile(count)
    try:
        cell()
    finally:
        sys.setprofile(None)
    return counts["call"], counts["c_call"]


def median_ms(fn, steps):
    fn()
    fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def params_of(sizes, tag):
    rng = np.random.default_rng(0)
    return ms.ParameterTuple(ms.Parameter(ms.Tensor(rng.standard_normal(s, dtype=np.float32)),
                                          name=f"{tag}{i}") for i, s in enumerate(sizes))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile_step",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=1e6, help="total parameters (default 1e6)")
    ap.add_argument("--steps", type=int, default=50, help="timed calls per line")
    ap.add_argument("--layout", choices=LAYOUTS, default="resnet50",
                    help="how the parameters are cut into tensors (benchmarks/layouts.py)")
    args = ap.parse_args(argv)
    if args.size < 1000 or args.steps < 1:
        ap.error("--size must be >= 1000 and --steps >= 1")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")

    sizes, described = layout_sizes(args.layout, int(args.size))
    n, K = sum(sizes), len(sizes)
    info = ms_optim.native_info()
    print(f"layout: {described}; {K} tensors, {n:,} parameters; isa {info['isa']}, "
          f"threads {info['kernel_threads']}")
    rows = []

    def row(what, value_ms, per=None):
        extra = f"   ({value_ms * 1e3 / per:.1f} us each of {per})" if per else ""
        rows.append((what, value_ms))
        print(f"  {what:<58s} {value_ms:8.3f} ms{extra}", flush=True)

    row("graph call floor (a cell returning a constant)", median_ms(Const(), args.steps))
    params = params_of(sizes, "p")
    opt = ms_optim.AdamOffload(params_of(sizes, "q"), learning_rate=1e-3)
    row("graph ops around a kernel (lr, step, beta powers)", median_ms(GraphOps(opt), args.steps))
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_probe(tmp)
        for inplace in (False, True):
            tag = " in place" if inplace else ""
            row(f"one no-op op, 1 input{tag}",
                median_ms(OneOp(probe_op(lib, 1, inplace), params[:1]), args.steps))
            row(f"one no-op op, {K} inputs{tag}",
                median_ms(OneOp(probe_op(lib, K, inplace), params), args.steps), per=K)
            row(f"{K} no-op ops, 1 input each{tag}",
                median_ms(OpEach(probe_op(lib, 1, inplace), params), args.steps), per=K)
        four = params_of(sizes, "r")[:4]
        row(f"one no-op op, 4 x {K} inputs in place",
            median_ms(OneOp(probe_op(lib, 4 * K, True), tuple(params) + tuple(params_of(
                sizes, "s")) + tuple(params_of(sizes, "t")) + tuple(params_of(sizes, "u"))),
                args.steps), per=4 * K)
        del four
        # MindSpore's own cost of a call, after a kernel that ran a while
        wait_lib = build_probe(tmp, "wait", _WAIT)
        waits = ctypes.CDLL(wait_lib)  # the library MindSpore loads for the op: one copy
        waits.probe_set_wait.argtypes = [ctypes.c_double]
        waiter = OneOp(probe_op(wait_lib, 1, True, "probe_wait"), params[:1])
        for wait_ms in (0.0, 12.0):
            wall, cpu = call_past_wait(waiter, waits.probe_set_wait, wait_ms, args.steps)
            row(f"one op busy-waiting {wait_ms:g} ms: the call less the wait", wall)
            row(f"  the same, the calling thread's CPU time less the wait", cpu)
        functions, builtins = python_calls(waiter)
        print(f"  one call of that cell runs {functions} Python functions and {builtins} "
              "built-in ones", flush=True)
        for wait_ms in (0.0, 12.0):
            row(f"a Python loop of 3000 stores after a {wait_ms:g} ms wait (ctypes)",
                python_after_wait(waits, wait_ms, args.steps))

    # the Adam kernel alone: one multi-tensor call through ctypes on numpy buffers
    rng = np.random.default_rng(1)
    bufs = [[(rng.standard_normal(s) * (j != 1 and j != 2)).astype(np.float32) for s in sizes]
            for j in range(4)]  # p, m = 0, v = 0, g
    hyper = dict(lr=np.array([1e-3], np.float32), wd=np.array([0.0], np.float32),
                 powers=aot.consts_array("powers", beta1_power=0.9, beta2_power=0.999),
                 consts=aot.consts_array("adam", beta1=0.9, beta2=0.999, eps=1e-8,
                                             inv_scale=1.0, nesterov=0),
                 done=np.zeros(1, np.float32))

    def adam_alone(p, m, v, g):
        return prepare_kernel("ms_optim_adam_inplace", param=p, m=m, v=v, grad=g, **hyper)

    alone = adam_alone(*bufs)
    row("native Adam kernel alone (ctypes, one multi-tensor call)", median_ms(alone, args.steps))
    for name, make in (("ms_optim.AdamOffload step in MindSpore",
                        lambda p: ms_optim.AdamOffload(p, learning_rate=1e-3)),
                       ("ms_optim.Lamb step in MindSpore",
                        lambda p: ms_optim.Lamb(p, learning_rate=1e-3)),
                       ("nn.Adam step in MindSpore", lambda p: nn.Adam(p, learning_rate=1e-3))):
        grads = ms.ParameterTuple(ms.Parameter(ms.Tensor(b), name=f"g{name[:4]}{i}",
                                               requires_grad=False)
                                  for i, b in enumerate(bufs[3]))
        row(name, median_ms(Step(make(params_of(sizes, name[:6])), grads), args.steps))

    # the step split around its kernel by the timing shim
    with tempfile.TemporaryDirectory() as tmp:
        shim_lib, shim = build_shim(tmp)
        with override_kernel("ms_optim_adam_inplace", f"{shim_lib}:timed_adam"):
            grads = ms.ParameterTuple(ms.Parameter(ms.Tensor(b), name=f"gshim{i}",
                                                   requires_grad=False)
                                      for i, b in enumerate(bufs[3]))
            step = Step(ms_optim.AdamOffload(params_of(sizes, "shim"), learning_rate=1e-3),
                        grads)
            before, kernel, after, alone_ms = split_step(step, shim, alone, args.steps)
        # everything but the kernel: the same step with a no-op in place of the Adam entry
        noop = build_probe(tmp)
        with override_kernel("ms_optim_adam_inplace", f"{noop}:probe_noop"):
            step = Step(ms_optim.AdamOffload(params_of(sizes, "noop"), learning_rate=1e-3),
                        grads)
            without_kernel = median_ms(step, args.steps)
    row("AdamOffload step: Python call to the kernel's entry", before)
    row("AdamOffload step: the kernel, inside MindSpore", kernel)
    row("AdamOffload step: the kernel's exit to the return", after)
    row("the kernel alone, timed after each of those steps", alone_ms)
    row("AdamOffload step with a no-op kernel (all but the kernel)", without_kernel)

    # OpenMP start-up: one small tensor through the 2-thread and the 1-thread path
    small = [np.abs(rng.standard_normal(1 << 15)).astype(np.float32) for _ in range(4)]
    row("Adam kernel, one 32K tensor (goes parallel)",
        median_ms(adam_alone(*([a] for a in small)), 200))
    tiny = [[a[:(1 << 15) - 64].copy()] for a in small]
    row("Adam kernel, one 32K-64 tensor (stays on one thread)",
        median_ms(adam_alone(*tiny), 200))
    return 0


if __name__ == "__main__":
    sys.exit(main())
