"""Every host kernel against the machine's own memory floor, side by side in one run.

A step of a host optimizer kernel streams its tensors once (Adam, Lion, DGC) or twice
(Lamb) through DRAM, so the least time it can take on this machine is what the same
traffic takes with no arithmetic.  This benchmark measures that floor with a bandwidth
probe, a small native pass compiled here (g++ -O3 -fopenmp -march=native) that reads
and writes the kernel's own streams, element widths and passes, on the kernels'
threads; then it times each kernel alone (ctypes on numpy buffers, no MindSpore) and
reports it as a multiple of its floor.  Every entry (probes, kernels, and with
``--torch`` PyTorch's fused CPU Adam and a torch.compile'd Lion) is timed in the same
rounds, one call of each per round in a rotating order; figures are medians over the
rounds (the best is printed too).

The streams per parameter, float32 parameters and gradients (r: read, rw: read and
written in place, w: written):

  AdamOffload   p rw, m rw, v rw, g r: 28 B (bfloat16 moments 20 B, int8 16 B and the
                blocks' scales)
  Lion          p rw, m rw, g r: 20 B (bfloat16 16 B, int8 14 B)
  Lamb          pass one p r, m rw, v rw, g r, the direction w; pass two p rw, the
                direction r: 40 B
  DGC select    u rw, v rw, g r: 20 B (momentum correction and the top-k candidates of
                the compressed tensors)
  DGC momentum  p rw, u rw, g r: 20 B (the tensors sent dense)
  C library     Adam dense: 28 B; Adam on rows: 28 B per element of the rows given

How to run, from the repository root (``--torch``: a Python with torch, not a
dependency of ms_optim, e.g. ``python3 -m venv /tmp/t && /tmp/t/bin/pip install
torch==2.13.0``)::

    python -m benchmarks.host_floor
    python -m benchmarks.host_floor --size 2.5e7 --rounds 15 --torch /tmp/t/bin/python

``--against LIBRARY`` times each kernel of another build of the native library beside this
build's, in the same rounds (for a change to a kernel: the build before it, copied aside),
and prints each kernel's ratio, this build over that one::

    python -m benchmarks.host_floor --only "adam int8" --rounds 41 --against /tmp/before.so
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import mindspore as ms
from mindspore import ops

from benchmarks import bench_optimizers as bench
from benchmarks.kernel_alone_dgc import _step_calls
from benchmarks.layouts import LAYOUTS, layout_sizes
from examples.common.cli import parameter_count
from ms_optim import aot, capi, native_info
from ms_optim.testing import call_kernel, kernels_from, prepare_kernel

_PROBE = r"""
#include <omp.h>
#include <algorithm>
#include <cstdint>
// One pass over ns streams of n elements each: stream s has width[s] bytes per element
// and kind[s] 0 (read), 1 (read and written in place) or 2 (written).  The elements are
// walked in blocks of 1024, each block through every stream, split over the threads in
// contiguous shares.  Returns a sum of what was read, so that no read is dropped.
extern "C" double probe_pass(int ns, float **bufs, const int *width, const int *kind,
                             int64_t n, int threads) {
  const int64_t B = 1024, nb = (n + B - 1) / B;
  double sink = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (nb + nt - 1) / nt, b0 = std::min(nb, t * per);
    const int64_t b1 = std::min(nb, b0 + per);
    float acc = 0.0f;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * B, len = std::min(B, n - lo);
      for (int s = 0; s < ns; ++s) {
        float *x = bufs[s] + lo * width[s] / 4;
        const int64_t m = (len * width[s] + 3) / 4;
        if (kind[s] == 0) {
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < m; ++i) acc += x[i];
        } else if (kind[s] == 1) {
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) x[i] = x[i] * 0.5f + 1.0f;
        } else {
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) x[i] = 1.0f;
        }
      }
    }
    sink += acc;
  }
  return sink;
}
"""

R, RW, W = 0, 1, 2
# kernel -> its passes, each a list of (bytes per element, kind)
FLOORS = {
    "adam f32": [[(4, RW), (4, RW), (4, RW), (4, R)]],
    "adam bf16": [[(4, RW), (2, RW), (2, RW), (4, R)]],
    "adam int8": [[(4, RW), (1, RW), (1, RW), (4, R)]],
    "lion f32": [[(4, RW), (4, RW), (4, R)]],
    "lion bf16": [[(4, RW), (2, RW), (4, R)]],
    "lion int8": [[(4, RW), (1, RW), (4, R)]],
    "lamb": [[(4, R), (4, RW), (4, RW), (4, R)], [(4, RW), (4, R), (4, R)]],
    "dgc select": [[(4, RW), (4, RW), (4, R)]],
    "dgc momentum": [[(4, RW), (4, RW), (4, R)]],
}


def floor_bytes(name):
    """Bytes per element of a floor's streams (reads + writes)."""
    return sum(w * (2 if k == RW else 1) for p in FLOORS[name] for w, k in p)


def build_probe(tmp):
    src, lib = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe.so")
    with open(src, "w") as f:
        f.write(_PROBE)
    subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", src, "-o",
                    lib], check=True)
    probe = ctypes.CDLL(lib)
    probe.probe_pass.restype = ctypes.c_double
    return probe


def probe_call(probe, passes, n, threads):
    """A callable running the probe's passes over n elements on buffers of its own (its
    ``buffers``: per pass, per stream, float32 arrays of ones)."""
    calls, keep = [], []
    for streams in passes:
        bufs = [np.ones(n * w // 4 + 16, np.float32) for w, _ in streams]
        keep.append(bufs)
        ptrs = (ctypes.POINTER(ctypes.c_float) * len(streams))(
            *[b.ctypes.data_as(ctypes.POINTER(ctypes.c_float)) for b in bufs])
        width = (ctypes.c_int * len(streams))(*[w for w, _ in streams])
        kind = (ctypes.c_int * len(streams))(*[k for _, k in streams])
        calls.append((len(streams), ptrs, width, kind))
    n64, nt = ctypes.c_int64(n), ctypes.c_int(threads)

    def run():
        for ns, ptrs, width, kind in calls:
            probe.probe_pass(ns, ptrs, width, kind, n64, nt)
    run.buffers = keep  # kept alive with the callable; per pass, per stream
    return run


def _lion_alone(sizes, grads, moment_dtype):
    mt, _, scaled = aot.moment_storage(moment_dtype)
    mnp = ops.zeros(1, mt).asnumpy().dtype  # numpy's view of the moment's dtype
    p = [np.random.default_rng(9).standard_normal(n, dtype=np.float32) for n in sizes]
    m = [np.zeros(n, mnp) for n in sizes]
    consts = aot.consts_array("lion", beta1=0.9, beta2=0.99, inv_scale=1.0)
    calls = []
    for lo, hi in aot.buckets([0] * len(sizes)):
        extra = dict(m_scale=[np.zeros(-(-n // aot.q8_block()), np.float32)
                              for n in sizes[lo:hi]],
                     key=np.array([1, lo], np.int32)) if scaled else {}
        calls.append(prepare_kernel(aot.host_step_entry("lion", False, scaled), param=p[lo:hi],
                                    m=m[lo:hi], grad=grads[lo:hi], lr=np.float32([1e-4]),
                                    wd=np.float32([0.0]), consts=consts,
                                    done=np.zeros(1, np.float32), **extra))
    return lambda: [c() for c in calls]


def _dgc_alone(sizes, grads, entry):
    """DGC's `entry` calls of one step (every tensor compressed for the select, the
    momentum kernel over every tensor as if all were sent dense)."""
    if entry != "ms_optim_dgc_momentum":
        calls = [c for c in _step_calls(sizes, 0, grads) if c[0] == entry]
    else:  # (the step's own momentum call takes only the tensors too small to compress)
        rng = np.random.default_rng(3)
        params = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
        u = [np.zeros(n, np.float32) for n in sizes]
        consts = aot.consts_array("dgc", momentum=0.9, nesterov=False)
        calls = [(entry, dict(param=params[lo:hi], u=u[lo:hi], src=grads, lr=np.float32([1e-3]),
                              consts=consts, gidx=np.arange(lo, hi, dtype=np.int32),
                              done=np.zeros(1, np.float32)))
                 for lo, hi in aot.buckets([0] * len(sizes))]
    for e, t in calls:
        call_kernel(e, **t)
    runs = [prepare_kernel(e, **t) for e, t in calls]
    return lambda: [r() for r in runs]


def _capi_dense(n):
    opt = capi.Optimizer("adam", {"lr": 1e-3}, np.zeros(n, np.float32))
    g = np.random.default_rng(4).standard_normal(n, dtype=np.float32) * np.float32(1e-2)
    return lambda: opt.update(g)


def _capi_rows(n, width=64, share=0.25):
    """Adam on a random quarter of the rows of an (n / width, width) matrix; returns the
    callable and the number of elements it updates."""
    rows = n // width
    opt = capi.Optimizer("adam", {"lr": 1e-3}, np.zeros((rows, width), np.float32))
    rng = np.random.default_rng(5)
    ids = np.sort(rng.choice(rows, int(rows * share), replace=False)).astype(np.int64)
    vals = rng.standard_normal((ids.size, width), dtype=np.float32) * np.float32(1e-2)
    return (lambda: opt.update_rows(ids, vals)), ids.size * width


TORCH = "torch Adam(fused=True)"
TORCH_LION = "torch.compile'd Lion"
# (numerator, denominator, bar): the ratios of medians printed when both were timed
BARS = [
    ("step ms_optim.AdamOffload", TORCH, 1.0),
    ("step ms_optim.AdamOffload", "probe adam f32", 1.1),
    ("step ms_optim.AdamOffload[int8]", "step nn.AdamOffload", 0.5),
    ("step ms_optim.AdamOffload[bf16]", "step nn.Adam", 0.85),
    # 1.15x a 40-byte pass at the Adam-shaped pass's bytes per second
    ("step ms_optim.Lamb", "probe adam f32", round(1.15 * 40 / 28, 2)),
    ("lamb", "probe adam f32", round(1.15 * 40 / 28, 2)),
    ("step ms_optim.Lamb", "probe lamb", 1.15),
    ("step ms_optim.Lion", TORCH_LION, 1.0),
    ("lion f32", TORCH_LION, None),
    ("adam f32", TORCH, None),
    ("adam int8", "probe adam f32", None),
]


def _step_floor(name):
    """The floor a MindSpore step of optimizer `name` (bench_optimizers') is read against."""
    kind = ("bf16" if "[bf16]" in name else "int8" if "[int8]" in name else "f32")
    if "Lion" in name:
        return "lion " + kind
    if "Lamb" in name:
        return "lamb"
    if "DGC" in name:
        return "dgc select"
    if "Momentum" in name:
        return "dgc momentum"
    return "adam " + kind


# the repository root: the torch worker runs there (`python -c` imports from the working
# directory), to import benchmarks.bench_other_lion
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_WORKER = textwrap.dedent("""
    import sys, time, torch
    torch.set_num_threads(int(sys.argv[1]))
    sizes = [int(s) for s in sys.argv[2].split(",")]
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-2
    if sys.argv[3] == "adam":
        step = torch.optim.Adam(params, lr=1e-3, fused=True).step
    elif sys.argv[3] == "lion":
        # benchmarks.bench_other_lion's torch.compile'd Lion, with the settings of the
        # ms_optim.Lion entries (no weight decay)
        from benchmarks.bench_other_lion import CompiledLion
        lion = CompiledLion(params, weight_decay=0.0)

        def step():
            with torch.no_grad():
                lion.step()
    else:
        sys.exit(f"unknown torch step {sys.argv[3]!r}")
    step()
    step()
    print(torch.__version__, flush=True)
    for line in sys.stdin:
        t0 = time.perf_counter()
        step()
        print(time.perf_counter() - t0, flush=True)
""")


class TorchStep:
    """A PyTorch step in a process of its own (another Python), stepped on request: its
    time is measured inside that process.  `kind` "adam": torch.optim.Adam(fused=True);
    "lion": benchmarks.bench_other_lion's Lion compiled by torch.compile."""

    def __init__(self, python, sizes, threads, kind):
        self.proc = subprocess.Popen([python, "-c", _TORCH_WORKER, str(threads),
                                      ",".join(map(str, sizes)), kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=_ROOT)
        self.version = self.proc.stdout.readline().strip()
        if not self.version:
            self.close()
            raise RuntimeError(f"{python} could not run the torch step {kind!r}")

    def __call__(self):
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the torch process ended before its step")
        return float(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# the name of an entry's other build (--against)
AGAINST = "[against]"


def _time_rounds(entries, names, rounds, gap=0.0):
    """{name: seconds of each round}: every entry called once untimed (pages touched, code
    warm), then once per round in a rotating order, each call after `gap` seconds idle; an
    entry returning a float (a torch process) reports its own time."""
    times = {k: [] for k in names}
    for k in names:
        entries[k][0]()
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            inner = entries[k][0]()
            t = time.perf_counter() - t0
            times[k].append(inner if isinstance(inner, float) else t)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_floor",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=parameter_count, default=25_000_000,
                        help="float32 parameters per step (default 2.5e7)")
    parser.add_argument("--layout", choices=LAYOUTS, default="equal4",
                        help="how the parameters are cut into tensors (benchmarks/layouts.py)")
    parser.add_argument("--steps", nargs="*", default=None, metavar="SUBSTR",
                        help="also time these optimizers' MindSpore steps (names of "
                             "benchmarks.bench_optimizers containing one of these; no value: "
                             "the AdamOffload, Lion, Lamb and DGCMomentum steps, nn.Adam and "
                             "nn.AdamOffload)")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="idle milliseconds before each timed call (default 0), so that "
                             "no thread of the previous entry, in this process or the torch "
                             "one, still spins while the next runs")
    parser.add_argument("--only", nargs="+", default=None, metavar="SUBSTR",
                        help="kernels whose name contains one of these")
    parser.add_argument("--against", metavar="LIBRARY",
                        help="another build of libms_optim.so: its kernels timed beside this "
                             "build's in the same rounds, and each ratio printed")
    parser.add_argument("--torch", metavar="PYTHON",
                        help="a Python with torch: time torch.optim.Adam(fused=True) beside "
                             "(and a torch.compile'd Lion when a Lion entry is timed)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if not args.gap_ms >= 0:
        parser.error(f"--gap-ms must be at least 0, got {args.gap_ms}")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")  # the steps on the host, as bench_optimizers times them
    threads, _ = bench.thread_count()
    sizes, described = layout_sizes(args.layout, args.size)
    n = sum(sizes)
    grads = [np.random.default_rng(1 + i).standard_normal(s, dtype=np.float32)
             * np.float32(1e-2) for i, s in enumerate(sizes)]
    kernels = {
        "adam f32": lambda: bench._adam_alone(sizes, grads),
        "adam bf16": lambda: bench._adam_alone(sizes, grads, "bfloat16"),
        "adam int8": lambda: bench._adam_alone(sizes, grads, "int8"),
        "lion f32": lambda: _lion_alone(sizes, grads, "float32"),
        "lion bf16": lambda: _lion_alone(sizes, grads, "bfloat16"),
        "lion int8": lambda: _lion_alone(sizes, grads, "int8"),
        "lamb": lambda: bench._lamb_alone(sizes, grads),
        "dgc select": lambda: _dgc_alone(sizes, grads, "ms_optim_dgc_select_multi"),
        "dgc momentum": lambda: _dgc_alone(sizes, grads, "ms_optim_dgc_momentum"),
    }
    chosen = [k for k in kernels if not args.only or any(s in k for s in args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        probe = build_probe(tmp)
        # name -> (callable, elements, floor name); the Adam-shaped pass always
        entries = {}
        for k in chosen + ["adam f32"] * ("adam f32" not in chosen):
            if k in chosen:
                entries[k] = (kernels[k](), n, k)
                if args.against:  # right after this build's, so that the two alternate
                    with kernels_from(args.against):
                        entries[f"{k} {AGAINST}"] = (kernels[k](), n, k)
            if "probe " + k not in entries:
                entries["probe " + k] = (probe_call(probe, FLOORS[k], n, threads), n, k)
        capi_names = ("capi adam dense", "capi adam rows")
        if not args.only or any(s in c for s in args.only for c in capi_names):
            entries["capi adam dense"] = (_capi_dense(n), n, "adam f32")
            rows, touched = _capi_rows(n)
            entries["capi adam rows"] = (rows, touched, "adam f32")
        if args.steps is not None:
            ms_grads = bench.make_grads(sizes, 0)
            wanted = args.steps or ["AdamOffload", "Lion", "Lamb", "DGCMomentum", "nn.Adam"]
            for i, (name, factory) in enumerate(bench.OPTIMIZERS):
                if any(w in name for w in wanted) and not name.endswith("[ops]"):
                    step = bench._Step(factory(bench.make_params(sizes, f"s{i}", 0)), ms_grads)
                    for _ in range(3):  # compiled, then warm
                        step()
                    floor = _step_floor(name)
                    entries["step " + name] = (step, n, floor)
                    if "probe " + floor not in entries:
                        entries["probe " + floor] = (probe_call(probe, FLOORS[floor], n,
                                                                threads), n, floor)
        torch = []
        try:
            if args.torch:
                torch.append(TorchStep(args.torch, sizes, threads, "adam"))
                entries[TORCH] = (torch[-1], n, "adam f32")
                if any(k.startswith("lion") or "Lion" in k for k in entries):
                    torch.append(TorchStep(args.torch, sizes, threads, "lion"))
                    entries[TORCH_LION] = (torch[-1], n, "lion f32")
                    if "probe lion f32" not in entries:
                        entries["probe lion f32"] = (probe_call(probe, FLOORS["lion f32"], n,
                                                                threads), n, "lion f32")
            names = list(entries)
            times = _time_rounds(entries, names, args.rounds, args.gap_ms / 1e3)
        finally:
            for t in torch:
                t.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"N = {n:,} float32 parameters ({described}), {threads} threads, "
          f"{args.rounds} rounds, {args.gap_ms:g} ms idle before each call, "
          f"kernels: {native_info()['isa']}")
    print(f"{'':34} {'ns/elem':>8} {'best':>7} {'floor B':>8} {'/ floor':>8} {'GB/s':>6}")
    for k in names:
        if k.startswith("probe "):
            continue
        fn, elems, fl = entries[k]
        ns = med[k] / elems * 1e9
        floor = med["probe " + fl] / n * 1e9
        gbs = floor_bytes(fl) / ns
        print(f"{k:34} {ns:8.3f} {min(times[k]) / elems * 1e9:7.3f} {floor_bytes(fl):8d} "
              f"{ns / floor:8.2f} {gbs:6.1f}")
    if torch:
        print(f"PyTorch steps: torch {torch[0].version}")
    if args.against:
        print(f"{AGAINST}: the kernels of {args.against}")
    print("ratios of medians:")
    for k in names:
        if k + " " + AGAINST in med:
            print(f"  {k} / {k} {AGAINST} = {med[k] / med[k + ' ' + AGAINST]:.3f}")
    for num, den, bar in BARS:
        if num in med and den in med:
            r = med[num] / med[den] * (entries[den][1] / entries[num][1])
            verdict = "" if bar is None else "met" if r <= bar else "not met"
            judged = f"   (bar <= {bar}: {verdict})" if verdict else ""
            print(f"  {num} / {den} = {r:.3f}{judged}")
    print("floors (the probe's passes):")
    for k in names:
        if k.startswith("probe "):
            ns = med[k] / n * 1e9
            print(f"  {k[6:]:32} {ns:8.3f} ns/elem, {floor_bytes(k[6:])} B: "
                  f"{floor_bytes(k[6:]) / ns:.1f} GB/s; "
                  f"{med[k] / med['probe adam f32']:.2f}x the Adam-shaped pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
