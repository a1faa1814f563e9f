"""Compile LaTeX to PDF: latexmk (or pdflatex twice) in a temporary directory, no shell escape,
a time limit, and the PDF moved into place only when TeX succeeded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from parcalc.errors import RenderError
from parcalc.files import write_atomically

TEX_TIMEOUT_S = 120
INSTALL_HINT = "on Debian/Ubuntu: apt-get install texlive-latex-recommended texlive-pictures latexmk"


def tex_engine() -> list[str] | None:
    """The command that builds a PDF, or None when no TeX is installed."""
    if shutil.which("latexmk") and shutil.which("pdflatex"):
        return ["latexmk", "-pdf", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "-quiet"]
    if shutil.which("pdflatex"):
        return ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape"]
    return None


def compile_pdf(tex_source: str, output: Path, timeout_s: float = TEX_TIMEOUT_S) -> None:
    """Typeset `tex_source` and atomically write the PDF to `output`."""
    engine = tex_engine()
    if engine is None:
        raise RenderError(f"no TeX engine found to build {output.name}; {INSTALL_HINT} (or write .tex with -o file.tex)")
    with tempfile.TemporaryDirectory(prefix="parcalc-tex-") as workdir:
        source = Path(workdir) / "document.tex"
        source.write_text(tex_source, encoding="utf-8")
        runs = 1 if engine[0] == "latexmk" else 2  # pdflatex twice settles references
        env = {**os.environ, "openout_any": "p", "openin_any": "p", "shell_escape": "f"}
        for _ in range(runs):
            try:
                done = subprocess.run(
                    [*engine, "document.tex"], cwd=workdir, env=env, capture_output=True, text=True,
                    timeout=timeout_s, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise RenderError(f"TeX did not finish within {timeout_s:.0f} s; no PDF written") from None
            if done.returncode != 0:
                log = Path(workdir) / "document.log"
                excerpt = log_excerpt(log.read_text(errors="replace") if log.exists() else done.stdout + done.stderr)
                raise RenderError(f"TeX failed, no PDF written: {excerpt}")
        pdf = Path(workdir) / "document.pdf"
        if not pdf.exists():
            raise RenderError("TeX produced no PDF")
        write_atomically(output, pdf.read_bytes())


def log_excerpt(log: str, lines: int = 6) -> str:
    """The first error of a TeX log and the lines after it, joined into one line."""
    text = log.splitlines()
    for index, line in enumerate(text):
        if line.startswith("!") or re.match(r".*:\d+: ", line):
            return " | ".join(part.strip() for part in text[index : index + lines] if part.strip())
    return " | ".join(part.strip() for part in text[-lines:] if part.strip())
