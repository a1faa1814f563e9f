"""`parcalc presets list|show`: what GPUs, links, models and worksheets parcalc knows, with sources."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, OutputOption, PresetsOption, finish, preset_dirs, start

presets_app = typer.Typer(
    help="List and show presets: GPUs, interconnects, models, worksheets.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

LIST_EXAMPLES = """\
\b
Examples:
  parcalc presets list
  parcalc presets list gpus
  parcalc presets list models --format json
"""

SHOW_EXAMPLES = """\
\b
Examples:
  parcalc presets show a100-sxm4-80gb
  parcalc presets show llama3-70b --format json
  parcalc presets show nvlink4
"""

CATEGORY_NAMES = ("gpus", "links", "models", "worksheets", "frameworks")


@presets_app.command("list", epilog=LIST_EXAMPLES)
def list_presets(
    category: Annotated[Optional[str], typer.Argument(metavar="[gpus|links|models|worksheets|frameworks]", help="Only this category.")] = None,  # noqa: UP045
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """List presets by category, with the file each comes from."""
    start(output, fmt)
    from parcalc.core.catalog import catalog_result
    from parcalc.errors import InputError
    from parcalc.presets import Category, find_all

    if category is not None and category.lower() not in CATEGORY_NAMES:
        raise InputError(f"unknown category {category!r}; use one of {', '.join(CATEGORY_NAMES)}")
    chosen = [Category(category.lower())] if category else list(Category)
    listing = {c.value: [(p.key, str(p.path), p.origin) for p in find_all(c, preset_dirs(presets))] for c in chosen}
    finish(catalog_result(listing), fmt, output)


@presets_app.command("show", epilog=SHOW_EXAMPLES)
def show_preset(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Preset name, e.g. a100-sxm4-80gb.")],
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Every field of one preset, with units and sources."""
    start(output, fmt)
    from parcalc.core.catalog import preset_result
    from parcalc.presets import find_in_any_category, load_any

    found = find_in_any_category(name, preset_dirs(presets))
    preset, typed, _ = load_any(found.category, found.key, preset_dirs(presets))
    finish(preset_result(preset.category.value, preset.key, str(preset.path), typed), fmt, output)
