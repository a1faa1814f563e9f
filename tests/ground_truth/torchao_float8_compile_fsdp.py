"""Ground truth for the compiled Float8 block with its weights all-gathered in FP8 (enable_fsdp_float8_all_gather:
parcalc.core.memory_float8_compile's *_FP8_WEIGHTS programs): torchtitan's Transformer converted by torchtitan's float8
converter with the FP8 all-gather, apply_ac, apply_compile, then fully_shard as torchtitan does (parallelize_llama.py at
9dec370), on a fake process group of 4 ranks over real CPU tensors (its collectives move no data but every buffer is
allocated), one training step's every allocation counted with torch.profiler, less torch._scaled_mm's CPU scratch
(torchao_float8_compile.allocation_peak_without_cpu_scaled_mm_scratch).

What is compared is the compiled step's peak above the eager one's, both counted the same way from the same state (the
sharded parameters and AdamW's states live before the step cancel): parcalc's eager Float8 walk is held to FSDPMemTracker
by test_torch_memory_float8.py, so the difference checks the compiled block's programs inside the FSDP step. Writes
tests/fixtures/torchao/float8_compile_fsdp_profiler.json; run from the repository root where torchao is installed:

    python -m tests.ground_truth.torchao_float8_compile_fsdp
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_compile_fsdp_profiler.json"
SHAPES = {"mlp-heavy": (128, 4, 2, 1536, 2, 64, 8, 256), "activation-heavy": (256, 4, 2, 768, 2, 64, 8, 256)}
CASES = [(shape, ac) for shape in SHAPES for ac in ("none", "op", "full")]


def step_peak(shape: tuple, ac: str, compiled: bool, mesh) -> int:  # type: ignore[no-untyped-def]
    """The second step's allocation peak (forward, loss, backward, AdamW's step) above what was live when it began."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan import Transformer, apply_ac, loss_fn
    from .torchao_float8_compile import allocation_peak_without_cpu_scaled_mm_scratch

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    torch.manual_seed(0)
    torch._dynamo.reset()
    c = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    model = Transformer(c, vocab, s)
    config = Float8LinearConfig(enable_fsdp_float8_all_gather=True, force_recompute_fp8_weight_in_bwd=False)
    convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn != "output")
    apply_ac(model, ac)
    if compiled:
        for layer_id, block in model.layers.items():
            model.layers[layer_id] = torch.compile(block, backend="inductor", fullgraph=True)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer_id, block in model.layers.items():
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=int(layer_id) < c.layers - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    ids = torch.randint(0, vocab, (b, s))

    def step() -> None:
        opt.zero_grad()
        pred = model(ids)
        loss = loss_fn(pred, ids)
        del pred
        loss.backward()
        opt.step()

    step()  # compiles; AdamW's states
    try:
        return allocation_peak_without_cpu_scaled_mm_scratch(step)
    finally:
        torch._dynamo.reset()


def main() -> None:
    import torchao

    from .torchao_float8_fsdp import fake_mesh

    mesh = fake_mesh(4)
    rows = []
    for name, ac in CASES:
        eager, compiled = (step_peak(SHAPES[name], ac, c, mesh) for c in (False, True))
        print(name, ac, eager, compiled, compiled - eager, file=sys.stderr, flush=True)
        rows.append({"shape": name, "dims": list(SHAPES[name]), "ac": ac, "ranks": 4, "eager_peak_bytes": eager,
                     "compiled_peak_bytes": compiled})
    FIXTURE.write_text(json.dumps({"torch": torch.__version__, "torchao": torchao.__version__,
                                   "method": "torch.profiler profile_memory over real CPU tensors on a fake process group: the "
                                             "second step's allocation peak above its start, eager and compiled "
                                             "(tests/ground_truth/torchao_float8_compile_fsdp.py)",
                                   "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
