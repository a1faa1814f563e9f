"""`parcalc sweep` and parcalc.sweeps: a command over a grid, one row per point, invalid points as rows."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from parcalc.cli import app

# GPT-3 175B's shape (96 layers, h = 12288, 96 heads, s = 2048, b = 1) on 8 pipeline stages with
# selective recomputation. Activation bytes per layer, Korthikanti et al. (2022) Table 2:
# sbh (10 + 24/t) without sequence parallelism, 34 sbh / t with it (sbh = 25,165,824).
RUN = """\
command: memory
layers: 96
hidden: 12288
heads: 96
vocab: 51200
seq-len: 2048
micro-batch: 1
pp: 8
recompute: selective
"""
SBH = 2048 * 1 * 12288
EXPECTED = {
    (4, True): 34 * SBH // 4,  # 213,909,504
    (4, False): SBH * (10 + 24 // 4),  # 402,653,184
    (8, True): 34 * SBH // 8,  # 106,954,752
    (8, False): SBH * (10 + 24 // 8),  # 327,155,712
}
# t = 5 does not divide the 96 heads: what `parcalc memory --tp 5` prints after "Error: "
TP5_REASON = "--tp: 5 does not divide the attention heads (96); tensor parallelism gives each rank an equal share"


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    return path


def test_csv_rows_per_point_with_invalid_points_as_rows(runner, run_file: Path) -> None:
    result = runner.invoke(app, ["sweep", str(run_file), "--vary", "tp=4,5,8", "--vary", "sequence-parallel=true,false"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["tp"], r["sequence-parallel"]) for r in rows] == [
        ("4", "true"), ("4", "false"), ("5", "true"), ("5", "false"), ("8", "true"), ("8", "false")]  # fmt: skip
    for row in rows:
        if row["tp"] == "5":
            assert (row["status"], row["error"], row["activation_per_layer"]) == ("error", TP5_REASON, "")
        else:
            key = (int(row["tp"]), row["sequence-parallel"] == "true")
            assert row["status"] == "ok" and row["error"] == ""
            assert int(row["activation_per_layer"]) == EXPECTED[key]
    assert "sweep memory: 6 points (4 ok, 2 errors)" in result.stderr
    # the CLI's own error for the same point is the row's reason
    direct = runner.invoke(app, ["memory", "--config", str(run_file), "--tp", "5"])
    assert direct.stderr.strip() == f"Error: {TP5_REASON}"


def test_json_output_to_a_file(runner, run_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    result = runner.invoke(app, ["sweep", str(run_file), "--vary", "tp=4,8", "--vary", "sequence-parallel=true", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["command"] == "memory" and doc["vary"] == {"tp": [4, 8], "sequence-parallel": [True]}
    assert doc["units"]["activation_per_layer"] == "B"
    assert [r["point"] for r in doc["rows"]] == [{"tp": 4, "sequence-parallel": True}, {"tp": 8, "sequence-parallel": True}]
    assert [r["results"]["activation_per_layer"] for r in doc["rows"]] == [EXPECTED[(4, True)], EXPECTED[(8, True)]]
    assert all(r["status"] == "ok" and r["error"] is None for r in doc["rows"])


def test_the_point_overrides_the_file_and_stdin_works(runner) -> None:
    text = RUN.replace("seq-len: 2048", "seq_len: 1024") + "tp: 2\n"  # the grid's tp and seq-len replace these
    result = runner.invoke(app, ["sweep", "-", "--vary", "tp=8", "--vary", "seq-len=2048", "-f", "json"], input=text)
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rows"][0]
    assert row["results"]["activation_per_layer"] == EXPECTED[(8, False)]


def test_exit_codes_when_no_point_succeeds(runner, run_file: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["sweep", str(run_file), "--vary", "tp=5,7"])
    assert result.exit_code == 2
    assert [r["status"] for r in csv.DictReader(io.StringIO(result.stdout))] == ["error", "error"]
    # nothing fits: InfeasibleError, exit 1 (fit --search of GPT-3 175B on 8 A100s needs 369 GiB per GPU)
    fit = tmp_path / "fit.yaml"
    fit.write_text("command: fit\nmodel: gpt3-175b\ngpu: a100-sxm4-80gb\ngpus: 8\nbatch: 8\nsearch: true\n")
    result = runner.invoke(app, ["sweep", str(fit), "--vary", "seq-len=2048"])
    assert result.exit_code == 1
    (row,) = csv.DictReader(io.StringIO(result.stdout))
    assert row["status"] == "infeasible" and row["error"].startswith("nothing fits:")


def test_a_run_without_vary_is_one_row(runner, run_file: Path) -> None:
    result = runner.invoke(app, ["sweep", str(run_file), "-f", "json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["rows"]
    assert len(rows) == 1 and rows[0]["point"] == {} and rows[0]["results"]["activation_per_layer"] == SBH * (10 + 24)  # t = 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--vary", "tp"], "--vary: 'tp': write KEY=V1,V2,...", id="no-equals"),
        pytest.param(["--vary", "tp="], "--vary tp: an empty value", id="empty"),
        pytest.param(["--vary", "tp=1,,2"], "--vary tp: an empty value", id="empty-item"),
        pytest.param(["--vary", "tpp=1"], "memory has no flag for the key 'tpp' (did you mean 'tp'?)", id="did-you-mean"),
        pytest.param(["--vary", "tp=1", "--vary", "tp=2"], "--vary tp: given twice", id="twice"),
        pytest.param(["--vary", "format=json"], "--vary format: the caller chooses the output", id="format"),
        pytest.param(["--vary", "sequence-parallel=maybe"], "a switch takes true or false, got 'maybe'", id="switch"),
        pytest.param(["--vary", "tp=" + ",".join(map(str, range(1, 101))), "--vary", "pp=" + ",".join(map(str, range(1, 102)))],
                     "more than 10,000 points", id="too-many"),
        pytest.param(["-f", "xml"], "--format: 'xml' is not one of csv, json", id="format-value"),
        pytest.param(["-o", "out.txt"], "--output: use .csv or .json", id="output-suffix"),
    ],
)
def test_bad_sweeps_are_one_line(run_error, run_file: Path, args: list[str], expected: str) -> None:
    line = run_error(["sweep", str(run_file), *args])
    assert expected in line, line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("model: gpt3-175b\n", "name the command to sweep, e.g. `command: fit`", id="no-command"),
        pytest.param("command: report\n", "'report' is not a calculation", id="not-a-calculation"),
        pytest.param("command: memroy\n", "(did you mean 'memory'?)", id="command-typo"),
        pytest.param("command: memory\noutput: x.csv\n", "key 'output': the caller chooses the output", id="output-key"),
        pytest.param("command: memory\ntpp: 1\n", "memory has no flag for the key 'tpp'", id="unknown-key"),
        pytest.param("[1, 2]\n", "must be a mapping", id="a-list"),
    ],
)
def test_bad_run_files_fail_the_sweep_once(run_error, tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    line = run_error(["sweep", str(path), "--vary", "tp=1,2"])
    assert expected in line, line


def test_library_sweep_and_records() -> None:
    import parcalc

    s = parcalc.sweep("memory", {"tp": [4, 5], "sequence_parallel": [True]}, layers=96, hidden=12288, heads=96,
                      vocab=51200, seq_len=2048, pp=8, recompute="selective")  # fmt: skip
    assert s.succeeded == 1
    ok, bad = s.records()
    assert ok["activation_per_layer"] == EXPECTED[(4, True)] and ok["status"] == "ok"
    assert bad["status"] == "error" and bad["error"] == TP5_REASON and bad["activation_per_layer"] is None
    assert s.rows[0].result is not None and s.rows[0].result.command == "memory"


def test_toml_values_json_cannot_hold_are_shown_as_text(runner, tmp_path: Path) -> None:
    # TOML has infinities and dates, JSON neither: the sweep's `inputs` shows them as text, and the
    # point fails as `parcalc memory --tp inf` does
    path = tmp_path / "run.toml"
    path.write_text('command = "memory"\nmodel = "gpt3-175b"\ntp = inf\ngpu = 1979-05-27\n')
    result = runner.invoke(app, ["sweep", str(path), "-f", "json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["inputs"] == {"model": "gpt3-175b", "tp": "inf", "gpu": "1979-05-27"}
    assert doc["rows"][0]["error"] == "--tp: 'inf' is not a finite number"


def test_a_sweep_without_its_results_keeps_what_its_rows_print() -> None:
    """Issue 28: the CLI's sweep kept every point's Result (a bubble's whole timeline: 2,000 points took
    2.5 GB); with keep_results=False a row holds its verdict and values only, and prints the same.
    Measured: 400 bubble points with --timeline at p = 8, peak RSS 213 MB before, 34 MB after."""
    from parcalc.sweeps import run_sweep

    inputs = {"pp": 4, "timeline": True}
    kept = run_sweep("bubble", inputs, {"micro-batches": ("8", "16")})
    lean = run_sweep("bubble", inputs, {"micro-batches": ("8", "16")}, keep_results=False)
    assert all(row.result is not None for row in kept.rows) and all(row.result is None for row in lean.rows)
    assert lean.to_csv() == kept.to_csv() and lean.to_dict() == kept.to_dict()
    # p = 4, m = 8: bubble share of total time (p - 1)/(m + p - 1) = 3/11 (Narayanan et al. 2021, sec. 2.2.1)
    assert lean.rows[0].values()["bubble_share"] == pytest.approx(3 / 11)
