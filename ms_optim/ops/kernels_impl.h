// ms_optim kernels, written once and compiled once per instruction set.
//
// Include this file from exactly one translation unit per ISA after defining
// MSOPT_ISA_NS (scalar, avx2 or avx512); that unit is compiled with the matching
// -m flags, so the plain loops below are vectorized for that ISA by the compiler
// (`omp simd`, -O3 -fno-math-errno) and the float16 conversions use F16C /
// AVX-512 instructions where available.  Threads come from OpenMP.
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels_impl.h"
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels.h"
#include "loops_impl.h"
#include "rules.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// ---------------------------------------------------------------- threading --

// Thread t's share of [0, n) among nt threads: contiguous, 64-element aligned.
struct Range {
  int64_t lo, hi;
};
inline Range thread_range(int64_t n, int64_t nt, int64_t t) {
  const int64_t per = ((n + nt - 1) / nt + 63) & ~int64_t{63};
  const int64_t lo = std::min(n, t * per);
  return {lo, std::min(n, lo + per)};
}

// Split [0, n) into one range per thread and run body(lo, hi) on each.  Small
// inputs (`work` elements, default n) stay on the calling thread.
template <class Body>
void parallel_ranges(int64_t n, const Body &body, int64_t work = -1) {
  const int nthreads = kernel_threads();
  if ((work < 0 ? n : work) < kParallelMin || nthreads < 2) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    const Range r = thread_range(n, omp_get_num_threads(), omp_get_thread_num());
    if (r.lo < r.hi) body(r.lo, r.hi);
  }
}

// Reductions: body(lo, hi, acc) adds K sums over [lo, hi) into acc[0..K).  The
// per-thread partials are combined in thread order, so the result depends only
// on n and the thread count.
template <int K, class Body>
void parallel_sums(int64_t n, double *out, const Body &body) {
  for (int k = 0; k < K; ++k) out[k] = 0.0;
  const int nthreads = kernel_threads();
  if (n < kParallelMin || nthreads < 2) {
    body(int64_t{0}, n, out);
    return;
  }
  double partial[kMaxThreads][K] = {};
#pragma omp parallel num_threads(nthreads)
  {
    const int t = omp_get_thread_num();
    const Range r = thread_range(n, omp_get_num_threads(), t);
    if (r.lo < r.hi) body(r.lo, r.hi, partial[t]);
  }
  for (int t = 0; t < kMaxThreads; ++t)
    for (int k = 0; k < K; ++k) out[k] += partial[t][k];
}

// Calls body(nesterov, decay) with both flags as std::integral_constant<bool>,
// so that a loop is compiled once per combination without branches inside.
template <class Body>
inline void with_flags(bool nesterov, bool decay, const Body &body) {
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (nesterov) {
    if (decay) body(T_{}, T_{}); else body(T_{}, F_{});
  } else {
    if (decay) body(F_{}, T_{}); else body(F_{}, F_{});
  }
}

// ------------------------------------------------------ float16 <-> float32 --

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
// float32 loops below serve both element types.
constexpr int64_t kHalfBlock = 1024;

// --------------------------------------------------------------------- Adam --

// One Adam step over float32 elements (MindSpore's AdamOffload rule,
// loops_impl.h's adam_loop):
//   g' = (g + wd * p) * inv_scale
//   m  = beta1 * m + (1 - beta1) * g'
//   v  = beta2 * v + (1 - beta2) * g' * g'
//   d  = -lr_t * (m / (sqrt(v) + eps))        (Nesterov: beta1*m + (1-beta1)*g')
// kDelta: write d to `out`; otherwise add d to p (`out` is p).  Delta kernels
// take the decay already applied (their parameter lives elsewhere).  kDecay is
// false when wd == 0, so the rule never forms 0 * p (NaN for an infinite p).
// kDecoupled: AdamW, d = -lr_t * (direction + wd * p).
//
// with_adam_args calls body(step, grad, nesterov, decay, decoupled) with `a` as
// the loops' constants and gradient reader and its three flags as
// std::integral_constant<bool>, so each loop (float32 moments, and the
// compact-moment loop below) is compiled once per combination, without
// branches inside.
template <bool kDelta, class Body>
inline void with_adam_args(const AdamArgs &a, const Body &body) {
  const AdamStep<float> step{a.beta1, 1.0f - a.beta1, a.beta2, 1.0f - a.beta2,
                             a.eps,   -a.lr_t,        a.weight_decay};
  const ScaledGrad<float> grad{a.inv_scale};
  with_flags(a.nesterov, !kDelta && a.weight_decay != 0.0f, [&](auto nesterov, auto decay) {
    if (a.decoupled)
      body(step, grad, nesterov, decay, std::true_type{});
    else
      body(step, grad, nesterov, decay, std::false_type{});
  });
}

template <bool kDelta>
inline void adam_f32_range(float *out, float *m, float *v, const float *g, int64_t n,
                           const AdamArgs &a) {
  with_adam_args<kDelta>(a, [&](const auto &step, auto grad, auto nesterov, auto decay,
                                auto decoupled) {
    adam_loop<float, kDelta, decltype(nesterov)::value, decltype(decay)::value,
              ScaledGrad<float>, decltype(decoupled)::value>(out, m, v, g, n, step, grad);
  });
}

// ------------------------------------------------------- compact moments --
// Each codec decodes a chunk of a tensor's moments [lo, lo + len) into float32
// buffers and encodes them back after the step (docs/ALGORITHMS.md §1.1; the
// numpy rules are reference.py's bf16_* and q8_*).  kChunk: the elements per
// chunk; kBlock: the unit a thread's share must be made of (1: any split).

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
// on the float32 bits (rounding the dropped mantissa bits to nearest even, as
// float_to_half_sw), clamped to [0, kTopCode]: values below 2^(1-2^kExp)
// (about) become 0, values above 1 saturate.  Decoding is a shift and an add.
template <int kExp, int kMan>
struct SmallFloat {
  static constexpr int kShift = 23 - kMan;
  static constexpr uint32_t kRebias = static_cast<uint32_t>(128 - (1 << kExp)) << 23;
  static constexpr int32_t kTopCode = ((1 << kExp) - 1) << kMan;

  // kKeepNonzero: a y > 0 that would round to 0 gets the smallest code instead.
  template <bool kKeepNonzero = false>
  static uint32_t encode(float y) {
    const uint32_t ax = f32_bits(y);
    const uint32_t odd = (ax >> kShift) & 1u;
    // below 2^(1-2^kExp) the difference wraps negative (as int32): code 0, or 1 when kept
    const int32_t code = static_cast<int32_t>(ax - kRebias + ((1u << (kShift - 1)) - 1u) + odd) >> kShift;
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

#if defined(__AVX2__) && !defined(__AVX512F__)
// SmallFloat<kExp, kMan>::encode's rounding of 8 magnitudes (before its clamp):
// the code as int32, negative below the smallest code, large for a NaN.
template <class Code>
inline __m256i q8_round8(__m256i ax) {
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(ax, Code::kShift), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_set1_epi32(
      static_cast<int32_t>(((1u << (Code::kShift - 1)) - 1u) - Code::kRebias));
  return _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(ax, bias), odd), Code::kShift);
}

// Q8Loops::encode over 32 elements with AVX2, the same bits: the
// narrowing to bytes is done by saturating packs (they keep a code's order, so
// the clamp to [lowest, top] can follow them on 16 bits), m's sign comes from
// the same packs of m's bits and is applied to the bytes by one vpsignb, and
// one permute puts the bytes back in order (the packs interleave the lanes).
inline void q8_encode32_avx2(const float *m, const float *v, float mi, float vi, int8_t *mq,
                             uint8_t *vq) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256 vmi = _mm256_set1_ps(mi), vvi = _mm256_set1_ps(vi);
  __m256i mc[4], mbits[4], vc[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 x = _mm256_loadu_ps(m + 8 * k);
    mbits[k] = _mm256_castps_si256(x);
    mc[k] = q8_round8<Q8MCode>(
        _mm256_castps_si256(_mm256_and_ps(_mm256_mul_ps(x, vmi), absmask)));
    const __m256i ay = _mm256_castps_si256(
        _mm256_and_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), vvi), absmask));
    // kKeepNonzero: at least min(bits, 1), so a y > 0 gets code 1
    vc[k] = _mm256_max_epi32(q8_round8<Q8VCode>(ay), _mm256_min_epu32(ay, _mm256_set1_epi32(1)));
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

// How a block's codes are decoded and encoded: by these loops (any ISA, any
// block), or, for a whole block (Len a compile-time kQ8Block) with AVX2, 32
// elements a step by the intrinsics above (the same bits).
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
      const int32_t c = mq[j];
      const uint32_t sign = static_cast<uint32_t>(c) & 0x80000000u;
      const uint32_t mag = static_cast<uint32_t>((c ^ (c >> 31)) - (c >> 31));  // |c|
      m[j] = bits_f32(f32_bits(Q8MCode::decode(mag) * ms) | sign);
      v[j] = Q8VCode::decode(vq[j]) * vs;
    }
  }
  // The codes, from the new moments and the reciprocals of their scales (the
  // rule SmallFloat::encode; m's sign kept as the code's sign).
  template <class Len>
  static void encode(const float *m, const float *v, Len len, float mi, float vi, int8_t *mq,
                     uint8_t *vq) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      // |x * (1 / scale)|: the same as |x| * (1 / scale), and a NaN (inf * 0 where the
      // scale is inf) positive, so that it saturates at the top code as any y > 1
      const int32_t c = static_cast<int32_t>(Q8MCode::encode(std::fabs(m[j] * mi)));
      const int32_t neg = static_cast<int32_t>(f32_bits(m[j]) >> 31);  // 1: sign bit set
      mq[j] = static_cast<int8_t>((c ^ -neg) + neg);                   // -c when negative
      // a positive v never becomes code 0 (its m may not have: m / sqrt(v) must stay bounded)
      vq[j] = static_cast<uint8_t>(Q8VCode::encode<true>(std::fabs(v[j] * vi)));
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
                     uint8_t *vq) {
    for (int64_t j = 0; j < len; j += 32) q8_encode32_avx2(m + j, v + j, mi, vi, mq + j, vq + j);
  }
};
template <class Len>
using Q8Coder =
    typename std::conditional<std::is_same<Len, int64_t>::value, Q8Loops, Q8Avx2Steps>::type;
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
// v below the smallest code gets that code rather than 0.
template <class Len>
inline void q8_encode_block(const float *m, const float *v, Len len, float am, float av,
                            int8_t *mq, uint8_t *vq, float &m_scale, float &v_scale) {
  const float ms = am < 1.17549435e-38f ? 0.0f : am, vs = av < 1.17549435e-38f ? 0.0f : av;
  m_scale = ms;
  v_scale = vs;
  const float mi = ms > 0.0f ? 1.0f / ms : 0.0f, vi = vs > 0.0f ? 1.0f / vs : 0.0f;
  Q8Coder<Len>::encode(m, v, len, mi, vi, mq, vq);
}

// Adam over n float32 elements whose moments live in a codec's view:
// io.get(i, m, v) gives element i's moments as float32, io.put(i, m, v) takes
// the new ones; am / av return the largest |m|, |v| of the new moments (NaN
// ignored).  The per-element math and its order are adam_loop's (rules.h).
// bfloat16 codes are read and written inside this loop (their integer work
// overlaps the square root and the division; decoding into buffers first
// measured 1.2x slower); int8 blocks come decoded in buffers (q8_block_step).
template <bool kDelta, bool kNesterov, bool kDecay, bool kDecoupled, class IO, class Len>
inline void adam_view_loop(float *__restrict out, const float *__restrict g, Len n,
                           const AdamStep<float> &a, ScaledGrad<float> grad, const IO io,
                           float &am, float &av) {
  const float b1 = a.beta1, c1 = a.c1, b2 = a.beta2, c2 = a.c2, eps = a.eps;
  const float nlr = a.neg_lr, wd = a.wd;
  float amx = 0.0f, avx = 0.0f;
#pragma omp simd reduction(max : amx, avx)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = grad(kDecay && !kDecoupled ? rules::decayed_grad(g[i], out[i], wd) : g[i]);
    float mi, vi;
    io.get(i, mi, vi);
    rules::moments(gi, mi, vi, b1, c1, b2, c2);
    io.put(i, mi, vi);
    amx = std::max(amx, std::fabs(mi));
    avx = std::max(avx, std::fabs(vi));
    adam_finish<float, kDelta, kNesterov, kDecay, kDecoupled>(gi, mi, vi, out[i], b1, c1, eps,
                                                              wd, nlr);
  }
  am = amx;
  av = avx;
}

template <bool kDelta, class IO, class Len>
inline void adam_view_range(float *out, const float *g, Len n, const AdamArgs &a,
                            const IO &io, float &am, float &av) {
  with_adam_args<kDelta>(a, [&](const auto &step, auto grad, auto nesterov, auto decay,
                                auto decoupled) {
    adam_view_loop<kDelta, decltype(nesterov)::value, decltype(decay)::value,
                   decltype(decoupled)::value>(out, g, n, step, grad, io, am, av);
  });
}

struct Bf16Codec {
  static constexpr int64_t kChunk = kHalfBlock;
  static constexpr int64_t kBlock = 1;
  template <bool kDelta>
  static void step(const AdamTensor &x, int64_t lo, int64_t len, float *out, const float *g) {
    const Bf16View io{static_cast<uint16_t *>(x.m) + lo, static_cast<uint16_t *>(x.v) + lo};
    float am, av;
    adam_view_range<kDelta>(out, g, len, x.a, io, am, av);
  }
};

// One block of int8 moments: decode into float32 buffers, Adam over them (its
// absmax found on the way), encode with the new scales.  n is kQ8Block as a
// compile-time constant for whole blocks (no remainder loops, the AVX2 coders)
// and an int64_t for a tensor's last, partial block.
template <bool kDelta, class Len>
inline void q8_block_step(const AdamTensor &x, int64_t lo, Len n, float *out, const float *g) {
  alignas(64) float mb[kQ8Block];
  alignas(64) float vb[kQ8Block];
  int8_t *mq = static_cast<int8_t *>(x.m) + lo;
  uint8_t *vq = static_cast<uint8_t *>(x.v) + lo;
  const int64_t b = lo / kQ8Block;
  Q8Coder<Len>::decode(mq, vq, n, x.m_scale[b], x.v_scale[b], mb, vb);
  float am, av;
  adam_view_range<kDelta>(out, g, n, x.a, BufferView{mb, vb}, am, av);
  q8_encode_block(mb, vb, n, am, av, mq, vq, x.m_scale[b], x.v_scale[b]);
}

struct Q8Codec {
  static constexpr int64_t kChunk = kQ8Block;  // one block (a tensor's last one may be partial)
  static constexpr int64_t kBlock = kQ8Block;
  // lo is a multiple of kQ8Block.
  template <bool kDelta>
  static void step(const AdamTensor &x, int64_t lo, int64_t len, float *out, const float *g) {
    if (len == kQ8Block)
      q8_block_step<kDelta>(x, lo, std::integral_constant<int64_t, kQ8Block>{}, out, g);
    else
      q8_block_step<kDelta>(x, lo, len, out, g);
  }
};

// A piece [lo, hi) of one tensor of a multi-tensor Adam call, in chunks: the
// codec decodes its moments, steps and encodes them (one pass over memory);
// float16 gradients and parameters go through float32 buffers.
template <bool kDelta, bool kHalf, class Codec>
inline void adam_piece_coded(const AdamTensor &x, int64_t lo, int64_t hi) {
  alignas(64) float gb[kHalf ? Codec::kChunk : 1];
  alignas(64) float ob[kHalf ? Codec::kChunk : 1];
  for (int64_t c = lo; c < hi; c += Codec::kChunk) {
    const int64_t len = std::min(Codec::kChunk, hi - c);
    if (kHalf) {
      half_bits *out = static_cast<half_bits *>(x.out) + c;
      f16_to_f32(static_cast<const half_bits *>(x.g) + c, gb, len);
      if (!kDelta) f16_to_f32(out, ob, len);
      Codec::template step<kDelta>(x, c, len, ob, gb);
      f32_to_f16(ob, out, len);
    } else {
      Codec::template step<kDelta>(x, c, len, static_cast<float *>(x.out) + c,
                                   static_cast<const float *>(x.g) + c);
    }
  }
}

// float32 moments, used in place.  Only float16 data is taken in chunks (of
// its buffers' size): float32 data is stepped as one range.
struct F32Codec {
  static constexpr int64_t kChunk = kHalfBlock;
  template <bool kDelta>
  static void step(const AdamTensor &x, int64_t lo, int64_t len, float *out, const float *g) {
    adam_f32_range<kDelta>(out, static_cast<float *>(x.m) + lo, static_cast<float *>(x.v) + lo, g,
                           len, x.a);
  }
};

struct F32Moments {
  static constexpr int64_t kBlock = 1;
  template <bool kDelta, bool kHalf>
  static void piece(const AdamTensor &x, int64_t lo, int64_t hi) {
    if (kHalf)
      adam_piece_coded<kDelta, true, F32Codec>(x, lo, hi);
    else
      F32Codec::step<kDelta>(x, lo, hi - lo, static_cast<float *>(x.out) + lo,
                             static_cast<const float *>(x.g) + lo);
  }
};

template <class Codec>
struct CodedMoments {
  static constexpr int64_t kBlock = Codec::kBlock;
  template <bool kDelta, bool kHalf>
  static void piece(const AdamTensor &x, int64_t lo, int64_t hi) {
    adam_piece_coded<kDelta, kHalf, Codec>(x, lo, hi);
  }
};

// Every tensor's elements as one range, split once over the threads: each
// thread walks the tensors its share overlaps.  The range is counted in units
// of Store::kBlock elements (each tensor's last unit may be partial), so a
// quantization block never straddles two threads.  Adam has no other
// reduction, so no thread waits for another and the bits do not depend on
// the split.
template <bool kDelta, bool kHalf, class Store>
void adam_multi_impl(const AdamTensor *ts, int64_t count) {
  constexpr int64_t B = Store::kBlock;
  int64_t units = 0, total = 0;
  for (int64_t i = 0; i < count; ++i) {
    units += (ts[i].n + B - 1) / B;
    total += ts[i].n;
  }
  const auto body = [&](int64_t lo, int64_t hi) {  // units [lo, hi)
    int64_t off = 0;
    for (int64_t i = 0; i < count && off < hi; ++i) {
      const int64_t nu = (ts[i].n + B - 1) / B;
      const int64_t a = std::max(lo, off), b = std::min(hi, off + nu);
      if (a < b)
        Store::template piece<kDelta, kHalf>(ts[i], (a - off) * B, std::min(ts[i].n, (b - off) * B));
      off += nu;
    }
  };
  parallel_ranges(units, body, total);
}

template <class Store>
void adam_multi_store(const AdamTensor *ts, int64_t count, bool delta, bool half) {
  if (delta)
    (half ? adam_multi_impl<true, true, Store> : adam_multi_impl<true, false, Store>)(ts, count);
  else
    (half ? adam_multi_impl<false, true, Store> : adam_multi_impl<false, false, Store>)(ts, count);
}

void adam_multi(const AdamTensor *ts, int64_t count, bool delta, bool half, Moments moments) {
  switch (moments) {
    case Moments::kBf16:
      adam_multi_store<CodedMoments<Bf16Codec>>(ts, count, delta, half);
      break;
    case Moments::kQ8:
      adam_multi_store<CodedMoments<Q8Codec>>(ts, count, delta, half);
      break;
    default:
      adam_multi_store<F32Moments>(ts, count, delta, half);
  }
}

// --------------------------------------------------------------------- Lamb --

// Double-precision sums of squares.  x*x of a float is exact in double, so a
// fused multiply-add gives the same bits as a multiply and an add; four
// independent vector accumulators keep the adds off the latency chain (GCC's
// `omp simd` reduction of a float -> double product is latency-bound).
struct SumSq {
#if defined(__AVX512F__)
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(),
                    _mm512_setzero_pd()};
  static constexpr int64_t kStep = 32;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) {
      const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(x + 8 * k));
      acc[k] = _mm512_fmadd_pd(d, d, acc[k]);
    }
  }
  double vector_total() const {
    // stored and added by hand: GCC 12 warns inside _mm512_reduce_add_pd
    alignas(64) double t[8];
    _mm512_store_pd(t, _mm512_add_pd(_mm512_add_pd(acc[0], acc[1]),
                                     _mm512_add_pd(acc[2], acc[3])));
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
  }
#elif defined(__AVX2__)
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  static constexpr int64_t kStep = 16;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) {
      const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + 4 * k));
      acc[k] = _mm256_fmadd_pd(d, d, acc[k]);
    }
  }
  double vector_total() const {
    alignas(32) double t[4];
    _mm256_store_pd(t, _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]),
                                     _mm256_add_pd(acc[2], acc[3])));
    return (t[0] + t[1]) + (t[2] + t[3]);
  }
#else
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  static constexpr int64_t kStep = 4;
  void add_step(const float *x) {
    for (int k = 0; k < 4; ++k) acc[k] += static_cast<double>(x[k]) * x[k];
  }
  double vector_total() const { return (acc[0] + acc[1]) + (acc[2] + acc[3]); }
#endif
  double tail = 0.0;
  void add(const float *x, int64_t len) {
    int64_t j = 0;
    for (; j + kStep <= len; j += kStep) add_step(x + j);
    for (; j < len; ++j) tail += static_cast<double>(x[j]) * x[j];
  }
  double total() const { return vector_total() + tail; }
};

inline double sum_squares(const float *x, int64_t len) {
  SumSq s;
  s.add(x, len);
  return s.total();
}

// The AOT's order of Lamb's squared norms: blocks of 512 elements, each summed
// by SumSq right after pass one wrote it (its p and r still in L1), the
// blocks added in order.
struct VectorNorm {
  static constexpr int64_t kBlock = 512;
  static double sumsq(const float *x, int64_t len) { return sum_squares(x, len); }
};

// Runs body(grad) with the gradient reader of this call: scaled by gs, then
// value-clipped when clip_lo / clip_hi are finite.
template <class Body>
inline void with_lamb_grad(const LambArgs &a, float gs, const Body &body) {
  if (a.clip_lo > -INFINITY || a.clip_hi < INFINITY)
    body(ClippedGrad<float>{gs, a.clip_lo, a.clip_hi});
  else
    body(ScaledGrad<float>{gs});
}

// One tensor's Lamb step, run by thread t of nt.  kTeam: all nt threads of the
// enclosing parallel region call it for the same tensor, each on its own
// range, meeting at barriers to combine the per-thread sums (in thread order,
// so every thread gets the same result and it depends only on n and nt) and
// pass two touches the range the same thread updated, while its p and r are
// still in that core's caches when the tensor is small enough.  Otherwise one
// thread does the whole tensor (nt == 1, t == 0).  r: scratch for the
// direction at the tensor's offsets; partial: [kMaxThreads][2] shared sums.
template <bool kTeam>
void lamb_tensor(const LambTensor &x, const LambArgs &a, float *r, int64_t nt, int64_t t,
                 double (*partial)[2]) {
  const Range rg = thread_range(x.n, nt, t);
  const auto combine = [&](int k) {
    double total = 0.0;
    for (int64_t u = 0; u < nt; ++u) total += partial[u][k];
    return total;
  };
  float gs = a.grad_scale;
  if (a.clip_norm > 0.0f) {
    partial[t][0] = rg.lo < rg.hi ? sum_squares(x.g + rg.lo, rg.hi - rg.lo) : 0.0;
    if (kTeam) {
#pragma omp barrier
    }
    gs = rules::norm_clip_scale(combine(0), gs, a.clip_norm);
    if (kTeam) {
#pragma omp barrier
    }
  }
  const LambStep<float> step{a.beta1, 1.0f - a.beta1, a.beta2,        1.0f - a.beta2,
                             a.eps,   a.inv_bc1,      a.inv_sqrt_bc2, x.weight_decay};
  const int64_t lo = rg.lo, len = rg.hi - rg.lo;
  float *p = x.p + lo, *m = x.m + lo, *v = x.v + lo, *rr = r + lo;
  const float *g = x.g + lo;
  if (!(x.weight_decay > 0.0f || a.always_adapt)) {
    if (len > 0)
      with_lamb_grad(a, gs, [&](auto grad) { lamb_plain_loop(p, m, v, g, len, step, x.lr, grad); });
    if (t == 0) *x.ratio = 1.0f;
    // no barrier: nothing shared was written, and the clip sums above were read before the
    // barrier that follows them
    return;
  }
  double ps = 0.0, rs = 0.0;
  if (len > 0)
    with_lamb_grad(a, gs, [&](auto grad) {
      lamb_moments_blocks<VectorNorm>(
          p, m, v, g, len, step, grad, [rr](int64_t b) { return rr + b; },
          [&](int64_t, double sp, double sr) {
            ps += sp;
            rs += sr;
          });
    });
  partial[t][0] = ps;
  partial[t][1] = rs;
  if (kTeam) {
#pragma omp barrier
  }
  const float ratio = static_cast<float>(rules::lamb_trust_ratio(combine(0), combine(1)));
  lamb_apply_loop(p, len, x.lr * ratio, [rr](int64_t i, float) { return rr[i]; });
  if (t == 0) *x.ratio = ratio;
  if (kTeam) {
#pragma omp barrier
  }
}

// Every tensor in one parallel region.  A tensor too large to balance
// (lamb_team_min: at least 1/nthreads of the call) is split over the team,
// one after another; every other tensor runs whole on one thread, handed out
// dynamically in the order given (the adapter sorts them largest first), each
// thread with its own slice of scratch.  A split tensor meets the team at
// barriers, and a barrier costs a whole time slice whenever MindSpore's own
// threads hold a core (measured: DGC's select, docs/PROFILE.md), so only the
// tensors that cannot be balanced otherwise pay it.  One region per call, not
// two per tensor: waking the team is what costs on small tensors.
void lamb_f32(const LambTensor *ts, int64_t count, const LambArgs &a, float *scratch) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += ts[i].n;
  const int nthreads = kernel_threads();
  const int64_t team_min = lamb_team_min(total, nthreads);
  int64_t small_max = 0;
  for (int64_t i = 0; i < count; ++i)
    if (ts[i].n < team_min) small_max = std::max(small_max, ts[i].n);
  double partial[kMaxThreads][2];
  if (total < kParallelMin || nthreads < 2) {
    for (int64_t i = 0; i < count; ++i) lamb_tensor<false>(ts[i], a, scratch, 1, 0, partial);
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n >= team_min) lamb_tensor<true>(ts[i], a, scratch, nt, t, partial);
    double mine[1][2];
    float *r = scratch + t * small_max;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n < team_min) lamb_tensor<false>(ts[i], a, r, 1, 0, mine);
  }
}

double sumsq_f32(const float *x, int64_t n) {
  double total;
  parallel_sums<1>(n, &total, [&](int64_t lo, int64_t hi, double *acc) {
    acc[0] += sum_squares(x + lo, hi - lo);
  });
  return total;
}

// ---------------------------------------------------------------------- DGC --

// Gathering runs in 64-element chunks: a vectorized max of |x| over the chunk
// decides whether the chunk needs a scalar look (rare at DGC's sparsities).
constexpr int64_t kGatherChunk = 64;

inline void gather_chunk(const float *x, int64_t base, int64_t len, float thr, int32_t *out,
                         int64_t cap, int64_t &count) {
  float cmax = 0.0f;
#pragma omp simd reduction(max : cmax)
  for (int64_t j = 0; j < len; ++j) cmax = std::max(cmax, std::fabs(x[j]));
  if (!(cmax >= thr)) return;
  for (int64_t j = 0; j < len; ++j) {
    if (std::fabs(x[j]) >= thr) {
      if (count < cap) out[count] = static_cast<int32_t>(base + j);
      ++count;
    }
  }
}

template <bool kNesterov>
void dgc_accumulate_range(float *u, float *v, const float *grad, int64_t lo, int64_t hi,
                          float momentum, Gather *g) {
  const int t = omp_get_thread_num();
  int32_t *out = g->slots + static_cast<int64_t>(t) * g->cap;
  int64_t count = 0;
  for (int64_t c = lo; c < hi; c += kGatherChunk) {
    const int64_t len = std::min(kGatherChunk, hi - c);
    float *uc = u + c, *vc = v + c;
    const float *gc = grad + c;
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      float ui = uc[j], vi = vc[j];
      rules::dgc_accumulate<float, kNesterov>(gc[j], ui, vi, momentum);
      uc[j] = ui;
      vc[j] = vi;
    }
    gather_chunk(vc, c, len, g->threshold, out, g->cap, count);
  }
  g->counts[t] = count;
}

void dgc_accumulate_range_f32(float *u, float *v, const float *grad, int64_t lo, int64_t hi,
                              float momentum, bool nesterov, Gather *g) {
  if (nesterov)
    dgc_accumulate_range<true>(u, v, grad, lo, hi, momentum, g);
  else
    dgc_accumulate_range<false>(u, v, grad, lo, hi, momentum, g);
}

void gather_abs_f32(const float *x, int64_t n, Gather *g) {
  parallel_ranges(n, [&](int64_t lo, int64_t hi) {
    const int t = omp_get_thread_num();
    int32_t *out = g->slots + static_cast<int64_t>(t) * g->cap;
    int64_t count = 0;
    for (int64_t c = lo; c < hi; c += kGatherChunk)
      gather_chunk(x + c, c, std::min(kGatherChunk, hi - c), g->threshold, out, g->cap, count);
    g->counts[t] = count;
  });
}

// float16 parameters are stepped in blocks converted through a stack buffer.
constexpr int64_t kDgcHalfBlock = 1024;

// p -= lr * step over [lo, hi) of one tensor (float16 p through float32 blocks).
template <bool kNesterov>
void dgc_dense_range(const DgcDenseTensor &x, int64_t lo, int64_t hi, float momentum) {
  float *u = x.u;
  const float *g = x.g;
  const float lr = x.lr;
  if (!x.half) {
    float *p = static_cast<float *>(x.p);
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      float ui = u[i];
      const float step = rules::dgc_dense_momentum<float, kNesterov>(g[i], ui, momentum);
      u[i] = ui;
      p[i] = p[i] - lr * step;
    }
    return;
  }
  half_bits *p = static_cast<half_bits *>(x.p);
  alignas(64) float pb[kDgcHalfBlock];
  for (int64_t b = lo; b < hi; b += kDgcHalfBlock) {
    const int64_t len = std::min(kDgcHalfBlock, hi - b);
    f16_to_f32(p + b, pb, len);
    float *ub = u + b;
    const float *gb = g + b;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      float ui = ub[i];
      const float step = rules::dgc_dense_momentum<float, kNesterov>(gb[i], ui, momentum);
      ub[i] = ui;
      pb[i] = pb[i] - lr * step;
    }
    f32_to_f16(pb, p + b, len);
  }
}

// The dense momentum goes parallel from this many elements in all: below, the
// work (about 0.3 ms on one core) costs less than waking a team on cores that
// MindSpore's threads share (ResNet-50's small tensors: 53K elements).
constexpr int64_t kDgcDenseParallelMin = 8 * kParallelMin;

template <bool kNesterov>
void dgc_momentum_impl(const DgcDenseTensor *ts, int64_t count, float momentum) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += ts[i].n;
  const int nthreads = kernel_threads();
  if (total < kDgcDenseParallelMin || nthreads < 2) {
    for (int64_t i = 0; i < count; ++i) dgc_dense_range<kNesterov>(ts[i], 0, ts[i].n, momentum);
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n >= kParallelMin) {
        const Range r = thread_range(ts[i].n, nt, t);
        if (r.lo < r.hi) dgc_dense_range<kNesterov>(ts[i], r.lo, r.hi, momentum);
      }
    // (elementwise: nothing to wait for between the two loops, nor after this one but the
    // region's end)
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < count; ++i)
      if (ts[i].n < kParallelMin) dgc_dense_range<kNesterov>(ts[i], 0, ts[i].n, momentum);
  }
}

void dgc_momentum(const DgcDenseTensor *ts, int64_t count, float momentum, bool nesterov) {
  if (nesterov)
    dgc_momentum_impl<true>(ts, count, momentum);
  else
    dgc_momentum_impl<false>(ts, count, momentum);
}

}  // namespace

extern const KernelTable kTable;
const KernelTable kTable = {
    MSOPT_ISA_NAME,   adam_multi,       lamb_f32,         gather_abs_f32,   sumsq_f32,
    f16_to_f32,       f32_to_f16,       dgc_momentum,     dgc_accumulate_range_f32,
};

}  // namespace MSOPT_ISA_NS
}  // namespace msopt
