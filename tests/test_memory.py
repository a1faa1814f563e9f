"""Per-GPU memory: ZeRO's model states, Korthikanti's activations, pipeline stages, reserve, fits."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.activations import (
    ActivationConfig,
    Recompute,
    embedding_activations,
    korthikanti_per_layer,
    layer_activations,
    output_activations,
)
from parcalc.core.choices import Optimizer, Precision
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown, stage_parameters
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.core.model_states import model_states, state_bytes
from parcalc.core.pipeline import Schedule
from parcalc.core.training_setup import DEFAULT_RESERVE_BYTES, TrainingSetup
from parcalc.errors import InputError

GB = 1e9


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048, **changes) -> TransformerModel:
    """The GPT layer of Korthikanti et al. and Narayanan et al.: MHA, 4h GELU MLP, LayerNorm, biases."""
    fields = dict(
        key="gpt", name="GPT", layers=layers, hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads,
        ffn_hidden=4 * hidden, mlp=Mlp.GELU, vocab=vocab, max_seq_len=seq, tied_embeddings=True,
        position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True, source="test",
    )  # fmt: skip
    fields.update(changes)
    return TransformerModel(**fields)


# ---------------------------------------------------------------------------------------------
# ZeRO (Rajbhandari et al. 2020)

MIXED_ADAM = state_bytes(Precision.MIXED_FP16, Optimizer.ADAM)


@pytest.mark.parametrize(
    ("zero", "expected", "printed"),
    [
        # ZeRO Figure 1: Psi = 7.5e9, N_d = 64, K = 12, GB = 1e9 bytes.
        # baseline (2 + 2 + K) Psi = 16 x 7.5e9 = 120e9                          -> "120GB"
        pytest.param(0, 120e9, 120, id="baseline"),
        # P_os: 2 Psi + 2 Psi + K Psi / N_d = 30e9 + 90e9 / 64 = 31.40625e9      -> "31.4GB"
        pytest.param(1, 31.40625e9, 31.4, id="p_os"),
        # P_os+g: 2 Psi + (2 + K) Psi / N_d = 15e9 + 105e9 / 64 = 16.640625e9    -> "16.6GB"
        pytest.param(2, 16.640625e9, 16.6, id="p_os+g"),
        # P_os+g+p: (2 + 2 + K) Psi / N_d = 120e9 / 64 = 1.875e9                 -> "1.9GB"
        pytest.param(3, 1.875e9, 1.9, id="p_os+g+p"),
    ],
)
def test_zero_figure_1(zero: int, expected: float, printed: float) -> None:
    states = model_states(7.5e9, MIXED_ADAM, Layout(dp=64, zero=zero))
    assert states.total == pytest.approx(expected, rel=1e-15)
    assert abs(states.total / GB - printed) <= 0.05 + 1e-12  # the figure rounds to 0.1 GB


@pytest.mark.parametrize(
    ("dp", "p_os", "p_os_g", "p_os_g_p"),
    [
        # ZeRO Table 1, 7.5B column (GB): 4 Psi + 12 Psi / N_d, 2 Psi + 14 Psi / N_d, 16 Psi / N_d
        pytest.param(4, 52.5, 41.25, 30.0, id="Nd=4"),  # printed 52.5, 41.3, 30
        pytest.param(16, 35.625, 21.5625, 7.5, id="Nd=16"),  # printed 35.6, 21.6, 7.5
        pytest.param(256, 30.3515625, 15.41015625, 0.46875, id="Nd=256"),  # printed 30.4, 15.4, 0.47
        pytest.param(1024, 30.087890625, 15.1025390625, 0.1171875, id="Nd=1024"),  # printed 30.1, 15.1, 0.12
    ],
)
def test_zero_table_1(dp: int, p_os: float, p_os_g: float, p_os_g_p: float) -> None:
    for stage, expected in ((1, p_os), (2, p_os_g), (3, p_os_g_p)):
        assert model_states(7.5e9, MIXED_ADAM, Layout(dp=dp, zero=stage)).total / GB == pytest.approx(expected, rel=1e-14)


def test_zero_shards_exactly_the_named_states() -> None:
    # Psi = 1e9, N_d = 8, mixed Adam: 2 / 2 / 12 bytes; each stage shards one more kind.
    z1, z2, z3 = (model_states(1e9, MIXED_ADAM, Layout(dp=8, zero=z)) for z in (1, 2, 3))
    assert (z1.weights.value, z1.gradients.value, z1.optimizer.value) == (2e9, 2e9, 1.5e9)
    assert (z2.weights.value, z2.gradients.value, z2.optimizer.value) == (2e9, 0.25e9, 1.5e9)
    assert (z3.weights.value, z3.gradients.value, z3.optimizer.value) == (0.25e9, 0.25e9, 1.5e9)
    assert z2.gradients.formula_text() == "g × Ψ / N_d"
    assert "ZeRO-2" in z2.gradients.label and "replicated" in z2.weights.label


@pytest.mark.parametrize(
    ("precision", "optimizer", "fp32_grads", "weight", "grad", "optim"),
    [
        # ZeRO sec. 3.1: fp16 params 2, fp16 grads 2, K = 12 (fp32 params 4, momentum 4, variance 4)
        pytest.param(Precision.MIXED_FP16, Optimizer.ADAM, False, 2, 2, 12, id="mixed-adam-zero"),
        pytest.param(Precision.MIXED_BF16, Optimizer.ADAMW, False, 2, 2, 12, id="mixed-bf16-adamw"),
        # Megatron-LM theoretical_memory_usage.py: 18 bytes per parameter (fp32 main_grad)
        pytest.param(Precision.MIXED_BF16, Optimizer.ADAM, True, 2, 4, 12, id="megatron-18-bytes"),
        # fp32: weights, grads, exp_avg, exp_avg_sq all 4 bytes
        pytest.param(Precision.FP32, Optimizer.ADAMW, False, 4, 4, 8, id="fp32-adamw"),
        # pure bf16: AdamW states are zeros_like(param), bf16: 2 + 2 + 2 x 2
        pytest.param(Precision.BF16, Optimizer.ADAMW, False, 2, 2, 4, id="bf16-adamw"),
        # SGD with momentum: one momentum buffer; plain SGD: none (mixed keeps the fp32 master)
        pytest.param(Precision.FP32, Optimizer.SGD_MOMENTUM, False, 4, 4, 4, id="fp32-sgd-momentum"),
        pytest.param(Precision.FP32, Optimizer.SGD, False, 4, 4, 0, id="fp32-sgd"),
        pytest.param(Precision.MIXED_FP16, Optimizer.SGD, False, 2, 2, 4, id="mixed-sgd-master-only"),
    ],
)
def test_bytes_per_parameter(precision, optimizer, fp32_grads, weight, grad, optim) -> None:
    per = state_bytes(precision, optimizer, fp32_grads=fp32_grads)
    assert (per.weight, per.gradient, per.optimizer) == (weight, grad, optim)


def test_megatron_distributed_optimizer_is_6_plus_12_over_d() -> None:
    # megatron/training/theoretical_memory_usage.py: with the distributed optimizer (ZeRO-1 with
    # fp32 grads) 6 + 12 / d bytes per parameter; d = 8: 7.5 bytes.
    per = state_bytes(Precision.MIXED_BF16, Optimizer.ADAM, fp32_grads=True)
    assert model_states(1e9, per, Layout(dp=8, zero=1)).total == pytest.approx(7.5e9)


@given(params=st.floats(1e3, 1e13), dp=st.integers(2, 4096))
def test_each_zero_stage_saves_memory(params: float, dp: int) -> None:
    totals = [model_states(params, MIXED_ADAM, Layout(dp=dp, zero=z)).total for z in range(4)]
    assert totals == sorted(totals, reverse=True)
    assert totals[3] == pytest.approx(totals[0] / dp, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Activations (Korthikanti et al. 2022)

# Table 3 of Korthikanti et al.: heads, hidden, layers, TP, PP, micro-batch; s = 2048, V = 51200.
KORTHIKANTI_MODELS = {
    "22B": (64, 6144, 48, 8, 1, 4),
    "175B": (96, 12288, 96, 8, 8, 1),
    "530B": (128, 20480, 105, 8, 35, 1),
    "1T": (160, 25600, 128, 8, 64, 1),
}
CASES = {  # (sequence parallel, recompute)
    "tp": (False, Recompute.NONE),
    "tp+sp": (True, Recompute.NONE),
    "tp+selective": (False, Recompute.SELECTIVE),
    "tp+sp+selective": (True, Recompute.SELECTIVE),
    "full": (False, Recompute.FULL),
}


@pytest.mark.parametrize(
    ("name", "case", "expected"),
    [
        # 22B: sbh = 2048 x 4 x 6144 = 50,331,648; 5as/(ht) = 5 x 64 x 2048 / (6144 x 8) = 13 1/3
        # eq. (2): sbh (10 + 24/8 + 13 1/3) = 26 1/3 sbh = 1,325,400,064
        pytest.param("22B", "tp", 1_325_400_064, id="22B-tp"),
        # eq. (4): sbh/8 (34 + 106 2/3) = 6,291,456 x 140 2/3 = 884,998,144
        pytest.param("22B", "tp+sp", 884_998_144, id="22B-tp+sp"),
        # sbh (10 + 3) = 654,311,424; eq. (6): 34 sbh / 8 = 213,909,504; full: 2 sbh = 100,663,296
        pytest.param("22B", "tp+selective", 654_311_424, id="22B-tp+selective"),
        pytest.param("22B", "tp+sp+selective", 213_909_504, id="22B-tp+sp+selective"),
        pytest.param("22B", "full", 100_663_296, id="22B-full"),
        # 175B: sbh = 2048 x 12288 = 25,165,824; 5as/h = 5 x 96 x 2048 / 12288 = 80
        # eq. (2): sbh (10 + 3 + 10) = 23 sbh = 578,813,952; eq. (4): sbh/8 x 114 = 358,612,992
        pytest.param("175B", "tp", 578_813_952, id="175B-tp"),
        pytest.param("175B", "tp+sp", 358_612_992, id="175B-tp+sp"),
        # 13 sbh = 327,155,712; 4.25 sbh = 106,954,752; 2 sbh = 50,331,648
        pytest.param("175B", "tp+selective", 327_155_712, id="175B-tp+selective"),
        pytest.param("175B", "tp+sp+selective", 106_954_752, id="175B-tp+sp+selective"),
        pytest.param("175B", "full", 50_331_648, id="175B-full"),
        # 530B: sbh = 2048 x 20480 = 41,943,040; 5as/h = 5 x 128 x 2048 / 20480 = 64
        # eq. (2): sbh (13 + 8) = 880,803,840; eq. (4): sbh/8 x 98 = 513,802,240
        pytest.param("530B", "tp", 880_803_840, id="530B-tp"),
        pytest.param("530B", "tp+sp", 513_802_240, id="530B-tp+sp"),
        # 13 sbh = 545,259,520; 4.25 sbh = 178,257,920; 2 sbh = 83,886,080
        pytest.param("530B", "tp+selective", 545_259_520, id="530B-tp+selective"),
        pytest.param("530B", "tp+sp+selective", 178_257_920, id="530B-tp+sp+selective"),
        pytest.param("530B", "full", 83_886_080, id="530B-full"),
        # 1T: sbh = 2048 x 25600 = 52,428,800; 5as/h = 5 x 160 x 2048 / 25600 = 64
        # 21 sbh = 1,101,004,800; sbh/8 x 98 = 642,252,800; 13 sbh = 681,574,400;
        # 4.25 sbh = 222,822,400; 2 sbh = 104,857,600
        pytest.param("1T", "tp", 1_101_004_800, id="1T-tp"),
        pytest.param("1T", "tp+sp", 642_252_800, id="1T-tp+sp"),
        pytest.param("1T", "tp+selective", 681_574_400, id="1T-tp+selective"),
        pytest.param("1T", "tp+sp+selective", 222_822_400, id="1T-tp+sp+selective"),
        pytest.param("1T", "full", 104_857_600, id="1T-full"),
    ],
)
def test_korthikanti_per_layer(name: str, case: str, expected: int) -> None:
    heads, hidden, layers, tp, _pp, micro = KORTHIKANTI_MODELS[name]
    sp, recompute = CASES[case]
    config = ActivationConfig(micro, 2048, tp, sp, recompute)
    counted = layer_activations(gpt(layers, hidden, heads), config)
    assert counted.per_layer.value == expected  # tensor by tensor
    assert counted.korthikanti is not None and counted.korthikanti.value == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("name", "tp_baseline", "both"),
    [
        # first pipeline stage, 1F1B with m >= p: L/p layers x p micro-batches = L layers' worth
        # 22B: 48 x 1,325,400,064 = 63,619,203,072 and 48 x 213,909,504 = 10,267,656,192
        pytest.param("22B", 63_619_203_072, 10_267_656_192, id="22B"),
        # 175B: 96 x 578,813,952 = 55,566,139,392 and 96 x 106,954,752 = 10,267,656,192
        pytest.param("175B", 55_566_139_392, 10_267_656_192, id="175B"),
        # 530B: 105 x 880,803,840 = 92,484,403,200 and 105 x 178,257,920 = 18,717,081,600
        pytest.param("530B", 92_484_403_200, 18_717_081_600, id="530B"),
        # 1T: 128 x 1,101,004,800 = 140,928,614,400 and 128 x 222,822,400 = 28,521,267,200
        pytest.param("1T", 140_928_614_400, 28_521_267_200, id="1T"),
    ],
)
def test_korthikanti_first_stage_totals(name: str, tp_baseline: int, both: int) -> None:
    heads, hidden, layers, tp, pp, micro = KORTHIKANTI_MODELS[name]
    model = gpt(layers, hidden, heads)
    par = lambda sp: Layout(tp=tp, pp=pp, sequence_parallel=sp)  # noqa: E731
    baseline = memory_breakdown(model, par(False), TrainingSetup(micro, 2048, micro_batches=4 * pp)).stages[0].activations.value
    best = memory_breakdown(model, par(True), TrainingSetup(micro, 2048, recompute=Recompute.SELECTIVE, micro_batches=4 * pp)).stages[0].activations.value
    assert (baseline, best) == (tp_baseline, both)
    # the abstract's "reduces activation memory by 5x": 26 1/3 / 4.25 = 6.2 (22B) down to 21 / 4.25 = 4.9
    assert 4.9 < baseline / best < 6.2


def test_interleaving_factor_530b() -> None:
    # 530B with p = 35, v = 3 chunks, m = 280: the first stage holds p (1 + (p - 1)/(p v)) =
    # 35 + 34/3 = 139/3 micro-batches of its 3 layers: 139 layers' worth of 34 sbh / t =
    # 139 x 178,257,920 = 24,777,850,880 bytes (Korthikanti et al. sec. 4.2.3).
    heads, hidden, layers, tp, pp, micro = KORTHIKANTI_MODELS["530B"]
    par = Layout(tp=tp, pp=pp, sequence_parallel=True, schedule=Schedule.INTERLEAVED, chunks=3)
    stage = memory_breakdown(gpt(layers, hidden, heads), par, TrainingSetup(micro, 2048, recompute=Recompute.SELECTIVE, micro_batches=280)).stages[0]
    assert stage.in_flight.value == pytest.approx(139 / 3, rel=1e-15)
    assert stage.activations.value == pytest.approx(24_777_850_880, rel=1e-15)
    assert stage.in_flight.formula_text() == "p × (1 + (p - 1) / (p × v))"


def test_embedding_and_output_layer_terms() -> None:
    # Korthikanti sec. 4.3 with SP, 175B (s = 2048, b = 1, h = 12288, t = 8, p = 8):
    # embedding dropout mask sbhp/t = 2048 x 12288 x 8 / 8 = 25,165,824, plus int64 token ids
    # 8 s b p = 131,072 (Megatron-LM's calculator): 25,296,896.
    model = gpt(96, 12288, 96)
    config = ActivationConfig(1, 2048, 8, True)
    assert embedding_activations(model, config, 8).value == 25_296_896
    # 22B, p = 1: 4sbh/t (1 + v/h) = 4 x 50,331,648 / 8 x (1 + 51200/6144) = 25,165,824 x 28/3 = 234,881,024
    config22 = ActivationConfig(4, 2048, 8, True)
    assert output_activations(gpt(48, 6144, 64), config22, 1).value == 234_881_024


def test_variants_change_the_named_tensors() -> None:
    # h = 1024, a = 16, s = 512, b = 2, t = 1, 16-bit; sbh = 1,048,576
    base = gpt(4, 1024, 16, seq=512)
    config = ActivationConfig(2, 512, 1)
    textbook = layer_activations(base, config).per_layer.value
    assert textbook == 1_048_576 * (34 + 5 * 16 * 512 / 1024)  # sbh (34 + 5as/h) = 76 sbh
    # ReLU keeps one 4h-wide tensor instead of GELU's two: 8 sbh less
    assert layer_activations(gpt(4, 1024, 16, seq=512, mlp=Mlp.RELU), config).per_layer.value == textbook - 8 * 1_048_576
    # SwiGLU with f = 4h: gate, up and product, three 4h tensors: 8 sbh more than GELU's two
    assert layer_activations(gpt(4, 1024, 16, seq=512, mlp=Mlp.SWIGLU), config).per_layer.value == textbook + 8 * 1_048_576
    # GQA with 4 K/V heads of 64: K and V shrink from 2 sbh each to 2 sbh / 4
    gqa = gpt(4, 1024, 16, seq=512, kv_heads=4)
    assert layer_activations(gqa, config).per_layer.value == textbook - 2 * 2 * 1_048_576 * 3 / 4
    # no dropout: two sbh masks go, and the as^2b mask and 2as^2b dropout output: 5 -> 2 per score
    no_dropout = ActivationConfig(2, 512, 1, dropout=False)
    assert layer_activations(base, no_dropout).per_layer.value == 1_048_576 * (32 + 2 * 16 * 512 / 1024)
    # FlashAttention: no s^2 term; an fp32 log-sum-exp per head and token: 4 a s b = 65,536
    flash = ActivationConfig(2, 512, 1, flash_attention=True)
    assert layer_activations(base, flash).per_layer.value == 34 * 1_048_576 + 4 * 16 * 512 * 2
    assert korthikanti_per_layer(base, flash) is None
    # fp32 activations keep 4 bytes per element, masks stay 1 byte: (16 x 4 + 2) sbh + (2 x 4 + 1) as^2b
    fp32 = ActivationConfig(2, 512, 1, activation_bytes=4.0)
    assert layer_activations(base, fp32).per_layer.value == 1_048_576 * 66 + 9 * 16 * 512 * 512 * 2


@settings(max_examples=60)
@given(
    heads=st.sampled_from([1, 2, 4, 8, 16, 32]),
    head_dim=st.sampled_from([16, 64, 128]),
    seq=st.integers(1, 4096),
    micro=st.integers(1, 8),
    tp_exp=st.integers(0, 5),
    sp=st.booleans(),
    recompute=st.sampled_from([r for r in Recompute if r is not Recompute.OP]),  # op-level checkpointing has no closed form
)
def test_count_equals_closed_form_for_their_layer(heads, head_dim, seq, micro, tp_exp, sp, recompute) -> None:
    tp = 2**tp_exp
    if heads % tp or (sp and tp == 1):
        return
    model = gpt(2, heads * head_dim, heads, seq=seq)
    counted = layer_activations(model, ActivationConfig(micro, seq, tp, sp, recompute))
    if recompute is Recompute.FULL and sp:  # Megatron keeps the SP shard: 2sbh/t; the paper's table 2sbh
        assert counted.per_layer.value == pytest.approx(counted.korthikanti.value / tp, rel=1e-12)
    else:
        assert counted.per_layer.value == pytest.approx(counted.korthikanti.value, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# Stages, totals, reserve, fits


def test_stage_parameters_split_embeddings_and_head() -> None:
    # 175B-like, t = 8, p = 8, V = 51200, learned positions 2048, tied.
    model = gpt(96, 12288, 96)
    par = Layout(tp=8, pp=8)
    # one layer on one TP rank: weights 12 h^2 / 8 = 226,492,416; QKV and MLP-up biases (3h + 4h)/8
    # = 10,752; output and MLP-down biases 2h = 24,576; two LayerNorms 4h = 49,152 -> 226,576,896
    first, middle, last = (stage_parameters(model, par, s).value for s in (0, 3, 7))
    assert middle == 12 * 226_576_896
    # first: + V/t x h = 6400 x 12288 = 78,643,200 and positions 2048 x 12288 = 25,165,824
    assert first == middle + 78_643_200 + 25_165_824
    # last: + final LayerNorm 2h = 24,576 and the tied embeddings' copy 78,643,200 (Megatron-LM)
    assert last == middle + 24_576 + 78_643_200


def test_total_is_the_sum_and_the_worst_stage_is_reported() -> None:
    model = gpt(8, 1024, 16, vocab=32000, seq=1024)
    par = Layout(tp=2, pp=4, dp=2, zero=1)
    breakdown = memory_breakdown(model, par, TrainingSetup(2, 1024, capacity=16 * 2**30, capacity_source="test", micro_batches=8))
    for stage in breakdown.stages:
        assert stage.total.value == pytest.approx(sum(v for _, v in stage.components()), rel=1e-12)
    assert breakdown.worst.total.value == max(s.total.value for s in breakdown.stages)
    # 1F1B: in flight p - s on stage s
    assert [s.in_flight.value for s in breakdown.stages] == [4, 3, 2, 1]
    headroom = breakdown.headroom()
    assert headroom is not None and headroom.value == 16 * 2**30 - breakdown.worst.total.value


def test_default_reserve_is_two_gib_in_three_named_parts() -> None:
    breakdown = memory_breakdown(gpt(2, 256, 4, seq=128), Layout(), TrainingSetup(1, 128))
    reserve = breakdown.worst.reserve
    assert reserve.value == DEFAULT_RESERVE_BYTES == 2 * 2**30
    assert reserve.formula_text() == "R_ctx + R_nccl + R_frag"
    # 0.5 GiB CUDA context (PyTorch PR #86509 measured 287,047,680 B lazy and 666,632,192 B eager),
    # 1 GiB NCCL (per channel and peer 4 MiB + 8 x 512 x 8 x 16 B + 120 x 640 x 8 x 8 B, about 9.2 MiB),
    # 0.5 GiB allowance for fragmentation
    assert [t.value for t in reserve.inputs] == [0.5 * 2**30, 2**30, 0.5 * 2**30]
    assert reserve.term("R_ctx").value > 287_047_680 and reserve.term("R_ctx").value + 2**28 > 666_632_192
    assert pytest.approx(9.19, abs=0.01) == (4 * 2**20 + 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8) / 2**20
    for needle in ("2 GiB by default", "PyTorch PR #86509", "NVIDIA/nccl src/init.cc", "allowance"):
        assert needle in reserve.source
    given = memory_breakdown(gpt(2, 256, 4, seq=128), Layout(), TrainingSetup(1, 128, reserve=5e9)).worst.reserve
    assert given.value == 5e9 and "given" in given.label


def test_gpipe_keeps_every_micro_batch() -> None:
    model = gpt(4, 512, 8, seq=256)
    one = memory_breakdown(model, Layout(pp=2, schedule=Schedule.ONE_F_ONE_B), TrainingSetup(1, 256, micro_batches=16))
    gp = memory_breakdown(model, Layout(pp=2, schedule=Schedule.GPIPE), TrainingSetup(1, 256, micro_batches=16))
    assert one.stages[0].in_flight.value == 2 and gp.stages[0].in_flight.value == 16
    assert gp.stages[0].activations.value == 8 * one.stages[0].activations.value


def test_zero3_adds_the_gathered_layers() -> None:
    # No vocabulary, no root unit: (2 w + g) x one layer's parameters, mixed precision: 6 bytes x 12 h^2 + 13 h
    bare = memory_breakdown(gpt(4, 512, 8, vocab=0, seq=256), Layout(dp=4, zero=3), TrainingSetup(1, 256)).worst
    assert bare.gathered is not None
    assert bare.gathered.value == 6 * (12 * 512**2 + 13 * 512)
    # With the tied embeddings of V = 51,200 and 256 learned positions the root unit (FSDP2 keeps it
    # gathered to the end of backward) holds P_root = 51,200 x 512 + 256 x 512 + 2 x 512 = 26,346,496;
    # the tied embeddings get their gradient from the LM head first: P_early = 26,214,400 + 1,024,
    # P_late = 131,072 (the positions). 2 P_root + 2 P_early + max(6 x 3,152,384, 2 x 131,072).
    z3 = memory_breakdown(gpt(4, 512, 8, seq=256), Layout(dp=4, zero=3), TrainingSetup(1, 256)).worst
    assert z3.gathered is not None
    assert z3.gathered.value == 2 * 26_346_496 + 2 * 26_215_424 + 6 * 3_152_384 == 124_038_144


@pytest.mark.parametrize(
    ("model", "par", "setup", "message"),
    [
        pytest.param(gpt(4, 512, 8), Layout(tp=3), TrainingSetup(1, 128), "--tp: 3 does not divide the attention heads", id="tp-heads"),
        pytest.param(gpt(6, 512, 8), Layout(pp=4), TrainingSetup(1, 128, micro_batches=4), "--pp: 6 layers", id="pp-layers"),
        pytest.param(gpt(4, 512, 8), Layout(zero=2), TrainingSetup(1, 128), "--zero 2: ZeRO shards", id="zero-without-dp"),
        pytest.param(gpt(4, 512, 8), Layout(sequence_parallel=True), TrainingSetup(1, 128), "--sequence-parallel", id="sp-without-tp"),
        pytest.param(gpt(4, 512, 8), Layout(), TrainingSetup(1, 128, precision=Precision.BF16, fp32_grads=True), "--fp32-grads",
                     id="bf16-fp32-grads"),
        pytest.param(gpt(8, 512, 8), Layout(pp=2, schedule=Schedule.INTERLEAVED, chunks=2), TrainingSetup(1, 128, micro_batches=3),
                     "--micro-batches", id="interleaved-m"),
        pytest.param(gpt(4, 512, 8), Layout(), TrainingSetup(0, 128), "--micro-batch", id="zero-micro-batch"),
        # grouped-query attention: t must divide the K/V heads too (Megatron-LM's num_query_groups % t)
        pytest.param(gpt(4, 512, 8, kv_heads=2), Layout(tp=4), TrainingSetup(1, 128), "--tp: 4 does not divide the key/value heads (2)",
                     id="tp-kv-heads"),
        pytest.param(gpt(4, 512, 8, ffn_hidden=1004), Layout(tp=8), TrainingSetup(1, 128), "--tp: 8 does not divide the MLP width",
                     id="tp-ffn"),
        pytest.param(gpt(4, 512, 8), Layout(pp=8), TrainingSetup(1, 128, micro_batches=8), "--pp: 4 layers do not split evenly over pp = 8",
                     id="pp-more-than-layers"),
        pytest.param(gpt(4, 512, 8), Layout(pp=2, chunks=3, schedule=Schedule.INTERLEAVED), TrainingSetup(1, 128, micro_batches=4),
                     "--pp: 4 layers do not split evenly over pp x chunks = 2 x 3", id="chunks-layers"),
        pytest.param(gpt(4, 512, 8), Layout(zero=1), TrainingSetup(1, 128), "with --dp 1 there is only one rank and nothing is sharded",
                     id="zero1-without-dp"),
        pytest.param(gpt(4, 512, 8), Layout(pp=4, schedule=Schedule.ZB_V), TrainingSetup(1, 128, micro_batches=4),
                     "--schedule zb-v: ZB-V holds two chunks a device in a V: 2p = 8 must divide the 4 layers", id="zb-v-odd-chunks"),
        pytest.param(gpt(4, 512, 8, seq=0, position=Position.ROPE), Layout(), TrainingSetup(1, 2**60), "--seq-len: 1.153e+18 is beyond any possible size",
                     id="impossible-seq"),
        pytest.param(gpt(4, 512, 8), Layout(), TrainingSetup(2**54, 128), "--micro-batch: 1.801e+16 is beyond any possible size",
                     id="impossible-micro-batch"),
        pytest.param(gpt(4, 512, 8, seq=128), Layout(), TrainingSetup(1, 256), "--seq-len: 256 tokens, but GPT has 128 learned positions",
                     id="beyond-learned-positions"),
        pytest.param(gpt(4, 512, 8), Layout(), TrainingSetup(1, 128, reserve=-1.0), "--reserve", id="negative-reserve"),
    ],
)  # fmt: skip
def test_bad_input_is_explained(model, par, setup, message) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        memory_breakdown(model, par, setup)
