"""Arithmetic intensity and roofline: seed 004 question 1.2 and the layer table."""

from __future__ import annotations

from fractions import Fraction

import pytest

from parcalc.core.intensity import (
    arithmetic_intensity,
    layer_intensity,
    machine_terms,
    matmul_bytes,
    matmul_flops,
    roofline,
)
from parcalc.core.layer_ops import transformer_layer_ops
from parcalc.errors import InputError
from parcalc.presets import load_model

FP16 = 2.0


@pytest.mark.parametrize(
    ("m", "k", "n", "flops", "traffic", "intensity"),
    [
        # Seed 004 q1.2 (1): X 4096x4096, W 4096x4096. FLOPs = 2 x 4096^3 = 137,438,953,472.
        # Bytes = 2 x (3 x 4096^2) = 100,663,296. Intensity = 2 x 4096^3 / (6 x 4096^2) = 4096/3.
        pytest.param(4096, 4096, 4096, 137_438_953_472, 100_663_296, Fraction(4096, 3), id="q1.2-square"),
        # (2): X 4096x32, W 32x4096. FLOPs = 2 x 4096 x 32 x 4096 = 1,073,741,824.
        # Bytes = 2 x (4096x32 + 32x4096 + 4096x4096) = 2 x 17,039,360 = 34,078,720. I = 31.5077 (= 1024/32.5).
        pytest.param(4096, 32, 4096, 1_073_741_824, 34_078_720, Fraction(1_073_741_824, 34_078_720), id="q1.2-outer"),
        # (3): X 32x4096, W 4096x32. FLOPs = 2 x 32 x 4096 x 32 = 8,388,608.
        # Bytes = 2 x (32x4096 + 4096x32 + 32x32) = 2 x 263,168 = 526,336. I = 15.9377.
        pytest.param(32, 4096, 32, 8_388_608, 526_336, Fraction(8_388_608, 526_336), id="q1.2-inner"),
    ],
)
def test_seed004_matmul_intensities(m, k, n, flops, traffic, intensity) -> None:
    f = matmul_flops(m, k, n)
    q = matmul_bytes(m, k, n, FP16, "fp16")
    i = arithmetic_intensity(f, q)
    assert f.value == flops
    assert q.value == traffic
    assert i.value == pytest.approx(float(intensity), rel=1e-15)


def test_seed004_rounded_answers() -> None:
    # The answers the homework write-up states: 1365.33, 31.51, 15.94 FLOP/byte.
    rounded = [round(arithmetic_intensity(matmul_flops(*s), matmul_bytes(*s, FP16)).value, 2)
               for s in [(4096, 4096, 4096), (4096, 32, 4096), (32, 4096, 32)]]  # fmt: skip
    assert rounded == [1365.33, 31.51, 15.94]


def test_batched_matmul_scales_flops_and_bytes() -> None:
    assert matmul_flops(64, 64, 64, batch=8).value == 8 * 2 * 64**3
    assert matmul_bytes(64, 64, 64, 2, batch=8).value == 8 * 2 * 3 * 64**2


def test_roofline_on_a100() -> None:
    # A100 80GB SXM: FP16 peak 2 x 1.41e9 x 108 x 1024 = 311.86944 TFLOP/s, HBM 2039 GB/s.
    # Ridge = 311.86944e12 / 2039e9 = 152.9521 FLOP/B.
    machine = machine_terms("A100", 311.86944e12, "", 2039e9, "")
    f, q = matmul_flops(32, 4096, 32), matmul_bytes(32, 4096, 32, FP16)
    i = arithmetic_intensity(f, q)
    roof = roofline(i, f, q, machine.peak, machine.bandwidth)
    assert roof.ridge.value == pytest.approx(311.86944e12 / 2039e9)
    assert not roof.compute_bound  # 15.94 < 152.95
    # attainable = I x BW = (8,388,608 / 526,336) x 2039e9
    assert roof.attainable.value == pytest.approx(8_388_608 / 526_336 * 2039e9)
    # memory-bound: time = bytes / BW = 526,336 / 2039e9 s
    assert roof.time_lower_bound.value == pytest.approx(526_336 / 2039e9)
    big_f, big_q = matmul_flops(4096, 4096, 4096), matmul_bytes(4096, 4096, 4096, FP16)
    big = roofline(arithmetic_intensity(big_f, big_q), big_f, big_q, machine.peak, machine.bandwidth)
    assert big.compute_bound
    assert big.attainable.value == 311.86944e12
    assert big.time_lower_bound.value == pytest.approx(2 * 4096**3 / 311.86944e12)


def test_non_positive_dimensions_are_rejected() -> None:
    with pytest.raises(InputError, match="--k"):
        matmul_flops(4, 0, 4)


def test_homework_layer_table_matches_seed004() -> None:
    # Seed 004 question 2's layer with B = 128, L = 4096, D = 4096, n_H = 32, H = 128, FP16.
    model = load_model("homework-7b")
    ops = {op.key: op for op in transformer_layer_ops(model, 128, 4096, FP16)}
    b, l, d, heads, h = 128, 4096, 4096, 32, 128  # noqa: E741 - the sequence length as the roofline notes write it
    assert list(ops) == ["q_proj", "k_proj", "v_proj", "scores", "softmax", "context", "out_proj", "mlp_up",
                         "activation", "mlp_down"]  # fmt: skip
    # Q = xW^Q: (B L) x D times D x D -> 2 B L D^2 FLOPs; reads x and W^Q, writes Q.
    assert ops["q_proj"].flops == 2 * b * l * d * d
    assert ops["q_proj"].bytes == 2 * (b * l * d + d * d + b * l * d)
    # Scores: n_H products per sequence of (L x H)(H x L): 2 B n_H L^2 H FLOPs.
    assert ops["scores"].flops == 2 * b * heads * l * l * h
    assert ops["scores"].bytes == 2 * (2 * b * heads * l * h + b * heads * l * l)
    # Z_i = score_i V_i: (L x L)(L x H) per head: 2 B n_H L^2 H FLOPs.
    assert ops["context"].flops == 2 * b * heads * l * l * h
    # MLP: D -> 4D and back: 2 B L D (4D) each.
    assert ops["mlp_up"].flops == ops["mlp_down"].flops == 2 * b * l * d * 4 * d
    # ReLU reads and writes B L 4D elements once.
    assert ops["activation"].bytes == 2 * 2 * b * l * 4 * d
    matmul_flops_total = sum(op.flops for op in ops.values() if op.kind == "matmul")
    # 24 B L D^2 (projections and MLP) + 4 B L^2 D (scores and context)
    assert matmul_flops_total == 24 * b * l * d * d + 4 * b * l * l * d


def test_layer_result_has_a_row_per_op_and_verdicts() -> None:
    model = load_model("homework-7b")
    machine = machine_terms("A100", 311.86944e12, "", 2039e9, "")
    result = layer_intensity(model, 128, 4096, "fp16", FP16, machine)
    table = result.tables[0]
    records = {r["op"]: r for r in table.records()}
    assert records["relu(A)"]["bound"] == "memory"  # 0.25 FLOP/B
    assert records["A = Out·W^1"]["bound"] == "compute"  # 3256 FLOP/B
    assert "memory-bound" in result.verdicts[0]


def test_gqa_and_swiglu_shapes() -> None:
    # LLaMA-3 8B shape: D 4096, 32 heads, 8 KV heads of 128, SwiGLU with 14336 (HF config.json).
    from parcalc.core.model import Mlp, Norm, Position, TransformerModel

    model = TransformerModel("t", "t", 32, 4096, 32, 8, 128, 14336, Mlp.SWIGLU, 128256, 8192, False,
                             Position.ROPE, Norm.RMSNORM, False, "test")  # fmt: skip
    ops = {op.key: op for op in transformer_layer_ops(model, 1, 8192, 2)}
    assert ops["k_proj"].flops == 2 * 8192 * 4096 * 1024  # K width = 8 x 128
    assert "mlp_gate" in ops and ops["mlp_gate"].flops == 2 * 8192 * 4096 * 14336
    assert ops["activation"].bytes == 2 * 3 * 8192 * 14336  # reads gate and up, writes one
