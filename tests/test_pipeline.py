"""Closed forms of pipeline bubbles, micro-batches for a target, and in-flight micro-batches."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.pipeline import (
    PassTimes,
    Schedule,
    bubble_relative_to_ideal,
    bubble_share_of_total,
    bubble_time,
    ideal_time,
    in_flight_micro_batches,
    micro_batches_for_target,
    pass_times,
    pending_weight_gradients,
)
from parcalc.errors import InputError

UNIT = pass_times()  # t_f = 1, t_b = 2, t_w = 1: T_F = T_B = T_W = 1, the handcrafted schedules' case
GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1, ZB_H2, DUALPIPEV, ZB_V, DUALPIPE = Schedule


# ---------------------------------------------------------------------------------------------
# Known answers


@pytest.mark.parametrize(
    ("schedule", "p", "m", "v", "share", "relative"),
    [
        # Seed 003 (PP, "microbatch formula"): N = 4 stages, M = 16: exact 3/19 = 15.8 %,
        # approximation 3/16 = 18.75 %.
        pytest.param(ONE_F_ONE_B, 4, 16, 1, Fraction(3, 19), Fraction(3, 16), id="seed003-1f1b"),
        pytest.param(GPIPE, 4, 16, 1, Fraction(3, 19), Fraction(3, 16), id="seed003-gpipe"),
        # Seed 001 slides (GPipe figure, 4 devices, 8 micro-batches): (p - 1)/m = 3/8; share 3/11.
        pytest.param(GPIPE, 4, 8, 1, Fraction(3, 11), Fraction(3, 8), id="seed001-gpipe-4x8"),
        # Narayanan et al. 2021 sec. 2.2.2: interleaved bubble fraction (1/v)(p - 1)/m:
        # p = 4, m = 8, v = 2 -> 3/16; share (p - 1)/(v m + p - 1) = 3/19.
        pytest.param(INTERLEAVED, 4, 8, 2, Fraction(3, 19), Fraction(3, 16), id="narayanan-interleaved"),
        # v = 4: 3/(4 x 8) = 3/32; share 3/35.
        pytest.param(INTERLEAVED, 4, 8, 4, Fraction(3, 35), Fraction(3, 32), id="interleaved-v4"),
        # Zero-bubble README table (T_F = T_B = T_W): ZB-H1 "bubble rate" (p - 1)/(3m) = 3/24;
        # share = 3/(3 + 24) = 1/9.
        pytest.param(ZB_H1, 4, 8, 1, Fraction(1, 9), Fraction(3, 24), id="zb-h1-readme"),
        # ZB-H2: 0 with T_F = T_B = T_W (README table; Qi et al. Table 2: (p-1)(T_F + T_B - 2 T_W) = 0).
        pytest.param(ZB_H2, 4, 8, 1, Fraction(0), Fraction(0), id="zb-h2-readme"),
        # One stage has no bubble at all.
        pytest.param(ONE_F_ONE_B, 1, 5, 1, Fraction(0), Fraction(0), id="single-stage"),
    ],
)
def test_bubble_fractions(schedule: Schedule, p: int, m: int, v: int, share: Fraction, relative: Fraction) -> None:
    assert bubble_share_of_total(schedule, p, m, UNIT, v).value == pytest.approx(float(share), abs=1e-15)
    assert bubble_relative_to_ideal(schedule, p, m, UNIT, v).value == pytest.approx(float(relative), abs=1e-15)


@pytest.mark.parametrize(
    ("schedule", "p", "v", "times", "expected"),
    [
        # Narayanan et al. 2021 sec. 2.2.1: t_pb = (p - 1)(t_f + t_b) = 3 x (1 + 2) = 9.
        pytest.param(ONE_F_ONE_B, 4, 1, UNIT, 9.0, id="1f1b-4"),
        pytest.param(GPIPE, 8, 1, PassTimes(0.01, 0.02, 0.01), 7 * 0.03, id="gpipe-8-ms"),
        # sec. 2.2.2: (p - 1)(t_f + t_b)/v = 3 x 3 / 2 = 4.5.
        pytest.param(INTERLEAVED, 4, 2, UNIT, 4.5, id="interleaved-4-v2"),
        # Qi et al. 2024 Table 2, ZB-H1: (p - 1)(T_F + T_B - T_W) with t_f = 1, t_b = 3, t_w = 1
        # (T_B = 2): 3 x (1 + 2 - 1) = 6. 1F1B with the same times: 3 x 4 = 12.
        pytest.param(ZB_H1, 4, 1, PassTimes(1.0, 3.0, 1.0), 6.0, id="zb-h1-table2"),
        pytest.param(ONE_F_ONE_B, 4, 1, PassTimes(1.0, 3.0, 1.0), 12.0, id="1f1b-table2"),
        # ZB-H2: (p - 1)(T_F + T_B - 2 T_W) = 3 x (1 + 2 - 2) = 3.
        pytest.param(ZB_H2, 4, 1, PassTimes(1.0, 3.0, 1.0), 3.0, id="zb-h2-table2"),
        # README (T_F = T_B = T_W = 1): ZB-H1 = (p - 1) = 3, a third of 1F1B's 9.
        pytest.param(ZB_H1, 4, 1, UNIT, 3.0, id="zb-h1-third-of-1f1b"),
    ],
)
def test_bubble_time(schedule: Schedule, p: int, v: int, times: PassTimes, expected: float) -> None:
    m = 4 * p  # enough for every closed form (ZB-H2 needs 2p - 1)
    assert bubble_time(schedule, p, m, times, v).value == pytest.approx(expected)


def test_seed003_derivation_text() -> None:
    # The derivation reads like seed 003's "(N-1) / (M+N-1)" with N = 4, M = 16.
    share = bubble_share_of_total(ONE_F_ONE_B, 4, 16, UNIT)
    assert share.formula_text() == "(p - 1) / (m + p - 1)"
    assert share.substituted_text() == "(4 - 1) / (16 + 4 - 1)"
    relative = bubble_relative_to_ideal(ONE_F_ONE_B, 4, 16, UNIT)
    assert relative.substituted_text() == "(4 - 1) / 16"
    assert "share of total" in share.label and "relative to ideal" in relative.label


def test_ideal_time() -> None:
    # t_id = m (t_f + t_b) = 16 x (2 ms + 4 ms) = 96 ms (Narayanan et al. 2021 sec. 2.2.1)
    assert ideal_time(16, PassTimes(2e-3, 4e-3, 2e-3)).value == pytest.approx(96e-3)


@pytest.mark.parametrize(
    ("schedule", "p", "v", "times", "target", "relative", "expected"),
    [
        # (p - 1)(1 - t)/t = 3 x 0.9 / 0.1 = 27 exactly: 3/(27 + 3) = 10 %.
        pytest.param(ONE_F_ONE_B, 4, 1, UNIT, 0.10, False, 27, id="share-10pct"),
        # (p - 1)/t = 30: 3/30 = 10 %.
        pytest.param(ONE_F_ONE_B, 4, 1, UNIT, 0.10, True, 30, id="relative-10pct"),
        # Seed 003 says "to keep bubble under 25 %, need M >= 4N" (16 for N = 4); the relative form
        # (N - 1)/M <= 1/4 needs only M >= 4(N - 1) = 12, and the share 3/(M + 3) <= 1/4 M >= 9.
        pytest.param(GPIPE, 4, 1, UNIT, 0.25, True, 12, id="seed003-25pct-relative"),
        pytest.param(GPIPE, 4, 1, UNIT, 0.25, False, 9, id="seed003-25pct-share"),
        # 0.3 is not exact in binary: (p - 1)(1 - 0.3)/0.3 = 7 exactly for p = 4, not 8.
        pytest.param(ONE_F_ONE_B, 4, 1, UNIT, 0.30, False, 7, id="decimal-exact"),
        # Interleaved p = 4, v = 2: 3 x 0.9/(0.1 x 2) = 13.5 -> next multiple of 4 = 16.
        pytest.param(INTERLEAVED, 4, 2, UNIT, 0.10, False, 16, id="interleaved-multiple-of-p"),
        # relative 3/(0.1 x 2) = 15 -> 16.
        pytest.param(INTERLEAVED, 4, 2, UNIT, 0.10, True, 16, id="interleaved-relative"),
        # ZB-H1, unit times: t_pb = 3, per micro-batch 3: relative 3/(3m) <= 0.1 -> m >= 10.
        pytest.param(ZB_H1, 4, 1, UNIT, 0.10, True, 10, id="zb-h1-relative"),
        # 20 %: 3/(3m) <= 0.2 -> m >= 5, above ZB-H1's least m = p = 4.
        pytest.param(ZB_H1, 4, 1, UNIT, 0.20, True, 5, id="zb-h1-20pct"),
        # 50 % relative: 3/(3m) <= 1/2 -> m >= 2, but the closed form needs m >= p = 4.
        pytest.param(ZB_H1, 4, 1, UNIT, 0.50, True, 4, id="zb-h1-at-least-p"),
        # ZB-H2 has no bubble with unit times: the fewest micro-batches it needs, 2p - 1 = 7.
        pytest.param(ZB_H2, 4, 1, UNIT, 0.01, False, 7, id="zb-h2-2p-1"),
        # One stage: any m, so 1.
        pytest.param(ONE_F_ONE_B, 1, 1, UNIT, 0.01, False, 1, id="single-stage"),
    ],
)
def test_micro_batches_for_target(schedule: Schedule, p: int, v: int, times: PassTimes, target: float, relative: bool, expected: int) -> None:
    assert micro_batches_for_target(schedule, p, times, target, chunks=v, relative=relative).value == expected


@pytest.mark.parametrize(
    ("schedule", "p", "m", "v", "expected"),
    [
        # GPipe holds every micro-batch (seed 001: "keep the intermediate activations of all micro-batches").
        pytest.param(GPIPE, 4, 16, 1, [16, 16, 16, 16], id="gpipe"),
        # 1F1B: p - s (seed 001: "limit the number of in-flight micro-batches to the pipeline depth").
        pytest.param(ONE_F_ONE_B, 4, 16, 1, [4, 3, 2, 1], id="1f1b"),
        pytest.param(ONE_F_ONE_B, 4, 2, 1, [2, 2, 2, 1], id="1f1b-few"),
        # Interleaved, Korthikanti et al. 2022 sec. 4.2.3: first stage p (1 + (p - 1)/(p v)) =
        # 4 (1 + 3/8) = 5.5; stage s: ((p - s - 1) 2 + (v - 1) p + 1)/v = 9/2, 7/2, 5/2.
        pytest.param(INTERLEAVED, 4, 8, 2, [5.5, 4.5, 3.5, 2.5], id="interleaved-korthikanti"),
        # m = p: Megatron-LM runs every forward first: every stage holds all m.
        pytest.param(INTERLEAVED, 4, 4, 2, [4, 4, 4, 4], id="interleaved-m-equals-p"),
        # Qi et al. 2024 sec. 2.3: (p - i + 1) M_B for ZB-H1, (2p - 2i + 1) M_B for ZB-H2, i = s + 1.
        pytest.param(ZB_H1, 4, 16, 1, [4, 3, 2, 1], id="zb-h1"),
        pytest.param(ZB_H2, 4, 16, 1, [7, 5, 3, 1], id="zb-h2"),
        pytest.param(ZB_H2, 4, 4, 1, [4, 4, 3, 1], id="zb-h2-capped-by-m"),
    ],
)
def test_in_flight_micro_batches(schedule: Schedule, p: int, m: int, v: int, expected: list[float]) -> None:
    assert [in_flight_micro_batches(schedule, p, m, s, v) for s in range(p)] == expected


@pytest.mark.parametrize(
    ("schedule", "p", "m", "expected"),
    [
        # Qi et al. 2024 sec. 2.3: worker i also holds (i - 1) M_W in ZB-H1 and (2i - 2) M_W in ZB-H2.
        pytest.param(ZB_H1, 4, 16, [0, 1, 2, 3], id="zb-h1"),
        pytest.param(ZB_H2, 4, 16, [0, 2, 4, 6], id="zb-h2"),
        # m = 4: ZB-H2's last stage holds 1 M_B and at most 3 more micro-batches exist.
        pytest.param(ZB_H2, 4, 4, [0, 0, 1, 3], id="zb-h2-capped-by-m"),
        pytest.param(ONE_F_ONE_B, 4, 16, [0, 0, 0, 0], id="1f1b-none"),
    ],
)
def test_pending_weight_gradients(schedule: Schedule, p: int, m: int, expected: list[float]) -> None:
    assert [pending_weight_gradients(schedule, p, m, s) for s in range(p)] == expected


def test_default_pass_times() -> None:
    # backward = 2 x forward, W = half of it: T_B + T_W = 2 T_F (Qi et al. 2024 sec. 2.3, Table 1).
    times = pass_times(forward=3e-3)
    assert (times.forward, times.backward, times.weight, times.input_gradient) == (3e-3, 6e-3, 3e-3, 3e-3)
    assert pass_times(forward=1.0, backward=5.0).weight == 2.5


# ---------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        pytest.param(lambda: bubble_time(ONE_F_ONE_B, 0, 4, UNIT), "--stages", id="p-zero"),
        pytest.param(lambda: bubble_time(ONE_F_ONE_B, 4, 0, UNIT), "--micro-batches", id="m-zero"),
        pytest.param(lambda: bubble_time(INTERLEAVED, 4, 8, UNIT, 0), "--chunks", id="v-zero"),
        pytest.param(lambda: bubble_time(INTERLEAVED, 4, 6, UNIT, 2), "multiple of p", id="interleaved-m-not-multiple"),
        pytest.param(lambda: bubble_time(ONE_F_ONE_B, 4, 8, UNIT, 2), "only the interleaved", id="chunks-without-interleaved"),
        pytest.param(lambda: pass_times(forward=-1.0), "--t-forward", id="negative-forward"),
        pytest.param(lambda: pass_times(backward=0.0), "--t-backward", id="zero-backward"),
        pytest.param(lambda: pass_times(weight=-0.5), "--t-weight", id="negative-weight"),
        pytest.param(lambda: pass_times(forward=1.0, backward=2.0, weight=3.0), "cannot exceed", id="weight-over-backward"),
        pytest.param(lambda: micro_batches_for_target(ONE_F_ONE_B, 4, UNIT, 1.0), "--target", id="target-100pct"),
        pytest.param(lambda: micro_batches_for_target(ONE_F_ONE_B, 4, UNIT, 0.0), "--target", id="target-zero"),
        pytest.param(lambda: in_flight_micro_batches(ONE_F_ONE_B, 4, 8, 4), "stage must be", id="stage-out-of-range"),
    ],
)
def test_bad_input(call, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        call()


def test_interleaved_error_explains_megatron() -> None:
    with pytest.raises(InputError) as error:
        bubble_time(INTERLEAVED, 4, 6, UNIT, 2)
    message = str(error.value)
    assert "try 4 or 8" in message and "Megatron-LM" in message and "groups of p" in message


# ---------------------------------------------------------------------------------------------
# Properties

shapes = st.tuples(st.integers(1, 16), st.integers(1, 64), st.integers(1, 4))
fractions = st.integers(1, 99).map(lambda k: k / 100)


@settings(max_examples=200, deadline=None)
@given(shapes, st.integers(1, 20), st.integers(1, 20))
def test_share_and_relative_agree_with_bubble_and_ideal_time(shape, t_f: int, t_b: int) -> None:
    # The schedule-specific forms ((p-1)/(m+p-1), ...) equal t_pb/(t_pb + t_id) and t_pb/t_id.
    p, k, v = shape
    m = k * p
    times = PassTimes(float(t_f), float(t_b), t_b / 2)
    for schedule, chunks in ((GPIPE, 1), (ONE_F_ONE_B, 1), (INTERLEAVED, v)):
        bubble = bubble_time(schedule, p, m, times, chunks).value
        ideal = ideal_time(m, times).value
        assert bubble_share_of_total(schedule, p, m, times, chunks).value == pytest.approx(bubble / (bubble + ideal), rel=1e-12)
        assert bubble_relative_to_ideal(schedule, p, m, times, chunks).value == pytest.approx(bubble / ideal, rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(Schedule)), st.integers(1, 12), st.integers(1, 4), fractions, st.booleans())
def test_target_is_the_smallest_that_reaches_it(schedule: Schedule, p: int, v: int, target: float, relative: bool) -> None:
    chunks = v if schedule is INTERLEAVED else 1
    if schedule is DUALPIPE:  # two pipelines on the same p devices: p even (dualpipe.py's assert)
        p += p % 2
    m = int(micro_batches_for_target(schedule, p, UNIT, target, chunks=chunks, relative=relative).value)
    measure = bubble_relative_to_ideal if relative else bubble_share_of_total
    tau = Fraction(repr(target))
    assert Fraction(measure(schedule, p, m, UNIT, chunks).value) <= tau + Fraction(1, 10**12)
    step = p if schedule is INTERLEAVED else 2 if schedule is DUALPIPE else 1
    least = {ZB_H1: p, ZB_H2: 2 * p - 1, INTERLEAVED: p, DUALPIPEV: 2 * p, ZB_V: p, DUALPIPE: 2 * p}.get(schedule, 1)
    if m - step >= least:  # one step fewer misses the target
        assert measure(schedule, p, m - step, UNIT, chunks).value > target
    if schedule is INTERLEAVED:
        assert m % p == 0
