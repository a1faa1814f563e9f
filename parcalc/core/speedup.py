"""Speedup and parallel efficiency of each row of the strategy table (parcalc.core.fit_table).

Every row that fits gets the step-time model's estimate (parcalc.core.fit.estimate: the same
t_step, tokens/s and terms as `fit --tp --pp --dp` and the search), and from it

    S = t_ref / t_step          E = S x N_ref / N

- S, the speedup over a reference setup at the same global batch B and sequence length s (strong
  scaling: the same tokens per iteration, so the ratio of step times is the ratio of throughputs);
- E, the parallel efficiency: the speedup over the ideal N / N_ref (parcalc.core.analyze's
  convention, E = S N0 / N; with a one-GPU reference simply S / N).

The reference is one GPU of the same model without recomputation: the single-GPU row of the
table when it fits, else that row as it would run on a GPU of unbounded memory (its step time is the
model's all the same; the memory it would need is stated). So S <= N and E <= 1 up to the model's own
per-kernel effects: every strategy only adds to one GPU's work (communication, bubbles, recomputation,
smaller GEMMs), never takes from it.

Why not the smallest setup that fits, as parcalc did before: a reference that needs recomputation or
pipeline stages to fit (PP with full recomputation on 2 GPUs) is slow for reasons that more GPUs
remove, and made efficiencies of 110-121 %; and on N GPUs where nothing smaller fits, the reference
was a row of the table itself, whose "speedup" was 1x over itself (issue 28).

Why one strategy is slower than another is read off the model's own terms (compute,
recomputation, TP communication, bubble, PP sends, exposed DP sync, optimizer, ...): the term with
the largest excess over the fastest row is "the largest term that the fastest lacks".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from parcalc.core.choices import Recompute
from parcalc.core.fit import Cluster, Estimate, Training, estimate, memory_of
from parcalc.core.fit_table import StrategyRow, at_depth, strategy_table
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term

SPEEDUP_SOURCE = ("strong scaling at a fixed global batch: the ratio of step times is the ratio of throughputs; "
                  "E as parcalc.core.analyze.parallel_efficiency (Amdahl 1967)")  # fmt: skip
MAX_LAYERS_SOURCE = ("parcalc.core.fit_table.max_layers: memory per GPU is affine in the layers; two evaluations give the estimate, "
                     "the memory core confirms it and steps to the exact boundary (layers in steps of pp)")  # fmt: skip


@dataclass(frozen=True)
class Reference:
    """The setup every speedup is measured against: a row of a strategy table on `gpus` GPUs."""

    row: StrategyRow
    gpus: int
    why: str  # "" for one GPU; else why a bigger setup (the fewest GPUs that hold the model, or the N GPUs themselves)

    @property
    def step(self) -> Derivation:
        assert self.row.estimate is not None  # a reference is always a timed row
        return self.row.estimate.step

    def matches(self, row: StrategyRow) -> bool:
        """Whether `row` is the reference's row (rows are replaced when timed, so not by identity)."""
        return (row.family, row.recompute, row.gpus_used) == (self.row.family, self.row.recompute, self.gpus)

    def name(self) -> str:
        return row_name(self.row) if self.gpus == 1 else f"{row_name(self.row)} on {self.gpus} GPUs"

    def text(self) -> str:
        return f"{self.name()} ({self.why})" if self.why else self.name()


@dataclass(frozen=True)
class SpeedupTable:
    """The strategy table with every fitting row timed, the reference, and the summary derivations."""

    rows: tuple[StrategyRow, ...]
    reference: Reference | None  # None: nothing fits on N GPUs (no row is timed)
    summary: tuple[Derivation, ...]  # best_strategy, speedup, efficiency, lowest_speedup, max_layers (those that exist)

    def timed(self) -> list[StrategyRow]:
        """The rows that fit, with their step time, speedup and efficiency."""
        return [r for r in self.rows if r.speedup is not None]

    def parallel(self) -> list[StrategyRow]:
        """The timed rows of the parallel strategies (more than one GPU); the single-GPU rows when there are none."""
        timed = self.timed()
        return [r for r in timed if r.gpus_used > 1] or timed

    def fastest(self) -> StrategyRow | None:
        """The parallel strategy with the highest speedup (least t_step; the first of equals)."""
        rows = self.parallel()
        return min(rows, key=lambda r: r.estimate.step.value) if rows else None  # type: ignore[union-attr]

    def slowest(self) -> StrategyRow | None:
        """The parallel strategy with the lowest speedup (the last of equals)."""
        rows = self.parallel()
        return max(reversed(rows), key=lambda r: r.estimate.step.value) if rows else None  # type: ignore[union-attr]


def row_name(row: StrategyRow) -> str:
    return row.family + ("" if row.recompute is Recompute.NONE else f" + {row.recompute.value} recomputation")


def timed_strategy_table(model: TransformerModel, training: Training, cluster: Cluster,
                         recomputes: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL), *,
                         micro_batch: int = 1, deepest: bool = True, runnable_only: bool = False,
                         progress: Callable[[int, int], None] | None = None) -> SpeedupTable:  # fmt: skip
    """parcalc.core.fit_table.strategy_table with step time, tokens/s, speedup and efficiency on
    every row that fits (module docstring), and the derivations that answer "which is fastest,
    by how much, and how deep a model fits"; `progress(done, total)`: each row's memory is the first half, its
    step time the second."""
    sized = strategy_table(model, training, cluster, recomputes, micro_batch=micro_batch, deepest=deepest,
                           runnable_only=runnable_only,
                           progress=None if progress is None else lambda done, total: progress(done, 2 * total))  # fmt: skip
    timed_rows: list[StrategyRow] = []
    for row in sized:
        if progress is not None:
            progress(len(sized) + len(timed_rows), 2 * len(sized))
        timed_rows.append(_timed(model, training, cluster, row))
    rows = tuple(timed_rows)
    reference = reference_setup(model, training, cluster, rows, recomputes, micro_batch)
    if reference is None:
        return SpeedupTable(rows, None, _max_layers_summary(model, training, cluster, rows) if deepest else ())
    rows = tuple(_with_speedup(row, reference) for row in rows)
    table = SpeedupTable(rows, reference, ())
    summary = _summary(table, reference) + (_max_layers_summary(model, training, cluster, rows) if deepest else ())
    return replace(table, summary=summary)


def _timed(model: TransformerModel, training: Training, cluster: Cluster, row: StrategyRow) -> StrategyRow:
    """The row with the step-time model's estimate, when it fits (a layout that runs out of memory has no step time)."""
    if not row.fits or row.config is None:
        return row
    return replace(row, estimate=estimate(model, row.config, training, replace(cluster, gpus=row.gpus_used)))


def reference_setup(model: TransformerModel, training: Training, cluster: Cluster, rows: tuple[StrategyRow, ...],
                    recomputes: tuple[Recompute, ...], micro_batch: int) -> Reference | None:  # fmt: skip
    """The setup speedups are measured against (module docstring); None when nothing fits on N GPUs."""
    if not any(r.estimate is not None for r in rows):
        return None
    single = next((r for r in rows if r.gpus_used == 1 and r.recompute is Recompute.NONE and r.config is not None), None)
    if single is None or single.config is None:  # a table without its single-GPU row (not made by strategy_table)
        return None
    if single.estimate is not None:
        return Reference(single, 1, "")
    unbounded = replace(single, estimate=estimate(model, single.config, training, replace(cluster, gpus=1)))
    need = f"{single.memory / 2**30:,.1f} GiB" if single.memory is not None else "more than it has"
    return Reference(unbounded, 1, f"were its memory unbounded: it would need {need} of {cluster.capacity / 2**30:,.0f} GiB")


def _fastest(rows: list[StrategyRow]) -> StrategyRow:
    return min(rows, key=lambda r: r.estimate.step.value)  # type: ignore[union-attr]


def _with_speedup(row: StrategyRow, reference: Reference) -> StrategyRow:
    if row.estimate is None:
        return row
    speedup = speedup_derivation(row, reference)
    return replace(row, speedup=speedup, efficiency=efficiency_derivation(speedup, reference.gpus, row.gpus_used))


def speedup_derivation(row: StrategyRow, reference: Reference) -> Derivation:
    """S = t_ref / t_step for one timed row."""
    assert row.estimate is not None
    t_ref = Term("t_ref", "t_ref", r"t_{\mathrm{ref}}", reference.step.value, "s",
                 f"step time of the reference, {reference.text()}", reference.step.source)  # fmt: skip
    t_step = row.estimate.step.as_term("t_step", f"step time of {row_name(row)} on {row.gpus_used} GPU(s)")
    return Derivation("speedup", f"Speedup of {row_name(row)} over {reference.name()}", "S", "S", "$t_ref / $t_step",
                      r"$t_ref / $t_step", (t_ref, t_step), t_ref.value / t_step.value, "", SPEEDUP_SOURCE,
                      ("the same global batch and sequence length on both: the same tokens per iteration",))  # fmt: skip


def efficiency_derivation(speedup: Derivation, reference_gpus: int, gpus: int) -> Derivation:
    """E = S x N_ref / N (parcalc.core.analyze.parallel_efficiency): S / N for a one-GPU reference."""
    from parcalc.core.analyze import parallel_efficiency

    s = speedup.as_term("S", "speedup over the reference")
    n = Term("N", "N", "N", gpus, "", "GPUs of this strategy")
    inputs: tuple[Term, ...]
    if reference_gpus == 1:
        inputs, formula, latex = (s, n), "$S / $N", r"$S / $N"
    else:
        ref = Term("N_ref", "N_ref", r"N_{\mathrm{ref}}", reference_gpus, "", "GPUs of the reference")
        inputs, formula, latex = (s, ref, n), "$S × $N_ref / $N", r"$S \times $N_ref / $N"
    label = speedup.label.replace("Speedup of", "Parallel efficiency of", 1)
    return Derivation("efficiency", label, "E", "E", formula, latex, inputs, parallel_efficiency(speedup.value, reference_gpus, gpus),
                      "fraction", SPEEDUP_SOURCE)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# What makes one row slower than another, in the model's terms


def step_terms(est: Estimate) -> dict[str, float]:
    """t_step split into the model's named terms (seconds; parcalc.core.timing.terms' names, every term, 0 where the
    configuration has none of it); they add up to t_step.

    Compute is split into the kernels of the forward and backward and the recomputed forward, so
    that recomputation is a term of its own (parcalc.core.fit.estimate's t_compute = m (t_f + t_b + t_r))."""
    from parcalc.core.timing.terms import RECOMPUTE_NAME, STEP_TERMS

    m, t_r = est.compute.term("m").value, est.compute.term("t_r").value
    recompute = m * t_r
    present = {d.key: d.value for d in est.step_terms()}
    terms = {}
    for term in STEP_TERMS:
        if term.key == "t_compute":
            terms[term.name], terms[RECOMPUTE_NAME] = present[term.key] - recompute, recompute
        else:
            terms[term.name] = present.get(term.key, 0.0)
    return terms


def excess_terms(slow: Estimate, fast: Estimate) -> list[tuple[str, float]]:
    """The terms in which `slow` exceeds `fast`, largest first (seconds of excess)."""
    a, b = step_terms(slow), step_terms(fast)
    excess = [(name, a[name] - b[name]) for name in a if a[name] - b[name] > 1e-12 * max(slow.step.value, 1e-30)]
    return sorted(excess, key=lambda x: -x[1])


def overheads(est: Estimate) -> list[tuple[str, float]]:
    """The terms other than the forward and backward kernels, largest first: what parallelism adds."""
    return sorted(((k, v) for k, v in step_terms(est).items() if k != "compute" and v > 0), key=lambda x: -x[1])


# ---------------------------------------------------------------------------------------------
# The summary: what a worksheet cites (answers: [best_strategy, speedup, efficiency, lowest_speedup, max_layers])


def _summary(table: SpeedupTable, reference: Reference) -> tuple[Derivation, ...]:
    fastest, slowest = table.fastest(), table.slowest()
    assert fastest is not None and slowest is not None and fastest.estimate is not None
    step = fastest.estimate.step
    best = replace(step, key="best_strategy", label=f"Fastest strategy that fits: {row_name(fastest)} on {fastest.gpus_used} GPU(s)",
                   assumptions=step.assumptions + (f"the fastest of the {len(table.parallel())} parallel strategies that fit (least t_step)",))  # fmt: skip
    assert fastest.speedup is not None and fastest.efficiency is not None and slowest.speedup is not None
    lowest = replace(slowest.speedup, key="lowest_speedup", label=f"Lowest speedup: {row_name(slowest)} over {reference.name()}")
    return (best, fastest.speedup, fastest.efficiency, lowest)


def _max_layers_summary(model: TransformerModel, training: Training, cluster: Cluster, rows: tuple[StrategyRow, ...]) -> tuple[Derivation, ...]:
    """The deepest model of this layer shape any strategy holds, with the memory on both sides of the boundary."""
    deepest = [r for r in rows if r.max_layers]
    if not deepest:
        return ()
    row = max(deepest, key=lambda r: (r.max_layers or 0, -(r.memory or 0.0)))
    assert row.config is not None and row.max_layers is not None
    used = replace(cluster, gpus=row.gpus_used)
    step = row.config.layout.pp * row.config.layout.chunks
    at = memory_of(*at_depth(model, row.config, row.max_layers, cluster.framework), training, used).worst.total.value
    beyond = memory_of(*at_depth(model, row.config, row.max_layers + step, cluster.framework), training, used).worst.total.value
    inputs = (Term("C", "C", "C", cluster.capacity, "B", f"memory of one {cluster.gpu_name}", cluster.capacity_source),
              Term("M_L", "M(L_max)", r"M(L_{\max})", at, "B", f"memory per GPU at {row.max_layers} layers (fits)"),
              Term("M_next", "M(L_max + p)", r"M(L_{\max} + p)", beyond, "B", f"memory per GPU at {row.max_layers + step} layers ({'fits' if beyond <= cluster.capacity else 'does not fit'})"),
              Term("p", "p", "p", step, "", "layers step by the pipeline stages (x chunks)"))  # fmt: skip
    return (Derivation("max_layers", f"Deepest model that fits: {row.max_layers} layers with {row_name(row)} on {row.gpus_used} GPU(s)",
                       "L_max", r"L_{\max}", "max { L : M(L) ≤ $C }", r"\max\{L : M(L) \le $C\}", inputs, float(row.max_layers), "",
                       MAX_LAYERS_SOURCE, (f"{model.name}'s layer shape, deeper or shallower; the most layers of any strategy in the table",)),)  # fmt: skip
