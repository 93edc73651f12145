// Run-time choice of the kernel table (the per-thread error message is core/errors.cpp).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

#include "core/common.h"
#include "kernels/table.h"
#include "core/ps_kernels.h"

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

bool cpu_has_baseline() { return true; }

// The instruction sets, widest first: each one's kernel tables (the AOT
// kernels and the C library's) and whether this CPU runs it.  kernels() and
// ps_kernels() both read the one entry chosen here, so they never disagree.
struct Isa {
  const char *name;
  bool (*supported)();
  const KernelTable *kernels;
  const PsTable *ps;
};
const Isa kIsas[] = {
    {"avx512", cpu_has_avx512, &avx512::kTable, &avx512::kPsTable},
    {"avx2", cpu_has_avx2, &avx2::kTable, &avx2::kPsTable},
    {"scalar", cpu_has_baseline, &scalar::kTable, &scalar::kPsTable},
};

// The names of the entries that pass `keep`, narrowest first ("scalar, avx2, avx512").
std::string isa_names(bool (*keep)(const Isa &)) {
  std::string names;
  for (auto i = std::rbegin(kIsas); i != std::rend(kIsas); ++i)
    if (keep(*i)) names += (names.empty() ? "" : ", ") + std::string(i->name);
  return names;
}

// Every instruction set the library has kernels for.
const char *all_isas() {
  static const std::string names = isa_names([](const Isa &) { return true; });
  return names.c_str();
}

// The entry named `name`, or nullptr.
const Isa *find_isa(const char *name) {
  for (const Isa &i : kIsas)
    if (std::strcmp(name, i.name) == 0) return &i;
  return nullptr;
}

// The instruction sets this CPU runs, e.g. "scalar, avx2".
const char *supported_isas() {
  __builtin_cpu_init();
  static const std::string names = isa_names([](const Isa &i) { return i.supported(); });
  return names.c_str();
}

// The entry for `name`, or nullptr when the name is unknown or this CPU lacks it.
const Isa *isa_for(const char *name) {
  const Isa *i = find_isa(name);
  return i != nullptr && i->supported() ? i : nullptr;
}

// The widest instruction set this CPU runs.
const Isa *widest_isa() {
  for (const Isa &i : kIsas)
    if (i.supported()) return &i;
  return &kIsas[std::size(kIsas) - 1];
}

const Isa *best_isa() {
  __builtin_cpu_init();
  const char *want = std::getenv("MS_OPTIM_ISA");
  if (want == nullptr || *want == '\0') return widest_isa();
  if (const Isa *i = isa_for(want)) return i;
  const Isa *best = widest_isa();
  std::fprintf(stderr, "ms_optim: MS_OPTIM_ISA=%s is %s (valid names: %s; this CPU supports: %s); "
               "using %s\n", want, find_isa(want) ? "not supported by this CPU" : "unknown",
               all_isas(), supported_isas(), best->name);
  return best;
}

std::atomic<const Isa *> g_isa{nullptr};
std::mutex g_parallel;

// The instruction set chosen for this process (on first use: the widest this
// CPU runs, or MS_OPTIM_ISA; later: msopt_select_isa).
const Isa &current_isa() {
  const Isa *i = g_isa.load(std::memory_order_acquire);
  if (i == nullptr) {
    i = best_isa();
    g_isa.store(i, std::memory_order_release);
  }
  return *i;
}

}  // namespace

const KernelTable &kernels() { return *current_isa().kernels; }

const PsTable &ps_kernels() { return *current_isa().ps; }

int kernel_threads() { return std::min(omp_get_max_threads(), kMaxThreads); }

int64_t lamb_team_min(int64_t total, int nthreads) {
  return std::max(kParallelMin, (total + nthreads - 1) / std::max(nthreads, 1));
}

ParallelSection::ParallelSection(int64_t n) : held_(n >= kParallelMin) {
  if (held_) g_parallel.lock();
}

ParallelSection::~ParallelSection() {
  if (held_) g_parallel.unlock();
}

}  // namespace msopt

const char *msopt_isa(void) { return msopt::kernels().isa; }

// float32 <-> float16 conversions of the current kernel table (for tests).
MSOPT_API void msopt_f32_to_f16(const float *src, uint16_t *dst, int64_t n) {
  msopt::kernels().f32_to_f16(src, dst, n);
}

MSOPT_API void msopt_f16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  msopt::kernels().f16_to_f32(src, dst, n);
}

// Selects the kernels of one instruction set ("scalar", "avx2", "avx512") for
// the whole process; returns kOk, kErrNull for a NULL name, or kErrConfig when
// the name is unknown or this CPU lacks it.
int msopt_select_isa(const char *name) {
  if (name == nullptr) return msopt::fail(msopt::kErrNull, "msopt_select_isa: name is NULL");
  const msopt::Isa *t = msopt::isa_for(name);
  if (t == nullptr)
    return msopt::fail(msopt::kErrConfig,
                       "msopt_select_isa: '%s' is %s (valid names: %s; this CPU supports: %s)",
                       name, msopt::find_isa(name) ? "not supported by this CPU" : "unknown",
                       msopt::all_isas(), msopt::supported_isas());
  msopt::g_isa.store(t, std::memory_order_release);
  return msopt::kOk;
}


// What native_info() reports: the instruction sets this CPU runs, the kernels'
// OpenMP thread count and the compiler flags the library was built with.
MSOPT_API const char *msopt_supported_isas(void) { return msopt::supported_isas(); }

MSOPT_API int msopt_kernel_threads(void) { return msopt::kernel_threads(); }

MSOPT_API const char *msopt_build_flags(void) { return MSOPT_BUILD_FLAGS; }
