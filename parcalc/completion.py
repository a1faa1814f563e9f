"""Shell completion for bash, zsh and fish: commands, flags, and preset names for --gpu, --model,
--link and --inter-node-link.

`parcalc --show-completion SHELL` prints the script of typer's completers (typer/_completion_shared.py:
COMPLETION_SCRIPT_BASH, _ZSH, _FISH); the shell then runs `parcalc` with _PARCALC_COMPLETE set at each
Tab, and click asks the command line's parameters for their completions
(typer/_click/shell_completion.py, ShellComplete.get_completions). Imported only on those paths:
a one-liner never loads it.
"""

from __future__ import annotations

from typing import Any

from parcalc.errors import InputError

SHELLS = ("bash", "zsh", "fish")
PROG_NAME = "parcalc"

# flag -> preset folder whose names complete it
PRESET_FLAGS = {"--gpu": "gpus", "--model": "models", "--link": "links", "--inter-node-link": "links"}


def register_shells() -> None:
    """typer's completers, registered under their shells' names (what typer does for an app made
    with add_completion=True, typer/completion.py: get_completion_inspect_parameters)."""
    from typer._completion_classes import completion_init

    completion_init()


def completion_script(shell: str) -> str:
    """The script that makes `shell` complete parcalc's command line."""
    chosen = shell.strip().lower()
    if chosen not in SHELLS:
        raise InputError(f"--show-completion: no completion for the shell {shell!r}; use one of {', '.join(SHELLS)}")
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name=PROG_NAME, complete_var="_PARCALC_COMPLETE", shell=chosen)


def preset_names(folder: str, incomplete: str, extra_dirs: Any = ()) -> list[str]:
    """The names of the presets in `folder` (gpus, models, links) that start with `incomplete`."""
    from parcalc.preset_files import Category, find_all

    try:
        found = find_all(Category(folder), tuple(extra_dirs or ()))
    except Exception:  # noqa: BLE001 - a completion never fails the shell; it offers nothing
        return []
    return [preset.key for preset in found if preset.key.startswith(incomplete.lower())]


# (subcommand, argument) -> what completes it: `parcalc presets show h1<TAB>` (any category's names),
# `parcalc presets list g<TAB>` (the categories)
ARGUMENTS = {("show", "name"): "any", ("list", "category"): "categories"}


def complete_preset_names(command: Any, name: str = "") -> None:
    """Give the preset flags of `command` (and of its subcommands) completion by preset name, and
    the positional preset names and categories of `presets show` / `presets list` (ARGUMENTS)."""
    for param in getattr(command, "params", ()):
        folders = {PRESET_FLAGS[flag] for flag in getattr(param, "opts", ()) if flag in PRESET_FLAGS}
        if folders:
            param._custom_shell_complete = _completer(folders.pop())
        elif (name, getattr(param, "name", "")) in ARGUMENTS:
            param._custom_shell_complete = _argument_completer(ARGUMENTS[name, param.name])
    for sub_name, sub in getattr(command, "commands", {}).items():
        complete_preset_names(sub, sub_name)


def _completer(folder: str) -> Any:
    def complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        return preset_names(folder, incomplete, ctx.params.get("presets"))

    return complete


def _argument_completer(kind: str) -> Any:
    def complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        from parcalc.preset_files import Category

        if kind == "categories":
            return [c.value for c in Category if c.value.startswith(incomplete.lower())]
        return sorted({n for c in Category for n in preset_names(c.value, incomplete, ctx.params.get("presets"))})

    return complete
