"""Output every user sees says what a convention is, not which course handout it came from (issue #14,
"course jargon in general output"): no "seed 00N", "(slide)", "COMP4901Y" in labels, column headings,
sources, assumptions, help or preset names. The worksheets (presets/worksheets/*.yaml) are the
course's and may name it; general commands may not."""

from __future__ import annotations

import re

import pytest

from parcalc.cli import app

JARGON = re.compile(r"seeds? 0\d\d|_seed0\d\d|seed's|\(slide\)|= \(slide\)|COMP4901|HW2", re.IGNORECASE)

HW = ["--model", "homework-7b", "--batch", "128", "--seq-len", "4096", "--dtype", "fp16"]
COMMANDS = {
    "compare": ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--link", "nvlink3", "--compare"],
    "ring-elements": ["comm-volume", "--collective", "all-reduce", "--elements", "25M", "--dtype", "fp32", "--gpus", "4",
                      "--bandwidth", "25GB/s", "--latency", "5us"],
    "butterfly": ["comm-volume", "--collective", "all-reduce", "--algorithm", "butterfly", "--size", "1GB", "--gpus", "8"],
    "naive": ["comm-volume", "--collective", "all-reduce", "--algorithm", "naive", "--size", "1GB", "--gpus", "8"],
    "tree": ["comm-volume", "--collective", "all-reduce", "--algorithm", "tree", "--size", "1GB", "--gpus", "8"],
    "ps": ["comm-volume", "--collective", "all-reduce", "--algorithm", "parameter-server", "--size", "1GB", "--gpus", "8"],
    "strategy-all": ["comm-volume", "--strategy", "all", *HW, "--gpus", "8"],
    "strategy-3d": ["comm-volume", "--strategy", "3d", "--model", "homework-7b", "--tp", "2", "--pp", "2", "--dp", "2",
                    "--batch", "64", "--seq-len", "4096"],
    "flops": ["flops", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096"],
    "intensity": ["intensity", *HW, "--gpu", "a100-sxm4-80gb"],
    "memory": ["memory", "--model", "homework-7b", "--micro-batch", "1", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb"],
    "fit": ["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048"],
    "bubble": ["bubble", "--pp", "4", "--micro-batches", "16"],
    "analyze": ["analyze", "lab-ddp-timings.csv", "--time-is", "epoch", "--params", "11.2M", "--grad-bytes", "4",
                "--link", "pcie4-x16"],
    "presets-show": ["presets", "show", "homework-7b"],
    "presets-show-lab": ["presets", "show", "seed000-lab"],
}


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_general_output_has_no_course_jargon(runner, name: str, fmt: str) -> None:
    result = runner.invoke(app, [*COMMANDS[name], "--format", fmt])
    assert result.exit_code == 0, result.output[-2000:]
    assert JARGON.findall(result.output) == []


@pytest.mark.parametrize("command", ["analyze", "comm-volume", "flops", "memory", "fit", "intensity", "presets show"])
def test_help_has_no_course_jargon(runner, command: str) -> None:
    result = runner.invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0
    assert JARGON.findall(result.output) == []


def test_the_pattern_catches_what_the_issue_quoted() -> None:
    # the strings issue #14 quoted from general output before this change
    for old in ("seed 001 total", "= (slide)", "seed 002's form T = 2(N-1) T(X·itsize/N)",
                "Homework 7B transformer (COMP4901Y HW2, seed 004)", "(seed 004 Q2.1)", "seeds 001 and 002", "ring_time_seed002"):
        assert JARGON.search(old), old
    # names of what a convention is stay allowed
    for new in ("approximation", "payload", "Ring all-reduce time as Patarasuk & Yuan write it", "seed000-lab"):
        assert not JARGON.search(new), new


def test_compare_names_the_approximations_by_what_they_are(run_json) -> None:
    doc = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--link", "nvlink3", "--compare")
    labels = {c["key"]: c["label"] for c in doc["tables"]["algorithms"]["columns"]}
    assert (labels["slide_formula"], labels["slide_total"], labels["slide_time"]) == (
        "approximation", "approximate total", "approximate time")
    assert any(a.startswith("approximation, approximate total and time (--compare)") for a in doc["assumptions"])
    # the ring time as Patarasuk & Yuan (JPDC 2009) write it: 2 (N-1) (alpha + M / (N beta)) with M = 1 GB,
    # N = 8, NVLink 3's 300 GB/s per direction and 3.4 us: 14 x (3.4e-6 + 1e9 / 2.4e12) = 5.88093 ms
    ring = doc["results"]["ring_time_patarasuk_yuan"]
    assert ring["label"].startswith("Ring all-reduce time as Patarasuk & Yuan write it")
    assert ring["value"] == pytest.approx(14 * (3.4e-6 + 1e9 / 2.4e12), rel=1e-12)
