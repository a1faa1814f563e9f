"""`parcalc report`: a worksheet's questions answered and written up as PDF, LaTeX or Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from parcalc.commands.common import PresetsOption, preset_dirs

EXAMPLES = """\
\b
Examples:
  parcalc report --list
  parcalc report question1 -o question1.pdf
  parcalc report question2 -o question2.pdf
  parcalc report question2 --detail brief -o question2-brief.pdf
  parcalc report my-worksheet.yaml -o answers.md
  parcalc report question1 --format latex > question1.tex
  parcalc report question1 --format json
"""

FORMATS = ("markdown", "latex", "json")
DETAILS = ("brief", "full")  # as parcalc.render.report.DETAILS (not imported: start-up)
EXTENSIONS = {".pdf": "pdf", ".tex": "latex", ".md": "markdown", ".markdown": "markdown", ".json": "json"}


def report(
    worksheet: Annotated[Optional[str], typer.Argument(metavar="WORKSHEET", help="Built-in worksheet name or a YAML file.")] = None,  # noqa: UP045
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="Write .pdf, .tex, .md or .json (all or nothing).")] = None,  # noqa: UP045
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", metavar="FORMAT", help="markdown (default on stdout), latex or json.")] = None,  # noqa: UP045
    template: Annotated[Optional[Path], typer.Option("--template", metavar="DIR", help="Directory of your own templates (report.tex.j2, partials/...), searched before the packaged ones.")] = None,  # noqa: UP045
    list_worksheets: Annotated[bool, typer.Option("--list", help="List the built-in and user worksheets.")] = False,
    presets: PresetsOption = None,
    detail: Annotated[str, typer.Option("--detail", metavar="LEVEL", help="full (default): every derivation, table and assumption; brief: per question the answers' derivations, inputs with numbered sources and the boxed answer.")] = "full",
) -> None:
    """Answer a worksheet's questions with parcalc and write them up, derivations included."""
    from parcalc.errors import InputError, shown

    if list_worksheets:
        _list(preset_dirs(presets))
        return
    if worksheet is None:
        raise InputError("give a worksheet (e.g. question1, or a YAML file), or --list")
    if detail not in DETAILS:
        raise InputError(f"--detail: {shown(detail, 40)} is not one of {', '.join(DETAILS)}")
    kind = _output_kind(fmt, output)
    if output is not None:
        from parcalc.files import check_writable

        check_writable(output)
    templates = (template,) if template else ()
    if template is not None:
        from parcalc.files import check_name_length

        check_name_length(template, "--template")
        try:
            is_dir = template.is_dir()
        except OSError:  # unsearchable parent: as good as missing
            is_dir = False
        if not is_dir:
            raise InputError(f"--template: {shown(str(template))} is not a directory")

    from parcalc.worksheet import load_worksheet, solve

    solved = solve(load_worksheet(worksheet, preset_dirs(presets)), preset_dirs(presets))
    _write(solved, kind, output, templates, detail)


def _output_kind(fmt: str | None, output: Path | None) -> str:
    from parcalc.errors import InputError

    if fmt is not None:
        if fmt not in FORMATS:
            raise InputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
        if output is not None and output.suffix.lower() == ".pdf" and fmt != "latex":
            raise InputError("--format: a .pdf output is built from LaTeX; leave --format out")
        implied = EXTENSIONS.get(output.suffix.lower()) if output is not None else None
        if implied not in (None, fmt, "pdf"):  # `--format latex -o answers.md` wrote LaTeX into a .md file
            from parcalc.errors import shown

            raise InputError(f"--format {fmt} and -o {shown(str(output))} disagree: -o's extension asks for {implied}; drop --format, "
                             f"or name the file for {fmt}")  # fmt: skip
        return "pdf" if output is not None and output.suffix.lower() == ".pdf" else fmt
    if output is None:
        return "markdown"
    try:
        return EXTENSIONS[output.suffix.lower()]
    except KeyError:
        raise InputError(f"--output: use .pdf, .tex, .md or .json, not {output.suffix or 'no extension'!r}") from None


def _write(solved: object, kind: str, output: Path | None, templates: tuple[Path, ...], detail: str = "full") -> None:
    import sys

    from parcalc.files import write_atomically
    from parcalc.render.report import render_report_latex, render_report_markdown

    if kind == "pdf":
        from parcalc.render.pdf import compile_pdf
        from parcalc.results.parse import BusyLine

        with BusyLine(f"typesetting {output.name} with TeX"):  # type: ignore[union-attr]
            # a user's template is TeX of unknown origin: built without Lua (render/pdf.py tex_engine)
            compile_pdf(render_report_latex(solved, templates, detail), output, lua_allowed=not templates)  # type: ignore[arg-type]
    else:
        if kind == "latex":
            text = render_report_latex(solved, templates, detail)  # type: ignore[arg-type]
        elif kind == "json":
            text = _json(solved)
        elif output is None:
            text = render_report_markdown(solved, templates, detail)  # type: ignore[arg-type]
        else:
            _write_markdown(solved, output, templates, detail)
            return
        if output is None:
            sys.stdout.write(text)
            return
        write_atomically(output, text)
    print(f"wrote {output}", file=sys.stderr)


def _write_markdown(solved: object, output: Path, templates: tuple[Path, ...], detail: str = "full") -> None:
    """The report and, beside it, an SVG of each question's figure (NAME-QUESTION-KIND.svg), linked
    from the report; the pictures written are removed again if the report cannot be."""
    import os
    import sys

    from parcalc.files import write_atomically
    from parcalc.render.canvas import to_svg
    from parcalc.render.report import figure_file_name, question_figure, render_report_markdown

    files: dict[str, str] = {}
    written: list[Path] = []
    try:
        for question in solved.questions:  # type: ignore[attr-defined]
            figure = question_figure(question)
            if figure is None:
                continue
            path = output.with_name(figure_file_name(output.stem, question.question.id, figure.key))
            existed = os.path.lexists(path)
            write_atomically(path, to_svg(figure.canvas))
            if not existed:
                written.append(path)
            files[question.question.id] = path.name
            print(f"wrote {path}", file=sys.stderr)
        write_atomically(output, render_report_markdown(solved, templates, detail, files))  # type: ignore[arg-type]
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    print(f"wrote {output}", file=sys.stderr)


def _json(solved: object) -> str:
    """The report as JSON. Each question's `answers` is a list, in the worksheet's order, of
    {key, label, calculation, value, unit}: `key` is the result's name (several calculations of one
    question may share it, as question 1.2's three `intensity` answers do, which a mapping keyed by
    name collapsed into one), `label` names the answer as the report prints it, `calculation` is the
    1-based index of the calculation it came from; value in base units, with its unit."""
    import json

    from parcalc.derivation import result_record

    sheet = solved.worksheet  # type: ignore[attr-defined]
    questions = []
    for q in solved.questions:  # type: ignore[attr-defined]
        answers = [{"key": a.derivation.key, "label": a.label, "calculation": a.calculation,
                    "value": a.derivation.value, "unit": a.derivation.unit} for a in q.answers]  # fmt: skip
        questions.append({"id": q.question.id, "title": q.question.title, "answers": answers,
                          "results": [result_record(r) for r in q.results]})  # fmt: skip
    from parcalc import __version__
    from parcalc.derivation import SCHEMA_VERSION

    document = {"schema_version": SCHEMA_VERSION, "parcalc": __version__, "command": "report", "worksheet": str(sheet.path),
                "title": sheet.title, "questions": questions}  # fmt: skip
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _list(dirs: tuple) -> None:
    import shutil
    import sys
    import textwrap

    from parcalc.preset_files import Category, find_all
    from parcalc.strict_yaml import read_yaml

    # on a terminal, a long title wraps between words under itself (the terminal cut seed000's mid-word at 80 columns);
    # into a pipe or a file each worksheet stays one line, for a script
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else 0
    for preset in find_all(Category.WORKSHEETS, dirs):
        title = str(read_yaml(preset.path).get("title", ""))
        line = f"{preset.key:<16} {title}  [{preset.origin}]"
        print("\n".join(textwrap.wrap(line, width, subsequent_indent=" " * 17, break_on_hyphens=False)) if len(line) > width > 40 else line)
