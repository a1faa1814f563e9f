"""Shared fixtures: a CLI runner at a fixed width, and JSON invocation helpers."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app

os.environ.setdefault("COLUMNS", "120")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})


@pytest.fixture
def run_json(runner):
    """Invoke parcalc with --format json and return the parsed document (exit code 0 asserted)."""

    def invoke(*args: str) -> dict:
        result = runner.invoke(app, [*args, "--format", "json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return invoke


@pytest.fixture
def run_error(runner):
    """Invoke parcalc expecting a one-line `Error:` and the given exit code; returns the line."""

    def invoke(args: list[str], exit_code: int = 2) -> str:
        result = runner.invoke(app, args)
        assert result.exit_code == exit_code, (result.exit_code, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: "), lines[0]
        assert "Traceback" not in result.output
        return lines[0]

    return invoke


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own preset cache, so no test reads another's parse."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


# ---------------------------------------------------------------------------------------------
# Markers (pyproject.toml registers them): `pytest -m core` runs the core's checks (the library's math, no
# command line, no TeX, no PyTorch) in under a minute; `pytest -m "not slow"` adds the command line; CI
# (scripts/test-all.sh) runs everything. Measured with
# --durations on the whole suite: these tests are ~85 % of its time.
# - ground_truth: real PyTorch on the CPU (autograd, FlopCounterMode, gloo collectives in processes)
# - pdf: a TeX build (a PDF, or its LaTeX compiled), found by what the test's code names
# - slow: both of those, and the wheel, the fuzzing of every command, every command's JSON example
#   checked against its schema, completion scripts run in real shells
_TEX_WORDS = (".pdf", "compile_pdf", "latexmk", "lualatex", "pdftotext")
_SLOW_MODULES = ("test_wheel.py", "test_fuzz_cli.py", "test_json_schema.py")
_SLOW_NAMES = ("_in_bash", "_in_zsh", "_in_fish", "zsh_and_fish")
# - cli: runs the command line (Click's runner, a subprocess); core: the rest of the fast part, the library and its math
_CLI_FIXTURES = {"runner", "run_json", "run_error"}
_CLI_WORDS = ("CliRunner", "invoke(", "subprocess", "run_command(", "from_flags(")


@functools.cache
def _drives_cli(path: Path) -> bool:
    """Whether a test module drives the command line (imports the Click app, or runs it in a terminal)."""
    text = path.read_text(encoding="utf-8")
    return any(word in text for word in ("from parcalc.cli import", "parcalc.__main__", '"-m", "parcalc"', "pty."))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import inspect

    for item in items:
        path = item.path
        if "ground_truth" in path.parts:
            item.add_marker(pytest.mark.ground_truth)
            item.add_marker(pytest.mark.slow)
            continue
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(function) if function is not None else ""
        except (OSError, TypeError):
            source = ""
        if path.name == "test_pdf_layout.py" or any(word in source for word in _TEX_WORDS):
            item.add_marker(pytest.mark.pdf)
            item.add_marker(pytest.mark.slow)
        elif path.name in _SLOW_MODULES or any(name in item.name for name in _SLOW_NAMES):
            item.add_marker(pytest.mark.slow)
        elif set(getattr(item, "fixturenames", ())) & _CLI_FIXTURES or any(word in source for word in _CLI_WORDS) or _drives_cli(path):
            item.add_marker(pytest.mark.cli)
        else:
            item.add_marker(pytest.mark.core)
