"""Ground truth for the compiled Float8 block in torchtitan's step walk (parcalc.core.memory_float8_compile).

1. The programs are Inductor's code as read by tests/ground_truth/inductor_float8_programs.py from the committed logs
   (tests/fixtures/torchao/inductor_float8_*.log); the same reading of the bf16 block's code
   (inductor_bf16_*.log) walks every case to the byte of memory_torchtitan_compile's hand-read programs, which the
   profiler holds (test_torch_memory_torchtitan_compile.py).
2. The walk against profiler-counted compiled Float8 steps on the CPU (torch 2.13.0, torchao 0.18.0:
   tests/ground_truth/torchao_float8_compile.py, fixture tests/fixtures/torchao/float8_compile_profiler.json; torchao is
   not a test dependency, so the re-measure test skips without it). What the CPU has that the walk leaves out and the
   other way round, both mechanisms: the CPU flash-attention backward's copy of the logsumexp (b x heads x s fp32, live at
   each of these peaks; a GPU's backward reads the logsumexp as it is) and the amax / scale scalars, which the walk holds
   as the caching allocator's 512-byte blocks where the CPU allocates their 2 or 4 bytes. Measured 2026-11-29: the walk
   0.9984-0.9998 of the profiler's peak in all nine cases, and with those two CPU differences put back within 800 bytes
   (0-768 B: the profiler's odd 8-byte allocations), the phase of each peak as the walk says.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from .titan_walks import titan_llama, tracked_step_peak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_compile_profiler.json"


def _walk(shape: tuple, ac: str, float8: bool = True, programs: tuple | None = None, compiled: bool = True):  # type: ignore[no-untyped-def]
    """parcalc's walk of the step the profiler counts: torchtitan's Transformer without FSDP's hooks (bf16 parameters)."""
    import parcalc.core.memory_torchtitan_compile as compiled_block
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan import walk_step
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    x = replace(shapes_of(model, b, s, 2.0, 2.0, False), float8=float8)
    walk = Walk()
    if programs is not None:  # the bf16 programs as read from the generated code, in the hand-read ones' place
        saved = compiled_block.FORWARD, compiled_block.BACKWARD
        compiled_block.FORWARD, compiled_block.BACKWARD = programs
    try:
        walk_step(walk, model, x, (ac,) * layers, 1, StepHooks(), compiled)
    finally:
        if programs is not None:
            compiled_block.FORWARD, compiled_block.BACKWARD = saved
    return peak_of(walk), x


def _read(precision: str) -> tuple[dict, dict]:
    from parcalc.core.memory_float8_compile import as_block_program

    from .inductor_float8_programs import committed_logs, programs

    read = {policy: programs(log) for policy, log in committed_logs(precision).items()}
    return ({p: as_block_program(tuple(f)) for p, (f, _) in read.items()}, {p: as_block_program(tuple(b)) for p, (_, b) in read.items()})


def test_the_programs_are_the_committed_code_as_read() -> None:
    from parcalc.core import memory_float8_compile

    forward, backward = _read("float8")
    assert forward == memory_float8_compile.FLOAT8_FORWARD
    assert backward == memory_float8_compile.FLOAT8_BACKWARD


SHAPES = {  # (hidden, heads, kv heads, ffn, layers, vocab, b, s): torchao_float8_compile.SHAPES
    "mlp-heavy": (128, 4, 2, 1536, 2, 64, 8, 256),
    "activation-heavy": (256, 4, 2, 768, 2, 64, 8, 256),
    "four-repeats": (256, 8, 2, 768, 3, 64, 8, 256),
}


def test_reading_the_bf16_code_gives_the_hand_read_programs_peaks() -> None:
    """The reader on Inductor's bf16 code of the same block: every shape and policy's walked peak equals the hand-read
    programs' to the byte (53,461,504 B for mlp-heavy none, 49,373,696 op, 43,812,352 full: the profiler's, within 1 KB)."""
    read = _read("bf16")
    for shape in SHAPES.values():
        for ac in ("none", "op", "full"):
            hand, _ = _walk(shape, ac, float8=False)
            ours, _ = _walk(shape, ac, float8=False, programs=read)
            assert ours.allocated == hand.allocated, (shape, ac)


def _cases() -> list:  # type: ignore[type-arg]
    return json.loads(FIXTURE.read_text())["cases"]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: f"{c['shape']}-{c['ac']}")
def test_compiled_float8_step_peak_matches_every_allocation(case: dict) -> None:
    ours, x = _walk(tuple(case["dims"]), case["ac"])
    measured = case["peak_bytes"]
    scalars = sum(t.bytes for t in ours.live if t.what.startswith("Float8 amax")) / 512
    lse_copy = x.b * x.heads * x.s * 4
    cpu = ours.allocated + lse_copy - scalars * (512 - 4)  # the walk as the CPU allocates (module docstring)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.6f}; "
          f"{scalars:.0f} scalars, as the CPU allocates {cpu:,.0f}")  # fmt: skip
    assert cpu == pytest.approx(measured, abs=1024), (ours.phase, ours.parts)
    assert ours.allocated == pytest.approx(measured, rel=2e-3)  # the two above: 0.9984-0.9998 here
    assert ours.phase.startswith("backward: layer")


def test_compiled_float8_keeps_less_than_eager_float8() -> None:
    """Inductor's fused casts hold 1 byte an element where eager torchao's hold 9 (memory_torchao_float8), and keep no
    abs(x) for selective op checkpointing: the compiled Float8 peak is below the eager Float8 walk's for every policy."""
    for ac in ("none", "op", "full"):
        compiled, _ = _walk(SHAPES["mlp-heavy"], ac)
        eager, _ = _walk(SHAPES["mlp-heavy"], ac, compiled=False)
        assert compiled.allocated < eager.allocated, ac


def test_the_profiler_count_is_reproduced() -> None:
    """Re-measures one case where torchao is installed (not a test dependency)."""
    pytest.importorskip("torchao")
    from .torchao_float8_compile import SHAPES as MEASURED
    from .torchao_float8_compile import compiled_float8_step_peak

    case = next(c for c in _cases() if c["shape"] == "activation-heavy" and c["ac"] == "op")
    assert compiled_float8_step_peak(MEASURED["activation-heavy"], "op") == case["peak_bytes"]


FSDP_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_compile_fsdp_profiler.json"


def _fsdp_peak(case: dict, compiled: bool):  # type: ignore[no-untyped-def]
    """parcalc's FSDP2 step of torchao_float8_compile_fsdp.py: 4 ranks, the FP8 all-gather, for-loop AdamW, real tensors (one
    embedding-gradient table), no cuBLAS workspace, the last block not resharded (torchtitan)."""

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = case["dims"]
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, case["ranks"], "fp8", case["ac"], embedding_backward_tables=1,
                             float8_all_gather=True, compiled=compiled)  # fmt: skip


def _fsdp_cases() -> list:  # type: ignore[type-arg]
    return json.loads(FSDP_FIXTURE.read_text())["cases"]


# measured 2026-11-29: the compiled step's peak above the eager one's, parcalc against the profiler: mlp-heavy none
# -27,266,560 / -27,246,514 B, op -22,883,328 / -22,863,808, full -12,657,664 / -12,632,028, activation-heavy none
# -22,367,744 / -22,347,698 (each within the two CPU differences); activation-heavy op -22,440,960 / -23,208,384 and full
# -11,428,864 / -12,977,116 are not: there the walk's compiled peak is one block's unsharded parameters (op: its FP8 linears,
# 786,432 B, and its norms, 1,024 B) or two (full) above the measured one, both eager peaks agreeing; not explained yet (the
# compiled block's programs read from the activation-heavy shape's own code walk the same peak)
UNEXPLAINED = {("activation-heavy", "op"): "the walk's compiled peak is 787,456 B (one block's unsharded parameters) above the measured",
               ("activation-heavy", "full"): "the walk's compiled peak is 1,548,252 B (about two blocks' unsharded parameters) above the "
                                             "measured"}  # fmt: skip


def _fsdp_param(case: dict):  # type: ignore[no-untyped-def]
    why = UNEXPLAINED.get((case["shape"], case["ac"]))
    return pytest.param(case, id=f"{case['shape']}-{case['ac']}", marks=[pytest.mark.xfail(strict=True, reason=why)] if why else [])


@pytest.mark.parametrize("case", [_fsdp_param(c) for c in _fsdp_cases()])
def test_the_fp8_all_gather_block_inside_the_fsdp_step(case: dict) -> None:
    """The compiled step's peak above the eager one's, FP8 all-gather, FSDP2 on 4 fake ranks over real CPU tensors
    (tests/ground_truth/torchao_float8_compile_fsdp.py; the eager walk is held to FSDPMemTracker by
    test_torch_memory_float8.py). The difference is the compiled block's programs (*_FP8_WEIGHTS) within the two CPU
    differences of the module docstring (the logsumexp copy, the scalars' 512-byte blocks)."""
    eager, compiled = _fsdp_peak(case, False), _fsdp_peak(case, True)
    ours = compiled.allocated - eager.allocated
    measured = case["compiled_peak_bytes"] - case["eager_peak_bytes"]
    _, heads, _, _, _, _, b, s = case["dims"]
    scalars = sum(t.bytes for t in compiled.live if t.what.startswith("Float8 amax")) / 512
    print(f"compiled - eager: parcalc {ours:,.0f} B, measured {measured:,} B ({compiled.phase}; {scalars:.0f} scalars)")
    assert abs(ours - measured) <= b * heads * s * 4 + 512 * scalars, (compiled.phase, compiled.parts)
    assert compiled.phase == eager.phase


def test_a_query_width_other_than_hidden_is_a_gap() -> None:
    """The Float8 programs name wq's and wo's widths as one (torchtitan's Llama: head_dim = dim // n_heads), so a model whose
    heads x head_dim differs from its hidden size keeps the textbook sum with --compile --precision fp8, named."""
    from parcalc.core.choices import Precision
    from parcalc.core.memory_fsdp import compile_gaps
    from parcalc.presets import load_model

    llama = load_model("llama3-8b")
    assert compile_gaps(llama, 1, 1, "torchtitan", Precision.FP8) == []
    wide = replace(llama, head_dim=2 * llama.head_dim)
    assert compile_gaps(wide, 1, 1, "torchtitan", Precision.FP8) == [
        "--compile --precision fp8 with heads x head_dim != hidden (the compiled Float8 block is read from torchtitan's Llama, "
        "whose head_dim is dim // n_heads)"]  # fmt: skip
    assert compile_gaps(wide, 1, 1, "torchtitan", Precision.MIXED_BF16) == []
