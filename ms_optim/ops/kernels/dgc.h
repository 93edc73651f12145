// The DGC kernels: the momentum correction fused with the gathering of top-k
// candidates (KernelTable::dgc_accumulate_range_f32, gather_abs_f32; the
// selection is kernels/topk.cpp) and the dense momentum (dgc_momentum).
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "kernels/dgc.h is included by kernels/table.h, in an instruction set's unit"
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kernels.h"  // the per-call types: kernels/table.h, which includes this file
#include "core/multi_tensor.h"
#include "core/radix.h"
#include "core/rules.h"
#include "kernels/half.h"
#include "kernels/threading.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// Gathering runs in 64-element chunks: a vectorized max of the magnitude keys
// over the chunk decides whether the chunk needs a scalar look (rare at DGC's
// sparsities).  Keys, not floats, so that a NaN is gathered like the largest
// magnitude (the selection's rule) rather than failing every comparison.
constexpr int64_t kGatherChunk = 64;

inline void gather_chunk(const float *x, int64_t base, int64_t len, uint32_t thr, int32_t *out,
                         int64_t cap, int64_t &count) {
  uint32_t cmax = 0;
#pragma omp simd reduction(max : cmax)
  for (int64_t j = 0; j < len; ++j) cmax = std::max(cmax, radix::magnitude_key(x[j]));
  if (cmax < thr) return;
  for (int64_t j = 0; j < len; ++j) {
    if (radix::magnitude_key(x[j]) >= thr) {
      if (count < cap) out[count] = static_cast<int32_t>(base + j);
      ++count;
    }
  }
}

template <bool kNesterov>
void dgc_accumulate_range(float *u, float *v, const float *grad, int64_t lo, int64_t hi,
                          float momentum, Gather *g) {
  const int t = omp_get_thread_num();
  int32_t *out = g->slots + static_cast<int64_t>(t) * g->cap;
  int64_t count = 0;
  for (int64_t c = lo; c < hi; c += kGatherChunk) {
    const int64_t len = std::min(kGatherChunk, hi - c);
    float *uc = u + c, *vc = v + c;
    const float *gc = grad + c;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      float ui = uc[j], vi = vc[j];
      rules::dgc_accumulate<float, kNesterov>(gc[j], ui, vi, momentum);
      uc[j] = ui;
      vc[j] = vi;
    }
    gather_chunk(vc, c, len, g->threshold_key, out, g->cap, count);
  }
  g->counts[t] = count;
}

void dgc_accumulate_range_f32(float *u, float *v, const float *grad, int64_t lo, int64_t hi,
                              float momentum, bool nesterov, Gather *g) {
  if (nesterov)
    dgc_accumulate_range<true>(u, v, grad, lo, hi, momentum, g);
  else
    dgc_accumulate_range<false>(u, v, grad, lo, hi, momentum, g);
}

// One tensor as the walker's one range: each thread gathers its one contiguous
// share into its own slots, so the slots in thread order hold ascending indices.
void gather_abs_f32(const float *x, int64_t n, Gather *g) {
  walk_tensors(1, [n](int64_t) { return n; }, WalkPlan{}, [&](int64_t, int64_t lo, int64_t hi) {
    const int t = omp_get_thread_num();
    int32_t *out = g->slots + static_cast<int64_t>(t) * g->cap;
    int64_t count = 0;
    for (int64_t c = lo; c < hi; c += kGatherChunk)
      gather_chunk(x + c, c, std::min(kGatherChunk, hi - c), g->threshold_key, out, g->cap, count);
    g->counts[t] = count;
  });
}

// float16 parameters are stepped in blocks converted through a stack buffer.
constexpr int64_t kDgcHalfBlock = 1024;

// The walker's functor: p -= lr * step over [lo, hi) of tensor i (float16 p
// through float32 blocks).
template <bool kNesterov>
struct DgcDenseChunk {
  const DgcDenseTensor *ts;
  float momentum;
  void operator()(int64_t i, int64_t lo, int64_t hi) const {
    const DgcDenseTensor &x = ts[i];
    float *u = x.u;
    const float *g = x.g;
    const float lr = x.lr, mom = momentum;
    if (!x.half) {
      float *p = static_cast<float *>(x.p);
#pragma omp simd
      for (int64_t j = lo; j < hi; ++j) {
        float uj = u[j];
        const float step = rules::dgc_dense_momentum<float, kNesterov>(g[j], uj, mom);
        u[j] = uj;
        p[j] = p[j] - lr * step;
      }
      return;
    }
    half_bits *p = static_cast<half_bits *>(x.p);
    alignas(64) float pb[kDgcHalfBlock];
    for (int64_t b = lo; b < hi; b += kDgcHalfBlock) {
      const int64_t len = std::min(kDgcHalfBlock, hi - b);
      f16_to_f32(p + b, pb, len);
      float *ub = u + b;
      const float *gb = g + b;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) {
        float uj = ub[j];
        const float step = rules::dgc_dense_momentum<float, kNesterov>(gb[j], uj, mom);
        ub[j] = uj;
        pb[j] = pb[j] - lr * step;
      }
      f32_to_f16(pb, p + b, len);
    }
  }
};

// The walker's kWholeTensors: parallel from kDgcDenseParallelMin elements in
// all (below, the work, about 0.3 ms on one core, costs less than waking a team
// on cores that MindSpore's threads share; ResNet-50's small tensors: 53K
// elements); tensors of kParallelMin elements or more split over the threads,
// smaller ones whole, handed out dynamically.  Elementwise: nothing to wait for.
constexpr int64_t kDgcDenseParallelMin = 8 * kParallelMin;

template <bool kNesterov>
void dgc_momentum_impl(const DgcDenseTensor *ts, int64_t count, float momentum) {
  WalkPlan plan;
  plan.schedule = WalkPlan::kWholeTensors;
  plan.parallel_min = kDgcDenseParallelMin;
  plan.split_min = kParallelMin;
  walk_tensors(count, [ts](int64_t i) { return ts[i].n; }, plan,
               DgcDenseChunk<kNesterov>{ts, momentum});
}

void dgc_momentum(const DgcDenseTensor *ts, int64_t count, float momentum, bool nesterov) {
  if (nesterov)
    dgc_momentum_impl<true>(ts, count, momentum);
  else
    dgc_momentum_impl<false>(ts, count, momentum);
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
