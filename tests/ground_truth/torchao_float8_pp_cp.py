"""Ground truth for torchao's Float8 inside pipeline stages under context x tensor parallelism (parcalc.core.memory_pipeline_stage
with StepShapes.float8 and cp > 1: each stage's blocks memory_torchtitan_tp's with torch's ring attention on the TP rank's heads):
MemTracker over torch's PipelineStage and Schedule1F1B running a stage of torchtitan's Llama converted to torchao's Float8Linear
and parallelised with apply_tp's Float8 plans, apply_ac, fully_shard over the flattened dp x cp ranks, each step's
schedule.step under torch's context_parallel (tests/ground_truth/tiny_torchtitan_pp.py `cp`), on a (pp, dp, cp, tp) mesh of
fake ranks: Table 6's combination (torchtitan 9dec370: 4D parallelism with Float8, 1F1B, full checkpointing) at a small size.

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_pp_cp_tracker.json, which tests/ground_truth/test_torch_memory_pipeline_cp.py
holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_pp_cp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_pp_cp_tracker.json"

SHAPE = (512, 4, 2, 1536, 1024, 2, 256)  # hidden, heads, kv heads, ffn, vocab, b, s: test_torch_memory_pipeline.py's
# (layers, pp, stage, its layers, micro-batches, checkpointing, tp, cp), dp 2
CASES = [(4, 2, 0, (0, 2), 4, "full", 2, 2), (4, 2, 1, (2, 4), 4, "full", 2, 2), (6, 3, 1, (2, 4), 4, "full", 2, 2),
         (4, 2, 1, (2, 4), 4, "full", 2, 4)]


def tracked_float8_cp_stage_peak(case: tuple) -> float:
    from . import tiny_torchtitan_pp
    from .tiny_llama import LlamaConfig

    layers, pp, stage, bounds, micro_batches, ac, tp, cp = case
    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    return tiny_torchtitan_pp.tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, tp=tp, float8=True, cp=cp)


def main() -> None:
    import torchao

    rows = []
    for case in CASES:
        total = tracked_float8_cp_stage_peak(case)
        print(case, f"{total:,.0f}", flush=True)
        layers, pp, stage, bounds, micro_batches, ac, tp, cp = case
        rows.append({"dims": list(SHAPE), "layers": layers, "pp": pp, "stage": stage, "bounds": list(bounds), "micro_batches": micro_batches,
                     "ac": ac, "dp": 2, "tp": tp, "cp": cp, "peak": total})
    if len(sys.argv) < 2:
        FIXTURE.write_text(json.dumps({"made_with": {"torch": torch.__version__, "torchao": torchao.__version__,
                                                     "script": "tests/ground_truth/torchao_float8_pp_cp.py"},
                                       "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
