// The definitions of DGC's CUDA select (cuda/dgc_select.cu, where its passes
// are described): its constants, the tensors' records, the state the passes
// hand on, and the histogram and search helpers the passes share.
#pragma once

#include <cub/cub.cuh>

#include <climits>

#include "aot/call.h"
#include "core/radix.h"
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

}  // namespace
}  // namespace cuda
}  // namespace msopt
