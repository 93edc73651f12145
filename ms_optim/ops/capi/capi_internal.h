// Internal declarations of the C library for parameter servers (the functions
// of include/ms_optim.h), shared by its five sources:
//   capi_config.cpp    the config string: keys, defaults, ranges
//   capi_state.cpp     the state blob: header layout, CRC, serialize/deserialize
//   capi_registry.cpp  optimizers behind opaque handles
//   capi_update.cpp    the update engine (dense, rows, diffs, lazy regularization)
//   capi.cpp           the exported functions and the checks of their arguments
// No MindSpore or Python headers here.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <new>

#include "core/common.h"
#include "include/ms_optim.h"

namespace msopt {
namespace capi {

// ------------------------------------------------------------------- types --

enum Algo : uint32_t { kSgd = 0, kMomentum = 1, kAdagrad = 2, kAdam = 3, kLamb = 4, kNumAlgos = 5 };
inline constexpr const char *kAlgoNames[kNumAlgos] = {"sgd", "momentum", "adagrad", "adam",
                                                       "lamb"};

constexpr int kNumDtypes = 6;
inline constexpr const char *kDtypeNames[kNumDtypes] = {"int32",  "uint32",  "int64",
                                                         "uint64", "float32", "float64"};
inline constexpr int64_t kDtypeBytes[kNumDtypes] = {4, 4, 8, 8, 4, 8};

inline bool valid_dtype(int d) { return d >= 0 && d < kNumDtypes; }
inline bool is_float(int d) { return d == MSOPT_FLOAT32 || d == MSOPT_FLOAT64; }

// Buffers the optimizer keeps besides the parameter (numel elements each).
inline int num_slots(Algo a, int dtype) {
  if (!is_float(dtype)) return 0;
  switch (a) {
    case kMomentum:
    case kAdagrad:
      return 1;
    case kAdam:
    case kLamb:
      return 2;
    default:
      return 0;
  }
}

// ------------------------------------------------------------------ config --

enum Key : unsigned {
  kLr, kMomentumKey, kNesterov, kBeta1, kBeta2, kEps, kWeightDecay, kL1, kL2, kLrPolicy,
  kLrDecayA, kLrDecayB, kNumKeys
};
inline constexpr const char *kKeyNames[kNumKeys] = {
    "lr", "momentum", "nesterov", "beta1", "beta2", "eps", "weight_decay", "l1", "l2",
    "lr_policy", "lr_decay_a", "lr_decay_b"};
constexpr unsigned bit(Key k) { return 1u << k; }
constexpr unsigned kCommonKeys =
    bit(kLr) | bit(kWeightDecay) | bit(kL1) | bit(kL2) | bit(kLrPolicy) | bit(kLrDecayA) |
    bit(kLrDecayB);
inline constexpr unsigned kAlgoKeys[kNumAlgos] = {
    kCommonKeys,
    kCommonKeys | bit(kMomentumKey) | bit(kNesterov),
    kCommonKeys | bit(kEps),
    kCommonKeys | bit(kBeta1) | bit(kBeta2) | bit(kEps) | bit(kNesterov),
    kCommonKeys | bit(kBeta1) | bit(kBeta2) | bit(kEps),
};
inline constexpr double kDefaultEps[kNumAlgos] = {0.0, 0.0, 1e-6, 1e-8, 1e-6};

struct Hyper {
  double lr = 0.0, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 0.0, weight_decay = 0.0;
  double l1 = 0.0, l2 = 0.0, lr_decay_a = 0.0, lr_decay_b = 0.0;
  bool nesterov = false, linear = false;
};

// The defaults of optimizer `a` (what msopt_get_state records for keys it does not use).
inline Hyper default_hyper(Algo a) {
  Hyper h;
  h.eps = kDefaultEps[a];
  return h;
}

// The numeric keys: their field, in the order of the state blob, and their range.
struct Field {
  Key key;
  double Hyper::*field;
  double lo, hi;
  bool lo_open, hi_open;
};
constexpr int kNumFields = 10;
inline constexpr Field kFields[kNumFields] = {
    {kLr, &Hyper::lr, 0, HUGE_VAL, false, true},
    {kMomentumKey, &Hyper::momentum, 0, 1, false, false},
    {kBeta1, &Hyper::beta1, 0, 1, false, true},
    {kBeta2, &Hyper::beta2, 0, 1, false, true},
    {kEps, &Hyper::eps, 0, HUGE_VAL, true, true},
    {kWeightDecay, &Hyper::weight_decay, 0, HUGE_VAL, false, true},
    {kL1, &Hyper::l1, 0, HUGE_VAL, false, true},
    {kL2, &Hyper::l2, 0, HUGE_VAL, false, true},
    {kLrDecayA, &Hyper::lr_decay_a, 0, HUGE_VAL, false, true},
    {kLrDecayB, &Hyper::lr_decay_b, 0, HUGE_VAL, false, true},
};

// Range checks shared by msopt_create and msopt_restore (capi_config.cpp).
int check_hyper(const char *fn, Algo a, int dtype, const Hyper &h);

// Parses a config string for optimizer `a` into *out (capi_config.cpp).
int parse_config(const char *fn, Algo a, int dtype, const char *config, Hyper *out);

// --------------------------------------------------------------- optimizer --

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

struct Optimizer {
  std::mutex mu;
  Algo algo = kSgd;
  int dtype = MSOPT_FLOAT32;
  int64_t numel = 0, row_width = 0;
  int64_t nrows = 1, width = 0;  // rows of the parameter (1 for a flat one) and their width
  Hyper h;
  bool reg = false;  // l1 or l2 active
  int64_t step = 0;
  double beta1_power = 1.0, beta2_power = 1.0;  // beta^step, exact values of the element type
  int nslots = 0;
  Buffer param, slot[2];
  std::unique_ptr<int64_t, FreeDeleter> reg_step;  // nrows entries

  int64_t bytes() const { return numel * kDtypeBytes[dtype]; }
  template <class T>
  T *p() const {
    return reinterpret_cast<T *>(param.get());
  }
  template <class T>
  T *s(int i) const {
    return reinterpret_cast<T *>(slot[i].get());
  }
};

// ------------------------------------------------------------- registry --
// (capi_registry.cpp)

// A new optimizer at step 0 with zeroed buffers (arguments already
// validated); null when out of memory.
std::shared_ptr<Optimizer> make_optimizer(Algo algo, int dtype, int64_t numel, int64_t row_width,
                                          const Hyper &h);

// A new handle for `o`.
msopt_optimizer *register_handle(std::shared_ptr<Optimizer> o);

// The optimizer of handle `h`, or fails (null pointer, released, never created).
int lookup(const char *fn, msopt_optimizer *h, std::shared_ptr<Optimizer> *out);

// Forgets handle `h`; the optimizer is freed once no call uses it any more.
int release_handle(const char *fn, msopt_optimizer *h);

// Runs `body`, turning any exception into an error code: nothing escapes the C ABI.
template <class F>
int guarded(const char *fn, F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(kErrNoMem, "%s: out of memory", fn);
  } catch (const std::exception &e) {
    return fail(kErrInternal, "%s: internal error: %s", fn, e.what());
  } catch (...) {
    return fail(kErrInternal, "%s: internal error", fn);
  }
}

// guarded() for a call on handle `h`: looks it up and runs body(optimizer)
// holding the optimizer's mutex (the shared_ptr keeps it alive if another
// thread releases the handle meanwhile).
template <class F>
int with_handle(const char *fn, msopt_optimizer *h, F &&body) {
  return guarded(fn, [&]() -> int {
    std::shared_ptr<Optimizer> o;
    if (int rc = lookup(fn, h, &o)) return rc;
    std::lock_guard<std::mutex> lock(o->mu);
    return body(*o);
  });
}

// ---------------------------------------------------------------- state --
// (capi_state.cpp)

// The optimizer's state blob, allocated with malloc (msopt_get_state).
int serialize(const Optimizer &o, void **state, int64_t *state_len);

// A new optimizer from a state blob, every field checked (msopt_restore).
int deserialize(const unsigned char *b, int64_t len, std::shared_ptr<Optimizer> *out);

// ---------------------------------------------------------------- updates --
// (capi_update.cpp)  The arguments are checked by the caller, which holds the
// optimizer's mutex.

// One step with a dense gradient: o.numel elements of o's float dtype.
int dense_update(Optimizer &o, const void *grad);

// One step on the rows given: nrows ids in [0, o.nrows) (repeats summed), their
// values row after row in o's float dtype.
int rows_update(Optimizer &o, const int64_t *rows, int64_t nrows, const void *values);

// Adds a model difference of o.numel elements of o's dtype (integers wrap around).
void add_diff(Optimizer &o, const void *diff);

// Brings every row's regularization up to the current step (before a read, a
// save or a diff).
void catch_up_all(Optimizer &o);

}  // namespace capi
}  // namespace msopt
