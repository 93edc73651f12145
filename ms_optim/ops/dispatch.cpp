// Run-time choice of the kernel table, and the per-thread error message.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common.h"
#include "contract.h"
#include "kernels.h"

namespace msopt {
namespace {

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

#ifndef MSOPT_BUILD_FLAGS
#define MSOPT_BUILD_FLAGS "unknown (built without setup.py)"
#endif

constexpr const char *kIsaNames = "scalar, avx2, avx512";

bool known_isa(const char *name) {
  return std::strcmp(name, "avx512") == 0 || std::strcmp(name, "avx2") == 0 ||
         std::strcmp(name, "scalar") == 0;
}

// The instruction sets this CPU runs, e.g. "scalar, avx2, avx512".
const char *supported_isas() {
  __builtin_cpu_init();
  if (cpu_has_avx512()) return "scalar, avx2, avx512";
  if (cpu_has_avx2()) return "scalar, avx2";
  return "scalar";
}

// The table for `name`, or nullptr when the name is unknown or this CPU lacks it.
const KernelTable *table_for(const char *name) {
  if (std::strcmp(name, "avx512") == 0) return cpu_has_avx512() ? &avx512::kTable : nullptr;
  if (std::strcmp(name, "avx2") == 0) return cpu_has_avx2() ? &avx2::kTable : nullptr;
  if (std::strcmp(name, "scalar") == 0) return &scalar::kTable;
  return nullptr;
}

// The widest instruction set this CPU runs.
const KernelTable *widest_table() {
  if (cpu_has_avx512()) return &avx512::kTable;
  if (cpu_has_avx2()) return &avx2::kTable;
  return &scalar::kTable;
}

const KernelTable *best_table() {
  __builtin_cpu_init();
  const char *want = std::getenv("MS_OPTIM_ISA");
  if (want == nullptr || *want == '\0') return widest_table();
  if (const KernelTable *t = table_for(want)) return t;
  const KernelTable *best = widest_table();
  std::fprintf(stderr, "ms_optim: MS_OPTIM_ISA=%s is %s (valid names: %s; this CPU supports: %s); "
               "using %s\n", want, known_isa(want) ? "not supported by this CPU" : "unknown",
               kIsaNames, supported_isas(), best->isa);
  return best;
}

std::atomic<const KernelTable *> g_table{nullptr};
std::mutex g_parallel;
thread_local char t_error[512] = "";

}  // namespace

const KernelTable &kernels() {
  const KernelTable *t = g_table.load(std::memory_order_acquire);
  if (t == nullptr) {
    t = best_table();
    g_table.store(t, std::memory_order_release);
  }
  return *t;
}

int kernel_threads() { return std::min(omp_get_max_threads(), kMaxThreads); }

int64_t lamb_scratch_floats(const LambTensor *tensors, int64_t count) {
  int64_t big = 0, small = 0;
  for (int64_t i = 0; i < count; ++i) {
    int64_t &widest = tensors[i].n >= kParallelMin ? big : small;
    widest = std::max(widest, tensors[i].n);
  }
  return std::max(big, small * kernel_threads());
}

ParallelSection::ParallelSection(int64_t n) : held_(n >= kParallelMin) {
  if (held_) g_parallel.lock();
}

ParallelSection::~ParallelSection() {
  if (held_) g_parallel.unlock();
}

int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return code;
}

}  // namespace msopt

const char *msopt_last_error(void) { return msopt::t_error; }

const char *msopt_isa(void) { return msopt::kernels().isa; }

// float32 <-> float16 conversions of the current kernel table (for tests).
MSOPT_API void msopt_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
  msopt::kernels().f32_to_f16(src, dst, n);
}

MSOPT_API void msopt_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  msopt::kernels().f16_to_f32(src, dst, n);
}

// Selects the kernels of one instruction set ("scalar", "avx2", "avx512") for
// the whole process; returns 0, or -1 when the name is unknown or unsupported.
int msopt_select_isa(const char *name) {
  if (name == nullptr) return msopt::fail(-1, "msopt_select_isa: name is NULL");
  const msopt::KernelTable *t = msopt::table_for(name);
  if (t == nullptr)
    return msopt::fail(-1, "msopt_select_isa: '%s' is %s (valid names: %s; this CPU supports: %s)",
                       name, msopt::known_isa(name) ? "not supported by this CPU" : "unknown",
                       msopt::kIsaNames, msopt::supported_isas());
  msopt::g_table.store(t, std::memory_order_release);
  return 0;
}


// What native_info() reports: the instruction sets this CPU runs, the kernels'
// OpenMP thread count and the compiler flags the library was built with.
MSOPT_API const char *msopt_supported_isas(void) { return msopt::supported_isas(); }

MSOPT_API int msopt_kernel_threads(void) { return msopt::kernel_threads(); }

MSOPT_API const char *msopt_build_flags(void) { return MSOPT_BUILD_FLAGS; }

// The constants layout of an AOT kernel ("adam", "lamb", "powers"): its field
// names space-separated, in order (contract.h); NULL for an unknown name.
MSOPT_API const char *msopt_consts_layout(const char *kernel) {
  if (kernel == nullptr) return nullptr;
  for (const auto &l : msopt::kConstsLayouts)
    if (std::strcmp(l.kernel, kernel) == 0) return l.fields;
  return nullptr;
}
