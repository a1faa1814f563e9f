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

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor.parallel")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)

EMBEDDING_TABLES = 1  # the CPU's embedding backward on the replicated ids: one table (the profiler's count of the eager step)


def _walk(shape: tuple, ac: str, tp: int, compiled: bool = True):  # type: ignore[no-untyped-def]
    """parcalc's walk of the counted step: torchtitan's Transformer under apply_tp without FSDP's hooks."""
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan_tp import walk_step
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of
    from parcalc.presets import load_model

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = replace(load_model("llama3-8b"), layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=hidden // heads,
                    ffn_hidden=ffn, vocab=vocab, tied_embeddings=False)  # fmt: skip
    x = shapes_of(model, b, s, 2.0, 2.0, False)
    walk = Walk()
    walk_step(walk, model, x, (ac,) * layers, EMBEDDING_TABLES, tp, StepHooks(), compiled)
    return peak_of(walk)


def _measured(shape: tuple, ac: str, tp: int, compiled: bool = True) -> int:
    from .tiny_torchtitan_tp_compile import tp_step_peak

    return tp_step_peak(shape, ac, tp, compiled)


# (hidden, heads, KV heads, ffn, layers, vocab, b, s)
LOGGED = (256, 32, 8, 1536, 2, 64, 4, 128)  # inductor_tp_programs.SHAPE's widths, two blocks
WIDE = (512, 16, 8, 2816, 2, 256, 2, 256)  # other widths: the peak in a block's backward
VOCAB_HEAVY = (256, 16, 8, 768, 2, 16000, 4, 128)  # the peak in the loss
BATCH_ONE = (256, 32, 8, 1536, 2, 64, 1, 512)  # micro-batch 1

CASES = [  # (shape, checkpointing, tp, the phase of the peak)
    pytest.param(LOGGED, "none", 2, "backward: layer 2 of 2", id="logged-tp2-none"),
    pytest.param(LOGGED, "full", 2, "backward: layer 1 of 2 (recomputed)", id="logged-tp2-full"),
    pytest.param(WIDE, "none", 4, "backward: layer 2 of 2", id="wide-tp4-none"),
    pytest.param(WIDE, "full", 8, "backward", id="wide-tp8-full"),
    pytest.param(VOCAB_HEAVY, "full", 4, "backward: loss", id="vocab-heavy-tp4-full"),
    pytest.param(BATCH_ONE, "full", 8, "backward", id="batch-one-tp8-full"),
]


@pytest.mark.parametrize("shape, ac, tp, phase", CASES)
def test_compiled_tp_step_peak_matches_every_allocation(shape: tuple, ac: str, tp: int, phase: str) -> None:
    measured = _measured(shape, ac, tp)
    ours = _walk(shape, ac, tp)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.6f}")
    assert ours.allocated == pytest.approx(measured, rel=0.01), (ours.phase, ours.parts)
    assert ours.phase.startswith(phase)


def test_the_eager_step_counted_so_equals_the_eager_walk() -> None:
    """The method: the eager step under the same apply_tp, counted by the profiler, equals parcalc's eager TP walk, which
    FSDPMemTracker holds (test_torch_memory_torchtitan_tp.py)."""
    measured = _measured(LOGGED, "none", 2, compiled=False)
    assert _walk(LOGGED, "none", 2, compiled=False).allocated == pytest.approx(measured, rel=0.001)


def test_the_programs_are_the_committed_code_as_read() -> None:
    from parcalc.core.memory_torchtitan_tp_compile import PROGRAMS

    from .inductor_tp_programs import committed_programs

    read = committed_programs()
    assert set(read) == set(PROGRAMS)
    for key, (forward, backward) in read.items():
        assert (tuple(map(tuple, forward)), tuple(map(tuple, backward))) == PROGRAMS[key], key
