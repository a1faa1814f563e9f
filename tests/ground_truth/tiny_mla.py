"""A small multi-head latent attention block (DeepSeek-V2 sec. 2.1) written as Megatron-LM's
MLASelfAttention runs it (megatron/core/transformer/multi_latent_attention.py at d98e8a6,
get_query_key_value_tensors and qkv_up_proj_and_rope_apply), for the ground-truth test of
parcalc.core.activations.mla_tensors:

- the block's input is the normed hidden states (the down projections' shared input);
- q: a down projection to the q latent c_q (q_lora_rank), its RMSNorm, an up projection to
  heads x (qk_nope + qk_rope); with q_lora_rank = 0 one projection from the hidden states;
- kv: one down projection to [c_kv, k_rope] (kv_lora_rank + qk_rope), split; c_kv's RMSNorm and
  an up projection to heads x (qk_nope + v); k_rope is shared by the heads;
- RoPE on the rotary parts (t cos + rotate_half(t) sin, cos and sin fixed buffers), then
  query = cat(q_nope, q_rope) and key = cat(k_nope, k_rope expanded), made contiguous;
- causal attention written out (Q K^T, mask, softmax, · V), no dropout, and the output projection.

The RMSNorm is an autograd.Function that keeps its input and its fp32 rstd, as the fused kernels
do (Transformer Engine's rmsnorm, apex FusedRMSNorm): torch.nn.functional.rms_norm is a
composite op on the CPU and keeps its fp32 intermediates. The linear after each norm keeps the
norm's output, as TE's LayerNormLinear keeps ln_out."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


class RmsNormFn(torch.autograd.Function):
    """y = x / rms(x) * w; keeps x and the fp32 rstd (b x s values), as a fused RMSNorm."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (x.float() * rstd).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        xf, gw = x.float(), (grad * weight).float()
        dx = rstd * (gw - xf * rstd.pow(2) * (gw * xf).mean(-1, keepdim=True))
        dw = (grad.float() * xf * rstd).sum(dim=tuple(range(grad.dim() - 1)))
        return dx.to(x.dtype), dw.to(weight.dtype), None


def rotate_half(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


class TinyMla(torch.nn.Module):
    def __init__(self, hidden: int, heads: int, q_lora: int, kv_lora: int, nope: int, rope: int, v_dim: int, seq: int,
                 dtype: torch.dtype = torch.float32) -> None:  # fmt: skip
        super().__init__()
        self.heads, self.q_lora, self.kv_lora, self.nope, self.rope, self.v_dim = heads, q_lora, kv_lora, nope, rope, v_dim

        def weight(rows: int, cols: int) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(rows, cols, dtype=dtype) / math.sqrt(cols))

        qk = nope + rope
        if q_lora:
            self.q_down, self.q_norm, self.q_up = weight(q_lora, hidden), torch.nn.Parameter(torch.ones(q_lora, dtype=dtype)), weight(heads * qk, q_lora)
        else:
            self.q_proj = weight(heads * qk, hidden)
        self.kv_down = weight(kv_lora + rope, hidden)
        self.kv_norm = torch.nn.Parameter(torch.ones(kv_lora, dtype=dtype))
        self.kv_up = weight(heads * (nope + v_dim), kv_lora)
        self.o_proj = weight(hidden, heads * v_dim)
        inv = 1.0 / (10000 ** (torch.arange(0, rope, 2, dtype=torch.float32) / rope))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        angles = torch.cat((angles, angles), dim=-1)  # [s, rope]
        self.register_buffer("cos", angles.cos().to(dtype)[None, :, None, :])  # [1, s, 1, rope]
        self.register_buffer("sin", angles.sin().to(dtype)[None, :, None, :])
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1))
        self.scale = 1.0 / math.sqrt(qk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [b, s, hidden], the normed hidden states."""
        b, s, _ = x.shape
        n, nope, rope = self.heads, self.nope, self.rope
        if self.q_lora:
            c_q = F.linear(x, self.q_down)
            q = F.linear(RmsNormFn.apply(c_q, self.q_norm, 1e-6), self.q_up)
        else:
            q = F.linear(x, self.q_proj)
        kv_combined = F.linear(x, self.kv_down)
        c_kv, k_rope = torch.split(kv_combined, [self.kv_lora, rope], dim=-1)
        kv = F.linear(RmsNormFn.apply(c_kv, self.kv_norm, 1e-6), self.kv_up).view(b, s, n, nope + self.v_dim)
        q = q.view(b, s, n, nope + rope)
        q_nope, q_rope = torch.split(q, [nope, rope], dim=-1)
        k_nope, value = torch.split(kv, [nope, self.v_dim], dim=-1)
        k_rope = k_rope.unsqueeze(2)  # [b, s, 1, rope], shared by the heads
        q_rope = q_rope * self.cos + rotate_half(q_rope) * self.sin
        k_rope = k_rope * self.cos + rotate_half(k_rope) * self.sin
        query = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2).contiguous()  # [b, n, s, 192-like]
        key = torch.cat([k_nope, k_rope.expand(-1, -1, n, -1)], dim=-1).transpose(1, 2).contiguous()
        value = value.transpose(1, 2).contiguous()
        scores = (query @ key.transpose(-2, -1)) * self.scale
        probs = F.softmax(scores.masked_fill(self.mask, float("-inf")), dim=-1)
        out = (probs @ value).transpose(1, 2).reshape(b, s, n * self.v_dim)
        return F.linear(out, self.o_proj)


def saved_storages(block: TinyMla, x: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """(shape, dtype, storage bytes) of each distinct storage autograd saves in one forward and
    backward, parameters and buffers (weights, cos, sin, the causal mask) left out."""
    fixed = {t.untyped_storage().data_ptr() for t in (*block.parameters(), *block.buffers())}
    seen: dict[int, tuple[tuple[int, ...], torch.dtype, int]] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in fixed:
            seen.setdefault(storage.data_ptr(), (tuple(tensor.shape), tensor.dtype, storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        block(x).float().sum().backward()
    return list(seen.values())
