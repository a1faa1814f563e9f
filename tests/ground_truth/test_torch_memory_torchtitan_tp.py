"""Ground truth for the torchtitan step walk under tensor parallelism (parcalc.core.memory_torchtitan_tp): FSDPMemTracker
over torchtitan's Llama code parallelised as its parallelize_llama.py does at 9dec370 (apply_tp with sequence and loss
parallel, apply_ac, apply_fsdp on the data-parallel mesh dimension; tests/ground_truth/tiny_torchtitan_tp.py) on a 2-D
mesh of fake ranks under FakeTensorMode. As test_torch_memory_torchtitan.py: for-loop AdamW, step counters on the device,
two embedding-gradient tables, no cuBLAS workspace on the CPU. What DTensor's sharding propagation allocates on the
global shapes under the tracker's fake mode is left out (no device memory on a GPU; tiny_torchtitan_tp docstring).
Ratios measured 2026-11-29 are in the cases' comments."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402


def _parcalc_peak(shape: tuple, dp: int, tp: int, ac: str):
    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, dp, "mixed-bf16", ac, tp=tp)


# (hidden, heads, kv heads, ffn, layers, vocab, b, s)
LOGITS_HEAVY = (512, 4, 2, 1536, 2, 1024, 4, 256)  # one KV head per rank: repeat_kv a view
BATCH_ONE = (512, 8, 4, 1536, 3, 1024, 1, 512)  # micro-batch 1: the sequence all-gathers are views
WIDE = (1024, 8, 4, 2816, 3, 256, 2, 128)  # the peak in a block's backward
VOCAB_HEAVY = (256, 4, 4, 768, 2, 16000, 4, 128)

CASES = [  # (shape, dp, tp, checkpointing, the phase of the peak)
    pytest.param(LOGITS_HEAVY, 2, 2, "none", "backward: loss", id="logits-heavy-dp2-tp2-none"),  # 0.9998
    pytest.param(LOGITS_HEAVY, 2, 2, "full", "backward: layer 1 of 2 (recomputed)", id="logits-heavy-dp2-tp2-full"),  # 1.0003
    pytest.param(BATCH_ONE, 2, 2, "none", "backward: layer 2 of 3", id="batch-one-dp2-tp2-none"),  # 1.0003
    pytest.param(BATCH_ONE, 2, 2, "full", "backward: layer 2 of 3 (recomputed)", id="batch-one-dp2-tp2-full"),  # 1.0003
    pytest.param((512, 8, 8, 1536, 2, 2048, 4, 256), 1, 4, "none", "backward: loss", id="mha-dp1-tp4-none"),  # 0.9997
    pytest.param(WIDE, 2, 2, "none", "backward: layer 2 of 3", id="wide-dp2-tp2-none"),  # 1.0001
    pytest.param(VOCAB_HEAVY, 2, 2, "none", "backward: loss", id="vocab-heavy-dp2-tp2-none"),  # 1.0000
]


@pytest.mark.parametrize("shape, dp, tp, ac, phase", CASES)
def test_tp_peak_matches_fsdp_mem_tracker(shape: tuple, dp: int, tp: int, ac: str, phase: str) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_tp import tracked_tp_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_tp_peak(config, vocab, b, s, dp, tp, ac)
    ours = _parcalc_peak(shape, dp, tp, ac)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers")):
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_tp_shrinks_the_step_and_its_logits() -> None:
    """Llama 3 8B on 8 ranks as FSDP 8 and as FSDP 4 x TP 2 (micro-batch 2, sequence 8192, full checkpointing): both peak in
    the loss's backward; there the plain loss holds three fp32 logits tensors of the whole vocabulary (the log-softmax,
    nll_loss's and log_softmax's gradients), loss parallel four of half the vocabulary (the log-softmax, zeros_like, exp
    and their sum: loss.py _nll_loss_and_log_softmax_backward), so 4 / 2 / 3 of the logits memory."""
    from parcalc.core.choices import Precision, Recompute
    from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_peak
    from parcalc.presets import load_model

    model = load_model("llama3-8b")
    peaks = {tp: fsdp_step_peak(model, FsdpStep(2, 8192, 8 // tp, Precision.MIXED_BF16, 4.0, recompute=Recompute.FULL,
                                                 reshard_last_block=False, model_code="torchtitan", tp=tp))
             for tp in (1, 2)}  # fmt: skip
    logits = {tp: dict(p.parts)["logits and loss"] for tp, p in peaks.items()}
    assert peaks[2].allocated < peaks[1].allocated
    assert peaks[1].phase.startswith("backward: loss") and peaks[2].phase.startswith("backward: loss")
    assert logits[2] == pytest.approx(logits[1] * 4 / 2 / 3, rel=0.001)
