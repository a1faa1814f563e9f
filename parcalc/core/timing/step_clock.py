"""The SM clock a training step holds under the board's power limit, from the power its work draws.

A GPU holds its board power under the enforced limit by lowering its SM clock (nvidia-smi's throttle reason
sw_power_cap: 'SW Power Scaling algorithm is reducing the clocks below requested clocks because the GPU is consuming
too much power'); when the step draws less than the limit at the highest clock, nothing is lowered. What draws the
power is the Tensor Core work: measured on one H200 (../shared/measurements/h200-2026-11-28/train-step-profiles.json),
the two steps whose GEMM and attention kernels fill 54 % of the wall time sat at the 700 W limit with the cap active
(1485-1905 MHz, median 1672.5), while the host-bound step, whose GPU waits for Python a fifth of the time and runs
small GEMMs, ran at the 1980 MHz maximum with the cap inactive.

The model: a step's board power relative to the capped steps' scales with its Tensor Core load u (the GEMM and
attention kernel time over the step's wall time) and with the clock's n-th power (dynamic power f V^2, the voltage
rising with the clock):

    P(f, u) / P_limit = (u / u_ref) (f / f_ref)^n

with (u_ref, f_ref) the capped steps' load and measured clock (they drew the limit), and n from the GPU's power curve
(two rated (power, Tensor Core clock) points of the same die; the preset names them). The clock the step holds is the
highest at which P <= P_limit:

    f = min(f_max, f_ref (u_ref / u)^(1/n))

u itself depends on f (GEMMs are shorter at a higher clock): the step is timed once at f_max, its GEMM main loops are
then taken to scale as 1/f (their tiles' fixed costs do not, a few per cent of them), and so is the share of the
non-vectorised element kernels' time that follows the SM clock (parcalc.core.timing.elementwise.ElementClock), to solve
for f, and the step is timed again at that clock. Assumed: the power the rest of the step draws (memory-bound kernels, the idle GPU) is in the
same proportion to its Tensor Core load as in the capped steps; HBM's clock is not lowered (parcalc.core.power).
"""

from __future__ import annotations

from parcalc.core.timing.gemm_tiles import TiledGemm
from parcalc.derivation import Derivation, Term

SOURCE = ("parcalc.core.timing.step_clock: the clock under the board's power limit from the step's Tensor Core load, "
          "P / P_limit = (u / u_ref) (f / f_ref)^n")  # fmt: skip
UNCAPPED = "the step draws less than the board's limit at the highest clock: the power cap does not bind"
CAPPED = "the step would draw more than the board's limit at the highest clock: the power cap lowers the SM clock until it fits"


def tensor_load(t_gemm: float, t_attention: float, t_step: float) -> float:
    """The share of the step's wall time its Tensor Cores are busy (GEMM and attention kernels)."""
    return (t_gemm + t_attention) / t_step if t_step > 0 else 0.0


def power_over_limit(tiled: TiledGemm, clock: float, load: float) -> float:
    """P(f, u) / P_limit of a step with Tensor Core load `load` at `clock` (Hz)."""
    return load / tiled.training_load * (clock / tiled.training_clock) ** tiled.power_exponent


def load_at(clock: float, max_clock: float, t_gemm: float, t_attention: float, t_step: float, t_clocked: float = 0.0) -> float:
    """The step's Tensor Core load at `clock`, from its times at `max_clock`, its GEMMs' main loops and the element kernels'
    clocked share (`t_clocked`, seconds at `max_clock`) scaling as 1/clock."""
    gemm, clocked = t_gemm * max_clock / clock, t_clocked * max_clock / clock
    return tensor_load(gemm, t_attention, t_step - t_gemm - t_clocked + gemm + clocked)


def solve_clock(tiled: TiledGemm, t_gemm: float, t_attention: float, t_step: float, t_clocked: float = 0.0) -> tuple[float, float]:
    """(clock in Hz, Tensor Core load there) of a step timed at the GPU's highest clock (its GEMM, attention and step
    times there, and the element kernels' time that follows the clock): f_max where the power stays under the limit, else
    the clock where P(f, u(f)) = P_limit (bisection; P rises with f)."""
    f_max = tiled.max_clock
    at_max = load_at(f_max, f_max, t_gemm, t_attention, t_step, t_clocked)
    if power_over_limit(tiled, f_max, at_max) <= 1.0:
        return f_max, at_max
    low, high = 0.0, f_max
    for _ in range(60):
        mid = (low + high) / 2
        if power_over_limit(tiled, mid, load_at(mid, f_max, t_gemm, t_attention, t_step, t_clocked)) > 1.0:
            high = mid
        else:
            low = mid
    return low, load_at(low, f_max, t_gemm, t_attention, t_step, t_clocked)


def clock_derivation(tiled: TiledGemm, clock: float, load: float) -> Derivation:
    """f = min(f_max, f_ref (u_ref / u)^(1/n)) with the step's load u at that clock."""
    inputs = (
        Term("f_max", "f_max", r"f_{\max}", tiled.max_clock, "Hz", "the GPU's highest SM clock", tiled.power_source),
        Term("f_ref", "f_ref", r"f_{\mathrm{ref}}", tiled.training_clock, "Hz", "the SM clock of the steps measured at the power limit",
             tiled.clock_source),
        Term("u_ref", "u_ref", r"u_{\mathrm{ref}}", tiled.training_load, "fraction",
             "their Tensor Core load: GEMM and attention kernel time over wall time", tiled.power_source),
        Term("u", "u", "u", load, "fraction", "this step's Tensor Core load at its clock (GEMM and attention time over t_step)"),
        Term("n", "n", "n", tiled.power_exponent, "", "power ~ clock^n under the limit (the GPU's power curve)", tiled.power_source),
    )  # fmt: skip
    capped = clock < tiled.max_clock
    return Derivation(
        key="sm_clock",
        label="SM clock of the step under the power limit",
        symbol="f_SM",
        latex_symbol=r"f_{\mathrm{SM}}",
        formula="min($f_max, $f_ref × ($u_ref / $u)^(1/$n))",
        formula_latex=r"\min\left($f_max, $f_ref \left(\frac{$u_ref}{$u}\right)^{1/$n}\right)",
        inputs=inputs,
        value=clock,
        unit="Hz",
        source=SOURCE,
        assumptions=(CAPPED if capped else UNCAPPED,
                     "the power of the rest of the step (memory-bound kernels, the GPU idle) in the capped steps' proportion to "
                     "its Tensor Core load; the GEMMs' main loops and the element kernels' clocked share scale as 1/f in the "
                     "solve, the tiles' fixed costs do not"),
    )  # fmt: skip
