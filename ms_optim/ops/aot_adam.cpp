// MindSpore AOT adapters for AdamOffload: multi-tensor ops, one call steps K
// parameters (a MindSpore kernel launch per parameter costs more than a small
// parameter's update: docs/PROFILE.md).
//
// ABI: int F(int nparam, void **params, int *ndims, int64_t **shapes,
//            const char **dtypes, void *stream, void *extra)
// with params = inputs, then outputs.
//
// ms_optim_adam_inplace, nparam = 4K + 5:
//   param[0..K), m[0..K), v[0..K), grad[0..K)   param/grad float32 or float16
//                                               (all alike), m/v float32
//   lr      float32[1] (shared) or float32[K] (per parameter)
//   wd      float32[1] or float32[K]: weight decay, added as wd * p to the
//           still loss-scaled gradient (MindSpore's order); 0 = none
//   powers  float32[2]: contract.h Powers (beta1^t, beta2^t of this step)
//   consts  float32[5]: contract.h AdamConsts
//   output  float32[1] (done)
// Updates param, m and v in place in one pass.
//
// ms_optim_adam_delta, nparam = 4K + 3:
//   m[0..K), v[0..K), grad[0..K), lr, powers, consts as above (the decay and
//   the loss scale already applied to grad: the device did them)
//   outputs delta[0..K), each shaped and typed as its grad
// Updates m and v in place and writes the parameter steps.
#include <new>
#include <vector>

#include "common.h"
#include "contract.h"
#include "kernels.h"
#include "rules.h"

namespace msopt {
namespace {

// The tensors of one call: first index of each group of K.
struct AdamLayout {
  int out, m, v, g;  // out: params (in place) or deltas (outputs)
  int lr, wd, powers, consts;  // wd < 0: none (delta)
};

int check_float32(const AotArgs &a, int i, int64_t numel_a, int64_t numel_b, const char *what,
                  const char *fn) {
  if (!a.is(i, "float32") || (a.numel(i) != numel_a && a.numel(i) != numel_b))
    return fail(kErrSize, "%s: %s must be float32 with %lld element(s), got %s with %lld", fn,
                what, static_cast<long long>(numel_a), a.dtypes[i],
                static_cast<long long>(a.numel(i)));
  return kOk;
}

int run_adam(const AotArgs &a, int K, const AdamLayout &l, bool delta, const char *fn) {
  const bool half = a.is(l.g, "float16");
  if (!half && !a.is(l.g, "float32"))
    return fail(kErrDtype, "%s: grad0 must be float32 or float16, got %s", fn, a.dtypes[l.g]);
  const char *pdt = a.dtypes[l.g];
  for (int i = 0; i < K; ++i) {
    if (!a.is(l.out + i, pdt) || !a.is(l.g + i, pdt))
      return fail(kErrDtype, "%s: %s%d and grad%d must all be %s (as grad0), got %s and %s", fn,
                  delta ? "delta" : "param", i, i, pdt, a.dtypes[l.out + i], a.dtypes[l.g + i]);
    if (!a.is(l.m + i, "float32") || !a.is(l.v + i, "float32"))
      return fail(kErrDtype, "%s: moments m%d, v%d must be float32", fn, i, i);
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
  if (int rc = check_float32(a, l.consts, AdamConsts::kCount, AdamConsts::kCount, "consts", fn))
    return rc;

  const AdamConsts &c = *a.ptr<const AdamConsts>(l.consts);
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
    h.lr_t = rules::adam_step_size(lr[lr_each ? i : 0], pw.beta1_power, pw.beta2_power);
    h.weight_decay = wd == nullptr ? 0.0f : wd[wd_each ? i : 0];
    ts[i] = {a.params[l.out + i], a.ptr<float>(l.m + i), a.ptr<float>(l.v + i),
             a.params[l.g + i], a.numel(l.out + i), h};
    total += ts[i].n;
  }
  const ParallelSection section(total);
  kernels().adam_multi(ts.data(), K, delta, half);
  return kOk;
}

}  // namespace
}  // namespace msopt

using msopt::fail;

MSOPT_API int ms_optim_adam_inplace(int nparam, void **params, int *ndims, int64_t **shapes,
                                    const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_adam_inplace";
  if (nparam < 9 || (nparam - 5) % 4 != 0)
    return fail(msopt::kErrSize, "%s: expected 4K + 5 tensors, got %d", fn, nparam);
  const msopt::AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 5) / 4;
  const msopt::AdamLayout l{0, K, 2 * K, 3 * K, 4 * K, 4 * K + 1, 4 * K + 2, 4 * K + 3};
  if (!a.is(nparam - 1, "float32") || a.numel(nparam - 1) != 1)
    return fail(msopt::kErrSize, "%s: the output must be float32[1]", fn);
  if (int rc = msopt::run_adam(a, K, l, false, fn)) return rc;
  *a.ptr<float>(nparam - 1) = 0.0f;
  return msopt::kOk;
}

MSOPT_API int ms_optim_adam_delta(int nparam, void **params, int *ndims, int64_t **shapes,
                                  const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_adam_delta";
  if (nparam < 7 || (nparam - 3) % 4 != 0)
    return fail(msopt::kErrSize, "%s: expected 4K + 3 tensors, got %d", fn, nparam);
  const msopt::AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 3) / 4;
  const msopt::AdamLayout l{3 * K + 3, 0, K, 2 * K, 3 * K, -1, 3 * K + 1, 3 * K + 2};
  return msopt::run_adam(a, K, l, true, fn);
}
