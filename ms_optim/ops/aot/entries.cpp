// What the CPU library declares of its AOT kernels to the Python side: their
// entries and their constants layouts (core/contract.h).
// The tensors of one entry are msopt_aot_signature (aot/call.cpp, shared with the
// CUDA library).
#include <cstring>

#include "aot/signatures.h"
#include "core/common.h"
#include "core/contract.h"

// The constants layout of an AOT kernel (a name of MSOPT_CONSTS_LAYOUTS, e.g. "lamb"):
// its field names space-separated, in order (contract.h); NULL for an unknown name.
MSOPT_API const char *msopt_consts_layout(const char *kernel) {
  if (kernel == nullptr) return nullptr;
  for (const auto &l : msopt::kConstsLayouts)
    if (std::strcmp(l.kernel, kernel) == 0) return l.fields;
  return nullptr;
}

// The names of every constants layout, space-separated (a build's layouts are
// compared with another build's by name: testing.kernels_from).
MSOPT_API const char *msopt_consts_layouts(void) {
#define MSOPT_CONSTS_NAME(Struct, name, LIST) " " #name
  return &(MSOPT_CONSTS_LAYOUTS(MSOPT_CONSTS_NAME))[1];
#undef MSOPT_CONSTS_NAME
}

// Every AOT kernel entry of this library, space-separated (the CUDA library,
// which shares aot/call.cpp, has msopt_cuda_kernels instead).
MSOPT_API const char *msopt_aot_kernels(void) {
#define MSOPT_AOT_NAME(name, LIST) " " #name
  return &(MSOPT_AOT_KERNELS(MSOPT_AOT_NAME))[1];
#undef MSOPT_AOT_NAME
}
