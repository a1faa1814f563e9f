"""JSON as a versioned interface: every example of every --help, run with --format json, is valid
against its command's shipped JSON Schema; the shipped files are current; the keys say one thing."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.docs_cli import command_paths, help_text
from parcalc.render.json_out import SCHEMA_VERSION
from parcalc.schema import COMMANDS, SCHEMA_DIR, file_name, schema_text
from tests.json_schema_check import problems

# Examples that cannot run here as they are: a file that is only a placeholder in the help text,
# a preset the example makes first, output to a file or a pipe, shell syntax.
SKIP_WORDS = (" timings.csv", " timings.yaml", "my-nvlink", " -o ", "--output", "|", ">", "--version", "--show-completion",
              "parcalc report", "parcalc schema")  # fmt: skip


def example_lines() -> list[str]:
    """Every `parcalc ...` line under "Examples:" of every --help, continuation lines joined."""
    lines: list[str] = []
    for path in command_paths():
        text = help_text(path)
        if "Examples:" not in text:
            continue
        for line in text.split("Examples:", 1)[1].replace("\\\n", " ").splitlines():
            line = line.strip().split("  #")[0].strip()
            if line.startswith("parcalc ") and line not in lines:
                lines.append(line)
    return lines


def as_json(line: str) -> list[str]:
    """The example's arguments with --format json in place of any --format it has."""
    args = shlex.split(line)[1:]
    for flag in ("--format", "-f"):
        while flag in args:
            at = args.index(flag)
            del args[at : at + 2]
    return [*args, "--format", "json"]


EXAMPLES = example_lines()
RUNNABLE = [line for line in EXAMPLES if not any(word in f" {line} " for word in SKIP_WORDS)]


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    from typer.testing import CliRunner

    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    out = {}
    for line in RUNNABLE:
        result = runner.invoke(app, as_json(line))
        assert result.exit_code in (0, 1), (line, result.output)
        out[line] = json.loads(result.stdout)
    return out


def test_there_are_examples_of_every_command_with_json(documents) -> None:
    commands = {document["command"] for document in documents.values()}
    assert commands == set(COMMANDS), set(COMMANDS) ^ commands
    assert len(documents) > 70  # 86 when this was written


@pytest.mark.parametrize("line", RUNNABLE)
def test_example_json_is_valid_against_its_schema(documents, line: str) -> None:
    document = documents[line]
    schema = json.loads((SCHEMA_DIR / file_name(document["command"])).read_text())
    assert problems(document, schema) == []
    assert document["schema_version"] == SCHEMA_VERSION == 1
    assert line.removeprefix("parcalc ").startswith(document["command"]) or document["command"] == "peak-flops"


def test_the_real_validator_agrees_where_installed(documents) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for command in COMMANDS:
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMA_DIR / file_name(command)).read_text()))
    for line, document in documents.items():
        schema = json.loads((SCHEMA_DIR / file_name(document["command"])).read_text())
        jsonschema.Draft202012Validator(schema).validate(document)


def test_the_checker_rejects_what_the_schema_forbids(documents) -> None:
    """A wrong type, an unknown key and a missing key are each found (the check can fail)."""
    document = documents["parcalc memory --model homework-7b --micro-batch 1 --seq-len 4096 --gpu a100-sxm4-80gb"]
    schema = json.loads((SCHEMA_DIR / "memory.json").read_text())
    assert problems({**document, "fits": "yes"}, schema) == ["$.fits: 'yes' is not boolean or null"]
    assert problems({**document, "extra": 1}, schema) == ["$: 'extra' is not allowed"]
    settings = {**document["settings"], "sequence_parallel": "false"}
    assert problems({**document, "settings": settings}, schema) == ["$.settings.sequence_parallel: 'false' is not boolean"]
    assert problems({k: v for k, v in document.items() if k != "schema_version"}, schema) == ["$: 'schema_version' is required"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_shipped_schema_files_are_current(command: str) -> None:
    assert (SCHEMA_DIR / file_name(command)).read_text() == schema_text(command), "run: python -m parcalc.schema"


def test_schema_files_are_package_data() -> None:
    """parcalc/schemas sits inside the package, which hatch ships whole (pyproject: packages = ["parcalc"])."""
    assert SCHEMA_DIR.parent == Path(__import__("parcalc").__file__).resolve().parent
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(file_name(c) for c in COMMANDS)


def test_one_name_one_unit_across_commands(documents) -> None:
    """inputs.s was the sequence length in memory and bytes per element in intensity: now every
    top-level input name has one unit in every command, and the renamed ones say which."""
    units: dict[str, set[str]] = defaultdict(set)
    for document in documents.values():
        for name, term in document["inputs"].items():
            units[name].add(term["unit"])
    assert {name: seen for name, seen in units.items() if len(seen) > 1} == {}
    assert "s" not in units and "h" not in units
    assert units["bytes_per_element"] == {"B"} and units["seq_len"] == {""}


def test_descriptive_keys_where_symbols_collided(run_json) -> None:
    memory = run_json("memory", "--model", "homework-7b", "--seq-len", "4096")
    intensity = run_json("intensity", "--model", "homework-7b", "--batch", "1", "--seq-len", "4096", "--dtype", "fp16")
    assert memory["inputs"]["seq_len"]["value"] == 4096 and memory["inputs"]["hidden"]["value"] == 4096
    assert intensity["inputs"]["bytes_per_element"]["value"] == 2  # fp16
    assert intensity["inputs"]["seq_len"]["value"] == 4096
    assert intensity["inputs"]["head_dim"]["value"] == 128  # homework-7b: hidden 4096 / 32 heads
    assert intensity["inputs"]["hidden"]["value"] == 4096


def test_settings_are_typed_and_gpu_is_the_preset_name(run_json) -> None:
    memory = run_json("memory", "--model", "homework-7b", "--tp", "2", "--dp", "2", "--zero", "1", "--sequence-parallel",
                      "--gpu", "A100-SXM4-80GB")  # fmt: skip
    assert memory["settings"]["sequence_parallel"] is True and memory["settings"]["zero"] == 1
    assert memory["settings"]["gpu"] == "a100-sxm4-80gb"
    fit = run_json("fit", "--model", "homework-7b", "--gpu", "A100-SXM4-80GB", "--gpus", "2", "--seq-len", "2048")
    assert fit["settings"]["gpu"] == "a100-sxm4-80gb" and fit["settings"]["gpu_name"] == "NVIDIA A100 SXM4 80GB"
    assert fit["settings"]["flash_attention"] is False


def test_memory_says_whether_it_fits(run_json) -> None:
    """homework-7b, b = 1, s = 4096, mixed bf16 + AdamW on one GPU: 16 B x 6.7e9 parameters ~ 100 GiB of
    states alone, over an A100's 80 GiB; ZeRO-3 over 8 with full recomputation and FlashAttention: ~16.5
    GiB (the memory command's own verdicts say the same)."""
    big = run_json("memory", "--model", "homework-7b", "--seq-len", "4096", "--gpu", "a100-sxm4-80gb")
    assert big["fits"] is False and big["verdicts"][0].startswith("does not fit")
    small = run_json("memory", "--model", "homework-7b", "--seq-len", "4096", "--dp", "8", "--zero", "3", "--recompute", "full",
                     "--flash-attention", "--gpu", "a100-sxm4-80gb")  # fmt: skip
    assert small["fits"] is True and small["verdicts"][0].startswith("fits")
    assert run_json("memory", "--model", "homework-7b", "--seq-len", "4096")["fits"] is None  # no capacity: no verdict


def test_a_search_where_nothing_fits_still_prints_its_json(runner) -> None:
    """Llama 3 405B on 8 A100s: ~810 GB of bf16 weights alone, over 8 x 80 GiB: nothing fits, exit 1,
    and the JSON holds every configuration tried, each with fits false."""
    result = runner.invoke(app, ["fit", "--model", "llama3-405b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--batch", "8",
                                 "--seq-len", "2048", "--search", "--format", "json"])  # fmt: skip
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["fits"] is False and document["verdicts"][0].startswith("nothing fits")
    rows = document["tables"]["configurations"]["rows"]
    assert rows and not any(row["fits"] for row in rows)
    assert problems(document, json.loads((SCHEMA_DIR / "fit.json").read_text())) == []
    assert result.stderr.startswith("Error: nothing fits")


def test_parcalc_schema_prints_the_shipped_file(runner) -> None:
    result = runner.invoke(app, ["schema", "presets-list"])
    assert result.exit_code == 0 and result.stdout == (SCHEMA_DIR / "presets-list.json").read_text()
    assert runner.invoke(app, ["schema", "presets list"]).stdout == result.stdout
    listed = runner.invoke(app, ["schema"])
    assert listed.stdout.split("\n")[:-1] == list(COMMANDS)
    wrong = runner.invoke(app, ["schema", "memroy"])
    assert wrong.exit_code == 2 and "did you mean 'memory'?" in wrong.stderr


def test_nothing_fits_on_any_gpu_type_still_prints_json_and_the_table_the_nearest(runner) -> None:
    """The same over two GPU types (both 80 GiB): one table of every configuration of each, a gpu column;
    the terminal gets the 5 smallest footprints instead of all 636 (Llama 3.1 405B: 916.9 GB at best)."""
    line = ["fit", "--model", "llama3-405b", "--gpus", "8", "--batch", "8", "--seq-len", "2048", "--search", "--gpu", "a100-sxm4-80gb"]
    both = runner.invoke(app, [*line, "--gpu", "h100-sxm5", "--format", "json"])
    assert both.exit_code == 1 and both.stderr.startswith("Error: nothing fits on any GPU type")
    document = json.loads(both.stdout)
    rows = document["tables"]["configurations"]["rows"]
    assert {row["gpu"] for row in rows} == {"NVIDIA A100 SXM4 80GB", "NVIDIA H100 SXM5 80GB"} and not any(row["fits"] for row in rows)
    assert document["settings"]["gpu"] == "a100-sxm4-80gb,h100-sxm5" and document["fits"] is False
    assert problems(document, json.loads((SCHEMA_DIR / "fit.json").read_text())) == []
    table = runner.invoke(app, [*line, "--format", "markdown"])
    assert table.exit_code == 1 and "The 5 smallest footprints (none fits)" in table.stdout
