"""The answer first, in a screenful (issue 28): the text output's brief form by default, the whole
derivation with --detail full, and the other formats unchanged."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.render.brief import FOOTER

# issue 28's case: Llama 3 8B on 64 H100s, s 8192, B 1024
FIT = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "64", "--seq-len", "8192", "--batch", "1024"]


def invoke(args: list[str], columns: int = 80) -> str:
    result = CliRunner(env={"COLUMNS": str(columns), "NO_COLOR": "1", "PARCALC_PRESETS": ""}).invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("extra", [[], ["--search"], ["--tp", "2", "--pp", "2", "--dp", "16", "--tokens", "1T", "--price", "2"]],
                         ids=["table", "search", "one-configuration"])  # fmt: skip
def test_fit_brief_fits_a_screen_at_80_columns(extra: list[str]) -> None:
    text = invoke([*FIT, *extra])
    lines = text.splitlines()
    assert len(lines) <= 60, len(lines)  # 107 (table) and 84 (search) lines before, with 25 lines of inputs first
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    assert "source:" not in text and "Inputs" not in lines
    assert lines[-1] == FOOTER


def test_fit_brief_answers_within_its_first_lines() -> None:
    lines = invoke(FIT).splitlines()
    # the fastest strategy that fits, as a one-line key term: ZeRO-2, 15.83 s per step, the step --format json gives
    step = json.loads(invoke([*FIT, "--format", "json"]))["results"]["best_strategy"]["value"]
    assert lines[3].startswith(f"  t_step = {step:.6g} s") and "ZeRO-2" in lines[3], (lines[:5], step)
    assert 15.82 < step < 15.84  # 15.8297 s on 2026-11-29 (the H100 share's GEMMs and the optimizer's launch waves)
    # the strategy table at 80 columns as a table (its brief columns), not one wrapped record per row
    header = next(line for line in lines if line.lstrip().startswith("strategy"))
    assert header.split() == ["strategy", "recompute", "tp", "pp", "dp", "memory", "per", "GPU", "fits", "step", "speedup"]


def test_fit_search_brief_shows_the_flags_that_tell_layouts_apart() -> None:
    lines = invoke([*FIT, "--search"]).splitlines()
    # one record a row: the 2nd fastest layout is PP 2 x VP 9 with the layout the search proposes (34 slots at 2 a virtual
    # stage: 'Et|(tt|)*15t|L', the loss on a stage of its own; tests/test_search_layouts.py), a string the 80 columns of
    # a table row cannot hold
    record = next(line for line in lines if line.startswith("1. tp "))
    assert record.split()[1:19:2] == ["tp", "pp", "dp", "b", "recompute", "zero", "SP", "v", "memory"]
    assert any(line.strip().endswith("layout Et|(tt|)*15t|L") for line in lines)
    assert any(line.startswith("=> to pin it") for line in lines)


def test_detail_full_is_the_whole_derivation() -> None:
    """--detail full prints what the text output printed before the brief form: every input with its
    source, every derivation written out, every column, every assumption."""
    from parcalc.render.plain import render_plain
    from parcalc.results.fit import from_flags

    full = invoke([*FIT, "--detail", "full"], columns=120)
    result = from_flags(model="llama3-8b", gpu=["h100-sxm5"], gpus="64", seq_len="8192", batch="1024")
    assert full == render_plain(result)
    assert full.splitlines()[3] == "Inputs" and "  source: the sum of the terms above (parcalc.core.timing.step)" in full
    assert "tp = 64 does not divide the attention heads (32)" in full  # the note column, left out of the brief form


@pytest.mark.parametrize("fmt", ["json", "csv", "markdown", "latex"])
def test_other_formats_do_not_change_and_refuse_detail(fmt: str) -> None:
    runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    plain = runner.invoke(app, [*FIT, "--format", fmt])
    assert plain.exit_code == 0
    refused = runner.invoke(app, [*FIT, "--format", fmt, "--detail", "full"])
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [f"Error: --detail: chooses how much the text output shows; {fmt} always holds the whole record; "
                                                   "leave --detail out"]  # fmt: skip
    if fmt == "json":  # the record keeps every input and its source
        document = json.loads(plain.stdout)
        assert len(document["inputs"]) == 21 and document["inputs"]["params"]["source"].startswith("Hugging Face meta-llama/Meta-Llama-3-8B")


def test_detail_takes_brief_or_full_in_any_case() -> None:
    runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    assert runner.invoke(app, [*FIT, "--detail", "BRIEF"]).stdout == invoke(FIT)
    wrong = runner.invoke(app, [*FIT, "--detail", "most"])
    assert wrong.exit_code == 2 and wrong.stderr.strip() == "Error: --detail: 'most' is not one of brief, full"


def test_memory_brief_keeps_the_terms_of_the_total_not_the_per_tensor_table() -> None:
    args = ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--gpu", "h100-sxm5"]
    brief, full = invoke(args), invoke([*args, "--detail", "full"])
    # Llama 3 8B, b = 1, s 8192, no parallelism: 159.7 GiB (the memory command's own total)
    assert any(line.startswith("  M_total  = 171.5 GB = 159.7 GiB ") for line in brief.splitlines())
    assert "What one layer keeps" not in brief and "What one layer keeps" in full
    assert brief.splitlines()[3].startswith("=> does not fit")


def test_presets_show_brief_shows_each_value_once_in_human_units() -> None:
    brief, full = invoke(["presets", "show", "h100-sxm5"]), invoke(["presets", "show", "h100-sxm5", "--detail", "full"])
    # the whitepaper's implied clock: 989.4 TFLOP/s / (2 x 132 SMs x 2048) = 1.83 GHz (presets/gpus/h100-sxm5.yaml)
    assert any(line.split() == ["boost_clock", "1.83", "GHz"] for line in brief.splitlines())
    assert "1,830,000,000" not in brief and "1,830,000,000" in full
    assert "Architecture whitepaper V1.04" not in brief and "Architecture whitepaper V1.04" in full  # the sources
    assert max(map(len, brief.splitlines()[3:])) <= 80


def test_rich_brief_stays_within_80_columns() -> None:
    from io import StringIO

    from rich.console import Console

    from parcalc.render.terminal import render_rich
    from parcalc.results.fit import from_flags

    result = from_flags(model="llama3-8b", gpu=["h100-sxm5"], gpus="64", seq_len="8192", batch="1024")
    buffer = StringIO()
    render_rich(result, Console(file=buffer, width=80, color_system=None), "brief")
    lines = buffer.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert len(lines) <= 60
    assert any(line.split()[:3] == ["ZeRO-2", "none", "1"] for line in lines if line.split())  # the table as a table


def test_fit_brief_choices_name_real_keys() -> None:
    """fit's key terms and brief columns name derivations and columns its forms have (a rename would
    silently drop them from the brief form)."""
    from parcalc.results.fit import from_flags
    from parcalc.results.fit_brief import COLUMNS, KEY_TERMS

    base = {"model": "llama3-8b", "gpu": ["h100-sxm5"], "gpus": "64", "seq_len": "8192", "batch": "1024"}
    forms = [from_flags(**base), from_flags(**base, search=True, tokens="1T", price=["2"]),
             from_flags(**base, tp="2", pp="2", dp="16", tokens="1T", price=["2"]),
             from_flags(**{**base, "model": "mixtral-8x7b", "gpu": ["h100-sxm5", "a100-sxm4-80gb"], "seq_len": "4096"},
                        search=True, tokens="1T", price=["2", "1"])]  # fmt: skip
    derivations = {d.key for result in forms for d in result.derivations}
    assert set(KEY_TERMS) <= derivations, set(KEY_TERMS) - derivations
    columns: dict[str, set[str]] = {}
    for result in forms:
        for table in result.tables:
            columns.setdefault(table.key, set()).update(c.key for c in table.columns)
    for key, chosen in COLUMNS.items():
        if key in columns:
            assert set(chosen) <= columns[key] | {"gpu", "cp", "ep", "etp", "days", "cost"}, (key, set(chosen) - columns[key])
    assert {"strategies", "top"} <= set(columns)


def test_the_answer_keeps_its_formula() -> None:
    # 2 x 1.41 GHz x 108 SMs x 512 TF32 FMA per clock = 155.93472 TFLOP/s (NVIDIA A100 whitepaper, Table 1 footnotes)
    lines = invoke(["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]).splitlines()
    assert lines[3] == "=> Peak TF32 FLOP/s: P = 2 × f × N_SM × FMA = 155.93472 TFLOP/s"
    assert len(lines) <= 16


def test_an_assumption_wraps_to_two_lines_and_ends_between_words() -> None:
    # the brief form's assumption lines (session 22, QA): wrapped under "  - " as a verdict is under "=> ", at most
    # ASSUMPTION_LINES (2) lines, cut between words with an ellipsis; a short one stays one line
    from parcalc.render.brief import ASSUMPTION_LINES, assumption_lines

    assert ASSUMPTION_LINES == 2
    assert assumption_lines("framework Megatron-LM (Megatron-Core)", 80) == ["  - framework Megatron-LM (Megatron-Core)"]
    text = " ".join(f"word{i}" for i in range(40))  # 5-6 characters a word: 3 lines at 40 columns
    lines = assumption_lines(text, 40)
    assert lines == ["  - word0 word1 word2 word3 word4 word5", "    word6 word7 word8 word9 word10…"]
    assert all(len(line) <= 40 for line in lines)
    # a second line one short of the width takes the ellipsis in its last column; one the wrap filled to the last
    # column loses its last word to make room for it
    short = assumption_lines("aaa " * 9 + "b" * 35 + " c" * 20, 40)
    assert short[1] == "    " + "b" * 35 + "…" and len(short[1]) == 40
    full = assumption_lines("aaa " * 9 + "b" * 17 + " " + "d" * 18 + " c" * 20, 40)
    assert full[1] == "    " + "b" * 17 + "…"
    # the gist (up to the first ": " outside brackets) fits one line: one line, as fit's "links: NVLink 4 ..." has it
    links = "links: NVLink 4 (H100 / H200, 18 links) inside a node, 8 x InfiniBand NDR (4x, 400 Gb/s) per node; rank order"
    assert assumption_lines(links, 80) == ["  - links: NVLink 4 (H100 / H200, 18 links) inside a node, 8 x InfiniBand NDR…"]
    # a ": " inside brackets is not where the gist ends: the H200's tiles line takes its second line
    tiles = "GEMMs by their tiles at 1,429.7 MHz (bf16: one SM's main loop at 5.4414 TFLOP/s at the sweep's 1,328.5 MHz): measured"
    assert assumption_lines(tiles, 80) == ["  - GEMMs by their tiles at 1,429.7 MHz (bf16: one SM's main loop at 5.4414",
                                           "    TFLOP/s at the sweep's 1,328.5 MHz): measured"]
    # one word longer than the line: cut inside it
    assert assumption_lines("x" * 200, 40) == ["  - " + "x" * 36, "    " + "x" * 35 + "…"]
