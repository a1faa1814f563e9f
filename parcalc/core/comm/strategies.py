"""Every strategy on one model (`--strategy all`): each with all GPUs in its one dimension."""

from __future__ import annotations

from parcalc.core.choices import Schedule
from parcalc.core.comm.iteration import iteration_plan
from parcalc.core.comm.plan import (
    DEFAULT_OPTIONS,
    INTERLEAVED,
    CommPlan,
    Layout,
    Network,
    Options,
    Workload,
    choice_value,
)
from parcalc.core.layout import DataParallel
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError
from parcalc.named_tuple import NamedTuple

STRATEGIES: tuple[str, ...] = ("dp", "zero1", "zero2", "fsdp", "tp", "tp+sp", "pp-gpipe", "pp-1f1b")


# strategy -> (the dimension that takes every GPU, the rest of its Layout)
_SINGLE_STRATEGIES: dict[str, tuple[str, dict[str, object]]] = {
    "dp": ("dp", {}),
    "zero1": ("dp", {"zero": 1}),
    "zero2": ("dp", {"zero": 2}),
    "zero3": ("dp", {"zero": 3}),
    "fsdp": ("dp", {"zero": 3}),
    "tp": ("tp", {}),
    "tp+sp": ("tp", {"sequence_parallel": True}),
    "pp-gpipe": ("pp", {"schedule": Schedule.GPIPE}),
    "pp-1f1b": ("pp", {"schedule": Schedule.ONE_F_ONE_B}),
}


def single_strategy(name: str, gpus: int, gpus_per_node: int) -> Layout:
    """All `gpus` in one dimension: the configurations `--strategy all` compares."""
    dimension, rest = _SINGLE_STRATEGIES[name]
    return Layout(gpus_per_node=gpus_per_node, **{dimension: gpus}, **rest)  # type: ignore[arg-type]


class StrategyComparison(NamedTuple):
    plans: tuple[CommPlan, ...]
    skipped: tuple[tuple[str, str], ...]  # (strategy, why)


def default_micro_batch(work: Workload, par: Layout) -> int:
    """One micro-batch per replica without pipelining; single sequences with it (Megatron's usual --micro-batch-size 1)."""
    return max(1, work.global_batch // par.dp) if par.pp == 1 else 1


def compare_strategies(model: TransformerModel, work: Workload, gpus: int, network: Network, opts: Options = DEFAULT_OPTIONS,
                       gpus_per_node: int = 8, micro_batch: int | None = None, cp: int = 1,
                       cp_comm: str = "p2p") -> StrategyComparison:  # fmt: skip
    """Each strategy with all `gpus` in its one dimension; those that cannot run are skipped with the reason.
    With `cp` > 1, each strategy's dimension takes gpus / cp and every one runs cp-way context parallelism.

    `micro_batch` None: each strategy takes default_micro_batch; `work.micro_batch` is ignored.
    """
    plans, skipped = [], []
    planned: dict[tuple[Layout, Workload], CommPlan | str] = {}  # the plan, or why it cannot run
    for name in STRATEGIES:
        par = single_strategy(name, gpus // cp, gpus_per_node)
        if cp > 1:
            par = par._replace(cp=cp, cp_comm=cp_comm)
        workload = work._replace(micro_batch=micro_batch or default_micro_batch(work, par))
        key = (_same_communication(par), workload)
        if key not in planned:
            try:
                planned[key] = iteration_plan(model, workload, par, network, opts, strategy=name)
            except InputError as error:
                planned[key] = str(error)
        plan = planned[key]
        if isinstance(plan, str):
            skipped.append((name, plan))
        else:
            plans.append(plan._replace(strategy=name, parallelism=par, workload=workload))
    return StrategyComparison(tuple(plans), tuple(skipped))


def _same_communication(par: Layout) -> Layout:
    """A representative of the configurations that communicate exactly as `par` does: ZeRO-1 and
    ZeRO-2 move the same bytes (ZeRO sec. 7.2.1; they differ in what is kept, not in what is sent),
    and so do GPipe and 1F1B (the same sends per micro-batch, in another order); only the
    interleaved schedule sends more. `--strategy all` plans each such class once."""
    if par.data_parallel is DataParallel.ZERO2:
        par = par._replace(zero=1)
    if choice_value(par.schedule) != INTERLEAVED:
        par = par._replace(schedule=Schedule.ONE_F_ONE_B)
    return par
