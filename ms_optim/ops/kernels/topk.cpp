// Exact top-k of |x| in (usually) one streaming pass.
//
// 1. Estimate a threshold from a strided sample of the values (for DGC the
//    sample is of the updated residual, computed with the same rule).
// 2. One pass (fused with the DGC residual update) gathers the indices whose
//    magnitude key reaches the threshold's into per-thread buffers.
// 3. If at least k were gathered and none overflowed, select exactly among
//    them: the k-th largest key T, then every candidate above T and the first
//    ones equal to T (ties to the lower index), in ascending index order.
// 4. Otherwise (too few, or too many, e.g. many ties at the threshold) fall
//    back to an exact radix select over the whole array: three histogram
//    passes find T and how many ties to take, a last pass emits the result.
// The keys and digits are core/radix.h's, which the CUDA kernels share.
#include "kernels/topk.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "core/common.h"
#include "kernels/table.h"
#include "core/radix.h"
#include "core/rules.h"

namespace msopt {
namespace {

using radix::magnitude_key;

constexpr int64_t kSampleMax = 1 << 14;
constexpr int64_t kSampleMin = 1 << 12;

// The value at sample index i as the gathering pass will see it.
float sampled_value(const TopkSource &s, int64_t i) {
  if (s.u == nullptr) return s.x[i];
  float u = s.u[i], v = s.v[i];
  if (s.nesterov)
    rules::dgc_accumulate<float, true>(s.grad[i], u, v, s.momentum);
  else
    rules::dgc_accumulate<float, false>(s.grad[i], u, v, s.momentum);
  return v;
}

// A fixed scatter of the sample inside its window (a multiplicative hash of the
// window's number): strided samples would fall on the same columns of every row
// of a weight matrix, whose magnitudes may differ from the other columns'.
inline int64_t sample_offset(int64_t j, int64_t stride) {
  return static_cast<int64_t>((static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull) >> 40) % stride;
}

// The key of a threshold that about 1.3k + 3 sigma + 8 elements reach, from a
// sample; 0 (gather everything) when the sample cannot resolve it.  *expect is
// the expected number of candidates.
uint32_t estimate_threshold(const TopkSource &s, int64_t n, int64_t k, int64_t *expect) {
  // one sample in 256 (at least 4096, at most 16384), one per window of the
  // tensor: the threshold only has to be about right (the selection among the
  // candidates is exact), and each sample costs a cache line of u, v and grad
  const int64_t m = std::min(n, std::min(kSampleMax, std::max(kSampleMin, n / 256)));
  const int64_t stride = n / m;
  std::vector<uint32_t> keys(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j)
    keys[j] = magnitude_key(sampled_value(s, j * stride + sample_offset(j, stride)));
  const double frac = static_cast<double>(k) / static_cast<double>(n);
  const double mean = frac * static_cast<double>(m);
  const int64_t rank = static_cast<int64_t>(std::ceil(1.3 * mean + 3.0 * std::sqrt(mean) + 8.0));
  if (rank >= m) {
    *expect = n;
    return 0;
  }
  std::nth_element(keys.begin(), keys.begin() + rank, keys.end(), std::greater<uint32_t>());
  *expect = static_cast<int64_t>(static_cast<double>(rank) * n / m) + 1;
  return keys[rank];
}

// The k-th largest of the keys key(i), i in [0, n), digit by digit (core/radix.h):
// returns T, and in *need how many keys equal to T belong to the top k (the
// first ones by index).  count(prefix, mask, shift, bins, hist) adds to hist[d]
// the keys matching prefix under mask whose digit at shift is d.
template <class Count>
uint32_t kth_key(int64_t k, int64_t *need, const Count &count) {
  uint32_t prefix = 0, mask = 0;
  *need = k;
  for (int level = 0; level < radix::kRadixLevels; ++level) {
    const int shift = radix::kRadixShift[level];
    const uint32_t bins = 1u << radix::kRadixWidth[level];
    std::vector<int64_t> hist(bins, 0);
    count(prefix, mask, shift, bins, hist.data());
    for (int64_t b = bins - 1; b >= 0; --b) {
      if (hist[b] >= *need) {
        prefix |= static_cast<uint32_t>(b) << shift;
        mask |= (bins - 1) << shift;
        break;
      }
      *need -= hist[b];
    }
  }
  return prefix;
}

// Emits the result from the candidates (ascending indices, every value with
// |x| >= some t <= the k-th largest magnitude), which number at least k: their
// keys once, the k-th largest by its digits (no reordering), then one pass.
void select_from_candidates(const float *x, const int32_t *cand, int64_t c, int64_t k,
                            int32_t *idx, float *val) {
  std::vector<uint32_t> keys(static_cast<size_t>(c));
  for (int64_t j = 0; j < c; ++j) keys[j] = magnitude_key(x[cand[j]]);
  int64_t ties = 0;  // how many candidates equal to t to take, lowest index first
  const uint32_t t = kth_key(k, &ties, [&](uint32_t prefix, uint32_t mask, int shift,
                                           uint32_t bins, int64_t *hist) {
    for (int64_t j = 0; j < c; ++j)
      if ((keys[j] & mask) == prefix) ++hist[(keys[j] >> shift) & (bins - 1)];
  });
  int64_t o = 0;
  for (int64_t j = 0; j < c && o < k; ++j) {
    if (keys[j] > t || (keys[j] == t && ties-- > 0)) {
      idx[o] = cand[j];
      val[o] = x[cand[j]];
      ++o;
    }
  }
}

// Exact fallback: radix select of the k-th largest key over the whole array
// (core/radix.h's digits), then one ordered pass.
void radix_select(const float *x, int64_t n, int64_t k, int32_t *idx, float *val) {
  int64_t need = 0;  // how many keys equal to the k-th largest are taken
  const uint32_t prefix = kth_key(k, &need, [&](uint32_t prefix_, uint32_t mask, int shift,
                                                uint32_t bins, int64_t *hist) {
#pragma omp parallel
    {
      std::vector<int64_t> local(bins, 0);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t key = magnitude_key(x[i]);
        if ((key & mask) == prefix_) ++local[(key >> shift) & (bins - 1)];
      }
#pragma omp critical
      for (uint32_t b = 0; b < bins; ++b) hist[b] += local[b];
    }
  });
  // prefix is now the k-th largest key; `need` keys equal to it are taken.
  int64_t o = 0;
  for (int64_t i = 0; i < n && o < k; ++i) {
    const uint32_t key = magnitude_key(x[i]);
    if (key > prefix || (key == prefix && need-- > 0)) {
      idx[o] = static_cast<int32_t>(i);
      val[o] = x[i];
      ++o;
    }
  }
}

}  // namespace

namespace {

// One selection split in phases: prepare (sample, buffers) on one thread, the
// gathering pass (whole, or per thread of a team), finish on one thread.
struct TopkJob {
  const TopkSource *src = nullptr;
  int64_t n = 0, k = 0, cap = 0;
  int nthreads = 1;
  std::unique_ptr<int32_t[]> slots;  // cap per thread, written up to its count
  Gather g;

  void prepare(const TopkSource &s, int64_t n_, int64_t k_, int threads) {
    src = &s;
    n = n_;
    k = k_;
    int64_t expect = 0;
    const uint32_t thr = estimate_threshold(s, n, k, &expect);
    nthreads = std::min(threads, kMaxThreads);
    // room for twice the expected candidates per thread: overflow means the
    // sample misjudged badly (or ties), and the exact fallback takes over
    cap = std::min(n, 2 * expect + 4096);
    slots.reset(new int32_t[static_cast<size_t>(cap) * nthreads]);
    g.threshold_key = thr;
    g.cap = cap;
    g.slots = slots.get();
    std::fill(g.counts, g.counts + kMaxThreads, int64_t{0});
  }

  void finish(int32_t *idx, float *val) {
    int64_t total = 0;
    bool overflow = false;
    for (int t = 0; t < kMaxThreads; ++t) {
      total += std::min(g.counts[t], cap);
      overflow |= g.counts[t] > cap;
    }
    if (overflow || total < k) {
      radix_select(src->x, n, k, idx, val);
      return;
    }
    // compact the per-thread runs (thread order = index order)
    int64_t c = 0;
    for (int t = 0; t < nthreads; ++t) {
      const int32_t *run = slots.get() + static_cast<int64_t>(t) * cap;
      if (c != static_cast<int64_t>(t) * cap)
        std::memmove(slots.get() + c, run, static_cast<size_t>(g.counts[t]) * sizeof(int32_t));
      c += g.counts[t];
    }
    select_from_candidates(src->x, slots.get(), c, k, idx, val);
  }
};

int check_sizes(int64_t n, int64_t k) {
  if (n < 1 || n > INT32_MAX) return fail(kErrSize, "topk: n = %lld is outside [1, 2^31)", (long long)n);
  if (k < 1 || k > n) return fail(kErrSize, "topk: k = %lld is outside [1, n = %lld]", (long long)k, (long long)n);
  return kOk;
}

}  // namespace

int topk_abs(const float *x, int64_t n, int64_t k, int32_t *idx, float *val) {
  if (int rc = check_sizes(n, k)) return rc;
  try {
    const TopkSource src{x, nullptr, nullptr, nullptr, 0.0f, false};
    TopkJob job;
    job.prepare(src, n, k, kernel_threads());
    kernels().gather_abs_f32(x, n, &job.g);
    job.finish(idx, val);
    return kOk;
  } catch (const std::bad_alloc &) {
    return fail(kErrNoMem, "topk: out of memory (n = %lld, k = %lld)", (long long)n, (long long)k);
  }
}

int topk_abs_multi(const TopkSource *srcs, const int64_t *n, const int64_t *k,
                   const int64_t *off, int count, int32_t *idx, float *val) {
  int64_t total = 0;
  for (int j = 0; j < count; ++j) {
    if (srcs[j].u == nullptr) return fail(kErrNull, "topk: tensor %d is not a DGC source", j);
    if (int rc = check_sizes(n[j], k[j])) return rc;
    total += n[j];
  }
  const KernelTable &kt = kernels();
  int status = kOk;  // kErrNoMem once a thread ran out of memory
  try {
    // largest first, so that the dynamic schedule ends balanced
    std::vector<int> order(static_cast<size_t>(count));
    for (int j = 0; j < count; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return n[x] > n[y]; });
    // Its own loop, not the walker's (core/multi_tensor.h): a selection is not
    // elementwise; each tensor is sampled, gathered into the slots of the one
    // thread that runs it and selected there, whole, largest first, and a
    // failure (out of memory) is caught per tensor and reported after the region.
    const int threads = total >= kParallelMin ? kernel_threads() : 1;
#pragma omp parallel num_threads(threads)
    {
      int mine = 0;
#pragma omp for schedule(dynamic, 1) nowait
      for (int q = 0; q < count; ++q) {
        if (mine != 0) continue;
        const int j = order[q];
        const TopkSource &s = srcs[j];
        try {
          TopkJob job;  // the whole tensor on this thread: its candidates in this thread's slots
          job.prepare(s, n[j], k[j], omp_get_thread_num() + 1);
          kt.dgc_accumulate_range_f32(s.u, s.v, s.grad, 0, n[j], s.momentum, s.nesterov, &job.g);
          job.finish(idx + off[j], val + off[j]);
        } catch (const std::bad_alloc &) {
          mine = kErrNoMem;
        }
      }
      if (mine != 0) {
#pragma omp critical(msopt_topk_multi_status)
        if (status == 0) status = mine;
      }
    }
  } catch (const std::bad_alloc &) {
    status = kErrNoMem;
  }
  if (status != kOk)  // (recorded on this thread: the failing one may be another)
    return fail(kErrNoMem, "topk: out of memory selecting from %d tensors", count);
  return kOk;
}

}  // namespace msopt
