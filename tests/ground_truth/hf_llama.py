"""A Hugging Face Llama decoder layer as transformers runs it eagerly, for the `hf` kernel set's ground truth.

Transcribed from huggingface/transformers src/transformers/models/llama/modeling_llama.py (LlamaRMSNorm,
LlamaMLP, apply_rotary_pos_emb / rotate_half, LlamaAttention, LlamaDecoderLayer) and
src/transformers/integrations/sdpa_attention.py (sdpa_attention_forward: enable_gqa=True instead of
repeat_kv when there is no attention mask, use_gqa_in_sdpa), as of transformers 5.x, the version of the
shared H200 steps (../shared/measurements/h200-2026-11-28: transformers 5.17, fp32 weights under
torch.autocast(bfloat16), attn_implementation "sdpa", no padding: the causal mask is SDPA's is_causal):

    LlamaRMSNorm.forward:    h = x.to(float32); var = h.pow(2).mean(-1, keepdim=True)
                             h = h * torch.rsqrt(var + eps); return self.weight * h.to(input_dtype)
    rotate_half(x):          torch.cat((-x2, x1), dim=-1)
    apply_rotary_pos_emb:    q * cos + rotate_half(q) * sin (and k)
    LlamaMLP.forward:        down_proj(act_fn(gate_proj(x)) * up_proj(x))
    LlamaDecoderLayer:       h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h))

The rotary table (cos, sin) comes from LlamaRotaryEmbedding.forward in fp32 (autocast disabled there) cast to
the hidden states' dtype, fp32 under autocast over fp32 weights; it is computed once per forward, outside
the layers (an input here). The residual stream is fp32 (the embedding's output), so the norms' casts are
no-ops and autocast casts each linear's input to bf16 per call (q, k and v each cast the same normed input)
and each weight once per forward (autocast's cache of leaf tensors).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class HFRMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class HFLlamaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm, self.post_attention_layernorm = HFRMSNorm(hidden), HFRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def attention(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads < self.heads)
        out = out.transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(b, s, -1).contiguous())

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.input_layernorm(x), cos, sin)
        y = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


def rotary(seq: int, head_dim: int, theta: float = 500000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """LlamaRotaryEmbedding.forward's cos and sin for positions 0..s-1: [1, s, head_dim] fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(seq).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None], emb.sin()[None]
