"""Data-parallel digits training under msrun: DGCMomentum against dense Momentum.

Run by examples/msrun_train.sh, one msrun launch per optimizer, from the repository
root with the root on PYTHONPATH (msrun runs this file as a script):

    PYTHONPATH=$PWD msrun --worker_num=2 --local_worker_num=2 --master_addr=127.0.0.1 \\
          --master_port=8118 --log_dir=results/msrun/log_dgc --join=True \\
          examples/train_dist.py --opt dgc

Each worker trains the MLP of examples/common/digits.py on its shard of the training
split (rank r takes samples r, r + R, ...), batch 32 per worker:
- ``--opt dgc``: ms_optim.DGCMomentum in MindSpore's default STAND_ALONE mode;
  the optimizer exchanges the compressed gradients itself;
- ``--opt momentum``: nn.Momentum with DATA_PARALLEL (a dense gradient
  AllReduce inserted by MindSpore), the usual data-parallel baseline.
Rank 0 prints per-epoch progress and writes OUT/<opt>.json; every rank writes
a checksum of its final parameters so the replicas can be compared.

``python -m examples.train_dist --report OUT`` (no msrun) prints the
comparison table and saves OUT/msrun_loss.png.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import ParallelMode, nn
from mindspore.communication import get_group_size, get_rank, init

import ms_optim
from examples.common import digits
from examples.common.cli import nonnegative_int, positive_float, positive_int

WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]


def train(args):
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    rank, nranks = get_rank(), get_group_size()
    ms.set_seed(args.seed)
    x_train, y_train, x_test, y_test = digits.load_data(args.seed)
    x_train, y_train = x_train[rank::nranks], y_train[rank::nranks]
    net = digits.make_net()
    steps_per_epoch = len(x_train) // args.batch
    if args.opt == "dgc":
        opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9,
                                   rampup_begin_step=steps_per_epoch,
                                   rampup_step=4 * steps_per_epoch, sparsity=WARMUP,
                                   num_trainers=nranks)
    else:
        ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL,
                                     gradients_mean=True)
        opt = nn.Momentum(net.trainable_params(), learning_rate=args.lr, momentum=0.9)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
        sparse=True, reduction="mean")), opt)
    step.set_train()
    rng = np.random.default_rng(args.seed + rank)
    history = {"train_loss": [], "test_acc": []}
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        for b in range(steps_per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            losses.append(float(step(ms.Tensor(x_train[idx]), ms.Tensor(y_train[idx])).asnumpy()))
        acc = digits.evaluate(net, x_test, y_test)
        history["train_loss"].append(float(np.mean(losses)))
        history["test_acc"].append(acc)
        if rank == 0:
            print(f"[{args.opt} x{nranks}] epoch {epoch:3d}/{args.epochs}  loss "
                  f"{np.mean(losses):.4f}  test acc {acc:.4f}  "
                  f"elapsed {time.perf_counter() - start:6.1f}s",
                  flush=True)
    digest = hashlib.sha256(b"".join(p.asnumpy().tobytes() for p in net.trainable_params()))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.opt}.rank{rank}.sha256"), "w") as fh:
        fh.write(digest.hexdigest())
    if rank == 0:
        result = {"opt": args.opt, "workers": nranks, "batch_per_worker": args.batch,
                  "epochs": args.epochs, "lr": args.lr, "history": history,
                  "final_test_acc": history["test_acc"][-1],
                  "time_s": time.perf_counter() - start}
        if args.opt == "dgc":
            result["exchange"] = opt.exchange_stats(steps_per_epoch * args.epochs - 1)
            result["compressed"] = opt.compressed_params
        with open(os.path.join(args.out, f"{args.opt}.json"), "w") as fh:
            json.dump(result, fh, indent=2)


def report(out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = {}
    for opt in ("momentum", "dgc"):
        with open(os.path.join(out, f"{opt}.json")) as fh:
            runs[opt] = json.load(fh)
        ranks = sorted(f for f in os.listdir(out) if f.startswith(f"{opt}.rank"))
        digests = {open(os.path.join(out, f)).read() for f in ranks}
        runs[opt]["replicas_identical"] = len(digests) == 1 and len(ranks) == runs[opt]["workers"]
    base = runs["momentum"]["final_test_acc"]
    print(f"{'optimizer':28s} workers  final test acc  vs dense (points)  replicas identical")
    names = {"momentum": "Momentum, dense all-reduce", "dgc": "DGCMomentum"}
    for opt, r in runs.items():
        print(f"{names[opt]:28s} {r['workers']:7d}  {r['final_test_acc']:14.4f}  "
              f"{100 * (r['final_test_acc'] - base):+17.2f}  {r['replicas_identical']}")
    ex = runs["dgc"]["exchange"]
    print(f"DGC, last step: one worker sent {ex['bytes']:,} bytes ({ex['elements']:,} entries) "
          f"against {ex['dense_bytes']:,} dense fp32: {ex['compression']:.1f}x less; "
          f"compressed: {runs['dgc']['compressed']}")
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for opt, r in runs.items():
        epochs = range(1, len(r["history"]["train_loss"]) + 1)
        ax.plot(epochs, r["history"]["train_loss"], marker=".", label=names[opt])
    ax.set(yscale="log", xlabel="epoch", ylabel="train loss (rank 0's shard)",
           title=f"digits, {runs['dgc']['workers']} workers under msrun")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = os.path.join(out, "msrun_loss.png")
    fig.savefig(png, dpi=120)
    print(f"curves: {png}")
    ok = abs(runs["dgc"]["final_test_acc"] - base) <= 0.01 and all(
        r["replicas_identical"] for r in runs.values())
    return 0 if ok else 1


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m examples.train_dist",
        description=__doc__.split("\n\n")[0],
        epilog="Under msrun (one process per worker): --opt dgc|momentum [--epochs --batch --lr "
               "--seed --out]; afterwards, without msrun: --report OUT.")
    parser.add_argument("--opt", choices=["dgc", "momentum"],
                        help="train with DGCMomentum (dgc) or dense data-parallel Momentum "
                             "(momentum); run under msrun")
    parser.add_argument("--report", metavar="OUT",
                        help="no training: compare the two runs saved in OUT (a table and "
                             "OUT/msrun_loss.png); exits 1 if DGC is more than 1 point behind "
                             "or the replicas differ")
    parser.add_argument("--epochs", type=positive_int, default=20,
                        help="training epochs, >= 1 (default 20)")
    parser.add_argument("--batch", type=positive_int, default=32,
                        help="batch size per worker, >= 1 (default 32)")
    parser.add_argument("--lr", type=positive_float, default=0.05,
                        help="learning rate of both optimizers, > 0 (default 0.05)")
    parser.add_argument("--seed", type=nonnegative_int, default=0,
                        help="seed of the data split, weights and batch order, >= 0 (default 0)")
    parser.add_argument("--out", default="results/msrun", metavar="DIR",
                        help="folder for <opt>.json and the per-rank checksums "
                             "(default results/msrun)")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.report and args.opt:
        parser.error("--opt and --report do not go together: train first, then report")
    if not args.report and not args.opt:
        parser.error("--opt or --report is required")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        return report(args.report)
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
