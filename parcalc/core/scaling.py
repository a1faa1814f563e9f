"""Scaling curves: one strategy rule evaluated at N = N_1 < N_2 < ... GPUs with the step-time
model of `fit` (parcalc.core.fit.estimate; `--best` takes parcalc.core.fit_search's fastest
configuration at each N and estimates it the same way). Nothing here times anything itself.

Two ways to grow the run (Amdahl 1967; Gustafson 1988):

- strong scaling: the global batch B stays fixed, so each GPU gets less of the same work;
- weak scaling: the batch per GPU B/N stays fixed, so the work grows with N.

At every N the throughput is X(N) = B(N) s / t_step(N) (tokens/s, fit's derivation), and

    S(N) = X(N) / X(N_ref)        E(N) = S(N) x N_ref / N

the speedup over the reference (the smallest N of the list at which the strategy runs and fits:
one GPU where it fits) and the parallel efficiency (parcalc.core.analyze.parallel_efficiency).
Under strong scaling S is t_ref / t_step (the same tokens per iteration); under weak scaling
S = (N / N_ref) t_ref / t_step, the scaled speedup, and E = t_ref / t_step.

Both are one ratio of GPU-seconds per sequence, c(N) = N t_step(N) / B(N): E = c_ref / c(N). The
step is a sum of the model's terms (parcalc.core.speedup.step_terms), so the GPU-time lost to
scaling splits exactly into those terms, c(N) - c_ref = sum_k [N t_k(N)/B(N) - N_ref t_k(ref)/B_ref]:
that is what "the terms that grow" are.

The knee is the first N whose efficiency is under a threshold (0.8 unless given): past it the GPUs
added buy less than that share of their ideal throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from itertools import pairwise

from parcalc.core.choices import Recompute
from parcalc.core.fit import Cluster, Config, Estimate, Training, estimate, invalid_reason
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

DEFAULT_KNEE = 0.8  # efficiency under which the curve has "bent": a common rule of thumb, not a law; --knee changes it
STRONG_SOURCE = "strong scaling (Amdahl 1967): fixed global batch; S = X(N) / X(N_ref), E = S N_ref / N (parcalc.core.analyze)"
WEAK_SOURCE = "weak scaling (Gustafson 1988): fixed batch per GPU; scaled speedup S = X(N) / X(N_ref), E = S N_ref / N (parcalc.core.analyze)"
KNEE_SOURCE = "the first N of the list whose parallel efficiency is under the threshold (--knee)"
MAX_POINTS = 64  # GPU counts in one curve: 1..2^20 in powers of two is 21; more is a typo or a loop


class Mode(str, Enum):
    STRONG = "strong"
    WEAK = "weak"


class Family(str, Enum):
    """How the layout grows with N (--strategy); FIXED keeps --tp/--pp and grows dp; BEST searches."""

    DP = "dp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    TP = "tp"
    PP = "pp"
    FIXED = "fixed"
    BEST = "best"


@dataclass(frozen=True)
class Rule:
    """The layout at each N: a family, with the settings every point shares."""

    family: Family = Family.DP
    tp: int = 1  # FIXED: the pinned tensor- and pipeline-parallel sizes (dp = N / (tp pp))
    pp: int = 1
    zero: int = 0  # FIXED: the ZeRO stage (the ZeRO families set their own)
    micro_batch: int = 1
    recompute: Recompute = Recompute.NONE
    sequence_parallel: bool = False  # with tp > 1
    # the ZeRO stage is the stack's default, not asked for: where there is one data-parallel rank it shards nothing and
    # the point runs without it (a stage the user gave is refused there instead)
    default_stage: bool = False

    def config(self, gpus: int) -> Config | str:
        """The configuration on `gpus` GPUs, or why this rule has none there."""
        f, b, r = self.family, self.micro_batch, self.recompute
        if f is Family.DP:
            return Config.of(1, 1, gpus, b, r)
        if f in (Family.ZERO1, Family.ZERO2, Family.ZERO3):
            if gpus == 1:
                return Config.of(1, 1, 1, b, r) if self.default_stage else "ZeRO shards over the data-parallel ranks; one GPU has none"
            return Config.of(1, 1, gpus, b, r, zero=int(f.value[-1]))
        if f is Family.TP:
            return Config.of(gpus, 1, 1, b, r, sequence_parallel=self.sequence_parallel and gpus > 1)
        if f is Family.PP:
            return Config.of(1, gpus, 1, b, r)
        if f is Family.FIXED:
            if gpus % (self.tp * self.pp):
                return f"tp x pp = {self.tp} x {self.pp} does not divide {gpus} GPUs"
            dp = gpus // (self.tp * self.pp)
            if self.zero and dp == 1 and not self.default_stage:
                return f"ZeRO-{self.zero} shards over the data-parallel ranks; dp = 1 has none"
            return Config.of(self.tp, self.pp, dp, b, r, zero=self.zero if dp > 1 else 0, sequence_parallel=self.sequence_parallel and self.tp > 1)
        raise ValueError(f"{f} has no fixed layout")  # BEST: the search's, per N

    def describe(self) -> str:
        names = {Family.DP: "DP (dp = N)", Family.ZERO1: "ZeRO-1 (dp = N)", Family.ZERO2: "ZeRO-2 (dp = N)",
                 Family.ZERO3: "ZeRO-3 (dp = N)", Family.TP: "TP (tp = N)", Family.PP: "PP (pp = N, 1F1B)",
                 Family.BEST: "the search's fastest configuration at each N"}  # fmt: skip
        if self.family is Family.FIXED:
            text = f"TP {self.tp} x PP {self.pp} x DP N/{self.tp * self.pp}" + (f", ZeRO-{self.zero}" if self.zero else "")
        else:
            text = names[self.family]
        if self.family is not Family.BEST:
            text += f", b = {self.micro_batch}, recompute {self.recompute.value}" + (", SP" if self.sequence_parallel else "")
        return text


@dataclass(frozen=True)
class Point:
    """One N of the curve: its configuration and estimate when it runs, else why not."""

    gpus: int
    global_batch: int
    config: Config | None = None
    estimate: Estimate | None = None  # None: no valid layout, or it does not fit (then `memory` says how much)
    memory: float | None = None  # bytes on the fullest GPU (when a layout exists)
    note: str = ""
    speedup: Derivation | None = None
    efficiency: Derivation | None = None

    @property
    def timed(self) -> bool:
        return self.estimate is not None and self.speedup is not None


@dataclass(frozen=True)
class Curve:
    mode: Mode
    rule: Rule
    points: tuple[Point, ...]
    reference: Point | None  # None: the strategy runs at no N of the list
    threshold: float
    summary: tuple[Derivation, ...]  # speedup and efficiency at the largest N timed; knee where there is one

    def timed(self) -> list[Point]:
        return [p for p in self.points if p.timed]

    def knee(self) -> Point | None:
        return next((p for p in self.timed() if p.efficiency is not None and p.efficiency.value < self.threshold), None)


def check_gpu_counts(counts: Sequence[int], gpus_per_node: int, limit: int) -> tuple[int, ...]:
    """The list as given, if every count is a whole node or an even share of one, increasing and distinct."""
    if not counts:
        raise InputError("--gpus: give GPU counts, e.g. --gpus 1,2,4,8,16")
    if len(counts) > MAX_POINTS:
        raise InputError(f"--gpus: at most {MAX_POINTS} GPU counts in one curve, got {len(counts)}")
    for n in counts:
        if n < 1:
            raise InputError(f"--gpus: each count at least 1, got {n}")
        if n > limit:
            raise InputError(f"--gpus: at most {limit:,} GPUs, got {n:,}")
        if not (n % gpus_per_node == 0 or gpus_per_node % n == 0):
            raise InputError(f"--gpus: {n} GPUs neither divide a node of {gpus_per_node} nor fill whole nodes; use a divisor of "
                             f"{gpus_per_node} or a multiple of it (rank placement on nodes is Megatron-LM's, by whole nodes)")  # fmt: skip
    for a, b in pairwise(counts):
        if b == a:
            raise InputError(f"--gpus: {a} is listed twice; give each count once")
        if b < a:
            raise InputError(f"--gpus: counts in increasing order, got {b} after {a}")
    return tuple(counts)


def batch_at(mode: Mode, batch: int, gpus: int) -> int:
    """B(N): the global batch at N GPUs; `batch` is the global batch (strong) or the batch per GPU (weak)."""
    return batch if mode is Mode.STRONG else batch * gpus


Search = Callable[[TransformerModel, Training, Cluster], Config | str]


def scaling_curve(model: TransformerModel, training: Training, cluster: Cluster, counts: tuple[int, ...], rule: Rule,
                  mode: Mode = Mode.STRONG, batch: int = 1, threshold: float = DEFAULT_KNEE, *,
                  best: Search | None = None, progress: Callable[[int, int], None] | None = None) -> Curve:  # fmt: skip
    """The curve (module docstring). `training.global_batch` is replaced by B(N) at each point;
    `best(model, training, cluster)` gives the configuration of Family.BEST (the search's fastest
    that fits, or why none does)."""
    if not (0 < threshold < 1):
        raise InputError(f"--knee: an efficiency between 0 and 1 (exclusive), got {threshold!r}")
    if rule.family is Family.BEST and best is None:
        raise ValueError("Family.BEST needs the search")
    points = []
    for i, n in enumerate(counts):
        points.append(_point(model, replace(training, global_batch=batch_at(mode, batch, n)), replace(cluster, gpus=n), rule, best))
        if progress is not None:
            progress(i + 1, len(counts))
    reference = next((p for p in points if p.estimate is not None), None)
    if reference is None:
        return Curve(mode, rule, tuple(points), None, threshold, ())
    points = [_with_speedup(p, reference, mode) for p in points]
    reference = next(p for p in points if p.gpus == reference.gpus)
    curve = Curve(mode, rule, tuple(points), reference, threshold, ())
    return replace(curve, summary=_summary(curve))


def _point(model: TransformerModel, training: Training, cluster: Cluster, rule: Rule, best: Search | None) -> Point:
    n, batch = cluster.gpus, training.global_batch
    found = best(model, training, cluster) if rule.family is Family.BEST else rule.config(n)  # type: ignore[misc]
    if isinstance(found, str):
        return Point(n, batch, note=found)
    reason = invalid_reason(model, found, training, cluster)
    if reason is not None:
        return Point(n, batch, found, note=reason)
    est = estimate(model, found, training, cluster)
    if not est.fits:
        return Point(n, batch, found, memory=est.total_memory, note="does not fit")
    return Point(n, batch, found, est, est.total_memory)


def _with_speedup(point: Point, reference: Point, mode: Mode) -> Point:
    if point.estimate is None:
        return point
    assert reference.estimate is not None
    x_ref = reference.estimate.tokens_per_second.as_term("X_ref", f"throughput on N_ref = {reference.gpus} GPU(s)")
    x_ref = replace(x_ref, symbol="X_ref", latex=r"X_{\mathrm{ref}}")
    x = replace(point.estimate.tokens_per_second.as_term("X", f"throughput on N = {point.gpus} GPU(s)"), symbol="X", latex="X")
    source = STRONG_SOURCE if mode is Mode.STRONG else WEAK_SOURCE
    why = (f"the same global batch B = {point.global_batch} on both: S = t_ref / t_step" if mode is Mode.STRONG else
           f"B/N = {point.global_batch // point.gpus} sequences per GPU on both: S = (N / N_ref) t_ref / t_step")  # fmt: skip
    speedup = Derivation("speedup", f"Speedup on {point.gpus} GPU(s) over {reference.gpus}", "S", "S", "$X / $X_ref",
                         r"$X / $X_ref", (x, x_ref), x.value / x_ref.value, "", source, (why,))  # fmt: skip
    from parcalc.core.speedup import efficiency_derivation

    efficiency = efficiency_derivation(speedup, reference.gpus, point.gpus)
    efficiency = replace(efficiency, label=f"Parallel efficiency on {point.gpus} GPU(s)", source=source)
    return replace(point, speedup=speedup, efficiency=efficiency)


def lost_time(point: Point, reference: Point) -> dict[str, float]:
    """GPU-seconds per sequence each term of the step adds over the reference: N t_k(N)/B(N) - N_ref t_k(ref)/B_ref
    (module docstring); they add up to c(N) - c_ref, so E = c_ref / (c_ref + sum)."""
    from parcalc.core.speedup import step_terms

    assert point.estimate is not None and reference.estimate is not None
    here, there = step_terms(point.estimate), step_terms(reference.estimate)
    per, per_ref = point.gpus / point.global_batch, reference.gpus / reference.global_batch
    return {k: here[k] * per - there[k] * per_ref for k in here}


def growing_terms(point: Point, reference: Point) -> list[tuple[str, float]]:
    """The terms whose GPU-time per sequence grew, largest first (seconds)."""
    lost = lost_time(point, reference)
    scale = point.estimate.step.value * point.gpus / point.global_batch  # type: ignore[union-attr]
    return sorted(((k, v) for k, v in lost.items() if v > 1e-9 * scale), key=lambda kv: -kv[1])


def _summary(curve: Curve) -> tuple[Derivation, ...]:
    timed = curve.timed()
    last = timed[-1]
    assert last.speedup is not None and last.efficiency is not None
    out = [replace(last.speedup, label=f"Speedup at the largest N that runs: {last.gpus} GPUs over {curve.reference.gpus}"),  # type: ignore[union-attr]
           replace(last.efficiency, label=f"Parallel efficiency at {last.gpus} GPUs")]  # fmt: skip
    knee = curve.knee()
    if knee is not None:
        out.append(knee_derivation(curve, knee))
    return tuple(out)


def knee_derivation(curve: Curve, knee: Point) -> Derivation:
    """N_knee = min { N : E(N) < E_min }, with the efficiencies on both sides of it."""
    assert knee.efficiency is not None
    timed = curve.timed()
    before = timed[timed.index(knee) - 1] if timed.index(knee) > 0 else None
    inputs = [Term("E_min", "E_min", r"E_{\min}", curve.threshold, "fraction", "efficiency threshold (--knee)"),
              Term("E_knee", "E(N_knee)", r"E(N_{\mathrm{knee}})", knee.efficiency.value, "fraction", f"efficiency on {knee.gpus} GPUs")]  # fmt: skip
    if before is not None and before.efficiency is not None:
        inputs.append(Term("E_prev", "E(N_prev)", r"E(N_{\mathrm{prev}})", before.efficiency.value, "fraction",
                           f"efficiency on {before.gpus} GPUs, the count before (at or above the threshold)"))  # fmt: skip
    return Derivation("knee", f"Knee of the curve: efficiency under {curve.threshold:.0%} from {knee.gpus} GPUs", "N_knee",
                      r"N_{\mathrm{knee}}", "min { N : E(N) < $E_min }", r"\min\{N : E(N) < $E_min\}", tuple(inputs),
                      float(knee.gpus), "", KNEE_SOURCE)  # fmt: skip


def searched(space: object) -> Search:
    """Family.BEST's configuration at each N: parcalc.core.fit_search.search over `space` (a
    SearchSpace), its fastest configuration that fits (fit --search's first row)."""

    def best(model: TransformerModel, training: Training, cluster: Cluster) -> Config | str:
        from parcalc.core.fit_search import search

        found = search(model, training, cluster, space)  # type: ignore[arg-type]
        if len(found.evaluated) == 0:
            return "no configuration of the search is valid here"
        from parcalc.core.search_replay import replay_shown

        ranked = replay_shown(found, found.ranked(), lambda r: r[:1], model, training, cluster)  # its first row replayed, as fit --search's
        if ranked.size == 0:
            return f"nothing of {len(found.evaluated):,} configurations fits"
        return found.evaluated.config(int(ranked[0]))

    return best


__all__ = ["DEFAULT_KNEE", "Curve", "Family", "Mode", "Point", "Rule", "batch_at", "check_gpu_counts", "growing_terms",
           "knee_derivation", "lost_time", "scaling_curve", "searched"]
