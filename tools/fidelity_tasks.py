"""The tasks of tools.fidelity: small trainings whose held-out loss compares moment storages.

Each task is a class whose ``run(seed, moment_dtype)`` trains one network with
``ms_optim.AdamOffload(params, learning_rate=lr, moment_dtype=moment_dtype)`` in
GRAPH_MODE and returns one held-out metric, lower is better.  The seed sets the
split, the initial weights and the batch order: for one seed every moment_dtype
starts from the same weights and sees the same batches, so only the storage of
the moments differs.  A run prints a progress line (task, seed, dtype, step or
epoch, elapsed time) at every quarter of its training and one at the end.

- **digits**: the MLP of examples/common/digits.py on scikit-learn's bundled
  digits (75/25 stratified split, standardized), lr 1e-3, batch 32, 20 epochs;
  held-out cross-entropy (the accuracy is printed too).
- **charlm**: a character-level LSTM (embedding 64, one LSTM layer of 256, a
  linear read-out; 0.4M parameters), lr 2e-3, batch 32 windows of 64
  characters, 300 steps, on a fixed list of the Python standard library's
  source files (the first 90% of the text for training, the last 10% held
  out); held-out cross-entropy in nats per character.
- **autoencoder**: a dense autoencoder of the digits images (pixels / 16, in
  [0, 1]; 64 -> 128 -> 16 -> 128 -> 64, ReLU between, linear output), MSE
  loss, lr 1e-3, batch 32, 400 steps, 75/25 split; held-out MSE.
- **convnet**: two 3x3 convolutions with BatchNorm and ReLU, a 2x2 max-pool and
  a linear read-out on the digits images (standardized, as 1x8x8), lr 1e-3,
  batch 32, 300 steps; held-out cross-entropy, BatchNorm in inference mode.
- **diabetes** (held out): scikit-learn's bundled diabetes regression (442
  samples, 10 features; features and target standardized with statistics of the
  75% training split), an MLP 10 -> 64 -> 64 -> 1 with ReLU, MSE loss, lr 1e-3,
  batch 32, 400 steps; held-out MSE in standardized target units.  It is set
  aside: tools.fidelity runs it only when asked, once, at the end, and reports
  it as held out, so that the bars are judged on a task nothing was tuned on.

Run one training from the repository root:

    python -m tools.fidelity_tasks convnet --seed 1 --dtype int8
"""
import argparse
import itertools
import os
import sys
import sysconfig
import time

import numpy as np

import mindspore as ms
from mindspore import nn

import ms_optim
from examples.common.cli import nonnegative_int, positive_int
from examples.common.digits import batches, load_data, make_net, set_weights

# MindSpore's oneDNN runs a small convnet's step about 50x slower with its AVX-512 code on some
# CPUs (docs/platform.md, "MindSpore's own convolutions on AVX-512 CPUs"); oneDNN reads the
# cap at its first convolution, so setting it here is in time
os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX2")

DTYPES = ("float32", "bfloat16", "int8")
# The standard library modules the charlm corpus is made of, in this order.
CORPUS_MODULES = ("argparse.py", "ast.py", "calendar.py", "collections/__init__.py",
                  "configparser.py", "csv.py", "dataclasses.py", "datetime.py", "decimal.py",
                  "difflib.py", "enum.py", "fractions.py", "functools.py", "gettext.py",
                  "heapq.py", "inspect.py", "ipaddress.py", "json/decoder.py",
                  "json/encoder.py", "logging/__init__.py", "pathlib.py", "pickle.py",
                  "pprint.py", "random.py", "shutil.py", "statistics.py", "string.py",
                  "subprocess.py", "tarfile.py", "textwrap.py", "threading.py", "typing.py",
                  "zipfile.py")


def use_cpu_graph_mode():
    """The context every task runs in."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")


# ----------------------------------------------------------------- helpers --

def snapshot(net):
    """Every parameter of `net` (BatchNorm statistics included) as {name: numpy array}."""
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


def endless_batches(n, batch_size, rng):
    """Index batches of successive shuffled epochs, without end."""
    while True:
        yield from batches(n, batch_size, rng)


def cross_entropy(logits, labels):
    """Mean cross-entropy (nats) of integer `labels` under `logits` (classes on the last axis)."""
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(log_p, labels[..., None].astype(np.int64), -1).mean())


def mean_squared_error(pred, target):
    """Mean squared error of `pred` against `target`."""
    return float(np.mean((pred.astype(np.float64) - target) ** 2))


def classification(net, x, labels):
    """Held-out cross-entropy of `net` on (x, labels), and its accuracy as a text."""
    logits = net(ms.Tensor(x)).asnumpy()
    accuracy = float((logits.argmax(axis=1) == labels).mean())
    return cross_entropy(logits, labels), f"  (accuracy {accuracy:.4f})"


# -------------------------------------------------------------------- base --

class Task:
    """One fidelity task.  A subclass sets the class attributes and defines ``load(seed)``
    (the data), ``make_net()``, ``loss_cell(net)``, ``units(data, rng)`` (the training: one
    list of input tuples per step or epoch) and ``evaluate(net, data)`` (the held-out
    metric and a text to print with it)."""
    name = None
    held_out = False     # set aside: run only when asked for, and reported as held out
    unit = "steps"       # what `length` counts: "steps" or "epochs"
    default_length = None
    lr = 1e-3
    batch = 32
    metric = None        # what run() returns, in words

    def __init__(self, length=None):
        self.length = self.default_length if length is None else length
        self._prepared = {}

    def describe(self):
        """The task's settings, for the results file."""
        return {"metric": self.metric, "held_out": self.held_out, self.unit: self.length,
                "learning_rate": self.lr, "batch": self.batch}

    def prepare(self, seed):
        """(data, initial weights) of `seed`, made once per seed."""
        if seed not in self._prepared:
            data = self.load(seed)
            ms.set_seed(seed)
            self._prepared[seed] = data, snapshot(self.make_net())
        return self._prepared[seed]

    def run(self, seed, moment_dtype):
        """Trains from the seed's initial weights with `moment_dtype` moments; the held-out
        metric (lower is better)."""
        data, init = self.prepare(seed)
        net = self.make_net()
        set_weights(net, init)
        optimizer = ms_optim.AdamOffload(net.trainable_params(), learning_rate=self.lr,
                                         moment_dtype=moment_dtype)
        step = nn.TrainOneStepCell(self.loss_cell(net), optimizer)
        step.set_train(True)
        rng = np.random.default_rng(seed)
        label = f"[{self.name}] seed {seed} moments {moment_dtype:8s}"
        every = max(1, self.length // 4)
        t0 = time.perf_counter()
        for done, unit in enumerate(itertools.islice(self.units(data, rng), self.length), 1):
            for inputs in unit:
                loss = step(*(ms.Tensor(a) for a in inputs))
            if done % every == 0 or done == self.length:
                print(f"{label} {self.unit[:-1]} {done:4d}/{self.length}  "
                      f"train loss {float(loss.asnumpy()):.4f}  "
                      f"elapsed {time.perf_counter() - t0:6.1f}s", flush=True)
        net.set_train(False)
        value, text = self.evaluate(net, data)
        print(f"{label} {self.metric} {value:.5f}{text}  "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)
        return value


class ArrayTask(Task):
    """A task on arrays (x_train, y_train, x_test, y_test): each step is one shuffled batch."""

    def units(self, data, rng):
        x, y = data[0], data[1]
        for idx in endless_batches(len(x), self.batch, rng):
            yield [(x[idx], y[idx])]


# ------------------------------------------------------------------- tasks --

class Digits(Task):
    name = "digits"
    unit = "epochs"
    default_length = 20
    metric = "held-out cross-entropy"

    def load(self, seed):
        return load_data(seed)

    def make_net(self):
        return make_net()

    def loss_cell(self, net):
        return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                     reduction="mean"))

    def units(self, data, rng):
        x, y = data[0], data[1]
        while True:
            yield [(x[idx], y[idx]) for idx in batches(len(x), self.batch, rng)]

    def evaluate(self, net, data):
        return classification(net, data[2], data[3])


class Autoencoder(ArrayTask):
    name = "autoencoder"
    default_length = 400
    metric = "held-out MSE"

    def load(self, seed):
        """Pixels / 16 as inputs and targets, split 75/25 (stratified) by `seed`."""
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        x_train, x_test = train_test_split((x / 16.0).astype(np.float32), test_size=0.25,
                                           stratify=y, random_state=seed)
        return x_train, x_train, x_test, x_test

    def make_net(self):
        return nn.SequentialCell([
            nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 16), nn.ReLU(),
            nn.Dense(16, 128), nn.ReLU(), nn.Dense(128, 64),
        ])

    def loss_cell(self, net):
        return nn.WithLossCell(net, nn.MSELoss())

    def evaluate(self, net, data):
        return mean_squared_error(net(ms.Tensor(data[2])).asnumpy(), data[3]), ""


class ConvNet(ArrayTask):
    name = "convnet"
    default_length = 300
    metric = "held-out cross-entropy"

    def load(self, seed):
        x_train, y_train, x_test, y_test = load_data(seed)
        return x_train.reshape(-1, 1, 8, 8), y_train, x_test.reshape(-1, 1, 8, 8), y_test

    def make_net(self):
        return nn.SequentialCell([
            nn.Conv2d(1, 16, 3, pad_mode="same"), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, pad_mode="same"), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2), nn.Flatten(), nn.Dense(32 * 4 * 4, 10),
        ])

    def loss_cell(self, net):
        return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                     reduction="mean"))

    def evaluate(self, net, data):
        return classification(net, data[2], data[3])


class Diabetes(ArrayTask):
    name = "diabetes"
    held_out = True
    default_length = 400
    metric = "held-out MSE (standardized target)"

    def load(self, seed):
        from sklearn.datasets import load_diabetes
        from sklearn.model_selection import train_test_split

        x, y = load_diabetes(return_X_y=True)
        x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25,
                                                            random_state=seed)
        x_mean, x_std = x_train.mean(axis=0), x_train.std(axis=0)
        y_mean, y_std = y_train.mean(), y_train.std()
        return tuple(a.astype(np.float32) for a in (
            (x_train - x_mean) / x_std, ((y_train - y_mean) / y_std)[:, None],
            (x_test - x_mean) / x_std, ((y_test - y_mean) / y_std)[:, None]))

    def make_net(self):
        return nn.SequentialCell([
            nn.Dense(10, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 1),
        ])

    def loss_cell(self, net):
        return nn.WithLossCell(net, nn.MSELoss())

    def evaluate(self, net, data):
        return mean_squared_error(net(ms.Tensor(data[2])).asnumpy(), data[3]), ""


class CharLM(nn.Cell):
    """Embedding, one LSTM layer and a linear read-out over bytes."""

    def __init__(self, vocab=256, embed=64, hidden=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Dense(hidden, vocab)

    def construct(self, x):
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


class SeqLoss(nn.Cell):
    """Mean cross-entropy of the next characters."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.ce = nn.CrossEntropyLoss()

    def construct(self, x, y):
        logits = self.net(x)
        return self.ce(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


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
        raise SystemExit(f"tools.fidelity_tasks: no standard library sources found under {root}")
    return np.frombuffer(b"\n".join(parts), np.uint8), used


def windows(text, starts, seq):
    """(inputs, next characters) of the windows of `seq` characters at `starts`."""
    win = text[starts[:, None] + np.arange(seq + 1)[None, :]].astype(np.int32)
    return win[:, :-1], win[:, 1:]


class CharLMTask(Task):
    name = "charlm"
    default_length = 300
    lr = 2e-3
    seq = 64
    heldout_batches = 16
    metric = "held-out cross-entropy (nats/char)"

    def __init__(self, length=None):
        super().__init__(length)
        self.text, self.modules = load_corpus()
        self.cut = int(len(self.text) * 0.9)

    def describe(self):
        return {**super().describe(), "window": self.seq, "corpus_modules": self.modules,
                "corpus_bytes": len(self.text), "train_bytes": self.cut}

    def load(self, seed):
        """The training text, and fixed, evenly spaced held-out windows (the same for every
        seed: the seed sets the initial weights and the training windows)."""
        held = self.text[self.cut:]
        count = self.heldout_batches * self.batch
        starts = np.linspace(0, len(held) - self.seq - 2, count).astype(np.int64)
        return self.text[:self.cut], windows(held, starts, self.seq)

    def make_net(self):
        return CharLM()

    def loss_cell(self, net):
        return SeqLoss(net)

    def units(self, data, rng):
        train = data[0]
        while True:
            starts = rng.integers(0, len(train) - self.seq - 1, size=self.batch)
            yield [windows(train, starts, self.seq)]

    def evaluate(self, net, data):
        x, y = data[1]
        losses = [cross_entropy(net(ms.Tensor(x[i:i + self.batch])).asnumpy(),
                                y[i:i + self.batch]) for i in range(0, len(x), self.batch)]
        return float(np.mean(losses)), ""


# Every task by name, the held-out ones last.
TASKS = {task.name: task for task in (Digits, CharLMTask, Autoencoder, ConvNet, Diabetes)}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.fidelity_tasks",
                                 description="Trains one fidelity task once and prints its "
                                             "held-out metric (lower is better).")
    ap.add_argument("task", choices=list(TASKS), help="the task")
    ap.add_argument("--seed", type=nonnegative_int, default=0,
                    help="sets the split, the initial weights and the batch order (default 0)")
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="moment_dtype of AdamOffload (default float32)")
    ap.add_argument("--length", type=positive_int,
                    help="training steps (epochs for digits); default: the task's own")
    args = ap.parse_args(argv)
    use_cpu_graph_mode()
    TASKS[args.task](args.length).run(args.seed, args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
