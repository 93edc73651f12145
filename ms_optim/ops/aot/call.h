// One AOT kernel call, its tensors resolved from the kernel's declaration
// (core/contract.h, bound by aot/signatures.h), and the checks every adapter writes its conditions with.
//
//   MSOPT_AOT_ENTRY(ms_optim_lamb, lamb_body)
// exports ms_optim_lamb with MindSpore's AOT ABI
//   int F(int nparam, void **params, int *ndims, int64_t **shapes,
//         const char **dtypes, void *stream, void *extra)
// (params: the inputs, then the outputs; stream: the cudaStream_t of a GPU
// kernel, c.a.stream in the body, null on CPU; the CUDA library's entries,
// ops/cuda/, are exported by the same macro).  The entry binds the call (the
// tensor count against the declaration: kErrArgs naming the expected form), runs
// lamb_body(const AotCall &c), turns an escaping exception into kErrNoMem or
// kErrInternal, and on any failure records the message for
// msopt_last_kernel_error() and writes it to stderr: MindSpore reports only
// the code.
//
// In a body, MSOPT_CHECK(c, condition, code, format, ...) returns `code` with
// the message "<entry>: <format>" when the condition is false, and
// MSOPT_TRY(c.require_...(...)) returns a failed check's code.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "aot/signatures.h"
#include "core/common.h"

namespace msopt {

class AotCall {
 public:
  static constexpr int kMaxSlots = 16;

  AotCall(const char *entry, const Slot *spec, int slots, const AotArgs &args)
      : entry(entry), a(args), spec_(spec), slots_(slots) {}

  // Resolves K and each slot's first tensor from the tensor count; kErrArgs
  // when the count fits no K >= 1 (or, with a kRest group, no group size >= 1),
  // kErrSize when a kCountK tensor does not hold K elements.
  int bind();

  int K() const { return k_; }
  // The position in the flat tensor array of tensor i of `slot`.
  int index(int slot, int i = 0) const { return first_[slot] + i; }
  // The number of tensors of `slot` (1, K, or the kRest group's size).
  int count(int slot) const { return count_[slot]; }

  int64_t numel(int slot, int i = 0) const { return a.numel(index(slot, i)); }
  bool is(int slot, const char *dtype, int i = 0) const { return a.is(index(slot, i), dtype); }
  const char *dtype(int slot, int i = 0) const { return a.dtypes[index(slot, i)]; }
  template <class T>
  T *ptr(int slot, int i = 0) const {
    return a.ptr<T>(index(slot, i));
  }

  // Every tensor of `slot` is of element type `dtype`: kErrDtype naming it.
  int require_dtype(int slot, const char *dtype) const;
  // The single tensor of `slot` is float32 with `n1` or `n2` elements: kErrDtype
  // or kErrSize naming it and both sizes.
  int require_f32(int slot, int64_t n1, int64_t n2 = -1) const;
  // Tensor i of every slot in `slots` has as many elements as tensor i of `ref`.
  int require_same_numel(int ref, std::initializer_list<int> slots) const;
  // The name of tensor i of `slot` for messages: "grad3" (kEach), "lr" (kOne).
  const char *name(int slot, int i = 0) const;

  // Records "<entry>: <message>" and returns `code`.
  int fail(Status code, const char *fmt, ...) const __attribute__((format(printf, 3, 4)));

  const char *entry;
  AotArgs a;

 private:
  const Slot *spec_;
  int slots_;
  int k_ = 0;
  int first_[kMaxSlots] = {};
  int count_[kMaxSlots] = {};
  mutable char name_[64] = "";
};

using AotBody = int (*)(const AotCall &);

// Bytes per element of a dtype string MindSpore passes, 0 if unknown.
int64_t element_bytes(const char *dtype);

// Binds, runs `body`, contains exceptions and reports failures (see above).
int run_aot(const char *entry, const Slot *spec, int slots, const AotArgs &args, AotBody body);

}  // namespace msopt

#define MSOPT_CHECK(call, cond, code, ...) \
  do {                                     \
    if (!(cond)) return (call).fail((code), __VA_ARGS__); \
  } while (0)

// Returns the status of `expr` when it is not kOk (a check already failed).
#define MSOPT_TRY(expr)                \
  do {                                 \
    if (const int rc_ = (expr)) return rc_; \
  } while (0)

#define MSOPT_AOT_ENTRY(entry, body)                                                          \
  static_assert(::msopt::sig::entry::kSlots <= ::msopt::AotCall::kMaxSlots, #entry);          \
  MSOPT_API int entry(int nparam, void **params, int *ndims, int64_t **shapes,                \
                      const char **dtypes, void *stream, void *) {                            \
    return ::msopt::run_aot(::msopt::sig::entry::kEntry, ::msopt::sig::entry::kSpec,          \
                            ::msopt::sig::entry::kSlots,                                      \
                            ::msopt::AotArgs{nparam, params, ndims, shapes, dtypes, stream},  \
                            (body));                                                          \
  }
