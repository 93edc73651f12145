// The AOT kernel table of one instruction set (core/kernels.h's KernelTable),
// its kernels written once and compiled once per instruction set.
//
// Include this file from exactly one translation unit per ISA (kernels/isa_*.cpp)
// after defining MSOPT_ISA_NS (scalar, avx2 or avx512) and MSOPT_ISA_NAME; that
// unit is compiled with the matching -m flags, so the plain loops of the
// kernels/ headers are vectorized for that ISA by the compiler (`omp simd`, -O3
// -fno-math-errno) and the float16 conversions use F16C / AVX-512 instructions
// where available.  Threads come from OpenMP (core/multi_tensor.h,
// kernels/threading.h).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/table_impl.h"
#endif
#ifndef MSOPT_ISA_NAME
#error "define MSOPT_ISA_NAME before including kernels/table_impl.h"
#endif

// in the order of the concerns (and of the original single file)
#include "core/kernels.h"
#include "kernels/threading.h"
#include "kernels/half.h"
#include "kernels/adam.h"
#include "kernels/lamb.h"
#include "kernels/lion.h"
#include "kernels/dgc.h"

namespace msopt {
namespace MSOPT_ISA_NS {

// Each entry set by name: the table's member order is written only in core/kernels.h.
constexpr KernelTable make_table() {
  KernelTable t{};
  t.isa = MSOPT_ISA_NAME;
  t.adam_multi = adam_multi;
  t.lion_multi = lion_multi;
  t.lamb_f32 = lamb_f32;
  t.gather_abs_f32 = gather_abs_f32;
  t.sumsq_f32 = sumsq_f32;
  t.f16_to_f32 = f16_to_f32;
  t.f32_to_f16 = f32_to_f16;
  t.dgc_momentum = dgc_momentum;
  t.dgc_accumulate_range_f32 = dgc_accumulate_range_f32;
  return t;
}

extern const KernelTable kTable;
const KernelTable kTable = make_table();

}  // namespace MSOPT_ISA_NS
}  // namespace msopt
