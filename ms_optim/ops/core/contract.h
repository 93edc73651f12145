// Every native kernel's declaration, each written once: the constants it
// receives and the tensors it takes.
//
// Constants.  Hyper-parameters that stay fixed for an optimizer's life reach a
// kernel as one float32 tensor ("consts"), read as the struct below; values
// that change every step (learning rate, weight decay, beta powers) are inputs
// of their own.  Each struct is generated from one list of field names (an
// X-macro), so the same list also gives the field count the adapter checks, a
// static_assert that the struct is exactly that many floats, and the names the
// library reports through msopt_consts_layout(kernel).  The Python side
// (ms_optim/aot.py) builds the tensor by name from that report.
//
// Tensors.  Each AOT entry's list names its tensors in call order, inputs
// (IN) then outputs (OUT), each with its arity (aot/signatures.h says what the
// arities mean and binds the lists to the adapters); MSOPT_AOT_KERNELS lists
// every entry.  Adding a kernel's declaration is an edit of this file alone.
//
// No MindSpore or Python headers here.
#pragma once

namespace msopt {

#define MSOPT_CONTRACT_FIELD(name) float name;
#define MSOPT_CONTRACT_COUNT(name) +1
#define MSOPT_CONTRACT_NAME(name) " " #name

#define MSOPT_DECLARE_CONSTS(Struct, LIST)                                        \
  struct Struct {                                                                 \
    LIST(MSOPT_CONTRACT_FIELD)                                                    \
    static constexpr int kCount = 0 LIST(MSOPT_CONTRACT_COUNT);                   \
  };                                                                              \
  static_assert(sizeof(Struct) == Struct::kCount * sizeof(float),                 \
                #Struct " must be exactly its float fields, no padding");

// -------------------------------------------------------------- Adam --

// Adam (AdamOffload, MindSpore's rule): nesterov is 0 or 1; inv_scale is
// 1 / loss_scale, applied by the in-place kernel after the weight decay.
#define MSOPT_ADAM_CONSTS(X) X(beta1) X(beta2) X(eps) X(inv_scale) X(nesterov)

// AdamOffload with options beyond MindSpore's rule: the Adam fields, then
// decoupled (0 or 1: AdamW, nn.AdamWeightDecay's rule, no bias correction).
// The Adam kernels take either layout (told apart by their length).
#define MSOPT_ADAM_EXT_CONSTS(X) MSOPT_ADAM_CONSTS(X) X(decoupled)

// The beta powers of this step, beta1^t and beta2^t (Adam and Lamb): an input
// of its own, float32[2], since it changes every step.
#define MSOPT_POWERS(X) X(beta1_power) X(beta2_power)

// AdamOffload, parameters updated in place.  lr, wd: float32[1] or [K];
// powers: Powers; consts: AdamConsts or AdamExtConsts.
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

// -------------------------------------------------------------- Lamb --

// Lamb (PaddlePaddle's rule): clip_norm is the per-tensor norm clip of the
// scaled gradient (0 = none); clip_lo/clip_hi the value clip after scaling
// (-inf/+inf = none); always_adapt is 0 or 1.
#define MSOPT_LAMB_CONSTS(X) \
  X(beta1) X(beta2) X(eps) X(clip_norm) X(clip_lo) X(clip_hi) X(always_adapt)

// Lamb: gscale multiplies every gradient; the output holds the trust ratios.
#define MSOPT_AOT_LAMB(IN, OUT)                                                           \
  IN(param, kEach) IN(m, kEach) IN(v, kEach) IN(grad, kEach) IN(lr, kOne) IN(wd, kOne)   \
  IN(gscale, kOne) IN(powers, kOne) IN(consts, kOne) OUT(ratios, kOne)

// The sum of squares of every element of K tensors (global-norm clipping).
#define MSOPT_AOT_SUMSQ(IN, OUT) IN(grad, kEach) OUT(sumsq, kOne)

// -------------------------------------------------------------- Lion --

// Lion: inv_scale is 1 / loss_scale, applied to the gradient by the in-place
// kernel (the delta path's device divides it out first).
#define MSOPT_LION_CONSTS(X) X(beta1) X(beta2) X(inv_scale)

// Lion, parameters updated in place (lr, wd: float32[1] or [K]; consts:
// LionConsts), and its delta path (the steps returned, the decay
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

// --------------------------------------------------------------- DGC --

// DGC (select and dense momentum): the momentum, and nesterov as 0 or 1.
#define MSOPT_DGC_CONSTS(X) X(momentum) X(nesterov)

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
// tensors (k = the length of idx, positions in the concatenation).  src is the
// step's whole gradient tuple, gidx[j] the source of tensor j (as the dense
// momentum's below).
#define MSOPT_AOT_DGC_BUCKET_SELECT(IN, OUT)                                              \
  IN(u, kEach) IN(v, kEach) IN(src, kRest) IN(consts, kOne) IN(gidx, kCountK)             \
  OUT(idx, kOne) OUT(val, kOne)

#define MSOPT_AOT_DGC_BUCKET_PROPOSE(IN, OUT)                                             \
  IN(u, kEach) IN(v, kEach) IN(src, kRest) IN(consts, kOne) IN(gidx, kCountK) OUT(idx, kOne)

#define MSOPT_AOT_DGC_BUCKET_TAKE(IN, OUT) IN(u, kEach) IN(v, kEach) IN(idx, kOne) OUT(val, kOne)

// p_j -= lr_j * mean at tensor j's positions; lr float32[1] or [K].
#define MSOPT_AOT_DGC_BUCKET_APPLY(IN, OUT) \
  IN(param, kEach) IN(mean, kOne) IN(lr, kOne) OUT(done, kOne)

// The same apply from entries at the bucket's positions: mean = scatter_add(0,
// idx, val) / ranks (ranks float32[1]), at the positions idx names.
#define MSOPT_AOT_DGC_BUCKET_APPLY_ENTRIES(IN, OUT)                                       \
  IN(param, kEach) IN(idx, kOne) IN(val, kOne) IN(lr, kOne) IN(ranks, kOne) OUT(done, kOne)

// DGC's apply of every worker's selections: layout = (R, offsets[K], counts[K]).
#define MSOPT_AOT_DGC_APPLY_MULTI(IN, OUT)                                                \
  IN(param, kEach) IN(idx, kOne) IN(val, kOne) IN(lr, kOne) IN(layout, kOne)              \
  OUT(done, kOne)

// DGC's dense momentum: src is the step's whole gradient tuple, gidx[j] the
// source of parameter j.
#define MSOPT_AOT_DGC_MOMENTUM(IN, OUT)                                                   \
  IN(param, kEach) IN(u, kEach) IN(src, kRest) IN(lr, kOne) IN(consts, kOne)              \
  IN(gidx, kCountK) OUT(done, kOne)

// The same momentum with the gradients in one buffer: parameter j's are the
// elements of flat after those of parameters 0..j-1 (a packed buffer, averaged
// over the workers).
#define MSOPT_AOT_DGC_MOMENTUM_FLAT(IN, OUT) \
  IN(param, kEach) IN(u, kEach) IN(flat, kOne) IN(lr, kOne) IN(consts, kOne) OUT(done, kOne)

// The sources src[gidx[j]], j = 0..K-1, one after another in one buffer of
// their dtype (for one collective: the dense exchange's AllReduce, the first
// step's Broadcast of the parameters).
#define MSOPT_AOT_PACK(IN, OUT) IN(src, kRest) IN(gidx, kCountK) OUT(flat, kOne)

// The reverse, in place: dst[gidx[j]] (each named once) takes its elements of
// flat, which holds them one after another.
#define MSOPT_AOT_UNPACK(IN, OUT) \
  IN(dst, kRest) IN(gidx, kCountK) IN(flat, kOne) OUT(done, kOne)

// DGC's residuals flushed where sparsity="auto" goes dense: mean holds the
// workers' mean of every v, then of every u, each parameter's elements after
// those of parameters 0..j-1 (a packed buffer); p_j -= lr_j * its v's mean,
// u_j = its u's mean, v_j = 0.
#define MSOPT_AOT_DGC_FLUSH_FLAT(IN, OUT) \
  IN(param, kEach) IN(u, kEach) IN(v, kEach) IN(mean, kOne) IN(lr, kOne) OUT(done, kOne)

// The workers' rows, gathered (model signature, step, then the state's world
// size, the rank that saved it, a two-word digest of its residual kinds and the
// step the caller compiled the branch for, or -1):
// fails unless all agree, unless world = (the world size the state was saved by,
// this run's) agree, and unless residuals = (per parameter, the kind of the
// state's residuals; then of this run's: 0 none, 1 gradients, 2
// learning-rate-scaled gradients) can be resumed.  names (uint8: the parameters'
// names, each ended by a NUL) and roles (int32, per parameter: 1 when this run's
// dense_params names it, plus 2 when it is below the size DGC compresses alone)
// are what the refusal says.
#define MSOPT_AOT_CHECK_REPLICAS(IN, OUT)                                              \
  IN(signatures, kOne) IN(width, kOne) IN(world, kOne) IN(residuals, kOne)             \
  IN(names, kOne) IN(roles, kOne) OUT(ok, kOne)

// A 64-bit digest of K tensors of one dtype.
#define MSOPT_AOT_DIGEST(IN, OUT) IN(p, kEach) OUT(digest, kOne)

// A step's clock (DGCMomentum's sparsity="auto"): clock float64[1 + S], updated
// in place, holds the last reading and the least interval recorded per slot;
// slot int32[1] says where the interval since the last reading goes (-1:
// nowhere); after orders the reading after a tensor; best float32[S] returns
// the least intervals (0: none yet).
#define MSOPT_AOT_STEP_CLOCK(IN, OUT) \
  IN(clock, kOne) IN(slot, kOne) IN(after, kOne) OUT(best, kOne)

// ------------------------------------------------------ every kernel --

// Every constants layout: its struct and the name the library reports it by.
#define MSOPT_CONSTS_LAYOUTS(X)                     \
  X(AdamConsts, adam, MSOPT_ADAM_CONSTS)            \
  X(AdamExtConsts, adam_ext, MSOPT_ADAM_EXT_CONSTS) \
  X(LambConsts, lamb, MSOPT_LAMB_CONSTS)            \
  X(LionConsts, lion, MSOPT_LION_CONSTS)            \
  X(DgcConsts, dgc, MSOPT_DGC_CONSTS)               \
  X(Powers, powers, MSOPT_POWERS)

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
  X(ms_optim_dgc_bucket_apply_entries, MSOPT_AOT_DGC_BUCKET_APPLY_ENTRIES) \
  X(ms_optim_dgc_momentum, MSOPT_AOT_DGC_MOMENTUM)             \
  X(ms_optim_dgc_momentum_flat, MSOPT_AOT_DGC_MOMENTUM_FLAT)   \
  X(ms_optim_pack, MSOPT_AOT_PACK)                             \
  X(ms_optim_unpack, MSOPT_AOT_UNPACK)                         \
  X(ms_optim_dgc_flush_flat, MSOPT_AOT_DGC_FLUSH_FLAT)         \
  X(ms_optim_check_replicas, MSOPT_AOT_CHECK_REPLICAS)         \
  X(ms_optim_digest, MSOPT_AOT_DIGEST)                         \
  X(ms_optim_step_clock, MSOPT_AOT_STEP_CLOCK)

#define MSOPT_CONSTS_STRUCT(Struct, name, LIST) MSOPT_DECLARE_CONSTS(Struct, LIST)
MSOPT_CONSTS_LAYOUTS(MSOPT_CONSTS_STRUCT)
#undef MSOPT_CONSTS_STRUCT

// Every layout by kernel name, the field names space-separated (for
// msopt_consts_layout and its Python check).
struct ConstsLayout {
  const char *kernel;
  const char *fields;
};
#define MSOPT_CONSTS_ENTRY(Struct, name, LIST) {#name, LIST(MSOPT_CONTRACT_NAME)},
inline constexpr ConstsLayout kConstsLayouts[] = {MSOPT_CONSTS_LAYOUTS(MSOPT_CONSTS_ENTRY)};
#undef MSOPT_CONSTS_ENTRY

}  // namespace msopt
