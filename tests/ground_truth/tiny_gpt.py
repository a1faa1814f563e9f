"""A small GPT in plain PyTorch, and helpers that measure what autograd keeps for backward.

The layer is the textbook one of Korthikanti et al. 2022 (sec. 4.1, "Reducing Activation
Recomputation in Large Transformer Models"): LayerNorm -> fused QKV projection -> Q K^T ->
softmax -> dropout -> x V -> output projection -> dropout -> residual, LayerNorm -> MLP up ->
GELU -> MLP down -> dropout -> residual. Options give the variants parcalc also models:
grouped-query attention (`kv_heads`), a SwiGLU / ReLU MLP, no dropout.

Dropout calls `torch.native_dropout`, which returns the 1-byte boolean mask that the CUDA kernel
saves; `F.dropout` on the CPU multiplies by a noise tensor of the input's dtype instead
(aten/src/ATen/native/Dropout.cpp: the fused kernel is used only on CUDA/XPU and a few others).

Everything is device-agnostic: pass `device="cuda"` to measure the same layer on a GPU.

    model = TinyGpt(TinyConfig(), device="cpu", dtype=torch.bfloat16)
    saved = saved_activation_bytes(model, tokens)        # bytes per layer, embedding, head
    flops = counted_flops(model, tokens)                  # FlopCounterMode, forward and backward
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class TinyConfig:
    """Shapes of the small GPT: hidden h, heads a, kv_heads (GQA), ffn f, layers L, vocab V."""

    hidden: int = 64
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 256
    layers: int = 2
    vocab: int = 96
    max_seq: int = 32
    mlp: str = "gelu"  # gelu, relu or swiglu
    dropout: float = 0.1  # 0 = no dropout layers at all
    attention: str = "math"  # math: explicit Q K^T, softmax, dropout, x V; sdpa: F.scaled_dot_product_attention

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout that saves a 1-byte mask, as the GPU kernels do (torch.native_dropout)."""
    if p == 0.0 or not training:
        return x
    out, _mask = torch.native_dropout(x, p, True)
    return out


class Block(nn.Module):
    """One pre-norm transformer layer (GPT-2 / Megatron layout), [b, s, h] in and out."""

    def __init__(self, config: TinyConfig, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        c = config
        self.config = c
        kw = {"device": device, "dtype": dtype}
        self.ln1 = nn.LayerNorm(c.hidden, **kw)
        self.qkv = nn.Linear(c.hidden, (c.heads + 2 * c.kv_heads) * c.head_dim, **kw)
        self.proj = nn.Linear(c.heads * c.head_dim, c.hidden, **kw)
        self.ln2 = nn.LayerNorm(c.hidden, **kw)
        gated = c.mlp == "swiglu"
        self.fc1 = nn.Linear(c.hidden, (2 if gated else 1) * c.ffn, **kw)
        self.fc2 = nn.Linear(c.ffn, c.hidden, **kw)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        b, s, _ = x.shape
        group = c.heads // c.kv_heads
        qkv = self.qkv(x)
        q, k, v = qkv.split([c.heads * c.head_dim, c.kv_heads * c.head_dim, c.kv_heads * c.head_dim], dim=-1)
        if c.attention == "sdpa":
            # PyTorch's fused attention (on the CPU its flash kernel, on CUDA FlashAttention or the
            # memory-efficient kernel): keeps Q, K, V, the output and a log-sum-exp per row, no s x s
            # tensor. Its output is laid out [b, s, heads, head_dim], so the merge below is a view.
            q = q.view(b, s, c.heads, c.head_dim).transpose(1, 2)
            k = k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
            v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=c.dropout if self.training else 0.0,
                                                 enable_gqa=c.kv_heads != c.heads)  # fmt: skip
            return self.proj(out.transpose(1, 2).reshape(b, s, c.heads * c.head_dim))
        # Grouped-query attention without repeating K and V: the `group` query heads that share
        # a K/V head are stacked along the rows, [b, kv_heads, group x s, head_dim], so that the
        # saved K and V keep their kv_heads width (as FlashAttention and SDPA's enable_gqa do).
        q = q.view(b, s, c.kv_heads, group, c.head_dim).permute(0, 2, 3, 1, 4).reshape(b, c.kv_heads, group * s, c.head_dim)
        k = k.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        v = v.view(b, s, c.kv_heads, c.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(c.head_dim))
        # causal mask as an additive constant: an add with a tensor that needs no gradient saves
        # nothing, as in Megatron's fused scale-mask-softmax (masked_fill would save the mask)
        causal = torch.full((s, s), float("-inf"), device=x.device, dtype=scores.dtype).triu(1).repeat(group, 1)
        probs = _dropout(torch.softmax(scores + causal, dim=-1), c.dropout, self.training)
        context = torch.matmul(probs, v)  # [b, kv_heads, group x s, head_dim]
        context = context.view(b, c.kv_heads, group, s, c.head_dim).permute(0, 3, 1, 2, 4).reshape(b, s, c.heads * c.head_dim)
        return self.proj(context)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        up = self.fc1(x)
        if c.mlp == "swiglu":
            gate, value = up.chunk(2, dim=-1)
            hidden = F.silu(gate) * value
        elif c.mlp == "relu":
            hidden = F.relu(up)
        else:
            hidden = F.gelu(up)
        return self.fc2(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.config.dropout
        x = x + _dropout(self.attention(self.ln1(x)), p, self.training)
        return x + _dropout(self.mlp(self.ln2(x)), p, self.training)


class TinyGpt(nn.Module):
    """Token + learned position embeddings, dropout, `layers` Blocks, final LayerNorm, tied LM head."""

    def __init__(self, config: TinyConfig = TinyConfig(), device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None, checkpoint_layers: bool = False) -> None:  # fmt: skip
        super().__init__()
        c = config
        kw = {"device": device, "dtype": dtype}
        self.config = c
        self.checkpoint_layers = checkpoint_layers
        self.wte = nn.Embedding(c.vocab, c.hidden, **kw)
        self.wpe = nn.Embedding(c.max_seq, c.hidden, **kw)
        self.blocks = nn.ModuleList(Block(c, device, dtype) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.hidden, **kw)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = _dropout(self.wte(tokens) + self.wpe(positions), self.config.dropout, self.training)
        for block in self.blocks:
            if self.checkpoint_layers:
                # Reentrant checkpointing saves the layer's input with save_for_backward, where
                # saved_tensors_hooks see it; the non-reentrant form keeps it in a closure.
                x = checkpoint(block, x, use_reentrant=True)
            else:
                x = block(x)
        return x

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = F.linear(self.ln_f(self.hidden_states(tokens)), self.wte.weight)  # tied LM head
        # Megatron computes the cross-entropy on fp32 logits (Korthikanti et al. 2022 sec. 4.3)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


# ---------------------------------------------------------------------------------------------
# Measuring what autograd saves


@dataclass
class SavedBytes:
    """Bytes of the distinct storages autograd saved for backward, by where they were saved.

    layers: one entry per Block; embedding: before the first Block; head: after the last.
    tensors: (region, shape, dtype, bytes) of every distinct storage, for explaining terms.
    """

    layers: list[int]
    embedding: int
    head: int
    tensors: list[tuple[str, tuple[int, ...], torch.dtype, int]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.layers) + self.embedding + self.head


@contextmanager
def _region_tracker(model: TinyGpt) -> Iterator[list[str]]:
    """A one-element list naming the region whose forward is running: "embedding", "layer i", "head"."""
    current = ["embedding"]
    handles = []
    for index, block in enumerate(model.blocks):
        handles.append(block.register_forward_pre_hook(lambda _m, _a, i=index: current.__setitem__(0, f"layer {i}")))
    # the head starts at the final norm, not when the last block returns: a reentrant checkpoint
    # packs the layer input it saved after its block has run
    handles.append(model.ln_f.register_forward_pre_hook(lambda _m, _a: current.__setitem__(0, "head")))
    try:
        yield current
    finally:
        for handle in handles:
            handle.remove()


def saved_activation_bytes(model: TinyGpt, tokens: torch.Tensor, targets: torch.Tensor) -> SavedBytes:
    """Run one forward in training mode and count the tensors autograd keeps for backward.

    Each storage is counted once (a view and its base, or a tensor saved by two ops, are one
    allocation), at the region where it was first saved; parameters are not activations and are
    left out. With checkpoint_layers the reentrant checkpoint's own save_for_backward of the
    layer input is what a layer keeps.
    """
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, str] = {}
    found: list[tuple[str, tuple[int, ...], torch.dtype, int]] = []
    model.train()
    with _region_tracker(model) as region:

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key not in parameters and key not in seen and storage.nbytes() > 0:
                seen[key] = region[0]
                found.append((region[0], tuple(tensor.shape), tensor.dtype, storage.nbytes()))
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(tokens, targets)
    del loss
    layers = [sum(n for r, _, _, n in found if r == f"layer {i}") for i in range(len(model.blocks))]
    embedding = sum(n for r, _, _, n in found if r == "embedding")
    head = sum(n for r, _, _, n in found if r == "head")
    return SavedBytes(layers, embedding, head, found)


@dataclass(frozen=True)
class CountedFlops:
    """FLOPs FlopCounterMode counts (matmuls only) for one forward, and forward + backward."""

    forward: int
    forward_backward: int


def counted_flops(model: TinyGpt, tokens: torch.Tensor, targets: torch.Tensor) -> CountedFlops:
    from torch.utils.flop_counter import FlopCounterMode

    model.train()
    with FlopCounterMode(display=False) as counter:
        loss = model(tokens, targets)
    forward = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        loss = model(tokens, targets)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return CountedFlops(forward, counter.get_total_flops())


def sample_batch(config: TinyConfig, batch: int, seq: int, device: str | torch.device | None = None,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, config.vocab, (batch, seq), generator=generator)
    targets = torch.randint(0, config.vocab, (batch, seq), generator=generator)
    return tokens.to(device), targets.to(device)
