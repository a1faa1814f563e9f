"""Pictures: SVG (and TikZ) drawn from results' own numbers (parcalc.render.canvas, figures,
memory_bar), the outputs that write them, and the refusals.

Expected values come from the results themselves (the JSON of the same command) or, where
stated, from hand computation; the checks are what a reader's eye checks: the right number of
bars and points with the right labels, values that map to coordinates in order and in proportion,
well-formed XML, text no smaller than 7 pt in the PDF.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from itertools import pairwise
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.core.frontier import pareto_front
from parcalc.render.canvas import (
    MIN_TEXT_PX,
    PT_PER_CM,
    TIKZ_WIDTH_CM,
    Canvas,
    Text,
    linear_ticks,
    log_ticks,
    to_svg,
    to_tikz,
)
from parcalc.render.figures import WIDTH
from parcalc.render.memory_bar import GROUP_OF

SVG = "{http://www.w3.org/2000/svg}"
GIB = 2**30
MEMORY = ["memory", "--model", "llama3-70b", "--seq-len", "8192", "--tp", "8", "--pp", "4", "--dp", "4", "--zero", "1",
          "--flash-attention", "--gpu", "h100-sxm5"]  # fmt: skip
LAYER = ["intensity", "--model", "llama3-8b", "--batch", "1", "--seq-len", "4096", "--gpu", "h100-sxm5"]
STRATEGIES = ["fit", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--seq-len", "4096"]
SEARCH = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "16", "--batch", "64", "--seq-len", "4096",
          "--flash-attention", "--search"]  # fmt: skip


def draw(runner, tmp_path: Path, args: list[str], name: str = "picture.svg") -> ET.Element:
    out = tmp_path / name
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return ET.parse(out).getroot()  # well-formed XML or ParseError


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def bars(root: ET.Element) -> list[ET.Element]:
    """Rectangles with a tooltip: the bars (legend swatches and backgrounds have none)."""
    return [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]


def tip(element: ET.Element) -> str:
    return element.find(f"{SVG}title").text or ""  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# Roofline


def test_roofline_of_a_layer_has_one_point_per_distinct_operation_on_the_roof(runner, run_json, tmp_path):
    root = draw(runner, tmp_path, LAYER)
    ops = run_json(*LAYER)["tables"]["ops"]["rows"]
    distinct = {(op["intensity"], op["attainable"]) for op in ops}
    points = [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    # 11 operations at 6 intensities: Q and Out (1365.3), K and V (682.7), the two attention matmuls (123.2),
    # the three MLP GEMMs (1792), softmax (1.5), silu (0.83): a point each, numbered "1,7", "2,3", ...
    assert len(points) == len(distinct) == 6
    # every operation is named in the legend, numbered in the table's order
    legend = [t for t in texts(root) if re.match(r"\d+  ", t)]
    assert [t.split(":")[0] for t in legend] == [f"{i}  {op['op']}" for i, op in enumerate(ops, start=1)]
    # intensity -> x and attainable -> y in order (y grows upwards: smaller pixel)
    by_x = sorted(points, key=lambda c: float(c.get("cx")))
    values = sorted(distinct)
    assert [tip(c).split(": ")[1].split(" FLOP/B")[0] for c in by_x] == [f"{i:.4g}" for i, _ in values]
    ys = [float(c.get("cy")) for c in by_x]
    attainable = [a for _, a in values]
    for (y1, a1), (y2, a2) in pairwise(zip(ys, attainable, strict=True)):
        assert (a2 > a1 and y2 < y1) or (a2 == a1 and abs(y2 - y1) < 1e-6)
    # compute-bound points sit on the flat roof: one y for all of them (attainable = peak)
    peak = {float(c.get("cy")) for c in points if c.get("fill") == "#1f5fa8"}
    assert len(peak) == 1


def test_roofline_of_a_matmul(runner, tmp_path):
    root = draw(runner, tmp_path, ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--gpu", "h100-sxm5"])
    points = [c for c in root.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert len(points) == 1
    # 2 m k n / (2 (m k + k n + m n)) = 4096 / 3 = 1365.33 FLOP/B (fp16: hand computation)
    assert "1365 FLOP/B" in tip(points[0])
    assert any(t.startswith("ridge 295.4 FLOP/B") for t in texts(root))  # 989.43 TFLOP/s / 3.35 TB/s


def test_roofline_without_a_machine_is_refused_and_writes_nothing(run_error, tmp_path):
    out = tmp_path / "roof.svg"
    line = run_error(["intensity", "--m", "64", "--k", "64", "--n", "64", "-o", str(out)])
    assert "nothing to draw" in line and "--gpu" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Memory bars


def test_memory_svg_has_a_stacked_bar_per_stage_in_proportion(runner, run_json, tmp_path):
    root = draw(runner, tmp_path, MEMORY)
    stages = run_json(*MEMORY, "--per-stage")["tables"]["stages"]["rows"]
    assert [t for t in texts(root) if t.startswith("stage ")] == [f"stage {s['stage']}" for s in stages]
    widths: dict[str, float] = {}
    for rect in bars(root):
        label = tip(rect).split(":")[0]
        widths[label] = widths.get(label, 0.0) + float(rect.get("width"))
    # bar length / total is one scale for every stage (the JSON's totals, 78.1 GB on stage 1 ...)
    scales = [widths[f"stage {s['stage']}"] / s["total"] for s in stages]
    assert max(scales) / min(scales) == pytest.approx(1.0, abs=1e-3)
    assert stages[0]["total"] > stages[-1]["total"] and widths["stage 1"] > widths["stage 4"]
    # each stage's weights segment is its weights (the JSON's column)
    weights = {tip(r).split(":")[0]: float(r.get("width")) for r in bars(root) if ": weights " in tip(r)}
    assert weights["stage 1"] / stages[0]["weights"] == pytest.approx(scales[0], rel=1e-3)
    assert any(t == "capacity 80 GiB" for t in texts(root))


def test_memory_groups_cover_every_component_the_core_has():
    from parcalc.core.layout import Layout
    from parcalc.core.memory import memory_breakdown
    from parcalc.core.training_setup import TrainingSetup
    from parcalc.presets import load_model

    breakdown = memory_breakdown(load_model("llama3-8b", ()), Layout(dp=8, zero=3), TrainingSetup(1, 4096))
    assert {name for name, _ in breakdown.worst.components()} <= set(GROUP_OF)


def test_memory_bar_in_the_terminal_fits_80_columns_in_proportion(runner):
    result = runner.invoke(app, [*MEMORY], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Memory of the fullest GPU:"))
    assert lines[at] == "Memory of the fullest GPU: 72.8 GiB of 80 GiB"  # 78,126,448,640 B / 2^30; H100 80 GiB
    bar = lines[at + 1].strip()
    assert bar.startswith("[") and bar.endswith("]") and len(bar) == 74
    cells = bar[1:-1]
    # 72 characters for 80 GiB: weights 4,541,513,728 B -> 72 x 4.2296 / 80 = 3.8 -> 4; free 7.24 GiB -> 6.5 -> 6 or 7
    assert cells.count("W") == 4
    assert cells.count(".") in (6, 7)
    assert re.fullmatch(r"W+G+O+A+R+\.+", cells)
    assert all(len(line) <= 80 for line in lines[at : at + 5])
    assert "W weights 4.23 GiB" in lines[at + 2]


def test_memory_bar_marks_the_capacity_when_it_does_not_fit(runner):
    args = ["memory", "--model", "llama3-8b", "--seq-len", "8192", "--flash-attention", "--gpu", "h100-sxm5"]
    result = runner.invoke(app, args)
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Memory of the fullest GPU:"))
    cells = lines[at + 1].strip()[1:-1]
    # the bar spans the total (160 GiB); 80 GiB falls at 72 x 80 / 160.5 = 36
    assert cells.index("|") in (35, 36) and "." not in cells
    assert any("too much" in line for line in lines[at + 2 : at + 6])


def test_strategy_bars_one_per_row_with_a_layout(runner, run_json, tmp_path):
    root = draw(runner, tmp_path, STRATEGIES)
    rows = [r for r in run_json(*STRATEGIES)["tables"]["strategies"]["rows"] if r["memory"] is not None]
    labels = [t for t in texts(root) if "," in t and not t.startswith(("What", "capacity"))]
    assert labels == [f"{r['strategy']}, {r['recompute']}" for r in rows]
    totals = {}
    for rect in bars(root):
        label = tip(rect).split(":")[0]
        totals[label] = totals.get(label, 0.0) + float(rect.get("width"))
    scale = [totals[f"{r['strategy']}, {r['recompute']}"] / r["memory"] for r in rows]
    assert max(scale) / min(scale) == pytest.approx(1.0, abs=1e-3)
    # rows that do not fit are drawn lighter, their labels grey
    faded = {t.text for t in root.iter(f"{SVG}text") if t.get("fill") == "#777777"}
    assert faded == {f"{r['strategy']}, {r['recompute']}" for r in rows if r["fits"] is False}  # typed JSON (schema_version 1)


# ---------------------------------------------------------------------------------------------
# The search


def test_pareto_front_by_hand():
    memory = [10.0, 20.0, 15.0, 30.0, 20.0, 12.0]
    time = [5.0, 2.0, 4.0, 1.0, 3.0, 6.0]
    # 12 GB at 6 s is beaten by 10 GB at 5 s; 20 GB at 3 s by 20 GB at 2 s
    assert pareto_front(memory, time) == [0, 2, 1, 3]
    assert pareto_front([], []) == []
    assert pareto_front([1.0, 1.0], [2.0, 2.0]) == [0]


def test_search_svg_plots_every_configuration_with_the_capacity(runner, run_json, tmp_path):
    root = draw(runner, tmp_path, SEARCH)
    rows = run_json(*SEARCH)["tables"]["configurations"]["rows"]
    fitting = sum(1 for r in rows if r["fits"])
    words = texts(root)
    assert f"fits ({fitting:,})" in words and f"does not fit ({len(rows) - fitting:,})" in words
    dots = [c for c in root.iter(f"{SVG}circle") if c.get("r") == "2.4"]
    assert 0 < len(dots) <= len(rows)  # configurations on the same pixel share one dot
    capacity_x = [float(p.get("points").split()[0].split(",")[0]) for p in root.iter(f"{SVG}polyline") if p.get("stroke") == "#b00020"]
    assert len(capacity_x) == 1
    blue = [float(c.get("cx")) for c in dots if c.get("fill") == "#6baed6"]
    grey = [float(c.get("cx")) for c in dots if c.get("fill") == "#cfcfcf"]
    assert max(blue) <= capacity_x[0] + 1e-6 < min(grey) + 1e-6  # fits: left of the capacity; does not: right
    best = min((r for r in rows if r["fits"]), key=lambda r: (r["t_step"], r["memory"]))
    assert any(t.startswith(f"fastest: tp {best['tp']} pp {best['pp']} dp {best['dp']},") for t in words)


def test_search_markdown_links_the_picture_and_leaves_out_the_long_table(runner, tmp_path):
    out = tmp_path / "search.md"
    result = runner.invoke(app, [*SEARCH, "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "](search-search.svg)" in text and (tmp_path / "search-search.svg").exists()
    assert "Every configuration evaluated" not in text and "The 5 fastest layouts that fit" in text
    ET.parse(tmp_path / "search-search.svg")


# ---------------------------------------------------------------------------------------------
# Outputs and refusals


def test_memory_markdown_writes_the_picture_beside_it(runner, tmp_path):
    out = tmp_path / "mem report.md"
    result = runner.invoke(app, [*MEMORY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "![Memory per GPU: Llama 3 70B" in out.read_text() and "](mem%20report-memory.svg)" in out.read_text()
    assert "by component" not in out.read_text()  # the picture's source table is not repeated
    assert len(bars(ET.parse(tmp_path / "mem report-memory.svg").getroot())) > 0


def test_a_command_without_a_picture_refuses_svg(run_error, tmp_path):
    out = tmp_path / "x.svg"
    line = run_error(["peak-flops", "--gpu", "h100-sxm5", "-o", str(out)])
    assert "draws no picture" in line
    assert not out.exists()


def test_unknown_extension_still_refused(run_error, tmp_path):
    line = run_error([*MEMORY, "-o", str(tmp_path / "mem.png")])
    assert "cannot tell the format" in line
    assert list(tmp_path.iterdir()) == []


def test_fit_svg_with_several_gpu_types_is_refused(run_error, tmp_path):
    out = tmp_path / "s.svg"
    line = run_error(["fit", "--model", "llama3-8b", "--gpus", "8", "--batch", "64", "--seq-len", "4096", "--search",
                      "--gpu", "h100-sxm5", "--gpu", "a100-sxm4-80gb", "-o", str(out)])  # fmt: skip
    assert "one GPU type" in line and not out.exists()


def test_format_json_to_an_svg_name_is_refused(run_error, tmp_path):
    """--format and -o's extension saying different things is one line, nothing written (issue 28: it
    wrote JSON into x.svg here, and bubble printed JSON to stdout beside the picture)."""
    out = tmp_path / "x.svg"
    assert "disagree" in run_error([*MEMORY, "--format", "json", "-o", str(out)])
    assert not out.exists()


def test_format_and_an_extension_that_agree_or_say_nothing(runner, tmp_path):
    for name, fmt in (("x.json", "json"), ("x.data", "json"), ("x.txt", "table")):
        out = tmp_path / name
        assert runner.invoke(app, [*MEMORY, "--format", fmt, "-o", str(out)]).exit_code == 0, name
        assert out.stat().st_size > 0


def test_tex_document_carries_the_picture_in_tikz(runner, tmp_path):
    out = tmp_path / "mem.tex"
    assert runner.invoke(app, [*MEMORY, "-o", str(out)]).exit_code == 0
    tex = out.read_text()
    assert tex.count(r"\begin{tikzpicture}") == 1 and r"\begin{figure}" in tex
    assert "stage 4" in tex and "Memory of one GPU of each stage, by component" not in tex


@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None, reason="needs TeX and poppler")
def test_bubble_timeline_pdf_has_the_timeline(runner, tmp_path):
    out = tmp_path / "bubble.pdf"
    args = ["bubble", "--stages", "4", "--micro-batches", "8", "--schedule", "zb-h1", "--timeline", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = subprocess.run(["pdftotext", "-layout", str(out), "-"], capture_output=True, text=True, check=True).stdout
    assert "GPU 4" in text and "weight gradient" in text and "idle (bubble)" in text
    # without --timeline the document is as before: no picture
    plain = tmp_path / "plain.tex"
    assert runner.invoke(app, [*args[:-3], "-o", str(plain)]).exit_code == 0
    assert "tikzpicture" not in plain.read_text()


def test_bubble_timeline_markdown_links_its_svg(runner, tmp_path):
    out = tmp_path / "b.md"
    args = ["bubble", "--stages", "4", "--micro-batches", "8", "--timeline", "-o", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    root = ET.parse(tmp_path / "b-timeline.svg").getroot()
    assert len(bars(root)) == 4 * 8 * 2  # a forward and a backward box per device and micro-batch (1F1B)
    assert "](b-timeline.svg)" in out.read_text() and "| device | op |" not in out.read_text()


# ---------------------------------------------------------------------------------------------
# The canvas


def test_svg_escapes_text_and_stays_well_formed():
    canvas = Canvas(100, 50, title='a <b> & "c"')
    canvas.text(10, 20, "x < y & z > w")
    canvas.rect(1, 2, 3, 4, "#123456", tooltip="<&>")
    root = ET.fromstring(to_svg(canvas).split("\n", 1)[1])
    assert [t.text for t in root.iter(f"{SVG}text")] == ["x < y & z > w"]
    assert root.find(f"{SVG}title").text == 'a <b> & "c"'  # type: ignore[union-attr]


def test_tikz_escapes_text_and_keeps_text_at_7pt_or_more():
    canvas = Canvas(WIDTH, 100)
    canvas.text(10, 20, r"\input{/etc/passwd} 50% $x$", size=5)  # below the minimum: raised to it
    tikz = to_tikz(canvas)
    assert r"\input" not in tikz.replace(r"\textbackslash{}input", "")
    assert r"\%" in tikz and r"\$x\$" in tikz
    size = canvas.of(Text)[0].size * TIKZ_WIDTH_CM / WIDTH * PT_PER_CM
    assert size == pytest.approx(MIN_TEXT_PX * 15 / 640 * 72.27 / 2.54) and size >= 7.0  # 7.3 pt at the drawing's scale
    assert re.search(r"\\fontsize\{8\.0\}", tikz)  # set at 8 pt: \footnotesize of a 10-pt document


@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None, reason="needs TeX and poppler")
def test_pdf_picture_text_is_as_large_as_the_footnotes(runner, tmp_path):
    """In the PDF, the picture's labels ("stage 1", "weights") are no smaller than the document's own
    footnote-size text (the Source: lines): pdftotext's word boxes, heights compared."""
    out = tmp_path / "mem.pdf"
    assert runner.invoke(app, [*MEMORY, "-o", str(out)]).exit_code == 0
    boxes = subprocess.run(["pdftotext", "-bbox", "-f", "1", "-l", "1", str(out), "-"], capture_output=True, text=True, check=True).stdout
    heights = {}
    for match in re.finditer(r'yMin="([\d.]+)" xMax="[\d.]+" yMax="([\d.]+)">([^<]+)<', boxes):
        heights.setdefault(match.group(3), float(match.group(2)) - float(match.group(1)))
    assert {"stage", "weights", "Source:"} <= set(heights)
    assert heights["stage"] >= 0.85 * heights["Source:"] and heights["weights"] >= 0.85 * heights["Source:"]


def test_ticks():
    assert linear_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert log_ticks(0.1, 10000) == [0.1, 1, 10, 100, 1000, 10000]
    assert log_ticks(20, 500) == [20, 50, 100, 200, 500]  # under three decades: 1, 2, 5 of each


def test_worksheet_markdown_reports_link_their_figures(runner, tmp_path):
    """question1 1.2 has a roofline of its three products, question2 2.2 the GPipe timeline (the
    figures the PDF draws in TikZ); the Markdown report writes them beside itself."""
    q1 = tmp_path / "q1.md"
    assert runner.invoke(app, ["report", "question1", "-o", str(q1)]).exit_code == 0
    roof = ET.parse(tmp_path / "q1-1.2-roofline.svg").getroot()
    points = [c for c in roof.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert len(points) == 3 and "](q1-1.2-roofline.svg)" in q1.read_text()
    # 2 x 4096^3 / (2 x 3 x 4096^2) = 1365.3 FLOP/B for the square product (hand computation)
    assert any(t.startswith("1  product 1: 1365 FLOP/B") for t in texts(roof))
    q2 = tmp_path / "q2.md"
    assert runner.invoke(app, ["report", "question2", "-o", str(q2)]).exit_code == 0
    timeline = ET.parse(tmp_path / "q2-2.2-timeline.svg").getroot()
    assert len(bars(timeline)) == 8 * 8 * 2  # GPipe, p = 8, m = 8: a forward and a backward box each
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q1-1.2-roofline.svg", "q1.md", "q2-2.2-timeline.svg", "q2.md"]


@pytest.mark.parametrize("args", [["peak-flops", "--gpu", "h100-sxm5", "--dtype", "tf32"], ["memory", "--model", "llama3-8b", "--seq-len", "4096"],
                                  ["intensity", "--m", "64", "--k", "64", "--n", "64", "--gpu", "h100-sxm5"]])  # fmt: skip
def test_a_run_that_draws_nothing_imports_no_drawing_code(args):
    """The pictures cost nothing to a one-liner that does not ask for one (start-up, issue #14)."""
    script = f"""
import sys
from parcalc.__main__ import main
sys.argv = ["parcalc", *{args!r}]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
sys.stderr.write("imported:" + ",".join(m for m in ("parcalc.render.canvas", "parcalc.render.figures", "xml.sax") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    assert done.stderr.strip().splitlines()[-1] == "imported:", done.stderr


def test_one_fit_configuration_draws_its_stages(runner, run_json, tmp_path):
    args = ["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--batch", "64", "--tp", "8", "--pp", "8",
            "--dp", "1", "--recompute", "selective", "--sequence-parallel"]  # fmt: skip
    root = draw(runner, tmp_path, args)
    stages = run_json(*args)["tables"]["stages"]["rows"]
    assert [t for t in texts(root) if t.startswith("stage ")] == [f"stage {s['stage']}" for s in stages]
    widths: dict[str, float] = {}
    for rect in bars(root):
        label = tip(rect).split(":")[0]
        widths[label] = widths.get(label, 0.0) + float(rect.get("width"))
    scales = [widths[f"stage {s['stage']}"] / s["memory"] for s in stages]  # fit's stage table: memory per GPU of each stage
    assert max(scales) / min(scales) == pytest.approx(1.0, abs=1e-3)


def test_a_long_title_and_long_kernel_names_wrap_and_are_never_cut():
    # The last review found figure titles cut with "..." (a long model name). Every word must reach the picture,
    # every line within the canvas (text_width is the renderer's own estimate of a string's width).
    from parcalc.render.canvas import text_width
    from parcalc.render.figures import roofline_of

    title = "Roofline of DeepSeek-V3 671B (multi-head latent attention, 256 routed experts) on H800 SXM5, one layer"
    name = "attention.core.flash_attention.backward.of.a.very.long.kernel.name"
    figure = roofline_of(title, [(name, 100.0, 1e14, False), ("mlp.up", 300.0, 5e14, True)], 989e12, 3.35e12)
    texts = figure.canvas.of(Text)
    assert not any("..." in t.text or "…" in t.text for t in texts)
    bold = [t for t in texts if t.bold]
    assert len(bold) == 2 and " ".join(t.text for t in bold) == title
    assert all(t.x + text_width(t.text, t.size) <= WIDTH for t in bold)
    assert bold[1].y - bold[0].y == 18  # a second line of title, the plot below it
    shown = " ".join(t.text.strip() for t in texts if not t.bold)
    assert f"1  {name}: 100 FLOP/B" in shown and "2  mlp.up: 300 FLOP/B" in shown
