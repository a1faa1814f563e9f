"""`parcalc peak-flops`: peak FLOP/s from clock x SMs x FMA/clock, or from a GPU preset (parcalc.results.peak_flops)."""

# No `from __future__ import annotations` here: typer reads the command's annotations with
# inspect.signature(eval_str=True), which compiles and evaluates each one given as a string (~1.3 ms
# of a flops run, every start); written as objects they are evaluated once, where the function is defined.
from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, OutputOption, PowerLimitOption, PresetsOption, finish, start

EXAMPLES = """\
\b
Examples:
  parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32
  parcalc peak-flops --clock 1.41GHz --sms 108 --fma-per-clock 512 --dtype tf32
  parcalc peak-flops --gpu h100-sxm5 --dtype fp8 --sparse --format json
  parcalc peak-flops --gpu h100-sxm5 --dtype bf16 --power-limit 500W
  parcalc peak-flops --gpu h100-sxm5-96gb-hbm2e --dtype bf16 --format json
"""


def peak_flops(
    gpu: Annotated[Optional[str], typer.Option(metavar="NAME", help="GPU preset (see `parcalc presets list gpus`).")] = None,  # noqa: UP045
    dtype: Annotated[Optional[str], typer.Option("--dtype", metavar="DTYPE", help="Numeric format: fp64, fp64-tensor, fp32, tf32, bf16, fp16, fp8, int8, fp4...")] = None,  # noqa: UP045
    clock: Annotated[Optional[str], typer.Option(metavar="FREQ", help="Clock rate, e.g. 1.41GHz or 1410MHz (overrides the preset).")] = None,  # noqa: UP045
    sms: Annotated[Optional[str], typer.Option(metavar="N", help="Number of SMs (AMD: compute units).")] = None,  # noqa: UP045
    fma_per_clock: Annotated[Optional[str], typer.Option(metavar="N", help="Dense FMA per clock per SM for this dtype.")] = None,  # noqa: UP045
    sparse: Annotated[bool, typer.Option("--sparse", help="2:4 structured sparsity (x2), where the datasheet gives it.")] = False,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    power_limit: PowerLimitOption = None,
) -> None:
    """Peak FLOP/s = 2 x clock x SMs x FMA/clock/SM, beside the datasheet's figure."""
    start(output, fmt)
    from parcalc.results.peak_flops import request, result

    finish(result(request(gpu, dtype, clock, sms, fma_per_clock, sparse, presets, power_limit)), fmt, output)
