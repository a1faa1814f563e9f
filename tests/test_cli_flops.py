"""`parcalc flops` through the CLI: values in JSON, MFU / HFU, and one-line errors."""

from __future__ import annotations

import pytest

from parcalc.cli import app
from parcalc.commands import flops as flops_command
from parcalc.commands import memory as memory_command
from parcalc.core.model import Mlp

KORTHIKANTI_22B = ["--layers", "48", "--hidden", "6144", "--heads", "64", "--vocab", "51200", "--seq-len", "2048"]


def test_gpt3_six_nd_for_300b_tokens(run_json) -> None:
    # 6 x 175e9 x 300e9 = 3.15e23 FLOP (the N = 175e9 of the GPT-3 paper, given with --params)
    doc = run_json("flops", "--model", "gpt3-175b", "--params", "175e9", "--tokens", "300e9")
    assert doc["results"]["six_nd_run"]["value"] == pytest.approx(3.15e23, rel=1e-15)
    assert doc["results"]["six_nd_run"]["formula"] == "6 × N × D"


def test_korthikanti_22b_mfu_and_hfu(run_json) -> None:
    # Korthikanti et al. Table 5, 22B: 4 sequences per iteration on 8 A100s in 1.10 s: MFU 41.5 %, HFU 43.7 %
    doc = run_json("flops", *KORTHIKANTI_22B, "--batch", "4", "--recompute", "selective", "--step-time", "1.10s",
                   "--gpus", "8", "--gpu", "a100-sxm4-80gb")  # fmt: skip
    results = doc["results"]
    # A100 datasheet: BF16 312 TFLOP/s dense
    assert results["mfu"]["inputs"]["P"]["value"] == 312e12
    assert results["mfu"]["value"] * 100 == pytest.approx(41.5, abs=0.25)
    assert results["hfu_korthikanti"]["value"] * 100 == pytest.approx(43.7, abs=0.25)
    # exact hardware FLOPs: the recomputed Q K^T and score x V forward, 4 B s^2 h per layer:
    # 4 x 4 x 2048^2 x 6144 x 48 = 19,791,209,299,968 FLOP
    assert results["recomputed_flops"]["value"] == 19_791_209_299_968
    assert results["hfu"]["value"] < results["hfu_korthikanti"]["value"]
    assert doc["settings"]["gpu"] == "a100-sxm4-80gb"


def test_narayanan_formula_beside_the_exact_count(run_json) -> None:
    doc = run_json("flops", *KORTHIKANTI_22B, "--batch", "8", "--recompute", "full")
    results = doc["results"]
    assert results["hardware_flops"]["value"] == pytest.approx(results["narayanan_flops"]["value"], rel=1e-12)
    assert any("equals the exact count with full recomputation" in v for v in doc["verdicts"])
    ops = doc["tables"]["layer_flops"]["rows"]
    # 8 matmuls of the layer and the LM head; with full recomputation every layer matmul runs again
    assert len(ops) == 9
    assert all(r["recomputed"] == r["forward"] for r in ops[:-1]) and ops[-1]["recomputed"] == 0
    assert sum(r["total"] for r in ops) == pytest.approx(results["hardware_flops"]["value"], rel=1e-12)


def test_per_token_and_six_nd_per_iteration(run_json) -> None:
    doc = run_json("flops", "--model", "gpt3-175b", "--batch", "2", "--seq-len", "2048")
    results = doc["results"]
    tokens = 2 * 2048
    assert results["model_flops_per_token"]["value"] == pytest.approx(results["model_flops"]["value"] / tokens, rel=1e-15)
    # 6 N D with N the preset's parameters (174.6 B) and D = 4096 tokens
    assert results["six_nd"]["value"] == pytest.approx(6 * doc["inputs"]["params"]["value"] * tokens, rel=1e-15)


def test_peak_can_be_given(run_json) -> None:
    doc = run_json("flops", *KORTHIKANTI_22B, "--batch", "4", "--step-time", "1s", "--gpus", "8", "--peak", "312TFLOP/s")
    assert doc["results"]["mfu"]["inputs"]["P"]["value"] == 312e12


def test_table_output(runner) -> None:
    result = runner.invoke(app, ["flops", "--model", "gpt2-xl", "--batch", "8", "--detail", "full"])
    assert result.exit_code == 0, result.output
    assert "F_N = 96 × B × s × l × h² × (1 + s / (6 × h) + V / (16 × l × h))" in result.stdout
    assert "Matmuls of one layer" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--model", "gpt2-xl", "--step-time", "1s"], "--step-time and --gpus", id="time-without-gpus"),
        pytest.param(["--model", "gpt2-xl", "--step-time", "1s", "--gpus", "8"], "--gpu: MFU needs a peak", id="no-peak"),
        pytest.param(["--model", "gpt2-xl", "--step-time", "0s", "--gpus", "8", "--peak", "1T"], "--step-time", id="zero-time"),
        pytest.param(["--model", "gpt2-xl", "--batch", "0"], "--batch", id="zero-batch"),
        pytest.param(["--model", "gpt2-xl", "--seq-len", "4096"], "learned positions", id="beyond-positions"),
        pytest.param(["--model", "gpt2-xl", "--tokens", "many"], "--tokens", id="bad-tokens"),
        pytest.param(["--model", "gpt2-xl", "--recompute", "some"], "--recompute", id="bad-recompute"),
        pytest.param(["--layers", "2", "--hidden", "64", "--heads", "4"], "--seq-len: required", id="no-seq"),
        pytest.param(["--model", "gpt2-xl", "--step-time", "1s", "--gpus", "8", "--gpu", "a100-sxm4-80gb", "--dtype", "fp8"],
                     "no fp8 rate", id="dtype-not-on-gpu"),
        # a peak without a step time would be ignored: say so instead
        pytest.param(["--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb"], "--gpu: the peak is used only for MFU and HFU", id="gpu-without-time"),
        pytest.param(["--model", "gpt2-xl", "--peak", "312T"], "--peak: the peak is used only for MFU and HFU", id="peak-without-time"),
        pytest.param(["--model", "gpt2-xl", "--step-time", "1s", "--gpus", "8", "--gpu", "a100-sxm4-80gb", "--peak", "312T"],
                     "--peak: give --gpu", id="gpu-and-peak"),
        pytest.param(["--model", "gpt2-xl", "--params", "0"], "--params: '0' must be greater than zero", id="zero-params"),
        pytest.param(["--model", "gpt2-xl", "--batch", "1e300"], "--batch: 1e+300 is beyond any possible size", id="impossible-batch"),
        pytest.param(["--model", "gpt2-xl", "--step-time", "1s", "--gpus", "0", "--peak", "1T"], "--gpus: '0' must be greater than zero",
                     id="zero-gpus"),
    ],
)  # fmt: skip
def test_bad_input_is_one_error_line(run_error, args: list[str], message: str) -> None:
    assert message in run_error(["flops", *args])


@pytest.mark.parametrize("module", [memory_command, flops_command], ids=["memory", "flops"])
def test_every_example_runs(runner, module, tmp_path, monkeypatch) -> None:
    # test_help.py runs each command's first example; these two run all of theirs (in a temporary
    # directory: an example that writes -o mem.svg must not leave it in the working tree)
    import shlex

    monkeypatch.chdir(tmp_path)
    assert module.EXAMPLES.startswith("\b\nExamples:\n")
    examples = [line.strip() for line in module.EXAMPLES.splitlines() if line.strip().startswith("parcalc ")]
    assert len(examples) >= 3
    for example in examples:
        words = shlex.split(example)[1:]
        if "-o" in words:  # --format json with -o FILE.svg is a contradiction (refused): the JSON on stdout instead
            at = words.index("-o")
            del words[at : at + 2]
        result = runner.invoke(app, [*words, "--format", "json"])
        assert result.exit_code == 0, (example, result.output)


def test_gated_mlp_from_flags(run_json) -> None:
    # --mlp swiglu adds the gate projection: 9 matmuls per layer (Q, K, V, Q·K^T, score·V, output, gate,
    # up, down) and no LM head without a vocabulary; the gate's forward is 2 x (b s) x h x f =
    # 2 x 32 x 64 x 256 = 1,048,576 FLOP for b = 2, s = 16, h = 64, f = 4h = 256
    doc = run_json("flops", "--layers", "2", "--hidden", "64", "--heads", "4", "--mlp", Mlp.SWIGLU.value, "--seq-len", "16",
                   "--batch", "2")  # fmt: skip
    rows = doc["tables"]["layer_flops"]["rows"]
    assert len(rows) == 9
    gate = next(r for r in rows if r["op"].startswith("G ="))
    assert gate["forward"] == 1_048_576 and gate["backward"] == 2 * 1_048_576
