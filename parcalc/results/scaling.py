"""`scaling`: one strategy (or the search's best) at N = 1, 2, 4, ... GPUs with fit's step-time model: step
time, throughput, speedup, efficiency, the terms that grow, and the knee of the curve."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Mlp, Precision, Recompute
from parcalc.frozen import frozen
from parcalc.results import fit_brief

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Training
    from parcalc.core.fit_search import SearchSpace
    from parcalc.core.hardware import Gpu
    from parcalc.core.model import TransformerModel
    from parcalc.core.scaling import Curve, Mode, Rule
    from parcalc.derivation import Result


@frozen
class ScalingRequest:
    """What `scaling` is asked, parsed: the model, the training (its global batch the batch at the
    reference: B, or B per GPU when weak), the cluster at the smallest count, the GPU counts, the
    layout rule at each N (and the search space of --best), the knee's efficiency."""

    model: TransformerModel
    training: Training
    cluster: Cluster
    gpu: Gpu
    counts: tuple[int, ...]
    rule: Rule
    mode: Mode
    batch: int  # B (strong) or B per GPU (weak)
    knee: float  # the efficiency under which the curve's knee lies
    space: SearchSpace | None = None  # --best: what the search tries at each N
    ideal_network: bool = False


def request(model: str | None = None, layers: str | None = None, hidden: str | None = None,
            heads: str | None = None, kv_heads: str | None = None, ffn_hidden: str | None = None,
            mlp: Mlp | None = None, vocab: str | None = None, tied: bool | None = None, gpus: str | None = None,
            gpu: str | None = None, gpus_per_node: str | None = None, batch: str | None = None,
            seq_len: str | None = None, weak: bool = False, strategy: str | None = None, tp: str | None = None,
            pp: str | None = None, zero: str | None = None, best: bool = False, micro_batch: str | None = None,
            recompute: Recompute | None = None, sequence_parallel: bool = False, knee: str | None = None,
            precision: Precision | None = None, flash_attention: bool = True, framework: str | None = None,
            link: str | None = None, inter_node_link: str | None = None, ideal_network: bool = False,
            presets: list[Path] | None = None) -> ScalingRequest:  # fmt: skip
    """The request from `scaling`'s flag texts; bad input raises InputError naming the flag."""
    from parcalc.core.fit import Training
    from parcalc.core.scaling import Mode, check_gpu_counts
    from parcalc.errors import InputError
    from parcalc.presets import load_framework, load_gpu
    from parcalc.results.cluster import cluster_from_flags
    from parcalc.results.model import ModelFlags, model_and_seq_len
    from parcalc.results.parse import MAX_GPUS, preset_dirs, sixteen_bit_default
    from parcalc.units import parse_count

    dirs = preset_dirs(presets)
    counts: Sequence[int] = gpu_counts(gpus)
    shape, seq = model_and_seq_len(ModelFlags(model, layers, hidden, heads, kv_heads, ffn_hidden, mlp, vocab, tied), seq_len, dirs)
    profile = load_framework(framework if framework is not None else "megatron", dirs)
    if gpu is None:
        raise InputError("--gpu: which GPU? (e.g. --gpu a100-sxm4-80gb; `parcalc presets list gpus`)")
    device = load_gpu(gpu, dirs)
    if precision is None:
        precision = Precision.MIXED_FP16 if sixteen_bit_default(device)[0] == "fp16" else Precision.MIXED_BF16
    elif precision is Precision.FP4:
        from parcalc.results.parse import fp4_gpu_check

        fp4_gpu_check(precision, device)
    if precision.gemm_dtype not in device.dtypes:
        raise InputError(f"--precision {precision.value}: {device.name} has no {precision.gemm_dtype} rate in its datasheet "
                         f"(it lists {', '.join(device.dtypes)})")  # fmt: skip
    cluster = cluster_from_flags(str(min(counts)), gpu, gpus_per_node, None, precision.gemm_dtype, None, None, link, inter_node_link,
                                 None, None, None, False, profile, dirs, ideal_network=ideal_network)  # fmt: skip
    counts = check_gpu_counts(counts, cluster.gpus_per_node, MAX_GPUS)
    mode = Mode.WEAK if weak else Mode.STRONG
    per = parse_count(batch, "--batch") if batch is not None else (1 if weak else max(counts))
    threshold = knee_threshold(knee)
    mixed = precision in (Precision.MIXED_BF16, Precision.MIXED_FP16) or precision.quantised
    training = Training(global_batch=per, seq_len=seq, precision=precision, flash_attention=flash_attention,
                        fp32_grads=profile.fp32_grads and mixed)  # fmt: skip
    rule = _rule(strategy, tp, pp, zero, best, micro_batch, recompute, sequence_parallel, profile.default_zero)
    if framework is not None:  # a layout the chosen stack does not run is refused here, not shown as a curve of '-'
        from parcalc.results.parse import framework_runs

        framework_runs(profile, (recompute,) if recompute is not None else ())
        rule = _runnable_rule(rule, profile)
    space = None
    if best:
        from parcalc.core.fit_search import SearchSpace
        from parcalc.core.scaling import batch_at
        from parcalc.results.parse import MAX_SEARCH_BATCH, check_at_most

        check_at_most(batch_at(mode, per, max(counts)), MAX_SEARCH_BATCH, "--batch", "sequences per batch to search (the search divides it every way)")

        space = SearchSpace(zero_stages=profile.zero_stages, sequence_parallel=(True, False) if not sequence_parallel else (True,),
                            micro_batches=(rule.micro_batch,) if micro_batch is not None else None,
                            recomputes=(rule.recompute,) if recompute is not None else _searched_recomputes(profile, framework))  # fmt: skip
    return ScalingRequest(shape, training, cluster, device, tuple(counts), rule, mode, per, threshold, space, ideal_network)


def result(req: ScalingRequest) -> Result:
    """The curve over the request's GPU counts, its tables and verdicts; no parsing."""
    from dataclasses import replace

    from parcalc.core.scaling import scaling_curve, searched
    from parcalc.results.parse import ProgressBar

    cluster, training = req.cluster, req.training
    search = searched(req.space) if req.space is not None else None
    progress = ProgressBar("evaluating GPU counts")
    try:
        curve = scaling_curve(req.model, training, cluster, req.counts, req.rule, req.mode, req.batch, req.knee, best=search,
                              progress=progress)  # fmt: skip
    finally:
        progress.close()
    settings = [("model", req.model.key), ("gpu", req.gpu.key), ("gpu_name", cluster.gpu_name), ("mode", req.mode.value),
                ("strategy", _strategy_name(req.rule)), ("precision", training.precision.value), ("framework", cluster.framework.key),
                ("flash_attention", str(training.flash_attention).lower()), ("knee", f"{req.knee:g}")]  # fmt: skip
    if req.ideal_network:
        settings.append(("network", "ideal"))
    shown = curve_result(curve, req.model, replace(training, global_batch=req.batch), cluster, settings)
    if curve.reference is None:  # no GPU count runs: an infeasible request (exit 1, as fit's), the table shown first
        from parcalc.errors import InfeasibleResult

        raise InfeasibleResult(verdicts(curve)[0], shown)
    return shown


def from_flags(**flags: Any) -> Result:
    """`scaling`'s Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.scaling and the library (parcalc.results.run) both call."""
    return result(request(**flags))


STRATEGIES = ("dp", "zero1", "zero2", "zero3", "tp", "pp")


def knee_threshold(knee: str | None) -> float:
    """--knee as the efficiency under which the curve's knee lies (parcalc.core.scaling.DEFAULT_KNEE when not given)."""
    from parcalc.core.scaling import DEFAULT_KNEE
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    threshold = parse_quantity(knee, Dimension.FRACTION, "--knee") if knee is not None else DEFAULT_KNEE
    if not (0 < threshold < 1):
        raise InputError(f"--knee: an efficiency above 0 and under 1 (e.g. 0.8 or 80%), got {knee!r}")
    return threshold


def gpu_counts(text: str | None) -> list[int]:
    """--gpus "1,2,4" or "1,2,4,...,1024" (the ratio of the two counts before "..." continued up to the last)."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    if text is None:
        raise InputError("--gpus: which GPU counts? (e.g. --gpus 1,2,4,8 or 1,2,4,...,1024)")
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise InputError(f"--gpus: a comma list of GPU counts such as 1,2,4,8, got {text!r}")
    if parts.count("...") > 1 or (parts.count("...") == 1 and (parts.index("...") < 2 or parts.index("...") != len(parts) - 2)):
        raise InputError("--gpus: write a continued list as a,b,...,z (two counts, then ..., then the last)")
    if "..." not in parts:
        return [parse_count(p, "--gpus") for p in parts]
    head = [parse_count(p, "--gpus") for p in parts[:-2]]
    last = parse_count(parts[-1], "--gpus")
    a, b = head[-2], head[-1]
    if b <= a or b % a:
        raise InputError(f"--gpus: a,b,...,z continues the ratio b/a, which must be a whole number above 1 (got {a},{b})")
    ratio, out = b // a, list(head)
    while out[-1] * ratio <= last and len(out) <= 64:
        out.append(out[-1] * ratio)
    if out[-1] != last:
        raise InputError(f"--gpus: {last} is not reached from {a},{b} by x{ratio} (it would be ... {out[-1]}, {out[-1] * ratio})")
    return out


def _rule(strategy: str | None, tp: str | None, pp: str | None, zero: str | None, best: bool, micro_batch: str | None,
          recompute: Recompute | None, sequence_parallel: bool, default_zero: int = 0) -> Any:  # fmt: skip
    """The layout rule at each N; without --strategy (or --zero with --tp/--pp) the stack's own ZeRO stage, the
    framework profile's default_zero (torchtitan, fsdp2: zero3; the others dp)."""
    from parcalc.core.scaling import Family, Rule
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    pinned = tp is not None or pp is not None
    if sum((strategy is not None, pinned, best)) > 1:
        raise InputError("--strategy, --tp/--pp and --best: give one way to lay out each N")
    b = parse_count(micro_batch, "--micro-batch") if micro_batch is not None else 1
    r = recompute or Recompute.NONE
    if zero is not None and not pinned:
        raise InputError("--zero: with --tp/--pp (the strategies zero1, zero2, zero3 set their own stage; --best searches them)")
    if best:
        return Rule(Family.BEST, micro_batch=b, recompute=r, sequence_parallel=sequence_parallel)
    if pinned:
        z = parse_count(zero, "--zero", allow_zero=True) if zero is not None else default_zero
        if z > 3:
            raise InputError(f"--zero: a ZeRO stage 0-3, got {zero!r}")
        t = parse_count(tp, "--tp") if tp is not None else 1
        p = parse_count(pp, "--pp") if pp is not None else 1
        return Rule(Family.FIXED, t, p, z, b, r, sequence_parallel, default_stage=zero is None and z > 0)
    kind = (strategy or ("zero" + str(default_zero) if default_zero else "dp")).strip().lower()
    if kind not in STRATEGIES:
        raise InputError(f"--strategy: one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if sequence_parallel and kind != "tp":
        raise InputError("--sequence-parallel: needs tp > 1 (--strategy tp, --tp T or --best)")
    return Rule(Family(kind), micro_batch=b, recompute=r, sequence_parallel=sequence_parallel, default_stage=strategy is None and kind != "dp")


def _searched_recomputes(profile: Any, framework: str | None) -> tuple[Any, ...]:
    """--best's recomputations: the search's, less those a --framework that was given does not run (the profile's not_run)."""
    from parcalc.core.fit_search import SearchSpace
    from parcalc.results.parse import framework_recomputes

    every = SearchSpace().recomputes
    return framework_recomputes(profile, every) if framework is not None else every


def _runnable_rule(rule: Any, profile: Any) -> Any:
    """The rule under a --framework that was given: a family or a pinned layout its stack does not run is one
    line (hf: data parallelism only; a ZeRO stage outside the profile's zero_stages); where the stack runs TP
    with sequence parallelism always (torchtitan's apply_tp), TP takes it, as memory and fit do."""
    from dataclasses import replace

    from parcalc.core.layout import Layout
    from parcalc.core.scaling import Family
    from parcalc.errors import InputError
    from parcalc.results.parse import framework_sequence_parallel, framework_zero_stage

    tp, pp = {Family.TP: (2, 1), Family.PP: (1, 2), Family.FIXED: (rule.tp, rule.pp)}.get(rule.family, (1, 1))
    zero = {Family.ZERO1: 1, Family.ZERO2: 2, Family.ZERO3: 3, Family.FIXED: rule.zero}.get(rule.family, 0)
    if rule.family in (Family.TP, Family.PP) and profile.data_parallel_only:
        raise InputError(profile.data_parallel_only_reason(f"--strategy {rule.family.value}"))
    if (reason := profile.layout_reason(Layout(tp=tp, pp=pp))) is not None:
        raise InputError(reason)
    if zero:
        framework_zero_stage(profile, zero, pp, None if rule.family is Family.FIXED else f"--strategy {rule.family.value}")
    if framework_sequence_parallel(profile, None, tp) and tp > 1:
        return replace(rule, sequence_parallel=True)
    return rule


def _strategy_name(rule: Any) -> str:
    from parcalc.core.scaling import Family

    return f"tp{rule.tp}-pp{rule.pp}" if rule.family is Family.FIXED else rule.family.value


def curve_result(curve: Curve, shape: Any, training: Any, cluster: Any, settings: list) -> Result:
    """The curve as a Result: the points table, the terms table, the summary and the verdicts."""
    from parcalc.core.scaling import Mode
    from parcalc.derivation import Result, Term
    from parcalc.results.estimate import _assumptions, _inputs

    mode = curve.mode
    first, last = curve.points[0].gpus, curve.points[-1].gpus
    batch = (f"B = {training.global_batch}" if mode is Mode.STRONG else f"B/N = {training.global_batch} per GPU")
    title = (f"{mode.value.capitalize()} scaling: {shape.name} on {first}-{last} x {cluster.gpu_name} ({batch}, s = {training.seq_len})")
    inputs = [t for t in _inputs(shape, training, cluster) if t.key not in ("N", "B")]
    inputs.insert(0, Term("B", "B", "B", training.global_batch, "", "global batch (sequences)" if mode is Mode.STRONG
                          else "sequences per GPU: B(N) = B x N"))  # fmt: skip
    assumptions = (
        f"layout at each N: {curve.rule.describe()}",
        ("strong scaling: the same global batch at every N, so S = t_ref / t_step" if mode is Mode.STRONG else
         "weak scaling: the same batch per GPU at every N, so S = (N / N_ref) t_ref / t_step and E = t_ref / t_step"),
        "speedup S = X(N) / X(N_ref) and efficiency E = S x N_ref / N over the smallest N that runs and fits"
        + (f" ({curve.reference.gpus} GPU{'s' if curve.reference.gpus > 1 else ''})" if curve.reference else ""),
        f"knee: the first N with E under {curve.threshold:.0%} (--knee)",
        "terms table: each term of the step in GPU-seconds per sequence, N t_k / B(N); their growth over the reference is "
        "the efficiency lost (E = c_ref / c(N), c = N t_step / B)",
    ) + _assumptions(shape, training, cluster)  # fmt: skip
    return Result(command="scaling", title=title, inputs=tuple(inputs), derivations=curve.summary,
                  tables=(points_table(curve), *((terms_table(curve),) if curve.timed() else ()), *((skipped_table(curve),) if any(p.estimate is None for p in curve.points) else ())),
                  verdicts=tuple(verdicts(curve)),
                  assumptions=assumptions, settings=tuple(settings),
                  # the brief terminal form: the layout and scaling the curve assumes, and fit's assumptions that move a step
                  key_assumptions=("layout at each N", "strong scaling", "weak scaling", *fit_brief.KEY_ASSUMPTIONS))  # fmt: skip


def _layout(config: Any, curve: Curve) -> str:
    """tp x pp x dp; with --best also what else the search chose (the other rules state it in the title)."""
    from parcalc.core.scaling import Family

    if config is None:
        return ""
    text = f"{config.layout.tp}x{config.layout.pp}x{config.layout.dp}"
    if curve.rule.family is not Family.BEST:
        return text
    extras = [f"Z{config.layout.zero}"] if config.layout.zero else []
    if config.recompute is not Recompute.NONE:
        extras.append({"selective": "sel", "full": "full", "op": "op"}[config.recompute.value])
    if config.layout.sequence_parallel:
        extras.append("SP")
    if config.micro_batch != 1:
        extras.append(f"b{config.micro_batch}")
    return " ".join([text, *extras])


def points_table(curve: Curve) -> Any:
    """One row per N: layout, step time, throughput, speedup, efficiency (B too under weak scaling);
    an N without a step time has dashes, and its reason in the table `skipped`."""
    from parcalc.core.scaling import Mode
    from parcalc.derivation import Column, Table

    weak = curve.mode is Mode.WEAK
    columns = (Column("gpus", "N"), Column("layout", "TPxPPxDP"), *((Column("global_batch", "B"),) if weak else ()),
               Column("t_step", "step", "s"), Column("tokens_per_second", "X", "tokens/s"), Column("speedup", "speedup"),
               Column("efficiency", "eff.", "fraction"))  # fmt: skip
    rows = []
    for p in curve.points:
        est = p.estimate
        rows.append((p.gpus, _layout(p.config, curve), *((p.global_batch,) if weak else ()), est.step.value if est else None,
                     est.tokens_per_second.value if est else None, p.speedup.value if p.speedup else None,
                     p.efficiency.value if p.efficiency else None))  # fmt: skip
    return Table("scaling", f"{curve.mode.value.capitalize()} scaling, {curve.rule.describe()}", columns, tuple(rows))


def skipped_table(curve: Curve) -> Any:
    """The GPU counts without a step time, and why (no valid layout, or it does not fit)."""
    from parcalc.derivation import Column, Table

    rows = tuple((p.gpus, p.note, p.memory) for p in curve.points if p.estimate is None)
    columns = (Column("gpus", "N"), Column("reason", "reason"), Column("memory", "memory per GPU", "B", memory=True))
    return Table("skipped", "GPU counts without a step time", columns, rows)


def term_columns() -> tuple[tuple[str, str, str], ...]:
    """(name in parcalc.core.speedup.step_terms, JSON/CSV key as fit --search names the term, heading) of every term,
    recomputation split off compute (parcalc.core.timing.terms)."""
    from parcalc.core.timing.terms import RECOMPUTE_HEADING, RECOMPUTE_KEY, RECOMPUTE_NAME, STEP_TERMS

    columns = []
    for term in STEP_TERMS:
        columns.append((term.name, term.key, term.heading))
        if term.key == "t_compute":
            columns.append((RECOMPUTE_NAME, RECOMPUTE_KEY, RECOMPUTE_HEADING))
    return tuple(columns)


def terms_table(curve: Curve) -> Any:
    """The step's terms (GPU-seconds per sequence, N t_k / B) at each N that runs: what grows."""
    from parcalc.core.speedup import step_terms
    from parcalc.derivation import Column, Table

    timed = curve.timed()
    per_point = [(p, step_terms(p.estimate)) for p in timed]  # type: ignore[arg-type]
    present = [(k, key, label) for k, key, label in term_columns() if any(terms[k] > 0 for _, terms in per_point)]
    columns = (Column("gpus", "N"), *(Column(key, label, "s") for _, key, label in present), Column("efficiency", "eff.", "fraction"))
    rows = tuple((p.gpus, *(terms[k] * p.gpus / p.global_batch for k, _, _ in present), p.efficiency.value)  # type: ignore[union-attr]
                 for p, terms in per_point)  # fmt: skip
    return Table("terms", "The step's terms in GPU-seconds per sequence (N t / B): flat is perfect scaling", columns, rows)


def verdicts(curve: Curve) -> list[str]:
    from parcalc.core.scaling import growing_terms
    from parcalc.units import format_time

    timed = curve.timed()
    if curve.reference is None:
        reasons = "; ".join(f"N = {p.gpus}: {p.note}" + (f" ({p.memory / 2**30:.1f} GiB per GPU)" if p.note == "does not fit" and p.memory is not None else "")
                            for p in curve.points[:3])
        return [f"the strategy runs at none of the GPU counts ({reasons})"]
    ref, last = curve.reference, timed[-1]
    out = []
    if ref.gpus != curve.points[0].gpus:
        skipped = next(p for p in curve.points if p.gpus < ref.gpus)
        out.append(f"reference N = {ref.gpus}: the smallest count that runs and fits (N = {skipped.gpus}: {skipped.note})")
    knee = curve.knee()
    assert last.speedup is not None and last.efficiency is not None
    if len(timed) == 1:
        out.append(f"only N = {ref.gpus} runs: no curve to bend")
    elif knee is None:
        out.append(f"no knee: efficiency stays at or above {curve.threshold:.0%} up to N = {last.gpus} "
                   f"(speedup {last.speedup.value:.3g}x, efficiency {last.efficiency.value:.1%})")  # fmt: skip
    else:
        assert knee.efficiency is not None
        grown = growing_terms(knee, ref)
        why = ", ".join(f"{name} +{format_time(value, significant=3)}" for name, value in grown[:3]) or "no term grows"
        out.append(f"knee at N = {knee.gpus}: efficiency {knee.efficiency.value:.1%} < {curve.threshold:.0%}; "
                   f"GPU-time per sequence grown since N = {ref.gpus}: {why}")  # fmt: skip
    if last is not knee and last is not ref:
        grown = growing_terms(last, ref)
        if grown:
            name, _ = grown[0]
            out.append(f"at N = {last.gpus}: speedup {last.speedup.value:.3g}x, efficiency {last.efficiency.value:.1%}; "
                       f"the term that grows most: {name}")  # fmt: skip
    missing = [p for p in curve.points if p.estimate is None and p.gpus > ref.gpus]
    if missing:
        out.append(f"no step time at N = {', '.join(str(p.gpus) for p in missing)} (table 'GPU counts without a step time'): "
                   f"{missing[0].note}" + (f" ({missing[0].memory / 2**30:.1f} GiB per GPU)" if missing[0].note == "does not fit" and missing[0].memory is not None else ""))
    return out
