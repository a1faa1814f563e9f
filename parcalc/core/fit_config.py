"""What fit takes: the cluster (GPUs, links, framework), the training run (batch, sequence, precision) and one
configuration (a Layout plus micro-batch, recomputation and MoE settings), with their checks; parcalc.core.fit estimates
its step and memory, and re-exports these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypedDict

from parcalc.core.activations import check_count
from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.hardware import Gpu, Link
from parcalc.core.layout import Layout
from parcalc.core.model import TransformerModel
from parcalc.core.timing.compute import ComputeSpec, compute_spec
from parcalc.core.timing.fp8_quantise import quantise_recipe
from parcalc.core.timing.framework import MEGATRON, Framework
from parcalc.core.timing.network import Fabric, node_fabric
from parcalc.core.training_setup import DEFAULT_RESERVE_BYTES
from parcalc.errors import InputError

# --efficiency multiplies every kernel's rate; 1 means the GPU preset's measured shares as they are.
DEFAULT_EFFICIENCY = 1.0
EFFICIENCY_SOURCE = "--efficiency: a factor on every kernel's rate (1: the GPU preset's measured kernel shares)"
# Rail-optimised servers have one card per GPU (DGX A100/H100) or two (some 16 x 100/200 Gb/s RoCE
# clouds, issue #18); beyond a few per GPU a count is a typo, not a server.
MAX_NICS_PER_GPU = 4


@dataclass(frozen=True)
class Cluster:
    """N GPUs of one kind, g per node; the link inside a node, one network card's link and the
    cards per node; the kernel rates of the GPU and the framework that runs the training."""

    gpus: int
    gpus_per_node: int
    peak: float  # FLOP/s per GPU in the dtype the GEMMs run in
    capacity: float  # bytes per GPU
    intra: Link
    inter: Link
    gpu_name: str = "GPU"
    peak_source: str = ""
    capacity_source: str = ""
    efficiency: float = 1.0  # --efficiency: scales every kernel's rate (1: as measured)
    dp_overlap: bool | None = None  # None: the framework's
    allow_cross_node_tp: bool = False
    nics_per_node: int | None = None  # None: one per GPU (rail-optimised)
    gpu: Gpu | None = field(default=None, compare=False)  # kernels, HBM bandwidth, SMs, architecture
    dtype: str = "bf16"
    framework: Framework = MEGATRON
    tp_comm_overlap: bool | None = None  # None: the framework's
    attention_peak: float | None = None  # dense 16-bit peak for FlashAttention (None: peak)
    ideal_network: bool = False  # --ideal-network: every collective and send takes 0 s (timing.network.Fabric.ideal)
    # Hz: the SM clock GEMMs measured by shape run at (parcalc.core.timing.step_clock); None: `estimate` solves the step's
    # own where the GPU preset gives its power model, else the preset's training clock
    sm_clock: float | None = None
    # how the FP8 GEMMs' inputs are scaled (Training.fp8_recipe; "" outside FP8): MXFP8's block-scaled GEMMs run at their
    # own share where the GPU preset measures one (KernelRates.matmul_mxfp8); set from the training by `for_training`
    fp8_recipe: str = ""

    def __post_init__(self) -> None:
        if self.nics_per_node is not None:  # checked here: the table, the search and one estimate all use it
            check_count("--nics-per-node", self.nics_per_node)
            if self.nics_per_node > MAX_NICS_PER_GPU * self.gpus_per_node:
                raise InputError(f"--nics-per-node: {self.nics_per_node:.4g} cards for {self.gpus_per_node} GPUs per node; "
                                 f"at most {MAX_NICS_PER_GPU} per GPU")  # fmt: skip

    @cached_property
    def spec(self) -> ComputeSpec:
        return compute_spec(self.gpu, self.dtype, self.peak, self.attention_peak, self.efficiency, self.sm_clock, self.fp8_recipe)

    def for_training(self, training: Training) -> Cluster:
        """This cluster with the training's FP8 recipe, 'nvfp4' under fp4 (its GEMM share: `spec`); itself where it already
        has it."""
        recipe = quantise_recipe(training.precision, training.fp8_recipe)
        return self if recipe == self.fp8_recipe else replace(self, fp8_recipe=recipe)

    @cached_property
    def fabric(self) -> Fabric:
        return node_fabric(self.gpus_per_node, self.intra, self.inter, self.nics_per_node, self.gpu, self.ideal_network)

    @property
    def overlap_grad(self) -> bool:
        return self.overlap_grad_at(1)

    @property
    def overlap_param(self) -> bool:
        return self.overlap_param_at(1)

    def overlap_grad_at(self, pp: int) -> bool:
        """Whether the gradient reduction overlaps the backward on pp stages (the framework's engine for pp; --dp-overlap wins)."""
        return self.framework.at(pp).overlap_grad_reduce if self.dp_overlap is None else self.dp_overlap

    def overlap_param_at(self, pp: int) -> bool:
        return self.framework.at(pp).overlap_param_gather if self.dp_overlap is None else self.dp_overlap

    @property
    def overlap_tp(self) -> bool:
        return self.framework.tp_comm_overlap if self.tp_comm_overlap is None else self.tp_comm_overlap


@dataclass(frozen=True)
class Training:
    """The iteration: global batch in sequences, sequence length, and what sets bytes per value."""

    global_batch: int
    seq_len: int
    precision: Precision = Precision.MIXED_BF16
    optimizer: Optimizer = Optimizer.ADAMW
    flash_attention: bool = False
    dropout: bool | None = None  # None: the model's (TransformerModel.dropout; Llama trains without)
    fp32_grads: bool = False
    reserve: float = DEFAULT_RESERVE_BYTES
    causal: bool = True  # decoder training: FlashAttention skips the masked half of the scores
    offload_optimizer: bool = False  # ZeRO-Offload (parcalc.core.offload; time: parcalc.core.timing.offload)
    offload_activations: bool = False
    host_link: Link | None = None  # the GPU's PCIe link to the host (None: parcalc.core.timing.offload.default_host_link)
    fp8_recipe: str = "delayed"  # how FP8 GEMM inputs are scaled (parcalc.core.timing.compute.FP8_RECIPES); with --precision fp8
    compiled: bool = False  # --compile: torch.compile's fused memory-bound kernels (parcalc.core.timing.compute.COMPILE_GROUPS)
    compiled_loss: bool = False  # --compile-loss: torchtitan's compiled loss in the step walk (parcalc.core.memory_compiled_loss)
    # --fp8-all-gather: torchao's FP8 all-gather of the Float8 linears' weights under FSDP (parcalc.core.comm.float8_all_gather): the
    # step walk's unsharded weights in FP8, the ZeRO-3 gathers' bytes, the amax all-reduce after the optimizer step
    float8_all_gather: bool = False
    # --recompute-modules: what selective recomputation checkpoints (Megatron-LM's recompute_modules, parcalc.core.recompute);
    # None: ['core_attn']. A run-wide pin: the search's "selective" is these modules too
    recompute_modules: tuple[str, ...] | None = None
    kernels: str | None = None  # --kernels fused|eager (parcalc.core.timing.framework.KERNEL_SETS); None: the framework profile's
    # --expert-activation: the routed experts' activation with the routing probabilities, one fused kernel or eager ATen ops
    # (parcalc.core.timing.compute.EXPERT_ACTIVATIONS)
    expert_activation: str = "fused"


class StageEnds(TypedDict):
    """The layers of the first and the last stage, keyword arguments of the timing pieces (None: an even split)."""

    first: int | None
    last: int | None


# The fields of Layout a Config's flat constructor (Config.of) and Config.replaced route to its layout
LAYOUT_FIELDS = frozenset(Layout._fields)


@dataclass(frozen=True)
class Config:
    """One candidate run: its parallel layout (parcalc.core.layout.Layout) and how each replica runs a
    step on it: the micro-batch size, recomputation, and how the MoE layers exchange tokens."""

    layout: Layout
    micro_batch: int
    recompute: Recompute = Recompute.NONE
    recompute_layers: int | None = None  # with full: layers of each stage chunk recomputed (Megatron-LM block; None: all)
    # How the MoE layers exchange tokens (parcalc.core.timing.moe): the busiest rank's share over the
    # balanced one, the dispatcher, node-limited routing, what hides the exchanges, and which experts a token gets.
    moe_imbalance: float = 1.0
    moe_dispatcher: str = "alltoall"
    max_nodes_per_token: int | None = None
    ep_overlap: str = "none"
    moe_routing: str = "uniform"

    @classmethod
    def of(cls, tp: int, pp: int, dp: int, micro_batch: int, recompute: Recompute = Recompute.NONE, zero: int = 0,
           sequence_parallel: bool = False, schedule: Schedule = Schedule.ONE_F_ONE_B, chunks: int = 1,
           first_stage_layers: int | None = None, last_stage_layers: int | None = None, embedding_in_split: bool = False,
           loss_in_split: bool = False, **settings: Any) -> Config:
        """A Config from flat settings: the Layout's fields (tp, pp, dp, zero, schedule, ..., and cp, ep, etp, cp_comm,
        shard_group, gpus_per_node by name) and the Config's own (micro_batch, recompute, recompute_layers, moe_*)."""
        layout = Layout(tp=tp, pp=pp, dp=dp, zero=zero, sequence_parallel=sequence_parallel, schedule=schedule, chunks=chunks,
                        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                        embedding_in_split=embedding_in_split, loss_in_split=loss_in_split,
                        **{k: v for k, v in settings.items() if k in LAYOUT_FIELDS})  # fmt: skip
        return cls(layout, micro_batch, recompute, **{k: v for k, v in settings.items() if k not in LAYOUT_FIELDS})

    def replaced(self, **changes: Any) -> Config:
        """This Config with some settings changed, a Layout's field or a Config's own."""
        moved = {k: v for k, v in changes.items() if k in LAYOUT_FIELDS}
        own = {k: v for k, v in changes.items() if k not in LAYOUT_FIELDS}
        return replace(self, layout=self.layout._replace(**moved), **own) if moved else replace(self, **own)

    def experts(self) -> Any:
        """The MoE settings as the timing takes them (parcalc.core.timing.moe.ExpertShard)."""
        from parcalc.core.timing.moe import ExpertShard

        # DualPipe(V) overlaps each pair's exchanges with the other's compute whatever --ep-overlap says (its schedule does:
        # DeepSeek-V3 sec. 3.2.1; dualpipev.py overlapped_forward_backward), as Megatron's 1F1B overlap pairs them
        overlap = "1f1b" if self.layout.schedule.pairs_forward_backward and self.ep_overlap == "none" else self.ep_overlap
        return ExpertShard(self.layout.ep, self.layout.expert_tp, self.moe_imbalance, self.moe_dispatcher,
                           self.max_nodes_per_token, overlap, self.moe_routing)  # fmt: skip

    def micro_batches(self, training: Training) -> int:
        """Micro-batches per replica per iteration: B / (d b)."""
        return training.global_batch // (self.layout.dp * self.micro_batch)

    def label(self) -> str:
        lay = self.layout
        parts = [lay.degrees_label(), f"b = {self.micro_batch}"]
        if lay.ep > 1 or lay.etp is not None:
            parts.append(f"EP {lay.ep}" + (f" x ETP {lay.etp}" if lay.etp is not None else "")
                         + (f" ({self.moe_dispatcher}" + (f", at most {self.max_nodes_per_token} node{'s' if self.max_nodes_per_token != 1 else ''}"
                                                          " per token" if self.max_nodes_per_token else "")
                            + (f", {self.ep_overlap} overlap" if self.ep_overlap != "none" else "")
                            + (f", {self.moe_routing} routing" if self.moe_routing != "uniform" else "") + ")"
                            if (self.moe_dispatcher, self.max_nodes_per_token, self.ep_overlap, self.moe_routing)
                            != ("alltoall", None, "none", "uniform") else ""))
        if lay.zero:
            parts.append(f"ZeRO-{lay.zero}")
        if lay.shard_group is not None and lay.shard_group < lay.dp * lay.cp:
            parts.append(f"shard group {lay.shard_group}")
        if lay.sequence_parallel:
            parts.append("SP")
        parts.append(f"recompute {self.recompute.value}" + (f" ({self.recompute_layers} layers per stage chunk)"
                                                            if self.recompute_layers is not None else ""))
        if lay.pp > 1:
            parts.append(lay.schedule.label + (f" v = {lay.chunks}" if lay.chunks > 1 else ""))
        if lay.first_stage_layers is not None:
            parts.append(f"first stage {lay.first_stage_layers} layers")
        if lay.last_stage_layers is not None:
            parts.append(f"last stage {lay.last_stage_layers} layers")
        if lay.pipeline_layout is not None and lay.split_by is not None:  # the framework's own split (parcalc.core.pipeline_torchtitan)
            from parcalc.core.pipeline_layout import unrolled
            from parcalc.core.stages import split_text

            parts.append(f"{lay.split_by}'s split {split_text(lay.stage_layers(unrolled(lay.pipeline_layout).count('t')))} layers")
        elif lay.pipeline_layout is not None:
            parts.append(f"pipeline layout {lay.pipeline_layout}")
        slots = [what for what, on in (("embedding", lay.embedding_in_split), ("loss", lay.loss_in_split)) if on]
        if slots:
            parts.append(" and ".join(slots) + " in the split")
        return ", ".join(parts)

    def stage_layers(self, model: TransformerModel) -> tuple[int, ...]:
        """Transformer layers of each pipeline stage (parcalc.core.stages: Megatron-LM's rule)."""
        return self.layout.stage_layers(model.layers)

    def stage_ends(self, model: TransformerModel) -> StageEnds:
        """The layers of the first and last stage as the timing pieces take them (parcalc.core.stages.stage_ends)."""
        first, last = self.layout.stage_ends(model.layers)
        return {"first": first, "last": last}
