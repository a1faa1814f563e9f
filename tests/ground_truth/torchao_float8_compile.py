"""Ground truth for the compiled Float8 block in torchtitan's step walk (parcalc.core.memory_torchao_float8_compile):
torchtitan's Transformer with torchtitan's float8 converter applied (torchao 0.18 Float8Linear, tensorwise, every linear but
the output projection), then apply_ac and apply_compile as parallelize_llama.py does, one step's every allocation counted on
the CPU with torch.profiler (tiny_torchtitan_compile.allocation_peak; why the profiler and not MemTracker: its docstring).
No FSDP (its buffers are eager, around the compiled block), so the weights are plain bf16 parameters and each Float8Linear
casts its weight inside the compiled code: the walk's no-FP8-all-gather case.

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu, torchao 0.18.0
and gcc for Inductor's C++ code; torch._scaled_mm runs on the CPU there) and writes
tests/fixtures/torchao/float8_compile_profiler.json, which tests/ground_truth/test_torch_memory_float8_compile.py holds parcalc
to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_compile
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_compile_profiler.json"

# (hidden, heads, kv heads, ffn, layers, vocab, b, s): test_torch_memory_torchtitan_compile.py's shapes (every dim a multiple of
# 16, as torch._scaled_mm needs)
SHAPES = {
    "mlp-heavy": (128, 4, 2, 1536, 2, 64, 8, 256),
    "activation-heavy": (256, 4, 2, 768, 2, 64, 8, 256),
    "four-repeats": (256, 8, 2, 768, 3, 64, 8, 256),
}
CASES = [(shape, ac) for shape in SHAPES for ac in ("none", "op", "full")]


def allocation_peak_without_cpu_scaled_mm_scratch(step) -> int:  # type: ignore[no-untyped-def]
    """tiny_torchtitan_compile.allocation_peak, less what the CPU's torch._scaled_mm allocates inside itself: on the CPU it
    dequantizes both FP8 operands to fp32 and runs an fp32 mm into `out` (pytorch/pytorch v2.13.0
    aten/src/ATen/native/Blas.cpp _scaled_mm_out_cpu_emulated), scratch that cuBLASLt's FP8 GEMM on a GPU does not allocate
    (its output is Inductor's buffer, passed as out=, or, eager, allocated by the op). The memory events inside each
    aten::_scaled_mm count as one, at its start: what the op leaves allocated (nothing under Inductor, the output eager)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = list(prof.profiler.kineto_results.events())
    inside = sorted((e.start_ns(), e.start_ns() + e.duration_ns()) for e in events if e.name() == "aten::_scaled_mm")
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    # each _scaled_mm's events become one: what it leaves allocated (its output where Inductor passed none), at its start
    kept = [(t, size) for t, size in memory if not any(start <= t <= end for start, end in inside)]
    kept += [(start, sum(size for t, size in memory if start <= t <= end)) for start, end in inside]
    kept.sort()
    now = peak = 0
    for _, size in kept:
        now += size
        peak = max(peak, now)
    return peak


def compiled_float8_step_peak(shape: tuple, ac: str) -> int:
    """tiny_torchtitan_compile.compiled_step_peak with torchtitan's float8 converter applied before apply_ac (train.py's
    order: model converters, then parallelize_llama), the CPU _scaled_mm's fp32 scratch counted as its allocation."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_compile import compiled_step_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape

    def convert(model) -> None:  # type: ignore[no-untyped-def]
        convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=lambda mod, fqn: fqn != "output")

    return compiled_step_peak(LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers), vocab, b, s, ac,
                              convert=convert, peak=allocation_peak_without_cpu_scaled_mm_scratch)  # fmt: skip


def main() -> None:
    import torchao

    rows = []
    for name, ac in CASES:
        peak = compiled_float8_step_peak(SHAPES[name], ac)
        print(name, ac, peak, file=sys.stderr)
        rows.append({"shape": name, "dims": list(SHAPES[name]), "ac": ac, "peak_bytes": peak})
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"torch": torch.__version__, "torchao": torchao.__version__,
                                   "method": "torch.profiler profile_memory, the second step's allocation peak above what was live "
                                             "before it (tests/ground_truth/torchao_float8_compile.py)",
                                   "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
