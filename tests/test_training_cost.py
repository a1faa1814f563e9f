"""Time, energy and cost to train (issue #16 item 3): parcalc.core.training_cost through `flops` and `fit`.

Every expected value is either a published figure (quoted) or a hand derivation written out beside it."""

from __future__ import annotations

import math

import pytest

from parcalc.core.training_cost import Power, Price, RunPlan, cost_per_million_tokens, run_from_step
from parcalc.derivation import Term
from parcalc.errors import InputError
from parcalc.presets import load_gpu
from parcalc.units import Dimension, format_quantity, parse_price, parse_quantity, parse_tokens

DAY, HOUR = 86_400, 3_600
GPT3 = ["--model", "gpt3-175b", "--seq-len", "2048"]


# ---------------------------------------------------------------------------------------------
# Narayanan et al. 2021, eq. (4)


def test_narayanan_gpt3_34_days(run_json) -> None:
    # Narayanan et al. 2021 (arXiv:2104.04473) sec. 5.1, after eq. (4) "End-to-end training time ≈ 8TP/(nX)":
    # "Let us consider the GPT-3 model with P = 175 billion parameters as an example. This model was trained on
    #  T = 300 billion tokens. On n = 1024 A100 GPUs using batch size 1536, we achieve X = 140 teraFLOP/s per GPU.
    #  As a result, the time required to train this model is 34 days."
    doc = run_json("flops", *GPT3, "--params", "175e9", "--tokens", "300B", "--tflops-per-gpu", "140", "--gpus", "1024")
    eq4 = doc["results"]["train_time_eq4"]
    # 8 x 300e9 x 175e9 / (1024 x 140e12) = 4.2e23 / 1.4336e17 = 2,929,687.5 s = 33.908 days
    assert eq4["value"] == pytest.approx(2_929_687.5, rel=1e-12)
    assert round(eq4["value"] / DAY) == 34
    assert eq4["inputs"]["X"]["value"] == 140e12


def test_narayanan_one_trillion_84_days(run_json) -> None:
    # The same paragraph: "For the 1 trillion parameter model, we assume that 450 billion tokens are needed for
    # end-to-end training. With 3072 A100 GPUs, we can achieve a per-GPU throughput of 163 teraFLOP/s, and
    # end-to-end training time of 84 days." Table 1's 1T model: 1008 B parameters, l 128, h 25600, a 160.
    doc = run_json("flops", "--layers", "128", "--hidden", "25600", "--heads", "160", "--vocab", "51200", "--seq-len", "2048",
                   "--params", "1008e9", "--tokens", "450B", "--tflops-per-gpu", "163", "--gpus", "3072")  # fmt: skip
    # 8 x 450e9 x 1008e9 / (3072 x 163e12) = 3.6288e24 / 5.00736e17 = 7,246,932.3 s = 83.88 days
    days = doc["results"]["train_time_eq4"]["value"] / DAY
    assert days == pytest.approx(3.6288e24 / 5.00736e17 / DAY, rel=1e-12)
    assert round(days) == 84


def test_exact_count_beside_eq4_with_full_recomputation(run_json) -> None:
    # With --recompute full the exact hardware count is eq. (3)'s 96 B s l h^2 (1 + s/6h + V/16lh) (the flops
    # command checks that equality), so the exact time over eq. (4)'s is (1 + s/6h + V/16lh) x 8 P_eq3 / 8 P, with
    # P the preset's 174,604,259,328 parameters: the ratio is the run's FLOPs / (8 T P), nothing else.
    doc = run_json("flops", *GPT3, "--tokens", "300B", "--tflops-per-gpu", "140", "--gpus", "1024", "--recompute", "full")
    r = doc["results"]
    exact = r["train_time"]["value"]
    per_token = r["hardware_flops_per_token"]["value"]
    assert exact == pytest.approx(per_token * 300e9 / (1024 * 140e12), rel=1e-12)  # T = C / (N X), D as given (no --batch)
    assert exact / r["train_time_eq4"]["value"] == pytest.approx(per_token / (8 * doc["inputs"]["params"]["value"]), rel=1e-12)
    assert any("eq. (4)" in v and "days" in v for v in doc["verdicts"])


# ---------------------------------------------------------------------------------------------
# From a known step time: hand derivations to the digit


def test_flops_run_from_a_measured_step_time(run_json) -> None:
    doc = run_json("flops", *GPT3, "--batch", "1536", "--tokens", "300B", "--step-time", "10s", "--gpus", "1024",
                   "--gpu", "a100-sxm4-80gb", "--pue", "1.1", "--price", "2.50/GPU-h")  # fmt: skip
    r = doc["results"]
    # I = ceil(300e9 / (1536 x 2048)) = ceil(300e9 / 3,145,728) = ceil(95,367.43) = 95,368
    assert r["iterations"]["value"] == 95_368
    assert r["tokens_trained"]["value"] == 95_368 * 3_145_728 == 300_001_787_904
    # T = 95,368 x 10 s = 953,680 s = 11.037962962... days
    assert r["train_time"]["value"] == 953_680
    assert r["train_days"]["value"] == pytest.approx(953_680 / 86_400, rel=1e-15)
    # GPU-h = 1024 x 953,680 / 3,600 = 271,269.546666...
    # energy = 1.1 x 1024 x 400 W x 953,680 s / 3,600 = 1.1 x 390,627,328,000 / 3,600 = 119,358,350.22 Wh
    assert r["gpu_hours"]["value"] == pytest.approx(976_568_320 / 3_600, rel=1e-15)
    assert r["energy"]["value"] == pytest.approx(119_358_350.222, rel=1e-11)
    assert r["energy"]["inputs"]["P"]["value"] == 400  # A100 datasheet: 'Max Thermal Design Power (TDP): 400W'
    # cost = 2.50 x 271,269.5467 = 678,173.8667 USD; per 1M tokens = 678,173.8667 / 300,001,787,904 x 1e6 = 2.2605661...
    assert r["cost"]["value"] == pytest.approx(2.5 * 976_568_320 / 3_600, rel=1e-15)
    assert r["cost"]["unit"] == "USD"
    assert r["cost_per_million_tokens"]["value"] == pytest.approx(2.5 * 1024 * 10 / 3_600 / 3_145_728 * 1e6, rel=1e-12)


def test_iterations_instead_of_tokens(run_json) -> None:
    doc = run_json("flops", *GPT3, "--batch", "8", "--iterations", "1000", "--step-time", "2s", "--gpus", "8",
                   "--gpu-power", "1kW")  # fmt: skip
    r = doc["results"]
    assert r["tokens_trained"]["value"] == 1000 * 8 * 2048
    assert r["train_time"]["value"] == 2000  # 1000 x 2 s
    assert r["energy"]["value"] == pytest.approx(8 * 1000 * 2000 / 3600, rel=1e-15)  # 8 GPUs x 1 kW x 2000 s = 4.444 kWh


def test_mfu_throughput_uses_model_flops(run_json) -> None:
    doc = run_json("flops", *GPT3, "--tokens", "300B", "--mfu", "40%", "--gpus", "1024", "--gpu", "a100-sxm4-80gb")
    r = doc["results"]
    # T = F_model/token x D / (N x MFU x peak), peak the A100 datasheet's 312 TFLOP/s (bf16 dense)
    expected = r["model_flops_per_token"]["value"] * 300e9 / (1024 * 0.4 * 312e12)
    assert r["train_time"]["value"] == pytest.approx(expected, rel=1e-12)


def test_fit_gpt3_days_and_gpu_hours_follow_the_step_time(run_json) -> None:
    doc = run_json("fit", *GPT3, "--gpu", "a100-sxm4-80gb", "--gpus", "1024", "--batch", "1536", "--tp", "8", "--pp", "16",
                   "--dp", "8", "--recompute", "full", "--tokens", "300B", "--price", "1.20")  # fmt: skip
    r = doc["results"]
    t_step = r["t_step"]["value"]  # the step-time model's, whatever it computes
    assert r["train_time"]["inputs"]["t_step"]["value"] == t_step
    assert r["iterations"]["value"] == 95_368  # ceil(300e9 / (1536 x 2048)), as above
    # days = 95,368 x t_step / 86,400; GPU-h = 1024 x 95,368 x t_step / 3,600; cost = 1.20 x GPU-h
    assert r["train_days"]["value"] == pytest.approx(95_368 * t_step / 86_400, rel=1e-15)
    assert r["gpu_hours"]["value"] == pytest.approx(1024 * 95_368 * t_step / 3_600, rel=1e-15)
    assert r["cost"]["value"] == pytest.approx(1.2 * 1024 * 95_368 * t_step / 3_600, rel=1e-15)
    # board power from the preset: 1024 x 400 W for the run's time
    assert r["energy"]["value"] == pytest.approx(1024 * 400 * 95_368 * t_step / 3_600, rel=1e-15)
    # the model's step time lands the run near the paper's 34 days (140 TFLOP/s measured): a sanity bound, not a fit
    assert 25 < r["train_days"]["value"] < 45


# ---------------------------------------------------------------------------------------------
# The search: per configuration, and across GPU types

LLAMA_SEARCH = ["fit", "--model", "llama3-8b", "--gpus", "64", "--batch", "512", "--seq-len", "8192", "--flash-attention", "--search",
                "--tokens", "1T"]  # fmt: skip


def test_search_rows_carry_run_days_and_cost(run_json) -> None:
    doc = run_json(*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--price", "2.50")
    iterations = doc["results"]["iterations"]["value"]
    assert iterations == math.ceil(1e12 / (512 * 8192))  # 238,419
    for row in doc["tables"]["top"]["rows"]:
        assert row["days"] == pytest.approx(row["t_step"] * iterations / DAY, rel=1e-12)
        assert row["cost"] == pytest.approx(2.5 * 64 * iterations * row["t_step"] / HOUR, rel=1e-12)
    # the best configuration's run is the first row's
    assert doc["results"]["train_days"]["value"] == pytest.approx(doc["tables"]["top"]["rows"][0]["days"], rel=1e-12)


def test_several_gpus_ranked_by_cost_per_token(run_json) -> None:
    doc = run_json(*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--price", "2.50", "--gpu", "a100-sxm4-80gb", "--price", "1.20", "--top", "6")
    summary = doc["tables"]["gpu_types"]["rows"]
    assert {row["gpu"] for row in summary} == {"NVIDIA H100 SXM5 80GB", "NVIDIA A100 SXM4 80GB"}
    price = {"NVIDIA H100 SXM5 80GB": 2.5, "NVIDIA A100 SXM4 80GB": 1.2}
    for row in summary:  # cost per 1M tokens = price x N x t_step / 3,600 s / (B s) x 1e6
        assert row["cost_per_million_tokens"] == pytest.approx(price[row["gpu"]] * 64 * row["t_step"] / HOUR / (512 * 8192) * 1e6, rel=1e-12)
    assert [r["cost_per_million_tokens"] for r in summary] == sorted(r["cost_per_million_tokens"] for r in summary)
    costs = [row["cost"] for row in doc["tables"]["top"]["rows"]]
    assert costs == sorted(costs) and len(costs) == 6
    assert doc["settings"]["rank_by"] == "cost"
    assert doc["verdicts"][0].startswith("cheapest per token: " + summary[0]["gpu"])


def test_several_gpus_ranked_by_time(run_json) -> None:
    doc = run_json(*LLAMA_SEARCH, "--gpu", "a100-sxm4-80gb", "--price", "1.20", "--gpu", "h100-sxm5", "--price", "2.50",
                   "--rank-by", "time")  # fmt: skip
    steps = [row["t_step"] for row in doc["tables"]["top"]["rows"]]
    assert steps == sorted(steps)
    assert doc["tables"]["top"]["rows"][0]["gpu"] == "NVIDIA H100 SXM5 80GB"  # 989 vs 312 TFLOP/s: the H100 steps faster


def test_core_cost_per_token_matches_the_run() -> None:
    plan = RunPlan(tokens=10**9, price=Price(2.0), power=Power(700.0, "datasheet"))
    run = run_from_step(plan, Term("t_step", "t", "t", 3.0, "s", "step"), 16, 64, 4096)
    assert run.cost_per_million_tokens is not None
    assert run.cost_per_million_tokens.value == pytest.approx(cost_per_million_tokens(3.0, 16, 64, 4096, Price(2.0)), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Units, presets, renderers


@pytest.mark.parametrize(("text", "tokens"), [("15T", 15 * 10**12), ("300B", 300 * 10**9), ("2.5e12", 2_500_000_000_000), ("1.5M", 1_500_000)])
def test_token_counts(text: str, tokens: int) -> None:
    assert parse_tokens(text, "--tokens") == tokens


@pytest.mark.parametrize(("text", "value", "currency"), [("2.50", 2.5, "$"), ("2.50/GPU-h", 2.5, "$"), ("$2.50/GPU-h", 2.5, "$"),
                                                       ("€1.20/h", 1.2, "€"), ("1.20 EUR/GPU-h", 1.2, "EUR")])  # fmt: skip
def test_prices(text: str, value: float, currency: str) -> None:
    assert parse_price(text, "--price") == (value, currency)


def test_power_units() -> None:
    assert parse_quantity("1.2kW", Dimension.POWER, "--gpu-power") == 1200
    assert format_quantity(334_233_600, "Wh") == "334.2336 MWh"


@pytest.mark.parametrize(("gpu", "watts"), [("h100-sxm5", 700), ("h100-pcie", 350), ("a100-sxm4-80gb", 400), ("h200", 700),
                                            ("mi300x", 750), ("l4", 72)])  # fmt: skip
def test_board_power_from_datasheets(gpu: str, watts: float) -> None:
    power = load_gpu(gpu).board_power
    assert power is not None and power.value == watts and power.unit == "W"
    assert f"{watts}" in power.source.replace(",", "")  # the datasheet line is quoted


def test_no_board_power_is_no_energy(run_json) -> None:
    # no NVIDIA datasheet for the H800 was found: no board power, no energy, and the note says why
    doc = run_json("flops", *GPT3, "--batch", "8", "--tokens", "1B", "--step-time", "1s", "--gpus", "8", "--gpu", "h800-sxm5")
    assert "energy" not in doc["results"] and any("no board power" in a for a in doc["assumptions"])


@pytest.mark.parametrize("fmt", ["markdown", "latex"])
def test_run_renders(runner, fmt: str) -> None:
    from parcalc.cli import app

    result = runner.invoke(app, ["flops", *GPT3, "--batch", "1536", "--tokens", "300B", "--step-time", "10s", "--gpus", "1024",
                                 "--gpu", "a100-sxm4-80gb", "--price", "€2", "--format", fmt])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "EUR" in result.stdout


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2

RUN = ["flops", *GPT3, "--batch", "8"]


@pytest.mark.parametrize(("args", "words"), [
    (RUN + ["--tokens", "0"], "--tokens: '0' must be greater than zero"),
    (RUN + ["--tokens", "-1"], "must not be negative"),
    (RUN + ["--tokens", "abc"], "cannot read 'abc' as a token count"),
    (RUN + ["--tokens", "1e40"], "beyond any possible size"),
    (RUN + ["--price", "2.50"], "--price: applies to a whole run"),
    (RUN + ["--tokens", "1T", "--price", "2.50"], "need its time"),
    (RUN + ["--tokens", "1T", "--step-time", "1s", "--gpus", "8", "--gpu-power", "700W", "--pue", "0.9"], "--pue"),
    (RUN + ["--tokens", "1T", "--step-time", "1s", "--gpus", "8", "--pue", "1.2"], "--pue: scales the GPUs' energy"),
    (RUN + ["--tokens", "1T", "--step-time", "1s", "--gpus", "8", "--gpu-power", "700"], "has no unit"),
    (RUN + ["--tokens", "1T", "--step-time", "1s", "--gpus", "8", "--price", "abc"], "cannot read 'abc' as a price"),
    (RUN + ["--tokens", "1T", "--tflops-per-gpu", "0", "--gpus", "8"], "--tflops-per-gpu: '0' must be greater than zero"),
    (RUN + ["--tokens", "1T", "--mfu", "1.5", "--gpus", "8", "--gpu", "h100-sxm5"], "--mfu"),
    (RUN + ["--tokens", "1T", "--iterations", "5"], "not both"),
    (["fit", *GPT3, "--gpu", "a100-sxm4-80gb", "--gpus", "8", "--tokens", "1T"], "--tokens: a run's time needs a step time"),
    (["fit", *GPT3, "--gpu", "a100-sxm4-80gb", "--gpu", "h100-sxm5", "--gpus", "8"], "compared by --search only"),
    ([*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--gpu", "a100-sxm4-80gb", "--price", "2"], "--price: one per --gpu"),
    ([*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--rank-by", "cost"], "--rank-by cost: give --tokens"),
    ([*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--rank-by", "speed"], "--rank-by: time or cost"),
    ([*LLAMA_SEARCH[:-2], "--gpu", "h100-sxm5", "--rank-by", "cost"], "--rank-by cost: give --tokens"),
    ([*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--gpu-power", "1e300W"], "at most 100 kW"),
    ([*LLAMA_SEARCH, "--gpu", "h100-sxm5", "--price", "1e306"], "not a finite number"),
])  # fmt: skip
def test_bad_input(run_error, args: list[str], words: str) -> None:
    assert words in run_error(args)


def test_core_refuses_what_the_cli_cannot_send() -> None:
    with pytest.raises(InputError, match="--pue"):
        Power(700.0, "x", pue=0.5)
    with pytest.raises(InputError, match="one of them"):
        RunPlan()
