// Per-element update rules: the one source of truth for the math of every
// native path (the AOT kernels' loops and the C library for parameter servers).
//
// Plain inline templates over the element type, no loops, no threads, no
// intrinsics: callers wrap them in `omp simd` loops compiled per ISA, and the
// CUDA kernels (ops/cuda/) call the same functions per thread (MSOPT_HD makes
// each one __host__ __device__ under nvcc).  The operation order here is
// mirrored exactly by ms_optim/reference.py; with floating-point contraction
// off (g++ -ffp-contract=off, nvcc -fmad=false), results agree bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MSOPT_HD __host__ __device__
#else
#define MSOPT_HD
#endif

namespace msopt {
namespace rules {

// Weight decay coupled into the gradient (MindSpore's decay_weight): g + wd * p.
// Callers skip it when wd == 0, so 0 * p is never formed (NaN for an infinite p).
template <class T>
MSOPT_HD inline T decayed_grad(T g, T p, T wd) {
  return g + wd * p;
}

// Lamb's gradient with value clipping (the AOT kernel): scaled, then clamped
// to [lo, hi].
template <class T>
MSOPT_HD inline T clipped_grad(T g, T scale, T lo, T hi) {
  return std::min(std::max(g * scale, lo), hi);
}

// Exponential moving averages of the gradient and its square (Adam, Lamb):
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g * g
// c1 = 1 - beta1 and c2 = 1 - beta2 are passed precomputed.
template <class T>
MSOPT_HD inline void moments(T g, T &m, T &v, T beta1, T c1, T beta2, T c2) {
  m = beta1 * m + c1 * g;
  v = beta2 * v + c2 * g * g;
}

// Adam's step before the learning rate: num / (sqrt(v) + eps), where num is m,
// or beta1 * m + (1 - beta1) * g with Nesterov (m, v already updated).
template <class T, bool kNesterov>
MSOPT_HD inline T adam_direction(T g, T m, T v, T beta1, T c1, T eps) {
  const T num = kNesterov ? beta1 * m + c1 * g : m;
  using std::sqrt;  // and a vector type's own sqrt (kernels/adam.h's F32x16)
  return num / (sqrt(v) + eps);
}

// AdamW's (nn.AdamWeightDecay's) decoupled weight decay, added to the direction
// before the learning rate: wd * p + direction.
template <class T>
MSOPT_HD inline T decoupled_decay(T direction, T p, T wd) {
  return wd * p + direction;
}

// Adam's bias-corrected step size lr * sqrt(1 - beta2^t) / (1 - beta1^t)
// (MindSpore), from beta1_power = beta1^t and beta2_power = beta2^t.
template <class T>
MSOPT_HD inline T adam_step_size(T lr, T beta1_power, T beta2_power) {
  return lr * std::sqrt(T(1) - beta2_power) / (T(1) - beta1_power);
}

// Lion (Chen et al., 2023): the sign of the interpolation c = beta1 * m +
// (1 - beta1) * g, then m's own average with beta2:
//   s = sign(c);  m = beta2 * m + (1 - beta2) * g
// sign(0) is 0 (c itself, a signed zero), and sign(c) + (c - c) otherwise:
// exactly +-1 for a finite c, NaN for a NaN or infinite c (c - c is NaN), so
// that an overflowed gradient shows in the parameter as it does with Adam
// (the sign of an infinite c would move the parameter by the rate on every
// step that the infinite moment then steers).  c1 = 1 - beta1 and
// c2 = 1 - beta2 are passed precomputed.  The parameter then moves by
// lion_apply.
template <class T>
MSOPT_HD inline T lion_direction(T g, T &m, T beta1, T c1, T beta2, T c2) {
  const T c = beta1 * m + c1 * g;
  m = beta2 * m + c2 * g;
  return c == T(0) ? c : (c < T(0) ? T(-1) : T(1)) + (c - c);
}

// Lion's parameter update with its decoupled weight decay:
// p * keep + neg_lr * s, keep = 1 - lr * wd (lion_keep), neg_lr = -lr.
template <class T>
MSOPT_HD inline T lion_apply(T p, T s, T keep, T neg_lr) {
  return p * keep + neg_lr * s;
}

template <class T>
MSOPT_HD inline T lion_keep(T lr, T wd) {
  return T(1) - lr * wd;
}

// Lamb's bias corrections as lamb_direction takes them: 1 / (1 - beta1^t)
// and 1 / sqrt(1 - beta2^t).
template <class T>
MSOPT_HD inline void lamb_bias_corrections(T beta1_power, T beta2_power, T &inv_bc1,
                                           T &inv_sqrt_bc2) {
  inv_bc1 = T(1) / (T(1) - beta1_power);
  inv_sqrt_bc2 = T(1) / std::sqrt(T(1) - beta2_power);
}

// Lamb's (PaddlePaddle's) update direction, m and v already updated:
//   r = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p,  bc1 = 1 - beta1^t, bc2 = 1 - beta2^t
// evaluated as (m * inv_bc1) / (sqrt(v) * inv_sqrt_bc2 + eps) + wd * p with the
// reciprocals 1/bc1 and 1/sqrt(bc2) computed once per step: the same value up
// to rounding, with one division and one square root per element instead of
// three divisions (the kernel runs this twice per element and is otherwise
// compute-bound).
template <class T>
MSOPT_HD inline T lamb_direction(T p, T m, T v, T inv_bc1, T inv_sqrt_bc2, T eps, T wd) {
  return (m * inv_bc1) / (std::sqrt(v) * inv_sqrt_bc2 + eps) + wd * p;
}

// Lamb's parameter step with its trust ratio: p - (lr * ratio) * r.
template <class T>
MSOPT_HD inline T lamb_apply(T p, T r, T lr_ratio) {
  return p - lr_ratio * r;
}

// Lamb's trust ratio from the squared norms of p and r (PaddlePaddle's rule):
// ||p|| / ||r|| when both are positive, else 1.  Callers use it only with
// weight decay (or always_adapt).
MSOPT_HD inline double lamb_trust_ratio(double p_sq, double r_sq) {
  const double pn = std::sqrt(p_sq), rn = std::sqrt(r_sq);
  return pn > 0.0 && rn > 0.0 ? pn / rn : 1.0;
}

// Per-tensor norm clipping (ClipGradByNorm) of a gradient that is multiplied
// by `scale`: g_sq = sum(g^2) of the unscaled gradient; returns the scale that
// brings the norm down to `clip` when it is above it.
MSOPT_HD inline float norm_clip_scale(double g_sq, float scale, float clip) {
  const double norm = std::sqrt(g_sq) * static_cast<double>(scale);
  return norm > clip ? scale * static_cast<float>(clip / norm) : scale;
}

// DGC momentum correction (Lin et al. 2018; docs/algorithms.md §3): the local
// gradient goes into the momentum u and the accumulated residual v.
//   plain:    u = momentum * u + g;        v = v + u
//   Nesterov: u = momentum * (u + g);      v = v + u + g
template <class T, bool kNesterov>
MSOPT_HD inline void dgc_accumulate(T g, T &u, T &v, T momentum) {
  if (kNesterov) {
    u = momentum * (u + g);
    v = v + u + g;
  } else {
    u = momentum * u + g;
    v = v + u;
  }
}

// DGC's dense momentum (uncompressed parameters, and every parameter before
// compression starts), as DGCMomentum's graph computes it, each operation
// rounded to T:
//   u = momentum * u + g;   step = u  (Nesterov: g + momentum * u)
// and the caller does p -= lr * step.
template <class T, bool kNesterov>
MSOPT_HD inline T dgc_dense_momentum(T g, T &u, T momentum) {
  u = momentum * u + g;
  return kNesterov ? g + momentum * u : u;
}

// ---------------------------------------------------------------------------
// Rules of the C library for parameter servers (capi/capi.cpp, kernels/ps_kernels_impl.h),
// mirrored by the ps_* functions at the end of ms_optim/reference.py.  Adam and
// Lamb there use the rules above, as the AOT kernels do.

// Plain SGD (MindSpore's SGD without momentum): p - lr * g.
template <class T>
MSOPT_HD inline T ps_sgd(T p, T g, T lr) {
  return p - lr * g;
}

// Momentum (MindSpore's ApplyMomentum): v = v * momentum + g, then
// p - lr * v, or with Nesterov p - (g * lr + v * momentum * lr).
template <class T, bool kNesterov>
MSOPT_HD inline T ps_momentum(T p, T g, T &v, T lr, T momentum) {
  v = v * momentum + g;
  return kNesterov ? p - (g * lr + v * momentum * lr) : p - lr * v;
}

// Adagrad with epsilon (MindSpore's ApplyAdagradV2): a = a + g * g, then
// p - lr * g / (sqrt(a) + eps).
template <class T>
MSOPT_HD inline T ps_adagrad(T p, T g, T &a, T lr, T eps) {
  a = a + g * g;
  return p - lr * g / (std::sqrt(a) + eps);
}

// Decoupled elastic-net regularization, applied to every row after each step
// (PaddlePaddle's L1/L2 regularizers, in proximal form):
//   p <- sign(p) * max(|p| - lam1, 0) * c2,   lam1 = lr * l1,  c2 = 1 / (1 + lr * l2)
// A NaN stays NaN; a zero keeps its sign.  ps_prox_constants gives lam1, c2.
template <class T>
MSOPT_HD inline T ps_prox(T p, T lam1, T c2) {
  T a = std::fabs(p) - lam1;
  a = a <= T(0) ? T(0) : a;
  return std::copysign(a * c2, p);
}

template <class T>
MSOPT_HD inline void ps_prox_constants(T lr, T l1, T l2, T &lam1, T &c2) {
  lam1 = lr * l1;
  c2 = T(1) / (T(1) + lr * l2);
}

// The random bits of the int8 moments' stochastic rounding (docs/algorithms.md
// §1.1): a pure function of the step, the parameter's position in the
// optimizer and the element's index in it, so that a run is reproducible,
// independent of the thread count, and identical on every data-parallel
// replica.  q8_mix is a 32-bit integer hash (xor-shift-multiply, the
// "lowbias32" constants); products wrap modulo 2^32.
constexpr uint32_t kQ8Golden = 0x9e3779b9u;  // 2^32 / the golden ratio, odd

MSOPT_HD inline uint32_t q8_mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// The key of parameter `tensor` (its position among the optimizer's
// parameters) at `step` (global_step, after the step's increment).
MSOPT_HD inline uint32_t q8_tensor_key(uint32_t step, uint32_t tensor) {
  return q8_mix(q8_mix(step) + tensor * kQ8Golden);
}

// Element j's 32 bits: the low 16 round m's code, the high 16 v's.  One
// multiply of q8_mix's two: the key already carries the step and the parameter,
// and key + j * kQ8Golden runs through distinct values along the tensor.
MSOPT_HD inline uint32_t q8_round_bits(uint32_t key, uint32_t j) {
  uint32_t x = key + j * kQ8Golden;
  x ^= x >> 16;
  x *= 0x7feb352du;
  return x ^ (x >> 15);
}

}  // namespace rules
}  // namespace msopt
