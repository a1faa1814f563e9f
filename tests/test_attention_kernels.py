"""Fused attention of an older software generation (parcalc.core.timing.attention_kernels), held to its sources.

llm-foundry's 2023 MPT benchmarks (tests/published_step_runs.py, the H100 and A100 tables) ran `attn_impl: triton`
(scripts/train/benchmarking/submit_benchmarks.py @061f2c7: '--attn_impl' default 'triton'; every mpt-*.yaml at that
commit says 'attn_impl: triton'), Tri Dao's Triton FlashAttention on the pre-MLIR Triton compiler
(llmfoundry/models/layers/flash_attn_triton.py @v0.3.0), not FlashAttention-2. Its rates come from the FlashAttention-2
paper's forward + backward figures (Dao 2023, arXiv:2307.08691, Fig. 4 and 7 = Dao-AILab/flash-attention
assets/flash2_{a100,h100}_fwd_bwd_benchmark.png), panel (d), causal, head dim 128, 2k tokens: A100 'FlashAttention
Triton' 68 and 'FlashAttention' 69 TFLOP/s; H100 'FlashAttention' 108 (no Triton bar: 108 x 68 / 69).
"""

from __future__ import annotations

import pytest
import step_time_cases

from parcalc.core.timing.attention_kernels import attention_kernel_shares, with_attention_kernel
from parcalc.core.timing.kernels import FLASH_BACKWARD_FLOPS, compute_spec, flash_attention
from parcalc.presets import load_gpu

H100_TRITON = 108.0 * 68.0 / 69.0  # TFLOP/s forward + backward: the H100 panel's FlashAttention x the A100 panel's ratio
A100_TRITON = 68.0  # TFLOP/s forward + backward, the A100 panel's 'FlashAttention Triton' bar


@pytest.mark.parametrize(("preset", "tflops"), [("h100-sxm5", H100_TRITON), ("a100-sxm4-80gb", A100_TRITON),
                                                ("a100-sxm4-40gb", A100_TRITON)])  # fmt: skip
def test_triton_attention_runs_at_the_figures_rate(preset: str, tflops: float) -> None:
    # one forward and one backward pass at the preset's shares: 3.5 F over their time is the figure's forward + backward
    # rate (one share for both passes, as the figure gives only their sum)
    gpu = with_attention_kernel(load_gpu(preset, ()), "flash-attn-triton")
    peak = gpu.dtypes["bf16"].dense_peak.value  # type: ignore[union-attr]
    spec = compute_spec(gpu, "bf16", peak, peak)
    forward_flops = 4 * 2048**2 * 128 * 32 / 2  # one causal MPT-7B layer's attention for one sequence (32 heads of 128)
    forward = flash_attention("attn", forward_flops, 0.0, False, spec, "", head_dim=128)
    backward = flash_attention("attn.bwd", FLASH_BACKWARD_FLOPS * forward_flops, 0.0, True, spec, "", head_dim=128)
    rate = (1 + FLASH_BACKWARD_FLOPS) * forward_flops / (forward.time + backward.time)
    assert rate / 1e12 == pytest.approx(tflops, rel=5e-4)
    share = attention_kernel_shares(load_gpu(preset, ()), "flash-attn-triton")[0]
    assert "arXiv:2307.08691" in share.source and "flash_attn_triton" in share.source


def test_triton_attention_is_slower_than_the_presets_flashattention2() -> None:
    # the H100's FlashAttention-2 shares (0.37 / 0.33: 336 TFLOP/s over a forward and backward pass) against the Triton
    # kernel's 106.4: an MPT attention pass takes 3.16 x as long; FlashAttention-2's own bar at this shape is 265
    h100 = load_gpu("h100-sxm5", ())
    rates = h100.kernels
    assert rates is not None
    fa2 = (1 + FLASH_BACKWARD_FLOPS) / (1 / rates.attention_forward.value + FLASH_BACKWARD_FLOPS / rates.attention_backward.value)
    triton = with_attention_kernel(h100, "flash-attn-triton").kernels
    assert triton is not None and triton.attention_by_head_dim == ()
    assert fa2 / triton.attention_forward.value == pytest.approx(3.165, abs=0.002)


def test_a_preset_without_the_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="h200 preset gives no rate for attention kernel 'flash-attn-triton'"):
        with_attention_kernel(load_gpu("h200", ()), "flash-attn-triton")


def test_the_mpt_runs_and_only_they_ran_triton_attention() -> None:
    cases = (step_time_cases.CALIBRATION, *step_time_cases.CASES, *step_time_cases.KNOWN_GAPS)
    for case in cases:
        assert case.attention_kernel == ("flash-attn-triton" if case.key.startswith("mpt-") else None), case.key
    assert not step_time_cases.RUN_ATTENTION_KERNELS  # the lead's call (docs/step-time.md): off by default


def test_run_attention_moves_the_calibration_runs_attention_by_the_kernels_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    # MPT-7B on 8 H100 (the H100 share's calibration run): its attention term 3.165 x as long, the step -11.6 % (measured
    # 2026-11-29: 0.069 -> 0.217 s of attention; the share re-derived under it: 0.582)
    _, before = step_time_cases.error(step_time_cases.CALIBRATION)
    monkeypatch.setattr(step_time_cases, "RUN_ATTENTION_KERNELS", True)
    err, after = step_time_cases.error(step_time_cases.CALIBRATION)
    assert before.attention is not None and after.attention is not None
    assert after.attention.value / before.attention.value == pytest.approx(3.165, abs=0.01)
    assert err == pytest.approx(-0.116, abs=0.01)


def test_gh100_tiles_with_the_runs_attention_leave_mpt_too_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    # The issue #32 experiment (tests/published_families.py --gh100-tiles --run-attention), measured 2026-11-29: the
    # Triton attention closes about half of what the GH100 tiles leave on the MPT H100 rows (+46.2 / +35.6 / +19.8 ->
    # +12.4 / +21.0 / +9.1 %; MPT-7B +34.6 -> +14.6 %): no sourced mechanism found for the rest (docs/step-time.md)
    import modern_cases
    import published_families

    monkeypatch.setattr(step_time_cases, "load_gpu", step_time_cases.load_gpu)
    monkeypatch.setattr(modern_cases, "load_gpu", modern_cases.load_gpu)
    monkeypatch.setattr(step_time_cases, "RUN_ATTENTION_KERNELS", True)
    published_families.gh100_tiles()
    err, _ = step_time_cases.error(step_time_cases.CALIBRATION)
    assert err == pytest.approx(0.146, abs=0.015)
    by_key = {case.key: case for case in step_time_cases.CASES}
    errors = [step_time_cases.error(by_key[f"mpt-{size}-64xh100-80gb-seq2048"])[0] for size in ("1b", "13b", "70b")]
    assert errors == pytest.approx([0.124, 0.210, 0.091], abs=0.015)
