"""Ground truth for torchao's FP8 all-gather (enable_fsdp_float8_all_gather) under tensor parallelism and inside pipeline
stages of the torchtitan walk (parcalc.core.memory_fsdp's _FsdpHooks with StepShapes.float8_weights, the blocks those of
memory_torchtitan_tp and memory_pipeline_stage): the trackers of torchao_float8_tp.py (FSDPMemTracker on a (dp, tp) mesh)
and torchao_float8_pp.py (MemTracker over Schedule1F1B stages on a (pp, dp, tp) mesh), the float8 converter's
Float8LinearConfig(enable_fsdp_float8_all_gather=True) as torchtitan's train.py at 9dec370 builds it with
--float8.enable_fsdp_float8_all_gather (parallelize_llama.py then applies apply_tp's Float8 plans and apply_fsdp as without it).

What torchao does there (pytorch/ao v0.18.0):
- torchao/float8/float8_linear.py Float8Linear.from_float: the weight a WeightWithDynamicFloat8CastTensor; apply_tp's
  distribute_tensor makes it the local tensor of a DTensor sharded over tp, fully_shard shards that local tensor over dp;
- torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather (228-251): the dp shard of the
  TP-local weight (fp32) cast to FP8 (dynamically, its amax all-reduced over the mesh, or with the scale
  precompute_float8_dynamic_scale_for_fsdp set), its FP8 data gathered over dp; fsdp_post_all_gather: a Float8TrainingTensor
  over the TP-local weight, which FSDP wraps in the tp DTensor;
- torchao/float8/distributed_utils.py tensor_already_casted_to_fp8 (14-27): a DTensor whose local tensor is a
  Float8TrainingTensor counts as cast, so matmul_with_hp_or_float8_args (float8_linear.py 68, 125) casts the weight neither
  in forward nor in backward.
The scales are dynamic here (precompute off: its torch._foreach_norm over DTensors is filed by the tracker under
FakeTensorMode at the weights' global size, torchao_float8_fsdp.py's docstring).

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_all_gather_tp_pp_tracker.json, which
tests/ground_truth/test_torch_memory_float8_all_gather_tp_pp.py holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_all_gather_tp_pp [tp | pp | pp_cp]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_all_gather_tp_pp_tracker.json"

# (shape, dp, tp, checkpointing): shapes of torchao_float8_tp.py (its SHAPES), dp > 1 (the FP8 all-gather shards over dp)
TP_CASES = [("logits-heavy", 2, 2, "none"), ("logits-heavy", 2, 2, "full"), ("batch-one", 2, 2, "full"), ("wide", 2, 2, "none"),
            ("wide", 4, 2, "full"), ("mha", 2, 4, "full")]
# (layers, pp, stage, its layers, micro-batches, checkpointing, tp): torchao_float8_pp.py's cases
PP_CASES = [(4, 2, 0, (0, 2), 4, "full", 2), (4, 2, 1, (2, 4), 4, "full", 2), (4, 2, 0, (0, 2), 4, "none", 2),
            (4, 2, 0, (0, 2), 4, "full", 1), (6, 3, 1, (2, 4), 4, "full", 1)]
# (layers, pp, stage, its layers, micro-batches, checkpointing, tp, cp): torchao_float8_pp_cp.py's, Table 6's CP 2 / 4 / 8 rows in small
PP_CP_CASES = [(4, 2, 0, (0, 2), 4, "full", 2, 2), (4, 2, 1, (2, 4), 4, "full", 2, 2)]


def tp_rows() -> list[dict]:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_tp import tracked_tp_peak
    from .torchao_float8_tp import SHAPES

    rows = []
    for shape, dp, tp, ac in TP_CASES:
        hidden, heads, kv_heads, ffn, layers, vocab, b, s = SHAPES[shape]
        config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
        tracked = tracked_tp_peak(config, vocab, b, s, dp, tp, ac, float8=True, fp8_all_gather=True)
        print(shape, dp, tp, ac, f"{tracked['Total']:,.0f}", flush=True)
        rows.append({"shape": shape, "dims": list(SHAPES[shape]), "dp": dp, "tp": tp, "ac": ac, "peak": tracked})
    return rows


def pp_rows() -> list[dict]:
    from . import tiny_torchtitan_pp
    from .tiny_llama import LlamaConfig
    from .torchao_float8_pp import SHAPE

    rows = []
    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    for case in PP_CASES:
        layers, pp, stage, bounds, micro_batches, ac, tp = case
        config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
        total = tiny_torchtitan_pp.tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, tp=tp, float8=True,
                                                      fp8_all_gather=True)  # fmt: skip
        print(case, f"{total:,.0f}", flush=True)
        rows.append({"dims": list(SHAPE), "layers": layers, "pp": pp, "stage": stage, "bounds": list(bounds), "micro_batches": micro_batches,
                     "ac": ac, "dp": 2, "tp": tp, "peak": total, "parts": dict(tiny_torchtitan_pp.LAST_PARTS)})
    return rows


def pp_cp_rows() -> list[dict]:
    from . import tiny_torchtitan_pp
    from .tiny_llama import LlamaConfig
    from .torchao_float8_pp import SHAPE

    rows = []
    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    for case in PP_CP_CASES:
        layers, pp, stage, bounds, micro_batches, ac, tp, cp = case
        config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
        total = tiny_torchtitan_pp.tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, tp=tp, float8=True,
                                                      cp=cp, fp8_all_gather=True)  # fmt: skip
        print(case, f"{total:,.0f}", flush=True)
        rows.append({"dims": list(SHAPE), "layers": layers, "pp": pp, "stage": stage, "bounds": list(bounds), "micro_batches": micro_batches,
                     "ac": ac, "dp": 2, "tp": tp, "cp": cp, "peak": total, "parts": dict(tiny_torchtitan_pp.LAST_PARTS)})
    return rows


def main() -> None:
    import torchao

    which = sys.argv[1:] or ["tp", "pp", "pp_cp"]
    data = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    data["made_with"] = {"torch": torch.__version__, "torchao": torchao.__version__, "script": "tests/ground_truth/torchao_float8_all_gather_tp_pp.py"}
    if "tp" in which:
        data["tp_cases"] = tp_rows()
    if "pp" in which:
        data["pp_cases"] = pp_rows()
    if "pp_cp" in which:
        data["pp_cp_cases"] = pp_cp_rows()
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
