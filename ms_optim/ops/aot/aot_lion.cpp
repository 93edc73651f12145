// MindSpore AOT adapters for Lion: multi-tensor ops, one call steps K
// parameters.  The tensors each takes are declared in core/contract.h.
//
// ms_optim_lion_inplace: param, m, grad, lr, wd, consts -> done
//   param/grad   float32 or float16 (all alike)
//   m            float32, or all bfloat16
//   lr, wd       float32[1] (shared) or float32[K] (per parameter); wd is the
//                decoupled decay, p * (1 - lr * wd)
//   consts       float32[3]: LionConsts
//   done         float32[1]
// Updates param and m in place in one pass.
//
// ms_optim_lion_delta: m, grad, lr, consts -> delta (each shaped and typed as
// its grad, the loss scale already divided out by the device): m updated in
// place, -lr * sign written; the device applies the decay and adds it.
//
// ms_optim_lion_q8_inplace and ms_optim_lion_q8_delta: m int8 with m_scale
// float32[ceil(n / kQ8Block)], and key int32[2] after consts: the step and the
// position of parameter 0 among the optimizer's parameters (rules::q8_tensor_key).
#include <vector>

#include "aot/call.h"
#include "aot/checks.h"
#include "core/contract.h"
#include "kernels/table.h"
#include "core/rules.h"

namespace msopt {
namespace {

// The slots of one Lion entry (-1: the entry has none).
struct LionSlots {
  int out, m, grad, lr, wd, consts;  // out: param (in place) or delta (outputs)
  int m_scale, key, done;
};

int check_moment(const AotCall &c, int i, const LionSlots &l, Moments &kind) {
  if (l.m_scale >= 0) {
    MSOPT_CHECK(c, c.is(l.m, "int8", i), kErrDtype, "moment m%d must be int8, got %s", i,
                c.dtype(l.m, i));
    const int64_t blocks = (c.numel(l.out, i) + kQ8Block - 1) / kQ8Block;
    MSOPT_CHECK(c, c.is(l.m_scale, "float32", i), kErrDtype, "%s must be float32, got %s",
                c.name(l.m_scale, i), c.dtype(l.m_scale, i));
    MSOPT_CHECK(c, c.numel(l.m_scale, i) == blocks, kErrSize,
                "%s must have %lld element(s) (one per %lld), got %lld", c.name(l.m_scale, i),
                static_cast<long long>(blocks), static_cast<long long>(kQ8Block),
                static_cast<long long>(c.numel(l.m_scale, i)));
    kind = Moments::kQ8;
    return kOk;
  }
  const bool bf16 = c.is(l.m, "bfloat16");
  const char *want = bf16 ? "bfloat16" : "float32";
  MSOPT_CHECK(c, c.is(l.m, want, i), kErrDtype,
              "moment m%d must be float32 (or all bfloat16; int8: the q8 kernels), as m0 (%s), "
              "got %s",
              i, c.dtype(l.m), c.dtype(l.m, i));
  kind = bf16 ? Moments::kBf16 : Moments::kF32;
  return kOk;
}

int run_lion(const AotCall &c, const LionSlots &l) {
  const int K = c.K();
  const bool delta = l.done < 0;
  bool half = false;
  MSOPT_TRY(check_host_step_data(c, l.out, l.grad, delta, &half));
  Moments moments = Moments::kF32;
  for (int i = 0; i < K; ++i) MSOPT_TRY(check_moment(c, i, l, moments));
  MSOPT_TRY(c.require_same_numel(l.out, {l.m, l.grad}));
  MSOPT_TRY(c.require_f32(l.lr, 1, K));
  if (l.wd >= 0) MSOPT_TRY(c.require_f32(l.wd, 1, K));
  MSOPT_TRY(c.require_f32(l.consts, LionConsts::kCount));
  if (!delta) MSOPT_TRY(c.require_f32(l.done, 1));
  uint32_t step = 0, first = 0;
  if (l.key >= 0) MSOPT_TRY(read_q8_key(c, l.key, &step, &first));

  const LionConsts &k = *c.ptr<const LionConsts>(l.consts);
  const float *lr = c.ptr<float>(l.lr);
  const float *wd = l.wd >= 0 ? c.ptr<float>(l.wd) : nullptr;
  const bool lr_each = c.numel(l.lr) == K, wd_each = wd != nullptr && c.numel(l.wd) == K;
  std::vector<LionTensor> ts(static_cast<size_t>(K));
  int64_t total = 0;
  for (int i = 0; i < K; ++i) {
    const float lr_i = lr[lr_each ? i : 0];
    const float wd_i = wd == nullptr ? 0.0f : wd[wd_each ? i : 0];
    LionTensor &x = ts[i];
    x.out = c.ptr<void>(l.out, i);
    x.m = c.ptr<void>(l.m, i);
    x.g = c.ptr<void>(l.grad, i);
    x.n = c.numel(l.out, i);
    x.neg_lr = -lr_i;
    x.keep = rules::lion_keep(lr_i, wd_i);
    if (moments == Moments::kQ8) {
      x.m_scale = c.ptr<float>(l.m_scale, i);
      x.q8_key = rules::q8_tensor_key(step, first + static_cast<uint32_t>(i));
    }
    total += x.n;
  }
  const ParallelSection section(total);
  kernels().lion_multi(ts.data(), K, k, delta, half, moments);
  if (!delta) *c.ptr<float>(l.done) = 0.0f;
  return kOk;
}

int lion_inplace(const AotCall &c) {
  using S = sig::ms_optim_lion_inplace;
  return run_lion(c, {S::param, S::m, S::grad, S::lr, S::wd, S::consts, -1, -1, S::done});
}

int lion_delta(const AotCall &c) {
  using S = sig::ms_optim_lion_delta;
  return run_lion(c, {S::delta, S::m, S::grad, S::lr, -1, S::consts, -1, -1, -1});
}

int lion_q8_inplace(const AotCall &c) {
  using S = sig::ms_optim_lion_q8_inplace;
  return run_lion(c, {S::param, S::m, S::grad, S::lr, S::wd, S::consts, S::m_scale, S::key,
                      S::done});
}

int lion_q8_delta(const AotCall &c) {
  using S = sig::ms_optim_lion_q8_delta;
  return run_lion(c, {S::delta, S::m, S::grad, S::lr, -1, S::consts, S::m_scale, S::key, -1});
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_lion_inplace, msopt::lion_inplace)
MSOPT_AOT_ENTRY(ms_optim_lion_delta, msopt::lion_delta)
MSOPT_AOT_ENTRY(ms_optim_lion_q8_inplace, msopt::lion_q8_inplace)
MSOPT_AOT_ENTRY(ms_optim_lion_q8_delta, msopt::lion_q8_delta)
