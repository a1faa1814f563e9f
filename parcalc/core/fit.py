"""What fits on N GPUs and how fast it runs: one training configuration, evaluated scalar.

A configuration is a TP x PP x DP layout with a micro-batch size, activation recomputation, a
ZeRO stage, sequence parallelism and a pipeline schedule. Its memory is parcalc.core.memory's
breakdown of the fullest GPU; its step time is a performance model assembled from the other
cores, each term a derivation:

    t_step = t_compute + t_tp + t_bubble + t_pp + t_dp

- t_compute = F_hw / (N x peak x e): the hardware FLOPs of the iteration (parcalc.core.flops,
  recomputation included) spread evenly over the N GPUs at an efficiency e of the peak;
- t_tp: Megatron's tensor-parallel collectives of the L/p layers of a stage, for each of the m
  micro-batches: 4 of b s h elements per layer (2 forward, 2 backward; 6 with full
  recomputation, which replays the forward), each a ring all-reduce over t ranks, or with
  sequence parallelism an all-gather plus a reduce-scatter, which cost the same (Korthikanti et
  al. 2022 sec. 4.2.2); on the critical path, as in Megatron-LM;
- t_bubble = beta x (t_compute + t_tp), beta = (p - 1)/m for 1F1B and (p - 1)/(v m) interleaved
  (Narayanan et al. 2021 sec. 2.2, parcalc.core.pipeline.bubble_relative_to_ideal);
- t_pp: each stage sends one activation forward and receives one gradient backward per
  micro-batch and chunk, b s h elements each, point to point (Narayanan et al. 2021 sec. 2.2);
- t_dp: the gradient synchronisation of the data-parallel group, hidden under the backward of
  the last micro-batch (2/3 of its compute) except what does not fit under it, plus what cannot
  overlap: ZeRO-1/2's all-gather of updated weights, and ZeRO-3's per-micro-batch gathers beyond
  that micro-batch's compute.

Every collective is timed with parcalc.core.collectives' ring algorithms under the alpha-beta
model on the link of its group: inside a node, or between nodes when the group spans nodes
(Megatron-LM's rank order: TP fastest, then DP, then PP, as in parcalc.core.comm).

This module is the reference; parcalc.core.fit_search evaluates whole spaces of configurations
with numpy and must agree with it (tests/test_fit_search.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from parcalc.core.activations import check_count
from parcalc.core.choices import Collective, Optimizer, Precision, Recompute, Schedule
from parcalc.core.collectives import Algorithm, collective_cost
from parcalc.core.hardware import Link
from parcalc.core.memory import (
    DEFAULT_RESERVE_BYTES,
    MemoryBreakdown,
    StateBytes,
    Parallelism,
    TrainingSetup,
    memory_breakdown,
    stage_parameters,
    state_bytes,
)
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

# The share of the peak the layer's kernels sustain, matmuls and the memory-bound ops between them
# together. 0.7 sits between what Megatron-LM sustains per GPU on its largest runs (Narayanan et
# al. 2021 Table 1: 163 of 312 TFLOP/s, 52 %, with recomputation, bubbles and communication
# included) and cuBLAS's large bf16 GEMMs on an A100 (about 80 % of peak); --efficiency sets it.
DEFAULT_EFFICIENCY = 0.7
EFFICIENCY_SOURCE = (
    "assumed, --efficiency: between Megatron-LM's 52 % of peak end to end (Narayanan et al. 2021 Table 1) "
    "and ~80 % for large GEMMs alone"
)
DDP_BUCKET_BYTES = 25 * 2**20  # torch.nn.parallel.DistributedDataParallel bucket_cap_mb = 25
BACKWARD_SHARE = 2 / 3  # backward = 2 x forward FLOPs (Narayanan et al. 2021 sec. 5.1): 2/3 of a micro-batch
NARAYANAN = "Narayanan et al. 2021 (Megatron-LM, SC'21)"
KORTHIKANTI = "Korthikanti et al. 2022 (Reducing Activation Recomputation)"


@dataclass(frozen=True)
class Cluster:
    """N GPUs of one kind, g per node; the link inside a node and the one between nodes."""

    gpus: int
    gpus_per_node: int
    peak: float  # FLOP/s per GPU in the training dtype
    capacity: float  # bytes per GPU
    intra: Link
    inter: Link
    gpu_name: str = "GPU"
    peak_source: str = ""
    capacity_source: str = ""
    efficiency: float = DEFAULT_EFFICIENCY
    dp_overlap: bool = True
    allow_cross_node_tp: bool = False


@dataclass(frozen=True)
class Training:
    """The iteration: global batch in sequences, sequence length, and what sets bytes per value."""

    global_batch: int
    seq_len: int
    precision: Precision = Precision.MIXED_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    flash_attention: bool = False
    dropout: bool = True
    fp32_grads: bool = False
    reserve: float = DEFAULT_RESERVE_BYTES


@dataclass(frozen=True)
class Config:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    recompute: Recompute = Recompute.NONE
    zero: int = 0
    sequence_parallel: bool = False
    schedule: Schedule = Schedule.ONE_F_ONE_B
    chunks: int = 1

    def micro_batches(self, training: Training) -> int:
        """Micro-batches per replica per iteration: B / (d b)."""
        return training.global_batch // (self.dp * self.micro_batch)

    def label(self) -> str:
        parts = [f"TP {self.tp} x PP {self.pp} x DP {self.dp}", f"b = {self.micro_batch}"]
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        if self.sequence_parallel:
            parts.append("SP")
        parts.append(f"recompute {self.recompute.value}")
        if self.pp > 1:
            parts.append(self.schedule.label + (f" v = {self.chunks}" if self.chunks > 1 else ""))
        return ", ".join(parts)


def invalid_reason(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> str | None:
    """Why a configuration cannot run (divisibility, placement), or None when it can."""
    t, p, d, b = config.tp, config.pp, config.dp, config.micro_batch
    if t * p * d != cluster.gpus:
        return f"tp x pp x dp = {t} x {p} x {d} is not the {cluster.gpus} GPUs"
    for what, value in (("attention heads", model.heads), ("key/value heads", model.kv_heads), ("MLP width", model.ffn_hidden)):
        if value % t:
            return f"tp = {t} does not divide the {what} ({value})"
    if t > cluster.gpus_per_node and not cluster.allow_cross_node_tp:
        return f"tp = {t} spans nodes of {cluster.gpus_per_node} GPUs (allow with --allow-cross-node-tp)"
    if model.layers % (p * config.chunks):
        return f"pp x chunks = {p} x {config.chunks} does not divide the {model.layers} layers"
    if training.global_batch % (d * b):
        return f"dp x micro-batch = {d} x {b} does not divide the global batch of {training.global_batch}"
    m = config.micro_batches(training)
    if config.schedule is Schedule.INTERLEAVED and (p == 1 or m % p):
        return f"the interleaved schedule needs p > 1 and m a multiple of p (p = {p}, m = {m})"
    if config.chunks > 1 and config.schedule is not Schedule.INTERLEAVED:
        return "only the interleaved schedule has model chunks"
    if config.zero and d == 1:
        return "ZeRO shards over the data-parallel ranks; dp = 1 has none"
    if config.sequence_parallel and t == 1:
        return "sequence parallelism needs tp > 1"
    if config.zero not in (0, 1, 2, 3):
        return f"ZeRO stage {config.zero} does not exist"
    return None


def check_config(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> None:
    reason = invalid_reason(model, config, training, cluster)
    if reason is not None:
        raise InputError(f"configuration {config.label()}: {reason}")


def memory_of(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> MemoryBreakdown:
    """parcalc.core.memory's breakdown for this configuration on the cluster's GPU."""
    par = Parallelism(config.tp, config.pp, config.dp, config.sequence_parallel, config.zero, config.schedule,
                      config.micro_batches(training), config.chunks)  # fmt: skip
    setup = TrainingSetup(config.micro_batch, training.seq_len, training.precision, training.optimizer, config.recompute,
                          training.flash_attention, training.dropout, training.fp32_grads, training.reserve,
                          cluster.capacity, cluster.capacity_source)  # fmt: skip
    return memory_breakdown(model, par, setup)


# ---------------------------------------------------------------------------------------------
# Placement and collective times


def group_spans_nodes(size: int, stride: int, gpus_per_node: int) -> bool:
    """Whether a group of `size` ranks `stride` apart (the first starting a node) leaves it."""
    return size > 1 and stride * (size - 1) >= gpus_per_node


def tp_link(config: Config, cluster: Cluster) -> Link:
    return cluster.inter if group_spans_nodes(config.tp, 1, cluster.gpus_per_node) else cluster.intra


def dp_link(config: Config, cluster: Cluster) -> Link:
    return cluster.inter if group_spans_nodes(config.dp, config.tp, cluster.gpus_per_node) else cluster.intra


def pp_link(config: Config, cluster: Cluster) -> Link:
    return cluster.inter if group_spans_nodes(config.pp, config.tp * config.dp, cluster.gpus_per_node) else cluster.intra


def collective_time(op: Collective, size: float, workers: int, link: Link) -> float:
    """Seconds for one call: ring (point to point: direct) under alpha-beta on `link`."""
    if workers < 2 and op is not Collective.POINT_TO_POINT:
        return 0.0
    algorithm = Algorithm.DIRECT if op is Collective.POINT_TO_POINT else Algorithm.RING
    cost = collective_cost(op, algorithm, size, max(workers, 2))
    return cost.time(link.bandwidth_per_direction.value, link.latency.value)


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
    step: Derivation
    tokens_per_second: Derivation
    mfu: Derivation
    hfu: Derivation

    @property
    def total_memory(self) -> float:
        return self.memory.worst.total.value

    def derivations(self) -> tuple[Derivation, ...]:
        return (self.memory.worst.total, self.model_flops, self.hardware_flops, self.compute, self.tp_comm, self.bubble,
                self.pp_comm, self.dp_comm, self.step, self.tokens_per_second, self.mfu, self.hfu)  # fmt: skip


def _derivation(key: str, label: str, symbol: str, latex_symbol: str, formula: str, inputs: list[Term], value: float,
                unit: str, source: str, assumptions: tuple[str, ...] = ()) -> Derivation:  # fmt: skip
    """A derivation whose LaTeX formula follows from the text one (× → \\times, max/min as operators)."""
    latex = formula.replace("×", r"\times").replace("max(", r"\max(").replace("ceil(", r"\mathrm{ceil}(")
    return Derivation(key, label, symbol, latex_symbol, formula, latex, tuple(inputs), value, unit, source, assumptions)


def _t(key: str, symbol: str, value: float, unit: str, description: str, source: str = "", latex: str | None = None) -> Term:
    return Term(key, symbol, latex or symbol, value, unit, description, source)


def estimate(model: TransformerModel, config: Config, training: Training, cluster: Cluster) -> Estimate:
    """Memory and step time of one configuration (see the module docstring for the model)."""
    from parcalc.core.flops import training_flops
    from parcalc.core.pipeline import bubble_relative_to_ideal, pass_times

    check_config(model, config, training, cluster)
    _check_cluster(cluster)
    breakdown = memory_of(model, config, training, cluster)
    t, p, d, b, v = config.tp, config.pp, config.dp, config.micro_batch, config.chunks
    m = config.micro_batches(training)
    s, h, n = training.seq_len, model.hidden, cluster.gpus
    e = training.precision.activation_bytes
    per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads)

    counted = training_flops(model, training.global_batch, s, recompute=config.recompute.value)
    f_model, f_hw = counted.model, counted.hardware
    peak = _t("peak", "F_peak", cluster.peak, "FLOP/s", f"peak of one {cluster.gpu_name}", cluster.peak_source, r"F_{\mathrm{peak}}")
    eff = _t("e", "e", cluster.efficiency, "fraction", "share of the peak the kernels sustain", EFFICIENCY_SOURCE)
    gpus = _t("N", "N", n, "", "GPUs")
    compute = _derivation("t_compute", "Compute time per iteration (hardware FLOPs over every GPU)", "t_compute",
                          r"t_{\mathrm{compute}}", "$F_hw / ($N × $peak × $e)",
                          [f_hw.as_term("F_hw"), gpus, peak, eff], f_hw.value / (n * cluster.peak * cluster.efficiency), "s",
                          f"{NARAYANAN} sec. 5.1 (time = FLOPs / throughput)")  # fmt: skip

    layers_here = model.layers // p
    activation = b * s * h * e
    act = _t("M_a", "M_a", activation, "B", "one micro-batch's b × s × h activation", latex=r"M_{a}")
    if t > 1:
        slots = 6 if config.recompute is Recompute.FULL else 4
        link = tp_link(config, cluster)
        if config.sequence_parallel:
            one = collective_time(Collective.ALL_GATHER, activation, t, link) + collective_time(Collective.REDUCE_SCATTER, activation, t, link)
            what = "an all-gather + a reduce-scatter (sequence parallelism)"
        else:
            one = collective_time(Collective.ALL_REDUCE, activation, t, link)
            what = "a ring all-reduce"
        inputs = [_t("m", "m", m, "", "micro-batches per replica"), _t("L_s", "L_stage", layers_here, "", "layers per stage", latex=r"L_{\mathrm{stage}}"),
                  _t("c", "c", slots, "", "TP collectives per layer per micro-batch (2 forward, 2 backward" + (", 2 recomputed)" if slots == 6 else ")")),
                  _t("T_c", "T_c", one, "s", f"{what} of M_a over t = {t} on {link.name}")]  # fmt: skip
        tp_value = m * layers_here * slots * one
        tp_comm = _derivation("t_tp", "Tensor-parallel communication per iteration", "t_tp", r"t_{\mathrm{tp}}",
                              "$m × $L_s × $c × $T_c", [*inputs, act], tp_value, "s",
                              f"{KORTHIKANTI} sec. 4.2.2; Shoeybi et al. 2019 sec. 3")  # fmt: skip
    else:
        tp_comm = _derivation("t_tp", "Tensor-parallel communication per iteration", "t_tp", r"t_{\mathrm{tp}}", "0", [], 0.0,
                              "s", "no tensor parallelism")  # fmt: skip

    if p > 1:
        beta = bubble_relative_to_ideal(config.schedule, p, m, pass_times(), v)
        bubble = _derivation("t_bubble", "Pipeline bubble per iteration", "t_bubble", r"t_{\mathrm{bubble}}",
                             "$beta × ($t_compute + $t_tp)", [beta.as_term("beta"), compute.as_term("t_compute"), tp_comm.as_term("t_tp")],
                             beta.value * (compute.value + tp_comm.value), "s", beta.source)  # fmt: skip
        link = pp_link(config, cluster)
        p2p = collective_time(Collective.POINT_TO_POINT, activation, 2, link)
        pp_comm = _derivation("t_pp", "Pipeline point-to-point per iteration (activations forward, gradients backward)", "t_pp",
                              r"t_{\mathrm{pp}}", "2 × $m × $v × $T_p2p",
                              [_t("m", "m", m, "", "micro-batches per replica"), _t("v", "v", v, "", "model chunks per device"),
                               _t("T_p2p", "T_p2p", p2p, "s", f"one send of M_a on {link.name}", latex=r"T_{\mathrm{p2p}}"), act],
                              2 * m * v * p2p, "s", f"{NARAYANAN} sec. 2.2 (one send per micro-batch, chunk and direction)")  # fmt: skip
    else:
        bubble = _derivation("t_bubble", "Pipeline bubble per iteration", "t_bubble", r"t_{\mathrm{bubble}}", "0", [], 0.0, "s", "no pipeline")
        pp_comm = _derivation("t_pp", "Pipeline point-to-point per iteration", "t_pp", r"t_{\mathrm{pp}}", "0", [], 0.0, "s", "no pipeline")

    dp_comm = _dp_time(model, config, training, cluster, per, compute.value / m)
    parts = [compute, tp_comm, bubble, pp_comm, dp_comm]
    step_value = sum(x.value for x in parts)
    step = _derivation("t_step", "Time per iteration", "t_step", r"t_{\mathrm{step}}",
                       "$t_compute + $t_tp + $t_bubble + $t_pp + $t_dp", [x.as_term(x.key) for x in parts], step_value, "s",
                       "the sum of the terms above (parcalc.core.fit)")  # fmt: skip
    tokens = _derivation("tokens_per_second", "Training throughput", "tok/s", r"\mathrm{tok/s}", "$B × $s / $t_step",
                         [_t("B", "B", training.global_batch, "", "global batch (sequences)"), _t("s", "s", s, "", "sequence length"),
                          step.as_term("t_step")], training.global_batch * s / step_value, "tokens/s", "throughput = tokens / time")  # fmt: skip
    mfu = _derivation("mfu", "Model FLOPs utilisation", "MFU", r"\mathrm{MFU}", "$F_model / ($t_step × $N × $peak)",
                      [f_model.as_term("F_model"), step.as_term("t_step"), gpus, peak], f_model.value / (step_value * n * cluster.peak),
                      "fraction", f"{KORTHIKANTI} sec. 6.3 (model FLOPs: no recomputation)")  # fmt: skip
    hfu = _derivation("hfu", "Hardware FLOPs utilisation", "HFU", r"\mathrm{HFU}", "$F_hw / ($t_step × $N × $peak)",
                      [f_hw.as_term("F_hw"), step.as_term("t_step"), gpus, peak], f_hw.value / (step_value * n * cluster.peak),
                      "fraction", f"{KORTHIKANTI} sec. 6.3 (hardware FLOPs: recomputation counted)")  # fmt: skip
    fits = breakdown.worst.total.value <= cluster.capacity
    return Estimate(config, breakdown, fits, f_model, f_hw, compute, tp_comm, bubble, pp_comm, dp_comm, step, tokens, mfu, hfu)


def device_parameters(model: TransformerModel, config: Config) -> float:
    """Parameters on one GPU of the stage holding the most (first or last)."""
    par = Parallelism(config.tp, config.pp, 1, schedule=config.schedule, micro_batches=max(config.pp, 1), chunks=config.chunks)
    first = stage_parameters(model, par, 0).value
    last = stage_parameters(model, par, config.pp - 1).value
    return max(first, last)


def _dp_time(model: TransformerModel, config: Config, training: Training, cluster: Cluster, per: StateBytes,
             micro_batch_compute: float) -> Derivation:  # fmt: skip
    """The data-parallel synchronisation left exposed (see the module docstring)."""
    d, z = config.dp, config.zero
    if d == 1:
        return _derivation("t_dp", "Data-parallel communication exposed per iteration", "t_dp", r"t_{\mathrm{dp}}", "0", [], 0.0, "s",
                           "no data parallelism")  # fmt: skip
    m = config.micro_batches(training)
    link = dp_link(config, cluster)
    params = device_parameters(model, config)
    grads = params * per.gradient
    weights = params * per.weight
    buckets = max(1, math.ceil(grads / DDP_BUCKET_BYTES))
    window = BACKWARD_SHARE * micro_batch_compute if cluster.dp_overlap else 0.0
    p_term = _t("P_gpu", "P_gpu", params, "", "parameters on one GPU (fullest stage)", latex=r"P_{\mathrm{GPU}}")
    w_term = _t("W_b", "W_b", window, "s", "backward of the last micro-batch (2/3 of its compute)" if cluster.dp_overlap else "no overlap (--no-dp-overlap)", latex=r"W_{b}")
    n_b = _t("n_b", "n_b", buckets, "", "gradient buckets of 25 MiB (DDP's bucket_cap_mb)")
    if z == 0:
        sync = buckets * collective_time(Collective.ALL_REDUCE, grads / buckets, d, link)
        terms = [_t("T_ar", "T_ar", sync, "s", f"ring all-reduce of the gradients ({grads:.4g} B) over d = {d} on {link.name}", latex=r"T_{\mathrm{ar}}"), w_term]
        formula, value = "max(0, $T_ar - $W_b)", max(0.0, sync - window)
    elif z in (1, 2):
        scatter = buckets * collective_time(Collective.REDUCE_SCATTER, grads / buckets, d, link)
        gather = buckets * collective_time(Collective.ALL_GATHER, weights / buckets, d, link)
        terms = [_t("T_rs", "T_rs", scatter, "s", f"reduce-scatter of the gradients over d = {d} on {link.name}", latex=r"T_{\mathrm{rs}}"),
                 w_term, _t("T_ag", "T_ag", gather, "s", "all-gather of the updated weights after the step", latex=r"T_{\mathrm{ag}}")]  # fmt: skip
        formula, value = "max(0, $T_rs - $W_b) + $T_ag", max(0.0, scatter - window) + gather
    else:
        scatter = buckets * collective_time(Collective.REDUCE_SCATTER, grads / buckets, d, link)
        gathers = 2 * buckets * collective_time(Collective.ALL_GATHER, weights / buckets, d, link)
        overlap = micro_batch_compute if cluster.dp_overlap else 0.0
        terms = [_t("m", "m", m, "", "micro-batches per replica"),
                 _t("T_ag2", "T_ag2", gathers, "s", "forward and backward all-gathers of the weights, per micro-batch", latex=r"T_{\mathrm{ag2}}"),
                 _t("t_mb", "t_mb", overlap, "s", "compute of one micro-batch (prefetch hides gathers under it)", latex=r"t_{\mathrm{mb}}"),
                 _t("T_rs", "T_rs", scatter, "s", f"reduce-scatter of the gradients over d = {d} on {link.name}", latex=r"T_{\mathrm{rs}}"), w_term]  # fmt: skip
        formula = "$m × max(0, $T_ag2 - $t_mb) + max(0, $T_rs - $W_b)"
        value = m * max(0.0, gathers - overlap) + max(0.0, scatter - window)
    return _derivation("t_dp", "Data-parallel communication exposed per iteration", "t_dp", r"t_{\mathrm{dp}}", formula,
                       [p_term, n_b, *terms], value, "s",
                       "Rajbhandari et al. 2020 sec. 7 (ZeRO-DP volumes); PyTorch DDP overlaps bucket all-reduces with backward (Li et al. 2020)")  # fmt: skip


def _check_cluster(cluster: Cluster) -> None:
    check_count("--gpus", cluster.gpus)
    check_count("--gpus-per-node", cluster.gpus_per_node)
    if not (0 < cluster.efficiency <= 1):
        raise InputError(f"--efficiency: a share of the peak between 0 and 1, got {cluster.efficiency!r}")
    if not (cluster.peak > 0 and math.isfinite(cluster.peak)):
        raise InputError(f"--peak: must be a rate greater than zero, got {cluster.peak!r}")
    if not (cluster.capacity > 0 and math.isfinite(cluster.capacity)):
        raise InputError(f"--capacity: must be a size greater than zero, got {cluster.capacity!r}")


def with_layers(model: TransformerModel, layers: int) -> TransformerModel:
    """The same layer shape, `layers` deep."""
    return replace(model, layers=layers, key=f"{model.key}@{layers}", name=f"{model.name}, {layers} layers")
