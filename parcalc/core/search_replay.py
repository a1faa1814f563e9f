"""fit's search: the rows it shows get the caching allocator replayed over a run of their step, the total `memory` and `fit`
give the same layout (issue #30: memory = fit = the search's row).

Under the fsdp2 and torchtitan profiles the search screens every row whose layout the step walk follows by the floor of
that replay (parcalc.core.search_walk_runs.floor_total: each stream's live blocks at its own peak, its pools rounded up to
their segments or pages, plus the replay's reserve; an interleaved or ZB-V pipeline's greatest over its ranks, and for a row over
the capacity the floor up to where a rank's walk passed it: search_walk_runs.floor_within). The floor is a lower bound of
the replay (allocator.reserved_floor_of_sums; tests/test_search_replay.py holds it on a grid of steps,
tests/test_search_interleaved_screen.py on the interleaved rows of Llama 3 70B's search): a row over the capacity by it is
over by the replay, so it stays out unreplayed. The rows the walk does not follow keep the textbook sum, memory_of's too;
so do 1F1B pipeline rows over the capacity by it, not walked (their walk keeps at least as much: search_step_peaks). A row under the capacity by it may still not fit: the replay adds what the allocator fragments (0.1-3.4 GiB
over Llama 3 8B's searched steps, up to 16 GiB over 70B's). Replaying every row costs 17 s (8B on 8 H100) to 840 s (70B on
256) where the search takes 0.4 and 2.5 s, so the rows are replayed lazily, in ranking order, only where they are shown:
each shown row's total becomes parcalc.core.fit.memory_of's (every stage walked and replayed, the same function `fit`
calls), and a row whose replay does not fit leaves the ranking (fits False, its times not shown, counted under
DROPPED), the next row taking its place, until every row shown is replayed. The rows not shown keep their floor; each row's
memory_basis (search_columns.MEMORY_BASES) tells which it carries, in JSON and CSV."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from parcalc.core.best_split import TIME_FIELDS
from parcalc.core.memory import FSDP2_PROFILES
from parcalc.core.search_columns import REPLAYED

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Training
    from parcalc.core.model import TransformerModel
    from parcalc.core.search_columns import SearchResult

# the rejection reason of a row that fits by its floor and not by the replay (SearchResult.rejected)
DROPPED = "memory (does not fit when replayed)"
# what the rows not shown carry, said where the search's rows are told (parcalc.results.fit, shown_basis_note)
FLOOR_NOTE = ("the rows not shown under an FSDP2 step walk carry the floor of the caching allocator's replay over a run "
              "(each stream's live blocks at its own peak, rounded up to its segments or pages; over the capacity, up to where "
              "a rank's walk passed it) plus the reserve, a lower bound, or the textbook sum where the walk does not follow the "
              "layout (JSON and CSV: each row's memory_basis says which)")  # fmt: skip
# the same where every configuration is listed (JSON and CSV) and none is shown as the table's (nothing fits)
EVERY_ROW_NOTE = ("memory of the configurations under an FSDP2 step walk: replayed (the caching allocator over the step walk, as "
                  "memory and fit total it), the textbook sum (a layout the walk does not follow, or a 1F1B pipeline over the "
                  "capacity by it, not walked) or the floor of that replay plus the reserve (a lower bound, for a row not "
                  "replayed); each row's memory_basis says which")  # fmt: skip
# what each basis of a shown row is, in the note's words (search_columns.MEMORY_BASES order)
_BASIS_WORDS = ("the textbook sum (a layout the step walk does not follow: memory and fit total it so too)",
                "the floor of the allocator's replay plus the reserve (a lower bound: not replayed)",
                "replayed (the caching allocator over the step walk, as memory and fit total it)")  # fmt: skip


def shown_basis_note(found: SearchResult, shown: np.ndarray) -> str:
    """What the memory of each row of a table of the search is, by the rows' places in it (1 first): under an FSDP2 step walk
    a shown row is replayed where the walk follows its layout and the textbook sum where it does not (the gaps
    memory_fsdp.walk_gaps names: ZeRO below 3, a recomputation the framework's code does not have, an interleaved
    pipeline, ...); a table of the smallest footprints (nothing fits) can show floors. Then what the rows not shown carry
    (FLOOR_NOTE)."""
    bases = found.evaluated.columns["memory_basis"][shown].tolist()
    parts = []
    for code, words in sorted(enumerate(_BASIS_WORDS), key=lambda x: -x[0]):  # replayed, floor, textbook
        rows = [place for place, basis in enumerate(bases, start=1) if basis == code]
        if rows:
            which = "row" if len(rows) == 1 else "rows"
            parts.append(f"{which} {', '.join(map(str, rows))} {words}")
    shown_rows = "the row shown" if len(bases) == 1 else f"the {len(bases)} rows shown"
    return f"memory of {shown_rows}: " + "; ".join(parts) + "; " + FLOOR_NOTE


def replays(cluster: Cluster) -> bool:
    """Whether the search's rows carry the floor of a replay to confirm: the FSDP2 step walks' profiles (the hf profile's
    search rows are its replay already: parcalc.core.memory_timeline.hf_reserved_total)."""
    return cluster.framework.step_memory in FSDP2_PROFILES


def replay_rows(found: SearchResult, rows: list[int], model: TransformerModel, training: Training, cluster: Cluster,
                progress: Callable[[int, int], None] | None = None) -> int:  # fmt: skip
    """Each row's memory replaced by memory_of's total (the replay where a stage is walked; the row's own elsewhere, which
    the search already equals); a walked row that no longer fits leaves the ranking. Returns how many left it.
    `progress(done, total)` after each row."""
    from parcalc.core.fit import memory_of

    columns, dropped = found.evaluated.columns, 0
    for done, i in enumerate(rows, start=1):
        if progress is not None:
            progress(done - 1, len(rows))
        found.replayed.add(i)
        breakdown = memory_of(model, found.evaluated.config(i), training, cluster)
        if not any(stage.peak_replayed is not None for stage in breakdown.stages):
            continue  # the textbook sum: the search's row is memory_of's already
        total = breakdown.worst.total.value
        columns["memory"][i] = total
        columns["memory_basis"][i] = REPLAYED
        if columns["fits"][i] and total > cluster.capacity:
            columns["fits"][i] = False
            for key in TIME_FIELDS:
                if key in columns:
                    columns[key][i] = math.nan
            found.rejected[DROPPED] += 1
            dropped += 1
    return dropped


def replay_shown(found: SearchResult, ranked: np.ndarray, shown_of: Callable[[np.ndarray], np.ndarray], model: TransformerModel,
                 training: Training, cluster: Cluster, progress: Callable[[int, int], None] | None = None) -> np.ndarray:  # fmt: skip
    """`ranked` (the fitting rows in the order shown: found.ranked(), or as parcalc.results.fit re-timed them) once every
    row `shown_of(ranked)` picks is replayed (module docstring): each round replays the shown rows not yet replayed; a
    dropped row leaves the order, letting the next one in, which the next round replays. `progress`: replay_rows'."""
    if not replays(cluster):
        return ranked
    while todo := [i for i in shown_of(ranked).tolist() if i not in found.replayed]:
        if replay_rows(found, todo, model, training, cluster, progress):
            ranked = ranked[found.evaluated.columns["fits"][ranked].astype(bool)]
    return ranked


def replay_least(found: SearchResult, model: TransformerModel, training: Training, cluster: Cluster) -> int:
    """The row of least memory once its memory is replayed (nothing fits: the smallest footprint the search tells): the
    least floor is replayed until the least row is a replayed one."""
    memory = found.evaluated.columns["memory"]
    while True:
        least = int(np.argmin(memory))
        if not replays(cluster) or least in found.replayed:
            return least
        replay_rows(found, [least], model, training, cluster)
