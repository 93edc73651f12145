// MindSpore AOT adapters for AdamOffload: multi-tensor ops, one call steps K
// parameters (a MindSpore kernel launch per parameter costs more than a small
// parameter's update: benchmarks/README.md#where-a-steps-time-goes).
//
// ABI: int F(int nparam, void **params, int *ndims, int64_t **shapes,
//            const char **dtypes, void *stream, void *extra)
// with params = inputs, then outputs.
//
// ms_optim_adam_inplace, nparam = 4K + 5:
//   param[0..K), m[0..K), v[0..K), grad[0..K)   param/grad float32 or float16
//                                               (all alike), m/v float32, or
//                                               all bfloat16 (compact moments)
//   lr      float32[1] (shared) or float32[K] (per parameter)
//   wd      float32[1] or float32[K]: weight decay, added as wd * p to the
//           still loss-scaled gradient (MindSpore's order); 0 = none; with
//           consts.decoupled, AdamW's decay of the direction instead
//   powers  float32[2]: contract.h Powers (beta1^t, beta2^t of this step)
//   consts  float32[5]: contract.h AdamConsts, or float32[6]: AdamExtConsts
//   output  float32[1] (done)
// Updates param, m and v in place in one pass.
//
// ms_optim_adam_delta, nparam = 4K + 3:
//   m[0..K), v[0..K), grad[0..K), lr, powers, consts as above (the decay and
//   the loss scale already applied to grad: the device did them)
//   outputs delta[0..K), each shaped and typed as its grad
// Updates m and v in place and writes the parameter steps.
//
// ms_optim_adam_q8_inplace (6K + 5) and ms_optim_adam_q8_delta (6K + 3): the
// same with int8 moments: m[K] int8, v[K] uint8, then m_scale[K], v_scale[K]
// float32[ceil(n / kQ8Block)] (one absmax per block), before grad[K].
#include <new>
#include <vector>

#include "core/common.h"
#include "core/contract.h"
#include "core/kernels.h"
#include "core/rules.h"

namespace msopt {
namespace {

// The tensors of one call: first index of each group of K.
struct AdamLayout {
  int out, m, v, g;  // out: params (in place) or deltas (outputs)
  int lr, wd, powers, consts;  // wd < 0: none (delta)
  int m_scale = -1, v_scale = -1;  // int8 moments: their scales; -1: none
};

int check_float32(const AotArgs &a, int i, int64_t numel_a, int64_t numel_b, const char *what,
                  const char *fn) {
  if (!a.is(i, "float32") || (a.numel(i) != numel_a && a.numel(i) != numel_b))
    return fail(kErrSize, "%s: %s must be float32 with %lld element(s), got %s with %lld", fn,
                what, static_cast<long long>(numel_a), a.dtypes[i],
                static_cast<long long>(a.numel(i)));
  return kOk;
}

// The moment storage of tensor i: float32 or bfloat16 (m and v alike) in the
// plain entries; int8 m, uint8 v and float32 scales of the right sizes in the
// q8 ones.
int check_moments(const AotArgs &a, int i, const AdamLayout &l, Moments &kind, const char *fn) {
  const int m = l.m + i, v = l.v + i;
  if (l.m_scale >= 0) {
    if (!a.is(m, "int8") || !a.is(v, "uint8"))
      return fail(kErrDtype, "%s: moments m%d, v%d must be int8 and uint8, got %s and %s", fn,
                  i, i, a.dtypes[m], a.dtypes[v]);
    const int64_t blocks = (a.numel(l.out + i) + kQ8Block - 1) / kQ8Block;
    for (int s : {l.m_scale + i, l.v_scale + i})
      if (!a.is(s, "float32") || a.numel(s) != blocks)
        return fail(kErrSize,
                    "%s: scale %d of argument %d must be float32 with %lld element(s) (one per "
                    "%lld), got %s with %lld",
                    fn, i, s, static_cast<long long>(blocks), static_cast<long long>(kQ8Block),
                    a.dtypes[s], static_cast<long long>(a.numel(s)));
    kind = Moments::kQ8;
    return kOk;
  }
  const bool bf16 = a.is(l.m, "bfloat16");
  const char *want = bf16 ? "bfloat16" : "float32";
  if (!a.is(m, want) || !a.is(v, want))
    return fail(kErrDtype,
                "%s: moments m%d, v%d must be float32 (or all bfloat16; int8: the q8 kernels), "
                "as m0 (%s), got %s and %s",
                fn, i, i, a.dtypes[l.m], a.dtypes[m], a.dtypes[v]);
  kind = bf16 ? Moments::kBf16 : Moments::kF32;
  return kOk;
}

int run_adam(const AotArgs &a, int K, const AdamLayout &l, bool delta, const char *fn) {
  const bool half = a.is(l.g, "float16");
  if (!half && !a.is(l.g, "float32"))
    return fail(kErrDtype, "%s: grad0 must be float32 or float16, got %s", fn, a.dtypes[l.g]);
  const char *pdt = a.dtypes[l.g];
  Moments moments = Moments::kF32;
  for (int i = 0; i < K; ++i) {
    if (!a.is(l.out + i, pdt) || !a.is(l.g + i, pdt))
      return fail(kErrDtype, "%s: %s%d and grad%d must all be %s (as grad0), got %s and %s", fn,
                  delta ? "delta" : "param", i, i, pdt, a.dtypes[l.out + i], a.dtypes[l.g + i]);
    if (int rc = check_moments(a, i, l, moments, fn)) return rc;
    for (int j : {l.m, l.v, l.g})
      if (a.numel(j + i) != a.numel(l.out + i))
        return fail(kErrSize, "%s: tensor %d of argument %d has %lld elements, its %s %lld",
                    fn, i, j + i, static_cast<long long>(a.numel(j + i)),
                    delta ? "delta" : "param", static_cast<long long>(a.numel(l.out + i)));
  }
  if (int rc = check_float32(a, l.lr, 1, K, "lr", fn)) return rc;
  if (l.wd >= 0)
    if (int rc = check_float32(a, l.wd, 1, K, "wd", fn)) return rc;
  if (int rc = check_float32(a, l.powers, Powers::kCount, Powers::kCount, "powers", fn)) return rc;
  if (int rc = check_float32(a, l.consts, AdamConsts::kCount, AdamExtConsts::kCount, "consts", fn))
    return rc;

  // AdamConsts is AdamExtConsts' first fields; decoupled is read only when present
  const AdamExtConsts &c = *a.ptr<const AdamExtConsts>(l.consts);
  const bool decoupled = a.numel(l.consts) == AdamExtConsts::kCount && c.decoupled != 0.0f;
  const Powers &pw = *a.ptr<const Powers>(l.powers);
  const float *lr = a.ptr<float>(l.lr);
  const float *wd = l.wd >= 0 ? a.ptr<float>(l.wd) : nullptr;
  const bool lr_each = a.numel(l.lr) == K, wd_each = wd != nullptr && a.numel(l.wd) == K;
  std::vector<AdamTensor> ts;
  try {
    ts.resize(static_cast<size_t>(K));
  } catch (const std::bad_alloc &) {
    return fail(kErrNoMem, "%s: cannot allocate the list of %d tensors", fn, K);
  }
  int64_t total = 0;
  for (int i = 0; i < K; ++i) {
    AdamArgs h;
    h.beta1 = c.beta1;
    h.beta2 = c.beta2;
    h.eps = c.eps;
    h.inv_scale = c.inv_scale;
    h.nesterov = c.nesterov != 0.0f;
    h.decoupled = decoupled;
    // nn.AdamWeightDecay's rule has no bias correction
    const float lr_i = lr[lr_each ? i : 0];
    h.lr_t = decoupled ? lr_i : rules::adam_step_size(lr_i, pw.beta1_power, pw.beta2_power);
    h.weight_decay = wd == nullptr ? 0.0f : wd[wd_each ? i : 0];
    ts[i] = {a.params[l.out + i], a.params[l.m + i], a.params[l.v + i], a.params[l.g + i],
             a.numel(l.out + i), h};
    if (moments == Moments::kQ8) {
      ts[i].m_scale = a.ptr<float>(l.m_scale + i);
      ts[i].v_scale = a.ptr<float>(l.v_scale + i);
    }
    total += ts[i].n;
  }
  const ParallelSection section(total);
  kernels().adam_multi(ts.data(), K, delta, half, moments);
  return kOk;
}

int adam_inplace(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                 bool q8, const char *fn) {
  const int per = q8 ? 6 : 4;
  if (nparam < per + 5 || (nparam - 5) % per != 0)
    return fail(kErrSize, "%s: expected %dK + 5 tensors, got %d", fn, per, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 5) / per, g = (per - 1) * K, t = per * K;
  AdamLayout l{0, K, 2 * K, g, t, t + 1, t + 2, t + 3};
  if (q8) {
    l.m_scale = 3 * K;
    l.v_scale = 4 * K;
  }
  if (!a.is(nparam - 1, "float32") || a.numel(nparam - 1) != 1)
    return fail(kErrSize, "%s: the output must be float32[1]", fn);
  if (int rc = run_adam(a, K, l, false, fn)) return rc;
  *a.ptr<float>(nparam - 1) = 0.0f;
  return kOk;
}

int adam_delta(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
               bool q8, const char *fn) {
  const int per = q8 ? 6 : 4;
  if (nparam < per + 3 || (nparam - 3) % per != 0)
    return fail(kErrSize, "%s: expected %dK + 3 tensors, got %d", fn, per, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 3) / per, g = (per - 2) * K, t = (per - 1) * K;
  AdamLayout l{t + 3, 0, K, g, t, -1, t + 1, t + 2};
  if (q8) {
    l.m_scale = 2 * K;
    l.v_scale = 3 * K;
  }
  return run_adam(a, K, l, true, fn);
}

}  // namespace
}  // namespace msopt

MSOPT_API int ms_optim_adam_inplace(int nparam, void **params, int *ndims, int64_t **shapes,
                                    const char **dtypes, void *, void *) {
  return msopt::adam_inplace(nparam, params, ndims, shapes, dtypes, false,
                             "ms_optim_adam_inplace");
}

MSOPT_API int ms_optim_adam_delta(int nparam, void **params, int *ndims, int64_t **shapes,
                                  const char **dtypes, void *, void *) {
  return msopt::adam_delta(nparam, params, ndims, shapes, dtypes, false, "ms_optim_adam_delta");
}

MSOPT_API int ms_optim_adam_q8_inplace(int nparam, void **params, int *ndims, int64_t **shapes,
                                       const char **dtypes, void *, void *) {
  return msopt::adam_inplace(nparam, params, ndims, shapes, dtypes, true,
                             "ms_optim_adam_q8_inplace");
}

MSOPT_API int ms_optim_adam_q8_delta(int nparam, void **params, int *ndims, int64_t **shapes,
                                     const char **dtypes, void *, void *) {
  return msopt::adam_delta(nparam, params, ndims, shapes, dtypes, true, "ms_optim_adam_q8_delta");
}

// The elements per int8 moment block (kernels.py checks its own against it).
MSOPT_API int64_t ms_optim_q8_block() { return msopt::kQ8Block; }
