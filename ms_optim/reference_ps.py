"""Framework-free numpy rules of the C library for parameter servers (ms_optim.capi; the
"ps_" rules of ops/core/rules.h), the single source of truth for its tests.

Each function works in the parameter's element type T (float32 or float64), hyper-parameters
cast to T, with the operation order of rules.h, so the library matches bit for bit.  Arrays
are updated in place.  Beside numpy it imports only ms_optim/reference.py (the optimizers'
rules: Lamb's direction is one rule for both products), and nothing else of the package.
"""
import numpy as np

from .reference import lamb_direction

PS_NORM_BLOCK = 2048  # kPsNormBlock in core/ps_kernels.h


def ps_lr(lr, step, policy="const", lr_decay_a=0.0, lr_decay_b=0.0):
    """Learning rate (a Python float, double) of the step-th step, step = 1, 2, ..."""
    if policy == "linear":
        return max(float(lr) - float(lr_decay_a) * float(step - 1), float(lr_decay_b))
    return float(lr)


def _ps_grad(p, g, weight_decay):
    t = p.dtype.type
    return g + t(weight_decay) * p if t(weight_decay) != 0 else g


def ps_sgd_step(p, g, lr, weight_decay=0.0):
    t = p.dtype.type
    g = _ps_grad(p, g, weight_decay)
    p[...] = p - t(lr) * g


def ps_momentum_step(p, v, g, lr, momentum, nesterov=False, weight_decay=0.0):
    """MindSpore's ApplyMomentum: v = v * momentum + g; p -= lr * v (Nesterov: g*lr + v*momentum*lr)."""
    t = p.dtype.type
    lr, mom = t(lr), t(momentum)
    g = _ps_grad(p, g, weight_decay)
    v[...] = v * mom + g
    p[...] = p - (g * lr + v * mom * lr) if nesterov else p - lr * v


def ps_adagrad_step(p, a, g, lr, eps, weight_decay=0.0):
    """MindSpore's ApplyAdagradV2: a += g * g; p -= lr * g / (sqrt(a) + eps)."""
    t = p.dtype.type
    g = _ps_grad(p, g, weight_decay)
    a[...] = a + g * g
    p[...] = p - t(lr) * g / (np.sqrt(a) + t(eps))


def ps_adam_step(p, m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, nesterov=False,
                 weight_decay=0.0):
    """MindSpore's Adam; beta*_power = beta^t for this step, in T."""
    t = p.dtype.type
    b1, b2 = t(beta1), t(beta2)
    c1, c2 = t(1) - b1, t(1) - b2
    g = _ps_grad(p, g, weight_decay)
    m[...] = b1 * m + c1 * g
    v[...] = b2 * v + c2 * g * g
    lr_t = t(lr) * np.sqrt(t(1) - t(beta2_power)) / (t(1) - t(beta1_power))
    num = b1 * m + c1 * g if nesterov else m
    p[...] = p + (-lr_t) * (num / (np.sqrt(v) + t(eps)))


def ps_sumsq(x):
    """sum(x^2) in double in the library's fixed order (core/ps_kernels.h): blocks of
    PS_NORM_BLOCK elements, 8 interleaved lanes summed in order, lanes combined
    pairwise, blocks added in order.  The same bits for any ISA or thread count."""
    x = np.asarray(x, np.float64).ravel()
    nb = -(-x.size // PS_NORM_BLOCK)
    if nb == 0:
        return 0.0
    pad = np.zeros(nb * PS_NORM_BLOCK)
    pad[:x.size] = x
    sq = (pad * pad).reshape(nb, PS_NORM_BLOCK // 8, 8)
    lanes = np.cumsum(sq, axis=1)[:, -1, :]  # add.accumulate: strictly sequential
    part = (((lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3]))
            + ((lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7])))
    return float(np.cumsum(part)[-1])


def ps_lamb_step(p, m, v, g, lr, beta1, beta2, eps, beta1_power, beta2_power, weight_decay=0.0):
    """PaddlePaddle's Lamb (docs/algorithms.md §2, as lamb_step) in T, norms by ps_sumsq;
    the trust ratio is used only with weight decay."""
    t = p.dtype.type
    r = lamb_direction(p, m, v, g, beta1, beta2, eps, beta1_power, beta2_power, weight_decay)
    lr_ratio = t(lr)
    if t(weight_decay) != 0:
        pn, rn = np.sqrt(ps_sumsq(p)), np.sqrt(ps_sumsq(r))
        lr_ratio = t(lr) * (t(pn / rn) if pn > 0 and rn > 0 else t(1))
    p[...] = p - lr_ratio * r


def ps_prox(p, lr, l1, l2):
    """The l1/l2 regularization of one step: p = sign(p) * max(|p| - lr*l1, 0) * (1 / (1 + lr*l2))."""
    t = p.dtype.type
    lr = t(lr)
    lam1 = lr * t(l1)
    c2 = t(1) / (t(1) + lr * t(l2))
    a = np.abs(p) - lam1
    a = np.where(a <= 0, t(0), a)
    p[...] = np.copysign(a * c2, p)


def ps_merge_rows(rows, values, width):
    """Sparse rows with duplicates summed in the order given (from +0): (sorted ids, sums)."""
    rows = np.asarray(rows, np.int64)
    uniq, inverse = np.unique(rows, return_inverse=True)
    sums = np.zeros((uniq.size, width), values.dtype)
    np.add.at(sums, inverse, values.reshape(rows.size, width))
    return uniq, sums


def ps_add_wrap(p, d):
    """On Client: p += d; integers wrap around modulo 2^bits (numpy's integer addition)."""
    with np.errstate(over="ignore"):
        p[...] = p + d
