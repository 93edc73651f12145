// The native kernels of the MindSpore AOT ops, declared and tabled in one
// place: the per-call types, the table of one instruction set's kernels
// (KernelTable), and, compiled once per instruction set, that table's entries.
//
// The math lives in the kernels/ headers, compiled once per instruction set
// (kernels/isa_scalar.cpp, isa_avx2.cpp, isa_avx512.cpp, each with its -m flags)
// into its own namespace: such a unit defines MSOPT_ISA_NS (scalar, avx2 or
// avx512) and MSOPT_ISA_NAME before including this file, and the second half
// below includes the kernel headers and fills its table.  The plain loops of
// those headers are vectorized for that ISA by the compiler (`omp simd`, -O3
// -fno-math-errno) and the float16 conversions use F16C / AVX-512 instructions
// where available.  The dispatcher (kernels/dispatch.cpp) picks one table at run
// time from the CPU's features; the AOT adapters (aot/aot_*.cpp) call kernels
// only through it.
//
// Adding a kernel is its header (included below), its types and member here,
// and one line in MSOPT_KERNEL_ENTRIES.
//
// No MindSpore or Python headers here or in any kernel source.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/contract.h"
#include "core/kernels.h"

namespace msopt {

// Per-call hyper-parameters of one Adam step.  `lr_t` already carries the bias
// correction, lr * sqrt(1 - beta2^t) / (1 - beta1^t), as in MindSpore.
struct AdamArgs {
  float lr_t;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // added as wd * p to the (still loss-scaled) gradient
  float inv_scale;     // 1 / loss_scale, applied after the decay (MindSpore order)
  bool nesterov;
  bool decoupled;      // AdamW (nn.AdamWeightDecay): p -= lr_t * (direction + wd * p)
};

// One tensor of a multi-tensor Adam call.  `out` is the parameter (updated in
// place) or the delta buffer; `out` and `g` are float32 or float16 (half_bits)
// as the call says, m and v as its Moments say.  Each tensor has its own
// hyper-parameters (learning rate and weight decay come per parameter with groups).
struct AdamTensor {
  void *out;
  void *m;
  void *v;
  const void *g;
  int64_t n;
  AdamArgs a;
  float *m_scale = nullptr;  // kQ8: (n + kQ8Block - 1) / kQ8Block absmax scales
  float *v_scale = nullptr;
  uint32_t q8_key = 0;  // kQ8: rules::q8_tensor_key of the step and the parameter
};

// One tensor of a multi-tensor Lion call (rules::lion_direction, lion_apply).
// `out` is the parameter (updated in place) or the delta buffer, float32 or
// float16 as the call says; m is stored as the call's Moments say (kQ8: int8
// codes with m_scale, as Adam's m).
struct LionTensor {
  void *out;
  void *m;
  const void *g;
  int64_t n;
  float neg_lr;              // -lr
  float keep;                // rules::lion_keep(lr, wd); 1 without decay
  float *m_scale = nullptr;  // kQ8: (n + kQ8Block - 1) / kQ8Block absmax scales
  uint32_t q8_key = 0;       // kQ8: rules::q8_tensor_key of the step and the parameter
};

// Hyper-parameters of one Lamb step shared by the tensors of one call
// (PaddlePaddle's rule, docs/algorithms.md §2): the kernel's constants as
// declared (contract.h LambConsts: beta1, beta2, eps, clip_norm, the value clip
// clip_lo / clip_hi, -inf / +inf when not clipping, always_adapt), and what
// this step adds to them.
struct LambArgs {
  LambConsts k;
  float inv_bc1;       // 1 / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float grad_scale;    // multiplies the gradient: 1/loss_scale (times a global-norm clip factor)
};

// One tensor of a Lamb call: p, m, v updated in place, the trust ratio applied
// written to *ratio.
struct LambTensor {
  float *p;
  float *m;
  float *v;
  const float *g;
  int64_t n;
  float lr;
  float weight_decay;  // 0 for excluded parameters (then no trust ratio unless always_adapt)
  float *ratio;
};

// One tensor of DGC's dense momentum step (KernelTable::dgc_momentum): u, p
// updated in place.  p is float32, or float16 (`half`) updated in float32 and
// rounded once; u and g are float32.
struct DgcDenseTensor {
  void *p;
  bool half;
  float *u;
  const float *g;
  int64_t n;
  float lr;
};

// One instruction set's kernels.
struct KernelTable {
  const char *isa;
  // One Adam step on `count` tensors (one MindSpore op for many parameters):
  // all their elements, taken as one range, split once over the threads in
  // one parallel region.  delta: write the step to `out` (decay not applied:
  // the caller did it); otherwise update the parameter in place.  half:
  // `out` and `g` are float16.  Compact moments are decoded to float32 in
  // chunks, stepped, and encoded again in the same pass; with kQ8 the threads'
  // shares are whole blocks, so the bits do not depend on the thread count.
  void (*adam_multi)(const AdamTensor *tensors, int64_t count, bool delta, bool half,
                     Moments moments);
  // One Lamb step on `count` tensors (a multi-tensor kernel: one MindSpore op
  // for many parameters).  Per tensor with a trust ratio (weight decay or
  // always_adapt), two passes: pass one updates m, v in place, writes the
  // update direction r and sums p^2 and r^2 in double; pass two recomputes r
  // and applies p -= lr * ratio * r, ratio = ||p|| / ||r||
  // (rules::lamb_trust_ratio).  A tensor without one (ratio 1) takes one pass.
  // A tensor of lamb_team_min(...) elements or more is split over the threads
  // (they meet at barriers); every other one runs whole on one thread, several
  // threads at once, taken in the order given.
  void (*lamb_f32)(const LambTensor *tensors, int64_t count, const LambArgs &a);
  // Gathers the indices whose magnitude key reaches g->threshold_key.
  void (*gather_abs_f32)(const float *x, int64_t n, Gather *g);
  // sum(x^2) accumulated in double.
  double (*sumsq_f32)(const float *x, int64_t n);
  void (*f16_to_f32)(const half_bits *src, float *dst, int64_t n);
  void (*f32_to_f16)(const float *src, half_bits *dst, int64_t n);
  // DGC's dense momentum on `count` tensors (rules::dgc_dense_momentum, then
  // p -= lr * step), in one parallel region: tensors of kParallelMin elements
  // or more split over the threads, smaller ones whole, handed out dynamically.
  void (*dgc_momentum)(const DgcDenseTensor *tensors, int64_t count, float momentum,
                       bool nesterov);
  // DGC over [lo, hi), on the calling thread: u, v updated in place by the
  // momentum correction (rules.h), and the indices whose key of v_new reaches
  // g->threshold_key gathered into the slots of omp_get_thread_num() (a team may be running).
  void (*dgc_accumulate_range_f32)(float *u, float *v, const float *grad, int64_t lo,
                                   int64_t hi, float momentum, bool nesterov, Gather *g);
  // One Lion step on `count` tensors, every element taken as one range split
  // once over the threads (as adam_multi; kQ8 shares are whole blocks).
  // delta: write -lr * sign to `out` (the caller applies the decay); otherwise
  // update the parameter in place.  half: `out` and `g` are float16.
  // `a` is the kernel's constants as declared (contract.h LionConsts).
  void (*lion_multi)(const LionTensor *tensors, int64_t count, const LionConsts &a, bool delta,
                     bool half, Moments moments);
};

// Every member of KernelTable but isa, each set by name from the function of the
// same name in the instruction set's namespace.
#define MSOPT_KERNEL_ENTRIES(X)                                                        \
  X(adam_multi) X(lion_multi) X(lamb_f32) X(gather_abs_f32) X(sumsq_f32) X(f16_to_f32) \
  X(f32_to_f16) X(dgc_momentum) X(dgc_accumulate_range_f32)

// Every member is set by make_table below: the table is isa and one pointer per entry.
#define MSOPT_KERNEL_COUNT(name) +1
static_assert(sizeof(KernelTable) ==
                  (1 MSOPT_KERNEL_ENTRIES(MSOPT_KERNEL_COUNT)) * sizeof(void (*)()),
              "every KernelTable member must be listed in MSOPT_KERNEL_ENTRIES");
#undef MSOPT_KERNEL_COUNT

namespace scalar { extern const KernelTable kTable; }
namespace avx2 { extern const KernelTable kTable; }
namespace avx512 { extern const KernelTable kTable; }

// The table chosen for this process (best supported ISA, or MS_OPTIM_ISA).
const KernelTable &kernels();

// The size from which KernelTable::lamb_f32 splits a tensor over the threads:
// kParallelMin, or 1/nthreads of the call's elements if larger (a smaller
// tensor is balanced by the others).
int64_t lamb_team_min(int64_t total, int nthreads);

}  // namespace msopt

// ------------------------------------------------ one instruction set's table --
#ifdef MSOPT_ISA_NS
#ifndef MSOPT_ISA_NAME
#error "define MSOPT_ISA_NAME with MSOPT_ISA_NS before including kernels/table.h"
#endif

// in the order of the concerns
#include "kernels/threading.h"
#include "kernels/half.h"
#include "kernels/adam.h"
#include "kernels/lamb.h"
#include "kernels/lion.h"
#include "kernels/dgc.h"

namespace msopt {
namespace MSOPT_ISA_NS {

constexpr KernelTable make_table() {
  KernelTable t{};
  t.isa = MSOPT_ISA_NAME;
#define MSOPT_KERNEL_SET(name) t.name = name;
  MSOPT_KERNEL_ENTRIES(MSOPT_KERNEL_SET)
#undef MSOPT_KERNEL_SET
  return t;
}

extern const KernelTable kTable;
const KernelTable kTable = make_table();

}  // namespace MSOPT_ISA_NS
}  // namespace msopt
#endif  // MSOPT_ISA_NS
