"""torchtitan's MoE block at a small size inside tiny_torchtitan's Transformer, for FSDPMemTracker.

The MoE is pytorch/torchtitan at b5bcd76 (2026-08-21) torchtitan/models/common/moe.py, token_dispatcher.py and
torchtitan/ops/scatter_add.py, copied class by class with what ep = 1 runs: TokenChoiceTopKRouter.forward (the gate
in fp32, softmax or sigmoid scores, the expert_bias_E buffer added for the choice only, topk(sorted=False), the scores
gathered, route_norm's division, route_scale), MoE.forward (the one-hot routing map, tokens per expert, the
tokens_per_expert_E buffer's add_), LocalTokenDispatcher (argsort(stable=True) of the expert ids, the scores and the
tokens gathered in expert order; combine: zeros_like, the outputs times the scores in fp32 and back, the deterministic
scatter_add custom op with its own backward), GroupedExperts (w1_EFD, w2_EDF, w3_EFD through torch._grouped_mm,
silu(x w1) * (x w3), then w2) and the shared experts, a FeedForward w2(silu(w1(x)) * w3(x)).

Two things differ from b5bcd76 as the CPU requires, neither changing what is allocated:
- the router's gate runs under torch.autocast(dtype=float32) there; CPU autocast refuses float32 (torch/amp/
  autocast_mode.py: "CPU Autocast only supports dtypes of torch.bfloat16, torch.float16") and would leave the gate in
  bf16, while CUDA's casts the input and the weight to fp32 for the linear. The gate is written as those casts:
  F.linear(x.float(), gate.weight.float()) (the input cast first, as autocast's linear wrapper casts its arguments);
- b5bcd76's decoder runs on (T, D) token streams; the block here is tiny_torchtitan's (batch, seq, dim) one, so the
  MoE views its input as (T, D) and its output back (views: no memory), as torchtitan's MoE.forward did until 2026.

The attention, norms and loss are tiny_torchtitan's (9dec370: the code the torchtitan walk follows), the wrapping its
apply_fsdp (each block, then the root) and apply_ac (none, full). At ep = 1 with no more ranks than experts, b5bcd76's
apply_fsdp_to_decoder shards a MoE block as one unit with its experts on dim 0, as here (torchtitan/distributed/fsdp.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .eager_ops import TitanBlock
from .tiny_llama import LlamaConfig


@torch.library.custom_op("parcalc_ground_truth::deterministic_scatter_add", mutates_args=())
def deterministic_scatter_add(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """torchtitan/ops/scatter_add.py at b5bcd76 (the deterministic-algorithms switch left out: it allocates nothing)."""
    return out.scatter_add(dim=0, index=index, src=src)


@deterministic_scatter_add.register_fake
def _(out: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(out)


def _scatter_add_backward(ctx, grad_output):  # type: ignore[no-untyped-def]
    (index,) = ctx.saved_tensors
    return grad_output, None, torch.gather(grad_output, dim=0, index=index)


def _scatter_add_setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    _out, index, _src = inputs
    ctx.save_for_backward(index)


deterministic_scatter_add.register_autograd(_scatter_add_backward, setup_context=_scatter_add_setup_context)


@torch.library.custom_op("parcalc_ground_truth::fused_rms_norm", mutates_args=())
def fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """CUDA's aten._fused_rms_norm, which nn.RMSNorm runs on a CUDA input whose weight has its dtype (pytorch v2.13
    layer_norm.cpp rms_norm_symint); on the CPU that op is CompositeImplicitAutograd (x.float(), pow, mean, rsqrt, two
    muls, each a tensor), so this op stands for the CUDA kernel: the output in x's dtype, rstd in fp32."""
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x.float() * rstd * weight.float()).type_as(x), rstd


@fused_rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


def _fused_rms_norm_setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    x, weight, _eps = inputs
    ctx.save_for_backward(x, weight, output[1])  # FusedRmsNormBackward0 saves input, weight, result1 (Functions.h)


def _fused_rms_norm_backward(ctx, grad_out, _grad_rstd):  # type: ignore[no-untyped-def]
    # CUDA's _fused_rms_norm_backward returns the input's and the weight's gradients, one kernel; the tracker runs under
    # FakeTensorMode (no values), so the stand-in allocates those two and nothing else
    x, weight, _rstd = ctx.saved_tensors
    return torch.empty_like(x), torch.empty_like(weight), None


fused_rms_norm.register_autograd(_fused_rms_norm_backward, setup_context=_fused_rms_norm_setup_context)


class HeadRMSNorm(nn.Module):
    """b5bcd76's q_norm / k_norm: nn.RMSNorm(head_dim, eps=1e-6) over the last dim of (batch, seq, heads, head_dim), as
    CUDA runs it (fused_rms_norm)."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_rms_norm(x, self.weight, 1e-6)[0]


@dataclass(frozen=True)
class MoeConfig:
    experts: int = 8
    top_k: int = 2
    expert_ffn: int = 256  # GroupedExperts hidden_dim
    shared_ffn: int = 0  # the shared experts' FeedForward hidden_dim (0: none)
    score_func: str = "softmax"  # qwen3: softmax, route_norm; deepseek_v3 671B: sigmoid, route_norm, route_scale 2.5
    route_norm: bool = True
    route_scale: float = 1.0


class TokenChoiceTopKRouter(nn.Module):
    def __init__(self, hidden: int, m: MoeConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, m.experts, bias=False)
        self.m = m

    def forward(self, x_TD: torch.Tensor, expert_bias_E: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = self.m
        scores_TE = F.linear(x_TD.float(), self.gate.weight.float())  # CUDA's autocast(float32) (module docstring)
        scores_TE = torch.sigmoid(scores_TE) if m.score_func == "sigmoid" else F.softmax(scores_TE, dim=-1)
        scores_for_choice_TE = scores_TE if expert_bias_E is None else scores_TE + expert_bias_E
        _, topk_expert_ids_TK = torch.topk(scores_for_choice_TE, k=m.top_k, dim=-1, sorted=False)
        topk_scores_TK = scores_TE.gather(dim=-1, index=topk_expert_ids_TK)
        if m.route_norm:
            denominator = topk_scores_TK.sum(dim=-1, keepdim=True) + 1e-20
            topk_scores_TK = topk_scores_TK / denominator
        topk_scores_TK = topk_scores_TK * m.route_scale
        return topk_scores_TK, topk_expert_ids_TK, scores_TE


class GroupedExperts(nn.Module):
    def __init__(self, hidden: int, m: MoeConfig) -> None:
        super().__init__()
        self.num_experts = m.experts
        self.w1_EFD = nn.Parameter(torch.empty(m.experts, m.expert_ffn, hidden))
        self.w2_EDF = nn.Parameter(torch.empty(m.experts, hidden, m.expert_ffn))
        self.w3_EFD = nn.Parameter(torch.empty(m.experts, m.expert_ffn, hidden))

    def forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
        offsets_E = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)
        h_RF = F.silu(torch._grouped_mm(x_RD.bfloat16(), self.w1_EFD.bfloat16().transpose(-2, -1), offs=offsets_E))
        h_RF = h_RF * torch._grouped_mm(x_RD.bfloat16(), self.w3_EFD.bfloat16().transpose(-2, -1), offs=offsets_E)
        return torch._grouped_mm(h_RF, self.w2_EDF.bfloat16().transpose(-2, -1), offs=offsets_E).type_as(x_RD)


class LocalTokenDispatcher:
    def __init__(self, m: MoeConfig) -> None:
        self.top_k = m.top_k

    def dispatch(self, x_TD, topk_scores_TK, topk_expert_ids_TK):  # type: ignore[no-untyped-def]
        token_indices_experts_sorted_N = torch.argsort(topk_expert_ids_TK.view(-1), stable=True)
        topk_scores_experts_sorted_N = topk_scores_TK.view(-1)[token_indices_experts_sorted_N]
        token_indices_experts_sorted_N = token_indices_experts_sorted_N // self.top_k
        routed_input_ND = x_TD[token_indices_experts_sorted_N]
        return routed_input_ND, (token_indices_experts_sorted_N, topk_scores_experts_sorted_N)

    def combine(self, routed_output_RD, metadata, x_TD):  # type: ignore[no-untyped-def]
        token_indices, scores = metadata
        out_TD = torch.zeros_like(x_TD)
        routed_output_RD = (routed_output_RD.to(torch.float32) * scores.reshape(-1, 1)).to(routed_output_RD.dtype)
        dim = x_TD.shape[-1]
        return deterministic_scatter_add(out_TD, token_indices.reshape(-1, 1).expand(-1, dim), routed_output_RD)


class RoutedExperts(nn.Module):
    def __init__(self, hidden: int, m: MoeConfig) -> None:
        super().__init__()
        self.inner_experts = GroupedExperts(hidden, m)
        self.token_dispatcher = LocalTokenDispatcher(m)

    def forward(self, x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E):  # type: ignore[no-untyped-def]
        routed_input_RD, metadata = self.token_dispatcher.dispatch(x_TD, topk_scores_TK, topk_expert_ids_TK)
        routed_output_RD = self.inner_experts(routed_input_RD, num_local_tokens_per_expert_E)
        return self.token_dispatcher.combine(routed_output_RD, metadata, x_TD)


class FeedForward(nn.Module):
    """torchtitan/models/common/feed_forward.py at b5bcd76: w2(silu(w1(x)) * w3(x))."""

    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    def __init__(self, hidden: int, m: MoeConfig) -> None:
        super().__init__()
        self.routed_experts = RoutedExperts(hidden, m)
        self.router = TokenChoiceTopKRouter(hidden, m)
        self.shared_experts = FeedForward(hidden, m.shared_ffn) if m.shared_ffn else None
        # load_balance_coeff 1e-3 (the default): the expert_bias_E buffer; tokens_per_expert_E always
        self.register_buffer("expert_bias_E", torch.zeros(m.experts, dtype=torch.float32), persistent=True)
        self.register_buffer("tokens_per_expert_E", torch.zeros(m.experts, dtype=torch.float32), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_TD = x.view(-1, x.shape[-1])  # (batch, seq, dim) -> (T, D): a view (module docstring)
        topk_scores_TK, topk_expert_ids_TK, scores_TE = self.router(x_TD, self.expert_bias_E)
        routing_map_TE = torch.zeros_like(scores_TE, dtype=torch.bool).scatter_(-1, topk_expert_ids_TK, True)
        num_local_tokens_per_expert_E = routing_map_TE.sum(dim=0)
        if self.training:
            with torch.no_grad():
                self.tokens_per_expert_E.add_(num_local_tokens_per_expert_E)
        out_TD = self.routed_experts(x_TD, topk_scores_TK, topk_expert_ids_TK, num_local_tokens_per_expert_E)
        shared_out_TD = self.shared_experts(x_TD) if self.shared_experts is not None else None
        if shared_out_TD is not None:
            out_TD = out_TD + shared_out_TD
        return out_TD.view(x.shape)


class TitanMoeBlock(TitanBlock):
    """Qwen3TransformerBlock's order (b5bcd76 qwen3/model.py): x + attention(attention_norm(x)), then + moe(ffn_norm(x)),
    over tiny_torchtitan's attention."""

    moe_config = MoeConfig()

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__(c)
        del self.w1, self.w2, self.w3
        self.moe = MoE(c.hidden, self.moe_config)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(x)


class Qwen3MoeBlock(TitanMoeBlock):
    """Qwen3TransformerBlock with b5bcd76's GQAttention's q_norm and k_norm (common/attention.py GQAttention.forward:
    xq = q_norm(xq); xk = k_norm(xk) after the projections, before RoPE) in tiny_torchtitan's attention (9dec370's
    complex RoPE, repeat_kv, SDPA: the attention parcalc's torchtitan walk follows)."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__(c)
        self.q_norm, self.k_norm = HeadRMSNorm(c.head_dim), HeadRMSNorm(c.head_dim)

    def attention(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        from .tiny_llama import apply_rotary_emb, repeat_kv

        c = self.c
        b, s, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = self.q_norm(xq.view(b, s, c.heads, c.head_dim))
        xk = self.k_norm(xk.view(b, s, c.kv_heads, c.head_dim))
        xv = xv.view(b, s, c.kv_heads, c.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs)
        keys, values = repeat_kv(xk, c.heads // c.kv_heads), repeat_kv(xv, c.heads // c.kv_heads)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))


def tracked_moe_peak(c: LlamaConfig, m: MoeConfig, vocab: int, b: int, s: int, ac: str, mesh,  # type: ignore[no-untyped-def]
                     qk_norm: bool = False, dense_first: int = 0, mla: MlaConfig | None = None) -> dict[str, float]:  # fmt: skip
    """tiny_torchtitan.tracked_torchtitan_peak with MoE blocks of `m` (`qk_norm`: Qwen3's, Qwen3MoeBlock); the first
    `dense_first` blocks dense, each with the FeedForward of c.ffn (b5bcd76 deepseek_v3 build_mla_moe_layers:
    layer_id < n_dense_layers); `mla`: DeepSeek's latent attention in every block (mla_blocks), each with its own RoPE
    cache and no model-level freqs_cis (b5bcd76's Decoder has none)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from .tiny_torchtitan import Transformer, apply_ac, apply_fsdp_with_adamw, two_tracked_steps

    dense_block: type = TitanBlock
    block = type("Block", (Qwen3MoeBlock if qk_norm else TitanMoeBlock,), {"moe_config": m})
    if mla is not None:
        moe_block, dense_block = mla_blocks(mla, s)
        block = type("Block", (moe_block,), {"moe_config": m})
    model_class = type("MoeTransformer", (Transformer,), {"block": block})
    with FakeTensorMode():
        model = model_class(c, vocab, s)
        for i in range(dense_first):
            model.layers[str(i)] = dense_block(c)
        if mla is not None:
            model.register_buffer("freqs_cis", None)
        apply_ac(model, ac)
        opt = apply_fsdp_with_adamw(model, mesh)
        ids = torch.randint(0, vocab, (b, s))
        return two_tracked_steps(FSDPMemTracker(mod=model, optm=opt), model, opt, ids)


@torch.library.custom_op("parcalc_ground_truth::flex_attention", mutates_args=())
def flex_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """torchtitan's FlexAttention (its torch.compile'd flex_attention, causal block mask) as the CUDA kernel runs it
    (torch/_inductor/kernel/flex/flex_attention.py at v2.13.0): the output (B, n, T, v_head_dim) laid out as the query,
    the logsumexp in fp32. Causal attention computed plainly here; under FakeTensorMode only the fake kernel runs."""
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    lse = scores.logsumexp(-1)
    out = (scores - lse.unsqueeze(-1)).exp() @ v.float()
    return out.to(q.dtype).transpose(1, 2).contiguous().transpose(1, 2), lse


@flex_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    B, n, T, _ = q.shape
    return q.new_empty((B, T, n, v.shape[-1])).transpose(1, 2), q.new_empty((B, n, T), dtype=torch.float32)


def _flex_setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    q, k, v, _scale = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1])  # flex_attention_backward's query, key, value, out, logsumexp


def _flex_backward(ctx, grad_out, _grad_lse):  # type: ignore[no-untyped-def]
    # the compiled backward: delta = rowsum(out x grad_out) in fp32, then dq, dk, dv laid out as q, k, v (the tracker runs
    # under FakeTensorMode: no values, the stand-in allocates what the kernels write)
    q, k, v, out, _lse = ctx.saved_tensors
    delta = out.new_empty(out.shape[:-1], dtype=torch.float32)
    grads = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    del delta
    return *grads, None


flex_attention.register_autograd(_flex_backward, setup_context=_flex_setup_context)


@dataclass(frozen=True)
class MlaConfig:
    q_lora_rank: int = 0
    kv_lora_rank: int = 256
    nope: int = 128  # qk_nope_head_dim
    rope: int = 64  # qk_rope_head_dim
    v: int = 128  # v_head_dim


class MlaAttention(nn.Module):
    """pytorch/torchtitan at b5bcd76 torchtitan/models/deepseek_v3/model.py Attention, copied op by op on (T, D) tokens:
    wq (or wq_a, q_norm, wq_b), wkv_a, kv_norm, wkv_b, wo; ComplexRoPE (models/common/rope.py) with this attention's own
    cache of seq x rope / 2 complex64; q_norm / kv_norm nn.RMSNorm as CUDA's fused kernel (fused_rms_norm) and
    FlexAttention as its kernel (flex_attention)."""

    def __init__(self, c: LlamaConfig, m: MlaConfig, seq: int) -> None:
        from .tiny_llama import rope

        super().__init__()
        self.m, self.heads, d = m, c.heads, m.nope + m.rope
        if m.q_lora_rank:
            self.wq_a = nn.Linear(c.hidden, m.q_lora_rank, bias=False)
            self.q_norm = HeadRMSNorm(m.q_lora_rank)
            self.wq_b = nn.Linear(m.q_lora_rank, c.heads * d, bias=False)
        else:
            self.wq = nn.Linear(c.hidden, c.heads * d, bias=False)
        self.wkv_a = nn.Linear(c.hidden, m.kv_lora_rank + m.rope, bias=False)
        self.kv_norm = HeadRMSNorm(m.kv_lora_rank)
        self.wkv_b = nn.Linear(m.kv_lora_rank, c.heads * (m.nope + m.v), bias=False)
        self.wo = nn.Linear(c.heads * m.v, c.hidden, bias=False)
        self.register_buffer("cache", rope(seq, m.rope), persistent=False)

    def rotary(self, query: torch.Tensor, key: torch.Tensor, b: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        """ComplexRoPE.apply_rotary_emb; the cache broadcast over (b, s) tokens (a view)."""
        cache = self.cache[:s].view(1, s, 1, -1)
        xq_ = torch.view_as_complex(query.float().reshape(b, s, query.shape[1], -1, 2))
        xk_ = torch.view_as_complex(key.float().reshape(b, s, key.shape[1], -1, 2))
        xq_out = torch.view_as_real(xq_ * cache).flatten(-2).view(query.shape)
        xk_out = torch.view_as_real(xk_ * cache).flatten(-2).view(key.shape)
        return xq_out.type_as(query), xk_out.type_as(key)

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        m = self.m
        b, s, _ = x_BSD.shape
        x = x_BSD.view(-1, x_BSD.shape[-1])
        num_tokens = x.shape[0]
        q = self.wq(x) if not m.q_lora_rank else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(num_tokens, -1, m.nope + m.rope)
        q_nope, q_pe = torch.split(q, [m.nope, m.rope], dim=-1)
        kv = self.wkv_a(x)
        kv, k_pe = torch.split(kv, [m.kv_lora_rank, m.rope], dim=-1)
        q_pe, k_pe = self.rotary(q_pe, k_pe.unsqueeze(1), b, s)
        q = torch.cat([q_nope, q_pe], dim=-1)
        kv = self.wkv_b(self.kv_norm(kv))
        kv = kv.view(num_tokens, -1, m.nope + m.v)
        k_nope, v = torch.split(kv, [m.nope, m.v], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, k_nope.size(1), -1)], dim=-1)
        scale = (m.nope + m.rope) ** -0.5
        out_BNTH, _lse = flex_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0), scale)
        output = out_BNTH.squeeze(0).transpose(0, 1).contiguous()
        return self.wo(output.view(num_tokens, -1)).view(b, s, -1)


def mla_blocks(m: MlaConfig, seq: int) -> tuple[type, type]:
    """DeepSeekV3TransformerBlock's two kinds over tiny_torchtitan's norms: (the MoE block, the dense block), each with
    the latent attention of `m` in place of the Llama attention."""

    def init(base: type):  # type: ignore[no-untyped-def]
        def __init__(self, c: LlamaConfig) -> None:  # type: ignore[no-untyped-def]
            base.__init__(self, c)
            del self.wq, self.wk, self.wv, self.wo
            self.mla = MlaAttention(c, m, seq)

        return __init__

    def attention(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return self.mla(x)

    moe = type("MlaMoeBlock", (TitanMoeBlock,), {"__init__": init(TitanMoeBlock), "attention": attention})
    dense = type("MlaDenseBlock", (TitanBlock,), {"__init__": init(TitanBlock), "attention": attention})
    return moe, dense
