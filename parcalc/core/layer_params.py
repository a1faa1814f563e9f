"""Parameters of one transformer layer on one tensor-parallel rank: what memory (the weights and
their states) and expert parallelism (an MoE layer's dense part) both count from.

A module of its own so that parcalc.core.memory and parcalc.core.expert_parallel, which need it
both, do not import each other.
"""

from __future__ import annotations

from parcalc.core.model import TransformerModel


def layer_params_per_rank(model: TransformerModel, tp: int) -> int:
    """Parameters of one layer on one TP rank (Megatron-LM's split, Shoeybi et al. 2019 sec. 3).

    Column-parallel QKV and MLP-up/gate split weights and biases; row-parallel output and
    MLP-down split weights, their biases and the norms are replicated.
    """
    h, q, kv, f = model.hidden, model.q_width, model.kv_width, model.ffn_hidden
    matrices = 3 if model.mlp.gated else 2
    weights = (h * q + 2 * h * kv + q * h + matrices * h * f) // tp
    biases = ((q + 2 * kv + (matrices - 1) * f) // tp + 2 * h) if model.bias else (q + 2 * kv) // tp if model.qkv_bias else 0
    if model.mla is not None:  # multi-head latent attention: its own projections and latent norms (LatentAttention.params),
        # split evenly over tp: exact at tp = 1 (DeepSeek-V3's run); Megatron's MLA TP split is not modelled
        weights = model.attention_params_per_layer // tp + matrices * h * f // tp
    sinks = model.heads // tp if model.attention_sinks else 0  # gpt-oss: one sink logit per head, split with the heads
    return weights + biases + model.norm_params_per_layer + sinks
