// The C library's config string (msopt_create): comma-separated key=value
// entries parsed into Hyper, and the range checks msopt_restore shares.
#include <cfloat>
#include <charconv>
#include <cmath>
#include <string>
#include <system_error>

#include "capi/capi_internal.h"

namespace msopt {
namespace capi {
namespace {

std::string trim(const std::string &s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

int parse_double(const char *fn, const char *key, const std::string &text, double *out) {
  double v = 0.0;
  const char *b = text.data(), *e = text.data() + text.size();
  const auto res = std::from_chars(b, e, v);
  if (text.empty() || res.ec != std::errc() || res.ptr != e || !std::isfinite(v))
    return fail(kErrConfig, "%s: config %s='%s' is not a finite number", fn, key,
                text.c_str());
  *out = v;
  return kOk;
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
    return fail(kErrConfig, "%s: config nesterov='%s' must be true, false, 1 or 0", fn,
                val.c_str());
  } else if (val == "const" || val == "linear") {  // kLrPolicy, the only other key
    h->linear = val == "linear";
  } else {
    return fail(kErrConfig, "%s: config lr_policy='%s' must be const or linear", fn,
                val.c_str());
  }
  return kOk;
}

}  // namespace

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
        return fail(kErrConfig, "%s: %s = %.17g does not fit in float32, the parameter's type",
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
      return fail(kErrConfig, "%s: %s = %.17g is %.9g in float32 (the parameter's type), "
                  "out of range %c%g, %g%c for %s", fn, name, given, v, lb, f.lo, f.hi, rb,
                  kAlgoNames[a]);
    return fail(kErrConfig, "%s: %s = %.17g is out of range %c%g, %g%c for %s", fn, name,
                given, lb, f.lo, f.hi, rb, kAlgoNames[a]);
  }
  if (!h.linear && (h.lr_decay_a != 0.0 || h.lr_decay_b != 0.0))
    return fail(kErrConfig, "%s: lr_decay_a/lr_decay_b need lr_policy=linear", fn);
  if (h.nesterov && !(kAlgoKeys[a] & bit(kNesterov)))
    return fail(kErrConfig, "%s: nesterov does not apply to %s", fn, kAlgoNames[a]);
  return kOk;
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
        return fail(kErrConfig, "%s: config has an empty entry at offset %zu", fn, pos);
      if (eq == std::string::npos)
        return fail(kErrConfig, "%s: config entry '%s' is not key=value", fn,
                    trim(entry).c_str());
      const std::string key = trim(entry.substr(0, eq)), val = trim(entry.substr(eq + 1));
      int k = 0;
      while (k < static_cast<int>(kNumKeys) && key != kKeyNames[k]) ++k;
      if (k == static_cast<int>(kNumKeys))
        return fail(kErrConfig,
                    "%s: unknown config key '%s' (keys: lr, momentum, nesterov, beta1, beta2, eps, "
                    "weight_decay, l1, l2, lr_policy, lr_decay_a, lr_decay_b)",
                    fn, key.c_str());
      const Key kk = static_cast<Key>(k);
      if (!(kAlgoKeys[a] & bit(kk)))
        return fail(kErrConfig, "%s: config key '%s' does not apply to %s", fn,
                    key.c_str(), kAlgoNames[a]);
      if (seen & bit(kk))
        return fail(kErrConfig, "%s: config key '%s' is given twice", fn, key.c_str());
      seen |= bit(kk);
      if (int rc = parse_value(fn, kk, val, &h)) return rc;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (is_float(dtype) && !(seen & bit(kLr)))
    return fail(kErrConfig, "%s: config must set lr (e.g. \"lr=0.01\")", fn);
  if (int rc = check_hyper(fn, a, dtype, h)) return rc;
  *out = h;
  return kOk;
}

}  // namespace capi
}  // namespace msopt
