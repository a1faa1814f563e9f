"""Measured timings analysed: speedup, parallel efficiency, compute and communication shares, the
all-reduce bandwidth achieved, and parcalc's ring all-reduce time beside each measurement.

Input is a list of `Measurement`s (one per row of a timings file: GPUs, batch, time, optional
compute and communication times and all-reduce size); `analyse_timings` returns a
`TimingsAnalysis` whose `result()` is what `parcalc analyze` shows. Pure: no files, no printing.

Conventions, stated because the literature mixes them:
- Rows are grouped by their batch column. A fixed *global* batch over N GPUs is strong scaling:
  the work of a step (or an epoch) is the same at every N, so S(N) = T(N0) / T(N) is the speedup.
- A fixed batch *per GPU* is weak scaling per step: a step on N GPUs does N times the work, so
  the step-time ratio t(N0)/t(N) (ideal 1) is not a speedup; the throughput speedup is
  (N/N0) t(N0)/t(N) (ideal N/N0). An *epoch* is the same data set at every N (DistributedSampler
  gives each of the N ranks 1/N of it), so the epoch-time ratio T(N0)/T(N) already is the
  throughput speedup, with or without a fixed per-GPU batch.
- Parallel efficiency E = S x N0 / N, the throughput speedup over the ideal N/N0.
- Achieved all-reduce bandwidth follows nccl-tests (NVIDIA/nccl-tests doc/PERFORMANCE.md, commit
  03a204a1, "Bus bandwidth", "AllReduce"): algbw = S / t and busbw = algbw x 2 (n-1)/n, S the
  bytes of the buffer being all-reduced; with K all-reduces inside the measured time, K S / t.
- The prediction is the ring all-reduce of parcalc.core.collectives (Patarasuk & Yuan 2009, the
  form seed 002 quotes): t = 2 (N-1) (alpha + S / (N beta)), times K.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise

from parcalc.core.hardware import Link
from parcalc.derivation import Column, Derivation, Result, Table, Term
from parcalc.errors import InputError

NCCL_TESTS_BUSBW = ("NVIDIA/nccl-tests doc/PERFORMANCE.md (commit 03a204a1), 'Bus bandwidth' / 'AllReduce': "
                    "algbw = S/t, busbw = algbw x 2(n-1)/n")  # fmt: skip
RING_SOURCE = ("parcalc.core.collectives, ring all-reduce: 2 (N-1) rounds of M/N (Patarasuk & Yuan, JPDC 2009: "
               "T = 2 (N-1) T(X itsize / N))")  # fmt: skip
SPEEDUP_SOURCE = "throughput speedup over N0 GPUs, efficiency E = S N0/N (Amdahl 1967; Gustafson 1988)"

# A step from N to N' GPUs that raises throughput by less than this share is "stagnating".
STALL_GAIN = 0.10
# Communication "explains" the time lost to imperfect scaling when it is at least this share of it.
EXPLAINS_SHARE = 0.5
# More rows than this is not a lab's table; it keeps the result (and a PDF of it) bounded.
MAX_ROWS = 1000


class TimeKind(str, Enum):
    STEP = "step"
    EPOCH = "epoch"


class BatchKind(str, Enum):
    PER_GPU = "per-gpu"
    GLOBAL = "global"


class Section(str, Enum):
    SPEEDUP = "speedup"
    BATCH = "batch"
    SHARES = "shares"
    BANDWIDTH = "bandwidth"


@dataclass(frozen=True)
class Measurement:
    """One measured configuration. Times in seconds over the same period (a step or an epoch).

    row: 1-based data row of the input, for messages. batch: per GPU or global, as the
    `Timings.batch_kind` says. message: bytes of one all-reduce (the gradient buffer);
    allreduces: how many of them the measured `comm` time covers.
    """

    row: int
    gpus: int
    batch: int
    time: float
    compute: float | None = None
    comm: float | None = None
    message: float | None = None
    allreduces: int = 1


@dataclass(frozen=True)
class Timings:
    rows: tuple[Measurement, ...]
    time_kind: TimeKind
    batch_kind: BatchKind
    where: str = "timings"  # the file or source, for messages
    message_source: str = ""  # where the all-reduce size came from


@dataclass(frozen=True)
class RowAnalysis:
    """What one row gives, against the baseline row of its batch group (its fewest GPUs)."""

    measurement: Measurement
    base: Measurement
    per_gpu_batch: float
    global_batch: float
    time_ratio: float  # T(N0) / T(N)
    speedup: float  # throughput speedup over N0 GPUs
    efficiency: float  # speedup x N0 / N
    compute_share: float | None = None
    comm_share: float | None = None
    other_share: float | None = None
    algbw: float | None = None
    busbw: float | None = None
    predicted: float | None = None  # K x ring all-reduce time on the given link
    ratio: float | None = None  # measured comm / predicted


@dataclass(frozen=True)
class TimingsAnalysis:
    timings: Timings
    rows: tuple[RowAnalysis, ...]  # grouped by batch, then by GPUs
    link: Link | None = None
    verdicts: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def row(self, batch: int, gpus: int) -> RowAnalysis:
        for analysed in self.rows:
            if analysed.measurement.batch == batch and analysed.measurement.gpus == gpus:
                return analysed
        raise KeyError((batch, gpus))

    def result(self, sections: Sequence[Section] = tuple(Section)) -> Result:
        return timings_result(self, sections)


# ---------------------------------------------------------------------------------------------
# Checks


def _at(timings: Timings, m: Measurement, column: str) -> str:
    return f"{timings.where}: row {m.row}, column '{column}'"


def check_timings(timings: Timings) -> None:
    """Refuse what cannot be analysed, naming the row and column (InputError)."""
    rows = timings.rows
    if not rows:
        raise InputError(f"{timings.where}: no data rows; give one row per measured configuration (gpus, batch, time)")
    if len(rows) > MAX_ROWS:
        raise InputError(f"{timings.where}: {len(rows):,} rows; parcalc analyses at most {MAX_ROWS:,}")
    batch_column = "batch_per_gpu" if timings.batch_kind is BatchKind.PER_GPU else "global_batch"
    seen: dict[tuple[int, int], Measurement] = {}
    for m in rows:
        if m.gpus < 1:
            raise InputError(f"{_at(timings, m, 'gpus')}: {m.gpus} GPUs; give at least 1")
        if m.batch < 1:
            raise InputError(f"{_at(timings, m, batch_column)}: batch {m.batch}; give at least 1")
        for column, value in (("time", m.time), ("compute", m.compute), ("comm", m.comm)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InputError(f"{_at(timings, m, column)}: {value!r} s; a measured time must be a positive number")
        for column, part in (("compute", m.compute), ("comm", m.comm)):
            if part is not None and part > m.time:
                raise InputError(f"{_at(timings, m, column)}: {part:g} s is more than the row's whole time, {m.time:g} s; "
                                 "give both over the same period (a step or an epoch)")  # fmt: skip
        if m.message is not None and not (math.isfinite(m.message) and m.message > 0):
            raise InputError(f"{_at(timings, m, 'message_bytes')}: {m.message!r} B; the all-reduce size must be positive")
        if m.allreduces < 1:
            raise InputError(f"{_at(timings, m, 'allreduces')}: {m.allreduces}; give at least 1")
        key = (m.batch, m.gpus)
        if key in seen:
            raise InputError(f"{_at(timings, m, 'gpus')}: {m.gpus} GPUs at batch {m.batch} again (first at row {seen[key].row}); "
                             "give each configuration once (average repeated runs first)")  # fmt: skip
        seen[key] = m
    if len(rows) == 1:
        raise InputError(f"{timings.where}: one row only; a speedup needs the same batch measured on at least two GPU counts")
    if not any(len(group) > 1 for group in _groups(rows).values()):
        raise InputError(f"{timings.where}: no batch size is measured on two GPU counts, so there is no speedup to compute; "
                         f"give rows with the same {batch_column} and different gpus")  # fmt: skip


def _groups(rows: Sequence[Measurement]) -> dict[int, list[Measurement]]:
    groups: dict[int, list[Measurement]] = {}
    for m in sorted(rows, key=lambda r: (r.batch, r.gpus)):
        groups.setdefault(m.batch, []).append(m)
    return groups


# ---------------------------------------------------------------------------------------------
# Per-row quantities


def throughput_speedup(kind: TimeKind, batch: BatchKind, base_gpus: int, base_time: float, gpus: int, time: float) -> float:
    """X(N)/X(N0): (N/N0) t(N0)/t(N) for step times at a fixed per-GPU batch (a step does N/N0
    times the work), T(N0)/T(N) otherwise (the same work at every N: a fixed global batch, or an
    epoch of the same data set)."""
    ratio = base_time / time
    if kind is TimeKind.STEP and batch is BatchKind.PER_GPU:
        return gpus / base_gpus * ratio
    return ratio


def parallel_efficiency(speedup: float, base_gpus: int, gpus: int) -> float:
    """E = S N0 / N: the throughput speedup over the ideal N/N0."""
    return speedup * base_gpus / gpus


def ring_allreduce_time(size: float, workers: int, link: Link) -> float:
    """parcalc's ring all-reduce time 2 (N-1) (alpha + S/(N beta)), from parcalc.core.collectives."""
    from parcalc.core.collectives import Algorithm, Collective, collective_cost

    cost = collective_cost(Collective.ALL_REDUCE, Algorithm.RING, float(size), workers)
    return cost.time(link.bandwidth_per_direction.value, link.latency.value)


def allreduce_bus_factor(workers: int) -> float:
    from parcalc.core.collectives import Collective, bus_factor

    return bus_factor(Collective.ALL_REDUCE, workers)


def _analyse_row(timings: Timings, m: Measurement, base: Measurement, link: Link | None) -> RowAnalysis:
    per_gpu = m.batch if timings.batch_kind is BatchKind.PER_GPU else m.batch / m.gpus
    global_batch = m.batch * m.gpus if timings.batch_kind is BatchKind.PER_GPU else m.batch
    speedup = throughput_speedup(timings.time_kind, timings.batch_kind, base.gpus, base.time, m.gpus, m.time)
    compute_share = m.compute / m.time if m.compute is not None else None
    comm_share = m.comm / m.time if m.comm is not None else None
    other = None
    if compute_share is not None and comm_share is not None:
        other = 1.0 - compute_share - comm_share
    algbw = busbw = predicted = ratio = None
    if m.comm is not None and m.message is not None and m.gpus > 1:
        algbw = m.allreduces * m.message / m.comm
        busbw = algbw * allreduce_bus_factor(m.gpus)
        if link is not None:
            predicted = m.allreduces * ring_allreduce_time(m.message, m.gpus, link)
            ratio = m.comm / predicted if predicted > 0 else None
    return RowAnalysis(m, base, per_gpu, global_batch, base.time / m.time, speedup,
                       parallel_efficiency(speedup, base.gpus, m.gpus), compute_share, comm_share, other,
                       algbw, busbw, predicted, ratio)  # fmt: skip


def analyse_timings(timings: Timings, link: Link | None = None) -> TimingsAnalysis:
    """Every row against the fewest GPUs measured at its batch, with verdicts."""
    check_timings(timings)
    analysed: list[RowAnalysis] = []
    for group in _groups(timings.rows).values():
        base = group[0]
        analysed += [_analyse_row(timings, m, base, link) for m in group]
    rows = tuple(analysed)
    return TimingsAnalysis(timings, rows, link, _verdicts(timings, rows, link), _notes(timings, rows))


# ---------------------------------------------------------------------------------------------
# Verdicts


def _batch_text(timings: Timings, batch: int) -> str:
    return f"batch {batch} per GPU" if timings.batch_kind is BatchKind.PER_GPU else f"global batch {batch}"


def _ideal_time(timings: Timings, previous: Measurement, gpus: int) -> float:
    """The time at `gpus` if throughput grew in proportion to the GPUs from `previous`."""
    if timings.time_kind is TimeKind.STEP and timings.batch_kind is BatchKind.PER_GPU:
        return previous.time  # weak scaling: the same step time
    return previous.time * previous.gpus / gpus


def _verdicts(timings: Timings, rows: tuple[RowAnalysis, ...], link: Link | None) -> tuple[str, ...]:
    verdicts = []
    for batch, group in _grouped(rows).items():
        if len(group) < 2:
            continue
        label = _batch_text(timings, batch)
        last = group[-1]
        base = last.base
        verdicts.append(f"{label}: {last.measurement.gpus} GPUs give a throughput speedup of {last.speedup:.3g} over "
                        f"{base.gpus} (ideal {last.measurement.gpus / base.gpus:g}), efficiency {last.efficiency:.1%}")  # fmt: skip
        for previous, current in pairwise(group):
            p, c = previous.measurement, current.measurement
            gain = current.speedup / previous.speedup
            ideal_gain = c.gpus / p.gpus
            if gain >= 1 + STALL_GAIN * (ideal_gain - 1):
                continue
            change = "falls" if gain < 1 else "stagnates"
            verdicts.append(f"{label}: throughput {change} from {p.gpus} to {c.gpus} GPUs (x{gain:.4g}, ideal x{ideal_gain:g}); "
                            + _explanation(timings, p, c))  # fmt: skip
    if link is not None:
        ratios = [r for r in rows if r.ratio is not None]
        if ratios:
            low = min(ratios, key=lambda r: r.ratio or 0.0)
            high = max(ratios, key=lambda r: r.ratio or 0.0)
            verdicts.append(f"measured communication is {low.ratio:.3g}x to {high.ratio:.3g}x parcalc's ring all-reduce time on "
                            f"{link.name} ({'slower' if (low.ratio or 0) > 1 else 'faster' if (high.ratio or 0) < 1 else 'around'} "
                            "than the model)")  # fmt: skip
    return tuple(verdicts)


def _explanation(timings: Timings, previous: Measurement, current: Measurement) -> str:
    """Whether the measured communication accounts for the time lost against ideal scaling."""
    ideal = _ideal_time(timings, previous, current.gpus)
    lost = current.time - ideal
    parts = [f"{current.time:.4g} s where {ideal:.4g} s is ideal, {lost:.4g} s lost"]
    if current.comm is None:
        parts.append("no communication time measured, so whether it explains the loss cannot be told")
    elif current.comm >= EXPLAINS_SHARE * lost:
        parts.append(f"communication ({current.comm:.4g} s) explains it ({current.comm / lost:.0%} of the loss)")
    else:
        parts.append(f"communication does not explain it: {current.comm:.4g} s is {current.comm / lost:.1%} of the loss")
    if previous.compute is not None and current.compute is not None:
        ideal_compute = _ideal_time(timings, Measurement(0, previous.gpus, previous.batch, previous.compute), current.gpus)
        if current.compute > 1.5 * ideal_compute:
            parts.append(f"compute did not shrink ({previous.compute:.4g} s on {previous.gpus} GPUs, {current.compute:.4g} s "
                         f"on {current.gpus}, ideal {ideal_compute:.4g} s)")  # fmt: skip
    if current.compute is not None and current.comm is not None:
        rest = current.time - current.compute - current.comm
        if rest > 0:
            parts.append(f"{rest:.4g} s ({rest / current.time:.0%}) is neither compute nor communication")
    return "; ".join(parts)


def _grouped(rows: Sequence[RowAnalysis]) -> dict[int, list[RowAnalysis]]:
    groups: dict[int, list[RowAnalysis]] = {}
    for row in rows:
        groups.setdefault(row.measurement.batch, []).append(row)
    return groups


def _notes(timings: Timings, rows: tuple[RowAnalysis, ...], chosen: Sequence[Section] = tuple(Section)) -> tuple[str, ...]:
    notes = []
    if timings.batch_kind is BatchKind.PER_GPU:
        if timings.time_kind is TimeKind.EPOCH:
            notes.append("fixed batch per GPU, epoch times: an epoch is the same data set at every N (each of N ranks takes 1/N "
                         "of it), so T(N0)/T(N) is the throughput speedup (ideal N/N0); per step this is weak scaling, "
                         "and the step time ratio t(N0)/t(N) = T(N0) N0 / (T(N) N) equals the efficiency (ideal 1)")  # fmt: skip
        else:
            notes.append("fixed batch per GPU, step times: weak scaling; a step on N GPUs does N/N0 times the work, so "
                         "T(N0)/T(N) (ideal 1) is not a speedup: the throughput speedup is (N/N0) T(N0)/T(N)")  # fmt: skip
    else:
        notes.append("fixed global batch: strong scaling, the same work at every N; S = T(N0)/T(N), ideal N/N0")
    for batch, group in _grouped(rows).items():
        if len(group) == 1:
            notes.append(f"{_batch_text(timings, batch)}: one GPU count only (row {group[0].measurement.row}), no speedup")
        elif group[0].base.gpus > 1:
            notes.append(f"{_batch_text(timings, batch)}: no 1-GPU row; speedup and efficiency are over {group[0].base.gpus} GPUs")
    if Section.SHARES in chosen and any(r.measurement.comm is not None for r in rows):
        notes.append("compute and communication shares are of the row's whole time; 'other' is the rest (data loading, "
                     "synchronisation, optimizer), negative when communication overlaps compute")  # fmt: skip
    if Section.BANDWIDTH not in chosen:
        return tuple(notes)
    if any(r.algbw is not None for r in rows):
        source = f" ({timings.message_source})" if timings.message_source else ""
        notes.append(f"all-reduce size S{source}: algbw = K S / t_comm with K all-reduces in the measured time")
    if any(r.measurement.comm is not None and r.measurement.message is None and r.measurement.gpus > 1 for r in rows):
        notes.append("no all-reduce size: give a message_bytes column, --message-size, --params or --model for algbw and busbw")
    return tuple(notes)


# ---------------------------------------------------------------------------------------------
# The result


def _key(m: Measurement) -> str:
    return f"b{m.batch}_n{m.gpus}"


def _where(timings: Timings, m: Measurement) -> str:
    return f"{_batch_text(timings, m.batch)}, {m.gpus} GPUs"


def _time_terms(timings: Timings, row: RowAnalysis) -> tuple[Term, Term, Term, Term]:
    m, base = row.measurement, row.base
    kind = timings.time_kind.value
    t0 = Term("t0", f"T({base.gpus})", f"T({base.gpus})", base.time, "s", f"{kind} time on {base.gpus} GPU(s), row {base.row}")
    tn = Term("tn", f"T({m.gpus})", f"T({m.gpus})", m.time, "s", f"{kind} time on {m.gpus} GPUs, row {m.row}")
    n0 = Term("n0", "N0", "N_0", base.gpus, "", "GPUs of the baseline row")
    n = Term("n", "N", "N", m.gpus, "", "GPUs")
    return t0, tn, n0, n


def speedup_derivations(timings: Timings, row: RowAnalysis) -> tuple[Derivation, Derivation]:
    t0, tn, n0, n = _time_terms(timings, row)
    m = row.measurement
    weak_steps = timings.time_kind is TimeKind.STEP and timings.batch_kind is BatchKind.PER_GPU
    if weak_steps:
        formula, latex = "($n / $n0) × $t0 / $tn", r"\frac{$n}{$n0} \cdot \frac{$t0}{$tn}"
        inputs: tuple[Term, ...] = (n, n0, t0, tn)
        why = "fixed batch per GPU, step times: a step on N GPUs does N/N0 times the work"
    else:
        formula, latex = "$t0 / $tn", r"\frac{$t0}{$tn}"
        inputs = (t0, tn)
        why = ("an epoch is the same data set at every N" if timings.time_kind is TimeKind.EPOCH
               else "fixed global batch: the same work at every N")  # fmt: skip
    speedup = Derivation(f"speedup_{_key(m)}", f"Throughput speedup, {_where(timings, m)}", f"S({m.gpus})", f"S({m.gpus})",
                         formula, latex, inputs, row.speedup, "", f"{SPEEDUP_SOURCE}; {why}")  # fmt: skip
    efficiency = Derivation(f"efficiency_{_key(m)}", f"Parallel efficiency, {_where(timings, m)}", f"E({m.gpus})", f"E({m.gpus})",
                            "$s × $n0 / $n", r"\frac{$s \cdot $n0}{$n}", (speedup.as_term("s"), n0, n), row.efficiency,
                            "fraction", SPEEDUP_SOURCE)  # fmt: skip
    return speedup, efficiency


def batch_derivations(timings: Timings) -> tuple[Derivation, ...]:
    """At each GPU count with two batch sizes or more: T(smallest batch) / T(largest batch), a
    ratio of times at the same N (how seed 002's Tables 2 and 3 compute their 'Speedup')."""
    by_gpus: dict[int, list[Measurement]] = {}
    for m in sorted(timings.rows, key=lambda r: (r.gpus, r.batch)):
        by_gpus.setdefault(m.gpus, []).append(m)
    out = []
    kind = timings.time_kind.value
    for gpus, group in by_gpus.items():
        if len(group) < 2:
            continue
        first, last = group[0], group[-1]
        t0 = Term("tb0", f"T(b={first.batch})", rf"T(b{{=}}{first.batch})", first.time, "s", f"{kind} time at batch {first.batch}, row {first.row}")
        t1 = Term("tb1", f"T(b={last.batch})", rf"T(b{{=}}{last.batch})", last.time, "s", f"{kind} time at batch {last.batch}, row {last.row}")
        out.append(Derivation(
            f"batch_ratio_n{gpus}", f"Time ratio of batch {first.batch} to batch {last.batch}, {gpus} GPU(s)", "R_b", r"R_b",
            "$tb0 / $tb1", r"\frac{$tb0}{$tb1}", (t0, t1), first.time / last.time, "",
            "ratio of measured times at the same GPU count (not a speedup over GPUs)",
        ))  # fmt: skip
    return tuple(out)


def share_derivations(timings: Timings, row: RowAnalysis) -> tuple[Derivation, ...]:
    m = row.measurement
    total = Term("t", "T", "T", m.time, "s", f"measured {timings.time_kind.value} time, row {m.row}")
    out = []
    for key, label, value, share in (("compute", "Compute", m.compute, row.compute_share), ("comm", "Communication", m.comm, row.comm_share)):
        if value is None or share is None:
            continue
        part = Term(key, f"t_{key}", rf"t_{{\mathrm{{{key}}}}}", value, "s", f"measured {label.lower()} time, row {m.row}")
        out.append(Derivation(f"{key}_share_{_key(m)}", f"{label} share, {_where(timings, m)}", f"share_{key}",
                              rf"\mathrm{{share}}_{{\mathrm{{{key}}}}}", f"${key} / $t", rf"\frac{{${key}}}{{$t}}", (part, total),
                              share, "fraction", "measured time over the row's whole time"))  # fmt: skip
    return tuple(out)


def bandwidth_derivations(timings: Timings, row: RowAnalysis, link: Link | None) -> tuple[Derivation, ...]:
    m = row.measurement
    if row.algbw is None or row.busbw is None or m.comm is None or m.message is None:
        return ()
    size = Term("m", "S", "S", m.message, "B", "bytes of one all-reduce" + (f" ({timings.message_source})" if timings.message_source else ""))
    tc = Term("tc", "t_comm", r"t_{\mathrm{comm}}", m.comm, "s", f"measured communication time, row {m.row}")
    k = Term("k", "K", "K", m.allreduces, "", "all-reduces in the measured time")
    n = Term("n", "N", "N", m.gpus, "", "GPUs in the all-reduce")
    many = m.allreduces != 1
    algbw = Derivation(
        f"algbw_{_key(m)}", f"Achieved algbw, {_where(timings, m)}", "algbw", r"\mathrm{algbw}",
        "$k × $m / $tc" if many else "$m / $tc", r"\frac{$k \cdot $m}{$tc}" if many else r"\frac{$m}{$tc}",
        (k, size, tc) if many else (size, tc), row.algbw, "B/s", NCCL_TESTS_BUSBW,
    )  # fmt: skip
    busbw = Derivation(
        f"busbw_{_key(m)}", f"Achieved busbw, {_where(timings, m)}", "busbw", r"\mathrm{busbw}",
        "$algbw × 2 × ($n - 1) / $n", r"$algbw \cdot \frac{2 ($n - 1)}{$n}", (algbw.as_term("algbw"), n), row.busbw, "B/s",
        NCCL_TESTS_BUSBW,
    )  # fmt: skip
    out: list[Derivation] = [algbw, busbw]
    if link is not None and row.predicted is not None:
        alpha = Term("alpha", "α", r"\alpha", link.latency.value, "s", f"{link.name}, latency per message", link.latency.source)
        beta = Term("beta", "β", r"\beta", link.bandwidth_per_direction.value, "B/s", f"{link.name}, bandwidth per direction",
                    link.bandwidth_per_direction.source)  # fmt: skip
        ring = "2 × ($n - 1) × ($alpha + $m / ($n × $beta))"
        ring_tex = r"2 ($n - 1) \left($alpha + \frac{$m}{$n \cdot $beta}\right)"
        predicted = Derivation(
            f"ring_time_{_key(m)}", f"Ring all-reduce time (parcalc), {_where(timings, m)}", "t_ring", r"t_{\mathrm{ring}}",
            f"$k × {ring}" if many else ring, rf"$k \cdot {ring_tex}" if many else ring_tex,
            ((k,) if many else ()) + (n, alpha, size, beta), row.predicted, "s", RING_SOURCE,
        )  # fmt: skip
        out.append(predicted)
        if row.ratio is not None:
            out.append(Derivation(
                f"ring_ratio_{_key(m)}", f"Measured over predicted communication, {_where(timings, m)}", "r", "r",
                "$tc / $tr", r"\frac{$tc}{$tr}", (tc, predicted.as_term("tr")), row.ratio, "", "measurement / parcalc's model",
            ))  # fmt: skip
    return tuple(out)


def timings_result(analysis: TimingsAnalysis, sections: Sequence[Section] = tuple(Section)) -> Result:
    """Derivations at the most GPUs of each batch, tables of every row, verdicts and notes."""
    timings = analysis.timings
    chosen = set(sections)
    derivations: list[Derivation] = []
    tables: list[Table] = []
    groups = _grouped(analysis.rows)
    if Section.SPEEDUP in chosen:
        for group in groups.values():
            if len(group) > 1:
                derivations += speedup_derivations(timings, group[-1])
        tables.append(speedup_table(analysis))
    if Section.BATCH in chosen:
        batch = batch_table(analysis)
        if batch is not None:
            derivations += batch_derivations(timings)
            tables.append(batch)
    if Section.SHARES in chosen:
        shares = shares_table(analysis)
        if shares is not None:
            for group in groups.values():
                split = [r for r in group if r.measurement.compute is not None or r.measurement.comm is not None]
                if split:
                    derivations += share_derivations(timings, split[-1])
            tables.append(shares)
    if Section.BANDWIDTH in chosen:
        for group in groups.values():
            with_comm = [r for r in group if r.algbw is not None]
            if with_comm:
                derivations += bandwidth_derivations(timings, with_comm[-1], analysis.link)
        bandwidth = bandwidth_table(analysis)
        if bandwidth is not None:
            tables.append(bandwidth)
    settings = [("data", timings.where), ("time_is", timings.time_kind.value),
                ("batch", "per GPU (weak scaling per step)" if timings.batch_kind is BatchKind.PER_GPU else "global (strong scaling)")]  # fmt: skip
    if analysis.link is not None:
        settings.append(("link", analysis.link.key))
    return Result(
        command="analyze",
        title=f"Measured timings: {timings.where}",
        inputs=(),
        derivations=tuple(derivations),
        tables=tuple(tables),
        verdicts=_chosen_verdicts(analysis.verdicts, chosen),
        assumptions=_notes(timings, analysis.rows, tuple(chosen)),
        settings=tuple(settings),
    )


def _chosen_verdicts(verdicts: tuple[str, ...], chosen: set[Section]) -> tuple[str, ...]:
    if Section.SPEEDUP in chosen:
        return verdicts
    return tuple(v for v in verdicts if v.startswith("measured communication") and Section.BANDWIDTH in chosen)


def speedup_table(analysis: TimingsAnalysis) -> Table:
    kind = analysis.timings.time_kind.value
    columns = (
        Column("batch_per_gpu", "batch/GPU"), Column("global_batch", "global batch"), Column("gpus", "N"),
        Column("time", f"{kind} time T", "s"), Column("time_ratio", "T(N0)/T(N)"), Column("speedup", "speedup S"),
        Column("efficiency", "efficiency E", "fraction"),
    )  # fmt: skip
    rows = tuple((r.per_gpu_batch, r.global_batch, r.measurement.gpus, r.measurement.time, r.time_ratio, r.speedup, r.efficiency)
                 for r in analysis.rows)  # fmt: skip
    title = "Speedup per batch size (S: throughput speedup over N0, the fewest GPUs of the batch; E = S N0/N)"
    return Table("speedup", title, columns, rows)


def batch_table(analysis: TimingsAnalysis) -> Table | None:
    """T(b_prev)/T(b) at the same GPU count: the ratio of the batch sizes' times, not a GPU speedup."""
    by_gpus: dict[int, list[Measurement]] = {}
    for m in sorted(analysis.timings.rows, key=lambda r: (r.gpus, r.batch)):
        by_gpus.setdefault(m.gpus, []).append(m)
    rows = []
    for gpus, group in by_gpus.items():
        for index, m in enumerate(group):
            previous = group[index - 1] if index else None
            rows.append((gpus, m.batch, m.time, previous.time / m.time if previous else None, group[0].time / m.time))
    if all(len(group) < 2 for group in by_gpus.values()):
        return None
    column = "batch/GPU" if analysis.timings.batch_kind is BatchKind.PER_GPU else "global batch"
    columns = (Column("gpus", "N"), Column("batch", column), Column("time", "time T", "s"),
               Column("vs_previous", "T(prev b)/T(b)"), Column("vs_first", "T(first b)/T(b)"))  # fmt: skip
    return Table("batch", "Time ratios between batch sizes on the same GPUs (not a speedup over GPUs)", columns, tuple(rows))


def shares_table(analysis: TimingsAnalysis) -> Table | None:
    rows = tuple((r.measurement.batch, r.measurement.gpus, r.measurement.time, _or_dash(r.measurement.compute),
                  _or_dash(r.measurement.comm), _or_dash(r.compute_share), _or_dash(r.comm_share), _or_dash(r.other_share))
                 for r in analysis.rows if r.measurement.compute is not None or r.measurement.comm is not None)  # fmt: skip
    if not rows:
        return None
    column = "batch/GPU" if analysis.timings.batch_kind is BatchKind.PER_GPU else "global batch"
    columns = (Column("batch", column), Column("gpus", "N"), Column("time", "time T", "s"), Column("compute", "compute", "s"),
               Column("comm", "comm", "s"), Column("compute_share", "compute/T", "fraction"),
               Column("comm_share", "comm/T", "fraction"), Column("other_share", "other/T", "fraction"))  # fmt: skip
    return Table("shares", "Compute and communication as shares of the measured time", columns, rows)


def bandwidth_table(analysis: TimingsAnalysis) -> Table | None:
    measured = [r for r in analysis.rows if r.algbw is not None]
    if not measured:
        return None
    column = "batch/GPU" if analysis.timings.batch_kind is BatchKind.PER_GPU else "global batch"
    columns: tuple[Column, ...] = (Column("batch", column), Column("gpus", "N"), Column("message", "S", "B"),
                                   Column("allreduces", "K"), Column("comm", "t_comm", "s"), Column("algbw", "algbw", "B/s"),
                                   Column("busbw", "busbw", "B/s"))  # fmt: skip
    with_model = analysis.link is not None
    if with_model:
        columns += (Column("predicted", "t_ring", "s"), Column("ratio", "t_comm/t_ring"))
    rows = []
    for r in measured:
        m = r.measurement
        row: tuple[object, ...] = (m.batch, m.gpus, m.message, m.allreduces, m.comm, r.algbw, r.busbw)
        if with_model:
            row += (_or_dash(r.predicted), _or_dash(r.ratio))
        rows.append(row)
    title = "All-reduce bandwidth achieved: algbw = K S/t_comm, busbw = algbw 2(N-1)/N (nccl-tests)"
    if with_model:
        title += f"; t_ring = K 2(N-1)(alpha + S/(N beta)) on {analysis.link.name}"  # type: ignore[union-attr]
    return Table("bandwidth", title, columns, tuple(rows))


def _or_dash(value: float | None) -> object:
    """A missing value: None, shown as '-' and written as null."""
    return value
