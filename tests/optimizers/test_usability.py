"""What a user meets around the optimizers: recursion limit, argument names, learning rate helpers,
values that make no sense, and what runs (native_info, MS_OPTIM_ISA, repr)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mindspore as ms
from mindspore import Parameter, Tensor, context, nn
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

import ms_optim
from ms_optim import _native, dgc, reference
from ms_optim.clip import ClipGradByGlobalNorm

SHAPES = {"fc.weight": (7, 5), "fc.bias": (5,), "out.weight": (5, 3)}


def _params(seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [Parameter(Tensor(rng.standard_normal(s).astype(np.float32)), name=n)
            for n, s in shapes.items()]


def _grads(params, seed=1):
    rng = np.random.default_rng(seed)
    return tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32)) for p in params)


def _values(params):
    return [p.asnumpy().copy() for p in params]


class HalvingLR(LearningRateSchedule):
    def construct(self, global_step):
        return 0.02 / (1.0 + ms.ops.cast(global_step, ms.float32))


def _adam(params, **kw):
    return ms_optim.AdamOffload(params, **kw)


def _lamb(params, **kw):
    return ms_optim.Lamb(params, **kw)


def _dgc(params, **kw):
    kw.setdefault("learning_rate", 0.001)
    return ms_optim.DGCMomentum(params, momentum=0.9, rampup_begin_step=0, **kw)


BUILDERS = {"AdamOffload": _adam, "Lamb": _lamb, "DGCMomentum": _dgc}
builders = pytest.mark.parametrize("name", list(BUILDERS))


# ------------------------------------------------------ 1. recursion limit --

def test_dgc_raises_recursion_limit_without_set_context(monkeypatch, capfd):
    calls = []
    real = ms.set_recursion_limit
    monkeypatch.setattr(ms, "set_recursion_limit", lambda n: (calls.append(n), real(n))[1])

    def no_set_context(**kw):
        raise AssertionError(f"context.set_context({kw}) called")

    monkeypatch.setattr(context, "set_context", no_set_context)
    monkeypatch.setattr(ms, "set_context", no_set_context)
    monkeypatch.setattr(dgc, "_call_depth_set", 0)
    count = 80
    params = _params(shapes={f"w{i}": (3,) for i in range(count)})
    # impl="ops" steps each parameter in graph code (impl="native" needs no raise)
    ms_optim.DGCMomentum(params, learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                         impl="ops")
    assert calls == [1000 + 16 * count]
    assert dgc._call_depth_set == 1000 + 16 * count
    # never lowered: a smaller optimizer built afterwards leaves the limit alone
    ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=0,
                         impl="ops")
    assert calls == [1000 + 16 * count]
    err = capfd.readouterr().err
    assert "deprecated" not in err and "max_call_depth" not in err


def test_dgc_never_lowers_max_call_depth_of_context(monkeypatch):
    calls = []
    monkeypatch.setattr(ms, "set_recursion_limit", calls.append)
    monkeypatch.setattr(dgc, "_call_depth_set", 0)
    real_get = context.get_context
    monkeypatch.setattr(context, "get_context",
                        lambda key: 100000 if key == "max_call_depth" else real_get(key))
    ms_optim.DGCMomentum(_params(shapes={f"w{i}": (3,) for i in range(40)}), learning_rate=0.1,
                         momentum=0.9, rampup_begin_step=0, impl="ops")
    assert calls == []


# ------------------------------------------------------- 2. Lamb's names --

@pytest.mark.parametrize("key, own", [("weight_decay", "lamb_weight_decay"), ("eps", "epsilon")])
def test_lamb_mindspore_names_point_to_its_own(key, own):
    with pytest.raises(TypeError, match=f"'{key}'.*'{own}'"):
        ms_optim.Lamb(_params(), **{key: 0.1})


def test_lamb_unknown_keyword():
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        ms_optim.Lamb(_params(), momentum=0.9)


def test_lamb_group_weight_decay_still_works():
    params = _params()
    opt = ms_optim.Lamb([{"params": params[:1], "weight_decay": 0.5},
                         {"params": params[1:]}], learning_rate=0.01)
    want = _values(params)
    grads = _grads(params)
    opt(grads)
    # the group's 0.5 for the first parameter, Lamb's default 0.01 for the others
    for w, g, wd in zip(want, grads, [0.5, 0.01, 0.01]):
        reference.lamb_step(w, np.zeros_like(w), np.zeros_like(w), g.asnumpy(), 0.01, 0.9, 0.999,
                            1e-6, np.float32(0.9), np.float32(0.999), wd, False)
    for w, p in zip(want, params):
        np.testing.assert_allclose(p.asnumpy(), w, rtol=1e-6, atol=1e-7, err_msg=p.name)


# ---------------------------------------------------------- 3. learning rate --

@builders
def test_get_lr_is_mindspores(name):
    opt = BUILDERS[name](_params(), learning_rate=0.01)
    assert type(opt).get_lr is nn.Optimizer.get_lr
    assert isinstance(opt.get_lr(), Parameter)


@builders
def test_current_lr_and_set_lr_drive_training(name):
    params = _params()
    opt = BUILDERS[name](params, learning_rate=0.01)
    assert isinstance(opt.current_lr(), float)
    assert opt.current_lr() == pytest.approx(0.01)
    opt.set_lr(0)
    assert opt.current_lr() == 0.0
    before = _values(params)
    opt(_grads(params))
    for a, p in zip(before, params):
        np.testing.assert_array_equal(a, p.asnumpy())
    opt.set_lr(0.1)
    assert opt.current_lr() == pytest.approx(0.1)
    opt(_grads(params, seed=2))
    assert all(not np.array_equal(a, p.asnumpy()) for a, p in zip(before, params))


@builders
def test_set_lr_refuses_bad_values(name):
    opt = BUILDERS[name](_params(), learning_rate=0.01)
    for bad in ("0.1", True, None, Tensor(0.1)):
        with pytest.raises(TypeError, match=f"For '{name}', set_lr"):
            opt.set_lr(bad)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"For '{name}', set_lr"):
            opt.set_lr(bad)
    assert opt.current_lr() == pytest.approx(0.01)


@builders
@pytest.mark.parametrize("schedule", ["cell", "list"])
def test_set_lr_refuses_a_schedule(name, schedule):
    lr = HalvingLR() if schedule == "cell" else [0.02, 0.01, 0.005]
    params = _params()
    opt = BUILDERS[name](params, learning_rate=lr)
    assert opt.current_lr() == pytest.approx(0.02)
    opt(_grads(params))
    assert opt.current_lr() == pytest.approx(0.01)
    with pytest.raises(RuntimeError, match="schedule"):
        opt.set_lr(0.1)


@builders
def test_current_lr_and_set_lr_with_groups(name):
    params = _params()
    groups = [{"params": params[:1], "lr": 0.05}, {"params": params[1:2]},
              {"params": params[2:], "lr": 0.2}]
    opt = BUILDERS[name](groups, learning_rate=0.01)
    assert opt.current_lr() == pytest.approx([0.05, 0.01, 0.2])
    opt.set_lr(0.0)
    assert opt.current_lr() == [0.0, 0.0, 0.0]
    before = _values(params)
    opt(_grads(params))
    for a, p in zip(before, params):
        np.testing.assert_array_equal(a, p.asnumpy())
    # groups without their own 'lr': one float
    plain = BUILDERS[name]([{"params": params[:1]}, {"params": params[1:]}], learning_rate=0.03)
    assert plain.current_lr() == pytest.approx(0.03)


# ----------------------------------------------- 4. values that make no sense --

@pytest.mark.parametrize("name, key", [("AdamOffload", "eps"), ("Lamb", "epsilon")])
def test_eps_zero_in_float32(name, key):
    with pytest.raises(ValueError, match=f"For '{name}', the '{key}' .*float32"):
        BUILDERS[name](_params(), **{key: 1e-46})
    with pytest.raises(ValueError, match=f"'{key}'"):
        BUILDERS[name](_params(), **{key: 1e300})
    BUILDERS[name](_params(), **{key: 1e-40})  # subnormal but > 0 in float32: accepted


@pytest.mark.parametrize("momentum", [1, 1.0, 1.5])
def test_dgc_momentum_below_one(momentum):
    with pytest.raises(ValueError, match=r"For 'DGCMomentum', the 'momentum' must be in range "
                                         r"\[0.0, 1.0\)"):
        ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=momentum,
                             rampup_begin_step=0)
    ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.0, rampup_begin_step=0)


@builders
def test_same_parameter_twice(name):
    params = _params()
    with pytest.raises(ValueError, match=f"For '{name}', parameter 'fc.bias' is given twice"):
        BUILDERS[name](params + [params[1]])
    with pytest.raises(ValueError, match="'fc.weight' is given twice"):
        BUILDERS[name]([{"params": params}, {"params": params[:1], "lr": 0.1}])
    twin = Parameter(Tensor(np.zeros((5, 3), np.float32)), name="out.weight")
    with pytest.raises(ValueError, match="'out.weight' is given twice .*name"):
        BUILDERS[name](params + [twin])


def test_groups_given_as_generators():
    params = _params()
    opt = ms_optim.Lamb([{"params": (p for p in params[:1]), "lr": 0.1},
                         {"params": iter(params[1:])}])
    assert len(opt.parameters) == 3
    assert opt.current_lr() == pytest.approx([0.1, 0.001])


# -------------------------------------------------------------- 5. what runs --

def test_native_info():
    info = ms_optim.native_info()
    assert "native_info" in ms_optim.__all__
    assert set(info) == {"isa", "supported_isas", "kernel_threads", "library", "build_flags"}
    assert info["isa"] == _native.isa() and info["isa"] in info["supported_isas"]
    assert "scalar" in info["supported_isas"]
    assert set(info["supported_isas"]) <= {"scalar", "avx2", "avx512"}
    assert isinstance(info["kernel_threads"], int) and info["kernel_threads"] >= 1
    assert os.path.isfile(info["library"]) and info["library"] == _native.library_path()
    assert "-O3" in info["build_flags"] and "-mavx2" in info["build_flags"]


def test_select_isa_lists_the_names():
    supported = ", ".join(ms_optim.native_info()["supported_isas"])
    with pytest.raises(ValueError, match=rf"'avx3' is unknown \(valid names: scalar, avx2, "
                                         rf"avx512; this CPU supports: {supported}\)"):
        _native.select_isa("avx3")


@pytest.mark.parametrize("want", ["avx3", "avx512"])
def test_ms_optim_isa_env_lists_the_names(want):
    info = ms_optim.native_info()
    if want in info["supported_isas"]:
        pytest.skip(f"this CPU runs {want}")
    env = dict(os.environ, MS_OPTIM_ISA=want)
    out = subprocess.run([sys.executable, "-c",
                          "from ms_optim import _native; print(_native.isa())"],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    best = info["supported_isas"][-1]
    assert out.stdout.strip() == best
    why = "unknown" if want == "avx3" else "not supported by this CPU"
    assert (f"MS_OPTIM_ISA={want} is {why} (valid names: scalar, avx2, avx512; this CPU "
            f"supports: {', '.join(info['supported_isas'])}); using {best}") in out.stderr


def test_repr_shows_hyper_parameters():
    lamb = ms_optim.Lamb(_params(), grad_clip=ClipGradByGlobalNorm(1.0))
    assert repr(lamb) == ("Lamb(learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, "
                          "beta2=0.999, epsilon=1e-06, "
                          "grad_clip=ClipGradByGlobalNorm(clip_norm=1.0), "
                          "exclude_from_weight_decay_fn=None, always_adapt=False, "
                          "loss_scale=1.0, impl='native', params=3)")
    adam = ms_optim.AdamOffload(_params(), learning_rate=HalvingLR())
    assert repr(adam) == ("AdamOffload(learning_rate=HalvingLR, beta1=0.9, beta2=0.999, "
                          "eps=1e-08, use_nesterov=False, weight_decay=0.0, loss_scale=1.0, "
                          "impl='native', params=3)")
    opt = ms_optim.DGCMomentum(_params(), learning_rate=0.1, momentum=0.9, rampup_begin_step=5,
                               sparsity=[0.75, 0.999])
    assert repr(opt).startswith("DGCMomentum(learning_rate=0.1, momentum=0.9, "
                                "rampup_begin_step=5, rampup_step=1, sparsity=(0.75, 0.999), ")
    assert repr(opt).endswith("impl='native', exchange='auto', nranks=1, params=3)")
    assert str(opt) == repr(opt)
