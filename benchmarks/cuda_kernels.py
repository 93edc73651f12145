"""The CUDA kernels timed on a GPU against the same steps composed of PyTorch ops.

What a GPU user of ms_optim compares: the native kernels (``impl="native"`` on a GPU
device target) against a step built from framework ops, as ``impl="ops"`` builds it from
MindSpore's (per parameter: top-k of |v|, a gather, two scatters; Lamb's moments, norms and
update).  MindSpore's GPU build does not run here, so the composed steps are PyTorch's, on
the same device and the same shapes.  Layout: ResNet-50's parameters
(benchmarks.layouts), DGC on those of 16384 elements or more at sparsity 0.999.

Each figure is the median over --repeat timed calls (CUDA events), after warm-up calls.
Each step's floor is the bytes it must move at least (FLOOR_BYTES) at the rate of a
device-to-device copy measured in the same run.  Beside them: torch.topk of |v| alone, the
residual update alone as one fused pass (with CuPy, where installed), and the select on
inputs that test its guess (all-equal, mostly zero, NaN and inf, k = 1, k = n).
Run from the repository root on a machine with PyTorch and a CUDA device:

    python -m benchmarks.cuda_kernels [--repeat 20] [--json results.json] [--profile]

--profile also prints where the select's time goes, kernel by kernel (PyTorch's profiler).
"""
import argparse
import json

import numpy as np

from benchmarks.layouts import resnet50_shapes
from examples.common.cli import positive_int

torch = None  # PyTorch, imported by main(): --help answers without it
cuda_library = None  # ms_optim's CUDA library (benchmarks.common.cuda_harness)
consts = None  # a kernel's constants by name (benchmarks.common.cuda_harness)

SPARSITY, MOMENTUM, RANKS = 0.999, 0.9, 8

# The bytes each step must move at least, from its figures: DGC's residual update reads g, u,
# v and writes u, v (20 an element); the apply reads each worker's entries (8 bytes each) and
# reads and writes each parameter element it steps (8); Lamb's two passes read and write 40.
FLOOR_BYTES = {"select_resnet50": lambda r: 20 * r["elements"],
               "select_one_25M": lambda r: 20 * r["elements"],
               "apply_resnet50_8_workers": lambda r: 8 * r["entries"] + 8 * r["stepped"],
               "lamb_resnet50": lambda r: 40 * r["elements"]}


def timed(fn, repeat, warmup=3, setup=None):
    """Median milliseconds of fn() over `repeat` calls, each between two CUDA events
    (setup(), if given, runs before each call, outside them)."""
    for _ in range(warmup):
        if setup:
            setup()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if setup:
            setup()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    cuda_library.status(_stream())  # a refused call would have been timed as a no-op
    return float(np.median(times))


def copy_bandwidth(repeat):
    """Device-to-device copy, GB/s counting the bytes read and written."""
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = timed(lambda: y.copy_(x), repeat)
    return 2 * x.numel() * 4 / ms / 1e6


# DGC's residual update as one fused pass (u = m u + g, v += u: 12 bytes read, 8 written an
# element), the least any select must do, compiled by CuPy where it is installed.
UPDATE_PASS = r"""
extern "C" __global__ void update(float *u, float *v, const float *g, long long n, float m) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float x = m * u[i] + g[i]; u[i] = x; v[i] = v[i] + x; }
}"""


def update_pass(n, repeat):
    """Milliseconds of the fused residual update alone on n elements (CuPy), or None."""
    try:
        import cupy
    except ImportError:
        return None
    kernel = cupy.RawKernel(UPDATE_PASS, "update", options=("--fmad=false",))
    gen = torch.Generator(device="cuda").manual_seed(0)
    u, v, g = (torch.randn(n, device="cuda", generator=gen) for _ in range(3))
    blocks = (n + 255) // 256

    def run():  # CuPy's current stream and PyTorch's are both the legacy default stream
        kernel((blocks,), (256,), (u.data_ptr(), v.data_ptr(), g.data_ptr(), cupy.int64(n),
                                  cupy.float32(MOMENTUM)))
    return timed(run, repeat)


def _stream():
    return torch.cuda.current_stream().cuda_stream


def _dgc_consts():
    """DGC's constants on the device, by name."""
    return torch.from_numpy(consts("dgc", momentum=MOMENTUM, nesterov=False)).cuda()


def select_call(sizes):
    """A prepared multi-tensor select over fresh residuals of `sizes` (sparsity SPARSITY)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    tensors = [[torch.zeros(n, device="cuda") for n in sizes],
               [torch.randn(n, device="cuda", generator=gen) for n in sizes],
               [torch.randn(n, device="cuda", generator=gen) for n in sizes]]
    ks = [max(1, int(n * (1 - SPARSITY))) for n in sizes]
    return cuda_library.prepare_named(
        "ms_optim_dgc_select_multi", _stream(), u=tensors[0], v=tensors[1], grad=tensors[2],
        consts=_dgc_consts(), ks=torch.tensor(ks, dtype=torch.int32, device="cuda"),
        idx=torch.zeros(sum(ks), dtype=torch.int32, device="cuda"),
        val=torch.zeros(sum(ks), device="cuda"))


def profile_select(sizes, calls=5):
    """The select's kernels, by name: total device time over `calls` calls."""
    run = select_call(sizes)
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="device_time_total", row_limit=20)


def dgc_select(sizes, repeat):
    """One multi-tensor select over `sizes` against torch's per-tensor step."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    u = [torch.zeros(n, device="cuda") for n in sizes]
    v = [torch.randn(n, device="cuda", generator=gen) for n in sizes]
    g = [torch.randn(n, device="cuda", generator=gen) for n in sizes]
    ks = [max(1, int(n * (1 - SPARSITY))) for n in sizes]
    total = sum(ks)
    idx = torch.zeros(total, dtype=torch.int32, device="cuda")
    val = torch.zeros(total, device="cuda")
    ours = cuda_library.prepare_named(
        "ms_optim_dgc_select_multi", _stream(), u=u, v=v, grad=g, consts=_dgc_consts(),
        ks=torch.tensor(ks, dtype=torch.int32, device="cuda"), idx=idx, val=val)

    def composed():
        for j in range(len(sizes)):
            u[j].mul_(MOMENTUM).add_(g[j])
            v[j].add_(u[j])
            _, top = torch.topk(v[j].abs(), ks[j])
            v[j].gather(0, top)
            u[j].index_fill_(0, top, 0.0)
            v[j].index_fill_(0, top, 0.0)

    def update_alone():
        for j in range(len(sizes)):
            u[j].mul_(MOMENTUM).add_(g[j])
            v[j].add_(u[j])

    out = {"ours_ms": timed(ours, repeat), "torch_ms": timed(composed, repeat),
           "torch_update_alone_ms": timed(update_alone, repeat),
           "elements": int(sum(sizes)), "tensors": len(sizes), "k": total}
    if len(sizes) == 1:  # torch's top-k alone, on |v| (no residual update, no gather)
        out["torch_topk_ms"] = timed(lambda: torch.topk(v[0].abs(), ks[0]), repeat)
    return out


def _hard_v(kind, n, gen):
    """Residuals that stress the select's guess (tests/gpu/test_cuda_kernels.py has each)."""
    v = torch.randn(n, device="cuda", generator=gen)
    if kind == "all_equal":
        v.fill_(-2.5)
    elif kind == "mostly_zeros":  # fewer nonzeros than k
        nz = v[:100].clone()
        v.zero_()
        v[torch.randperm(n, device="cuda", generator=gen)[:100]] = nz
    elif kind == "nan_inf":
        at = torch.randperm(n, device="cuda", generator=gen)[: n // 50]
        v[at[: n // 100]] = float("nan")
        v[at[n // 100:]] = float("inf")
    return v


HARD = [("typical", SPARSITY), ("all_equal", SPARSITY), ("mostly_zeros", SPARSITY),
        ("nan_inf", SPARSITY), ("k = 1", None), ("k = n", 0.0)]


def select_hard(n, repeat):
    """The select on residuals restored before each call (u = 0, grad = 0: it selects from
    the residuals as given), typical and hard: milliseconds by input."""
    gen = torch.Generator(device="cuda").manual_seed(2)
    out = {}
    for name, sparsity in HARD:
        v0 = _hard_v(name if name in ("all_equal", "mostly_zeros", "nan_inf") else "random", n, gen)
        k = 1 if sparsity is None else max(1, int(n * (1 - sparsity)))
        u, v, g = torch.zeros(n, device="cuda"), v0.clone(), torch.zeros(n, device="cuda")
        idx = torch.zeros(k, dtype=torch.int32, device="cuda")
        val = torch.zeros(k, device="cuda")
        run = cuda_library.prepare_named(
            "ms_optim_dgc_select_multi", _stream(), u=[u], v=[v], grad=[g],
            consts=_dgc_consts(), ks=torch.tensor([k], dtype=torch.int32, device="cuda"),
            idx=idx, val=val)

        def restore():
            u.zero_()
            v.copy_(v0)
        out[name] = {"ms": timed(run, repeat, setup=restore), "k": k}
        del v0, u, v, g
    return out


def dgc_apply(sizes, repeat):
    """The apply of RANKS workers' selections against torch's index_add_ per tensor."""
    rng = np.random.default_rng(0)
    ks = [max(1, int(n * (1 - SPARSITY))) for n in sizes]
    block = sum(ks)
    runs = [[np.sort(rng.choice(n, k, replace=False)).astype(np.int32) for n, k in zip(sizes, ks)]
            for _ in range(RANKS)]
    idx = torch.from_numpy(np.concatenate([np.concatenate(r) for r in runs])).cuda()
    val = torch.randn(RANKS * block, device="cuda")
    p = [torch.randn(n, device="cuda") for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(ks)[:-1]])
    layout = torch.tensor([RANKS] + list(offsets) + ks, dtype=torch.int32, device="cuda")
    lr = torch.tensor(0.1, device="cuda")
    done = torch.zeros(1, device="cuda")
    ours = cuda_library.prepare_named("ms_optim_dgc_apply_multi", _stream(), param=p, idx=idx,
                                      val=val, lr=lr, layout=layout, done=done)
    per = []
    for j in range(len(sizes)):
        at = np.concatenate([r * block + offsets[j] + np.arange(ks[j]) for r in range(RANKS)])
        at = torch.from_numpy(at).cuda()
        per.append((idx[at].long(), val[at]))

    def composed():
        for j in range(len(sizes)):
            p[j].index_add_(0, per[j][0], per[j][1], alpha=-0.1 / RANKS)

    stepped = sum(np.unique(np.concatenate([r[j] for r in runs])).size for j in range(len(sizes)))
    return {"ours_ms": timed(ours, repeat), "torch_ms": timed(composed, repeat),
            "entries": int(RANKS * block), "stepped": int(stepped)}


def lamb(sizes, repeat):
    """One multi-tensor Lamb step (weight decay: every tensor has a trust ratio) against
    torch's per-tensor step."""
    b1, b2, eps, wd, lr, step = 0.9, 0.999, 1e-6, 0.01, 1e-3, 3
    gen = torch.Generator(device="cuda").manual_seed(1)
    p = [torch.randn(n, device="cuda", generator=gen) for n in sizes]
    m = [torch.zeros(n, device="cuda") for n in sizes]
    v = [torch.zeros(n, device="cuda") for n in sizes]
    g = [torch.randn(n, device="cuda", generator=gen) for n in sizes]
    fixed = torch.from_numpy(consts("lamb", beta1=b1, beta2=b2, eps=eps, clip_norm=0.0,
                                    clip_lo=-np.inf, clip_hi=np.inf, always_adapt=0)).cuda()
    ours = cuda_library.prepare_named(
        "ms_optim_lamb", _stream(), param=p, m=m, v=v, grad=g,
        lr=torch.tensor([lr], device="cuda"), wd=torch.tensor([wd], device="cuda"),
        gscale=torch.tensor([1.0], device="cuda"),
        powers=torch.tensor([b1 ** step, b2 ** step], device="cuda"), consts=fixed,
        ratios=torch.zeros(len(sizes), device="cuda"))
    ib1, isb2 = 1 / (1 - b1 ** step), 1 / np.sqrt(1 - b2 ** step)

    def composed():
        for j in range(len(sizes)):
            m[j].mul_(b1).add_(g[j], alpha=1 - b1)
            v[j].mul_(b2).addcmul_(g[j], g[j], value=1 - b2)
            r = (m[j] * ib1) / (v[j].sqrt() * isb2 + eps) + wd * p[j]
            pn, rn = p[j].norm(), r.norm()
            ratio = torch.where((pn > 0) & (rn > 0), pn / rn, torch.ones_like(pn))
            p[j].sub_(lr * ratio * r)

    return {"ours_ms": timed(ours, repeat), "torch_ms": timed(composed, repeat),
            "elements": int(sum(sizes)), "tensors": len(sizes)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_kernels",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=positive_int, default=20,
                        help="timed calls per figure (default: 20)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", action="store_true",
                        help="also print the select's kernels' times (5 calls)")
    args = parser.parse_args(argv)
    global torch, cuda_library, consts
    try:
        import torch
    except ImportError:
        parser.exit(1, "benchmarks.cuda_kernels needs PyTorch (pip install torch)\n")
    from benchmarks.common import cuda_harness
    cuda_library = cuda_harness.cuda_library
    consts = cuda_harness.consts
    if not torch.cuda.is_available() or not cuda_library.available():
        parser.exit(1, "benchmarks.cuda_kernels needs PyTorch with a CUDA device and ms_optim's "
                       "CUDA library (built where nvcc is found)\n")
    all_sizes = [int(np.prod(s)) for _, s in resnet50_shapes()]
    compressed = [n for n in all_sizes if n >= 16384]
    one = 25_557_032
    copy = copy_bandwidth(args.repeat)
    out = {"device": torch.cuda.get_device_name(), "library": cuda_library.device(),
           "copy_GBps": copy,
           "select_resnet50": dgc_select(compressed, args.repeat),
           "select_one_25M": dgc_select([one], args.repeat),
           "apply_resnet50_8_workers": dgc_apply(compressed, args.repeat),
           "lamb_resnet50": lamb(all_sizes, args.repeat),
           "update_pass_25M_ms": update_pass(one, args.repeat),
           "select_hard_25M": select_hard(one, args.repeat)}
    print(f"device: {out['device']}; copy {copy:.0f} GB/s (read + write)")
    print("| step | tensors | ours (ms) | floor (ms) | ours / floor | torch ops (ms) | "
          "torch / ours |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in ("select_resnet50", "select_one_25M", "apply_resnet50_8_workers",
                 "lamb_resnet50"):
        r = out[name]
        floor = FLOOR_BYTES[name](r) / copy / 1e6
        print(f"| {name} | {r.get('tensors', '-')} | {r['ours_ms']:.3f} | {floor:.3f} | "
              f"{r['ours_ms'] / floor:.2f}x | {r['torch_ms']:.3f} | "
              f"{r['torch_ms'] / r['ours_ms']:.1f}x |")
    r = out["select_one_25M"]
    print(f"select_one_25M: torch.topk of |v| alone {r['torch_topk_ms']:.3f} ms, "
          f"{r['torch_topk_ms'] / r['ours_ms']:.1f}x the select")
    for name in ("select_resnet50", "select_one_25M"):
        r = out[name]
        print(f"{name}: the residual update alone in torch {r['torch_update_alone_ms']:.3f} ms; "
              f"the select {r['ours_ms'] / r['torch_update_alone_ms']:.2f}x it")
    if out["update_pass_25M_ms"] is not None:
        ms = out["update_pass_25M_ms"]
        print(f"the residual update as one fused pass (CuPy), 25.6M: {ms:.3f} ms, "
              f"{20 * one / ms / 1e6:.0f} GB/s; the select "
              f"{out['select_one_25M']['ours_ms'] / ms:.2f}x it")
    hard = out["select_hard_25M"]
    print("| residuals restored before each call, 25.6M | k | ms | / typical |")
    print("| --- | --- | --- | --- |")
    for name, _ in HARD:
        print(f"| {name} | {hard[name]['k']} | {hard[name]['ms']:.3f} | "
              f"{hard[name]['ms'] / hard['typical']['ms']:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    if args.profile:
        for name, sizes in (("one tensor of 25M", [25_557_032]),
                            ("ResNet-50's compressed tensors", compressed)):
            print(f"select, {name}, 5 calls:\n{profile_select(sizes)}")


if __name__ == "__main__":
    main()
