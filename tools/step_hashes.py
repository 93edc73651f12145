"""A digest of every optimizer configuration's bits, to show that a change moves none.

Each configuration (optimizer, implementation, moment storage, options) trains a small
network with ResNet-like tensor sizes (compressed and dense ones for DGC, float16 for
AdamOffload's float16 case) for a few steps on fixed data, and its parameters and state
after them are hashed (SHA-256 of the raw bytes).  Run it on two checkouts (each with its
own build) and compare the lines:

    python -m tools.step_hashes --isa avx2 > after.txt

``--isa`` forces one instruction set of the native kernels (MS_OPTIM_ISA); run it once per
ISA the CPU has.  A configuration the checkout lacks prints "missing".
"""
import argparse
import hashlib
import os
import sys

CONFIGS = {}


def config(name):
    def add(fn):
        CONFIGS[name] = fn
        return fn
    return add


def _params(ms, np, dtype="float32"):
    rng = np.random.default_rng(0)
    shapes = [(130, 129), (20000,), (7, 3), (11,), (300, 64), (64,)]
    return [ms.Parameter(ms.Tensor(rng.standard_normal(s).astype(dtype)), name=f"p{i}.weight")
            for i, s in enumerate(shapes)]


def _state(opt):
    names = ("moment1", "moment2", "moment1_scale", "moment2_scale", "moment", "moment_scale",
             "beta1_power", "beta2_power", "u", "v")
    out = []
    for n in names:
        v = getattr(opt, n, None)
        if v is None:
            continue
        out.extend(v if isinstance(v, (tuple, list)) or hasattr(v, "__len__") and
                   not hasattr(v, "asnumpy") else [v])
    return out


def _digest(params, state):
    h = hashlib.sha256()
    for p in list(params) + list(state):
        h.update(p.asnumpy().tobytes())
    return h.hexdigest()[:16]


def _run(make, dtype="float32", steps=6):
    import mindspore as ms
    import numpy as np

    params = _params(ms, np, dtype)
    opt = make(params)
    np_dtype = np.float16 if dtype == "float16" else np.float32
    for t in range(steps):
        rng = np.random.default_rng(100 + t)
        opt(tuple(ms.Tensor((rng.standard_normal(p.shape) * 0.5).astype(np_dtype))
                  for p in params))
    return _digest(params, _state(opt))


def _host_moment_configs(name, options):
    """One configuration of optimizer `name` (AdamOffload or Lion, learning rate 0.01) per
    moment storage, path and entry of `options` ((label, keywords) pairs)."""
    def make(**kw):
        def build(p):
            import ms_optim
            return getattr(ms_optim, name)(p, learning_rate=0.01, **kw)
        return build

    for md in ("float32", "bfloat16", "int8"):
        for impl in ("native", "delta"):
            for label, kw in options:
                config(f"{name}-{md}-{impl}-{label}")(
                    (lambda kw: lambda: _run(make(**kw)))(dict(moment_dtype=md, impl=impl, **kw)))
    return make


_adam = _host_moment_configs("AdamOffload", (
    ("plain", {}), ("nesterov_wd", dict(use_nesterov=True, weight_decay=0.01)),
    ("adamw", dict(adamw=True, weight_decay=0.01)), ("loss_scale", dict(loss_scale=4.0))))
config("AdamOffload-float16-native")(lambda: _run(_adam(weight_decay=0.01), "float16"))
_host_moment_configs("Lion", (("plain", {}), ("wd", dict(weight_decay=0.1)),
                              ("loss_scale", dict(loss_scale=4.0))))


def _lamb(impl, clip):
    def make(p):
        import ms_optim
        from ms_optim import clip as c
        clips = {"none": None, "global": c.ClipGradByGlobalNorm(2.0),
                 "norm": c.ClipGradByNorm(1.5), "value": c.ClipGradByValue(0.4, -0.3)}
        return ms_optim.Lamb(p, learning_rate=0.01, lamb_weight_decay=0.02, grad_clip=clips[clip],
                             loss_scale=4.0, impl=impl)
    return make


for _impl in ("native", "ops"):
    for _clip in ("none", "global", "norm", "value"):
        config(f"Lamb-{_impl}-{_clip}")((lambda a: lambda: _run(_lamb(*a)))((_impl, _clip)))


def _dgc(impl, **kw):
    def make(p):
        import ms_optim
        return ms_optim.DGCMomentum(p, 0.05, 0.9, rampup_begin_step=2, rampup_step=3,
                                    sparsity=[0.75, 0.9, 0.99], impl=impl, **kw)
    return make


def _dgc_options():
    from ms_optim.clip import ClipGradByNorm
    from ms_optim.regularizer import L1Decay, L2Decay
    return {"plain": {}, "nesterov_clip": dict(use_nesterov=True, local_grad_clip_norm=20.0),
            "grad_clip_l1": dict(grad_clip=ClipGradByNorm(20.0), regularization=L1Decay(1e-3)),
            "l2_loss_scale": dict(regularization=L2Decay(1e-2), loss_scale=8.0),
            "weight_decay": dict(weight_decay=1e-2), "bucket": dict(bucket_sparsity=0.9)}


for _impl in ("native", "ops"):
    for _name in ("plain", "nesterov_clip", "grad_clip_l1", "l2_loss_scale", "weight_decay",
                  "bucket"):
        config(f"DGCMomentum-{_impl}-{_name}")(
            (lambda a: lambda: _run(_dgc(a[0], **_dgc_options()[a[1]])))((_impl, _name)))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.step_hashes",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", choices=("scalar", "avx2", "avx512"), help="force one ISA")
    ap.add_argument("--only", default="", help="configurations whose name contains this")
    args = ap.parse_args(argv)
    if args.isa:
        os.environ["MS_OPTIM_ISA"] = args.isa
    import warnings
    warnings.filterwarnings("ignore")
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    for name, run in CONFIGS.items():
        if args.only not in name:
            continue
        try:
            print(f"{name} {run()}", flush=True)
        except Exception as exc:  # a configuration this checkout lacks or refuses
            print(f"{name} missing ({type(exc).__name__}: {str(exc).splitlines()[0][:80]})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
