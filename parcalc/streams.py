"""Standard output and error as the CLI needs them: writable whatever the terminal's encoding,
and a failed write to stdout (a full disk, a closed descriptor, a reader gone) as one error.

Python leaves these to the interpreter's exit, which prints "Exception ignored ..." and a
traceback, or a UnicodeEncodeError for the first "×" under PYTHONIOENCODING=ascii. Only
parcalc.cli uses this module, around one command.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import sys
from typing import Any

# What parcalc prints beyond ASCII, as ASCII, for a stream whose encoding lacks them;
# any other such character (from a name a user gave, say) is backslash-escaped.
ASCII_FORMS = {
    "×": "x", "·": "*", "…": "...", "µ": "u", "μ": "u", "−": "-", "–": "-", "—": "-", "≤": "<=", "≥": ">=",
    "≈": "~", "→": "->", "←": "<-", "²": "^2", "³": "^3", "√": "sqrt", "⌈": "ceil(", "⌉": ")", "⌊": "floor(",
    "⌋": ")", "α": "alpha", "β": "beta", "ε": "epsilon", "τ": "tau", "Σ": "sum", "Δ": "delta", "Ψ": "Psi",
    "∈": " in ", "⊙": "(*)", "±": "+/-", "’": "'", "‘": "'", "“": '"', "”": '"',
}  # fmt: skip
ERROR_HANDLER = "parcalc-ascii"


def _ascii_forms(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(ASCII_FORMS.get(ch) or ch.encode("ascii", "backslashreplace").decode() for ch in text), error.end


codecs.register_error(ERROR_HANDLER, _ascii_forms)


class StdoutError(Exception):
    """Writing the output to stdout failed; `broken_pipe` when its reader has gone."""

    def __init__(self, error: OSError) -> None:
        self.broken_pipe = isinstance(error, BrokenPipeError) or error.errno == errno.EPIPE
        reason = error.strerror or str(error) or type(error).__name__
        super().__init__(f"cannot write the output to stdout: {reason}")


class _Guarded:
    """sys.stdout, with an OSError on write or flush raised as StdoutError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise StdoutError(error) from None

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise StdoutError(error) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Closed:
    """Stands in for a stdout that was closed before parcalc started (`parcalc ... >&-`)."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


_saved: list[Any] = []


def prepare() -> None:
    """Before a command: ASCII forms for characters the streams cannot encode, and stdout guarded."""
    for stream in (sys.stdout, sys.stderr):
        _tolerate_encoding(stream)
    _saved.append(sys.stdout)
    sys.stdout = _Guarded(sys.stdout if sys.stdout is not None else _Closed())


def restore() -> None:
    """After a command: sys.stdout as prepare() found it (the test runner's, say)."""
    if _saved:
        sys.stdout = _saved.pop()


def _tolerate_encoding(stream: Any) -> None:
    # strict: stdout's default; backslashreplace: stderr's, which would print "…" as "\u2026"
    if stream is None or getattr(stream, "errors", None) not in ("strict", "backslashreplace") or not hasattr(stream, "reconfigure"):
        return
    try:
        "×…µ·≤".encode(stream.encoding)
    except (UnicodeEncodeError, LookupError, TypeError):
        try:
            stream.reconfigure(errors=ERROR_HANDLER)
        except (OSError, ValueError):
            pass


def write_out(text: str) -> None:
    """Write `text` to stdout whole, or raise StdoutError.

    Through the file descriptor when there is one: CPython's buffered writer takes a partial
    write(2) (a pipe whose reader left after 64 KiB) as done and drops the rest without an error,
    so `parcalc ... | head -c 100` of a large output ended with exit 0 and lost output unseen. Here
    each os.write continues where the last stopped, and the next one reports EPIPE."""
    stream = _saved[-1] if _saved else sys.stdout
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a test runner's capture, or a closed stdout
        sys.stdout.write(text)
        return
    data = text.encode(getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict")
    view = memoryview(data)
    try:
        stream.flush()
        while view:
            view = view[os.write(descriptor, view[: 1 << 16]) :]
    except OSError as error:
        raise StdoutError(error) from None


def flush_stdout() -> None:
    sys.stdout.flush()


def discard_stdout() -> None:
    """Drop what stdout still buffers, so that the interpreter's flush at exit does not fail again
    (the remedy of the Python docs' note on SIGPIPE: point the descriptor at /dev/null)."""
    stream = _saved[-1] if _saved else sys.stdout
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, descriptor)
    except OSError:
        pass
    finally:
        os.close(null)


def say(line: str) -> None:
    """One line on stderr, if stderr can take it (it may be closed too)."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(_printable(clipped(line)) + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _printable(line: str) -> str:
    """Control characters of a message (from a value a user gave) shown escaped, never sent to the
    terminal, and a message of one line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in line)


MAX_QUOTED_CHARS = 80  # as parcalc.units.MAX_SHOWN_CHARS
# A quoted value opens after a space, bracket, '=' or ':' (or at the start) and closes before one, so
# that the apostrophes of words ("Megatron-LM's") do not pair into one long "value".
# Patterns, compiled by re (and cached) on the first error message: not at every start-up (~0.3 ms).
_QUOTED = rf"(?:(?<=^)|(?<=[\s(\[=:,]))(?:'[^'\n]{{{MAX_QUOTED_CHARS + 1},}}'|\"[^\"\n]{{{MAX_QUOTED_CHARS + 1},}}\")(?=$|[\s)\]:;,.])"
_LONG_WORD = rf"\S{{{MAX_QUOTED_CHARS + 41},}}"


def clipped(line: str) -> str:
    """A message with every quoted value, and any word, longer than ~80 characters cut to that with
    "…": messages from click and from modules that quote a value whole stay short too."""
    line = re.sub(_QUOTED, lambda m: m.group()[:MAX_QUOTED_CHARS] + "…" + m.group()[0], line)
    return re.sub(_LONG_WORD, lambda m: m.group()[:MAX_QUOTED_CHARS] + "…", line)
