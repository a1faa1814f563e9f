"""Code that parcalc writes as text at run time, compiled once and kept between runs, as Python keeps a
module's bytecode in __pycache__.

Each @frozen class's __init__ is the text dataclasses writes, compiled when the class's first instance is
made (parcalc.frozen). Compiling costs ~7 us a field (the parser and the compiler), ~0.1-0.2 ms a class in a
fresh process; a one-liner makes instances of 6 to 22 such classes (Term, Derivation, Result, Gpu,
TransformerModel, ...): 1-4 ms of its start-up, the same texts every run. Here the code object compile()
returns is kept in a file of its own, `$XDG_CACHE_HOME/parcalc/code/<bytecode magic>/<digest of the
text>.marshal` (default `~/.cache/parcalc/code/`), with the text it was compiled from: marshal writes and
reads code objects exactly (it is how .pyc files hold them), the folder changes with the interpreter's
bytecode, and an entry is used only for the very text it holds, so a code object is only ever run by an
interpreter that compiled the same text to it. One file a text, not one for all: a run reads only the
~3 KB entries of the classes it makes (one file of every class's, ~190 KB, cost more to check and read
than the compiling it saved). A text without an entry is compiled, and its entry written when the
process exits.

Each file is sealed as the preset cache's entries are (parcalc.sealed_file: a BLAKE2b digest of the payload
checked before marshal reads a byte, this user's file that nobody else may write): a damaged, foreign or
missing entry is a miss. PARCALC_NO_CACHE=1 turns it off, as it does the preset cache.
"""

from __future__ import annotations

import os
from types import CodeType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

MAX_ENTRY_BYTES = 1 << 20  # one text and its code: a few kilobytes; anything larger is not ours

_folder: list[Path | None] = []  # the entries' folder, found at the first compiled() of a process (None: no cache)
_fresh: dict[Path, tuple[str, CodeType]] = {}  # compiled by this process, written at exit


def compiled(text: str) -> CodeType:
    """compile(text, "<string>", "exec", dont_inherit=True), from the cache when an earlier run compiled it."""
    path = _entry(text)
    code = _read(path, text) if path is not None else None
    if code is None:
        code = compile(text, "<string>", "exec", dont_inherit=True)
        if path is not None:
            if not _fresh:
                import atexit

                atexit.register(_save)
            _fresh[path] = (text, code)
    return code


def _entry(text: str) -> Path | None:
    """The file that keeps `text`'s code: named by a BLAKE2b digest of the text (128 bits)."""
    if not _folder:
        _folder.append(_find_folder())
    if _folder[0] is None:
        return None
    from parcalc.sealed_file import blake2b

    return _folder[0] / f"{blake2b(text.encode(), digest_size=16).hexdigest()}.marshal"


def _find_folder() -> Path | None:
    from parcalc.resources import home_dir
    from parcalc.sealed_file import NO_CACHE_VAR

    root = home_dir("XDG_CACHE_HOME", ".cache")
    if os.environ.get(NO_CACHE_VAR) or root is None:
        return None
    from importlib.util import MAGIC_NUMBER

    return root / "parcalc" / "code" / MAGIC_NUMBER.hex()


def _read(path: Path, text: str) -> CodeType | None:
    """The code object kept at `path` for `text`; None when there is none, or it is not one this module wrote for it."""
    import marshal

    from parcalc.sealed_file import read_sealed

    payload = read_sealed(path, MAX_ENTRY_BYTES)
    if payload is None:
        return None
    try:
        entry = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not (type(entry) is tuple and len(entry) == 2 and entry[0] == text and type(entry[1]) is CodeType):
        return None  # the digest of another text (a collision), or not an entry of ours
    return entry[1]


def _save() -> None:
    """At exit: an entry for each text this run compiled."""
    import marshal

    from parcalc.sealed_file import write_sealed

    for path, entry in _fresh.items():
        write_sealed(path, marshal.dumps(entry))
    _fresh.clear()
