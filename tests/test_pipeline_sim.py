"""The event simulator: known timelines, and properties against the closed forms.

Property tests draw whole-number times (multiples of 12, so that a chunk's 1/v of them stays a
whole number for v <= 4): every sum the simulator forms is then exact in floating point, and
"equals the closed form" can be tested with ==.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core import pipeline_sim as sim
from parcalc.core.pipeline import (
    PassTimes,
    Schedule,
    bubble_share_of_total,
    bubble_time,
    fewest_micro_batches,
    in_flight_micro_batches,
    pending_weight_gradients,
    schedule_order,
    simulate_schedule,
)

GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_H2, DUALPIPEV, ZB_V, DUALPIPE = Schedule
UNIT = PassTimes(1.0, 2.0, 1.0)


def names(order: tuple[sim.Task, ...]) -> str:
    return " ".join(f"{t.op}{t.micro_batch + 1}" + (f".{t.chunk + 1}" if t.chunk else "") for t in order)


# ---------------------------------------------------------------------------------------------
# Known orders and timelines


def test_1f1b_order_matches_narayanan_figure() -> None:
    # Narayanan et al. 2021 fig. 4 (top), p = 4, m = 8: device 1 runs 4 forwards before its
    # first backward, device 4 alternates from the start.
    order = schedule_order(ONE_F_ONE_B, 4, 8)
    assert names(order[0]) == "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8"
    assert names(order[3]) == "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8"


def test_interleaved_order_follows_megatron_groups() -> None:
    # Megatron-LM get_model_chunk_id: forwards in groups of p per chunk; device 1 (p = 2, v = 2,
    # m = 4) warms up with (p - 1) x 2 + (v - 1) x p = 4 chunk forwards, then 1F1B; backwards
    # visit the chunks in reverse (the last chunk's first).
    order = schedule_order(INTERLEAVED, 2, 4, 2)
    assert names(order[0]) == "F1 F2 F1.2 F2.2 F3 B1.2 F4 B2.2 F3.2 B1 F4.2 B2 B3.2 B4.2 B3 B4"


def test_zb_h2_warm_up_is_2p_minus_2s_minus_1() -> None:
    # Qi et al. 2024 sec. 2.2: extra forwards in the warm-up; stage i holds (2p - 2i + 1) M_B.
    order = schedule_order(ZB_H2, 4, 12)
    warm_ups = [next(k for k, t in enumerate(device) if t.op != sim.F) for device in order]
    assert warm_ups == [7, 5, 3, 1]


def test_gpipe_seed001_figure() -> None:
    # Seed 001 (GPipe, 4 devices, 8 micro-batches, t_b = 2 t_f): each device idles
    # (p - 1)(t_f + t_b) = 9, the makespan is (m + p - 1)(t_f + t_b) = 33.
    timeline = simulate_schedule(GPIPE, 4, 8, UNIT)
    assert timeline.makespan == 33.0
    assert timeline.idle == (9.0, 9.0, 9.0, 9.0)
    assert timeline.peak_in_flight == (8.0, 8.0, 8.0, 8.0)


def test_gpipe_with_latency_known_makespan() -> None:
    # By hand: F1 reaches the last device after (p - 1)(t_f + a); it runs m forwards and m
    # backwards back to back; B_m then walks back p - 1 hops of a + t_b:
    # (p - 1)(t_f + t_b + 2a) + m (t_f + t_b) = 3 x (1 + 2 + 1) + 8 x 3 = 36 with a = 0.5.
    timeline = simulate_schedule(GPIPE, 4, 8, UNIT, latency=0.5)
    assert timeline.makespan == 36.0


def test_unbalanced_two_stages_known_makespan() -> None:
    # p = 2, m = 1, stage forwards 1 and 3, backwards twice those: F 0-1, F 1-4, B 4-10, B 10-12.
    timeline = simulate_schedule(ONE_F_ONE_B, 2, 1, (PassTimes(1.0, 2.0, 1.0), PassTimes(3.0, 6.0, 3.0)))
    assert [(e.device, e.op, e.start, e.end) for e in timeline.events] == [
        (0, "F", 0.0, 1.0), (1, "F", 1.0, 4.0), (1, "B", 4.0, 10.0), (0, "B", 10.0, 12.0)]  # fmt: skip
    assert timeline.makespan == 12.0
    assert timeline.busy == (3.0, 9.0)
    assert timeline.idle == (9.0, 3.0)


def test_interleaved_in_flight_simulated() -> None:
    # Korthikanti et al. 2022 sec. 4.2.3: the first stage holds p (1 + (p - 1)/(p v)) = 5.5
    # micro-batches for p = 4, v = 2; stage s ((p - s - 1) 2 + (v - 1) p + 1)/v.
    timeline = simulate_schedule(INTERLEAVED, 4, 8, UNIT, chunks=2)
    assert timeline.peak_in_flight == (5.5, 4.5, 3.5, 2.5)
    # and (p - 1)(t_f + t_b)/v = 4.5 idle on each device (Narayanan et al. 2021 sec. 2.2.2)
    assert timeline.idle == (4.5,) * 4


def test_zb_h2_is_a_parallelogram() -> None:
    # Qi et al. 2024 fig. 3 (bottom), T_F = T_B = T_W: every device busy from its first F to
    # its last W (span = 3m), the start staggered by T_F; with a flush the makespan is
    # 3m + (p - 1) T_F.
    timeline = simulate_schedule(ZB_H2, 4, 12, UNIT)
    assert timeline.span == (36.0, 36.0, 36.0, 36.0)
    assert timeline.span_bubble == 0.0
    assert timeline.makespan == 36.0 + 3.0


def test_deadlocking_order_is_refused() -> None:
    # Device 1 queues B1 before F1: B1 waits on device 2's B1, which waits on F1 of device 1.
    order = ((sim.Task(sim.B, 0), sim.Task(sim.F, 0)), (sim.Task(sim.F, 0), sim.Task(sim.B, 0)))
    durations = ({sim.F: 1.0, sim.B: 2.0, sim.W: 0.0},) * 2
    with pytest.raises(ValueError, match="deadlock"):
        sim.simulate(order, durations, micro_batches=1)


# ---------------------------------------------------------------------------------------------
# Properties

stage_counts = st.integers(1, 8)
whole_times = st.integers(1, 8).map(lambda k: 12.0 * k)


@st.composite
def balanced_cases(draw, schedules=(GPIPE, ONE_F_ONE_B, INTERLEAVED)):
    schedule = draw(st.sampled_from(schedules))
    p = draw(stage_counts)
    v = draw(st.integers(1, 4)) if schedule is INTERLEAVED else 1
    m = p * draw(st.integers(1, 4)) if schedule is INTERLEAVED else draw(st.integers(1, 32))
    times = PassTimes(draw(whole_times), draw(whole_times), 0.0)
    return schedule, p, m, v, times


@settings(max_examples=120, deadline=None)
@given(balanced_cases())
def test_balanced_bubble_equals_closed_form_exactly(case) -> None:
    # Narayanan et al. 2021 sec. 2.2.1-2.2.2: each device idles t_pb; the share is t_pb/(t_pb + t_id).
    schedule, p, m, v, times = case
    timeline = simulate_schedule(schedule, p, m, times, chunks=v)
    closed = bubble_time(schedule, p, m, times, v).value
    assert timeline.idle == (closed,) * p
    assert timeline.bubble_share == bubble_share_of_total(schedule, p, m, times, v).value
    assert timeline.makespan == m * (times.forward + times.backward) + closed


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 8), st.integers(1, 32), whole_times, whole_times)
def test_gpipe_and_1f1b_have_the_same_makespan(p: int, m: int, t_f: float, t_b: float) -> None:
    times = PassTimes(t_f, t_b, 0.0)
    assert simulate_schedule(GPIPE, p, m, times).makespan == simulate_schedule(ONE_F_ONE_B, p, m, times).makespan


@st.composite
def any_cases(draw):
    """Any schedule, unbalanced stages, any latency: what must hold regardless."""
    schedule = draw(st.sampled_from(list(Schedule)))
    p = draw(st.integers(1, 6))
    v = draw(st.integers(1, 3)) if schedule is INTERLEAVED else 1
    m = p * draw(st.integers(1, 4)) if schedule is INTERLEAVED else draw(st.integers(1, 16))
    if schedule is DUALPIPEV:  # needs m >= 2p (the reference's assert)
        m = 2 * p + draw(st.integers(0, 8))
    if schedule is DUALPIPE:  # needs p even, m even and m >= 2p (dualpipe.py's asserts)
        p = 2 * draw(st.integers(1, 3))
        m = 2 * p + 2 * draw(st.integers(0, 4))
    per_stage = []
    for _ in range(p):
        t_f = draw(st.floats(0.1, 10.0))
        t_w = draw(st.floats(0.0, 5.0))
        per_stage.append(PassTimes(t_f, t_w + draw(st.floats(0.1, 10.0)), t_w))
    latency = draw(st.sampled_from([0.0, 0.01, 0.5, 3.0]))
    return schedule, p, m, v, tuple(per_stage), latency


@settings(max_examples=150, deadline=None)
@given(any_cases())
def test_the_schedule_respects_every_dependency(case) -> None:
    schedule, p, m, v, per_stage, latency = case
    timeline = simulate_schedule(schedule, p, m, per_stage, chunks=v, latency=latency)
    split = schedule.splits_backward
    ops = (sim.F, sim.B, sim.W) if split else (sim.F, sim.B)
    layout, v = (sim.V_SHAPE, 2) if schedule.v_shape else (sim.BIDIRECTIONAL, 1) if schedule is DUALPIPE else (sim.INTERLEAVED, v)
    end, device_of = {}, {}
    for e in timeline.events:
        key = (e.op, sim.virtual_stage(e.chunk, e.device, p, layout), e.micro_batch)
        assert key not in end, f"{key} ran twice"
        end[key] = e.end
        device_of[key] = e.device
    last = p * v - 1
    assert set(end) == {(op, q, i) for op in ops for q in range(p * v) for i in range(m)}
    for e in timeline.events:
        q = sim.virtual_stage(e.chunk, e.device, p, layout)

        def after(dep: tuple[str, int, int], start: float = e.start, device: int = e.device) -> None:
            hop = latency if device_of[dep] != device else 0.0
            assert start >= end[dep] + hop - 1e-9, (e, dep)  # noqa: B023 - after() is called in this iteration only

        if e.op == sim.F and q > 0:
            after((sim.F, q - 1, e.micro_batch))
        if e.op == sim.B:
            after((sim.B, q + 1, e.micro_batch) if q < last else (sim.F, q, e.micro_batch))
            after((sim.F, q, e.micro_batch))
        if e.op == sim.W:
            after((sim.B, q, e.micro_batch))
    for device in range(p):  # one operation at a time on a device
        mine = sorted((e for e in timeline.events if e.device == device), key=lambda e: e.start)
        assert all(a.end <= b.start + 1e-9 for a, b in pairwise(mine))
        assert timeline.busy[device] + timeline.idle[device] == pytest.approx(timeline.makespan)


@settings(max_examples=150, deadline=None)
@given(any_cases())
def test_in_flight_matches_the_closed_form_and_1f1b_never_exceeds_p(case) -> None:
    schedule, p, m, v, per_stage, latency = case
    timeline = simulate_schedule(schedule, p, m, per_stage, chunks=v, latency=latency)
    if schedule is ZB_V:  # its order follows the times; what holds for any: 1F1B's p, the heuristic's memory limit (zbv.py)
        assert max(timeline.peak_in_flight) <= p
        return
    for s in range(p):
        assert timeline.peak_in_flight[s] == in_flight_micro_batches(schedule, p, m, s, v)
        assert timeline.pending_weight_at_peak[s] == pending_weight_gradients(schedule, p, m, s)
    if schedule in (ONE_F_ONE_B, ZB_H1):
        assert max(timeline.peak_in_flight) <= p  # PipeDream-Flush: in flight limited to the pipeline depth


@st.composite
def zero_bubble_cases(draw):
    """The domain where Qi et al.'s Table 2 holds for the handcrafted orders: T_W <= T_F, T_B."""
    schedule = draw(st.sampled_from([ZB_H1, ZB_H2]))
    p = draw(st.integers(1, 7))
    m = fewest_micro_batches(schedule, p) + draw(st.integers(0, 3 * p))
    t_w = 12.0 * draw(st.integers(0, 4))
    t_f = t_w + 12.0 * draw(st.integers(0, 4)) or 12.0
    t_b = t_w + 12.0 * draw(st.integers(0, 4))
    return schedule, p, m, PassTimes(t_f, t_b + t_w, t_w)


@settings(max_examples=150, deadline=None)
@given(zero_bubble_cases())
def test_zero_bubble_closed_forms(case) -> None:
    # ZB-H1: each device idles (p - 1)(T_F + T_B - T_W) within the makespan; ZB-H2: the
    # per-device bubble (first F to last W) is (p - 1)(T_F + T_B - 2 T_W) (Qi et al. 2024 Table 2).
    schedule, p, m, times = case
    timeline = simulate_schedule(schedule, p, m, times)
    closed = bubble_time(schedule, p, m, times).value
    if schedule is ZB_H1:
        assert timeline.idle == (closed,) * p
    else:
        assert timeline.span_bubble == closed


def test_zb_h1_closed_form_does_not_hold_when_w_is_slow() -> None:
    # T_W > T_B: the handcrafted order leaves more bubble than (p - 1)(T_F + T_B - T_W) = 0;
    # the closed form says so in its assumptions.
    times = PassTimes(1.0, 3.0, 2.0)  # T_F = 1, T_B = 1, T_W = 2
    timeline = simulate_schedule(ZB_H1, 2, 4, times)
    closed = bubble_time(ZB_H1, 2, 4, times)
    assert closed.value == 0.0
    assert timeline.idle[0] > 0.0
    assert any("does not hold" in a for a in closed.assumptions)
