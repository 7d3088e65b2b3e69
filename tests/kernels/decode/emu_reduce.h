// The end of an emulated decode run, shared by both CPU emulation tests of the decode
// kernels: the reduce kernel in the emulation when the plan has split tiles, then the run's
// outputs (O, LSE, status word, executed trace).
//
// A textual header: include it after tests/kernels/emu/hip_host_emulation.h and
// kernels/decode/mla_reduce_device.h (it launches mla::MlaReduceKernel through
// mlaps_emu::Launch).
#ifndef MLAPS_TESTS_KERNELS_DECODE_EMU_REDUCE_H_
#define MLAPS_TESTS_KERNELS_DECODE_EMU_REDUCE_H_

#include <string>
#include <utility>

#include "tests/kernels/decode/decode_checks.h"
#include "tests/kernels/decode/mla_decode_testing.h"

namespace mlaps::testing {

// `decode_error`: what the decode launch reported ("" when it ran); the reduce runs only
// after a clean decode, and not when the decode merged the split tiles itself.
inline DecodeRunResult ReduceAndCollect(const HostDecodeRun& run, std::string decode_error) {
  DecodeRunResult r;
  r.error = std::move(decode_error);
  const MlaReduceParams& rp = run.reduce;
  if (r.error.empty() && rp.reduce_tiles_capacity > 0 && run.decode.merge.counters == nullptr) {
    r.error = mlaps_emu::Launch(dim3(rp.reduce_tiles_capacity, mla::kReduceRowSplit),
                                dim3(mla::kReduceThreads), 0, [&] { mla::MlaReduceKernel(rp); });
  }
  r.o = run.O();
  r.lse = run.Lse();
  r.status = run.Status();
  r.trace = run.Trace();
  r.merge_counters = run.MergeCounters();
  return r;
}

}  // namespace mlaps::testing

#endif  // MLAPS_TESTS_KERNELS_DECODE_EMU_REDUCE_H_
