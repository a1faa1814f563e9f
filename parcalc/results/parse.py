"""Flag texts to typed values, and the checks every command shares (bounds, finite results, preset
directories, the uneven pipeline split, MoE, FP8, power and run-cost flags): the part of a command's
work that reads its inputs, without Click, so that the command line and the library read them alike.

parcalc.commands.common re-exports these names for the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parcalc.core.choices import Schedule
    from parcalc.derivation import Result


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
    """--presets DIR..., each checked once per run: a DIR the user named that does not exist, is a file, or holds none
    of the preset folders (gpus/, links/, ...) is bad input, one line and exit 2 before anything runs or is written
    (parcalc would otherwise skip it in silence, leaving "unknown GPU" or the packaged preset's numbers as the only clue).
    So is each directory of PARCALC_PRESETS: the user named it too, once for every run (before session 21 a bad one was
    skipped in silence while the same directory given to --presets was an error). The XDG config folder, which parcalc
    looks in unasked, is skipped when it gives nothing (preset_files.search_dirs)."""
    from parcalc.preset_files import ENV_VAR, env_dirs

    named = [(directory, "--presets") for directory in presets or ()] + [(directory, ENV_VAR) for directory in env_dirs()]
    for directory, origin in named:
        if (directory, origin) not in _checked_preset_dirs:
            problem = preset_dir_problem(directory, origin)
            if problem:
                from parcalc.errors import InputError

                raise InputError(f"{origin} {problem}" if origin == "--presets" else f"{origin}: {problem}")
            _checked_preset_dirs.add((directory, origin))
    return tuple(presets or ())


_checked_preset_dirs: set[tuple[Path, str]] = set()


def preset_dir_problem(directory: Path, origin: str = "--presets") -> str | None:
    """Why `directory` gives no presets (it is missing, not a directory, or holds none of the
    category folders), or None when it holds at least one of them; `origin`: where it was named
    (--presets or PARCALC_PRESETS), for the remedy."""
    from parcalc.preset_files import Category

    shown = str(directory)
    folders = ", ".join(f"{category.value}/" for category in Category)
    try:
        if not directory.exists():
            return f"{shown}: no such directory"
        if not directory.is_dir():
            return f"{shown}: not a directory; {origin} takes the folder that holds {folders} (a preset file goes in one of them)"
        next(directory.iterdir(), None)  # a folder that cannot be listed: say so, not "holds none of ..."
        if not any((directory / category.value).is_dir() for category in Category):
            if directory.name in {category.value for category in Category}:
                fix = f"--presets {directory.parent}" if origin == "--presets" else f"{origin}={directory.parent}"
                return f"{shown} is itself a preset folder: {fix} (the folder that holds {directory.name}/)"
            return f"{shown} holds none of {folders}: no presets from it"
    except OSError as error:
        return f"{shown}: cannot read it ({error.strerror or error})"
    return None


def sixteen_bit_default(device: Any) -> tuple[str, str | None]:
    """The 16-bit dtype a default (no --dtype / --precision typed) means on this GPU: bf16, or fp16
    on a GPU whose datasheet lists no bf16 (V100: Volta has fp16 Tensor Cores only), with a note
    that says so; a default must not fail for a flag the user never typed."""
    if device is None or "bf16" in device.dtypes or "fp16" not in device.dtypes:
        return "bf16", None
    listed = ", ".join(device.dtypes)
    return "fp16", f"{device.name} has no bf16 (its datasheet lists {listed}): 16-bit work in fp16 by default"


def pipeline_layout_chunks(text: str | None, pp: int, schedule: Schedule, chunks: int | None) -> tuple[Schedule, int | None]:
    """--pipeline-layout's schedule and chunks: its virtual stages / pp chunks and, past one, the interleaved schedule,
    unless --schedule / --chunks say otherwise (then the core's check says they disagree)."""
    if text is None:
        return schedule, chunks
    from parcalc.core.pipeline_layout import virtual_stage_count

    stages = virtual_stage_count(text)
    if chunks is None and schedule.v_shape:  # DualPipeV, ZB-V: the V's two stages a device are the schedule's, not chunks
        return schedule, 1
    v = chunks if chunks is not None else max(1, stages // pp)
    # here, not at the top: peak-flops and intensity's GEMM one-liners import this module and create none of the enums
    from parcalc.core.choices import Schedule

    return (Schedule.INTERLEAVED if v > 1 and schedule is Schedule.ONE_F_ONE_B else schedule), v


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
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class BusyLine:
    """A progress line on stderr for work that cannot count its steps (TeX typesetting a PDF: 5-15 s), shown
    as ProgressBar is: once the work has run a second, on a terminal; a context manager, gone when it ends."""

    def __init__(self, label: str) -> None:
        import threading

        self.label = label
        self.lock = threading.Lock()
        self.done = False
        self.bar: Any = None
        self.timer: Any = None

    def __enter__(self) -> BusyLine:
        import sys
        import threading

        if sys.stderr.isatty():
            self.timer = threading.Timer(PROGRESS_AFTER_SECONDS, self._show)
            self.timer.daemon = True
            self.timer.start()
        return self

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with self.lock:
            if self.done:
                return
            self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=Console(stderr=True),
                                transient=True)  # fmt: skip
            self.bar.add_task(self.label, total=None)
            self.bar.start()

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.done = True
            if self.timer is not None:
                self.timer.cancel()
            if self.bar is not None:
                self.bar.stop()


def cp_flags(cp: str | None, cp_comm: str | None, profile: Any = None) -> tuple[int, str]:
    """(--cp as a count, --cp-comm's value), each checked: a bad value is one line, exit 2. --cp-comm not given (None):
    the framework profile's default (Framework.cp_comm_default: all-gather under torchtitan), p2p without one."""
    from parcalc.core.context import cp_comm_of
    from parcalc.units import parse_count

    count = parse_count(cp, "--cp") if cp is not None else 1
    if cp_comm is None:
        return count, profile.cp_comm_default if profile is not None else "p2p"
    return count, cp_comm_of(cp_comm).value


def cp_comm_note(cp_comm: str | None, profile: Any) -> tuple[str, ...]:
    """Where --cp-comm's value came from when it was not given and a profile chose it (for the assumptions), else ()."""
    if cp_comm is not None or profile is None:
        return ()
    return (f"--cp-comm {profile.cp_comm_default}: the {profile.name} profile's context-parallel exchange without --cp-comm "
            f"({profile.source('cp_comm_default')})",)


def shard_group_flag(shard_group: str | None) -> int | None:
    """--shard-group as a count (None when not given); whether it divides dp x cp is the core's check."""
    from parcalc.units import parse_count

    return parse_count(shard_group, "--shard-group") if shard_group is not None else None


def moe_timing_flags(dispatcher: str | None, max_nodes: str | None, overlap: str | None, imbalance: str | None,
                     model: Any, routing: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The MoE timing flags as parcalc.core.fit.Config / SearchSpace fields; on a dense model, an error."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    given = {"--moe-dispatcher": dispatcher, "--max-nodes-per-token": max_nodes, "--ep-overlap": overlap, "--moe-imbalance": imbalance,
             "--moe-routing": routing}
    if model.moe is None:
        for flag, value in given.items():
            if value is not None:
                raise InputError(f"{flag}: model {model.key} has no experts (no moe: block); it applies to MoE models only")
        return {}
    from parcalc.core.timing.moe import DISPATCHERS, EP_OVERLAPS, check_routing_choice

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
    if routing is not None:
        check_routing_choice(routing.lower(), out.get("max_nodes_per_token"), out.get("moe_imbalance", 1.0))
        out["moe_routing"] = routing.lower()
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


def mxfp8_gpu_check(recipe: str | None, device: Any) -> None:
    """--fp8-recipe mxfp8 checked against the GPU: MXFP8's block-scaled GEMMs (32-element E8M0 scales applied in the main
    loop) need Blackwell's Tensor Cores; Transformer Engine refuses the recipe below compute capability 10.0
    (NVIDIA/TransformerEngine @d0067d0d transformer_engine/pytorch/quantization.py `_compute_mxfp8_support`: 'MXFP8 (for
    all gemm layouts) is not supported on 12.0+ architectures yet.' / 'Device compute capability 10.0 or higher required
    for MXFP8 execution.'). AMD GPUs are not checked here (CDNA 4 has MX matrix cores). None: no GPU preset, no check."""
    from parcalc.core.timing.fp8_quantise import nvfp4_tensor_cores
    from parcalc.errors import InputError

    if recipe is None or recipe.lower() != "mxfp8" or device is None or device.vendor.lower() != "nvidia":
        return
    if nvfp4_tensor_cores(device.vendor, device.architecture):  # Blackwell: the same Tensor Cores run MXFP8
        return
    raise InputError(f"--fp8-recipe mxfp8: {device.name} ({device.architecture}) has no MXFP8 Tensor Cores: Transformer "
                     "Engine runs MXFP8 from compute capability 10.0 (Blackwell); use --fp8-recipe current or delayed")  # fmt: skip


def fp4_gpu_check(precision: Any, device: Any) -> None:
    """--precision fp4 checked against the GPU: Transformer Engine's NVFP4 recipe needs FP4 Tensor Cores with E4M3 block
    scales, NVIDIA Blackwell's (parcalc.core.timing.fp8_quantise.nvfp4_tensor_cores); None: no GPU preset, no check."""
    from parcalc.core.choices import Precision
    from parcalc.core.timing.fp8_quantise import nvfp4_tensor_cores
    from parcalc.errors import InputError

    if precision is not Precision.FP4 or device is None or nvfp4_tensor_cores(device.vendor, device.architecture):
        return
    raise InputError(f"--precision fp4: {device.name} ({device.architecture}) has no NVFP4 training path: Transformer Engine's "
                     "NVFP4 recipe needs Blackwell's FP4 Tensor Cores (B200, GB200, B300); use --precision fp8")  # fmt: skip


def compile_loss_flag(compile_loss: bool, compile_: bool, step_memory: str | None) -> bool:
    """--compile-loss checked (memory and fit): the compiled loss is walked by the compiled torchtitan step walk only
    (`step_memory`: the framework profile's, None without one)."""
    from parcalc.errors import InputError

    if compile_loss and (not compile_ or step_memory != "torchtitan-eager"):
        raise InputError("--compile-loss: torchtitan's compiled loss is walked with --compile --framework torchtitan")
    return compile_loss


def expandable_segments_flag(expandable_segments: bool | None, step_memory: str | None) -> bool | None:
    """--expandable-segments / --no-expandable-segments checked (memory): the caching allocator is replayed over the fsdp2 and
    torchtitan profiles' step walks (parcalc.core.memory_fsdp.replayed_reserve); None: as the profile's launcher sets it."""
    from parcalc.errors import InputError

    if expandable_segments is not None and step_memory not in ("fsdp2-eager", "torchtitan-eager"):
        flag = "--expandable-segments" if expandable_segments else "--no-expandable-segments"
        raise InputError(f"{flag}: the caching allocator is replayed over the step walk of --framework fsdp2 or torchtitan")
    return expandable_segments


def fp8_all_gather_flag(fp8_all_gather: bool, precision: Any, step_memory: str | None) -> bool:
    """--fp8-all-gather checked (memory and fit): torchao's FP8 all-gather is torchtitan's (Float8 linears under FSDP2), walked
    by the torchtitan profile's step with --precision fp8 (`step_memory`: the framework profile's, None without one)."""
    from parcalc.core.choices import Precision
    from parcalc.errors import InputError

    if fp8_all_gather and (precision is not Precision.FP8 or step_memory != "torchtitan-eager"):
        raise InputError("--fp8-all-gather: torchao's FP8 all-gather of the Float8 linears' weights is walked with --precision fp8 "
                         "--framework torchtitan")  # fmt: skip
    return fp8_all_gather


def expert_activation_flag(text: str | None, model: Any) -> str:
    """--expert-activation checked: fused or eager (parcalc.core.timing.compute.EXPERT_ACTIVATIONS); "fused" when not given;
    on a model without experts, an error."""
    if text is None:
        return "fused"
    from parcalc.errors import InputError

    if model.moe is None:
        raise InputError(f"--expert-activation: model {model.key} has no experts (no moe: block); it applies to MoE models only")
    from parcalc.core.timing.compute import EXPERT_ACTIVATIONS

    if text.strip().lower() not in EXPERT_ACTIVATIONS:
        raise InputError(f"--expert-activation: one of {', '.join(EXPERT_ACTIVATIONS)}, got {text!r}")
    return text.strip().lower()


def kernels_flag(kernels: str | None) -> str | None:
    """--kernels checked: fused or eager (None: not given, the framework profile decides)."""
    if kernels is None:  # before the imports: `intensity --model` need not load the framework profiles (start-up)
        return None
    from parcalc.core.timing.framework import KERNEL_SETS
    from parcalc.errors import InputError

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


def recompute_modules_flag(value: str | None) -> tuple[str, ...] | None:
    """--recompute-modules as typed: Megatron's module names, comma-separated (parcalc.core.recompute.parse_modules)."""
    if value is None:
        return None
    from parcalc.core.recompute import parse_modules

    return parse_modules(value)


def recompute_layers_flag(value: str | None) -> int | None:
    """--recompute-layers as typed: a whole number of at least 0 (checked against the stages by the core)."""
    from parcalc.errors import InputError, shown

    if value is None:
        return None
    text = value.strip()
    try:
        n = int(text)
    except ValueError:
        raise InputError(f"--recompute-layers: a whole number of layers, got {value!r}") from None
    if n < 0:
        raise InputError(f"--recompute-layers: must be 0 or more, got {n}")
    if n > 2**31:  # shown as typed: a whole number past 1.8e308 has no float to format (it was exit 70, an OverflowError)
        raise InputError(f"--recompute-layers: {shown(text)} is more layers than any model has")
    return n


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


def framework_sequence_parallel(profile: Any, given: bool | None, tp: int) -> bool | None:
    """--sequence-parallel under a profile that runs tensor parallelism with it always (Framework.sequence_parallel_with_tp,
    torchtitan's apply_tp): on whenever tp > 1 (None: both for a search over tp); --no-sequence-parallel with tp > 1 is refused."""
    from parcalc.errors import InputError

    if profile is None or not profile.sequence_parallel_with_tp:
        return given
    if given is False and tp > 1:
        raise InputError(f"--no-sequence-parallel: {profile.name} runs tensor parallelism with sequence parallelism always "
                         "(its plan shards the norms' sequence on the TP ranks)")
    return True


def framework_zero_stage(profile: Any, zero: int, pp: int, flag: str | None = None) -> None:
    """--zero under a --framework that was given: a ZeRO stage its stack does not offer (Framework.zero_stages, from the
    profile's YAML; with pp > 1 its pipeline engine's: DeepSpeed's PipelineEngine runs ZeRO-0/1 only) is refused, one line,
    as the search and the strategy table offer only those; `flag` names what asked for it (default --zero N). Without
    --framework the textbook stages all stand."""
    from parcalc.errors import InputError

    if (reason := profile.zero_stage_reason(zero, pp, flag)) is not None:
        raise InputError(reason)


def framework_runs(profile: Any, recomputes: Any = (), compile_: bool = False) -> None:
    """--recompute and --compile under a --framework that was given: what the stack does not run (the profile's not_run,
    Framework.run_reason) is one line naming its source, not a number for a run nobody can launch; without --framework
    every setting stands."""
    from parcalc.errors import InputError

    asked = [*(("--compile",) if compile_ else ()), *(f"--recompute {getattr(r, 'value', r)}" for r in recomputes)]
    for flag in asked:
        if (reason := profile.run_reason(flag)) is not None:
            raise InputError(reason)


def framework_recomputes(profile: Any, recomputes: tuple[Any, ...]) -> tuple[Any, ...]:
    """The recomputations of a table or search (none given) that the stack runs (its not_run's left out)."""
    return tuple(r for r in recomputes if profile.run_reason(f"--recompute {getattr(r, 'value', r)}") is None)


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
