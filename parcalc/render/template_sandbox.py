"""Templates are code: the bounds a user's `--template` runs within.

Jinja's immutable sandbox refuses attribute escapes and mutation (parcalc.render.latex.sandboxed_environment);
it does not bound what a template costs or what the TeX it writes may do. Two more bounds:

- **Values**: `"x" * 10**9` or `2 ** 10**9` would allocate gigabytes. `*` and `**` are intercepted and
  refused past MAX_VALUE characters / items or MAX_POWER_BITS bits (parcalc's templates multiply
  nothing larger than a rule's width).
- **Output and time**: a template renders as a stream of chunks, cut off past MAX_OUTPUT characters;
  loops that print nothing (nested `range(10**5)`) are stopped by a deadline of RENDER_SECONDS,
  checked by an interval timer where one can be set (Unix, main thread).
- **TeX**: what the TeX a user's template writes may do is parcalc.render.pdf.tex_engine's matter
  (pdfLaTeX, without Lua, for a --template).
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from parcalc.errors import InputError

MAX_VALUE = 1 << 20  # characters of a string, items of a list, made by `*` in a template
MAX_POWER_BITS = 4096  # bits of an integer made by `**`
MAX_OUTPUT = 64 << 20  # characters a template may write: a report is a few hundred kilobytes
RENDER_SECONDS = 30.0  # the packaged reports render in well under a second

def bounded_binop(operator: str, left: Any, right: Any) -> Any:
    """`left operator right` for the sandbox's intercepted `*` and `**`, refused when the result would be huge."""
    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and len(sequence) * max(count, 0) > MAX_VALUE:
                raise InputError(f"a template made a value of {len(sequence) * count:,} items (at most {MAX_VALUE:,})")
        return left * right
    if operator == "**":
        huge = isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0 and right * math.log2(abs(left)) > MAX_POWER_BITS
        if huge:
            raise InputError(f"a template computed a power of more than {MAX_POWER_BITS} bits")
        return left**right
    raise AssertionError(operator)


def render_bounded(template: Any, context: dict[str, Any]) -> str:
    """The template's text, within MAX_OUTPUT characters and RENDER_SECONDS."""
    parts: list[str] = []
    size = 0
    with _deadline(RENDER_SECONDS):
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise InputError(f"a template wrote more than {MAX_OUTPUT >> 20} MiB")
            parts.append(chunk)
    return "".join(parts)


class _Overtime(Exception):
    pass


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise InputError if the block runs longer than `seconds` (where an interval timer can be set)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def overtime(signum: int, frame: object) -> None:
        raise _Overtime

    previous = signal.signal(signal.SIGALRM, overtime)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    try:
        yield
    except _Overtime:
        raise InputError(f"a template ran longer than {seconds:g} s ({time.monotonic() - started:.0f} s)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
