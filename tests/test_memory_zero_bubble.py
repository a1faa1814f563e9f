"""`memory --framework torchtitan --schedule zb-v` walks each pipeline rank's two stages as torch's ScheduleZBVZeroBubble
runs them (parcalc.core.memory_pipeline_zero_bubble; its ground truth: tests/ground_truth/test_torch_memory_pipeline_zero_bubble.py,
MemTracker to 0.01 %), and keeps the textbook sum, saying why, where the walk does not follow the layout."""

from __future__ import annotations

import pytest

ZB_V = ("memory", "--model", "llama3-8b", "--framework", "torchtitan", "--seq-len", "4096", "--pp", "4", "--dp", "2", "--zero", "3",
        "--schedule", "zb-v", "--micro-batches", "8", "--gpu", "h200")  # fmt: skip


def test_zb_v_ranks_are_walked(run_json):
    doc = run_json(*ZB_V)
    results = doc["results"]
    walked = next(a for a in doc["assumptions"] if a.startswith("the model code walked is"))
    # rank 0 holds torchtitan's first and last stages of 8 (its split of 32 layers with the embedding and the output weighed
    # as a layer each: pipeline_torchtitan), the fullest
    assert "pipeline rank 1 of 4: stages 0 and 7 of 8 (layers (0, 4) and (29, 32)) under ScheduleZBVZeroBubble's runtime" in walked
    assert results["total"]["value"] != results["textbook_total"]["value"]
    assert "step_reserved_replayed" in results
    assert not any("does not cover pp" in a for a in doc["assumptions"])


def test_a_rank_holds_stages_r_and_2p_minus_1_minus_r():
    """Without a layout, 2p stages of layers / 2p layers each, placed in a V (torchtitan's _get_stage_indices, style 'v')."""
    from parcalc.core.choices import Schedule
    from parcalc.core.layout import Layout
    from parcalc.core.memory_pipeline_zero_bubble import v_rank_chunk_layers

    layout = Layout(1, 4, 2, zero=3, schedule=Schedule.ZB_V)
    assert v_rank_chunk_layers(layout, 32, 0) == ((0, 4), (28, 32))  # stages 0 and 7: the embedding's and the head's
    assert v_rank_chunk_layers(layout, 32, 3) == ((12, 16), (16, 20))  # the V's turn: stages 3 and 4, adjacent


@pytest.mark.parametrize("extra, gap", [
    (("--recompute", "op"), "--recompute op (the split backward is walked with no or full checkpointing) under ZB-V"),
    (("--tp", "2"), "tp under ZB-V"),
])  # fmt: skip
def test_what_the_walk_does_not_follow_keeps_the_textbook_sum(run_json, extra, gap):
    doc = run_json(*ZB_V, *extra)
    line = next(a for a in doc["assumptions"] if a.startswith("memory: the textbook sum"))
    assert gap in line, line
    assert "step_peak" not in doc["results"] and "textbook_total" not in doc["results"]  # the textbook sum is the total


def test_pipeline_gaps_name_only_what_is_not_walked():
    from parcalc.core.choices import Recompute, Schedule
    from parcalc.core.layout import Layout
    from parcalc.core.memory_fsdp import pipeline_gaps

    assert pipeline_gaps(Layout(1, 4, 2, zero=3, schedule=Schedule.ZB_V), "torchtitan", True, 32) == []
    assert pipeline_gaps(Layout(1, 4, 2, zero=3, schedule=Schedule.ZB_V), "torchtitan", True, 32, Recompute.FULL) == []
    assert pipeline_gaps(Layout(1, 4, 2, zero=3, schedule=Schedule.ZB_V), "torchtitan", True, 32, Recompute.OP) == [
        "pp = 4: --recompute op (the split backward is walked with no or full checkpointing) under ZB-V"]
    zb_h1 = pipeline_gaps(Layout(1, 4, 2, zero=3, schedule=Schedule.ZB_H1), "torchtitan", True, 32)
    assert zb_h1 == ["pp = 4: --schedule zb-h1 (the walk follows 1F1B, interleaved 1F1B, ZB-V and DualPipeV)"]


def test_chunks_under_zb_v_is_one_line_error(run_error):
    """The V's two stages a GPU are the schedule's (parcalc.results.parse.pipeline_layout_chunks), not --chunks."""
    line = run_error([*ZB_V, "--chunks", "3"])
    assert line == "Error: --chunks: only the interleaved schedule splits a device's layers into chunks (got --schedule zb-v)"


def test_a_zb_v_row_fit_shows_is_memorys_walked_total(run_json):
    """fit's search screens ZB-V rows by their ranks' floor (test below) and
    replays the rows it shows as `memory` does: the same bytes, basis `replayed` (Llama 3 8B on 8 H200, s 4096, TP 1 x PP 2
    x FSDP 4, b 1, m 2: 74.06 GB when this was written)."""
    from tests.search_rows import layout_flags

    model = ("--model", "llama3-8b", "--framework", "torchtitan", "--gpu", "h200", "--seq-len", "4096")
    top = run_json("fit", *model, "--gpus", "8", "--pp", "2", "--schedule", "zb-v", "--tp", "1", "--recompute", "none",
                   "--search")["tables"]["top"]["rows"]  # fmt: skip
    rows = [row for row in top if row["pp"] > 1]
    assert rows and all(row["memory_basis"] == "replayed" for row in rows), top
    for row in rows:
        results = run_json("memory", *model, *layout_flags(row, 32, True))["results"]
        assert "step_reserved_replayed" in results
        assert row["memory"] == pytest.approx(results["total"]["value"], rel=1e-12), row


def test_the_search_screens_zb_v_rows_by_their_ranks_floor():
    """fit --search --schedule zb-v under torchtitan: a ZB-V rank's walk keeps far more than the textbook sum (its split
    backward holds every saved tensor from I to W), so the textbook screen let in rows that do not fit; each row the walk
    follows now carries its ranks' floor of the allocator replay (search_step_peaks._worst_stage), a lower bound of
    memory_of's total. Llama 3 8B on 8 H100, s 8192, its 32 ZeRO-3 pipelined rows: 10 walked (the others' layouts the
    walk does not follow, op checkpointing or selective, keep the textbook sum, memory_of's too); with the textbook screen
    5 rows it let in did not fit by memory_of (session 22, before this screen); now none, and none that fits is
    screened out."""
    import numpy as np

    from parcalc.core.choices import Schedule
    from parcalc.core.fit import memory_of
    from parcalc.core.fit_search import search
    from parcalc.core.search_columns import FLOOR, SCHEDULE_CODES
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-8b", gpus="8", gpu=["h100-sxm5"], framework="torchtitan", seq_len=8192, schedule="zb-v")
    found = search(req.model, req.training, req.cluster, req.space)
    c = found.evaluated.columns
    rows = np.flatnonzero((c["schedule"] == SCHEDULE_CODES.index(Schedule.ZB_V)) & (c["pp"] > 1) & (c["zero"] == 3)).tolist()
    assert len(rows) == 32 and sum(int(c["memory_basis"][i]) == FLOOR for i in rows) == 10
    for i in rows:
        total = memory_of(req.model, found.evaluated.config(i), req.training, req.cluster).worst.total.value
        assert c["memory"][i] <= total * (1 + 1e-12), i
        assert bool(c["fits"][i]) == (total <= req.cluster.capacity), (i, c["memory"][i], total)
