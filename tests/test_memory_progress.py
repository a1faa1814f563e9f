"""memory's progress bar: its total is the steps that run, every call the same total (session 19's QA).

parcalc.core.memory.memory_breakdown walks each of the pp stages' step (a framework's step memory) with the allocator
replayed over a run of it (the stage's total), and counts those: one step a stage, whoever calls it."""

from __future__ import annotations

from typing import ClassVar

import pytest

import parcalc.results.parse as parse
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
    # two stage walks by the core, each with its allocator replay: 2 steps of 2
    pytest.param(WALKED, [(1, 2), (2, 2)], id="torchtitan-pp2"),
    # the textbook sum walks nothing: no step, no bar
    pytest.param({"model": "llama3.2-1b", "seq_len": "2048", "dp": "4", "pp": "2", "gpu": "h200"}, [], id="textbook"),
])  # fmt: skip
def test_the_bar_counts_the_steps_that_run(monkeypatch, flags: dict[str, str], expected: list[tuple[int, int]]) -> None:
    from parcalc.core.choices import ZeroStage

    monkeypatch.setattr(parse, "ProgressBar", Recorder)
    from_flags(**{**flags, **({"zero": ZeroStage(flags["zero"])} if "zero" in flags else {})})
    assert Recorder.calls == expected


def test_the_core_counts_its_own_walks() -> None:
    """memory_breakdown's total is pp: the walks it runs, whoever calls it."""
    from parcalc.core.choices import ZeroStage
    from parcalc.core.memory import memory_breakdown
    from parcalc.results.memory import request

    req = request(**{**WALKED, "zero": ZeroStage.ZERO3})
    calls: ClassVar[list[tuple[int, int]]] = []
    memory_breakdown(req.model, req.layout, req.setup, lambda done, total: calls.append((done, total)))
    assert calls == [(1, 2), (2, 2)]
