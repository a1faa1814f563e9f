"""A cache of parsed preset files as JSON, so that a one-liner need not import the YAML parser.

Importing PyYAML costs more than the rest of a `peak-flops` run (about 11 ms of ~90 ms). The
parsed document of each preset file is kept in `$XDG_CACHE_HOME/parcalc/presets/` (default
`~/.cache/parcalc/presets/`), keyed by the file's absolute path and checked against its size and
modification time on every use; validation still runs on every load. Set PARCALC_NO_CACHE=1 to
turn it off. A cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

NO_CACHE_VAR = "PARCALC_NO_CACHE"


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "parcalc" / "presets"


def _entry(path: Path) -> tuple[Path, dict[str, int]] | None:
    if os.environ.get(NO_CACHE_VAR):
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    resolved = str(path.resolve())
    name = hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:32] + ".json"
    return cache_dir() / name, {"mtime_ns": info.st_mtime_ns, "size": info.st_size, "inode": info.st_ino}


def load(path: Path) -> dict[str, Any] | None:
    """The cached document of `path`, or None when absent, stale or unreadable."""
    entry = _entry(path)
    if entry is None:
        return None
    cached, stamp = entry
    try:
        record = json.loads(cached.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("stamp") != stamp or not isinstance(record.get("document"), dict):
        return None
    return record["document"]


def store(path: Path, document: dict[str, Any]) -> None:
    """Remember `document` as the parse of `path`; silently skipped when not possible."""
    entry = _entry(path)
    if entry is None:
        return
    cached, stamp = entry
    try:
        text = json.dumps({"path": str(path), "stamp": stamp, "document": document}, allow_nan=False)
    except (TypeError, ValueError):  # YAML types without a JSON form (dates, say): parse each time
        return
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_suffix(f".{os.getpid()}.part")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, cached)
    except OSError:
        return
