// The update engine of the C library for parameter servers (capi_internal.h's
// "updates"): dense and row steps, model differences and lazy
// regularization, on the per-ISA kernels of kernels/ps_kernels_impl.h (math
// in core/rules.h), walked over OpenMP threads for large inputs by
// core/multi_tensor.h.  Its callers (capi.cpp) have checked every argument.
//
// Regularization (l1/l2) is lazy per row: reg_step[r] is the last step whose
// regularization row r has received.  A row is brought up to date (the missed
// steps replayed, each with its own learning rate) before it is updated, and
// every row before a dense update, a read, a state save or a diff.  Replaying
// the same per-step operation gives the same bits as applying it eagerly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "capi/capi_internal.h"
#include "core/kernels.h"
#include "core/multi_tensor.h"
#include "core/ps_kernels.h"
#include "core/rules.h"

namespace msopt {
namespace capi {
namespace {

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

// A flat range of n elements as the walker's one range (core/multi_tensor.h),
// split over the threads in whole kPsNormBlock blocks, so each share starts a
// block (Lamb's norms are per block); body(lo, hi) runs once per share.
template <class Body>
void for_blocks(int64_t n, const Body &body) {
  WalkPlan plan;
  plan.block = kPsNormBlock;
  plan.align = 1;
  walk_tensors(1, [n](int64_t) { return n; }, plan,
               [&](int64_t, int64_t lo, int64_t hi) { body(lo, hi); });
}

// nrows rows of `width` elements as the walker's whole tensors: body(r) for
// each row r, on threads from kParallelMin elements in all, handed out `grab`
// rows at a time.
template <class Body>
void for_rows(int64_t nrows, int64_t width, int grab, const Body &body) {
  WalkPlan plan;
  plan.schedule = WalkPlan::kWholeTensors;
  plan.grab = grab;
  walk_tensors(nrows, [width](int64_t) { return width; }, plan,
               [&](int64_t r, int64_t, int64_t) { body(r); });
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
  const int64_t w = o.width;
  for_rows(o.nrows, w, 64, [&](int64_t r) {
    if (rs[r] < to) {
      replay_regularization<T>(o, p + r * w, w, rs[r], to);
      rs[r] = to;
    }
  });
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
  a.lr_t = rules::adam_step_size(a.lr, *b1p, *b2p);
  rules::lamb_bias_corrections(*b1p, *b2p, a.inv_bc1, a.inv_sqrt_bc2);
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
int dense_step(Optimizer &o, const T *g) {
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
  return kOk;
}

template <class T>
int rows_step(Optimizer &o, const int64_t *rows, int64_t nr, const T *values) {
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
  for_rows(nu, w, 16, [&](int64_t u) {
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
  });
  o.step = k;
  o.beta1_power = b1p;
  o.beta2_power = b2p;
  return kOk;
}

}  // namespace

int dense_update(Optimizer &o, const void *grad) {
  if (o.dtype == MSOPT_FLOAT32) return dense_step<float>(o, static_cast<const float *>(grad));
  return dense_step<double>(o, static_cast<const double *>(grad));
}

int rows_update(Optimizer &o, const int64_t *rows, int64_t nrows, const void *values) {
  if (o.dtype == MSOPT_FLOAT32)
    return rows_step<float>(o, rows, nrows, static_cast<const float *>(values));
  return rows_step<double>(o, rows, nrows, static_cast<const double *>(values));
}

void add_diff(Optimizer &o, const void *diff) {
  const PsTable &t = ps_kernels();
  unsigned char *p = o.param.get();
  const auto *d = static_cast<const unsigned char *>(diff);
  const int64_t es = kDtypeBytes[o.dtype];
  for_blocks(o.numel, [&](int64_t lo, int64_t hi) {
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
}

void catch_up_all(Optimizer &o) {
  if (o.dtype == MSOPT_FLOAT32)
    catch_up_all<float>(o, o.step);
  else if (o.dtype == MSOPT_FLOAT64)
    catch_up_all<double>(o, o.step);
}

}  // namespace capi
}  // namespace msopt
