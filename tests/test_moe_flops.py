"""Mixture-of-Experts and MLA FLOPs against Megatron-LM's num_floating_point_operations.

The reference is megatron/training/training.py at NVIDIA/Megatron-LM commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553, num_floating_point_operations -> transformer_flops
(lines 1087-1310; MLA 1094-1137, GQA 1139-1169, the sum 1255-1310): with BSHD batches (no packing), per iteration

  T x [ 3 x 2 x h x ( f x F x L_dense + f_moe x k x F x L_moe + f_shared x F x L_moe )     (MLP, routed, shared)
        + L x self_attn_term  + 3 x 2 x h x V ]                                              (projections, logits)
  + B s^2 x L x core_term                                                                    (Q K^T and score V, causal: /2)

with T = B s tokens, F = 3 for SwiGLU (2 otherwise), and for MHA/GQA (kv_channels d, n heads, g groups)
  self_attn_term = 6 (h (n d + 2 g d) + n d h),   core_term = 3 x 2 x n d / 2 x 2 (lines 1164-1170: causal half, QK^T and SV);
for MLA (lines 1094-1137)
  self_attn_term = 6 (q_lora (h + n (d_nope + d_rope) + 1) + kv_lora (h + n (d_nope + d_v) + 1) + h d_rope + n d_v h)
  core_term = 6 (n (d_nope + d_rope) / 2 + n d_v / 2).

parcalc counts matmuls; Megatron's formula leaves the router GEMM out (no term for it) and counts the
two latent RMSNorms of MLA as one multiply-add per element (the "+ 1" of each bracket, lines 1105, 1113).
So, derived by hand: parcalc model FLOPs (causal) - 6 T h E L_moe (router) + 6 T (q_lora + kv_lora) L (MLA norms) = Megatron.
"""

from __future__ import annotations

import pytest

from parcalc.core.flops import training_flops
from parcalc.presets import load_model


def megatron_flops(*, B: int, s: int, L: int, h: int, V: int, ffn: int, swiglu: bool, L_moe: int = 0, moe_ffn: int = 0, k: int = 0,
                   shared_ffn: int = 0, n: int, groups: int = 0, d: int = 0, mla: tuple[int, int, int, int, int] | None = None,
                   mtp: int = 0) -> float:  # fmt: skip
    """transformer_flops() of training.py at d98e8a64 with BSHD defaults (seqlen_squared_sum = B s^2, tokens = B s).
    mtp: --mtp-num-layers (lines 1042-1046: num_moe_layers += last_layer_is_moe x mtp, num_layers += mtp; lines
    1287-1303: 3 x 2 x mtp x (3 h + 2 h^2) for the MTP norms and eh_proj, the logits x (mtp + 1))."""
    T = B * s
    F = 3 if swiglu else 2
    L_moe += mtp * (L_moe > 0)  # the MTP block is of the last layer's kind: an MoE layer in every case here
    L += mtp
    L_dense = L - L_moe
    if mla is not None:
        q_lora, kv_lora, nope, rope, v = mla
        q_term = q_lora * (h + n * (nope + rope) + 1)
        attn = 3 * 2 * (q_term + kv_lora * (h + n * (nope + v) + 1) + h * rope + n * v * h)
        core = 3 * 2 * (n * (nope + rope) / 2 + n * v / 2)
    else:
        q, kv = d * n, d * groups
        attn = 3 * 2 * (h * (q + kv + kv) + q * h)
        core = 3 * 2 * q / 2 * 2
    mlp = 3 * 2 * h * (ffn * F * L_dense + moe_ffn * k * F * L_moe + shared_ffn * F * L_moe)
    mtp_terms = 3 * 2 * mtp * (3 * h + 2 * h * h)
    return T * (mlp + attn * L + mtp_terms + 3 * 2 * h * V * (mtp + 1)) + B * s * s * core * L


CASES = [
    # Mixtral 8x7B: every layer MoE, 8 experts top-2 of 14336, GQA 32 heads / 8 groups of 128, SwiGLU
    ("mixtral-8x7b", 2, 4096, dict(L=32, h=4096, V=32000, ffn=14336, swiglu=True, L_moe=32, moe_ffn=14336, k=2, n=32, groups=8, d=128),
     8),
    # DeepSeek-V3: 3 dense layers of 18432, 58 MoE layers of 256 experts top-8 of 2048 plus 1 shared of 2048; MLA; one MTP module
    # (config.json num_nextn_predict_layers 1; Megatron-LM --mtp-num-layers 1)
    ("deepseek-v3", 1, 4096, dict(L=61, h=7168, V=129280, ffn=18432, swiglu=True, L_moe=58, moe_ffn=2048, k=8, shared_ffn=2048, n=128,
                                  mla=(1536, 512, 128, 64, 128), mtp=1), 256),
    # Qwen3-30B-A3B: 48 MoE layers, 128 experts top-8 of 768, kv_channels 128 with hidden 2048 (32 x 128 = 4096 query width)
    ("qwen3-30b-a3b", 4, 2048, dict(L=48, h=2048, V=151936, ffn=6144, swiglu=True, L_moe=48, moe_ffn=768, k=8, n=32, groups=4, d=128),
     128),
    # Llama 4 Scout: 16 experts top-1 of 8192 and a shared expert of 8192 in all 48 layers
    ("llama4-scout", 1, 8192, dict(L=48, h=5120, V=202048, ffn=16384, swiglu=True, L_moe=48, moe_ffn=8192, k=1, shared_ffn=8192, n=40,
                                   groups=8, d=128), 16),
]  # fmt: skip


@pytest.mark.parametrize(("name", "B", "s", "args", "experts"), CASES, ids=[c[0] for c in CASES])
def test_moe_flops_equal_megatron(name: str, B: int, s: int, args: dict, experts: int) -> None:
    model = load_model(name)
    counted = training_flops(model, B, s, causal=True)
    T = B * s
    mtp = args.get("mtp", 0)
    router = 3 * 2 * T * args["h"] * experts * (args["L_moe"] + mtp)
    mla = args.get("mla")
    norms = 3 * 2 * T * (mla[0] + mla[1]) * (args["L"] + mtp) if mla else 0
    # Megatron also counts the MTP modules' three norms (3 h per token), as it does the MLA latent norms; parcalc counts matmuls only
    norms += 3 * 2 * T * mtp * 3 * args["h"]
    expected = megatron_flops(B=B, s=s, **args)
    assert counted.model.value - router + norms == pytest.approx(expected, rel=1e-12)
    # the router is what parcalc adds: a fraction of a percent (h x E against the experts' 3 h f k F)
    assert 0 < router / counted.model.value < 0.01


def test_deepseek_v3_model_flops_by_hand() -> None:
    """One token of DeepSeek-V3 at s = 4096, forward, causal, layer by layer (2 FLOP per multiply-add)."""
    h, n, s = 7168, 128, 4096
    mla = 2 * (h * 1536 + 1536 * n * 192 + h * 576 + 512 * n * 256 + n * 128 * h) + 2 * s * n * (192 + 128) / 2
    dense = mla + 2 * 3 * h * 18432
    moe = mla + 2 * h * 256 + 2 * 3 * h * 2048 * (8 + 1)
    mtp = 2 * 2 * h * h + moe + 2 * h * 129280  # the MTP module: eh_proj (2h -> h), an MoE block, the shared head again
    per_token = 3 * (3 * dense + 58 * moe + 2 * h * 129280 + mtp)
    counted = training_flops(load_model("deepseek-v3"), 1, s, causal=True)
    assert counted.model_per_token.value == pytest.approx(per_token, rel=1e-12)
    assert counted.mtp.value == pytest.approx(s * mtp, rel=1e-12)
    assert counted.six_nd.term("N").value == 37_552_297_472  # 6ND of an MoE model: active parameters
    assert counted.active_params.value == 37_552_297_472 and counted.params.value == 671_026_419_200


def test_dense_layers_and_moe_layers_each_their_own_stage_flops() -> None:
    """DeepSeek-V3 on 4 stages of 16, 15, 15, 15 layers: stage 1 holds the 3 dense layers."""
    from parcalc.core.flops import stage_flops

    counted = training_flops(load_model("deepseek-v3"), 8, 4096, causal=True, recompute="full")
    split = (16, 15, 15, 15)
    each = [stage_flops(counted, split, i).value for i in range(4)]
    assert sum(each) == pytest.approx(counted.hardware.value, rel=1e-12)
    f_dense, f_moe = counted.layer_forward.value, counted.moe_layer_forward.value
    assert each[0] == pytest.approx(4 * (3 * f_dense + 13 * f_moe), rel=1e-12)  # 3 x forward + full recompute = 4 x
    assert each[1] == pytest.approx(4 * 15 * f_moe, rel=1e-12)


def test_dense_model_unchanged_by_moe_fields() -> None:
    counted = training_flops(load_model("llama3-8b"), 1, 8192)
    assert counted.moe_layer_forward is None and counted.params is None
    assert counted.six_nd.term("N").value == load_model("llama3-8b").total_params


def test_capacity_factor_below_one_drops_tokens() -> None:
    import dataclasses

    from parcalc.core.layer_ops import tokens_per_expert

    model = load_model("mixtral-8x7b")
    assert tokens_per_expert(model, 4096) == 1024  # 4096 x 2 / 8, balanced
    capped = dataclasses.replace(model, moe=dataclasses.replace(model.moe, capacity_factor=0.5))
    assert tokens_per_expert(capped, 4096) == 512
    loose = dataclasses.replace(model, moe=dataclasses.replace(model.moe, capacity_factor=1.25))
    assert tokens_per_expert(loose, 4096) == 1024  # under balanced routing nothing exceeds a capacity >= 1


def test_moe_layers_in_counts_what_is_moe_layer_says() -> None:
    """TransformerModel.moe_layers_in's closed form against counting layer by layer (is_moe_layer)
    over every range of a 16-layer model, for leading dense layers 0-3 and MoE every 1-3 layers."""
    from dataclasses import replace

    from parcalc.presets import load_model

    base = load_model("qwen3-30b-a3b", ())
    assert base.moe is not None
    for first in range(4):
        for every in (1, 2, 3):
            model = replace(base, layers=16, moe=replace(base.moe, first_dense_layers=first, every=every))
            for start in range(17):
                for end in range(start, 17):
                    assert model.moe_layers_in(start, end) == sum(model.is_moe_layer(i) for i in range(start, end)), (first, every, start, end)
