"""One msrun worker of the link experiment: trains, times every step, counts its host's bytes.

Launched by tools/link_experiment.py (through tools/netlab.py), one msrun per host
inside that host's network namespace, with the repository root on PYTHONPATH (msrun
runs this file as a script):

    ip netns exec NS msrun --worker_num=N --local_worker_num=1 --node_rank=R \\
        --master_addr=<host 0's address> --master_port=P --log_dir=DIR/log.hostR --join=True \\
        /path/to/repo/tools/link_worker.py --run dgc-999 --dev IFACE --out DIR [--model big] ...

Every worker starts from the same initial weights (same seed) and trains on its
shard of the data (rank r takes samples r, r + N, ...); which samples form step
t's batch depends only on (seed, rank, t), so a run resumed at step t sees the
batches the uninterrupted run saw.  Per step it records the wall time of the
step (the call and the `.asnumpy()` of its loss, which waits for it) and the
growth of its interface's tx_bytes / rx_bytes; graph compilation is timed
apart, before the first step, and evaluation on the test split pauses the
training clock (with --eval-after, rank 0 keeps a copy of its parameters
instead and evaluates the copies once training ends).

Files in DIR: pid.rank<r> (written first: the orchestrator's handle for
SIGKILL), progress.rank<r> (one line per finished step: the number of steps
done), ckpt.rank<r>.step<t>.ckpt (with --ckpt-every) and, at the end,
result.rank<r>.json with everything, including a sha256 of the final
parameters (equal on every rank when the replicas agree).
"""
import argparse
import hashlib
import json
import os
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import ParallelMode, nn, ops
from mindspore.communication import get_group_size, get_rank, init

import ms_optim
from examples.common import digits

# MindSpore's oneDNN runs a small convnet's step about 50x slower with its AVX-512 code on some
# CPUs (docs/platform.md, "MindSpore's own convolutions on AVX-512 CPUs"); oneDNN reads the
# cap at its first convolution, so setting it here is in time
os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX2")

MOMENTUM = 0.9
WARMUP = [0.75, 0.9375, 0.984375, 0.996, 0.999]

# name -> optimizer ("Momentum": mindspore.nn.Momentum, "DGCMomentum": ms_optim.DGCMomentum)
# and its settings; every recipe gets the same --lr and momentum MOMENTUM.  data_parallel:
# MindSpore's DATA_PARALLEL mode (it all-reduces every gradient densely before the
# optimizer); float16_allreduce: the same dense mean of the gradients, all-reduced in
# float16 by Float16GradMean; otherwise the default STAND_ALONE mode, in which DGCMomentum
# exchanges the gradients itself.
RECIPES = {
    "dense": {"optimizer": "Momentum", "data_parallel": True},
    "dense-fp16": {"optimizer": "Momentum", "float16_allreduce": True},
    # the README's recipe: from the first step, the densest sparsity whose exchange takes at
    # most half the step's compute (ms_optim.dgc.choose_sparsity): 0.98 for the big MLP at
    # 1 Gbit/s, 0.9 for the convnet
    "dgc": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
            "sparsity": [0.98]},
    "dgc-90": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
               "sparsity": [0.9]},
    # the run measures its dense and sparse steps and picks the sparsity, or stays dense
    "dgc-auto": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "sparsity": "auto"},
    # the same with every compressible parameter compressed (no classifier sent dense)
    "dgc-auto-all": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "sparsity": "auto",
                     "dense_params": []},
    # fixed sparsities of SPARSITY_CHOICES not named above (the best in hindsight)
    "dgc-95": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
               "sparsity": [0.95]},
    "dgc-99": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
               "sparsity": [0.99]},
    "dgc-995": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                "sparsity": [0.995]},
    # the recipe with the classifier (the last weight) all-reduced dense
    "dgc-head": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                 "sparsity": [0.98], "dense_params": "classifier"},
    "dgc-99-head": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                    "sparsity": [0.99], "dense_params": "classifier"},
    "dgc-95-head": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                    "sparsity": [0.95], "dense_params": "classifier"},
    # the first and the last weight (the input layer and the classifier) all-reduced dense
    "dgc-ends": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                 "sparsity": [0.98], "dense_params": "ends"},
    "dgc-99-ends": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                    "sparsity": [0.99], "dense_params": "ends"},
    # denser first steps, then the recipe's 0.98
    "dgc-ramp15": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 15,
                   "sparsity": [0.75, 0.9375, 0.98]},
    "dgc-ramp30": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 30,
                   "sparsity": [0.75, 0.9375, 0.98]},
    "dgc-90-98": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 20,
                  "sparsity": [0.9, 0.98]},
    # a short warm-up: 0.99 for 10 steps, then 0.999 (fewer bytes, more steps)
    "dgc-99-999": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 20,
                   "sparsity": [0.99, 0.999]},
    "dgc-paddle": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 40,
                   "sparsity": WARMUP},
    "dgc-999": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                "sparsity": [0.999]},
    # the recipes above with learning-rate-scaled residuals (lr_in_residuals): an entry
    # that waits in a residual is applied at the rate of the step that produced it
    "dgc-lr": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
               "sparsity": [0.98], "lr_in_residuals": True},
    "dgc-90-lr": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                  "sparsity": [0.9], "lr_in_residuals": True},
    # the same with the exchanges of shared indices: every worker sends its values at every
    # worker's top k / N indices (union) or at one worker's top k (leader), so what a host
    # sends does not grow with the number of hosts
    "dgc-999-union": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                      "sparsity": [0.999], "exchange": "union"},
    "dgc-999-leader": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                       "sparsity": [0.999], "exchange": "leader"},
    # the parameters below 16384 elements compressed too, as one bucket at 0.9
    "dgc-90-bucket": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                      "sparsity": [0.9], "bucket_sparsity": 0.9},
    "dgc-bucket": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                   "sparsity": [0.98], "bucket_sparsity": 0.9},
    "dgc-999-bucket": {"optimizer": "DGCMomentum", "rampup_begin_step": 0, "rampup_step": 1,
                       "sparsity": [0.999], "bucket_sparsity": 0.9},
    # the bucket as sparse as the rest
    "dgc-999-bucket-999": {"optimizer": "DGCMomentum", "rampup_begin_step": 0,
                           "rampup_step": 1, "sparsity": [0.999], "bucket_sparsity": 0.999},
}


def make_optimizer(run, params, lr):
    """The optimizer of recipe `run`; switches to DATA_PARALLEL first when the recipe says so."""
    settings = dict(RECIPES[run])
    kind = settings.pop("optimizer")
    settings.pop("float16_allreduce", None)  # the train cell's gradient reducer (build)
    if settings.pop("data_parallel", False):
        ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL,
                                     gradients_mean=True)
    weights = [p for p in params if p.ndim > 1]
    if settings.get("dense_params") == "classifier":
        settings["dense_params"] = weights[-1:]
    elif settings.get("dense_params") == "ends":
        settings["dense_params"] = [weights[0], weights[-1]]
    cls = {"Momentum": nn.Momentum, "DGCMomentum": ms_optim.DGCMomentum}[kind]
    return cls(params, learning_rate=lr, momentum=MOMENTUM, **settings)


# name -> the MLP's layer widths, or "convnet" (DigitsConvNet)
MODELS = {
    "big": [64, 4096, 4096, 10],   # 17.1M parameters
    "small": [64, 256, 128, 10],   # the digits MLP: 16384 and 32768 weights, both compressed
    "convnet": "convnet",          # 0.6M parameters, BatchNorm
}


# ------------------------------------------------------------------- data --

def synthetic_data(seed, n_train=1347, n_test=450, features=64, classes=10):
    """A deterministic classification set with digits' sizes, made with numpy only
    (CI installs no scikit-learn): Gaussian clusters around random class centres."""
    rng = np.random.default_rng([seed, 1234])
    centres = rng.standard_normal((classes, features)).astype(np.float32)
    y = rng.integers(0, classes, n_train + n_test).astype(np.int32)
    x = (centres[y] + 2.0 * rng.standard_normal((len(y), features))).astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def load(data, seed):
    """(x_train, y_train, x_test, y_test) of `data`."""
    if data == "digits":
        return digits.load_data(seed)  # the split and standardization need scikit-learn
    return synthetic_data(seed)


def batch_indices(seed, rank, step, n, batch):
    """Indices into this rank's shard for `step`: epoch-wise shuffles drawn from
    (seed, rank, epoch) alone, so any step's batch can be recomputed on resume."""
    per_epoch = n // batch
    epoch, b = divmod(step, per_epoch)
    order = np.random.default_rng([seed, rank, epoch]).permutation(n)
    return order[b * batch:(b + 1) * batch]


# ------------------------------------------------------------------ model --

def mlp(widths):
    """Dense layers of the given widths with ReLU between them."""
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Dense(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.SequentialCell(layers)


class DigitsConvNet(nn.Cell):
    """A convolutional net with BatchNorm on the 8x8 digits: two 3x3 convolutions of 64
    and 128 channels, each followed by BatchNorm and ReLU, 2x2 max pooling, then dense
    layers 2048-256-10 (0.6M parameters; the second convolution's 73728 weights and the
    first dense layer's 524288 are compressed).  Each worker's BatchNorm statistics are
    its own, as in MindSpore's data parallelism without SyncBatchNorm."""

    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(1, 64, 3, pad_mode="same"), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, pad_mode="same"), nn.BatchNorm2d(128), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2, stride=2)])
        self.head = mlp([2048, 256, 10])

    def construct(self, x):
        x = x.reshape(-1, 1, 8, 8)
        return self.head(self.features(x).reshape(x.shape[0], -1))


def model(name):
    """The net of --model `name`."""
    spec = MODELS[name]
    return DigitsConvNet() if spec == "convnet" else mlp(spec)


def kept_parameters(net):
    """Copies of every parameter of `net`, BatchNorm's moving statistics included
    (--eval-after keeps them at each evaluation)."""
    return [np.array(p.asnumpy()) for p in net.get_parameters()]


def restore_parameters(net, values):
    """Sets every parameter of `net` to `values` (``kept_parameters``'s order)."""
    params = list(net.get_parameters())
    if len(params) != len(values):
        raise ValueError(f"{len(values)} values for {len(params)} parameters")
    for p, value in zip(params, values):
        p.set_data(ms.Tensor(value))


def digest(net):
    """sha256 of the trainable parameters' bytes: equal on every rank iff the replicas are."""
    h = hashlib.sha256()
    for p in net.trainable_params():
        h.update(p.asnumpy().tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------ probes --

COUNTERS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")


def read_counters(dev):
    """COUNTERS of interface `dev` as seen from this process's network namespace."""
    values = []
    for name in COUNTERS:
        with open(f"/sys/class/net/{dev}/statistics/{name}") as fh:
            values.append(int(fh.read()))
    return values


def barrier():
    """Waits until every worker gets here: an AllReduce of one number in a graph of its own
    (MindSpore 2.10 has no Barrier on CPU).  Called right before the timed loop, so that no
    worker's first step times its peer's compile or first eval."""
    class AllReduceOne(nn.Cell):
        def __init__(self):
            super().__init__()
            self.all_reduce = ops.AllReduce()

        def construct(self, x):
            return self.all_reduce(x)

    AllReduceOne()(ms.Tensor(np.ones(1, np.float32))).asnumpy()


def timed_step(cell, x, y, dev):
    """One training step: (seconds, loss, growth of each of COUNTERS).  The `.asnumpy()`
    of the loss waits for the step, so the time covers all of it, exchange included."""
    before = read_counters(dev)
    tic = time.perf_counter()
    loss = float(cell(x, y).asnumpy())
    seconds = time.perf_counter() - tic
    after = read_counters(dev)
    return seconds, loss, [b - a for a, b in zip(before, after)]


# ---------------------------------------------------------------- training --

class Float16GradMean(nn.Cell):
    """Dense data parallelism's gradient mean with half the bytes on the wire: the gradients
    divided by the number of workers in float32, cast to float16, concatenated into one
    buffer, all-reduced (summed in float16) and cast back (the scheme of PyTorch DDP's
    fp16 compression hook).  MindSpore's DATA_PARALLEL reducer sends float32 gradients, and
    AMP keeps float32 parameters, so their gradients too."""

    def __init__(self, params, nranks):
        super().__init__()
        self.shapes = tuple(p.shape for p in params)
        sizes = [int(np.prod(s)) for s in self.shapes]
        self.bounds = tuple((sum(sizes[:j]), sum(sizes[:j + 1])) for j in range(len(sizes)))
        self.all_reduce = ops.AllReduce()
        self.inv_nranks = ms.Tensor(1.0 / nranks, ms.float32)

    def construct(self, grads):
        flat = ()
        for g in grads:
            flat = flat + (ops.cast(g * self.inv_nranks, ms.float16).reshape(-1),)
        total = ops.cast(self.all_reduce(ops.concat(flat)), ms.float32)
        out = ()
        for j in range(len(self.shapes)):
            lo, hi = self.bounds[j]
            out = out + (total[lo:hi].reshape(self.shapes[j]),)
        return out


def build(args):
    """(net, optimizer, train cell) of `args`, identical initial weights on every rank."""
    ms.set_seed(args.seed)
    net = model(args.model)
    # cosine: lr (1 + cos(pi t / steps)) / 2, from --lr at step 0 to 0 at --steps; a function
    # of the global step alone, so a resumed run continues the same curve
    lr = args.lr if args.lr_schedule == "constant" else nn.CosineDecayLR(0.0, args.lr, args.steps)
    opt = make_optimizer(args.run, net.trainable_params(), lr)
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
        sparse=True, reduction="mean")), opt)
    if RECIPES[args.run].get("float16_allreduce"):
        cell.grad_reducer = Float16GradMean(net.trainable_params(), get_group_size())
    cell.set_train()
    return net, opt, cell


def ckpt_path(out, rank, step):
    return os.path.join(out, f"ckpt.rank{rank}.step{step}.ckpt")


def resume(cell, out, rank, step):
    """Loads this rank's checkpoint taken before `step` into the train cell."""
    not_loaded, _ = ms.load_param_into_net(cell, ms.load_checkpoint(ckpt_path(out, rank, step)))
    if not_loaded:
        raise RuntimeError(f"checkpoint of step {step} did not set: {not_loaded}")


def setup(args):
    """Communication, this rank's data shard and the model: (rank, nranks, data, net, opt,
    cell), the cell restored from the --resume checkpoint if asked."""
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    rank, nranks = get_rank(), get_group_size()
    with open(os.path.join(args.out, f"pid.rank{rank}"), "w") as fh:
        fh.write(str(os.getpid()))
    x_train, y_train, x_test, y_test = load(args.data, args.seed)
    x_train, y_train = x_train[rank::nranks], y_train[rank::nranks]
    if len(x_train) < args.batch:
        raise SystemExit(f"--batch {args.batch} exceeds the shard's {len(x_train)} samples")
    net, opt, cell = build(args)
    if args.resume:
        resume(cell, args.out, rank, args.resume)
    return rank, nranks, (x_train, y_train, x_test, y_test), net, opt, cell


def train(args):
    """The timed training loop; writes DIR/result.rank<r>.json."""
    rank, nranks, (x_train, y_train, x_test, y_test), net, opt, cell = setup(args)
    start = args.resume or 0

    def batch(t):
        idx = batch_indices(args.seed, rank, t, len(x_train), args.batch)
        return ms.Tensor(x_train[idx]), ms.Tensor(y_train[idx])

    tic = time.perf_counter()
    cell.compile(*batch(start))  # builds the graph without running a step
    compile_s = time.perf_counter() - tic
    log = {key: [] for key in ("step", "time_s", "loss", "stage") + COUNTERS}
    evals, exchange = [], []
    clock, losses = 0.0, []
    snapshots = []  # --eval-after: rank 0's kept parameters, evaluated once training ends

    def record(t, seconds, loss, acc):
        evals.append({"step": t, "train_time_s": seconds, "test_acc": acc, "train_loss": loss})
        if rank == 0:
            print(f"[{args.run}] step {t:5d}/{args.steps}  train {seconds:8.2f}s  test acc "
                  f"{acc:.4f}  loss {loss if loss is None else round(loss, 4)}", flush=True)

    def evaluate(t):
        """Test accuracy after t steps, with the mean train loss since the previous eval
        (with --eval-after: the parameters kept for it, on rank 0)."""
        loss = float(np.mean(losses)) if losses else None
        losses.clear()
        if not args.eval_after:
            record(t, clock, loss, digits.evaluate(net, x_test, y_test))
        elif rank == 0:
            snapshots.append((t, clock, loss, kept_parameters(net)))

    def evaluate_kept():
        """--eval-after: the kept parameters' accuracies, in order; the net's parameters
        are the last step's again afterwards (rank 0's last snapshot is them)."""
        for t, seconds, loss, values in snapshots:
            restore_parameters(net, values)
            record(t, seconds, loss, digits.evaluate(net, x_test, y_test))
        if not snapshots:  # the other ranks: the final accuracy
            record(args.steps, clock, None, digits.evaluate(net, x_test, y_test))

    evaluate(start)
    barrier()
    with open(os.path.join(args.out, f"progress.rank{rank}"), "w") as progress:
        for t in range(start, args.steps):
            if args.ckpt_every and t % args.ckpt_every == 0 and t > start:
                ms.save_checkpoint(cell, ckpt_path(args.out, rank, t))
            stage = opt.stage(t) if hasattr(opt, "stage") else None  # DGC's warm-up stage
            if hasattr(opt, "exchange_stats") and stage not in {e["stage"] for e in exchange}:
                exchange.append(opt.exchange_stats(t))
            seconds, loss, counted = timed_step(cell, *batch(t), args.dev)
            clock += seconds
            losses.append(loss)
            for key, value in zip(log, [t, seconds, loss, stage] + counted):
                log[key].append(value)
            progress.write(f"{t + 1}\n")
            progress.flush()
            if (t + 1) % args.eval_every == 0 or t + 1 == args.steps:
                evaluate(t + 1)
    if args.eval_after:
        evaluate_kept()
    result = {
        "rank": rank, "workers": nranks, "run": args.run, "model": args.model,
        "widths": MODELS[args.model], "data": args.data, "batch": args.batch, "lr": args.lr,
        "lr_schedule": args.lr_schedule,
        "seed": args.seed, "dev": args.dev, "start_step": start, "steps": args.steps,
        "params": int(sum(p.size for p in net.trainable_params())),
        "compile_s": compile_s, "train_time_s": clock, "steps_log": log, "evals": evals,
        "final_test_acc": evals[-1]["test_acc"], "exchange_stats": exchange,
        "compressed_params": getattr(opt, "compressed_params", None),
        "sparsity": list(opt.sparsity) if hasattr(opt, "sparsity") else None,
        "sha256": digest(net),
    }
    with open(os.path.join(args.out, f"result.rank{rank}.json"), "w") as fh:
        json.dump(result, fh)
    return 0


# -------------------------------------------------------------------- CLI --

def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text):
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def add_model_arguments(parser):
    """--model and --data, shared with tools/link_experiment.py (which passes them on)."""
    parser.add_argument("--model", default="big", choices=sorted(MODELS),
                        help="big: MLP 64-4096-4096-10 (17.1M parameters); small: 64-256-128-10; "
                             "convnet: convolutions with BatchNorm (DigitsConvNet)")
    parser.add_argument("--data", default="digits", choices=["digits", "synthetic"],
                        help="digits: scikit-learn's digits (examples/common/digits.py); "
                             "synthetic: numpy-made clusters of the same sizes (no scikit-learn)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.link_worker",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, choices=sorted(RECIPES),
                        help="optimizer recipe (RECIPES in this file)")
    add_model_arguments(parser)
    parser.add_argument("--steps", type=_positive, default=200, help="train until this step")
    parser.add_argument("--batch", type=_positive, default=32, help="batch size per worker")
    parser.add_argument("--lr-schedule", default="cosine", choices=["cosine", "constant"],
                        help="cosine: from --lr down to 0 at --steps; constant: --lr throughout")
    parser.add_argument("--lr", type=_positive_float, default=0.05,
                        help="learning rate (the same for every recipe)")
    parser.add_argument("--eval-every", type=_positive, default=10,
                        help="evaluate on the test split every this many steps (and at the end)")
    parser.add_argument("--eval-after", action="store_true",
                        help="keep rank 0's parameters at each evaluation (a copy each, held in "
                             "memory) and evaluate them once training ends, so that nothing but "
                             "training and the copy runs between steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, data and batch order")
    parser.add_argument("--dev", required=True,
                        help="this host's link interface, whose tx/rx bytes are counted")
    parser.add_argument("--out", required=True, help="folder shared by the workers for their files")
    parser.add_argument("--ckpt-every", type=_non_negative, default=0,
                        help="save each rank's train cell before every step t with t %% K == 0 "
                             "(0: never)")
    parser.add_argument("--resume", type=_positive, default=None, metavar="STEP",
                        help="load each rank's checkpoint of step STEP and go on from there")
    args = parser.parse_args(argv)
    if args.resume is not None and args.resume >= args.steps:
        parser.error(f"--resume {args.resume} must be below --steps {args.steps}")
    if not os.path.isdir(f"/sys/class/net/{args.dev}"):
        parser.error(f"--dev {args.dev}: no such interface in this network namespace")
    if not os.path.isdir(args.out):
        parser.error(f"--out {args.out}: no such folder")
    return args


def main():
    return train(parse_args())


if __name__ == "__main__":
    sys.exit(main())
