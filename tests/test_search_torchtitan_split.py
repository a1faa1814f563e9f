"""fit --search times every pipeline split torchtitan makes (issue #31): any per-rank layer counts, not only a first /
even middle / last one, and the V schedules (ZB-V, DualPipeV: rank r runs virtual stages r and 2p - 1 - r, the embedding
and the head on rank 0). Each searched row is fit's estimate of its configuration (tests/search_rows.assert_row_is_estimate),
and a row whose stages are walked carries memory_of's floor, though the search walks only the stages that can hold the
most (search_step_peaks.walked_stages)."""

from __future__ import annotations

import random
from functools import cache
from typing import Any

import numpy as np
import pytest

from parcalc.core.choices import Schedule
from parcalc.core.search_columns import FLOOR, SCHEDULE_CODES, TEXTBOOK
from tests.search_rows import assert_row_is_estimate

# Llama 3 70B (80 layers) on 64 H100 under torchtitan, fit's defaults: the search of the issue's `Try:`
REQUEST = {"model": "llama3-70b", "gpus": "64", "gpu": ["h100-sxm5"], "framework": "torchtitan"}

# torchtitan's _generate_llm_fqn_per_model_part (pytorch/torchtitan @b5bcd76c), by hand (parcalc.core.pipeline_torchtitan):
# 80 layers + the embedding + the output = 82 effective layers. PP 8, one stage a rank: 82 = 8 x 10 + 2, so stages 0 and 1
# take 11, the first less the embedding, the last less the output: 10, 11, 10 x 5, 9. A V of 16 stages: 82 = 16 x 5 + 2:
# 5, 6, 5 x 13, 4, and rank r runs stages r and 15 - r: 5 + 4, 6 + 5, then 5 + 5 on ranks 2 to 7.
PP8 = (10, 11, 10, 10, 10, 10, 10, 9)
PP8_V = (9, 11, 10, 10, 10, 10, 10, 10)


@cache
def _search(schedule: str | None = None) -> tuple[Any, Any]:
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    req = request(search=True, **REQUEST, **({"schedule": schedule} if schedule else {}))
    return req, search(req.model, req.training, req.cluster, req.space)


@pytest.mark.parametrize("schedule", [None, "zb-v", "dualpipev"])
def test_the_search_times_torchtitans_uneven_splits(schedule: str | None) -> None:
    """Before: PP 4, 8, 16 and 32 refused ('torchtitan's split is not a first / even middle / last one', 13 layouts of 1F1B
    and interleaved) and every V layout ('torchtitan's V puts the head on rank 0', 18); now timed, split as fit splits them."""
    _, found = _search(schedule)
    reasons = " ".join(found.rejected)
    assert "first / even middle / last" not in reasons and "puts the head on rank 0" not in reasons, found.rejected
    c = found.evaluated.columns
    eight = np.flatnonzero(c["pp"] == 8)
    assert eight.size and set(c["pp"][c["fits"]].tolist()) >= {8, 16}
    config = found.evaluated.config(int(eight[0]))
    assert config.layout.split_by == "torchtitan"
    assert config.layout.stage_layers(80) == (PP8_V if schedule else PP8)
    assert (c["first_stage_layers"][eight[0]], c["last_stage_layers"][eight[0]]) == ((9, 10) if schedule else (10, 9))


@pytest.mark.parametrize("schedule", [None, "zb-v", "dualpipev"])
def test_uneven_torchtitan_rows_are_fits_estimate(schedule: str | None) -> None:
    """Rows of the new depths (PP 4 to 32; 1F1B and interleaved v = 2, or the V) against fit's estimate of the same
    configuration: the same memory (textbook rows: layouts the walk does not follow, fit's textbook sum too; the interleaved
    rows it follows carry their ranks' floor, tests/test_search_interleaved_screen.py) and the same step time, to 1e-9."""
    req, found = _search(schedule)
    c = found.evaluated.columns
    walkable = (c["schedule"] == SCHEDULE_CODES.index(Schedule.ONE_F_ONE_B)) & (c["chunks"] == 1)
    # not a 1F1B row over the capacity: the search leaves its textbook sum unwalked, fit walks it (pipeline_stage_rows)
    rows = [i for i in range(len(found.evaluated)) if c["pp"][i] >= 4 and c["memory_basis"][i] == TEXTBOOK
            and (c["fits"][i] or not walkable[i])]  # fmt: skip
    fitting = [i for i in rows if c["fits"][i]]
    picked = random.Random(31).sample(fitting, 10) + random.Random(31).sample(rows, 6)
    assert {int(c["pp"][i]) for i in picked} >= {4, 8}
    if schedule is None:
        assert any(c["chunks"][i] == 2 for i in fitting)  # torchtitan's default two stages a rank, timed too
    for i in picked:
        assert_row_is_estimate(found, i, req.model, req.training, req.cluster)


def test_walked_rows_of_uneven_splits_are_memory_ofs_floor() -> None:
    """The 1F1B rows whose stages the torchtitan walk follows (search_step_peaks.pipeline_stage_rows) on PP 8, 16 and 32:
    the search walks the ends and a middle stage only where it holds more layers than every earlier one
    (search_step_peaks.walked_stages; PP 16: 5, 6, 5 x 13, 4 walks stages 0, 1 and 15), memory_of walks them all; the floors
    agree to the byte."""
    from parcalc.core.fit import memory_of

    req, found = _search()
    c = found.evaluated.columns
    # interleaved rows: tests/test_search_interleaved_screen.py (one over the capacity carries a rank's floor, not the worst)
    walked = [i for i in range(len(found.evaluated)) if c["pp"][i] >= 8 and c["memory_basis"][i] == FLOOR and c["chunks"][i] == 1]
    assert {int(c["pp"][i]) for i in walked} >= {8, 16, 32}
    for i in [i for p in (8, 16, 32) for i in [j for j in walked if c["pp"][j] == p][:2]]:  # two of each depth
        config = found.evaluated.config(i)
        whole = memory_of(req.model, config, req.training, req.cluster, allocator_replayed=False).worst.total.value
        assert c["memory"][i] == pytest.approx(whole, rel=1e-12), config.label()
