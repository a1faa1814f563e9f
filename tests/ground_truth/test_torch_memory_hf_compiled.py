"""Ground truth for `memory --framework hf --compile` (parcalc.core.memory_hf_compiled): transformers' own LlamaForCausalLM
(GQA, tied embeddings, fp32 weights) compiled whole with its loss under autocast(bfloat16), as the Trainer's torch_compile
runs it and as the step-time model assumes (tests/ground_truth/test_torch_hf_compile.py), one steady training step's every
allocation counted on the CPU with torch.profiler (tiny_torchtitan_compile.allocation_peak: MemTracker cannot follow
compiled code), against parcalc's compiled walk of the same step without the weights and optimizer states allocated before
it.

Two settings make the CPU's program the one a GPU runs: rotary's cat lowered as a pointwise cat (config.force_pointwise_cat:
lowering.cat's choice on a GPU; the CPU makes a ConcatKernel of two buffers), and oneDNN off
(torch.backends.mkldnn.flags(enabled=False)): its bf16 matmuls take a scratch buffer from the allocator around each GEMM
(1.2 and 1.9 MB at the LM head's backward of a 256-wide model, 4 % of the step's peak), where cuBLAS works in the workspace
allocated once (the walk's cuBLAS workspaces). Measured 2026-11-30 (torch 2.13.0, transformers 5.17.0): the numbers in
CASES' comments (parcalc / measured); the CPU's flash-attention backward also copies the logsumexp (b x heads x s fp32),
which the walk leaves out, and the walk rounds each tensor to 512-byte blocks (the CPU allocator does not): within 0.2 %."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

# (layers, hidden, heads, kv heads, ffn, vocab, b, s)
WEIGHT_HEAVY = (2, 64, 4, 2, 160, 512, 2, 32)  # the peak at the embedding's gradient: every fp32 gradient and two V x h tables
LOSS_HEAVY = (2, 64, 4, 2, 160, 2048, 4, 128)  # the peak at the LM head's backward: the logits' gradient in their buffer
MLP_HEAVY = (2, 64, 4, 2, 512, 64, 4, 128)  # the peak in the last layer's SwiGLU backward

CASES = [  # parcalc / measured
    pytest.param(WEIGHT_HEAVY, "backward: embedding", id="weight-heavy"),  # 741,376 / 739,080
    pytest.param(LOSS_HEAVY, "backward: LM head", id="loss-heavy"),  # 5,116,416 / 5,115,912
    pytest.param(MLP_HEAVY, "backward: layer 2 of 2", id="mlp-heavy"),  # 5,524,480 / 5,521,672
]


def _measured(shape: tuple[int, ...]) -> int:
    """The second compiled step's allocation peak above what was live before it (parameters, ids)."""
    import transformers
    from torch._inductor import config

    from .hf_causal_lm import hf_causal_lm
    from .tiny_torchtitan_compile import allocation_peak

    layers, hidden, heads, kv_heads, ffn, vocab, b, s = shape
    with hf_causal_lm(layers, hidden, heads, ffn, vocab, fake=False) as built:
        built.config.num_key_value_heads = kv_heads  # hf_causal_lm builds MHA; rebuilt with Llama 3's GQA
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(built.config)
        ids = torch.randint(0, vocab, (b, s))

        def loss(ids: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # accelerate wraps the forward in autocast, then compiles
                return model(input_ids=ids, labels=ids).loss

        compiled = torch.compile(loss)
        torch._dynamo.reset()
        # Inductor's caches kept: a cached graph is the same code, allocating the same (a warm run takes a second)
        with config.patch(force_pointwise_cat=True), torch.backends.mkldnn.flags(enabled=False):
            try:
                compiled(ids).backward()  # compiles
                model.zero_grad(set_to_none=True)
                return allocation_peak(lambda: compiled(ids).backward())
            finally:
                torch._dynamo.reset()


def _parcalc(shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    from parcalc.core.memory_hf_compiled import walk_backward, walk_forward
    from parcalc.core.memory_walk import StepShapes, Walk, peak_of

    layers, hidden, heads, kv_heads, ffn, vocab, b, s = shape
    head_dim = hidden // heads
    x = StepShapes(float(b * s), b, s, hidden, hidden, kv_heads * head_dim, ffn, vocab, heads, 4.0, 2.0, True)
    walk = Walk()
    walk_forward(walk, x, layers)
    walk_backward(walk, x, layers, tied=True)
    return peak_of(walk)


@pytest.mark.parametrize("shape, phase", CASES)
def test_compiled_step_peak_matches_every_allocation(shape: tuple[int, ...], phase: str) -> None:
    measured = _measured(shape)
    ours = _parcalc(shape)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), measured {measured:,} B: {ours.allocated / measured:.5f}")
    # within 0.5 %: the walk's 512-byte blocks for the norm weights' gradients (h fp32 each), the loss's scalars and the
    # labels (2,296 B of 739,080 at WEIGHT_HEAVY), and the CPU's logsumexp copy
    assert ours.allocated == pytest.approx(measured, rel=0.005), (ours.phase, ours.parts)
    assert ours.phase == phase


def test_the_compiled_walk_keeps_what_the_partitioner_saves() -> None:
    """At the forward's end the walk holds per layer what the generated forward returns for the backward (read at
    WEIGHT_HEAVY's shape: 14 tensors a layer, 13 in the first, beside the 7 bf16 weight casts): the fp32 input, two 1/rms,
    two bf16 norm outputs, v, k and q after RoPE, SDPA's output and logsumexp, x1 in fp32 (the first layer: o_proj's bf16
    output), gate, up and their product; eager's fp32 norm copies, per-projection casts and fp32 RoPE tensors are gone."""
    from parcalc.core.memory_hf_compiled import walk_forward
    from parcalc.core.memory_walk import StepShapes, Walk

    layers, hidden, heads, kv_heads, ffn, vocab, b, s = WEIGHT_HEAVY
    x = StepShapes(float(b * s), b, s, hidden, hidden, kv_heads * hidden // heads, ffn, vocab, heads, 4.0, 2.0, True)
    walk = Walk()
    walk_forward(walk, x, layers)
    for i, count in ((0, 13), (1, 14)):
        saved = [k for k in walk.live if k.startswith(f"L{i}.") and not k.endswith(".wcopy")]
        assert len(saved) == count, saved
        assert len([k for k in walk.live if k.startswith(f"L{i}.") and k.endswith(".wcopy")]) == 7
    assert ("L0.o" in walk.live, "L0.x1" in walk.live, "L1.x1" in walk.live) == (True, False, True)
    # the loss: the bf16 logits (no fp32 copy), the labels, each row's max and log-sum-exp, the count
    assert walk.live["logits"].bytes == b * s * vocab * 2
