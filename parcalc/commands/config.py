"""The --config FILE flag of every command (parcalc.cli gives it to each): the run file, read by
parcalc.runfile, becomes the command's defaults, and a bad value from it is said to come from it."""

from __future__ import annotations

from typing import Any


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
