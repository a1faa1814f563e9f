"""What `bubble` shows for one schedule: the closed forms beside the event simulation, where they differ, the micro-batches a
target bubble needs, and the simulation as derivations and tables (parcalc.core.pipeline holds the schedules' math)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from parcalc.core import pipeline_sim as sim
from parcalc.core.choices import Schedule
from parcalc.core.pipeline import (
    MAX_SIMULATED_OPERATIONS,
    MAX_SIMULATED_STAGES,
    PassTimes,
    bubble_relative_to_ideal,
    bubble_share_of_total,
    bubble_time,
    check_shape,
    fewest_micro_batches,
    ideal_time,
    in_flight_micro_batches,
    micro_batches_for_target,
    operation_count,
    pass_times,
    pending_weight_gradients,
    schedule_terms,
    simulate_schedule,
)
from parcalc.derivation import Column, Derivation, Result, Table, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen


@frozen
class BubbleAnalysis:
    """Closed forms and simulation of one schedule; `result()` is what `parcalc bubble` shows."""

    schedule: Schedule
    stages: int
    micro_batches: int
    chunks: int
    times: PassTimes
    stage_times: tuple[PassTimes, ...] | None
    latency: float
    closed: tuple[Derivation, ...]
    timeline: sim.Timeline | None
    stage_layers: tuple[int, ...] | None = None  # layers per stage when the times are per layer (`--layers`)
    chunk_layers: tuple[tuple[int, ...], ...] | None = None  # layers of each device's chunks (`--pipeline-layout`)
    pipeline_layout: str | None = None

    @property
    def title(self) -> str:
        chunks = f", v = {self.chunks} chunks" if self.schedule is Schedule.INTERLEAVED else ""
        if self.schedule is Schedule.DUALPIPE:
            return (f"Pipeline bubble of DualPipe: p = {self.stages} stages both ways (device d holds stage d and {self.stages} - 1 - d), "
                    f"m = {self.micro_batches} micro-batches (half each way)")  # fmt: skip
        if self.schedule.v_shape:
            return (f"Pipeline bubble of {self.schedule.label}: p = {self.stages} devices ({2 * self.stages} stages in a V, two a device), "
                    f"m = {self.micro_batches} micro-batches")  # fmt: skip
        return f"Pipeline bubble of {self.schedule.label}: p = {self.stages} stages, m = {self.micro_batches} micro-batches{chunks}"

    def closed_form(self, key: str) -> Derivation:
        return next(d for d in self.closed if d.key == key)

    def result(self) -> Result:
        terms = schedule_terms(self.schedule, self.stages, self.micro_batches, self.chunks, self.times)
        keys = ["p", "m"] + (["v"] if self.schedule is Schedule.INTERLEAVED else []) + ["t_f", "t_b"]
        inputs = [terms[k] for k in keys]
        if self.schedule.splits_backward:
            inputs.append(Term("t_w", "t_w", "t_w", self.times.weight, "s", "weight-gradient part of the backward (W)"))
        if self.latency:
            inputs.append(Term("latency", "α", r"\alpha", self.latency, "s", "point-to-point latency between stages (simulation)"))
        derivations = list(self.closed)
        tables: list[Table] = []
        verdicts = list(self._target_verdicts())
        assumptions = [
            "one micro-batch's pass on a stage is one indivisible operation; a device runs one operation at a time",
            "times per micro-batch per stage; with v chunks each chunk's pass takes 1/v of its stage's time",
        ]
        if self.chunk_layers is not None:
            per_device = "; ".join(f"device {d + 1}: {' + '.join(str(n) for n in row)}" for d, row in enumerate(self.chunk_layers[:4]))
            more = f"; ... ({self.stages} devices)" if self.stages > 4 else ""
            assumptions.append(f"--pipeline-layout {self.pipeline_layout}: each chunk's pass takes its own layers x one layer's time "
                               f"({per_device}{more}; an MTP layer m counts as one layer, the embedding E and loss L as none); "
                               "the closed forms take v equal chunks of the slowest device, the simulation each chunk's own")  # fmt: skip
        elif self.stage_layers is not None:
            from parcalc.core.stages import split_text

            assumptions.append(f"stages of {split_text(self.stage_layers)} layers: a stage's pass takes its layers x one layer's time "
                               "(embedding and LM head not counted)")  # fmt: skip
        if self.stage_times is not None:
            assumptions.append("unbalanced stages: the closed forms use the slowest stage's times (it sets the pace); the simulation uses each stage's own")
        if self.timeline is None:
            too_many = (f"more than {MAX_SIMULATED_STAGES:,} stages" if self.stages > MAX_SIMULATED_STAGES
                        else f"more than {MAX_SIMULATED_OPERATIONS:,} operations")  # fmt: skip
            verdicts.append(f"not simulated: {too_many}; the closed forms above need no simulation")
        else:
            derivations += simulated_derivations(self.timeline, self.schedule)
            tables += [timeline_table(self.timeline), device_table(self)]
            verdicts.append(self._agreement())
        settings = [("schedule", self.schedule.value)]
        if self.stage_times is not None:
            settings.append(("stage_times", ",".join(f"{t.forward:g}" for t in self.stage_times)))
        if self.stage_layers is not None:
            settings.append(("stage_layers", ",".join(str(n) for n in self.stage_layers)))
        if self.pipeline_layout is not None:
            settings.append(("pipeline_layout", self.pipeline_layout))
        return Result(
            command="bubble",
            title=self.title,
            inputs=tuple(inputs),
            derivations=tuple(derivations),
            tables=tuple(tables),
            verdicts=tuple(verdicts),
            assumptions=tuple(assumptions),
            settings=tuple(settings),
            main_table="devices",  # CSV: one row per device; --table timeline gives the simulation's events
        )

    def _target_verdicts(self) -> list[str]:
        out = []
        for derivation in self.closed:
            if not derivation.key.startswith("micro_batches_for_target"):
                continue
            m = int(derivation.value)
            tau = derivation.term("tau").value
            relative = derivation.key.endswith("relative")
            reached = (bubble_relative_to_ideal if relative else bubble_share_of_total)(self.schedule, self.stages, m, self.times, self.chunks)
            measure = "relative to ideal" if relative else "share of total"
            out.append(f"m = {m} micro-batches bring the bubble ({measure}) to {reached.value * 100:.4g} % (target {tau * 100:.4g} %)")
        return out

    def _agreement(self) -> str:
        timeline = self.timeline
        assert timeline is not None  # only called after simulating
        closed_time = self.closed_form("bubble_time").value
        if self.schedule is Schedule.ZB_H2:
            simulated, what = timeline.span_bubble, "per-device bubble (own first F to own last W)"
        else:
            simulated, what = timeline.total_idle / timeline.stages, "bubble time (mean idle per device)"
        scale = max(closed_time, timeline.makespan, 1e-300)
        if abs(simulated - closed_time) <= 1e-9 * scale:
            return f"the simulated {what} equals the closed form t_pb"
        reasons = []
        if self.stage_times is not None:
            reasons.append("unbalanced stages")
        if self.chunk_layers is not None and any(len(set(row)) > 1 for row in self.chunk_layers):
            reasons.append("unequal chunks")
        if self.latency:
            reasons.append("point-to-point latency")
        if self.micro_batches < fewest_micro_batches(self.schedule, self.stages):
            reasons.append("too few micro-batches for the closed form")
        if self.schedule.splits_backward and not (self.times.weight <= self.times.forward and self.times.weight <= self.times.input_gradient):
            reasons.append("T_W larger than T_F or T_B")
        why = f" ({', '.join(reasons)})" if reasons else ""
        return f"the simulated {what} is {simulated:.6g} s against the closed form's {closed_time:.6g} s{why}: the simulation is the schedule as run"


def analyse_bubble(
    schedule: Schedule,
    stages: int,
    micro_batches: int,
    *,
    chunks: int = 1,
    times: PassTimes | None = None,
    stage_times: Sequence[float] | None = None,
    latency: float = 0.0,
    target: float | None = None,
    stage_layers: Sequence[int] | None = None,
    chunk_layers: Sequence[Sequence[int]] | None = None,
    pipeline_layout: str | None = None,
) -> BubbleAnalysis:
    """Closed forms for the schedule and its simulation.

    stage_times: per-stage forward times in seconds (unbalanced stages); each stage's backward
    and W keep the ratios of `times` to its forward. The closed forms then use the slowest stage.
    stage_layers: transformer layers per stage (parcalc.core.stages.stage_split); `times` are then
    one layer's, and each stage's are its layers' (the slowest stage sets the pace).
    chunk_layers: layers of each device's chunks, chunk 0 first (a --pipeline-layout's virtual stages,
    parcalc.core.pipeline_layout.PipelineSplit.rank_chunks); `times` are one layer's, each chunk's
    pass its own layers' in the simulation (Megatron-LM runs each virtual stage's layers as one model chunk).
    """
    check_shape(schedule, stages, micro_batches, chunks)
    times = times or pass_times()
    shares: tuple[tuple[float, ...], ...] | None = None
    rows: tuple[tuple[int, ...], ...] | None = None
    if chunk_layers is not None:
        if stage_layers is not None or stage_times is not None:
            raise InputError("--pipeline-layout: gives each stage's layers; not with --layers or --stage-times")
        rows = tuple(tuple(row) for row in chunk_layers)
        if len(rows) != stages or any(len(row) != chunks for row in rows):
            raise InputError(f"--pipeline-layout: {chunks} chunks on each of {stages} devices expected")
        idle = [d for d, row in enumerate(rows) if sum(row) == 0]
        if idle:
            raise InputError(f"--pipeline-layout: pipeline rank {idle[0] + 1} holds no layer (t or m); bubble times a stage by its layers")
        stage_layers = [sum(row) for row in rows]
        shares = tuple(tuple(n / sum(row) for n in row) for row in rows)
    per_stage: tuple[PassTimes, ...] | None = None
    balanced = times
    layers: tuple[int, ...] | None = None
    if stage_layers is not None:
        if stage_times is not None:
            raise InputError("--layers: gives each stage's time from its layers; not with --stage-times")
        layers = tuple(stage_layers)
        if len(layers) != stages:
            raise InputError(f"--layers: layers of {len(layers)} stages for --stages {stages}")
        if len(set(layers)) == 1:  # even stages: one stage's time, the balanced closed forms hold as they are
            times = balanced = times.scaled(layers[0])
        else:
            stage_times = [n * times.forward for n in layers]
    if stage_times is not None:
        if len(stage_times) != stages:
            raise InputError(f"--stage-times: give one forward time per stage, {stages} in all; got {len(stage_times)}")
        for index, value in enumerate(stage_times, start=1):
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"--stage-times: stage {index}'s time must be greater than zero, got {value!r}")
        per_stage = tuple(times.scaled(value / times.forward) for value in stage_times)
        balanced = max(per_stage, key=lambda t: t.forward)
    closed = [
        ideal_time(micro_batches, balanced),
        bubble_time(schedule, stages, micro_batches, balanced, chunks),
        bubble_share_of_total(schedule, stages, micro_batches, balanced, chunks),
        bubble_relative_to_ideal(schedule, stages, micro_batches, balanced, chunks),
    ]
    if target is not None:
        closed += [
            micro_batches_for_target(schedule, stages, balanced, target, chunks=chunks),
            micro_batches_for_target(schedule, stages, balanced, target, chunks=chunks, relative=True),
        ]
    timeline = None
    if operation_count(schedule, stages, micro_batches, chunks) <= MAX_SIMULATED_OPERATIONS and stages <= MAX_SIMULATED_STAGES:
        timeline = simulate_schedule(schedule, stages, micro_batches, per_stage or balanced, chunks=chunks, latency=latency,
                                     chunk_shares=shares)  # fmt: skip
    elif not (math.isfinite(latency) and latency >= 0):
        raise InputError(f"--p2p-latency: must be a time of at least zero, got {latency!r}")
    return BubbleAnalysis(schedule, stages, micro_batches, chunks, balanced, per_stage, latency, tuple(closed), timeline, layers, rows,
                          pipeline_layout)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The simulation as derivations and tables


def simulated_derivations(timeline: sim.Timeline, schedule: Schedule) -> list[Derivation]:
    """Makespan, mean idle, and the bubble share and relative bubble of the simulated timeline."""
    source = "event simulation of the schedule (parcalc.core.pipeline_sim)"
    n_ops = Term("n_ops", "N_ops", r"N_{\mathrm{ops}}", len(timeline.events), "", "simulated operations")
    p = Term("p", "p", "p", timeline.stages, "", "pipeline stages (devices)")
    makespan = Derivation(
        key="sim_makespan",
        label="Simulated makespan (one iteration, ending in a pipeline flush)",
        symbol="T_sim",
        latex_symbol=r"T_{\mathrm{sim}}",
        formula="latest end of the $n_ops operations",
        formula_latex=r"\max_{i \le $n_ops} t^{\mathrm{end}}_i",
        inputs=(n_ops,),
        value=timeline.makespan,
        unit="s",
        source=source,
    )
    idle = Term("idle", "Σ idle", r"\sum_d t^{\mathrm{idle}}_d", timeline.total_idle, "s", "idle time of all devices within the makespan")
    busy = Term("busy", "Σ busy", r"\sum_d t^{\mathrm{busy}}_d", timeline.total_busy, "s", "compute time of all devices")
    out = [
        makespan,
        Derivation(
            key="sim_bubble_time",
            label="Simulated bubble time (idle time per device, mean)",
            symbol="t_pb,sim",
            latex_symbol=r"t_{\mathrm{pb,sim}}",
            formula="$idle / $p",
            formula_latex=r"\frac{$idle}{$p}",
            inputs=(idle, p),
            value=timeline.total_idle / timeline.stages,
            unit="s",
            source=source,
        ),
        Derivation(
            key="sim_bubble_share",
            label="Simulated bubble as a share of total time",
            symbol="β_total,sim",
            latex_symbol=r"\beta_{\mathrm{total,sim}}",
            formula="$idle / ($p × $T_sim)",
            formula_latex=r"\frac{$idle}{$p \times $T_sim}",
            inputs=(idle, p, makespan.as_term("T_sim")),
            value=timeline.bubble_share,
            unit="fraction",
            source=source,
        ),
        Derivation(
            key="sim_bubble_relative",
            label="Simulated bubble relative to compute time",
            symbol="β_ideal,sim",
            latex_symbol=r"\beta_{\mathrm{ideal,sim}}",
            formula="$idle / $busy",
            formula_latex=r"\frac{$idle}{$busy}",
            inputs=(idle, busy),
            value=timeline.bubble_relative,
            unit="fraction",
            source=source,
        ),
    ]
    if schedule.splits_backward:
        worst = max(range(timeline.stages), key=lambda d: timeline.span[d] - timeline.busy[d])
        out.append(
            Derivation(
                key="sim_span_bubble",
                label=f"Simulated per-device bubble (largest: device {worst + 1}, own first F to own last W)",
                symbol="t_pb,span",
                latex_symbol=r"t_{\mathrm{pb,span}}",
                formula="$span - $busy_d",
                formula_latex=r"$span - $busy_d",
                inputs=(
                    Term("span", "span_d", r"t^{\mathrm{span}}_d", timeline.span[worst], "s", f"device {worst + 1}: first start to last end"),
                    Term("busy_d", "busy_d", r"t^{\mathrm{busy}}_d", timeline.busy[worst], "s", f"device {worst + 1}: compute time"),
                ),
                value=timeline.span[worst] - timeline.busy[worst],
                unit="s",
                source="Qi et al. 2024 measure a stage from its first F to its last W (zero-bubble repository, "
                "megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py); " + source,
            )
        )
    return out


def timeline_table(timeline: sim.Timeline) -> Table:
    """The events, numbered from 1 as in the papers' figures: device, op, micro-batch, chunk, start, end."""
    return Table(
        key="timeline",
        title="Timeline (devices, micro-batches and chunks numbered from 1)",
        columns=(
            Column("device", "device"),
            Column("op", "op"),
            Column("micro_batch", "micro-batch"),
            Column("chunk", "chunk"),
            Column("start", "start", "s"),
            Column("end", "end", "s"),
        ),
        rows=tuple((e.device + 1, e.op, e.micro_batch + 1, e.chunk + 1, e.start, e.end) for e in timeline.events),
    )


def device_table(analysis: BubbleAnalysis) -> Table:
    """Per device: busy, idle, idle share, and peak in-flight micro-batches simulated beside the closed form."""
    timeline = analysis.timeline
    assert timeline is not None
    columns = [
        Column("device", "device"),
        Column("busy", "busy", "s"),
        Column("idle", "idle", "s"),
        Column("idle_share", "idle share", "fraction"),
        Column("peak_in_flight", "in flight (simulated)"),
        Column("peak_in_flight_closed_form", "in flight (closed form)"),
    ]
    split = analysis.schedule.splits_backward
    if split:
        columns += [Column("pending_w", "W pending (simulated)"), Column("pending_w_closed_form", "W pending (closed form)")]
    rows = []
    for d in range(timeline.stages):
        row: list[object] = [
            d + 1,
            timeline.busy[d],
            timeline.idle[d],
            timeline.idle[d] / timeline.makespan if timeline.makespan else 0.0,
            timeline.peak_in_flight[d],
            in_flight_micro_batches(analysis.schedule, analysis.stages, analysis.micro_batches, d, analysis.chunks),
        ]
        if split:
            row += [timeline.pending_weight_at_peak[d], pending_weight_gradients(analysis.schedule, analysis.stages, analysis.micro_batches, d)]
        rows.append(tuple(row))
    title = "Devices (in flight: the most micro-batches whose activations a device holds at once"
    title += "; W pending: micro-batches then holding only what W needs)" if split else ")"
    return Table(key="devices", title=title, columns=tuple(columns), rows=tuple(rows))


def without_timeline(result: Result) -> Result:
    """The result without its event table (for text formats, where the picture replaces it)."""
    return replace(result, tables=tuple(t for t in result.tables if t.key != "timeline"))
