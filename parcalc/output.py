"""Choosing an output format, rendering a Result, and writing it without half-written files."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path

from parcalc.derivation import Result
from parcalc.errors import InputError, shown
from parcalc.files import write_atomically
from parcalc.render.csv_table import chosen_table

__all__ = ["OutputFormat", "draws_figures", "emit", "render_text", "resolve_format", "write_atomically"]


class OutputFormat(str, Enum):
    TABLE = "table"
    JSON = "json"
    CSV = "csv"
    MARKDOWN = "markdown"
    LATEX = "latex"


EXTENSIONS: dict[str, OutputFormat] = {
    ".txt": OutputFormat.TABLE,
    ".json": OutputFormat.JSON,
    ".csv": OutputFormat.CSV,
    ".md": OutputFormat.MARKDOWN,
    ".markdown": OutputFormat.MARKDOWN,
    ".tex": OutputFormat.LATEX,
    ".pdf": OutputFormat.LATEX,
}


# -o FILE.svg draws the result's picture (parcalc.render.figures) instead of writing its text; the
# documents (.pdf, .tex, .md) carry the picture beside their text.
FIGURE_SUFFIX = ".svg"
DOCUMENT_SUFFIXES = (".pdf", ".tex", ".md", ".markdown")


def is_picture(fmt: OutputFormat | None, output: Path | None) -> bool:
    """-o FILE.svg without --format: the picture alone."""
    return output is not None and fmt is None and output.suffix.lower() == FIGURE_SUFFIX


def draws_figures(fmt: OutputFormat | None, output: Path | None) -> bool:
    """Whether the output shows the result's pictures: -o .svg, or a document (.pdf .tex .md)
    without --format. Commands add the tables their pictures are drawn from only then."""
    return output is not None and fmt is None and output.suffix.lower() in (FIGURE_SUFFIX, *DOCUMENT_SUFFIXES)


def resolve_format(fmt: OutputFormat | None, output: Path | None) -> OutputFormat:
    """An explicit --format; otherwise the output file's extension; otherwise a table. The two given
    and saying different things is one line (issue 28: `--format json -o x.pdf` built a PDF, and
    `--format json -o t.svg` printed JSON to stdout)."""
    if fmt is not None:
        suffix = output.suffix.lower() if output is not None else ""
        implied = EXTENSIONS.get(suffix)
        if suffix == FIGURE_SUFFIX or (implied is not None and implied is not fmt):
            what = "a picture" if suffix == FIGURE_SUFFIX else "a PDF" if suffix == ".pdf" else implied.value if implied is not None else ""
            raise InputError(f"--format {fmt.value} and -o {shown(str(output))} disagree: -o's extension asks for {what}; "
                             f"drop --format, or name the file for {fmt.value}")  # fmt: skip
        return fmt
    if output is None:
        return OutputFormat.TABLE
    try:
        return EXTENSIONS[output.suffix.lower()]
    except KeyError:
        known = ", ".join(EXTENSIONS)
        raise InputError(f"--output: cannot tell the format of {shown(str(output))} from its extension; use {known} or --format") from None


def render_text(result: Result, fmt: OutputFormat, detail: str | None = None) -> str:
    """The result in a text format; the table form as brief or full as `detail` says (default:
    --detail as given on this run, else brief)."""
    if fmt is OutputFormat.LATEX:
        from parcalc.render.latex import render_latex_fragment

        return render_latex_fragment(result)
    if fmt is OutputFormat.JSON:
        from parcalc.render.json_out import render_json

        return render_json(result)
    if fmt is OutputFormat.CSV:
        from parcalc.render.csv_out import render_csv

        return render_csv(result)
    if fmt is OutputFormat.MARKDOWN:
        from parcalc.render.markdown import render_markdown

        return render_markdown(result)
    if (detail or text_detail()) != "full":
        from parcalc.render.brief import render_brief_plain

        return render_brief_plain(result)
    from parcalc.render.plain import render_plain

    return render_plain(result)


def text_detail() -> str:
    """How much the table form shows on this run: --detail's level, brief when not given."""
    from parcalc.render.brief import BRIEF, chosen_detail

    return chosen_detail.get() or BRIEF


def use_colour() -> bool:
    """Whether the table goes through rich, in colour: NO_COLOR (any non-empty value, no-color.org)
    turns colour off; TERM=dumb too (rich would draw no colour there: Console.is_dumb_terminal);
    FORCE_COLOR (any non-empty value, force-color.org) turns it on even into a pipe or a file, as
    rich's Console.is_terminal reads it; otherwise colour when stdout is a terminal. NO_COLOR wins
    over FORCE_COLOR, as in CPython's own Lib/_colorize.py (can_colorize, 3.13)."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(os.environ.get("FORCE_COLOR")) or sys.stdout.isatty()


def emit(result: Result, fmt: OutputFormat | None, output: Path | None) -> None:
    """Render `result` and print it, or write it to `output`."""
    if is_picture(fmt, output):
        from parcalc.render.canvas import to_svg
        from parcalc.render.figures import the_figure

        write_atomically(output, to_svg(the_figure(result).canvas))  # type: ignore[arg-type]
        print(f"wrote {output}", file=sys.stderr)
        return
    chosen = resolve_format(fmt, output)
    if chosen_table.get() is not None and chosen is not OutputFormat.CSV:
        raise InputError(f"--table: picks the one table --format csv prints; with {chosen.value} every table is shown")
    _check_detail(chosen)
    if output is not None and output.suffix.lower() == ".pdf":
        from parcalc.render.latex import render_latex_document
        from parcalc.render.pdf import compile_pdf
        from parcalc.results.parse import BusyLine

        with BusyLine(f"typesetting {output.name} with TeX"):
            compile_pdf(render_latex_document(result), output)
        print(f"wrote {output}", file=sys.stderr)
        return
    if output is not None and fmt is None and chosen is OutputFormat.LATEX:
        from parcalc.render.latex import render_latex_document

        # a .tex file is a whole document that compiles as it is; --format latex gives a fragment
        write_atomically(output, render_latex_document(result))
        print(f"wrote {output}", file=sys.stderr)
        return
    if output is not None and fmt is None and chosen is OutputFormat.MARKDOWN:
        _write_markdown(result, output)
        print(f"wrote {output}", file=sys.stderr)
        return
    if output is not None:
        write_atomically(output, render_text(result, chosen))
        print(f"wrote {output}", file=sys.stderr)
        return
    if chosen is OutputFormat.TABLE and (use_colour() or (text_detail() == "full" and sys.stdout.isatty())):
        from rich.console import Console

        from parcalc.render.terminal import render_rich

        # NO_COLOR or TERM=dumb on a terminal: the same layout without any style (color_system None writes no escape
        # code), so that --detail full fits the terminal as in colour; the plain form is laid out for files and pipes,
        # and its lines ran to 1,779 columns on an 80-column terminal (presets show gb200; session 24)
        render_rich(result, Console() if use_colour() else Console(color_system=None), text_detail())
        return
    from parcalc.streams import write_out

    write_out(render_text(result, chosen))


def _check_detail(chosen: OutputFormat) -> None:
    """--detail chooses how much the text form shows; the other formats are the whole record."""
    from parcalc.render.brief import chosen_detail

    if chosen_detail.get() is not None and chosen is not OutputFormat.TABLE:
        raise InputError(f"--detail: chooses how much the text output shows; {chosen.value} always holds the whole record; leave --detail out")


def _write_markdown(result: Result, output: Path) -> None:
    """The Markdown file, and each of the result's pictures as an SVG file beside it (NAME-KEY.svg),
    linked from it. The pictures are written first and removed again if the .md cannot be, so that
    a failure leaves no new file behind."""
    from parcalc.render.figures import figures_of
    from parcalc.render.markdown import render_markdown

    figures = figures_of(result)
    if not figures:
        write_atomically(output, render_markdown(result))
        return
    from parcalc.render.canvas import to_svg

    written: list[Path] = []
    links: list[tuple[str, str]] = []
    try:
        for figure in figures:
            path = output.with_name(f"{output.stem}-{figure.key}.svg")
            existed = os.path.lexists(path)
            write_atomically(path, to_svg(figure.canvas))
            if not existed:
                written.append(path)
            links.append((figure.title, path.name))
            print(f"wrote {path}", file=sys.stderr)
        write_atomically(output, render_markdown(result, links))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
