"""A Mamba-2 block under tensor parallelism over real torch.distributed (CPU, gloo), as Megatron-Core's MambaMixer splits
it (megatron/core/ssm/mamba_mixer.py @d98e8a64): in_proj a ColumnParallelLinear (gather_output=False) whose rows for
rank r are its heads' z and x, its groups' B and C and its heads' dt (in_proj_partition_sizes, lines 301-307); the
conv1d, dt_bias, A, D and the gated norm's weight split the same way (partition_dim 0, lines 325-434), the gated
RMSNorm normalising per group of d_inner / G channels, which a rank holds whole (ngroups % tp_size == 0, line 270);
out_proj a RowParallelLinear (input_is_parallel=True, lines 437-451). The only collectives are Megatron's two conjugate
operators around the block (Shoeybi et al. 2019 fig. 3): `f` before in_proj (identity forward, all-reduce of the input
gradient backward: copy_to_tensor_model_parallel_region) and `g` after out_proj (all-reduce forward, identity backward:
reduce_from_tensor_model_parallel_region). Each all-reduce logs its phase and bytes.

    python tests/ground_truth/mamba_tp_worker.py --world 2 --out DIR

Each rank writes DIR/rank<r>.json: its all-reduces (phase, bytes), and the largest difference of its output and of the
input's gradient from the unsplit block under autograd (fp64).
"""

from __future__ import annotations

import sys
from typing import ClassVar

import torch
import torch.distributed as dist
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script
from hybrid_cp_worker import KERNEL, MAMBA, mamba_mixer

BATCH, SEQ, HIDDEN = 2, 16, 6
HEADS, HEAD_DIM, STATE, GROUPS = MAMBA["heads"], MAMBA["head_dim"], MAMBA["state"], 2  # two groups: one a rank at TP 2
DTYPE = torch.float64


class Log:
    """What this rank all-reduced: (phase, bytes) per call."""

    phase: ClassVar[str] = "forward"
    calls: ClassVar[list[tuple[str, int]]] = []


def _all_reduce(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    dist.all_reduce(x)
    Log.calls.append((Log.phase, x.numel() * x.element_size()))
    return x


class CopyToRegion(torch.autograd.Function):
    """Megatron's `f`: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return _all_reduce(grad)


class ReduceFromRegion(torch.autograd.Function):
    """Megatron's `g`: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return _all_reduce(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad


def block(x: torch.Tensor, p: dict, heads: range, groups: range, tp: bool = False) -> torch.Tensor:
    """in_proj (the rows of `heads` / `groups`), the mixer, the gated group RMSNorm, out_proj (its columns of `heads`)."""
    hd, n = HEAD_DIM, STATE
    rows = torch.cat([torch.arange(heads.start * hd, heads.stop * hd),  # z
                      HEADS * hd + torch.arange(heads.start * hd, heads.stop * hd),  # x
                      2 * HEADS * hd + torch.arange(groups.start * n, groups.stop * n),  # B
                      2 * HEADS * hd + GROUPS * n + torch.arange(groups.start * n, groups.stop * n),  # C
                      2 * HEADS * hd + 2 * GROUPS * n + torch.arange(heads.start, heads.stop)])  # dt  # fmt: skip
    x = CopyToRegion.apply(x) if tp else x
    zxbcdt = x @ p["in_proj"][rows].T
    y = mamba_mixer(zxbcdt, p, heads, [h * GROUPS // HEADS for h in heads])  # y * silu(z), this rank's heads
    per_group = HEADS * hd // GROUPS
    y = y.reshape(*y.shape[:2], len(groups), per_group)
    y = (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)).reshape(*y.shape[:2], -1)
    y = y * p["norm"][heads.start * hd:heads.stop * hd]
    out = y @ p["out_proj"][:, heads.start * hd:heads.stop * hd].T
    return ReduceFromRegion.apply(out) if tp else out


def params(gen: torch.Generator) -> dict:
    r = lambda *shape: torch.randn(*shape, generator=gen, dtype=DTYPE) * 0.5  # noqa: E731
    width = 2 * HEADS * HEAD_DIM + 2 * GROUPS * STATE + HEADS
    return {"in_proj": r(width, HIDDEN), "conv_x": r(HEADS * HEAD_DIM, KERNEL), "conv_b": r(GROUPS * STATE, KERNEL),
            "conv_c": r(GROUPS * STATE, KERNEL), "dt_bias": r(HEADS), "A": -torch.rand(HEADS, generator=gen, dtype=DTYPE),
            "D": r(HEADS), "norm": 1 + r(HEADS * HEAD_DIM), "out_proj": r(HIDDEN, HEADS * HEAD_DIM)}  # fmt: skip


def run(rank: int, tp: int) -> dict:
    gen = torch.Generator().manual_seed(2468)
    p = params(gen)
    full = torch.randn(SEQ, BATCH, HIDDEN, generator=gen, dtype=DTYPE, requires_grad=True)
    dout = torch.randn(SEQ, BATCH, HIDDEN, generator=gen, dtype=DTYPE)
    reference = block(full, p, range(HEADS), range(GROUPS))
    reference.backward(dout)
    local = full.detach().clone().requires_grad_(True)  # TP without SP: every rank holds the whole input
    Log.phase, Log.calls = "forward", []
    out = block(local, p, range(rank * HEADS // tp, (rank + 1) * HEADS // tp), range(rank * GROUPS // tp, (rank + 1) * GROUPS // tp), tp=True)
    Log.phase = "backward"
    out.backward(dout)
    errors = {"out": (out - reference.detach()).abs().max().item(), "dinput": (local.grad - full.grad).abs().max().item()}
    return {"errors": errors, "all_reduces": {ph: [b for phase, b in Log.calls if phase == ph] for ph in ("forward", "backward")}}


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    args = parser.parse_args(argv)
    spawn_gloo(run, args.world, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
