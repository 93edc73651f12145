// MindSpore AOT adapters for Lamb (PaddlePaddle's rule, docs/algorithms.md §2) and
// the squared-norm reduction used by global-norm gradient clipping.
//
// ms_optim_lamb is a multi-tensor op: one call steps K parameters, so a
// network with hundreds of parameters costs one MindSpore kernel launch, not
// hundreds.  Inputs (nparam = 4K + 6):
//   param[0..K), m[0..K), v[0..K), grad[0..K)  float32; param i, m i, v i and
//                                              grad i have the same size
//   lr       float32[1] (shared) or float32[K] (per parameter)
//   wd       float32[1] or float32[K]: decoupled weight decay, 0 = excluded
//   gscale   float32 scalar: multiplies every gradient (1/loss_scale, times a
//            global-norm clip factor)
//   powers   float32[2]: contract.h Powers (beta1^t, beta2^t of this step)
//   consts   float32[7]: contract.h LambConsts
// Output: float32[K], the trust ratio applied to each parameter.
#include <algorithm>
#include <cmath>
#include <new>
#include <vector>

#include "core/common.h"
#include "core/contract.h"
#include "core/kernels.h"
#include "core/rules.h"

using msopt::AotArgs;
using msopt::fail;

namespace {

// The scratch buffer for the update direction, kept between calls.  Calls
// that go multi-threaded hold the process-wide ParallelSection, so they share
// one buffer; smaller calls (which MindSpore may run concurrently on several
// threads) use a per-thread one.
float *lamb_scratch(bool shared, int64_t floats) {
  static std::vector<float> shared_buf;
  thread_local std::vector<float> local_buf;
  std::vector<float> &buf = shared ? shared_buf : local_buf;
  try {
    if (static_cast<int64_t>(buf.size()) < floats) buf.resize(static_cast<size_t>(floats));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
  return buf.data();
}

}  // namespace

MSOPT_API int ms_optim_lamb(int nparam, void **params, int *ndims, int64_t **shapes,
                            const char **dtypes, void *, void *) {
  if (nparam < 10 || (nparam - 6) % 4 != 0)
    return fail(msopt::kErrSize, "ms_optim_lamb: expected 4K + 6 tensors, got %d", nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = (nparam - 6) / 4;
  const int lr_i = 4 * K, wd_i = lr_i + 1, gs_i = lr_i + 2, pw_i = lr_i + 3, c_i = lr_i + 4,
            out_i = lr_i + 5;
  for (int i = 0; i < nparam; ++i)
    if (!a.is(i, "float32"))
      return fail(msopt::kErrDtype, "ms_optim_lamb: argument %d must be float32, got %s", i,
                  dtypes[i]);
  for (int i = 0; i < K; ++i)
    for (int j = 1; j < 4; ++j)
      if (a.numel(i + j * K) != a.numel(i))
        return fail(msopt::kErrSize,
                    "ms_optim_lamb: argument %d has %lld elements, its param (argument %d) %lld",
                    i + j * K, static_cast<long long>(a.numel(i + j * K)), i,
                    static_cast<long long>(a.numel(i)));
  for (int i : {lr_i, wd_i})
    if (a.numel(i) != 1 && a.numel(i) != K)
      return fail(msopt::kErrSize, "ms_optim_lamb: %s must have 1 or %d elements, got %lld",
                  i == lr_i ? "lr" : "wd", K, static_cast<long long>(a.numel(i)));
  if (a.numel(gs_i) != 1)
    return fail(msopt::kErrSize, "ms_optim_lamb: gscale must be a float32 scalar");
  if (a.numel(pw_i) != msopt::Powers::kCount)
    return fail(msopt::kErrSize, "ms_optim_lamb: powers must be float32[%d]",
                msopt::Powers::kCount);
  if (a.numel(c_i) != msopt::LambConsts::kCount)
    return fail(msopt::kErrSize, "ms_optim_lamb: consts must be float32[%d]",
                msopt::LambConsts::kCount);
  if (a.numel(out_i) != K)
    return fail(msopt::kErrSize, "ms_optim_lamb: the output must be float32[%d]", K);

  const msopt::LambConsts &c = *a.ptr<const msopt::LambConsts>(c_i);
  const msopt::Powers &pw = *a.ptr<const msopt::Powers>(pw_i);
  msopt::LambArgs h;
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = c.eps;
  msopt::rules::lamb_bias_corrections(pw.beta1_power, pw.beta2_power, h.inv_bc1, h.inv_sqrt_bc2);
  h.grad_scale = *a.ptr<float>(gs_i);
  h.clip_norm = c.clip_norm;
  h.clip_lo = c.clip_lo;
  h.clip_hi = c.clip_hi;
  h.always_adapt = c.always_adapt != 0.0f;

  const float *lr = a.ptr<float>(lr_i), *wd = a.ptr<float>(wd_i);
  const bool lr_each = a.numel(lr_i) == K, wd_each = a.numel(wd_i) == K;
  float *ratios = a.ptr<float>(out_i);
  std::vector<msopt::LambTensor> tensors;
  try {
    tensors.resize(static_cast<size_t>(K));
  } catch (const std::bad_alloc &) {
    return fail(msopt::kErrNoMem, "ms_optim_lamb: cannot allocate the list of %d tensors", K);
  }
  int64_t total = 0;
  for (int i = 0; i < K; ++i) {
    tensors[i] = {a.ptr<float>(i),         a.ptr<float>(i + K), a.ptr<float>(i + 2 * K),
                  a.ptr<float>(i + 3 * K), a.numel(i),          lr[lr_each ? i : 0],
                  wd[wd_each ? i : 0],     ratios + i};
    total += a.numel(i);
  }
  // largest first: the tensors that run whole are handed out in this order, so the
  // threads finish together (each tensor keeps its own ratio slot)
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const msopt::LambTensor &x, const msopt::LambTensor &y) { return x.n > y.n; });
  const msopt::ParallelSection section(total);
  const int64_t need = msopt::lamb_scratch_floats(tensors.data(), K);
  float *scratch = lamb_scratch(section.held(), need);
  if (scratch == nullptr)
    return fail(msopt::kErrNoMem, "ms_optim_lamb: cannot allocate %lld floats of scratch",
                static_cast<long long>(need));
  msopt::kernels().lamb_f32(tensors.data(), K, h, scratch);
  return msopt::kOk;
}

// Inputs: x[0..K) (float32, any sizes).  Output: float32[1] = the sum of
// x_i^2 over every element of every input, accumulated in double (one op for
// the global norm of all gradients, not one per gradient).
MSOPT_API int ms_optim_sumsq(int nparam, void **params, int *ndims, int64_t **shapes,
                             const char **dtypes, void *, void *) {
  if (nparam < 2)
    return fail(msopt::kErrSize, "ms_optim_sumsq: expected K inputs and 1 output, got %d tensors",
                nparam);
  const AotArgs a{nparam, params, ndims, shapes, dtypes};
  const int K = nparam - 1;
  for (int i = 0; i <= K; ++i)
    if (!a.is(i, "float32"))
      return fail(msopt::kErrDtype, "ms_optim_sumsq: argument %d must be float32, got %s", i,
                  dtypes[i]);
  if (a.numel(K) != 1)
    return fail(msopt::kErrSize, "ms_optim_sumsq: the output must be float32[1]");
  int64_t total = 0;
  for (int i = 0; i < K; ++i) total += a.numel(i);
  const msopt::ParallelSection section(total);
  double sum = 0.0;
  for (int i = 0; i < K; ++i) sum += msopt::kernels().sumsq_f32(a.ptr<float>(i), a.numel(i));
  *a.ptr<float>(K) = static_cast<float>(sum);
  return msopt::kOk;
}
