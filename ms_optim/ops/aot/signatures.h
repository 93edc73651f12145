// The tensors of each MindSpore AOT kernel, bound to the adapters and reported.
//
// MindSpore calls an AOT kernel with one flat array of tensors: its inputs,
// then its outputs.  Each kernel's list of them is declared once, with its
// constants, in core/contract.h, each tensor with its arity:
//   kOne    one tensor;
//   kEach   one tensor per parameter of the call (K of them, side by side:
//           param0..param{K-1});
//   kCountK one tensor of K elements (it also tells K where a kRest group
//           leaves the count ambiguous);
//   kRest   as many tensors as remain (at most one group per kernel, and only
//           single tensors after it).
// This header turns each list into sig::<entry> (slot ids and the slots in
// order), which drives three things, so they cannot drift apart:
//   - the adapter's indexing: AotCall (aot/call.h) resolves K and where every
//     slot starts from the tensor count, and the adapters address tensors as
//     c.index(S::grad, i), never by arithmetic of their own;
//   - what the library reports through msopt_aot_signature(entry), e.g.
//     "param:each m:each v:each grad:each lr wd powers consts -> done";
//   - the Python side (ms_optim/aot.py), which reads that report and
//     assembles every call by slot name: the optimizers, the tests and the
//     benchmarks.
// The tensors' element types and sizes are checked by each adapter (ops/aot/aot_*.cpp).
//
// No MindSpore or Python headers here.
#pragma once

#include "core/contract.h"

namespace msopt {

enum class Arity : int { kOne, kEach, kCountK, kRest };

struct Slot {
  const char *name;
  Arity arity;
  bool output;
};

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
