"""What int8 moment codes do to the quantities Adam uses, on real training.

A task of tools.fidelity_tasks trains with float32 moments (PyNative,
``ms.value_and_grad`` and ``AdamOffload``).  Its gradients, step by step, are
also fed to moments kept in numpy three ways: float32 (the baseline), int8
rounded to nearest, and int8 rounded stochastically (the library's rule,
reference.adam_compact_step's).  Every --every steps it reports, for each int8
rounding against float32:

- ``log v``: the mean of log(v_int8 / v_float32) over elements with v > 0, and
  apart for the elements within 16x of their block's absmax ("large") and the
  others ("small"; a 3-bit mantissa rounds them hardest relative to the block);
- ``m slope``: the least-squares slope of m_int8 on m_float32 (1: no shrink);
- ``step``: the length of the bias-corrected Adam step m_hat / (sqrt(v_hat) + eps)
  against float32's, and the cosine of the angle between them.

Only the moments differ between the three: each is updated from the same
gradients, so the figures isolate the storage.  Run from the repository root:

    python -m tools.int8_bias                     # the autoencoder, seed 0
    python -m tools.int8_bias --task convnet --steps 300 --seed 1
"""
import argparse
import itertools
import sys

import numpy as np

import mindspore as ms

import ms_optim
from examples.common.cli import nonnegative_int, positive_int
from examples.common.digits import set_weights
from ms_optim import reference
from tools import fidelity_tasks

TASKS = {t.name: t for t in (fidelity_tasks.Autoencoder, fidelity_tasks.ConvNet,
                             fidelity_tasks.Digits)}
BETA1, BETA2, EPS = np.float32(0.9), np.float32(0.999), 1e-8
ROUNDINGS = ("nearest", "stochastic")


def update_moments(m, v, g):
    """Adam's moment update of float32 m, v in place (reference.adam_delta's rule)."""
    reference.adam_delta(m, v, g, 0.0, BETA1, BETA2, EPS, 0.0, 0.0)


class Int8Moments:
    """One parameter's int8 moments, stepped by reference's rule with `rounding`."""

    def __init__(self, n, index, rounding):
        self.index, self.rounding = index, rounding
        self.m = reference.q8_quantize(np.zeros(n, np.float32), True)
        self.v = reference.q8_quantize(np.zeros(n, np.float32), False)

    def step(self, g, t):
        """The moments after step t on gradient g, as float32 (decoded)."""
        m, v = reference.q8_dequantize(*self.m, True), reference.q8_dequantize(*self.v, False)
        update_moments(m, v, g)
        bits = (reference.q8_round_bits(reference.q8_tensor_key(t, self.index), g.size)
                if self.rounding == "stochastic" else None)
        self.m = reference.q8_quantize(m, True, bits)
        self.v = reference.q8_quantize(v, False, bits)
        return reference.q8_dequantize(*self.m, True), reference.q8_dequantize(*self.v, False)


def block_absmax(v):
    """Each element's block absmax (the int8 scale its v would have in float32)."""
    blocks = reference._blocks(v)
    return np.repeat(np.abs(blocks).max(axis=1), reference.Q8_BLOCK)[:v.size]


def compare(t, m, v, mq, vq, absmax):
    """The figures of one rounding at step t: moments concatenated over the parameters,
    absmax each element's block absmax of v."""
    bc1, bc2 = 1 - 0.9 ** t, 1 - 0.999 ** t
    d = (m / bc1) / (np.sqrt(v / bc2) + EPS)
    dq = (mq / bc1) / (np.sqrt(vq / bc2) + EPS)
    large = v >= absmax / 16
    pos = (v > 0) & (vq > 0)
    lv = np.log(vq[pos].astype(np.float64) / v[pos])
    return {"log_v": lv.mean(), "log_v_large": lv[large[pos]].mean(),
            "log_v_small": lv[~large[pos]].mean(), "small_share": float((~large[pos]).mean()),
            "m_slope": float(np.dot(mq, m) / np.dot(m, m)),
            "step_length": float(np.linalg.norm(dq) / np.linalg.norm(d)),
            "cosine": float(np.dot(dq, d) / np.linalg.norm(dq) / np.linalg.norm(d))}


def run(task, seed, steps, every):
    """Trains `task` for `steps` steps; prints and returns [(t, {rounding: figures})]."""
    data, init = task.prepare(seed)
    net = task.make_net()
    set_weights(net, init)
    params = net.trainable_params()
    loss_cell = task.loss_cell(net)
    optimizer = ms_optim.AdamOffload(params, learning_rate=task.lr)
    grad_fn = ms.value_and_grad(loss_cell, None, params)
    sizes = [int(np.prod(p.shape)) for p in params]
    m = [np.zeros(n, np.float32) for n in sizes]
    v = [np.zeros(n, np.float32) for n in sizes]
    shadows = {r: [Int8Moments(n, i, r) for i, n in enumerate(sizes)] for r in ROUNDINGS}
    rng = np.random.default_rng(seed)
    batches = (inputs for unit in task.units(data, rng) for inputs in unit)
    out = []
    for t, inputs in enumerate(itertools.islice(batches, steps), 1):
        loss, grads = grad_fn(*(ms.Tensor(a) for a in inputs))
        optimizer(grads)
        g = [x.asnumpy().reshape(-1) for x in grads]
        for mi, vi, gi in zip(m, v, g):
            update_moments(mi, vi, gi)
        decoded = {r: [s.step(gi, t) for s, gi in zip(shadows[r], g)] for r in ROUNDINGS}
        if t % every and t != steps:
            continue
        row = {}
        absmax = np.concatenate([block_absmax(x) for x in v])
        for r in ROUNDINGS:
            row[r] = compare(t, np.concatenate(m), np.concatenate(v),
                             np.concatenate([a for a, _ in decoded[r]]),
                             np.concatenate([b for _, b in decoded[r]]), absmax)
            f = row[r]
            print(f"[{task.name}] step {t:4d}  loss {float(loss.asnumpy()):.4f}  {r:10s}  "
                  f"log v {f['log_v']:+.4f} (large {f['log_v_large']:+.4f}, small "
                  f"{f['log_v_small']:+.4f})  m slope {f['m_slope']:.4f}  step "
                  f"{f['step_length']:.4f}  cos {f['cosine']:.4f}", flush=True)
        out.append((t, row))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.int8_bias",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=sorted(TASKS), default="autoencoder")
    ap.add_argument("--seed", type=nonnegative_int, default=0)
    ap.add_argument("--steps", type=positive_int, default=400)
    ap.add_argument("--every", type=positive_int, default=50,
                    help="steps between reports")
    args = ap.parse_args(argv)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    run(TASKS[args.task](), args.seed, args.steps, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
