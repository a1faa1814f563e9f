"""The fast paths of parcalc.core.fit_search (issues #31 and #32: `fit --search` under a second) change no number.

The searches of benchmarks/fit_search.py, as the command line builds them (parcalc.results.fit_request): every
configuration sampled, the shown ones among them, has the memory and step-time terms of parcalc.core.fit.estimate
for the same configuration to 1e-9 (the scalar path is the definition; the search only runs it on arrays), and the
split each configuration keeps is the best of its splits by estimate(). The best-split selection without a sort
(_best_aligned) keeps exactly the rows the sort keeps (_best_sorted), ties and configurations that fit nowhere
included, and the packed sort key orders rows as their columns do."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from parcalc.core.best_split import _best_aligned, _best_sorted, _packed_key
from parcalc.core.fit import estimate
from parcalc.core.fit_search import search
from parcalc.core.search_layouts import splits
from parcalc.results.fit_request import request

# benchmarks/fit_search.py's one-liners (the global batches and sequences of the published runs: DeepSeek-V3's
# technical report, 15,360 x 4,096; Llama 3 405B's 16M-token batch, 2,048 x 8,192)
SEARCHES = {
    "deepseek-v3-2048-h800": dict(model="deepseek-v3", gpus="2048", gpu=["h800-sxm5"], batch="15360", seq_len="4096"),
    "deepseek-v3-2048-h800-layout": dict(model="deepseek-v3", gpus="2048", gpu=["h800-sxm5"], batch="15360", seq_len="4096",
                                         pipeline_layout="Et|(tt|)*30mL"),
    "llama3-405b-16384-gb200": dict(model="llama3-405b", gpus="16384", gpu=["gb200"], batch="2048", seq_len="8192"),
}


def _scalar(model, config, training, cluster) -> dict[str, float]:  # type: ignore[no-untyped-def]
    e = estimate(model, config, training, cluster)
    return {"memory": e.total_memory, "t_compute": e.compute.value, "t_tp": e.tp_comm.value, "t_bubble": e.bubble.value,
            "t_pp": e.pp_comm.value, "t_dp": e.dp_comm.value, "t_optimizer": e.optimizer.value, "t_step": e.step.value,
            "t_cp": e.cp_comm.value if e.cp_comm is not None else 0.0, "t_ep": e.ep_comm.value if e.ep_comm is not None else 0.0,
            "mfu": e.mfu.value, "hfu": e.hfu.value, "tokens_per_second": e.tokens_per_second.value}  # fmt: skip




@pytest.fixture(scope="module", params=sorted(SEARCHES), name="searched")
def _searched(request):  # type: ignore[no-untyped-def]
    req = request_of(request.param)
    return request.param, req, search(req.model, req.training, req.cluster, req.space)


def request_of(name: str):  # type: ignore[no-untyped-def]
    return request(search=True, **SEARCHES[name])


def test_sampled_and_shown_rows_are_the_scalar_estimate(searched) -> None:  # type: ignore[no-untyped-def]
    name, req, found = searched
    ev = found.evaluated
    ranked = found.ranked()
    assert ranked.size > 0, name
    from parcalc.results.fit import distinct_layouts

    shown = distinct_layouts(ev, ranked, 5).tolist()  # the terminal's table
    rng = random.Random(name)
    unfit = np.flatnonzero(~ev.columns["fits"].astype(bool)).tolist()
    sample = shown + rng.sample(ranked.tolist(), min(25, ranked.size)) + rng.sample(unfit, min(10, len(unfit)))
    for i in sample:
        config = ev.config(i)
        for key, value in _scalar(req.model, config, req.training, req.cluster).items():
            if ev.columns["fits"][i] or key == "memory":
                assert ev.columns[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (name, config.label(), key)
            else:  # not timed: it does not fit
                assert math.isnan(ev.columns[key][i]), (name, config.label(), key)


def test_each_configuration_keeps_its_best_split(searched) -> None:  # type: ignore[no-untyped-def]
    """The kept split of a configuration against estimate() of every split of the same configuration: none fits where
    the kept one does not; none that fits is faster (or as fast with less memory) than the kept one."""
    name, req, found = searched
    ev = found.evaluated
    model, space = req.model, req.space
    rng = random.Random(name + "splits")
    # a layout the search proposes runs a v no split of its pp runs: no other split of its configuration (proposed_layouts)
    many = [i for i in range(len(ev)) if len(splits(model, int(ev.columns["pp"][i]), space)) > 1 and ev.columns["pipeline_layout"][i] < 0]
    if space.pipeline_layout is not None:  # its stages as written: one split a layout
        assert not many, name
        return
    assert many, name  # DeepSeek-V3's 61 layers and Llama 3's 126 split unevenly on most pipeline depths
    for i in rng.sample(many, min(6, len(many))):
        kept = ev.config(i)
        kept_est = estimate(model, kept, req.training, req.cluster)
        for first, last in splits(model, kept.layout.pp, space):
            other = kept.replaced(first_stage_layers=first, last_stage_layers=last)
            if other.layout.stage_layers(model.layers) == kept.layout.stage_layers(model.layers):
                continue
            if other.layout.chunks > 1 and any(n % other.layout.chunks for n in other.layout.stage_layers(model.layers)):
                continue  # interleaving this split cannot run: not a candidate of the configuration
            est = estimate(model, other, req.training, req.cluster)
            if kept_est.fits:  # (the search's numbers are estimate()'s to 1e-9: a tie is a tie within that)
                assert not est.fits or est.step.value > kept_est.step.value * (1 - 1e-9), (name, other.label())
                if est.fits and est.step.value < kept_est.step.value * (1 + 1e-9):
                    assert est.total_memory > kept_est.total_memory * (1 - 1e-9), (name, other.label())
            else:
                assert not est.fits and est.total_memory > kept_est.total_memory * (1 - 1e-9), (name, other.label())


def _parts(rng: np.random.Generator, splits_: int, rows: int) -> list[dict[str, np.ndarray]]:
    """`splits_` evaluated splits of one grid (shared configuration columns, as _layout_arrays makes them) with
    coarse times and memories, so that ties, and configurations that fit in no split, occur."""
    grid = {"micro_batch": rng.integers(1, 5, rows), "recompute": rng.integers(0, 4, rows), "zero": rng.integers(0, 4, rows),
            "sequence_parallel": rng.integers(0, 2, rows).astype(bool), "schedule": np.zeros(rows, dtype=int),
            "chunks": np.ones(rows, dtype=int), "shard_group": rng.integers(1, 3, rows), "tp": np.ones(rows, dtype=int)}  # fmt: skip
    grid["micro_batch"] = np.arange(rows)  # one row per configuration (the grid's rows are distinct)
    parts = []
    for s in range(splits_):
        fits = rng.random(rows) < 0.6
        timed = np.full((14, rows), math.nan)
        timed[10] = np.where(fits, rng.integers(1, 4, rows).astype(float), math.nan)  # t_step, with ties
        from parcalc.core.best_split import TIME_FIELDS, TIMED

        part = dict(grid) | {"first_stage_layers": np.full(rows, s), "last_stage_layers": np.full(rows, -s),
                             "memory": rng.integers(1, 4, rows).astype(float), "fits": fits, TIMED: timed}  # fmt: skip
        parts.append(part | dict(zip(TIME_FIELDS, timed, strict=True)))
    return parts


@pytest.mark.parametrize("seed", range(20))
def test_the_aligned_best_split_keeps_what_the_sort_keeps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parts = _parts(rng, int(rng.integers(2, 6)), int(rng.integers(1, 40)))
    aligned = _best_aligned(parts)
    assert aligned is not None
    (fast, dropped_fast), (sorted_, dropped_sorted) = aligned, _best_sorted(parts)
    assert dropped_fast == dropped_sorted
    assert fast.keys() == sorted_.keys()
    for key in fast:
        np.testing.assert_array_equal(fast[key], sorted_[key], err_msg=key)


def test_splits_with_other_rows_go_to_the_sort() -> None:
    parts = _parts(np.random.default_rng(1), 3, 10)
    parts[1] = parts[1] | {"chunks": parts[1]["chunks"].copy()}  # another grid (other schedules): rows need not align
    assert _best_aligned(parts) is None


def test_the_packed_key_orders_rows_as_their_columns() -> None:
    rng = np.random.default_rng(7)
    columns = [rng.integers(0, high, 500) for high in (3, 1, 7, 2, 100, 5)]
    key = _packed_key(columns)
    by_columns = np.lexsort(tuple(reversed(columns)))
    np.testing.assert_array_equal(np.argsort(key, kind="stable"), by_columns)
    assert len(set(key.tolist())) == len(set(zip(*(c.tolist() for c in columns), strict=True)))
