"""Renderers format only: the same Result as plain text, rich colour, JSON, CSV and Markdown."""

from __future__ import annotations

import io
import json

import pytest

from parcalc import peak_flops
from parcalc.derivation import Column, Result, Table
from parcalc.output import OutputFormat, render_text, use_colour
from parcalc.render.json_out import render_json


def sample() -> Result:
    derivation = peak_flops(1.41e9, 108, 512, dtype="tf32")
    table = Table("t", "A table", (Column("name", "name"), Column("bytes", "bytes", "B")), (("dp", 12_884_901_888.0),))
    return Result("peak-flops", "Sample", derivation.inputs, (derivation,), (table,), ("a verdict",), ("an assumption",))


def test_json_is_raw_base_units() -> None:
    doc = json.loads(render_json(sample()))
    assert doc["results"]["peak_flops"]["value"] == 155_934_720_000_000  # an int, not "155.9 TFLOP/s"
    assert doc["inputs"]["clock"] == {"value": 1_410_000_000, "unit": "Hz", "symbol": "f", "description": "clock rate", "source": ""}
    assert doc["tables"]["t"]["rows"] == [{"name": "dp", "bytes": 12_884_901_888}]
    assert doc["tables"]["t"]["columns"][1] == {"key": "bytes", "label": "bytes", "unit": "B"}
    assert "one FMA counts as 2 FLOP (a multiply and an add)" in doc["assumptions"]
    assert doc["assumptions"][0] == "an assumption"


def test_plain_text_has_formula_substitution_value_and_table() -> None:
    text = render_text(sample(), OutputFormat.TABLE, "full")
    assert "P = 2 × f × N_SM × FMA" in text
    assert "= 2 × 1.41 GHz × 108 × 512" in text
    assert "= 155.93472 TFLOP/s" in text
    assert "12.8849 GB" in text  # table cells are compact
    assert "=> a verdict" in text


def test_memory_columns_read_in_gib_with_the_unit_once() -> None:
    # issue 28: "[B]" headers over GB cells, beside a verdict and a capacity in GiB. A memory column's cells
    # carry their binary unit (12,884,901,888 B = 12 GiB exactly), its heading none; bytes moved stay decimal;
    # JSON and CSV keep bytes.
    columns = (Column("name", "name"), Column("memory", "memory per GPU", "B", memory=True), Column("sent", "sent", "B"),
               Column("time", "time", "s"))  # fmt: skip
    result = Result("memory", "Sample", (), (), (Table("t", "A table", columns, (("dp", 12_884_901_888.0, 12_884_901_888.0, 1.5),)),))
    for fmt in (OutputFormat.TABLE, OutputFormat.MARKDOWN, OutputFormat.LATEX):
        text = render_text(result, fmt, "full")  # the brief text form's headings carry no unit (its cells do): tests/test_brief.py
        assert "12 GiB" in text and "12.8849 GB" in text, fmt  # memory binary, traffic decimal
        assert "memory per GPU [B]" not in text and "memory per GPU (B)" not in text, fmt
        assert ("sent [B]" if fmt is OutputFormat.TABLE else "sent (B)") in text and ("time [s]" if fmt is OutputFormat.TABLE else "time (s)") in text
    assert render_text(result, OutputFormat.CSV).splitlines()[1] == "dp,12884901888,12884901888,1.5"
    assert json.loads(render_json(result))["tables"]["t"]["rows"][0]["memory"] == 12_884_901_888


def test_csv_is_the_first_table() -> None:
    """Headers are the JSON keys (issue #15: they carried units, `bytes [B]`, unlike the JSON)."""
    assert render_text(sample(), OutputFormat.CSV).splitlines() == ["name,bytes", "dp,12884901888"]


def test_markdown_math() -> None:
    text = render_text(sample(), OutputFormat.MARKDOWN)
    assert r"P_{\mathrm{peak}} = 2 \times f \times N_{\mathrm{SM}} \times \mathrm{FMA}" in text
    assert "| name | bytes (B) |" in text


def test_rich_output_is_coloured_on_a_terminal() -> None:
    from rich.console import Console

    from parcalc.render.terminal import render_rich

    buffer = io.StringIO()
    render_rich(sample(), Console(file=buffer, force_terminal=True, width=120, color_system="standard"))
    output = buffer.getvalue()
    assert "\x1b[" in output and "155.93472" in output and "TFLOP/s" in output


def test_rich_output_reads_at_80_columns() -> None:
    # issue #14: long sources folded the Inputs table into a tower of '…'-cut cells, and wrapped
    # assumptions lost their indent. Now each source sits on its own line under its input, and a
    # wrapped verdict or assumption continues under its own text.
    from dataclasses import replace

    from rich.console import Console

    from parcalc.derivation import Term
    from parcalc.render.terminal import render_rich

    long = "NVIDIA H100 Tensor Core GPU Architecture whitepaper V1.04 (2023): sec. 4, sec. 4.1, Table 1 and Table 3, sec. 4.7 " * 2
    result = replace(sample(), inputs=(Term("C", "C", "C", 85899345920.0, "B", "memory of one NVIDIA H100 SXM5 80GB", long),),
                     verdicts=("a verdict " * 20,), assumptions=("an assumption " * 20,))  # fmt: skip
    buffer = io.StringIO()
    render_rich(result, Console(file=buffer, width=80, color_system=None))
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and not any("…" in line for line in lines)
    source = [i for i, line in enumerate(lines) if "NVIDIA H100 Tensor Core" in line]
    assert source and lines[source[0]].startswith(" " * 5) and "memory of one" in " ".join(lines[source[0] - 2 : source[0]])
    verdict = next(i for i, line in enumerate(lines) if line.startswith("=> a verdict"))
    assert lines[verdict + 1].startswith("   ") and "verdict" in lines[verdict + 1]
    assumption = next(i for i, line in enumerate(lines) if line.startswith("  - an assumption"))
    assert lines[assumption + 1].startswith("    ") and "assumption" in lines[assumption + 1]


def test_a_table_wider_than_the_terminal_becomes_one_record_per_row() -> None:
    # issue #14: fit --search's 24-column top-5 table at 80 columns had "…" in every cell. A table
    # that does not fit is printed as numbered records of "label value" pairs, broken between pairs.
    from dataclasses import replace

    from rich.console import Console

    from parcalc.derivation import Column, Table
    from parcalc.render.terminal import render_rich

    columns = tuple(Column(f"c{i}", f"column {i}", "s") for i in range(12))
    wide = Table("wide", "A wide table", columns, ((*(1.5 * i for i in range(12)),), (*(2.0 + i for i in range(12)),)))
    buffer = io.StringIO()
    render_rich(replace(sample(), tables=(wide,)), Console(file=buffer, width=80, color_system=None))
    lines = buffer.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and not any("…" in line for line in lines)
    first = next(i for i, line in enumerate(lines) if line.startswith("1. "))
    assert lines[first].startswith("1. column 0 0 s  column 1 1.5 s  column 2 3 s")
    record = " ".join(line.strip() for line in lines[first : first + 3])
    assert "column 11 16.5 s" in record and "2. column 0 2 s" in " ".join(lines[first:])
    narrow = replace(wide, columns=columns[:3], rows=tuple(row[:3] for row in wide.rows))
    buffer = io.StringIO()
    render_rich(replace(sample(), tables=(narrow,)), Console(file=buffer, width=80, color_system=None))
    assert "┃ column 0 [s] ┃" in buffer.getvalue()  # a table that fits stays a table


@pytest.mark.parametrize(("tty", "env", "expected"), [
    (True, {}, True), (True, {"NO_COLOR": "1"}, False), (False, {}, False), (True, {"TERM": "dumb"}, False),
])  # fmt: skip
def test_colour_only_on_a_terminal_without_no_color(monkeypatch, tty: bool, env: dict, expected: bool) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr("sys.stdout.isatty", lambda: tty)
    assert use_colour() is expected


def test_a_wide_short_table_is_set_on_its_side_in_latex() -> None:
    # comm-volume's 17 columns shrunk to the line width came out in 3-pt type: a table of more than
    # 8 columns and at most 6 rows becomes one line per column, its rows named by their first cell
    from parcalc.derivation import Column, Table
    from parcalc.render.latex import table_context

    columns = tuple(Column(f"c{i}", f"column {i}") for i in range(10))
    wide = Table("wide", "Wide", columns, (("dp", *range(1, 10)), ("pp", *range(11, 20))))
    context = table_context(wide)
    assert context["headers"] == ["column 0", "dp", "pp"]
    assert context["rows"][0] == ["column 1", "1", "11"] and context["rows"][-1] == ["column 9", "9", "19"]
    assert len(context["rows"]) == 9 and context["align"] == "lrr"
    tall = Table("tall", "Tall", columns, tuple((f"r{k}", *range(9)) for k in range(7)))
    assert table_context(tall)["headers"][1] == "column 1"  # seven rows: left as it is


def test_latex_substitution_never_sets_two_numbers_side_by_side() -> None:
    # issue #14: comm-volume's ring time printed N beta as "4 31.5 GB/s" in LaTeX and Markdown (found
    # again in the lab-ddp write-up); a value or number beside a placeholder now gets \cdot.
    from parcalc.derivation import Derivation, Term

    n, beta, f = (Term("n", "n", "n", 4, "", "ranks"), Term("beta", "beta", r"\beta", 31.5e9, "B/s", "bandwidth"),
                  Term("F", "F", "F", 2.0, "", "flops"))  # fmt: skip
    d = Derivation("t", "t", "t", "t", "x", r"\frac{1}{$n $beta} + 3 $F + 2 \times $F + x_2 $F", (n, beta, f), 1.0, "s", "")
    filled = d.substituted_tex(lambda t: f"{t.value:g}")
    assert filled == r"\frac{1}{4 \times 3.15e+10} + 3 \times 2 + 2 \times 2 + x_2 2"
    assert d.formula_tex() == r"\frac{1}{n \beta} + 3 F + 2 \times F + x_2 F"  # symbols keep their juxtaposition


def test_latex_text_sets_powers_as_superscripts_and_keeps_double_hyphens() -> None:
    # issue #14: prose printed literal carets ("4Dˆ2 + 8Dˆ2", "X ∈ Rˆ(4096×4096)") and flag names
    # with an en dash ("–t-forward": TeX's "--" ligature)
    from parcalc.render.latex import tex_escape

    assert tex_escape("4D^2 + 2^30") == r"4D\textsuperscript{2} + 2\textsuperscript{30}"
    assert tex_escape("X ∈ R^(32×4096)") == r"X $\in$ R\textsuperscript{32$\times$4096}"
    assert tex_escape("--t-forward, a - b") == r"-{\kern0pt}-t-forward, a - b"  # a kern: LuaTeX joins "-{}-"
    assert tex_escape("x^y ^(") == r"x\textasciicircum{}y \textasciicircum{}("  # not an exponent: a caret


@pytest.mark.parametrize(
    ("text", "tex"),
    [
        # issue #14: TeX prints a straight " as a closing quote, so "7B" came out as ”7B”
        pytest.param('the "7B" model', "the ``7B'' model", id="double-pair"),
        pytest.param('"quoted" first', "``quoted'' first", id="double-at-start"),
        pytest.param('("x")', "(``x'')", id="double-in-brackets"),
        pytest.param('a 5" screen', "a 5'' screen", id="inch-mark-closes"),
        # apostrophes stay TeX's right quote; a single quote opens only where a quotation opens
        pytest.param("it's Megatron-LM's", "it's Megatron-LM's", id="apostrophes"),
        pytest.param("the '80s", "the '80s", id="elided-digits"),
        pytest.param("say 'layers' now", "say `layers' now", id="single-pair"),
        # adjacent quotes kept apart: ``` and ''' would be read as other pairs
        pytest.param("a \"'nested'\" one", "a ``{\\kern0pt}`nested'{\\kern0pt}'' one", id="nested"),
        # curly quotes typed in a worksheet are set as the same ligatures, not replaced by '?'
        pytest.param("“curly” ‘x’", "``curly'' `x'", id="curly"),
    ],
)
def test_latex_text_sets_straight_quotes_as_opening_and_closing_pairs(text: str, tex: str) -> None:
    from parcalc.render.latex import tex_escape

    assert tex_escape(text) == tex


def test_wide_derivation_lines_may_break_between_function_arguments() -> None:
    """fit's t_dp substitution, max(a, b) + max(c, d) on one line 13 pt wider than the page in a PDF: the
    comma between arguments is a break point (render/latex.inline_lines), the alignment mark is gone."""
    from parcalc.render.latex import inline_lines

    line = r"&= \max(479.815\ \text{ms} - 81.1132\ \text{ms}, 479.815\ \text{ms} / 149)"
    assert inline_lines([line]) == [r"= \max(479.815\ \text{ms} - 81.1132\ \text{ms},\allowbreak 479.815\ \text{ms} / 149)"]


def test_a_share_too_small_for_a_table_cell_says_so() -> None:
    """memory's component table: the 64 KiB of temporaries of an 82.29 GiB step (7.417e-7 of it) printed '7.417e-5 %';
    a cell under 0.001 % says '< 0.001 %' (JSON keeps the value), the rest print as before."""
    from parcalc.render.values import format_cell

    assert format_cell(65536 / (82.29 * 2**30), "fraction") == "< 0.001 %"
    assert format_cell(-1e-7, "fraction") == "> -0.001 %"
    assert format_cell(4.747e-5, "fraction") == "0.004747 %"  # 4 MiB of buffers in the same table
    assert format_cell(0.0, "fraction") == "0 %"
