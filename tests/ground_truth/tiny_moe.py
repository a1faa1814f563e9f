"""A small Mixture-of-Experts feed-forward block written like transformers' MixtralSparseMoeBlock
(router Linear without bias, fp32 softmax, top-k, tokens gathered per expert, SwiGLU experts, the
outputs weighted and added back with scatter_add as Megatron-LM's unpermute), for the ground-truth tests: its autograd saved
tensors and its FLOPs against parcalc's formulas. Tokens are permuted by expert once (argsort), as
Megatron-LM's token dispatcher does, so every expert reads one contiguous slice."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dispatch(probs: torch.Tensor, x: torch.Tensor, top_k: int, experts: int) -> tuple[torch.Tensor, ...]:
    """Megatron-LM's permutation of the routed copies: (weights of the copies in expert order, that order, the
    token each copy came from, the copies, tokens per expert). probs: [tokens, experts] router probabilities."""
    weights, chosen = torch.topk(probs, top_k, dim=-1)
    weights = weights.to(x.dtype)
    order = torch.argsort(chosen.flatten(), stable=True)  # the copies sorted by expert
    source = order // top_k  # the token each copy came from
    counts = torch.bincount(chosen.flatten(), minlength=experts).tolist()
    return weights.flatten()[order].unsqueeze(-1), order, source, x[source], counts


class TinyMoe(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int, shared_ffn: int = 0, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.top_k, self.experts = top_k, experts
        self.router = torch.nn.Linear(hidden, experts, bias=False, dtype=dtype)
        self.w1 = torch.nn.Parameter(torch.randn(experts, ffn, hidden, dtype=dtype) * 0.02)  # gate
        self.w3 = torch.nn.Parameter(torch.randn(experts, ffn, hidden, dtype=dtype) * 0.02)  # up
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, ffn, dtype=dtype) * 0.02)  # down
        self.shared = None
        if shared_ffn:
            self.shared = torch.nn.ModuleList([torch.nn.Linear(hidden, shared_ffn, bias=False, dtype=dtype),
                                               torch.nn.Linear(hidden, shared_ffn, bias=False, dtype=dtype),
                                               torch.nn.Linear(shared_ffn, hidden, bias=False, dtype=dtype)])  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [tokens, hidden]."""
        probs = F.softmax(self.router(x), dim=-1, dtype=torch.float)
        weights, _order, source, copies, counts = dispatch(probs, x, self.top_k, self.experts)
        outputs, start = [], 0
        for e, n in enumerate(counts):
            part = copies[start:start + n]
            start += n
            gate, up = part @ self.w1[e].t(), part @ self.w3[e].t()
            outputs.append((F.silu(gate) * up) @ self.w2[e].t())
        expert_out = torch.cat(outputs)
        weighted = expert_out * weights
        # scatter_add as Megatron-LM's unpermute (megatron/core/transformer/moe/moe_utils.py) does; out-of-place index_add
        # would also keep `weighted` (derivatives.yaml: index_add's source gradient reads source.dim())
        out = torch.zeros_like(x).scatter_add(0, source.unsqueeze(1).expand(-1, x.shape[1]), weighted)
        if self.shared is not None:
            gate, up, down = self.shared
            out = out + down(F.silu(gate(x)) * up(x))
        return out


def saved_bytes(block: TinyMoe, x: torch.Tensor) -> dict[str, int]:
    """Bytes of the distinct storages autograd saves in one forward (parameters left out), by dtype size."""
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        block(x).sum().backward()
    return {"total": sum(seen.values())}


def forward_flops(block: TinyMoe, x: torch.Tensor) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        block(x)
    return counter.get_total_flops()
