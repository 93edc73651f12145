"""Cross-check ms_optim's numpy Lamb and clipping rules against PaddlePaddle itself.

Not part of the test suite (PaddlePaddle is not a dependency). Run it in an
environment that has paddlepaddle and numpy, from the repository root:

    python3 -m venv /tmp/pd && /tmp/pd/bin/pip install paddlepaddle==3.3.1 numpy
    /tmp/pd/bin/python -m tools.check_reference_against_paddle

Without PaddlePaddle it says how to get it and exits 2.

It trains the same parameters for a few steps with paddle.optimizer.Lamb and
with ms_optim/reference.py (loaded by path, so MindSpore is not needed) and
prints the largest relative difference per case; it exits 1 above 1e-5.
"""
import argparse
import importlib.util
import os
import sys
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALL_HINT = """\
tools.check_reference_against_paddle: PaddlePaddle is not installed in this Python ({python}).
It is not a dependency of ms_optim; install it in a separate venv and run this tool there:

    python3 -m venv /tmp/pd && /tmp/pd/bin/pip install paddlepaddle==3.3.1 numpy
    cd {root} && /tmp/pd/bin/python -m tools.check_reference_against_paddle"""


def import_paddle():
    """The paddle module, or exit 2 with how to install it."""
    try:
        import paddle
    except ModuleNotFoundError as exc:
        if exc.name != "paddle":
            raise
        print(INSTALL_HINT.format(python=sys.executable, root=ROOT), file=sys.stderr)
        sys.exit(2)
    return paddle


# reference.py (numpy alone) is loaded from the package's folder under a package of its own,
# so ms_optim/__init__.py (MindSpore) never runs.
_pkg = types.ModuleType("ms_optim_ref")
_pkg.__path__ = [os.path.join(ROOT, "ms_optim")]
sys.modules["ms_optim_ref"] = _pkg
spec = importlib.util.spec_from_file_location(
    "ms_optim_ref.reference", os.path.join(ROOT, "ms_optim", "reference.py"))
reference = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = reference
spec.loader.exec_module(reference)

SHAPES = {"w": (37, 11), "b": (11,), "zero": (5, 3)}
STEPS = 6


def run_case(paddle, name, clip, wd=0.01, always_adapt=False, exclude_b=True):
    rng = np.random.default_rng(0)
    init = {k: (np.zeros(s, np.float32) if k == "zero" else rng.standard_normal(s).astype(np.float32))
            for k, s in SHAPES.items()}
    grads = [{k: (rng.standard_normal(s) * 3).astype(np.float32) for k, s in SHAPES.items()}
             for _ in range(STEPS)]

    params = {k: paddle.create_parameter(list(v.shape), "float32", name=f"{name}.{k}",
                                         default_initializer=paddle.nn.initializer.Assign(v))
              for k, v in init.items()}
    pd_clip = {"none": None, "global": paddle.nn.ClipGradByGlobalNorm(2.0),
               "norm": paddle.nn.ClipGradByNorm(1.5),
               "value": paddle.nn.ClipGradByValue(0.4, -0.3)}[clip]
    opt = paddle.optimizer.Lamb(learning_rate=0.01, lamb_weight_decay=wd, epsilon=1e-6,
                                parameters=list(params.values()), grad_clip=pd_clip,
                                exclude_from_weight_decay_fn=(lambda p: p.name.endswith(".b")) if exclude_b else None,
                                always_adapt=always_adapt)
    for g in grads:
        for k, p in params.items():
            p.grad = paddle.to_tensor(g[k])
        opt.step()
        opt.clear_grad()

    state = {k: (v.copy(), np.zeros_like(v), np.zeros_like(v)) for k, v in init.items()}
    for t, g in enumerate(grads, start=1):
        gs = [g[k] for k in SHAPES]
        kw = {}
        if clip == "global":
            gs = reference.clip_by_global_norm(gs, 2.0)
        elif clip == "norm":
            kw = dict(clip_norm=1.5)
        elif clip == "value":
            kw = dict(clip_lo=-0.3, clip_hi=0.4)
        for k, gk in zip(SHAPES, gs):
            p, m, v = state[k]
            reference.lamb_step(p, m, v, gk, 0.01, 0.9, 0.999, 1e-6, np.float32(0.9) ** t,
                                np.float32(0.999) ** t, 0.0 if (exclude_b and k == "b") else wd,
                                always_adapt, **kw)
    worst = 0.0
    for k in SHAPES:
        a, b = params[k].numpy(), state[k][0]
        worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)))
    print(f"{name:28s} max |paddle - reference| / max|paddle| = {worst:.2e}")
    return worst


def main(argv=None):
    argparse.ArgumentParser(prog="python -m tools.check_reference_against_paddle",
                            description=__doc__.split("\n\n")[0]).parse_args(argv)
    paddle = import_paddle()
    paddle.set_device("cpu")
    cases = [("plain", "none"), ("clip by global norm", "global"), ("clip by norm", "norm"),
             ("clip by value", "value")]
    worst = max(run_case(paddle, n, c) for n, c in cases)
    worst = max(worst, run_case(paddle, "no decay", "none", wd=0.0, exclude_b=False))
    worst = max(worst, run_case(paddle, "no decay, always_adapt", "none", wd=0.0,
                                always_adapt=True))
    print(f"paddle {paddle.__version__}: worst {worst:.2e} ({'OK' if worst <= 1e-5 else 'MISMATCH'})")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
