// One context-parallel rank's GPU step (issue 17): its round-robin KV shard in its own device
// memory -> the GPU planner (kernels/planner/planner_kernel.h) plans the shard -> the
// persistent decode kernel + reduce (kernels/decode/mla_decode.h, kMlaMaskCpRoundRobin, fp32
// final O) -> the ranks exchange (O, LSE) into every rank's gather buffers (rank-major, the
// layout ncclAllGather leaves) -> the GPU merge (kernels/cp/lse_merge.h) -> bf16 O + LSE.
//
// The same code runs the ranks two ways: one device per rank with NCCL doing the exchange
// (cp_rank_nccl.h), or every rank on one device with a stream each, the exchange then being
// device-to-device copies of the peers' (O, LSE) (RunCpRanksOnOneDevice), so the path is
// tested where only one GPU is lent. Nothing synchronizes the host except Download and
// RunCpRanksOnOneDevice's end. Plain C++ (no GPU headers): streams are hipStream_t as void*.
#ifndef MLAPS_KERNELS_CP_CP_RANK_RUNNER_H_
#define MLAPS_KERNELS_CP_CP_RANK_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cp/cp_rank_setup.h"
#include "kernels/decode/mla_decode.h"
#include "kernels/planner/planner_kernel.h"

namespace mlaps::cp {

// What a rank uploads: Q [total_q, H, 576] and its shard cache (GatherShardCache), both in the
// kernel's element bytes (bf16 bits or e4m3fn codes), and the per-tensor descales. A null
// q or kv allocates without uploading (the caller fills the device buffer, e.g. benchmarks).
struct CpRankInputs {
  const void* q = nullptr;
  int64_t q_bytes = 0;
  const void* kv = nullptr;  // [num_pages][I][576]
  int64_t kv_bytes = 0;
  int64_t num_pages = 0;  // sub-pages of I tokens in `kv`
  float q_scale = 1.0f, kv_scale = 1.0f;
};

// One rank's device memory, on the device current at Allocate.
struct CpRankBuffers {
  void* q = nullptr;
  void* kv = nullptr;
  int64_t num_pages = 0;
  float q_scale = 1.0f, kv_scale = 1.0f;
  int32_t* batch = nullptr;  // qo_indptr | kv_indptr | last_page_lens | kv_indices | global L
  int64_t qo_indptr = 0, kv_indptr = 0, last_page_lens = 0, kv_indices = 0, global_kv_len = 0;
  int32_t* plan = nullptr;  // the planner's six outputs at these offsets (capacity-sized)
  int64_t plan_words = 0;
  int64_t plan_off[6] = {};  // GpuPlanBuffer order
  GpuPlanStatus* plan_status = nullptr;
  MlaStatus* decode_status = nullptr;
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
  int64_t partial_o_floats = 0, partial_lse_floats = 0;
  float* o = nullptr;           // this rank's fp32 final O [rows][512]: what it sends
  float* lse = nullptr;         // [rows]
  float* gather_o = nullptr;    // [W][rows][512]: every rank's O, rank-major
  float* gather_lse = nullptr;  // [W][rows]
  uint16_t* out_o = nullptr;    // merged O, bf16 bits [rows][512]
  float* out_lse = nullptr;     // merged LSE [rows]
};

// Allocates and uploads (synchronously) on the current device. "" or what failed.
std::string AllocateCpRank(const CpRankSetup& setup, const CpRankInputs& in, CpRankBuffers* b);
void FreeCpRank(CpRankBuffers* b);

// Enqueues on `stream`: poison of every output (NaN / 0xff) and both status words, the GPU
// planner, decode (CP mask, fp32 O into b.o / b.lse) and the reduce (its tile count read from
// the planner's status word on the device). "" or what was refused.
std::string EnqueueCpRankAttention(const CpRankSetup& setup, const CpRankBuffers& b, void* stream);

// Enqueues the merge of b.gather_o / b.gather_lse (all W ranks present) into b.out_o / out_lse.
std::string EnqueueCpRankMerge(const CpRankSetup& setup, const CpRankBuffers& b, void* stream);

// The all-gather on one device: for every rank r, on streams[r], after every rank's
// attention (events), copies each rank's (o, lse) into r's gather slots. `ranks` and
// `streams` are indexed by rank.
std::string EnqueueOneDeviceExchange(const std::vector<const CpRankSetup*>& setups,
                                     const std::vector<CpRankBuffers*>& ranks,
                                     const std::vector<void*>& streams);

// Every rank of `setups` (all ranks of one sharding, rank r at index r) on the current device,
// one stream each: attention for all, the copy exchange, the merges; waits for all of them.
std::string RunCpRanksOnOneDevice(const std::vector<const CpRankSetup*>& setups,
                                  const std::vector<CpRankBuffers*>& ranks,
                                  const std::vector<void*>& streams);

// What a rank's step left (after its stream is drained): both status words, the merged
// output, and the plan the GPU planner wrote (for comparison with the host planner).
struct CpRankResult {
  GpuPlanStatus plan_status{};
  MlaStatus decode_status{};
  std::vector<uint16_t> o;               // merged, bf16 bits [rows][512]
  std::vector<float> lse;                // merged [rows]
  std::vector<int32_t> plan_buffers[6];  // the used prefix of each (GpuPlanBuffer order)
};
std::string DownloadCpRank(const CpRankSetup& setup, const CpRankBuffers& b, void* stream,
                           CpRankResult* out);

}  // namespace mlaps::cp

#endif  // MLAPS_KERNELS_CP_CP_RANK_RUNNER_H_
