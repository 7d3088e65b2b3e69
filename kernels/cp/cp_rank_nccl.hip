#include <string>

#include "kernels/cp/cp_rank_nccl.h"
#include "kernels/platform/hip_runtime.h"
#include "metadata/types.h"

namespace mlaps::cp {

std::string EnqueueNcclExchange(const CpRankSetup& s, const CpRankBuffers& b, ncclComm_t comm,
                                void* stream) {
  hipStream_t st = static_cast<hipStream_t>(stream);
  if (ncclGroupStart() != ncclSuccess) return "ncclGroupStart";
  ncclResult_t r1 = ncclAllGather(b.o, b.gather_o, s.rows * kHeadDimV, ncclFloat, comm, st);
  ncclResult_t r2 = ncclAllGather(b.lse, b.gather_lse, s.rows, ncclFloat, comm, st);
  ncclResult_t r3 = ncclGroupEnd();
  if (r1 != ncclSuccess) return std::string("ncclAllGather O: ") + ncclGetErrorString(r1);
  if (r2 != ncclSuccess) return std::string("ncclAllGather LSE: ") + ncclGetErrorString(r2);
  if (r3 != ncclSuccess) return std::string("ncclGroupEnd: ") + ncclGetErrorString(r3);
  return "";
}

std::string EnqueueCpRankStepNccl(const CpRankSetup& s, const CpRankBuffers& b, ncclComm_t comm,
                                  void* stream) {
  std::string err = EnqueueCpRankAttention(s, b, stream);
  if (err.empty()) err = EnqueueNcclExchange(s, b, comm, stream);
  if (err.empty()) err = EnqueueCpRankMerge(s, b, stream);
  return err;
}

}  // namespace mlaps::cp
