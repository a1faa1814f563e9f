"""`parcalc calibrate trace`: a real Kineto trace of one eager HF step on an H200 (tests/fixtures/h200/
trace-llama1b-b4-s4096.json.gz, ../shared/measurements/h200-2026-11-28) read by kind, beside fit's prediction; bad files
are one-line errors (exit 2)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
TRACE = FIXTURES / "trace-llama1b-b4-s4096.json.gz"
runner = CliRunner()


def test_the_trace_by_kind_beside_fits_prediction() -> None:
    """The trace's kernels by kind (GEMMs 160.3 ms, attention 45.04, memory-bound 150.13, optimizer 10.0 of 2,788 kernels;
    the profile of another run of the same step has 159.0 / 44.15 / 148.09 / 10.0 sorted the same way) and fit's parts of
    the same step. Attention holds cuDNN's helpers (cudnn::fusion compute_dot_do_o and convert_dq_to_16bits, 1.16 + 0.91
    ms, launched by aten::_cudnn_attention_backward): 42.97 / 152.20 while they counted as memory-bound, as
    h200_profile.py counts them (42.1 / 150.2)."""
    result = runner.invoke(app, ["calibrate", "trace", str(TRACE), "--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200",
                                 "--framework", "hf", "--batch", "4", "--seq-len", "4096", "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {r["kind"]: r for r in json.loads(result.stdout)["tables"]["kinds"]["rows"]}
    assert rows["GEMMs"]["measured"] == pytest.approx(0.16033, abs=5e-5)
    assert rows["attention"]["measured"] == pytest.approx(0.04504, abs=5e-5)
    assert rows["memory-bound"]["measured"] == pytest.approx(0.15013, abs=5e-5)
    assert rows["optimizer"]["measured"] == pytest.approx(0.01000, abs=5e-5)
    # fit's t_gemm for the same step at the clock its power leaves it (1659 MHz, parcalc.core.timing.step_clock; 151.6 ms at the
    # capped steps' 1672.5 MHz before the clock followed the step)
    assert rows["GEMMs"]["predicted"] == pytest.approx(0.1527, abs=5e-4)
    host = {r["phase"]: r for r in json.loads(result.stdout)["tables"]["host"]["rows"]}
    assert host["backward"]["launches"] == 1823


def test_without_a_model_it_reads_the_trace_alone() -> None:
    result = runner.invoke(app, ["calibrate", "trace", str(TRACE)])
    assert result.exit_code == 0, result.output
    assert "2,788 kernels" in result.stdout and "predicted" in result.stdout


def _bad(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(("name", "content", "message"), [
    ("notes.txt", b"not a trace\n", "not a JSON trace"),
    ("other.json", b'{"rows": []}', "no 'traceEvents' list"),
    ("cpu.json", json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]}).encode(),
     "no CUDA kernels in the trace"),
    ("cut.json.gz", TRACE.read_bytes()[:20000], "a truncated or damaged gzip file"),
    ("empty.json.gz", gzip.compress(b"", mtime=0), "not a JSON trace"),
], ids=["notes.txt", "other.json", "cpu.json", "cut.json.gz", "empty.json.gz"])  # fmt: skip
# ids by file name: a parameter's bytes in the id (a gzip header's time) would differ between xdist workers, which then
# refuse to run ("Different tests were collected"); mtime=0 keeps the bytes themselves the same too
def test_bad_files_are_one_line_errors(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = _bad(tmp_path, name, content)
    result = runner.invoke(app, ["calibrate", "trace", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(f"Error: {path}: {message}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_missing_file_and_flags_without_model_are_one_line_errors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calibrate", "trace", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and result.stderr.strip() == f"Error: {tmp_path / 'none.json'}: no such file"
    result = runner.invoke(app, ["calibrate", "trace", str(TRACE), "--gpu", "h200"])
    assert result.exit_code == 2 and "give --model too" in result.stderr


def test_the_steps_flags_are_checked_before_the_trace_is_read(tmp_path: Path) -> None:
    """A bad --batch is one line before the trace is opened (a 100 MB trace took seconds to read first; session 18's review):
    with a trace that does not exist, the error is the flag's."""
    missing = str(tmp_path / "none.json")
    result = runner.invoke(app, ["calibrate", "trace", missing, "--model", "llama3.2-1b", "--gpu", "h200", "--batch", "0"])
    assert result.exit_code == 2 and result.stderr.strip() == "Error: --batch: '0' must be greater than zero"
    result = runner.invoke(app, ["calibrate", "trace", missing, "--model", "llama3.2-1b", "--gpu", "h200", "--batch", "4"])
    assert result.exit_code == 2 and result.stderr.strip() == f"Error: {missing}: no such file"


def test_a_fifo_is_refused_at_once_not_read(runner, tmp_path) -> None:
    """A FIFO without a writer blocked the read for ever (found by the session's review)."""
    import os

    from parcalc.cli import app

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    result = runner.invoke(app, ["calibrate", "trace", str(fifo)])
    assert result.exit_code == 2 and "not a regular file" in result.output


def test_a_trace_over_the_bound_is_one_line_not_read(runner, tmp_path, monkeypatch) -> None:
    """The trace is read through parcalc.files.read_regular with a bound (results.calibrate_trace.MAX_TRACE_BYTES, 1 GiB):
    a file over it is refused from its size, before a byte is read (here the bound lowered to the fixture's 564,849 bytes - 1)."""
    from parcalc.cli import app
    from parcalc.results import calibrate_trace

    monkeypatch.setattr(calibrate_trace, "MAX_TRACE_BYTES", TRACE.stat().st_size - 1)
    result = runner.invoke(app, ["calibrate", "trace", str(TRACE)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"Error: {TRACE}: too large for one step's trace: 564849 bytes is more than the limit of 564848")


@pytest.mark.parametrize("dur", [-5, 1e308], ids=["negative", "absurd"])
def test_a_kernel_duration_no_profiler_writes_is_refused(runner, tmp_path, dur: float) -> None:
    """The review: a kernel of -5 us was summed into 'GEMMs -5 us', one of 1e308 us into a busy time of 1e302 s."""
    import json

    from parcalc.cli import app

    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 0, "dur": dur}]}))
    result = runner.invoke(app, ["calibrate", "trace", str(trace)])
    assert result.exit_code == 2 and "not a profiled kernel's duration" in result.output


@pytest.mark.parametrize("name, said", [("", "give the trace file"), ("x" * 300, "longer than 255 bytes")], ids=["empty", "300-bytes"])
def test_a_trace_name_no_file_can_have_is_one_line(runner, name: str, said: str) -> None:
    """Found in the review's hostile values: '' read as a directory, a 300-byte name was an internal error (exit 70)."""
    from parcalc.cli import app

    result = runner.invoke(app, ["calibrate", "trace", name])
    assert result.exit_code == 2 and said in result.output


# --format and -o, as fit and memory take them (parcalc.output.emit)


def test_o_json_writes_the_report_that_the_schema_describes(tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from json_schema_check import problems

    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["calibrate", "trace", str(TRACE), "--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200",
                                      "--framework", "hf", "--batch", "4", "--seq-len", "4096", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    schema = json.loads((Path(__file__).parent.parent / "parcalc" / "schemas" / "calibrate-trace.json").read_text())
    assert problems(document, schema) == []
    rows = {r["kind"]: r for r in document["tables"]["calibration"]["rows"]}
    assert rows["GEMMs"]["after"] == pytest.approx(152.327 / 160.335, rel=1e-4)  # modelled / traced GEMM time, the b4 trace (at its own 1663.9 MHz)
    assert document["tables"]["kinds"]["rows"][0]["measured"] == pytest.approx(0.160335, rel=1e-5)
    # the host phase by phase, predicted (the hf profile's costs, from this same trace) against the trace less the profiler's
    # share: forward 31.19 ms traced / 1.30 = 23.99 ms, backward 62.72 / 1.54 = 40.72, AdamW's launches 1.82, its Python 2.14
    host = {r["phase"]: r for r in document["tables"]["host_calibration"]["rows"]}
    assert (host["forward"]["traced"], host["forward"]["measured"]) == pytest.approx((0.031186, 0.023990), rel=1e-4)
    assert (host["backward"]["traced"], host["backward"]["measured"]) == pytest.approx((0.062715, 0.040724), rel=1e-4)
    assert host["optimizer's Python"]["measured"] == pytest.approx(0.0021383, rel=1e-4)
    for row in host.values():
        assert row["predicted"] == pytest.approx(row["measured"], rel=1e-3)


def test_o_txt_writes_the_table_and_a_disagreeing_format_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    result = CliRunner().invoke(app, ["calibrate", "trace", str(TRACE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "Kernel time by kind" in out.read_text() and "2,788 kernels" in out.read_text()
    clash = CliRunner().invoke(app, ["calibrate", "trace", str(TRACE), "--format", "json", "-o", str(tmp_path / "r.txt")])
    assert clash.exit_code == 2 and "disagree" in clash.output and not (tmp_path / "r.txt").exists()


def test_force_and_name_are_for_the_preset_only(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["calibrate", "trace", str(TRACE), "--force"])
    assert result.exit_code == 2 and "-o FILE.yaml" in result.output


@pytest.mark.parametrize(("flag", "said"), [("--batch", "--batch: cannot read ''"), ("--seq-len", "--seq-len: cannot read ''"),
                                            ("--gpu", "unknown gpu ''"), ("--framework", "unknown framework ''")])  # fmt: skip
def test_an_empty_value_is_an_error_not_the_default(runner, flag: str, said: str) -> None:
    # '' was taken as "not given" and the trace calibrated on fit's defaults, exit 0 (found by the review)
    args = ["calibrate", "trace", str(TRACE), "--model", str(FIXTURES / "llama3.2-1b.json"), "--gpu", "h200", "--framework", "hf",
            "--batch", "4", "--seq-len", "4096", flag, ""]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {said}") and result.stderr.count("\n") == 1
