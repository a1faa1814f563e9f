"""Ground truth for the hf step peak of the architectures beyond Llama's decoder (parcalc.core.memory_timeline): Qwen3's
q/k norms, and Mixture-of-Experts blocks (Mixtral, Qwen3-MoE). PyTorch's MemTracker over transformers' real
Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM and Qwen2MoeForCausalLM (a shared expert under a sigmoid gate) under
FakeTensorMode on the CPU, as
tests/ground_truth/test_torch_memory_hf.py does for Llama (its module docstring says what differs on the CPU and how it
is set as on a GPU).

The experts run as transformers runs them by default (experts_implementation "grouped_mm", integrations/moe.py
grouped_mm_experts_forward): torch's grouped matmul, whose fake kernel is device-independent, so the CPU allocates what
CUDA does. It takes BF16 only (torch/_meta_registrations.py _meta_grouped_mm_common), so the MoE models are built in
bf16: the hf profile's --precision bf16. The MoE shapes put the peak in the loss (no recomputation) and in the recomputed
first layer (gradient checkpointing), with the experts' saved tensors (S = tokens x top_k rows of gate_up, act, product,
gathered input and down output) the largest part of each layer.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("torch.distributed._tools.mem_tracker")

from .test_torch_memory_hf import tracked_peak  # noqa: E402  (after the skips: it imports torch)

# the parcalc preset each architecture's shape is made from (its norms, MLP and MoE router as transformers has them)
BASE = {"qwen3": "llama3-8b", "mixtral": "mixtral-8x7b", "qwen3_moe": "qwen3-30b-a3b", "qwen2_moe": "qwen3-30b-a3b"}


def parcalc_peak(shape: tuple, checkpoint: bool, precision: str, architecture: str, experts: tuple[int, int] | None):
    from parcalc.core.choices import Precision, Recompute
    from parcalc.core.memory_timeline import HfStep, hf_step_peak
    from parcalc.presets import load_model

    layers, hidden, heads, ffn, vocab, b, s = shape
    base = load_model(BASE[architecture])
    model = replace(base, layers=layers, hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads, ffn_hidden=ffn,
                    vocab=vocab, tied_embeddings=True, qk_norm=architecture.startswith("qwen3"))  # fmt: skip
    if experts is not None:
        model = replace(model, moe=replace(base.moe, experts=experts[0], top_k=experts[1], expert_ffn_hidden=ffn))
    if architecture == "qwen2_moe":  # Qwen3-MoE's router and experts, no q/k norms, q/k/v biases, one gated shared expert
        assert model.moe is not None and experts is not None
        model = replace(model, qkv_bias=True, moe=replace(model.moe, shared_experts=1, shared_ffn_hidden=experts[2], shared_expert_gate=True,
                                                          top_k_renormalised=experts[3]))  # fmt: skip
    return hf_step_peak(model, HfStep(b, s, Precision(precision), recompute=Recompute.FULL if checkpoint else Recompute.NONE,
                                      cublas_workspace=0.0, embedding_backward_tables=2))  # fmt: skip


TOP2 = (2, 256, 4, 512, 1024, 16, 256)  # (layers, hidden, heads, ffn or expert width, vocab, b, s)
CASES = [
    # measured 2026-11-29 (parcalc / MemTracker) in the comments
    pytest.param(TOP2, False, "bf16", "mixtral", (8, 2), "backward: loss", id="mixtral-top2-of-8"),  # 1.0000
    pytest.param((3, 256, 4, 384, 2048, 8, 256), False, "bf16", "mixtral", (16, 4), "backward: loss", id="mixtral-top4-of-16"),  # 1.0000
    pytest.param(TOP2, True, "bf16", "mixtral", (8, 2), "backward: layer 1 of 2 (recomputed)", id="mixtral-checkpointed"),  # 0.9855
    pytest.param((4, 512, 8, 1024, 2048, 8, 64), False, "bf16", "mixtral", (16, 4), "backward: layer 1 of 4", id="mixtral-weight-heavy"),  # 1.0006
    # Qwen3-MoE: q/k norms, the top-k weights cast to bf16 (Qwen3MoeTopKRouter)
    pytest.param(TOP2, False, "bf16", "qwen3_moe", (8, 2), "backward: loss", id="qwen3-moe-top2-of-8"),  # 1.0000
    pytest.param(TOP2, True, "bf16", "qwen3_moe", (8, 2), "backward: layer 1 of 2 (recomputed)", id="qwen3-moe-checkpointed"),  # 1.0141
    # Qwen2-MoE (Qwen1.5-MoE's block): experts (how many, top k, the shared expert's width, norm_topk_prob)
    pytest.param(TOP2, False, "bf16", "qwen2_moe", (8, 2, 1024, False), "backward: loss", id="qwen2-moe-top2-of-8"),  # 1.0000
    pytest.param(TOP2, True, "bf16", "qwen2_moe", (8, 2, 1024, False), "backward: layer 1 of 2 (recomputed)", id="qwen2-moe-checkpointed"),  # 1.0113
    # the peak in the last layer's experts' backward, with the shared expert's output gradient held (Qwen3-MoE: 1.0070 here)
    pytest.param((2, 256, 4, 1024, 512, 16, 512), False, "bf16", "qwen2_moe", (8, 2, 2048, True), "backward: layer 2 of 2",
                 id="qwen2-moe-in-the-experts"),  # 1.0049
    # dense Qwen3: the Llama cases' ratios at the same shape (the q/k norms add no error)
    pytest.param((4, 1024, 8, 2816, 2048, 8, 64), False, "mixed-bf16", "qwen3", None, "backward: layer 4 of 4", id="qwen3-mixed"),  # 1.0107
    pytest.param((4, 1024, 8, 2816, 2048, 8, 64), False, "bf16", "qwen3", None, "backward: layer 4 of 4", id="qwen3-bf16"),  # 1.0023 (0.9966 before the RMSNorm pow backward temporaries)
    pytest.param((4, 1024, 8, 2816, 2048, 8, 64), False, "fp32", "qwen3", None, "backward: layer 4 of 4", id="qwen3-fp32"),  # 1.0000
    pytest.param((4, 1024, 8, 2816, 2048, 8, 64), True, "mixed-bf16", "qwen3", None, "backward: layer 1 of 4 (recomputed)",
                 id="qwen3-checkpointed"),  # 1.0134
]


@pytest.mark.parametrize("shape, checkpoint, precision, architecture, experts, phase", CASES)
def test_hf_peak_matches_memtracker(shape: tuple, checkpoint: bool, precision: str, architecture: str, experts: tuple | None,
                                    phase: str) -> None:  # fmt: skip
    tracked, _parts = tracked_peak(*shape, checkpoint, precision, architecture, experts)
    ours = parcalc_peak(shape, checkpoint, precision, architecture, experts)
    b, s = shape[-2:]
    assert b * s * s * 2 < 0.02 * tracked  # the CPU-only causal mask (b x 1 x s x s) is under 2 % of the peak here
    print(f"{architecture}: parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.02)
    assert ours.phase.startswith(phase)
