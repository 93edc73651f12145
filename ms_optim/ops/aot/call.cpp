// AotCall (aot/call.h): binding a call to its kernel's declaration, the
// checks, failure reporting, and what the library reports of each kernel's
// tensors (msopt_aot_signature) and of the last kernel failure
// (msopt_last_kernel_error).
#include "aot/call.h"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

namespace msopt {
namespace {

// "param:each m:each lr -> done": the slots in order, an arity other than kOne
// after a colon, the outputs after " -> ".
std::string describe(const Slot *spec, int slots) {
  std::string out;
  bool outputs = false;
  for (int s = 0; s < slots; ++s) {
    if (spec[s].output && !outputs) {
      out += " ->";
      outputs = true;
    }
    if (!out.empty()) out += ' ';
    out += spec[s].name;
    switch (spec[s].arity) {
      case Arity::kOne: break;
      case Arity::kEach: out += ":each"; break;
      case Arity::kCountK: out += ":count"; break;
      case Arity::kRest: out += ":rest"; break;
    }
  }
  return out;
}

// The most recent failure of any kernel call, on any thread: MindSpore runs
// kernels on its own threads, so the calling thread's msopt_last_error() does
// not reach the Python side.
std::mutex g_kernel_error_lock;
char g_kernel_error[kErrorBytes] = "";
int64_t g_kernel_error_time = 0;  // steady clock, ns: when it failed
int g_kernel_error_code = kOk;    // the code it returned

}  // namespace

int AotCall::bind() {
  const int n = a.nparam;
  int each = 0, single = 0, rest = -1, counter = -1;
  for (int s = 0; s < slots_; ++s) {
    switch (spec_[s].arity) {
      case Arity::kEach: ++each; break;
      case Arity::kOne: ++single; break;
      case Arity::kCountK:
        ++single;
        if (counter < 0) counter = s;
        break;
      case Arity::kRest: rest = s; break;
    }
  }
  int rest_count = 0;
  if (rest < 0) {
    k_ = each == 0 ? 0 : (n - single) / each;
    const bool fits = each == 0 ? n == single : n >= single + each && (n - single) % each == 0;
    if (!fits)
      return fail(kErrArgs, "expected %d%s + %d tensors (%s), got %d", each, each ? "K" : "",
                  single, describe(spec_, slots_).c_str(), n);
  } else {
    // the count tensor follows the kRest group: found from the end
    const int at = n - (slots_ - counter);
    if (counter < rest || at < each + rest)
      return fail(kErrArgs, "expected %dK + M + %d tensors (%s), got %d", each, single,
                  describe(spec_, slots_).c_str(), n);
    const int64_t k = a.numel(at);
    if (k < 1 || k > n || each * k + single + 1 > n)
      return fail(kErrArgs, "%s holds %lld element(s), which does not fit %d tensors (%s)",
                  spec_[counter].name, static_cast<long long>(k), n,
                  describe(spec_, slots_).c_str());
    k_ = static_cast<int>(k);
    rest_count = n - each * k_ - single;
  }
  int next = 0;
  for (int s = 0; s < slots_; ++s) {
    first_[s] = next;
    count_[s] = spec_[s].arity == Arity::kEach ? k_ : spec_[s].arity == Arity::kRest ? rest_count : 1;
    next += count_[s];
  }
  for (int s = 0; s < slots_; ++s)
    if (spec_[s].arity == Arity::kCountK && numel(s) != k_)
      return fail(kErrSize, "%s must have %d elements (one per parameter), got %lld",
                  spec_[s].name, k_, static_cast<long long>(numel(s)));
  return kOk;
}

const char *AotCall::name(int slot, int i) const {
  if (spec_[slot].arity == Arity::kOne || spec_[slot].arity == Arity::kCountK)
    std::snprintf(name_, sizeof name_, "%s", spec_[slot].name);
  else
    std::snprintf(name_, sizeof name_, "%s%d", spec_[slot].name, i);
  return name_;
}

int AotCall::require_dtype(int slot, const char *want) const {
  for (int i = 0; i < count_[slot]; ++i)
    if (!is(slot, want, i))
      return fail(kErrDtype, "%s must be %s, got %s", name(slot, i), want, dtype(slot, i));
  return kOk;
}

int AotCall::require_f32(int slot, int64_t n1, int64_t n2) const {
  if (!is(slot, "float32"))
    return fail(kErrDtype, "%s must be float32, got %s", name(slot), dtype(slot));
  const int64_t n = numel(slot);
  if (n != n1 && (n2 < 0 || n != n2)) {
    if (n2 < 0 || n2 == n1)
      return fail(kErrSize, "%s must have %lld element(s), got %lld", name(slot),
                  static_cast<long long>(n1), static_cast<long long>(n));
    return fail(kErrSize, "%s must have %lld or %lld elements, got %lld", name(slot),
                static_cast<long long>(n1), static_cast<long long>(n2), static_cast<long long>(n));
  }
  return kOk;
}

int AotCall::require_same_numel(int ref, std::initializer_list<int> slots) const {
  for (int i = 0; i < k_; ++i)
    for (int s : slots)
      if (numel(s, i) != numel(ref, i)) {
        char other[64];
        std::snprintf(other, sizeof other, "%s", name(s, i));
        return fail(kErrSize, "%s has %lld elements, %s %lld", other,
                    static_cast<long long>(numel(s, i)), name(ref, i),
                    static_cast<long long>(numel(ref, i)));
      }
  return kOk;
}

int AotCall::fail(Status code, const char *fmt, ...) const {
  char message[kErrorBytes - 64];  // room for the entry's name
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return msopt::fail(code, "%s: %s", entry, message);
}

int64_t element_bytes(const char *dtype) {
  static const struct {
    const char *name;
    int64_t bytes;
  } kSizes[] = {{"float64", 8}, {"int64", 8},    {"uint64", 8}, {"float32", 4}, {"int32", 4},
                {"uint32", 4},  {"float16", 2},  {"bfloat16", 2}, {"int16", 2}, {"uint16", 2},
                {"int8", 1},    {"uint8", 1},    {"bool", 1}};
  for (const auto &s : kSizes)
    if (std::strcmp(dtype, s.name) == 0) return s.bytes;
  return 0;
}

int run_aot(const char *entry, const Slot *spec, int slots, const AotArgs &args, AotBody body) {
  AotCall call(entry, spec, slots, args);
  int rc;
  try {
    rc = call.bind();
    if (rc == kOk) rc = body(call);
  } catch (const std::bad_alloc &) {
    rc = call.fail(kErrNoMem, "out of memory");
  } catch (...) {
    rc = call.fail(kErrInternal, "unexpected exception");
  }
  if (rc != kOk) {
    const char *message = msopt_last_error();
    {
      const std::lock_guard<std::mutex> hold(g_kernel_error_lock);
      std::snprintf(g_kernel_error, sizeof g_kernel_error, "%s", message);
      g_kernel_error_code = rc;
      g_kernel_error_time = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch()).count();
    }
    // (a stale step is the caller's to retry, not an error to show)
    if (rc != kErrStale) std::fprintf(stderr, "ms_optim: %s (code %d)\n", message, rc);
  }
  return rc;
}

}  // namespace msopt

// The tensors kernel `entry` takes, as core/contract.h declares them
// ("param:each m:each ... lr wd -> done"); NULL for an unknown entry.
MSOPT_API const char *msopt_aot_signature(const char *entry) {
  if (entry == nullptr) return nullptr;
#define MSOPT_AOT_DESCRIBE(name, LIST)                                                  \
  if (std::strcmp(entry, #name) == 0) {                                                 \
    static const std::string text =                                                     \
        msopt::describe(msopt::sig::name::kSpec, msopt::sig::name::kSlots);             \
    return text.c_str();                                                                \
  }
  MSOPT_AOT_KERNELS(MSOPT_AOT_DESCRIBE)
#undef MSOPT_AOT_DESCRIBE
  return nullptr;
}

// The message of the most recent failed kernel call on any thread ("" if none),
// copied for the calling thread.
MSOPT_API const char *msopt_last_kernel_error(void) {
  thread_local char copy[msopt::kErrorBytes];
  const std::lock_guard<std::mutex> hold(msopt::g_kernel_error_lock);
  std::snprintf(copy, sizeof copy, "%s", msopt::g_kernel_error);
  return copy;
}

// When the most recent failed kernel call failed (steady clock, ns; 0 if none): the
// Python side compares the CPU and CUDA libraries' with it.
MSOPT_API int64_t msopt_last_kernel_error_time(void) {
  const std::lock_guard<std::mutex> hold(msopt::g_kernel_error_lock);
  return msopt::g_kernel_error_time;
}

// The code the most recent failed kernel call returned (MSOPT_OK if none), beside
// its message: the Python side tells a stale step (MSOPT_ERR_STALE) by it.
MSOPT_API int msopt_last_kernel_error_code(void) {
  const std::lock_guard<std::mutex> hold(msopt::g_kernel_error_lock);
  return msopt::g_kernel_error_code;
}
