// The peer's decode timings (FlashMLA, measured by its own benchmark script into a JSON
// file) for mla_decode_bench, so that the benchmark prints speed ratios to the peer measured
// in the same device call (these machines differ by up to ~8% between calls).
//
// The file is the `flashmla.json` written by the peer's run_peers.sh: an object with arrays
// "dense" and "sparse" of rows {kind, b, ctx, h_q, s_q, [topk], median_us, [eager_meta_us],
// ...}: median_us is the splitkv + combine graph, eager_meta_us the scheduling-metadata kernel
// (get_mla_metadata_kernel) timed apart.
#ifndef MLAPS_KERNELS_DECODE_PEER_TIMINGS_H_
#define MLAPS_KERNELS_DECODE_PEER_TIMINGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mlaps::bench {

struct PeerTiming {
  std::string kind;  // e.g. "dense_bf16", "sparse_fp8_v32"
  bool sparse = false;
  int batch = 0, ctx = 0, heads = 0, qlen = 0, topk = 0;  // topk 0 for dense rows
  double median_us = 0;
  double meta_us = -1;  // eager_meta_us; -1 when the row has none
};

// Every row of the "dense" and "sparse" arrays. InvalidArgument when the text is not JSON,
// an array is not one, or a row lacks a field (named in the message).
absl::StatusOr<std::vector<PeerTiming>> ParsePeerTimings(const std::string& json);

// The row for a shape (sparse rows match on batch, heads, qlen and topk: the peer's cache
// length differs from the benchmark's), or nullptr.
const PeerTiming* FindPeerTiming(const std::vector<PeerTiming>& rows, bool sparse, int batch,
                                 int ctx, int heads, int qlen, int topk);

}  // namespace mlaps::bench

#endif  // MLAPS_KERNELS_DECODE_PEER_TIMINGS_H_
