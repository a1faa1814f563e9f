"""Error lines the CLI and the library share: an unknown command with the nearest one, a message
as one printable line, and the line a bug of parcalc gets. Plain text, no Click: parcalc.cli prints
them after `Error:`, the library raises them, a sweep's row holds them."""

from __future__ import annotations

DEBUG_VAR = "PARCALC_DEBUG"


def unknown_command(name: str, known: list[str]) -> str:
    """`no command 'memroy'; did you mean 'memory'?`, or where to find the commands."""
    import difflib

    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    close += [command for command in known if not close and name.lower() in command][:1]
    if close:
        return f"no command {one_line(repr(name))}; did you mean {close[0]!r}?"
    return f"no command {one_line(repr(name))}; the commands are {', '.join(known)} (see 'parcalc --help')"


def internal_error_line(error: BaseException) -> str:
    from parcalc import __version__

    detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return (f"internal error: {detail} (parcalc {__version__}); please report it with the command line that caused it "
            f"({DEBUG_VAR}=1 shows the traceback)")  # fmt: skip


def one_line(message: str) -> str:
    """An error message as one printable line: a control character from a file or flag (an ANSI
    escape, a newline) is shown escaped, so that it can neither break the line nor drive the
    terminal; messages name what they quote, so the line stays readable."""
    if message.isprintable():
        return message
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


