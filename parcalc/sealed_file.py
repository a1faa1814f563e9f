"""Cache entries sealed by a digest: a BLAKE2b digest of the payload, then the payload, in a file of this user's that
nobody else may write. The preset cache (parcalc.preset_cache: parsed YAML) and the code cache (parcalc.code_cache:
compiled @frozen __init__s) keep their marshal payloads so. The digest is checked before marshal reads a byte
(marshal is not written to read damaged data); beyond that an entry is trusted as the interpreter trusts
__pycache__: a file of this user's that nobody else may write (only_ours). Why BLAKE2b and marshal:
parcalc.preset_cache's docstring."""

from __future__ import annotations

import os
from pathlib import Path

try:
    from _blake2 import blake2b  # CPython's builtin BLAKE2, without OpenSSL (parcalc.preset_cache)
except ImportError:  # an interpreter without it
    from hashlib import blake2b

NO_CACHE_VAR = "PARCALC_NO_CACHE"  # set: neither cache is read or written

SEAL_BYTES = 32


def seal(payload: bytes) -> bytes:
    return blake2b(payload, digest_size=SEAL_BYTES).digest()


def only_ours(cached: Path) -> bool:
    """The entry is this user's and nobody else may write it (a cache is as trusted as what it stands
    for: one that another account can change is not used)."""
    try:
        info = cached.stat()
    except OSError:
        return False
    owner_ok = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return owner_ok and not info.st_mode & 0o022


def read_sealed(cached: Path, max_bytes: int) -> bytes | None:
    """The payload of a sealed entry (its BLAKE2b digest, then the payload), or None when it is absent,
    not a regular file, larger than `max_bytes`, damaged (the digest is checked before anything
    reads the payload) or writable by another account."""
    from parcalc.files import read_regular

    try:
        # read_regular: a FIFO or directory where the entry should be must not block or crash
        sealed = read_regular(cached, max_bytes)
    except (OSError, ValueError):
        return None
    seal_, payload = sealed[:SEAL_BYTES], sealed[SEAL_BYTES:]
    if seal_ != seal(payload) or not only_ours(cached):  # checked before marshal reads a byte (see above)
        return None
    return payload


def write_sealed(cached: Path, payload: bytes) -> None:
    """Write `payload` sealed as read_sealed reads it, in place of any entry there (a whole file or
    none: written aside, then renamed); silently skipped when not possible."""
    entry_bytes = seal(payload) + payload
    temporary = cached.with_name(f"{cached.name}.{os.getpid()}.part")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary.unlink(missing_ok=True)  # a leftover of a killed run with the same pid
        # O_EXCL | O_NOFOLLOW: never write through a FIFO or link someone left at that name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(temporary, flags, 0o600), "wb") as stream:
            stream.write(entry_bytes)
        os.replace(temporary, cached)  # fails on a directory at that name: then no cache
    except OSError:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        return
