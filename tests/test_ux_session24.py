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


# ---------------------------------------------------------------------------------------------
# --help at 80 columns: the examples were written one command a line (up to 275 characters, memory's DeepSeek-V3
# example); the terminal wrapped them in the middle of words ("--zer" / "o 1"). They are now folded before a flag with a
# shell continuation, so that they still paste into a shell.

def _help(path: list[str], columns: int) -> str:
    from typer.testing import CliRunner

    result = CliRunner(env={"COLUMNS": str(columns), "NO_COLOR": "1", "PARCALC_PRESETS": ""}).invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _commands_of(text: str) -> list[list[str]]:
    """The shell words of every `parcalc ...` example line of `text`, continuation lines joined, comments dropped."""
    import shlex

    joined = text.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip().startswith(("parcalc ", "cat ", "printf ", "eval "))]


HELP_PATHS = [[], *[path for path in __import__("parcalc.docs_cli", fromlist=["command_paths"]).command_paths() if path]]


@pytest.mark.parametrize("path", HELP_PATHS, ids=lambda path: " ".join(path) or "parcalc")
def test_every_help_fits_80_columns_and_its_examples_are_the_same_commands(path: list[str]) -> None:
    narrow, wide = _help(path, 80), _help(path, 400)  # 400: the help's own limit (100), where fewer lines fold
    too_wide = [line for line in narrow.splitlines() if len(line) > 80]
    assert too_wide == [], too_wide  # before: memory --help had 20 example lines over 80, the widest 275
    # folding moved no word: the same commands, word for word, as at full width (and as written in the source)
    assert _commands_of(narrow) == _commands_of(wide)
    assert _commands_of(narrow) or path in (["calibrate"], ["presets"]), "every help but a group's has examples"


def test_a_folded_example_keeps_its_comment_outside_the_continued_command() -> None:
    from parcalc.help_panels import fold_command

    # a comment on a command's first line that no longer fits goes above it, as a comment line of its own
    first = fold_command("  parcalc calibrate nccl ar.txt -o presets/links/my-nvlink.yaml    # ar.txt from: all_reduce_perf -b 8", 60)
    assert first == ["  # ar.txt from: all_reduce_perf -b 8",
                     "  parcalc calibrate nccl ar.txt \\",
                     "      -o presets/links/my-nvlink.yaml"]  # fmt: skip
    # on a continuation line it goes below the command's last line: a comment line between `\` lines would end it
    last = fold_command("      --gpu h200 --batch 4 -o presets/gpus/my-h200.yaml    # then: fit --gpu my-h200", 50, first=False)
    assert last == ["      --gpu h200 --batch 4 \\", "      -o presets/gpus/my-h200.yaml", "      # then: fit --gpu my-h200"]
    # quoted words stay whole, a pipe starts a line of its own
    piped = fold_command("  printf 'command: memory\\nmodel: gpt3-175b\\n' | parcalc sweep - --vary tp=1,2", 50)
    assert piped == ["  printf 'command: memory\\nmodel: gpt3-175b\\n' \\", "      | parcalc sweep - --vary tp=1,2"]


def test_report_list_wraps_a_long_title_on_a_terminal_and_keeps_one_line_a_worksheet_in_a_pipe(runner) -> None:
    from tests.test_terminal_80 import run_in_pty

    # seed000's title ran to 133 columns and the terminal cut it mid-word ("the ideal" / " network")
    shown = run_in_pty(["report", "--list"])
    assert all(len(line) <= 80 for line in shown.splitlines()), shown
    assert "seed000          Parallelism lab (seed 000): speedup of each strategy, the ideal\n" in shown
    assert "                 network, memory, and what fits on 2 GPUs  [packaged]" in shown
    piped = runner.invoke(app, ["report", "--list"]).stdout.splitlines()
    assert len(piped) == 4 and piped[3].startswith("seed000 ") and piped[3].endswith("on 2 GPUs  [packaged]")


# ---------------------------------------------------------------------------------------------
# --detail full on a terminal without colour (NO_COLOR, TERM=dumb): the plain form, laid out for files and pipes, ran
# to 1,779 columns at 80 (presets show gb200's sources), 696 in fit's; it is now laid out at the terminal's width.

def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """`python -m parcalc ARGS` on an 80-column pty with `env` added (tests.test_terminal_80.run_in_pty drops NO_COLOR)."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import sys
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")}
    process = subprocess.Popen([sys.executable, "-m", "parcalc", *args], stdin=slave, stdout=slave, stderr=slave,
                               env={**base, "TERM": "xterm", **env})  # fmt: skip
    os.close(slave)
    out = b""
    try:
        while select.select([master], [], [], 300)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        process.wait(timeout=60)
    assert process.returncode == 0, out[-2000:]
    return out.decode("utf-8").replace("\r\n", "\n")


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["NO_COLOR", "TERM=dumb"])
@pytest.mark.parametrize("args", [
    ["presets", "show", "gb200", "--detail", "full"],
    ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--detail", "full"],
])  # fmt: skip
def test_detail_full_fits_a_terminal_without_colour(env: dict[str, str], args: list[str]) -> None:
    text = _run_on_a_terminal(args, env)
    assert "\x1b[" not in text  # no colour, nor any other style
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert wide == [], wide[:3]
    # the whole record still: the sources of presets show, fit's derivations with their formulas
    assert ("sm90" in text or "TransformerEngine" in text) if args[0] == "presets" else "t_step" in text


@pytest.mark.parametrize("args", [
    ["memory", "--model", "homework-7b", "--format", "json"],
    ["bubble", "--pp", "4", "--micro-batches", "8", "--format", "json"],
    ["sweep", "RUN", "--vary", "tp=1,2", "--format", "json"],
    ["report", "question1", "--format", "json"],
])  # fmt: skip
def test_output_dash_is_refused_not_a_file_named_dash(run_error, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      args: list[str]) -> None:  # fmt: skip
    # `-o -` wrote the document to a file named '-' in the current folder, and said "wrote -" (a script that meant
    # stdout, as `--config -` means stdin, read nothing); now one line before any work, and nothing written
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run.yaml"
    run.write_text("command: memory\nmodel: homework-7b\n", encoding="utf-8")
    line = run_error([str(run) if a == "RUN" else a for a in args] + ["-o", "-"])
    assert line == "Error: --output: '-' would be a file named '-'; leave -o out to print to stdout"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.yaml"]


MXFP8_FIT = ["fit", "--model", "llama3-8b", "--gpus", "8", "--batch", "32", "--seq-len", "4096", "--tp", "1", "--pp", "1", "--dp", "8",
             "--precision", "fp8", "--fp8-recipe", "mxfp8"]  # fmt: skip


@pytest.mark.parametrize("gpu", ["h100-sxm5", "h200", "h800-sxm5"])
def test_mxfp8_is_refused_below_blackwell(run_error, gpu: str) -> None:
    """Transformer Engine runs MXFP8 from compute capability 10.0 only (NVIDIA/TransformerEngine @d0067d0d
    transformer_engine/pytorch/quantization.py `_compute_mxfp8_support`); parcalc took the per-tensor FP8 share on Hopper
    and answered (exit 0). One line, exit 2, naming the GPU and the recipes that run there."""
    line = run_error([*MXFP8_FIT, "--gpu", gpu])
    assert line.startswith("Error: --fp8-recipe mxfp8:") and "compute capability 10.0" in line and "--fp8-recipe current" in line


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300"])
def test_mxfp8_runs_on_blackwell(run_json, gpu: str) -> None:
    doc = run_json(*MXFP8_FIT, "--gpu", gpu)
    assert any(line.startswith("fp8 (mxfp8 scaling)") for line in doc["assumptions"])
