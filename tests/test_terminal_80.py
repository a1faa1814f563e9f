"""80-column terminals, as a person sees them (issue #14 items 2 and 4): the commands run under a real
pseudo-terminal 80 columns wide, so rich measures the width itself, and no key cell is cut to "…"."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios

import pytest

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_in_pty(args: list[str], columns: int = 80) -> str:
    """`python -m parcalc ARGS` with stdout and stderr on a pty of `columns` columns; its text, ANSI removed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    process = subprocess.Popen([sys.executable, "-m", "parcalc", *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    try:
        while select.select([master], [], [], 300)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the pty (EIO on Linux)
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        process.wait(timeout=60)
    assert process.returncode == 0, out.decode(errors="replace")[-2000:]
    return ANSI.sub("", out.decode("utf-8", errors="replace")).replace("\r\n", "\n")


def test_fit_search_table_has_no_cut_cell_at_80_columns() -> None:
    text = run_in_pty(["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--batch", "1536",
                       "--seq-len", "2048", "--search", "--detail", "full"])  # fmt: skip (the brief form: tests/test_brief.py)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text.split("Fastest configurations", 2)[-1]
    records = re.split(r"\n\d+\. ", table)[1:]
    assert len(records) >= 5
    for record in records:
        flat = " ".join(record.split())
        # every key cell whole: degrees, recomputation, ZeRO stage, memory, step time, MFU
        assert re.search(r"tp \d+ pp \d+ dp \d+", flat), flat
        assert re.search(r"recompute (none|selective|full|op)\b", flat), flat
        assert re.search(r"zero [0-3]\b", flat), flat
        assert re.search(r"memory [\d.]+ [MG]iB", flat), flat  # memory in binary units, as the capacity (issue 28)
        assert re.search(r"step [\d.]+ m?s\b", flat), flat
        assert re.search(r"MFU [\d.]+ %", flat), flat


def test_fit_strategy_table_names_each_zero_stage_at_80_columns() -> None:
    # issue #14: the strategy table showed "ZeRO…" for ZeRO-1, -2 and -3 alike
    text = run_in_pty(["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048", "--detail", "full"])
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    strategies = set(re.findall(r"strategy (single GPU|DP|ZeRO-[123](?: \(FSDP\))?|TP \+ SP|TP|PP|TP x PP)\s", text))
    assert {"single GPU", "DP", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)"} <= strategies


def test_help_summaries_are_whole_sentences_that_fit_80_columns() -> None:
    from parcalc.cli import COMMANDS, SUMMARIES, SUMMARY_CHARS

    assert set(SUMMARIES) == set(COMMANDS)
    text = run_in_pty(["--help"])
    listing = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(listing) >= len(COMMANDS)
    for line in listing:
        assert len(line) <= 80 and not line.rstrip().endswith("..."), line
        assert line.rstrip().endswith("."), line
    for name, summary in SUMMARIES.items():
        assert len(summary) <= SUMMARY_CHARS and summary.endswith(".") and summary[0].isupper(), name
        assert f"{name}" in text and summary in text


@pytest.mark.parametrize("columns", [80, 120])
def test_peak_flops_shows_the_answer_first(columns: int) -> None:
    text = run_in_pty(["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "fp16", "--detail", "full"], columns)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= columns
    # 2 x 1.41 GHz x 108 SMs x 1024 FMA/clock/SM = 311.86944 TFLOP/s (A100 whitepaper, Table 1 footnotes)
    first = text.index("311.86944 TFLOP/s")
    assert first < text.index("Inputs")


@pytest.mark.parametrize("framework", ["hf", "megatron"])
def test_fit_gives_its_answer_first(framework: str) -> None:
    # issue 28: fit --framework hf at 80 columns gave its answer after ~135 lines of inputs and derivations
    args = ["fit", "--model", "llama2-7b", "--gpu", "h200", "--gpus", "1", "--batch", "8", "--seq-len", "4096", "--framework", framework,
            "--recompute", "full", "--tp", "1", "--pp", "1", "--dp", "1", "--detail", "full"]  # fmt: skip
    lines = run_in_pty(args).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("=>"))
    assert first < 5 and "s per iteration" in lines[first] and lines.index("Inputs") > first
    assert sum(line.startswith("=> TP 1 x PP 1 x DP 1") for line in lines) == 1  # once, not again at the end
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("extra", [[], ["--search"]], ids=["table", "search"])
def test_fit_brief_is_a_screenful_of_whole_cells(extra: list[str]) -> None:
    """The default, brief form on a real 80-column terminal (issue 28): at most 60 lines, none over
    80, the table a table of whole cells (only the assumptions, one line each, end in "…")."""
    text = run_in_pty(["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--seq-len", "8192", "--batch", "1024", *extra])
    lines = text.splitlines()
    assert len(lines) <= 60 and max(len(line) for line in lines) <= 80
    # the table's rows as rows, every cell whole: ZeRO-2 without recomputation (the table's fastest), TP 2 x PP 1 (the search's)
    rows = [line for line in lines if line.split()[:2] in (["ZeRO-2", "none"], ["2", "1"])]
    # the search's rows are records, one a row over two lines (its 2nd row's layout string, 'Et|(tt|)*15t|L', is wider
    # than a table's cell: tests/test_search_layouts.py)
    rows += [line + lines[i + 1] for i, line in enumerate(lines) if line.startswith("1. tp 2  pp 1")]
    assert rows and not any("…" in row for row in rows), text
    assert "GiB" in rows[0] and " s " in rows[0] + " "


def test_a_title_wider_than_its_table_wraps_at_the_terminal() -> None:
    """scaling's terms table is 48 columns wide under a 79-character title: rich wrapped the title at the table's
    width, "(N" on one line and "t / B)" on the next; above the table, at 80 columns, it is one line."""
    text = run_in_pty(["scaling", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "8,16,32,64", "--strategy", "zero1"])
    assert "The step's terms in GPU-seconds per sequence (N t / B): flat is perfect scaling\n" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_derivation_wraps_under_its_own_start_at_80_columns() -> None:
    """fit --detail full at 80 columns: t_step's substituted sum and t_dp's source are longer than a line; their rest
    wrapped to column 0, out of the derivation. Every line of a derivation block stays indented under its start."""
    text = run_in_pty(["fit", "--model", "llama3-8b", "--gpu", "h200", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4",
                       "--detail", "full"])  # fmt: skip
    assert max(len(line) for line in text.splitlines()) <= 80
    blocks = {block.split("\n", 1)[0]: block.split("\n")[1:] for block in text.split("\n\n")}
    for heading in ("Time per iteration", "Data-parallel communication exposed per iteration"):
        lines = blocks[heading]
        assert len(lines) >= 5, lines  # formula, substituted, value, and a source of two lines or more
        assert all(line.startswith("  ") for line in lines), lines
        sums = [line for line in lines if not line.lstrip().startswith(("t_", "=", "source:"))]
        # a continuation sits under the text of its line (after "t_step = " or "source: "), not under the symbol
        assert all(line.startswith(" " * 9) for line in sums), lines
