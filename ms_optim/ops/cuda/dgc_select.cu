// CUDA entries of DGC's local step (docs/algorithms.md §3), with the CPU
// library's names and declarations (core/contract.h); the entries that read
// the exchanged buffers are cuda/dgc_exchange.cu's:
//
//   ms_optim_dgc_select_multi   residual update of u and v (rules::dgc_accumulate),
//                               exact top-k of |v| per tensor (core/radix.h's rule),
//                               momentum factor masking, the entries written into
//                               the bucket's block of the fused exchange buffer;
//   ms_optim_dgc_propose_multi  the same without masking, indices only.
//
// The selection is a radix select that reads v in full once, in the residual
// update, and then touches only candidates:
//
//   select_init        per tensor: ks checked; a guess from a sample of the
//                      updated residuals, the lower edge of the top digit's bin
//                      that about 2k/n of the sample reaches;
//   select_accumulate  the residual update (20 bytes an element, the floor);
//                      each data block of 4096 elements lists its keys at or
//                      above the guess in index order (up to kListCap; a block
//                      with more is read from v again later) and histograms
//                      their top digit; the last CTA of each tensor chooses it;
//   select_level x 3   level 0 only for a tensor whose guess fewer than k keys
//                      reached: the top digit of every key, from v; levels 1
//                      and 2: the next two digits of the k-th largest key T,
//                      over the lists (or v, for the blocks that overflowed);
//   select_count       each block's keys above and equal to T; the last CTA of
//                      each tensor scans them;
//   select_emit        the entries in ascending index order, ties to the lower
//                      index, u and v masked there.
//
// The selection does not depend on the guess, only its speed: a guess that is
// too low overflows lists, one that is too high sends the tensor through
// select_level's level 0.  Histograms take atomics (their counts do not depend on order);
// nothing that decides a value or a position does.  A tensor with k == n is
// written out by the residual update.  On Hopper and later each kernel starts
// while the one before it finishes (programmatic dependent launch).  Nothing
// waits on the host; ks is read on the device.

#include <cub/cub.cuh>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "core/radix.h"
#include "core/rules.h"
#include "cuda/dgc_select.cuh"
#include "cuda/runtime.cuh"

namespace msopt {
namespace cuda {
namespace {

// Per tensor (one CTA each): its histograms and tickets zeroed, its data blocks
// marked as its own; ks checked (k in [1, n], the ks summing to the outputs'
// length; the first CTA reports) and the tensor's k and offset; and the guess:
// the lower edge of the top digit's bin that a little more than 2k/n of a
// sample of the updated residuals reaches.
__global__ void __launch_bounds__(kThreads)
select_init(SelectArgs a, const int32_t *ks, long long total, const float *consts) {
  wait_for_previous_grid();
  const int j = blockIdx.x;
  uint4 *hist = reinterpret_cast<uint4 *>(a.hist + j * kHistStride);
  for (size_t i = threadIdx.x; i < kHistStride / 4; i += kThreads) hist[i] = make_uint4(0, 0, 0, 0);
  if (threadIdx.x < kPasses) a.tickets[threadIdx.x * a.K + j] = 0;
  if (j == 0 && threadIdx.x == 0) *a.any_full = 0;
  const int64_t first = a.first[j], last = a.first[j + 1];
  for (int64_t b = first + threadIdx.x; b < last; b += kThreads) a.owner[b] = j;
  __shared__ uint32_t h[kRadixMaxBins];
  for (uint32_t b = threadIdx.x; b < kRadixMaxBins; b += kThreads) h[b] = 0;
  // ks: the first one out of range, their sum and the sum before tensor j
  long long sum = 0, sum_before = 0;
  int bad = INT_MAX;
  for (int jj = threadIdx.x; jj < a.K; jj += kThreads) {
    const long long k = ks[jj];
    if (k < 1 || k > a.t[jj].n) bad = min(bad, jj);
    sum += k;
    sum_before += jj < j ? k : 0;
  }
  using Reduce = cub::BlockReduce<long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  __shared__ long long s_sum, s_before, s_bad;
  const long long bad_all = Reduce(tmp).Reduce(static_cast<long long>(bad), ::cuda::minimum<long long>{});
  __syncthreads();
  const long long sum_all = Reduce(tmp).Sum(sum);
  __syncthreads();
  const long long before_all = Reduce(tmp).Sum(sum_before);
  if (threadIdx.x == 0) {
    s_bad = bad_all;
    s_sum = sum_all;
    s_before = before_all;
    if (j == 0 && bad_all != INT_MAX)
      report(a.rep, kDevKsRange, bad_all, ks[bad_all], a.t[bad_all].n);
    else if (j == 0 && sum_all != total)
      report(a.rep, kDevKsSum, sum_all, total);
  }
  __syncthreads();
  if (s_bad != INT_MAX || s_sum != total) return;
  const DgcTensor t = a.t[j];
  const int64_t k = ks[j], n = t.n;
  SelectState s{0u, 0u, k, k, s_before, 0u, k == n ? kAll : kListed};
  if (s.mode == kAll) {
    if (threadIdx.x == 0) a.state[j] = s;
    return;
  }
  const int64_t spread = n / kSampleEvery;
  const int64_t S = n <= kSampleMin   ? n
                    : spread < kSampleMin ? kSampleMin
                    : spread > kSampleMax ? kSampleMax
                                          : spread;
  const uint64_t stride = static_cast<uint64_t>(n / S);
  const DgcConsts dc = *reinterpret_cast<const DgcConsts *>(consts);
  float u[kSamplesPerThread], v[kSamplesPerThread], g[kSamplesPerThread];
#pragma unroll
  for (int q = 0; q < kSamplesPerThread; ++q) {
    // sample s: stratum [s * stride, (s + 1) * stride), a place in it from a hash of s
    const uint32_t s_at = threadIdx.x + q * kThreads;
    const uint32_t hash = s_at * 0x9E3779B9u;
    const int64_t pos = static_cast<int64_t>(s_at * stride + ((hash * stride) >> 32));
    u[q] = s_at < S ? t.u[pos] : 0.0f;
    v[q] = s_at < S ? t.v[pos] : 0.0f;
    g[q] = s_at < S ? t.g[pos] : 0.0f;
  }
  __syncthreads();  // h zeroed
#pragma unroll
  for (int q = 0; q < kSamplesPerThread; ++q) {
    if (threadIdx.x + q * kThreads >= S) continue;
    if (dc.nesterov != 0.0f)
      rules::dgc_accumulate<float, true>(g[q], u[q], v[q], dc.momentum);
    else
      rules::dgc_accumulate<float, false>(g[q], u[q], v[q], dc.momentum);
    atomicAdd(&h[magnitude_key(v[q]) >> kTopShift], 1u);
  }
  __syncthreads();
  uint32_t c[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) c[q] = h[kRadixMaxBins - 1 - (8 * threadIdx.x + q)];
  const int64_t target = (2 * k * S + n - 1) / n + 4;
  const Found f = find_from_top(c, kRadixMaxBins, target);
  if (threadIdx.x == 0) {
    if (f.bin > 0) s.guess = static_cast<uint32_t>(f.bin) << kTopShift;
    a.state[j] = s;
  }
}

// The CTA's choice of tensor j's digit at `level` from its histogram (read
// past the L1: other CTAs of this kernel added to it), which it zeroes for the
// next level.  At level 0 of a listed tensor, fewer keys at or above the guess
// than k make it a full one instead (its digit is chosen again, from all its keys).
__device__ void choose_digit(const SelectArgs &a, int j, int level) {
  const int shift = level_shift(level);
  const uint32_t bins = level_bins(level);
  uint32_t c[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (8 * threadIdx.x < bins) {  // bins lo .. lo + 7 are positions 8t + 7 .. 8t from the top
    const uint32_t lo = bins - 8 - 8 * threadIdx.x;
    uint4 x[kHistCopies][2];
#pragma unroll
    for (int copy = 0; copy < kHistCopies; ++copy) {
      uint4 *at = reinterpret_cast<uint4 *>(a.hist + j * kHistStride + copy * kRadixMaxBins + lo);
      x[copy][0] = __ldcg(at);
      x[copy][1] = __ldcg(at + 1);
    }
#pragma unroll
    for (int copy = 0; copy < kHistCopies; ++copy) {
      uint4 *at = reinterpret_cast<uint4 *>(a.hist + j * kHistStride + copy * kRadixMaxBins + lo);
      at[0] = make_uint4(0, 0, 0, 0);
      at[1] = make_uint4(0, 0, 0, 0);
      c[7] += x[copy][0].x;
      c[6] += x[copy][0].y;
      c[5] += x[copy][0].z;
      c[4] += x[copy][0].w;
      c[3] += x[copy][1].x;
      c[2] += x[copy][1].y;
      c[1] += x[copy][1].z;
      c[0] += x[copy][1].w;
    }
  }
  SelectState s = a.state[j];
  const Found f = find_from_top(c, bins, s.need);
  if (threadIdx.x != 0) return;
  if (level == 0 && s.mode == kListed && f.total < s.need) {
    s.mode = kFull;
    *a.any_full = 1;
  } else if (f.bin >= 0) {
    s.prefix |= static_cast<uint32_t>(f.bin) << shift;
    s.mask |= (bins - 1) << shift;
    s.need -= f.above;
  }
  a.state[j] = s;
}

// Exclusive scans of tensor j's per-block counts of keys above and equal to T
// (read past the L1), by the CTA.
__device__ void scan_counts(const SelectArgs &a, int j) {
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  constexpr int kPer = 16;
  const int64_t lo = a.first[j], hi = a.first[j + 1];
  unsigned long long carry = 0;  // above T in the high word, equal to T in the low
  for (int64_t b0 = lo; b0 < hi; b0 += int64_t{kThreads} * kPer) {
    uint2 mine[kPer];
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int64_t b = b0 + int64_t{kPer} * threadIdx.x + q;
      mine[q] = b < hi ? __ldcg(&a.counts[b]) : make_uint2(0, 0);
    }
    unsigned long long sum = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q) sum += (static_cast<unsigned long long>(mine[q].x) << 32) | mine[q].y;
    unsigned long long before = 0, all = 0;
    Scan(tmp).ExclusiveSum(sum, before, all);
    before += carry;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int64_t b = b0 + int64_t{kPer} * threadIdx.x + q;
      if (b < hi)
        a.before[b] = make_uint2(static_cast<uint32_t>(before >> 32), static_cast<uint32_t>(before));
      before += (static_cast<unsigned long long>(mine[q].x) << 32) | mine[q].y;
    }
    carry += all;
    __syncthreads();
  }
}

// The end of a pass: each warp names the tensor of the data block it counted
// (-1: none); the CTA that counts a tensor's last data block then takes the
// tensor's next step, then(j), with every earlier CTA's atomics visible.
template <class Then>
__device__ void finish_pass(const SelectArgs &a, int pass, int my_j, Then then) {
  __shared__ int s_j[kWarps], s_last[kWarps], s_count;
  if (lane_id() == 0) s_j[warp_id()] = my_j;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int count = 0;
    for (int w = 0; w < kWarps;) {
      const int j = s_j[w];
      int c = 1;
      while (w + c < kWarps && s_j[w + c] == j) ++c;
      if (j >= 0) {
        const int want = static_cast<int>(a.first[j + 1] - a.first[j]);
        if (atomicAdd(&a.tickets[pass * a.K + j], c) + c == want) s_last[count++] = j;
      }
      w += c;
    }
    s_count = count;
  }
  __syncthreads();
  const int count = s_count;
  for (int q = 0; q < count; ++q) {
    __threadfence();
    then(s_last[q]);
  }
}

// CTAs of the residual update an SM holds at once (at most 85 registers a thread):
// 768 threads with 48 loads in flight each keep the memory busy.
constexpr int kAccumulateCtas = 3;

// The residual update of a data block (one CTA, warp w the elements
// [w * kWarpChunk, (w + 1) * kWarpChunk) in rounds of 32), with the keys at or
// above the guess listed in index order and their top digit histogrammed.  A
// tensor with k == n has every element written out here, at its own index.
__global__ void __launch_bounds__(kThreads, kAccumulateCtas)
select_accumulate(SelectArgs a, const float *consts, int32_t *idx, float *val, bool take) {
  wait_for_previous_grid();
  if (gated(a.rep)) return;
  const int64_t blk = blockIdx.x;
  const int j = a.owner[blk];
  const DgcTensor t = a.t[j];
  const SelectState s = a.state[j];
  const int lane = lane_id(), warp = warp_id();
  const int64_t base = (blk - a.first[j]) * kChunk + int64_t{warp} * kWarpChunk;
  const DgcConsts dc = *reinterpret_cast<const DgcConsts *>(consts);
  float u[kWarpRounds], v[kWarpRounds], g[kWarpRounds];
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    const int64_t i = base + r * 32 + lane;
    u[r] = i < t.n ? t.u[i] : 0.0f;
    v[r] = i < t.n ? t.v[i] : 0.0f;
    g[r] = i < t.n ? t.g[i] : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    if (dc.nesterov != 0.0f)
      rules::dgc_accumulate<float, true>(g[r], u[r], v[r], dc.momentum);
    else
      rules::dgc_accumulate<float, false>(g[r], u[r], v[r], dc.momentum);
  }
  if (s.mode == kAll) {  // uniform over the CTA
#pragma unroll
    for (int r = 0; r < kWarpRounds; ++r) {
      const int64_t i = base + r * 32 + lane;
      if (i >= t.n) continue;
      idx[s.off + i] = static_cast<int32_t>(i);
      if (val != nullptr) val[s.off + i] = v[r];
      t.u[i] = take ? 0.0f : u[r];
      t.v[i] = take ? 0.0f : v[r];
    }
    start_next_grid();
    return;
  }
  HistAdder hist(hist_copy(a, j, blk));
  uint32_t mine = 0;
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    const int64_t i = base + r * 32 + lane;
    const bool in = i < t.n;
    if (in) {
      t.u[i] = u[r];
      t.v[i] = v[r];
    }
    const uint32_t key = magnitude_key(v[r]);
    const bool listed = in && key >= s.guess;
    mine += __popc(__ballot_sync(0xffffffffu, listed));
    hist.add(key >> kTopShift, listed);
  }
  hist.flush();
  __shared__ uint32_t warp_count[kWarps];
  if (lane == 0) warp_count[warp] = mine;
  __syncthreads();
  uint32_t before = 0, count = 0;
  for (int w = 0; w < kWarps; ++w) {
    before += w < warp ? warp_count[w] : 0u;
    count += warp_count[w];
  }
  if (threadIdx.x == 0) a.listed[blk] = count;
  if (count <= kListCap) {
    Entry *out = a.list + blk * kListCap;
    const unsigned below = (1u << lane) - 1;
#pragma unroll
    for (int r = 0; r < kWarpRounds; ++r) {
      const int64_t i = base + r * 32 + lane;
      const bool listed = i < t.n && magnitude_key(v[r]) >= s.guess;
      const unsigned ballot = __ballot_sync(0xffffffffu, listed);
      if (listed) out[before + __popc(ballot & below)] = Entry{static_cast<int32_t>(i), v[r]};
      before += __popc(ballot);
    }
  }
  start_next_grid();
  finish_pass(a, kPassAccumulate, warp == 0 ? j : -1,
              [&](int jj) { choose_digit(a, jj, 0); });
}

// The data block each warp of a later pass takes, its tensor and state.
struct WarpBlock {
  int64_t b;  // -1: none (past the last)
  int j;
  SelectState s;
  DgcTensor t;
  int64_t base;  // the data block's first element
  bool from_list;

  __device__ explicit WarpBlock(const SelectArgs &a) {
    b = static_cast<int64_t>(blockIdx.x) * kWarps + warp_id();
    if (b >= a.blocks) {
      b = -1;
      return;
    }
    j = a.owner[b];
    s = a.state[j];
    t = a.t[j];
    base = (b - a.first[j]) * kChunk;
    from_list = s.mode == kListed && a.listed[b] <= kListCap;
  }

  // f(i, x, in) for every element of the data block that can matter (its list,
  // else all of it) in ascending index order, 32 at a time; by the whole warp.
  template <class F>
  __device__ void each(const SelectArgs &a, F &&f) const {
    const int lane = lane_id();
    if (from_list) {
      const uint32_t count = a.listed[b];
      const Entry *list = a.list + b * kListCap;
      for (uint32_t e0 = 0; e0 < count; e0 += 32) {
        const uint32_t e = e0 + lane;
        const Entry x = e < count ? list[e] : Entry{0, 0.0f};
        f(static_cast<int64_t>(x.i), x.x, e < count);
      }
      return;
    }
    for (int r0 = 0; r0 < kBlockRounds; r0 += kBatch) {
      if (base + r0 * 32 >= t.n) return;
      float x[kBatch];
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        const int64_t i = base + (r0 + q) * 32 + lane;
        x[q] = i < t.n ? t.v[i] : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < kBatch; ++q) {
        const int64_t i = base + (r0 + q) * 32 + lane;
        f(i, x[q], i < t.n);
      }
    }
  }
};

// The histogram of digit `level` of the keys that match the prefix so far.  Level 0
// runs again only for the tensors whose guess failed (their prefix is empty: every key
// counts), and does nothing when none did.
__global__ void __launch_bounds__(kThreads) select_level(SelectArgs a, int level) {
  wait_for_previous_grid();
  if (gated(a.rep) || (level == 0 && *a.any_full == 0)) {  // uniform over the grid
    start_next_grid();
    return;
  }
  const WarpBlock w(a);
  int my_j = -1;
  if (w.b >= 0 && w.s.mode != kAll && (level > 0 || w.s.mode == kFull)) {
    const int shift = level_shift(level);
    const uint32_t bins = level_bins(level);
    HistAdder hist(hist_copy(a, w.j, w.b));
    w.each(a, [&](int64_t, float x, bool in) {
      const uint32_t key = magnitude_key(x);
      hist.add((key >> shift) & (bins - 1), in && (key & w.s.mask) == w.s.prefix);
    });
    hist.flush();
    my_j = w.j;
  }
  start_next_grid();
  finish_pass(a, kPassLevel0 + level, my_j, [&](int j) { choose_digit(a, j, level); });
}

// Per data block: the keys above T and equal to T; then each tensor's scans.
__global__ void __launch_bounds__(kThreads) select_count(SelectArgs a) {
  wait_for_previous_grid();
  if (gated(a.rep)) return;
  const WarpBlock w(a);
  int my_j = -1;
  if (w.b >= 0 && w.s.mode != kAll) {
    const uint32_t T = w.s.prefix;
    uint32_t above = 0, equal = 0;
    w.each(a, [&](int64_t, float x, bool in) {
      const uint32_t key = magnitude_key(x);
      above += __popc(__ballot_sync(0xffffffffu, in && key > T));
      equal += __popc(__ballot_sync(0xffffffffu, in && key == T));
    });
    if (lane_id() == 0) a.counts[w.b] = make_uint2(above, equal);
    my_j = w.j;
  }
  start_next_grid();
  finish_pass(a, kPassCount, my_j, [&](int j) { scan_counts(a, j); });
}

// The selected entries in ascending index order: entry i goes to position
// (keys above T before i) + min(keys equal to T before i, need) of its tensor's
// run; take: u and v set to 0 there.  A refused call writes every output as a
// refusal instead (indices -1, values NaN).
__global__ void __launch_bounds__(kThreads)
select_emit(SelectArgs a, int32_t *idx, float *val, bool take, long long outputs) {
  wait_for_previous_grid();
  if (gated(a.rep)) {
    const long long stride = static_cast<long long>(gridDim.x) * kThreads;
    for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < outputs;
         i += stride) {
      idx[i] = -1;
      if (val != nullptr) val[i] = __int_as_float(0x7fc00000);
    }
    return;
  }
  const WarpBlock w(a);
  if (w.b < 0 || w.s.mode == kAll) return;
  const SelectState &s = w.s;
  const uint2 here = a.counts[w.b], earlier = a.before[w.b];
  long long g_before = earlier.x, e_before = earlier.y;
  if (here.x == 0 && (here.y == 0 || e_before >= s.need)) return;  // none here
  const unsigned below = (1u << lane_id()) - 1;
  w.each(a, [&](int64_t i, float x, bool in) {
    const uint32_t key = magnitude_key(x);
    const bool gt = in && key > s.prefix, eq = in && key == s.prefix;
    const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    const long long g_i = g_before + __popc(bg & below), e_i = e_before + __popc(be & below);
    if (gt || (eq && e_i < s.need)) {
      const long long out = s.off + g_i + (e_i < s.need ? e_i : s.need);
      idx[out] = static_cast<int32_t>(i);
      if (val != nullptr) val[out] = x;
      if (take) {
        w.t.u[i] = 0.0f;
        w.t.v[i] = 0.0f;
      }
    }
    g_before += __popc(bg);
    e_before += __popc(be);
  });
}

// DGC's local step for the select (take: masking, values) and propose kernels
// (S: their common slots).
template <class S>
int select_run(const AotCall &c, int site, int32_t *idx, float *val, bool take) {
  const int K = c.K();
  MSOPT_TRY(c.require_dtype(S::ks, "int32"));
  MSOPT_TRY(check_dgc_residuals<S>(c));
  std::vector<DgcTensor> host(K);
  std::vector<int64_t> n(K);
  for (int j = 0; j < K; ++j) {
    n[j] = c.numel(S::u, j);
    MSOPT_CHECK(c, n[j] >= 1 && n[j] <= INT32_MAX, kErrSize,
                "%s has %lld elements, outside [1, 2^31)", c.name(S::u, j),
                static_cast<long long>(n[j]));
    host[j] = DgcTensor{c.ptr<float>(S::u, j), c.ptr<float>(S::v, j), c.ptr<float>(S::grad, j),
                        n[j]};
  }
  const std::vector<int64_t> first = block_map(n);
  const int64_t blocks = first[K];
  MSOPT_TRY(take_device_error(c));
  const cudaStream_t stream = stream_of(c);
  // the host's tables and the call's gate (0) are one upload: at_t .. at_bad
  Workspace ws(stream);
  const size_t at_t = ws.reserve(sizeof(DgcTensor) * K);
  const size_t at_first = ws.reserve(sizeof(int64_t) * (K + 1));
  const size_t at_bad = ws.reserve(sizeof(int));
  const size_t at_owner = ws.reserve(sizeof(int32_t) * blocks);
  const size_t at_state = ws.reserve(sizeof(SelectState) * K);
  const size_t at_hist = ws.reserve(sizeof(uint32_t) * kHistStride * K);
  const size_t at_tickets = ws.reserve(sizeof(int) * kPasses * K);
  const size_t at_listed = ws.reserve(sizeof(uint32_t) * blocks);
  const size_t at_counts = ws.reserve(sizeof(uint2) * 2 * blocks);
  const size_t at_list = ws.reserve(sizeof(Entry) * kListCap * blocks);
  const size_t at_full = ws.reserve(sizeof(int));
  MSOPT_TRY(ws.allocate(c));
  std::vector<char> tables(at_bad + sizeof(int), 0);
  std::memcpy(tables.data() + at_t, host.data(), sizeof(DgcTensor) * K);
  std::memcpy(tables.data() + at_first, first.data(), sizeof(int64_t) * (K + 1));
  MSOPT_TRY(ws.upload(c, 0, tables.data(), tables.size()));
  const SelectArgs a{ws.at<DgcTensor>(at_t),       ws.at<int64_t>(at_first),
                     K,                            blocks,
                     ws.at<int32_t>(at_owner),     ws.at<SelectState>(at_state),
                     ws.at<uint32_t>(at_hist),     ws.at<int>(at_tickets),
                     ws.at<uint32_t>(at_listed),   ws.at<Entry>(at_list),
                     ws.at<uint2>(at_counts),      ws.at<uint2>(at_counts) + blocks,
                     ws.at<int>(at_full),          reporter(ws.at<int>(at_bad), site)};
  // Each kernel starts while the one before it finishes (on Hopper and later).
  const int64_t warp_blocks = (blocks + kWarps - 1) / kWarps;
  const float *consts = c.ptr<float>(S::consts);
  cudaError_t e = launch(select_init, K, stream, false, a, c.ptr<int32_t>(S::ks),
                         static_cast<long long>(c.numel(S::idx)), consts);
  if (e == cudaSuccess) e = launch(select_accumulate, blocks, stream, true, a, consts, idx, val, take);
  for (int level = 0; level < radix::kRadixLevels && e == cudaSuccess; ++level)
    e = launch(select_level, warp_blocks, stream, true, a, level);
  if (e == cudaSuccess) e = launch(select_count, warp_blocks, stream, true, a);
  if (e == cudaSuccess)
    e = launch(select_emit, warp_blocks, stream, true, a, idx, val, take,
               static_cast<long long>(c.numel(S::idx)));
  MSOPT_TRY(check_cuda(c, e, "launch"));
  return check_launches(c);
}

int select_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_select_multi;
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  return select_run<S>(c, kSiteSelect, c.ptr<int32_t>(S::idx), c.ptr<float>(S::val), true);
}

int propose_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_propose_multi;
  MSOPT_TRY(c.require_dtype(S::idx, "int32"));
  return select_run<S>(c, kSitePropose, c.ptr<int32_t>(S::idx), nullptr, false);
}

}  // namespace
}  // namespace cuda
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_dgc_select_multi, msopt::cuda::select_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_propose_multi, msopt::cuda::propose_body)
