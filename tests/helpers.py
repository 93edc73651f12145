"""What the tests share: small deterministic networks, training runs, comparisons."""
import numpy as np

import mindspore as ms
from mindspore import nn
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

from ms_optim import reference
from ms_optim.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue
from tests.nets import SmallNet


class HalvingLR(LearningRateSchedule):
    """0.02 / (1 + step): 0.02, 0.01, 0.00667, ..."""

    def construct(self, global_step):
        return 0.02 / (1.0 + ms.ops.cast(global_step, ms.float32))


class PolyLR(LearningRateSchedule):
    """0.02 / (1 + 0.1 step)."""

    def construct(self, global_step):
        step = ms.ops.cast(global_step, ms.float32)
        return 0.02 / (1.0 + 0.1 * step)


def set_params(net, seed):
    """Deterministic parameter values, so two networks can start identical."""
    rng = np.random.default_rng(seed)
    for p in net.get_parameters():
        arr = (rng.standard_normal(p.shape) * 0.5).astype(p.asnumpy().dtype)
        if "moving_variance" in p.name:
            arr = np.abs(arr) + 1
        p.set_data(ms.Tensor(arr))
    return net


SHAPES = {"fc.weight": (7, 5), "fc.bias": (5,), "out.weight": (5, 3)}


def named_params(seed=0, shapes=SHAPES):
    """float32 Parameters of random values, one per {name: shape} of `shapes`."""
    rng = np.random.default_rng(seed)
    return [ms.Parameter(ms.Tensor(rng.standard_normal(s).astype(np.float32)), name=n)
            for n, s in shapes.items()]


def random_grads(params, seed=1):
    """float32 gradients of random values for `params`, as a tuple of Tensors."""
    rng = np.random.default_rng(seed)
    return tuple(ms.Tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in params)


class CpuLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """nn.TrainOneStepWithLossScaleCell with an overflow check that runs on CPU.

    MindSpore 2.10's own check has no CPU kernel (NPUGetFloatStatusV2 on the
    Ascend branch, FloatStatus on the GPU branch); everything else, including
    skipping the optimizer on overflow, is MindSpore's.
    """

    def get_overflow_status(self, status, compute_output):
        finite = ()
        for grad in compute_output:
            finite += (ms.ops.isfinite(grad).all(),)
        return ms.ops.logical_not(ms.ops.stack(finite).all())


def make_net(seed=0, **kw):
    return set_params(SmallNet(**kw), seed)


def batch(seed=1, n=16, n_in=6, n_out=3, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = ms.Tensor(rng.standard_normal((n, n_in)).astype(dtype))
    y = ms.Tensor(rng.integers(0, n_out, n).astype(np.int32))
    return x, y


def train_cell(net, opt, sens=1.0):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt, sens=sens)
    cell.set_train()
    return cell


def values(params):
    return [p.asnumpy().copy() for p in params]


def cosine_lrs(steps, peak=0.05):
    """A cosine schedule from `peak` to near 0 over `steps`, float32, one value per step."""
    t = np.arange(steps)
    return (peak * (1 + np.cos(np.pi * t / steps)) / 2).astype(np.float32)


def assert_close_to_mindspore(actual, expected):
    """Float32-rounding agreement after many steps (with a MindSpore optimizer, or a
    reference whose rounding differs in places).

    rtol 1e-5 on each element, with an absolute floor of 1e-6 of the tensor's
    largest magnitude: an element that crosses zero during training has no
    meaningful relative error of its own.
    """
    for a, e in zip(actual, expected):
        floor = 1e-6 * max(float(np.max(np.abs(e))), 1e-30)
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=floor)


def array_dataset(xs, ys, batch_size=32):
    """A batched GeneratorDataset over numpy arrays (numpy-2-safe: items are ndarrays)."""
    from mindspore import dataset as ds

    class Source:
        def __getitem__(self, i):
            return xs[i], np.array(ys[i])

        def __len__(self):
            return len(xs)

    return ds.GeneratorDataset(Source(), ["x", "y"], shuffle=False).batch(batch_size)


class _StepLosses(ms.train.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(float(run_context.original_args().net_outputs.asnumpy()))


def fit_and_score(net, opt, xs, ys, epochs):
    """ms.Model training in GRAPH_MODE; returns the loss of every step (an array
    [epoch, step]) and the accuracy on the training data after training."""
    data = array_dataset(xs, ys)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     optimizer=opt, metrics={"acc"})
    recorder = _StepLosses()
    model.train(epochs, data, callbacks=[recorder], dataset_sink_mode=False)
    return np.array(recorder.losses).reshape(epochs, -1), model.eval(data, dataset_sink_mode=False)["acc"]


def fit_reference(net, xs, ys, epochs, step, batch_size=32):
    """fit_and_score's training with the optimizer replaced by `step`: for each batch, in
    the dataset's order, MindSpore computes the gradients of the loss at the network's
    current parameters (train mode, as ms.Model does), and step(gradients as numpy
    arrays) returns the new values of net.trainable_params(). Returns the step losses
    [epoch, step]."""
    params = net.trainable_params()
    grad = nn.ForwardValueAndGrad(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
        weights=ms.ParameterTuple(params), get_by_list=True)
    grad.set_train()
    losses = []
    for _ in range(epochs):
        for lo in range(0, len(xs), batch_size):
            loss, grads = grad(ms.Tensor(xs[lo:lo + batch_size]), ms.Tensor(ys[lo:lo + batch_size]))
            losses.append(float(loss.asnumpy()))
            for p, new in zip(params, step([g.asnumpy() for g in grads])):
                p.set_data(ms.Tensor(new))
    return np.array(losses).reshape(epochs, -1)


def assert_trained(losses, acc, loss_ratio, min_acc):
    """losses [epoch, step]: the last epoch's mean loss is below loss_ratio times the
    first step's, and the accuracy on the training data is above min_acc."""
    first, last = losses[0, 0], losses[-1].mean()
    assert last < loss_ratio * first, f"loss {first} -> {last} (last epoch's mean)"
    assert acc > min_acc


def assert_checkpoint_resumes(build, steps, x, y, path, state):
    """`steps` uninterrupted steps == steps/2, save_checkpoint, a fresh build, load, steps/2.

    build() -> (net, opt, train cell); state(net, opt) -> arrays compared bit for bit.
    """
    net, opt, cell = build()
    for _ in range(steps):
        cell(x, y)
    uninterrupted = state(net, opt)
    net, opt, cell = build()
    for _ in range(steps // 2):
        cell(x, y)
    ms.save_checkpoint(cell, path)
    net, opt, cell = build()
    not_loaded, _ = ms.load_param_into_net(cell, ms.load_checkpoint(path))
    assert not not_loaded
    assert int(opt.global_step.asnumpy()[0]) == steps // 2
    for _ in range(steps - steps // 2):
        cell(x, y)
    for a, b in zip(state(net, opt), uninterrupted):
        np.testing.assert_array_equal(a, b)


def reference_lamb(params, lr_at, wd_of, clip, loss_scale, always_adapt=False):
    """The numpy Lamb from the values of `params`: returns step(grads) -> the parameters
    after one more step (lr_at(t, p), t counting from 0, and wd_of(p) per parameter)."""
    state = [(p.asnumpy().copy(), np.zeros(p.shape, np.float32), np.zeros(p.shape, np.float32))
             for p in params]
    inv = np.float32(1.0 / loss_scale)
    done = [0]

    def step(grads):
        done[0] += 1
        t = done[0]
        kw, scale = {}, inv
        if isinstance(clip, ClipGradByGlobalNorm):
            grads = reference.clip_by_global_norm([g * inv for g in grads], clip.clip_norm)
            scale = 1.0
        elif isinstance(clip, ClipGradByNorm):
            kw = dict(clip_norm=clip.clip_norm)
        elif isinstance(clip, ClipGradByValue):
            kw = dict(clip_lo=clip.min, clip_hi=clip.max)
        for p, (rp, rm, rv), g in zip(params, state, grads):
            reference.lamb_step(rp, rm, rv, g, lr_at(t - 1, p), 0.9, 0.999, 1e-6,
                                np.float32(0.9) ** t, np.float32(0.999) ** t, wd_of(p),
                                always_adapt, grad_scale=scale, **kw)
        return [s[0] for s in state]

    return step
