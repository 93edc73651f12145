// The constants each MindSpore AOT kernel receives, declared once.
//
// Hyper-parameters that stay fixed for an optimizer's life reach a kernel as
// one float32 tensor ("consts"), read as the struct below; values that change
// every step (learning rate, weight decay, beta powers) are inputs of their
// own.  Each struct is generated from one list of field names (an X-macro), so
// the same list also gives the field count the adapter checks, a static_assert
// that the struct is exactly that many floats, and the names the library
// reports through msopt_consts_layout(kernel).  The Python side
// (ms_optim/aot.py) declares the same names once, builds the tensor by
// name, and compares its list with the library's when it builds the first op,
// so the two ends cannot drift apart silently.
//
// No MindSpore or Python headers here.
#pragma once

namespace msopt {

// Adam (AdamOffload, MindSpore's rule): nesterov is 0 or 1; inv_scale is
// 1 / loss_scale, applied by the in-place kernel after the weight decay.
#define MSOPT_ADAM_CONSTS(X) X(beta1) X(beta2) X(eps) X(inv_scale) X(nesterov)

// AdamOffload with options beyond MindSpore's rule: the Adam fields, then
// decoupled (0 or 1: AdamW, nn.AdamWeightDecay's rule, no bias correction).
// The Adam kernels take either layout (told apart by their length).
#define MSOPT_ADAM_EXT_CONSTS(X) MSOPT_ADAM_CONSTS(X) X(decoupled)

// Lamb (PaddlePaddle's rule): clip_norm is the per-tensor norm clip of the
// scaled gradient (0 = none); clip_lo/clip_hi the value clip after scaling
// (-inf/+inf = none); always_adapt is 0 or 1.
#define MSOPT_LAMB_CONSTS(X) \
  X(beta1) X(beta2) X(eps) X(clip_norm) X(clip_lo) X(clip_hi) X(always_adapt)

// Lion: inv_scale is 1 / loss_scale, applied to the gradient by the in-place
// kernel (the delta path's device divides it out first).
#define MSOPT_LION_CONSTS(X) X(beta1) X(beta2) X(inv_scale)

// DGC (select and dense momentum): the momentum, and nesterov as 0 or 1.
#define MSOPT_DGC_CONSTS(X) X(momentum) X(nesterov)

// The beta powers of this step, beta1^t and beta2^t (Adam and Lamb): an input
// of its own, float32[2], since it changes every step.
#define MSOPT_POWERS(X) X(beta1_power) X(beta2_power)

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

MSOPT_DECLARE_CONSTS(AdamConsts, MSOPT_ADAM_CONSTS)
MSOPT_DECLARE_CONSTS(AdamExtConsts, MSOPT_ADAM_EXT_CONSTS)
MSOPT_DECLARE_CONSTS(LambConsts, MSOPT_LAMB_CONSTS)
MSOPT_DECLARE_CONSTS(LionConsts, MSOPT_LION_CONSTS)
MSOPT_DECLARE_CONSTS(DgcConsts, MSOPT_DGC_CONSTS)
MSOPT_DECLARE_CONSTS(Powers, MSOPT_POWERS)

// Every layout by kernel name, the field names space-separated (for
// msopt_consts_layout and its Python check).
struct ConstsLayout {
  const char *kernel;
  const char *fields;
};
inline constexpr ConstsLayout kConstsLayouts[] = {
    {"adam", MSOPT_ADAM_CONSTS(MSOPT_CONTRACT_NAME)},
    {"adam_ext", MSOPT_ADAM_EXT_CONSTS(MSOPT_CONTRACT_NAME)},
    {"lamb", MSOPT_LAMB_CONSTS(MSOPT_CONTRACT_NAME)},
    {"lion", MSOPT_LION_CONSTS(MSOPT_CONTRACT_NAME)},
    {"dgc", MSOPT_DGC_CONSTS(MSOPT_CONTRACT_NAME)},
    {"powers", MSOPT_POWERS(MSOPT_CONTRACT_NAME)},
};

}  // namespace msopt
