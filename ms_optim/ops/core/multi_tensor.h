// The walker over many tensors (the split of apex's multi_tensor_apply): how a
// list of tensors of different sizes is cut into pieces and handed to the
// kernel threads, written once.  Each kernel gives it a functor that does the
// element work of one piece through the shared rules (core/rules.h,
// core/loops_impl.h); the walker knows nothing of the elements.
//
//   walk_tensors(count, size, plan, fn)
//     size(i)          tensor i's element count, 0 <= i < count
//     fn(i, lo, hi)    the work on elements [lo, hi) of tensor i, on the
//                      calling thread; pieces never overlap, and together
//                      they cover every element once
//
// Below plan.parallel_min elements in all, or with one thread, every tensor
// runs whole on the calling thread, in the order given.  Otherwise one OpenMP
// region of kernel_threads() threads runs plan.schedule:
//   kOneRange      every tensor's elements taken as one range, counted in units
//                  of plan.block elements (a tensor's last unit may be
//                  partial), split once into one contiguous share per thread
//                  (thread_share): each thread walks the tensors its share
//                  overlaps, so a thread owns at most one piece of a tensor
//                  and a unit never straddles two threads.
//   kWholeTensors  a tensor of plan.split_min elements or more is split over
//                  the team (thread_share of its units); every other tensor
//                  runs whole on one thread, handed out dynamically
//                  plan.grab at a time in the order given.
// No thread waits for another inside the region: the pieces are independent.
// A kernel that stages its elements in buffers cuts its pieces into chunks
// itself.
//
// Scheduling only, no floating point, and internal linkage: every unit that
// includes it (each ISA's kernels, the C library) gets its own copy.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "core/kernels.h"

namespace msopt {
namespace {

// A contiguous range [lo, hi).
struct Range {
  int64_t lo, hi;
};

// Thread t's share of [0, units) among nt threads: contiguous, its length
// rounded up to a multiple of `align` units.
inline Range thread_share(int64_t units, int64_t nt, int64_t t, int64_t align) {
  const int64_t per = ((units + nt - 1) / nt + align - 1) / align * align;
  const int64_t lo = std::min(units, t * per);
  return {lo, std::min(units, lo + per)};
}

// Thread t's share of [0, n) elements among nt threads, 64-element aligned.
inline Range thread_range(int64_t n, int64_t nt, int64_t t) { return thread_share(n, nt, t, 64); }

struct WalkPlan {
  enum Schedule { kOneRange, kWholeTensors };
  Schedule schedule = kOneRange;
  int64_t block = 1;                    // elements per unit of a thread's share
  int64_t align = 64;                   // a thread's share is a multiple of this many units
  int64_t parallel_min = kParallelMin;  // elements in all from which the walk uses threads
  int64_t split_min = INT64_MAX;        // kWholeTensors: tensors split over the team
  int grab = 1;                         // kWholeTensors: whole tensors handed out at a time
};

template <class Size, class Fn>
void walk_tensors(int64_t count, const Size &size, const WalkPlan &plan, const Fn &fn) {
  const int64_t B = plan.block;
  int64_t total = 0, units = 0;
  for (int64_t i = 0; i < count; ++i) {
    total += size(i);
    units += (size(i) + B - 1) / B;
  }
  const int nthreads = kernel_threads();
  if (total < plan.parallel_min || nthreads < 2) {
    for (int64_t i = 0; i < count; ++i) fn(i, int64_t{0}, size(i));
    return;
  }
  if (plan.schedule == WalkPlan::kOneRange) {
#pragma omp parallel num_threads(nthreads)
    {
      const Range r = thread_share(units, omp_get_num_threads(), omp_get_thread_num(), plan.align);
      int64_t off = 0;  // the units of the tensors before i
      for (int64_t i = 0; i < count && off < r.hi; ++i) {
        const int64_t n = size(i), nu = (n + B - 1) / B;
        const int64_t a = std::max(r.lo, off), b = std::min(r.hi, off + nu);
        if (a < b) fn(i, (a - off) * B, std::min(n, (b - off) * B));
        off += nu;
      }
    }
    return;
  }
#pragma omp parallel num_threads(nthreads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = size(i);
      if (n < plan.split_min) continue;
      const Range r = thread_share((n + B - 1) / B, nt, t, plan.align);
      if (r.lo < r.hi) fn(i, r.lo * B, std::min(n, r.hi * B));
    }
#pragma omp for schedule(dynamic, plan.grab) nowait
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = size(i);
      if (n < plan.split_min) fn(i, int64_t{0}, n);
    }
  }
}

}  // namespace
}  // namespace msopt
