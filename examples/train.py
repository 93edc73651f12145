"""Train a small MLP on scikit-learn's digits dataset with several optimizers and compare them.

The end-to-end check that the optimizers really train a network: on the digits
task of examples/common/digits.py (the 1797 8x8 digit images bundled with
scikit-learn, no download, split 75/25 stratified and standardized with
statistics of the training split), a 64 -> 256 -> 128 -> 10 ReLU MLP is
trained with each optimizer of ``OPTIMIZERS`` below, in MindSpore GRAPH_MODE
on the CPU.  Every optimizer starts from the same initial weights and sees the
same sequence of shuffled mini-batches, so the comparison is fair.

Each epoch prints one line: train loss averaged over the batches, test accuracy,
the seconds of that epoch ("epoch 0.4s") and the seconds since that optimizer's
run started ("elapsed 3.2s"; both include the graph compilation of the first
epoch).  At the end a table is printed (accuracy differences in percentage
points against the first optimizer run, the baseline Momentum by default) and
written, with the curves, to the output folder:

    DIR/train_curves.png     train loss, test accuracy, and test accuracy of the second
                             half of the epochs on a zoomed scale
    DIR/train_results.json   per optimizer: hyper-parameters, per-epoch histories,
                             final numbers

Run from the repository root:

    python -m examples.train                    # all optimizers, results/ folder
    python -m examples.train --only Adam        # entries whose name contains "Adam"
    python -m examples.train --epochs 5 --out /tmp/run --seed 1

To compare another optimizer, append one ``OptimizerSpec`` to ``OPTIMIZERS``.
"""
import argparse
import inspect
import json
import os
import time
from collections import namedtuple

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

import ms_optim
from examples.common import digits
from examples.common.cli import nonnegative_int, positive_int

# scikit-learn (digits.load_data) and matplotlib (plot_curves) are imported where they are
# used, so that the options are checked without them.


class WarmupLinearDecay(LearningRateSchedule):
    """peak * min(1, (step + 1) / warmup) * max(0.05, 1 - step / total)."""

    def __init__(self, peak, warmup, total):
        super().__init__()
        self.peak, self.warmup, self.total = peak, float(warmup), float(total)

    def hparams(self):
        """The schedule as JSON-able settings (for the results file)."""
        return {"schedule": type(self).__name__, "peak": self.peak,
                "warmup_steps": int(self.warmup), "total_steps": int(self.total)}

    def construct(self, global_step):
        step = ms.ops.cast(global_step, ms.float32)
        ramp = ms.ops.minimum((step + 1.0) / self.warmup, 1.0)
        return self.peak * ramp * ms.ops.maximum(1.0 - step / self.total, 0.05)


def is_bias(param):
    """exclude_from_weight_decay_fn of "Lamb (batch 256)": no weight decay on biases."""
    return "bias" in param.name


# name: shown in logs and plots; optimizer: its class; settings: its keyword arguments
# (learning_rate included), written to the results file; batch_size; epochs.
# The first entry is the baseline of the final table.
OptimizerSpec = namedtuple("OptimizerSpec", "name optimizer settings batch_size epochs")

OPTIMIZERS = [
    OptimizerSpec("Momentum (baseline)", nn.Momentum,
                  dict(learning_rate=0.05, momentum=0.9), batch_size=32, epochs=20),
    OptimizerSpec("AdamOffload", ms_optim.AdamOffload,
                  dict(learning_rate=1e-3), batch_size=32, epochs=20),
    # Lion's steps are signs, each element moving by the whole rate: a peak 5x below Adam's
    # rate, decayed over the run (42 steps per epoch, 840 in all) as the Lion paper schedules
    # it, with the betas (0.95, 0.98) that the paper uses where its defaults train less stably
    OptimizerSpec("Lion", ms_optim.Lion,
                  dict(learning_rate=WarmupLinearDecay(2e-4, warmup=42, total=840),
                       beta1=0.95, beta2=0.98),
                  batch_size=32, epochs=20),
    OptimizerSpec("Lamb", ms_optim.Lamb, dict(learning_rate=0.005), batch_size=32, epochs=20),
    # LAMB's reason to exist: a batch 8x larger than the baseline's, the same number of
    # epochs (8x fewer steps: 1347 // 256 = 5 per epoch, 100 in all), with warm-up.
    OptimizerSpec("Lamb (batch 256)", ms_optim.Lamb,
                  dict(learning_rate=WarmupLinearDecay(0.03, warmup=10, total=100),
                       exclude_from_weight_decay_fn=is_bias),
                  batch_size=256, epochs=20),
    # The paper's warm-up: 75% ... 99.9% sparsity over 4 epochs (42 steps each) after 1 dense
    # epoch; the two large weight matrices send 0.1% of their entries from epoch 5 on.
    OptimizerSpec("DGCMomentum", ms_optim.DGCMomentum,
                  dict(learning_rate=0.05, momentum=0.9, rampup_begin_step=42,
                       rampup_step=168, sparsity=[0.75, 0.9375, 0.984375, 0.996, 0.999]),
                  batch_size=32, epochs=20),
]


def json_value(value):
    """A setting as JSON: numbers, text and lists as they are, a schedule as its hparams(),
    a function by its name, anything else as its repr()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "hparams"):
        return value.hparams()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if callable(value):
        return getattr(value, "__name__", repr(value))
    return repr(value)


def optimizer_settings(spec):
    """Every keyword argument of the optimizer's constructor: the spec's, and the defaults
    of the others."""
    defaults = {name: p.default
                for name, p in inspect.signature(spec.optimizer.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**defaults, **spec.settings}


def hyperparameters(spec, epochs):
    """What the results file records of a run: the optimizer, its settings (defaults
    included), batch, epochs."""
    settings = {key: json_value(value) for key, value in optimizer_settings(spec).items()}
    return {"optimizer": f"{spec.optimizer.__module__}.{spec.optimizer.__name__}",
            "lr": settings.get("learning_rate"), "batch_size": spec.batch_size,
            "epochs": epochs, "settings": settings}


def epoch_line(name, epoch, epochs, loss, acc, epoch_s, elapsed_s):
    """The progress line of one epoch: the epoch's own seconds and those since the run
    started, each labelled."""
    return (f"[{name}] epoch {epoch:3d}/{epochs}  loss {loss:.4f}  test acc {acc:.4f}  "
            f"epoch {epoch_s:5.1f}s  elapsed {elapsed_s:6.1f}s")


def train_one(spec, epochs, data, init_weights, seed):
    """Train a fresh net from `init_weights` with `spec`'s optimizer; the run's history."""
    x_train, y_train, x_test, y_test = data
    net = digits.make_net(init_weights)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = spec.optimizer(net.trainable_params(), **spec.settings)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    step.set_train(True)
    rng = np.random.default_rng(seed)  # same batch order for every optimizer

    history = {"train_loss": [], "test_acc": [], "elapsed_s": []}
    start = last = time.perf_counter()
    for epoch in range(1, epochs + 1):
        losses = [float(step(ms.Tensor(x_train[idx]), ms.Tensor(y_train[idx])).asnumpy())
                  for idx in digits.batches(len(x_train), spec.batch_size, rng)]
        acc = digits.evaluate(net, x_test, y_test)
        now = time.perf_counter()
        elapsed, epoch_s, last = now - start, now - last, now
        history["train_loss"].append(float(np.mean(losses)))
        history["test_acc"].append(acc)
        history["elapsed_s"].append(elapsed)
        print(epoch_line(spec.name, epoch, epochs, np.mean(losses), acc, epoch_s, elapsed),
              flush=True)
    return {
        "name": spec.name,
        "hyperparameters": hyperparameters(spec, epochs),
        "batch_size": spec.batch_size,
        "epochs": epochs,
        "final_test_acc": history["test_acc"][-1],
        "best_test_acc": max(history["test_acc"]),
        "train_time_s": history["elapsed_s"][-1],
        "history": history,
        # what a DGC worker sent on the last step, against dense fp32 gradients
        "exchange": (optimizer.exchange_stats(optimizer.global_step.asnumpy().item() - 1)
                     if hasattr(optimizer, "exchange_stats") else None),
    }


def baseline_label(name):
    """How the table names the baseline (the first optimizer run): "Momentum (baseline)"
    reads "baseline Momentum"."""
    return "baseline " + name.replace("(baseline)", "").strip()


def format_table(results):
    """Aligned plain-text table of the final numbers; accuracy differences are in
    percentage points against the first result, the baseline."""
    base = results[0]["final_test_acc"]
    header = ("optimizer", "batch", "epochs", "final acc",
              f"vs {baseline_label(results[0]['name'])} (points)", "best acc", "time (s)")
    rows = [(r["name"], str(r["batch_size"]), str(r["epochs"]), f"{r['final_test_acc']:.4f}",
             f"{100 * (r['final_test_acc'] - base):+.2f}", f"{r['best_test_acc']:.4f}",
             f"{r['train_time_s']:.1f}") for r in results]
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]

    def line(row):
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths)))
    rule = "-" * len(line(header))
    return "\n".join([line(header), rule] + [line(row) for row in rows])


def zoom_range(results, margin=0.005):
    """(low, high) of the zoomed accuracy panel: the range of the accuracies of the second
    half of every run's epochs, plus a margin."""
    accs = [r["history"]["test_acc"] for r in results]
    tails = [a for acc in accs for a in acc[len(acc) // 2:]]
    return max(0.0, min(tails) - margin), min(1.0, max(tails) + margin)


def plot_curves(results, path):
    """Train loss, test accuracy, and test accuracy zoomed on the final differences;
    one line per optimizer."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    fig, (ax_loss, ax_acc, ax_zoom) = plt.subplots(1, 3, figsize=(16, 4.5))
    for r in results:
        epochs = range(1, r["epochs"] + 1)
        ax_loss.plot(epochs, r["history"]["train_loss"], marker=".", label=r["name"])
        for ax in (ax_acc, ax_zoom):
            ax.plot(epochs, r["history"]["test_acc"], marker=".", label=r["name"])
    ax_loss.set(title="Train loss (mean over batches)", xlabel="epoch", ylabel="loss", yscale="log")
    ax_acc.set(title="Test accuracy", xlabel="epoch", ylabel="accuracy")
    last_epoch = max(r["epochs"] for r in results)
    ax_zoom.set(title="Test accuracy, second half, zoomed", xlabel="epoch", ylabel="accuracy",
                xlim=(last_epoch // 2 + 0.5, last_epoch + 0.5), ylim=zoom_range(results))
    for ax in (ax_acc, ax_zoom):
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=1))
    for ax in (ax_loss, ax_acc, ax_zoom):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    ax_loss.legend()
    fig.suptitle("MLP 64-256-128-10 on sklearn digits")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m examples.train",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=None,
                        help="epochs for every optimizer, >= 1 (default: each entry's own)")
    parser.add_argument("--only", default=None, metavar="NAME_SUBSTRING",
                        help="run only the optimizers whose name contains this (case-insensitive)")
    parser.add_argument("--out", default="results", metavar="DIR", help="output folder")
    parser.add_argument("--seed", type=nonnegative_int, default=0,
                        help="seed of data split, weights, batches (>= 0)")
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    args.specs = [s for s in OPTIMIZERS
                  if args.only is None or args.only.lower() in s.name.lower()]
    if not args.specs:
        parser.error(f"--only: no optimizer name contains {args.only!r}; "
                     f"have: {', '.join(s.name for s in OPTIMIZERS)}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        parser.error(f"--out: {args.out!r} exists and is not a folder")
    return args


def main(argv=None):
    args = parse_args(argv)
    specs = args.specs

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(args.seed)
    np.random.seed(args.seed)

    data = digits.load_data(args.seed)
    init_weights = {p.name: p.asnumpy() for p in digits.make_net().get_parameters()}
    print(f"digits: {len(data[0])} train / {len(data[2])} test samples; "
          f"MindSpore {ms.__version__}, GRAPH_MODE, CPU; seed {args.seed}", flush=True)

    wall = time.perf_counter()
    results = []
    for spec in specs:
        epochs = args.epochs if args.epochs is not None else spec.epochs
        results.append(train_one(spec, epochs, data, init_weights, args.seed))
    wall = time.perf_counter() - wall

    print()
    print(format_table(results))
    for r in results:
        ex = r["exchange"]
        if ex is not None:
            print(f"{r['name']}: last step sent {ex['elements']:,} of {ex['dense_elements']:,} "
                  f"gradient entries, {ex['bytes']:,} of {ex['dense_bytes']:,} bytes "
                  f"({ex['compression']:.0f}x less than dense fp32)")
    print(f"total wall time {wall:.1f}s")

    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, "train_curves.png")
    plot_curves(results, png)
    out_json = os.path.join(args.out, "train_results.json")
    with open(out_json, "w") as f:
        json.dump({"seed": args.seed, "dataset": "sklearn digits", "mindspore": ms.__version__,
                   "wall_time_s": wall, "baseline": results[0]["name"], "results": results},
                  f, indent=2)
    print(f"curves:  {png}\nresults: {out_json}", flush=True)


if __name__ == "__main__":
    main()
