"""AITER-shaped planner: info shapes, parity with the C++ planner's goldens, in-place
contract."""
import os
import re

import numpy as np
import pytest

import mlaps
from _helpers import (alloc, batch_args, fnv_digest, plan, repo_root, uniform_batch, used_plan,
                      varlen_batch)


def golden_lines(family):
    path = os.path.join(repo_root(), "golden", family + ".txt")
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            out[parts[0]] = parts[1:]
    return out


def test_info_shapes_and_dtypes():
    info = mlaps.get_mla_metadata_info_v1(128, 2, 16, "fp8", "fp8", False, arch="sm90")
    assert len(info) == 6
    names = [s for s, _ in info]
    assert all(isinstance(s, tuple) for s in names)
    assert info[2][0][1] == 8 and info[4][0][1] == 2
    assert info[0][1] == np.uint64 and all(d == np.int32 for _, d in info[1:])
    # The grid is the planner's default for the variant at max_seqlen_qo (sm90: 132 SMs x 1
    # block for 32-row tiles).
    assert info[1][0] == (133,)
    # mlaps' capacity: reduce_partial_map bounded by 2 x num_cu, not tiles x splits, so a
    # batch of 512 does not size gigabytes of partials.
    for b, q, h in ((128, 2, 16), (512, 4, 128), (512, 1, 16)):
        fixed = mlaps.get_mla_metadata_info_v1(b, q, h, "bf16", "bf16", False, num_cu=132)
        assert fixed[1][0] == (133,)
        assert fixed[5][0][0] <= 2 * 132
        assert fixed[3][0][0] <= 132 + 1


def test_info_sparse_sizes_per_token():
    dense = mlaps.get_mla_metadata_info_v1(64, 1, 64, "fp8", "fp8", False)
    sparse = mlaps.get_mla_metadata_info_v1(32, 2, 64, "fp8", "fp8", True)
    assert sparse[3][0][0] >= 1 and sparse[2][0][0] >= dense[2][0][0] - 1


# Uniform dense goldens (golden/dense.txt): the same batch planned from Python must give the
# same variant, counts and FNV digest as the C++ planner that wrote the goldens.
DENSE_CASES = [(arch, dt, h, q, b, ctx)
               for arch in ("gfx950", "sm90") for dt in ("fp8", "bf16")
               for h, q in ((16, 3), (16, 4), (16, 6), (32, 2), (32, 3), (32, 4), (64, 1),
                            (64, 2), (64, 3), (128, 1), (128, 2))
               for b in (32, 64, 128) for ctx in (1024, 5000, 8192, 16384)]


@pytest.fixture(scope="module")
def dense_golden():
    return golden_lines("dense")


@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: "%s/%s/h%dq%d/b%d/ctx%d" % c)
def test_dense_golden_parity(case, dense_golden):
    arch, dt, h, q, b, ctx = case
    name = "%s/%s/h%dq%d/b%d/ctx%d" % case
    want = dense_golden[name]
    if want[0] == "error":
        with pytest.raises(ValueError):
            qo, kv, last = uniform_batch(b, q, ctx, 64)
            plan(qo, kv, last, h, dt, 64, arch=arch)
        return
    fields = dict(x.split("=") for x in want[1:-1])
    qo, kv, last = uniform_batch(b, q, ctx, 64)
    bufs = plan(qo, kv, last, h, dt, 64, arch=arch, num_cu=int(fields["cus"]))
    p = used_plan(bufs)
    m = p["meta"]
    assert m["num_works"] == int(fields["works"])
    assert m["num_reduce_tiles"] == int(fields["split_tiles"])
    assert m["num_reduce_pieces"] == int(fields["pieces"])
    assert m["num_partial_rows"] == int(fields["rows"])
    assert "%016x" % fnv_digest(p) == want[-1]


def std_uniform_int(seed, lo, hi, n):
    """std::uniform_int_distribution<int>(lo, hi) over std::mt19937(seed) as libstdc++ draws
    it (numpy's RandomState seeds MT19937 as std::mt19937 does for an int seed)."""
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
    return out


VARLEN_CASES = [(arch, dt, h, q, b)
                for arch in ("gfx950", "sm90") for dt in ("fp8", "bf16")
                for h, q in ((16, 3), (16, 4), (16, 6), (32, 2), (32, 3), (32, 4), (64, 1),
                             (64, 2), (64, 3), (128, 1), (128, 2))
                for b in (32, 64, 128)]


@pytest.mark.parametrize("case", VARLEN_CASES, ids=lambda c: "%s/%s/h%dq%d/b%d" % c)
def test_varlen_golden_parity(case, dense_golden):
    """The varlen dense goldens: golden_cases.cc's VarlenLengths(batch, 8192, qlen, seed)."""
    arch, dt, h, q, b = case
    seed = h * 1000 + q * 10 + b
    name = "%s/%s/h%dq%d/b%d/varlen%d" % (arch, dt, h, q, b, seed)
    want = dense_golden[name]
    lens = std_uniform_int(seed, max(q, 8192 // 8), 8192 * 2, b)
    qo, kv, last = varlen_batch(lens, q, 64)
    fields = dict(x.split("=") for x in want[1:-1])
    bufs = plan(qo, kv, last, h, dt, 64, arch=arch, num_cu=int(fields["cus"]))
    p = used_plan(bufs)
    assert p["meta"]["num_works"] == int(fields["works"])
    assert "%016x" % fnv_digest(p) == want[-1]


SPARSE_CASES = [(arch, h, q, b) for arch in ("gfx950", "sm90") for h in (16, 64, 128)
                for q in (2, 4) for b in (32, 128)]


@pytest.mark.parametrize("case", SPARSE_CASES, ids=lambda c: "%s/h%dq%d/b%d" % c)
def test_sparse_golden_parity(case):
    """golden/sparse.txt: MakeSparseLayout of VarlenLengths(batch, 5000, qlen, seed), 4
    padded requests, topk 2048: per-token rows keeping min(max(L - q + j + 1, 0), topk)."""
    arch, h, q, b = case
    seed = h * 100 + q * 10 + b
    want = golden_lines("sparse")["%s/fp8/h%dq%d/b%d+4pad/topk2048/seed%d" % (arch, h, q, b,
                                                                             seed)]
    lens = std_uniform_int(seed, max(q, 5000 // 8), 5000 * 2, b)
    kept = [min(max(L - q + j + 1, 0), 2048) for L in lens for j in range(q)] + [0] * (4 * q)
    qo = np.arange(len(kept) + 1, dtype=np.int32)
    kv = np.concatenate([[0], np.cumsum(kept)]).astype(np.int32)
    last = np.ones(len(kept), np.int32)
    fields = dict(x.split("=") for x in want[1:-1])
    info = mlaps.get_mla_metadata_info_v1(b + 4, q, h, "fp8", "fp8", True, arch=arch)
    bufs = alloc(info)
    bufs[1] = np.zeros(int(fields["cus"]) + 1, np.int32)
    args = batch_args(qo, kv, last, h, bufs, causal=False)
    mlaps.get_mla_metadata_v1(*args, page_size=1, kv_granularity=0, topk=2048, dtype_q="fp8",
                              dtype_kv="fp8", arch=arch)
    p = used_plan(bufs)
    assert p["meta"]["num_works"] == int(fields["works"])
    assert "%016x" % fnv_digest(p) == want[-1]
    assert mlaps.check_plan(*args, page_size=1, topk=2048) == []


def parse_readable(name):
    path = os.path.join(repo_root(), "golden", "readable", name + ".textproto")
    scalars, works, cur = {}, [], None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line == "work {":
                cur = dict.fromkeys(("batch_idx", "partial_qo_loc", "qo_start", "qo_end",
                                     "kv_start", "kv_end", "kv_offset", "pad"), 0)
                continue
            if line == "}":
                works.append([cur[k] for k in ("batch_idx", "partial_qo_loc", "qo_start",
                                               "qo_end", "kv_start", "kv_end", "kv_offset",
                                               "pad")])
                cur = None
                continue
            k, v = [x.strip() for x in line.split(":", 1)]
            if cur is not None:
                cur[k] = int(v)
            elif v.startswith('"'):
                scalars[k] = v.strip('"')
            else:
                scalars.setdefault(k, []).append(int(v))
    return scalars, np.array(works, np.int32).reshape(-1, 8)


READABLE = [
    ("sm90_bf16_h16q1_b3_varlen_cu4", "sm90", "bf16", 16, [300, 40, 1000], 1, 16, 4),
    ("gfx950_fp8_h32q3_b2_cu3", "gfx950", "fp8", 32, [700, 700], 3, 64, 3),
    ("sm90_fp8_h128q2_b2_fold_cu5", "sm90", "fp8", 128, [513, 90], 2, 1, 5),
]


@pytest.mark.parametrize("case", READABLE, ids=lambda c: c[0])
def test_readable_golden_full_plan(case):
    name, arch, dt, h, lens, q, page, cus = case
    g, gw = parse_readable(name)
    qo, kv, last = varlen_batch(lens, q, page)
    bufs = plan(qo, kv, last, h, dt, page, arch=arch, num_cu=cus)
    p = used_plan(bufs)
    m = p["meta"]
    assert m["head_fold"] == g["head_fold"][0]
    assert m["tokens_per_tile"] == g["tokens_per_tile"][0]
    assert m["num_cu"] == g["num_cu"][0]
    np.testing.assert_array_equal(p["work_indptr"], g["work_indptr"])
    np.testing.assert_array_equal(p["work_info"], gw)
    np.testing.assert_array_equal(p["reduce_indptr"], g.get("reduce_indptr", [0])[:])
    np.testing.assert_array_equal(p["reduce_final_map"], g.get("reduce_final_map", []))
    np.testing.assert_array_equal(p["reduce_partial_map"], g.get("reduce_partial_map", []))
    np.testing.assert_array_equal(p["qo_indptr"], g["qo_indptr"])
    assert m["num_partial_rows"] == g["num_partial_rows"][0]


def test_plan_is_sound_and_tails_padded():
    qo, kv, last = varlen_batch([5000, 17, 900, 12000], 2, 64)
    bufs = plan(qo, kv, last, 16, "fp8", 64)
    assert mlaps.check_plan(*batch_args(qo, kv, last, 16, bufs), page_size=64) == []
    m = mlaps.read_metadata(bufs[0])
    # Grid = work_indptr.shape[0] - 1 (AITER's cu_num + 1); nothing past the plan.
    assert m["num_cu"] == bufs[1].size - 1
    assert bufs[3][m["num_reduce_tiles"]:].tolist() == [bufs[3][m["num_reduce_tiles"]]] * (
        bufs[3].size - m["num_reduce_tiles"])


def test_replan_smaller_batch_into_same_buffers():
    """Buffers sized once by the info call (graph capture) serve every batch within maxima."""
    info = mlaps.get_mla_metadata_info_v1(64, 4, 64, "bf16", "bf16", False)
    bufs = alloc(info)
    rng = np.random.default_rng(3)
    for _ in range(20):
        b = int(rng.integers(1, 65))
        q = int(rng.integers(1, 5))
        lens = rng.integers(q, 9000, b)
        qo, kv, last = varlen_batch(lens, q, 16)
        mlaps.get_mla_metadata_v1(*batch_args(qo, kv, last, 64, bufs), page_size=16,
                                  max_seqlen_qo=4, dtype_q="bf16", dtype_kv="bf16")
        assert mlaps.check_plan(*batch_args(qo, kv, last, 64, bufs), page_size=16) == []


def test_torch_style_dtypes_accepted():
    class FakeTorchDtype(object):  # what str(torch.float8_e4m3fn) looks like
        def __str__(self):
            return "torch.float8_e4m3fn"
    info = mlaps.get_mla_metadata_info_v1(8, 1, 16, FakeTorchDtype(), FakeTorchDtype(), False)
    assert info[1][1] == np.int32  # no torch imported: numpy dtypes


def test_resolve_variant():
    v = mlaps.resolve_variant(128, 2, "fp8", "fp8", arch="sm90")
    assert v["head_fold"] >= 1 and v["rows_per_tile"] in (64, 128) and v["name"]
    # The planner's default kv lanes, which the GPU planner arguments pass on (decode.py).
    assert v["default_kv_lanes"] == 8
    assert mlaps.resolve_variant(128, 2, "fp8", "fp8", arch="gfx942")["default_kv_lanes"] == 1


def test_default_fixed_overhead():
    # No costs in the AMD registries: AITER's max(1, ceil(16 / page_size)).
    for page, want in ((64, 1), (4, 4), (1, 16)):
        assert mlaps.planner.default_fixed_overhead(16, 1, "fp8", "fp8", page,
                                                    arch="gfx950") == want
    # sm90 charges an item its calibrated cost in cost blocks: more blocks when they are
    # smaller (page 1 plans 16-token blocks, page 64 64-token ones).
    d64 = mlaps.planner.default_fixed_overhead(64, 2, "fp8", "fp8", 64, arch="sm90")
    d1 = mlaps.planner.default_fixed_overhead(64, 2, "fp8", "fp8", 1, arch="sm90")
    assert 1 <= d64 < d1
    with pytest.raises(ValueError, match="page_size"):
        mlaps.planner.default_fixed_overhead(64, 2, "fp8", "fp8", 0, arch="sm90")
    with pytest.raises(ValueError, match="unsupported"):
        mlaps.planner.default_fixed_overhead(48, 1, "fp8", "fp8", 64, arch="gfx942")


@pytest.mark.parametrize("heads,qlen,num_cu,want", [
    (16, 1, 132, 1), (64, 2, 132, 2), (32, 3, 132, 2), (128, 1, 132, 2), (128, 2, 132, 4),
    (128, 4, 132, 4), (128, 4, 128, 8), (128, 2, 131, 1)])
def test_kv_lanes_is_the_plans(heads, qlen, num_cu, want):
    # What mla_decode_fwd passes the kernel for a batch of qlen tokens a request (it does not
    # see the plan, which is on the device) is the lanes the host planner gave that batch.
    qo, kv, last = uniform_batch(9, qlen, 700, 64)
    bufs = plan(qo, kv, last, heads, "bf16", 64, num_cu=num_cu)
    assert mlaps.read_metadata(bufs[0])["kv_lanes"] == want
    assert mlaps.kv_lanes(heads, qlen, "bf16", "bf16", num_cu, arch="sm90") == want
    # No lanes past the cap.
    assert mlaps.kv_lanes(heads, qlen, "bf16", "bf16", num_cu, max_lanes=1, arch="sm90") == 1
    with pytest.raises(ValueError, match="num_cu"):
        mlaps.kv_lanes(heads, qlen, "bf16", "bf16", 0, arch="sm90")
    with pytest.raises(ValueError, match="max_lanes"):
        mlaps.kv_lanes(heads, qlen, "bf16", "bf16", num_cu, max_lanes=65, arch="sm90")


def cp_cases(step=7):
    lines = golden_lines("cp")
    names = sorted(lines)[::step]
    return [(n, lines[n]) for n in names]


@pytest.mark.parametrize("case", cp_cases(), ids=lambda c: c[0])
def test_cp_golden_parity(case):
    """CP round-robin shards (golden/cp.txt, every 7th): rank r of W holds global positions
    p % W == r of a uniform page-1 batch, planned with is_cp_round_robin=True."""
    name, want = case
    m = re.match(r"(\w+)/fp8/h(\d+)q(\d+)/b(\d+)/ctx(\d+)/w(\d+)r(\d+)$", name)
    arch, h, q, b, ctx, w, r = m.group(1), *map(int, m.groups()[1:])
    local = (ctx - r + w - 1) // w if ctx > r else 0
    qo, kv, last = varlen_batch([local] * b, q, 1)
    if want[0] == "error":
        with pytest.raises(ValueError):
            plan(qo, kv, last, h, "fp8", 1, arch=arch, is_cp_round_robin=True)
        return
    fields = dict(x.split("=") for x in want[1:-1])
    bufs = plan(qo, kv, last, h, "fp8", 1, arch=arch, num_cu=int(fields["cus"]),
                is_cp_round_robin=True)
    p = used_plan(bufs)
    assert p["meta"]["num_works"] == int(fields["works"])
    assert "%016x" % fnv_digest(p) == want[-1]
    assert mlaps.check_plan(*batch_args(qo, kv, last, h, bufs), page_size=1,
                            is_cp_round_robin=True) == []


def test_sparse_per_token_plan_check_simulate():
    """topk > 0: mlaps' sparse per-token layout (one q token per row, page 1, kv already
    trimmed to topk, no causal mask)."""
    kept = [2048, 17, 0, 2048, 900, 3]  # a padded row keeps 0
    qo = np.arange(len(kept) + 1, dtype=np.int32)
    kv = np.concatenate([[0], np.cumsum(kept)]).astype(np.int32)
    last = np.array([1 if k else 0 for k in kept], np.int32)
    info = mlaps.get_mla_metadata_info_v1(3, 2, 64, "fp8", "fp8", True, arch="sm90")
    bufs = alloc(info)
    args = batch_args(qo, kv, last, 64, bufs, causal=False)
    mlaps.get_mla_metadata_v1(*args, page_size=1, topk=2048, dtype_q="fp8", dtype_kv="fp8",
                              arch="sm90")
    assert mlaps.check_plan(*args, page_size=1, topk=2048) == []
    r = mlaps.simulate(*args, page_size=1, topk=2048, dtype_q="fp8", dtype_kv="fp8")
    assert r.passed, r.summary
    too_long = kv.copy()
    too_long[1:] += 1  # row 0 keeps 2049 > topk
    with pytest.raises(ValueError, match="2049"):
        mlaps.get_mla_metadata_v1(qo, too_long, last, 64, 1, False, *bufs[:1], bufs[2], bufs[1],
                                  bufs[3], bufs[4], bufs[5], page_size=1, topk=2048,
                                  dtype_q="fp8", dtype_kv="fp8")
