// The CP merge kernel (lse_merge.h). Memory bound: one warp (wavefront) per row, each lane
// owns dim / warpSize consecutive floats and reads them as float4 from every rank.
#include <algorithm>
#include <cmath>

#include "kernels/cp/lse_merge.h"
#include "kernels/platform/hip_runtime.h"

namespace mlaps::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Live(float lse) { return isfinite(lse) ? lse : -INFINITY; }

// Round to nearest even into bf16 bits; NaN stays a quiet NaN (as sim/numerics.h).
__device__ __forceinline__ uint16_t Bf16Bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if (isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// g = logsumexp of the live LSEs (or -inf), in sim/cp_merge.cc's order.
__device__ float MergedLse(const float* lse, int64_t stride, int world) {
  float m = -INFINITY;
  for (int r = 0; r < world; ++r) m = fmaxf(m, Live(lse[r * stride]));
  if (m == -INFINITY) return -INFINITY;
  float sum = 0.0f;
  for (int r = 0; r < world; ++r) {
    const float l = Live(lse[r * stride]);
    sum += l == -INFINITY ? 0.0f : expf(l - m);
  }
  return m + logf(sum);
}

// kPerLane = dim / warpSize floats per lane (16 on NVIDIA, 8 on AMD for dim 512), a
// compile-time constant so the accumulators stay in registers.
template <int kPerLane>
__global__ void __launch_bounds__(kThreads) LseMergeKernel(LseMergeParams p) {
  const int lanes = warpSize;
  const int lane = threadIdx.x % lanes;
  const int64_t warps_per_grid = int64_t{gridDim.x} * (blockDim.x / lanes);
  constexpr int per_lane = kPerLane;
  for (int64_t row = int64_t{blockIdx.x} * (blockDim.x / lanes) + threadIdx.x / lanes; row < p.rows;
       row += warps_per_grid) {
    const float g = MergedLse(p.lse_ranks + row, p.rows, p.world_size);
    float acc[per_lane];
#pragma unroll
    for (int i = 0; i < per_lane; ++i) acc[i] = 0.0f;
    if (g != -INFINITY) {
      for (int r = 0; r < p.world_size; ++r) {
        const float l = Live(p.lse_ranks[r * p.rows + row]);
        if (l == -INFINITY) continue;  // a dead rank's O may hold anything
        const float w = expf(l - g);
        const float4* src = reinterpret_cast<const float4*>(p.o_ranks + (r * p.rows + row) * p.dim +
                                                            lane * per_lane);
#pragma unroll
        for (int i = 0; i < per_lane / 4; ++i) {
          const float4 v = src[i];
          acc[4 * i + 0] = fmaf(w, v.x, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(w, v.y, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(w, v.z, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(w, v.w, acc[4 * i + 3]);
        }
      }
    }
    if (p.out_bf16) {
      uint16_t* dst = static_cast<uint16_t*>(p.o_out) + row * p.dim + lane * per_lane;
#pragma unroll
      for (int i = 0; i < per_lane; i += 2) {
        const uint32_t two = Bf16Bits(acc[i]) | (uint32_t{Bf16Bits(acc[i + 1])} << 16);
        *reinterpret_cast<uint32_t*>(dst + i) = two;
      }
    } else {
      float4* dst =
          reinterpret_cast<float4*>(static_cast<float*>(p.o_out) + row * p.dim + lane * per_lane);
#pragma unroll
      for (int i = 0; i < per_lane / 4; ++i) {
        dst[i] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
      }
    }
    if (lane == 0) p.lse_out[row] = g;
  }
}

}  // namespace

LseMergeError LaunchLseMerge(const LseMergeParams& p, void* stream, int* runtime_error) {
  if (runtime_error != nullptr) *runtime_error = 0;
  if (p.world_size < 1 || p.world_size > kMaxWorld) return LseMergeError::kBadWorld;
  int device = 0, warp = 0, sms = 0;
  if (hipGetDevice(&device) != hipSuccess ||
      hipDeviceGetAttribute(&warp, hipDeviceAttributeWarpSize, device) != hipSuccess ||
      hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess) {
    return LseMergeError::kLaunchFailed;
  }
  // Each lane holds dim / warp floats in float4s: 4, 8 or 16 of them.
  const int per_lane = p.dim > 0 && p.dim % warp == 0 ? p.dim / warp : 0;
  if (p.rows < 0 || (per_lane != 4 && per_lane != 8 && per_lane != 16)) {
    return LseMergeError::kBadShape;
  }
  if (p.rows == 0) return LseMergeError::kOk;
  if (p.o_ranks == nullptr || p.lse_ranks == nullptr || p.o_out == nullptr ||
      p.lse_out == nullptr) {
    return LseMergeError::kNullPointer;
  }
  const int64_t rows_per_block = kThreads / warp;
  const int64_t blocks =
      std::min<int64_t>((p.rows + rows_per_block - 1) / rows_per_block, int64_t{sms} * 16);
  const dim3 grid(static_cast<unsigned>(blocks)), block(kThreads);
  hipStream_t s = static_cast<hipStream_t>(stream);
  if (per_lane == 16) {
    hipLaunchKernelGGL(LseMergeKernel<16>, grid, block, 0, s, p);
  } else if (per_lane == 8) {
    hipLaunchKernelGGL(LseMergeKernel<8>, grid, block, 0, s, p);
  } else {
    hipLaunchKernelGGL(LseMergeKernel<4>, grid, block, 0, s, p);
  }
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) {
    if (runtime_error != nullptr) *runtime_error = static_cast<int>(e);
    return LseMergeError::kLaunchFailed;
  }
  return LseMergeError::kOk;
}

}  // namespace mlaps::kernels
