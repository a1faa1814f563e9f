"""Ground truth for the `hf` kernel set (the hf profile's: Hugging Face's Llama under autocast over fp32 weights) with
real PyTorch on the CPU: every memory-bound ATen op of one transformers LlamaDecoderLayer (tests/ground_truth/hf_llama.py,
transcribed from transformers' modeling_llama.py), forward and backward under torch.autocast("cpu", bfloat16) with fp32
weights and an fp32 residual stream, recorded by a TorchDispatchMode (eager_ops.OpRecorder), against parcalc's hf
kernel list of the same layer (parcalc.core.timing.hf_kernels): the same number of kernels and, kernel by kernel, the
same HBM bytes. Matmuls, SDPA and views are left out of the record as for the eager set (eager_ops)."""

from __future__ import annotations

import pytest
import torch

from parcalc.core.timing.compute import LayerShard, compute_spec, layer_passes

from .eager_ops import OpRecorder
from .hf_llama import HFLlamaLayer, rotary
from .test_torch_recompute import llama_shape
from .tiny_llama import LlamaConfig

BATCH, SEQ = 2, 16
SPEC = compute_spec(None, "bf16", 1e12)


def record(c: LlamaConfig) -> tuple[list, list]:
    torch.manual_seed(0)
    layer = HFLlamaLayer(c.hidden, c.heads, c.kv_heads, c.ffn)
    x = torch.randn(BATCH, SEQ, c.hidden, requires_grad=True)  # fp32: the embedding's output under autocast over fp32 weights
    cos, sin = rotary(SEQ, c.head_dim)
    forward, backward = OpRecorder(), OpRecorder()
    with torch.autocast("cpu", dtype=torch.bfloat16), forward:
        out = layer(x, cos, sin)
    grad = torch.randn_like(out)
    with backward:
        out.backward(grad)
    return forward.ops, backward.ops


def parcalc_hf(c: LlamaConfig) -> tuple[list, list]:
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, eager=True, hf=True)
    passes = layer_passes(llama_shape(c), shard, SPEC)
    return [k for k in passes.forward if k.kind == "memory"], [k for k in passes.backward if k.kind == "memory"]


@pytest.mark.parametrize("c", [LlamaConfig(), LlamaConfig(kv_heads=4)], ids=["gqa", "mha"])
def test_hf_layer_kernels_equal_the_aten_record(c: LlamaConfig) -> None:
    """40 memory-bound kernels forward, 72 backward (GQA and MHA alike: SDPA's enable_gqa, no repeat_kv): 6 + 6 fp32
    RMSNorm, 7 weight casts, 5 input casts (q, k, v, gate, up), 10 rotary, 2 SDPA input casts, silu, mul, 2 fp32 residual
    adds; backward 13 + 13 RMSNorm and their 4 adds, 7 weight-gradient casts, 5 input-gradient casts, 2 output-gradient
    casts, 18 rotary, 2 SDPA casts, 2 contiguous copies, 3 adds of the linears' input gradients, silu's, 2 muls."""
    forward, backward = record(c)
    mine_f, mine_b = parcalc_hf(c)
    assert (len(forward), len(backward)) == (40, 72)
    assert (len(mine_f), len(mine_b)) == (40, 72)
    assert sorted(k.bytes for k in mine_f) == sorted(o.read + o.written for o in forward)
    assert sorted(k.bytes for k in mine_b) == sorted(o.read + o.written for o in backward)


def test_hf_layer_totals() -> None:
    """The record's totals (hidden 64, 4 heads of 16, 2 KV heads, FFN 160, 2 x 16 tokens, fp32 weights under bf16
    autocast): 643,072 B forward and 1,121,792 B backward, 2.1x and 1.8x the eager (TorchTitan, bf16 weights) set's
    300,800 and 613,376 B of the same layer (tests/ground_truth/test_torch_eager_kernels.py): the fp32 stream and casts."""
    forward, backward = record(LlamaConfig())
    assert sum(o.read + o.written for o in forward) == 643_072
    assert sum(o.read + o.written for o in backward) == 1_121_792
