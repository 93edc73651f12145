// The kernels built for the avx512 instruction set (flags in setup.py): the AOT
// kernel table (kernels/table.h) and the C library's (kernels/ps_kernels_impl.h).
#define MSOPT_ISA_NS avx512
#define MSOPT_ISA_NAME "avx512"
#include "kernels/table.h"
#include "kernels/ps_kernels_impl.h"
