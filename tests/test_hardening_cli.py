"""Issue #12: hostile input and a hostile environment never give a traceback, a hang or a wrong
answer. Each test is one reproducer of the issue, named after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import ClassVar

import pytest

from parcalc.cli import app
from parcalc.errors import shown

GPU = ["--gpu", "a100-sxm4-80gb"]
MODEL = ["--model", "homework-7b"]
QUICK = 5.0  # seconds: each of these ran for minutes (or forever) before


def _one_error_line(result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _parcalc(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter (streams, signals and the environment are its own)."""
    env = {**os.environ, "NO_COLOR": "1", "PARCALC_PRESETS": "", **kwargs.pop("env", {})}
    if "stdout" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run(check=False, args=[sys.executable, "-m", "parcalc", *args], text=True, env=env, timeout=60, **kwargs)


# ---------------------------------------------------------------------------------------------
# A. No traceback, ever


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["peak-flops", "--clock", "1e1000000GHz", "--sms", "108", "--fma-per-clock", "512"], id="clock-decimal-overflow"),
        pytest.param(["peak-flops", "--clock", "1e-1000000GHz", "--sms", "108", "--fma-per-clock", "512"], id="clock-decimal-underflow"),
        pytest.param(["peak-flops", "--clock", "1e999999999999999999999GHz", "--sms", "108", "--fma-per-clock", "512"], id="clock-huge-exponent"),
        pytest.param(["memory", *MODEL, "--capacity", "1e1000000GB"], id="capacity-decimal-overflow"),
        pytest.param(["intensity", "--m", "1e308", "--k", "1e308", "--n", "1e308"], id="intensity-int-overflow"),
        pytest.param(["memory", "--layers", "1e308", "--hidden", "4096", "--heads", "32", "--seq-len", "2048"], id="memory-layers-1e308"),
        pytest.param(["flops", "--ffn-hidden", "1e308", "--layers", "32", "--hidden", "4096", "--heads", "32", "--seq-len", "2048"],
                     id="flops-ffn-hidden-1e308"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--target", "1e-320"], id="bubble-target-1e-320"),
        pytest.param(["intensity", "--m", "9007199254740993", "--k", "1", "--n", "1"], id="count-above-2^53-not-rounded"),
    ],
)  # fmt: skip
def test_overflowing_input_is_one_error_line(runner, args: list[str]) -> None:
    line = _one_error_line(runner.invoke(app, args))
    assert line.startswith("Error: ")


@pytest.mark.parametrize(
    ("args", "where"),
    [
        pytest.param(["peak-flops", "--clock", "1e308Hz", "--sms", "108", "--fma-per-clock", "512"], "Peak FLOP/s", id="peak-flops-inf"),
        pytest.param(["flops", *MODEL, "--batch", "8", "--seq-len", "4096", *GPU, "--gpus", "8", "--step-time", "1e-320s"], "MFU",
                     id="mfu-inf"),
        pytest.param(["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--peak", "1e290TFLOP/s", "--bandwidth", "1e-320B/s"],
                     "not a finite number", id="roofline-inf"),
    ],
)  # fmt: skip
def test_a_result_that_is_not_finite_is_an_error(runner, args: list[str], where: str) -> None:
    line = _one_error_line(runner.invoke(app, args))
    assert "is not a finite number" in line and where in line, line


def test_error_messages_show_at_most_80_characters_of_a_value(runner) -> None:
    for args in (["peak-flops", "--clock", "9" * 5000], ["peak-flops", "--gpu", "x" * 5000, "--dtype", "tf32"],
                 ["bubble", "--stages", "4", "--micro-batches", "4", "--schedule", "y" * 5000], ["peak-flops", "--" + "z" * 5000]):  # fmt: skip
        line = _one_error_line(runner.invoke(app, args))
        assert len(line) < 250 and "…" in line, line


def test_control_characters_of_a_value_are_escaped(runner) -> None:
    line = _one_error_line(runner.invoke(app, ["peak-flops", "--gpu", "a\x1b[31mred\x07", "--dtype", "tf32"]))
    assert "\x1b" not in line and "\x07" not in line


def test_an_unanticipated_exception_is_an_internal_error_exit_70(runner, monkeypatch: pytest.MonkeyPatch) -> None:
    import parcalc.core.peak_flops

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(parcalc.core.peak_flops, "peak_flops", broken)
    args = ["peak-flops", "--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512"]
    line = _one_error_line(runner.invoke(app, args), 70)
    assert line.startswith("internal error: ZeroDivisionError: a bug") and "please report" in line and "PARCALC_DEBUG=1" in line
    debug = runner.invoke(app, args, env={"PARCALC_DEBUG": "1"})
    assert debug.exit_code == 70 and "Traceback" in debug.stderr and "internal error" in debug.stderr


def test_stdout_on_dev_full_is_exit_1_with_a_message() -> None:
    with open("/dev/full", "w") as full:
        done = _parcalc("peak-flops", *GPU, "--dtype", "tf32", stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == "Error: cannot write the output to stdout: No space left on device"


def test_closed_stdout_is_exit_1_with_a_message() -> None:
    done = subprocess.run(check=False, args=["sh", "-c", f'exec "{sys.executable}" -m parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32 >&-'],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == "Error: cannot write the output to stdout: standard output is closed"


def test_a_reader_that_goes_away_ends_it_quietly() -> None:
    """`parcalc ... | head -1` once head has exited: no BrokenPipeError, no "Exception ignored" at
    exit, exit 1. (A pipe whose reading end is closed before parcalc writes, so that the write
    fails however the kernel splits it.)"""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = _parcalc("bubble", "--stages", "4", "--micro-batches", "8", stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""


def test_a_reader_that_leaves_mid_output_is_exit_1_not_a_silent_0() -> None:
    """600 KB of CSV into a pipe whose reader takes 100 bytes and leaves (`| head -c 100`): the
    first write(2) is partial (64 KiB), and CPython's buffered writer dropped the rest without an
    error, so parcalc said exit 0 having lost 535 KB (streams.write_out writes to the descriptor)."""
    args = [sys.executable, "-m", "parcalc", "bubble", "--pp", "64", "--micro-batches", "256", "--format", "csv", "--table", "timeline"]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read(100).startswith(b"device,op,micro_batch")
        process.stdout.close()
        process.wait(timeout=60)
        assert process.returncode == 1
        assert process.stderr.read() == b""


def test_an_ascii_terminal_gets_ascii_forms() -> None:
    done = _parcalc("peak-flops", *GPU, "--dtype", "tf32", "--detail", "full", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert "P = 2 x f x N_SM x FMA" in done.stdout
    error = _parcalc("peak-flops", "--clock", "é" * 200, env={"PYTHONIOENCODING": "ascii"})
    assert error.returncode == 2 and "Traceback" not in error.stderr and "..." in error.stderr, error.stderr


def test_no_home_directory_means_no_cache_not_a_crash(runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A uid without a passwd entry and no HOME (containers): Path.home() raises RuntimeError."""
    import pwd

    def unknown(uid: int) -> object:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "PARCALC_NO_CACHE"):
        monkeypatch.setenv(name, "")  # recorded, so that what the fallback sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    with pytest.raises(RuntimeError):
        __import__("pathlib").Path.home()
    result = runner.invoke(app, ["peak-flops", *GPU, "--dtype", "tf32"])
    assert result.exit_code == 0, result.output
    assert "155.93472 TFLOP/s" in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as a uid without a passwd entry")
def test_no_home_for_a_uid_without_passwd_entry() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    done = subprocess.run(check=False, args=["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups", sys.executable, "-m", "parcalc", "peak-flops",
                           *GPU, "--dtype", "tf32"], capture_output=True, text=True, env=env, timeout=60, cwd="/")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


# SIGINT, delivered deterministically: while a module imports (start-up) or inside the command.
_INTERRUPT_AT = """
import builtins, os, signal, sys
target = sys.argv.pop(1)
real_import = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == target:
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting
from parcalc.__main__ import main
sys.argv[0] = "parcalc"
main()
"""


@pytest.mark.parametrize(
    ("module", "args"),
    [
        pytest.param("typer", ["peak-flops", *GPU, "--dtype", "tf32"], id="start-up"),
        pytest.param("parcalc.core.pipeline", ["bubble", "--stages", "4", "--micro-batches", "8"], id="during-a-run"),
    ],
)
def test_ctrl_c_is_exit_130_with_one_line(module: str, args: list[str]) -> None:
    # The child starts with SIGINT at its default, as from a shell: a pytest-xdist worker may ignore SIGINT, and a Python
    # started with it ignored keeps ignoring it (no KeyboardInterrupt to test).
    done = subprocess.run(check=False, args=[sys.executable, "-c", _INTERRUPT_AT, module, *args], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == ["Interrupted"]


# ---------------------------------------------------------------------------------------------
# B. Quantities take their unit


@pytest.mark.parametrize(
    ("args", "flag", "example"),
    [
        pytest.param(["peak-flops", "--sms", "108", "--fma-per-clock", "512", "--clock", "1.41"], "--clock", "1.41GHz", id="clock"),
        pytest.param(["memory", *MODEL, "--capacity", "24"], "--capacity", "24GiB", id="memory-capacity"),
        pytest.param(["memory", *MODEL, "--reserve", "2"], "--reserve", "24GiB", id="memory-reserve"),
        pytest.param(["fit", *MODEL, "--gpus", "8", "--capacity", "80", "--peak", "312TFLOP/s"], "--capacity", "24GiB", id="fit-capacity"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "8", "--reserve", "2"], "--reserve", "24GiB", id="fit-reserve"),
        pytest.param(["fit", *MODEL, "--gpus", "8", "--capacity", "80GB", "--peak", "312"], "--peak", "312TFLOP/s", id="fit-peak"),
        pytest.param(["intensity", "--m", "8", "--k", "8", "--n", "8", "--peak", "312", "--bandwidth", "2TB/s"], "--peak", "312TFLOP/s",
                     id="intensity-peak"),
        pytest.param(["intensity", "--m", "8", "--k", "8", "--n", "8", "--peak", "312T", "--bandwidth", "2e12"], "--bandwidth", "900GB/s",
                     id="intensity-bandwidth"),
        pytest.param(["flops", *MODEL, "--batch", "8", "--gpus", "8", *GPU, "--step-time", "2"], "--step-time", "5us", id="step-time"),
        pytest.param(["flops", *MODEL, "--batch", "8", "--gpus", "8", "--step-time", "2s", "--peak", "3e14"], "--peak", "312TFLOP/s",
                     id="flops-peak"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "8", "--size", "1e9"], "--size", "24GiB", id="size"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "8", "--size", "1GB", "--bandwidth", "300e9"], "--bandwidth",
                     "900GB/s", id="comm-bandwidth"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "8", "--size", "1GB", "--latency", "5"], "--latency", "5us",
                     id="latency"),
        pytest.param(["comm-volume", "--strategy", "dp", *MODEL, "--batch", "8", "--bucket-size", "25000000"], "--bucket-size", "24GiB",
                     id="bucket-size"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--t-forward", "10"], "--t-forward", "5us", id="t-forward"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--t-backward", "2"], "--t-backward", "5us", id="t-backward"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--schedule", "zb-h1", "--t-weight", "1"], "--t-weight", "5us",
                     id="t-weight"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--p2p-latency", "1"], "--p2p-latency", "5us", id="p2p-latency"),
        pytest.param(["bubble", "--stages", "2", "--micro-batches", "8", "--stage-times", "1s,2"], "--stage-times", "5us", id="stage-times"),
    ],
)  # fmt: skip
def test_a_quantity_without_its_unit_is_an_error(runner, args: list[str], flag: str, example: str) -> None:
    line = _one_error_line(runner.invoke(app, args))
    assert line.startswith(f"Error: {flag}: ") and "has no unit" in line and example in line, line


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["memory", *MODEL, "--reserve", "0", *GPU], id="reserve-0"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "8", "--size", "1GB", "--bandwidth", "100GB/s",
                      "--latency", "0"], id="latency-0"),
        pytest.param(["bubble", "--stages", "4", "--micro-batches", "8", "--p2p-latency", "0"], id="p2p-latency-0"),
    ],
)  # fmt: skip
def test_a_bare_zero_needs_no_unit(runner, args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------------------------------------
# C. Numbers that drive loops


@pytest.mark.parametrize(
    ("args", "exit_code", "expected"),
    [
        pytest.param(["bubble", "--stages", "100000", "--micro-batches", "1"], 0, "not simulated: more than 1,024 stages", id="bubble-p-1e5"),
        pytest.param(["bubble", "--stages", "1e15", "--micro-batches", "1", "-f", "json"], 0, '"bubble_share"', id="bubble-p-1e15"),
        pytest.param(["bubble", "--stages", "8", "--micro-batches", "1e15"], 0, "not simulated: more than 50,000 operations",
                     id="bubble-m-1e15"),
        pytest.param(["bubble", "--stages", "1e6", "--micro-batches", "8", "--layers", "1e6"], 2, "--layers: 1,000,000 layers",
                     id="bubble-layers-1e6"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "1e6", "--compare", "--size", "1GB"], 0, "double-binary-tree",
                     id="all-reduce-compare-1e6-workers"),
        pytest.param(["comm-volume", "--collective", "all-reduce", "--workers", "9007199254740992", "--compare", "--size", "1GB"], 0,
                     "butterfly", id="all-reduce-compare-2^53-workers"),
        pytest.param(["memory", *MODEL, "--pp", "1e5"], 2, "--pp", id="memory-pp-1e5"),
        pytest.param(["memory", *MODEL, "--pp", "1e5", "--layers", "1e5"], 2, "--layers: 100,000 layers", id="memory-pp-layers-1e5"),
        pytest.param(["comm-volume", "--strategy", "fsdp", *MODEL, "--batch", "8", "--layers", "1e7"], 2, "--layers: 10,000,000 layers",
                     id="fsdp-layers-1e7"),
        pytest.param(["flops", *MODEL, "--batch", "8", "--layers", "1048576", "--pp", "1048576"], 2, "--layers", id="flops-pp-2^20"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "1e18", "--gpus-per-node", "1e18"], 2, "--gpus: 1e+18 is beyond any possible size",
                     id="fit-gpus-1e18"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "1e15", "--gpus-per-node", "1e15"], 2, "--gpus", id="fit-gpus-1e15"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "1024", "--gpus-per-node", "1e15"], 2, "--gpus-per-node", id="fit-gpus-per-node-1e15"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "8", "--layers", "1e18", "--search"], 2, "--layers", id="fit-layers-1e18-search"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "8", "--batch", "9007199254740993", "--search"], 2, "--batch",
                     id="fit-batch-2^53+1-search"),
        pytest.param(["fit", *MODEL, *GPU, "--gpus", "8", "--batch", "9007199254740992", "--search"], 2, "--batch: 9,007,199,254,740,992",
                     id="fit-batch-2^53-search"),
        pytest.param(["memory", "--layers", "1000001", "--hidden", "64", "--heads", "1", "--seq-len", "8", "--pp", "3"], 2, "--layers",
                     id="uneven-hint-1e6-layers"),
    ],
)  # fmt: skip
def test_numbers_that_drive_loops_finish_quickly(runner, args: list[str], exit_code: int, expected: str) -> None:
    started = time.perf_counter()
    result = runner.invoke(app, args)
    elapsed = time.perf_counter() - started
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert expected in (result.stdout if exit_code == 0 else result.stderr), result.output
    assert elapsed < QUICK, f"{elapsed:.1f} s"


def test_large_searches_within_the_bounds_finish_quickly(runner) -> None:
    """The worst the bounds allow: a highly composite GPU count and batch, TP across nodes."""
    started = time.perf_counter()
    result = runner.invoke(app, ["fit", *MODEL, *GPU, "--search", "--gpus", "720720", "--batch", "14414400", "--allow-cross-node-tp",
                                 "--gpus-per-node", "1024"])  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert time.perf_counter() - started < 3 * QUICK


def test_tree_shape_closed_forms_match_the_walk() -> None:
    """Beyond WALKED_TREE_RANKS the tree's height and edges come from closed forms; up to it, the
    walk over every rank, which must agree with them."""
    from parcalc.core.collectives import WALKED_TREE_RANKS, tree_height, tree_max_edges

    for n in [*range(1, 300), 1023, 1024, 1025, 2047, 2048, 3000, WALKED_TREE_RANKS - 1, WALKED_TREE_RANKS]:
        assert tree_height(n) == (n - 1).bit_length(), n
        if n >= 4:
            assert (tree_max_edges(n), tree_max_edges(n, double=True)) == (3, 4), n
    assert tree_height(WALKED_TREE_RANKS + 1) == (WALKED_TREE_RANKS).bit_length()


def _balanced_splits_by_trial(layers: int, pp: int, chunks: int = 1) -> tuple[tuple[int, int], ...]:
    """Every split tried: the definition parcalc.core.stages.balanced_splits computes without trying."""
    if pp < 2 or layers < pp:
        return ()
    found = []
    middle = pp - 2
    for each in range(1, (layers - 2) // middle + 1) if middle else (0,):
        rest = layers - middle * each
        if middle and each % chunks:
            continue
        for first in range(chunks, rest, chunks):
            last = rest - first
            if last >= 1 and last % chunks == 0:
                found.append((max(first, last, each), first, last))
    if not found:
        return ()
    fewest = min(top for top, _, _ in found)
    return tuple(sorted((first, last) for top, first, last in found if top == fewest))


def test_balanced_splits_match_trying_every_split() -> None:
    from parcalc.core.stages import balanced_splits

    for layers in range(1, 70):
        for pp in range(1, 11):
            for chunks in (1, 2, 3, 4):
                assert balanced_splits(layers, pp, chunks) == _balanced_splits_by_trial(layers, pp, chunks), (layers, pp, chunks)
    started = time.perf_counter()
    assert balanced_splits(10**15 + 1, 3) == ((333333333333333, 333333333333334), (333333333333334, 333333333333333),
                                              (333333333333334, 333333333333334))  # fmt: skip
    assert time.perf_counter() - started < 0.1


# ---------------------------------------------------------------------------------------------
# D. A framework given with --framework runs what its stack runs (session 18's QA)

_8B_H200 = ["--model", "llama3-8b", "--gpu", "h200"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # presets/frameworks/torchtitan.yaml zero_stages [0, 3] (fully_shard, or DDP-like replicate): no ZeRO-1 / ZeRO-2
        pytest.param(["memory", *_8B_H200, "--dp", "8", "--framework", "torchtitan", "--zero", "1"],
                     "Error: --zero 1: TorchTitan (FSDP2, TP and PP on device meshes) offers ZeRO-0/3 only (PyTorch "
                     "torch.distributed.fsdp.fully_shard docs); see `parcalc presets show torchtitan`", id="memory-torchtitan-zero1"),
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "torchtitan", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "2"],
                     "Error: --zero 2: TorchTitan (FSDP2, TP and PP on device meshes) offers ZeRO-0/3 only (PyTorch "
                     "torch.distributed.fsdp.fully_shard docs); see `parcalc presets show torchtitan`", id="fit-torchtitan-zero2"),
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "torchtitan", "--search", "--zero", "1", "--zero", "3"],
                     "Error: --zero 1: TorchTitan (FSDP2, TP and PP on device meshes) offers ZeRO-0/3 only (PyTorch "
                     "torch.distributed.fsdp.fully_shard docs); see `parcalc presets show torchtitan`", id="search-torchtitan-zero1"),
        # presets/frameworks/megatron.yaml zero_stages [0, 1]: the distributed optimizer is ZeRO-1; no ZeRO-2, FSDP is fsdp2
        pytest.param(["memory", *_8B_H200, "--dp", "8", "--framework", "megatron", "--zero", "3"],
                     "Error: --zero 3: Megatron-LM (Megatron-Core) offers ZeRO-0/1 only (NVIDIA/Megatron-LM docs, distributed "
                     "optimizer); see `parcalc presets show megatron`", id="memory-megatron-zero3"),
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "fsdp2", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "2"],
                     "Error: --zero 2: PyTorch FSDP2 (fully_shard) offers ZeRO-0/3 only (PyTorch torch.distributed.fsdp.fully_shard "
                     "docs); see `parcalc presets show fsdp2`", id="fit-fsdp2-zero2"),
        # DeepSpeed's PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism' (fit refused it already)
        pytest.param(["memory", *_8B_H200, "--dp", "4", "--pp", "2", "--framework", "deepspeed", "--zero", "3"],
                     "Error: --zero 3: DeepSpeed ZeRO's pipeline engine (pp = 2) offers ZeRO-0/1 only (deepspeedai/DeepSpeed "
                     "deepspeed/runtime/pipe/engine.py); see `parcalc presets show deepspeed`", id="memory-deepspeed-pp-zero3"),
        # presets/frameworks/hf.yaml zero_stages [0] (plain DDP): refused by the data-parallel-only stack's layout_reason, in
        # the same words as --zero under any other profile (one function: Framework.zero_stage_reason)
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "hf", "--search", "--zero", "1"],
                     "Error: --zero 1: Hugging Face transformers (Trainer / accelerate, eager PyTorch, DDP) offers ZeRO-0 only "
                     "(PyTorch torch.nn.parallel.DistributedDataParallel); see `parcalc presets show hf`", id="search-hf-zero1"),
    ],
)  # fmt: skip
def test_a_zero_stage_the_framework_does_not_run_is_one_error_line(runner, args: list[str], expected: str) -> None:
    assert _one_error_line(runner.invoke(app, args)) == expected


@pytest.mark.parametrize(
    ("args", "starts"),
    [
        # megatron/core/jit.py: torch.compile only on the @jit_fuser fusions; the model itself is not compiled
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "megatron", "--compile"],
                     "Error: --compile --framework megatron: Megatron-LM does not torch.compile the model", id="fit-megatron-compile"),
        pytest.param(["memory", *_8B_H200, "--dp", "8", "--framework", "megatron", "--compile"],
                     "Error: --compile --framework megatron: Megatron-LM does not torch.compile the model", id="memory-megatron-compile"),
        # transformer_config.py: recompute_granularity 'full' | 'selective' with recompute_modules; no op-level policy
        pytest.param(["fit", *_8B_H200, "--gpus", "8", "--framework", "megatron", "--tp", "1", "--pp", "1", "--dp", "8",
                      "--recompute", "op"],
                     "Error: --recompute op --framework megatron: Megatron-LM has no op-level checkpointing policy", id="fit-megatron-op"),
        pytest.param(["scaling", *_8B_H200, "--gpus", "8,16", "--framework", "megatron", "--recompute", "op"],
                     "Error: --recompute op --framework megatron: Megatron-LM has no op-level checkpointing policy", id="scaling-megatron-op"),
        # deepspeed/runtime/activation_checkpointing/checkpointing.py: whole functions recomputed
        pytest.param(["memory", *_8B_H200, "--dp", "8", "--framework", "deepspeed", "--recompute", "op"],
                     "Error: --recompute op --framework deepspeed: DeepSpeed's activation checkpointing recomputes whole functions",
                     id="memory-deepspeed-op"),
    ],
)  # fmt: skip
def test_a_setting_the_framework_does_not_run_is_one_error_line(runner, args: list[str], starts: str) -> None:
    """docs/framework-flags.md: refused only under a --framework that was given (without it, a what-if stands)."""
    line = _one_error_line(runner.invoke(app, args))
    assert line.startswith(starts), line
    assert "megatron/core" in line or "deepspeed/runtime" in line  # the source named


def _profile_copy(tmp_path, key: str, name: str, edit=None):
    """presets/frameworks/KEY.yaml copied to tmp_path/frameworks/NAME.yaml (edited by `edit`), the --presets DIR to load it."""
    from parcalc.resources import data_dir

    text = (data_dir("presets") / "frameworks" / f"{key}.yaml").read_text()
    (tmp_path / "frameworks").mkdir(exist_ok=True)
    (tmp_path / "frameworks" / f"{name}.yaml").write_text(edit(text) if edit else text)
    return str(tmp_path)


def test_a_copy_of_a_profile_under_another_name_refuses_the_same(runner, tmp_path) -> None:
    """not_run is the profile's data (presets/frameworks/megatron.yaml), not a table keyed by 'megatron': a user's copy
    named my-megatron refuses --compile and --recompute op in the same words, its own key named."""
    presets = _profile_copy(tmp_path, "megatron", "my-megatron")
    line = _one_error_line(runner.invoke(app, ["memory", *_8B_H200, "--dp", "8", "--framework", "my-megatron", "--compile",
                                               "--presets", presets]))  # fmt: skip
    assert line == ("Error: --compile --framework my-megatron: Megatron-LM does not torch.compile the model; torch.compile runs "
                    "only on its @jit_fuser functions (megatron/core/jit.py; megatron/core/fusions: bias-GeLU, bias-SwiGLU, "
                    "bias-dropout-add), which its fused kernel set already is")  # fmt: skip
    line = _one_error_line(runner.invoke(app, ["fit", *_8B_H200, "--gpus", "8", "--framework", "my-megatron", "--tp", "1", "--pp",
                                               "1", "--dp", "8", "--recompute", "op", "--presets", presets]))  # fmt: skip
    assert line.startswith("Error: --recompute op --framework my-megatron: Megatron-LM has no op-level checkpointing policy")
    assert line.endswith("recompute_granularity 'full' or 'selective' and recompute_modules: core_attn, mlp, layernorm, moe_act, ...)")


def test_a_profile_without_not_run_runs_every_setting(runner, tmp_path) -> None:
    """The same copy with its not_run block taken out refuses nothing: the refusal is the data's, not the name's."""

    def without_not_run(text: str) -> str:
        lines = text.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.startswith("not_run:"))
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
        return "".join(lines[:start] + lines[end:])

    presets = _profile_copy(tmp_path, "megatron", "plain-megatron", without_not_run)
    result = runner.invoke(app, ["memory", *_8B_H200, "--dp", "8", "--framework", "plain-megatron", "--compile", "--presets", presets])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ('not_run:\n  "--fp8": {source: jit, why: "no"}\n',
         "key 'not_run.--fp8': not a setting a profile can refuse; one of --compile, --recompute selective, --recompute full, "
         "--recompute op"),
        ('not_run:\n  "--compile": {source: jit}\n', "key 'not_run.--compile.why': missing"),
        ('not_run:\n  "--compile": {source: nowhere, why: "no"}\n', "key 'not_run.--compile.source': source 'nowhere' is not a key"),
        ("not_run: {}\n", "key 'not_run': give at least one of --compile"),
    ],
)  # fmt: skip
def test_a_bad_not_run_block_is_one_error_line(runner, tmp_path, block: str, message: str) -> None:
    """A profile's not_run names flags parcalc knows (preset_frameworks.NOT_RUN_FLAGS), each with a why and a source."""

    def replaced(text: str) -> str:
        lines = text.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.startswith("not_run:"))
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
        return "".join([*lines[:start], block, *lines[end:]])

    presets = _profile_copy(tmp_path, "megatron", "odd", replaced)
    line = _one_error_line(runner.invoke(app, ["presets", "show", "odd", "--presets", presets]))
    assert line.startswith("Error: ") and message in line, line


def test_presets_show_lists_what_a_profile_does_not_run(run_json) -> None:
    """presets show megatron: a not_run row per refused flag, its source the YAML's (megatron/core/jit.py for --compile)."""
    rows = run_json("presets", "show", "megatron")["tables"]["fields"]["rows"]
    refused = [(row["field"], row["value"], row["source"]) for row in rows if row["field"] == "not_run"]
    assert [value for _, value, _ in refused] == ["--compile", "--recompute op"]
    assert refused[0][2].startswith("NVIDIA/Megatron-LM megatron/core/jit.py @d98e8a64: 'jit_fuser = torch.compile'")
    assert "recompute_granularity 'full' or 'selective'" in refused[1][2]


def test_what_a_framework_runs_stands(runner) -> None:
    """DeepSpeedEngine.compile() (deepspeed/runtime/compiler.py) compiles the module: --compile stands under deepspeed; and
    without --framework, --recompute op and --compile are what-ifs under the default (Megatron-LM) profile's timing."""
    for args in (["fit", *_8B_H200, "--gpus", "8", "--framework", "deepspeed", "--compile", "--tp", "1", "--pp", "1", "--dp", "8"],
                 ["fit", *_8B_H200, "--gpus", "8", "--compile", "--recompute", "op", "--tp", "1", "--pp", "1", "--dp", "8"]):  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output


def test_search_under_megatron_leaves_op_out() -> None:
    """fit --search --framework megatron tries none, selective and full; without --framework, op too (search_layouts.RECOMPUTES)."""
    from parcalc.core.choices import Recompute
    from parcalc.core.search_layouts import RECOMPUTES
    from parcalc.presets import load_framework
    from parcalc.results.parse import framework_recomputes

    assert framework_recomputes(load_framework("megatron", ()), RECOMPUTES) == (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    assert framework_recomputes(load_framework("torchtitan", ()), RECOMPUTES) == RECOMPUTES


def test_one_phrasing_for_a_zero_stage_refused() -> None:
    """The hf profile's layout_reason (a data-parallel-only stack), --zero under a profile (framework_zero_stage) and fit's
    check of DeepSpeed's pipeline engine say the same sentence: Framework.zero_stage_reason writes all three."""
    from parcalc.core.layout import Layout
    from parcalc.errors import InputError
    from parcalc.presets import load_framework
    from parcalc.results.parse import framework_zero_stage

    hf, deepspeed = load_framework("hf", ()), load_framework("deepspeed", ())
    with pytest.raises(InputError) as refused:
        framework_zero_stage(hf, 1, 1)
    assert hf.layout_reason(Layout(dp=8, zero=1)) == str(refused.value) == hf.zero_stage_reason(1, 1)
    assert deepspeed.zero_stage_reason(2, 1) is None  # ZeRO's engine runs every stage; its pipeline engine ZeRO-0/1
    assert deepspeed.zero_stage_reason(2, 4) == ("--zero 2: DeepSpeed ZeRO's pipeline engine (pp = 4) offers ZeRO-0/1 only "
                                                 "(deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py); see `parcalc presets "
                                                 "show deepspeed`")  # fmt: skip


def test_without_framework_the_textbook_zero_stages_all_stand(runner) -> None:
    """No --framework: ZeRO-1/2/3 are the textbook's (seed 000), timed under the default profile as before."""
    for zero in ("2", "3"):
        result = runner.invoke(app, ["memory", *_8B_H200, "--dp", "8", "--zero", zero])
        assert result.exit_code == 0, result.output


def _strategies(run_json, *flags: str) -> list[tuple[str, str]]:
    rows = run_json("fit", *_8B_H200, "--gpus", "8", *flags)["tables"]["strategies"]["rows"]
    return [(row["strategy"], row["recompute"]) for row in rows]


def test_the_strategy_table_offers_what_the_framework_runs(run_json) -> None:
    """torchtitan (zero_stages [0, 3], sequence_parallel_with_tp: apply_tp has no plan without SP): no ZeRO-1 / ZeRO-2 rows,
    no TP row without SP; hf (data parallelism only, DDP; whole-layer checkpointing): single GPU and DP, none and full."""
    titan = _strategies(run_json, "--framework", "torchtitan")
    assert [s for s, r in titan if r == "none"] == ["single GPU", "DP", "ZeRO-3 (FSDP)", "TP + SP", "PP", "TP x PP"]
    assert _strategies(run_json, "--framework", "hf") == [("single GPU", "none"), ("single GPU", "full"), ("DP", "none"), ("DP", "full")]
    default = _strategies(run_json)  # no --framework: every textbook family, as seed 000 asks
    assert [s for s, r in default if r == "none"] == ["single GPU", "DP", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)", "TP", "TP + SP", "PP",
                                                     "TP x PP"]  # fmt: skip


def test_torchtitans_tp_x_pp_row_runs_with_sequence_parallelism(run_json) -> None:
    """torchtitan's TP x PP row is TP 4 x PP 2 with SP, as its apply_tp runs it: the same memory as that configuration."""
    rows = run_json("fit", *_8B_H200, "--gpus", "8", "--framework", "torchtitan")["tables"]["strategies"]["rows"]
    row = next(r for r in rows if r["strategy"] == "TP x PP" and r["recompute"] == "none")
    pinned = run_json("memory", *_8B_H200, "--framework", "torchtitan", "--tp", "4", "--pp", "2", "--sequence-parallel",
                      "--micro-batches", "8")  # fmt: skip
    assert (row["tp"], row["pp"]) == (4, 2)
    assert row["memory"] == pytest.approx(pinned["results"]["total"]["value"], rel=1e-9)


class _Recorder:
    """parcalc.results.parse.ProgressBar as a list of its calls."""

    calls: ClassVar[list[tuple[int, int]]] = []
    closed = 0

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, done: int, total: int) -> None:
        _Recorder.calls.append((done, total))

    def close(self) -> None:
        _Recorder.closed += 1


def test_memory_reports_progress_through_its_stage_walks(runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3 405B on TP 8 x PP 8 x FSDP 8 under torchtitan walks eight stages and replays one (1.5 s, session 17; since
    session 19 every stage's walk replays the allocator with it, 3 s): memory drives the progress bar fit --search uses,
    one step a stage, in thousandths of a stage (1F1B's one-stage walks report nothing within)."""
    import parcalc.results.parse

    monkeypatch.setattr(parcalc.results.parse, "ProgressBar", _Recorder)
    _Recorder.calls, _Recorder.closed = [], 0
    result = runner.invoke(app, ["memory", *_8B_H200, "--framework", "torchtitan", "--pp", "2", "--dp", "4", "--zero", "3"])
    assert result.exit_code == 0, result.output
    assert _Recorder.calls == [(1000, 2000), (2000, 2000)] and _Recorder.closed == 1


def test_the_busy_line_shows_only_on_a_terminal_after_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """TeX's 5-15 s get a progress line on a terminal (parcalc.results.parse.BusyLine); not on a pipe, not for quick work."""
    import sys

    from parcalc.results.parse import BusyLine

    with BusyLine("typesetting x.pdf with TeX") as busy:  # stderr is not a terminal under pytest
        pass
    assert busy.timer is None and busy.bar is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with BusyLine("typesetting x.pdf with TeX") as busy:  # over before the second is up: nothing drawn, the timer cancelled
        assert busy.timer is not None
    busy.timer.join(5)
    assert busy.bar is None and busy.done and not busy.timer.is_alive()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--framework", "hf", "--tp", "2"], "Error: --framework hf: Hugging Face transformers (Trainer / accelerate, eager "
                     "PyTorch, DDP) runs data parallelism only, not tp = 2", id="hf-tp2"),
        pytest.param(["--framework", "hf", "--strategy", "pp"], "Error: --framework hf: Hugging Face transformers (Trainer / "
                     "accelerate, eager PyTorch, DDP) runs data parallelism only, not --strategy pp", id="hf-strategy-pp"),
        pytest.param(["--framework", "torchtitan", "--strategy", "zero2"], "Error: --strategy zero2: TorchTitan (FSDP2, TP and PP on "
                     "device meshes) offers ZeRO-0/3 only (PyTorch torch.distributed.fsdp.fully_shard docs); see `parcalc presets show "
                     "torchtitan`", id="torchtitan-strategy-zero2"),
        pytest.param(["--framework", "deepspeed", "--pp", "2", "--zero", "3"], "Error: --zero 3: DeepSpeed ZeRO's pipeline engine (pp "
                     "= 2) offers ZeRO-0/1 only (deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py); see `parcalc presets show "
                     "deepspeed`", id="deepspeed-pp2-zero3"),
    ],
)  # fmt: skip
def test_scaling_refuses_a_layout_the_framework_does_not_run(runner, args: list[str], expected: str) -> None:
    """Before: exit 0 and a curve of '-' rows, each saying why (hf with --tp 2), or the stage run under the profile."""
    base = ["scaling", *_8B_H200, "--gpus", "2,4,8", "--seq-len", "2048", "--batch", "8"]
    assert _one_error_line(runner.invoke(app, [*base, *args])) == expected


def test_scaling_runs_torchtitans_tp_with_sequence_parallelism(run_json) -> None:
    """torchtitan's apply_tp has no plan without SP: scaling --strategy tp under it is TP + SP, as memory and fit take it."""
    base = ("scaling", *_8B_H200, "--gpus", "2,4", "--seq-len", "2048", "--batch", "8", "--strategy", "tp")
    titan = run_json(*base, "--framework", "torchtitan")
    with_sp = run_json(*base, "--framework", "torchtitan", "--sequence-parallel")
    assert titan["tables"] == with_sp["tables"]


def test_report_refuses_a_format_its_output_file_contradicts(runner, tmp_path) -> None:
    """`report question1 --format latex -o answers.md` wrote LaTeX into a .md file, exit 0 (fit, memory, ... refuse it)."""
    target = tmp_path / "answers.md"
    line = _one_error_line(runner.invoke(app, ["report", "question1", "--format", "latex", "-o", str(target)]))
    assert line == (f"Error: --format latex and -o {shown(str(target))} disagree: -o's extension asks for markdown; drop --format, or name "
                    "the file for latex")  # fmt: skip
    assert not target.exists()
