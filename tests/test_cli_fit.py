"""`parcalc fit` through the CLI: the strategy table, the search, their agreement with
`parcalc memory`, and one-line errors with the right exit codes."""

from __future__ import annotations

import csv
import io
import json

import pytest

from parcalc.cli import app

SMALL = ["--model", "gpt2-xl", "--gpu", "a100-sxm4-40gb", "--seq-len", "1024"]
GPT3_64 = ["--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "64", "--batch", "512", "--seq-len", "2048"]


def test_strategy_table_matches_parcalc_memory(run_json) -> None:
    doc = run_json("fit", *SMALL, "--gpus", "4", "--batch", "8", "--micro-batch", "2")
    rows = doc["tables"]["strategies"]["rows"]
    assert len(rows) == 9 * 3  # nine families, three recomputation settings
    zero2 = next(r for r in rows if r["strategy"] == "ZeRO-2" and r["recompute"] == "selective")
    # The same configuration through `parcalc memory`: the fit table must show the very same bytes. fit's
    # default framework is Megatron-LM, which keeps fp32 main gradients (presets/frameworks/megatron.yaml).
    mem = run_json("memory", "--model", "gpt2-xl", "--gpu", "a100-sxm4-40gb", "--seq-len", "1024", "--micro-batch", "2",
                   "--dp", "4", "--zero", "2", "--recompute", "selective", "--micro-batches", "1", "--fp32-grads")  # fmt: skip
    assert zero2["memory"] == mem["results"]["total"]["value"]
    assert zero2["fits"] is (mem["results"]["headroom"]["value"] >= 0)
    pp = next(r for r in rows if r["strategy"] == "PP" and r["recompute"] == "none")
    assert (pp["tp"], pp["pp"], pp["dp"]) == (1, 4, 1)
    assert pp["max_layers"] % 4 == 0
    assert any("deepest model" in v for v in doc["verdicts"])


def test_seed_000_two_gpus_names_a_strategy_and_a_depth(runner) -> None:
    # Seed 000 part B-4 (e): "What parallelism strategy and model size (number of layers) could you fit
    # on a 2 GPU setup?" The answer is the table's deepest row.
    result = runner.invoke(app, ["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048",
                                 "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = [r for r in doc["tables"]["strategies"]["rows"] if r["max_layers"] is not None]
    deepest = max(rows, key=lambda r: r["max_layers"])
    verdict = next(v for v in doc["verdicts"] if "deepest model" in v)
    assert f"{deepest['max_layers']} layers" in verdict
    # recomputation and sharding both lower the memory: the deepest row uses full recomputation
    assert deepest["recompute"] == "full"


def test_search_json_carries_every_configuration_and_the_best(run_json) -> None:
    doc = run_json("fit", *GPT3_64, "--search", "--top", "3")
    every = doc["tables"]["configurations"]["rows"]
    top = doc["tables"]["top"]["rows"]
    assert len(top) == 3 and len(every) > 1000
    fitting = [r for r in every if r["fits"]]
    assert top[0]["t_step"] == min(r["t_step"] for r in fitting)
    assert all(r["fits"] for r in top)
    assert doc["results"]["t_step"]["value"] == top[0]["t_step"]
    rejected = {r["reason"]: r["count"] for r in doc["tables"]["rejected"]["rows"]}
    assert rejected["memory (does not fit)"] == len(every) - len(fitting)


def test_search_csv_streams_every_configuration(runner) -> None:
    result = runner.invoke(app, ["fit", *GPT3_64, "--search", "--format", "csv", "--recompute", "full"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) > 100
    assert {r["recompute"] for r in rows} == {"full"}
    assert "t_step" in rows[0]  # headers are the JSON keys


def test_search_table_explains_the_winner(runner) -> None:
    result = runner.invoke(app, ["fit", *GPT3_64, "--search", "--explain", "--top", "2", "--detail", "full"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "t_step = t_compute + t_tp + t_bubble + t_pp + t_dp" in out
    assert "it beats the fastest other layout" in out
    assert "Every configuration evaluated" not in out  # the terminal shows the top-k only


def test_nothing_fits_exits_1_with_the_smallest_footprint(runner) -> None:
    result = runner.invoke(app, ["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("Error: nothing fits: the smallest footprint is")
    assert "per GPU (" in result.stderr
    assert "Strategies on 2" in result.stdout  # the table that explains it is still shown


def test_nothing_fits_writes_no_file(runner, tmp_path) -> None:
    target = tmp_path / "fit.json"
    result = runner.invoke(app, ["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048",
                                 "-o", str(target)])  # fmt: skip
    assert result.exit_code == 1
    assert not target.exists()


def test_search_nothing_fits_exits_1(run_error) -> None:
    line = run_error(["fit", "--model", "gpt3-175b", "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--batch", "8", "--seq-len", "2048",
                      "--search"], exit_code=1)  # fmt: skip
    assert "nothing fits: the smallest footprint of" in line and "TP 8" in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--gpus", "0"], "--gpus", id="zero-gpus"),
        pytest.param([], "--gpus: how many GPUs", id="no-gpus"),
        pytest.param(["--gpus", "4", "--efficiency", "2.5"], "--efficiency", id="efficiency"),
        pytest.param(["--gpus", "4", "--framework", "jax"], "unknown framework", id="framework"),
        pytest.param(["--gpus", "4", "--framework", ""], "unknown framework ''", id="framework-empty"),
        pytest.param(["--gpus", "4", "--framework", "x" * 300], "unknown framework", id="framework-300-chars"),
        pytest.param(["--gpus", "4", "--framework", "../frameworks/megatron"], "unknown framework", id="framework-path"),
        pytest.param(["--gpus", "4", "--nics-per-node", "0"], "--nics-per-node", id="nics-zero"),
        pytest.param(["--gpus", "4", "--nics-per-node", "nan"], "--nics-per-node", id="nics-nan"),
        pytest.param(["--gpus", "4", "--nics-per-node", "33"], "at most 4 per GPU", id="nics-too-many"),
        pytest.param(["--gpus", "4", "--tp", "1e308", "--pp", "1"], "--tp: 1e+308 is beyond any possible size", id="tp-huge"),
        pytest.param(["--gpus", "4", "--tp", "2", "--pp", "2", "--schedule", ""], "--schedule", id="schedule-empty"),
        pytest.param(["--gpus", "4", "--efficiency", "nan"], "--efficiency", id="efficiency-nan"),
        pytest.param(["--gpus", "4", "--tp", "3", "--pp", "1", "--dp", "1"], "configuration", id="exact-config-gpus"),
        pytest.param(["--gpus", "4", "--tp", "2"], "at least two of", id="exact-config-underspecified"),
        pytest.param(["--gpus", "4", "--zero", "1"], "applies to --search", id="zero-without-search"),
        pytest.param(["--gpus", "4", "--micro-batch", "3", "--batch", "8"], "--micro-batch: 3 does not divide", id="micro-batch"),
        pytest.param(["--gpus", "4", "--search", "--micro-batch", "64"], "no configuration satisfies", id="contradictory"),
        pytest.param(["--gpus", "4", "--search", "--top", "0"], "--top", id="top"),
    ],
)
def test_bad_input_is_one_line_exit_2(run_error, args: list[str], fragment: str) -> None:
    line = run_error(["fit", *SMALL, *args])
    assert fragment in line


def test_gpu_or_capacity_and_peak_required(run_error) -> None:
    line = run_error(["fit", "--model", "gpt2-xl", "--gpus", "2", "--seq-len", "1024"])
    assert "--gpu" in line


def test_a_pinned_layout_that_does_not_fit_says_so_first(run_json) -> None:
    """Issue 28: a layout over the GPU's memory got its step time, MFU and cost first and 'does not fit' in the
    middle. Llama 3 70B on TP 8 alone: 70.6e9 parameters x 16 B of mixed-precision AdamW states / 8 = 131 GiB
    before activations, over an H100's 80 GiB; the time is then what it would take if it fit, the run too."""
    doc = run_json("fit", "--model", "llama3-70b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "64", "--seq-len", "4096",
                   "--tp", "8", "--pp", "1", "--dp", "1", "--tokens", "1T", "--price", "2.5")  # fmt: skip
    assert doc["fits"] is False
    first, second = doc["verdicts"][:2]
    assert first.startswith("does not fit: ") and "more than the 80.00 GiB of one NVIDIA H100 SXM5 80GB" in first
    assert second.startswith("were it to fit: TP 8 x PP 1 x DP 1")
    assert any(v.startswith("were it to fit, the run: ") for v in doc["verdicts"])


def test_a_sweep_says_which_points_fit(runner, tmp_path) -> None:
    """Issue 28: sweeps' CSV had only a verdict string; a `fits` column now says it (GPT-3 175B on 64 A100s:
    TP 8 alone holds 398 GiB per GPU, TP 8 x PP 8 79 GiB, Narayanan et al. 2021's layout)."""
    run = tmp_path / "run.yaml"
    run.write_text("command: fit\nmodel: gpt3-175b\ngpu: a100-sxm4-80gb\ngpus: 64\nbatch: 64\nmicro-batch: 1\nrecompute: selective\n")
    result = runner.invoke(app, ["sweep", str(run), "--vary", "tp=8", "--vary", "pp=1,8"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["pp"], r["status"], r["fits"]) for r in rows] == [("1", "ok", "false"), ("8", "ok", "true")]


@pytest.mark.slow
@pytest.mark.parametrize("model, gpus, batch, seq", [("llama3-8b", "64", "1024", "8192"), ("gpt3-175b", "64", "64", "2048")],
                         ids=["llama3-8b", "gpt3-175b"])  # fmt: skip
def test_the_search_prints_flags_that_pin_its_best(run_json, model: str, gpus: str, batch: str, seq: str) -> None:
    """Issue 28: pinning the search's printed tp/pp/dp dropped ZeRO-1 and SP and the result no longer fit; the flags it
    prints now give the same configuration, step time and memory when pasted back."""
    import shlex

    common = ["--model", model, "--gpu", "h100-sxm5", "--gpus", gpus, "--batch", batch, "--seq-len", seq, "--flash-attention"]
    found = run_json("fit", *common, "--search")
    line = next(v for v in found["verdicts"] if v.startswith("to pin it"))
    pinned = run_json("fit", *common, *shlex.split(line.split("with: ", 1)[1]))
    assert pinned["fits"] is True
    assert pinned["results"]["t_step"]["value"] == pytest.approx(found["results"]["t_step"]["value"], rel=1e-9)
    assert pinned["results"]["mfu"]["value"] == pytest.approx(found["results"]["mfu"]["value"], rel=1e-9)
