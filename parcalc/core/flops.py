"""Peak FLOP/s of a GPU (from its clock, SM count and FMA rate or from its datasheet), and the
FLOPs of a training iteration: the exact matmul count, 6ND, Narayanan's closed form, MFU / HFU."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from parcalc.core.attention_window import WindowKind, core_share
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.layer_ops import LayerOp
    from parcalc.core.model import TransformerModel
    from parcalc.core.pipeline_layout import PipelineSplit


# ---------------------------------------------------------------------------------------------
# Training FLOPs: the exact count from the layer's matmuls, 6ND, Narayanan's closed form, MFU/HFU
#
# Convention (Narayanan et al. 2021 sec. 5.1; Korthikanti et al. 2022 Appendix A; Chowdhery et
# al. 2022, PaLM, Appendix B): only matrix multiplications are counted, 2 FLOP per multiply-add;
# the backward pass of a matmul is two matmuls of the same size (the input gradient and the
# weight gradient), so forward + backward = 3 x forward. Model FLOPs count that; hardware FLOPs
# add what recomputation runs again: the whole forward of every layer with full recomputation,
# the attention scores and score x V with selective recomputation (Korthikanti et al. eq. 8).
# Element-wise work (softmax, activation) is shown beside, never inside, these totals.
NARAYANAN_FLOPS = (
    "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM' (SC21), "
    "sec. 5.1: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOPs per iteration, with activation recomputation"
)
KAPLAN_6ND = (
    "Kaplan et al. 2020, 'Scaling Laws for Neural Language Models', sec. 2.1: C ≈ 6 N D "
    "(2N per token forward, 4N backward; attention scores left out)"
)
KORTHIKANTI_FLOPS = "Korthikanti et al. 2022 (arXiv:2205.05198), Appendix A: model FLOPs eq. (7), hardware FLOPs with selective recomputation eq. (8)"
MFU_SOURCE = "Chowdhery et al. 2022 (PaLM), Appendix B: MFU = model FLOPs per second / peak; Korthikanti et al. 2022 sec. 6: HFU counts recomputation"
BACKWARD_FACTOR = 2  # a matmul's backward: input gradient and weight gradient, each the forward's FLOPs
ATTENTION_CORE_OPS = ("scores", "context")  # what selective recomputation runs again (and causal halves)


@frozen
class TrainingFlops:
    """FLOPs of one training iteration of `batch` sequences of `seq_len` tokens, every GPU together."""

    layer_ops: tuple[LayerOp, ...]  # one layer's forward for the whole batch
    head_op: LayerOp | None  # the LM head, None without a vocabulary
    causal: bool
    layer_forward: Derivation
    forward: Derivation
    model: Derivation
    recomputed: Derivation
    hardware: Derivation
    model_per_token: Derivation
    hardware_per_token: Derivation
    six_nd: Derivation
    narayanan: Derivation
    elementwise: Derivation
    korthikanti_selective: Derivation | None = None  # their eq. (8), with selective recomputation only
    # Mixture-of-Experts models: layer_ops / layer_forward are a dense layer's (dense_layers of
    # them, maybe none), moe_layer_ops / moe_layer_forward an MoE layer's (moe_layers of them).
    moe_layer_ops: tuple[LayerOp, ...] = ()
    moe_layer_forward: Derivation | None = None
    dense_layers: int = 0
    moe_layers: int = 0
    model_ref: TransformerModel | None = None  # which layers are MoE (stage_flops)
    params: Derivation | None = None  # total and active parameters of an MoE model, shown beside 6ND
    active_params: Derivation | None = None
    # the attention core's share of the full s x s square counted per layer (1/2 causal, less with local
    # attention: parcalc.core.attention_window.core_share; 1 without --causal)
    core_share: float = 1.0
    window: Derivation | None = None  # the local layers' share, when the model has an attention window
    mtp: Derivation | None = None  # the multi-token-prediction modules' forward, when the model has them
    linear: Derivation | None = None  # one gated-DeltaNet mixer's forward, when the model has such layers
    linear_delta: float = 0.0  # a linear-attention layer's forward less a full-attention layer's
    # Mamba-2 hybrids (Nemotron-H): one block per layer; the three blocks' forwards (Mamba-2, attention, MLP) and their ops
    mamba: Derivation | None = None
    blocks: tuple[tuple[str, tuple[LayerOp, ...], int, Derivation], ...] = ()

    def layer_kinds(self) -> tuple[tuple[str, tuple[LayerOp, ...], int, Derivation], ...]:
        """(name, ops, count, forward) of each kind of layer the model has: dense, MoE; a Mamba-2 hybrid's three blocks."""
        if self.blocks:
            return self.blocks
        kinds = []
        if self.dense_layers or self.moe_layer_forward is None:
            kinds.append(("dense layer", self.layer_ops, self.dense_layers if self.moe_layer_forward is not None else
                          int(self.forward.term("L").value), self.layer_forward))  # fmt: skip
        if self.moe_layer_forward is not None:
            kinds.append(("MoE layer", self.moe_layer_ops, self.moe_layers, self.moe_layer_forward))
        return tuple(kinds)

    def layers_forward(self, start: int, end: int) -> float:
        """Forward FLOPs of layers start .. end - 1 (0-based): dense and MoE layers each their own, and a linear-attention
        layer its mixer for the attention; a Mamba-2 hybrid's layers each their block."""
        if self.blocks and self.model_ref is not None and self.model_ref.mamba is not None:
            n = self.model_ref.mamba.blocks_in(start, end)
            return n.mamba * self.blocks[0][3].value + n.attention * self.blocks[1][3].value + n.mlp * self.blocks[2][3].value
        linear = self.model_ref.linear_layers_in(start, end) * self.linear_delta if self.model_ref is not None else 0.0
        if self.moe_layer_forward is None or self.model_ref is None:
            return (end - start) * self.layer_forward.value + linear
        moe = self.model_ref.moe_layers_in(start, end)
        return (end - start - moe) * self.layer_forward.value + moe * self.moe_layer_forward.value + linear

    def op_flops(self, op: LayerOp) -> float:
        """Forward FLOPs of one op as counted here (the attention core halved when causal)."""
        return op.flops * self.core_share if op.key in ATTENTION_CORE_OPS else float(op.flops)

    def derivations(self) -> tuple[Derivation, ...]:
        extra = (self.korthikanti_selective,) if self.korthikanti_selective is not None else ()
        layers = tuple(forward for _, _, count, forward in self.layer_kinds() if count or self.moe_layer_forward is None)
        params = tuple(d for d in (self.params, self.active_params) if d is not None)
        ahead = tuple(d for d in (self.window, self.linear, self.mtp) if d is not None)
        if self.blocks:
            layers = tuple(forward for _, _, count, forward in self.blocks if count)
        return (*ahead, *layers, self.forward, self.model, self.recomputed, self.hardware, *extra, self.model_per_token,
                self.hardware_per_token, *params, self.six_nd, self.narayanan, self.elementwise)  # fmt: skip


def six_nd(params: float, tokens: float, *, key: str = "six_nd", params_source: str = "") -> Derivation:
    """C ≈ 6 N D training FLOPs (Kaplan et al. 2020): an approximation, named as such."""
    for name, value in (("parameters", params), ("tokens", tokens)):
        if not (value > 0 and math.isfinite(value)):
            raise InputError(f"6ND: {name} must be greater than zero, got {value!r}")
    return Derivation(
        key=key,
        label="6ND approximation (2N forward + 4N backward per token; attention scores and recomputation left out)",
        symbol="C_6ND",
        latex_symbol=r"C_{6ND}",
        formula="6 × $N × $D",
        formula_latex=r"6 \times $N \times $D",
        inputs=(
            Term("N", "N", "N", params, "", "parameters", params_source),
            Term("D", "D", "D", tokens, "", "tokens"),
        ),
        value=6.0 * params * tokens,
        unit="FLOP",
        source=KAPLAN_6ND,
    )


# what the papers' per-iteration closed forms (Narayanan et al.'s l, Korthikanti et al.'s L) take of the run's shape
_ITERATION_SHAPE = {"B": "sequences per iteration (global batch)", "s": "sequence length", "l": "transformer layers",
                    "L": "transformer layers", "h": "hidden size", "V": "vocabulary size"}


def _iteration_shape(**values: float) -> tuple[Term, ...]:
    """The closed form's shape inputs in the paper's order, each under the paper's own symbol."""
    return tuple(Term(symbol, symbol, symbol, value, "", _ITERATION_SHAPE[symbol]) for symbol, value in values.items())


def narayanan_flops(batch: float, seq_len: float, layers: float, hidden: float, vocab: float) -> Derivation:
    """Narayanan et al. 2021's FLOPs per iteration with full recomputation:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h)), for a GPT layer with a 4h MLP and an LM head."""
    B, s, l, h, V = batch, seq_len, layers, hidden, vocab  # noqa: E741 - the paper's symbols
    return Derivation(
        key="narayanan_flops",
        label="Narayanan et al.'s FLOPs per iteration (full recomputation; GPT layer, 4h MLP)",
        symbol="F_N",
        latex_symbol=r"F_{\mathrm{N}}",
        formula="96 × $B × $s × $l × $h² × (1 + $s / (6 × $h) + $V / (16 × $l × $h))",
        formula_latex=r"96 \times $B \times $s \times $l \times $h^2 \times \left(1 + \frac{$s}{6 \times $h} + \frac{$V}{16 \times $l \times $h}\right)",
        inputs=_iteration_shape(B=B, s=s, l=l, h=h, V=V),
        value=96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)),
        unit="FLOP",
        source=NARAYANAN_FLOPS,
    )


def korthikanti_selective_flops(batch: float, seq_len: float, layers: float, hidden: float, vocab: float) -> Derivation:
    """Korthikanti et al. 2022 eq. (8): hardware FLOPs with selective recomputation,
    72 B L s h^2 (1 + s/(3h) + V/(12 h L)).

    Against their model FLOPs, eq. (7) 72 B L s h^2 (1 + s/(6h) + V/(12 h L)), it adds
    12 B L s^2 h: three times the forward of Q K^T and score x V that the recomputation runs
    again (4 B s^2 h per layer). Their "2.7 % (GPT-3) and 1.6 % (MT-NLG) more FLOPs" and the HFU of
    their Table 5 follow this formula; parcalc's exact count adds the 4 B L s^2 h that run again.
    """
    B, s, L, h, V = batch, seq_len, layers, hidden, vocab
    return Derivation(
        key="korthikanti_hardware_flops",
        label="Korthikanti et al.'s hardware FLOPs with selective recomputation, eq. (8) (adds 3 x the recomputed forward)",
        symbol="F_hw,K",
        latex_symbol=r"F_{\mathrm{hw,K}}",
        formula="72 × $B × $L × $s × $h² × (1 + $s / (3 × $h) + $V / (12 × $h × $L))",
        formula_latex=r"72 \times $B \times $L \times $s \times $h^2 \times \left(1 + \frac{$s}{3 \times $h} + \frac{$V}{12 \times $h \times $L}\right)",
        inputs=_iteration_shape(B=B, L=L, s=s, h=h, V=V),
        value=72.0 * B * L * s * h * h * (1 + s / (3 * h) + V / (12 * h * L)),
        unit="FLOP",
        source="Korthikanti et al. 2022 (arXiv:2205.05198), Appendix A, eq. (8); used for the HFU of their Table 5",
        assumptions=("Korthikanti et al.'s eq. (8) counts 12 B s^2 h per layer for selective recomputation; the exact count, 4 B s^2 h",),
    )


MOE_FLOPS = (
    "Mixture-of-Experts: per token the router GEMM (h x experts), the top_k routed experts and the shared experts "
    "(Shazeer et al. 2017; DeepSeek-V3 report sec. 2.1.2); Megatron-LM megatron/training/training.py "
    "num_floating_point_operations counts the experts the same way and leaves the router out"
)
MOE_MFU = (
    "MoE MFU: model FLOPs count the active experts only (top_k routed + shared + router), so MFU of an MoE model "
    "divides the FLOPs of its active parameters, not 6 x total parameters, by the peak (Megatron-LM's "
    "num_floating_point_operations, used for its TFLOP/s per GPU, does the same)"
)

# Which layer_ops keys fall in which group of a layer's forward FLOPs.
_GROUPS = (
    ("F_proj", r"F_{\mathrm{proj}}", "attention projections", lambda key: True),
    ("F_core", r"F_{\mathrm{core}}", "Q·K^T and score·V", lambda key: key in ATTENTION_CORE_OPS),
    ("F_mlp", r"F_{\mathrm{mlp}}", "MLP matmuls", lambda key: key.startswith("mlp_")),
    ("F_router", r"F_{\mathrm{router}}", "router GEMM", lambda key: key == "router"),
    ("F_experts", r"F_{\mathrm{experts}}", "routed experts' grouped GEMMs (top_k per token)", lambda key: key.startswith("expert_")),
    ("F_shared", r"F_{\mathrm{shared}}", "shared experts' matmuls", lambda key: key.startswith("shared_")),
)


def _group_of(key: str) -> str:
    for name, _, _, member in _GROUPS[1:]:
        if member(key):
            return name
    return "F_proj"


def _layer_forward(ops: tuple[LayerOp, ...], half: float, causal: bool, *, moe: bool, windowed: bool = False) -> Derivation:
    """Forward FLOPs of one layer from its matmuls, by group (projections, core, MLP or router/experts/shared)."""
    matmuls = [op for op in ops if op.kind == "matmul"]
    def flops(op: LayerOp) -> float:
        return op.flops * (half if op.key in ATTENTION_CORE_OPS else 1.0)
    present = {_group_of(op.key) for op in matmuls}
    terms = []
    for key, latex_key, what, _ in _GROUPS:
        if key in ("F_proj", "F_core") or key in present:
            core_what = " (causal: the mean layer's share of the square, local layers their window)" if windowed else " (causal: half)"
            what_here = what + (core_what if causal and key == "F_core" else "")
            table = "moe_layer_flops" if moe else "layer_flops"
            terms.append(Term(key, key, latex_key, sum(flops(op) for op in matmuls if _group_of(op.key) == key), "FLOP",
                              f"{what_here} of one {'MoE ' if moe else ''}layer (table '{table}')"))  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in terms)
    causal_note = ("causal attention: Q·K^T and score·V counted at half (only the lower triangle is computed)",) if causal else ()
    if causal and windowed:
        causal_note = (f"causal attention with local layers: Q·K^T and score·V counted at {half:.4g} of the square, the mean over the "
                       "layers of each one's computed band (derivation 'attention_window')",)
    moe_note = ("balanced routing: each routed expert computes tokens x top_k / experts tokens (dropless, or capped by the "
                "capacity factor); the grouped GEMMs' FLOPs equal top_k dense FFNs per token",) if moe else ()  # fmt: skip
    return Derivation(
        key="moe_layer_forward_flops" if moe else "layer_forward_flops",
        label=("Forward FLOPs of one MoE layer (attention, router, routed and shared experts; table 'moe_layer_flops')" if moe
               else "Forward FLOPs of one layer (its matmuls, table 'layer_flops')"),
        symbol="F_moe" if moe else "F_layer",
        latex_symbol=r"F_{\mathrm{moe}}" if moe else r"F_{\mathrm{layer}}",
        formula=formula,
        formula_latex=formula,
        inputs=tuple(terms),
        value=sum(flops(op) for op in matmuls),
        unit="FLOP",
        source="the layer's matmuls one by one (parcalc.core.layer_ops), 2 FLOP per multiply-add (the convention of Narayanan et al. 2021 sec. 5.1)" + (f"; {MOE_FLOPS}" if moe else ""),
        assumptions=causal_note + moe_note,
    )


def _params_derivations(model: TransformerModel) -> tuple[Derivation, Derivation]:
    """Total and active parameters of an MoE model (parcalc.core.model), for the flops output."""
    moe = model.moe
    assert moe is not None
    total = Derivation("total_params", "Parameters in all (every expert)", "N_total", r"N_{\mathrm{total}}", "$N_total", "$N_total",
                       (Term("N_total", "N_total", r"N_{\mathrm{total}}", model.total_params, "", f"parameters of {model.name}"),),
                       float(model.total_params), "", "counted from the shape (parcalc.core.model.TransformerModel.total_params)")  # fmt: skip
    idle = moe.experts - moe.top_k
    inputs = (total.as_term("N_total"),
              Term("L_moe", "L_moe", r"L_{\mathrm{moe}}", model.moe_layers, "", "MoE layers"),
              Term("E_idle", "E_idle", r"E_{\mathrm{idle}}", idle, "", f"routed experts a token skips (E - k = {moe.experts} - {moe.top_k})"),
              Term("P_e", "P_expert", r"P_{\mathrm{expert}}", model.expert_params, "", "parameters of one routed expert"))  # fmt: skip
    active = Derivation("active_params", "Active parameters per token (top_k routed + shared experts, router, attention, embeddings)",
                        "N_active", r"N_{\mathrm{active}}", "$N_total - $L_moe × $E_idle × $P_e",
                        r"$N_total - $L_moe \times $E_idle \times $P_e", inputs, float(model.active_params), "",
                        "parcalc.core.model.TransformerModel.active_params; 6ND and MFU of an MoE model use these")  # fmt: skip
    return total, active


def training_flops(model: TransformerModel, batch: int, seq_len: int, *, recompute: str = "none", causal: bool = False,
                   params: float | None = None, flash_attention: bool = True, recomputed_layers: int | None = None,
                   recompute_modules: tuple[str, ...] | None = None) -> TrainingFlops:  # fmt: skip
    """Exact matmul FLOPs of one iteration (seed 004's layer table, attention and LM head
    included), model and hardware FLOPs, per token, beside 6ND and Narayanan's closed form.

    model: a parcalc.core.model.TransformerModel; batch: sequences per iteration (global);
    recompute: "none", "selective" or "full"; causal: count half of Q K^T and score x V (the
    kernels that skip masked blocks); params: N for 6ND (default: the model's parameters, the
    active ones for a Mixture-of-Experts model). An MoE model's dense and MoE layers are counted
    each with its own operations (router, top_k routed experts, shared experts).
    recompute "op": op-level selective checkpointing (parcalc.core.recompute): every second matmul
    of each layer runs again, and the attention core too unless flash_attention (SDPA's output is
    saved). recomputed_layers: with "full", how many layers run again (Megatron-LM's
    --recompute-num-layers summed over the stages' chunks; None: all of them).
    recompute_modules: with "selective", Megatron-LM's modules checkpointed (parcalc.core.recompute;
    None: ['core_attn']): the forward matmuls of each module run again in the layers that have it.
    """
    from parcalc.core.counts import check_count, check_sequence
    from parcalc.core.layer_ops import lm_head_op, transformer_layer_ops

    check_count("--batch", batch)
    check_count("--seq-len", seq_len)
    check_sequence(model, seq_len)
    recompute = str(getattr(recompute, "value", recompute))  # a parcalc.core.activations.Recompute or its value
    if recompute not in ("none", "selective", "full", "op"):
        raise InputError(f"--recompute: none, selective, full or op, got {recompute!r}")
    if recompute == "op":
        from parcalc.core.recompute import check_op_supported

        check_op_supported(model)
    if model.linear_attention is not None and (recompute not in ("none", "full") or recomputed_layers is not None):
        raise InputError(f"--recompute: {model.name} has gated-DeltaNet layers; parcalc counts their recomputation with "
                         "--recompute none or full (every layer) only")  # fmt: skip
    if model.mamba is not None and (recompute not in ("none", "full") or recomputed_layers is not None):
        raise InputError(f"--recompute: {model.name} has Mamba-2 layers; parcalc counts their recomputation with "
                         "--recompute none or full (every layer) only")  # fmt: skip
    if recomputed_layers is not None and not (recompute == "full" and model.moe is None and 0 <= recomputed_layers <= model.layers):
        raise InputError(f"--recompute-layers: {recomputed_layers} layers recomputed needs --recompute full on a dense model "
                         f"of at least that many layers (got --recompute {recompute}, {model.layers} layers)")  # fmt: skip
    from parcalc.core.choices import Recompute
    from parcalc.core.recompute import check_modules

    check_modules(recompute_modules, Recompute(recompute), model)
    attention_core_only = recompute_modules is None or tuple(recompute_modules) == ("core_attn",)
    ops = transformer_layer_ops(model, batch, seq_len, 2.0)  # bytes per element do not change FLOPs
    moe_ops = transformer_layer_ops(model, batch, seq_len, 2.0, moe_layer=True) if model.moe is not None else ()
    head = lm_head_op(model, batch, seq_len, 2.0)
    L = model.layers
    L_moe = model.moe_layers
    L_dense = L - L_moe
    tokens = float(batch * seq_len)
    half = core_share(model.window, L, seq_len) if causal else 1.0  # 0.5 causal without a window
    windowed = causal and model.window is not None
    matmuls = [op for op in ops if op.kind == "matmul"]
    core_value = sum(op.flops * half for op in matmuls if op.key in ATTENTION_CORE_OPS)
    head_value = float(head.flops) if head is not None else 0.0
    layer_forward = _layer_forward(ops, half, causal, moe=False, windowed=windowed)
    moe_forward = _layer_forward(moe_ops, half, causal, moe=True, windowed=windowed) if moe_ops else None
    layer_value = layer_forward.value
    l_term = Term("L", "L", "L", L, "", "transformer layers")
    if moe_forward is None:
        layer_terms: tuple[Term, ...] = (l_term, layer_forward.as_term("F_layer"))
        layers_formula, layers_latex, layers_value = "$L × $F_layer", r"$L \times $F_layer", L * layer_value
    else:
        l_moe = Term("L_moe", "L_moe", r"L_{\mathrm{moe}}", L_moe, "", "MoE layers")
        if L_dense:
            l_dense = Term("L_dense", "L_dense", r"L_{\mathrm{dense}}", L_dense, "", "dense layers")
            layer_terms = (l_dense, layer_forward.as_term("F_layer"), l_moe, moe_forward.as_term("F_moe"))
            layers_formula, layers_latex = "$L_dense × $F_layer + $L_moe × $F_moe", r"$L_dense \times $F_layer + $L_moe \times $F_moe"
        else:
            layer_terms = (l_moe, moe_forward.as_term("F_moe"))
            layers_formula, layers_latex = "$L_moe × $F_moe", r"$L_moe \times $F_moe"
        layers_value = L_dense * layer_value + L_moe * moe_forward.value
    linear = linear_forward(model, batch, seq_len) if model.linear_attention is not None else None
    linear_delta = 0.0
    if linear is not None:
        attention = layer_forward.term("F_proj").value + layer_forward.term("F_core").value
        linear_delta = linear.value - attention
        L_lin = model.linear_layers_in(0, L)
        layer_terms = (*layer_terms, Term("L_lin", "L_lin", r"L_{\mathrm{lin}}", L_lin, "", "linear-attention (gated DeltaNet) layers",
                                          model.linear_attention.source if model.linear_attention else ""),  # fmt: skip
                       Term("dF_lin", "ΔF_lin", r"\Delta F_{\mathrm{lin}}", linear_delta, "FLOP",
                            "a gated-DeltaNet mixer's forward less a full attention block's (F_proj + F_core)"))
        layers_formula, layers_latex = layers_formula + " + $L_lin × $dF_lin", layers_latex + r" + $L_lin \times $dF_lin"
        layers_value += L_lin * linear_delta
    blocks: tuple[tuple[str, tuple[LayerOp, ...], int, Derivation], ...] = ()
    if model.mamba is not None:
        blocks = mamba_blocks(model, batch, seq_len, ops, layer_forward)
        layer_terms, layers_formula, layers_latex, layers_value = _blocks_sum(model, blocks)
    fwd_inputs = list(layer_terms)
    formula, latex = layers_formula, layers_latex
    if head is not None:
        fwd_inputs.append(Term("F_head", "F_head", r"F_{\mathrm{head}}", head_value, "FLOP", f"LM head: 2 x {head.shape}"))
        formula, latex = formula + " + $F_head", latex + " + $F_head"
    mtp = mtp_forward(model, tokens, moe_forward if model.mtp_layer_is_moe and moe_forward is not None else layer_forward,
                      head_value) if model.mtp_layers else None
    if mtp is not None:
        fwd_inputs.append(mtp.as_term("F_mtp"))
        formula, latex = formula + " + $F_mtp", latex + " + $F_mtp"
    mtp_value = mtp.value if mtp is not None else 0.0
    forward = Derivation("forward_flops", "Forward FLOPs per iteration", "F_fwd", r"F_{\mathrm{fwd}}", formula, latex,
                         tuple(fwd_inputs), layers_value + head_value + mtp_value, "FLOP",
                         "sum of the matmuls of every layer and of the LM head" + (", and the MTP modules'" if mtp else ""))  # fmt: skip
    model_flops = Derivation(
        key="model_flops",
        label="Model FLOPs per iteration (forward + backward)",
        symbol="F_model",
        latex_symbol=r"F_{\mathrm{model}}",
        formula="(1 + 2) × $F_fwd",
        formula_latex=r"(1 + 2) \times $F_fwd",
        inputs=(forward.as_term("F_fwd"),),
        value=3.0 * forward.value,
        unit="FLOP",
        source=f"{KORTHIKANTI_FLOPS}: backward = 2 x forward (input and weight gradients)",
        assumptions=(MOE_MFU,) if moe_forward is not None else (),
    )
    if recompute == "full" and recomputed_layers is not None:
        n_re = Term("L_re", "L_re", r"L_{\mathrm{re}}", recomputed_layers, "", "layers recomputed (--recompute-layers per stage chunk, summed)")
        re_formula, re_latex, re_value = "$L_re × $F_layer", r"$L_re \times $F_layer", recomputed_layers * layer_value
        re_inputs: tuple[Term, ...] = (n_re, layer_forward.as_term("F_layer"))
        re_what = f"full recomputation of {recomputed_layers} of {L} layers (Megatron-LM's block method)"
    elif recompute == "full":
        re_formula, re_latex, re_value = layers_formula, layers_latex, layers_value
        re_inputs = layer_terms
        re_what = "full recomputation: every layer's forward runs again before its backward"
    elif recompute == "op":
        from parcalc.core.recompute import op_recomputed_matmuls

        again = op_recomputed_matmuls(model, flash_attention)
        op_value = sum(op.flops * (half if op.key in ATTENTION_CORE_OPS else 1.0) for op in matmuls if op.key in again)
        f_op = Term("F_op", "F_op", r"F_{\mathrm{op}}", op_value, "FLOP", f"one layer's recomputed matmuls: {', '.join(again)}")
        re_formula, re_latex, re_value, re_inputs = "$L × $F_op", r"$L \times $F_op", L * op_value, (l_term, f_op)
        re_what = "op-level selective checkpointing: every second matmul of every layer runs again" + (
            "" if flash_attention else ", and the attention core")
    elif recompute == "selective" and not attention_core_only:
        re_formula, re_latex, re_value, re_inputs, re_what = _module_flops(model, ops, moe_ops, half, tuple(recompute_modules or ()))
    elif recompute == "selective":
        core = layer_forward.term("F_core")
        re_formula, re_latex, re_value, re_inputs = "$L × $F_core", r"$L \times $F_core", L * core_value, (l_term, core)
        re_what = "selective recomputation: Q·K^T and score·V of every layer run again"
    else:
        re_formula, re_latex, re_value, re_inputs = "0", "0", 0.0, ()
        re_what = "no recomputation"
    recomputed = Derivation("recomputed_flops", f"Recomputed FLOPs per iteration ({re_what})", "F_re", r"F_{\mathrm{re}}",
                            re_formula, re_latex, re_inputs, re_value, "FLOP",
                            _recompute_source(recompute, recomputed_layers, None if attention_core_only else recompute_modules))  # fmt: skip
    hardware = Derivation(
        key="hardware_flops",
        label="Hardware FLOPs per iteration (model FLOPs + recomputation)",
        symbol="F_hw",
        latex_symbol=r"F_{\mathrm{hw}}",
        formula="$F_model + $F_re",
        formula_latex=r"$F_model + $F_re",
        inputs=(model_flops.as_term("F_model"), recomputed.as_term("F_re")),
        value=model_flops.value + recomputed.value,
        unit="FLOP",
        source=KORTHIKANTI_FLOPS,
    )
    d_term = Term("D", "D", "D", tokens, "", "tokens per iteration (B x s)")
    per_token = [
        Derivation(f"{d.key}_per_token", f"{d.label.split(' per iteration')[0]} per token", f"{d.symbol}/token",
                   rf"{d.latex_symbol} / \mathrm{{token}}", f"${d.key} / $D", rf"\frac{{${d.key}}}{{$D}}",
                   (d.as_term(d.key), d_term), d.value / tokens, "FLOP", d.source)  # fmt: skip
        for d in (model_flops, hardware)
    ]
    if params is not None:
        n_params, n_source = float(params), "given"
    elif model.moe is not None:
        n_params = float(model.active_params)
        n_source = (f"active parameters of {model.name} (top_k {model.moe.top_k} of {model.moe.experts} routed experts; "
                    f"{model.total_params:,} in all): 6ND of an MoE model uses N_active")  # fmt: skip
    else:
        n_params, n_source = float(model.total_params), f"parameters of {model.name}"
    approx = six_nd(n_params, tokens, params_source=n_source)
    elementwise_ops = [op for op in ops if op.kind == "elementwise"]
    if blocks:
        per_block = [sum(op.flops for op in block_ops if op.kind == "elementwise") for _, block_ops, _, _ in blocks[1:]]
        ew_value = sum(count * flops for (_, _, count, _), flops in zip(blocks[1:], per_block, strict=True))
        ew_formula, ew_latex = "$L_attn × $ew_attn + $L_mlp × $ew_mlp", r"$L_attn \times $ew_attn + $L_mlp \times $ew_mlp"
        ew_inputs: tuple[Term, ...] = (layer_terms[2], Term("ew_attn", "ew_attn", r"ew_{\mathrm{attn}}", per_block[0], "FLOP", "the softmax of an attention block"),
                     layer_terms[4], Term("ew_mlp", "ew_mlp", r"ew_{\mathrm{mlp}}", per_block[1], "FLOP",
                                          "the activation of an MLP block; a Mamba-2 block's element-wise work is not counted"))  # fmt: skip
    elif moe_forward is None:
        ew_value = L * sum(op.flops for op in elementwise_ops)
        ew_formula = "$L × (" + " + ".join(f"${op.key}" for op in elementwise_ops) + ")"
        ew_latex = r"$L \times \left(" + " + ".join(f"${op.key}" for op in elementwise_ops) + r"\right)"
        ew_inputs = (l_term, *(Term(op.key, op.key, op.key, op.flops, "FLOP", f"{op.name} over {op.shape}") for op in elementwise_ops))
    else:
        dense_ew = sum(op.flops for op in elementwise_ops)
        moe_ew = sum(op.flops for op in moe_ops if op.kind == "elementwise")
        ew_value = L_dense * dense_ew + L_moe * moe_ew
        ew_formula, ew_latex = "$L_dense × $ew_dense + $L_moe × $ew_moe", r"$L_dense \times $ew_dense + $L_moe \times $ew_moe"
        ew_inputs = (Term("L_dense", "L_dense", r"L_{\mathrm{dense}}", L_dense, "", "dense layers"),
                     Term("ew_dense", "ew_dense", r"ew_{\mathrm{dense}}", dense_ew, "FLOP", "element-wise FLOPs of a dense layer"),
                     Term("L_moe", "L_moe", r"L_{\mathrm{moe}}", L_moe, "", "MoE layers"),
                     Term("ew_moe", "ew_moe", r"ew_{\mathrm{moe}}", moe_ew, "FLOP", "element-wise FLOPs of an MoE layer (softmax, router scores, activations)"))  # fmt: skip
    elementwise = Derivation(
        key="elementwise_flops",
        label="Element-wise forward FLOPs per iteration (softmax, activation; not in the totals above)",
        symbol="F_ew",
        latex_symbol=r"F_{\mathrm{ew}}",
        formula=ew_formula,
        formula_latex=ew_latex,
        inputs=ew_inputs,
        value=ew_value,
        unit="FLOP",
        source="parcalc.core.layer_ops.ELEMENTWISE_FLOP (a convention: exp counted as 1 FLOP)",
    )
    narayanan = narayanan_flops(batch, seq_len, L, model.hidden, model.vocab)
    selective = (korthikanti_selective_flops(batch, seq_len, L, model.hidden, model.vocab)
                 if recompute == "selective" and attention_core_only else None)  # fmt: skip
    if not math.isfinite(hardware.value + narayanan.value):
        raise InputError("--batch / --seq-len: these sizes give more FLOPs than a number can hold")
    counts = _params_derivations(model) if model.moe is not None else (None, None)
    window = window_share(model, seq_len) if windowed else None
    return TrainingFlops(tuple(ops), head, causal, layer_forward, forward, model_flops, recomputed, hardware, per_token[0],
                         per_token[1], approx, narayanan, elementwise, selective, tuple(moe_ops), moe_forward, L_dense, L_moe,
                         model if model.moe is not None or linear is not None or blocks else None, counts[0], counts[1], core_share=half,
                         window=window, mtp=mtp, linear=linear, linear_delta=linear_delta,
                         mamba=blocks[0][3] if blocks else None, blocks=blocks)  # fmt: skip


MTP_SOURCE = (
    "DeepSeek-V3 report (arXiv:2412.19437) sec. 2.2, eq. (21)-(25): module k projects [RMSNorm(h); RMSNorm(Emb(t_{i+k}))] by "
    "M_k (d x 2d), runs one transformer block and the shared output head; Megatron-LM "
    "megatron/core/transformer/multi_token_prediction.py (MultiTokenPredictionLayer: enorm, hnorm, eh_proj, "
    "transformer_layer, final_layernorm; the GPT model's output_layer computes the MTP loss's logits)"
)


def mtp_forward(model: TransformerModel, tokens: float, block: Derivation, head_value: float) -> Derivation:
    """Forward FLOPs of the D multi-token-prediction modules per iteration: each runs the projection
    M_k (2 x T x 2h x h), one block of the model's last layer's kind, and the shared head again for its loss's logits."""
    features_in, features_out = model.mtp_projection
    proj = 2.0 * tokens * features_in * features_out
    inputs = (Term("D_mtp", "D", "D", model.mtp_layers, "", "multi-token-prediction depth (modules)", model.mtp_source),
              Term("F_proj_mtp", "F_M", r"F_{M}", proj, "FLOP", f"projection M_k: 2 x [{tokens:g}×{features_in}]·[{features_in}×{features_out}]"),
              block.as_term("F_block"),
              Term("F_head_mtp", "F_head", r"F_{\mathrm{head}}", head_value, "FLOP", "the shared LM head: the MTP loss's logits"))  # fmt: skip
    return Derivation("mtp_forward_flops", "Forward FLOPs of the multi-token-prediction modules per iteration", "F_mtp",
                      r"F_{\mathrm{mtp}}", "$D_mtp × ($F_proj_mtp + $F_block + $F_head_mtp)",
                      r"$D_mtp \times \left($F_proj_mtp + $F_block + $F_head_mtp\right)", inputs,
                      model.mtp_layers * (proj + block.value + head_value), "FLOP", MTP_SOURCE,
                      assumptions=("the MTP modules sit on the last pipeline stage (Megatron-LM); full recomputation does not "
                                   "replay them",))  # fmt: skip


def linear_forward(model: TransformerModel, batch: int, seq_len: int) -> Derivation:
    """Forward FLOPs of one gated-DeltaNet mixer for the batch: its operations one by one (layer_ops.linear_attention_ops)."""
    from parcalc.core.layer_ops import linear_attention_ops
    from parcalc.core.linear_attention import CHUNK, GDN_SOURCE

    ops = [op for op in linear_attention_ops(model, batch, seq_len, 2.0) if op.kind == "matmul"]
    inputs = tuple(Term(op.key, op.key, op.key.replace("_", r"\_"), op.flops, "FLOP", f"{op.name}: {op.shape}") for op in ops)
    formula = " + ".join(f"${op.key}" for op in ops)
    return Derivation("linear_forward_flops", "Forward FLOPs of one gated-DeltaNet mixer (projections, conv1d, chunked delta rule)",
                      "F_gdn", r"F_{\mathrm{gdn}}", formula, formula, inputs, float(sum(op.flops for op in ops)), "FLOP", GDN_SOURCE,
                      assumptions=(f"the delta rule by chunks of {CHUNK} tokens (torch_chunk_gated_delta_rule, flash-linear-attention's "
                                   "chunk_gated_delta_rule), the sequence padded to a whole chunk; the UT transform's two triangular "
                                   "solves at C (C - 1) / 2 multiply-adds per column; gates, norms and decays are element-wise, not counted",))  # fmt: skip


def mamba_forward(model: TransformerModel, batch: int, seq_len: int) -> Derivation:
    """Forward FLOPs of one Mamba-2 mixer for the batch: its operations one by one (layer_ops.mamba_ops)."""
    from parcalc.core.layer_ops import mamba_ops
    from parcalc.core.mamba import MAMBA2_SOURCE

    mamba = model.mamba
    assert mamba is not None
    ops = [op for op in mamba_ops(model, batch, seq_len, 2.0) if op.kind == "matmul"]
    inputs = tuple(Term(op.key, op.key, op.key.replace("_", r"\_"), op.flops, "FLOP", f"{op.name}: {op.shape}") for op in ops)
    formula = " + ".join(f"${op.key}" for op in ops)
    return Derivation("mamba_forward_flops", "Forward FLOPs of one Mamba-2 block (in_proj, conv1d, the SSD by chunks, out_proj)",
                      "F_ssm", r"F_{\mathrm{ssm}}", formula, formula, inputs, float(sum(op.flops for op in ops)), "FLOP", MAMBA2_SOURCE,
                      assumptions=(f"the SSD by chunks of {mamba.chunk} tokens as mamba_ssm's kernels run it (Megatron-LM's MambaMixer), "
                                   "the sequence padded to a whole chunk; C·B^T once per group of heads (transformers' torch path "
                                   "repeats B and C to every head and computes it per head); the chunk-to-chunk state passing one "
                                   "multiply-add per state element (the torch path's einsum over (chunks + 1)^2 pairs is the same "
                                   "recurrence written quadratically); gates, softplus, exp, D·x and the gated norm are element-wise, "
                                   "not counted",))  # fmt: skip


def mamba_blocks(model: TransformerModel, batch: int, seq_len: int, ops: tuple[LayerOp, ...],
                 layer_forward: Derivation) -> tuple[tuple[str, tuple[LayerOp, ...], int, Derivation], ...]:  # fmt: skip
    """A Mamba-2 hybrid's three blocks (name, ops, layers of it, forward): a Mamba-2 mixer, attention (the layer's projections
    and core) and the MLP, each under its one norm (NemotronHBlock)."""
    from parcalc.core.layer_ops import mamba_ops
    from parcalc.core.mamba import PATTERN_SOURCE

    assert model.mamba is not None
    counts = model.mamba.blocks_in(0, model.layers)
    attention_ops = tuple(op for op in ops if _group_of(op.key) in ("F_proj", "F_core") and op.key != "activation")
    mlp_ops = tuple(op for op in ops if op not in attention_ops)

    def block(key: str, symbol: str, what: str, terms: tuple[str, ...]) -> Derivation:
        inputs = tuple(layer_forward.term(t) for t in terms)
        formula = " + ".join(f"${t}" for t in terms)
        latex = r"F_{\mathrm{" + symbol.removeprefix("F_") + "}}"
        return Derivation(key, f"Forward FLOPs of one {what} block (its matmuls; {PATTERN_SOURCE})", symbol, latex, formula, formula,
                          inputs, sum(t.value for t in inputs), "FLOP", layer_forward.source, assumptions=layer_forward.assumptions)

    return (("Mamba-2 layer", tuple(mamba_ops(model, batch, seq_len, 2.0)), counts.mamba, mamba_forward(model, batch, seq_len)),
            ("attention layer", attention_ops, counts.attention, block("attention_block_forward_flops", "F_attn", "attention", ("F_proj", "F_core"))),
            ("MLP layer", mlp_ops, counts.mlp, block("mlp_block_forward_flops", "F_mlp", "MLP", ("F_mlp",))))  # fmt: skip


def _blocks_sum(model: TransformerModel, blocks: tuple[tuple[str, tuple[LayerOp, ...], int, Derivation], ...]
                ) -> tuple[tuple[Term, ...], str, str, float]:  # fmt: skip
    """The layers' forward of a Mamba-2 hybrid: each block's forward times its layers."""
    from parcalc.core.mamba import PATTERN_SOURCE

    source = (model.mamba.source if model.mamba else "") or PATTERN_SOURCE
    keys = (("L_ssm", "L_{\\mathrm{ssm}}", "F_ssm"), ("L_attn", "L_{\\mathrm{attn}}", "F_attn"), ("L_mlp", "L_{\\mathrm{mlp}}", "F_mlp"))
    terms: list[Term] = []
    for (name, _, count, forward), (l_key, l_latex, f_key) in zip(blocks, keys, strict=True):
        terms += [Term(l_key, l_key, l_latex, count, "", f"{name}s (hybrid_override_pattern)", source), forward.as_term(f_key)]
    formula = " + ".join(f"${count} × ${forward}" for count, _, forward in keys)
    latex = " + ".join(f"${count} \\times ${forward}" for count, _, forward in keys)
    return tuple(terms), formula, latex, float(sum(count * forward.value for _, _, count, forward in blocks))


def window_share(model: TransformerModel, seq_len: int) -> Derivation:
    """The mean layer's attention core as a share of the s x s square: the global layers' s^2/2 and the local layers'
    band (parcalc.core.attention_window), averaged over the L layers."""
    from parcalc.core.attention_window import WINDOW_SOURCE, causal_pairs

    window = model.window
    assert window is not None
    L, local = model.layers, model.local_layers_in(0, model.layers)
    band = ("$s² / 2 - max($s - $W, 0)² / 2" if window.kind is WindowKind.SLIDING else "⌊$s / $W⌋ × $W² / 2 + ($s mod $W)² / 2")
    inputs = (Term("L", "L", "L", L, "", "transformer layers"),
              Term("L_loc", "L_local", r"L_{\mathrm{local}}", local, "", f"layers with a {window.kind.value} window", window.source),
              Term("W", "W", "W", window.size, "", f"{window.kind.value} window (tokens)", window.source),
              Term("s", "s", "s", seq_len, "", "sequence length"),
              Term("P_band", "P_band", r"P_{\mathrm{band}}", window.pairs(seq_len), "", f"computed (query, key) area of a local layer: {band}"),
              Term("P_causal", "P_causal", r"P_{\mathrm{causal}}", causal_pairs(seq_len), "", "a full causal layer's: s² / 2"))  # fmt: skip
    return Derivation("attention_window", f"Attention core counted per layer, share of the s x s square ({window.describe})",
                      "ρ_attn", r"\rho_{\mathrm{attn}}", "(($L - $L_loc) × $P_causal + $L_loc × $P_band) / ($L × $s²)",
                      r"\frac{($L - $L_loc) $P_causal + $L_loc $P_band}{$L $s^2}", inputs,
                      core_share(window, L, seq_len), "fraction", WINDOW_SOURCE,
                      assumptions=("a kernel that skips the masked blocks (FlashAttention's window_size, FlexAttention): eager "
                                   "attention computes the whole square, counted without --causal",
                                   "a pipeline stage's layers are counted at the mean layer's share"))  # fmt: skip


def _module_flops(model: TransformerModel, ops: tuple[LayerOp, ...], moe_ops: tuple[LayerOp, ...], half: float,
                  modules: tuple[str, ...]) -> tuple[str, str, float, tuple[Term, ...], str]:
    """Recomputed FLOPs of Megatron's selective modules: the forward matmuls each checkpointed module runs
    again (parcalc.core.recompute.module_replays_op), in each dense and each MoE layer:
    L_dense x F_re,dense + L_moe x F_re,moe."""
    from parcalc.core.recompute import module_replays_op

    def replayed(layer_ops: tuple[LayerOp, ...], moe_layer: bool) -> tuple[float, list[str]]:
        chosen = [op for op in layer_ops if op.kind == "matmul" and module_replays_op(op.key, modules, model, moe_layer)]
        return sum(op.flops * (half if op.key in ATTENTION_CORE_OPS else 1.0) for op in chosen), [op.key for op in chosen]

    L_moe = model.moe_layers if model.moe is not None else 0
    L_dense = model.layers - L_moe
    dense, dense_keys = replayed(ops, False)
    moe, moe_keys = replayed(moe_ops, True) if moe_ops else (0.0, [])
    what = f"selective recomputation of Megatron-LM's modules {', '.join(modules)}"
    terms: list[Term] = []
    parts, latex = [], []
    for kind, name, count, flops, keys, f_key in (("dense", "dense", L_dense, dense, dense_keys, "F_re_d"),
                                                  ("moe", "MoE", L_moe, moe, moe_keys, "F_re_m")):  # fmt: skip
        if not count:
            continue
        terms += [Term(f"L_{kind}", f"L_{kind}", rf"L_{{\mathrm{{{kind}}}}}", count, "", f"{name} layers"),
                  Term(f_key, f"F_re,{kind}", rf"F_{{\mathrm{{re,{kind}}}}}", flops, "FLOP",
                       f"one {name} layer's replayed matmuls: {', '.join(keys) or 'none'}")]  # fmt: skip
        parts.append(f"$L_{kind} × ${f_key}")
        latex.append(rf"$L_{kind} \times ${f_key}")
    return " + ".join(parts), " + ".join(latex), L_dense * dense + L_moe * moe, tuple(terms), what


def _recompute_source(recompute: str, recomputed_layers: int | None, modules: tuple[str, ...] | None = None) -> str:
    from parcalc.core.recompute import MEGATRON_BLOCK, MEGATRON_MODULES, TT_POLICY

    if modules is not None:
        return f"{MEGATRON_MODULES}; matmul FLOPs as parcalc.core.layer_ops counts them"

    if recompute == "op":
        return f"{TT_POLICY}; matmul FLOPs as parcalc.core.layer_ops counts them"
    if recompute == "full" and recomputed_layers is not None:
        return f"{KORTHIKANTI_FLOPS}; {MEGATRON_BLOCK}"
    return KORTHIKANTI_FLOPS


def flops_utilization(flops: Derivation, step_time: float, gpus: float, peak: float, *, hardware: bool = False,
                      peak_source: str = "", key: str = "", label: str = "") -> Derivation:  # fmt: skip
    """MFU (model FLOPs) or HFU (hardware FLOPs): FLOPs / (step time x GPUs x peak FLOP/s per GPU)."""
    for flag, value in (("--step-time", step_time), ("--gpus", gpus), ("--peak", peak)):
        if not (value > 0 and math.isfinite(value)):
            raise InputError(f"{flag}: must be greater than zero, got {value!r}")
    name = "HFU" if hardware else "MFU"
    return Derivation(
        key=key or name.lower(),
        label=label or f"{name}: {'hardware' if hardware else 'model'} FLOPs utilization",
        symbol=name,
        latex_symbol=rf"\mathrm{{{name}}}",
        formula="$F / ($T × $n × $P)",
        formula_latex=r"\frac{$F}{$T \times $n \times $P}",
        inputs=(
            flops.as_term("F"),
            Term("T", "T", "T", step_time, "s", "time of one iteration"),
            Term("n", "n", "n", gpus, "", "GPUs"),
            Term("P", "P", "P", peak, "FLOP/s", "peak FLOP/s per GPU", peak_source),
        ),
        value=flops.value / (step_time * gpus * peak),
        unit="fraction",
        source=MFU_SOURCE,
    )


def stage_flops(counted: TrainingFlops, split: tuple[int, ...], stage: int) -> Derivation:
    """Hardware FLOPs of pipeline stage `stage` (0-based) per iteration, every replica and TP rank
    of it together: its layers' forward, backward (2 x forward) and recomputation, and on the last
    stage the LM head's forward and backward. The stages add up to F_hw whatever the split; a
    stage's share is what its GPUs must run while the others wait (Narayanan et al. 2021 sec. 2.2:
    the pipeline runs at the pace of its slowest stage)."""
    total_layers = sum(split)
    if counted.linear is not None or counted.mamba is not None:
        return _hybrid_stage_flops(counted, split, stage)
    if counted.moe_layer_forward is not None and counted.model_ref is not None:
        return _moe_stage_flops(counted, split, stage)
    inputs = [
        Term("L_s", "L_stage", r"L_{\mathrm{stage}}", split[stage], "", f"layers on stage {stage + 1}"),
        counted.layer_forward.as_term("F_layer"),
    ]
    per_layer = 3 * counted.layer_forward.value + counted.recomputed.value / total_layers
    if counted.recomputed.value:
        inputs += [counted.recomputed.as_term("F_re"), Term("L", "L", "L", total_layers, "", "transformer layers")]
        formula, latex = "$L_s × (3 × $F_layer + $F_re / $L)", r"$L_s \left(3 $F_layer + \frac{$F_re}{$L}\right)"
    else:
        formula, latex = "$L_s × 3 × $F_layer", r"$L_s \times 3 $F_layer"
    value = split[stage] * per_layer
    return _stage_with_head(counted, split, stage, inputs, formula, latex, value, "per layer")


def layout_rank_flops(counted: TrainingFlops, split: PipelineSplit, rank: int) -> Derivation:
    """Hardware FLOPs of pipeline rank `rank` (0-based) under a --pipeline-layout: the sum of its chunks, each the
    virtual stage's own layers as stage_flops counts them over the layout's virtual stages in layer order (the LM
    head with the last, which holds the loss L), and the MTP modules on the virtual stage whose `m` places them
    (Megatron-LM builds the MTP block where the layout's m stands: pipeline_parallel_layer_layout.py @d98e8a64dd)."""
    from parcalc.core.pipeline_layout import SOURCE as LAYOUT_SOURCE

    layers = tuple(stage.layers for stage in split.stages)
    last = len(layers) - 1
    mtp = 3 * counted.mtp.value if counted.mtp is not None else 0.0
    at = next((i for i, stage in enumerate(split.stages) if stage.mtp), last)
    terms, value = [], 0.0
    for c, index in enumerate(range(rank, len(layers), split.pp)):
        chunk = stage_flops(counted, layers, index).value + (mtp if index == at else 0.0) - (mtp if index == last else 0.0)
        value += chunk
        held = [f"{layers[index]} layers"] + (["the LM head"] if index == last else []) + (["the MTP modules"] if index == at and mtp else [])
        terms.append(Term(f"F_c{c}", f"F_chunk{c + 1}", rf"F_{{\mathrm{{chunk}}{c + 1}}}", chunk, "FLOP",
                          f"chunk {c + 1}, virtual stage {index + 1}: {', '.join(held)}"))  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in terms)
    return Derivation(key="stage_flops", label=f"Hardware FLOPs of stage {rank + 1} of {split.pp} per iteration (all its GPUs)",
                      symbol="F_stage", latex_symbol=r"F_{\mathrm{stage}}", formula=formula, formula_latex=formula, inputs=tuple(terms),
                      value=value, unit="FLOP",
                      source=f"{KORTHIKANTI_FLOPS}, per virtual stage; the stages as --pipeline-layout places them ({LAYOUT_SOURCE})")  # fmt: skip


def _moe_stage_flops(counted: TrainingFlops, split: tuple[int, ...], stage: int) -> Derivation:
    """stage_flops of a model with dense and MoE layers: the stage's own dense and MoE layers, each
    3 x its forward, plus its share of recomputation (full: those layers' forward again; selective:
    the attention core, the same in both kinds), plus the LM head on the last stage."""
    model = counted.model_ref
    assert model is not None and counted.moe_layer_forward is not None
    start = sum(split[:stage])
    end = start + split[stage]
    moe = model.moe_layers_in(start, end)
    dense = split[stage] - moe
    forward = counted.layers_forward(start, end)
    if counted.recomputed.value and counted.recomputed.inputs and counted.recomputed.inputs[-1].key == "F_core":
        again = split[stage] * counted.layer_forward.term("F_core").value  # selective
    elif counted.recomputed.value:
        again = forward  # full
    else:
        again = 0.0
    inputs = [
        Term("L_d", "L_dense,stage", r"L_{\mathrm{dense,stage}}", dense, "", f"dense layers on stage {stage + 1}"),
        counted.layer_forward.as_term("F_layer"),
        Term("L_m", "L_moe,stage", r"L_{\mathrm{moe,stage}}", moe, "", f"MoE layers on stage {stage + 1}"),
        counted.moe_layer_forward.as_term("F_moe"),
        Term("F_re_s", "F_re,stage", r"F_{\mathrm{re,stage}}", again, "FLOP", "recomputed forward of this stage's layers"),
    ]
    formula, latex = "3 × ($L_d × $F_layer + $L_m × $F_moe) + $F_re_s", r"3 \left($L_d $F_layer + $L_m $F_moe\right) + $F_re_s"
    value = 3 * forward + again
    return _stage_with_head(counted, split, stage, inputs, formula, latex, value, "per layer, dense and MoE layers each their own")


def _hybrid_stage_flops(counted: TrainingFlops, split: tuple[int, ...], stage: int) -> Derivation:
    """stage_flops of a model with linear-attention layers (recomputation none or full): 3 x the forward of the stage's
    own layers, each kind its own (TrainingFlops.layers_forward), their forward again with full recomputation."""
    start = sum(split[:stage])
    forward = counted.layers_forward(start, start + split[stage])
    again = forward if counted.recomputed.value else 0.0
    inputs = [Term("F_s", "F_fwd,stage", r"F_{\mathrm{fwd,stage}}", forward, "FLOP", f"forward of the {split[stage]} layers of stage {stage + 1}"),
              Term("F_re_s", "F_re,stage", r"F_{\mathrm{re,stage}}", again, "FLOP", "recomputed forward of this stage's layers")]  # fmt: skip
    return _stage_with_head(counted, split, stage, inputs, "3 × $F_s + $F_re_s", r"3 $F_s + $F_re_s", 3 * forward + again,
                            "per layer, full-attention and linear-attention layers each their own")


def _stage_with_head(counted: TrainingFlops, split: tuple[int, ...], stage: int, inputs: list[Term], formula: str, latex: str,
                     value: float, how: str) -> Derivation:  # fmt: skip
    """A stage's FLOPs derivation, with the LM head's forward and backward added on the last stage."""
    head = counted.forward.value - counted.layers_forward(0, sum(split))  # the LM head's forward (0 without a vocabulary)
    if stage == len(split) - 1 and head:
        inputs = [*inputs, Term("F_head", "F_head", r"F_{\mathrm{head}}", head, "FLOP", "LM head forward (on the last stage)")]
        formula, latex, value = formula + " + 3 × $F_head", latex + r" + 3 $F_head", value + 3 * head
    return Derivation(
        key="stage_flops",
        label=f"Hardware FLOPs of stage {stage + 1} of {len(split)} per iteration (all its GPUs)",
        symbol="F_stage",
        latex_symbol=r"F_{\mathrm{stage}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(inputs),
        value=value,
        unit="FLOP",
        source=f"{KORTHIKANTI_FLOPS}, {how}; layers per stage by Megatron-LM's split (parcalc.core.stages)",
    )
