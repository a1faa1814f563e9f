"""`fit -o step.trace.json`: the modelled step as Chrome trace events (Trace Event Format, JSON Object Format: complete
events "ph": "X" with "ts"/"dur" in microseconds, "M" events naming the tracks), read back by `calibrate trace`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.calibrate.trace import summarise
from parcalc.results.calibrate_trace import read_trace_file

sys.path.insert(0, str(Path(__file__).parent))
from step_parts_cases import fit_args

CASES = {
    "hf step on one H200 (host-bound, t_host)": [a for a in fit_args("llama3.2-1b b1 s2048") if a not in ("--format", "json")],
    "Llama 3 8B, tp 2 pp 2 dp 2 on H100": ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--tp", "2", "--pp", "2",
                                           "--dp", "2", "--batch", "32"],
    "Mixtral, ep 4, fp8": ["fit", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4",
                           "--ep", "4", "--precision", "fp8", "--recompute", "full", "--batch", "64"],
}  # fmt: skip
COMM = ("t_tp", "t_cp", "t_ep", "t_pp", "t_dp")


def fit_json(args: list[str]) -> dict[str, float]:
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return {k: v["value"] for k, v in json.loads(result.stdout)["results"].items()}


@pytest.mark.parametrize("case", list(CASES))
def test_calibrate_trace_reads_fits_parts_back_and_the_trace_spans_the_step(case: str, tmp_path: Path) -> None:
    out = tmp_path / "step.trace.json"
    result = CliRunner().invoke(app, [*CASES[case], "-o", str(out)])
    assert result.exit_code == 0, result.output
    parts = fit_json(CASES[case])
    summary = summarise(read_trace_file(str(out)))
    assert summary.kernel_seconds["gemm"] == pytest.approx(parts["t_gemm"], rel=1e-12)
    assert summary.kernel_seconds["attention"] == pytest.approx(parts["t_attention"], rel=1e-12)
    assert summary.kernel_seconds["memory"] == pytest.approx(parts["t_memory_bound"], rel=1e-12)
    assert summary.kernel_seconds["optimizer"] == pytest.approx(parts["t_optimizer"], rel=1e-12)
    assert summary.kernel_seconds["communication"] == pytest.approx(sum(parts.get(k, 0.0) for k in COMM), rel=1e-12)
    assert summary.gpu_span == pytest.approx(parts["t_step"], rel=1e-12)
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(parts["t_step"] * 1e6, rel=1e-12)
    assert sum(e["dur"] for e in events) == pytest.approx(parts["t_step"] * 1e6, rel=1e-12)  # each term once, end to end


def test_each_event_names_its_term_formula_and_source(tmp_path: Path) -> None:
    out = tmp_path / "step.trace.json"
    assert CliRunner().invoke(app, [*CASES["hf step on one H200 (host-bound, t_host)"], "-o", str(out)]).exit_code == 0
    document = json.loads(out.read_text())
    tracks = {e["tid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    host = next(e for e in document["traceEvents"] if e.get("args", {}).get("term") == "t_host")
    assert tracks[host["tid"]] == "host (eager kernel launches)"
    assert host["args"]["formula"].startswith("t_host = Σ over the segments between synchronisations of max(ΣH")
    assert "parcalc.core.timing.host" in host["args"]["source"]
    # fit's t_host of the b1 step: 18.6928 ms (19.5036 ms before), its host following the hf loop's synchronisation and costing the b4 trace's less
    # the profiler's share (parcalc.core.timing.host; 28.4444 ms before, at the 1980 MHz its power leaves it; 25.7648 ms while
    # every step ran at the capped 1672.5 MHz: the GPU's shorter GEMMs leave it waiting longer for the host); 18.6928 ms since
    # its attention is timed by its tiles (0.8 ms more GPU work under the same host time: parcalc.core.timing.attention_tiles);
    # 19.6636 ms since its non-vectorised element kernels run their clocked share at the step's 1980 MHz (0.97 ms less GPU
    # work under the same host time: parcalc.core.timing.elementwise.ElementClock)
    assert host["dur"] == pytest.approx(19.6636e3, rel=1e-5)


def test_a_search_draws_its_best_configurations_step(tmp_path: Path) -> None:
    """--search: the fastest configuration's terms (t_step's inputs), compute as one event (the search does not split it)."""
    out = tmp_path / "step.trace.json"
    args = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--search"]
    assert CliRunner().invoke(app, [*args, "-o", str(out)]).exit_code == 0
    events = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    assert next(e["args"]["term"] for e in events) == "t_compute"
    assert sum(e["dur"] for e in events) == pytest.approx(fit_json(args)["t_step"] * 1e6, rel=1e-12)


def test_a_format_beside_a_timeline_file_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "step.trace.json"
    result = CliRunner().invoke(app, [*CASES["Llama 3 8B, tp 2 pp 2 dp 2 on H100"], "--format", "json", "-o", str(out)])
    assert result.exit_code == 2 and "disagree" in result.output and not out.exists()
