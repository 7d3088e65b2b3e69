// The NCCL exchange of a CP rank's step (cp_rank_runner.h): one rank per GPU, the ranks'
// fp32 (O, LSE) all-gathered into every rank's gather buffers. NVIDIA only (NCCL); run with
// NCCL_NVLS_ENABLE=0 on shared machines (kernels/platform/collectives.h).
#ifndef MLAPS_KERNELS_CP_CP_RANK_NCCL_H_
#define MLAPS_KERNELS_CP_CP_RANK_NCCL_H_

#include <string>

#include "kernels/cp/cp_rank_runner.h"
#include "kernels/platform/collectives.h"

namespace mlaps::cp {

// Enqueues the all-gather of b.o / b.lse into b.gather_o / b.gather_lse on `stream`
// (one NCCL group). "" or what failed.
std::string EnqueueNcclExchange(const CpRankSetup& setup, const CpRankBuffers& b, ncclComm_t comm,
                                void* stream);

// The whole step of this rank on the current device: attention, the NCCL exchange, the
// merge (enqueued; DownloadCpRank waits).
std::string EnqueueCpRankStepNccl(const CpRankSetup& setup, const CpRankBuffers& b, ncclComm_t comm,
                                  void* stream);

}  // namespace mlaps::cp

#endif  // MLAPS_KERNELS_CP_CP_RANK_NCCL_H_
