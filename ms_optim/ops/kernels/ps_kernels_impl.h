// Loops of the C library for parameter servers, compiled once per instruction
// set: included by kernels/isa_scalar.cpp / isa_avx2.cpp / isa_avx512.cpp (which
// define MSOPT_ISA_NS and MSOPT_ISA_NAME), so the plain `omp simd` loops below
// are vectorized with that unit's -m flags.  The per-element math is
// core/rules.h; each kernel runs one contiguous range on the calling thread.
// Adam and Lamb are the shared loops of core/loops_impl.h with this library's
// policies.
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/ps_kernels_impl.h"
#endif
#ifndef MSOPT_ISA_NAME
#error "define MSOPT_ISA_NAME before including kernels/ps_kernels_impl.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/loops_impl.h"
#include "core/ps_kernels.h"
#include "core/rules.h"
#include "kernels/threading.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace ps {

// ---------------------------------------------------------------- gradient --

template <class T, bool kDecay>
void sgd_loop(T *__restrict p, const T *__restrict g, int64_t n, const PsHyper<T> &h) {
  const T lr = h.lr, wd = h.wd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = kDecay ? rules::decayed_grad(g[i], p[i], wd) : g[i];
    p[i] = rules::ps_sgd(p[i], gi, lr);
  }
}

template <class T>
void sgd(T *p, const T *g, int64_t n, const PsHyper<T> &h) {
  with_flags(false, h.wd != T(0),
             [&](auto, auto decay) { sgd_loop<T, decltype(decay)::value>(p, g, n, h); });
}

template <class T, bool kNesterov, bool kDecay>
void momentum_loop(T *__restrict p, T *__restrict v, const T *__restrict g, int64_t n,
                   const PsHyper<T> &h) {
  const T lr = h.lr, mom = h.momentum, wd = h.wd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = kDecay ? rules::decayed_grad(g[i], p[i], wd) : g[i];
    T vi = v[i];
    p[i] = rules::ps_momentum<T, kNesterov>(p[i], gi, vi, lr, mom);
    v[i] = vi;
  }
}

template <class T>
void momentum(T *p, T *v, const T *g, int64_t n, const PsHyper<T> &h) {
  with_flags(h.nesterov, h.wd != T(0), [&](auto nesterov, auto decay) {
    momentum_loop<T, decltype(nesterov)::value, decltype(decay)::value>(p, v, g, n, h);
  });
}

template <class T, bool kDecay>
void adagrad_loop(T *__restrict p, T *__restrict a, const T *__restrict g, int64_t n,
                  const PsHyper<T> &h) {
  const T lr = h.lr, eps = h.eps, wd = h.wd;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = kDecay ? rules::decayed_grad(g[i], p[i], wd) : g[i];
    T ai = a[i];
    p[i] = rules::ps_adagrad(p[i], gi, ai, lr, eps);
    a[i] = ai;
  }
}

template <class T>
void adagrad(T *p, T *a, const T *g, int64_t n, const PsHyper<T> &h) {
  with_flags(false, h.wd != T(0),
             [&](auto, auto decay) { adagrad_loop<T, decltype(decay)::value>(p, a, g, n, h); });
}

// Adam as MindSpore's Adam (and the AdamOffload kernel): p += -lr_t * direction.
template <class T>
void adam(T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h) {
  const AdamStep<T> step{h.beta1, h.c1, h.beta2, h.c2, h.eps, -h.lr_t, h.wd};
  with_flags(h.nesterov, h.wd != T(0), [&](auto nesterov, auto decay) {
    adam_loop<T, false, decltype(nesterov)::value, decltype(decay)::value>(p, m, v, g, n, step,
                                                                           PlainGrad<T>{});
  });
}

// ---------------------------------------------------------------------- Lamb --

template <class T>
LambStep<T> lamb_step(const PsHyper<T> &h) {
  LambStep<T> s;
  s.beta1 = h.beta1;
  s.c1 = h.c1;
  s.beta2 = h.beta2;
  s.c2 = h.c2;
  s.eps = h.eps;
  s.inv_bc1 = h.inv_bc1;
  s.inv_sqrt_bc2 = h.inv_sqrt_bc2;
  s.wd = h.wd;
  return s;
}

template <class T>
void lamb_plain(T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h) {
  lamb_plain_loop(p, m, v, g, n, lamb_step(h), h.lr, PlainGrad<T>{});
}

// The C library's order of Lamb's squared norms (ps_kernels.h): blocks of
// kPsNormBlock elements, each summed in 8 interleaved lanes.
struct LaneNorm {
  static constexpr int64_t kBlock = kPsNormBlock;
  template <class T>
  static double sumsq(const T *x, int64_t len) {
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
      for (int j = 0; j < 8; ++j) {
        const double d = static_cast<double>(x[i + j]);
        acc[j] += d * d;
      }
    for (int j = 0; i < len; ++i, ++j) {
      const double d = static_cast<double>(x[i]);
      acc[j] += d * d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
};

// Pass one: r of each block goes to a stack buffer, only its norm is kept
// (pass two recomputes r).
template <class T>
void lamb_moments(const T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h,
                  double *p_sq, double *r_sq) {
  alignas(64) T rb[kPsNormBlock];
  lamb_moments_blocks<LaneNorm>(
      p, m, v, g, n, lamb_step(h), PlainGrad<T>{}, [&rb](int64_t) { return rb; },
      [p_sq, r_sq](int64_t b, double sp, double sr) {
        p_sq[b] = sp;
        r_sq[b] = sr;
      });
}

template <class T>
void lamb_apply(T *p, const T *m, const T *v, int64_t n, const PsHyper<T> &h, T lr_ratio) {
  const T eps = h.eps, wd = h.wd, ib1 = h.inv_bc1, isb2 = h.inv_sqrt_bc2;
  lamb_apply_loop(p, n, lr_ratio, [=](int64_t i, T pi) {
    return rules::lamb_direction(pi, m[i], v[i], ib1, isb2, eps, wd);
  });
}

// ------------------------------------------------------------ regularization --

// Stops as soon as a pass leaves every element's bits unchanged: a fixed
// point of this step is one of every later identical step.  Bits, not values,
// are compared, so the early stop is exact for NaN (a quiet NaN is a fixed
// point; a signaling one is quieted by the first pass) and signed zeros.
// +-0 and (quiet) NaN are fixed points of ps_prox for any lam1 >= 0, c2 >= 0;
// an infinity is not (c2 is 0 when lr * l2 overflows), nor a finite nonzero.
template <class T>
bool regularize(T *p, int64_t n, T lam1, T c2, int64_t steps) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  int settled = 0;  // every element +-0 or NaN after the last pass
  for (int64_t s = 0; s < steps; ++s) {
    int changed = 0;
    settled = 1;
#pragma omp simd reduction(| : changed) reduction(& : settled)
    for (int64_t i = 0; i < n; ++i) {
      const T x = p[i];
      const T y = rules::ps_prox(x, lam1, c2);
      U xb, yb;
      std::memcpy(&xb, &x, sizeof x);
      std::memcpy(&yb, &y, sizeof y);
      changed |= xb != yb;
      settled &= y == T(0) || y != y;
      p[i] = y;
    }
    if (!changed) break;
  }
  return settled != 0;
}

// ---------------------------------------------------------------- addition --

template <class T>
void add(T *__restrict p, const T *__restrict d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] + d[i];
}

// Two's-complement wrap-around: the sum is formed in the unsigned type of the
// same width (defined modulo 2^bits) and converted back (GCC defines the
// conversion as modular), so no signed overflow is ever evaluated.
template <class S, class U>
void add_wrap(S *__restrict p, const S *__restrict d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<S>(static_cast<U>(static_cast<U>(p[i]) + static_cast<U>(d[i])));
}

template <class T>
constexpr PsOps<T> ops() {
  return PsOps<T>{sgd<T>,        momentum<T>,   adagrad<T>,    adam<T>,     lamb_plain<T>,
                  lamb_moments<T>, lamb_apply<T>, regularize<T>, add<T>};
}

}  // namespace ps

extern const PsTable kPsTable;
const PsTable kPsTable = {
    MSOPT_ISA_NAME,
    ps::ops<float>(),
    ps::ops<double>(),
    ps::add_wrap<int32_t, uint32_t>,
    ps::add_wrap<uint32_t, uint32_t>,
    ps::add_wrap<int64_t, uint64_t>,
    ps::add_wrap<uint64_t, uint64_t>,
};

}  // namespace MSOPT_ISA_NS
}  // namespace msopt
