// Kernels of the C library for parameter servers (capi/capi.cpp): declarations.
//
// The loops live in kernels/ps_kernels_impl.h, compiled once per instruction
// set by kernels/isa_scalar.cpp / isa_avx2.cpp / isa_avx512.cpp into that ISA's
// namespace; the per-element math is core/rules.h.  ps_kernels() returns the table
// of the ISA that msopt::kernels() uses (kernels/dispatch.cpp chooses one entry that
// holds both), so MS_OPTIM_ISA and msopt_select_isa switch both together.  Every kernel works on one contiguous range on the
// calling thread; capi/capi.cpp splits work between OpenMP threads.
//
// No MindSpore or Python headers here.
#pragma once

#include <cstdint>

namespace msopt {

// Squared norms are summed in double over fixed blocks of kPsNormBlock
// elements, each block in 8 interleaved lanes (lane j takes the elements at
// offsets = j mod 8, in order), the lanes combined as
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then the blocks added in
// order.  The result depends on neither the ISA nor the number of threads;
// reference.ps_sumsq computes the same bits.
constexpr int64_t kPsNormBlock = 2048;

// One step's hyper-parameters in the parameter's element type.
template <class T>
struct PsHyper {
  T lr;        // this step's learning rate (schedule applied)
  T wd;        // weight decay (0 = none)
  T momentum;  // momentum
  T beta1, c1, beta2, c2, eps;  // c1 = 1 - beta1, c2 = 1 - beta2
  T lr_t;      // Adam: bias-corrected step size
  T inv_bc1, inv_sqrt_bc2;  // Lamb: 1 / (1 - beta1^t), 1 / sqrt(1 - beta2^t)
  bool nesterov;
};

template <class T>
struct PsOps {
  void (*sgd)(T *p, const T *g, int64_t n, const PsHyper<T> &h);
  void (*momentum)(T *p, T *v, const T *g, int64_t n, const PsHyper<T> &h);
  void (*adagrad)(T *p, T *a, const T *g, int64_t n, const PsHyper<T> &h);
  void (*adam)(T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h);
  // Lamb with trust ratio 1 (wd == 0): one pass.
  void (*lamb_plain)(T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h);
  // Lamb pass 1: updates m, v and writes the squared norms of p and of the
  // direction r for each kPsNormBlock block of [p, p + n) (p starts a block).
  void (*lamb_moments)(const T *p, T *m, T *v, const T *g, int64_t n, const PsHyper<T> &h,
                       double *p_sq, double *r_sq);
  // Lamb pass 2: recomputes r from the updated m, v and applies p -= lr_ratio * r.
  void (*lamb_apply)(T *p, const T *m, const T *v, int64_t n, const PsHyper<T> &h, T lr_ratio);
  // Applies the regularization step (rules::ps_prox) `steps` times with the
  // same constants; stops early once a pass leaves every element's bits
  // unchanged.  Returns true when every element ends +-0 or NaN: a fixed
  // point of every regularization step, whatever its constants.
  bool (*regularize)(T *p, int64_t n, T lam1, T c2, int64_t steps);
  void (*add)(T *p, const T *d, int64_t n);
};

struct PsTable {
  const char *isa;
  PsOps<float> f32;
  PsOps<double> f64;
  // Integer additions wrap around modulo 2^bits (computed in unsigned arithmetic).
  void (*add_i32)(int32_t *p, const int32_t *d, int64_t n);
  void (*add_u32)(uint32_t *p, const uint32_t *d, int64_t n);
  void (*add_i64)(int64_t *p, const int64_t *d, int64_t n);
  void (*add_u64)(uint64_t *p, const uint64_t *d, int64_t n);
};

namespace scalar { extern const PsTable kPsTable; }
namespace avx2 { extern const PsTable kPsTable; }
namespace avx512 { extern const PsTable kPsTable; }

// The table of the instruction set msopt::kernels() uses (kernels/dispatch.cpp).
const PsTable &ps_kernels();

}  // namespace msopt
