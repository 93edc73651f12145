// What every native kernel shares, whatever its instruction set: the element
// types, the storage of compact moments, candidate gathering for top-k, and the
// threads.  The kernels themselves, their per-call types and the table of one
// instruction set's kernels are kernels/table.h's.
//
// No MindSpore or Python headers here or in any kernel source.
#pragma once

#include <cstddef>
#include <cstdint>

namespace msopt {

// IEEE binary16 stored as raw bits.
using half_bits = uint16_t;

// How a multi-tensor Adam call stores its moments (docs/algorithms.md §1.1).
//   kF32:  m, v float32
//   kBf16: m, v bfloat16 bits (round to nearest even)
//   kQ8:   m int8, v uint8 codes in blocks of kQ8Block elements (per tensor, from its
//          first element), one float32 absmax per block in m_scale / v_scale
enum class Moments { kF32, kBf16, kQ8 };
constexpr int64_t kQ8Block = 256;
// The small-float codes of the int8 moments: magnitude / absmax with these exponent and
// mantissa bits (m: sign + 7 bits, v: 8 bits).
constexpr int kQ8MExp = 4, kQ8MMan = 3, kQ8VExp = 5, kQ8VMan = 3;

// Candidate gathering for exact top-k selection: every index i whose magnitude
// key (core/radix.h: |x_i| as an integer, a NaN above +inf) is at least
// threshold_key is appended to the calling thread's slot range
// slots[t * cap, (t + 1) * cap); counts[t] may exceed cap (overflow: the
// surplus is counted, not stored).  Threads own ascending contiguous ranges,
// so concatenating the slot ranges in thread order gives ascending indices.
constexpr int kMaxThreads = 256;
struct Gather {
  uint32_t threshold_key;
  int64_t cap;
  int32_t *slots;
  int64_t counts[kMaxThreads];
};

// Elements below which a kernel stays on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;

// Threads the kernels use: OpenMP's maximum, capped at kMaxThreads.
int kernel_threads();

}  // namespace msopt
