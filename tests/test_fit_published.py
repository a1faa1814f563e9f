"""`parcalc fit`'s step-time model against published Megatron-LM runs on A100s.

The data, each value with its source, is in tests/published_runs.py: Narayanan et al. 2021 Table 1
(full recomputation; their teraFLOP/s count the recomputed forward, so they compare with parcalc's
HFU) and Korthikanti et al. 2022 Tables 3-5 (MFU with selective recomputation and sequence
parallelism; iteration times with full recomputation).

What was calibrated on what: the only number set from a measurement of these papers is the A100's
GEMM share (0.72 of the 16-bit peak, presets/gpus/a100-sxm4-80gb.yaml), from Korthikanti's Table 4,
the forward and backward time of ONE layer of the 22B model (test_table_4_layer_calibration below).
No end-to-end iteration time was used; every run below is a test. The 22B row of Table 5 runs the
calibration layer itself, so it is the weakest of the tests.

Bands, and why: predicted HFU (Narayanan) or MFU (Korthikanti) within 12 % relative of the published
figure for every row (measured: mean absolute error 4.8 %, worst 11.5 % on the 1.7B row, whose
h = 2304 GEMMs are the smallest). Narayanan's 2021 runs used Megatron's local DDP without
overlapping the gradient all-reduce (--DDP-impl local), so dp overlap is off for them.
"""

from __future__ import annotations

import pytest
from published_runs import KORTHIKANTI_CONFIGS, KORTHIKANTI_RESULTS, NARAYANAN_TABLE_1

from parcalc.commands.model_options import ModelFlags, model_from_flags
from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.layout import Layout
from parcalc.presets import load_gpu, load_link

A100 = load_gpu("a100-sxm4-80gb", ())
A100_80GB = 80 * 2**30  # capacity of the A100 80GB (HBM2e, binary gigabytes)
A100_PEAK = 312e12  # 16-bit Tensor Core peak, Narayanan et al. 2021 sec. 5
NVLINK, IB = load_link("nvlink3", ()), load_link("ib-hdr", ())


def gpt(heads: int, hidden: int, layers: int):
    """The papers' GPT layer: LayerNorm, biases, learned positions, GELU 4h MLP, V = 51,200, s = 2048."""
    flags = ModelFlags(layers=str(layers), hidden=str(hidden), heads=str(heads), vocab="51200")
    return model_from_flags(flags, (), seq_len=2048)


def a100s(gpus: int, **changes: object) -> Cluster:
    return Cluster(gpus=gpus, gpus_per_node=8, peak=A100_PEAK, capacity=A100_80GB, intra=NVLINK, inter=IB, gpu=A100, dtype="fp16",
                   **changes)  # type: ignore[arg-type]  # fmt: skip


NARAYANAN_IDS = [f"{row.params_billion}B" for row in NARAYANAN_TABLE_1]


@pytest.mark.parametrize("row", NARAYANAN_TABLE_1, ids=NARAYANAN_IDS)
def test_narayanan_table_1(row) -> None:
    model = gpt(row.heads, row.hidden, row.layers)
    # the table prints billions to one decimal (1.65 B is printed 1.7): within half of its last digit
    assert abs(model.total_params / 1e9 - row.params_billion) <= 0.05 + 1e-9
    chunks = (row.layers // row.pp) // row.layers_per_virtual_stage if row.layers_per_virtual_stage else 1
    schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
    config = Config.of(row.tp, row.pp, row.gpus // (row.tp * row.pp), row.micro_batch, Recompute.FULL, 0, False, schedule, chunks)
    training = Training(row.batch, 2048, Precision.MIXED_FP16, Optimizer.ADAM, causal=False)
    est = estimate(model, config, training, a100s(row.gpus, dp_overlap=False))
    assert est.fits, f"{row.params_billion}B needs {est.total_memory / 2**30:.1f} GiB"
    published = row.percent_of_peak / 100
    assert est.hfu.value == pytest.approx(published, rel=0.12)


KORTHIKANTI = list(zip(KORTHIKANTI_CONFIGS, KORTHIKANTI_RESULTS[:4], strict=True))


@pytest.mark.parametrize(("config", "result"), KORTHIKANTI, ids=[c.label for c, _ in KORTHIKANTI])
def test_korthikanti_selective_recomputation_and_sequence_parallelism(config, result) -> None:
    assert config.label == result.label
    model = gpt(config.heads, config.hidden, config.layers)
    chunks = config.interleaved_stages or 1
    schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
    training = Training(config.global_batch, config.seq_len, Precision.MIXED_FP16, Optimizer.ADAM, causal=False)
    cluster = a100s(config.gpus)
    present = estimate(model, Config.of(config.tp, config.pp, 1, config.micro_batch, Recompute.SELECTIVE, zero=0, sequence_parallel=True, schedule=schedule, chunks=chunks),
                       training, cluster)  # fmt: skip
    baseline = estimate(model, Config.of(config.tp, config.pp, 1, config.micro_batch, Recompute.FULL, zero=0, sequence_parallel=False, schedule=schedule, chunks=chunks),
                        training, cluster)  # fmt: skip
    assert present.fits and baseline.fits
    assert present.total_memory > baseline.total_memory  # selective keeps more than full recomputation
    published = result.mfu_present_work_percent / 100
    assert present.mfu.value == pytest.approx(published, rel=0.12)
    assert present.step.value == pytest.approx(result.present_work_iter_s, rel=0.12)
    assert baseline.step.value == pytest.approx(result.full_recompute_iter_s, rel=0.12)
    published_speedup = result.full_recompute_iter_s / result.present_work_iter_s
    # measured: 175B 1.37 vs 1.32, 530B 1.33 vs 1.30, 1T 1.33 vs 1.32, 22B 1.36 vs 1.29 (the worst, 5.5 %)
    assert baseline.step.value / present.step.value == pytest.approx(published_speedup, rel=0.06)


def test_table_4_layer_calibration() -> None:
    # Korthikanti et al. 2022 Table 4, "Baseline no recompute": one 22B layer (h 6144, a 64, s 2048, b 4,
    # TP 8) takes 7.7 ms forward and 11.9 ms backward. This is the one measurement the A100's GEMM share
    # (0.72) was set from: the kernels of one layer plus its 4 TP all-reduces must give 19.6 ms.
    from parcalc.core.choices import Recompute as R
    from parcalc.core.timing.step import stage_pieces

    model = gpt(64, 6144, 48)
    training = Training(4, 2048, Precision.MIXED_FP16, Optimizer.ADAM, causal=False)
    stage, f_layer, b_layer = stage_pieces(model, Layout(8), 4, R.NONE, training, a100s(8))
    tp_per_layer = stage.tp / 48
    assert f_layer + b_layer + tp_per_layer == pytest.approx(19.6e-3, rel=0.03)
    assert f_layer + tp_per_layer / 2 == pytest.approx(7.7e-3, rel=0.05)


def test_table_4_sequence_parallel_rows_hide_the_backward_all_gather() -> None:
    # Korthikanti et al. 2022 Table 4, the 22B layer with sequence parallelism: 7.2 ms forward + 11.8 ms backward
    # (19.0 ms), and 20.3 ms with selective recomputation. Megatron-LM re-gathers the inputs of Q/K/V and MLP up
    # in backward for their weight gradients, under the input-gradient GEMMs (sec. 4.2.2: "we overlap this
    # communication with the computation required to calculate gradients with respect to Y"); the table's
    # backward is no slower than the baseline's (11.8 vs 11.9 ms). parcalc: 2 all-gathers of b s h = 100.7 MB
    # over 8 A100s (0.40 ms each, 0.80 ms per layer) beside dgrad GEMMs of 1.05 and 1.40 ms: nothing exposed;
    # the rows come out at 18.9 ms (-0.7 %) and 19.9 ms (-2.1 %). Exposing the re-gathers would add 0.80 ms (4 %).
    from published_runs import KORTHIKANTI_TABLE_4

    from parcalc.core.choices import Recompute as R
    from parcalc.core.timing.step import sp_regather, stage_pieces

    rows = {row.experiment: row for row in KORTHIKANTI_TABLE_4}
    model = gpt(64, 6144, 48)
    training = Training(4, 2048, Precision.MIXED_FP16, Optimizer.ADAM, causal=False)
    gather, dgrads = sp_regather(model, 8, 4, training, a100s(8))
    assert gather == pytest.approx(0.40e-3, rel=0.05) and len(dgrads) == 2 and min(dgrads) > gather
    for name, recompute in (("Sequence Parallelism", R.NONE), ("Selective + Sequence", R.SELECTIVE)):
        stage, f_layer, b_layer = stage_pieces(model, Layout(8, sequence_parallel=True), 4, recompute, training, a100s(8))
        assert stage.regather == pytest.approx(48 * 2 * gather, rel=1e-12)
        assert stage.regather_exposed == 0.0
        layer = f_layer + b_layer + (stage.tp + stage.regather_exposed) / 48
        assert layer == pytest.approx(rows[name].combined_ms * 1e-3, rel=0.03), name
