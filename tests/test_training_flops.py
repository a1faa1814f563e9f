"""Training FLOPs: the exact matmul count, 6ND, Narayanan et al.'s formula, MFU and HFU."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.flops import flops_utilization, korthikanti_selective_flops, narayanan_flops, six_nd, training_flops
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.errors import InputError
from parcalc.presets import load_model

V, SEQ = 51200, 2048  # Narayanan et al. 2021 sec. 5.1 and Korthikanti et al. 2022: V = 51,200, s = 2048


def gpt(layers: int, hidden: int, heads: int, vocab: int = V, seq: int = SEQ, **changes) -> TransformerModel:
    fields = dict(
        key="gpt", name="GPT", layers=layers, hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads,
        ffn_hidden=4 * hidden, mlp=Mlp.GELU, vocab=vocab, max_seq_len=seq, tied_embeddings=True,
        position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True, source="test",
    )  # fmt: skip
    fields.update(changes)
    return TransformerModel(**fields)


# Narayanan et al. 2021, Table 1: parameters (billions), heads, hidden, layers, GPUs, batch size.
NARAYANAN_TABLE_1 = [
    (1.7, 24, 2304, 24, 32, 512),
    (3.6, 32, 3072, 30, 64, 512),
    (7.5, 32, 4096, 36, 128, 512),
    (18.4, 48, 6144, 40, 256, 1024),
    (39.1, 64, 8192, 48, 512, 1536),
    (76.1, 80, 10240, 60, 1024, 1792),
    (145.6, 96, 12288, 80, 1536, 2304),
    (310.1, 128, 16384, 96, 1920, 2160),
    (529.6, 128, 20480, 105, 2520, 2520),
    (1008.0, 160, 25600, 128, 3072, 3072),
]


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers", "gpus", "batch"), NARAYANAN_TABLE_1,
                         ids=[f"{row[0]}B" for row in NARAYANAN_TABLE_1])  # fmt: skip
def test_narayanan_table_1_parameter_counts(billions, heads, hidden, layers, gpus, batch) -> None:
    model = gpt(layers, hidden, heads)
    # sec. 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = 12 l h^2 + 13 l h + (V + s) h;
    # parcalc also counts the final LayerNorm's 2h, which the formula leaves out.
    assert model.total_params - 2 * hidden == 12 * layers * hidden**2 + 13 * layers * hidden + (V + SEQ) * hidden
    assert round(model.total_params / 1e9, 1) == billions  # the table prints 0.1 B


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers", "gpus", "batch"), NARAYANAN_TABLE_1,
                         ids=[f"{row[0]}B" for row in NARAYANAN_TABLE_1])  # fmt: skip
def test_narayanan_flops_equal_the_exact_count_with_full_recomputation(billions, heads, hidden, layers, gpus, batch) -> None:
    # F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) = 4 x (24 B s h^2 + 4 B s^2 h) x l + 3 x 2 B s h V:
    # every layer's forward four times (forward, recomputation, two backward matmuls), the LM head three.
    counted = training_flops(gpt(layers, hidden, heads), batch, SEQ, recompute="full")
    assert counted.hardware.value == pytest.approx(counted.narayanan.value, rel=1e-12)


# FLOPs per iteration that Table 1's configurations imply (sec. 5.1, with full recomputation):
# F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) = 96 B s l h^2 + 16 B s^2 l h + 6 B s h V, s = 2048,
# V = 51,200, B the table's batch size; each value below is that integer sum, by hand:
NARAYANAN_TABLE_1_FLOPS = [
    # 1.7B, B = 512, l = 24, h = 2304:
    # 12,824,703,626,379,264 + 2,473,901,162,496,000 + 168,225,279,049,728
    ("1.7B", 512, 24, 2304, 15_466_830_067_924_992),
    # 3.6B, B = 512, l = 30, h = 3072
    ("3.6B", 512, 30, 3072, 32_655_495_344_947_200),
    # 7.5B, B = 512, l = 36, h = 4096
    ("7.5B", 512, 36, 4096, 67_184_558_503_624_704),
    # 18.4B, B = 1024, l = 40, h = 6144
    ("18.4B", 1024, 40, 6144, 324_839_715_310_141_440),
    # 39.1B, B = 1536, l = 48, h = 8192
    ("39.1B", 1536, 48, 8192, 1_021_226_399_878_348_800),
    # 76.1B, B = 1792, l = 60, h = 10240
    ("76.1B", 1792, 60, 10240, 2_302_047_495_074_611_200),
    # 145.6B, B = 2304, l = 80, h = 12288
    ("145.6B", 2304, 80, 12288, 5_641_682_123_048_878_080),
    # 310.1B, B = 2160, l = 96, h = 16384
    ("310.1B", 2160, 96, 16384, 11_194_006_936_108_400_640),
    # 529.6B, B = 2520, l = 105, h = 20480
    ("529.6B", 2520, 105, 20480, 22_215_941_676_859_392_000),
    # 1008.0B, B = 3072, l = 128, h = 25600
    ("1T", 3072, 128, 25600, 51_390_513_775_273_574_400),
]


@pytest.mark.parametrize(("name", "batch", "layers", "hidden", "expected"), NARAYANAN_TABLE_1_FLOPS,
                         ids=[row[0] for row in NARAYANAN_TABLE_1_FLOPS])  # fmt: skip
def test_narayanan_flops_per_iteration(name: str, batch: int, layers: int, hidden: int, expected: int) -> None:
    assert narayanan_flops(batch, SEQ, layers, hidden, V).value == pytest.approx(expected, rel=1e-14)
    # the exact count with full recomputation of the same GPT layer gives the same number
    heads = next(row[1] for row in NARAYANAN_TABLE_1 if row[2] == hidden)
    assert training_flops(gpt(layers, hidden, heads), batch, SEQ, recompute="full").hardware.value == pytest.approx(expected, rel=1e-14)


def test_gpt3_six_nd() -> None:
    # 6 x 175e9 parameters x 300e9 tokens = 3.15e23 FLOP (Brown et al. 2020; Kaplan et al. 2020 C = 6ND)
    derivation = six_nd(175e9, 300e9)
    assert derivation.value == pytest.approx(3.15e23, rel=1e-15)
    assert derivation.formula_text() == "6 × N × D"
    assert "approximation" in derivation.label


def test_seed004_homework_layer() -> None:
    # Seed 004's layer (B = 128, L = 4096, D = 4096, MLP 4D, ReLU): Q, K, V, Out 4 x 2BLD^2, scores and
    # score x V 2 x 2BL^2D, MLP 2 x 8BLD^2: 24 B L D^2 + 4 B L^2 D = 246,290,604,621,824 FLOP forward;
    # 32 layers, no vocabulary, x 3 for forward + backward: 23,643,898,043,695,104 FLOP.
    counted = training_flops(load_model("homework-7b"), 128, 4096)
    assert counted.layer_forward.value == 246_290_604_621_824
    assert counted.model.value == 23_643_898_043_695_104
    assert counted.head_op is None


# Korthikanti et al. 2022 Table 5 (s = 2048, V = 51200, A100 peak 312 TFLOP/s, selective
# recomputation + sequence parallelism) with the shapes of their Table 3: model, batch, heads, layers,
# hidden, GPUs, seconds per iteration, MFU and HFU in percent (printed to 0.1 %, times to 0.01 s).
KORTHIKANTI_TABLE_5 = [
    ("22B", 4, 64, 48, 6144, 8, 1.10, 41.5, 43.7),
    ("175B", 64, 96, 96, 12288, 64, 13.75, 51.4, 52.8),
    ("530B", 280, 128, 105, 20480, 280, 37.83, 56.0, 57.0),
    ("1T", 512, 160, 128, 25600, 512, 71.49, 56.3, 57.0),
]


@pytest.mark.parametrize(("name", "batch", "heads", "layers", "hidden", "gpus", "seconds", "mfu", "hfu"), KORTHIKANTI_TABLE_5,
                         ids=[row[0] for row in KORTHIKANTI_TABLE_5])  # fmt: skip
def test_korthikanti_table_5_mfu_and_hfu(name, batch, heads, layers, hidden, gpus, seconds, mfu, hfu) -> None:
    counted = training_flops(gpt(layers, hidden, heads), batch, SEQ, recompute="selective")
    # their eq. (7): model FLOPs = 72 B L s h^2 (1 + s/(6h) + V/(12 h L)), which is the exact count
    eq7 = 72 * batch * layers * SEQ * hidden**2 * (1 + SEQ / (6 * hidden) + V / (12 * hidden * layers))
    assert counted.model.value == pytest.approx(eq7, rel=1e-12)
    got_mfu = flops_utilization(counted.model, seconds, gpus, 312e12).value * 100
    assert got_mfu == pytest.approx(mfu, abs=0.25)  # 0.05 % of printing, and 1.10 s could be 1.095..1.105 s
    assert counted.korthikanti_selective is not None
    got_hfu = flops_utilization(counted.korthikanti_selective, seconds, gpus, 312e12, hardware=True).value * 100
    assert got_hfu == pytest.approx(hfu, abs=0.25)
    # the exact count of what selective recomputation runs again (Q K^T and score x V forward, 4 B s^2 h
    # per layer) is a third of what their eq. (8) adds (12 B s^2 h per layer)
    eq8_extra = counted.korthikanti_selective.value - counted.model.value
    assert counted.recomputed.value == pytest.approx(eq8_extra / 3, rel=1e-12)


def test_korthikanti_selective_overheads() -> None:
    # sec. 5: selective recomputation costs 2.7 % more FLOPs for GPT-3 and 1.6 % for MT-NLG, by eq. (8):
    # (s/(6h)) / (1 + s/(6h) + V/(12hL)) = 0.027778 / 1.031395 = 2.69 % and 0.016667 / 1.018651 = 1.64 %
    for layers, hidden, printed in ((96, 12288, 2.7), (105, 20480, 1.6)):
        eq8 = korthikanti_selective_flops(1, SEQ, layers, hidden, V).value
        model = training_flops(gpt(layers, hidden, 128), 1, SEQ).model.value
        assert (eq8 / model - 1) * 100 == pytest.approx(printed, abs=0.05)


@settings(max_examples=40, deadline=None)
@given(
    layers=st.integers(1, 64),
    heads=st.sampled_from([1, 2, 4, 8, 16]),
    head_dim=st.sampled_from([32, 64, 128]),
    seq=st.integers(1, 4096),
    batch=st.integers(1, 64),
    vocab=st.integers(0, 100_000),
)
def test_exact_count_reduces_to_the_closed_forms(layers, heads, head_dim, seq, batch, vocab) -> None:
    h = heads * head_dim
    counted = training_flops(gpt(layers, h, heads, vocab=vocab, seq=seq), batch, seq, recompute="full")
    B, s, L = batch, seq, layers
    forward = L * (24 * B * s * h * h + 4 * B * s * s * h) + 2 * B * s * h * vocab
    assert counted.forward.value == forward
    assert counted.model.value == 3 * forward
    if vocab:
        assert counted.hardware.value == pytest.approx(counted.narayanan.value, rel=1e-12)
    assert counted.hardware_per_token.value == pytest.approx(counted.hardware.value / (B * s), rel=1e-15)


def test_causal_halves_the_attention_core() -> None:
    model = gpt(2, 1024, 16, vocab=0, seq=4096)
    full, causal = training_flops(model, 2, 4096), training_flops(model, 2, 4096, causal=True)
    # Q K^T and score x V: 2 x 2 B s^2 h = 4 x 2 x 4096^2 x 1024 per layer; half of that is saved
    assert full.forward.value - causal.forward.value == 2 * (4 * 2 * 4096**2 * 1024) / 2
    assert causal.layer_forward.assumptions and "half" in causal.layer_forward.assumptions[0]


def test_gqa_and_swiglu_differ_from_the_closed_form() -> None:
    # LLaMA-style layer: 4 K/V heads of 128 and a SwiGLU MLP of 11008: the exact count follows the
    # layer; Narayanan's closed form keeps describing a 4h GELU MHA layer.
    model = gpt(32, 4096, 32, vocab=32000, seq=4096, kv_heads=8, ffn_hidden=11008, mlp=Mlp.SWIGLU)
    counted = training_flops(model, 1, 4096)
    B, s, h, kv, f = 1, 4096, 4096, 8 * 128, 11008
    layer = 2 * B * s * (h * h + 2 * h * kv + h * h) + 4 * B * s * s * h + 2 * B * s * 3 * h * f
    assert counted.layer_forward.value == layer
    assert counted.narayanan.value != pytest.approx(counted.forward.value * 4 - 2 * B * s * h * 32000, rel=1e-3)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda: six_nd(0, 1e9), "parameters", id="6nd-zero-params"),
        pytest.param(lambda: training_flops(gpt(2, 64, 4), 1, 16, recompute="half"), "--recompute", id="bad-recompute"),
        pytest.param(lambda: training_flops(gpt(2, 64, 4), 0, 16), "--batch", id="zero-batch"),
        pytest.param(lambda: flops_utilization(six_nd(1e9, 1e9), 0.0, 8, 312e12), "--step-time", id="zero-time"),
    ],
)
def test_bad_input(call, message: str) -> None:
    with pytest.raises(InputError, match=message):
        call()
