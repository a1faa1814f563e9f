"""Ground truth for the compiled Float8 block under context parallelism (parcalc.core.memory_torchtitan_cp_compile's float8
programs): tiny_torchtitan_cp_compile.cp_step_peak with torchtitan's float8 converter applied first (torchao 0.18
Float8Linear, tensorwise, every linear but the output projection), each block compiled, under torch's context_parallel on
fake ranks, one step's every allocation counted with torch.profiler less torch._scaled_mm's CPU scratch
(torchao_float8_compile.allocation_peak_without_cpu_scaled_mm_scratch: the CPU kernel dequantizes to fp32 inside itself,
cuBLASLt does not).

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu, torchao 0.18.0,
gcc) and writes tests/fixtures/torchtitan_cp/float8_cp_compile_profiler.json, which
tests/ground_truth/test_torch_memory_torchtitan_cp_compile.py holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_cp_compile
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_cp" / "float8_cp_compile_profiler.json"

# (hidden, heads, KV heads, ffn, layers, vocab, b, global s): every dim a multiple of 16 (torch._scaled_mm)
SHAPES = {"attention": (128, 8, 2, 1536, 2, 64, 8, 512), "ring-heavy": (256, 8, 2, 640, 1, 64, 2, 3072)}
CASES = [("attention", "none", 2), ("attention", "full", 2), ("ring-heavy", "none", 4), ("ring-heavy", "full", 8)]


def float8_cp_step_peak(shape: tuple, ac: str, cp: int) -> int:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    from .tiny_torchtitan_cp_compile import cp_step_peak
    from .torchao_float8_compile import allocation_peak_without_cpu_scaled_mm_scratch

    def convert(model) -> None:  # type: ignore[no-untyped-def]
        convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=lambda mod, fqn: fqn != "output")

    return cp_step_peak(shape, ac, cp, convert=convert, peak=allocation_peak_without_cpu_scaled_mm_scratch)


def main() -> None:
    import torchao

    rows = []
    for name, ac, cp in CASES:
        peak = float8_cp_step_peak(SHAPES[name], ac, cp)
        print(name, ac, cp, peak, file=sys.stderr, flush=True)
        rows.append({"shape": name, "dims": list(SHAPES[name]), "ac": ac, "cp": cp, "peak_bytes": peak})
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"torch": torch.__version__, "torchao": torchao.__version__,
                                   "method": "torch.profiler profile_memory on CP rank 0 of fake ranks under context_parallel, the "
                                             "second step's allocation peak above its start, less torch._scaled_mm's CPU scratch "
                                             "(tests/ground_truth/torchao_float8_cp_compile.py)",
                                   "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
