"""Ground truth for the walk of torchtitan's MoE block (parcalc.core.memory_torchtitan_moe in parcalc.core.memory_torchtitan):
FSDPMemTracker over tiny_torchtitan's Transformer whose blocks run torchtitan's MoE (b5bcd76's router, local token dispatcher,
grouped experts and shared experts, tests/ground_truth/tiny_torchtitan_moe.py) in place of the FeedForward, wrapped as
torchtitan wraps it (apply_ac: none or full; apply_fsdp: each block, then the root; bf16 params, fp32 reduce) on a fake
process group of 4 ranks under FakeTensorMode, as test_torch_memory_torchtitan.py does for the dense Llama. Ratios measured
2026-11-30 are in the cases' comments: the walk equals the tracker to 0.02 % (the 512-byte rounding of the walk's blocks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed._tools.fsdp2_mem_tracker")

from .fake_process_group import fake_mesh, no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402


def _parcalc_peak(shape: tuple, moe: tuple, ac: str, qk_norm: bool = False, dense_first: int = 0):
    from parcalc.core.model import MixtureOfExperts

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    experts, top_k, expert_ffn, shared_ffn, route_norm = moe
    routed = MixtureOfExperts(experts, top_k, expert_ffn, shared_experts=1 if shared_ffn else 0, shared_ffn_hidden=shared_ffn,
                              top_k_renormalised=route_norm, first_dense_layers=dense_first)  # fmt: skip
    model = replace(titan_llama(hidden, heads, kv_heads, ffn, layers, vocab), moe=routed, qk_norm=qk_norm)
    return tracked_step_peak(model, b, s, 4, "mixed-bf16", ac)


# (hidden, heads, kv heads, ffn, layers, vocab, b, s)
WEIGHT_HEAVY = (1024, 8, 2, 2816, 4, 2048, 8, 64)
ACTIVATION_HEAVY = (512, 4, 2, 1536, 2, 1024, 16, 256)
ONE_BLOCK = (512, 4, 2, 1536, 1, 64, 16, 256)
# (experts, top-k, expert width, shared experts' width (0: none), route_norm): Qwen3-MoE's router (softmax, route_norm) and
# DeepSeek-style shared experts; top-4 of 16, and top-1 without route_norm
QWEN3_LIKE = (8, 2, 384, 0, True)
SHARED = (8, 2, 384, 512, True)
TOP4 = (16, 4, 256, 0, True)
TOP1 = (8, 1, 384, 0, False)

CASES = [  # (shape, MoE, torchtitan's activation checkpointing, the phase of parcalc's peak)
    pytest.param(WEIGHT_HEAVY, (8, 2, 704, 0, True), "none", "backward: layer 3 of 4", id="weight-heavy-none"),  # 1.0000
    pytest.param(WEIGHT_HEAVY, (8, 2, 704, 0, True), "full", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-full"),  # 1.0000
    pytest.param(WEIGHT_HEAVY, (8, 2, 704, 1408, True), "full", "backward: layer 2 of 4 (recomputed)", id="weight-heavy-shared-full"),  # 1.0000
    pytest.param(ACTIVATION_HEAVY, QWEN3_LIKE, "none", "backward: loss", id="activation-heavy-none"),  # 1.0000
    pytest.param(ACTIVATION_HEAVY, QWEN3_LIKE, "full", "backward: layer 1 of 2 (recomputed)", id="activation-heavy-full"),  # 1.0002
    pytest.param(ACTIVATION_HEAVY, SHARED, "none", "backward: loss", id="activation-heavy-shared-none"),  # 1.0000
    pytest.param(ACTIVATION_HEAVY, SHARED, "full", "backward: layer 1 of 2 (recomputed)", id="activation-heavy-shared-full"),  # 1.0002
    pytest.param(ACTIVATION_HEAVY, TOP4, "none", "backward: layer 2 of 2", id="top4-of-16-none"),  # 1.0000
    pytest.param(ACTIVATION_HEAVY, TOP4, "full", "backward: layer 1 of 2 (recomputed)", id="top4-of-16-full"),  # 1.0002
    pytest.param(ACTIVATION_HEAVY, TOP1, "none", "backward: loss", id="top1-no-route-norm-none"),  # 1.0000
    pytest.param(ONE_BLOCK, QWEN3_LIKE, "none", "forward: layer 1 of 1", id="one-block-none"),  # 1.0000
    pytest.param(ONE_BLOCK, (8, 2, 384, 384, True), "full", "backward: layer 1 of 1 (recomputed)", id="one-block-shared-full"),  # 1.0002
]


@pytest.mark.parametrize("shape, moe, ac, phase", CASES)
def test_torchtitan_moe_peak_matches_fsdp_mem_tracker(shape: tuple, moe: tuple, ac: str, phase: str) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_moe import MoeConfig, tracked_moe_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    experts, top_k, expert_ffn, shared_ffn, route_norm = moe
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    routing = MoeConfig(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared_ffn, route_norm=route_norm)
    tracked = tracked_moe_peak(config, routing, vocab, b, s, ac, fake_mesh(4))
    ours = _parcalc_peak(shape, moe, ac)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers"),
                           ("ALL_GATHER", "all-gather buffers"), ("REDUCE_SCATTER", "reduce-scatter buffers")):  # fmt: skip
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_the_router_fp32_input_is_what_a_moe_block_saves_beyond_its_experts() -> None:
    """The gate under autocast(float32) saves the block's ffn_norm output in fp32 (T x h x 4 bytes): one block's
    activations under no checkpointing exceed the experts' saved rows by it (memory_torchtitan_moe, TT_MOE_SOURCES['moe'])."""
    from parcalc.core.memory_fsdp import FsdpStep, StreamWalk, walk_fsdp_step
    from parcalc.core.model import MixtureOfExperts

    from .titan_walks import TRACKED_STEP

    model = replace(titan_llama(*ONE_BLOCK[:6]), moe=MixtureOfExperts(8, 2, 384))
    walk = StreamWalk()
    walk_fsdp_step(model, FsdpStep(16, 256, 4, **TRACKED_STEP), walk)  # type: ignore[arg-type]
    tokens, hidden = 16 * 256, ONE_BLOCK[0]
    assert walk.peak_phase == "forward: layer 1 of 1"
    saved = {t.what: t.bytes for t in walk.peak_live if t.kind == "activations"}
    assert saved["router input cast to fp32 (saved by the gate)"] == tokens * hidden * 4
    assert saved["experts' input rows (saved by the grouped matmuls)"] == tokens * 2 * hidden * 2  # top-2: N = 2T rows, bf16


# Qwen3-MoE's attention (q_norm, k_norm) on the MoE block; (shape, MoE, checkpointing, the phase of the peak). Measured
# 2026-11-30 also: ACTIVATION_HEAVY, none, 1.0001 (left out for the suite's time); without the norms' saved tensors the walk
# was 2.6-3.9 % under the tracker in these cases
QWEN3_CASES = [
    pytest.param(ACTIVATION_HEAVY, QWEN3_LIKE, "full", "backward: layer 1 of 2 (recomputed)", id="qwen3-full"),  # 1.0002
    pytest.param(ONE_BLOCK, QWEN3_LIKE, "none", "forward: layer 1 of 1", id="qwen3-one-block-none"),  # 1.0001
]


@pytest.mark.parametrize("shape, moe, ac, phase", QWEN3_CASES)
def test_qwen3_moe_peak_matches_fsdp_mem_tracker(shape: tuple, moe: tuple, ac: str, phase: str) -> None:
    """Qwen3-MoE under torchtitan: its GQAttention's q_norm and k_norm (b5bcd76, nn.RMSNorm on the head dim: CUDA's fused
    kernel, memory_torchtitan.TT_QK_NORM_SOURCES) before RoPE, on the MoE block; the tracker's total within 0.1 %."""
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_moe import MoeConfig, tracked_moe_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    experts, top_k, expert_ffn, shared_ffn, route_norm = moe
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    routing = MoeConfig(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared_ffn, route_norm=route_norm)
    tracked = tracked_moe_peak(config, routing, vocab, b, s, ac, fake_mesh(4), qk_norm=True)
    ours = _parcalc_peak(shape, moe, ac, qk_norm=True)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)


def test_qwen3_q_k_norms_keep_the_projections_outputs_and_an_fp32_rstd_a_head() -> None:
    """FusedRmsNormBackward0 saves its input and rstd (memory_torchtitan.TT_QK_NORM_SOURCES['autograd']): under no
    checkpointing a Qwen3 block keeps wq's output (T x heads x head_dim, bf16), wk's (T x kv heads x head_dim) and one fp32
    rstd a token and head, none of which the Llama block keeps (RoPE drops the projections' outputs)."""
    from parcalc.core.memory_fsdp import FsdpStep, StreamWalk, walk_fsdp_step
    from parcalc.core.model import MixtureOfExperts

    from .titan_walks import TRACKED_STEP

    hidden, heads, kv_heads = ONE_BLOCK[:3]
    model = replace(titan_llama(*ONE_BLOCK[:6]), moe=MixtureOfExperts(8, 2, 384), qk_norm=True)
    walk = StreamWalk()
    walk_fsdp_step(model, FsdpStep(16, 256, 4, **TRACKED_STEP), walk)  # type: ignore[arg-type]
    tokens, head_dim = 16 * 256, hidden // heads
    assert walk.peak_phase == "forward: layer 1 of 1"
    saved = {t.what: t.bytes for t in walk.peak_live if t.kind == "activations"}
    assert saved["wq output (saved by q_norm)"] == tokens * heads * head_dim * 2
    assert saved["wk output (saved by k_norm)"] == tokens * kv_heads * head_dim * 2
    assert saved["q_norm rstd (fp32, saved by the fused RMSNorm)"] == tokens * heads * 4
    assert saved["k_norm rstd (fp32, saved by the fused RMSNorm)"] == tokens * kv_heads * 4


# DeepSeek's first n_dense_layers blocks dense (the FeedForward of ffn); (shape, MoE, dense blocks, checkpointing, phase).
# Measured 2026-11-30 also (left out for the suite's time): ACTIVATION_HEAVY, SHARED, 1 dense, none 1.0000; WEIGHT_HEAVY,
# 3 of 4 dense, shared 1408, none 1.0000 (walking every block as MoE: 1.10, 1.13 and 1.47 of the tracker)
DENSE_FIRST_CASES = [
    pytest.param(ACTIVATION_HEAVY, SHARED, 1, "full", "backward: layer 2 of 2 (recomputed)", id="first-dense-shared-full"),  # 1.0002
]


@pytest.mark.parametrize("shape, moe, dense, ac, phase", DENSE_FIRST_CASES)
def test_dense_first_layers_match_fsdp_mem_tracker(shape: tuple, moe: tuple, dense: int, ac: str, phase: str) -> None:
    """A MoE model whose first blocks are dense (memory_torchtitan.layer_shapes / layer_model: their FeedForward, their
    parameters, no MoE buffers); the tracker's total within 0.1 %."""
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_moe import MoeConfig, tracked_moe_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    experts, top_k, expert_ffn, shared_ffn, route_norm = moe
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    routing = MoeConfig(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared_ffn, route_norm=route_norm)
    tracked = tracked_moe_peak(config, routing, vocab, b, s, ac, fake_mesh(4), dense_first=dense)
    ours = _parcalc_peak(shape, moe, ac, dense_first=dense)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("BUFFER", "buffers")):
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)


# (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim): Moonlight's / DeepSeek-V2-Lite's (no query
# latent) and DeepSeek-V3's (a query latent) at a small size, v_head_dim = hidden / heads = 128 as in the presets' head_dim
MLA_NO_Q_LORA = (0, 256, 128, 64, 128)
MLA_Q_LORA = (192, 256, 128, 64, 128)
DEEPSEEK_LIKE = (8, 2, 384, 384, True)  # routed experts and one shared FeedForward

# (shape, MLA, MoE, dense blocks first, checkpointing, phase). Measured 2026-11-30 also: MLA_NO_Q_LORA, first block dense,
# none 1.0000 (left out for the suite's time)
MLA_CASES = [
    pytest.param(ACTIVATION_HEAVY, MLA_NO_Q_LORA, DEEPSEEK_LIKE, 1, "full", "backward: layer 2 of 2 (recomputed)", id="mla-first-dense-full"),  # 1.0002
    pytest.param(ACTIVATION_HEAVY, MLA_Q_LORA, DEEPSEEK_LIKE, 0, "none", "backward: loss", id="mla-q-lora-none"),  # 1.0001
    pytest.param(ONE_BLOCK, MLA_Q_LORA, DEEPSEEK_LIKE, 0, "full", "backward: layer 1 of 1 (recomputed)", id="mla-q-lora-one-block-full"),  # 1.0002
]


@pytest.mark.parametrize("shape, mla, moe, dense, ac, phase", MLA_CASES)
def test_deepseek_mla_peak_matches_fsdp_mem_tracker(shape: tuple, mla: tuple, moe: tuple, dense: int, ac: str, phase: str) -> None:
    """DeepSeek-V3 / Moonlight under torchtitan: b5bcd76's latent attention (memory_torchtitan_mla) with FlexAttention and
    the fused RMSNorms as their CUDA kernels allocate, dense-first blocks, shared experts; the tracker's total within 0.1 %."""
    from parcalc.core.model import LatentAttention, MixtureOfExperts

    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_moe import MlaConfig, MoeConfig, tracked_moe_peak

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    experts, top_k, expert_ffn, shared_ffn, route_norm = moe
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    routing = MoeConfig(experts=experts, top_k=top_k, expert_ffn=expert_ffn, shared_ffn=shared_ffn, route_norm=route_norm)
    tracked = tracked_moe_peak(config, routing, vocab, b, s, ac, fake_mesh(4), dense_first=dense, mla=MlaConfig(*mla))
    routed = MixtureOfExperts(experts, top_k, expert_ffn, shared_experts=1, shared_ffn_hidden=shared_ffn, first_dense_layers=dense)
    model = replace(titan_llama(hidden, heads, kv_heads, ffn, layers, vocab), moe=routed, mla=LatentAttention(*mla))
    ours = tracked_step_peak(model, b, s, 4, "mixed-bf16", ac)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=0.001), (ours.phase, tracked, ours.parts)
    assert ours.phase.startswith(phase)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("BUFFER", "buffers")):
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked[category], rel=0.01, abs=4096), (category, tracked, ours.parts)
