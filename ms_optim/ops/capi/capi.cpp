// The C library for parameter servers: the functions of include/ms_optim.h
// and the checks of their arguments.  The update engine (dense, rows, lazy
// regularization), config parsing, the state blob and the handle registry are
// capi_update.cpp, capi_config.cpp, capi_state.cpp and capi_registry.cpp
// (declarations in capi_internal.h).
//
// A handle owns a copy of the parameter, the optimizer's buffers and a step
// counter; every call validates all of its arguments before changing anything,
// runs the per-ISA kernels of kernels/ps_kernels_impl.h (math in core/rules.h)
// on OpenMP threads for large inputs, and never lets an exception or an abort escape.
//
// Handles are opaque tokens looked up in a registry (a stale or made-up handle
// is an error, not a crash); each optimizer has its own mutex, so calls on one
// handle are serialized and calls on different handles run in parallel.
#include <cstdint>
#include <cstring>

#include "capi/capi_internal.h"
#include "core/ps_kernels.h"

namespace msopt {
namespace capi {
namespace {

int check_dtype_arg(const char *fn, int dtype, const Optimizer &o) {
  if (!valid_dtype(dtype))
    return fail(kErrDtype, "%s: dtype %d is not an msopt_dtype (0..5)", fn, dtype);
  if (dtype != o.dtype)
    return fail(kErrDtype, "%s: dtype is %s but the parameter is %s", fn,
                kDtypeNames[dtype], kDtypeNames[o.dtype]);
  return kOk;
}

int check_gradient_dtype(const char *fn, int dtype, const Optimizer &o) {
  if (int rc = check_dtype_arg(fn, dtype, o)) return rc;
  if (!is_float(dtype))
    return fail(kErrDtype, "%s: gradient optimizers run on float32 and float64; this "
                "parameter is %s (use msopt_apply_diff)", fn, kDtypeNames[dtype]);
  return kOk;
}

// An optimizer step is possible (the step counter would not overflow).
int check_step_room(const char *fn, const Optimizer &o) {
  if (o.step == INT64_MAX)
    return fail(kErrState, "%s: the step counter is at its maximum %lld", fn,
                static_cast<long long>(o.step));
  return kOk;
}

int check_numel(const char *fn, const char *what, int64_t numel, const Optimizer &o) {
  if (numel != o.numel)
    return fail(kErrSize, "%s: %s is %lld but the parameter has %lld elements", fn, what,
                static_cast<long long>(numel), static_cast<long long>(o.numel));
  return kOk;
}

}  // namespace
}  // namespace capi
}  // namespace msopt

namespace capi = msopt::capi;
using capi::Optimizer;
using msopt::fail;

// Internal (not in ms_optim.h): the instruction set of the kernels the C
// library runs, for tests (it must follow msopt_select_isa).
MSOPT_API const char *msopt_ps_isa(void) { return msopt::ps_kernels().isa; }

MSOPT_API int msopt_create(const char *optimizer, const char *config, msopt_dtype dtype,
                           const void *param, int64_t numel, int64_t row_width,
                           msopt_optimizer **out) {
  static const char *fn = "msopt_create";
  return capi::guarded(fn, [&]() -> int {
    if (optimizer == nullptr) return fail(msopt::kErrNull, "%s: optimizer is NULL", fn);
    if (config == nullptr) return fail(msopt::kErrNull, "%s: config is NULL", fn);
    if (param == nullptr) return fail(msopt::kErrNull, "%s: param is NULL", fn);
    if (out == nullptr) return fail(msopt::kErrNull, "%s: out is NULL", fn);
    const int d = static_cast<int>(dtype);
    if (!capi::valid_dtype(d))
      return fail(msopt::kErrDtype, "%s: dtype %d is not an msopt_dtype (0..5)", fn, d);
    if (numel <= 0)
      return fail(msopt::kErrSize, "%s: numel is %lld, must be > 0", fn,
                  static_cast<long long>(numel));
    if (numel > (INT64_MAX / 8) / 4)
      return fail(msopt::kErrSize, "%s: numel %lld is too large", fn,
                  static_cast<long long>(numel));
    if (row_width < 0 || (row_width > 0 && numel % row_width != 0))
      return fail(msopt::kErrSize, "%s: row_width %lld must be 0 or divide numel %lld", fn,
                  static_cast<long long>(row_width), static_cast<long long>(numel));
    int a = 0;
    while (a < static_cast<int>(capi::kNumAlgos) &&
           std::strcmp(optimizer, capi::kAlgoNames[a]) != 0)
      ++a;
    if (a == static_cast<int>(capi::kNumAlgos))
      return fail(msopt::kErrConfig, "%s: unknown optimizer '%.64s' (sgd, momentum, adagrad, adam "
                  "or lamb)", fn, optimizer);
    const auto algo = static_cast<capi::Algo>(a);
    capi::Hyper h;
    if (int rc = capi::parse_config(fn, algo, d, config, &h)) return rc;
    std::shared_ptr<Optimizer> o = capi::make_optimizer(algo, d, numel, row_width, h);
    if (!o)
      return fail(msopt::kErrNoMem, "%s: out of memory for %lld elements", fn,
                  static_cast<long long>(numel));
    std::memcpy(o->param.get(), param, static_cast<size_t>(o->bytes()));
    *out = capi::register_handle(std::move(o));
    return msopt::kOk;
  });
}

MSOPT_API int msopt_restore(const void *state, int64_t state_len, msopt_optimizer **out) {
  static const char *fn = "msopt_restore";
  return capi::guarded(fn, [&]() -> int {
    if (state == nullptr) return fail(msopt::kErrNull, "%s: state is NULL", fn);
    if (out == nullptr) return fail(msopt::kErrNull, "%s: out is NULL", fn);
    std::shared_ptr<Optimizer> o;
    if (int rc = capi::deserialize(static_cast<const unsigned char *>(state), state_len, &o))
      return rc;
    *out = capi::register_handle(std::move(o));
    return msopt::kOk;
  });
}

MSOPT_API int msopt_update(msopt_optimizer *h, msopt_dtype dtype, const void *grad,
                           int64_t numel) {
  static const char *fn = "msopt_update";
  return capi::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (grad == nullptr) return fail(msopt::kErrNull, "%s: grad is NULL", fn);
    if (int rc = capi::check_gradient_dtype(fn, static_cast<int>(dtype), o)) return rc;
    if (int rc = capi::check_numel(fn, "numel", numel, o)) return rc;
    if (int rc = capi::check_step_room(fn, o)) return rc;
    return capi::dense_update(o, grad);
  });
}

MSOPT_API int msopt_update_rows(msopt_optimizer *h, msopt_dtype dtype, const int64_t *rows,
                                int64_t nrows, const void *values) {
  static const char *fn = "msopt_update_rows";
  return capi::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (int rc = capi::check_gradient_dtype(fn, static_cast<int>(dtype), o)) return rc;
    if (o.row_width == 0)
      return fail(msopt::kErrSize, "%s: the parameter was created with row_width 0 (flat); "
                  "create it with a row width to update rows", fn);
    if (nrows < 0)
      return fail(msopt::kErrSize, "%s: nrows is %lld, must be >= 0", fn,
                  static_cast<long long>(nrows));
    if (nrows > INT64_MAX / 8 / o.row_width)
      return fail(msopt::kErrSize, "%s: nrows %lld times row_width %lld is too large", fn,
                  static_cast<long long>(nrows), static_cast<long long>(o.row_width));
    if (nrows > 0 && rows == nullptr) return fail(msopt::kErrNull, "%s: rows is NULL", fn);
    if (nrows > 0 && values == nullptr) return fail(msopt::kErrNull, "%s: values is NULL", fn);
    for (int64_t i = 0; i < nrows; ++i)
      if (rows[i] < 0 || rows[i] >= o.nrows)
        return fail(msopt::kErrRow, "%s: rows[%lld] = %lld is out of range [0, %lld)", fn,
                    static_cast<long long>(i), static_cast<long long>(rows[i]),
                    static_cast<long long>(o.nrows));
    if (int rc = capi::check_step_room(fn, o)) return rc;
    return capi::rows_update(o, rows, nrows, values);
  });
}

MSOPT_API int msopt_apply_diff(msopt_optimizer *h, msopt_dtype dtype, const void *diff,
                               int64_t numel) {
  static const char *fn = "msopt_apply_diff";
  return capi::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (diff == nullptr) return fail(msopt::kErrNull, "%s: diff is NULL", fn);
    if (int rc = capi::check_dtype_arg(fn, static_cast<int>(dtype), o)) return rc;
    if (int rc = capi::check_numel(fn, "numel", numel, o)) return rc;
    capi::catch_up_all(o);
    capi::add_diff(o, diff);
    return msopt::kOk;
  });
}

MSOPT_API int msopt_get_weights(msopt_optimizer *h, void *out, int64_t numel) {
  static const char *fn = "msopt_get_weights";
  return capi::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (out == nullptr) return fail(msopt::kErrNull, "%s: out is NULL", fn);
    if (int rc = capi::check_numel(fn, "numel", numel, o)) return rc;
    capi::catch_up_all(o);
    std::memcpy(out, o.param.get(), static_cast<size_t>(o.bytes()));
    return msopt::kOk;
  });
}

MSOPT_API int msopt_get_state(msopt_optimizer *h, void **state, int64_t *state_len) {
  static const char *fn = "msopt_get_state";
  return capi::with_handle(fn, h, [&](Optimizer &o) -> int {
    if (state == nullptr) return fail(msopt::kErrNull, "%s: state is NULL", fn);
    if (state_len == nullptr) return fail(msopt::kErrNull, "%s: state_len is NULL", fn);
    capi::catch_up_all(o);
    return capi::serialize(o, state, state_len);
  });
}

MSOPT_API int msopt_info(msopt_optimizer *h, msopt_dtype *dtype, int64_t *numel,
                         int64_t *row_width, int64_t *step) {
  return capi::with_handle("msopt_info", h, [&](Optimizer &o) -> int {
    if (dtype != nullptr) *dtype = static_cast<msopt_dtype>(o.dtype);
    if (numel != nullptr) *numel = o.numel;
    if (row_width != nullptr) *row_width = o.row_width;
    if (step != nullptr) *step = o.step;
    return msopt::kOk;
  });
}

MSOPT_API void msopt_free(void *p) { std::free(p); }

MSOPT_API int msopt_release(msopt_optimizer *h) {
  static const char *fn = "msopt_release";
  return capi::guarded(fn, [&]() -> int { return capi::release_handle(fn, h); });
}