"""One layout evaluated with several pipeline splits (parcalc.core.fit_search): each configuration keeps its best
split, the one that fits with the lowest step time (ties: less memory), or, when none fits, the one with the least
memory; and the time columns of an evaluated part, kept as the rows of one array so that they are selected and joined
at once."""

from __future__ import annotations

import numpy as np

TIME_FIELDS = ("t_compute", "t_tp", "t_bubble", "t_pp", "t_dp", "t_cp", "t_ep", "t_optimizer", "t_offload", "t_host", "t_step", "tokens_per_second",
                "mfu", "hfu")  # fmt: skip
# A part's time columns are the rows of one array (TIMED): selected and joined at once, then the columns are its rows again
TIMED = "_timed"
TIMED_COLUMNS = frozenset((*TIME_FIELDS, TIMED))


def best_splits(parts: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], int]:
    """One layout evaluated with several splits: each configuration's best split (the one that
    fits with the lowest step time, ties less memory; when none fits, the least memory), and how
    many rows were dropped."""
    aligned = _best_aligned(parts)
    return aligned if aligned is not None else _best_sorted(parts)


def _best_sorted(parts: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], int]:
    """best_splits by one sort of every split's rows: by configuration, then fits first, then step time (or memory,
    where it does not fit), then memory; the first row of each configuration is kept, the kept rows in their order."""
    cols = {k: np.concatenate([c[k] for c in parts]) for k in parts[0] if k not in TIMED_COLUMNS}
    cols[TIMED] = np.concatenate([c[TIMED] for c in parts], axis=1)
    cols |= dict(zip(TIME_FIELDS, cols[TIMED], strict=True))
    key = _packed_key([cols[k] for k in _SPLIT_KEYS])
    fits = cols["fits"].astype(bool)
    rank = np.where(fits, cols["t_step"], cols["memory"])
    order = np.lexsort((cols["memory"], rank, ~fits, key))  # the last key sorts first
    grouped = key[order]
    first_of_group = np.ones(order.size, dtype=bool)
    first_of_group[1:] = grouped[1:] != grouped[:-1]
    keep = np.sort(order[first_of_group])
    kept = {k: a[keep] for k, a in cols.items() if k not in TIMED_COLUMNS}
    kept[TIMED] = cols[TIMED][:, keep]
    return kept | dict(zip(TIME_FIELDS, kept[TIMED], strict=True)), int(order.size - keep.size)


def _best_aligned(parts: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], int] | None:
    """best_splits where every split has the same configurations in the same rows (the splits share their grid's
    arrays: _layout_arrays), without a sort: row by row, the first split that no later one beats, by (does not fit,
    step time or memory, memory) as the sort orders them, and the rows kept in the order the sort keeps them (by split,
    then row). None where the splits' rows differ (their schedules differ) or a time or memory is nan (the sort's order
    of nan is its own): the sort decides there."""
    first = parts[0]
    if any(c[k] is not first[k] for c in parts[1:] for k in _SPLIT_KEYS):
        return None
    fits = [c["fits"].astype(bool) for c in parts]
    memory = [c["memory"] for c in parts]
    rank = [np.where(f, c["t_step"], c["memory"]) for f, c in zip(fits, parts, strict=True)]
    if any(np.isnan(x).any() for x in (*memory, *rank)):
        return None
    winner = np.zeros(first["tp"].size, dtype=np.int64)
    best_fits, best_rank, best_memory = fits[0], rank[0], memory[0]
    for s in range(1, len(parts)):
        f, r, m = fits[s], rank[s], memory[s]
        better = (f & ~best_fits) | ((f == best_fits) & ((r < best_rank) | ((r == best_rank) & (m < best_memory))))
        winner[better] = s
        best_fits, best_rank, best_memory = np.where(better, f, best_fits), np.where(better, r, best_rank), np.where(better, m, best_memory)
    order = np.argsort(winner, kind="stable")  # by split, then row: the sort's np.sort(kept indices)
    kept = winner[order] * winner.size + order  # the kept rows in the splits' rows one after another
    columns = {k: (a[order] if all(c[k] is a for c in parts) else np.concatenate([c[k] for c in parts])[kept]) for k, a in first.items()
               if k not in TIMED_COLUMNS}  # fmt: skip
    columns[TIMED] = np.concatenate([c[TIMED] for c in parts], axis=1)[:, kept]  # every time column at once
    return columns | dict(zip(TIME_FIELDS, columns[TIMED], strict=True)), (len(parts) - 1) * winner.size


# What tells one configuration of a layout from another (all but the split): the rows best_splits compares
_SPLIT_KEYS = ("micro_batch", "recompute", "zero", "sequence_parallel", "schedule", "chunks", "shard_group")


def _packed_key(columns: list[np.ndarray]) -> np.ndarray:
    """The columns (whole numbers from 0) as one int64 per row, in mixed radix with the first column the most
    significant digit: two rows' keys compare as their tuples of columns do (lexicographically), so one sort on the
    key orders the rows as a sort on every column would (tests/test_fit_search_speed.py)."""
    key = np.zeros(columns[0].size, dtype=np.int64)
    span = 1
    for column in columns:
        values = column.astype(np.int64)
        radix = int(values.max()) + 1 if values.size else 1
        span *= radix
        if span >= 2**62 or (values.size and int(values.min()) < 0):  # not expected (the values are degrees and sizes)
            raise ValueError("the split keys do not fit one int64")
        key = key * radix + values
    return key
