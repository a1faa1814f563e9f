"""What a training framework does with the same layout: bucket sizes, gradient dtype, which
communication overlaps what, and what "ZeRO-n" means there.

Profiles are data (presets/frameworks/*.yaml, each value with a source in the framework's code or
documentation); this is their typed form. Every field can be overridden alone from the command
line (`fit --no-dp-overlap`, `--tp-comm-overlap`, `--fp32-grads`).
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from functools import lru_cache

from parcalc.core.layout import Layout
from parcalc.core.timing.host import CompiledHostCosts, HostCosts
from parcalc.frozen import frozen

# The kernel sets parcalc times between GEMMs (parcalc.core.timing.compute: FUSED_SOURCE, EAGER_SOURCE)
KERNEL_SETS = ("fused", "eager", "hf")
# How a profile counts memory (Framework.step_memory)
STEP_MEMORY_MODELS = ("textbook", "hf-eager", "fsdp2-eager", "torchtitan-eager")
PIPELINE_SPLITS = ("megatron", "torchtitan")  # Framework.pipeline_split
# How the stack runs context-parallel attention (Framework.context_parallel): Transformer Engine's (parcalc.core.timing.context,
# Megatron-LM and NeMo) or PyTorch's experimental ring attention (parcalc.core.timing.torch_ring_attention, torchtitan)
CONTEXT_PARALLEL = ("transformer-engine", "torch-ring")


@frozen
class Framework:
    """A training framework's profile: how it buckets, reduces, shards and overlaps (presets/frameworks/*.yaml)."""

    key: str
    name: str
    # Gradient buckets: max(bucket_min_params, bucket_params_per_dp_rank x dp) parameters, or
    # bucket_bytes of gradients when that is how the framework sizes them (PyTorch DDP).
    bucket_min_params: float = 0.0
    bucket_params_per_dp_rank: float = 0.0
    bucket_bytes: float = 0.0
    fp32_grads: bool = False  # gradients kept (and accumulated) in fp32: 4 bytes, not 2
    reduce_bytes: float = 2.0  # bytes per gradient element on the wire
    overlap_grad_reduce: bool = True  # gradient reduction overlapped with the backward pass
    overlap_param_gather: bool = True  # ZeRO-1/2's parameter all-gather overlapped with the next forward
    reduce_every_micro_batch: bool = False  # ZeRO-2/3 and FSDP reduce each micro-batch's gradients
    shard_unit: str = "layer"  # ZeRO-3/FSDP gathers one unit at a time: a transformer layer
    reshard_after_forward: bool = True  # ZeRO-3/FSDP frees a unit after forward and gathers it again in backward
    tp_comm_overlap: bool = False  # TP collectives overlapped with the GEMMs (TE userbuffers)
    # The stack runs tensor parallelism with sequence parallelism always (torchtitan's apply_tp shards the norms' sequence):
    # tp > 1 implies --sequence-parallel, and a layout without it is not one the stack runs
    sequence_parallel_with_tp: bool = False
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)  # what the framework offers (the search's default)
    # the stage one configuration runs when --zero is not given (with more than one data-parallel rank): the stack's own
    # default (torchtitan's data_parallel_shard_degree = -1 and a bare fully_shard shard everything: 3)
    default_zero: int = 0
    sources: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # field -> source
    # With pipeline parallelism (pp > 1) some frameworks run another engine: DeepSpeed's
    # PipelineEngine reduces gradients once after the pipeline flush, not during the backward, and
    # offers ZeRO-0/1 only. These (field, value) pairs replace the fields above when pp > 1.
    pipeline: tuple[tuple[str, object], ...] = ()
    # HBM bytes per local parameter and micro-batch that the engine spends accumulating bf16
    # gradients into fp32 copies, which it then reduces (DeepSpeed's BF16_Optimizer; 0: gradients
    # accumulate in place, in the dtype reduce_bytes says).
    bf16_grad_accumulation_bytes: float = 0.0
    # The memory-bound kernels between GEMMs: "fused" (Megatron-LM / Transformer Engine's hand-fused ones) or
    # "eager" (one kernel per ATen op of the model code: PyTorch-native stacks without torch.compile);
    # parcalc.core.timing.compute.KERNEL_SETS. Training.kernels (--kernels) overrides it.
    kernels: str = "fused"
    # How memory is counted (parcalc.core.memory): "textbook" (the sum of model states and Korthikanti's
    # activations) or "hf-eager" (the peak of a walk over one step of transformers' eager code under autocast:
    # parcalc.core.memory_timeline, with its logits upcast to fp32, autocast's weight cache, per-decoder-layer
    # checkpointing). data_parallel_only: the stack has no tensor, pipeline, context or expert parallelism.
    step_memory: str = "textbook"
    data_parallel_only: bool = False
    # Whether the optimizer step writes a 16-bit copy of each weight it updates (Megatron-LM's and DeepSpeed's bf16
    # parameter buffers beside the fp32 master); False: it updates fp32 parameters whose 16-bit copies are made where
    # they are used (autocast per op: HF's Trainer; FSDP2's all-gather under MixedPrecisionPolicy), reading their fp32 .grad
    optimizer_writes_weight_copy: bool = True
    # Host time per kernel issued (parcalc.core.timing.host): forward, backward, optimizer step, and where it was measured;
    # None: not modelled (the GPU is taken as never waiting for the host)
    host: HostCosts | None = None
    # Host time per kernel of the model's code under --compile (Inductor's generated wrapper: parcalc.core.timing.host
    # CompiledHostCosts), a mechanism of its own; None: compiled code's host not modelled (t_host then as eager's)
    compiled_host: CompiledHostCosts | None = None
    # Whether the training loop synchronises the host with the GPU after every micro-batch's backward (Hugging Face's Trainer
    # tests the loss for NaN in Python there): the optimizer step's host work is then exposed (parcalc.core.timing.host)
    sync_after_backward: bool = False
    # Seconds the host takes per expert GEMM where the routed experts run as a host loop of GEMMs after the MoE
    # dispatcher has synchronised the tokens per expert to the host (Megatron-LM + Transformer Engine's GroupedLinear;
    # parcalc.core.timing.moe.expert_host_exposed); 0: the experts run as one launch, or not modelled
    expert_gemm_host: float = 0.0
    # Whether the stack's DeepEP dispatch sends the tokens in FP8 under FP8 training (DeepEP's 'FP8 dispatching and BF16
    # combining', as DeepSeek-V3 trained); False: it dispatches the BF16 hidden states and quantises after (Megatron-Core;
    # parcalc.core.timing.moe)
    fp8_dispatch: bool = True
    # Whether, under sequence parallelism and an FP8 / NVFP4 recipe, the TP all-gathers carry the quantised tensor (Transformer
    # Engine quantises a column-parallel linear's input shard, and a row-parallel linear's output gradient, before gathering
    # them: parcalc.core.timing.fp8_quantise.SP_GATHER_SOURCE); False: the stack gathers the 16-bit activations and casts after
    # (torchtitan since its config-based sharding, plain DTensor tensor parallelism)
    quantised_sp_gathers: bool = False
    # Whether the pipeline splits a stage's output over the TP ranks without sequence parallelism, each sending 1/tp of it and
    # all-gathering it over NVLink after the receive (Megatron-LM's scatter/gather of 2021-22, DeepSpeed's pipe_partitioned);
    # False: every TP rank sends the whole b s h tensor across the stage boundary (Megatron-LM before February 2021 and
    # Megatron-Core since 2023). Under sequence parallelism the output is already 1/tp a rank (parcalc.core.timing.step).
    pipeline_scatter_gather: bool = True
    # Whether the interleaved schedule overlaps its steady-state pipeline sends with the next chunk's compute (Megatron-Core's
    # overlap_p2p_comm: the 1F1B phase's isend / irecv waited for only before the tensor is used), the warm-up and cool-down
    # sends staying blocking (overlap_p2p_comm_warmup_flush off); False: every send on the critical path (parcalc.core.timing.step)
    overlap_p2p_comm: bool = False
    # How the stack splits the layers over the pipeline stages when no split is given: "megatron" (p x v divides the layers,
    # every stage equal: parcalc.core.stages) or "torchtitan" (as evenly as whole layers allow, the embedding and the output
    # counted as a layer each: parcalc.core.pipeline_torchtitan)
    pipeline_split: str = "megatron"
    # Whose context-parallel attention the stack runs (CONTEXT_PARALLEL): "transformer-engine" (TE's cp_comm_type variants,
    # parcalc.core.timing.context) or "torch-ring" (torch.distributed.tensor.experimental context_parallel, its rotate method
    # from --cp-comm: all-gather -> 'allgather', p2p -> 'alltoall'; parcalc.core.timing.torch_ring_attention)
    context_parallel: str = "transformer-engine"
    # The context-parallel exchange when --cp-comm is not given (a parcalc.core.context.CpComm value): the stack's own default,
    # p2p for Megatron-LM (--cp-comm-type ["p2p"]), all-gather for torchtitan (its rotate method 'allgather')
    cp_comm_default: str = "p2p"
    # What parcalc models that the stack does not run (docs/framework-flags.md): (flag, why) pairs, each why naming the
    # stack's code, e.g. ("--compile", "Megatron-LM does not torch.compile the model; ..."); refused under a --framework
    # that was given (run_reason), left out of what a search tries. Data, so that a copy of a profile refuses the same.
    not_run: tuple[tuple[str, str], ...] = ()
    # The profile's `notes:` lines, shown by `presets show` (prose: not compared, not hashed)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, f"{self.name} profile")

    def at(self, pp: int) -> Framework:
        """The profile as it runs a layout of pp pipeline stages (the `pipeline` settings when pp > 1)."""
        if pp <= 1 or not self.pipeline:
            return self
        return _under_pipeline(self)

    def layout_reason(self, layout: Layout) -> str | None:
        """Why this stack cannot run a layout (None: it can): a data-parallel-only stack with other degrees
        or a ZeRO stage it does not offer."""
        if not self.data_parallel_only:
            return None
        zero = layout.zero
        other = [f"{name} = {value}" for name, value in (("tp", layout.tp), ("pp", layout.pp), ("cp", layout.cp), ("ep", layout.ep))
                 if value > 1]  # fmt: skip
        if other:
            return self.data_parallel_only_reason(", ".join(other))
        return self.zero_stage_reason(zero, layout.pp)

    def zero_stage_reason(self, zero: int, pp: int, flag: str | None = None) -> str | None:
        """Why this stack cannot run ZeRO stage `zero` on pp pipeline stages (None: it can), one phrasing wherever it is
        refused (--zero, a data-parallel-only stack's layout, fit's configurations): the stages it offers (zero_stages; with
        pp > 1 its pipeline engine's, DeepSpeed's PipelineEngine ZeRO-0/1) and their source; `flag` names what asked."""
        engine = self.at(pp)
        if zero in engine.zero_stages:
            return None
        offered = "/".join(str(z) for z in engine.zero_stages)
        where = f"'s pipeline engine (pp = {pp})" if engine is not self else ""
        source = engine.source("zero_stages").split(":")[0].split(" (")[0]
        return (f"{flag or f'--zero {zero}'}: {self.name}{where} offers ZeRO-{offered} only ({source}); "
                f"see `parcalc presets show {self.key}`")

    def run_reason(self, flag: str) -> str | None:
        """Why this stack does not run a setting parcalc models (None: it does): `flag` as typed ('--compile',
        '--recompute op'), one line naming the stack's code (not_run, from the profile's YAML)."""
        why = dict(self.not_run).get(flag)
        return None if why is None else f"{flag} --framework {self.key}: {why}"

    def data_parallel_only_reason(self, what: str) -> str:
        """Why a data-parallel-only stack cannot run `what` (a degree such as 'tp = 2', or a scaling strategy)."""
        return f"--framework {self.key}: {self.name} runs data parallelism only, not {what}"

    def accumulation_bytes(self, precision: object) -> float:
        """bf16_grad_accumulation_bytes when the run is in bf16 mixed precision, else 0."""
        from parcalc.core.choices import Precision

        return self.bf16_grad_accumulation_bytes if precision is Precision.MIXED_BF16 else 0.0

    def wire_bytes(self, precision: object) -> float:
        """Bytes per gradient element on the wire: fp32 when bf16 gradients are accumulated into fp32 copies
        (those are what is reduced: DeepSpeed's BF16_Optimizer.get_grads_for_reduction), else reduce_bytes."""
        return 4.0 if self.accumulation_bytes(precision) else self.reduce_bytes

    def bucket_params(self, dp: int, gradient_bytes: float) -> float:
        """Parameters per gradient bucket for a data-parallel group of dp ranks (inf: one bucket)."""
        by_rank = max(self.bucket_min_params, self.bucket_params_per_dp_rank * dp)
        by_bytes = self.bucket_bytes / gradient_bytes if self.bucket_bytes else 0.0
        size = max(by_rank, by_bytes)
        return size if size > 0 else math.inf


@lru_cache(maxsize=64)
def _under_pipeline(framework: Framework) -> Framework:
    settings = dict(framework.pipeline)
    cited = dict(framework.sources)
    for name in settings:  # the pipeline engine's own sources stand for the fields it replaces
        if f"pipeline.{name}" in cited:
            cited[name] = cited[f"pipeline.{name}"]
    return replace(framework, pipeline=(), sources=tuple(cited.items()), **settings)  # type: ignore[arg-type]


# The profile used when none is named and no preset is found (e.g. in library use): Megatron-LM's
# defaults, as presets/frameworks/megatron.yaml states them with sources.
MEGATRON = Framework(
    key="megatron",
    name="Megatron-LM",
    bucket_min_params=40e6,
    bucket_params_per_dp_rank=1e6,
    fp32_grads=True,
    reduce_bytes=4.0,
    overlap_grad_reduce=True,
    overlap_param_gather=True,
    zero_stages=(0, 1),
    sources=(
        ("bucket", ("Megatron-LM megatron/core/distributed/distributed_data_parallel.py: bucket_size = max(40000000, 1000000 * dp) "
                    "'to ensure collectives do not become latency-bound'")),
        ("fp32_grads", ("Megatron-LM megatron/training/arguments.py: with --bf16, accumulate_allreduce_grads_in_fp32 = True "
                        "(fp32 main gradients)")),
        ("pipeline_scatter_gather", ("Megatron-LM as Narayanan et al. 2021 (sec. 4.1, 'scatter/gather communication "
                                     "optimization') and Korthikanti et al. 2022 ran it: megatron/p2p_communication.py "
                                     "--no-scatter-gather-tensors-in-pipeline, on by default from 72e4230bb5 (2021-02-16) until "
                                     "Megatron-Core's p2p_communication.py (3c92fa93b5, 2023-03-23); presets/frameworks/"
                                     "megatron.yaml is today's, without it")),
    ),
    pipeline_scatter_gather=True,
    quantised_sp_gathers=True,  # FP8 runs on Transformer Engine (fp8_quantise.SP_GATHER_SOURCE)
)  # fmt: skip


def kernel_set(training: object, framework: Framework) -> str:
    """The kernel set a run times: --kernels (Training.kernels) when given, else the framework's."""
    chosen = getattr(training, "kernels", None)
    return chosen if chosen else framework.kernels
