// Exact top-k selection by magnitude, shared by the AOT adapters (and any
// other native entry point).  The streaming passes run through the ISA kernel
// table; the selection logic here is plain C++.
#pragma once

#include <cstdint>

namespace msopt {

// How the values to select from are produced.  For a plain selection the
// array already holds them; for DGC the first pass also updates the
// residuals (u, v) and the selection is over the updated v.
struct TopkSource {
  const float *x;          // the values selected from (for DGC: v, after the pass)
  // DGC only (u == nullptr for a plain selection):
  float *u;
  float *v;
  const float *grad;
  float momentum;
  bool nesterov;
};

// The k entries of largest |x| (ties broken by the lower index), written in
// ascending index order: idx[0..k), val[i] = x[idx[i]].  Returns kOk, or
// kErrSize / kErrNoMem with msopt_last_error() set.  Never throws.
int topk_abs(const float *x, int64_t n, int64_t k, int32_t *idx, float *val);

// topk_abs of `count` DGC sources (u != nullptr) in one parallel region, each
// tensor whole on one thread (largest first, handed out dynamically), so the
// threads meet once per call, not once or more per tensor: on a few cores
// shared with MindSpore's own threads, every OpenMP barrier can cost a
// scheduler time slice (measured: one region and two barriers per large
// tensor ran a ResNet-50 step 10x slower than the kernels alone).  Tensor j's
// results go to idx + off[j], val + off[j]; the same results as topk_abs.
int topk_abs_multi(const TopkSource *srcs, const int64_t *n, const int64_t *k,
                   const int64_t *off, int count, int32_t *idx, float *val);

}  // namespace msopt
