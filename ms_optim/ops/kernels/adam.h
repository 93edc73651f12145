// The AOT Adam kernel (KernelTable::adam_multi): one step over many tensors,
// float32 or float16 data, float32, bfloat16 or int8 moments (the codes are
// kernels/adam_codecs.h), the per-element loop core/loops_impl.h's adam_loop.
// Compiled once per instruction set, inside that ISA's namespace (MSOPT_ISA_NS,
// defined by each core/isa_*.cpp unit).
#pragma once
#ifndef MSOPT_ISA_NS
#error "define MSOPT_ISA_NS before including kernels/adam.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernels.h"
#include "core/loops_impl.h"
#include "core/rules.h"
#include "kernels/adam_codecs.h"
#include "kernels/half.h"
#include "kernels/threading.h"

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
// buffers and encodes them back after the step (docs/algorithms.md §1.1; the
// numpy rules are reference.py's bf16_* and q8_*).  kChunk: the elements per
// chunk; kBlock: the unit a thread's share must be made of (1: any split).

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

}  // namespace
}  // namespace MSOPT_ISA_NS
}  // namespace msopt
