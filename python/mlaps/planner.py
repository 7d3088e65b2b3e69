"""AITER-shaped planner API: get_mla_metadata_info_v1 and get_mla_metadata_v1.

Same argument names, order and defaults as aiter.get_mla_metadata_info_v1 /
aiter.get_mla_metadata_v1, so a call site switches by changing the import; mlaps-only options
(arch, num_cu, policy, lse) are keyword arguments after AITER's.

Differences a caller should know (each one fails loudly rather than planning wrong):
  * dtype_q / dtype_kv are required (AITER planned bf16 when they were left out).
  * work_meta_data is mlaps' plan header, not AITER's two pointers: its shape comes from the
    info call. It holds the plan's status and sizes (the GPU planner's GpuPlanStatus layout,
    kernels/planner/planner_kernel.h), the variant (head_fold, tiles, grid) and the folded
    qo_indptr, so that mla_decode_fwd, check_plan and a graph replay need no host round trip.
  * num_cu (the persistent grid) is work_indptr.shape[0] - 1, as AITER's cu_num + 1.
  * fast_mode only: the buffers from the info call fit every plan of batches within the
    maxima (mlaps' capacity bounds); fast_mode=False gives the same plan.
  * topk > 0 plans a sparse per-token batch in mlaps' layout (metadata/sparse_layout.h): one
    q token per row of seqlens_qo_indptr, page_size 1, kv already trimmed to topk.
"""

import ctypes

import numpy as np

from . import _native
from . import _util

# work_meta_data layout (int32 words of the uint64 array).
META_HEADER_U64 = 16          # 128 bytes: status (48) + header
META_STATUS_WORDS = 12        # GpuPlanStatus: code, index, value(2), capacity(2), nvr, works,
                              # reduce tiles, pieces, partial rows, scan iterations
META_MAGIC = 0x50414C4D       # 'MLAP'
META_VERSION = 1
META_QO_INDPTR_WORD = 32      # folded qo_indptr starts here (int32 words)
# kv_lanes (word 28): the plan's KvLanes; 0 in headers written before it was recorded.
_H = {  # header word -> name (words 12 .. 31)
    "magic": 12, "version": 13, "num_cu": 14, "head_fold": 15, "tokens_per_tile": 16,
    "rows_per_tile": 17, "num_heads": 18, "arch": 19, "q_dtype": 20, "kv_dtype": 21,
    "max_qlen": 22, "page_size": 23, "flags": 24, "sparse_topk": 25, "kv_granularity": 26,
    "lse": 27, "kv_lanes": 28,
}
_META_DTYPES = (np.uint64, np.int64)  # AITER's uint64; int64 where uint64 support is thin
_STATUS = {"code": 0, "index": 1, "num_virtual_requests": 6, "num_works": 7,
           "num_reduce_tiles": 8, "num_reduce_pieces": 9, "num_partial_rows": 10}


def _capacity(arch, q_dtype, kv_dtype, num_heads, max_batch, max_qlen, num_cu, cp, lse):
    lib = _native.cpu()
    q = _native.CapacityQuery(arch, q_dtype, kv_dtype, num_heads, max_batch, max_qlen, num_cu,
                              int(bool(cp)), int(bool(lse)))
    c = _native.Capacity()
    err = _native.Error()
    _native.raise_for(lib.mlaps_capacity_of(ctypes.byref(q), ctypes.byref(c), err.buf, err.size),
                      err, "get_mla_metadata_info_v1")
    return c


def _variant_query(num_heads, qlen, q_dtype, kv_dtype, arch, cp_round_robin, lse):
    return _native.VariantQuery(_util.arch_code(arch), _util.dtype_code("q_dtype", q_dtype),
                                _util.dtype_code("kv_dtype", kv_dtype),
                                _util.int_arg("num_heads", num_heads),
                                _util.int_arg("qlen", qlen), int(bool(cp_round_robin)),
                                int(bool(lse)))


def resolve_variant(num_heads, qlen, q_dtype, kv_dtype, arch=None, cp_round_robin=False,
                    lse=False):
    """The kernel variant mlaps plans a (H, qlen) shape with: a dict of name, rows_per_tile,
    head_fold, heads_per_group, tokens_per_tile, blocks_per_cu, default_num_cu,
    default_kv_lanes. Unsupported shapes raise ValueError listing the nearest supported ones."""
    lib = _native.cpu()
    q = _variant_query(num_heads, qlen, q_dtype, kv_dtype, arch, cp_round_robin, lse)
    v = _native.Variant()
    err = _native.Error()
    _native.raise_for(lib.mlaps_resolve_variant(ctypes.byref(q), ctypes.byref(v), err.buf,
                                                err.size), err, "resolve_variant")
    out = {f: getattr(v, f) for f, _ in _native.Variant._fields_}
    out["name"] = v.name.decode()
    return out


def _variant_int32(fn, what, query, *ints):
    """One int32 out of a C ABI call f(query, ints..., out, err, err_len)."""
    out = _native._i32()
    err = _native.Error()
    _native.raise_for(getattr(_native.cpu(), fn)(ctypes.byref(query), *ints, ctypes.byref(out),
                                                 err.buf, err.size), err, what)
    return out.value


def default_fixed_overhead(num_heads, qlen, q_dtype, kv_dtype, page_size, kv_granularity=0,
                           num_cu=0, arch=None, cp_round_robin=False, lse=False):
    """The batch-independent blocks a work item is charged: the variant's calibrated cost of
    an item in cost blocks where its registry row has costs (sm90), else AITER's max(1,
    ceil(16 / page_size)). kv_granularity 0: max(16, page_size); num_cu 0: the default grid.
    Host plans with fixed_overhead -1 start from it and may take a larger charge for their
    batch (BatchFixedOverhead in metadata/planner.h); the GPU planner plans with this one."""
    return _variant_int32("mlaps_default_fixed_overhead", "default_fixed_overhead",
                          _variant_query(num_heads, qlen, q_dtype, kv_dtype, arch,
                                         cp_round_robin, lse),
                          _util.int_arg("page_size", page_size, 1),
                          _util.int_arg("kv_granularity", kv_granularity, 0),
                          _util.int_arg("num_cu", num_cu, 0))


def kv_lanes(num_heads, qlen, q_dtype, kv_dtype, num_cu, max_lanes=0, arch=None,
             cp_round_robin=False, lse=False):
    """The kv lanes of a plan whose requests all have qlen q tokens on num_cu blocks (at most
    max_lanes; 0: the arch's default): the plan's own (read_metadata's "kv_lanes") for such a
    batch. mla_decode_fwd passes it to the kernel, which then runs a request's lanes on
    neighbouring blocks; any value computes the same output (placement only)."""
    return _variant_int32("mlaps_kv_lanes", "kv_lanes",
                          _variant_query(num_heads, qlen, q_dtype, kv_dtype, arch,
                                         cp_round_robin, lse),
                          _util.int_arg("num_cu", num_cu, 1),
                          _util.int_arg("max_lanes", max_lanes, 0))


def get_mla_metadata_info_v1(batch_size, max_seqlen_qo, num_head_qo, q_dtype, kv_dtype,
                             is_sparse, fast_mode=True, num_kv_splits=32,
                             intra_batch_mode=False, max_split_per_batch=-1, *, arch=None,
                             num_cu=None, is_cp_round_robin=False, lse=False):
    """Shapes and dtypes of the six plan buffers for every batch within the maxima:
    ((shape, dtype) for work_meta_data, work_indptr, work_info_set, reduce_indptr,
    reduce_final_map, reduce_partial_map). dtypes are torch dtypes when q_dtype is one (the
    package never imports torch), numpy dtypes otherwise. Allocate once (e.g. for CUDA graph
    capture); every get_mla_metadata_v1 call within the maxima fits.

    mlaps sizes from its capacity bounds (metadata/capacity.h: works <= tiles + num_cu, split
    tiles <= num_cu, pieces <= 2 num_cu), not tiles x splits, so reduce_partial_map stays
    small at any batch. Unsupported (H, qlen) shapes raise ValueError here, before anything
    is allocated. num_kv_splits is accepted for AITER's signature and unused."""
    batch_size = _util.int_arg("batch_size", batch_size, 1)
    max_seqlen_qo = _util.int_arg("max_seqlen_qo", max_seqlen_qo, 1)
    num_head_qo = _util.int_arg("num_head_qo", num_head_qo, 1)
    qd = _util.dtype_code("q_dtype", q_dtype)
    kd = _util.dtype_code("kv_dtype", kv_dtype)
    if intra_batch_mode:
        raise ValueError("intra_batch_mode=True: not supported by mlaps")
    _util.int_arg("max_split_per_batch", max_split_per_batch, -1)
    ncu = 0 if num_cu is None else _util.int_arg("num_cu", num_cu, 1)
    if is_sparse:
        max_batch, max_qlen = batch_size * max_seqlen_qo, 1
    else:
        max_batch, max_qlen = batch_size, max_seqlen_qo
    c = _capacity(_util.arch_code(arch), qd, kd, num_head_qo, max_batch, max_qlen, ncu,
                  is_cp_round_robin, lse)
    # The grid (num_cu = work_indptr entries - 1, which get_mla_metadata_v1 and mla_decode_fwd
    # both use): the planner's default for the variant at max_seqlen_qo, i.e. the arch's CUs x
    # the blocks a CU runs for those tiles. (The capacity is the largest over qlen <= max; a
    # batch of shorter requests is then planned on this grid too.)
    work_indptr = int(c.work_indptr)
    if ncu == 0:
        v = resolve_variant(num_head_qo, max_qlen, q_dtype, kv_dtype, arch=arch,
                            cp_round_robin=is_cp_round_robin, lse=lse)
        work_indptr = min(work_indptr, v["default_num_cu"] + 1)
    torch = _util.torch_like(q_dtype, kv_dtype)
    i32 = torch.int32 if torch is not None else np.dtype(np.int32)
    u64 = torch.uint64 if torch is not None else np.dtype(np.uint64)
    meta_words = META_HEADER_U64 + (int(c.qo_indptr) + 1) // 2
    return (
        ((meta_words,), u64),
        ((work_indptr,), i32),
        ((int(c.work_info), 8), i32),
        ((int(c.reduce_indptr),), i32),
        ((int(c.reduce_final_map) // 2, 2), i32),
        ((int(c.reduce_partial_map),), i32),
    )


def _batch_struct(arch, qd, kd, num_heads, page_size, causal, cp, topk, qo, kv, last):
    return _native.Batch(arch, qd, kd, num_heads, page_size, int(bool(causal)), int(bool(cp)),
                         max(0, topk), _util.i32p(qo), qo.size, _util.i32p(kv), kv.size,
                         _util.i32p(last), last.size)


def metadata_words(work_metadata):
    """The int32 view of a host work_meta_data array (mlaps' layout), checked."""
    m = _util.host_array("work_metadata_ptrs", work_metadata, _META_DTYPES, ndim=1, writable=False)
    if m.size < META_HEADER_U64 + 1:
        raise ValueError("work_metadata_ptrs has %d entries; mlaps' work_meta_data needs at "
                         "least %d (size it with mlaps.get_mla_metadata_info_v1)"
                         % (m.size, META_HEADER_U64 + 1))
    return m.view(np.int32)


def read_metadata(work_metadata):
    """What an mlaps plan header says (a dict), or None when `work_metadata` is not one (an
    AITER plan's two pointers, or never planned). Host arrays only."""
    m = _util.host_array("work_metadata_ptrs", work_metadata, _META_DTYPES, ndim=1)
    if m.size < META_HEADER_U64 + 1:
        return None
    w = m.view(np.int32)
    out = {k: int(w[i]) for k, i in _STATUS.items()}
    if int(w[_H["magic"]]) == META_MAGIC:
        out.update({k: int(w[i]) for k, i in _H.items()})
    out["qo_indptr"] = w[META_QO_INDPTR_WORD:META_QO_INDPTR_WORD + out["num_virtual_requests"]
                         + 1] if out["code"] == 0 and out["num_virtual_requests"] > 0 else None
    return out


def _plan_args(seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
               num_heads_k, page_size, topk):
    qo = _util.host_array("seqlens_qo_indptr", seqlens_qo_indptr, np.int32, ndim=1)
    kv = _util.host_array("seqlens_kv_indptr", seqlens_kv_indptr, np.int32, ndim=1)
    last = _util.host_array("kv_last_page_lens", kv_last_page_lens, np.int32, ndim=1)
    h = _util.int_arg("num_heads_per_head_k", num_heads_per_head_k, 1)
    hk = _util.int_arg("num_heads_k", num_heads_k)
    if hk != 1:
        raise ValueError("num_heads_k=%d: MLA has one kv head (num_heads_k must be 1)" % hk)
    page_size = _util.int_arg("page_size", page_size, 1)
    topk = _util.int_arg("topk", topk, -1)
    return qo, kv, last, h, page_size, topk


def get_mla_metadata_v1(seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens,
                        num_heads_per_head_k, num_heads_k, is_causal, work_metadata_ptrs,
                        work_info_set, work_indptr, reduce_indptr, reduce_final_map,
                        reduce_partial_map, page_size=1, kv_granularity=16, max_seqlen_qo=-1,
                        uni_seqlen_qo=-1, fast_mode=True, topk=-1, max_split_per_batch=-1,
                        intra_batch_mode=False, is_cp_round_robin=False, dtype_q=None,
                        dtype_kv=None, *, arch=None, policy="greedy_payload", lse=False,
                        stream=None):
    """Plans a decode batch into the caller's buffers (in place; AITER's argument order:
    work_info_set before work_indptr). numpy arrays (or torch CPU tensors) plan on the CPU;
    device arrays (torch CUDA tensors, __cuda_array_interface__) plan with the GPU planner on
    `stream` (default: the arrays' current torch stream, else the legacy default stream),
    with no host synchronization (graph-capturable; needs max_seqlen_qo and the NVIDIA
    build).

    Raises ValueError (bad batch or option, unsupported shape, a buffer too small: the C++
    message naming the argument and value) or TypeError (a wrong dtype / type). On any error
    no buffer is modified, so there is never a partial plan. Returns None (AITER's contract);
    mlaps.read_metadata(work_metadata_ptrs) gives the plan's sizes and variant."""
    if intra_batch_mode:
        raise ValueError("intra_batch_mode=True: not supported by mlaps")
    qd = _util.dtype_code("dtype_q", dtype_q)
    kd = _util.dtype_code("dtype_kv", dtype_kv)
    arch_c = _util.arch_code(arch)
    if policy not in ("greedy_payload", "longest_first"):
        raise ValueError("policy=%r: must be 'greedy_payload' or 'longest_first'" % (policy,))
    arrays = {"seqlens_qo_indptr": seqlens_qo_indptr, "seqlens_kv_indptr": seqlens_kv_indptr,
              "kv_last_page_lens": kv_last_page_lens, "work_metadata_ptrs": work_metadata_ptrs,
              "work_info_set": work_info_set, "work_indptr": work_indptr,
              "reduce_indptr": reduce_indptr, "reduce_final_map": reduce_final_map,
              "reduce_partial_map": reduce_partial_map}
    on_device = {k: _util.is_device_array(v) for k, v in arrays.items()}
    if any(on_device.values()):
        if not all(on_device.values()):
            host = [k for k, d in on_device.items() if not d]
            raise TypeError("mixed host and device arrays: %s on the host, the rest on the "
                            "device (all on one side)" % ", ".join(host))
        from . import decode  # the GPU layer (libmlaps_cuda.so)
        return decode.gpu_plan(arrays, num_heads_per_head_k, num_heads_k, is_causal, page_size,
                               kv_granularity, max_seqlen_qo, uni_seqlen_qo, topk,
                               max_split_per_batch, is_cp_round_robin, qd, kd, arch_c, policy,
                               lse, stream)
    qo, kv, last, h, page_size, topk = _plan_args(
        seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
        num_heads_k, page_size, topk)
    kv_granularity = _util.int_arg("kv_granularity", kv_granularity, 0)
    max_seqlen_qo = _util.int_arg("max_seqlen_qo", max_seqlen_qo)
    uni_seqlen_qo = _util.int_arg("uni_seqlen_qo", uni_seqlen_qo)
    max_split = _util.int_arg("max_split_per_batch", max_split_per_batch, -1)
    meta = _util.host_array("work_metadata_ptrs", work_metadata_ptrs, _META_DTYPES, ndim=1,
                            writable=True)
    info = _util.host_array("work_info_set", work_info_set, np.int32, ndim=2, writable=True)
    if info.shape[1] != 8:
        raise ValueError("work_info_set has shape %s, must be (rows, 8)" % (tuple(info.shape),))
    wip = _util.host_array("work_indptr", work_indptr, np.int32, ndim=1, writable=True)
    rip = _util.host_array("reduce_indptr", reduce_indptr, np.int32, ndim=1, writable=True)
    rfm = _util.host_array("reduce_final_map", reduce_final_map, np.int32, ndim=2, writable=True)
    if rfm.shape[1] != 2:
        raise ValueError("reduce_final_map has shape %s, must be (tiles, 2)" % (tuple(rfm.shape),))
    rpm = _util.host_array("reduce_partial_map", reduce_partial_map, np.int32, ndim=1,
                           writable=True)
    if meta.size < META_HEADER_U64 + 1:
        raise ValueError("work_metadata_ptrs has %d entries; mlaps' work_meta_data needs at "
                         "least %d (size it with mlaps.get_mla_metadata_info_v1)"
                         % (meta.size, META_HEADER_U64 + 1))
    if wip.size < 2:
        raise ValueError("work_indptr has %d entries: needs num_cu + 1 >= 2" % wip.size)
    words = meta.view(np.int32)
    base = words.ctypes.data
    fqo_len = words.size - META_QO_INDPTR_WORD
    batch = _batch_struct(arch_c, qd, kd, h, page_size, is_causal, is_cp_round_robin, topk, qo,
                          kv, last)
    opts = _native.PlanOptions(wip.size - 1, kv_granularity, -1, max(0, max_split),
                               0 if policy == "greedy_payload" else 1, int(bool(lse)),
                               max(0, max_seqlen_qo), max(0, uni_seqlen_qo))
    bufs = _native.PlanBuffers(base + 4 * META_QO_INDPTR_WORD, fqo_len, wip.ctypes.data,
                               wip.size, info.ctypes.data, info.shape[0], rip.ctypes.data,
                               rip.size, rfm.ctypes.data, rfm.size, rpm.ctypes.data, rpm.size)
    sizes = _native.PlanSizes()
    err = _native.Error()
    lib = _native.cpu()
    _native.raise_for(lib.mlaps_plan(ctypes.byref(batch), ctypes.byref(opts), ctypes.byref(bufs),
                                     ctypes.byref(sizes), err.buf, err.size),
                      err, "get_mla_metadata_v1")
    # Tails: CUs past the plan's run nothing; reduce tiles past the plan are empty.
    if sizes.num_cu + 1 < wip.size:
        wip[sizes.num_cu + 1:] = wip[sizes.num_cu]
    if sizes.num_reduce_tiles + 1 < rip.size:
        rip[sizes.num_reduce_tiles + 1:] = rip[sizes.num_reduce_tiles]
    # The header: the status words (GpuPlanStatus layout), then the plan's variant.
    words[:META_QO_INDPTR_WORD] = (
        0, -1, 0, 0, 0, 0, sizes.num_virtual_requests, sizes.num_works,
        sizes.num_reduce_tiles, sizes.num_reduce_pieces, sizes.num_partial_rows, 0,
        META_MAGIC, META_VERSION, sizes.num_cu, sizes.head_fold, sizes.tokens_per_tile,
        sizes.rows_per_tile, h, arch_c, qd, kd, sizes.max_qlen, page_size,
        int(bool(is_causal)) | int(bool(is_cp_round_robin)) << 1, max(0, topk),
        sizes.kv_granularity, int(bool(lse)), sizes.kv_lanes, 0, 0, 0)
    return None
