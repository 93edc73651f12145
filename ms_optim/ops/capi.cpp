// The C library for parameter servers: the functions of include/ms_optim.h.
//
// A handle owns a copy of the parameter, the optimizer's buffers and a step
// counter; every call validates all of its arguments before changing anything,
// runs the per-ISA kernels of ps_kernels_impl.h (math in rules.h) on OpenMP
// threads for large inputs, and never lets an exception or an abort escape.
//
// Handles are opaque tokens looked up in a registry (a stale or made-up handle
// is an error, not a crash); each optimizer has its own mutex, so calls on one
// handle are serialized and calls on different handles run in parallel.
//
// Regularization (l1/l2) is lazy per row: reg_step[r] is the last step whose
// regularization row r has received.  A row is brought up to date (the missed
// steps replayed, each with its own learning rate) before it is updated, and
// every row before a dense update, a read, a state save or a diff.  Replaying
// the same per-step operation gives the same bits as applying it eagerly.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "include/ms_optim.h"
#include "kernels.h"
#include "ps_kernels.h"
#include "rules.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the state format is little-endian");

namespace msopt {

const PsTable &ps_kernels() {
  const KernelTable *k = &kernels();
  if (k == &avx512::kTable) return avx512::kPsTable;
  if (k == &avx2::kTable) return avx2::kPsTable;
  return scalar::kPsTable;
}

namespace {

// ------------------------------------------------------------------- types --

enum Algo : uint32_t { kSgd = 0, kMomentum = 1, kAdagrad = 2, kAdam = 3, kLamb = 4, kNumAlgos = 5 };
const char *const kAlgoNames[kNumAlgos] = {"sgd", "momentum", "adagrad", "adam", "lamb"};

constexpr int kNumDtypes = 6;
const char *const kDtypeNames[kNumDtypes] = {"int32", "uint32", "int64", "uint64", "float32",
                                             "float64"};
constexpr int64_t kDtypeBytes[kNumDtypes] = {4, 4, 8, 8, 4, 8};

bool valid_dtype(int d) { return d >= 0 && d < kNumDtypes; }
bool is_float(int d) { return d == MSOPT_FLOAT32 || d == MSOPT_FLOAT64; }

// Buffers the optimizer keeps besides the parameter (numel elements each).
int num_slots(Algo a, int dtype) {
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
const char *const kKeyNames[kNumKeys] = {"lr",    "momentum", "nesterov",     "beta1",
                                         "beta2", "eps",      "weight_decay", "l1",
                                         "l2",    "lr_policy", "lr_decay_a",  "lr_decay_b"};
constexpr unsigned bit(Key k) { return 1u << k; }
constexpr unsigned kCommonKeys =
    bit(kLr) | bit(kWeightDecay) | bit(kL1) | bit(kL2) | bit(kLrPolicy) | bit(kLrDecayA) |
    bit(kLrDecayB);
constexpr unsigned kAlgoKeys[kNumAlgos] = {
    kCommonKeys,
    kCommonKeys | bit(kMomentumKey) | bit(kNesterov),
    kCommonKeys | bit(kEps),
    kCommonKeys | bit(kBeta1) | bit(kBeta2) | bit(kEps) | bit(kNesterov),
    kCommonKeys | bit(kBeta1) | bit(kBeta2) | bit(kEps),
};
constexpr double kDefaultEps[kNumAlgos] = {0.0, 0.0, 1e-6, 1e-8, 1e-6};

struct Hyper {
  double lr = 0.0, momentum = 0.9, beta1 = 0.9, beta2 = 0.999, eps = 0.0, weight_decay = 0.0;
  double l1 = 0.0, l2 = 0.0, lr_decay_a = 0.0, lr_decay_b = 0.0;
  bool nesterov = false, linear = false;
};

// The defaults of optimizer `a` (what msopt_get_state records for keys it does not use).
Hyper default_hyper(Algo a) {
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
const Field kFields[kNumFields] = {
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

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Range checks shared by msopt_create and msopt_restore, for the keys of
// optimizer `a`.  Values are cast to the parameter's type before use, so for
// float32 each must fit in float32 and the range is checked on the float32
// value (beta1 = 0.99999999999 is 1 in float32, eps = 1e-50 is 0: both would
// give NaN weights).
int check_hyper(const char *fn, Algo a, int dtype, const Hyper &h) {
  for (const Field &f : kFields) {
    if (!(kAlgoKeys[a] & bit(f.key))) continue;
    const char *name = kKeyNames[f.key];
    const double given = h.*f.field;
    double v = given;
    if (dtype == MSOPT_FLOAT32 && std::isfinite(v)) {
      if (!(std::fabs(v) <= static_cast<double>(FLT_MAX)))
        return fail(MSOPT_ERR_CONFIG, "%s: %s = %.17g does not fit in float32, the parameter's type",
                    fn, name, v);
      v = static_cast<double>(static_cast<float>(v));
    }
    const auto in_range = [&f](double x) {
      return std::isfinite(x) && (f.lo_open ? x > f.lo : x >= f.lo) &&
             (f.hi_open ? x < f.hi : x <= f.hi);
    };
    if (in_range(v)) continue;
    const char lb = f.lo_open ? '(' : '[', rb = f.hi_open ? ')' : ']';
    if (in_range(given))  // only its float32 rounding is out of range
      return fail(MSOPT_ERR_CONFIG, "%s: %s = %.17g is %.9g in float32 (the parameter's type), "
                  "out of range %c%g, %g%c for %s", fn, name, given, v, lb, f.lo, f.hi, rb,
                  kAlgoNames[a]);
    return fail(MSOPT_ERR_CONFIG, "%s: %s = %.17g is out of range %c%g, %g%c for %s", fn, name,
                given, lb, f.lo, f.hi, rb, kAlgoNames[a]);
  }
  if (!h.linear && (h.lr_decay_a != 0.0 || h.lr_decay_b != 0.0))
    return fail(MSOPT_ERR_CONFIG, "%s: lr_decay_a/lr_decay_b need lr_policy=linear", fn);
  if (h.nesterov && !(kAlgoKeys[a] & bit(kNesterov)))
    return fail(MSOPT_ERR_CONFIG, "%s: nesterov does not apply to %s", fn, kAlgoNames[a]);
  return MSOPT_OK;
}

int parse_double(const char *fn, const char *key, const std::string &text, double *out) {
  double v = 0.0;
  const char *b = text.data(), *e = text.data() + text.size();
  const auto res = std::from_chars(b, e, v);
  if (text.empty() || res.ec != std::errc() || res.ptr != e || !std::isfinite(v))
    return fail(MSOPT_ERR_CONFIG, "%s: config %s='%s' is not a finite number", fn, key,
                text.c_str());
  *out = v;
  return MSOPT_OK;
}

// One key=value entry into *h (the key already checked to apply to the optimizer).
int parse_value(const char *fn, Key key, const std::string &val, Hyper *h) {
  const char *name = kKeyNames[key];
  for (const Field &f : kFields)
    if (f.key == key) return parse_double(fn, name, val, &(h->*f.field));
  const bool nesterov = key == kNesterov;
  if (nesterov && (val == "true" || val == "1")) {
    h->nesterov = true;
  } else if (nesterov && (val == "false" || val == "0")) {
    h->nesterov = false;
  } else if (nesterov) {
    return fail(MSOPT_ERR_CONFIG, "%s: config nesterov='%s' must be true, false, 1 or 0", fn,
                val.c_str());
  } else if (val == "const" || val == "linear") {  // kLrPolicy, the only other key
    h->linear = val == "linear";
  } else {
    return fail(MSOPT_ERR_CONFIG, "%s: config lr_policy='%s' must be const or linear", fn,
                val.c_str());
  }
  return MSOPT_OK;
}

int parse_config(const char *fn, Algo a, int dtype, const char *config, Hyper *out) {
  Hyper h = default_hyper(a);
  unsigned seen = 0;
  const std::string cfg(config);
  if (!trim(cfg).empty()) {
    size_t pos = 0;
    while (true) {
      const size_t comma = cfg.find(',', pos);
      const std::string entry = cfg.substr(pos, comma == std::string::npos ? std::string::npos
                                                                            : comma - pos);
      const size_t eq = entry.find('=');
      if (trim(entry).empty())
        return fail(MSOPT_ERR_CONFIG, "%s: config has an empty entry at offset %zu", fn, pos);
      if (eq == std::string::npos)
        return fail(MSOPT_ERR_CONFIG, "%s: config entry '%s' is not key=value", fn,
                    trim(entry).c_str());
      const std::string key = trim(entry.substr(0, eq)), val = trim(entry.substr(eq + 1));
      int k = 0;
      while (k < static_cast<int>(kNumKeys) && key != kKeyNames[k]) ++k;
      if (k == static_cast<int>(kNumKeys))
        return fail(MSOPT_ERR_CONFIG,
                    "%s: unknown config key '%s' (keys: lr, momentum, nesterov, beta1, beta2, eps, "
                    "weight_decay, l1, l2, lr_policy, lr_decay_a, lr_decay_b)",
                    fn, key.c_str());
      const Key kk = static_cast<Key>(k);
      if (!(kAlgoKeys[a] & bit(kk)))
        return fail(MSOPT_ERR_CONFIG, "%s: config key '%s' does not apply to %s", fn,
                    key.c_str(), kAlgoNames[a]);
      if (seen & bit(kk))
        return fail(MSOPT_ERR_CONFIG, "%s: config key '%s' is given twice", fn, key.c_str());
      seen |= bit(kk);
      if (int rc = parse_value(fn, kk, val, &h)) return rc;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (is_float(dtype) && !(seen & bit(kLr)))
    return fail(MSOPT_ERR_CONFIG, "%s: config must set lr (e.g. \"lr=0.01\")", fn);
  if (int rc = check_hyper(fn, a, dtype, h)) return rc;
  *out = h;
  return MSOPT_OK;
}

// --------------------------------------------------------------- optimizer --

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer zeroed(int64_t bytes) {
  return Buffer(static_cast<unsigned char *>(std::calloc(static_cast<size_t>(bytes), 1)));
}

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

// A new optimizer at step 0 with zeroed buffers (arguments already
// validated); null when out of memory.
std::shared_ptr<Optimizer> make_optimizer(Algo algo, int dtype, int64_t numel, int64_t row_width,
                                          const Hyper &h) {
  auto o = std::make_shared<Optimizer>();
  o->algo = algo;
  o->dtype = dtype;
  o->numel = numel;
  o->row_width = row_width;
  o->nrows = row_width > 0 ? numel / row_width : 1;
  o->width = row_width > 0 ? row_width : numel;
  o->h = h;
  o->reg = is_float(dtype) && (h.l1 > 0.0 || h.l2 > 0.0);
  o->nslots = num_slots(algo, dtype);
  o->param = zeroed(o->bytes());
  if (!o->param) return nullptr;
  for (int i = 0; i < o->nslots; ++i) {
    o->slot[i] = zeroed(o->bytes());
    if (!o->slot[i]) return nullptr;
  }
  o->reg_step.reset(static_cast<int64_t *>(std::calloc(static_cast<size_t>(o->nrows), 8)));
  if (!o->reg_step) return nullptr;
  return o;
}

// ---------------------------------------------------------------- registry --

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<uintptr_t, std::shared_ptr<Optimizer>> live;
  uintptr_t next = 1;
};

Registry &registry() {
  static Registry *r = new Registry;  // never destroyed: safe to use during exit
  return *r;
}

msopt_optimizer *register_handle(std::shared_ptr<Optimizer> o) {
  Registry &r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  const uintptr_t token = r.next++ << 4;
  r.live.emplace(token, std::move(o));
  return reinterpret_cast<msopt_optimizer *>(token);
}

// The optimizer of handle `h`, or fails (null pointer, released, never created).
int lookup(const char *fn, msopt_optimizer *h, std::shared_ptr<Optimizer> *out) {
  if (h == nullptr) return fail(MSOPT_ERR_NULL, "%s: o is NULL", fn);
  Registry &r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  const auto it = r.live.find(reinterpret_cast<uintptr_t>(h));
  if (it == r.live.end())
    return fail(MSOPT_ERR_HANDLE, "%s: o (%p) is not a live optimizer handle (released or never "
                "created)", fn, static_cast<void *>(h));
  *out = it->second;
  return MSOPT_OK;
}

// Runs `body`, turning any exception into an error code: nothing escapes the C ABI.
template <class F>
int guarded(const char *fn, F &&body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(MSOPT_ERR_NOMEM, "%s: out of memory", fn);
  } catch (const std::exception &e) {
    return fail(MSOPT_ERR_INTERNAL, "%s: internal error: %s", fn, e.what());
  } catch (...) {
    return fail(MSOPT_ERR_INTERNAL, "%s: internal error", fn);
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

// ------------------------------------------------------------------ kernels --

template <class T>
const PsOps<T> &ops();
template <>
const PsOps<float> &ops<float>() {
  return ps_kernels().f32;
}
template <>
const PsOps<double> &ops<double>() {
  return ps_kernels().f64;
}

// Splits [0, n) into one range per OpenMP thread, each starting on a
// kPsNormBlock boundary, and runs body(lo, hi) on each.
template <class Body>
void for_blocks(int64_t n, const Body &body) {
  if (n < kParallelMin || omp_get_max_threads() < 2) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t nb = (n + kPsNormBlock - 1) / kPsNormBlock;
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t per = (nb + nt - 1) / nt * kPsNormBlock;
    const int64_t lo = std::min(n, t * per), hi = std::min(n, lo + per);
    if (lo < hi) body(lo, hi);
  }
}

// Learning rate of step k (1-based).
double lr_at(const Hyper &h, int64_t k) {
  if (!h.linear) return h.lr;
  return std::max(h.lr - h.lr_decay_a * static_cast<double>(k - 1), h.lr_decay_b);
}

template <class T>
void prox_constants(const Hyper &h, int64_t k, T *lam1, T *c2) {
  rules::ps_prox_constants<T>(static_cast<T>(lr_at(h, k)), static_cast<T>(h.l1),
                              static_cast<T>(h.l2), *lam1, *c2);
}

// The last step in [s, to] whose learning rate in T equals step s's: the
// regularization constants depend on nothing else.  lr_at is non-increasing
// in k and rounding to T is monotone, so those steps are contiguous: probe
// `to`, then gallop from s and bisect (one or two probes on a ramp where every
// step differs, O(log) where the rate changes slowly or not at all).
template <class T>
int64_t same_lr_until(const Hyper &h, int64_t s, int64_t to) {
  const T lr_s = static_cast<T>(lr_at(h, s));
  const auto same = [&](int64_t k) { return static_cast<T>(lr_at(h, k)) == lr_s; };
  if (!h.linear || same(to)) return to;
  int64_t good = s, bad = to;  // same(good), !same(bad)
  // strides 1, 2, 4, ... sum to less than to - s < 2^63, so a stride that
  // passes the test is below 2^62 and doubling it cannot overflow
  for (int64_t stride = 1; stride < bad - good; stride *= 2) {
    if (!same(good + stride)) {
      bad = good + stride;
      break;
    }
    good += stride;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (same(mid) ? good : bad) = mid;
  }
  return good;
}

// Applies the regularization of steps from+1 .. to to n elements (from < to;
// no step number past `to`, which may be INT64_MAX, is formed), stretch by
// stretch of equal constants; the kernel stops a stretch at a fixed point and
// the whole replay once every element is +-0 or NaN.
template <class T>
void replay_regularization(const Optimizer &o, T *x, int64_t n, int64_t from, int64_t to) {
  const PsOps<T> &k = ops<T>();
  for (int64_t s = from + 1;;) {
    const int64_t e = same_lr_until<T>(o.h, s, to);
    T lam1, c2;
    prox_constants<T>(o.h, s, &lam1, &c2);
    if (k.regularize(x, n, lam1, c2, e - s + 1) || e == to) return;
    s = e + 1;
  }
}

// Brings every row's regularization up to step `to`.
template <class T>
void catch_up_all(Optimizer &o, int64_t to) {
  if (!o.reg) return;
  T *p = o.p<T>();
  int64_t *rs = o.reg_step.get();
  if (o.nrows == 1) {
    if (rs[0] < to) {
      const int64_t from = rs[0];
      for_blocks(o.numel, [&](int64_t lo, int64_t hi) {
        replay_regularization<T>(o, p + lo, hi - lo, from, to);
      });
      rs[0] = to;
    }
    return;
  }
  const int64_t w = o.width, nr = o.nrows;
#pragma omp parallel for schedule(dynamic, 64) if (o.numel >= kParallelMin)
  for (int64_t r = 0; r < nr; ++r) {
    if (rs[r] < to) {
      replay_regularization<T>(o, p + r * w, w, rs[r], to);
      rs[r] = to;
    }
  }
}

// The hyper-parameters of step k = o.step + 1, and the beta powers after it.
template <class T>
PsHyper<T> step_hyper(const Optimizer &o, int64_t k, T *b1p, T *b2p) {
  const Hyper &h = o.h;
  PsHyper<T> a{};
  a.lr = static_cast<T>(lr_at(h, k));
  a.wd = static_cast<T>(h.weight_decay);
  a.momentum = static_cast<T>(h.momentum);
  a.beta1 = static_cast<T>(h.beta1);
  a.beta2 = static_cast<T>(h.beta2);
  a.c1 = T(1) - a.beta1;
  a.c2 = T(1) - a.beta2;
  a.eps = static_cast<T>(h.eps);
  a.nesterov = h.nesterov;
  *b1p = static_cast<T>(o.beta1_power) * a.beta1;
  *b2p = static_cast<T>(o.beta2_power) * a.beta2;
  a.lr_t = rules::ps_adam_step_size(a.lr, *b1p, *b2p);
  a.inv_bc1 = T(1) / (T(1) - *b1p);
  a.inv_sqrt_bc2 = T(1) / std::sqrt(T(1) - *b2p);
  return a;
}

// Lamb's trust ratio times lr from the summed squared norms (PaddlePaddle's
// rule: the ratio is used only with weight decay).
template <class T>
T lamb_lr_ratio(const PsHyper<T> &a, const double *p_sq, const double *r_sq, int64_t nb) {
  double sp = 0.0, sr = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    sp += p_sq[b];
    sr += r_sq[b];
  }
  return a.lr * static_cast<T>(rules::lamb_trust_ratio(sp, sr));
}

// One optimizer step on n contiguous elements at offset `off` (a kPsNormBlock
// boundary or a row start).  For Lamb with weight decay, p_sq / r_sq hold room
// for the blocks of these n elements and the ratio is taken over them.
template <class T>
void step_range(const Optimizer &o, const PsHyper<T> &a, int64_t off, int64_t n, const T *g,
                double *p_sq, double *r_sq) {
  const PsOps<T> &k = ops<T>();
  T *p = o.p<T>() + off;
  switch (o.algo) {
    case kSgd: k.sgd(p, g, n, a); break;
    case kMomentum: k.momentum(p, o.s<T>(0) + off, g, n, a); break;
    case kAdagrad: k.adagrad(p, o.s<T>(0) + off, g, n, a); break;
    case kAdam: k.adam(p, o.s<T>(0) + off, o.s<T>(1) + off, g, n, a); break;
    case kLamb:
      if (a.wd == T(0)) {
        k.lamb_plain(p, o.s<T>(0) + off, o.s<T>(1) + off, g, n, a);
      } else {
        k.lamb_moments(p, o.s<T>(0) + off, o.s<T>(1) + off, g, n, a, p_sq, r_sq);
        const int64_t nb = (n + kPsNormBlock - 1) / kPsNormBlock;
        k.lamb_apply(p, o.s<T>(0) + off, o.s<T>(1) + off, n, a, lamb_lr_ratio(a, p_sq, r_sq, nb));
      }
      break;
    default: break;
  }
}

// Lamb needs norms (a trust ratio) only with weight decay, as step_range decides.
template <class T>
bool lamb_norms(const Optimizer &o) {
  return o.algo == kLamb && static_cast<T>(o.h.weight_decay) != T(0);
}

template <class T>
int dense_update(Optimizer &o, const T *g) {
  const int64_t k = o.step + 1, n = o.numel;
  T b1p, b2p;
  const PsHyper<T> a = step_hyper<T>(o, k, &b1p, &b2p);
  std::vector<double> p_sq, r_sq;
  const int64_t nb = (n + kPsNormBlock - 1) / kPsNormBlock;
  const bool norms = lamb_norms<T>(o);
  if (norms) {  // allocated before anything changes
    p_sq.resize(nb);
    r_sq.resize(nb);
  }
  catch_up_all<T>(o, k - 1);
  const PsOps<T> &ops_t = ops<T>();
  T *p = o.p<T>();
  if (norms) {
    // the ratio is global: pass 1 over all blocks, then pass 2
    for_blocks(n, [&](int64_t lo, int64_t hi) {
      ops_t.lamb_moments(p + lo, o.s<T>(0) + lo, o.s<T>(1) + lo, g + lo, hi - lo, a,
                         p_sq.data() + lo / kPsNormBlock, r_sq.data() + lo / kPsNormBlock);
    });
    const T lr_ratio = lamb_lr_ratio(a, p_sq.data(), r_sq.data(), nb);
    for_blocks(n, [&](int64_t lo, int64_t hi) {
      ops_t.lamb_apply(p + lo, o.s<T>(0) + lo, o.s<T>(1) + lo, hi - lo, a, lr_ratio);
    });
  } else {
    for_blocks(n, [&](int64_t lo, int64_t hi) {
      step_range<T>(o, a, lo, hi - lo, g + lo, nullptr, nullptr);
    });
  }
  if (o.reg) {
    T lam1, c2;
    prox_constants<T>(o.h, k, &lam1, &c2);
    for_blocks(n, [&](int64_t lo, int64_t hi) { ops_t.regularize(p + lo, hi - lo, lam1, c2, 1); });
    std::fill(o.reg_step.get(), o.reg_step.get() + o.nrows, k);
  }
  o.step = k;
  o.beta1_power = b1p;
  o.beta2_power = b2p;
  return MSOPT_OK;
}

template <class T>
int rows_update(Optimizer &o, const int64_t *rows, int64_t nr, const T *values) {
  const int64_t k = o.step + 1, w = o.width;
  // Unique rows in ascending order; duplicates summed in the order given,
  // starting from +0 (as numpy's add.at into zeros).
  std::vector<int64_t> order(static_cast<size_t>(nr));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [rows](int64_t x, int64_t y) {
    return rows[x] != rows[y] ? rows[x] < rows[y] : x < y;
  });
  std::vector<int64_t> starts;  // group boundaries in `order`
  for (int64_t i = 0; i < nr; ++i)
    if (i == 0 || rows[order[i]] != rows[order[i - 1]]) starts.push_back(i);
  const int64_t nu = static_cast<int64_t>(starts.size());
  starts.push_back(nr);
  std::vector<T> grad(static_cast<size_t>(nu * w), T(0));
  const int64_t nbr = (w + kPsNormBlock - 1) / kPsNormBlock;
  std::vector<double> p_sq, r_sq;
  if (lamb_norms<T>(o)) {
    p_sq.resize(static_cast<size_t>(nu * nbr));
    r_sq.resize(static_cast<size_t>(nu * nbr));
  }
  T b1p, b2p;
  const PsHyper<T> a = step_hyper<T>(o, k, &b1p, &b2p);
  T lam1 = 0, c2 = 1;
  if (o.reg) prox_constants<T>(o.h, k, &lam1, &c2);
  // Nothing has changed so far; from here on nothing can fail.
  const PsOps<T> &ops_t = ops<T>();
  T *p = o.p<T>();
  int64_t *rs = o.reg_step.get();
#pragma omp parallel for schedule(dynamic, 16) if (nu * w >= kParallelMin)
  for (int64_t u = 0; u < nu; ++u) {
    T *gu = grad.data() + u * w;
    for (int64_t j = starts[u]; j < starts[u + 1]; ++j) ops_t.add(gu, values + order[j] * w, w);
    const int64_t r = rows[order[starts[u]]];
    if (o.reg && rs[r] < k - 1) replay_regularization<T>(o, p + r * w, w, rs[r], k - 1);
    double *ps = p_sq.empty() ? nullptr : p_sq.data() + u * nbr;
    double *rsq = r_sq.empty() ? nullptr : r_sq.data() + u * nbr;
    step_range<T>(o, a, r * w, w, gu, ps, rsq);
    if (o.reg) {
      ops_t.regularize(p + r * w, w, lam1, c2, 1);
      rs[r] = k;
    }
  }
  o.step = k;
  o.beta1_power = b1p;
  o.beta2_power = b2p;
  return MSOPT_OK;
}

// Brings every row up to the current step (before a read, a save or a diff).
void catch_up_all(Optimizer &o) {
  if (o.dtype == MSOPT_FLOAT32)
    catch_up_all<float>(o, o.step);
  else if (o.dtype == MSOPT_FLOAT64)
    catch_up_all<double>(o, o.step);
}

int check_dtype_arg(const char *fn, int dtype, const Optimizer &o) {
  if (!valid_dtype(dtype))
    return fail(MSOPT_ERR_DTYPE, "%s: dtype %d is not an msopt_dtype (0..5)", fn, dtype);
  if (dtype != o.dtype)
    return fail(MSOPT_ERR_DTYPE, "%s: dtype is %s but the parameter is %s", fn,
                kDtypeNames[dtype], kDtypeNames[o.dtype]);
  return MSOPT_OK;
}

int check_gradient_dtype(const char *fn, int dtype, const Optimizer &o) {
  if (int rc = check_dtype_arg(fn, dtype, o)) return rc;
  if (!is_float(dtype))
    return fail(MSOPT_ERR_DTYPE, "%s: gradient optimizers run on float32 and float64; this "
                "parameter is %s (use msopt_apply_diff)", fn, kDtypeNames[dtype]);
  return MSOPT_OK;
}

// An optimizer step is possible (the step counter would not overflow).
int check_step_room(const char *fn, const Optimizer &o) {
  if (o.step == INT64_MAX)
    return fail(MSOPT_ERR_STATE, "%s: the step counter is at its maximum %lld", fn,
                static_cast<long long>(o.step));
  return MSOPT_OK;
}

int check_numel(const char *fn, const char *what, int64_t numel, const Optimizer &o) {
  if (numel != o.numel)
    return fail(MSOPT_ERR_SIZE, "%s: %s is %lld but the parameter has %lld elements", fn, what,
                static_cast<long long>(numel), static_cast<long long>(o.numel));
  return MSOPT_OK;
}

// ------------------------------------------------------------------- state --
//
// Little-endian, version 1 (README "State format"):
//   0   char[8] "MSOPTSTA"        8  u32 version (1)      12 u32 header bytes (160)
//   16  u32 optimizer (0 sgd, 1 momentum, 2 adagrad, 3 adam, 4 lamb)
//   20  u32 dtype                 24 i64 numel            32 i64 row_width
//   40  i64 step                  48 u32 flags (1 nesterov, 2 lr_policy linear)
//   52  u32 nslots                56 f64[10] lr, momentum, beta1, beta2, eps, weight_decay,
//                                            l1, l2, lr_decay_a, lr_decay_b
//   136 f64 beta1_power           144 f64 beta2_power     152 i64 nreg (rows: 1 if flat)
//   160 parameter (numel elements), then nslots buffers of numel elements
//       (momentum: velocity; adagrad: accumulator; adam, lamb: m then v),
//       then nreg i64 (the step each row's regularization has reached)
//   end-4 u32 CRC-32 (zlib's) of every byte before it

constexpr char kMagic[8] = {'M', 'S', 'O', 'P', 'T', 'S', 'T', 'A'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kHeaderBytes = 160;
constexpr uint32_t kFlagNesterov = 1, kFlagLinear = 2;

struct CrcTable {
  uint32_t t[8][256];
};

constexpr CrcTable make_crc_table() {
  CrcTable c{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t r = i;
    for (int k = 0; k < 8; ++k) r = (r & 1u) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
    c.t[0][i] = r;
  }
  for (int s = 1; s < 8; ++s)
    for (uint32_t i = 0; i < 256; ++i) c.t[s][i] = (c.t[s - 1][i] >> 8) ^ c.t[0][c.t[s - 1][i] & 0xffu];
  return c;
}
constexpr CrcTable kCrc = make_crc_table();

// CRC-32 (polynomial 0xEDB88320, as zlib.crc32), eight bytes at a time.
uint32_t crc32(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  const auto &t = kCrc.t;
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xffu] ^ t[6][(lo >> 8) & 0xffu] ^ t[5][(lo >> 16) & 0xffu] ^ t[4][lo >> 24] ^
        t[3][hi & 0xffu] ^ t[2][(hi >> 8) & 0xffu] ^ t[1][(hi >> 16) & 0xffu] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n) c = t[0][(c ^ *p) & 0xffu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

template <class V>
void put(unsigned char *b, int64_t off, V v) {
  std::memcpy(b + off, &v, sizeof v);
}
template <class V>
V get(const unsigned char *b, int64_t off) {
  V v;
  std::memcpy(&v, b + off, sizeof v);
  return v;
}

// Total blob size for these fields, or -1 when it would not fit in int64.
int64_t state_size(int64_t numel, int dtype, int nslots, int64_t nreg) {
  int64_t data = 0, regs = 0, total = 0;
  if (__builtin_mul_overflow(numel, kDtypeBytes[dtype] * (1 + nslots), &data) ||
      __builtin_mul_overflow(nreg, int64_t{8}, &regs) ||
      __builtin_add_overflow(data, regs, &total) ||
      __builtin_add_overflow(total, kHeaderBytes + 4, &total))
    return -1;
  return total;
}

int serialize(const Optimizer &o, void **state, int64_t *state_len) {
  const int64_t size = state_size(o.numel, o.dtype, o.nslots, o.nrows);
  if (size < 0) return fail(MSOPT_ERR_SIZE, "msopt_get_state: the state would exceed 2^63 bytes");
  unsigned char *b = static_cast<unsigned char *>(std::malloc(static_cast<size_t>(size)));
  if (b == nullptr) return fail(MSOPT_ERR_NOMEM, "msopt_get_state: out of memory (%lld bytes)",
                                static_cast<long long>(size));
  std::memset(b, 0, kHeaderBytes);
  std::memcpy(b, kMagic, 8);
  put<uint32_t>(b, 8, kVersion);
  put<uint32_t>(b, 12, static_cast<uint32_t>(kHeaderBytes));
  put<uint32_t>(b, 16, o.algo);
  put<uint32_t>(b, 20, static_cast<uint32_t>(o.dtype));
  put<int64_t>(b, 24, o.numel);
  put<int64_t>(b, 32, o.row_width);
  put<int64_t>(b, 40, o.step);
  put<uint32_t>(b, 48, (o.h.nesterov ? kFlagNesterov : 0u) | (o.h.linear ? kFlagLinear : 0u));
  put<uint32_t>(b, 52, static_cast<uint32_t>(o.nslots));
  for (int i = 0; i < kNumFields; ++i) put<double>(b, 56 + 8 * i, o.h.*kFields[i].field);
  put<double>(b, 136, o.beta1_power);
  put<double>(b, 144, o.beta2_power);
  put<int64_t>(b, 152, o.nrows);
  int64_t off = kHeaderBytes;
  std::memcpy(b + off, o.param.get(), static_cast<size_t>(o.bytes()));
  off += o.bytes();
  for (int i = 0; i < o.nslots; ++i) {
    std::memcpy(b + off, o.slot[i].get(), static_cast<size_t>(o.bytes()));
    off += o.bytes();
  }
  std::memcpy(b + off, o.reg_step.get(), static_cast<size_t>(o.nrows * 8));
  off += o.nrows * 8;
  put<uint32_t>(b, off, crc32(b, static_cast<size_t>(off)));
  *state = b;
  *state_len = size;
  return MSOPT_OK;
}

int state_error(const char *what) {
  return fail(MSOPT_ERR_STATE, "msopt_restore: %s", what);
}

int deserialize(const unsigned char *b, int64_t len, std::shared_ptr<Optimizer> *out) {
  char msg[256];
  if (len < kHeaderBytes + 4) {
    std::snprintf(msg, sizeof msg, "state_len %lld is shorter than the %lld-byte minimum "
                  "(truncated blob?)", static_cast<long long>(len),
                  static_cast<long long>(kHeaderBytes + 4));
    return state_error(msg);
  }
  if (std::memcmp(b, kMagic, 8) != 0) return state_error("not an ms_optim state (bad magic)");
  const uint32_t version = get<uint32_t>(b, 8);
  if (version != kVersion) {
    std::snprintf(msg, sizeof msg, "unsupported state version %u (this library reads %u)",
                  version, kVersion);
    return state_error(msg);
  }
  if (get<uint32_t>(b, 12) != kHeaderBytes) return state_error("bad header size");
  const uint32_t algo = get<uint32_t>(b, 16), dtype = get<uint32_t>(b, 20);
  const int64_t numel = get<int64_t>(b, 24), row_width = get<int64_t>(b, 32);
  const int64_t step = get<int64_t>(b, 40), nreg = get<int64_t>(b, 152);
  const uint32_t flags = get<uint32_t>(b, 48), nslots = get<uint32_t>(b, 52);
  if (algo >= kNumAlgos) return state_error("unknown optimizer id");
  if (dtype >= static_cast<uint32_t>(kNumDtypes)) return state_error("unknown dtype");
  if (numel <= 0) return state_error("numel must be > 0");
  if (row_width < 0 || (row_width > 0 && numel % row_width != 0))
    return state_error("row_width does not divide numel");
  if (step < 0) return state_error("negative step");
  if (flags & ~(kFlagNesterov | kFlagLinear)) return state_error("unknown flags");
  if (static_cast<int>(nslots) != num_slots(static_cast<Algo>(algo), static_cast<int>(dtype)))
    return state_error("buffer count does not match the optimizer");
  const int64_t nrows = row_width > 0 ? numel / row_width : 1;
  if (nreg != nrows) return state_error("row count does not match the shape");
  const int64_t size = state_size(numel, static_cast<int>(dtype), static_cast<int>(nslots), nreg);
  if (size != len) {
    std::snprintf(msg, sizeof msg, "state_len is %lld but the header describes %lld bytes "
                  "(truncated, extended or corrupted blob)", static_cast<long long>(len),
                  static_cast<long long>(size));
    return state_error(msg);
  }
  const uint32_t crc = get<uint32_t>(b, len - 4);
  if (crc32(b, static_cast<size_t>(len - 4)) != crc)
    return state_error("checksum mismatch (corrupted blob)");

  const Algo a = static_cast<Algo>(algo);
  const Hyper defaults = default_hyper(a);
  Hyper h;
  for (int i = 0; i < kNumFields; ++i) {
    const Field &f = kFields[i];
    h.*f.field = get<double>(b, 56 + 8 * i);
    // keys the optimizer does not use hold their defaults, as msopt_get_state writes them
    // (they still enter unused arithmetic, e.g. beta1 into beta1_power for sgd)
    if (!(kAlgoKeys[a] & bit(f.key)) &&
        std::memcmp(&(h.*f.field), &(defaults.*f.field), sizeof(double)) != 0) {
      std::snprintf(msg, sizeof msg, "%s = %.17g does not apply to %s and must be its default %g",
                    kKeyNames[f.key], h.*f.field, kAlgoNames[a], defaults.*f.field);
      return state_error(msg);
    }
  }
  h.nesterov = (flags & kFlagNesterov) != 0;
  h.linear = (flags & kFlagLinear) != 0;
  if (check_hyper("msopt_restore: state", a, static_cast<int>(dtype), h) != MSOPT_OK) {
    std::snprintf(msg, sizeof msg, "invalid hyper-parameters (%s)", msopt_last_error());
    return state_error(msg);
  }
  const double beta1_power = get<double>(b, 136), beta2_power = get<double>(b, 144);
  for (double bp : {beta1_power, beta2_power})
    if (!(bp >= 0.0 && bp <= 1.0)) return state_error("beta power outside [0, 1]");
  if (dtype == MSOPT_FLOAT32 &&
      (static_cast<double>(static_cast<float>(beta1_power)) != beta1_power ||
       static_cast<double>(static_cast<float>(beta2_power)) != beta2_power))
    return state_error("beta power is not a float32 value");
  const unsigned char *reg = b + kHeaderBytes + numel * kDtypeBytes[dtype] * (1 + nslots);
  for (int64_t r = 0; r < nrows; ++r) {
    const int64_t s = get<int64_t>(reg, r * 8);
    if (s < 0 || s > step) return state_error("a row's regularization step is outside [0, step]");
  }
  std::shared_ptr<Optimizer> o = make_optimizer(a, static_cast<int>(dtype), numel, row_width, h);
  if (!o) return fail(MSOPT_ERR_NOMEM, "msopt_restore: out of memory");
  o->step = step;
  o->beta1_power = beta1_power;
  o->beta2_power = beta2_power;
  int64_t off = kHeaderBytes;
  std::memcpy(o->param.get(), b + off, static_cast<size_t>(o->bytes()));
  off += o->bytes();
  for (int i = 0; i < o->nslots; ++i) {
    std::memcpy(o->slot[i].get(), b + off, static_cast<size_t>(o->bytes()));
    off += o->bytes();
  }
  std::memcpy(o->reg_step.get(), b + off, static_cast<size_t>(nrows * 8));
  *out = std::move(o);
  return MSOPT_OK;
}

}  // namespace
}  // namespace msopt

using msopt::fail;
using msopt::Optimizer;

// Internal (not in ms_optim.h): the instruction set of the kernels the C
// library runs, for tests (it must follow msopt_select_isa).
MSOPT_API const char *msopt_ps_isa(void) { return msopt::ps_kernels().isa; }

MSOPT_API int msopt_create(const char *optimizer, const char *config, msopt_dtype dtype,
                           const void *param, int64_t numel, int64_t row_width,
                           msopt_optimizer **out) {
  static const char *fn = "msopt_create";
  return msopt::guarded(fn, [&]() -> int {
    if (optimizer == nullptr) return fail(MSOPT_ERR_NULL, "%s: optimizer is NULL", fn);
    if (config == nullptr) return fail(MSOPT_ERR_NULL, "%s: config is NULL", fn);
    if (param == nullptr) return fail(MSOPT_ERR_NULL, "%s: param is NULL", fn);
    if (out == nullptr) return fail(MSOPT_ERR_NULL, "%s: out is NULL", fn);
    const int d = static_cast<int>(dtype);
    if (!msopt::valid_dtype(d))
      return fail(MSOPT_ERR_DTYPE, "%s: dtype %d is not an msopt_dtype (0..5)", fn, d);
    if (numel <= 0)
      return fail(MSOPT_ERR_SIZE, "%s: numel is %lld, must be > 0", fn,
                  static_cast<long long>(numel));
    if (numel > (INT64_MAX / 8) / 4)
      return fail(MSOPT_ERR_SIZE, "%s: numel %lld is too large", fn,
                  static_cast<long long>(numel));
    if (row_width < 0 || (row_width > 0 && numel % row_width != 0))
      return fail(MSOPT_ERR_SIZE, "%s: row_width %lld must be 0 or divide numel %lld", fn,
                  static_cast<long long>(row_width), static_cast<long long>(numel));
    int a = 0;
    while (a < static_cast<int>(msopt::kNumAlgos) && std::strcmp(optimizer, msopt::kAlgoNames[a]) != 0) ++a;
    if (a == static_cast<int>(msopt::kNumAlgos))
      return fail(MSOPT_ERR_CONFIG, "%s: unknown optimizer '%.64s' (sgd, momentum, adagrad, adam "
                  "or lamb)", fn, optimizer);
    const auto algo = static_cast<msopt::Algo>(a);
    msopt::Hyper h;
    if (int rc = msopt::parse_config(fn, algo, d, config, &h)) return rc;
    std::shared_ptr<Optimizer> o = msopt::make_optimizer(algo, d, numel, row_width, h);
    if (!o)
      return fail(MSOPT_ERR_NOMEM, "%s: out of memory for %lld elements", fn,
                  static_cast<long long>(numel));
    std::memcpy(o->param.get(), param, static_cast<size_t>(o->bytes()));
    *out = msopt::register_handle(std::move(o));
    return MSOPT_OK;
  });
}

MSOPT_API int msopt_restore(const void *state, int64_t state_len, msopt_optimizer **out) {
  static const char *fn = "msopt_restore";
  return msopt::guarded(fn, [&]() -> int {
    if (state == nullptr) return fail(MSOPT_ERR_NULL, "%s: state is NULL", fn);
    if (out == nullptr) return fail(MSOPT_ERR_NULL, "%s: out is NULL", fn);
    std::shared_ptr<Optimizer> o;
    if (int rc = msopt::deserialize(static_cast<const unsigned char *>(state), state_len, &o))
      return rc;
    *out = msopt::register_handle(std::move(o));
    return MSOPT_OK;
  });
}

MSOPT_API int msopt_update(msopt_optimizer *h, msopt_dtype dtype, const void *grad,
                           int64_t numel) {
  static const char *fn = "msopt_update";
  return msopt::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (grad == nullptr) return fail(MSOPT_ERR_NULL, "%s: grad is NULL", fn);
    if (int rc = msopt::check_gradient_dtype(fn, static_cast<int>(dtype), o)) return rc;
    if (int rc = msopt::check_numel(fn, "numel", numel, o)) return rc;
    if (int rc = msopt::check_step_room(fn, o)) return rc;
    if (o.dtype == MSOPT_FLOAT32) return msopt::dense_update<float>(o, static_cast<const float *>(grad));
    return msopt::dense_update<double>(o, static_cast<const double *>(grad));
  });
}

MSOPT_API int msopt_update_rows(msopt_optimizer *h, msopt_dtype dtype, const int64_t *rows,
                                int64_t nrows, const void *values) {
  static const char *fn = "msopt_update_rows";
  return msopt::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (int rc = msopt::check_gradient_dtype(fn, static_cast<int>(dtype), o)) return rc;
    if (o.row_width == 0)
      return fail(MSOPT_ERR_SIZE, "%s: the parameter was created with row_width 0 (flat); "
                  "create it with a row width to update rows", fn);
    if (nrows < 0)
      return fail(MSOPT_ERR_SIZE, "%s: nrows is %lld, must be >= 0", fn,
                  static_cast<long long>(nrows));
    if (nrows > INT64_MAX / 8 / o.row_width)
      return fail(MSOPT_ERR_SIZE, "%s: nrows %lld times row_width %lld is too large", fn,
                  static_cast<long long>(nrows), static_cast<long long>(o.row_width));
    if (nrows > 0 && rows == nullptr) return fail(MSOPT_ERR_NULL, "%s: rows is NULL", fn);
    if (nrows > 0 && values == nullptr) return fail(MSOPT_ERR_NULL, "%s: values is NULL", fn);
    for (int64_t i = 0; i < nrows; ++i)
      if (rows[i] < 0 || rows[i] >= o.nrows)
        return fail(MSOPT_ERR_ROW, "%s: rows[%lld] = %lld is out of range [0, %lld)", fn,
                    static_cast<long long>(i), static_cast<long long>(rows[i]),
                    static_cast<long long>(o.nrows));
    if (int rc = msopt::check_step_room(fn, o)) return rc;
    if (o.dtype == MSOPT_FLOAT32)
      return msopt::rows_update<float>(o, rows, nrows, static_cast<const float *>(values));
    return msopt::rows_update<double>(o, rows, nrows, static_cast<const double *>(values));
  });
}

MSOPT_API int msopt_apply_diff(msopt_optimizer *h, msopt_dtype dtype, const void *diff,
                               int64_t numel) {
  static const char *fn = "msopt_apply_diff";
  return msopt::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (diff == nullptr) return fail(MSOPT_ERR_NULL, "%s: diff is NULL", fn);
    if (int rc = msopt::check_dtype_arg(fn, static_cast<int>(dtype), o)) return rc;
    if (int rc = msopt::check_numel(fn, "numel", numel, o)) return rc;
    msopt::catch_up_all(o);
    const msopt::PsTable &t = msopt::ps_kernels();
    unsigned char *p = o.param.get();
    const auto *d = static_cast<const unsigned char *>(diff);
    const int64_t es = msopt::kDtypeBytes[o.dtype];
    msopt::for_blocks(o.numel, [&](int64_t lo, int64_t hi) {
      void *pp = p + lo * es;
      const void *dd = d + lo * es;
      const int64_t n = hi - lo;
      switch (o.dtype) {
        case MSOPT_INT32: t.add_i32(static_cast<int32_t *>(pp), static_cast<const int32_t *>(dd), n); break;
        case MSOPT_UINT32: t.add_u32(static_cast<uint32_t *>(pp), static_cast<const uint32_t *>(dd), n); break;
        case MSOPT_INT64: t.add_i64(static_cast<int64_t *>(pp), static_cast<const int64_t *>(dd), n); break;
        case MSOPT_UINT64: t.add_u64(static_cast<uint64_t *>(pp), static_cast<const uint64_t *>(dd), n); break;
        case MSOPT_FLOAT32: t.f32.add(static_cast<float *>(pp), static_cast<const float *>(dd), n); break;
        default: t.f64.add(static_cast<double *>(pp), static_cast<const double *>(dd), n); break;
      }
    });
    return MSOPT_OK;
  });
}

MSOPT_API int msopt_get_weights(msopt_optimizer *h, void *out, int64_t numel) {
  static const char *fn = "msopt_get_weights";
  return msopt::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (out == nullptr) return fail(MSOPT_ERR_NULL, "%s: out is NULL", fn);
    if (int rc = msopt::check_numel(fn, "numel", numel, o)) return rc;
    msopt::catch_up_all(o);
    std::memcpy(out, o.param.get(), static_cast<size_t>(o.bytes()));
    return MSOPT_OK;
  });
}

MSOPT_API int msopt_get_state(msopt_optimizer *h, void **state, int64_t *state_len) {
  static const char *fn = "msopt_get_state";
  return msopt::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (state == nullptr) return fail(MSOPT_ERR_NULL, "%s: state is NULL", fn);
    if (state_len == nullptr) return fail(MSOPT_ERR_NULL, "%s: state_len is NULL", fn);
    msopt::catch_up_all(o);
    return msopt::serialize(o, state, state_len);
  });
}

MSOPT_API int msopt_info(msopt_optimizer *h, msopt_dtype *dtype, int64_t *numel,
                         int64_t *row_width, int64_t *step) {
  return msopt::with_handle("msopt_info", h, [&](Optimizer &o) -> int {
    if (dtype != nullptr) *dtype = static_cast<msopt_dtype>(o.dtype);
    if (numel != nullptr) *numel = o.numel;
    if (row_width != nullptr) *row_width = o.row_width;
    if (step != nullptr) *step = o.step;
    return MSOPT_OK;
  });
}

MSOPT_API void msopt_free(void *p) { std::free(p); }

MSOPT_API int msopt_release(msopt_optimizer *h) {
  static const char *fn = "msopt_release";
  return msopt::guarded(fn, [&]() -> int {
    if (h == nullptr) return fail(MSOPT_ERR_NULL, "%s: o is NULL", fn);
    std::shared_ptr<Optimizer> victim;  // destroyed after the registry lock is released
    msopt::Registry &r = msopt::registry();
    {
      std::unique_lock<std::shared_mutex> lock(r.mu);
      const auto it = r.live.find(reinterpret_cast<uintptr_t>(h));
      if (it == r.live.end())
        return fail(MSOPT_ERR_HANDLE, "%s: o (%p) is not a live optimizer handle (released or "
                    "never created)", fn, static_cast<void *>(h));
      victim = std::move(it->second);
      r.live.erase(it);
    }
    return MSOPT_OK;
  });
}
