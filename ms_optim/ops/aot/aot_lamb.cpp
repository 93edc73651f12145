// MindSpore AOT adapters for Lamb (PaddlePaddle's rule, docs/algorithms.md §2) and
// the squared-norm reduction used by global-norm gradient clipping.  The
// tensors each takes are declared in core/contract.h.
//
// ms_optim_lamb is a multi-tensor op: one call steps K parameters, so a
// network with hundreds of parameters costs one MindSpore kernel launch, not
// hundreds.
//   param, m, v, grad  float32, tensor i of each the same size
//   lr       float32[1] (shared) or float32[K] (per parameter)
//   wd       float32[1] or float32[K]: decoupled weight decay, 0 = excluded
//   gscale   float32 scalar: multiplies every gradient (1/loss_scale, times a
//            global-norm clip factor)
//   powers   float32[2]: Powers (beta1^t, beta2^t of this step)
//   consts   float32[7]: LambConsts
//   ratios   (output) float32[K], the trust ratio applied to each parameter
#include <algorithm>
#include <cmath>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "kernels/table.h"
#include "core/rules.h"

namespace msopt {
namespace {

int lamb_body(const AotCall &c) {
  using S = sig::ms_optim_lamb;
  const int K = c.K();
  MSOPT_TRY(check_lamb<S>(c));

  const Powers &pw = *c.ptr<const Powers>(S::powers);
  LambArgs h;
  h.k = *c.ptr<const LambConsts>(S::consts);
  rules::lamb_bias_corrections(pw.beta1_power, pw.beta2_power, h.inv_bc1, h.inv_sqrt_bc2);
  h.grad_scale = *c.ptr<float>(S::gscale);

  const float *lr = c.ptr<float>(S::lr), *wd = c.ptr<float>(S::wd);
  const bool lr_each = c.numel(S::lr) == K, wd_each = c.numel(S::wd) == K;
  float *ratios = c.ptr<float>(S::ratios);
  std::vector<LambTensor> tensors(static_cast<size_t>(K));
  int64_t total = 0;
  for (int i = 0; i < K; ++i) {
    LambTensor &x = tensors[i];
    x.p = c.ptr<float>(S::param, i);
    x.m = c.ptr<float>(S::m, i);
    x.v = c.ptr<float>(S::v, i);
    x.g = c.ptr<float>(S::grad, i);
    x.n = c.numel(S::param, i);
    x.lr = lr[lr_each ? i : 0];
    x.weight_decay = wd[wd_each ? i : 0];
    x.ratio = ratios + i;
    total += c.numel(S::param, i);
  }
  // largest first: the tensors that run whole are handed out in this order, so the
  // threads finish together (each tensor keeps its own ratio slot)
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const LambTensor &x, const LambTensor &y) { return x.n > y.n; });
  const ParallelSection section(total);
  kernels().lamb_f32(tensors.data(), K, h);
  return kOk;
}

// grad[K] (float32, any sizes) -> sumsq float32[1]: the sum of x^2 over every
// element of every input, accumulated in double (one op for the global norm of
// all gradients, not one per gradient).
int sumsq_body(const AotCall &c) {
  using S = sig::ms_optim_sumsq;
  MSOPT_TRY(check_sumsq<S>(c));
  int64_t total = 0;
  for (int i = 0; i < c.K(); ++i) total += c.numel(S::grad, i);
  const ParallelSection section(total);
  double sum = 0.0;
  for (int i = 0; i < c.K(); ++i)
    sum += kernels().sumsq_f32(c.ptr<float>(S::grad, i), c.numel(S::grad, i));
  *c.ptr<float>(S::sumsq) = static_cast<float>(sum);
  return kOk;
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_lamb, msopt::lamb_body)
MSOPT_AOT_ENTRY(ms_optim_sumsq, msopt::sumsq_body)
