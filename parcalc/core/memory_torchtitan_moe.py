"""torchtitan's MoE block in the FSDP2 step walk: the feed-forward of a block with routed experts, ep = 1.

torchtitan's MoE (TT_MOE_SOURCES, pytorch/torchtitan at b5bcd76, its MoE code shared by qwen3, deepseek_v3, llama4-style
decoders) replaces the block's FeedForward; parcalc.core.memory_torchtitan walks the rest of the block. Tensor by tensor
as autograd saves them:

- the router (TokenChoiceTopKRouter): the gate in fp32 (autocast(float32) casts the input, T x h, and the weight,
  e x h, both saved by the mm), the fp32 scores (softmax or sigmoid: the output saved), `scores + expert_bias_E` for
  the choice (live until the router returns), topk's ids (int64, saved by the gather), the gathered top-k scores
  (saved by route_norm's division with the denominator), times route_scale;
- the one-hot routing map (bool, T x e) and the tokens per expert; the expert_bias_E and tokens_per_expert_E buffers;
- LocalTokenDispatcher: argsort of the N = T x top_k expert ids (saved by the scores' gather), the scores in expert order
  (saved by combine's product), the token of each row (saved by the rows' gather and by the scatter_add), the rows
  gathered (N x h, saved by the grouped matmuls);
- GroupedExperts: silu(x w1) * (x w3), then w2, through torch._grouped_mm (each saving its input and the offsets), as
  the dense FeedForward saves its tensors, over N rows;
- combine: zeros_like(x), the expert outputs cast to fp32 (saved by the product with the scores), the product, its bf16
  cast, the deterministic scatter_add custom op (saves the token index only);
- the shared experts, a FeedForward over all T tokens, added to the routed output.

The backward runs in the order autograd's engine takes the nodes (the latest created first): the shared experts', the
scatter_add's gather of the gradient (N x h), the casts and the product (the fp32 gradients, N x h x 4, beside the
output's), the grouped matmuls (weight gradients e x ... whole, bf16), the rows' index backward (T x h zeros indexed into),
then the router's chain down to the fp32 gate's input gradient cast back to bf16.

Ground truth: FSDPMemTracker over this code copied into tests/ground_truth/tiny_torchtitan_moe.py
(test_torch_memory_torchtitan_moe.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.core.memory_walk import StepShapes, Walk, add_into, grad_of_weight

if TYPE_CHECKING:
    from parcalc.core.memory_block_walk import BlockWalk

TITAN_MOE = "pytorch/torchtitan at b5bcd76"
TT_MOE_SOURCES = {
    "moe": (f"{TITAN_MOE} torchtitan/models/common/moe.py: TokenChoiceTopKRouter.forward (gate under torch.autocast(float32), "
            "sigmoid / softmax, scores_TE + expert_bias_E, topk(sorted=False), scores_TE.gather, route_norm's "
            "sum + 1e-20 and division, * route_scale), MoE.forward (zeros_like(scores_TE, bool).scatter_, sum(dim=0), "
            "tokens_per_expert_E.add_ under no_grad, routed_experts, shared_experts, out + shared), MoE.__init__ "
            "(expert_bias_E and tokens_per_expert_E fp32 buffers of num_experts; load_balance_coeff 1e-3 by default), "
            "GroupedExperts.forward (cumsum offsets int32; silu(_grouped_mm(x, w1^T)) * _grouped_mm(x, w3^T); "
            "_grouped_mm(h, w2^T).type_as(x))"),
    "dispatch": (f"{TITAN_MOE} torchtitan/models/common/token_dispatcher.py: LocalTokenDispatcher._local_reorder (argsort(stable), "
                 "scores.view(-1)[order], order // top_k, x_TD[rows]), combine (zeros_like(x_TD), "
                 "(out.to(float32) * scores.reshape(-1, 1)).to(out.dtype), deterministic_scatter_add); "
                 "torchtitan/ops/scatter_add.py (custom op: out.scatter_add; its backward: grad_output and "
                 "gather(grad_output, 0, index), setup_context saving the index)"),
    "fsdp": (f"{TITAN_MOE} torchtitan/distributed/fsdp.py apply_fsdp_to_decoder: at ep = 1 a MoE block is one fully_shard unit, "
             "its experts on Shard(0) when the shard group has no more ranks than experts (Shard(1) beyond)"),
    "autograd": ("pytorch/pytorch v2.13.0: GroupedMmBackward0 saves self, mat2 and offs (torch/include/torch/csrc/autograd/"
                 "generated/Functions.h) and gives the weight's gradient contiguous (w.grad strides (F x D, D, 1), checked on "
                 "the CPU); IndexBackward0 and GatherBackward0 save the index only; SoftmaxBackward0 and SigmoidBackward0 the "
                 "result; the engine runs the ready node of the highest sequence number first"),
}


def moe_gaps(model_moe: object) -> list[str]:
    """What of torchtitan's MoE the walk does not follow, for a model's MixtureOfExperts."""
    from parcalc.core.model import MixtureOfExperts

    moe = model_moe
    if not isinstance(moe, MixtureOfExperts):
        return []
    return [what for what, gap in (("a gated shared expert (torchtitan's shared experts are a plain FeedForward)", moe.shared_expert_gate),
                                   ("expert capacity (token dropping)", moe.capacity_factor is not None)) if gap]  # fmt: skip


def moe_buffers(walk: Walk, experts: int, layer: str) -> None:
    """A MoE block's buffers, unsharded by FSDP2: expert_bias_E and tokens_per_expert_E, fp32 (TT_MOE_SOURCES['moe'])."""
    walk.alloc(f"{layer}.expert_bias", experts * 4, "buffers", "MoE expert_bias_E buffer (fp32)")
    walk.alloc(f"{layer}.tokens_per_expert", experts * 4, "buffers", "MoE tokens_per_expert_E buffer (fp32)")


def moe_forward(b: BlockWalk, x: StepShapes, y2: str, recomputing: bool) -> str:
    """MoE.forward on the ffn_norm's output `y2`; returns the output's key ("" when the recomputation stops early, at the
    scatter_add's saved index, the last tensor the block saves)."""
    T, h, e, K, fe, c = x.T, x.h, x.experts, x.top_k, x.fe, x.c
    N = T * K
    # TokenChoiceTopKRouter: the gate in fp32
    x32 = b.alloc("r.x32", T * h * 4, "router input cast to fp32 (saved by the gate)", True)
    w32 = b.alloc("r.w32", e * h * 4, "router weight cast to fp32 (saved by the gate)", True)
    logits = b.alloc("r.logits", T * e * 4, "router logits (fp32)", False)
    scores = b.alloc("r.scores", T * e * 4, "router scores (fp32, saved by softmax / sigmoid)", True)
    b.drop(logits)
    choice = b.alloc("r.choice", T * e * 4, "router scores + expert_bias_E (the choice's)", False)
    values = b.alloc("r.topv", T * K * 4, "topk values (unused)", False)
    ids = b.alloc("r.ids", T * K * 8, "top-k expert ids (int64, saved by the gather)", True)
    b.drop(values)
    top = gathered = den = b.alloc("r.top", T * K * 4, "top-k scores (gathered; saved by route_norm's division)", x.renormalised)
    if x.renormalised:  # route_norm: topk_scores / (topk_scores.sum(-1, keepdim=True) + 1e-20)
        total = b.alloc("r.sum", T * 4, "top-k scores' sum", False)
        den = b.alloc("r.den", T * 4, "route_norm's denominator (saved by the division)", True)
        b.drop(total)
        divided = b.alloc("r.div", T * K * 4, "top-k scores normalised", False)
        b.drop(top)
        top = divided
    scaled = b.alloc("r.scaled", T * K * 4, "routing scores (times route_scale)", False)
    b.drop(top, choice)  # the router returns
    # MoE.forward: the routing map and the tokens per expert
    routing_map = b.alloc("rmap", T * e, "one-hot routing map (bool)", False)
    counts = b.alloc("counts", e * 8, "tokens per expert (int64)", False)
    # LocalTokenDispatcher._local_reorder
    b.walk.transient(f"{b.k}.sort_values", N * 8, "temporaries", "argsort's sorted values")
    order = b.alloc("order", N * 8, "argsort of the expert ids (int64, saved by the scores' gather)", True)
    sorted_scores = b.alloc("s.sorted", N * 4, "routing scores in expert order (saved by combine's product)", True)
    rows = b.alloc("rows", N * 8, "token of each routed row (int64, saved by the gather and the scatter_add)", True)
    b.drop(order)
    routed = b.alloc("routed", N * h * c, "experts' input rows (saved by the grouped matmuls)", True)
    # GroupedExperts
    offsets = b.alloc("offs", e * 4, "grouped_mm offsets (int32, saved by the grouped matmuls)", True)
    g1 = b.alloc("e.w1", N * fe * c, "experts' w1 output (saved by silu)", True)
    act = b.alloc("e.act", N * fe * c, "experts' silu(w1) (saved by the product)", True)
    g3 = b.alloc("e.w3", N * fe * c, "experts' w3 output (saved by the product)", True)
    prod = b.alloc("e.prod", N * fe * c, "experts' silu(w1) * w3 (w2's input)", True)
    b.drop(g1, act, g3)
    out = b.alloc("e.out", N * h * c, "experts' w2 output", False)
    b.drop(offsets, prod)  # GroupedExperts returns
    # combine
    zeros = b.alloc("zeros", T * h * c, "combine's zeros_like(x)", False)
    out32 = b.alloc("e.out32", N * h * 4, "experts' output in fp32 (saved by the weighting)", True)
    product = b.alloc("weighted32", N * h * 4, "weighted expert outputs (fp32)", False)
    weighted = b.alloc("weighted", N * h * c, "weighted expert outputs", False)
    b.drop(product)
    summed = b.alloc("scattered", T * h * c, "routed output (scatter_add)", False)
    b.save(rows)  # its setup_context saves the index, the last tensor the block saves without shared experts
    b.drop(zeros, weighted, out)  # combine and RoutedExperts.forward return
    unsaved = (routing_map, counts, scaled, y2, ids, scores, x32, w32, gathered, den, sorted_scores, routed, out32, rows)
    if x.fs:  # the shared experts' FeedForward on every token, its w2's input the last tensor the block saves
        b.save(y2)
        w1 = b.alloc("se.w1", T * x.fs * c, "shared experts' w1 output (saved by silu)", True)
        silu = b.alloc("se.act", T * x.fs * c, "shared experts' silu(w1) (saved by the product)", True)
        w3 = b.alloc("se.w3", T * x.fs * c, "shared experts' w3 output (saved by the product)", True)
        shared_in = b.alloc("se.prod", T * x.fs * c, "shared experts' silu(w1) * w3 (w2's input)", True)
        b.drop(w1, silu, w3)
        if recomputing:
            b.drop(summed, shared_in, *unsaved)
            return ""
        shared = b.alloc("se.out", T * h * c, "shared experts' output", False)
        b.drop(shared_in)
        total = b.alloc("moe.out", T * h * c, "routed + shared experts' output", False)
        b.drop(summed, shared)
        summed = total
    elif recomputing:  # early stop: the unwinding frees what is not saved
        b.drop(summed, *unsaved)
        return ""
    b.drop(*unsaved)
    b.walk.relabel(summed, "MoE output")
    return summed


def shared_backward(walk: Walk, x: StepShapes, k: str, into: str) -> None:
    """The shared experts' FeedForward backward, the MoE's newest nodes: w2, the product, w3, silu, w1, their input
    gradients into `into`; the ffn_norm output they saved goes with w1's node."""
    T, h, fs, c = x.T, x.h, x.fs, x.c
    grad_of_weight(walk, x, f"{k}.sw2", fs, h)
    walk.alloc(f"{k}.g_sprod", T * fs * c, "temporaries", "shared experts' w2 input gradient")
    walk.free(f"{k}.se.prod")
    walk.alloc(f"{k}.g_sact", T * fs * c, "temporaries", "shared experts' product backward: silu's gradient")
    walk.alloc(f"{k}.g_sw3", T * fs * c, "temporaries", "shared experts' product backward: w3's gradient")
    walk.free(f"{k}.g_sprod", f"{k}.se.act", f"{k}.se.w3")
    walk.alloc(f"{k}.g_sx3", T * h * c, "temporaries", "shared experts' w3 input gradient")
    grad_of_weight(walk, x, f"{k}.sw3", h, fs)
    walk.free(f"{k}.g_sw3")
    add_into(walk, f"{k}.g_sx3", into)
    walk.alloc(f"{k}.g_sw1", T * fs * c, "temporaries", "shared experts' silu backward")
    walk.free(f"{k}.g_sact", f"{k}.se.w1")
    walk.alloc(f"{k}.g_sx1", T * h * c, "temporaries", "shared experts' w1 input gradient")
    grad_of_weight(walk, x, f"{k}.sw1", h, fs)
    walk.free(f"{k}.g_sw1", f"{k}.n2.out")
    add_into(walk, f"{k}.g_sx1", into)


def moe_backward(walk: Walk, x: StepShapes, k: str, g_out: str, into: str) -> None:
    """The MoE's backward from its output's gradient `g_out` (the block output's: kept), into the ffn_norm output's
    gradient `into`, in the engine's order (module docstring)."""
    T, h, e, K, fe, c = x.T, x.h, x.experts, x.top_k, x.fe, x.c
    N = T * K
    if x.fs:  # out + shared: both get the output's gradient
        shared_backward(walk, x, k, into)
    # the scatter_add's backward: the gradient gathered back to the rows (out's gradient is dropped: zeros_like needs none)
    walk.alloc(f"{k}.g_src", N * h * c, "temporaries", "scatter_add backward: the gradient gathered to the rows")
    # .to(bf16)'s backward, then the product's: the outputs' gradient (x scores), the scores' (x outputs, summed over h)
    walk.alloc(f"{k}.g_w32", N * h * 4, "temporaries", "weighted outputs' gradient (fp32)")
    walk.free(f"{k}.g_src")
    walk.alloc(f"{k}.g_out32", N * h * 4, "temporaries", "experts' output gradient (fp32, times the scores)")
    walk.alloc(f"{k}.g_sfull", N * h * 4, "temporaries", "routing scores' gradient before its sum over h")
    walk.alloc(f"{k}.g_s", N * 4, "temporaries", "routing scores' gradient (expert order)")
    walk.free(f"{k}.g_sfull", f"{k}.g_w32", f"{k}.e.out32", f"{k}.s.sorted")
    # .to(fp32)'s backward, then the grouped matmuls as the dense FeedForward's backward runs its linears
    walk.alloc(f"{k}.g_eout", N * h * c, "temporaries", "experts' output gradient")
    walk.free(f"{k}.g_out32")
    grad_of_weight(walk, x, f"{k}.w2", e * fe, h)
    walk.alloc(f"{k}.g_prod", N * fe * c, "temporaries", "experts' w2 input gradient")
    walk.free(f"{k}.g_eout", f"{k}.e.prod")
    walk.alloc(f"{k}.g_act", N * fe * c, "temporaries", "experts' product backward: silu's gradient")
    walk.alloc(f"{k}.g_w3", N * fe * c, "temporaries", "experts' product backward: w3's gradient")
    walk.free(f"{k}.g_prod", f"{k}.e.act", f"{k}.e.w3")
    grad_of_weight(walk, x, f"{k}.w3", h, e * fe)
    walk.alloc(f"{k}.g_routed", N * h * c, "temporaries", "experts' input rows' gradient")
    walk.free(f"{k}.g_w3")
    walk.alloc(f"{k}.g_w1", N * fe * c, "temporaries", "experts' silu backward")
    walk.free(f"{k}.g_act", f"{k}.e.w1")
    grad_of_weight(walk, x, f"{k}.w1", h, e * fe)
    walk.alloc(f"{k}.g_routed1", N * h * c, "temporaries", "experts' input rows' gradient (w1's)")
    walk.free(f"{k}.g_w1", f"{k}.routed", f"{k}.offs")
    add_into(walk, f"{k}.g_routed1", f"{k}.g_routed")
    # the rows' gather: zeros of x's shape indexed into (index_put_ with accumulate)
    walk.alloc(f"{k}.g_x", T * h * c, "temporaries", "MoE input gradient (the rows' index backward)")
    walk.free(f"{k}.g_routed", f"{k}.rows")
    add_into(walk, f"{k}.g_x", into)
    # the router's chain: the scores' gather back to token order, route_scale, route_norm, the gather, the score function
    walk.alloc(f"{k}.g_top", T * K * 4, "temporaries", "top-k scores' gradient (the expert-order index backward)")
    walk.free(f"{k}.g_s", f"{k}.order")
    walk.alloc(f"{k}.g_scaled", T * K * 4, "temporaries", "route_scale's backward")
    walk.free(f"{k}.g_top")
    if x.renormalised:  # the division's two gradients; the sum's comes back expanded (a view), added in place
        walk.alloc(f"{k}.g_num", T * K * 4, "temporaries", "route_norm backward: the numerator's gradient")
        walk.transient(f"{k}.g_den_full", T * K * 4, "temporaries", "route_norm backward: the denominator's, before its sum")
        walk.alloc(f"{k}.g_den", T * 4, "temporaries", "route_norm backward: the denominator's gradient")
        walk.free(f"{k}.g_scaled", f"{k}.r.den", f"{k}.r.top")
        walk.free(f"{k}.g_den")
        walk.rename(f"{k}.g_num", f"{k}.g_scaled")
    walk.alloc(f"{k}.g_scores", T * e * 4, "temporaries", "router scores' gradient (the gather's backward)")
    walk.free(f"{k}.g_scaled", f"{k}.r.ids")
    walk.alloc(f"{k}.g_logits", T * e * 4, "temporaries", "router logits' gradient (softmax / sigmoid backward)")
    walk.free(f"{k}.g_scores", f"{k}.r.scores")
    walk.alloc(f"{k}.g_x32", T * h * 4, "temporaries", "router input gradient (fp32)")
    walk.alloc(f"{k}.g_gate32", e * h * 4, "temporaries", "router weight gradient (fp32)")
    walk.free(f"{k}.g_logits", f"{k}.r.x32", f"{k}.r.w32")
    grad_of_weight(walk, x, f"{k}.router", h, e)  # the weight cast's backward (created after the input's: first)
    walk.free(f"{k}.g_gate32")
    walk.alloc(f"{k}.g_xr", T * h * c, "temporaries", "router input gradient (the cast's backward)")
    walk.free(f"{k}.g_x32")
    add_into(walk, f"{k}.g_xr", into)
