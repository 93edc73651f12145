// The host-side checks of a kernel's tensors (element types, counts, sizes),
// one per kernel, shared by the CPU adapters (aot/aot_*.cpp) and the CUDA
// entries (cuda/*.cu): both libraries refuse the same tensors with the same
// messages, before either touches a value.
#pragma once

#include "aot/call.h"
#include "core/contract.h"

namespace msopt {

// idx int32 and val float32 of one length (the entries a DGC kernel writes).
inline int check_entries(const AotCall &c, int idx, int val) {
  MSOPT_TRY(c.require_dtype(idx, "int32"));
  MSOPT_TRY(c.require_dtype(val, "float32"));
  MSOPT_CHECK(c, c.numel(idx) == c.numel(val), kErrSize,
              "idx and val must have the same length, got %lld and %lld",
              static_cast<long long>(c.numel(idx)), static_cast<long long>(c.numel(val)));
  return kOk;
}

// A DGC exchange layout (take, apply): int32[1 + 2K] (R, offsets, counts).
inline int check_dgc_layout(const AotCall &c, int layout) {
  MSOPT_TRY(c.require_dtype(layout, "int32"));
  MSOPT_CHECK(c, c.numel(layout) == 1 + 2 * c.K(), kErrSize,
              "layout must have 1 + 2K = %d elements, got %lld", 1 + 2 * c.K(),
              static_cast<long long>(c.numel(layout)));
  return kOk;
}

// A host-moment step (Adam and the like): grad0 float32 or float16 (*half), and each
// tensor of `out` (the parameters, or the delta outputs) and `grad` that type.
inline int check_host_step_data(const AotCall &c, int out, int grad, bool delta, bool *half) {
  *half = c.is(grad, "float16");
  MSOPT_CHECK(c, *half || c.is(grad, "float32"), kErrDtype,
              "grad0 must be float32 or float16, got %s", c.dtype(grad));
  const char *pdt = c.dtype(grad);
  for (int i = 0; i < c.K(); ++i)
    MSOPT_CHECK(c, c.is(out, pdt, i) && c.is(grad, pdt, i), kErrDtype,
                "%s%d and grad%d must all be %s (as grad0), got %s and %s",
                delta ? "delta" : "param", i, i, pdt, c.dtype(out, i), c.dtype(grad, i));
  return kOk;
}

// The int8 moments' key, int32[2]: the step and the position of the call's first
// parameter among the optimizer's (rules::q8_tensor_key).
inline int read_q8_key(const AotCall &c, int key, uint32_t *step, uint32_t *first) {
  MSOPT_TRY(c.require_dtype(key, "int32"));
  MSOPT_CHECK(c, c.numel(key) == 2, kErrSize,
              "key must have 2 elements (step, first parameter), got %lld",
              static_cast<long long>(c.numel(key)));
  *step = static_cast<uint32_t>(c.ptr<int32_t>(key)[0]);
  *first = static_cast<uint32_t>(c.ptr<int32_t>(key)[1]);
  return kOk;
}

// DGC's residual update (select, propose; S: its slots): u, v, grad float32,
// tensor j of each the same size, consts float32[DgcConsts::kCount].
template <class S>
int check_dgc_residuals(const AotCall &c) {
  for (int s : {S::u, S::v, S::grad}) MSOPT_TRY(c.require_dtype(s, "float32"));
  MSOPT_TRY(c.require_same_numel(S::u, {S::v, S::grad}));
  return c.require_f32(S::consts, DgcConsts::kCount);
}

// ms_optim_dgc_take_multi: u, v float32 of one size each, idx int32, val float32 as long.
template <class S>
int check_dgc_take(const AotCall &c) {
  MSOPT_TRY(c.require_dtype(S::u, "float32"));
  MSOPT_TRY(c.require_dtype(S::v, "float32"));
  MSOPT_TRY(c.require_same_numel(S::u, {S::v}));
  return check_entries(c, S::idx, S::val);
}

// ms_optim_dgc_apply_multi: param all float32 or all float16 (*half), idx int32, val
// float32 as long, lr float32[1] or [K], done float32[1].
template <class S>
int check_dgc_apply(const AotCall &c, bool *half) {
  *half = c.is(S::param, "float16");
  MSOPT_TRY(c.require_dtype(S::param, *half ? "float16" : "float32"));
  MSOPT_TRY(check_entries(c, S::idx, S::val));
  MSOPT_TRY(c.require_f32(S::lr, 1, c.K()));
  return c.require_f32(S::done, 1);
}

// gidx int32[K] naming tensor j's gradient src[gidx[j]] in the kRest group `src`
// (the step's whole gradient tuple), float32 of as many elements as tensor j of
// slot `like` (DGC's dense momentum, the bucket's select and propose).
inline int check_sources(const AotCall &c, int src, int gidx, int like) {
  MSOPT_TRY(c.require_dtype(gidx, "int32"));
  const int32_t *at = c.ptr<int32_t>(gidx);
  const int count = c.count(src);
  for (int j = 0; j < c.K(); ++j) {
    MSOPT_CHECK(c, at[j] >= 0 && at[j] < count, kErrValue, "gidx[%d] = %d is outside [0, %d)",
                j, at[j], count);
    MSOPT_CHECK(c, c.is(src, "float32", at[j]), kErrDtype,
                "src%d (the gradient of %s) must be float32, got %s", at[j], c.name(like, j),
                c.dtype(src, at[j]));
    MSOPT_CHECK(c, c.numel(src, at[j]) == c.numel(like, j), kErrSize,
                "src%d (the gradient of %s) has %lld elements, %s %lld", at[j], c.name(like, j),
                static_cast<long long>(c.numel(src, at[j])), c.name(like, j),
                static_cast<long long>(c.numel(like, j)));
  }
  return kOk;
}

// The bucket's select and propose (S: their slots): u, v float32, tensor j of
// each the same size, its gradient src[gidx[j]] (check_sources), consts
// float32[DgcConsts::kCount].
template <class S>
int check_dgc_bucket_residuals(const AotCall &c) {
  MSOPT_TRY(c.require_dtype(S::u, "float32"));
  MSOPT_TRY(c.require_dtype(S::v, "float32"));
  MSOPT_TRY(c.require_same_numel(S::u, {S::v}));
  MSOPT_TRY(check_sources(c, S::src, S::gidx, S::u));
  return c.require_f32(S::consts, DgcConsts::kCount);
}

// DGC's ops that step parameters (S: their slots; the bucket's apply, the dense
// momentum, the flush): param each float32 or float16, lr float32[1] or [K],
// done float32[1].
template <class S>
int check_dgc_params(const AotCall &c) {
  for (int j = 0; j < c.K(); ++j)
    MSOPT_CHECK(c, c.is(S::param, "float32", j) || c.is(S::param, "float16", j), kErrDtype,
                "%s must be float32 or float16, got %s", c.name(S::param, j),
                c.dtype(S::param, j));
  MSOPT_TRY(c.require_f32(S::lr, 1, c.K()));
  return c.require_f32(S::done, 1);
}

// Every position in slot idx (int32) lies in [0, total): the bucket's elements.
inline int check_bucket_positions(const AotCall &c, int idx, int64_t total) {
  const int32_t *at = c.ptr<int32_t>(idx);
  for (int64_t e = 0; e < c.numel(idx); ++e)
    MSOPT_CHECK(c, at[e] >= 0 && at[e] < total, kErrValue,
                "idx[%lld] = %d is outside [0, %lld) (the bucket's elements)",
                static_cast<long long>(e), at[e], static_cast<long long>(total));
  return kOk;
}

// ms_optim_lamb: param, m, v, grad float32, tensor j of each the same size; lr and wd
// float32[1] or [K]; gscale float32[1]; powers and consts their structs; ratios float32[K].
template <class S>
int check_lamb(const AotCall &c) {
  const int K = c.K();
  for (int s : {S::param, S::m, S::v, S::grad}) MSOPT_TRY(c.require_dtype(s, "float32"));
  MSOPT_TRY(c.require_same_numel(S::param, {S::m, S::v, S::grad}));
  MSOPT_TRY(c.require_f32(S::lr, 1, K));
  MSOPT_TRY(c.require_f32(S::wd, 1, K));
  MSOPT_TRY(c.require_f32(S::gscale, 1));
  MSOPT_TRY(c.require_f32(S::powers, Powers::kCount));
  MSOPT_TRY(c.require_f32(S::consts, LambConsts::kCount));
  return c.require_f32(S::ratios, K);
}

// ms_optim_sumsq: grad float32 (any sizes), sumsq float32[1].
template <class S>
int check_sumsq(const AotCall &c) {
  MSOPT_TRY(c.require_dtype(S::grad, "float32"));
  return c.require_f32(S::sumsq, 1);
}

}  // namespace msopt
