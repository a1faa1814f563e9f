"""Inductor's code for torchtitan's compiled block under context parallelism, read as the step walk's programs
(parcalc.core.memory_torchtitan_cp_compile), by the reader of tests/ground_truth/inductor_float8_programs.py (Python's
reference counting followed through each `call` function; its docstring).

Under torch's context_parallel the ring attention is traced into the block's graph (tiny_torchtitan_cp_compile.py's
docstring: how they compose), so the generated code holds the ring too, unrolled over the CP ranks: the K/V concatenated
and all-gathered (c10d_functional.all_gather_into_tensor, a new storage of cp x the concatenation), the SDPA steps (ATen
fallbacks: the first over all the rank's queries, the later ones on rank 0 over the second half), the merges fused into
Inductor kernels, and in the backward the dK/dV rotations (all_to_all_single, a new storage each). One program per CP
degree, policy and precision: the logs are made at cp 2, 4 and 8 and the walk follows those degrees.

The logged shape (SHAPE, a rank's s = 256 tokens) is chosen so that every (elements, bytes an element) of the code is one
size symbol: 8 query heads over 2 KV heads (a half of the queries, T x q / 2, is not a KV width), every width distinct.

Made with torch 2.13.0 (bf16: the project's environment; float8: with torchao 0.18.0 installed), gcc for Inductor's C++
code, from the repository root:

    python -m tests.ground_truth.inductor_cp_programs --logs bf16          # writes tests/fixtures/torchtitan_cp/inductor_*.log
    python -m tests.ground_truth.inductor_cp_programs --logs float8        # (where torchao is installed)
    python -m tests.ground_truth.inductor_cp_programs                      # prints memory_torchtitan_cp_compile's programs
"""

from __future__ import annotations

import sys
from pathlib import Path

from .inductor_float8_programs import paired_module_data, programs, write_traced_log

# (hidden, heads, KV heads, ffn, layers, vocab, b, a rank's s): the global sequence is cp x s
SHAPE = (128, 8, 2, 1536, 1, 64, 8, 256)
DEGREES = (2, 4, 8)
POLICIES = ("none", "full")
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_cp"
PRECISIONS = ("bf16", "float8")


def symbols(cp: int) -> dict[tuple[int, int], str]:
    """(elements, bytes an element) -> the size symbol (parcalc.core.memory_torchtitan_compile.sizes_of) at SHAPE and `cp`."""
    h, heads, kv_heads, f, _layers, _vocab, b, s = SHAPE
    T, kv, hd = b * s, h // heads * kv_heads, h // heads
    base = {(T, 4): "T4", (T * h, 2): "Th", (T * kv, 2): "Tkv", (T * f, 2): "Tf", (T * h, 4): "Tq4", (T * kv, 4): "Tkv4",
            (b * heads * s, 4): "lse", (s * hd // 2, 8): "conj", (h, 2): "h", (h * h, 2): "hq", (h * kv, 2): "hkv", (h * f, 2): "hf",
            (T * h, 1): "Th1", (T * kv, 1): "Tkv1", (T * f, 1): "Tf1", (h * h, 1): "hq1", (h * kv, 1): "hkv1", (h * f, 1): "hf1",
            (T * f, 4): "Tf4", (1, 2): "scalar", (1, 4): "scalar"}  # fmt: skip
    ring = {(2 * T * h, 2): "kvcat", (cp * 2 * T * h, 2): "kvgather", (T * h // 2, 2): "Tq_half", (T * h // 2, 4): "Tq4_half",
            (b * heads * s // 2, 4): "lse_half", (2 * T * h, 4): "kvcat4"}  # fmt: skip
    assert not set(base) & set(ring), "a ring size equals another's at this shape"
    return base | ring


def log_path(precision: str, policy: str, cp: int) -> Path:
    return LOGS / f"inductor_{precision}_{policy}_cp{cp}.log"


def _trace(precision: str, policy: str, cp: int) -> None:
    """One compiled step under context_parallel (run with TORCH_LOGS=output_code,graph_code: its log is the code)."""
    from .tiny_torchtitan_cp_compile import cp_step_peak

    convert = None
    if precision == "float8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        def convert(model) -> None:  # type: ignore[no-untyped-def]  # torchtitan's float8 converter: every linear but the output
            convert_to_float8_training(model, config=Float8LinearConfig(), module_filter_fn=lambda mod, fqn: fqn != "output")

    cp_step_peak((*SHAPE[:-1], SHAPE[-1] * cp), policy, cp, convert=convert)


def committed_programs() -> dict[tuple[str, int, str], tuple[list, list]]:
    """{(precision, cp, policy): (forward, backward)} read from the committed logs."""
    return {(precision, cp, policy): programs(log_path(precision, policy, cp).read_text(), symbols(cp))
            for precision in PRECISIONS for cp in DEGREES for policy in POLICIES}  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trace"]:
        _trace(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1:2] == ["--logs"]:
        LOGS.mkdir(parents=True, exist_ok=True)
        for cp in DEGREES:
            for policy in POLICIES:
                write_traced_log("tests.ground_truth.inductor_cp_programs", (sys.argv[2], policy, str(cp)), log_path(sys.argv[2], policy, cp))
    else:  # the programs of parcalc.core.memory_torchtitan_cp_compile
        print(paired_module_data("tuple[str, int, str]", committed_programs()))
