"""Shared fixtures: GRAPH_MODE on CPU, small deterministic networks, comparisons."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import nn

from nets import SmallNet

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")


def set_params(net, seed):
    """Deterministic parameter values, so two networks can start identical."""
    rng = np.random.default_rng(seed)
    for p in net.get_parameters():
        arr = (rng.standard_normal(p.shape) * 0.5).astype(p.asnumpy().dtype)
        if "moving_variance" in p.name:
            arr = np.abs(arr) + 1
        p.set_data(ms.Tensor(arr))
    return net


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


@pytest.fixture
def fresh_isa():
    """Restores the process-wide kernel ISA after a test that selects one."""
    from ms_optim import _native
    before = _native.isa()
    yield
    _native.select_isa(before)


def array_dataset(xs, ys, batch_size=32):
    """A batched GeneratorDataset over numpy arrays (numpy-2-safe: items are ndarrays)."""
    from mindspore import dataset as ds

    class Source:
        def __getitem__(self, i):
            return xs[i], np.array(ys[i])

        def __len__(self):
            return len(xs)

    return ds.GeneratorDataset(Source(), ["x", "y"], shuffle=False).batch(batch_size)


def fit_and_score(net, opt, xs, ys, epochs):
    """ms.Model training in GRAPH_MODE; returns the accuracy on the training data."""
    data = array_dataset(xs, ys)
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     optimizer=opt, metrics={"acc"})
    model.train(epochs, data, dataset_sink_mode=False)
    return model.eval(data, dataset_sink_mode=False)["acc"]


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
