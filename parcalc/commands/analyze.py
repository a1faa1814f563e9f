"""`parcalc analyze`: measured timings analysed: speedup, efficiency, compute vs communication, all-reduce bandwidth
(parcalc.results.analyze)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, OutputOption, PresetsOption, finish, start

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
FILE (CSV, or YAML: a list of rows) has one row per measured run, columns:
  gpus, batch_per_gpu or global_batch, time                      (required)
  time_is (step|epoch), compute, comm, message_bytes, allreduces (optional)
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
    from parcalc.results.analyze import from_flags

    result = from_flags(file, time_is.value if time_is is not None else None, message_size, params, grad_bytes, model, allreduces,
                        link, bandwidth, latency, [s.value for s in section] if section else None, presets)  # fmt: skip
    finish(result, fmt, output)
