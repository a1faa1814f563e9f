"""Issue #12: no input may hang, crash, overwrite what it should not, or run code.

Each test is one reproducer from the issue: bad input gives one line `Error: ...` and exit 2
(environment problems exit 1), never a traceback, and nothing on disk changes that should not.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from parcalc.cli import app

PEAK = ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]


def one_line_error(result, exit_code: int = 2) -> str:
    """The single `Error:` line of a failed run (asserting the exit code and no traceback)."""
    assert result.exit_code == exit_code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. -o never replaces a device, FIFO or symlink


def test_output_into_a_fifo_writes_through_it_and_keeps_the_fifo(runner, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def reader() -> None:  # a FIFO's writer blocks until someone reads
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    result = runner.invoke(app, [*PEAK, "-o", str(fifo)])
    thread.join(timeout=30)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert b'"command": "peak-flops"' in received[0]
    assert not list(tmp_path.glob("*.part"))


def test_output_through_a_symlink_replaces_the_target_and_keeps_the_link(runner, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    result = runner.invoke(app, [*PEAK, "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert '"command": "peak-flops"' in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_output_to_dev_null_keeps_the_device(runner) -> None:
    result = runner.invoke(app, [*PEAK, "-o", os.devnull, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_output_to_a_regular_file_leaves_no_partial_file(runner, tmp_path: Path) -> None:
    output = tmp_path / "out.json"
    output.write_text("old")
    result = runner.invoke(app, [*PEAK, "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert '"command"' in output.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_output_name_longer_than_255_bytes_is_one_line(runner, tmp_path: Path) -> None:
    line = one_line_error(runner.invoke(app, [*PEAK, "-o", str(tmp_path / ("x" * 300 + ".json"))]))
    assert "longer than 255 bytes" in line
    assert len(line) < 200


def test_output_and_pdf_no_longer_import_each_other() -> None:
    import ast
    import inspect

    import parcalc.output
    import parcalc.render.pdf

    def imported(module: object) -> set[str]:
        tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
        return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}

    assert "parcalc.output" not in imported(parcalc.render.pdf)
    assert "parcalc.files" in imported(parcalc.render.pdf)
