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
LINK = Link("test-link", "test link", Sourced(100e9, "B/s", GIVEN), Sourced(10e-6, "s", GIVEN))
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


def test_tensor_parallel_time_by_hand() -> None:
    # t = 2, b = 1, s = 512, h = 1024, 2-byte activations: M = 1 x 512 x 1024 x 2 = 1,048,576 B.
    # Ring all-reduce: 2(t-1) alpha + 2(t-1)/t x M / beta = 2 x 10 us + 1,048,576 / 100e9 = 30.48576 us.
    # 4 per layer (2 forward, 2 backward) x 4 layers x m = B / (d b) = 1 micro-batch: 16 x 30.48576 us.
    est = estimate(gpt(), Config(2, 1, 1, 1), Training(1, 512), cluster(2))
    assert est.tp_comm.value == pytest.approx(16 * 30.48576e-6, rel=1e-12)
    # Full recomputation replays the forward: 6 per layer.
    full = estimate(gpt(), Config(2, 1, 1, 1, Recompute.FULL), Training(1, 512), cluster(2))
    assert full.tp_comm.value == pytest.approx(24 * 30.48576e-6, rel=1e-12)
    # Sequence parallelism: an all-gather + a reduce-scatter, (t-1)(alpha + M/(t beta)) each: the same time.
    sp = estimate(gpt(), Config(2, 1, 1, 1, sequence_parallel=True), Training(1, 512), cluster(2))
    assert sp.tp_comm.value == pytest.approx(est.tp_comm.value, rel=1e-12)


def test_pipeline_terms_by_hand() -> None:
    # p = 4, m = 8 micro-batches of b = 1 (B = 8, d = 1), 1F1B: bubble = (p-1)/m = 3/8 of the ideal time
    # (Narayanan et al. 2021 sec. 2.2.1). PP sends: 2 x m x (alpha + M / beta) with M = 512 x 1024 x 2.
    est = estimate(gpt(8), Config(1, 4, 1, 1), Training(8, 512), cluster(4))
    assert est.bubble.value == pytest.approx(3 / 8 * est.compute.value, rel=1e-12)
    assert est.pp_comm.value == pytest.approx(2 * 8 * (10e-6 + 1_048_576 / 100e9), rel=1e-12)
    # Interleaved with v = 2: (p-1)/(v m) = 3/16, and twice the sends.
    inter = estimate(gpt(8), Config(1, 4, 1, 1, schedule=Schedule.INTERLEAVED, chunks=2), Training(8, 512), cluster(4))
    assert inter.bubble.value == pytest.approx(3 / 16 * inter.compute.value, rel=1e-12)
    assert inter.pp_comm.value == pytest.approx(2 * est.pp_comm.value, rel=1e-12)


def test_data_parallel_sync_without_overlap_by_hand() -> None:
    # d = 4, no overlap: the whole ring all-reduce of the gradients is exposed. P = 4 layers x (12 h^2 + 13 h)
    # = 4 x 12,596,224 = 50,384,896 parameters (no vocabulary: no embeddings, and the final norm goes
    # with the LM head); mixed bf16: 2-byte gradients, 100,769,792 B in ceil(100,769,792 / 25 MiB) = 4
    # buckets of 25,192,448 B. One bucket: 2(d-1) alpha + 2(d-1)/d x 25,192,448 / 100e9 = 60 us + 377.88672 us.
    est = estimate(gpt(), Config(1, 1, 4, 1), Training(4, 512), cluster(4, dp_overlap=False))
    assert est.dp_comm.value == pytest.approx(4 * (60e-6 + 1.5 * 25_192_448 / 100e9), rel=1e-12)
    # With overlap, only what the last backward (2/3 of a micro-batch's compute) cannot hide.
    hidden = estimate(gpt(), Config(1, 1, 4, 1), Training(4, 512), cluster(4))
    assert hidden.dp_comm.value == pytest.approx(max(0.0, est.dp_comm.value - 2 / 3 * hidden.compute.value), rel=1e-12)


def test_step_time_is_the_sum_and_mfu_follows() -> None:
    est = estimate(gpt(8, vocab=50304), Config(2, 2, 2, 1, Recompute.SELECTIVE, 1, True), Training(16, 1024), cluster(8))
    parts = est.compute.value + est.tp_comm.value + est.bubble.value + est.pp_comm.value + est.dp_comm.value
    assert est.step.value == pytest.approx(parts, rel=1e-12)
    assert est.mfu.value == pytest.approx(est.model_flops.value / (parts * 8 * 100e12), rel=1e-12)
    assert est.tokens_per_second.value == pytest.approx(16 * 1024 / parts, rel=1e-12)
    # the compute term is the hardware FLOPs at e = 0.7 of the peak on 8 GPUs
    assert est.compute.value == pytest.approx(est.hardware_flops.value / (8 * 100e12 * 0.7), rel=1e-12)


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
        pytest.param(Config(3, 1, 1, 1), 1, 3, "does not divide the attention heads", id="tp-heads"),
        pytest.param(Config(16, 1, 1, 1), 1, 16, "spans nodes", id="tp-across-nodes"),
        pytest.param(Config(1, 3, 1, 1), 1, 3, "does not divide the 4 layers", id="pp-layers"),
        pytest.param(Config(1, 1, 4, 1), 6, 4, "does not divide the global batch", id="batch"),
        pytest.param(Config(1, 2, 1, 1, schedule=Schedule.INTERLEAVED, chunks=2), 3, 2, "multiple of p", id="interleaved-m"),
        pytest.param(Config(1, 1, 1, 1, zero=1), 1, 1, "dp = 1", id="zero-without-dp"),
        pytest.param(Config(1, 1, 2, 1, sequence_parallel=True), 2, 2, "tp > 1", id="sp-without-tp"),
        pytest.param(Config(2, 1, 1, 1), 1, 4, "is not the 4 GPUs", id="gpu-count"),
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
        pytest.param(Config(1, 1, 1, 1), 1, id="single"),
        pytest.param(Config(2, 1, 1, 1, Recompute.FULL), 2, id="tp-full"),
        pytest.param(Config(1, 4, 1, 1, Recompute.SELECTIVE), 4, id="pp-selective"),
        pytest.param(Config(1, 1, 2, 1, zero=3), 2, id="zero3"),
    ],
)
def test_max_layers_is_the_exact_boundary(config: Config, gpus: int) -> None:
    # On a 6 GiB GPU with 0.5 GiB reserve: the answer fits, one more stage's worth of layers does not.
    small = cluster(gpus, capacity=6 * 2**30)
    training = Training(gpus, 1024, reserve=0.5 * 2**30)
    model = gpt(4, vocab=32000)
    deepest = max_layers(model, config, training, small)
    assert deepest > 0 and deepest % config.pp == 0
    assert memory_of(with_layers(model, deepest), config, training, small).worst.total.value <= small.capacity
    assert memory_of(with_layers(model, deepest + config.pp), config, training, small).worst.total.value > small.capacity


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
    assert zero == sorted(zero, reverse=True)
    assert by_name[("TP x PP", Recompute.NONE)].config is None  # 2 GPUs: no tp >= 2 with pp >= 2


def test_efficiency_must_be_a_share() -> None:
    with pytest.raises(InputError, match="--efficiency"):
        estimate(gpt(), Config(1, 1, 1, 1), Training(1, 512), cluster(1, efficiency=1.5))


def test_fp32_training_doubles_activation_messages() -> None:
    half = estimate(gpt(), Config(2, 1, 1, 1), Training(1, 512), cluster(2, intra=Link("z", "zero latency", LINK.bandwidth_per_direction, Sourced(0.0, "s", GIVEN))))
    full = estimate(gpt(), Config(2, 1, 1, 1), Training(1, 512, Precision.FP32, Optimizer.ADAM),
                    cluster(2, intra=Link("z", "zero latency", LINK.bandwidth_per_direction, Sourced(0.0, "s", GIVEN))))  # fmt: skip
    assert full.tp_comm.value == pytest.approx(2 * half.tp_comm.value, rel=1e-12)
    assert math.isfinite(full.step.value)
