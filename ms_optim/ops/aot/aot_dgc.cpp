// MindSpore AOT adapters for DGC (docs/algorithms.md §3) and plain top-k selection.
// k is the length of the index output (static per compiled graph).  The
// tensors each takes are declared in core/contract.h.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "kernels/table.h"
#include "kernels/topk.h"

namespace msopt {
namespace {

// x float32[n] -> idx int32[k], val float32[k]: the k entries of largest |x|,
// ties to the lower index, ascending indices, val = x[idx].
int topk_abs_body(const AotCall &c) {
  using S = sig::ms_optim_topk_abs;
  MSOPT_TRY(c.require_dtype(S::x, "float32"));
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  MSOPT_CHECK(c, c.numel(S::idx) >= 1 && c.numel(S::idx) <= c.numel(S::x), kErrSize,
              "idx holds k = %lld entries, outside [1, %lld] (the elements of x)",
              static_cast<long long>(c.numel(S::idx)), static_cast<long long>(c.numel(S::x)));
  const ParallelSection section(c.numel(S::x));
  return topk_abs(c.ptr<float>(S::x), c.numel(S::x), c.numel(S::idx), c.ptr<int32_t>(S::idx),
                  c.ptr<float>(S::val));
}

// The parameter element types of ms_optim_dgc_apply_multi.  sub(i, d) is p[i] -= d:
// float32 in place; float16 widened to float32, updated, and rounded once back
// (to nearest even) with the kernel table's conversions.
struct F32Param {
  float *p;
  void sub(int32_t i, float d) const { p[i] -= d; }
};

struct F16Param {
  half_bits *p;
  const KernelTable &k;
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
  const int threads = r * k >= kParallelMin ? kernel_threads() : 1;
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
void dgc_apply_entries(const Param &p, const int32_t *idx, const float *val, int64_t r,
                       int64_t block, int64_t offset, int64_t k, float lr, int64_t n) {
  const float ranks = static_cast<float>(r);
  if (r == 1) {  // one worker: its indices are distinct
    for (int64_t j = 0; j < k; ++j) p.sub(idx[offset + j], lr * (val[offset + j] / ranks));
    return;
  }
  if (r <= kCursorMergeMax && runs_ascend(idx, r, block, offset, k)) {
    const ParallelSection section(r * k);
    merge_ascending_runs(p, idx, val, r, block, offset, k, lr, n);
    return;
  }
  // merge the workers' runs by index; equal indices keep rank order (a failed
  // allocation throws std::bad_alloc, which run_aot reports)
  {
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
  }
}

// Every index of tensor j's k entries, in each of the r blocks, lies in [0, n):
// checked for all tensors before any is updated.
int check_entry_indices(const AotCall &c, const int32_t *idx, int64_t r, int64_t block,
                        int64_t offset, int64_t k, int64_t n, int j) {
  for (int64_t w = 0; w < r; ++w)
    for (int64_t e = 0; e < k; ++e) {
      const int32_t i = idx[w * block + offset + e];
      MSOPT_CHECK(c, i >= 0 && i < n, kErrValue, "param%d: index %d of block %lld outside [0, %lld)",
                  j, i, static_cast<long long>(w), static_cast<long long>(n));
    }
  return kOk;
}

// ------------------------------------------------- multi-tensor DGC steps --
//
// One op per bucket of parameters instead of one per parameter: a MindSpore
// launch costs more than the work on a small tensor.

// Tensor j's k_j entries in a bucket's fused buffer: ks int32[K] (each in
// [1, n_j]) summing to `total` (the length of idx); off[j] is where
// tensor j's entries start.
int bucket_layout(const AotCall &c, int u, int ks_slot, int64_t total, std::vector<int64_t> *kk,
                  std::vector<int64_t> *off) {
  const int K = c.K();
  MSOPT_TRY(c.require_dtype(ks_slot, "int32"));
  const int32_t *ks = c.ptr<int32_t>(ks_slot);
  kk->assign(K, 0);
  off->assign(K, 0);
  int64_t sum = 0;
  for (int j = 0; j < K; ++j) {
    const int64_t n = c.numel(u, j);
    MSOPT_CHECK(c, ks[j] >= 1 && ks[j] <= n, kErrValue, "ks[%d] = %d is outside [1, %lld]", j,
                ks[j], static_cast<long long>(n));
    (*kk)[j] = ks[j];
    (*off)[j] = sum;
    sum += ks[j];
  }
  MSOPT_CHECK(c, sum == total, kErrSize, "the ks sum to %lld, idx holds %lld",
              static_cast<long long>(sum), static_cast<long long>(total));
  return kOk;
}

// DGC's local step up to the choice of entries, for the select and propose
// kernels (S, their common slots): u, v, grad float32 (tensor j of n_j
// elements), consts float32[2] = (momentum, use_nesterov) -> momentum
// correction into u and v (in place), then tensor j's k_j entries of largest
// |v| (ties to the lower index, ascending indices) at idx[off_j..], val = v
// there.  One parallel region for the whole bucket (topk_abs_multi): each
// tensor whole on one thread.
template <class S>
int accumulate_topk(const AotCall &c, const std::vector<int64_t> &kk,
                    const std::vector<int64_t> &off, int32_t *idx, float *val) {
  const int K = c.K();
  MSOPT_TRY(check_dgc_residuals<S>(c));
  const DgcConsts &k = *c.ptr<const DgcConsts>(S::consts);
  std::vector<TopkSource> srcs;
  std::vector<int64_t> n(K);
  srcs.reserve(K);
  int64_t total_n = 0;
  for (int j = 0; j < K; ++j) {
    float *u = c.ptr<float>(S::u, j), *v = c.ptr<float>(S::v, j);
    srcs.push_back({v, u, v, c.ptr<float>(S::grad, j), k.momentum, k.nesterov != 0.0f});
    n[j] = c.numel(S::u, j);
    total_n += n[j];
  }
  const ParallelSection section(total_n);
  return topk_abs_multi(srcs.data(), n.data(), kk.data(), off.data(), K, idx, val);
}

// One chosen entry i of a tensor's residuals: its value of v, then u and v set
// to 0 there (momentum factor masking).
inline float take_entry(float *u, float *v, int64_t i) {
  const float x = v[i];
  u[i] = 0.0f;
  v[i] = 0.0f;
  return x;
}

// The second half of DGC's local step at chosen entries (S: a kernel with
// slots u and v): tensor j's entries idx[base + off[j] .. + kk[j]), entry by
// entry, val = v at the index, then u and v set to 0 there (momentum factor
// masking), so an index that repeats takes its value at its first entry and 0
// after.  The indices are in range (the callers check them or chose them).
template <class S>
void take_entries(const AotCall &c, const int32_t *idx, float *val, int64_t base,
                  const int64_t *kk, const int64_t *off) {
  for (int j = 0; j < c.K(); ++j) {
    float *u = c.ptr<float>(S::u, j), *v = c.ptr<float>(S::v, j);
    for (int64_t e = base + off[j]; e < base + off[j] + kk[j]; ++e)
      val[e] = take_entry(u, v, idx[e]);
  }
}

// u, v, grad, consts, ks int32[K] -> idx int32[L], val float32[L], L =
// sum(ks): DGC's local step (accumulate_topk, then take_entries), tensor j's
// k_j selections side by side, so the outputs are the bucket's block of the
// fused exchange buffer (indices local to each tensor).  u, v in place.
int select_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_select_multi;
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  std::vector<int64_t> kk, off;
  MSOPT_TRY(bucket_layout(c, S::u, S::ks, c.numel(S::idx), &kk, &off));
  int32_t *idx = c.ptr<int32_t>(S::idx);
  float *val = c.ptr<float>(S::val);
  MSOPT_TRY(accumulate_topk<S>(c, kk, off, idx, val));
  take_entries<S>(c, idx, val, 0, kk.data(), off.data());
  return kOk;
}

// The same inputs -> idx int32[L]: the select's first half (accumulate_topk),
// nothing masked.  ms_optim_dgc_take_multi is the second half, at the indices
// every worker shares (the leader's proposals, or every worker's).
int propose_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_propose_multi;
  MSOPT_TRY(c.require_dtype(S::idx, "int32"));
  std::vector<int64_t> kk, off;
  MSOPT_TRY(bucket_layout(c, S::u, S::ks, c.numel(S::idx), &kk, &off));
  std::vector<float> val(static_cast<size_t>(c.numel(S::idx)));
  return accumulate_topk<S>(c, kk, off, c.ptr<int32_t>(S::idx), val.data());
}

// The layout of R blocks of entries (ms_optim_dgc_take_multi, ms_optim_dgc_apply_multi):
// layout int32[1 + 2K] = (R, offset_0.., k_0..) over `total` entries; tensor j's
// k_j entries start at r * block + offset_j in block r, block = total / R, and
// every index lies in [0, n_j) (n: the elements of slot `tensors`, tensor j).
int check_blocks(const AotCall &c, int tensors, int layout_slot, int64_t total,
                 const int32_t *idx, int64_t *r, int64_t *block) {
  const int K = c.K();
  MSOPT_TRY(check_dgc_layout(c, layout_slot));
  const int32_t *layout = c.ptr<int32_t>(layout_slot);
  *r = layout[0];
  MSOPT_CHECK(c, *r >= 1 && total % *r == 0, kErrValue,
              "layout[0] = %lld blocks do not divide the %lld entries",
              static_cast<long long>(*r), static_cast<long long>(total));
  *block = total / *r;
  for (int j = 0; j < K; ++j) {
    const int64_t offset = layout[1 + j], k = layout[1 + K + j];
    MSOPT_CHECK(c, offset >= 0 && k >= 0 && offset + k <= *block, kErrValue,
                "param%d's entries (offset %lld, k %lld) do not fit a block of %lld", j,
                static_cast<long long>(offset), static_cast<long long>(k),
                static_cast<long long>(*block));
    MSOPT_TRY(check_entry_indices(c, idx, *r, *block, offset, k, c.numel(tensors, j), j));
  }
  return kOk;
}

// u, v float32 (tensor j of n_j elements), idx int32[R*L], layout (R,
// offsets, counts) -> val float32[R*L]: the select's second half at shared
// indices.  Block by block, tensor by tensor, entry by entry: val = v at the
// index, then u and v set to 0 there, so an index that repeats (in two
// workers' proposals) takes its value once, at its first entry, and 0 after.
// Every index is checked before anything is written.
int take_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_take_multi;
  MSOPT_TRY(check_dgc_take<S>(c));
  const int64_t total = c.numel(S::idx);
  const int32_t *idx = c.ptr<int32_t>(S::idx);
  int64_t r = 0, block = 0;
  MSOPT_TRY(check_blocks(c, S::u, S::layout, total, idx, &r, &block));
  const int32_t *layout = c.ptr<int32_t>(S::layout);
  const int K = c.K();
  std::vector<int64_t> off(layout + 1, layout + 1 + K), kk(layout + 1 + K, layout + 1 + 2 * K);
  float *val = c.ptr<float>(S::val);
  for (int64_t e = 0; e < total; ++e) val[e] = 0.0f;  // entries no tensor claims
  for (int64_t w = 0; w < r; ++w) take_entries<S>(c, idx, val, w * block, kk.data(), off.data());
  return kOk;
}

// param (all float32 or all float16), idx int32[R*L] and val float32[R*L]
// (R blocks: every worker's fused selection buffer, gathered in rank order, or
// the one buffer of an exchange of shared indices), lr float32[1] or
// float32[K], layout int32[1 + 2K] = (R, offset_0.., k_0..): tensor j's k_j
// entries start at r*L + offset_j in block r -> done float32[1].  Per tensor,
// param -= lr * G with G = scatter_add(0, idx, val) / R: per index the values
// are summed in block order, then divided by R.  A
// float16 param is updated in float32 and rounded once to float16 (nearest
// even) per touched element.
int apply_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_apply_multi;
  const int K = c.K();
  bool half = false;
  MSOPT_TRY(check_dgc_apply<S>(c, &half));
  const int64_t total = c.numel(S::idx);
  const int32_t *idx = c.ptr<int32_t>(S::idx);
  int64_t r = 0, block = 0;
  MSOPT_TRY(check_blocks(c, S::param, S::layout, total, idx, &r, &block));
  const int32_t *layout = c.ptr<int32_t>(S::layout);
  const float *val = c.ptr<float>(S::val), *lr = c.ptr<float>(S::lr);
  for (int j = 0; j < K; ++j) {
    const int64_t offset = layout[1 + j], k = layout[1 + K + j], n = c.numel(S::param, j);
    const float lr_j = lr[c.numel(S::lr) == 1 ? 0 : j];
    if (half)
      dgc_apply_entries(F16Param{c.ptr<half_bits>(S::param, j), kernels()}, idx, val, r, block,
                        offset, k, lr_j, n);
    else
      dgc_apply_entries(F32Param{c.ptr<float>(S::param, j)}, idx, val, r, block, offset, k, lr_j,
                        n);
  }
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

// ------------------------------------------- the bucket of small parameters --
//
// DGCMomentum's bucket_sparsity: the K tensors' residuals updated as in the
// select, then one selection over their concatenation (tensor j's elements at
// positions start[j] .. start[j] + n_j), so a tensor whose accumulated gradient
// is large sends more of it.  k is the length of idx.

// The positions where each of the K tensors (slot u) starts in the
// concatenation, and the concatenation's length (< 2^31: positions are int32).
int bucket_starts(const AotCall &c, int u, std::vector<int64_t> *start, int64_t *total) {
  start->assign(c.K(), 0);
  int64_t sum = 0;
  for (int j = 0; j < c.K(); ++j) {
    (*start)[j] = sum;
    sum += c.numel(u, j);
  }
  MSOPT_CHECK(c, sum < (int64_t{1} << 31), kErrSize,
              "the bucket holds %lld elements, more than int32 positions reach",
              static_cast<long long>(sum));
  *total = sum;
  return kOk;
}

// u, v float32 (tensor j of n_j elements), its gradient src[gidx[j]], consts
// float32[2] = (momentum, use_nesterov) -> momentum correction into u and v (in
// place, the rule of the select), then the k entries of largest |v| over the
// concatenation (ties to the lower position, ascending positions) at idx,
// val = v there.
template <class S>
int bucket_accumulate_topk(const AotCall &c, const std::vector<int64_t> &start, int64_t total,
                           int32_t *idx, float *val) {
  MSOPT_TRY(check_dgc_bucket_residuals<S>(c));
  const DgcConsts &k = *c.ptr<const DgcConsts>(S::consts);
  const int32_t *gidx = c.ptr<int32_t>(S::gidx);
  const int64_t kk = c.numel(S::idx);
  MSOPT_CHECK(c, kk >= 1 && kk <= total, kErrSize,
              "idx holds k = %lld entries, outside [1, %lld] (the bucket's elements)",
              static_cast<long long>(kk), static_cast<long long>(total));
  // the update alone: no key reaches one above every key, a NaN's too (cap 0 keeps none)
  Gather none{};
  none.threshold_key = UINT32_MAX;
  std::unique_ptr<float[]> all(new float[static_cast<size_t>(total)]);  // every slot written
  const ParallelSection section(total);
  // the tensors handed out to the threads one by one (each whole on one thread)
#pragma omp parallel for num_threads(section.held() ? kernel_threads() : 1) schedule(dynamic, 1)
  for (int j = 0; j < c.K(); ++j) {
    float *u = c.ptr<float>(S::u, j), *v = c.ptr<float>(S::v, j);
    const int64_t n = c.numel(S::u, j);
    kernels().dgc_accumulate_range_f32(u, v, c.ptr<float>(S::src, gidx[j]), 0, n, k.momentum,
                                       k.nesterov != 0.0f, &none);
    std::copy(v, v + n, all.get() + start[j]);
  }
  return topk_abs(all.get(), total, kk, idx, val);
}

// val[e] = take_entry at position idx[e], entry by entry, so a position taken
// twice takes its value at its first entry and 0 after.  The positions are in
// [0, total).
template <class S>
void bucket_take_entries(const AotCall &c, const std::vector<int64_t> &start, const int32_t *idx,
                         float *val, int64_t count) {
  for (int64_t e = 0; e < count; ++e) {
    const int j = static_cast<int>(std::upper_bound(start.begin(), start.end(), idx[e]) -
                                   start.begin()) - 1;
    val[e] = take_entry(c.ptr<float>(S::u, j), c.ptr<float>(S::v, j), idx[e] - start[j]);
  }
}

// u, v, src, consts, gidx -> idx int32[k], val float32[k]: bucket_accumulate_topk,
// then bucket_take_entries at the selected positions.
int bucket_select_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_bucket_select;
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  std::vector<int64_t> start;
  int64_t total = 0;
  MSOPT_TRY(bucket_starts(c, S::u, &start, &total));
  int32_t *idx = c.ptr<int32_t>(S::idx);
  float *val = c.ptr<float>(S::val);
  MSOPT_TRY(bucket_accumulate_topk<S>(c, start, total, idx, val));
  bucket_take_entries<S>(c, start, idx, val, c.numel(S::idx));
  return kOk;
}

// The same inputs -> idx int32[k]: the select's first half, nothing masked
// (ms_optim_dgc_bucket_take is the second half, at shared positions).
int bucket_propose_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_bucket_propose;
  MSOPT_TRY(c.require_dtype(S::idx, "int32"));
  std::vector<int64_t> start;
  int64_t total = 0;
  MSOPT_TRY(bucket_starts(c, S::u, &start, &total));
  std::vector<float> val(static_cast<size_t>(c.numel(S::idx)));
  return bucket_accumulate_topk<S>(c, start, total, c.ptr<int32_t>(S::idx), val.data());
}

// u, v float32, idx int32[m] (positions in the concatenation, any order,
// repeats allowed) -> val float32[m]: bucket_take_entries, after checking every
// position.
int bucket_take_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_bucket_take;
  for (int s : {S::u, S::v, S::val}) MSOPT_TRY(c.require_dtype(s, "float32"));
  MSOPT_TRY(c.require_dtype(S::idx, "int32"));
  MSOPT_TRY(c.require_same_numel(S::u, {S::v}));
  MSOPT_CHECK(c, c.numel(S::val) == c.numel(S::idx), kErrSize,
              "val must have idx's length %lld, got %lld",
              static_cast<long long>(c.numel(S::idx)), static_cast<long long>(c.numel(S::val)));
  std::vector<int64_t> start;
  int64_t total = 0;
  MSOPT_TRY(bucket_starts(c, S::u, &start, &total));
  MSOPT_TRY(check_bucket_positions(c, S::idx, total));
  bucket_take_entries<S>(c, start, c.ptr<int32_t>(S::idx), c.ptr<float>(S::val),
                         c.numel(S::idx));
  return kOk;
}

// param (each float32, or float16 updated in float32 and rounded once), mean
// float32[total] (the bucket's update in the concatenation's positions), lr
// float32[1] or float32[K] -> done float32[1]: p_j -= lr_j * mean over tensor
// j's positions, every element (DGC's apply, dense over the bucket).
int bucket_apply_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_bucket_apply;
  const int K = c.K();
  MSOPT_TRY(check_dgc_params<S>(c));
  MSOPT_TRY(c.require_dtype(S::mean, "float32"));
  std::vector<int64_t> start;
  int64_t total = 0;
  MSOPT_TRY(bucket_starts(c, S::param, &start, &total));
  MSOPT_CHECK(c, c.numel(S::mean) == total, kErrSize,
              "mean must hold the bucket's %lld elements, got %lld",
              static_cast<long long>(total), static_cast<long long>(c.numel(S::mean)));
  const float *mean = c.ptr<float>(S::mean), *lr = c.ptr<float>(S::lr);
  for (int j = 0; j < K; ++j) {
    const float lr_j = lr[c.numel(S::lr) == 1 ? 0 : j];
    const float *m = mean + start[j];
    const int64_t n = c.numel(S::param, j);
    if (c.is(S::param, "float16", j)) {
      const F16Param p{c.ptr<half_bits>(S::param, j), kernels()};
      for (int64_t i = 0; i < n; ++i) p.sub(static_cast<int32_t>(i), lr_j * m[i]);
    } else {
      const F32Param p{c.ptr<float>(S::param, j)};
      for (int64_t i = 0; i < n; ++i) p.sub(static_cast<int32_t>(i), lr_j * m[i]);
    }
  }
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

// bucket_apply from entries: idx int32[m] and val float32[m] at positions of the
// concatenation (any order, a position repeated summed from 0 in entry order) and
// ranks float32[1] give mean = scatter_add(0, idx, val) / ranks, applied where idx
// names (elsewhere p - lr * 0 is p): the dense apply's bits without a dense mean.
int bucket_apply_entries_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_bucket_apply_entries;
  MSOPT_TRY(check_dgc_params<S>(c));
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  MSOPT_TRY(c.require_f32(S::ranks, 1));
  std::vector<int64_t> start;
  int64_t total = 0;
  MSOPT_TRY(bucket_starts(c, S::param, &start, &total));
  MSOPT_TRY(check_bucket_positions(c, S::idx, total));
  const int32_t *idx = c.ptr<int32_t>(S::idx);
  const float *val = c.ptr<float>(S::val), *lr = c.ptr<float>(S::lr);
  const float ranks = *c.ptr<float>(S::ranks);
  const bool lr_each = c.numel(S::lr) != 1;
  const int64_t count = c.numel(S::idx);
  std::vector<float> sum(static_cast<size_t>(total), 0.0f);
  for (int64_t e = 0; e < count; ++e) sum[idx[e]] += val[e];
  std::vector<char> half(c.K()), applied(static_cast<size_t>(total), 0);
  for (int j = 0; j < c.K(); ++j) half[j] = c.is(S::param, "float16", j);
  for (int64_t e = 0; e < count; ++e) {
    const int32_t at = idx[e];
    if (applied[at]++) continue;
    const int j = static_cast<int>(std::upper_bound(start.begin(), start.end(), at) -
                                   start.begin()) - 1;
    const float d = lr[lr_each ? j : 0] * (sum[at] / ranks);
    const auto i = static_cast<int32_t>(at - start[j]);
    if (half[j]) F16Param{c.ptr<half_bits>(S::param, j), kernels()}.sub(i, d);
    else F32Param{c.ptr<float>(S::param, j)}.sub(i, d);
  }
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_topk_abs, msopt::topk_abs_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_select_multi, msopt::select_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_propose_multi, msopt::propose_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_take_multi, msopt::take_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_apply_multi, msopt::apply_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_bucket_select, msopt::bucket_select_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_bucket_propose, msopt::bucket_propose_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_bucket_take, msopt::bucket_take_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_bucket_apply, msopt::bucket_apply_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_bucket_apply_entries, msopt::bucket_apply_entries_body)
