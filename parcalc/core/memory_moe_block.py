"""The Mixture-of-Experts block of transformers' MoE decoders in the step walk (parcalc.core.memory_timeline).

MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock: the router, then the experts as transformers runs them by default
(experts_implementation "grouped_mm"); Qwen2MoeSparseMoeBlock adds its shared expert under a sigmoid gate. Forward
and backward, tensor by tensor, in the order PyTorch's autograd engine runs them; the sources are
memory_timeline.HF_SOURCES['moe'], ['grouped_mm'] and ['shared_expert'].
"""

from __future__ import annotations

from parcalc.core.memory_walk import StepShapes, Walk, cast_back, grad_of_weight, linear, linear_backward


def gated_shared_forward(walk: Walk, x: StepShapes, k: str, inp: str, shared: str, experts_out: str, kind: str, recomputing: bool) -> str:
    """Qwen2MoeSparseMoeBlock after its experts: sigmoid(shared_expert_gate(x)) * shared_expert(x), added to the experts'
    output (HF_SOURCES['shared_expert']); the product saves the sigmoid and the shared expert's output, the last tensors
    the block saves, so a recomputation stops there."""
    T, h, c = x.T, x.h, x.c
    gate = linear(walk, x, f"{k}.sg", inp, x.w, h, 1, kind == "activations", "shared_expert_gate")
    walk.alloc(f"{k}.sig", T * c, kind, "shared expert gate sigmoid (saved by itself and the product)")
    walk.free(gate)
    walk.relabel(shared, "shared expert down_proj output (saved by the gating product)", kind)
    if recomputing:
        walk.free(experts_out)
        return ""
    walk.alloc(f"{k}.gated", T * h * c, "temporaries", "gated shared expert output")
    walk.alloc(f"{k}.block_out", T * h * c, "temporaries", "MoE block output (experts + gated shared expert)")
    walk.free(f"{k}.gated", experts_out)
    return f"{k}.block_out"


def experts_forward(walk: Walk, x: StepShapes, k: str, inp: str, kind: str, recomputing: bool) -> str:
    """A sparse MoE block with transformers' grouped_mm experts (HF_SOURCES['moe']) on bf16 weights; returns its output's
    key. S = tokens x top_k (token, expert) pairs; what autograd saves is `kind`, the rest temporaries."""
    T, S, h, e, fe, c, r = x.T, x.S, x.h, x.experts, x.fe, x.c, x.routing_bytes
    out_bytes = max(c, r)  # the weighted expert outputs: bf16 times the routing weights' dtype
    linear(walk, x, f"{k}.router", inp, x.w, h, e, kind == "activations", "router")  # router_logits, kept until the block returns
    walk.alloc(f"{k}.logits32", T * e * 4, "temporaries", "router_logits.float()")
    walk.alloc(f"{k}.probs", T * e * 4, kind, "router softmax (fp32, saved)")
    walk.free(f"{k}.logits32")
    walk.alloc(f"{k}.topv", T * x.top_k * 4, "temporaries", "top-k routing weights (fp32)")
    walk.alloc(f"{k}.topi", T * x.top_k * 8, kind, "top-k expert indices (int64, saved by topk)")
    if x.renormalised:
        walk.alloc(f"{k}.topsum", T * 4, kind, "sum of the top-k weights (saved by the division)")
        walk.alloc(f"{k}.topv0", T * x.top_k * 4, kind, "top-k weights before the in-place division (saved by it)")
    if r != 4:  # Qwen3MoeTopKRouter: .to(router_logits.dtype)
        walk.alloc(f"{k}.topv_c", T * x.top_k * r, "temporaries", "top-k routing weights (logits' dtype)")
        walk.free(f"{k}.topv")
        walk.rename(f"{k}.topv_c", f"{k}.topv")
    walk.alloc(f"{k}.ids_sorted", S * 8, "temporaries", "expert ids sorted (int64)")
    walk.alloc(f"{k}.perm", S * 8, kind, "sort permutation (int64, saved by the weights' gather)")
    walk.alloc(f"{k}.rows", S * 8, kind, "token of each pair (perm // top_k, int64, saved by the gather)")
    walk.alloc(f"{k}.gathered", S * h * c, kind, "experts' input rows (hidden_states gathered, saved by grouped_mm)")
    walk.alloc(f"{k}.w_sorted", S * r, kind, "routing weights in expert order (saved by the weighting)")
    walk.transient(f"{k}.histc_in", S * 4, "temporaries", "histc input")
    walk.alloc(f"{k}.counts", e * 4, "temporaries", "tokens per expert")
    walk.alloc(f"{k}.offsets", e * 4, "temporaries", "grouped_mm offsets (int32)")
    walk.alloc(f"{k}.gate_up", S * 2 * fe * c, kind, "experts' gate_up output (saved by act_fn and the product)")
    walk.alloc(f"{k}.eact", S * fe * c, kind, "experts' act_fn(gate)")
    walk.alloc(f"{k}.eprod", S * fe * c, kind, "experts' act * up (down's input)")
    walk.alloc(f"{k}.edown", S * h * c, kind, "experts' down output (saved by the weighting)")
    walk.alloc(f"{k}.weighted", S * h * out_bytes, "temporaries", "weighted expert outputs")
    walk.alloc(f"{k}.inv_perm", S * 8, kind, "inverse permutation (int64, saved by the reordering)")
    walk.transient(f"{k}.arange", S * 8, "temporaries", "arange for the inverse permutation")
    scratch = (f"{k}.weighted", f"{k}.router.out", f"{k}.topv", f"{k}.ids_sorted", f"{k}.counts", f"{k}.offsets")
    if recomputing:  # the reordering saves inv_perm, the last tensor saved: the recomputation stops before it runs
        walk.free(*scratch)
        return ""
    walk.alloc(f"{k}.reordered", S * h * out_bytes, "temporaries", "weighted outputs in token order")
    walk.free(f"{k}.weighted")
    walk.alloc(f"{k}.summed", T * h * out_bytes, "temporaries", "sum over the top k")
    walk.free(f"{k}.reordered")
    if out_bytes != c:
        walk.alloc(f"{k}.moe_out", T * h * c, "temporaries", "MoE block output (.to(hidden_states.dtype))")
        walk.free(f"{k}.summed")
    else:  # .to() of a tensor already in that dtype returns it
        walk.rename(f"{k}.summed", f"{k}.moe_out", "MoE block output")
    walk.free(*scratch)
    return f"{k}.moe_out"


def gated_shared_backward(walk: Walk, x: StepShapes, k: str, g_out: str) -> str:
    """The gating product's backward, the block's newest node (HF_SOURCES['shared_expert']): the sigmoid's gradient (the
    product with the shared output, summed over h), the shared output's (the product with the sigmoid, kept until the
    shared expert's own backward runs, after the experts' and the router's), then the sigmoid and shared_expert_gate;
    returns the shared output's gradient."""
    T, h, c = x.T, x.h, x.c
    walk.alloc(f"{k}.g_sig_full", T * h * c, "temporaries", "gating product's gradient for the sigmoid, before its sum over h")
    walk.alloc(f"{k}.g_sig", T * c, "temporaries", "sigmoid output's gradient")
    walk.free(f"{k}.g_sig_full")
    walk.alloc(f"{k}.g_shared", T * h * c, "temporaries", "shared expert output's gradient (the product with the sigmoid)")
    walk.free(f"{k}.sig", f"{k}.se.down.out")
    walk.alloc(f"{k}.g_sg", T * c, "temporaries", "shared_expert_gate output's gradient (sigmoid backward)")
    walk.free(f"{k}.g_sig")
    linear_backward(walk, x, f"{k}.sg", f"{k}.g_sg", h, 1, "", f"{k}.g_y2c")
    cast_back(walk, x, f"{k}.g_y2c", f"{k}.g_y2", h)
    return f"{k}.g_shared"


def experts_backward(walk: Walk, x: StepShapes, k: str, g_out: str, keep_input: bool = False) -> None:
    """The MoE block's backward in the order autograd's engine runs it (the latest-created node first): the reordering,
    the weighting, the experts' grouped matmuls, the two gathers, then the router; into the norm's gradient g_y2.
    keep_input: the norm's output stays for a later reader (Qwen2-MoE's shared expert)."""
    T, S, h, e, fe, c, r = x.T, x.S, x.h, x.experts, x.fe, x.c, x.routing_bytes
    out_bytes = max(c, r)
    walk.rename(g_out, f"{k}.g_x1")  # x2 = x1 + moe: both get the same gradient (bf16: no cast)
    walk.free(f"{k}.x2")
    if out_bytes != c:
        walk.alloc(f"{k}.g_summed", T * h * out_bytes, "temporaries", "MoE output gradient (the .to's backward)")
    walk.alloc(f"{k}.g_weighted", S * h * out_bytes, "temporaries", "weighted outputs' gradient (the reordering's index backward)")
    walk.free(f"{k}.g_summed", f"{k}.inv_perm")
    if out_bytes != c:
        walk.transient(f"{k}.g_edown32", S * h * out_bytes, "temporaries", "down output gradient (the product's dtype)")
    walk.alloc(f"{k}.g_edown", S * h * c, "temporaries", "experts' down output gradient")
    walk.alloc(f"{k}.g_wfull", S * h * out_bytes, "temporaries", "routing-weight gradient before its sum over h")
    walk.alloc(f"{k}.g_wsorted", S * r, "temporaries", "routing-weight gradient")
    walk.free(f"{k}.g_wfull", f"{k}.g_weighted", f"{k}.edown", f"{k}.w_sorted")
    walk.alloc(f"{k}.g_eprod", S * fe * c, "temporaries", "experts' down input gradient")
    grad_of_weight(walk, x, f"{k}.down", e * fe, h)
    walk.free(f"{k}.g_edown", f"{k}.eprod")
    walk.alloc(f"{k}.g_eact", S * fe * c, "temporaries", "experts' act_fn gradient")
    walk.alloc(f"{k}.g_eup", S * fe * c, "temporaries", "experts' up gradient")
    walk.free(f"{k}.g_eprod", f"{k}.eact")
    walk.alloc(f"{k}.g_egate", S * fe * c, "temporaries", "experts' gate gradient (silu backward)")
    walk.free(f"{k}.g_eact", f"{k}.gate_up")
    walk.alloc(f"{k}.g_gate_up", S * 2 * fe * c, "temporaries", "experts' gate_up gradient (chunk backward)")
    walk.free(f"{k}.g_egate", f"{k}.g_eup")
    walk.alloc(f"{k}.g_gathered", S * h * c, "temporaries", "experts' input gradient")
    grad_of_weight(walk, x, f"{k}.gate_up", h, e * 2 * fe)
    walk.free(f"{k}.g_gate_up", f"{k}.gathered")
    walk.alloc(f"{k}.g_wflat", S * r, "temporaries", "routing weights' gradient in token order")
    walk.free(f"{k}.g_wsorted", f"{k}.perm")
    walk.alloc(f"{k}.g_y2c", T * h * c, "temporaries", "gathered rows' gradient summed per token (index backward)")
    walk.free(f"{k}.g_gathered", f"{k}.rows")
    if r != 4:  # the cast's backward: the gradient back in fp32
        walk.alloc(f"{k}.g_wflat32", T * x.top_k * 4, "temporaries", "routing weights' gradient (fp32)")
        walk.free(f"{k}.g_wflat")
        walk.rename(f"{k}.g_wflat32", f"{k}.g_wflat")
    if x.renormalised:
        walk.alloc(f"{k}.g_topv", T * x.top_k * 4, "temporaries", "top-k weights' gradient (division backward)")
        walk.transient(f"{k}.g_topsum_full", T * x.top_k * 4, "temporaries", "division backward for the sum")
        walk.free(f"{k}.g_wflat", f"{k}.topv0", f"{k}.topsum")
    else:
        walk.rename(f"{k}.g_wflat", f"{k}.g_topv")
    walk.alloc(f"{k}.g_probs", T * e * 4, "temporaries", "router probabilities' gradient (topk backward)")
    walk.free(f"{k}.g_topv", f"{k}.topi")
    walk.alloc(f"{k}.g_logits32", T * e * 4, "temporaries", "router logits' gradient (softmax backward)")
    walk.free(f"{k}.g_probs", f"{k}.probs")
    walk.alloc(f"{k}.g_logits", T * e * c, "temporaries", "router logits' gradient (.float()'s backward)")
    walk.free(f"{k}.g_logits32")
    linear_backward(walk, x, f"{k}.router", f"{k}.g_logits", h, e, "" if keep_input else f"{k}.n2.out", f"{k}.g_y2c")
    cast_back(walk, x, f"{k}.g_y2c", f"{k}.g_y2", h)
