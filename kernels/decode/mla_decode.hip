// Host launch API of the persistent MLA decode kernel and its reduce (mla_decode.h). The
// device code lives in mla_decode_device.h (tensor-core path on NVIDIA, generic path on AMD).
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "kernels/decode/mla_decode.h"
#include "kernels/decode/mla_decode_device.h"
#include "kernels/decode/mla_decode_sm90.h"
#include "kernels/decode/mla_decode_sm90_bf16.h"
#include "kernels/decode/mla_decode_sm90_f16pv.h"
#include "kernels/decode/mla_decode_sm90_narrow.h"
#include "kernels/decode/mla_reduce_device.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/decode_route.h"

#if defined(MLAPS_GPU_CUDA)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled (the driver's, through the runtime)
#endif

namespace mlaps {
namespace {

// This build's device path: the NVIDIA build compiles the tensor-core path (sm_90a), the
// AMD build the generic one. The host pass of either cannot see __CUDA_ARCH__, hence the
// build macro.
#if defined(MLAPS_GPU_CUDA)
constexpr bool kMmaPath = true;
#else
constexpr bool kMmaPath = false;
#endif

bool PowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Decode block threads when MlaDecodeParams::block_threads is 0.
constexpr int kDefaultThreads = 256;

}  // namespace

const char* MlaDecodeParamsError(const MlaDecodeParams& p) {
  if (p.q == nullptr || p.kv_cache == nullptr) return "q and kv_cache are required";
  if (p.kv_indices == nullptr || p.qo_indptr == nullptr || p.kv_indptr == nullptr ||
      p.kv_last_page_lens == nullptr) {
    return "kv_indices, qo_indptr, kv_indptr and kv_last_page_lens are required";
  }
  if (p.work_indptr == nullptr || p.work_info == nullptr) {
    return "work_indptr and work_info are required";
  }
  if ((p.o == nullptr) == (p.o_fp32 == nullptr)) return "exactly one of o and o_fp32 is required";
  if (p.lse == nullptr) return "lse is required";
  if (p.status == nullptr) return "status is required";
  if (p.num_requests < 1) return "num_requests must be >= 1";
  if (p.num_q_tokens < 0 || p.num_pages < 0 || p.num_kv_indices < 0 || p.work_info_capacity < 0 ||
      p.partial_rows_capacity < 0) {
    return "sizes and capacities must be >= 0";
  }
  if (p.num_cu < 1) return "num_cu must be >= 1";
  if (p.cu_lanes < 1 || p.num_cu % p.cu_lanes != 0) {
    return "cu_lanes must be >= 1 and divide num_cu";
  }
  if (p.num_heads < 1 || p.head_fold < 1 || p.num_heads % p.head_fold != 0) {
    return "head_fold must divide num_heads";
  }
  const int hpg = p.num_heads / p.head_fold;
  if (p.rows_per_tile != mla::kTileRows) {
    return "rows_per_tile must be 64 (the sm90 registry's tile; 128-row variants are not "
           "implemented)";
  }
  if (p.tokens_per_tile < 1 || int64_t{hpg} * p.tokens_per_tile > p.rows_per_tile) {
    return "(num_heads / head_fold) * tokens_per_tile must be in [1, rows_per_tile]";
  }
  if (kMmaPath && hpg % 16 != 0) {
    return "num_heads / head_fold must be a multiple of 16 (16-row MMA groups)";
  }
  if (!PowerOfTwo(p.page_size) || p.page_size > 4096) {
    return "page_size must be a power of two in [1, 4096]";
  }
  if (p.dtype != kMlaBf16 && p.dtype != kMlaFp8E4m3fn) return "dtype must be bf16 or fp8 e4m3fn";
  if (p.mask != kMlaMaskCausal && p.mask != kMlaMaskNone && p.mask != kMlaMaskCpRoundRobin) {
    return "unknown mask";
  }
  if (p.cp_world_size < 1) return "cp_world_size must be >= 1";
  if (p.cp_interleave < 1 || (p.cp_interleave & (p.cp_interleave - 1)) != 0) {
    return "cp_interleave must be a power of two";
  }
  if (p.cp_rank < 0 || p.cp_rank >= p.cp_world_size) return "cp_rank must be in [0, cp_world_size)";
  if (p.mask == kMlaMaskCpRoundRobin && p.cp_global_kv_len == nullptr) {
    return "cp_global_kv_len is required for CP round-robin";
  }
  if (!(p.sm_scale > 0.0f) || !(p.q_scale > 0.0f) || !(p.kv_scale > 0.0f)) {
    return "sm_scale, q_scale and kv_scale must be > 0";
  }
  if ((p.partial_o == nullptr || p.partial_lse == nullptr) && p.partial_rows_capacity > 0) {
    return "partial_o and partial_lse are required when partial_rows_capacity > 0";
  }
  if ((reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.kv_cache) |
       reinterpret_cast<uintptr_t>(p.o) | reinterpret_cast<uintptr_t>(p.o_fp32) |
       reinterpret_cast<uintptr_t>(p.partial_o)) %
          16 !=
      0) {
    return "q, kv_cache, o, o_fp32 and partial_o must be 16-byte aligned";
  }
  if (p.trace != nullptr && p.trace_counts == nullptr) return "trace needs trace_counts";
  if (p.block_threads != 0 && p.block_threads != 256 && p.block_threads != 512) {
    return "block_threads must be 0, 256 or 512";
  }
  if (p.path != kMlaPathAuto && p.path != kMlaPathMmaSync && p.path != kMlaPathWgmma &&
      p.path != kMlaPathWgmmaF16 && p.path != kMlaPathWgmmaNarrow && p.path != kMlaPathWgmmaF16Pv) {
    return "path must be kMlaPathAuto, kMlaPathMmaSync, kMlaPathWgmma, kMlaPathWgmmaF16, "
           "kMlaPathWgmmaNarrow or kMlaPathWgmmaF16Pv";
  }
  if ((p.path == kMlaPathWgmma || p.path == kMlaPathWgmmaF16 || p.path == kMlaPathWgmmaNarrow ||
       p.path == kMlaPathWgmmaF16Pv) &&
      (!kMmaPath || p.block_threads == 512)) {
    return "the wgmma paths need the NVIDIA build and the default block threads";
  }
  if (p.path == kMlaPathWgmmaNarrow && int64_t{hpg} * p.tokens_per_tile > mla::sm90_narrow::kRows) {
    return "kMlaPathWgmmaNarrow needs (num_heads / head_fold) * tokens_per_tile <= 16";
  }
  // Row indices of Q and of the kv cache stay in int32 (the sm90 producer's addressing).
  if (p.num_pages * p.page_size > INT32_MAX || p.num_q_tokens * p.num_heads > INT32_MAX) {
    return "the kv cache (num_pages * page_size) and Q (num_q_tokens * num_heads) must hold "
           "fewer than 2^31 rows";
  }
  if (p.merge.counters != nullptr) {
    const MlaSplitMerge& m = p.merge;
    if (m.reduce_indptr == nullptr || m.reduce_final_map == nullptr ||
        m.reduce_partial_map == nullptr) {
      return "merge needs reduce_indptr, reduce_final_map and reduce_partial_map";
    }
    if (m.reduce_tiles_capacity < 0 || m.num_reduce_tiles < 0 ||
        m.reduce_partial_map_capacity < 0) {
      return "merge sizes and capacities must be >= 0";
    }
    if (m.num_reduce_tiles_device == nullptr && m.num_reduce_tiles > m.reduce_tiles_capacity) {
      return "merge.num_reduce_tiles exceeds merge.reduce_tiles_capacity";
    }
    if (p.partial_o == nullptr || p.partial_lse == nullptr) {
      return "merge needs partial_o and partial_lse";
    }
  }
  return nullptr;
}

MlaReduceParams MlaReduceParamsOf(const MlaDecodeParams& p) {
  MlaReduceParams r;
  r.reduce_indptr = p.merge.reduce_indptr;
  r.reduce_final_map = p.merge.reduce_final_map;
  r.reduce_partial_map = p.merge.reduce_partial_map;
  r.reduce_partial_map_capacity = p.merge.reduce_partial_map_capacity;
  r.num_reduce_tiles = p.merge.num_reduce_tiles;
  r.num_reduce_tiles_device = p.merge.num_reduce_tiles_device;
  r.reduce_tiles_capacity = p.merge.reduce_tiles_capacity;
  r.qo_indptr = p.qo_indptr;
  r.num_requests = p.num_requests;
  r.num_q_tokens = p.num_q_tokens;
  r.num_heads = p.num_heads;
  r.head_fold = p.head_fold;
  r.partial_o = p.partial_o;
  r.partial_lse = p.partial_lse;
  r.partial_rows_capacity = p.partial_rows_capacity;
  r.o = p.o;
  r.o_fp32 = p.o_fp32;
  r.lse = p.lse;
  r.status = p.status;
  return r;
}

const char* MlaReduceParamsError(const MlaReduceParams& p) {
  if (p.reduce_indptr == nullptr || p.reduce_final_map == nullptr ||
      p.reduce_partial_map == nullptr) {
    return "reduce_indptr, reduce_final_map and reduce_partial_map are required";
  }
  if (p.qo_indptr == nullptr || p.partial_o == nullptr || p.partial_lse == nullptr ||
      p.lse == nullptr || p.status == nullptr) {
    return "qo_indptr, partial_o, partial_lse, lse and status are required";
  }
  if ((p.o == nullptr) == (p.o_fp32 == nullptr)) return "exactly one of o and o_fp32 is required";
  if (p.num_requests < 1) return "num_requests must be >= 1";
  if (p.num_heads < 1 || p.head_fold < 1 || p.num_heads % p.head_fold != 0) {
    return "head_fold must divide num_heads";
  }
  if (p.reduce_tiles_capacity < 0 || p.num_reduce_tiles < 0 || p.reduce_partial_map_capacity < 0 ||
      p.partial_rows_capacity < 0 || p.num_q_tokens < 0) {
    return "sizes and capacities must be >= 0";
  }
  if (p.num_reduce_tiles_device == nullptr && p.num_reduce_tiles > p.reduce_tiles_capacity) {
    return "num_reduce_tiles exceeds reduce_tiles_capacity";
  }
  if ((reinterpret_cast<uintptr_t>(p.partial_o) | reinterpret_cast<uintptr_t>(p.o) |
       reinterpret_cast<uintptr_t>(p.o_fp32)) %
          16 !=
      0) {
    return "partial_o, o and o_fp32 must be 16-byte aligned";
  }
  return nullptr;
}

namespace {

// mla::UseCompactLayout on the current device (a cheap attribute query, no runtime state).
bool UseCompact(const MlaDecodeParams& p) {
  if (!kMmaPath || !mla::CompactLayoutFits(p)) return false;
  int device = 0, sms = 0;
  if (hipGetDevice(&device) != hipSuccess ||
      hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess) {
    return false;
  }
  return mla::UseCompactLayout(p, sms);
}

// Whether the narrow-tile sm90 kernel runs the launch (MlaDecodePath): asked for, or auto on
// tiles of <= 16 rows at one block an SM.
bool UseNarrow(const MlaDecodeParams& p) {
  if (!kMmaPath) return false;
  if (p.path == kMlaPathWgmmaNarrow) return true;
  return p.path == kMlaPathAuto && mla::CompactLayoutFits(p) && !UseCompact(p);
}

// bf16 64-row tiles run f16 P V where it measured faster than the hi + lo kernel
// (Sm90Bf16RunsF16Pv in metadata/decode_route.h, which the cost model shares): whole pages and
// long requests (a kv_indices capacity above the batch's pages only moves the choice: both
// kernels compute the same O).
static_assert(kSm90WholePageTokens == mla::SmemSm90::kTokens, "TMA loads 64-token pages whole");
bool Bf16F16PvPays(const MlaDecodeParams& p) {
  return Sm90Bf16RunsF16Pv(p.page_size, p.num_kv_indices, p.num_requests);
}

// Whether the 64-row sm90 kernel with f16 P V from registers runs the launch: asked for, or
// auto on 64-row tiles at one block an SM: fp8 at any page size (TMA loads whole-page blocks,
// cp.async gathers the others, e.g. sparse: notes.md), bf16 where Bf16F16PvPays.
bool UseF16Pv(const MlaDecodeParams& p) {
  if (!kMmaPath) return false;
  if (p.path == kMlaPathWgmmaF16Pv) return true;
  return p.path == kMlaPathAuto && (p.dtype == kMlaFp8E4m3fn || Bf16F16PvPays(p)) &&
         p.block_threads != 512 && !UseCompact(p) && !UseNarrow(p);
}

// Whether another 64-row sm90 wgmma kernel runs the launch (MlaDecodePath), and which: the
// f16-tile one (fp8, or bf16 when asked for) or the bf16 one.
bool UseWgmma(const MlaDecodeParams& p) {
  if (!kMmaPath || p.path == kMlaPathMmaSync || UseNarrow(p) || UseF16Pv(p)) return false;
  if (p.path == kMlaPathWgmma || p.path == kMlaPathWgmmaF16) return true;
  return p.block_threads != 512 && !UseCompact(p);
}
bool UseF16Tiles(const MlaDecodeParams& p) {
  return p.dtype == kMlaFp8E4m3fn || p.path == kMlaPathWgmmaF16;
}

}  // namespace

int64_t MlaDecodeSharedBytes(const MlaDecodeParams& p) {
  if (!kMmaPath) return 0;
  if (UseNarrow(p) || UseF16Pv(p)) return mla::SmemSm90::kBytes;
  if (UseWgmma(p)) {
    return UseF16Tiles(p) ? mla::SmemSm90::kBytes : mla::sm90_bf16::SmemSm90::kBytes;
  }
  const bool fp8 = p.dtype == kMlaFp8E4m3fn;
  if (UseCompact(p)) {
    return fp8 ? mla::MmaLayout<true, 1>::kBytes : mla::MmaLayout<false, 1>::kBytes;
  }
  return fp8 ? mla::MmaLayout<true>::kBytes : mla::MmaLayout<false>::kBytes;
}

const char* MlaDecodeKernelName(const MlaDecodeParams& p) {
  if (!kMmaPath) return "generic";
  if (UseNarrow(p)) return "narrow";
  if (UseF16Pv(p)) return "f16pv";
  if (UseWgmma(p)) return UseF16Tiles(p) ? "f16" : "bf16";
  return "mma";
}

using Kernel = void (*)(MlaDecodeParams);

int EncodeKvTmaMap(const MlaDecodeParams& p, bool raw_e4m3, mla::TmaMap* map) {
  *map = mla::TmaMap{};
#if defined(MLAPS_GPU_CUDA)
  static_assert(sizeof(mla::TmaMap) == sizeof(CUtensorMap) && alignof(mla::TmaMap) == 64,
                "TmaMap holds a CUtensorMap");
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return hipErrorInvalidValue;
  const bool fp8 = p.dtype == kMlaFp8E4m3fn;
  const int swizzle = mla::KvMapSwizzleBytes(fp8, raw_e4m3);
  const int64_t rows = p.num_pages * p.page_size;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(mla::kDimQk),
                              static_cast<cuuint64_t>(rows > 0 ? rows : 1)};
  const cuuint64_t row_stride[1] = {static_cast<cuuint64_t>(mla::kDimQk * (fp8 ? 1 : 2))};
  const cuuint32_t box[2] = {64, 64};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(reinterpret_cast<CUtensorMap*>(map),
                            fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                            2, const_cast<void*>(p.kv_cache), dims, row_stride, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                            : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                            : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) return hipErrorInvalidValue;
#else
  (void)p;
  (void)raw_e4m3;
#endif
  return hipSuccess;
}

namespace {

// The decode kernel of these (valid) params; *merges: whether that kernel merges split tiles
// itself (the sm90 kernels, MlaSplitMerge).
int LaunchDecodeKernel(const MlaDecodeParams& params, void* stream, bool* merges) {
  *merges = false;
  const bool fp8 = params.dtype == kMlaFp8E4m3fn;
  const int smem = static_cast<int>(MlaDecodeSharedBytes(params));
  const int threads = params.block_threads != 0 ? params.block_threads : kDefaultThreads;
  const bool wide = threads == 512;
  const bool compact = UseCompact(params);
  const bool f16_tiles = UseWgmma(params) && UseF16Tiles(params);
  if (UseNarrow(params) || UseF16Pv(params) || f16_tiles) {
    // The kernels that take the kv cache's TMA map: [narrow, f16pv, f16 tiles, f16 tiles without
    // TMA][fp8]. With pages of fewer than 64 tokens no kv block is one TMA load, and the
    // f16-tile kernel built without its TMA path copies them faster (notes.md).
    static std::atomic<bool> tma_allowed[4][2] = {
        {false, false}, {false, false}, {false, false}, {false, false}};
    using TmaKernel = void (*)(MlaDecodeParams, mla::TmaMap);
    const int which = UseNarrow(params)                            ? 0
                      : UseF16Pv(params)                           ? 1
                      : params.page_size >= mla::SmemSm90::kTokens ? 2
                                                                   : 3;
    static constexpr TmaKernel kTmaKernels[4][2] = {
        {mla::sm90_narrow::MlaDecodeSm90NarrowKernel<false>,
         mla::sm90_narrow::MlaDecodeSm90NarrowKernel<true>},
        {mla::sm90_f16pv::MlaDecodeSm90F16PvKernel<false>,
         mla::sm90_f16pv::MlaDecodeSm90F16PvKernel<true>},
        {mla::MlaDecodeSm90Kernel<false, true>, mla::MlaDecodeSm90Kernel<true, true>},
        {mla::MlaDecodeSm90Kernel<false, false>, mla::MlaDecodeSm90Kernel<true, false>}};
    const TmaKernel kernel = kTmaKernels[which][fp8];
    mla::TmaMap kv_map;
    // The narrow and f16 P V kernels keep e4m3 rows raw (fp8 wgmma for S); the f16-tile one
    // widens them.
    const bool raw_e4m3 = which <= 1;
    if (const hipError_t e = static_cast<hipError_t>(EncodeKvTmaMap(params, raw_e4m3, &kv_map));
        e != hipSuccess) {
      return e;
    }
    if (!tma_allowed[which][fp8].load(std::memory_order_acquire)) {
      const hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                               hipFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != hipSuccess) return e;
      tma_allowed[which][fp8].store(true, std::memory_order_release);
    }
    const int tma_threads =
        which == 1 || which == 4 ? mla::sm90_f16pv::kF16PvThreads : mla::kSm90Threads;
    hipLaunchKernelGGL(kernel, dim3(params.num_cu), dim3(tma_threads), smem,
                       static_cast<hipStream_t>(stream), params, kv_map);
    *merges = true;
    return hipGetLastError();
  }
  if (UseWgmma(params)) {
    // The bf16 hi + lo kernel (bf16 tiles).
    static std::atomic<bool> sm90_allowed{false};
    const Kernel sm90 = mla::sm90_bf16::MlaDecodeSm90Kernel;
    if (!sm90_allowed.load(std::memory_order_acquire)) {
      const hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(sm90),
                                               hipFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (e != hipSuccess) return e;
      sm90_allowed.store(true, std::memory_order_release);
    }
    hipLaunchKernelGGL(sm90, dim3(params.num_cu), dim3(mla::sm90_bf16::kSm90Threads), smem,
                       static_cast<hipStream_t>(stream), params);
    *merges = true;
    return hipGetLastError();
  }
  // [fp8][0: 64-row 256 threads, 1: 64-row 512 threads, 2: compact 256 threads]
  static constexpr Kernel kKernels[2][3] = {
      {mla::MlaDecodeKernel<false, 8, 4>, mla::MlaDecodeKernel<false, 16, 4>,
       mla::MlaDecodeKernel<false, 8, 1>},
      {mla::MlaDecodeKernel<true, 8, 4>, mla::MlaDecodeKernel<true, 16, 4>,
       mla::MlaDecodeKernel<true, 8, 1>}};
  const int shape = compact ? 2 : wide ? 1 : 0;
  const Kernel kernel = kKernels[fp8 ? 1 : 0][shape];
  const int variant = (fp8 ? 3 : 0) + shape;
  // Above 48 KB a block's dynamic shared memory must be allowed explicitly, once per kernel
  // (the first launch of each does it, so later launches, e.g. under graph capture, make no
  // runtime calls besides the launch).
  static std::atomic<bool> allowed[6] = {false, false, false, false, false, false};
  if (smem > 48 * 1024 && !allowed[variant].load(std::memory_order_acquire)) {
    const hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                             hipFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != hipSuccess) return e;
    allowed[variant].store(true, std::memory_order_release);
  }
  hipLaunchKernelGGL(kernel, dim3(params.num_cu), dim3(threads), smem,
                     static_cast<hipStream_t>(stream), params);
  return hipGetLastError();
}

}  // namespace

int LaunchMlaDecode(const MlaDecodeParams& params, void* stream) {
  if (MlaDecodeParamsError(params) != nullptr) return hipErrorInvalidValue;
  bool merges = false;
  if (const int e = LaunchDecodeKernel(params, stream, &merges); e != hipSuccess) return e;
  // Merge asked for from a kernel that does not merge: the reduce right behind it.
  if (params.merge.counters == nullptr || merges) return hipSuccess;
  return LaunchMlaReduce(MlaReduceParamsOf(params), stream);
}

int LaunchMlaReduce(const MlaReduceParams& params, void* stream) {
  if (MlaReduceParamsError(params) != nullptr) return hipErrorInvalidValue;
  if (params.reduce_tiles_capacity == 0) return hipSuccess;  // no split tile can exist
  // A programmatic dependent of the decode launched before it (sm_90; AMD: a plain launch):
  // its blocks start on the SMs the decode's blocks leave and read the plan, then wait for
  // the decode grid before the partials (MlaReduceKernel).
  return mlapsLaunchKernelAfterPrevious(
      mla::MlaReduceKernel, dim3(params.reduce_tiles_capacity, mla::kReduceRowSplit),
      dim3(mla::kReduceThreads), 0, static_cast<hipStream_t>(stream), params);
}

bool DumpSm90Trace(const char* path) {
#if defined(MLAPS_SM90_TRACE) && defined(__CUDACC__)
  static unsigned int host[mla::kSm90TraceCtas][mla::kSm90TraceRoles][mla::kSm90TraceBlocks]
                          [mla::kSm90TraceTags];
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  if (cudaMemcpyFromSymbol(host, mla::g_sm90_trace, sizeof(host)) != cudaSuccess) return false;
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(host, sizeof(host), 1, f) == 1;
  return std::fclose(f) == 0 && ok;
#else
  (void)path;
  return false;
#endif
}

}  // namespace mlaps
