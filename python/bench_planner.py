"""Time per get_mla_metadata_v1 call from Python (numpy buffers), on the C++ planner bench's
shapes (metadata/planner_bench.cc: sm90, bf16, page 64, varlen kv 1k..16k).
    python3 python/bench_planner.py [batch ...]"""
import sys
import time

import numpy as np

import mlaps


def bench(batch, qlen, heads, reps=2000):
    rng = np.random.default_rng(batch * 31 + qlen)
    lens = rng.integers(1024, 16385, batch)
    pages = (lens + 63) // 64
    kv = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    last = (lens - (pages - 1) * 64).astype(np.int32)
    qo = (np.arange(batch + 1) * qlen).astype(np.int32)
    info = mlaps.get_mla_metadata_info_v1(batch, qlen, heads, "bf16", "bf16", False, arch="sm90")
    b = [np.zeros(s, d) for s, d in info]
    args = (qo, kv, last, heads, 1, True, b[0], b[2], b[1], b[3], b[4], b[5])
    kw = dict(page_size=64, kv_granularity=0, max_seqlen_qo=qlen, dtype_q="bf16",
              dtype_kv="bf16", arch="sm90")
    for _ in range(50):
        mlaps.get_mla_metadata_v1(*args, **kw)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps // 5):
            mlaps.get_mla_metadata_v1(*args, **kw)
        best = min(best, (time.perf_counter() - t) / (reps // 5))
    m = mlaps.read_metadata(b[0])
    print("get_mla_metadata_v1 batch %d qlen %d H %d: %.1f us/call (works=%d)"
          % (batch, qlen, heads, best * 1e6, m["num_works"]))


if __name__ == "__main__":
    for bsz in [int(x) for x in sys.argv[1:]] or [128]:
        for q, h in ((1, 16), (4, 16), (1, 128), (4, 128)):
            bench(bsz, q, h)
