"""Arithmetic intensity of matrix multiplications and the roofline verdict on a GPU.

Traffic convention ("minimum traffic"): every operand is read from memory once and the output
written once, as if caches were perfect; real kernels move at least this much. The roofline is
Williams, Waterman and Patterson, "Roofline: an insightful visual performance model" (CACM 2009):
attainable FLOP/s = min(peak, intensity x memory bandwidth).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.derivation import Column, Derivation, Result, Table, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.model import TransformerModel

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


@frozen
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


# ---------------------------------------------------------------------------------------------
# What `parcalc intensity` shows


@frozen
class Machine:
    """The two roofs: peak FLOP/s of the dtype (key "peak") and memory bandwidth (key "bw")."""

    name: str
    peak: Term
    bandwidth: Term


def machine_terms(name: str, peak_flops: float, peak_source: str, bandwidth: float, bandwidth_source: str) -> Machine:
    return Machine(
        name=name,
        peak=Term("peak", "P", r"P_{\mathrm{peak}}", peak_flops, "FLOP/s", "peak FLOP/s of the dtype", peak_source),
        bandwidth=Term("bw", "BW", r"B_{\mathrm{mem}}", bandwidth, "B/s", "memory bandwidth", bandwidth_source),
    )


def matmul_intensity(m: int, k: int, n: int, dtype: str, bytes_per_element: float, batch: int = 1,
                     machine: Machine | None = None) -> Result:  # fmt: skip
    """FLOPs, bytes, intensity of Y = XW and, given a machine, its roofline verdict."""
    flops = matmul_flops(m, k, n, batch)
    traffic = matmul_bytes(m, k, n, bytes_per_element, dtype, batch)
    intensity = arithmetic_intensity(flops, traffic)
    derivations: tuple[Derivation, ...] = (flops, traffic, intensity)
    verdicts: tuple[str, ...] = ()
    shape = f"X ∈ R^({m}×{k}), W ∈ R^({k}×{n})" + (f", batch of {batch}" if batch != 1 else "")
    if machine is not None:
        roof = roofline(intensity, flops, traffic, machine.peak, machine.bandwidth)
        derivations += roof.derivations
        verdicts = (
            f"{roof.bound} on {machine.name}: intensity {intensity.value:.2f} FLOP/B "
            f"{'>=' if roof.compute_bound else '<'} ridge point {roof.ridge.value:.2f} FLOP/B",
        )
    return Result(
        command="intensity",
        title=f"Arithmetic intensity of Y = XW, {shape}, {dtype.upper()}",
        inputs=traffic.inputs,
        derivations=derivations,
        verdicts=verdicts,
        settings=(("dtype", dtype),) + ((("gpu", machine.name),) if machine else ()),
    )


_LAYER_COLUMNS = (
    Column("op", "operation"),
    Column("kind", "kind"),
    Column("shape", "shape"),
    Column("flops", "FLOPs", "FLOP"),
    Column("bytes", "bytes", "B"),
    Column("intensity", "intensity", "FLOP/B"),
)
_ROOF_COLUMNS = (
    Column("bound", "bound"),
    Column("attainable", "attainable", "FLOP/s"),
    Column("time", "time ≥", "s"),
)


def layer_intensity(model: TransformerModel, batch: int, seq_len: int, dtype: str, bytes_per_element: float,
                    machine: Machine | None = None) -> Result:  # fmt: skip
    """The table of every forward operation of one layer, with roofline verdicts on a machine."""
    if model.mamba is not None:  # its layers are one block each, not attention and an MLP
        raise InputError(f"--model: {model.name} is a Mamba-2 hybrid of one block per layer; parcalc flops lists its Mamba-2, "
                         "attention and MLP blocks' operations")  # fmt: skip
    moe = model.moe is not None  # an MoE model: one of its MoE layers (router, routed and shared experts)
    from parcalc.core.layer_ops import transformer_layer_ops  # here: a matmul's intensity needs no model

    ops = transformer_layer_ops(model, batch, seq_len, bytes_per_element, moe_layer=moe)
    columns = _LAYER_COLUMNS + (_ROOF_COLUMNS if machine else ())
    rows = []
    for op in ops:
        row: tuple[object, ...] = (op.name, op.kind, op.shape, op.flops, op.bytes, op.intensity)
        if machine is not None:
            peak, bw = machine.peak.value, machine.bandwidth.value
            compute_bound = op.intensity >= peak / bw
            row += ("compute" if compute_bound else "memory", min(peak, op.intensity * bw), max(op.flops / peak, op.bytes / bw))
        rows.append(row)
    total_flops = sum(op.flops for op in ops)
    total_bytes = sum(op.bytes for op in ops)
    totals = (
        _sum_derivation("layer_flops", "Forward FLOPs of one layer", "F_layer", total_flops, "FLOP"),
        _sum_derivation("layer_bytes", "Bytes moved by one layer's operations", "Q_layer", total_bytes, "B"),
    )
    verdicts: tuple[str, ...] = ()
    if machine is not None:
        ridge = machine.peak.value / machine.bandwidth.value
        memory_bound = [op.name for op in ops if op.intensity < ridge]
        verdicts = (
            f"ridge point of {machine.name}: {ridge:.2f} FLOP/B; memory-bound: {', '.join(memory_bound) or 'none'}",
        )
    inputs = (
        Term("b", "B", "B", batch, "", "sequences in the batch"),
        Term("l", "L", "L", seq_len, "", "sequence length"),
        Term("d", "D", "D", model.hidden, "", "model dimension"),
        Term("n_h", "n_H", "n_H", model.heads, "", "attention heads"),
        Term("h", "H", "H", model.head_dim, "", "head dimension"),
        Term("d_ff", "D_ff", r"D_{\mathrm{ff}}", model.ffn_hidden, "", "MLP hidden width"),
        Term("s", "s", "s", bytes_per_element, "B", f"bytes per {dtype} element"),
    ) + ((machine.peak, machine.bandwidth) if machine else ())
    return Result(
        command="intensity",
        title=f"Operations of one {model.name} {'MoE ' if moe else ''}layer, B={batch}, L={seq_len}, {dtype.upper()}",
        inputs=inputs,
        derivations=totals,
        tables=(Table("ops", "Forward operations of one layer", columns, tuple(rows)),),
        verdicts=verdicts,
        assumptions=(MIN_TRAFFIC, "element-wise FLOP per element as stated in parcalc.core.layer_ops",
                     *((f"MoE layer ({model.moe_layers} of {model.layers}): routed experts as grouped GEMMs of tokens x top_k / experts "
                        "tokens each (balanced routing), every expert's weights read once",) if moe else ())),
        settings=(("model", model.key), ("dtype", dtype)) + ((("gpu", machine.name),) if machine else ()),
    )


def _sum_derivation(key: str, label: str, symbol: str, value: float, unit: str) -> Derivation:
    return Derivation(
        key=key, label=label, symbol=symbol, latex_symbol=symbol.replace("_layer", r"_{\mathrm{layer}}"),
        formula="sum over the operations in the table", formula_latex=r"\textstyle\sum_{\mathrm{ops}}",
        inputs=(), value=value, unit=unit, source="sum of the table's column",
    )  # fmt: skip
