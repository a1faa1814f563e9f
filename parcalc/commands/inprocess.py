"""Running a Click command in-process, and the --config flag of every command.

parcalc.results.run runs the commands that have moved to the results layer without Click; a
command that has not (parcalc.results.MODULES lists those that have) runs here, through its Click
command, with its Result captured (parcalc.commands.common.captured_results). `--config FILE`
(parcalc.cli gives every command the flag) reads the file with parcalc.runfile and makes its flags
the command's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parcalc.derivation import Result


# ---------------------------------------------------------------------------------------------
# The --config flag of every command


def apply_config(ctx: Any, command: Any, command_name: str, source: str) -> None:
    """--config SOURCE of `command` (parcalc.cli gives every command the flag, eager, so that this
    runs before any other parameter is read): the file's flags become the context's default_map,
    which click consults for every flag not given on the command line."""
    from parcalc.runfile import check_command, defaults_for, read_run_file

    run = read_run_file(source)
    ctx.meta[_LABEL] = run.label
    check_command(run, command_name)
    defaults = defaults_for(command, command_name, run.inputs, run.label, run.base)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


_LABEL = "parcalc.run_file"


def from_run_file(error: Exception, label: str | None = None) -> str:
    """" (from run.yaml)" when click's `error` is about a value that came from a run file (the
    context's default_map), else "": click's message names the flag, not where its value was."""
    ctx, param = getattr(error, "ctx", None), getattr(error, "param", None)
    if ctx is None or param is None or not getattr(param, "name", None):
        return ""
    source = ctx.get_parameter_source(param.name)  # click's ParameterSource (vendored by typer 0.26+)
    if getattr(source, "name", "") != "DEFAULT_MAP":
        return ""
    label = label or ctx.meta.get(_LABEL)
    return f" (from {label})" if label else ""


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
