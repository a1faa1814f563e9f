"""The `hf` kernel set: a Hugging Face Llama layer as transformers runs it eagerly under autocast.

Hugging Face's Trainer / accelerate train in bf16 as torch.autocast(bfloat16) over the model's fp32
weights (presets/frameworks/hf.yaml). transformers' Llama code (src/transformers/models/llama/
modeling_llama.py and integrations/sdpa_attention.py, transformers 5.x: the version of the shared
H200 steps) then launches one kernel per ATen op, and autocast adds its casts:

- the residual stream is fp32 (the embedding's output), so LlamaRMSNorm's `.to(float32)` and
  `.to(input_dtype)` are no-ops and the norm runs in fp32: pow, mean, + eps, rsqrt, x * rstd,
  weight * x (6 kernels; backward 13 and autograd's adds of the input's gradients);
- every nn.Linear casts its input to bf16 on each call (q, k and v each cast the same normed input,
  gate and up the same) and its fp32 weight once per forward (autocast's cache of leaf tensors);
  backward casts each input gradient back to fp32 and each bf16 weight gradient to fp32;
- rotary embedding as apply_rotary_pos_emb: q * cos + rotate_half(q) * sin with cos / sin in fp32
  (LlamaRotaryEmbedding returns them in the hidden states' dtype): mul, neg, cat, mul, add per
  tensor, the products in fp32 by type promotion; SDPA casts q and k back to bf16;
- SDPA with enable_gqa (no repeat_kv copies: use_gqa_in_sdpa, no attention mask) as one fused
  attention kernel per pass;
- SwiGLU as down_proj(act_fn(gate_proj(x)) * up_proj(x)): silu, mul; the residual adds in fp32;
- the loss (ForCausalLMLoss): logits.float(), log_softmax over the vocabulary in fp32
  (cunn_SoftMaxForward: a max pass, a sum pass and the write pass over each row, which does not fit
  in shared memory: 3 reads and a write; backward a sum pass and the write: 3 reads and a write),
  nll_loss; backward the fp32 gradient filled and scattered, cast back to bf16.

Every kernel of a layer and its bytes are held against a TorchDispatchMode record of the same layer
under CPU autocast (tests/ground_truth/test_torch_hf_kernels.py with tests/ground_truth/hf_llama.py).

Each kernel also names the TensorIterator path CUDA runs it on (parcalc.core.timing.elementwise: broadcast
products such as x * rstd and weight * x, transposed views, casts from bf16 to fp32, rotary's bf16 x fp32
products and cat), as a profiler trace of the step names its kernels (tests/test_step_parts.py holds each
path's kernels against the shared H200 traces).
"""

from __future__ import annotations

from typing import Any

from parcalc.core.timing.elementwise import CAST, CAT, REDUCE, STRIDED, STRIDED_CAST

F32 = 4.0  # the residual stream, the norms, the rotary products and the loss are fp32 under autocast over fp32 weights
HF_SOURCE = (
    "Hugging Face transformers (src/transformers/models/llama/modeling_llama.py: LlamaRMSNorm, apply_rotary_pos_emb / "
    "rotate_half, LlamaMLP, LlamaDecoderLayer; integrations/sdpa_attention.py: enable_gqa without a mask; loss/loss_utils.py "
    "ForCausalLMLoss: logits.float()) under torch.autocast(bfloat16) over fp32 weights: an fp32 residual stream and fp32 norms, "
    "a bf16 cast of each linear's input per call and of its weight per forward, rotary products in fp32, the loss in fp32 "
    "(recorded under CPU autocast: tests/ground_truth/hf_llama.py)"
)


def hf_applies(model: Any) -> bool:
    """The HF set times dense RMSNorm / RoPE Llama-family layers without biases; others keep the eager set."""
    from parcalc.core.choices import Norm

    return (model.norm is Norm.RMSNORM and not model.bias and model.mla is None and model.moe is None and model.window is None
            and not model.post_norms)


# RMSNorm's kernels that are not vectorised: the broadcast products (x * rstd[rows, 1], weight[h] * x, and their
# gradients), mean's gradient (an expand, then a division), the two sums (reductions over h and over the rows)
NORM_PATHS = {"mean": REDUCE, "mul_rstd": STRIDED, "mul_weight": STRIDED, "mul_weight.dx": STRIDED, "sum_dw": REDUCE,
              "mul_rstd.dx": STRIDED, "sum_drstd": REDUCE, "mean.div": STRIDED}  # fmt: skip


def hf_norm(mem: Any, key: str, rows: int, h: int, contributions: int) -> None:
    """LlamaRMSNorm on an fp32 input: 6 kernels forward, 13 backward, and autograd's adds of the input's
    `contributions` gradients (the residual branch's, and the norm's direct and variance paths: contributions - 1 adds)."""
    f, n, r = F32, rows * h, rows
    forward = (("pow", 2 * f * n), ("mean", f * n + f * r), ("add_eps", 2 * f * r), ("rsqrt", 2 * f * r),
               ("mul_rstd", 2 * f * n + f * r), ("mul_weight", 2 * f * n + f * h))  # fmt: skip
    backward = (("mul_weight.dx", 2 * f * n + f * h), ("mul_weight.dw", 3 * f * n), ("sum_dw", f * n + f * h),
                ("mul_rstd.drstd", 3 * f * n), ("mul_rstd.dx", 2 * f * n + f * r), ("sum_drstd", f * n + f * r),
                ("rsqrt.pow", 2 * f * r), ("rsqrt.scale", 2 * f * r), ("rsqrt.mul", 3 * f * r), ("mean.div", f * r + f * n),
                ("pow.pow", 2 * f * n), ("pow.scale", 2 * f * n), ("pow.mul", 3 * f * n))  # fmt: skip
    per_row = ("add_eps", "rsqrt", "rsqrt.pow", "rsqrt.scale", "rsqrt.mul")
    for op, traffic in forward:
        mem.fwd(f"{key}.{op}", traffic, f"[{rows}]" if op in per_row else f"[{rows}×{h}]", NORM_PATHS.get(op, ""), n)
    for op, traffic in backward:
        mem.bwd(f"{key}.{op}.bwd", traffic, f"[{rows}]" if op in per_row else f"[{rows}×{h}]", NORM_PATHS.get(op, ""), n)
    for i in range(contributions - 1):
        mem.bwd(f"{key}.add_grads.bwd.{i}", 3 * f * n, f"[{rows}×{h}]")


def hf_linear(mem: Any, key: str, tokens: int, k: int, n: int, cast_input: bool) -> None:
    """Autocast's kernels around one nn.Linear (y = x W^T, W [n, k] fp32): the weight's bf16 cast (forward) and its
    gradient's fp32 cast (backward); with `cast_input` (an fp32 input), the input's cast and its gradient's cast back."""
    e, f = mem.e, F32
    mem.fwd(f"{key}.weight.to_bf16", (f + e) * k * n, f"[{n}×{k}]")
    mem.bwd(f"{key}.weight_grad.to_fp32.bwd", (e + f) * k * n, f"[{n}×{k}]", CAST, k * n)  # bf16 -> fp32: the cast path
    if cast_input:
        mem.fwd(f"{key}.input.to_bf16", (f + e) * tokens * k, f"[{tokens}×{k}]")  # fp32 -> bf16: vectorised
        mem.bwd(f"{key}.input_grad.to_fp32.bwd", (e + f) * tokens * k, f"[{tokens}×{k}]", CAST, tokens * k)


def hf_rope(mem: Any, name: str, tokens: int, seq: int, width: int, head_dim: int) -> None:
    """apply_rotary_pos_emb on one tensor of `width` values per token (bf16, from its projection): x * cos,
    rotate_half (neg of one half, cat), * sin, add: the products in fp32 (cos / sin fp32 [s, d], read once each);
    backward the two products' gradients, their casts back to bf16, the neg, cat's slices (slice_backward
    writes a zeroed full tensor), and autograd's adds."""
    e, f, n = mem.e, F32, tokens * width
    table, shape, half = F32 * seq * head_dim, f"[{tokens}×{width}]", n // 2
    # the transposed (b, heads, s, d) view of the projection and the [s, d] tables broadcast: strided paths (the
    # bf16 x fp32 products with a cast); rotate_half's cat; slice_backward's copies into a zeroed tensor
    for op, traffic, path, elements in (("mul_cos", e * n + table + f * n, STRIDED_CAST, n), ("neg", 2 * e * half, STRIDED, half),
                                        ("cat", 2 * e * n, CAT, n), ("mul_sin", e * n + table + f * n, STRIDED_CAST, n),
                                        ("add", 3 * f * n, STRIDED, n)):  # fmt: skip
        mem.fwd(f"rope.{name}.{op}", traffic, shape, path, elements)
    for op, traffic, path, elements in (("mul_sin", 2 * f * n + table, STRIDED, n), ("mul_sin.to_bf16", (f + e) * n, "", 0),
                                        ("neg", 2 * e * half, STRIDED, half), ("slice_x1", e * half + e * n, STRIDED, half),
                                        ("slice_x2", e * half + e * n, STRIDED, half), ("add_slices", 3 * e * n, STRIDED, n),
                                        ("mul_cos", 2 * f * n + table, STRIDED, n), ("mul_cos.to_bf16", (f + e) * n, "", 0),
                                        ("add_grads", 3 * e * n, "", 0)):  # fmt: skip
        mem.bwd(f"rope.{name}.{op}.bwd", traffic, shape, path, elements)


def hf_layer(mem: Any, linear: Any, attention: Any, model: Any, tokens: int, seq: int, tp: int) -> None:
    """One LlamaDecoderLayer's kernels in execution order: `linear(key, m, k, n)` adds a GEMM with its backward,
    `attention(q_w, kv_w)` the fused attention kernels, `mem` the memory-bound kernels (forward and backward)."""
    h, hd = model.hidden, model.head_dim
    heads, kv = model.heads // tp, max(model.kv_heads // tp, 1)
    q_w, kv_w, f_w = heads * hd, kv * hd, model.ffn_hidden // tp
    e, f = mem.e, F32
    n = tokens * h
    hf_norm(mem, "input_layernorm", tokens, h, 3)  # the residual branch's, the direct and the variance paths' gradients
    for key, width in (("q_proj", q_w), ("k_proj", kv_w), ("v_proj", kv_w)):
        hf_linear(mem, key, tokens, h, width, cast_input=True)
        linear(key, tokens, h, width)
    mem.bwd("qkv.add_grads.bwd.0", 3 * f * n, f"[{tokens}×{h}]")  # three fp32 gradients of the normed input: 2 adds
    mem.bwd("qkv.add_grads.bwd.1", 3 * f * n, f"[{tokens}×{h}]")
    mem.bwd("q_proj.grad.contiguous.bwd", 2 * e * tokens * q_w, f"[{tokens}×{q_w}]", STRIDED, tokens * q_w)  # transposed views'
    mem.bwd("k_proj.grad.contiguous.bwd", 2 * e * tokens * kv_w, f"[{tokens}×{kv_w}]", STRIDED, tokens * kv_w)  # gradients made contiguous
    if model.position.value == "rope":
        hf_rope(mem, "q", tokens, seq, q_w, hd)
        hf_rope(mem, "k", tokens, seq, kv_w, hd)
        mem.fwd("sdpa.q.to_bf16", (f + e) * tokens * q_w, f"[{tokens}×{q_w}]")  # SDPA under autocast: fp32 q, k cast
        mem.fwd("sdpa.k.to_bf16", (f + e) * tokens * kv_w, f"[{tokens}×{kv_w}]")
        mem.bwd("sdpa.q_grad.to_fp32.bwd", (e + f) * tokens * q_w, f"[{tokens}×{q_w}]", CAST, tokens * q_w)
        mem.bwd("sdpa.k_grad.to_fp32.bwd", (e + f) * tokens * kv_w, f"[{tokens}×{kv_w}]", CAST, tokens * kv_w)
    attention(q_w, kv_w)
    hf_linear(mem, "o_proj", tokens, q_w, h, cast_input=False)
    linear("o_proj", tokens, q_w, h)
    mem.bwd("o_proj.output_grad.to_bf16.bwd", (f + e) * n, f"[{tokens}×{h}]")  # the fp32 residual gradient into bf16
    mem.fwd("residual1", (f + e + f) * n, f"[{tokens}×{h}]", CAST, n)  # fp32 + bf16 -> fp32
    hf_norm(mem, "post_attention_layernorm", tokens, h, 3)
    for key in ("gate_proj", "up_proj"):
        hf_linear(mem, key, tokens, h, f_w, cast_input=True)
        linear(key, tokens, h, f_w)
    mem.bwd("mlp.add_grads.bwd", 3 * f * n, f"[{tokens}×{h}]")
    mid = f"[{tokens}×{f_w}]"
    mem.fwd("mlp.silu", 2 * e * tokens * f_w, mid)
    mem.bwd("mlp.silu.bwd", 3 * e * tokens * f_w, mid)
    mem.fwd("mlp.mul", 3 * e * tokens * f_w, mid)
    mem.bwd("mlp.mul.d_act.bwd", 3 * e * tokens * f_w, mid)
    mem.bwd("mlp.mul.d_up.bwd", 3 * e * tokens * f_w, mid)
    hf_linear(mem, "down_proj", tokens, f_w, h, cast_input=False)
    linear("down_proj", tokens, f_w, h)
    mem.bwd("down_proj.output_grad.to_bf16.bwd", (f + e) * n, f"[{tokens}×{h}]")
    mem.fwd("residual2", (f + e + f) * n, f"[{tokens}×{h}]", CAST, n)


def hf_ends(mem: Any, linear: Any, model: Any, tokens: int, seq: int, vocab: int) -> None:
    """Embedding, rotary table, final norm, tied or untied LM head and ForCausalLMLoss as transformers runs them under
    autocast: the fp32 embedding gathered into the fp32 stream; LlamaRotaryEmbedding's fp32 cos / sin per forward; the
    final LlamaRMSNorm; the head's bf16 logits; logits.float(), log_softmax, nll_loss; backward nll_loss's fp32 gradient
    (a fill, a scatter), log_softmax's, the cast back to bf16, the embedding's gradient (a zeroed fp32 table, a
    scatter-add) and, tied, the add of the head's weight gradient into it."""
    e, f, h = mem.e, F32, model.hidden
    n, logits = tokens * h, tokens * vocab
    table = f"[{vocab}×{h}]"
    mem.fwd("embedding", 8.0 * tokens + 2 * f * n, f"[{tokens}×{h}]")  # int64 ids, the gathered fp32 rows
    mem.bwd("embedding.zero.bwd", f * vocab * h, table)
    mem.bwd("embedding.scatter_add.bwd", 8.0 * tokens + 2 * f * n, f"[{tokens}×{h}]")
    if model.position.value == "rope":
        rows = f"[{seq}×{model.head_dim}]"
        for op in ("cat", "cos", "sin"):
            mem.fwd(f"rotary.{op}", 2 * f * seq * model.head_dim, rows)
    hf_norm(mem, "norm", tokens, h, 2)
    hf_linear(mem, "lm_head", tokens, h, vocab, cast_input=True)
    linear("lm_head", tokens, h, vocab)
    if model.tied_embeddings:
        mem.bwd("lm_head.tied.add_grads.bwd", 3 * f * vocab * h, table)
    shape = f"[{tokens}×{vocab}]"
    mem.fwd("loss.logits.to_fp32", (e + f) * logits, shape, CAST, logits)
    mem.fwd("loss.log_softmax", 4 * f * logits, shape)
    mem.fwd("loss.nll_loss", (8.0 + f) * tokens, f"[{tokens}]")
    mem.bwd("loss.nll_loss.fill.bwd", f * logits, shape)
    mem.bwd("loss.nll_loss.scatter.bwd", (8.0 + f) * tokens, f"[{tokens}]")
    mem.bwd("loss.log_softmax.bwd", 4 * f * logits, shape)
    mem.bwd("loss.logits.to_bf16.bwd", (f + e) * logits, shape)
