"""Expert parallelism's time in the step: the MoE all-to-alls of the slowest stage, exposed.

Per MoE layer and micro-batch, 2 all-to-alls forward (dispatch, combine) and 2 backward, 2 more
forward with full recomputation (parcalc.core.comm.expert, from Megatron-Core's
MoEAlltoAllTokenDispatcher), each of a buffer of T k h e_bytes x rho per rank, timed with
parcalc.core.timing.network's all-to-all on the ep group's placement: ranks etp apart in
Megatron-Core's expert order (tp-ep-dp-pp), so the group spans ep x etp consecutive ranks.
t_ep = m x L_MoE x c x T_a2a, stated as not overlapped (overlap with the shared experts or with
other micro-batches, as DeepSeek-V3's DualPipe does, is issue #19's).
"""

from __future__ import annotations

from typing import Any

A2A_SOURCE = ("Megatron-Core MoEAlltoAllTokenDispatcher (token_dispatch / token_combine, and their backward); "
              "NCCL all-to-all time on the ep group's placement (parcalc.core.timing.network)")  # fmt: skip


def ep_pieces(model: Any, tp: int, cp: int, ep: int, etp: int, micro_batch: int, sequence_parallel: bool, training: Any,
              cluster: Any, imbalance: float = 1.0) -> tuple[float, float]:  # fmt: skip
    """(bytes of one all-to-all buffer per rank, its time in seconds); (0, 0) without experts or ep = 1."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement

    if model.moe is None or ep == 1:
        return 0.0, 0.0
    tokens = micro_batch * training.seq_len / (cp * (tp if sequence_parallel else 1))
    cf = model.moe.capacity_factor
    rho = min(imbalance, cf) if cf is not None else imbalance
    buffer = tokens * model.moe.top_k * model.hidden * training.precision.activation_bytes * rho
    group = placement(ep, etp, cluster.gpus_per_node)
    return buffer, collective_time(Collective.ALL_TO_ALL, buffer, group, cluster.fabric).time


def ep_exposed(m: Any, moe_layers: int, calls_per_layer: int, a2a_time: float) -> Any:
    """t_ep = m x L_MoE x c x T_a2a (not overlapped)."""
    return m * moe_layers * calls_per_layer * a2a_time
