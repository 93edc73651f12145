// The Adam and Lamb loops of both kernel families, written once: the AOT
// kernels (kernels/adam.h, kernels/lamb.h) and the C library for parameter
// servers (kernels/ps_kernels_impl.h) instantiate them for their element type
// and their own policies, so each keeps its operation order, and so its bits:
//   Grad  how a gradient element is read: as given (C library), times a scale
//         (AOT: 1/loss_scale), or scaled and value-clipped (AOT Lamb);
//   Norm  the order Lamb's squared norms are summed in, block by block:
//         kBlock and sumsq(x, len) (AOT: SumSq's vector accumulators, fast
//         but ISA-dependent; C library: 8 fixed lanes over kPsNormBlock,
//         ISA- and thread-independent).
// Per-element math is rules.h.  Compiled once per ISA: included by
// kernels/adam.h, kernels/lamb.h and kernels/ps_kernels_impl.h, in the ISA's
// namespace (MSOPT_ISA_NS).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including loops_impl.h"
#endif

#include <algorithm>
#include <cstdint>

#include "core/rules.h"

// In the ISA's own namespace, not an anonymous one: the C library's kernels
// (namespace ps, external linkage) hold these types in their lambdas.
namespace msopt {
namespace MSOPT_ISA_NS {

// ------------------------------------------------------------ gradient in --

template <class T>
struct PlainGrad {
  T operator()(T g) const { return g; }
};

template <class T>
struct ScaledGrad {
  T scale;
  T operator()(T g) const { return g * scale; }
};

template <class T>
struct ClippedGrad {
  T scale, lo, hi;
  T operator()(T g) const { return rules::clipped_grad(g, scale, lo, hi); }
};

// --------------------------------------------------------------------- Adam --

// One Adam step's constants in the element type.
template <class T>
struct AdamStep {
  T beta1, c1, beta2, c2, eps;  // c1 = 1 - beta1, c2 = 1 - beta2
  T neg_lr;                     // -lr_t, the bias-corrected step size
  T wd;                         // coupled weight decay (read only with kDecay)
};

// The end of one Adam element, m and v already updated: the direction (with
// AdamW's decoupled decay under kDecoupled), then the step written as the
// delta or added to the parameter.  Shared by adam_loop and the compact-moment
// loop of kernels/adam.h.
template <class T, bool kDelta, bool kNesterov, bool kDecay, bool kDecoupled>
inline void adam_finish(T gi, T mi, T vi, T &out, T b1, T c1, T eps, T wd, T nlr) {
  T dir = rules::adam_direction<T, kNesterov>(gi, mi, vi, b1, c1, eps);
  if (kDecoupled && kDecay) dir = rules::decoupled_decay(dir, out, wd);
  const T d = nlr * dir;
  if (kDelta)
    out = d;
  else
    out += d;
}

// Adam over n elements (MindSpore's rule):
//   g' = grad(g + wd * p)        (kDecay; else grad(g))
//   m, v = rules::moments(g')
//   d  = -lr_t * rules::adam_direction(g', m, v)
// kDelta: out = d; otherwise out is p and out += d.
// kDecoupled (AdamW, nn.AdamWeightDecay's rule): g' = grad(g), and with kDecay
//   d = -lr_t * rules::decoupled_decay(direction, p, wd).
template <class T, bool kDelta, bool kNesterov, bool kDecay, class Grad, bool kDecoupled = false>
inline void adam_loop(T *__restrict out, T *__restrict m, T *__restrict v,
                      const T *__restrict g, int64_t n, const AdamStep<T> &a, Grad grad) {
  const T b1 = a.beta1, c1 = a.c1, b2 = a.beta2, c2 = a.c2, eps = a.eps;
  const T nlr = a.neg_lr, wd = a.wd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = grad(kDecay && !kDecoupled ? rules::decayed_grad(g[i], out[i], wd) : g[i]);
    T mi = m[i], vi = v[i];
    rules::moments(gi, mi, vi, b1, c1, b2, c2);
    m[i] = mi;
    v[i] = vi;
    adam_finish<T, kDelta, kNesterov, kDecay, kDecoupled>(gi, mi, vi, out[i], b1, c1, eps, wd,
                                                          nlr);
  }
}

// --------------------------------------------------------------------- Lamb --

// One Lamb step's constants in the element type (PaddlePaddle's rule).
// Set by name (each kernel family fills it from its own constants), read by the
// loops below through lamb_element.
template <class T>
struct LambStep {
  T beta1, c1, beta2, c2, eps;
  T inv_bc1, inv_sqrt_bc2;  // rules::lamb_bias_corrections
  T wd;                     // decoupled weight decay, added to the direction
  // beta1, beta2 and their complements c1 = 1 - beta1, c2 = 1 - beta2
  void set_betas(T b1, T b2) {
    beta1 = b1;
    c1 = T(1) - b1;
    beta2 = b2;
    c2 = T(1) - b2;
  }
};

// One element of a Lamb step: m and v updated in place with the gradient g;
// returns the direction r at p.  `s` is the loop's own copy of the step (a
// local the compiler keeps in registers).
template <class T>
inline T lamb_element(T g, T p, T &m, T &v, const LambStep<T> &s) {
  T mi = m, vi = v;  // locals: m and v are references the compiler cannot prove distinct
  rules::moments(g, mi, vi, s.beta1, s.c1, s.beta2, s.c2);
  m = mi;
  v = vi;
  return rules::lamb_direction(p, mi, vi, s.inv_bc1, s.inv_sqrt_bc2, s.eps, s.wd);
}

// The whole step with trust ratio 1 in one pass: p -= lr * r as soon as r is known.
template <class T, class Grad>
inline void lamb_plain_loop(T *__restrict p, T *__restrict m, T *__restrict v,
                            const T *__restrict g, int64_t n, const LambStep<T> &a, T lr,
                            Grad grad) {
  const LambStep<T> s = a;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T r = lamb_element(grad(g[i]), p[i], m[i], v[i], s);
    p[i] = rules::lamb_apply(p[i], r, lr);
  }
}

// Pass one of a step with a trust ratio, over [0, n) in blocks of Norm::kBlock:
// m and v updated, the block's direction r written to rbuf(lo) (lo: the
// block's offset), then done(b, sum p^2, sum r^2) for block b, summed in
// Norm's order while the block is still in L1.
template <class Norm, class T, class Grad, class RBuf, class Done>
inline void lamb_moments_blocks(const T *p, T *m, T *v, const T *g, int64_t n,
                                const LambStep<T> &a, Grad grad, RBuf rbuf, Done done) {
  const LambStep<T> s = a;
  for (int64_t lo = 0, b = 0; lo < n; lo += Norm::kBlock, ++b) {
    const int64_t len = std::min(Norm::kBlock, n - lo);
    const T *pb = p + lo, *gb = g + lo;
    T *mb = m + lo, *vb = v + lo, *rb = rbuf(lo);
#pragma omp simd
    for (int64_t j = 0; j < len; ++j)
      rb[j] = lamb_element(grad(gb[j]), pb[j], mb[j], vb[j], s);
    done(b, Norm::sumsq(pb, len), Norm::sumsq(rb, len));
  }
}

// Pass two: p -= lr_ratio * r, r = dir(i, p[i]) (kept from pass one, or
// recomputed from the updated m and v).
// Backwards, a block at a time: pass one has just walked the tensor forwards,
// so its last blocks are the ones still in the caches.
template <class T, class Dir>
inline void lamb_apply_loop(T *__restrict p, int64_t n, T lr_ratio, Dir dir) {
  constexpr int64_t kBlock = 4096;
  for (int64_t hi = n; hi > 0; hi -= kBlock) {
    const int64_t lo = hi > kBlock ? hi - kBlock : 0;
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T pi = p[i];
      p[i] = rules::lamb_apply(pi, dir(i, pi), lr_ratio);
    }
  }
}

}  // namespace MSOPT_ISA_NS
}  // namespace msopt
