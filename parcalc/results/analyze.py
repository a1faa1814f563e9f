"""`analyze`: measured step or epoch timings analysed: speedup and efficiency per batch size, compute
vs communication shares, achieved all-reduce bandwidth, and parcalc's ring all-reduce time beside
each measurement."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.analyze import Section, TimeKind, Timings
    from parcalc.core.hardware import Link
    from parcalc.derivation import Result


@frozen
class AnalyzeRequest:
    """What `analyze` is asked, parsed: the measurements (message sizes and all-reduce counts as the
    flags set them), the link to model their communication on (None: no model), the sections shown."""

    timings: Timings
    link: Link | None
    sections: tuple[Section, ...]


def request(file: Path, time_is: str | None = None, message_size: str | None = None, params: str | None = None,
            grad_bytes: str | None = None, model: str | None = None, allreduces: str | None = None,
            link: str | None = None, bandwidth: str | None = None, latency: str | None = None,
            section: list[str] | None = None, presets: list[Path] | None = None) -> AnalyzeRequest:  # fmt: skip
    """The request from `analyze`'s flag texts (time_is and each section a choice's value); bad
    input raises InputError naming the flag."""
    from dataclasses import replace

    from parcalc.core.analyze import Section, Timings
    from parcalc.errors import InputError
    from parcalc.results.parse import preset_dirs
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
    sections = tuple(Section(s) for s in dict.fromkeys(section)) if section else tuple(Section)
    return AnalyzeRequest(Timings(rows, kind, data.batch_kind, file.name, size_source), chosen_link, sections)


def result(req: AnalyzeRequest) -> Result:
    """Speedup, efficiency, shares and bandwidths of the measurements, and the model beside them; no parsing."""
    from parcalc.core.analyze import analyse_timings

    return analyse_timings(req.timings, req.link).result(req.sections)


def from_flags(*args: Any, **flags: Any) -> Result:
    """`analyze`'s Result from its flags as the command line gives them (texts with units; time_is
    and each section a choice's value): what parcalc.commands.analyze and the library both call."""
    return result(request(*args, **flags))


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


def _time_kind(from_file: TimeKind | None, flag: str | None) -> TimeKind:
    from parcalc.core.analyze import TimeKind
    from parcalc.errors import InputError

    if flag is not None and from_file is not None and TimeKind(flag) is not from_file:
        raise InputError(f"--time-is: {flag}, but the file says its times are {from_file.value} times")
    if flag is not None:
        return TimeKind(flag)
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
