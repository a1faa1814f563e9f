"""Pipeline-parallel schedules: closed-form bubbles, in-flight micro-batches, and the simulator's verdict.

Schedules: GPipe (Huang et al. 2019), 1F1B / PipeDream-Flush (Narayanan et al. 2021, sec. 2.2),
Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2), the zero-bubble
schedules ZB-H1 / ZB-H2 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", ICLR 2024), and
DualPipe (DeepSeek-V3 sec. 3.2.1: two pipelines of p stages in opposite directions, device d holding stage d
and p - 1 - d), DualPipeV (DeepSeek-AI's V-shaped DualPipe: each of p devices holds two of 2p stages, stage d on
the way down and 2p - 1 - d on the way back; deepseek-ai/DualPipe @3da1bbe).

Notation: p stages (devices), m micro-batches, v model chunks per device (interleaved);
t_f and t_b are the forward and the whole backward time of one micro-batch on one stage, and the
zero-bubble papers split the backward into B (input gradient) and W (weight gradient):
T_F = t_f, T_B = t_b - t_w, T_W = t_w. Two conventions for the bubble are in use and both are
given, named as such: the bubble as a share of the total time, t_pb / (t_pb + t_id) (seed 003's
"exact" (p - 1)/(m + p - 1)), and the bubble relative to the ideal compute time, t_pb / t_id
(Narayanan et al.'s "bubble time fraction" (p - 1)/m).

The closed forms are checked against the event simulator (parcalc.core.pipeline_sim) in the
tests; `analyse_bubble` runs both and says where they differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache

from parcalc.core import pipeline_sim as sim
from parcalc.core.choices import Schedule  # re-exported
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.frozen import frozen

NARAYANAN = "Narayanan et al. 2021 (Megatron-LM, SC'21), sec. 2.2.1"
NARAYANAN_INTERLEAVED = "Narayanan et al. 2021 (Megatron-LM, SC'21), sec. 2.2.2"
QI_TABLE_2 = "Qi et al. 2024 (Zero Bubble Pipeline Parallelism, ICLR 2024), sec. 2.3, Table 2"
DUALPIPE_README = ("deepseek-ai/DualPipe README @3da1bbe, 'Pipeline Bubbles and Memory Usage Comparison': DualPipeV's bubble "
                   "(PP/2 - 1)(F&B + B - 3W) over PP = 2p stages, F, B (full backward), W of one chunk, F&B an overlapped pair")  # fmt: skip
MEGATRON_CONSTRAINT = (
    "Megatron-LM runs the interleaved schedule in groups of p micro-batches, each device running chunk 1 "
    "for the p of a group, then chunk 2 for the same p, and so on: the first of the group has just left "
    "the last device when a device comes back for it (get_model_chunk_id in megatron/core/pipeline_parallel/"
    "schedules.py, which refuses an m that p does not divide)"
)
# A simulation beyond this many operations, or of more stages, is skipped: the closed forms need
# none. The bounds keep the simulation, its event table (JSON) and its picture (a row per stage)
# to about a second: 200,000 operations took 6 s as JSON, a timeline of 25,000 stages 4 GB.
MAX_SIMULATED_OPERATIONS = 50_000
MAX_SIMULATED_STAGES = 1024


# ---------------------------------------------------------------------------------------------
# Inputs


@frozen
class PassTimes:
    """Per-micro-batch times of one pipeline stage, in seconds.

    forward: t_f. backward: t_b, the whole backward (B + W). weight: t_w, the part of t_b that
    computes weight gradients (W), which only the zero-bubble schedules run on its own.
    """

    forward: float
    backward: float
    weight: float

    @property
    def input_gradient(self) -> float:
        """T_B of the zero-bubble papers: the backward without its weight-gradient part."""
        return self.backward - self.weight

    def scaled(self, factor: float) -> PassTimes:
        return PassTimes(self.forward * factor, self.backward * factor, self.weight * factor)


def pass_times(forward: float | None = None, backward: float | None = None, weight: float | None = None) -> PassTimes:
    """Per-pass times with the defaults of the handcrafted schedules' analyses.

    Defaults: t_f = 1 s (a unit: shares and counts do not depend on it), t_b = 2 t_f and
    t_w = t_b / 2: every forward matmul has two backward matmuls of the same FLOPs, one computing
    the input gradient (B) and one the weight gradient (W), so T_B + T_W = 2 T_F (Qi et al. 2024
    sec. 2.3, fig. 1, Table 1).
    """
    t_f = 1.0 if forward is None else forward
    t_b = 2 * t_f if backward is None else backward
    t_w = t_b / 2 if weight is None else weight
    for flag, value in (("--t-forward", t_f), ("--t-backward", t_b)):
        if not (math.isfinite(value) and value > 0):
            raise InputError(f"{flag}: must be a time greater than zero, got {value!r}")
    if not (math.isfinite(t_w) and t_w >= 0):
        raise InputError(f"--t-weight: must be a time of at least zero, got {t_w!r}")
    if t_w > t_b:
        raise InputError(f"--t-weight: the weight-gradient pass W ({t_w:g} s) is part of the backward and cannot exceed --t-backward ({t_b:g} s)")
    return PassTimes(t_f, t_b, t_w)


def dualpipe_bubble(stages: int, forward: float, backward: float, weight: float) -> float:
    """DeepSeek-V3's DualPipe bubble per iteration (DeepSeek-V3 technical report, sec. 3.2.1, Table 2:
    (PP/2 - 1)(F&B + B - 3W), F, B, W of ONE of the two model chunks each GPU holds, F&B taken as F + B).
    forward / backward / weight: one micro-batch through the whole stage (both chunks), the weight
    gradients among backward; each chunk's are half of them."""
    f, b, w = forward / 2, backward / 2, weight / 2
    return max(stages // 2 - 1, 0) * max(f + b + b - 3 * w, 0.0)


def _zbv_bubble(stages: int, micro_batches: int, times: PassTimes) -> float:
    """ZB-V's idle time per device for balanced stages: the makespan of its simulated order less one device's work."""
    timeline = simulate_schedule(Schedule.ZB_V, stages, micro_batches, times)
    return max(0.0, timeline.makespan - micro_batches * (times.forward + times.backward))


def check_shape(schedule: Schedule, stages: int, micro_batches: int, chunks: int) -> None:
    """Bad p, m or v as InputError naming the flag and the constraint."""
    for flag, value in (("--stages", stages), ("--micro-batches", micro_batches), ("--chunks", chunks)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{flag}: must be a whole number of at least 1, got {value!r}")
    if chunks > 1 and schedule is not Schedule.INTERLEAVED:
        raise InputError(f"--chunks: only the interleaved schedule splits a device's layers into chunks (got --chunks {chunks} with {schedule.value}"
                         + (f"; {schedule.label}'s two chunks a device are its V, not a choice)" if schedule.v_shape else ")"))  # fmt: skip
    if schedule is Schedule.DUALPIPE and (stages % 2 or micro_batches % 2 or micro_batches < 2 * stages):
        raise InputError(f"{'--pp' if stages % 2 else '--micro-batches'}: DualPipe needs p even and an even m of at least 2p (got p = {stages}, m = {micro_batches}; "
                         "deepseek-ai/DualPipe dualpipe.py asserts num_ranks % 2 == 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2)")
    if schedule is Schedule.DUALPIPEV and micro_batches < 2 * stages:
        raise InputError(f"--micro-batches: DualPipeV needs at least 2p = {2 * stages} micro-batches (got {micro_batches}; "
                         "deepseek-ai/DualPipe dualpipev.py asserts num_chunks >= num_ranks * 2)")  # fmt: skip
    if schedule is Schedule.INTERLEAVED and micro_batches % stages:
        lower = micro_batches // stages * stages
        options = " or ".join(str(n) for n in (lower, lower + stages) if n >= 1)
        raise InputError(
            f"--micro-batches: the interleaved schedule needs m to be a multiple of p (got m = {micro_batches}, "
            f"p = {stages}; try {options}): {MEGATRON_CONSTRAINT}"
        )


def schedule_terms(schedule: Schedule, stages: int, micro_batches: int, chunks: int, times: PassTimes) -> dict[str, Term]:
    terms = {
        "p": Term("p", "p", "p", stages, "", "devices, each two stages of the V (stage d and 2p - 1 - d)" if schedule.v_shape
                  else "pipeline stages, two a device: stage d each way (d and p - 1 - d)" if schedule is Schedule.DUALPIPE
                  else "pipeline stages (one device each)"),
        "m": Term("m", "m", "m", micro_batches, "", "micro-batches per mini-batch"),
        "v": Term("v", "v", "v", chunks, "", "model chunks (virtual stages) per device"),
        "t_f": Term("t_f", "t_f", "t_f", times.forward, "s", "forward time of one micro-batch on one stage"),
        "t_b": Term("t_b", "t_b", "t_b", times.backward, "s", "backward time of one micro-batch on one stage (B + W)"),
    }
    if schedule.splits_backward:
        terms["T_F"] = Term("T_F", "T_F", "T_F", times.forward, "s", "F: forward pass")
        terms["T_B"] = Term("T_B", "T_B", "T_B", times.input_gradient, "s", "B: input-gradient pass, t_b - t_w")
        terms["T_W"] = Term("T_W", "T_W", "T_W", times.weight, "s", "W: weight-gradient pass, t_w")
    return terms


# ---------------------------------------------------------------------------------------------
# Closed forms


def ideal_time(micro_batches: int, times: PassTimes) -> Derivation:
    """t_id = m (t_f + t_b): one device's compute per iteration (Narayanan et al. 2021, sec. 2.2.1)."""
    terms = schedule_terms(Schedule.ONE_F_ONE_B, 1, micro_batches, 1, times)
    return Derivation(
        key="ideal_time",
        label="Ideal compute time per iteration (t_id)",
        symbol="t_id",
        latex_symbol=r"t_{\mathrm{id}}",
        formula="$m × ($t_f + $t_b)",
        formula_latex=r"$m \times ($t_f + $t_b)",
        inputs=(terms["m"], terms["t_f"], terms["t_b"]),
        value=micro_batches * (times.forward + times.backward),
        unit="s",
        source=NARAYANAN,
    )


def bubble_time(schedule: Schedule, stages: int, micro_batches: int, times: PassTimes, chunks: int = 1) -> Derivation:
    """t_pb, the idle time of each device per iteration, in seconds, for balanced stages.

    GPipe and 1F1B: (p - 1)(t_f + t_b) (Narayanan et al. 2021 sec. 2.2.1); interleaved with v
    chunks: (p - 1)(t_f + t_b) / v (sec. 2.2.2); ZB-H1: (p - 1)(T_F + T_B - T_W) and ZB-H2:
    (p - 1)(T_F + T_B - 2 T_W) (Qi et al. 2024, Table 2).
    """
    check_shape(schedule, stages, micro_batches, chunks)
    terms = schedule_terms(schedule, stages, micro_batches, chunks, times)
    p = stages
    assumptions = ["balanced stages: every stage takes the same time per pass", "point-to-point communication time not counted"]
    inputs: tuple[str, ...]
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        formula, latex = "($p - 1) × ($t_f + $t_b)", r"($p - 1)\,($t_f + $t_b)"
        inputs, value, source = ("p", "t_f", "t_b"), (p - 1) * (times.forward + times.backward), NARAYANAN
    elif schedule is Schedule.INTERLEAVED:
        formula, latex = "($p - 1) × ($t_f + $t_b) / $v", r"\frac{($p - 1)\,($t_f + $t_b)}{$v}"
        inputs, value, source = ("p", "t_f", "t_b", "v"), (p - 1) * (times.forward + times.backward) / chunks, NARAYANAN_INTERLEAVED
        if micro_batches == stages and chunks > 1:
            assumptions.append("m = p: Megatron-LM runs every forward before any backward (no 1F1B phase); the bubble is the same")
    elif schedule is Schedule.ZB_V:
        inputs, source = ("p", "m", "T_F", "T_B", "T_W"), f"the event simulation of ZB-V's order ({sim.ZBV_SOURCE})"
        formula, latex = "idle of a device in the simulation of ZB-V's order", r"t_{\mathrm{idle}}(\mathrm{ZB\text{-}V})"
        value = _zbv_bubble(stages, micro_batches, times)
        assumptions += [
            "no closed form: ZB-V's order comes from the reference's heuristic (zbv.py), run here with these times per chunk "
            "(F = T_F/2, B = T_B/2, W = T_W/2) and the memory limit of 1F1B (2p chunks' activations a device), then simulated",
        ]
    elif schedule is Schedule.DUALPIPE:
        inputs, source = ("p", "T_F", "T_B", "T_W"), DUALPIPE_README.replace("DualPipeV's bubble", "DualPipe's bubble").replace(
            "over PP = 2p stages", "over PP = p stages, a stage each way on every device")
        t_f, t_b, t_w = times.forward, times.input_gradient, times.weight
        formula, latex = "($p / 2 - 1) × ($T_F + 2 × $T_B - $T_W)", r"\left(\frac{$p}{2} - 1\right)($T_F + 2\,$T_B - $T_W)"
        value = max(0.0, (p / 2 - 1) * (t_f + 2 * t_b - t_w))
        assumptions += [
            "per chunk (one stage, each way) F = T_F, B = T_B + T_W, W = T_W, and F&B = F + B: the overlapped pair hides its "
            "communication, not its compute",
            "the reference's order (dualpipe.py DualPipe.step); the closed form holds for T_F = T_B = T_W, the simulation otherwise",
        ]
    elif schedule is Schedule.DUALPIPEV:
        inputs, source = ("p", "T_F", "T_B", "T_W"), DUALPIPE_README
        t_f, t_b, t_w = times.forward, times.input_gradient, times.weight
        formula, latex = "($p - 1) × ($T_F + 2 × $T_B - $T_W) / 2", r"\frac{($p - 1)\,($T_F + 2\,$T_B - $T_W)}{2}"
        value = max(0.0, (p - 1) * (t_f + 2 * t_b - t_w) / 2)
        assumptions += [
            "per chunk (half a device's layers) F = T_F/2, B = (T_B + T_W)/2, W = T_W/2, and F&B = F + B: the overlapped pair "
            "hides its communication, not its compute",
            "the reference's order (dualpipev.py DualPipeV.step); the closed form holds for T_F = T_B = T_W, the simulation otherwise",
        ]
    else:
        inputs, source = ("p", "T_F", "T_B", "T_W"), QI_TABLE_2
        t_f, t_b, t_w = times.forward, times.input_gradient, times.weight
        if schedule is Schedule.ZB_H1:
            formula, latex = "($p - 1) × ($T_F + $T_B - $T_W)", r"($p - 1)\,($T_F + $T_B - $T_W)"
            raw, least = (p - 1) * (t_f + t_b - t_w), p
        else:
            formula, latex = "($p - 1) × ($T_F + $T_B - 2 × $T_W)", r"($p - 1)\,($T_F + $T_B - 2\,$T_W)"
            raw, least = (p - 1) * (t_f + t_b - 2 * t_w), 2 * p - 1
            assumptions.append(
                "ZB-H2's bubble is measured per device, from its first F to its last W: the optimizer step no longer "
                "synchronises the stages (Qi et al. 2024 sec. 4, post-validation), so each starts its next iteration when done"
            )
        assumptions.append(f"the handcrafted order of Qi et al. 2024 sec. 2 (built for T_F = T_B = T_W), at least {least} micro-batches")
        if not (t_w <= t_f and t_w <= t_b):
            assumptions.append("T_W is larger than T_F or T_B: the closed form does not hold (the simulation shows the real bubble)")
        elif micro_batches < least:
            assumptions.append(f"m < {least}: too few micro-batches to fill the warm-up; the simulation shows the real bubble")
        value = max(0.0, raw)
    return Derivation(
        key="bubble_time",
        label="Bubble time per iteration (t_pb, idle time of each device)",
        symbol="t_pb",
        latex_symbol=r"t_{\mathrm{pb}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(terms[k] for k in inputs),
        value=value,
        unit="s",
        source=source,
        assumptions=tuple(assumptions),
    )


def bubble_share_of_total(
    schedule: Schedule, stages: int, micro_batches: int, times: PassTimes, chunks: int = 1
) -> Derivation:
    """t_pb / (t_pb + t_id), a fraction: (p - 1)/(m + p - 1) for GPipe and 1F1B.

    Seed 003's "exact" bubble (4 stages, 16 micro-batches: 3/19 = 15.8 %).
    """
    terms = schedule_terms(schedule, stages, micro_batches, chunks, times)
    p, m, v = stages, micro_batches, chunks
    inputs: tuple[str, ...]
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        formula, latex, inputs, value = "($p - 1) / ($m + $p - 1)", r"\frac{$p - 1}{$m + $p - 1}", ("p", "m"), (p - 1) / (m + p - 1)
        source = f"t_pb / (t_pb + t_id) with t_pb and t_id of {NARAYANAN}"
    elif schedule is Schedule.INTERLEAVED:
        formula, latex = "($p - 1) / ($v × $m + $p - 1)", r"\frac{$p - 1}{$v \times $m + $p - 1}"
        inputs, value = ("p", "v", "m"), (p - 1) / (v * m + p - 1)
        source = f"t_pb / (t_pb + t_id) with t_pb of {NARAYANAN_INTERLEAVED}"
    else:
        bubble, ideal = bubble_time(schedule, p, m, times, v), ideal_time(m, times)
        return _ratio("bubble_share", "Bubble as a share of total time (t_pb / (t_pb + t_id))", "$t_pb / ($t_pb + $t_id)",
                      r"\frac{$t_pb}{$t_pb + $t_id}", bubble, ideal, bubble.value / (bubble.value + ideal.value))  # fmt: skip
    return Derivation(
        key="bubble_share",
        label="Bubble as a share of total time (t_pb / (t_pb + t_id))",
        symbol="β_total",
        latex_symbol=r"\beta_{\mathrm{total}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(terms[k] for k in inputs),
        value=value,
        unit="fraction",
        source=source,
    )


def bubble_relative_to_ideal(
    schedule: Schedule, stages: int, micro_batches: int, times: PassTimes, chunks: int = 1
) -> Derivation:
    """t_pb / t_id, a fraction: (p - 1)/m for GPipe and 1F1B, (p - 1)/(v m) interleaved.

    Narayanan et al. 2021's "bubble time fraction" (sec. 2.2.1, 2.2.2); seed 003's
    "approximation" (3/16 = 18.75 % for 4 stages and 16 micro-batches).
    """
    terms = schedule_terms(schedule, stages, micro_batches, chunks, times)
    p, m, v = stages, micro_batches, chunks
    inputs: tuple[str, ...]
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        formula, latex, inputs, value, source = "($p - 1) / $m", r"\frac{$p - 1}{$m}", ("p", "m"), (p - 1) / m, NARAYANAN
    elif schedule is Schedule.INTERLEAVED:
        formula, latex, inputs, value = "($p - 1) / ($v × $m)", r"\frac{$p - 1}{$v \times $m}", ("p", "v", "m"), (p - 1) / (v * m)
        source = NARAYANAN_INTERLEAVED
    else:
        bubble, ideal = bubble_time(schedule, p, m, times, v), ideal_time(m, times)
        return _ratio("bubble_relative", "Bubble relative to ideal compute time (t_pb / t_id)", "$t_pb / $t_id",
                      r"\frac{$t_pb}{$t_id}", bubble, ideal, bubble.value / ideal.value)  # fmt: skip
    return Derivation(
        key="bubble_relative",
        label="Bubble relative to ideal compute time (t_pb / t_id)",
        symbol="β_ideal",
        latex_symbol=r"\beta_{\mathrm{ideal}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(terms[k] for k in inputs),
        value=value,
        unit="fraction",
        source=source,
    )


def _ratio(key: str, label: str, formula: str, latex: str, bubble: Derivation, ideal: Derivation, value: float) -> Derivation:
    total = key == "bubble_share"
    return Derivation(
        key=key,
        label=label,
        symbol="β_total" if total else "β_ideal",
        latex_symbol=r"\beta_{\mathrm{total}}" if total else r"\beta_{\mathrm{ideal}}",
        formula=formula,
        formula_latex=latex,
        inputs=(bubble.as_term("t_pb"), ideal.as_term("t_id")),
        value=value,
        unit="fraction",
        source=bubble.source,
        assumptions=bubble.assumptions,
    )


def fewest_micro_batches(schedule: Schedule, stages: int) -> int:
    """The smallest m for which the schedule's closed form holds (checked against the simulator).

    ZB-H1 needs p micro-batches to fill 1F1B's warm-up; ZB-H2 needs 2p - 1, its first stage's
    warm-up forwards (Qi et al. 2024 sec. 2.2: "a sufficient number of microbatches"); the
    interleaved schedule needs a multiple of p.
    """
    return {Schedule.ZB_H1: stages, Schedule.ZB_H2: 2 * stages - 1, Schedule.INTERLEAVED: stages, Schedule.DUALPIPEV: 2 * stages,
            Schedule.ZB_V: stages, Schedule.DUALPIPE: 2 * stages}.get(schedule, 1)


def micro_batches_for_target(
    schedule: Schedule, stages: int, times: PassTimes, target: float, *, chunks: int = 1, relative: bool = False
) -> Derivation:
    """The smallest m whose bubble is at most `target` (a fraction in (0, 1)).

    Share of total time (default): t_pb / (t_pb + m (t_f + t_b)) <= target, so
    m >= t_pb (1 - target) / (target (t_f + t_b)); relative to ideal (`relative=True`):
    m >= t_pb / (target (t_f + t_b)). For GPipe and 1F1B these are (p - 1)(1 - target)/target and
    (p - 1)/target. The interleaved schedule rounds up to a multiple of p (Megatron-LM's
    constraint). Computed in exact rationals of the decimal inputs, so 10 % is exactly 1/10.
    """
    if not (math.isfinite(target) and 0 < target < 1):
        raise InputError(f"--target: the bubble target must be above 0 % and below 100 %, got {target * 100:g} %")
    check_shape(schedule, stages, fewest_micro_batches(schedule, stages), chunks)
    tau = Fraction(repr(target))
    p, v = stages, chunks
    per_micro_batch = Fraction(repr(times.forward)) + Fraction(repr(times.backward))
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        bubble = (p - 1) * per_micro_batch / v
    else:
        t_f, t_w = Fraction(repr(times.forward)), Fraction(repr(times.weight))
        t_b = Fraction(repr(times.backward)) - t_w
        if schedule is Schedule.DUALPIPEV:
            bubble = (p - 1) * (t_f + 2 * t_b - t_w) / 2
        elif schedule is Schedule.DUALPIPE:
            bubble = (Fraction(p, 2) - 1) * (t_f + 2 * t_b - t_w)
        elif schedule is Schedule.ZB_V:  # no closed form: the simulated bubble at p micro-batches, which more do not change
            bubble = Fraction(repr(_zbv_bubble(p, fewest_micro_batches(schedule, p), times)))
        else:
            bubble = (p - 1) * (t_f + t_b - (t_w if schedule is Schedule.ZB_H1 else 2 * t_w))
        bubble = max(Fraction(0), bubble)
    needed = bubble / (tau * per_micro_batch) if relative else bubble * (1 - tau) / (tau * per_micro_batch)
    least = fewest_micro_batches(schedule, stages)
    terms = schedule_terms(schedule, stages, 1, chunks, times)
    tau_term = Term("tau", "τ", r"\tau", target, "fraction", "bubble target" + (" (relative to ideal)" if relative else " (share of total)"))
    value = max(least, math.ceil(needed))
    if schedule is Schedule.INTERLEAVED:
        value = p * max(1, math.ceil(Fraction(math.ceil(needed), p)))
    if schedule is Schedule.DUALPIPE:  # half the micro-batches each way: m even (dualpipe.py's assert)
        value += value % 2
    if value > 2**53:  # as parcalc.units.MAX_COUNT: a count no float holds exactly, and no run has
        raise InputError(f"--target: a bubble of {target * 100:g} % needs more than 2^53 micro-batches; "
                         "give a larger target")  # fmt: skip
    measure = "relative to ideal compute" if relative else "as a share of total time"
    inputs: tuple[Term, ...]
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        body, body_tex = ("($p - 1) / $tau", r"\frac{$p - 1}{$tau}") if relative else (
            "($p - 1) × (1 - $tau) / $tau", r"\frac{($p - 1)(1 - $tau)}{$tau}")
        formula, latex, inputs = f"max(1, ⌈{body}⌉)", rf"\max\left(1, \left\lceil {body_tex} \right\rceil\right)", (terms["p"], tau_term)
    elif schedule is Schedule.INTERLEAVED:
        body, body_tex = ("($p - 1) / ($tau × $v × $p)", r"\frac{$p - 1}{$tau \times $v \times $p}") if relative else (
            "($p - 1) × (1 - $tau) / ($tau × $v × $p)", r"\frac{($p - 1)(1 - $tau)}{$tau \times $v \times $p}")
        formula = f"$p × max(1, ⌈{body}⌉)"
        latex = rf"$p \times \max\left(1, \left\lceil {body_tex} \right\rceil\right)"
        inputs = (terms["p"], tau_term, terms["v"])
    else:
        bubble_derivation = bubble_time(schedule, stages, least, times, chunks)
        least_term = Term("m_min", "m_min", r"m_{\min}", least, "", "fewest micro-batches for which the closed form holds")
        body, body_tex = ("$t_pb / ($tau × ($t_f + $t_b))", r"\frac{$t_pb}{$tau \times ($t_f + $t_b)}") if relative else (
            "$t_pb × (1 - $tau) / ($tau × ($t_f + $t_b))", r"\frac{$t_pb \times (1 - $tau)}{$tau \times ($t_f + $t_b)}")
        formula = f"max($m_min, ⌈{body}⌉)"
        latex = rf"\max\left($m_min, \left\lceil {body_tex} \right\rceil\right)"
        inputs = (bubble_derivation.as_term("t_pb"), tau_term, terms["t_f"], terms["t_b"], least_term)
    return Derivation(
        key="micro_batches_for_target_relative" if relative else "micro_batches_for_target",
        label=f"Smallest m with the bubble {measure} at most the target",
        symbol="m_τ",
        latex_symbol=r"m_{\tau}",
        formula=formula,
        formula_latex=latex,
        inputs=inputs,
        value=value,
        unit="",
        source="solving the bubble " + ("t_pb / t_id" if relative else "t_pb / (t_pb + t_id)") + " <= the target, for m"
        + (f"; m a multiple of p ({MEGATRON_CONSTRAINT})" if schedule is Schedule.INTERLEAVED else ""),
    )


def in_flight_micro_batches(schedule: Schedule, stages: int, micro_batches: int, stage: int = 0, chunks: int = 1) -> float:
    """Peak number of micro-batches whose activations a pipeline stage holds at once.

    Counted in units of one micro-batch's activations for all of the stage's layers (the
    activations B needs, M_B in Qi et al. 2024), so that activation memory = this x
    per-micro-batch activations of the stage. `stage` is 0-based (stage 0 holds the most).
    Each value is what the simulator counts for the schedule's order (tests/test_pipeline_sim.py):
    - GPipe keeps every micro-batch until the backward passes start: m.
    - 1F1B: stage s runs p - s - 1 warm-up forwards, then one more before its first backward
      (PipeDream-Flush, Narayanan et al. 2021 sec. 2.2): min(p - s, m). ZB-H1 keeps 1F1B's
      count (Qi et al. 2024 sec. 2.3: (p - i + 1) M_B on worker i = s + 1).
    - Interleaved with v chunks: Megatron-LM's warm-up of (p - s - 1) x 2 + (v - 1) x p chunk
      forwards plus the one in progress, each 1/v of the stage (megatron/core/pipeline_parallel/
      schedules.py, forward_backward_pipelining_with_interleaving); for s = 0 that is
      p (1 + (p - 1) / (p v)), Korthikanti et al. 2022 sec. 4.2.3. When m = p Megatron-LM runs
      every forward first, so every stage holds all m.
    - ZB-H2: 2(p - s) - 1 micro-batches, at most m (Qi et al. 2024 sec. 2.3: (2p - 2i + 1) M_B
      on worker i = s + 1; 2p - 1 on the first).
    - DualPipeV: 2p + 1 chunks' activations on every device, p + 1/2 in units of a device's
      (the DualPipe README's "PP + 1" over PP = 2p stages; the simulator counts the same).
    The micro-batches whose B has finished but W has not hold less (M_W); see
    `pending_weight_gradients`.
    """
    check_shape(schedule, stages, micro_batches, chunks)
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < stages:
        raise InputError(f"stage must be between 0 and {stages - 1}, got {stage!r}")
    p, m, s, v = stages, micro_batches, stage, chunks
    if schedule is Schedule.GPIPE:
        return float(m)
    if schedule in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1):
        return float(min(p - s, m))
    if schedule is Schedule.INTERLEAVED:
        if v == 1:
            return float(min(p - s, m))
        if m == p:
            return float(m)
        warm_up = (p - s - 1) * 2 + (v - 1) * p
        return min(warm_up + 1, m * v) / v
    if schedule is Schedule.DUALPIPEV:
        return p + 0.5
    if schedule is Schedule.DUALPIPE:  # the README's PP + 1 (a stage's micro-batch each), as the simulation counts
        return float(p + 1)
    if schedule is Schedule.ZB_V:  # what the simulator counts for the reference's order at T_F = T_B = T_W: p once m >= p
        return float(_unit_timeline(schedule, stages, micro_batches).peak_in_flight[stage])
    return float(min(2 * (p - s) - 1, m))


@lru_cache(maxsize=1024)
def _unit_timeline(schedule: Schedule, stages: int, micro_batches: int) -> sim.Timeline:
    """The schedule simulated at T_F = T_B = T_W (one unit each), whose counts of micro-batches in flight and waiting for W
    are the memory's: kept once per shape, since the search asks for them per stage of every configuration (a ZB-V order
    is the reference's heuristic, tens of ms each)."""
    return simulate_schedule(schedule, stages, micro_batches, pass_times(1.0, 2.0, 1.0))


def pending_weight_gradients(schedule: Schedule, stages: int, micro_batches: int, stage: int = 0) -> float:
    """Micro-batches waiting for their W pass on `stage` (0-based) at its activation peak.

    Only the zero-bubble schedules delay W: worker i = s + 1 holds (i - 1) M_W in ZB-H1 and
    (2i - 2) M_W in ZB-H2 besides its M_B (Qi et al. 2024 sec. 2.3), at most what m leaves.
    """
    if not 0 <= stage < stages:
        raise InputError(f"stage must be between 0 and {stages - 1}, got {stage!r}")
    if not schedule.splits_backward:
        return 0.0
    if schedule.v_shape or schedule is Schedule.DUALPIPE:  # what the simulator counts at the peak (DualPipe(V): no W waits then)
        return float(_unit_timeline(schedule, stages, micro_batches).pending_weight_at_peak[stage])
    alive = in_flight_micro_batches(schedule, stages, micro_batches, stage)
    waiting = stage if schedule is Schedule.ZB_H1 else 2 * stage
    return float(min(waiting, micro_batches - alive))


# ---------------------------------------------------------------------------------------------
# Simulation


def schedule_order(schedule: Schedule, stages: int, micro_batches: int, chunks: int = 1,
                   times: PassTimes | None = None) -> tuple[tuple[sim.Task, ...], ...]:
    """Each device's operations in the order the schedule runs them (times: what ZB-V's heuristic places the passes by,
    one stage's; None: T_F = T_B = T_W)."""
    check_shape(schedule, stages, micro_batches, chunks)
    if schedule is Schedule.GPIPE:
        return sim.gpipe_order(stages, micro_batches)
    if schedule is Schedule.ONE_F_ONE_B:
        return sim.one_f_one_b_order(stages, micro_batches)
    if schedule is Schedule.INTERLEAVED:
        return sim.interleaved_order(stages, micro_batches, chunks)
    if schedule is Schedule.ZB_H1:
        return sim.zb_h1_order(stages, micro_batches)
    if schedule is Schedule.DUALPIPEV:
        return sim.dualpipev_order(stages, micro_batches)
    if schedule is Schedule.DUALPIPE:
        return sim.dualpipe_order(stages, micro_batches)
    if schedule is Schedule.ZB_V:
        costs = times or pass_times(1.0, 2.0, 1.0)
        return sim.zbv_order(stages, micro_batches, costs.forward, costs.input_gradient, costs.weight)
    return sim.zb_h2_order(stages, micro_batches)


def simulate_schedule(
    schedule: Schedule,
    stages: int,
    micro_batches: int,
    times: PassTimes | Sequence[PassTimes],
    *,
    chunks: int = 1,
    latency: float = 0.0,
    chunk_shares: Sequence[Sequence[float]] | None = None,
) -> sim.Timeline:
    """Simulate the schedule; `times` is one PassTimes for every stage or one per stage; chunk_shares[d][c]: the
    share of device d's time its chunk c takes (None: 1/chunks each)."""
    per_stage = (times,) * stages if isinstance(times, PassTimes) else tuple(times)
    if len(per_stage) != stages:
        raise InputError(f"--stage-times: give one time per stage ({stages}), got {len(per_stage)}")
    if not (math.isfinite(latency) and latency >= 0):
        raise InputError(f"--p2p-latency: must be a time of at least zero, got {latency!r}")
    split = schedule.splits_backward
    durations = tuple(
        {sim.F: t.forward, sim.B: t.input_gradient if split else t.backward, sim.W: t.weight if split else 0.0} for t in per_stage
    )
    # ZB-V's heuristic places the passes by the median stage's times (the reference's avg_then_mid over the stages)
    median = sorted(per_stage, key=lambda t: t.forward)[len(per_stage) // 2]
    order = schedule_order(schedule, stages, micro_batches, chunks, median)
    if schedule is Schedule.DUALPIPE:  # a whole stage each way
        return sim.simulate(order, durations, micro_batches=micro_batches, chunks=2, latency=latency, layout=sim.BIDIRECTIONAL,
                            chunk_shares=[[1.0, 1.0]] * stages)
    if schedule.v_shape:  # two chunks a device, in a V
        return sim.simulate(order, durations, micro_batches=micro_batches, chunks=2, latency=latency, layout=sim.V_SHAPE)
    return sim.simulate(order, durations, micro_batches=micro_batches, chunks=chunks, latency=latency, chunk_shares=chunk_shares)


def operation_count(schedule: Schedule, stages: int, micro_batches: int, chunks: int = 1) -> int:
    chunks = 2 if schedule.v_shape else chunks
    return stages * micro_batches * chunks * (3 if schedule.splits_backward else 2)
