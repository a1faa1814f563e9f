"""Ground truth for --expert-activation eager with real PyTorch on the CPU: Primus's eager expert activation with the routing
probabilities (AMD-AGI/Primus @fd1eeabb primus/backends/megatron/core/transformer/experts.py PrimusGroupedMLP.bias_act_func,
its last branch, which Primus's Qwen3 configs take: bias_swiglu_fusion false, use_te_activation_func false), copied below,
recorded op by op with a TorchDispatchMode (eager_ops.OpRecorder: every non-view ATen op and the bytes it reads and writes),
against parcalc.core.timing.compute.eager_expert_activation's kernels: the same kernels, the same bytes, forward and backward.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from parcalc.core.timing.compute import compute_spec, eager_expert_activation

from .eager_ops import OpRecorder

ROWS, WIDTH = 96, 48
SPEC = compute_spec(None, "bf16", 1e12)  # times do not matter here: kernels and bytes do


def primus_bias_act(intermediate_parallel: torch.Tensor, permuted_probs: torch.Tensor, gated: bool) -> torch.Tensor:
    """PrimusGroupedMLP.bias_act_func's eager branch (no bias, glu_linear_offset 0.0, no clamp), as the code writes it;
    permuted_probs [R, 1] fp32 (PrimusGroupedMLP.forward: `permuted_probs.unsqueeze(-1)`; moe_router_dtype fp32)."""
    if gated:

        def glu(x: torch.Tensor) -> torch.Tensor:
            x_glu, x_linear = torch.chunk(x, 2, dim=-1)
            return F.silu(x_glu) * (x_linear + 0.0)

        intermediate_parallel = glu(intermediate_parallel)
    else:
        intermediate_parallel = F.silu(intermediate_parallel)
    original_dtype = intermediate_parallel.dtype
    intermediate_parallel = intermediate_parallel * permuted_probs
    return intermediate_parallel.to(original_dtype)


def record(gated: bool) -> tuple[list, list]:
    torch.manual_seed(0)
    x = torch.randn(ROWS, (2 if gated else 1) * WIDTH, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(ROWS, dtype=torch.float32, requires_grad=True)
    grad = torch.randn(ROWS, WIDTH, dtype=torch.bfloat16)
    forward, backward = OpRecorder(), OpRecorder()
    with forward:
        out = primus_bias_act(x, probs.unsqueeze(-1), gated)
    with backward:
        out.backward(grad)
    return forward.ops, backward.ops


@pytest.mark.parametrize("gated", [True, False], ids=["swiglu", "silu"])
def test_eager_expert_activation_equals_the_aten_record(gated: bool) -> None:
    """SwiGLU: 5 kernels forward (silu, the offset add, mul, the fp32 probability product, the cast back) and 9 backward
    (_to_copy, two muls of the product, the cast of the input gradient, the probabilities' sum, the two muls, silu_backward,
    the cat of the chunk's gradients); without the gate 3 and 6. Kernel by kernel the same bytes as parcalc's list."""
    forward, backward = record(gated)
    mine_f: list = []
    mine_b: list = []
    eager_expert_activation(mine_f, mine_b, SPEC, ROWS, WIDTH, 2.0, gated)
    assert (len(forward), len(backward)) == ((5, 9) if gated else (3, 6))
    assert [o.name.split(".")[1] for o in forward] == (["silu", "add", "mul", "mul", "_to_copy"] if gated else ["silu", "mul", "_to_copy"])
    assert (len(mine_f), len(mine_b)) == (len(forward), len(backward))
    assert sorted(k.bytes for k in mine_f) == sorted(o.read + o.written for o in forward)
    assert sorted(k.bytes for k in mine_b) == sorted(o.read + o.written for o in backward)


def test_eager_swiglu_moves_86_bytes_a_value_pair() -> None:
    """Per [R, w] value of the activation's output (bf16, the probabilities' 4 B a row aside): 26 bytes forward and 60
    backward where the fused kernel's 6 and 10 (parcalc's moe.experts.act) move 16: the 70 that
    tests/test_amd_kernels.py times at 0.951 s a step on the Primus MI355X baseline (978 ms measured)."""
    forward, backward = record(True)
    n, probs = ROWS * WIDTH, 4 * ROWS
    assert sum(o.read + o.written for o in forward) == 26 * n + probs
    assert sum(o.read + o.written for o in backward) == 60 * n + 2 * probs  # the probabilities read by one mul, written by the sum
