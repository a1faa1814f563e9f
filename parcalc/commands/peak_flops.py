"""`parcalc peak-flops`: peak FLOP/s from clock x SMs x FMA/clock, or from a GPU preset."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from parcalc.commands.common import (
    FormatOption,
    OutputOption,
    PowerLimitOption,
    PresetsOption,
    finish,
    preset_dirs,
    start,
)

if TYPE_CHECKING:  # annotations only: the command imports the core when it runs (start-up)
    from parcalc.core.flops import PeakFlops
    from parcalc.core.hardware import Gpu
    from parcalc.derivation import Result

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
    from parcalc.core.dtypes import canonical_dtype
    from parcalc.core.flops import PeakFlops, gpu_peak_flops
    from parcalc.core.flops import peak_flops as derive_peak
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    dtype_key = canonical_dtype(dtype) if dtype else ""
    clock_hz = parse_quantity(clock, Dimension.FREQUENCY, "--clock", require_unit=True) if clock is not None else None
    sm_count = parse_quantity(sms, Dimension.COUNT, "--sms") if sms is not None else None
    fma = parse_quantity(fma_per_clock, Dimension.COUNT, "--fma-per-clock") if fma_per_clock is not None else None
    settings = [("dtype", dtype_key or "unspecified"), ("sparse", str(sparse).lower())]
    if gpu is not None:
        from parcalc.commands.common import power_limited
        from parcalc.presets import load_gpu

        if power_limit is not None and clock_hz is not None:
            raise InputError("--power-limit: lowers the preset's rated clock; not with --clock (give the clock the GPU holds instead)")
        device = power_limited(load_gpu(gpu, preset_dirs(presets)), power_limit, peak_given=clock_hz is not None)
        if not dtype_key:
            raise InputError(f"--dtype: required with --gpu (e.g. --dtype tf32; {device.name} lists {', '.join(device.dtypes)})")
        peak = gpu_peak_flops(device, dtype_key, sparse=sparse, clock_hz=clock_hz, sm_count=sm_count, fma_per_clock_per_sm=fma)
        settings.insert(0, ("gpu", device.key))
    else:
        from parcalc.commands.common import power_limited

        power_limited(None, power_limit)  # --power-limit without --gpu: a one-line error
        missing = [flag for flag, value in (("--clock", clock_hz), ("--sms", sm_count), ("--fma-per-clock", fma)) if value is None]
        if missing:
            raise InputError(f"give --gpu NAME, or all of --clock, --sms and --fma-per-clock (missing: {', '.join(missing)})")
        derived = derive_peak(clock_hz, sm_count, fma, dtype=dtype_key, sparse=sparse,  # type: ignore[arg-type]
                              sources=("given", "given", "given"))  # fmt: skip
        peak = PeakFlops(dtype_key, sparse, "", derived, None, None)
    inputs = peak.derived.inputs if peak.derived else ()
    result = peak.result(inputs)
    if gpu is not None:
        result = _under_power_limit(result, peak, device)
    finish(type(result)(**{**result.__dict__, "settings": tuple(settings)}), fmt, output)


def _under_power_limit(result: Result, peak: PeakFlops, device: Gpu | None) -> Result:
    """With a power limit in force (--power-limit, or the preset's own): the Tensor Core share the
    power curve gives there and the peak the GPU reaches, the headline answer."""
    from dataclasses import replace

    from parcalc.core.power import capped_peak, tensor_power_scale

    scale = tensor_power_scale(device)
    if scale is None:
        return result
    rated = peak.derived or peak.datasheet
    assert rated is not None  # gpu_peak_flops refuses a GPU with neither
    capped = capped_peak(rated.value, scale, peak.dtype, rated.source)
    verdict = (f"under the {scale.inputs[0].value:g} W power limit: {capped.value / 1e12:,.1f} TFLOP/s "
               f"({scale.value * 100:.2f} % of the rated {rated.value / 1e12:,.1f})")
    note = "power limit: the power curve's points are Tensor Core rates; other units (FP32, FP64) are taken to follow the same SM clock"
    return replace(result, inputs=result.inputs + (scale.inputs[0],), derivations=result.derivations + (scale, capped),
                   verdicts=result.verdicts + (verdict,), assumptions=result.assumptions + (note,), answer="capped_peak")
