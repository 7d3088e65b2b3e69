// The GPU planner's host side (contract: planner_kernel.h): parameter checks, the shared
// memory size and the launch. The kernel is in planner_kernel_device.h.
#include <algorithm>
#include <atomic>
#include <climits>

#include "kernels/planner/planner_kernel.h"
#include "kernels/platform/hip_runtime.h"
// After the runtime: the device code uses its dialect.
#include "kernels/planner/planner_kernel_device.h"

namespace mlaps {
namespace {

using gpu_planner::i64;
using gpu_planner::KernelConsts;
using gpu_planner::kStaticSmemBound;
using gpu_planner::kThreads;
using gpu_planner::MakeConsts;
using gpu_planner::MakeSmemLayout;
using gpu_planner::MaxTiles;

bool IsPowerOfTwo(i64 v) { return v > 0 && (v & (v - 1)) == 0; }

constexpr int kMaxDevices = 64;  // devices whose limits and opt-ins are kept

}  // namespace

const char* GpuPlannerParamsError(const GpuPlannerParams& p) {
  if (p.qo_indptr == nullptr || p.kv_indptr == nullptr || p.kv_last_page_lens == nullptr) {
    return "qo_indptr, kv_indptr and kv_last_page_lens must be device pointers";
  }
  if (p.status == nullptr) return "status must be a device pointer";
  if (p.out_qo_indptr == nullptr || p.work_indptr == nullptr || p.work_info == nullptr ||
      p.reduce_indptr == nullptr || p.reduce_final_map == nullptr ||
      p.reduce_partial_map == nullptr) {
    return "every output buffer must be a device pointer";
  }
  if (reinterpret_cast<uintptr_t>(p.work_info) % 16 != 0) {
    return "work_info must be 16-byte aligned (rows are written as two 16-byte stores)";
  }
  if (p.num_requests < 1) return "num_requests must be >= 1";
  if (p.max_qlen < 1) return "max_qlen must be >= 1";
  const int h = p.num_heads;
  if (h != 16 && h != 32 && h != 48 && h != 64 && h != 128) {
    return "num_heads must be one of 16, 32, 48, 64, 128";
  }
  if (!IsPowerOfTwo(p.page_size) || p.page_size > (1 << 20)) {
    return "page_size must be a power of two in [1, 2^20]";
  }
  if (p.sparse_topk < 0) return "sparse_topk must be >= 0 (0: dense)";
  if (p.sparse_topk > 0 && p.causal_trim) return "a sparse batch has no causal trim";
  if (p.head_fold < 1 || p.head_fold > h) return "head_fold must be in [1, num_heads]";
  if (p.tokens_per_tile < 1) return "tokens_per_tile must be >= 1";
  if (p.num_cu < 1 || p.num_cu > 65536) return "num_cu must be in [1, 65536] (resolved)";
  if (!IsPowerOfTwo(p.kv_granularity) || p.kv_granularity > (1 << 16)) {
    return "kv_granularity must be a power of two in [1, 65536] (resolved)";
  }
  if (p.fixed_overhead < 0 || p.fixed_overhead > (1 << 20)) {
    return "fixed_overhead must be in [0, 2^20] (resolved, not -1)";
  }
  if (p.max_split_per_batch < 0) return "max_split_per_batch must be >= 0";
  if (p.policy != 0) return "policy: only greedy_payload (0) is planned on the GPU";
  if (p.kv_lanes < 1 || p.kv_lanes > 64) return "kv_lanes must be in [1, 64] (resolved)";
  if (p.max_scan_iterations < 0) return "max_scan_iterations must be >= 0";
  if (p.jump_positions < 0 || p.jump_positions > 65536) {
    return "jump_positions must be in [0, 65536] (16-bit positions)";
  }
  if (p.threads != 0 && (p.threads < 64 || p.threads > kThreads || p.threads % 64 != 0)) {
    return "threads must be 0 or a multiple of 64 in [64, 512]";
  }
  // Folded q offsets and tile counts stay in int32 for any batch that validates.
  if (MaxTiles(p) > (i64{1} << 30)) return "num_requests * head_fold * max_qlen is too large";
  const i64 caps[] = {p.out_qo_indptr_capacity,    p.work_indptr_capacity,
                      p.work_info_capacity,        p.reduce_indptr_capacity,
                      p.reduce_final_map_capacity, p.reduce_partial_map_capacity};
  for (i64 c : caps) {
    if (c < 0) return "buffer capacities must be >= 0";
  }
  return nullptr;
}

int64_t GpuPlannerSharedBytes(const GpuPlannerParams& p) { return MakeSmemLayout(p).bytes; }

int64_t GpuPlannerSharedLimit(int device) {
  static std::atomic<i64> limits[kMaxDevices];  // 0: not read yet
  const bool cached = device >= 0 && device < kMaxDevices;
  i64 limit = cached ? limits[device].load(std::memory_order_relaxed) : 0;
  if (limit > 0) return limit;
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, device) != hipSuccess) return 0;
#if defined(MLAPS_GPU_CUDA)
  limit = static_cast<i64>(prop.sharedMemPerBlockOptin) - kStaticSmemBound;
#else
  limit = static_cast<i64>(prop.sharedMemPerBlock) - kStaticSmemBound;
#endif
  limit = std::max<i64>(limit, 0);
  if (cached) limits[device].store(limit, std::memory_order_relaxed);
  return limit;
}

int LaunchGpuPlanner(const GpuPlannerParams& requested, void* stream) {
  if (GpuPlannerParamsError(requested) != nullptr) return hipErrorInvalidValue;
  int device = 0;
  if (hipError_t e = hipGetDevice(&device); e != hipSuccess) return e;
  // The jump tables shrink to what the device's shared memory holds (unknown: as asked; the
  // launch then reports what does not fit).
  const i64 limit = GpuPlannerSharedLimit(device);
  const GpuPlannerParams params =
      limit > 0 ? gpu_planner::FitJumpTables(requested, limit) : requested;
  const int threads = gpu_planner::LaunchThreads(params);
  const KernelConsts consts = MakeConsts(params, threads);
  const i64 bytes = consts.smem.bytes;
  if (bytes > INT_MAX) return hipErrorInvalidValue;
  // Above the default 48 KiB of static + dynamic shared memory the kernel must opt in, once per
  // device and size.
  static std::atomic<i64> opted_in[kMaxDevices];
  if (bytes + kStaticSmemBound > 48 * 1024 && device >= 0 && device < kMaxDevices &&
      opted_in[device].load(std::memory_order_relaxed) < bytes) {
    hipError_t e =
        hipFuncSetAttribute(reinterpret_cast<const void*>(&gpu_planner::GpuPlanKernel),
                            hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (e != hipSuccess) return e;
    opted_in[device].store(bytes, std::memory_order_relaxed);
  }
  hipLaunchKernelGGL(gpu_planner::GpuPlanKernel, dim3(1), dim3(threads), static_cast<size_t>(bytes),
                     static_cast<hipStream_t>(stream), params, consts);
  return hipGetLastError();
}

}  // namespace mlaps
