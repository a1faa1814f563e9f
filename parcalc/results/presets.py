"""`presets list` and `presets show`: what GPUs, links, models, frameworks and worksheets parcalc
knows, and every field of one preset with its unit and source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parcalc.derivation import Result

CATEGORY_NAMES = ("gpus", "links", "models", "worksheets", "frameworks")


def list_result(category: str | None = None, presets: list[Path] | None = None) -> Result:
    """The presets of `category` (every category when None), each with the file it comes from."""
    from parcalc.core.catalog import catalog_result
    from parcalc.errors import InputError
    from parcalc.presets import Category, find_all
    from parcalc.results.parse import preset_dirs

    if category is not None and category.lower() not in CATEGORY_NAMES:
        raise InputError(f"unknown category {category!r}; use one of {', '.join(CATEGORY_NAMES)}")
    chosen = [Category(category.lower())] if category else list(Category)
    listing = {c.value: [(p.key, str(p.path), p.origin) for p in find_all(c, preset_dirs(presets))] for c in chosen}
    return catalog_result(listing)


def show_result(name: str, presets: list[Path] | None = None) -> Result:
    """Every field of the preset `name`, in whichever category it is, with units and sources."""
    from parcalc.core.catalog import preset_result
    from parcalc.presets import find_in_any_category, load_any
    from parcalc.results.parse import preset_dirs

    found = find_in_any_category(name, preset_dirs(presets))
    preset, typed, _ = load_any(found.category, found.key, preset_dirs(presets))
    return preset_result(preset.category.value, preset.key, str(preset.path), typed)
