"""Hopper's FP8 GEMMs and fused attention as Megatron-LM with Transformer Engine runs them (issues #32, #31).

- FP8 GEMM share (presets/gpus/h100-sxm5.yaml, h200.yaml, h100-sxm5-96gb-hbm2e.yaml `fp8_tiles`): the 16-bit training share
  (0.496, mpt_7b_h100) times what the GH100 tile model (h200.yaml gemm_tiles, measured by shape on an H200) gives FP8 over
  BF16 with the main loop at twice the work per clock (NVIDIA H100 whitepaper sec. 4.1: 4,096 FP8 against 2,048 BF16 dense
  FMA per SM per clock) and the same fixed costs, on the 12 GEMMs of Transformer Engine's GEMM profiling layer
  (NVIDIA/TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst @8f2e6357: M 15,872, hidden 4096, 16384).
- The check of that mechanism: S. Bekman's mamf table (ml-engineering compute/accelerator/README.md), each dtype's best
  shape alone: H200 FP8 1453.4 TFLOP/s at 1280x4096x12032, H100 FP8 1402.6 at 1024x9216x14336, H100 BF16 794.5 at
  2048x2048x13312 ('H200 is the same').
- Attention: Transformer Engine runs cuDNN's fused attention on Hopper (TransformerEngine dot_product_attention/utils.py
  @a0b36d0c: 'Disabling FlashAttention to give FusedAttention preference on Hopper+'); the H100 presets time it, as the
  `cudnn-fused` attention kernel, at the H200's sustained measurement (the same die).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parcalc.core.timing.attention_kernels import with_attention_kernel
from parcalc.core.timing.gemm_tiles import TiledGemm, tiled_gemm_choice
from parcalc.presets import load_gpu

TE_LAYER_TOKENS = 15872  # gemm_profiling.rst: M = 31 x 512
TE_LAYER_LINEARS = ((4096, 12288), (4096, 4096), (4096, 16384), (16384, 4096))  # QKV, out, up, down: (in, out)


def _die() -> tuple[TiledGemm, TiledGemm, float]:
    h200 = load_gpu("h200", ())
    assert h200.kernels is not None
    bf16 = h200.kernels.tiled("bf16")
    assert bf16 is not None
    bandwidth = h200.kernels.memory.value * h200.memory_bandwidth.value
    return bf16, replace(bf16, sm_rate=2 * bf16.sm_rate), bandwidth  # FP8: twice the main loop's work per clock


def _rate(m: int, k: int, n: int, model: TiledGemm, element_bytes: float, bandwidth: float) -> float:
    return 2.0 * m * k * n / tiled_gemm_choice(m, k, n, 1, model, 132, bandwidth, element_bytes).time


def fp8_over_bf16_share() -> float:
    """The tile model's FP8 share of the FP8 peak over its BF16 share of the BF16 peak on TE's profiling layer."""
    bf16, fp8, bandwidth = _die()
    flops = t_bf16 = t_fp8 = 0.0
    for k, n in TE_LAYER_LINEARS:
        for m_, k_, n_ in ((TE_LAYER_TOKENS, k, n), (TE_LAYER_TOKENS, n, k), (k, TE_LAYER_TOKENS, n)):  # Fprop, Dgrad, Wgrad
            flops += 2.0 * m_ * k_ * n_
            t_bf16 += tiled_gemm_choice(m_, k_, n_, 1, bf16, 132, bandwidth, 2).time
            t_fp8 += tiled_gemm_choice(m_, k_, n_, 1, fp8, 132, bandwidth, 1).time
    return (flops / t_fp8 / 1979e12) / (flops / t_bf16 / 989.5e12)


def test_te_layer_ratio_is_the_presets_factor() -> None:
    """0.6515 / 0.6773 = 0.9618 (fp8_tiles): the fixed tile costs weigh twice as much against a main loop twice as fast.
    Transformer Engine measured the same layer's 12 GEMMs on a B300 (gemm_profiling.rst @8f2e6357, '--pre-quantize'):
    FP8 current scaling 0.6308 over BF16 0.6560 of their peaks = 0.9616 (presets/gpus/b200.yaml te_gemm_b300)."""
    assert fp8_over_bf16_share() == pytest.approx(0.9618, abs=0.0005)
    assert fp8_over_bf16_share() == pytest.approx(0.6308 / 0.6560, abs=0.002)


@pytest.mark.parametrize("preset", ["h100-sxm5", "h100-sxm5-96gb-hbm2e", "h200"])
def test_fp8_share_is_the_bf16_share_times_the_tile_ratio(preset: str) -> None:
    kernels = load_gpu(preset, ()).kernels
    assert kernels is not None
    fp8, bf16 = kernels.matmul_share("fp8"), kernels.matmul_share("bf16")
    assert fp8 is not None and bf16 is not None
    assert fp8.value == pytest.approx(bf16.value * fp8_over_bf16_share(), abs=0.0005)
    assert "gemm_profiling" in fp8.source and "whitepaper" in fp8.source


@pytest.mark.parametrize(("label", "fp8_shape", "fp8_measured", "within"), [
    ("H200 SXM", (1280, 4096, 12032), 1453.4, 0.08),  # mamf: 'NVIDIA H200 SXM | 1453.4 | 1979 | 73.4% | 1280x4096x12032'
    ("H100 SXM", (1024, 9216, 14336), 1402.6, 0.03),  # mamf: H100 SXM FP8 1402.6 of 1979 at 1024x9216x14336
])  # fmt: skip
def test_doubled_main_loop_gives_mamfs_fp8_over_bf16(label: str, fp8_shape: tuple[int, int, int], fp8_measured: float, within: float) -> None:
    """Each dtype's best shape, measured FP8 over BF16 (794.5 TFLOP/s at 2048x2048x13312) against the tile model's same
    ratio at one clock: 1.83 against 1.70 (H200), 1.77 against 1.80 (H100): within 8 % either way, so no sign that an FP8
    loop at the board limit holds a lower clock than a BF16 one (the model's absolute rates are at the 16384^3 loop's clock)."""
    bf16, fp8, bandwidth = _die()
    m, n, k = fp8_shape  # mamf prints MxNxK
    modelled = _rate(m, k, n, fp8, 1, bandwidth) / _rate(2048, 13312, 2048, bf16, 2, bandwidth)
    assert fp8_measured / 794.5 == pytest.approx(modelled, rel=within), label


def test_cudnn_attention_on_the_h100_is_the_h200s_sustained_rate() -> None:
    """Runs whose stack ran cuDNN's fused attention (Megatron-Bridge's H100 rows) take the H100 preset's cudnn-fused entry:
    the H200's sustained cuDNN rate at head dim 128 and s 8192 (566.1 / 492.7 TFLOP/s of 989.5), the sequence of those
    rows; the H200 itself times attention by its tiles, which give that row back. The default stays FlashAttention-2's
    paper rate (0.37 / 0.33), which the 2024 NeMo long-context runs are tested at."""
    from parcalc.core.timing.attention_tiles import attention_shape
    from parcalc.core.timing.kernels import compute_spec, flash_attention

    h100 = load_gpu("h100-sxm5", ())
    h200 = load_gpu("h200", ())
    run = with_attention_kernel(h100, "cudnn-fused")
    assert run.kernels is not None and h200.kernels is not None and h100.kernels is not None
    spec = compute_spec(h200, "bf16", 989.5e12)
    flops = 4 * 32 * 8192**2 * 128 / 2  # attention-sdpa.json's row: b 1, 32 heads (8 KV), s 8192, d 128, causal
    for backward, k in ((False, 1.0), (True, 2.5)):
        tiled = flash_attention("a", k * flops, 0.0, backward, spec, "", 128, attention_shape(32, 8192, 8192, 256, 0.5, True)).time
        assert k * flops / tiled / 989.5e12 == pytest.approx(run.kernels.attention_share(128, backward).value, abs=0.0005)
    assert run.kernels.attention_share(128, False).value == pytest.approx(566.1 / 989.5, abs=0.0005)
    assert run.kernels.attention_share(128, True).value == pytest.approx(492.7 / 989.5, abs=0.0005)
    assert h100.kernels.attention_share(128, False).value == 0.37


def test_h200_fp8_gemms_take_the_tiles_with_a_doubled_main_loop() -> None:
    """The H200, whose BF16 GEMMs are timed by its measured tiles, times FP8 ones by the same tiles, overheads and clocks
    with twice the main loop's rate (fp8_main_loop): a large FP8 GEMM at the sweep's clock is 1.9x its BF16 twin, not 2x."""
    kernels = load_gpu("h200", ()).kernels
    assert kernels is not None
    bf16, fp8 = kernels.tiled("bf16"), kernels.tiled("fp8")
    assert bf16 is not None and fp8 is not None
    assert fp8.sm_rate == pytest.approx(2 * bf16.sm_rate, rel=1e-4)
    assert replace(fp8, sm_rate=bf16.sm_rate, source=bf16.source) == bf16
    _, _, bandwidth = _die()
    speedup = _rate(16384, 16384, 16384, fp8, 1, bandwidth) / _rate(16384, 16384, 16384, bf16, 2, bandwidth)
    assert 1.85 < speedup < 2.0
