// MindSpore AOT adapter of a step's clock (ms_optim_step_clock), with which
// DGCMomentum's sparsity="auto" measures its own steps inside a compiled train
// step: one reading per step, at the same point of the step's graph, and the
// interval since the previous reading recorded as a sample of the step that
// ended.  The tensors it takes are declared in core/contract.h.
//
// clock float64[1 + S] (a Parameter, updated in place): clock[0] the last
// reading in seconds of the monotonic clock (<= 0: none), clock[1 + s] the
// least interval recorded in slot s (0: none).  slot int32[1]: the slot the
// interval since the last reading goes to, or -1.  after: any tensor, not read
// (the reading is ordered after it).  best float32[S]: clock[1..S] after the
// update.  An interval is recorded only when it is positive and below kMaxStepS
// seconds: a reading restored from a checkpoint comes from another process's
// clock and says nothing of this one's steps.
#include <chrono>
#include <cstdint>

#include "aot/call.h"
#include "core/common.h"

namespace msopt {
namespace {

constexpr double kMaxStepS = 3600.0;

int step_clock_body(const AotCall &c) {
  using S = sig::ms_optim_step_clock;
  MSOPT_TRY(c.require_dtype(S::clock, "float64"));
  MSOPT_TRY(c.require_dtype(S::slot, "int32"));
  MSOPT_TRY(c.require_dtype(S::best, "float32"));
  const int64_t slots = c.numel(S::best);
  MSOPT_CHECK(c, slots >= 1 && c.numel(S::clock) == slots + 1, kErrSize,
              "clock must be float64[1 + S] for best float32[S], got %lld and %lld elements",
              static_cast<long long>(c.numel(S::clock)), static_cast<long long>(slots));
  MSOPT_CHECK(c, c.numel(S::slot) == 1, kErrSize, "slot must be int32[1], got %lld elements",
              static_cast<long long>(c.numel(S::slot)));
  const int32_t slot = *c.ptr<int32_t>(S::slot);
  MSOPT_CHECK(c, slot >= -1 && slot < slots, kErrValue, "slot is %d, not -1 or in [0, %lld)",
              slot, static_cast<long long>(slots));
  double *clock = c.ptr<double>(S::clock);
  const double now = std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch()).count();
  const double interval = now - clock[0];
  if (slot >= 0 && clock[0] > 0.0 && interval > 0.0 && interval < kMaxStepS) {
    double &least = clock[1 + slot];
    if (least <= 0.0 || interval < least) least = interval;
  }
  clock[0] = now;
  float *best = c.ptr<float>(S::best);
  for (int64_t s = 0; s < slots; ++s) best[s] = static_cast<float>(clock[1 + s]);
  return kOk;
}

}  // namespace
}  // namespace msopt

MSOPT_AOT_ENTRY(ms_optim_step_clock, msopt::step_clock_body)
