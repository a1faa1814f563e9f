"""What a reader's eye checks in a PDF, as tests (issue #14 item 4): every packaged worksheet and a
hostile one compiled, brief and full; no line overfull by more than 1 pt in TeX's log; no text font
below 7 pt and no box shrunk; page counts within the limits; Unicode and "4 × 100" reach the text.

Fonts: LuaLaTeX embeds Latin Modern by optical size (LMRoman9-Regular is 9-pt text, LMRoman6 6-pt),
so a text font below 7 pt shows in pdffonts as LMRoman5/6 (or LMMono5/6...). Math sub- and superscripts
of the footnote-size tables use Computer Modern's 6-pt math fonts as every TeX document does; they are
not text and are left out. A \\resizebox shows in the page's content stream as a `cm` scale below 1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from parcalc.cli import app

needs_tex = pytest.mark.skipif(
    (shutil.which("lualatex") is None and shutil.which("pdflatex") is None) or shutil.which("pdffonts") is None,
    reason="TeX Live or poppler missing: scripts/test-all.sh installs them (and CI always has them)",
)

# question1.pdf at most 2 pages and question2.pdf at most 4 in brief (issue #14); full: what the
# complete derivations take today with no half-empty pages (question2 was 11-12 pages with three;
# question1 grew from 6 to 8 when its GEMMs gained their predicted times, issue #18 item 4)
PAGE_LIMITS = {
    ("question1", "brief"): 3,  # issue 28: 1.2 shows F = 2mkn and Q before each I = F / Q (nine derivations, three before)
    ("question2", "brief"): 4,
    ("lab-ddp", "brief"): 6,
    ("question1", "full"): 8,
    ("question2", "full"): 11,
    ("lab-ddp", "full"): 10,
}

UNICODE_SHEET = """\
kind: worksheet
title: "Layout check: José Müller's answers, Σ and 中文"
author: "José Müller, Δημήτρης Παπαδόπουλος, 山田太郎"
course: "Ünïcödé 101 -- flags like --t-forward keep two hyphens"
intro: >-
  Each layer has $4D^2 + 8D^2 = 12D^2$ parameters; $X \\in \\mathbb{R}^{4096 \\times 4096}$; a hostile
  $\\input{/etc/passwd}$ and $x^^41$ print as text; it costs $5 and $10; 2^30 bytes.
questions:
  - id: "1"
    title: "Ring all-reduce über 4 Arbeiter (Αριθμός 中文)"
    prose: >-
      \\write18{rm -rf /} 100% & #1 under_score {braces} ~tilde. Four workers on a 100 GB/s link
      all-reduce 1 GB with a ring: how long does it take?
    method: 'The ring''s time is $2(N-1)$ rounds of $M/N$ bytes at $\\beta$ per direction.'
    calculations:
      - command: comm-volume
        label: "ring, N = 4, β = 100 GB/s"
        inputs: {collective: all-reduce, algorithm: ring, workers: 4, size: 1GB, bandwidth: 100GB/s}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Every packaged worksheet and the Unicode/hostile one, brief and full: PDF, TeX log, text."""
    from parcalc.render.pdf import compile_pdf
    from parcalc.render.report import render_report_latex
    from parcalc.worksheet import load_worksheet, solve

    root = tmp_path_factory.mktemp("layout")
    sheet = root / "unicode.yaml"
    sheet.write_text(UNICODE_SHEET, encoding="utf-8")
    out = {}
    for name in ("question1", "question2", "lab-ddp", str(sheet)):
        solved = solve(load_worksheet(name, ()), ())
        for detail in ("brief", "full"):
            key = (Path(name).stem, detail)
            pdf, log = root / f"{key[0]}-{detail}.pdf", root / f"{key[0]}-{detail}.log"
            compile_pdf(render_report_latex(solved, (), detail), pdf, log=log)
            out[key] = {"pdf": pdf, "log": log.read_text(errors="replace")}
    return out


def overfull_boxes(log: str) -> list[float]:
    """Widths (pt) of TeX's `Overfull \\hbox (12.3pt too wide)` warnings."""
    return [float(w) for w in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]


def small_text_fonts(pdf: Path) -> list[str]:
    """Embedded Latin Modern text fonts of an optical size below 7 pt."""
    listing = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout
    names = [line.split()[0].split("+")[-1] for line in listing.splitlines()[2:] if line.strip()]
    return [n for n in names if re.match(r"LM(Roman|Sans|Mono)\w*?([1-6])-", n) and not re.match(r"LM\w*?1[0-9]-", n)]


def shrink_factors(pdf: Path) -> list[float]:
    """Scale factors below 1 of `a 0 0 d e f cm` transforms in the page streams (\\resizebox, \\scalebox)."""
    data = pdf.read_bytes()
    factors = []
    for match in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            content = zlib.decompress(match.group(1))
        except zlib.error:
            continue
        for a, d in re.findall(rb"(?<![\d.])([\d.]+) 0 0 ([\d.]+) [-\d.]+ [-\d.]+ cm", content):
            scale = min(float(a), float(d))
            if 0 < scale < 0.99:
                factors.append(scale)
    return factors


def pages(pdf: Path) -> int:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"Pages:\s+(\d+)", info).group(1))


def text_of(pdf: Path) -> str:
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


SHEETS = [(name, detail) for name in ("question1", "question2", "lab-ddp", "unicode") for detail in ("brief", "full")]


@needs_tex
@pytest.mark.parametrize(("name", "detail"), SHEETS, ids=[f"{n}-{d}" for n, d in SHEETS])
def test_no_overfull_line_no_small_or_shrunk_text(built, name: str, detail: str) -> None:
    document = built[(name, detail)]
    assert [w for w in overfull_boxes(document["log"]) if w > 1.0] == []
    assert small_text_fonts(document["pdf"]) == []
    assert shrink_factors(document["pdf"]) == []


@needs_tex
@pytest.mark.parametrize(("name", "detail"), list(PAGE_LIMITS), ids=[f"{n}-{d}" for n, d in PAGE_LIMITS])
def test_page_counts_within_limits(built, name: str, detail: str) -> None:
    assert pages(built[(name, detail)]["pdf"]) <= PAGE_LIMITS[(name, detail)]


@needs_tex
def test_brief_is_shorter_and_keeps_every_answer(built) -> None:
    brief, full = text_of(built[("question2", "brief")]["pdf"]), text_of(built[("question2", "full")]["pdf"])
    # seed 004 Q2 answers, derived by hand in tests/test_comm.py
    for answer in ("12,884,901,888", "4,294,967,296", "549,755,813,888", "25,769,803,776"):
        assert answer in brief and answer in full
    assert "Assumptions" in full and "Assumptions" not in brief  # brief: the answer, not the whole run


@needs_tex
def test_unicode_math_and_products_reach_the_pdf(built) -> None:
    import shutil as _shutil

    text = text_of(built[("unicode", "full")]["pdf"])
    if not _shutil.which("lualatex"):
        pytest.skip("pdfLaTeX only: letters outside ASCII are printed as '?' (render/pdf.py ascii_only)")
    for words in ("José Müller", "Δημήτρης", "山田太郎", "über", "Αριθμός"):
        assert words in text
    # the ring's time 2 (N-1) (alpha + M / (N beta)) with N = 4, beta = 100 GB/s: the denominator
    # reads "4 × 100 GB/s", never "4100 GB/s" (collectives.py _ring_like; issue #14)
    assert "4 × 100 GB/s" in text and "4100" not in text
    assert "--t-forward" in text  # two hyphens, not an en dash
    assert "input{/etc/passwd}" in text and "$5 and $10" in text  # shown literally, never run as TeX


# ---------------------------------------------------------------------------------------------
# Without TeX: the pieces the layout rests on


def test_two_numbers_never_meet_without_times() -> None:
    # issue #14: "2 (4 - 1) 1 GB" and "4100 GB/s" for N beta; the ring's formulas of core/collectives.py
    from parcalc.derivation import Derivation, Term

    n, m = Term("n", "N", "N", 4, "", "workers"), Term("m", "M", "M", 1e9, "B", "message")
    beta = Term("beta", "β", r"\beta", 100e9, "B/s", "bandwidth")
    d = Derivation("t", "t", "t", "t", "x", r"2 ($n - 1) \frac{$m}{$n} + \frac{$m}{$n $beta} + 3 \cdot $n", (n, m, beta), 1.0, "s", "")
    filled = d.substituted_tex(lambda t: f"{t.value:g}")
    assert filled == r"2 \times (4 - 1) \times \frac{1e+09}{4} + \frac{1e+09}{4 \times 1e+11} + 3 \times 4"
    # a symbol with a digit subscript stays as it is (x_10 4: test_render keeps x_2 2); a group or power is multiplied
    e = Derivation("t", "t", "t", "t", "x", r"x_10 $n + 10^{3} $n", (n,), 1.0, "s", "")
    assert e.substituted_tex(lambda t: f"{t.value:g}") == r"x_10 4 + 10^{3} \times 4"


@pytest.mark.parametrize(
    ("prose", "tex"),
    [
        pytest.param("has $4D^2 + 8D^2 = 12D^2$ parameters", "has $4D^{2} + 8D^{2} = 12D^{2}$ parameters", id="powers"),
        pytest.param(r"$X \in \mathbb{R}^{m \times k}$", r"$X \in  \mathbb{R} ^{m \times  k}$", id="allowed-commands"),
        pytest.param(r"$\frac{a}{b}_i^2$", r"$\frac{a}{b} _{i}^{2}$", id="scripts-once-each"),
        pytest.param("costs $5 and $10", r"costs \$5 and \$10", id="currency-is-text"),
        pytest.param(r"a \$ sign", r"a \$ sign", id="escaped-dollar"),
        pytest.param(r"$\input{x}$", r"\$\textbackslash{}input\{x\}\$", id="unknown-command-is-text"),
        pytest.param("$x^^41$", r"\$x\textasciicircum{}\textsuperscript{41}\$", id="double-caret-is-text"),
        pytest.param("$x^2^3$", r"\$x\textsuperscript{2}\textsuperscript{3}\$", id="double-superscript-is-text"),
        pytest.param(r"$\frac{1}$", r"\$\textbackslash{}frac\{1\}\$", id="missing-argument-is-text"),
        pytest.param("$a & b$", r"\$a \& b\$", id="alignment-tab-is-text"),
        pytest.param("$}{$", r"\$\}\{\$", id="unbalanced-is-text"),
    ],
)
def test_inline_math_is_parsed_and_set_again_or_printed_as_text(prose: str, tex: str) -> None:
    from parcalc.render.latex import prose_tex

    assert prose_tex(prose) == tex


def test_wide_tables_wrap_then_split_never_shrink() -> None:
    from parcalc.render.latex import TABLE_LINE_PT, table_parts

    # 4 short columns: one part, l/r columns as they are
    assert table_parts(["a", "b", "c", "d"], [["x", "1", "2", "3"]], [False, True, True, True]) == [
        {"columns": [0, 1, 2, 3], "align": "lrrr"}
    ]
    # a long source column wraps in a p{} column taking the room the others leave (presets show's fields)
    long = "NVIDIA H100 Tensor Core GPU Architecture whitepaper V1.04 (2023): sec. 4 " * 3
    parts = table_parts(["field", "value", "source"], [["boost_clock", "1.83 GHz", long]], [False, True, False])
    assert len(parts) == 1 and r"\raggedright\arraybackslash}p{" in parts[0]["align"]
    width = float(parts[0]["align"].split("p{")[1].split("pt")[0])
    assert 250 < width < TABLE_LINE_PT
    # fit's strategy table, 15 numeric columns: parts of columns, each repeating the first
    headers = ["strategy", *(f"column {i}" for i in range(14))]
    rows = [["ZeRO-3 (FSDP)", *("123,456,789.12 GB" for _ in range(14))]]
    parts = table_parts(headers, rows, [False, *([True] * 14)])
    assert len(parts) > 1 and all(part["columns"][0] == 0 for part in parts)
    assert sorted(j for part in parts for j in part["columns"][1:]) == list(range(1, 15))


def test_a_wrapping_column_of_one_long_word_takes_no_share() -> None:
    """A column over TABLE_WRAP_CHARS whose longest word is the whole cell cannot wrap: it lacks nothing,
    and _share_line divided by the zero it lacked (`presets show h100-sxm5-96gb-hbm2e -o x.pdf` and
    `intensity --model ... -o x.pdf` died with ZeroDivisionError)."""
    from parcalc.render.latex import TABLE_LINE_PT, TABLE_PT_PER_CHAR, _share_line, table_parts

    # a part whose only wrapping column lacks nothing (natural = least = 117 pt) keeps it at 117 pt
    assert _share_line([0, 1], [117.0, 22.5], [117.0, 22.5], [True, False]) == {0: 117.0, 1: 22.5}

    # the field column: 'kernels.attention_backward' (26 characters, no space) is as wide as it can be;
    # the source column beside it (400 characters) wraps and takes what the line leaves
    source = "Dao 2023, FlashAttention-2 (arXiv:2307.08691), sec. 4.1 " * 7
    parts = table_parts(["field", "value", "source"], [["kernels.attention_backward", "0.33", source]], [False, True, False])
    assert len(parts) == 1
    specs = re.findall(r"p\{(\d+)pt\}", str(parts[0]["align"]))
    field, rest = float(specs[0]), float(specs[1])
    assert field == pytest.approx(26 * TABLE_PT_PER_CHAR, abs=0.5)  # 117 pt: its natural width, not more
    # the source column gets the rest of the 460 pt line: 460 - 3 x 12 pt padding - 117 - 5 x 4.5 (the
    # value column, as wide as its header 'value') = 284.5 pt, printed to the point
    assert rest == pytest.approx(TABLE_LINE_PT - 3 * 12 - 26 * TABLE_PT_PER_CHAR - 5 * TABLE_PT_PER_CHAR, abs=1)


@pytest.mark.parametrize("args", [
    ["presets", "show", "h100-sxm5-96gb-hbm2e"],
    ["intensity", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--seq-len", "8192", "--flash-attention", "--kernels", "eager"],
])  # fmt: skip
def test_tables_of_long_words_write_tex(runner, tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "x.tex"
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert r"\begin{document}" in out.read_text()


def test_greek_letters_and_operator_names_count_in_a_display_line() -> None:
    r"""fit's t_tp with a checkpointed MLP's TP re-gather (--recompute-modules mlp, DeepSeek-V3 TP 2 x PP 8)
    was estimated at 76 characters (\max and \mu\text{s} dropped as commands) and set in align*: it ran
    9.99 pt into the margin. Counted now: 76 + 2 x 3 (max) + 3 x 2 (us, read before as one command) = 88."""
    from parcalc.render.latex import DISPLAY_LINE_CHARS, display_chars

    line = (r"&= 128 \times (7.1842\ \text{ms} + 9 \times (\max(0, 99.7805\ \mu\text{s} - 106.823\ \mu\text{s}) + "
            r"\max(0, 99.7805\ \mu\text{s} - 1.28188\ \text{ms})))")  # fmt: skip
    assert display_chars(line) == 88 > DISPLAY_LINE_CHARS
    assert display_chars(r"\max(0, \mu\text{s})") == len("max(0, gs)")


def test_a_table_on_its_side_numbers_rows_whose_first_cells_repeat() -> None:
    # fit --search's top 5 set on its side came out headed "tp | 4 4 8 8": the rows are numbered
    # instead, and the first column becomes a line like the others
    from parcalc.derivation import Column, Table
    from parcalc.render.latex import table_context

    columns = tuple(Column(f"c{i}", f"column {i}") for i in range(10))
    top = Table("top", "Top", columns, ((4, *range(1, 10)), (4, *range(11, 20)), (8, *range(21, 30))))
    context = table_context(top)
    assert context["headers"] == ["", "#1", "#2", "#3"]
    assert context["rows"][0] == ["column 0", "4", "4", "8"] and len(context["rows"]) == 10


def page_fills(pdf: Path) -> list[float]:
    """Per page, how far down its body text reaches: the lowest word's bottom over the page number's
    (pdftotext -bbox; the page number is the lowest word of every page, the body ends above it)."""
    html = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    fills = []
    for page in re.findall(r"<page [^>]*>(.*?)</page>", html, re.S):
        bottoms = [float(y) for y in re.findall(r'yMax="([\d.]+)">[^<]*</word>', page)]
        footer = max(bottoms)
        body = [y for y in bottoms if y < footer - 12]  # 12 pt: more than a line above the page number
        fills.append(max(body, default=0.0) / footer)
    return fills


@needs_tex
@pytest.mark.parametrize(("name", "detail"), SHEETS, ids=[f"{n}-{d}" for n, d in SHEETS])
def test_no_page_but_the_last_is_half_empty(built, name: str, detail: str) -> None:
    # issue #14: question2.pdf in full had a page two-thirds empty before the timeline figure (a float
    # placed [h] that did not fit); every page but the last reaches at least half way down (today
    # 0.70 or more: lab-ddp's full write-up, page 9)
    fills = page_fills(built[(name, detail)]["pdf"])
    assert all(fill >= 0.5 for fill in fills[:-1]), [round(f, 2) for f in fills]


@needs_tex
def test_a_table_heading_never_ends_a_page(runner, tmp_path: Path) -> None:
    # The review found "... (part 2 of 2)" alone at the foot of page 1 of this document, its table on page 2
    # (a \nopagebreak does not hold before a longtable); templates/preamble.tex.j2 \keepspace moves the heading.
    out = tmp_path / "x.pdf"
    result = runner.invoke(app, ["presets", "show", "h100-sxm5-96gb-hbm2e", "-o", str(out)])
    assert result.exit_code == 0, result.output
    for page in range(1, pages(out) + 1):
        text = subprocess.run(["pdftotext", "-f", str(page), "-l", str(page), str(out), "-"], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        body = [line for line in text.splitlines() if line.strip() and not line.strip().isdigit()]  # the page number apart
        assert not re.search(r"\(part \d+ of \d+\)\s*$", body[-1]), f"page {page} ends with a table heading: {body[-1]!r}"


# fit's own reports (not worksheets): an H200 run under the hf profile, pinned (its kernel derivations, t_host's formula in
# prose and math) and searched (the assumptions' source paths). pdfLaTeX is the engine of a user's --template and of a
# machine without LuaLaTeX: it hyphenates only a path's first word, so "(parcalc.core.timing.compute)" ran 13 pt into the
# margin four times, and transformers' / torchtitan's paths 10 pt; t_host's formula, its words set as math italics, 64 pt
# under both engines (and its Σ stopped pdfLaTeX: "Missing $ inserted").
_FIT_H200_HF = ["fit", "--model", "llama3.2-1b", "--gpu", "h200", "--gpus", "1", "--framework", "hf", "--seq-len", "4096",
                "--micro-batch", "4", "--batch", "4"]  # fmt: skip
_FIT_REPORTS = {"pinned": [*_FIT_H200_HF, "--tp", "1", "--pp", "1", "--dp", "1"], "search": [*_FIT_H200_HF, "--search"]}


@needs_tex
@pytest.mark.parametrize("lua", [True, False], ids=["lualatex", "pdflatex"])
@pytest.mark.parametrize("report", list(_FIT_REPORTS))
def test_fits_pdf_has_no_overfull_line(runner, tmp_path: Path, report: str, lua: bool) -> None:
    from parcalc.render.pdf import compile_pdf, tex_engine

    engine = tex_engine(lua)
    if engine is None or (lua and "-lualatex" not in engine and engine[0] != "lualatex"):
        pytest.skip("this TeX engine is not installed")
    tex = tmp_path / "fit.tex"
    result = runner.invoke(app, [*_FIT_REPORTS[report], "-o", str(tex)])
    assert result.exit_code == 0, result.output
    pdf, log = tmp_path / "fit.pdf", tmp_path / "fit.log"
    compile_pdf(tex.read_text(), pdf, log=log, lua_allowed=lua)
    assert overfull_boxes(log.read_text(errors="replace")) == []
    if report == "pinned":  # t_host's words upright, with their spaces, not a product of italic letters
        assert "over the segments between synchronisations of" in text_of(pdf)


def test_a_formulas_prose_is_set_as_text() -> None:
    """t_host's formula (parcalc.core.timing.terms.HOST) is words and math: the words upright in \\text with the spaces
    around them as math's control spaces (glue a line break discards), Σ and ≥ as \\Sigma and \\geq (pdfLaTeX stopped on
    the letters), a line break allowed after each comma before a run of words; symbols, subscripts and placeholders stay math."""
    from parcalc.core.timing.terms import DP, HOST, TP, formula_latex

    assert formula_latex(HOST.formula).startswith(
        r"\Sigma \ \text{over the segments between synchronisations of}\ \max(\Sigma H, \max_j(\Sigma _{i<j} H_i + "
        r"\Sigma _{i\geq j} G_i)) - \Sigma G\ \text{over their phases}\ (\text{forward},\allowbreak\ \text{backward}) \times  $m,"
        r"\allowbreak\ \text{the optimizer's Python},\allowbreak\ \text{its launches}; H = $n_f \times  $c_f,"
    )
    assert formula_latex(TP.formula) == r"$m \times  \max(0, $C_tp + $L_s \times  (\text{SP re-gathers}) - $H_tp)"
    assert formula_latex(DP.formula).endswith(r"\ (\text{parcalc.core.timing.step.dp\_exposed})")


@pytest.mark.parametrize(
    ("text", "tex"),
    [
        ("(parcalc.core.timing.compute)", r"(parcalc.\allowbreak{}core.\allowbreak{}timing.\allowbreak{}compute)"),
        ("models/llama/modeling_llama.py", r"models/\allowbreak{}llama/\allowbreak{}modeling\_\allowbreak{}llama.py"),
        ("1.5 GB/s, e.g. 400 tokens/s", "1.5 GB/s, e.g. 400 tokens/s"),  # a number, an abbreviation, units: no break
    ],
)
def test_a_line_may_break_inside_a_module_or_file_path(text: str, tex: str) -> None:
    """pdfTeX hyphenates only a path's first word (fit's PDF: 13 pt over the margin): render/tex_text._PATH_BREAK."""
    from parcalc.render.tex_text import tex_escape

    assert tex_escape(text) == tex
