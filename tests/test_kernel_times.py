"""Kernel times that can be held against a measurement (issue #18, item 4): `intensity --m --k --n --gpu`
and `intensity --model --gpu` time kernels with the step-time model fit uses (parcalc.core.timing.compute).

Published measurements come from tests/kernel_measurements.py (each row with its source there). The
isolated GEMM shares in the GPU presets (kernels.matmul_isolated) are derived from the MAMF best-shape
rows of ml-engineering's table, so those rows are left out of the comparison; the FlashAttention shares
came from FA2's H100 hd128 non-causal 16k figures (presets/gpus/h100-sxm5.yaml `fa2`), left out likewise.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.peak_flops import gpu_peak_flops
from parcalc.core.timing.compute import LayerShard, flash_attention, gemm, layer_passes
from parcalc.core.timing.kernel_report import alone_spec, gemm_times, kernel_spec, layer_kernels
from parcalc.presets import load_gpu, load_link, load_model

sys.path.insert(0, str(Path(__file__).parent))
from kernel_measurements import ATTENTION, GEMM_SHAPES, MLE_MAMF

# The sources' GPU names -> the presets with measured kernel shares (A100 PCIe has no `kernels` section)
PRESET = {"H100 SXM": "h100-sxm5", "H100 (sm_90)": "h100-sxm5", "A100 SXM": "a100-sxm4-80gb", "A100 SXM 80GB": "a100-sxm4-80gb"}
DTYPE = {"bf16": "bf16", "fp16": "fp16", "fp8_e4m3": "fp8"}
H100_PEAK = 2 * 1.830e9 * 132 * 2048  # presets/gpus/h100-sxm5.yaml: 989.42976 TFLOP/s (whitepaper, implied clock)


def spec_of(name: str, dtype: str = "bf16"):
    gpu = load_gpu(name)
    return kernel_spec(gpu, dtype, gpu_peak_flops(gpu, dtype).value)


def test_published_gemms_median_within_25_percent() -> None:
    """Issue #18: median predicted/measured TFLOP/s of at least 20 published GEMM shapes within 25 % of 1.
    36 shapes (zzc0721 torch.mm squares, XLA's sm_90 table, older MAMF tables); measured 1.076."""
    ratios = []
    for row in GEMM_SHAPES:
        if row.gpu not in PRESET or row.source.startswith(MLE_MAMF):  # no preset, or the calibration rows
            continue
        dtype = DTYPE[row.dtype]
        spec = alone_spec(spec_of(PRESET[row.gpu], dtype), dtype)
        kernel = gemm("gemm", row.m, row.k, row.n, 1.0 if dtype == "fp8" else 2.0, spec, row.batch)
        ratios.append(kernel.flops / kernel.time / (row.tflops * 1e12))
    assert len(ratios) >= 20
    assert abs(statistics.median(ratios) - 1) <= 0.25
    assert statistics.median(ratios) == pytest.approx(1.076, abs=0.005)  # what it is today: a change shows here
    # most shapes within a factor 1.5; the rest are short-k and tiny GEMMs (XLA's 4096x256x4096: 1.96x too fast;
    # 256x4096x256: 0.17, a split-K kernel the tile model cannot see)
    assert sum(1 / 1.5 <= r <= 1.5 for r in ratios) / len(ratios) >= 0.8


def test_published_flash_attention_median_within_25_percent() -> None:
    """FlashAttention-2 forward (FA3 paper Fig. 5, FA2 series) and forward+backward (FA2 README figures) on
    A100 and H100, FLOPs in FA2's convention (4 s^2 d h, halved when causal; backward 2.5x): parcalc's
    FlashAttention kernels at the presets' shares. Short and causal sequences come out too fast (up to 2.4x at
    512 causal: the model has one share per pass); the median is 1.2."""
    ratios = []
    for row in ATTENTION:
        if row.gpu not in PRESET or row.impl != "FlashAttention-2" or row.seqlen is None:
            continue
        if row.gpu == "H100 SXM" and row.head_dim == 128 and not row.causal and row.seqlen == 16384:
            continue  # the preset's calibration points
        spec = spec_of(PRESET[row.gpu])
        flops = 4 * row.batch * row.seqlen**2 * row.n_heads * row.head_dim * (0.5 if row.causal else 1.0)
        fwd = flash_attention("f", flops, 0.0, False, spec, "").time
        bwd = flash_attention("b", 2.5 * flops, 0.0, True, spec, "").time
        predicted = flops / fwd if row.pass_ == "fwd" else 3.5 * flops / (fwd + bwd)
        ratios.append(predicted / (row.tflops * 1e12))
    assert len(ratios) >= 40
    assert abs(statistics.median(ratios) - 1) <= 0.25


def test_gemm_time_by_hand_on_h100() -> None:
    """4096^3 BF16 on H100 SXM: 16 x 32 = 512 tiles of 256x128 in ceil(512/132) = 4 waves, q = 512/528;
    in training t = 2 x 4096^3 / (989.43e12 x 0.496 x 512/528) = 288.81 us (475.89 TFLOP/s);
    alone (0.828, MAMF) 173.0 us = 794.4 TFLOP/s, against 788.72 (zzc0721 #79) and 783.3 (XLA) measured."""
    spec = spec_of("h100-sxm5")
    assert spec.peak == pytest.approx(H100_PEAK)
    t_train, r_train, t_alone, r_alone = gemm_times(4096, 4096, 4096, 1, 2.0, "bf16", spec)
    flops = 2 * 4096**3
    assert t_train.value == pytest.approx(flops / (H100_PEAK * 0.496 * 512 / 528), rel=1e-12)
    assert r_train.value == pytest.approx(H100_PEAK * 0.496 * 512 / 528, rel=1e-12)
    assert t_alone.value == pytest.approx(flops / (H100_PEAK * 0.828 * 512 / 528), rel=1e-12)
    assert r_alone.value / 1e12 == pytest.approx(794.42, abs=0.01)


def test_launch_floor_and_memory_bound_gemm() -> None:
    """A 64^3 GEMM takes the 4 us launch floor; an outer product (8192 x 8 x 8192, BF16) is memory-bound:
    2 x (8192 x 8 x 2 + 8192^2) B / (3.35e12 B/s x 0.9) = 44.60 us (its 1.07 GFLOP take 2.3 us at the training rate)."""
    spec = spec_of("h100-sxm5")
    tiny = gemm_times(64, 64, 64, 1, 2.0, "bf16", spec)[0]
    assert tiny.value == 4e-6
    outer = gemm_times(8192, 8, 8192, 1, 2.0, "bf16", spec)[0]
    assert outer.value == pytest.approx(2 * (8192 * 8 * 2 + 8192**2) / (3.35e12 * 0.9), rel=1e-12)
    assert "memory-bound" in outer.assumptions[0]


def test_kernel_spec_is_fits_spec() -> None:
    """intensity builds the ComputeSpec fit's Cluster builds (same GPU, dtype, peak; FlashAttention at the
    preset's 16-bit peak, as commands/fit.py _cluster sets it): one model."""
    from parcalc.core.fit import Cluster
    from parcalc.core.timing.compute import sixteen_bit_peak

    gpu = load_gpu("h100-sxm5")
    peak = gpu_peak_flops(gpu, "bf16").value
    cluster = Cluster(8, 8, peak, 80 * 2**30, load_link("nvlink4"), load_link("ib-ndr"), gpu=gpu, dtype="bf16",
                      attention_peak=sixteen_bit_peak(gpu))
    assert kernel_spec(gpu, "bf16", peak) == cluster.spec


def test_layer_table_is_the_step_models_kernels() -> None:
    """The --model table lists layer_passes' kernels and sums to its forward and backward times; by hand,
    Llama 3 8B's norm1 at 8192 tokens: read and write 8192 x 4096 x 2 B at 3.35 TB/s x 0.9 = 44.52 us."""
    model = load_model("llama3-8b")
    spec = spec_of("h100-sxm5")
    shard = LayerShard(1, 8192, 1, False, True, False, True, 2.0)
    table, (fwd, bwd) = layer_kernels(model, shard, spec)
    passes = layer_passes(model, shard, spec)
    assert fwd.value == passes.t_forward and bwd.value == passes.t_backward
    rows = {(r["kernel"], r["pass"]): r for r in table.records()}
    assert rows[("norm1", "forward")]["time"] == pytest.approx(2 * 2 * 8192 * 4096 / (3.35e12 * 0.9), rel=1e-12)
    assert rows[("attn.flash.bwd", "backward")]["kind"] == "attention"
    assert rows[("lm_head.wgrad", "backward")]["kind"] == "gemm"
    assert sum(r["time"] for r in table.records() if r["pass"] == "forward" and r["kernel"] in {k.key for k in passes.forward}) == \
        pytest.approx(passes.t_forward)


runner = CliRunner()


def test_cli_gemm_json_carries_times() -> None:
    out = runner.invoke(app, ["intensity", "--m", "4096", "--k", "4096", "--n", "4096", "--dtype", "bf16", "--gpu", "h100-sxm5",
                              "--format", "json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    values = {key: d["value"] for key, d in data["results"].items()}
    assert values["time_train"] == pytest.approx(2 * 4096**3 / (H100_PEAK * 0.496 * 512 / 528))
    assert values["achieved_alone"] / 1e12 == pytest.approx(794.42, abs=0.01)


def test_cli_model_json_has_kernel_table() -> None:
    out = runner.invoke(app, ["intensity", "--model", "llama3-8b", "--seq-len", "2048", "--dtype", "bf16", "--gpu", "h100-sxm5",
                              "--flash-attention", "--format", "json"])  # fmt: skip
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert any(r["kernel"] == "attn.flash" and r["time"] > 0 for r in data["tables"]["kernels"]["rows"])
    assert set(data["results"]) >= {"layer_forward_time", "layer_backward_time"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--m", "64", "--k", "64", "--n", "64", "--flash-attention"], "--flash-attention"),
        (["--m", "0", "--k", "64", "--n", "64", "--gpu", "h100-sxm5"], "--m"),
        (["--m", "x", "--k", "64", "--n", "64", "--gpu", "h100-sxm5"], "--m"),
    ],
)
def test_cli_bad_input_is_one_line(args: list[str], needle: str) -> None:
    out = runner.invoke(app, ["intensity", *args])
    assert out.exit_code == 2
    assert out.output.strip().startswith("Error:") and needle in out.output and "Traceback" not in out.output


def test_compile_fuses_norms_into_residual_adds_by_hand() -> None:
    """--compile, Llama 3 8B (RMSNorm, no dropout), 8192 tokens, BF16: per layer the forward moves
    norm1 2e + residual1 3e + norm2 2e + residual2 3e = 10e per element of T x h eagerly (parcalc's
    hand-fused kernels), 2 x (3e + e) = 8e compiled (add and norm in one kernel, the sum not re-read):
    2 x 2 x 8192 x 4096 = 134,217,728 B less, two kernels fewer; the backward is unchanged."""
    model = load_model("llama3-8b")
    spec = spec_of("h100-sxm5")
    eager = layer_passes(model, LayerShard(1, 8192, 1, False, True, False, True, 2.0), spec)
    fused = layer_passes(model, LayerShard(1, 8192, 1, False, True, False, True, 2.0, compiled=True), spec)

    def memory_bytes(kernels) -> float:
        return sum(k.bytes for k in kernels if k.kind == "memory")

    assert memory_bytes(eager.forward) - memory_bytes(fused.forward) == 2 * 2 * 8192 * 4096
    assert len(eager.forward) - len(fused.forward) == 2
    assert {k.key for k in fused.forward} >= {"residual1+norm2", "residual2+norm1"}
    assert memory_bytes(eager.backward) == memory_bytes(fused.backward)
    assert fused.t_forward < eager.t_forward and fused.t_backward == pytest.approx(eager.t_backward)


def test_compile_fuses_softmax_and_dropout_by_hand() -> None:
    """Without FlashAttention and with dropout (GPT-style), compiled softmax + dropout is one kernel: forward
    2e + 1 instead of 2e + (2e + 1) bytes per score, backward 3e + 1 instead of (2e + 1) + 3e; saved 2e per
    score each way (b a s^2 scores)."""
    model = load_model("llama3-8b")  # its shapes; dropout and no FlashAttention given in the shard
    spec = spec_of("h100-sxm5")
    b, s = 1, 2048
    eager = layer_passes(model, LayerShard(b, s, 1, False, False, True, True, 2.0), spec)
    fused = layer_passes(model, LayerShard(b, s, 1, False, False, True, True, 2.0, compiled=True), spec)
    scores = b * model.heads * s * s
    f = {k.key: k.bytes for k in fused.forward}
    e = {k.key: k.bytes for k in eager.forward}
    assert f["attn.softmax+dropout"] == (2 * 2 + 1) * scores
    assert e["attn.softmax"] + e["attn.dropout"] - f["attn.softmax+dropout"] == 2 * 2 * scores
    fb = {k.key: k.bytes for k in fused.backward}
    eb = {k.key: k.bytes for k in eager.backward}
    assert fb["attn.softmax+dropout.bwd"] == (3 * 2 + 1) * scores
    assert eb["attn.softmax.bwd"] + eb["attn.dropout.bwd"] - fb["attn.softmax+dropout.bwd"] == 2 * 2 * scores


def test_fit_compile_flag_in_settings_and_assumptions() -> None:
    args = ["fit", "--model", "llama3-8b", "--gpu", "h100-sxm5", "--gpus", "8", "--batch", "16", "--seq-len", "8192", "--flash-attention",
            "--framework", "torchtitan", "--tp", "1", "--pp", "1", "--dp", "8", "--zero", "3", "--micro-batch", "2", "--format", "json"]
    plain, compiled = (json.loads(runner.invoke(app, args + extra).output) for extra in ([], ["--compile"]))
    assert compiled["settings"]["compile"] is True and plain["settings"]["compile"] is False  # typed settings (schema_version 1)
    assert any(a.startswith("--compile:") for a in compiled["assumptions"])
    t_plain, t_compiled = plain["results"]["t_step"]["value"], compiled["results"]["t_step"]["value"]
    # TorchTitan's Dec 2024 Table 1 (Llama 3.1 8B, 8 H100, FSDP): 5,762 -> 6,667 tokens/s per GPU with torch.compile
    # (+15.7 %). The torchtitan profile's baseline is eager PyTorch (one kernel per ATen op): compiling shortens this
    # step (no recomputation) by 9.5 %, +10.5 % tokens/s (not fit to it; the pair with op-level SAC as published:
    # tests/test_step_time_published.py). From Megatron-LM's hand-fused kernels (--kernels fused) it gains under 1 %.
    assert 1 - t_compiled / t_plain == pytest.approx(0.095, abs=0.003)
    fused_plain, fused_compiled = (json.loads(runner.invoke(app, args + ["--kernels", "fused"] + extra).output)["results"]["t_step"]["value"]
                                   for extra in ([], ["--compile"]))  # fmt: skip
    assert 0.0 < 1 - fused_compiled / fused_plain < 0.01


def test_search_with_compile_agrees_with_the_estimate() -> None:
    """--compile reaches the vectorised search through Training (layer_pieces builds the LayerShard): sampled
    rows equal fit.estimate's, and every row's compute is below the same row without --compile (GPT-2 XL
    trains with dropout; without FlashAttention the softmax + dropout group counts too)."""
    import random

    from parcalc.core.fit import Cluster, Training, estimate
    from parcalc.core.fit_search import search

    a100 = load_gpu("a100-sxm4-80gb")
    cluster = Cluster(8, 8, 312e12, a100.memory_capacity.value, load_link("nvlink3"), load_link("ib-hdr"), gpu=a100)
    model = load_model("gpt2-xl")
    plain, compiled = (search(model, Training(32, 1024, compiled=c), cluster).evaluated for c in (False, True))
    assert len(compiled) == len(plain) > 20
    for i in random.Random(0).sample(range(len(compiled)), 15):
        config = compiled.config(i)
        scalar = estimate(model, config, Training(32, 1024, compiled=True), cluster)
        assert compiled.columns["t_compute"][i] == pytest.approx(scalar.compute.value, rel=1e-9)
        assert compiled.columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9)
        assert plain.config(i) == config and compiled.columns["t_compute"][i] < plain.columns["t_compute"][i]
