"""The activations of a gated-DeltaNet hybrid (Qwen3-Next: parcalc.core.linear_attention): what a gated-DeltaNet mixer
keeps for backward, per token and layer, as the GPU code that trains it runs, and the stage sum that swaps it for the
attention mixer in its layers. The hook in parcalc.core.memory calls these for a model with a `linear_attention:` block.

A Qwen3-Next layer is a transformer layer whose attention is, in 3 of every 4 layers, a gated-DeltaNet mixer
(Qwen3NextDecoderLayer: input_layernorm, the mixer, the residual, post_attention_layernorm, the MoE block): the norms,
the residual and the MoE block are the transformer layer's (parcalc.core.activations), and only the mixer's tensors
differ. The mixer as transformers' Qwen3NextGatedDeltaNet builds it (HF_GDN) with its GPU kernels: causal-conv1d's
causal_conv1d_fn (CONV_SAVED), flash-linear-attention's chunk_gated_delta_rule with use_qk_l2norm_in_kernel (FLA_SAVED)
and fla's fused gated RMSNorm (NORM_GATE_SAVED). Per token on one GPU of a TP group of t (heads split over t, the way
Megatron-LM splits attention heads), e bytes per activation:
- in_proj's input, the normed hidden states (h; in_proj_qkvz and in_proj_ba keep the one tensor), split by SP only;
- the conv's input mixed_qkv = cat(q, k, v) (conv_dim = 2 key_dim + value_dim): causal_conv1d_fn keeps x and recomputes
  the convolution and its SiLU in backward;
- the delta rule's q and k after its L2 norm (key_dim each: fla applies grouped value attention itself, q and k stay
  at the key heads), their fp32 rstd (one per key head), v (value_dim, a contiguous copy: input_guard), the decay's
  chunk-local cumulative sum g (fp32, one per value head), beta (e, one per value head; sigmoid's saved output too) and
  A, the inverted UT system of each chunk (64 values per value head and token, in q's dtype);
- the decay's computation in PyTorch, g = -exp(A_log) * softplus(a + dt_bias) in fp32: softplus keeps its input and
  the product its output (fp32, one per value head each);
- the gated norm's input o and gate z (value_dim each) and its fp32 rstd (one per value head: the norm runs per head);
- out_proj's input, the norm's output (value_dim).
The PyTorch fallback (torch_chunk_gated_delta_rule, the eager conv and norm) keeps far more (fp32 chunks, the per-chunk
loop's operands): `torch_path_tensors` counts its conv and gated norm, what the CPU ground truth holds apart; the
memory counts the GPU path above. With full recomputation a gated-DeltaNet layer, like any layer, keeps its input.
"""

from __future__ import annotations

from parcalc.core.activations import (
    KORTHIKANTI,
    ActivationConfig,
    Recompute,
    SavedTensor,
    _attention_tensors,
)
from parcalc.core.hybrid_context import check_mixer_cp
from parcalc.core.layout import Layout
from parcalc.core.linear_attention import GatedDeltaNet, chunks
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

HF_GDN = ("transformers models/qwen3_next/modeling_qwen3_next.py (5.24), Qwen3NextGatedDeltaNet.forward: in_proj_qkvz and "
          "in_proj_ba of the normed hidden states, mixed_qkv = cat(q, k, v) into causal_conv1d_fn, beta = b.sigmoid(), "
          "g = -A_log.float().exp() * F.softplus(a.float() + dt_bias), chunk_gated_delta_rule(use_qk_l2norm_in_kernel=True), "
          "self.norm(core_attn_out, z), out_proj")  # fmt: skip
FLA_SAVED = ("fla-org/flash-linear-attention fla/ops/gated_delta_rule/chunk.py @bc3b101d, ChunkGatedDeltaRuleFunction.forward: "
             "ctx.save_for_backward(q, q_rstd, k, k_rstd, v, g, beta_raw, beta, A, ...) after l2norm_fwd (rstd fp32 per row, "
             "fla/modules/l2norm.py), chunk_local_cumsum (output_dtype torch.float) and chunk_gated_delta_rule_fwd_intra "
             "(A of [B, T, HV, 64] in k.dtype, chunk_fwd.py); q, k at H key heads (GVA: HV value heads)")  # fmt: skip
CONV_SAVED = ("Dao-AILab/causal-conv1d causal_conv1d/causal_conv1d_interface.py @17f4f2fe, CausalConv1dFn.forward: "
              "ctx.save_for_backward(x, weight, bias, seq_idx, initial_states); the convolution and SiLU run again in backward")  # fmt: skip
NORM_GATE_SAVED = ("fla-org/flash-linear-attention fla/modules/fused_norm_gate.py @bc3b101d, LayerNormGatedFunction.forward: "
                   "ctx.save_for_backward(residual_out, g, weight, bias, mean, rstd), rstd fp32 per row (one per value head)")  # fmt: skip
TORCH_PATH = ("transformers 5.24's PyTorch fallback (no causal-conv1d, no flash-linear-attention): causal_conv1d_fn as "
              "F.conv1d(padding K - 1)[..., :T] then SiLU; Qwen3NextRMSNormGated in fp32 (x.float(), rsqrt, weight, silu(gate.float()))")  # fmt: skip
FP32 = 4.0
UT_CHUNK = 64  # fla's chunk (chunk_size=64): A holds each chunk's 64 x 64 inverse, 64 values per token and value head


def check_linear_memory(model: TransformerModel, par: Layout, recompute: Recompute, *, step_memory: str) -> None:
    """What the gated-DeltaNet memory covers: the textbook sum with TP (SP), PP, DP, ZeRO and EP; recomputation none or
    full; context parallelism as Megatron-Core runs it (parcalc.core.hybrid_context: all-to-alls over heads, every tensor
    1/cp on a rank)."""
    gdn = model.linear_attention
    assert gdn is not None
    refused = [what for what, bad in (
        (f"the {step_memory} step walk (its layers are softmax-attention layers; the textbook sum covers gated DeltaNet)",
         step_memory != "textbook"),
        ("--pipeline-layout (its stages' gated-DeltaNet layers are counted from the even split's layer ranges)",
         par.pipeline_layout is not None),
        ("--recompute selective / op (none or full only)", recompute not in (Recompute.NONE, Recompute.FULL)),
    ) if bad]  # fmt: skip
    if refused:
        raise InputError(f"--model: {model.name} has gated-DeltaNet layers; their memory is counted without {refused[0]}")
    for what, value in (("gated-DeltaNet key heads", gdn.key_heads), ("gated-DeltaNet value heads", gdn.value_heads)):
        if value % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the {what} ({value}); tensor parallelism splits them")
    check_mixer_cp(model, par.tp, par.cp)  # Megatron-Core's all-to-all CP (parcalc.core.hybrid_context)


def linear_layout_reason(par: Layout, recompute: Recompute) -> str | None:
    """Why fit cannot count a gated-DeltaNet hybrid on this layout (None: it can): what check_linear_memory refuses."""
    if recompute not in (Recompute.NONE, Recompute.FULL):
        return "a gated-DeltaNet hybrid's recomputation is none or full"
    if par.pipeline_layout is not None:
        return "a gated-DeltaNet hybrid is counted without --pipeline-layout"
    return None


def gdn_mixer_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """What one gated-DeltaNet mixer keeps for backward on the GPU path (the module docstring), in forward order."""
    gdn = model.linear_attention
    assert gdn is not None
    e, g = config.activation_bytes, config.linear_input_bytes
    hv, hk = gdn.value_heads, gdn.key_heads
    return [
        SavedTensor("gdn_in_proj_input", "in_proj_qkvz / in_proj_ba input (the norm's output)", "token", model.hidden, g, "sp", False, HF_GDN),
        SavedTensor("gdn_conv_input", "conv1d input cat(q, k, v)", "token", gdn.conv_dim, e, "tp", False, CONV_SAVED),
        SavedTensor("gdn_softplus_input", "a + dt_bias, softplus's input (fp32)", "token", hv, FP32, "tp", False, HF_GDN),
        SavedTensor("gdn_softplus_output", "softplus(a + dt_bias), the decay product's operand (fp32)", "token", hv, FP32, "tp", False, HF_GDN),
        SavedTensor("gdn_q", "q after the L2 norm", "token", gdn.key_dim, e, "tp", False, FLA_SAVED),
        SavedTensor("gdn_q_rstd", "q's L2-norm rstd (fp32, one per key head)", "token", hk, FP32, "tp", False, FLA_SAVED),
        SavedTensor("gdn_k", "k after the L2 norm", "token", gdn.key_dim, e, "tp", False, FLA_SAVED),
        SavedTensor("gdn_k_rstd", "k's L2-norm rstd (fp32, one per key head)", "token", hk, FP32, "tp", False, FLA_SAVED),
        SavedTensor("gdn_v", "v", "token", gdn.value_dim, e, "tp", False, FLA_SAVED),
        SavedTensor("gdn_g_cumsum", "decay g, chunk-local cumulative sum (fp32)", "token", hv, FP32, "tp", False, FLA_SAVED),
        SavedTensor("gdn_beta", "beta = sigmoid(b)", "token", hv, e, "tp", False, FLA_SAVED),
        SavedTensor("gdn_ut_inverse", "A, each chunk's inverted UT system (64 per value head)", "token", UT_CHUNK * hv, e, "tp", False, FLA_SAVED),
        SavedTensor("gdn_norm_input", "gated norm input o (the delta rule's output)", "token", gdn.value_dim, e, "tp", False, NORM_GATE_SAVED),
        SavedTensor("gdn_norm_gate", "gated norm gate z", "token", gdn.value_dim, e, "tp", False, NORM_GATE_SAVED),
        SavedTensor("gdn_norm_rstd", "gated norm rstd (fp32, one per value head)", "token", hv, FP32, "tp", False, NORM_GATE_SAVED),
        SavedTensor("gdn_out_proj_input", "out_proj input (the gated norm's output)", "token", gdn.value_dim, g, "tp", False,
                    f"{HF_GDN}; a linear keeps its input"),
    ]  # fmt: skip


def torch_path_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """What transformers' PyTorch fallback keeps in place of the GPU path's conv and gated norm (TORCH_PATH), per token:
    F.conv1d's input, SiLU's input (the padded convolution's output: its storage holds T + K - 1 positions, counted per
    token here), and the fp32 norm's x.float(), rstd, the normalised bf16 copy, gate.float(), silu(gate) and the product
    before the cast. Not what the memory counts (gdn_mixer_tensors); the CPU ground truth holds it apart."""
    gdn = model.linear_attention
    assert gdn is not None
    e, vd, hv = config.activation_bytes, gdn.value_dim, gdn.value_heads
    return [
        SavedTensor("conv_input", "F.conv1d input", "token", gdn.conv_dim, e, "tp", False, TORCH_PATH),
        SavedTensor("silu_input", "SiLU input, the convolution's output", "token", gdn.conv_dim, e, "tp", False, TORCH_PATH),
        SavedTensor("norm_x_fp32", "x.float()", "token", vd, FP32, "tp", False, TORCH_PATH),
        SavedTensor("norm_rstd", "rsqrt(variance + eps) (fp32, one per value head)", "token", hv, FP32, "tp", False, TORCH_PATH),
        SavedTensor("norm_normed", "normalised x in x's dtype (weight's operand)", "token", vd, e, "tp", False, TORCH_PATH),
        SavedTensor("norm_gate_fp32", "gate.float(), SiLU's input", "token", vd, FP32, "tp", False, TORCH_PATH),
        SavedTensor("norm_silu", "silu(gate) (fp32), the product's operand", "token", vd, FP32, "tp", False, TORCH_PATH),
        SavedTensor("norm_scaled", "weight x normalised x, the product's other operand", "token", vd, e, "tp", False, TORCH_PATH),
    ]  # fmt: skip


def torch_chunk_rule_bytes(gdn: GatedDeltaNet, batch: int, seq_len: int) -> tuple[tuple[str, float], ...]:
    """(what, bytes) autograd keeps in transformers 5.24's torch_chunk_gated_delta_rule (the PyTorch fallback, TP 1), fp32
    throughout: q and k cast to fp32 and repeated to the value heads, their L2 norms' inverses, then over the sequence
    padded to whole chunks (T_p) beta, v, the normalised k, K_beta, the scaled q, exp(cum_decay) three times, the UT
    system's solutions (new values, K_cum), the decayed k and q; per chunk and head C x C matrices (the pairwise decay,
    K_beta K^T, Q K^T, the UT system, the intra-chunk attention), the chunk decay; the per-chunk loop's recurrent
    states S_0 .. S_{n-1} and each chunk's V_new; and the bool causal mask. Not what the memory counts (FLA_SAVED)."""
    c, n = UT_CHUNK, chunks(seq_len)
    padded = n * c
    bh = batch * gdn.value_heads  # (sequence, value head)
    dk, dv = gdn.key_head_dim, gdn.value_head_dim
    return (
        ("q, k in fp32 and their L2 norms' inverses (T)", FP32 * bh * seq_len * 2 * (dk + 1)),
        ("beta, exp(cum_decay) x 3 (T_p)", FP32 * bh * padded * 4),
        ("v, new values, V_new of each chunk (T_p x d_v)", FP32 * bh * padded * dv * 3),
        ("normalised k, K_beta, scaled q, K_cum, decayed k and q (T_p x d_k)", FP32 * bh * padded * dk * 6),
        ("pairwise decay, K_beta K^T, Q K^T, UT system, intra-chunk attention (C x C per chunk)", FP32 * bh * n * c * c * 5),
        ("chunk decay (one per chunk)", FP32 * bh * n),
        ("recurrent states S_0 .. S_{n-1} (d_k x d_v)", FP32 * bh * n * dk * dv),
        ("causal mask (bool C x C)", 1.0 * c * c),
    )


def mixer_delta(model: TransformerModel, config: ActivationConfig) -> float:
    """Bytes a gated-DeltaNet layer keeps beyond a softmax-attention layer of the model, one micro-batch on one GPU: the
    mixer's tensors less attention's (parcalc.core.activations._attention_tensors); 0 with full recomputation (each
    layer keeps its input)."""
    if config.recompute is Recompute.FULL:
        return 0.0
    gdn = sum(t.bytes(config) for t in gdn_mixer_tensors(model, config))
    return gdn - sum(t.bytes(config) for t in _attention_tensors(model, config))


def linear_layers_per_stage(model: TransformerModel, split: tuple[int, ...], chunks: int) -> tuple[int, ...]:
    """The gated-DeltaNet layers of each stage holding `split` layers (its chunks' layer ranges under the interleaved
    schedule: `chunks` model chunks per stage where they divide every stage's layers)."""
    from parcalc.core.expert_parallel import stage_ranges

    gdn = model.linear_attention
    assert gdn is not None
    v = chunks if all(n % chunks == 0 for n in split) else 1
    return tuple(sum(gdn.linear_layers_in(r.start, r.stop) for r in ranges) for ranges in stage_ranges(split, v))


def stage_linear_layers(model: TransformerModel, par: Layout, stage: int) -> int:
    """The gated-DeltaNet layers of stage `stage` of the layout."""
    return linear_layers_per_stage(model, par.stage_layers(model.layers), par.chunks)[stage]


def with_linear_mixers(model: TransformerModel, par: Layout, config: ActivationConfig, layers: Derivation, stage: int) -> Derivation:
    """A stage's activations (every layer counted as a softmax-attention layer) with each gated-DeltaNet layer's mixer
    in place of attention's: + ΔA_gdn × L_gdn × n, n the micro-batches in flight (the input `n` of `layers`)."""
    delta = mixer_delta(model, config)
    count = stage_linear_layers(model, par, stage)
    n = next(t for t in layers.inputs if t.key == "n")  # the micro-batches in flight
    terms = (Term("dA_gdn", "ΔA_gdn", r"\Delta A_{\mathrm{gdn}}", delta, "B", "one gated-DeltaNet layer's mixer tensors less "
                  "attention's, one micro-batch (table 'layer_activations')", f"{FLA_SAVED}; {CONV_SAVED}; {NORM_GATE_SAVED}"),
             Term("L_gdn", "L_gdn", r"L_{\mathrm{gdn}}", count, "", f"gated-DeltaNet layers of stage {stage + 1}"))  # fmt: skip
    return Derivation(
        key=layers.key,
        label=f"{layers.label}; gated-DeltaNet layers their own mixer",
        symbol=layers.symbol,
        latex_symbol=layers.latex_symbol,
        formula=f"{layers.formula} + $dA_gdn × $L_gdn × $n",
        formula_latex=rf"{layers.formula_latex} + $dA_gdn \times $L_gdn \times $n",
        inputs=(*layers.inputs, *terms),
        value=layers.value + delta * count * n.value,
        unit="B",
        source=f"{layers.source}; the gated-DeltaNet mixer as transformers and flash-linear-attention train it ({HF_GDN})",
        assumptions=layers.assumptions,
    )


def linear_recompute_working_set(model: TransformerModel, config: ActivationConfig, base: Derivation | None) -> Derivation | None:
    """With full recomputation the largest layer lives again during its backward: a gated-DeltaNet layer's every tensor
    when it is larger than a softmax-attention layer's (`base`)."""
    if base is None or config.recompute is not Recompute.FULL:
        return base
    from dataclasses import replace

    delta = mixer_delta(model, replace(config, recompute=Recompute.NONE))
    if delta <= 0:
        return base
    value = base.value + delta
    return replace(base, inputs=(Term("A_re", "A_recomputed", r"A_{\mathrm{re}}", value, "B",
                                      "a gated-DeltaNet layer's every saved tensor, one micro-batch"),), value=value,
                   source=f"{KORTHIKANTI} sec. 5; the gated-DeltaNet layer's mixer ({FLA_SAVED})")  # fmt: skip


def layer_rows(model: TransformerModel, config: ActivationConfig) -> tuple[tuple[object, ...], ...]:
    """(tensor, elements per micro-batch, bytes per element, split over, bytes on this GPU, source) of the mixer's tensors
    (the memory command's 'layer_activations' table gets them after the attention layer's, named [gated DeltaNet])."""
    if config.recompute is Recompute.FULL:
        return ()
    rows = []
    for t in gdn_mixer_tensors(model, config):
        divisor = t.divisor(config.tp, config.sequence_parallel)
        split = {1: "none"}.get(divisor, f"{'TP' if t.split == 'tp' else 'SP'} ({divisor})")
        rows.append((f"[gated DeltaNet] {t.name}", t.elements(config.seq_len, config.micro_batch), t.bytes_per_element, split,
                     t.bytes(config), t.source))  # fmt: skip
    return tuple(rows)
