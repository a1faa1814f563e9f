"""A cache of parsed preset files, so that a one-liner need not import the YAML parser.

Importing PyYAML costs more than the rest of a `peak-flops` run (about 11 ms of ~90 ms). The
parsed document of each preset file is kept in `$XDG_CACHE_HOME/parcalc/presets/` (default
`~/.cache/parcalc/presets/`), keyed by the file's absolute path and checked against a BLAKE2b
digest (256 bits) of the file's bytes on every use; validation still runs on every load. Set PARCALC_NO_CACHE=1 to
turn it off. A cache that cannot be read or written is ignored (and rebuilt when it can be).

Why a content hash and not (mtime, size, inode): a same-size edit in place with the modification
time put back (`cp -p`, `rsync -t`, an editor that restores it) kept the old stamp, and the cache
then served values the file no longer held. Hashing a few kilobytes costs microseconds; the file
is read anyway to be parsed on a miss, and the caller hands over those very bytes.

Why BLAKE2b and not SHA-256: `import hashlib` loads OpenSSL's libcrypto (_hashlib), ~2.5 ms of a
one-liner's start-up, while CPython's own BLAKE2 module (_blake2, what hashlib.blake2b is) loads
in ~0.2 ms; both are cryptographic hashes, more than a cache check needs.

Why marshal and not JSON: `import json` (its decoder, scanner and encoder, six regular expressions
compiled) is ~1 ms of every one-liner that reads a preset, and nothing else in a text answer needs
it; marshal is built into the interpreter (it reads every .pyc). An entry is a BLAKE2b digest of
its payload, then the payload: the marshal of (path, stamp, document), the document as the safe
YAML loader made it (dicts, lists, strings, numbers, booleans, None; a value marshal cannot write
back as it was, a YAML date or a NaN say, leaves the file uncached: parsed each time). marshal is
not written to read damaged data (100,000 '[' make it allocate gigabytes), so the digest is checked
before it reads anything: a truncated, corrupted or hand-edited entry is a miss, as a changed YAML
file is. Beyond that the entries are trusted as the interpreter trusts __pycache__: files of this
user that nobody else may write (_only_ours).
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path
from typing import Any

# the entries' seal (parcalc.sealed_file): SEAL_BYTES and _seal also for the tests that read or reseal an entry
from parcalc.sealed_file import NO_CACHE_VAR, SEAL_BYTES, blake2b, read_sealed, write_sealed
from parcalc.sealed_file import seal as _seal

__all__ = ["NO_CACHE_VAR", "SEAL_BYTES", "_seal", "cache_dir", "load", "store"]

# A cache entry is the parse of a preset of at most 1 MiB (parcalc.files.MAX_PRESET_BYTES),
# aliases refused, so a few times that is plenty; anything larger is not ours.
MAX_ENTRY_BYTES = 8 << 20


def cache_dir() -> Path | None:
    """Where cache entries live; None without a home directory (then nothing is cached)."""
    from parcalc.resources import home_dir

    root = home_dir("XDG_CACHE_HOME", ".cache")
    return None if root is None else root / "parcalc" / "presets"


def _entry(path: Path, data: bytes | None) -> tuple[Path, str, dict[str, Any]] | None:
    """(cache file, resolved path, stamp) for `path` whose contents are `data` (read when None)."""
    folder = cache_dir()
    if os.environ.get(NO_CACHE_VAR) or folder is None:
        return None
    try:
        if data is None:
            from parcalc.files import read_regular

            data = read_regular(path, MAX_ENTRY_BYTES)
        resolved = str(path.resolve())
    except (OSError, ValueError, RuntimeError):
        return None
    name = _digest(os.fsencode(resolved))[:32] + ".marshal"
    return folder / name, resolved, {"blake2b": _digest(data), "size": len(data)}


def _digest(data: bytes) -> str:
    return blake2b(data, digest_size=32).hexdigest()


def load(path: Path, data: bytes | None = None) -> dict[str, Any] | None:
    """The cached document of `path` (whose bytes are `data`), or None when absent, stale or unreadable."""
    entry = _entry(path, data)
    if entry is None:
        return None
    cached, resolved, stamp = entry
    payload = read_sealed(cached, MAX_ENTRY_BYTES)
    if payload is None:
        return None
    try:
        record = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not (isinstance(record, tuple) and len(record) == 3 and record[0] == resolved and record[1] == stamp
            and isinstance(record[2], dict)):  # fmt: skip
        return None
    return record[2]


def store(path: Path, document: dict[str, Any], data: bytes | None = None) -> None:
    """Remember `document` as the parse of `path` (bytes `data`); silently skipped when not possible."""
    entry = _entry(path, data)
    if entry is None:
        return
    cached, resolved, stamp = entry
    try:
        payload = marshal.dumps((resolved, stamp, document))
        # read back as it was written, or not cached (a NaN is not equal to itself: parsed each time)
        if marshal.loads(payload) != (resolved, stamp, document):
            return
    except (ValueError, TypeError):  # values marshal cannot write (a YAML date, say): parse each time
        return
    write_sealed(cached, payload)
