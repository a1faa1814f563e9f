"""parcalc.core.fit (one configuration, scalar) and parcalc.core.fit_table (the strategy table):
hand-derived step-time terms, validity rules, placement, and the deepest model that fits."""

from __future__ import annotations

import math

import pytest

from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.fit import (
    Cluster,
    Config,
    Training,
    estimate,
    group_spans_nodes,
    invalid_reason,
    memory_of,
    with_layers,
)
from parcalc.core.fit_table import max_layers, strategy_table
from parcalc.core.hardware import Link, Sourced
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.errors import InputError

GIVEN = "test"
# A link with round numbers so the alpha-beta times can be derived by hand.
LINK = Link("test-link", "test link", Sourced(100e9, "B/s", GIVEN), Sourced(10e-6, "s", GIVEN), nccl_hardware="nvlink")
SLOW = Link("test-slow", "slow link", Sourced(10e9, "B/s", GIVEN), Sourced(50e-6, "s", GIVEN))


def gpt(layers: int = 4, hidden: int = 1024, heads: int = 16, vocab: int = 0) -> TransformerModel:
    return TransformerModel(
        key="test", name="test GPT", layers=layers, hidden=hidden, heads=heads, kv_heads=heads, head_dim=hidden // heads,
        ffn_hidden=4 * hidden, mlp=Mlp.GELU, vocab=vocab, max_seq_len=2048, tied_embeddings=True, position=Position.LEARNED,
        norm=Norm.LAYERNORM, bias=True, source=GIVEN,
    )  # fmt: skip


def cluster(gpus: int, **changes: object) -> Cluster:
    base = Cluster(gpus=gpus, gpus_per_node=8, peak=100e12, capacity=80 * 2**30, intra=LINK, inter=SLOW)
    return Cluster(**{**base.__dict__, **changes})  # type: ignore[arg-type]


# NCCL's cost model (parcalc.core.timing.network, docs/nccl-tuning.md) on the test link (100 GB/s, no
# NCCL efficiency: 100 % of it; NVLink latencies; sm80 row): inside a node, a ring over n ranks costs
#   LL:     6.6 us + steps x 0.6 us, at min(87.7 GB/s, 0.5 x 100 GB/s) = 50 GB/s
#   LL128: 14.0 us + steps x 1.9 us, at 120/128 x 100 GB/s = 93.75 GB/s
#   Simple: 8.4 us + steps x 3.4 us, at 100 GB/s
# and NCCL runs the cheapest; all-reduce has 2(n - 1) steps and moves 2(n - 1)/n of the buffer. Every call
# then also takes the per-call kernel launch NCCL's model leaves out, CALL (nccl.CALL_US, the same for every
# candidate, so it never changes NCCL's choice; docs/nccl-tuning.md sec. 14).
CALL = 8.8e-6
M = 1 * 512 * 1024 * 2  # one micro-batch's b s h activation, 2 bytes: 1,048,576 B


def test_tensor_parallel_time_by_hand() -> None:
    # t = 2: all-reduce of M, 2 steps, bus bytes M. Simple: 8.4 + 6.8 = 15.2 us + 10.48576 us = 25.68576 us;
    # LL: 7.8 + 20.97152 = 28.77 us; LL128: 17.8 + 11.18 = 28.98 us. Simple wins; the call takes CALL more.
    one = 15.2e-6 + M / 100e9 + CALL
    # 4 per layer (2 forward, 2 backward) x 4 layers x m = 1 micro-batch.
    est = estimate(gpt(), Config.of(2, 1, 1, 1), Training(1, 512), cluster(2))
    assert est.tp_comm.value == pytest.approx(16 * one, rel=1e-12)
    # Full recomputation replays the forward: 6 per layer.
    full = estimate(gpt(), Config.of(2, 1, 1, 1, Recompute.FULL), Training(1, 512), cluster(2))
    assert full.tp_comm.value == pytest.approx(24 * one, rel=1e-12)
    # Sequence parallelism: an all-gather and a reduce-scatter, 1 step and M/2 bus bytes each:
    # Simple 8.4 + 3.4 = 11.8 us + 5.24288 us = 17.04288 us (LL: 7.2 + 10.48576 = 17.69 us). Two calls pay
    # two base latencies, so SP's collectives cost more than one all-reduce at this size.
    sp = estimate(gpt(), Config.of(2, 1, 1, 1, sequence_parallel=True), Training(1, 512), cluster(2))
    assert sp.tp_comm.value == pytest.approx(16 * 2 * (11.8e-6 + M / 2 / 100e9 + CALL), rel=1e-12)


def test_sp_backward_all_gather_by_hand() -> None:
    # Sequence parallelism: Megatron-LM all-gathers each column-parallel linear's input again in backward for the
    # weight gradient, launched before the input-gradient GEMM and waited for after it
    # (megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward). Per
    # layer: 2 such gathers (Q/K/V, MLP up), each exposed by max(0, T_ag - t_dgrad).
    # T_ag as above: 11.8 us + M/2 / 100 GB/s + CALL 8.8 us = 25.84288 us. On this test's 100 TFLOP/s GPU the dgrad GEMMs are
    # longer (77.7 and 103.5 us), so nothing is exposed and t_tp is the 16 all-gather + reduce-scatter pairs.
    t_ag = 11.8e-6 + M / 2 / 100e9 + CALL
    slow = estimate(gpt(), Config.of(2, 1, 1, 1, sequence_parallel=True), Training(1, 512), cluster(2))
    assert slow.tp_comm.value == pytest.approx(16 * 2 * t_ag, rel=1e-12)
    # A GPU ten times faster (1 PFLOP/s): generic GEMM share 0.7, and a 512 x 1024 output fills 32 of 108 SMs with
    # 128 x 128 tiles (q = 512 x 1024 / (108 x 128 x 128) = 8/27):
    #   Q/K/V dgrad  [512 x 1536] . [1536 x 1024]: 2 x 512 x 1536 x 1024 FLOP / (1e15 x 0.7 x 8/27) = 7.765 us
    #   MLP-up dgrad [512 x 2048] . [2048 x 1024]: 2 x 512 x 2048 x 1024 FLOP / (...)             = 10.354 us
    # so per layer (25.843 - 7.765) + (25.843 - 10.354) = 33.567 us stay exposed, x 4 layers x m = 1.
    rate = 1e15 * 0.7 * 8 / 27
    dgrads = (2 * 512 * 1536 * 1024 / rate, 2 * 512 * 2048 * 1024 / rate)
    exposed = 4 * sum(t_ag - d for d in dgrads)
    fast = estimate(gpt(), Config.of(2, 1, 1, 1, sequence_parallel=True), Training(1, 512), cluster(2, peak=1e15))
    assert fast.tp_comm.value == pytest.approx(16 * 2 * t_ag + exposed, rel=1e-12)
    assert [fast.tp_comm.term(k).value for k in ("T_ag", "t_d1", "t_d2", "L_s")] == pytest.approx([t_ag, *dgrads, 4], rel=1e-12)
    assert fast.tp_comm.formula == "$m × ($C_tp + $L_s × (max(0, $T_ag - $t_d1) + max(0, $T_ag - $t_d2)))"
    # Full recomputation replays the forward's collectives (6 pairs per layer) but re-gathers once per backward.
    full = estimate(gpt(), Config.of(2, 1, 1, 1, Recompute.FULL, sequence_parallel=True), Training(1, 512), cluster(2, peak=1e15))
    assert full.tp_comm.value == pytest.approx(24 * 2 * t_ag + exposed, rel=1e-12)
    # With --tp-comm-overlap every TP collective, the re-gathers whole, goes against the GEMM time H_tp.
    over = estimate(gpt(), Config.of(2, 1, 1, 1, sequence_parallel=True), Training(1, 512), cluster(2, peak=1e15, tp_comm_overlap=True))
    hidden = over.tp_comm.term("H_tp").value
    assert over.tp_comm.value == pytest.approx(max(0.0, 16 * 2 * t_ag + 2 * 4 * t_ag - hidden), rel=1e-12)
    assert over.tp_comm.formula == "$m × max(0, $C_tp + 2 × $L_s × $T_ag - $H_tp)"
    # and the step pays it: the same configuration without SP's re-gather would be faster by `exposed`
    assert fast.step.value == pytest.approx(fast.compute.value + fast.tp_comm.value + fast.optimizer.value, rel=1e-12)


def test_pipeline_terms_by_hand() -> None:
    # p = 4, m = 8 micro-batches of b = 1 (B = 8, d = 1), 1F1B: bubble = (p-1)/m = 3/8 of the ideal time
    # (Narayanan et al. 2021 sec. 2.2.1). PP sends: 2 x m x one send of M (t = 1) inside the node,
    # NCCL p2p Simple: 8.4 + 3.4 us + M / 100 GB/s.
    est = estimate(gpt(8), Config.of(1, 4, 1, 1), Training(8, 512), cluster(4))
    assert est.bubble.value == pytest.approx(3 / 8 * est.compute.value, rel=1e-12)
    assert est.pp_comm.value == pytest.approx(2 * 8 * (11.8e-6 + M / 100e9 + CALL), rel=1e-12)
    # Interleaved with v = 2: (p-1)/(v m) = 3/16, and twice the sends.
    inter = estimate(gpt(8), Config.of(1, 4, 1, 1, schedule=Schedule.INTERLEAVED, chunks=2), Training(8, 512), cluster(4))
    assert inter.bubble.value == pytest.approx(3 / 16 * inter.compute.value, rel=1e-12)
    assert inter.pp_comm.value == pytest.approx(2 * est.pp_comm.value, rel=1e-12)


def test_data_parallel_sync_without_overlap_by_hand() -> None:
    # d = 4, no overlap: every gradient bucket's all-reduce is exposed. P = 4 layers x (12 h^2 + 13 h)
    # = 50,384,896 parameters (no vocabulary). Megatron-LM's buckets (the default framework): max(40M, 1M x 4)
    # = 40M parameters, so 2 buckets of 25,192,448; fp32 main gradients reduced in fp32: 100,769,792 B each.
    # One bucket, ring over 4 in a node: Simple 8.4 + 6 x 3.4 = 28.8 us + 1.5 x 100,769,792 B / 100 GB/s.
    est = estimate(gpt(), Config.of(1, 1, 4, 1), Training(4, 512, fp32_grads=True), cluster(4, dp_overlap=False))
    one = 28.8e-6 + 1.5 * 100_769_792 / 100e9 + CALL
    assert est.dp_comm.value == pytest.approx(2 * one, rel=1e-12)
    # With overlap, what the last micro-batch's backward W_b cannot hide, and at least the last bucket.
    hidden = estimate(gpt(), Config.of(1, 1, 4, 1), Training(4, 512, fp32_grads=True), cluster(4))
    window = hidden.dp_comm.term("W_b").value
    assert window > 0
    assert hidden.dp_comm.value == pytest.approx(max(2 * one - window, one), rel=1e-12)


def test_step_time_is_the_sum_and_mfu_follows() -> None:
    est = estimate(gpt(8, vocab=50304), Config.of(2, 2, 2, 1, Recompute.SELECTIVE, 1, True), Training(16, 1024), cluster(8))
    parts = est.compute.value + est.tp_comm.value + est.bubble.value + est.pp_comm.value + est.dp_comm.value + est.optimizer.value
    assert est.step.value == pytest.approx(parts, rel=1e-12)
    assert est.mfu.value == pytest.approx(est.model_flops.value / (parts * 8 * 100e12), rel=1e-12)
    assert est.tokens_per_second.value == pytest.approx(16 * 1024 / parts, rel=1e-12)
    # the compute term is m x (forward + backward + recomputed kernels) of the slowest stage: m = 16 / (2 x 1) = 8
    t = {k: est.compute.term(k).value for k in ("t_f", "t_b", "t_r")}
    assert est.compute.value == pytest.approx(8 * sum(t.values()), rel=1e-12)
    assert 0 < t["t_r"] < t["t_f"] < t["t_b"]  # selective replays only the attention core; backward ~2x forward


@pytest.mark.parametrize(
    ("size", "stride", "expected"),
    [
        pytest.param(8, 1, False, id="tp8-in-a-node"),
        pytest.param(16, 1, True, id="tp16-spans"),
        pytest.param(2, 4, False, id="dp2-stride4"),  # ranks 0 and 4
        pytest.param(2, 8, True, id="dp2-stride8"),  # ranks 0 and 8
        pytest.param(1, 64, False, id="one-rank"),
    ],
)
def test_group_placement(size: int, stride: int, expected: bool) -> None:
    assert group_spans_nodes(size, stride, 8) is expected


@pytest.mark.parametrize(
    ("config", "batch", "gpus", "fragment"),
    [
        pytest.param(Config.of(3, 1, 1, 1), 1, 3, "does not divide the attention heads", id="tp-heads"),
        pytest.param(Config.of(16, 1, 1, 1), 1, 16, "spans nodes", id="tp-across-nodes"),
        pytest.param(Config.of(1, 3, 1, 1), 1, 3, "does not divide the 4 layers", id="pp-layers"),
        pytest.param(Config.of(1, 1, 4, 1), 6, 4, "does not divide the global batch", id="batch"),
        pytest.param(Config.of(1, 2, 1, 1, schedule=Schedule.INTERLEAVED, chunks=2), 3, 2, "multiple of p", id="interleaved-m"),
        pytest.param(Config.of(1, 1, 1, 1, zero=1), 1, 1, "dp = 1", id="zero-without-dp"),
        pytest.param(Config.of(1, 1, 2, 1, sequence_parallel=True), 2, 2, "tp > 1", id="sp-without-tp"),
        pytest.param(Config.of(2, 1, 1, 1), 1, 4, "is not the 4 GPUs", id="gpu-count"),
    ],
)
def test_invalid_configurations_say_why(config: Config, batch: int, gpus: int, fragment: str) -> None:
    reason = invalid_reason(gpt(), config, Training(batch, 512), cluster(gpus))
    assert reason is not None and fragment in reason
    with pytest.raises(InputError, match="configuration"):
        estimate(gpt(), config, Training(batch, 512), cluster(gpus))


@pytest.mark.parametrize(
    ("config", "gpus"),
    [
        pytest.param(Config.of(1, 1, 1, 1), 1, id="single"),
        pytest.param(Config.of(2, 1, 1, 1, Recompute.FULL), 2, id="tp-full"),
        pytest.param(Config.of(1, 4, 1, 1, Recompute.SELECTIVE), 4, id="pp-selective"),
        pytest.param(Config.of(1, 1, 2, 1, zero=3), 2, id="zero3"),
    ],
)
def test_max_layers_is_the_exact_boundary(config: Config, gpus: int) -> None:
    # On a 6 GiB GPU with 0.5 GiB reserve: the answer fits, one more stage's worth of layers does not.
    small = cluster(gpus, capacity=6 * 2**30)
    training = Training(gpus, 1024, reserve=0.5 * 2**30)
    model = gpt(4, vocab=32000)
    deepest = max_layers(model, config, training, small)
    assert deepest > 0 and deepest % config.layout.pp == 0
    assert memory_of(with_layers(model, deepest), config, training, small).worst.total.value <= small.capacity
    assert memory_of(with_layers(model, deepest + config.layout.pp), config, training, small).worst.total.value > small.capacity


def test_strategy_table_rows_match_the_memory_core() -> None:
    # Every row's memory is parcalc.core.memory's for its configuration; recomputation never adds memory
    # kept across layers, and more sharding never adds model states.
    model, training, gpus = gpt(8, vocab=32000), Training(2, 1024), cluster(2)
    rows = strategy_table(model, training, gpus)
    assert len(rows) == 9 * 3
    by_name = {(r.family, r.recompute): r for r in rows}
    for row in rows:
        if row.config is not None and row.memory is not None:
            used = cluster(row.gpus_used)
            assert row.memory == memory_of(model, row.config, training, used).worst.total.value
    for family in ("single GPU", "DP", "ZeRO-3 (FSDP)", "TP", "PP"):
        mems = [by_name[(family, r)].memory for r in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)]
        assert mems[0] >= mems[1] >= mems[2]
    zero = [by_name[(f, Recompute.NONE)].memory for f in ("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)")]
    assert zero[:3] == sorted(zero[:3], reverse=True)
    # ZeRO-3 shards the weights too, but holds gathered buffers: on 2 GPUs, the whole root unit
    # (32,000 x 1024 embeddings, tied) and two layers outweigh half the weights of this small model
    # (parcalc.core.memory.zero3_working_set); its sharded states alone are still the least.
    z2, z3 = (memory_of(model, by_name[(f, Recompute.NONE)].config, training, gpus).worst for f in ("ZeRO-2", "ZeRO-3 (FSDP)"))
    assert z3.gathered is not None
    assert z3.states_total.value - z3.gathered.value < z2.states_total.value
    assert by_name[("TP x PP", Recompute.NONE)].config is None  # 2 GPUs: no tp >= 2 with pp >= 2


def test_tp_must_divide_the_gpus_of_a_node() -> None:
    # tp = 4 on 6-GPU nodes: ranks 4-7 straddle two nodes (Megatron's order), so it is refused unless allowed,
    # and then costed on the network of the straddling group (2 + 2 ranks over 2 nodes).
    reason = invalid_reason(gpt(), Config.of(4, 1, 3, 1), Training(3, 512), cluster(12, gpus_per_node=6))
    assert reason is not None and "must divide the GPUs of a node" in reason
    allowed = estimate(gpt(), Config.of(4, 1, 3, 1), Training(3, 512), cluster(12, gpus_per_node=6, allow_cross_node_tp=True))
    inside = estimate(gpt(), Config.of(4, 1, 3, 1), Training(3, 512), cluster(12, gpus_per_node=8, allow_cross_node_tp=True))
    assert allowed.tp_comm.value > inside.tp_comm.value


def test_efficiency_is_a_positive_factor_up_to_two() -> None:
    for bad in (0.0, -1.0, 2.5):
        with pytest.raises(InputError, match="--efficiency"):
            estimate(gpt(), Config.of(1, 1, 1, 1), Training(1, 512), cluster(1, efficiency=bad))
    base = estimate(gpt(), Config.of(1, 1, 1, 1), Training(1, 512), cluster(1))
    slower = estimate(gpt(), Config.of(1, 1, 1, 1), Training(1, 512), cluster(1, efficiency=0.5))
    assert slower.compute.value > base.compute.value


def test_fp32_training_doubles_activation_messages() -> None:
    # The same all-reduce (Simple, 15.2 us latency) of twice the bytes: 15.2 us + 2M / 100 GB/s.
    half = estimate(gpt(), Config.of(2, 1, 1, 1), Training(1, 512), cluster(2))
    full = estimate(gpt(), Config.of(2, 1, 1, 1), Training(1, 512, Precision.FP32, Optimizer.ADAM), cluster(2))
    assert half.tp_comm.value == pytest.approx(16 * (15.2e-6 + M / 100e9 + CALL), rel=1e-12)
    assert full.tp_comm.value == pytest.approx(16 * (15.2e-6 + 2 * M / 100e9 + CALL), rel=1e-12)
    assert math.isfinite(full.step.value)


def test_zero3_time_follows_its_stated_formula() -> None:
    # ZeRO-3 with the default (Megatron) profile: prefetched gathers, regather in backward, one reduce-scatter
    # per layer in the last micro-batch only. The value must be the derivation's own formula on its terms:
    #   m (g_0 + g + (L_s - 1) max(0, g - f_l) + L_s max(0, g - b_l)) + 1 (L_s max(0, r - max(0, b_l - g)) + r)
    est = estimate(gpt(), Config.of(1, 1, 4, 1, zero=3), Training(8, 512), cluster(4))
    t = {k: est.dp_comm.term(k).value for k in ("m", "L_s", "g", "r", "g_0", "f_l", "b_l")}
    assert t["m"] == 2 and t["L_s"] == 4
    by_hand = (t["m"] * (t["g_0"] + t["g"] + 3 * max(0, t["g"] - t["f_l"]) + 4 * max(0, t["g"] - t["b_l"]))
               + 4 * max(0, t["r"] - max(0, t["b_l"] - t["g"])) + t["r"])  # fmt: skip
    assert est.dp_comm.value == pytest.approx(by_hand, rel=1e-12)
    assert "$m × ($g_0 + $g + ($L_s - 1) × max(0, $g - $f_l)" in est.dp_comm.formula


def test_optimizer_step_by_hand() -> None:
    # gpt(): P = 50,384,896 parameters (no vocabulary). Mixed bf16 AdamW, 2-byte gradients: fp32 master,
    # m and v read and written (2 x 12 B), the gradient read (2 B), the bf16 copy written (2 B) = 28 B.
    # Generic HBM (no GPU preset): 2.0e12 B/s at 80 %; ZeRO-1 over d = 2 halves it. multi_tensor_apply's 320 blocks a
    # launch on the generic 108 SMs: 3 on the busiest SM against 2.96 on average, x 1.0125 (compute.multi_tensor_waves).
    est = estimate(gpt(), Config.of(1, 1, 2, 1, zero=1), Training(2, 512), cluster(2))
    assert est.optimizer.term("Q_p").value == 28
    assert est.optimizer.value == pytest.approx(50_384_896 * 28 / (2.0e12 * 0.8) / 2 * (3 / (320 / 108)), rel=1e-12)


def test_a_symbol_of_several_subscript_letters_is_braced_in_latex() -> None:
    # fit's PDF set t_tp = m x C_tp as "C_t p" (the subscript one letter long); a plain symbol's subscript is braced
    from parcalc.core.fit_term_derivations import term_of

    assert term_of("C_tp", "C_tp", 1.0, "s", "").latex == r"C_{\mathrm{tp}}"
    assert term_of("t_f", "t_f", 1.0, "s", "").latex == "t_f"  # one letter: as it is
    assert term_of("m", "m", 1.0, "", "").latex == "m"
    assert term_of("B_pcie", "B_pcie", 1.0, "B/s", "", latex=r"B_{\mathrm{pcie}}").latex == r"B_{\mathrm{pcie}}"  # given: kept
