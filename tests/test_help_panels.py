"""--help by section, examples first (issue 28: `fit --help` was 336 lines of options in
declaration order): every option of every command has a panel (parcalc.help_panels)."""

from __future__ import annotations

import inspect

import pytest
from typer.testing import CliRunner

from parcalc.cli import COMMANDS, app, load_command
from parcalc.help_panels import OTHER, PANELS, panel_of


def leaf_commands() -> list[tuple[str, object]]:
    out = []
    for name in COMMANDS:
        command = load_command(name)
        subcommands = getattr(command, "commands", None)
        out += [(f"{name} {sub}", c) for sub, c in subcommands.items()] if subcommands else [(name, command)]
    return out


@pytest.mark.parametrize(("name", "command"), leaf_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_has_a_named_panel(name: str, command: object) -> None:
    """A new flag is given its section in PANELS; one left out would fall under "Other options"."""
    options = [p for p in command.params if getattr(p, "param_type_name", "") == "option"]  # type: ignore[attr-defined]
    unplaced = [p.opts[0] for p in options if panel_of(p) == OTHER]
    assert not unplaced, f"{name}: {unplaced}"
    assert all(getattr(p, "rich_help_panel", None) == panel_of(p) for p in options)


def test_fit_help_reads_by_section_examples_first() -> None:
    text = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1"}).invoke(app, ["fit", "--help"]).stdout
    headings = [line.rstrip(":") for line in text.splitlines() if line and not line[0].isspace() and line.endswith(":")]
    assert headings == ["Model", "Layout", "Training", "Hardware", "Search and run", "Output"]
    assert text.index("  Examples:") < text.index("\nModel:\n")
    layout = text[text.index("\nLayout:\n") : text.index("\nTraining:\n")]
    assert "--tp T" in layout and "--pipeline-layout" in layout and "--batch" not in layout


def test_panels_name_each_flag_once() -> None:
    flags = [flag for group in PANELS.values() for flag in group]
    assert len(flags) == len(set(flags))


def test_lowest_typer_takes_rich_help_panel() -> None:
    """typer's TyperOption takes rich_help_panel (typer 0.6.0 release notes: "Define help panels for
    CLI options", tiangolo/typer PR #419); pyproject allows typer from 0.16."""
    from typer.core import TyperOption

    assert "rich_help_panel" in inspect.signature(TyperOption.__init__).parameters


def test_examples_block_stops_at_the_first_section() -> None:
    from parcalc.help_panels import examples_block

    text = CliRunner(env={"COLUMNS": "100", "NO_COLOR": "1"}).invoke(app, ["fit", "--help"]).stdout
    block = examples_block(text)
    assert block.count("  parcalc fit --model") >= 30 and "parcalc fit --config run.yaml" in block  # fit's EXAMPLES and the run files'
    assert "Model:" not in block and "--tp T" not in block  # the options after them are not examples
