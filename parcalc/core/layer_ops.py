"""The operations of one transformer layer's forward pass, with FLOPs and bytes moved.

This is the table of seed 004, question 2 (Q/K/V projections, scores, softmax, score x V,
output projection, MLP up, activation, MLP down), generalised to grouped-query attention
(K and V of width kv_heads x head_dim) and gated MLPs (gate and up projections).

Matmuls count 2 FLOP per multiply-add. Element-wise operations count the FLOP per element
named in ELEMENTWISE_FLOP below, a convention (exp counted as 1 FLOP) since hardware does not
count them the same way. Bytes follow the minimum-traffic convention of core.intensity.
Norms, residual adds, biases and dropout are not listed: they are element-wise, memory-bound,
and under 1 % of the layer's FLOPs.
"""

from __future__ import annotations

from parcalc.core.model import Mlp, TransformerModel
from parcalc.errors import InputError
from parcalc.frozen import frozen

# FLOP per element of the element-wise operations, by convention:
#   scaled softmax: scale, max, subtract, exp, sum, divide = 6
#   relu: one compare; gelu (tanh form): x^3, two multiplies, add, tanh, add, two multiplies = 8
#   swiglu: silu = x / (1 + exp(-x)) is negate, exp, add, divide = 4, times the up branch = 5
#   geglu: gelu (8) times the up branch = 9
ELEMENTWISE_FLOP: dict[str, int] = {"softmax": 6, "relu": 1, "gelu": 8, "swiglu": 5, "geglu": 9}


@frozen
class LayerOp:
    """One operation of a layer's forward pass, for the whole micro-batch.

    kind: "matmul" or "elementwise"; flops in FLOP, bytes in bytes; batch/m/k/n describe a
    matmul (batch independent products of m x k by k x n), elements an element-wise op.
    """

    key: str
    name: str
    kind: str
    flops: float
    bytes: float
    shape: str
    batch: int = 1
    m: int = 0
    k: int = 0
    n: int = 0
    elements: int = 0

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes


def _matmul(key: str, name: str, m: int, k: int, n: int, s: float, batch: int = 1, shape: str = "",
            a_elements: int | None = None, b_elements: int | None = None) -> LayerOp:  # fmt: skip
    """Y = XW; `a_elements` / `b_elements` override the operand sizes when an operand is shared
    across the batch (K and V shared by the query heads of a group in GQA)."""
    a = batch * m * k if a_elements is None else a_elements
    b = batch * k * n if b_elements is None else b_elements
    return LayerOp(
        key=key, name=name, kind="matmul", flops=2.0 * batch * m * k * n, bytes=s * (a + b + batch * m * n),
        shape=shape or f"[{m}×{k}]·[{k}×{n}]" + (f" ×{batch}" if batch > 1 else ""),
        batch=batch, m=m, k=k, n=n,
    )  # fmt: skip


def _elementwise(key: str, name: str, elements: int, flop_per_element: int, s: float, reads: int, shape: str) -> LayerOp:
    """`reads` input tensors of `elements` each are read and one is written."""
    return LayerOp(
        key=key, name=name, kind="elementwise", flops=float(flop_per_element * elements),
        bytes=s * elements * (reads + 1), shape=shape, elements=elements,
    )  # fmt: skip


def transformer_layer_ops(model: TransformerModel, batch: int, seq_len: int, bytes_per_element: float, *,
                          moe_layer: bool = False) -> tuple[LayerOp, ...]:  # fmt: skip
    """Forward-pass operations of one layer for `batch` sequences of `seq_len` tokens.

    moe_layer: the operations of one of the model's Mixture-of-Experts layers (router, routed
    experts as grouped GEMMs, shared experts) instead of a dense layer's MLP. Attention is the
    model's: multi-head latent attention's projections when model.mla is set.
    """
    if batch < 1 or seq_len < 1:
        raise InputError(f"--batch and --seq-len must be at least 1, got {batch} and {seq_len}")
    if moe_layer and model.moe is None:
        raise InputError(f"model {model.key}: has no Mixture-of-Experts layers")
    s = bytes_per_element
    tokens = batch * seq_len
    ops = list(_mla_ops(model, batch, seq_len, s) if model.mla is not None else _attention_ops(model, batch, seq_len, s))
    if moe_layer:
        ops += _moe_ops(model, tokens, s)
    else:
        ops += _mlp_ops(model, tokens, model.ffn_hidden, s, "mlp", "")
    return tuple(ops)


def _attention_ops(model: TransformerModel, batch: int, seq_len: int, s: float) -> list[LayerOp]:
    tokens = batch * seq_len
    d, hd = model.hidden, model.head_dim
    heads, kv = model.heads, model.kv_heads
    scores = batch * heads * seq_len * seq_len
    return [
        _matmul("q_proj", "[Q, G] = x·W^Q" if model.attention_gate else "Q = x·W^Q", tokens, d,
                model.q_width * (2 if model.attention_gate else 1), s),  # gated attention: the gate's half too
        _matmul("k_proj", "K = x·W^K", tokens, d, model.kv_width, s),
        _matmul("v_proj", "V = x·W^V", tokens, d, model.kv_width, s),
        _matmul(
            "scores", "Q_i·K_i^T", seq_len, hd, seq_len, s, batch=batch * heads,
            shape=f"[{seq_len}×{hd}]·[{hd}×{seq_len}] ×{batch * heads}",
            b_elements=batch * kv * hd * seq_len,
        ),
        _elementwise("softmax", "softmax(·/√d)", scores, ELEMENTWISE_FLOP["softmax"], s, 1,
                     f"[{seq_len}×{seq_len}] ×{batch * heads}"),
        _matmul(
            "context", "Z_i = score_i·V_i", seq_len, seq_len, hd, s, batch=batch * heads,
            shape=f"[{seq_len}×{seq_len}]·[{seq_len}×{hd}] ×{batch * heads}",
            b_elements=batch * kv * seq_len * hd,
        ),
        _matmul("out_proj", "Out = Z·W^O", tokens, model.q_width, d, s),
    ]  # fmt: skip


def linear_attention_ops(model: TransformerModel, batch: int, seq_len: int, s: float) -> list[LayerOp]:
    """A gated-DeltaNet mixer's forward (parcalc.core.linear_attention): its projections, the depthwise conv1d (as
    conv_dim products of [T x K]·[K x 1], the FLOPs torch.utils.flop_counter gives a grouped convolution), and the
    chunked delta rule per chunk and value head: K_beta K^T and Q K^T, the two unit-triangular solves of the UT
    transform (C (C - 1) / 2 multiply-adds per column: flops given directly), K_cum S and Q S against the state, the
    chunk's attention times the new values, and the state update K^T V_new."""
    gdn = model.linear_attention
    assert gdn is not None
    from parcalc.core.linear_attention import CHUNK, chunks

    tokens, d = batch * seq_len, model.hidden
    dk, dv, c = gdn.key_head_dim, gdn.value_head_dim, CHUNK
    groups = batch * gdn.value_heads * chunks(seq_len)  # (sequence, value head, chunk): the products run per chunk
    per = f" ×{groups}"

    def solve(key: str, name: str, columns: int) -> LayerOp:
        flops = float(groups * c * (c - 1) * columns)  # 2 FLOP x C (C - 1) / 2 multiply-adds per right-hand column
        return LayerOp(key=key, name=name, kind="matmul", flops=flops, bytes=s * groups * (c * c + 2 * c * columns),
                       shape=f"[{c}×{c}]⁻¹·[{c}×{columns}]{per}", batch=groups, m=c, k=c, n=columns)  # fmt: skip

    return [
        _matmul("gdn_in_qkvz", "[Q, K, V, Z] = x·W^qkvz", tokens, d, 2 * gdn.key_dim + 2 * gdn.value_dim, s),
        _matmul("gdn_in_ba", "[β, a] = x·W^ba", tokens, d, 2 * gdn.value_heads, s),
        _matmul("gdn_conv", "causal conv1d (depthwise)", tokens, gdn.conv_kernel, 1, s, batch=gdn.conv_dim,
                shape=f"[{tokens}×{gdn.conv_kernel}]·[{gdn.conv_kernel}×1] ×{gdn.conv_dim}"),
        _matmul("gdn_ut", "K_β·K^T", c, dk, c, s, batch=groups, shape=f"[{c}×{dk}]·[{dk}×{c}]{per}"),
        _matmul("gdn_intra", "Q·K^T", c, dk, c, s, batch=groups, shape=f"[{c}×{dk}]·[{dk}×{c}]{per}"),
        solve("gdn_solve_v", "V_new = T⁻¹·V_β", dv),
        solve("gdn_solve_k", "K_cum = T⁻¹·K_β", dk),
        _matmul("gdn_read_k", "K_cum·S", c, dk, dv, s, batch=groups, shape=f"[{c}×{dk}]·[{dk}×{dv}]{per}"),
        _matmul("gdn_read_q", "Q·S", c, dk, dv, s, batch=groups, shape=f"[{c}×{dk}]·[{dk}×{dv}]{per}"),
        _matmul("gdn_context", "A·V_new", c, c, dv, s, batch=groups, shape=f"[{c}×{c}]·[{c}×{dv}]{per}"),
        _matmul("gdn_state", "S += K^T·V_new", dk, c, dv, s, batch=groups, shape=f"[{dk}×{c}]·[{c}×{dv}]{per}"),
        _matmul("gdn_out", "Out = Z'·W^O", tokens, gdn.value_dim, d, s),
    ]  # fmt: skip


def mamba_ops(model: TransformerModel, batch: int, seq_len: int, s: float) -> list[LayerOp]:
    """A Mamba-2 mixer's forward (parcalc.core.mamba), as mamba_ssm's SSD kernels compute it (Dao & Gu 2024 sec. 6; Megatron-LM's
    MambaMixer calls mamba_chunk_scan_combined): in_proj, the depthwise conv1d (conv_dim products of [T x K]·[K x 1], what
    torch.utils.flop_counter gives a grouped convolution), per chunk of Q tokens C·B^T once per GROUP (_bmm_chunk_fwd on
    (b, s, G, N)), the masked scores times x per head (the intra-chunk, diagonal blocks), each chunk's final state B^T·x
    (_chunk_state_fwd), the states passed from chunk to chunk (_state_passing_fwd: one multiply-add per state element and
    chunk), the output from the state C·h (the off-diagonal blocks, in _chunk_scan_fwd) and out_proj. The gates, the
    discretisation (softplus, exp), D·x and the gated norm are element-wise, not counted."""
    mamba = model.mamba
    assert mamba is not None
    tokens, d = batch * seq_len, model.hidden
    q, n, p = mamba.chunk, mamba.state, mamba.head_dim
    chunks = batch * mamba.chunks(seq_len)  # (sequence, chunk): the products run per chunk
    per_head, per_group = chunks * mamba.heads, chunks * mamba.groups
    passing = float(2 * per_head * p * n)  # h_c = exp(ΣA) h_{c-1} + s_c: one multiply-add per element of the H x P x N state
    return [
        _matmul("ssm_in", "[z, x, B, C, dt] = x·W^in", tokens, d, mamba.in_proj_width, s),
        _matmul("ssm_conv", "causal conv1d (depthwise)", tokens, mamba.conv_kernel, 1, s, batch=mamba.conv_dim,
                shape=f"[{tokens}×{mamba.conv_kernel}]·[{mamba.conv_kernel}×1] ×{mamba.conv_dim}"),
        _matmul("ssd_cb", "C·B^T", q, n, q, s, batch=per_group, shape=f"[{q}×{n}]·[{n}×{q}] ×{per_group}"),
        _matmul("ssd_diag", "Y_diag = (L∘C·B^T)·X", q, q, p, s, batch=per_head, shape=f"[{q}×{q}]·[{q}×{p}] ×{per_head}"),
        _matmul("ssd_state", "S_c = B^T·X", n, q, p, s, batch=per_head, shape=f"[{n}×{q}]·[{q}×{p}] ×{per_head}"),
        LayerOp(key="ssd_pass", name="h_c = a_c h_(c-1) + S_c", kind="matmul", flops=passing, bytes=s * 3 * per_head * p * n,
                shape=f"[{p}×{n}] ×{per_head}", batch=per_head, m=p, k=1, n=n),
        _matmul("ssd_off", "Y_off = C·h", q, n, p, s, batch=per_head, shape=f"[{q}×{n}]·[{n}×{p}] ×{per_head}"),
        _matmul("ssm_out", "Out = norm(Y)·W^out", tokens, mamba.d_inner, d, s),
    ]  # fmt: skip


def _mla_ops(model: TransformerModel, batch: int, seq_len: int, s: float) -> list[LayerOp]:
    """Multi-head latent attention (DeepSeek-V2 sec. 2.1, as transformers' DeepseekV3Attention runs
    it in training: the latents are up-projected to per-head keys and values, no weight absorption).
    Queries through the q_lora_rank bottleneck (or one projection), keys and values through the
    kv_lora_rank latent plus a shared rotary key; scores over qk_nope + qk_rope dims, values v_head_dim."""
    mla = model.mla
    assert mla is not None
    tokens = batch * seq_len
    d, n, qk, v = model.hidden, model.heads, mla.qk_head_dim, mla.v_head_dim
    ops = []
    if mla.q_lora_rank:
        ops += [_matmul("q_down", "c_Q = x·W^DQ", tokens, d, mla.q_lora_rank, s),
                _matmul("q_up", "Q = c_Q·W^UQ", tokens, mla.q_lora_rank, n * qk, s)]  # fmt: skip
    else:
        ops.append(_matmul("q_proj", "Q = x·W^Q", tokens, d, n * qk, s))
    ops += [
        _matmul("kv_down", "[c_KV, k_R] = x·W^DKV", tokens, d, mla.kv_lora_rank + mla.qk_rope_head_dim, s),
        _matmul("kv_up", "[K_C, V] = c_KV·W^UKV", tokens, mla.kv_lora_rank, n * (mla.qk_nope_head_dim + v), s),
        _matmul("scores", "Q_i·K_i^T", seq_len, qk, seq_len, s, batch=batch * n,
                shape=f"[{seq_len}×{qk}]·[{qk}×{seq_len}] ×{batch * n}"),
        _elementwise("softmax", "softmax(·/√d)", batch * n * seq_len * seq_len, ELEMENTWISE_FLOP["softmax"], s, 1,
                     f"[{seq_len}×{seq_len}] ×{batch * n}"),
        _matmul("context", "Z_i = score_i·V_i", seq_len, seq_len, v, s, batch=batch * n,
                shape=f"[{seq_len}×{seq_len}]·[{seq_len}×{v}] ×{batch * n}"),
        _matmul("out_proj", "Out = Z·W^O", tokens, n * v, d, s),
    ]  # fmt: skip
    return ops


def _mlp_ops(model: TransformerModel, tokens: int, f: int, s: float, prefix: str, what: str, experts: int = 1,
             per_expert: float | None = None) -> list[LayerOp]:  # fmt: skip
    """A feed-forward block of width f: gate (gated MLPs), up, activation, down. With experts > 1, one
    grouped GEMM per matrix: `experts` products of per_expert tokens each (all FLOPs and bytes summed)."""
    d = model.hidden
    m = tokens if per_expert is None else per_expert
    group = f" ×{experts}" if experts > 1 else ""
    rows = f"{m:g}" if isinstance(m, float) else str(m)

    def gemm(key: str, name: str, k: int, n: int) -> LayerOp:
        return _matmul(f"{prefix}_{key}", name + what, m, k, n, s, batch=experts, shape=f"[{rows}×{k}]·[{k}×{n}]{group}")  # type: ignore[arg-type]

    ops = []
    if model.mlp.gated:
        ops.append(gemm("gate", "G = Out·W^gate", d, f))
    ops.append(gemm("up", "A = Out·W^1", d, f))
    reads = 2 if model.mlp.gated else 1
    label = {Mlp.RELU: "relu(A)", Mlp.GELU: "gelu(A)", Mlp.SWIGLU: "silu(G)⊙A", Mlp.GEGLU: "gelu(G)⊙A"}[model.mlp]
    elements = m * experts * f
    ops.append(_elementwise("activation" if prefix == "mlp" else f"{prefix}_activation", label + what, elements,  # type: ignore[arg-type]
                            ELEMENTWISE_FLOP[model.mlp.value], s, reads, f"[{rows}×{f}]{group}"))  # fmt: skip
    ops.append(gemm("down", "x' = A'·W^2", f, d))
    return ops


def tokens_per_expert(model: TransformerModel, tokens: int) -> float:
    """Tokens each routed expert computes in one MoE layer: tokens x top_k / experts under balanced
    routing (every expert gets the same share), capped at capacity_factor x that share when a
    capacity factor is set (a capacity factor below 1 drops the excess; 1 or more drops nothing
    when the routing is balanced). Dropless (no capacity factor): the balanced share."""
    moe = model.moe
    assert moe is not None
    share = tokens * moe.top_k / moe.experts
    if moe.capacity_factor is not None:
        share *= min(1.0, moe.capacity_factor)
    return int(share) if float(share).is_integer() else share


def _moe_ops(model: TransformerModel, tokens: int, s: float) -> list[LayerOp]:
    """An MoE layer's feed-forward: the router GEMM [tokens x h] x [h x experts], its softmax or
    sigmoid over experts, the routed experts as grouped GEMMs of tokens x top_k / experts tokens
    each (balanced routing), and the shared experts on every token (one FFN of shared_experts x
    width, as Megatron-LM's moe_shared_expert_intermediate_size and DeepSeek's DeepseekV3MLP run them)."""
    moe = model.moe
    assert moe is not None
    ops = [_matmul("router", "logits = x·W^router", tokens, model.hidden, moe.experts, s),
           _elementwise("router_score", "softmax / sigmoid(logits)", tokens * moe.experts, ELEMENTWISE_FLOP["softmax"], s, 1,
                        f"[{tokens}×{moe.experts}]")]  # fmt: skip
    ops += _mlp_ops(model, tokens, moe.expert_ffn_hidden, s, "expert", " (routed experts)", moe.experts, tokens_per_expert(model, tokens))
    if moe.shared_experts:
        ops += _mlp_ops(model, tokens, moe.shared_experts * moe.shared_width, s, "shared", " (shared experts)")
        if moe.shared_expert_gate:  # Qwen2-MoE: sigmoid(x·w) scales the shared expert's output (MixtureOfExperts.shared_expert_gate)
            ops.append(_matmul("shared_gate", "g = sigmoid(x·w^gate)", tokens, model.hidden, 1, s))
    return ops


def lm_head_op(model: TransformerModel, batch: int, seq_len: int, bytes_per_element: float) -> LayerOp | None:
    """The projection to vocabulary logits, once per model (None without a vocabulary)."""
    if model.vocab == 0:
        return None
    return _matmul("lm_head", "logits = x·W^vocab", batch * seq_len, model.hidden, model.vocab, bytes_per_element)
