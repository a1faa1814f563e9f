"""Every `parcalc` line of the README runs as written, from a clone (issue 28: the run file's own
example failed, `--price` without `--tokens` was refused, and nothing noticed).

The lines are read from the README's code blocks (``` fences and four-space indents), a trailing
backslash joining the next line, `# comments` dropped; `cat FILE | parcalc ...` feeds FILE on stdin,
`> FILE` writes stdout there. They run in-process in a scratch directory that holds the clone's
examples/ folder, so `-o` files land there and paths such as examples/run.yaml resolve.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from parcalc.cli import app

ROOT = Path(__file__).resolve().parent.parent
# Lines that are not a command to run as written: a placeholder for any command.
PLACEHOLDERS = ("parcalc COMMAND --help",)


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    commands: list[str] = []
    in_fence = False
    fence_is_shell = False
    pending = ""
    for line in lines:
        if line.startswith("```"):
            in_fence = not in_fence
            fence_is_shell = in_fence and line.strip("`").strip() in ("", "sh", "bash", "console")
            continue
        indented = not in_fence and line.startswith("    ") and line.strip().startswith(("parcalc ", "cat "))
        if not ((in_fence and fence_is_shell) or indented or pending):
            continue
        text = line.strip()
        if pending:
            text = pending + " " + text
            pending = ""
        if text.endswith("\\"):
            pending = text[:-1].rstrip()
            continue
        if " && parcalc " in text:  # the install line: `python3 -m venv .venv && ... && parcalc ...`
            text = "parcalc " + text.split(" && parcalc ", 1)[1]
        if re.match(r"^(cat \S+ \| )?parcalc ", text) and not text.startswith(PLACEHOLDERS):
            commands.append(" ".join(shlex.split(text, comments=True)) if "#" in text else text)
    return commands


COMMANDS = readme_commands()


def test_the_readme_has_its_examples() -> None:
    assert len(COMMANDS) > 30
    assert "parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32" in COMMANDS  # the install line's main job
    assert any(c.startswith("cat examples/run.yaml | parcalc fit --config -") for c in COMMANDS)


def test_the_readme_shows_the_run_file_that_ships() -> None:
    """The README's run file is examples/run.yaml, line for line, so its commands can run."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```yaml\n" + (ROOT / "examples" / "run.yaml").read_text(encoding="utf-8") + "```" in readme


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=range(len(COMMANDS)))
def test_readme_line_runs(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    stdin = None
    if command.startswith("cat "):
        feed, command = command[4:].split(" | ", 1)
        stdin = Path(feed).read_text(encoding="utf-8")
    words = shlex.split(command)[1:]
    redirect = None
    if ">" in words:
        at = words.index(">")
        redirect, words = words[at + 1], words[:at]
    result = runner.invoke(app, words, input=stdin)
    assert result.exit_code == 0, (command, result.output[-2000:])
    assert result.stdout.strip() or "-o" in words, command
    if redirect:  # `> ~/.config/...`: written here, in the scratch directory, not in the user's home
        assert result.stdout.strip(), command
    outputs = [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("-o", "--output")]
    for output in outputs:
        assert (tmp_path / output).stat().st_size > 0, output
