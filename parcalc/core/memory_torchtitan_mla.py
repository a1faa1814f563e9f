"""DeepSeek's multi-head latent attention in torchtitan's FSDP2 step walk, as torchtitan's deepseek_v3 model runs it.

torchtitan's deepseek_v3 Attention (TT_MLA_SOURCES['model'], pytorch/torchtitan at b5bcd76) in place of the Llama
attention that parcalc.core.memory_torchtitan walks, n heads of query / key width d = nope + rope and value width v, on
the attention_norm's output y:

- the query: wq(y) (q_lora_rank 0), or wq_b(q_norm(wq_a(y))), whose q_norm (nn.RMSNorm, CUDA's fused kernel) saves
  wq_a's output and an fp32 rstd a token, and wq_b saves the norm's output; split into q_nope and q_pe (views: q_nope, a
  local of forward, keeps the projection's output until the attention returns);
- the keys and values: wkv_a(y) (T x (kv_lora + rope)), split into the latent and k_pe (views); kv_norm's fused kernel saves
  the latent view, which keeps wkv_a's whole output, and an fp32 rstd; wkv_b saves the norm's output;
- ComplexRoPE on q_pe (every head) and k_pe (one head, shared): .float() (a contiguous fp32 copy of the view), the
  complex64 product with the layer's own cache, the cast back, as torchtitan's Llama RoPE does;
- q = cat(q_nope, q_pe) and k = cat(k_nope, k_pe.expand(heads)): two copies of T x n x d, which FlexAttention saves; v
  a view of wkv_b's output (T x n x (nope + v)), which FlexAttention saves too, keeping that output whole. No padding:
  FlexAttention takes a value head dim other than the query's (TT_MLA_SOURCES['flex']);
- FlexAttention (torchtitan's attn_backend "flex" in every DeepSeek-V3 config, its torch.compile'd flex_attention):
  the output (T x n x v, laid out as the query, so `.contiguous()` after the transpose copies nothing; wo saves it) and
  the fp32 logsumexp (T x n) saved with q, k and v.

The backward runs in the engine's order (the latest-created node first): wo, the flex backward (dq, dk, dv), k's cat (its
gradient narrowed: views), the expand's sum over the heads, the kv split's cat, wkv_b, kv_norm, the RoPE chains (k's node
first at every step), the kv_a split's cat, wkv_a, q's split's cat, then wq (or wq_b, q_norm and wq_a).

Ground truth: FSDPMemTracker over this code in tests/ground_truth/tiny_torchtitan_moe.py (MlaBlock), FlexAttention and
the fused RMSNorm as stand-in ops that allocate what their CUDA kernels return (test_torch_memory_torchtitan_moe.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.core.memory_walk import StepShapes, Walk, add_into, grad_of_weight

if TYPE_CHECKING:
    from parcalc.core.memory_block_walk import BlockWalk

TITAN_MLA = "pytorch/torchtitan at b5bcd76"
TT_MLA_SOURCES = {
    "model": (f"{TITAN_MLA} torchtitan/models/deepseek_v3/model.py Attention.forward (q = wq(x) or wq_b(q_norm(wq_a(x))); "
              "q_nope, q_pe = split(q); kv, k_pe = split(wkv_a(x)); q_pe, k_pe = rope(q_pe, k_pe.unsqueeze(1)); "
              "q = cat([q_nope, q_pe]); kv = wkv_b(kv_norm(kv)); k_nope, v = split(kv); k = cat([k_nope, k_pe.expand(...)]); "
              "inner_attention(q, k, v, scale=softmax_scale).contiguous(); wo); deepseek_v3/__init__.py make_mla_attention_config "
              "(q_norm of q_lora_rank, kv_norm of kv_lora_rank: RMSNorm, i.e. nn.RMSNorm), build_mla_moe_layers; "
              "models/common/rope.py ComplexRoPE.apply_rotary_emb (x.float() as complex, times the cache, view_as_real, "
              "type_as), RoPE.__init__ (a cache buffer in every attention), models/common/decoder.py update_from_config "
              "(the caches resized to training.max_context_length)"),
    "flex": (f"{TITAN_MLA} torchtitan/models/common/attention.py FlexAttention.forward (q, k, v transposed to (1, n, T, H), "
             "the class's torch.compile(flex_attention), out.squeeze(0).transpose(0, 1)); deepseek_v3/config_registry.py "
             "(attn_backend='flex'); pytorch/pytorch v2.13.0 torch/_inductor/kernel/flex/flex_attention.py (the output's "
             "strides follow the query's, v_head_dim may differ from the query's; logsumexp fp32 B x H x T); the flex "
             "backward takes query, key, value, out and logsumexp"),
    "fused_norm": ("pytorch/pytorch v2.13 aten/src/ATen/native/layer_norm.cpp rms_norm_symint (CUDA: at::_fused_rms_norm); "
                   "Functions.h FusedRmsNormBackward0 saves input, weight and rstd"),
}


def dims(x: StepShapes) -> tuple[int, int, int, int, int, int]:
    """(heads, q_lora_rank, kv_lora_rank, rope, query / key head width, value head width)."""
    q_lora, kv_lora, nope, rope, v = x.mla
    return x.heads, q_lora, kv_lora, rope, nope + rope, v


def mla_forward(b: BlockWalk, x: StepShapes, y: str) -> str:
    """The attention on the attention_norm's output `y` (saved by the first projection; the caller drops it) up to
    FlexAttention's output, wo's input (module docstring). Returns that output's key."""
    T, c = x.T, x.c
    n, q_lora, kv_lora, rope, d, v = dims(x)
    if q_lora:
        qa = b.alloc("qa.out", T * q_lora * c, "wq_a output (saved by q_norm)", True)
        qn = b.alloc("qan.out", T * q_lora * c, "q_norm output (saved by wq_b)", True)
        rstd = b.alloc("qan.rstd", T * 4, "q_norm rstd (fp32, saved by the fused RMSNorm)", True)
        b.drop(rstd, qa)
        q = b.alloc("q.out", T * n * d * c, "wq_b output (q_nope's view keeps it until the attention returns)", False)
        b.drop(qn)
    else:
        q = b.alloc("q.out", T * n * d * c, "wq output (q_nope's view keeps it until the attention returns)", False)
    kv_a = b.alloc("kva.out", T * (kv_lora + rope) * c, "wkv_a output (its latent view saved by kv_norm)", True)
    # ComplexRoPE: both fp32 copies, both complex products, then both casts back (torchtitan's Llama RoPE's order)
    q32, k32 = b.alloc("qpe32", T * n * rope * 4, "RoPE q_pe.float()", False), b.alloc("kpe32", T * rope * 4, "RoPE k_pe.float()", False)
    qc, kc = b.alloc("qpec", T * n * rope * 4, "RoPE q_pe x cache (complex64)", False), b.alloc("kpec", T * rope * 4, "RoPE k_pe x cache", False)
    q_pe = b.alloc("qpe.rope", T * n * rope * c, "RoPE's q_pe", False)
    k_pe = b.alloc("kpe.rope", T * rope * c, "RoPE's k_pe", False)
    b.drop(q32, k32, qc, kc)
    queries = b.alloc("q.cat", T * n * d * c, "q = cat(q_nope, q_pe) (saved by FlexAttention)", True)
    kv_n = b.alloc("kvn.out", T * kv_lora * c, "kv_norm output (saved by wkv_b)", True)
    rstd = b.alloc("kvn.rstd", T * 4, "kv_norm rstd (fp32, saved by the fused RMSNorm)", True)
    b.drop(rstd)
    kv_b = b.alloc("kvb.out", T * n * (d - rope + v) * c, "wkv_b output (its v view saved by FlexAttention)", True)
    b.drop(kv_n, kv_a)  # `kv = wkv_b(kv_norm(kv))` rebinds the latent view
    keys = b.alloc("k.cat", T * n * d * c, "k = cat(k_nope, k_pe expanded) (saved by FlexAttention)", True)
    attn = b.alloc("attn", T * n * v * c, "FlexAttention output (wo's input)", True)
    lse = b.alloc("lse", T * n * 4, "FlexAttention logsumexp (fp32)", True)
    b.walk.transient(f"{b.k}.max_scores", T * n * 4, "temporaries", "FlexAttention's max scores (fp32, not returned)")
    b.drop(queries, keys, kv_b, lse, q_pe, k_pe, q)  # forward returns: its locals (q_nope's view, q_pe, k_pe) go
    return attn


def _norm_backward(walk: Walk, x: StepShapes, k: str, name: str, width: int, g_out: str, saved_input: str) -> str:
    """A fused RMSNorm's backward (FusedRmsNormBackward0): the input's gradient and the weight's; returns the former."""
    walk.alloc(f"{k}.g_{name}", x.T * width * x.c, "temporaries", f"{name} backward: input gradient")
    walk.alloc(f"{k}.{name}.grad", width * x.c, "gradients", "weight gradients")
    walk.free(g_out, saved_input, f"{k}.{name}.rstd")
    return f"{k}.g_{name}"


def _mm_backward(walk: Walk, x: StepShapes, key: str, g_out: str, d_in: int, d_out: int, saved_input: str, into: str) -> None:
    """MmBackward: the input gradient into `into`, then the weight gradient."""
    walk.alloc(f"{key}.gin", x.T * d_in * x.c, "temporaries", "input gradient")
    grad_of_weight(walk, x, key, d_in, d_out)
    walk.free(g_out, saved_input)
    add_into(walk, f"{key}.gin", into)


def mla_backward(walk: Walk, x: StepShapes, k: str, into: str) -> None:
    """From wo's output gradient (the residual stream's, g_x1: kept) to the attention_norm output's gradient `into`, in the
    engine's order (module docstring)."""
    T, h, c = x.T, x.h, x.c
    n, q_lora, kv_lora, rope, d, v = dims(x)
    nope = d - rope
    walk.alloc(f"{k}.g_attn", T * n * v * c, "temporaries", "wo input gradient")
    grad_of_weight(walk, x, f"{k}.o", n * v, h)
    # the flex backward: delta = rowsum(out x dout) in fp32, then dq, dk, dv (laid out as q, k, v)
    walk.alloc(f"{k}.delta", T * n * 4, "temporaries", "FlexAttention backward: delta (fp32)")
    walk.alloc(f"{k}.g_q", T * n * d * c, "temporaries", "FlexAttention backward dq")
    walk.alloc(f"{k}.g_k", T * n * d * c, "temporaries", "FlexAttention backward dk")
    walk.alloc(f"{k}.g_v", T * n * v * c, "temporaries", "FlexAttention backward dv")
    walk.free(f"{k}.delta", f"{k}.g_attn", f"{k}.attn", f"{k}.lse", f"{k}.q.cat", f"{k}.k.cat", f"{k}.kvb.out")
    # k's cat: narrowed views of dk; the expand's backward sums k_pe's over the heads
    walk.alloc(f"{k}.g_kpe", T * rope * c, "temporaries", "k_pe's gradient (the expand's sum over the heads)")
    # the kv split's backward: cat(dk_nope, dv), then wkv_b
    walk.alloc(f"{k}.g_kvb", T * n * (nope + v) * c, "temporaries", "wkv_b output gradient (the split's cat)")
    walk.free(f"{k}.g_k", f"{k}.g_v")
    _mm_backward(walk, x, f"{k}.wkv_b", f"{k}.g_kvb", kv_lora, n * (nope + v), f"{k}.kvn.out", f"{k}.g_kvn_out")
    g_latent = _norm_backward(walk, x, k, "kvn", kv_lora, f"{k}.g_kvn_out", f"{k}.kva.out")
    # the RoPE chains, k's node first at each step (q_pe's gradient a view of dq)
    for step, size, what in (("32", 4, "RoPE backward: type_as to fp32"), ("c", 4, "RoPE backward: times conj(cache)"),
                             ("16", c, "RoPE backward: .float()'s gradient")):  # fmt: skip
        for name, width in (("kpe", rope), ("qpe", n * rope)):
            prev = {"32": f"{k}.g_{name}", "c": f"{k}.g_{name}32", "16": f"{k}.g_{name}c"}[step]
            walk.alloc(f"{k}.g_{name}{step}", T * width * size, "temporaries", what)
            if prev in walk.live:  # q_pe's first gradient is a view of dq
                walk.free(prev)
    # the kv_a split's cat, then wkv_a
    walk.alloc(f"{k}.g_kva", T * (kv_lora + rope) * c, "temporaries", "wkv_a output gradient (the split's cat)")
    walk.free(g_latent, f"{k}.g_kpe16")
    _mm_backward(walk, x, f"{k}.wkv_a", f"{k}.g_kva", h, kv_lora + rope, "", into)
    # q's split: cat(dq_nope, q_pe's gradient), then the query projection(s)
    walk.alloc(f"{k}.g_qout", T * n * d * c, "temporaries", "the query projection's output gradient (the split's cat)")
    walk.free(f"{k}.g_q", f"{k}.g_qpe16")
    if q_lora:
        _mm_backward(walk, x, f"{k}.wq_b", f"{k}.g_qout", q_lora, n * d, f"{k}.qan.out", f"{k}.g_qan_out")
        g_qa = _norm_backward(walk, x, k, "qan", q_lora, f"{k}.g_qan_out", f"{k}.qa.out")
        _mm_backward(walk, x, f"{k}.wq_a", g_qa, h, q_lora, f"{k}.n1.out", into)
    else:
        _mm_backward(walk, x, f"{k}.q", f"{k}.g_qout", h, n * d, f"{k}.n1.out", into)
