"""PyNative step time: ``optimizer(grads)`` of each ms_optim optimizer against MindSpore's own
optimizer of the same rule, in MindSpore's default mode, interleaved in one process.

The pairs: AdamOffload and Lamb against ``nn.Adam``, DGCMomentum against ``nn.Momentum``:
at sparsity 0.999 from the first step; during its warm-up (every parameter exchanged
dense); and at 0.999 after a warm-up of sparsities ("staged", a step with a branch to
choose), called from Python as the others, and compiled into a caller's ``ms.jit`` graph,
where the branch is chosen on the device (against ``nn.Momentum`` in ``ms.jit`` too).  Two layouts: the digits MLP of the main job
(``examples/common/digits.py``, 0.05M parameters) and an 8M-parameter MLP.  Each
optimizer steps `--warmup` times (the first step compiles), then the pairs take turns
for `--rounds` rounds of `--steps` steps; the figure is the median step.

    python -m benchmarks.pynative_step
"""
import argparse
import time

import numpy as np

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from examples.common.digits import make_net


def big_mlp():
    """An 8.4M-parameter MLP: 1024 -> 2048 -> 2048 -> 1024 -> 10."""
    return nn.SequentialCell(nn.Dense(1024, 2048), nn.ReLU(), nn.Dense(2048, 2048), nn.ReLU(),
                             nn.Dense(2048, 1024), nn.ReLU(), nn.Dense(1024, 10))


LAYOUTS = {"digits": make_net, "mlp8m": big_mlp}


def dgc(params, begin, sparsity=(0.999,), rampup_step=1):
    return ms_optim.DGCMomentum(params, learning_rate=0.01, momentum=0.9,
                                rampup_begin_step=begin, rampup_step=rampup_step,
                                sparsity=list(sparsity))


def staged(params):
    """A warm-up of two sparsities over the first two steps; the untimed steps pass it, so
    the timed ones are at 0.999, where the step has a branch to choose."""
    return dgc(params, 0, (0.99, 0.999), rampup_step=2)


class InJit(nn.Cell):
    """`optimizer(grads)` compiled into a caller's graph (as ms.jit or TrainOneStepCell in
    GRAPH_MODE compile it)."""

    def __init__(self, opt):
        super().__init__()
        self.opt = opt

    def __call__(self, grads):
        return super().__call__(ms.mutable(grads))  # the gradients as inputs, not constants

    @ms.jit
    def construct(self, grads):
        return self.opt(grads)


# (name, ours, MindSpore's): factories of params -> optimizer
PAIRS = [
    ("AdamOffload / nn.Adam", lambda p: ms_optim.AdamOffload(p, learning_rate=1e-3),
     lambda p: nn.Adam(p, learning_rate=1e-3)),
    ("Lamb / nn.Adam", lambda p: ms_optim.Lamb(p, learning_rate=1e-3),
     lambda p: nn.Adam(p, learning_rate=1e-3)),
    ("DGCMomentum / nn.Momentum", lambda p: dgc(p, 0),
     lambda p: nn.Momentum(p, learning_rate=0.01, momentum=0.9)),
    ("DGCMomentum warm-up / nn.Momentum", lambda p: dgc(p, 10 ** 9),
     lambda p: nn.Momentum(p, learning_rate=0.01, momentum=0.9)),
    ("DGCMomentum staged / nn.Momentum", staged,
     lambda p: nn.Momentum(p, learning_rate=0.01, momentum=0.9)),
    ("DGCMomentum staged, in ms.jit / same", lambda p: InJit(staged(p)),
     lambda p: InJit(nn.Momentum(p, learning_rate=0.01, momentum=0.9))),
]


def _setup(make_net_fn, make_opt, seed):
    ms.set_seed(seed)
    params = make_net_fn().trainable_params()
    rng = np.random.default_rng(seed)
    grads = tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32) * np.float32(1e-2))
                  for p in params)
    return make_opt(params), grads


def _time_steps(opt, grads, steps):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt(grads)
        times.append(time.perf_counter() - start)
    return times


def run(layouts, steps, rounds, warmup, only=None):
    """{(layout, pair name): (ours ms, MindSpore's ms)}, medians of steps * rounds steps."""
    results = {}
    for layout in layouts:
        for name, ours, theirs in PAIRS:
            if only and not any(s in name for s in only):
                continue
            a = _setup(LAYOUTS[layout], ours, 0)
            b = _setup(LAYOUTS[layout], theirs, 0)
            for opt, grads in (a, b):
                _time_steps(opt, grads, warmup)
            ta, tb = [], []
            for _ in range(rounds):
                ta += _time_steps(*a, steps)
                tb += _time_steps(*b, steps)
            results[layout, name] = (1e3 * float(np.median(ta)), 1e3 * float(np.median(tb)))
    return results


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pynative_step",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--steps", type=int, default=5, help="steps per turn")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each optimizer")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (>= 1)")
    parser.add_argument("--only", nargs="+", metavar="SUBSTR",
                        help="run only the pairs whose name contains one of these")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    print(f"{'layout':8s} {'pair':40s} {'ours ms':>9s} {'theirs ms':>9s} {'ratio':>6s}")
    for (layout, name), (ours, theirs) in run(args.layouts, args.steps, args.rounds,
                                              max(args.warmup, 1), args.only).items():
        print(f"{layout:8s} {name:40s} {ours:9.3f} {theirs:9.3f} {ours / theirs:6.2f}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
