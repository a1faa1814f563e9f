"""Ground truth for torchao's Float8 training under tensor parallelism in the torchtitan walk (parcalc.core.memory_torchtitan_tp
with StepShapes.float8): FSDPMemTracker over torchtitan's Llama code (tiny_torchtitan_tp.py) whose linears torchtitan's float8
converter has swapped for torchao's Float8Linear, then parallelised as torchtitan's parallelize_llama.py at 9dec370 does with
--float8.enable_float8_linear: apply_tp's Float8 branch (torchao's Float8ColwiseParallel for wq / wk / wv / w1 / w3,
Float8RowwiseParallel for wo / w2, PrepareFloat8ModuleInput on attention and feed_forward; the embedding, the final norm and
the output projection keep the plain styles), apply_ac, apply_fsdp on the data-parallel mesh dimension; on a (dp, tp) mesh of
fake ranks under FakeTensorMode, the loss under loss_parallel().

torchtitan at 9dec370 (the Dec 2024 benchmarks' commit): train.py converts (Float8Handler.convert_to_float8_training, every
linear but `output`, Float8LinearConfig with enable_fsdp_float8_all_gather only when asked: its default off) before
models_parallelize_fns; parallelize_llama.py apply_tp(..., enable_float8=job_config.float8.enable_float8_linear) picks
(Float8RowwiseParallel, Float8ColwiseParallel, PrepareFloat8ModuleInput) from torchao.float8.float8_tensor_parallel.

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_tp_tracker.json, which tests/ground_truth/test_torch_memory_float8_tp.py
holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_tp

The tracker is tiny_torchtitan_tp's (DTensor's sharding propagation left out; every storage of a tensor subclass tracked:
without that, FSDPMemTracker's _track drops the FP8 all-gather's output at random, its docstring says why).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_tp_tracker.json"

# (hidden, heads, kv heads, ffn, layers, vocab, b, s): test_torch_memory_torchtitan_tp.py's shapes
SHAPES = {
    "logits-heavy": (512, 4, 2, 1536, 2, 1024, 4, 256),  # one KV head per rank
    "batch-one": (512, 8, 4, 1536, 3, 1024, 1, 512),  # micro-batch 1: the sequence all-gathers are views
    "wide": (1024, 8, 4, 2816, 3, 256, 2, 128),
    "vocab-heavy": (256, 4, 4, 768, 2, 16000, 4, 128),
    "mha": (512, 8, 8, 1536, 2, 2048, 4, 256),
}
# (shape, dp, tp, checkpointing)
CASES = [("logits-heavy", 2, 2, "none"), ("logits-heavy", 2, 2, "full"), ("batch-one", 2, 2, "none"), ("batch-one", 2, 2, "full"),
         ("wide", 2, 2, "none"), ("wide", 2, 2, "full"), ("vocab-heavy", 2, 2, "none"), ("mha", 1, 4, "none"), ("mha", 2, 4, "full")]


def tracked_float8_tp_peak(shape: str, dp: int, tp: int, ac: str) -> dict[str, float]:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_tp import tracked_tp_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = SHAPES[shape]
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    return tracked_tp_peak(config, vocab, b, s, dp, tp, ac, float8=True)


def main() -> None:
    import torchao

    rows = []
    only = sys.argv[1:]
    for shape, dp, tp, ac in CASES:
        if only and shape not in only:
            continue
        tracked = tracked_float8_tp_peak(shape, dp, tp, ac)
        print(shape, dp, tp, ac, f"{tracked['Total']:,.0f}", flush=True)
        rows.append({"shape": shape, "dims": list(SHAPES[shape]), "dp": dp, "tp": tp, "ac": ac, "peak": tracked})
    if not only:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"made_with": {"torch": torch.__version__, "torchao": torchao.__version__,
                                                     "script": "tests/ground_truth/torchao_float8_tp.py"},
                                       "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
