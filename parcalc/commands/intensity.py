"""`parcalc intensity`: arithmetic intensity of a matmul or of a transformer layer's operations (parcalc.results.intensity)."""

# No `from __future__ import annotations` here: typer reads the command's annotations with
# inspect.signature(eval_str=True), which compiles and evaluates each one given as a string (~1.3 ms
# of a flops run, every start); written as objects they are evaluated once, where the function is defined.
from typing import Annotated, Optional

import typer

from parcalc.commands.common import (
    FormatOption,
    KernelsOption,
    PictureOutputOption,
    PowerLimitOption,
    PresetsOption,
    finish,
    start,
)

EXAMPLES = """\
\b
Examples:
  parcalc intensity --m 4096 --k 4096 --n 4096 --dtype fp16
  parcalc intensity --m 32 --k 4096 --n 32 --dtype fp16 --gpu a100-sxm4-80gb
  parcalc intensity --model homework-7b --batch 128 --seq-len 4096 --dtype fp16 --gpu a100-sxm4-80gb
  parcalc intensity --m 8192 --k 8192 --n 8192 --peak 989TFLOP/s --bandwidth 3.35TB/s
  parcalc intensity --m 4096 --k 4096 --n 4096 --dtype bf16 --gpu h100-sxm5
  parcalc intensity --model llama3-8b --seq-len 8192 --dtype bf16 --gpu h100-sxm5
  parcalc intensity --model llama3-8b --seq-len 8192 --dtype bf16 --gpu h100-sxm5 --compile
  parcalc intensity --model llama3-8b --seq-len 8192 --dtype bf16 --gpu h100-sxm5 --kernels eager
  parcalc intensity --model llama3-8b --batch 1 --seq-len 4096 --gpu h100-sxm5 -o roof.svg
  parcalc intensity --m 8192 --k 8192 --n 8192 --dtype bf16 --gpu h100-sxm5 --power-limit 500W
\b
With --gpu (or --peak and --bandwidth) each GEMM and, with --model, every kernel of a layer's
forward and backward is timed by the step-time model fit uses (parcalc.core.timing.compute).
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


def intensity(
    m: Annotated[_Text, typer.Option("--m", metavar="ROWS", help="Rows of X (X is m x k).")] = None,
    k: Annotated[_Text, typer.Option("--k", metavar="INNER", help="Columns of X = rows of W.")] = None,
    n: Annotated[_Text, typer.Option("--n", metavar="COLS", help="Columns of W (W is k x n).")] = None,
    batch: Annotated[_Text, typer.Option(metavar="N", help="Matmul: independent products (batched). Model: sequences per batch.")] = None,
    dtype: Annotated[str, typer.Option("--dtype", metavar="DTYPE", help="Element type: fp32, tf32, bf16, fp16, fp8, int8...")] = "fp16",
    model: Annotated[_Text, typer.Option(metavar="NAME|config.json", help="Tabulate one transformer layer of this model.")] = None,
    seq_len: Annotated[_Text, typer.Option(metavar="L", help="Sequence length (with --model).")] = None,
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="GPU preset for the roofline verdict.")] = None,
    peak: Annotated[_Text, typer.Option(metavar="FLOP/s", help="Peak FLOP/s for the roofline (overrides --gpu).")] = None,
    bandwidth: Annotated[_Text, typer.Option(metavar="B/s", help="Memory bandwidth for the roofline (overrides --gpu).")] = None,
    flash_attention: Annotated[Optional[bool], typer.Option("--flash-attention/--no-flash-attention", help="With --model: attention timed as FlashAttention kernels (default); --no-flash-attention: as explicit GEMMs and softmax.", show_default=False)] = None,  # noqa: UP045
    compile_: Annotated[bool, typer.Option("--compile", help="With --model: torch.compile's fused memory-bound kernels (see Assumptions).")] = False,
    kernels: KernelsOption = None,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: PictureOutputOption = None,
    power_limit: PowerLimitOption = None,
) -> None:
    """Arithmetic intensity (FLOP per byte moved) and the roofline verdict on a GPU."""
    start(output, fmt, picture=True)
    from parcalc.results.intensity import from_flags

    result = from_flags(m=m, k=k, n=n, batch=batch, dtype=dtype, model=model, seq_len=seq_len, gpu=gpu, peak=peak,
                        bandwidth=bandwidth, flash_attention=flash_attention, compile_=compile_, kernels=kernels,
                        presets=presets, power_limit=power_limit)
    finish(result, fmt, output)
