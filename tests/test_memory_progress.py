"""memory's progress bar: its total is the steps that run, every call the same total (session 19's QA).

parcalc.core.memory.memory_breakdown walks each of the pp stages' step (a framework's step memory) with the allocator
replayed over a run of it (the stage's total), and counts those: one step a stage, in thousandths of a stage, whoever calls it;
a multi-stage rank's walk (ZB-V, interleaved) moves the bar within its stage as its actions run (memory_walk.WALK_PROGRESS)."""

from __future__ import annotations

from typing import ClassVar

import pytest

import parcalc.results.parse as parse
from parcalc.core.choices import Schedule
from parcalc.core.memory_pipeline_dualpipe import rank_actions as dualpipe_actions
from parcalc.core.memory_pipeline_interleaved import rank_actions as interleaved_actions
from parcalc.core.memory_pipeline_zero_bubble import rank_actions as zb_v_actions
from parcalc.results.memory import from_flags

# torchtitan's FSDP2 step walked on 2 pipeline stages (presets/frameworks/torchtitan.yaml step_memory: torchtitan-eager)
WALKED = {"model": "llama3.2-1b", "seq_len": "2048", "framework": "torchtitan", "dp": "4", "pp": "2", "zero": "3", "gpu": "h200"}


class Recorder:
    calls: ClassVar[list[tuple[int, int]]] = []

    def __init__(self, label: str) -> None:
        Recorder.calls = []

    def __call__(self, done: int, total: int) -> None:
        Recorder.calls.append((done, total))

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("flags", "expected"), [
    # two stage walks by the core, each with its allocator replay: 2 steps of 2 (1F1B's walk of one stage reports nothing within)
    pytest.param(WALKED, [(1000, 2000), (2000, 2000)], id="torchtitan-pp2"),
    # the textbook sum walks nothing: no step, no bar
    pytest.param({"model": "llama3.2-1b", "seq_len": "2048", "dp": "4", "pp": "2", "gpu": "h200"}, [], id="textbook"),
])  # fmt: skip
def test_the_bar_counts_the_steps_that_run(monkeypatch, flags: dict[str, str], expected: list[tuple[int, int]]) -> None:
    from parcalc.core.choices import ZeroStage

    monkeypatch.setattr(parse, "ProgressBar", Recorder)
    from_flags(**{**flags, **({"zero": ZeroStage(flags["zero"])} if "zero" in flags else {})})
    assert Recorder.calls == expected


def test_the_core_counts_its_own_walks() -> None:
    """memory_breakdown's total is pp (in thousandths): the walks it runs, whoever calls it."""
    from parcalc.core.choices import ZeroStage
    from parcalc.core.memory import memory_breakdown
    from parcalc.results.memory import request

    req = request(**{**WALKED, "zero": ZeroStage.ZERO3})
    calls: ClassVar[list[tuple[int, int]]] = []
    memory_breakdown(req.model, req.layout, req.setup, lambda done, total: calls.append((done, total)))
    assert calls == [(1000, 2000), (2000, 2000)]


@pytest.mark.parametrize(("schedule", "actions"), [
    # rank 0 (and 1) of 2 under ZB-V at 4 micro-batches: F, I and W of 4 micro-batches on each of its two stages (the first
    # stage's I an action the walk passes over), UNSHARD, REDUCE_GRAD and RESHARD of each (memory_pipeline_zero_bubble)
    pytest.param({"schedule": Schedule.ZB_V}, 3 * 4 * 2 + 3 * 2, id="zb-v"),
    # Interleaved1F1B, 2 chunks, 4 micro-batches: F and B of 4 micro-batches on each chunk, UNSHARD, REDUCE_GRAD, RESHARD of each
    pytest.param({"schedule": Schedule.INTERLEAVED, "chunks": "2"}, 2 * 4 * 2 + 3 * 2, id="interleaved"),
    # DualPipeV (memory_pipeline_dualpipe.rank_actions), 4 micro-batches: rank 0's F of 4 on each stage, 5 whole backwards
    # B, 3 I and 3 W, UNSHARD, REDUCE_GRAD and RESHARD of each stage = 25; rank 1 one B fewer (24): given as their mean
    pytest.param({"schedule": Schedule.DUALPIPEV}, (25 + 24) / 2, id="dualpipev"),
])  # fmt: skip
def test_a_multi_stage_rank_walk_moves_the_bar_within_its_stage(schedule: dict, actions: float) -> None:
    """Each action of a ZB-V, DualPipeV or interleaved rank's walk reports progress (a minute at 512 micro-batches, before these calls
    nothing moved until the first stage was done): one call an action, monotonic, every call the same total, each stage
    ending on its thousand; the results the same as without a bar."""
    from parcalc.core.choices import ZeroStage
    from parcalc.core.memory import memory_breakdown
    from parcalc.core.memory_fsdp import fsdp_step_floor, fsdp_walked
    from parcalc.results.memory import request

    # Llama 3 8B's shape cut to 8 layers (llama3.2-1b's tied embeddings are no torchtitan Llama's: the textbook sum there)
    req = request(**{**WALKED, "model": "llama3-8b", "zero": ZeroStage.ZERO3, "layers": "8", "micro_batches": "4", **schedule})
    assert len(zb_v_actions(0, 2, 4)) == len(zb_v_actions(1, 2, 4)) == 30
    assert (len(dualpipe_actions(0, 2, 4)), len(dualpipe_actions(1, 2, 4))) == (25, 24)
    assert len(interleaved_actions(0, 2, 2, 4)) == len(interleaved_actions(1, 2, 2, 4)) == 22
    fsdp_walked.cache_clear()
    fsdp_step_floor.cache_clear()
    calls: list[tuple[int, int]] = []
    shown = memory_breakdown(req.model, req.layout, req.setup, lambda done, total: calls.append((done, total)))
    fsdp_walked.cache_clear()
    fsdp_step_floor.cache_clear()
    assert memory_breakdown(req.model, req.layout, req.setup).worst.total.value == shown.worst.total.value
    assert {total for _, total in calls} == {2000}
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert (1000, 2000) in calls and calls[-1] == (2000, 2000)
    # every action of each rank's walk, then the stage's own call: rank 1's actions as many as rank 0's here
    assert len(calls) == 2 * actions + 2, (len(calls), actions)


def test_fits_strategy_table_reports_each_row_sized_then_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """fit's strategy table walks a torchtitan step per row (DeepSeek-V2 on 64 H200: ~6 s), so it reports its rows:
    the first half of the bar each row's memory, the second each row's step time; the rows of fit_table.families (6
    families on 4 GPUs x 3 recomputations = 18 rows, so 36 in all), every call the same total, never going back."""
    from parcalc.results.fit import from_flags as fit_from_flags

    monkeypatch.setattr(parse, "ProgressBar", Recorder)
    fit_from_flags(model="llama3.2-1b", seq_len="2048", framework="torchtitan", gpus="4", gpu=["h200"], batch="8")
    calls = Recorder.calls
    totals = {total for _, total in calls}
    assert len(totals) == 1
    total = totals.pop()
    assert total == 2 * 6 * 3 and [done for done, _ in calls] == list(range(total))  # one call before each row of each half


def test_a_walked_pipelines_picture_stacks_every_stages_own_parts() -> None:
    """`memory -o x.pdf / .svg` of a walked pipeline (torchtitan, PP 2): the last stage holds the logits and loss, the first
    none, so the stages' component lists differ (10 against 11 here) and the picture's table crashed (zip, exit 70).
    The table's columns are every stage's components; a stage without one holds 0 B of it; each row adds up to its
    stage's total."""
    from parcalc.core.choices import ZeroStage
    from parcalc.render.figures import memory_figure
    from parcalc.results.memory import request as memory_request
    from parcalc.results.memory import result

    shown = result(memory_request(**{**WALKED, "model": "llama3-8b", "zero": ZeroStage.ZERO3, "layers": "8"}), pictures=True)
    table = next(t for t in shown.tables if t.key == "stage_components")
    names = [c.label for c in table.columns[1:-1]]
    assert "logits and loss" in names
    first, last = table.rows
    assert first[1 + names.index("logits and loss")] == 0.0 and last[1 + names.index("logits and loss")] > 0
    for row in table.rows:
        assert sum(row[1:-1]) == pytest.approx(row[-1], rel=1e-12)  # type: ignore[arg-type]
    assert memory_figure(shown) is not None
