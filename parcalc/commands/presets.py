"""`parcalc presets list|show`: what GPUs, links, models and worksheets parcalc knows, with sources
(parcalc.results.presets)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, OutputOption, PresetsOption, finish, start

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



@presets_app.command("list", epilog=LIST_EXAMPLES)
def list_presets(
    category: Annotated[Optional[str], typer.Argument(metavar="[gpus|links|models|worksheets|frameworks]", help="Only this category.")] = None,  # noqa: UP045
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """List presets by category, with the file each comes from."""
    start(output, fmt)
    from parcalc.results.presets import list_result

    finish(list_result(category, presets), fmt, output)


@presets_app.command("show", epilog=SHOW_EXAMPLES)
def show_preset(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Preset name, e.g. a100-sxm4-80gb.")],
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Every field of one preset, with units and sources."""
    start(output, fmt)
    from parcalc.results.presets import show_result

    finish(show_result(name, presets), fmt, output)
