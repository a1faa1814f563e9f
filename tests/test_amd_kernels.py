"""AMD Instinct kernels from published measurements (presets/gpus/mi300x.yaml, mi325x.yaml, mi355x.yaml `kernels:`): each
entered share reproduces the figure it was read from, and the rows of the same sources that did not set it are checks.

Sources (tests/amd_kernel_measurements.py, which quotes them): AMD's Primus-Turbo benchmark CSVs on an MI300X (84
training-shape BF16 GEMMs through hipBLASLt, forward and backward; AITER's fused attention, causal, head dims 128 and 64)
and HipKittens' baselines (arXiv:2511.08083): square torch.matmul (hipBLASLt) on an MI325X and an MI355X, hipblaslt-bench
FP8 and AITER's fused attention on an MI355X; AITER's own table of its v3 attention kernels on both GPUs (the MI355X's
shares). Where the share model (one rate per dtype or head dimension, no fixed cost
per kernel) misses a row, the test says so with the measured direction instead of widening a tolerance.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from amd_kernel_measurements import (
    AITER_CAUSAL,
    AITER_README_MI300X_CAUSAL_8192,
    AMD_MAF_BF16,
    BABELSTREAM_MI300X_COPY_TBPS,
    MI300X_BF16_GEMMS,
    MI300X_CAUSAL_ATTENTION,
    MI300X_FP8_GEMMS,
    MI325X_TORCH_BF16,
    MI355X_AITER_GQA,
    MI355X_AITER_MHA,
    MI355X_HIPBLASLT_FP8,
    MI355X_TORCH_BF16,
    PRIMUS_MI355X_BASELINE_ATTENTION_MS,
    PRIMUS_MI355X_BASELINE_PROFILE_MS,
    PRIMUS_MI355X_DEEPEP_US,
    PRIMUS_MI355X_DISPATCH_LAYOUT_US,
    PRIMUS_MI355X_FUSED_ACT_ROW,
    PRIMUS_MI355X_PERMUTE_FWD_US,
    PRIMUS_MI355X_QK_NORM_ROPE_US,
    PRIMUS_MI355X_QUANT_262144X768_US,
    PRIMUS_MI355X_R3_PROFILE_MS,
    PRIMUS_MI355X_TE_ATTENTION_BWD_US,
    ROCPROF_MEMCOPY_GBPS,
    AiterTableRow,
    AttentionRow,
    ShapeGemm,
)
from typer.testing import CliRunner

from parcalc.cli import app
from parcalc.core.timing.attention_kernels import attention_kernel_shares
from parcalc.core.timing.fp8_quantise import cast_plan
from parcalc.core.timing.kernels import (
    ComputeSpec,
    compute_spec,
    flash_attention,
    gemm,
    linear_kernels,
    memory_op,
    quantisation,
    sixteen_bit_peak,
)
from parcalc.presets import load_gpu

BF16_PEAK = {"mi300x": 1307.4, "mi325x": 1307.4, "mi355x": 2516.6}  # TFLOP/s, the presets' dense BF16 peaks


def spec(name: str, dtype: str = "bf16") -> ComputeSpec:
    gpu = load_gpu(name, ())
    rates = gpu.dtypes[dtype].dense_peak
    assert rates is not None
    return compute_spec(gpu, dtype, rates.value, sixteen_bit_peak(gpu))


def share_of(row: ShapeGemm, s: ComputeSpec) -> float:
    """The row's forward rate over the peak and its shape's tile and wave quantisation: parcalc's e_mm for that row."""
    return row.forward_tflops * 1e12 / (s.peak * quantisation(row.m, row.n, 1, s))


def forward_error(row: ShapeGemm, s: ComputeSpec) -> float:
    t = gemm("fwd", row.m, row.k, row.n, 2.0, s).time
    return 2.0 * row.m * row.n * row.k / t / 1e12 / row.forward_tflops - 1


def backward_error(row: ShapeGemm, s: ComputeSpec) -> float:
    """dgrad and wgrad as fit times a linear's backward (parcalc.core.timing.kernels.linear_kernels) against the row's
    out.backward(), 4 M N K FLOP."""
    _, dgrad, wgrad = linear_kernels("bwd", row.m, row.k, row.n, 2.0, s)
    return 4.0 * row.m * row.n * row.k / (dgrad.time + wgrad.time) / 1e12 / row.backward_tflops - 1


REFERENCE = "Llama-3.1-8B"  # the model whose twelve forward rows set the MI300X's share; the other six models check it
# Primus-Turbo row 69, Qwen2.5-72B's QKV at micro-batch 4: 448.16 TFLOP/s forward where the same shape at micro-batches
# 1 and 2 runs 625.47 and 619.48 and its backward 590.12: an outlier of that run, listed rather than fitted or hidden.
OUTLIER = ("Qwen2.5-72B", 4, 32768, 10240, 8192)


def test_mi300x_bf16_share_is_the_median_of_llama31_8b_rows() -> None:
    """Primus-Turbo's twelve Llama-3.1-8B forward GEMMs (M = 8192 x micro-batch tokens; QKV 6144, output 4096, gate+up
    28672 and down 4096 outputs) over 1307.4 TFLOP/s and each shape's quantisation: median 0.4900 (0.4766-0.5171), the
    preset's bf16 and fp16 training share; the isolated share stays AMD's max-achievable 0.5415."""
    s = spec("mi300x")
    shares = [share_of(r, s) for r in MI300X_BF16_GEMMS if r.model == REFERENCE]
    assert len(shares) == 12
    assert s.matmul.value == pytest.approx(statistics.median(shares), abs=5e-4)
    fp16 = s.kernels.matmul_share("fp16")
    assert fp16 is not None and fp16.value == s.matmul.value and "Primus-Turbo" in s.matmul.source
    isolated = s.kernels.isolated_share("bf16")
    assert isolated is not None and isolated.value == pytest.approx(708.0 / 1307.4, abs=1e-4)


def test_mi300x_held_out_forward_gemms() -> None:
    """The other six models' 72 forward rows (Llama-2 7B / 70B, Llama-3.1-405B, Qwen2.5 7B / 72B, Mistral-7B), which did
    not set the share: median error +2.5 %, median |error| 4.7 %, every row within 16 % (worst: Llama-2-7B's down
    projection at 4096 tokens, -15.8 %) but the outlier (parcalc +41.6 % there)."""
    s = spec("mi300x")
    held = [r for r in MI300X_BF16_GEMMS if r.model != REFERENCE]
    errors = {r: forward_error(r, s) for r in held}
    assert len(held) == 72
    assert abs(statistics.median(errors.values())) < 0.04
    assert statistics.median(abs(e) for e in errors.values()) < 0.06
    for row, err in errors.items():
        if (row.model, row.micro_batch, row.m, row.n, row.k) == OUTLIER:
            assert err > 0.35, row.quote
        else:
            assert abs(err) < 0.16, (row.quote, err)


def test_mi300x_backward_gemms() -> None:
    """All 84 backward rows (dgrad + wgrad, none of which set anything): parcalc is a median 5.8 % faster (hipBLASLt's
    backward layouts run slower than its forward one; parcalc has one share for the three), every row within 20 %
    (worst Qwen2.5-7B's down projection, +19.6 %)."""
    s = spec("mi300x")
    errors = [backward_error(r, s) for r in MI300X_BF16_GEMMS]
    assert 0.03 < statistics.median(errors) < 0.08
    assert all(abs(e) < 0.20 for e in errors), max(errors, key=abs)


def turbo_quantise_time(elements: int, s: ComputeSpec) -> float:
    """One of Primus-Turbo's tensorwise quantisations of a bf16 tensor (csrc/pytorch/quantization/quantization.cpp
    quantize_fp8_tensorwise: abs-max reduction, scale kernel, cast writing no transpose) as parcalc times those kernels:
    fp8_quantise.cast_plan's current scaling at the preset's memory share and launch floor."""
    plan = cast_plan(elements, 2.0, "current", True)
    return (memory_op("cast", plan.cast_bytes, s).time + memory_op("amax", plan.amax_bytes, s).time
            + plan.tiny_kernels * s.kernels.launch.value)  # fmt: skip


def fp8_gemm_share_of(row: ShapeGemm, s: ComputeSpec) -> float:
    """The FP8 GEMM's own share in a Primus-Turbo forward row: its time less the quantisation of a (M x K) and b (N x K),
    over the FP8 peak and the shape's quantisation."""
    flops = 2.0 * row.m * row.n * row.k
    gemm_time = flops / (row.forward_tflops * 1e12) - turbo_quantise_time(row.m * row.k, s) - turbo_quantise_time(row.n * row.k, s)
    return flops / gemm_time / (s.peak * quantisation(row.m, row.n, 1, s))


def fp8_forward_error(row: ShapeGemm, s: ComputeSpec) -> float:
    """parcalc's FP8 GEMM and the two quantisations against the row's forward time."""
    t = gemm("fwd", row.m, row.k, row.n, 1.0, s).time + turbo_quantise_time(row.m * row.k, s) + turbo_quantise_time(row.n * row.k, s)
    return 2.0 * row.m * row.n * row.k / t / 1e12 / row.forward_tflops - 1


def test_mi300x_fp8_share_is_the_median_of_llama31_8b_rows_without_their_quantisation() -> None:
    """Primus-Turbo's per-tensor FP8 rows of the same run (results_optimized/gemm_fp8_tensorwise_optimized.csv @221d75f1,
    hipBLASLt): Llama-3.1-8B's twelve forward rows, each less its two quantisations (4-20 % of the row, timed at the
    preset's HBM share, AMD's memcopy measurement 3910.62 / 5300 GB/s), over 2614.9 TFLOP/s and the shape's quantisation:
    median 0.4203 (0.3874-0.4427), the preset's fp8 training share; 0.4148 with the quantisations at the generic 0.8 of
    HBM (the share until session 23); with the quantisation left in, 0.3621. AMD's max-achievable 0.4868 (1273 / 2614.9)
    stays the isolated share."""
    s = spec("mi300x", "fp8")
    rows = [r for r in MI300X_FP8_GEMMS if r.model == REFERENCE]
    assert len(rows) == 12
    assert s.kernels.memory.value == pytest.approx(ROCPROF_MEMCOPY_GBPS["mi300x"] / 5300.0, abs=1e-4)
    assert s.matmul.value == pytest.approx(statistics.median(fp8_gemm_share_of(r, s) for r in rows), abs=5e-4)
    assert s.matmul.value == pytest.approx(0.4203, abs=1e-4)
    at_generic_hbm = replace(s, kernels=replace(s.kernels, memory=replace(s.kernels.memory, value=0.8)))
    assert statistics.median(fp8_gemm_share_of(r, at_generic_hbm) for r in rows) == pytest.approx(0.4148, abs=5e-4)
    assert statistics.median(share_of(r, s) for r in rows) == pytest.approx(0.3621, abs=5e-4)
    assert "Primus-Turbo" in s.matmul.source
    isolated = s.kernels.isolated_share("fp8")
    assert isolated is not None and isolated.value == pytest.approx(1273.0 / 2614.9, abs=1e-4)
    # the largest shape, where the quantisation is 4 % of the row, gives 0.4156, the median within 1.2 % (0.4142 at the
    # generic HBM share): the subtraction does not make the share
    largest = max(rows, key=lambda r: r.m * r.n * r.k)
    assert fp8_gemm_share_of(largest, s) == pytest.approx(0.4156, abs=5e-4)
    assert fp8_gemm_share_of(largest, s) == pytest.approx(s.matmul.value, rel=0.012)


def test_mi300x_fp8_held_out_forward_rows() -> None:
    """The other six models' 72 FP8 forward rows (GEMM and quantisations timed as above), which did not set the share:
    median error +0.5 %, median |error| 2.9 %, every row within 12.5 % (worst: Llama-2-7B's down projection at 4,096
    tokens, -12.4 %, as in BF16; -11.8 % with the quantisations at the generic 0.8 of HBM)."""
    s = spec("mi300x", "fp8")
    errors = [fp8_forward_error(r, s) for r in MI300X_FP8_GEMMS if r.model != REFERENCE]
    assert len(errors) == 72
    assert abs(statistics.median(errors)) < 0.01
    assert statistics.median(abs(e) for e in errors) < 0.035
    assert all(abs(e) < 0.125 for e in errors), max(errors, key=abs)


def test_known_gap_mi300x_fp8_backward_rows_run_slower() -> None:
    """Primus-Turbo's FP8 backward calls hipBLASLt in the layouts autograd hands it (dgrad NN, wgrad with a transposed
    A) and they run slower than its forward TN: parcalc, with one FP8 share, times the 84 rows (grad_out quantised, dgrad,
    wgrad) a median 18.8 % fast (9-42 %). Transformer Engine, which the published rows ran, writes transposed FP8 copies on
    this GPU (non_tn_fp8_gemm_supported: compute capability major >= 10; gfx942 reports 9) so that every FP8 GEMM runs TN,
    the forward rows' layout: the gap is Primus-Turbo's, and the transposes are timed (fp8_quantise)."""
    s = spec("mi300x", "fp8")
    errors = []
    for r in MI300X_FP8_GEMMS:
        _, dgrad, wgrad = linear_kernels("bwd", r.m, r.k, r.n, 1.0, s)
        t = dgrad.time + wgrad.time + turbo_quantise_time(r.m * r.n, s)
        errors.append(4.0 * r.m * r.n * r.k / t / 1e12 / r.backward_tflops - 1)
    assert 0.12 < statistics.median(errors) < 0.24
    assert all(0.05 < e < 0.45 for e in errors), (min(errors), max(errors))


def test_mi300x_fp8_over_bf16_at_training_shapes() -> None:
    """The same run's FP8 GEMMs (quantisation out) reach 0.858 of BF16's share (1099 against 641 TFLOP/s: 1.72x for twice
    the matrix-core rate), where AMD's max-achievable tuned shapes reach 0.899 (1273 / 708 TFLOP/s, 1.80x): at training
    shapes FP8 loses more to its one best shape than BF16 does (0.863 against 0.905)."""
    fp8, bf16 = spec("mi300x", "fp8"), spec("mi300x", "bf16")
    assert fp8.matmul.value / bf16.matmul.value == pytest.approx(0.858, abs=0.002)
    iso8, iso16 = fp8.kernels.isolated_share("fp8"), bf16.kernels.isolated_share("bf16")
    assert iso8 is not None and iso16 is not None
    assert fp8.matmul.value / iso8.value == pytest.approx(0.863, abs=0.002)
    assert bf16.matmul.value / iso16.value == pytest.approx(0.905, abs=0.002)


def test_mi325x_fp8_share_is_the_mi300xs_at_its_boards_clock() -> None:
    """No FP8 GEMM of an MI325X at training shapes was found: its share is the MI300X's measured one times the two boards'
    max-achievable FP8 rates (AMD, 'Measuring Max-Achievable FLOPs - Part 2': 1519 TFLOP/s at 1464 MHz, 1273 at 1230 MHz;
    the same 304-CU dies and hipBLASLt kernels, the 1,000 W board holding a higher clock): 0.4203 x 1.193 = 0.5015 (0.4950
    before session 23, from the MI300X's share at the generic HBM share)."""
    mi325x, mi300x = spec("mi325x", "fp8"), spec("mi300x", "fp8")
    assert mi325x.matmul.value == pytest.approx(mi300x.matmul.value * 1519.0 / 1273.0, abs=1e-4)
    assert mi325x.matmul.value == pytest.approx(0.5015, abs=1e-4)
    isolated = mi325x.kernels.isolated_share("fp8")
    assert isolated is not None and isolated.value == pytest.approx(1519.0 / 2614.9, abs=1e-4)


@pytest.mark.parametrize(("n", "ratio"), [(4096, 1.245), (8192, 1.221), (16384, 1.237)])
def test_mi325x_over_mi300x_on_the_same_shapes_checks_the_transfer(n: int, ratio: float) -> None:
    """The transfer checked in BF16, where both GPUs were measured at the same shapes by two labs: HipKittens' MI325X
    torch.matmul n^3 over Primus-Turbo's MI300X rows of that shape (4096^3: Llama-2-7B / Mistral-7B's output projection,
    8192^3: Llama-2-70B / Qwen2.5-72B's, 16384^3: Llama-3.1-405B's at micro-batch 2; their mean) runs 1.22-1.25x, against
    AMD's BF16 max-achievable ratio 843 / 708 = 1.191: within 5 % (the MI325X faster, another lab's hipBLASLt release)."""
    mi300x = [r.forward_tflops for r in MI300X_BF16_GEMMS if r.m == r.n == r.k == n]
    assert mi300x
    measured = MI325X_TORCH_BF16[n] / statistics.mean(mi300x)
    assert measured == pytest.approx(ratio, abs=0.001)
    assert measured / (843.0 / 708.0) == pytest.approx(1.0, abs=0.05)


def test_intensity_cli_gives_the_training_share_and_the_isolated_one() -> None:
    """`intensity --m 16384 --k 4096 --n 28672 --dtype bf16 --gpu mi300x` (Llama-3.1-8B's gate+up at micro-batch 2,
    Primus-Turbo row 31: 622.17 TFLOP/s): 636.0 in training (+2.2 %), 702.9 alone at AMD's max-achievable share."""
    result = CliRunner().invoke(app, ["intensity", "--m", "16384", "--k", "4096", "--n", "28672", "--dtype", "bf16", "--gpu", "mi300x",
                                      "--format", "json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    results = json.loads(result.output)["results"]
    assert results["achieved_train"]["value"] / 1e12 == pytest.approx(622.17, rel=0.03)
    assert results["achieved_alone"]["value"] / 1e12 == pytest.approx(702.9, rel=0.002)


@pytest.mark.parametrize(("name", "data", "dtype", "peak", "reference", "checks"), [
    # HipKittens mi325x_bf16_gemm.json 'tflops_pytorch': 8192^3 785.30 sets the share; 4096^3 752.54 (parcalc -8.7 %) and
    # 16384^3 749.75 (+8.6 %) check it
    ("mi325x", MI325X_TORCH_BF16, "bf16", 1307.4, 8192, {4096: 0.09, 16384: 0.09}),
    # mi355x_bf16_gemm.json 'tflops_pytorch': 8192^3 1521.25; 16384^3 1559.81 (-2.5 %)
    ("mi355x", MI355X_TORCH_BF16, "bf16", 2516.6, 8192, {16384: 0.03}),
    # mi355x_fp8_gemm.json 'tflops_hipblaslt': 8192^3 3233.19; 16384^3 3293.23 (-1.8 %)
    ("mi355x", MI355X_HIPBLASLT_FP8, "fp8", 5000.0, 8192, {16384: 0.03}),
])  # fmt: skip
def test_square_gemm_shares(name: str, data: dict, dtype: str, peak: float, reference: int, checks: dict) -> None:
    s = spec(name, dtype)
    n = reference
    assert s.matmul.value == pytest.approx(data[n] / (peak * quantisation(n, n, 1, s)), abs=5e-4)
    assert "HipKittens" in s.matmul.source
    e = 1.0 if dtype == "fp8" else 2.0
    for size, tolerance in checks.items():
        achieved = 2.0 * size**3 / gemm("g", size, size, size, e, s).time / 1e12
        assert achieved == pytest.approx(data[size], rel=tolerance), (size, achieved)


@pytest.mark.parametrize(("name", "data", "dtype", "small"), [
    ("mi325x", MI325X_TORCH_BF16, "bf16", (1024, 2048)),
    ("mi355x", MI355X_TORCH_BF16, "bf16", (1024, 2048, 4096)),
    ("mi355x", MI355X_HIPBLASLT_FP8, "fp8", (1024, 2048, 4096)),
])  # fmt: skip
def test_known_gap_small_gemms_run_below_the_share(name: str, data: dict, dtype: str, small: tuple[int, ...]) -> None:
    """A known gap, not a fit: a share has no fixed cost per kernel, so GEMMs of tens of microseconds come out too fast
    (MI355X BF16 4096^3: parcalc 1521 TFLOP/s where 1138.5 was measured, +34 %; 1024^3 +568 %). The H200 times them by
    tiles with measured overheads (parcalc.core.timing.gemm_tiles); no AMD sweep with small shapes of one clock was found."""
    s = spec(name, dtype)
    e = 1.0 if dtype == "fp8" else 2.0
    for size in small:
        achieved = 2.0 * size**3 / gemm("g", size, size, size, e, s).time / 1e12
        assert achieved > 1.15 * data[size], (size, achieved, data[size])


def attention_errors(name: str, row: AttentionRow) -> tuple[float, float]:
    """(forward, backward) error of parcalc's fused attention against a causal row, FLOPs as parcalc counts them."""
    s = spec(name)
    flops = 2.0 * row.batch * row.heads * row.seq**2 * 2 * row.head_dim * 0.5
    forward = flash_attention("a", flops, 0.0, False, s, "", row.head_dim).time
    backward = flash_attention("a", 2.5 * flops, 0.0, True, s, "", row.head_dim).time
    return flops / forward / 1e12 / row.forward_tflops - 1, 2.5 * flops / backward / 1e12 / row.backward_tflops - 1


def test_mi300x_attention_shares_are_aiters_rows() -> None:
    """Primus-Turbo rows '48,ROCm,MI300X,4,8192,32,8,128,128,True,...,478.50,14.94,368.02' and
    '69,ROCm,MI300X,4,8192,32,4,64,64,True,...,373.11,7.95,345.60' over 1307.4 TFLOP/s, by head dimension."""
    kernels = load_gpu("mi300x", ()).kernels
    assert kernels is not None
    for head_dim, forward, backward in ((128, 478.50, 368.02), (64, 373.11, 345.60)):
        assert kernels.attention_share(head_dim, False).value == pytest.approx(forward / 1307.4, abs=1e-4)
        assert kernels.attention_share(head_dim, True).value == pytest.approx(backward / 1307.4, abs=1e-4)
        assert "Primus-Turbo" in kernels.attention_share(head_dim, True).source


def test_mi300x_attention_held_out_rows_at_8192_tokens() -> None:
    """The other causal rows at 8,192 tokens (1 to 4 sequences; 28 / 4, 32 / 8, 48 / 8, 64 / 8, 128 / 8 heads; head dims
    128 and 64): forward within 12 %, backward within 18 % (worst: b 1, 28 / 4 heads, +17.3 %)."""
    rows = [r for r in MI300X_CAUSAL_ATTENTION if r.seq == 8192]
    assert len(rows) == 21
    for row in rows:
        forward, backward = attention_errors("mi300x", row)
        assert abs(forward) < 0.12 and abs(backward) < 0.18, (row.source, forward, backward)


def test_known_gap_mi300x_attention_at_4096_tokens_runs_slower() -> None:
    """A known gap: at 4,096 tokens AITER ran 3-14 % slower forward and 9-43 % slower backward than at 8,192 (one
    sequence: 257 against 368 TFLOP/s backward); parcalc's share has no term in the sequence length."""
    for row in (r for r in MI300X_CAUSAL_ATTENTION if r.seq == 4096):
        forward, backward = attention_errors("mi300x", row)
        assert forward > 0.05 and backward > 0.08, (row.source, forward, backward)


def aiter_mi355x_row(row: AiterTableRow) -> AttentionRow:
    """A causal row of AITER's table as an AttentionRow of its MI355X column (forward, backward with bf16 atomics)."""
    forward, backward_a16, _ = row.mi355x
    return AttentionRow("mi355x", row.batch, row.seq, row.heads, row.kv_heads, 128, True, forward, backward_a16, row.line)


def test_mi355x_attention_shares_are_aiters_own_gqa_rows() -> None:
    """AITER's own table (ROCm/aiter op_tests/cpp/mha/README.md @0403bcdf), MI355X column, causal, head dim 128, 8,192
    tokens, nine grouped-query layouts: the forward median 1318.15 TFLOP/s and the bf16-atomic backward's 1066.705 (the
    one gfx950 runs in Primus: NVTE_CK_IS_V3_ATOMIC_FP32=0) over 2516.6 are the head-dim-128 shares, 0.5238 / 0.4239; the
    fp32-atomic backward's 772.605 is the named kernel aiter-v3-a32 (0.3070). The nine rows lie within 5.4 % (forward)
    and 0.4 % (backward) of their medians; HipKittens' GQA build stays the named kernel aiter-gqa-2025-11."""
    rows = [r for r in AITER_CAUSAL if r.seq == 8192]
    assert len(rows) == 9 and {(r.heads, r.kv_heads) for r in rows} == {(32, 8), (64, 8), (64, 4)}
    forward, backward_a16, backward_a32 = (statistics.median(r.mi355x[i] for r in rows) for i in range(3))
    assert (forward, backward_a16, backward_a32) == (1318.15, 1066.705, 772.605)
    assert max(abs(r.mi355x[0] / forward - 1) for r in rows) == pytest.approx(0.0534, abs=1e-4)  # b 1, 32 / 8: 1247.73
    assert max(abs(r.mi355x[1] / backward_a16 - 1) for r in rows) < 0.004
    s = spec("mi355x")
    assert s.kernels.attention_share(128, False).value == pytest.approx(forward / 2516.6, abs=1e-4)
    assert s.kernels.attention_share(128, True).value == pytest.approx(backward_a16 / 2516.6, abs=1e-4)
    assert (s.kernels.attention_share(128, False).value, s.kernels.attention_share(128, True).value) == (0.5238, 0.4239)
    assert s.kernels.attention_share(128, True).source.startswith("ROCm/aiter op_tests/cpp/mha/README.md @0403bcdf")
    gpu = load_gpu("mi355x", ())
    a32_forward, a32_backward = attention_kernel_shares(gpu, "aiter-v3-a32")
    assert (a32_forward.value, a32_backward.value) == pytest.approx((forward / 2516.6, backward_a32 / 2516.6), abs=1e-4)
    gqa_forward, gqa_backward = attention_kernel_shares(gpu, "aiter-gqa-2025-11")
    assert gqa_forward.value == pytest.approx(MI355X_AITER_GQA[8192][0] / 2516.6, abs=1e-4)
    assert gqa_backward.value == pytest.approx(MI355X_AITER_GQA[8192][1] / 2516.6, abs=1e-4)


def test_mi355x_attention_held_out_rows() -> None:
    """Rows that set nothing: AITER's table at 10,240 tokens (nine layouts) forward -2.2 to +9.8 %, backward -2.4 to
    +6.4 %, at 16,384 (two) -5.7 / -5.3 % and -8.3 / -5.7 %; HipKittens' Python aiter.flash_attn_func on MHA (b 16 x 16
    heads, the preset's rates until 2026-11-30) +12.4 % / +3.2 % at 8,192 tokens and +5.7 % / -3.8 % at 16,384 (b 15):
    the same kernels called from Python run 11 % (forward) below the C++ benchmark's loop."""
    long_rows = [aiter_mi355x_row(r) for r in AITER_CAUSAL if r.seq > 8192]
    assert len(long_rows) == 11
    for row in long_rows:
        forward, backward = attention_errors("mi355x", row)
        assert -0.06 < forward < 0.10 and -0.09 < backward < 0.07, (row.source, forward, backward)
    for seq, batch, expected in ((8192, 16, (0.124, 0.032)), (16384, 15, (0.057, -0.038))):
        errors = attention_errors("mi355x", AttentionRow("mi355x", batch, seq, 16, 16, 128, True, *MI355X_AITER_MHA[seq], ""))
        assert errors == pytest.approx(expected, abs=0.001), (seq, errors)


def test_known_gap_mi355x_attention_at_4096_tokens_and_below_runs_slower() -> None:
    """A known gap: at 4,096 tokens AITER's table runs 10-39 % slower forward and 9-16 % backward than the 8,192-token
    share (its median 1166.875 / 967.905 TFLOP/s against 1318.15 / 1066.705), and more below (2,048: +30 % at least);
    parcalc's share has no sequence term (as on the MI300X). HipKittens' MHA rows show the same (4,096: +23 % / +22 %)."""
    for row in (aiter_mi355x_row(r) for r in AITER_CAUSAL if r.seq <= 4096):
        forward, backward = attention_errors("mi355x", row)
        low = 0.09 if row.seq == 4096 else 0.29
        assert forward > low and backward > low, (row.source, forward, backward)
    at_4096 = [r for r in AITER_CAUSAL if r.seq == 4096]
    assert [statistics.median(r.mi355x[i] for r in at_4096) for i in (0, 1)] == [1166.875, 967.905]


def test_mi355x_attention_against_transformer_engine_in_the_held_out_campaign() -> None:
    """A check on the held-out Primus campaign (Qwen3-30B-A3B FP8, 8 MI355X; it sets nothing): one attention call there
    is b 8, s 4096, 32 / 4 heads, causal, 1.0995 TFLOP forward. parcalc times it at 0.834 ms forward and 2.577 ms
    backward: 1309.7 ms a step of 384 calls, against 1578 ms in the baseline's profile (-17 %). The rest is what the
    model leaves out, each measured: (1) the sequence term: AITER's own rates at 4,096 tokens (1166.875 / 967.905, the
    table's medians) give 0.942 + 2.840 ms; (2) Transformer Engine's GQA sum of the per-query-head dK / dV
    (dk_dv_reduce, 216 us) and its 107 us fill, which AITER's benchmark does not time: 3.782 + 0.323 ms x 384 =
    1576 ms, within 0.2 % of the profile. The AITER part of TE's backward (main 2680 + dot(dO, O) 152 + dq shuffle 94
    us = 939.4 TFLOP/s) is within 3.5 % of the table's 967.905 at that length; TE's forward (390 ms / 384 = 1083
    TFLOP/s) 7 % below the table's 1166.875."""
    flops = 4.0 * 8 * 4096**2 * 32 * 128 / 2
    assert flops == pytest.approx(1.0995e12, rel=1e-4)
    s = spec("mi355x")
    forward = flash_attention("a", flops, 0.0, False, s, "", 128).time
    backward = flash_attention("a", 2.5 * flops, 0.0, True, s, "", 128).time
    assert (forward * 1e3, backward * 1e3) == pytest.approx((0.834, 2.577), abs=0.001)
    calls = 48 * 8
    assert (forward + backward) * calls * 1e3 == pytest.approx(1309.7, abs=0.1)
    profile = PRIMUS_MI355X_BASELINE_ATTENTION_MS["attention"]
    assert (forward + backward) * calls * 1e3 / profile - 1 == pytest.approx(-0.170, abs=0.001)
    at_4096 = [r for r in AITER_CAUSAL if r.seq == 4096]
    table_forward, table_backward = (statistics.median(r.mi355x[i] for r in at_4096) for i in (0, 1))
    aiter_call = flops / table_forward / 1e12 + 2.5 * flops / table_backward / 1e12
    te = PRIMUS_MI355X_TE_ATTENTION_BWD_US
    te_extra = (te["dk_dv_reduce"] + te["fill"]) * 1e-6
    assert (aiter_call + te_extra) * calls * 1e3 == pytest.approx(profile, rel=0.002)
    te_aiter_part = 2.5 * flops / ((te["main"] + te["odo"] + te["dq_shuffle"]) * 1e-6) / 1e12
    assert te_aiter_part == pytest.approx(939.4, abs=0.1) and te_aiter_part / table_backward - 1 == pytest.approx(-0.029, abs=0.001)
    te_forward = flops / (PRIMUS_MI355X_BASELINE_ATTENTION_MS["forward"] * 1e-3 / calls) / 1e12
    assert te_forward == pytest.approx(1082.6, abs=0.1) and te_forward / table_forward - 1 == pytest.approx(-0.072, abs=0.001)


@pytest.mark.parametrize(("head_dim", "mi300x_row"), [(128, "48"), (64, "69")])
def test_mi325x_attention_is_the_mi300xs_at_its_boards_clock(head_dim: int, mi300x_row: str) -> None:
    """No fused attention of an MI325X was found: its shares are the MI300X's AITER rows (Primus-Turbo, causal, s 8192,
    b 4: '48,...,4.60,478.50,14.94,368.02' at head dim 128, '69,...,2.95,373.11,7.95,345.60' at 64) times the two boards'
    max-achievable BF16 rates, 843 / 708 = 1.191 (AMD's MAF table: the same dies at 1447 against 1207 MHz under 1,000 W
    and 750 W), over the 1307.4 TFLOP/s peak both are rated at: 0.4358 / 0.3352 at head dim 128, 0.3398 / 0.3147 at 64."""
    kernels = load_gpu("mi325x", ()).kernels
    assert kernels is not None
    (row,) = [r for r in MI300X_CAUSAL_ATTENTION if r.source.split("'")[1].startswith(mi300x_row + ",")]
    assert (row.batch, row.seq, row.head_dim) == (4, 8192, head_dim)
    clock = AMD_MAF_BF16["mi325x"] / AMD_MAF_BF16["mi300x"]
    assert clock == pytest.approx(1.191, abs=5e-4)
    forward, backward = kernels.attention_share(head_dim, False), kernels.attention_share(head_dim, True)
    assert forward.value == pytest.approx(row.forward_tflops * clock / 1307.4, abs=1e-4)
    assert backward.value == pytest.approx(row.backward_tflops * clock / 1307.4, abs=1e-4)
    for share in (forward, backward):  # the source says it is the MI300X's row, transferred by AMD's MAF ratio
        assert share.source.startswith("presets/gpus/mi300x.yaml primus_turbo_attention") and "843 / 708" in share.source
    expected = {128: (0.4358, 0.3352), 64: (0.3398, 0.3147)}[head_dim]
    assert (forward.value, backward.value) == pytest.approx(expected, abs=1e-4)
    # the unlabelled shares (any other head dimension) are the head-dim-128 row, as on the MI300X
    assert (kernels.attention_forward.value, kernels.attention_backward.value) == pytest.approx((0.4358, 0.3352), abs=1e-4)


def test_aiters_own_mi300x_table_runs_above_the_primus_turbo_rows_the_shares_come_from() -> None:
    """A second MI300X measurement of the same kernel family, not entered: AITER's own C++ benchmark table (causal, s 8192,
    nine batch / head layouts) has a median 540.5 / 433.3 TFLOP/s (forward / backward with fp32 atomics), and the very
    shape of the preset's row (b 4, 32 / 8 heads) at 547.09 / 422.835: Primus-Turbo's Python loop, which sets the MI300X's
    shares and, scaled, the MI325X's, runs 12-15 % below it (478.50 / 368.02). So the transferred MI325X shares lean slow
    if anything; the published MI325X rows still come out 2-5 % fast with them."""
    kernels = load_gpu("mi300x", ()).kernels
    assert kernels is not None
    forward, backward = (kernels.attention_share(128, b).value * 1307.4 for b in (False, True))
    same_shape = AITER_README_MI300X_CAUSAL_8192[(4, 32, 8)]
    assert (forward / same_shape[0], backward / same_shape[1]) == pytest.approx((0.875, 0.870), abs=0.002)
    medians = [statistics.median(rates[i] for rates in AITER_README_MI300X_CAUSAL_8192.values()) for i in (0, 1)]
    assert medians == pytest.approx([540.515, 433.285], abs=1e-3)
    assert (forward / medians[0], backward / medians[1]) == pytest.approx((0.885, 0.849), abs=0.002)


def test_mi325x_memory_share_is_amds_memcopy_measurement() -> None:
    """AMD's profiler test suite expects its memcopy workload (a 2 GiB double copy, one element a thread) at 4287.31 GB/s
    on an MI325X: 0.7146 of 6 TB/s, the preset's HBM share. On the MI300X the same test reads 3910.62 GB/s (0.738 of 5.3)
    where BabelStream's Copy reads 4.11-4.15 TB/s: that kernel runs 5-6 % below STREAM's copy there, so the MI325X share
    may sit a few per cent low (no STREAM run of an MI325X was found)."""
    gpu = load_gpu("mi325x", ())
    assert gpu.kernels is not None
    assert gpu.kernels.memory.value == pytest.approx(ROCPROF_MEMCOPY_GBPS["mi325x"] / 6000.0, abs=1e-4)
    assert gpu.kernels.memory.value == pytest.approx(0.7146, abs=1e-4)
    assert "rocprofiler-compute" in gpu.kernels.memory.source
    for babelstream in BABELSTREAM_MI300X_COPY_TBPS:
        assert ROCPROF_MEMCOPY_GBPS["mi300x"] / (babelstream * 1000.0) == pytest.approx(0.947, abs=0.006)  # 0.942 and 0.951


@pytest.mark.parametrize(("name", "bandwidth_gbps", "share"), [
    ("mi300x", 5300.0, 0.7379),  # 3910.62 / 5300: 'MI 300X: 3910.62 GB/s'
    ("mi355x", 8000.0, 0.7113),  # 5690.42 / 8000: the 'MI350' (gfx950) entry, an MI350X's or an MI355X's
])  # fmt: skip
def test_mi300x_and_mi355x_memory_shares_are_amds_memcopy_measurements(name: str, bandwidth_gbps: float, share: float) -> None:
    """AMD's profiler test suite (ROCm/rocm-systems projects/rocprofiler-compute/tests/test_metric_validation.py
    @117d8704) expects its memcopy workload at 3910.62 GB/s on an MI300X and 5690.42 GB/s on the gfx950 family: the
    presets' HBM shares, by the workload the MI325X's share comes from. The MI300X's sits 5-6 % below BabelStream's Copy
    on the same GPU (4.11-4.15 TB/s: 0.776-0.783 of 5.3 TB/s), the copy kernel's one element a thread; no STREAM run of a
    gfx950 board was found."""
    gpu = load_gpu(name, ())
    assert gpu.kernels is not None
    assert gpu.memory_bandwidth.value == pytest.approx(bandwidth_gbps * 1e9)
    assert gpu.kernels.memory.value == pytest.approx(ROCPROF_MEMCOPY_GBPS[name] / bandwidth_gbps, abs=1e-4)
    assert gpu.kernels.memory.value == pytest.approx(share, abs=1e-4)
    assert "rocprofiler-compute" in gpu.kernels.memory.source
    if name == "mi300x":
        assert [tbps / 5.3 for tbps in BABELSTREAM_MI300X_COPY_TBPS] == pytest.approx([0.7755, 0.7830], abs=1e-4)


def test_mi355x_even_routing_sends_each_token_to_one_rank_and_deepep_runs_below_the_fabric() -> None:
    """The published MI355X Qwen3-30B-A3B rows ran Primus's 'even' force-balanced routing, which gives token t the experts
    (t k + j) mod E, j < k (AMD-AGI/Primus @fd1eeabb primus/backends/megatron/core/extensions/primus_turbo.py, the DeepEP
    dispatcher's token_indices: `torch.arange(num_tokens * topk).view(num_tokens, topk) % num_experts`): k = 8 consecutive
    experts starting at a multiple of 8, all inside one rank's 16. The rows now say so (routing="round-robin", parcalc's
    --moe-routing round-robin), so DeepEP sends each token to one rank (D = 1; 5.34 under uniform routing:
    tests/test_moe_distinct_ranks.py) and parcalc times each of the four exchanges of a layer and micro-batch at 0.370 ms (the
    row's 134 MB of per-rank copies over the Infinity Fabric), 1.887 ms under uniform routing before. The campaign measured
    DeepEP's dispatch at 920 us and combine at 536 us a call at the baseline's 80 CUs (tests/amd_kernel_measurements.py),
    612 / 484 at 160 CUs, whose 384 x 2 x (612 + 484) us plus the per-token layout match the R3 profile's DeepEP 876 ms
    within 2 %. So the rows' t_ep went from 2.6x the measured exchange (2.90 s against 1.12 s) to 0.51x (0.57 s) at 80 CUs,
    0.68x at 160: the bytes are now the ones sent, and what is left is DeepEP's rate on the MI355X, below parcalc's fabric
    all-to-all (117 MB leave a GPU in 920 us, 127 GB/s, and the 160 CUs that take it to 612 us say the kernel, not the
    links, sets it; not modelled: docs/step-time.md, session 24), and the get_dispatch_layout parcalc does not count
    (340 us a layer and micro-batch in the baseline, 0.13 s a step)."""
    from test_published_blackwell_amd import RUNS, fit_inputs

    from parcalc.core.fit import estimate
    from parcalc.core.timing.moe import ranks_per_token

    experts, top_k, ep = 128, 8, 8
    per_token = {len({((t * top_k + j) % experts) // (experts // ep) for j in range(top_k)}) for t in range(experts)}
    assert per_token == {1}  # the pattern repeats every E / k = 16 tokens
    assert ranks_per_token(experts, top_k, ep, 1, None, "round-robin") == 1.0
    run = next(r for r in RUNS if r.key == "primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline")
    est = estimate(*fit_inputs(run))
    assert est.ep_comm is not None
    per_micro_batch = next(term.value for term in est.ep_comm.inputs if term.key == "A")
    # one exchange, seconds: 1.887e-3 / 5.34 + latency, x the mean message with DeepEP's metadata, 4,132 / 4,096 B
    # (source index, top-k indices and weights: tests/test_moe_distinct_ranks.py)
    assert per_micro_batch / 48 / 4 == pytest.approx(0.370e-3 * 4132 / 4096, rel=0.003)
    calls = 48 * 8  # MoE layers x micro-batches a step ('384 calls/iter')
    measured = {cus: calls * 2 * (d + c) * 1e-6 for cus, (d, c) in PRIMUS_MI355X_DEEPEP_US.items()}
    r3 = measured[160] + calls * PRIMUS_MI355X_DISPATCH_LAYOUT_US["per-token"] * 1e-6
    assert r3 * 1e3 == pytest.approx(PRIMUS_MI355X_R3_PROFILE_MS["DeepEP"], rel=0.02)
    assert measured[80] == pytest.approx(1.118, abs=0.001)
    assert est.ep_comm.value / measured[80] == pytest.approx(0.513, abs=0.003)  # 0.509 before the messages' metadata
    assert est.ep_comm.value / measured[160] == pytest.approx(0.681, abs=0.003)  # 0.675 before it
    leaving = 32768 * 2048 * 2 * 7 / 8  # bytes a dispatch sends off the GPU under the even routing
    assert leaving / (PRIMUS_MI355X_DEEPEP_US[80][0] * 1e-6) / 1e9 == pytest.approx(127.6, abs=0.1)  # GB/s


# One MoE layer and micro-batch of the Primus MI355X rows: R routed rows a rank (32,768 tokens x top-8, every expert 16,384
# under the even routing), expert width w (SwiGLU: fc1 writes 2w), 48 MoE layers x 8 micro-batches a step.
_R, _W, _CALLS = 32768 * 8, 768, 48 * 8
def test_primus_baseline_eager_act_with_probs_is_timed_by_its_bytes() -> None:
    """The baseline's expert activation ran eagerly (the campaign's prompt: 'SwiGLU split into silu, mul, cat, plus the probs
    multiply', about 1.1 s a step; --expert-activation eager, the row's expert_activation). Its kernels, read from the code
    (parcalc.core.timing.compute.eager_expert_activation, held to the ATen record in
    tests/ground_truth/test_primus_expert_activation.py), move 86 R w bytes a layer and micro-batch where Primus-Turbo's fused
    swiglu_with_probs moves 16 (parcalc's moe.experts.act: 6 forward, 10 backward). Timed as parcalc times memory-bound kernels
    (the MI355X's HBM share, launch floor): 3.04 ms against 0.57 ms, so 1.168 s a step (the prompt's ~1.1 s: +6 %) and a
    saving of 0.951 s where the campaign's README measured 978.4 ms (8894.0 -> 7915.6 ms: -2.8 %); the baseline row's
    predicted step moves by exactly that. The eager path also keeps three more [R, w] bf16 tensors a layer for backward
    (x_linear + 0, silu's output, the product the probs multiply: the muls' saved inputs), 6 R w = 1.21 GB a layer, 54.0 GiB
    over 48 layers: the README's peak drops 277 -> 223 'GB' with the fused kernel (54: the same in GiB; 58.0 GB in units of
    10^9 B); parcalc's memory does not count them (docs/step-time.md, session 24)."""
    from dataclasses import replace

    from test_published_blackwell_amd import RUNS, fit_inputs

    from parcalc.core.fit import estimate
    from parcalc.core.timing.compute import eager_expert_activation

    s = spec("mi355x")
    forward: list = []
    backward: list = []
    eager_expert_activation(forward, backward, s, _R, _W, 2.0, True)
    assert (len(forward), len(backward)) == (5, 9)
    assert sum(k.bytes for k in forward + backward) == pytest.approx(86 * _R * _W, rel=0.01)  # + 4 B a row of probabilities
    eager = sum(k.time for k in forward + backward)
    fused = memory_op("act", 6 * _R * _W, s).time + memory_op("act.bwd", 10 * _R * _W, s).time
    assert (eager * 1e3, fused * 1e3) == pytest.approx((3.045, 0.566), abs=0.002)
    step = eager * _CALLS
    assert step / (PRIMUS_MI355X_BASELINE_PROFILE_MS["elementwise act with probs"] * 1e-3) == pytest.approx(1.063, abs=0.002)
    saved = (eager - fused) * _CALLS
    measured = PRIMUS_MI355X_FUSED_ACT_ROW["baseline"][0] - PRIMUS_MI355X_FUSED_ACT_ROW["+ fused act with probs"][0]
    assert saved * 1e3 / measured == pytest.approx(0.974, abs=0.002)
    run = next(r for r in RUNS if r.key == "primus-mi355x-qwen3-30b-a3b-8gpu-fp8tw-baseline")
    assert run.expert_activation == "eager"
    model, config, training, cluster = fit_inputs(run)
    steps = [estimate(model, config, t, cluster).step.value for t in (training, replace(training, expert_activation="fused"))]
    assert steps[0] - steps[1] == pytest.approx(saved, rel=1e-6)
    kept = 3 * 2 * _R * _W * 48
    assert kept / 2**30 == pytest.approx(54.0, abs=0.05)
    assert PRIMUS_MI355X_FUSED_ACT_ROW["baseline"][1] - PRIMUS_MI355X_FUSED_ACT_ROW["+ fused act with probs"][1] == 54.0


def test_primus_baseline_kernels_the_byte_model_does_not_time() -> None:
    """The baseline's other unfused kernels, timed by their bytes as parcalc times memory-bound kernels, against the campaign's
    per-call times (logs/optimize.md @cbff2387); each misses by more than 25 %, so none is entered (docs/step-time.md):
    - q / k RMSNorm then RoPE, TE's kernels on [T x 32, 128] and [T x 4, 128] (N = 302 MB of q and k): norm and RoPE forward
      4 N, their backwards 2 N + 3 N, 2.72 GB, 478 us by the bytes against 1243.6 us (0.38): TE's RMSNorm and fused_rope on
      128-wide rows run far below the copy rate (the baseline profile: fused_rope 204 ms a step where its 4 N take 81 ms).
      The fused FlyDSL kernel's 5 N (265 us) against 369.9 us is 0.72.
    - the permute: parcalc's moe.permute forward (read T h, write T k h: 1.21 GB) takes 212 us: the HIP kernel's 255 us is
      0.83 (within 25 %), the Triton kernel the baseline ran, 390 us, 0.54: the same bytes, a slower kernel.
    - the tensorwise quantisation of 262144 x 768 (read bf16, write e4m3: 604 MB): 106 us by the bytes, the padded-row kernel
      156.5 us (0.68), the flat kernel 95.3 (1.11)."""
    s = spec("mi355x")
    n = 32768 * (32 + 4) * 128 * 2
    unfused = sum(memory_op("qk", k * n, s).time for k in (2, 2, 2, 3))
    fused = sum(memory_op("qk", k * n, s).time for k in (2, 3))
    assert unfused * 1e6 / PRIMUS_MI355X_QK_NORM_ROPE_US["unfused"] == pytest.approx(0.384, abs=0.002)
    assert fused * 1e6 / PRIMUS_MI355X_QK_NORM_ROPE_US["fused"] == pytest.approx(0.717, abs=0.002)
    rope = sum(memory_op("rope", k * n, s).time for k in (2, 2)) * _CALLS
    assert rope * 1e3 / PRIMUS_MI355X_BASELINE_PROFILE_MS["TE fused_rope"] == pytest.approx(0.40, abs=0.01)
    permute = memory_op("moe.permute", 2 * (32768 + _R) * 2048, s).time * 1e6
    assert (permute / PRIMUS_MI355X_PERMUTE_FWD_US["hip"], permute / PRIMUS_MI355X_PERMUTE_FWD_US["triton"]) == pytest.approx(
        (0.832, 0.544), abs=0.002)
    cast = memory_op("cast", 3 * 262144 * 768, s).time * 1e6
    assert (cast / PRIMUS_MI355X_QUANT_262144X768_US["padded rows"], cast / PRIMUS_MI355X_QUANT_262144X768_US["flat"]) == pytest.approx(
        (0.678, 1.114), abs=0.002)
