"""Finding preset files: the categories, the directories searched in order, a name checked and
looked up case-insensitively with "did you mean" (parcalc.presets reads what is found).

Each preset is one file, `<dir>/<category>/<name>.yaml`, so that a lookup parses only the file
asked for. Directories are searched in this order, the first match winning:

1. directories given with `--presets DIR` (the `extra_dirs` argument);
2. `PARCALC_PRESETS` (several directories separated by the OS path separator);
3. `$XDG_CONFIG_HOME/parcalc/presets` (default `~/.config/parcalc/presets`);
4. the presets packaged with parcalc.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import Path

from parcalc.errors import PresetError, shown
from parcalc.frozen import frozen
from parcalc.resources import data_dir, home_dir

ENV_VAR = "PARCALC_PRESETS"


class Category(str, Enum):
    GPUS = "gpus"
    LINKS = "links"
    MODELS = "models"
    WORKSHEETS = "worksheets"
    FRAMEWORKS = "frameworks"

    @property
    def singular(self) -> str:
        return self.value.removesuffix("s")


@frozen
class PresetFile:
    """A preset found on disk: its lookup name, file and where it came from."""

    category: Category
    key: str
    path: Path
    origin: str


# ---------------------------------------------------------------------------------------------
# Finding files


def search_dirs(extra_dirs: Sequence[Path | str] = ()) -> list[tuple[Path, str]]:
    """(directory, origin label) in lookup order."""
    dirs: list[tuple[Path, str]] = [(Path(d), "--presets") for d in extra_dirs]
    dirs += [(d, ENV_VAR) for d in env_dirs()]
    config = home_dir("XDG_CONFIG_HOME", ".config")
    if config is not None:  # no home: no user preset directory
        dirs.append((config / "parcalc" / "presets", "XDG config"))
    dirs.append((data_dir("presets"), "packaged"))
    return dirs


def env_dirs() -> list[Path]:
    """The directories PARCALC_PRESETS names (separated by the OS path separator; empty parts ignored). The commands check
    each as they check --presets (parcalc.results.parse.preset_dirs: one that gives nothing is an error)."""
    return [Path(d) for d in os.environ.get(ENV_VAR, "").split(os.pathsep) if d]


def _preset_files(folder: Path) -> list[Path]:
    """The .yaml/.yml regular files of `folder`, sorted; none when it cannot be listed.

    A directory on the preset path that is missing or unreadable (no permission, a file where a
    directory should be) holds nothing usable: it is skipped, like a missing one, rather than
    crashing every command. FIFOs and devices named *.yaml are skipped too (reading one would
    block), and so are names with control characters, which would reach the terminal in listings.
    """
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    files = []
    for path in entries:
        try:
            if path.suffix in (".yaml", ".yml") and not control_character(path.stem) and _inside(path, folder):
                files.append(path)
        except OSError:
            continue
    return files


def _inside(path: Path, folder: Path) -> bool:
    """`path` is a regular file that stays inside `folder` once links are followed.

    A preset directory someone shared may hold `gpus/x.yaml -> ~/.ssh/id_rsa`: a link out of the
    folder would be read, and a parse error would quote what it found there. Links within the
    folder (one name for another preset) are fine.
    """
    if not path.is_file():
        return False
    if not path.is_symlink():
        return True
    return path.resolve().is_relative_to(folder.resolve())


def find_all(category: Category, extra_dirs: Sequence[Path | str] = ()) -> list[PresetFile]:
    """Every preset of a category, the first of each name in lookup order, sorted by name."""
    found: dict[str, PresetFile] = {}
    for directory, origin in search_dirs(extra_dirs):
        files = _preset_files(directory / category.value)
        for path in [p for p in files if p.suffix == ".yaml"] + [p for p in files if p.suffix == ".yml"]:
            found.setdefault(path.stem.lower(), PresetFile(category, path.stem.lower(), path, origin))
    return sorted(found.values(), key=lambda p: p.key)


def check_preset_name(category: Category, name: str) -> str:
    """`name` as a lookup key, or a one-line error: a preset name is a file's stem, nothing more.

    A separator or '..' would reach outside the preset folder (`--gpu ../../some/dir/evil`, also
    from a worksheet's inputs); more than 255 bytes is no file name (the file system raised
    ENAMETOOLONG); a control character would be echoed to the terminal.
    """
    wanted = name.strip().lower()
    unknown = f"unknown {category.singular} {shown(name)}"
    if any(ch in wanted for ch in "/\\") or ".." in wanted:
        raise PresetError(f"{unknown}: a preset name has no '/', '\\' or '..' (put the file in DIR/{category.value}/ and use --presets DIR)")
    if len(os.fsencode(wanted)) > 255 - len(".yaml"):
        raise PresetError(f"{unknown}: a preset name is at most 250 bytes")
    if control_character(wanted):
        raise PresetError(f"{unknown}: a preset name has no control characters")
    return wanted


def find(category: Category, name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """The preset called `name` (case-insensitive); unknown names get "did you mean"."""
    wanted = check_preset_name(category, name)
    for directory, origin in search_dirs(extra_dirs) if wanted else ():
        folder = directory / category.value
        for suffix in (".yaml", ".yml"):
            path = folder / f"{wanted}{suffix}"
            try:
                if _inside(path, folder):
                    return PresetFile(category, wanted, path, origin)
                if path.is_symlink() and path.is_file():
                    raise PresetError(f"{path}: links outside {folder}; parcalc follows a preset's link only within its folder (copy the file there)")
            except OSError:  # an unreadable directory on the preset path: skipped (see _preset_files)
                break
        for path in _preset_files(folder):  # case-insensitive file systems aside, match names ignoring case
            if path.stem.lower() == wanted:
                return PresetFile(category, wanted, path, origin)
    known = [p.key for p in find_all(category, extra_dirs)]
    raise PresetError(f"unknown {category.singular} {shown(name)}{did_you_mean(wanted, known)}")


# C0 and C1 controls and DEL (an ANSI escape starts with ESC), and the bidirectional overrides that
# make text display other than it reads. Newline and tab only where a field allows several lines.
_CONTROLS = frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_CONTROLS_BUT_NEWLINES = _CONTROLS - {"\n", "\t"}


def control_character(text: str, allow_newlines: bool = False) -> str | None:
    """The first control character of `text` (as a repr), or None; see _CONTROLS."""
    controls = _CONTROLS_BUT_NEWLINES if allow_newlines else _CONTROLS
    if controls.isdisjoint(text):  # the usual answer, without a step of Python per character (a preset's notes)
        return None
    return next(repr(ch) for ch in text if ch in controls)


def did_you_mean(wanted: str, known: Iterable[str]) -> str:
    known = list(known)
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5)
    close += [k for k in known if wanted and wanted in k and k not in close][: 3 - len(close)]
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    return f"; see `parcalc presets list` ({len(known)} known)"
