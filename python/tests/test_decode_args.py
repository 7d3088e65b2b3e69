"""The GPU layer's argument checks run on the host, before anything is enqueued: these run on
any CPU with torch-like stand-ins (the launch itself needs libmlaps_cuda.so and a GPU)."""
import numpy as np
import pytest

import mlaps


class FakeCuda(object):
    """Duck-types a torch CUDA tensor (data_ptr, dtype, device, shape, is_contiguous) over
    host memory: enough for the checks, never dereferenced by them."""

    def __init__(self, a, dtype=None, device="cuda"):
        self.a = a
        self.shape = a.shape
        self.dtype = "torch." + (dtype or str(a.dtype))
        self.device = type("Device", (), {"type": device, "index": 0})()

    def data_ptr(self):
        return self.a.ctypes.data

    def is_contiguous(self):
        return self.a.flags.c_contiguous

    def stride(self):
        return self.a.strides


B, SQ, H, PAGE = 4, 2, 16, 64


@pytest.fixture()
def call():
    info = mlaps.get_mla_metadata_info_v1(B, SQ, H, "bf16", "bf16", False)
    meta = [FakeCuda(np.zeros(s, d)) for s, d in info]
    (ws_shape, ws_dt), = mlaps.get_mla_decode_workspace_info(B, SQ, H, "bf16", "bf16", False)
    arrays = dict(
        q=FakeCuda(np.zeros((B * SQ, H, 576), np.uint16), "bfloat16"),
        kv_buffer=FakeCuda(np.zeros((12, PAGE, 1, 576), np.uint16), "bfloat16"),
        o=FakeCuda(np.zeros((B * SQ, H, 512), np.uint16), "bfloat16"),
        qo_indptr=FakeCuda(np.arange(0, (B + 1) * SQ, SQ, dtype=np.int32)),
        kv_indptr=FakeCuda(np.arange(B + 1, dtype=np.int32) * 3),
        kv_indices=FakeCuda(np.arange(12, dtype=np.int32)),
        kv_last_page_lens=FakeCuda(np.full(B, 10, np.int32)))
    plan = dict(work_meta_data=meta[0], work_indptr=meta[1], work_info_set=meta[2],
                reduce_indptr=meta[3], reduce_final_map=meta[4], reduce_partial_map=meta[5],
                workspace=FakeCuda(np.zeros(ws_shape, ws_dt)))

    def run(**over):
        a = dict(arrays)
        p = dict(plan)
        for k, v in over.items():
            (a if k in a else p)[k] = v
        return mlaps.mla_decode_fwd(a["q"], a["kv_buffer"], a["o"], a["qo_indptr"],
                                    a["kv_indptr"], a["kv_indices"], a["kv_last_page_lens"], SQ,
                                    page_size=PAGE, **p)
    return run


def test_wrong_q_dtype(call):
    with pytest.raises(TypeError, match="q has dtype float16, must be bfloat16 or float8_e4m3fn"):
        call(q=FakeCuda(np.zeros((B * SQ, H, 576), np.float16)))


def test_kv_dtype_must_match_q(call):
    with pytest.raises(TypeError, match="kv_buffer has dtype float8_e4m3fn"):
        call(kv_buffer=FakeCuda(np.zeros((12, PAGE, 1, 576), np.uint8), "float8_e4m3fn"))


def test_shapes(call):
    with pytest.raises(ValueError, match="o has shape"):
        call(o=FakeCuda(np.zeros((B * SQ, H, 576), np.uint16), "bfloat16"))
    with pytest.raises(ValueError, match="kv_buffer has shape"):
        call(kv_buffer=FakeCuda(np.zeros((12, 32, 1, 576), np.uint16), "bfloat16"))


def test_host_tensor_refused(call):
    with pytest.raises(TypeError, match="kv_indptr is on cpu"):
        call(kv_indptr=FakeCuda(np.arange(B + 1, dtype=np.int32), device="cpu"))


def test_non_contiguous(call):
    o = FakeCuda(np.zeros((B * SQ, 512, H), np.uint16).transpose(0, 2, 1), "bfloat16")
    with pytest.raises(ValueError, match="o is not contiguous"):
        call(o=o)


def test_missing_plan_and_workspace(call):
    with pytest.raises(ValueError, match="workspace missing"):
        call(workspace=None)


def test_device_scale_refused(call):
    with pytest.raises(TypeError, match="q_scale is a device tensor"):
        call(q_scale=FakeCuda(np.ones(1, np.float32)))


def test_small_workspace(call):
    with pytest.raises(ValueError, match="workspace has 64 bytes"):
        call(workspace=FakeCuda(np.zeros(64, np.uint8)))


def test_reaches_the_launch(call):
    """Valid arguments get as far as the GPU library (absent or no GPU here)."""
    with pytest.raises(RuntimeError):
        call()


def test_gpu_plan_needs_max_seqlen(call):
    info = mlaps.get_mla_metadata_info_v1(B, SQ, H, "bf16", "bf16", False)
    meta = [FakeCuda(np.zeros(s, d)) for s, d in info]
    qo = FakeCuda(np.arange(0, (B + 1) * SQ, SQ, dtype=np.int32))
    kv = FakeCuda(np.arange(B + 1, dtype=np.int32))
    last = FakeCuda(np.ones(B, np.int32))
    with pytest.raises(ValueError, match="max_seqlen_qo=-1: device arrays plan on the GPU"):
        mlaps.get_mla_metadata_v1(qo, kv, last, H, 1, True, meta[0], meta[2], meta[1], meta[3],
                                  meta[4], meta[5], page_size=PAGE, dtype_q="bf16",
                                  dtype_kv="bf16")
