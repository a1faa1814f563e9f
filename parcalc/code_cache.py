"""Code that parcalc writes as text at run time, compiled once and kept between runs, as Python keeps a
module's bytecode in __pycache__.

Each @frozen class's __init__ is the text dataclasses writes, compiled when the class's first instance is
made (parcalc.frozen). Compiling costs ~7 us a field (the parser and the compiler), ~0.1-0.2 ms a class in a
fresh process; a one-liner makes instances of 6 to 22 such classes (Term, Derivation, Result, Gpu,
TransformerModel, ...): 1-4 ms of its start-up, the same texts every run. Here the code object compile()
returns is kept, by its text, in `$XDG_CACHE_HOME/parcalc/code/<bytecode magic>.marshal` (default
`~/.cache/parcalc/code/`): marshal writes and reads code objects exactly (it is how .pyc files hold them),
and the file's name changes with the interpreter's bytecode, so a code object is only ever run by an
interpreter that compiled the same text to it. A text not in the file is compiled, and what the run
compiled is added to the file when the process exits.

The file is sealed as the preset cache's entries are (parcalc.sealed_file: a BLAKE2b digest of the payload checked before marshal
reads a byte, this user's file that nobody else may write): a damaged, foreign or missing file is an empty
cache. PARCALC_NO_CACHE=1 turns it off, as it does the preset cache.
"""

from __future__ import annotations

import os
from types import CodeType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

# More texts than parcalc's @frozen classes write many times over: a file that grew past this is
# begun again with the texts of the run that writes it.
MAX_ENTRIES = 4096
MAX_FILE_BYTES = 16 << 20  # ~2 KB a text and its code: past MAX_ENTRIES' worth, not a file of ours

_known: dict[str, CodeType] | None = None  # the file's entries, read at the first compiled() of a process
_fresh: dict[str, CodeType] = {}  # compiled by this process, written at exit


def compiled(text: str) -> CodeType:
    """compile(text, "<string>", "exec", dont_inherit=True), from the cache when an earlier run compiled it."""
    global _known
    if _known is None:
        _known = _read(_file())
    code = _known.get(text)
    if code is None:
        code = compile(text, "<string>", "exec", dont_inherit=True)
        if not _fresh:
            import atexit

            atexit.register(_save)
        _fresh[text] = _known[text] = code
    return code


def _file() -> Path | None:
    from parcalc.resources import home_dir
    from parcalc.sealed_file import NO_CACHE_VAR

    root = home_dir("XDG_CACHE_HOME", ".cache")
    if os.environ.get(NO_CACHE_VAR) or root is None:
        return None
    from importlib.util import MAGIC_NUMBER

    return root / "parcalc" / "code" / f"{MAGIC_NUMBER.hex()}.marshal"


def _read(path: Path | None) -> dict[str, CodeType]:
    """The entries of the file at `path`; empty when there is none or it is not one this module wrote."""
    if path is None:
        return {}
    import marshal

    from parcalc.sealed_file import read_sealed

    payload = read_sealed(path, MAX_FILE_BYTES)
    if payload is None:
        return {}
    try:
        entries = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict) or not all(type(k) is str and type(v) is CodeType for k, v in entries.items()):
        return {}
    return entries


def _save() -> None:
    """At exit: this run's texts added to the file's entries (read again: another run may have added its own)."""
    path = _file()
    if path is None or not _fresh:
        return
    import marshal

    from parcalc.sealed_file import write_sealed

    entries = _read(path)
    if len(entries) + len(_fresh) > MAX_ENTRIES:
        entries = {}
    entries.update(_fresh)
    write_sealed(path, marshal.dumps(entries))
    _fresh.clear()
