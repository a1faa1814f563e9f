"""The columns of fit's search and its result: each evaluated configuration as a row of arrays (CONFIG_FIELDS, then what
it costs), a row back as a Config, and the ranking of those that fit (parcalc.core.fit_search fills them)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from parcalc.core.best_split import TIME_FIELDS
from parcalc.core.choices import Schedule
from parcalc.core.fit import Config
from parcalc.core.layout import Layout
from parcalc.core.search_layouts import RECOMPUTES

# Columns of the evaluated table, in order: the configuration, then what it costs.
# The schedule column's codes: 0 1F1B, 1 interleaved, then the split-backward schedules (SearchSpace.schedule)
SCHEDULE_CODES = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZB_V, Schedule.DUALPIPEV)
CONFIG_FIELDS = ("tp", "pp", "dp", "micro_batch", "micro_batches", "recompute", "zero", "sequence_parallel", "schedule", "chunks",
                 "first_stage_layers", "last_stage_layers")  # the layers on the first and last stage (L/p each when even)
COST_FIELDS = ("memory", "fits", "t_compute", "t_tp", "t_bubble", "t_pp", "t_dp", "t_optimizer", "t_step", "tokens_per_second", "mfu", "hfu")
# Context and expert parallelism: columns of every evaluated table, shown by the CLI only where the
# search varied them (a dense model at s < CP_MIN_SEQ_LEN keeps cp = ep = 1 and its table as it was).
PARALLEL_FIELDS = ("cp", "ep")
PARALLEL_COST_FIELDS = ("t_cp", "t_ep", "t_host")  # t_host: the GPU waiting for the host (a profile that models it)
# Hybrid sharding (parcalc.core.sharding): the shard group S of every configuration (S = dp x cp:
# full sharding; ZeRO-0 rows carry dp x cp too), a column shown by the CLI where the search varied it.
SHARD_FIELDS = ("shard_group",)
# What each configuration's memory is (told in JSON and CSV, where every configuration is listed), by code: the textbook sum
# of parcalc.core.memory (no step walked: memory_of's total, where memory_of walks none either); the floor of the allocator's
# replay over an FSDP2 step walk plus the replay's reserve, a lower bound of memory_of's total (the rows not shown:
# parcalc.core.search_replay); the allocator replayed, memory_of's total (the rows shown, and every row of the hf profile,
# memory_timeline.hf_reserved_total)
BASIS_FIELDS = ("memory_basis",)
# Megatron-LM's layout string of each configuration's pipeline (--pipeline-layout; null: none), by its index in
# Evaluated.layouts (-1: none): the one given, or the one the search proposes where the splits do not run a (pp, v)
# (parcalc.core.search_layouts.proposed_layouts); a column shown where some configuration has one
LAYOUT_FIELDS = ("pipeline_layout",)
MEMORY_BASES = ("textbook", "floor", "replayed")
TEXTBOOK, FLOOR, REPLAYED = range(len(MEMORY_BASES))


@dataclass
class Evaluated:
    """Arrays, one entry per configuration evaluated (every field of CONFIG_FIELDS and COST_FIELDS)."""

    columns: dict[str, np.ndarray]
    layers: int = 0  # the model's transformer layers (tells an even split from an uneven one)
    slots: tuple[int, int] = (0, 0)  # SearchSpace.slots: every split counts the embedding / loss as a slot
    cp_comm: str = "p2p"  # SearchSpace.cp_comm
    moe: tuple[float, str, int | None, str, str] = (1.0, "alltoall", None, "none", "uniform")  # SearchSpace.moe
    gpus_per_node: int = 8  # caps --max-nodes-per-token at each layout's EP group (searched_routing_limit)
    layouts: tuple[str, ...] = ()  # the layout strings of the column pipeline_layout, by its index (LAYOUT_FIELDS)
    split_by: str | None = None  # "torchtitan": every pipeline is split as torchtitan splits it (SearchSpace.torchtitan_split)

    def __len__(self) -> int:
        return len(self.columns["tp"])

    def config(self, i: int) -> Config:
        c = self.columns
        p, first, last = int(c["pp"][i]), int(c["first_stage_layers"][i]), int(c["last_stage_layers"][i])
        text = self.layout_of(i)
        even = any(self.slots) or (self.layers % p == 0 and first == last == self.layers // p) or text is not None
        layout = Layout(tp=int(c["tp"][i]), pp=p, dp=int(c["dp"][i]), cp=int(c["cp"][i]), ep=int(c["ep"][i]), zero=int(c["zero"][i]),
                        shard_group=self.shard_group(i), sequence_parallel=bool(c["sequence_parallel"][i]), cp_comm=self.cp_comm,
                        schedule=SCHEDULE_CODES[int(c["schedule"][i])], chunks=int(c["chunks"][i]),
                        first_stage_layers=None if even else first, last_stage_layers=None if even else last,
                        embedding_in_split=bool(self.slots[0]), loss_in_split=bool(self.slots[1]), gpus_per_node=self.gpus_per_node,
                        pipeline_layout=text if p > 1 else None)
        if self.split_by == "torchtitan" and p > 1:  # the row's chunks split as torchtitan does (parcalc.core.pipeline_torchtitan)
            from parcalc.core.pipeline_torchtitan import split_layout

            layout = split_layout(layout._replace(first_stage_layers=None, last_stage_layers=None), self.layers)
        return Config(layout, int(c["micro_batch"][i]), RECOMPUTES[int(c["recompute"][i])], moe_imbalance=self.moe[0],
                      moe_dispatcher=self.moe[1], ep_overlap=self.moe[3], moe_routing=self.moe[4],
                      max_nodes_per_token=searched_routing_limit(self.moe[2], int(c["ep"][i]), int(c["tp"][i]), self.gpus_per_node))  # fmt: skip

    def layout_of(self, i: int) -> str | None:
        """The layout string of row i's pipeline (None: the split of its first and last stage layers)."""
        code = int(self.columns["pipeline_layout"][i]) if "pipeline_layout" in self.columns else -1
        return self.layouts[code] if code >= 0 else None

    def shard_group(self, i: int) -> int | None:
        """Config.shard_group of row i: S where it is smaller than dp x cp (hybrid sharding), else None."""
        c = self.columns
        size, ranks = int(c["shard_group"][i]), int(c["dp"][i]) * int(c["cp"][i])
        return size if int(c["zero"][i]) >= 1 and size < ranks else None

    def rows(self, order: np.ndarray | None = None, extra: tuple[str, ...] = ()) -> Iterator[tuple[object, ...]]:
        """Each configuration as a tuple of plain Python values, in CONFIG_FIELDS + COST_FIELDS
        order, then the columns `extra` names (e.g. PARALLEL_FIELDS); the times of a configuration
        that does not fit are None (the search does not time them)."""
        c = self.columns
        index = order if order is not None else np.arange(len(self))
        lists = {k: c[k][index].tolist() for k in CONFIG_FIELDS + COST_FIELDS + tuple(extra)}
        for k in lists.keys() & set(TIME_FIELDS):  # not timed (it does not fit): None, null in JSON, empty in CSV
            lists[k] = [None if x != x else x for x in lists[k]]
        if "memory_basis" in lists:
            lists["memory_basis"] = [MEMORY_BASES[x] for x in lists["memory_basis"]]
        if "pipeline_layout" in lists:
            lists["pipeline_layout"] = [self.layouts[x] if x >= 0 else None for x in lists["pipeline_layout"]]
        for j in range(len(index)):
            yield (lists["tp"][j], lists["pp"][j], lists["dp"][j], lists["micro_batch"][j], lists["micro_batches"][j],
                   RECOMPUTES[lists["recompute"][j]].value, lists["zero"][j], bool(lists["sequence_parallel"][j]),
                   SCHEDULE_CODES[lists["schedule"][j]].value, lists["chunks"][j], lists["first_stage_layers"][j],
                   lists["last_stage_layers"][j], *(lists[k][j] for k in COST_FIELDS), *(lists[k][j] for k in extra))  # fmt: skip


@dataclass
class SearchResult:
    evaluated: Evaluated
    rejected: Counter = field(default_factory=Counter)  # reason -> configurations (or layouts) rejected
    layouts: int = 0  # (tp, pp, cp, dp, ep) layouts that passed the divisibility checks
    # the rows whose memory is memory_of's, the allocator replayed where a step is walked (parcalc.core.search_replay); the
    # other walked rows carry the floor of that replay
    replayed: set[int] = field(default_factory=set)

    @property
    def fitting(self) -> np.ndarray:
        return np.flatnonzero(self.evaluated.columns["fits"])

    def ranked(self) -> np.ndarray:
        """Indices of the configurations that fit, fastest first (ties: less memory first)."""
        fit = self.fitting
        c = self.evaluated.columns
        order = np.lexsort((c["memory"][fit], c["t_step"][fit]))
        return fit[order]


def searched_routing_limit(limit: int | None, ep: int, etp: int, gpus_per_node: int) -> int | None:
    """--max-nodes-per-token in the search: a limit above the nodes a layout's EP group spans binds
    nothing there, so it is that group's node count (one configuration with such a limit is an error)."""
    if limit is None:
        return None
    from parcalc.core.timing.network import placement

    return min(limit, placement(ep, etp, gpus_per_node).nodes)
