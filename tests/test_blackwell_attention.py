"""Fused attention on Blackwell (presets/gpus/b200.yaml, gb200.yaml `kernels.attention_by_head_dim`) held to cuDNN's own
published SDPA tables, and the rows of those tables that did not set a number.

Sources (NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training; each table times cuDNN's SDPA graphs run directly, as
Transformer Engine's fused attention runs them, and counts FLOPs as parcalc does: 4 b s^2 heads d forward, halved under
the causal mask, 2.5 x that backward):
- B200: artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv @0b1577c (cuDNN 9.13.1, torch nv25.09, 2025-10-10), its
  bf16 rows (batch 1, 128 query heads, 8 KV heads, head dim 128, causal). Each row is the median of 10 single calls with a
  sleep after each: the GPU at rest between calls, at its highest clock, not at its board power limit.
- GB200: artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv @b372d39 (cuDNN 9.17.0, torch nv25.11, 2025-12-19),
  backend cudnn_fe, the same shapes; and results/llama3.1/gb200/llama3.1_20260424_100750.csv @3929da2 (cuDNN 9.22, batch
  2, 64 query heads) as a later check.
- H200, the check of what such a table says against a sustained measurement: results/h200_919_only_cudnn/
  llama3.1_20260227_034703.csv, deleted by @50c8aeb (cuDNN 9.19, batch 1, 64 query heads, 8 KV heads, head dim 128).
"""

from __future__ import annotations

import pytest

from parcalc.core.timing.kernels import ComputeSpec, compute_spec, flash_attention, sixteen_bit_peak
from parcalc.presets import load_gpu

CUDNN_B200 = "NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/sdpa_fp8_benchmark_results_NVIDIA_B200.csv @0b1577c"
CUDNN_GB200 = "NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/sdpa_bf16_benchmark_results_NVIDIA_GB200.csv @b372d39"


def spec_of(name: str) -> ComputeSpec:
    gpu = load_gpu(name, ())
    peak = sixteen_bit_peak(gpu)
    assert peak is not None
    return compute_spec(gpu, "bf16", peak, peak)


def causal_flops(batch: int, seq: int, heads: int, head_dim: int) -> float:
    """The forward FLOPs of causal attention as parcalc.core.timing.compute counts them (and cuDNN's tables)."""
    return 2.0 * batch * heads * seq * seq * (head_dim + head_dim) * 0.5


def modelled_ms(name: str, seq: int, backward: bool, batch: int = 1, heads: int = 128) -> float:
    flops = causal_flops(batch, seq, heads, 128) * (2.5 if backward else 1.0)
    return flash_attention("attn", flops, 0.0, backward, spec_of(name), "", 128).time * 1e3


# (GPU, rated dense BF16 TFLOP/s, published forward / backward TFLOP/s of the s 8192 row that set the shares)
SET_FROM = (("b200", 2250.0, 1384.231, 994.850), ("gb200", 2500.0, 1584.0, 1211.0))


@pytest.mark.parametrize(("name", "rated", "forward", "backward"), SET_FROM)
def test_shares_are_the_tables_s8192_row(name: str, rated: float, forward: float, backward: float) -> None:
    """CUDNN_B200 row '1,8192,8192,128,8,128,True,bf16,1.589,5.526,1384.231,994.850'; CUDNN_GB200 row
    '1,8192,8192,128,8,128,True,cudnn_fe,1.389,4.542,1584.000,1211.000': each share is the row's rate over the GPU's
    rated dense BF16 peak (2.25 / 2.5 PFLOP/s), at head dimension 128."""
    kernels = load_gpu(name, ()).kernels
    assert kernels is not None
    assert kernels.attention_share(128, False).value == pytest.approx(forward / rated, abs=1e-4)
    assert kernels.attention_share(128, True).value == pytest.approx(backward / rated, abs=1e-4)
    assert "cudnn-frontend" in kernels.attention_share(128, True).source


@pytest.mark.parametrize(("name", "published_fwd_ms", "published_bwd_ms"), [("b200", 1.589, 5.526), ("gb200", 1.389, 4.542)])
def test_the_set_row_comes_back_as_a_kernel_time(name: str, published_fwd_ms: float, published_bwd_ms: float) -> None:
    """The kernel model gives the row's own times back (FLOPs counted as the table counts them): within 0.5 %."""
    assert modelled_ms(name, 8192, False) == pytest.approx(published_fwd_ms, rel=0.005)
    assert modelled_ms(name, 8192, True) == pytest.approx(published_bwd_ms, rel=0.005)


# Rows the shares did not use: (GPU, sequence, published forward ms, backward ms, tolerance). One share per head dimension
# has no sequence term: shorter sequences run slower than the s 8192 row (the causal diagonal's blocks are a larger part),
# longer ones faster. B200 s 4096: modelled -18 / -16 % of the time; s 16384: +7 / +16 %. GB200 s 4096: -13 / -13 %;
# s 16384: +5 / +8 %.
OTHER_ROWS = (
    ("b200", 4096, 0.482, 1.650, 0.25),  # '1,4096,4096,128,8,128,True,bf16,0.482,1.650,1141.140,832.907'
    ("b200", 16384, 5.962, 19.094, 0.20),  # '1,16384,16384,128,8,128,True,bf16,5.962,19.094,1475.253,1151.690'
    ("gb200", 4096, 0.397, 1.304, 0.20),  # '1,4096,4096,128,8,128,True,cudnn_fe,0.397,1.304,1386.000,1054.000'
    ("gb200", 16384, 5.273, 16.863, 0.10),  # '1,16384,16384,128,8,128,True,cudnn_fe,5.273,16.863,1668.000,1304.000'
)


@pytest.mark.parametrize(("name", "seq", "fwd_ms", "bwd_ms", "rel"), OTHER_ROWS)
def test_other_sequence_lengths(name: str, seq: int, fwd_ms: float, bwd_ms: float, rel: float) -> None:
    assert modelled_ms(name, seq, False) == pytest.approx(fwd_ms, rel=rel)
    assert modelled_ms(name, seq, True) == pytest.approx(bwd_ms, rel=rel)


def test_gb200_against_cudnn_922() -> None:
    """results/llama3.1/gb200/llama3.1_20260424_100750.csv @3929da2 (cuDNN 9.22, four releases after the share's 9.17):
    'llama3.1,llama3.1,cudnn,bfloat16,top_left,2,8192,8192,64,8,128,128,fwd,False,1.397,1574.000' and '... bwd,False,
    4.127,1332.000': the forward within 2 % (modelled -0.6 % of the time); the backward grew 10 % faster between releases
    (modelled +10.0 %), within 12 %."""
    assert modelled_ms("gb200", 8192, False, batch=2, heads=64) == pytest.approx(1.397, rel=0.02)
    assert modelled_ms("gb200", 8192, True, batch=2, heads=64) == pytest.approx(4.127, rel=0.12)


def test_h200_cudnn_table_runs_faster_than_the_sustained_measurement() -> None:
    """What a table of single calls at rest says against a sustained loop on one GPU. cuDNN 9.19's H200 table
    (llama3.1_20260227_034703.csv, deleted by @50c8aeb): 'llama3.1,llama3.1,cudnn,bfloat16,top_left,1,8192,8192,64,8,128,
    128,both,False,1.708,5.083,644.000,541.000'; the H200 preset's head-dim-128 shares are the shared H200's torch SDPA
    (cuDNN) loop, best of 3 batches of >= 0.25 s at the 700 W limit (../shared/measurements/h200-2026-11-28/
    attention-sdpa.json: 566.1 / 492.7 TFLOP/s at s 8192). The table is 1.138x / 1.098x faster: the Blackwell shares,
    set from such tables, are an upper bound on attention inside a power-limited training step (presets' notes)."""
    from parcalc.core.timing.attention_tiles import attention_shape
    from parcalc.core.timing.kernels import compute_spec, flash_attention

    spec = compute_spec(load_gpu("h200", ()), "bf16", 989.5e12)
    flops = 4 * 64 * 8192**2 * 128 / 2  # the table's shape: b 1, 64 heads (8 KV), s 8192, d 128, causal
    shape = attention_shape(64, 8192, 8192, 256, 0.5, True)  # the H200 preset times attention by its tiles
    sustained_fwd = flops / flash_attention("f", flops, 0.0, False, spec, "", 128, shape).time / 1e12
    sustained_bwd = 2.5 * flops / flash_attention("b", 2.5 * flops, 0.0, True, spec, "", 128, shape).time / 1e12
    assert 644.0 / sustained_fwd == pytest.approx(1.138, abs=0.01)
    assert 541.0 / sustained_bwd == pytest.approx(1.098, abs=0.01)


def test_gb200_memory_share_against_cudnn_rmsnorm() -> None:
    """benchmark/norms/results/gb200/all_models_20260226_180237.csv @3929da2: 'all_models,llama3-8b,rms_norm,cudnn,
    bfloat16,16384,4096,...,6424.600,6187.300' GB/s (forward / backward): the GB200's HBM share (0.819, the B200's CCCL
    copy rate) within 3 % of the forward norm's 6424.6 / 8000 = 0.803 (+1.9 %) and the backward's 0.773 within 6 % (+5.9 %)."""
    spec = spec_of("gb200")
    rate = spec.bandwidth * spec.kernels.memory.value / 1e9
    assert rate == pytest.approx(6424.6, rel=0.03)
    assert rate == pytest.approx(6187.3, rel=0.06)
