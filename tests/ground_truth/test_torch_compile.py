"""Ground truth for --compile's saved activations (issue #18 item 6) with real PyTorch on the CPU.

A small Llama block as TorchTitan writes it (tiny_llama.Block: RMSNorm in fp32, complex RoPE, SDPA,
SwiGLU) runs eagerly and under torch.compile with the "aot_eager_decomp_partition" backend: AOTAutograd
with Inductor's decompositions and Inductor's partitioner (min_cut_rematerialization_partition,
torch/_functorch/partitioners.py), without Inductor's C++ code generation (the "inductor" backend gives
the same saved tensors on this CPU, 44 s to compile instead of 2 s). saved_tensors_hooks see what the
compiled forward hands its backward (CompiledFunction's save_for_backward).

What the partitioner keeps is parcalc's fused-kernel count (parcalc.core.activations, FlashAttention,
no dropout) plus what this model code adds: RMSNorm's fp32 1/rms per token (2 x 4 B), K and V saved
after repeat_kv at the query width (TorchTitan repeats them before SDPA; parcalc counts kv width), and
the RoPE table (complex64, one per model, not per layer). Eager keeps far more (the fp32 copies of
RMSNorm and RoPE): what TorchTitan's published memory drop with compile (82.4 -> 77.0 GiB,
docs/performance.md Table 1) comes from; parcalc's count is the compiled one already.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, layer_activations

from .test_torch_recompute import llama_shape
from .tiny_llama import Block, LlamaConfig, rope

BATCH, SEQ = 2, 16


def saved_bytes(fn, block: Block, x: torch.Tensor, freqs: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """Distinct non-parameter storages the forward saves for backward."""
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: set[int] = set()
    found: list[tuple[tuple[int, ...], torch.dtype, int]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in params and key not in seen and storage.nbytes() > 0:
            seen.add(key)
            found.append((tuple(tensor.shape), tensor.dtype, storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn(x, freqs)
    out.sum().backward()
    return found


@pytest.mark.parametrize("c", [LlamaConfig()], ids=["gqa"])
def test_compiled_block_saves_parcalcs_count(c: LlamaConfig) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    block = Block(c, torch.bfloat16)
    x = torch.randn(BATCH, SEQ, c.hidden, dtype=torch.bfloat16, requires_grad=True)
    freqs = rope(SEQ, c.head_dim)
    compiled = torch.compile(block, backend="aot_eager_decomp_partition", fullgraph=True)
    kept = sum(n for _, _, n in saved_bytes(compiled, block, x, freqs))
    eager = sum(n for _, _, n in saved_bytes(block, block, x, freqs))
    tokens = BATCH * SEQ
    config = ActivationConfig(BATCH, SEQ, flash_attention=True, dropout=False, activation_bytes=2.0)
    parcalc = layer_activations(llama_shape(c), config).per_layer.value
    rstd = 2 * tokens * 4  # two RMSNorms' fp32 1/rms per token
    repeat_kv = 2 * tokens * (c.heads - c.kv_heads) * c.head_dim * 2  # K and V expanded to the query heads, bf16
    table = freqs.untyped_storage().nbytes()  # complex64 RoPE table, shared by all layers
    assert kept == parcalc + rstd + repeat_kv + table
    assert eager > 1.5 * kept  # eager keeps the fp32 intermediates of RMSNorm and RoPE as well (1.66x here, gqa)


def test_compiled_gpt_block_saves_what_eager_saves() -> None:
    """The textbook GPT block (tiny_gpt.Block: LayerNorm, explicit softmax with 1-byte dropout masks, GeLU MLP,
    bias-dropout-add) compiled keeps the same bytes as eager: 127,872 here, which test_torch_memory_flops.py
    ties to parcalc's count (Korthikanti's tensors plus LayerNorm's statistics). The partitioner keeps the
    masks (native_dropout's bool outputs) and the softmax output and recomputes nothing cheaper."""
    from .tiny_gpt import Block as GptBlock
    from .tiny_gpt import TinyConfig

    torch.manual_seed(0)
    torch._dynamo.reset()
    block = GptBlock(TinyConfig(), dtype=torch.bfloat16)
    block.train()
    x = torch.randn(BATCH, 24, TinyConfig().hidden, dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(block, backend="aot_eager_decomp_partition", fullgraph=True)
    eager = sum(n for _, _, n in saved_bytes(lambda t, _f: block(t), block, x, None))
    kept = sum(n for _, _, n in saved_bytes(lambda t, _f: compiled(t), block, x, None))
    assert kept == eager == 127_872
