// The kernels built for the scalar instruction set (flags in setup.py): the AOT
// kernel table (kernels/table.h) and the C library's (kernels/ps_kernels_impl.h).
#define MSOPT_ISA_NS scalar
#define MSOPT_ISA_NAME "scalar"
#include "kernels/table.h"
#include "kernels/ps_kernels_impl.h"
