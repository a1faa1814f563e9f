"""`parcalc calibrate gemm|nccl`: measurements of one's own hardware as user presets.

Both write a complete YAML preset (to --output, all or nothing, or to stdout) that parcalc loads
like any other: put it in DIR/gpus/ or DIR/links/ and pass `--presets DIR` (or set
PARCALC_PRESETS). The report of what was measured and fitted goes to stdout when the preset goes
to a file, else to stderr, so that `parcalc calibrate nccl run.txt > links/mine.yaml` works.
"""

from __future__ import annotations

import sys
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from parcalc.commands.common import PresetsOption, ProgressBar, preset_dirs
from parcalc.results.preset_yaml import check_preset_output as _check_output
from parcalc.results.preset_yaml import validated_preset as _validated

if TYPE_CHECKING:
    from parcalc.derivation import Result

calibrate_app = typer.Typer(
    help="Measure your own hardware and write presets: GEMM efficiency (PyTorch), link bandwidth and latency (nccl-tests output).",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

GEMM_EXAMPLES = """\
\b
Examples:
  parcalc calibrate gemm --device cpu --shapes tiny --peak 2TFLOP/s
  parcalc calibrate gemm --gpu h100-sxm5 --dtype bf16 -o ~/.config/parcalc/presets/gpus/my-h100.yaml
  parcalc calibrate gemm --gpu a100-sxm4-80gb --name "A100 (our cluster)" --format json
"""

NCCL_EXAMPLES = """\
\b
Examples:
  parcalc calibrate nccl tests/fixtures/nccl/a100x8_nvlink_all_reduce.txt
  parcalc calibrate nccl ar.txt -o presets/links/my-nvlink.yaml    # ar.txt from: all_reduce_perf -b 8 -e 8G -f 2 -g 8
  parcalc fit --presets presets --gpu a100-sxm4-80gb --link my-nvlink --model llama3-8b --gpus 8
  parcalc calibrate nccl two-nodes.txt --nodes 2 --nics-per-node 8 -o presets/links/my-ib.yaml
"""

MAX_INPUT_BYTES = (
    64 << 20
)  # nccl-tests output is kilobytes; a log with NCCL_DEBUG=INFO a few MB


class ReportFormat(str, Enum):
    TEXT = "text"
    JSON = "json"


Text = Optional[str]  # noqa: UP045 - typer needs Optional at runtime on 3.11
FormatOpt = Annotated[
    ReportFormat,
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        help="text (the report; default) or json (report and preset, for scripts).",
    ),
]
OutputOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="Write the preset here (all or nothing) instead of stdout; put it in DIR/gpus/ or DIR/links/.",
        show_default=False,
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace --output if it exists.")
]
NameOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--name",
        metavar="NAME",
        help="The preset's display name (its lookup name is the file's).",
        show_default=False,
    ),
]


@calibrate_app.command("gemm", epilog=GEMM_EXAMPLES)
def gemm(
    gpu: Annotated[
        Text,
        typer.Option(
            metavar="NAME",
            help="GPU preset to start from: its peak, memory and other kernel shares are kept.",
        ),
    ] = None,
    peak: Annotated[
        Text,
        typer.Option(
            metavar="FLOP/s",
            help="Dense peak of --dtype, e.g. 312TFLOP/s (required on a CPU and without --gpu).",
        ),
    ] = None,
    dtype: Annotated[
        Text,
        typer.Option(
            "--dtype",
            metavar="DTYPE",
            help="bf16, fp16, fp32 or tf32 (default bf16 on a GPU, fp32 on a CPU).",
        ),
    ] = None,
    device: Annotated[
        str,
        typer.Option(
            "--device",
            metavar="DEVICE",
            help="auto (CUDA / ROCm if PyTorch sees one, else the CPU), cpu, cuda, cuda:N.",
        ),
    ] = "auto",
    shapes: Annotated[
        str,
        typer.Option(
            metavar="SET",
            help="GEMM shapes: default (large on a GPU, small on a CPU), large, small, tiny.",
        ),
    ] = "default",
    name: NameOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    presets: PresetsOption = None,
    fmt: FormatOpt = ReportFormat.TEXT,
) -> None:
    """Time a sweep of transformer-shaped GEMMs with PyTorch and write a GPU preset whose
    kernels.matmul share reproduces them (share = achieved / (peak x tile quantisation), the median
    over the shapes); the measured table goes into the preset too."""
    _check_output(output, force, "gpus")
    from parcalc import calibrate_runner
    from parcalc.core.calibrate import gemm as calibration
    from parcalc.core.dtypes import canonical_dtype
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    wanted = canonical_dtype(dtype) if dtype else None
    if wanted is not None and wanted not in calibrate_runner.TORCH_DTYPES:
        raise InputError(
            f"--dtype: calibrate gemm times {', '.join(calibrate_runner.TORCH_DTYPES)}, not {wanted}"
        )
    given_peak = (
        parse_quantity(peak, Dimension.FLOP_RATE, "--peak", require_unit=True)
        if peak is not None
        else None
    )
    base, base_gpu = _base_gpu(gpu, preset_dirs(presets))
    opened = calibrate_runner.open_device(calibrate_runner.load_torch(), device)
    chosen = wanted or ("fp32" if opened.kind == "cpu" else "bf16")
    if chosen == "tf32" and opened.kind != "cuda":
        raise InputError(
            "--dtype tf32: TF32 is a Tensor Core mode of NVIDIA GPUs; on a CPU use fp32"
        )
    rate, rate_source = _peak(given_peak, base_gpu, chosen, opened.kind)
    sweep = calibration.shape_set(shapes, opened.kind)
    facts = _device_facts(opened, sweep, measure_copy=base is None)
    skeleton = calibration.skeleton(base, facts, chosen)
    timings = _timed(opened, chosen, sweep)
    points = calibration.matmul_points(
        timings, rate, calibration.quantisation_spec(*calibration.tiles_of(skeleton))
    )
    share = calibration.median_share(points, rate, chosen, rate_source)
    display = name or (
        f"{base['name']}, {chosen} GEMMs calibrated"
        if base
        else f"{opened.name} (calibrated)"
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    document = calibration.calibrate_document(skeleton, facts, chosen, rate, given_peak is not None, points, share.value, display,
                                              _sweep_source(opened, chosen, sweep, when))  # fmt: skip
    key = output.stem.lower() if output is not None else "calibrated"
    text, typed = _validated(
        document,
        key,
        output,
        "gpus",
        f"GPU preset made by parcalc calibrate gemm on {opened.name}, {when}",
    )
    verdicts = [
        f"kernels.matmul.{chosen} = {document['kernels']['matmul'][chosen]['value']} (median of {len(points)} shapes)",
        _model_check(typed, chosen, timings, points, share.value),
    ]
    if base is not None and opened.kind == "cpu":
        verdicts.append(
            f"measured on a CPU against {base['name']}'s peak: the share describes this CPU, not that GPU"
        )
    result = calibration.gemm_result(
        points, timings, share, chosen, opened.name, sweep.name
    )
    _finish(
        result,
        verdicts + _usage(output, "gpus", "--gpu", key),
        document,
        text,
        output,
        fmt,
    )


def _device_facts(opened: Any, sweep: Any, measure_copy: bool) -> Any:
    """What the device reports, and (for a preset made without a base) its copy bandwidth."""
    from parcalc import calibrate_runner
    from parcalc.core.calibrate.gemm import DeviceFacts

    reported = calibrate_runner.facts(opened)
    copy_rate = (
        calibrate_runner.copy_bandwidth(opened, sweep.copy_bytes)
        if measure_copy
        else 0.0
    )
    return DeviceFacts(opened.kind, opened.name, reported["vendor"], reported["architecture"], reported["memory_capacity"],
                       reported["sms"], copy_rate, sweep.copy_bytes, reported["where"])  # fmt: skip


def _timed(opened: Any, dtype: str, sweep: Any) -> tuple:
    from parcalc import calibrate_runner

    progress = ProgressBar(f"timing {len(sweep.shapes)} GEMMs on {opened.name}")
    try:
        return calibrate_runner.time_gemms(opened, dtype, sweep, progress)
    finally:
        progress.close()


def _sweep_source(opened: Any, dtype: str, sweep: Any, when: str) -> str:
    """The preset's source entry: how, when and on what the sweep was measured."""
    from parcalc import __version__, calibrate_runner

    return (f"measured by parcalc {__version__} calibrate gemm on {opened.description}, {when}: {dtype}, the {sweep.name} set of "
            f"{len(sweep.shapes)} GEMMs (m x k x n from {_extent(sweep, min)} to {_extent(sweep, max)}), best of "
            f"{calibrate_runner.TIMED_BATCHES} batches of >= {sweep.batch_seconds * 1e3:g} ms after warm-up; "
            "share = achieved / (dense peak x quantisation), median over the shapes")  # fmt: skip


def _extent(sweep: Any, pick: Any) -> str:
    shape = pick(sweep.shapes, key=lambda s: s.flops)
    return f"{shape.m} x {shape.k} x {shape.n}"


@calibrate_app.command("nccl", epilog=NCCL_EXAMPLES)
def nccl(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help="nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf); - reads stdin.",
        ),
    ],
    collective: Annotated[
        Text,
        typer.Option(
            metavar="NAME",
            help="all_reduce, all_gather, reduce_scatter or sendrecv, when the file does not say (or holds several).",
        ),
    ] = None,
    ranks: Annotated[
        Text,
        typer.Option(
            metavar="N", help="Ranks of the run, when the file does not print them."
        ),
    ] = None,
    nodes: Annotated[
        Text,
        typer.Option(
            metavar="N",
            help="Nodes the ranks ran on, when the file does not say (more than 1: a network link is fitted).",
        ),
    ] = None,
    nics_per_node: Annotated[
        Text,
        typer.Option(
            metavar="N",
            help="Across nodes: network cards per node for GPU traffic (default one per GPU).",
        ),
    ] = None,
    nccl_hardware: Annotated[
        Text,
        typer.Option(
            metavar="KIND",
            help="NCCL's class of the link: nvlink (default inside a node), pci, net (across nodes).",
        ),
    ] = None,
    intra_link: Annotated[
        Text,
        typer.Option(
            metavar="NAME",
            help="Across nodes: the link inside a node, for the model check (default: one that does not bind).",
        ),
    ] = None,
    name: NameOpt = None,
    output: OutputOpt = None,
    force: ForceOpt = False,
    presets: PresetsOption = None,
    fmt: FormatOpt = ReportFormat.TEXT,
) -> None:
    """Fit a link preset to nccl-tests output: bandwidth = the largest busbw, latency = the fixed
    cost of the smallest messages per ring step; every size is then held against parcalc's NCCL
    model with the new link. Across nodes the link is one network card's."""
    _check_output(output, force, "links")
    from parcalc import __version__
    from parcalc.core.calibrate.link_fit import (
        fit_link,
        link_document,
        link_result,
        reproduce,
    )
    from parcalc.core.calibrate.nccl_tests import parse_nccl_tests
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    source_name = "stdin" if file == "-" else Path(file).name
    table = parse_nccl_tests(
        _read_text(file), source_name, collective,
        parse_count(ranks, "--ranks") if ranks is not None else None,
        parse_count(nodes, "--nodes") if nodes is not None else None,
    )  # fmt: skip
    hardware = nccl_hardware.strip().lower() if nccl_hardware else None
    if hardware is not None and hardware not in ("nvlink", "pci", "net"):
        raise InputError(
            f"--nccl-hardware: {nccl_hardware!r} is not nvlink, pci or net"
        )
    fit = fit_link(
        table,
        parse_count(nics_per_node, "--nics-per-node")
        if nics_per_node is not None
        else None,
        hardware,
    )
    if intra_link is not None and not fit.across_nodes:
        raise InputError(
            "--intra-link: only for a table across nodes (this one ran on one node)"
        )
    dirs = preset_dirs(presets)
    inside = None
    if intra_link is not None:
        from parcalc.presets import load_link

        inside = load_link(intra_link, dirs)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    placement = f"{table.ranks} ranks, {fit.nodes} node{'s' if fit.nodes > 1 else ''}"
    display = name or f"{table.collective} over {placement} ({source_name}, calibrated)"
    document = link_document(fit, display, when, __version__)
    key = output.stem.lower() if output is not None else "calibrated"
    text, typed = _validated(
        document,
        key,
        output,
        "links",
        f"Link preset made by parcalc calibrate nccl from {source_name}, {when}",
    )
    checks = reproduce(fit, typed, inside)
    result = link_result(fit, typed, checks, inside)
    flag = (
        "--link"
        if not fit.across_nodes
        else f"--nics-per-node {fit.nics_per_node} --inter-node-link"
    )
    largest = checks[-1]
    verdicts = [(f"bandwidth_per_direction {fit.link_bandwidth.value / 1e9:.6g} GB/s, latency {fit.step_latency.value * 1e6:.4g} us; "
                 f"the model gives {largest.ratio:.3f} x the measured time at {largest.row.size:,} B")]  # fmt: skip
    if (
        fit.across_nodes
        and inside is not None
        and largest.model.bus_bandwidth < fit.bus_bandwidth.value * 0.99
    ):
        verdicts.append(f"{inside.name} binds before the network: the model cannot reach the measured {fit.bus_bandwidth.value / 1e9:.6g} GB/s "
                        "(calibrate the link inside the node too)")  # fmt: skip
    _finish(
        result,
        verdicts + _usage(output, "links", flag, key),
        document,
        text,
        output,
        fmt,
    )


# ---------------------------------------------------------------------------------------------
# Shared steps


def _read_text(file: str) -> str:
    """The file's text; a binary, oversized or unreadable file is an InputError."""
    from parcalc.errors import InputError

    label = "stdin" if file == "-" else file
    try:
        if file == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            from parcalc.files import NotRegularFileError, TooLargeError, read_regular

            path = Path(file)
            if path.is_dir():
                raise InputError(f"{file}: is a directory, not nccl-tests output")
            try:  # read_regular: a FIFO with no writer must not block forever
                data = read_regular(path, MAX_INPUT_BYTES)
            except TooLargeError:
                raise InputError(f"{label}: larger than {MAX_INPUT_BYTES >> 20} MiB; nccl-tests output is a few kilobytes") from None
            except NotRegularFileError as error:
                raise InputError(f"{label}: cannot read: {error}") from None
    except FileNotFoundError:
        raise InputError(f"{file}: no such file") from None
    except OSError as error:
        raise InputError(f"{label}: cannot read: {error.strerror or error}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(
            f"{label}: larger than {MAX_INPUT_BYTES >> 20} MiB; nccl-tests output is a few kilobytes"
        )
    if b"\0" in data:
        raise InputError(f"{label} is a binary file, not nccl-tests output")
    return data.decode("utf-8", errors="replace")


def _base_gpu(
    name: str | None, dirs: tuple[Path, ...]
) -> tuple[dict[str, Any] | None, Any]:
    if name is None:
        return None, None
    from parcalc.preset_files import Category, find
    from parcalc.preset_hardware import gpu_from_document
    from parcalc.strict_yaml import read_yaml

    found = find(Category.GPUS, name, dirs)
    document = read_yaml(found.path)
    return document, gpu_from_document(found.key, found.path, document)


def _peak(given: float | None, base: Any, dtype: str, kind: str) -> tuple[float, str]:
    """The peak the shares are relative to: --peak, else what `fit` takes from the preset (its
    datasheet dense peak, else clock x SMs x FMA)."""
    from parcalc.errors import InputError

    if given is not None:
        return given, "given on the command line (--peak)"
    if base is None:
        if kind == "cpu":
            raise InputError(
                f"--peak: no preset knows this CPU's peak; give its dense {dtype} peak (cores x clock x FLOP per cycle), e.g. --peak 2TFLOP/s"
            )
        raise InputError(
            "--gpu: give the GPU preset to start from (e.g. --gpu h100-sxm5; `parcalc presets list gpus`), or --peak"
        )
    from parcalc.core.peak_flops import gpu_peak_flops

    try:
        chosen = gpu_peak_flops(base, dtype)
    except InputError as error:
        raise InputError(f"{error}; give --peak for it") from None
    if chosen.datasheet is not None:
        return chosen.datasheet.value, chosen.datasheet.source
    return chosen.value, f"{base.name}: 2 x clock x SMs x FMA/clock/SM for {dtype}"


def _model_check(
    gpu: Any, dtype: str, timings: tuple, points: tuple, share: float
) -> str:
    """parcalc's kernel time, on the preset just made, of the shape whose share is the median:
    what `fit` will compute for a GEMM like it."""
    from parcalc.core.dtypes import bytes_per_element
    from parcalc.core.peak_flops import gpu_peak_flops
    from parcalc.core.timing.compute import compute_spec
    from parcalc.core.timing.compute import gemm as gemm_kernel
    from parcalc.units import format_time

    chosen = gpu_peak_flops(gpu, dtype)
    spec = compute_spec(
        gpu,
        dtype,
        chosen.datasheet.value if chosen.datasheet is not None else chosen.value,
    )
    middle = min(range(len(points)), key=lambda i: abs(points[i].share - share))
    shape, measured = timings[middle].shape, timings[middle].seconds
    kernel = gemm_kernel(
        shape.label, shape.m, shape.k, shape.n, bytes_per_element(dtype), spec
    )
    return (f"check: parcalc's kernel model on this preset times {shape.label} ({shape.m}×{shape.k}×{shape.n}) at "
            f"{format_time(kernel.time)} ({kernel.bound}-bound), measured {format_time(measured)}")  # fmt: skip


def _usage(output: Path | None, category: str, flag: str, key: str) -> list[str]:
    """How to use the preset, with the very directory when --output already put it in place."""
    if output is not None and output.parent.name.lower() == category:
        return [
            f"use it: parcalc fit --presets {output.parent.parent} {flag} {key} ..."
        ]
    if output is not None:
        return [
            f"use it: move it to DIR/{category}/{output.name}, then parcalc fit --presets DIR {flag} {key} ..."
        ]
    return [
        f"use it: write it to DIR/{category}/NAME.yaml (-o or >), then parcalc fit --presets DIR {flag} NAME ..."
    ]


def _finish(
    result: Result,
    verdicts: list[str],
    document: dict[str, Any],
    text: str,
    output: Path | None,
    fmt: ReportFormat,
) -> None:
    """Write the preset (file or stdout) and the report (stdout with a file, else stderr)."""
    from dataclasses import replace

    result = replace(result, verdicts=tuple(verdicts))
    if output is not None:
        from parcalc.output import write_atomically

        write_atomically(output, text)
    if fmt is ReportFormat.JSON:
        import json

        from parcalc.derivation import result_record

        record = {
            **result_record(result),
            "preset": document,
            "output": str(output) if output is not None else None,
        }
        sys.stdout.write(
            json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
        )
    else:
        from parcalc.output import OutputFormat, render_text

        report = render_text(result, OutputFormat.TABLE)
        report += "" if report.endswith("\n") else "\n"
        if output is None:
            sys.stdout.write(text)
            sys.stdout.flush()  # the preset before the report when both reach one terminal
            sys.stderr.write(report)
        else:
            sys.stdout.write(report)
    if output is not None:
        sys.stdout.flush()
        print(f"wrote {output}", file=sys.stderr)



from parcalc.commands.calibrate_trace import TRACE_EXAMPLES, trace  # noqa: E402 - the subcommand lives in its own module

calibrate_app.command("trace", epilog=TRACE_EXAMPLES)(trace)
