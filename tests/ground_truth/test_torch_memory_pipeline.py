"""Ground truth for one pipeline stage of the torchtitan walk (parcalc.core.memory_pipeline_stage): MemTracker over torch's
own PipelineStage and Schedule1F1B running a stage of torchtitan's Llama built as pipeline_llama_manual_split builds it,
under apply_ac and apply_fsdp(pp_enabled=True), on a (pp, dp) mesh of fake ranks (tests/ground_truth/tiny_torchtitan_pp.py).
For-loop AdamW, step counters on the device, two embedding-gradient tables, no cuBLAS workspace, as the other FSDP
ground truths. The last stage's step() with return_outputs=False, as torchtitan's trainer calls it since #1922, and True,
as at 9dec370. Ratios measured 2026-11-30 are in the cases' comments: all to 0.03 %. (Until session 21 the stage's static
input_args did not require grad, so torch computed no input gradient on a non-first stage: the last stage without
checkpointing read 1.0089, one b x s x h gradient the walk holds and torch then did not; tiny_torchtitan_pp.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402

SHAPE = (512, 4, 2, 1536, 1024, 2, 256)  # hidden, heads, kv heads, ffn, vocab, b, s


def _parcalc_peak(layers: int, pp: int, stage: int, bounds: tuple[int, int], micro_batches: int, ac: str, return_outputs: bool = False,
                  tp: int = 1):  # fmt: skip

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, 2, "mixed-bf16", ac, pp=pp, pp_stage=stage, stage_layers=bounds,
                             micro_batches=micro_batches, pp_return_outputs=return_outputs, tp=tp)  # fmt: skip


CASES = [  # (layers, pp, stage, its layers, micro-batches, checkpointing, the last stage's step(return_outputs=...))
    pytest.param(4, 2, 0, (0, 2), 4, "full", False, id="first-of-2-full"),  # 1.0000
    pytest.param(4, 2, 0, (0, 2), 4, "none", False, id="first-of-2-none"),  # 1.0000
    pytest.param(4, 2, 1, (2, 4), 4, "full", False, id="last-of-2-full"),  # 1.0000
    pytest.param(4, 2, 1, (2, 4), 4, "none", False, id="last-of-2-none"),  # 1.0000
    pytest.param(4, 2, 1, (2, 4), 4, "full", True, id="last-of-2-full-outputs"),  # 1.0000 (torchtitan 9dec370)
    pytest.param(4, 2, 1, (2, 4), 4, "none", True, id="last-of-2-none-outputs"),  # 1.0000
    pytest.param(6, 3, 1, (2, 4), 4, "full", False, id="middle-of-3-full"),  # 1.0001
    pytest.param(6, 3, 1, (2, 4), 4, "none", False, id="middle-of-3-none"),  # 1.0001 (the received input and its gradient)
]


TP_CASES = [  # the same, each stage's blocks under apply_tp over 2 ranks (a (pp, dp, tp) = (p, 2, 2) mesh); ratios 2026-11-30
    pytest.param(4, 2, 0, (0, 2), 4, "full", False, id="tp2-first-of-2-full"),  # 1.0001
    pytest.param(4, 2, 0, (0, 2), 4, "none", False, id="tp2-first-of-2-none"),  # 1.0001
    pytest.param(4, 2, 1, (2, 4), 4, "full", False, id="tp2-last-of-2-full"),  # 1.0000
    pytest.param(4, 2, 1, (2, 4), 4, "none", True, id="tp2-last-of-2-none-outputs"),  # 0.9997
    pytest.param(6, 3, 1, (2, 4), 4, "full", False, id="tp2-middle-of-3-full"),  # 1.0003
]


@pytest.mark.parametrize("layers, pp, stage, bounds, micro_batches, ac, outputs", TP_CASES)
def test_tp_stage_peak_matches_memtracker(layers: int, pp: int, stage: int, bounds: tuple[int, int], micro_batches: int, ac: str,
                                          outputs: bool) -> None:  # fmt: skip
    """torchtitan's train.py at 9dec370 parallelises each pipeline stage's model as it would the whole (apply_tp, apply_ac,
    apply_fsdp: memory_pipeline_stage.PP_SOURCES['tp']); the stage sends and receives the sequence shard of its residual
    stream, the last computes loss parallel's loss on its vocabulary shard, the first keeps its embedding's gradient, of
    the whole vocabulary (DTensor's embedding backward replicates it), in fp32 across micro-batches."""
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_pp import tracked_stage_peak

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, outputs, tp=2)
    ours = _parcalc_peak(layers, pp, stage, bounds, micro_batches, ac, outputs, tp=2)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.001), ours.parts


def test_the_tp_stage_sends_its_sequence_shard() -> None:
    """Under apply_tp the stage's output is the last block's RowwiseParallel(output_layouts=Shard(1)) local tensor, b x s / tp
    x hidden (torchtitan's pipeline_llama sized its stages' I/O so: local_seq_len = seq_len // tp): the middle stage's
    receive buffers, one per micro-batch each way (and the one the last backward re-made), are half of those without TP at tp = 2."""
    buffers = {tp: dict(_parcalc_peak(6, 3, 1, (2, 4), 4, "full", tp=tp).parts)["buffers"] for tp in (1, 2)}
    freqs = SHAPE[6] * (SHAPE[0] // SHAPE[1]) // 2 * 8  # the RoPE buffer, unsharded
    assert buffers[2] - freqs == pytest.approx((buffers[1] - freqs) / 2, rel=1e-12)


@pytest.mark.parametrize("layers, pp, stage, bounds, micro_batches, ac, outputs", CASES)
def test_stage_peak_matches_memtracker(layers: int, pp: int, stage: int, bounds: tuple[int, int], micro_batches: int, ac: str,
                                       outputs: bool) -> None:  # fmt: skip
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_pp import tracked_stage_peak

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_stage_peak(config, vocab, b, s, pp, 2, stage, bounds, micro_batches, ac, outputs)
    ours = _parcalc_peak(layers, pp, stage, bounds, micro_batches, ac, outputs)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.001), ours.parts


def test_the_stage_keeps_fp32_gradients_all_step() -> None:
    """FSDP2 under PP accumulates every unsharded gradient in fp32 across micro-batches (_fsdp_param.py
    to_accumulated_grad_if_needed): at a backward peak after the first micro-batch the stage holds 4 bytes for each
    parameter of the layers already done, beside its 2-byte unsharded parameters."""
    peak = _parcalc_peak(4, 2, 0, (0, 2), 4, "full")
    parts = dict(peak.parts)
    assert peak.phase == "backward: micro-batch 2 of 4"
    assert parts["gradients"] >= parts["unsharded parameters"] * 2 * 0.99  # all of the stage's units, in fp32


def test_the_1f1b_order_is_torchs() -> None:
    """Schedule1F1B._step_microbatches (torch 2.13 schedules.py:1049-1177): min(m, p - s) forwards, then a backward and a
    forward in turn, then the remaining backwards."""
    from parcalc.core.memory_pipeline_stage import StagePlan

    first = StagePlan(0, 4, 6, 0, 8).order()
    assert first == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("F", 4), ("B", 1), ("F", 5), ("B", 2), ("B", 3), ("B", 4), ("B", 5)]
    last = StagePlan(3, 4, 3, 0, 8).order()
    assert last == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]
