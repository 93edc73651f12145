"""Step time of bitsandbytes' CPU Adam8bit, for comparison with AdamOffload(moment_dtype="int8").

bitsandbytes is not a dependency of ms_optim: run this in a separate
environment that has torch and bitsandbytes (no MindSpore needed), from the
repository root:

    python3 -m venv /tmp/bnb && /tmp/bnb/bin/pip install torch bitsandbytes
    OMP_NUM_THREADS=2 /tmp/bnb/bin/python -m benchmarks.bench_bnb_adam8bit --size 2.5e7

It steps --tensors equal float32 tensors (25M parameters in 4 by default, the
bench's "equal4" layout) with random gradients and prints the median step
time and ns per parameter.  Compare with ``ms_optim.AdamOffload[int8]`` of
``python -m benchmarks.bench_optimizers --layouts equal4 --sizes 2.5e7`` on the
same machine.
"""
import argparse
import time


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_bnb_adam8bit",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=2.5e7, help="total parameters")
    ap.add_argument("--tensors", type=int, default=4, help="equal tensors the size is split in")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    args = ap.parse_args(argv)
    if args.size < 1 or args.tensors < 1 or args.steps < 1:
        ap.error("--size, --tensors and --steps must be positive")
    import bitsandbytes as bnb
    import torch

    n = int(args.size) // args.tensors
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for _ in range(args.tensors)]
    grads = [torch.randn(n, generator=gen) * 1e-2 for _ in range(args.tensors)]
    opt = bnb.optim.Adam8bit(params, lr=1e-3)
    for p, g in zip(params, grads):
        p.grad = g
    opt.step()  # creates the state
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    total = n * args.tensors
    print(f"bitsandbytes {bnb.__version__} Adam8bit on CPU, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads: {total:,} parameters in {args.tensors} tensors, "
          f"median step {med * 1e3:.1f} ms = {med * 1e9 / total:.2f} ns/param")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
