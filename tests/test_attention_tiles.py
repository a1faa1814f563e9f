"""Fused attention by its tiles (parcalc.core.timing.attention_tiles) against the shared H200's measurements
(tests/fixtures/h200: copies of ../shared/measurements/h200-2026-11-28, one H200 SXM, torch 2.11, cuDNN's SDPA kernels).

What sets the numbers: attention-sdpa.json's two GQA head-dim-128 rows (their ratio: each tile's fixed cost; the longer:
the blocks' rate) and its head-dim-64 row (the blocks' rate at the same fixed cost in seconds). What checks them: the MHA
head-dim-128 row, the b1 step's own cuDNN kernels in its profiler trace (a shape none of the rows has: 2,048 tokens), and
the three steps' attention kernel time (tests/test_step_parts.py)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from parcalc.core.timing.attention_tiles import WAVES_EXACT, AttentionShape, _makespan_blocks, attention_shape
from parcalc.core.timing.kernels import compute_spec, flash_attention
from parcalc.presets import load_gpu

FIXTURES = Path(__file__).parent / "fixtures" / "h200"
ROWS = {(r["b"], r["heads"], r["kv_heads"], r["s"], r["d"]): r for r in json.loads((FIXTURES / "attention-sdpa.json").read_text())["rows"]}
H200 = load_gpu("h200", ())
PEAK = 989.5e12  # the H200's dense BF16 peak, the shares' denominator
TILE, SMS = 128, 132


def _seconds(r: dict, backward: bool) -> float:
    return r["t_fwd_bwd_s"] - r["t_fwd_s"] if backward else r["t_fwd_s"]


def _span(r: dict, overhead_blocks: float) -> float:
    shape = AttentionShape(r["b"] * r["heads"], r["s"], r["s"], 2 * r["d"], 0.5, True)
    return _makespan_blocks(shape, TILE, round(overhead_blocks, 6), SMS)


def _root(f, lo: float, hi: float) -> float:  # type: ignore[no-untyped-def]
    f_lo = f(lo)
    for _ in range(100):
        mid = (lo + hi) / 2
        if (f(mid) <= 0) == (f_lo <= 0):
            lo, f_lo = mid, f(mid)
        else:
            hi = mid
    return (lo + hi) / 2


@pytest.mark.parametrize("backward", [False, True])
def test_the_preset_numbers_come_from_the_sdpa_rows(backward: bool) -> None:
    """h200.yaml's attention_tiles and attention_by_head_dim, re-derived: t_0 2.998 / 18.786 us; the blocks at 0.6121 /
    0.5676 (d 128) and 0.5083 / 0.5697 (d 64) of the peak."""
    flops = 2.5 if backward else 1.0
    short, long, d64 = ROWS[(2, 24, 8, 4096, 128)], ROWS[(1, 32, 8, 8192, 128)], ROWS[(4, 32, 8, 4096, 64)]
    overhead = _root(lambda c: _span(short, c) / _span(long, c) - _seconds(short, backward) / _seconds(long, backward), 0.0, 40.0)
    block = _seconds(long, backward) / _span(long, overhead)
    t0 = overhead * block
    block64 = _root(lambda u: u * _span(d64, t0 / u) - _seconds(d64, backward), 1e-8, 1e-4)
    tiles = H200.kernels.attention_tiles
    assert tiles is not None and tiles.tile == TILE
    assert (tiles.backward_overhead if backward else tiles.forward_overhead) == pytest.approx(t0, rel=1e-3)
    for d, u in ((128, block), (64, block64)):
        share = 2 * TILE**2 * 2 * d * flops / u * SMS / PEAK
        assert H200.kernels.attention_share(d, backward).value == pytest.approx(share, abs=1e-4)


def test_the_b1_steps_cudnn_kernels() -> None:
    """trace-llama1b-b1-s2048.json.gz: 16 fprop and 16 bprop kernels (cudnn_generated_fort_native_sdpa_sm90_flash_*), b 1 x
    32 heads (8 KV), s 2048, d 64, medians 56.3 / 145.3 us, a shape no sweep row has. By the tiles: 49.4 / 158.6 us (-12 /
    +9 %), the pair +3.2 %; at the d64 row's one rate (before the tiles) 41.2 / 116.1 us (-27 / -20 %)."""
    with gzip.open(FIXTURES / "trace-llama1b-b1-s2048.json.gz") as file:
        trace = json.loads(file.read())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel" and "sdpa_sm90_flash" in e["name"]]
    measured = {kind: statistics.median(e["dur"] for e in kernels if f"flash_{kind}" in e["name"]) * 1e-6 for kind in ("fprop", "bprop")}
    assert measured["fprop"] == pytest.approx(56.3e-6, abs=0.1e-6) and measured["bprop"] == pytest.approx(145.3e-6, abs=0.1e-6)
    spec = compute_spec(H200, "bf16", PEAK)
    shape = attention_shape(32, 2048, 2048, 128, 0.5, True)
    flops = 4 * 32 * 2048**2 * 64 / 2
    forward = flash_attention("f", flops, 0.0, False, spec, "", 64, shape).time
    backward = flash_attention("b", 2.5 * flops, 0.0, True, spec, "", 64, shape).time
    assert forward == pytest.approx(49.4e-6, rel=0.005) and backward == pytest.approx(158.6e-6, rel=0.005)
    assert abs(forward / measured["fprop"] - 1) < 0.15 and abs(backward / measured["bprop"] - 1) < 0.10
    assert (forward + backward) / (measured["fprop"] + measured["bprop"]) == pytest.approx(1.032, abs=0.005)


def test_many_tiles_approach_the_blocks_rate() -> None:
    """Past WAVES_EXACT tiles an SM the schedule is fluid: every block at the blocks' rate plus each tile's fixed cost
    (s 131,072, 32 heads: 32,768 tiles of 1 to 1,024 blocks); without a fixed cost it is exactly the blocks' rate."""
    shape = AttentionShape(32, 131072, 131072, 256, 0.5, True)
    rows = 131072 // TILE
    assert 32 * rows > WAVES_EXACT * SMS
    work = 32 * rows * (rows + 1) / 2
    assert _makespan_blocks(shape, TILE, 0.0, SMS) == pytest.approx(work / SMS, rel=1e-12)
    assert _makespan_blocks(shape, TILE, 2.0, SMS) == pytest.approx((work + 2.0 * 32 * rows) / SMS, rel=1e-12)


def test_one_wave_of_the_causal_triangle_waits_for_its_longest_tile() -> None:
    """b 1 x 1 head, s 1,024: 8 tiles of 1..8 blocks on 132 SMs: the pass lasts as long as its longest tile (8 blocks and
    the fixed cost), not the mean."""
    shape = AttentionShape(1, 1024, 1024, 256, 0.5, True)
    assert _makespan_blocks(shape, TILE, 1.5, SMS) == pytest.approx(9.5)


def test_a_window_or_context_parallel_pass_spreads_its_share_evenly() -> None:
    """Not the causal square (a window, a context-parallel rank's balanced chunks of s_k = s x cp): every tile walks
    share x s_k / tile blocks."""
    shape = attention_shape(8, 1024, 4096, 256, 0.5, True)
    assert not shape.triangle
    assert _makespan_blocks(shape, TILE, 0.0, SMS) == pytest.approx(16.0)  # 64 tiles of 16 blocks, one wave
    assert attention_shape(8, 4096, 4096, 256, 0.5, True).triangle
    assert not attention_shape(8, 4096, 4096, 256, 0.3, True).triangle  # a window skips blocks left of the band


def test_a_preset_without_tiles_keeps_one_rate_at_every_shape() -> None:
    """The H100 preset has no attention_tiles: the shape changes nothing (FlashAttention-2's one rate, fa2)."""
    h100 = load_gpu("h100-sxm5", ())
    spec = compute_spec(h100, "bf16", 989.4e12)
    flops = 4 * 32 * 2048**2 * 64 / 2
    shape = attention_shape(32, 2048, 2048, 128, 0.5, True)
    assert flash_attention("f", flops, 0.0, False, spec, "", 64, shape).time == flash_attention("f", flops, 0.0, False, spec, "", 64).time


def test_presets_show_lists_the_attention_the_model_uses() -> None:
    """`presets show h200`: the rates by head dimension and the tiles' fixed costs, each with its source (before, only the
    fallback FlashAttention-2 shares 37 / 33 % were listed, which the H200 never uses at head dim 64 or 128)."""
    from typer.testing import CliRunner

    from parcalc.cli import app

    result = CliRunner().invoke(app, ["presets", "show", "h200", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["field"]: row for row in json.loads(result.stdout)["tables"]["fields"]["rows"]}
    assert rows["kernels.attention.d64.fwd"]["value"] == 0.5083 and rows["kernels.attention.d128.bwd"]["value"] == 0.5676
    assert rows["kernels.attention.tile"]["value"] == 128
    assert rows["kernels.attention.t0.bwd"]["value"] == pytest.approx(18.786e-6) and "attention-sdpa.json" in rows["kernels.attention.t0.bwd"]["source"]
