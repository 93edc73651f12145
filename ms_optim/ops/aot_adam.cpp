// MindSpore AOT adapters for the AdamOffload kernels.
//
// ABI: int F(int nparam, void **params, int *ndims, int64_t **shapes,
//            const char **dtypes, void *stream, void *extra)
// with params = inputs, then outputs.  Hyper-parameters arrive as tensors:
//   lr      float32 scalar (or shape [1])
//   wd      float32 scalar (or shape [1]), the weight decay already multiplied
//           by the loss scale, as MindSpore's Optimizer stores it
//   consts  float32[7]: beta1, beta2, eps, beta1_power, beta2_power,
//           1/loss_scale, use_nesterov (0 or 1); the powers are beta^t
#include <cmath>

#include "common.h"
#include "kernels.h"
#include "rules.h"

namespace msopt {
namespace {

constexpr int kNumConsts = 7;

int check_scalar(const AotArgs &a, int i, const char *what, const char *fn) {
  if (!a.is(i, "float32") || a.numel(i) != 1)
    return fail(kErrSize, "%s: %s must be a float32 scalar, got %s with %lld elements", fn,
                what, a.dtypes[i], static_cast<long long>(a.numel(i)));
  return kOk;
}

// Reads lr/consts into AdamArgs (weight decay set by the caller).
int read_adam_args(const AotArgs &a, int lr_i, int consts_i, const char *fn, AdamArgs *out) {
  if (int rc = check_scalar(a, lr_i, "lr", fn)) return rc;
  if (!a.is(consts_i, "float32") || a.numel(consts_i) != kNumConsts)
    return fail(kErrSize, "%s: consts must be float32[%d]", fn, kNumConsts);
  const float lr = *a.ptr<float>(lr_i);
  const float *c = a.ptr<float>(consts_i);
  const float beta1_power = c[3], beta2_power = c[4];
  out->beta1 = c[0];
  out->beta2 = c[1];
  out->eps = c[2];
  out->lr_t = rules::adam_step_size(lr, beta1_power, beta2_power);
  out->inv_scale = c[5];
  out->nesterov = c[6] != 0.0f;
  out->weight_decay = 0.0f;
  return kOk;
}

// Checks that inputs `first`..`last` hold the same number of elements.
int check_same_numel(const AotArgs &a, int first, int last, const char *fn) {
  for (int i = first + 1; i <= last; ++i)
    if (a.numel(i) != a.numel(first))
      return fail(kErrSize, "%s: argument %d has %lld elements, argument %d has %lld", fn, i,
                  static_cast<long long>(a.numel(i)), first,
                  static_cast<long long>(a.numel(first)));
  return kOk;
}

}  // namespace
}  // namespace msopt

using msopt::AotArgs;
using msopt::fail;

// Inputs: param, m, v, grad, lr, wd, consts.  Output: done (float32[1]).
// Updates param, m and v in place in one pass.
MSOPT_API int ms_optim_adam_inplace(int nparam, void **params, int *ndims, int64_t **shapes,
                          const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_adam_inplace";
  if (nparam != 8) return fail(msopt::kErrSize, "%s: expected 8 tensors, got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  msopt::AdamArgs h;
  if (int rc = msopt::read_adam_args(a, 4, 6, fn, &h)) return rc;
  if (int rc = msopt::check_scalar(a, 5, "wd", fn)) return rc;
  h.weight_decay = *a.ptr<float>(5);
  if (int rc = msopt::check_same_numel(a, 0, 3, fn)) return rc;
  if (!a.is(1, "float32") || !a.is(2, "float32"))
    return fail(msopt::kErrDtype, "%s: moments must be float32", fn);
  const int64_t n = a.numel(0);
  const msopt::ParallelSection section(n);
  const auto &k = msopt::kernels();
  if (a.is(0, "float32") && a.is(3, "float32")) {
    k.adam_inplace_f32(a.ptr<float>(0), a.ptr<float>(1), a.ptr<float>(2), a.ptr<float>(3), n, h);
  } else if (a.is(0, "float16") && a.is(3, "float16")) {
    k.adam_inplace_f16(a.ptr<msopt::half_bits>(0), a.ptr<float>(1), a.ptr<float>(2),
                       a.ptr<msopt::half_bits>(3), n, h);
  } else {
    return fail(msopt::kErrDtype, "%s: param/grad must both be float32 or float16, got %s/%s",
                fn, dtypes[0], dtypes[3]);
  }
  *a.ptr<float>(7) = 0.0f;
  return msopt::kOk;
}

// Inputs: m, v, grad, lr, consts.  Output: delta (dtype of grad).
// Updates m and v in place and writes the parameter step to delta.
MSOPT_API int ms_optim_adam_delta(int nparam, void **params, int *ndims, int64_t **shapes,
                        const char **dtypes, void *, void *) {
  static const char *fn = "ms_optim_adam_delta";
  if (nparam != 6) return fail(msopt::kErrSize, "%s: expected 6 tensors, got %d", fn, nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  msopt::AdamArgs h;
  if (int rc = msopt::read_adam_args(a, 3, 4, fn, &h)) return rc;
  if (int rc = msopt::check_same_numel(a, 0, 2, fn)) return rc;
  if (a.numel(5) != a.numel(0)) return fail(msopt::kErrSize, "%s: delta size mismatch", fn);
  if (!a.is(0, "float32") || !a.is(1, "float32"))
    return fail(msopt::kErrDtype, "%s: moments must be float32", fn);
  const int64_t n = a.numel(0);
  const msopt::ParallelSection section(n);
  const auto &k = msopt::kernels();
  if (a.is(2, "float32") && a.is(5, "float32")) {
    k.adam_delta_f32(a.ptr<float>(5), a.ptr<float>(0), a.ptr<float>(1), a.ptr<float>(2), n, h);
  } else if (a.is(2, "float16") && a.is(5, "float16")) {
    k.adam_delta_f16(a.ptr<msopt::half_bits>(5), a.ptr<float>(0), a.ptr<float>(1),
                     a.ptr<msopt::half_bits>(2), n, h);
  } else {
    return fail(msopt::kErrDtype, "%s: grad/delta must both be float32 or float16, got %s/%s",
                fn, dtypes[2], dtypes[5]);
  }
  return msopt::kOk;
}

