"""Ground truth for the eager kernel set (--kernels eager, the fsdp2 and torchtitan profiles' default)
with real PyTorch on the CPU: every memory-bound ATen op of one TorchTitan Llama block, forward and
backward, recorded by a TorchDispatchMode (eager_ops.record_block), against parcalc's eager kernel
list of the same layer (parcalc.core.timing.compute: eager_norm, eager_rope, eager_residual, grad_sum,
_eager_mlp): the same number of kernels and the same HBM bytes, forward and backward.

What the record leaves out, and why: matmuls (parcalc's GEMM kernels), SDPA (its FlashAttention kernel)
and views (no kernel). On a GPU the same ATen ops run: the dispatcher and autograd's formulas are the
device's own only below the ATen op. One difference is the backend's: native_layer_norm's mean and
1/sigma are bf16 on the CPU and fp32 on CUDA (parcalc counts fp32, LN_STATS), 2 x 2 bytes per row more
per pass, subtracted below.
"""

from __future__ import annotations

import pytest
import torch

from parcalc.core.choices import Norm
from parcalc.core.timing.compute import LayerShard, compute_spec, layer_passes

from .eager_ops import TitanBlock, record_block
from .test_torch_recompute import llama_shape
from .tiny_llama import LlamaConfig, rope

BATCH, SEQ = 2, 16
SPEC = compute_spec(None, "bf16", 1e12)  # times do not matter here: kernels and bytes do


def parcalc_eager(c: LlamaConfig, norm: str) -> tuple[list, list]:
    from dataclasses import replace

    model = llama_shape(c)
    if norm == "layernorm":
        model = replace(model, norm=Norm.LAYERNORM)
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, eager=True)
    passes = layer_passes(model, shard, SPEC)
    memory = [k for k in passes.forward if k.kind == "memory"], [k for k in passes.backward if k.kind == "memory"]
    return memory


def record(c: LlamaConfig, norm: str) -> tuple[list, list]:
    torch.manual_seed(0)
    block = TitanBlock(c, torch.bfloat16, norm)
    x = torch.randn(BATCH, SEQ, c.hidden, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(BATCH, SEQ, c.hidden, dtype=torch.bfloat16)
    return record_block(block, x, rope(SEQ, c.head_dim), grad)


@pytest.mark.parametrize("c", [LlamaConfig(), LlamaConfig(kv_heads=4)], ids=["gqa", "mha"])
def test_rmsnorm_block_kernels_equal_the_aten_record(c: LlamaConfig) -> None:
    """TorchTitan's block (RMSNorm, RoPE, SwiGLU, GQA or MHA): 28 ATen kernels forward and 50 backward
    with GQA (forward: 8 + 8 RMSNorm, 6 RoPE, 2 repeat_kv copies, silu, mul, 2 residual adds; backward:
    16 + 16 RMSNorm, 8 RoPE, 2 repeat_kv sums, 2 adds of wq / wk / wv's input gradients, 2 muls, silu's,
    the add of w1 / w3's, the 2 residual branches'); every one of them in parcalc's list with the same
    bytes (MHA: no repeat_kv, 26 and 48)."""
    forward, backward = record(c, "rmsnorm")
    mine_f, mine_b = parcalc_eager(c, "rmsnorm")
    gqa = c.kv_heads < c.heads
    assert (len(forward), len(backward)) == ((28, 50) if gqa else (26, 48))
    assert len(mine_f) == len(forward) and len(mine_b) == len(backward)
    assert sum(k.bytes for k in mine_f) == sum(o.read + o.written for o in forward)
    assert sum(k.bytes for k in mine_b) == sum(o.read + o.written for o in backward)
    # kernel by kernel: the same multiset of byte counts (order differs: autograd runs backward in reverse)
    assert sorted(k.bytes for k in mine_f) == sorted(o.read + o.written for o in forward)
    assert sorted(k.bytes for k in mine_b) == sorted(o.read + o.written for o in backward)


def test_rmsnorm_block_numbers() -> None:
    """The record's totals for the GQA block, written out (hidden 64, 4 heads of 16, 2 KV heads, FFN 160,
    2 x 16 tokens, bf16): forward 300,800 B in 28 kernels, backward 613,376 B in 50, where parcalc's fused
    set has 6 kernels and 83,968 B forward, 4 and 88,064 B backward. The eager RMSNorm alone moves 36
    bytes per value forward (2 + 4, 4 + 4, 4, 4 + 4, 4 + 2, 2 + 2: upcast, pow, mean, x * rstd, downcast,
    * weight) where a fused one moves 4."""
    forward, backward = record(LlamaConfig(), "rmsnorm")
    assert sum(o.read + o.written for o in forward) == 300_800
    assert sum(o.read + o.written for o in backward) == 613_376
    norm = list(forward[:8])  # the attention norm's 8 ops come first
    assert [o.name.split(".")[1] for o in norm] == ["_to_copy", "pow", "mean", "add", "rsqrt", "mul", "_to_copy", "mul"]
    values = BATCH * SEQ * 64
    # 36 B per value; per row the fp32 mean, + eps, rsqrt and the rstd read again (4 + 4 + 8 + 8 + 4 = 28 - the
    # mean's read counted per value: 24 B); the bf16 weight once
    assert sum(o.read + o.written for o in norm) == 36 * values + 24 * BATCH * SEQ + 2 * 64


def test_layernorm_block_is_one_kernel_per_pass() -> None:
    """With nn.LayerNorm (torchtitan's norm_type = "layernorm"; llm-foundry's LPLayerNorm calls the same
    F.layer_norm) each norm is one ATen kernel per pass: native_layer_norm, native_layer_norm_backward."""
    c = LlamaConfig()
    forward, backward = record(c, "layernorm")
    mine_f, mine_b = parcalc_eager(c, "layernorm")
    assert sum(o.name == "aten.native_layer_norm.default" for o in forward) == 2
    assert sum(o.name == "aten.native_layer_norm_backward.default" for o in backward) == 2
    assert len(mine_f) == len(forward) == 14 and len(mine_b) == len(backward) == 20
    stats = 2 * BATCH * SEQ * (4 - 2)  # mean and 1/sigma: fp32 on CUDA, bf16 on the CPU, per LayerNorm per pass
    assert sum(k.bytes for k in mine_f) == sum(o.read + o.written for o in forward) + 2 * stats
    assert sum(k.bytes for k in mine_b) == sum(o.read + o.written for o in backward) + 2 * stats


def test_compiled_block_kernels_equal_inductors_output_code() -> None:
    """The compiled set of eager code (--kernels eager --compile, compute.COMPILE_PER_BLOCK and compiled_rope)
    against what Inductor generates for the same TorchTitan block (torch 2.13, the "inductor" backend on the CPU,
    about 40 s to compile here): the kernels its output code launches that are neither GEMMs (extern_kernels.mm)
    nor SDPA nor views: generated kernels (cpp_fused_*) and ATen fallbacks (the complex RoPE products and the
    materialised conj(freqs_cis): Inductor generates no code for complex tensors). Forward 9 in both. Backward
    parcalc 11, Inductor 12: the CPU's SDPA backward takes its output gradient through one more generated copy
    (cpp_fused__scaled_dot_product_flash_attention_for_cpu_backward_...), which the CUDA flash kernel does not
    need. Counts only: the CPU code generator's bytes per kernel are not the GPU's."""
    import re

    from torch._inductor.utils import run_and_get_code

    c = LlamaConfig()
    torch.manual_seed(0)
    torch._dynamo.reset()
    block = TitanBlock(c, torch.bfloat16)
    x = torch.randn(BATCH, SEQ, c.hidden, dtype=torch.bfloat16, requires_grad=True)
    compiled = torch.compile(block, backend="inductor", fullgraph=True)
    freqs = rope(SEQ, c.head_dim)

    def step() -> None:
        compiled(x, freqs).backward(torch.ones(BATCH, SEQ, c.hidden, dtype=torch.bfloat16))

    _, codes = run_and_get_code(step)
    assert len(codes) == 2  # the forward graph, then the backward graph
    views = ("view_as_complex", "view_as_real", "reshape", "_conj", "view", "_scaled_dot_product")

    def launched(code: str) -> list[str]:
        body = code.split("def call(self, args):", 1)[1].split("runner = Runner", 1)[0]
        generated = re.findall(r"^\s+(cpp_fused_\w+)\(", body, re.M)
        fallbacks = [op for op in re.findall(r"^\s+\w+ = torch\.ops\.aten\.(\w+)\.", body, re.M) if not op.startswith(views)]
        return generated + fallbacks

    forward, backward = (launched(code) for code in codes)
    cpu_only = [k for k in backward if "flash_attention_for_cpu_backward" in k]
    assert len(cpu_only) == 1
    model = llama_shape(c)
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, compiled=True, eager=True)
    passes = layer_passes(model, shard, SPEC)
    mine_f = [k for k in passes.forward if k.kind == "memory"]
    mine_b = [k for k in passes.backward if k.kind == "memory"]
    assert forward.count("mul") == 2 and backward.count("mul") == 2 and backward.count("clone") == 1  # ATen's complex work
    assert len(mine_f) == len(forward) == 9
    assert len(mine_b) == len(backward) - len(cpu_only) == 11
