"""What `presets list` learns by reading a preset as the commands read it, kept between runs, so that the listing
validates only the files (or the code) that changed since.

`presets list` reads every preset it shows as the commands that name it would (session 21: a file that cannot be read
is listed `broken: ...`, with the whole reason): building the typed GPU, link, model and framework of ~70 packaged
presets, ~690 quantities parsed and checked, took ~15 ms of CPU a run and loaded the validators' modules, the same
answer every time. What a row holds (its description and its problem, or none) depends on two things only: the
preset's bytes, and parcalc's code that reads them. An entry here keeps both beside the row, as Python's __pycache__
keeps a module's bytecode beside its source's modification time and size (PEP 552's default, timestamp-based .pyc):

- the BLAKE2b digest and size of the preset's bytes (the preset cache's stamp, parcalc.preset_cache: an edit in place
  that puts the time back is still seen);
- the path, modification time (ns) and size of every module of the parcalc package that was loaded when the row was
  made: the validators and whatever they called (a superset: everything the process had loaded), each checked with one
  stat per run.

An entry is used only when the preset's digest and every module's stamp are as recorded, and when it was written by
an interpreter of the same bytecode (its folder is named by it, as parcalc.code_cache's is): an edited preset, a
changed validator, a parcalc upgraded in place or another Python is a miss, and the row is made again and its entry
rewritten. The entries are sealed as the other caches' are (parcalc.sealed_file); PARCALC_NO_CACHE=1 turns it off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_ENTRY_BYTES = 1 << 20  # a row, its stamps and ~100 module paths: a few kilobytes; anything larger is not ours

_stats: dict[str, tuple[int, int] | None] = {}  # a module file's (mtime_ns, size), stat'ed once a process


def cached_row(path: Path, make: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    """make() -> (description, problem) of the preset at `path`, or the row an earlier run made of the same bytes with
    the same code."""
    entry = _entry(path)
    if entry is None:
        return make()
    cached, identity, stamp = entry
    row = _read(cached, identity, stamp)
    if row is not None:
        return row
    row = make()
    _write(cached, (identity, stamp, _code_stamps(), row))
    return row


def _entry(path: Path) -> tuple[Path, str, tuple[str, int]] | None:
    """(entry file, the path as found and the file it leads to, (digest, size) of the preset's bytes); None when there
    is no cache or no file."""
    from parcalc.files import MAX_PRESET_BYTES, read_regular
    from parcalc.resources import home_dir
    from parcalc.sealed_file import NO_CACHE_VAR, blake2b

    root = home_dir("XDG_CACHE_HOME", ".cache")
    if os.environ.get(NO_CACHE_VAR) or root is None:
        return None
    try:
        data = read_regular(path, MAX_PRESET_BYTES)
        # the path as found (its file name is the preset's key, which a problem line may name) and the file it leads to
        identity = f"{path.absolute()}\0{path.resolve()}"
    except (OSError, ValueError, RuntimeError):
        return None  # the row's own reading says why
    from importlib.util import MAGIC_NUMBER

    folder = root / "parcalc" / "preset-rows" / MAGIC_NUMBER.hex()
    name = blake2b(os.fsencode(identity), digest_size=16).hexdigest() + ".marshal"
    return folder / name, identity, (blake2b(data, digest_size=32).hexdigest(), len(data))


def _read(cached: Path, identity: str, stamp: tuple[str, int]) -> tuple[str, str] | None:
    import marshal

    from parcalc.sealed_file import read_sealed

    payload = read_sealed(cached, MAX_ENTRY_BYTES)
    if payload is None:
        return None
    try:
        record: Any = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not (type(record) is tuple and len(record) == 4 and record[0] == identity and record[1] == stamp):
        return None
    code, row = record[2], record[3]
    if not (type(code) is tuple and code and type(row) is tuple and len(row) == 2 and all(type(v) is str for v in row)):
        return None
    for module in code:
        if not (type(module) is tuple and len(module) == 3 and _stat(module[0]) == module[1:]):
            return None  # a module changed, moved or went: the row is made again
    return row


def _code_stamps() -> tuple[tuple[str, int, int], ...]:
    """(file, mtime_ns, size) of every module of the parcalc package loaded now."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    files = sorted({f for m in list(sys.modules.values()) if isinstance(f := getattr(m, "__file__", None), str)
                    and os.path.abspath(f).startswith(package)})  # fmt: skip
    stamps = []
    for file in files:
        stat = _stat(file)
        if stat is not None:
            stamps.append((file, *stat))
    return tuple(stamps)


def _stat(file: str) -> tuple[int, int] | None:
    if file not in _stats:
        try:
            info = os.stat(file)
            _stats[file] = (info.st_mtime_ns, info.st_size)
        except OSError:
            _stats[file] = None
    return _stats[file]


def _write(cached: Path, record: tuple[Any, ...]) -> None:
    import marshal

    from parcalc.sealed_file import write_sealed

    write_sealed(cached, marshal.dumps(record))
