// Exact top-k by magnitude, the rule every selection follows (the CPU's
// kernels/topk.cpp and the CUDA kernels of ops/cuda/dgc_select.cu): the k entries of
// largest |x|, ties broken by the lower index, written in ascending index order.
//
// Magnitudes compare as integers: the float's bits with the sign cleared
// (key), which order like |x| for every non-NaN value, and a NaN above +inf.
// The k-th largest key T is found digit by digit, most significant first
// (kRadixLevels digits of kRadixWidth[l] bits at kRadixShift[l]); an entry is
// selected when its key is above T, or equal to T and among the first `need`
// such entries by index, `need` being what the digits left after the keys
// above T.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/rules.h"

namespace msopt {
namespace radix {

constexpr int kRadixLevels = 3;
constexpr int kRadixShift[kRadixLevels] = {21, 10, 0};
constexpr int kRadixWidth[kRadixLevels] = {11, 11, 10};
constexpr int kRadixMaxBins = 1 << 11;

MSOPT_HD inline uint32_t magnitude_key(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x) & 0x7fffffffu;
#else
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b & 0x7fffffffu;
#endif
}


}  // namespace radix
}  // namespace msopt
