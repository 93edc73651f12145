// CUDA entries of DGC that read the exchanged buffers (docs/algorithms.md §3),
// with the CPU library's names and declarations (core/contract.h):
//
//   ms_optim_dgc_take_multi     v at shared indices, then masking there;
//   ms_optim_dgc_apply_multi    p -= lr * scatter_add(every block's values) / R.
//
// The exchanged runs are checked on the device: each index in range, each run
// strictly ascending (as the select writes it).  Repeated indices across
// blocks (workers) are resolved without atomics, by binary search in the
// earlier and later blocks' runs, so the sums are in rank order and every
// replica computes the same bits as the CPU kernels.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "cuda/runtime.cuh"

namespace msopt {
namespace cuda {
namespace {

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

MSOPT_AOT_ENTRY(ms_optim_dgc_take_multi, msopt::cuda::take_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_apply_multi, msopt::cuda::apply_body)
