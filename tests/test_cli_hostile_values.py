"""Defects found by session 22's sweep of every option and argument of every command with hostile values (0, negative,
1e30, 10**40, nan, inf, '', unicode, a directory, a file without permission, a non-UTF-8 file, then -0, 1e-320, 1e308,
a NUL, an escape sequence, a newline, 400 nines, ...): each was an internal error, exit 70, and is now one `Error:` line,
exit 2, with nothing written. The sweep itself is a loop, not a test (tests/test_hostile_options.py holds the
deterministic sample that runs in CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

import parcalc
from parcalc.errors import InputError

NINES = "9" * 400  # a whole number past the largest float (1.8e308): int() takes it, float() cannot


@pytest.mark.parametrize("command", [
    ["flops", "--model", "homework-7b", "--batch", "8", "--recompute", "full"],
    ["memory", "--model", "homework-7b", "--recompute", "full"],
])  # fmt: skip
def test_recompute_layers_beyond_any_float_is_one_line(run_error, command: list[str]) -> None:
    # was: internal error: OverflowError: int too large to convert to float (the message formatted the count with :.4g)
    line = run_error([*command, "--recompute-layers", NINES])
    assert line.startswith("Error: --recompute-layers: '99999") and line.endswith("(400 characters) is more layers than any model has")
    # a count a float can hold is refused by the same line, shown as typed
    assert run_error([*command, "--recompute-layers", "3000000000"]) == (
        "Error: --recompute-layers: '3000000000' is more layers than any model has")


@pytest.mark.parametrize(("key", "value"), [
    ("output", '"a\\0b.json"'),  # was exit 70: typer's path check (os.stat) raised ValueError: embedded null byte
    ("presets", '["a\\0b"]'),  # was exit 70, the same
    ("model", '"x\\0y.json"'),  # a config.json path: read_regular's os.open raised the same ValueError
])  # fmt: skip
def test_a_nul_in_a_run_file_value_is_one_line(run_error, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str,
                                               value: str) -> None:  # fmt: skip
    # YAML's "\0" escape is a NUL character; no command line can pass one (argv is C strings), a run file can
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run.yaml"
    run.write_text("".join(f"{k}: {v}\n" for k, v in ({"model": "homework-7b", "batch": "8"} | {key: value}).items()), encoding="utf-8")
    line = run_error(["flops", "--config", str(run)])
    assert line == f"Error: {run}: key '{key}': {_nul_shown(key)} holds a NUL character, which no flag value can"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]  # nothing written


def _nul_shown(key: str) -> str:
    return {"output": "'a\\x00b.json'", "presets": "'a\\x00b'", "model": "'x\\x00y.json'"}[key]


def test_the_library_refuses_a_nul_as_the_run_file_does() -> None:
    # parcalc.flops(model="a\0b.json") raised ValueError: embedded null byte from os.open; the library's values go through
    # the run file's checks (parcalc.runfile.defaults_for), so it is the same InputError
    with pytest.raises(InputError, match=r"flops\(\): key 'model': 'a\\x00b.json' holds a NUL character, which no flag value can"):
        parcalc.flops(model="a\x00b.json", batch=8)
    with pytest.raises(InputError, match="key 'presets'"):
        parcalc.flops(model="homework-7b", batch=8, presets=["a\x00b"])


@pytest.mark.parametrize("variable", ["XDG_CACHE_HOME", "XDG_CONFIG_HOME"])
def test_a_relative_xdg_directory_is_ignored(variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the XDG Base Directory Specification 0.8: a relative path in these variables is invalid and ignored; parcalc took
    # it as given, and a run in any folder made relative/dir/parcalc/... there (found by session 22's sweep)
    from parcalc.resources import home_dir

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(variable, "relative/dir")
    assert home_dir(variable, ".x") == tmp_path / "home" / ".x"
    monkeypatch.setenv(variable, str(tmp_path / "absolute"))
    assert home_dir(variable, ".x") == tmp_path / "absolute"


def test_a_run_with_a_relative_cache_home_writes_nothing_where_it_runs(runner, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from parcalc.cli import app

    (tmp_path / "home").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    result = runner.invoke(app, ["presets", "list", "gpus"])
    assert result.exit_code == 0, result.output
    assert list(work.iterdir()) == []  # the caches went to $HOME/.cache, not ./cache
    assert (tmp_path / "home" / ".cache" / "parcalc").is_dir()


PEAK = ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]


def test_an_output_path_longer_than_the_system_takes_is_one_line(run_error, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # 3,000 components of 'a': each within NAME_MAX, the whole past Linux's PATH_MAX (4,096 bytes); pathlib's is_dir()
    # raised OSError ENAMETOOLONG out of check_writable (exit 70); every other file flag already said it in one line
    monkeypatch.chdir(tmp_path)
    line = run_error([*PEAK, "-o", "a/" * 3000 + "x.json"])
    assert line.startswith("Error: --output: cannot use 'a/a/a/") and line.endswith("(6006 characters): File name too long")
    assert list(tmp_path.iterdir()) == []


def test_an_output_below_a_link_loop_names_the_link(run_error, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # two links to each other: the message said "'loop1' is a file, not a directory"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    assert run_error([*PEAK, "-o", "loop1/x.json"]) == "Error: --output: 'loop1' is a link that leads to no directory"
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    assert run_error([*PEAK, "-o", "afile/x.json"]) == "Error: --output: 'afile' is a file, not a directory"
