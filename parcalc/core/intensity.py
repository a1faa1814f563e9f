"""Arithmetic intensity of matrix multiplications and the roofline verdict on a GPU.

Traffic convention ("minimum traffic"): every operand is read from memory once and the output
written once, as if caches were perfect; real kernels move at least this much. The roofline is
Williams, Waterman and Patterson, "Roofline: an insightful visual performance model" (CACM 2009):
attainable FLOP/s = min(peak, intensity x memory bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

MIN_TRAFFIC = "minimum traffic: each operand read once and the output written once"
ROOFLINE_SOURCE = "Williams, Waterman & Patterson, Roofline (CACM 2009)"


def _dims(m: int, k: int, n: int, batch: int) -> tuple[Term, ...]:
    for name, value in (("--m", m), ("--k", k), ("--n", n), ("--batch", batch)):
        if value < 1:
            raise InputError(f"{name}: must be at least 1, got {value}")
    terms = [
        Term("m", "m", "m", m, "", "rows of X and Y"),
        Term("k", "k", "k", k, "", "columns of X, rows of W"),
        Term("n", "n", "n", n, "", "columns of W and Y"),
    ]
    if batch != 1:
        terms.insert(0, Term("batch", "b", "b", batch, "", "independent matmuls in the batch"))
    return tuple(terms)


def matmul_flops(m: int, k: int, n: int, batch: int = 1) -> Derivation:
    """FLOPs of Y = XW with X (m x k), W (k x n): m*n outputs, each k multiply-adds = 2mkn."""
    terms = _dims(m, k, n, batch)
    prefix, prefix_tex = ("$batch × ", r"$batch \times ") if batch != 1 else ("", "")
    return Derivation(
        key="flops",
        label="FLOPs of Y = XW",
        symbol="F",
        latex_symbol="F",
        formula=prefix + "2 × $m × $k × $n",
        formula_latex=prefix_tex + r"2 \times $m \times $k \times $n",
        inputs=terms,
        value=2.0 * batch * m * k * n,
        unit="FLOP",
        source="each of the m x n outputs takes k multiplies and k adds",
    )


def matmul_bytes(m: int, k: int, n: int, bytes_per_element: float, dtype: str = "", batch: int = 1) -> Derivation:
    """Bytes moved by Y = XW under the minimum-traffic convention: s (mk + kn + mn)."""
    if not bytes_per_element > 0:
        raise InputError(f"bytes per element must be positive, got {bytes_per_element}")
    terms = _dims(m, k, n, batch) + (
        Term("s", "s", "s", bytes_per_element, "B", f"bytes per {dtype} element".replace("  ", " ")),
    )
    prefix, prefix_tex = ("$batch × ", r"$batch \times ") if batch != 1 else ("", "")
    return Derivation(
        key="bytes",
        label="Bytes moved (X and W read, Y written)",
        symbol="Q",
        latex_symbol="Q",
        formula=prefix + "$s × ($m × $k + $k × $n + $m × $n)",
        formula_latex=prefix_tex + r"$s \times ($m \times $k + $k \times $n + $m \times $n)",
        inputs=terms,
        value=batch * bytes_per_element * (m * k + k * n + m * n),
        unit="B",
        source=MIN_TRAFFIC,
        assumptions=(MIN_TRAFFIC,),
    )


def arithmetic_intensity(flops: Derivation, traffic: Derivation) -> Derivation:
    """Intensity = FLOPs / bytes moved, in FLOP/B."""
    return Derivation(
        key="intensity",
        label="Arithmetic intensity",
        symbol="I",
        latex_symbol="I",
        formula="$flops / $bytes",
        formula_latex=r"\frac{$flops}{$bytes}",
        inputs=(flops.as_term("flops"), traffic.as_term("bytes")),
        value=flops.value / traffic.value,
        unit="FLOP/B",
        source="arithmetic intensity = FLOPs / bytes moved (" + ROOFLINE_SOURCE + ")",
        assumptions=traffic.assumptions,
    )


@dataclass(frozen=True)
class Roofline:
    """Where one kernel sits under a GPU's roofline."""

    ridge: Derivation
    attainable: Derivation
    time_lower_bound: Derivation
    compute_bound: bool

    @property
    def bound(self) -> str:
        return "compute-bound" if self.compute_bound else "memory-bound"

    @property
    def derivations(self) -> tuple[Derivation, ...]:
        return (self.ridge, self.attainable, self.time_lower_bound)


def ridge_point(peak: Term, bandwidth: Term) -> Derivation:
    return Derivation(
        key="ridge",
        label="Ridge point (peak / bandwidth)",
        symbol="I*",
        latex_symbol="I^{*}",
        formula="$peak / $bw",
        formula_latex=r"\frac{$peak}{$bw}",
        inputs=(peak, bandwidth),
        value=peak.value / bandwidth.value,
        unit="FLOP/B",
        source=ROOFLINE_SOURCE,
    )


def roofline(intensity: Derivation, flops: Derivation, traffic: Derivation, peak: Term, bandwidth: Term) -> Roofline:
    """Ridge point, attainable FLOP/s = min(peak, I x bandwidth), and time >= max(F/peak, Q/bandwidth).

    `peak` (FLOP/s) and `bandwidth` (B/s) are Terms with keys "peak" and "bw".
    """
    if not (peak.value > 0 and bandwidth.value > 0):
        raise InputError("the roofline needs a positive peak and memory bandwidth")
    ridge = ridge_point(peak, bandwidth)
    i_term = intensity.as_term("i")
    attainable = Derivation(
        key="attainable",
        label="Attainable FLOP/s",
        symbol="P_att",
        latex_symbol=r"P_{\mathrm{att}}",
        formula="min($peak, $i × $bw)",
        formula_latex=r"\min\left($peak,\ $i \times $bw\right)",
        inputs=(peak, i_term, bandwidth),
        value=min(peak.value, intensity.value * bandwidth.value),
        unit="FLOP/s",
        source=ROOFLINE_SOURCE,
    )
    time = Derivation(
        key="time_lower_bound",
        label="Time lower bound",
        symbol="t_min",
        latex_symbol=r"t_{\min}",
        formula="max($flops / $peak, $bytes / $bw)",
        formula_latex=r"\max\left(\frac{$flops}{$peak},\ \frac{$bytes}{$bw}\right)",
        inputs=(flops.as_term("flops"), peak, traffic.as_term("bytes"), bandwidth),
        value=max(flops.value / peak.value, traffic.value / bandwidth.value),
        unit="s",
        source=ROOFLINE_SOURCE,
        assumptions=("compute and memory traffic overlap perfectly",),
    )
    return Roofline(ridge, attainable, time, compute_bound=intensity.value >= ridge.value)
