"""torchtitan's Llama step under tensor parallelism with sequence parallel and loss parallel, tensor by tensor.

parallelize_llama.py's apply_tp (memory_torchtitan.TT_SOURCES['tp']) leaves each of the `tp` ranks of a tensor-parallel
group holding:
- the residual stream, the norms' inputs and everything the norms save, sharded over the sequence (T / tp tokens): the
  embedding's output is reduce-scattered to Shard(1), each RowwiseParallel output (wo, w2) likewise;
- before attention and the MLP, the norm's output all-gathered to the whole sequence (PrepareModuleInput: Shard(1) ->
  Replicate), the one input the column-parallel matmuls save (T x hidden, bf16); the norm's own output stays alive, held
  by the call's argument, until the module returns;
- the heads and the MLP's width split tp ways (q, k, v, SDPA, RoPE, w1, w3 and their product on heads / tp and ffn / tp
  over the whole sequence), so repeat_kv copies only when a rank has more than one KV head;
- the row-parallel outputs (wo, w2) as a whole-sequence partial sum, its chunks concatenated (a copy), reduce-scattered;
- the logits sharded over the vocabulary: the output projection's input all-gathered (saved), pred T x V / tp, and
  loss_parallel's log-softmax and nll_loss (TT_SOURCES['loss_parallel']): three fp32 logits-sized tensors in the forward
  (the fp32 logits, their shifted copy, its exp) beside pred, four in the backward (the saved log-softmax, the zeros the
  target scatter writes into, exp, their sum, then the product);
- the embedding's gradient of the whole vocabulary, replicated (TP_SOURCES['embedding_backward']);
- in the backward, each row-parallel output's gradient all-gathered, each replicated input's partial gradients summed out
  of place (DTensors: TT_SOURCES['tp_accumulate']) and reduce-scattered back to the sequence shard.
The all-gather of a sequence shard is a view at micro-batch 1 and a copy (torch.cat of the chunks) above it; the
reduce-scatter always concatenates first (TT_SOURCES['tp_collectives']).

Checkpointing: none and full (checkpoint_wrapper; the recomputation stops after w2's input, as memory_torchtitan's).
Ground truth: FSDPMemTracker over torchtitan's code under apply_tp and apply_fsdp on a 2-D mesh of fake ranks
(tests/ground_truth/tiny_torchtitan_tp.py, test_torch_memory_torchtitan_tp.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from parcalc.core import memory_torchao_float8 as float8
from parcalc.core.memory_block_walk import BlockWalk
from parcalc.core.memory_torchtitan import add_gradient, norm_backward, repeat_kv_copies, rope_and_attention
from parcalc.core.memory_walk import StepHooks, StepShapes, Walk, grad_of_weight, norm_forward
from parcalc.core.model import TransformerModel

TP_POLICIES = ("none", "full")
TP_SOURCES = {
    "embedding_backward": ("pytorch/pytorch v2.13.0 torch/distributed/tensor/_ops/_embedding_ops.py:66-97 "
                           "embedding_dense_backward_strategy: colwise (weight gradient Shard(1)), batch-sharded and partial "
                           "strategies only, none for a row-sharded (Shard(0)) weight, so RowwiseParallel's embedding gets its "
                           "gradient replicated; torch/distributed/fsdp/_fully_shard/_fsdp_param.py:802-813 "
                           "to_accumulated_grad_if_needed (.to(reduce_dtype) of that gradient) and 934-967 _get_grad_inner_tensor "
                           "(redistributed to the parameter's placements when reduced)"),
}


def _local(x: StepShapes, tp: int) -> StepShapes:
    """A rank's heads, MLP width and vocabulary over the whole sequence."""
    return replace(x, q=x.q // tp, kv=x.kv // tp, f=x.f // tp, heads=x.heads // tp, V=x.V // tp)


def _sequence_shard(x: StepShapes, tp: int) -> StepShapes:
    """The residual stream's shard: T / tp tokens of the whole width."""
    return replace(x, T=x.T / tp)


def all_gather(walk: Walk, x: StepShapes, key: str, kind: str, what: str, element_bytes: float | None = None) -> str:
    """A sequence shard gathered to the whole sequence (T x hidden): a view of the collective's output at micro-batch 1,
    else a torch.cat copy of its chunks (TT_SOURCES['tp_collectives']). `element_bytes`: 1 for torchao's FP8 all-gathers
    (float8.AO_TP_SOURCES), else x.c."""
    size = x.T * x.h * (x.c if element_bytes is None else element_bytes)
    if x.b == 1:
        walk.alloc(key, size, kind, what)
        return key
    walk.alloc(f"{key}.raw", size, "temporaries", "all-gather output (gathered on dim 0)")
    walk.alloc(key, size, kind, what)
    walk.free(f"{key}.raw")
    return key


def reduce_scatter(walk: Walk, x: StepShapes, tp: int, partial: str, key: str, kind: str, what: str) -> str:
    """A whole-sequence partial sum reduce-scattered to this rank's sequence shard: the chunks concatenated (a copy), the
    collective's output; the copy and the partial sum go (TT_SOURCES['tp_collectives'])."""
    walk.alloc(f"{key}.cat", x.T * x.h * x.c, "temporaries", "reduce-scatter input (chunks concatenated)")
    walk.alloc(key, x.T / tp * x.h * x.c, kind, what)
    walk.free(f"{key}.cat", partial)
    return key


def _gathered_input(walk: Walk, x: StepShapes, tp: int, key: str, norm_out: str, saving: bool, what: str) -> str:
    """The norm's sequence-shard output all-gathered for the column-parallel linears (PrepareModuleInput); with Float8 linears
    PrepareFloat8ModuleInput's: cast to FP8 on the shard, all-gathered in FP8, the shard's FP8 copy gone
    (float8.AO_TP_SOURCES['prepare_input'])."""
    kind = "activations" if saving else "temporaries"
    if not x.float8:
        return all_gather(walk, x, key, kind, what)
    shard = float8.cast(walk, f"{key}.f8", x.T / tp * x.h, x.c)
    gathered = all_gather(walk, x, key, kind, what + ", FP8", element_bytes=1)
    walk.free(shard)
    return gathered


def _linear(b: BlockWalk, name: str, d_in: int, d_out: int, mm: Callable[[], str]) -> str:
    """A sharded linear's mm (`mm` allocates its output); a Float8Linear's weight cast before it, freed after
    (float8.weight_cast: the input comes cast already)."""
    casts = float8.weight_cast(b.walk, b.x, f"{b.k}.{name}", d_in, d_out) if b.x.float8 else ()
    out = mm()
    b.walk.free(*casts)
    return out


def _rowwise_input(b: BlockWalk, name: str, inp: str, elements: float) -> str:
    """Float8RowwiseParallel's cast of wo's or w2's input before the linear (float8.AO_TP_SOURCES['rowwise']): the FP8 copy is
    what the linear saves."""
    key = float8.cast(b.walk, f"{b.k}.{name}.in", elements, b.x.c)
    b.walk.rename(key, f"{b.k}.{name}.in8", f"{name} input (FP8, saved by the Float8Linear)")
    if b.saving:
        b.walk.relabel(f"{b.k}.{name}.in8", f"{name} input (FP8, saved by the Float8Linear)", "activations")
    return f"{b.k}.{name}.in8"


def block_forward(walk: Walk, x: StepShapes, i: int, inp: str, policy: str, tp: int, recomputing: bool = False,
                  prefix: str = "") -> str:  # fmt: skip
    """One TransformerBlock under apply_tp's plan (module docstring; with x.float8 torchao's Float8 styles:
    float8.AO_TP_SOURCES); returns its output's key ("" when the recomputation stops early, after w2's input). `prefix`
    keys a pipeline micro-batch's tensors apart."""
    xl, xs = _local(x, tp), _sequence_shard(x, tp)
    T, h, q, kv, f, c = x.T, x.h, xl.q, xl.kv, xl.f, x.c
    copies = repeat_kv_copies(xl)
    b = BlockWalk(walk, xl, i, policy, recomputing, prefix)
    k = b.k
    y = norm_forward(walk, xs, f"{k}.n1", inp, b.saving)
    ag = _gathered_input(walk, x, tp, f"{k}.ag1", y, b.saving, "attention input (all-gathered sequence)")
    xq = _linear(b, "q", h, q, lambda: b.alloc("q.out", T * q * c, "wq output", False))
    xk = _linear(b, "k", h, kv, lambda: b.alloc("k.out", T * kv * c, "wk output", False))
    xv = _linear(b, "v", h, kv, lambda: b.alloc("v.out", T * kv * c, "wv output" if copies else "wv output (SDPA's v)", not copies))
    b.save(ag)
    b.drop(ag)
    attn = rope_and_attention(b, x, (q, kv, xl.heads), copies, xq, xk, xv)
    if x.cp > 1:  # output.transpose(1, 2).contiguous(): a copy of the ring's output (memory_torchtitan.block_forward)
        contiguous = b.alloc("wo.in", T * q * c, "wo input (the ring's output made contiguous)", not x.float8)
        b.drop(attn)
        attn = contiguous
    wo_in = _rowwise_input(b, "wo", attn, T * q) if x.float8 else ""
    partial = _linear(b, "o", q, h, lambda: b.alloc("o.partial", T * h * c, "wo output (partial sum over the heads)", False))
    b.drop(attn)
    if wo_in and not b.saving:
        walk.free(wo_in)
    o = reduce_scatter(walk, x, tp, partial, f"{k}.o.out", "temporaries", "wo output (sequence shard)")
    walk.free(y)  # the attention call's argument, released when it returns
    x1 = b.alloc("x1", xs.T * h * c, "residual stream after attention", False)
    b.drop(o)
    y2 = norm_forward(walk, xs, f"{k}.n2", x1, b.saving)
    ag2 = _gathered_input(walk, x, tp, f"{k}.ag2", y2, b.saving, "MLP input (all-gathered sequence)")
    g = _linear(b, "w1", h, f, lambda: b.alloc("w1.out", T * f * c, "w1 output", True))
    act = b.alloc("act", T * f * c, "silu(w1)", True)
    u = _linear(b, "w3", h, f, lambda: b.alloc("w3.out", T * f * c, "w3 output", True))
    b.save(ag2)
    b.drop(ag2)
    prod = b.alloc("prod", T * f * c, "silu(w1) * w3 (w2's input)", not x.float8)  # Float8: w2 saves its FP8 copy instead
    b.drop(g, act, u)
    w2_in = _rowwise_input(b, "w2", prod, T * f) if x.float8 else ""
    if recomputing and not x.float8:  # early stop after w2's input; the unwinding frees the rest
        walk.free(y2)
        b.drop(x1)
        return ""
    d_partial = _linear(b, "w2", f, h, lambda: b.alloc("w2.partial", T * h * c, "w2 output (partial sum over the MLP width)", False))
    if recomputing:  # a Float8Linear's autograd.Function packs what it saves once its forward has run: w2's cast and mm first
        walk.free(d_partial, prod, y2)
        b.drop(x1)
        return ""
    if not x.float8:
        b.drop(prod)
    if w2_in and not b.saving:
        walk.free(w2_in)
    d = reduce_scatter(walk, x, tp, d_partial, f"{k}.w2.out", "temporaries", "w2 output (sequence shard)")
    if x.float8:  # w2's call argument, released when it returns
        walk.free(prod)
    walk.free(y2)
    out = b.alloc("x2", xs.T * h * c, "block output (residual stream)", False)
    walk.relabel(out, "block output (residual stream, sequence shard)", "activations")
    b.drop(d, x1)
    return out


def _mm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, d_in: int, d_out: int, into: str, saved_input: str = "",
                 width: float | None = None) -> None:  # fmt: skip
    """A column-parallel linear's backward: its weight gradient (d_in x d_out, the rank's shard), the input gradient
    (T x width), added out of place into `into` (a DTensor partial sum). With Float8 linears (float8.AO_TP_SOURCES
    ['grad_output']) the output gradient cast first (its bf16 copy gone), the weight cast, the input gradient's mm, then the
    weight gradient's."""
    if not x.float8:
        grad_of_weight(walk, x, key, d_in, d_out)
        walk.alloc(f"{key}.gin", x.T * (width or d_in) * x.c, "temporaries", "input gradient")
        walk.free(g_out, saved_input)
        add_gradient(walk, f"{key}.gin", into, in_place=False)
        return
    g8 = float8.cast(walk, f"{key}.b8go", x.T * d_out, x.c)
    walk.free(g_out)
    w8 = float8.weight_cast(walk, x, f"{key}.b", d_in, d_out)
    walk.alloc(f"{key}.gin", x.T * (width or d_in) * x.c, "temporaries", "input gradient")
    grad_of_weight(walk, x, key, d_in, d_out)
    walk.free(*w8, g8, saved_input)
    add_gradient(walk, f"{key}.gin", into, in_place=False)


def _rowwise_backward(walk: Walk, x: StepShapes, tp: int, key: str, d_in: int, g_in: str, saved_input: str) -> None:
    """wo's or w2's backward: the sequence shard's output gradient all-gathered (in FP8 with Float8 linears, cast on the
    shard first: float8.AO_TP_SOURCES['grad_output']), the weight gradient and the input gradient (T x d_in)."""
    h = x.h
    gathered = gathered_output_gradient(walk, x, tp, key)
    if not x.float8:
        grad_of_weight(walk, x, key, d_in, h)
        walk.alloc(g_in, x.T * d_in * x.c, "temporaries", "row-parallel input gradient")
        walk.free(gathered, saved_input)
        return
    w8 = float8.weight_cast(walk, x, f"{key}.b", d_in, h)
    walk.alloc(g_in, x.T * d_in * x.c, "temporaries", "row-parallel input gradient")
    grad_of_weight(walk, x, key, d_in, h)
    walk.free(*w8, gathered, saved_input)


def gathered_output_gradient(walk: Walk, x: StepShapes, tp: int, key: str) -> str:
    """A row-parallel linear's output gradient, all-gathered from its sequence shard (the backward of the forward's
    reduce-scatter), in FP8 with Float8 linears (float8.AO_TP_SOURCES['grad_output']: the shard's cast, then the
    all-gather); once per backward. A checkpointed block's w2 runs it before its recomputation: it needs no saved tensor,
    so autograd's engine runs it before the first unpack triggers the recomputation (the trackers' traces of
    tests/ground_truth/torchao_float8_tp.py and tiny_torchtitan_tp.py). Returns its key."""
    gathered = f"{key}.g_out"
    if gathered in walk.live:
        return gathered
    if not x.float8:
        return all_gather(walk, x, gathered, "temporaries", "row-parallel output gradient (all-gathered)")
    shard = float8.cast(walk, f"{key}.b8go", x.T / tp * x.h, x.c)
    all_gather(walk, x, gathered, "temporaries", "row-parallel output gradient (all-gathered, FP8)", element_bytes=1)
    walk.free(shard)
    return gathered


def block_backward(walk: Walk, x: StepShapes, i: int, tp: int, g_out: str, into: str, prefix: str = "") -> None:
    """The block's backward in the order autograd's engine runs it under apply_tp (the FSDPMemTracker trace of
    tests/ground_truth/tiny_torchtitan_tp.py; with x.float8 that of tests/ground_truth/torchao_float8_tp.py)."""
    xl, xs = _local(x, tp), _sequence_shard(x, tp)
    T, h, q, kv, f, c = x.T, x.h, xl.q, xl.kv, xl.f, x.c
    n_rep = q // kv
    k = f"{prefix}L{i}"
    walk.rename(g_out, f"{k}.g_x1")
    _rowwise_backward(walk, x, tp, f"{k}.w2", f, f"{k}.g_prod", f"{k}.w2.in8" if x.float8 else f"{k}.prod")
    walk.alloc(f"{k}.g_act", T * f * c, "temporaries", "mul backward: silu's gradient")
    walk.alloc(f"{k}.g_u", T * f * c, "temporaries", "mul backward: w3's gradient")
    walk.free(f"{k}.g_prod", f"{k}.act", f"{k}.w3.out")
    _mm_backward(walk, x, f"{k}.w3", f"{k}.g_u", h, f, f"{k}.g_ag2")
    walk.alloc(f"{k}.g_g", T * f * c, "temporaries", "silu backward")
    walk.free(f"{k}.g_act", f"{k}.w1.out")
    _mm_backward(walk, x, f"{k}.w1", f"{k}.g_g", h, f, f"{k}.g_ag2", f"{k}.ag2")
    reduce_scatter(walk, x, tp, f"{k}.g_ag2", f"{k}.g_y2", "temporaries", "MLP input gradient (reduce-scattered)")
    norm_backward(walk, xs, f"{k}.n2", f"{k}.g_y2", f"{k}.g_x1", in_place=False)
    _rowwise_backward(walk, x, tp, f"{k}.o", q, f"{k}.g_attn", f"{k}.wo.in8" if x.float8 else "")
    walk.free(f"{k}.wo.in")  # under cp: wo's saved input (the ring's output made contiguous), released with its node
    width = q if n_rep > 1 else kv
    if x.cp > 1:  # the ring's backward on the rank's local heads (memory_torchtitan_cp)
        from parcalc.core.memory_torchtitan_cp import ring_backward

        ring_backward(walk, xl, k, width)
    else:
        walk.alloc(f"{k}.g_q", T * q * c, "temporaries", "SDPA backward dq")
        walk.alloc(f"{k}.g_k", T * width * c, "temporaries", "SDPA backward dk")
        walk.alloc(f"{k}.g_v", T * width * c, "temporaries", "SDPA backward dv")
    walk.free(f"{k}.g_attn", f"{k}.attn", f"{k}.lse", f"{k}.q.rope", f"{k}.k.rope", f"{k}.keys", f"{k}.values", f"{k}.v.out")
    if n_rep > 1:
        for name in ("v", "k"):
            walk.alloc(f"{k}.g_{name}sum", T * kv * c, "temporaries", "repeat_kv backward (sum over the repeats)")
            walk.free(f"{k}.g_{name}")
            walk.rename(f"{k}.g_{name}sum", f"{k}.g_{name}")
    # RoPE's two chains in lockstep (memory_torchtitan.block_backward); the complex product's gradient multiplies by
    # freqs_cis.conj(), a copy here (s x head_dim / 2, complex64; in the tracker's trace of the TP step)
    freqs = x.s * (x.q // x.heads) // 2 * 8
    for name, w in (("k", kv), ("q", q)):
        walk.alloc(f"{k}.g_{name}32", T * w * 4, "temporaries", "RoPE backward: type_as to fp32")
        walk.free(f"{k}.g_{name}")
    for name, w in (("k", kv), ("q", q)):
        walk.alloc(f"{k}.conj", freqs, "temporaries", "RoPE backward: freqs_cis.conj()")
        walk.alloc(f"{k}.g_{name}c", T * w * 4, "temporaries", "RoPE backward: times conj(freqs_cis)")
        walk.free(f"{k}.conj", f"{k}.g_{name}32")
    for name, w in (("k", kv), ("q", q)):
        walk.alloc(f"{k}.g_{name}16", T * w * c, "temporaries", "RoPE backward: .float()'s gradient (bf16)")
        walk.free(f"{k}.g_{name}c")
    _mm_backward(walk, x, f"{k}.v", f"{k}.g_v", h, kv, f"{k}.g_ag1", width=h)
    _mm_backward(walk, x, f"{k}.k", f"{k}.g_k16", h, kv, f"{k}.g_ag1", width=h)
    _mm_backward(walk, x, f"{k}.q", f"{k}.g_q16", h, q, f"{k}.g_ag1", f"{k}.ag1", width=h)
    reduce_scatter(walk, x, tp, f"{k}.g_ag1", f"{k}.g_y", "temporaries", "attention input gradient (reduce-scattered)")
    norm_backward(walk, xs, f"{k}.n1", f"{k}.g_y", f"{k}.g_x1", in_place=False)
    walk.rename(f"{k}.g_x1", into)


def embedding_forward(walk: Walk, x: StepShapes, tp: int, p: str = "") -> str:
    """RowwiseParallel(input Replicate, output Shard(1)) on the embedding: the rank's rows looked up (a partial sum),
    reduce-scattered to the sequence shard; returns its key."""
    walk.alloc(f"{p}emb.ids", x.T * 8, "activations", "embedding: the rank's masked token ids (saved)")
    walk.alloc(f"{p}emb.partial", x.T * x.h * x.c, "temporaries", "embedding output (partial: the rank's vocabulary rows)")
    return reduce_scatter(walk, x, tp, f"{p}emb.partial", f"{p}emb", "activations", "embedding output (residual stream, sequence shard)")


def head_forward(walk: Walk, x: StepShapes, tp: int, current: str, p: str = "") -> None:
    """The final norm on the sequence shard, the output projection's input all-gathered (saved), pred the rank's
    vocabulary shard (bf16); the norm's output and the last block's, held by the forward's frame, go when it returns."""
    xs = _sequence_shard(x, tp)
    y = norm_forward(walk, xs, f"{p}final", current, saved=True)
    all_gather(walk, x, f"{p}head.ag", "activations", "the output projection's input (all-gathered sequence)")
    walk.alloc(f"{p}head.out", x.T * (x.V // tp) * 2, "logits and loss", "pred (the output projection, bf16, the rank's vocabulary shard)")
    walk.free(y, current)


def loss_forward(walk: Walk, x: StepShapes, tp: int, p: str = "") -> None:
    """loss_parallel's log-softmax and nll_loss on the rank's vocabulary shard (TT_SOURCES['loss_parallel'])."""
    L = x.T * (x.V // tp) * 4  # the rank's fp32 logits
    walk.alloc(f"{p}logits32", L, "logits and loss", "pred.flatten(0, 1).float()")
    walk.alloc(f"{p}shifted", L, "logits and loss", "loss parallel log_softmax: logits - max")
    walk.transient(f"{p}exp", L, "logits and loss", "loss parallel log_softmax: exp(logits - max)")
    walk.alloc(f"{p}logsoftmax", L, "logits and loss", "loss parallel log_softmax (fp32, saved)")
    walk.free(f"{p}shifted")
    walk.transient(f"{p}loss", 4, "logits and loss", "loss")
    walk.free(f"{p}logits32")


def loss_backward(walk: Walk, x: StepShapes, tp: int, p: str = "") -> None:
    """loss_parallel's nll_loss and log_softmax gradients, pred's (bf16)."""
    L = x.T * (x.V // tp) * 4
    walk.alloc(f"{p}g_zeros", L, "logits and loss", "loss parallel backward: zeros_like(logits) (the target scatter)")
    walk.alloc(f"{p}g_exp", L, "logits and loss", "loss parallel backward: exp(log_softmax)")
    walk.alloc(f"{p}g_sum", L, "logits and loss", "loss parallel backward: zeros + exp")
    walk.free(f"{p}g_exp")
    walk.alloc(f"{p}g_logits32", L, "logits and loss", "loss parallel backward: (zeros + exp) x grad (fp32)")
    walk.free(f"{p}g_sum", f"{p}g_zeros", f"{p}logsoftmax")
    walk.alloc(f"{p}g_logits", L / 2, "logits and loss", "pred's gradient (.float()'s backward, bf16)")
    walk.free(f"{p}g_logits32")


def head_backward(walk: Walk, x: StepShapes, tp: int, g_stream: str, p: str = "") -> None:
    """The output projection's backward (its weight gradient, the rank's vocabulary rows; the input's partial gradient
    reduce-scattered) and the final norm's, into `g_stream` (the sequence shard)."""
    grad_of_weight(walk, x, f"{p}head", x.h, x.V // tp)
    walk.alloc(f"{p}head.gin", x.T * x.h * x.c, "temporaries", "output projection input gradient (partial)")
    walk.free(f"{p}g_logits", f"{p}head.ag")
    reduce_scatter(walk, x, tp, f"{p}head.gin", f"{p}final.g_y", "temporaries", "final norm output gradient (reduce-scattered)")
    norm_backward(walk, _sequence_shard(x, tp), f"{p}final", f"{p}final.g_y", g_stream, in_place=False)


def embedding_backward(walk: Walk, x: StepShapes, tp: int, g_stream: str, embedding_tables: int, p: str = "") -> None:
    """The embedding's output gradient all-gathered, its weight gradient as `{p}embedding.grad`: of the whole vocabulary,
    replicated. DTensor's embedding_dense_backward has no row-sharded strategy (TP_SOURCES['embedding_backward']): from a
    replicated output gradient and replicated ids it computes the whole table's gradient, which FSDP2 narrows to the
    rank's rows only when it reduces (_fsdp_param.py _get_grad_inner_tensor: redistribute to Shard(0), a view); under a
    pipeline the fp32 accumulator copied from it is of the whole vocabulary too."""
    ge = all_gather(walk, x, f"{p}g_emb_out", "temporaries", "embedding output gradient (all-gathered)")
    walk.free(g_stream)
    for table in range(embedding_tables):
        walk.alloc(f"{p}g_embedding{table}", x.V * x.h * x.c, "gradients", "embedding gradient (the whole vocabulary, replicated)")
    walk.free(ge, f"{p}emb.ids", *(f"{p}g_embedding{t}" for t in range(1, embedding_tables)))
    walk.rename(f"{p}g_embedding0", f"{p}embedding.grad", "weight gradients")


def walk_step(walk: Walk, model: TransformerModel, x: StepShapes, policies: tuple[str, ...], embedding_tables: int, tp: int,
              hooks: StepHooks, compiled: bool = False) -> None:  # fmt: skip
    """Forward, loss and backward of torchtitan's Transformer under apply_tp, FSDP2's hooks around each block (`compiled`:
    each block's torch.compile'd code with its collectives, parcalc.core.memory_torchtitan_tp_compile)."""
    from parcalc.core.memory_torchtitan_tp_compile import compiled_tp_block_backward, compiled_tp_block_forward

    hooks.before_forward(walk)
    walk.phase = "forward: embedding"
    current = embedding_forward(walk, x, tp)
    for i in range(model.layers):
        walk.phase = f"forward: layer {i + 1} of {model.layers}"
        hooks.before_layer(walk, i)
        if compiled:  # every policy's compiled forward saves its input
            out = compiled_tp_block_forward(walk, x, i, current, policies[i], tp)
        else:
            out = block_forward(walk, x, i, current, policies[i], tp)
        if policies[i] == "none" and not compiled:
            walk.free(current)
        hooks.after_layer(walk, i)
        current = out
    walk.phase = "forward: final norm and output"
    head_forward(walk, x, tp, current)
    hooks.after_forward(walk)  # the root module returns pred; the loss runs outside it
    walk.phase = "forward: loss (loss parallel: pred.float(), log_softmax, nll_loss)"
    loss_forward(walk, x, tp)
    walk.free("head.out")  # del pred
    walk.phase = "backward: loss (loss parallel nll_loss and log_softmax gradients)"
    hooks.before_backward(walk)
    loss_backward(walk, x, tp)
    walk.phase = "backward: output projection"
    head_backward(walk, x, tp, "g_stream")
    for i in reversed(range(model.layers)):
        walk.phase = f"backward: layer {i + 1} of {model.layers}" + ("" if policies[i] == "none" else " (recomputed)")
        inp = "emb" if i == 0 else f"L{i - 1}.x2"
        hooks.before_layer_backward(walk, i)
        if compiled:  # the recomputation, if any, is part of the compiled backward
            compiled_tp_block_backward(walk, x, i, tp, inp, "g_stream", "g_stream_next", policies[i])
        else:
            if policies[i] != "none":
                gathered_output_gradient(walk, x, tp, f"L{i}.w2")  # w2's output gradient, all-gathered before the recomputation
                block_forward(walk, x, i, inp, policies[i], tp, recomputing=True)
            block_backward(walk, x, i, tp, "g_stream", "g_stream_next")
        walk.free(inp)
        walk.rename("g_stream_next", "g_stream")
        hooks.after_layer_backward(walk, i)
    walk.phase = "backward: embedding"
    embedding_backward(walk, x, tp, "g_stream", embedding_tables)
    hooks.after_backward(walk)
