// The per-thread error message of every native entry point (msopt::fail,
// msopt_last_error): compiled into the CPU library and into the CUDA one, whose
// entries share the AOT call binding (aot/call.cpp) and its messages.
#include <cstdarg>
#include <cstdio>

#include "core/common.h"

namespace msopt {
namespace {

thread_local char t_error[kErrorBytes] = "";

}  // namespace

int fail(Status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return code;
}

}  // namespace msopt

const char *msopt_last_error(void) { return msopt::t_error; }
