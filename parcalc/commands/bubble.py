"""`parcalc bubble`: pipeline bubbles of GPipe, 1F1B, interleaved and zero-bubble schedules, and their timeline."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from parcalc.commands.common import (
    EmbeddingInSplitOption,
    FirstStageLayersOption,
    FormatOption,
    LastStageLayersOption,
    LossInSplitOption,
    captured_results,
    check_finite,
    finish,
    stage_flags,
    start,
)

if TYPE_CHECKING:
    from parcalc.core.pipeline import BubbleAnalysis
    from parcalc.derivation import Result
    from parcalc.output import OutputFormat

EXAMPLES = """\
\b
Examples:
  parcalc bubble --pp 4 --micro-batches 16
  parcalc bubble --pp 4 --micro-batches 16 --schedule gpipe --target 10%
  parcalc bubble --pp 8 --target 5%
  parcalc bubble --pp 4 --micro-batches 8 --schedule interleaved --chunks 2 --timeline
  parcalc bubble --pp 8 --micro-batches 32 --schedule zb-h1 --t-forward 10ms --timeline
  parcalc bubble --pp 4 --micro-batches 8 --stage-times 10ms,12ms,10ms,15ms --p2p-latency 50us
  parcalc bubble --pp 4 --micro-batches 12 --schedule zb-h2 -o timeline.svg
  parcalc bubble --pp 4 --micro-batches 8 --schedule interleaved --chunks 2 --timeline -o bubble.pdf
  parcalc bubble --pp 16 --micro-batches 16 --layers 126 --first-stage-layers 7 --last-stage-layers 7 --t-forward 25ms
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


class ScheduleChoice(str, Enum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    zb_h1 = "zb-h1"
    zb_h2 = "zb-h2"
    dualpipev = "dualpipev"


OutputOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--output", "-o", metavar="FILE",
                 help="Write to FILE instead of stdout: .svg draws the timeline; .txt .json .csv .md .tex .pdf the result "
                      "(with --timeline, .pdf and .tex draw it too, and .md links it as NAME-timeline.svg beside).",
                 show_default=False),
]  # fmt: skip


def bubble(
    pp: Annotated[str, typer.Option("--pp", metavar="P", help="Pipeline stages (one device each); --stages is its old name.", show_default=False)],
    micro_batches: Annotated[_Text, typer.Option(metavar="M", help="Micro-batches per mini-batch (with --target and without it: the fewest that reach the target).", show_default=False)] = None,
    schedule: Annotated[ScheduleChoice, typer.Option(metavar="NAME", help="gpipe, 1f1b, interleaved, zb-h1, zb-h2 or dualpipev.")] = ScheduleChoice.one_f_one_b,
    chunks: Annotated[_Text, typer.Option(metavar="V", help="Model chunks per device (interleaved only; default 2 there).")] = None,
    t_forward: Annotated[_Text, typer.Option(metavar="TIME", help="Forward time of one micro-batch on one stage, or on one layer with --layers (default 1 s, a unit).")] = None,
    t_backward: Annotated[_Text, typer.Option(metavar="TIME", help="Whole backward time, B + W (default 2 x forward).")] = None,
    t_weight: Annotated[_Text, typer.Option(metavar="TIME", help="Weight-gradient part W of the backward (default half of it).")] = None,
    stage_times: Annotated[_Text, typer.Option(metavar="T1,T2,...", help="Forward time of each stage (unbalanced stages); backward and W keep their ratios to the forward.")] = None,
    layers: Annotated[_Text, typer.Option(metavar="L", help="Transformer layers over the stages (Megatron-LM's split): each stage's times are its layers x the per-layer --t-forward / --t-backward / --t-weight.")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    p2p_latency: Annotated[_Text, typer.Option(metavar="TIME", help="Point-to-point latency between stages, in the simulation (default 0).")] = None,
    target: Annotated[_Text, typer.Option(metavar="FRACTION", help="Bubble target, e.g. 10%: the fewest micro-batches that reach it.")] = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw the simulated schedule, one row per device.")] = False,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Pipeline bubble: closed forms (share of total time and relative to ideal) and an event simulation."""
    svg = output if output is not None and output.suffix.lower() == ".svg" else None
    if svg is not None:
        from parcalc.output import check_writable, resolve_format

        if fmt is not None:
            resolve_format(fmt, svg)  # --format with -o FILE.svg: one line, not JSON on stdout beside the picture
        check_writable(svg)
    elif output is not None and fmt is None:
        from parcalc.errors import InputError
        from parcalc.output import EXTENSIONS

        if output.suffix.lower() not in EXTENSIONS:
            raise InputError(f"--output: cannot tell the format of {str(output)!r} from its extension; use .svg (the timeline), {', '.join(EXTENSIONS)} or --format")
    start(None if svg is not None else output, fmt)
    from dataclasses import replace

    from parcalc.core.pipeline import PassTimes, Schedule, analyse_bubble, pass_times
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_count, parse_quantity

    chosen = Schedule(schedule.value)
    p = parse_count(pp, "--pp")
    if micro_batches is None and target is None:
        raise InputError("--micro-batches: required (or give --target and parcalc finds the fewest micro-batches that reach it)")
    m = parse_count(micro_batches, "--micro-batches") if micro_batches is not None else None
    v = parse_count(chunks, "--chunks") if chunks is not None else (2 if chosen is Schedule.INTERLEAVED else 1)

    def time(text: str | None, flag: str, *, zero: bool = False) -> float | None:
        return None if text is None else parse_quantity(text, Dimension.TIME, flag, allow_zero=zero, require_unit=True)

    times: PassTimes = pass_times(time(t_forward, "--t-forward"), time(t_backward, "--t-backward"), time(t_weight, "--t-weight", zero=True))
    per_stage = None
    if stage_times is not None:
        per_stage = [parse_quantity(part, Dimension.TIME, "--stage-times", require_unit=True) for part in stage_times.split(",")]
    latency = time(p2p_latency, "--p2p-latency", zero=True) or 0.0
    goal = parse_quantity(target, Dimension.FRACTION, "--target") if target is not None else None
    split = _stage_layers(layers, first_stage_layers, last_stage_layers, p, v, embedding_in_split, loss_in_split)

    found = None
    if m is None:  # --target alone: the closed form's fewest micro-batches (share of total time), then the bubble at them
        probe = analyse_bubble(chosen, p, p, chunks=v, times=times, stage_times=per_stage, latency=latency, target=goal, stage_layers=split)
        found = int(next(d for d in probe.closed if d.key == "micro_batches_for_target").value)
        m = found
    analysis = analyse_bubble(chosen, p, m, chunks=v, times=times, stage_times=per_stage, latency=latency, target=goal, stage_layers=split)
    result = analysis.result()
    if found is not None:
        result = replace(result, assumptions=result.assumptions + (
            f"no --micro-batches: m = {found}, the fewest micro-batches whose bubble (share of total time) is at most the target",))  # fmt: skip
    if t_forward is None and stage_times is None:
        unit = "one layer's forward pass" if split is not None else "one forward pass"
        result = replace(result, assumptions=result.assumptions + (
            f"no --t-forward: times are in units of {unit} (t_f = 1 s); shares and micro-batch counts do not depend on it",))  # fmt: skip
    if chosen is Schedule.INTERLEAVED and chunks is None:
        result = replace(result, assumptions=result.assumptions + ("no --chunks: v = 2 model chunks per device",))
    check_finite(result)  # before the SVG and the timeline file, which do not pass through finish()
    if captured_results.get() is not None:  # a worksheet: the report draws the timeline from the table
        finish(result, fmt, output)
        return
    if svg is not None:
        _write_svg(analysis, svg)
    _show(analysis, result, fmt, None if svg is not None else output, timeline)


def _stage_layers(layers: str | None, first_text: str | None, last_text: str | None, stages: int, chunks: int,
                  embedding_in_split: bool = False, loss_in_split: bool = False) -> tuple[int, ...] | None:  # fmt: skip
    """Layers per stage from --layers and the uneven-split flags (parcalc.core.stages), or None."""
    from parcalc.core.stages import stage_split
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    first, last = stage_flags(first_text, last_text)
    if layers is None:
        if first is not None or last is not None or embedding_in_split or loss_in_split:
            flag = next(f for f, on in (("--first-stage-layers", first is not None), ("--last-stage-layers", last is not None),
                                        ("--embedding-in-split", embedding_in_split), ("--loss-in-split", True)) if on)  # fmt: skip
            raise InputError(f"{flag}: give --layers L too (the transformer layers split over the --pp stages)")
        return None
    from parcalc.commands.common import check_layers

    total = parse_count(layers, "--layers")
    check_layers(total)
    return stage_split(total, stages, first, last, chunks, pp_flag="--pp", embedding_in_split=embedding_in_split,
                       loss_in_split=loss_in_split)


def _show(analysis: BubbleAnalysis, result: Result, fmt: OutputFormat | None, output: Path | None, draw: bool) -> None:
    """JSON and CSV carry every event; text formats show the picture (with --timeline) instead."""
    import sys

    from parcalc.core.pipeline import without_timeline
    from parcalc.output import OutputFormat, resolve_format, use_colour

    chosen = resolve_format(fmt, output)
    timeline = analysis.timeline
    if chosen in (OutputFormat.JSON, OutputFormat.CSV):
        finish(result, fmt, output)
        return
    from parcalc.output import draws_figures

    if draw and timeline is not None and draws_figures(fmt, output):  # .pdf .tex .md draw the timeline from its table
        finish(result, fmt, output)
        return
    shown = without_timeline(result)
    if not (draw and chosen is OutputFormat.TABLE and timeline is not None):
        finish(shown, fmt, output)
        return
    from parcalc.render.timeline_text import print_timeline, timeline_text

    title = f"Timeline of {analysis.schedule.label}"
    if output is not None:
        from parcalc.output import render_text, write_atomically

        write_atomically(output, render_text(shown, chosen) + "\n" + timeline_text(timeline, 120, title))
        print(f"wrote {output}", file=sys.stderr)
        return
    finish(shown, fmt, None)
    if use_colour():
        from rich.console import Console

        console = Console()
        console.print()
        print_timeline(timeline, console, title)
    else:
        import shutil

        sys.stdout.write("\n" + timeline_text(timeline, shutil.get_terminal_size((100, 24)).columns, title))


def _write_svg(analysis: BubbleAnalysis, output: Path) -> None:
    import sys

    from parcalc.errors import InfeasibleError
    from parcalc.output import write_atomically
    from parcalc.render.timeline_svg import timeline_svg

    timeline = analysis.timeline
    if timeline is None:
        raise InfeasibleError("--output: too many operations or stages to simulate, so there is no timeline to draw; use fewer micro-batches or stages")
    write_atomically(output, timeline_svg(timeline, analysis.title))
    print(f"wrote {output}", file=sys.stderr)
