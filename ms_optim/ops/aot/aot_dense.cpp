// MindSpore AOT adapters for DGC's dense step (docs/algorithms.md §3): the
// momentum of the parameters it does not compress, their gradients given one
// tensor each or in one buffer, the pack that builds one buffer of tensors for
// a collective and the unpack that writes it back, and the flush of the
// residuals where sparsity="auto" goes dense.  The tensors each takes are declared in core/contract.h.
#include <algorithm>
#include <cstring>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "core/multi_tensor.h"
#include "kernels/table.h"

namespace msopt {
namespace {

// What both dense momenta check and do (S: their slots): param float32 or
// float16 (updated in float32 and rounded once), u float32 of the same sizes,
// lr float32[1] or [K], consts float32[2] = (momentum, use_nesterov), done
// float32[1]; then rules::dgc_dense_momentum and p -= lr * step, u and p in
// place, parameter j's gradient at grad(j) (float32, its parameter's size).
template <class S, class Grad>
int dense_momentum(const AotCall &c, const Grad &grad) {
  const int K = c.K();
  const float *lr = c.ptr<float>(S::lr);
  const DgcConsts &k = *c.ptr<const DgcConsts>(S::consts);
  std::vector<DgcDenseTensor> ts(static_cast<size_t>(K));
  int64_t total = 0;
  for (int j = 0; j < K; ++j) {
    const int64_t n = c.numel(S::param, j);
    ts[j] = {c.ptr<void>(S::param, j), c.is(S::param, "float16", j), c.ptr<float>(S::u, j),
             grad(j), n, lr[c.numel(S::lr) == 1 ? 0 : j]};
    total += n;
  }
  const ParallelSection section(total);
  kernels().dgc_momentum(ts.data(), K, k.momentum, k.nesterov != 0.0f);
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

template <class S>
int check_dense_momentum(const AotCall &c) {
  MSOPT_TRY(check_dgc_params<S>(c));
  MSOPT_TRY(c.require_f32(S::consts, DgcConsts::kCount));
  MSOPT_TRY(c.require_dtype(S::u, "float32"));
  return c.require_same_numel(S::param, {S::u});
}

// Where each parameter's elements start in a buffer holding them one after
// another; returns their total.
int64_t param_starts(const AotCall &c, int param, std::vector<int64_t> *start) {
  start->resize(static_cast<size_t>(c.K()));
  int64_t total = 0;
  for (int j = 0; j < c.K(); ++j) {
    (*start)[j] = total;
    total += c.numel(param, j);
  }
  return total;
}

// The dense momentum, tensor j's gradient src[gidx[j]] (the step's whole
// gradient tuple, float32).  MindSpore's graph compiler builds a sub-tuple
// element by element (about 10 ms a parameter); passing the whole tuple and
// gidx costs nothing.
int momentum_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_momentum;
  MSOPT_TRY(check_dense_momentum<S>(c));
  MSOPT_TRY(check_sources(c, S::src, S::gidx, S::param));
  const int32_t *gidx = c.ptr<int32_t>(S::gidx);
  return dense_momentum<S>(c, [&](int j) { return c.ptr<float>(S::src, gidx[j]); });
}

// The dense momentum, the gradients one after another in flat (float32[the
// parameters' total]): the dense exchange's packed buffer, used as it is.
int momentum_flat_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_momentum_flat;
  MSOPT_TRY(check_dense_momentum<S>(c));
  MSOPT_TRY(c.require_dtype(S::flat, "float32"));
  std::vector<int64_t> start;
  const int64_t total = param_starts(c, S::param, &start);
  MSOPT_CHECK(c, c.numel(S::flat) == total, kErrSize,
              "flat has %lld elements, the parameters %lld",
              static_cast<long long>(c.numel(S::flat)), static_cast<long long>(total));
  const float *flat = c.ptr<float>(S::flat);
  return dense_momentum<S>(c, [&](int j) { return flat + start[j]; });
}

// What pack and unpack share (S: their slots, T: the slot of the tensors): the
// tensors T[gidx[j]], j = 0..K-1, each of flat's dtype (and each named once
// when `once`: they are written), and each one's bytes and first byte in flat,
// whose size they fill.
template <class S>
int packed_layout(const AotCall &c, int T, bool once, std::vector<char *> *at,
                  std::vector<size_t> *bytes, std::vector<size_t> *start) {
  MSOPT_TRY(c.require_dtype(S::gidx, "int32"));
  const char *dtype = c.dtype(S::flat);
  const auto width = static_cast<size_t>(element_bytes(dtype));
  MSOPT_CHECK(c, width != 0, kErrDtype, "flat's dtype %s is not one a tensor has", dtype);
  const int K = static_cast<int>(c.numel(S::gidx)), count = c.count(T);
  const int32_t *gidx = c.ptr<int32_t>(S::gidx);
  at->resize(static_cast<size_t>(K));
  bytes->resize(static_cast<size_t>(K));
  start->resize(static_cast<size_t>(K));
  std::vector<int> first(static_cast<size_t>(count), -1);
  size_t total = 0;
  for (int j = 0; j < K; ++j) {
    MSOPT_CHECK(c, gidx[j] >= 0 && gidx[j] < count, kErrValue, "gidx[%d] = %d is outside [0, %d)",
                j, gidx[j], count);
    MSOPT_CHECK(c, !once || first[gidx[j]] < 0, kErrValue,
                "gidx[%d] = %d names the tensor gidx[%d] names", j, gidx[j], first[gidx[j]]);
    first[gidx[j]] = j;
    MSOPT_CHECK(c, c.is(T, dtype, gidx[j]), kErrDtype, "%s must be %s (flat's dtype), got %s",
                c.name(T, gidx[j]), dtype, c.dtype(T, gidx[j]));
    (*at)[j] = c.ptr<char>(T, gidx[j]);
    (*bytes)[j] = static_cast<size_t>(c.numel(T, gidx[j])) * width;
    (*start)[j] = total;
    total += (*bytes)[j];
  }
  MSOPT_CHECK(c, static_cast<size_t>(c.numel(S::flat)) * width == total, kErrSize,
              "flat has %lld elements, the tensors %lld", static_cast<long long>(c.numel(S::flat)),
              static_cast<long long>(total / width));
  return kOk;
}

// Copies between flat and the K tensors, both threads from kParallelMin float32s
// in all; to_flat: from the tensors into flat, else back.
void copy_packed(char *flat, const std::vector<char *> &at, const std::vector<size_t> &bytes,
                 const std::vector<size_t> &start, bool to_flat) {
  size_t total = 0;
  for (const size_t b : bytes) total += b;
  const ParallelSection section(static_cast<int64_t>(total / sizeof(float)));
  WalkPlan plan;  // in bytes
  plan.parallel_min = kParallelMin * static_cast<int64_t>(sizeof(float));
  walk_tensors(static_cast<int64_t>(at.size()),
               [&](int64_t j) { return static_cast<int64_t>(bytes[j]); }, plan,
               [&](int64_t j, int64_t lo, int64_t hi) {
                 char *packed = flat + start[j] + lo, *own = at[j] + lo;
                 const size_t n = static_cast<size_t>(hi - lo);
                 if (to_flat)
                   std::memcpy(packed, own, n);
                 else
                   std::memcpy(own, packed, n);
               });
}

// src[gidx[j]], j = 0..K-1, copied one after another into flat (their dtype,
// their total).
int pack_body(const AotCall &c) {
  using S = sig::ms_optim_pack;
  std::vector<char *> at;
  std::vector<size_t> bytes, start;
  MSOPT_TRY(packed_layout<S>(c, S::src, false, &at, &bytes, &start));
  copy_packed(c.ptr<char>(S::flat), at, bytes, start, true);
  return kOk;
}

// dst[gidx[j]], j = 0..K-1, in place, from flat as pack fills it; done float32[1].
int unpack_body(const AotCall &c) {
  using S = sig::ms_optim_unpack;
  MSOPT_TRY(c.require_f32(S::done, 1));
  std::vector<char *> at;
  std::vector<size_t> bytes, start;
  MSOPT_TRY(packed_layout<S>(c, S::dst, true, &at, &bytes, &start));
  copy_packed(c.ptr<char>(S::flat), at, bytes, start, false);
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

// DGC's flush where sparsity="auto" goes dense: param each float32 or float16
// (p - lr * m in float32, rounded once, as the graph's casts and the bucket's
// apply), u and v float32 of the same sizes, mean float32[2 x their total] (v's
// means, then u's), lr float32[1] or [K], done float32[1]; then u = u's mean
// and v = 0, all in place, both threads from kParallelMin elements in all.
int flush_flat_body(const AotCall &c) {
  using S = sig::ms_optim_dgc_flush_flat;
  const int K = c.K();
  MSOPT_TRY(check_dgc_params<S>(c));
  MSOPT_TRY(c.require_dtype(S::u, "float32"));
  MSOPT_TRY(c.require_dtype(S::v, "float32"));
  MSOPT_TRY(c.require_same_numel(S::param, {S::u, S::v}));
  MSOPT_TRY(c.require_dtype(S::mean, "float32"));
  std::vector<int64_t> start;
  const int64_t total = param_starts(c, S::param, &start);
  MSOPT_CHECK(c, c.numel(S::mean) == 2 * total, kErrSize,
              "mean has %lld elements, twice the parameters' %lld",
              static_cast<long long>(c.numel(S::mean)), static_cast<long long>(total));
  const float *mean = c.ptr<float>(S::mean), *lr = c.ptr<float>(S::lr);
  const bool lr_each = c.numel(S::lr) != 1;
  const KernelTable &table = kernels();
  const ParallelSection section(total);
  walk_tensors(K, [&](int64_t j) { return c.numel(S::param, static_cast<int>(j)); }, WalkPlan{},
               [&](int64_t jj, int64_t lo, int64_t hi) {
                 const int j = static_cast<int>(jj);
                 const float lr_j = lr[lr_each ? j : 0];
                 const float *mv = mean + start[j], *mu = mean + total + start[j];
                 float *u = c.ptr<float>(S::u, j), *v = c.ptr<float>(S::v, j);
                 std::memcpy(u + lo, mu + lo, static_cast<size_t>(hi - lo) * sizeof(float));
                 std::memset(v + lo, 0, static_cast<size_t>(hi - lo) * sizeof(float));
                 if (!c.is(S::param, "float16", j)) {
                   float *p = c.ptr<float>(S::param, j);
                   for (int64_t i = lo; i < hi; ++i) p[i] = p[i] - lr_j * mv[i];
                   return;
                 }
                 half_bits *p = c.ptr<half_bits>(S::param, j);
                 constexpr int64_t kBlock = 1024;
                 float x[kBlock];
                 for (int64_t b = lo; b < hi; b += kBlock) {
                   const int64_t len = std::min(kBlock, hi - b);
                   table.f16_to_f32(p + b, x, len);
                   for (int64_t i = 0; i < len; ++i) x[i] = x[i] - lr_j * mv[b + i];
                   table.f32_to_f16(x, p + b, len);
                 }
               });
  *c.ptr<float>(S::done) = 0.0f;
  return kOk;
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_dgc_momentum, msopt::momentum_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_momentum_flat, msopt::momentum_flat_body)
MSOPT_AOT_ENTRY(ms_optim_pack, msopt::pack_body)
MSOPT_AOT_ENTRY(ms_optim_unpack, msopt::unpack_body)
MSOPT_AOT_ENTRY(ms_optim_dgc_flush_flat, msopt::flush_flat_body)
