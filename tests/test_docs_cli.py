"""docs/cli.md is the live app's help: regenerated, it must come out the same."""

from __future__ import annotations

from pathlib import Path

from parcalc.cli import COMMANDS
from parcalc.docs_cli import REGENERATE, command_paths, reference

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_cli_reference_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == reference(), f"docs/cli.md is out of date: run `{REGENERATE}`"


def test_cli_reference_has_every_command_and_flag() -> None:
    page = PAGE.read_text(encoding="utf-8")
    names = {" ".join(path) for path in command_paths()}
    assert set(COMMANDS) <= names and {"presets list", "presets show", "calibrate gemm", "calibrate nccl"} <= names
    for name in sorted(names):
        assert f"\n## parcalc {name}\n" in page if name else "\n## parcalc\n" in page
    for flag in ("--version", "--show-completion", "--gpu", "--model", "--strategy", "--search", "--presets", "--format"):
        assert flag in page
