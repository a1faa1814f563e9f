"""Compile LaTeX to PDF: latexmk (or pdflatex twice) in a temporary directory, no shell escape,
a time limit, and the PDF moved into place only when TeX succeeded."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from parcalc.errors import InputError, RenderError, shown
from parcalc.files import terminate_raises, write_atomically

# Why 60 s and not 120: the packaged reports build in 1.4 s and 2.1 s (latexmk + pdflatex, on a
# shared 2-core machine), a first run that makes fonts (mktexpk) some seconds more. A minute is
# ~30 times the longest build, yet cuts off a TeX loop (`\def\x{\x}\x` in a template) twice as
# soon. The limit covers the whole build (latexmk's reruns, or both pdflatex runs); set
# PARCALC_TEX_TIMEOUT (seconds) for a slow machine or a very long report.
TEX_TIMEOUT_S = 60.0
TEX_TIMEOUT_VAR = "PARCALC_TEX_TIMEOUT"
INSTALL_HINT = (
    "on Debian/Ubuntu: apt-get install texlive-latex-recommended texlive-luatex texlive-pictures latexmk"
    " fonts-dejavu-core fonts-wqy-microhei"
)


def tex_timeout() -> float:
    """Seconds the whole TeX build may take: PARCALC_TEX_TIMEOUT, else TEX_TIMEOUT_S."""
    raw = os.environ.get(TEX_TIMEOUT_VAR, "").strip()
    if not raw:
        return TEX_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{TEX_TIMEOUT_VAR}: expected a number of seconds > 0, got {shown(raw)}")
    return value


def tex_engine(lua_allowed: bool = True) -> list[str] | None:
    """The command that builds a PDF, or None when no TeX is installed.

    LuaLaTeX first (Unicode text: "José Müller", Greek, CJK reach the PDF through fontspec and the
    fallback fonts of templates/preamble.tex.j2), when texlive-luatex provides luaotfload; else pdfLaTeX,
    whose default fonts lack most of those letters (see ascii_only).

    lua_allowed=False (a user's --template) takes pdfLaTeX: LuaLaTeX runs the `\\directlua` of whatever
    the template writes, and Lua's io reads and writes any file the user can (openin_any and
    shell_escape do not reach it), while `lualatex --safer`, which would stop that, also stops
    luaotfload ("luaotfload can't run with option --safer") and every Unicode font with it. pdfTeX has
    no Lua; its own file access is kept to the build directory (openin_any / openout_any = p)."""
    lua = lua_allowed and bool(shutil.which("lualatex")) and _luatex_packages()
    if shutil.which("latexmk") and (lua or shutil.which("pdflatex")):
        mode = "-lualatex" if lua else "-pdf"
        return ["latexmk", mode, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "-quiet"]
    if lua:
        return ["lualatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape"]
    if shutil.which("pdflatex"):
        return ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape"]
    return None


def _luatex_packages() -> bool:
    """Whether LuaLaTeX can load fontspec: Debian's texlive-latex-base ships the lualatex command, but
    luaotfload (texlive-luatex) is a package of its own, and without it fontspec stops with an error."""
    kpsewhich = shutil.which("kpsewhich")
    if kpsewhich is None:
        return False
    try:
        found = subprocess.run([kpsewhich, "luaotfload.sty", "fontspec.sty"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return len(found.stdout.split()) == 2


def ascii_only(tex_source: str) -> str:
    """For pdfLaTeX: every character outside ASCII becomes "?" (its fonts have no Greek or CJK, and
    inputenc stops at an undefined character), so that no worksheet text can break the document; the
    letters parcalc's own labels use (Δ, Σ, µ) are set in math instead."""
    for letter, in_math in PDFLATEX_LETTERS.items():
        tex_source = tex_source.replace(letter, in_math)
    return re.sub(r"[^\x00-\x7f]", "?", tex_source)


PDFLATEX_LETTERS = {"Δ": r"$\Delta$", "Σ": r"$\Sigma$", "µ": r"$\mu$", "μ": r"$\mu$"}


def compile_pdf(tex_source: str, output: Path, timeout_s: float | None = None, log: Path | None = None,
                lua_allowed: bool = True) -> None:  # fmt: skip
    """Typeset `tex_source` and atomically write the PDF to `output` (and TeX's log to `log`, for the
    layout checks of tests/test_pdf_layout.py); lua_allowed=False for TeX a user's template wrote (tex_engine)."""
    engine = tex_engine(lua_allowed)
    if engine is None:
        raise RenderError(f"no TeX engine found to build {output.name}; {INSTALL_HINT} (or write .tex with -o file.tex)")
    timeout = tex_timeout() if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout
    # The temporary directory goes on timeout, error, Ctrl-C and SIGTERM alike: TeX is killed first
    # (_run_tex), then the with-block removes the directory while the exception passes through.
    with terminate_raises(), tempfile.TemporaryDirectory(prefix="parcalc-tex-") as workdir:
        source = Path(workdir) / "document.tex"
        if "-lualatex" not in engine and engine[0] != "lualatex":
            tex_source = ascii_only(tex_source)
        source.write_text(tex_source, encoding="utf-8")
        runs = 1 if engine[0] == "latexmk" else 2  # pdflatex twice settles references
        env = {**os.environ, "openout_any": "p", "openin_any": "p", "shell_escape": "f"}
        for _ in range(runs):
            returncode, stdout, stderr = _run_tex([*engine, "document.tex"], workdir, env, deadline, timeout)
            if returncode != 0:
                log = Path(workdir) / "document.log"
                excerpt = log_excerpt(log.read_text(errors="replace") if log.exists() else stdout + stderr)
                raise RenderError(f"TeX failed, no PDF written: {excerpt}")
        pdf = Path(workdir) / "document.pdf"
        if not pdf.exists():
            raise RenderError("TeX produced no PDF")
        if log is not None:
            log.write_bytes((Path(workdir) / "document.log").read_bytes())
        write_atomically(output, pdf.read_bytes())


def _run_tex(argv: list[str], workdir: str, env: dict[str, str], deadline: float, timeout: float) -> tuple[int, str, str]:
    """Run one TeX command, killing its whole process group on timeout or interruption.

    start_new_session puts TeX in a process group of its own: killing latexmk alone (what
    subprocess.run's timeout does) left the pdflatex it started running, re-parented to init, and
    run() then waited on that pdflatex's pipes anyway.
    """
    process: subprocess.Popen[str] | None = None
    try:
        # inside the try: a Ctrl-C between Popen's return and the communicate left TeX running (exit 130, its group alive)
        process = subprocess.Popen(
            argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, errors="replace", start_new_session=True,
        )  # fmt: skip
        stdout, stderr = process.communicate(timeout=max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        assert process is not None  # only communicate times out
        _kill_group(process)
        raise RenderError(f"TeX did not finish within {timeout:g} s; no PDF written (allow more with {TEX_TIMEOUT_VAR}=SECONDS)") from None
    except BaseException:  # KeyboardInterrupt, or SystemExit from SIGTERM (parcalc.files.terminate_raises)
        if process is not None:
            _kill_group(process)
        raise
    return process.returncode, stdout, stderr


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL TeX's process group, reap TeX, close the pipes (not read: a process that left the group
    could hold them open for ever)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def log_excerpt(log: str, lines: int = 6) -> str:
    """The first error of a TeX log and the lines after it, joined into one line."""
    text = log.splitlines()
    for index, line in enumerate(text):
        if line.startswith("!") or re.match(r".*:\d+: ", line):
            return " | ".join(part.strip() for part in text[index : index + lines] if part.strip())
    return " | ".join(part.strip() for part in text[-lines:] if part.strip())
