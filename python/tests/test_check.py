"""check_plan: sound plans give [], each planted defect is reported by class and item."""
import numpy as np
import pytest

import mlaps
from _helpers import batch_args, plan, varlen_batch

LENS = [3000, 40, 1000, 777, 5]


@pytest.fixture()
def planned():
    qo, kv, last = varlen_batch(LENS, 2, 16)
    bufs = plan(qo, kv, last, 16, "bf16", 16, num_cu=8)
    return qo, kv, last, bufs


def check(qo, kv, last, bufs, **kw):
    return mlaps.check_plan(*batch_args(qo, kv, last, 16, bufs), page_size=16, **kw)


def defects(v):
    return {x.defect for x in v}


def test_sound(planned):
    assert check(*planned) == []


def test_kv_offset(planned):
    qo, kv, last, bufs = planned
    bufs[2][0, 6] += 1
    v = check(qo, kv, last, bufs)
    assert "kv_offset" in defects(v)
    assert any(x.work == 0 and x.field == "kv_offset" for x in v)
    assert "kv_offset" in str(v[0]) or str(v[0])


def test_pad(planned):
    qo, kv, last, bufs = planned
    bufs[2][1, 7] = 5
    assert "pad" in defects(check(qo, kv, last, bufs))


def test_batch_idx(planned):
    qo, kv, last, bufs = planned
    bufs[2][0, 0] = 99
    assert "batch_idx" in defects(check(qo, kv, last, bufs))


def test_uncovered_when_a_piece_shrinks(planned):
    qo, kv, last, bufs = planned
    m = mlaps.read_metadata(bufs[0])
    w = bufs[2][:m["num_works"]]
    i = int(np.argmax(w[:, 5] - w[:, 4]))  # the longest piece
    w[i, 5] -= 1
    got = defects(check(qo, kv, last, bufs))
    assert "uncovered" in got or "kv_offset" in got


def test_covered_twice(planned):
    qo, kv, last, bufs = planned
    m = mlaps.read_metadata(bufs[0])
    w = bufs[2][:m["num_works"]]
    i = int(np.argmax(w[:, 5] - w[:, 4]))
    w[i, 4] -= 1 if w[i, 4] > kv[w[i, 0]] else 0
    w[i, 5] += 0
    # Duplicate an item in place of another request's: overlap for one, gap for the other.
    j = (i + 1) % m["num_works"]
    w[j] = w[i]
    got = defects(check(qo, kv, last, bufs))
    assert "covered_twice" in got or "tile_overlap" in got or "partial_row" in got


def test_work_indptr(planned):
    qo, kv, last, bufs = planned
    bufs[1][2] = bufs[1][3] + 1
    assert "work_indptr" in defects(check(qo, kv, last, bufs))


def test_reduce_map(planned):
    qo, kv, last, bufs = planned
    m = mlaps.read_metadata(bufs[0])
    assert m["num_reduce_tiles"] > 0  # 8 CUs: some tiles split
    bufs[5][0] = 10000
    got = defects(check(qo, kv, last, bufs))
    assert got & {"reduce_map", "partial_row"}


def test_aiter_layout_without_header(planned):
    """An AITER plan: work_metadata_ptrs is two pointers (or None); used sizes from the arrays."""
    qo, kv, last, bufs = planned
    for meta in (None, np.zeros(2, np.uint64)):
        b = list(bufs)
        b[0] = meta
        assert mlaps.check_plan(qo, kv, last, 16, 1, True, meta, b[2], b[1], b[3], b[4], b[5],
                                page_size=16) == []


def test_bad_batch_is_value_error(planned):
    qo, kv, last, bufs = planned
    qo = qo.copy()
    qo[0] = 1
    with pytest.raises(ValueError, match=r"qo_indptr\[0\]"):
        check(qo, kv, last, bufs)


def test_max_violations(planned):
    qo, kv, last, bufs = planned
    m = mlaps.read_metadata(bufs[0])
    bufs[2][:m["num_works"], 7] = 1
    assert len(check(qo, kv, last, bufs, max_violations=3)) == 3
