"""Run one training step of a small MoE layer with expert parallelism under real torch.distributed
(CPU, gloo) and record every all-to-all and the expert-DP gradient all-reduce.

    python tests/ground_truth/moe_worker.py --world 4 --ep 2 --out DIR

Each of `--world` ranks holds T = BATCH x SEQ tokens of width HIDDEN. A linear router (HIDDEN x
EXPERTS) scores them; each token goes to TOP_K experts, chosen so that routing is exactly balanced
(token i to experts i, i + 1, ... mod EXPERTS: every expert gets T k / E copies from every rank).
The EXPERTS experts (GELU FFNs with biases, HIDDEN -> FFN -> HIDDEN) are split over the ep ranks
of an ep group (EXPERTS / ep each); world / ep expert-DP replicas. Dispatch and combine are
torch.distributed.nn.functional.all_to_all_single (autograd: the opposite all-to-all in
backward), as Megatron-Core's all-to-all dispatcher does; after backward the expert gradients are
all-reduced over the expert-DP group in one flat bucket. Each rank writes DIR/rank<r>.json with
every all-to-all (phase, bytes of its input, bytes it sends to other ranks) and every all-reduce.
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
import torch.nn as nn
import torch.nn.functional as F
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script

warnings.filterwarnings("ignore", category=FutureWarning)  # torch.distributed.nn.functional is deprecated, still the autograd all-to-all

HIDDEN, FFN, EXPERTS, TOP_K, BATCH, SEQ = 8, 16, 4, 2, 2, 8


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def run(rank: int, world: int, ep: int) -> dict:
    edp = world // ep
    # Megatron-Core's expert grid with tp = etp = 1: rank = e + ep x d_e
    ep_groups = [dist.new_group([e + ep * d for e in range(ep)]) for d in range(edp)]
    edp_groups = [dist.new_group([e + ep * d for d in range(edp)]) for e in range(ep)]
    e_rank, d_rank = rank % ep, rank // ep
    ep_group, edp_group = ep_groups[d_rank], edp_groups[e_rank]
    local = EXPERTS // ep
    torch.manual_seed(0)
    router = nn.Linear(HIDDEN, EXPERTS, bias=False)
    experts = nn.ModuleList(Expert() for _ in range(EXPERTS))[e_rank * local:(e_rank + 1) * local]
    calls: list[dict] = []
    phase = ["forward"]
    real_all_to_all, real_all_reduce = dist.all_to_all_single, dist.all_reduce

    def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):  # noqa: A002
        row = input.element_size() * input[0].numel() if input.dim() > 1 else input.element_size()
        splits = input_split_sizes or [input.shape[0] // ep] * ep
        me = dist.get_rank(group)
        calls.append({"op": "all-to-all", "phase": phase[0], "bytes": input.numel() * input.element_size(),
                      "sent": sum(n for peer, n in enumerate(splits) if peer != me) * row, "group": dist.get_world_size(group)})
        return real_all_to_all(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        calls.append({"op": "all-reduce", "phase": phase[0], "bytes": tensor.numel() * tensor.element_size(),
                      "group": dist.get_world_size(group)})
        return real_all_reduce(tensor, op=op, group=group, async_op=async_op)

    dist.all_to_all_single, dist.all_reduce = all_to_all_single, all_reduce
    torch.manual_seed(1 + rank)
    x = torch.randn(BATCH * SEQ, HIDDEN, requires_grad=True)
    tokens = x.shape[0]
    probs = F.softmax(router(x), dim=-1)
    chosen = (torch.arange(tokens)[:, None] + torch.arange(TOP_K)[None, :]) % EXPERTS  # balanced routing
    gates = probs.gather(1, chosen)
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)  # token copies sorted by expert, hence by destination rank
    copies = x.repeat_interleave(TOP_K, dim=0)[order]
    per_rank = [int((flat // local == r).sum()) for r in range(ep)]
    # every rank sends the same counts (balanced), so what it receives from each equals what it sends to each
    received = dist_fn.all_to_all_single(torch.empty_like(copies), copies, per_rank, per_rank, group=ep_group)
    # received: from each source rank, its copies for this rank's local experts, expert by expert
    chunks = received.split(list(per_rank), dim=0)
    outputs = []
    for chunk in chunks:
        per_expert = chunk.split(chunk.shape[0] // local, dim=0)
        outputs += [experts[i](part) for i, part in enumerate(per_expert)]
    processed = torch.cat(outputs, dim=0)
    combined = dist_fn.all_to_all_single(torch.empty_like(processed), processed, per_rank, per_rank, group=ep_group)
    restored = torch.empty_like(combined)
    restored = restored.index_copy(0, order, combined)
    y = (restored.view(tokens, TOP_K, HIDDEN) * gates[..., None]).sum(dim=1)
    loss = y.square().mean()
    phase[0] = "backward"
    loss.backward()
    phase[0] = "after backward"
    grads = torch.cat([p.grad.reshape(-1) for p in experts.parameters()])
    if edp > 1:
        dist.all_reduce(grads, group=edp_group)
    return {"calls": calls, "local_experts": local, "tokens": tokens, "expert_params": sum(p.numel() for p in experts.parameters())}


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    parser.add_argument("--ep", type=int, required=True)
    args = parser.parse_args(argv)
    spawn_gloo(run, args.world, args.out, args.ep)


if __name__ == "__main__":
    main(sys.argv[1:])
