"""The flag vocabulary (parcalc/flags.py): the table against every command's real options, its page
docs/flags.md, the hidden spellings (parcalc's old names, Megatron-LM's), and the fixed
inconsistencies of issue #15."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parcalc.cli import COMMANDS, app, load_command
from parcalc.flags import FLAGS, MEGATRON_IGNORED, MEGATRON_VALUES, REGENERATE, by_name, reference

ROOT = Path(__file__).resolve().parent.parent


def leaf_commands() -> dict[str, object]:
    out = {}
    for name in COMMANDS:
        command = load_command(name)
        for sub_name, sub in getattr(command, "commands", {}).items():
            out[f"{name} {sub_name}"] = sub
        if not hasattr(command, "commands"):
            out[name] = command
    return out


LEAVES = leaf_commands()


def options(command) -> dict[str, object]:
    """Long name -> click parameter, of every option but --help."""
    return {next(o for o in p.opts if o.startswith("--")): p for p in command.params
            if type(p).__name__.endswith("Option") and "--help" not in p.opts}  # fmt: skip


@pytest.mark.parametrize("path", list(LEAVES))
def test_every_option_of_every_command_is_in_the_table(path: str) -> None:
    real = set(options(LEAVES[path]))
    table = {flag.name for flag in FLAGS if path in flag.commands}
    assert real - table == set(), f"{path}: options missing from parcalc/flags.py"
    assert table - real == set(), f"{path}: parcalc/flags.py lists options the command lacks"


@pytest.mark.parametrize("path", list(LEAVES))
def test_switches_shorts_and_hidden_aliases_match(path: str) -> None:
    flags = by_name()
    for name, param in options(LEAVES[path]).items():
        flag = flags[name]
        assert (flag.type == "switch") == bool(getattr(param, "is_flag", False)), (path, name)
        assert [o for o in param.opts if not o.startswith("--")] == ([flag.short] if flag.short else []), (path, name)
        declared = {*param.opts, *param.secondary_opts}
        assert not declared & set(flag.aliases), (path, name, "an alias must stay hidden, not be declared")


def test_aliases_are_unique_and_never_a_real_flag() -> None:
    aliases = [alias for flag in FLAGS for alias in flag.aliases]
    assert len(aliases) == len(set(aliases))
    assert not set(aliases) & {flag.name for flag in FLAGS}
    assert not set(aliases) & (set(MEGATRON_VALUES) | set(MEGATRON_IGNORED))


def test_table_rows_are_complete() -> None:
    from parcalc.flags import TYPES

    assert len({flag.name for flag in FLAGS}) == len(FLAGS)
    for flag in FLAGS:
        assert flag.meaning and flag.type in TYPES and flag.commands, flag.name


def test_the_same_concept_has_the_same_name() -> None:
    """Issue #15's list: these names, and no second spelling of them, in the commands."""
    names = by_name()
    for name in ("--gpus", "--tp", "--pp", "--dp", "--cp", "--ep", "--batch", "--micro-batch", "--seq-len", "--dtype",
                 "--precision", "--recompute", "--zero", "--shard-group"):  # fmt: skip
        assert name in names
    every = {name for command in LEAVES.values() for name in options(command)}
    for old in ("--stages", "--workers", "--seq-length", "--global-batch", "--micro-batch-size"):
        assert old not in every
    assert "memory" in names["--batch"].commands and "bubble" in names["--pp"].commands


def test_docs_flags_page_is_current() -> None:
    assert (ROOT / "docs" / "flags.md").read_text() == reference(), f"run: {REGENERATE}"


def test_aliases_do_not_show_in_help(runner) -> None:
    text = runner.invoke(app, ["fit", "--help"]).stdout
    assert "--tensor-model-parallel-size" not in text and "--global-batch-size" not in text
    assert "--table" in text


# ---------------------------------------------------------------------------------------------
# Hidden spellings

# NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh at 4b36c6c4 (its GPT_MODEL_ARGS,
# TRAINING_ARGS, MODEL_PARALLEL_ARGS, DATA_ARGS and EVAL_AND_LOGGING_ARGS, with the script's $1-$5
# paths filled in): GPUS_PER_NODE=8, NUM_NODES=1, so WORLD_SIZE 8, which parcalc takes as --gpus.
MEGATRON_GPT3_EXAMPLE = """
    --num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512
    --micro-batch-size 1 --global-batch-size 64 --train-iters 10 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95
    --init-method-std 0.006 --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6
    --lr-warmup-fraction .001 --lr-decay-iters 430000 --use-mcore-models
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
    --data-path data/my-gpt3_00_text_document --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --split 949,50,1
    --log-interval 1 --save-interval 10 --eval-interval 10 --save ckpt --load ckpt --eval-iters 10 --tensorboard-dir tb
""".split()
# The same in parcalc's words. The GPT-2 vocabulary (50,257 tokens) comes from the script's
# --vocab-file, which parcalc does not read: --vocab gives it.
PARCALC_WORDS = ["--layers", "8", "--hidden", "256", "--heads", "8", "--seq-len", "512", "--micro-batch", "1", "--batch", "64",
                 "--precision", "mixed-fp16", "--tp", "2", "--pp", "2"]  # fmt: skip
CLUSTER = ["--gpus", "8", "--gpu", "a100-sxm4-80gb", "--vocab", "50257"]


def test_a_megatron_launch_line_runs_through_fit(runner) -> None:
    pasted = runner.invoke(app, ["fit", *CLUSTER, *MEGATRON_GPT3_EXAMPLE, "--format", "json"])
    assert pasted.exit_code == 0, pasted.output
    ours = runner.invoke(app, ["fit", *CLUSTER, *PARCALC_WORDS, "--format", "json"])
    assert json.loads(pasted.stdout) == json.loads(ours.stdout)
    document = json.loads(pasted.stdout)
    assert document["settings"]["mode"] == "configuration" and document["settings"]["precision"] == "mixed-fp16"
    assert document["inputs"]["layers"]["value"] == 8 and document["inputs"]["seq_len"]["value"] == 512
    assert document["inputs"]["batch"]["value"] == 64
    assert "TP 2 x PP 2 x DP 2" in document["verdicts"][0]  # dp = 8 / (2 x 2)
    assert pasted.stderr.startswith("note: ignored Megatron-LM arguments that change nothing parcalc computes: "
                                    "--max-position-embeddings, --train-iters")  # fmt: skip
    assert "--tensor-model-parallel-size" not in pasted.stderr


def test_an_unknown_megatron_flag_is_still_an_error(runner) -> None:
    result = runner.invoke(app, ["fit", *CLUSTER, *PARCALC_WORDS, "--attention-dropout", "0.0"])
    assert result.exit_code == 2 and "No such option: --attention-dropout" in result.stderr


@pytest.mark.parametrize(("old", "new"), [
    (["bubble", "--stages", "4", "--micro-batches", "8"], ["bubble", "--pp", "4", "--micro-batches", "8"]),
    (["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--workers", "8"],
     ["comm-volume", "--collective", "all-reduce", "--size", "1GB", "--gpus", "8"]),
    (["memory", "--model", "llama3-8b", "--tensor-model-parallel-size=2", "--context-parallel-size", "2", "--seq-length", "8192"],
     ["memory", "--model", "llama3-8b", "--tp=2", "--cp", "2", "--seq-len", "8192"]),
    (["memory", "--model", "llama3-8b", "--dp", "4", "--use-distributed-optimizer", "--bf16", "--recompute-granularity", "full"],
     ["memory", "--model", "llama3-8b", "--dp", "4", "--zero", "1", "--precision", "mixed-bf16", "--recompute", "full"]),
], ids=["bubble --stages", "comm-volume --workers", "megatron = form", "megatron switches"])  # fmt: skip
def test_old_and_megatron_spellings_give_the_same_json(run_json, old: list[str], new: list[str]) -> None:
    assert run_json(*old) == run_json(*new)


def test_worksheets_may_use_an_old_spelling(tmp_path) -> None:
    from parcalc.worksheet import Calculation, run_calculation

    old = run_calculation(Calculation("bubble", {"stages": 4, "micro-batches": 8}))
    new = run_calculation(Calculation("bubble", {"pp": 4, "micro-batches": 8}))
    assert old == new


# ---------------------------------------------------------------------------------------------
# The inconsistencies of issue #15


def test_choices_in_any_case(run_json) -> None:
    upper = run_json("memory", "--model", "llama3-8b", "--recompute", "FULL", "--zero", "0", "--schedule", "1F1B")
    assert upper["settings"]["recompute"] == "full" and upper["settings"]["schedule"] == "1f1b"


def test_format_json_in_capitals(runner) -> None:
    result = runner.invoke(app, ["peak-flops", "--gpu", "a100-sxm4-80gb", "--dtype", "tf32", "--format", "JSON"])
    assert result.exit_code == 0 and json.loads(result.stdout)["command"] == "peak-flops"


def test_memory_takes_the_global_batch(run_json, run_error) -> None:
    """m = B / (b x d) (Megatron-LM get_num_microbatches): 64 / (2 x 2) = 16 micro-batches."""
    document = run_json("memory", "--model", "llama3-8b", "--pp", "4", "--dp", "2", "--batch", "64", "--micro-batch", "2")
    assert document["inputs"]["micro_batches"]["value"] == 16
    assert "B / (b x d)" in run_error(["memory", "--model", "llama3-8b", "--dp", "2", "--batch", "64", "--micro-batches", "4"])
    assert "multiple of b x d = 6" in run_error(["memory", "--model", "llama3-8b", "--dp", "3", "--batch", "64", "--micro-batch", "2"])


TP_LINE = ["comm-volume", "--strategy", "tp", "--layers", "32", "--hidden", "4096", "--heads", "32", "--batch", "8",
           "--seq-len", "4096", "--gpus", "8"]  # fmt: skip


def test_comm_volume_recompute_takes_a_kind(run_json, run_error) -> None:
    """TP payload: L x 4 all-reduces x b s h x 2 B = 32 x 4 x 8 x 4096 x 4096 x 2 = 34,359,738,368 B; full
    recomputation replays the forward's 2 (Megatron-LM CheckpointFunction): x 6/4; selective replays none."""
    payload = lambda *extra: run_json(*TP_LINE, *extra)["results"]["tp_allreduce_payload"]["value"]  # noqa: E731
    assert payload() == payload("--recompute", "none") == payload("--recompute", "selective") == 34_359_738_368
    assert payload("--recompute", "full") == payload("--recompute") == 34_359_738_368 * 6 // 4
    assert "--recompute op" in run_error([*TP_LINE, "--recompute", "op"])


def test_zero_is_one_type_everywhere(run_error) -> None:
    for command in (["comm-volume", "--strategy", "3d", "--model", "homework-7b", "--batch", "8"], ["memory", "--model", "homework-7b"],
                    ["fit", "--model", "homework-7b", "--gpus", "8", "--gpu", "h100-sxm5", "--search"]):  # fmt: skip
        assert "'4' is not one of '0', '1', '2', '3'" in run_error([*command, "--zero", "4"])


def test_stated_no_ops_for_sweeps(run_json) -> None:
    on = run_json("memory", "--model", "llama3-8b", "--tp", "1", "--sequence-parallel", "--zero", "1", "--gpu", "h100-sxm5")
    off = run_json("memory", "--model", "llama3-8b", "--gpu", "h100-sxm5")
    assert on["results"]["total"]["value"] == off["results"]["total"]["value"]
    assert on["settings"]["sequence_parallel"] is False and on["settings"]["zero"] == 0
    assert any("a no-op (taken as off)" in a for a in on["assumptions"])
    assert any("--zero 1 with dp x cp = 1" in a for a in on["assumptions"])
    fit = run_json("fit", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm5", "--tp", "1", "--pp", "1", "--dp", "8",
                   "--sequence-parallel")  # fmt: skip
    assert any("--sequence-parallel with --tp 1" in a for a in fit["assumptions"])


def test_fit_top_without_search_is_an_error(run_error) -> None:
    line = run_error(["fit", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm5", "--top", "3"])
    assert line == "Error: --top: applies to --search (the strategy table shows every family)"


# ---------------------------------------------------------------------------------------------
# CSV


def test_csv_headers_are_the_json_keys_and_table_picks(runner, run_json) -> None:
    line = ["memory", "--model", "llama3-8b", "--pp", "2", "--gpu", "h100-sxm5", "--per-stage"]
    document = run_json(*line)
    default = runner.invoke(app, [*line, "--format", "csv"])
    assert default.stdout.splitlines()[0] == ",".join(c["key"] for c in document["tables"]["stages"]["columns"])
    assert default.stderr == "csv: printed table 'stages'; the others: components, layer_activations, results (--table NAME picks one)\n"
    picked = runner.invoke(app, [*line, "--format", "csv", "--table", "components"])
    assert picked.stdout.splitlines()[0] == "component,bytes,share" and picked.stderr == ""
    assert picked.stdout.splitlines()[-1].startswith(f"total,{document['results']['total']['value']},1")
    results = runner.invoke(app, [*line, "--format", "csv", "--table", "results"])
    assert results.stdout.splitlines()[0] == "key,label,value,unit,formula,substituted,source"
    wrong = runner.invoke(app, [*line, "--format", "csv", "--table", "stage"])
    assert wrong.exit_code == 2 and "its tables: components, layer_activations, stages, results" in wrong.stderr
    assert runner.invoke(app, [*line, "--table", "stages"]).exit_code == 2  # a table on the terminal shows every table


def test_csv_booleans_as_json_spells_them(runner) -> None:
    result = runner.invoke(app, ["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048",
                                 "--format", "csv"])  # fmt: skip
    import csv

    header, *rows = list(csv.reader(result.stdout.splitlines()))
    fits = [row[header.index("fits")] for row in rows]
    assert set(fits) <= {"true", "false", ""} and "true" in fits
