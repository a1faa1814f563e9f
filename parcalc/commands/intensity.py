"""`parcalc intensity`: arithmetic intensity of a matmul or of a transformer layer's operations."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, PictureOutputOption, PresetsOption, finish, preset_dirs, start

EXAMPLES = """\
\b
Examples:
  parcalc intensity --m 4096 --k 4096 --n 4096 --dtype fp16
  parcalc intensity --m 32 --k 4096 --n 32 --dtype fp16 --gpu a100-sxm4-80gb
  parcalc intensity --model homework-7b --batch 128 --seq-len 4096 --dtype fp16 --gpu a100-sxm4-80gb
  parcalc intensity --m 8192 --k 8192 --n 8192 --peak 989TFLOP/s --bandwidth 3.35TB/s
  parcalc intensity --model llama3-8b --batch 1 --seq-len 4096 --gpu h100-sxm5 -o roof.svg
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


def intensity(
    m: Annotated[_Text, typer.Option("--m", metavar="ROWS", help="Rows of X (X is m x k).")] = None,
    k: Annotated[_Text, typer.Option("--k", metavar="INNER", help="Columns of X = rows of W.")] = None,
    n: Annotated[_Text, typer.Option("--n", metavar="COLS", help="Columns of W (W is k x n).")] = None,
    batch: Annotated[_Text, typer.Option(metavar="N", help="Matmul: independent products (batched). Model: sequences per batch.")] = None,
    dtype: Annotated[str, typer.Option(metavar="DTYPE", help="Element type: fp32, tf32, bf16, fp16, fp8, int8...")] = "fp16",
    model: Annotated[_Text, typer.Option(metavar="NAME|config.json", help="Tabulate one transformer layer of this model.")] = None,
    seq_len: Annotated[_Text, typer.Option(metavar="L", help="Sequence length (with --model).")] = None,
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="GPU preset for the roofline verdict.")] = None,
    peak: Annotated[_Text, typer.Option(metavar="FLOP/s", help="Peak FLOP/s for the roofline (overrides --gpu).")] = None,
    bandwidth: Annotated[_Text, typer.Option(metavar="B/s", help="Memory bandwidth for the roofline (overrides --gpu).")] = None,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: PictureOutputOption = None,
) -> None:
    """Arithmetic intensity (FLOP per byte moved) and the roofline verdict on a GPU."""
    start(output, fmt, picture=True)
    from parcalc.core.dtypes import bytes_per_element, canonical_dtype
    from parcalc.core.intensity import layer_intensity, matmul_intensity
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    dtype_key = canonical_dtype(dtype)
    element_bytes = bytes_per_element(dtype_key)
    machine = _machine(gpu, peak, bandwidth, dtype_key, preset_dirs(presets))
    if model is not None:
        if any(v is not None for v in (m, k, n)):
            raise InputError("--model: give either --model (a layer table) or --m/--k/--n (one matmul), not both")
        from parcalc.presets import load_model

        shape = load_model(model, preset_dirs(presets))
        sequences = parse_count(batch or 1, "--batch")
        length = parse_count(seq_len, "--seq-len") if seq_len else (shape.max_seq_len or 0)
        if length == 0:
            raise InputError("--seq-len: required (the model preset has no maximum sequence length)")
        result = layer_intensity(shape, sequences, length, dtype_key, element_bytes, machine)
    else:
        missing = [flag for flag, value in (("--m", m), ("--k", k), ("--n", n)) if value is None]
        if missing:
            raise InputError(f"give --m, --k and --n (missing: {', '.join(missing)}), or --model")
        result = matmul_intensity(
            parse_count(m, "--m"), parse_count(k, "--k"), parse_count(n, "--n"),  # type: ignore[arg-type]
            dtype_key, element_bytes, parse_count(batch or 1, "--batch"), machine,
        )  # fmt: skip
    finish(result, fmt, output)


def _machine(gpu: str | None, peak: str | None, bandwidth: str | None, dtype: str, dirs: tuple) -> object:
    """The roofline's two roofs from a GPU preset and/or explicit --peak / --bandwidth."""
    from parcalc.core.intensity import machine_terms
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    if gpu is None and peak is None and bandwidth is None:
        return None
    peak_value = parse_quantity(peak, Dimension.FLOP_RATE, "--peak", require_unit=True) if peak else None
    bw_value = parse_quantity(bandwidth, Dimension.BANDWIDTH, "--bandwidth", require_unit=True) if bandwidth else None
    name, peak_source, bw_source = "the given machine", "given on the command line", "given on the command line"
    if gpu is not None:
        from parcalc.core.flops import gpu_peak_flops
        from parcalc.presets import load_gpu

        device = load_gpu(gpu, dirs)
        name = device.name
        if peak_value is None:
            chosen = gpu_peak_flops(device, dtype)
            peak_value = chosen.value
            peak_source = (chosen.derived or chosen.datasheet).source  # type: ignore[union-attr]
        if bw_value is None:
            bw_value, bw_source = device.memory_bandwidth.value, device.memory_bandwidth.source
    if peak_value is None or bw_value is None:
        raise InputError("the roofline needs both --peak and --bandwidth, or --gpu")
    return machine_terms(name, peak_value, peak_source, bw_value, bw_source)
