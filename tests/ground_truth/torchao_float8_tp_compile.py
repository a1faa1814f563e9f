"""Ground truth for the compiled Float8 block under tensor parallelism (parcalc.core.memory_torchtitan_tp_compile's float8
programs): tiny_torchtitan_tp_compile.tp_step_peak with torchtitan's float8 converter applied first (torchao 0.18
Float8Linear, tensorwise, every linear but the output projection) and apply_tp's Float8 styles (Float8ColwiseParallel,
Float8RowwiseParallel, PrepareFloat8ModuleInput), each block compiled, on fake ranks, one step's every allocation counted with
torch.profiler less the CPU kernels' scratch (tiny_torchtitan_tp_compile.allocation_peak_without_cpu_scratch: the CPU flash
attention's per-thread buffers, torch._scaled_mm's fp32 dequantization, which cuBLASLt does not allocate).

torchao is not a dependency of parcalc: this script runs where it is installed (made with torch 2.13.0+cpu, torchao 0.18.0,
gcc) and writes tests/fixtures/torchtitan_tp/float8_tp_compile_profiler.json, which
tests/ground_truth/test_torch_memory_torchtitan_tp_compile.py holds parcalc to. Run from the repository root:

    python -m tests.ground_truth.torchao_float8_tp_compile
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_tp" / "float8_tp_compile_profiler.json"

# (hidden, heads, KV heads, ffn, layers, vocab, b, s): every local dim a multiple of 16 (torch._scaled_mm)
SHAPES = {"logged": (256, 32, 8, 1536, 2, 64, 4, 128), "wide": (512, 16, 8, 2816, 2, 256, 2, 256),
          "batch-one": (256, 32, 8, 1536, 2, 64, 1, 512)}  # fmt: skip
CASES = [("logged", "none", 2), ("logged", "full", 2), ("wide", "full", 8), ("batch-one", "full", 8)]


def float8_tp_step_peak(shape: tuple, ac: str, tp: int) -> int:
    from .tiny_torchtitan_tp_compile import tp_step_peak

    return tp_step_peak(shape, ac, tp, float8=True)  # its count: less the CPU kernels' scratch, _scaled_mm's among them


def main() -> None:
    import torchao

    rows = []
    for name, ac, tp in CASES:
        peak = float8_tp_step_peak(SHAPES[name], ac, tp)
        print(name, ac, tp, peak, file=sys.stderr, flush=True)
        rows.append({"shape": name, "dims": list(SHAPES[name]), "ac": ac, "tp": tp, "peak_bytes": peak})
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"torch": torch.__version__, "torchao": torchao.__version__,
                                   "method": "torch.profiler profile_memory on TP rank 0 of fake ranks under apply_tp with torchao's "
                                             "Float8 styles and loss parallel, the second step's allocation peak above its start, "
                                             "less the CPU kernels' scratch: flash attention's, torch._scaled_mm's (tests/ground_truth/tiny_torchtitan_tp_compile.py "
                                             "allocation_peak_without_cpu_scratch)",
                                   "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
