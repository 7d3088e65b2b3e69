"""simulate: the CPU executor vs the fp64 reference, on seeded or caller inputs."""
import numpy as np
import pytest

import mlaps
from _helpers import batch_args, plan, varlen_batch


@pytest.mark.parametrize("dt", ["bf16", "fp8"])
def test_seeded_passes(dt):
    qo, kv, last = varlen_batch([300, 41, 700], 2, 16)
    bufs = plan(qo, kv, last, 16, dt, 16, num_cu=6)
    r = mlaps.simulate(*batch_args(qo, kv, last, 16, bufs), page_size=16, dtype_q=dt,
                       dtype_kv=dt, q_scale=0.7, kv_scale=1.3)
    assert r.passed, r.summary
    assert r.o.shape == (6, 16, 512) and r.lse.shape == (6, 16)
    assert r.partial_items > 0 and r.reduce_tiles > 0
    assert r.unwritten_tokens == 0 and r.rewritten_tokens == 0
    assert r.summary.startswith("PASS")


def test_caller_inputs_and_folded_heads():
    qo, kv, last = varlen_batch([90, 33], 2, 1)
    bufs = plan(qo, kv, last, 128, "bf16", 1, num_cu=5)
    rng = np.random.default_rng(0)
    total_q = int(qo[-1])
    q = rng.standard_normal((total_q, 128, 576)).astype(np.float32)
    kvb = rng.standard_normal((int(kv[-1]), 1, 1, 576)).astype(np.float32)
    # bf16-representable values
    q = (q.view(np.uint32) & 0xFFFF0000).view(np.float32)
    kvb = (kvb.view(np.uint32) & 0xFFFF0000).view(np.float32)
    r = mlaps.simulate(*batch_args(qo, kv, last, 128, bufs), page_size=1, dtype_q="bf16",
                       dtype_kv="bf16", q=q, kv_buffer=kvb)
    assert r.passed, r.summary


def test_broken_plan_fails_the_gate():
    qo, kv, last = varlen_batch([300, 41, 700], 1, 16)
    bufs = plan(qo, kv, last, 16, "bf16", 16, num_cu=6)
    m = mlaps.read_metadata(bufs[0])
    w = bufs[2][:m["num_works"]]
    i = int(np.argmax(w[:, 5] - w[:, 4]))
    w[i, 5] -= 1  # drop a page of kv from one piece
    r = mlaps.simulate(*batch_args(qo, kv, last, 16, bufs), page_size=16, dtype_q="bf16",
                       dtype_kv="bf16")
    assert not r.passed


def test_input_shape_errors():
    qo, kv, last = varlen_batch([30], 1, 16)
    bufs = plan(qo, kv, last, 16, "bf16", 16)
    with pytest.raises(ValueError, match="q has shape"):
        mlaps.simulate(*batch_args(qo, kv, last, 16, bufs), page_size=16, dtype_q="bf16",
                       dtype_kv="bf16", q=np.zeros((1, 16, 512), np.float32),
                       kv_buffer=np.zeros((2, 16, 1, 576), np.float32))
    with pytest.raises(ValueError, match="both q and kv_buffer"):
        mlaps.simulate(*batch_args(qo, kv, last, 16, bufs), page_size=16, dtype_q="bf16",
                       dtype_kv="bf16", q=np.zeros((1, 16, 576), np.float32))
