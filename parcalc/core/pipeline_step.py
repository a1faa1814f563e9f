"""The pipeline schedules in the step-time model: the bubble of the schedules that split the backward, simulated for a
stage's F, B and W (fit's t_bubble; parcalc.core.timing.step.combine), DualPipe(V)'s overlapped pairs, and the rules a
layout must meet to run each schedule (fit, its search and memory), each from the schedule's source."""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise
from typing import Any

from parcalc.core import pipeline_sim as sim
from parcalc.core.choices import Schedule
from parcalc.core.pipeline import PassTimes, fewest_micro_batches, operation_count, schedule_order, simulate_schedule


def schedule_reason(layers: int, layout: Any, m: int) -> str | None:
    """Why a layout (parcalc.core.layout.Layout) of `layers` layers with m micro-batches cannot run its split-backward schedule
    (None: it can), each rule from the schedule's source."""
    schedule, p = layout.schedule, layout.pp
    if not schedule.splits_backward:
        return None
    if p == 1:
        return f"{schedule.label} is a pipeline schedule: it needs pp > 1"
    if schedule.v_shape and layout.pipeline_layout is None:  # a layout's 2p virtual stages go in the V (pipeline_layout.V_PLACEMENT)
        if layout.first_stage_layers is not None or layout.last_stage_layers is not None or layout.embedding_in_split or layout.loss_in_split:
            return (f"{schedule.label}'s V without a layout splits the layers evenly over 2p chunks; not with an uneven first or last "
                    "stage (write the 2p stages with --pipeline-layout)")  # fmt: skip
        if layers % (2 * p) and schedule is Schedule.ZB_V:
            return (f"{schedule.label} holds two chunks a device in a V: 2p = {2 * p} must divide the {layers} layers (the "
                    "zero-bubble repository's validate_arguments asserts an even number of layers per stage, zbpp_utils.py @39f2c186)")
        if layers % (2 * p):
            return (f"DualPipeV's 2p = {2 * p} stages do not split the {layers} layers evenly; deepseek-ai/DualPipe dualpipev.py "
                    "takes any two modules a device (torchtitan splits them as evenly as it can): write the 2p stages with "
                    "--pipeline-layout, which places them in the V")  # fmt: skip
    if schedule is Schedule.DUALPIPEV and m < 2 * p:
        return (f"DualPipeV needs at least 2p = {2 * p} micro-batches (m = {m}; deepseek-ai/DualPipe dualpipev.py asserts "
                "num_chunks >= num_ranks * 2)")
    if schedule is Schedule.DUALPIPE:
        if layout.pipeline_layout is not None or layout.first_stage_layers is not None or layout.last_stage_layers is not None \
                or layout.embedding_in_split or layout.loss_in_split:
            return ("parcalc times DualPipe's p equal stages, run both ways (device d holds stage d and p - 1 - d); not an uneven split "
                    "or a layout (deepseek-ai/DualPipe dualpipe.py takes any two modules a device: DeepSeek-V3 ran 61 layers on PP 16; "
                    "DualPipeV's V takes a --pipeline-layout)")  # fmt: skip
        if layers % p:
            return (f"parcalc times DualPipe's p equal stages, run both ways: pp = {p} does not divide the {layers} layers "
                    "(deepseek-ai/DualPipe dualpipe.py takes any two modules a device: DeepSeek-V3 ran 61 layers on PP 16; "
                    "DualPipeV's V takes a --pipeline-layout)")  # fmt: skip
        if p % 2 or m % 2 or m < 2 * p:
            return (f"DualPipe needs p even and an even m of at least 2p (p = {p}, m = {m}; deepseek-ai/DualPipe dualpipe.py asserts "
                    "num_ranks % 2 == 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2)")
    return None



# The step-time model simulates a split-backward schedule for every estimate; beyond this many operations it simulates
# fewer micro-batches (the most that stay under it): the steady phase between warm-up and cool-down runs without gaps,
# so the idle time does not grow with m (tests/test_schedule_step.py checks it against the full simulation).
MAX_STEP_OPERATIONS = 60_000


def step_micro_batches(schedule: Schedule, stages: int, micro_batches: int) -> int:
    """The micro-batches step_bubble simulates: m, or the most under MAX_STEP_OPERATIONS (at least the schedule's fewest)."""
    per = operation_count(schedule, stages, 1)
    most = max(MAX_STEP_OPERATIONS // per, fewest_micro_batches(schedule, stages))
    return min(micro_batches, most)


@lru_cache(maxsize=65_536)
def step_bubble(schedule: Schedule, stages: int, micro_batches: int, forward: float, input_gradient: float, weight: float) -> float:
    """The pacing stage's idle time per iteration (s) when every stage takes forward (F), input_gradient (B) and weight (W)
    seconds per micro-batch: the simulated order's makespan less one stage's work, m (F + B + W). The step-time model's
    bubble for the schedules that split the backward, whose idle time has no closed form in general (it depends on how W
    passes fill the gaps: Qi et al. 2024 sec. 2.3 give (p - 1)(T_F + T_B - T_W) for ZB-H1 only when T_W <= T_F, T_B)."""
    m = step_micro_batches(schedule, stages, micro_batches)
    times = PassTimes(forward, input_gradient + weight, weight)
    timeline = simulate_schedule(schedule, stages, m, times)
    return max(0.0, timeline.makespan - m * (forward + input_gradient + weight))


@lru_cache(maxsize=4096)
def paired_passes(schedule: Schedule, stages: int, micro_batches: int) -> int:
    """DualPipe(V)'s overlapped pairs ("F & B": one chunk's forward and another's backward run as one unit, each one's
    communication under the other's compute; dualpipe(v).py _forward_backward_chunk) on the device with the fewest of them
    (DualPipeV: device 0, 2m - 3p + 1 of its 2m chunk forwards), counted in the ported order; 0 for the other schedules."""
    if not schedule.pairs_forward_backward:
        return 0
    orders = schedule_order(schedule, stages, micro_batches)
    return min(sum(1 for a, b in pairwise(row) if a.op == sim.F and b.op == sim.B and b.joined) for row in orders)
