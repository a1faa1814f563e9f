"""Ground truth for the torchtitan walk's Float8 linears (parcalc.core.memory_torchao_float8): FSDPMemTracker over
torchtitan's Llama Transformer (tiny_torchtitan.py) whose linears torchtitan's float8 converter has swapped for torchao's
Float8Linear, then wrapped as torchtitan wraps it, on a fake process group of 4 ranks under FakeTensorMode.

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu and torchao
0.18.0) and writes tests/fixtures/torchao/float8_fsdp_tracker.json, which tests/ground_truth/test_torch_memory_float8.py
holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_fsdp

The converter is pytorch/torchtitan torchtitan/float8.py (Float8Converter at 0f892e8): Float8LinearConfig(
enable_fsdp_float8_all_gather=..., force_recompute_fp8_weight_in_bwd=False), convert_to_float8_training(model,
module_filter_fn=lambda mod, fqn: fqn != "output") before apply_ac and apply_fsdp (train.py). With the FP8 all-gather
each weight's scale is computed dynamically in fsdp_pre_all_gather (abs and max of the fp32 shard, its amax all-reduced):
torchtitan's default, --float8.precompute_float8_dynamic_scale_for_fsdp off. With it on, the scales come from one
torch._foreach_norm over the sharded weights after the optimizer step, which FSDPMemTracker under FakeTensorMode files at
the weights' global size (its foreach-over-DTensor artifact, as for foreach AdamW in test_torch_memory_fsdp.py: 180 MB of
fp32 "activations" for the weight-heavy shape, where a GPU's fused kernel allocates a few scalars), so it is not run. Later
torchtitan (components/quantization/float8.py) also skips linears whose dims are not multiples of 16: every linear here
has such dims, so both filters convert the same linears.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_fsdp_tracker.json"

# (hidden, heads, kv heads, ffn, layers, vocab, b, s): the shapes of test_torch_memory_torchtitan.py
SHAPES = {
    "weight-heavy": (1024, 8, 2, 2816, 4, 2048, 8, 64),
    "activation-heavy": (512, 4, 2, 1536, 4, 1024, 16, 256),
    "vocab-heavy": (256, 4, 4, 768, 2, 16000, 8, 128),
}
CASES = [(shape, ac, fp8_all_gather) for shape in SHAPES for ac in ("none", "full", "op") for fp8_all_gather in (False, True)]


def fake_mesh(world: int):  # type: ignore[no-untyped-def]
    """fake_process_group.fake_mesh without pytest (absent from the torchao environment)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    return init_device_mesh("cpu", (world,))


def tracked_float8_peak(shape: tuple, ac: str, fp8_all_gather: bool, mesh) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """tiny_torchtitan.tracked_torchtitan_peak with torchtitan's float8 converter applied first."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan import Transformer, apply_ac, two_tracked_steps

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    c = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    with FakeTensorMode():
        model = Transformer(c, vocab, s)
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=fp8_all_gather, force_recompute_fp8_weight_in_bwd=False)
        convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn != "output")
        apply_ac(model, ac)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer_id, block in model.layers.items():
            fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=int(layer_id) < c.layers - 1)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        ids = torch.randint(0, vocab, (b, s))
        return two_tracked_steps(FSDPMemTracker(mod=model, optm=opt), model, opt, ids)  # train.py's step twice, as the bf16 cases


def main() -> None:
    import torchao

    mesh = fake_mesh(4)
    rows = []
    only = sys.argv[1:]
    for shape_name, ac, fp8_all_gather in CASES:
        if only and shape_name not in only:
            continue
        tracked = tracked_float8_peak(SHAPES[shape_name], ac, fp8_all_gather, mesh)
        print(shape_name, ac, fp8_all_gather, f"{tracked['Total']:,.0f}", flush=True)
        rows.append({"shape": shape_name, "dims": list(SHAPES[shape_name]), "ac": ac, "fp8_all_gather": fp8_all_gather, "ranks": 4,
                     "peak": tracked})
    if not only:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"made_with": {"torch": torch.__version__, "torchao": torchao.__version__,
                                                     "script": "tests/ground_truth/torchao_float8_fsdp.py"},
                                       "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
