"""Reports: worksheets solved into real PDFs (TeX Live), Markdown, LaTeX snapshots, hostile text."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.render.latex import tex_escape

SNAPSHOTS = Path(__file__).parent / "snapshots"
needs_tex = pytest.mark.skipif(
    shutil.which("pdflatex") is None and not os.environ.get("CI"),
    reason="TeX Live missing: scripts/test-all.sh installs it (and CI always has it)",
)


def pdf_text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def assert_pages_not_blank(pdf: Path, tmp_path: Path) -> int:
    """Render every page to PNG and check each has ink: a page of one colour is a failure."""
    prefix = tmp_path / "page"
    subprocess.run(["pdftoppm", "-r", "30", "-gray", str(pdf), str(prefix)], check=True)
    pages = sorted(tmp_path.glob("page*.pgm"))
    assert pages
    for page in pages:
        data = page.read_bytes()
        # binary PGM: header "P5\n<w> <h>\n255\n" then one byte per pixel
        header_end = data.index(b"255\n") + 4
        pixels = data[header_end:]
        dark = sum(1 for value in pixels if value < 128)
        assert dark > len(pixels) * 0.002, f"{page.name} looks blank"
    return len(pages)


@needs_tex
def test_question1_pdf_has_every_answer(runner, tmp_path: Path) -> None:
    target = tmp_path / "question1.pdf"
    result = runner.invoke(app, ["report", "question1", "-o", str(target)])
    assert result.exit_code == 0, result.output
    text = pdf_text(target)
    # Seed 004 q1.1: 2 x 1.41e9 x 108 x 512 = 155.93472e12 FLOP/s (hand derivation in test_peak_flops.py)
    assert "155.93 TFLOP/s" in text
    # q1.2: 4096/3 = 1365.33, 1,073,741,824 / 34,078,720 = 31.51, 8,388,608 / 526,336 = 15.94 (test_intensity.py)
    for answer in ("1365.33", "31.51", "15.94"):
        assert answer in text
    assert "Summary of answers" in text and "Roofline" in text
    assert assert_pages_not_blank(target, tmp_path) >= 2


@needs_tex
def test_question2_pdf_has_every_answer(runner, tmp_path: Path) -> None:
    target = tmp_path / "question2.pdf"
    result = runner.invoke(app, ["report", "question2", "-o", str(target)])
    assert result.exit_code == 0, result.output
    text = pdf_text(target)
    # Seed 004 q2, derived by hand in tests/test_comm.py:
    # 2.1 DP: 6,442,450,944 params x 2 B = 12,884,901,888 B all-reduced;
    # 2.2 GPipe: B L D x 2 B = 128 x 4096 x 4096 x 2 = 4,294,967,296 B from stage i to i+1, same back;
    # 2.3 TP=8: 4 all-reduces x 32 layers x 4,294,967,296 B = 549,755,813,888 B;
    # 2.4 FSDP: 2 x 12,884,901,888 = 25,769,803,776 B all-gathered, 12,884,901,888 B reduce-scattered.
    for answer in ("12,884,901,888", "4,294,967,296", "549,755,813,888", "25,769,803,776"):
        assert answer in text
    assert "i to i+1" in text and "gradient bytes back" in text  # the direction, as asked
    assert assert_pages_not_blank(target, tmp_path) >= 3


def test_question2_markdown_answers(runner) -> None:
    result = runner.invoke(app, ["report", "question2"])
    assert result.exit_code == 0, result.output
    summary = result.stdout.split("## Summary of answers", 1)[1]
    for answer in ("12,884,901,888 bytes", "4,294,967,296 bytes", "549,755,813,888 bytes", "25,769,803,776 bytes"):
        assert answer in summary


def test_question2_answers_only_what_it_asks(runner) -> None:
    # issue #14: Answer 2.2 added a bubble share for an assumed m = 8 micro-batches; question 2.2 asks
    # for the bytes between stages i and i+1 and their direction only. The bubble run (`answers: []`)
    # stays as the timeline's data, its derivations labelled as an aside in the full write-up.
    result = runner.invoke(app, ["report", "question2", "--format", "json"])
    assert result.exit_code == 0, result.output
    q22 = {q["id"]: q for q in json.loads(result.stdout)["questions"]}["2.2"]
    assert [a["key"] for a in q22["answers"]] == ["pp_p2p_per_boundary"]
    assert [r["command"] for r in q22["results"]] == ["comm-volume", "bubble"]
    markdown = runner.invoke(app, ["report", "question2"]).stdout
    answer = markdown.split("> **Answer 2.2.**", 1)[1].split("##", 1)[0]
    assert "4,294,967,296 bytes" in answer and "bubble" not in answer.lower()
    assert "*Aside, not asked: Pipeline bubble of GPipe: p = 8 stages, m = 8 micro-batches*" in markdown
    assert "bubble" not in markdown.split("## Summary of answers", 1)[1].lower()


def test_explicit_empty_answers_make_an_aside(tmp_path: Path) -> None:
    # `answers: []` given: no answer at all; `answers` absent: every result is an answer (as before)
    from parcalc.worksheet import load_worksheet, solve

    sheet = tmp_path / "aside.yaml"
    sheet.write_text("kind: worksheet\ntitle: t\nquestions:\n  - id: '1'\n    title: t\n    prose: p\n"
                     "    calculations:\n      - command: bubble\n        inputs: {pp: 4, micro-batches: 16}\n"
                     "        answers: []\n      - command: bubble\n        inputs: {pp: 4, micro-batches: 16}\n")
    solved = solve(load_worksheet(str(sheet), ()), ())
    question = solved.questions[0]
    assert [c.aside for c in question.question.calculations] == [True, False]
    assert {a.calculation for a in question.answers} == {2}
    assert len(question.answers) == len(question.results[1].derivations)


def test_question1_markdown_has_every_answer(runner) -> None:
    result = runner.invoke(app, ["report", "question1"])
    assert result.exit_code == 0, result.output
    for answer in ("155.93 TFLOP/s", "1365.33", "31.51", "15.94", "$$", "| Question | Quantity | Answer |"):
        assert answer in result.stdout


def test_question1_json_answers(runner) -> None:
    result = runner.invoke(app, ["report", "question1", "--format", "json"])
    assert result.exit_code == 0, result.output
    questions = {q["id"]: q for q in json.loads(result.stdout)["questions"]}
    assert questions["1.1"]["answers"][0]["key"] == "peak_flops"
    assert questions["1.1"]["answers"][0]["value"] == 155_934_720_000_000
    assert len(questions["1.2"]["results"]) == 3


def seed000_answers(runner) -> dict[str, list[dict]]:
    result = runner.invoke(app, ["report", "seed000", "--format", "json"])
    assert result.exit_code == 0, result.output
    return {q["id"]: q["answers"] for q in json.loads(result.stdout)["questions"]}


def test_seed000_answers(runner) -> None:
    # Seed 000 on the assumed setup (presets/models/seed000-lab.yaml: 8 layers of D = 4096, 32 heads, 4D MLP,
    # no embeddings; 2 x A100 80GB, B = 8 of 2,048 tokens, b = 1, mixed bf16 + AdamW with fp32 gradients).
    answers = seed000_answers(runner)
    by_key = {q: {a["key"]: a for a in reversed(rows)} for q, rows in answers.items()}  # the first of a key
    # (a): the fastest and the slowest strategy, each a speedup over the single GPU (S = t_1 / t_N)
    assert by_key["(a)"]["best_strategy"]["label"] == "Fastest strategy that fits: ZeRO-1 on 2 GPU(s)"
    # (FlashAttention, the default: 1.9978 with the s x s scores materialised, --no-flash-attention)
    assert by_key["(a)"]["speedup"]["value"] == pytest.approx(1.9974, abs=1e-4)
    assert by_key["(a)"]["lowest_speedup"]["label"].startswith("Lowest speedup: PP + full recomputation")
    # (b): on one GPU, recomputation is a slowdown (S < 1) that holds more layers; two GPUs hold far more (a)
    assert by_key["(b)"]["lowest_speedup"]["value"] < 1
    one = by_key["(b)"]["max_layers"]
    assert one["label"].endswith("single GPU + full recomputation on 1 GPU(s)")
    assert one["value"] < by_key["B-4 (e)"]["max_layers"]["value"]
    # (c) on the ideal network: ZeRO-1 halves the compute and the (sharded) optimizer step, so S = 2 exactly;
    # PP on 2 GPUs is 2 / (1 + 1/8) = 1.78 up to the optimizer step, which each stage does half of
    assert by_key["(c)"]["speedup"]["value"] == 2.0
    assert by_key["(c)"]["lowest_speedup"]["value"] == pytest.approx(2 / (1 + 1 / 8), rel=5e-3)
    knee = next(a for a in answers["(c)"] if a["key"] == "knee")
    assert knee["value"] == 4  # PP on 1, 2, 4, 8 GPUs with m = 8: 2/(1 + 1/8) / 2 = 89 %, 4/(1 + 3/8) / 4 = 73 % < 80 %
    # (g) TP 2 + full recomputation: 8 x 12 x 4096^2 / 2 = 805,306,368 parameters per GPU x (2 + 4 + 12) bytes
    assert by_key["(g)"]["model_states"]["value"] == 8 * 12 * 4096**2 // 2 * 18 == 14_495_514_624
    # B-4 (e): the deepest model on 2 GPUs is tensor parallelism with full recomputation (the lab's "TP + AR")
    deepest = by_key["B-4 (e)"]["max_layers"]
    assert "TP" in deepest["label"] and "full recomputation" in deepest["label"] and deepest["value"] == 45


@needs_tex
def test_seed000_pdf(runner, tmp_path: Path) -> None:
    target = tmp_path / "seed000.pdf"
    result = runner.invoke(app, ["report", "seed000", "-o", str(target)])
    assert result.exit_code == 0, result.output
    text = pdf_text(target)
    assert "Scaling curve from the step-time model" in text and "Summary of answers" in text
    assert "14,495,514,624" in text and "45 layers with TP" in text
    # every page has some ink (not assert_pages_not_blank's 0.2 %: fit's inputs table is one unbreakable
    # tabular of most of a page, so a question whose method ends a page leaves that page nearly empty)
    subprocess.run(["pdftoppm", "-r", "30", "-gray", str(target), str(tmp_path / "page")], check=True)
    pages = sorted(tmp_path.glob("page*.pgm"))
    assert len(pages) >= 5
    for page in pages:
        data = page.read_bytes()
        assert any(value < 128 for value in data[data.index(b"255\n") + 4:]), f"{page.name} is blank"


def test_seed000_markdown(runner) -> None:
    result = runner.invoke(app, ["report", "seed000"])
    assert result.exit_code == 0, result.output
    summary = result.stdout.split("## Summary of answers", 1)[1]
    assert "Fastest strategy that fits: ZeRO-1 on 2 GPU(s)" in summary and "Knee of the curve" in summary


@pytest.mark.parametrize("worksheet", ["question1", "question2", "seed000"])
def test_homework_tex_snapshot(runner, tmp_path: Path, worksheet: str) -> None:
    target = tmp_path / f"{worksheet}.tex"
    result = runner.invoke(app, ["report", worksheet, "-o", str(target)])
    assert result.exit_code == 0, result.output
    snapshot = SNAPSHOTS / f"{worksheet}.tex"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(target.read_text())
    assert target.read_text() == snapshot.read_text(), "templates changed: review, then UPDATE_SNAPSHOTS=1"


HOSTILE = r"\input{/etc/passwd} \write18{rm -rf /} $x$ 100% & #1 under_score {braces} ~tilde ^caret back\slash"


def test_escape_is_per_character() -> None:
    assert tex_escape(r"\input{x}") == r"\textbackslash{}input\{x\}"
    assert tex_escape("50% & $5 #1 a_b ~ ^") == r"50\% \& \$5 \#1 a\_b \textasciitilde{} \textasciicircum{}"
    # an underscore may end a line inside long identifiers and paths (\allowbreak after it), not inside a
    # symbol such as t_1 or r_SM, which broke as "t_" / "1" in prose (session 12's PDF check)
    assert tex_escape("multi_latent_attention.py") == r"multi\_\allowbreak{}latent\_\allowbreak{}attention.py"
    assert tex_escape("t_1 and r_SM and k_opt") == r"t\_1 and r\_SM and k\_opt"
    assert tex_escape("hwLat_NCCL") == r"hwLat\_\allowbreak{}NCCL"
    # letters and symbols of any script pass (LuaLaTeX sets them; render/pdf.py makes them "?" for pdfLaTeX);
    # controls, bidirectional overrides, zero-width and private-use characters do not; other spaces are spaces
    assert tex_escape("naïve ☃ José Müller αβ 中文") == "naïve ☃ José Müller αβ 中文"
    assert tex_escape("a\u202eb\u200bc\ue000d\x07e\u2003f") == "a?b?c?d?e f"


def hostile_worksheet(tmp_path: Path) -> Path:
    sheet = tmp_path / "hostile.yaml"
    sheet.write_text(
        "kind: worksheet\n"
        f"title: {json.dumps('Title ' + HOSTILE)}\n"
        f"author: {json.dumps(HOSTILE)}\n"
        "questions:\n"
        "  - id: \"1\"\n"
        f"    title: {json.dumps(HOSTILE)}\n"
        f"    prose: {json.dumps(HOSTILE)}\n"
        f"    method: {json.dumps(HOSTILE)}\n"
        "    calculations:\n"
        "      - command: peak-flops\n"
        f"        label: {json.dumps(HOSTILE)}\n"
        "        inputs: {clock: 1.41GHz, sms: 108, fma-per-clock: 512}\n"
    )
    return sheet


def test_hostile_strings_are_escaped_in_tex(runner, tmp_path: Path) -> None:
    target = tmp_path / "hostile.tex"
    result = runner.invoke(app, ["report", str(hostile_worksheet(tmp_path)), "-o", str(target)])
    assert result.exit_code == 0, result.output
    tex = target.read_text()
    assert r"\input{/etc/passwd}" not in tex and r"\write18" not in tex
    assert r"\textbackslash{}input\{/etc/\allowbreak{}passwd\}" in tex  # a line may break after a path's slash (tex_text._PATH_BREAK)
    assert r"\textbackslash{}write18\{rm -rf /\}" in tex


@needs_tex
def test_hostile_strings_compile(runner, tmp_path: Path) -> None:
    target = tmp_path / "hostile.pdf"
    result = runner.invoke(app, ["report", str(hostile_worksheet(tmp_path)), "-o", str(target)])
    assert result.exit_code == 0, result.output
    text = pdf_text(target)
    assert "input{/etc/passwd}" in text  # shown literally, never executed
    assert "155.93" in text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(("command: peak-flops", "command: peak-flop"), "question 1, calculation 1: key 'command': unknown command 'peak-flop' (did you mean 'peak-flops'?)", id="unknown-command"),
        pytest.param(("sms: 108", "smz: 108"), "question 1, calculation 1 (peak-flops): inputs: peak-flops has no option '--smz' (did you mean 'sms'?)", id="unknown-flag"),
        pytest.param(("sms: 108", "sms: -4"), "question 1, calculation 1 (peak-flops): --sms: '-4' must not be negative", id="bad-value"),
        pytest.param(("    prose:", "    prosa:"), "question 1: unknown key 'prosa' (did you mean 'prose'?)", id="unknown-key"),
        pytest.param(("kind: worksheet", "kind: gpu"), "key 'kind' must be 'worksheet'", id="wrong-kind"),
    ],
)
def test_worksheet_errors_name_file_question_and_key(run_error, tmp_path: Path, edit, message) -> None:
    sheet = tmp_path / "w.yaml"
    sheet.write_text(
        "kind: worksheet\ntitle: T\nquestions:\n  - id: \"1\"\n    title: Q\n    prose: P\n    calculations:\n"
        "      - command: peak-flops\n        inputs: {clock: 1.41GHz, sms: 108, fma-per-clock: 512}\n"
        .replace(*edit)
    )  # fmt: skip
    line = run_error(["report", str(sheet), "-o", str(tmp_path / "w.pdf")])
    assert str(sheet) in line and message in line
    assert not (tmp_path / "w.pdf").exists()


def test_unknown_answer_key_is_named(run_error, tmp_path: Path) -> None:
    sheet = tmp_path / "w.yaml"
    sheet.write_text(
        "kind: worksheet\ntitle: T\nquestions:\n  - id: \"2\"\n    title: Q\n    prose: P\n    calculations:\n"
        "      - command: peak-flops\n        inputs: {clock: 1.41GHz, sms: 108, fma-per-clock: 512}\n"
        "        answers: [peak_flop]\n"
    )
    assert "no result named 'peak_flop' (did you mean 'peak_flops'?)" in run_error(["report", str(sheet)])


def test_report_list_and_bad_output(runner, run_error, tmp_path: Path) -> None:
    listing = runner.invoke(app, ["report", "--list"])
    assert listing.exit_code == 0 and "question1" in listing.stdout
    assert "use .pdf, .tex, .md or .json" in run_error(["report", "question1", "-o", str(tmp_path / "x.docx")])
    assert "unknown worksheet 'question9'" in run_error(["report", "question9"])


def test_missing_tex_engine_is_explained(run_error, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("parcalc.render.pdf.tex_engine", lambda lua_allowed=True: None)
    line = run_error(["report", "question1", "-o", str(tmp_path / "q.pdf")], exit_code=1)
    assert "no TeX engine" in line and "texlive-latex-recommended" in line
    assert not (tmp_path / "q.pdf").exists()


@needs_tex
def test_tex_failure_shows_the_log_and_writes_nothing(run_error, tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "report.tex.j2").write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n")
    target = tmp_path / "q.pdf"
    line = run_error(["report", "question1", "--template", str(templates), "-o", str(target)], exit_code=1)
    assert "TeX failed" in line and "Undefined control sequence" in line
    assert list(tmp_path.iterdir()) == [templates]


@needs_tex
def test_calculation_commands_write_pdf_and_latex(runner, tmp_path: Path) -> None:
    fragment = runner.invoke(app, ["peak-flops", "--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512", "--format", "latex"])
    assert fragment.exit_code == 0
    assert r"&= 155.93472\ \text{TFLOP/s}" in fragment.stdout and r"\documentclass" not in fragment.stdout
    pdf = tmp_path / "peak.pdf"
    result = runner.invoke(app, ["peak-flops", "--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512", "-o", str(pdf)])
    assert result.exit_code == 0, result.output
    assert "155.93472 TFLOP/s" in pdf_text(pdf)
