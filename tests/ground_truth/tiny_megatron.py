"""One Megatron-Core transformer layer in small, plain PyTorch, with its --recompute-modules checkpoints.

The layer is what Megatron-LM's Transformer Engine layer spec builds (megatron/core/models/gpt/
gpt_layer_specs.py at d98e8a64): a dense layer's norms are fused into the linear after them (input
norm into linear_qkv, pre-MLP norm into linear_fc1: TE's LayerNormLinear keeps the norm's input and
its output), an MoE layer's pre-MLP norm is a module of its own (TENorm) before the router, the
experts and the shared experts. Here a "fused" norm is F.layer_norm followed by the linear in the
same module, which keeps the same two tensors; the MLP's fc1 writes [gate, up] as one tensor and the
SwiGLU is Megatron's fused one (megatron/core/fusions/fused_bias_swiglu.py, SwiGLUFunction: it saves
its input, the fc1 output, and nothing else). Attention is the unfused core without dropout: Q·K^T,
softmax, ·V over contiguous [b·a, s, d] heads (what Megatron's DotProductAttention keeps).

`modules` are Megatron's recompute_modules (parcalc.core.recompute.MEGATRON_MODULE_SITES), each
checkpointed as Megatron-LM does it:
- core_attn, mlp, moe, shared_experts: torch.utils.checkpoint with use_reentrant=True, which is what
  Megatron's tensor_parallel.checkpoint is (megatron/core/tensor_parallel/random.py, CheckpointFunction:
  a torch.autograd.Function that runs the module under no_grad and save_for_backward's its inputs);
- layernorm (the MoE layer's pre-MLP norm) and moe_act (the experts' activation):
  CheckpointWithoutOutput below, Megatron's class of the same name (random.py lines 748-1010) without
  its RNG and FP8 state: the module runs under no_grad, its inputs are saved, and once its consumer has
  run the output's storage is freed (`output.untyped_storage().resize_(0)`) and made again by a
  gradient hook before the consumer's backward needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .tiny_moe import dispatch


@dataclass(frozen=True)
class MegatronConfig:
    hidden: int = 32
    heads: int = 4
    ffn: int = 48  # the dense MLP's width
    experts: int = 8
    top_k: int = 2
    expert_ffn: int = 40
    shared_ffn: int = 24  # 0: no shared expert


class SwiGLU(torch.autograd.Function):
    """Megatron-LM's fused SwiGLU (fused_bias_swiglu.py, SwiGLUFunction): saves its input [gate, up] only."""

    @staticmethod
    def forward(ctx, y: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(y)
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        gate, up = y.chunk(2, dim=-1)
        sig = torch.sigmoid(gate)
        silu = gate * sig
        return torch.cat((grad * up * sig * (1 + gate * (1 - sig)), grad * silu), dim=-1)


class _WithoutOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, holder, *args):  # type: ignore[no-untyped-def, override]
        with torch.no_grad():
            out = run(*args)
        ctx.save_for_backward(*args)
        holder.ctx = ctx
        return out

    @staticmethod
    def backward(ctx, *grads):  # type: ignore[no-untyped-def, override]
        inputs, outputs = ctx.inputs, ctx.outputs
        torch.autograd.backward(outputs, grads)
        return (None, None, *(i.grad for i in inputs))


class CheckpointWithoutOutput:
    """Megatron-LM's CheckpointWithoutOutput (tensor_parallel/random.py), its memory behaviour only."""

    def checkpoint(self, run, *args: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
        self.run = run
        out = _WithoutOutput.apply(run, self, *args)
        self.outputs = (out,)
        return out

    def _recompute(self, _grad: torch.Tensor) -> None:
        inputs = tuple(t.detach().requires_grad_(t.requires_grad) for t in self.ctx.saved_tensors)
        with torch.enable_grad():
            outputs = (self.run(*inputs),)
        for output, again in zip(self.outputs, outputs, strict=True):  # the storage comes back with the same data
            output.untyped_storage().resize_(again.untyped_storage().nbytes())
            output.untyped_storage().copy_(again.untyped_storage())
        self.ctx.inputs, self.ctx.outputs = inputs, outputs

    def discard_output_and_register_recompute(self, hook_tensor: torch.Tensor) -> None:
        for output in self.outputs:
            output.untyped_storage().resize_(0)
        hook_tensor.register_hook(self._recompute)


class MegatronLayer(torch.nn.Module):
    """One layer, [b, s, h] in and out; moe: an MoE layer (router, experts, shared expert) instead of the dense MLP."""

    def __init__(self, c: MegatronConfig, moe: bool, modules: tuple[str, ...] = (), dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        kw = {"dtype": dtype, "bias": False}
        self.c, self.moe, self.modules_ = c, moe, modules
        h = c.hidden
        self.norm1 = torch.nn.LayerNorm(h, dtype=dtype)
        self.q, self.k, self.v = (torch.nn.Linear(h, h, **kw) for _ in range(3))
        self.proj = torch.nn.Linear(h, h, **kw)
        self.norm2 = torch.nn.LayerNorm(h, dtype=dtype)
        if moe:
            self.router = torch.nn.Linear(h, c.experts, **kw)
            self.fc1 = torch.nn.Parameter(torch.randn(c.experts, 2 * c.expert_ffn, h, dtype=dtype) * 0.05)  # [gate, up]
            self.fc2 = torch.nn.Parameter(torch.randn(c.experts, h, c.expert_ffn, dtype=dtype) * 0.05)
            if c.shared_ffn:
                self.shared_fc1 = torch.nn.Linear(h, 2 * c.shared_ffn, **kw)
                self.shared_fc2 = torch.nn.Linear(c.shared_ffn, h, **kw)
        else:
            self.fc1_dense = torch.nn.Linear(h, 2 * c.ffn, **kw)
            self.fc2_dense = torch.nn.Linear(c.ffn, h, **kw)

    def _checkpointed(self, name: str, run, *args: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
        return checkpoint(run, *args, use_reentrant=True) if name in self.modules_ else run(*args)

    def core_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, s, h = q.shape
        a = self.c.heads
        d = h // a

        def heads(t: torch.Tensor) -> torch.Tensor:  # [b, s, h] -> contiguous [b a, s, d] (a copy: saves nothing)
            return t.view(b, s, a, d).transpose(1, 2).reshape(b * a, s, d)

        scores = torch.bmm(heads(q), heads(k).transpose(1, 2)) * (1.0 / math.sqrt(d))
        causal = torch.full((s, s), float("-inf"), dtype=scores.dtype).triu(1)  # an additive constant saves nothing
        probs = torch.softmax(scores + causal, dim=-1)
        return torch.bmm(probs, heads(v)).view(b, a, s, d).transpose(1, 2).reshape(b, s, h)

    def dense_mlp(self, x: torch.Tensor) -> torch.Tensor:
        """TE spec: the pre-MLP norm fused into linear_fc1, so Megatron's 'mlp' checkpoint holds the norm too."""
        return self.fc2_dense(SwiGLU.apply(self.fc1_dense(self.norm2(x))))

    def shared(self, y: torch.Tensor) -> torch.Tensor:
        return self.shared_fc2(SwiGLU.apply(self.shared_fc1(y)))

    def moe_block(self, y: torch.Tensor) -> torch.Tensor:
        """transformers' MixtralSparseMoeBlock routing (tests/ground_truth/tiny_moe.py), Megatron's fc1 [gate, up]."""
        c = self.c
        b, s, h = y.shape
        # modules take y itself: FlopCounterMode's module tracker cannot follow a view made under a checkpoint's no_grad
        x = y.view(b * s, h)
        probs = F.softmax(self.router(y).view(b * s, c.experts), dim=-1, dtype=torch.float)
        weights, _order, source, copies, counts = dispatch(probs, x, c.top_k, c.experts)
        outputs, start = [], 0
        for e, n in enumerate(counts):
            part = copies[start:start + n]
            start += n
            fc1 = part @ self.fc1[e].t()
            if "moe_act" in self.modules_:
                act = CheckpointWithoutOutput()
                out = act.checkpoint(SwiGLU.apply, fc1) @ self.fc2[e].t()
                act.discard_output_and_register_recompute(out)
            else:
                out = SwiGLU.apply(fc1) @ self.fc2[e].t()
            outputs.append(out)
        weighted = torch.cat(outputs) * weights
        out = torch.zeros_like(x).scatter_add(0, source.unsqueeze(1).expand(-1, h), weighted)
        if c.shared_ffn:
            out = out + self._checkpointed("shared_experts", self.shared, y).view(b * s, h)
        return out.view(b, s, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.norm1(x)  # TE spec: fused into linear_qkv (LayerNormLinear keeps its input and output)
        context = self._checkpointed("core_attn", self.core_attention, self.q(n), self.k(n), self.v(n))
        x = x + self.proj(context)
        if not self.moe:
            return x + self._checkpointed("mlp", self.dense_mlp, x)
        if "layernorm" in self.modules_:  # pre_mlp_layernorm under CheckpointWithoutOutput (transformer_layer.py)
            norm = CheckpointWithoutOutput()
            y = norm.checkpoint(self.norm2, x)
            out = self._checkpointed("moe", self.moe_block, y)
            norm.discard_output_and_register_recompute(out)
        else:
            out = self._checkpointed("moe", self.moe_block, self.norm2(x))
        return x + out


def kept_storages(layer: MegatronLayer, x: torch.Tensor) -> list[tuple[tuple[int, ...], torch.dtype, int]]:
    """(shape, dtype, bytes) of each distinct storage autograd keeps for backward once the forward has
    run (parameters left out; a storage freed by CheckpointWithoutOutput counts 0 B); then the backward
    runs, so that every checkpoint's replay is exercised."""
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    packed: list[tuple[tuple[int, ...], torch.dtype, torch.UntypedStorage]] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.untyped_storage().data_ptr() not in params:
            packed.append((tuple(tensor.shape), tensor.dtype, tensor.untyped_storage()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = layer(x)
    # distinct storages, told apart once the forward is over: a freed storage (resize_(0)) has no address and
    # 0 bytes, and its old address may since belong to another storage
    kept: dict[int, tuple[tuple[int, ...], torch.dtype, int]] = {}
    for shape, dtype, storage in packed:
        if storage.nbytes():
            kept.setdefault(storage.data_ptr(), (shape, dtype, storage.nbytes()))
    found = list(kept.values())
    out.float().square().sum().backward()
    return found
