"""Which 8-bit code and block size for AdamOffload's int8 moments? A numpy measurement.

Runs float32 Adam (reference.adam_offload_step) and the same Adam with its
moments stored block-wise in 8 bits, side by side on the same synthetic
gradients, and prints how far the int8 run's parameters drift from the
float32 run's.  Each row is one choice of block size and of the code
(the set of magnitudes in [0, 1] a code can stand for):

- ``EnMk``: a small float, n exponent and k mantissa bits, no subnormals,
  whose largest code is exactly 1 (ms_optim's rule, reference.q8_encode);
- ``EnMk<1``: the same with the largest code just below 1
  (``1 - 2^-(k+1)``), every code used, for comparison;
- ``tree``: a dynamic tree code in the manner of Dettmers et al. (2022):
  decade d = 0, 1, ... holds 2^(bits - 1 - d) evenly spaced values in
  [10^-(d+1), 10^-d], so values near the absmax get the most resolution.

Every row stores a positive v that rounds to 0 as the smallest code instead
(ms_optim's rule), except the one marked ``v may flush``, which shows why.

Gradients: ``(mean + N(0, 1)) * exp(sigma * N(0, 1)) * 1e-3`` per element,
the log-normal factor fixed per element (sigma spreads the elements over
decades).  Reported per sigma: the int8 run's parameter displacement's
relative L2 error against float32's, and the ratio of their lengths (above
1: int8 moments take larger steps).  Every code here is rounded to the
nearest value, so the rows differ only in their grids.  (The library's code
differs from its grid here only below the smallest non-zero code, where it
flushes m to 0.)

    python -m tools.q8_codebooks                 # the table in docs/algorithms.md §1.1
    python -m tools.q8_codebooks --steps 100 --n 8192
"""
import argparse

import numpy as np

from examples.common.cli import positive_int
from ms_optim import reference

f32 = np.float32


def small_float(e_bits, m_bits, top_is_one=True):
    """The magnitudes of a small float code (0 first), as reference.q8_value defines them
    (top_is_one) or with the exponent one lower and every code used (top 1 - 2^-(M+1))."""
    if top_is_one:
        return reference.q8_value(np.arange(reference.q8_top_code((e_bits, m_bits)) + 1),
                                  (e_bits, m_bits)).astype(np.float64)
    c = np.arange(1 << (e_bits + m_bits))
    vals = 2.0 ** ((c >> m_bits) - (1 << e_bits)) * (1 + (c & ((1 << m_bits) - 1)) / 2 ** m_bits)
    vals[0] = 0
    return vals


def tree(bits):
    """A dynamic tree code over `bits` magnitude bits: 0, then decade d (d = bits-1 ... 0)
    split evenly into 2^(bits-1-d) steps whose upper ends are the values (1 is the top)."""
    vals = [0.0]
    for d in range(bits - 1, -1, -1):
        lo, hi = 10.0 ** -(d + 1), 10.0 ** -d
        steps = 1 << (bits - 1 - d)
        vals += list(lo + (hi - lo) * np.arange(1, steps + 1) / steps)
    return np.array(vals)


CODES = {  # name: (magnitudes of m's code (7 bits + sign), magnitudes of v's code (8 bits))
    "E4M3 / E5M3": (small_float(4, 3), small_float(5, 3)),
    "E4M3<1 / E5M3<1": (small_float(4, 3, False), small_float(5, 3, False)),
    "E3M4 / E5M3": (small_float(3, 4), small_float(5, 3)),
    "E4M3 / E4M4": (small_float(4, 3), small_float(4, 4)),
    "tree / tree": (tree(7), tree(8)),
}
ROWS = [(256, "E4M3 / E5M3", True), (256, "E4M3 / E5M3", False), (256, "E4M3<1 / E5M3<1", True),
        (256, "E3M4 / E5M3", True), (256, "E4M3 / E4M4", True), (256, "tree / tree", True),
        (2048, "tree / tree", True), (2048, "E4M3 / E5M3", True), (64, "E4M3 / E5M3", True)]


def quantize(x, grid, block, keep_nonzero):
    """x (float32, size a multiple of block) block-wise on `grid`: nearest grid value of
    |x| / absmax, times the absmax, with x's sign (keep_nonzero: a positive |x| rounds to the
    smallest non-zero value at least).  Returns the stored values as float32."""
    b = x.reshape(-1, block).astype(np.float64)
    scale = np.abs(b).max(axis=1, keepdims=True)
    y = np.divide(np.abs(b), scale, out=np.zeros_like(b), where=scale > 0)
    hi = np.clip(np.searchsorted(grid, y), 1, len(grid) - 1)
    lo = hi - 1
    idx = np.where(y - grid[lo] <= grid[hi] - y, lo, hi)
    if keep_nonzero:
        idx = np.where(y > 0, np.maximum(idx, 1), idx)
    return (np.sign(b) * grid[idx] * scale).astype(f32).reshape(-1)


def run(code, block, keep, sigma, n, steps, seed, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    rng = np.random.default_rng(seed)
    spread = np.exp(sigma * rng.standard_normal(n)).astype(f32) * f32(1e-3)
    mean = rng.standard_normal(n).astype(f32) * f32(0.5)
    p0 = rng.standard_normal(n).astype(f32)
    p, m, v = p0.copy(), np.zeros(n, f32), np.zeros(n, f32)
    pq, mq, vq = p0.copy(), np.zeros(n, f32), np.zeros(n, f32)
    mgrid, vgrid = CODES[code]
    for t in range(1, steps + 1):
        g = ((mean + rng.standard_normal(n).astype(f32)) * spread).astype(f32)
        bp1, bp2 = f32(b1 ** t), f32(b2 ** t)
        reference.adam_offload_step(p, m, v, g, lr, b1, b2, eps, bp1, bp2)
        reference.adam_offload_step(pq, mq, vq, g, lr, b1, b2, eps, bp1, bp2)
        mq[...], vq[...] = quantize(mq, mgrid, block, False), quantize(vq, vgrid, block, keep)
    d, dq = (p - p0).astype(np.float64), (pq - p0).astype(np.float64)
    return np.linalg.norm(dq - d) / np.linalg.norm(d), np.linalg.norm(dq) / np.linalg.norm(d)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tools.q8_codebooks",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=positive_int, default=32768, help="elements (a multiple of 2048)")
    ap.add_argument("--steps", type=positive_int, default=300, help="Adam steps")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.n % 2048:
        ap.error("--n must be a multiple of 2048")
    sigmas = (0.5, 1.0, 2.0)
    print(f"{args.n} elements, {args.steps} steps; per sigma: relative error of the "
          f"displacement (its length / float32's)")
    print("| block | m code / v code | " + " | ".join(f"sigma {s}" for s in sigmas) + " |")
    print("| --- | --- |" + " --- |" * len(sigmas))
    for block, code, keep in ROWS:
        cells = [run(code, block, keep, s, args.n, args.steps, args.seed) for s in sigmas]
        name = code if keep else code + " (v may flush)"
        print(f"| {block} | {name} | " + " | ".join(f"{e:.3f} ({r:.2f})" for e, r in cells) + " |",
              flush=True)


if __name__ == "__main__":
    main()
