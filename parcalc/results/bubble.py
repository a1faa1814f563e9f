"""`bubble`: the pipeline bubble of a schedule (closed forms and the event simulation), from a
typed request. The command (parcalc.commands.bubble) draws the timeline; the Result is the same."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.bubble_analysis import BubbleAnalysis
    from parcalc.core.pipeline import PassTimes, Schedule
    from parcalc.derivation import Result


@frozen
class BubbleRequest:
    """What `bubble` is asked, parsed: times in seconds, shares as fractions."""

    schedule: Schedule
    stages: int  # p
    micro_batches: int | None  # m; None: the fewest that reach `target`
    chunks: int  # v, model chunks per device
    times: PassTimes  # per micro-batch and stage (or per layer with stage_layers)
    stage_times: tuple[float, ...] | None = None  # forward time of each stage, unbalanced stages
    latency: float = 0.0  # point-to-point, seconds
    target: float | None = None  # bubble share of total time
    stage_layers: tuple[int, ...] | None = None  # layers per stage (Megatron-LM's split)
    times_given: bool = True  # a forward time was given (else times are in units of one forward pass)
    chunks_given: bool = True
    chunk_layers: tuple[tuple[int, ...], ...] | None = None  # layers of each device's chunks (--pipeline-layout)
    pipeline_layout: str | None = None


@frozen
class BubbleOutcome:
    """The analysis (schedule, timeline, title: what the command draws) and the Result it shows."""

    analysis: BubbleAnalysis
    result: Result


def request(pp: str, micro_batches: str | None = None, schedule: str = "1f1b", chunks: str | None = None,
            t_forward: str | None = None, t_backward: str | None = None, t_weight: str | None = None,
            stage_times: str | None = None, layers: str | None = None, first_stage_layers: str | None = None,
            last_stage_layers: str | None = None, embedding_in_split: bool = False, loss_in_split: bool = False,
            p2p_latency: str | None = None, target: str | None = None, pipeline_layout: str | None = None) -> BubbleRequest:  # fmt: skip
    """The request from `bubble`'s flag texts; bad input raises InputError naming the flag."""
    from parcalc.core.pipeline import Schedule, pass_times
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_count, parse_quantity

    chosen = Schedule(schedule)
    p = parse_count(pp, "--pp")
    if micro_batches is None and target is None:
        raise InputError("--micro-batches: required (or give --target and parcalc finds the fewest micro-batches that reach it)")
    m = parse_count(micro_batches, "--micro-batches") if micro_batches is not None else None
    v = parse_count(chunks, "--chunks") if chunks is not None else (2 if chosen is Schedule.INTERLEAVED else 1)
    per_chunk = None
    if pipeline_layout is not None:
        chosen, v, per_chunk = layout_chunks(pipeline_layout, p, chosen, schedule, chunks, layers, first_stage_layers, last_stage_layers,
                                             embedding_in_split or loss_in_split or stage_times is not None)  # fmt: skip

    def time(text: str | None, flag: str, *, zero: bool = False) -> float | None:
        return None if text is None else parse_quantity(text, Dimension.TIME, flag, allow_zero=zero, require_unit=True)

    times = pass_times(time(t_forward, "--t-forward"), time(t_backward, "--t-backward"), time(t_weight, "--t-weight", zero=True))
    per_stage = None
    if stage_times is not None:
        per_stage = tuple(parse_quantity(part, Dimension.TIME, "--stage-times", require_unit=True) for part in stage_times.split(","))
    latency = time(p2p_latency, "--p2p-latency", zero=True) or 0.0
    goal = parse_quantity(target, Dimension.FRACTION, "--target") if target is not None else None
    split = stage_layers(layers, first_stage_layers, last_stage_layers, p, v, embedding_in_split, loss_in_split)
    return BubbleRequest(chosen, p, m, v, times, per_stage, latency, goal, split,
                         times_given=t_forward is not None or stage_times is not None,
                         chunks_given=chunks is not None or pipeline_layout is not None, chunk_layers=per_chunk,
                         pipeline_layout=pipeline_layout)  # fmt: skip


def layout_chunks(text: str, p: int, chosen: Schedule, schedule: str, chunks: str | None, layers: str | None, first: str | None,
                  last: str | None, other_split: bool) -> tuple[Schedule, int, tuple[tuple[int, ...], ...]]:  # fmt: skip
    """--pipeline-layout's schedule, chunks per device and each device's chunk layers (t and m letters; E and L take no time
    here). Its v = stages / p chunks run interleaved (Megatron-LM) unless v is 1; one-line errors for what disagrees."""
    from parcalc.core.pipeline import Schedule
    from parcalc.core.pipeline_layout import parse_pipeline_layout
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    if layers is not None or first is not None or last is not None or other_split:
        raise InputError("--pipeline-layout: gives every stage's layers; not with --layers, --first-stage-layers, --last-stage-layers, "
                         "--embedding-in-split, --loss-in-split or --stage-times")  # fmt: skip
    # the layer count is the layout's own (bubble has no model): parse checks the letters, empty stages, the stage count
    # against p, E first, L last, m after every t
    split = parse_pipeline_layout(text, p, _count(text, "t"), None)
    letters, v = len(split.stages), split.chunks
    if chunks is not None and parse_count(chunks, "--chunks") != v:
        raise InputError(f"--pipeline-layout: {letters} virtual stages over --pp {p} are {v} chunks per device, not --chunks {chunks}")
    if chosen.v_shape:
        raise InputError(f"--pipeline-layout: places virtual stage i on device i mod p (Megatron-LM); {chosen.label}'s V places them another way")
    if v > 1:
        if schedule not in ("1f1b", "interleaved"):
            raise InputError(f"--pipeline-layout: {v} chunks per device run the interleaved schedule, not --schedule {schedule}")
        chosen = Schedule.INTERLEAVED
    return chosen, v, tuple(tuple(stage.layers + stage.mtp for stage in split.rank_chunks(d)) for d in range(p))


def _count(text: str, letter: str) -> int:
    """How many of `letter` the unrolled layout holds."""
    from parcalc.core.pipeline_layout import unrolled

    return unrolled(text).count(letter)


def stage_layers(layers: str | None, first_text: str | None, last_text: str | None, stages: int, chunks: int,
                 embedding_in_split: bool = False, loss_in_split: bool = False) -> tuple[int, ...] | None:  # fmt: skip
    """Layers per stage from --layers and the uneven-split flags (parcalc.core.stages), or None."""
    from parcalc.core.stages import stage_split
    from parcalc.errors import InputError
    from parcalc.results.parse import check_layers, stage_flags
    from parcalc.units import parse_count

    first, last = stage_flags(first_text, last_text)
    if layers is None:
        if first is not None or last is not None or embedding_in_split or loss_in_split:
            flag = next(f for f, on in (("--first-stage-layers", first is not None), ("--last-stage-layers", last is not None),
                                        ("--embedding-in-split", embedding_in_split), ("--loss-in-split", True)) if on)  # fmt: skip
            raise InputError(f"{flag}: give --layers L too (the transformer layers split over the --pp stages)")
        return None
    total = parse_count(layers, "--layers")
    check_layers(total)
    return stage_split(total, stages, first, last, chunks, pp_flag="--pp", embedding_in_split=embedding_in_split,
                       loss_in_split=loss_in_split)  # fmt: skip


def outcome(req: BubbleRequest) -> BubbleOutcome:
    """The analysis at the request's micro-batches (or the fewest that reach its target), and its
    Result with what was assumed for the flags not given."""
    from parcalc.core.bubble_analysis import analyse_bubble
    from parcalc.core.pipeline import Schedule

    stage_times = list(req.stage_times) if req.stage_times is not None else None

    def analyse(m: int) -> BubbleAnalysis:
        return analyse_bubble(req.schedule, req.stages, m, chunks=req.chunks, times=req.times, stage_times=stage_times,
                              latency=req.latency, target=req.target, stage_layers=req.stage_layers, chunk_layers=req.chunk_layers,
                              pipeline_layout=req.pipeline_layout)  # fmt: skip

    found = None
    m = req.micro_batches
    if m is None:  # --target alone: the closed form's fewest micro-batches (share of total time), then the bubble at them
        from parcalc.core.pipeline import fewest_micro_batches

        probe = analyse(max(req.stages, fewest_micro_batches(req.schedule, req.stages)))  # DualPipeV needs m >= 2p to be analysed
        found = int(next(d for d in probe.closed if d.key == "micro_batches_for_target").value)
        m = found
    analysis = analyse(m)
    result = analysis.result()
    notes: list[str] = []
    if found is not None:
        notes.append(f"no --micro-batches: m = {found}, the fewest micro-batches whose bubble (share of total time) is at most the target")
    if not req.times_given:
        unit = "one layer's forward pass" if req.stage_layers is not None or req.chunk_layers is not None else "one forward pass"
        notes.append(f"no --t-forward: times are in units of {unit} (t_f = 1 s); shares and micro-batch counts do not depend on it")
    if req.schedule is Schedule.INTERLEAVED and not req.chunks_given:
        notes.append("no --chunks: v = 2 model chunks per device")
    if notes:
        result = replace(result, assumptions=result.assumptions + tuple(notes))
    return BubbleOutcome(analysis, result)


def result(req: BubbleRequest) -> Result:
    return outcome(req).result


def from_flags(timeline: bool = False, **flags: object) -> Result:
    """`bubble`'s Result from its flags as the command line gives them (parcalc.results.run);
    --timeline draws the Result's timeline table, which a Result always holds."""
    return result(request(**flags))  # type: ignore[arg-type]
