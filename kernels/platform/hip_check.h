// MLAPS_CHECK_HIP(expr): for host tools and benchmarks (not libraries, which return errors):
// a HIP call that fails prints the call, where, and HIP's message, and exits with status 1.
#ifndef MLAPS_KERNELS_PLATFORM_HIP_CHECK_H_
#define MLAPS_KERNELS_PLATFORM_HIP_CHECK_H_

#include <cstdio>
#include <cstdlib>

#include "kernels/platform/hip_runtime.h"

#define MLAPS_CHECK_HIP(expr)                                                                   \
  do {                                                                                          \
    hipError_t e_ = (expr);                                                                     \
    if (e_ != hipSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, hipGetErrorString(e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

#endif  // MLAPS_KERNELS_PLATFORM_HIP_CHECK_H_
