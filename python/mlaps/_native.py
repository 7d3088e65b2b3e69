"""ctypes bindings of the mlaps C ABI (python/native/mlaps_c.h).

The structures below mirror the header field by field; mlaps_abi_version() guards against a
library of another layout. Nothing here allocates beyond small structs and message buffers.
"""

import ctypes
import os
import threading

ABI_VERSION = 5

OK = 0
INVALID_ARGUMENT = 1
NOT_FOUND = 2
RESOURCE_EXHAUSTED = 3
INTERNAL = 4
CUDA_ERROR = 5

_i32 = ctypes.c_int32
_i64 = ctypes.c_int64
_pi32 = ctypes.c_void_p  # int32 arrays: passed as addresses (fast)


class Batch(ctypes.Structure):
    _fields_ = [
        ("arch", _i32), ("q_dtype", _i32), ("kv_dtype", _i32), ("num_heads", _i32),
        ("page_size", _i32), ("causal", _i32), ("cp_round_robin", _i32), ("sparse_topk", _i32),
        ("qo_indptr", _pi32), ("qo_indptr_len", _i64),
        ("kv_indptr", _pi32), ("kv_indptr_len", _i64),
        ("kv_last_page_lens", _pi32), ("kv_last_page_lens_len", _i64),
    ]


class PlanOptions(ctypes.Structure):
    _fields_ = [("num_cu", _i32), ("kv_granularity", _i32), ("fixed_overhead", _i32),
                ("max_split_per_batch", _i32), ("policy", _i32), ("lse", _i32),
                ("max_seqlen_qo", _i32), ("uni_seqlen_qo", _i32)]


class PlanBuffers(ctypes.Structure):
    _fields_ = [
        ("qo_indptr", _pi32), ("qo_indptr_len", _i64),
        ("work_indptr", _pi32), ("work_indptr_len", _i64),
        ("work_info", _pi32), ("work_info_rows", _i64),
        ("reduce_indptr", _pi32), ("reduce_indptr_len", _i64),
        ("reduce_final_map", _pi32), ("reduce_final_map_len", _i64),
        ("reduce_partial_map", _pi32), ("reduce_partial_map_len", _i64),
    ]


class PlanSizes(ctypes.Structure):
    _fields_ = [("variant", ctypes.c_char * 96)] + [
        (n, _i32) for n in ("num_cu", "head_fold", "tokens_per_tile", "rows_per_tile",
                            "heads_per_group", "blocks_per_cu", "kv_granularity",
                            "fixed_overhead", "num_virtual_requests", "num_works",
                            "num_reduce_tiles", "num_reduce_pieces", "num_partial_rows",
                            "max_qlen", "kv_lanes")]


class CapacityQuery(ctypes.Structure):
    _fields_ = [(n, _i32) for n in ("arch", "q_dtype", "kv_dtype", "num_heads", "max_batch",
                                    "max_qlen", "num_cu", "cp_round_robin", "lse")]


class Capacity(ctypes.Structure):
    _fields_ = [(n, _i64) for n in ("qo_indptr", "work_indptr", "work_info", "reduce_indptr",
                                    "reduce_final_map", "reduce_partial_map", "partial_rows",
                                    "partial_o_bytes", "partial_lse_bytes")]


class VariantQuery(ctypes.Structure):
    _fields_ = [(n, _i32) for n in ("arch", "q_dtype", "kv_dtype", "num_heads", "qlen",
                                    "cp_round_robin", "lse")]


class Variant(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 96)] + [
        (n, _i32) for n in ("rows_per_tile", "q_seq_len", "head_fold", "heads_per_group",
                            "tokens_per_tile", "blocks_per_cu", "default_num_cu",
                            "default_kv_lanes")]


class CheckOptions(ctypes.Structure):
    _fields_ = [("head_fold", _i32), ("num_cu", _i32), ("partial_rows_capacity", _i64),
                ("max_violations", _i32)]


class SimInputs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p), ("q_len", _i64),
        ("kv_cache", ctypes.c_void_p), ("kv_cache_len", _i64),
        ("kv_indices", _pi32), ("kv_indices_len", _i64),
        ("sm_scale", ctypes.c_double), ("q_scale", ctypes.c_double),
        ("kv_scale", ctypes.c_double), ("seed", ctypes.c_uint64),
        ("head_fold", _i32), ("kv_block", _i32), ("final_o_bf16", _i32),
        ("partial_rows_capacity", _i64),
    ]


class SimResult(ctypes.Structure):
    _fields_ = [
        ("o", ctypes.c_void_p), ("o_len", _i64),
        ("lse", ctypes.c_void_p), ("lse_len", _i64),
        ("ref_o", ctypes.c_void_p), ("ref_o_len", _i64),
        ("ref_lse", ctypes.c_void_p), ("ref_lse_len", _i64),
        ("cos_diff", ctypes.c_double), ("max_abs_err", ctypes.c_double),
        ("fail_fraction", ctypes.c_double), ("lse_max_abs_err", ctypes.c_double),
        ("num_elements", _i64), ("num_failing", _i64), ("o_mask_mismatches", _i64),
        ("lse_mask_mismatches", _i64), ("worst_index", _i64), ("passed", _i32),
        ("final_items", _i64), ("partial_items", _i64), ("reduce_tiles", _i64),
        ("unwritten_tokens", _i64), ("rewritten_tokens", _i64),
        ("summary", ctypes.c_char * 640),
    ]


def _candidate_dirs(name):
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("MLAPS_LIB_DIR")
    dirs = [env] if env else []
    dirs += [os.path.join(here, "_lib"),  # the wheel / a staged package
             os.path.dirname(here)]       # Bazel runfiles (python/libmlaps_c.so), bazel-bin
    repo = os.path.dirname(os.path.dirname(here))
    dirs.append(os.path.join(repo, "bazel-bin", "python"))
    return [os.path.join(d, name) for d in dirs]


_lock = threading.Lock()
_libs = {}
_preloaded = set()


def _preload_bundled(folder):
    """A wheel's _lib/ also holds the shared libraries libmlaps_*.so need that a plain Linux
    lacks (Debian's abseil, protobuf). Load them first, globally, in an order that works (a
    library whose own dependencies are not loaded yet is retried after the others)."""
    if folder in _preloaded:
        return
    _preloaded.add(folder)
    pending = sorted(f for f in os.listdir(folder)
                     if ".so" in f and not f.startswith("libmlaps_"))
    while pending:
        failed = []
        for f in pending:
            try:
                ctypes.CDLL(os.path.join(folder, f), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                failed.append(f)
        if len(failed) == len(pending):
            return  # the system may have them; the main library's load error will say
        pending = failed


def _load(name, required):
    with _lock:
        if name in _libs:
            return _libs[name]
        tried = []
        lib = None
        for path in _candidate_dirs(name):
            if os.path.exists(path):
                _preload_bundled(os.path.dirname(path))
                try:
                    lib = ctypes.CDLL(path)
                    break
                except OSError as e:  # a library that is there but does not load: say why
                    tried.append("%s (%s)" % (path, e))
            else:
                tried.append(path)
        if lib is None:
            if required:
                raise ImportError("mlaps: cannot load %s; tried: %s (set MLAPS_LIB_DIR)"
                                  % (name, "; ".join(tried)))
            _libs[name] = None
            return None
        _libs[name] = lib
        return lib


def _declare(lib, name, restype, argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


def cpu():
    """The CPU library (libmlaps_c.so), loaded once, with its functions typed."""
    lib = _load("libmlaps_c.so", required=True)
    if getattr(lib, "_mlaps_typed", False):
        return lib
    P = ctypes.POINTER
    cp = ctypes.c_char_p
    _declare(lib, "mlaps_abi_version", _i32, [])
    _declare(lib, "mlaps_struct_size", _i32, [cp, P(_i64), cp, _i64])
    _declare(lib, "mlaps_validate_batch", _i32, [P(Batch), cp, _i64])
    _declare(lib, "mlaps_resolve_variant", _i32, [P(VariantQuery), P(Variant), cp, _i64])
    _declare(lib, "mlaps_capacity_of", _i32, [P(CapacityQuery), P(Capacity), cp, _i64])
    _declare(lib, "mlaps_default_fixed_overhead", _i32,
             [P(VariantQuery), _i32, _i32, _i32, P(_i32), cp, _i64])
    _declare(lib, "mlaps_kv_lanes", _i32, [P(VariantQuery), _i32, _i32, P(_i32), cp, _i64])
    _declare(lib, "mlaps_plan", _i32,
             [P(Batch), P(PlanOptions), P(PlanBuffers), P(PlanSizes), cp, _i64])
    _declare(lib, "mlaps_check_plan", _i32,
             [P(Batch), P(PlanBuffers), P(CheckOptions), P(_i32), cp, _i64, P(_i64), cp, _i64])
    _declare(lib, "mlaps_simulate", _i32,
             [P(Batch), P(PlanBuffers), P(SimInputs), P(SimResult), cp, _i64])
    version = lib.mlaps_abi_version()
    if version != ABI_VERSION:
        raise ImportError("mlaps: %s has C ABI version %d, this package needs %d"
                          % (lib._name, version, ABI_VERSION))
    lib._mlaps_typed = True
    return lib


def cuda(required=False):
    """The GPU library (libmlaps_cuda.so, --config=cuda builds only), or None when absent."""
    lib = _load("libmlaps_cuda.so", required=required)
    return lib


class Error(object):
    """A message buffer for one call."""

    def __init__(self, size=2048):
        self.buf = ctypes.create_string_buffer(size)
        self.size = size

    def text(self):
        return self.buf.value.decode("utf-8", "replace")


def raise_for(code, err, what):
    """Raises the Python exception for a C ABI error code (ValueError for input errors)."""
    if code == OK:
        return
    msg = "%s: %s" % (what, err.text())
    if code in (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED):
        raise ValueError(msg)
    raise RuntimeError(msg)
