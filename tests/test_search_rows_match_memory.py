"""Issue #30: `memory` and `fit --search` give one total for one layout and framework. Each pipelined row the search shows
(its top table) against `memory` of that row's whole layout (tests/search_rows.layout_flags), under fsdp2 and torchtitan:
the same bytes, and the same kind of number (memory_basis `replayed` where memory walks the step and replays the allocator
over it, `textbook` where it keeps the textbook sum). The searches are those whose top tables hold pipelined rows: dense
Llama 3 8B and 70B and Mixtral 8x7B (interleaved rows, textbook), and 8B held to 1F1B (a torchtitan row whose stages are
walked, parcalc.core.memory_pipeline_stage, and replayed: parcalc.core.search_replay)."""

from __future__ import annotations

import pytest

from tests.search_rows import layout_flags

SEARCHES = {  # id: (the model's flags, its transformer layers, the search's own flags)
    "mixtral-fsdp2-64": (("--model", "mixtral-8x7b", "--framework", "fsdp2"), 32, ("--gpus", "64")),
    "llama3-8b-torchtitan-8": (("--model", "llama3-8b", "--framework", "torchtitan"), 32, ("--gpus", "8")),
    "llama3-8b-torchtitan-8-1f1b": (("--model", "llama3-8b", "--framework", "torchtitan"), 32, ("--gpus", "8", "--pp", "2", "--no-interleaved")),
    "llama3-70b-torchtitan-32": (("--model", "llama3-70b", "--framework", "torchtitan"), 80, ("--gpus", "32")),
    "llama3-70b-fsdp2-32": (("--model", "llama3-70b", "--framework", "fsdp2"), 80, ("--gpus", "32")),
}  # fmt: skip


@pytest.mark.parametrize("search", SEARCHES)
def test_every_pipelined_row_shown_is_memorys_total(run_json, search: str) -> None:
    model, layers, own = SEARCHES[search]
    top = run_json("fit", *model, "--gpu", "h100-sxm5", *own, "--search")["tables"]["top"]["rows"]
    pipelined = [row for row in top if row["pp"] > 1]
    assert pipelined, f"{search}: no pipelined row in the top table (the test would check nothing)"
    for row in pipelined:
        results = run_json("memory", *model, "--gpu", "h100-sxm5", *layout_flags(row, layers, "torchtitan" in model))["results"]
        # the same bytes (the textbook's interleaved in-flight count can be fractional: p (1 + (p - 1) / (p v)))
        assert row["memory"] == pytest.approx(results["total"]["value"], rel=1e-12), row
        # memory walked the step and replayed the allocator exactly where the row says so
        assert row["memory_basis"] == ("replayed" if "step_reserved_replayed" in results else "textbook"), row


def test_the_1f1b_search_shows_a_walked_pipelined_row(run_json) -> None:
    """The 1F1B search above is the one that checks a walked pipeline: its top table has a replayed pipelined row
    (Llama 3 8B, TP 2 x PP 2 x FSDP 2 at 63.14 GB when this was written: parcalc.core.search_step_peaks.pipeline_stage_rows
    screens it by the stages' floors, search_replay replays it as `memory` does)."""
    model, _, own = SEARCHES["llama3-8b-torchtitan-8-1f1b"]
    top = run_json("fit", *model, "--gpu", "h100-sxm5", *own, "--search")["tables"]["top"]["rows"]
    assert [row["memory_basis"] for row in top if row["pp"] > 1 and row["zero"] == 3].count("replayed") >= 1


LLAMA_8B_PP2 = ("--model", "llama3-8b", "--gpu", "h100-sxm5", "--framework", "torchtitan", "--tp", "1", "--pp", "2", "--dp", "4", "--zero", "3",
                "--micro-batch", "1", "--micro-batches", "2", "--recompute", "none", "--seq-len", "8192")  # fmt: skip


def test_the_interleaved_layout_is_walked_and_holds_more_than_its_textbook_sum(run_json) -> None:
    """torchtitan's default schedule under PP, Interleaved1F1B with two stages a rank, is walked as torch's runtime runs it
    (parcalc.core.memory_pipeline_interleaved, held against MemTracker in
    tests/ground_truth/test_torch_memory_pipeline_interleaved.py) and the allocator replayed over it. Llama 3 8B at PP 2 x
    FSDP 4, 2 micro-batches of 8192 tokens: rank 1 runs stage 1's two forwards before stage 3's forward and backward, so at
    stage 3's last backward it holds 9 x 2 + 7 layer-micro-batches where 1F1B's last stage holds 16: 95.08 GiB against the
    textbook sum's 81.50 (session 20, still given as textbook_total) and the 1F1B walk's 81.23."""
    walked = run_json("memory", *LLAMA_8B_PP2, "--schedule", "1f1b")["results"]
    interleaved = run_json("memory", *LLAMA_8B_PP2, "--schedule", "interleaved", "--chunks", "2")["results"]  # torchtitan's default v
    assert "step_reserved_replayed" in interleaved and "backward: micro-batch 2 of 2, stage 3" in interleaved["step_peak"]["label"]
    assert interleaved["textbook_total"]["value"] / 2**30 == pytest.approx(81.503, abs=1e-3)
    assert interleaved["total"]["value"] / 2**30 == pytest.approx(95.084, abs=1e-3)
    assert walked["total"]["value"] / 2**30 == pytest.approx(81.227, abs=1e-3)
