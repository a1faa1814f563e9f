"""`parcalc analyze`: measured timings analysed: speedup, efficiency, compute vs communication, all-reduce bandwidth."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, OutputOption, PresetsOption, finish, preset_dirs, start

if TYPE_CHECKING:
    from parcalc.core.analyze import TimeKind
    from parcalc.core.hardware import Link

EXAMPLES = """\
\b
Examples:
  parcalc analyze lab-ddp-timings.csv --time-is epoch
  parcalc analyze timings.csv --time-is step
  parcalc analyze timings.csv --time-is epoch --params 11.2M --grad-bytes 4 --link pcie4-x16
  parcalc analyze timings.yaml --model llama2-7b --bandwidth 25GB/s --latency 10us
  parcalc analyze timings.csv --time-is epoch --message-size 0.178GB --section bandwidth
  parcalc analyze timings.csv --time-is step -f csv --section shares

\b
FILE (CSV, or YAML: a list of rows) has one row per measured run, with the columns
  gpus, batch_per_gpu or global_batch, time          (required)
  time_is (step|epoch), compute, comm, message_bytes, allreduces   (optional)
Times without a unit are seconds; message_bytes without one is bytes. A bare name
not found here is looked up beside the worksheets (lab-ddp-timings.csv: lab-ddp's data).
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


class TimeIsChoice(str, Enum):
    step = "step"
    epoch = "epoch"


class SectionChoice(str, Enum):
    speedup = "speedup"
    batch = "batch"
    shares = "shares"
    bandwidth = "bandwidth"


def analyze(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Measured timings, CSV or YAML (.yaml/.yml); see the columns below.", show_default=False)],
    time_is: Annotated[Optional[TimeIsChoice], typer.Option("--time-is", metavar="step|epoch", help="What the time column measures (or a time_is column).", show_default=False)] = None,  # noqa: UP045
    message_size: Annotated[_Text, typer.Option(metavar="BYTES", help="Bytes of one all-reduce on every row, e.g. 44.7MB (instead of a message_bytes column).", show_default=False)] = None,
    params: Annotated[_Text, typer.Option(metavar="N", help="Parameters whose gradients are all-reduced, e.g. 11.2M: S = N x --grad-bytes.", show_default=False)] = None,
    grad_bytes: Annotated[_Text, typer.Option(metavar="B", help="Bytes per gradient element with --params or --model (default 4, fp32 as DDP's default).", show_default=False)] = None,
    model: Annotated[_Text, typer.Option(metavar="NAME", help="Model preset: S = its parameters x --grad-bytes.", show_default=False)] = None,
    allreduces: Annotated[_Text, typer.Option(metavar="K", help="All-reduces inside each measured comm time (default 1, or an allreduces column).", show_default=False)] = None,
    link: Annotated[_Text, typer.Option(metavar="NAME", help="Link preset: parcalc's ring all-reduce time beside each measured comm time.", show_default=False)] = None,
    bandwidth: Annotated[_Text, typer.Option(metavar="B/s", help="Bandwidth per direction instead of --link, e.g. 12GB/s.", show_default=False)] = None,
    latency: Annotated[_Text, typer.Option(metavar="TIME", help="Latency per message (alpha) with --bandwidth, e.g. 5us (default 0).", show_default=False)] = None,
    section: Annotated[Optional[list[SectionChoice]], typer.Option("--section", metavar="NAME", help="Show only speedup, batch, shares or bandwidth; repeatable (CSV holds the first table shown).", show_default=False)] = None,  # noqa: UP045
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Measured timings analysed: speedup and efficiency per batch size, compute vs communication
    shares, achieved all-reduce algbw and busbw (nccl-tests), and parcalc's ring all-reduce time
    beside each measurement."""
    start(output, fmt)
    from dataclasses import replace

    from parcalc.core.analyze import Section, Timings, analyse_timings
    from parcalc.errors import InputError
    from parcalc.timings_file import read_timings
    from parcalc.units import parse_count

    dirs = preset_dirs(presets)
    data = read_timings(_find(file, dirs), file.name)
    kind = _time_kind(data.time_kind, time_is)
    size, size_source = _message_size(message_size, params, grad_bytes, model, data.has_message, dirs)
    rows = data.rows
    if size is not None:
        rows = tuple(replace(m, message=size) for m in rows)
    if allreduces is not None:
        k = parse_count(allreduces, "--allreduces")
        rows = tuple(replace(m, allreduces=k) for m in rows)
    if size_source == "" and data.has_message:
        size_source = "message_bytes column"
    chosen_link = _link(link, bandwidth, latency, dirs)
    if chosen_link is not None and not any(m.comm is not None for m in rows):
        raise InputError("--link: the file has no comm column, so there is no measured communication to set the model beside")
    timings = Timings(rows, kind, data.batch_kind, file.name, size_source)
    analysis = analyse_timings(timings, chosen_link)
    sections = tuple(Section(s.value) for s in dict.fromkeys(section)) if section else tuple(Section)
    finish(analysis.result(sections), fmt, output)


def _find(file: Path, dirs: tuple) -> Path:
    """FILE as given, or a bare name of a data file beside the worksheets (packaged or in a preset
    directory's worksheets/), e.g. lab-ddp-timings.csv, the seed 002 lab's measurements."""
    try:
        if file.exists() or len(file.parts) != 1:
            return file
    except OSError:
        return file
    from parcalc.presets import search_dirs

    for directory, _ in search_dirs(dirs):
        candidate = directory / "worksheets" / file.name
        try:
            if candidate.is_file():
                return candidate
        except OSError:
            continue
    return file


def _time_kind(from_file: TimeKind | None, flag: TimeIsChoice | None) -> TimeKind:
    from parcalc.core.analyze import TimeKind
    from parcalc.errors import InputError

    if flag is not None and from_file is not None and TimeKind(flag.value) is not from_file:
        raise InputError(f"--time-is: {flag.value}, but the file says its times are {from_file.value} times")
    if flag is not None:
        return TimeKind(flag.value)
    if from_file is None:
        raise InputError("--time-is: say whether the times are of a step or an epoch (--time-is step|epoch, or a time_is column)")
    return from_file


def _message_size(size: str | None, params: str | None, grad_bytes: str | None, model: str | None, in_file: bool,
                  dirs: tuple) -> tuple[float | None, str]:  # fmt: skip
    """Bytes of one all-reduce from exactly one of --message-size, --params, --model, the file."""
    from parcalc.errors import InputError
    from parcalc.units import Dimension, format_number, parse_count, parse_quantity

    given = [flag for flag, value in (("--message-size", size), ("--params", params), ("--model", model)) if value is not None]
    if len(given) > 1:
        raise InputError(f"{given[1]}: give the all-reduce size once ({' or '.join(given)})")
    if given and in_file:
        raise InputError(f"{given[0]}: the file has a message_bytes column already; give the size once")
    if grad_bytes is not None and params is None and model is None:
        raise InputError("--grad-bytes: give --params or --model with it")
    if size is not None:
        return parse_quantity(size, Dimension.BYTES, "--message-size"), "--message-size"
    per_element = parse_quantity(grad_bytes, Dimension.COUNT, "--grad-bytes") if grad_bytes is not None else 4.0
    if params is not None:
        count = parse_count(params, "--params")
        return count * per_element, f"{format_number(count)} parameters x {per_element:g} B per gradient"
    if model is not None:
        from parcalc.presets import load_model

        shape = load_model(model, dirs)
        return shape.total_params * per_element, f"{shape.name}: {format_number(shape.total_params)} parameters x {per_element:g} B per gradient"
    return None, ""


def _link(name: str | None, bandwidth: str | None, latency: str | None, dirs: tuple) -> Link | None:
    """--link NAME, or --bandwidth (and --latency, 0 when left out); either overrides a named link's value."""
    from dataclasses import replace

    from parcalc.core.hardware import Link, Sourced
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    beta = parse_quantity(bandwidth, Dimension.BANDWIDTH, "--bandwidth", require_unit=True) if bandwidth is not None else None
    alpha = parse_quantity(latency, Dimension.TIME, "--latency", allow_zero=True, require_unit=True) if latency is not None else None
    given = "given on the command line"
    if name is None:
        if beta is None and alpha is None:
            return None
        if beta is None:
            raise InputError("--latency: give --bandwidth with it (or a --link preset)")
        return Link("given", "the given link", Sourced(beta, "B/s", given),
                    Sourced(alpha if alpha is not None else 0.0, "s", given if alpha is not None else "--latency not given: 0 s"))  # fmt: skip
    from parcalc.presets import load_link

    chosen = load_link(name, dirs)
    if beta is not None:
        chosen = replace(chosen, bandwidth_per_direction=Sourced(beta, "B/s", given))
    if alpha is not None:
        chosen = replace(chosen, latency=Sourced(alpha, "s", given))
    return chosen
