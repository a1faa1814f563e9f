"""What fits on N GPUs and how fast it runs: one training configuration, evaluated scalar.

A configuration is a TP x PP x DP layout with a micro-batch size, activation recomputation, a
ZeRO stage, sequence parallelism and a pipeline schedule. Its memory is parcalc.core.memory's
breakdown of the fullest GPU; its step time is a performance model assembled from the other
cores (parcalc.core.timing.step): t_step, the sum of the terms of parcalc.core.timing.terms.STEP_TERMS,
each a derivation whose label, symbol, formula and source that module defines once.

Every collective is timed with parcalc.core.collectives' ring algorithms under the alpha-beta
model on the link of its group: inside a node, or between nodes when the group spans nodes
(Megatron-LM's rank order: TP fastest, then DP, then PP, as in parcalc.core.comm).

This module is the reference; parcalc.core.fit_search evaluates whole spaces of configurations
with numpy and must agree with it (tests/test_fit_search.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from parcalc.core.activations import check_count
from parcalc.core.choices import Recompute, Schedule
from parcalc.core.context import check_context_parallel
from parcalc.core.fit_config import (  # noqa: F401 - re-exported: the inputs of fit
    DEFAULT_EFFICIENCY,
    EFFICIENCY_SOURCE,
    LAYOUT_FIELDS,
    MAX_NICS_PER_GPU,
    Cluster,
    Config,
    StageEnds,
    Training,
)
from parcalc.core.fit_term_derivations import (
    cp_derivation,
    dp_derivation,
    dualpipe_note,
    ep_derivation,
    host_derivation,
    kind_derivations,
    offload_derivation,
    term_of,
)
from parcalc.core.memory import MemoryBreakdown, memory_breakdown
from parcalc.core.model import TransformerModel
from parcalc.core.timing.network import placement
from parcalc.core.timing.terms import (
    BUBBLE,
    COMPUTE,
    KORTHIKANTI,
    OPTIMIZER,
    PP,
    STEP,
    TP,
    derivation,
    only_terms,
)
from parcalc.core.training_setup import TrainingSetup
from parcalc.derivation import Derivation
from parcalc.errors import InputError


def invalid_reason(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> str | None:
    """Why a configuration cannot run (divisibility, placement), or None when it can."""
    if model.mamba is not None:
        from parcalc.core.mamba_memory import mamba_layout_reason

        reason = mamba_layout_reason(config.layout, config.recompute)
        if reason is not None:
            return reason
    if model.linear_attention is not None:
        from parcalc.core.linear_attention_memory import linear_layout_reason

        reason = linear_layout_reason(config.layout, config.recompute)
        if reason is not None:
            return reason
    if model.mamba is not None or model.linear_attention is not None:  # Megatron-Core's all-to-all CP of the recurrent mixers
        from parcalc.core.hybrid_context import mixer_cp_reason

        reason = mixer_cp_reason(model, config.layout.tp, config.layout.cp)
        if reason is not None:
            return reason
    t, p, d, b, c = config.layout.tp, config.layout.pp, config.layout.dp, config.micro_batch, config.layout.cp
    stack = cluster.framework.layout_reason(config.layout)  # a data-parallel-only stack (the hf profile)
    if stack is not None:
        return stack
    from parcalc.core.memory_timeline import recompute_reason

    recompute = recompute_reason(cluster.framework.step_memory, config.recompute)
    if recompute is not None:
        return recompute
    if t * p * c * d != cluster.gpus:
        if c > 1:
            return f"tp x pp x cp x dp = {t} x {p} x {c} x {d} is not the {cluster.gpus} GPUs"
        return f"tp x pp x dp = {t} x {p} x {d} is not the {cluster.gpus} GPUs"
    for what, value in (("attention heads", model.heads), ("key/value heads", model.kv_heads), ("MLP width", model.ffn_hidden)):
        if value % t:
            return f"tp = {t} does not divide the {what} ({value})"
    if (t > cluster.gpus_per_node or cluster.gpus_per_node % t) and not cluster.allow_cross_node_tp:
        return (f"tp = {t} spans nodes of {cluster.gpus_per_node} GPUs (tp must divide the GPUs of a node; "
                "allow with --allow-cross-node-tp, costed on the slowest group's network)")
    lay = config.layout
    if lay.first_stage_layers is None and lay.last_stage_layers is None and not (lay.embedding_in_split or lay.loss_in_split or lay.pipeline_layout):
        # DualPipe(V)'s stages: schedule_reason, with the source's rule
        if model.layers % (p * config.layout.chunks) and not ((lay.schedule.v_shape or lay.schedule is Schedule.DUALPIPE) and p > 1):
            return f"pp x chunks = {p} x {config.layout.chunks} does not divide the {model.layers} layers"
    else:
        try:
            config.stage_layers(model)
        except InputError as error:
            return str(error)
    if training.global_batch % (d * b):
        return f"dp x micro-batch = {d} x {b} does not divide the global batch of {training.global_batch}"
    m = config.micro_batches(training)
    if config.layout.schedule is Schedule.INTERLEAVED and (p == 1 or m % p):
        return f"the interleaved schedule needs p > 1 and m a multiple of p (p = {p}, m = {m})"
    if config.layout.chunks > 1 and config.layout.schedule is not Schedule.INTERLEAVED:
        return "only the interleaved schedule has model chunks"
    from parcalc.core.pipeline_step import schedule_reason

    schedule_rule = schedule_reason(model.layers, config.layout, m)
    if schedule_rule is not None:
        return schedule_rule
    if c > 1:
        try:
            check_context_parallel(model, training.seq_len, config.layout, training.causal)
        except InputError as error:
            return str(error).removeprefix("--cp: ").removeprefix("--cp-comm ")
        if config.layout.sequence_parallel and (training.seq_len // c) % t:
            return f"sequence parallelism needs the sequence shard s/cp = {training.seq_len // c} divisible by tp = {t}"
    if config.layout.zero and d * c == 1:
        return "ZeRO shards over the data-parallel ranks; dp = 1 has none"
    if config.layout.sequence_parallel and t == 1:
        return "sequence parallelism needs tp > 1"
    if config.layout.zero not in (0, 1, 2, 3):
        return f"ZeRO stage {config.layout.zero} does not exist"
    # a pipeline engine of its own (DeepSpeed's PipelineEngine) and a stage it does not run
    engine_refuses = p > 1 and cluster.framework.at(p) is not cluster.framework
    if engine_refuses and (reason := cluster.framework.zero_stage_reason(config.layout.zero, p)) is not None:
        return reason
    if config.layout.shard_group is not None:
        from parcalc.core.sharding import check_shard_group

        try:
            check_shard_group(config.layout.shard_group, d * c, config.layout.zero)
        except InputError as error:
            return str(error)
    if model.moe is not None or config.layout.ep != 1 or config.layout.etp is not None:
        from parcalc.core.expert_parallel import expert_layout

        try:
            expert_layout(model, config.layout)
            if model.moe is not None:
                from parcalc.core.timing.moe import check_routing

                experts = config.experts()
                check_routing(model, experts, placement(experts.ep, experts.etp, cluster.gpus_per_node).nodes)
        except InputError as error:
            return str(error)
    return None


def check_config(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> None:
    reason = invalid_reason(model, config, training, cluster)
    if reason is not None:
        raise InputError(f"configuration {config.label()}: {reason}")


def recomputed_layers(model: TransformerModel, config: Config) -> int | None:
    """Layers of the whole model that run their forward again under --recompute-layers (None: as the kind says)."""
    from parcalc.core.recompute import check_recompute_layers, chunk_layers, recomputed_layer_count

    if config.recompute_layers is None:
        return None
    split = config.stage_layers(model)
    check_recompute_layers(config.recompute_layers, config.recompute, chunk_layers(split, config.layout.chunks), model)
    return recomputed_layer_count(config.recompute_layers, split, config.layout.chunks)


def memory_of(model: TransformerModel, config: Config, training: Training, cluster: Cluster, *,
              allocator_replayed: bool = True) -> MemoryBreakdown:  # fmt: skip
    """parcalc.core.memory's breakdown for this configuration on the cluster's GPU; `allocator_replayed` False: a walked
    FSDP2 step's total takes the floor of the allocator's replay (TrainingSetup.allocator_replayed), a screen."""
    setup = training_setup_of(config, training, cluster)
    return memory_breakdown(model, config.layout, setup if allocator_replayed else replace(setup, allocator_replayed=False))


def training_setup_of(config: Config, training: Training, cluster: Cluster) -> TrainingSetup:
    """What parcalc.core.memory needs besides the model and the layout, for this configuration on the cluster's GPU."""
    return TrainingSetup(config.micro_batch, training.seq_len, training.precision, training.optimizer, config.recompute,
                          training.flash_attention, training.dropout, training.fp32_grads, training.reserve,
                          cluster.capacity, cluster.capacity_source, training.offload_optimizer, training.offload_activations,
                          config.recompute_layers, moe_imbalance=config.moe_imbalance,
                          grad_copies=bool(cluster.framework.at(config.layout.pp).accumulation_bytes(training.precision)),
                          recompute_modules=selective_modules(config, training),
                          step_memory=cluster.framework.step_memory, micro_batches=config.micro_batches(training),
                          compiled=training.compiled, compiled_loss=training.compiled_loss,
                          float8_all_gather=training.float8_all_gather)  # fmt: skip


def selective_modules(config: Config, training: Training) -> tuple[str, ...] | None:
    """Training.recompute_modules where this configuration recomputes selectively (the pin applies to the
    search's selective candidates only; none, full and op ignore it)."""
    return training.recompute_modules if config.recompute is Recompute.SELECTIVE else None


# ---------------------------------------------------------------------------------------------
# Placement


def group_spans_nodes(size: int, stride: int, gpus_per_node: int) -> bool:
    """Whether a group of `size` ranks `stride` apart (Megatron-LM's order) leaves a node."""
    return placement(size, stride, gpus_per_node).nodes > 1


# ---------------------------------------------------------------------------------------------
# The estimate


@dataclass(frozen=True)
class Estimate:
    """One configuration: its memory, whether it fits, and its step time with every term."""

    config: Config
    memory: MemoryBreakdown
    fits: bool
    model_flops: Derivation
    hardware_flops: Derivation
    compute: Derivation
    tp_comm: Derivation
    bubble: Derivation
    pp_comm: Derivation
    dp_comm: Derivation
    optimizer: Derivation
    step: Derivation
    tokens_per_second: Derivation
    mfu: Derivation
    hfu: Derivation
    offload: Derivation | None = None  # t_offload (--offload; parcalc.core.timing.offload)
    cp_comm: Derivation | None = None  # context-parallel exchanges exposed per iteration (None without CP)
    ep_comm: Derivation | None = None  # t_ep: MoE dispatch and combine (None: dense model, or ep = etp = 1)
    # t_compute by kind of work (parcalc.core.timing.kinds): t_gemm + t_attention + t_memory_bound = t_compute
    gemm: Derivation | None = None
    attention: Derivation | None = None
    memory_bound: Derivation | None = None
    host: Derivation | None = None  # t_host: the GPU waiting for the host (parcalc.core.timing.host; None: not modelled)
    # seconds of t_memory_bound that scale as 1 / the SM clock (the element paths' share, parcalc.core.timing.elementwise
    # .ElementClock): the step's clock solve scales them with the GEMMs' main loops (parcalc.core.timing.step_clock)
    clocked: float = 0.0

    @property
    def kinds(self) -> tuple[Derivation, ...]:
        """The step by kind of work: GEMMs, attention, memory-bound kernels, host, the exposed collectives, the optimizer."""
        comm = (self.tp_comm, *((self.cp_comm,) if self.cp_comm else ()), *((self.ep_comm,) if self.ep_comm else ()), self.bubble,
                self.pp_comm, self.dp_comm)  # fmt: skip
        parts = tuple(d for d in (self.gemm, self.attention, self.memory_bound, self.host) if d is not None)
        return parts + comm + (self.optimizer, *((self.offload,) if self.offload else ()))

    def step_terms(self) -> tuple[Derivation, ...]:
        """The derivations t_step adds, in its formula's order (its inputs; parcalc.core.timing.terms.STEP_TERMS)."""
        found = {d.key: d for d in self.derivations()}
        return tuple(found[term.key] for term in self.step.inputs)

    @property
    def total_memory(self) -> float:
        return self.memory.worst.total.value

    def derivations(self) -> tuple[Derivation, ...]:
        kinds = tuple(d for d in (self.gemm, self.attention, self.memory_bound, self.host) if d is not None)
        return (self.memory.worst.total, self.model_flops, self.hardware_flops, self.compute, *kinds, self.tp_comm,
                *((self.cp_comm,) if self.cp_comm is not None else ()), *((self.ep_comm,) if self.ep_comm is not None else ()),
                self.bubble, self.pp_comm, self.dp_comm, self.optimizer, *((self.offload,) if self.offload else ()), self.step,
                self.tokens_per_second, self.mfu, self.hfu)  # fmt: skip


def estimate(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> Estimate:
    """Memory and step time of one configuration (parcalc.core.timing.step, term by term). On a GPU whose preset gives
    the clock as a function of the step's power, timed at the clock the step holds (parcalc.core.timing.step_clock):
    once at the highest clock, again at the solved one where the power limit binds. The clock is solved on the step as
    the mechanisms time it, before a profiler trace's factors (`calibrate trace`): those were measured at that clock and
    scale each kind's time there, so a calibrated preset gives its own trace back."""
    from parcalc.core.timing.step_clock import clock_derivation, solve_clock

    cluster = cluster.for_training(training)  # the FP8 recipe's GEMM share (Cluster.fp8_recipe)
    tiled = cluster.spec.tiled
    if cluster.sm_clock is not None or tiled is None or not tiled.power_model:
        return _estimate(model, config, training, cluster)
    gpu = cluster.gpu
    traced = gpu is not None and (gpu.host is not None or (gpu.kernels is not None and gpu.kernels.calibrated is not None))
    if traced:
        assert gpu is not None and gpu.kernels is not None
        gpu = replace(gpu, host=None, kernels=replace(gpu.kernels, calibrated=None))
    at_max = _estimate(model, config, training, replace(cluster, gpu=gpu, sm_clock=tiled.max_clock))
    assert at_max.gemm is not None and at_max.attention is not None
    clock, load = solve_clock(tiled, at_max.gemm.value, at_max.attention.value, at_max.step.value, at_max.clocked)
    reuse = clock == tiled.max_clock and not traced
    est = at_max if reuse else _estimate(model, config, training, replace(cluster, sm_clock=clock))
    assert est.gemm is not None
    f_sm = clock_derivation(tiled, clock, load)
    gemm = replace(est.gemm, inputs=(*est.gemm.inputs, f_sm.as_term("f_SM")),
                   assumptions=(*est.gemm.assumptions, f"GEMMs at the step's SM clock, {clock / 1e6:,.1f} MHz: {f_sm.assumptions[0]} "
                                f"(Tensor Core load u = {load:.3f}; parcalc.core.timing.step_clock)"))  # fmt: skip
    return replace(est, gemm=gemm)


def _estimate(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> Estimate:
    from parcalc.core.flops import training_flops
    from parcalc.core.timing.fp8_quantise import (
        AMAX_REDUCTION_SOURCE,
        GATHERED_NAMES,
        SP_GATHER_SOURCE,
        quantise_recipe,
    )
    from parcalc.core.timing.sm_contention import contention
    from parcalc.core.timing.step import (
        combine,
        dp_exposed,
        dp_hidden,
        dp_pieces,
        offload_step_time,
        optimizer_step_time,
        optimizer_traffic,
        sp_gather_bytes,
        sp_regather,
        stage_kinds,
        stage_pieces,
    )

    check_config(model, config, training, cluster)
    _check_cluster(cluster)
    breakdown = memory_of(model, config, training, cluster)
    t, p, d, b, v, c = config.layout.tp, config.layout.pp, config.layout.dp, config.micro_batch, config.layout.chunks, config.layout.cp
    m = config.micro_batches(training)
    n = cluster.gpus
    counted = training_flops(model, training.global_batch, training.seq_len, recompute=config.recompute.value,
                             flash_attention=training.flash_attention, recomputed_layers=recomputed_layers(model, config),
                             recompute_modules=selective_modules(config, training))  # fmt: skip
    f_model, f_hw = counted.model, counted.hardware
    layout, experts = config.layout, config.experts() if model.moe is not None else None
    stage, f_layer, b_layer = stage_pieces(model, layout, b, config.recompute, training, cluster, experts=experts,
                                           recompute_layers=config.recompute_layers)  # fmt: skip
    dp = dp_pieces(model, layout, training, cluster)  # over the dp-cp group; hybrid sharding with ZeRO-1/2/3
    by_kind = stage_kinds(model, layout, b, config.recompute, training, cluster, stage, experts=experts, recompute_layers=config.recompute_layers)
    stage = with_accumulation(stage, dp.accumulate)
    framework = cluster.framework.at(p)
    every, reshard = framework.reduce_every_micro_batch, framework.reshard_after_forward
    overlap_grad, overlap_param = cluster.overlap_grad_at(p), cluster.overlap_param_at(p)
    t_dp_exposed = float(dp_exposed(config.layout.zero, m, stage, dp, overlap_grad=overlap_grad, overlap_param=overlap_param,
                                    reduce_every=every, reshard=reshard, layer_forward=f_layer, layer_backward=b_layer, contended=False))  # fmt: skip
    # the compute the hidden collectives slow by the SMs NCCL holds (parcalc.core.timing.sm_contention), as dp_exposed adds it
    sm_loss = float(stage.sm_loss) if overlap_grad or overlap_param else 0.0
    dp_hidden_time = float(dp_hidden(config.layout.zero, m, stage, dp, t_dp_exposed, reduce_every=every, reshard=reshard,
                                     layer_forward=f_layer, layer_backward=b_layer)) if sm_loss else 0.0  # fmt: skip
    t_dp = t_dp_exposed + float(contention(dp_hidden_time, sm_loss))
    t_opt = float(optimizer_step_time(model, layout, training, cluster))
    offloading = training.offload_optimizer or training.offload_activations
    t_off = float(offload_step_time(model, layout, training, cluster, activation_layer=breakdown.layer.per_layer.value,
                                    stage_layers=config.stage_layers(model)[0], m=m, stage=stage)) if offloading else 0.0  # fmt: skip
    host = host_derivation(model, config, training, cluster, stage, m, t_opt)
    terms = combine(stage, m, v, p, t_dp, t_opt, tp_overlap=cluster.overlap_tp, t_offload=t_off, t_host=host.value if host else 0.0,
                    schedule=config.layout.schedule, overlap_p2p=framework.overlap_p2p_comm)
    ep_comm = ep_derivation(model, config, training, cluster, stage, m, float(terms.t_ep))

    from parcalc.core.timing.kernels import gemm_assumptions
    from parcalc.units import format_time as _format_time

    spec = cluster.spec
    m_term = term_of("m", "m", m, "", "micro-batches per replica")
    compute = COMPUTE.derivation(
        [m_term, term_of("t_f", "t_f", stage.forward, "s", f"forward kernels of one micro-batch on the slowest stage ({stage.layers} layers)"),
         term_of("t_b", "t_b", stage.backward, "s", "backward kernels of one micro-batch" + (
             f", with {_format_time(dp.accumulate)} of fp32 gradient accumulation" if dp.accumulate else "")),
         term_of("t_r", "t_r", stage.recompute, "s", f"recomputed forward kernels ({config.recompute.value}"
            + (f": {', '.join(mods)}" if (mods := selective_modules(config, training)) else "") + ")")],
        terms.t_compute, assumptions=(
         *gemm_assumptions(spec, cluster.dtype),
         f"memory-bound kernels at {spec.kernels.memory.value:.0%} of HBM bandwidth ({spec.kernels.memory.source})",
         *((f"every kernel rate scaled by --efficiency {cluster.efficiency:g}",) if cluster.efficiency != 1.0 else ()),
         *((_accumulation_assumption(framework, training),) if dp.accumulate else ())),
    )  # fmt: skip
    if t > 1:
        group = placement(t, 1, cluster.gpus_per_node)
        where = "inside a node" if group.nodes == 1 else f"across {group.nodes} nodes"
        what = "all-gather + reduce-scatter (sequence parallelism)" if config.layout.sequence_parallel else "all-reduce"
        if config.recompute is Recompute.FULL and config.recompute_layers is None:
            calls = f"6 x {stage.layers} layers of {what}"
        elif config.recompute is Recompute.FULL:
            calls = f"4 x {stage.layers} layers of {what}, 2 more in each recomputed layer"
        elif config.recompute is Recompute.OP:
            calls = (f"4 x {stage.layers} layers of {what}, and the "
                     + ("2 all-gathers" if config.layout.sequence_parallel else "2 all-reduces") + " replayed by op-level recomputation")
        else:
            calls = f"4 x {stage.layers} layers of {what}"
        quantised = ""  # SP under FP8 / NVFP4 on Transformer Engine: the all-gathers move the quantised tensor (timing.step.sp_gather_bytes)
        if config.layout.sequence_parallel:
            recipe = quantise_recipe(training.precision, training.fp8_recipe)
            gathered, amax = sp_gather_bytes(recipe, framework, training.precision.activation_bytes)
            if gathered != training.precision.activation_bytes or amax:
                quantised = (f"; the all-gathers move the {GATHERED_NAMES[recipe]} tensor, {gathered:g} byte{'' if gathered == 1 else 's'} an element"
                             + (", each after an all-reduce of the shard's fp32 amax over the TP group" if amax else "")
                             + ", the reduce-scatters the activations' dtype")  # fmt: skip
        inputs = [m_term, term_of("C_tp", "C_tp", stage.tp, "s", f"{calls} of b s h over t = {t} ({where}){quantised}, NCCL model")]
        regather = ""  # SP: Megatron-LM gathers each column-parallel input again in backward (timing.step.regather_per_layer)
        if config.layout.sequence_parallel:
            gather, dgrads = sp_regather(model, t, b, training, cluster)
            what_gathered = f"b s h in {gathered:g} byte{'' if gathered == 1 else 's'} an element (the saved {GATHERED_NAMES[recipe]} shard)" if quantised else "b s h"
            inputs += [term_of("L_s", "L_s", stage.layers, "", "layers of the slowest stage"),
                       term_of("T_ag", "T_ag", gather, "s", f"one all-gather of {what_gathered}: a column-parallel linear's input, gathered again "
                          "in backward for its weight gradient (sequence parallelism, Megatron-LM)", latex=r"T_{\mathrm{ag}}")]  # fmt: skip
            names = ("Q/K/V", "MLP gate and up" if model.mlp.gated else "MLP up")
            dgrad_terms = [term_of(f"t_d{i}", f"t_d{i}", d, "s", f"input-gradient GEMM of {name}, which the all-gather runs beside",
                              latex=rf"t_{{d{i}}}") for i, (d, name) in enumerate(zip(dgrads, names, strict=True), 1)]  # fmt: skip
            if cluster.overlap_tp:
                regather = f" + {len(dgrads)} × $L_s × $T_ag"
            else:
                inputs += dgrad_terms
                regather = " + $L_s × (" + " + ".join(f"max(0, $T_ag - ${d.key})" for d in dgrad_terms) + ")"
        if cluster.overlap_tp:
            inputs.append(term_of("H_tp", "H_tp", stage.tp_hidden, "s", "GEMM time the TP collectives overlap with (--tp-comm-overlap)"))
            formula = f"$m × max(0, $C_tp{regather} - $H_tp)"
        else:
            formula = f"$m × ($C_tp{regather})" if regather else "$m × $C_tp"
        source = TP.source
        if quantised:
            source += f"; the quantised all-gathers: {SP_GATHER_SOURCE}" + (f"; the amax all-reduce: {AMAX_REDUCTION_SOURCE}" if amax else "")
        if regather:
            source += ("; the re-gather: Megatron-LM megatron/core/tensor_parallel/layers.py, "
                       "LinearWithGradAccumulationAndAsyncCommunication.backward (all-gather launched with async_op=True "
                       "before grad_input = grad_output.matmul(weight), waited for before the weight gradient)")  # fmt: skip
        tp_comm = TP.derivation(inputs, terms.t_tp, formula=formula, source=source)
    else:
        tp_comm = TP.zero("no tensor parallelism")
    gemm, attention, memory_bound = kind_derivations(by_kind, dp.accumulate, m_term, compute)
    cp_comm = cp_derivation(config, cluster, stage, m_term, terms.t_cp, model, training.compiled) if c > 1 else None
    if p > 1:
        from parcalc.core.pipeline_schedules import embedding_sync_term
        from parcalc.core.timing.step import pipeline_send_description

        stretched = [compute.as_term("t_compute"), tp_comm.as_term("t_tp"), *((cp_comm.as_term("t_cp"),) if cp_comm else ()),
                     *((ep_comm.as_term("t_ep"),) if ep_comm else ())]  # fmt: skip
        if config.layout.schedule.splits_backward:
            from parcalc.core.pipeline_schedules import simulated_bubble_derivation, split_sends_derivation

            bubble = simulated_bubble_derivation(config.layout, m_term, stage, stretched, terms.t_bubble)
            pp_comm = split_sends_derivation(config.layout, m_term, stage, terms.t_pp, pipeline_send_description(config.layout, cluster.framework),
                                             embedding_sync_term(stage))
        else:
            bubble = BUBBLE.derivation([term_of("p", "p", p, "", "pipeline stages"), term_of("v", "v", v, "", "model chunks per GPU"), m_term,
                                        *stretched], terms.t_bubble,
                                       formula=only_terms(BUBBLE.formula, stretched),
                                       assumptions=dualpipe_note(model, config, training, cluster, stage) if model.moe is not None else ())  # fmt: skip
            sends = [m_term, term_of("v", "v", v, "", "model chunks per GPU"),
                     term_of("T_p2p", "T_p2p", stage.p2p, "s", pipeline_send_description(config.layout, cluster.framework),
                             latex=r"T_{\mathrm{p2p}}")]  # fmt: skip
            sync = embedding_sync_term(stage)
            if framework.overlap_p2p_comm and v > 1:  # Megatron-Core's overlap_p2p_comm: the steady state's sends hidden
                from parcalc.core.timing.step import blocking_sends

                sends += [term_of("W", "W", blocking_sends(m, v, p, True), "",
                                  "chunks whose sends block: rank 0's warm-up, min(m v, 2 (p - 1) + (v - 1) p), and as many cool-down"),
                          term_of("T_chunk", "T_chunk", stage.forward / v, "s", "one chunk's forward, which a steady-state send hides behind",
                                  latex=r"T_{\mathrm{chunk}}")]  # fmt: skip
                # a steady-state send that fits in its chunk adds nothing: the formula then says so, shorter
                hidden = stage.p2p <= stage.forward / v
                overlapped = "" if hidden else " + 2 × ($m × $v - $W) × max($T_p2p - $T_chunk, 0)"
                pp_comm = PP.derivation(sends + ([sync] if sync else []), terms.t_pp,
                                        formula="2 × $W × $T_p2p" + overlapped + (" + $T_emb" if sync else ""),
                                        source=f"{framework.name}: {framework.source('overlap_p2p_comm')}",
                                        assumptions=("the other m v - W sends hide behind the chunk computed meanwhile (T_chunk >= T_p2p)",) if hidden else ())  # fmt: skip
            else:
                pp_comm = PP.derivation(sends + ([sync] if sync else []), terms.t_pp,
                                        formula=PP.formula + (" + $T_emb" if sync else ""))  # fmt: skip
    else:
        bubble = BUBBLE.zero("no pipeline")
        pp_comm = PP.zero("no pipeline")
    dp_comm = dp_derivation(config, cluster, stage, dp, f_layer, b_layer, m, terms.t_dp, training, dp_hidden_time, sm_loss)
    from parcalc.core.expert_parallel import expert_dp

    fullest, traffic = optimizer_traffic(model, config.layout, training, cluster.framework)
    sg = config.layout.shard_group if config.layout.zero else None  # hybrid sharding applies to ZeRO-1/2/3
    shards = (d * c if sg is None else sg) if config.layout.zero >= 1 else 1
    formula, expert_terms = OPTIMIZER.formula, []
    if fullest.experts:  # routed experts: their states shard over expert-DP (parcalc.core.timing.step.optimizer_step_time)
        formula = "$w × (($P - $P_x) / $d_z + $P_x / $d_x) × $Q_p / ($BW × $e_mem × $x)"
        expert_terms = [term_of("P_x", "P_x", fullest.experts, "", f"routed-expert parameters among them (experts / ep = {config.layout.ep})", latex=r"P_{x}"),
                        term_of("d_x", "d_x", expert_dp(config.layout) if config.layout.zero >= 1 else 1, "",
                           "ranks the experts' states are sharded over (ZeRO-1 and up: expert-DP, tp x dp x cp / (ep x etp))", latex=r"d_{x}")]  # fmt: skip
    from parcalc.core.timing.compute import multi_tensor_waves

    calibrated = spec.kind_rate("optimizer")  # calibrate trace's factor on the optimizer's rate (1: none)
    if calibrated != 1.0:
        formula = formula.replace("$x)", "$x × $k_opt)").replace("$x × $d_z)", "$x × $k_opt × $d_z)")
    waves = term_of("w", "w", multi_tensor_waves(spec.sms), "", "a multi_tensor_apply launch's time over its bytes at the HBM rate: its 320 "
               "blocks over the SMs, the launch ending with the SMs that hold ceil(320 / SMs) of them (1.2375 on 132 SMs)",
               "parcalc.core.timing.compute.multi_tensor_waves; PyTorch aten/src/ATen/native/cuda/MultiTensorApply.cuh (320 blocks "
               "a launch); measured on one H200: a full fused-AdamW launch 167-171 us for 587 MB against 137 us at 4.28 TB/s")  # fmt: skip
    optimizer = OPTIMIZER.derivation(
        [waves, term_of("P", "P", fullest.params, "", "parameters on one GPU of the fullest stage"), *expert_terms,
         term_of("Q_p", "Q_p", traffic, "B", f"HBM bytes of one parameter's {training.optimizer.value} update (master weight and states read and written, gradient read)",
            latex=r"Q_{p}"),
         term_of("BW", "BW", spec.bandwidth, "B/s", "HBM bandwidth"),
         term_of("e_mem", "e_mem", spec.kernels.memory.value, "fraction", "share of HBM bandwidth memory-bound kernels sustain", spec.kernels.memory.source,
            r"e_{\mathrm{mem}}"),
         term_of("x", "x", cluster.efficiency, "", "--efficiency"),
         *([term_of("k_opt", "k_opt", calibrated, "", "the optimizer's rate factor calibrated from a profiler trace (calibrate trace)",
               latex=r"k_{\mathrm{opt}}")] if calibrated != 1.0 else []),
         term_of("d_z", "d_z", shards, "", "ranks the optimizer states are sharded over (ZeRO-1 and up: d"
            + (", the shard group S)" if sg is not None else ")"), latex=r"d_{z}")],
        t_opt, formula=formula)  # fmt: skip
    if training.offload_optimizer:
        optimizer = OPTIMIZER.zero("--offload optimizer: the step runs on the host (t_offload)")
    offload = offload_derivation(model, config, training, cluster, breakdown, stage, m, t_off) if offloading else None
    parts = [compute, *((host,) if host else ()), tp_comm, *((cp_comm,) if cp_comm else ()), *((ep_comm,) if ep_comm else ()), bubble, pp_comm, dp_comm,
             optimizer, *([offload] if offload else [])]  # fmt: skip
    step_value = float(terms.t_step)
    step = STEP.derivation([x.as_term(x.key) for x in parts], step_value, formula=only_terms(STEP.formula, parts))
    gpus = term_of("N", "N", n, "", "GPUs")
    peak = term_of("peak", "F_peak", cluster.peak, "FLOP/s", f"peak of one {cluster.gpu_name}", cluster.peak_source, r"F_{\mathrm{peak}}")
    tokens = derivation("tokens_per_second", "Training throughput", "tok/s", r"\mathrm{tok/s}", "$B × $s / $t_step",
                         [term_of("B", "B", training.global_batch, "", "global batch (sequences)"), term_of("s", "s", training.seq_len, "", "sequence length"),
                          step.as_term("t_step")], training.global_batch * training.seq_len / step_value, "tokens/s", "throughput = tokens / time")  # fmt: skip
    mfu = derivation("mfu", "Model FLOPs utilisation", "MFU", r"\mathrm{MFU}", "$F_model / ($t_step × $N × $peak)",
                      [f_model.as_term("F_model"), step.as_term("t_step"), gpus, peak], f_model.value / (step_value * n * cluster.peak),
                      "fraction", f"{KORTHIKANTI} sec. 6.3 (model FLOPs: no recomputation)")  # fmt: skip
    hfu = derivation("hfu", "Hardware FLOPs utilisation", "HFU", r"\mathrm{HFU}", "$F_hw / ($t_step × $N × $peak)",
                      [f_hw.as_term("F_hw"), step.as_term("t_step"), gpus, peak], f_hw.value / (step_value * n * cluster.peak),
                      "fraction", f"{KORTHIKANTI} sec. 6.3 (hardware FLOPs: recomputation counted)")  # fmt: skip
    fits = breakdown.worst.total.value <= cluster.capacity
    return Estimate(config, breakdown, fits, f_model, f_hw, compute, tp_comm, bubble, pp_comm, dp_comm, optimizer, step, tokens, mfu, hfu,
                    offload, cp_comm, ep_comm, gemm, attention, memory_bound, host, m * by_kind.clocked)  # fmt: skip


def _check_cluster(cluster: Cluster) -> None:
    check_count("--gpus", cluster.gpus)
    check_count("--gpus-per-node", cluster.gpus_per_node)
    if not (0 < cluster.efficiency <= 2):
        raise InputError(f"--efficiency: a factor on every kernel's rate, above 0 and at most 2, got {cluster.efficiency!r}")
    if not (cluster.peak > 0 and math.isfinite(cluster.peak)):
        raise InputError(f"--peak: must be a rate greater than zero, got {cluster.peak!r}")
    if not (cluster.capacity > 0 and math.isfinite(cluster.capacity)):
        raise InputError(f"--capacity: must be a size greater than zero, got {cluster.capacity!r}")


def _accumulation_assumption(framework: Any, training: Training) -> str:
    return (f"{framework.name}'s pipeline engine in bf16 adds every micro-batch's bf16 gradients into fp32 copies after its backward: "
            f"{framework.accumulation_bytes(training.precision):g} bytes of HBM traffic per parameter of the fullest stage (which stands "
            f"for the slowest) ({framework.source('bf16_grad_accumulation_bytes')})")


def with_accumulation(stage: Any, accumulate: Any) -> Any:
    """The stage with the framework's per-micro-batch gradient accumulation (DataParallelPieces.accumulate,
    on the compute stream after each backward) added to its backward: floats or arrays alike."""
    import numpy as np

    if not np.any(accumulate):
        return stage
    return replace(stage, backward=stage.backward + accumulate, last_backward=stage.last_backward + accumulate)


def with_layers(model: TransformerModel, layers: int) -> TransformerModel:
    """The same layer shape, `layers` deep (a Mamba-2 hybrid: its pattern cut there, or repeated to reach it)."""
    mamba = model.mamba
    if mamba is not None:
        mamba = replace(mamba, pattern=(mamba.pattern * -(-layers // len(mamba.pattern)))[:layers])
    return replace(model, layers=layers, key=f"{model.key}@{layers}", name=f"{model.name}, {layers} layers", mamba=mamba)
