"""Ground truth for torchao's Float8 inside pipeline stages of the torchtitan walk (parcalc.core.memory_pipeline_stage with
StepShapes.float8, the blocks those of memory_torchtitan or, under TP, memory_torchtitan_tp): MemTracker over torch's
PipelineStage and Schedule1F1B running a stage of torchtitan's Llama (tests/ground_truth/tiny_torchtitan_pp.py) whose
linears torchtitan's float8 converter swapped for torchao's Float8Linear (train.py at 9dec370 converts the whole model, then
pipelines it and parallelises each stage: apply_tp with its Float8 plans where tp > 1, apply_ac, apply_fsdp), on a
(pp, dp, tp) mesh of fake ranks.

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_pp_tracker.json, which tests/ground_truth/test_torch_memory_float8_pp.py
holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_pp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_pp_tracker.json"

SHAPE = (512, 4, 2, 1536, 1024, 2, 256)  # hidden, heads, kv heads, ffn, vocab, b, s: test_torch_memory_pipeline.py's
# (layers, pp, stage, its layers, micro-batches, checkpointing, tp): test_torch_memory_pipeline.py's cases, Float8
CASES = [(4, 2, 0, (0, 2), 4, "full", 2), (4, 2, 0, (0, 2), 4, "none", 2), (4, 2, 1, (2, 4), 4, "full", 2), (6, 3, 1, (2, 4), 4, "full", 2),
         (4, 2, 0, (0, 2), 4, "full", 1), (4, 2, 1, (2, 4), 4, "full", 1), (6, 3, 1, (2, 4), 4, "full", 1)]


def tracked_float8_stage_peak(case: tuple) -> tuple[float, dict[str, float]]:
    from . import tiny_torchtitan_pp
    from .tiny_llama import LlamaConfig

    layers, pp, stage, bounds, micro_batches, ac, tp = case
    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    total = tiny_torchtitan_pp.tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, tp=tp, float8=True)
    return total, dict(tiny_torchtitan_pp.LAST_PARTS)


def main() -> None:
    import torchao

    rows = []
    for case in CASES:
        total, parts = tracked_float8_stage_peak(case)
        print(case, f"{total:,.0f}", flush=True)
        layers, pp, stage, bounds, micro_batches, ac, tp = case
        rows.append({"dims": list(SHAPE), "layers": layers, "pp": pp, "stage": stage, "bounds": list(bounds), "micro_batches": micro_batches,
                     "ac": ac, "dp": 2, "tp": tp, "peak": total, "parts": parts})
    if len(sys.argv) < 2:
        FIXTURE.write_text(json.dumps({"made_with": {"torch": torch.__version__, "torchao": torchao.__version__,
                                                     "script": "tests/ground_truth/torchao_float8_pp.py"},
                                       "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
