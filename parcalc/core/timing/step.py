"""One training iteration's time, from the kernel, network and overlap models.

    t_step = t_compute + t_tp + t_bubble + t_pp + t_dp + t_optimizer

- t_compute = m x tau: m micro-batches of the slowest pipeline stage, tau its forward, backward
  and recomputed kernels (parcalc.core.timing.compute: GEMMs by shape, attention, memory-bound
  operations; embedding on the first stage, LM head and loss on the last);
- t_tp = m x the tensor-parallel collectives of one micro-batch on that stage that stay exposed
  (all of them, or what does not fit under the GEMMs with --tp-comm-overlap);
- t_bubble = (p - 1)/(v m) x (t_compute + t_tp) (Narayanan et al. 2021, sec. 2.2);
- t_pp = 2 m v sends of one micro-batch's activation (split over the TP ranks: Megatron-LM's
  scatter/gather), on the critical path of 1F1B;
- t_dp = the data-parallel / ZeRO / FSDP communication left exposed (parcalc.core.timing.overlap);
- t_optimizer = the optimizer step, memory-bound over the local shard.

The combination below works on plain floats (one configuration, parcalc.core.fit.estimate) and
on numpy arrays (every configuration of a layout, parcalc.core.fit_search) with the same code, so
the search and the scalar reference agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StagePieces:
    """What one micro-batch costs on the slowest stage, and the windows communication hides in.

    All in seconds, per micro-batch: forward, backward, recomputed forward of the slowest stage;
    tp: its TP collectives, tp_hidden: how much of them GEMMs can hide; p2p: one pipeline send;
    first_forward / last_backward: the windows of the parameter gather and the gradient reduce."""

    forward: Any
    backward: Any
    recompute: Any
    tp: Any
    tp_hidden: Any
    p2p: float
    first_forward: Any
    last_backward: Any
    layers: int = 0  # transformer layers of the slowest stage (0: not given)


@dataclass(frozen=True)
class DataParallelPieces:
    """The data-parallel collectives of one iteration (seconds), before overlap.

    grad_sync: reducing every gradient bucket once (all-reduce for ZeRO-0, reduce-scatter else);
    buckets: how many; param_gather: ZeRO-1/2's all-gather of the updated weights;
    layer_gather / layer_reduce / root_gather: ZeRO-3/FSDP per unit; layer_forward /
    layer_backward: one layer's compute of one micro-batch (what a prefetched gather hides under)."""

    grad_all_reduce: float
    grad_reduce_scatter: float
    buckets: float
    param_gather: float
    layer_gather: float
    layer_reduce: float
    root_gather: float
    layers: int


def exposed(total: Any, window: Any, last: Any, overlap: bool) -> Any:
    """Communication overlapped with a window of compute: what does not fit under it, and at
    least its last piece (issued when the window ends); all of it without overlap."""
    if not overlap:
        return total
    return np.maximum(np.maximum(total - window, 0.0), last)


def dp_exposed(zero: Any, m: Any, stage: StagePieces, dp: DataParallelPieces, *, overlap_grad: bool, overlap_param: bool,
               reduce_every: bool, reshard: bool, layer_forward: Any, layer_backward: Any) -> Any:  # fmt: skip
    """t_dp for ZeRO stages 0-3 (see parcalc.core.timing.overlap for the rules, in words)."""
    n_b = dp.buckets
    window = stage.last_backward
    syncs = m if reduce_every else 1
    ddp = exposed(dp.grad_all_reduce, window, dp.grad_all_reduce / n_b, overlap_grad)  # DDP accumulates locally (no_sync)
    scatter = np.where(zero >= 2, syncs, 1) * exposed(dp.grad_reduce_scatter, window, dp.grad_reduce_scatter / n_b, overlap_grad)
    gather = exposed(dp.param_gather, stage.first_forward, dp.param_gather / n_b, overlap_param)
    zero12 = scatter + gather
    g, r, layers = dp.layer_gather, dp.layer_reduce, dp.layers
    if overlap_param:  # prefetch: the next unit's gather runs under this unit's compute
        fwd = dp.root_gather + g + (layers - 1) * np.maximum(g - layer_forward, 0.0)
    else:
        fwd = dp.root_gather + layers * g
    regather = g if reshard else 0.0
    if overlap_grad:
        bwd_gather = layers * np.maximum(regather - layer_backward, 0.0)
        bwd_reduce = layers * np.maximum(r - np.maximum(layer_backward - regather, 0.0), 0.0) + r
    else:
        bwd_gather = layers * regather
        bwd_reduce = layers * r
    zero3 = m * (fwd + bwd_gather) + syncs * bwd_reduce
    return np.where(zero == 0, ddp, np.where(zero <= 2, zero12, zero3))


def combine(stage: StagePieces, m: Any, v: Any, p: int, t_dp: Any, t_optimizer: Any, *, tp_overlap: bool) -> dict[str, Any]:
    """The terms of t_step from the pieces (floats or arrays alike)."""
    t_compute = m * (stage.forward + stage.backward + stage.recompute)
    tp_per_micro_batch = np.maximum(stage.tp - stage.tp_hidden, 0.0) if tp_overlap else stage.tp
    t_tp = m * tp_per_micro_batch
    if p > 1:
        beta = (p - 1) / (m * v)
        t_bubble = beta * (t_compute + t_tp)
        t_pp = 2 * m * v * stage.p2p
    else:
        beta = 0.0 * m
        t_bubble = 0.0 * m
        t_pp = 0.0 * m
    t_step = t_compute + t_tp + t_bubble + t_pp + t_dp + t_optimizer
    return {"t_compute": t_compute, "t_tp": t_tp, "beta": beta, "t_bubble": t_bubble, "t_pp": t_pp, "t_dp": t_dp,
            "t_optimizer": t_optimizer, "t_step": t_step}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The pieces, from the scalar models (memoised by the search per distinct value)


def stage_pieces(model: Any, tp: int, pp: int, dp: int, micro_batch: int, sequence_parallel: bool, recompute: Any,
                 training: Any, cluster: Any, *, first: int | None = None, last: int | None = None) -> tuple[StagePieces, float, float]:  # fmt: skip
    """The slowest stage's pieces for one micro-batch, and one layer's forward and backward time
    (with its recomputation) for ZeRO-3's prefetch windows. first / last: layers of the first and
    last stage (Megatron-LM's uneven split, parcalc.core.stages; None: L/p on every stage); the
    slowest of the first, a middle and the last stage (compute and exposed TP) sets the pace."""
    from parcalc.core.choices import Collective, Recompute
    from parcalc.core.stages import stage_split
    from parcalc.core.timing.compute import LayerShard, end_passes, layer_passes
    from parcalc.core.timing.network import collective_time, placement

    spec, fabric = cluster.spec, cluster.fabric
    e = training.precision.activation_bytes
    dropout = model.dropout if training.dropout is None else training.dropout  # None: the model's own (Llama: none)
    shard = LayerShard(micro_batch, training.seq_len, tp, sequence_parallel, training.flash_attention, dropout,
                       training.causal, e)  # fmt: skip
    layer = layer_passes(model, shard, spec)
    ends = end_passes(model, shard, spec)
    uneven = first is not None or last is not None
    split = stage_split(model.layers, pp, first, last) if uneven else (model.layers // pp,) * min(pp, 3)  # first, a middle, last
    f_layer, b_layer, r_layer = layer.t_forward, layer.t_backward, layer.t_recompute(recompute)
    first_f = split[0] * f_layer + ends.t_first_forward + (ends.t_last_forward if pp == 1 else 0.0)
    first_b = split[0] * (b_layer + r_layer) + ends.t_first_backward + (ends.t_last_backward if pp == 1 else 0.0)
    last_f = split[-1] * f_layer + ends.t_last_forward
    last_b = split[-1] * (b_layer + r_layer) + ends.t_last_backward
    activation = micro_batch * training.seq_len * model.hidden * e
    if tp > 1:
        group = placement(tp, 1, cluster.gpus_per_node)
        if sequence_parallel:
            one = (collective_time(Collective.ALL_GATHER, activation, group, fabric).time
                   + collective_time(Collective.REDUCE_SCATTER, activation, group, fabric).time)  # fmt: skip
        else:
            one = collective_time(Collective.ALL_REDUCE, activation, group, fabric).time
        tp_layer, hidden_layer = (6 if recompute is Recompute.FULL else 4) * one, layer.t_gemms()
    else:
        tp_layer = hidden_layer = 0.0
    # The slowest stage sets the pace (the first of equals). Equal stages: the first (a middle one is
    # the first without the embedding; the last has the LM head instead).
    stages = [(first_f, first_b, split[0])]
    if pp > 2:
        stages.append((split[1] * f_layer, split[1] * (b_layer + r_layer), split[1]))
    if pp > 1:
        stages.append((last_f, last_b, split[-1]))
    forward, backward_and_re, layers_here = _slowest(stages, tp_layer, hidden_layer, cluster.overlap_tp)
    recomputed = layers_here * r_layer
    tp_time, tp_hidden = layers_here * tp_layer, layers_here * hidden_layer
    if pp > 1:
        group = placement(2, tp * dp, cluster.gpus_per_node)
        p2p = collective_time(Collective.POINT_TO_POINT, activation / tp, group, fabric).time
    else:
        p2p = 0.0
    pieces = StagePieces(forward, backward_and_re - recomputed, recomputed, tp_time, tp_hidden, p2p, first_f, first_b, layers_here)
    return pieces, f_layer, b_layer + r_layer


def _slowest(stages: list[tuple[float, float, int]], tp_layer: float, hidden_layer: float, overlap_tp: bool) -> tuple[float, float, int]:
    """The (forward, backward with recomputation, layers) of the stage with the most compute and
    exposed TP time per micro-batch (the first of equals)."""

    def pace(stage: tuple[float, float, int]) -> float:
        tp_stage = stage[2] * tp_layer
        return stage[0] + stage[1] + (max(tp_stage - stage[2] * hidden_layer, 0.0) if overlap_tp else tp_stage)

    return max(stages, key=pace)


def _fullest_stage(model: Any, tp: int, pp: int, first: int | None, last: int | None) -> tuple[float, int]:
    """(parameters on one GPU, layers) of the stage holding the most parameters: the first, a
    middle or the last (parcalc.core.memory.stage_parameters; the first of equals)."""
    from parcalc.core.memory import Parallelism, stage_layers, stage_parameters

    par = Parallelism(tp, pp, 1, micro_batches=pp, first_stage_layers=first, last_stage_layers=last)
    split = stage_layers(model, par)
    stages = (0, 1, pp - 1) if pp > 2 else (0, pp - 1)
    held = [(stage_parameters(model, par, s).value, split[s]) for s in stages]
    return max(held, key=lambda x: x[0])


def dp_pieces(model: Any, tp: int, pp: int, dp: int, training: Any, cluster: Any, *, first: int | None = None,
              last: int | None = None) -> DataParallelPieces:  # fmt: skip
    """The data-parallel collectives of the fullest stage's GPU over its dp ranks (first / last:
    Megatron-LM's uneven split, as in stage_pieces)."""
    import math

    from parcalc.core.choices import Collective
    from parcalc.core.memory import layer_params_per_rank
    from parcalc.core.timing.network import collective_time, placement

    params, layers = _fullest_stage(model, tp, pp, first, last)
    if dp == 1:
        return DataParallelPieces(0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, layers)
    fabric, framework = cluster.fabric, cluster.framework
    group = placement(dp, tp, cluster.gpus_per_node)
    wire = framework.reduce_bytes
    weight = 2.0 if training.precision.activation_bytes == 2.0 else 4.0
    buckets = max(1.0, float(math.ceil(params / framework.bucket_params(dp, wire))))
    bucket = params / buckets

    def per_bucket(op: Collective, element_bytes: float) -> float:
        return buckets * collective_time(op, bucket * element_bytes, group, fabric).time

    layer = layer_params_per_rank(model, tp)
    root = max(params - layers * layer, 0.0)
    return DataParallelPieces(
        grad_all_reduce=per_bucket(Collective.ALL_REDUCE, wire),
        grad_reduce_scatter=per_bucket(Collective.REDUCE_SCATTER, wire),
        buckets=buckets,
        param_gather=per_bucket(Collective.ALL_GATHER, weight),
        layer_gather=collective_time(Collective.ALL_GATHER, layer * weight, group, fabric).time,
        layer_reduce=collective_time(Collective.REDUCE_SCATTER, layer * wire, group, fabric).time,
        root_gather=collective_time(Collective.ALL_GATHER, root * weight, group, fabric).time if root else 0.0,
        layers=layers,
    )


def optimizer_traffic(model: Any, tp: int, pp: int, training: Any, *, first: int | None = None,
                      last: int | None = None) -> tuple[float, float]:  # fmt: skip
    """(parameters on the fullest stage's GPU before ZeRO sharding, HBM bytes one parameter's update moves)."""
    from parcalc.core.choices import Precision
    from parcalc.core.memory import state_bytes
    from parcalc.core.timing.compute import optimizer_bytes

    params, _ = _fullest_stage(model, tp, pp, first, last)
    per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads)
    master = training.precision is not Precision.FP32 and training.precision is not Precision.BF16
    return params, optimizer_bytes(training.optimizer.states, per.gradient, per.weight, master)


def optimizer_step_time(model: Any, tp: int, pp: int, dp: int, zero: Any, training: Any, cluster: Any, *, first: int | None = None,
                        last: int | None = None) -> Any:  # fmt: skip
    """The optimizer's update of the local parameters (sharded over dp from ZeRO-1 on)."""
    from parcalc.core.timing.compute import optimizer_time

    params, traffic = optimizer_traffic(model, tp, pp, training, first=first, last=last)
    whole = optimizer_time(params, traffic, cluster.spec)
    return np.where(np.asarray(zero) >= 1, whole / dp, whole)  # ZeRO-1 and up shard the states (dp = 1: the same)
