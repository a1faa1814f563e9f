"""transformers' LlamaForCausalLM under torch.compile in the step walk: what the code Inductor generates for the whole
model with its loss allocates and frees, buffer by buffer.

How the model is compiled: as the step-time model of `--framework hf --compile` assumes (parcalc.core.timing.
hf_compiled_kernels, HF_COMPILED_SOURCE): the whole model compiled, the loss traced in (the Trainer's `torch_compile=True`
compiles the model, whose forward computes ForCausalLMLoss when given labels), autocast(bfloat16) over fp32 weights inside
the compiled forward. Dynamo traces transformers' Llama as one graph, no graph break (tests/ground_truth/
test_torch_hf_compile.py); AOTAutograd splits its joint graph with the min-cut partitioner (HF_COMPILE_SOURCES['partitioner'])
into one forward and one backward, and Inductor generates one function for each.

What the forward hands the backward (the partitioner's saved tensors, read from the generated code's return and the
backward's arguments, torch 2.13.0 on the CPU; tests/ground_truth/test_torch_memory_hf_compiled.py), per decoder layer:
- the layer's input (the fp32 residual stream), both RMSNorms' fp32 1/rms per token and bf16 outputs (the projections'
  one input: autocast's per-projection casts are gone), q and k after RoPE (bf16: RoPE's fp32 products stay in registers),
  v, SDPA's output and logsumexp, the stream after attention in fp32 (x + o_proj; in the first layer o_proj's bf16 output
  instead, the embedding being saved already), gate's and up's outputs and silu(gate) * up;
- every weight's bf16 cast (autocast's copy, written once by a kernel of its own or fused into the norm before it): the
  backward's input gradients read them, so they stay from their cast until their layer's backward, as eager's autocast
  cache keeps them;
- the loss: the last layer's output, the final norm's 1/rms and output, the bf16 logits (never an fp32 copy: one
  online-softmax kernel reads them), the shifted labels, each row's max and log-sum-exp and the count of labels.
The backward writes the logits' gradient into the logits' own buffer, the stream's fp32 gradient into the last layer's
output (in place, layer after layer), and frees each saved tensor at its last use; each weight's gradient is an mm in bf16
and a cast to fp32 (the fp32 gradient a graph output, held until the backward returns and becomes .grad); a tied
embedding's gradient is one fp32 table scattered from the first layer's input gradient and one more with the head's bf16
gradient added (held since the head's backward), both at the last kernel.

Inductor's buffers: each kernel's outputs are allocated before it runs (`empty_strided`), a buffer freed after its last
use (`del`); a dead buffer of the same dtype and size is reused instead (`# reuse`), earlier where holding it costs the
graph no higher peak (torch/_inductor/codegen/wrapper.py AllocateLine.should_reuse_buffer), so reuse changes no peak and
the walk frees each buffer at its last use and allocates anew, except where a kernel writes in place into an input that dies there
(the logits' gradient, the stream's gradient, up's output gradient: no allocation). What the CPU's code has and a GPU's
has not is left out: the CPU flash-attention backward's copy of the logsumexp and its per-thread scratch; rotary's cat is
lowered as on a GPU (a pointwise cat: torch/_inductor/lowering.py cat, config.force_pointwise_cat in the ground truth).

Not read, so the eager walk (parcalc.core.memory_timeline) stands for them (compiled_walk_gaps): other precisions than
autocast(bf16) over fp32 weights, gradient checkpointing (its compiled recomputation), Qwen3's q/k norms, the MoE blocks.
"""

from __future__ import annotations

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_walk import StepShapes, Walk
from parcalc.core.model import TransformerModel

HF_COMPILE_SOURCES = {
    "compile": ("transformers' LlamaForCausalLM compiled whole with its loss (torch.compile, default mode, autocast(bfloat16) "
                "over fp32 weights: the Trainer's torch_compile; one forward and one backward graph, no graph break: "
                "tests/ground_truth/test_torch_hf_compile.py), as parcalc.core.timing.hf_compiled_kernels assumes"),
    "partitioner": ("pytorch/pytorch v2.13.0 torch/_functorch/partitioners.py min_cut_rematerialization_partition (the inductor "
                    "backend's partition_fn): the saved set read from the generated forward's return and backward's arguments "
                    "(TORCH_LOGS=output_code, torch 2.13.0, CPU): per layer its fp32 input, 1/rms and bf16 output of each norm, "
                    "q and k after RoPE, v, SDPA's output and logsumexp, the fp32 stream after attention, gate, up and "
                    "silu(gate) * up, each weight's bf16 cast; the logits in bf16, each row's max and log-sum-exp"),
    "inductor": ("pytorch/pytorch v2.13.0 torch/_inductor/codegen/wrapper.py: AllocateLine (buffers allocated before their kernel), "
                 "FreeIfNotReusedLine ('del' after the last use), AllocateLine.should_reuse_buffer (a dead buffer of the same "
                 "dtype and size reused where the graph's estimated peak does not rise); scheduler in-place updates of an "
                 "input dying at its kernel (the logits' and the stream's gradients)"),
}

# what `memory --compile` says where the hf walk follows the compiled model
HF_COMPILED_WALK = ("the step's peak walks the code Inductor generates for transformers' LlamaForCausalLM compiled whole with "
                    "its loss (the min-cut partitioner's saved tensors: one bf16 norm output for the three projections, no "
                    "fp32 RoPE, norm or logits copies; the bf16 weight casts saved for backward; the logits' gradient written "
                    "in place: parcalc.core.memory_hf_compiled, checked on the CPU against every allocation of a compiled step; "
                    "a prediction on a GPU: no compiled step was measured there)")

A, T_, G, C, X = "activations", "temporaries", "gradients", "autocast weight copies", "logits and loss"
F32, BF16 = 4.0, 2.0


def _weights(x: StepShapes) -> tuple[tuple[str, int, int], ...]:
    """A layer's linears (name, d_in, d_out) in the order the forward casts them."""
    return (("q", x.h, x.q), ("k", x.h, x.kv), ("v", x.h, x.kv), ("o", x.q, x.h), ("gate", x.h, x.f), ("up", x.h, x.f),
            ("down", x.f, x.h))  # fmt: skip


def _cast(walk: Walk, x: StepShapes, k: str, name: str) -> None:
    d_in, d_out = {n: (i, o) for n, i, o in _weights(x)}[name]
    walk.alloc(f"{k}.{name}.wcopy", d_in * d_out * BF16, C, "bf16 weight casts (saved for backward)")


def _norm(walk: Walk, x: StepShapes, k: str, norm: str, stream: str | None, what: str) -> None:
    """The residual add and RMSNorm as one kernel: the fp32 sum (`stream`, saved; None: not written), 1/rms, the bf16 output."""
    if stream is not None:
        walk.alloc(stream, x.T * x.h * F32, A, what)
    walk.alloc(f"{k}.{norm}.rstd", x.T * F32, A, "RMSNorm 1/rms (fp32)")
    walk.alloc(f"{k}.{norm}.out", x.T * x.h * BF16, A, "RMSNorm output (bf16, the projections' input)")


def layer_forward(walk: Walk, x: StepShapes, i: int, prev: str) -> str:
    """One compiled LlamaDecoderLayer's forward; `prev`: the previous layer's down_proj output, which this one's first
    kernel adds into the stream (the stream's other addends are saved). Returns this layer's."""
    T, h, q, kv, f = x.T, x.h, x.q, x.kv, x.f
    k = f"L{i}"
    first = i == 0
    # the previous layer's residual add fused into this norm: its fp32 sum is this layer's input (saved); the
    # embedding's gather is the first layer's (its output saved as the stream)
    _norm(walk, x, k, "n1", f"{k}.x" if not first else None, "decoder layer input (fp32 residual stream)")
    _cast(walk, x, k, "q")
    walk.free(prev)  # the previous down_proj's output, added in ("": none)
    walk.alloc(f"{k}.q.out", T * q * BF16, T_, "q_proj output")
    _cast(walk, x, k, "k")
    walk.alloc(f"{k}.k.out", T * kv * BF16, T_, "k_proj output")
    _cast(walk, x, k, "v")
    walk.alloc(f"{k}.v", T * kv * BF16, A, "v_proj output (SDPA's v)")
    walk.alloc(f"{k}.k", T * kv * BF16, A, "SDPA k (RoPE's bf16 output)")
    walk.alloc(f"{k}.q", T * q * BF16, A, "SDPA q (RoPE's bf16 output)")
    walk.free(f"{k}.q.out", f"{k}.k.out")
    walk.alloc(f"{k}.attn", T * q * BF16, A, "SDPA output (o_proj's input)")
    walk.alloc(f"{k}.lse", x.b * x.heads * x.s * F32, A, "SDPA logsumexp (fp32)")
    _cast(walk, x, k, "o")
    walk.alloc(f"{k}.o", T * h * BF16, A if first else T_, "o_proj output" + (" (saved: x1 = embedding + o)" if first else ""))
    _norm(walk, x, k, "n2", None if first else f"{k}.x1", "residual stream after attention (fp32)")
    _cast(walk, x, k, "gate")
    if not first:
        walk.free(f"{k}.o")  # added into x1 by the norm's kernel
    walk.alloc(f"{k}.gate", T * f * BF16, A, "MLP gate_proj output")
    _cast(walk, x, k, "up")
    walk.alloc(f"{k}.up", T * f * BF16, A, "MLP up_proj output")
    _cast(walk, x, k, "down")
    walk.alloc(f"{k}.prod", T * f * BF16, A, "MLP silu(gate) * up (down_proj's input)")
    walk.alloc(f"{k}.down", T * h * BF16, T_, "down_proj output")
    return f"{k}.down"


def walk_forward(walk: Walk, x: StepShapes, layers: int) -> None:
    """The compiled forward, the loss included."""
    walk.phase = "forward: embedding"
    walk.alloc("emb", x.T * x.h * F32, A, "embedding output (fp32 residual stream)")
    prev = ""
    for i in range(layers):
        walk.phase = f"forward: layer {i + 1} of {layers}"
        prev = layer_forward(walk, x, i, prev)
    walk.phase = "forward: final norm and LM head"
    _norm(walk, x, "final", "n", "final.x", "last layer's output (fp32 residual stream)")
    walk.alloc("head.wcopy", x.V * x.h * BF16, C, "bf16 weight casts (saved for backward)")
    walk.free(prev)
    walk.alloc("logits", x.T * x.V * BF16, X, "logits (bf16, saved by the compiled loss)")
    walk.phase = "forward: loss (compiled cross_entropy)"
    walk.alloc("labels", x.b * (x.s + 1) * 8.0, X, "labels padded and shifted (int64)")
    walk.alloc("loss.amax", x.T * F32, X, "compiled loss: each row's max (fp32, saved)")
    walk.alloc("loss.lse", x.T * F32, X, "compiled loss: each row's log-sum-exp (fp32, saved)")
    walk.alloc("loss.valid", 8.0, T_, "compiled loss: the count of labels (int64)")
    walk.alloc("loss.value", 4.0, X, "loss")
    walk.alloc("loss.count", 4.0, X, "compiled loss: the count of labels (fp32, saved)")
    walk.free("loss.valid")


def _weight_grad(walk: Walk, x: StepShapes, k: str, name: str) -> None:
    """A linear's weight gradient: the mm's bf16 output, its fp32 cast (the graph's output, kept), the bf16 freed."""
    d_in, d_out = {n: (i, o) for n, i, o in _weights(x)}[name]
    walk.alloc(f"{k}.{name}.grad", d_in * d_out * F32, G, "weight gradients (fp32)")
    walk.free(f"{k}.{name}.gw")


def _gw(walk: Walk, x: StepShapes, k: str, name: str) -> None:
    d_in, d_out = {n: (i, o) for n, i, o in _weights(x)}[name]
    walk.alloc(f"{k}.{name}.gw", d_in * d_out * BF16, T_, "weight gradient (bf16, before its fp32 cast)")


def _mlp_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """down's, SwiGLU's, gate's and up's backward as the generated code orders them, from `g.bf16` (down's output gradient)."""
    T, h, f = x.T, x.h, x.f
    _gw(walk, x, k, "down")
    walk.free(f"{k}.prod")
    walk.alloc(f"{k}.g_prod", T * f * BF16, T_, "down_proj input gradient")
    walk.free("g.bf16", f"{k}.down.wcopy")
    walk.alloc(f"{k}.down.grad", f * h * F32, G, "weight gradients (fp32)")  # the cast fused into SwiGLU's backward
    walk.alloc(f"{k}.g_gate", T * f * BF16, T_, "gate_proj output gradient (silu backward)")
    walk.rename(f"{k}.up", f"{k}.g_up", "up_proj output gradient (in up's buffer)", T_)
    walk.free(f"{k}.gate", f"{k}.down.gw", f"{k}.g_prod")
    _gw(walk, x, k, "gate")
    walk.alloc(f"{k}.gin_gate", T * h * BF16, T_, "gate_proj input gradient")
    walk.free(f"{k}.gate.wcopy", f"{k}.g_gate")
    _weight_grad(walk, x, k, "gate")
    _gw(walk, x, k, "up")
    walk.free(f"{k}.n2.out")
    walk.alloc(f"{k}.gin_up", T * h * BF16, T_, "up_proj input gradient")
    walk.free(f"{k}.g_up", f"{k}.up.wcopy")


def _norm_backward(walk: Walk, x: StepShapes, k: str, norm: str, saved: str, gins: tuple[str, ...], last: str, into: str = "") -> None:
    """RMSNorm's backward with the residual's gradient: one kernel adds the projections' input gradients into the fp32 stream
    gradient (in place), writes the norm weight's gradient, the `last` weight's fp32 gradient (its cast fused in) and the
    stream gradient's bf16 copy for the linear before it (written into `into`, an input of the same dtype and size dying
    there: Inductor's in-place update); then frees the norm's saved tensors."""
    walk.alloc(f"{k}.{last}.grad", {n: i * o for n, i, o in _weights(x)}[last] * F32, G, "weight gradients (fp32)")
    walk.alloc(f"{k}.{norm}.grad", x.h * F32, G, "weight gradients (fp32)")
    if into:
        walk.free(into)
    walk.alloc("g.bf16.next", x.T * x.h * BF16, T_, "stream gradient in bf16 (the linear before's output gradient)")
    walk.free(saved, f"{k}.{norm}.rstd", f"{k}.{last}.gw", *gins)
    walk.rename("g.bf16.next", "g.bf16")


def _attention_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """o_proj's, SDPA's, RoPE's and the q, k, v projections' backward (the order of the generated code's later layers)."""
    T, h, q, kv = x.T, x.h, x.q, x.kv
    _gw(walk, x, k, "o")
    walk.alloc(f"{k}.g_attn", T * q * BF16, T_, "o_proj input gradient")
    walk.free("g.bf16", f"{k}.o.wcopy")
    _weight_grad(walk, x, k, "o")
    _sdpa_backward(walk, x, k)
    walk.free(f"{k}.attn")
    walk.free(f"{k}.g_attn")
    _gw(walk, x, k, "v")
    walk.alloc(f"{k}.gin_v", T * h * BF16, T_, "v_proj input gradient")
    walk.free(f"{k}.g_v", f"{k}.v.wcopy")
    walk.alloc(f"{k}.v.grad", h * kv * F32, G, "weight gradients (fp32)")
    walk.alloc(f"{k}.g_kproj", T * kv * BF16, T_, "RoPE backward (k)")
    walk.free(f"{k}.g_k", f"{k}.v.gw")
    _gw(walk, x, k, "k")
    walk.alloc(f"{k}.gin_k", T * h * BF16, T_, "k_proj input gradient")
    walk.free(f"{k}.k.wcopy", f"{k}.g_kproj")
    walk.alloc(f"{k}.k.grad", h * kv * F32, G, "weight gradients (fp32)")
    walk.alloc(f"{k}.g_qproj", T * q * BF16, T_, "RoPE backward (q)")
    walk.free(f"{k}.g_q", f"{k}.k.gw")
    _gw(walk, x, k, "q")
    walk.free(f"{k}.n1.out")
    walk.alloc(f"{k}.gin_q", T * h * BF16, T_, "q_proj input gradient")
    walk.free(f"{k}.q.wcopy")


def _sdpa_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """SDPA's fused backward: dq, dk, dv (k and v at their own heads); its saved q, k, v and logsumexp freed."""
    walk.alloc(f"{k}.g_q", x.T * x.q * BF16, T_, "SDPA backward dq")
    walk.alloc(f"{k}.g_k", x.T * x.kv * BF16, T_, "SDPA backward dk")
    walk.alloc(f"{k}.g_v", x.T * x.kv * BF16, T_, "SDPA backward dv")
    walk.free(f"{k}.lse", f"{k}.k", f"{k}.q", f"{k}.v")


def layer_backward(walk: Walk, x: StepShapes, i: int) -> None:
    """A compiled layer's backward after the first (the generated code's order for every layer but the first)."""
    k = f"L{i}"
    _mlp_backward(walk, x, k)
    _norm_backward(walk, x, k, "n2", f"{k}.x1", (f"{k}.gin_gate", f"{k}.gin_up"), "up")
    _attention_backward(walk, x, k)
    # q's RoPE gradient dies in the kernel: the bf16 stream gradient is written into it where q's width is h's
    inplace = f"{k}.g_qproj" if x.q == x.h else ""
    _norm_backward(walk, x, k, "n1", f"{k}.x", (f"{k}.gin_v", f"{k}.gin_k", f"{k}.gin_q", f"{k}.g_qproj"), "q", inplace)


def first_layer_backward(walk: Walk, x: StepShapes, tied: bool) -> None:
    """The first layer's backward, which the generated code orders otherwise: the input gradients first (x1 = embedding + o
    recomputed in the norms' kernels), the norm weights' gradients together, then o's, v's, k's and q's weight gradients, and
    last the embedding's gradient (tied: the head's bf16 gradient added in) with q's fp32 cast."""
    T, h, q, kv, V = x.T, x.h, x.q, x.kv, x.V
    k = "L0"
    _mlp_backward(walk, x, k)
    walk.alloc(f"{k}.up.grad", h * x.f * F32, G, "weight gradients (fp32)")
    walk.alloc("g.bf16.next", T * h * BF16, T_, "stream gradient in bf16 (o_proj's output gradient)")
    walk.free(f"{k}.up.gw")
    walk.rename("g.bf16.next", "g.bf16")
    walk.alloc(f"{k}.g_attn", T * q * BF16, T_, "o_proj input gradient")
    walk.free(f"{k}.o.wcopy")
    _sdpa_backward(walk, x, k)
    walk.free(f"{k}.g_attn")
    walk.alloc(f"{k}.gin_v", T * h * BF16, T_, "v_proj input gradient")
    walk.free(f"{k}.v.wcopy")
    walk.alloc(f"{k}.g_kproj", T * kv * BF16, T_, "RoPE backward (k)")
    walk.free(f"{k}.g_k")
    walk.alloc(f"{k}.gin_k", T * h * BF16, T_, "k_proj input gradient")
    walk.free(f"{k}.k.wcopy")
    walk.alloc(f"{k}.g_qproj", T * q * BF16, T_, "RoPE backward (q)")
    walk.free(f"{k}.g_q")
    walk.alloc(f"{k}.gin_q", T * h * BF16, T_, "q_proj input gradient")
    walk.free(f"{k}.q.wcopy")
    walk.alloc(f"{k}.n2.grad", h * F32, G, "weight gradients (fp32)")
    walk.alloc(f"{k}.n1.grad", h * F32, G, "weight gradients (fp32)")
    walk.free(f"{k}.gin_gate", f"{k}.gin_up", f"{k}.o", f"{k}.n2.rstd")
    _gw(walk, x, k, "o")
    walk.free("g.bf16", f"{k}.attn")
    _weight_grad(walk, x, k, "o")
    _gw(walk, x, k, "v")
    walk.free(f"{k}.g_v")
    _weight_grad(walk, x, k, "v")
    _gw(walk, x, k, "k")
    walk.free(f"{k}.g_kproj")
    _weight_grad(walk, x, k, "k")
    _gw(walk, x, k, "q")
    walk.free(f"{k}.g_qproj", f"{k}.n1.out")
    walk.phase = "backward: embedding"
    walk.alloc(f"{k}.q.grad", h * q * F32, G, "weight gradients (fp32)")
    walk.alloc("g_embedding", V * h * F32, G, "embedding gradient (the first layer's input gradient scattered)")
    walk.alloc("embedding.grad", V * h * F32, G, "weight gradients (fp32)" if not tied else "embedding gradient + the tied head's")
    walk.free("g", f"{k}.gin_v", f"{k}.gin_k", f"{k}.q.gw", f"{k}.gin_q", "g_embedding", "head.gw", "emb", f"{k}.n1.rstd")


def walk_backward(walk: Walk, x: StepShapes, layers: int, tied: bool) -> None:
    """The compiled backward from the loss to the embedding."""
    T, h, V = x.T, x.h, x.V
    walk.phase = "backward: loss (compiled cross_entropy)"
    walk.alloc("loss.rows", T * F32, T_, "compiled loss backward: a per-row fp32 buffer")
    walk.rename("logits", "g_logits", "logits' gradient (bf16, in the logits' buffer)", X)
    walk.free("loss.amax", "labels", "loss.count", "loss.lse")
    walk.phase = "backward: LM head"
    walk.alloc("head.gw", V * h * BF16, G if tied else T_, "LM head weight gradient (bf16" + (", added into the embedding's at the end)" if tied else ")"))
    walk.free("final.n.out")
    walk.alloc("g.head", T * h * BF16, T_, "LM head input gradient")
    walk.free("g_logits", "head.wcopy")
    if not tied:
        walk.alloc("head.grad", V * h * F32, G, "weight gradients (fp32)")
        walk.free("head.gw")
    walk.alloc("final.grad", h * F32, G, "weight gradients (fp32)")
    walk.rename("final.x", "g", "the stream's gradient (fp32, in the last layer's output buffer)", T_)
    walk.alloc("g.bf16", T * h * BF16, T_, "stream gradient in bf16 (down_proj's output gradient)")
    walk.free("final.n.rstd", "g.head")
    for i in reversed(range(layers)):
        walk.phase = f"backward: layer {i + 1} of {layers}"
        if i:
            layer_backward(walk, x, i)
        else:
            first_layer_backward(walk, x, tied)
    walk.free("loss.rows")


def compiled_walk_gaps(model: TransformerModel, precision: Precision, recompute: Recompute) -> list[str]:
    """What of this step the compiled walk has not read (none: it follows it); where any, the eager walk stands."""
    return [what for what, off in (("--precision other than mixed-bf16 (autocast over fp32 weights)", precision is not Precision.MIXED_BF16),
                                   ("--recompute full (the compiled recomputation is not read)", recompute is not Recompute.NONE),
                                   ("routed experts", model.moe is not None), ("Qwen3's q/k norms", model.qk_norm)) if off]  # fmt: skip


def walk_compiled_step(walk: Walk, model: TransformerModel, x: StepShapes) -> None:
    """The compiled forward and backward after the step's set-up (weights, states, ids: memory_timeline._hf_walk)."""
    walk_forward(walk, x, model.layers)
    walk_backward(walk, x, model.layers, model.tied_embeddings)
