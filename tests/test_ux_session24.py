"""Defects found by session 24's user-experience pass (helper UX): each was found by hand or by
scripts/hostile_sweep.py, as a user or a script author would meet it, and each test names what it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.core.calibrate.trace import summarise

# One GEMM kernel of 5 us and launches on a host thread, the shapes of a Chrome trace as PyTorch's profiler writes them
KERNEL = {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 100, "dur": 5, "args": {"External id": 1}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1, "tid": 7}


def test_a_trace_whose_thread_id_is_a_list_reads_its_kernels(runner, tmp_path: Path) -> None:
    # was exit 70: internal error: TypeError: unhashable type: 'list' (the launches were grouped by 'tid' as a dict key).
    # A profiler writes a thread id as a number or a name; a launch with any other id is no host launch parcalc can place.
    data = {"traceEvents": [KERNEL, {**LAUNCH, "tid": [7]}, {**LAUNCH, "tid": [7], "ts": 3}]}
    summary = summarise(data)
    assert summary.kernel_seconds["gemm"] == pytest.approx(5e-6, rel=1e-12)  # the kernel's 5 us, as when the launches are not there
    assert summary.forward is None and summary.backward is None  # no host thread: the launches with a list id left out
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(data), encoding="utf-8")
    result = runner.invoke(app, ["calibrate", "trace", str(trace), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["command"] == "calibrate trace"


def test_a_trace_whose_external_id_is_a_list_reads_its_kernels(runner, tmp_path: Path) -> None:
    # was exit 70 too: the ops were keyed by 'External id'. A kernel whose op cannot be found has no measured spread:
    # its kind is left out of kernel_error (launch_spread's rule for a kernel without shapes)
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1, "args": {"External id": [1], "Input Dims": [[4, 4]]}}
    data = {"traceEvents": [{**KERNEL, "args": {"External id": [1]}}, op]}
    summary = summarise(data)
    assert summary.kernel_seconds["gemm"] == pytest.approx(5e-6, rel=1e-12)
    assert summary.kernel_error == {}
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(data), encoding="utf-8")
    assert runner.invoke(app, ["calibrate", "trace", str(trace)]).exit_code == 0
