"""Inductor's code for torchtitan's compiled block under tensor parallelism, read as the step walk's programs
(parcalc.core.memory_torchtitan_tp_compile), by the reader of tests/ground_truth/inductor_float8_programs.py (Python's
reference counting followed through each `call` function; its docstring).

Under apply_tp the block's DTensor redistributions are traced into its graph as functional collectives
(tiny_torchtitan_tp_compile.py's docstring: how they compose): the generated code holds, beside the block's own kernels on a
rank's heads and MLP width, each norm output all-gathered (c10d_functional.all_gather_into_tensor: a new storage of tp x the
shard, gathered on dim 0) and copied into the whole sequence by a fused cat kernel, wo's and w2's partial sums copied into
their tp chunks and reduce-scattered (reduce_scatter_tensor: a new storage of the shard), and in the backward the reverse.
One program per TP degree and policy (the collectives' chunk copies follow the degree): the logs are made at tp 2, 4 and 8.

The logged shape (SHAPE, b x s tokens over tp ranks) is chosen so that every (elements, bytes an element) of the code is one
size symbol at each degree but one: a rank's T x hidden / tp (the sequence shard of the residual stream) equals its
T x q / tp (its heads' queries) in torchtitan's Llama, whose head_dim is dim // n_heads (q = hidden): both are "Tsh".

Made with torch 2.13.0 (bf16: the project's environment; float8: with torchao 0.18.0 installed), gcc for Inductor's C++ code, from the repository root:

    python -m tests.ground_truth.inductor_tp_programs --logs bf16          # writes tests/fixtures/torchtitan_tp/inductor_*.log
    python -m tests.ground_truth.inductor_tp_programs --logs float8        # (where torchao is installed)
    python -m tests.ground_truth.inductor_tp_programs                      # prints memory_torchtitan_tp_compile's programs
"""

from __future__ import annotations

import sys
from pathlib import Path

from .inductor_float8_programs import paired_module_data, programs, write_traced_log

# (hidden, heads, KV heads, ffn, layers, vocab, b, s): 32 heads over 8 KV heads, so that at tp 8 a rank has one KV head and
# four query heads (repeat_kv copies, as Llama 3 70B's and 405B's 64 / 128 heads over 8 KV heads at tp 8)
SHAPE = (256, 32, 8, 1536, 1, 64, 4, 128)
BATCH_ONE = (256, 32, 8, 1536, 1, 64, 1, 512)  # micro-batch 1: the all-gather's dim-0 layout is the sequence's
DEGREES = (2, 4, 8)
POLICIES = ("none", "full")
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_tp"
PRECISIONS = ("bf16", "float8")
# the logs made (float8 where torchao is installed: the published rows' degree, 8, and 2 to check it; micro-batch 1 at tp 8)
LOGGED = {"bf16": [(tp, policy, False) for tp in DEGREES for policy in POLICIES] + [(8, policy, True) for policy in POLICIES],
          "float8": [(tp, policy, False) for tp in (2, 8) for policy in POLICIES] + [(8, "full", True)]}


def symbols(tp: int, shape: tuple = SHAPE) -> dict[tuple[int, int], str]:
    """(elements, bytes an element) -> the size symbol (parcalc.core.memory_torchtitan_compile.sizes_of of a rank's local
    widths, parcalc.core.memory_torchtitan_tp_compile) at `shape` and `tp`."""
    h, heads, kv_heads, f, _layers, _vocab, b, s = shape
    T, hd = b * s, h // heads
    q, kv, fl, hl = h // tp, hd * kv_heads // tp, f // tp, heads // tp
    table: dict[tuple[int, int], str] = {}
    for key, name in (((T // tp, 4), "Ts4"), ((T // tp * h, 2), "Tsh"), ((T * h, 2), "Th"), ((T * kv, 2), "Tkv"), ((T * fl, 2), "Tf"),
                      ((T * q, 4), "Tq4"), ((T * kv, 4), "Tkv4"), ((b * hl * s, 4), "lse"), ((s * hd // 2, 8), "conj"), ((h, 2), "h"),
                      ((h * q, 2), "hq"), ((h * kv, 2), "hkv"), ((h * fl, 2), "hf"),
                      # torchao's Float8 TP styles': FP8 copies (1 byte an element; a rank's T x q / tp is its shard's size, Tsh1),
                      # fp32 ffn-wide tensors, amax / scale scalars
                      ((T * h, 1), "Th1"), ((T // tp * h, 1), "Tsh1"), ((T * kv, 1), "Tkv1"), ((T * fl, 1), "Tf1"), ((h * q, 1), "hq1"),
                      ((h * kv, 1), "hkv1"), ((h * fl, 1), "hf1"), ((T * fl, 4), "Tf4"), ((1, 2), "scalar"), ((1, 4), "scalar"), ((1, 8), "scalar")):  # fmt: skip
        assert table.get(key, name) == name, f"{name} and {table[key]} are one size at this shape"
        table[key] = name
    return table


def log_path(precision: str, policy: str, tp: int, batch_one: bool = False) -> Path:
    return LOGS / f"inductor_{precision}_{policy}_tp{tp}{'_b1' if batch_one else ''}.log"


def _trace(precision: str, policy: str, tp: int, batch_one: bool) -> None:
    """One compiled step under apply_tp (run with TORCH_LOGS=output_code,graph_code: its log is the code)."""
    from .tiny_torchtitan_tp_compile import tp_step_peak

    tp_step_peak(BATCH_ONE if batch_one else SHAPE, policy, tp, float8=precision == "float8")


def committed_programs() -> dict[tuple[str, int, str, bool], tuple[list, list]]:
    """{(precision, tp, policy, micro-batch 1): (forward, backward)} read from the committed logs."""
    out = {}
    for precision in PRECISIONS:
        for tp in DEGREES:
            for policy in POLICIES:
                for batch_one in (False, True):
                    path = log_path(precision, policy, tp, batch_one)
                    if path.exists():
                        out[(precision, tp, policy, batch_one)] = programs(path.read_text(), symbols(tp, BATCH_ONE if batch_one else SHAPE), stream="Tsh")
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trace"]:
        _trace(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1")
    elif sys.argv[1:2] == ["--logs"]:
        LOGS.mkdir(parents=True, exist_ok=True)
        for tp, policy, batch_one in LOGGED[sys.argv[2]]:
            if not log_path(sys.argv[2], policy, tp, batch_one).exists():
                write_traced_log("tests.ground_truth.inductor_tp_programs", (sys.argv[2], policy, str(tp), str(int(batch_one))),
                                 log_path(sys.argv[2], policy, tp, batch_one))
    else:  # the programs of parcalc.core.memory_torchtitan_tp_compile
        print(paired_module_data("tuple[str, int, str, bool]", committed_programs()))
