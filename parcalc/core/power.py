"""The Tensor Core rate of a GPU under a board power limit.

A GPU holds its board power under the enforced limit by lowering its SM clock (nvidia-smi
--help-query-gpu, clocks_throttle_reasons.sw_power_cap: 'SW Power Scaling algorithm is reducing the
clocks below requested clocks because the GPU is consuming too much power'); the Tensor Cores' rate
is proportional to that clock. NVIDIA sells the same
die at several powers and rates each at its own clock, and measurements sweep the limit of one
board: each such pair is a point of a GPU preset's `power_curve` ({power, tensor_scale, source},
tensor_scale relative to the preset's own dense peaks). Between two points the scale is linear
in the limit; at or above the highest point it is that point's (the peaks are rated there); below
the lowest point there is no rate to give, and a limit there is refused rather than guessed.

Only Tensor Core work scales (GEMMs and FlashAttention, parcalc.core.timing.compute): the HBM
clock is not the one the power cap lowers, so memory-bound kernels keep their bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import replace

from parcalc.core.hardware import Gpu, PowerPoint, Sourced
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

POWER_SOURCE = "linear interpolation between a GPU's rated or measured (power limit, Tensor Core rate) points (parcalc.core.power)"
MEMORY_ASSUMPTION = ("memory-bound kernels keep the HBM bandwidth: the power cap lowers the SM clock, not the memory clock; "
                     "no source measures HBM bandwidth against the cap on this GPU")  # fmt: skip


def check_power_limit(gpu: Gpu, watts: float, flag: str = "--power-limit") -> None:
    """A limit the GPU's curve can answer for: finite, above zero, at most the board power, and
    not below the curve's lowest point (no extrapolation)."""
    if not (isinstance(watts, (int, float)) and math.isfinite(watts) and watts > 0):
        raise InputError(f"{flag}: a board power limit above 0 W such as 500W, got {watts!r}")
    if not gpu.power_curve:
        raise InputError(f"{flag}: {gpu.name}'s preset has no power curve (no rated or measured Tensor Core rate below its "
                         "board power), so a power limit cannot be timed on it")  # fmt: skip
    if gpu.board_power is not None and watts > gpu.board_power.value * (1 + 1e-9):
        raise InputError(f"{flag}: {watts:g} W is above {gpu.name}'s board power of {gpu.board_power.value:g} W")
    lowest = gpu.power_curve[0]
    if watts < lowest.watts * (1 - 1e-9):
        raise InputError(f"{flag}: {watts:g} W is below the lowest point of {gpu.name}'s power curve ({lowest.watts:g} W); "
                         "parcalc does not extrapolate a clock below the rated and measured points")  # fmt: skip


def with_power_limit(gpu: Gpu, watts: float, source: str = "--power-limit (given)", flag: str = "--power-limit") -> Gpu:
    """The same GPU with its board power limited to `watts` (checked against its curve)."""
    check_power_limit(gpu, watts, flag)
    return replace(gpu, power_limit=Sourced(float(watts), "W", source))


def tensor_power_scale(gpu: Gpu | None) -> Derivation | None:
    """The share of the preset's dense peaks the Tensor Cores reach at the GPU's power limit;
    None when no limit is set (the peaks as rated)."""
    if gpu is None or gpu.power_limit is None:
        return None
    limit = gpu.power_limit
    check_power_limit(gpu, limit.value, "power_limit")
    points = gpu.power_curve
    p = Term("P_limit", "P_limit", r"P_{\mathrm{limit}}", limit.value, "W", "board power limit", limit.source)
    assumptions = [
        "the Tensor Core rate follows the SM clock the GPU holds under the limit; GEMMs and FlashAttention scale by it",
        MEMORY_ASSUMPTION,
    ]
    above = next((i for i, point in enumerate(points) if point.watts >= limit.value), None)
    if above is None or points[above].watts == limit.value or (above == 0):
        point = points[-1] if above is None else points[above]
        why = ("at or above the curve's highest point: its rate (the peaks are rated there)" if above is None
               else "a point of the curve")  # fmt: skip
        s = _scale_term("s", point, "Tensor Core rate at that point")
        assumptions.insert(0, f"{limit.value:g} W is {why}")
        return _derivation("$s", "$s", (p, s), point.tensor_scale, tuple(assumptions))
    low, high = points[above - 1], points[above]
    inputs = (
        p,
        Term("P_lo", "P_lo", r"P_{\mathrm{lo}}", low.watts, "W", "curve point below the limit", low.source),
        Term("P_hi", "P_hi", r"P_{\mathrm{hi}}", high.watts, "W", "curve point above the limit", high.source),
        _scale_term("s_lo", low, "Tensor Core rate at P_lo"),
        _scale_term("s_hi", high, "Tensor Core rate at P_hi"),
    )
    value = low.tensor_scale + (limit.value - low.watts) / (high.watts - low.watts) * (high.tensor_scale - low.tensor_scale)
    assumptions.insert(0, f"an interpolation: linear in the limit between the curve's points at {low.watts:g} W and {high.watts:g} W; "
                          "no rate was rated or measured at the limit itself")  # fmt: skip
    return _derivation("$s_lo + ($P_limit - $P_lo) / ($P_hi - $P_lo) × ($s_hi - $s_lo)",
                       r"$s_lo + \frac{$P_limit - $P_lo}{$P_hi - $P_lo} \left($s_hi - $s_lo\right)", inputs, value, tuple(assumptions))  # fmt: skip


def describe(scale: Derivation) -> str:
    """One line on where the scale comes from, for a table of inputs."""
    watts = {term.key: term.value for term in scale.inputs}
    if "P_lo" in watts:
        return f"share of the rated peaks at the limit, interpolated between {watts['P_lo']:g} W and {watts['P_hi']:g} W"
    return "share of the rated peaks at the limit (a point of the power curve)"


def _scale_term(key: str, point: PowerPoint, description: str) -> Term:
    latex = {"s": "s", "s_lo": r"s_{\mathrm{lo}}", "s_hi": r"s_{\mathrm{hi}}"}[key]
    return Term(key, key, latex, point.tensor_scale, "fraction", f"{description} ({point.watts:g} W)", point.source)


def _derivation(formula: str, latex: str, inputs: tuple[Term, ...], value: float, assumptions: tuple[str, ...]) -> Derivation:
    return Derivation(
        key="power_scale",
        label="Tensor Core rate under the power limit",
        symbol="s_P",
        latex_symbol=r"s_{P}",
        formula=formula,
        formula_latex=latex,
        inputs=inputs,
        value=value,
        unit="fraction",
        source=POWER_SOURCE,
        assumptions=assumptions,
    )


def capped_peak(peak: float, scale: Derivation, dtype: str, peak_source: str) -> Derivation:
    """The dense peak the Tensor Cores reach under the limit: peak x s_P."""
    inputs = (
        Term("F_peak", "F_peak", r"F_{\mathrm{peak}}", peak, "FLOP/s", f"{dtype} dense peak as rated".replace("  ", " "), peak_source),
        scale.as_term("s_P"),
    )
    return Derivation(
        key="capped_peak",
        label=f"{dtype.upper()} dense peak under the power limit".lstrip(),
        symbol="F_cap",
        latex_symbol=r"F_{\mathrm{cap}}",
        formula="$F_peak × $s_P",
        formula_latex=r"$F_peak \times $s_P",
        inputs=inputs,
        value=peak * scale.value,
        unit="FLOP/s",
        source=POWER_SOURCE,
        assumptions=scale.assumptions,
    )
