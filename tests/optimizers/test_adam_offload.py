"""ms_optim.AdamOffload against MindSpore's own nn.AdamOffload and the numpy rule:
hyper-parameters, learning-rate kinds, groups, buckets, float16 parameters, loss scale
(tests/optimizers/test_common.py has the checks every optimizer passes)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from ms_optim import reference
from tests.helpers import (CpuLossScaleCell, PolyLR, assert_close_to_mindspore, batch,
                           make_net, train_cell, values)


class StepWD(nn.Cell):
    """A dynamic weight decay: 1e-2 for 10 steps, then 1e-3."""

    def construct(self, global_step):
        return ms.ops.select(global_step < 10, Tensor(1e-2, ms.float32), Tensor(1e-3, ms.float32))


LR_KINDS = {
    "float": lambda: 0.01,
    "int": lambda: 0,
    "tensor_scalar": lambda: Tensor(0.01, ms.float32),
    "tensor_1d": lambda: Tensor(np.linspace(0.02, 0.001, 60).astype(np.float32)),
    "iterable": lambda: [0.02 * 0.95 ** i for i in range(60)],
    "schedule": PolyLR,
}


def _groups(net, lr_kind):
    fc1 = [p for p in net.trainable_params() if "fc1" in p.name]
    rest = [p for p in net.trainable_params() if "fc1" not in p.name]
    return [{"params": fc1, "weight_decay": 0.05, "lr": LR_KINDS[lr_kind]()},
            {"params": rest},
            {"order_params": net.trainable_params()}]


def _run_pair(make_ours, make_theirs, steps=50, sens=1.0, seed=3, data=None):
    """Trains two identical networks, one per optimizer, on one batch; returns, for each,
    the parameters, the optimizer and the losses of the steps."""
    x, y = data or batch()
    out = []
    for make in (make_ours, make_theirs):
        net = make_net(seed=seed)
        opt = make(net)
        cell = train_cell(net, opt, sens=sens)
        losses = [float(cell(x, y).asnumpy()) for _ in range(steps)]
        out.append((values(net.trainable_params()), opt, np.array(losses)))
    return out


CONFIGS = {
    # name: (kwargs builder(net) -> (params, kwargs), loss scale)
    "plain_nesterov_wd_scale_iterable": (
        lambda net: (net.trainable_params(), dict(learning_rate=LR_KINDS["iterable"](),
                                                  use_nesterov=True, weight_decay=0.01,
                                                  loss_scale=8.0)), 8.0),
    "groups_schedule_wd": (
        lambda net: (_groups(net, "schedule"), dict(learning_rate=0.01, weight_decay=0.001)), 1.0),
    "groups_tensor_lr_nesterov_scale": (
        lambda net: (_groups(net, "tensor_1d"), dict(learning_rate=0.005, use_nesterov=True,
                                                     loss_scale=4.0)), 4.0),
    "cell_weight_decay": (
        lambda net: (net.trainable_params(), dict(learning_rate=0.01, weight_decay=StepWD())), 1.0),
}


@pytest.mark.parametrize("config", [c if c == "groups_schedule_wd"
                                    else pytest.param(c, marks=pytest.mark.slow)
                                    for c in sorted(CONFIGS)])
def test_matches_mindspore_adam_offload(config):
    build, sens = CONFIGS[config]

    def ours(net):
        params, kw = build(net)
        return ms_optim.AdamOffload(params, **kw)

    def theirs(net):
        params, kw = build(net)
        return nn.AdamOffload(params, **kw)

    (p_ours, o_ours, _), (p_theirs, o_theirs, _) = _run_pair(ours, theirs, steps=50, sens=sens)
    assert_close_to_mindspore(p_ours, p_theirs)
    assert_close_to_mindspore(values(o_ours.moment1), values(o_theirs.moment1))
    assert_close_to_mindspore(values(o_ours.moment2), values(o_theirs.moment2))
    # the decay really was exercised: bn gamma/beta are excluded only without groups
    assert any(np.abs(a - b).max() > 0 for a, b in zip(p_ours, values(make_net(3).trainable_params())))


@pytest.mark.parametrize("lr_kind", [k if k == "schedule"
                                     else pytest.param(k, marks=pytest.mark.slow)
                                     for k in sorted(LR_KINDS)])
def test_learning_rate_kinds_match_mindspore(lr_kind):
    (p_ours, _, _), (p_theirs, _, _) = _run_pair(
        lambda net: ms_optim.AdamOffload(net.trainable_params(), learning_rate=LR_KINDS[lr_kind]()),
        lambda net: nn.AdamOffload(net.trainable_params(), learning_rate=LR_KINDS[lr_kind]()),
        steps=12)
    assert_close_to_mindspore(p_ours, p_theirs)


def test_float16_parameters_follow_reference():
    """float16 parameters with float32 moments, against the numpy rule step by step."""
    dense = nn.Dense(5, 4, dtype=ms.float16)
    rng = np.random.default_rng(0)
    for p in dense.trainable_params():
        p.set_data(Tensor(rng.standard_normal(p.shape).astype(np.float16)))
    params = dense.trainable_params()
    opt = ms_optim.AdamOffload(params, learning_rate=0.01, weight_decay=0.1, loss_scale=2.0)
    assert all(m.dtype == ms.float32 for m in opt.moment1 + opt.moment2)
    ref = [(p.asnumpy().copy(), np.zeros(p.shape, np.float32), np.zeros(p.shape, np.float32))
           for p in params]
    b1p = b2p = np.float32(1)
    for step in range(5):
        grads = tuple(Tensor(rng.standard_normal(p.shape).astype(np.float16)) for p in params)
        opt(grads)
        b1p, b2p = b1p * np.float32(0.9), b2p * np.float32(0.999)
        for (rp, rm, rv), g in zip(ref, grads):
            # MindSpore stores weight_decay * loss_scale and divides the sum by loss_scale
            reference.adam_offload_step(rp, rm, rv, g.asnumpy(), 0.01, 0.9, 0.999, 1e-8, b1p, b2p,
                                        weight_decay=np.float32(0.1) * np.float32(2.0),
                                        inv_scale=0.5)
    for p, (rp, rm, _) in zip(params, ref):
        np.testing.assert_array_equal(p.asnumpy(), rp)
    np.testing.assert_array_equal(opt.moment1[0].asnumpy(), ref[0][1])


def test_state_lives_in_parameters_on_the_host():
    net = make_net()
    opt = ms_optim.AdamOffload(net.trainable_params())
    names = {p.name for p in opt.get_parameters()}
    for p in net.trainable_params():
        assert f"moment1.{p.name}" in names and f"moment2.{p.name}" in names
    assert {"beta1_power", "beta2_power", "global_step"} <= names
    assert all(op.primitive_target == "CPU" for op in opt.step_ops)


@pytest.mark.parametrize("bucket", [1, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("impl", ["native", pytest.param("delta", marks=pytest.mark.slow)])
def test_buckets_of_parameters_match_mindspore(bucket, impl, monkeypatch):
    """Parameters split over several multi-tensor ops (groups with their own lr and weight
    decay falling across the cuts) step as nn.AdamOffload does."""
    monkeypatch.setattr(ms_optim.aot, "MAX_TENSORS", bucket)
    build, sens = CONFIGS["groups_tensor_lr_nesterov_scale"]

    def ours(net):
        params, kw = build(net)
        opt = ms_optim.AdamOffload(params, impl=impl, **kw)
        assert len(opt.buckets) == -(-len(net.trainable_params()) // bucket)
        return opt

    (p_ours, _, l_ours), (p_theirs, _, l_theirs) = _run_pair(
        ours, lambda net: nn.AdamOffload(build(net)[0], **build(net)[1]), steps=20, sens=sens)
    assert_close_to_mindspore(p_ours, p_theirs)
    np.testing.assert_allclose(l_ours, l_theirs, rtol=1e-5)


@pytest.mark.slow
def test_trains_with_train_one_step_cell():
    """TrainOneStepCell steps as with MindSpore's own nn.AdamOffload, to float32 rounding."""
    (ours, _, losses), (theirs, _, their_losses) = _run_pair(
        lambda net: ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.02),
        lambda net: nn.AdamOffload(net.trainable_params(), learning_rate=0.02),
        steps=61, seed=5, data=batch(n=64))
    assert_close_to_mindspore(ours, theirs)
    np.testing.assert_allclose(losses, their_losses, rtol=1e-5)
    assert losses[-1] < 0.5 * losses[0]


def test_dynamic_loss_scale_overflow_leaves_state_untouched():
    x, y = batch()
    net = make_net(seed=6)
    opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.01)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 10, scale_factor=2, scale_window=1000)
    cell = CpuLossScaleCell(nn.WithLossCell(net, loss), opt, scale_sense=manager)
    cell.set_train()
    _, overflow, _ = cell(x, y)
    assert not overflow
    state = values(net.trainable_params()) + values(opt.moment1) + values(opt.moment2)
    step = int(opt.global_step.asnumpy()[0])
    # a loss scale of 2**120 overflows the float32 gradients of this batch
    cell.scale_sense.set_data(Tensor(np.float32(2.0 ** 120)))
    _, overflow, _ = cell(x * 1e6, y)
    assert overflow
    after = values(net.trainable_params()) + values(opt.moment1) + values(opt.moment2)
    for a, b in zip(state, after):
        np.testing.assert_array_equal(a, b)
    assert int(opt.global_step.asnumpy()[0]) == step
    assert np.isfinite(np.concatenate([a.ravel() for a in after])).all()
