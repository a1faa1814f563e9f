"""Choosing an output format, rendering a Result, and writing it without half-written files."""

from __future__ import annotations

import os
import sys
import tempfile
from enum import Enum
from pathlib import Path

from parcalc.derivation import Result
from parcalc.errors import InputError


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


def resolve_format(fmt: OutputFormat | None, output: Path | None) -> OutputFormat:
    """An explicit --format wins; otherwise the output file's extension; otherwise a table."""
    if fmt is not None:
        return fmt
    if output is None:
        return OutputFormat.TABLE
    try:
        return EXTENSIONS[output.suffix.lower()]
    except KeyError:
        known = ", ".join(EXTENSIONS)
        raise InputError(f"--output: cannot tell the format of {str(output)!r} from its extension; use {known} or --format") from None


def check_writable(output: Path) -> None:
    """Fail before any work if the output cannot be written (missing or read-only directory)."""
    directory = output.parent if str(output.parent) else Path(".")
    if output.is_dir():
        raise InputError(f"--output: {str(output)!r} is a directory")
    if not directory.is_dir():
        raise InputError(f"--output: directory {str(directory)!r} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--output: directory {str(directory)!r} is not writable")
    if output.exists() and not os.access(output, os.W_OK):
        raise InputError(f"--output: {str(output)!r} is not writable")


def render_text(result: Result, fmt: OutputFormat) -> str:
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
    from parcalc.render.plain import render_plain

    return render_plain(result)


def write_atomically(output: Path, data: str | bytes) -> None:
    """Write to a temporary file beside the target, then rename: readers never see half a file."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    directory = output.parent if str(output.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".part", dir=directory)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(payload)
            # mkstemp creates 0600; a written report should get the usual mode (0666 less umask)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
            os.replace(temporary, output)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise InputError(f"--output: cannot write {str(output)!r}: {error.strerror or error}") from None


def use_colour() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def emit(result: Result, fmt: OutputFormat | None, output: Path | None) -> None:
    """Render `result` and print it, or write it to `output`."""
    chosen = resolve_format(fmt, output)
    if output is not None and output.suffix.lower() == ".pdf":
        from parcalc.render.latex import render_latex_document
        from parcalc.render.pdf import compile_pdf

        compile_pdf(render_latex_document(result), output)
        print(f"wrote {output}", file=sys.stderr)
        return
    if output is not None and fmt is None and chosen is OutputFormat.LATEX:
        from parcalc.render.latex import render_latex_document

        # a .tex file is a whole document that compiles as it is; --format latex gives a fragment
        write_atomically(output, render_latex_document(result))
        print(f"wrote {output}", file=sys.stderr)
        return
    if output is not None:
        write_atomically(output, render_text(result, chosen))
        print(f"wrote {output}", file=sys.stderr)
        return
    if chosen is OutputFormat.TABLE and use_colour():
        from rich.console import Console

        from parcalc.render.terminal import render_rich

        render_rich(result, Console())
        return
    sys.stdout.write(render_text(result, chosen))
