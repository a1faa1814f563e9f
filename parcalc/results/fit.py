"""`fit`: what fits on N GPUs and how fast: the strategy table (one row per strategy with its memory and the
deepest model it holds), one configuration's memory and step time, or the search over every layout
ranked by step time (or cost), with several GPU types compared."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from parcalc.core.choices import Recompute, Schedule
from parcalc.results.estimate import _assumptions, _inputs
from parcalc.results.fit_request import DEFAULT_TOP, FitMode, FitRequest, request

__all__ = ["DEFAULT_TOP", "FitRequest", "from_flags", "request", "result"]  # DEFAULT_TOP: --top's help (parcalc.commands.fit)

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Config, Training
    from parcalc.core.fit_search import SearchResult
    from parcalc.core.fit_table import StrategyRow
    from parcalc.core.model import TransformerModel
    from parcalc.derivation import Result, Table


def result(req: FitRequest, *, every_row: bool = False, pictures: bool = False) -> Result:
    """The strategy table, the pinned configuration, or the search, as the request asks; no parsing.
    `every_row`: the search keeps every configuration's row (JSON and CSV print them all);
    `pictures`: the tables the pictures are drawn from. Nothing fits: InfeasibleResult, with the
    Result that shows what was tried."""
    from parcalc.errors import InfeasibleResult

    settings = list(req.settings)
    cluster, plan = req.cluster, req.plans[0]
    if req.mode is FitMode.SEARCH:
        clusters = list(req.clusters)
        # the picture plots every configuration (of one GPU type: several are compared in tables only)
        everything = every_row or (pictures and len(clusters) <= 1)
        if len(clusters) > 1:
            listed = [(k, ",".join(req.gpu_keys)) if k == "gpu" else (k, v) for k, v in settings]
            listed = [(k, ",".join(c.gpu_name for c in clusters)) if k == "gpu_name" else (k, v) for k, v in listed]
            return _compare_gpus(clusters, list(req.plans), req.rank_by, req.top, listed, req.training,
                                 lambda c: _search_result(req, c, everything,
                                                          [*settings[:1], ("gpu", req.gpu_keys[clusters.index(c)]), ("gpu_name", c.gpu_name),
                                                           *settings[3:]]))  # fmt: skip
        result = _search_result(req, cluster, everything, settings, time_all=pictures)
        if plan is not None:
            result = _with_run(result, plan, cluster, req.training, search=True, rank_by=req.rank_by)
        return result
    if req.mode is FitMode.CONFIGURATION:
        result = _configuration_result(req, settings, with_components=pictures)
        if plan is not None:
            result = _with_run(result, plan, cluster, req.training, search=False)
        return result
    result, nothing_fits = _table_result(req.model, req.training, cluster, req.micro_batch, req.recomputes, req.max_layers, settings,
                                         with_components=pictures, runnable_only=req.runnable_only)  # fmt: skip
    if nothing_fits is not None:
        raise InfeasibleResult(nothing_fits, result)  # the table that explains it, shown before the command fails
    return result


def from_flags(*, every_row: bool = False, pictures: bool = False, **flags: Any) -> Result:
    """`fit`'s Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.fit and the library (parcalc.results.run) both call."""
    from parcalc.results.fit_brief import briefed

    return briefed(result(request(**flags), every_row=every_row, pictures=pictures))  # what the brief terminal form keeps (parcalc.render.brief)


def _table_result(shape: TransformerModel, training: Training, cluster: Cluster, micro_batch: int,
                  recomputes: tuple[Recompute, ...], with_layers: bool, settings: list,
                  with_components: bool = False, runnable_only: bool = False) -> tuple[Result, str | None]:  # fmt: skip
    """The table, and why nothing fits when nothing does; `with_components`: also each row's memory
    by component (table "strategy_memory", drawn by -o fit.svg); `runnable_only`: only the families
    the framework (given with --framework) runs (parcalc.core.fit_table.families)."""
    from parcalc.core.speedup import timed_strategy_table
    from parcalc.derivation import Column, Result, Table
    from parcalc.results.parse import ProgressBar

    progress = ProgressBar("sizing and timing each strategy")
    try:
        timed = timed_strategy_table(shape, training, cluster, recomputes, micro_batch=micro_batch, deepest=with_layers,
                                     runnable_only=runnable_only, progress=progress)  # fmt: skip
    finally:
        progress.close()
    rows = timed.rows
    columns = (
        Column("strategy", "strategy"), Column("recompute", "recompute"), Column("tp", "tp"), Column("pp", "pp"), Column("dp", "dp"),
        Column("gpus", "GPUs"), Column("memory", "memory per GPU", "B", memory=True), Column("fits", "fits"), Column("headroom", "headroom", "B", memory=True),
        *((Column("max_layers", "max layers"),) if with_layers else ()),
        Column("t_step", "step", "s"), Column("tokens_per_second", "throughput", "tokens/s"), Column("speedup", "speedup"),
        Column("efficiency", "efficiency", "fraction"), Column("note", "note"),
    )  # fmt: skip
    table_rows = []
    for row in rows:
        c, est = row.config, row.estimate
        note = row.note or (_reference_note(timed.reference) if timed.reference is not None and timed.reference.matches(row) else "")
        cells = (row.family, row.recompute.value, c.layout.tp if c else None, c.layout.pp if c else None, c.layout.dp if c else None, row.gpus_used,
                 row.memory, bool(row.fits) if row.memory is not None else None, row.headroom,
                 *((row.max_layers,) if with_layers else ()),
                 est.step.value if est else None, est.tokens_per_second.value if est else None,
                 row.speedup.value if row.speedup else None, row.efficiency.value if row.efficiency else None, note)  # fmt: skip
        table_rows.append(cells)
    reference = timed.reference
    against = f"; speedup over {reference.text()}" if reference is not None else ""
    table = Table("strategies", f"Strategies on {cluster.gpus} x {cluster.gpu_name}, b = {micro_batch}{against}", columns, tuple(table_rows))
    verdicts = _speedup_verdicts(timed) + _table_verdicts(shape, rows, cluster, with_layers)
    title = f"What fits: {shape.name} on {cluster.gpus} x {cluster.gpu_name} (B = {training.global_batch}, s = {training.seq_len})"
    tables = (table, _strategy_memory_table(rows)) if with_components else (table,)
    result = Result(command="fit", title=title, inputs=tuple(_inputs(shape, training, cluster)), derivations=timed.summary,
                    tables=tables, verdicts=tuple(verdicts), settings=tuple(settings), fits=any(row.fits for row in rows),
                    assumptions=_assumptions(shape, training, cluster) + _speedup_assumptions(timed))  # fmt: skip
    return result, None if any(row.fits for row in rows) else _nothing_fits(shape, rows, cluster, with_layers)


def _reference_note(reference: Any) -> str:
    """The reference row's note: speedup 1, and its step time where it is timed as if its memory were unbounded."""
    if reference.row.fits:
        return "the reference (speedup 1)"
    return f"the reference (speedup 1): {reference.step.value:,.3g} s per step were its memory unbounded"


def _strategy_memory_table(rows: tuple[StrategyRow, ...]) -> Table:
    """Each strategy row with a layout: its fullest GPU's memory by component (StrategyRow.components)."""
    from parcalc.derivation import Column, Table

    laid_out = [row for row in rows if row.components and row.memory is not None]
    names = [name for name, _ in laid_out[0].components] if laid_out else []
    columns = (Column("strategy", "strategy"), Column("fits", "fits"), *(Column(f"c{i}", name, "B", memory=True) for i, name in enumerate(names)),
               Column("total", "memory per GPU", "B", memory=True))  # fmt: skip
    body = tuple((f"{row.family}, {row.recompute.value}", "yes" if row.fits else "no", *(v for _, v in row.components), row.memory)
                 for row in laid_out)  # fmt: skip
    return Table("strategy_memory", "Memory of the fullest GPU of each strategy, by component", columns, body)


def _speedup_verdicts(timed: Any) -> list[str]:
    """The highest and the lowest speedup, each with its reason in the step-time model's terms."""
    from parcalc.core.speedup import excess_terms, row_name, step_terms
    from parcalc.units import format_time

    reference, fastest, slowest = timed.reference, timed.fastest(), timed.slowest()
    if reference is None or fastest is None or slowest is None:
        return []

    def ms(value: float) -> str:
        return format_time(value, significant=3)

    def figures(row: StrategyRow) -> str:
        return f"{row.speedup.value:.3g}x (efficiency {row.efficiency.value:.1%})"  # type: ignore[union-attr]

    best, base = fastest.estimate, reference.row.estimate
    if reference.matches(fastest):
        verdicts = [f"highest speedup: {row_name(fastest)} on {fastest.gpus_used} GPU(s), the reference itself (1x)"
                    + (f": {reference.why}" if reference.why else "")]
    else:
        ref_terms, own = step_terms(base), step_terms(best)
        cut = max(own, key=lambda k: ref_terms[k] - own[k])
        why = f"{cut} {ms(ref_terms[cut])} → {ms(own[cut])} over {fastest.gpus_used} GPU(s)"
        added = excess_terms(best, base)
        if added:
            why += ", adding " + ", ".join(f"{name} {ms(value)}" for name, value in added[:2])
        verdicts = [f"highest speedup: {row_name(fastest)} {figures(fastest)} over {reference.name()}: {why}"]
    if slowest is not fastest:
        excess = excess_terms(slowest.estimate, best)
        if excess:
            name, value = excess[0]
            why = (f"{name} {ms(value)} of its {ms(slowest.estimate.step.value)} step beyond {row_name(fastest)}'s, "
                   "the largest term the fastest lacks")  # fmt: skip
            if len(excess) > 1:
                why += "; then " + ", ".join(f"{n} {ms(v)}" for n, v in excess[1:3])
        else:
            why = "the same terms as the fastest"
        text = f"lowest speedup: {row_name(slowest)} {figures(slowest)}: {why}"
        if slowest.speedup.value < 1 and not reference.matches(slowest):
            text += f"; slower than {reference.name()}"
            if slowest.max_layers and reference.row.max_layers is not None and slowest.max_layers > reference.row.max_layers:
                text += f", yet it holds {slowest.max_layers} layers where the reference holds {reference.row.max_layers}"
        verdicts.append(text)
    return verdicts


def _speedup_assumptions(timed: Any) -> tuple[str, ...]:
    if timed.reference is None:
        return ()
    return (f"speedup S = t_ref / t_step over {timed.reference.text()}, both at the same global batch (strong scaling); "
            "parallel efficiency E = S x N_ref / N; rows that do not fit have no step time",)


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def _row_name(row: StrategyRow) -> str:
    return row.family + ("" if row.recompute is Recompute.NONE else f" + {row.recompute.value} recomputation")


def _table_verdicts(shape: TransformerModel, rows: tuple[StrategyRow, ...], cluster: Cluster, with_layers: bool) -> list[str]:
    fitting = [r for r in rows if r.fits]
    verdicts = []
    if fitting:
        least = min(fitting, key=lambda r: r.memory or 0.0)
        verdicts.append(f"{len(fitting)} of {sum(r.memory is not None for r in rows)} strategies fit {shape.layers} layers; "
                        f"the least memory: {_row_name(least)} ({_gib(least.memory or 0.0)} of {_gib(cluster.capacity)})")  # fmt: skip
    if with_layers:
        candidates = [r for r in rows if r.max_layers]
        if candidates:
            deepest = max(candidates, key=lambda r: (r.max_layers or 0, -(r.memory or 0.0)))
            verdicts.append(f"the deepest model of this layer shape: {deepest.max_layers} layers with {_row_name(deepest)} "
                            f"on {deepest.gpus_used} GPU(s)")  # fmt: skip
    return verdicts


def _nothing_fits(shape: TransformerModel, rows: tuple[StrategyRow, ...], cluster: Cluster, with_layers: bool) -> str:
    measured = [r for r in rows if r.memory is not None]
    if not measured:
        return f"nothing fits: no strategy has a valid layout for {shape.name} on {cluster.gpus} GPUs"
    least = min(measured, key=lambda r: r.memory or 0.0)
    text = (f"nothing fits: the smallest footprint is {_gib(least.memory or 0.0)} per GPU ({_row_name(least)}), "
            f"over the {_gib(cluster.capacity)} of a {cluster.gpu_name}")  # fmt: skip
    deepest = [r for r in measured if r.max_layers]
    if with_layers and deepest:
        best = max(deepest, key=lambda r: r.max_layers or 0)
        text += f"; at most {best.max_layers} of the {shape.layers} layers would fit ({_row_name(best)})"
    if cluster.gpus > 1:
        text += "; --search tries every TP x PP x DP layout"
    return text


def _search_result(req: FitRequest, cluster: Cluster, everything: bool, settings: list, time_all: bool = False) -> Result:
    from dataclasses import replace

    from parcalc.core.fit import estimate
    from parcalc.core.fit_search import search
    from parcalc.derivation import Result
    from parcalc.errors import InfeasibleResult, InputError
    from parcalc.results.parse import ProgressBar

    assert req.space is not None  # a search's request
    shape, training, top, explain = req.model, req.training, req.top, req.explain
    space = replace(req.space, time_all=time_all)  # the search picture plots the configurations that do not fit too
    progress = ProgressBar("evaluating layouts")
    try:
        found = search(shape, training, cluster, space, progress)
    finally:
        progress.close()
    evaluated = found.evaluated
    if len(evaluated) == 0:
        reasons = "; ".join(f"{reason}: {count}" for reason, count in found.rejected.most_common() if count) or "no layout"
        raise InputError(f"no configuration satisfies the constraints on {cluster.gpus} GPUs, B = {training.global_batch} ({reasons})")
    from parcalc.core.search_replay import EVERY_ROW_NOTE, replay_least, replay_shown, replays, shown_basis_note

    def floor_note(rows: Any) -> tuple[str, ...]:  # what the memory of each row of the table shown is
        return (shown_basis_note(found, rows),) if replays(cluster) else ()

    # the rows shown replayed (parcalc.core.search_replay): each layout's fastest configuration whose replay fits
    replaying = ProgressBar("replaying the allocator over the shown rows' steps")
    try:
        ranked = replay_shown(found, found.ranked(), lambda r: distinct_layouts(evaluated, r, top), shape, training, cluster, replaying)
    finally:
        replaying.close()
    if ranked.size == 0:
        least = replay_least(found, shape, training, cluster)
        why = (f"nothing fits: the smallest footprint of {len(evaluated):,} configurations is {_gib(float(evaluated.columns['memory'][least]))} "
               f"per GPU ({evaluated.config(least).label()}), over the {_gib(cluster.capacity)} of a {cluster.gpu_name}")  # fmt: skip
        # the evaluated configurations and the rejections still print (JSON for a sweep's script), then exit 1
        title = f"No configuration fits: {shape.name} on {cluster.gpus} x {cluster.gpu_name} (B = {training.global_batch}, s = {training.seq_len})"
        extra = _parallel_columns(found, shape) + _basis_columns(everything)
        if everything:  # JSON and CSV: every configuration, as when some fit, each row's memory_basis saying what its memory is
            tried = _configurations_table(found, None, "Every configuration evaluated", extra)
            notes: tuple[str, ...] = (EVERY_ROW_NOTE,) if replays(cluster) else ()
        else:  # the other formats: the smallest footprints, the nearest to fitting
            import numpy as np

            nearest = np.argsort(evaluated.columns["memory"], kind="stable")[:top]
            tried = replace(_configurations_table(found, nearest, f"The {len(nearest)} smallest footprints (none fits)",
                                                  _with_layouts_shown(found, nearest, extra)), key="smallest")  # fmt: skip
            notes = floor_note(nearest)
        shown = Result(command="fit", title=title, inputs=tuple(_inputs(shape, training, cluster)), derivations=(),
                       tables=(tried, _rejections_table(found)),
                       verdicts=(why,), settings=tuple(settings), fits=False,
                       assumptions=_assumptions(shape, training, cluster) + _search_assumptions(shape, training, space) + req.notes + notes)  # fmt: skip
        raise InfeasibleResult(why, shown)
    ranked = _at_step_clocks(found, ranked, top, shape, training, cluster)
    ranked = replay_shown(found, ranked, lambda r: distinct_layouts(evaluated, r, top), shape, training, cluster)  # what the clocks moved in
    best = estimate(shape, evaluated.config(int(ranked[0])), training, cluster)
    extra = _parallel_columns(found, shape) + _basis_columns(everything)
    shown = distinct_layouts(evaluated, ranked, top)
    tables = [_configurations_table(found, shown, f"The {shown.size} fastest layouts that fit, each at its fastest configuration "
                                    f"(of {ranked.size:,} that fit)", _with_layouts_shown(found, shown, extra))]  # fmt: skip
    if everything:
        tables.insert(0, _configurations_table(found, None, "Every configuration evaluated", extra))
    tables.append(_rejections_table(found))
    worst = best.memory.worst
    memory = worst.memory_derivations()
    derivations = memory + best.derivations() if explain else (best.step, best.tokens_per_second, best.mfu, best.hfu)
    verdicts = _search_verdicts(found, ranked, best, cluster, shown)
    title = f"Fastest configurations: {shape.name} on {cluster.gpus} x {cluster.gpu_name} (B = {training.global_batch}, s = {training.seq_len})"
    return Result(command="fit", title=title, inputs=tuple(_inputs(shape, training, cluster)), derivations=tuple(derivations),
                  tables=tuple(tables), verdicts=tuple(verdicts), settings=tuple(settings), fits=True,
                  assumptions=_assumptions(shape, training, cluster) + _search_assumptions(shape, training, space) + req.notes + floor_note(shown))  # fmt: skip


# configurations timed again at their own clocks per row of the table, at most (_at_step_clocks): a bound on the search's
# extra time on a GPU whose clock follows its power (Llama 3 8B on 8 H200: 298 one by one to settle exactly, 2.2 s)
RETIME_BUDGET = 16


def _at_step_clocks(found: SearchResult, ranked: Any, top: int, shape: TransformerModel, training: Training, cluster: Cluster) -> Any:
    """On a GPU whose SM clock follows the step's power (parcalc.core.timing.step_clock) the search times every configuration
    at the capped steps' clock (its columns hold no split by kind to solve each one's clock); the shown configurations are
    timed again as fit times one, at their own clocks, and the ranking re-sorted, until every one shown is (at most
    RETIME_BUDGET x top of them; then the ones timed rank first, among themselves): each row then equals fit of its
    configuration. The others keep the capped clock's times, so a configuration that would run at a higher clock than that
    (a light Tensor Core load) can rank lower than it would."""
    from parcalc.core.fit import estimate

    tiled = cluster.spec.tiled
    if tiled is None or not tiled.power_model or cluster.sm_clock is not None:
        return ranked
    columns, timed = found.evaluated.columns, set[int]()
    while todo := [i for i in distinct_layouts(found.evaluated, ranked, top).tolist() if i not in timed]:
        if len(timed) >= RETIME_BUDGET * top:  # enough: the ones timed at their own clocks first, ranked among themselves
            import numpy as np

            first = np.isin(ranked, np.fromiter(timed, dtype=ranked.dtype))
            return np.concatenate((ranked[first], ranked[~first]))
        for i in todo:
            est = estimate(shape, found.evaluated.config(i), training, cluster)
            times = {"t_compute": est.compute, "t_tp": est.tp_comm, "t_bubble": est.bubble, "t_pp": est.pp_comm, "t_dp": est.dp_comm,
                     "t_optimizer": est.optimizer, "t_step": est.step, "tokens_per_second": est.tokens_per_second, "mfu": est.mfu,
                     "hfu": est.hfu, "t_cp": est.cp_comm, "t_ep": est.ep_comm, "t_host": est.host}  # fmt: skip
            for key, derivation in times.items():
                columns[key][i] = derivation.value if derivation is not None else 0.0
            timed.add(i)
        ranked = found.ranked()
    return ranked


def _search_assumptions(shape: TransformerModel, training: Training, space: Any) -> tuple[str, ...]:
    """What the search tries of context and expert parallelism, and why no more."""
    from parcalc.core.fit_search import CP_MIN_SEQ_LEN

    if space.cp is not None:
        cp = f"context parallelism pinned to cp = {space.cp} ({space.cp_comm})"
    elif training.seq_len >= CP_MIN_SEQ_LEN:
        cp = (f"context parallelism: every cp dividing the GPUs with s divisible by 2 cp ({space.cp_comm} exchanges; "
              f"the search tries cp from s = {CP_MIN_SEQ_LEN:,} tokens, or pinned by --cp)")  # fmt: skip
    else:
        cp = f"context parallelism not searched: s = {training.seq_len:,} < {CP_MIN_SEQ_LEN:,} tokens (cp = 1; --cp pins one)"
    if space.shard_group is not None:
        cp += f"; hybrid sharding pinned: ZeRO-1/2/3 over shard groups of S = {space.shard_group} (layouts whose dp x cp it divides)"
    else:
        cp += ("; hybrid sharding: ZeRO-1/2/3 configurations tried with every shard group S dividing dp x cp from one node's share "
               "of it (GPUs per node / tp ranks) up to dp x cp (column S where it varies; --shard-group pins one)")  # fmt: skip
    if shape.moe is None:
        return (cp,)
    ep = (f"expert parallelism pinned to ep = {space.ep}" if space.ep is not None else
          f"expert parallelism: every ep dividing the {shape.moe.experts} routed experts with ep x etp dividing tp x cp x dp")
    limit = f", at most {space.max_nodes_per_token} nodes per token (capped at each EP group's nodes)" if space.max_nodes_per_token else ""
    routing = f", {space.moe_routing} routing" if space.moe_routing != "uniform" else ""
    return (cp, ep + f"; etp = tp throughout the search (--etp describes one configuration); tokens exchanged by {space.moe_dispatcher}"
            f"{limit}{routing}, {space.ep_overlap} overlap (t_ep)")


def _configuration_result(req: FitRequest, settings: list, with_components: bool = False) -> Result:
    """Exactly one configuration: its memory and step-time derivations; `with_components`: each
    stage's memory by component too (table "stage_components", drawn by -o x.svg)."""
    from parcalc.core.fit import estimate
    from parcalc.derivation import Result

    shape, training, cluster, config, no_ops = req.model, req.training, req.cluster, req.config, req.no_ops
    assert config is not None  # a configuration's request
    best = estimate(shape, config, training, cluster)
    worst = best.memory.worst
    timing = (f"{config.label()}: {best.step.value:.4g} s per iteration, MFU {best.mfu.value:.1%}, "
              f"{best.tokens_per_second.value:,.0f} tokens/s, {_gib(best.total_memory)} per GPU")  # fmt: skip
    # The answer first (issue 28): a layout that does not fit says so before any time, which is what it would take if it fit.
    verdicts = ([f"{timing} (fits)"] if best.fits else
                [f"does not fit: {_gib(best.total_memory)} per GPU, more than the {_gib(cluster.capacity)} of one {cluster.gpu_name}",
                 f"were it to fit: {timing}"])  # fmt: skip
    parts = {"compute": best.compute.value, "TP communication": best.tp_comm.value, "bubble": best.bubble.value,
             "PP sends": best.pp_comm.value, "exposed DP sync": best.dp_comm.value, "optimizer": best.optimizer.value,
             "MoE dispatch and combine": best.ep_comm.value if best.ep_comm is not None else 0.0}  # fmt: skip
    verdicts.append("shares of the step: " + ", ".join(f"{k} {v / best.step.value:.1%}" for k, v in parts.items() if v > 0))
    title = f"One configuration: {shape.name} on {cluster.gpus} x {cluster.gpu_name} (B = {training.global_batch}, s = {training.seq_len})"
    return Result(command="fit", title=title, inputs=tuple(_inputs(shape, training, cluster)),
                  derivations=(*worst.memory_derivations(), *best.derivations()),
                  tables=((_stages_table(best),) if config.layout.pp > 1 else ()) + ((_stage_components(best),) if with_components else ()),
                  verdicts=tuple(verdicts), assumptions=no_ops + req.notes + _assumptions(shape, training, cluster), settings=tuple(settings),
                  fits=bool(best.fits), lead=1 if best.fits else 2)  # fmt: skip


def _stage_components(best: Any) -> Table:
    from parcalc.results.memory import stage_components_table

    return stage_components_table(best.memory)


def _stages_table(best: Any) -> Table:
    """Layers, parameters and memory of every pipeline stage of one configuration."""
    from parcalc.core.choices import Schedule
    from parcalc.core.stages import split_text
    from parcalc.derivation import Column, Table

    split = tuple(int(s.layers.value) for s in best.memory.stages)
    last = len(split) - 1
    if best.config.layout.schedule is Schedule.DUALPIPE:  # GPU d runs stage d one way and stage p - 1 - d the other
        # (core/memory.py dualpipe_parameters: its parameters and memory are both stages'), so the two end GPUs hold both ends
        rows = tuple((s.stage + 1, int(s.layers.value), f"stage {last + 1 - s.stage}" + (", embedding, LM head" if s.stage in (0, last) else ""),
                      s.parameters.value, s.total.value) for s in best.memory.stages)  # fmt: skip
        title = f"Pipeline stages ({split_text(split)} layers; one GPU of each, which DualPipe also gives a second stage)"
    elif best.config.layout.schedule.v_shape and best.config.layout.pp > 1:  # a V, with a layout or without: GPU 0 runs the
        # first virtual stage and the last (core/memory.py head_stage)
        rows = tuple((s.stage + 1, int(s.layers.value), "embedding, LM head" if s.stage == 0 else "", s.parameters.value, s.total.value)
                     for s in best.memory.stages)  # fmt: skip
        title = f"Pipeline stages ({split_text(split)} layers; one GPU of each, two stages each in a V)"
    else:
        rows = tuple((s.stage + 1, int(s.layers.value), "embedding" if s.stage == 0 else "LM head" if s.stage == last else "",
                      s.parameters.value, s.total.value) for s in best.memory.stages)  # fmt: skip
        title = f"Pipeline stages ({split_text(split)} layers; one GPU of each)"
    columns = (Column("stage", "stage"), Column("layers", "layers"), Column("also", "also holds"), Column("parameters", "parameters"),
               Column("memory", "memory", "B", memory=True))  # fmt: skip
    return Table("stages", title, columns, rows)


def _parallel_columns(found: SearchResult, shape: TransformerModel) -> tuple[str, ...]:
    """cp / ep and their times as columns where the search varied them (an MoE model: ep always); t_host where the
    profile models its host (some configuration waits for it, or could: a timed t_host column)."""
    c = found.evaluated.columns
    cp = len(found.evaluated) > 0 and bool((c["cp"] > 1).any())
    ep = shape.moe is not None
    # the shard group S where some ZeRO-1/2/3 configuration shards over fewer than dp x cp ranks (hybrid sharding)
    hybrid = len(found.evaluated) > 0 and bool(((c["zero"] >= 1) & (c["shard_group"] < c["dp"] * c["cp"])).any())
    host = len(found.evaluated) > 0 and bool((c["t_host"] > 0).any())
    # the layout string where some configuration's pipeline has one (given, or proposed by the search: LAYOUT_FIELDS)
    layout = len(found.evaluated) > 0 and bool((c["pipeline_layout"] >= 0).any())
    return ((("cp",) if cp else ()) + (("ep",) if ep else ()) + (("shard_group",) if hybrid else ()) + (("t_cp",) if cp else ())
            + (("t_ep",) if ep else ()) + (("t_host",) if host else ()) + (("pipeline_layout",) if layout else ()))  # fmt: skip


def _with_layouts_shown(found: SearchResult, rows: Any, extra: tuple[str, ...]) -> tuple[str, ...]:
    """`extra` for a table of `rows` of the search: the layout string column only where one of them has a layout (a
    column of '-' would push the terminal's 80 columns into one record a row for nothing)."""
    if "pipeline_layout" not in extra or bool((found.evaluated.columns["pipeline_layout"][rows] >= 0).any()):
        return extra
    return tuple(k for k in extra if k != "pipeline_layout")


def _basis_columns(everything: bool) -> tuple[str, ...]:
    """memory_basis where every configuration is listed (JSON, CSV): which number each row's memory is (search_columns.MEMORY_BASES);
    the rows a terminal shows are replayed where their step is walked, the textbook sum where it is not, which the
    assumptions say row by row (parcalc.core.search_replay.shown_basis_note)."""
    from parcalc.core.search_columns import BASIS_FIELDS

    return BASIS_FIELDS if everything else ()


# what the search table's abbreviated headings stand for, told under it in the terminal (render.brief.legend_lines)
COLUMN_ABOUT = {"tp": "tensor-parallel degree", "pp": "pipeline stages", "dp": "data-parallel replicas", "cp": "context-parallel degree",
                "ep": "expert-parallel degree", "micro_batch": "micro-batch (sequences)", "micro_batches": "micro-batches a step",
                "sequence_parallel": "sequence parallelism", "chunks": "model chunks a stage (interleaved 1F1B; 1: none)",
                "shard_group": "shard group, the ranks ZeRO shards over (below dp x cp: hybrid sharding)",
                "first_stage_layers": "layers on the first stage", "last_stage_layers": "layers on the last stage",
                "pipeline_layout": "Megatron-LM's --pipeline-layout of the stages (given, or the balanced one the search proposes)",
                "mfu": "model FLOPs utilisation", "hfu": "hardware FLOPs utilisation (recomputation counted)",
                "memory_basis": ("what the memory is: 'replayed' (the caching allocator replayed over the step walk, or no step walked "
                                 "and 'textbook': memory's and fit's total either way, but for a 1F1B pipeline row not shown over the "
                                 "capacity) or 'floor' (the floor of that replay plus its reserve, a lower bound of the total: a row "
                                 "not shown)")}  # fmt: skip


def _configurations_table(found: SearchResult, order: Any, title: str, extra: tuple[str, ...] = ()) -> Table:
    from parcalc.core.fit_search import CONFIG_FIELDS, COST_FIELDS
    from parcalc.core.timing.terms import BY_KEY
    from parcalc.derivation import Column, Table

    units = {"memory": "B", "tokens_per_second": "tokens/s", "mfu": "fraction", "hfu": "fraction"} | dict.fromkeys(BY_KEY, "s")
    labels = {"micro_batch": "b", "micro_batches": "m", "sequence_parallel": "SP", "chunks": "v", "first_stage_layers": "L first",
              "last_stage_layers": "L last", "memory": "memory", "tokens_per_second": "tokens/s", "mfu": "MFU", "hfu": "HFU", "cp": "CP",
              "ep": "EP", "shard_group": "S", "memory_basis": "memory is", "pipeline_layout": "layout"} | {key: term.heading for key, term in BY_KEY.items()}  # fmt: skip
    columns = tuple(Column(k, labels.get(k, k), units.get(k, ""), memory=k == "memory", about=COLUMN_ABOUT.get(k, ""))
                    for k in CONFIG_FIELDS + COST_FIELDS + extra)  # fmt: skip
    key = "configurations" if order is None else "top"
    return Table(key, title, columns, tuple(found.evaluated.rows(order, extra)))


def _rejections_table(found: SearchResult) -> Table:
    from parcalc.derivation import Column, Table

    rows = tuple((reason, count) for reason, count in found.rejected.most_common())
    return Table("rejected", "Rejected (layouts for divisibility and placement, configurations otherwise)",
                 (Column("reason", "reason"), Column("count", "count")), rows)  # fmt: skip


def config_flags(config: Config, cp_comm_default: str = "p2p") -> str:
    """The flags that pin `config` (issue 28: pinning the printed tp/pp/dp dropped ZeRO-1 and sequence
    parallelism, and the result no longer fit): every setting the search chose that differs from fit's default
    (the CP exchange: the framework's, cp_comm_default)."""
    flags = [f"--tp {config.layout.tp}", f"--pp {config.layout.pp}", f"--dp {config.layout.dp}", f"--micro-batch {config.micro_batch}"]
    if config.recompute is not Recompute.NONE:
        flags.append(f"--recompute {config.recompute.value}")
    if config.recompute_layers is not None:
        flags.append(f"--recompute-layers {config.recompute_layers}")
    if config.layout.zero:
        flags.append(f"--zero {config.layout.zero}")
    if config.layout.shard_group is not None:
        flags.append(f"--shard-group {config.layout.shard_group}")
    if config.layout.sequence_parallel:
        flags.append("--sequence-parallel")
    if config.layout.schedule is Schedule.INTERLEAVED and config.layout.chunks > 1:
        flags.append(f"--schedule interleaved --chunks {config.layout.chunks}")
    elif config.layout.schedule.splits_backward and config.layout.pp > 1:
        flags.append(f"--schedule {config.layout.schedule.value}")
    if config.layout.pipeline_layout is not None and config.layout.split_by is None:  # not the framework's own (it makes it again)
        flags.append(f"--pipeline-layout '{config.layout.pipeline_layout}'")
    for flag, value in (("--first-stage-layers", config.layout.first_stage_layers), ("--last-stage-layers", config.layout.last_stage_layers)):
        if value is not None:
            flags.append(f"{flag} {value}")
    flags += [flag for flag, on in (("--embedding-in-split", config.layout.embedding_in_split), ("--loss-in-split", config.layout.loss_in_split)) if on]
    if config.layout.cp > 1:
        flags.append(f"--cp {config.layout.cp}" + (f" --cp-comm {config.layout.cp_comm}" if config.layout.cp_comm != cp_comm_default else ""))
    if config.layout.ep > 1 or config.layout.etp is not None:
        flags.append(f"--ep {config.layout.ep}" + (f" --etp {config.layout.etp}" if config.layout.etp is not None else ""))
    return " ".join(flags)


# What makes two configurations one layout: how the GPUs are split, the (tp, pp, cp, dp, ep) the search
# counts as its layouts (SearchResult.layouts). The rest is how a layout is run, and its variants are
# often within 0.1 % of each other (the shard group alone moves the exposed DP sync by microseconds):
# the top table shows each layout once, at its fastest.
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep")
RUN_FIELDS_TEXT = "micro-batch, recomputation, ZeRO stage, SP, schedule, stage split and shard group"


def distinct_layouts(evaluated: Any, ranked: Any, top: int) -> Any:
    """Indices of the fastest configuration of each of the `top` fastest layouts (LAYOUT_FIELDS), in
    `ranked`'s order: the first configuration of a layout in the ranking is its fastest."""
    import numpy as np

    c = evaluated.columns
    keys = list(zip(*(c[k][ranked].tolist() for k in LAYOUT_FIELDS if k in c), strict=True))
    chosen: list[int] = []
    seen: set[tuple[object, ...]] = set()
    for position, key in enumerate(keys):
        if key not in seen:
            seen.add(key)
            chosen.append(int(ranked[position]))
            if len(chosen) == top:
                break
    return np.array(chosen, dtype=ranked.dtype)


def _search_verdicts(found: SearchResult, ranked: Any, best: Any, cluster: Cluster, shown: Any = None) -> list[str]:
    import numpy as np

    from parcalc.core.timing.terms import BY_KEY

    evaluated = found.evaluated
    c = evaluated.columns
    first = int(ranked[0])
    # the distinct layouts among the fitting rows (return_index: np.unique without indices imports numpy.ma, ~10 ms)
    layouts_fitting = np.unique(np.stack([c[k][ranked] for k in LAYOUT_FIELDS if k in c], axis=1), axis=0, return_index=True)[0].shape[0]
    verdicts = [f"{len(evaluated):,} configurations evaluated on {found.layouts} layouts; {ranked.size:,} fit in {_gib(cluster.capacity)}, "
                f"on {layouts_fitting:,} of the layouts; the table shows each layout (tp x pp x dp x cp x ep) once, at its fastest "
                f"{RUN_FIELDS_TEXT}"]  # fmt: skip
    shares = ", ".join(f"{BY_KEY[d.key].name} {d.value / best.step.value:.0%}" for d in best.step_terms() if d.value > 0)
    verdicts.append(f"best: {best.config.label()}: {best.step.value:.4g} s per iteration, MFU {best.mfu.value:.1%}, "
                    f"{_gib(best.total_memory)} per GPU ({shares})")  # fmt: skip
    verdicts.append(f"to pin it, the same command without --search and with: {config_flags(best.config, cluster.framework.cp_comm_default)}")
    if shown is not None and shown.size > 1:  # the fastest other layout (a variant of the same layout is a near-copy)
        second = int(shown[1])
        gap = c["t_step"][second] / c["t_step"][first] - 1
        changes = []
        for key in ("t_tp", "t_bubble", "t_pp", "t_dp", "t_compute", "t_cp", "t_ep"):
            name = BY_KEY[key].name + (" (recomputation)" if key == "t_compute" else "")
            delta = c[key][second] - c[key][first]
            if abs(delta) > 1e-9 * c["t_step"][first]:
                changes.append(f"{name} {abs(delta):.3g} s {'less' if delta > 0 else 'more'}")
        why = ", ".join(changes) if changes else "the same time; it needs less memory"
        verdicts.append(f"it beats the fastest other layout ({evaluated.config(second).label()}) by {gap:.2%}: {why}")
    return verdicts


def _with_run(result: Result, plan: Any, cluster: Cluster, training: Training, *, search: bool, rank_by: str = "time") -> Result:
    """`result` with the run's derivations (from its t_step, the model's), its verdict and, for a
    search, each configuration's days (and cost) beside its step time."""
    from dataclasses import replace

    from parcalc.core.training_cost import run_from_step
    from parcalc.results.parse import run_verdict

    run = run_from_step(plan, result.derivation("t_step"), cluster.gpus, training.global_batch, training.seq_len)
    assert run.iterations is not None  # a run from a step time counts them
    tables = tuple(_run_columns(t, run.iterations.value, plan, cluster.gpus) if t.key in ("top", "configurations") else t
                   for t in result.tables) if search else result.tables  # fmt: skip
    ran = run_verdict(run, cluster.gpus)
    verdicts = [*result.verdicts, ran if result.fits is not False or search else "were it to fit, " + ran]
    if search and rank_by == "cost":
        verdicts.append("ranked by cost per token: with one GPU type, price x GPUs is the same for every configuration, so it ranks "
                        "as step time does")  # fmt: skip
    notes = () if run.energy is not None else (f"energy: {cluster.gpu_name} has no board power in its preset; give --gpu-power W",)
    currency = (f"prices are yours (--price, per GPU-hour, {plan.price.currency}); parcalc has no price presets",) if plan.price else ()
    return replace(result, derivations=result.derivations + run.derivations(), verdicts=tuple(verdicts), tables=tables,
                   assumptions=result.assumptions + notes + currency)  # fmt: skip


def _run_columns(table: Table, iterations: float, plan: Any, gpus: int) -> Table:
    """The days of the run (and its cost) at each configuration's step time, beside it."""
    from dataclasses import replace

    from parcalc.core.training_cost import cost_per_run, days_per_run
    from parcalc.derivation import Column

    at = [c.key for c in table.columns].index("t_step")
    columns = [Column("days", "run", "days")]
    if plan.price is not None:
        columns.append(Column("cost", "run cost", plan.price.currency))

    def extra(t_step: float | None) -> tuple[float | None, ...]:
        if t_step is None:  # not timed: it does not fit (parcalc.core.fit_search)
            return (None,) if plan.price is None else (None, None)
        days = days_per_run(t_step, int(iterations))
        return (days,) if plan.price is None else (days, cost_per_run(t_step, gpus, int(iterations), plan.price))

    rows = tuple(row[: at + 1] + extra(cast("float | None", row[at])) + row[at + 1:] for row in table.rows)  # the t_step column
    return replace(table, columns=table.columns[: at + 1] + tuple(columns) + table.columns[at + 1:], rows=rows)


def _compare_gpus(clusters: list[Cluster], plans: list[Any], rank_by: str, top: int, settings: list, training: Training,
                  search: Any) -> Result:  # fmt: skip
    """--search on each GPU type (its own memory, peaks, kernels and node), merged: the best of each
    in one table, the top configurations of all ranked by step time or by cost."""
    from dataclasses import replace

    from parcalc.derivation import Column, Table
    from parcalc.errors import InfeasibleError, InfeasibleResult

    found, skipped, tried = [], [], []
    for cluster, plan in zip(clusters, plans, strict=True):
        try:
            result = search(cluster)
        except InfeasibleError as error:
            skipped.append(f"{cluster.gpu_name}: {error}")
            tried += [(cluster.gpu_name, error.result)] if isinstance(error, InfeasibleResult) else []
            continue
        if plan is not None:
            result = _with_run(result, plan, cluster, training, search=True)
        found.append((cluster, result))
    if not found:
        why = "nothing fits on any GPU type: " + "; ".join(skipped)
        if tried:  # what each GPU type tried, in one table with a GPU column: its JSON still prints (exit 1)
            every = [(name, r.tables[0]) for name, r in tried]  # "configurations", or "smallest" outside JSON and CSV
            every_tried = Table(every[0][1].key, every[0][1].title + " (every GPU type)", (Column("gpu", "GPU"), *every[0][1].columns),
                           tuple((name, *row) for name, t in every for row in t.rows))  # fmt: skip
            raise InfeasibleResult(why, replace(tried[0][1], title="No configuration fits on any GPU type", verdicts=tuple(skipped),
                                                tables=(every_tried,), settings=tuple(settings)))  # fmt: skip
        raise InfeasibleError(why)

    def key(result: Result) -> float:
        return result.derivation("cost_per_million_tokens" if rank_by == "cost" else "t_step").value

    found.sort(key=lambda pair: key(pair[1]))
    winner_cluster, winner = found[0]
    gpu_column = (Column("gpu", "GPU"),)
    merged = []
    for table_key in [t.key for t in winner.tables]:
        parts = [(c, next(t for t in r.tables if t.key == table_key)) for c, r in found if any(t.key == table_key for t in r.tables)]
        first = parts[0][1]
        rows = [(c.gpu_name, *row) for c, t in parts for row in t.rows]
        if table_key == "top":
            at = 1 + [col.key for col in first.columns].index("cost" if rank_by == "cost" else "t_step")
            rows = sorted(rows, key=lambda row: row[at])[:top]
            title = f"The {len(rows)} {'cheapest' if rank_by == 'cost' else 'fastest'} configurations of {len(found)} GPU types"
        else:
            title = first.title + " (every GPU type)"
        merged.append(Table(table_key, title, gpu_column + first.columns, tuple(rows)))
    summary = _gpu_summary(found)
    verdicts = [_comparison_verdict(found, rank_by), *skipped]
    for cluster, result in found:
        verdicts += [f"{cluster.gpu_name}: {v}" for v in result.verdicts if v.startswith(("best:", "the run:"))]
    names = " | ".join(c.gpu_name for c in clusters)
    title = winner.title.replace(f"x {winner_cluster.gpu_name}", f"x ({names})", 1)
    title = title.replace("Fastest configurations", "Cheapest configurations" if rank_by == "cost" else "Fastest configurations", 1)
    assumptions = tuple(dict.fromkeys(a for _, r in found for a in r.assumptions))
    chosen = [(k, ",".join(c.gpu_name for c in clusters)) if k == "gpu_name" else (k, v) for k, v in settings] + [("rank_by", rank_by)]
    return replace(winner, title=title, tables=(summary, *merged), verdicts=tuple(verdicts), assumptions=assumptions,
                   settings=tuple(chosen))  # fmt: skip


def _gpu_summary(found: list[tuple[Cluster, Result]]) -> Table:
    """One row per GPU type: its fastest configuration's step time and the run's days, GPU-hours, energy, cost."""
    from parcalc.derivation import Column, Table

    keys = [("t_step", "step", "s"), ("tokens_per_second", "tokens/s", "tokens/s"), ("mfu", "MFU", "fraction"),
            ("train_days", "run", "days"), ("gpu_hours", "GPU-hours", "GPU-h"), ("energy", "energy", "Wh"),
            ("cost", "cost", ""), ("cost_per_million_tokens", "per 1M tokens", "")]  # fmt: skip
    present = [k for k in keys if any(d.key == k[0] for _, r in found for d in r.derivations)]
    rows = []
    for cluster, result in found:
        best = next(t for t in result.tables if t.key == "top").records()[0]
        label = f"TP{best['tp']} PP{best['pp']} DP{best['dp']} b{best['micro_batch']} {best['recompute']} ZeRO-{best['zero']}"
        values = {d.key: d.value for d in result.derivations}
        rows.append((cluster.gpu_name, label, *(values.get(k) for k, _, _ in present)))
    units = {k: (u or next((d.unit for _, r in found for d in r.derivations if d.key == k), "")) for k, _, u in present}
    columns = (Column("gpu", "GPU"), Column("best", "best configuration"), *(Column(k, label, units[k]) for k, label, _ in present))
    return Table("gpu_types", "The best configuration of each GPU type", columns, tuple(rows))


def _comparison_verdict(found: list[tuple[Cluster, Result]], rank_by: str) -> str:
    (first_cluster, first), rest = found[0], found[1:]
    if not rest:
        return f"only {first_cluster.gpu_name} holds the model"
    second_cluster, second = rest[0]
    step = first.derivation("t_step").value / second.derivation("t_step").value
    if rank_by == "cost":
        c1, c2 = first.derivation("cost_per_million_tokens"), second.derivation("cost_per_million_tokens")
        return (f"cheapest per token: {first_cluster.gpu_name} at {c1.value:.4g} {c1.unit}, {c2.value / c1.value:.2f} x cheaper than "
                f"{second_cluster.gpu_name} ({c2.value:.4g} {c2.unit}) at {step:.2f} x its step time")  # fmt: skip
    return (f"fastest: {first_cluster.gpu_name}, {first.derivation('t_step').value:.4g} s per iteration, {1 / step:.2f} x faster than "
            f"{second_cluster.gpu_name}")  # fmt: skip
