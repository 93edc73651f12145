// The AOT Lion kernel (KernelTable::lion_multi): one step over many tensors,
// float32 or float16 data, its one moment stored as float32, bfloat16 or int8
// (Adam's first-moment codes, kernels/adam_codecs.h), the per-element math
// rules::lion_direction and rules::lion_apply.  Compiled once per instruction
// set, inside that ISA's namespace (MSOPT_ISA_NS, defined by each
// kernels/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "kernels/lion.h is included by kernels/table.h, in an instruction set's unit"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/kernels.h"  // the per-call types: kernels/table.h, which includes this file
#include "core/multi_tensor.h"
#include "core/rules.h"
#include "kernels/adam_codecs.h"
#include "kernels/half.h"

namespace msopt {
namespace MSOPT_ISA_NS {
namespace {

// The moment in its storage, element by element: get(i) as float32, put(i, m).
struct LionF32View {
  float *m;
  float get(int64_t i) const { return m[i]; }
  void put(int64_t i, float x) const { m[i] = x; }
};

struct LionBf16View {
  uint16_t *m;
  float get(int64_t i) const { return bf16_to_f32(m[i]); }
  void put(int64_t i, float x) const { m[i] = f32_to_bf16(x); }
};

// Lion over n elements, the moment read and written through `io`:
//   g' = g * inv_scale;  s = rules::lion_direction(g', m)
//   kDelta: out = -lr * s;  otherwise out = rules::lion_apply(out, s, keep, -lr)
// kMax: returns the largest |m| of the new moments (NaN ignored), for int8 scales.
template <bool kDelta, bool kMax, class View, class Len>
inline float lion_loop(float *__restrict out, const float *__restrict g, Len n, const LionConsts &a,
                       float neg_lr, float keep, const View io) {
  const float b1 = a.beta1, c1 = 1.0f - a.beta1, b2 = a.beta2, c2 = 1.0f - a.beta2;
  const float scale = a.inv_scale;
  float amax = 0.0f;
#pragma omp simd reduction(max : amax)
  for (int64_t i = 0; i < n; ++i) {
    float mi = io.get(i);
    const float s = rules::lion_direction(g[i] * scale, mi, b1, c1, b2, c2);
    io.put(i, mi);
    if (kMax) amax = std::max(amax, std::fabs(mi));
    out[i] = kDelta ? neg_lr * s : rules::lion_apply(out[i], s, keep, neg_lr);
  }
  return amax;
}

// One block of int8 moments (lo a multiple of kQ8Block): decoded into a float32
// buffer (value(|c|) * scale with c's sign), stepped, encoded with the block's
// new absmax as its scale (0 below the smallest normal float32), each code
// rounded stochastically with the low 16 bits of rules::q8_round_bits (the
// rule of Adam's m, reference.q8_quantize).
template <bool kDelta, class Len>
inline void lion_q8_block(const LionTensor &x, const LionConsts &a, int64_t lo, Len n, float *out,
                          const float *g) {
  alignas(64) float mb[kQ8Block];
  int8_t *mq = static_cast<int8_t *>(x.m) + lo;
  float &scale = x.m_scale[lo / kQ8Block];
  const float ms = scale;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) mb[j] = q8_decode_m(mq[j], ms);
  const float am = lion_loop<kDelta, true>(out, g, n, a, x.neg_lr, x.keep, LionF32View{mb});
  const float s = am < 1.17549435e-38f ? 0.0f : am;
  scale = s;
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  const uint32_t key = x.q8_key, j0 = static_cast<uint32_t>(lo);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    mq[j] = q8_encode_m(mb[j], inv, rules::q8_round_bits(key, j0 + static_cast<uint32_t>(j)));
}

// The chunk [lo, lo + len) of tensor x with float32 `out` and `g` (the chunk's own).
template <bool kDelta>
inline void lion_chunk(const LionTensor &x, const LionConsts &a, Moments moments, int64_t lo,
                       int64_t len, float *out, const float *g) {
  switch (moments) {
    case Moments::kBf16:
      lion_loop<kDelta, false>(out, g, len, a, x.neg_lr, x.keep,
                               LionBf16View{static_cast<uint16_t *>(x.m) + lo});
      return;
    case Moments::kQ8:
      if (len == kQ8Block)
        lion_q8_block<kDelta>(x, a, lo, std::integral_constant<int64_t, kQ8Block>{}, out, g);
      else
        lion_q8_block<kDelta>(x, a, lo, len, out, g);
      return;
    default:
      lion_loop<kDelta, false>(out, g, len, a, x.neg_lr, x.keep,
                               LionF32View{static_cast<float *>(x.m) + lo});
  }
}

// The walker's functor: the piece [lo, hi) of tensor i, in chunks of one int8
// block (kQ8) or of kHalfBlock (float16 data, through float32 buffers);
// float32 data with float32 or bfloat16 moments is stepped as one range.
template <bool kDelta, bool kHalf>
struct LionPiece {
  const LionTensor *ts;
  const LionConsts *a;
  Moments moments;
  void operator()(int64_t i, int64_t lo, int64_t hi) const {
    const LionTensor &x = ts[i];
    if (!kHalf && moments != Moments::kQ8) {
      lion_chunk<kDelta>(x, *a, moments, lo, hi - lo, static_cast<float *>(x.out) + lo,
                         static_cast<const float *>(x.g) + lo);
      return;
    }
    const int64_t chunk = moments == Moments::kQ8 ? kQ8Block : kHalfBlock;
    alignas(64) float gb[kHalf ? kHalfBlock : 1];
    alignas(64) float ob[kHalf ? kHalfBlock : 1];
    for (int64_t c = lo; c < hi; c += chunk) {
      const int64_t len = std::min(chunk, hi - c);
      if (kHalf) {
        half_bits *out = static_cast<half_bits *>(x.out) + c;
        f16_to_f32(static_cast<const half_bits *>(x.g) + c, gb, len);
        if (!kDelta) f16_to_f32(out, ob, len);
        lion_chunk<kDelta>(x, *a, moments, c, len, ob, gb);
        f32_to_f16(ob, out, len);
      } else {
        lion_chunk<kDelta>(x, *a, moments, c, len, static_cast<float *>(x.out) + c,
                           static_cast<const float *>(x.g) + c);
      }
    }
  }
};

template <bool kDelta, bool kHalf>
void lion_walk(const LionTensor *ts, int64_t count, const LionConsts &a, Moments moments) {
  WalkPlan plan;
  plan.block = moments == Moments::kQ8 ? kQ8Block : 1;
  walk_tensors(count, [ts](int64_t i) { return ts[i].n; }, plan,
               LionPiece<kDelta, kHalf>{ts, &a, moments});
}

void lion_multi(const LionTensor *ts, int64_t count, const LionConsts &a, bool delta, bool half,
                Moments moments) {
  using Walk = void (*)(const LionTensor *, int64_t, const LionConsts &, Moments);
  static constexpr Walk kWalks[2][2] = {{lion_walk<false, false>, lion_walk<false, true>},
                                        {lion_walk<true, false>, lion_walk<true, true>}};
  kWalks[delta][half](ts, count, a, moments);
}

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
