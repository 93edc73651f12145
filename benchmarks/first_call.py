"""The first call of an optimizer's compiled step (compilation and one step), in a fresh
process, as every training run pays it before its first step.  The optimizer's
construction is timed apart (it allocates the state).

One optimizer of ``bench_optimizers.OPTIMIZERS`` or of ``WARMUP`` below, built on fresh
parameters of a layout (``benchmarks/layouts.py``), stepped by the bench's step cell
(gradients held in the graph, as ``nn.TrainOneStepCell`` holds them); prints the seconds of
``Cell.compile`` and of the first and second calls.  A process of its own per entry: in
the whole bench an entry's compilation depends on what compiled before it.

Run from the repository root, one process::

    python -m benchmarks.first_call --only "ms_optim.DGCMomentum[warmup5]" --size 1.4e6

or as the script of ``msrun``, with the repository root on PYTHONPATH
(``mindspore.communication.init()`` is called when msrun launched it, then the workers meet
in one AllReduce before the optimizer is built; rank 0 prints)::

    PYTHONPATH=$PWD msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 \\
        --master_port=8129 --join=True --log_dir=/tmp/first_call benchmarks/first_call.py \\
        --only "ms_optim.DGCMomentum[auto]" --size 1.4e6
"""
import argparse
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import ops

import ms_optim
from benchmarks.bench_optimizers import OPTIMIZERS, _Step, make_grads, make_params
from benchmarks.bench_optimizers import synchronize
from benchmarks.layouts import LAYOUTS, layout_sizes
from examples.common.cli import parameter_count

# Paddle's warm-up of five stages over 40 steps
WARMUP_SPARSITY = [0.75, 0.9375, 0.984375, 0.996, 0.999]
WARMUP = [
    ("ms_optim.DGCMomentum[warmup5]", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, rampup_step=40,
        sparsity=WARMUP_SPARSITY)),
    ("ms_optim.DGCMomentum[warmup5, bucket]", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, rampup_step=40,
        sparsity=WARMUP_SPARSITY, bucket_sparsity=0.9)),
    ("ms_optim.DGCMomentum[auto]", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, sparsity="auto")),
    ("ms_optim.DGCMomentum[auto, bucket]", lambda p: ms_optim.DGCMomentum(
        p, learning_rate=1e-3, momentum=0.9, rampup_begin_step=0, sparsity="auto",
        bucket_sparsity=0.9)),
]
ENTRIES = dict(OPTIMIZERS + WARMUP)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_call",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", required=True, choices=sorted(ENTRIES),
                        help="the optimizer entry")
    parser.add_argument("--size", type=parameter_count, default=1_400_000,
                        help="total float32 parameters (default 1.4e6)")
    parser.add_argument("--layout", choices=LAYOUTS, default="resnet50")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank = 0
    if "MS_ROLE" in os.environ:  # launched by msrun (its scheduler, too, runs this)
        from mindspore.communication import get_rank, init
        init()
        rank = get_rank()
        # the workers meet before anything is timed: a worker that starts later (msrun's
        # cluster set-up ends at different times) would otherwise make the other's first
        # call wait for it, and that wait is no optimizer's
        ops.AllReduce()(ms.Tensor(np.ones(1, np.float32))).asnumpy()
    sizes, described = layout_sizes(args.layout, args.size)
    params, grads = make_params(sizes, "p", args.seed), make_grads(sizes, args.seed)
    tic = time.perf_counter()
    optimizer = ENTRIES[args.only](params)
    construct_s = time.perf_counter() - tic
    step = _Step(optimizer, grads)
    tic = time.perf_counter()
    step.compile()
    compile_s = time.perf_counter() - tic
    tic = time.perf_counter()
    synchronize(step())
    first_s = time.perf_counter() - tic
    tic = time.perf_counter()
    synchronize(step())
    second_s = time.perf_counter() - tic
    if rank == 0:
        print(f"{args.only}, {described}, {sum(sizes):,} parameters: compile {compile_s:.2f} s, "
              f"first call {first_s:.2f} s, together {compile_s + first_s:.2f} s; second call "
              f"{second_s:.3f} s; the optimizer's construction {construct_s:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
