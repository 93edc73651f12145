// MindSpore AOT adapters for DGC (docs/algorithms.md §3) and plain top-k selection.
// k is the length of the index output (static per compiled graph).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <new>
#include <utility>
#include <vector>

#include "core/common.h"
#include "core/contract.h"
#include "core/kernels.h"
#include "kernels/topk.h"

using msopt::AotArgs;
using msopt::fail;

namespace {

int check_outputs(const AotArgs &a, int idx_i, const char *fn) {
  if (!a.is(idx_i, "int32") || !a.is(idx_i + 1, "float32") || a.numel(idx_i) != a.numel(idx_i + 1))
    return fail(msopt::kErrDtype, "%s: outputs must be int32[k] indices and float32[k] values",
                fn);
  return msopt::kOk;
}

}  // namespace

// Input: x float32[n].  Outputs: idx int32[k], val float32[k]: the k entries of
// largest |x|, ties to the lower index, ascending indices, val = x[idx].
MSOPT_API int ms_optim_topk_abs(int nparam, void **params, int *ndims, int64_t **shapes,
                                const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_topk_abs";
  if (nparam != 3) return fail(msopt::kErrSize, "%s: expected 3 tensors, got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  if (!a.is(0, "float32")) return fail(msopt::kErrDtype, "%s: x must be float32", fn);
  if (int rc = check_outputs(a, 1, fn)) return rc;
  const msopt::ParallelSection section(a.numel(0));
  return msopt::topk_abs(a.ptr<float>(0), a.numel(0), a.numel(1), a.ptr<int32_t>(1), a.ptr<float>(2));
}

namespace {

// The parameter element types of ms_optim_dgc_apply_multi.  sub(i, d) is p[i] -= d:
// float32 in place; float16 widened to float32, updated, and rounded once back
// (to nearest even) with the kernel table's conversions.
struct F32Param {
  float *p;
  void sub(int32_t i, float d) const { p[i] -= d; }
};

struct F16Param {
  msopt::half_bits *p;
  const msopt::KernelTable &k;
  void sub(int32_t i, float d) const {
    float x;
    k.f16_to_f32(p + i, &x, 1);
    x -= d;
    k.f32_to_f16(&x, p + i, 1);
  }
};

// Workers up to which the runs are merged with one cursor per worker.
constexpr int64_t kCursorMergeMax = 16;

// True when every worker's k indices (at w * block + offset) strictly ascend,
// as ms_optim_dgc_select_multi writes them.
bool runs_ascend(const int32_t *idx, int64_t r, int64_t block, int64_t offset, int64_t k) {
  for (int64_t w = 0; w < r; ++w) {
    const int32_t *run = idx + w * block + offset;
    for (int64_t j = 1; j < k; ++j)
      if (run[j] <= run[j - 1]) return false;
  }
  return true;
}

// The same update as the general merge below, for ascending runs: each thread
// takes the indices in its share of [0, n), finds where they start in every run
// (binary search) and merges with one cursor per worker.  No allocation beyond
// the cursors, no sort.
template <class Param>
void merge_ascending_runs(const Param &p, const int32_t *idx, const float *val, int64_t r,
                          int64_t block, int64_t offset, int64_t k, float lr, int64_t n) {
  const float ranks = static_cast<float>(r);
  const int threads = r * k >= msopt::kParallelMin ? msopt::kernel_threads() : 1;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int32_t lo = static_cast<int32_t>(n * t / nt), hi = static_cast<int32_t>(n * (t + 1) / nt);
    int64_t cur[kCursorMergeMax], end[kCursorMergeMax];
    for (int64_t w = 0; w < r; ++w) {
      const int32_t *run = idx + w * block + offset;
      cur[w] = std::lower_bound(run, run + k, lo) - run;
      end[w] = std::lower_bound(run, run + k, hi) - run;
    }
    for (;;) {
      int32_t i = hi;
      for (int64_t w = 0; w < r; ++w)
        if (cur[w] < end[w]) i = std::min(i, idx[w * block + offset + cur[w]]);
      if (i == hi) break;
      float s = 0.0f;
      for (int64_t w = 0; w < r; ++w)  // rank order
        if (cur[w] < end[w] && idx[w * block + offset + cur[w]] == i)
          s += val[w * block + offset + cur[w]++];
      p.sub(i, lr * (s / ranks));
    }
  }
}

// p[i] -= lr * (s / r) for every index i of the r workers' entries (k per
// worker, at w * block + offset), s the sum of i's values in rank order.
template <class Param>
int dgc_apply_entries(const Param &p, const int32_t *idx, const float *val, int64_t r,
                      int64_t block, int64_t offset, int64_t k, float lr, int64_t n,
                      const char *fn) {
  const float ranks = static_cast<float>(r);
  if (r == 1) {  // one worker: its indices are distinct
    for (int64_t j = 0; j < k; ++j) p.sub(idx[offset + j], lr * (val[offset + j] / ranks));
    return msopt::kOk;
  }
  if (r <= kCursorMergeMax && runs_ascend(idx, r, block, offset, k)) {
    const msopt::ParallelSection section(r * k);
    merge_ascending_runs(p, idx, val, r, block, offset, k, lr, n);
    return msopt::kOk;
  }
  // merge the workers' runs by index; equal indices keep rank order
  try {
    using Entry = std::pair<int32_t, float>;
    auto by_index = [](const Entry &x, const Entry &y) { return x.first < y.first; };
    std::vector<Entry> merged, next, run(static_cast<size_t>(k));
    merged.reserve(static_cast<size_t>(r * k));
    next.reserve(static_cast<size_t>(r * k));
    for (int64_t w = 0; w < r; ++w) {
      for (int64_t j = 0; j < k; ++j)
        run[j] = {idx[w * block + offset + j], val[w * block + offset + j]};
      std::stable_sort(run.begin(), run.end(), by_index);  // already sorted when from select
      next.clear();
      std::merge(merged.begin(), merged.end(), run.begin(), run.end(), std::back_inserter(next),
                 by_index);
      merged.swap(next);
    }
    for (size_t j = 0; j < merged.size();) {
      const int32_t i = merged[j].first;
      float s = 0.0f;
      for (; j < merged.size() && merged[j].first == i; ++j) s += merged[j].second;
      p.sub(i, lr * (s / ranks));
    }
  } catch (const std::bad_alloc &) {
    return fail(msopt::kErrNoMem, "%s: out of memory", fn);
  }
  return msopt::kOk;
}

// Every index of tensor j's k entries, in each of the r workers' blocks, lies in
// [0, n): checked for all tensors before any is updated.
int check_entry_indices(const int32_t *idx, int64_t r, int64_t block, int64_t offset, int64_t k,
                        int64_t n, int j, const char *fn) {
  for (int64_t w = 0; w < r; ++w)
    for (int64_t e = 0; e < k; ++e) {
      const int32_t i = idx[w * block + offset + e];
      if (i < 0 || i >= n)
        return fail(msopt::kErrSize, "%s: tensor %d: index %d outside [0, %lld)", fn, j, i,
                    (long long)n);
    }
  return msopt::kOk;
}

// dgc_apply_entries on parameter input j (float32, or float16 through float32).
int apply_param(const AotArgs &a, int j, const int32_t *idx, const float *val, int64_t r,
                int64_t block, int64_t offset, int64_t k, float lr, const char *fn) {
  return a.is(j, "float16")
      ? dgc_apply_entries(F16Param{a.ptr<msopt::half_bits>(j), msopt::kernels()}, idx, val, r,
                          block, offset, k, lr, a.numel(j), fn)
      : dgc_apply_entries(F32Param{a.ptr<float>(j)}, idx, val, r, block, offset, k, lr,
                          a.numel(j), fn);
}

}  // namespace

// ------------------------------------------------- multi-tensor DGC steps --
//
// One op per bucket of parameters instead of one per parameter: a MindSpore
// launch costs more than the work on a small tensor.

// The dense momentum takes the gradients as a list of M tensors (the step's
// whole gradient tuple) and an int32[K] `gidx`: tensor j's gradient is
// src[gidx[j]].  MindSpore's graph compiler builds a sub-tuple element by
// element (about 10 ms a parameter); passing the whole tuple costs nothing.

// Checks gidx (input gi, K entries into M sources starting at input s0): each
// chosen source float32 of `numel` elements as tensor j (sizes from input j).
int check_sources(const AotArgs &a, int K, int s0, int M, int gi, const char *fn) {
  if (!a.is(gi, "int32") || a.numel(gi) != K)
    return fail(msopt::kErrSize, "%s: gidx must be int32[%d]", fn, K);
  const int32_t *g = a.ptr<int32_t>(gi);
  for (int j = 0; j < K; ++j) {
    if (g[j] < 0 || g[j] >= M)
      return fail(msopt::kErrSize, "%s: gidx[%d] = %d is outside [0, %d)", fn, j, g[j], M);
    if (!a.is(s0 + g[j], "float32"))
      return fail(msopt::kErrDtype, "%s: the gradient of tensor %d must be float32, got %s", fn,
                  j, a.dtypes[s0 + g[j]]);
    if (a.numel(s0 + g[j]) != a.numel(j))
      return fail(msopt::kErrSize, "%s: the gradient of tensor %d has %lld elements, not %lld",
                  fn, j, (long long)a.numel(s0 + g[j]), (long long)a.numel(j));
  }
  return msopt::kOk;
}

// Inputs: u[K], v[K], grad[K] (float32, tensor j of n_j elements), consts
// float32[2] = (momentum, use_nesterov), ks int32[K].  Outputs: idx int32[L],
// val float32[L], L = sum(ks): tensor j's k_j selections (as
// DGC's local step: momentum correction into u and v, exact top-k of |v|, ties
// to the lower index, ascending indices) side by side, so the outputs are the bucket's block of
// the fused exchange buffer (indices local to each tensor).  u, v in place.
// One parallel region for the whole bucket (msopt::topk_abs_multi): each
// tensor whole on one thread.
MSOPT_API int ms_optim_dgc_select_multi(int nparam, void **params, int *ndims, int64_t **shapes,
                                        const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_dgc_select_multi";
  if (nparam < 7 || (nparam - 4) % 3 != 0)
    return fail(msopt::kErrSize, "%s: expected 3K + 4 tensors (K >= 1), got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 4) / 3, ci = 3 * K, ki = 3 * K + 1, oi = 3 * K + 2;
  if (!a.is(ci, "float32") || a.numel(ci) != msopt::DgcConsts::kCount)
    return fail(msopt::kErrSize, "%s: consts must be float32[%d]", fn, msopt::DgcConsts::kCount);
  if (!a.is(ki, "int32") || a.numel(ki) != K)
    return fail(msopt::kErrSize, "%s: ks must be int32[%d]", fn, K);
  if (int rc = check_outputs(a, oi, fn)) return rc;
  const int32_t *ks = a.ptr<int32_t>(ki);
  int64_t total_k = 0, total_n = 0;
  for (int j = 0; j < K; ++j) {
    const int64_t n = a.numel(j);
    for (int t = 0; t < 3; ++t) {
      if (!a.is(t * K + j, "float32"))
        return fail(msopt::kErrDtype, "%s: u, v, grad of tensor %d must be float32", fn, j);
      if (a.numel(t * K + j) != n)
        return fail(msopt::kErrSize, "%s: u, v, grad sizes of tensor %d differ", fn, j);
    }
    if (ks[j] < 1 || ks[j] > n)
      return fail(msopt::kErrSize, "%s: k = %d of tensor %d is outside [1, %lld]", fn, ks[j], j,
                  (long long)n);
    total_k += ks[j];
    total_n += n;
  }
  if (total_k != a.numel(oi))
    return fail(msopt::kErrSize, "%s: the ks sum to %lld, the outputs hold %lld", fn,
                (long long)total_k, (long long)a.numel(oi));
  const msopt::DgcConsts &c = *a.ptr<const msopt::DgcConsts>(ci);
  int32_t *idx = a.ptr<int32_t>(oi);
  float *val = a.ptr<float>(oi + 1);
  try {
    std::vector<msopt::TopkSource> srcs;
    std::vector<int64_t> n(K), k(K), off(K);
    srcs.reserve(K);
    for (int j = 0; j < K; ++j) {
      float *u = a.ptr<float>(j), *v = a.ptr<float>(K + j);
      srcs.push_back({v, u, v, a.ptr<float>(2 * K + j), c.momentum, c.nesterov != 0.0f});
      n[j] = a.numel(j);
      k[j] = ks[j];
      off[j] = j == 0 ? 0 : off[j - 1] + k[j - 1];
    }
    const msopt::ParallelSection section(total_n);
    if (int rc = msopt::topk_abs_multi(srcs.data(), n.data(), k.data(), off.data(), K, idx, val))
      return rc;
    for (int j = 0; j < K; ++j)  // momentum factor masking
      for (int64_t e = off[j]; e < off[j] + k[j]; ++e) {
        srcs[j].u[idx[e]] = 0.0f;
        srcs[j].v[idx[e]] = 0.0f;
      }
  } catch (const std::bad_alloc &) {
    return fail(msopt::kErrNoMem, "%s: out of memory", fn);
  }
  return msopt::kOk;
}

// Inputs: param[K] (all float32 or all float16), idx int32[R*L] and val
// float32[R*L] (every worker's fused selection buffer, gathered in rank
// order), lr float32[1] or float32[K], layout int32[1 + 2K] = (R, offset_0..,
// k_0..): tensor j's k_j entries start at r*L + offset_j in worker r's block.
// Output: done float32[1].  Per tensor, param -= lr * G with G =
// scatter_add(0, idx, val) / R: per index the values are summed in rank order,
// then divided by R.  A float16 param is updated in float32 and rounded once to
// float16 (nearest even) per touched element.
MSOPT_API int ms_optim_dgc_apply_multi(int nparam, void **params, int *ndims, int64_t **shapes,
                                       const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_dgc_apply_multi";
  if (nparam < 6) return fail(msopt::kErrSize, "%s: expected K + 5 tensors (K >= 1), got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = nparam - 5, ii = K, vi = K + 1, li = K + 2, yi = K + 3, oi = K + 4;
  const bool half = a.is(0, "float16");
  for (int j = 0; j < K; ++j)
    if (!a.is(j, half ? "float16" : "float32"))
      return fail(msopt::kErrDtype, "%s: params must be all float32 or all float16, got %s", fn,
                  dtypes[j]);
  if (!a.is(ii, "int32") || !a.is(vi, "float32") || !a.is(li, "float32") || !a.is(yi, "int32") ||
      !a.is(oi, "float32"))
    return fail(msopt::kErrDtype, "%s: expected int32 idx, float32 val/lr, int32 layout, "
                "float32 done", fn);
  const int64_t total = a.numel(ii);
  if (a.numel(vi) != total || (a.numel(li) != 1 && a.numel(li) != K) || a.numel(yi) != 1 + 2 * K ||
      a.numel(oi) != 1)
    return fail(msopt::kErrSize, "%s: idx/val sizes differ, or lr/layout/done malformed", fn);
  const int32_t *layout = a.ptr<int32_t>(yi);
  const int64_t r = layout[0];
  if (r < 1 || total % r != 0)
    return fail(msopt::kErrSize, "%s: %lld entries are not %lld workers' blocks", fn,
                (long long)total, (long long)r);
  const int64_t block = total / r;
  const int32_t *idx = a.ptr<int32_t>(ii);
  const float *val = a.ptr<float>(vi), *lr = a.ptr<float>(li);
  for (int j = 0; j < K; ++j) {
    const int64_t offset = layout[1 + j], k = layout[1 + K + j], n = a.numel(j);
    if (offset < 0 || k < 0 || offset + k > block)
      return fail(msopt::kErrSize, "%s: tensor %d's entries (offset %lld, k %lld) do not fit "
                  "a block of %lld", fn, j, (long long)offset, (long long)k, (long long)block);
    if (int rc = check_entry_indices(idx, r, block, offset, k, n, j, fn)) return rc;
  }
  for (int j = 0; j < K; ++j)
    if (int rc = apply_param(a, j, idx, val, r, block, layout[1 + j], layout[1 + K + j],
                             lr[a.numel(li) == 1 ? 0 : j], fn))
      return rc;
  *a.ptr<float>(oi) = 0.0f;
  return msopt::kOk;
}

// Inputs: param[K] (float32, or float16 updated in float32 and rounded once),
// u[K] (float32), src[M] (gradients; tensor j's is src[gidx[j]], float32), lr
// float32[1] or float32[K], consts float32[2] = (momentum, use_nesterov), gidx
// int32[K].  Output: done float32[1].  DGC's dense momentum
// (rules::dgc_dense_momentum; p -= lr * step), u and p in place.
MSOPT_API int ms_optim_dgc_momentum(int nparam, void **params, int *ndims, int64_t **shapes,
                                    const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_dgc_momentum";
  if (nparam < 7) return fail(msopt::kErrSize, "%s: expected 2K + M + 4 tensors, got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int gi = nparam - 2, ci = nparam - 3, li = nparam - 4, oi = nparam - 1;
  const int64_t k64 = a.numel(gi);
  if (k64 < 1 || 2 * k64 + 1 > li)
    return fail(msopt::kErrSize, "%s: gidx of %lld tensors does not fit %d tensors", fn,
                (long long)k64, nparam);
  const int K = static_cast<int>(k64), M = li - 2 * K;
  if (!a.is(li, "float32") || (a.numel(li) != 1 && a.numel(li) != K))
    return fail(msopt::kErrSize, "%s: lr must be float32[1] or float32[%d]", fn, K);
  if (!a.is(ci, "float32") || a.numel(ci) != msopt::DgcConsts::kCount)
    return fail(msopt::kErrSize, "%s: consts must be float32[%d]", fn, msopt::DgcConsts::kCount);
  if (!a.is(oi, "float32") || a.numel(oi) != 1)
    return fail(msopt::kErrSize, "%s: done must be float32[1]", fn);
  if (int rc = check_sources(a, K, 2 * K, M, gi, fn)) return rc;
  const float *lr = a.ptr<float>(li);
  const msopt::DgcConsts &c = *a.ptr<const msopt::DgcConsts>(ci);
  const int32_t *gidx = a.ptr<int32_t>(gi);
  try {
    std::vector<msopt::DgcDenseTensor> ts(static_cast<size_t>(K));
    int64_t total = 0;
    for (int j = 0; j < K; ++j) {
      const bool half = a.is(j, "float16");
      if (!half && !a.is(j, "float32"))
        return fail(msopt::kErrDtype, "%s: param %d must be float32 or float16, got %s", fn, j,
                    dtypes[j]);
      if (!a.is(K + j, "float32"))
        return fail(msopt::kErrDtype, "%s: u of tensor %d must be float32", fn, j);
      const int64_t n = a.numel(j);
      if (a.numel(K + j) != n)
        return fail(msopt::kErrSize, "%s: param and u sizes of tensor %d differ", fn, j);
      ts[j] = {params[j], half, a.ptr<float>(K + j), a.ptr<float>(2 * K + gidx[j]), n,
               lr[a.numel(li) == 1 ? 0 : j]};
      total += n;
    }
    const msopt::ParallelSection section(total);
    msopt::kernels().dgc_momentum(ts.data(), K, c.momentum, c.nesterov != 0.0f);
  } catch (const std::bad_alloc &) {
    return fail(msopt::kErrNoMem, "%s: out of memory", fn);
  }
  *a.ptr<float>(oi) = 0.0f;
  return msopt::kOk;
}

// Input: int32[R*W], every worker's model signature (W values each) gathered
// in rank order.  Output: int32[1] = 1.  Fails, after printing every worker's
// signature to stderr, when the workers disagree: their exchange buffers would
// not match, and collectives on mismatched buffers hang or corrupt memory.
MSOPT_API int ms_optim_check_replicas(int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_check_replicas";
  if (nparam != 3) return fail(msopt::kErrSize, "%s: expected 3 tensors, got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  if (!a.is(0, "int32") || !a.is(1, "int32") || !a.is(2, "int32") || a.numel(2) != 1)
    return fail(msopt::kErrDtype, "%s: expected int32 signatures, int32[1] width, int32[1] out", fn);
  const int64_t total = a.numel(0), width = a.ptr<int32_t>(1)[0];
  if (width < 1 || total % width != 0)
    return fail(msopt::kErrSize, "%s: %lld values are not rows of %lld", fn, (long long)total,
                (long long)width);
  const int32_t *sig = a.ptr<int32_t>(0);
  bool same = true;
  for (int64_t i = width; i < total; ++i) same &= sig[i] == sig[i % width];
  if (!same) {
    std::fprintf(stderr, "ms_optim: DGCMomentum workers were built with different models; "
                 "signatures (parameters, elements, hash of shapes and settings, step) by rank:\n");
    for (int64_t w = 0; w < total / width; ++w) {
      std::fprintf(stderr, "  rank %lld:", (long long)w);
      for (int64_t j = 0; j < width; ++j) std::fprintf(stderr, " %d", sig[w * width + j]);
      std::fprintf(stderr, "\n");
    }
    return fail(msopt::kErrSize, "%s: workers disagree on the model", fn);
  }
  *a.ptr<int32_t>(2) = 1;
  return msopt::kOk;
}

namespace {

// Bytes per element of the dtype strings MindSpore passes, 0 if unknown.
int64_t element_bytes(const char *dtype) {
  static const struct { const char *name; int64_t bytes; } kSizes[] = {
      {"float64", 8}, {"int64", 8}, {"uint64", 8}, {"float32", 4}, {"int32", 4}, {"uint32", 4},
      {"float16", 2}, {"bfloat16", 2}, {"int16", 2}, {"uint16", 2}, {"int8", 1}, {"uint8", 1},
      {"bool", 1}};
  for (const auto &s : kSizes)
    if (std::strcmp(dtype, s.name) == 0) return s.bytes;
  return 0;
}

// splitmix64's finalizer: a bijection of 64-bit words that spreads every input bit.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Order-free digest of `bytes` bytes: the sum of mix64(word ^ mix64(position + salt)),
// so threads may add their parts in any order and get the same bits.
uint64_t digest_bytes(const unsigned char *data, int64_t bytes, uint64_t salt) {
  const int64_t words = bytes / 8;
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) \
    num_threads(msopt::kernel_threads()) if (words >= msopt::kParallelMin)
  for (int64_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, data + 8 * i, 8);
    sum += mix64(w ^ mix64(static_cast<uint64_t>(i) + salt));
  }
  uint64_t tail = 0;
  std::memcpy(&tail, data + 8 * words, static_cast<size_t>(bytes - 8 * words));
  return sum + mix64(tail ^ mix64(static_cast<uint64_t>(words) + salt)) + static_cast<uint64_t>(bytes);
}

}  // namespace

// Inputs: K tensors of one dtype.  Output: int32[2], a 64-bit digest of their
// bytes and sizes (in input order).  Workers compare digests of their
// parameters to skip broadcasting a model they already share.
MSOPT_API int ms_optim_digest(int nparam, void **params, int *ndims, int64_t **shapes,
                              const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_digest";
  if (nparam < 2) return fail(msopt::kErrSize, "%s: expected K >= 1 inputs and 1 output", fn);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int out = nparam - 1;
  if (!a.is(out, "int32") || a.numel(out) != 2)
    return fail(msopt::kErrSize, "%s: the output must be int32[2]", fn);
  int64_t total = 0;
  for (int i = 0; i < out; ++i) {
    if (element_bytes(a.dtypes[i]) == 0)
      return fail(msopt::kErrDtype, "%s: input %d has unsupported dtype %s", fn, i, a.dtypes[i]);
    total += a.numel(i) * element_bytes(a.dtypes[i]);
  }
  const msopt::ParallelSection section(total / 8);
  uint64_t h = 0;
  for (int i = 0; i < out; ++i) {
    const uint64_t salt = mix64(0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(i + 1));
    h = mix64(h ^ digest_bytes(a.ptr<unsigned char>(i), a.numel(i) * element_bytes(a.dtypes[i]), salt));
  }
  int32_t *o = a.ptr<int32_t>(out);
  o[0] = static_cast<int32_t>(static_cast<uint32_t>(h));
  o[1] = static_cast<int32_t>(static_cast<uint32_t>(h >> 32));
  return msopt::kOk;
}
