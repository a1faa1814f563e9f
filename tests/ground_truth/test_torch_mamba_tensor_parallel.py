"""Ground truth: a Mamba-2 block under tensor parallelism in real PyTorch (CPU, gloo) against parcalc's comm-volume.

tests/ground_truth/mamba_tp_worker.py splits a Mamba-2 block (hidden 6; 4 heads of 2, state 3, 2 groups) over 2 ranks
as Megatron-Core's MambaMixer does (in_proj column-parallel by heads and groups, the conv1d, scan and gated group norm on
the rank's heads, out_proj row-parallel), b 2, s 16, fp64, with Megatron's `f` and `g` operators around it. The test asks
that (1) every rank's output and input gradient equal the unsplit block's, so those two all-reduces are all the block
needs, and (2) the all-reduces each rank runs, call by call, forward and backward, are parcalc's tensor-parallel rows for
a one-layer hybrid of that block: one of b s h forward and one backward.

Needs torch (CPU wheel); about 5 s.
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
from parcalc.core.mamba import Mamba2
from parcalc.core.model import Mlp, Norm, Position, TransformerModel

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("mamba_tp_worker.py")
BATCH, SEQ, HIDDEN, FP64 = 2, 16, 6, 8.0  # mamba_tp_worker.py's shapes
LOOPBACK = Link("loopback", "loopback", Sourced(1e9, "B/s", "test"), Sourced(1e-6, "s", "test"))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    for attempt in range(2):  # the free port can be taken before rank 0 binds it: retry once
        out = tmp_path_factory.mktemp("mamba-tp-")
        process = subprocess.run([sys.executable, str(WORKER), "--world", "2", "--out", str(out)], capture_output=True, text=True,
                                 timeout=300)  # fmt: skip
        if process.returncode == 0 or "address already in use" not in process.stderr.lower() or attempt:
            break
    assert process.returncode == 0, process.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_split_block_equals_unsplit_block(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["errors"]["out"] < 1e-12 and rank["errors"]["dinput"] < 1e-12


def test_all_reduces_are_parcalc_s(ranks: list[dict]) -> None:
    model = TransformerModel(key="mamba-tp", name="mamba tp ground truth", layers=1, hidden=HIDDEN, heads=2, kv_heads=2, head_dim=3,
                             ffn_hidden=4, mlp=Mlp.GELU, vocab=0, max_seq_len=SEQ, tied_embeddings=False, position=Position.ROPE,
                             norm=Norm.RMSNORM, bias=False, source=str(WORKER),
                             mamba=Mamba2(heads=4, head_dim=2, state=3, groups=2, conv_kernel=3, chunk=8, pattern="M"))  # fmt: skip
    plan = iteration_plan(model, Workload(BATCH, BATCH, SEQ, FP64, FP64), Layout(tp=2), Network(LOOPBACK, LOOPBACK))
    rows = [r for r in plan.calls if r.dimension == "tp"]
    assert all(r.op is Collective.ALL_REDUCE for r in rows)
    parcalc = {phase: sorted(size for r in rows if r.phase == phase for size in [r.bytes_per_call] * r.calls) for phase in ("forward", "backward")}
    assert parcalc == {"forward": [BATCH * SEQ * HIDDEN * FP64], "backward": [BATCH * SEQ * HIDDEN * FP64]}  # 1,536 B each
    for rank in ranks:
        assert rank["all_reduces"] == parcalc
