"""Shared test helpers: building batches the way metadata/batch.h's helpers do, planning into
buffers sized by the info call, and locating the repo's goldens."""
import os

import numpy as np

import mlaps

PLAN_ARGS = ("work_meta", "work_info", "work_indptr", "reduce_indptr", "reduce_final_map",
             "reduce_partial_map")


def repo_root():
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        return os.path.join(srcdir, os.environ.get("TEST_WORKSPACE", "mlaps"))
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def varlen_batch(kv_lens, qlen, page_size):
    """MakeVarlenBatch: request b has kv_lens[b] tokens, qlen q tokens, contiguous pages."""
    kv_lens = np.asarray(kv_lens, np.int64)
    pages = (kv_lens + page_size - 1) // page_size
    kv = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    last = np.where(pages > 0, kv_lens - (pages - 1) * page_size, 0).astype(np.int32)
    qo = (np.arange(len(kv_lens) + 1) * qlen).astype(np.int32)
    return qo, kv, last


def uniform_batch(batch, qlen, kv_len, page_size):
    return varlen_batch([kv_len] * batch, qlen, page_size)


def alloc(info):
    return [np.zeros(shape, dtype) for shape, dtype in info]


def plan(qo, kv, last, heads, dtype, page_size, arch="sm90", causal=True, num_cu=None,
         kv_granularity=0, **kw):
    """Plans with buffers from the info call (work_indptr resized to num_cu + 1 when given);
    returns the six buffers in AITER's info order."""
    qlens = np.diff(qo)
    info = mlaps.get_mla_metadata_info_v1(len(qo) - 1, int(qlens.max()), heads, dtype, dtype,
                                          False, arch=arch)
    bufs = alloc(info)
    if num_cu is not None:
        bufs[1] = np.zeros(num_cu + 1, np.int32)
    mlaps.get_mla_metadata_v1(qo, kv, last, heads, 1, causal, bufs[0], bufs[2], bufs[1],
                              bufs[3], bufs[4], bufs[5], page_size=page_size,
                              kv_granularity=kv_granularity, dtype_q=dtype, dtype_kv=dtype,
                              arch=arch, **kw)
    return bufs


def batch_args(qo, kv, last, heads, bufs, causal=True):
    """The positional arguments of get_mla_metadata_v1 / check_plan / simulate."""
    return (qo, kv, last, heads, 1, causal, bufs[0], bufs[2], bufs[1], bufs[3], bufs[4],
            bufs[5])


def used_plan(bufs):
    """The used prefixes of a plan (from its mlaps header), as the C++ WorkPlan holds them."""
    m = mlaps.read_metadata(bufs[0])
    cu = m["num_cu"]
    tiles = m["num_reduce_tiles"]
    return {
        "qo_indptr": np.array(m["qo_indptr"]),
        "work_indptr": bufs[1][:cu + 1],
        "work_info": bufs[2][:m["num_works"]],
        "reduce_indptr": bufs[3][:tiles + 1],
        "reduce_final_map": bufs[4][:tiles].ravel(),
        "reduce_partial_map": bufs[5][:m["num_reduce_pieces"]],
        "meta": m,
    }


def fnv_digest(p):
    """golden_cases.cc's PlanDigest: FNV-1a 64 over the plan's int32 arrays' bytes."""
    h = 14695981039346656037
    data = np.concatenate([p["qo_indptr"].astype("<i4"), p["work_indptr"].astype("<i4"),
                           p["work_info"].astype("<i4").ravel(), p["reduce_indptr"].astype("<i4"),
                           p["reduce_final_map"].astype("<i4"),
                           p["reduce_partial_map"].astype("<i4")]).tobytes()
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h
