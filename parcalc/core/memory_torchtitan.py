"""torchtitan's own model code in the FSDP2 step walk, under its activation-checkpointing policies.

parcalc.core.memory_fsdp walks a step under fully_shard; for the torchtitan profile the model code is torchtitan's
Llama Transformer (TT_SOURCES['model']), not transformers': bf16 residual stream (the embedding's gathered weight is
bf16), RoPE through complex numbers (.float(), a complex64 product, .type_as back), repeat_kv copying k and v to
every query head for grouped-query attention, SDPA, SwiGLU as w2(silu(w1(x)) * w3(x)), RMSNorm as
`_norm(x.float()).type_as(x) * weight` (the same ops as transformers' LlamaRMSNorm, so its walk is shared),
an untied output projection and train.py's loss: cross_entropy(pred.flatten(0, 1).float()), pred deleted before
backward.

Each block's checkpointing is one of torchtitan's (TT_SOURCES['ac']):
- "none": autograd keeps what the ops save;
- "full": checkpoint_wrapper (non-reentrant torch.utils.checkpoint): the block keeps its input only and recomputes
  its forward before its backward, stopping after the last tensor autograd saves (w2's input: early stop);
- "op": selective op checkpointing: create_selective_checkpoint_contexts with torchtitan's `_custom_policy`, which
  caches (MUST_SAVE) the outputs of the ops in `_save_list` except every second aten.mm: of the block's seven
  matmuls wq, wk, wv, wo, w1, w3, w2 the outputs of wq, wv, w1 and w2, and SDPA's output and logsumexp. The
  forward keeps the block input and that cache; the recomputation returns the cached outputs instead of running
  those ops again.
torchtitan's selective "k" (every k-th block fully checkpointed, the rest not) is a tuple of these per block.

Other models' blocks from torchtitan's later code (b5bcd76) take their place in this block: its MoE in place of the
FeedForward (parcalc.core.memory_torchtitan_moe), a MoE model's dense layers as this FeedForward (layer_shapes), Qwen3's
q_norm / k_norm before RoPE (head_norms_forward) and DeepSeek's latent attention in place of the attention
(parcalc.core.memory_torchtitan_mla).

Ground truth: FSDPMemTracker over this code (tests/ground_truth/tiny_torchtitan.py, test_torch_memory_torchtitan.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from parcalc.core import memory_torchao_float8 as float8
from parcalc.core.memory_block_walk import BlockWalk
from parcalc.core.memory_compiled_loss import compiled_loss_backward, compiled_loss_forward
from parcalc.core.memory_walk import (
    StepHooks,
    StepShapes,
    Walk,
    accumulated_grad,
    add_into,
    cross_entropy_backward,
    cross_entropy_forward,
    grad_of_weight,
    norm_forward,
)
from parcalc.core.model import TransformerModel

TITAN = "pytorch/torchtitan at 9dec370"
TT_SOURCES = {
    "model": (f"{TITAN} torchtitan/models/llama/model.py: apply_rotary_emb (xq.float() viewed as complex, times freqs_cis, "
              "view_as_real, type_as), repeat_kv (unsqueeze, expand, reshape: a copy when n_rep > 1), Attention.forward "
              "(F.scaled_dot_product_attention(is_causal=True), output.transpose(1, 2).contiguous()), FeedForward "
              "w2(F.silu(w1(x)) * w3(x)), TransformerBlock h = x + attention(attention_norm(x)); out = h + "
              "feed_forward(ffn_norm(h)), Transformer.forward (tok_embeddings, layers, norm, output; the freqs_cis "
              "buffer, complex64 max_seq_len x head_dim / 2); torchtitan/models/norms.py:96-101 RMSNorm"),
    "loss": (f"{TITAN} train.py:131-134 loss_fn: cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)); "
             "train.py:302-308: pred = model(input_ids); loss = loss_fn(pred, labels); del pred; loss.backward()"),
    "ac": (f"{TITAN} torchtitan/parallelisms/parallelize_llama.py:213-284: _save_list (aten.mm, SDPA flash and efficient, "
           "reduce_scatter_tensor, abs, max), _apply_ac_to_transformer_block: 'full' checkpoint_wrapper(block, "
           "preserve_rng_state=False); selective 'op' _custom_policy (MUST_SAVE the outputs of _save_list's ops except "
           "every second mm, PREFER_RECOMPUTE the rest) through create_selective_checkpoint_contexts; selective 'k' "
           "checkpoints every k-th block; train_configs/llama3_8b.toml: mode 'selective', selective_ac_option 'op'"),
    "norm_backward": ("pytorch/pytorch v2.13.0 tools/autograd/derivatives.yaml and torch/csrc/autograd/FunctionsManual.cpp: "
                      "mul (grad * other, grad * self summed to the broadcast input's shape by the engine), _to_copy (the "
                      "gradient cast back), rsqrt (-0.5 * grad * result^3), mean (grad expanded / n), pow_backward "
                      "(grad * (exponent * self.pow(exponent - 1)): its temporaries live until the expression ends)"),
    "sac_cache": ("pytorch/pytorch v2.13.0 torch/utils/checkpoint.py _CachingTorchDispatchMode: a MUST_SAVE op's outputs "
                  "are kept (detached) in the checkpoint's storage from the forward; _CachedTorchDispatchMode returns them "
                  "in the recomputation instead of running the op; _checkpoint_early_stop: the recomputation stops once "
                  "every tensor autograd saves has been repacked"),
    "tp": (f"{TITAN} torchtitan/parallelisms/parallelize_llama.py:113-199 apply_tp: tok_embeddings RowwiseParallel(input "
           "Replicate, output Shard(1)); norm SequenceParallel; output ColwiseParallel(input Shard(1), output Shard(-1), "
           "use_local_output=False) under loss parallel (train.py's train_context, utils.py get_train_context: loss_parallel()); "
           "each block: attention_norm / ffn_norm SequenceParallel, PrepareModuleInput(Shard(1) -> Replicate) on attention and "
           "feed_forward, wq / wk / wv / w1 / w3 ColwiseParallel, wo / w2 RowwiseParallel(output Shard(1))"),
    "tp_collectives": ("pytorch/pytorch v2.13.0 torch/distributed/_functional_collectives.py all_gather_single (all_gather_into_tensor, "
                       "then torch/_utils.py _maybe_view_chunk_cat: a view when the gathered dim 0 is the group (batch 1), else "
                       "torch.cat of the chunks, a copy) and reduce_scatter_single (_chunk_or_narrow_cat: torch.cat of the chunks "
                       "along dim 0, always a copy, then reduce_scatter_tensor); a RowwiseParallel output's backward all-gathers "
                       "its gradient, a PrepareModuleInput's Replicate input's backward reduce-scatters the partial sum"),
    "tp_accumulate": ("pytorch/pytorch v2.13.0 torch/csrc/autograd/input_buffer.cpp can_accumulate_inplace: a gradient is added "
                      "in place only into a plain tensor (not a tensor subclass such as DTensor) that nothing else holds; under "
                      "TP the partial input gradients of wq / wk / wv and w1 / w3 and the norms' gradients are DTensors, added "
                      "out of place"),
    "loss_parallel": ("pytorch/pytorch v2.13.0 torch/distributed/tensor/parallel/loss.py: _log_softmax (amax, all_reduce, "
                      "x - max, exp, sum, all_reduce, log, shifted - log: the vocabulary-sharded fp32 logits, their shifted copy "
                      "and its exp at once), _nll_loss_forward, _nll_loss_and_log_softmax_backward: zeros_like(x), then "
                      "(grad_input + torch.exp(x)) * grad_output beside the saved log-softmax"),
}
TITAN_QWEN3 = "pytorch/torchtitan at b5bcd76"
TT_QK_NORM_SOURCES = {
    "model": (f"{TITAN_QWEN3} torchtitan/models/common/attention.py GQAttention.forward: xq, xk, xv = qkv_linear(x); "
              "xq = q_norm(xq); xk = k_norm(xk) (before RoPE, on (T, heads, head_dim)); models/qwen3/model.py "
              "Qwen3TransformerBlock (GQAttention with qk_norm = RMSNorm.Config(normalized_shape=head_dim)); "
              "models/common/nn_modules.py RMSNorm(nn.RMSNorm)"),
    "fused": ("pytorch/pytorch v2.13 aten/src/ATen/native/layer_norm.cpp rms_norm_symint: a non-MPS input whose weight has "
              "its dtype runs at::_fused_rms_norm (CUDA kernel: the output in the input's dtype and rstd in fp32, one a row); "
              "on the CPU _fused_rms_norm is CompositeImplicitAutograd (x.float(), pow, mean, rsqrt, mul: what "
              "tests/ground_truth's CPU run would otherwise allocate, hence its stand-in op)"),
    "autograd": ("pytorch/pytorch v2.13.0 torch/include/torch/csrc/autograd/generated/Functions.h FusedRmsNormBackward0: "
                 "saves input, weight and result1 (rstd); _fused_rms_norm_backward returns the input's and the weight's "
                 "gradients"),
}
TT_MOE_DENSE_SOURCE = ("pytorch/torchtitan at b5bcd76 torchtitan/models/deepseek_v3/__init__.py build_mla_moe_layers: 'Layers with "
                       "layer_id < n_dense_layers get a dense FeedForward and no MoE' (of dense_hidden_dim); "
                       "models/common/decoder.py TransformerBlock: moe_enabled = config.moe is not None")
POLICIES = ("none", "full", "op")


def repeat_kv_copies(x: StepShapes) -> bool:
    """Whether repeat_kv copies: n_rep > 1 over more than one KV head (with one, reshape merges a size-1 dim with the
    expanded one and returns a view: multi-query attention keeps k and v as they are)."""
    kv_heads = x.kv * x.heads // x.q
    return x.q > x.kv and kv_heads > 1


def rope_and_attention(b: BlockWalk, x: StepShapes, widths: tuple[int, int, int], copies: bool, xq: str, xk: str, xv: str) -> str:
    """apply_rotary_emb (both fp32 copies, both complex products, both casts back), repeat_kv's copies where it copies, and
    SDPA's output and logsumexp, from wq / wk / wv's outputs; `widths`: the query and KV widths and the query heads this rank
    computes (all of them, or apply_tp's share). Returns SDPA's output's key."""
    T, c = x.T, x.c
    q, kv, heads = widths
    q32, k32 = b.alloc("q32", T * q * 4, "RoPE xq.float()", False), b.alloc("k32", T * kv * 4, "RoPE xk.float()", False)
    qc, kc = b.alloc("qc", T * q * 4, "RoPE xq * freqs_cis (complex64)", False), b.alloc("kc", T * kv * 4, "RoPE xk * freqs_cis", False)
    xq_r = b.alloc("q.rope", T * q * c, "SDPA q (RoPE's output)", True)
    xk_r = b.alloc("k.rope", T * kv * c, "RoPE's k" if copies else "SDPA k (RoPE's output)", not copies)
    b.drop(q32, k32, qc, kc, xq, xk)
    keys, values = xk_r, xv
    if copies:  # repeat_kv: expand then reshape copies k and v to every query head
        keys = b.alloc("keys", T * q * c, "SDPA k (repeat_kv copy)", True)
        b.drop(xk_r)
        values = b.alloc("values", T * q * c, "SDPA v (repeat_kv copy)", True)
        b.drop(xv)
    if x.cp > 1:  # torch's ring attention over the CP group (memory_torchtitan_cp)
        from parcalc.core.memory_torchtitan_cp import ring_forward

        attn, lse = ring_forward(b, x, q, keys, values, q if copies else kv)
    else:
        attn = b.alloc("attn", T * q * c, "SDPA output (wo's input)", True)
        lse = b.alloc("lse", x.b * heads * x.s * 4, "SDPA logsumexp (fp32)", True)
    b.drop(xq_r, keys, values, lse)
    return attn


def head_norms_forward(b: BlockWalk, x: StepShapes, xq: str, xk: str) -> tuple[str, str]:
    """GQAttention's q_norm(xq), then k_norm(xk): nn.RMSNorm over the head dim, on CUDA one _fused_rms_norm each
    (TT_QK_NORM_SOURCES): its output in the input's dtype, RoPE's input, and the fp32 rstd of every token and head,
    saved with the input (wq's and wk's outputs, which RoPE no longer needs). Returns the outputs' keys."""
    T, c, head_dim = x.T, x.c, x.q // x.heads
    outputs = []
    for name, key, width in (("qn", xq, x.q), ("kn", xk, x.kv)):
        out = b.alloc(f"{name}.out", T * width * c, f"{name[0]}_norm output (RoPE's input)", False)
        rstd = b.alloc(f"{name}.rstd", T * (width // head_dim) * 4, f"{name[0]}_norm rstd (fp32, saved by the fused RMSNorm)", True)
        b.save(key)
        if b.saving:
            b.walk.relabel(key, f"w{name[0]} output (saved by {name[0]}_norm)", "activations")
        b.drop(rstd, key)  # what the norm's node does not keep goes as Python rebinds xq / xk
        outputs.append(out)
    return outputs[0], outputs[1]


def head_norms_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """FusedRmsNormBackward0 of k_norm, then of q_norm (k's node is the newer), from RoPE's input gradients (g_k16,
    g_q16) to the projections' output gradients under the same keys: the input gradient and the head_dim-wide weight
    gradient each, the saved input and rstd released (TT_QK_NORM_SOURCES['autograd'])."""
    T, c, head_dim = x.T, x.c, x.q // x.heads
    for name, width in (("k", x.kv), ("q", x.q)):
        walk.alloc(f"{k}.g_{name}n", T * width * c, "temporaries", f"{name}_norm input gradient (wq / wk's output's)")
        walk.alloc(f"{k}.{name}n.grad", head_dim * c, "gradients", "weight gradients")
        walk.free(f"{k}.g_{name}16", f"{k}.{name}.out", f"{k}.{name}n.rstd")
        walk.rename(f"{k}.g_{name}n", f"{k}.g_{name}16")


def float8_linear(b: BlockWalk, name: str, d_in: int, d_out: int, mm: Callable[[], str]) -> str:
    """A block linear's matmul (`mm` allocates its output); as torchao's Float8Linear when x.float8: its casts before, the
    FP8 copies freed after (memory_torchao_float8)."""
    if not b.x.float8:
        return mm()
    casts = float8.forward_casts(b.walk, b.x, f"{b.k}.{name}", b.x.T, d_in, d_out, b.caching and not b.saving, b.caching and b.saving)
    out = mm()
    b.walk.free(*casts)
    return out


def block_forward(walk: Walk, x: StepShapes, i: int, inp: str, policy: str, recomputing: bool = False, prefix: str = "") -> str:
    """torchtitan's TransformerBlock (TT_SOURCES['model']) under `policy`; returns the output's key ("" when the
    recomputation stops early, after w2's input). `prefix` keys a pipeline micro-batch's tensors apart."""
    T, h, q, kv, c = x.T, x.h, x.q, x.kv, x.c
    copies = repeat_kv_copies(x)
    b = BlockWalk(walk, x, i, policy, recomputing, prefix)
    k = b.k
    y = norm_forward(walk, x, f"{k}.n1", inp, b.saving)
    b.save(y)
    if x.mla:  # DeepSeek's latent attention (parcalc.core.memory_torchtitan_mla)
        from parcalc.core.memory_torchtitan_mla import mla_forward

        attn = mla_forward(b, x, y)
        b.drop(y)
        o = b.alloc("o.out", T * h * c, "wo output", False)
        b.drop(attn)
        return _feed_forward_forward(b, x, o, recomputing)
    xq = float8_linear(b, "q", h, q, lambda: b.alloc("q.out", T * q * c, "wq output", False))
    xk = float8_linear(b, "k", h, kv, lambda: b.alloc("k.out", T * kv * c, "wk output", False))
    xv = float8_linear(b, "v", h, kv, lambda: b.alloc("v.out", T * kv * c, "wv output" if copies else "wv output (SDPA's v)", not copies))
    b.drop(y)
    if x.qk_norm:  # Qwen3's q_norm and k_norm on the head dim, before RoPE (TT_QK_NORM_SOURCES)
        xq, xk = head_norms_forward(b, x, xq, xk)
    attn = rope_and_attention(b, x, (q, kv, x.heads), copies, xq, xk, xv)
    # output.transpose(1, 2).contiguous(): a view of SDPA's output, a copy of the ring's (contiguous over the heads: torch.cat)
    wo_in = b.alloc("wo.in", T * q * c, "wo input (the ring's output made contiguous)", True) if x.cp > 1 else attn
    o = float8_linear(b, "o", q, h, lambda: b.alloc("o.out", T * h * c, "wo output", False))
    b.drop(attn, wo_in)
    return _feed_forward_forward(b, x, o, recomputing)


def _feed_forward_forward(b: BlockWalk, x: StepShapes, o: str, recomputing: bool) -> str:
    """From wo's output `o`: the residual add, the ffn_norm and the FeedForward (or torchtitan's MoE); returns the block
    output's key ("" when the recomputation stops early)."""
    walk, k = b.walk, b.k
    T, h, f, c = x.T, x.h, x.f, x.c
    x1 = b.alloc("x1", T * h * c, "residual stream after attention", False)
    b.drop(o)
    y2 = norm_forward(walk, x, f"{k}.n2", x1, b.saving)
    if x.experts:  # torchtitan's MoE in place of the FeedForward (parcalc.core.memory_torchtitan_moe)
        from parcalc.core.memory_torchtitan_moe import moe_forward

        moe = moe_forward(b, x, y2, recomputing)
        if not moe:  # early stop at the scatter_add's saved index
            b.drop(x1)
            return ""
        out = b.alloc("x2", T * h * c, "block output (residual stream)", False)
        walk.relabel(out, "block output (residual stream)", "activations")
        b.drop(moe, x1)
        return out
    b.save(y2)
    g = float8_linear(b, "w1", h, f, lambda: b.alloc("w1.out", T * f * c, "w1 output", True))
    act = b.alloc("act", T * f * c, "silu(w1)", True)
    u = float8_linear(b, "w3", h, f, lambda: b.alloc("w3.out", T * f * c, "w3 output", True))
    b.drop(y2)
    prod = b.alloc("prod", T * f * c, "silu(w1) * w3 (w2's input)", True)
    b.drop(g, act, u)
    if recomputing:  # early stop: w2's input is the last tensor the block saves; the unwinding frees the rest (x1)
        if x.float8:  # a Float8Linear's autograd.Function packs what it saves once its forward has run: w2's casts and mm first
            walk.free(float8_linear(b, "w2", f, h, lambda: b.alloc("w2.out", T * h * c, "w2 output", False)))
        b.drop(x1)
        return ""
    d = float8_linear(b, "w2", f, h, lambda: b.alloc("w2.out", T * h * c, "w2 output", False))
    b.drop(prod)
    out = b.alloc("x2", T * h * c, "block output (residual stream)", False)
    walk.relabel(out, "block output (residual stream)", "activations")
    b.drop(d, x1)
    return out


def add_gradient(walk: Walk, grad: str, into: str, in_place: bool) -> None:
    """A gradient reaching a tensor that has one: added in place (add_into), or, for a DTensor, out of place: the sum is a
    new tensor and both addends go (TT_SOURCES['tp_accumulate'])."""
    if in_place or into not in walk.live:
        add_into(walk, grad, into)
        return
    tensor = walk.live[into]
    walk.alloc(f"{into}+", tensor.bytes, tensor.kind, tensor.what)
    walk.free(grad, into)
    walk.rename(f"{into}+", into)


def norm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, into: str, in_place: bool = True) -> None:
    """norms.py's RMSNorm backward on a bf16 input, node by node as torch's autograd formulas run them (TT_SOURCES['norm_backward']):
    out = normed.type_as(x) * weight, normed = x32 * rsqrt(x32.pow(2).mean(-1) + eps), x32 = x.float(). Under sequence
    parallelism the norm runs on DTensors, whose gradients are added out of place (`in_place` False)."""
    T, h, c = x.T, x.h, x.c
    size = T * h
    # MulBackward0 of `* weight`: grad * weight, then grad * normed summed to the weight's shape
    walk.alloc(f"{key}.g_nb", size * c, "temporaries", "RMSNorm backward: grad * weight")
    walk.alloc(f"{key}.g_wfull", size * c, "temporaries", "RMSNorm backward: grad * normed (before its sum)")
    accumulated_grad(walk, f"{key}.grad", h * c)
    walk.free(f"{key}.g_wfull", g_out, f"{key}.normed_w")
    # ToCopyBackward of .type_as: the gradient in fp32
    walk.alloc(f"{key}.g_n", size * 4, "temporaries", "RMSNorm backward: type_as's gradient (fp32)")
    walk.free(f"{key}.g_nb")
    # MulBackward0 of x32 * rsqrt: grad * rsqrt (x32's), grad * x32 summed over h (rsqrt's)
    walk.alloc(f"{key}.g_x32", size * 4, "temporaries", "RMSNorm backward: grad * rsqrt")
    walk.alloc(f"{key}.g_rfull", size * 4, "temporaries", "RMSNorm backward: grad * x32 (before its sum)")
    walk.alloc(f"{key}.g_r", T * 4, "temporaries", "RMSNorm backward: rsqrt's gradient")
    walk.free(f"{key}.g_rfull", f"{key}.g_n")
    # RsqrtBackward0, AddBackward, MeanBackward1: the gradient expanded over h and divided
    walk.alloc(f"{key}.g_a", T * 4, "temporaries", "RMSNorm backward: rsqrt backward")
    walk.free(f"{key}.g_r", f"{key}.rsqrt")
    walk.alloc(f"{key}.g_p", size * 4, "temporaries", "RMSNorm backward: mean backward (expand / h)")
    walk.free(f"{key}.g_a")
    # PowBackward0: grad * (2 * x32.pow(1)), its two temporaries alive until the expression ends
    walk.alloc(f"{key}.pow1", size * 4, "temporaries", "RMSNorm backward: x32.pow(1)")
    walk.alloc(f"{key}.pow2", size * 4, "temporaries", "RMSNorm backward: 2 * x32.pow(1)")
    walk.alloc(f"{key}.g_pow", size * 4, "temporaries", "RMSNorm backward: pow backward")
    walk.free(f"{key}.pow1", f"{key}.pow2", f"{key}.g_p", f"{key}.fp32")
    add_gradient(walk, f"{key}.g_pow", f"{key}.g_x32", in_place)
    # ToCopyBackward of x.float(): back to bf16, into the residual stream's gradient
    walk.alloc(f"{key}.g_in", size * c, "temporaries", "RMSNorm input gradient (bf16)")
    walk.free(f"{key}.g_x32")
    add_gradient(walk, f"{key}.g_in", into, in_place)


def grads_of_linear(x: StepShapes, walk: Walk, key: str, d_in: int, d_out: int, input_grad: Callable[[], None]) -> None:
    """A linear's backward: its input gradient (`input_grad` allocates it), then its weight gradient; as torchao's
    Float8Linear when x.float8, with the casts before each mm and the FP8 copies freed when it returns."""
    if not x.float8:
        input_grad()
        grad_of_weight(walk, x, key, d_in, d_out)
        return
    casts = float8.backward_for_input(walk, x, key, x.T, d_in, d_out)
    input_grad()
    casts += float8.backward_for_weight(walk, x, key, x.T, d_in, d_out)
    grad_of_weight(walk, x, key, d_in, d_out)
    walk.free(*casts)


def mm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, d_in: int, d_out: int, into: str, saved_input: str = "",
                converted: bool = True) -> None:  # fmt: skip
    """MmBackward: the input gradient (added into `into`), the weight gradient (bf16, the unsharded parameter's .grad).
    `converted`: a Float8Linear under x.float8 (torchtitan's converter leaves the output projection a Linear)."""
    grads_of_linear(x if converted or not x.float8 else replace(x, float8=False), walk, key, d_in, d_out,  # (a copy only if it differs)
                    lambda: walk.alloc(f"{key}.gin", x.T * d_in * x.c, "temporaries", "input gradient"))
    walk.free(g_out, saved_input)
    add_into(walk, f"{key}.gin", into)


def block_backward(walk: Walk, x: StepShapes, i: int, g_out: str, into: str, prefix: str = "") -> None:
    """The block's backward in the order autograd's engine runs it (the latest-created node first)."""
    k = f"{prefix}L{i}"
    walk.rename(g_out, f"{k}.g_x1")  # out = h + w2: both get the same gradient tensor
    if x.experts:  # out = h + moe (parcalc.core.memory_torchtitan_moe)
        from parcalc.core.memory_torchtitan_moe import moe_backward

        moe_backward(walk, x, k, f"{k}.g_x1", f"{k}.g_y2")
    else:
        _feed_forward_backward(walk, x, k)
    norm_backward(walk, x, f"{k}.n2", f"{k}.g_y2", f"{k}.g_x1")
    walk.free(f"{k}.x1")
    _attention_backward(walk, x, k, into)


def _feed_forward_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """FeedForward's backward, w2(silu(w1(x)) * w3(x)), into the ffn_norm output's gradient."""
    T, h, f, c = x.T, x.h, x.f, x.c
    grads_of_linear(x, walk, f"{k}.w2", f, h, lambda: walk.alloc(f"{k}.g_prod", T * f * c, "temporaries", "w2 input gradient"))
    walk.free(f"{k}.prod")
    walk.alloc(f"{k}.g_act", T * f * c, "temporaries", "mul backward: silu's gradient")
    walk.alloc(f"{k}.g_u", T * f * c, "temporaries", "mul backward: w3's gradient")
    walk.free(f"{k}.g_prod", f"{k}.act", f"{k}.w3.out")
    mm_backward(walk, x, f"{k}.w3", f"{k}.g_u", h, f, f"{k}.g_y2")
    walk.alloc(f"{k}.g_g", T * f * c, "temporaries", "silu backward")
    walk.free(f"{k}.g_act", f"{k}.w1.out")
    mm_backward(walk, x, f"{k}.w1", f"{k}.g_g", h, f, f"{k}.g_y2", f"{k}.n2.out")


def repeat_kv_and_rope_backward(walk: Walk, k: str, T: float, widths: tuple[int, int], c: float, n_rep: int) -> None:
    """From SDPA's dq, dk, dv (keys g_q, g_k, g_v of block `k`) to q's and k's gradients before RoPE (g_q16, g_k16):
    repeat_kv's backward where the KV heads are repeated (expand's sum over the repeats), then the two RoPE chains in
    lockstep (k's nodes were created after q's): type_as, the complex product, .float(). `widths`: q's and the KV heads'
    columns. One chain for every torchtitan block walk (its 1F1B / FSDP step and ZB-V's split backward)."""
    q, kv = widths
    if n_rep > 1:  # repeat_kv's backward: expand's sum over the repeats
        for name in ("v", "k"):
            walk.alloc(f"{k}.g_{name}sum", T * kv * c, "temporaries", "repeat_kv backward (sum over the repeats)")
            walk.free(f"{k}.g_{name}")
            walk.rename(f"{k}.g_{name}sum", f"{k}.g_{name}")
    for step, size, what in (("32", 4, "RoPE backward: type_as to fp32"), ("c", 4, "RoPE backward: times conj(freqs_cis)"),
                             ("16", c, "RoPE backward: .float()'s gradient (bf16)")):  # fmt: skip
        for name, w in (("k", kv), ("q", q)):
            prev = f"{k}.g_{name}" if step == "32" else f"{k}.g_{name}{'32' if step == 'c' else 'c'}"
            walk.alloc(f"{k}.g_{name}{step}", T * w * size, "temporaries", what)
            walk.free(prev)


def _attention_backward(walk: Walk, x: StepShapes, k: str, into: str) -> None:
    """The attention's backward from the residual stream's gradient g_x1, its attention_norm's into it; then renamed `into`."""
    if x.mla:  # DeepSeek's latent attention (parcalc.core.memory_torchtitan_mla)
        from parcalc.core.memory_torchtitan_mla import mla_backward

        mla_backward(walk, x, k, f"{k}.g_y")
    else:
        _gqa_backward(walk, x, k)
    norm_backward(walk, x, f"{k}.n1", f"{k}.g_y", f"{k}.g_x1")
    walk.rename(f"{k}.g_x1", into)
    walk.free(f"{k}.w2.out")  # a cached output the early-stopped recomputation never took: it goes with the checkpoint frame


def _gqa_backward(walk: Walk, x: StepShapes, k: str) -> None:
    """The grouped-query attention's backward from g_x1 (kept) to the attention_norm output's gradient g_y."""
    T, h, q, kv, c = x.T, x.h, x.q, x.kv, x.c
    n_rep = q // kv
    # h = x + wo(attention): wo's branch gets the same gradient
    grads_of_linear(x, walk, f"{k}.o", q, h, lambda: walk.alloc(f"{k}.g_attn", T * q * c, "temporaries", "wo input gradient"))
    walk.free(f"{k}.wo.in")  # under cp: wo's saved input, released with its node
    width = q if n_rep > 1 else kv
    if x.cp > 1:  # the ring's backward: dK and dV one buffer (memory_torchtitan_cp)
        from parcalc.core.memory_torchtitan_cp import ring_backward

        ring_backward(walk, x, k, width)
    else:
        walk.alloc(f"{k}.g_q", T * q * c, "temporaries", "SDPA backward dq")
        walk.alloc(f"{k}.g_k", T * width * c, "temporaries", "SDPA backward dk")
        walk.alloc(f"{k}.g_v", T * width * c, "temporaries", "SDPA backward dv")
    walk.free(f"{k}.g_attn", f"{k}.attn", f"{k}.lse", f"{k}.q.rope", f"{k}.k.rope", f"{k}.keys", f"{k}.values", f"{k}.v.out")
    repeat_kv_and_rope_backward(walk, k, T, (q, kv), c, n_rep)
    if x.qk_norm:
        head_norms_backward(walk, x, k)
    mm_backward(walk, x, f"{k}.v", f"{k}.g_v", h, kv, f"{k}.g_y")
    mm_backward(walk, x, f"{k}.k", f"{k}.g_k16", h, kv, f"{k}.g_y")
    mm_backward(walk, x, f"{k}.q", f"{k}.g_q16", h, q, f"{k}.g_y", f"{k}.n1.out")


def layer_shapes(model: TransformerModel, x: StepShapes, i: int) -> StepShapes:
    """Block `i`'s shapes: a MoE model's dense layers (DeepSeek's first n_dense_layers; MixtureOfExperts.is_moe_layer)
    run the FeedForward of ffn_hidden (TT_MOE_DENSE_SOURCE)."""
    if model.moe is None or model.moe.is_moe_layer(i):
        return x
    return replace(x, experts=0, top_k=0, fe=0, fs=0)


def layer_model(model: TransformerModel, i: int) -> TransformerModel:
    """Block `i` as a model of its own kind (dense or MoE), for its parameters (memory_fsdp._block_params)."""
    return model if model.moe is None or model.moe.is_moe_layer(i) else replace(model, moe=None)


def walk_blocks_forward(walk: Walk, model: TransformerModel, x: StepShapes, policies: tuple[str, ...], hooks: StepHooks,
                        compiled: bool = False) -> str:  # fmt: skip
    """The embedding and the blocks (`compiled`: each block's torch.compile'd code, parcalc.core.memory_torchtitan_compile);
    returns the last block's output key."""
    from parcalc.core.memory_torchtitan_compile import compiled_block_forward

    walk.phase = "forward: embedding"
    current = "emb"
    walk.alloc(current, x.T * x.h * x.c, "activations", "embedding output (residual stream)")
    for i in range(model.layers):
        walk.phase = f"forward: layer {i + 1} of {model.layers}"
        hooks.before_layer(walk, i)
        if compiled:  # every policy's compiled forward saves its input
            out = compiled_block_forward(walk, x, i, current, policies[i])
        else:
            out = block_forward(walk, layer_shapes(model, x, i), i, current, policies[i])
        if policies[i] == "none" and not compiled:  # the loop's `h = layer(h)` drops the input: its norm saved an fp32 copy
            walk.free(current)
        hooks.after_layer(walk, i)
        current = out
    return current


def head_and_loss_forward(walk: Walk, x: StepShapes, last: str, compiled_loss: bool = False, hooks: StepHooks | None = None) -> None:
    """The final norm, the output projection and train.py's loss (TT_SOURCES['loss']; `compiled_loss`: the loss under
    torch.compile, parcalc.core.memory_compiled_loss). `hooks.after_forward` runs when the model returns pred, before the
    loss, which train.py computes outside the model (the root's post-forward: FSDP_SOURCES['all_gather'])."""
    walk.phase = "forward: final norm and output"
    y = norm_forward(walk, x, "final", last, saved=True)
    walk.free(last)  # the norm saved its fp32 copy; nothing else holds the last block's output
    walk.alloc("head.out", x.T * x.V * x.c, "logits and loss", "pred (the output projection, bf16)")
    if hooks is not None:
        hooks.after_forward(walk)
    if compiled_loss:  # the compiled graph keeps pred: `del pred` frees nothing
        walk.phase = "forward: loss (compiled cross_entropy)"
        compiled_loss_forward(walk, x, "head.out")
    else:
        walk.phase = "forward: loss (pred.float(), cross_entropy)"
        walk.alloc("logits32", x.T * x.V * 4, "logits and loss", "pred.flatten(0, 1).float()")
        cross_entropy_forward(walk, x)
        walk.free("logits32", "head.out")  # loss_fn returns; del pred
    walk.relabel(y, "final norm output (the output projection's input)", "activations")


def walk_blocks_backward(walk: Walk, model: TransformerModel, x: StepShapes, policies: tuple[str, ...], embedding_tables: int,
                         hooks: StepHooks, compiled: bool = False, compiled_loss: bool = False) -> None:  # fmt: skip
    from parcalc.core.memory_torchtitan_compile import compiled_block_backward

    T, V, h = x.T, x.V, x.h
    hooks.before_backward(walk)
    if compiled_loss:
        walk.phase = "backward: loss (compiled cross_entropy)"
        compiled_loss_backward(walk, x, "head.out", "g_logits")
        walk.phase = "backward: output projection"
    else:
        walk.phase = "backward: loss (nll_loss and log_softmax gradients)"
        g_logits32 = cross_entropy_backward(walk, x)
        walk.phase = "backward: output projection"
        walk.alloc("g_logits", T * V * x.c, "logits and loss", "pred's gradient (.float()'s backward, bf16)")
        walk.free(g_logits32)
    mm_backward(walk, x, "head", "g_logits", h, V, "final.g_y", "final.out", converted=False)
    norm_backward(walk, x, "final", "final.g_y", "g_stream")
    for i in reversed(range(model.layers)):
        walk.phase = f"backward: layer {i + 1} of {model.layers}" + ("" if policies[i] == "none" else " (recomputed)")
        inp = "emb" if i == 0 else f"L{i - 1}.x2"
        hooks.before_layer_backward(walk, i)
        if compiled:  # the recomputation, if any, is part of the compiled backward
            compiled_block_backward(walk, x, i, inp, "g_stream", "g_stream_next", policies[i])
        else:
            xi = layer_shapes(model, x, i)
            if policies[i] != "none":
                block_forward(walk, xi, i, inp, policies[i], recomputing=True)
            block_backward(walk, xi, i, "g_stream", "g_stream_next")
        walk.free(inp)  # the checkpoint's input, held by its frame until the block's backward is done
        walk.rename("g_stream_next", "g_stream")
        hooks.after_layer_backward(walk, i)
    walk.phase = "backward: embedding"
    for table in range(embedding_tables):
        walk.alloc(f"g_embedding{table}", V * h * x.c, "gradients", "embedding gradient")
    walk.free("g_stream", *(f"g_embedding{t}" for t in range(1, embedding_tables)))
    walk.rename("g_embedding0", "embedding.grad", "weight gradients")
    hooks.after_backward(walk)


def walk_step(walk: Walk, model: TransformerModel, x: StepShapes, policies: tuple[str, ...], embedding_tables: int,
              hooks: StepHooks, compiled: bool = False, compiled_loss: bool = False) -> None:  # fmt: skip
    """Forward, loss and backward of torchtitan's Transformer with the framework's hooks around each block (`compiled`: each
    block under torch.compile, as apply_compile wraps it; `compiled_loss`: the loss too, parcalc.core.memory_compiled_loss)."""
    hooks.before_forward(walk)
    last = walk_blocks_forward(walk, model, x, policies, hooks, compiled)
    head_and_loss_forward(walk, x, last, compiled_loss, hooks)
    walk_blocks_backward(walk, model, x, policies, embedding_tables, hooks, compiled, compiled_loss)
