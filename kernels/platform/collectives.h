// Collective communication on both vendors: NCCL on NVIDIA, RCCL (the same API) on AMD.
// Link NCCL from the CUDA toolkit (@local_cuda//:nccl); at run time the GPU machine's own
// libnccl.so.2 is loaded (the GPU bundle's runner puts it on LD_LIBRARY_PATH). Keep
// NCCL_NVLS_ENABLE=0 on shared machines (NVLink multicast can take the host's GPUs down).
#ifndef MLAPS_KERNELS_PLATFORM_COLLECTIVES_H_
#define MLAPS_KERNELS_PLATFORM_COLLECTIVES_H_

#if defined(__HIP_PLATFORM_AMD__) || defined(MLAPS_GPU_ROCM)
#include <rccl/rccl.h>
#else
#include <nccl.h>
#endif

#endif  // MLAPS_KERNELS_PLATFORM_COLLECTIVES_H_
