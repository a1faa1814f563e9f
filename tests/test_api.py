"""The library API (parcalc.api): a function per command, the CLI's JSON from Result.to_dict(),
Markdown / HTML for notebooks, a cheap `import parcalc`, and the example notebook run cell by cell."""

from __future__ import annotations

import inspect
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import parcalc
from parcalc import api
from parcalc.cli import app
from parcalc.errors import InfeasibleError, InputError
from parcalc.results.layout_flags import LAYOUT_FLAGS
from parcalc.runfile import input_slots, leaf_command

ROOT = Path(__file__).resolve().parent.parent
NOT_ARGUMENTS = {"fmt", "output", "help", "config", "detail"}  # detail: how much the text output shows


@pytest.mark.parametrize("name", sorted(api.COMMAND_FUNCTIONS))
def test_each_function_takes_its_commands_flags(name: str) -> None:
    command = leaf_command(api.COMMAND_FUNCTIONS[name])
    function = getattr(api, name)
    expected = {p.name for p in command.params} - NOT_ARGUMENTS
    if api.COMMAND_FUNCTIONS[name] in LAYOUT_FLAGS:  # layout=parcalc.Layout(...) for the flags of its fields (tests/test_requests.py)
        expected.add("layout")
    assert set(inspect.signature(function).parameters) == expected
    assert function.__doc__.startswith(inspect.cleandoc(command.help).split("\n")[0])
    for param in expected:
        assert f"    {param} (" in function.__doc__, param
    if name != "peak_flops":  # the formula keeps the top-level name (README, "Using parcalc as a library")
        assert getattr(parcalc, name) is function


def _first_example(command_name: str) -> list[str]:
    """The command's first example in its --help, as arguments, with -o / -f and their values removed."""
    command = leaf_command(command_name)
    prefix = f"parcalc {command_name} "
    line = next(ln.strip() for ln in command.epilog.splitlines() if ln.strip().startswith(prefix))
    words = shlex.split(line[len(prefix):])
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("-o", "--output", "-f", "--format"):
            skip = True
        else:
            out.append(word)
    return out


def _as_keywords(command_name: str, words: list[str]) -> tuple[list[str], dict]:
    slots = input_slots(leaf_command(command_name))
    args: list[str] = []
    kwargs: dict = {}
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("--"):
            args.append(word)
        else:
            slot = slots[word[2:]]
            if getattr(slot.param, "is_flag", False):
                kwargs[slot.param.name] = slot.positive
            else:
                index += 1
                if slot.param.multiple:
                    kwargs.setdefault(slot.param.name, []).append(words[index])
                else:
                    kwargs[slot.param.name] = words[index]
        index += 1
    return args, kwargs


@pytest.mark.parametrize("name", sorted(api.COMMAND_FUNCTIONS))
def test_to_dict_is_the_commands_json(runner, name: str) -> None:
    command_name = api.COMMAND_FUNCTIONS[name]
    words = _first_example(command_name)
    cli = runner.invoke(app, [*command_name.split(), *words, "--format", "json"])
    assert cli.exit_code == 0, cli.output
    args, kwargs = _as_keywords(command_name, words)
    result = getattr(api, name)(*args, **kwargs)
    assert result.to_dict() == json.loads(cli.stdout)


def test_memory_from_python_with_known_values() -> None:
    # GPT-3 175B, t = 8, p = 8, SP, selective recomputation: 34 sbh / t = 106,954,752 bytes of
    # activations per layer (Korthikanti et al. 2022, Table 2), 12 layers x 8 in flight on stage 1.
    result = parcalc.memory(layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048, micro_batch=1, tp=8, pp=8,
                            sequence_parallel=True, recompute="selective")  # fmt: skip
    assert result.derivation("activation_per_layer").value == 106_954_752
    assert result.derivation("stage_activations").value == 10_267_656_192
    assert result.command == "memory"
    # the same through parcalc.run, by the command's name
    assert parcalc.run("memory", layers=96, hidden=12288, heads=96, vocab=51200, seq_len=2048, tp=8, pp=8,
                       sequence_parallel=True, recompute="selective") == result  # fmt: skip


def test_the_command_peak_flops_and_the_formula() -> None:
    # A100: 2 x 1.41 GHz x 108 SMs x 512 TF32 FMA/clock (whitepaper Table 1) = 155.93472 TFLOP/s
    assert parcalc.peak_flops(1.41e9, 108, 512, dtype="tf32").value == 155_934_720_000_000
    result = api.peak_flops(gpu="a100-sxm4-80gb", dtype="tf32")
    assert result.derivation("peak_flops").value == 155_934_720_000_000


def test_errors_from_python() -> None:
    with pytest.raises(TypeError, match=r"memory\(\) got an unexpected keyword argument 'tpp'; did you mean 'tp'\?"):
        parcalc.memory(tpp=8)
    with pytest.raises(TypeError):
        parcalc.memory("too", "many")
    with pytest.raises(InputError, match=r"--tp: '-1' must not be negative"):
        parcalc.memory(model="gpt3-175b", tp=-1)
    with pytest.raises(InputError, match=r"key 'tp': takes one value, got a list of 2"):
        parcalc.memory(model="gpt3-175b", tp=[1, 2])
    with pytest.raises(InputError, match=r"key 'sequence_parallel': a switch, true or false"):
        parcalc.memory(model="gpt3-175b", sequence_parallel="yes")
    with pytest.raises(InfeasibleError, match="nothing fits"):
        parcalc.fit(model="gpt3-175b", gpu="a100-sxm4-80gb", gpus=8, batch=8, search=True)
    with pytest.raises(InputError, match=r"no command 'memroy'; did you mean 'memory'\?"):
        parcalc.run("memroy")
    with pytest.raises(AttributeError):
        parcalc.no_such_command  # noqa: B018


def test_notebook_display() -> None:
    from parcalc.render.markdown import render_markdown

    result = api.peak_flops(gpu="a100-sxm4-80gb", dtype="tf32")
    assert result._repr_markdown_() == render_markdown(result)
    page = result._repr_html_()
    assert "<h1>Peak TF32 FLOP/s of NVIDIA A100 SXM4 80GB</h1>" in page
    assert "<table>" in page and "<td>1.41 GHz</td>" in page
    # LaTeX reaches MathJax as written: Markdown would have eaten the \\ line breaks and the _ subscripts
    assert r"P_{\mathrm{peak}} = 2 \times f \times N_{\mathrm{SM}} \times \mathrm{FMA} \\" in page


def test_html_escapes_what_it_shows() -> None:
    from parcalc.render.html import markdown_to_html

    page = markdown_to_html("# <script>alert(1)</script>\n\n$a < b$ and <b>bold</b>\n")
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page and "$a &lt; b$" in page


def test_import_parcalc_stays_cheap() -> None:
    code = ("import sys, parcalc; heavy = [m for m in ('typer', 'click', 'rich', 'yaml', 'numpy', 'parcalc.api', "
            "'parcalc.cli') if m in sys.modules]; print(heavy); parcalc.memory; print('parcalc.api' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"


def test_the_example_notebook_runs() -> None:
    notebook = json.loads((ROOT / "examples" / "notebook.ipynb").read_text())
    cells = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert len(cells) >= 5
    namespace: dict = {"display": lambda *objects: [o._repr_html_() for o in objects]}
    for source in cells:
        exec(compile(source, "notebook.ipynb", "exec"), namespace)  # noqa: S102 - our own example
    # the notebook's last cell checks its own numbers (asserts); here, that it got to the sweep
    assert namespace["table"][0]["status"] == "ok"


def test_python_values_enums_tuples_and_numbers() -> None:
    from parcalc.core.choices import Offload, ZeroStage

    typed = parcalc.memory(model="llama3-8b", dp=8, zero=ZeroStage.ZERO2, offload=(Offload.OPTIMIZER,), seq_len=4096)
    texts = parcalc.memory(model="llama3-8b", dp="8", zero="2", offload=["optimizer"], seq_len="4096")
    assert typed == texts
    assert typed.to_dict()["settings"]["zero"] == 2 and typed.to_dict()["settings"]["offload"] == ["optimizer"]  # typed settings (schema_version 1)
