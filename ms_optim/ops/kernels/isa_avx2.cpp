// The kernels built for the avx2 instruction set (flags in setup.py): the AOT
// kernel table (kernels/table.h) and the C library's (kernels/ps_kernels_impl.h).
#define MSOPT_ISA_NS avx2
#define MSOPT_ISA_NAME "avx2"
#include "kernels/table.h"
#include "kernels/ps_kernels_impl.h"
