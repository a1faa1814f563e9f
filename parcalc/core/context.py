"""Context parallelism: the sequence of each micro-batch split over `cp` ranks.

Each rank holds s/cp tokens of every sequence; everything computed token by token (projections,
MLP, norms, their activations) divides by cp. Attention needs every earlier token's keys and
values, and the three ways Transformer Engine gets them (`cp_comm_type`, which Megatron-LM passes
through: megatron/core/transformer/transformer_config.py, cp_comm_type, "p2p", "all_gather", "a2a")
are modelled here and in parcalc.core.comm.context:

- p2p (`AttnFuncWithCPAndKVP2P`): a ring. Forward: cp - 1 steps, each an isend of the K/V block
  the rank holds (K and V concatenated: `p2p_comm_buffers[0] = torch.cat((k.view(-1), v.view(-1)))`)
  to the next rank and an irecv from the previous one, overlapped with the attention of the block
  received before. Backward: cp steps; step 0 sends the K/V block, steps 1 .. cp-2 the K/V block
  with the dK/dV accumulated so far (`[2, *kv.shape]` buffers), the last step only dK/dV, which
  then reaches the rank that owns those keys: 2 (cp - 1) K/V blocks in cp calls.
- all-gather (`AttnFuncWithCPAndKVAllGather`; Llama 3, Dubey et al. 2024 sec. 3.3.2): an
  all-gather of K and one of V in forward (`gather_along_first_dim`), the same two again in
  backward (only the local shard is saved), and a reduce-scatter of dK and of dV.
- a2a (`AttnFuncWithCPAndQKVOA2A`, DeepSpeed-Ulysses, Jacobs et al. 2023): all-to-alls turn
  sequence shards of Q, K, V into head shards of the whole sequence (3 calls), and the output back
  (1); backward the same four for dO, dQ, dK, dV. Each rank then attends over heads / (t cp)
  heads: heads and key/value heads per TP rank must divide by cp.

Source: NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/
context_parallel.py at d0067d0 (lines 1356-2203 p2p forward, 2459-2500 p2p backward, 3014-3230
all-gather forward, 3786-3790 and 4112-4120 its backward, 4170-4485 and 4677-4837 a2a).

Causal load balancing: with a causal mask, rank r of a plain split attends to (2r + 1)/cp^2 of
the score pairs; the last rank does (2cp - 1)/cp times the mean. Megatron-LM splits each
sequence into 2cp chunks and gives rank r chunks r and 2cp - 1 - r
(megatron/core/utils.py, _get_batch_on_this_cp_rank_per_sequence_balancing, line 2504 at
NVIDIA/Megatron-LM d98e8a6): every rank then has the same work, which needs s divisible by 2cp.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from parcalc.core.layout import Layout
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

if TYPE_CHECKING:  # for the annotation only: cp_rank_flops imports parcalc.core.flops when called
    from parcalc.core.flops import TrainingFlops

TE_CP = ("NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py "
         "at d0067d0")  # fmt: skip
MEGATRON_BALANCE = ("Megatron-LM megatron/core/utils.py, _get_batch_on_this_cp_rank_per_sequence_balancing "
                    "(line 2504 at d98e8a6): 2cp chunks, rank r holds chunks r and 2cp - 1 - r")  # fmt: skip
MEGATRON_DP_CP = ("Megatron-LM megatron/core/distributed/finalize_model_grads.py line 611 at d98e8a6: "
                  "get_data_parallel_group(with_context_parallel=True); the distributed optimizer shards over the same group")  # fmt: skip
LLAMA3_CP = "Dubey et al. 2024, 'The Llama 3 Herd of Models', sec. 3.3.2 (all-gather based context parallelism)"
ULYSSES = "Jacobs et al. 2023, 'DeepSpeed Ulysses' (arXiv:2309.14509), sec. 3: all-to-all of Q, K, V and of the output"


class CpComm(str, Enum):
    """How attention gets the keys and values of the other context-parallel ranks."""

    P2P = "p2p"
    ALL_GATHER = "all-gather"
    A2A = "a2a"

    @property
    def label(self) -> str:
        return {"p2p": "ring of point-to-point K/V exchanges (TE p2p)", "all-gather": "all-gather of K and V (TE all_gather, Llama 3)",
                "a2a": "all-to-all of Q, K, V and O (TE a2a, DeepSpeed-Ulysses)"}[self.value]  # fmt: skip


def cp_comm_of(value: object) -> CpComm:
    """A CpComm from itself or its value ('p2p', 'all-gather', 'a2a'); InputError otherwise."""
    if isinstance(value, CpComm):
        return value
    try:
        return CpComm(str(value).replace("_", "-"))
    except ValueError:
        raise InputError(f"--cp-comm: p2p, all-gather or a2a, got {value!r}") from None


def check_context_parallel(model: TransformerModel, seq_len: int, layout: Layout, causal: bool = True) -> None:
    """The layout's cp a whole number >= 1 that splits the sequence into 2cp equal chunks (causal balancing),
    and, for a2a, the heads and key/value heads of each TP rank into cp equal groups."""
    cp, cp_comm, tp = layout.cp, layout.cp_comm, layout.tp
    if isinstance(cp, bool) or not isinstance(cp, int) or cp < 1:
        raise InputError(f"--cp: must be a whole number of at least 1, got {cp!r}")
    comm = cp_comm_of(cp_comm)
    if cp == 1:
        return
    if seq_len % cp:
        raise InputError(f"--cp: {cp} does not divide the sequence length {seq_len}; each context-parallel rank holds s/cp tokens")
    if causal and seq_len % (2 * cp):
        raise InputError(
            f"--cp: the sequence length {seq_len} is not a multiple of 2 x cp = {2 * cp}; causal load balancing splits each "
            "sequence into 2cp equal chunks (Megatron-LM get_batch_on_this_cp_rank)"
        )
    if comm is CpComm.A2A:
        for what, count in (("attention heads", model.heads), ("key/value heads", model.kv_heads)):
            per_rank = count // tp if count % tp == 0 else count
            if per_rank % cp:
                raise InputError(
                    f"--cp-comm a2a: {count} {what} / t = {tp} give {per_rank} per TP rank, not divisible by --cp {cp}; "
                    "DeepSpeed-Ulysses gives each context-parallel rank whole heads (use p2p or all-gather)"
                )


def kv_block_bytes(model: TransformerModel, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float) -> float:
    """K and V of one rank's sequence shard on one TP rank: 2 b (s/cp) (kv_heads d / t) e bytes,
    the block a p2p step sends (GQA: kv_heads x head_dim, not the hidden size)."""
    return 2.0 * micro_batch * (seq_len / layout.cp) * (model.kv_width / layout.tp) * element_bytes


def q_block_bytes(model: TransformerModel, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float) -> float:
    """Q (or the attention output) of one rank's sequence shard on one TP rank: b (s/cp) (heads d / t) e."""
    return float(micro_batch) * (seq_len / layout.cp) * (model.q_width / layout.tp) * element_bytes


# ---------------------------------------------------------------------------------------------
# Memory: what each variant holds beyond the s/cp shard, during one layer's attention


def context_working_set(model: TransformerModel, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float) -> Derivation | None:
    """Transient bytes one layer's context-parallel attention holds (one micro-batch, one GPU).

    Nothing of it is kept for backward: each variant saves only the local Q, K, V shards, the
    output and the log-sum-exp (TE `ctx.save_for_backward`: p2p saves (q, kv, out) and
    softmax_lse; all-gather (q, k, v, out) with k, v the local shards; a2a the head-split q, k, v,
    out, the same bytes as the sequence shards). What is counted is the peak while one layer runs:
    - p2p: forward keeps every received block in `p2p_comm_buffers` (a list of cp) until it
      returns, cp K/V blocks; backward two `[2, *kv.shape]` buffers, 4 blocks: max(cp, 4) blocks;
    - all-gather: backward holds the gathered K, V and the full-length dK, dV before their
      reduce-scatter: 2 cp blocks;
    - a2a: the all-to-all's output buffers of Q, K, V (`torch.empty_like` of each input): one
      shard of each.
    """
    cp = layout.cp
    if cp <= 1:
        return None
    comm = cp_comm_of(layout.cp_comm)
    kv = kv_block_bytes(model, micro_batch, seq_len, layout, element_bytes)
    block = Term("B_kv", "B_kv", r"B_{\mathrm{kv}}", kv, "B", "K and V of one rank's sequence shard, one TP rank: 2 b (s/cp) (kv_heads d / t) e")
    c = Term("cp", "cp", r"c_p", cp, "", "context-parallel degree")
    if comm is CpComm.P2P:
        n = max(cp, 4)
        formula, latex = "max($cp, 4) × $B_kv", r"\max($cp, 4) \times $B_kv"
        inputs, value = (c, block), n * kv
        why = "p2p: forward keeps the cp received K/V blocks to its end, backward two [K/V, dK/dV] buffers (4 blocks)"
        source = f"{TE_CP}, AttnFuncWithCPAndKVP2P (p2p_comm_buffers: lines 1685-1706 forward, 2397-2401 backward)"
    elif comm is CpComm.ALL_GATHER:
        formula, latex = "2 × $cp × $B_kv", r"2 \times $cp \times $B_kv"
        inputs, value = (c, block), 2 * cp * kv
        why = "all-gather: backward re-gathers K, V (cp blocks) and builds full-length dK, dV (cp blocks) before the reduce-scatter"
        source = f"{TE_CP}, AttnFuncWithCPAndKVAllGather.backward (lines 3787-3788 gather, 4112-4120 reduce-scatter); {LLAMA3_CP}"
    else:
        q = q_block_bytes(model, micro_batch, seq_len, layout, element_bytes)
        qb = Term("B_q", "B_q", r"B_{\mathrm{q}}", q, "B", "Q of one rank's sequence shard, one TP rank: b (s/cp) (heads d / t) e")
        formula, latex = "$B_q + $B_kv", r"$B_q + $B_kv"
        inputs, value = (qb, block), q + kv
        why = "a2a: the all-to-all output buffers of Q, K and V (one shard each)"
        source = f"{TE_CP}, flash_attn_a2a_communicate (line 387: torch.empty_like of each input); {ULYSSES}"
    return Derivation(
        key="cp_working_set",
        label=f"Context-parallel buffers during one layer's attention ({comm.value})",
        symbol="A_cp",
        latex_symbol=r"A_{\mathrm{cp}}",
        formula=formula,
        formula_latex=latex,
        inputs=inputs,
        value=float(value),
        unit="B",
        source=source,
        assumptions=(why, "transient: one layer at a time, freed before the next; nothing extra is saved for backward"),
    )


# ---------------------------------------------------------------------------------------------
# FLOPs: the causal mask's work per rank


def causal_pairs(seq_len: int, cp: int, rank: int, balanced: bool) -> float:
    """Query-key pairs under a causal mask (key position <= query position) that `rank` computes.

    Plain split: rank r holds tokens [r n, (r+1) n), n = s/cp: sum over its queries of (q + 1)
    = r n^2 + n (n + 1)/2. Balanced: chunks r and 2cp - 1 - r of n = s/(2cp) tokens each:
    (2cp - 1) n^2 + n (n + 1), the same on every rank."""
    if balanced:
        n = seq_len / (2 * cp)
        return sum(c * n * n + n * (n + 1) / 2 for c in (rank, 2 * cp - 1 - rank))
    n = seq_len / cp
    return rank * n * n + n * (n + 1) / 2


def causal_imbalance(seq_len: int, cp: int, balanced: bool) -> Derivation:
    """The busiest rank's causal attention work over the mean rank's: 1 with Megatron's 2cp
    chunks; without them the last rank's, (2cp - 1)/cp for s >> cp."""
    total = seq_len * (seq_len + 1) / 2
    busiest = max(causal_pairs(seq_len, cp, r, balanced) for r in range(cp)) if cp <= 4096 else causal_pairs(seq_len, cp, cp - 1, balanced)
    value = busiest / (total / cp)
    c = Term("cp", "cp", r"c_p", cp, "", "context-parallel degree")
    s = Term("s", "s", "s", seq_len, "", "sequence length")
    if balanced:
        formula, latex = "((2 × $cp - 1) × n² + n × (n + 1)) / ($s × ($s + 1) / (2 × $cp)), n = $s / (2 × $cp)", \
            r"\frac{(2 $cp - 1) n^2 + n (n + 1)}{$s ($s + 1) / (2 $cp)},\ n = \frac{$s}{2 $cp}"
        label, source = "Causal attention work of the busiest CP rank over the mean (2cp-chunk balancing)", MEGATRON_BALANCE
    else:
        formula, latex = "(($cp - 1) × n² + n × (n + 1) / 2) / ($s × ($s + 1) / (2 × $cp)), n = $s / $cp", \
            r"\frac{($cp - 1) n^2 + n (n + 1)/2}{$s ($s + 1) / (2 $cp)},\ n = \frac{$s}{$cp}"
        label = "Causal attention work of the last CP rank over the mean (plain split, no balancing)"
        source = "hand derivation: rank r's queries see r n + 1 .. (r + 1) n keys; (2cp - 1)/cp for s >> cp"
    return Derivation("cp_causal_imbalance", label, "κ_cp", r"\kappa_{\mathrm{cp}}", formula, latex, (c, s), value, "", source)


def cp_rank_flops(counted: TrainingFlops, seq_len: int, cp: int, balanced: bool = True) -> Derivation:
    """Hardware FLOPs of the busiest context-parallel rank when `cp` ranks share every sequence.

    Every op but the attention core (Q K^T and score V) works on the rank's s/cp tokens: F_other / cp.
    The attention core of a causal model is split by the query-key pairs each rank computes
    (causal_pairs): the busiest rank runs κ_cp / cp of it, κ_cp from causal_imbalance (1 with
    Megatron's 2cp-chunk balancing; (2cp - 1)/cp for s >> cp on the plain split). Without a mask
    every rank computes s/cp queries against all s keys: κ = 1. `counted` is a
    parcalc.core.flops.TrainingFlops of `seq_len`-token sequences (hardware FLOPs: recomputation included)."""
    from parcalc.core.activations import check_count
    from parcalc.core.flops import ATTENTION_CORE_OPS

    check_count("--cp", cp)
    if counted.window is not None:  # pairs of full causal attention
        raise InputError("--cp: the context-parallel split is counted for full causal attention; this model has an attention window")
    recompute = counted.recomputed.value
    # a hybrid's recurrent mixers (Mamba-2, gated DeltaNet) split evenly: Megatron-Core gives each CP rank heads / cp of them
    # over the whole sequence (parcalc.core.hybrid_context), so only its attention layers' cores are the pairs below; a
    # gated-DeltaNet hybrid's layer kinds count attention in every layer, of which its linear layers have none
    model = counted.model_ref
    if model is not None and (model.mamba is not None or model.linear_attention is not None):
        from parcalc.core.hybrid_context import check_mixer_cp

        check_mixer_cp(model, 1, cp)  # whole heads on every CP rank (flops has no --tp: one TP rank holds them all)
    softmax_share = 1.0
    if counted.linear is not None and model is not None:
        softmax_share = (model.layers - model.linear_layers_in(0, model.layers)) / model.layers
    attention = 0.0
    for _, ops, layers, _ in counted.layer_kinds():
        for op in ops:
            if op.kind == "matmul" and op.key in ATTENTION_CORE_OPS:
                attention += layers * counted.op_flops(op) * softmax_share
    selective_or_full = recompute > 0
    passes = 4.0 if selective_or_full else 3.0  # selective and full both run the attention core again
    f_att = passes * attention
    f_other = counted.hardware.value - f_att
    s = seq_len
    if s % cp:
        raise InputError(f"--cp: {cp} does not divide the sequence length {s}: each rank holds s/cp tokens")
    if counted.causal and balanced and s % (2 * cp):
        raise InputError(f"--cp: 2 x {cp} chunks do not divide the sequence length {s} (Megatron's load balancing needs s % 2cp == 0)")
    kappa = causal_imbalance(s, cp, balanced) if counted.causal else Derivation(
        "cp_causal_imbalance", "No causal mask: every rank computes s/cp queries against all s keys", "κ_cp", r"\kappa_{\mathrm{cp}}",
        "1", "1", (), 1.0, "", "full attention: the work per rank is even")  # fmt: skip
    inputs = (
        Term("F_o", "F_other", r"F_{\mathrm{other}}", f_other, "FLOP", "hardware FLOPs of every op but the attention core (whole batch)"),
        Term("F_a", "F_attn", r"F_{\mathrm{attn}}", f_att, "FLOP",
             f"attention core Q·K^T and score·V, {passes:g} passes (forward, backward 2x{', recomputed' if passes == 4 else ''})"),
        kappa.as_term("k"),
        Term("cp", "cp", r"c_p", cp, "", "context-parallel degree"),
    )
    what = "2cp-chunk balancing" if balanced else "plain split"
    return Derivation(
        key="cp_rank_flops" if balanced else "cp_rank_flops_plain",
        label=f"Hardware FLOPs of the busiest of {cp} context-parallel ranks ({what}), whole batch on one CP group",
        symbol="F_cp",
        latex_symbol=r"F_{\mathrm{cp}}",
        formula="$F_o / $cp + $k × $F_a / $cp",
        formula_latex=r"\frac{$F_o}{$cp} + $k \frac{$F_a}{$cp}",
        inputs=inputs,
        value=f_other / cp + kappa.value * f_att / cp,
        unit="FLOP",
        source=(MEGATRON_BALANCE if balanced else "hand derivation (parcalc.core.context.causal_pairs)")
        + "; all other ops split by tokens (Liu et al. 2023, Ring Attention; Megatron-LM context parallelism)",
        assumptions=("divide by dp x pp for one GPU of a larger job (every CP group runs its share of the batch)",),
    )
