"""Time per get_mla_metadata_v1 call from Python (numpy buffers), on the C++ planner bench's
batches (metadata/planner_bench.cc: sm90, bf16, page 64, the same varlen kv 1k..16k lengths,
default options), wall and CPU time, next to the bare C ABI call on the same buffers.
    python3 python/bench_planner.py [batch ...]"""
import sys
import time

import ctypes

import numpy as np

import mlaps
from mlaps import _native, planner


def std_uniform_int(seed, lo, hi, n):
    """std::uniform_int_distribution<int>(lo, hi) over std::mt19937(seed), as libstdc++ draws
    it (numpy's RandomState seeds MT19937 like std::mt19937 for an int seed): the C++ bench's
    exact kv lengths."""
    rs = np.random.RandomState(seed)
    urange = hi - lo + 1  # libstdc++ (GCC >= 11): Lemire's nearly divisionless method
    out = []
    while len(out) < n:
        product = int(rs.randint(0, 2**32, dtype=np.uint64)) * urange
        if (product & 0xFFFFFFFF) < urange:
            threshold = (2**32 - urange) % urange
            while (product & 0xFFFFFFFF) < threshold:
                product = int(rs.randint(0, 2**32, dtype=np.uint64)) * urange
        out.append(lo + (product >> 32))
    return np.array(out, np.int64)


def bench(batch, qlen, heads, reps=2000):
    lens = std_uniform_int(batch * 31 + qlen, 1024, 16384, batch)
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
    best = cpu = float("inf")
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(reps // 5):
            mlaps.get_mla_metadata_v1(*args, **kw)
        best = min(best, (time.perf_counter() - t) / (reps // 5))
        cpu = min(cpu, (time.process_time() - c) / (reps // 5))
    m = mlaps.read_metadata(b[0])
    # The same plan through the bare C ABI call (what the Python layer adds is the difference).
    lib = _native.cpu()
    words = b[0].view(np.int32)
    batch_s = planner._batch_struct(2, 0, 0, heads, 64, True, False, -1, qo, kv, last)
    opts = _native.PlanOptions(b[1].size - 1, 0, -1, 0, 0, 0, 0, 0)
    bufs = _native.PlanBuffers(words.ctypes.data + 128, words.size - 32, b[1].ctypes.data,
                               b[1].size, b[2].ctypes.data, b[2].shape[0], b[3].ctypes.data,
                               b[3].size, b[4].ctypes.data, b[4].size, b[5].ctypes.data,
                               b[5].size)
    sizes, err = _native.PlanSizes(), _native.Error()
    raw = raw_cpu = float("inf")
    for _ in range(5):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(reps // 5):
            lib.mlaps_plan(ctypes.byref(batch_s), ctypes.byref(opts), ctypes.byref(bufs),
                           ctypes.byref(sizes), err.buf, err.size)
        raw = min(raw, (time.perf_counter() - t) / (reps // 5))
        raw_cpu = min(raw_cpu, (time.process_time() - c) / (reps // 5))
    print("get_mla_metadata_v1 batch %d qlen %d H %d: %.1f us/call wall, %.1f us CPU (bare C "
          "ABI call %.1f us wall, %.1f us CPU; works=%d)"
          % (batch, qlen, heads, best * 1e6, cpu * 1e6, raw * 1e6, raw_cpu * 1e6,
             m["num_works"]))


if __name__ == "__main__":
    for bsz in [int(x) for x in sys.argv[1:]] or [128]:
        for q, h in ((1, 16), (4, 16), (1, 128), (4, 128)):
            bench(bsz, q, h)
