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
// The selection is a radix select, not a sort: after ks is checked, one kernel
// updates the residuals and builds the histogram of the keys' top digit;
// two more histogram passes over v fix the k-th largest key T digit by digit
// (one block per tensor chooses each digit); a counting pass and a scan of
// the per-block counts give every block where its entries start, and the last
// pass writes them in ascending index order (ties to the lower index) and
// masks.  Each pass reads v once: about 36 bytes an element in all, against 20
// for the residual update alone.  Each thread issues all its loads of a pass
// before it uses them (kRounds in flight, not one).  Everything is
// stream-ordered, with no host synchronization; ks is read on the device.
//
// The exchanged runs (take, apply) are checked on the device: each index in
// range, each run strictly ascending (as the select writes it).  Repeated
// indices across blocks (workers) are resolved without atomics, by binary
// search in the earlier and later blocks' runs, so the sums are in rank order
// and every replica computes the same bits as the CPU kernels.
#include <cub/cub.cuh>
#include <cuda_fp16.h>

#include <algorithm>
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

using radix::kRadixLevels;
using radix::kRadixMaxBins;
using radix::magnitude_key;

// Each tensor's histogram is kept in kHistCopies copies, block b adding into
// copy b % kHistCopies: the blocks of a large tensor add into the same few bins
// (magnitudes cluster), and atomics on one address serialize in the L2.
constexpr int kHistCopies = 16;
constexpr size_t kHistStride = size_t{kHistCopies} * kRadixMaxBins;  // per tensor

// ----------------------------------------------------------------- select --

struct DgcTensor {
  float *u;
  float *v;
  const float *g;
  int64_t n;
};

// One tensor's selection: the key prefix fixed so far (its digits under mask),
// how many entries equal to the final key are still to take, k, and where the
// tensor's entries start in the outputs.
struct SelectState {
  uint32_t prefix;
  uint32_t mask;
  long long need;
  long long k;
  long long off;
};

struct SelectArgs {
  const DgcTensor *t;
  const int64_t *first;  // block map, K + 1
  int K;
  SelectState *state;    // K
  uint32_t *hist;        // K * kHistStride
  uint32_t *count_g;     // per block: keys above T
  uint32_t *count_e;     // per block: keys equal to T
  uint32_t *scan_g;      // exclusive scans of the above within each tensor
  uint32_t *scan_e;
  Report rep;
};

// Adds 1 to h[bin] for every lane with `valid` (lanes with equal bins merged
// first: the keys of one block crowd into few bins).  Called by whole warps.
__device__ inline void hist_add(uint32_t *h, uint32_t bin, bool valid) {
  const unsigned active = __ballot_sync(0xffffffffu, valid);
  if (!valid) return;
  const unsigned peers = __match_any_sync(active, bin);
  if (static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&h[bin], __popc(peers));
}

// Adds a block's histogram into tensor j's copy for this block.
__device__ inline void flush_hist(const uint32_t *h, uint32_t *hist, int j, uint32_t bins) {
  uint32_t *global = hist + j * kHistStride + (blockIdx.x % kHistCopies) * kRadixMaxBins;
  for (uint32_t b = threadIdx.x; b < bins; b += blockDim.x)
    if (h[b] != 0) atomicAdd(&global[b], h[b]);
}

// ks -> each tensor's k and offset, checked: k in [1, n], the ks summing to
// the outputs' length.
__global__ void select_init(SelectArgs a, const int32_t *ks, long long total) {
  long long sum = 0;
  for (int j = 0; j < a.K; ++j) {
    const long long k = ks[j], n = a.t[j].n;
    if (k < 1 || k > n) {
      report(a.rep, kDevKsRange, j, k, n);
      return;
    }
    a.state[j] = SelectState{0u, 0u, k, k, sum};
    sum += k;
  }
  if (sum != total) report(a.rep, kDevKsSum, sum, total);
}

// The residual update, fused with the histogram of the top digit of |v|.
__global__ void __launch_bounds__(kThreads)
select_accumulate(SelectArgs a, const float *consts, int shift, uint32_t bins) {
  if (gated(a.rep)) return;
  __shared__ uint32_t h[kRadixMaxBins];
  for (uint32_t b = threadIdx.x; b < bins; b += kThreads) h[b] = 0;
  __syncthreads();
  const int j = tensor_of_block(a.first, a.K, blockIdx.x);
  const DgcTensor t = a.t[j];
  const int64_t base = (blockIdx.x - a.first[j]) * kChunk;
  const DgcConsts k = *reinterpret_cast<const DgcConsts *>(consts);
  const bool nesterov = k.nesterov != 0.0f;
  float u[kRounds], v[kRounds], g[kRounds];
  load_rounds(t.u, base, t.n, u);
  load_rounds(t.v, base, t.n, v);
  load_rounds(t.g, base, t.n, g);
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    const bool in = i < t.n;
    uint32_t bin = 0;
    if (in) {
      if (nesterov)
        rules::dgc_accumulate<float, true>(g[r], u[r], v[r], k.momentum);
      else
        rules::dgc_accumulate<float, false>(g[r], u[r], v[r], k.momentum);
      t.u[i] = u[r];
      t.v[i] = v[r];
      bin = magnitude_key(v[r]) >> shift;
    }
    hist_add(h, bin, in);
  }
  __syncthreads();
  flush_hist(h, a.hist, j, bins);
}

// The histogram of the next digit of the keys that match the prefix so far,
// added straight into the block's copy: few keys match after the first digit,
// so a block's shared histogram would cost more to clear and flush than the
// adds themselves.
__global__ void __launch_bounds__(kThreads)
select_hist(SelectArgs a, int shift, uint32_t bins) {
  if (gated(a.rep)) return;
  const int j = tensor_of_block(a.first, a.K, blockIdx.x);
  const DgcTensor t = a.t[j];
  const SelectState s = a.state[j];
  const int64_t base = (blockIdx.x - a.first[j]) * kChunk;
  uint32_t *h = a.hist + j * kHistStride + (blockIdx.x % kHistCopies) * kRadixMaxBins;
  float x[kRounds];
  load_rounds(t.v, base, t.n, x);
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    const uint32_t key = magnitude_key(x[r]);
    hist_add(h, (key >> shift) & (bins - 1), i < t.n && (key & s.mask) == s.prefix);
  }
}

// One block per tensor: the digit whose bin holds the need-th largest key
// (counting from the top bin), then the histogram zeroed for the next level.
__global__ void __launch_bounds__(kTensorThreads)
select_choose(SelectArgs a, int shift, uint32_t bins) {
  if (gated(a.rep)) return;
  using Scan = cub::BlockScan<uint32_t, kTensorThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int j = blockIdx.x;
  uint32_t *h = a.hist + j * kHistStride;
  const long long need = a.state[j].need;
  // thread t holds the bins at positions 2t and 2t + 1 from the top, summed over the copies
  const uint32_t q0 = 2 * threadIdx.x, q1 = q0 + 1;
  uint32_t h0 = 0, h1 = 0;
  for (int copy = 0; copy < kHistCopies; ++copy) {
    const uint32_t *hc = h + copy * kRadixMaxBins;
    if (q0 < bins) h0 += hc[bins - 1 - q0];
    if (q1 < bins) h1 += hc[bins - 1 - q1];
  }
  uint32_t above = 0;
  Scan(tmp).ExclusiveSum(h0 + h1, above);
  const long long a0 = above, a1 = a0 + h0;
  long long bin = -1, taken = 0;
  if (a0 < need && need <= a1) {
    bin = bins - 1 - q0;
    taken = a0;
  } else if (a1 < need && need <= a1 + h1) {
    bin = bins - 1 - q1;
    taken = a1;
  }
  if (bin >= 0) {
    SelectState &s = a.state[j];
    s.prefix |= static_cast<uint32_t>(bin) << shift;
    s.mask |= (bins - 1) << shift;
    s.need = need - taken;
  }
  for (int copy = 0; copy < kHistCopies; ++copy) {
    uint32_t *hc = h + copy * kRadixMaxBins;
    if (q0 < bins) hc[bins - 1 - q0] = 0;
    if (q1 < bins) hc[bins - 1 - q1] = 0;
  }
}

// Per block: the keys above T and equal to T.
__global__ void __launch_bounds__(kThreads) select_count(SelectArgs a) {
  if (gated(a.rep)) return;
  using Reduce = cub::BlockReduce<uint32_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int j = tensor_of_block(a.first, a.K, blockIdx.x);
  const DgcTensor t = a.t[j];
  const uint32_t T = a.state[j].prefix;
  const int64_t base = (blockIdx.x - a.first[j]) * kChunk;
  float x[kRounds];
  load_rounds(t.v, base, t.n, x);
  uint32_t g = 0, e = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    const uint32_t key = magnitude_key(x[r]);
    g += i < t.n && key > T;
    e += i < t.n && key == T;
  }
  const uint32_t G = Reduce(tmp).Sum(g);
  __syncthreads();
  const uint32_t E = Reduce(tmp).Sum(e);
  if (threadIdx.x == 0) {
    a.count_g[blockIdx.x] = G;
    a.count_e[blockIdx.x] = E;
  }
}

// One block per tensor: exclusive scans of its blocks' counts.
__global__ void __launch_bounds__(kTensorThreads) select_scan(SelectArgs a) {
  if (gated(a.rep)) return;
  using Scan = cub::BlockScan<uint32_t, kTensorThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const int64_t lo = a.first[blockIdx.x], hi = a.first[blockIdx.x + 1];
  uint32_t carry_g = 0, carry_e = 0;
  for (int64_t b0 = lo; b0 < hi; b0 += kTensorThreads) {
    const int64_t b = b0 + threadIdx.x;
    uint32_t out = 0, sum = 0;
    Scan(tmp).ExclusiveSum(b < hi ? a.count_g[b] : 0u, out, sum);
    if (b < hi) a.scan_g[b] = carry_g + out;
    carry_g += sum;
    __syncthreads();
    Scan(tmp).ExclusiveSum(b < hi ? a.count_e[b] : 0u, out, sum);
    if (b < hi) a.scan_e[b] = carry_e + out;
    carry_e += sum;
    __syncthreads();
  }
}

// The selected entries in ascending index order: entry i goes to position
// (keys above T before i) + min(keys equal to T before i, need) of its tensor's
// run; take: u and v set to 0 there.  Warp w takes the block's elements
// [w * kWarpChunk, (w + 1) * kWarpChunk) in rounds of 32, counts them (ballots),
// and after the block's one barrier knows where its entries start.
constexpr int kWarpChunk = static_cast<int>(kChunk / kWarps);

__global__ void __launch_bounds__(kThreads)
select_emit(SelectArgs a, int32_t *idx, float *val, bool take) {
  if (gated(a.rep)) return;
  const int64_t b = blockIdx.x;
  const int j = tensor_of_block(a.first, a.K, b);
  const SelectState s = a.state[j];
  long long g_before = a.scan_g[b], e_before = a.scan_e[b];
  if (a.count_g[b] == 0 && (a.count_e[b] == 0 || e_before >= s.need)) return;  // none here
  const DgcTensor t = a.t[j];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned below = (1u << lane) - 1;
  const int64_t first = (b - a.first[j]) * kChunk + static_cast<int64_t>(warp) * kWarpChunk;
  constexpr int kWarpRounds = kWarpChunk / 32;
  float xs[kWarpRounds];
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    const int64_t i = first + r * 32 + lane;
    xs[r] = i < t.n ? t.v[i] : 0.0f;
  }
  uint32_t warp_total_g = 0, warp_total_e = 0;
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    const int64_t i = first + r * 32 + lane;
    const uint32_t key = magnitude_key(xs[r]);
    warp_total_g += __popc(__ballot_sync(0xffffffffu, i < t.n && key > s.prefix));
    warp_total_e += __popc(__ballot_sync(0xffffffffu, i < t.n && key == s.prefix));
  }
  __shared__ uint32_t warp_g[kWarps], warp_e[kWarps];
  if (lane == 0) {
    warp_g[warp] = warp_total_g;
    warp_e[warp] = warp_total_e;
  }
  __syncthreads();
  for (int w = 0; w < warp; ++w) {
    g_before += warp_g[w];
    e_before += warp_e[w];
  }
  if (warp_total_g == 0 && (warp_total_e == 0 || e_before >= s.need)) return;  // none here
#pragma unroll
  for (int r = 0; r < kWarpRounds; ++r) {
    const int64_t i = first + r * 32 + lane;
    const uint32_t key = magnitude_key(xs[r]);
    const bool gt = i < t.n && key > s.prefix, eq = i < t.n && key == s.prefix;
    const unsigned bg = __ballot_sync(0xffffffffu, gt), be = __ballot_sync(0xffffffffu, eq);
    const long long g_i = g_before + __popc(bg & below), e_i = e_before + __popc(be & below);
    if (gt || (eq && e_i < s.need)) {
      const long long out = s.off + g_i + (e_i < s.need ? e_i : s.need);
      idx[out] = static_cast<int32_t>(i);
      if (val != nullptr) val[out] = xs[r];
      if (take) {
        t.u[i] = 0.0f;
        t.v[i] = 0.0f;
      }
    }
    g_before += __popc(bg);
    e_before += __popc(be);
  }
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
  Workspace ws(stream);
  const size_t at_t = ws.reserve(sizeof(DgcTensor) * K);
  const size_t at_first = ws.reserve(sizeof(int64_t) * (K + 1));
  const size_t at_state = ws.reserve(sizeof(SelectState) * K);
  const size_t at_bad = ws.reserve(sizeof(int));  // zeroed with the histograms
  const size_t at_hist = ws.reserve(sizeof(uint32_t) * kHistStride * K);
  const size_t at_counts = ws.reserve(sizeof(uint32_t) * 4 * blocks);
  MSOPT_TRY(ws.allocate(c));
  MSOPT_TRY(ws.upload(c, at_t, host.data(), sizeof(DgcTensor) * K));
  MSOPT_TRY(ws.upload(c, at_first, first.data(), sizeof(int64_t) * (K + 1)));
  MSOPT_TRY(ws.zero(c, at_bad, at_counts - at_bad));
  SelectArgs a{ws.at<DgcTensor>(at_t),       ws.at<int64_t>(at_first),
               K,                            ws.at<SelectState>(at_state),
               ws.at<uint32_t>(at_hist),     ws.at<uint32_t>(at_counts),
               ws.at<uint32_t>(at_counts) + blocks, ws.at<uint32_t>(at_counts) + 2 * blocks,
               ws.at<uint32_t>(at_counts) + 3 * blocks,
               reporter(ws.at<int>(at_bad), site)};
  select_init<<<1, 1, 0, stream>>>(a, c.ptr<int32_t>(S::ks), c.numel(S::idx));
  for (int level = 0; level < kRadixLevels; ++level) {
    const int shift = radix::kRadixShift[level];
    const uint32_t bins = 1u << radix::kRadixWidth[level];
    if (level == 0)
      select_accumulate<<<blocks, kThreads, 0, stream>>>(a, c.ptr<float>(S::consts), shift, bins);
    else
      select_hist<<<blocks, kThreads, 0, stream>>>(a, shift, bins);
    select_choose<<<K, kTensorThreads, 0, stream>>>(a, shift, bins);
  }
  select_count<<<blocks, kThreads, 0, stream>>>(a);
  select_scan<<<K, kTensorThreads, 0, stream>>>(a);
  select_emit<<<blocks, kThreads, 0, stream>>>(a, idx, val, take);
  mark_refused(a.rep, idx, val, c.numel(S::idx), stream);
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
// and the indices by the first kernels; `extra_bytes` more workspace regions, their
// offsets appended to `extra`.
template <class S>
int blocks_setup(const AotCall &c, Workspace &ws, int tensors, int site, Blocks *out,
                 std::vector<size_t> *extra, const std::vector<size_t> &extra_bytes) {
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
  for (size_t bytes : extra_bytes) extra->push_back(ws.reserve(bytes));
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
  std::vector<size_t> at;
  MSOPT_TRY(blocks_setup<S>(c, ws, S::u, kSiteTake, &b, &at, {sizeof(ResidualPtrs) * K}));
  MSOPT_TRY(ws.upload(c, at[0], host.data(), sizeof(ResidualPtrs) * K));
  const cudaStream_t stream = stream_of(c);
  const ResidualPtrs *t = ws.at<ResidualPtrs>(at[0]);
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
  std::vector<size_t> at;
  MSOPT_TRY(blocks_setup<S>(c, ws, S::param, kSiteApply, &b, &at, {sizeof(void *) * K}));
  MSOPT_TRY(ws.upload(c, at[0], host.data(), sizeof(void *) * K));
  const cudaStream_t stream = stream_of(c);
  const bool lr_each = c.numel(S::lr) == K && K > 1;
  if (b.launch > 0 && half)
    apply_entries<__half><<<b.launch, kThreads, 0, stream>>>(
        b.args, ws.at<__half *>(at[0]), c.ptr<float>(S::val), c.ptr<float>(S::lr), lr_each);
  else if (b.launch > 0)
    apply_entries<float><<<b.launch, kThreads, 0, stream>>>(
        b.args, ws.at<float *>(at[0]), c.ptr<float>(S::val), c.ptr<float>(S::lr), lr_each);
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
