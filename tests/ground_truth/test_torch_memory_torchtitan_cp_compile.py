"""Ground truth for torchtitan's compiled block under context parallelism (parcalc.core.memory_torchtitan_cp_compile):
torchtitan's Transformer with each block compiled by Inductor, run under torch's own context_parallel (the ring attention
traced into each block's graph through the DTensor dispatch, as on a GPU; the CPU flash kernel in the handler's place of the
CUDA one) on fake ranks, one step's every allocation on CP rank 0 counted with torch.profiler
(tests/ground_truth/tiny_torchtitan_cp_compile.py), against parcalc's walk of the same step without FSDP's hooks (FSDP2's
buffers are eager, around the compiled block: their walk under CP is held by test_torch_memory_torchtitan_cp.py).

How the method was checked: the eager step under the same context_parallel counted the same way equals parcalc's eager CP
walk (which FSDPMemTracker holds) to 248 bytes (test_the_eager_step_counted_so_equals_the_eager_walk). Measured 2026-11-29
(torch 2.13.0, gcc 12): every compiled case within 1 KB of the walk (plus the CPU RNG states where they are live), the
peaks' phases too, but one strict xfail (RING_HEAVY_CP8: Inductor's buffer reuse differs at that shape). Left out, as for the compiled
block without CP: the CPU RNG state under full checkpointing (5 KB a ring step on the CPU, 16 bytes on a GPU; not live at
these peaks). Without the ring's compiled code (the compiled block's programs with the eager ring's sizes ignored, the
walk before this) the same steps came out 0.911 (none) and 0.938 (full) of the measured peaks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama  # noqa: E402

FLOAT8_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchtitan_cp" / "float8_cp_compile_profiler.json"


def _walk(shape: tuple, ac: str, cp: int, compiled: bool = True, float8: bool = False):  # type: ignore[no-untyped-def]
    """parcalc's walk of the counted step: context_parallel's buffers, then torchtitan's Transformer without FSDP's hooks."""
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan import walk_step
    from parcalc.core.memory_torchtitan_cp import context_parallel_buffers
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    x = replace(shapes_of(model, b, s // cp, 2.0, 2.0, False), cp=cp, float8=float8)
    walk = Walk()
    context_parallel_buffers(walk, x, s, model.head_dim)
    walk_step(walk, model, x, (ac,) * layers, 1, StepHooks(), compiled)
    return peak_of(walk)


def _measured(shape: tuple, ac: str, cp: int, compiled: bool = True) -> int:
    from .tiny_torchtitan_cp_compile import cp_step_peak

    return cp_step_peak(shape, ac, cp, compiled)


# (hidden, heads, KV heads, ffn, layers, vocab, b, global s)
ATTENTION = (128, 8, 2, 1536, 2, 64, 8, 512)  # inductor_cp_programs.SHAPE's widths, two blocks
# long sequences, a narrow MLP (not 2 x hidden: Inductor would keep the K/V concatenation's buffer for w1's output, the same
# size there, where the logged shape frees it: memory_torchtitan_cp_compile's docstring)
RING_HEAVY = (256, 8, 2, 640, 1, 64, 2, 3072)
VOCAB_HEAVY = (128, 8, 2, 384, 2, 8000, 4, 1024)  # the peak in the loss

# Inductor's buffer reuse is decided per shape: at RING_HEAVY, cp 8, full checkpointing its code frees the ring's fp32 merge
# buffers and allocates new ones where at the logged shape (inductor_cp_programs.SHAPE, whose own cp 8 full step the walk
# matches to 248 bytes: 52,462,080 / 52,461,832) it reuses them across the ring's steps, so the walk holds more at the peak
# of the recomputed block (read from the code at this shape: 9 fewer lines in the forward). Not followed yet; the published
# rows' peaks are in the loss's backward, where each block keeps its input alone.
RING_HEAVY_CP8 = ("Inductor reuses the ring's merge buffers at the logged shape and frees them at this one (cp 8, full): the walk "
                  "1.185 (bf16), 1.133 (Float8) of the measured peak")
CASES = [  # (shape, checkpointing, cp, the phase of the peak); parcalc / measured bytes in the comments
    pytest.param(ATTENTION, "none", 2, "backward: layer 2 of 2", id="attention-cp2-none"),  # 58,933,760 / 58,933,512
    pytest.param(ATTENTION, "full", 2, "backward: layer 1 of 2 (recomputed)", id="attention-cp2-full"),  # 46,925,312 / 46,924,552
    pytest.param(RING_HEAVY, "none", 4, "backward: output projection", id="ring-heavy-cp4-none"),  # 29,512,192 / 29,512,200
    # the CPU RNG states of 2 blocks x 4 ring steps (40,448 B) live at this peak: 100,061,184 / 100,101,640
    pytest.param(VOCAB_HEAVY, "full", 4, "backward: loss", id="vocab-heavy-cp4-full"),
    pytest.param(RING_HEAVY, "full", 8, "backward: layer 1 of 1 (recomputed)", id="ring-heavy-cp8-full",
                 marks=pytest.mark.xfail(strict=True, reason=RING_HEAVY_CP8)),  # 23,266,816 / 19,629,068: 1.185
]


@pytest.mark.parametrize("shape, ac, cp, phase", CASES)
def test_compiled_cp_step_peak_matches_every_allocation(shape: tuple, ac: str, cp: int, phase: str) -> None:
    measured = _measured(shape, ac, cp)
    ours = _walk(shape, ac, cp)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.6f}")
    # within 1 KB (the 512-byte rounding of the walk's small tensors), and under full checkpointing the CPU generator's RNG
    # states that run_and_save_rng_state keeps, 5,056 B for each ring step of each block where they are live (a GPU's: 16 B)
    rng = 5056 * shape[4] * cp if ac == "full" else 0
    assert measured - rng - 1024 <= ours.allocated <= measured + 1024, (ours.phase, ours.parts)
    assert ours.phase.startswith(phase)


def test_the_eager_step_counted_so_equals_the_eager_walk() -> None:
    """The method: the eager step under the same context_parallel (the DTensor dispatch with the CPU kernel), counted by the
    profiler, equals parcalc's eager CP walk, which FSDPMemTracker holds (77,808,128 / 77,807,880 B, measured 2026-11-29)."""
    shape = (128, 8, 2, 1536, 2, 64, 8, 512)
    measured = _measured(shape, "none", 2, compiled=False)
    assert _walk(shape, "none", 2, compiled=False).allocated == pytest.approx(measured, abs=1024)


def test_the_programs_are_the_committed_code_as_read() -> None:
    from parcalc.core.memory_torchtitan_cp_compile import PROGRAMS

    from .inductor_cp_programs import committed_programs

    read = committed_programs()
    assert set(read) == set(PROGRAMS)
    for key, (forward, backward) in read.items():
        assert (tuple(map(tuple, forward)), tuple(map(tuple, backward))) == PROGRAMS[key], key


def test_the_ring_keeps_its_gathered_keys_and_values_without_checkpointing() -> None:
    """Without checkpointing the compiled forward keeps the all-gathered K/V for the backward (its chunks are the backward's
    SDPA steps' keys and values: the backward's all-gather of the same concatenation is the forward's, merged in the joint
    graph); under full checkpointing it keeps the block input alone."""
    from parcalc.core.memory_torchtitan_cp_compile import PROGRAMS

    for cp in (2, 4, 8):
        forward_none, forward_full = PROGRAMS[("bf16", cp, "none")][0], PROGRAMS[("bf16", cp, "full")][0]
        assert any(line[0] in "+=" and line[-2] == "kvgather" and line[-1] == "A" for line in forward_none), cp
        assert not any(line[0] in "+=" and line[-1] == "A" and line[1] != "OUT" and line[2] != "OUT" for line in forward_full), cp


@pytest.mark.parametrize("case", [0, 1, 2, pytest.param(3, marks=pytest.mark.xfail(strict=True, reason=RING_HEAVY_CP8))])
def test_float8_cp_compile_matches_the_committed_profiler_peaks(case: int) -> None:
    """The compiled Float8 block under CP against profiler-counted steps (tests/ground_truth/torchao_float8_cp_compile.py, fixture
    float8_cp_compile_profiler.json): within 1 % (the CPU's amax / scale scalars are 2 or 4 bytes where the walk holds a GPU's
    512-byte blocks, as for the compiled Float8 block without CP: test_torch_memory_float8_compile.py). Measured 2026-11-29:
    1.00022, 1.00015, 1.00031; the fourth (ring-heavy, cp 8, full) 1.133, as its bf16 twin (RING_HEAVY_CP8)."""
    row = json.loads(FLOAT8_FIXTURE.read_text())["cases"][case]
    ours = _walk(tuple(row["dims"]), row["ac"], row["cp"], float8=True)
    print(f"{row['shape']} {row['ac']} cp {row['cp']}: parcalc {ours.allocated:,.0f} B, measured {row['peak_bytes']:,} B: "
          f"{ours.allocated / row['peak_bytes']:.5f}")  # fmt: skip
    assert ours.allocated == pytest.approx(row["peak_bytes"], rel=0.01)


def test_float8_cp_compile_remeasured() -> None:
    """The fixture's first case measured again where torchao is installed (skipped without it)."""
    pytest.importorskip("torchao")
    from .torchao_float8_cp_compile import SHAPES, float8_cp_step_peak

    row = json.loads(FLOAT8_FIXTURE.read_text())["cases"][0]
    assert float8_cp_step_peak(SHAPES[row["shape"]], row["ac"], row["cp"]) == row["peak_bytes"]
