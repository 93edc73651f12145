// Helpers shared by the native entry points (AOT adapters and the C ABI):
// per-thread error messages and a checked view of the AOT argument arrays.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>

#include "include/ms_optim.h"

namespace msopt {

// The one vocabulary of error codes of every native entry point: the C
// library (include/ms_optim.h documents them), the MindSpore AOT adapters
// (MindSpore reports a non-zero code in its RuntimeError) and top-k
// selection.  The message is always msopt_last_error()'s.
enum Status : int {
  kOk = MSOPT_OK,
  kErrNull = MSOPT_ERR_NULL,          // a required pointer is NULL
  kErrHandle = MSOPT_ERR_HANDLE,      // not a live handle
  kErrSize = MSOPT_ERR_SIZE,          // a count, length or shape is wrong
  kErrDtype = MSOPT_ERR_DTYPE,        // an element type is unknown, mismatched or unsupported
  kErrConfig = MSOPT_ERR_CONFIG,      // an unknown name or a bad config
  kErrRow = MSOPT_ERR_ROW,            // a row id is out of range
  kErrState = MSOPT_ERR_STATE,        // a bad state blob
  kErrNoMem = MSOPT_ERR_NOMEM,        // out of memory
  kErrInternal = MSOPT_ERR_INTERNAL,  // a bug
  kErrArgs = MSOPT_ERR_ARGS,          // an AOT kernel got the wrong number of tensors
  kErrValue = MSOPT_ERR_VALUE,        // a value read from a tensor is out of range
  kErrReplica = MSOPT_ERR_REPLICA,    // workers disagree on the model, step or state, or the
                                      // state cannot be resumed
  kErrStale = MSOPT_ERR_STALE,        // a step compiled for another step than global_step's
};

// The longest error message kept, in bytes with its NUL (a refusal names
// parameters, which may be long).
constexpr int kErrorBytes = 1024;

// Records a printf-style message for msopt_last_error() on this thread and
// returns `code`, so callers can write `return fail(kErrSize, "...", ...)`.
int fail(Status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The argument arrays MindSpore passes to an AOT kernel: inputs, then outputs,
// and the stream its GPU kernels run on (a cudaStream_t; null on CPU).
struct AotArgs {
  int nparam;
  void **params;
  int *ndims;
  int64_t **shapes;
  const char **dtypes;
  void *stream;

  int64_t numel(int i) const {
    int64_t n = 1;
    for (int d = 0; d < ndims[i]; ++d) n *= shapes[i][d];
    return n;
  }
  bool is(int i, const char *dtype) const { return std::strcmp(dtypes[i], dtype) == 0; }
  template <class T>
  T *ptr(int i) const {
    return static_cast<T *>(params[i]);
  }
};

// Held by an AOT kernel while it runs multi-threaded.  MindSpore launches
// independent kernels (one per parameter) from several threads at once; each
// of ours already uses every core through OpenMP, so running two at a time
// only oversubscribes the cores (measured: Lamb 25% slower).  Kernels on
// inputs too small to go parallel do not take it.
class ParallelSection {
 public:
  explicit ParallelSection(int64_t n);
  ~ParallelSection();
  ParallelSection(const ParallelSection &) = delete;
  ParallelSection &operator=(const ParallelSection &) = delete;
  // True when this section holds the lock (n >= kParallelMin).
  bool held() const { return held_; }

 private:
  bool held_;
};

}  // namespace msopt

// Symbols the library exports (everything else is hidden).
#define MSOPT_API extern "C" __attribute__((visibility("default")))

MSOPT_API const char *msopt_last_error(void);
MSOPT_API const char *msopt_isa(void);
MSOPT_API int msopt_select_isa(const char *name);
