"""Every memory-bound ATen op of one forward and backward, as eager PyTorch launches them.

`record_ops` runs a function under a TorchDispatchMode and keeps, for every ATen op that is not a
matmul (aten.mm / bmm / addmm), not attention (SDPA's kernels, timed as FlashAttention) and not a
view (an op whose schema returns an alias: view, expand, t, detach, _unsafe_view ... costs no
kernel), its name and the bytes of its tensor inputs and outputs. An input's bytes are its distinct
elements (an expanded dimension, stride 0, is read once) times the element size: what the kernel
reads from HBM. This is the kernel list of eager PyTorch on a GPU too: the dispatcher picks the
same ATen ops on CPU and CUDA, only the backend kernel behind each differs (SDPA apart, excluded).

TorchTitan's Llama block at the commit of its Dec 2024 H100 benchmarks (pytorch/torchtitan
torchtitan/models/llama/model.py and torchtitan/models/norms.py at 9dec370, train_configs/
llama3_8b.toml: norm_type = "rmsnorm"): RMSNorm `self._norm(x.float()).type_as(x) * self.weight`
with `_norm(x) = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)` (one upcast, not the
two of tiny_llama.RMSNorm), separate wq / wk / wv, complex RoPE, repeat_kv, SDPA, wo, and
w2(F.silu(w1(x)) * w3(x)); parameters in bf16 (FSDP2's MixedPrecisionPolicy param_dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .tiny_llama import Block, LlamaConfig

MATMULS = {"aten.mm.default", "aten.bmm.default", "aten.addmm.default", "aten.baddbmm.default"}
ATTENTION = ("aten._scaled_dot_product", "aten._flash_attention", "aten._efficient_attention")


@dataclass(frozen=True)
class Op:
    name: str
    read: int  # bytes of the tensor inputs (distinct elements x element size)
    written: int  # bytes of the tensor outputs


def distinct_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel reads of `t`: its distinct elements (stride-0 dimensions counted once)."""
    count = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            count *= size
    return count * t.element_size()


class OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = str(func)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        # a view: the schema says it returns an alias (view, expand, t, detach), or its output lives in an
        # input's storage (aten._unsafe_view, which nn.Linear's reshape uses, declares no alias)
        storages = {t.untyped_storage().data_ptr() for t in ins if t.untyped_storage().nbytes()}
        view = any(r.alias_info is not None for r in func._schema.returns) or (
            bool(outs) and all(t.untyped_storage().data_ptr() in storages for t in outs))
        if not view and name not in MATMULS and not name.startswith(ATTENTION):
            self.ops.append(Op(name, sum(distinct_bytes(t) for t in ins), sum(distinct_bytes(t) for t in outs)))
        return out


class RMSNorm(nn.Module):
    """torchtitan/models/norms.py at 9dec370, class RMSNorm (norm_type = "rmsnorm")."""

    def __init__(self, dim: int, dtype: torch.dtype | None = None, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class TitanBlock(Block):
    """tiny_llama.Block with the norms of torchtitan 9dec370 (one fp32 upcast per norm)."""

    def __init__(self, c: LlamaConfig, dtype: torch.dtype | None = None, norm: str = "rmsnorm") -> None:
        super().__init__(c, dtype)
        if norm == "rmsnorm":
            self.attention_norm, self.ffn_norm = RMSNorm(c.hidden, dtype), RMSNorm(c.hidden, dtype)
        else:  # nn.LayerNorm(dim, bias=False): torchtitan's norm_type = "layernorm" (norms.py build_norm)
            self.attention_norm = nn.LayerNorm(c.hidden, bias=False, dtype=dtype)
            self.ffn_norm = nn.LayerNorm(c.hidden, bias=False, dtype=dtype)


def record_block(block: nn.Module, x: torch.Tensor, freqs: torch.Tensor, grad: torch.Tensor) -> tuple[list[Op], list[Op]]:
    """(forward ops, backward ops) of one block: forward, then backward from `grad` (no loss op)."""
    forward, backward = OpRecorder(), OpRecorder()
    with forward:
        out = block(x, freqs)
    with backward:
        out.backward(grad)
    return forward.ops, backward.ops
