"""Shared fixtures: a CLI runner at a fixed width, and JSON invocation helpers."""

from __future__ import annotations

import json
import os

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
