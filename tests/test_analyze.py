"""`parcalc analyze`: measured timings analysed (issue #16 item 4), checked against seed 002's lab
report (/work/shared/seeds/002_4b950dc85a2a1e7b.txt: tables copied into
tests/fixtures/seed002_timings.csv) and against hand-derived small cases."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.core.analyze import (
    BatchKind,
    Measurement,
    Section,
    TimeKind,
    Timings,
    analyse_timings,
    parallel_efficiency,
    throughput_speedup,
)
from parcalc.core.hardware import Link, Sourced

ROOT = Path(__file__).resolve().parent.parent
SEED002 = Path(__file__).parent / "fixtures" / "seed002_timings.csv"
PACKAGED = ROOT / "presets" / "worksheets" / "lab-ddp-timings.csv"

# Seed 002, Tables 1-3: epoch times (s) by (batch per GPU, GPUs).
EPOCH = {
    (32, 1): 48.61245506070554, (32, 2): 30.818510502576828, (32, 4): 30.8219216464595,
    (128, 1): 27.22366295568645, (128, 2): 20.923493693244424, (128, 4): 19.878172473981977,
    (512, 1): 25.94455107487738, (512, 2): 15.664426802657545, (512, 4): 15.1269,
}  # fmt: skip
# Seed 002, Tables 4-6: communication times (s).
COMM = {(32, 2): 0.14946778118610382, (32, 4): 0.20533965528011322, (128, 2): 0.049557614311409,
        (128, 4): 0.05234416574239731, (512, 2): 0.034110888838768005, (512, 4): 0.03125176951289177}  # fmt: skip


def seed002(link: Link | None = None, message: float | None = None):
    from parcalc.timings_file import read_timings

    data = read_timings(SEED002)
    rows = data.rows if message is None else tuple(Measurement(m.row, m.gpus, m.batch, m.time, m.compute, m.comm, message) for m in data.rows)
    return analyse_timings(Timings(rows, TimeKind.EPOCH, data.batch_kind, "seed002"), link)


def test_fixture_is_the_seed_and_the_packaged_data() -> None:
    analysis = seed002()
    assert {(r.measurement.batch, r.measurement.gpus): r.measurement.time for r in analysis.rows} == EPOCH
    assert {(r.measurement.batch, r.measurement.gpus): r.measurement.comm for r in analysis.rows if r.measurement.comm} == COMM
    assert PACKAGED.read_bytes() == SEED002.read_bytes()  # the worksheet's data is the fixture


# The lab's "Speedup" columns of Tables 2 and 3, as printed. Their arithmetic is right for what
# they compute, which is not what the heading says: each is the time of the previous batch size
# over this one's at the same GPU count (1.78566914893 = 48.61/27.22: batch 32 over batch 128 on
# one GPU), not T(1)/T(N). Table 1's column, "1" for every row, is the baseline of that batch
# comparison (batch 32 against itself), although it reads as a speedup over GPUs: 30.8 s against
# 48.6 s is a speedup of 1.577, not 1.
LAB_SPEEDUP_COLUMN = [
    pytest.param(1, 128, 1.78566914893, id="table2-1gpu"),
    pytest.param(2, 128, 1.47291417745, id="table2-2gpu"),
    pytest.param(4, 128, 1.55054101109, id="table2-4gpu"),
    pytest.param(1, 512, 1.04930175423, id="table3-1gpu"),
    pytest.param(2, 512, 1.33573312045, id="table3-2gpu"),
    pytest.param(4, 512, 1.31409426082, id="table3-4gpu"),
]


@pytest.mark.parametrize(("gpus", "batch", "printed"), LAB_SPEEDUP_COLUMN)
def test_lab_speedup_column_is_a_batch_size_ratio(gpus: int, batch: int, printed: float) -> None:
    table = next(t for t in seed002().result().tables if t.key == "batch")
    row = next(r for r in table.records() if r["gpus"] == gpus and r["batch"] == batch)
    assert row["vs_previous"] == pytest.approx(printed, rel=1e-10)  # the lab prints 12 digits


def test_lab_table1_speedup_of_one_is_the_batch_baseline_not_a_gpu_speedup() -> None:
    analysis = seed002()
    table = next(t for t in analysis.result().tables if t.key == "batch")
    for record in table.records():
        if record["batch"] == 32:
            assert record["vs_previous"] is None and record["vs_first"] == 1.0  # Table 1's "1"
    # the speedup over GPUs that Table 1's heading promises, by hand: 48.612455 / 30.818511
    assert analysis.row(32, 2).speedup == pytest.approx(1.57738, abs=5e-6)
    assert analysis.row(32, 4).speedup == pytest.approx(1.57720, abs=5e-6)


@pytest.mark.parametrize(("batch", "gpus"), sorted(EPOCH))
def test_speedup_and_efficiency_of_every_row(batch: int, gpus: int) -> None:
    """Epoch times: the same data set at every N, so S = T(1)/T(N) and E = S/N (module docstring)."""
    row = seed002().row(batch, gpus)
    expected = EPOCH[(batch, 1)] / EPOCH[(batch, gpus)]
    assert row.speedup == pytest.approx(expected, rel=1e-15)
    assert row.efficiency == pytest.approx(expected / gpus, rel=1e-15)


def test_seed002_headline_values_by_hand() -> None:
    analysis = seed002()
    # 48.61245506 / 30.82192165 = 1.5772039; 25.94455107 / 15.1269 = 1.7151268
    assert analysis.row(32, 4).speedup == pytest.approx(1.5772039, abs=5e-8)
    assert analysis.row(512, 4).speedup == pytest.approx(1.7151268, abs=5e-8)
    assert analysis.row(512, 4).efficiency == pytest.approx(0.4287817, abs=5e-8)
    # Table 4, 2 GPUs: 0.14946778 / 30.81851050 = 0.484994 %; compute 17.71961403 / 30.81851050 = 57.4967 %
    assert analysis.row(32, 2).comm_share == pytest.approx(0.00484994, abs=5e-9)
    assert analysis.row(32, 2).compute_share == pytest.approx(0.574967, abs=5e-7)


# Table 7 of the lab, "Bandwidth Utilization (GB/s)": its text says 0.1718 GB / comm time, but every
# printed value is 0.178 GB / comm time to 11 digits (0.1718 gives 3.6 % less).
TABLE7 = {(32, 2): 1.19089210121, (128, 2): 3.59177903281, (512, 2): 5.21827504529,
          (32, 4): 0.86685642749, (128, 4): 3.40057000576, (512, 4): 5.69567748561}  # fmt: skip


@pytest.mark.parametrize(("batch", "gpus"), sorted(TABLE7))
def test_lab_bandwidth_column_is_algbw_of_0178_gb_and_busbw_beside_it(batch: int, gpus: int) -> None:
    row = seed002(message=0.178e9).row(batch, gpus)
    assert row.algbw == pytest.approx(TABLE7[(batch, gpus)] * 1e9, rel=1e-10)
    # nccl-tests busbw = algbw x 2(n-1)/n: x1 on 2 GPUs, x1.5 on 4 (NVIDIA/nccl-tests doc/PERFORMANCE.md)
    assert row.busbw == pytest.approx(row.algbw * {2: 1.0, 4: 1.5}[gpus], rel=1e-15)
    with_text_size = seed002(message=0.1718e9).row(batch, gpus)
    assert with_text_size.algbw == pytest.approx(0.1718e9 / COMM[(batch, gpus)], rel=1e-15)
    assert with_text_size.algbw / row.algbw == pytest.approx(0.1718 / 0.178, rel=1e-12)


def test_seed002_verdicts_name_the_stagnation_and_acquit_communication() -> None:
    verdicts = seed002().verdicts
    assert any("batch 32 per GPU: throughput falls from 2 to 4 GPUs" in v for v in verdicts)
    assert any("batch 512 per GPU: throughput stagnates from 2 to 4 GPUs (x1.036, ideal x2)" in v for v in verdicts)
    # 4 GPUs, batch 32: 30.82 s against an ideal 30.82 x 2 / 4 = 15.41 s; the comm time 0.2053 s is 1.3 % of the loss
    assert any("communication does not explain it: 0.2053 s is 1.3% of the loss" in v for v in verdicts)
    assert any("compute did not shrink (17.72 s on 2 GPUs, 18.09 s on 4, ideal 8.86 s)" in v for v in verdicts)


# ---------------------------------------------------------------------------------------------
# Hand-derived small cases


def rows(*spec: tuple, **extra) -> tuple[Measurement, ...]:
    return tuple(Measurement(i, g, b, t, **extra.get(str(i), {})) for i, (g, b, t) in enumerate(spec, start=1))


def test_weak_scaling_step_times_by_hand() -> None:
    """Batch 8 per GPU, step times 1.0, 1.25, 1.6 s on 1, 2, 4 GPUs: a step on N GPUs does N times
    the work, so S = N t(1)/t(N) = 2/1.25 = 1.6 and 4/1.6 = 2.5; E = S/N = 0.8 and 0.625; the
    time ratios t(1)/t(N) = 0.8 and 0.625 equal E (weak-scaling efficiency)."""
    analysis = analyse_timings(Timings(rows((1, 8, 1.0), (2, 8, 1.25), (4, 8, 1.6)), TimeKind.STEP, BatchKind.PER_GPU))
    assert [r.speedup for r in analysis.rows] == pytest.approx([1.0, 1.6, 2.5], rel=1e-15)
    assert [r.efficiency for r in analysis.rows] == pytest.approx([1.0, 0.8, 0.625], rel=1e-15)
    assert [r.time_ratio for r in analysis.rows] == pytest.approx([1.0, 0.8, 0.625], rel=1e-15)
    assert [r.global_batch for r in analysis.rows] == [8, 16, 32]


def test_strong_scaling_global_batch_by_hand() -> None:
    """Global batch 64, step times 8, 5, 4 s on 1, 2, 4 GPUs: S = 8/5 = 1.6, 8/4 = 2; E = 0.8, 0.5."""
    analysis = analyse_timings(Timings(rows((1, 64, 8.0), (2, 64, 5.0), (4, 64, 4.0)), TimeKind.STEP, BatchKind.GLOBAL))
    assert [r.speedup for r in analysis.rows] == pytest.approx([1.0, 1.6, 2.0], rel=1e-15)
    assert [r.efficiency for r in analysis.rows] == pytest.approx([1.0, 0.8, 0.5], rel=1e-15)
    assert [r.per_gpu_batch for r in analysis.rows] == [64, 32, 16]


def test_throughput_speedup_conventions() -> None:
    assert throughput_speedup(TimeKind.STEP, BatchKind.PER_GPU, 1, 1.0, 4, 2.0) == 2.0  # 4 x 1/2
    assert throughput_speedup(TimeKind.EPOCH, BatchKind.PER_GPU, 1, 1.0, 4, 2.0) == 0.5  # same data set
    assert throughput_speedup(TimeKind.STEP, BatchKind.GLOBAL, 1, 1.0, 4, 2.0) == 0.5
    assert throughput_speedup(TimeKind.STEP, BatchKind.PER_GPU, 2, 1.0, 8, 1.0) == 4.0  # baseline 2 GPUs
    assert parallel_efficiency(3.0, 2, 8) == 0.75


def test_baseline_without_one_gpu_is_said() -> None:
    analysis = analyse_timings(Timings(rows((2, 16, 10.0), (8, 16, 4.0)), TimeKind.EPOCH, BatchKind.PER_GPU))
    assert analysis.row(16, 8).speedup == 2.5 and analysis.row(16, 8).efficiency == 2.5 * 2 / 8
    assert any("no 1-GPU row; speedup and efficiency are over 2 GPUs" in n for n in analysis.result().assumptions)


def test_ring_prediction_and_bandwidth_by_hand() -> None:
    """S = 100 MB on N = 4, alpha = 10 us, beta = 10 GB/s: t_ring = 2 x 3 x (10 us + 100 MB / (4 x 10 GB/s))
    = 6 x 2.51 ms = 15.06 ms; measured 20 ms: algbw = 5 GB/s, busbw = 5 x 2 x 3/4 = 7.5 GB/s, ratio 1.328."""
    link = Link("given", "the given link", Sourced(10e9, "B/s", "hand"), Sourced(10e-6, "s", "hand"))
    spec = rows((1, 8, 1.0), (4, 8, 1.2))
    spec = (spec[0], Measurement(2, 4, 8, 1.2, compute=0.9, comm=0.02, message=100e6))
    analysis = analyse_timings(Timings(spec, TimeKind.STEP, BatchKind.PER_GPU), link)
    row = analysis.row(8, 4)
    assert row.predicted == pytest.approx(0.01506, rel=1e-12)
    assert row.algbw == pytest.approx(5e9, rel=1e-15)
    assert row.busbw == pytest.approx(7.5e9, rel=1e-15)
    assert row.ratio == pytest.approx(0.02 / 0.01506, rel=1e-12)
    assert row.other_share == pytest.approx(1 - 0.9 / 1.2 - 0.02 / 1.2, rel=1e-12)
    result = analysis.result()
    assert result.derivation("ring_time_b8_n4").value == row.predicted
    assert result.derivation("busbw_b8_n4").formula_text() == "algbw × 2 × (N - 1) / N"
    # K all-reduces in the measured time: K x the bytes and K x the ring time
    many = analyse_timings(Timings((spec[0], Measurement(2, 4, 8, 1.2, comm=0.02, message=100e6, allreduces=3)),
                                   TimeKind.STEP, BatchKind.PER_GPU), link)  # fmt: skip
    assert many.row(8, 4).algbw == pytest.approx(15e9) and many.row(8, 4).predicted == pytest.approx(3 * 0.01506)


def test_communication_that_explains_the_loss() -> None:
    """Epoch times 10 s and 9.5 s on 1 and 2 GPUs: throughput x1.053 (under x1.1, stagnating); ideal
    5 s, 4.5 s lost, 3 s of it communication (67 %)."""
    spec = (Measurement(1, 1, 32, 10.0), Measurement(2, 2, 32, 9.5, comm=3.0))
    verdicts = analyse_timings(Timings(spec, TimeKind.EPOCH, BatchKind.PER_GPU)).verdicts
    assert any("stagnates from 1 to 2 GPUs (x1.053, ideal x2); 9.5 s where 5 s is ideal, 4.5 s lost; "
               "communication (3 s) explains it (67% of the loss)" in v for v in verdicts), verdicts


def test_sections_select_tables_and_derivations() -> None:
    result = seed002(message=0.178e9).result((Section.SHARES,))
    assert [t.key for t in result.tables] == ["shares"]
    assert {d.key for d in result.derivations} == {f"{k}_share_b{b}_n4" for k in ("compute", "comm") for b in (32, 128, 512)}
    assert result.derivation("comm_share_b32_n4").value == pytest.approx(0.20533965528011322 / 30.8219216464595, rel=1e-15)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_json_carries_tables_and_results(run_json) -> None:
    document = run_json("analyze", str(SEED002), "--time-is", "epoch", "--message-size", "0.178GB", "--link", "pcie4-x16")
    assert document["command"] == "analyze"
    assert set(document["tables"]) == {"speedup", "batch", "shares", "bandwidth"}
    assert document["results"]["speedup_b32_n4"]["value"] == pytest.approx(1.5772039, abs=5e-8)
    bandwidth = document["tables"]["bandwidth"]["rows"]
    assert bandwidth[0]["algbw"] == pytest.approx(1.19089210121e9, rel=1e-10)
    # PCIe 4.0 x16 preset: 31.5 GB/s, 5.7 us; 2 GPUs: 2 x 1 x (5.7 us + 178 MB / (2 x 31.5 GB/s)) = 5.66219 ms
    assert bandwidth[0]["predicted"] == pytest.approx(2 * (5.7e-6 + 0.178e9 / (2 * 31.5e9)), rel=1e-12)
    assert document["settings"]["time_is"] == "epoch"


def test_cli_yaml_equals_csv(run_json, tmp_path: Path) -> None:
    lines = [line for line in SEED002.read_text().splitlines() if line and not line.startswith("#")]
    header = lines[0].split(",")
    items = []
    for line in lines[1:]:
        cells = dict(zip(header, line.split(","), strict=True))
        items.append("- {" + ", ".join(f"{k}: {v}" for k, v in cells.items() if v) + "}")
    sheet = tmp_path / "t.yaml"
    sheet.write_text("time_is: epoch\nrows:\n" + "\n".join("  " + i for i in items) + "\n")
    from_yaml = run_json("analyze", str(sheet))
    from_csv = run_json("analyze", str(SEED002), "--time-is", "epoch")
    assert from_yaml["tables"] == from_csv["tables"] and from_yaml["results"] == from_csv["results"]


def test_cli_message_size_from_model_and_params(run_json) -> None:
    from parcalc.presets import load_model

    params = load_model("llama2-7b").total_params
    document = run_json("analyze", str(SEED002), "--time-is", "epoch", "--model", "llama2-7b", "--grad-bytes", "2")
    assert document["tables"]["bandwidth"]["rows"][0]["message"] == params * 2
    document = run_json("analyze", str(SEED002), "--time-is", "epoch", "--params", "11173962")
    assert document["tables"]["bandwidth"]["rows"][0]["message"] == 11173962 * 4  # fp32 gradients by default


def test_cli_packaged_data_by_name(run_json) -> None:
    document = run_json("analyze", "lab-ddp-timings.csv", "--time-is", "epoch", "--section", "speedup")
    assert list(document["tables"]) == ["speedup"]


def test_cli_terminal_output_at_80_columns(runner) -> None:
    from typer.testing import CliRunner

    narrow = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    result = narrow.invoke(app, ["analyze", str(SEED002), "--time-is", "epoch", "--section", "speedup"])
    assert result.exit_code == 0, result.output
    # no cell cut (the brief form cuts only its assumptions to a line each: --detail full has them whole)
    assert "…" not in result.stdout.split("Assumptions that move it")[0] and "1.57738" in result.stdout


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


GOOD_HEADER = "gpus,batch_per_gpu,time\n"
BAD_FILES = [
    pytest.param("gpus,time\n1,2\n2,1\n", "header (line 1): give exactly one of the columns 'batch_per_gpu'", id="no-batch-column"),
    pytest.param("batch_per_gpu,time\n32,2\n32,1\n", "header (line 1): no 'gpus' column", id="no-gpus-column"),
    pytest.param("gpus,batch_per_gpu,tim\n1,32,2\n", "unknown column 'tim' (did you mean 'time'?)", id="misspelt-column"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,32,fast\n", "row 2 (line 3), column 'time': cannot read 'fast' as time", id="non-numeric"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,32,0\n", "row 2 (line 3), column 'time': '0' must be greater than zero", id="zero-time"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,32,-1\n", "row 2 (line 3), column 'time': '-1' must not be negative", id="negative-time"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,32\n", "row 2 (line 3), column 'time': missing", id="missing-cell"),
    pytest.param(GOOD_HEADER + "1,32,2\n", "one row only", id="one-row"),
    pytest.param(GOOD_HEADER, "no data rows", id="header-only"),
    pytest.param("", "empty", id="empty-file"),
    pytest.param("\n\n# only a comment\n", "no header row", id="comments-only"),
    pytest.param(GOOD_HEADER + "1,32,2\n1,32,2.1\n", "row 2, column 'gpus': 1 GPUs at batch 32 again (first at row 1)", id="duplicate-row"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,64,1\n", "no batch size is measured on two GPU counts", id="no-pair"),
    pytest.param(GOOD_HEADER + "1,32,2\n2,32,1,9\n", "row 2 (line 3): 4 cells under a header of 3 columns", id="ragged"),
    pytest.param(GOOD_HEADER + "0,32,2\n2,32,1\n", "row 1 (line 2), column 'gpus': '0' must be greater than zero", id="zero-gpus"),
    pytest.param(GOOD_HEADER + "1.5,32,2\n2,32,1\n", "row 1 (line 2), column 'gpus': '1.5' must be a whole number", id="fractional-gpus"),
    pytest.param(GOOD_HEADER + "1,32,nan\n2,32,1\n", "row 1 (line 2), column 'time': 'nan' is not a finite number", id="nan"),
    pytest.param(GOOD_HEADER + "1,32,1e999\n2,32,1\n", "row 1 (line 2), column 'time'", id="huge"),
    pytest.param("gpus,batch_per_gpu,time,comm\n1,32,2,\n2,32,1,3\n", "row 2, column 'comm': 3 s is more than the row's whole time", id="comm-over-time"),
    pytest.param("gpus,batch_per_gpu,global_batch,time\n1,32,,2\n2,,64,1\n", "give exactly one of the columns", id="both-batch-columns"),
    pytest.param("gpus,batch_per_gpu,time,time_is\n1,32,2,step\n2,32,1,epoch\n", "step and epoch times mixed", id="mixed-time-kinds"),
    pytest.param('gpus,batch_per_gpu,time\n1,32,"2\n2",\n', "a quoted cell runs over a line break", id="quoted-newline"),
    pytest.param(GOOD_HEADER + "1,32,2\x00\n2,32,1\n", "NUL bytes", id="nul"),
]


@pytest.mark.parametrize(("text", "message"), BAD_FILES)
def test_bad_files_are_one_line_errors(run_error, tmp_path: Path, text: str, message: str) -> None:
    line = run_error(["analyze", _csv(tmp_path, text), "--time-is", "step"])
    assert message in line, line


BAD_YAML = [
    pytest.param("gpus: 1\n", "unknown key 'gpus'; a timings mapping has 'rows' and 'time_is'", id="mapping-without-rows"),
    pytest.param("just text\n", "expected a list of rows", id="scalar"),
    pytest.param("- [1, 2]\n", "row 1: expected a mapping", id="row-not-mapping"),
    pytest.param("- {gpus: 1, batch_per_gpu: 8, time: 1}\n- {gpus: 2, batch_per_gpu: 8, time: [1]}\n", "row 2, column 'time'", id="list-cell"),
    pytest.param("- &a {gpus: 1, batch_per_gpu: 8, time: 1}\n- *a\n", "aliases", id="alias"),
    pytest.param("- {gpus: 1, gpus: 2}\n", "duplicate key", id="duplicate-key"),
    pytest.param("[" * 100 + "]" * 100, "nested more than", id="deep"),
    pytest.param("- {gpus: 1, batch_per_gpu: 8, time: 1}\n- {gpus: 2, batch_per_gpu: 8}\n", "row 2, column 'time': missing", id="missing"),
    pytest.param("rows: []\ntime_is: minute\n", "'minute' is not step or epoch", id="bad-time-is"),
]


@pytest.mark.parametrize(("text", "message"), BAD_YAML)
def test_bad_yaml_is_one_line_errors(run_error, tmp_path: Path, text: str, message: str) -> None:
    line = run_error(["analyze", _csv(tmp_path, text, "t.yaml"), "--time-is", "step"])
    assert message in line, line


def test_files_that_are_not_timings(run_error, tmp_path: Path) -> None:
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as stream:  # a sparse 1 GB file: refused by its size, never read
        stream.truncate(1 << 30)
    assert "larger than 1,000,000 bytes" in run_error(["analyze", str(huge), "--time-is", "step"])
    assert "no such file" in run_error(["analyze", str(tmp_path / "missing.csv"), "--time-is", "step"])
    # the path as given, as for a missing file (it said 'NAME: cannot read: is a directory' with the base name alone)
    assert run_error(["analyze", str(tmp_path), "--time-is", "step"]).endswith(f"FILE: cannot read '{tmp_path}': is a directory")
    (tmp_path / "latin1.csv").write_bytes(GOOD_HEADER.encode() + b"1,32,2\xe9\n")
    assert "not UTF-8" in run_error(["analyze", str(tmp_path / "latin1.csv"), "--time-is", "step"])


def test_flag_errors(run_error, tmp_path: Path) -> None:
    good = _csv(tmp_path, "gpus,batch_per_gpu,time,comm\n1,8,2,\n2,8,1.2,0.1\n")
    assert "--time-is: say whether" in run_error(["analyze", good])
    assert "--params: give the all-reduce size once" in run_error(["analyze", good, "--time-is", "step", "--message-size", "1GB", "--params", "1M"])
    assert "--grad-bytes: give --params or --model" in run_error(["analyze", good, "--time-is", "step", "--grad-bytes", "2"])
    assert "--message-size: '-1GB' must not be negative" in run_error(["analyze", good, "--time-is", "step", "--message-size", "-1GB"])
    assert "--latency: give --bandwidth" in run_error(["analyze", good, "--time-is", "step", "--latency", "5us"])
    assert "--allreduces: '0' must be greater than zero" in run_error(["analyze", good, "--time-is", "step", "--allreduces", "0"])
    assert "unknown link 'nvlink9'" in run_error(["analyze", good, "--time-is", "step", "--link", "nvlink9"])
    no_comm = _csv(tmp_path, GOOD_HEADER + "1,8,2\n2,8,1.2\n", "n.csv")
    assert "no comm column" in run_error(["analyze", no_comm, "--time-is", "step", "--bandwidth", "10GB/s"])
    kind = _csv(tmp_path, "gpus,batch_per_gpu,time,time_is\n1,8,2,step\n2,8,1.2,step\n", "k.csv")
    assert "--time-is: epoch, but the file says" in run_error(["analyze", kind, "--time-is", "epoch"])


# ---------------------------------------------------------------------------------------------
# The worksheet


def test_lab_ddp_worksheet_answers(run_json) -> None:
    document = run_json("report", "lab-ddp")
    answers = {(a["key"]): a["value"] for q in document["questions"] for a in q["answers"]}
    assert answers["speedup_b32_n4"] == pytest.approx(EPOCH[(32, 1)] / EPOCH[(32, 4)], rel=1e-15)
    assert answers["batch_ratio_n4"] == pytest.approx(EPOCH[(32, 4)] / EPOCH[(512, 4)], rel=1e-15)
    assert answers["algbw_b32_n4"] == pytest.approx(TABLE7[(32, 4)] * 1e9, rel=1e-10)
    assert answers["busbw_b512_n4"] == pytest.approx(TABLE7[(512, 4)] * 1.5e9, rel=1e-10)
    assert math.isclose(answers["comm_share_b32_n4"], COMM[(32, 4)] / EPOCH[(32, 4)], rel_tol=1e-15)


def test_worksheet_reads_its_data_beside_it(run_json, tmp_path: Path) -> None:
    sheet = tmp_path / "mine.yaml"
    (tmp_path / "data.csv").write_text("gpus,global_batch,time\n1,64,8\n2,64,5\n")
    sheet.write_text("kind: worksheet\ntitle: T\nquestions:\n  - id: '1'\n    title: Q\n    prose: P\n    calculations:\n"
                     "      - command: analyze\n        inputs: {file: data.csv, time-is: step}\n        answers: [speedup_b64_n2]\n")  # fmt: skip
    document = json.loads(json.dumps(run_json("report", str(sheet))))
    assert document["questions"][0]["answers"][0]["value"] == 1.6  # 8 s / 5 s
