"""Wrong input fails loudly: ValueError / TypeError naming the argument and value (the C++
messages), no write past a buffer, no partial plan."""
import numpy as np
import pytest

import mlaps
from _helpers import alloc, batch_args, plan, uniform_batch, varlen_batch


def fresh(b=4, q=2, h=16, dt="fp8"):
    return alloc(mlaps.get_mla_metadata_info_v1(b, q, h, dt, dt, False))


def call(qo, kv, last, bufs, h=16, dt="fp8", page=16, **kw):
    kw.setdefault("dtype_q", dt)
    kw.setdefault("dtype_kv", dt)
    return mlaps.get_mla_metadata_v1(*batch_args(qo, kv, last, h, bufs), page_size=page, **kw)


def snapshot(bufs):
    return [b.copy() for b in bufs]


def assert_untouched(bufs, before):
    for b, s in zip(bufs, before):
        np.testing.assert_array_equal(b, s)


def test_unsupported_heads_fail_at_info():
    with pytest.raises(ValueError, match="12"):
        mlaps.get_mla_metadata_info_v1(8, 1, 12, "bf16", "bf16", False)


def test_unsupported_shape_lists_nearest_supported():
    with pytest.raises(ValueError, match=r"unsupported: no kernel for gfx942 fp8/fp8 H=48 "
                                         r"qlen=8.*supported nearby: \(64,8\)"):
        mlaps.get_mla_metadata_info_v1(8, 8, 48, "fp8", "fp8", False, arch="gfx942")


def test_missing_dtype_is_a_type_error():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    with pytest.raises(TypeError, match="dtype_q is required"):
        mlaps.get_mla_metadata_v1(*batch_args(qo, kv, last, 16, bufs), page_size=16)
    with pytest.raises(TypeError, match="q_dtype"):
        mlaps.get_mla_metadata_info_v1(4, 2, 16, None, "fp8", False)
    with pytest.raises(TypeError, match="float16"):
        mlaps.get_mla_metadata_info_v1(4, 2, 16, "float16", "fp8", False)


def test_bad_batch_message_names_field_and_index():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    kv = kv.copy()
    kv[2] = kv[1] - 1  # decreasing
    bufs = fresh()
    before = snapshot(bufs)
    with pytest.raises(ValueError, match=r"kv_indptr\[2\]"):
        call(qo, kv, last, bufs)
    assert_untouched(bufs, before)


def test_last_page_len_out_of_range():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    last = last.copy()
    last[3] = 17
    bufs = fresh()
    with pytest.raises(ValueError, match=r"kv_last_page_lens\[3\]"):
        call(qo, kv, last, bufs)


def test_wrong_array_dtype_is_type_error_naming_argument():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    with pytest.raises(TypeError, match="seqlens_kv_indptr has dtype int64"):
        call(qo, kv.astype(np.int64), last, bufs)
    bufs[1] = bufs[1].astype(np.int64)
    with pytest.raises(TypeError, match="work_indptr has dtype int64"):
        call(qo, kv, last, bufs)


def test_buffer_too_small_names_buffer_and_leaves_all_unmodified():
    qo, kv, last = uniform_batch(4, 2, 5000, 16)
    bufs = fresh()
    bufs[2] = np.full((3, 8), 7, np.int32)  # work_info_set far too small
    before = snapshot(bufs)
    with pytest.raises(ValueError, match="work_info"):
        call(qo, kv, last, bufs)
    assert_untouched(bufs, before)


def test_batch_beyond_info_maxima_is_refused_not_overrun():
    bufs = fresh(b=4, q=2)
    qo, kv, last = uniform_batch(64, 2, 5000, 16)  # 16x the batch the buffers were sized for
    before = snapshot(bufs)
    with pytest.raises(ValueError):
        call(qo, kv, last, bufs)
    assert_untouched(bufs, before)


def test_aiter_sized_work_metadata_is_refused():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    bufs[0] = np.zeros(2, np.uint64)
    with pytest.raises(ValueError, match="work_metadata_ptrs has 2 entries"):
        call(qo, kv, last, bufs)


def test_num_heads_k_must_be_one():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    with pytest.raises(ValueError, match="num_heads_k=2"):
        mlaps.get_mla_metadata_v1(qo, kv, last, 16, 2, True, bufs[0], bufs[2], bufs[1], bufs[3],
                                  bufs[4], bufs[5], page_size=16, dtype_q="fp8", dtype_kv="fp8")


def test_read_only_and_non_contiguous_outputs():
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    bufs[1].setflags(write=False)
    with pytest.raises(ValueError, match="work_indptr is read-only"):
        call(qo, kv, last, bufs)
    bufs = fresh()
    bufs[5] = np.zeros(2 * bufs[5].size, np.int32)[::2]
    with pytest.raises(ValueError, match="reduce_partial_map is not contiguous"):
        call(qo, kv, last, bufs)


def test_max_and_uni_seqlen_checked():
    qo, kv, last = varlen_batch([100, 100], 3, 16)
    bufs = fresh(q=4)
    with pytest.raises(ValueError, match="request 0 has 3 q tokens > max_seqlen_qo = 2"):
        call(qo, kv, last, bufs, max_seqlen_qo=2)
    with pytest.raises(ValueError, match="request 0 has 3 q tokens != uni_seqlen_qo = 2"):
        call(qo, kv, last, bufs, uni_seqlen_qo=2)


def test_causal_kv_shorter_than_qlen():
    qo, kv, last = varlen_batch([100, 1], 2, 16)
    with pytest.raises(ValueError, match=r"kv_len\[1\] = 1: is shorter than qlen = 2"):
        call(qo, kv, last, fresh())


def test_mixed_host_device_arrays_refused():
    class FakeDevice(object):
        __cuda_array_interface__ = {"shape": (5,), "typestr": "<i4", "data": (0, False),
                                    "version": 3}
    qo, kv, last = uniform_batch(4, 2, 100, 16)
    bufs = fresh()
    with pytest.raises(TypeError, match="mixed host and device"):
        call(FakeDevice(), kv, last, bufs)


def test_intra_batch_mode_refused():
    with pytest.raises(ValueError, match="intra_batch_mode"):
        mlaps.get_mla_metadata_info_v1(4, 2, 16, "fp8", "fp8", False, intra_batch_mode=True)


def test_bad_arch():
    with pytest.raises(ValueError, match="arch='mi300'"):
        mlaps.get_mla_metadata_info_v1(4, 2, 16, "fp8", "fp8", False, arch="mi300")
