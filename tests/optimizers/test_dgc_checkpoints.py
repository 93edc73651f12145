"""DGCMomentum checkpoints across world sizes and settings: ms_optim.dgc.resize_checkpoints
and the step's refusal of residuals saved by another number of workers, or that this run
would drop or read as the other kind (tests/distributed/test_dgc_msrun.py saves at 4 workers
and resumes at 2 and 8)."""
import numpy as np
import pytest

import mindspore as ms
from mindspore import Tensor, nn

import ms_optim
from ms_optim import dgc
from tests.nets import WideNet

CONFIG = dict(learning_rate=0.05, momentum=0.9, rampup_begin_step=0, sparsity=[0.99])


def _net_and_opt(**settings):
    ms.set_seed(0)
    net = WideNet(n_in=16, hidden=1100, n_out=4)
    return net, ms_optim.DGCMomentum(net.trainable_params(), **CONFIG, **settings)


def _grads(net, seed):
    rng = np.random.default_rng(seed)
    return tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32))
                 for p in net.trainable_params())


@pytest.fixture
def saved_by_4(tmp_path):
    """Four workers' checkpoints of one step, as a 4-worker run saves them: the same model,
    each worker's own residuals, dgc_world_size 4."""
    net, opt = _net_and_opt()
    opt(_grads(net, 0))
    paths = []
    for rank in range(4):
        for i, r in enumerate(tuple(opt.u) + tuple(opt.v)):
            rng = np.random.default_rng(10 * rank + i)
            r.set_data(Tensor(rng.standard_normal(r.shape).astype(np.float32)))
        opt.world_size.set_data(Tensor(np.array([4], np.int32)))
        opt.saved_rank.set_data(Tensor(np.array([rank], np.int32)))
        paths.append(str(tmp_path / f"rank{rank}.ckpt"))
        ms.save_checkpoint(opt, paths[-1])
    return paths


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_resize_keeps_the_pending_update(saved_by_4, tmp_path, workers):
    files = dgc.resize_checkpoints(saved_by_4, workers, str(tmp_path / "new" / "r{rank}.ckpt"))
    assert files == [str(tmp_path / "new" / f"r{r}.ckpt") for r in range(workers)]
    old = [ms.load_checkpoint(f) for f in saved_by_4]
    new = [ms.load_checkpoint(f) for f in files]
    assert set(new[0]) == set(old[0])
    for key in old[0]:
        if key.startswith(("dgc_u.", "dgc_v.")):
            # what the exchange applies, the sum over workers / the world size, is unchanged
            before = sum(c[key].asnumpy().astype(np.float64) for c in old) / 4
            after = sum(c[key].asnumpy().astype(np.float64) for c in new) / workers
            np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7, err_msg=key)
            for c in new:
                np.testing.assert_array_equal(c[key].asnumpy(), new[0][key].asnumpy())
        elif key == "dgc_world_size":
            assert [int(c[key].asnumpy()[0]) for c in new] == [workers] * workers
        elif key == "dgc_rank":  # each file is the state of the rank that loads it
            assert [int(c[key].asnumpy()[0]) for c in new] == list(range(workers))
        else:  # the model and the rest of the state: rank 0's
            for c in new:
                np.testing.assert_array_equal(c[key].asnumpy(), old[0][key].asnumpy(),
                                              err_msg=key)


def test_resized_state_resumes_and_steps(saved_by_4, tmp_path):
    (one,) = dgc.resize_checkpoints(saved_by_4, 1, str(tmp_path / "new" / "rank{rank}.ckpt"))
    net, opt = _net_and_opt()
    ms.load_param_into_net(opt, ms.load_checkpoint(one))
    old = [ms.load_checkpoint(f) for f in saved_by_4]
    mean = sum(c["dgc_v.fc1.weight"].asnumpy().astype(np.float64) for c in old) / 4
    np.testing.assert_allclose(opt.v[0].asnumpy(), mean, rtol=1e-6, atol=1e-7)
    opt(_grads(net, 1))
    assert np.isfinite(net.trainable_params()[0].asnumpy()).all()


# Where a refusal is checked: called from Python (a ValueError) and in a compiled train
# step (the step's own check fails).  Every cause is refused both ways; the default tier
# compiles a train step for one cause (another world size), the slow tier for the others.
BOTH_WAYS = ["python", "compiled"]
COMPILED_IN_SLOW_TIER = ["python", pytest.param("compiled", marks=pytest.mark.slow)]


def _assert_refused(net, opt, message, native_message, where):
    """The optimizer refuses its state: called from Python (`where` "python"), a ValueError
    matching `message`; compiled into a train step ("compiled"), the step's own check fails
    with the same words (`native_message`, part of the kernel's message, which the
    ValueError carries); and nothing is applied, nor counted as a step."""
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    step = int(opt.global_step.asnumpy()[0])
    if where == "python":
        with pytest.raises(ValueError, match=message):
            opt(_grads(net, 1))
    else:
        cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
        with pytest.raises(RuntimeError, match="ms_optim_check_replicas"):
            cell(Tensor(np.ones((2, 16), np.float32)), Tensor(np.zeros((2, 4), np.float32)))
        assert native_message in ms_optim.last_native_error()
    for p, b in zip(net.trainable_params(), before):
        np.testing.assert_array_equal(p.asnumpy(), b)
    assert int(opt.global_step.asnumpy()[0]) == step


@pytest.mark.parametrize("where", BOTH_WAYS)
def test_residuals_of_another_world_size_are_refused(saved_by_4, where):
    net, opt = _net_and_opt()
    ms.load_param_into_net(opt, ms.load_checkpoint(saved_by_4[0]))
    _assert_refused(net, opt, r"holds the residuals of 4 worker\(s\) and this run has 1: "
                              r"convert the checkpoints with ms_optim.dgc.resize_checkpoints"
                              r"\(files, world_size=1, dest=...\) and load those",
                    "holds the residuals of 4 worker(s)", where)


@pytest.mark.parametrize("where", COMPILED_IN_SLOW_TIER)
def test_another_ranks_state_is_refused(saved_by_4, tmp_path, where):
    """A worker that loads another rank's checkpoint (here rank 1's, in a run of one, after
    converting the world size) refuses to step: its own residuals would be lost and the
    other's applied twice."""
    (one,) = dgc.resize_checkpoints(saved_by_4, 1, str(tmp_path / "new" / "rank{rank}.ckpt"))
    net, opt = _net_and_opt()
    state = ms.load_checkpoint(one)
    state["dgc_rank"] = ms.Parameter(Tensor(np.array([1], np.int32)), name="dgc_rank")
    ms.load_param_into_net(opt, state)
    _assert_refused(net, opt, r"^For 'DGCMomentum', rank 0's optimizer state holds the "
                              r"residuals of rank 1: load each worker's own checkpoint",
                    "rank 0's optimizer state holds the residuals of rank 1", where)


def test_a_state_saved_without_its_rank_is_the_loading_workers(tmp_path):
    net, opt = _net_and_opt()
    opt(_grads(net, 0))
    path = str(tmp_path / "old.ckpt")
    ms.save_checkpoint(opt, path)
    state = ms.load_checkpoint(path)
    del state["dgc_rank"]
    net2, opt2 = _net_and_opt()
    ms.load_param_into_net(opt2, state)
    opt2(_grads(net2, 1))
    assert int(opt2.global_step.asnumpy()[0]) == 2


def test_resize_refuses_sources_out_of_rank_order(saved_by_4, tmp_path):
    swapped = [saved_by_4[1], saved_by_4[0]] + saved_by_4[2:]
    with pytest.raises(ValueError, match=r"holds the residuals of rank 1, but is sources\[0\]: "
                                         r"give each worker's checkpoint once, in rank order"):
        dgc.resize_checkpoints(swapped, 2, str(tmp_path / "new" / "rank{rank}.ckpt"))
    with pytest.raises(ValueError, match=r"holds the residuals of rank 0, but is sources\[1\]"):
        dgc.resize_checkpoints([saved_by_4[0]] * 4, 2, str(tmp_path / "new" / "rank{rank}.ckpt"))


def test_resize_refuses_sources_of_different_steps(saved_by_4, tmp_path):
    """Checkpoints of one save hold one global_step; a worker's file of another step (a
    stale one, or another run's) is refused, not merged under rank 0's step."""
    state = ms.load_checkpoint(saved_by_4[2])
    assert int(state["global_step"].asnumpy().reshape(-1)[0]) == 1
    state["global_step"] = ms.Parameter(ms.Tensor(np.array([7], np.int32)), name="global_step")
    stale = str(tmp_path / "stale2.ckpt")
    ms.save_checkpoint([{"name": k, "data": v} for k, v in state.items()], stale)
    sources = saved_by_4[:2] + [stale] + saved_by_4[3:]
    with pytest.raises(ValueError, match=r"the checkpoints' global_step differ \(\[1\] in .*, "
                                         r"\[7\] in .*stale2.ckpt'\): they are not one save's"):
        dgc.resize_checkpoints(sources, 2, str(tmp_path / "new" / "rank{rank}.ckpt"))


# the settings that give WideNet's parameters (fc1.weight compressed; fc1.bias, fc2.weight,
# fc2.bias small) their residual kinds: 0 none (sent dense), 1 gradients, 2 learning-rate-
# scaled gradients
SETTINGS = {
    "default": ({}, [1, 0, 0, 0]),
    "lr_in_residuals": ({"lr_in_residuals": True}, [2, 0, 0, 0]),
    "bucket": ({"bucket_sparsity": 0.5}, [1, 1, 1, 1]),
    "bucket, lr_in_residuals": ({"bucket_sparsity": 0.5, "lr_in_residuals": True}, [2, 2, 2, 2]),
    "dense_params": ({"dense_params": ["fc1.weight"]}, [0, 0, 0, 0]),
    "dense_params, lr_in_residuals": ({"dense_params": ["fc1.weight"], "lr_in_residuals": True},
                                      [0, 0, 0, 0]),
    "bucket, lr_in_residuals, dense_params": ({"bucket_sparsity": 0.5, "lr_in_residuals": True,
                                               "dense_params": ["fc1.bias"]}, [2, 0, 2, 2]),
}
KIND_WORDS = ("no residuals", "residuals of gradients",
              "residuals of learning-rate-scaled gradients")


def _saved_state(tmp_path, name):
    """A checkpoint of the optimizer with SETTINGS[name] after two steps (the bucket's v
    holds entries it has not sent)."""
    net, opt = _net_and_opt(**SETTINGS[name][0])
    opt(_grads(net, 0))
    opt(_grads(net, 1))
    path = str(tmp_path / "saved.ckpt")
    ms.save_checkpoint(opt, path)
    return path


# (saved, resumed) pairs of the default tier, seconds each: two settings resumed as they
# were, one that starts compressing a parameter sent dense, and one refusal of each cause
# (the other kind of residuals, a bucket dropped, a parameter newly sent dense); the other
# pairs are in the slow tier.
DEFAULT_TIER_RESUMES = {("default", "default"), ("bucket, lr_in_residuals, dense_params",) * 2,
                        ("dense_params", "default"), ("lr_in_residuals", "default"),
                        ("bucket", "default"), ("default", "dense_params")}


@pytest.mark.parametrize("saved, resumed", [
    pytest.param(saved, resumed, marks=() if (saved, resumed) in DEFAULT_TIER_RESUMES
                 else pytest.mark.slow, id=f"{resumed}-{saved}")
    for saved in sorted(SETTINGS) for resumed in sorted(SETTINGS)])
def test_resuming_with_other_settings(saved, resumed, tmp_path):
    """A state steps under settings whose residuals are of its kinds, or that start
    compressing a parameter it sent dense (its momentum carries over). Residuals that the
    run would drop (a bucket no longer there) or read as the other kind (learning rate
    folded in or not) are refused, the ValueError naming the first such parameter and the
    settings to resume with."""
    path = _saved_state(tmp_path, saved)
    kinds, mine = SETTINGS[saved][1], SETTINGS[resumed][1]
    assert ms.load_checkpoint(path)["dgc_residual_kind"].asnumpy().tolist() == kinds
    net, opt = _net_and_opt(**SETTINGS[resumed][0])
    ms.load_param_into_net(opt, ms.load_checkpoint(path))
    refused = [i for i, (k, m) in enumerate(zip(kinds, mine))
               if k != m and not (k == 0 and m == 1)]
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    if not refused:
        opt(_grads(net, 2))
        assert any((p.asnumpy() != b).any() for p, b in zip(net.trainable_params(), before))
        return
    first = refused[0]
    name = net.trainable_params()[first].name
    now = ("this run sends it dense, which would drop the update they hold" if mine[first] == 0
           else f"this run would step {KIND_WORDS[mine[first]]}")
    bucket = "a bucket_sparsity" if any(kinds[1:]) else "bucket_sparsity=None"  # small ones
    asked = name in SETTINGS[resumed][0].get("dense_params", ())
    was_dense = kinds[first] == 0 and first == 0   # fc1.weight: large, dense only if asked
    dense = (f", without '{name}' in dense_params" if asked
             else f", with '{name}' in dense_params" if was_dense else "")
    step = int(opt.global_step.asnumpy()[0])
    with pytest.raises(ValueError) as info:
        opt(_grads(net, 2))
    assert int(opt.global_step.asnumpy()[0]) == step
    assert str(info.value) == (
        f"For 'DGCMomentum', the optimizer state holds {KIND_WORDS[kinds[first]]} for parameter "
        f"'{name}' and {now}: construct the optimizer with lr_in_residuals="
        f"{2 in kinds} and {bucket}{dense}, as the state was saved, to resume "
        f"from it "
        f"(docs/dgc.md#resuming-with-other-settings).")
    for p, b in zip(net.trainable_params(), before):
        np.testing.assert_array_equal(p.asnumpy(), b)


@pytest.mark.parametrize("where", COMPILED_IN_SLOW_TIER)
def test_a_bucket_resumed_without_it_is_refused(tmp_path, where):
    """The small parameters' residuals v, saved with the bucket, would be dropped by a run
    that sends them dense: refused in a compiled train step too, with the kernel's message."""
    path = _saved_state(tmp_path, "bucket")
    assert np.abs(ms.load_checkpoint(path)["dgc_v.fc1.bias"].asnumpy()).sum() > 0
    net, opt = _net_and_opt()
    ms.load_param_into_net(opt, ms.load_checkpoint(path))
    _assert_refused(net, opt, r"holds residuals of gradients for parameter 'fc1.bias' and this "
                              r"run sends it dense, which would drop the update they hold: "
                              r"construct the optimizer with lr_in_residuals=False and a "
                              r"bucket_sparsity",
                    "holds residuals of gradients for parameter 'fc1.bias' and this run sends "
                    "it dense, which would drop the update they hold", where)


@pytest.mark.parametrize("where", COMPILED_IN_SLOW_TIER)
@pytest.mark.parametrize("saved", [True, False])
def test_residuals_of_the_other_lr_in_residuals_are_refused(saved, tmp_path, where):
    """Residuals of learning-rate-scaled gradients stepped as gradients (or the reverse)
    would apply every pending entry at lr times, or 1/lr times, its size: refused."""
    path = _saved_state(tmp_path, "lr_in_residuals" if saved else "default")
    net, opt = _net_and_opt(lr_in_residuals=not saved)
    ms.load_param_into_net(opt, ms.load_checkpoint(path))
    kinds = ("residuals of gradients", "residuals of learning-rate-scaled gradients")
    _assert_refused(net, opt, rf"holds {kinds[saved]} for parameter 'fc1.weight' and this run "
                              rf"would step {kinds[not saved]}: construct the optimizer with "
                              rf"lr_in_residuals={saved} and bucket_sparsity=None",
                    f"holds {kinds[saved]} for parameter 'fc1.weight'", where)


def test_a_bucket_started_on_resume_carries_the_momentum(tmp_path):
    """Saved without the bucket, the small parameters' u is the momentum of the mean
    gradient; a run that buckets them starts from it, as at rampup_begin_step, with v at 0.
    From its first step the state records the bucket's kinds, so its own checkpoint, whose
    small parameters' v now hold updates, is refused by a run without the bucket."""
    path = _saved_state(tmp_path, "default")
    saved = ms.load_checkpoint(path)
    net, opt = _net_and_opt(bucket_sparsity=0.5)
    ms.load_param_into_net(opt, saved)
    for u in opt.u:
        np.testing.assert_array_equal(u.asnumpy(), saved[u.name].asnumpy())
    assert all(not v.asnumpy().any() for v in opt.bucket_v)
    assert not any(v.name in saved for v in opt.bucket_v)
    opt(_grads(net, 2))
    again = str(tmp_path / "again.ckpt")
    ms.save_checkpoint(opt, again)
    assert ms.load_checkpoint(again)["dgc_residual_kind"].asnumpy().tolist() == [1, 1, 1, 1]
    net, opt = _net_and_opt()
    ms.load_param_into_net(opt, ms.load_checkpoint(again))
    with pytest.raises(ValueError, match="'fc1.bias' and this run sends it dense"):
        opt(_grads(net, 3))


@pytest.mark.parametrize("where", COMPILED_IN_SLOW_TIER)
def test_an_unknown_residual_kind_is_refused(tmp_path, where):
    """A kind DGCMomentum does not write (an edited checkpoint) is a ValueError naming the
    entry and the parameter, from Python, and the kernel's error in a compiled step; both
    before the other kind of fc1.weight, as the kernel checks every kind first."""
    state = ms.load_checkpoint(_saved_state(tmp_path, "default"))
    state["dgc_residual_kind"] = ms.Parameter(Tensor(np.array([2, 5, 0, 0], np.int32)),
                                              name="dgc_residual_kind")
    net, opt = _net_and_opt()
    ms.load_param_into_net(opt, state)
    _assert_refused(net, opt, r"^For 'DGCMomentum', the optimizer state's dgc_residual_kind of "
                              r"parameter 'fc1.bias' is 5, not a residual kind \(0, 1 or 2\)",
                    "dgc_residual_kind of parameter 'fc1.bias' is 5, not a residual kind", where)


def test_the_workers_signature_includes_what_folds():
    """Workers that fold the rate differently would exchange differently scaled values:
    their model signatures differ, so the first step refuses (tests/distributed covers the
    refusal). With nothing compressed nothing folds, but the setting differs, and the
    signature holds every setting; the same build gives the same signature."""
    def signature(**settings):
        return _net_and_opt(**settings)[1].replicas.signature.asnumpy().tolist()
    assert signature(lr_in_residuals=True) != signature(lr_in_residuals=False)
    assert signature(lr_in_residuals=True) == signature(lr_in_residuals=True)
    sigs = [ms_optim.DGCMomentum(nn.Dense(4, 3).trainable_params(), lr_in_residuals=fold,
                                 **CONFIG).replicas.signature.asnumpy().tolist()
            for fold in (True, False, False)]
    assert sigs[0] != sigs[1] == sigs[2]


def test_resize_rejects_bad_input(saved_by_4, tmp_path):
    dest = str(tmp_path / "r{rank}.ckpt")
    with pytest.raises(TypeError, match="'sources' must be a list or tuple"):
        dgc.resize_checkpoints(saved_by_4[0], 2, dest)
    with pytest.raises(ValueError, match="'sources' must name one checkpoint per worker"):
        dgc.resize_checkpoints([], 2, dest)
    with pytest.raises(TypeError, match="'world_size' must be an int"):
        dgc.resize_checkpoints(saved_by_4, 2.0, dest)
    with pytest.raises(ValueError, match="'world_size' must be greater than 0"):
        dgc.resize_checkpoints(saved_by_4, 0, dest)
    with pytest.raises(TypeError, match="'dest' must be a str"):
        dgc.resize_checkpoints(saved_by_4, 2, None)
    with pytest.raises(ValueError, match=r"'dest' must contain '\{rank\}'"):
        dgc.resize_checkpoints(saved_by_4, 2, str(tmp_path / "one.ckpt"))
    with pytest.raises(ValueError, match="'dest' would overwrite the source checkpoint"):
        dgc.resize_checkpoints(saved_by_4, 2, str(tmp_path / "rank{rank}.ckpt"))
    with pytest.raises(ValueError, match="does not exist"):
        dgc.resize_checkpoints(saved_by_4[:3] + [str(tmp_path / "missing.ckpt")], 2, dest)
    # 3 of a 4-worker run's files: a missing worker's residuals would be lost
    with pytest.raises(ValueError, match=r"was saved by 4 worker\(s\), but 'sources' names 3"):
        dgc.resize_checkpoints(saved_by_4[:3], 2, dest)
    net = nn.Dense(3, 2)
    ms.save_checkpoint(net, str(tmp_path / "dense.ckpt"))
    with pytest.raises(ValueError, match="hold different entries"):
        dgc.resize_checkpoints(saved_by_4[:1] + [str(tmp_path / "dense.ckpt")], 2, dest)
    with pytest.raises(ValueError, match="holds no DGCMomentum residuals"):
        dgc.resize_checkpoints([str(tmp_path / "dense.ckpt")], 2, dest)
    # one run's files, but in one the compressed parameter folds the learning rate
    mixed = ms.load_checkpoint(saved_by_4[3])
    mixed["dgc_residual_kind"] = ms.Parameter(Tensor(np.array([2, 0, 0, 0], np.int32)),
                                              name="dgc_residual_kind")
    ms.save_checkpoint(list(mixed.values()), str(tmp_path / "mixed.ckpt"))
    with pytest.raises(ValueError, match="the checkpoints' dgc_residual_kind differ"):
        dgc.resize_checkpoints(saved_by_4[:3] + [str(tmp_path / "mixed.ckpt")], 2, dest)


def test_resize_conserves_the_bucket(tmp_path):
    """With bucket_sparsity the small parameters' residuals v are checkpointed too
    (``dgc_v.<name>``), and resizing conserves them as it does the large ones'."""
    ms.set_seed(0)
    net = WideNet(n_in=16, hidden=1100, n_out=4)
    opt = ms_optim.DGCMomentum(net.trainable_params(), bucket_sparsity=0.5, **CONFIG)
    assert [v.name for v in opt.bucket_v] == ["dgc_v.fc1.bias", "dgc_v.fc2.weight",
                                              "dgc_v.fc2.bias"]
    opt(_grads(net, 0))
    paths = []
    for rank in range(4):
        for i, r in enumerate(tuple(opt.u) + tuple(opt.v) + tuple(opt.bucket_v)):
            rng = np.random.default_rng(10 * rank + i)
            r.set_data(Tensor(rng.standard_normal(r.shape).astype(np.float32)))
        opt.world_size.set_data(Tensor(np.array([4], np.int32)))
        opt.saved_rank.set_data(Tensor(np.array([rank], np.int32)))
        paths.append(str(tmp_path / f"rank{rank}.ckpt"))
        ms.save_checkpoint(opt, paths[-1])
    (one,) = dgc.resize_checkpoints(paths, 1, str(tmp_path / "new" / "rank{rank}.ckpt"))
    old = [ms.load_checkpoint(f) for f in paths]
    ms.load_param_into_net(opt, ms.load_checkpoint(one))
    for v in opt.bucket_v:
        mean = sum(c[v.name].asnumpy().astype(np.float64) for c in old) / 4
        np.testing.assert_allclose(v.asnumpy(), mean, rtol=1e-6, atol=1e-7, err_msg=v.name)
    opt(_grads(net, 1))
    assert all(np.isfinite(p.asnumpy()).all() for p in net.trainable_params())


def test_a_classifier_compressed_then_sent_dense_by_auto_is_refused(tmp_path):
    """A state whose small last layer was compressed (a fixed sparsity) would lose the
    update its residuals hold under sparsity="auto", which sends that layer dense: refused,
    naming dense_params=[] (with it the same state steps)."""
    shapes = [(2048, 2048), (16, 1024)]   # the last: 16,384 of 4,210,688 elements, 0.39%

    def params():
        return [ms.Parameter(Tensor(np.full(s, 0.5, np.float32)), name=f"w{i}")
                for i, s in enumerate(shapes)]

    def grads(seed):
        rng = np.random.default_rng(seed)
        return tuple(Tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes)

    # the state's residual kinds decide, not the values its residuals hold
    path = str(tmp_path / "fixed.ckpt")
    ms.save_checkpoint(ms_optim.DGCMomentum(params(), **CONFIG), path)
    assert ms.load_checkpoint(path)["dgc_residual_kind"].asnumpy().tolist() == [1, 1]
    auto = dict(CONFIG, sparsity="auto")
    opt = ms_optim.DGCMomentum(params(), **auto)
    assert opt.compressed_params == ["w0"]
    ms.load_param_into_net(opt, ms.load_checkpoint(path))
    with pytest.raises(ValueError) as info:
        opt(grads(0))
    assert str(info.value) == (
        "For 'DGCMomentum', the optimizer state holds residuals of gradients for parameter "
        "'w1' and this run sends it dense, which would drop the update they hold: construct "
        "the optimizer with lr_in_residuals=False and bucket_sparsity=None, with "
        "dense_params=[] (sparsity=\"auto\" sends 'w1' dense without it), as the state was "
        "saved, to resume from it (docs/dgc.md#resuming-with-other-settings).")
    opt = ms_optim.DGCMomentum(params(), **auto, dense_params=[])
    assert opt.compressed_params == ["w0", "w1"]
    ms.load_param_into_net(opt, ms.load_checkpoint(path))
    opt(grads(0))
    assert int(opt.global_step.asnumpy()[0]) == 1
