"""`presets list` and `presets show`: what GPUs, links, models, frameworks and worksheets parcalc
knows, and every field of one preset with its unit and source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parcalc.derivation import Result
    from parcalc.preset_files import PresetFile

CATEGORY_NAMES = ("gpus", "links", "models", "worksheets", "frameworks")


def list_result(category: str | None = None, presets: list[Path] | None = None) -> Result:
    """The presets of `category` (every category when None), each with the file it comes from; each is read as the
    commands that name it read it, and one that cannot be says so (its description 'broken: ...', the column `problem`,
    and a verdict with the whole reason, the line `presets show` and every command naming it fail with)."""
    from dataclasses import replace
    from functools import partial

    from parcalc.core.catalog import catalog_result
    from parcalc.errors import InputError
    from parcalc.preset_files import Category, find_all
    from parcalc.preset_verdicts import cached_row
    from parcalc.results.parse import preset_dirs

    if category is not None and category.lower() not in CATEGORY_NAMES:
        raise InputError(f"unknown category {category!r}; use one of {', '.join(CATEGORY_NAMES)}")
    chosen = [Category(category.lower())] if category else list(Category)
    listing, broken = {}, []
    for c in chosen:
        rows = []
        for p in find_all(c, preset_dirs(presets)):
            description, problem = cached_row(p.path, partial(_read, p))  # validated again only where it or the code changed
            if problem:
                broken.append(f"{c.value}/{p.key} ({p.origin}) cannot be read: {problem}; `parcalc presets show {p.key}` and every "
                              "command that names it stop with this line")  # fmt: skip
            rows.append((p.key, _shown_path(p), p.origin, _clipped("broken: " + problem) if problem else description, problem))
        listing[c.value] = rows
    result = catalog_result(listing)
    return replace(result, verdicts=tuple(broken)) if broken else result


def _read(preset: PresetFile) -> tuple[str, str]:
    """(description, problem) of `preset` from one read, as the commands that name it read it: its one line and "", or ""
    and why it cannot be read (its error line, less the file's path, which the listing shows)."""
    from parcalc.errors import ParcalcError
    from parcalc.preset_files import control_character
    from parcalc.presets import read_preset

    try:
        _, document = read_preset(preset)
    except (ParcalcError, OSError, ValueError) as error:
        text = str(error).removeprefix(f"{preset.path}: ")
        return "", "".join("?" if control_character(ch) else ch for ch in text) or type(error).__name__
    return _description(document), ""


def _shown_path(preset: PresetFile) -> str:
    """A user's preset file in full; none for a packaged one (issue 28: every row was an absolute path into the
    package, and the listing did not fit 80 columns)."""
    return "" if preset.origin == "packaged" else str(preset.path)


def _description(document: dict) -> str:
    """The preset's one line: its `name:` (a worksheet's `title:`), never a control character (file contents reach the
    terminal)."""
    from parcalc.preset_files import control_character

    text = document.get("name") or document.get("title") or ""
    if not isinstance(text, str) or control_character(text):
        return ""
    return _clipped(text)


def _clipped(text: str) -> str:
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1] + "…"


# The listing's name, description, origin and file columns within 80 terminal columns (`presets show` has the whole name).
DESCRIPTION_CHARS = 34


def show_result(name: str, presets: list[Path] | None = None) -> Result:
    """Every field of the preset `name`, in whichever category it is, with units and sources."""
    from dataclasses import replace

    from parcalc.core.catalog import preset_result
    from parcalc.presets import find_in_any_category, load_any
    from parcalc.results.parse import preset_dirs

    found = find_in_any_category(name, preset_dirs(presets))
    preset, typed, _ = load_any(found.category, found.key, preset_dirs(presets))
    result = preset_result(preset.category.value, preset.key, str(preset.path), typed)
    # the brief terminal form (parcalc.render.brief): each field once, in human units (1.83 GHz, not
    # 1,830,000,000 Hz beside it); the raw value, its unit and the long sources are --detail full's (issue 28)
    tables = tuple(replace(t, brief_columns=("field", "as_read")) if t.key == "fields" else t for t in result.tables)
    return replace(result, tables=tables)
