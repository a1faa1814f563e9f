"""Ground truth for the compiled loss in torchtitan's step walk (parcalc.core.memory_compiled_loss): torchtitan's
Transformer with each block compiled (apply_ac, then apply_compile) and the loss compiled too, as torchtitan's
components/loss.py build_cross_entropy_loss does with --training.compile from bbb1b616e (2025-04-02; e7c0cae lines 25-30),
one step's every allocation counted on the CPU with torch.profiler (tests/ground_truth/tiny_torchtitan_compile.py), against
parcalc's walk of the same step without FSDP's hooks. The vocabulary is large beside the blocks so that the loss makes the
step's peak, as it does at Llama 3 8B's 128K vocabulary. Measured 2026-11-29 (torch 2.13.0, gcc 12): the numbers in CASES'
comments (parcalc / measured)."""

from __future__ import annotations

import pytest

from .titan_walks import titan_llama

torch = pytest.importorskip("torch")


def _parcalc_peak(shape: tuple, ac: str, compiled_loss: bool):
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan import walk_step
    from parcalc.core.memory_walk import StepHooks, Walk, peak_of

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    x = shapes_of(model, b, s, 2.0, 2.0, False)
    walk = Walk()
    walk_step(walk, model, x, (ac,) * layers, 1, StepHooks(), True, compiled_loss)
    return peak_of(walk)


def _measured(shape: tuple, ac: str, compiled_loss: bool) -> int:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_compile import compiled_step_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    return compiled_step_peak(config, vocab, b, s, ac, compile_loss=compiled_loss)


# (hidden, heads, kv heads, ffn, layers, vocab, b, s)
LOSS_HEAVY = (128, 4, 2, 512, 2, 8192, 4, 256)
MLP_HEAVY = (128, 4, 2, 1536, 2, 64, 8, 256)  # a 64-token vocabulary: the peak stays in the blocks
WIDER = (256, 8, 2, 768, 3, 4096, 2, 512)
CPU_RNG_STATE = 5056  # bytes: the CPU generator's state run_and_save_rng_state keeps per fully checkpointed block (a GPU's: 16)

CASES = [  # (shape, torchtitan's activation checkpointing, full-checkpointed blocks, the phase of the peak); parcalc / measured
    pytest.param(LOSS_HEAVY, "op", 0, "backward: loss (compiled cross_entropy)", id="loss-heavy-selective-op"),  # 38,584,832 / 38,584,332
    # 35,144,192 / 35,153,804: the two blocks' CPU RNG states (2 x 5,056 B) are live at the loss's backward
    pytest.param(LOSS_HEAVY, "full", 2, "backward: loss (compiled cross_entropy)", id="loss-heavy-full"),
    pytest.param(WIDER, "none", 0, "backward: loss (compiled cross_entropy)", id="wider-none"),  # 45,752,832 / 45,752,332
    pytest.param(MLP_HEAVY, "op", 0, "backward: layer 2 of 2 (recomputed)", id="mlp-heavy-selective-op"),  # 49,373,696 / 49,373,448
]


@pytest.mark.parametrize("shape, ac, full_blocks, phase", CASES)
def test_compiled_loss_step_peak_matches_every_allocation(shape: tuple, ac: str, full_blocks: int, phase: str) -> None:
    measured = _measured(shape, ac, True) - full_blocks * CPU_RNG_STATE
    ours = _parcalc_peak(shape, ac, True)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.6f}")
    # within 1 KB: the walk's 512-byte blocks for the loss's scalars, the profiler's bytes as asked
    assert ours.allocated == pytest.approx(measured, abs=1024), (ours.phase, ours.parts)
    assert ours.phase.startswith(phase)


def test_the_eager_loss_measured_the_same_way_is_the_eager_walk() -> None:
    """The method's check: the same compiled blocks with 9dec370's eager loss, counted the same way, equal the walk's eager
    loss (105,680,896 / 105,680,904 B), 2.7 times the compiled loss's peak."""
    measured = _measured(LOSS_HEAVY, "op", False)
    ours = _parcalc_peak(LOSS_HEAVY, "op", False)
    assert ours.allocated == pytest.approx(measured, abs=1024)
    assert ours.phase == "backward: loss (nll_loss and log_softmax gradients)"
