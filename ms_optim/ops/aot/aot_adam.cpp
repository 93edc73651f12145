// MindSpore AOT adapters for AdamOffload: multi-tensor ops, one call steps K
// parameters (a MindSpore kernel launch per parameter costs more than a small
// parameter's update: benchmarks/README.md#where-a-steps-time-goes).  The
// tensors each takes are declared in core/contract.h.
//
// ms_optim_adam_inplace: param, m, v, grad, lr, wd, powers, consts -> done
//   param/grad   float32 or float16 (all alike)
//   m/v          float32, or all bfloat16 (compact moments)
//   lr           float32[1] (shared) or float32[K] (per parameter)
//   wd           float32[1] or float32[K]: weight decay, added as wd * p to the
//                still loss-scaled gradient (MindSpore's order); 0 = none; with
//                consts.decoupled, AdamW's decay of the direction instead
//   powers       float32[2]: Powers (beta1^t, beta2^t of this step)
//   consts       float32[5]: AdamConsts, or float32[6]: AdamExtConsts
//   done         float32[1]
// Updates param, m and v in place in one pass.
//
// ms_optim_adam_delta: m, v, grad, lr, powers, consts -> delta (each shaped
// and typed as its grad; the decay and the loss scale already applied to grad:
// the device did them).  Updates m and v in place and writes the steps.
//
// ms_optim_adam_q8_inplace and ms_optim_adam_q8_delta: the same with int8
// moments: m int8, v uint8, then m_scale, v_scale float32[ceil(n / kQ8Block)]
// (one absmax per block), and key int32[2] after consts: the step and the
// position of parameter 0 among the optimizer's parameters, from which each
// parameter's stochastic rounding bits follow (rules::q8_tensor_key).
#include <new>
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "kernels/table.h"
#include "core/rules.h"

namespace msopt {
namespace {

// The slots of one Adam entry (-1: the entry has none).
struct AdamSlots {
  int out, m, v, grad, lr, wd, powers, consts;  // out: param (in place) or delta (outputs)
  int m_scale, v_scale, key, done;  // m_scale, v_scale, key: the q8 entries
};

// The moment storage of tensor i: float32 or bfloat16 (m and v alike) in the
// plain entries; int8 m, uint8 v and float32 scales of the right sizes in the
// q8 ones.
int check_moments(const AotCall &c, int i, const AdamSlots &l, Moments &kind) {
  if (l.m_scale >= 0) {
    MSOPT_CHECK(c, c.is(l.m, "int8", i) && c.is(l.v, "uint8", i), kErrDtype,
                "moments m%d, v%d must be int8 and uint8, got %s and %s", i, i, c.dtype(l.m, i),
                c.dtype(l.v, i));
    const int64_t blocks = (c.numel(l.out, i) + kQ8Block - 1) / kQ8Block;
    for (int s : {l.m_scale, l.v_scale}) {
      MSOPT_CHECK(c, c.is(s, "float32", i), kErrDtype, "%s must be float32, got %s",
                  c.name(s, i), c.dtype(s, i));
      MSOPT_CHECK(c, c.numel(s, i) == blocks, kErrSize,
                  "%s must have %lld element(s) (one per %lld), got %lld", c.name(s, i),
                  static_cast<long long>(blocks), static_cast<long long>(kQ8Block),
                  static_cast<long long>(c.numel(s, i)));
    }
    kind = Moments::kQ8;
    return kOk;
  }
  const bool bf16 = c.is(l.m, "bfloat16");
  const char *want = bf16 ? "bfloat16" : "float32";
  MSOPT_CHECK(c, c.is(l.m, want, i) && c.is(l.v, want, i), kErrDtype,
              "moments m%d, v%d must be float32 (or all bfloat16; int8: the q8 kernels), as m0 "
              "(%s), got %s and %s",
              i, i, c.dtype(l.m), c.dtype(l.m, i), c.dtype(l.v, i));
  kind = bf16 ? Moments::kBf16 : Moments::kF32;
  return kOk;
}

int run_adam(const AotCall &c, const AdamSlots &l) {
  const int K = c.K();
  const bool delta = l.done < 0;
  bool half = false;
  MSOPT_TRY(check_host_step_data(c, l.out, l.grad, delta, &half));
  Moments moments = Moments::kF32;
  for (int i = 0; i < K; ++i) MSOPT_TRY(check_moments(c, i, l, moments));
  MSOPT_TRY(c.require_same_numel(l.out, {l.m, l.v, l.grad}));
  MSOPT_TRY(c.require_f32(l.lr, 1, K));
  if (l.wd >= 0) MSOPT_TRY(c.require_f32(l.wd, 1, K));
  MSOPT_TRY(c.require_f32(l.powers, Powers::kCount));
  MSOPT_TRY(c.require_f32(l.consts, AdamConsts::kCount, AdamExtConsts::kCount));
  if (!delta) MSOPT_TRY(c.require_f32(l.done, 1));
  uint32_t step = 0, first = 0;
  if (l.key >= 0) MSOPT_TRY(read_q8_key(c, l.key, &step, &first));

  // AdamConsts is AdamExtConsts' first fields; decoupled is read only when present
  const AdamExtConsts &k = *c.ptr<const AdamExtConsts>(l.consts);
  const bool decoupled = c.numel(l.consts) == AdamExtConsts::kCount && k.decoupled != 0.0f;
  const Powers &pw = *c.ptr<const Powers>(l.powers);
  const float *lr = c.ptr<float>(l.lr);
  const float *wd = l.wd >= 0 ? c.ptr<float>(l.wd) : nullptr;
  const bool lr_each = c.numel(l.lr) == K, wd_each = wd != nullptr && c.numel(l.wd) == K;
  std::vector<AdamTensor> ts(static_cast<size_t>(K));
  int64_t total = 0;
  for (int i = 0; i < K; ++i) {
    AdamArgs h;
    h.beta1 = k.beta1;
    h.beta2 = k.beta2;
    h.eps = k.eps;
    h.inv_scale = k.inv_scale;
    h.nesterov = k.nesterov != 0.0f;
    h.decoupled = decoupled;
    // nn.AdamWeightDecay's rule has no bias correction
    const float lr_i = lr[lr_each ? i : 0];
    h.lr_t = decoupled ? lr_i : rules::adam_step_size(lr_i, pw.beta1_power, pw.beta2_power);
    h.weight_decay = wd == nullptr ? 0.0f : wd[wd_each ? i : 0];
    AdamTensor &x = ts[i];
    x.out = c.ptr<void>(l.out, i);
    x.m = c.ptr<void>(l.m, i);
    x.v = c.ptr<void>(l.v, i);
    x.g = c.ptr<void>(l.grad, i);
    x.n = c.numel(l.out, i);
    x.a = h;
    if (moments == Moments::kQ8) {
      x.m_scale = c.ptr<float>(l.m_scale, i);
      x.v_scale = c.ptr<float>(l.v_scale, i);
      x.q8_key = rules::q8_tensor_key(step, first + static_cast<uint32_t>(i));
    }
    total += x.n;
  }
  const ParallelSection section(total);
  kernels().adam_multi(ts.data(), K, delta, half, moments);
  if (!delta) *c.ptr<float>(l.done) = 0.0f;
  return kOk;
}

int adam_inplace(const AotCall &c) {
  using S = sig::ms_optim_adam_inplace;
  return run_adam(c, {S::param, S::m, S::v, S::grad, S::lr, S::wd, S::powers, S::consts, -1, -1,
                      -1, S::done});
}

int adam_delta(const AotCall &c) {
  using S = sig::ms_optim_adam_delta;
  return run_adam(c, {S::delta, S::m, S::v, S::grad, S::lr, -1, S::powers, S::consts, -1, -1, -1,
                      -1});
}

int adam_q8_inplace(const AotCall &c) {
  using S = sig::ms_optim_adam_q8_inplace;
  return run_adam(c, {S::param, S::m, S::v, S::grad, S::lr, S::wd, S::powers, S::consts,
                      S::m_scale, S::v_scale, S::key, S::done});
}

int adam_q8_delta(const AotCall &c) {
  using S = sig::ms_optim_adam_q8_delta;
  return run_adam(c, {S::delta, S::m, S::v, S::grad, S::lr, -1, S::powers, S::consts,
                      S::m_scale, S::v_scale, S::key, -1});
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_adam_inplace, msopt::adam_inplace)
MSOPT_AOT_ENTRY(ms_optim_adam_delta, msopt::adam_delta)
MSOPT_AOT_ENTRY(ms_optim_adam_q8_inplace, msopt::adam_q8_inplace)
MSOPT_AOT_ENTRY(ms_optim_adam_q8_delta, msopt::adam_q8_delta)

// The elements per int8 moment block (aot.py checks its own against it).
MSOPT_API int64_t ms_optim_q8_block() { return msopt::kQ8Block; }
