"""Expert parallelism: the degrees of an MoE layer's expert grid and the parameters one GPU holds.

Megatron-Core "MoE parallel folding" (NVIDIA/Megatron-LM at d98e8a64ddf3,
megatron/core/parallel_state.py, initialize_model_parallel, lines 870-905): the expert layers get a
grid of their own over the same world, expert_tensor_parallel_size (etp, default tp: line 871-872)
x expert_model_parallel_size (ep) x expert data-parallel x pp, with
expert_data_parallel_size = world_size // (etp x ep x pp) (line 880) and a RuntimeError when
etp x ep x pp does not divide the world (881-884). With world = tp x pp x cp x dp that is: etp x ep
must divide tp x cp x dp, and expert-DP = tp x cp x dp / (etp x ep). ep adds no GPUs. Each EP rank
holds experts / ep routed experts (megatron/core/transformer/moe/moe_layer.py: num_local_experts =
num_moe_experts // ep size, asserted to divide), each expert's FFN split etp ways (column-parallel
fc1, row-parallel fc2 over the expert tensor-parallel group).

What a GPU holds of an MoE layer: attention and norms as a dense layer (split by tp), the router
weight replicated on every TP rank (megatron/core/transformer/moe/router.py, Router.__init__:
torch.empty((num_moe_experts, hidden_size)) with no TP split, marked `sequence_parallel` so its
gradient is all-reduced over TP), the shared experts split by tp as a dense MLP
(megatron/core/transformer/moe/shared_experts.py builds them as an MLP with the attention's TP
group), and its experts / ep routed experts, each split etp ways.
"""

from __future__ import annotations

from parcalc.core.layer_params import layer_params_per_rank
from parcalc.core.layout import Layout
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.named_tuple import NamedTuple

FOLDING = ("Megatron-Core MoE parallel folding: megatron/core/parallel_state.py, initialize_model_parallel "
           "(NVIDIA/Megatron-LM d98e8a64ddf3, lines 870-905): expert-DP = world / (etp x ep x pp)")  # fmt: skip
ROUTER_SOURCE = "Megatron-LM megatron/core/transformer/moe/router.py, Router.__init__: weight (experts, hidden), not split over TP"


class ExpertLayout(NamedTuple):
    """The expert grid of one pipeline stage: ep ranks share the experts, each expert split etp
    ways, edp expert-data-parallel replicas (etp x ep x edp = tp x cp x dp)."""

    ep: int
    etp: int
    edp: int
    dense_dp: int  # the ranks the dense states are data-parallel over: dp x cp (Megatron's dp-cp group)


def expert_dp(layout: Layout) -> int:
    """edp = tp x dp x cp / (ep x etp): the expert-data-parallel replicas the routed experts' gradients
    are reduced and their states sharded over (etp: the layout's, or tp)."""
    return layout.tp * layout.dp * layout.cp // (layout.ep * layout.expert_tp)


def expert_layout(model: TransformerModel, layout: Layout) -> ExpertLayout:
    """Check the layout's ep / etp against the model and the dense degrees (Megatron's rules, module docstring)."""
    from parcalc.core.activations import check_count

    tp, cp, dp, ep, given = layout.tp, layout.cp, layout.dp, layout.ep, layout.etp
    etp = layout.expert_tp
    check_count("--ep", ep)
    check_count("--etp", etp)
    if model.moe is None:
        if ep != 1 or given is not None:
            flag = "--ep" if ep != 1 else "--etp"
            raise InputError(f"{flag}: model {model.key} has no experts (no moe: block); expert parallelism applies to MoE models only")
        return ExpertLayout(1, tp, cp * dp, dp * cp)
    experts = model.moe.experts
    if experts % ep:
        raise InputError(f"--ep: {ep} does not divide the {experts} routed experts (Megatron-LM: num_moe_experts % ep == 0)")
    if model.moe.expert_ffn_hidden % etp:
        raise InputError(f"--etp: {etp} does not divide the expert FFN width {model.moe.expert_ffn_hidden}")
    width = tp * cp * dp
    if width % (etp * ep):
        raise InputError(f"--ep / --etp: etp x ep = {etp} x {ep} does not divide tp x cp x dp = {tp} x {cp} x {dp} = {width} "
                         "(Megatron-Core folds the expert grid over the dense one: parallel_state.py, initialize_model_parallel)")  # fmt: skip
    return ExpertLayout(ep, etp, expert_dp(layout), dp * cp)


def ffn_params_per_rank(model: TransformerModel, width: int, split: int) -> int:
    """One FFN of the model's MLP kind and inner `width`, on one of `split` tensor-parallel ranks:
    column-parallel up/gate weights and biases and the row-parallel down weight split, the down
    bias replicated (Shoeybi et al. 2019 sec. 3)."""
    matrices = 3 if model.mlp.gated else 2
    weights = matrices * model.hidden * width // split
    biases = ((matrices - 1) * width // split + model.hidden) if model.bias else 0
    return weights + biases


def moe_dense_params_per_rank(model: TransformerModel, tp: int) -> int:
    """The part of one MoE layer that is not routed experts, on one TP rank: attention and norms
    as a dense layer, the router replicated, the shared experts split by tp."""
    assert model.moe is not None
    attention_and_norms = layer_params_per_rank(model, tp) - ffn_params_per_rank(model, model.ffn_hidden, tp)
    shared = model.moe.shared_experts * ffn_params_per_rank(model, model.moe.shared_width, tp)
    gate = model.hidden if model.moe.shared_expert_gate and model.moe.shared_experts else 0  # replicated, as the router
    return attention_and_norms + model.router_params_per_layer + shared + gate


def expert_params_per_rank(model: TransformerModel, layout: Layout) -> int:
    """Routed experts of one MoE layer on one GPU: experts / ep of them, each split etp ways (the layout's expert grid)."""
    if model.moe is None:
        return 0
    return model.moe.experts // layout.ep * ffn_params_per_rank(model, model.moe.expert_ffn_hidden, layout.expert_tp)


def stage_ranges(counts: tuple[int, ...], chunks: int = 1) -> tuple[tuple[range, ...], ...]:
    """The layer ranges each stage holds, first to last: contiguous without chunks; with the
    interleaved schedule's v chunks, stage s holds chunk c of every round c (Megatron-LM's virtual
    pipeline: model chunk c of stage s is virtual stage c x p + s, n_s / v layers each)."""
    pp = len(counts)
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for _ in range(chunks):
        for stage, count in enumerate(counts):
            each = count // chunks
            out[stage].append(range(start, start + each))
            start += each
    return tuple(tuple(r) for r in out)


def moe_layers_on(model: TransformerModel, ranges: tuple[range, ...]) -> int:
    """MoE layers among the given layer ranges."""
    return sum(model.moe_layers_in(r.start, r.stop) for r in ranges)


MEGATRON_A2A = ("Megatron-LM megatron/core/transformer/moe/token_dispatcher.py (d98e8a6), MoEAlltoAllTokenDispatcher.token_dispatch "
                "(lines 682-725: all_to_all(ep_group, permutated_local_input_tokens, output_splits, input_splits)) and "
                "dispatch_postprocess (lines 741-750: gathered over the expert-TP group when its size > 1)")  # fmt: skip


def dispatch_tokens_per_rank(micro_batch: int, seq_len: int, layout: Layout) -> float:
    """T: the tokens of one micro-batch that enter one GPU's MoE layer, b s / (cp t) with sequence
    parallelism, b s / cp without (parcalc.core.comm.expert.tokens_per_rank)."""
    return micro_batch * seq_len / (layout.cp * (layout.tp if layout.sequence_parallel else 1))


def moe_dispatch_working_set(model: TransformerModel, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float,
                             imbalance: float = 1.0) -> Derivation | None:  # fmt: skip
    """Transient bytes of one MoE layer's token exchange on the receiving GPU (one micro-batch), beside
    what the layer saves for backward (parcalc.core.activations.moe_tensors keeps the received copies,
    the experts' GEMM input, once): 2 ρ etp T k h e.

    An all-to-all needs its input and its output at once: in forward the permuted local copies (send
    buffer) beside the received ones; in backward the gradient of the received copies beside the
    all-to-all's output, the gradient of the sent ones: two buffers of T k h elements for the
    balanced share, ρ times it on the busiest rank (ρ: the stated imbalance, capped by the capacity
    factor; MixtureOfExperts.busiest_share), etp times it after the expert-TP all-gather. Dropless
    routing has no cap: the worst case is every copy of the EP group that can reach this rank's
    experts, ep min(k, E/ep) / k times the balanced share (named in the assumptions, not added)."""
    if model.moe is None:
        return None
    moe = model.moe
    ep, etp, sequence_parallel = layout.ep, layout.expert_tp, layout.sequence_parallel
    tokens = dispatch_tokens_per_rank(micro_batch, seq_len, layout)
    rho = moe.busiest_share(imbalance)
    value = 2.0 * rho * etp * tokens * moe.top_k * model.hidden * element_bytes
    worst = ep * min(moe.top_k, moe.experts // ep) / moe.top_k
    inputs = (
        Term("rho", "ρ", r"\rho", rho, "", "busiest rank's received copies over the balanced share (--moe-imbalance, capped by the "
             "capacity factor)" + ("" if moe.capacity_factor is None else f" {moe.capacity_factor:g}")),
        Term("t_e", "etp", r"t_e", etp, "", "expert tensor-parallel degree (tokens all-gathered over it after the all-to-all)"),
        Term("T", "T", "T", tokens, "", "tokens of one micro-batch entering this GPU's MoE layer: b s / (cp" + (" t)" if sequence_parallel else ")")),
        Term("k", "k", "k", moe.top_k, "", "experts per token (top-k)"),
        Term("h", "h", "h", model.hidden, "", "hidden size"),
        Term("e", "e", "e", element_bytes, "B", "bytes per element of the exchanged tokens"),
    )
    dropless = ("dropless: no cap on what one rank receives; the worst case, every copy of the EP group that can reach this rank's "
                f"{moe.experts // ep} experts, is ep x min(k, E/ep) / k = {worst:g} times the balanced share ({worst * value / rho / 2**30:.3g} GiB "
                "here); --moe-imbalance states the share assumed") if moe.capacity_factor is None else (  # fmt: skip
                f"capacity factor {moe.capacity_factor:g}: each expert takes at most that share, so ρ <= {moe.capacity_factor:g}")
    return Derivation(
        key="moe_dispatch_working_set",
        label="MoE token exchange buffers during one MoE layer (send and receive, one micro-batch)",
        symbol="A_a2a",
        latex_symbol=r"A_{\mathrm{a2a}}",
        formula="2 × $rho × $t_e × $T × $k × $h × $e",
        formula_latex=r"2 \times $rho \times $t_e \times $T \times $k \times $h \times $e",
        inputs=inputs,
        value=value,
        unit="B",
        source=MEGATRON_A2A,
        assumptions=(dropless, "transient: one MoE layer at a time (forward: send buffer beside the received copies; backward: the "
                     "gradients of both), freed before the next layer; the received copies themselves are counted once in the layer's "
                     "saved tensors (permuted token copies)"),
    )


def fp8_linear_weights_per_rank(model: TransformerModel, layout: Layout, moe_layer: bool = False) -> int:
    """Weights of one layer's linears on one GPU that Transformer Engine runs in FP8: attention's
    projections (standard or latent, norms left out) split by tp, the dense MLP split by tp, or in an
    MoE layer the shared experts split by tp and the rank's experts / ep routed experts split etp
    ways (TE's GroupedLinear caches its FP8 weights as Linear does). The router stays in 16 or 32
    bits (Megatron-LM's Router is a plain torch parameter, moe_router_dtype)."""
    h, matrices, tp = model.hidden, (3 if model.mlp.gated else 2), layout.tp
    if model.mla is not None:
        mla = model.mla
        attention = model.attention_params_per_layer - mla.kv_lora_rank - mla.q_lora_rank  # less the latent norms
    else:
        attention = h * model.q_width + 2 * h * model.kv_width + model.q_width * h
    if not moe_layer or model.moe is None:
        return (attention + matrices * h * model.ffn_hidden) // tp
    moe = model.moe
    shared = moe.shared_experts * matrices * h * moe.shared_width
    routed = moe.experts // layout.ep * matrices * h * moe.expert_ffn_hidden // layout.expert_tp
    return (attention + shared) // tp + routed
