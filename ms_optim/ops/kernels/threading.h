// Kernel threading besides the walker over many tensors (core/multi_tensor.h,
// which also gives each thread's contiguous range of [0, n)): reductions over
// those ranges (OpenMP), and the compile-time flag switch the loops are
// instantiated through.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/threading.h"
#endif

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/kernels.h"
#include "core/multi_tensor.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// Reductions: body(lo, hi, acc) adds K sums over [lo, hi) into acc[0..K).  The
// per-thread partials are combined in thread order, so the result depends only
// on n and the thread count.
template <int K, class Body>
void parallel_sums(int64_t n, double *out, const Body &body) {
  for (int k = 0; k < K; ++k) out[k] = 0.0;
  const int nthreads = kernel_threads();
  if (n < kParallelMin || nthreads < 2) {
    body(int64_t{0}, n, out);
    return;
  }
  double partial[kMaxThreads][K] = {};
#pragma omp parallel num_threads(nthreads)
  {
    const int t = omp_get_thread_num();
    const Range r = thread_range(n, omp_get_num_threads(), t);
    if (r.lo < r.hi) body(r.lo, r.hi, partial[t]);
  }
  for (int t = 0; t < kMaxThreads; ++t)
    for (int k = 0; k < K; ++k) out[k] += partial[t][k];
}

// Calls body(nesterov, decay) with both flags as std::integral_constant<bool>,
// so that a loop is compiled once per combination without branches inside.
template <class Body>
inline void with_flags(bool nesterov, bool decay, const Body &body) {
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (nesterov) {
    if (decay) body(T_{}, T_{}); else body(T_{}, F_{});
  } else {
    if (decay) body(F_{}, T_{}); else body(F_{}, F_{});
  }
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
