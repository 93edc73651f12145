"""Does AdamOffload train as well with bfloat16 or int8 moments as with float32 ones?

Two real tasks, each trained once per ``moment_dtype`` from the same initial
weights on the same batches, so that only the moments' storage differs:

- **digits**: the MLP and data of examples/common/digits.py (scikit-learn's
  bundled digits, 75/25 split), AdamOffload lr 1e-3, batch 32, over 3 seeds
  (the seed sets the split, the initial weights and the batch order).
  Reported: final test accuracy per seed, and its difference from float32
  moments in points (target: within 0.3 points, averaged over the seeds).
- **charlm**: a character-level language model (embedding 64, one LSTM
  layer of 256, a linear read-out; 0.4M parameters; AdamOffload lr 2e-3,
  batch 32 windows of 64 characters) on the Python standard
  library's own source files, which every machine with Python has: a fixed,
  sorted list of modules, the first 90% of the text for training and the
  last 10% held out.  Reported: the held-out loss (nats per character) every
  --eval-every steps, and the final one's difference from float32 moments
  in percent (targets: bfloat16 within 1%, int8 within 2%, either way: a lower
  loss is a different training run too, not a faithful one).

Writes DIR/fidelity.json and DIR/fidelity.png (held-out loss curves, and
the digits accuracies).  Run from the repository root:

    python -m tools.fidelity                      # both tasks, results/
    python -m tools.fidelity --tasks charlm --steps 300
"""
import argparse
import json
import os
import sys
import sysconfig
import time

import numpy as np

import mindspore as ms
from mindspore import nn

import ms_optim
from examples.common.cli import positive_int
from examples.common.digits import batches, evaluate, load_data, make_net

DTYPES = ("float32", "bfloat16", "int8")
# The targets: digits in accuracy points (mean over seeds), charlm in percent of loss
DIGITS_BAR_POINTS = 0.3
CHARLM_BAR_PERCENT = {"bfloat16": 1.0, "int8": 2.0}
# The standard library modules the corpus is made of, in this order.
CORPUS_MODULES = ("argparse.py", "ast.py", "calendar.py", "collections/__init__.py",
                  "configparser.py", "csv.py", "dataclasses.py", "datetime.py", "decimal.py",
                  "difflib.py", "enum.py", "fractions.py", "functools.py", "gettext.py",
                  "heapq.py", "inspect.py", "ipaddress.py", "json/decoder.py",
                  "json/encoder.py", "logging/__init__.py", "pathlib.py", "pickle.py",
                  "pprint.py", "random.py", "shutil.py", "statistics.py", "string.py",
                  "subprocess.py", "tarfile.py", "textwrap.py", "threading.py", "typing.py",
                  "zipfile.py")


def adam(params, moment_dtype, lr):
    return ms_optim.AdamOffload(params, learning_rate=lr, moment_dtype=moment_dtype)


# ------------------------------------------------------------------ digits --

def run_digits(seeds, epochs, dtypes):
    out = {}
    for seed in seeds:
        data = load_data(seed)
        ms.set_seed(seed)
        init = {p.name: p.asnumpy().copy() for p in make_net().trainable_params()}
        for dtype in dtypes:
            x_train, y_train, x_test, y_test = data
            net = make_net(init)
            step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
                sparse=True, reduction="mean")), adam(net.trainable_params(), dtype, 1e-3))
            step.set_train(True)
            rng = np.random.default_rng(seed)
            t0 = time.perf_counter()
            for _ in range(epochs):
                for idx in batches(len(x_train), 32, rng):
                    step(ms.Tensor(x_train[idx]), ms.Tensor(y_train[idx]))
            acc = evaluate(net, x_test, y_test)
            out.setdefault(dtype, []).append(acc)
            print(f"[digits] seed {seed} moments {dtype:8s} test acc {acc:.4f}  "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
    return out


# ------------------------------------------------------------------ charlm --

def load_corpus():
    """The corpus as bytes (uint8), and which modules it holds."""
    root = sysconfig.get_paths()["stdlib"]
    parts, used = [], []
    for rel in CORPUS_MODULES:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                parts.append(fh.read())
            used.append(rel)
    if not parts:
        raise SystemExit(f"tools.fidelity: no standard library sources found under {root}")
    return np.frombuffer(b"\n".join(parts), np.uint8), used


class CharLM(nn.Cell):
    def __init__(self, vocab=256, embed=64, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Dense(hidden, vocab)

    def construct(self, x):
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


class SeqLoss(nn.Cell):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.ce = nn.CrossEntropyLoss()

    def construct(self, x, y):
        logits = self.net(x)
        return self.ce(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def charlm_batches(text, steps, batch, seq, seed):
    """`steps` batches of random windows (inputs, next characters), the same for every dtype."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(text) - seq - 1, size=(steps, batch))
    for s in starts:
        idx = s[:, None] + np.arange(seq + 1)[None, :]
        win = text[idx].astype(np.int32)
        yield win[:, :-1], win[:, 1:]


def heldout_windows(text, batch, seq, count):
    """Fixed, evenly spaced held-out windows."""
    starts = np.linspace(0, len(text) - seq - 2, count * batch).astype(np.int64)
    idx = starts[:, None] + np.arange(seq + 1)[None, :]
    win = text[idx].astype(np.int32)
    return [(win[i:i + batch, :-1], win[i:i + batch, 1:]) for i in range(0, len(win), batch)]


def run_charlm(steps, eval_every, dtypes, seed=0, batch=32, seq=64):
    text, used = load_corpus()
    cut = int(len(text) * 0.9)
    train_text, held_text = text[:cut], text[cut:]
    held = heldout_windows(held_text, batch, seq, count=16)
    print(f"[charlm] corpus: {len(used)} standard library modules, {len(text):,} bytes "
          f"({cut:,} train, {len(text) - cut:,} held out)", flush=True)
    ms.set_seed(seed)
    init = {p.name: p.asnumpy().copy() for p in CharLM().trainable_params()}
    curves = {}
    for dtype in dtypes:
        net = CharLM()
        ms.load_param_into_net(net, {k: ms.Parameter(ms.Tensor(v), k) for k, v in init.items()})
        loss_net = SeqLoss(net)
        step = nn.TrainOneStepCell(loss_net, adam(net.trainable_params(), dtype, 2e-3))
        step.set_train(True)
        curve = []
        t0 = time.perf_counter()
        for i, (x, y) in enumerate(charlm_batches(train_text, steps, batch, seq, seed), 1):
            loss = float(step(ms.Tensor(x), ms.Tensor(y)).asnumpy())
            if i % eval_every == 0 or i == steps:
                loss_net.set_train(False)
                h = float(np.mean([loss_net(ms.Tensor(a), ms.Tensor(b)).asnumpy()
                                   for a, b in held]))
                loss_net.set_train(True)
                curve.append((i, h))
                print(f"[charlm] moments {dtype:8s} step {i:5d}/{steps}  train loss {loss:.4f}  "
                      f"held-out loss {h:.4f}  elapsed {time.perf_counter() - t0:6.1f}s",
                      flush=True)
        curves[dtype] = curve
    return curves, used


# ------------------------------------------------------------------ report --

def summarize(digits, charlm):
    """Differences from float32 moments, and the bars judged."""
    summary = {}
    if digits:
        base = np.array(digits["float32"])
        for dtype, accs in digits.items():
            if dtype == "float32":
                continue
            diff = (np.array(accs) - base) * 100
            summary[f"digits {dtype}"] = {
                "points_vs_float32_per_seed": diff.tolist(), "mean_points": float(diff.mean()),
                "bar_points": DIGITS_BAR_POINTS,
                "met": bool(abs(diff.mean()) <= DIGITS_BAR_POINTS)}
    if charlm:
        base = charlm["float32"][-1][1]
        for dtype, curve in charlm.items():
            if dtype == "float32":
                continue
            pct = (curve[-1][1] - base) / base * 100
            summary[f"charlm {dtype}"] = {
                "final_heldout_loss": curve[-1][1], "float32_final_heldout_loss": base,
                "percent_vs_float32": pct, "bar_percent": CHARLM_BAR_PERCENT[dtype],
                "met": bool(abs(pct) <= CHARLM_BAR_PERCENT[dtype])}
    return summary


def plot(digits, charlm, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    if charlm:
        for dtype, curve in charlm.items():
            axes[0].plot([s for s, _ in curve], [h for _, h in curve], marker=".", label=dtype)
        axes[0].set_xlabel("step")
        axes[0].set_ylabel("held-out loss (nats/char)")
        axes[0].set_title("character-level LSTM on Python's standard library")
        axes[0].legend(title="moment_dtype")
    if digits:
        seeds = len(next(iter(digits.values())))
        width = 0.8 / len(digits)
        for j, (dtype, accs) in enumerate(digits.items()):
            axes[1].bar(np.arange(seeds) + j * width, np.array(accs) * 100, width, label=dtype)
        axes[1].set_xticks(np.arange(seeds) + width * (len(digits) - 1) / 2)
        axes[1].set_xticklabels([f"seed {s}" for s in range(seeds)])
        low = min(min(a) for a in digits.values()) * 100
        axes[1].set_ylim(low - 1.0, 100)
        axes[1].set_ylabel("test accuracy (%)")
        axes[1].set_title("digits MLP, final test accuracy")
        axes[1].legend(title="moment_dtype")
    fig.suptitle("ms_optim.AdamOffload: float32, bfloat16 and int8 moments")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.fidelity",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", choices=("digits", "charlm"),
                    default=["digits", "charlm"], help="which tasks to run (default: both)")
    ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES),
                    help="moment dtypes (float32 is always run: it is the baseline)")
    ap.add_argument("--seeds", type=positive_int, default=3, help="digits: seeds 0..N-1")
    ap.add_argument("--epochs", type=positive_int, default=20, help="digits: epochs")
    ap.add_argument("--steps", type=positive_int, default=600, help="charlm: training steps")
    ap.add_argument("--eval-every", type=positive_int, default=50,
                    help="charlm: steps between held-out evaluations")
    ap.add_argument("--out", default="results", help="output folder")
    args = ap.parse_args(argv)
    dtypes = ["float32"] + [d for d in args.dtypes if d != "float32"]
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")

    digits = run_digits(range(args.seeds), args.epochs, dtypes) if "digits" in args.tasks \
        else None
    charlm, used = run_charlm(args.steps, args.eval_every, dtypes) if "charlm" in args.tasks \
        else (None, None)
    summary = summarize(digits, charlm)
    print("\nAgainst float32 moments:")
    for key, s in summary.items():
        if key.startswith("digits"):
            print(f"  {key:16s} mean {s['mean_points']:+.2f} points over the seeds "
                  f"(per seed {', '.join(f'{d:+.2f}' for d in s['points_vs_float32_per_seed'])}); "
                  f"target within {s['bar_points']}: {'met' if s['met'] else 'not met'}")
        else:
            print(f"  {key:16s} held-out loss {s['final_heldout_loss']:.4f} vs "
                  f"{s['float32_final_heldout_loss']:.4f}: {s['percent_vs_float32']:+.2f}%; "
                  f"target within {s['bar_percent']}%: {'met' if s['met'] else 'not met'}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fidelity.json"), "w") as fh:
        json.dump({"digits": digits, "charlm": charlm, "corpus_modules": used,
                   "summary": summary, "settings": vars(args)}, fh, indent=2)
    try:
        plot(digits, charlm, os.path.join(args.out, "fidelity.png"))
        print(f"plot: {os.path.join(args.out, 'fidelity.png')}")
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[examples]')")
    print(f"results: {os.path.join(args.out, 'fidelity.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
