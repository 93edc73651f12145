"""Step time of other CPU Lion implementations, for comparison with ``ms_optim.Lion``.

None of them is a dependency of ms_optim: run this in a separate environment that has
the ones to time (no MindSpore needed), from the repository root:

    python3 -m venv /tmp/lion && /tmp/lion/bin/pip install torch lion-pytorch timm jax optax
    OMP_NUM_THREADS=2 /tmp/lion/bin/python -m benchmarks.bench_other_lion --size 2.5e7

It steps ResNet-50's 161 float32 tensors (benchmarks/layouts.py, scaled to --size; or
another --layout) with fixed random gradients, weight decay --weight-decay (0.1 by default;
0 is the setting of bench_optimizers' ms_optim.Lion), and prints each implementation's
median step time:

  lion-pytorch   lucidrains' Lion (the paper authors' reference rule in torch ops);
  timm           timm.optim.Lion, with its foreach path (one op over every tensor);
  torch.compile  the same rule over every tensor as one function compiled by inductor
                 (a fused C++/OpenMP loop per tensor);
  optax          optax.lion, its update and apply jit-compiled by XLA into one program,
                 the parameters and state donated (updated in place).

Those not installed are skipped.  Compare with ``ms_optim.Lion`` of
``python -m benchmarks.bench_optimizers --layouts resnet50 --sizes 2.5e7`` on the same machine.
--only keeps the implementations whose name contains one of its words.
"""
import argparse
import statistics
import time

import numpy as np

from benchmarks.layouts import LAYOUTS, layout_sizes


def _median_ms(step, steps, warmup=3):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _torch(sizes, steps, make):
    import torch

    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in sizes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-2
    opt = make(params)
    with torch.no_grad():
        return _median_ms(opt.step, steps)


def lion_pytorch(sizes, steps, wd):
    from lion_pytorch import Lion
    return _torch(sizes, steps, lambda p: Lion(p, lr=1e-4, weight_decay=wd))


def timm_lion(sizes, steps, wd):
    from timm.optim import Lion
    return _torch(sizes, steps, lambda p: Lion(p, lr=1e-4, weight_decay=wd, foreach=True))


class CompiledLion:
    """Lion's step over every tensor as one function compiled by torch.compile (inductor
    generates one fused C++/OpenMP loop per tensor: each element read and written once)."""

    def __init__(self, params, lr=1e-4, beta1=0.9, beta2=0.99, weight_decay=0.1):
        import torch

        self.params = params
        self.moments = [torch.zeros_like(p) for p in params]

        def step(ps, ms, gs):
            for p, m, g in zip(ps, ms, gs):
                c = m * beta1 + g * (1 - beta1)
                p.mul_(1 - lr * weight_decay).add_(torch.sign(c), alpha=-lr)
                m.mul_(beta2).add_(g, alpha=1 - beta2)

        self._step = torch.compile(step)

    def step(self):
        self._step(self.params, self.moments, [p.grad for p in self.params])


def torch_compiled_lion(sizes, steps, wd):
    return _torch(sizes, steps, lambda p: CompiledLion(p, weight_decay=wd))


def optax_lion(sizes, steps, wd):
    import jax
    import optax

    rng = np.random.default_rng(0)
    params = [jax.numpy.asarray(rng.standard_normal(n, np.float32)) for n in sizes]
    grads = [jax.numpy.asarray(rng.standard_normal(n, np.float32) * 1e-2) for n in sizes]
    opt = optax.lion(1e-4, weight_decay=wd)
    state = [params, opt.init(params)]

    def update(params, opt_state, grads):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    update = jax.jit(update, donate_argnums=(0, 1))

    def step():
        state[0], state[1] = update(state[0], state[1], grads)
        jax.block_until_ready(state[0])

    return _median_ms(step, steps)


IMPLEMENTATIONS = [("lion-pytorch", lion_pytorch), ("timm Lion (foreach)", timm_lion),
                   ("torch.compile'd Lion", torch_compiled_lion), ("optax.lion (jit)", optax_lion)]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_other_lion",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=2.5e7, help="total parameters (about)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps (median reported)")
    ap.add_argument("--layout", choices=LAYOUTS, default="resnet50",
                    help="how the parameters are cut into tensors (benchmarks/layouts.py)")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="Lion's weight decay")
    ap.add_argument("--only", nargs="+", default=None, metavar="WORD",
                    help="implementations whose name contains one of these")
    args = ap.parse_args(argv)
    if args.size < 1 or args.steps < 1:
        ap.error("--size and --steps must be positive")
    if not args.weight_decay >= 0:
        ap.error(f"--weight-decay must be at least 0, got {args.weight_decay}")
    sizes, described = layout_sizes(args.layout, int(args.size))
    total = sum(sizes)
    print(f"{total:,} float32 parameters in {len(sizes)} tensors ({described}), "
          f"weight decay {args.weight_decay:g}")
    for name, run in IMPLEMENTATIONS:
        if args.only and not any(w in name for w in args.only):
            continue
        try:
            ms = run(sizes, args.steps, args.weight_decay)
        except ImportError as exc:
            print(f"  {name:22s} skipped ({exc})")
            continue
        print(f"  {name:22s} {ms:8.2f} ms/step  {ms * 1e6 / total:.3f} ns/param")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
