"""Ground truth: context-parallel attention's ring exchange under real PyTorch (CPU, gloo) against
parcalc.core.comm.context's p2p rows.

tests/ground_truth/cp_worker.py runs causal grouped-query attention (4 query heads, 2 K/V heads,
head_dim 8, b = 2, s = 32, fp64) split over 2 and 4 ranks in Megatron-LM's 2cp chunks, passing
K/V blocks around a ring with isend/irecv forward and K/V with dK/dV the other way in backward, as
Transformer Engine's AttnFuncWithCPAndKVP2P does, and records every send. The test asks that
(1) its output and dQ, dK, dV equal unsplit attention under autograd (the algorithm is right) and
(2) the bytes and calls each rank sends equal parcalc's prediction for one layer and micro-batch.

Needs torch (CPU wheel, torch==2.13.0); about 10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from parcalc.core.collectives import Collective
from parcalc.core.comm import Network, Workload, iteration_plan
from parcalc.core.comm.context import cp_sent_per_layer
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.model import Mlp, Norm, Position, TransformerModel

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("cp_worker.py")
BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM, FP64 = 2, 32, 4, 2, 8, 8.0  # cp_worker.py's shapes
ANY_LINK = Network(Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test")))
MODEL = TransformerModel(
    key="cp-ground-truth", name="cp ground truth", layers=1, hidden=HEADS * HEAD_DIM, heads=HEADS, kv_heads=KV_HEADS,
    head_dim=HEAD_DIM, ffn_hidden=4 * HEADS * HEAD_DIM, mlp=Mlp.GELU, vocab=0, max_seq_len=SEQ, tied_embeddings=False,
    position=Position.ROPE, norm=Norm.LAYERNORM, bias=False, source=str(WORKER),
)  # fmt: skip


@pytest.fixture(scope="module", params=[2, 4], ids=["cp2", "cp4"])
def measured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[dict]]:
    world = request.param
    for attempt in range(2):  # the free port can be taken before rank 0 binds it: retry once
        out = tmp_path_factory.mktemp(f"cp-{world}-")
        process = subprocess.run([sys.executable, str(WORKER), "--world", str(world), "--out", str(out)],
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        if process.returncode == 0 or "address already in use" not in process.stderr.lower() or attempt:
            break
    assert process.returncode == 0, process.stderr[-4000:]
    return world, [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def plan_for(cp: int):
    work = Workload(BATCH, BATCH, SEQ, FP64, FP64)
    return work, iteration_plan(MODEL, work, Layout(cp=cp), ANY_LINK)


def test_ring_attention_equals_unsplit_attention(measured: tuple[int, list[dict]]) -> None:
    """The ring's output and gradients on every rank equal unsplit causal attention (fp64)."""
    _, ranks = measured
    for rank in ranks:
        for name, error in rank["errors"].items():
            assert error < 1e-12, (name, error)


def test_ring_bytes_and_calls_per_rank(measured: tuple[int, list[dict]]) -> None:
    """Each rank's sends equal parcalc's p2p rows: forward (cp - 1) sends of B_kv, backward B_kv,
    (cp - 2) x 2 B_kv, B_kv; B_kv = 2 b (s/cp) kv_heads d e = 2 x 2 x 32/cp x 2 x 8 x 8 B."""
    cp, ranks = measured
    b_kv = 2 * BATCH * (SEQ // cp) * KV_HEADS * HEAD_DIM * FP64  # 8,192 B at cp 2; 4,096 B at cp 4 (by hand)
    work, plan = plan_for(cp)
    rows = {row.phase: row for row in plan.calls if row.dimension == "cp"}
    assert set(rows) == {"forward", "backward"}
    assert all(row.op is Collective.POINT_TO_POINT for row in rows.values())
    predicted = {phase: Counter(dict(row.call_sizes)) if row.call_sizes else Counter({row.bytes_per_call: row.calls})
                 for phase, row in rows.items()}  # fmt: skip
    assert predicted["forward"] == Counter({b_kv: cp - 1})
    assert predicted["backward"] == (Counter({b_kv: 2}) if cp == 2 else Counter({b_kv: 2, 2 * b_kv: cp - 2}))
    for rank in ranks:
        for phase in ("forward", "backward"):
            measured_sizes = Counter(float(b) for b in rank["sends"][phase])
            assert measured_sizes == predicted[phase], (phase, measured_sizes, predicted[phase])
            assert sum(rank["sends"][phase]) == rows[phase].sent == cp_sent_per_layer(MODEL, work, plan.parallelism, phase)
