"""One worker of the distributed DGCMomentum tests, launched by msrun (see
tests/distributed/test_dgc_msrun.py), with the repository root on PYTHONPATH.

    msrun --worker_num=2 --local_worker_num=2 ... dgc_worker.py --mode MODE --out DIR

Modes:
  exchange       known per-worker gradients straight into the optimizer (workers start from
                 different parameters; also with one parameter per native op), then a small
                 network trained with ms.Model on the worker's shard, then a checkpoint
                 resume; writes rank<r>.npz
  data_parallel  DGCMomentum under DATA_PARALLEL must refuse, at construction and at compile
  shared         the bucket of small parameters (bucket_sparsity) on known per-worker
                 gradients, gathered or all-reduced (with lr_in_residuals); the exchanges of shared indices
                 ("leader", "union") on known gradients, by one impl without the bucket
                 and by the other with it (the union's bucket by both), then a small
                 network trained with
                 TrainOneStepCell (the leader chosen on the device); writes rank<r>.npz
  mismatch       rank 1 builds a different model: the first step must fail on both workers
  state_mismatch rank 1 holds another optimizer state (--case world: saved by another
                 number of workers; kinds: other residual kinds): the step must fail on
                 both workers
  auto           sparsity="auto": a network trained with TrainOneStepCell past the choice,
                 saved after it and resumed, and known gradients straight into the
                 optimizer; writes rank<r>.npz (parameters, choices, exchange_stats)
  save           train 6 steps, save DIR/saved<N>/rank<r>.ckpt (N workers)
  resume         load --ckpt (with {rank}), train 3 more steps; the model is written to
                 DIR/rank<r>.npz
  resume_refused load --ckpt, step: must fail (residuals of another world size)
Each worker writes DIR/rank<r>.txt with "ok" or the error it saw.
"""
import argparse
import contextlib
import os
import sys
from unittest import mock

import numpy as np

import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore.ops import functional as F
from mindspore.communication import get_group_size, get_rank, init

import ms_optim
from ms_optim.dgc import auto
from tests.helpers import cosine_lrs
from tests.nets import WideNet


def make_net():
    return WideNet(n_in=16, hidden=1100, n_out=4)  # 17600 weights: compressed


SHAPES = [(130, 129), (20000,), (7, 3), (11,)]
CONFIG = dict(learning_rate=0.05, momentum=0.9, rampup_begin_step=3, rampup_step=8,
              sparsity=[0.75, 0.9375, 0.999], use_nesterov=True, local_grad_clip_norm=50.0)
STEPS = 16
# the learning rates of the run with lr_in_residuals: a cosine decay, one per step
FOLD_LRS = cosine_lrs(STEPS, peak=0.05)
# the shared mode's exchanges of shared indices, each by both impls: (exchange, the impl
# of its run without the bucket, the impl of its run with the bucket following the exchange
# as the large parameters do)
SHARED_RUNS = (("leader", "ops", "native"), ("union", "native", "ops"))
# the bucket runs under shared indices (exchange, tag): SHARED_RUNS' and the union's bucket
# by the native kernels as well
BUCKET_SHARED_RUNS = (("leader", "bucket_leader_"), ("union", "bucket_union_"),
                      ("union", "bucket_union_native_"))


def known_grads(rank, step):
    rng = np.random.default_rng(1000 * rank + step)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def make_params(seed, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=f"w{i}")
            for i, s in enumerate(shapes)]


def shard(rank, nranks, n=512):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    y = x[:, :4].argmax(1).astype(np.int32)
    return x[rank::nranks], y[rank::nranks]


def forced_decide(self, best):
    """In place of AutoSparsity.decide (forced): the choice in self.forced, whatever the
    measurements (the measurements still gathered, as the real rule's)."""
    return F.depend(self.forced, best)


@contextlib.contextmanager
def forced(opt, choice):
    """`opt` (sparsity="auto") chooses `choice` (an index into SPARSITY_CHOICES, or -1:
    dense) while its graphs compile in the block; None: what it measures."""
    if choice is None:
        yield
        return
    opt.auto.forced = Tensor(np.array([choice], np.int32))
    measured, auto.AutoSparsity.decide = auto.AutoSparsity.decide, forced_decide
    try:
        yield
    finally:
        auto.AutoSparsity.decide = measured


def train_cell(rank, nranks, start, stop, seed, settings, ckpt_load=None, ckpt_save=None,
               force=None, host=False):
    """Steps [start, stop) of TrainOneStepCell with DGCMomentum(**settings) on this worker's
    shard (`host`: the optimizer called from Python on the gradients instead), saving a
    checkpoint before step `ckpt_save[0]` when asked (with sparsity="auto", the choice
    `force` when given); returns the optimizer and the network."""
    ms.set_seed(seed)
    net = make_net()
    opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.05, momentum=0.9,
                               **settings)
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                 reduction="mean"))
    cell = nn.TrainOneStepCell(loss, opt)
    cell.set_train()
    if ckpt_load:
        ms.load_param_into_net(cell, ms.load_checkpoint(ckpt_load))
    grad_fn = ms.value_and_grad(loss, None, opt.parameters)
    x, y = shard(rank, nranks)
    with forced(opt, force):
        for t in range(start, stop):
            if ckpt_save and t == ckpt_save[0]:
                ms.save_checkpoint(cell, ckpt_save[1])
            lo = (t * 32) % len(x)
            batch = Tensor(x[lo:lo + 32]), Tensor(y[lo:lo + 32])
            if host:
                opt(grad_fn(*batch)[1])
            else:
                cell(*batch)
    return opt, net


def train_net(rank, nranks, start, stop, seed, ckpt_load=None, ckpt_save=None):
    """train_cell with a warm-up (dense steps 0-1, 0.9, then 0.999 from step 4); returns
    parameters, u and v."""
    opt, net = train_cell(rank, nranks, start, stop, seed,
                          dict(rampup_begin_step=2, rampup_step=4, sparsity=[0.9, 0.999]),
                          ckpt_load, ckpt_save)
    state = [p.asnumpy() for p in net.trainable_params()]
    return state + [u.asnumpy() for u in opt.u] + [v.asnumpy() for v in opt.v]


def _max_tensors(n):
    """ms_optim.aot.MAX_TENSORS = n (parameters per multi-tensor op) inside the block."""
    return mock.patch.object(ms_optim.aot, "MAX_TENSORS", n)


def _per_parameter_sync():
    """The first step's parameters broadcast one tensor per parameter inside the block."""
    return mock.patch.object(ms_optim.dgc.exchange.ReplicaSync, "PACKED_TARGETS", ())


def _graph_flush():
    """sparsity="auto"'s flush of the residuals in graph code inside the block."""
    from ms_optim.dgc import optimizer

    class GraphFlush(optimizer.ResidualFlush):
        def __init__(self, *args, native):
            super().__init__(*args, native=False)

    return mock.patch.object(optimizer, "ResidualFlush", GraphFlush)


def known_steps(rank, nranks, impl, exchange, tag, bucket_sparsity=None,
                lr_in_residuals=False):
    """STEPS of known gradients straight into the optimizer, from parameters that differ on
    every worker until the first step's broadcast: the initial parameters ("init<i>") and,
    each name led by `tag`, the parameters, residuals and the last step's exchange bytes
    (the bucket's residuals v as "bucket_v<j>").  With `lr_in_residuals`, at the rates
    FOLD_LRS."""
    params = make_params(seed=rank)
    arrays = {f"init{i}": p.asnumpy().copy() for i, p in enumerate(params)}
    config = dict(CONFIG, learning_rate=FOLD_LRS) if lr_in_residuals else CONFIG
    opt = ms_optim.DGCMomentum(params, num_trainers=nranks, impl=impl, exchange=exchange,
                               bucket_sparsity=bucket_sparsity,
                               lr_in_residuals=lr_in_residuals, **config)
    for t in range(STEPS):
        opt(tuple(Tensor(g) for g in known_grads(rank, t)))
    arrays.update({f"{tag}param{i}": p.asnumpy() for i, p in enumerate(params)})
    arrays.update({f"{tag}u{i}": u.asnumpy() for i, u in enumerate(opt.u)})
    arrays.update({f"{tag}v{i}": v.asnumpy() for i, v in enumerate(opt.v)})
    arrays.update({f"{tag}bucket_v{j}": v.asnumpy() for j, v in enumerate(opt.bucket_v)})
    arrays[f"{tag}exchange_bytes"] = np.array(opt.exchange_stats(STEPS - 1)["bytes"])
    return arrays


def mode_exchange(rank, nranks, out):
    arrays = {}
    # the native kernels and the plain-ops path with the gathered selections, and the
    # native selection with a dense all-reduce of the sparsified gradient
    for impl, exchange, tag in (("native", "allgather", ""), ("ops", "allgather", "ops_"),
                                ("native", "allreduce", "ar_")):
        arrays.update(known_steps(rank, nranks, impl, exchange, tag))
    # every parameter its own native op: the dense momentum reads its part of the packed
    # mean, not all of it; and the first step's broadcast one tensor per parameter, as on
    # device targets other than the CPU
    with _max_tensors(1), _per_parameter_sync():
        arrays.update(known_steps(rank, nranks, "native", "allgather", "one_"))

    # parameters of several dtypes, apart on every worker: after a step at rate 0 on zero
    # gradients each worker holds rank 0's, each dtype crossing in its own buffer
    mixed = [Parameter(Tensor((np.arange(n) * (rank + 1)).astype(d)), name=f"mixed{i}")
             for i, (n, d) in enumerate([(7, np.float16), (30000, np.float32),
                                         (5, np.float16), (3, np.float64)])]
    arrays.update({f"mixed_init{i}": p.asnumpy().copy() for i, p in enumerate(mixed)})
    ms_optim.DGCMomentum(mixed, learning_rate=0.0, momentum=0.9, rampup_begin_step=0,
                         sparsity=[0.99])(tuple(Tensor(np.zeros_like(p.asnumpy())) for p in mixed))
    arrays.update({f"mixed{i}": p.asnumpy() for i, p in enumerate(mixed)})

    # the user's path: ms.Model on the worker's shard of a dataset
    from mindspore import dataset as ds
    x, y = shard(rank, nranks)

    class Source:
        def __getitem__(self, i):
            return x[i], np.array(y[i])

        def __len__(self):
            return len(x)

    ms.set_seed(rank)  # different initial weights per worker
    net = make_net()
    opt2 = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.05, momentum=0.9,
                                rampup_begin_step=4, rampup_step=8, sparsity=[0.9, 0.999])
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     optimizer=opt2)
    model.train(2, ds.GeneratorDataset(Source(), ["x", "y"], shuffle=False).batch(32),
                dataset_sink_mode=False)
    arrays.update({f"model{i}": p.asnumpy() for i, p in enumerate(net.trainable_params())})

    # checkpoint resume: 6 steps, save, 6 more == fresh start from the checkpoint, 6 steps
    path = os.path.join(out, f"rank{rank}.ckpt")
    straight = train_net(rank, nranks, 0, 12, seed=10 + rank, ckpt_save=(6, path))
    resumed = train_net(rank, nranks, 6, 12, seed=99, ckpt_load=path)
    arrays.update({f"straight{i}": a for i, a in enumerate(straight)})
    arrays.update({f"resumed{i}": a for i, a in enumerate(resumed)})
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    return "ok"


def mode_shared(rank, nranks, out):
    arrays = {}
    # the bucket of the two small parameters (32 elements), with 3 workers: at 0.9 (3
    # entries each, the native kernels) gathered, at 0.5 (16 each, ops.topk) the sparsified
    # bucket all-reduced, the latter with learning-rate-scaled residuals
    for impl, bucket, tag, fold in (("native", 0.9, "bucket90_", False),
                                    ("ops", 0.5, "bucket50_", True)):
        arrays.update(known_steps(rank, nranks, impl, "auto", tag, bucket_sparsity=bucket,
                                  lr_in_residuals=fold))
    # the bucket's indices in their own collective, as a bucket too big to send them as
    # float32 does
    from ms_optim.dgc import bucket
    limit, bucket.FUSED_INDEX_LIMIT = bucket.FUSED_INDEX_LIMIT, 0
    try:
        arrays.update(known_steps(rank, nranks, "native", "auto", "bucket90_split_",
                                  bucket_sparsity=0.9))
    finally:
        bucket.FUSED_INDEX_LIMIT = limit
    for exchange, plain_impl, bucket_impl in SHARED_RUNS:
        arrays.update(known_steps(rank, nranks, plain_impl, exchange, f"{exchange}_"))
        arrays.update(known_steps(rank, nranks, bucket_impl, exchange, f"bucket_{exchange}_",
                                  bucket_sparsity=0.9))

        ms.set_seed(rank)  # different initial weights per worker
        net = make_net()
        opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.05, momentum=0.9,
                                   rampup_begin_step=2, rampup_step=4, sparsity=[0.9, 0.999],
                                   exchange=exchange)
        cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
            sparse=True, reduction="mean")), opt)
        cell.set_train()
        x, y = shard(rank, nranks)
        for t in range(8):
            lo = (t * 32) % len(x)
            cell(Tensor(x[lo:lo + 32]), Tensor(y[lo:lo + 32]))
        arrays.update({f"{exchange}_model{i}": p.asnumpy()
                       for i, p in enumerate(net.trainable_params())})
        arrays.update({f"{exchange}_model_v{i}": v.asnumpy() for i, v in enumerate(opt.v)})
    arrays.update(known_steps(rank, nranks, "native", "union", "bucket_union_native_",
                              bucket_sparsity=0.9))
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    return "ok"


def mode_data_parallel(rank, nranks, out):
    from mindspore import ParallelMode
    seen = []
    ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    try:
        ms_optim.DGCMomentum(make_params(0), **CONFIG)
        seen.append("constructed")
    except RuntimeError as exc:
        seen.append(f"construct: {exc}")
    # built first, parallel mode switched on afterwards: the compile must refuse
    ms.reset_auto_parallel_context()
    net = make_net()
    opt = ms_optim.DGCMomentum(net.trainable_params(), learning_rate=0.1, momentum=0.9,
                               rampup_begin_step=0)
    ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(
        sparse=True, reduction="mean")), opt)
    x, y = shard(rank, nranks)
    try:
        cell(Tensor(x[:32]), Tensor(y[:32]))
        seen.append("trained")
    except RuntimeError as exc:
        seen.append(f"compile: {exc}")
    return "\n".join(seen)


def first_step(opt, grads):
    """What a step of `opt` on the numpy gradients `grads` did: "stepped", or
    "error: <exception type>: <message>", the native kernel's own message for a
    RuntimeError (ms_optim.last_native_error())."""
    try:
        opt(tuple(Tensor(g) for g in grads))
        return "stepped"
    except (RuntimeError, ValueError) as exc:
        message = ms_optim.last_native_error() if isinstance(exc, RuntimeError) else exc
        return f"error: {type(exc).__name__}: {message}"


def mode_mismatch(rank, nranks, out):
    shapes = SHAPES if rank == 0 else [(130, 129), (20001,), (7, 3), (11,)]
    params = make_params(rank, shapes)
    opt = ms_optim.DGCMomentum(params, **CONFIG)
    return first_step(opt, [np.ones(s, np.float32) for s in shapes])


def mode_step_mismatch(rank, nranks, out):
    """Both workers build the same model, but rank 1 resumes at another step (its
    warm-up stage, and so its buffer sizes, could differ): the first step must fail."""
    params = make_params(0)
    opt = ms_optim.DGCMomentum(params, **CONFIG)
    if rank == 1:
        opt.global_step.set_data(Tensor([5], ms.int32))
    return first_step(opt, known_grads(rank, 0))


def mode_state_mismatch(rank, nranks, out, case):
    """Both workers build the same model at step 0, but rank 1's optimizer state is
    another's: saved by 4 workers (`case` "world") or holding residuals of
    learning-rate-scaled gradients ("kinds").  The step must fail on both workers, rank 0
    included, which alone would step on its own state.  (A failed step ends a distributed
    MindSpore run's steps, hence one case per run.)"""
    opt = ms_optim.DGCMomentum(make_params(0), **CONFIG)
    if rank == 1 and case == "world":
        opt.world_size.set_data(Tensor([4], ms.int32))
    if rank == 1 and case == "kinds":
        kinds = opt.residual_kind.asnumpy()
        opt.residual_kind.set_data(Tensor(np.where(kinds == 1, 2, kinds).astype(np.int32)))
    seen = first_step(opt, known_grads(rank, 0))
    return f"{seen}\nglobal_step {int(opt.global_step.asnumpy()[0])}"


def auto_run(rank, nranks, start, stop, force=None, ckpt_load=None, ckpt_save=None, **extra):
    """train_cell with sparsity="auto" (rampup_begin_step 1: step 0 dense, the probe on
    steps 1-3, the choice from step 4) and the settings `extra`, choosing `force` (an index
    into SPARSITY_CHOICES, or -1: dense) when given; returns the optimizer and the
    parameters."""
    opt, net = train_cell(rank, nranks, start, stop, 0,
                          dict(rampup_begin_step=1, sparsity="auto", **extra), ckpt_load,
                          ckpt_save, force)
    return opt, [p.asnumpy() for p in net.trainable_params()]


# mode_auto's runs: name -> the forced choice (None: the measured one)
AUTO_RUNS = {"measured": None, "dense": -1, "sparse": 2, "sparse_ops": 2, "dense_bucket": -1}
# and their settings beyond sparsity="auto"
AUTO_SETTINGS = {"sparse_ops": dict(impl="ops"), "dense_bucket": dict(bucket_sparsity=0.9)}


# runs that go dense after the probe, flushed natively and in graph code: name -> settings
# (a name of AUTO_RUNS is not run again natively); with the learning rate in the residuals
# the flush steps each parameter at its own rate (1)
FLUSH_RUNS = {"dense_bucket": AUTO_SETTINGS["dense_bucket"],
              "folded": dict(bucket_sparsity=0.9, lr_in_residuals=True)}


def _run_arrays(tag, opt, straight):
    """A run's parameters, u, v and the bucket's v, named after `tag`."""
    arrays = {f"{tag}_straight{i}": a for i, a in enumerate(straight)}
    arrays.update({f"{tag}_u{i}": u.asnumpy() for i, u in enumerate(opt.u)})
    arrays.update({f"{tag}_v{i}": v.asnumpy() for i, v in enumerate(opt.v)})
    arrays.update({f"{tag}_bucket_v{i}": v.asnumpy() for i, v in enumerate(opt.bucket_v)})
    return arrays


def mode_auto(rank, nranks, out):
    arrays = {}
    for name, force in AUTO_RUNS.items():
        path = os.path.join(out, f"auto_{name}_rank{rank}.ckpt")
        extra = AUTO_SETTINGS.get(name, {})
        opt, straight = auto_run(rank, nranks, 0, 12, force, ckpt_save=(9, path), **extra)
        resumed_opt, resumed = auto_run(rank, nranks, 9, 12, force, ckpt_load=path, **extra)
        stats = opt.exchange_stats(11)["auto"]
        arrays.update(_run_arrays(name, opt, straight))
        arrays.update({f"{name}_resumed{i}": a for i, a in enumerate(resumed)})
        arrays[f"{name}_choice"] = opt.auto.choice.asnumpy()
        arrays[f"{name}_resumed_choice"] = resumed_opt.auto.choice.asnumpy()
        arrays[f"{name}_stages"] = np.array([-1 if s is None else s
                                             for s in map(opt.stage, range(12))])
        arrays[f"{name}_sampled"] = np.array([stats[key] is not None for key in (
            "compute_s", "probe_exchange_s", "chunk_small_s", "chunk_large_s")])
    # the runs of FLUSH_RUNS again with the residuals flushed in graph code (as with
    # impl="ops" or on a GPU), as "graph_flush_<name>": the native flush's bits
    for name, extra in FLUSH_RUNS.items():
        if name not in AUTO_RUNS:
            arrays.update(_run_arrays(name, *auto_run(rank, nranks, 0, 12, -1, **extra)))
        with _graph_flush():
            arrays.update(_run_arrays(f"graph_flush_{name}",
                                   *auto_run(rank, nranks, 0, 12, -1, **extra)))
    # a state saved by a run at a fixed sparsity, resumed past the probe: dense from there,
    # the residuals flushed, in a compiled step and from Python
    path = os.path.join(out, f"fixed_rank{rank}.ckpt")
    train_cell(rank, nranks, 0, 10, 0, dict(rampup_begin_step=1, sparsity=[0.98]),
               ckpt_save=(9, path))
    for name, host in (("from_fixed", False), ("from_fixed_host", True)):
        opt, net = train_cell(rank, nranks, 9, 12, 0, dict(rampup_begin_step=1, sparsity="auto"),
                              ckpt_load=path, host=host)
        arrays.update({f"{name}_straight{i}": p.asnumpy()
                       for i, p in enumerate(net.trainable_params())})
        arrays.update({f"{name}_u{i}": u.asnumpy() for i, u in enumerate(opt.u)})
        arrays.update({f"{name}_v{i}": v.asnumpy() for i, v in enumerate(opt.v)})
        arrays[f"{name}_choice"] = opt.auto.choice.asnumpy()
    # from Python, on known gradients: the branch chosen on the host
    for name, force in (("host_dense", -1), ("host_sparse", 2)):
        params = make_params(seed=0)
        opt = ms_optim.DGCMomentum(params, learning_rate=0.05, momentum=0.9,
                                   rampup_begin_step=0, sparsity="auto")
        with forced(opt, force):
            for t in range(9):
                opt(tuple(Tensor(g) for g in known_grads(rank, t)))
        arrays.update({f"{name}_param{i}": p.asnumpy() for i, p in enumerate(params)})
        arrays.update({f"{name}_u{i}": u.asnumpy() for i, u in enumerate(opt.u)})
        arrays[f"{name}_choice"] = opt.auto.choice.asnumpy()
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    return "ok"


def mode_save(rank, nranks, out):
    folder = os.path.join(out, f"saved{nranks}")
    os.makedirs(folder, exist_ok=True)
    train_net(rank, nranks, 0, 7, seed=0,
              ckpt_save=(6, os.path.join(folder, f"rank{rank}.ckpt")))
    return "ok"


def mode_resume(rank, nranks, out, ckpt):
    state = train_net(rank, nranks, 6, 9, seed=0, ckpt_load=ckpt.format(rank=rank))
    params = state[:len(make_net().trainable_params())]  # (then the worker's own u, v)
    np.savez(os.path.join(out, f"rank{rank}.npz"), *params)
    return "ok"


def mode_resume_refused(rank, nranks, out, ckpt):
    try:
        train_net(rank, nranks, 6, 7, seed=0, ckpt_load=ckpt.format(rank=rank))
        return "stepped"
    except RuntimeError as exc:
        return f"error: {exc}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True,
                        choices=["exchange", "shared", "auto", "data_parallel", "mismatch", "step_mismatch",
                                 "state_mismatch", "save", "resume", "resume_refused"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--ckpt", help="resume: the checkpoint to load, {rank} for the rank")
    parser.add_argument("--case", choices=["world", "kinds"],
                        help="state_mismatch: what differs in rank 1's optimizer state")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    rank, nranks = get_rank(), get_group_size()
    extra = ((args.ckpt,) if args.mode.startswith("resume")
             else (args.case,) if args.mode == "state_mismatch" else ())
    result = globals()[f"mode_{args.mode}"](rank, nranks, args.out, *extra)
    with open(os.path.join(args.out, f"rank{rank}.txt"), "w") as fh:
        fh.write(result)
    print(f"rank {rank}: {result.splitlines()[0] if result else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
