"""Running a command from a mapping of its flags, without Click: the library (parcalc.api), run
files, sweeps and worksheets come here.

`run_command("memory", {"model": "llama3-8b", "tp": 8})` reads the inputs as a run file's
(parcalc.runfile.defaults_for: flag names or Python names; numbers, text with units, lists for a
repeatable flag, true / false for a switch), checks each as the command line's parser does
(a choice in any case, a whole number, a required flag or argument), and calls the command's
module in parcalc.results with them: the same parsing, presets, checks and messages as the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.errors import InputError

if TYPE_CHECKING:
    from parcalc.derivation import Result
    from parcalc.runfile import CommandSignature, ParamSpec


def run_command(command_name: str, inputs: Mapping[str, Any], label: str = "inputs", base: Path | None = None) -> Result:
    """Run `parcalc COMMAND` with `inputs` as its flags and return its Result. Bad input raises
    InputError, an infeasible request InfeasibleError."""
    import importlib
    import warnings

    from parcalc.results import MODULES
    from parcalc.runfile import OUTPUT_KEYS, defaults_for, signature

    command = signature(command_name)  # an unknown command: InputError
    given = defaults_for(command, command_name, inputs, label, base, refuse=OUTPUT_KEYS)
    values = flag_values(command, given, label)
    module, _, function = MODULES[command_name].partition(":")
    compute = getattr(importlib.import_module(module), function or "from_flags")
    with warnings.catch_warnings():  # as the CLI: numpy's overflow warnings at the float range's ends
        warnings.simplefilter("ignore", RuntimeWarning)
        result: Result = compute(**values)
    from parcalc.results.parse import check_finite

    check_finite(result)
    return result


def flag_values(command: CommandSignature, given: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Every parameter of `command` as the command's function receives it from the command line:
    `given` (texts, tuples of texts, booleans, as parcalc.runfile.defaults_for gives them) checked
    and converted, the default where a flag is not given. The messages are the command line's."""
    values: dict[str, Any] = {}
    for param in command.params:
        if param.name == "table":  # --format csv's table: no calculation input (the library returns every table)
            continue
        if param.name not in given:
            if param.required:
                what = "argument" if param.param_type_name == "argument" else "option"
                name = param.human_readable_name if what == "argument" else param.opts[0]
                raise InputError(f"Missing {what} {name!r}.")
            values[param.name] = _default(param)
            continue
        value = given[param.name]
        if param.multiple:
            values[param.name] = [_one(param, v, label) for v in value] or None
        else:
            values[param.name] = _one(param, value, label)
    return values


def _default(param: ParamSpec) -> Any:
    if param.multiple:
        return None
    if param.default is None or param.is_flag:
        return param.default
    if param.type == "path":
        return Path(param.default)
    if param.type == "choice":
        return _one(param, param.default, "")
    return param.default


def _one(param: ParamSpec, value: Any, label: str) -> Any:
    if param.is_flag:
        return value
    where = f" (from {label})" if label else ""
    if param.type == "choice":
        lowered = {choice.lower(): choice for choice in param.choices}
        if str(value).lower() not in lowered:
            listed = ", ".join(repr(c) for c in param.choices)
            raise InputError(f"Invalid value for {_hint(param)}: {value!r} is not one of {listed}.{where}")
        chosen = lowered[str(value).lower()]
        if param.enum:  # as the command's function takes it (Typer gives it the Enum)
            import importlib

            module, _, name = param.enum.rpartition(".")
            return getattr(importlib.import_module(module), name)(chosen)
        return chosen
    if param.type == "int":
        try:
            return int(value)
        except ValueError:
            raise InputError(f"Invalid value for {_hint(param)}: {value!r} is not a valid int.{where}") from None
    if param.type == "path":
        return Path(value)
    return value


def _hint(param: ParamSpec) -> str:
    if param.param_type_name == "argument":
        return repr(param.human_readable_name)
    return " / ".join(repr(o) for o in param.opts)
