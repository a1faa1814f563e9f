"""The library's signatures, read from the commands' flags: `python -m parcalc.signatures`
writes parcalc/results/signatures.json, which parcalc.api and parcalc.runfile read without
loading Click (one name, one signature for each command and its function).

tests/test_results.py checks that the file is what this module writes today, so a flag added to a
command and not to the file fails there; regenerate it with

    python -m parcalc.signatures > parcalc/results/signatures.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

# Flags that choose where and how a result is printed, and --config (a run file of its own): the
# library returns the Result instead, and the caller gives the inputs.
NOT_ARGUMENTS = ("fmt", "output", "help", "config", "detail")  # detail: how much the text form shows (the library returns all)


def signatures() -> dict[str, Any]:
    """{command: {"help", "epilog", "params": [...]}} for every command the library runs."""
    from parcalc.api import COMMAND_FUNCTIONS
    from parcalc.cli import leaf_command

    out: dict[str, Any] = {}
    for command_name in COMMAND_FUNCTIONS.values():
        command = leaf_command(command_name)
        enums = _enums(command_name)
        out[command_name] = {
            "help": command.help or "",
            "epilog": command.epilog or "",
            "params": [{**_param(p), "enum": enums.get(p.name, "")} for p in command.params if p.name not in NOT_ARGUMENTS],
        }
    return out


def _enums(command_name: str) -> dict[str, str]:
    """{parameter: "module.Enum"} for each choice the command's function takes as an Enum of
    parcalc.core.choices (Click-free), so that the library hands the results layer the same values."""
    import enum
    import importlib
    import typing

    from parcalc.cli import COMMANDS

    spec = COMMANDS.get(command_name)
    if spec is None or not spec.function:
        return {}
    function = getattr(importlib.import_module(spec.module), spec.function)
    out: dict[str, str] = {}
    for name, hint in typing.get_type_hints(function).items():
        for kind in typing.get_args(hint) or (hint,):
            kind = (typing.get_args(kind) or (kind,))[0] if typing.get_origin(kind) is list else kind
            if isinstance(kind, type) and issubclass(kind, enum.Enum) and kind.__module__ == "parcalc.core.choices":
                out[name] = f"{kind.__module__}.{kind.__qualname__}"
    return out


def _param(param: Any) -> dict[str, Any]:
    argument = getattr(param, "param_type_name", "") == "argument"
    kind = type(param.type).__name__
    default = param.default
    if isinstance(default, (list, tuple)):
        default = list(default) or None
    default = getattr(default, "value", default)  # an Enum as its value, as typed
    record: dict[str, Any] = {
        "name": param.name,
        "argument": argument,
        "flags": [o for o in getattr(param, "opts", ()) if o.startswith("--")],
        "negative": [o for o in getattr(param, "secondary_opts", ()) if o.startswith("--")],
        "switch": bool(getattr(param, "is_flag", False) and getattr(param, "is_bool_flag", True)),
        "repeatable": bool(getattr(param, "multiple", False) or getattr(param, "nargs", 1) == -1),
        "required": bool(param.required),
        "default": default,
        "type": "choice" if "Choice" in kind else "path" if "Path" in kind else "int" if kind == "IntParamType" else "text",
        "choices": list(getattr(param.type, "choices", ()) or ()),
        "metavar": getattr(param, "metavar", None) or "",
        "help": getattr(param, "help", None) or "",
    }
    if not argument and not record["flags"]:  # --table's callback option has its flag; every option has one
        record["flags"] = [o for o in param.opts if o.startswith("-")]
    return record


def main() -> None:
    sys.stdout.write(json.dumps(signatures(), indent=1, ensure_ascii=False, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
