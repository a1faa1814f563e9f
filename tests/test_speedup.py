"""Speedup and parallel efficiency in `fit`'s strategy table (parcalc.core.speedup, issue #16) and
--ideal-network: hand-derived values for a small model whose every step-time term is known, the
closed forms on an ideal network (DP: N; PP: N / (1 + (p - 1)/m)), the reference when one GPU
cannot hold the model, the verdicts' reasons, worksheets citing the answers, and 80 columns."""

from __future__ import annotations

import io
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from test_fit import LINK, SLOW, cluster, gpt

from parcalc.cli import app
from parcalc.core.choices import Collective, Recompute
from parcalc.core.fit import Config, Training, estimate
from parcalc.core.speedup import excess_terms, step_terms, timed_strategy_table
from parcalc.core.timing.network import Fabric, Placement, collective_time

NONE = (Recompute.NONE,)


def rows_by_family(table):
    return {(r.family, r.recompute): r for r in table.rows}


def kernel_pieces(model, training, gpus):
    """(tau, o): one micro-batch's forward + backward kernels on one GPU (b = 1, the whole model) and
    its optimizer step, from the kernel model (parcalc.core.timing.compute) via the single-GPU estimate."""
    single = estimate(model, Config.of(1, 1, 1, 1), training, cluster(1, ideal_network=gpus.ideal_network))
    tau = single.compute.term("t_f").value + single.compute.term("t_b").value
    return tau, single.optimizer.value


# ---------------------------------------------------------------------------------------------
# Hand derivations


def test_speedup_and_efficiency_by_hand() -> None:
    # 4 layers of h = 1024 (no vocabulary: no embedding or LM head), B = 4 sequences of 512 tokens, b = 1,
    # on 4 GPUs of the test cluster (100 TFLOP/s, test links). The single GPU runs m = 4 micro-batches of
    # tau each and one optimizer step o:        t_1 = 4 tau + o
    # DP (d = 4) runs one micro-batch per rank and all-reduces the gradients (t_dp, exposed beyond
    # the backward it overlaps):                t_DP = tau + t_dp + o
    # ZeRO-1 shards the optimizer step:         t_Z1 = tau + t_dp' + o / 4
    # S = t_1 / t_N and E = S / N (Amdahl; parcalc.core.analyze.parallel_efficiency with N0 = 1).
    model, training, gpus = gpt(4), Training(4, 512), cluster(4)
    tau, o = kernel_pieces(model, training, gpus)
    table = timed_strategy_table(model, training, gpus, NONE, deepest=False)
    rows = rows_by_family(table)
    dp, z1 = rows[("DP", Recompute.NONE)], rows[("ZeRO-1", Recompute.NONE)]
    t_dp, t_dp1 = dp.estimate.dp_comm.value, z1.estimate.dp_comm.value
    assert t_dp > 0 and t_dp1 > 0  # a real network: the sync costs something
    t_1 = 4 * tau + o
    assert rows[("single GPU", Recompute.NONE)].estimate.step.value == pytest.approx(t_1, rel=1e-12)
    assert dp.speedup.value == pytest.approx(t_1 / (tau + t_dp + o), rel=1e-12)
    assert dp.efficiency.value == pytest.approx(t_1 / (tau + t_dp + o) / 4, rel=1e-12)
    assert z1.speedup.value == pytest.approx(t_1 / (tau + t_dp1 + o / 4), rel=1e-12)
    assert z1.efficiency.value == pytest.approx(z1.speedup.value / 4, rel=1e-12)
    # the derivation shows its inputs: t_ref is the single GPU's step, t_step the row's
    assert dp.speedup.term("t_ref").value == pytest.approx(t_1, rel=1e-12)
    assert dp.speedup.term("t_step").value == dp.estimate.step.value
    assert table.reference.gpus == 1 and table.reference.row.family == "single GPU"
    # tokens/s is the estimate's B s / t_step
    assert dp.estimate.tokens_per_second.value == pytest.approx(4 * 512 / dp.estimate.step.value, rel=1e-12)


def test_ideal_fabric_makes_every_collective_free() -> None:
    # The same all-reduce on the test link costs NCCL's latency and bus bytes (tests/test_fit.py:
    # 15.2 us + 1 MiB / 100 GB/s at t = 2), and 0 s on the ideal fabric of the same links.
    group = Placement(2, 2)
    real = Fabric(8, LINK, SLOW, 8)
    # 2 MiB over t = 2: Simple 8.4 + 2 x 3.4 = 15.2 us + 2,097,152 B / 100 GB/s (LL: 7.8 us + 41.9 us; LL128: 17.8 us + 22.4 us),
    # plus the per-call launch 8.8 us (nccl.CALL_US)
    assert collective_time(Collective.ALL_REDUCE, 2097152, group, real).time == pytest.approx(15.2e-6 + 2097152 / 100e9 + 8.8e-6, rel=1e-9)
    ideal = replace(real, ideal=True)
    for op in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.POINT_TO_POINT, Collective.ALL_TO_ALL):
        assert collective_time(op, 1e9, Placement(16, 8), ideal).time == 0.0


def test_ideal_network_zeroes_every_communication_term() -> None:
    model, training = gpt(8), Training(8, 512)
    for config in (Config.of(4, 1, 1, 1, sequence_parallel=True), Config.of(1, 4, 1, 1), Config.of(1, 1, 4, 1, zero=3), Config.of(2, 2, 1, 1)):
        real, ideal = (estimate(model, config, training, cluster(4, ideal_network=flag)) for flag in (False, True))
        assert real.tp_comm.value + real.pp_comm.value + real.dp_comm.value > 0, config.label()
        assert (ideal.tp_comm.value, ideal.pp_comm.value, ideal.dp_comm.value) == (0.0, 0.0, 0.0), config.label()
        assert ideal.compute.value == real.compute.value  # compute is untouched


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ideal_network_data_parallel_speedup_is_n_when_compute_splits_evenly(gpus: int) -> None:
    # B = 4N sequences of b = 1: the single GPU runs 4N micro-batches, each DP rank 4 of the same shape.
    # With every collective free, ZeRO-1/2/3 also shard the optimizer step, so t_N = t_1 / N exactly:
    #   S = (4N tau + o) / (4 tau + o / N) = N,  E = 1.
    # Plain DP keeps a whole optimizer step on every rank: S = (4N tau + o) / (4 tau + o) < N.
    model, training, net = gpt(4), Training(4 * gpus, 512), cluster(gpus, ideal_network=True)
    tau, o = kernel_pieces(model, training, net)
    rows = rows_by_family(timed_strategy_table(model, training, net, NONE, deepest=False))
    for family in ("ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)"):
        row = rows[(family, Recompute.NONE)]
        assert row.speedup.value == pytest.approx(gpus, rel=1e-12), family
        assert row.efficiency.value == pytest.approx(1.0, rel=1e-12), family
    assert rows[("DP", Recompute.NONE)].speedup.value == pytest.approx((4 * gpus * tau + o) / (4 * tau + o), rel=1e-12)


@pytest.mark.parametrize(("gpus", "batch"), [(2, 8), (4, 16), (4, 64), (8, 32)])
def test_ideal_network_pipeline_speedup_is_the_closed_form_with_the_bubble(gpus: int, batch: int) -> None:
    # p = N stages of L/p layers (no vocabulary: no embedding or LM head, so every stage takes tau / p per
    # micro-batch), m = B micro-batches of b = 1, 1F1B: t_PP = (m + p - 1) tau / p + o / p (Narayanan et
    # al. 2021 sec. 2.2: bubble (p - 1)/m of the ideal time), against t_1 = m tau + o. Without the
    # optimizer step that is N / (1 + (p - 1)/m), the closed form; with it, within o / (m tau).
    model, training, net = gpt(8), Training(batch, 512), cluster(gpus, ideal_network=True)
    tau, o = kernel_pieces(model, training, net)
    p, m = gpus, batch
    pp = rows_by_family(timed_strategy_table(model, training, net, NONE, deepest=False))[("PP", Recompute.NONE)]
    assert (pp.config.layout.pp, pp.config.micro_batches(training)) == (p, m)
    assert pp.speedup.value == pytest.approx((m * tau + o) / ((m + p - 1) * tau / p + o / p), rel=1e-9)
    closed = gpus / (1 + (p - 1) / m)
    assert pp.speedup.value == pytest.approx(closed, rel=o / (m * tau))
    assert pp.speedup.value < gpus  # the bubble costs (p - 1)/m


# ---------------------------------------------------------------------------------------------
# The reference and the verdicts' reasons


def test_reference_is_one_gpu_of_unbounded_memory_when_one_cannot_hold_the_model() -> None:
    # 16 layers of h = 2048 in mixed precision with AdamW: 16 x 12 x 2048^2 = 805 M parameters x 16 bytes
    # = 12.9 GB of model states; on 10 GiB GPUs one GPU cannot hold it, two (ZeRO-3, TP, PP) can.
    # Issue 28: the reference used to be the fewest GPUs that hold it (PP with recomputation on 2 GPUs
    # made efficiencies above 1); now it is the single-GPU row as it would run were its memory unbounded.
    model, training = gpt(16, 2048), Training(8, 512)
    small = cluster(8, capacity=10 * 2**30)
    table = timed_strategy_table(model, training, small, NONE, deepest=False)
    rows = rows_by_family(table)
    single = rows[("single GPU", Recompute.NONE)]
    assert not single.fits and single.estimate is None  # the table still says it does not fit
    reference = table.reference
    assert reference.gpus == 1 and "were its memory unbounded" in reference.why and "GiB of 10 GiB" in reference.why
    assert reference.step.value == estimate(model, single.config, training, replace(small, gpus=1)).step.value
    for row in table.timed():  # S = t_1 / t_step, E = S / N <= 1: parallelism only adds to one GPU's work
        assert row.speedup.value == pytest.approx(reference.step.value / row.estimate.step.value, rel=1e-12)
        assert row.efficiency.value == pytest.approx(row.speedup.value / row.gpus_used, rel=1e-12)
        assert row.efficiency.value <= 1.0


def test_step_terms_add_up_and_name_the_bubble_of_a_pipeline() -> None:
    # B = 2 sequences on p = 2 stages: m = 2, a bubble of (p - 1)/m = 1/2 of the ideal time, the largest
    # term the fastest (data-parallel) row lacks.
    model, training, net = gpt(8), Training(2, 512), cluster(2)
    table = timed_strategy_table(model, training, net, NONE, deepest=False)
    for row in table.timed():
        assert sum(step_terms(row.estimate).values()) == pytest.approx(row.estimate.step.value, rel=1e-12)
    # PP (17.63 ms) is the second slowest: TP + SP (17.88 ms) pays the per-call launch of NCCL (nccl.CALL_US,
    # 8.8 us) on each of its many small collectives (docs/nccl-tuning.md sec. 14)
    assert [row.family for row in sorted(table.parallel(), key=lambda r: -r.estimate.step.value)[:2]] == ["TP + SP", "PP"]
    slowest = next(row for row in table.timed() if row.family == "PP")
    name, excess = excess_terms(slowest.estimate, table.fastest().estimate)[0]
    assert name == "bubble"
    assert slowest.estimate.bubble.value == pytest.approx(slowest.estimate.compute.value / 2, rel=1e-12)
    assert excess == pytest.approx(slowest.estimate.bubble.value, rel=1e-12)  # the fastest has no bubble


def test_recomputation_is_a_term_of_its_own() -> None:
    model, training, net = gpt(4), Training(2, 512), cluster(2)
    rows = rows_by_family(timed_strategy_table(model, training, net, deepest=False))
    full, none = rows[("DP", Recompute.FULL)].estimate, rows[("DP", Recompute.NONE)].estimate
    terms = step_terms(full)
    # full recomputation replays the forward: m t_f more kernels (m = 1 per DP rank)
    assert terms["recomputation"] == pytest.approx(full.compute.term("t_f").value, rel=1e-12)
    assert terms["compute"] == pytest.approx(step_terms(none)["compute"], rel=1e-12)
    assert excess_terms(full, none)[0][0] == "recomputation"


# ---------------------------------------------------------------------------------------------
# Through the CLI


SEED_000 = ["fit", "--model", "homework-7b", "--gpu", "a100-sxm4-80gb", "--gpus", "2", "--seq-len", "2048", "--layers", "8",
            "--batch", "8"]  # fmt: skip


def test_cli_table_carries_speedup_columns_and_derivations(run_json) -> None:
    doc = run_json(*SEED_000)
    rows = doc["tables"]["strategies"]["rows"]
    single = next(r for r in rows if r["strategy"] == "single GPU" and r["recompute"] == "none")
    assert single["speedup"] == 1.0 and single["efficiency"] == 1.0 and "reference" in single["note"]
    for row in rows:
        if row["fits"] is True:
            assert row["speedup"] == pytest.approx(single["t_step"] / row["t_step"], rel=1e-12)
            assert row["efficiency"] == pytest.approx(row["speedup"] / row["gpus"], rel=1e-12)
            assert row["tokens_per_second"] == pytest.approx(8 * 2048 / row["t_step"], rel=1e-12)
        else:
            assert row["speedup"] is None and row["t_step"] is None
    results = doc["results"]
    fastest = min((r for r in rows if r["fits"] is True and r["gpus"] == 2), key=lambda r: r["t_step"])
    assert results["best_strategy"]["value"] == fastest["t_step"]
    assert results["speedup"]["value"] == fastest["speedup"]
    assert results["max_layers"]["value"] == max(r["max_layers"] for r in rows if r["max_layers"] is not None)
    assert any(v.startswith("highest speedup: ") for v in doc["verdicts"])
    assert any(v.startswith("lowest speedup: ") for v in doc["verdicts"])


def test_cli_ideal_network_answers_seed_000_c(run_json) -> None:
    # Seed 000 (c): "Assume that in an ideal system, the latency of any communication is 0. What is the
    # speedup of model parallelism/pipeline parallelism over a single GPU?" On 2 GPUs with B = 8 (m = 8):
    # PP = 2 / (1 + 1/8) = 1.78 up to the optimizer step; ZeRO's data parallelism exactly 2.
    real, ideal = run_json(*SEED_000), run_json(*SEED_000, "--ideal-network")
    assert ideal["settings"]["network"] == "ideal" and "network" not in real["settings"]

    def speedup(doc, family):
        return next(r["speedup"] for r in doc["tables"]["strategies"]["rows"] if r["strategy"] == family and r["recompute"] == "none")

    assert speedup(ideal, "ZeRO-1") == pytest.approx(2.0, rel=1e-12)
    assert speedup(ideal, "PP") == pytest.approx(2 / (1 + 1 / 8), rel=5e-3)
    for family in ("DP", "TP", "TP + SP", "PP"):
        assert speedup(ideal, family) > speedup(real, family)  # communication only ever costs time
    assert any("--ideal-network" in a for a in ideal["assumptions"])


def test_worksheet_cites_best_strategy_max_layers_and_speedup(tmp_path: Path) -> None:
    # Today's failure: `answers: [max_layers]` for a fit calculation gave "no result named 'max_layers'".
    from parcalc.worksheet import load_worksheet, solve

    sheet = tmp_path / "fit.yaml"
    sheet.write_text(textwrap.dedent("""\
        kind: worksheet
        title: What fits on 2 GPUs
        questions:
          - id: B-4 (e)
            title: Strategy and layers on 2 GPUs
            prose: What parallelism strategy and model size (number of layers) could you fit on a 2 GPU setup?
            calculations:
              - command: fit
                inputs: {model: homework-7b, gpu: a100-sxm4-80gb, gpus: 2, seq-len: 2048, layers: 8, batch: 8}
                answers: [best_strategy, max_layers, speedup, efficiency, lowest_speedup]
        """))
    solved = solve(load_worksheet(str(sheet)))
    answers = {a.derivation.key: a.derivation for a in solved.questions[0].answers}
    assert list(answers) == ["best_strategy", "max_layers", "speedup", "efficiency", "lowest_speedup"]
    assert answers["best_strategy"].label.startswith("Fastest strategy that fits: ")
    assert answers["max_layers"].label.startswith(f"Deepest model that fits: {answers['max_layers'].value:.0f} layers with ")
    assert answers["speedup"].value == pytest.approx(answers["speedup"].term("t_ref").value / answers["best_strategy"].value, rel=1e-12)


def test_strategy_table_reads_at_80_columns() -> None:
    # Issue #14: at 80 columns no key cell (strategy, recompute, tp, pp, dp, memory, step, speedup) is cut.
    from rich.console import Console

    from parcalc.render.terminal import render_rich
    from parcalc.worksheet import Calculation, run_calculation

    result = run_calculation(Calculation("fit", {k.removeprefix("--"): v for k, v in zip(SEED_000[1::2], SEED_000[2::2], strict=True)}))
    buffer = io.StringIO()
    render_rich(result, Console(file=buffer, width=80, color_system=None))
    text = buffer.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "strategy TP + SP  recompute selective" in text and "speedup 1.8" in text
    table = result.tables[0]
    for row in table.rows:
        record = dict(zip((c.key for c in table.columns), row, strict=True))
        if record["speedup"] is not None:
            assert f"speedup {record['speedup']:.6g}" in text


def test_cli_ideal_network_hostile_values(run_error) -> None:
    assert "does not take a value" in run_error([*SEED_000, "--ideal-network=0"])
    assert "unexpected extra argument" in run_error([*SEED_000, "--ideal-network", "yes"])


def test_nothing_fits_still_fails_without_a_speedup(runner) -> None:
    result = runner.invoke(app, [*SEED_000[:-4], "--capacity", "1GiB", "--peak", "312TFLOP/s", "--format", "json"])
    assert result.exit_code == 1
    assert "nothing fits" in result.stderr
    # the table that explains it is shown, with no step time, speedup or summary for rows that cannot run
    doc = json.loads(result.stdout)
    assert doc["results"] == {}
    assert all(r["speedup"] is None and r["t_step"] is None for r in doc["tables"]["strategies"]["rows"])


def test_search_on_an_ideal_network_agrees_with_the_estimate_and_has_no_communication() -> None:
    # The ideal fabric reaches the vectorised search through the same pieces as the scalar estimate.
    import random

    from parcalc.core.fit_search import search

    model, training, net = gpt(8), Training(8, 512), cluster(4, ideal_network=True)
    evaluated = search(model, training, net).evaluated
    c = evaluated.columns
    assert len(evaluated) > 20
    assert not c["t_tp"].any() and not c["t_pp"].any() and not c["t_dp"].any()
    for i in random.Random(8).sample(range(len(evaluated)), 20):
        scalar = estimate(model, evaluated.config(i), training, net)
        assert c["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9)


def test_max_layers_derivation_brackets_the_capacity() -> None:
    # The deepest model of the layer shape (parcalc.core.fit_table.max_layers) with the memory on both
    # sides of the boundary: M(L_max) <= C < M(L_max + p), and no strategy of the table holds more.
    model, training, net = gpt(4, vocab=32000), Training(2, 1024, reserve=0.5 * 2**30), cluster(2, capacity=6 * 2**30)
    table = timed_strategy_table(model, training, net)
    deepest = next(d for d in table.summary if d.key == "max_layers")
    assert deepest.value == max(r.max_layers for r in table.rows if r.max_layers is not None)
    capacity = deepest.term("C").value
    assert deepest.term("M_L").value <= capacity < deepest.term("M_next").value
