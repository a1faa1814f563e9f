"""The `parcalc` command: a thin Typer layer over the library.

Each command parses its flags, loads presets, makes one core call and hands the result to one
renderer. Errors from the core (ParcalcError) and from flag parsing become one line on stderr,
`Error: ...`, with exit code 2 for bad input and 1 for an infeasible request or failed render.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from parcalc.commands.intensity import EXAMPLES as INTENSITY_EXAMPLES
from parcalc.commands.intensity import intensity
from parcalc.commands.peak_flops import EXAMPLES as PEAK_EXAMPLES
from parcalc.commands.peak_flops import peak_flops
from parcalc.commands.presets import presets_app
from parcalc.errors import ParcalcError


def _click_exception() -> type[Exception]:
    """Click's base exception, whether typer vendors click (0.29+) or depends on it."""
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == "ClickException")


class OneLineErrors(TyperGroup):
    """Turns every expected failure into one line on stderr and the right exit code."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except ParcalcError as error:
            typer.echo(f"Error: {error}", err=True)
            sys.exit(error.exit_code)
        except _click_exception() as error:
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `parcalc`: show help, not an error
                typer.echo(error.format_message())  # type: ignore[attr-defined]
                sys.exit(0)
            context = getattr(error, "ctx", None)
            hint = f" (see '{context.command_path} --help')" if context is not None else ""
            typer.echo(f"Error: {error.format_message()}{hint}", err=True)  # type: ignore[attr-defined]
            sys.exit(error.exit_code)  # type: ignore[attr-defined]
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    name="parcalc",
    help="What does a parallel training run cost, and what fits? Peak FLOP/s, arithmetic intensity, "
    "communication volume, pipeline bubbles, memory and configuration search, each with its derivation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

@app.callback()
def parcalc_main() -> None:
    """What does a parallel training run cost, and what fits? Every answer comes with its derivation."""


app.command("peak-flops", epilog=PEAK_EXAMPLES)(peak_flops)
app.command("intensity", epilog=INTENSITY_EXAMPLES)(intensity)
app.add_typer(presets_app, name="presets")


def main() -> None:  # pragma: no cover - the console script calls `app` directly
    app()
