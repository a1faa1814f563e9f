"""Ground truth: multi-head latent attention in real PyTorch (CPU) against parcalc's MLA activations.

tests/ground_truth/tiny_mla.py is Megatron-LM's MLASelfAttention in small (the down projections,
the latent RMSNorms with the up projections after them, RoPE on the rotary parts, Q and K of
heads x (nope + rope) and V of heads x v_head_dim made contiguous, causal attention, the output
projection). Autograd's saved storages of one forward and backward equal parcalc's tensors from
the down projections' input to the output projection's input (layer_saved_tensors, qkv_input ..
proj_input), plus the fp32 rstd of each latent norm (b x s values), which parcalc leaves out as it
leaves out every norm's statistics (Korthikanti et al.). The kv norm's input is a torch.split view of
the kv down projection's output, so the whole [c_kv, k_rope] storage stays: kv_lora + rope per token.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.activations import ActivationConfig, layer_saved_tensors
from parcalc.core.model import LatentAttention, Mlp, Norm, Position, TransformerModel

from .tiny_mla import TinyMla, saved_storages

BATCH, SEQ, HIDDEN, HEADS = 2, 12, 32, 4


def shape_of(q_lora: int, kv_lora: int, nope: int, rope: int, v_dim: int) -> TransformerModel:
    return TransformerModel(
        key="tiny-mla", name="tiny MLA", layers=1, hidden=HIDDEN, heads=HEADS, kv_heads=HEADS, head_dim=v_dim, ffn_hidden=64,
        mlp=Mlp.SWIGLU, vocab=0, max_seq_len=0, tied_embeddings=True, position=Position.ROPE, norm=Norm.RMSNORM, bias=False,
        source="tests/ground_truth/tiny_mla.py", dropout=False, mla=LatentAttention(q_lora, kv_lora, nope, rope, v_dim),
    )  # fmt: skip


def attention_bytes(model: TransformerModel, config: ActivationConfig) -> float:
    """parcalc's saved tensors from the down projections' input to the output projection's input."""
    keys = [t.key for t in layer_saved_tensors(model, config)]
    span = layer_saved_tensors(model, config)[keys.index("qkv_input"): keys.index("proj_input") + 1]
    return sum(t.bytes(config) for t in span)


# (q_lora, kv_lora, nope, rope, v): DeepSeek-V3's proportions scaled down (qk 12 = 8 + 4 against v 8,
# as 192 = 128 + 64 against 128), and DeepSeek-V2-Lite's / Moonlight's full query projection (q_lora 0)
SHAPES = [(16, 12, 8, 4, 8), (0, 12, 8, 4, 8), (20, 16, 6, 6, 10)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize("dtype", DTYPES, ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=["v3-like", "no-q-lora", "v-wider-than-nope"])
def test_saved_tensors_equal_parcalc(shape: tuple[int, int, int, int, int], dtype: str) -> None:
    torch.manual_seed(0)
    q_lora, kv_lora, nope, rope, v_dim = shape
    block = TinyMla(HIDDEN, HEADS, q_lora, kv_lora, nope, rope, v_dim, SEQ, dtype=DTYPES[dtype])
    x = torch.randn(BATCH, SEQ, HIDDEN, dtype=DTYPES[dtype], requires_grad=True)
    storages = saved_storages(block, x)
    e = torch.tensor([], dtype=DTYPES[dtype]).element_size()
    model = shape_of(*shape)
    predicted = attention_bytes(model, ActivationConfig(BATCH, SEQ, dropout=False, activation_bytes=float(e)))
    # by hand, per token: x h, [c_q, normed c_q] 2 q_lora, [c_kv, k_rope] kv_lora + rope, normed c_kv kv_lora,
    # Q and K heads (nope + rope) each, V heads v, output heads v; per sequence the heads' s x s softmax
    per_token = HIDDEN + 2 * q_lora + (kv_lora + rope) + kv_lora + 2 * HEADS * (nope + rope) + 2 * HEADS * v_dim
    assert predicted == e * (BATCH * SEQ * per_token + BATCH * HEADS * SEQ * SEQ)
    rstd = [n for shape_, dt, n in storages if shape_ == (BATCH, SEQ, 1) and dt == torch.float32]
    norms = 2 if q_lora else 1
    assert rstd == [4 * BATCH * SEQ] * norms  # one fp32 rstd per latent norm: the statistics parcalc leaves out
    kv_storage = [n for shape_, _dt, n in storages if shape_ == (BATCH, SEQ, kv_lora)]
    assert kv_storage[0] == e * BATCH * SEQ * (kv_lora + rope)  # the kv norm's saved view holds [c_kv, k_rope]
    assert sum(n for _s, _d, n in storages) == predicted + sum(rstd), storages


def test_up_projection_recompute_keeps_the_latents_only() -> None:
    """--recompute-modules mla_up_proj (Megatron's CheckpointWithoutOutput around qkv_up_proj_and_rope_apply):
    of the latents and Q, K, V only c_q and [c_kv, k_rope] stay; the softmax output stays (core attention
    is not recomputed). DeepSeek-V3 per token, bf16, t = 1: c_q 1536, [c_kv, k_rope] 576 against, without
    it, also normed c_q 1536, normed c_kv 512, Q and K 128 x 192 each and V 128 x 128."""
    model = TransformerModel(
        key="dsv3-attn", name="DeepSeek-V3 attention", layers=1, hidden=7168, heads=128, kv_heads=128, head_dim=128,
        ffn_hidden=18432, mlp=Mlp.SWIGLU, vocab=0, max_seq_len=0, tied_embeddings=True, position=Position.ROPE,
        norm=Norm.RMSNORM, bias=False, source="presets/models/deepseek-v3.yaml", dropout=False,
        mla=LatentAttention(1536, 512, 128, 64, 128),
    )  # fmt: skip
    plain = ActivationConfig(1, 4096, dropout=False, flash_attention=True)
    again = ActivationConfig(1, 4096, dropout=False, flash_attention=True, mla_up_proj=True)
    tokens = 4096

    def by_key(config: ActivationConfig) -> dict[str, float]:
        return {t.key: t.bytes(config) for t in layer_saved_tensors(model, config)}

    kept, dropped = by_key(again), by_key(plain)
    assert kept["q_latent"] == 2 * tokens * 1536 and kept["kv_latent"] == 2 * tokens * 576
    assert set(dropped) - set(kept) == {"q_latent_norm", "kv_latent_norm", "q", "k", "v"}
    saved = sum(dropped.values()) - sum(kept.values())
    assert saved == 2 * tokens * (1536 + 512 + 2 * 128 * 192 + 128 * 128)  # 1.19 GiB per layer at s = 4096
