"""Ground truth for torchao's Float8 under context x tensor parallelism in the torchtitan walk (parcalc.core.memory_torchtitan_tp
with StepShapes.float8 and cp > 1: the ring attention on the TP rank's local heads, parcalc.core.memory_torchtitan_cp):
FSDPMemTracker over torchtitan's Llama code with torchtitan's float8 converter (torchao's Float8Linear, every linear but the
output projection, no FP8 all-gather) and apply_tp's Float8 branch (Float8ColwiseParallel, Float8RowwiseParallel,
PrepareFloat8ModuleInput), apply_ac, fully_shard over the flattened dp x cp mesh, the step under torch's context_parallel and
loss_parallel() on a (dp, cp, tp) mesh of fake ranks (tests/ground_truth/tiny_torchtitan_cp_tp.py).

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_cp_tp_tracker.json, which tests/ground_truth/test_torch_memory_torchtitan_cp_tp.py
holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_cp_tp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_cp_tp_tracker.json"

# (hidden, heads, kv heads, ffn, layers, vocab, b, s): test_torch_memory_torchtitan_cp_tp.py's shapes
SHAPES = {
    "gqa": (512, 4, 2, 1536, 2, 1024, 4, 256),  # one KV head per TP rank: repeat_kv a view
    "ring-heavy": (512, 8, 2, 512, 1, 64, 2, 1024),  # the peak inside the ring's backward
    "batch-one": (512, 8, 8, 1536, 2, 1024, 1, 512),  # micro-batch 1: the TP all-gathers are views
    "wide-tp4": (512, 8, 4, 1536, 2, 1024, 2, 256),
}
# (shape, dp, cp, tp, checkpointing)
CASES = [("gqa", 1, 2, 2, "none"), ("gqa", 1, 2, 2, "full"), ("ring-heavy", 1, 2, 2, "none"), ("ring-heavy", 1, 4, 2, "full"),
         ("batch-one", 2, 2, 2, "full"), ("wide-tp4", 1, 2, 4, "none")]


def tracked_float8_cp_tp_peak(shape: str, dp: int, cp: int, tp: int, ac: str) -> dict[str, float]:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_cp_tp import tracked_cp_tp_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = SHAPES[shape]
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    return tracked_cp_tp_peak(config, vocab, b, s, dp, cp, tp, ac, float8=True)


def main() -> None:
    import torchao

    rows = []
    only = sys.argv[1:]
    for shape, dp, cp, tp, ac in CASES:
        if only and shape not in only:
            continue
        tracked = tracked_float8_cp_tp_peak(shape, dp, cp, tp, ac)
        print(shape, dp, cp, tp, ac, f"{tracked['Total']:,.0f}", flush=True)
        rows.append({"shape": shape, "dims": list(SHAPES[shape]), "dp": dp, "cp": cp, "tp": tp, "ac": ac, "peak": tracked})
    if not only:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"made_with": {"torch": torch.__version__, "torchao": torchao.__version__,
                                                     "script": "tests/ground_truth/torchao_float8_cp_tp.py"},
                                       "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
