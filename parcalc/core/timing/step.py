"""One training iteration's time, from the kernel, network and overlap models: the pieces of each
term and combine, which adds them. The terms themselves (label, symbol, formula, source) are
defined once in parcalc.core.timing.terms; here is how each is computed:

- t_ep = the MoE dispatch and combine of the slowest stage's MoE layers: all of them for the
  micro-batches without a partner, what the partner's compute leaves for the others
  (parcalc.core.timing.moe: dispatcher, node-limited routing, --ep-overlap);
- t_cp = m x the context-parallel exchanges of one micro-batch on that stage left exposed
  (parcalc.core.timing.context: p2p ring steps hide behind the attention of the block before;
  all-gather and all-to-all stay on the critical path);
- t_compute = m x tau: m micro-batches of the slowest pipeline stage, tau its forward, backward
  and recomputed kernels (parcalc.core.timing.compute: GEMMs by shape, attention, memory-bound
  operations; embedding on the first stage, LM head and loss on the last);
- t_tp = m x the tensor-parallel collectives of one micro-batch on that stage that stay exposed
  (all of them, or what does not fit under the GEMMs with --tp-comm-overlap). With sequence
  parallelism that includes the backward all-gather of each column-parallel linear's input
  (Megatron-LM keeps only its sequence shard), which runs beside the linear's input-gradient
  GEMM: max(0, t_AG - t_dgrad) per column-parallel linear per layer (regather_per_layer). Under an FP8 / NVFP4
  recipe on Transformer Engine the all-gathers carry the quantised tensor and, for current scaling and NVFP4,
  wait for an all-reduce of the shard's amax first; the reduce-scatters the activation dtype (sp_gather_bytes);
- t_bubble: the (p - 1)/(v m) share of the slowest stage's work, its exposed communication included
  (GPipe, 1F1B, interleaved: the event simulation gives the same, tests/test_schedule_step.py); for the
  schedules that split the backward (ZB-H1, ZB-H2, ZB-V, DualPipeV) the idle time of their simulated
  order with the stage's F, B (backward less W) and W (its weight-gradient GEMMs) per micro-batch
  (parcalc.core.pipeline_step.step_bubble);
- t_pp: one micro-batch's activation (split over the TP ranks under SP or a scatter/gather: pipeline_send_bytes) each
  way per micro-batch and chunk, on the critical path of 1F1B (a V: two chunks; DualPipeV's
  overlapped pairs send theirs under the pair's compute);
- t_dp = the data-parallel / ZeRO / FSDP communication left exposed (parcalc.core.timing.overlap); with
  hybrid sharding (a shard group S < dp) ZeRO's collectives run in the shard group and each reduce is
  followed by the all-reduce of its 1/S shard over the dp / S replicas (dp_pieces, dp_exposed);
- t_optimizer = the optimizer step, memory-bound over the local shard.

The combination below works on plain floats (one configuration, parcalc.core.fit.estimate) and
on numpy arrays (every configuration of a layout, parcalc.core.fit_search) with the same code, so
the search and the scalar reference agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from parcalc.core.layout import Layout
from parcalc.core.timing.fp8_quantise import AMAX_BYTES, gathered_bytes, quantise_recipe, reduces_amax_per_gather
from parcalc.core.timing.sm_contention import contention, loss_share
from parcalc.named_tuple import NamedTuple


@dataclass(frozen=True)
class StagePieces:
    """What one micro-batch costs on the slowest stage, and the windows communication hides in.

    All in seconds, per micro-batch: forward, backward, recomputed forward of the slowest stage;
    tp: its TP collectives, tp_hidden: how much of them GEMMs can hide; p2p: one pipeline send;
    first_forward / last_backward: the windows of the parameter gather and the gradient reduce;
    regather / regather_exposed: sequence parallelism's backward all-gathers of the column-parallel
    inputs, and what of them their input-gradient GEMMs leave exposed (0 without SP)."""

    forward: Any
    backward: Any
    recompute: Any
    tp: Any
    tp_hidden: Any
    p2p: float
    first_forward: Any
    last_backward: Any
    layers: int = 0  # transformer layers of the slowest stage (0: not given)
    regather: Any = 0.0
    regather_exposed: Any = 0.0
    cp: Any = 0.0  # the context-parallel exchanges of one micro-batch left exposed (parcalc.core.timing.context)
    cp_total: Any = 0.0  # the same exchanges before overlap
    ep: Any = 0.0  # MoE dispatch and combine of one micro-batch left exposed beside a partner micro-batch (parcalc.core.timing.moe)
    ep_total: Any = 0.0  # the same for a micro-batch without a partner (all of it unless --ep-overlap shared)
    moe_layers: int = 0  # MoE layers of the slowest stage
    wgrad: Any = 0.0  # the weight-gradient GEMMs among its layers' backward (W, what the split-backward schedules defer)
    # the share of a hidden collective's time the compute beside it loses to the SMs NCCL holds (parcalc.core.timing.
    # sm_contention.loss_share of a layer; 0: the GPU's channels not known)
    sm_loss: Any = 0.0
    # once per iteration, after the flush: the all-reduce of the tied word embedding's gradient between the first and the
    # last stage (embedding_sync_time; 0 without a pipeline or untied)
    embedding_sync: Any = 0.0


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
    # Hybrid sharding (a shard group of S < dp ranks; parcalc.core.sharding): the all-reduce over
    # the dp / S replicas of each reduce's 1/S shard, after its reduce-scatter inside the shard group
    # (0 without): every bucket's for ZeRO-1/2, one layer's for ZeRO-3/FSDP.
    grad_replica_all_reduce: Any = 0.0
    layer_replica_reduce: Any = 0.0
    # Per micro-batch, on the compute stream after its backward: the framework's accumulation of the
    # stage's bf16 gradients into fp32 copies (DeepSpeed's BF16_Optimizer; 0 for most frameworks).
    accumulate: Any = 0.0
    # --fp8-all-gather under ZeRO-3 (parcalc.core.comm.float8_all_gather): once per step, after the optimizer step, the all-reduce
    # of the stage's Float8 weights' amaxes (precompute_float8_dynamic_scale_for_fsdp), on the critical path (0 without)
    float8_amax: Any = 0.0


def exposed(total: Any, window: Any, last: Any, overlap: bool) -> Any:
    """Communication overlapped with a window of compute: what does not fit under it, and at
    least its last piece (issued when the window ends); all of it without overlap."""
    if not overlap:
        return total
    return np.maximum(np.maximum(total - window, 0.0), last)


def dp_exposed(zero: Any, m: Any, stage: StagePieces, dp: DataParallelPieces, *, overlap_grad: bool, overlap_param: bool,
               reduce_every: bool, reshard: bool, layer_forward: Any, layer_backward: Any, contended: bool = True) -> Any:  # fmt: skip
    """t_dp for ZeRO stages 0-3 (see parcalc.core.timing.overlap for the rules, in words): what the collectives leave
    exposed, plus (`contended`) the compute they slow while hidden by the SMs NCCL holds (stage.sm_loss of their time:
    parcalc.core.timing.sm_contention)."""
    exposed_time = _dp_exposed(zero, m, stage, dp, overlap_grad=overlap_grad, overlap_param=overlap_param, reduce_every=reduce_every,
                               reshard=reshard, layer_forward=layer_forward, layer_backward=layer_backward)  # fmt: skip
    if not contended or not (overlap_grad or overlap_param) or not np.any(stage.sm_loss):
        return exposed_time
    return exposed_time + contention(dp_hidden(zero, m, stage, dp, exposed_time, reduce_every=reduce_every, reshard=reshard,
                                               layer_forward=layer_forward, layer_backward=layer_backward), stage.sm_loss)  # fmt: skip


def dp_hidden(zero: Any, m: Any, stage: StagePieces, dp: DataParallelPieces, exposed_time: Any, *, reduce_every: bool, reshard: bool,
              layer_forward: Any, layer_backward: Any) -> Any:  # fmt: skip
    """The data-parallel collective time the overlap hid: all of it (as timed without overlap) less what stayed exposed."""
    total = _dp_exposed(zero, m, stage, dp, overlap_grad=False, overlap_param=False, reduce_every=reduce_every, reshard=reshard,
                        layer_forward=layer_forward, layer_backward=layer_backward)  # fmt: skip
    return np.maximum(total - exposed_time, 0.0)


def _dp_exposed(zero: Any, m: Any, stage: StagePieces, dp: DataParallelPieces, *, overlap_grad: bool, overlap_param: bool,
                reduce_every: bool, reshard: bool, layer_forward: Any, layer_backward: Any) -> Any:  # fmt: skip
    n_b = dp.buckets
    window = stage.last_backward
    syncs = m if reduce_every else 1
    ddp = exposed(dp.grad_all_reduce, window, dp.grad_all_reduce / n_b, overlap_grad)  # DDP accumulates locally (no_sync)
    # Hybrid sharding: each bucket's reduce-scatter, then its shard's all-reduce over the replicas,
    # overlapped with the backward as the reduce-scatter alone is (Megatron-LM's start_grad_sync)
    reduce = dp.grad_reduce_scatter + dp.grad_replica_all_reduce
    scatter = np.where(zero >= 2, syncs, 1) * exposed(reduce, window, reduce / n_b, overlap_grad)
    gather = exposed(dp.param_gather, stage.first_forward, dp.param_gather / n_b, overlap_param)
    zero12 = scatter + gather
    g, r, layers = dp.layer_gather, dp.layer_reduce + dp.layer_replica_reduce, dp.layers  # hybrid: a unit's RS, then its AR
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
    zero3 = m * (fwd + bwd_gather) + syncs * bwd_reduce + dp.float8_amax  # the amax all-reduce: nothing to hide under
    return np.where(zero == 0, ddp, np.where(zero <= 2, zero12, zero3))


class StepTerms(NamedTuple):
    """The terms of one iteration's time (seconds; floats for one configuration, arrays in the search), as combine
    adds them: t_step = the slowest stage's compute and what of TP, CP, EP, the bubble, PP sends, DP sync, the
    optimizer, offloading and the host's issue wait stays exposed (beta: the share of TP not hidden)."""

    t_compute: Any
    t_host: Any
    t_tp: Any
    t_cp: Any
    t_ep: Any
    beta: Any
    t_bubble: Any
    t_pp: Any
    t_dp: Any
    t_optimizer: Any
    t_offload: Any
    t_step: Any


def blocking_sends(m: Any, v: Any, p: int, overlap_p2p: bool) -> Any:
    """Chunks per direction whose pipeline send waits on the critical path: all m v of them, or, with Megatron-Core's
    overlap_p2p_comm on an interleaved schedule (v > 1), the warm-up's forward sends (and as many cool-down backward ones) of
    rank 0, the rank with the most: min(m v, 2 (p - 1) + (v - 1) p) (schedules.py num_warmup_microbatches with
    microbatch_group_size_per_vp_stage = p; presets/frameworks/megatron.yaml p2poverlap). Floats or arrays alike."""
    every = m * v
    if not overlap_p2p:
        return every
    blocking = np.where(np.asarray(v) > 1, np.minimum(every, 2 * (p - 1) + (np.asarray(v) - 1) * p), every)
    return float(blocking) if np.ndim(blocking) == 0 else blocking


def pipeline_sends_time(stage: StagePieces, m: Any, v: Any, p: int, overlap_p2p: bool) -> Any:
    """t_pp less the embedding's sync for 1F1B and interleaved schedules: each blocking send whole (blocking_sends), each
    overlapped one only where it outlasts the chunk's forward it hides behind (stage.forward / v)."""
    blocking = blocking_sends(m, v, p, overlap_p2p)
    overlapped = m * v - blocking
    return 2 * blocking * stage.p2p + 2 * overlapped * np.maximum(stage.p2p - stage.forward / v, 0.0)


def combine(stage: StagePieces, m: Any, v: Any, p: int, t_dp: Any, t_optimizer: Any, *, tp_overlap: bool,
            t_offload: Any = 0.0, t_host: Any = 0.0, schedule: Any = None, overlap_p2p: bool = False) -> StepTerms:  # fmt: skip
    """The terms of t_step from the pieces (floats or arrays alike). t_ep: the MoE exchanges, the
    pipeline's unpartnered micro-batches (parcalc.core.timing.moe.unpaired_micro_batches) with all
    of theirs exposed, the others with what their partner's compute leaves. schedule: the pipeline's
    (parcalc.core.choices.Schedule; None: 1F1B, or interleaved when v > 1). overlap_p2p: the framework's
    overlap_p2p_comm (the interleaved schedule's steady-state sends hidden: pipeline_sends_time)."""
    from parcalc.core.timing.moe import unpaired_micro_batches

    split = schedule is not None and schedule.splits_backward and p > 1
    pairs = _paired(schedule, p, m) if split else 0.0
    # DualPipe(V): a pair's two passes hide each other's exchanges; a V's chunk pass is half a micro-batch of the stage,
    # DualPipe's a whole one (a stage each way)
    if split and schedule.pairs_forward_backward:
        alone = m - pairs * (0.5 if schedule.v_shape else 1.0)
    else:
        alone = unpaired_micro_batches(p, v, m)
    t_ep = alone * stage.ep_total + (m - alone) * stage.ep
    t_compute = m * (stage.forward + stage.backward + stage.recompute)
    if tp_overlap:  # TE's userbuffers: every TP collective, the SP re-gathers included, against every GEMM
        tp_per_micro_batch = np.maximum(stage.tp + stage.regather - stage.tp_hidden, 0.0)
    else:  # every collective on the critical path, but a re-gather runs beside its linear's dgrad GEMM
        tp_per_micro_batch = stage.tp + stage.regather_exposed
    t_tp = m * tp_per_micro_batch
    t_cp = m * stage.cp
    if split:  # the simulated order: each micro-batch's exposed communication split evenly between its forward and backward
        shared = (t_tp + t_cp + t_ep) / m / 2
        weight = np.minimum(stage.wgrad, stage.backward)
        t_bubble = _simulated_bubble(schedule, p, m, stage.forward + shared, stage.backward + stage.recompute - weight + shared, weight)
        beta = t_bubble / (t_compute + t_tp + t_cp + t_ep)
        t_pp = (2 * m * (2 if schedule.v_shape else 1) - 2 * pairs) * stage.p2p + stage.embedding_sync  # a V sends down and back up
    elif p > 1:
        beta = (p - 1) / (m * v)
        t_bubble = beta * (t_compute + t_tp + t_cp + t_ep)
        t_pp = pipeline_sends_time(stage, m, v, p, overlap_p2p) + stage.embedding_sync
    else:
        beta = 0.0 * m
        t_bubble = 0.0 * m
        t_pp = 0.0 * m
    t_step = t_compute + t_host + t_tp + t_cp + t_ep + t_bubble + t_pp + t_dp + t_optimizer + t_offload
    return StepTerms(t_compute, t_host, t_tp, t_cp, t_ep, beta, t_bubble, t_pp, t_dp, t_optimizer, t_offload, t_step)


def _paired(schedule: Any, p: int, m: Any) -> Any:
    """parcalc.core.pipeline_step.paired_passes for a number of micro-batches or an array of them."""
    from parcalc.core.pipeline_step import paired_passes

    if np.ndim(m) == 0:
        return float(paired_passes(schedule, p, int(m)))
    return np.vectorize(lambda n: float(paired_passes(schedule, p, int(n))), otypes=[float])(m)


def _simulated_bubble(schedule: Any, p: int, m: Any, forward: Any, input_gradient: Any, weight: Any) -> Any:
    """parcalc.core.pipeline_step.step_bubble on floats, or element by element on arrays (the search)."""
    from parcalc.core.pipeline_step import step_bubble

    def one(n: Any, f: Any, b: Any, w: Any) -> float:
        return step_bubble(schedule, p, int(n), float(f), float(b), float(w))

    if all(np.ndim(x) == 0 for x in (m, forward, input_gradient, weight)):
        return one(m, forward, input_gradient, weight)
    return np.vectorize(one, otypes=[float])(m, forward, input_gradient, weight)


# ---------------------------------------------------------------------------------------------
# The pieces, from the scalar models (memoised by the search per distinct value)


@dataclass(frozen=True)
class LayerPieces:
    """One micro-batch through one layer of each kind, on one GPU (seconds): what stage_pieces
    assembles into a stage. Depends on tp, b, SP, recomputation, cp and the MoE settings, not on
    pp, dp or the split, so the search computes it once per such key."""

    f_dense: float
    b_dense: float
    r_dense: float
    f_moe: float
    b_moe: float
    r_moe: float
    gemms_dense: float
    gemms_moe: float
    tp_layer: float  # the TP collectives on the critical path
    regather: float  # SP's backward re-gathers, and what of them stays exposed
    regather_exposed: float
    cp_total: float  # the context-parallel exchanges of a layer, and what of them stays exposed
    cp_exposed: float
    ep_paired: float  # an MoE layer's dispatch and combine exposed beside a partner micro-batch, and alone
    ep_alone: float
    first_forward: float  # the embedding (first stage), the LM head and loss (last stage)
    first_backward: float
    last_forward: float
    last_backward: float
    activation: float  # bytes of one micro-batch's b s h activation (the pipeline's send, times tp)
    tp_replay: float = 0.0  # the TP collectives a recomputed layer runs again (full: 2; op: the forward's gathers)
    wgrad_dense: float = 0.0  # the weight-gradient GEMMs among b_dense / b_moe (what zero-bubble schedules and DualPipe defer)
    wgrad_moe: float = 0.0
    # the dense layer's loss_share beside a collective (parcalc.core.timing.sm_contention); an MoE layer's, whose grouped
    # expert GEMMs may fit the free SMs, is not weighed in
    sm_loss: float = 0.0


def layer_pieces(model: Any, layout: Layout, micro_batch: int, recompute: Any, training: Any, cluster: Any, *,
                 experts: Any = None) -> LayerPieces:  # fmt: skip
    """The per-layer pieces of stage_pieces (see there): of the layout, its tensor and context parallelism
    (tp, sequence parallelism, cp and how CP exchanges keys and values)."""
    from parcalc.core.choices import Collective, Recompute
    from parcalc.core.timing.compute import end_passes, layer_passes, mtp_passes
    from parcalc.core.timing.moe import (
        ExpertShard,
        expert_host_exposed,
        exposed_per_layer,
        layer_exchange,
        routed_rows,
        routed_tokens,
    )
    from parcalc.core.timing.network import collective_time, placement

    spec, fabric = cluster.spec, cluster.fabric
    tp, sequence_parallel, cp = layout.tp, layout.sequence_parallel, layout.cp
    e = training.precision.activation_bytes
    # Megatron-LM's --recompute-modules (parcalc.core.recompute); None: selective is the attention core
    modules = getattr(training, "recompute_modules", None) if recompute is Recompute.SELECTIVE else None
    seq = training.seq_len // cp  # this rank's tokens of each sequence (context parallelism)
    fp8 = quantise_recipe(training.precision, training.fp8_recipe)  # fp8's recipe, nvfp4 under fp4
    shard = _layer_shard(model, layout, micro_batch, training, cluster)
    layer = layer_passes(model, shard, spec)
    ends = end_passes(model, shard, spec)
    if model.moe is not None:
        experts = experts if experts is not None else ExpertShard(etp=tp)
        moe_layer = layer_passes(model, shard, spec, experts)
    else:
        moe_layer = layer
    activation = micro_batch * seq * model.hidden * e
    regather_layer = regather_exposed_layer = 0.0
    if tp > 1:
        group = placement(tp, 1, cluster.gpus_per_node)
        if sequence_parallel:
            # the all-gathers carry the recipe's quantised bytes on a Transformer Engine stack, each after an amax all-reduce
            # under current scaling / NVFP4; the reduce-scatters the activation dtype (fp8_quantise.SP_GATHER_SOURCE)
            gathered, amax = sp_gather_bytes(fp8, cluster.framework, e)
            gather, dgrads = _regather_inputs(layer, micro_batch * seq * model.hidden * gathered, tp, cluster)  # sp_regather, from this layer's kernels
            amax_reduce = collective_time(Collective.ALL_REDUCE, AMAX_BYTES, group, fabric).time if amax else 0.0
            one = gather + amax_reduce + collective_time(Collective.REDUCE_SCATTER, activation, group, fabric).time
            if model.mamba is not None:  # one block a layer, one column-parallel linear each (mamba_kernels)
                from parcalc.core.timing.mamba_kernels import mean_layer_regather

                regather_layer, regather_exposed_layer = mean_layer_regather(model, layer.backward, gather)
            elif model.linear_attention is not None:  # the mixer's column-parallel linear: QKV or in_proj, by share
                from parcalc.core.timing.linear_attention_kernels import mean_layer_regather as linear_regather

                regather_layer, regather_exposed_layer = linear_regather(model, layer.backward, gather)
            else:
                regather_layer, regather_exposed_layer = regather_per_layer(gather, dgrads)
        else:
            one = collective_time(Collective.ALL_REDUCE, activation, group, fabric).time
        # 2 forward and 2 backward per layer, 2 more replayed by full recomputation; the SP re-gathers apart.
        # Op-level checkpointing replays the forward's collectives but the reduce-scatters, whose outputs
        # it saves (parcalc.core.recompute): with SP the 2 all-gathers, without it the 2 all-reduces.
        sites = model.tp_sites_per_layer
        tp_layer = 2 * sites * one
        if recompute is Recompute.FULL:
            replay = sites * one
        elif recompute is Recompute.OP:
            replay = 2 * (gather + amax_reduce) if sequence_parallel else 2 * one
        else:
            replay = 0.0
    else:
        tp_layer = replay = 0.0
    cp_total = cp_exposed = 0.0
    if cp > 1:
        from parcalc.core.timing.context import cp_layer_time, hybrid_cp_layer_time
        from parcalc.core.timing.torch_ring_attention import torch_ring_layer_time, torch_rotate

        attn_f, attn_b = layer.t_attention()
        hybrid = model.mamba is not None or model.linear_attention is not None  # attention's exchange and the mixers' all-to-alls
        if cluster.framework.context_parallel == "torch-ring" and not hybrid and torch_rotate(layout.cp_comm):
            cp_total, cp_exposed = torch_ring_layer_time(model, micro_batch, training.seq_len, layout, e, attn_f, attn_b, recompute,
                                                         training.compiled, cluster.gpus_per_node, fabric, spec)  # fmt: skip
        else:
            cp_total, cp_exposed = (hybrid_cp_layer_time if hybrid else cp_layer_time)(
                model, micro_batch, training.seq_len, layout, e, attn_f, attn_b, recompute, cluster.gpus_per_node, fabric)
    paired = alone = 0.0
    if model.moe is not None:
        fp8_dispatch = bool(fp8) and cluster.framework.fp8_dispatch  # Megatron-Core dispatches BF16 whatever the recipe (moe.py)
        exchange = layer_exchange(model, routed_tokens(micro_batch, seq, tp, sequence_parallel), e, fp8_dispatch, experts, fabric,
                                  cluster.gpus_per_node)  # fmt: skip
        paired, alone = exposed_per_layer(exchange, moe_layer.t_forward, moe_layer.t_backward + moe_layer.t_recompute(recompute, model, modules),
                                          moe_layer.shared_forward, moe_layer.shared_backward, experts.overlap, spec.sms,
                                          recompute is Recompute.FULL, experts.dispatcher)  # fmt: skip
        per_gemm = cluster.framework.expert_gemm_host
        if per_gemm and experts.ep * experts.etp > 1:  # the host's expert-GEMM loop after the dispatcher's sync (moe.py)
            _, local = routed_rows(model, routed_tokens(micro_batch, seq, tp, sequence_parallel), experts)
            experts_forward = sum(k.time for k in moe_layer.forward if k.key.startswith("moe.experts"))
            host_f, host_b = expert_host_exposed(local, per_gemm, experts_forward, moe_layer.t_backward)
            host = host_f * (2 if recompute is Recompute.FULL else 1) + host_b
            paired, alone = paired + host, alone + host
    r_dense, r_moe = layer.t_recompute(recompute, model, modules), moe_layer.t_recompute(recompute, model, modules)
    if modules and tp > 1:  # a checkpointed MLP / MoE block replays its forward's TP collectives (SP: all-gather and
        # reduce-scatter; without SP: the all-reduce), one `one` (parcalc.core.recompute.MEGATRON_MODULE_SITES)
        r_dense += one if "mlp" in modules else 0.0
        r_moe += one if "moe" in modules else 0.0
    # the multi-token-prediction modules run on the last stage after the head (Megatron-LM places them there)
    mtp_f, mtp_b = mtp_passes(model, shard, spec, moe_layer if model.mtp_layer_is_moe else layer, ends)
    return LayerPieces(layer.t_forward, layer.t_backward, r_dense, moe_layer.t_forward, moe_layer.t_backward,
                       r_moe, layer.t_gemms(), moe_layer.t_gemms(), tp_layer, regather_layer,
                       regather_exposed_layer, cp_total, cp_exposed, paired, alone, ends.t_first_forward, ends.t_first_backward,
                       ends.t_last_forward + mtp_f, ends.t_last_backward + mtp_b, activation, replay, weight_gradients(layer),
                       weight_gradients(moe_layer), loss_share(layer.forward + layer.backward) if spec.nccl_ctas else 0.0)  # fmt: skip


def weight_gradients(passes: Any) -> float:
    """The weight-gradient GEMMs of a layer's backward (dW = X^T dY of every linear; attention's
    score and context GEMMs have no weights)."""
    return sum(k.time for k in passes.backward if k.key.endswith(".wgrad") and not k.key.startswith("attn."))


def stage_pieces(model: Any, layout: Layout, micro_batch: int, recompute: Any, training: Any, cluster: Any, *, experts: Any = None,
                 layer: LayerPieces | None = None, recompute_layers: int | None = None) -> tuple[StagePieces, float, float]:  # fmt: skip
    """The slowest stage's pieces for one micro-batch, and one layer's forward and backward time
    (with its recomputation) for ZeRO-3's prefetch windows. The layout's split: the layers of the first
    and last stage (Megatron-LM's uneven split, parcalc.core.stages; the even split: L/p on every stage);
    the slowest of the first, a middle and the last stage (compute and exposed TP) sets the pace.
    experts: how the MoE layers run (parcalc.core.timing.moe.ExpertShard; None: ep = etp = 1);
    a stage's MoE layers (contiguous ranges of Megatron's split) take an MoE layer's kernels and
    its dispatch and combine (StagePieces.ep). layer: layer_pieces of the same arguments, when
    the caller has it already (the search). recompute_layers: with full recomputation, the layers
    of each of a stage's model chunks (the layout's chunks) that are recomputed (Megatron-LM's block
    method; None: all)."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement

    lp = layer if layer is not None else layer_pieces(model, layout, micro_batch, recompute, training, cluster, experts=experts)
    if layout.pp > 1:
        group = placement(2, layout.tp * layout.cp * layout.dp, cluster.gpus_per_node)
        p2p = collective_time(Collective.POINT_TO_POINT, pipeline_send_bytes(lp.activation, layout, cluster.framework), group,
                              cluster.fabric).time  # fmt: skip
    else:
        p2p = 0.0
    chunks = layout.chunks
    pieces = assemble_stage(model, layout, lp, p2p, cluster.overlap_tp, recompute_layers)
    sync = embedding_sync_time(model, layout.tp, layout.pp, layout.cp * layout.dp, layout.schedule, training, cluster)
    if sync:
        pieces = replace(pieces, embedding_sync=sync)
    if model.moe is not None and pieces.layers:  # ZeRO-3's prefetch windows: the mean layer of the slowest stage
        layers = float(pieces.layers)
        return pieces, float(pieces.forward) / layers, float(pieces.backward + pieces.recompute) / layers
    share = _again(pieces.layers, recompute_layers, chunks) / pieces.layers if pieces.layers else 1.0
    return pieces, lp.f_dense, lp.b_dense + lp.r_dense * share


def pipeline_send_bytes(activation: float, layout: Layout, framework: Any) -> float:
    """Bytes one TP rank sends across a stage boundary per micro-batch: its 1/tp share where the stage's output is split
    over the TP ranks (sequence parallelism, or the framework's scatter/gather), else the whole b s h activation
    (Megatron-LM at the GPT-3 example's commit 152aab304d, training.py `communicate`: every rank sends `tensor_shape =
    (seq_length, micro_batch_size, hidden_size)`; the split came with 27fc468964, 2021-01-20, and left with
    Megatron-Core's p2p_communication.py, 3c92fa93b5, 2023-03-23)."""
    split = layout.sequence_parallel or framework.pipeline_scatter_gather
    return activation / layout.tp if split else activation


def embedding_sync_time(model: Any, tp: int, pp: int, ranks: int, schedule: Any, training: Any, cluster: Any) -> float:
    """The all-reduce of the tied word embedding's gradient between the first stage (the embedding) and the last (the LM
    head's copy of it), once per iteration after the pipeline's flush, with nothing to hide behind: Megatron-LM's
    'backward-embedding-all-reduce' (megatron/training.py at 152aab304d: `torch.distributed.all_reduce(
    word_embeddings_weight.grad, group=mpu.get_embedding_group())` after the data-parallel all-reduce; Megatron-Core
    finalize_model_grads.py `_allreduce_word_embedding_grads`, the main_grad), DeepSpeed's ReduceTiedGrads (pipe/engine.py
    `_exec_reduce_tied_grads`: `weight._hp_grad` under the BF16 optimizer, else `weight.grad`; pipe/schedule.py issues it
    after the last backward, before ReduceGrads). V / t rows of h on each TP rank, in the framework's gradient wire dtype,
    between two ranks tp x ranks x (p - 1) apart. 0 without a pipeline, for untied embeddings, and where one device holds
    both ends (a V schedule's first and last chunk, DualPipe's stage pair)."""
    from parcalc.core.choices import Collective
    from parcalc.core.memory import vocab_shard
    from parcalc.core.timing.network import collective_time, placement

    one_device = schedule is not None and (schedule.v_shape or schedule.value == "dualpipe")
    if pp <= 1 or not model.tied_embeddings or not model.vocab or one_device:
        return 0.0
    size = vocab_shard(model, tp) * model.hidden * cluster.framework.at(pp).wire_bytes(training.precision)
    return collective_time(Collective.ALL_REDUCE, size, placement(2, tp * ranks * (pp - 1), cluster.gpus_per_node), cluster.fabric).time


def pipeline_send_description(layout: Layout, framework: Any) -> str:
    """What T_p2p sends, for its derivation (pipeline_send_bytes)."""
    if layout.tp == 1:
        return "one send of b s h, NCCL model"
    if layout.sequence_parallel:
        return "one send of b s h / t (sequence parallelism: each TP rank holds s / t of the output), NCCL model"
    if framework.pipeline_scatter_gather:
        return f"one send of b s h / t (the scatter/gather: {framework.source('pipeline_scatter_gather')}), NCCL model"
    return f"one send of the whole b s h from every TP rank ({framework.source('pipeline_scatter_gather')}), NCCL model"


def _again(layers: Any, recompute_layers: int | None, chunks: int) -> Any:
    """The layers of a stage of `layers` layers that run their forward again (--recompute-layers, per chunk)."""
    return layers if recompute_layers is None else np.minimum(recompute_layers, layers // chunks) * chunks


def assemble_stage(model: Any, layout: Layout, lp: Any, p2p: Any, overlap_tp: bool, recompute_layers: int | None = None) -> StagePieces:
    """stage_pieces' assembly of a stage from per-layer pieces (the layout's pipeline: its stages, their
    split and chunks): the same code on floats (one configuration; lp a LayerPieces) and on numpy arrays
    (the search; lp's fields arrays, one entry per configuration)."""
    pp, chunks = layout.pp, layout.chunks
    split, moe_counts = paced_stages(model, layout)

    def f_of(layers: int, moe: int) -> Any:
        return (layers - moe) * lp.f_dense + moe * lp.f_moe

    def b_of(layers: int, moe: int) -> Any:  # backward, and the recomputation of the layers that run again
        share = _again(layers, recompute_layers, chunks) / layers if layers else 1.0
        return (layers - moe) * (lp.b_dense + share * lp.r_dense) + moe * (lp.b_moe + share * lp.r_moe)

    # In a V (ZB-V, DualPipeV) rank 0 runs the first virtual stage and the last: the embedding and the head with its loss
    # (parcalc.core.memory.head_stage, pipeline_layout.V_PLACEMENT); otherwise the head is on the last stage
    head_first = pp == 1 or (layout.schedule.v_shape and pp > 1)
    first_f = f_of(split[0], moe_counts[0]) + lp.first_forward + (lp.last_forward if head_first else 0.0)
    first_b = b_of(split[0], moe_counts[0]) + lp.first_backward + (lp.last_backward if head_first else 0.0)
    # The multi-token-prediction blocks run on the stage that holds the loss (lp.last_*: their compute, not recomputed,
    # parcalc.core.timing.compute.mtp_passes); each is a transformer layer with its layer's TP, CP and EP exchanges
    # (Megatron-LM multi_token_prediction.py: MultiTokenPredictionLayer's transformer_layer), which pace that stage too
    mtp = model.mtp_layers
    mtp_moe = mtp if mtp and model.moe is not None and model.mtp_layer_is_moe else 0
    # The slowest stage sets the pace (the first of equals). Equal stages: the first (a middle one is
    # the first without the embedding; the last has the LM head instead). Each: forward, backward with
    # recomputation, its layers, its MoE layers, and the MTP blocks and MoE ones among them it holds.
    stages = [(first_f, first_b, split[0], moe_counts[0], mtp if head_first else 0, mtp_moe if head_first else 0)]
    if pp > 2:
        stages.append((f_of(split[1], moe_counts[1]), b_of(split[1], moe_counts[1]), split[1], moe_counts[1], 0, 0))
    if pp > 1:
        last_f, last_b = (0.0, 0.0) if head_first else (lp.last_forward, lp.last_backward)
        stages.append((f_of(split[-1], moe_counts[-1]) + last_f, b_of(split[-1], moe_counts[-1]) + last_b,
                       split[-1], moe_counts[-1], 0 if head_first else mtp, 0 if head_first else mtp_moe))  # fmt: skip
    per_layer = _TpLayer(lp.tp_layer, lp.regather, lp.regather_exposed, lp.gemms_dense, lp.gemms_moe, lp.tp_replay, recompute_layers, chunks)
    forward, backward_and_re, layers_here, moe_here, mtp_here, mtp_moe_here = _slowest(stages, per_layer, overlap_tp)
    again = _again(layers_here, recompute_layers, chunks)
    share = again / np.maximum(layers_here, 1)
    recomputed = share * ((layers_here - moe_here) * lp.r_dense + moe_here * lp.r_moe)
    blocks, moe_blocks = layers_here + mtp_here, moe_here + mtp_moe_here  # what exchanges: the layers and the MTP blocks
    tp_time = blocks * lp.tp_layer + again * lp.tp_replay
    tp_hidden = (blocks - moe_blocks) * lp.gemms_dense + moe_blocks * lp.gemms_moe
    return StagePieces(forward, backward_and_re - recomputed, recomputed, tp_time, tp_hidden, p2p, first_f, first_b, layers_here,
                       blocks * lp.regather, blocks * lp.regather_exposed, blocks * lp.cp_exposed,
                       blocks * lp.cp_total, moe_blocks * lp.ep_paired, moe_blocks * lp.ep_alone, moe_blocks,
                       (layers_here - moe_here) * lp.wgrad_dense + moe_here * lp.wgrad_moe, lp.sm_loss)  # fmt: skip


def paced_stages(model: Any, layout: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The layers and MoE layers of the stages that can set the pace, as assemble_stage and stage_kinds index them
    ([0] the first, [1] a middle one when pp > 2, [-1] the last): Megatron-LM's even or uneven split, whose middle
    stages are equal; or a custom layout's first, fullest middle (the first of equals) and last, the MoE layers counted
    on the layout's own layer ranges."""
    if layout.pipeline_layout is not None and layout.pp > 1:
        from parcalc.core.expert_parallel import moe_layers_on

        pipeline = layout.pipeline_split(model.layers)
        full, ranges = pipeline.stage_layers(), pipeline.stage_ranges()
        pp = layout.pp
        indices = [0] + ([max(range(1, pp - 1), key=lambda i: (full[i], -i))] if pp > 2 else []) + [pp - 1]
        moe = tuple(moe_layers_on(model, ranges[i]) if model.moe is not None else 0 for i in indices)
        return tuple(full[i] for i in indices), moe
    first, last = layout.stage_ends(model.layers)
    uneven = first is not None or last is not None
    split = _split(model.layers, layout.pp, first, last) if uneven else (model.layers // layout.pp,) * min(layout.pp, 3)
    return split, _moe_per_stage(model, layout.pp, split)


@lru_cache(maxsize=4096)
def _split(layers: int, pp: int, first: int | None, last: int | None) -> tuple[int, ...]:
    from parcalc.core.stages import stage_split

    return stage_split(layers, pp, first, last)


@lru_cache(maxsize=4096)
def _moe_per_stage(model: Any, pp: int, split: tuple[int, ...]) -> tuple[int, ...]:
    """MoE layers of the stages `split` describes (the first, a middle and the last, as
    stage_pieces takes them), by the contiguous ranges of Megatron's split (with interleaving the
    chunks move a few dense layers; parcalc.core.memory.stage_moe_layers counts them chunk by
    chunk for memory)."""
    if model.moe is None:
        return (0,) * len(split)
    counts = split if len(split) == pp else (split[0],) * pp
    starts = [sum(counts[:i]) for i in range(pp)]
    indices = [0] + ([1] if pp > 2 else []) + ([pp - 1] if pp > 1 else [])
    return tuple(model.moe_layers_in(starts[i], starts[i] + counts[i]) for i in indices)


def sp_regather(model: Any, tp: int, micro_batch: int, training: Any, cluster: Any) -> tuple[float, tuple[float, ...]]:
    """Under sequence parallelism: one all-gather of a micro-batch's b s h activation over the TP
    group (the size of every SP collective in a layer), and the input-gradient GEMM of each
    column-parallel linear of a layer, which its backward re-gather runs beside."""
    from parcalc.core.timing.compute import LayerShard, layer_passes

    e = training.precision.activation_bytes
    shard = LayerShard(micro_batch, training.seq_len, tp, True, training.flash_attention, training.dropout, training.causal, e,
                       compiled=training.compiled)  # fmt: skip
    gathered, _ = sp_gather_bytes(quantise_recipe(training.precision, training.fp8_recipe), cluster.framework, e)
    return _regather_inputs(layer_passes(model, shard, cluster.spec), micro_batch * training.seq_len * model.hidden * gathered, tp, cluster)


def sp_gather_bytes(recipe: str, framework: Any, activation_bytes: float) -> tuple[float, bool]:
    """Bytes an element of sequence parallelism's all-gathers, and whether each forward / output-gradient gather waits for
    an all-reduce of the shard's amax over the TP group: the quantised recipe's (fp8_quantise.gathered_bytes,
    reduces_amax_per_gather) where the framework gathers quantised tensors (Framework.quantised_sp_gathers), else the
    activation dtype's."""
    gathered = gathered_bytes(recipe) if framework.quantised_sp_gathers else None
    if gathered is None:
        return activation_bytes, False
    return gathered, reduces_amax_per_gather(recipe)


def _regather_inputs(layer: Any, gathered: float, tp: int, cluster: Any) -> tuple[float, tuple[float, ...]]:
    """One SP all-gather of `gathered` bytes (b s h in the gathered dtype) and the layer's column-parallel dgrad GEMMs."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement

    gather = collective_time(Collective.ALL_GATHER, gathered, placement(tp, 1, cluster.gpus_per_node), cluster.fabric).time
    return gather, layer.t_column_dgrads()


def regather_per_layer(gather: float, dgrads: tuple[float, ...]) -> tuple[float, float]:
    """Sequence parallelism's backward all-gathers in one layer: their time, and what stays exposed.

    Megatron-LM's column-parallel linear keeps only its sequence shard of the input and, in
    backward, all-gathers it again for the weight gradient: it launches the gather asynchronously,
    computes grad_input = grad_output @ weight meanwhile, then waits and computes the weight gradient
    (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward;
    core_v0.9.0 lines 433-453; Korthikanti et al. 2022 sec. 4.2.2: "we overlap this communication
    with the computation required to calculate gradients with respect to Y"). So per
    column-parallel linear max(0, t_AG - t_dgrad) stays on the critical path. `gather`: one
    all-gather of b s h; `dgrads`: the input-gradient GEMM of each column-parallel linear."""
    return len(dgrads) * gather, sum(max(gather - dgrad, 0.0) for dgrad in dgrads)


@dataclass(frozen=True)
class _TpLayer:
    """One layer's TP communication (seconds per micro-batch): the collectives on the critical
    path, SP's backward re-gathers and what of them stays exposed, and the GEMMs that
    --tp-comm-overlap hides them under."""

    collectives: float
    regather: float
    regather_exposed: float
    gemms: float
    gemms_moe: float = 0.0  # an MoE layer's GEMMs
    replay: float = 0.0  # collectives a recomputed layer runs again
    recompute_layers: int | None = None  # per chunk (None: every layer replays)
    chunks: int = 1

    def exposed(self, layers: int, overlap_tp: bool, moe: int = 0, blocks: int = 0, moe_blocks: int = 0) -> Any:
        """combine()'s t_tp per micro-batch for a stage of `layers` layers, `moe` of them MoE layers, and `blocks` MTP
        blocks (`moe_blocks` of them MoE), which exchange as a layer does and are not recomputed."""
        replayed = _again(layers, self.recompute_layers, self.chunks) * self.replay
        layers, moe = layers + blocks, moe + moe_blocks
        if overlap_tp:
            return np.maximum(layers * (self.collectives + self.regather) - (layers - moe) * self.gemms - moe * self.gemms_moe + replayed, 0.0)
        return layers * (self.collectives + self.regather_exposed) + replayed


def _slowest(stages: list[tuple[Any, Any, int, int, int, int]], tp: _TpLayer, overlap_tp: bool) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The (forward, backward with recomputation, layers, MoE layers, MTP blocks, MoE ones among them) of the stage with
    the most compute and exposed TP time per micro-batch (the first of equals); floats or arrays alike."""

    def pace(stage: tuple[Any, Any, int, int, int, int]) -> Any:
        return stage[0] + stage[1] + tp.exposed(stage[2], overlap_tp, stage[3], stage[4], stage[5])

    if not isinstance(stages[0][0], np.ndarray):
        return max(stages, key=pace)
    best, best_pace = stages[0], pace(stages[0])
    for stage in stages[1:]:
        slower = pace(stage) > best_pace
        best = tuple(np.where(slower, new, old) for new, old in zip(stage, best, strict=True))
        best_pace = np.where(slower, pace(stage), best_pace)
    return best


class FullestStage(NamedTuple):
    """One GPU of the stage holding the most parameters: its parameters (routed experts
    included), the routed-expert parameters among them (0 for a dense model), the embedding and
    head parameters among them, and its layers."""

    params: float
    experts: float
    ends: float
    layers: int


def _fullest_stage(model: Any, layout: Layout) -> FullestStage:
    """The stage holding the most parameters on one GPU (parcalc.core.memory.stage_parameters; the
    first of equals) among parcalc.core.memory.fullest_candidates, by the layout's tp, pipeline split
    and MoE expert grid (routed experts / ep on each GPU, each split etp ways, folded over tp x dp x cp).
    The parameters do not depend on dp and cp (the caller's layout is valid), nor on ZeRO, the schedule
    or placement: the cache's key is the layout with only what they depend on."""
    ranks = layout.ep * layout.expert_tp  # any dp x cp that holds the expert grid: ep x etp divides tp x ranks
    if layout.schedule.value == "dualpipe" and layout.pp > 1:  # a stage each way: the device holds two
        return _dualpipe_device(model, Layout(layout.tp, layout.pp, ranks, ep=layout.ep, etp=layout.etp))
    if layout.pipeline_layout is not None:  # the layout's own stages (its chunks and their MoE layers)
        return _fullest_stage_of(model, Layout(layout.tp, layout.pp, ranks, ep=layout.ep, etp=layout.etp, schedule=layout.schedule,
                                               chunks=layout.chunks, pipeline_layout=layout.pipeline_layout))  # fmt: skip
    first, last = layout.stage_ends(model.layers)
    plain = Layout(layout.tp, layout.pp, ranks, first_stage_layers=first, last_stage_layers=last, ep=layout.ep, etp=layout.etp)
    if layout.schedule.v_shape and layout.pp > 1:  # a V: the head on rank 0 (parcalc.core.memory.head_stage)
        plain = plain._replace(schedule=layout.schedule)
    return _fullest_stage_of(model, plain)


@lru_cache(maxsize=256)
def _dualpipe_device(model: Any, par: Layout) -> FullestStage:
    """DualPipe's fullest device: device d holds stage d and p - 1 - d (parcalc.core.pipeline_sim.dualpipe_order), both
    stages' parameters, experts, ends and layers (DeepSeek-V3 sec. 3.2.1: 'two copies of the model parameters')."""
    from parcalc.core.memory import _stage_ends, stage_expert_parameters, stage_layers, stage_parameters

    split = stage_layers(model, par)

    def device(d: int) -> FullestStage:
        pair = (d, par.pp - 1 - d)
        return FullestStage(sum(float(stage_parameters(model, par, s).value) for s in pair),
                            sum(float(stage_expert_parameters(model, par, s)) for s in pair),
                            sum(float(sum(_stage_ends(model, par, s))) for s in pair), sum(split[s] for s in pair))  # fmt: skip

    return max((device(d) for d in range(par.pp // 2)), key=lambda f: f.params)


@lru_cache(maxsize=4096)  # pure; the search asks for the same stage for every configuration of a layout
def _fullest_stage_of(model: Any, par: Layout) -> FullestStage:
    from parcalc.core.memory import (
        _stage_ends,
        fullest_candidates,
        stage_expert_parameters,
        stage_layers,
        stage_parameters,
    )

    split = stage_layers(model, par)
    best: FullestStage | None = None
    for s in (range(par.pp) if par.pipeline_layout is not None else fullest_candidates(model, split)):  # a layout: every stage
        params = float(stage_parameters(model, par, s).value)
        if best is None or params > best.params:
            best = FullestStage(params, float(stage_expert_parameters(model, par, s)), float(sum(_stage_ends(model, par, s))), split[s])
    assert best is not None
    return best


def dp_pieces(model: Any, layout: Layout, training: Any, cluster: Any) -> DataParallelPieces:
    """The data-parallel collectives of the fullest stage's GPU over its dp x cp ranks (the layout's
    split, as in stage_pieces; gradients sync over the dp-cp group, Megatron-LM). The layout's shard
    group S < dp x cp with ZeRO (hybrid sharding): ZeRO's
    reduce-scatters and gathers over the S ranks of a shard group (S consecutive data-parallel ranks,
    tp apart), then each reduce's 1/S shard all-reduced over the dp / S replicas (tp x S apart).
    DDP's all-reduce stays over all dp ranks; buckets are sized for the whole dp group.

    MoE layers (ep / etp): the routed experts' gradients are reduced over the expert-data-parallel
    group of edp = tp x dp / (ep x etp) ranks, etp x ep apart (Megatron-Core: expert parameters live
    in their own buffers, reduced over the expert-DP group; parallel_state.py
    get_expert_data_parallel_group, distributed_data_parallel.py expert_parallel_buffers), in
    their own buckets; the dense parameters as above. Hybrid sharding applies to the dense ones."""
    return dp_pieces_of(_fullest_stage(model, layout), layout, training, cluster, shard_group=layout.shard_group if layout.zero else None,
                        float8=float8_gathered(model, layout.tp, training))  # fmt: skip


def float8_gathered(model: Any, tp: int, training: Any) -> tuple[float, float]:
    """(elements, weights) of one layer's Float8 linears on a GPU that ZeRO-3 gathers in FP8 under --fp8-all-gather
    (parcalc.core.comm.float8_all_gather.float8_layer_elements); (0, 0) without it."""
    if not training.float8_all_gather:
        return 0.0, 0.0
    from parcalc.core.comm.float8_all_gather import float8_layer_elements

    return float8_layer_elements(model, tp)


def dp_pieces_of(stage: FullestStage, layout: Layout, training: Any, cluster: Any, *, shard_group: int | None = None,
                 float8: tuple[float, float] = (0.0, 0.0)) -> DataParallelPieces:  # fmt: skip
    """dp_pieces for a given fullest stage (what it depends on of the model and the split: the
    search asks once per distinct stage, not once per split) and shard group (None: all dp x cp
    ranks). The layout's pp: the framework's profile as it runs pp stages (Framework.at: DeepSpeed's
    pipeline engine reduces fp32 copies of bf16 gradients, which it accumulates every micro-batch:
    `accumulate`). `float8`: one layer's Float8 weights on the GPU, elements and count (float8_gathered): ZeRO-3 gathers them
    at 1 byte an element inside the layer's one call (FSDP2 packs a unit's dtypes into one byte buffer), and all-reduces
    their fp32 amaxes once a step (parcalc.core.comm.float8_all_gather)."""
    import math

    from parcalc.core.choices import Collective
    from parcalc.core.expert_parallel import expert_dp
    from parcalc.core.timing.compute import optimizer_time
    from parcalc.core.timing.network import collective_time, placement

    layers = stage.layers
    tp, dp, ep, etp_, pp = layout.tp, layout.dp * layout.cp, layout.ep, layout.expert_tp, layout.pp
    edp = expert_dp(layout) if stage.experts else 1
    dense = stage.params - stage.experts
    fabric, framework, g = cluster.fabric, cluster.framework.at(pp), cluster.gpus_per_node
    accumulate = optimizer_time(stage.params, framework.accumulation_bytes(training.precision), cluster.spec, "memory")
    if dp == 1 and edp == 1:
        return DataParallelPieces(0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, layers, accumulate=accumulate)
    wire = framework.wire_bytes(training.precision)
    weight = 2.0 if training.precision.activation_bytes == 2.0 else 4.0

    def time(op: Collective, size: float, where: Any) -> float:
        return collective_time(op, size, where, fabric).time if size and where is not None and where.size > 1 else 0.0

    size = dp if shard_group is None else shard_group
    group = placement(dp, tp, g)
    shards = placement(size, tp, g) if size < dp else group  # ZeRO's group
    replicas = placement(dp // size, tp * size, g) if size < dp else None
    buckets = max(1.0, float(math.ceil(dense / framework.bucket_params(dp, wire)))) if dp > 1 else 0.0
    bucket = dense / buckets if buckets else 0.0
    experts = placement(edp, etp_ * ep, g) if edp > 1 else None
    expert_buckets = max(1.0, float(math.ceil(stage.experts / framework.bucket_params(edp, wire)))) if experts else 0.0
    expert_bucket = stage.experts / expert_buckets if expert_buckets else 0.0

    def per_bucket(op: Collective, element_bytes: float, where: Any = shards, share: float = 1.0) -> float:
        dense_part = buckets * time(op, bucket * element_bytes * share, where) if dp > 1 else 0.0
        if where is group or where is shards:  # the experts' own buckets over expert-DP (hybrid sharding: dense only)
            return dense_part + expert_buckets * time(op, expert_bucket * element_bytes, experts)
        return dense_part

    layer = (dense - stage.ends) / layers if layers else 0.0  # one layer's dense parameters (a dense layer, or an MoE layer's
    expert_layer = stage.experts / layers if layers else 0.0  # attention and shared parts) and routed experts, on the mean
    float8_elements, float8_weights = float8
    layer_bytes = layer * weight - float8_elements * (weight - 1.0)  # the Float8 linears' weights at 1 byte, the rest at `weight`
    all_reduce = per_bucket(Collective.ALL_REDUCE, wire, group)
    # DeepSpeed's BF16_Optimizer (the engine that accumulates in fp32) shards only its states: it all-reduces its fp32
    # gradients (_bf16_reduce_grads = buffered_allreduce_fallback) where a ZeRO-1 engine reduce-scatters them
    fp32_copies = bool(framework.accumulation_bytes(training.precision))
    return DataParallelPieces(
        grad_all_reduce=all_reduce,
        grad_reduce_scatter=all_reduce if fp32_copies and size == dp else per_bucket(Collective.REDUCE_SCATTER, wire),
        buckets=max(buckets + expert_buckets, 1.0),
        param_gather=per_bucket(Collective.ALL_GATHER, weight),
        layer_gather=time(Collective.ALL_GATHER, layer_bytes, shards) + time(Collective.ALL_GATHER, expert_layer * weight, experts),
        layer_reduce=time(Collective.REDUCE_SCATTER, layer * wire, shards) + time(Collective.REDUCE_SCATTER, expert_layer * wire, experts),
        root_gather=time(Collective.ALL_GATHER, stage.ends * weight, shards),
        layers=layers,
        grad_replica_all_reduce=per_bucket(Collective.ALL_REDUCE, wire, replicas, 1 / size) if replicas else 0.0,
        layer_replica_reduce=time(Collective.ALL_REDUCE, layer * wire / size, replicas) if replicas else 0.0,
        accumulate=accumulate,
        # one fp32 amax per Float8 weight of the stage, all-reduced over the shard group (the DTensor weights' Partial
        # reduced on the mesh FSDP shards over; under TP a second one over the TP ranks is not counted)
        float8_amax=time(Collective.ALL_REDUCE, float8_weights * layers * 4.0, shards),
    )


def optimizer_traffic(model: Any, layout: Layout, training: Any, framework: Any = None,
                      fullest: FullestStage | None = None) -> tuple[FullestStage, float]:  # fmt: skip
    """(the fullest stage's GPU before ZeRO sharding: parameters, routed experts among them; HBM
    bytes one parameter's update moves). framework: whether its optimizer writes a 16-bit weight copy
    (Framework.optimizer_writes_weight_copy; None: it does, as Megatron-LM's). fullest: _fullest_stage's, where the
    caller keeps it (the search: parcalc.core.fit_search._Shapes.fullest_stage)."""
    from parcalc.core.choices import Precision
    from parcalc.core.model_states import state_bytes
    from parcalc.core.timing.compute import optimizer_bytes

    stage = _fullest_stage(model, layout) if fullest is None else fullest
    per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=model)
    master = training.precision is not Precision.FP32 and training.precision is not Precision.BF16
    writes_copy = framework is None or framework.optimizer_writes_weight_copy
    # without a 16-bit copy the optimizer updates the fp32 parameters themselves, whose .grad is fp32 (autocast's
    # fp32 weights; FSDP2's sharded gradients, cast to the shards' dtype after the reduce-scatter)
    gradient = per.gradient if writes_copy or not master else 4.0
    return stage, optimizer_bytes(per.states, gradient, per.weight, master, state_bytes=per.per_state, writes_copy=writes_copy)


def optimizer_step_time(model: Any, layout: Layout, training: Any, cluster: Any, *, zero: Any = None, shard_group: Any = None,
                        fullest: FullestStage | None = None) -> Any:  # fmt: skip
    """The optimizer's update of the local parameters (sharded over the dp x cp ranks from ZeRO-1 on, or
    over the shard group S with hybrid sharding; routed experts over expert-DP: a number, or an array of
    one per configuration). zero / shard_group: the layout's, or arrays of one per configuration (the search)."""
    from parcalc.core.timing.compute import optimizer_time

    zero, shard_group = _sharding(layout, zero, shard_group)
    if training.offload_optimizer:  # the step runs on the host (parcalc.core.timing.offload)
        return 0.0 * np.asarray(zero)
    stage, traffic = optimizer_traffic(model, layout, training, cluster.framework, fullest)
    whole = optimizer_time(stage.params, traffic, cluster.spec)
    shards = layout.dp * layout.cp if shard_group is None else shard_group
    if not stage.experts:
        return np.where(np.asarray(zero) >= 1, whole / shards, whole)  # ZeRO-1 and up shard the states (dp = 1: the same)
    dense = optimizer_time(stage.params - stage.experts, traffic, cluster.spec)
    experts = optimizer_time(stage.experts, traffic, cluster.spec)
    from parcalc.core.expert_parallel import expert_dp

    return np.where(np.asarray(zero) >= 1, dense / shards + experts / expert_dp(layout), whole)


def _sharding(layout: Layout, zero: Any, shard_group: Any) -> tuple[Any, Any]:
    """The ZeRO stage and shard group in force: the given arrays (the search's, one per configuration),
    or the layout's (its shard group only with ZeRO: hybrid sharding shards ZeRO's states)."""
    if zero is None:
        return layout.zero, (layout.shard_group if layout.zero else None) if shard_group is None else shard_group
    return zero, shard_group


def offload_step_time(model: Any, layout: Layout, training: Any, cluster: Any, *, activation_layer: Any, stage_layers: int, m: Any,
                      stage: StagePieces, zero: Any = None, shard_group: Any = None) -> Any:  # fmt: skip
    """t_offload (parcalc.core.timing.offload) for the fullest stage's GPU: floats or arrays alike.
    activation_layer: one layer's saved activations of one micro-batch; stage_layers: the first stage's layers;
    zero / shard_group: as optimizer_step_time."""
    from parcalc.core.model_states import state_bytes
    from parcalc.core.timing.compute import optimizer_bytes
    from parcalc.core.timing.offload import host_link_of, offload_times

    zero, shard_group = _sharding(layout, zero, shard_group)
    if not (training.offload_optimizer or training.offload_activations):
        return 0.0 * np.asarray(m, dtype=float)
    link = host_link_of(training)
    params = _fullest_stage(model, layout._replace(ep=1, etp=None)).params  # the offload counts every parameter as dense
    per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=model)
    shards = layout.dp * layout.cp if shard_group is None else shard_group  # hybrid sharding: the optimizer shard is 1/S
    shard = np.where(np.asarray(zero) >= 1, params / shards, params) if training.offload_optimizer else 0.0 * np.asarray(zero)
    acts = activation_layer * stage_layers * m if training.offload_activations else 0.0 * np.asarray(m, dtype=float)
    times = offload_times(grad_bytes=per.weight * shard, weight_bytes=per.weight * shard, shard_params=shard,
                          cpu_bytes_per_param=optimizer_bytes(per.states, 4.0, per.weight, True, state_bytes=per.per_state),
                          activation_bytes=acts, link=link, gpus_per_node=cluster.gpus_per_node, backward_window=stage.last_backward,
                          forward_total=m * stage.forward, backward_total=m * (stage.backward + stage.recompute))  # fmt: skip
    return times.exposed


def stage_kinds(model: Any, layout: Layout, micro_batch: int, recompute: Any, training: Any, cluster: Any, stage: StagePieces, *,
                experts: Any = None, recompute_layers: int | None = None) -> Any:  # fmt: skip
    """The kernel time of one micro-batch on the slowest stage (the one `stage` describes) by kind
    (parcalc.core.timing.kinds): its layers' forward, backward and recomputed kernels and its ends'
    (embedding on the first stage, final norm, LM head and loss on the last). Their total is
    stage.forward + stage.backward + stage.recompute (before with_accumulation)."""
    from parcalc.core.choices import Recompute
    from parcalc.core.timing.compute import FIRST_STAGE_KEYS, end_passes, layer_passes, mtp_kernels
    from parcalc.core.timing.kinds import KindTimes, kind_times
    from parcalc.core.timing.moe import ExpertShard

    shard = _layer_shard(model, layout, micro_batch, training, cluster)
    spec = cluster.spec
    pp, chunks = layout.pp, layout.chunks
    modules = getattr(training, "recompute_modules", None) if recompute is Recompute.SELECTIVE else None
    dense = layer_passes(model, shard, spec)
    moe = layer_passes(model, shard, spec, experts if experts is not None else ExpertShard(etp=layout.tp)) if model.moe is not None else dense
    ends = end_passes(model, shard, spec)
    first_end = kind_times(k for k in ends.kernels if k.key.startswith(FIRST_STAGE_KEYS))
    last_end = kind_times(k for k in ends.kernels if not k.key.startswith(FIRST_STAGE_KEYS))
    if model.mtp_layers:  # the MTP modules on the last stage (compute.mtp_passes): own kernels, a block, the ends again
        forward_own, backward_own = mtp_kernels(model, shard, spec)
        block = moe if model.mtp_layer_is_moe else dense
        last_end = last_end + (kind_times((*forward_own, *backward_own)) + block.kinds(Recompute.NONE, model, None, 1.0)
                               + kind_times(ends.kernels)).scaled(model.mtp_layers)  # fmt: skip
    split, moe_counts = paced_stages(model, layout)
    candidates = [(split[0], moe_counts[0], first_end + (last_end if pp == 1 else KindTimes()))]
    if pp > 2:
        candidates.append((split[1], moe_counts[1], KindTimes()))
    if pp > 1:
        candidates.append((split[-1], moe_counts[-1], last_end))

    def kinds_of(layers: int, moe_layers: int, end: KindTimes) -> KindTimes:
        share = float(_again(layers, recompute_layers, chunks)) / layers if layers else 1.0
        return (dense.kinds(recompute, model, modules, share).scaled(layers - moe_layers)
                + moe.kinds(recompute, model, modules, share).scaled(moe_layers) + end)  # fmt: skip

    target = float(stage.forward + stage.backward + stage.recompute)
    options = [kinds_of(*c) for c in candidates if c[0] == stage.layers and c[1] == stage.moe_layers] or [kinds_of(*c) for c in candidates]
    return min(options, key=lambda k: abs(k.total - target))


def _layer_shard(model: Any, layout: Layout, micro_batch: int, training: Any, cluster: Any) -> Any:
    """The LayerShard layer_pieces times (the same arguments): one rank's share of a layer by the layout's tp, SP and cp."""
    from parcalc.core.timing.compute import LayerShard
    from parcalc.core.timing.framework import kernel_set

    dropout = model.dropout if training.dropout is None else training.dropout  # None: the model's own (Llama: none)
    fp8 = quantise_recipe(training.precision, training.fp8_recipe)  # fp8's recipe, nvfp4 under fp4; this rank's tokens: s / cp (context parallelism)
    kset = kernel_set(training, cluster.framework)
    cp = layout.cp
    return LayerShard(micro_batch, training.seq_len // cp, layout.tp, layout.sequence_parallel, training.flash_attention, dropout, training.causal,
                      training.precision.activation_bytes, cp, fp8, training.compiled, kset in ("eager", "hf"), kset == "hf",
                      training.expert_activation)  # fmt: skip


def stage_launches(model: Any, config: Any, training: Any, cluster: Any) -> tuple[int, int]:
    """Kernels one micro-batch launches on a one-stage model (pp = 1): (forward, backward with recomputed forward), one launch
    per kernel of parcalc's lists (parcalc.core.timing.compute); the host's work in parcalc.core.timing.host."""
    forward, backward = stage_launches_by_kind(model, config, training, cluster)
    return sum(forward.values()), sum(backward.values())


def stage_launches_by_kind(model: Any, config: Any, training: Any, cluster: Any) -> tuple[dict[str, int], dict[str, int]]:
    """stage_launches by kind of kernel ('gemm', 'attention', 'memory': parcalc.core.timing.kinds), forward and backward (with
    the recomputed forward): compiled code issues each kind another way (parcalc.core.timing.host.CompiledHostCosts)."""
    from collections import Counter

    from parcalc.core.choices import Recompute
    from parcalc.core.timing.compute import end_passes, layer_passes
    from parcalc.core.timing.moe import ExpertShard

    shard = _layer_shard(model, config.layout, config.micro_batch, training, cluster)
    spec = cluster.spec
    modules = getattr(training, "recompute_modules", None) if config.recompute is Recompute.SELECTIVE else None
    dense = layer_passes(model, shard, spec)
    moe = layer_passes(model, shard, spec, config.experts() if config.experts() is not None else ExpertShard(etp=config.layout.tp)) \
        if model.moe is not None else dense
    moe_layers = model.moe_layers_in(0, model.layers) if model.moe is not None else 0
    ends = end_passes(model, shard, spec)
    forward: Counter[str] = Counter({"gemm": 0, "attention": 0, "memory": 0})
    backward: Counter[str] = Counter({"gemm": 0, "attention": 0, "memory": 0})
    for passes, count in ((dense, model.layers - moe_layers), (moe, moe_layers)):
        weights = passes.recompute_weights(config.recompute, model, modules)
        for kernel in passes.forward:
            forward[kernel.kind] += count
        for kernel in passes.backward:
            backward[kernel.kind] += count
        for kernel, w in zip(passes.forward, weights, strict=True):
            backward[kernel.kind] += count if w > 0 else 0
    for kernel in ends.kernels:
        is_backward = kernel.key.endswith(".bwd") or ".dgrad" in kernel.key or ".wgrad" in kernel.key
        (backward if is_backward else forward)[kernel.kind] += 1
    return dict(forward), dict(backward)
