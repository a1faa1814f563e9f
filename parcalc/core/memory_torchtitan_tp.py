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
- in the backward, each row-parallel output's gradient all-gathered, each replicated input's partial gradients summed out
  of place (DTensors: TT_SOURCES['tp_accumulate']) and reduce-scattered back to the sequence shard.
The all-gather of a sequence shard is a view at micro-batch 1 and a copy (torch.cat of the chunks) above it; the
reduce-scatter always concatenates first (TT_SOURCES['tp_collectives']).

Checkpointing: none and full (checkpoint_wrapper; the recomputation stops after w2's input, as memory_torchtitan's).
Ground truth: FSDPMemTracker over torchtitan's code under apply_tp and apply_fsdp on a 2-D mesh of fake ranks
(tests/ground_truth/tiny_torchtitan_tp.py, test_torch_memory_torchtitan_tp.py).
"""

from __future__ import annotations

from dataclasses import replace

from parcalc.core.memory_torchtitan import BlockWalk, add_gradient, norm_backward, repeat_kv_copies, rope_and_attention
from parcalc.core.memory_walk import StepHooks, StepShapes, Walk, grad_of_weight, norm_forward
from parcalc.core.model import TransformerModel

TP_POLICIES = ("none", "full")


def _local(x: StepShapes, tp: int) -> StepShapes:
    """A rank's heads, MLP width and vocabulary over the whole sequence."""
    return replace(x, q=x.q // tp, kv=x.kv // tp, f=x.f // tp, heads=x.heads // tp, V=x.V // tp)


def _sequence_shard(x: StepShapes, tp: int) -> StepShapes:
    """The residual stream's shard: T / tp tokens of the whole width."""
    return replace(x, T=x.T / tp)


def all_gather(walk: Walk, x: StepShapes, key: str, kind: str, what: str) -> str:
    """A sequence shard gathered to the whole sequence (T x hidden): a view of the collective's output at micro-batch 1,
    else a torch.cat copy of its chunks (TT_SOURCES['tp_collectives'])."""
    size = x.T * x.h * x.c
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


def block_forward(walk: Walk, x: StepShapes, i: int, inp: str, policy: str, tp: int, recomputing: bool = False) -> str:
    """One TransformerBlock under apply_tp's plan (module docstring); returns its output's key ("" when the recomputation
    stops early, after w2's input)."""
    xl, xs = _local(x, tp), _sequence_shard(x, tp)
    T, h, q, kv, f, c = x.T, x.h, xl.q, xl.kv, xl.f, x.c
    copies = repeat_kv_copies(xl)
    b = BlockWalk(walk, xl, i, policy, recomputing)
    k = b.k
    y = norm_forward(walk, xs, f"{k}.n1", inp, b.saving)
    ag = all_gather(walk, x, f"{k}.ag1", "activations" if b.saving else "temporaries", "attention input (all-gathered sequence)")
    xq = b.alloc("q.out", T * q * c, "wq output", False)
    xk = b.alloc("k.out", T * kv * c, "wk output", False)
    xv = b.alloc("v.out", T * kv * c, "wv output" if copies else "wv output (SDPA's v)", not copies)
    b.save(ag)
    b.drop(ag)
    attn = rope_and_attention(b, x, (q, kv, xl.heads), copies, xq, xk, xv)
    partial = b.alloc("o.partial", T * h * c, "wo output (partial sum over the heads)", False)
    b.drop(attn)
    o = reduce_scatter(walk, x, tp, partial, f"{k}.o.out", "temporaries", "wo output (sequence shard)")
    walk.free(y)  # the attention call's argument, released when it returns
    x1 = b.alloc("x1", xs.T * h * c, "residual stream after attention", False)
    b.drop(o)
    y2 = norm_forward(walk, xs, f"{k}.n2", x1, b.saving)
    ag2 = all_gather(walk, x, f"{k}.ag2", "activations" if b.saving else "temporaries", "MLP input (all-gathered sequence)")
    g = b.alloc("w1.out", T * f * c, "w1 output", True)
    act = b.alloc("act", T * f * c, "silu(w1)", True)
    u = b.alloc("w3.out", T * f * c, "w3 output", True)
    b.save(ag2)
    b.drop(ag2)
    prod = b.alloc("prod", T * f * c, "silu(w1) * w3 (w2's input)", True)
    b.drop(g, act, u)
    if recomputing:  # early stop after w2's input; the unwinding frees the rest
        walk.free(y2)
        b.drop(x1)
        return ""
    d_partial = b.alloc("w2.partial", T * h * c, "w2 output (partial sum over the MLP width)", False)
    b.drop(prod)
    d = reduce_scatter(walk, x, tp, d_partial, f"{k}.w2.out", "temporaries", "w2 output (sequence shard)")
    walk.free(y2)
    out = b.alloc("x2", xs.T * h * c, "block output (residual stream)", False)
    walk.relabel(out, "block output (residual stream, sequence shard)", "activations")
    b.drop(d, x1)
    return out


def _mm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, d_in: int, d_out: int, into: str, saved_input: str = "",
                 width: float | None = None) -> None:  # fmt: skip
    """A sharded linear's MmBackward: its weight gradient (d_in x d_out, the rank's shard), the input gradient (T x width),
    added out of place into `into` (a DTensor partial sum)."""
    grad_of_weight(walk, x, key, d_in, d_out)
    walk.alloc(f"{key}.gin", x.T * (width or d_in) * x.c, "temporaries", "input gradient")
    walk.free(g_out, saved_input)
    add_gradient(walk, f"{key}.gin", into, in_place=False)


def block_backward(walk: Walk, x: StepShapes, i: int, tp: int, g_out: str, into: str) -> None:
    """The block's backward in the order autograd's engine runs it under apply_tp (the FSDPMemTracker trace of
    tests/ground_truth/tiny_torchtitan_tp.py)."""
    xl, xs = _local(x, tp), _sequence_shard(x, tp)
    T, h, q, kv, f, c = x.T, x.h, xl.q, xl.kv, xl.f, x.c
    n_rep = q // kv
    k = f"L{i}"
    walk.rename(g_out, f"{k}.g_x1")
    gd = all_gather(walk, x, f"{k}.g_d", "temporaries", "w2 output gradient (all-gathered)")
    grad_of_weight(walk, x, f"{k}.w2", f, h)
    walk.alloc(f"{k}.g_prod", T * f * c, "temporaries", "w2 input gradient")
    walk.free(gd, f"{k}.prod")
    walk.alloc(f"{k}.g_act", T * f * c, "temporaries", "mul backward: silu's gradient")
    walk.alloc(f"{k}.g_u", T * f * c, "temporaries", "mul backward: w3's gradient")
    walk.free(f"{k}.g_prod", f"{k}.act", f"{k}.w3.out")
    _mm_backward(walk, x, f"{k}.w3", f"{k}.g_u", h, f, f"{k}.g_ag2")
    walk.alloc(f"{k}.g_g", T * f * c, "temporaries", "silu backward")
    walk.free(f"{k}.g_act", f"{k}.w1.out")
    _mm_backward(walk, x, f"{k}.w1", f"{k}.g_g", h, f, f"{k}.g_ag2", f"{k}.ag2")
    reduce_scatter(walk, x, tp, f"{k}.g_ag2", f"{k}.g_y2", "temporaries", "MLP input gradient (reduce-scattered)")
    norm_backward(walk, xs, f"{k}.n2", f"{k}.g_y2", f"{k}.g_x1", in_place=False)
    go = all_gather(walk, x, f"{k}.g_o", "temporaries", "wo output gradient (all-gathered)")
    grad_of_weight(walk, x, f"{k}.o", q, h)
    walk.alloc(f"{k}.g_attn", T * q * c, "temporaries", "wo input gradient")
    walk.free(go)
    width = q if n_rep > 1 else kv
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


def walk_step(walk: Walk, model: TransformerModel, x: StepShapes, policies: tuple[str, ...], embedding_tables: int, tp: int,
              hooks: StepHooks) -> None:  # fmt: skip
    """Forward, loss and backward of torchtitan's Transformer under apply_tp, FSDP2's hooks around each block."""
    xl, xs = _local(x, tp), _sequence_shard(x, tp)
    T, h, c = x.T, x.h, x.c
    L = T * xl.V * 4  # the rank's fp32 logits
    hooks.before_forward(walk)
    walk.phase = "forward: embedding"
    walk.alloc("emb.ids", T * 8, "activations", "embedding: the rank's masked token ids (saved)")
    walk.alloc("emb.partial", T * h * c, "temporaries", "embedding output (partial: the rank's vocabulary rows)")
    current = reduce_scatter(walk, x, tp, "emb.partial", "emb", "activations", "embedding output (residual stream, sequence shard)")
    for i in range(model.layers):
        walk.phase = f"forward: layer {i + 1} of {model.layers}"
        hooks.before_layer(walk, i)
        out = block_forward(walk, x, i, current, policies[i], tp)
        if policies[i] == "none":
            walk.free(current)
        hooks.after_layer(walk, i)
        current = out
    walk.phase = "forward: final norm and output"
    y = norm_forward(walk, xs, "final", current, saved=True)
    all_gather(walk, x, "head.ag", "activations", "the output projection's input (all-gathered sequence)")
    walk.alloc("head.out", L / 2, "logits and loss", "pred (the output projection, bf16, the rank's vocabulary shard)")
    walk.free(y, current)  # the norm's output and the last block's, held by the forward's frame until it returns
    hooks.after_forward(walk)  # the root module returns pred; the loss runs outside it
    walk.phase = "forward: loss (loss parallel: pred.float(), log_softmax, nll_loss)"
    walk.alloc("logits32", L, "logits and loss", "pred.flatten(0, 1).float()")
    walk.alloc("shifted", L, "logits and loss", "loss parallel log_softmax: logits - max")
    walk.transient("exp", L, "logits and loss", "loss parallel log_softmax: exp(logits - max)")
    walk.alloc("logsoftmax", L, "logits and loss", "loss parallel log_softmax (fp32, saved)")
    walk.free("shifted")
    walk.transient("loss", 4, "logits and loss", "loss")
    walk.free("logits32", "head.out")  # del pred
    walk.phase = "backward: loss (loss parallel nll_loss and log_softmax gradients)"
    hooks.before_backward(walk)
    walk.alloc("g_zeros", L, "logits and loss", "loss parallel backward: zeros_like(logits) (the target scatter)")
    walk.alloc("g_exp", L, "logits and loss", "loss parallel backward: exp(log_softmax)")
    walk.alloc("g_sum", L, "logits and loss", "loss parallel backward: zeros + exp")
    walk.free("g_exp")
    walk.alloc("g_logits32", L, "logits and loss", "loss parallel backward: (zeros + exp) x grad (fp32)")
    walk.free("g_sum", "g_zeros", "logsoftmax")
    walk.phase = "backward: output projection"
    walk.alloc("g_logits", L / 2, "logits and loss", "pred's gradient (.float()'s backward, bf16)")
    walk.free("g_logits32")
    grad_of_weight(walk, x, "head", h, xl.V)
    walk.alloc("head.gin", T * h * c, "temporaries", "output projection input gradient (partial)")
    walk.free("g_logits", "head.ag")
    reduce_scatter(walk, x, tp, "head.gin", "final.g_y", "temporaries", "final norm output gradient (reduce-scattered)")
    norm_backward(walk, xs, "final", "final.g_y", "g_stream", in_place=False)
    for i in reversed(range(model.layers)):
        walk.phase = f"backward: layer {i + 1} of {model.layers}" + ("" if policies[i] == "none" else " (recomputed)")
        inp = "emb" if i == 0 else f"L{i - 1}.x2"
        hooks.before_layer_backward(walk, i)
        if policies[i] != "none":
            block_forward(walk, x, i, inp, policies[i], tp, recomputing=True)
        block_backward(walk, x, i, tp, "g_stream", "g_stream_next")
        walk.free(inp)
        walk.rename("g_stream_next", "g_stream")
        hooks.after_layer_backward(walk, i)
    walk.phase = "backward: embedding"
    ge = all_gather(walk, x, "g_emb_out", "temporaries", "embedding output gradient (all-gathered)")
    walk.free("g_stream")
    for table in range(embedding_tables):
        walk.alloc(f"g_embedding{table}", xl.V * h * c, "gradients", "embedding gradient (the rank's vocabulary rows)")
    walk.free(ge, "emb.ids", *(f"g_embedding{t}" for t in range(1, embedding_tables)))
    walk.rename("g_embedding0", "embedding.grad", "weight gradients")
    hooks.after_backward(walk)
