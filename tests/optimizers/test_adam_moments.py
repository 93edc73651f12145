"""AdamOffload's compact moments (bfloat16, block-wise int8) and AdamW through the optimizer:
against reference.adam_compact_step bit for bit, the host state, training (test_common.py
resumes them from checkpoints and checks the delta path against the native one)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from ms_optim import reference
from tests.helpers import assert_close_to_mindspore, batch, make_net, train_cell, values
from tests.moments import Moments, adam_state, bits

B = reference.Q8_BLOCK


@pytest.mark.parametrize("kind", ["bfloat16", "int8"])
@pytest.mark.parametrize("dtype", [ms.float32, pytest.param(ms.float16, marks=pytest.mark.slow)])
@pytest.mark.parametrize("adamw", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_optimizer_follows_reference(kind, dtype, adamw):
    """AdamOffload(moment_dtype=...) against reference.adam_compact_step, step by step, bit for
    bit: parameters, moments and scales (a Dense layer of 700 x 5 weights: several blocks)."""
    dense = nn.Dense(700, 5, dtype=dtype)
    npdt = np.float16 if dtype == ms.float16 else np.float32
    rng = np.random.default_rng(0)
    for p in dense.trainable_params():
        p.set_data(Tensor(rng.standard_normal(p.shape).astype(npdt)))
    params = dense.trainable_params()
    opt = ms_optim.AdamOffload(params, learning_rate=0.01, weight_decay=0.1, loss_scale=2.0,
                               moment_dtype=kind, adamw=adamw)
    ref = []
    for p in params:
        n = int(np.prod(p.shape))
        mom = Moments(kind, np.zeros(n, np.float32), np.zeros(n, np.float32))
        ref.append((p.asnumpy().reshape(-1).copy(), mom))
    b1p = b2p = np.float32(1)
    for t in range(1, 5):
        grads = tuple(Tensor((rng.standard_normal(p.shape) * 10.0 ** rng.uniform(-3, 0, p.shape))
                             .astype(npdt)) for p in params)
        opt(grads)
        b1p, b2p = b1p * np.float32(0.9), b2p * np.float32(0.999)
        for i, ((rp, mom), g) in enumerate(zip(ref, grads)):
            # MindSpore stores weight_decay * loss_scale and divides the sum by loss_scale;
            # AdamW's decay is the unscaled weight decay
            wd = np.float32(0.1) if adamw else np.float32(0.1) * np.float32(2.0)
            reference.adam_compact_step(rp, *mom.ref_args()[:2], g.asnumpy().reshape(-1), 0.01,
                                        0.9, 0.999, 1e-8, b1p, b2p, kind, *mom.ref_args()[2:],
                                        weight_decay=wd, inv_scale=0.5, decoupled=adamw,
                                        q8_key=reference.q8_tensor_key(t, i))
    for p, (rp, _) in zip(params, ref):
        np.testing.assert_array_equal(p.asnumpy().reshape(-1), rp)
    want = ([bits(mom.m) for _, mom in ref] + [bits(mom.v) for _, mom in ref]
            + [mom.scales[0] for _, mom in ref if mom.scales]
            + [mom.scales[1] for _, mom in ref if mom.scales])
    for a, b in zip(adam_state(opt), want):
        np.testing.assert_array_equal(a.reshape(-1), b)


@pytest.mark.parametrize("kind", ["bfloat16", "int8"])
def test_state_parameters_by_moment_dtype(kind):
    """Both moments of every parameter are Parameters of the optimizer (what a checkpoint holds),
    and their int8 scales exactly when the moments are int8."""
    net = make_net(seed=7)
    opt = ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.01, weight_decay=0.01,
                               use_nesterov=True, moment_dtype=kind)
    names = {p.name for p in opt.get_parameters()}
    for p in net.trainable_params():
        assert {f"moment1.{p.name}", f"moment2.{p.name}"} <= names
        assert ({f"moment1_scale.{p.name}", f"moment2_scale.{p.name}"} <= names) == (kind == "int8")


def test_host_state_nbytes():
    net = make_net()
    params = net.trainable_params()
    n = sum(int(np.prod(p.shape)) for p in params)
    blocks = sum(-(-int(np.prod(p.shape)) // B) for p in params)
    got = {kind: ms_optim.AdamOffload(params, moment_dtype=kind).host_state_nbytes()
           for kind in ("float32", "bfloat16", "int8")}
    assert got == {"float32": 8 * n + 8, "bfloat16": 4 * n + 8, "int8": 2 * n + 8 * blocks + 8}
    opt = ms_optim.AdamOffload(params, moment_dtype="int8")
    assert [p.dtype for p in opt.moment1] == [ms.int8] * len(params)
    assert [p.dtype for p in opt.moment2] == [ms.uint8] * len(params)
    assert [p.shape for p in opt.moment1_scale] == [(-(-int(np.prod(p.shape)) // B),)
                                                    for p in params]


def test_adamw_matches_mindspore_adam_weight_decay():
    """adamw=True steps as nn.AdamWeightDecay (float32 moments), to float32 rounding, over 60
    steps with a decay that some parameters are excluded from (MindSpore's beta/gamma rule)."""
    x, y = batch(n=64)
    runs = []
    for make in (lambda ps: ms_optim.AdamOffload(ps, learning_rate=0.01, weight_decay=0.05,
                                                 eps=1e-6, adamw=True),
                 lambda ps: nn.AdamWeightDecay(ps, learning_rate=0.01, weight_decay=0.05,
                                               eps=1e-6)):
        net = make_net(seed=5)
        opt = make(net.trainable_params())
        cell = train_cell(net, opt)
        losses = [float(cell(x, y).asnumpy()) for _ in range(60)]
        runs.append((values(net.trainable_params()), np.array(losses), opt))
    (ours, l_ours, opt), (theirs, l_theirs, theirs_opt) = runs
    assert opt.decay_flags == theirs_opt.decay_flags and not all(opt.decay_flags)
    assert_close_to_mindspore(ours, theirs)
    np.testing.assert_allclose(l_ours, l_theirs, rtol=1e-5)
    assert l_ours[-1] < 0.5 * l_ours[0]


@pytest.mark.parametrize("kind", [pytest.param("bfloat16", marks=pytest.mark.slow), "int8"])
def test_compact_moments_train_like_float32(kind):
    """Same training run with float32 and compact moments: the losses stay close."""
    x, y = batch(n=64)
    losses = {}
    for k in ("float32", kind):
        net = make_net(seed=5)
        cell = train_cell(net, ms_optim.AdamOffload(net.trainable_params(), learning_rate=0.02,
                                                    moment_dtype=k))
        losses[k] = np.array([float(cell(x, y).asnumpy()) for _ in range(60)])
    assert losses[kind][-1] < 0.6 * losses[kind][0], (losses[kind][-1], losses["float32"][-1])
    np.testing.assert_allclose(losses[kind], losses["float32"], rtol=0.08 if kind == "int8" else 0.01)


def test_repr_names_the_options_when_set():
    params = make_net().trainable_params()
    assert "moment_dtype" not in repr(ms_optim.AdamOffload(params))
    text = repr(ms_optim.AdamOffload(params, moment_dtype="int8", adamw=True))
    assert text.endswith("impl='native', moment_dtype='int8', adamw=True, params=%d)" % len(params))
