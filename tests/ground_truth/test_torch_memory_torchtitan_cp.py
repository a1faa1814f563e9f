"""Ground truth for the torchtitan step walk under context parallelism (parcalc.core.memory_torchtitan_cp): FSDPMemTracker
over torchtitan's Llama code under torch 2.13's context_parallel (the batch and freqs_cis sharded, load-balanced, the
buffers kept for restoring) and its ring attention (_templated_ring_attention and its backward, allgather rotation), with
fully_shard over the flattened dp x cp mesh, on fake ranks under FakeTensorMode (tests/ground_truth/tiny_torchtitan_cp.py:
the ring's SDPA kernel is the CPU flash kernel, as torch's CP handler dispatches only the CUDA ones). As
test_torch_memory_torchtitan.py: for-loop AdamW, step counters on the device, two embedding-gradient tables, no cuBLAS
workspace on the CPU. Ratios measured 2026-11-29 (FSDPMemTracker of CP rank 0) are in the cases' comments."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")
pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402


def _parcalc_peak(shape: tuple, dp: int, cp: int, ac: str, rotate: str = "allgather"):
    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, dp * cp, "mixed-bf16", ac, cp=cp, cp_rotate=rotate)


def _tracked(shape: tuple, dp: int, cp: int, ac: str, rank: int = 0, rotate: str = "allgather") -> dict[str, float]:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_cp import tracked_cp_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    return tracked_cp_peak(LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers), vocab, b, s, dp, cp, ac, rank,
                           rotate)  # fmt: skip


# (hidden, heads, kv heads, ffn, layers, vocab, b, s)
GQA = (512, 4, 2, 1536, 2, 1024, 4, 256)
MHA = (512, 4, 4, 1536, 2, 1024, 4, 256)  # no repeat_kv copy: the ring's K/V are wk / wv's outputs
MQA = (512, 4, 1, 1536, 2, 1024, 4, 256)  # one KV head: repeat_kv a view
RING_HEAVY = (512, 8, 2, 512, 1, 64, 2, 1024)  # the peak inside the ring's backward
WEIGHT_HEAVY = (1024, 8, 2, 2816, 4, 2048, 8, 64)
VOCAB_HEAVY = (256, 4, 4, 768, 2, 16000, 8, 128)

CASES = [  # (shape, dp, cp, checkpointing, the phase of the peak)
    pytest.param(GQA, 1, 2, "none", "backward: layer 2 of 2", id="gqa-cp2-none"),  # 1.0001
    pytest.param(GQA, 2, 2, "full", "backward: layer 1 of 2 (recomputed)", id="gqa-dp2-cp2-full"),  # 1.0001
    pytest.param(MHA, 1, 2, "none", "backward: layer 1 of 2", id="mha-cp2-none"),  # 1.0001
    pytest.param(MQA, 1, 2, "none", "backward: layer 2 of 2", id="mqa-cp2-none"),  # 1.0001
    pytest.param(RING_HEAVY, 1, 2, "none", "backward: layer 1 of 1", id="ring-heavy-cp2-none"),  # 1.0001
    pytest.param(RING_HEAVY, 1, 4, "none", "backward: layer 1 of 1", id="ring-heavy-cp4-none"),  # 1.0002
    pytest.param(RING_HEAVY, 2, 4, "full", "backward: layer 1 of 1 (recomputed)", id="ring-heavy-dp2-cp4-full"),  # 1.0003
    pytest.param(RING_HEAVY, 1, 8, "none", "backward: layer 1 of 1", id="ring-heavy-cp8-none"),  # 1.0004
    pytest.param(WEIGHT_HEAVY, 2, 2, "full", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-dp2-cp2-full"),  # 1.0001
    pytest.param(VOCAB_HEAVY, 2, 2, "none", "backward: loss", id="vocab-heavy-dp2-cp2-none"),  # 1.0001
]
ALLTOALL = [  # set_rotate_method('alltoall') (--cp-comm p2p): the K/V passed on in a ring, a new buffer every step
    pytest.param(RING_HEAVY, 1, 2, "full", "backward: layer 1 of 1 (recomputed)", id="ring-heavy-cp2-full-alltoall"),  # 1.0001
    pytest.param(RING_HEAVY, 1, 4, "none", "backward: layer 1 of 1", id="ring-heavy-cp4-none-alltoall"),  # 1.0002
    pytest.param(RING_HEAVY, 1, 8, "none", "backward: layer 1 of 1", id="ring-heavy-cp8-none-alltoall"),  # 1.0005
    pytest.param(GQA, 1, 4, "none", "backward: layer 1 of 2", id="gqa-cp4-none-alltoall"),  # 1.0002
]


@pytest.mark.parametrize("shape, dp, cp, ac, phase, rotate", [pytest.param(*p.values, "allgather", id=p.id) for p in CASES]
                         + [pytest.param(*p.values, "alltoall", id=p.id) for p in ALLTOALL])  # fmt: skip
def test_cp_peak_matches_fsdp_mem_tracker(shape: tuple, dp: int, cp: int, ac: str, phase: str, rotate: str) -> None:
    tracked = _tracked(shape, dp, cp, ac, rotate=rotate)
    ours = _parcalc_peak(shape, dp, cp, ac, rotate)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers"),
                           ("ALL_GATHER", "all-gather buffers"), ("REDUCE_SCATTER", "reduce-scatter buffers")):  # fmt: skip
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_rank_zero_holds_the_largest_peak() -> None:
    """The walk follows CP rank 0, whose every step after the first takes the second half of its queries and writes the merge
    back with torch.cat; the tracker's peaks of the other ranks are not above it (GQA at cp 2, measured 2026-11-29:
    97,198,172 B on rank 0, 96,931,932 B on rank 1)."""
    peaks = [_tracked(GQA, 1, 2, "none", rank)["Total"] for rank in (0, 1)]
    assert peaks[0] > peaks[1]


def test_cp_shards_the_activations_and_gathers_the_keys() -> None:
    """cp = 2 over the same 4 GPUs as dp = 4: half the tokens a rank, so less at the peak than the tokens' dp = 2 twin, more than
    nothing of the K/V ring: the ring's all-gathered K/V and the merge's fp32 copies are on top of halved activations."""
    half_tokens = replace_seq(GQA, GQA[-1] // 2)
    cp2 = _parcalc_peak(GQA, 2, 2, "none").allocated
    assert cp2 < _parcalc_peak(GQA, 4, 1, "none").allocated  # the same parameters' shards, half the activations
    assert cp2 > _parcalc_peak(half_tokens, 4, 1, "none").allocated  # s / 2 tokens without the ring


def replace_seq(shape: tuple, s: int) -> tuple:
    return (*shape[:-1], s)
