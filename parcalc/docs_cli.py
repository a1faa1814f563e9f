"""The CLI reference, docs/cli.md, written from the live Typer app: every command's --help.

    python -m parcalc.docs_cli > docs/cli.md

tests/test_docs_cli.py fails when docs/cli.md differs from what this prints, so the page cannot
drift from the flags. The help is rendered at a fixed width (WIDTH columns) without colour, so
the page does not depend on the terminal it was made in.
"""

from __future__ import annotations

import sys

WIDTH = 100  # parcalc.cli's max_content_width: the widest the help ever gets
REGENERATE = "python -m parcalc.docs_cli > docs/cli.md"


def command_paths() -> list[list[str]]:
    """[], then every command and subcommand of the app, as argument lists, in help order."""
    from typer.main import get_command

    from parcalc.cli import app

    group = get_command(app)
    paths: list[list[str]] = [[]]

    def walk(command: object, path: list[str]) -> None:
        context = None
        for name in command.list_commands(context):  # type: ignore[attr-defined]
            sub = command.get_command(context, name)  # type: ignore[attr-defined]
            paths.append([*path, name])
            if hasattr(sub, "list_commands"):
                walk(sub, [*path, name])

    walk(group, [])
    return paths


def help_text(path: list[str]) -> str:
    """`parcalc PATH --help` as a user sees it at WIDTH columns, without colour."""
    from typer.testing import CliRunner

    from parcalc.cli import app

    env = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb", "PARCALC_PRESETS": ""}
    # terminal_width: click's Context setting, which subcommands inherit; without it click asks the
    # terminal (shutil.get_terminal_size), and the page would depend on where it was made
    result = CliRunner(env=env).invoke(app, [*path, "--help"], prog_name="parcalc", terminal_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"parcalc {' '.join(path)} --help exited {result.exit_code}: {result.output}")
    return result.stdout.rstrip() + "\n"


def reference() -> str:
    """The whole page."""
    paths = command_paths()
    lines = [
        "# Command-line reference",
        "",
        f"Generated from the live app by `{REGENERATE}`; do not edit by hand",
        "(tests/test_docs_cli.py fails when this page is out of date). Each section is the command's",
        "`--help`; the README explains the conventions shared by all of them.",
        "",
    ]
    lines += [f"- [`{' '.join(['parcalc', *path])}`](#{_anchor(path)})" for path in paths]
    for path in paths:
        lines += ["", f"## {' '.join(['parcalc', *path])}", "", "```text", help_text(path).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _anchor(path: list[str]) -> str:
    """GitHub's anchor of the heading `parcalc PATH`: lower case, spaces as '-', no other punctuation."""
    return "-".join(["parcalc", *path]).lower()


def main() -> None:
    sys.stdout.write(reference())


if __name__ == "__main__":
    main()
