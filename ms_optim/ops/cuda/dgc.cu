// CUDA entries of DGC (docs/algorithms.md §3), with the CPU library's names and
// declarations (aot/signatures.h):
//
//   ms_optim_dgc_select_multi   residual update of u and v (rules::dgc_accumulate),
//                               exact top-k of |v| per tensor (core/radix.h's rule),
//                               momentum factor masking, the entries written into
//                               the bucket's block of the fused exchange buffer;
//   ms_optim_dgc_propose_multi  the same without masking, indices only;
//   ms_optim_dgc_take_multi     v at shared indices, then masking there;
//   ms_optim_dgc_apply_multi    p -= lr * scatter_add(every block's values) / R.
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
//
// The exchanged runs (take, apply) are checked on the device: each index in
// range, each run strictly ascending (as the select writes it).  Repeated
// indices across blocks (workers) are resolved without atomics, by binary
// search in the earlier and later blocks' runs, so the sums are in rank order
// and every replica computes the same bits as the CPU kernels.
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
#include "cuda/runtime.cuh"

namespace msopt {
namespace cuda {
namespace {

using radix::kRadixMaxBins;
using radix::magnitude_key;

// ----------------------------------------------------------------- select --

// The select's data blocks are the streaming kernels' (kChunk elements of one
// tensor); its later passes give each data block one warp.
constexpr int kWarpChunk = static_cast<int>(kChunk / kWarps);  // a warp's share in a CTA
constexpr int kWarpRounds = kWarpChunk / 32;
constexpr int kBlockRounds = static_cast<int>(kChunk / 32);     // a data block, 32 at a time
constexpr int kBatch = 16;  // rounds whose loads a warp issues before it uses them

// Entries listed per data block: the keys at or above the tensor's guess, in
// index order, when there are at most kListCap of them; a data block with
// more is read from v again by the later passes.
constexpr uint32_t kListCap = 128;

// Each tensor's histogram is kept in kHistCopies copies, data block b adding
// into copy b % kHistCopies: atomics on one address serialize in the L2.
constexpr int kHistCopies = 4;
constexpr size_t kHistStride = size_t{kHistCopies} * kRadixMaxBins;  // per tensor

// The guess is drawn from a sample of the updated residuals: between
// kSampleMin and kSampleMax elements a tensor (all of a smaller one), one at a
// scattered place in each of as many equal strata.
constexpr int64_t kSampleMin = 256, kSampleMax = 2048, kSampleEvery = 64;
constexpr int kSamplesPerThread = static_cast<int>(kSampleMax / kThreads);

// The passes that end with a per-tensor step by their last CTA (tickets).
enum Pass : int { kPassAccumulate, kPassLevel0, kPassLevel1, kPassLevel2, kPassCount, kPasses };

struct DgcTensor {
  float *u;
  float *v;
  const float *g;
  int64_t n;
};

struct Entry {
  int32_t i;
  float x;
};

// How a tensor's keys are found after the residual update.
enum Mode : int {
  kListed,  // every key at or above `guess` listed by its data block (or read from v)
  kFull,    // fewer than k keys reached the guess: every data block read from v
  kAll,     // k == n: every element taken, in the residual update
};

// One tensor's selection: the key prefix fixed so far (its digits under mask),
// how many entries equal to the final key are still to take, k, where the
// tensor's entries start in the outputs, the guess and the mode.
struct SelectState {
  uint32_t prefix;
  uint32_t mask;
  long long need;
  long long k;
  long long off;
  uint32_t guess;
  int mode;
};

struct SelectArgs {
  const DgcTensor *t;
  const int64_t *first;  // block map, K + 1
  int K;
  int64_t blocks;
  int32_t *owner;        // per data block: its tensor
  SelectState *state;    // K
  uint32_t *hist;        // K * kHistStride
  int *tickets;          // kPasses * K
  uint32_t *listed;      // per data block: its keys at or above the guess
  Entry *list;           // per data block: kListCap entries
  uint2 *counts;         // per data block: keys above T (x) and equal to T (y)
  uint2 *before;         // the same summed over the tensor's earlier data blocks
  int *any_full;         // whether a tensor's guess failed
  Report rep;
};

// core/radix.h's digits, for device code (which cannot index its host arrays).
constexpr int kTopShift = radix::kRadixShift[0];
__device__ inline int level_shift(int level) {
  constexpr int s1 = radix::kRadixShift[1], s2 = radix::kRadixShift[2];
  return level == 0 ? kTopShift : level == 1 ? s1 : s2;
}
__device__ inline uint32_t level_bins(int level) {
  constexpr int w0 = radix::kRadixWidth[0], w1 = radix::kRadixWidth[1], w2 = radix::kRadixWidth[2];
  return 1u << (level == 0 ? w0 : level == 1 ? w1 : w2);
}

__device__ inline int lane_id() { return static_cast<int>(threadIdx.x & 31); }
__device__ inline int warp_id() { return static_cast<int>(threadIdx.x >> 5); }

// A warp's additions to one histogram: lanes with equal bins merged first, and
// whole rounds whose keys share one bin summed in a register (all-equal or
// mostly-zero tensors would otherwise add to one address at every round).
// Called by whole warps; flush() at the end.
struct HistAdder {
  uint32_t *h;
  uint32_t bin = 0;
  uint32_t pending = 0;

  __device__ explicit HistAdder(uint32_t *hist) : h(hist) {}

  __device__ void add(uint32_t b, bool valid) {
    const unsigned active = __ballot_sync(0xffffffffu, valid);
    if (active == 0) return;
    const uint32_t b0 = __shfl_sync(0xffffffffu, b, __ffs(active) - 1);
    if (__all_sync(0xffffffffu, !valid || b == b0)) {
      if (pending != 0 && bin != b0) flush();
      bin = b0;
      pending += __popc(active);
      return;
    }
    if (valid) {
      const unsigned peers = __match_any_sync(active, b);
      if (lane_id() == __ffs(peers) - 1) atomicAdd(&h[b], __popc(peers));
    }
  }

  __device__ void flush() {
    if (pending != 0 && lane_id() == 0) atomicAdd(&h[bin], pending);
    pending = 0;
  }
};

__device__ inline uint32_t *hist_copy(const SelectArgs &a, int j, int64_t b) {
  return a.hist + j * kHistStride + (b % kHistCopies) * kRadixMaxBins;
}

// The bin, counted from the top of kThreads * 8 bins held 8 a thread (thread t:
// positions 8t .. 8t + 7 from the top), where the need-th key lies, and how many
// keys lie above it.  Called by the whole CTA; bin -1 when fewer than `need`.
struct Found {
  int bin;
  long long above;
  long long total;
};

__device__ Found find_from_top(const uint32_t (&c)[8], uint32_t bins, long long need) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ Found found;
  uint32_t mine = 0;
#pragma unroll
  for (int q = 0; q < 8; ++q) mine += c[q];
  uint32_t above = 0, total = 0;
  Scan(tmp).ExclusiveSum(mine, above, total);
  if (threadIdx.x == 0) found = Found{-1, 0, total};
  __syncthreads();
  long long acc = above;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const uint32_t pos = 8 * threadIdx.x + q;
    if (pos < bins && acc < need && need <= acc + c[q]) {
      found.bin = static_cast<int>(bins - 1 - pos);
      found.above = acc;
    }
    acc += c[q];
  }
  __syncthreads();
  const Found out = found;
  __syncthreads();
  return out;
}

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

// ------------------------------------------------------- blocks of entries --

// R blocks of `total / R` entries; tensor j's k_j entries at offset_j of each
// (layout = R, offsets, counts; read on the device).
struct BlockArgs {
  const int64_t *n;        // K: each tensor's elements
  int K;
  const int32_t *layout;   // 1 + 2K
  long long total;
  long long *meta;         // R, block
  int32_t *owner;          // the tensor of each position of a block, or -1
  const int32_t *idx;      // total
  Report rep;
};

__device__ inline long long offset_of(const BlockArgs &a, int j) { return a.layout[1 + j]; }
__device__ inline long long count_of(const BlockArgs &a, int j) { return a.layout[1 + a.K + j]; }

__global__ void blocks_init(BlockArgs a) {
  const long long r = a.layout[0];
  if (r < 1 || a.total % r != 0) {
    report(a.rep, kDevBlocks, r, a.total);
    return;
  }
  const long long block = a.total / r;
  for (int j = 0; j < a.K; ++j) {
    const long long off = offset_of(a, j), k = count_of(a, j);
    if (off < 0 || k < 0 || off + k > block) {
      report(a.rep, kDevFit, j, off, k, block);
      return;
    }
  }
  a.meta[0] = r;
  a.meta[1] = block;
}

__global__ void __launch_bounds__(kThreads) blocks_owner(BlockArgs a) {
  if (gated(a.rep)) return;
  const long long pos = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (pos >= a.meta[1]) return;
  int owner = -1;
  for (int j = 0; j < a.K; ++j) {
    const long long off = offset_of(a, j);
    if (pos >= off && pos < off + count_of(a, j)) {
      if (owner >= 0) {
        report(a.rep, kDevOverlap, pos, owner, j);
        return;
      }
      owner = j;
    }
  }
  a.owner[pos] = owner;
}

// Every claimed entry's index in [0, n_j), each run strictly ascending.
__global__ void __launch_bounds__(kThreads) blocks_check(BlockArgs a) {
  if (gated(a.rep)) return;
  const long long e = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= a.total) return;
  const long long block = a.meta[1], w = e / block, pos = e % block;
  const int j = a.owner[pos];
  if (j < 0) return;
  const long long i = a.idx[e], n = a.n[j];
  if (i < 0 || i >= n) {
    report(a.rep, kDevIndexRange, j, i, w, n);
    return;
  }
  if (pos > offset_of(a, j) && a.idx[e - 1] >= i)
    report(a.rep, kDevIndexOrder, j, w, pos - offset_of(a, j), i);
}

// The entry of index i in tensor j's run of block w, or -1.
__device__ inline long long find_in_block(const BlockArgs &a, int j, long long w, int32_t i) {
  const int32_t *run = a.idx + w * a.meta[1] + offset_of(a, j);
  long long lo = 0, hi = count_of(a, j);
  const long long k = hi;
  while (lo < hi) {
    const long long mid = (lo + hi) / 2;
    if (run[mid] < i) lo = mid + 1; else hi = mid;
  }
  return lo < k && run[lo] == i ? w * a.meta[1] + offset_of(a, j) + lo : -1;
}

// Whether entry e (index i, block w of tensor j) is its index's first.
__device__ inline bool first_entry(const BlockArgs &a, int j, long long w, int32_t i) {
  for (long long w2 = 0; w2 < w; ++w2)
    if (find_in_block(a, j, w2, i) >= 0) return false;
  return true;
}

// Host side: the checked layout of an exchanged buffer and its launch shape.
struct Blocks {
  BlockArgs args;
  int64_t launch;  // blocks of kThreads over the entries
};

// The workspace and checks shared by take and apply (S: their slots; `tensors`: the
// slot whose tensors the entries index, n_j): layout's size checked here, its values
// and the indices by the first kernels; `extra_bytes` more workspace for the caller's
// table, at offset *extra.
template <class S>
int blocks_setup(const AotCall &c, Workspace &ws, int tensors, int site, Blocks *out,
                 size_t extra_bytes, size_t *extra) {
  const int K = c.K();
  MSOPT_TRY(check_dgc_layout(c, S::layout));
  const long long total = c.numel(S::idx);
  MSOPT_TRY(take_device_error(c));
  std::vector<int64_t> n(K);
  for (int j = 0; j < K; ++j) n[j] = c.numel(tensors, j);
  const size_t at_n = ws.reserve(sizeof(int64_t) * K);
  const size_t at_bad = ws.reserve(sizeof(int));
  const size_t at_meta = ws.reserve(sizeof(long long) * 2);
  const size_t at_owner = ws.reserve(sizeof(int32_t) * (total + 1));
  *extra = ws.reserve(extra_bytes);
  MSOPT_TRY(ws.allocate(c));
  MSOPT_TRY(ws.upload(c, at_n, n.data(), sizeof(int64_t) * K));
  MSOPT_TRY(ws.zero(c, at_bad, sizeof(int)));
  out->args = BlockArgs{ws.at<int64_t>(at_n),     K,
                        c.ptr<int32_t>(S::layout), total,
                        ws.at<long long>(at_meta), ws.at<int32_t>(at_owner),
                        c.ptr<int32_t>(S::idx),   reporter(ws.at<int>(at_bad), site)};
  out->launch = (total + kThreads - 1) / kThreads;  // 0 without entries: nothing to launch
  const cudaStream_t stream = stream_of(c);
  blocks_init<<<1, 1, 0, stream>>>(out->args);
  if (out->launch > 0) {
    blocks_owner<<<out->launch, kThreads, 0, stream>>>(out->args);
    blocks_check<<<out->launch, kThreads, 0, stream>>>(out->args);
  }
  return kOk;
}

// --------------------------------------------------------------------- take --

struct ResidualPtrs {
  float *u;
  float *v;
};

__global__ void __launch_bounds__(kThreads)
take_values(BlockArgs a, const ResidualPtrs *t, float *val) {
  if (gated(a.rep)) return;
  const long long e = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= a.total) return;
  const long long block = a.meta[1], w = e / block;
  const int j = a.owner[e % block];
  if (j < 0) {
    val[e] = 0.0f;  // an entry no tensor of this call claims
    return;
  }
  const int32_t i = a.idx[e];
  val[e] = first_entry(a, j, w, i) ? t[j].v[i] : 0.0f;
}

__global__ void __launch_bounds__(kThreads) take_mask(BlockArgs a, const ResidualPtrs *t) {
  if (gated(a.rep)) return;
  const long long e = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= a.total) return;
  const int j = a.owner[e % a.meta[1]];
  if (j < 0) return;
  const int32_t i = a.idx[e];
  t[j].u[i] = 0.0f;
  t[j].v[i] = 0.0f;
}

int take_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_take_multi;
  MSOPT_TRY(check_dgc_take<S>(c));
  const int K = c.K();
  std::vector<ResidualPtrs> host(K);
  for (int j = 0; j < K; ++j) host[j] = ResidualPtrs{c.ptr<float>(S::u, j), c.ptr<float>(S::v, j)};
  Workspace ws(stream_of(c));
  Blocks b;
  size_t at = 0;
  MSOPT_TRY(blocks_setup<S>(c, ws, S::u, kSiteTake, &b, sizeof(ResidualPtrs) * K, &at));
  MSOPT_TRY(ws.upload(c, at, host.data(), sizeof(ResidualPtrs) * K));
  const cudaStream_t stream = stream_of(c);
  const ResidualPtrs *t = ws.at<ResidualPtrs>(at);
  if (b.launch > 0) {
    take_values<<<b.launch, kThreads, 0, stream>>>(b.args, t, c.ptr<float>(S::val));
    take_mask<<<b.launch, kThreads, 0, stream>>>(b.args, t);
  }
  mark_refused(b.args.rep, nullptr, c.ptr<float>(S::val), c.numel(S::val), stream);
  return check_launches(c);
}

// -------------------------------------------------------------------- apply --

// p[i] -= lr * (s / R) at each index's first entry, s the sum of its values
// over the blocks in rank order (one block: the value itself).
template <class P>
__global__ void __launch_bounds__(kThreads)
apply_entries(BlockArgs a, P *const *params, const float *val, const float *lr, bool lr_each) {
  if (gated(a.rep)) return;
  const long long e = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= a.total) return;
  const long long r = a.meta[0], block = a.meta[1], w = e / block;
  const int j = a.owner[e % block];
  if (j < 0) return;
  const int32_t i = a.idx[e];
  if (!first_entry(a, j, w, i)) return;
  const float ranks = static_cast<float>(r);
  float s;
  if (r == 1) {
    s = val[e];
  } else {
    s = 0.0f;
    s += val[e];
    for (long long w2 = w + 1; w2 < r; ++w2) {
      const long long at = find_in_block(a, j, w2, i);
      if (at >= 0) s += val[at];
    }
  }
  const float d = lr[lr_each ? j : 0] * (s / ranks);
  P *p = params[j];
  if constexpr (sizeof(P) == 2) {
    float x = __half2float(p[i]);
    x -= d;
    p[i] = __float2half_rn(x);
  } else {
    p[i] -= d;
  }
}

int apply_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_apply_multi;
  const int K = c.K();
  bool half = false;
  MSOPT_TRY(check_dgc_apply<S>(c, &half));
  std::vector<void *> host(K);
  for (int j = 0; j < K; ++j) host[j] = c.ptr<void>(S::param, j);
  Workspace ws(stream_of(c));
  Blocks b;
  size_t at = 0;
  MSOPT_TRY(blocks_setup<S>(c, ws, S::param, kSiteApply, &b, sizeof(void *) * K, &at));
  MSOPT_TRY(ws.upload(c, at, host.data(), sizeof(void *) * K));
  const cudaStream_t stream = stream_of(c);
  const bool lr_each = c.numel(S::lr) == K && K > 1;
  if (b.launch > 0 && half)
    apply_entries<__half><<<b.launch, kThreads, 0, stream>>>(
        b.args, ws.at<__half *>(at), c.ptr<float>(S::val), c.ptr<float>(S::lr), lr_each);
  else if (b.launch > 0)
    apply_entries<float><<<b.launch, kThreads, 0, stream>>>(
        b.args, ws.at<float *>(at), c.ptr<float>(S::val), c.ptr<float>(S::lr), lr_each);
  mark_done(b.args.rep, c.ptr<float>(S::done), stream);
  return check_launches(c);
}

}  // namespace
}  // namespace cuda
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_dgc_select_multi, msopt::cuda::select_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_propose_multi, msopt::cuda::propose_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_take_multi, msopt::cuda::take_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_apply_multi, msopt::cuda::apply_body)
