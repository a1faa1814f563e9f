"""One MoE dispatch with node-limited routing and node forwarding under real torch.distributed
(CPU, gloo), as DeepSeek-V3 runs it (DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report', sec. 3.2.2:
each token goes to at most M nodes; 'tokens are transmitted via IB to the GPUs with the same in-node
index on their target nodes ... and forwarded via NVLink to specific GPUs that host their target
experts'; DeepEP's internode dispatch):

    python tests/ground_truth/node_limited_worker.py --world 6 --per-node 2 --experts 12 --top-k 3 --max-nodes 2 --out DIR

`--world` ranks form `world / per-node` simulated nodes; the `--experts` experts spread evenly, rank r
holding experts [r E/world, (r+1) E/world). Every rank routes the same tokens: every choice of M
(`--max-nodes`) of the nodes and of k (`--top-k`) experts among those nodes' experts, once each (so averages over them are the
exact expectations of uniform routing within M nodes, which parcalc.core.timing.moe.remote_nodes_per_token
describes). Stage 1 (the network): for each token and each chosen node other than its own, one copy
to the rail peer (same in-node index) on that node, one all_to_all_single over the rail group.
Stage 2 (NVLink): each rank sends every copy it holds (its own tokens for its own node, and what
stage 1 brought) to the rank in its node that hosts the chosen expert, one copy per (token, expert),
keeping those for its own experts; one all_to_all_single over the node group. Each rank writes
DIR/rank<r>.json: the bytes it sent to other ranks and the messages (non-empty peer buffers) in each
stage, and the (token, expert) pairs that reached it, to check the routing against the plan.
"""

from __future__ import annotations

import itertools
import sys

import torch
import torch.distributed as dist
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script

HIDDEN = 8


def routings(nodes: int, experts: int, top_k: int, max_nodes: int) -> list[tuple[int, ...]]:
    """Every (node set of max_nodes, top_k experts of those nodes) choice, as the sorted expert ids."""
    per_node = experts // nodes
    out = []
    for chosen in itertools.combinations(range(nodes), max_nodes):
        pool = [e for n in chosen for e in range(n * per_node, (n + 1) * per_node)]
        out += list(itertools.combinations(pool, top_k))
    return out


def exchange(group: dist.ProcessGroup, members: list[int], me: int, rows: dict[int, list[list[float]]]) -> tuple[torch.Tensor, int, int]:
    """all_to_all_single of the rows for each member of `group` (members in group-rank order); returns what
    arrived, the bytes this rank sent to the others and the number of non-empty buffers it sent them."""
    counts = torch.tensor([len(rows.get(m, [])) for m in members], dtype=torch.int64)
    received_counts = torch.empty_like(counts)
    dist.all_to_all_single(received_counts, counts, group=group)  # the sizes first (metadata, not counted)
    send = torch.tensor([row for m in members for row in rows.get(m, [])], dtype=torch.float32).reshape(-1, HIDDEN + 2)
    recv = torch.empty(int(received_counts.sum()), HIDDEN + 2, dtype=torch.float32)
    dist.all_to_all_single(recv, send, received_counts.tolist(), counts.tolist(), group=group)
    row_bytes = HIDDEN * 4  # the token's hidden vector; the 2 trailing columns (token id, expert) stand for the routing metadata
    sent = sum(int(counts[i]) for i, m in enumerate(members) if m != me) * row_bytes
    messages = sum(1 for i, m in enumerate(members) if m != me and int(counts[i]))
    return recv, sent, messages


def run(rank: int, world: int, per_node: int, shape: tuple[int, int, int]) -> dict:
    nodes = world // per_node
    node, local = divmod(rank, per_node)
    rails = [[n * per_node + i for n in range(nodes)] for i in range(per_node)]
    node_members = [[n * per_node + i for i in range(per_node)] for n in range(nodes)]
    rail_groups = [dist.new_group(r) for r in rails]
    node_groups = [dist.new_group(m) for m in node_members]
    experts_per_rank = shape[0] // world
    owner = lambda expert: expert // experts_per_rank  # noqa: E731
    torch.manual_seed(rank)
    plan = routings(nodes, *shape)
    x = torch.randn(len(plan), HIDDEN)
    # stage 1: one copy per token and chosen remote node, to the rail peer there (row: hidden, token id, -1)
    rail_rows: dict[int, list[list[float]]] = {}
    held: list[tuple[int, int, tuple[int, ...]]] = []  # (source rank, token, experts) this rank forwards in stage 2
    for t, experts in enumerate(plan):
        for n in sorted({owner(e) // per_node for e in experts}):
            if n == node:
                held.append((rank, t, experts))
            else:
                rail_rows.setdefault(n * per_node + local, []).append([*x[t].tolist(), float(t), -1.0])
    recv1, sent1, messages1 = exchange(rail_groups[local], rails[local], rank, rail_rows)
    # every rank routes the same plan, so a received token id names its experts; the source rail peer by position
    offsets = [0]
    for peer in rails[local]:
        offsets.append(offsets[-1] + sum(1 for experts in plan if peer != rank and node in {owner(e) // per_node for e in experts}))
    for i, peer in enumerate(rails[local]):
        for row in recv1[offsets[i]:offsets[i + 1]]:
            held.append((peer, int(row[HIDDEN]), plan[int(row[HIDDEN])]))
    # stage 2: each (token, expert of this node) to the rank hosting the expert
    node_rows: dict[int, list[list[float]]] = {}
    for source, t, experts in held:
        for e in experts:
            if owner(e) // per_node == node:
                node_rows.setdefault(owner(e), []).append([0.0] * HIDDEN + [float(source * len(plan) + t), float(e)])
    recv2, sent2, messages2 = exchange(node_groups[node], node_members[node], rank, node_rows)
    arrived = sorted((int(r[HIDDEN]), int(r[HIDDEN + 1])) for r in recv2)
    return {"tokens": len(plan), "network": {"sent": sent1, "messages": messages1}, "nvlink": {"sent": sent2, "messages": messages2},
            "arrived": arrived}  # fmt: skip


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    parser.add_argument("--per-node", type=int, required=True)
    parser.add_argument("--experts", type=int, required=True)
    parser.add_argument("--top-k", type=int, required=True)
    parser.add_argument("--max-nodes", type=int, required=True)
    args = parser.parse_args(argv)
    shape = (args.experts, args.top_k, args.max_nodes)
    spawn_gloo(run, args.world, args.out, args.per_node, shape)


if __name__ == "__main__":
    main(sys.argv[1:])
