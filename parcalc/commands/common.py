"""Options shared by every calculation command, and the one way they print results."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from parcalc.output import OutputFormat
from parcalc.results.parse import (  # noqa: F401 - re-exported: the commands import them from here
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_LAYERS,
    MAX_SEARCH_BATCH,
    PROGRESS_AFTER_SECONDS,
    ProgressBar,
    _checked_preset_dirs,
    board_power,
    check_at_most,
    check_finite,
    check_layers,
    cp_flags,
    expert_flags,
    fp8_recipe_flag,
    imbalance_flag,
    kernels_flag,
    moe_timing_flags,
    power_assumptions,
    power_limited,
    power_terms,
    preset_dir_problem,
    preset_dirs,
    recompute_layers_flag,
    recompute_modules_flag,
    run_plan,
    run_verdict,
    shard_group_flag,
    sixteen_bit_default,
    stage_flags,
    stated_no_ops,
)

if TYPE_CHECKING:
    from parcalc.derivation import Result

FormatOption = Annotated[
    Optional[OutputFormat],  # noqa: UP045 - typer needs Optional at runtime on 3.11
    typer.Option("--format", "-f", metavar="FORMAT", help="table (default), json, csv, markdown or latex (a fragment); default from -o's extension.", show_default=False),
]
OutputOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--output", "-o", metavar="FILE", help="Write to FILE (.txt .json .csv .md .tex .pdf) instead of stdout, all or nothing.", show_default=False),
]
PictureOutputOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--output", "-o", metavar="FILE",
                 help="Write to FILE instead of stdout, all or nothing: .svg draws the picture; .txt .json .csv .md .tex .pdf "
                      "the result (.pdf and .tex with the picture, .md with it as NAME-KIND.svg beside).", show_default=False),
]  # fmt: skip
PresetsOption = Annotated[
    Optional[list[Path]],  # noqa: UP045
    typer.Option("--presets", metavar="DIR", help="Extra preset directory (gpus/, links/, models/ inside); repeatable. Also PARCALC_PRESETS.", show_default=False),
]


def start(output: Path | None, fmt: OutputFormat | None, *, picture: bool = False) -> None:
    """Validate the output before any work, so a bad path fails fast and writes nothing.

    picture: the command can draw its result (-o FILE.svg; parcalc.render.figures)."""
    if output is not None:
        from parcalc.files import check_writable
        from parcalc.output import is_picture, resolve_format

        if is_picture(fmt, output) and not picture:
            from parcalc.errors import InputError, shown

            raise InputError(f"--output: {shown(str(output))}: this command draws no picture (.svg is for intensity, memory, fit "
                             "and bubble); use .txt, .json, .csv, .md, .tex or .pdf, or --format")  # fmt: skip
        if not is_picture(fmt, output):
            resolve_format(fmt, output)
        check_writable(output)


def finish(result: Result, fmt: OutputFormat | None, output: Path | None) -> None:
    """The one way a command prints its Result (the library returns it: parcalc.results.run)."""
    check_finite(result)
    from parcalc.output import emit

    emit(result, fmt, output)


# Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers
# (parcalc.core.stages): `memory`, `flops`, `comm-volume`, `bubble` and `fit` share them.
FirstStageLayersOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--first-stage-layers", metavar="n",
                 help="Layers on the first pipeline stage (Megatron-LM's --decoder-first-pipeline-num-layers); "
                      "the rest split evenly over the other stages, so the stages need not divide the layers.", show_default=False),
]  # fmt: skip
LastStageLayersOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--last-stage-layers", metavar="n",
                 help="Layers on the last pipeline stage (Megatron-LM's --decoder-last-pipeline-num-layers), "
                      "e.g. 126 layers on 16 stages as 7 + 14 x 8 + 7 with 7 and 7.", show_default=False),
]  # fmt: skip
# Megatron-LM's --pipeline-model-parallel-layout (parcalc.core.pipeline_layout): memory, fit (pinned and --search), comm-volume, bubble, flops.
PipelineLayoutOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--pipeline-layout", metavar="TEXT",
                 help="Every virtual pipeline stage's layers as Megatron-LM writes them (--pipeline-model-parallel-layout): "
                      "E embedding, t a layer, m an MTP layer, L loss, | ends a stage, (...)*n repeats; "
                      "the stages / --pp are the chunks. DeepSeek-V3 on --pp 8: \"Et|(tt|)*30mL\".", show_default=False),
]  # fmt: skip
EmbeddingInSplitOption = Annotated[
    bool,
    typer.Option("--embedding-in-split",
                 help="The embedding takes one layer slot of the first stage (Megatron-LM's "
                      "--account-for-embedding-in-pipeline-split): the L + 1 slots split evenly. "
                      "Llama 3 405B: --embedding-in-split --loss-in-split --chunks 8.", show_default=False),
]  # fmt: skip
LossInSplitOption = Annotated[
    bool,
    typer.Option("--loss-in-split",
                 help="The LM head and loss take one layer slot of the last stage (Megatron-LM's "
                      "--account-for-loss-in-pipeline-split).", show_default=False),
]  # fmt: skip


# Context parallelism (parcalc.core.context): `memory`, `flops`, `comm-volume` and `fit` share these.
CpOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--cp", metavar="c",
                 help="Context-parallel degree: each sequence split over c ranks (s/c tokens each, 2c chunks for causal "
                      "balancing); GPUs = t x p x c x d; ZeRO and gradients over d x c. Llama 3 405B at 128K: --cp 16.",
                 show_default=False),
]  # fmt: skip
CpCommOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--cp-comm", metavar="KIND",
                 help="How attention gets the other CP ranks' K/V (Transformer Engine cp_comm_type): p2p (a ring of K/V "
                      "blocks), all-gather (of K and V, Llama 3), a2a (DeepSpeed-Ulysses; heads / t must divide by c). "
                      "Default: the --framework's own, p2p for megatron (--cp-comm-type), all-gather for torchtitan (its "
                      "'allgather' rotate method; p2p is 'alltoall'); p2p without --framework.",
                 show_default=False),
]  # fmt: skip


# Hybrid sharding (parcalc.core.sharding): `memory`, `comm-volume` and `fit` share this flag.
ShardGroupOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--shard-group", metavar="S",
                 help="Hybrid sharding (FSDP2 HSDP, Megatron's --num-distributed-optimizer-instances dp/S): ZeRO-1/2/3 shard "
                      "over S consecutive data-parallel ranks and replicate over dp x cp / S; gathers and reduce-scatters in the "
                      "group, the gradient shards all-reduced across the replicas. S divides dp x cp (default: all of them).",
                 show_default=False),
]  # fmt: skip


# Expert parallelism of MoE models (parcalc.core.expert_parallel): `memory`, `comm-volume` and
# `fit` share these flags.
EpOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--ep", metavar="e",
                 help="Expert-parallel degree of an MoE model: the routed experts split over e ranks (e divides the experts); "
                      "it folds over tp x cp x dp (Megatron-Core), adding no GPUs.", show_default=False),
]  # fmt: skip
EtpOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--etp", metavar="n",
                 help="Expert tensor-parallel degree: each expert's FFN split n ways (default: --tp); etp x ep divides "
                      "tp x cp x dp, expert-DP = tp x cp x dp / (etp x ep).", show_default=False),
]  # fmt: skip


# How an MoE layer's tokens travel and what hides them (parcalc.core.timing.moe), for `fit`.
MoeDispatcherOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--moe-dispatcher", metavar="KIND",
                 help="How MoE tokens reach their experts: alltoall (NCCL all-to-all, every copy over the network on its own; "
                      "default), deepep (DeepEP: one copy per destination node, forwarded over NVLink) or hybridep (HybridEP: "
                      "the same route, its kernels on 32 SMs where DeepEP's take 20).",
                 show_default=False),
]  # fmt: skip
MaxNodesOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--max-nodes-per-token", metavar="M",
                 help="Node-limited routing: each token's experts on at most M nodes (DeepSeek-V3: 4); what --moe-dispatcher "
                      "deepep or hybridep sends over the network. At most the nodes of the EP group.", show_default=False),
]  # fmt: skip
MoeRoutingOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--moe-routing", metavar="KIND",
                 help="Which experts a token's top-k are, for what --moe-dispatcher deepep or hybridep sends (one copy per "
                      "destination GPU): uniform (each set of k experts equally likely: a balanced router, or Megatron's "
                      "--moe-router-force-load-balancing, random logits; default) or round-robin (Primus's 'even' "
                      "force-balanced routing: token t gets experts (t k + j) mod E, so k consecutive experts, often on "
                      "one GPU).", show_default=False),
]  # fmt: skip
EpOverlapOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--ep-overlap", metavar="KIND",
                 help="What hides MoE dispatch and combine: none (default), shared (the shared experts run beside them), 1f1b "
                      "(another micro-batch's forward or backward, Megatron's --overlap-moe-expert-parallel-comm, DualPipe).",
                 show_default=False),
]  # fmt: skip
MoeImbalanceOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--moe-imbalance", metavar="RHO",
                 help="MoE: the busiest rank's tokens over the balanced share (default 1.0: balanced routing; at least 1).",
                 show_default=False),
]  # fmt: skip


Fp8RecipeOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--fp8-recipe", metavar="KIND",
                 help="With --precision fp8, how GEMM inputs are scaled: delayed (Transformer Engine's default: scale from the "
                      "amax history), current (per-tensor, one more read; torchao tensorwise), blockwise (DeepSeek-V3's 1x128 / "
                      "128x128) or mxfp8.", show_default=False),
]  # fmt: skip


ExpertActivationOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--expert-activation", metavar="HOW",
                 help="The MoE experts' activation times the routing probabilities: fused (one kernel each way: Megatron's "
                      "weighted bias-SwiGLU, Primus-Turbo's swiglu_with_probs; default) or eager (one kernel per PyTorch op: "
                      "silu, mul, the fp32 probability product and its cast, as Primus runs it with bias_swiglu_fusion false, "
                      "its Qwen3 configs' setting, and use_turbo_fused_act_with_probs off).", show_default=False),
]  # fmt: skip
KernelsOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--kernels", metavar="SET",
                 help="The memory-bound kernels between GEMMs: fused (Megatron-LM / Transformer Engine's hand-fused norms, "
                      "activations, RoPE), eager (one kernel per PyTorch op of the model code, e.g. RMSNorm's fp32 chain) or hf "
                      "(Hugging Face's Llama under autocast over fp32 weights: fp32 residual stream, bf16 casts); "
                      "default: the framework profile's (eager for fsdp2 and torchtitan, hf for hf). --compile fuses either.", show_default=False),
]  # fmt: skip


RecomputeLayersOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(metavar="n", help="With --recompute full: recompute only the first n layers of each pipeline stage (of each interleaved "
                 "chunk), keep every activation of the rest (Megatron-LM's --recompute-num-layers, block method; default: all).", show_default=False),
]


RecomputeModulesOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(metavar="LIST", help="With --recompute selective: the modules recomputed (comma-separated), Megatron-LM's --recompute-modules names: "
                 "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts (default: core_attn).", show_default=False),
]


# The length, energy and price of a whole run (parcalc.core.training_cost): `flops` and `fit` share these.
TokensOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--tokens", metavar="D",
                 help="Training tokens of the whole run, e.g. 15T, 300B, 2.5e12: iterations ceil(D / (B s)), wall-clock days, "
                      "GPU-hours, energy and (--price) cost.", show_default=False),
]  # fmt: skip
IterationsOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--iterations", metavar="I", help="Iterations of the whole run instead of --tokens (tokens = I x B x s).",
                 show_default=False),
]  # fmt: skip
GpuPowerOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--gpu-power", metavar="W",
                 help="Power per GPU for the energy, e.g. 700W, instead of the GPU preset's board power (its datasheet TDP); "
                      "include a share of the node (CPUs, NICs, fans) here if you want it counted.", show_default=False),
]  # fmt: skip
PueOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--pue", metavar="x",
                 help="The datacentre's power usage effectiveness (facility / IT energy, at least 1) on the energy; "
                      "default 1: the GPUs' boards alone.", show_default=False),
]  # fmt: skip


PowerLimitOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--power-limit", metavar="W",
                 help="Board power limit per GPU, e.g. 500W: GEMMs and attention at the Tensor Core rate the GPU preset's "
                      "power curve gives at that limit (HBM bandwidth unchanged); default: the preset's own limit, if it sets one.",
                 show_default=False),
]  # fmt: skip


