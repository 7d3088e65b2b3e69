"""check_plan and simulate: mlaps' plan checker and CPU numeric simulator over the same arrays
get_mla_metadata_v1 takes (an mlaps plan, or one dumped from AITER)."""

import collections
import ctypes
import sys

import numpy as np

from . import _native
from . import _util
from . import planner as _planner


class Violation(collections.namedtuple("Violation", "defect work field message")):
    """One violated invariant (sim/plan_checker.h): defect class (e.g. 'kv_offset'), the work
    item index (-1: not about one item), the field and the message."""

    def __str__(self):
        where = "work %d " % self.work if self.work >= 0 else ""
        return "%s: %s%s: %s" % (self.defect, where, self.field, self.message)


def _to_host(name, x):
    """Device arrays are copied to the host (this synchronizes); host arrays pass through."""
    if _util.is_device_array(x):
        if str(getattr(x, "dtype", "")) == "torch.uint64":  # thin uint64 support: copy as int64
            x = x.view(sys.modules["torch"].int64)
        if hasattr(x, "cpu"):
            return x.detach().cpu().numpy() if hasattr(x, "detach") else x.cpu().numpy()
        from . import decode
        return decode.device_to_host(name, x)
    return x


def _plan_view(seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
               num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr,
               reduce_indptr, reduce_final_map, reduce_partial_map, page_size, topk,
               is_cp_round_robin, dtype_q, dtype_kv, arch, head_fold, num_reduce_tiles):
    """The batch struct and the used prefixes of the plan arrays (plus keep-alive refs)."""
    args = [_to_host(n, x) for n, x in (
        ("seqlens_qo_indptr", seqlens_qo_indptr), ("seqlens_kv_indptr", seqlens_kv_indptr),
        ("kv_last_page_lens", kv_last_page_lens), ("work_metadata_ptrs", work_metadata_ptrs),
        ("work_info_set", work_info_set), ("work_indptr", work_indptr),
        ("reduce_indptr", reduce_indptr), ("reduce_final_map", reduce_final_map),
        ("reduce_partial_map", reduce_partial_map))]
    qo, kv, last, h, page_size, topk = _planner._plan_args(
        args[0], args[1], args[2], num_heads_per_head_k, num_heads_k, page_size, topk)
    header = None
    if args[3] is not None:
        header = _planner.read_metadata(args[3])
    if header is not None and header["code"] != 0:
        raise ValueError("work_metadata_ptrs: the plan's status word says the planner failed "
                         "(code %d, index %d): there is no plan to check"
                         % (header["code"], header["index"]))
    info = _util.host_array("work_info_set", args[4], np.int32, ndim=2)
    if info.shape[1] != 8:
        raise ValueError("work_info_set has shape %s, must be (rows, 8)" % (tuple(info.shape),))
    wip = _util.host_array("work_indptr", args[5], np.int32, ndim=1)
    rip = _util.host_array("reduce_indptr", args[6], np.int32, ndim=1)
    rfm = np.ascontiguousarray(_util.host_array("reduce_final_map", args[7], np.int32)).ravel()
    rpm = _util.host_array("reduce_partial_map", args[8], np.int32, ndim=1)
    if wip.size < 1:
        raise ValueError("work_indptr is empty")
    if header is not None and "head_fold" in header:
        num_cu = header["num_cu"]
        wip = wip[:num_cu + 1]
        works = header["num_works"]
        tiles = header["num_reduce_tiles"]
        pieces = header["num_reduce_pieces"]
        fold = header["head_fold"] if head_fold is None else head_fold
    else:
        # An AITER plan (or a GPU-planned one whose header only has the status): the plan's
        # own counts where it has them, else the arrays' used prefixes.
        fold = 1 if head_fold is None else head_fold
        b = qo.size - 1
        if (head_fold is None and header is not None and b > 0 and
                header["num_virtual_requests"] % b == 0):
            fold = max(1, header["num_virtual_requests"] // b)  # a GPU plan: B * head_fold
        last_w = int(wip[-1])
        works = last_w if 0 <= last_w <= info.shape[0] else info.shape[0]
        if header is not None:
            works, tiles, pieces = (header["num_works"], header["num_reduce_tiles"],
                                    header["num_reduce_pieces"])
        else:
            tiles = max(0, rip.size - 1)
            if num_reduce_tiles is not None:
                tiles = _util.int_arg("num_reduce_tiles", num_reduce_tiles, 0, max(0, rip.size - 1))
            else:  # trailing empty tiles (repeated final entries) are padding
                while tiles > 0 and rip[tiles - 1] == rip[tiles]:
                    tiles -= 1
            pieces = int(rip[tiles]) if rip.size else 0
            pieces = pieces if 0 <= pieces <= rpm.size else rpm.size
    fold = _util.int_arg("head_fold", fold, 1)
    works = min(max(works, 0), info.shape[0])
    rip_used = rip[:tiles + 1]
    rfm_used = rfm[:2 * tiles]
    rpm_used = rpm[:max(0, min(pieces, rpm.size))]
    info_used = info[:works]
    batch = _planner._batch_struct(
        _util.arch_code(arch), _util.dtype_code("dtype_q", dtype_q or "bf16"),
        _util.dtype_code("dtype_kv", dtype_kv or dtype_q or "bf16"), h, page_size, is_causal,
        is_cp_round_robin, topk, qo, kv, last)
    bufs = _native.PlanBuffers(None, 0, _util.i32p(wip), wip.size, _util.i32p(info_used),
                               info_used.shape[0], _util.i32p(rip_used), rip_used.size,
                               _util.i32p(rfm_used), rfm_used.size, _util.i32p(rpm_used),
                               rpm_used.size)
    keep = (qo, kv, last, wip, info_used, rip_used, rfm_used, rpm_used)
    return batch, bufs, fold, keep, qo, h


def check_plan(seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
               num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr,
               reduce_indptr, reduce_final_map, reduce_partial_map, page_size=1, topk=-1,
               is_cp_round_robin=False, dtype_q=None, dtype_kv=None, *, arch=None,
               head_fold=None, num_cu=None, num_reduce_tiles=None, partial_rows_capacity=None,
               max_violations=1000):
    """Every violated plan invariant (sim/plan_checker.h) as a list of Violation; empty when
    the plan is sound. Same arrays as get_mla_metadata_v1 (numpy, torch CPU tensors, or device
    arrays, which are copied to the host).

    For an mlaps plan the header in work_metadata_ptrs gives the used sizes and head_fold; for
    an AITER plan (work_metadata_ptrs of AITER's two pointers, or None) head_fold defaults to
    1, the work items are work_indptr[-1] rows and the reduce tiles are reduce_indptr without
    its trailing repeated entries (num_reduce_tiles= overrides). A malformed batch raises
    ValueError (it is the input, not the plan, that is wrong)."""
    batch, bufs, fold, keep, _, _ = _plan_view(
        seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
        num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr,
        reduce_final_map, reduce_partial_map, page_size, topk, is_cp_round_robin, dtype_q,
        dtype_kv, arch, head_fold, num_reduce_tiles)
    opts = _native.CheckOptions(
        fold, -1 if num_cu is None else _util.int_arg("num_cu", num_cu, 1),
        -1 if partial_rows_capacity is None else _util.int_arg("partial_rows_capacity",
                                                               partial_rows_capacity, 0),
        _util.int_arg("max_violations", max_violations, 1))
    lib = _native.cpu()
    count = ctypes.c_int32(0)
    needed = ctypes.c_int64(0)
    size = 1 << 16
    while True:
        text = ctypes.create_string_buffer(size)
        err = _native.Error()
        code = lib.mlaps_check_plan(ctypes.byref(batch), ctypes.byref(bufs), ctypes.byref(opts),
                                    ctypes.byref(count), text, size, ctypes.byref(needed),
                                    err.buf, err.size)
        if code == _native.RESOURCE_EXHAUSTED and needed.value > size:
            size = needed.value
            continue
        _native.raise_for(code, err, "check_plan")
        break
    del keep
    out = []
    for line in text.value.decode("utf-8", "replace").splitlines():
        defect, work, field, message = line.split("\t", 3)
        out.append(Violation(defect, int(work), field, message))
    return out


class SimResult(collections.namedtuple(
        "SimResult", "o lse ref_o ref_lse passed cos_diff max_abs_err fail_fraction "
        "num_failing num_elements lse_max_abs_err o_mask_mismatches lse_mask_mismatches "
        "partial_items reduce_tiles unwritten_tokens rewritten_tokens summary")):
    """simulate()'s result: O [total_q, H, 512] float32 (bf16 values) and LSE [total_q, H]
    from the CPU executor, the fp64 reference's, and the comparison under mlaps' gates."""


def _kv_floats(kv_buffer):
    kv = np.asarray(kv_buffer)
    if kv.dtype != np.float32:
        raise TypeError("kv_buffer has dtype %s, must be float32 (values of the kv dtype)"
                        % kv.dtype)
    if kv.ndim == 4:
        if kv.shape[2] != 1 or kv.shape[3] != 576:
            raise ValueError("kv_buffer has shape %s, must be [pages, page_size, 1, 576]"
                             % (tuple(kv.shape),))
    elif kv.ndim != 3 or kv.shape[2] != 576:
        raise ValueError("kv_buffer has shape %s, must be [pages, page_size, (1,) 576]"
                         % (tuple(kv.shape),))
    return np.ascontiguousarray(kv)


def simulate(seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
             num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr,
             reduce_indptr, reduce_final_map, reduce_partial_map, page_size=1, topk=-1,
             is_cp_round_robin=False, dtype_q=None, dtype_kv=None, *, q=None, kv_buffer=None,
             kv_indices=None, seed=1, sm_scale=None, q_scale=1.0, kv_scale=1.0, kv_block=64,
             arch=None, head_fold=None, num_reduce_tiles=None):
    """Runs the plan on the CPU executor (fp32 online softmax, partials, reduce, bf16 O; the
    GPU kernel's execution model) and the fp64 reference on the same inputs; returns a
    SimResult. q ([total_q, H, 576]) and kv_buffer ([pages, page_size, 1, 576]) are float32
    arrays holding values of the dtype (bf16 values, or fp8 codes as floats); leave both None
    for deterministic random inputs from `seed`. kv_indices None: identity page ids (or the
    seeded case's shuffled pages)."""
    if is_cp_round_robin and is_causal:
        raise ValueError("simulate: a causal CP round-robin shard needs the global positions; "
                         "simulate the unsharded batch instead")
    batch, bufs, fold, keep, qo, h = _plan_view(
        seqlens_qo_indptr, seqlens_kv_indptr, kv_last_page_lens, num_heads_per_head_k,
        num_heads_k, is_causal, work_metadata_ptrs, work_info_set, work_indptr, reduce_indptr,
        reduce_final_map, reduce_partial_map, page_size, topk, is_cp_round_robin, dtype_q,
        dtype_kv, arch, head_fold, num_reduce_tiles)
    total_q = int(qo[-1]) if qo.size else 0
    o = np.zeros((total_q, h, 512), np.float32)
    lse = np.zeros((total_q, h), np.float32)
    ref_o = np.zeros((total_q, h, 512), np.float64)
    ref_lse = np.zeros((total_q, h), np.float64)
    qa = kva = kvi = None
    if (q is None) != (kv_buffer is None):
        raise ValueError("simulate: give both q and kv_buffer, or neither (seeded inputs)")
    if q is not None:
        qa = np.ascontiguousarray(np.asarray(q))
        if qa.dtype != np.float32:
            raise TypeError("q has dtype %s, must be float32 (values of the q dtype)" % qa.dtype)
        if qa.shape != (total_q, h, 576):
            raise ValueError("q has shape %s, must be [total_q, H, 576] = %s"
                             % (tuple(qa.shape), (total_q, h, 576)))
        kva = _kv_floats(kv_buffer)
        if kv_indices is not None:
            kvi = _util.host_array("kv_indices", kv_indices, np.int32, ndim=1)
    inputs = _native.SimInputs(
        _util.f32p(qa), 0 if qa is None else qa.size, _util.f32p(kva),
        0 if kva is None else kva.size, _util.i32p(kvi), 0 if kvi is None else kvi.size,
        -1.0 if sm_scale is None else float(sm_scale), float(q_scale), float(kv_scale),
        _util.int_arg("seed", seed, 0), fold, _util.int_arg("kv_block", kv_block, 1), 1, -1)
    res = _native.SimResult()
    res.o, res.o_len = _util.f32p(o), o.size
    res.lse, res.lse_len = _util.f32p(lse), lse.size
    res.ref_o, res.ref_o_len = _util.f64p(ref_o), ref_o.size
    res.ref_lse, res.ref_lse_len = _util.f64p(ref_lse), ref_lse.size
    err = _native.Error()
    lib = _native.cpu()
    _native.raise_for(lib.mlaps_simulate(ctypes.byref(batch), ctypes.byref(bufs),
                                         ctypes.byref(inputs), ctypes.byref(res), err.buf,
                                         err.size), err, "simulate")
    del keep
    return SimResult(o, lse, ref_o, ref_lse, bool(res.passed), res.cos_diff, res.max_abs_err,
                     res.fail_fraction, res.num_failing, res.num_elements, res.lse_max_abs_err,
                     res.o_mask_mismatches, res.lse_mask_mismatches, res.partial_items,
                     res.reduce_tiles, res.unwritten_tokens, res.rewritten_tokens,
                     res.summary.decode())
