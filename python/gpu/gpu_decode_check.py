"""mlaps decode on the GPU vs a torch fp32 reference, on FlashMLA's test matrix, with
FlashMLA's tolerances; then one CUDA graph capture + replay. Run on the GPU machine with its
torch (no Bazel needed), from a staged package (python/build_wheel.sh --cuda):

    PYTHONPATH=<out>/stage python3 <out>/stage/mlaps/gpu/gpu_decode_check.py [--quick]

Matrix (FlashMLA tests/test_flash_mla.py): b in {1, 2, 6, 64}, s_q in {1, 2, 4},
mean s_k in {20, 140, 4096}, h_q in {16, 32, 64, 128}, varlen in {no, yes}, causal in
{no, yes}; page (block) size 64 with every kv position past a request's length NaN (a read of
one poisons the output); plus zero-length kv requests (non-causal) and page sizes 1 and 16.
Plans come from mlaps' GPU planner (get_mla_metadata_v1 on device tensors); a subset is also
planned on the CPU and compared word for word.
Tolerances (FlashMLA's check_is_allclose): out abs 8e-4 or rel 2.01/128, cosine diff 5e-6;
LSE abs 1e-6 or rel 8.01/65536; inf/NaN positions equal. Rows that see no kv token:
O = 0, LSE = -inf (mlaps' convention) in both.
The last line is the summary: 'gpu_decode_check: N passed, M failed (...)'.
"""
import argparse
import math
import random
import sys
import time
import traceback

import numpy as np
import torch

import mlaps

PAGE = 64
D, DV = 576, 512


def check_close(name, ans, ref, abs_tol, rel_tol, cos_tol=None):
    """FlashMLA-style: inf/NaN positions equal; finite elements pass abs or rel; cosine."""
    ans, ref = ans.double(), ref.double()
    for what, fa, fr in (("nan", torch.isnan(ans), torch.isnan(ref)),
                         ("+inf", torch.isposinf(ans), torch.isposinf(ref)),
                         ("-inf", torch.isneginf(ans), torch.isneginf(ref))):
        if not torch.equal(fa, fr):
            n = int((fa != fr).sum())
            return "%s: %d %s positions differ" % (name, n, what)
    fin = torch.isfinite(ref)
    a, r = ans[fin], ref[fin]
    if a.numel() == 0:
        return None
    err = (a - r).abs()
    rel = err / r.abs().clamp_min(1e-30)
    bad = ~((err <= abs_tol) | (rel <= rel_tol))
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0])
        return "%s: %d/%d elements fail abs %.3g / rel %.3g (first: %.6g vs %.6g)" % (
            name, int(bad.sum()), a.numel(), abs_tol, rel_tol, float(a[i]), float(r[i]))
    if cos_tol is not None:
        denom = float((a * a + r * r).sum())
        cos = 1 - 2 * float((a * r).sum()) / max(denom, 1e-12)
        if cos > cos_tol:
            return "%s: cosine diff %.3g > %.3g" % (name, cos, cos_tol)
    return None


def reference(q, kv_pages, lens, kv_indices_per_req, s_q, causal, page):
    """fp32 attention per request over its valid kv tokens only (the NaN padding is never
    read); q [b, s_q, h, 576]. Returns out [b*s_q, h, 512], lse [b*s_q, h]."""
    b, _, h, _ = q.shape
    out = torch.zeros(b * s_q, h, DV, dtype=torch.float32, device=q.device)
    lse = torch.full((b * s_q, h), -math.inf, dtype=torch.float32, device=q.device)
    for i in range(b):
        L = int(lens[i])
        if L == 0:
            continue
        pages = kv_indices_per_req[i]
        if kv_pages.element_size() == 1:  # fp8: gather as bytes, then widen
            k = kv_pages.view(torch.uint8)[pages].view(kv_pages.dtype).reshape(-1, D)[:L].float()
        else:
            k = kv_pages[pages].reshape(-1, D)[:L].float()  # [L, 576]
        qi = q[i].float()  # [s_q, h, 576]
        s = torch.einsum("qhd,kd->qhk", qi, k) / math.sqrt(D)
        if causal:
            t = torch.arange(s_q, device=q.device)[:, None]
            j = torch.arange(L, device=q.device)[None, :]
            s = s.masked_fill((j >= L - s_q + t + 1)[:, None, :], -math.inf)
        l_ = torch.logsumexp(s, dim=-1)  # [s_q, h]
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("qhk,kd->qhd", p, k[:, :DV])
        dead = torch.isneginf(l_)
        o[dead] = 0
        out[i * s_q:(i + 1) * s_q] = o
        lse[i * s_q:(i + 1) * s_q] = l_
    return out, lse


def meta_host(t):
    """work_meta_data (uint64) to numpy, through an int64 view."""
    return t.view(torch.int64).cpu().numpy()


class Buffers(object):
    """Plan buffers and workspace sized once from maxima (what an engine allocates)."""

    def __init__(self, b, s_q, h, dtype=torch.bfloat16):
        info = mlaps.get_mla_metadata_info_v1(b, s_q, h, dtype, dtype, False, arch="sm90")
        # torch's uint64 support is thin: allocate with empty and zero through an int64 view.
        self.meta = [torch.empty(s, dtype=d, device="cuda") for s, d in info]
        self.meta[0].view(torch.int64).zero_()
        for t in self.meta[1:]:
            t.zero_()
        (ws_shape, ws_dtype), = mlaps.get_mla_decode_workspace_info(b, s_q, h, dtype, dtype,
                                                                    False, arch="sm90")
        self.ws = torch.zeros(ws_shape, dtype=ws_dtype, device="cuda")

    def plan_args(self):
        m = self.meta
        return m[0], m[2], m[1], m[3], m[4], m[5]  # AITER's order: info set before indptr


def make_case(b, s_q, mean_sk, h, varlen, causal, page, zero_kv, seed, dtype=torch.bfloat16):
    random.seed(seed)
    torch.manual_seed(seed)
    lens = [mean_sk] * b
    if varlen:
        lens = [max(int(random.normalvariate(mean_sk, mean_sk / 2)), s_q) for _ in range(b)]
    if zero_kv:
        for i in range(0, b, 2):
            lens[i] = 0
    if causal:
        lens = [max(L, s_q) for L in lens]
    max_len = max(max(lens), 1)
    pages_per_req = -(-max_len // page)
    pad = -(-pages_per_req * page // 256) * 256 // page  # FlashMLA pads to 256 tokens
    total_pages = b * pad + 3
    kv_pages = torch.randn(total_pages, page, D, device="cuda").to(torch.bfloat16)
    perm = torch.randperm(total_pages, device="cuda").to(torch.int32)
    block_table = perm[:b * pad].view(b, pad)
    flat = kv_pages.view(-1, D)
    for i in range(b):  # NaN past each request's length, in every one of its pages
        rows = block_table[i].long()
        v = kv_pages[rows].view(-1, D)
        v[lens[i]:] = float("nan")
        kv_pages[rows] = v.view(pad, page, D)
    kv_pages[perm[b * pad:].long()] = float("nan")  # spare pages
    q = torch.randn(b, s_q, h, D, device="cuda").to(torch.bfloat16)
    npages = [-(-L // page) for L in lens]
    kv_indptr = torch.tensor([0] + list(np.cumsum(npages)), dtype=torch.int32, device="cuda")
    kv_indices = torch.cat([block_table[i, :npages[i]] for i in range(b)]) if sum(npages) else \
        torch.zeros(0, dtype=torch.int32, device="cuda")
    last = torch.tensor([L - (n - 1) * page if n else 0 for L, n in zip(lens, npages)],
                        dtype=torch.int32, device="cuda")
    qo_indptr = torch.arange(0, (b + 1) * s_q, s_q, dtype=torch.int32, device="cuda")
    if dtype != torch.bfloat16:  # fp8 e4m3fn values (NaN stays NaN), descales 1
        q, kv_pages = q.to(dtype), kv_pages.to(dtype)
    per_req = [block_table[i, :npages[i]].long() for i in range(b)]
    return dict(q=q, kv_pages=kv_pages, lens=lens, kv_indptr=kv_indptr, kv_indices=kv_indices,
                last=last, qo_indptr=qo_indptr, per_req=per_req, flat=flat)


def run_case(b, s_q, mean_sk, h, varlen, causal, page=PAGE, zero_kv=False, seed=0,
             cpu_parity=False, bufs=None, dtype=torch.bfloat16):
    c = make_case(b, s_q, mean_sk, h, varlen, causal, page, zero_kv, seed, dtype)
    bufs = bufs or Buffers(b, s_q, h, dtype)
    args = (c["qo_indptr"], c["kv_indptr"], c["last"], h, 1, causal) + bufs.plan_args()
    mlaps.get_mla_metadata_v1(*args, page_size=page, kv_granularity=max(16, page),
                              max_seqlen_qo=s_q, dtype_q=dtype, dtype_kv=dtype, arch="sm90")
    total_q = b * s_q
    o = torch.empty(total_q, h, DV, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(total_q, h, dtype=torch.float32, device="cuda")
    m = bufs.meta
    mlaps.mla_decode_fwd(c["q"].view(total_q, h, D), c["kv_pages"].view(-1, page, 1, D), o,
                         c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["last"], s_q,
                         page_size=page, work_meta_data=m[0], work_indptr=m[1],
                         work_info_set=m[2], reduce_indptr=m[3], reduce_final_map=m[4],
                         reduce_partial_map=m[5], workspace=bufs.ws, lse=lse,
                         is_causal=causal)
    torch.cuda.synchronize()
    plan_status = mlaps.read_metadata(meta_host(m[0]))
    if plan_status["code"] != 0:
        return "GPU planner status code %d (index %d)" % (plan_status["code"],
                                                          plan_status["index"])
    st = mlaps.decode_status(bufs.ws)
    if st["code"] != 0:
        return "decode status %s" % st
    host = [x.cpu().numpy() for x in (c["qo_indptr"], c["kv_indptr"], c["last"])]
    v = mlaps.check_plan(host[0], host[1], host[2], h, 1, causal, m[0], m[2], m[1], m[3], m[4],
                         m[5], page_size=page)
    if v:
        return "check_plan: %d violation(s), first: %s" % (len(v), v[0])
    if cpu_parity:
        cm = [np.zeros(sh, dt) for sh, dt in mlaps.get_mla_metadata_info_v1(
            b, s_q, h, str(dtype), str(dtype), False, arch="sm90")]
        mlaps.get_mla_metadata_v1(host[0], host[1], host[2], h, 1, causal, cm[0], cm[2], cm[1],
                                  cm[3], cm[4], cm[5], page_size=page,
                                  kv_granularity=max(16, page), max_seqlen_qo=s_q,
                                  dtype_q=dtype, dtype_kv=dtype, arch="sm90")
        gm = mlaps.read_metadata(meta_host(m[0]))
        cmh = mlaps.read_metadata(cm[0])
        for k in ("num_works", "num_reduce_tiles", "num_reduce_pieces", "num_partial_rows"):
            if gm[k] != cmh[k]:
                return "GPU plan %s %d != CPU plan %d" % (k, gm[k], cmh[k])
        w = gm["num_works"]
        if not np.array_equal(m[2].cpu().numpy()[:w], cm[2][:w]) or not np.array_equal(
                m[1].cpu().numpy()[:gm.get("num_cu", m[1].shape[0] - 1) + 1],
                cm[1][:m[1].shape[0]]):
            return "GPU plan differs from the CPU plan"
    ref_o, ref_lse = reference(c["q"], c["kv_pages"], c["lens"], c["per_req"], s_q, causal, page)
    for msg in (check_close("out", o.float(), ref_o, 8e-4, 2.01 / 128, 5e-6),
                check_close("lse", lse, ref_lse, 1e-6, 8.01 / 65536)):
        if msg:
            return msg
    return None


def graph_check():
    """One capture of [GPU plan + decode] for a batch shape, replayed on new lengths."""
    b, s_q, h, page = 32, 2, 64, PAGE
    bufs = Buffers(b, s_q, h)
    cases = [make_case(b, s_q, 1000, h, True, True, page, False, seed) for seed in (11, 12)]
    pages = max(c["kv_pages"].shape[0] for c in cases)
    kv_pages = torch.full((pages, page, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    npages = max(c["kv_indices"].shape[0] for c in cases)
    st = dict(q=torch.empty(b * s_q, h, D, dtype=torch.bfloat16, device="cuda"),
              kv_indptr=torch.zeros(b + 1, dtype=torch.int32, device="cuda"),
              kv_indices=torch.zeros(npages, dtype=torch.int32, device="cuda"),
              last=torch.zeros(b, dtype=torch.int32, device="cuda"),
              qo_indptr=cases[0]["qo_indptr"].clone())
    o = torch.empty(b * s_q, h, DV, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(b * s_q, h, dtype=torch.float32, device="cuda")
    m = bufs.meta

    def step():
        mlaps.get_mla_metadata_v1(st["qo_indptr"], st["kv_indptr"], st["last"], h, 1, True,
                                  *bufs.plan_args(), page_size=page, kv_granularity=page,
                                  max_seqlen_qo=s_q, dtype_q=torch.bfloat16,
                                  dtype_kv=torch.bfloat16, arch="sm90")
        mlaps.mla_decode_fwd(st["q"], kv_pages.view(-1, page, 1, D), o, st["qo_indptr"],
                             st["kv_indptr"], st["kv_indices"], st["last"], s_q, page_size=page,
                             work_meta_data=m[0], work_indptr=m[1], work_info_set=m[2],
                             reduce_indptr=m[3], reduce_final_map=m[4], reduce_partial_map=m[5],
                             workspace=bufs.ws, lse=lse, is_causal=True)

    def load(c):
        kv_pages[:c["kv_pages"].shape[0]].copy_(c["kv_pages"])
        st["q"].copy_(c["q"].view(b * s_q, h, D))
        st["kv_indptr"].copy_(c["kv_indptr"])
        st["kv_indices"].zero_()
        st["kv_indices"][:c["kv_indices"].shape[0]].copy_(c["kv_indices"])
        st["last"].copy_(c["last"])

    load(cases[0])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    msgs = []
    for c in cases:  # replay on each batch: the plan is recomputed inside the graph
        load(c)
        g.replay()
        torch.cuda.synchronize()
        ref_o, ref_lse = reference(c["q"], kv_pages, c["lens"], c["per_req"], s_q, True, page)
        st_ = mlaps.decode_status(bufs.ws)
        msg = (check_close("graph out", o.float(), ref_o, 8e-4, 2.01 / 128, 5e-6) or
               check_close("graph lse", lse, ref_lse, 1e-6, 8.01 / 65536) or
               (None if st_["code"] == 0 else "status %s" % st_))
        msgs.append(msg)
    return [m_ for m_ in msgs if m_]


def timing():
    """Plan + decode time per step from Python (CUDA events over 50 steps), one shape each."""
    for b, s_q, h, sk in ((64, 1, 128, 4096), (128, 2, 16, 4096)):
        c = make_case(b, s_q, sk, h, False, True, PAGE, False, 7)
        bufs = Buffers(b, s_q, h)
        o = torch.empty(b * s_q, h, DV, dtype=torch.bfloat16, device="cuda")
        m = bufs.meta

        def step():
            mlaps.get_mla_metadata_v1(c["qo_indptr"], c["kv_indptr"], c["last"], h, 1, True,
                                      *bufs.plan_args(), page_size=PAGE, kv_granularity=PAGE,
                                      max_seqlen_qo=s_q, dtype_q=torch.bfloat16,
                                      dtype_kv=torch.bfloat16, arch="sm90")
            mlaps.mla_decode_fwd(c["q"].view(b * s_q, h, D), c["kv_pages"].view(-1, PAGE, 1, D),
                                 o, c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["last"],
                                 s_q, page_size=PAGE, work_meta_data=m[0], work_indptr=m[1],
                                 work_info_set=m[2], reduce_indptr=m[3], reduce_final_map=m[4],
                                 reduce_partial_map=m[5], workspace=bufs.ws)
        for _ in range(5):
            step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        start.record()
        for _ in range(50):
            step()
        end.record()
        torch.cuda.synchronize()
        host = (time.perf_counter() - t) / 50 * 1e6
        print("timing b=%d s_q=%d h=%d s_k=%d bf16 page 64: GPU plan + decode %.1f us/step "
              "(events), %.1f us/step host wall" % (b, s_q, h, sk,
                                                   start.elapsed_time(end) / 50 * 1e3, host))


def merge_and_gather_checks():
    """The CP merge and the sparse gather wrappers against small torch references."""
    failures = []
    w, rows = 3, 1000
    o_r = torch.randn(w, rows, DV, device="cuda")
    lse_r = torch.randn(w, rows, device="cuda") * 3
    lse_r[1, :10] = -math.inf
    lse_r[:, 10] = -math.inf  # a row no rank sees: O = 0, LSE = -inf
    o_out = torch.empty(rows, DV, dtype=torch.float32, device="cuda")
    lse_out = torch.empty(rows, device="cuda")
    mlaps.cp_lse_merge(o_r, lse_r, o_out, lse_out)
    torch.cuda.synchronize()
    g = torch.logsumexp(lse_r, dim=0)
    wgt = torch.exp(lse_r - g).nan_to_num(0.0)
    ref = (wgt[..., None] * o_r).sum(0)
    ref[torch.isneginf(g)] = 0
    msg = (check_close("cp merge out", o_out, ref, 1e-5, 1e-4) or
           check_close("cp merge lse", lse_out, g, 1e-5, 1e-5))
    if msg:
        failures.append(msg)
    # Sparse gather, flat map: token t of request s keeps distinct positions < L_t that map.
    torch.manual_seed(5)
    b, t, topk = 3, 8, 64
    seq_len = [300, 50, 0]
    kv_indptr = torch.tensor([0, 300, 350, 350], dtype=torch.int32, device="cuda")
    kv_indices = torch.randperm(1000, device="cuda")[:350].to(torch.int32)
    token_to_seq = torch.tensor([0, 0, 1, 1, 2, -1, 0, 1], dtype=torch.int32, device="cuda")
    token_bound = torch.tensor([300, 120, 50, 7, 0, 0, 299, 49], dtype=torch.int32,
                               device="cuda")
    topk_idx = torch.randint(-2, 330, (t, topk), dtype=torch.int32, device="cuda")
    topk_idx[0, 5] = topk_idx[0, 4]  # a duplicate
    indptr = torch.arange(0, (t + 1) * topk, topk, dtype=torch.int32, device="cuda")
    packed = torch.full((t * topk,), 7, dtype=torch.int32, device="cuda")
    counts = torch.empty(t, dtype=torch.int32, device="cuda")
    dense = torch.empty(t, topk, dtype=torch.int32, device="cuda")
    status = torch.empty(t, 5, dtype=torch.int32, device="cuda")
    mlaps.sparse_gather(topk_idx, token_to_seq, token_bound, indptr, packed, counts, dense,
                        status, kv_indptr=kv_indptr, kv_indices=kv_indices)
    torch.cuda.synchronize()
    ti, ts, tb = topk_idx.cpu().tolist(), token_to_seq.cpu().tolist(), token_bound.cpu().tolist()
    kvi, kvp = kv_indices.cpu().tolist(), kv_indptr.cpu().tolist()
    for row in range(t):
        keep, seen = [], set()
        if ts[row] >= 0:
            s_ = ts[row]
            for v in ti[row]:
                if v < 0 or v >= tb[row] or v in seen:
                    continue
                seen.add(v)
                if v < kvp[s_ + 1] - kvp[s_]:
                    keep.append(kvi[kvp[s_] + v])
        want = keep + [-1] * (topk - len(keep))
        if int(counts[row]) != len(keep) or dense[row].cpu().tolist() != want or \
                packed[row * topk:(row + 1) * topk].cpu().tolist() != want:
            failures.append("sparse gather row %d: counts %d vs %d" % (row, int(counts[row]),
                                                                      len(keep)))
            break
    return failures


def error_checks():
    """Wrong inputs fail loudly before anything is enqueued."""
    failures = []
    bufs = Buffers(2, 1, 16)
    c = make_case(2, 1, 100, 16, False, True, PAGE, False, 0)
    o = torch.empty(2, 16, DV, dtype=torch.bfloat16, device="cuda")
    m = bufs.meta
    base = dict(page_size=PAGE, work_meta_data=m[0], work_indptr=m[1], work_info_set=m[2],
                reduce_indptr=m[3], reduce_final_map=m[4], reduce_partial_map=m[5],
                workspace=bufs.ws)
    tries = [
        ("fp16 q", TypeError, lambda: mlaps.mla_decode_fwd(
            c["q"].view(2, 16, D).half(), c["kv_pages"].view(-1, PAGE, 1, D), o, c["qo_indptr"],
            c["kv_indptr"], c["kv_indices"], c["last"], 1, **base)),
        ("non-contiguous o", ValueError, lambda: mlaps.mla_decode_fwd(
            c["q"].view(2, 16, D), c["kv_pages"].view(-1, PAGE, 1, D),
            torch.empty(2, DV, 16, dtype=torch.bfloat16, device="cuda").transpose(1, 2),
            c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["last"], 1, **base)),
        ("host kv_indptr", TypeError, lambda: mlaps.mla_decode_fwd(
            c["q"].view(2, 16, D), c["kv_pages"].view(-1, PAGE, 1, D), o, c["qo_indptr"],
            c["kv_indptr"].cpu(), c["kv_indices"], c["last"], 1, **base)),
        ("missing plan", ValueError, lambda: mlaps.mla_decode_fwd(
            c["q"].view(2, 16, D), c["kv_pages"].view(-1, PAGE, 1, D), o, c["qo_indptr"],
            c["kv_indptr"], c["kv_indices"], c["last"], 1, page_size=PAGE)),
        ("device q_scale", TypeError, lambda: mlaps.mla_decode_fwd(
            c["q"].view(2, 16, D), c["kv_pages"].view(-1, PAGE, 1, D), o, c["qo_indptr"],
            c["kv_indptr"], c["kv_indices"], c["last"], 1,
            q_scale=torch.ones(1, device="cuda"), **base)),
    ]
    for name, exc, fn in tries:
        try:
            fn()
            failures.append("%s: no error" % name)
        except exc as e:
            print("  error check %-18s -> %s: %s" % (name, type(e).__name__, e))
        except Exception as e:  # noqa: BLE001
            failures.append("%s: %s instead of %s" % (name, type(e).__name__, exc.__name__))
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a small subset of the matrix")
    opts = ap.parse_args()
    print("mlaps %s from %s; torch %s; %s; python %s" % (
        mlaps.__version__, mlaps.__file__, torch.__version__, torch.cuda.get_device_name(),
        sys.version.split()[0]))
    cases = []
    for b in (1, 2, 6, 64):
        for s_q in (1, 2, 4):
            for sk in (20, 140, 4096):
                for h in (16, 32, 64, 128):
                    for varlen in (False, True):
                        for causal in (False, True):
                            cases.append(dict(b=b, s_q=s_q, mean_sk=sk, h=h, varlen=varlen,
                                              causal=causal))
    for b in (2, 6, 64):  # zero-length kv requests (non-causal: causal needs kv >= qlen)
        for h in (16, 128):
            cases.append(dict(b=b, s_q=2, mean_sk=140, h=h, varlen=True, causal=False,
                              zero_kv=True))
    for page in (1, 16):
        for h in (16, 64, 128):
            cases.append(dict(b=6, s_q=2, mean_sk=140, h=h, varlen=True, causal=True, page=page))
    if opts.quick:
        cases = cases[::17]
    passed = failed = 0
    fails = []
    t0 = time.time()
    for i, c in enumerate(cases):
        c["seed"] = i
        c["cpu_parity"] = i % 7 == 0
        try:
            msg = run_case(**c)
        except Exception as e:  # noqa: BLE001
            msg = "exception %s: %s" % (type(e).__name__, e)
            traceback.print_exc()
        if msg:
            failed += 1
            fails.append("%s: %s" % (c, msg))
            print("FAIL %s: %s" % (c, msg))
        else:
            passed += 1
    print("matrix: %d passed, %d failed of %d cases in %.0f s" % (passed, failed, len(cases),
                                                                  time.time() - t0))
    try:
        g = graph_check()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        g = ["exception %s: %s" % (type(e).__name__, e)]
    print("graph capture + 2 replays (GPU plan + decode in one graph): %s"
          % ("PASS" if not g else "FAIL: " + "; ".join(g)))
    fp8 = []
    for i, (b, s_q, sk, h) in enumerate(((2, 1, 140, 16), (6, 2, 4096, 64), (64, 1, 4096, 128),
                                         (64, 2, 140, 16))):
        try:
            msg = run_case(b, s_q, sk, h, True, True, seed=1000 + i, cpu_parity=True,
                           dtype=torch.float8_e4m3fn)
        except Exception as ex:  # noqa: BLE001
            msg = "exception %s: %s" % (type(ex).__name__, ex)
        if msg:
            fp8.append("b%d q%d k%d h%d: %s" % (b, s_q, sk, h, msg))
    print("fp8 e4m3fn (informational, bf16 tolerances vs fp32 over the fp8 values): %d/4 pass%s"
          % (4 - len(fp8), "; " + "; ".join(fp8) if fp8 else ""))
    try:
        timing()
    except Exception as ex:  # noqa: BLE001
        print("timing: exception %s: %s" % (type(ex).__name__, ex))
    try:
        mg = merge_and_gather_checks()
    except Exception as ex:  # noqa: BLE001
        traceback.print_exc()
        mg = ["exception %s: %s" % (type(ex).__name__, ex)]
    print("cp_lse_merge + sparse_gather: %s" % ("PASS" if not mg else "FAIL: " + "; ".join(mg)))
    e = error_checks()
    print("error checks: %s" % ("PASS" if not e else "FAIL: " + "; ".join(e)))
    ok = failed == 0 and not g and not e and not mg
    print("gpu_decode_check: %d passed, %d failed (FlashMLA matrix + zero-kv + page 1/16; "
          "graph %s; merge/gather %s; errors %s; fp8 info %d/4) %s"
          % (passed, failed, "PASS" if not g else "FAIL", "PASS" if not mg else "FAIL",
             "PASS" if not e else "FAIL", 4 - len(fp8), "OK" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
