// The AOT Lamb kernel (KernelTable::lamb_f32) and the double-precision sum of
// squares (KernelTable::sumsq_f32); the per-element loops are core/loops_impl.h's.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "kernels/lamb.h is included by kernels/table.h, in an instruction set's unit"
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/kernels.h"  // the per-call types: kernels/table.h, which includes this file
#include "core/loops_impl.h"
#include "core/rules.h"
#include "kernels/threading.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// Double-precision sums of squares.  x*x of a float is exact in double, so a
// fused multiply-add gives the same bits as a multiply and an add; four
// independent vector accumulators keep the adds off the latency chain (GCC's
// `omp simd` reduction of a float -> double product is latency-bound).
struct SumSq {
#if defined(__AVX512F__)
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  static constexpr int64_t kStep = 32;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) {
      const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + 8 * k));
      acc[k] = _mm512_fmadd_pd(d, d, acc[k]);
    }
  }
  double vector_total() const {
    // stored and added by hand: GCC 12 warns inside _mm512_reduce_add_pd
    alignas(64) double t[8];
    _mm512_store_pd(t, _mm512_add_pd(_mm512_add_pd(acc[0], acc[1]),
                                     _mm512_add_pd(acc[2], acc[3])));
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  }
#elif defined(__AVX2__)
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  static constexpr int64_t kStep = 16;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) {
      const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * k));
      acc[k] = _mm256_fmadd_pd(d, d, acc[k]);
    }
  }
  double vector_total() const {
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]),
                                     _mm256_add_pd(acc[2], acc[3])));
    return (t[0] + t[1]) + (t[2] + t[3]);
  }
#else
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  static constexpr int64_t kStep = 4;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(x[k]) * x[k];
  }
  double vector_total() const { return (acc[0] + acc[1]) + (acc[2] + acc[3]); }
#endif
  double tail = 0.0;
  void add(const float *x, int64_t len) {
    int64_t j = 0;
    for (; j + kStep <= len; j += kStep) add_step(x + j);
    for (; j < len; ++j) tail += static_cast<double>(x[j]) * x[j];
  }
  double total() const { return vector_total() + tail; }
};

inline double sum_squares(const float *x, int64_t len) {
  SumSq s;
  s.add(x, len);
  return s.total();
}

// The AOT's order of Lamb's squared norms: blocks of 512 elements, each summed
// by SumSq right after pass one wrote it (its p and r still in L1), the
// blocks added in order.
struct VectorNorm {
  static constexpr int64_t kBlock = 512;
  static double sumsq(const float *x, int64_t len) { return sum_squares(x, len); }
};

// Runs body(grad) with the gradient reader of this call: scaled by gs, then
// value-clipped when clip_lo / clip_hi are finite.
template <class Body>
inline void with_lamb_grad(const LambArgs &a, float gs, const Body &body) {
  if (a.k.clip_lo > -INFINITY || a.k.clip_hi < INFINITY)
    body(ClippedGrad<float>{gs, a.k.clip_lo, a.k.clip_hi});
  else
    body(ScaledGrad<float>{gs});
}

// One tensor's Lamb step, run by thread t of nt.  kTeam: all nt threads of the
// enclosing parallel region call it for the same tensor, each on its own
// range, meeting at barriers to combine the per-thread sums (in thread order,
// so every thread gets the same result and it depends only on n and nt) and
// pass two touches the range the same thread updated, while its p, m and v
// are still in that core's caches when the tensor is small enough.  Otherwise
// one thread does the whole tensor (nt == 1, t == 0).  Pass one writes each
// block's direction r to a buffer on the stack, only to sum its squares while
// it is in L1; pass two recomputes r from p and the updated m and v (the same
// operations on the same values, so the same bits), which moves 40 bytes per
// element where keeping r between the passes moves 44 (r written, with its
// read for ownership, then read back).  partial: [kMaxThreads][2] shared sums.
template <bool kTeam>
void lamb_tensor(const LambTensor &x, const LambArgs &a, int64_t nt, int64_t t,
                 double (*partial)[2]) {
  const Range rg = thread_range(x.n, nt, t);
  const auto combine = [&](int k) {
    double total = 0.0;
    for (int64_t u = 0; u < nt; ++u) total += partial[u][k];
    return total;
  };
  float gs = a.grad_scale;
  if (a.k.clip_norm > 0.0f) {
    partial[t][0] = rg.lo < rg.hi ? sum_squares(x.g + rg.lo, rg.hi - rg.lo) : 0.0;
    if (kTeam) {
#pragma omp barrier
    }
    gs = rules::norm_clip_scale(combine(0), gs, a.k.clip_norm);
    if (kTeam) {
#pragma omp barrier
    }
  }
  LambStep<float> step;
  step.set_betas(a.k.beta1, a.k.beta2);
  step.eps = a.k.eps;
  step.inv_bc1 = a.inv_bc1;
  step.inv_sqrt_bc2 = a.inv_sqrt_bc2;
  step.wd = x.weight_decay;
  const int64_t lo = rg.lo, len = rg.hi - rg.lo;
  float *p = x.p + lo, *m = x.m + lo, *v = x.v + lo;
  const float *g = x.g + lo;
  if (!(x.weight_decay > 0.0f || a.k.always_adapt != 0.0f)) {
    if (len > 0)
      with_lamb_grad(a, gs, [&](auto grad) { lamb_plain_loop(p, m, v, g, len, step, x.lr, grad); });
    if (t == 0) *x.ratio = 1.0f;
    // no barrier: nothing shared was written, and the clip sums above were read before the
    // barrier that follows them
    return;
  }
  double ps = 0.0, rs = 0.0;
  alignas(64) float rb[VectorNorm::kBlock];
  if (len > 0)
    with_lamb_grad(a, gs, [&](auto grad) {
      lamb_moments_blocks<VectorNorm>(
          p, m, v, g, len, step, grad, [&rb](int64_t) { return rb; },
          [&](int64_t, double sp, double sr) {
            ps += sp;
            rs += sr;
          });
    });
  partial[t][0] = ps;
  partial[t][1] = rs;
  if (kTeam) {
#pragma omp barrier
  }
  const float ratio = static_cast<float>(rules::lamb_trust_ratio(combine(0), combine(1)));
  const float ib1 = step.inv_bc1, isb2 = step.inv_sqrt_bc2, eps = step.eps, wd = step.wd;
  lamb_apply_loop(p, len, x.lr * ratio, [=](int64_t i, float pi) {
    return rules::lamb_direction(pi, m[i], v[i], ib1, isb2, eps, wd);
  });
  if (t == 0) *x.ratio = ratio;
  if (kTeam) {
#pragma omp barrier
  }
}

// Every tensor in one parallel region.  A tensor too large to balance
// (lamb_team_min: at least 1/nthreads of the call) is split over the team,
// one after another; every other tensor runs whole on one thread, handed out
// dynamically in the order given (the adapter sorts them largest first).  A
// split tensor meets the team at barriers, and a barrier costs a whole time
// slice whenever MindSpore's own threads hold a core (measured: DGC's select,
// benchmarks/README.md#where-a-steps-time-goes), so only the tensors that
// cannot be balanced otherwise pay it.  One region per call, not
// two per tensor: waking the team is what costs on small tensors.  Its own
// schedule, not the walker's (core/multi_tensor.h): a tensor split over the
// team needs its norm reduced across the threads between the two passes, and
// the walker's pieces never wait for one another.
void lamb_f32(const LambTensor *ts, int64_t count, const LambArgs &a) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += ts[i].n;
  const int nthreads = kernel_threads();
  const int64_t team_min = lamb_team_min(total, nthreads);
  double partial[kMaxThreads][2];
  if (total < kParallelMin || nthreads < 2) {
    for (int64_t i = 0; i < count; ++i) lamb_tensor<false>(ts[i], a, 1, 0, partial);
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n >= team_min) lamb_tensor<true>(ts[i], a, nt, t, partial);
    double mine[1][2];
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n < team_min) lamb_tensor<false>(ts[i], a, 1, 0, mine);
  }
}

double sumsq_f32(const float *x, int64_t n) {
  double total;
  parallel_sums<1>(n, &total, [&](int64_t lo, int64_t hi, double *acc) {
    acc[0] += sum_squares(x + lo, hi - lo);
  });
  return total;
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
