"""Ground truth for the torchtitan profile's step walk (parcalc.core.memory_torchtitan in parcalc.core.memory_fsdp):
FSDPMemTracker over torchtitan's own Llama Transformer (tests/ground_truth/tiny_torchtitan.py: model.py, norms.py and
train.py's loss at 9dec370) wrapped as torchtitan wraps it (apply_ac: none, full, selective op; apply_fsdp: each block,
the last not resharded after forward, then the root; bf16 params, fp32 reduce), on a fake process group of 4 ranks under
FakeTensorMode, as tests/ground_truth/test_torch_memory_fsdp.py does for transformers' Llama. As there: for-loop AdamW
(the tracker's foreach DTensor artifact), step counters on the device, two embedding-gradient tables (the decomposition
FakeTensorMode runs), no cuBLAS workspace on the CPU. Ratios measured 2026-11-29 are in the cases' comments: the walk
equals the tracker to 0.01 % (the 512-byte rounding of the walk's blocks), and the peaks' phases agree."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")

from .fake_process_group import fake_mesh, no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402


def _parcalc_peak(shape: tuple, ac: str):
    from parcalc.core.choices import Recompute

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    recompute = {"none": Recompute.NONE, "full": Recompute.FULL, "op": Recompute.OP}.get(ac, Recompute.FULL)
    # selective layer checkpointing "k": apply_ac's count from 1, every k-th block wrapped whole
    every = None if ac in ("none", "full", "op") else tuple("full" if (i + 1) % int(ac) == 0 else "none" for i in range(layers))
    return tracked_step_peak(model, b, s, 4, "mixed-bf16", recompute, block_policies=every)


# (hidden, heads, kv heads, ffn, layers, vocab, b, s)
WEIGHT_HEAVY = (1024, 8, 2, 2816, 4, 2048, 8, 64)
ACTIVATION_HEAVY = (512, 4, 2, 1536, 4, 1024, 16, 256)
MHA = (512, 4, 4, 1536, 4, 1024, 16, 256)
MQA = (512, 4, 1, 1536, 4, 1024, 16, 256)  # one KV head: repeat_kv's reshape is a view
VOCAB_HEAVY = (256, 4, 4, 768, 2, 16000, 8, 128)

ONE_BLOCK = (512, 4, 2, 1536, 1, 64, 16, 256)  # the peak in the final norm's backward (none) or the block's (full, op)

CASES = [  # (shape, torchtitan's activation checkpointing: none, full, op or k (every k-th block full), the phase of the peak)
    pytest.param(WEIGHT_HEAVY, "none", "backward: layer 3 of 4", id="weight-heavy-none"),  # 1.0001
    pytest.param(WEIGHT_HEAVY, "full", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-full"),  # 1.0001
    pytest.param(WEIGHT_HEAVY, "op", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-selective-op"),  # 1.0001
    pytest.param(WEIGHT_HEAVY, "2", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-selective-layer-2"),  # 1.0001
    pytest.param(ACTIVATION_HEAVY, "none", "backward: loss", id="activation-heavy-none"),  # 1.0000
    pytest.param(ACTIVATION_HEAVY, "full", "backward: layer 3 of 4 (recomputed)", id="activation-heavy-full"),  # 1.0001
    pytest.param(ACTIVATION_HEAVY, "op", "backward: layer 4 of 4 (recomputed)", id="activation-heavy-selective-op"),  # 1.0001
    pytest.param(ACTIVATION_HEAVY, "2", "backward: layer 4 of 4 (recomputed)", id="activation-heavy-selective-layer-2"),  # 1.0000
    pytest.param(ONE_BLOCK, "none", "backward: output projection", id="one-block-none"),  # 1.0000 (the final norm's backward)
    pytest.param(ONE_BLOCK, "full", "backward: layer 1 of 1 (recomputed)", id="one-block-full"),  # 1.0000
    pytest.param(ONE_BLOCK, "op", "backward: layer 1 of 1 (recomputed)", id="one-block-selective-op"),  # 1.0000
    pytest.param(MHA, "none", "backward: loss", id="mha-none"),  # 1.0000
    pytest.param(MQA, "none", "backward: loss", id="mqa-none"),  # 1.0000
    pytest.param(MQA, "op", "backward: layer 4 of 4 (recomputed)", id="mqa-selective-op"),  # 1.0001
    pytest.param(VOCAB_HEAVY, "none", "backward: loss", id="vocab-heavy-none"),  # 1.0001
    pytest.param(VOCAB_HEAVY, "op", "backward: loss", id="vocab-heavy-selective-op"),  # 1.0001
]


@pytest.mark.parametrize("shape, ac, phase", CASES)
def test_torchtitan_peak_matches_fsdp_mem_tracker(shape: tuple, ac: str, phase: str) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan import tracked_torchtitan_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_torchtitan_peak(config, vocab, b, s, 4, ac, fake_mesh(4))
    ours = _parcalc_peak(shape, ac)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers"),
                           ("ALL_GATHER", "all-gather buffers"), ("REDUCE_SCATTER", "reduce-scatter buffers")):  # fmt: skip
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_selective_op_keeps_less_than_none_and_more_than_full() -> None:
    """torchtitan's op policy caches wq, wv, w1, w2 and SDPA's outputs beside the block input: between full and none."""
    peaks = {ac: _parcalc_peak(ACTIVATION_HEAVY, ac).allocated for ac in ("none", "full", "op")}
    assert peaks["full"] < peaks["op"] < peaks["none"]
