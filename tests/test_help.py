"""Every command has help with at least one runnable example, and the README mentions it."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer

from parcalc.cli import app
from parcalc.help_panels import examples_block

ROOT = Path(__file__).resolve().parent.parent


def command_paths() -> list[list[str]]:
    """Every leaf command as its argument path, e.g. ["presets", "list"]."""
    group = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(command, prefix: list[str]) -> None:
        if hasattr(command, "list_commands"):
            for name in command.list_commands(None):
                walk(command.get_command(None, name), [*prefix, name])
        else:
            paths.append(prefix)

    walk(group, [])
    return paths


COMMANDS = command_paths()


def test_there_are_commands() -> None:
    assert ["peak-flops"] in COMMANDS and ["intensity"] in COMMANDS and ["presets", "list"] in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_help_has_examples_that_run(runner, path: list[str]) -> None:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.stdout
    # a long example is folded to the help's width with shell continuations (parcalc.help_panels.fold_command)
    block = examples_block(result.stdout).replace("\\\n", " ")
    examples = [line.strip() for line in block.splitlines() if line.strip().startswith("parcalc ")]
    assert examples, "at least one example"
    first = shlex.split(examples[0])[1:]
    ran = runner.invoke(app, first)
    assert ran.exit_code == 0, (examples[0], ran.output)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_readme_documents_each_command(path: list[str]) -> None:
    assert f"`{path[0]}" in (ROOT / "README.md").read_text()


def test_bare_parcalc_shows_help(runner) -> None:
    result = runner.invoke(app, [])
    assert result.exit_code == 0
    assert "peak-flops" in result.stdout


def _leaf_command(path: list[str]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.get_command(None, name)
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_every_flag_is_lower_case_kebab(path: list[str]) -> None:
    """typer 0.27 names an option after its metavar when they match but for case (`dtype` with
    metavar DTYPE became `--DTYPE`, and `--dtype` was 'No such option'); every such option names
    itself, so the flags are the same on every typer the package allows."""
    flags = [name for param in _leaf_command(path).params for name in (*param.opts, *param.secondary_opts) if name.startswith("-")]
    assert flags, path
    assert [flag for flag in flags if flag != flag.lower()] == []
