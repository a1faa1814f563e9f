"""`parcalc bubble`: pipeline bubbles of GPipe, 1F1B, interleaved and zero-bubble schedules, and their timeline.

The flags and the drawing; the request and the Result are parcalc.results.bubble's."""

# No `from __future__ import annotations` here: typer reads the command's annotations with
# inspect.signature(eval_str=True), which compiles and evaluates each one given as a string (~1.3 ms
# of a flops run, every start); written as objects they are evaluated once, where the function is defined.
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
    PipelineLayoutOption,
    check_finite,
    finish,
    start,
)

if TYPE_CHECKING:
    from parcalc.core.bubble_analysis import BubbleAnalysis
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
  parcalc bubble --pp 8 --micro-batches 64 --pipeline-layout "Et|(tt|)*30mL" --t-forward 12ms
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


class ScheduleChoice(str, Enum):
    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    zb_h1 = "zb-h1"
    zb_h2 = "zb-h2"
    dualpipev = "dualpipev"
    zb_v = "zb-v"
    dualpipe = "dualpipe"


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
    schedule: Annotated[ScheduleChoice, typer.Option(metavar="NAME", help="gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev or dualpipe.")] = ScheduleChoice.one_f_one_b,
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
    pipeline_layout: PipelineLayoutOption = None,
    p2p_latency: Annotated[_Text, typer.Option(metavar="TIME", help="Point-to-point latency between stages, in the simulation (default 0).")] = None,
    target: Annotated[_Text, typer.Option(metavar="FRACTION", help="Bubble target, e.g. 10%: the fewest micro-batches that reach it.")] = None,
    timeline: Annotated[bool, typer.Option("--timeline", help="Draw the simulated schedule, one row per device.")] = False,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Pipeline bubble: closed forms (share of total time and relative to ideal) and an event simulation."""
    svg = output if output is not None and output.suffix.lower() == ".svg" else None
    if svg is not None:
        from parcalc.files import check_writable
        from parcalc.output import resolve_format

        if fmt is not None:
            resolve_format(fmt, svg)  # --format with -o FILE.svg: one line, not JSON on stdout beside the picture
        check_writable(svg)
    elif output is not None and fmt is None:
        from parcalc.errors import InputError
        from parcalc.output import EXTENSIONS

        if output.suffix.lower() not in EXTENSIONS:
            raise InputError(f"--output: cannot tell the format of {str(output)!r} from its extension; use .svg (the timeline), {', '.join(EXTENSIONS)} or --format")
    start(None if svg is not None else output, fmt)
    from parcalc.results.bubble import outcome, request

    asked = request(pp, micro_batches, schedule.value, chunks, t_forward, t_backward, t_weight, stage_times, layers,
                    first_stage_layers, last_stage_layers, embedding_in_split, loss_in_split, p2p_latency, target,
                    pipeline_layout)  # fmt: skip
    shown = outcome(asked)
    analysis, result = shown.analysis, shown.result
    check_finite(result)  # before the SVG and the timeline file, which do not pass through finish()
    if svg is not None:  # the picture is the answer asked for: "wrote FILE", as memory -o FILE.svg says (issue 28)
        _write_svg(analysis, svg)
        return
    _show(analysis, result, fmt, output, timeline)


def _show(analysis: "BubbleAnalysis", result: "Result", fmt: "OutputFormat | None", output: Path | None, draw: bool) -> None:
    """JSON and CSV carry every event; text formats show the picture (with --timeline) instead."""
    import sys

    from parcalc.core.bubble_analysis import without_timeline
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


def _write_svg(analysis: "BubbleAnalysis", output: Path) -> None:
    import sys

    from parcalc.errors import InfeasibleError
    from parcalc.output import write_atomically
    from parcalc.render.timeline_svg import timeline_svg

    timeline = analysis.timeline
    if timeline is None:
        raise InfeasibleError("--output: too many operations or stages to simulate, so there is no timeline to draw; use fewer micro-batches or stages")
    write_atomically(output, timeline_svg(timeline, analysis.title))
    print(f"wrote {output}", file=sys.stderr)
