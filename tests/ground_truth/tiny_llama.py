"""A small Llama block as TorchTitan writes it, and TorchTitan's op-level selective checkpointing.

The block follows pytorch/torchtitan torchtitan/models/llama/model.py at 1ea476e9f (2024-04-24, the
commit of TorchTitan's published Llama 3 8B table): RMSNorm in fp32 (`_norm(x.float()).type_as(x)`),
separate bias-free wq, wk, wv, RoPE through complex numbers (apply_rotary_emb), repeat_kv,
F.scaled_dot_product_attention(is_causal=True), wo, and FeedForward w2(F.silu(w1(x)) * w3(x)). A
non-gated variant (w2(gelu(w1(x)))) checks the policy's counting on an MLP with two matmuls.

The policy is TorchTitan's `_custom_policy` of torchtitan/parallelisms/parallelize_llama.py at the
same commit (lines 35-72): save the outputs of the ops in its list, except every second aten.mm.
On the CPU, F.scaled_dot_product_attention without dropout runs
aten._scaled_dot_product_flash_attention_for_cpu, the CPU counterpart of the CUDA flash kernel in
TorchTitan's list; it is added to the list here, and nothing else is.

    blocks = TinyLlama(config)
    kept = sac_saved_bytes(blocks, x)      # per block: the cached op outputs and the block input
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

# torchtitan/parallelisms/parallelize_llama.py at 1ea476e9f, lines 35-41 (no_recompute_list), with the
# CPU flash kernel standing for the CUDA one (module docstring)
SAVE_LIST = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


@dataclass(frozen=True)
class LlamaConfig:
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 160
    layers: int = 2
    gated: bool = True  # SwiGLU (w1, w3, w2); False: GELU (w1, w2)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, dtype: torch.dtype | None = None, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope(seq: int, head_dim: int) -> torch.Tensor:
    """precompute_freqs_cis of torchtitan's model.py: complex64 [seq, head_dim / 2]."""
    freqs = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    return torch.polar(torch.ones(seq, head_dim // 2), torch.outer(torch.arange(seq).float(), freqs))


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i in (1, xq_.ndim - 1) else 1 for i, d in enumerate(xq_.shape)]
    freqs = freqs.view(*shape)
    return torch.view_as_real(xq_ * freqs).flatten(3).type_as(xq), torch.view_as_real(xk_ * freqs).flatten(3).type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, s, kv, d = x.shape
    return x if n_rep == 1 else x[:, :, :, None, :].expand(b, s, kv, n_rep, d).reshape(b, s, kv * n_rep, d)


class Block(nn.Module):
    def __init__(self, c: LlamaConfig, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        kw = {"bias": False, "dtype": dtype}
        self.c = c
        self.attention_norm, self.ffn_norm = RMSNorm(c.hidden, dtype), RMSNorm(c.hidden, dtype)
        self.wq = nn.Linear(c.hidden, c.heads * c.head_dim, **kw)
        self.wk = nn.Linear(c.hidden, c.kv_heads * c.head_dim, **kw)
        self.wv = nn.Linear(c.hidden, c.kv_heads * c.head_dim, **kw)
        self.wo = nn.Linear(c.heads * c.head_dim, c.hidden, **kw)
        self.w1 = nn.Linear(c.hidden, c.ffn, **kw)
        self.w2 = nn.Linear(c.ffn, c.hidden, **kw)
        self.w3 = nn.Linear(c.hidden, c.ffn, **kw) if c.gated else None

    def attention(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        c = self.c
        b, s, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(b, s, c.heads, c.head_dim)
        xk = xk.view(b, s, c.kv_heads, c.head_dim)
        xv = xv.view(b, s, c.kv_heads, c.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs)
        keys, values = repeat_kv(xk, c.heads // c.kv_heads), repeat_kv(xv, c.heads // c.kv_heads)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs)
        return h + self.feed_forward(self.ffn_norm(h))


class TinyLlama(nn.Module):
    """`layers` Blocks, each under TorchTitan's op-level selective checkpointing (`sac`) or plain."""

    def __init__(self, c: LlamaConfig, dtype: torch.dtype | None = None, sac: bool = True, early_stop: bool = False) -> None:
        super().__init__()
        self.c, self.sac, self.early_stop = c, sac, early_stop
        self.blocks = nn.ModuleList(Block(c, dtype) for _ in range(c.layers))
        self.caches: list[dict] = []  # the SAC cache of each block's last forward

    def context_fn(self) -> tuple:
        caching, cached = create_selective_checkpoint_contexts(torchtitan_policy())
        self.caches.append(caching.storage)
        return caching, cached

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        freqs = rope(x.shape[1], self.c.head_dim)
        self.caches = []
        for block in self.blocks:
            if self.sac:
                x = checkpoint(block, x, freqs, use_reentrant=False, context_fn=self.context_fn, early_stop=self.early_stop)
            else:
                x = block(x, freqs)
        return x


def torchtitan_policy() -> Callable:
    """_custom_policy of torchtitan/parallelisms/parallelize_llama.py at 1ea476e9f, in the
    CheckpointPolicy form torchtitan uses since (parallelize_llama.py at 7e93822e, lines 236-250):
    one mm counter for the forward and one for the recompute."""
    meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

    def policy(ctx, func, *args, **kwargs) -> CheckpointPolicy:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        # Saves output of all compute ops, except every second mm
        to_save = func in SAVE_LIST and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _tensors(value: object) -> list[torch.Tensor]:
    """Every tensor in a SAC cache (torch.utils.checkpoint stores op outputs as _VersionWrapper(val))."""
    if hasattr(value, "val") and hasattr(value, "version"):
        return _tensors(value.val)
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


@dataclass
class KeptBytes:
    """Per block: the distinct storages of the SAC cache, and the block's input."""

    cached: list[list[tuple[tuple[int, ...], torch.dtype, int]]]
    inputs: list[int]

    @property
    def layers(self) -> list[int]:
        return [sum(n for _, _, n in cache) + inp for cache, inp in zip(self.cached, self.inputs, strict=True)]


def sac_saved_bytes(model: TinyLlama, x: torch.Tensor) -> KeptBytes:
    """One forward under SAC: what each block's checkpoint keeps until its backward. The block's
    input (held by the checkpoint as its argument) and the distinct storages of the cached op
    outputs; the non-reentrant checkpoint packs nothing else (its saved-tensor hooks keep handles)."""
    inputs: list[int] = []
    handles = [b.register_forward_pre_hook(lambda _m, args: inputs.append(args[0].untyped_storage().nbytes())) for b in model.blocks]
    try:
        out = model(x)
    finally:
        for handle in handles:
            handle.remove()
    del out
    cached = []
    for storage in model.caches:
        seen: dict[int, tuple[tuple[int, ...], torch.dtype, int]] = {}
        for tensor in _tensors(storage):
            seen.setdefault(tensor.untyped_storage().data_ptr(), (tuple(tensor.shape), tensor.dtype, tensor.untyped_storage().nbytes()))
        cached.append(list(seen.values()))
    return KeptBytes(cached, inputs[: model.c.layers])


def counted_flops(model: TinyLlama, x: torch.Tensor) -> tuple[int, int]:
    """FlopCounterMode's (forward, forward + backward) FLOPs of one step."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        model(x)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        model(x).float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return forward, counter.get_total_flops()

