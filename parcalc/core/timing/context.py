"""Context parallelism's exchange time per layer and micro-batch, and what of it stays exposed.

The bytes of each call are parcalc.core.comm.context's (Transformer Engine's three cp_comm_type
variants); their time is parcalc.core.timing.network's on the cp group's placement (Megatron-LM's
order "tp-cp-ep-dp-pp": cp ranks tp apart, so a group of cp x tp <= GPUs per node stays inside
one node; a ring that crosses nodes runs at its slowest, inter-node hop).

Overlap, stated:
- p2p: Transformer Engine runs each ring step's send/receive on one stream and the attention of
  the block already received on another (AttnFuncWithCPAndKVP2P, flash_attn_streams and
  send_recv_reqs, context_parallel.py lines 1698-1715 at d0067d0), so per step only
  max(0, t_send - t_attention_step) is exposed, t_attention_step = the layer's attention / cp
  (Megatron's 2cp chunks give every step the same work). Forward: cp - 1 sends of B_kv against
  cp - 1 attention steps; backward: a send of B_kv, cp - 2 of 2 B_kv and one of B_kv against the
  backward attention steps.
- all-gather and a2a: the gather (or all-to-all) must finish before the attention that needs it;
  parcalc counts them whole on the critical path (TE overlaps the all-gather of one chunk with the
  other chunk's attention in part; not modelled).
Full recomputation replays the forward exchange before the backward.

A hybrid model (Nemotron-H's Mamba-2, Qwen3-Next's gated DeltaNet): its attention layers exchange as above, its recurrent
mixers run Megatron-Core's all-to-alls over heads (parcalc.core.hybrid_context), whole on the critical path (the scan
needs their output, out_proj the swap back), and Nemotron-H's MLP blocks nothing; the step model's mean layer carries
each exchange by its layers' share (hybrid_cp_layer_time).
"""

from __future__ import annotations

from typing import Any

from parcalc.core.choices import Collective, Recompute
from parcalc.core.context import CpComm, cp_comm_of, kv_block_bytes, q_block_bytes
from parcalc.core.layout import Layout


def cp_layer_time(model: Any, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float, attention_forward: float,
                  attention_backward: float, recompute: Any, gpus_per_node: int, fabric: Any) -> tuple[float, float]:  # fmt: skip
    """(exchange time, exposed time) of one layer's context-parallel attention for one micro-batch,
    seconds, by the layout's cp, tp and K/V exchange. attention_forward / attention_backward: this
    rank's attention kernels of that layer."""
    tp, cp, cp_comm = layout.tp, layout.cp, layout.cp_comm
    if cp <= 1:
        return 0.0, 0.0
    from parcalc.core.timing.network import collective_time, placement

    comm = cp_comm_of(cp_comm)
    group = placement(cp, tp, gpus_per_node)
    kv = kv_block_bytes(model, micro_batch, seq_len, layout, element_bytes)
    replay = 2 if recompute is Recompute.FULL else 1
    if comm is CpComm.P2P:
        one = collective_time(Collective.POINT_TO_POINT, kv, group, fabric).time
        two = collective_time(Collective.POINT_TO_POINT, 2 * kv, group, fabric).time
        step_f, step_b = attention_forward / cp, attention_backward / cp
        forward = (cp - 1) * one
        backward = 2 * one + (cp - 2) * two
        exposed_f = (cp - 1) * max(0.0, one - step_f)
        exposed_b = 2 * max(0.0, one - step_b) + (cp - 2) * max(0.0, two - step_b)
        return replay * forward + backward, replay * exposed_f + exposed_b
    if comm is CpComm.ALL_GATHER:
        full = kv * cp / 2
        gather = collective_time(Collective.ALL_GATHER, full, group, fabric).time
        scatter = collective_time(Collective.REDUCE_SCATTER, full, group, fabric).time
        total = 2 * replay * gather + 2 * gather + 2 * scatter
        return total, total
    q = q_block_bytes(model, micro_batch, seq_len, layout, element_bytes)
    a2a_q = collective_time(Collective.ALL_TO_ALL, q, group, fabric).time
    a2a_kv = collective_time(Collective.ALL_TO_ALL, kv / 2, group, fabric).time
    one_pass = 2 * a2a_q + 2 * a2a_kv
    total = replay * one_pass + one_pass
    return total, total


def hybrid_cp_layer_time(model: Any, micro_batch: int, seq_len: int, layout: Layout, element_bytes: float, attention_forward: float,
                         attention_backward: float, recompute: Any, gpus_per_node: int, fabric: Any) -> tuple[float, float]:  # fmt: skip
    """(exchange time, exposed time) of the mean layer of a hybrid model for one micro-batch, seconds: an attention layer's
    exchange (cp_layer_time, against one attention layer's kernels: the mean layer's `attention_forward` / `_backward` over
    the attention layers' share) times that share, plus the recurrent mixer's all-to-alls times the mixers' share."""
    from parcalc.core.hybrid_context import layer_shares, mixer_a2a_buffers
    from parcalc.core.timing.network import collective_time, placement

    if layout.cp <= 1:
        return 0.0, 0.0
    attention_share, mixer_share = layer_shares(model)
    total = exposed = 0.0
    if attention_share > 0:
        t, x = cp_layer_time(model, micro_batch, seq_len, layout, element_bytes, attention_forward / attention_share,
                             attention_backward / attention_share, recompute, gpus_per_node, fabric)  # fmt: skip
        total, exposed = attention_share * t, attention_share * x
    if mixer_share > 0:
        group = placement(layout.cp, layout.tp, gpus_per_node)
        buffers = mixer_a2a_buffers(model, micro_batch, seq_len, layout.tp, layout.cp, element_bytes)
        one_pass = sum(collective_time(Collective.ALL_TO_ALL, size, group, fabric).time for _, size in buffers)
        mixer = (2 if recompute is Recompute.FULL else 1) * one_pass + one_pass  # forward (replayed), then the backward's transposes
        total, exposed = total + mixer_share * mixer, exposed + mixer_share * mixer
    return total, exposed
