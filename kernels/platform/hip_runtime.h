// The HIP runtime for mlaps sources, on both vendors.
//
// AMD (hipcc): the real <hip/hip_runtime.h>.
// NVIDIA (nvcc): exactly the subset of the HIP runtime API and device intrinsics that mlaps
// uses, mapped onto CUDA. Debian's HIP 5.2 NVIDIA headers do not compile against CUDA 13
// (removed cudaDeviceProp fields, old cudaMemPrefetchAsync), hence this file. Add a name
// here only when a source needs it; tests/kernels/platform/platform_test.hip exercises each one.
#ifndef MLAPS_KERNELS_PLATFORM_HIP_RUNTIME_H_
#define MLAPS_KERNELS_PLATFORM_HIP_RUNTIME_H_

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__) || defined(MLAPS_GPU_ROCM)

#include <hip/hip_runtime.h>

#include <utility>

// ---- mlaps extensions (no HIP counterpart; see the NVIDIA branch): plain launches here ----
template <typename... Params, typename... Args>
inline hipError_t mlapsLaunchKernelAfterPrevious(void (*kernel)(Params...), dim3 grid, dim3 block,
                                                 size_t shmem, hipStream_t stream, Args&&... args) {
  hipLaunchKernelGGL(kernel, grid, block, shmem, stream, std::forward<Args>(args)...);
  return hipGetLastError();
}
__device__ __forceinline__ void mlapsGridDependencyWait() {}
__device__ __forceinline__ void mlapsTriggerDependents() {}

#elif defined(__CUDACC__) || defined(MLAPS_GPU_CUDA)

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

// ---- Types and constants -----------------------------------------------------------------
using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
using hipMemcpyKind = cudaMemcpyKind;
using hipGraph_t = cudaGraph_t;
using hipGraphExec_t = cudaGraphExec_t;
using hipFuncAttribute = cudaFuncAttribute;
using hipStreamCaptureMode = cudaStreamCaptureMode;

inline constexpr hipError_t hipSuccess = cudaSuccess;
inline constexpr hipError_t hipErrorInvalidValue = cudaErrorInvalidValue;
inline constexpr hipMemcpyKind hipMemcpyHostToDevice = cudaMemcpyHostToDevice;
inline constexpr hipMemcpyKind hipMemcpyDeviceToHost = cudaMemcpyDeviceToHost;
inline constexpr hipMemcpyKind hipMemcpyDeviceToDevice = cudaMemcpyDeviceToDevice;
inline constexpr hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize =
    cudaFuncAttributeMaxDynamicSharedMemorySize;
inline constexpr unsigned hipStreamNonBlocking = cudaStreamNonBlocking;
inline constexpr hipStreamCaptureMode hipStreamCaptureModeGlobal = cudaStreamCaptureModeGlobal;
inline constexpr hipStreamCaptureMode hipStreamCaptureModeThreadLocal =
    cudaStreamCaptureModeThreadLocal;

// ---- Errors and devices ------------------------------------------------------------------
inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline hipError_t hipGetLastError() { return cudaGetLastError(); }
inline hipError_t hipPeekAtLastError() { return cudaPeekAtLastError(); }
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int d) {
  return cudaGetDeviceProperties(p, d);
}
inline hipError_t hipDeviceSynchronize() { return cudaDeviceSynchronize(); }
// Cheap per-launch queries (hipGetDeviceProperties takes microseconds).
using hipDeviceAttribute_t = cudaDeviceAttr;
inline constexpr hipDeviceAttribute_t hipDeviceAttributeWarpSize = cudaDevAttrWarpSize;
inline constexpr hipDeviceAttribute_t hipDeviceAttributeClockRate = cudaDevAttrClockRate;  // kHz
inline constexpr hipDeviceAttribute_t hipDeviceAttributeMultiprocessorCount =
    cudaDevAttrMultiProcessorCount;
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t a, int device) {
  return cudaDeviceGetAttribute(value, a, device);
}

// ---- Memory ------------------------------------------------------------------------------
template <typename T>
inline hipError_t hipMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline hipError_t hipFree(void* p) { return cudaFree(p); }
// Pinned (page-locked) host memory; flags 0 is hipHostMallocDefault.
template <typename T>
inline hipError_t hipHostMalloc(T** p, size_t bytes, unsigned flags = 0) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), bytes, flags);
}
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipMemcpy(void* dst, const void* src, size_t n, hipMemcpyKind k) {
  return cudaMemcpy(dst, src, n, k);
}
inline hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, hipMemcpyKind k,
                                 hipStream_t s = nullptr) {
  return cudaMemcpyAsync(dst, src, n, k, s);
}
inline hipError_t hipMemset(void* p, int v, size_t n) { return cudaMemset(p, v, n); }
inline hipError_t hipMemsetAsync(void* p, int v, size_t n, hipStream_t s = nullptr) {
  return cudaMemsetAsync(p, v, n, s);
}

// ---- Streams, events, graphs -------------------------------------------------------------
inline hipError_t hipStreamCreate(hipStream_t* s) { return cudaStreamCreate(s); }
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned f) {
  return cudaStreamCreateWithFlags(s, f);
}
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return cudaStreamSynchronize(s); }
// hipSuccess when the stream's work is done, hipErrorNotReady while it runs.
inline constexpr hipError_t hipErrorNotReady = cudaErrorNotReady;
inline hipError_t hipStreamQuery(hipStream_t s) { return cudaStreamQuery(s); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = nullptr) {
  return cudaEventRecord(e, s);
}
inline hipError_t hipEventSynchronize(hipEvent_t e) { return cudaEventSynchronize(e); }
inline hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags = 0) {
  return cudaStreamWaitEvent(s, e, flags);
}
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
  return cudaEventElapsedTime(ms, a, b);
}
// HIP's signature: the capture mode is explicit.
inline hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode) {
  return cudaStreamBeginCapture(s, mode);
}
inline hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* g) {
  return cudaStreamEndCapture(s, g);
}
inline hipError_t hipGraphInstantiate(hipGraphExec_t* e, hipGraph_t g, void*, void*, size_t) {
  return cudaGraphInstantiate(e, g, 0);
}
inline hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) { return cudaGraphLaunch(e, s); }
inline hipError_t hipGraphExecDestroy(hipGraphExec_t e) { return cudaGraphExecDestroy(e); }
inline hipError_t hipGraphDestroy(hipGraph_t g) { return cudaGraphDestroy(g); }
template <typename F>
inline hipError_t hipFuncSetAttribute(F* f, hipFuncAttribute a, int v) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(f), a, v);
}

// ---- Launch ------------------------------------------------------------------------------
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)

// ---- mlaps extensions (no HIP counterpart) -------------------------------------------------
// Programmatic dependent launch (sm_90): mlapsLaunchKernelAfterPrevious launches like
// hipLaunchKernelGGL, but the kernel's blocks may start while the previous kernel in the
// stream (or graph) still runs, once every block of that kernel has exited or called
// mlapsTriggerDependents; the kernel must call mlapsGridDependencyWait before it touches
// anything that kernel writes (the wait returns once it completed and its writes are
// visible; at once for a plain launch). AMD (above): a plain launch and no-ops.
template <typename... Params, typename... Args>
inline hipError_t mlapsLaunchKernelAfterPrevious(void (*kernel)(Params...), dim3 grid, dim3 block,
                                                 size_t shmem, hipStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shmem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#ifdef __CUDACC__
__device__ __forceinline__ void mlapsGridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mlapsTriggerDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
#endif  // __CUDACC__

// ---- Device intrinsics (HIP's full-mask, width-defaulted shuffles) ------------------------
#ifdef __CUDACC__
template <typename T>
__device__ __forceinline__ T __shfl_xor(T v, int lane_mask, int width = warpSize) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
template <typename T>
__device__ __forceinline__ T __shfl(T v, int src_lane, int width = warpSize) {
  return __shfl_sync(0xffffffffu, v, src_lane, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_down(T v, unsigned delta, int width = warpSize) {
  return __shfl_down_sync(0xffffffffu, v, delta, width);
}
template <typename T>
__device__ __forceinline__ T __shfl_up(T v, unsigned delta, int width = warpSize) {
  return __shfl_up_sync(0xffffffffu, v, delta, width);
}
// HIP's wall clock: a constant-rate device counter (AMD: hipDeviceAttributeWallClockRate kHz;
// here %globaltimer, nanoseconds). clock64() (SM cycles) is CUDA's own.
__device__ __forceinline__ long long wall_clock64() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<long long>(t);
}
// HIP's 64-bit ballot (bit i: lane i's predicate; lanes >= warpSize read 0). CUDA's own
// deprecated __ballot returns 32 bits, hence HIP's explicit-width name.
__device__ __forceinline__ unsigned long long __ballot64(int predicate) {
  return __ballot_sync(0xffffffffu, predicate);
}
#endif  // __CUDACC__

#else
#error "kernels/platform/hip_runtime.h: build HIP sources with --config=cuda or --config=rocm"
#endif

#endif  // MLAPS_KERNELS_PLATFORM_HIP_RUNTIME_H_
