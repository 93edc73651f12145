// CUDA entries of Lamb (PaddlePaddle's rule, docs/algorithms.md §2), with the
// CPU library's names and declarations (core/contract.h):
//
//   ms_optim_lamb   multi-tensor Lamb, both passes: the moments and the
//                   direction r (rules::moments, rules::lamb_direction) with the
//                   squared norms of p and r, then p -= (lr * ratio) * r;
//   ms_optim_sumsq  the sum of squares of K tensors (global-norm clipping).
//
// One launch of each kernel covers every tensor of the call (a block map of
// kChunk elements per block).  Pass two recomputes r from p and the updated
// m and v, the same operations on the same values as pass one, so no scratch
// of n floats is kept.  Squared norms are summed in double, per block in a
// fixed tree and per tensor in block order: a call's result does not depend
// on scheduling.  Constants, rates and the beta powers are read on the device.
#include <cub/cub.cuh>

#include <cmath>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "core/rules.h"
#include "cuda/runtime.cuh"

namespace msopt {
namespace cuda {
namespace {

struct LambTensorPtrs {
  float *p;
  float *m;
  float *v;
  const float *g;
  int64_t n;
};

struct LambDev {
  const LambTensorPtrs *t;
  const int64_t *first;  // block map, K + 1
  int K;
  const float *lr;
  const float *wd;
  bool lr_each;
  bool wd_each;
  const float *gscale;
  const Powers *powers;
  const LambConsts *consts;
  double *part;  // per block: sum g^2 (clip), then sum p^2 and sum r^2
  float *gs;     // per tensor: the gradient's scale
  float *ratio;  // per tensor: the trust ratio (the output)
};

__device__ inline bool adapts(const LambDev &a, int j) {
  return a.wd[a.wd_each ? j : 0] > 0.0f || a.consts->always_adapt != 0.0f;
}

// The sum over the blocks [first[j], first[j + 1]) of part[stride * b + k], in
// a fixed order (each thread a strided share in block order, then a fixed tree).
template <int kCount>
__device__ inline void tensor_sums(const LambDev &a, int j, double (&out)[kCount]) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (int k = 0; k < kCount; ++k) {
    double s = 0.0;
    for (int64_t b = a.first[j] + threadIdx.x; b < a.first[j + 1]; b += kThreads)
      s += a.part[kCount * b + k];
    const double total = Reduce(tmp).Sum(s);
    __syncthreads();
    out[k] = total;  // valid in thread 0
  }
}

// With a per-tensor norm clip: each block's sum of g^2 (unscaled).
__global__ void __launch_bounds__(kThreads) lamb_grad_sumsq(LambDev a) {
  if (!(a.consts->clip_norm > 0.0f)) return;
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int j = tensor_of_block(a.first, a.K, blockIdx.x);
  const LambTensorPtrs t = a.t[j];
  const int64_t base = (blockIdx.x - a.first[j]) * kChunk;
  double s = 0.0;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    if (i < t.n) {
      const double g = t.g[i];
      s += g * g;
    }
  }
  const double total = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) a.part[blockIdx.x] = total;
}

// One block per tensor: the gradient's scale, gscale or its norm clip.
__global__ void __launch_bounds__(kThreads) lamb_grad_scale(LambDev a) {
  const int j = blockIdx.x;
  float gs = *a.gscale;
  if (a.consts->clip_norm > 0.0f) {
    double sum[1];
    tensor_sums<1>(a, j, sum);
    if (threadIdx.x == 0) gs = rules::norm_clip_scale(sum[0], gs, a.consts->clip_norm);
  }
  if (threadIdx.x == 0) a.gs[j] = gs;
}

struct LambElement {
  float b1, c1, b2, c2, eps, ib1, isb2, wd;
  __device__ explicit LambElement(const LambDev &a, int j) {
    const LambConsts k = *a.consts;
    b1 = k.beta1;
    c1 = 1.0f - k.beta1;
    b2 = k.beta2;
    c2 = 1.0f - k.beta2;
    eps = k.eps;
    rules::lamb_bias_corrections(a.powers->beta1_power, a.powers->beta2_power, ib1, isb2);
    wd = a.wd[a.wd_each ? j : 0];
  }
};

// What both passes begin with: the block's tensor and first element, and its
// elements' constants; load() issues the loads of p, m and v.
struct LambBlock {
  int j;
  LambTensorPtrs t;
  int64_t base;

  __device__ explicit LambBlock(const LambDev &a)
      : j(tensor_of_block(a.first, a.K, blockIdx.x)),
        t(a.t[j]),
        base((blockIdx.x - a.first[j]) * kChunk) {}

  __device__ void load(float (&p)[kRounds], float (&m)[kRounds], float (&v)[kRounds]) const {
    load_rounds(t.p, base, t.n, p);
    load_rounds(t.m, base, t.n, m);
    load_rounds(t.v, base, t.n, v);
  }
};

// Pass one: m and v updated, r at p; with a trust ratio each block's sums of
// p^2 and r^2, else p -= lr * r at once.
__global__ void __launch_bounds__(kThreads) lamb_pass1(LambDev a) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const LambBlock blk(a);
  const int j = blk.j;
  const LambTensorPtrs &t = blk.t;
  const int64_t base = blk.base;
  const LambElement e(a, j);
  const float gs = a.gs[j], lo = a.consts->clip_lo, hi = a.consts->clip_hi;
  const bool clipped = lo > -INFINITY || hi < INFINITY;
  const bool adapt = adapts(a, j);
  const float lr = a.lr[a.lr_each ? j : 0];
  double ps = 0.0, rs = 0.0;
  float gr[kRounds], mr[kRounds], vr[kRounds], pr[kRounds];
  load_rounds(t.g, base, t.n, gr);
  blk.load(pr, mr, vr);
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    if (i >= t.n) continue;
    const float g = clipped ? rules::clipped_grad(gr[r], gs, lo, hi) : gr[r] * gs;
    float m = mr[r], v = vr[r];
    rules::moments(g, m, v, e.b1, e.c1, e.b2, e.c2);
    t.m[i] = m;
    t.v[i] = v;
    const float p = pr[r];
    const float dir = rules::lamb_direction(p, m, v, e.ib1, e.isb2, e.eps, e.wd);
    if (adapt) {
      ps += static_cast<double>(p) * p;
      rs += static_cast<double>(dir) * dir;
    } else {
      t.p[i] = rules::lamb_apply(p, dir, lr);
    }
  }
  if (!adapt) return;  // uniform over the block
  const double p_total = Reduce(tmp).Sum(ps);
  __syncthreads();
  const double r_total = Reduce(tmp).Sum(rs);
  if (threadIdx.x == 0) {
    a.part[2 * blockIdx.x] = p_total;
    a.part[2 * blockIdx.x + 1] = r_total;
  }
}

// One block per tensor: the trust ratio (1 without weight decay or always_adapt).
__global__ void __launch_bounds__(kThreads) lamb_ratio(LambDev a) {
  const int j = blockIdx.x;
  if (!adapts(a, j)) {
    if (threadIdx.x == 0) a.ratio[j] = 1.0f;
    return;
  }
  double sums[2];
  tensor_sums<2>(a, j, sums);
  if (threadIdx.x == 0) a.ratio[j] = static_cast<float>(rules::lamb_trust_ratio(sums[0], sums[1]));
}

// Pass two: p -= (lr * ratio) * r, r recomputed from p and the updated m, v.
__global__ void __launch_bounds__(kThreads) lamb_pass2(LambDev a) {
  const LambBlock blk(a);
  const int j = blk.j;
  if (!adapts(a, j)) return;
  const LambElement e(a, j);
  const float lr_ratio = a.lr[a.lr_each ? j : 0] * a.ratio[j];
  float pr[kRounds], mr[kRounds], vr[kRounds];
  blk.load(pr, mr, vr);
  const LambTensorPtrs &t = blk.t;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = blk.base + r * kThreads + threadIdx.x;
    if (i >= t.n) continue;
    const float dir = rules::lamb_direction(pr[r], mr[r], vr[r], e.ib1, e.isb2, e.eps, e.wd);
    t.p[i] = rules::lamb_apply(pr[r], dir, lr_ratio);
  }
}

int lamb_body(const AotCall &c) {
  using S = sig::ms_optim_lamb;
  const int K = c.K();
  MSOPT_TRY(check_lamb<S>(c));
  std::vector<LambTensorPtrs> host(K);
  std::vector<int64_t> n(K);
  for (int j = 0; j < K; ++j) {
    n[j] = c.numel(S::param, j);
    host[j] = LambTensorPtrs{c.ptr<float>(S::param, j), c.ptr<float>(S::m, j),
                             c.ptr<float>(S::v, j), c.ptr<float>(S::grad, j), n[j]};
  }
  const std::vector<int64_t> first = block_map(n);
  const int64_t blocks = first[K];
  MSOPT_TRY(take_device_error(c));
  const cudaStream_t stream = stream_of(c);
  Workspace ws(stream);
  const size_t at_t = ws.reserve(sizeof(LambTensorPtrs) * K);
  const size_t at_first = ws.reserve(sizeof(int64_t) * (K + 1));
  const size_t at_part = ws.reserve(sizeof(double) * 2 * (blocks + 1));
  const size_t at_gs = ws.reserve(sizeof(float) * K);
  MSOPT_TRY(ws.allocate(c));
  MSOPT_TRY(ws.upload(c, at_t, host.data(), sizeof(LambTensorPtrs) * K));
  MSOPT_TRY(ws.upload(c, at_first, first.data(), sizeof(int64_t) * (K + 1)));
  const LambDev a{ws.at<LambTensorPtrs>(at_t),
                  ws.at<int64_t>(at_first),
                  K,
                  c.ptr<float>(S::lr),
                  c.ptr<float>(S::wd),
                  c.numel(S::lr) == K && K > 1,
                  c.numel(S::wd) == K && K > 1,
                  c.ptr<float>(S::gscale),
                  c.ptr<const Powers>(S::powers),
                  c.ptr<const LambConsts>(S::consts),
                  ws.at<double>(at_part),
                  ws.at<float>(at_gs),
                  c.ptr<float>(S::ratios)};
  if (blocks > 0) lamb_grad_sumsq<<<blocks, kThreads, 0, stream>>>(a);
  lamb_grad_scale<<<K, kThreads, 0, stream>>>(a);
  if (blocks > 0) lamb_pass1<<<blocks, kThreads, 0, stream>>>(a);
  lamb_ratio<<<K, kThreads, 0, stream>>>(a);
  if (blocks > 0) lamb_pass2<<<blocks, kThreads, 0, stream>>>(a);
  return check_launches(c);
}

// ------------------------------------------------------------------- sumsq --

__global__ void __launch_bounds__(kThreads)
sumsq_blocks(const LambTensorPtrs *t, const int64_t *first, int K, double *part) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int j = tensor_of_block(first, K, blockIdx.x);
  const int64_t base = (blockIdx.x - first[j]) * kChunk;
  double s = 0.0;
  for (int r = 0; r < kRounds; ++r) {
    const int64_t i = base + r * kThreads + threadIdx.x;
    if (i < t[j].n) {
      const double g = t[j].g[i];
      s += g * g;
    }
  }
  const double total = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) part[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) sumsq_total(const double *part, int64_t blocks,
                                                        float *out) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  double s = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += kThreads) s += part[b];
  const double total = Reduce(tmp).Sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(total);
}

int sumsq_body(const AotCall &c) {
  using S = sig::ms_optim_sumsq;
  MSOPT_TRY(check_sumsq<S>(c));
  const int K = c.K();
  std::vector<LambTensorPtrs> host(K);
  std::vector<int64_t> n(K);
  for (int j = 0; j < K; ++j) {
    n[j] = c.numel(S::grad, j);
    host[j] = LambTensorPtrs{nullptr, nullptr, nullptr, c.ptr<float>(S::grad, j), n[j]};
  }
  const std::vector<int64_t> first = block_map(n);
  const int64_t blocks = first[K];
  MSOPT_TRY(take_device_error(c));
  const cudaStream_t stream = stream_of(c);
  Workspace ws(stream);
  const size_t at_t = ws.reserve(sizeof(LambTensorPtrs) * K);
  const size_t at_first = ws.reserve(sizeof(int64_t) * (K + 1));
  const size_t at_part = ws.reserve(sizeof(double) * (blocks + 1));
  MSOPT_TRY(ws.allocate(c));
  MSOPT_TRY(ws.upload(c, at_t, host.data(), sizeof(LambTensorPtrs) * K));
  MSOPT_TRY(ws.upload(c, at_first, first.data(), sizeof(int64_t) * (K + 1)));
  if (blocks > 0)
    sumsq_blocks<<<blocks, kThreads, 0, stream>>>(ws.at<LambTensorPtrs>(at_t),
                                                  ws.at<int64_t>(at_first), K,
                                                  ws.at<double>(at_part));
  sumsq_total<<<1, kThreads, 0, stream>>>(ws.at<double>(at_part), blocks,
                                          c.ptr<float>(S::sumsq));
  return check_launches(c);
}

}  // namespace
}  // namespace cuda
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_lamb, msopt::cuda::lamb_body)
MSOPT_AOT_ENTRY(ms_optim_sumsq, msopt::cuda::sumsq_body)
