"""The memory of a Mamba-2 hybrid (Nemotron-H) under Megatron-LM: the parameters one GPU of a pipeline stage holds and the
activations its layers keep for backward, block by block (parcalc.core.mamba: one block per layer, 'M' Mamba-2, '*'
attention, '-' MLP). The textbook view (Korthikanti et al. 2022 sec. 4, per saved tensor) extended to the Mamba-2 mixer
as Megatron-LM trains it; the hook in parcalc.core.memory calls these for a model with a `mamba:` block.

What a Mamba-2 block keeps per token on one GPU of a TP group of t (MEGATRON_MAMBA, SSD_SAVED, GATED_NORM):
- the block norm's input (h) and its output, in_proj's input (h): TELayerNormColumnParallelLinear keeps both (split by SP);
- in_proj's output zxBCdt (in_proj_width / t), which mamba_split_conv1d_scan_combined keeps (it recomputes the conv's output);
- the scan's output before the gate, out_x (d_inner / t), kept by the same function;
- the gated output y·silu(z), the gated RMSNorm's input (d_inner / t), and that norm's rstd (fp32, one per group: G / t);
- out_proj's input, the norm's output (d_inner / t).
An attention block keeps its norm's input and attention's tensors (parcalc.core.activations, FlashAttention by default);
an MLP block its norm's input, fc1's input, fc1's output (squared ReLU keeps relu(x), which pow's backward reads) and fc2's
input relu(x)^2: two f / t wide tensors (Megatron-LM megatron/core/activations.py squared_relu = pow(relu(x), 2)).
"""

from __future__ import annotations

from parcalc.core.activations import (
    FLASH,
    KORTHIKANTI,
    KORTHIKANTI_EQ1,
    ActivationConfig,
    Recompute,
    SavedTensor,
    _attention_tensors,
    check_sequence,
)
from parcalc.core.expert_parallel import stage_ranges
from parcalc.core.hybrid_context import MAMBA_CP, check_mixer_cp, mamba_group_repeat
from parcalc.core.layout import Layout
from parcalc.core.mamba import ATTENTION, BLOCKS, MAMBA, MLP
from parcalc.core.model import Norm, TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

MEGATRON_MAMBA = (
    "Megatron-LM megatron/core/ssm/mamba_mixer.py @00bebb45, MambaMixer: in_proj (the Mamba layer spec's "
    "TELayerNormColumnParallelLinear: the block's norm fused into it), _ssm_training runs mamba_split_conv1d_scan_combined "
    "without the norm and out_proj, then self.norm (RMSNormGated, d_inner / t wide, groups / t) and out_proj "
    "(RowParallelLinear); heads, groups, conv channels and d_inner split over TP (d_inner_local_tp, nheads_local_tp, "
    "ngroups_local_tp)"
)
SSD_SAVED = (
    "state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py, MambaSplitConv1dScanCombinedFn.forward: "
    "ctx.save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, initial_states, seq_idx, rmsnorm_weight, "
    "rstd, outproj_weight, outproj_bias): the in_proj output and the scan's output; the conv output is recomputed in backward"
)
GATED_NORM = "mamba_ssm/ops/triton/layernorm_gated.py, LayerNormFn.forward: ctx.save_for_backward(x, weight, bias, z, mean, rstd) (rstd fp32 per group)"
TE_LN_LINEAR_SAVES = ("Transformer Engine layernorm_linear.py, _LayerNormLinear.forward: the norm's input (inputmat) and its "
                      "output (ln_out, the GEMM input) kept")  # fmt: skip
SQUARED_RELU = ("Megatron-LM megatron/core/activations.py: squared_relu(x) = pow(relu(x), 2): relu keeps its result, which pow's "
                "backward reads; fc2 keeps its input relu(x)^2 (Nemotron-H's mlp_hidden_act relu2)")  # fmt: skip
RSTD_BYTES = 4.0  # the gated norm's rstd is fp32 (layernorm_gated._layer_norm_fwd: torch.float32)


def check_mamba_memory(model: TransformerModel, par: Layout, recompute: Recompute, *, step_memory: str, fp8: bool,
                       offload: bool, recompute_layers: int | None) -> None:  # fmt: skip
    """What the Mamba-2 memory covers: Megatron-LM's textbook sum, TP (with SP), PP (interleaved too), DP, ZeRO and context
    parallelism as Megatron-Core runs it (parcalc.core.hybrid_context); no expert parallelism, no ZeRO-3, no --pipeline-layout,
    recomputation none or full of every layer, no FP8, no offload."""
    mamba = model.mamba
    assert mamba is not None
    refused = [what for what, bad in (
        (f"the {step_memory} step walk (its layers are transformer layers; the textbook sum covers Mamba-2)", step_memory != "textbook"),
        ("--ep", par.ep > 1),
        ("ZeRO-3 (its gathered working set is one transformer layer's)", par.zero == 3),
        ("--pipeline-layout", par.pipeline_layout is not None),
        ("--recompute selective / op (none or full only)", recompute not in (Recompute.NONE, Recompute.FULL)),
        ("--recompute-layers", recompute_layers is not None),
        ("FP8 (Transformer Engine's FP8 copies of in_proj and out_proj are not counted)", fp8),
        ("activation or optimizer offload", offload),
    ) if bad]  # fmt: skip
    if refused:
        raise InputError(f"--model: {model.name} has Mamba-2 layers; their memory is counted without {refused[0]}")
    for what, value in (("Mamba-2 heads", mamba.heads), ("Mamba-2 groups (n_groups)", mamba.groups)):
        if value % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the {what} ({value}); Megatron-LM's MambaMixer splits them over TP")
    check_mixer_cp(model, par.tp, par.cp)


def mamba_layout_reason(par: Layout, recompute: Recompute) -> str | None:
    """Why fit cannot time a Mamba-2 hybrid on this layout (None: it can): what the memory leaves out (check_mamba_memory)."""
    for reason, bad in (
        ("a Mamba-2 hybrid's memory is counted without ZeRO-3 (its gathered working set is one transformer layer's)", par.zero == 3),
        ("a Mamba-2 hybrid is counted without expert parallelism", par.ep > 1),
        ("a Mamba-2 hybrid is counted without --pipeline-layout", par.pipeline_layout is not None),
        ("a Mamba-2 hybrid's recomputation is none or full (every layer)", recompute not in (Recompute.NONE, Recompute.FULL)),
    ):  # fmt: skip
        if bad:
            return reason
    return None


def block_params_per_rank(model: TransformerModel, tp: int, block: str) -> int:
    """One block on one TP rank: its norm (replicated) and its mixer split t ways (the Mamba-2 mixer's every weight,
    MEGATRON_MAMBA; attention's heads; the MLP's width)."""
    norm = model.norm.params_per_channel * model.hidden
    if block == MAMBA:
        assert model.mamba is not None
        return norm + model.mamba.params(model.hidden, model.bias) // tp
    return norm + (model.attention_params_per_layer if block == ATTENTION else model.mlp_params_per_layer) // tp


def stage_block_counts(model: TransformerModel, par: Layout, stage: int) -> dict[str, int]:
    """The Mamba-2, attention and MLP blocks of stage `stage` (its chunks' layer ranges under the interleaved schedule)."""
    mamba = model.mamba
    assert mamba is not None
    split = par.stage_layers(model.layers)
    v = par.chunks if all(n % par.chunks == 0 for n in split) else 1
    counts = {MAMBA: 0, ATTENTION: 0, MLP: 0}
    for r in stage_ranges(split, v)[stage]:
        n = mamba.blocks_in(r.start, r.stop)
        counts[MAMBA] += n.mamba
        counts[ATTENTION] += n.attention
        counts[MLP] += n.mlp
    return counts


def stage_layer_params(model: TransformerModel, par: Layout, stage: int) -> tuple[list[Term], str, str, int]:
    """The terms, formula and value of a stage's layers' parameters on one GPU: each block kind its count times its size."""
    counts = stage_block_counts(model, par, stage)
    terms: list[Term] = []
    value = 0
    for block, what in BLOCKS.items():
        key = {MAMBA: "ssm", ATTENTION: "attn", MLP: "mlp"}[block]
        size = block_params_per_rank(model, par.tp, block)
        terms += [Term(f"L_{key}", f"L_{key}", rf"L_{{\mathrm{{{key}}}}}", counts[block], "", f"{what} blocks on this stage"),
                  Term(f"P_{key}", f"P_{key}/t", rf"P_{{\mathrm{{{key}}}}}/t", size, "", f"one {what} block on one TP rank: its norm and "
                       f"its mixer / t", MEGATRON_MAMBA if block == MAMBA else "")]  # fmt: skip
        value += counts[block] * size
    formula = " + ".join(f"$L_{k} × $P_{k}" for k in ("ssm", "attn", "mlp"))
    latex = " + ".join(rf"$L_{k} \times $P_{k}" for k in ("ssm", "attn", "mlp"))
    return terms, formula, latex, value


def mamba_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """What one Mamba-2 block keeps for backward (the module docstring), in forward order."""
    mamba = model.mamba
    assert mamba is not None
    e, g = config.activation_bytes, config.linear_input_bytes
    h = model.hidden
    # under CP the fused scan keeps its input after the all-to-all: a rank holding fewer groups than cp ranks receives
    # its heads' group repeated (MambaContextParallel.group_repeat_count), so B and C are r times wider per token
    repeat = mamba_group_repeat(model, config.tp, config.cp) if config.cp > 1 else 1
    out = []
    if model.norm is not Norm.NONE:
        out.append(SavedTensor("norm_input", "block norm input", "token", h, e, "sp", False, f"{KORTHIKANTI_EQ1}: norm input; {TE_LN_LINEAR_SAVES}"))
    out += [
        SavedTensor("in_proj_input", "in_proj input (the norm's output)", "token", h, g, "sp", False, TE_LN_LINEAR_SAVES),
        SavedTensor("zxbcdt", "in_proj output [z, x, B, C, dt]" + (f", B and C repeated {repeat}x (CP)" if repeat > 1 else ""), "token",
                    mamba.in_proj_width + 2 * mamba.groups * mamba.state * (repeat - 1), e, "tp", False,
                    SSD_SAVED + (f"; {MAMBA_CP}: the scan's input after the all-to-all" if config.cp > 1 else "")),
        SavedTensor("scan_output", "the scan's output before the gate (out_x)", "token", mamba.d_inner, e, "tp", False, SSD_SAVED),
        SavedTensor("gated_norm_input", "gated output y·silu(z), the gated norm's input", "token", mamba.d_inner, e, "tp", False, GATED_NORM),
        SavedTensor("gated_norm_rstd", "gated norm rstd (fp32, one per group)", "token", mamba.groups, RSTD_BYTES, "tp", False, GATED_NORM),
        SavedTensor("out_proj_input", "out_proj input (the gated norm's output)", "token", mamba.d_inner, g, "tp", False,
                    f"{KORTHIKANTI_EQ1}: a linear keeps its input; {MEGATRON_MAMBA}"),
    ]  # fmt: skip
    return out


def attention_block_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """One attention block: its norm's input and attention's tensors (Q, K, V, the log-sum-exp with FlashAttention)."""
    norm = [SavedTensor("norm_input", "block norm input", "token", model.hidden, config.activation_bytes, "sp", False,
                        f"{KORTHIKANTI_EQ1}: norm input")] if model.norm is not Norm.NONE else []  # fmt: skip
    return norm + _attention_tensors(model, config)


def mlp_block_tensors(model: TransformerModel, config: ActivationConfig) -> list[SavedTensor]:
    """One MLP block: its norm's input, fc1's input, relu(x) and fc2's input relu(x)^2 (SQUARED_RELU)."""
    e, g, h, f = config.activation_bytes, config.linear_input_bytes, model.hidden, model.ffn_hidden
    norm = [SavedTensor("norm_input", "block norm input", "token", h, e, "sp", False, f"{KORTHIKANTI_EQ1}: norm input")] if model.norm is not Norm.NONE else []
    return norm + [SavedTensor("mlp_input", "fc1 input (the norm's output)", "token", h, g, "sp", False, TE_LN_LINEAR_SAVES),
                   SavedTensor("relu_output", "relu(x), read by squared ReLU's backward", "token", f, e, "tp", False, SQUARED_RELU),
                   SavedTensor("fc2_input", "fc2 input relu(x)^2", "token", f, g, "tp", False, SQUARED_RELU)]  # fmt: skip


def block_tensors(model: TransformerModel, config: ActivationConfig, block: str) -> list[SavedTensor]:
    if block == MAMBA:
        return mamba_tensors(model, config)
    return attention_block_tensors(model, config) if block == ATTENTION else mlp_block_tensors(model, config)


def block_activation_bytes(model: TransformerModel, config: ActivationConfig, block: str) -> float:
    """Bytes one block keeps on one GPU for one micro-batch: every saved tensor, or with full recomputation its input
    (b s h, / t with SP: Megatron-LM checkpoints the hidden states each layer gets)."""
    if config.recompute is Recompute.FULL:
        return config.seq_len * config.micro_batch * model.hidden * config.activation_bytes / (config.tp if config.sequence_parallel else 1) / config.cp
    return sum(t.bytes(config) for t in block_tensors(model, config, block))


def block_tensor_rows(model: TransformerModel, config: ActivationConfig) -> tuple[tuple[object, ...], ...]:
    """(tensor, elements per micro-batch, bytes per element, split over, bytes on this GPU, source) of each block's saved
    tensors, the block named first (the memory command's 'layer_activations' table for a Mamba-2 hybrid); with full
    recomputation each block keeps its input only."""
    if config.recompute is Recompute.FULL:
        whole = config.seq_len * config.micro_batch * model.hidden
        split = f"SP ({config.tp})" if config.sequence_parallel else "none"
        return tuple((f"[{what}] block input (full recomputation)", whole, config.activation_bytes, split,
                      block_activation_bytes(model, config, block), f"{KORTHIKANTI}, sec. 5") for block, what in BLOCKS.items())  # fmt: skip
    rows = []
    for block, what in BLOCKS.items():
        for t in block_tensors(model, config, block):
            divisor = t.divisor(config.tp, config.sequence_parallel)
            split = {1: "none"}.get(divisor, f"{'TP' if t.split == 'tp' else 'SP'} ({divisor})")
            rows.append((f"[{what}] {t.name}", t.elements(config.seq_len, config.micro_batch), t.bytes_per_element, split,
                         t.bytes(config), t.source))  # fmt: skip
    return tuple(rows)


def mamba_stage_activations(model: TransformerModel, par: Layout, config: ActivationConfig, in_flight: Derivation,
                            stage: int) -> Derivation:  # fmt: skip
    """The activations of a stage's layers: each block kind's bytes times its count, times the micro-batches in flight."""
    check_sequence(model, config.seq_len)
    counts = stage_block_counts(model, par, stage)
    inputs: list[Term] = []
    value = 0.0
    for block, what in BLOCKS.items():
        key = {MAMBA: "ssm", ATTENTION: "attn", MLP: "mlp"}[block]
        size = block_activation_bytes(model, config, block)
        kept = "its input (full recomputation)" if config.recompute is Recompute.FULL else "every saved tensor"
        inputs += [Term(f"A_{key}", f"A_{key}", rf"A_{{\mathrm{{{key}}}}}", size, "B", f"one {what} block, one micro-batch: {kept}",
                        SSD_SAVED if block == MAMBA else FLASH if block == ATTENTION and config.flash_attention else KORTHIKANTI),
                   Term(f"L_{key}", f"L_{key}", rf"L_{{\mathrm{{{key}}}}}", counts[block], "", f"{what} blocks on stage {stage + 1}")]  # fmt: skip
        value += size * counts[block]
    inputs.append(in_flight.as_term("n"))
    return Derivation(
        key="stage_activations",
        label=f"Activations of the layers of stage {stage + 1} (Mamba-2, attention and MLP blocks each their own)",
        symbol="A_stage",
        latex_symbol=r"A_{\mathrm{stage}}",
        formula="($A_ssm × $L_ssm + $A_attn × $L_attn + $A_mlp × $L_mlp) × $n",
        formula_latex=r"\left($A_ssm \times $L_ssm + $A_attn \times $L_attn + $A_mlp \times $L_mlp\right) \times $n",
        inputs=tuple(inputs),
        value=value * in_flight.value,
        unit="B",
        source=f"{KORTHIKANTI} sec. 4 per saved tensor; the Mamba-2 block as Megatron-LM trains it ({MEGATRON_MAMBA})",
    )


def mamba_recompute_working_set(model: TransformerModel, config: ActivationConfig) -> Derivation | None:
    """With full recomputation: what the largest block materialises again during its backward (every saved tensor)."""
    if config.recompute is not Recompute.FULL:
        return None
    from dataclasses import replace

    plain = replace(config, recompute=Recompute.NONE)
    sizes = {what: block_activation_bytes(model, plain, block) for block, what in BLOCKS.items()}
    largest = max(sizes, key=lambda k: sizes[k])
    return Derivation("recompute_working_set", "Recomputation working set (the largest block's activations, one micro-batch)", "A_re",
                      r"A_{\mathrm{re}}", "$A_re", "$A_re",
                      (Term("A_re", "A_recomputed", r"A_{\mathrm{re}}", sizes[largest], "B", f"the {largest} block's every saved tensor"),),
                      sizes[largest], "B", f"{KORTHIKANTI} sec. 5: a recomputed layer's tensors live again during its backward")  # fmt: skip

