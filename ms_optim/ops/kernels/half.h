// float16 <-> float32 conversions: exact software rounding (tails and the
// scalar build), F16C / AVX-512 instructions where the unit's flags allow, and
// the block size float16 data is stepped in.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/half.h"
#endif

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/kernels.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// A float32's bits and back.
inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

inline float bits_f32(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Exact software conversions (round to nearest even), used for tails and by
// the scalar build.
inline float half_to_float_sw(half_bits h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24 is exact in float32
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &mag, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan (payload kept)
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return bits_f32(bits);
}

inline half_bits float_to_half_sw(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or nan; nan stays a quiet nan
    const uint32_t nan_bits = ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u;
    return static_cast<half_bits>(sign | 0x7c00u | nan_bits);
  }
  if (ax >= 0x477ff000u) return static_cast<half_bits>(sign | 0x7c00u);  // rounds to inf
  if (ax < 0x38800000u) {
    // Result is subnormal or zero.  Adding 0.5f aligns the value so that the
    // float32 adder performs the round-to-nearest-even at bit 2^-24.
    float mag;
    std::memcpy(&mag, &ax, 4);
    mag += 0.5f;
    uint32_t mb;
    std::memcpy(&mb, &mag, 4);
    return static_cast<half_bits>(sign | (mb - 0x3f000000u));
  }
  // Normal: rebias the exponent and round the 13 dropped bits to nearest even.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t r = ax + 0xc8000fffu + odd;  // (15 - 127) << 23, plus rounding
  return static_cast<half_bits>(sign | (r >> 13));
}

void f16_to_f32(const half_bits *src, float *dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
                                  reinterpret_cast<const __m256i *>(src + i))));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i *>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = half_to_float_sw(src[i]);
}

void f32_to_f16(const float *src, half_bits *dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) dst[i] = float_to_half_sw(src[i]);
}

// float16 data is processed in blocks converted through stack buffers, so the
// float32 loops (kernels/adam.h) serve both element types.
constexpr int64_t kHalfBlock = 1024;

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
