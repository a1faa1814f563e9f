"""Building a command's flags must not load the math, the presets' YAML or the renderers: a
one-liner pays only for what it runs. The flags' choices come from parcalc.core.choices, which
imports nothing, so the CLI and the core cannot drift apart."""

import functools
import subprocess
import sys

import pytest

from parcalc.cli import COMMANDS

HEAVY = ("parcalc.core.comm", "parcalc.core.collectives", "parcalc.core.memory", "parcalc.core.activations",
         "parcalc.core.flops", "parcalc.core.pipeline", "parcalc.core.model", "parcalc.presets", "yaml", "jinja2",
         "parcalc.render.terminal")  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_loading_a_command_imports_no_core_module(name: str) -> None:
    script = f"""
import sys
from parcalc.cli import load_command
load_command({name!r})
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"`parcalc {name}` imports {out} before it runs"


def test_building_a_command_reads_its_parameters_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """parcalc.cli._get_command: typer reads a command function's parameters twice (typer/main.py,
    get_command_from_info); the second read is served from the first (start-up time)."""
    import typer.main

    from parcalc.cli import load_command

    calls: list[str] = []
    real = typer.main.get_params_from_function

    def counting(function):
        calls.append(function.__name__)
        return real(function)

    monkeypatch.setattr(typer.main, "get_params_from_function", counting)
    command = load_command("comm-volume")
    assert calls == ["comm_volume"]
    assert typer.main.get_params_from_function is counting  # put back as it was
    names = {p.name for p in command.params}
    assert {"strategy", "model", "batch", "seq_len", "tp", "pp", "dp"} <= names and len(names) > 40


# The one-liners (benchmarks/startup.py): their command functions are defined without `from __future__ import
# annotations`, so typer's inspect.signature(eval_str=True) finds objects, not strings to compile and evaluate
# (~1.3 ms of a flops run before).
ONE_LINERS = ("peak-flops", "intensity", "comm-volume", "bubble", "flops")


@pytest.mark.parametrize("name", ONE_LINERS)
def test_a_one_liner_s_annotations_are_objects_not_strings(name: str) -> None:
    import importlib
    import inspect

    from parcalc.cli import COMMANDS

    spec = COMMANDS[name]
    function = getattr(importlib.import_module(spec.module), spec.function)
    strings = [p.name for p in inspect.signature(function).parameters.values() if isinstance(p.annotation, str)]
    assert strings == [], f"{spec.module}.{spec.function}: string annotations {strings}"


def test_building_a_command_does_not_compute_type_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    """parcalc.cli._get_command: typer asks typing.get_type_hints for every parameter but reads them only for a
    parameter without a typer.Option (typer/utils.py get_params_from_function); every parcalc flag has one, so the
    hints (every Annotated type rebuilt without its metadata) are never computed, and the flags are the same."""
    import typer.utils

    from parcalc.cli import load_command

    calls: list[object] = []
    real = typer.utils.get_type_hints

    def counting(function):
        calls.append(function)
        return real(function)

    monkeypatch.setattr(typer.utils, "get_type_hints", counting)
    command = load_command("flops")
    assert calls == []
    assert typer.utils.get_type_hints is counting  # put back as it was
    # the flags typer made from the annotations alone: --batch a text option (parcalc parses its units), not required
    batch = next(p for p in command.params if p.name == "batch")
    assert (batch.opts, batch.required, batch.default) == (["--batch"], False, None)
    # click's string type (its name "str" in typers that vendor click as typer._click, "text" in click itself)
    assert type(batch.type).__name__ == "StringParamType"


# What each one-liner of benchmarks/startup.py leaves out, checked after it ran (its answer printed) in a fresh
# interpreter, the preset cache warm: json (the preset cache is marshal: parcalc.preset_cache), yaml (the cache
# serves the parse), string (parcalc.derivation.fill imports it where a formula is written out: the one-liners' brief
# text of these commands writes none), hashlib (the cache's digest is _blake2, without OpenSSL), and what no text
# answer needs (jinja2, numpy, the renderers' other formats). Each kept out by a lazy import, with its reason where it is.
# parcalc.core.timing.framework: the framework profiles (Framework, MEGATRON, with parcalc.core.layout and .timing.host);
# --kernels is checked against them only when given (results.parse.kernels_flag), and a layer's kernels need none.
# parcalc.core.expert_parallel: an MoE model's expert grid (with parcalc.core.layer_params); comm-volume's expert rows
# and assumptions return before it for a dense model (parcalc.core.comm.expert)
# parcalc.core.choices: the enums (~1 ms to create); a one-liner whose flags and answer have none (peak-flops, a GEMM's
# intensity) leaves them out (results.parse imports Schedule where the pipeline layout needs it). Each preset kind's
# validation (parcalc.preset_hardware: GPUs and links; .preset_models; .preset_frameworks) is imported when a preset of
# that kind is read (parcalc.presets._builder). parcalc.core.comm.float8_all_gather: read only under --fp8-all-gather.
NOT_LOADED = ("json", "yaml", "string", "decimal", "hashlib", "jinja2", "numpy", "parcalc.render.terminal", "parcalc.flags",
              "parcalc.core.timing.framework", "parcalc.core.expert_parallel", "parcalc.core.choices", "parcalc.preset_hardware",
              "parcalc.preset_models", "parcalc.preset_frameworks", "parcalc.core.comm.float8_all_gather")  # fmt: skip
# decimal: parcalc.units reads a plain whole number ("--batch 1536") as an int, a short decimal with a unit (a preset's
# "19.5 TFLOP/s", "3.4 us", "--size 1GB") in ints and a YAML float as it is; fractions.Fraction (the pipeline
# schedules) still imports it
WITH_DECIMAL = ("decimal",)
CHOICES = ("parcalc.core.choices",)  # a flag or an answer with an enum: --schedule, --strategy, --recompute, a model's --mlp
GPU_OR_LINK = ("parcalc.preset_hardware",)  # a GPU or a link preset read
MODEL = ("parcalc.preset_models",)  # a model preset read
ONE_LINER_RUNS = {
    "peak-flops": (["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32"], ("string", *GPU_OR_LINK)),  # its brief writes 2 x clock x ...
    "intensity": (["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--gpu", "a100-sxm4-80gb"], GPU_OR_LINK),
    "intensity no gpu": (["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--dtype", "fp16"], ()),
    "intensity layer": (["intensity", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb"],
                        (*CHOICES, *GPU_OR_LINK, *MODEL)),
    "comm-volume collective": (["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8", "--link", "nvlink3"],
                               (*CHOICES, *GPU_OR_LINK)),
    "comm-volume all": (["comm-volume", "--strategy", "all", "--model", "gpt3-175b", "--batch", "1536", "--seq-len", "2048"],
                        (*CHOICES, *GPU_OR_LINK, *MODEL)),
    "comm-volume 3d": (["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--dp", "4", "--batch",
                        "1536", "--seq-len", "2048"], (*CHOICES, *GPU_OR_LINK, *MODEL)),
    "comm-volume 3d megatron": (["comm-volume", "--strategy", "3d", "--model", "gpt3-175b", "--tensor-model-parallel-size", "8",
                                 "--pipeline-model-parallel-size", "8", "--dp", "4", "--global-batch-size", "1536", "--seq-length",
                                 "2048"], ("parcalc.flags", *CHOICES, *GPU_OR_LINK, *MODEL)),  # Megatron-LM's spelling is parcalc.flags' vocabulary
    "bubble": (["bubble", "--pp", "4", "--micro-batches", "16", "--schedule", "1f1b"], (*WITH_DECIMAL, *CHOICES)),
    "flops": (["flops", "--model", "homework-7b", "--batch", "128", "--seq-len", "4096"], (*CHOICES, *MODEL)),
}  # fmt: skip


# What typer, click and rich load themselves to run a command (none of NOT_LOADED with the newest versions; an older typer
# or rich may import json): not parcalc's to leave out.
_TYPER_ALONE = f"""
import sys, typer
app = typer.Typer()
@app.command()
def answer(batch: int = 1) -> None:
    typer.echo(batch)
app(["--batch", "2"], standalone_mode=False)
sys.stderr.write("LOADED " + ",".join(m for m in {NOT_LOADED!r} if m in sys.modules) + "\\n")
"""


@functools.cache
def _loaded_by_typer_alone() -> frozenset[str]:
    done = subprocess.run([sys.executable, "-c", _TYPER_ALONE], capture_output=True, text=True, check=True)
    loaded = next(line for line in done.stderr.splitlines() if line.startswith("LOADED "))[len("LOADED "):]
    return frozenset(filter(None, loaded.split(",")))


@pytest.mark.parametrize("name", sorted(ONE_LINER_RUNS))
def test_a_one_liner_leaves_out_what_its_answer_does_not_use(name: str) -> None:
    args, allowed = ONE_LINER_RUNS[name]
    allowed = (*allowed, *_loaded_by_typer_alone())
    script = f"""
import atexit, builtins, sys
sys.argv = ["parcalc", *{args!r}]
atexit.register(lambda: sys.stderr.write("LOADED " + ",".join(m for m in {NOT_LOADED!r} if m in sys.modules) + "\\n"))
compiled = []  # texts parcalc compiles at run time (a @frozen class's __init__: parcalc.code_cache)
real_compile = builtins.compile
def counting(source, *args, **kwargs):
    if sys._getframe(1).f_globals.get("__name__", "").startswith("parcalc"):
        compiled.append(source)
    return real_compile(source, *args, **kwargs)
builtins.compile = counting
atexit.register(lambda: sys.stderr.write(f"COMPILED {{len(compiled)}}\\n"))
from parcalc.__main__ import main
main()
"""
    for _ in range(2):  # the first run may parse YAML and fill the preset cache; the second is the user's every run
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "no answer printed"
    loaded = next(line for line in done.stderr.splitlines() if line.startswith("LOADED "))[len("LOADED "):]
    assert set(filter(None, loaded.split(","))) <= set(allowed), f"`parcalc {' '.join(args)}` imported {loaded}"
    # the second run's @frozen __init__s come from the code cache the first one filled: nothing compiled
    assert "COMPILED 0" in done.stderr.splitlines(), f"`parcalc {' '.join(args)}` compiled at run time: {done.stderr[-300:]}"
