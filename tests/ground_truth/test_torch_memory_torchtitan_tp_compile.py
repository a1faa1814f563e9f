"""Ground truth for torchtitan's compiled block under tensor parallelism (parcalc.core.memory_torchtitan_tp_compile):
torchtitan's Transformer under apply_tp (sequence and loss parallel) with each block compiled by Inductor, on fake ranks, one
step's every allocation on TP rank 0 counted with torch.profiler (tests/ground_truth/tiny_torchtitan_tp_compile.py), against
parcalc's TP walk of the same step without FSDP's hooks (FSDP2's buffers are eager, around the compiled block: their walk
under TP is held by test_torch_memory_torchtitan_tp.py).

How the method was checked: the eager step under the same apply_tp counted the same way equals parcalc's eager TP walk
(which FSDPMemTracker holds) (test_the_eager_step_counted_so_equals_the_eager_walk). Ratios measured 2026-11-29 are in the
cases' comments. Left out, as for the compiled block without TP: the CPU RNG state under full checkpointing (5,056 B a block
on the CPU, 16 bytes on a GPU)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor.parallel")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama  # noqa: E402

FLOAT8_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_tp" / "float8_tp_compile_profiler.json"

EMBEDDING_TABLES = 1  # the CPU's embedding backward on the replicated ids: one table (the profiler's count of the eager step)


def _walk(shape: tuple, ac: str, tp: int, compiled: bool = True):  # type: ignore[no-untyped-def]
    """parcalc's walk of the counted step: torchtitan's Transformer under apply_tp without FSDP's hooks."""
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan_tp import walk_step
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    x = shapes_of(model, b, s, 2.0, 2.0, False)
    walk = Walk()
    walk_step(walk, model, x, (ac,) * layers, EMBEDDING_TABLES, tp, StepHooks(), compiled)
    return peak_of(walk)


def _measured(shape: tuple, ac: str, tp: int, compiled: bool = True) -> int:
    from .tiny_torchtitan_tp_compile import tp_step_peak

    return tp_step_peak(shape, ac, tp, compiled)


# (hidden, heads, KV heads, ffn, layers, vocab, b, s)
LOGGED = (256, 32, 8, 1536, 2, 64, 4, 128)  # inductor_tp_programs.SHAPE's widths, two blocks
VOCAB_HEAVY = (256, 16, 8, 768, 2, 16000, 4, 128)  # the peak in the loss
WIDE = (512, 16, 8, 2816, 2, 256, 2, 192)  # other widths, no two of the code's sizes equal (inductor_tp_programs.symbols)
BATCH_ONE = (256, 32, 8, 1536, 2, 64, 1, 512)  # micro-batch 1, the same tokens as LOGGED

CASES = [  # (shape, checkpointing, tp, the phase of the peak); parcalc / measured bytes (2026-11-29) in the comments
    pytest.param(LOGGED, "none", 2, "backward: output projection", id="logged-tp2-none"),  # 9,003,520 / 8,999,432: 1.0005
    pytest.param(LOGGED, "full", 2, "backward: layer 1 of 2 (recomputed)", id="logged-tp2-full"),  # 7,822,848 / 7,828,872: 0.9992
    pytest.param(LOGGED, "none", 4, "forward: final norm and output", id="logged-tp4-none"),  # 5,085,696 / 5,081,600: 1.0008
    pytest.param(LOGGED, "full", 8, "backward: layer 1 of 2 (recomputed)", id="logged-tp8-full"),  # 2,501,120 / 2,506,632: 0.9978
    pytest.param(VOCAB_HEAVY, "full", 4, "backward: loss", id="vocab-heavy-tp4-full"),  # 33,362,432 / 33,385,356: 0.9993
    pytest.param(WIDE, "none", 4, "backward: layer 2 of 2", id="wide-tp4-none"),  # 8,391,168 / 8,387,464: 1.0004
    pytest.param(BATCH_ONE, "full", 8, "backward: layer 1 of 2 (recomputed)", id="batch-one-tp8-full"),  # 2,501,120 / 2,506,632: 0.9978
]
# Until the CPU flash attention's scratch was left out of the count (tiny_torchtitan_tp_compile.allocation_peak_without_cpu_scratch:
# per-thread buffers that grow with the sequence), WIDE and BATCH_ONE came out 0.966 and 0.791: their peaks are inside the
# compiled backward's SDPA, where a GPU's flash kernel takes no such buffers from the caching allocator.


@pytest.mark.parametrize("shape, ac, tp, phase", CASES)
def test_compiled_tp_step_peak_matches_every_allocation(shape: tuple, ac: str, tp: int, phase: str) -> None:
    measured = _measured(shape, ac, tp)
    ours = _walk(shape, ac, tp)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.6f}")
    assert ours.allocated == pytest.approx(measured, rel=0.01), (ours.phase, ours.parts)
    assert ours.phase.startswith(phase)


def test_the_eager_step_counted_so_equals_the_eager_walk() -> None:
    """The method: the eager step under the same apply_tp, counted by the profiler, equals parcalc's eager TP walk, which
    FSDPMemTracker holds (test_torch_memory_torchtitan_tp.py): 12,149,248 / 12,145,160 B (1.0003), measured 2026-11-29."""
    measured = _measured(LOGGED, "none", 2, compiled=False)
    assert _walk(LOGGED, "none", 2, compiled=False).allocated == pytest.approx(measured, rel=0.001)


def test_the_programs_are_the_committed_code_as_read() -> None:
    from parcalc.core.memory_torchtitan_tp_compile import PROGRAMS

    from .inductor_tp_programs import committed_programs

    read = committed_programs()
    assert set(read) == set(PROGRAMS)
    for key, (forward, backward) in read.items():
        assert (tuple(map(tuple, forward)), tuple(map(tuple, backward))) == PROGRAMS[key], key


def _float8_walk(row: dict):  # type: ignore[no-untyped-def]
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan_tp import walk_step
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = row["dims"]
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    walk = Walk()
    walk_step(walk, model, replace(shapes_of(model, b, s, 2.0, 2.0, False), float8=True), (row["ac"],) * layers, EMBEDDING_TABLES,
              row["tp"], StepHooks(), True)  # fmt: skip
    return peak_of(walk)


# not explained: the walk 5,919,232 B against 5,604,854 measured (1.056) at the wide shape, tp 8, full checkpointing, where the bf16
# block's walk of the same step is 0.9991 of its count; at this shape a rank's sequence shard (T / tp x hidden) and wq's weight
# shard (hidden x q / tp) are one size (32,768 elements), which they are not at the logged shape, and Inductor's reuse of a dead
# buffer is decided by size: the likely difference, not read
FLOAT8_WIDE = "the compiled Float8 TP walk 1.056 of the profiler's count at the wide shape (tp 8, full), not explained"


@pytest.mark.parametrize("case", [0, 1, pytest.param(2, marks=pytest.mark.xfail(strict=True, reason=FLOAT8_WIDE)), 3])
def test_float8_tp_compile_matches_the_committed_profiler_peaks(case: int) -> None:
    """The compiled block with torchao's Float8 TP styles against profiler-counted steps (tests/ground_truth/
    torchao_float8_tp_compile.py, fixture float8_tp_compile_profiler.json): within 1 %. Measured 2026-11-29: logged none tp 2
    11,051,520 / 11,068,016 (0.9985), logged full tp 2 8,620,032 / 8,615,422 (1.0005), wide full tp 8 5,919,232 / 5,604,854
    (1.056, FLOAT8_WIDE), batch-one full tp 8 2,526,208 / 2,523,110 (1.0012)."""
    row = json.loads(FLOAT8_FIXTURE.read_text())["cases"][case]
    ours = _float8_walk(row)
    print(f"{row['shape']} {row['ac']} tp {row['tp']}: parcalc {ours.allocated:,.0f} B, measured {row['peak_bytes']:,} B: "
          f"{ours.allocated / row['peak_bytes']:.5f}")  # fmt: skip
    assert ours.allocated == pytest.approx(row["peak_bytes"], rel=0.01)


def test_float8_tp_compile_remeasured() -> None:
    """The fixture's first case measured again where torchao is installed (skipped without it)."""
    pytest.importorskip("torchao")
    from .torchao_float8_tp_compile import SHAPES, float8_tp_step_peak

    row = json.loads(FLOAT8_FIXTURE.read_text())["cases"][0]
    assert float8_tp_step_peak(SHAPES[row["shape"]], row["ac"], row["tp"]) == row["peak_bytes"]
