"""Peak FLOP/s of a GPU: from its clock, SMs and FMA rate (`peak_flops`), or as its preset states it
per element type, dense and 2:4 sparse (`gpu_peak_flops`), beside the datasheet's figure.

Its own module: `parcalc peak-flops` is a one-liner, and the training FLOPs (parcalc.core.flops)
are not on its path."""

from __future__ import annotations

from parcalc.core.hardware import Gpu, Sourced
from parcalc.derivation import Derivation, Result, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen

FLOP_PER_FMA = 2  # a fused multiply-add is one multiply and one add
SPARSITY_SPEEDUP = 2  # 2:4 structured sparsity skips half the multiplies (A100 whitepaper, "Sparsity")

PEAK_SOURCE = "peak = 2 FLOP per FMA x clock x SMs x FMA/clock/SM (e.g. NVIDIA A100 whitepaper, Table 1 footnotes)"


def peak_flops(
    clock_hz: float,
    sm_count: float,
    fma_per_clock_per_sm: float,
    *,
    dtype: str = "",
    sparse: bool = False,
    sources: tuple[str, str, str] = ("", "", ""),
) -> Derivation:
    """Peak FLOP/s = 2 x clock (Hz) x SMs x dense FMA per clock per SM (x 2 with 2:4 sparsity).

    `sources` gives, in order, where the clock, SM count and FMA rate came from.
    """
    for name, value in (("clock", clock_hz), ("SM count", sm_count), ("FMA per clock per SM", fma_per_clock_per_sm)):
        if not value > 0:
            raise InputError(f"{name} must be greater than zero, got {value}")
    inputs = (
        Term("f", "f", "f", clock_hz, "Hz", "clock rate", sources[0]),
        Term("n_sm", "N_SM", r"N_{\mathrm{SM}}", sm_count, "", "streaming multiprocessors", sources[1]),
        Term("fma", "FMA", r"\mathrm{FMA}", fma_per_clock_per_sm, "", f"dense {dtype} FMA per clock per SM".replace("  ", " "), sources[2]),
    )
    value = FLOP_PER_FMA * clock_hz * sm_count * fma_per_clock_per_sm
    formula, latex = "2 × $f × $n_sm × $fma", r"2 \times $f \times $n_sm \times $fma"
    assumptions = ["one FMA counts as 2 FLOP (a multiply and an add)", "every SM issues at its peak rate on every clock"]
    if sparse:
        value *= SPARSITY_SPEEDUP
        formula, latex = "2 × " + formula, r"2 \times " + latex
        assumptions.append("2:4 structured sparsity doubles the Tensor Core rate (the leading factor 2)")
    label = f"Peak {dtype.upper()} FLOP/s{' (sparse)' if sparse else ''}".replace("  ", " ")
    return Derivation(
        key="peak_flops",
        label=label,
        symbol="P",
        latex_symbol=r"P_{\mathrm{peak}}",
        formula=formula,
        formula_latex=latex,
        inputs=inputs,
        value=value,
        unit="FLOP/s",
        source=PEAK_SOURCE,
        assumptions=tuple(assumptions),
    )


def datasheet_peak(gpu: Gpu, dtype: str, sparse: bool = False) -> Derivation | None:
    """The peak the GPU's datasheet lists for this dtype, as a derivation with no formula."""
    rates = gpu.dtypes.get(dtype)
    listed = None if rates is None else (rates.sparse_peak if sparse else rates.dense_peak)
    if listed is None:
        return None
    term = Term("p_ds", "P_datasheet", r"P_{\mathrm{datasheet}}", listed.value, "FLOP/s", "datasheet peak", listed.source)
    return Derivation(
        key="datasheet_peak",
        label=f"Datasheet {dtype.upper()} peak{' (sparse)' if sparse else ''} of {gpu.name}",
        symbol="P_datasheet",
        latex_symbol=r"P_{\mathrm{datasheet}}",
        formula="$p_ds",
        formula_latex="$p_ds",
        inputs=(term,),
        value=listed.value,
        unit="FLOP/s",
        source=listed.source,
    )


def relative_difference(derived: Derivation, listed: Derivation) -> Derivation:
    """(derived - datasheet) / datasheet, as a fraction."""
    value = (derived.value - listed.value) / listed.value
    return Derivation(
        key="difference",
        label="Derived vs datasheet",
        symbol="Δ",
        latex_symbol=r"\Delta",
        formula="($p - $p_ds) / $p_ds",
        formula_latex=r"\frac{$p - $p_ds}{$p_ds}",
        inputs=(derived.as_term("p"), listed.as_term("p_ds")),
        value=value,
        unit="fraction",
        source="datasheet peaks are rounded, and some are quoted at a different clock",
    )


@frozen
class PeakFlops:
    """The peak FLOP/s of one dtype: derived from primitives, listed in a datasheet, or both."""

    dtype: str
    sparse: bool
    gpu_name: str
    derived: Derivation | None
    datasheet: Derivation | None
    difference: Derivation | None

    @property
    def value(self) -> float:
        """The headline peak in FLOP/s: the derived one when it exists, else the datasheet's."""
        chosen = self.derived or self.datasheet
        assert chosen is not None  # guaranteed by gpu_peak_flops / peak_flops_result
        return chosen.value

    def result(self, inputs: tuple[Term, ...]) -> Result:
        derivations = tuple(d for d in (self.derived, self.datasheet, self.difference) if d is not None)
        verdicts = []
        if self.difference is not None:
            verdicts.append(f"derived peak differs from the datasheet by {self.difference.value * 100:+.3f} %")
        title = f"Peak {self.dtype.upper()} FLOP/s" + (f" of {self.gpu_name}" if self.gpu_name else "")
        shown = self.derived or self.datasheet
        return Result(
            command="peak-flops",
            title=title,
            inputs=inputs,
            derivations=derivations,
            verdicts=tuple(verdicts),
            answer=shown.key if shown else "",
        )


def gpu_peak_flops(
    gpu: Gpu,
    dtype: str,
    *,
    sparse: bool = False,
    clock_hz: float | None = None,
    sm_count: float | None = None,
    fma_per_clock_per_sm: float | None = None,
) -> PeakFlops:
    """Peak of `dtype` on a GPU preset; explicit primitives override the preset's values."""
    rates = gpu.dtypes.get(dtype)
    if rates is None and fma_per_clock_per_sm is None:
        names = ", ".join(gpu.dtypes) or "none"
        raise InputError(f"--dtype: {gpu.name} has no {dtype} rate in its datasheet (it lists: {names})")
    if sparse and (rates is None or rates.sparse_peak is None):
        # 2:4 sparsity exists only where the vendor says so; never assume the 2x elsewhere.
        raise InputError(f"--sparse: {gpu.name}'s datasheet gives no sparse {dtype} rate")

    def pick(override: float | None, preset: Sourced | None) -> tuple[float | None, str]:
        if override is not None:
            return override, "given on the command line"
        return (preset.value, preset.source) if preset is not None else (None, "")

    clock, clock_source = pick(clock_hz, gpu.boost_clock)
    sms, sms_source = pick(sm_count, gpu.sms)
    fma, fma_source = pick(fma_per_clock_per_sm, rates.fma_per_clock_per_sm if rates else None)
    derived = None
    if clock is not None and sms is not None and fma is not None:
        derived = peak_flops(clock, sms, fma, dtype=dtype, sparse=sparse, sources=(clock_source, sms_source, fma_source))
    listed = datasheet_peak(gpu, dtype, sparse)
    if derived is None and listed is None:
        raise InputError(f"--dtype: {gpu.name} lists neither an FMA rate nor a peak for {dtype}")
    difference = relative_difference(derived, listed) if derived and listed else None
    return PeakFlops(dtype, sparse, gpu.name, derived, listed, difference)
