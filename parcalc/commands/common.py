"""Options shared by every calculation command, and the one way they print results."""

from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from parcalc.output import OutputFormat

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


# When set, finish() hands results to this list instead of printing them: this is how a
# worksheet runs a command with the very flags a user would type (parcalc.worksheet).
captured_results: ContextVar[list[Result] | None] = ContextVar("captured_results", default=None)


def start(output: Path | None, fmt: OutputFormat | None, *, picture: bool = False) -> None:
    """Validate the output before any work, so a bad path fails fast and writes nothing.

    picture: the command can draw its result (-o FILE.svg; parcalc.render.figures)."""
    if output is not None:
        from parcalc.output import check_writable, is_picture, resolve_format

        if is_picture(fmt, output) and not picture:
            from parcalc.errors import InputError, shown

            raise InputError(f"--output: {shown(str(output))}: this command draws no picture (.svg is for intensity, memory, fit "
                             "and bubble); use .txt, .json, .csv, .md, .tex or .pdf, or --format")  # fmt: skip
        if not is_picture(fmt, output):
            resolve_format(fmt, output)
        check_writable(output)


def finish(result: Result, fmt: OutputFormat | None, output: Path | None) -> None:
    check_finite(result)
    sink = captured_results.get()
    if sink is not None:
        sink.append(result)
        return
    from parcalc.output import emit

    emit(result, fmt, output)


def check_finite(result: Result) -> None:
    """Every result a command shows passes here: one that holds inf or NaN is an input error (exit
    2), not an answer printed as "inf"."""
    from parcalc.derivation import first_non_finite

    where = first_non_finite(result)
    if where is not None:
        from parcalc.errors import InputError

        raise InputError(f"{result.command}: {where} is not a finite number; an input is too large or too small for it")


# Per-stage and per-layer work (memory's stage breakdowns, FSDP's per-layer collectives, a pinned
# fit's estimate) grows with the layers, and pipeline stages never outnumber them: this bound keeps
# every command to about a second. The deepest published transformers have ~1,000 layers
# (DeepNet, Wang et al. 2022); the largest LLMs about 100.
MAX_LAYERS = 1024


def check_layers(layers: int, flag: str = "--layers") -> None:
    if layers > MAX_LAYERS:
        from parcalc.errors import InputError

        raise InputError(f"{flag}: {layers:,} layers; parcalc computes per layer and per stage, up to {MAX_LAYERS:,} layers "
                         "(the deepest published transformers have about 1,000)")  # fmt: skip


# fit's layouts and search enumerate the divisors of the GPUs and of the batch (trial division up
# to the square root), and its strategy table walks the TP widths of a node: these bounds, far
# beyond any cluster (~200,000 GPUs, NVL576 domains) or batch, keep each to about a second.
MAX_GPUS = 2**20
MAX_GPUS_PER_NODE = 1024
MAX_SEARCH_BATCH = 2**24


def check_at_most(value: int, limit: int, flag: str, what: str) -> int:
    """`value` when at most `limit`, else an InputError naming the flag and the bound."""
    if value > limit:
        from parcalc.errors import InputError

        raise InputError(f"{flag}: {value:,} {what}; parcalc takes at most {limit:,}")
    return value


def preset_dirs(presets: list[Path] | None) -> tuple[Path, ...]:
    """--presets DIR..., each checked once per run: one warning line on stderr for a DIR that does
    not exist or holds none of the preset folders (gpus/, links/, ...), which parcalc would
    otherwise skip in silence, leaving "unknown GPU" as the only clue."""
    for directory in presets or ():
        if directory not in _checked_preset_dirs:
            _checked_preset_dirs.add(directory)
            problem = preset_dir_problem(directory)
            if problem:
                from parcalc.streams import say

                say(f"warning: --presets {problem}")
    return tuple(presets or ())


_checked_preset_dirs: set[Path] = set()


def preset_dir_problem(directory: Path) -> str | None:
    """Why `directory` gives no presets (it is missing, not a directory, or holds none of the
    category folders), or None when it holds at least one of them."""
    from parcalc.presets import Category

    shown = str(directory)
    try:
        if not directory.exists():
            return f"{shown}: no such directory"
        if not directory.is_dir():
            return f"{shown}: not a directory"
        if not any((directory / category.value).is_dir() for category in Category):
            folders = ", ".join(f"{category.value}/" for category in Category)
            return f"{shown} holds none of {folders}: no presets from it"
    except OSError as error:
        return f"{shown}: cannot read it ({error.strerror or error})"
    return None


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


def sixteen_bit_default(device: Any) -> tuple[str, str | None]:
    """The 16-bit dtype a default (no --dtype / --precision typed) means on this GPU: bf16, or fp16
    on a GPU whose datasheet lists no bf16 (V100: Volta has fp16 Tensor Cores only), with a note
    that says so; a default must not fail for a flag the user never typed."""
    if device is None or "bf16" in device.dtypes or "fp16" not in device.dtypes:
        return "bf16", None
    listed = ", ".join(device.dtypes)
    return "fp16", f"{device.name} has no bf16 (its datasheet lists {listed}): 16-bit work in fp16 by default"


def stage_flags(first: str | None, last: str | None) -> tuple[int | None, int | None]:
    """--first-stage-layers / --last-stage-layers as counts, checked before any label shows them (0
    is read, so that the core's Megatron-LM check can say why an empty stage is refused)."""
    from parcalc.core.stages import check_stage_layers
    from parcalc.units import parse_count

    def read(text: str | None, flag: str) -> int | None:
        if text is None:
            return None
        value = parse_count(text, flag, allow_zero=True)
        check_stage_layers(flag, value)
        return value

    return read(first, "--first-stage-layers"), read(last, "--last-stage-layers")


# A command that may run past a second shows its progress on stderr (only on a terminal).
PROGRESS_AFTER_SECONDS = 1.0


class ProgressBar:
    """A rich progress bar on stderr, shown only once the work has run for a second on a terminal;
    call it with (done, total), close it when done."""

    def __init__(self, label: str) -> None:
        import time

        self.label = label
        self.started = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            import sys
            import time

            if time.perf_counter() - self.started < PROGRESS_AFTER_SECONDS or not sys.stderr.isatty():
                return
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# Context parallelism (parcalc.core.context): `memory`, `flops`, `comm-volume` and `fit` share these.
CpOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--cp", metavar="c",
                 help="Context-parallel degree: each sequence split over c ranks (s/c tokens each, 2c chunks for causal "
                      "balancing); GPUs = t x p x c x d; ZeRO and gradients over d x c. Llama 3 405B at 128K: --cp 16.",
                 show_default=False),
]  # fmt: skip
CpCommOption = Annotated[
    str,
    typer.Option("--cp-comm", metavar="KIND",
                 help="How attention gets the other CP ranks' K/V (Transformer Engine cp_comm_type): p2p (a ring of K/V "
                      "blocks), all-gather (of K and V, Llama 3), a2a (DeepSpeed-Ulysses; heads / t must divide by c)."),
]  # fmt: skip


def cp_flags(cp: str | None, cp_comm: str) -> tuple[int, str]:
    """(--cp as a count, --cp-comm's value), each checked: a bad value is one line, exit 2."""
    from parcalc.core.context import cp_comm_of
    from parcalc.units import parse_count

    return (parse_count(cp, "--cp") if cp is not None else 1), cp_comm_of(cp_comm).value


# Hybrid sharding (parcalc.core.sharding): `memory`, `comm-volume` and `fit` share this flag.
ShardGroupOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--shard-group", metavar="S",
                 help="Hybrid sharding (FSDP2 HSDP, Megatron's --num-distributed-optimizer-instances dp/S): ZeRO-1/2/3 shard "
                      "over S consecutive data-parallel ranks and replicate over dp x cp / S; gathers and reduce-scatters in the "
                      "group, the gradient shards all-reduced across the replicas. S divides dp x cp (default: all of them).",
                 show_default=False),
]  # fmt: skip


def shard_group_flag(shard_group: str | None) -> int | None:
    """--shard-group as a count (None when not given); whether it divides dp x cp is the core's check."""
    from parcalc.units import parse_count

    return parse_count(shard_group, "--shard-group") if shard_group is not None else None


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
                      "default) or deepep (DeepEP / HybridEP: one copy per destination node, forwarded over NVLink).",
                 show_default=False),
]  # fmt: skip
MaxNodesOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--max-nodes-per-token", metavar="M",
                 help="Node-limited routing: each token's experts on at most M nodes (DeepSeek-V3: 4); what --moe-dispatcher "
                      "deepep sends over the network. At most the nodes of the EP group.", show_default=False),
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


def moe_timing_flags(dispatcher: str | None, max_nodes: str | None, overlap: str | None, imbalance: str | None,
                     model: Any) -> dict[str, Any]:  # fmt: skip
    """The MoE timing flags as parcalc.core.fit.Config / SearchSpace fields; on a dense model, an error."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    given = {"--moe-dispatcher": dispatcher, "--max-nodes-per-token": max_nodes, "--ep-overlap": overlap, "--moe-imbalance": imbalance}
    if model.moe is None:
        for flag, value in given.items():
            if value is not None:
                raise InputError(f"{flag}: model {model.key} has no experts (no moe: block); it applies to MoE models only")
        return {}
    from parcalc.core.timing.moe import DISPATCHERS, EP_OVERLAPS

    out: dict[str, Any] = {}
    if dispatcher is not None:
        if dispatcher.lower() not in DISPATCHERS:
            raise InputError(f"--moe-dispatcher: one of {', '.join(DISPATCHERS)}, got {dispatcher!r}")
        out["moe_dispatcher"] = dispatcher.lower()
    if overlap is not None:
        if overlap.lower() not in EP_OVERLAPS:
            raise InputError(f"--ep-overlap: one of {', '.join(EP_OVERLAPS)}, got {overlap!r}")
        out["ep_overlap"] = overlap.lower()
    if max_nodes is not None:
        out["max_nodes_per_token"] = parse_count(max_nodes, "--max-nodes-per-token")
    if imbalance is not None:
        out["moe_imbalance"] = imbalance_flag(imbalance, model.moe.experts)
    return out


def imbalance_flag(text: str | None, experts: int | None = None) -> float:
    """--moe-imbalance as a number of at least 1 (parcalc.core.comm.expert.check_imbalance)."""
    from parcalc.core.comm.expert import check_imbalance
    from parcalc.errors import InputError

    if text is None:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--moe-imbalance: cannot read {text!r} as a number (a factor of at least 1, e.g. 1.25)") from None
    check_imbalance(value, experts)
    return value


Fp8RecipeOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--fp8-recipe", metavar="KIND",
                 help="With --precision fp8, how GEMM inputs are scaled: delayed (Transformer Engine's default: scale from the "
                      "amax history), current (per-tensor, one more read; torchao tensorwise), blockwise (DeepSeek-V3's 1x128 / "
                      "128x128) or mxfp8.", show_default=False),
]  # fmt: skip


def fp8_recipe_flag(recipe: str | None, precision: Any) -> str:
    """--fp8-recipe checked: a known recipe, and only with --precision fp8."""
    from parcalc.core.choices import Precision
    from parcalc.core.timing.compute import FP8_RECIPES
    from parcalc.errors import InputError

    if recipe is None:
        return "delayed"
    if precision is not Precision.FP8:
        raise InputError("--fp8-recipe: applies to --precision fp8")
    if recipe.lower() not in FP8_RECIPES:
        raise InputError(f"--fp8-recipe: one of {', '.join(FP8_RECIPES)}, got {recipe!r}")
    return recipe.lower()


KernelsOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--kernels", metavar="SET",
                 help="The memory-bound kernels between GEMMs: fused (Megatron-LM / Transformer Engine's hand-fused norms, "
                      "activations, RoPE), eager (one kernel per PyTorch op of the model code, e.g. RMSNorm's fp32 chain) or hf "
                      "(Hugging Face's Llama under autocast over fp32 weights: fp32 residual stream, bf16 casts); "
                      "default: the framework profile's (eager for fsdp2 and torchtitan, hf for hf). --compile fuses either.", show_default=False),
]  # fmt: skip


def kernels_flag(kernels: str | None) -> str | None:
    """--kernels checked: fused or eager (None: not given, the framework profile decides)."""
    from parcalc.core.timing.framework import KERNEL_SETS
    from parcalc.errors import InputError

    if kernels is None:
        return None
    if kernels.strip().lower() not in KERNEL_SETS:
        raise InputError(f"--kernels: one of {', '.join(KERNEL_SETS)}, got {kernels!r}")
    return kernels.strip().lower()


def expert_flags(ep: str | None, etp: str | None, model: Any) -> tuple[int, int | None]:
    """--ep / --etp as counts (ep 1 and etp None when not given); on a model without experts, an error."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    if model.moe is None:
        for text, flag in ((ep, "--ep"), (etp, "--etp")):
            if text is not None:
                raise InputError(f"{flag}: model {model.key} has no experts (no moe: block); expert parallelism applies to MoE models only")
    return (parse_count(ep, "--ep") if ep is not None else 1), (parse_count(etp, "--etp") if etp is not None else None)


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


def recompute_modules_flag(value: str | None) -> tuple[str, ...] | None:
    """--recompute-modules as typed: Megatron's module names, comma-separated (parcalc.core.recompute.parse_modules)."""
    if value is None:
        return None
    from parcalc.core.recompute import parse_modules

    return parse_modules(value)


def recompute_layers_flag(value: str | None) -> int | None:
    """--recompute-layers as typed: a whole number of at least 0 (checked against the stages by the core)."""
    from parcalc.errors import InputError

    if value is None:
        return None
    text = value.strip()
    try:
        n = int(text)
    except ValueError:
        raise InputError(f"--recompute-layers: a whole number of layers, got {value!r}") from None
    if n < 0:
        raise InputError(f"--recompute-layers: must be 0 or more, got {n}")
    if n > 2**31:
        raise InputError(f"--recompute-layers: {n:.4g} is more layers than any model has")
    return n
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


def power_limited(device: Any, power_limit: str | None, peak_given: bool = False) -> Any:
    """The GPU preset under --power-limit W (checked against its power curve: above 0, at most its
    board power, not below the curve's lowest point). --peak is the rate the GPU runs at, so it
    drops a preset's default limit and refuses --power-limit."""
    from dataclasses import replace

    from parcalc.errors import InputError

    if power_limit is None:
        if device is not None and peak_given and device.power_limit is not None:
            return replace(device, power_limit=None)
        return device
    if device is None:
        raise InputError("--power-limit: limits a GPU preset's power; give --gpu NAME (one with a power curve, e.g. h100-sxm5)")
    if peak_given:
        raise InputError("--power-limit: scales the GPU preset's rated peaks; with --peak give the rate the GPU reaches under its limit")
    from parcalc.core.power import with_power_limit
    from parcalc.units import Dimension, parse_quantity

    return with_power_limit(device, parse_quantity(power_limit, Dimension.POWER, "--power-limit", require_unit=True))


def power_terms(device: Any, peak: float, dtype: str, peak_source: str) -> list[Any]:
    """The inputs a power limit adds: the limit, the Tensor Core share the curve gives there and
    the dense peak the GEMMs run at; [] without a limit."""
    from parcalc.core.power import capped_peak, describe, tensor_power_scale

    scale = tensor_power_scale(device) if device is not None else None
    if scale is None:
        return []
    capped = capped_peak(peak, scale, dtype, peak_source)
    return [scale.inputs[0], scale.as_term("s_P", describe(scale)),
            capped.as_term("F_cap", f"{dtype} dense peak the Tensor Cores reach under the limit (F_peak x s_P)")]


def power_assumptions(device: Any, mfu: bool = False) -> tuple[str, ...]:
    """What a power limit assumes (the interpolation, what scales and what not; `mfu`: that MFU
    keeps the rated peak); () without one."""
    from parcalc.core.power import tensor_power_scale

    scale = tensor_power_scale(device) if device is not None else None
    if scale is None:
        return ()
    return (f"power limit {scale.inputs[0].value:g} W: Tensor Core rates x {scale.value:.4f}; " + "; ".join(scale.assumptions)
            + ("; MFU and HFU stay quoted against the rated peak" if mfu else ""),)


def run_plan(tokens: str | None, iterations: str | None, gpu_power: str | None, device: Any, pue: str | None,
             price: str | None) -> Any:  # fmt: skip
    """The run's RunPlan from the flags (None when neither --tokens nor --iterations is given);
    --pue, --gpu-power and --price without a run are one-line errors. `device`: the GPU preset
    whose board power counts when --gpu-power is not given (None: no energy unless given)."""
    from parcalc.core.training_cost import DEFAULT_PUE, Power, Price, RunPlan
    from parcalc.errors import InputError
    from parcalc.units import parse_count, parse_price, parse_tokens

    if tokens is None and iterations is None:
        for flag, given in (("--price", price), ("--pue", pue), ("--gpu-power", gpu_power)):
            if given is not None:
                raise InputError(f"{flag}: applies to a whole run; give --tokens D (or --iterations I) with it")
        return None
    power = board_power(gpu_power, device)
    if tokens is not None and iterations is not None:
        raise InputError("--tokens / --iterations: give one of them (the length of the run), not both")
    factor = DEFAULT_PUE
    if pue is not None:
        try:
            factor = float(pue)
        except ValueError:
            raise InputError(f"--pue: a ratio of at least 1 such as 1.1, got {pue!r}") from None
        if power is None:
            raise InputError("--pue: scales the GPUs' energy; give --gpu-power W, or a --gpu whose preset has a board power")
    parsed_price = None
    if price is not None:
        from parcalc.core.training_cost import CURRENCIES

        value, currency = parse_price(price, "--price")
        parsed_price = Price(value, CURRENCIES.get(currency, currency))
    return RunPlan(
        tokens=parse_tokens(tokens, "--tokens") if tokens is not None else None,
        iterations=parse_count(iterations, "--iterations") if iterations is not None else None,
        power=Power(power[0], power[1], factor) if power is not None else None,
        price=parsed_price,
    )


def board_power(gpu_power: str | None, device: Any) -> tuple[float, str] | None:
    """(watts, source): --gpu-power, else the GPU's power limit (--power-limit or its preset's
    default limit: the board draws at most that), else its board power, else None (no energy)."""
    from parcalc.units import Dimension, parse_quantity

    if gpu_power is not None:
        return parse_quantity(gpu_power, Dimension.POWER, "--gpu-power", require_unit=True), "--gpu-power (given)"
    if device is not None and getattr(device, "power_limit", None) is not None:
        return device.power_limit.value, f"{device.name}: power limit, {device.power_limit.source}"
    if device is not None and device.board_power is not None:
        return device.board_power.value, f"{device.name}: {device.board_power.source}"
    return None


def run_verdict(run: Any, gpus: int) -> str:
    """One line on a whole run: iterations, days, GPU-hours, energy, cost."""
    from parcalc.units import format_quantity

    i = run.iterations.value if run.iterations is not None else None
    parts = [f"{i:,.0f} iteration{'s' if i != 1 else ''} ({run.tokens.value:,.0f} tokens)" if i is not None
             else f"{run.tokens.value:,.0f} tokens"]  # fmt: skip
    days = run.days.value
    parts.append((f"{days:,.1f} days" if days >= 1 else f"{run.wall_clock.value / 3600:.3g} hours") + f" on {gpus:,} GPUs")
    hours = run.gpu_hours.value
    parts.append(f"{hours:,.0f} GPU-hours" if hours >= 10 else f"{hours:.3g} GPU-hours")
    if run.energy is not None:
        parts.append(format_quantity(run.energy.value, "Wh", significant=4))
    if run.cost is not None:
        parts.append(f"{run.cost.value:,.0f} {run.cost.unit} ({run.cost_per_million_tokens.value:.4g} {run.cost_per_million_tokens.unit})")
    return "the run: " + ", ".join(parts)


def stated_no_ops(sequence_parallel: bool, tp: int, zero: Any, dp_ranks: int) -> tuple[bool, Any, tuple[str, ...]]:
    """--sequence-parallel with --tp 1, and --zero 1-3 with one data-parallel rank, change nothing: a
    sweep over tp or dp may reach them, so they are taken as off and said so, not refused."""
    from parcalc.core.choices import ZeroStage

    notes: list[str] = []
    if sequence_parallel and tp == 1:
        sequence_parallel = False
        notes.append("--sequence-parallel with --tp 1: there is no tensor-parallel group to split the sequence over; a no-op (taken as off)")
    if zero is not ZeroStage.ZERO0 and dp_ranks == 1:
        notes.append(f"--zero {zero.value} with dp x cp = 1: one data-parallel rank holds every state, nothing to shard; a no-op (taken as 0)")
        zero = ZeroStage.ZERO0
    return sequence_parallel, zero, tuple(notes)
