"""GPU power limits (parcalc.core.power): the Tensor Core rate under a board power limit, from a GPU
preset's power curve, and its plumbing into the kernel model, fit (table, one configuration, search),
intensity and peak-flops.

Expected values come from NVIDIA's ratings of the GH100 die: H100 SXM5 989.4 TFLOP/s dense BF16 at
700 W (whitepaper V1.04 Table 1), H100 NVL 1,671 sparse = 835.5 dense at 350-400 W on the same 132
SMs (H100 datasheet, NVL column), so 835.5 / 989.4 = 0.8445 at 400 W; between them by hand:
s(P) = 0.8445 + (P - 400) / (700 - 400) x (1 - 0.8445).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.fit_search import search
from parcalc.core.power import check_power_limit, tensor_power_scale, with_power_limit
from parcalc.core.timing.compute import compute_spec, gemm, memory_op
from parcalc.errors import InputError, PresetError
from parcalc.preset_hardware import gpu_from_document
from parcalc.presets import load_gpu, load_link, load_model

H100 = load_gpu("h100-sxm5", ())
TT = load_gpu("h100-sxm5-96gb-hbm2e", ())
NVL_SCALE = 835.5 / 989.4  # H100 NVL over H100 SXM5 dense BF16, same 132 SMs


def by_hand(watts: float) -> float:
    return 0.8445 + (watts - 400) / (700 - 400) * (1 - 0.8445)


def test_the_curve_is_the_datasheet_ratio() -> None:
    """The preset's 400 W point is the NVL's rated peak over the SXM5's, rounded to 4 places."""
    low, high = H100.power_curve
    assert (low.watts, high.watts) == (400.0, 700.0)
    assert low.tensor_scale == pytest.approx(NVL_SCALE, abs=5e-5)
    assert high.tensor_scale == 1.0
    assert low.tensor_scale * 989.4e12 / (2 * 132 * 2048) == pytest.approx(1.545e9, rel=1e-3)  # the NVL's Tensor Core clock


@pytest.mark.parametrize("watts", [400, 450, 500, 600, 650, 700])
def test_interpolated_scale(watts: float) -> None:
    scale = tensor_power_scale(with_power_limit(H100, watts))
    assert scale is not None
    assert scale.value == pytest.approx(by_hand(watts), rel=1e-12)
    interpolated = 400 < watts < 700
    assert any("an interpolation" in a for a in scale.assumptions) is interpolated
    assert any("HBM bandwidth" in a for a in scale.assumptions)


def test_no_limit_is_the_rated_peak() -> None:
    assert H100.power_limit is None
    assert tensor_power_scale(H100) is None
    spec = compute_spec(H100, "bf16", 989.4e12, 989.4e12)
    assert (spec.peak, spec.attention_peak, spec.power_scale) == (989.4e12, 989.4e12, 1.0)


@pytest.mark.parametrize("watts, message", [
    (0, "above 0 W"), (-1, "above 0 W"), (math.nan, "above 0 W"), (math.inf, "above 0 W"),
    (701, "above NVIDIA H100 SXM5 80GB's board power of 700 W"), (399, "below the lowest point"),
])  # fmt: skip
def test_hostile_limits_are_refused(watts: float, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_power_limit(H100, watts)


def test_a_gpu_without_a_curve_refuses_a_limit() -> None:
    with pytest.raises(InputError, match="no power curve"):
        with_power_limit(load_gpu("a100-sxm4-80gb", ()), 300)


def test_tensor_core_kernels_scale_and_memory_kernels_do_not() -> None:
    """compute_spec: GEMM and FlashAttention peaks x s(500 W) = 0.89633; HBM bandwidth unchanged, so a
    memory-bound kernel takes the same time and a compute-bound GEMM 1 / 0.89633 = 1.1157 x as long."""
    capped = with_power_limit(H100, 500)
    full, limited = compute_spec(H100, "fp8", 1978.9e12, 989.4e12), compute_spec(capped, "fp8", 1978.9e12, 989.4e12)
    s = by_hand(500)
    assert limited.peak == pytest.approx(1978.9e12 * s) and limited.attention_peak == pytest.approx(989.4e12 * s)
    assert limited.sixteen_bit is not None and limited.sixteen_bit.peak == pytest.approx(989.4e12 * s)  # scaled once, not twice
    assert limited.bandwidth == full.bandwidth == 3.35e12
    assert memory_op("x", 1e9, limited).time == memory_op("x", 1e9, full).time
    big = gemm("g", 8192, 8192, 8192, 2.0, limited).time / gemm("g", 8192, 8192, 8192, 2.0, full).time
    assert big == pytest.approx(1 / s, rel=1e-12)


def test_the_torchtitan_preset() -> None:
    """The TorchTitan page: 96GB HBM2e, 2.4 TB/sec, 400 Gb/s per GPU, 8 per host, default 500 W limit."""
    assert TT.memory_capacity.value == 96 * 2**30 and TT.memory_bandwidth.value == 2.4e12
    assert TT.power_limit is not None and TT.power_limit.value == 500 and TT.board_power is not None and TT.board_power.value == 500
    assert TT.node is not None and (TT.node.gpus, TT.node.nics, TT.node.inter_link) == (8, 8, "ib-ndr")
    assert TT.dtypes["bf16"] == H100.dtypes["bf16"] and TT.kernels == H100.kernels
    scale = tensor_power_scale(TT)
    assert scale is not None and scale.value == pytest.approx(0.896333, rel=1e-6)
    assert 835.5e12 < 989.4e12 * scale.value < 989.4e12  # 'between SXM and NVL' (TorchTitan's footnote)
    with pytest.raises(InputError, match="board power of 500 W"):
        with_power_limit(TT, 600)


def _cluster(gpu, gpus: int = 8) -> Cluster:  # type: ignore[no-untyped-def]
    return Cluster(gpus=gpus, gpus_per_node=8, peak=989.4e12, capacity=gpu.memory_capacity.value, intra=load_link("nvlink4", ()),
                   inter=load_link("ib-ndr", ()), gpu=gpu, attention_peak=989.4e12)  # fmt: skip


def test_a_gemm_bound_step_slows_by_less_than_the_clock() -> None:
    """Llama 3 8B on 8 H100, ZeRO-3: at 500 W the compute term grows by at most 1 / 0.8963 (only the
    Tensor Core kernels slow); MFU stays quoted against the rated 989.4 TFLOP/s."""
    model = load_model("llama3-8b", ())
    training = Training(16, 8192, Precision.MIXED_BF16, flash_attention=True)
    config = Config.of(1, 1, 8, 2, Recompute.SELECTIVE, 3)
    full = estimate(model, config, training, _cluster(H100))
    capped = estimate(model, config, training, _cluster(with_power_limit(H100, 500)))
    ratio = capped.compute.value / full.compute.value
    assert 1.05 < ratio < 1 / by_hand(500) + 1e-9
    assert capped.mfu.value == pytest.approx(full.mfu.value * full.step.value / capped.step.value, rel=1e-9)


def test_the_search_agrees_with_the_estimate_under_a_limit() -> None:
    """fit_search takes the capped rates from the same ComputeSpec as estimate (tests/test_fit_search.py)."""
    model = load_model("llama3-8b", ())
    training = Training(64, 4096, Precision.MIXED_BF16, flash_attention=True)
    cluster = _cluster(with_power_limit(H100, 450), gpus=16)
    evaluated = search(model, training, cluster).evaluated
    fitting = np.flatnonzero(evaluated.columns["fits"]).tolist()
    assert len(fitting) > 10
    for i in fitting[:: max(1, len(fitting) // 12)]:
        scalar = estimate(model, evaluated.config(i), training, cluster)
        assert evaluated.columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9)
        assert evaluated.columns["t_compute"][i] == pytest.approx(scalar.compute.value, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Preset validation


def _document(**changes: object) -> dict:
    base = {
        "kind": "gpu", "name": "Test GPU", "vendor": "x", "architecture": "y",
        "sources": {"d": "datasheet"}, "memory_capacity": {"value": "80 GiB", "source": "d"},
        "memory_bandwidth": {"value": "3 TB/s", "source": "d"}, "board_power": {"value": "700 W", "source": "d"},
        "power_curve": [{"power": "400 W", "tensor_scale": 0.8, "source": "d"}, {"power": "700 W", "tensor_scale": 1, "source": "d"}],
    }  # fmt: skip
    return {**base, **changes}


def test_a_valid_curve_loads() -> None:
    gpu = gpu_from_document("t", Path("t.yaml"), _document(power_limit={"value": "550 W", "source": "d"}))
    assert [(p.watts, p.tensor_scale) for p in gpu.power_curve] == [(400.0, 0.8), (700.0, 1.0)]
    scale = tensor_power_scale(gpu)
    assert scale is not None and scale.value == pytest.approx(0.9)  # 0.8 + 150 / 300 x 0.2


@pytest.mark.parametrize("curve, message", [
    ([], "non-empty list"),
    ([{"power": "700 W", "tensor_scale": 1, "source": "d"}, {"power": "400 W", "tensor_scale": 0.8, "source": "d"}], "ascend"),
    ([{"power": "400 W", "tensor_scale": 1, "source": "d"}, {"power": "700 W", "tensor_scale": 0.8, "source": "d"}], "lower Tensor Core rate"),
    ([{"power": "400 W", "tensor_scale": 1.2, "source": "d"}], "at most 1"),
    ([{"power": 400, "tensor_scale": 0.8, "source": "d"}], "no unit"),
    ([{"power": "400 W", "tensor_scale": 0.8}], "keys power, tensor_scale, source"),
    ([{"power": "400 W", "tensor_scale": 0.8, "source": "nowhere"}], "not a key of 'sources'"),
])  # fmt: skip
def test_bad_curves_are_refused(curve: list, message: str) -> None:
    with pytest.raises(PresetError, match=message):
        gpu_from_document("t", Path("t.yaml"), _document(power_curve=curve))


@pytest.mark.parametrize("limit", ["300 W", "800 W"])
def test_a_default_limit_outside_the_curve_is_refused(limit: str) -> None:
    with pytest.raises(PresetError, match="outside the power curve"):
        gpu_from_document("t", Path("t.yaml"), _document(power_limit={"value": limit, "source": "d"}))


def test_a_default_limit_needs_a_curve() -> None:
    document = _document(power_limit={"value": "500 W", "source": "d"})
    del document["power_curve"]
    with pytest.raises(PresetError, match="needs a power_curve"):
        gpu_from_document("t", Path("t.yaml"), document)


# ---------------------------------------------------------------------------------------------
# The commands

FIT = ["fit", "--model", "llama3-8b", "--gpus", "8", "--batch", "16", "--seq-len", "8192", "--tp", "1", "--pp", "1", "--dp", "8",
       "--zero", "3", "--flash-attention"]  # fmt: skip


def test_fit_shows_the_limit_and_the_rate(run_json) -> None:
    full = run_json(*FIT, "--gpu", "h100-sxm5")
    capped = run_json(*FIT, "--gpu", "h100-sxm5", "--power-limit", "500W")
    assert "power_limit" not in full["inputs"]
    assert capped["inputs"]["power_limit"]["value"] == 500
    assert capped["inputs"]["power_scale"]["value"] == pytest.approx(by_hand(500))
    assert capped["inputs"]["capped_peak_flops"]["value"] == pytest.approx(989.4e12 * by_hand(500))
    assert capped["inputs"]["peak_flops"]["value"] == full["inputs"]["peak_flops"]["value"] == 989.4e12  # MFU's peak
    assert capped["results"]["t_step"]["value"] > full["results"]["t_step"]["value"]
    assert any("power limit 500 W" in a for a in capped["assumptions"])
    # the preset's own 500 W limit is the same as --power-limit 500W on the same die (bandwidth aside: HBM2e)
    tt = run_json(*FIT, "--gpu", "h100-sxm5-96gb-hbm2e")
    assert tt["inputs"]["power_scale"]["value"] == capped["inputs"]["power_scale"]["value"]


def test_fit_energy_uses_the_limit(run_json) -> None:
    """The board draws at most its limit: 8 GPUs x 400 W over the run's wall clock."""
    doc = run_json(*FIT, "--gpu", "h100-sxm5", "--power-limit", "400W", "--tokens", "1B")
    energy = doc["results"]["energy"]
    assert energy["inputs"]["P"]["value"] == 400
    seconds = doc["results"]["train_time"]["value"]
    assert energy["value"] == pytest.approx(8 * 400 * seconds / 3600, rel=1e-9)  # Wh


def test_fit_search_takes_the_limit(run_json) -> None:
    args = ["fit", "--model", "llama3-8b", "--gpus", "16", "--batch", "64", "--seq-len", "4096", "--flash-attention", "--search",
            "--gpu", "h100-sxm5", "--top", "1"]  # fmt: skip
    full, capped = run_json(*args), run_json(*args, "--power-limit", "400W")
    best = lambda doc: min(r["t_step"] for r in doc["tables"]["configurations"]["rows"] if r["fits"])  # noqa: E731
    assert best(capped) > best(full)
    assert capped["inputs"]["power_scale"]["value"] == pytest.approx(0.8445)


@pytest.mark.parametrize("value, message", [
    ("0W", "greater than zero"), ("-1W", "negative"), ("nan", "finite"), ("500", "no unit"), ("abc", "cannot read"),
    ("800W", "above NVIDIA H100 SXM5 80GB's board power"), ("300W", "below the lowest point"),
])  # fmt: skip
def test_fit_hostile_limits(run_error, value: str, message: str) -> None:
    assert message in run_error([*FIT, "--gpu", "h100-sxm5", f"--power-limit={value}"])


@pytest.mark.parametrize("extra, message", [
    (["--gpu", "a100-sxm4-80gb", "--power-limit", "300W"], "no power curve"),
    (["--gpu", "h100-sxm5", "--peak", "900TFLOP/s", "--power-limit", "500W"], "with --peak"),
    (["--peak", "900TFLOP/s", "--capacity", "80GiB", "--power-limit", "500W"], "give --gpu NAME"),
])  # fmt: skip
def test_fit_limits_that_cannot_apply(run_error, extra: list[str], message: str) -> None:
    assert message in run_error([*FIT, *extra])


def test_peak_flops_answers_the_capped_peak(run_json) -> None:
    doc = run_json("peak-flops", "--gpu", "h100-sxm5", "--dtype", "bf16", "--power-limit", "500W")
    capped = doc["results"]["capped_peak"]
    assert capped["value"] == pytest.approx(2 * 1.83e9 * 132 * 2048 * by_hand(500))  # 2 f N_SM FMA x s
    assert doc["inputs"]["power_limit"]["value"] == 500
    assert any("under the 500 W power limit: 886.9 TFLOP/s" in v for v in doc["verdicts"])
    plain = run_json("peak-flops", "--gpu", "h100-sxm5", "--dtype", "bf16")
    assert "capped_peak" not in plain["results"]


def test_peak_flops_refusals(run_error) -> None:
    assert "not with --clock" in run_error(["peak-flops", "--gpu", "h100-sxm5", "--dtype", "bf16", "--clock", "1.5GHz", "--power-limit", "500W"])
    assert "give --gpu NAME" in run_error(["peak-flops", "--clock", "1.5GHz", "--sms", "132", "--fma-per-clock", "2048", "--power-limit", "500W"])


def test_intensity_roof_is_the_capped_peak(run_json) -> None:
    args = ["intensity", "--m", "8192", "--k", "8192", "--n", "8192", "--dtype", "bf16", "--gpu", "h100-sxm5"]
    full, capped = run_json(*args), run_json(*args, "--power-limit", "500W")
    assert capped["results"]["ridge"]["value"] == pytest.approx(full["results"]["ridge"]["value"] * by_hand(500))
    # the kernel model charges the capped rate once: a compute-bound GEMM takes 1 / s as long
    assert capped["results"]["time_train"]["value"] == pytest.approx(full["results"]["time_train"]["value"] / by_hand(500), rel=1e-9)
    assert capped["inputs"]["power_limit"]["value"] == 500


def test_intensity_without_a_gpu_refuses(run_error) -> None:
    assert "give --gpu NAME" in run_error(["intensity", "--m", "8", "--k", "8", "--n", "8", "--power-limit", "500W"])


def test_replace_keeps_other_fields() -> None:
    capped = with_power_limit(H100, 500)
    assert replace(capped, power_limit=None) == H100
