"""Ground truth: an MoE feed-forward block in real PyTorch (CPU) against parcalc's activation and FLOPs formulas.

The block (tests/ground_truth/tiny_moe.py) is Mixtral's: router, fp32 softmax, top-k, gathered token
copies, SwiGLU experts, weighted index_add combine; the shared-expert variant adds DeepSeek's always-on
expert. Whatever the router picks, every token has top_k copies, so the totals do not depend on balance.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, moe_tensors
from parcalc.core.flops import training_flops
from parcalc.core.layer_ops import transformer_layer_ops
from parcalc.core.model import MixtureOfExperts, Mlp, Norm, Position, TransformerModel

from .tiny_moe import TinyMoe, forward_flops, saved_bytes

TOKENS, HIDDEN, FFN = 48, 32, 40


def shape_of(experts: int, top_k: int, shared: int) -> TransformerModel:
    return TransformerModel(
        key="tiny-moe", name="tiny MoE", layers=1, hidden=HIDDEN, heads=4, kv_heads=4, head_dim=8, ffn_hidden=FFN, mlp=Mlp.SWIGLU,
        vocab=0, max_seq_len=0, tied_embeddings=True, position=Position.ROPE, norm=Norm.RMSNORM, bias=False, source="tiny_moe.py",
        dropout=False, moe=MixtureOfExperts(experts, top_k, FFN, shared_experts=1 if shared else 0, shared_ffn_hidden=shared),
    )  # fmt: skip


CASES = [(8, 2, 0, torch.float32), (8, 2, 0, torch.bfloat16), (4, 1, 24, torch.float32), (16, 4, 24, torch.bfloat16)]


@pytest.mark.parametrize(("experts", "top_k", "shared", "dtype"), CASES, ids=["8e-top2-fp32", "8e-top2-bf16", "4e-top1-shared", "16e-top4-shared-bf16"])
def test_saved_tensors_equal_parcalc(experts: int, top_k: int, shared: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    block = TinyMoe(HIDDEN, FFN, experts, top_k, shared, dtype=dtype)
    x = torch.randn(TOKENS, HIDDEN, dtype=dtype, requires_grad=True)
    measured = saved_bytes(block, x)["total"]
    e = float(torch.tensor([], dtype=dtype).element_size())
    model = shape_of(experts, top_k, shared)
    config = ActivationConfig(1, TOKENS, dropout=False, activation_bytes=e)
    formula = HIDDEN * e * TOKENS + sum(t.bytes(config) for t in moe_tensors(model, e))  # the block's input, then moe_tensors
    # parcalc counts a fused SwiGLU (gate, up, product: Megatron-LM's fused_bias_swiglu); unfused PyTorch also keeps silu(gate)
    unfused = e * TOKENS * (top_k * FFN + (shared or 0))
    assert measured == formula + unfused


@pytest.mark.parametrize(("experts", "top_k", "shared"), [(8, 2, 0), (4, 1, 24), (16, 4, 24)])
def test_flop_counter_equals_parcalc(experts: int, top_k: int, shared: int) -> None:
    torch.manual_seed(0)
    block = TinyMoe(HIDDEN, FFN, experts, top_k, shared)
    x = torch.randn(TOKENS, HIDDEN)
    model = shape_of(experts, top_k, shared)
    ops = transformer_layer_ops(model, 1, TOKENS, 4.0, moe_layer=True)
    ffn_keys = ("router", "expert_", "shared_")
    parcalc = sum(op.flops for op in ops if op.kind == "matmul" and op.key.startswith(ffn_keys))
    # router 2 T h E + routed 3 x 2 T k h f + shared 3 x 2 T h f_s, counted by hand
    by_hand = 2 * TOKENS * HIDDEN * experts + 6 * TOKENS * top_k * HIDDEN * FFN + 6 * TOKENS * HIDDEN * shared
    assert forward_flops(block, x) == parcalc == by_hand
    assert training_flops(model, 1, TOKENS).moe_layer_forward.term("F_router").value == 2 * TOKENS * HIDDEN * experts
