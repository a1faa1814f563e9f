"""`peak-flops`: peak FLOP/s from clock x SMs x FMA/clock, or a GPU preset's, from a typed request."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.derivation import Result


@frozen
class PeakFlopsRequest:
    """What `peak-flops` is asked, parsed: a clock in Hz, counts as numbers, a canonical dtype."""

    gpu: str | None = None  # a GPU preset's name
    dtype: str = ""  # canonical (parcalc.core.dtypes); "" when not given
    clock_hz: float | None = None
    sm_count: float | None = None
    fma_per_clock: float | None = None
    sparse: bool = False
    presets: tuple[Path, ...] = ()
    power_limit: str | None = None  # read against the GPU's power curve (parcalc.results.parse.power_limited)


def request(gpu: str | None = None, dtype: str | None = None, clock: str | None = None, sms: str | None = None,
            fma_per_clock: str | None = None, sparse: bool = False, presets: list[Path] | None = None,
            power_limit: str | None = None) -> PeakFlopsRequest:  # fmt: skip
    from parcalc.core.dtypes import canonical_dtype
    from parcalc.results.parse import preset_dirs
    from parcalc.units import Dimension, parse_quantity

    return PeakFlopsRequest(
        gpu=gpu,
        dtype=canonical_dtype(dtype) if dtype else "",
        clock_hz=parse_quantity(clock, Dimension.FREQUENCY, "--clock", require_unit=True) if clock is not None else None,
        sm_count=parse_quantity(sms, Dimension.COUNT, "--sms") if sms is not None else None,
        fma_per_clock=parse_quantity(fma_per_clock, Dimension.COUNT, "--fma-per-clock") if fma_per_clock is not None else None,
        sparse=sparse,
        presets=preset_dirs(presets),
        power_limit=power_limit,
    )


def result(req: PeakFlopsRequest) -> Result:
    """Peak FLOP/s = 2 x clock x SMs x FMA/clock/SM, beside the datasheet's figure."""
    from parcalc.core.peak_flops import PeakFlops, gpu_peak_flops
    from parcalc.core.peak_flops import peak_flops as derive_peak
    from parcalc.errors import InputError
    from parcalc.results.parse import power_limited

    dtype_key, clock_hz, sm_count, fma, sparse = req.dtype, req.clock_hz, req.sm_count, req.fma_per_clock, req.sparse
    settings = [("dtype", dtype_key or "unspecified"), ("sparse", str(sparse).lower())]
    device = None
    if req.gpu is not None:
        from parcalc.presets import load_gpu

        if req.power_limit is not None and clock_hz is not None:
            raise InputError("--power-limit: lowers the preset's rated clock; not with --clock (give the clock the GPU holds instead)")
        device = power_limited(load_gpu(req.gpu, req.presets), req.power_limit, peak_given=clock_hz is not None)
        if not dtype_key:
            raise InputError(f"--dtype: required with --gpu (e.g. --dtype tf32; {device.name} lists {', '.join(device.dtypes)})")
        peak = gpu_peak_flops(device, dtype_key, sparse=sparse, clock_hz=clock_hz, sm_count=sm_count, fma_per_clock_per_sm=fma)
        settings.insert(0, ("gpu", device.key))
    else:
        power_limited(None, req.power_limit)  # --power-limit without --gpu: a one-line error
        missing = [flag for flag, value in (("--clock", clock_hz), ("--sms", sm_count), ("--fma-per-clock", fma)) if value is None]
        if missing:
            raise InputError(f"give --gpu NAME, or all of --clock, --sms and --fma-per-clock (missing: {', '.join(missing)})")
        derived = derive_peak(clock_hz, sm_count, fma, dtype=dtype_key, sparse=sparse,  # type: ignore[arg-type]
                              sources=("given", "given", "given"))  # fmt: skip
        peak = PeakFlops(dtype_key, sparse, "", derived, None, None)
    inputs = peak.derived.inputs if peak.derived else ()
    shown = peak.result(inputs)
    if device is not None:
        shown = _under_power_limit(shown, peak, device)
    return replace(shown, settings=tuple(settings))


def _under_power_limit(result: Result, peak: Any, device: Any) -> Result:
    """With a power limit in force (--power-limit, or the preset's own): the Tensor Core share the
    power curve gives there and the peak the GPU reaches, the headline answer."""
    from parcalc.core.power import capped_peak, tensor_power_scale

    scale = tensor_power_scale(device)
    if scale is None:
        return result
    rated = peak.derived or peak.datasheet
    capped = capped_peak(rated.value, scale, peak.dtype, rated.source)
    verdict = (f"under the {scale.inputs[0].value:g} W power limit: {capped.value / 1e12:,.1f} TFLOP/s "
               f"({scale.value * 100:.2f} % of the rated {rated.value / 1e12:,.1f})")
    note = "power limit: the power curve's points are Tensor Core rates; other units (FP32, FP64) are taken to follow the same SM clock"
    return replace(result, inputs=result.inputs + (scale.inputs[0],), derivations=result.derivations + (scale, capped),
                   verdicts=result.verdicts + (verdict,), assumptions=result.assumptions + (note,), answer="capped_peak")  # fmt: skip


def from_flags(**flags: Any) -> Result:
    """`peak-flops`' Result from its flags as the command line gives them (parcalc.results.run)."""
    return result(request(**flags))
