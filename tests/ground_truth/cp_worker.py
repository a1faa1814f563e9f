"""Context-parallel causal attention over real torch.distributed (CPU, gloo): a ring of K/V blocks
with isend/irecv, forward and backward, as Transformer Engine's AttnFuncWithCPAndKVP2P runs it
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py at d0067d0):

- the sequence in 2cp chunks, rank r holding chunks r and 2cp - 1 - r (Megatron-LM's balancing);
- forward: K and V in one buffer (`torch.cat((k.view(-1), v.view(-1)))`), cp - 1 steps of isend to
  rank r + 1 and irecv from r - 1, each block's attention merged by its log-sum-exp; the last block
  received (rank r + 1's) is saved for backward, as TE saves `p2p_comm_buffers[-1]`;
- backward: the ring runs the other way (send to r - 1, receive from r + 1) with [K/V, dK/dV]
  buffers: step 0 sends the K/V block, the middle steps K/V and the dK/dV accumulated so far, the
  last only dK/dV, which lands on the owner of those keys.

    python tests/ground_truth/cp_worker.py --world 4 --out DIR

Each rank writes DIR/rank<r>.json: the sends it made (bytes, calls) in forward and backward, and
the largest difference of its output and of dQ, dK, dV from unsplit attention under autograd.
"""

from __future__ import annotations

import math
import sys

import torch
import torch.distributed as dist
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script

BATCH, SEQ, HEADS, KV_HEADS, HEAD_DIM = 2, 32, 4, 2, 8  # grouped-query attention: K/V half as wide as Q
DTYPE = torch.float64  # exact enough that the ring equals the unsplit attention to 1e-12


class Sends:
    """Every isend this rank makes, as (bytes, phase)."""

    def __init__(self) -> None:
        self.log: list[tuple[int, str]] = []
        self.phase = "forward"

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, dst: int, src: int) -> list:
        self.log.append((send.numel() * send.element_size(), self.phase))
        return [dist.isend(send.contiguous(), dst), dist.irecv(recv, src)]


def positions(rank: int, cp: int) -> torch.Tensor:
    """Global token positions of rank's two chunks (r and 2cp - 1 - r)."""
    n = SEQ // (2 * cp)
    return torch.cat([torch.arange(c * n, (c + 1) * n) for c in (rank, 2 * cp - 1 - rank)])


def expand(x: torch.Tensor) -> torch.Tensor:
    """K or V of KV_HEADS heads repeated for the HEADS query heads (GQA)."""
    return x.repeat_interleave(HEADS // KV_HEADS, dim=1)


def block_scores(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    s = q @ expand(k).transpose(-1, -2) / math.sqrt(HEAD_DIM)
    return s.masked_fill(q_pos[:, None] < k_pos[None, :], float("-inf"))


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, rank, cp, sends):
        nxt, prv = (rank + 1) % cp, (rank - 1) % cp
        q_pos = positions(rank, cp)
        kv_shape, k_numel = k.shape, k.numel()
        buffers = [torch.cat((k.reshape(-1), v.reshape(-1)))]
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
        for i in range(cp):
            reqs = []
            if i < cp - 1:
                buffers.append(torch.empty_like(buffers[i]))
                reqs = sends.exchange(buffers[i], buffers[i + 1], nxt, prv)
            owner = (rank - i) % cp
            kb, vb = buffers[i][:k_numel].view(kv_shape), buffers[i][k_numel:].view(kv_shape)
            s = block_scores(q, kb, q_pos, positions(owner, cp))
            block_lse = torch.logsumexp(s, dim=-1)
            seen = torch.isfinite(block_lse)
            p = torch.where(seen[..., None], torch.exp(s - block_lse[..., None]), torch.zeros_like(s))
            block_out = p @ expand(vb)
            new_lse = torch.logaddexp(lse, block_lse)
            out = (torch.nan_to_num(torch.exp(lse - new_lse))[..., None] * out
                   + torch.nan_to_num(torch.exp(block_lse - new_lse))[..., None] * block_out)  # fmt: skip
            lse = new_lse
            for req in reqs:
                req.wait()
        ctx.save_for_backward(q, buffers[-1], out, lse)  # the last block received: rank r + 1's
        ctx.rank, ctx.cp, ctx.sends, ctx.kv_shape = rank, cp, sends, kv_shape
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kv, out, lse = ctx.saved_tensors
        rank, cp, sends, kv_shape = ctx.rank, ctx.cp, ctx.sends, ctx.kv_shape
        sends.phase = "backward"
        send_dst, recv_src = (rank - 1) % cp, (rank + 1) % cp
        k_numel = kv.numel() // 2
        q_pos = positions(rank, cp)
        buffers = [torch.zeros((2, kv.numel()), dtype=kv.dtype), torch.zeros((2, kv.numel()), dtype=kv.dtype)]
        buffers[0][0].copy_(kv)
        dq = torch.zeros_like(q)
        delta = (dout * out).sum(-1)
        for i in range(cp):
            send, recv = buffers[i % 2], buffers[(i + 1) % 2]
            if i == 0:
                send, recv = send[0], recv[0]
            elif i == cp - 1:
                send, recv = send[1], recv[1]
            reqs = sends.exchange(send, recv, send_dst, recv_src)
            owner = (rank + 1 + i) % cp
            block = buffers[i % 2][0]
            kb, vb = block[:k_numel].view(kv_shape), block[k_numel:].view(kv_shape)
            s = block_scores(q, kb, q_pos, positions(owner, cp))
            p = torch.exp(s - lse[..., None])  # 0 where masked
            dv_ = (p.transpose(-1, -2) @ dout).unflatten(1, (KV_HEADS, HEADS // KV_HEADS)).sum(2)
            dp = dout @ expand(vb).transpose(-1, -2)
            ds = p * (dp - delta[..., None]) / math.sqrt(HEAD_DIM)
            dq += ds @ expand(kb)
            dk_ = (ds.transpose(-1, -2) @ q).unflatten(1, (KV_HEADS, HEADS // KV_HEADS)).sum(2)
            for req in reqs:
                req.wait()
            dkv = buffers[(i + 1) % 2][1]  # the dK/dV of this block accumulated by the ranks before
            mine = torch.cat((dk_.reshape(-1), dv_.reshape(-1)))
            if i == 0:
                dkv.copy_(mine)
            else:
                dkv.add_(mine)
        dkv = buffers[cp % 2][1]  # after the last step: the dK/dV of this rank's own block
        return dq, dkv[:k_numel].view(kv_shape), dkv[k_numel:].view(kv_shape), None, None, None


def run(rank: int, cp: int) -> dict:
    gen = torch.Generator().manual_seed(1234)
    q = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=gen, dtype=DTYPE)
    k = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=gen, dtype=DTYPE)
    v = torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM, generator=gen, dtype=DTYPE)
    dout = torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, generator=gen, dtype=DTYPE)
    # the reference: unsplit causal attention under autograd
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    y = torch.nn.functional.scaled_dot_product_attention(ref[0], expand(ref[1]), expand(ref[2]), is_causal=True)
    y.backward(dout)
    mine = positions(rank, cp)
    local = [x[:, :, mine].clone().requires_grad_() for x in (q, k, v)]
    sends = Sends()
    out = RingAttention.apply(*local, rank, cp, sends)
    out.backward(dout[:, :, mine])
    errors = {
        "out": (out - y[:, :, mine]).abs().max().item(),
        "dq": (local[0].grad - ref[0].grad[:, :, mine]).abs().max().item(),
        "dk": (local[1].grad - ref[1].grad[:, :, mine]).abs().max().item(),
        "dv": (local[2].grad - ref[2].grad[:, :, mine]).abs().max().item(),
    }
    phases = {ph: [b for b, p in sends.log if p == ph] for ph in ("forward", "backward")}
    return {"errors": errors, "sends": phases, "element_bytes": q.element_size()}


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    args = parser.parse_args(argv)
    spawn_gloo(run, args.world, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
