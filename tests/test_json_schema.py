"""JSON as a versioned interface: every example of every --help, run with --format json, is valid
against its command's shipped JSON Schema; the shipped files are current; the keys say one thing."""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from pathlib import Path

import pytest

from parcalc.cli import app
from parcalc.derivation import SCHEMA_VERSION
from parcalc.docs_cli import command_paths, help_text
from parcalc.help_panels import examples_block
from parcalc.resources import data_dir
from parcalc.schema import COMMANDS, OWN_SCHEMAS, SCHEMA_DIR, SHIPPED, file_name, schema_text
from tests.json_schema_check import problems

ROOT = Path(__file__).resolve().parent.parent

# Examples that cannot run here as they are: a file that is only a placeholder in the help text,
# a preset the example makes first, output to a file or a pipe, shell syntax.
SKIP_WORDS = (" timings.csv", " timings.yaml", "my-nvlink", " -o ", "--output", "|", ">", "--version", "--show-completion",
              "parcalc report --list", "parcalc schema")  # fmt: skip


def example_lines() -> list[str]:
    """Every `parcalc ...` line under "Examples:" of every --help, continuation lines joined."""
    lines: list[str] = []
    for path in command_paths():
        text = help_text(path)
        if "Examples:" not in text:
            continue
        for line in examples_block(text).replace("\\\n", " ").splitlines():  # the options follow the examples
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

# Every command's epilog shows `parcalc COMMAND --config run.yaml` (parcalc.cli._give_config_option):
# the file each runs with here, as a mapping of flag names, and the same flags on a command line
# (test_a_run_file_gives_what_its_flags_give). Files are given by absolute path, because a run
# file's relative paths are read beside it (parcalc.runfile). The values are those of the
# command's own examples in its --help.
_LAB_TIMINGS = str(data_dir("presets") / "worksheets" / "lab-ddp-timings.csv")
_TRACE_FILE = str(ROOT / "tests" / "fixtures" / "h200" / "trace-llama1b-b4-s4096.json.gz")
_NCCL_FILE = str(ROOT / "tests" / "fixtures" / "nccl" / "a100x8_nvlink_all_reduce.txt")
RUN_FILES: dict[str, tuple[dict[str, object], list[str]]] = {
    "peak-flops": ({"gpu": "a100-sxm4-80gb", "dtype": "tf32"}, ["--gpu", "a100-sxm4-80gb", "--dtype", "tf32"]),
    "intensity": ({"model": "llama3-8b", "seq-len": 8192, "dtype": "bf16", "gpu": "h100-sxm5", "flash-attention": True, "compile": True},
                  ["--model", "llama3-8b", "--seq-len", "8192", "--dtype", "bf16", "--gpu", "h100-sxm5", "--flash-attention", "--compile"]),
    "comm-volume": ({"collective": "all-reduce", "size": "1GiB", "gpus": 16, "gpu": "h100-sxm5"},
                    ["--collective", "all-reduce", "--size", "1GiB", "--gpus", "16", "--gpu", "h100-sxm5"]),
    "bubble": ({"pp": 4, "micro-batches": 8, "schedule": "interleaved", "chunks": 2},
               ["--pp", "4", "--micro-batches", "8", "--schedule", "interleaved", "--chunks", "2"]),
    "memory": ({"model": "homework-7b", "seq-len": 4096, "dp": 8, "zero": 3, "recompute": "full", "flash-attention": True,
                "offload": ["optimizer"], "gpu": "a100-sxm4-80gb"},
               ["--model", "homework-7b", "--seq-len", "4096", "--dp", "8", "--zero", "3", "--recompute", "full", "--flash-attention",
                "--offload", "optimizer", "--gpu", "a100-sxm4-80gb"]),
    "flops": ({"model": "llama3-8b", "batch": 512, "seq-len": 8192, "causal": True, "step-time": "6.5s", "gpus": 64, "gpu": "h100-sxm5"},
              ["--model", "llama3-8b", "--batch", "512", "--seq-len", "8192", "--causal", "--step-time", "6.5s", "--gpus", "64",
               "--gpu", "h100-sxm5"]),
    "fit": ({"model": "llama3-8b", "gpu": "h100-sxm5", "gpus": 8, "batch": 64, "seq-len": 4096, "tp": 2, "pp": 1, "sequence-parallel": True},
            ["--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len", "4096", "--tp", "2", "--pp", "1",
             "--sequence-parallel"]),
    "presets list": ({"category": "gpus"}, ["gpus"]),  # a positional argument by its name
    "presets show": ({"name": "nvlink4"}, ["nvlink4"]),
    "calibrate gemm": ({"device": "cpu", "shapes": "tiny", "peak": "2TFLOP/s"}, ["--device", "cpu", "--shapes", "tiny", "--peak", "2TFLOP/s"]),
    "calibrate nccl": ({"file": _NCCL_FILE}, [_NCCL_FILE]),
    "calibrate trace": ({"file": _TRACE_FILE}, [_TRACE_FILE]),
    "analyze": ({"file": _LAB_TIMINGS, "time-is": "epoch"}, [_LAB_TIMINGS, "--time-is", "epoch"]),
    "report": ({"worksheet": "question1"}, ["question1"]),  # its positional argument by name
    "scaling": ({"model": "gpt2-xl", "gpu": "a100-sxm4-80gb", "gpus": "1,2,4,8", "weak": True, "batch": 8, "seq-len": 1024},
                ["--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb", "--gpus", "1,2,4,8", "--weak", "--batch", "8", "--seq-len", "1024"]),
}  # fmt: skip
# calibrate gemm times GEMMs on this CPU: two runs differ in their timings, not in their keys.
TIMED = ("calibrate gemm",)


def config_command(line: str) -> str | None:
    """The command of a `parcalc COMMAND --config run.yaml` example, else None."""
    args = shlex.split(line)[1:]
    if "--config" not in args or args[args.index("--config") + 1] != "run.yaml":
        return None
    return " ".join(args[: args.index("--config")])


def schema_name(line: str, document: dict) -> str:
    """The schema a document answers to: sweep's rows name the command they ran, not sweep."""
    return "sweep" if shlex.split(line)[1] == "sweep" else document["command"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    import yaml

    folder = tmp_path_factory.mktemp("run-files")
    for command, (inputs, _) in RUN_FILES.items():
        (folder / file_name(command).replace(".json", ".yaml")).write_text(yaml.safe_dump(inputs, sort_keys=False))
    return folder


def example_args(line: str, run_dir: Path) -> list[str]:
    """as_json(line), its run.yaml replaced by the file RUN_FILES holds for its command."""
    args = as_json(line)
    command = config_command(line)
    if command is not None:
        args[args.index("--config") + 1] = str(run_dir / file_name(command).replace(".json", ".yaml"))
    return args


@pytest.fixture(scope="module")
def documents(run_dir: Path) -> dict[str, dict]:
    from typer.testing import CliRunner

    runner = CliRunner(env={"COLUMNS": "120", "NO_COLOR": "1", "PARCALC_PRESETS": ""})
    out = {}
    for line in RUNNABLE:
        result = runner.invoke(app, example_args(line, run_dir))
        assert result.exit_code in (0, 1), (line, result.output)
        out[line] = json.loads(result.stdout)
    return out


def test_there_are_examples_of_every_command_with_json(documents) -> None:
    commands = {schema_name(line, document) for line, document in documents.items()}
    assert commands == set(SHIPPED), set(SHIPPED) ^ commands
    assert len(documents) > 70  # 86 when this was written


def test_every_run_file_example_has_a_run_file() -> None:
    """Each `parcalc COMMAND --config run.yaml` example that runs here has its file in RUN_FILES, and
    RUN_FILES holds no command without such an example."""
    commands = {config_command(line) for line in RUNNABLE} - {None}
    assert commands == set(RUN_FILES), commands ^ set(RUN_FILES)


@pytest.mark.parametrize("command", list(RUN_FILES))
def test_a_run_file_gives_what_its_flags_give(documents, runner, command: str) -> None:
    """`--config run.yaml` (the example of every command's help) is the same run as its flags typed."""
    document = documents[f"parcalc {command} --config run.yaml"]
    typed = runner.invoke(app, [*command.split(), *RUN_FILES[command][1], "--format", "json"])
    assert typed.exit_code in (0, 1), typed.output
    expected = json.loads(typed.stdout)
    if command in TIMED:
        assert document["settings"] == expected["settings"] and document["results"].keys() == expected["results"].keys()
    else:
        assert _undated(document) == _undated(expected)


def _undated(document: dict) -> object:
    """The document with the minute a calibrated preset was written (parcalc.commands.calibrate) blanked."""
    import re

    return json.loads(re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "<when>", json.dumps(document)))


@pytest.mark.parametrize("line", RUNNABLE)
def test_example_json_is_valid_against_its_schema(documents, line: str) -> None:
    document = documents[line]
    name = schema_name(line, document)
    schema = json.loads((SCHEMA_DIR / file_name(name)).read_text())
    assert problems(document, schema) == []
    assert document["schema_version"] == SCHEMA_VERSION == 1
    assert line.removeprefix("parcalc ").startswith(name) or name == "peak-flops"


def test_settings_gpu_is_a_preset_name_in_every_example(documents) -> None:
    """settings.gpu is the preset's name (or 'none', or several names comma-separated) in every
    command, never its display name: that is gpu_name's (issue #15)."""
    from parcalc.preset_files import Category, find_all

    names = {preset.key for preset in find_all(Category.GPUS)}
    seen = 0
    for line, document in documents.items():
        gpu = document.get("settings", {}).get("gpu")
        if gpu is not None:
            seen += 1
            assert gpu == "none" or set(gpu.split(",")) <= names, (line, gpu)
    assert seen > 30


def test_the_real_validator_agrees_where_installed(documents) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for command in SHIPPED:
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMA_DIR / file_name(command)).read_text()))
    for line, document in documents.items():
        schema = json.loads((SCHEMA_DIR / file_name(schema_name(line, document))).read_text())
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


@pytest.mark.parametrize("command", list(SHIPPED))
def test_shipped_schema_files_are_current(command: str) -> None:
    assert (SCHEMA_DIR / file_name(command)).read_text() == schema_text(command), "run: python -m parcalc.schema"


def test_schema_files_are_package_data() -> None:
    """parcalc/schemas sits inside the package, which hatch ships whole (pyproject: packages = ["parcalc"])."""
    assert SCHEMA_DIR.parent == Path(__import__("parcalc").__file__).resolve().parent
    assert sorted(p.name for p in SCHEMA_DIR.glob("*.json")) == sorted(file_name(c) for c in SHIPPED)


def test_one_name_one_unit_across_commands(documents) -> None:
    """inputs.s was the sequence length in memory and bytes per element in intensity: now every
    top-level input name has one unit in every command, and the renamed ones say which."""
    units: dict[str, set[str]] = defaultdict(set)
    for line, document in documents.items():
        if schema_name(line, document) in OWN_SCHEMAS:
            continue  # sweep's inputs are its run file's flags as typed, not terms
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
    assert fit["settings"]["flash_attention"] is True  # the default: FlashAttention/SDPA


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
    assert listed.stdout.split("\n")[:-1] == list(SHIPPED)
    assert "sweep" in SHIPPED and "scaling" in COMMANDS
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


def test_comm_volume_nccl_mode_keys_are_typed_and_valid(run_json) -> None:
    """comm-volume --collective with --gpu (NCCL's model, parcalc.core.timing.nccl): its settings typed,
    its results time / algbw / busbw / time_alpha_beta, its time's terms as t_* seconds (not
    `memory_bandwidth`, the name of a bandwidth elsewhere). nccl-tests doc/PERFORMANCE.md: algbw = S / t,
    and for all-reduce busbw = algbw x 2 (n - 1) / n; 1 GiB over n = 16: x 30/16."""
    document = run_json("comm-volume", "--collective", "all-reduce", "--size", "1GiB", "--gpus", "16", "--gpu", "H100-SXM5")
    assert problems(document, json.loads((SCHEMA_DIR / "comm-volume.json").read_text())) == []
    settings = document["settings"]
    assert settings["gpu"] == "h100-sxm5" and settings["gpus_per_node"] == 8 and isinstance(settings["protocol"], str)
    results = {key: derivation["value"] for key, derivation in document["results"].items()}
    assert results["algbw"] == pytest.approx(2**30 / results["time"], rel=1e-12)
    assert results["busbw"] == pytest.approx(results["algbw"] * 2 * 15 / 16, rel=1e-12)
    assert results["time_alpha_beta"] > 0
    inputs = document["inputs"]
    assert {"t_latency", "t_bandwidth"} <= set(inputs) and "memory_bandwidth" not in inputs
    assert {inputs[key]["unit"] for key in ("t_latency", "t_bandwidth")} == {"s"}
    schema = json.loads((SCHEMA_DIR / "comm-volume.json").read_text())
    assert problems({**document, "settings": {**settings, "gpus_per_node": "8"}}, schema) == ["$.settings.gpus_per_node: '8' is not integer"]


def test_search_rows_that_do_not_fit_have_null_times_and_validate(run_json) -> None:
    """fit --search's JSON rows: a configuration that does not fit has fits false and null times (it
    is not timed as a run), one that fits has numbers; both are valid against fit.json."""
    document = run_json("fit", "--model", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--batch", "64", "--seq-len", "4096",
                        "--search")  # fmt: skip
    rows = document["tables"]["configurations"]["rows"]
    out, fits = [r for r in rows if not r["fits"]], [r for r in rows if r["fits"]]
    assert out and fits and all(r["t_step"] is None and r["mfu"] is None for r in out)
    assert all(isinstance(r["t_step"], float) and r["t_step"] > 0 for r in fits)
    assert problems(document, json.loads((SCHEMA_DIR / "fit.json").read_text())) == []


def test_memory_new_settings_are_typed(run_json) -> None:
    """memory's MoE / MLA / optimizer flags (--moe-imbalance, --moment-dtype, --recompute-mla-up-proj,
    --compile) reach the JSON as numbers, names and booleans, as memory.json types them."""
    document = run_json("memory", "--model", "deepseek-v3", "--seq-len", "4096", "--tp", "2", "--pp", "16", "--dp", "64", "--ep", "64",
                        "--etp", "1", "--zero", "1", "--first-stage-layers", "3", "--last-stage-layers", "2", "--moe-imbalance", "1.2",
                        "--moment-dtype", "bf16", "--recompute-mla-up-proj", "--compile", "--gpu", "h100-sxm5")  # fmt: skip
    settings = document["settings"]
    assert settings["moe_imbalance"] == 1.2 and settings["moment_dtype"] == "bf16"
    assert settings["recompute_mla_up_proj"] is True and settings["compile"] is True
    schema = json.loads((SCHEMA_DIR / "memory.json").read_text())
    assert problems(document, schema) == []
    assert problems({**document, "settings": {**settings, "compile": "true"}}, schema) == ["$.settings.compile: 'true' is not boolean"]


def test_scaling_and_intensity_name_the_gpu_preset(run_json) -> None:
    scaling = run_json("scaling", "--model", "gpt2-xl", "--gpu", "A100-SXM4-80GB", "--gpus", "1,2", "--batch", "8", "--seq-len", "1024")
    assert scaling["settings"]["gpu"] == "a100-sxm4-80gb" and scaling["settings"]["gpu_name"] == "NVIDIA A100 SXM4 80GB"
    assert scaling["settings"]["knee"] == 0.8 and scaling["fits"] is None
    intensity = run_json("intensity", "--m", "64", "--k", "64", "--n", "64", "--gpu", "H100-SXM5")
    assert intensity["settings"]["gpu"] == "h100-sxm5" and intensity["settings"]["gpu_name"] == "NVIDIA H100 SXM5 80GB"
    given = run_json("intensity", "--m", "64", "--k", "64", "--n", "64", "--peak", "1TFLOP/s", "--bandwidth", "1TB/s")
    assert given["settings"]["gpu"] == "none"
    assert "gpu" not in run_json("intensity", "--m", "64", "--k", "64", "--n", "64")["settings"]


def test_sweep_json_has_its_own_schema(runner) -> None:
    """parcalc sweep's JSON (a row per point, not one result's envelope) against sweep.json: a point
    that cannot be (tp = 3 does not divide 8 GPUs) is a row with status error and its reason, null
    results; one that can is ok with numbers; the check rejects a status sweep never writes."""
    text = "command: fit\nmodel: llama3-8b\ngpu: h100-sxm5\ngpus: 8\nbatch: 64\nseq-len: 4096\npp: 1\n"
    result = runner.invoke(app, ["sweep", "-", "--vary", "tp=1,3", "-f", "json"], input=text)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    schema = json.loads((SCHEMA_DIR / "sweep.json").read_text())
    assert problems(document, schema) == []
    assert document["schema_version"] == SCHEMA_VERSION and document["command"] == "fit"
    ok, error = document["rows"]
    assert (ok["point"], ok["status"], ok["error"]) == ({"tp": 1}, "ok", None) and ok["results"]["t_step"] > 0
    assert (error["point"], error["status"]) == ({"tp": 3}, "error") and "does not divide the 8 GPUs" in error["error"]
    assert document["units"]["t_step"] == "s"
    bad = {**document, "rows": [{**ok, "status": "maybe"}]}
    assert problems(bad, schema) == ["$.rows[0].status: 'maybe' is not one of ['ok', 'infeasible', 'error']"]
    assert runner.invoke(app, ["schema", "sweep"]).stdout == (SCHEMA_DIR / "sweep.json").read_text()


def test_every_command_with_json_output_has_a_schema() -> None:
    """The commands that take --format (parcalc/flags.py, checked against the real options by
    tests/test_flags.py) all ship a schema. A command added with JSON output and no schema fails here."""
    from parcalc.flags import by_name

    assert set(by_name()["--format"].commands) == set(SHIPPED)


def test_report_json_carries_schema_version_and_has_its_schema(runner) -> None:
    """Issue 28: report's JSON was the only one without schema_version; its questions' results are the
    envelopes of the commands they ran (question 1.1 of seed 004: peak-flops, 155.92 TFLOP/s TF32)."""
    result = runner.invoke(app, ["report", "question1", "--format", "json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert problems(document, json.loads((SCHEMA_DIR / "report.json").read_text())) == []
    assert (document["schema_version"], document["command"]) == (SCHEMA_VERSION, "report")
    first = document["questions"][0]
    assert first["results"][0]["command"] == "peak-flops"
    assert first["answers"][0]["value"] == pytest.approx(2 * 1.41e9 * 108 * 512)
