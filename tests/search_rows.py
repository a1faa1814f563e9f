"""The flags that pin a row of `fit --search --format json` as one layout for `memory` or `fit`: every field the row's
memory depends on (parcalc.core.search_columns.Evaluated.config reads the same columns back into a Config). Session 20's
strict xfail in tests/test_fsdp_expert_shards.py compared a row with `memory` of flags that left out its schedule and
chunks: the interleaved row's activations against 1F1B's."""

from __future__ import annotations

import math
from typing import Any

import pytest


def layout_flags(row: dict, layers: int, framework_split: bool = False) -> list[str]:
    """`row`: one of the search's JSON rows; `layers`: the model's transformer layers (an even split, L / p on every stage,
    is the default, so the stage layers are passed only where the row's split is uneven, as Evaluated.config decides).
    framework_split: the framework splits the layers itself (torchtitan: parcalc.core.pipeline_torchtitan), as the search
    did, so no stage layers are passed (its middle ranks may differ: 8B on PP 4 is 8 + 9 + 8 + 7)."""
    flags = ["--tp", str(row["tp"]), "--pp", str(row["pp"]), "--dp", str(row["dp"]), "--zero", str(row["zero"]),
             "--micro-batch", str(row["micro_batch"]), "--micro-batches", str(row["micro_batches"]), "--recompute", row["recompute"]]  # fmt: skip
    for key in ("cp", "ep"):  # columns the CLI shows only where the search varied them (None otherwise)
        if row.get(key) is not None:
            flags += [f"--{key}", str(row[key])]
    ranks = row["dp"] * (row.get("cp") or 1)
    # hybrid sharding only where the row's S is below dp x cp (Evaluated.shard_group; ZeRO-0 rows carry dp x cp)
    if row.get("shard_group") is not None and row["zero"] >= 1 and row["shard_group"] < ranks:
        flags += ["--shard-group", str(row["shard_group"])]
    if row["sequence_parallel"]:
        flags.append("--sequence-parallel")
    p = row["pp"]
    if p > 1:
        flags += ["--schedule", row["schedule"], *(["--chunks", str(row["chunks"])] if row["chunks"] > 1 else [])]
        first, last = row["first_stage_layers"], row["last_stage_layers"]
        if row.get("pipeline_layout") is not None:  # a layout string (given, or proposed by the search): it is the split
            flags += ["--pipeline-layout", row["pipeline_layout"]]
        elif not framework_split and not (layers % p == 0 and first == last == layers // p):
            flags += ["--first-stage-layers", str(first), "--last-stage-layers", str(last)]
    return flags


def assert_row_is_estimate(found: Any, i: int, model: Any, training: Any, cluster: Any) -> Any:
    """Row i of a search (parcalc.core.fit_search.search) is fit's one-layout estimate of its configuration: a valid
    configuration, the same memory, and the same step where it fits (NaN where it does not). Returns the configuration.
    (Session 21's `screened`, an interleaved torchtitan row kept at its textbook sum though fit walks its ranks, is gone:
    such a row carries its ranks' floor now, parcalc.core.search_step_peaks._worst_stage.)"""
    from parcalc.core.fit import estimate, invalid_reason

    columns = found.evaluated.columns
    config = found.evaluated.config(i)
    assert invalid_reason(model, config, training, cluster) is None
    scalar = estimate(model, config, training, cluster)
    assert columns["memory"][i] == pytest.approx(scalar.total_memory, rel=1e-9), config.label()
    if columns["fits"][i]:
        assert columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9), config.label()
    else:
        assert math.isnan(columns["t_step"][i])
    return config
