"""The PDF items of issue 28: a split table repeats its whole row key, no raw identifiers such as
t_pb in headings, the answers column ragged-right, no source note split across pages, no widowed
"Assumptions" heading, the search plot's label clear of the points, and question 1.2's brief form
with the F = 2mkn and Q derivations the homework asks for. TeX-free checks of the LaTeX and the
picture; tests/test_pdf_layout.py compiles the documents."""

from __future__ import annotations

from parcalc.render.latex import heading_tex, table_context, table_parts


def test_a_split_table_repeats_the_columns_that_tell_its_rows_apart() -> None:
    # fit's strategy table: three "single GPU" rows, none / selective / full recomputation; part 2 repeated only
    # "strategy", so they could not be told apart. Every part now leads with strategy and recompute.
    headers = ["strategy", "recompute", *(f"column {i}" for i in range(13))]
    rows = [[name, recompute, *("123,456,789.12 GB" for _ in range(13))]
            for name in ("single GPU", "DP", "ZeRO-1") for recompute in ("none", "selective", "full")]  # fmt: skip
    parts = table_parts(headers, rows, [False, False, *([True] * 13)])
    assert len(parts) > 1 and all(part["columns"][:2] == [0, 1] for part in parts)
    assert sorted(j for part in parts for j in part["columns"][2:]) == list(range(2, 15))


def test_rows_without_a_narrow_key_are_numbered_in_every_part() -> None:
    from parcalc.derivation import Column, Table

    # comm-volume's collectives: strategy, group, phase and what together tell a row apart, wider than the share
    # of the line a repeated key may take: each part leads with the row's number
    words = "activations (sequence-parallel, re-gathered for the weight gradient)"
    columns = (Column("strategy", "strategy"), Column("purpose", "what"), *(Column(f"c{i}", f"column {i}", "B") for i in range(10)))
    rows = tuple(("tp+sp", f"{words} {i % 2}", *(1.5e9 + i for _ in range(10))) for i in range(8))  # 8 rows: not set on its side
    context = table_context(Table("collectives", "Collectives", columns, rows))
    assert len(context["parts"]) > 1
    for part in context["parts"]:
        assert part["headers"][0] == "#" and [row[0] for row in part["rows"]] == [str(i) for i in range(1, 9)]


def test_headings_set_symbols_as_math() -> None:
    from parcalc.results.bubble import from_flags

    # Narayanan et al. 2021's t_pb and t_id, named in the bubble's labels
    result = from_flags(pp="4", micro_batches="8")
    headings = [heading_tex(d.label, result.derivations) for d in result.derivations]
    assert r"Bubble time per iteration ($t_{\mathrm{pb}}$, idle time of each device)" in headings
    assert not any(r"t\_" in h for h in headings)
    assert heading_tex("Speedup S of 50% & more", result.derivations) == r"Speedup S of 50\% \& more"  # prose escaped as before


def test_question_1_2_brief_shows_f_and_q_before_each_intensity() -> None:
    from parcalc.render.report import brief_context
    from parcalc.worksheet import load_worksheet, solve

    solved = solve(load_worksheet("question1", ()), ())
    brief = brief_context(solved.questions[1])
    labels = [str(d["label"]) for d in brief["derivations"]]
    # per GEMM: F = 2mkn, Q = 2(mk + kn + mn), then I = F / Q (presets/worksheets/question1.yaml, three calculations)
    assert len(labels) == 9
    for i in range(3):
        assert [label.split(": ", 1)[1] for label in labels[3 * i : 3 * i + 3]] == [
            "FLOPs of Y = XW", "Bytes moved (X and W read, Y written)", "Arithmetic intensity"]  # fmt: skip
    # 2 x 4096^3 = 137,438,953,472 FLOP and 2 B x 3 x 4096^2 = 100,663,296 B: the homework's F and Q for GEMM (1)
    assert brief["derivations"][0]["steps"][0] == r"F &= 2 \times m \times k \times n"
    assert brief["derivations"][0]["steps"][2].startswith(r"&= 137{,}438{,}953{,}472\ \text{FLOP}")
    assert brief["derivations"][1]["steps"][2].startswith(r"&= 100{,}663{,}296\ \text{B}")
    # m, k, n and the bytes per element are the inputs; F and Q, shown derived, are not listed again as inputs
    symbols = {str(row["symbol"]) for row in brief["inputs"]}
    assert {"$m$", "$k$", "$n$", "$s$"} <= symbols and "$F$" not in symbols and "$Q$" not in symbols


def test_templates_keep_notes_and_assumptions_whole_and_answers_ragged() -> None:
    from parcalc.resources import data_dir

    templates = data_dir("templates")
    notes = (templates / "partials" / "notes.tex.j2").read_text()
    result = (templates / "partials" / "result.tex.j2").read_text()
    report = (templates / "report.tex.j2").read_text()
    assert r"\interlinepenalty=10000" in notes
    assert result.index(r"\keepspace{4\baselineskip}") < result.index(r"\paragraph{Assumptions}")
    summary = report[report.index("Summary of answers") :]
    assert summary.count(r"\raggedright\arraybackslash}p{") == 2


def test_the_search_plots_label_covers_no_dot() -> None:
    from parcalc.render.canvas import Circle, Text, text_width
    from parcalc.render.figures import the_figure
    from parcalc.results.fit import from_flags

    # issue 28's case: Llama 3 8B on 64 H100s, s 8192, B 1024; the label sat on the grey dots below the capacity line
    result = from_flags(model="llama3-8b", gpu=["h100-sxm5"], gpus="64", seq_len="8192", batch="1024", search=True, pictures=True)
    canvas = the_figure(result).canvas
    (label,) = [t for t in canvas.of(Text) if t.text.startswith("fastest: tp 2 pp 1 dp 32")]
    x0, x1, y0, y1 = label.x - 3, label.x + text_width(label.text, label.size) + 3, label.y - label.size - 3, label.y + 4
    dots = [c for c in canvas.of(Circle) if c.radius < 3]
    assert len(dots) > 1000
    assert not [c for c in dots if x0 <= c.x <= x1 and y0 <= c.y <= y1]
