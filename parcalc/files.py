"""Reading input files without hanging and writing outputs all or nothing.

Both `parcalc.output` and `parcalc.render.pdf` write through `write_atomically`, so it lives here
rather than in either (they used to import each other). Import-light on purpose: the preset cache
reads through `read_regular` on every one-liner, so `tempfile` is imported only when writing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from parcalc.errors import InputError, shown

# Linux and macOS both refuse a path component longer than this (NAME_MAX); checked up front so that
# a long name is a one-line error rather than an OSError from deep inside pathlib.
NAME_MAX_BYTES = 255


def check_name_length(path: Path, label: str) -> None:
    """Refuse a path with a component longer than NAME_MAX_BYTES (ENAMETOOLONG otherwise)."""
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX_BYTES:
            raise InputError(f"{label}: file name {shown(part)} is longer than {NAME_MAX_BYTES} bytes")


def check_writable(output: Path) -> None:
    """Fail before any work if the output cannot be written (missing or read-only directory)."""
    if str(output) == "-":  # `-o -` is stdout in many tools (and --config - reads stdin); here it made a file named '-'
        raise InputError("--output: '-' would be a file named '-'; leave -o out to print to stdout")
    try:
        check_name_length(output, "--output")
        info = os.stat(output) if os.path.lexists(output) else None
    except FileNotFoundError:  # a dangling symlink: its target will be created
        info = None
    except OSError as error:
        raise InputError(f"--output: cannot use {shown(str(output))}: {error.strerror or error}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise InputError(f"--output: {shown(str(output))} is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        # a device or FIFO is written in place (parcalc.files), so only the node must be writable
        if not os.access(output, os.W_OK):
            raise InputError(f"--output: {shown(str(output))} is not writable")
        return
    # a symlink's target is what gets replaced: check the directory it lives in
    target = Path(os.path.realpath(output))
    directory = target.parent
    try:
        directory_exists = directory.is_dir()
    except OSError as error:  # a path longer than the system takes (PATH_MAX, 4,096 bytes on Linux): it was exit 70
        raise InputError(f"--output: cannot use {shown(str(output))}: {error.strerror or error}") from None
    if not directory_exists:
        # the nearest part of the path that exists says which: a file or a link in the way, or a directory not made yet
        blocking = next((part for part in output.parents if os.path.lexists(part)), None)
        if blocking is not None and os.path.islink(blocking) and not blocking.is_dir():
            raise InputError(f"--output: {shown(str(blocking))} is a link that leads to no directory")
        if blocking is not None and not blocking.is_dir():
            raise InputError(f"--output: {shown(str(blocking))} is a file, not a directory")
        raise InputError(f"--output: directory {shown(str(output.parent))} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--output: directory {shown(str(directory))} is not writable")
    if info is not None and not os.access(output, os.W_OK):
        raise InputError(f"--output: {shown(str(output))} is not writable")


def beside(base: Path | None, text: str) -> str:
    """`text` as a path found beside `base` (a run file's or worksheet's folder) when it is relative and there,
    else as given: the files a run file or worksheet names are read from beside it."""
    if base is not None and text and not Path(text).is_absolute():
        candidate = base / text
        try:
            if candidate.is_file():
                return str(candidate)
        except OSError:
            pass
    return text


# The largest data file parcalc reads whole (a preset, a run file, a config.json): 1 MiB; the largest
# preset shipped is ~40 kB.
MAX_PRESET_BYTES = 1 << 20


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of `path` if it is a regular file of at most `max_bytes`.

    Opened with O_NONBLOCK, then checked with fstat: a FIFO or device put where a preset or cache
    file is expected would otherwise block `read()` forever (a FIFO with no writer) or never end
    (/dev/zero). Raises OSError (IsADirectoryError, or a ValueError for a non-regular file or an
    oversize one) for the caller to turn into its own message.
    """
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        info = os.fstat(descriptor)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(21, "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise TooLargeError(f"{info.st_size} bytes is more than the limit of {max_bytes}")
        chunks = []
        remaining = max_bytes + 1  # a file that grows while being read is still cut off
        while remaining > 0:
            chunk = os.read(descriptor, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise TooLargeError(f"more than the limit of {max_bytes} bytes")
        return data
    finally:
        os.close(descriptor)


class NotRegularFileError(ValueError):
    """A FIFO, device or socket where a file's contents were expected."""


class TooLargeError(ValueError):
    """A file over the size limit of what parcalc reads."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def write_atomically(output: Path, data: str | bytes, label: str = "--output") -> None:
    """Write `data` to `output` so that a reader never sees half a file and no node is replaced.

    - a regular file or a new name: written to a temporary file beside it, then renamed over it
      (a failed run leaves the old file as it was, and no partial file);
    - a symlink: the same for the file it points to, so that the link stays a link (renaming over
      the link itself would replace it with a regular file);
    - a device or FIFO (/dev/null, /dev/stdout, a named pipe): opened and written in place, since
      a rename would replace the node with a regular file (`> /dev/null` must stay a device).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        check_name_length(output, label)
        try:
            info = os.stat(output)  # follows symlinks: what the name finally points to
        except FileNotFoundError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise InputError(f"{label}: {shown(str(output))} is a directory")
        if info is not None and not stat.S_ISREG(info.st_mode):
            _write_in_place(output, payload)
            return
        # realpath, not the link: /dev/stdout -> /proc/self/fd/1 -> pipe:[...] never gets here (not
        # regular), and a dangling link gets its target created, as `>` would.
        _replace(Path(os.path.realpath(output)), payload)
    except OSError as error:
        raise InputError(f"{label}: cannot write {shown(str(output))}: {error.strerror or error}") from None


def _write_in_place(output: Path, payload: bytes) -> None:
    # No O_CREAT (the node exists) and no O_TRUNC (meaningless for devices and FIFOs). Opening a
    # FIFO for writing waits for a reader, as a shell's `>` does.
    descriptor = os.open(output, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(payload)


def _replace(target: Path, payload: bytes) -> None:
    import tempfile

    directory = target.parent
    # the temporary name stays within NAME_MAX however long the target's name is
    with terminate_raises():  # SIGTERM mid-write: the .part file goes too (issue 28)
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name[:50]}.", suffix=".part", dir=directory)
        _fill(handle, temporary, target, payload)


def _fill(handle: int, temporary: str, target: Path, payload: bytes) -> None:
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
        # mkstemp creates 0600; a written report should get the usual mode (0666 less umask)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class terminate_raises:  # used as a context manager, named as the function it replaced
    """Within the block, SIGTERM raises SystemExit (exit 143) instead of ending Python on the spot, so
    that cleanup runs on the way out: a temporary file removed, a child process killed. Only the main
    thread may set signal handlers; elsewhere the block runs as it is. (A class, not contextlib's
    decorator: this module is imported by every one-liner, and only a write enters the block.)"""

    def __enter__(self) -> None:
        import signal
        import threading

        self._main = threading.current_thread() is threading.main_thread()
        if self._main:
            self._previous = signal.signal(signal.SIGTERM, _terminate)

    def __exit__(self, *exc: object) -> None:
        if self._main:
            import signal

            signal.signal(signal.SIGTERM, self._previous)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
