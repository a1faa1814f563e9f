"""Every option of every command with a hostile value, and every command's -o where nothing can be written
(session 19's QA; the random sample of tests/test_fuzz_cli.py reaches a few options per example, this reaches
them all, deterministically).

What a user may rely on (check_invocation): exit 0, 1 or 2, no traceback, one `Error: ...` line for bad input,
no inf or NaN printed as a result; and no file left behind by a run that failed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.errors import shown
from tests.test_fuzz_cli import BASES, _options, check_invocation

# 0, -1, nan, inf, 1e308, '', a 300-character string and unicode, the brief's list; option i of a command takes value
# i + k of it for k in OFFSETS, so that each option meets two of them and each value many options
HOSTILE = ["0", "-1", "nan", "inf", "1e308", "", "x" * 300, "☃ü日本"]
OFFSETS = (0, 4)


@pytest.mark.slow
@pytest.mark.parametrize("command_name", sorted(BASES))
def test_every_option_takes_hostile_values(command_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a run that writes (or leaves) a file would leave it here
    base = [command_name, *BASES[command_name][0]]
    options = [(flag, choices) for flag, switch, choices, _units in _options(command_name) if not switch]
    assert len(options) >= 3, command_name
    for index, (flag, _choices) in enumerate(options):
        for offset in OFFSETS:
            check_invocation([*base, flag, HOSTILE[(index + offset) % len(HOSTILE)]])
    assert list(tmp_path.iterdir()) == []


# One cheap valid invocation of each command that writes a file with -o.
WRITERS = {
    "peak-flops": ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"],
    "intensity": ["intensity", "--m", "64", "--k", "64", "--n", "64"],
    "comm-volume": ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8"],
    "bubble": ["bubble", "--pp", "4", "--micro-batches", "8"],
    "memory": ["memory", "--model", "homework-7b", "--micro-batch", "1"],
    "flops": ["flops", "--model", "homework-7b", "--batch", "8"],
    "fit": ["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--tp", "2", "--pp", "2", "--dp", "2"],
    "scaling": ["scaling", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "1,2", "--seq-len", "2048", "--batch", "8"],
    "analyze": ["analyze", str(Path(__file__).parent / "fixtures" / "seed002_timings.csv"), "--time-is", "epoch"],
    "presets show": ["presets", "show", "h100-sxm5"],
    "report": ["report", "question2"],
}  # fmt: skip


@pytest.mark.parametrize("command_name", sorted(WRITERS))
@pytest.mark.parametrize(
    ("where", "expected"),
    [
        # parcalc.output.check_output: each of the ways a path cannot take the file, named
        # (each path as errors.shown echoes it: cut at 80 characters, which a pytest-xdist worker's tmp_path can pass)
        pytest.param(lambda tmp: tmp, lambda tmp: f"Error: --output: {shown(str(tmp))} is a directory", id="a-directory"),
        # running as root writes anywhere; a path under a regular file is one no user can write
        pytest.param(lambda tmp: tmp / "file" / "out.md",
                     lambda tmp: f"Error: --output: {shown(str(tmp / 'file'))} is a file, not a directory", id="under-a-file"),
        pytest.param(lambda tmp: tmp / "missing" / "out.md",
                     lambda tmp: f"Error: --output: directory {shown(str(tmp / 'missing'))} does not exist", id="missing-dir"),
    ],
)  # fmt: skip
def test_an_output_that_cannot_be_written_is_one_line(command_name: str, where, expected, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way\n")
    target = where(tmp_path)
    result = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""}).invoke(
        app, [*WRITERS[command_name], "-o", str(target), *(["--format", "markdown"] if target == tmp_path else [])])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == expected(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written, nothing left half-written
    assert (tmp_path / "file").read_text() == "in the way\n"


def test_a_300_character_or_unicode_output_name_is_one_line(tmp_path: Path) -> None:
    """A name longer than the file system's 255 bytes, and a unicode name (which is fine: written)."""
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    long = runner.invoke(app, [*WRITERS["peak-flops"], "-o", str(tmp_path / ("x" * 300 + ".json"))])
    assert long.exit_code == 2 and long.stderr.startswith("Error: --output: ") and len(long.stderr.splitlines()) == 1, long.output
    snow = runner.invoke(app, [*WRITERS["peak-flops"], "-o", str(tmp_path / "☃ü日本.json")])
    assert snow.exit_code == 0, snow.output
    assert [p.name for p in tmp_path.iterdir()] == ["☃ü日本.json"]
    assert os.path.getsize(tmp_path / "☃ü日本.json") > 100
