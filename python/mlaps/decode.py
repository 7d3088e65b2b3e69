"""GPU layer: mla_decode_fwd (AITER's shapes), the GPU planner behind get_mla_metadata_v1,
the sparse KV gather and the CP merge, over libmlaps_cuda.so (NVIDIA build).

Device arrays come in as torch CUDA tensors (duck-typed: data_ptr(), dtype, device, shape,
is_contiguous(); torch is never imported), objects with __cuda_array_interface__, or DLPack
(__dlpack__). Everything is enqueued on the caller's stream (the `stream` argument, else
torch's current stream when the arrays are torch tensors, else the legacy default stream),
with no allocation and no synchronization, so a decode step can be captured into a CUDA
graph. Scratch (the status word, LSE when the caller gives none, the fp32 partial buffers)
lives in a workspace the caller allocates once, sized by get_mla_decode_workspace_info.
"""

import ctypes
import functools
import math
import sys
import threading

import numpy as np

from . import _native
from . import _util
from . import planner as _planner

_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_vp = ctypes.c_void_p
_f32 = ctypes.c_float


class _GpuPlanArgs(ctypes.Structure):
    _fields_ = [("qo_indptr", _vp), ("kv_indptr", _vp), ("kv_last_page_lens", _vp)] + [
        (n, _i32) for n in ("num_requests", "max_qlen", "num_heads", "page_size", "causal_trim",
                            "sparse_topk", "head_fold", "tokens_per_tile", "num_cu",
                            "kv_granularity", "fixed_overhead", "max_split_per_batch",
                            "policy", "kv_lanes")] + [
        ("out_qo_indptr", _vp), ("out_qo_indptr_capacity", _i64),
        ("work_indptr", _vp), ("work_indptr_capacity", _i64),
        ("work_info", _vp), ("work_info_capacity", _i64),
        ("reduce_indptr", _vp), ("reduce_indptr_capacity", _i64),
        ("reduce_final_map", _vp), ("reduce_final_map_capacity", _i64),
        ("reduce_partial_map", _vp), ("reduce_partial_map_capacity", _i64),
        ("status", _vp)]


class _DecodeArgs(ctypes.Structure):
    _fields_ = [
        ("q", _vp), ("kv_cache", _vp), ("kv_indices", _vp), ("qo_indptr", _vp),
        ("kv_indptr", _vp), ("kv_last_page_lens", _vp), ("num_requests", _i32),
        ("num_heads", _i32), ("num_q_tokens", _i64), ("num_pages", _i64),
        ("num_kv_indices", _i64), ("page_size", _i32), ("dtype", _i32), ("mask", _i32),
        ("sm_scale", _f32), ("q_scale", _f32), ("kv_scale", _f32), ("cp_world_size", _i32),
        ("cp_interleave", _i32), ("cp_rank", _i32), ("cp_global_kv_len", _vp),
        ("work_indptr", _vp), ("work_info", _vp), ("work_info_capacity", _i64),
        ("num_cu", _i32), ("head_fold", _i32), ("tokens_per_tile", _i32),
        ("rows_per_tile", _i32), ("reduce_indptr", _vp), ("reduce_final_map", _vp),
        ("reduce_partial_map", _vp), ("reduce_partial_map_capacity", _i64),
        ("num_reduce_tiles_device", _vp), ("reduce_tiles_capacity", _i32), ("o_fp32", _i32),
        ("o", _vp), ("lse", _vp), ("partial_o", _vp), ("partial_lse", _vp),
        ("partial_rows_capacity", _i64), ("status", _vp), ("cu_lanes", _i32)]


class _SparseGatherArgs(ctypes.Structure):
    _fields_ = [("num_tokens", _i64), ("topk", _i64), ("num_requests", _i64),
                ("map_form", _i32), ("page_size", _i64), ("max_blocks", _i64),
                ("num_kv_indices", _i64), ("packed_capacity", _i64)] + [
        (n, _vp) for n in ("topk_indices", "token_to_seq", "token_bound", "sparse_kv_indptr",
                           "block_table", "kv_indptr", "kv_indices", "packed", "counts",
                           "dense", "status")]


class _LseMergeArgs(ctypes.Structure):
    _fields_ = [("o_ranks", _vp), ("lse_ranks", _vp), ("world_size", _i32), ("rows", _i64),
                ("dim", _i32), ("o_out", _vp), ("lse_out", _vp), ("out_bf16", _i32)]


def _lib():
    lib = _native.cuda(required=False)
    if lib is None:
        raise RuntimeError("mlaps: the GPU library libmlaps_cuda.so is not installed (build it "
                           "with python/build_wheel.sh --cuda, or set MLAPS_LIB_DIR)")
    if not getattr(lib, "_mlaps_typed", False):
        P = ctypes.POINTER
        for name, st in (("mlaps_cuda_plan", _GpuPlanArgs), ("mlaps_cuda_decode", _DecodeArgs),
                         ("mlaps_cuda_sparse_gather", _SparseGatherArgs),
                         ("mlaps_cuda_lse_merge", _LseMergeArgs)):
            f = getattr(lib, name)
            f.restype = _i32
            f.argtypes = [P(st), _vp, ctypes.c_char_p, _i64]
        lib.mlaps_cuda_set_device.restype = _i32
        lib.mlaps_cuda_set_device.argtypes = [_i32, ctypes.c_char_p, _i64]
        lib.mlaps_cuda_copy_to_host.restype = _i32
        lib.mlaps_cuda_copy_to_host.argtypes = [_vp, _vp, _i64, ctypes.c_char_p, _i64]
        lib._mlaps_typed = True
    return lib


def cuda_available():
    """True when libmlaps_cuda.so loads (the NVIDIA build is installed)."""
    try:
        return _native.cuda(required=False) is not None
    except OSError:
        return False


# ---- Device arrays ------------------------------------------------------------------------

_TYPESTR = {"<i4": "int32", "<f4": "float32", "|u1": "uint8", "<u1": "uint8", "<u8": "uint64",
            "<i8": "int64", "<u2": "bfloat16"}
_DLPACK = {(0, 32): "int32", (0, 64): "int64", (1, 8): "uint8", (1, 64): "uint64",
           (2, 32): "float32", (2, 16): "float16", (4, 16): "bfloat16", (10, 8): "float8_e4m3fn"}


class _Dev(object):
    """A checked view of one device array: address, shape, dtype name."""
    __slots__ = ("name", "ptr", "shape", "dtype", "obj", "torch", "keep")

    def __init__(self, name, obj):
        self.name, self.obj, self.torch, self.keep = name, obj, False, None
        if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):  # torch, duck-typed
            dev = getattr(obj.device, "type", str(obj.device))
            if dev != "cuda":
                raise TypeError("%s is on %s, must be a CUDA device tensor" % (name, dev))
            if not obj.is_contiguous():
                raise ValueError("%s is not contiguous (strides %s)" % (name, tuple(obj.stride())))
            self.ptr = int(obj.data_ptr())
            self.shape = tuple(int(x) for x in obj.shape)
            self.dtype = str(obj.dtype).replace("torch.", "")
            self.torch = True
        elif hasattr(obj, "__cuda_array_interface__"):
            cai = obj.__cuda_array_interface__
            self.ptr = int(cai["data"][0])
            self.shape = tuple(int(x) for x in cai["shape"])
            self.dtype = _TYPESTR.get(cai["typestr"], cai["typestr"])
            strides = cai.get("strides")
            if strides is not None:
                item = np.dtype(cai["typestr"]).itemsize if cai["typestr"] != "<u2" else 2
                expect, s = [], item
                for d in reversed(self.shape):
                    expect.append(s)
                    s *= d
                if tuple(strides) != tuple(reversed(expect)):
                    raise ValueError("%s is not contiguous (strides %s)" % (name, strides))
        elif hasattr(obj, "__dlpack__"):
            self._from_dlpack(obj)
        else:
            raise TypeError("%s: expected a CUDA device array (torch tensor, "
                            "__cuda_array_interface__ or DLPack), got %s"
                            % (name, type(obj).__name__))

    def _from_dlpack(self, obj):
        class DLDevice(ctypes.Structure):
            _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

        class DLDataType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                        ("lanes", ctypes.c_uint16)]

        class DLTensor(ctypes.Structure):
            _fields_ = [("data", _vp), ("device", DLDevice), ("ndim", ctypes.c_int32),
                        ("dtype", DLDataType), ("shape", ctypes.POINTER(_i64)),
                        ("strides", ctypes.POINTER(_i64)), ("byte_offset", ctypes.c_uint64)]
        capsule = obj.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype = _vp
        get.argtypes = [ctypes.py_object, ctypes.c_char_p]
        t = DLTensor.from_address(get(capsule, b"dltensor"))
        if t.device.device_type not in (2, 13):  # kDLCUDA, kDLCUDAManaged
            raise TypeError("%s is not on a CUDA device (DLPack device type %d)"
                            % (self.name, t.device.device_type))
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.dtype = _DLPACK.get((t.dtype.code, t.dtype.bits), "dl%d_%d" % (t.dtype.code,
                                                                              t.dtype.bits))
        if t.strides:
            s, expect = 1, []
            for d in reversed(self.shape):
                expect.append(s)
                s *= d
            if tuple(t.strides[i] for i in range(t.ndim)) != tuple(reversed(expect)):
                raise ValueError("%s is not contiguous" % self.name)
        self.ptr = int(t.data or 0) + int(t.byte_offset)
        self.keep = capsule  # the capsule owns the tensor until we are done

    def need(self, dtypes, ndim=None, shape=None):
        if isinstance(dtypes, str):
            dtypes = (dtypes,)
        if self.dtype not in dtypes:
            raise TypeError("%s has dtype %s, must be %s" % (self.name, self.dtype,
                                                            " or ".join(dtypes)))
        if ndim is not None and len(self.shape) != ndim:
            raise ValueError("%s has shape %s, must have %d dimension(s)"
                             % (self.name, self.shape, ndim))
        if shape is not None:
            for i, (got, want) in enumerate(zip(self.shape, shape)):
                if want is not None and got != want:
                    raise ValueError("%s has shape %s; dimension %d must be %d"
                                     % (self.name, self.shape, i, want))
        return self


_current = threading.local()


def _set_device(devs):
    """The library's CUDA runtime is its own (static): make the arrays' device its current
    device on this thread (once per thread and device)."""
    index = None
    for d in devs:
        if d.torch:
            index = getattr(d.obj.device, "index", None)
            break
    if index is None or getattr(_current, "device", None) == index:
        return
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_set_device(int(index), err.buf, err.size), err,
                      "set device")
    _current.device = index


def _stream_of(stream, *devs):
    _set_device(devs)
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        raise TypeError("stream=%r: pass an int handle or an object with .cuda_stream"
                        % (stream,))
    torch = sys.modules.get("torch")
    if torch is not None and any(d.torch for d in devs):
        return int(torch.cuda.current_stream(devs[0].obj.device).cuda_stream)
    return 0


def _scale(name, v):
    if v is None:
        return 1.0
    if isinstance(v, (int, float, np.floating, np.integer)):
        return float(v)
    if _util.is_device_array(v):
        raise TypeError("%s is a device tensor: pass a Python float (reading a device scalar "
                        "would synchronize, which a graph capture cannot)" % name)
    a = np.asarray(v, dtype=np.float64).ravel()
    if a.size != 1:
        raise ValueError("%s has %d elements; a per-tensor scale has one" % (name, a.size))
    return float(a[0])


# ---- Workspace ----------------------------------------------------------------------------

_STATUS_BYTES = 256


def _align(n, a=256):
    return (n + a - 1) // a * a


def get_mla_decode_workspace_info(batch_size, max_seqlen_qo, num_head_qo, q_dtype, kv_dtype,
                                  is_sparse, *, arch=None, num_cu=None, is_cp_round_robin=False,
                                  lse=False):
    """((bytes,), uint8) of the decode workspace for every batch within the maxima (the same
    maxima as get_mla_metadata_info_v1): status word, LSE rows and the fp32 partial buffers.
    Allocate once (e.g. torch.empty(shape, dtype=dtype, device='cuda'))."""
    info = _planner._capacity(
        _util.arch_code(arch), _util.dtype_code("q_dtype", q_dtype),
        _util.dtype_code("kv_dtype", kv_dtype), _util.int_arg("num_head_qo", num_head_qo, 1),
        _util.int_arg("batch_size", batch_size, 1) * (max_seqlen_qo if is_sparse else 1),
        1 if is_sparse else _util.int_arg("max_seqlen_qo", max_seqlen_qo, 1),
        0 if num_cu is None else num_cu, is_cp_round_robin, lse)
    tokens = batch_size * max_seqlen_qo
    nbytes = (_STATUS_BYTES + _align(tokens * num_head_qo * 4) + _align(info.partial_o_bytes) +
              _align(info.partial_lse_bytes) + 4 * 512 * 4 * num_head_qo)
    torch = _util.torch_like(q_dtype, kv_dtype)
    return (((int(nbytes),), torch.uint8 if torch is not None else np.dtype(np.uint8)),)


def _workspace_layout(nbytes, total_q, heads, heads_per_group):
    lse_off = _STATUS_BYTES
    part_off = lse_off + _align(total_q * heads * 4)
    row_bytes = heads_per_group * 513 * 4
    rows = max(0, (nbytes - part_off - 256) // row_bytes)
    plse_off = part_off + _align(rows * heads_per_group * 512 * 4)
    return lse_off, part_off, plse_off, rows


def decode_status(workspace):
    """The decode's status word (MlaStatus) from the workspace, copied to the host (this
    synchronizes): dict code, cu, index, value (code 0: every item ran)."""
    ws = _Dev("workspace", workspace)
    raw = np.zeros(6, np.int32)
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_copy_to_host(raw.ctypes.data, ws.ptr, 24, err.buf,
                                                     err.size), err, "decode_status")
    return {"code": int(raw[0]), "cu": int(raw[1]), "index": int(raw[2]),
            "value": int(raw[4].astype(np.int64) | (raw[5].astype(np.int64) << 32))}


def device_to_host(name, x):
    """A numpy copy of a device array (synchronizes; for check_plan, never in a decode)."""
    d = _Dev(name, x)
    dt = {"int32": np.int32, "uint64": np.uint64, "int64": np.int64, "float32": np.float32,
          "uint8": np.uint8}.get(d.dtype)
    if dt is None:
        raise TypeError("%s has dtype %s: cannot copy it to a numpy array" % (name, d.dtype))
    out = np.empty(d.shape, dt)
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_copy_to_host(out.ctypes.data, d.ptr, out.nbytes, err.buf,
                                                     err.size), err, name)
    return out


@functools.lru_cache(maxsize=256)
def _variant(heads, qlen, qd, kd, arch, cp, lse):
    return _planner.resolve_variant(heads, qlen, _util.DTYPE_NAMES[qd], _util.DTYPE_NAMES[kd],
                                    arch=_util.ARCH_NAMES[arch], cp_round_robin=cp, lse=lse)


@functools.lru_cache(maxsize=256)
def _kv_lanes(heads, qlen, qd, kd, arch, cp, lse, num_cu):
    return _planner.kv_lanes(heads, qlen, _util.DTYPE_NAMES[qd], _util.DTYPE_NAMES[kd], num_cu,
                             arch=_util.ARCH_NAMES[arch], cp_round_robin=cp, lse=lse)


@functools.lru_cache(maxsize=256)
def _fixed_overhead(heads, qlen, qd, kd, arch, cp, lse, page_size, kv_granularity, num_cu):
    return _planner.default_fixed_overhead(heads, qlen, _util.DTYPE_NAMES[qd],
                                           _util.DTYPE_NAMES[kd], page_size, kv_granularity,
                                           num_cu, arch=_util.ARCH_NAMES[arch],
                                           cp_round_robin=cp, lse=lse)


# ---- GPU planner --------------------------------------------------------------------------

def gpu_plan(arrays, num_heads_per_head_k, num_heads_k, is_causal, page_size, kv_granularity,
             max_seqlen_qo, uni_seqlen_qo, topk, max_split_per_batch, is_cp_round_robin, qd, kd,
             arch, policy, lse, stream):
    """get_mla_metadata_v1 on device arrays: the GPU planner on the caller's stream (no host
    round trip). Errors found on the device go to the status word in work_metadata_ptrs
    (read_metadata after a sync, or check_plan)."""
    h = _util.int_arg("num_heads_per_head_k", num_heads_per_head_k, 1)
    if _util.int_arg("num_heads_k", num_heads_k) != 1:
        raise ValueError("num_heads_k=%d: MLA has one kv head (num_heads_k must be 1)"
                         % num_heads_k)
    max_qlen = _util.int_arg("max_seqlen_qo", max_seqlen_qo)
    topk = _util.int_arg("topk", topk, -1)
    if topk > 0:
        max_qlen = 1  # sparse per-token layout: one q token per row
    if max_qlen < 1:
        raise ValueError("max_seqlen_qo=%d: device arrays plan on the GPU, which needs the "
                         "batch's largest qlen from the host (reading it would synchronize)"
                         % max_qlen)
    if policy != "greedy_payload":
        raise ValueError("policy=%r: the GPU planner runs greedy_payload only (plan on the "
                         "host with numpy arrays for %s)" % (policy, policy))
    page_size = _util.int_arg("page_size", page_size, 1)
    d = {k: _Dev(k, v) for k, v in arrays.items()}
    qo = d["seqlens_qo_indptr"].need("int32", 1)
    kv = d["seqlens_kv_indptr"].need("int32", 1)
    last = d["kv_last_page_lens"].need("int32", 1)
    meta = d["work_metadata_ptrs"].need(("uint64", "int64"), 1)
    info = d["work_info_set"].need("int32", 2, (None, 8))
    wip = d["work_indptr"].need("int32", 1)
    rip = d["reduce_indptr"].need("int32", 1)
    rfm = d["reduce_final_map"].need("int32", 2, (None, 2))
    rpm = d["reduce_partial_map"].need("int32", 1)
    b = qo.shape[0] - 1
    if b < 1 or kv.shape[0] != b + 1 or last.shape[0] != b:
        raise ValueError("seqlens_qo_indptr / seqlens_kv_indptr / kv_last_page_lens have %d / %d"
                         " / %d entries: need B + 1, B + 1, B with B >= 1"
                         % (qo.shape[0], kv.shape[0], last.shape[0]))
    if meta.shape[0] < _planner.META_HEADER_U64 + 1:
        raise ValueError("work_metadata_ptrs has %d entries; mlaps' work_meta_data needs at "
                         "least %d (size it with mlaps.get_mla_metadata_info_v1)"
                         % (meta.shape[0], _planner.META_HEADER_U64 + 1))
    v = _variant(h, max_qlen, qd, kd, arch, bool(is_cp_round_robin), bool(lse))
    kvg = _util.int_arg("kv_granularity", kv_granularity, 0) or max(16, page_size)
    args = _GpuPlanArgs()
    args.qo_indptr, args.kv_indptr, args.kv_last_page_lens = qo.ptr, kv.ptr, last.ptr
    args.num_requests = b
    args.max_qlen = max_qlen
    args.num_heads = h
    args.page_size = page_size
    args.causal_trim = int(bool(is_causal) and not is_cp_round_robin and topk <= 0)
    args.sparse_topk = max(0, topk)
    args.head_fold = v["head_fold"]
    args.tokens_per_tile = v["tokens_per_tile"]
    args.num_cu = wip.shape[0] - 1
    args.kv_granularity = kvg
    # The batch-independent charge (the host planner's with this value plans alike; its -1 may
    # take a larger one for a batch it sees: BatchFixedOverhead).
    args.fixed_overhead = _fixed_overhead(h, max_qlen, qd, kd, arch, bool(is_cp_round_robin),
                                          bool(lse), page_size, kvg, args.num_cu)
    args.max_split_per_batch = max(0, _util.int_arg("max_split_per_batch", max_split_per_batch,
                                                    -1))
    args.policy = 0
    args.kv_lanes = v["default_kv_lanes"]  # the host planner's default (PlanOptions::kv_lanes)
    args.out_qo_indptr = meta.ptr + 4 * _planner.META_QO_INDPTR_WORD
    args.out_qo_indptr_capacity = 2 * (meta.shape[0] - _planner.META_HEADER_U64)
    args.work_indptr, args.work_indptr_capacity = wip.ptr, wip.shape[0]
    args.work_info, args.work_info_capacity = info.ptr, info.shape[0]
    args.reduce_indptr, args.reduce_indptr_capacity = rip.ptr, rip.shape[0]
    args.reduce_final_map, args.reduce_final_map_capacity = rfm.ptr, 2 * rfm.shape[0]
    args.reduce_partial_map, args.reduce_partial_map_capacity = rpm.ptr, rpm.shape[0]
    args.status = meta.ptr
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_plan(ctypes.byref(args),
                                             _stream_of(stream, *d.values()), err.buf, err.size),
                      err, "get_mla_metadata_v1 (GPU)")
    return None


# ---- Decode -------------------------------------------------------------------------------

def mla_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices, kv_last_page_lens,
                   max_seqlen_q, page_size=1, nhead_kv=1, sm_scale=None, logit_cap=0.0,
                   num_kv_splits=None, num_kv_splits_indptr=None, work_meta_data=None,
                   work_indptr=None, work_info_set=None, reduce_indptr=None,
                   reduce_final_map=None, reduce_partial_map=None, q_scale=None, kv_scale=None,
                   intra_batch_mode=False, return_logits=False, return_lse=False, *,
                   workspace=None, lse=None, is_causal=True, is_sparse=False, cp=None,
                   o_fp32=False, arch="sm90", plan_lse=False, stream=None):
    """MLA decode in AITER's shapes on the persistent plan from get_mla_metadata_v1:
    q [total_q, H, 576] and kv_buffer [pages, page_size, 1, 576] (bf16, or fp8 e4m3fn with
    q_scale / kv_scale as Python floats), o [total_q, H, 512] bf16 written in place (fp32 with
    o_fp32=True for CP ranks). workspace: uint8 device array sized by
    get_mla_decode_workspace_info. lse: optional fp32 [total_q, H] output (else it lives in the
    workspace). is_sparse: per-token sparse batch (kv_indices are the gathered slots, no mask);
    cp: dict(world_size, interleave, rank, global_kv_len=int32 device array) for a CP
    round-robin rank. The plan must be made for max_seqlen_q (the variant is resolved from it).

    Returns o, or (o, lse) when return_lse (lse a view of the workspace when the caller gave
    none and the workspace is a torch tensor). Errors found on the host raise before anything
    is enqueued; errors found by the kernel go to the status word (decode_status)."""
    if logit_cap:
        raise ValueError("logit_cap=%r: not supported by mlaps (MLA decode has no soft cap)"
                         % (logit_cap,))
    if return_logits:
        raise ValueError("return_logits=True: not supported (the partials are in the workspace)")
    if intra_batch_mode:
        raise ValueError("intra_batch_mode=True: not supported by mlaps")
    if _util.int_arg("nhead_kv", nhead_kv) != 1:
        raise ValueError("nhead_kv=%d: MLA has one kv head" % nhead_kv)
    plan = {"work_meta_data": work_meta_data, "work_indptr": work_indptr,
            "work_info_set": work_info_set, "reduce_indptr": reduce_indptr,
            "reduce_final_map": reduce_final_map, "reduce_partial_map": reduce_partial_map,
            "workspace": workspace}
    missing = [k for k, x in plan.items() if x is None]
    if missing:
        raise ValueError("mla_decode_fwd needs the persistent plan and a workspace: %s missing "
                         "(get_mla_metadata_info_v1 + get_mla_metadata_v1, "
                         "get_mla_decode_workspace_info)" % ", ".join(missing))
    qd_ = _Dev("q", q).need(("bfloat16", "float8_e4m3fn"), 3)
    total_q, heads, dim = qd_.shape
    if dim != 576:
        raise ValueError("q has shape %s: the last dimension must be 576" % (qd_.shape,))
    page_size = _util.int_arg("page_size", page_size, 1)
    kvd = _Dev("kv_buffer", kv_buffer).need(qd_.dtype)
    if len(kvd.shape) == 4:
        kvd.need(qd_.dtype, 4, (None, page_size, 1, 576))
    else:
        kvd.need(qd_.dtype, 3, (None, page_size, 576))
    od = _Dev("o", o).need("float32" if o_fp32 else "bfloat16", 3, (total_q, heads, 512))
    qo = _Dev("qo_indptr", qo_indptr).need("int32", 1)
    kv = _Dev("kv_indptr", kv_indptr).need("int32", 1)
    kvi = _Dev("kv_indices", kv_indices).need("int32", 1)
    last = _Dev("kv_last_page_lens", kv_last_page_lens).need("int32", 1)
    b = qo.shape[0] - 1
    if b < 1 or kv.shape[0] != b + 1 or last.shape[0] != b:
        raise ValueError("qo_indptr / kv_indptr / kv_last_page_lens have %d / %d / %d entries: "
                         "need B + 1, B + 1, B with B >= 1"
                         % (qo.shape[0], kv.shape[0], last.shape[0]))
    meta = _Dev("work_meta_data", work_meta_data).need(("uint64", "int64"), 1)
    wip = _Dev("work_indptr", work_indptr).need("int32", 1)
    info = _Dev("work_info_set", work_info_set).need("int32", 2, (None, 8))
    rip = _Dev("reduce_indptr", reduce_indptr).need("int32", 1)
    rfm = _Dev("reduce_final_map", reduce_final_map).need("int32", 2, (None, 2))
    rpm = _Dev("reduce_partial_map", reduce_partial_map).need("int32", 1)
    ws = _Dev("workspace", workspace).need("uint8", 1)
    dtype = _util.FP8 if qd_.dtype == "float8_e4m3fn" else _util.BF16
    qlen = 1 if is_sparse else _util.int_arg("max_seqlen_q", max_seqlen_q, 1)
    v = _variant(heads, qlen, dtype, dtype, _util.arch_code(arch), cp is not None,
                 bool(plan_lse))
    hg = heads // v["head_fold"]
    lse_off, part_off, plse_off, rows = _workspace_layout(ws.shape[0], total_q, heads, hg)
    if rows < 1:
        raise ValueError("workspace has %d bytes: too small for %d q tokens x %d heads (size it "
                         "with get_mla_decode_workspace_info)" % (ws.shape[0], total_q, heads))
    lse_ptr = ws.ptr + lse_off
    lsed = None
    if lse is not None:
        lsed = _Dev("lse", lse).need("float32", 2, (total_q, heads))
        lse_ptr = lsed.ptr
    a = _DecodeArgs()
    a.q, a.kv_cache, a.kv_indices = qd_.ptr, kvd.ptr, kvi.ptr
    a.qo_indptr, a.kv_indptr, a.kv_last_page_lens = qo.ptr, kv.ptr, last.ptr
    a.num_requests, a.num_heads, a.num_q_tokens = b, heads, total_q
    a.num_pages, a.num_kv_indices, a.page_size = kvd.shape[0], kvi.shape[0], page_size
    a.dtype = dtype
    a.mask = 1 if (is_sparse or not is_causal) else (2 if cp is not None else 0)
    a.sm_scale = 1.0 / math.sqrt(576.0) if sm_scale is None else float(sm_scale)
    a.q_scale = _scale("q_scale", q_scale)
    a.kv_scale = _scale("kv_scale", kv_scale)
    devs = [qd_, kvd, od, qo, kv, kvi, last, meta, wip, info, rip, rfm, rpm, ws]
    if cp is not None:
        g = _Dev("cp['global_kv_len']", cp["global_kv_len"]).need("int32", 1, (b,))
        a.cp_world_size = _util.int_arg("cp['world_size']", cp["world_size"], 1)
        a.cp_interleave = _util.int_arg("cp['interleave']", cp.get("interleave", 1), 1)
        a.cp_rank = _util.int_arg("cp['rank']", cp["rank"], 0, a.cp_world_size - 1)
        a.cp_global_kv_len = g.ptr
        devs.append(g)
    else:
        a.cp_world_size, a.cp_interleave, a.cp_rank = 1, 1, 0
    a.work_indptr, a.work_info, a.work_info_capacity = wip.ptr, info.ptr, info.shape[0]
    a.num_cu = wip.shape[0] - 1
    # The plan's kv lanes as the planners make them for a batch of max_seqlen_q tokens a request
    # (the metadata is on the device). A batch whose requests have other tile counts has no
    # lanes; any value only places blocks, the output is the same.
    a.cu_lanes = _kv_lanes(heads, qlen, dtype, dtype, _util.arch_code(arch), cp is not None,
                           bool(plan_lse), a.num_cu)
    a.head_fold, a.tokens_per_tile = v["head_fold"], v["tokens_per_tile"]
    a.rows_per_tile = v["rows_per_tile"]
    a.reduce_indptr, a.reduce_final_map, a.reduce_partial_map = rip.ptr, rfm.ptr, rpm.ptr
    a.reduce_partial_map_capacity = rpm.shape[0]
    a.num_reduce_tiles_device = meta.ptr + 4 * _planner._STATUS["num_reduce_tiles"]
    a.reduce_tiles_capacity = min(rfm.shape[0], max(0, rip.shape[0] - 1))
    a.o_fp32 = int(bool(o_fp32))
    a.o, a.lse = od.ptr, lse_ptr
    a.partial_o, a.partial_lse = ws.ptr + part_off, ws.ptr + plse_off
    a.partial_rows_capacity = rows
    a.status = ws.ptr
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_decode(ctypes.byref(a), _stream_of(stream, *devs),
                                               err.buf, err.size), err, "mla_decode_fwd")
    if not return_lse:
        return o
    if lse is not None:
        return o, lse
    if ws.torch:
        view = workspace[lse_off:lse_off + total_q * heads * 4]
        return o, view.view(__import__("sys").modules["torch"].float32).view(total_q, heads)
    return o, None


# ---- Sparse gather and CP merge ------------------------------------------------------------

def sparse_gather(topk_indices, token_to_seq, token_bound, sparse_kv_indptr, packed, counts,
                  dense, status, *, block_table=None, page_size=1, kv_indptr=None,
                  kv_indices=None, stream=None):
    """The sparse KV index gather (kernels/sparse_gather/sparse_gather.h) on device arrays:
    topk_indices [T, topk] positions -> packed slots (per-token spans of sparse_kv_indptr),
    counts [T], dense [T, topk], status [T, 5]. Map: block_table [B, max_blocks] with
    page_size, or kv_indptr [B + 1] + kv_indices (page size 1)."""
    tk = _Dev("topk_indices", topk_indices).need("int32", 2)
    t, topk = tk.shape
    ts = _Dev("token_to_seq", token_to_seq).need("int32", 1, (t,))
    tb = _Dev("token_bound", token_bound).need("int32", 1, (t,))
    ip = _Dev("sparse_kv_indptr", sparse_kv_indptr).need("int32", 1, (t + 1,))
    pk = _Dev("packed", packed).need("int32", 1)
    ct = _Dev("counts", counts).need("int32", 1, (t,))
    de = _Dev("dense", dense).need("int32", 2, (t, topk))
    st = _Dev("status", status).need("int32", 2, (t, 5))
    a = _SparseGatherArgs()
    a.num_tokens, a.topk, a.packed_capacity = t, topk, pk.shape[0]
    devs = [tk, ts, tb, ip, pk, ct, de, st]
    if block_table is not None:
        bt = _Dev("block_table", block_table).need("int32", 2)
        a.map_form, a.num_requests, a.max_blocks = 0, bt.shape[0], bt.shape[1]
        a.page_size = _util.int_arg("page_size", page_size, 1)
        a.block_table = bt.ptr
        devs.append(bt)
    else:
        if kv_indptr is None or kv_indices is None:
            raise ValueError("sparse_gather needs block_table, or kv_indptr and kv_indices")
        kp = _Dev("kv_indptr", kv_indptr).need("int32", 1)
        ki = _Dev("kv_indices", kv_indices).need("int32", 1)
        a.map_form, a.num_requests, a.page_size = 1, kp.shape[0] - 1, 1
        a.num_kv_indices, a.kv_indptr, a.kv_indices = ki.shape[0], kp.ptr, ki.ptr
        devs += [kp, ki]
    a.topk_indices, a.token_to_seq, a.token_bound = tk.ptr, ts.ptr, tb.ptr
    a.sparse_kv_indptr, a.packed, a.counts, a.dense, a.status = ip.ptr, pk.ptr, ct.ptr, de.ptr, \
        st.ptr
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_sparse_gather(ctypes.byref(a), _stream_of(stream, *devs),
                                                      err.buf, err.size), err, "sparse_gather")


def cp_lse_merge(o_ranks, lse_ranks, o_out, lse_out, *, stream=None):
    """Merges W CP ranks' (O, LSE) (kernels/cp/lse_merge.h): o_ranks [W, rows, 512] fp32,
    lse_ranks [W, rows] fp32 -> o_out [rows, 512] (bf16 or fp32), lse_out [rows] fp32; rows
    are q tokens x heads (any leading shape of o_out that flattens to rows x 512)."""
    od = _Dev("o_ranks", o_ranks).need("float32")
    ld = _Dev("lse_ranks", lse_ranks).need("float32")
    w = od.shape[0]
    dim = od.shape[-1]
    rows = int(np.prod(od.shape[1:-1]))
    if int(np.prod(ld.shape)) != w * rows or ld.shape[0] != w:
        raise ValueError("lse_ranks has shape %s; must hold [W=%d, rows=%d]" % (ld.shape, w, rows))
    oo = _Dev("o_out", o_out).need(("bfloat16", "float32"))
    if int(np.prod(oo.shape)) != rows * dim:
        raise ValueError("o_out has shape %s; must hold rows x dim = %d x %d" % (oo.shape, rows,
                                                                               dim))
    lo = _Dev("lse_out", lse_out).need("float32")
    if int(np.prod(lo.shape)) != rows:
        raise ValueError("lse_out has shape %s; must hold %d rows" % (lo.shape, rows))
    a = _LseMergeArgs(od.ptr, ld.ptr, w, rows, dim, oo.ptr, lo.ptr,
                      int(oo.dtype == "bfloat16"))
    err = _native.Error()
    _native.raise_for(_lib().mlaps_cuda_lse_merge(ctypes.byref(a),
                                                  _stream_of(stream, od, ld, oo, lo), err.buf,
                                                  err.size), err, "cp_lse_merge")
