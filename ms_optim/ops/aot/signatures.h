// The tensors each MindSpore AOT kernel takes, declared once per kernel.
//
// MindSpore calls an AOT kernel with one flat array of tensors: its inputs,
// then its outputs.  Each list below names them in that order, each with its
// arity:
//   kOne    one tensor;
//   kEach   one tensor per parameter of the call (K of them, side by side:
//           param0..param{K-1});
//   kCountK one tensor of K elements (it also tells K where a kRest group
//           leaves the count ambiguous);
//   kRest   as many tensors as remain (at most one group per kernel, and only
//           single tensors after it).
// The list drives three things, so they cannot drift apart:
//   - the adapter's indexing: AotCall (aot/call.h) resolves K and where every
//     slot starts from the tensor count, and the adapters address tensors as
//     c.index(S::grad, i), never by arithmetic of their own;
//   - what the library reports through msopt_aot_signature(entry), e.g.
//     "param:each m:each v:each grad:each lr wd powers consts -> done";
//   - the Python side (ms_optim/aot.py), which reads that report and
//     assembles every call by slot name: the optimizers, the tests and the
//     benchmarks.
// Adding an input is one edit here plus the kernel's use of it.  The tensors'
// element types and sizes are checked by each adapter (ops/aot/aot_*.cpp).
//
// No MindSpore or Python headers here.
#pragma once

namespace msopt {

enum class Arity : int { kOne, kEach, kCountK, kRest };

struct Slot {
  const char *name;
  Arity arity;
  bool output;
};

// AdamOffload, parameters updated in place.  lr, wd: float32[1] or [K];
// powers: contract.h Powers; consts: AdamConsts or AdamExtConsts.
#define MSOPT_AOT_ADAM_INPLACE(IN, OUT)                                                   \
  IN(param, kEach) IN(m, kEach) IN(v, kEach) IN(grad, kEach) IN(lr, kOne) IN(wd, kOne)   \
  IN(powers, kOne) IN(consts, kOne) OUT(done, kOne)

// AdamOffload's delta path: the moments updated in place, the steps returned.
#define MSOPT_AOT_ADAM_DELTA(IN, OUT)                                                     \
  IN(m, kEach) IN(v, kEach) IN(grad, kEach) IN(lr, kOne) IN(powers, kOne) IN(consts, kOne) \
  OUT(delta, kEach)

// The same with int8 moments: one float32 absmax scale per block of each; key:
// int32[2], the step and the first parameter's position in the optimizer (the
// stochastic rounding's key, rules::q8_tensor_key).
#define MSOPT_AOT_ADAM_Q8_INPLACE(IN, OUT)                                                \
  IN(param, kEach) IN(m, kEach) IN(v, kEach) IN(m_scale, kEach) IN(v_scale, kEach)        \
  IN(grad, kEach) IN(lr, kOne) IN(wd, kOne) IN(powers, kOne) IN(consts, kOne)             \
  IN(key, kOne) OUT(done, kOne)

#define MSOPT_AOT_ADAM_Q8_DELTA(IN, OUT)                                                  \
  IN(m, kEach) IN(v, kEach) IN(m_scale, kEach) IN(v_scale, kEach) IN(grad, kEach)         \
  IN(lr, kOne) IN(powers, kOne) IN(consts, kOne) IN(key, kOne) OUT(delta, kEach)

// Lion, parameters updated in place (lr, wd: float32[1] or [K]; consts:
// contract.h LionConsts), and its delta path (the steps returned, the decay
// left to the device).  The q8 entries hold m as int8 codes with one float32
// scale per block, and take Adam's key.
#define MSOPT_AOT_LION_INPLACE(IN, OUT) \
  IN(param, kEach) IN(m, kEach) IN(grad, kEach) IN(lr, kOne) IN(wd, kOne) IN(consts, kOne) \
  OUT(done, kOne)

#define MSOPT_AOT_LION_DELTA(IN, OUT) \
  IN(m, kEach) IN(grad, kEach) IN(lr, kOne) IN(consts, kOne) OUT(delta, kEach)

#define MSOPT_AOT_LION_Q8_INPLACE(IN, OUT)                                                 \
  IN(param, kEach) IN(m, kEach) IN(m_scale, kEach) IN(grad, kEach) IN(lr, kOne) IN(wd, kOne) \
  IN(consts, kOne) IN(key, kOne) OUT(done, kOne)

#define MSOPT_AOT_LION_Q8_DELTA(IN, OUT)                                                   \
  IN(m, kEach) IN(m_scale, kEach) IN(grad, kEach) IN(lr, kOne) IN(consts, kOne) IN(key, kOne) \
  OUT(delta, kEach)

// Lamb: gscale multiplies every gradient; the output holds the trust ratios.
#define MSOPT_AOT_LAMB(IN, OUT)                                                           \
  IN(param, kEach) IN(m, kEach) IN(v, kEach) IN(grad, kEach) IN(lr, kOne) IN(wd, kOne)   \
  IN(gscale, kOne) IN(powers, kOne) IN(consts, kOne) OUT(ratios, kOne)

// The sum of squares of every element of K tensors (global-norm clipping).
#define MSOPT_AOT_SUMSQ(IN, OUT) IN(grad, kEach) OUT(sumsq, kOne)

// Top-k of |x|.
#define MSOPT_AOT_TOPK_ABS(IN, OUT) IN(x, kOne) OUT(idx, kOne) OUT(val, kOne)

// DGC's local step: ks holds each parameter's k.
#define MSOPT_AOT_DGC_SELECT_MULTI(IN, OUT)                                               \
  IN(u, kEach) IN(v, kEach) IN(grad, kEach) IN(consts, kOne) IN(ks, kCountK)              \
  OUT(idx, kOne) OUT(val, kOne)

// The two halves of the select, for exchanges whose indices every worker
// shares: propose (the residual update and this worker's top-k indices,
// nothing masked) and take (the values at the shared indices, u and v masked
// there); layout as the apply's.
#define MSOPT_AOT_DGC_PROPOSE_MULTI(IN, OUT)                                              \
  IN(u, kEach) IN(v, kEach) IN(grad, kEach) IN(consts, kOne) IN(ks, kCountK) OUT(idx, kOne)

#define MSOPT_AOT_DGC_TAKE_MULTI(IN, OUT) \
  IN(u, kEach) IN(v, kEach) IN(idx, kOne) IN(layout, kOne) OUT(val, kOne)

// The bucket of small parameters (DGCMomentum's bucket_sparsity): the select,
// propose and take above with one selection over the concatenation of the K
// tensors (k = the length of idx, positions in the concatenation).
#define MSOPT_AOT_DGC_BUCKET_SELECT(IN, OUT) \
  IN(u, kEach) IN(v, kEach) IN(grad, kEach) IN(consts, kOne) OUT(idx, kOne) OUT(val, kOne)

#define MSOPT_AOT_DGC_BUCKET_PROPOSE(IN, OUT) \
  IN(u, kEach) IN(v, kEach) IN(grad, kEach) IN(consts, kOne) OUT(idx, kOne)

#define MSOPT_AOT_DGC_BUCKET_TAKE(IN, OUT) IN(u, kEach) IN(v, kEach) IN(idx, kOne) OUT(val, kOne)

// p_j -= lr_j * mean at tensor j's positions; lr float32[1] or [K].
#define MSOPT_AOT_DGC_BUCKET_APPLY(IN, OUT) \
  IN(param, kEach) IN(mean, kOne) IN(lr, kOne) OUT(done, kOne)

// DGC's apply of every worker's selections: layout = (R, offsets[K], counts[K]).
#define MSOPT_AOT_DGC_APPLY_MULTI(IN, OUT)                                                \
  IN(param, kEach) IN(idx, kOne) IN(val, kOne) IN(lr, kOne) IN(layout, kOne)              \
  OUT(done, kOne)

// DGC's dense momentum: src is the step's whole gradient tuple, gidx[j] the
// source of parameter j.
#define MSOPT_AOT_DGC_MOMENTUM(IN, OUT)                                                   \
  IN(param, kEach) IN(u, kEach) IN(src, kRest) IN(lr, kOne) IN(consts, kOne)              \
  IN(gidx, kCountK) OUT(done, kOne)

// The workers' rows, gathered (model signature, step, then the state's world
// size and a two-word digest of its residual kinds): fails unless all agree,
// unless world = (the world size the state was saved by, this run's) agree, and unless
// residuals = (per parameter, the kind of the state's residuals; then of this
// run's: 0 none, 1 gradients, 2 learning-rate-scaled gradients) can be resumed.
#define MSOPT_AOT_CHECK_REPLICAS(IN, OUT) \
  IN(signatures, kOne) IN(width, kOne) IN(world, kOne) IN(residuals, kOne) OUT(ok, kOne)

// A 64-bit digest of K tensors of one dtype.
#define MSOPT_AOT_DIGEST(IN, OUT) IN(p, kEach) OUT(digest, kOne)

// A step's clock (DGCMomentum's sparsity="auto"): clock float64[1 + S], updated
// in place, holds the last reading and the least interval recorded per slot;
// slot int32[1] says where the interval since the last reading goes (-1:
// nowhere); after orders the reading after a tensor; best float32[S] returns
// the least intervals (0: none yet).
#define MSOPT_AOT_STEP_CLOCK(IN, OUT) \
  IN(clock, kOne) IN(slot, kOne) IN(after, kOne) OUT(best, kOne)

// Every kernel: its exported entry and its list.
#define MSOPT_AOT_KERNELS(X)                                   \
  X(ms_optim_adam_inplace, MSOPT_AOT_ADAM_INPLACE)             \
  X(ms_optim_adam_delta, MSOPT_AOT_ADAM_DELTA)                 \
  X(ms_optim_adam_q8_inplace, MSOPT_AOT_ADAM_Q8_INPLACE)       \
  X(ms_optim_adam_q8_delta, MSOPT_AOT_ADAM_Q8_DELTA)           \
  X(ms_optim_lion_inplace, MSOPT_AOT_LION_INPLACE)             \
  X(ms_optim_lion_delta, MSOPT_AOT_LION_DELTA)                 \
  X(ms_optim_lion_q8_inplace, MSOPT_AOT_LION_Q8_INPLACE)       \
  X(ms_optim_lion_q8_delta, MSOPT_AOT_LION_Q8_DELTA)           \
  X(ms_optim_lamb, MSOPT_AOT_LAMB)                             \
  X(ms_optim_sumsq, MSOPT_AOT_SUMSQ)                           \
  X(ms_optim_topk_abs, MSOPT_AOT_TOPK_ABS)                     \
  X(ms_optim_dgc_select_multi, MSOPT_AOT_DGC_SELECT_MULTI)     \
  X(ms_optim_dgc_propose_multi, MSOPT_AOT_DGC_PROPOSE_MULTI)   \
  X(ms_optim_dgc_take_multi, MSOPT_AOT_DGC_TAKE_MULTI)         \
  X(ms_optim_dgc_apply_multi, MSOPT_AOT_DGC_APPLY_MULTI)       \
  X(ms_optim_dgc_bucket_select, MSOPT_AOT_DGC_BUCKET_SELECT)   \
  X(ms_optim_dgc_bucket_propose, MSOPT_AOT_DGC_BUCKET_PROPOSE) \
  X(ms_optim_dgc_bucket_take, MSOPT_AOT_DGC_BUCKET_TAKE)       \
  X(ms_optim_dgc_bucket_apply, MSOPT_AOT_DGC_BUCKET_APPLY)     \
  X(ms_optim_dgc_momentum, MSOPT_AOT_DGC_MOMENTUM)             \
  X(ms_optim_check_replicas, MSOPT_AOT_CHECK_REPLICAS)         \
  X(ms_optim_digest, MSOPT_AOT_DIGEST)                         \
  X(ms_optim_step_clock, MSOPT_AOT_STEP_CLOCK)

// sig::<entry>: the slot ids (sig::ms_optim_lamb::grad, ...), kSlots, and
// kSpec, the slots in order.
#define MSOPT_AOT_SLOT_ID(name, arity) name,
#define MSOPT_AOT_SLOT_IN(name, arity) Slot{#name, Arity::arity, false},
#define MSOPT_AOT_SLOT_OUT(name, arity) Slot{#name, Arity::arity, true},
#define MSOPT_AOT_DECLARE(entry, LIST)                                                  \
  struct entry {                                                                        \
    enum Id : int { LIST(MSOPT_AOT_SLOT_ID, MSOPT_AOT_SLOT_ID) kSlots };                \
    static constexpr const char *kEntry = #entry;                                       \
    static constexpr Slot kSpec[kSlots] = {LIST(MSOPT_AOT_SLOT_IN, MSOPT_AOT_SLOT_OUT)}; \
  };

namespace sig {
MSOPT_AOT_KERNELS(MSOPT_AOT_DECLARE)
}  // namespace sig

}  // namespace msopt
