"""Ground truth for expert parallelism: parcalc.core.comm's MoE rows against real PyTorch (CPU, gloo).

tests/ground_truth/moe_worker.py runs a small MoE layer (4 GELU experts with biases, top-2,
hidden 8, FFN 16, 2 x 8 tokens per rank, fp32, exactly balanced routing) with its experts split
over ep = 2 and 4 ranks, dispatch and combine by torch.distributed.nn.functional.all_to_all_single
(autograd: the opposite all-to-all in backward), and the expert gradients all-reduced over the
expert-DP group. Each rank records every all-to-all (its input bytes and the bytes it sends to
other ranks) and the all-reduce; parcalc predicts the same from Layout(dp = world, ep).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parcalc.core.collectives import Collective
from parcalc.core.comm import Network, Workload, iteration_plan
from parcalc.core.hardware import Link, Sourced
from parcalc.core.layout import Layout
from parcalc.core.model import MixtureOfExperts, Mlp, Norm, Position, TransformerModel

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("moe_worker.py")
HIDDEN, FFN, EXPERTS, TOP_K, BATCH, SEQ = 8, 16, 4, 2, 2, 8
ANY_LINK = Network(Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test")))


def moe_model() -> TransformerModel:
    return TransformerModel(
        key="ground-truth-moe", name="ground-truth MoE", layers=1, hidden=HIDDEN, heads=2, kv_heads=2, head_dim=HIDDEN // 2,
        ffn_hidden=FFN, mlp=Mlp.GELU, vocab=0, max_seq_len=SEQ, tied_embeddings=True, position=Position.ROPE,
        norm=Norm.LAYERNORM, bias=True, source=str(WORKER), moe=MixtureOfExperts(EXPERTS, TOP_K, FFN, source="moe_worker.py"),
    )  # fmt: skip


def run(world: int, ep: int, out: Path) -> list[dict]:
    subprocess.run([sys.executable, str(WORKER), "--world", str(world), "--ep", str(ep), "--out", str(out)],
                   check=True, timeout=300, capture_output=True)  # fmt: skip
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize(("world", "ep"), [(2, 2), (4, 4), (4, 2)], ids=["ep2-of-2", "ep4-of-4", "ep2-edp2-of-4"])
def test_all_to_all_and_expert_dp_bytes_equal_pytorch(world: int, ep: int, tmp_path: Path) -> None:
    ranks = run(world, ep, tmp_path)
    plan = iteration_plan(moe_model(), Workload(world * BATCH, BATCH, SEQ, 4.0, 4.0), Layout(dp=world, ep=ep), ANY_LINK)
    a2a = [c for c in plan.calls if c.dimension == "ep"]
    assert {c.op for c in a2a} == {Collective.ALL_TO_ALL}
    # hand: T k h s = 16 tokens x 2 x 8 x 4 B = 1,024 B per call; 2 forward + 2 backward
    assert sum(c.calls for c in a2a) == 4 and {c.bytes_per_call for c in a2a} == {1024.0}
    for rank in ranks:
        measured = [c for c in rank["calls"] if c["op"] == "all-to-all"]
        assert len(measured) == sum(c.calls for c in a2a)
        assert [c["phase"] for c in measured] == ["forward", "forward", "backward", "backward"]
        assert {c["bytes"] for c in measured} == {1024}
        assert {c["group"] for c in measured} == {ep}
        # bytes leaving the rank: (ep - 1)/ep of the buffer (balanced routing), as parcalc's per-device traffic
        assert sum(c["sent"] for c in measured) == pytest.approx(sum(c.sent for c in a2a))
        assert sum(c["sent"] for c in measured) == 4 * 1024 * (ep - 1) // ep
    headline = next(d for d in plan.derivations if d.key == "ep_all_to_all_sent")
    assert headline.value == pytest.approx(ranks[0]["calls"][0]["sent"] * 4)
    edp = world // ep
    reduce = [c for c in plan.calls if c.dimension == "edp"]
    for rank in ranks:
        measured = [c for c in rank["calls"] if c["op"] == "all-reduce"]
        # the local experts' parameters: (E/ep) x (h f + f + f h + h) = (4/ep) x 280, fp32
        assert rank["expert_params"] == EXPERTS // ep * (2 * HIDDEN * FFN + FFN + HIDDEN)
        if edp == 1:
            assert measured == [] and reduce == []
            continue
        assert sum(c["bytes"] for c in measured) == sum(c.payload for c in reduce) == rank["expert_params"] * 4
        assert {c["group"] for c in measured} == {c.group_size for c in reduce} == {edp}
