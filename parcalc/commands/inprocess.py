"""Running a Click command in-process: parcalc.results.run runs the commands that have moved to
the results layer without Click; a command that has not (parcalc.results.MODULES lists those that
have) runs here, through its Click command, with its Result captured
(parcalc.commands.common.captured_results)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parcalc.derivation import Result


# ---------------------------------------------------------------------------------------------
# The --config flag of every command


# ---------------------------------------------------------------------------------------------
# Running a command in-process


def run_click_command(command_name: str, inputs: Mapping[str, Any], label: str = "inputs", base: Path | None = None,
                      args: tuple[str, ...] = ()) -> Result:  # fmt: skip
    """Run `parcalc COMMAND` in-process with `inputs` as its flags (and `args` on its command
    line) and return its Result: the same parsing, presets, checks and errors as the CLI. Bad
    input raises InputError (a click usage error becomes one too), an infeasible request
    InfeasibleError. parcalc.worksheet runs its calculations the same way (captured_results)."""
    import warnings

    from parcalc.cli import _click_exception
    from parcalc.commands.config import from_run_file
    from parcalc.commands.common import captured_results
    from parcalc.runfile import OUTPUT_KEYS, defaults_for

    command = leaf_command(command_name)
    defaults = defaults_for(command, command_name, inputs, label, base, refuse=OUTPUT_KEYS)
    sink: list[Result] = []
    token = captured_results.set(sink)
    try:
        with warnings.catch_warnings():  # as the CLI: numpy's overflow warnings at the float range's ends
            warnings.simplefilter("ignore", RuntimeWarning)
            command.main(args=list(args), prog_name=f"parcalc {command_name}", standalone_mode=False, default_map=defaults)
    except _click_exception() as error:
        raise InputError(error.format_message() + from_run_file(error, label)) from None  # type: ignore[attr-defined]
    finally:
        captured_results.reset(token)
    if len(sink) != 1:
        raise InputError(f"{command_name} produced {len(sink)} results, expected one")
    return sink[0]


def leaf_command(command_name: str) -> Any:
    """The click command of `command_name`: "memory", or "presets show" for a group's command."""
    from parcalc.cli import COMMANDS, load_command, unknown_command
    from parcalc.errors import InputError, shown

    group, _, sub = command_name.partition(" ")
    if group not in COMMANDS:
        raise InputError(unknown_command(group, sorted(COMMANDS)))
    command = load_command(group)
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        if sub:
            raise InputError(f"{group} has no subcommands; got {shown(command_name)}")
        return command
    if sub not in subcommands:
        raise InputError(f"{group}: name one of its commands ({', '.join(sorted(subcommands))}), e.g. '{group} {sorted(subcommands)[0]}'")
    return subcommands[sub]
