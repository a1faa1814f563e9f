"""Run files: `--config FILE` (YAML, TOML, stdin) on every command; bad files are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parcalc.cli import COMMANDS, NO_CONFIG, app, load_command

# GPT-3 175B from flags as Korthikanti et al. (2022) give it: t = 8, p = 8, SP, selective
# recomputation: 34 sbh/t = 106,954,752 bytes per layer; the first stage holds 12 layers x 8
# micro-batches in flight = 10,267,656,192 bytes (tests/test_cli_memory.py checks the same on flags).
KORTHIKANTI_YAML = """\
layers: 96
hidden: 12288
heads: 96
vocab: 51200
seq-len: 2048
micro-batch: 1
tp: 8
pp: 8
sequence-parallel: true
recompute: selective
"""
KORTHIKANTI_FLAGS = ["--layers", "96", "--hidden", "12288", "--heads", "96", "--vocab", "51200", "--seq-len", "2048",
                     "--micro-batch", "1", "--tp", "8", "--pp", "8", "--sequence-parallel", "--recompute", "selective"]  # fmt: skip


def _json(runner, args: list[str], stdin: str | None = None) -> dict:
    result = runner.invoke(app, [*args, "--format", "json"], input=stdin)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _same(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "parcalc"} == {k: v for k, v in b.items() if k != "parcalc"}


def test_a_run_file_gives_what_its_flags_give(runner, tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(KORTHIKANTI_YAML)
    from_file = _json(runner, ["memory", "--config", str(run)])
    assert from_file["results"]["stage_activations"]["value"] == 10_267_656_192
    assert from_file["results"]["activation_per_layer"]["value"] == 106_954_752
    assert _same(from_file, _json(runner, ["memory", *KORTHIKANTI_FLAGS]))


def test_the_command_line_wins_over_the_file(runner, tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(KORTHIKANTI_YAML)
    doc = _json(runner, ["memory", "--config", str(run), "--tp", "4"])
    # t = 4 from the command line: 34 sbh / 4 = 213,909,504 bytes per layer (twice t = 8's)
    assert doc["inputs"]["tp"]["value"] == 4
    assert doc["results"]["activation_per_layer"]["value"] == 2 * 106_954_752
    # before or after --config, the command line wins
    assert _same(doc, _json(runner, ["memory", "--tp", "4", "--config", str(run)]))


def test_toml_and_stdin_read_the_same(runner, tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text('layers = 96\nhidden = 12288\nheads = 96\nvocab = 51200\n"seq-len" = 2048\nmicro_batch = 1\n'
                    'tp = 8\npp = 8\nsequence_parallel = true\nrecompute = "selective"\n')  # fmt: skip
    from_toml = _json(runner, ["memory", "--config", str(toml)])
    from_stdin = _json(runner, ["memory", "--config", "-"], stdin=KORTHIKANTI_YAML)
    assert from_toml["results"]["stage_activations"]["value"] == 10_267_656_192
    assert _same(from_toml, from_stdin)


def test_switches_lists_and_negative_forms(runner, tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("command: memory\nmodel: llama3-70b\nseq-len: 4096\ndp: 8\nzero: 2\ngpu: h100-sxm5\n"
                   "offload: [optimizer, activations]\ndropout: true\n")  # fmt: skip
    flags = ["memory", "--model", "llama3-70b", "--seq-len", "4096", "--dp", "8", "--zero", "2", "--gpu", "h100-sxm5",
             "--offload", "optimizer", "--offload", "activations", "--dropout"]  # fmt: skip
    assert _same(_json(runner, ["memory", "--config", str(run)]), _json(runner, flags))
    run.write_text("model: llama3-70b\nno-dropout: true\n")
    assert _json(runner, ["memory", "--config", str(run)])["settings"]["dropout"] is False
    run.write_text("model: llama3-70b\ndropout: true\n")
    assert _json(runner, ["memory", "--config", str(run)])["settings"]["dropout"] is True
    # a switch in the file is turned off from the command line by its --no- form
    assert _json(runner, ["memory", "--config", str(run), "--no-dropout"])["settings"]["dropout"] is False


def test_a_relative_path_is_read_beside_the_run_file(runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from parcalc.resources import data_dir

    timings = (data_dir("presets") / "worksheets" / "lab-ddp-timings.csv").read_text()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text(timings)
    (tmp_path / "data" / "run.yaml").write_text("file: t.csv\ntime-is: epoch\nsection: [speedup]\n")
    monkeypatch.chdir(tmp_path)
    doc = _json(runner, ["analyze", "--config", "data/run.yaml"])
    assert doc == _json(runner, ["analyze", "data/t.csv", "--time-is", "epoch", "--section", "speedup"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("- tp\n", "must be a mapping of flag names to values (e.g. `tp: 8`), not a list", id="a-list"),
        pytest.param("8\n", "must be a mapping of flag names to values", id="a-number"),
        pytest.param("", "empty; a run file is a mapping", id="empty"),
        pytest.param("tpp: 8\n", "memory has no flag for the key 'tpp' (did you mean 'tp'?)", id="did-you-mean"),
        pytest.param("tp: [1, 2]\n", "key 'tp': takes one value, got a list of 2", id="list-for-one"),
        pytest.param("tp: {a: 1}\n", "key 'tp': must be a value or a list, not a mapping", id="mapping"),
        pytest.param("sequence-parallel: 1\n", "key 'sequence-parallel': a switch, true or false, got 1", id="switch"),
        pytest.param("gpu: true\n", "key 'gpu': takes a value such as NAME, got true", id="bool-for-value"),
        pytest.param("a: &x [1, 2]\nb: [*x, *x]\n", "YAML aliases (*x) are not allowed", id="alias-bomb"),
        pytest.param("tp: 1\ntp: 2\n", "duplicate key 'tp'", id="duplicate"),
        pytest.param("tp: 8\nseq_len: 1\nseq-len: 2\n", "keys 'seq_len' and 'seq-len' set the same flag", id="twice"),
        pytest.param("x: " + "[" * 40 + "]" * 40 + "\n", "nested more than 32 levels deep", id="deep"),
        pytest.param("command: fit\n", "key 'command': the file is for 'fit', not 'memory'", id="other-command"),
        pytest.param("config: other.yaml\n", "a run file cannot name another run file", id="config-in-config"),
        pytest.param("help: true\n", "not a calculation input", id="help"),
        pytest.param("zero: 7\n", "Invalid value for '--zero': '7' is not one of '0', '1', '2', '3'. (from", id="click-choice"),
        pytest.param("model: gpt3-175b\ntp: -1\n", "--tp: '-1' must not be negative", id="command-check"),
        pytest.param("tp: 8\n\t: x", "invalid YAML", id="bad-yaml"),
    ],
)
def test_bad_run_files_are_one_line(run_error, tmp_path: Path, text: str, expected: str) -> None:
    run = tmp_path / "run.yaml"
    run.write_text(text)
    line = run_error(["memory", "--config", str(run)])
    assert expected in line, line


def test_bad_files_on_disk(run_error, tmp_path: Path) -> None:
    assert "--config: no such file" in run_error(["memory", "--config", str(tmp_path / "none.yaml")])
    assert "--config: give a file name (or - for stdin)" in run_error(["memory", "--config", ""])
    assert "is a directory" in run_error(["memory", "--config", str(tmp_path)])
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    assert "is more than the limit of 1048576" in run_error(["memory", "--config", str(big)])
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"tp: \xff\xfe\n")
    assert "not UTF-8 text" in run_error(["memory", "--config", str(binary)])
    toml = tmp_path / "bad.toml"
    toml.write_text("tp = \n")
    assert "invalid TOML" in run_error(["memory", "--config", str(toml)])
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    line = run_error(["memory", "--config", str(deep)])
    assert "nested too deeply" in line or "invalid TOML" in line


def test_every_command_takes_config_and_shows_its_example(runner) -> None:
    leaves = []
    for name in COMMANDS:
        if name in NO_CONFIG:
            continue
        command = load_command(name)
        subcommands = getattr(command, "commands", None)
        leaves += [(f"{name} {sub}", c) for sub, c in subcommands.items()] if subcommands else [(name, command)]
    assert len(leaves) >= 12  # the eight calculations, report, presets list/show, calibrate gemm/nccl
    for path, command in leaves:
        assert any(p.name == "config" and "--config" in getattr(p, "opts", ()) for p in command.params), path
        assert f"parcalc {path} --config run.yaml" in (command.epilog or ""), path
        result = runner.invoke(app, [*path.split(), "--help"])
        assert result.exit_code == 0 and "--config FILE" in result.stdout, path
