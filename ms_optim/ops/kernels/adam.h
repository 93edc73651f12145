// The AOT Adam kernel (KernelTable::adam_multi): one step over many tensors,
// float32 or float16 data, float32, bfloat16 or int8 moments (the codes are
// kernels/adam_codecs.h), the per-element loop core/loops_impl.h's adam_loop.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "kernels/adam.h is included by kernels/table.h, in an instruction set's unit"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernels.h"  // the per-call types: kernels/table.h, which includes this file
#include "core/loops_impl.h"
#include "core/multi_tensor.h"
#include "core/rules.h"
#include "kernels/adam_codecs.h"
#include "kernels/half.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

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
// with_adam_flags calls body(step, grad, nesterov, decay, decoupled) with `a`
// as the loops' constants and gradient reader and its three flags as
// std::integral_constant<bool>, so each loop (float32 moments, and the
// compact-moment loop below) is compiled once per combination, without
// branches inside.
template <bool kDelta, class Body>
inline void with_adam_flags(const AdamArgs &a, const Body &body) {
  using T_ = std::true_type;
  using F_ = std::false_type;
  const AdamStep<float> step{a.beta1, 1.0f - a.beta1, a.beta2, 1.0f - a.beta2,
                             a.eps,   -a.lr_t,        a.weight_decay};
  const ScaledGrad<float> grad{a.inv_scale};
  const bool decay = !kDelta && a.weight_decay != 0.0f;
  switch ((a.nesterov ? 4 : 0) + (decay ? 2 : 0) + (a.decoupled ? 1 : 0)) {
    case 0: return body(step, grad, F_{}, F_{}, F_{});
    case 1: return body(step, grad, F_{}, F_{}, T_{});
    case 2: return body(step, grad, F_{}, T_{}, F_{});
    case 3: return body(step, grad, F_{}, T_{}, T_{});
    case 4: return body(step, grad, T_{}, F_{}, F_{});
    case 5: return body(step, grad, T_{}, F_{}, T_{});
    case 6: return body(step, grad, T_{}, T_{}, F_{});
    default: return body(step, grad, T_{}, T_{}, T_{});
  }
}

// ------------------------------------------------------------ moment codecs --
// Each codec steps a chunk [lo, lo + len) of one tensor, its moments in that
// codec's storage, with float32 `out` and `g` (the chunk's own, already offset):
// float32 moments in place, bfloat16 moments element by element, int8 moments
// decoded into float32 buffers block by block (whole blocks on AVX-512: in
// registers, inside the Adam pass) and encoded back
// (docs/algorithms.md §1.1; the numpy rules are reference.py's bf16_* and
// q8_*).  kChunk: the most elements a chunk may have (float32 moments: only
// float16 data is chunked, into its buffers); kBlock: the unit a thread's share
// must be made of (1: any split).

struct F32Codec {
  static constexpr int64_t kChunk = kHalfBlock;
  static constexpr int64_t kBlock = 1;
  template <bool kDelta>
  static void step(const AdamTensor &x, int64_t lo, int64_t len, float *out, const float *g) {
    float *m = static_cast<float *>(x.m) + lo, *v = static_cast<float *>(x.v) + lo;
    with_adam_flags<kDelta>(x.a, [&](const auto &step, auto grad, auto nesterov, auto decay,
                                     auto decoupled) {
      adam_loop<float, kDelta, decltype(nesterov)::value, decltype(decay)::value,
                ScaledGrad<float>, decltype(decoupled)::value>(out, m, v, g, len, step, grad);
    });
  }
};

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
inline void adam_view_step(const AdamArgs &a, float *out, const float *g, Len n, const IO &io,
                           float &am, float &av) {
  with_adam_flags<kDelta>(a, [&](const auto &step, auto grad, auto nesterov, auto decay,
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
    adam_view_step<kDelta>(x.a, out, g, len, io, am, av);
  }
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
// 16 float32 lanes as an element type of the rules (core/rules.h): each
// operator is the same IEEE operation, lane by lane, so a rule instantiated on
// it rounds as on float (with -ffp-contract=off, as every unit is built: GCC
// would otherwise fuse these intrinsics' multiplies and adds as it would
// float's).
struct F32x16 {
  __m512 v;
};
inline F32x16 operator+(F32x16 a, F32x16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F32x16 operator*(F32x16 a, F32x16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F32x16 operator/(F32x16 a, F32x16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F32x16 &operator+=(F32x16 &a, F32x16 b) { return a = a + b; }
inline F32x16 sqrt(F32x16 a) { return {_mm512_sqrt_ps(a.v)}; }
inline F32x16 splat(float x) { return {_mm512_set1_ps(x)}; }

// adam_view_loop over a whole block of int8 moments with AVX-512, the block's
// codes decoded in registers 16 elements at a time (q8_decode16_avx512) rather
// than into the buffers first: the same rule (rules::moments, adam_finish),
// the new moments written to the buffers the encoder reads, and their absmax
// (the largest |m|, |v|; vmaxps returns its second operand when the first is
// NaN, so a NaN is ignored as std::max ignores it there).
template <bool kDelta, bool kNesterov, bool kDecay, bool kDecoupled>
inline void q8_adam_avx512(float *out, const float *g, const int8_t *mq, const uint8_t *vq,
                           float ms, float vs, float *mb, float *vb, const AdamStep<float> &a,
                           ScaledGrad<float> grad, float &am, float &av) {
  const F32x16 b1 = splat(a.beta1), c1 = splat(a.c1), b2 = splat(a.beta2), c2 = splat(a.c2);
  const F32x16 eps = splat(a.eps), nlr = splat(a.neg_lr), wd = splat(a.wd);
  const ScaledGrad<F32x16> grad16{splat(grad.scale)};
  const __m512 vms = _mm512_set1_ps(ms), vvs = _mm512_set1_ps(vs);
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 amx = _mm512_setzero_ps(), avx = _mm512_setzero_ps();
  for (int64_t j = 0; j < kQ8Block; j += 16) {
    F32x16 m, v;
    q8_decode16_avx512(mq + j, vq + j, vms, vvs, m.v, v.v);
    F32x16 p{kDelta ? _mm512_setzero_ps() : _mm512_loadu_ps(out + j)};  // delta: written
    const F32x16 gj{_mm512_loadu_ps(g + j)};
    const F32x16 gi = grad16(kDecay && !kDecoupled ? rules::decayed_grad(gj, p, wd) : gj);
    rules::moments(gi, m, v, b1, c1, b2, c2);
    _mm512_store_ps(mb + j, m.v);
    _mm512_store_ps(vb + j, v.v);
    amx = _mm512_max_ps(_mm512_and_ps(m.v, absmask), amx);
    avx = _mm512_max_ps(_mm512_and_ps(v.v, absmask), avx);
    adam_finish<F32x16, kDelta, kNesterov, kDecay, kDecoupled>(gi, m, v, p, b1, c1, eps, wd,
                                                               nlr);
    _mm512_storeu_ps(out + j, p.v);
  }
  am = _mm512_reduce_max_ps(amx);
  av = _mm512_reduce_max_ps(avx);
}
#endif

// One block of int8 moments: decode into float32 buffers, Adam over them (its
// absmax found on the way), encode with the new scales.  n is kQ8Block as a
// compile-time constant for whole blocks (no remainder loops, the AVX2 and
// AVX-512 coders; AVX-512 decodes inside the Adam pass, q8_adam_avx512)
// and an int64_t for a tensor's last, partial block.
template <bool kDelta, class Len>
inline void q8_block_step(const AdamTensor &x, int64_t lo, Len n, float *out, const float *g) {
  alignas(64) float mb[kQ8Block];
  alignas(64) float vb[kQ8Block];
  int8_t *mq = static_cast<int8_t *>(x.m) + lo;
  uint8_t *vq = static_cast<uint8_t *>(x.v) + lo;
  const int64_t b = lo / kQ8Block;
  float am, av;
#if defined(__AVX512F__) && defined(__AVX512BW__)
  if constexpr (!std::is_same<Len, int64_t>::value) {
    with_adam_flags<kDelta>(x.a, [&](const auto &step, auto grad, auto nesterov, auto decay,
                                     auto decoupled) {
      q8_adam_avx512<kDelta, decltype(nesterov)::value, decltype(decay)::value,
                     decltype(decoupled)::value>(out, g, mq, vq, x.m_scale[b], x.v_scale[b], mb,
                                                 vb, step, grad, am, av);
    });
  } else
#endif
  {
    Q8Coder<Len>::decode(mq, vq, n, x.m_scale[b], x.v_scale[b], mb, vb);
    adam_view_step<kDelta>(x.a, out, g, n, BufferView{mb, vb}, am, av);
  }
  q8_encode_block(mb, vb, n, am, av, mq, vq, x.m_scale[b], x.v_scale[b], x.q8_key,
                  static_cast<uint32_t>(lo));
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

// ------------------------------------------------------------- the walk --

// The walker's functor (core/multi_tensor.h): the piece [lo, hi) of tensor i,
// in chunks of Codec::kChunk that the codec steps in one pass over memory;
// float16 gradients and parameters go through float32 buffers.  float32 data
// with float32 moments is stepped as one range.
template <bool kDelta, bool kHalf, class Codec>
struct AdamPiece {
  const AdamTensor *ts;
  void operator()(int64_t i, int64_t lo, int64_t hi) const {
    const AdamTensor &x = ts[i];
    if (!kHalf && std::is_same<Codec, F32Codec>::value) {
      Codec::template step<kDelta>(x, lo, hi - lo, static_cast<float *>(x.out) + lo,
                                   static_cast<const float *>(x.g) + lo);
      return;
    }
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
};

// Every tensor's elements as one range, split once over the threads (the
// walker's kOneRange), in units of Codec::kBlock elements, so a quantization
// block never straddles two threads.  Adam has no reduction, so no thread
// waits for another and the bits do not depend on the split.
template <bool kDelta, bool kHalf, class Codec>
void adam_walk(const AdamTensor *ts, int64_t count) {
  WalkPlan plan;
  plan.block = Codec::kBlock;
  walk_tensors(count, [ts](int64_t i) { return ts[i].n; }, plan,
               AdamPiece<kDelta, kHalf, Codec>{ts});
}

using AdamWalk = void (*)(const AdamTensor *, int64_t);
template <class Codec>
constexpr AdamWalk kAdamWalks[2][2] = {  // [delta][half]
    {adam_walk<false, false, Codec>, adam_walk<false, true, Codec>},
    {adam_walk<true, false, Codec>, adam_walk<true, true, Codec>}};

void adam_multi(const AdamTensor *ts, int64_t count, bool delta, bool half, Moments moments) {
  switch (moments) {
    case Moments::kBf16:
      kAdamWalks<Bf16Codec>[delta][half](ts, count);
      break;
    case Moments::kQ8:
      kAdamWalks<Q8Codec>[delta][half](ts, count);
      break;
    default:
      kAdamWalks<F32Codec>[delta][half](ts, count);
  }
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
