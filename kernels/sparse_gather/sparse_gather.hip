// The sparse KV index gather kernel (contract: metadata/sparse_gather_spec.h; host API:
// sparse_gather.h). One block of kThreads threads per token t:
//
//   0. Row checks (every thread reads the same few words). A padded row or a row error writes
//      its -1s, count and status and returns, the whole block together.
//   1. Each thread takes kPer columns; warp w owns columns [w * ws * kPer, (w+1) * ws * kPer)
//      with column = w * ws * kPer + k * ws + lane (ws = warpSize), so within a warp (k, lane)
//      order is column order. The thread loads its columns (coalesced per warp and k, all in
//      flight at once), copies them to shared memory, applies rules 1-2 (invalid, out of
//      bound) and issues the map lookups of rule 4 for every in-bound column right away, so
//      their latency hides under step 2. The hash table is cleared.
//   2. Bucket filter: each in-bound position hashes to one of ~16 x topk two-bit buckets
//      (seen, contested); one atomicOr per column, all of a thread's in flight. A column
//      whose bucket was already seen marks it contested. After the barrier a bucket is
//      contested iff two or more columns hit it, whatever the order: every copy of a
//      duplicated position is contested, and a column in an uncontested bucket is unique.
//   3. Only when some bucket is contested (uniform): the contested columns (all duplicates
//      plus ~6% false positives) go through an exact hash table (open addressing, linear
//      probing): slot <- the smallest column holding the position. atomicCAS claims an empty
//      slot, atomicMin lowers the column of a slot holding the same position; a slot's
//      position never changes once claimed, so the result does not depend on thread timing.
//      A contested column whose slot names another column is a duplicate (rule 3). Rule 4:
//      a lookup that found no slot is unmapped. Per-warp kept counts (ballots) and drop
//      counts (shuffle reductions) to shared memory.
//   4. Compaction: kept column -> warp base + kept before it in the warp (ballot prefix).
//      The compacted slots go to shared memory (over the staged row, no longer needed).
//   5. The dense row and the span from shared memory with coalesced stores; count and status.
// Every global index is range-checked before the access (see the spec); table entries are
// columns in [0, topk) by construction.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/platform/hip_runtime.h"
#include "kernels/sparse_gather/sparse_gather.h"

namespace mlaps {
namespace {

constexpr int kThreads = 256;             // per block; a multiple of every warp size (32, 64)
constexpr int kMaxWarps = kThreads / 32;  // warps of the smallest warp size
// Resident blocks per SM the register budget aims for: 5 x 256 threads at <= 48 registers
// (the 16-column variant, topk > 2048, needs more registers). Measured on H200 at topk 2048:
// 6 blocks (40 registers) is no faster with a page-64 block table and 1.4-1.7x slower with
// page-1 maps, whose random lookups then get less L1 (more shared memory carved out).
constexpr int MinBlocks(int per) { return per >= 16 ? 3 : 5; }
constexpr int kMaxPer = kGpuSparseGatherMaxTopk / kThreads;  // columns per thread at most
static_assert(kMaxPer == 16, "the per-thread column masks are 32-bit");

struct Args {
  const int32_t* topk_indices;
  const int32_t* token_to_seq;
  const int32_t* token_bound;
  const int32_t* indptr;
  const int32_t* block_table;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  int32_t* packed;
  int32_t* counts;
  int32_t* dense;
  int32_t* status;
  long long* profile;
  int topk;
  int num_requests;
  int flat;            // 1: kFlat map, 0: kBlockTable
  int log2_page;       // kBlockTable
  int max_blocks;      // kBlockTable
  int num_kv_indices;  // kFlat
  int packed_capacity;
  int row_words;     // shared words before the table: topk rounded up to 4
  int table_bits;    // the table has 1 << table_bits slots
  int bucket_words;  // the bucket filter: 16 two-bit buckets per word
  int bucket_bits;   // log2(16 * bucket_words)
  int vec_store;     // int4 stores of dense rows
};

__device__ __forceinline__ uint32_t HashOf(int32_t v, int bits) {
  return (static_cast<uint32_t>(v) * 0x9E3779B1u) >> (32 - bits);
}

// Sum over the warp (every lane gets it).
__device__ __forceinline__ int WarpSum(int v) {
  for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_xor(v, d);
  return v;
}

__device__ __forceinline__ int Popc64(unsigned long long x) { return __popcll(x); }

// HIP declares wall_clock64() in its device pass only.
__device__ __forceinline__ long long WallClock() {
#if defined(MLAPS_GPU_ROCM) && !defined(__HIP_DEVICE_COMPILE__)
  return 0;
#else
  return wall_clock64();
#endif
}

// Rows that keep nothing: dense all -1, the span all -1 unless it is malformed, count 0,
// status {0, 0, 0, 0, error}.
__device__ void WriteEmptyRow(const Args& a, int64_t t, int error, int32_t lo, int32_t hi) {
  int32_t* dense = a.dense + t * a.topk;
  for (int i = threadIdx.x; i < a.topk; i += blockDim.x) dense[i] = -1;
  if (error != kSparseRowBadSpan) {
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) a.packed[i] = -1;
  }
  if (threadIdx.x == 0) {
    a.counts[t] = 0;
    int32_t* status = a.status + t * kSparseGatherStatusWords;
    for (int k = 0; k < kSparseNumDropReasons; ++k) status[k] = 0;
    status[kSparseStatusRowError] = error;
  }
}

template <int kPer>
__global__ void __launch_bounds__(kThreads, MinBlocks(kPer)) SparseGatherKernel(Args a) {
  extern __shared__ int4 smem_words[];  // int4: 16-byte aligned
  int32_t* smem = reinterpret_cast<int32_t*>(smem_words);
  __shared__ int32_t s_warp_kept[kMaxWarps];
  __shared__ int32_t s_drops[kSparseNumDropReasons];
  __shared__ int32_t s_contested;  // some bucket was hit twice

  const int64_t t = blockIdx.x;
  const int tid = threadIdx.x, nthreads = blockDim.x;
  long long* profile =
      a.profile != nullptr && tid == 0 ? a.profile + t * kGpuSparseGatherProfileSlots : nullptr;
  const long long clock0 = clock64();
  const long long wall0 = profile ? WallClock() : 0;
  const int topk = a.topk;

  // ---- 0. Row checks -------------------------------------------------------------------
  const int32_t s = a.token_to_seq[t];
  const int32_t bound = a.token_bound[t];
  const int32_t lo = a.indptr[t], hi = a.indptr[t + 1];
  int error = kSparseRowOk;
  if (lo < 0 || lo > hi || hi > a.packed_capacity) {
    error = kSparseRowBadSpan;
  } else if (s < -1 || s >= a.num_requests) {
    error = kSparseRowBadSeq;
  } else if (s >= 0 && bound < 0) {
    error = kSparseRowBadBound;
  } else if (s >= 0 && hi - lo < min(bound, topk)) {
    error = kSparseRowSpanTooSmall;
  }
  if (error != kSparseRowOk || s < 0) {  // uniform over the block
    WriteEmptyRow(a, t, error, lo, hi);
    return;
  }

  // The request's map (uniform).
  const int32_t* bt_row = nullptr;
  int32_t flat_lo = 0, flat_len = -1;  // flat_len -1: the request's range is malformed
  if (a.flat) {
    const int32_t flo = a.kv_indptr[s], fhi = a.kv_indptr[s + 1];
    if (flo >= 0 && flo <= fhi && fhi <= a.num_kv_indices) {
      flat_lo = flo;
      flat_len = fhi - flo;
    }
  } else {
    bt_row = a.block_table + static_cast<int64_t>(s) * a.max_blocks;
  }

  // ---- 1. The row into registers and shared memory; rules 1-2; map loads; clear the table
  int32_t* row = smem;
  int32_t* table = smem + a.row_words;
  const int table_size = 1 << a.table_bits;
  uint32_t* buckets = reinterpret_cast<uint32_t*>(table + table_size);
  const int ws = warpSize;
  const int lane = tid % ws, warp = tid / ws;
  const int first = warp * ws * kPer + lane;  // column of k = 0; column of k: first + k * ws
  const int32_t* src = a.topk_indices + t * topk;
  int32_t v[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int c = first + k * ws;
    v[k] = c < topk ? src[c] : -1;  // one coalesced load per warp and k, all in flight
  }
  {
    int4* table4 = reinterpret_cast<int4*>(table);
    for (int i = tid; i < table_size / 4; i += nthreads) table4[i] = make_int4(-1, -1, -1, -1);
  }
  {
    int4* buckets4 = reinterpret_cast<int4*>(buckets);
    for (int i = tid; i < a.bucket_words / 4; i += nthreads) buckets4[i] = make_int4(0, 0, 0, 0);
  }
  if (tid < kSparseNumDropReasons) s_drops[tid] = 0;
  if (tid == 0) s_contested = 0;
  uint32_t in_bound = 0;
  int n_invalid = 0, n_out = 0;
  int32_t slot[kPer];  // rule 4's lookups, issued now so they complete during the inserts
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int c = first + k * ws;
    slot[k] = -1;
    if (c >= topk) continue;
    row[c] = v[k];
    const int32_t pos = v[k];
    if (pos < 0) {
      ++n_invalid;
      continue;
    }
    if (pos >= bound) {
      ++n_out;
      continue;
    }
    in_bound |= 1u << k;
    if (a.flat) {
      if (pos < flat_len) slot[k] = a.kv_indices[flat_lo + pos];
    } else {
      const int32_t block = pos >> a.log2_page;
      if (block < a.max_blocks) {
        const int32_t entry = bt_row[block];
        if (entry >= 0) {
          const int64_t full =
              (static_cast<int64_t>(entry) << a.log2_page) | (pos & ((1 << a.log2_page) - 1));
          slot[k] = full > INT_MAX ? -1 : static_cast<int32_t>(full);
        }
      }
    }
  }
  __syncthreads();
  if (profile) profile[1] = clock64() - clock0;

    // ---- 2. Bucket filter: positions sharing a bucket with another column are "contested" ---
    // Two bits per bucket: seen, contested. A column that finds its bucket already seen marks
    // it contested; every column of a bucket that two or more columns hit (and only those) is
    // contested once the barrier has passed, whatever the order the atomics ran in.
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!((in_bound >> k) & 1u)) continue;
    const uint32_t b = HashOf(row[first + k * ws], a.bucket_bits);
    const uint32_t seen = 1u << (2 * (b & 15));
    if (atomicOr(&buckets[b >> 4], seen) & seen) {
      atomicOr(&buckets[b >> 4], seen << 1);
      s_contested = 1;
    }
  }
  __syncthreads();
  if (profile) profile[2] = clock64() - clock0;

  // ---- 3. Rule 3 (duplicates) among contested columns, rule 4 (unmapped) -----------------
  uint32_t dup = 0;
  if (s_contested) {  // uniform: read after the barrier
    // Contested columns go through the exact table: slot <- the smallest column holding the
    // position (open addressing, linear probing; atomicCAS claims an empty slot, atomicMin
    // lowers the column of a slot holding the same position).
    uint32_t contested = 0;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!((in_bound >> k) & 1u)) continue;
      const uint32_t b = HashOf(row[first + k * ws], a.bucket_bits);
      if ((buckets[b >> 4] >> (2 * (b & 15) + 1)) & 1u) contested |= 1u << k;
    }
    // Contested columns are few (duplicates plus ~6% false positives), so each thread walks
    // its own one at a time.
    const uint32_t mask = static_cast<uint32_t>(table_size - 1);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!((contested >> k) & 1u)) continue;
      const int c = first + k * ws;
      const int32_t pos = row[c];
      uint32_t h = HashOf(pos, a.table_bits);
      for (;;) {
        const int32_t prev = atomicCAS(&table[h], -1, c);
        if (prev == -1) break;  // claimed an empty slot
        if (prev >= 0 && prev < topk && row[prev] == pos) {
          atomicMin(&table[h], c);  // the position's slot: keep the first column
          break;
        }
        h = (h + 1) & mask;  // another position's slot: probe on
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      if (!((contested >> k) & 1u)) continue;
      const int c = first + k * ws;
      const int32_t pos = row[c];
      uint32_t h = HashOf(pos, a.table_bits);
      int32_t owner = table[h];
      // pos is in the table, and every slot from its hash to its own is claimed.
      while (owner >= 0 && owner < topk && row[owner] != pos) {
        h = (h + 1) & mask;
        owner = table[h];
      }
      if (owner != c) dup |= 1u << k;
    }
  }
  if (profile) profile[3] = clock64() - clock0;
  uint32_t keep = 0;
  int n_dup = 0, n_unmapped = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    if (!((in_bound >> k) & 1u)) continue;
    if ((dup >> k) & 1u) {
      ++n_dup;
    } else if (slot[k] < 0) {
      ++n_unmapped;
    } else {
      keep |= 1u << k;
    }
  }
  int warp_kept = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) warp_kept += Popc64(__ballot64((keep >> k) & 1u));
  n_invalid = WarpSum(n_invalid);
  n_out = WarpSum(n_out);
  n_dup = WarpSum(n_dup);
  n_unmapped = WarpSum(n_unmapped);
  if (lane == 0) {
    s_warp_kept[warp] = warp_kept;
    if (n_invalid) atomicAdd(&s_drops[kSparseDropInvalid], n_invalid);
    if (n_out) atomicAdd(&s_drops[kSparseDropOutOfBound], n_out);
    if (n_dup) atomicAdd(&s_drops[kSparseDropDuplicate], n_dup);
    if (n_unmapped) atomicAdd(&s_drops[kSparseDropUnmapped], n_unmapped);
  }
  __syncthreads();

  // ---- 4. Compaction into shared memory ---------------------------------------------------
  int base = 0, total = 0;
  for (int w = 0; w < nthreads / ws; ++w) {
    const int n = s_warp_kept[w];
    if (w < warp) base += n;
    total += n;
  }
  int32_t* out = row;
  const unsigned long long below = (1ull << lane) - 1;  // lanes before this one
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const unsigned long long b = __ballot64((keep >> k) & 1u);
    if ((keep >> k) & 1u) out[base + Popc64(b & below)] = slot[k];
    base += Popc64(b);
  }
  __syncthreads();
  if (profile) profile[4] = clock64() - clock0;

  // ---- 5. Dense row, span, count, status ------------------------------------------------
  int32_t* dense = a.dense + t * topk;
  if (a.vec_store) {
    int4* dense4 = reinterpret_cast<int4*>(dense);
    for (int i = tid; i < topk / 4; i += nthreads) {
      const int c = 4 * i;
      dense4[i] = make_int4(c < total ? out[c] : -1, c + 1 < total ? out[c + 1] : -1,
                            c + 2 < total ? out[c + 2] : -1, c + 3 < total ? out[c + 3] : -1);
    }
  } else {
    for (int i = tid; i < topk; i += nthreads) dense[i] = i < total ? out[i] : -1;
  }
  int32_t* span = a.packed + lo;
  const int width = hi - lo;
  for (int i = tid; i < width; i += nthreads) span[i] = i < total ? out[i] : -1;
  if (tid == 0) {
    a.counts[t] = total;
    int32_t* status = a.status + t * kSparseGatherStatusWords;
    for (int k = 0; k < kSparseNumDropReasons; ++k) status[k] = s_drops[k];
    status[kSparseStatusRowError] = kSparseRowOk;
  }
  if (profile) {
    profile[5] = clock64() - clock0;
    profile[6] = WallClock();
    profile[0] = wall0;
    profile[7] = 0;
  }
}

int TableBits(int64_t topk) {
  int bits = 6;  // at least 64 slots
  while ((int64_t{1} << bits) < 2 * topk) ++bits;
  return bits;
}

int64_t RowWords(int64_t topk) { return (topk + 3) / 4 * 4; }

// Words of the bucket filter: 16 buckets per word, 16 buckets per column up to topk 2048 (so
// about 6% of distinct positions share a bucket and take the table path), 8 above (the
// shared memory of topk 4096 then stays under 64 KiB).
int64_t BucketWords(int64_t topk) {
  int64_t words = 16;
  while (words < topk) words *= 2;
  return topk > 2048 ? words / 2 : words;
}

int Log2(int64_t pow2) {
  int bits = 0;
  while ((int64_t{1} << bits) < pow2) ++bits;
  return bits;
}

bool Aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

absl::Status CheckPointer(const void* p, int64_t entries, const char* name) {
  if (entries > 0 && p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse gather: ", name, " is null but holds ", entries, " entries"));
  }
  if (p != nullptr && !Aligned(p, 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse gather: ", name, " is not 4-byte aligned"));
  }
  return absl::OkStatus();
}

template <int kPer>
hipError_t Launch(const Args& args, int64_t blocks, int64_t bytes, hipStream_t stream) {
  // Above the default 48 KiB the kernel must opt in, once per device.
  constexpr int kMaxDevices = 64;
  static std::atomic<int64_t> opted_in[kMaxDevices];
  if (bytes > 48 * 1024 - 1024) {
    int device = 0;
    if (hipError_t e = hipGetDevice(&device); e != hipSuccess) return e;
    if (device >= 0 && device < kMaxDevices &&
        opted_in[device].load(std::memory_order_relaxed) < bytes) {
      hipError_t e =
          hipFuncSetAttribute(reinterpret_cast<const void*>(&SparseGatherKernel<kPer>),
                              hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
      if (e != hipSuccess) return e;
      opted_in[device].store(bytes, std::memory_order_relaxed);
    }
  }
  hipLaunchKernelGGL(SparseGatherKernel<kPer>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                     static_cast<size_t>(bytes), stream, args);
  return hipGetLastError();
}

}  // namespace

int64_t GpuSparseGatherSharedBytes(int64_t topk) {
  return 4 * (RowWords(topk) + (int64_t{1} << TableBits(topk)) + BucketWords(topk));
}

absl::Status ValidateGpuSparseGatherParams(const GpuSparseGatherParams& p) {
  const SparseGatherDims& d = p.dims;
  if (absl::Status s = ValidateSparseGatherDims(d); !s.ok()) return s;
  if (d.topk > kGpuSparseGatherMaxTopk) {
    return absl::InvalidArgumentError(absl::StrCat("sparse gather: topk = ", d.topk,
                                                   " exceeds the GPU kernel's limit ",
                                                   kGpuSparseGatherMaxTopk));
  }
  const int64_t t = d.num_tokens;
  const struct {
    const void* p;
    int64_t entries;
    const char* name;
  } buffers[] = {
      {p.topk_indices, SparseTopkEntries(d), "topk_indices"},
      {p.token_to_seq, t, "token_to_seq"},
      {p.token_bound, t, "token_bound"},
      {p.sparse_kv_indptr, t + 1, "sparse_kv_indptr"},
      {p.block_table, SparseBlockTableEntries(d), "block_table"},
      {p.kv_indptr, d.map_form == SparseMapForm::kFlat ? d.num_requests + 1 : 0, "kv_indptr"},
      {p.kv_indices, d.map_form == SparseMapForm::kFlat ? d.num_kv_indices : 0, "kv_indices"},
      {p.packed, d.packed_capacity, "packed"},
      {p.counts, t, "counts"},
      {p.dense, SparseTopkEntries(d), "dense"},
      {p.status, SparseStatusEntries(d), "status"},
  };
  for (const auto& b : buffers) {
    if (absl::Status s = CheckPointer(b.p, b.entries, b.name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LaunchGpuSparseGather(const GpuSparseGatherParams& p, void* stream) {
  if (absl::Status s = ValidateGpuSparseGatherParams(p); !s.ok()) return s;
  const SparseGatherDims& d = p.dims;
  if (d.num_tokens == 0) return absl::OkStatus();
  Args a;
  a.topk_indices = p.topk_indices;
  a.token_to_seq = p.token_to_seq;
  a.token_bound = p.token_bound;
  a.indptr = p.sparse_kv_indptr;
  a.block_table = p.block_table;
  a.kv_indptr = p.kv_indptr;
  a.kv_indices = p.kv_indices;
  a.packed = p.packed;
  a.counts = p.counts;
  a.dense = p.dense;
  a.status = p.status;
  a.profile = p.profile;
  a.topk = static_cast<int>(d.topk);
  a.num_requests = static_cast<int>(d.num_requests);
  a.flat = d.map_form == SparseMapForm::kFlat ? 1 : 0;
  a.log2_page = 0;
  while ((int64_t{1} << a.log2_page) < d.page_size) ++a.log2_page;
  a.max_blocks = a.flat ? 0 : static_cast<int>(d.max_blocks);
  a.num_kv_indices = a.flat ? static_cast<int>(d.num_kv_indices) : 0;
  a.packed_capacity = static_cast<int>(d.packed_capacity);
  a.row_words = static_cast<int>(RowWords(d.topk));
  a.table_bits = TableBits(d.topk);
  a.bucket_words = static_cast<int>(BucketWords(d.topk));
  a.bucket_bits = Log2(16 * BucketWords(d.topk));
  a.vec_store = d.topk % 4 == 0 && Aligned(p.dense, 16);
  const int64_t bytes = GpuSparseGatherSharedBytes(d.topk);
  const hipStream_t s = static_cast<hipStream_t>(stream);
  const int64_t per = (d.topk + kThreads - 1) / kThreads;
  hipError_t e;
  if (per <= 1) {
    e = Launch<1>(a, d.num_tokens, bytes, s);
  } else if (per <= 2) {
    e = Launch<2>(a, d.num_tokens, bytes, s);
  } else if (per <= 4) {
    e = Launch<4>(a, d.num_tokens, bytes, s);
  } else if (per <= 8) {
    e = Launch<8>(a, d.num_tokens, bytes, s);
  } else {
    e = Launch<16>(a, d.num_tokens, bytes, s);
  }
  if (e != hipSuccess) {
    return absl::InternalError(
        absl::StrCat("sparse gather: launch failed: ", hipGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace mlaps
