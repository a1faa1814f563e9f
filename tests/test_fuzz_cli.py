"""Fuzzing every command with hostile option values (issue #12).

Each example runs one command in-process, from a valid base invocation (so that the hostile value
reaches the code behind the flag parsing) with a few options set to values such as 1e308, 1e-320,
-0, nan, inf, '', a long string, control characters or unicode, and asserts what a user may rely
on: an exit code of 0, 1 or 2, no traceback, no "inf" or "nan" printed as a result, one `Error:`
line on failure, and an answer within a time bound.

CI runs a fixed, derandomised sample (FUZZ_EXAMPLES per command, ~300 in all). By hand, for a
long run with fresh examples:

    PARCALC_FUZZ_EXAMPLES=100000 PARCALC_FUZZ_RANDOM=1 python -m pytest -q tests/test_fuzz_cli.py

`report` (TeX, files) and `calibrate gemm` (PyTorch) are left out, and `sweep` (a run file; its
hostile --vary values and files are tests/test_sweep.py's); -o, --presets, --template and --config
are never given, so that nothing is written or read beyond the packaged presets (hostile run files:
tests/test_runfile.py).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parcalc.cli import app, load_command

FUZZ_EXAMPLES = int(os.environ.get("PARCALC_FUZZ_EXAMPLES", "40"))
RANDOM = bool(os.environ.get("PARCALC_FUZZ_RANDOM"))
SECONDS_PER_EXAMPLE = 10.0  # a generous bound on 2 busy cores; the bugs this catches ran for minutes

GPU = ["--gpu", "a100-sxm4-80gb"]
SEED002 = str(Path(__file__).parent / "fixtures" / "seed002_timings.csv")
MODEL = ["--model", "homework-7b"]
H100_500W = ["--gpu", "h100-sxm5-96gb-hbm2e"]  # TorchTitan's 500 W H100: a power_curve and a default power_limit
# A valid invocation of each command; the fuzzed options are appended (the last occurrence wins).
BASES: dict[str, list[list[str]]] = {
    "peak-flops": [[*GPU, "--dtype", "tf32"], ["--clock", "1.41GHz", "--sms", "108", "--fma-per-clock", "512"],
                   [*H100_500W, "--dtype", "bf16"]],
    "intensity": [["--m", "4096", "--k", "4096", "--n", "4096", *GPU], [*MODEL, "--batch", "8", "--seq-len", "2048", *GPU],
                  [*MODEL, "--batch", "1", "--seq-len", "2048", *H100_500W, "--kernels", "eager"]],
    "comm-volume": [["--collective", "all-reduce", "--size", "1GB", "--workers", "8", "--compare"],
                    ["--strategy", "all", *MODEL, "--batch", "16", "--gpus", "8"],
                    ["--strategy", "3d", *MODEL, "--batch", "16", "--tp", "2", "--pp", "2", "--dp", "2"]],
    "bubble": [["--stages", "4", "--micro-batches", "8"], ["--stages", "4", "--micro-batches", "8", "--timeline"]],
    "memory": [[*MODEL, "--micro-batch", "1", *GPU], [*MODEL, "--tp", "2", "--pp", "4", "--dp", "2", "--zero", "1"],
               # a framework's step walk (torchtitan's FSDP2): --compile, --compile-loss, --fp8-all-gather, --cp reach it
               ["--model", "llama3.2-1b", "--seq-len", "2048", "--framework", "torchtitan", "--dp", "8", "--zero", "3", "--gpu", "h200"]],
    "flops": [[*MODEL, "--batch", "8"], [*MODEL, "--batch", "8", "--step-time", "2s", "--gpus", "8", *GPU]],
    "fit": [[*MODEL, *GPU, "--gpus", "8"], [*MODEL, *GPU, "--gpus", "8", "--search", "--top", "3"],
            [*MODEL, *GPU, "--gpus", "8", "--tp", "2", "--pp", "2", "--dp", "2"],
            # a power curve, an eager profile and DeepSpeed's pipeline engine: --power-limit, --kernels, --compile,
            # --recompute-modules reach their code
            [*MODEL, *H100_500W, "--gpus", "8", "--framework", "torchtitan", "--recompute", "selective"],
            [*MODEL, *H100_500W, "--gpus", "16", "--framework", "deepspeed", "--tp", "2", "--pp", "4", "--dp", "2", "--zero", "1"]],
    "scaling": [[*MODEL, *GPU, "--gpus", "1,2,4,8", "--seq-len", "2048", "--batch", "8"],
                [*MODEL, *GPU, "--gpus", "1,2,4,...,16", "--seq-len", "2048", "--weak", "--tp", "2"]],
    "analyze": [[SEED002, "--time-is", "epoch"], [SEED002, "--time-is", "epoch", "--message-size", "178MB", "--link", "pcie4-x16"]],
}  # fmt: skip
SKIPPED_OPTIONS = {"--output", "--presets", "--template", "--help", "--config"}

HOSTILE = [
    "0", "-0", "-1", "1", "2", "3", "7", "1e308", "-1e308", "1e-320", "1e-308", "1e1000000", "1e-1000000", "9007199254740993",
    "9007199254740992", "1e15", "1e18", "nan", "NaN", "inf", "-inf", "infinity", "", " ", "0.5", "1.5", "0x10", "1_000",
    "1e308GB", "1e308Hz", "1e-320s", "1e308s", "1e308GB/s", "1e308TFLOP/s", "1e-320GHz", "0GB", "1GiB", "24", "1.41",
    "10%", "150%", "-5%", "1e308%", "gpipe", "1f1b", "zb-h2", "interleaved", "fp8", "int4", "nvlink3", "h100-sxm5",
    "x" * 5000, "9" * 400, "1" + "0" * 400 + "GB", "\x00", "\x1b[31m", "a\nb", "☃", "1.41\u2009GHz", "١٢٣", "ｇｐｕ",
    "../../etc/passwd", "/dev/zero", "config.json", "1,2,3", "1s,1s,1s,1s", "1s,,1s", "-", "--", "--gpus",
]  # fmt: skip
_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
_units = st.sampled_from(["", "", "k", "M", "G", "Ki", "Gi", "GB", "GiB", "Gb/s", "GB/s", "GHz", "MHz", "s", "ms", "us", "%", "T", "TFLOP/s"])
VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.tuples(_numbers, _units).map("".join),
    st.text(max_size=30),
)


# Numbers near the edges, for options that take one; the unit is the option's (by its metavar).
EDGES = ["0", "1", "2", "3", "4", "8", "16", "64", "1024", "4096", "65536", "1e6", "1e9", "1e15", "9007199254740992",
         "9007199254740993", "1e18", "1e308", "1.7976931348623157e308", "1e-320", "5e-324", "1e-9", "0.5", "-1"]  # fmt: skip
UNITS_BY_METAVAR = {"TIME": ["s", "ms", "us", "ns", "h"], "BYTES": ["B", "GB", "GiB", "EiB", "b"], "B/s": ["B/s", "GB/s", "Gb/s"],
                    "FLOP/s": ["FLOP/s", "TFLOP/s", "EFLOP/s", "T"], "FREQ": ["Hz", "GHz", "MHz"], "FRACTION": ["", "%"]}  # fmt: skip
NAMES = ["homework-7b", "gpt3-175b", "llama3-405b", "bert-large", "a100-sxm4-80gb", "h100-sxm5", "l4", "mi300x", "nvlink3",
         "ib-hdr", "pcie4-x16", "megatron", "fsdp2", "deepspeed", "torchtitan"]  # fmt: skip


def _edge_value(units: list[str]) -> st.SearchStrategy[str]:
    number = st.one_of(st.sampled_from(EDGES), st.integers(min_value=1, max_value=2**60).map(str),
                       st.floats(min_value=1e-320, max_value=1e308).map(repr))  # fmt: skip
    return st.tuples(number, st.sampled_from(units or [""])).map("".join)


def _options(command_name: str) -> list[tuple[str, bool, list[str], list[str] | None]]:
    """(flag, is a switch, choices, units) of every option of the command that the fuzzer may set;
    units None: the option takes a name, not a number."""
    found = []
    for param in load_command(command_name).params:
        if param.param_type_name != "option":
            continue
        flags = [f for f in param.opts if f.startswith("--")]
        if not flags or flags[0] in SKIPPED_OPTIONS:
            continue
        choices = [str(getattr(c, "value", c)) for c in (getattr(param.type, "choices", None) or [])]
        units = None if "NAME" in str(param.metavar) else UNITS_BY_METAVAR.get(str(param.metavar), [])
        found.append((flags[0], bool(param.is_flag), choices, units))
        found += [(f, True, [], []) for f in param.secondary_opts if param.is_flag]
    return found


@st.composite
def invocations(draw: st.DrawFn, command_name: str) -> list[str]:
    args = [command_name, *draw(st.sampled_from(BASES[command_name]))]
    options = _options(command_name)
    for flag, switch, choices, units in draw(st.lists(st.sampled_from(options), min_size=1, max_size=3)):
        if switch:
            args.append(flag)
            continue
        kind = draw(st.integers(0, 9))
        if choices and kind < 4:
            value = draw(st.sampled_from(choices))
        elif units is None and kind < 7:
            value = draw(st.sampled_from(NAMES))
        elif units is not None and kind < 8:
            value = draw(_edge_value(units))
        else:
            value = draw(VALUES)
        args += [flag, value]
    return args


# A number printed as inf or NaN (not "infeasible", "info", "inference").
# AMD's GPU interconnect is called "Infinity Fabric" (presets/links/xgmi-mi300.yaml, the AMD GPU presets): a name, not a number.
NON_FINITE = re.compile(r"(?<![A-Za-z_])[-+]?(inf|infinity|nan)(?![A-Za-z_])(?!\s+Fabric)", re.IGNORECASE)


def check_invocation(args: list[str]) -> None:
    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    started = time.perf_counter()
    result = runner.invoke(app, args)
    elapsed = time.perf_counter() - started
    shown = f"parcalc {' '.join(repr(a) if not a or not a.isprintable() or ' ' in a else a for a in args)}"
    assert result.exit_code in (0, 1, 2), f"{shown}: exit {result.exit_code}\n{result.output[-2000:]}"
    assert "Traceback" not in result.output, f"{shown}\n{result.output[-2000:]}"
    assert elapsed < SECONDS_PER_EXAMPLE, f"{shown}: {elapsed:.1f} s"
    if result.exit_code == 0:
        match = NON_FINITE.search(result.stdout)
        assert match is None, f"{shown}: prints {match.group()!r}\n{result.stdout[-2000:]}"
    else:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("Error: "), f"{shown}\n{result.stderr[-2000:]}"
        if result.exit_code == 2:  # infeasible (1) may print the table that explains it first
            assert len(lines) == 1, f"{shown}\n{result.stderr[-2000:]}"
        assert len(lines[-1]) < 600, f"{shown}: a {len(lines[-1])}-character error line"


FUZZED = sorted(BASES)


@pytest.mark.parametrize("command_name", FUZZED)
def test_hostile_values_never_crash(command_name: str) -> None:
    @settings(max_examples=FUZZ_EXAMPLES, derandomize=not RANDOM, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(args=invocations(command_name))
    def run(args: list[str]) -> None:
        check_invocation(args)

    run()


@settings(max_examples=max(10, FUZZ_EXAMPLES // 2), derandomize=not RANDOM, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(category=st.sampled_from(["gpus", "links", "models", "frameworks", "worksheets", "", "x"]), name=VALUES,
       fmt=st.sampled_from(["table", "json", "csv", "markdown", "latex"]))  # fmt: skip
def test_presets_command_with_hostile_names(category: str, name: str, fmt: str) -> None:
    check_invocation(["presets", "list", *([category] if category else []), "--format", fmt])
    check_invocation(["presets", "show", name, "--format", fmt])


def test_every_fuzzed_command_has_a_base_and_options() -> None:
    """A new command joins the fuzzing here (or is named as left out in the module docstring)."""
    from parcalc.cli import COMMANDS

    assert set(COMMANDS) - set(FUZZED) == {"presets", "calibrate", "report", "sweep", "schema"}  # schema: one argument, no options
    for name in FUZZED:
        assert len(_options(name)) >= 3, name
