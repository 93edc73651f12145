// The compact-moment codes of Adam (Moments::kBf16, Moments::kQ8 in
// core/kernels.h): bfloat16 and the int8 small-float codes, element by element
// (Bf16View), by block into float32 buffers (Q8Coder, with AVX2 and AVX-512
// steps of the same bits; AVX-512 decodes 16 elements into registers), and the
// views adam_view_loop (kernels/adam.h) reads and writes moments through.
// docs/algorithms.md §1.1; the numpy rules are reference.py's bf16_* and q8_*.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/adam_codecs.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/kernels.h"
#include "core/rules.h"
#include "kernels/half.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// bfloat16: the top 16 bits of a float32, rounded to nearest even; a NaN keeps
// its sign and top payload bits and is made quiet.
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

inline float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// A chunk's bfloat16 moments, read and written in place element by element.
struct Bf16View {
  uint16_t *mq, *vq;
  void get(int64_t i, float &m, float &v) const {
    m = bf16_to_f32(mq[i]);
    v = bf16_to_f32(vq[i]);
  }
  void put(int64_t i, float m, float v) const {
    mq[i] = f32_to_bf16(m);
    vq[i] = f32_to_bf16(v);
  }
};

// int8: a magnitude y in [0, 1] (x / absmax) as a small float with kExp exponent
// and kMan mantissa bits and no subnormals: code 0 is 0, code c > 0 is
// 2^(c / 2^kMan - 2^kExp + 1) * (1 + (c % 2^kMan) / 2^kMan), up to kTopCode,
// which is exactly 1 (so a block's absmax element is stored exactly; the
// codes above it go unused).  The code's bits are a float32's exponent and top
// mantissa bits with the exponent rebiased, so encoding is integer arithmetic
// on the float32 bits, clamped to [0, kTopCode]: values below 2^(1-2^kExp)
// (about) become 0, values above 1 saturate.  Decoding is a shift and an add.
//
// Rounding is stochastic: 16 random bits r are added just below the kept
// mantissa bits before they are cut, so y rounds up with probability equal to
// its dropped fraction (to 16 bits), and the stored value's expectation is y.
// Rounding to nearest would hold an element whose moment moves by less than
// half a code step per update (v with beta2 = 0.999 always does) at its old
// code for good.
template <int kExp, int kMan>
struct SmallFloat {
  static constexpr int kShift = 23 - kMan;
  static constexpr int kRandShift = kShift - 16;  // where the 16 random bits go
  static constexpr uint32_t kRebias = static_cast<uint32_t>(128 - (1 << kExp)) << 23;
  static constexpr int32_t kTopCode = ((1 << kExp) - 1) << kMan;
  static_assert(kRandShift >= 0, "16 random bits fit below the kept mantissa bits");

  // kKeepNonzero: a y > 0 that would round to 0 gets the smallest code instead.
  // r: random bits, the low 16 used.
  template <bool kKeepNonzero = false>
  static uint32_t encode(float y, uint32_t r) {
    const uint32_t ax = f32_bits(y);
    // below 2^(1-2^kExp) the difference wraps negative (as int32): code 0, or 1 when kept
    const int32_t code =
        static_cast<int32_t>(ax - kRebias + ((r & 0xffffu) << kRandShift)) >> kShift;
    const int32_t lowest = kKeepNonzero ? static_cast<int32_t>(std::min(ax, 1u)) : 0;  // y > 0
    return static_cast<uint32_t>(std::min(std::max(code, lowest), kTopCode));
  }
  // The float32 bits of value(c) (integer operations only, so that loops vectorize).
  static uint32_t decode_bits(uint32_t c) {
    return ((c << kShift) + kRebias) & (0u - static_cast<uint32_t>(c != 0));
  }
  static float decode(uint32_t c) { return bits_f32(decode_bits(c)); }
};
static_assert(SmallFloat<4, 3>::kRebias == 112u << 23, "128 - 2^4");
static_assert(SmallFloat<4, 3>::kTopCode == 120 && SmallFloat<5, 3>::kTopCode == 248,
              "the top code is 1.0");

using Q8MCode = SmallFloat<kQ8MExp, kQ8MMan>;
using Q8VCode = SmallFloat<kQ8VExp, kQ8VMan>;

// One element's codes, the rules every int8 moment loop goes through
// (the AVX2 and AVX-512 steps below are the same bits, 32 or 16 at a time).
// m: value(|c|) * scale with c's sign; v: value(c) * scale.
inline float q8_decode_m(int8_t code, float scale) {
  const int32_t c = code;
  const uint32_t sign = static_cast<uint32_t>(c) & 0x80000000u;
  const uint32_t mag = static_cast<uint32_t>((c ^ (c >> 31)) - (c >> 31));  // |c|
  return bits_f32(f32_bits(Q8MCode::decode(mag) * scale) | sign);
}
inline float q8_decode_v(uint8_t code, float scale) { return Q8VCode::decode(code) * scale; }
// m's code from m and the reciprocal of its scale, rounded with the low 16 bits
// of r, m's sign kept as the code's sign.  |m * (1 / scale)|: the same as
// |m| * (1 / scale), and a NaN (inf * 0 where the scale is inf) positive, so
// that it saturates at the top code as any y > 1.
inline int8_t q8_encode_m(float m, float inv_scale, uint32_t r) {
  const int32_t c = static_cast<int32_t>(Q8MCode::encode(std::fabs(m * inv_scale), r));
  const int32_t neg = static_cast<int32_t>(f32_bits(m) >> 31);  // 1: sign bit set
  return static_cast<int8_t>((c ^ -neg) + neg);                 // -c when negative
}
// v's code, rounded with the high 16 bits of r; a positive v never becomes code
// 0 (its m may not have: m / sqrt(v) must stay bounded).
inline uint8_t q8_encode_v(float v, float inv_scale, uint32_t r) {
  return static_cast<uint8_t>(Q8VCode::encode<true>(std::fabs(v * inv_scale), r >> 16));
}

#if defined(__AVX2__) && !defined(__AVX512F__)
// rules::q8_round_bits of 8 lanes, from key + j * kQ8Golden.
inline __m256i q8_round_bits8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
}

// SmallFloat<kExp, kMan>::encode's rounding of 8 magnitudes with their 16
// random bits r (before its clamp): the code as int32, negative below the
// smallest code, large for a NaN.
template <class Code>
inline __m256i q8_round8(__m256i ax, __m256i r) {
  const __m256i rebias = _mm256_set1_epi32(-static_cast<int32_t>(Code::kRebias));
  return _mm256_srai_epi32(
      _mm256_add_epi32(_mm256_add_epi32(ax, rebias), _mm256_slli_epi32(r, Code::kRandShift)),
      Code::kShift);
}

// Q8Loops::encode over 32 elements with AVX2, the same bits: the
// narrowing to bytes is done by saturating packs (they keep a code's order, so
// the clamp to [lowest, top] can follow them on 16 bits), m's sign comes from
// the same packs of m's bits and is applied to the bytes by one vpsignb, and
// one permute puts the bytes back in order (the packs interleave the lanes).
// The random bits of element j0 + j are rules::q8_round_bits(key, j0 + j).
inline void q8_encode32_avx2(const float *m, const float *v, float mi, float vi, int8_t *mq,
                             uint8_t *vq, uint32_t key, uint32_t j0) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const __m256 vmi = _mm256_set1_ps(mi), vvi = _mm256_set1_ps(vi);
  // key + (j0 + j) * golden for the 8 lanes, advanced by 8 * golden a step
  const uint32_t g = rules::kQ8Golden;
  __m256i idx = _mm256_add_epi32(
      _mm256_set1_epi32(static_cast<int32_t>(key + j0 * g)),
      _mm256_setr_epi32(0, static_cast<int32_t>(g), static_cast<int32_t>(2 * g),
                        static_cast<int32_t>(3 * g), static_cast<int32_t>(4 * g),
                        static_cast<int32_t>(5 * g), static_cast<int32_t>(6 * g),
                        static_cast<int32_t>(7 * g)));
  const __m256i step = _mm256_set1_epi32(static_cast<int32_t>(8 * g));
  __m256i mc[4], mbits[4], vc[4];
  for (int k = 0; k < 4; ++k) {
    const __m256i bits = q8_round_bits8(idx);
    idx = _mm256_add_epi32(idx, step);
    const __m256 x = _mm256_loadu_ps(m + 8 * k);
    mbits[k] = _mm256_castps_si256(x);
    mc[k] = q8_round8<Q8MCode>(
        _mm256_castps_si256(_mm256_and_ps(_mm256_mul_ps(x, vmi), absmask)),
        _mm256_and_si256(bits, low16));
    const __m256i ay = _mm256_castps_si256(
        _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), vvi), absmask));
    // kKeepNonzero: at least min(bits, 1), so a y > 0 gets code 1
    vc[k] = _mm256_max_epi32(q8_round8<Q8VCode>(ay, _mm256_srli_epi32(bits, 16)),
                             _mm256_min_epu32(ay, _mm256_set1_epi32(1)));
  }
  const __m256i zero = _mm256_setzero_si256();
  const __m256i mtop = _mm256_set1_epi16(Q8MCode::kTopCode);
  const __m256i vtop = _mm256_set1_epi16(Q8VCode::kTopCode);
  const auto mclamp = [&](__m256i a, __m256i b) {
    return _mm256_min_epi16(_mm256_max_epi16(_mm256_packs_epi32(a, b), zero), mtop);
  };
  const __m256i mbytes = _mm256_packs_epi16(mclamp(mc[0], mc[1]), mclamp(mc[2], mc[3]));
  const __m256i signs = _mm256_packs_epi16(_mm256_packs_epi32(mbits[0], mbits[1]),
                                           _mm256_packs_epi32(mbits[2], mbits[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(mq),
                      _mm256_permutevar8x32_epi32(_mm256_sign_epi8(mbytes, signs), order));
  const auto vclamp = [&](__m256i a, __m256i b) {
    return _mm256_min_epi16(_mm256_packs_epi32(a, b), vtop);
  };
  const __m256i vbytes = _mm256_packus_epi16(vclamp(vc[0], vc[1]), vclamp(vc[2], vc[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(vq), _mm256_permutevar8x32_epi32(vbytes, order));
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// Q8Loops::decode over 32 elements with AVX2: vpsignd by the code zeroes
// code 0's bits in one instruction.
inline void q8_decode32_avx2(const int8_t *mq, const uint8_t *vq, float ms, float vs, float *m,
                             float *v) {
  const __m256i mreb = _mm256_set1_epi32(static_cast<int32_t>(Q8MCode::kRebias));
  const __m256i vreb = _mm256_set1_epi32(static_cast<int32_t>(Q8VCode::kRebias));
  const __m256i signbit = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  const __m256 vms = _mm256_set1_ps(ms), vvs = _mm256_set1_ps(vs);
  for (int k = 0; k < 4; ++k) {
    const __m256i c = _mm256_cvtepi8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i *>(mq + 8 * k)));
    const __m256i mag = _mm256_abs_epi32(c);
    const __m256i mbits =
        _mm256_sign_epi32(_mm256_add_epi32(_mm256_slli_epi32(mag, Q8MCode::kShift), mreb), mag);
    const __m256 mval = _mm256_mul_ps(_mm256_castsi256_ps(mbits), vms);
    _mm256_storeu_ps(m + 8 * k,
                     _mm256_or_ps(mval, _mm256_castsi256_ps(_mm256_and_si256(c, signbit))));
    const __m256i u = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i *>(vq + 8 * k)));
    const __m256i vbits =
        _mm256_sign_epi32(_mm256_add_epi32(_mm256_slli_epi32(u, Q8VCode::kShift), vreb), u);
    _mm256_storeu_ps(v + 8 * k, _mm256_mul_ps(_mm256_castsi256_ps(vbits), vvs));
  }
}
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
// Q8Loops::encode over 16 elements with AVX-512, the same bits: the rounding
// and clamp of SmallFloat::encode on 32-bit lanes, m's sign applied by a masked
// negation, and one truncating narrow (vpmovdb) per code.  `idx` holds
// key + (j0 + j) * kQ8Golden for the 16 lanes.
inline void q8_encode16_avx512(const float *m, const float *v, __m512 vmi, __m512 vvi,
                               int8_t *mq, uint8_t *vq, __m512i idx) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
  // rules::q8_round_bits
  __m512i bits = _mm512_xor_si512(idx, _mm512_srli_epi32(idx, 16));
  bits = _mm512_mullo_epi32(bits, _mm512_set1_epi32(0x7feb352d));
  bits = _mm512_xor_si512(bits, _mm512_srli_epi32(bits, 15));
  const __m512i mbits = _mm512_castps_si512(_mm512_loadu_ps(m));
  const __m512i ax = _mm512_and_si512(
      _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(mbits), vmi)), absmask);
  const __m512i mround = _mm512_slli_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0xffff)),
                                           Q8MCode::kRandShift);
  __m512i mc = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(ax, _mm512_set1_epi32(Q8MCode::kRebias)), mround),
      Q8MCode::kShift);
  mc = _mm512_min_epi32(_mm512_max_epi32(mc, zero), _mm512_set1_epi32(Q8MCode::kTopCode));
  mc = _mm512_mask_sub_epi32(mc, _mm512_cmplt_epi32_mask(mbits, zero), zero, mc);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(mq), _mm512_cvtepi32_epi8(mc));
  const __m512i ay = _mm512_and_si512(
      _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(v), vvi)), absmask);
  __m512i vc = _mm512_srai_epi32(
      _mm512_add_epi32(_mm512_sub_epi32(ay, _mm512_set1_epi32(Q8VCode::kRebias)),
                       _mm512_slli_epi32(_mm512_srli_epi32(bits, 16), Q8VCode::kRandShift)),
      Q8VCode::kShift);
  // kKeepNonzero: at least min(|y| bits, 1), so a y > 0 gets code 1
  vc = _mm512_max_epi32(vc, _mm512_min_epu32(ay, _mm512_set1_epi32(1)));
  vc = _mm512_min_epi32(vc, _mm512_set1_epi32(Q8VCode::kTopCode));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(vq), _mm512_cvtepi32_epi8(vc));
}

// Q8Loops::decode over 16 elements with AVX-512, into registers (the Adam
// pass of kernels/adam.h reads them there): code 0's bits zeroed by a masked
// add, m's sign or-ed in from the sign-extended code.
inline void q8_decode16_avx512(const int8_t *mq, const uint8_t *vq, __m512 vms, __m512 vvs,
                               __m512 &m, __m512 &v) {
  const __m512i c =
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(mq)));
  const __m512i mag = _mm512_abs_epi32(c);
  const __m512i mbits =
      _mm512_maskz_add_epi32(_mm512_test_epi32_mask(mag, mag),
                             _mm512_slli_epi32(mag, Q8MCode::kShift),
                             _mm512_set1_epi32(static_cast<int32_t>(Q8MCode::kRebias)));
  const __m512i mval = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(mbits), vms));
  const __m512i sign = _mm512_and_si512(c, _mm512_set1_epi32(static_cast<int32_t>(0x80000000u)));
  m = _mm512_castsi512_ps(_mm512_or_si512(mval, sign));
  const __m512i u =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(vq)));
  const __m512i vbits =
      _mm512_maskz_add_epi32(_mm512_test_epi32_mask(u, u), _mm512_slli_epi32(u, Q8VCode::kShift),
                             _mm512_set1_epi32(static_cast<int32_t>(Q8VCode::kRebias)));
  v = _mm512_mul_ps(_mm512_castsi512_ps(vbits), vvs);
}
#endif

// How a block's codes are decoded and encoded: by these loops (any ISA, any
// block), or, for a whole block (Len a compile-time kQ8Block) with AVX2 (32
// elements a step) or AVX-512 (16, encoding only: its decoding runs inside
// the Adam pass), by the intrinsics above (the same bits).
struct Q8Loops {
  // The moments: value(|c|) * scale with c's sign (SmallFloat; code 0 is 0),
  // into float32 buffers.  A loop of its own, so that the Adam loop over the
  // buffers has no 8-bit types: with them the compiler steps 32 elements at a
  // time and runs out of registers.
  template <class Len>
  static void decode(const int8_t *mq, const uint8_t *vq, Len len, float ms, float vs, float *m,
                     float *v) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      m[j] = q8_decode_m(mq[j], ms);
      v[j] = q8_decode_v(vq[j], vs);
    }
  }
  // The codes, from the new moments and the reciprocals of their scales (the
  // rule SmallFloat::encode; m's sign kept as the code's sign), rounded with
  // rules::q8_round_bits(key, j0 + j) for element j.
  template <class Len>
  static void encode(const float *m, const float *v, Len len, float mi, float vi, int8_t *mq,
                     uint8_t *vq, uint32_t key, uint32_t j0) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const uint32_t r = rules::q8_round_bits(key, j0 + static_cast<uint32_t>(j));
      mq[j] = q8_encode_m(m[j], mi, r);
      vq[j] = q8_encode_v(v[j], vi, r);
    }
  }
};

#if defined(__AVX2__) && !defined(__AVX512F__)
struct Q8Avx2Steps {
  template <class Len>
  static void decode(const int8_t *mq, const uint8_t *vq, Len len, float ms, float vs, float *m,
                     float *v) {
    static_assert(Len::value % 32 == 0, "whole blocks are made of 32-element steps");
    for (int64_t j = 0; j < len; j += 32) q8_decode32_avx2(mq + j, vq + j, ms, vs, m + j, v + j);
  }
  template <class Len>
  static void encode(const float *m, const float *v, Len len, float mi, float vi, int8_t *mq,
                     uint8_t *vq, uint32_t key, uint32_t j0) {
    for (int64_t j = 0; j < len; j += 32)
      q8_encode32_avx2(m + j, v + j, mi, vi, mq + j, vq + j, key,
                       j0 + static_cast<uint32_t>(j));
  }
};
template <class Len>
using Q8Coder =
    typename std::conditional<std::is_same<Len, int64_t>::value, Q8Loops, Q8Avx2Steps>::type;
#elif defined(__AVX512F__) && defined(__AVX512BW__)
// Whole blocks are decoded inside the Adam pass (kernels/adam.h, q8_adam_avx512).
struct Q8Avx512Steps {
  template <class Len>
  static void encode(const float *m, const float *v, Len len, float mi, float vi, int8_t *mq,
                     uint8_t *vq, uint32_t key, uint32_t j0) {
    static_assert(Len::value % 16 == 0, "whole blocks are made of 16-element steps");
    const __m512 vmi = _mm512_set1_ps(mi), vvi = _mm512_set1_ps(vi);
    const uint32_t g = rules::kQ8Golden;
    // key + (j0 + j) * golden for the 16 lanes, advanced by 16 * golden a step
    __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(static_cast<int32_t>(key + j0 * g)),
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int32_t>(g))));
    const __m512i step = _mm512_set1_epi32(static_cast<int32_t>(16 * g));
    for (int64_t j = 0; j < len; j += 16) {
      q8_encode16_avx512(m + j, v + j, vmi, vvi, mq + j, vq + j, idx);
      idx = _mm512_add_epi32(idx, step);
    }
  }
};
template <class Len>
using Q8Coder =
    typename std::conditional<std::is_same<Len, int64_t>::value, Q8Loops, Q8Avx512Steps>::type;
#else
template <class Len>
using Q8Coder = Q8Loops;
#endif

// Moments held in float32 buffers (a decoded block), updated in place.
struct BufferView {
  float *mb, *vb;
  void get(int64_t i, float &m, float &v) const {
    m = mb[i];
    v = vb[i];
  }
  void put(int64_t i, float m, float v) const {
    mb[i] = m;
    vb[i] = v;
  }
};

// The block's scales from the absmax of its new moments (0 below the smallest
// normal float32, so that the reciprocal is finite), then its codes; a positive
// v below the smallest code gets that code rather than 0.  key: the tensor's
// rounding key; j0: the block's first element in the tensor.
template <class Len>
inline void q8_encode_block(const float *m, const float *v, Len len, float am, float av,
                            int8_t *mq, uint8_t *vq, float &m_scale, float &v_scale,
                            uint32_t key, uint32_t j0) {
  const float ms = am < 1.17549435e-38f ? 0.0f : am, vs = av < 1.17549435e-38f ? 0.0f : av;
  m_scale = ms;
  v_scale = vs;
  const float mi = ms > 0.0f ? 1.0f / ms : 0.0f, vi = vs > 0.0f ? 1.0f / vs : 0.0f;
  Q8Coder<Len>::encode(m, v, len, mi, vi, mq, vq, key, j0);
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
