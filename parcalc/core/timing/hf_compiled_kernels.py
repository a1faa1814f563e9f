"""The `hf` kernel set compiled: transformers' LlamaForCausalLM under `torch.compile` (the default mode, the whole model with
its loss, as the Trainer's `torch_compile=True` / accelerate's prepare does it: autocast(bfloat16) over fp32 weights inside
the compiled forward).

What Inductor (torch 2.13) makes of it was read from its scheduler on the CPU with the fusion rules of its CUDA backend
(tests/ground_truth/test_torch_hf_compile.py: a scheduler with TritonScheduling, torch/_inductor/codegen/simd.py
SIMDScheduling.can_fuse, built over the same IR; its fused nodes between the extern kernels and Inductor's own count of each
one's HBM bytes, Scheduler.get_read_write_buffers_sizes). One graph forward and one backward, no graph break; between two
extern kernels (the GEMMs, SDPA) one kernel per fusion group, each reading its inputs once and writing its outputs once:

- forward, per layer (12): the residual add and the RMSNorm after it as one reduction kernel (a pointwise node of numel
  T h fuses into a reduction of numel T and rnumel h), writing the fp32 sum, the fp32 1/rms per token and the bf16 normed
  input, read once by all three (or both) projections: autocast's per-call input casts are gone; each weight's bf16 cast
  (7: an fp32 parameter has no producer to fuse with); rotary embedding as one kernel per tensor (q, k): cos / sin computed
  in the kernel from inv_freq and the position, rotate_half's cat a pointwise cat (lowering.cat on a GPU; the CPU always
  makes a ConcatKernel), the products in fp32 in registers, the bf16 result written once; SwiGLU's silu and mul (one);
- backward, per layer (14): each weight gradient's fp32 cast (7), SwiGLU's backward (one: both input gradients), rotary's
  per tensor, and each norm's backward as two reductions: the weight gradient (a sum over tokens) and the input gradient
  (a sum over the hidden dimension) with the adds of the projections' input gradients and of the residual branch's
  gradient fused in, writing the fp32 gradient of the stream and its bf16 copy for the linear before it (o_proj's,
  the previous layer's down_proj's output gradient);
- the loss, traced in (ForCausalLMLoss's logits.float(), log_softmax, nll_loss): the fp32 logits are never written; one
  online-softmax reduction reads the bf16 logits once (max and log-sum-exp per row, config.online_softmax), one kernel
  gathers each row's label logit and takes the mean; backward one kernel reads the bf16 logits and writes their gradient.

On a GPU, at training sizes, each norm's two backward reductions become one kernel and a small one: Inductor's mix-order
reduction (torch/_inductor/scheduler.py MixOrderReduction.can_fuse, GPU Triton only, so not in the CPU's ground truth)
fuses the input-gradient reduction over h with the weight-gradient reduction over the tokens, which lowering has split
(ir.py create_multilayer), where T h >= 5 x 2^20, T >= 2 h, T >= 4096 and h <= 16,384: one persistent kernel reads the
gradients, the input and 1/rms once, writes the input gradient and each block of split_size rows' partial weight
gradients (fp32: codegen/simd.py _pick_split_size, split_size = clamp(last_power_of_2(T / (8 SMs)), 16, 128)), and the
split reduction's last layer sums the partials (mix_order_applies, mix_order_norm_backward). Not modelled: the second
layer of a split weight-gradient reduction where the mix-order one does not apply (a launch), the L2 re-read of a row
longer than a persistent reduction. At the model's ends parcalc charges steady-state kernels where the first layer's
differ: the embedding's gather fuses into the first norm (its ids and rows read in place of the stream and a branch:
2 T h - 8 T bytes fewer than charged), and that norm's input gradient is scatter-added into the embedding's gradient in
the same kernel (parcalc: a separate scatter-add and a bf16 copy nobody reads, 6 T h bytes and a launch over); tied, the
head's bf16 weight gradient is added into the table's gradient with its fp32 cast fused in.
"""

from __future__ import annotations

from typing import Any

from parcalc.core.timing.hf_kernels import F32

HF_COMPILED_SOURCE = (
    "transformers' LlamaForCausalLM compiled whole (torch.compile, default mode, the loss traced in, autocast(bfloat16) over "
    "fp32 weights: the Trainer's torch_compile) as TorchInductor (torch 2.13) fuses it: per layer 12 generated kernels forward "
    "(residual add + RMSNorm + bf16 cast, one per norm; 7 weight casts; rotary per q / k with cos, sin and rotate_half in the "
    "kernel; silu * mul) and 14 backward (7 weight-gradient casts, SwiGLU, rotary per q / k, each norm's weight- and "
    "input-gradient reductions with the gradient adds and the next linear's bf16 cast fused in, at training sizes one "
    "mix-order reduction and the sum of its partials); the loss reads the bf16 "
    "logits once forward (online softmax) and once backward, never writing them in fp32; each kernel HBM-bound on the bytes "
    "Inductor counts (Scheduler.get_read_write_buffers_sizes), read from its scheduler with the CUDA backend's fusion rules "
    "(TritonScheduling) on the CPU (tests/ground_truth/test_torch_hf_compile.py; parcalc.core.timing.hf_compiled_kernels)"
)


def compiled_norm(mem: Any, key: str, rows: int, h: int) -> None:
    """The residual add and LlamaRMSNorm as one reduction kernel: read the fp32 stream, the sublayer's bf16 output added to it
    and the fp32 weight; write the fp32 sum (saved for backward, the next residual's input), the fp32 1/rms per row and the
    bf16 normed input of the projections."""
    e, f, n = mem.e, F32, rows * h
    mem.fwd(key, (f + e) * n + f * h + (f + e) * n + f * rows, f"[{rows}×{h}]")


def compiled_norm_backward(mem: Any, key: str, rows: int, h: int, grads: int, residual: bool) -> None:
    """RMSNorm's backward as two reductions: the weight gradient (sum over rows of dy * x * rstd: read the `grads` bf16
    gradients of the normed output, which it adds, the fp32 input and 1/rms; write h fp32) and the input gradient (the same
    reads, the weight, and with `residual` the fp32 gradient of the residual branch added in; write the fp32 gradient of the
    stream and its bf16 copy, the output gradient of the linear before it: down_proj's or o_proj's, fused in); at training
    sizes on a GPU one mix-order reduction instead (mix_order_norm_backward)."""
    if mix_order_applies(rows, h):
        mix_order_norm_backward(mem, key, rows, h, grads, residual)
        return
    e, f, n = mem.e, F32, rows * h
    shared = grads * e * n + f * n + f * rows
    mem.bwd(f"{key}.dw.bwd", shared + f * h, f"[{rows}×{h}]")
    mem.bwd(f"{key}.dx.bwd", shared + f * h + (f * n if residual else 0.0) + (f + e) * n, f"[{rows}×{h}]")


# MixOrderReduction.can_fuse's sizes (torch 2.13, non-strict mode off): below them Inductor leaves the two reductions apart
MIX_ORDER_MIN_ELEMENTS = 5 * 2**20
MIX_ORDER_MIN_ROWS = 4096
MIX_ORDER_MAX_COLUMNS = 16 * 1024


def mix_order_applies(rows: int, h: int) -> bool:
    """Whether Inductor fuses a norm's weight- and input-gradient reductions into one mix-order kernel (the module docstring)."""
    return rows * h >= MIX_ORDER_MIN_ELEMENTS and rows >= 2 * h and rows >= MIX_ORDER_MIN_ROWS and h <= MIX_ORDER_MAX_COLUMNS


def mix_order_split(rows: int, sms: int) -> int:
    """Rows per partial weight gradient: SIMDScheduling._codegen_mix_order_reduction's _pick_split_size, the last power of 2
    of rows / (8 SMs), clamped to [16, 128]."""
    per = max(rows // max(8 * sms, 1), 1)
    return min(max(1 << (per.bit_length() - 1), 16), 128)


def mix_order_norm_backward(mem: Any, key: str, rows: int, h: int, grads: int, residual: bool) -> None:
    """RMSNorm's backward as a mix-order reduction: one kernel reads what both reductions read once and writes the input
    gradient (fp32 and its bf16 copy) and the partial weight gradients (fp32, one row of h per split_size tokens); the
    weight gradient's last layer sums them."""
    e, f, n = mem.e, F32, rows * h
    partials = f * h * -(-rows // mix_order_split(rows, mem.sms))
    reads = grads * e * n + f * n + f * rows + f * h + (f * n if residual else 0.0)
    mem.bwd(f"{key}.dx+dw.bwd", reads + (f + e) * n + partials, f"[{rows}×{h}]")
    mem.bwd(f"{key}.dw.bwd", partials + f * h, f"[{h}]")


def weight_cast(mem: Any, key: str, k: int, n: int) -> None:
    """Autocast's bf16 copy of an fp32 weight (forward) and the fp32 cast of its bf16 gradient (backward): one kernel each."""
    e, f = mem.e, F32
    mem.fwd(f"{key}.weight.to_bf16", (f + e) * k * n, f"[{n}×{k}]")
    mem.bwd(f"{key}.weight_grad.to_fp32.bwd", (e + f) * k * n, f"[{n}×{k}]")


def compiled_rope(mem: Any, name: str, tokens: int, width: int, head_dim: int) -> None:
    """apply_rotary_pos_emb on one bf16 tensor as one kernel each way: read it and inv_freq (head_dim / 2 fp32), write it."""
    e, n = mem.e, tokens * width
    inv_freq = F32 * head_dim // 2
    mem.fwd(f"rope.{name}", 2 * e * n + inv_freq, f"[{tokens}×{width}]")
    mem.bwd(f"rope.{name}.bwd", 2 * e * n + inv_freq, f"[{tokens}×{width}]")


def hf_compiled_layer(mem: Any, linear: Any, attention: Any, model: Any, tokens: int, tp: int) -> None:
    """One LlamaDecoderLayer compiled, in execution order: `linear(key, m, k, n)` adds a GEMM with its backward, `attention(q_w,
    kv_w)` SDPA's fused kernels, `mem` the generated kernels (forward and backward). Its first norm carries the add of the
    previous layer's MLP output into the stream (steady state: every layer alike)."""
    h, hd = model.hidden, model.head_dim
    heads, kv = model.heads // tp, max(model.kv_heads // tp, 1)
    q_w, kv_w, f_w = heads * hd, kv * hd, model.ffn_hidden // tp
    e = mem.e
    compiled_norm(mem, "residual2+input_layernorm", tokens, h)
    compiled_norm_backward(mem, "input_layernorm", tokens, h, 3, residual=True)  # q's, k's and v's input gradients
    for key, width in (("q_proj", q_w), ("k_proj", kv_w), ("v_proj", kv_w)):
        weight_cast(mem, key, h, width)
        linear(key, tokens, h, width)
    if model.position.value == "rope":
        compiled_rope(mem, "k", tokens, kv_w, hd)
        compiled_rope(mem, "q", tokens, q_w, hd)
    attention(q_w, kv_w)
    weight_cast(mem, "o_proj", q_w, h)
    linear("o_proj", tokens, q_w, h)
    compiled_norm(mem, "residual1+post_attention_layernorm", tokens, h)
    compiled_norm_backward(mem, "post_attention_layernorm", tokens, h, 2, residual=True)  # gate's and up's
    for key in ("gate_proj", "up_proj"):
        weight_cast(mem, key, h, f_w)
        linear(key, tokens, h, f_w)
    mid = f"[{tokens}×{f_w}]"
    mem.fwd("mlp.silu_mul", 3 * e * tokens * f_w, mid)
    mem.bwd("mlp.silu_mul.bwd", 5 * e * tokens * f_w, mid)  # read d(out), gate, up; write d(gate), d(up)
    weight_cast(mem, "down_proj", f_w, h)
    linear("down_proj", tokens, f_w, h)


def hf_compiled_ends(mem: Any, linear: Any, model: Any, tokens: int, vocab: int) -> None:
    """The final norm (with the last layer's residual add), the LM head and ForCausalLMLoss compiled, and the embedding's
    backward: the head's bf16 weight cast (untied: its gradient's fp32 cast; tied: fused into the add into the embedding's
    gradient); the labels shifted (a pad of the int64 labels); one online-softmax pass over the bf16 logits (max and
    log-sum-exp per row), one that gathers the label's logit and takes the mean; backward one kernel that writes the bf16
    gradient of the logits. The embedding's forward gather is fused into the first norm (the module docstring)."""
    e, f, h = mem.e, F32, model.hidden
    n, logits = tokens * h, tokens * vocab
    table = f"[{vocab}×{h}]"
    mem.bwd("embedding.zero.bwd", f * vocab * h, table)
    mem.bwd("embedding.scatter_add.bwd", 8.0 * tokens + 2 * f * n, f"[{tokens}×{h}]")
    compiled_norm(mem, "residual2+norm", tokens, h)
    compiled_norm_backward(mem, "norm", tokens, h, 1, residual=False)
    mem.fwd("lm_head.weight.to_bf16", (f + e) * vocab * h, table)
    linear("lm_head", tokens, h, vocab)
    if model.tied_embeddings:
        # the head's bf16 gradient (its fp32 cast fused in) added to the table's fp32 gradient
        mem.bwd("lm_head.tied.add_grads.bwd", (e + f + f) * vocab * h, table)
    else:
        mem.bwd("lm_head.weight_grad.to_fp32.bwd", (e + f) * vocab * h, table)
    rows = f"[{tokens}]"
    mem.fwd("loss.shift_labels", 2 * 8.0 * tokens, rows)  # int64 labels padded by one and shifted
    # online softmax: the max and the log of the sum of exponentials per row; then the labels, each row's label logit (a
    # gather: Inductor's count takes the whole logits, the worst case of an indirect read) and its statistics, -log p
    # summed and divided by the count of labels: two fp32 scalars
    mem.fwd("loss.max_logsumexp", e * logits + 2 * f * tokens, f"[{tokens}×{vocab}]")
    mem.fwd("loss.nll_mean", 8.0 * tokens + e * tokens + 2 * f * tokens + 2 * f, rows)
    # backward: the labels (their mask), the statistics and the scalars in; the bf16 gradient of the logits out
    mem.bwd("loss.logits_grad.bwd", 2 * e * logits + 8.0 * tokens + 2 * f * tokens + 2 * f, f"[{tokens}×{vocab}]")
