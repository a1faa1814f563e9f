"""`parcalc scaling` (parcalc.core.scaling, issue #16 item 2): hand-derived curves on an ideal network
(Amdahl's law with the optimizer step as the serial part; weak scaling exactly 1), the property that
strong-scaling efficiency of data parallelism never rises with N, the knee, the exact split of the
lost GPU-time into the model's terms, --best against `fit --search`, the CLI's hostile values, JSON,
CSV, SVG and 80 columns."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from itertools import pairwise
from pathlib import Path

import pytest
from test_fit import cluster, gpt

from parcalc.cli import app
from parcalc.core.choices import Precision
from parcalc.core.fit import Config, Training, estimate, with_layers
from parcalc.core.scaling import Family, Mode, Rule, batch_at, check_gpu_counts, growing_terms, lost_time, scaling_curve
from parcalc.core.speedup import step_terms
from parcalc.errors import InputError

POWERS = (1, 2, 4, 8, 16, 32, 64)
GPT2 = ["scaling", "--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb", "--seq-len", "1024"]


# ---------------------------------------------------------------------------------------------
# Hand derivations


def test_strong_dp_on_an_ideal_network_is_amdahls_law() -> None:
    # Pure DP, b = 1, B = 64 sequences of 512 tokens, on the test cluster (100 TFLOP/s) with every
    # collective free (--ideal-network). One GPU runs B micro-batches of tau (forward + backward
    # kernels) and one optimizer step o; N GPUs run B/N each, and each still steps the whole optimizer
    # (no ZeRO):  t_N = (B/N) tau + o,  so  S(N) = (B tau + o) / (B tau / N + o)  (Amdahl 1967 with the
    # serial share o) and E = S / N. tau and o come from the single-GPU estimate (the kernel model).
    model, training, net = gpt(4), Training(64, 512), cluster(1, ideal_network=True)
    single = estimate(model, Config.of(1, 1, 1, 1), training, net)
    tau = single.compute.term("t_f").value + single.compute.term("t_b").value
    o = single.optimizer.value
    curve = scaling_curve(model, training, net, POWERS, Rule(Family.DP), Mode.STRONG, 64)
    assert [p.gpus for p in curve.timed()] == list(POWERS)
    for p in curve.timed():
        n = p.gpus
        assert p.estimate.step.value == pytest.approx(64 / n * tau + o, rel=1e-12)
        assert p.speedup.value == pytest.approx((64 * tau + o) / (64 * tau / n + o), rel=1e-12)
        assert p.efficiency.value == pytest.approx(p.speedup.value / n, rel=1e-12)
    # the serial share makes it bend: E(64) = (64 tau + o) / (64 (tau + o)) < 1
    assert curve.timed()[-1].efficiency.value == pytest.approx((64 * tau + o) / (64 * (tau + o)), rel=1e-12)


@pytest.mark.parametrize("per_gpu", [1, 3, 8])
def test_weak_scaling_of_pure_dp_on_an_ideal_network_is_exactly_one(per_gpu: int) -> None:
    # Weak scaling keeps B/N: every GPU runs the same micro-batches and the same optimizer step at every
    # N, and the ideal network makes the gradient all-reduce free, so t_N = t_1 and E = t_1 / t_N = 1.
    model, net = gpt(4), cluster(1, ideal_network=True)
    curve = scaling_curve(model, Training(1, 512), net, POWERS, Rule(Family.DP), Mode.WEAK, per_gpu)
    assert [p.global_batch for p in curve.points] == [per_gpu * n for n in POWERS]
    assert all(p.efficiency.value == 1.0 for p in curve.timed())
    assert [p.speedup.value for p in curve.timed()] == [float(n) for n in POWERS]
    assert curve.knee() is None


def test_weak_scaling_on_a_real_network_loses_only_to_the_gradient_sync() -> None:
    # With the network back, E = t_1 / t_N < 1 from N = 2, and the only term that grows is t_dp.
    model, net = gpt(4), cluster(1)
    curve = scaling_curve(model, Training(1, 512), net, POWERS, Rule(Family.DP), Mode.WEAK, 2)
    ref = curve.reference
    for p in curve.timed()[1:]:
        assert p.efficiency.value == pytest.approx(ref.estimate.step.value / p.estimate.step.value, rel=1e-12)
        assert p.efficiency.value < 1
        assert [name for name, _ in growing_terms(p, ref)] == ["exposed DP sync"]


def test_lost_gpu_time_splits_exactly_into_the_models_terms() -> None:
    # c(N) = N t_step / B (GPU-seconds per sequence); E = c_ref / c(N), and c(N) - c_ref is the sum of
    # every term's N t_k / B growth (the terms add up to t_step: parcalc.core.speedup.step_terms).
    model, training = gpt(8), Training(64, 512)
    for rule in (Rule(Family.DP), Rule(Family.ZERO3), Rule(Family.PP), Rule(Family.TP, sequence_parallel=True)):
        curve = scaling_curve(model, training, cluster(1), (1, 2, 4, 8), rule, Mode.STRONG, 64)
        ref = curve.reference
        c_ref = ref.gpus * ref.estimate.step.value / ref.global_batch
        assert len(curve.timed()) >= 3, rule
        for p in curve.timed():
            c = p.gpus * p.estimate.step.value / p.global_batch
            assert sum(step_terms(p.estimate).values()) == pytest.approx(p.estimate.step.value, rel=1e-12)
            assert sum(lost_time(p, ref).values()) == pytest.approx(c - c_ref, rel=1e-9, abs=1e-15)
            assert p.efficiency.value == pytest.approx(c_ref / c, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# The property of issue #16: strong-scaling efficiency of DP never rises with N


MODELS = [("gpt2-xl", None), ("bert-large", None), ("homework-7b", 4), ("llama3-8b", 4), ("llama2-7b", 2), ("gpt3-175b", 1)]


@pytest.mark.parametrize("family", [Family.DP, Family.ZERO1, Family.ZERO2, Family.ZERO3])
@pytest.mark.parametrize("name, layers", MODELS, ids=[m for m, _ in MODELS])
@pytest.mark.parametrize("gpu", ["a100-sxm4-80gb", "h100-sxm5"])
def test_strong_scaling_efficiency_of_data_parallelism_is_non_increasing(name: str, layers: int | None, family: Family, gpu: str) -> None:
    # A fixed global batch split over more data-parallel ranks: each GPU's compute falls as 1/N, while
    # its gradient sync (ring 2(N-1)/N, then across nodes) and, without ZeRO, its whole optimizer step
    # do not; so N t_N can only grow. Checked with the presets' real kernels, nodes and networks (the
    # NCCL model switches algorithm and protocol with size: a switch must not make a bigger N cheaper).
    from parcalc.commands.fit import _cluster
    from parcalc.presets import load_framework, load_model

    model = load_model(name, ())
    model = with_layers(model, layers) if layers else model
    net = _cluster("1", gpu, None, None, "bf16", None, None, None, None, None, None, None, False, load_framework("megatron", ()), ())
    for batch, seq in ((64, 512), (256, 512), (1024, 256)):
        training = Training(batch, seq, Precision.MIXED_BF16, fp32_grads=True)
        curve = scaling_curve(model, training, net, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024), Rule(family), Mode.STRONG, batch)
        e = [p.efficiency.value for p in curve.timed()]
        assert len(e) >= 3, (batch, seq)
        assert all(b <= a * (1 + 1e-12) for a, b in pairwise(e)), [(p.gpus, p.efficiency.value) for p in curve.timed()]


# ---------------------------------------------------------------------------------------------
# Reference, knee, rules


def test_knee_is_the_first_count_under_the_threshold() -> None:
    # PP on 8 layers with B = 16: the 1F1B bubble (p - 1)/m grows with the stages (7/16 at p = 8)
    model, training = gpt(8), Training(16, 512)
    curve = scaling_curve(model, training, cluster(1), POWERS, Rule(Family.PP), Mode.STRONG, 16, threshold=0.9)
    e = {p.gpus: p.efficiency.value for p in curve.timed()}
    knee = min(n for n, v in e.items() if v < 0.9)
    assert curve.knee().gpus == knee
    derivation = next(d for d in curve.summary if d.key == "knee")
    assert derivation.value == knee and derivation.term("E_min").value == 0.9
    assert derivation.term("E_knee").value == e[knee]
    assert derivation.term("E_prev").value >= 0.9
    # no knee at a threshold below every efficiency
    low = scaling_curve(model, training, cluster(1), POWERS, Rule(Family.PP), Mode.STRONG, 16, threshold=min(e.values()) / 2)
    assert low.knee() is None and "knee" not in {d.key for d in low.summary}


def test_reference_is_the_smallest_count_that_runs() -> None:
    # ZeRO shards over data-parallel ranks: none on one GPU, so the reference is N = 2, and E = S x 2 / N.
    curve = scaling_curve(gpt(4), Training(64, 512), cluster(1), POWERS, Rule(Family.ZERO2), Mode.STRONG, 64)
    assert curve.points[0].estimate is None and "one GPU has none" in curve.points[0].note
    assert curve.reference.gpus == 2
    for p in curve.timed():
        assert p.speedup.value == pytest.approx(curve.reference.estimate.step.value / p.estimate.step.value, rel=1e-12)
        assert p.efficiency.value == pytest.approx(p.speedup.value * 2 / p.gpus, rel=1e-12)


def test_fixed_rule_grows_dp_only() -> None:
    rule = Rule(Family.FIXED, tp=2, pp=2, zero=1)
    assert isinstance(rule.config(2), str) and isinstance(rule.config(6), str)
    assert isinstance(rule.config(4), str)  # dp = 1: nothing to shard
    config = rule.config(16)
    assert (config.layout.tp, config.layout.pp, config.layout.dp, config.layout.zero) == (2, 2, 4, 1)
    assert batch_at(Mode.WEAK, 3, 16) == 48 and batch_at(Mode.STRONG, 3, 16) == 3


@pytest.mark.parametrize("counts, message", [
    ([], "give GPU counts"), ([0], "at least 1"), ([3], "neither divide a node of 8"), ([1, 2, 2], "listed twice"),
    ([4, 2], "increasing order"), ([2**30], "at most"), ([12], "neither divide"),
])  # fmt: skip
def test_gpu_counts_are_checked(counts: list[int], message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_gpu_counts(counts, 8, 2**20)
    assert check_gpu_counts([1, 2, 4, 8, 16, 24], 8, 2**20) == (1, 2, 4, 8, 16, 24)


def test_best_is_fit_searchs_best(run_json) -> None:
    # --best at each N is the configuration `fit --search` ranks first there, with the same step time.
    doc = run_json(*GPT2, "--gpus", "2,4", "--batch", "16", "--best")
    for row in doc["tables"]["scaling"]["rows"]:
        fit = run_json("fit", "--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb", "--seq-len", "1024", "--gpus", str(row["gpus"]),
                       "--batch", "16", "--search")  # fmt: skip
        assert row["t_step"] == fit["results"]["t_step"]["value"]
        best = fit["tables"]["top"]["rows"][0]
        assert row["layout"].split()[0] == f"{best['tp']}x{best['pp']}x{best['dp']}"


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_json_carries_the_curve(run_json) -> None:
    doc = run_json(*GPT2, "--gpus", "1,2,4,...,256", "--batch", "64")
    rows = doc["tables"]["scaling"]["rows"]
    assert [r["gpus"] for r in rows] == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    timed = [r for r in rows if r["t_step"] is not None]
    assert [r["gpus"] for r in timed] == [1, 2, 4, 8, 16, 32, 64]  # B = 64 cannot be split over 128 ranks
    for r in timed:
        assert r["speedup"] == pytest.approx(timed[0]["t_step"] / r["t_step"], rel=1e-12)
        assert r["tokens_per_second"] == pytest.approx(64 * 1024 / r["t_step"], rel=1e-12)
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["gpus"], rel=1e-12)
    knee = next(r["gpus"] for r in timed if r["efficiency"] < 0.8)
    assert doc["results"]["knee"]["value"] == knee
    assert doc["results"]["speedup"]["value"] == timed[-1]["speedup"]
    assert doc["results"]["efficiency"]["value"] == timed[-1]["efficiency"]
    skipped = doc["tables"]["skipped"]["rows"]
    assert [r["gpus"] for r in skipped] == [128, 256] and "does not divide the global batch" in skipped[0]["reason"]
    assert doc["settings"]["mode"] == "strong" and doc["settings"]["strategy"] == "dp"
    assert any(v.startswith(f"knee at N = {knee}: ") for v in doc["verdicts"])


def test_cli_weak_ideal_network(run_json) -> None:
    doc = run_json(*GPT2, "--gpus", "1,2,4,8", "--weak", "--batch", "2", "--ideal-network")
    rows = doc["tables"]["scaling"]["rows"]
    assert [r["global_batch"] for r in rows] == [2, 4, 8, 16]
    assert all(r["efficiency"] == 1.0 for r in rows)
    assert doc["settings"]["network"] == "ideal"


def test_cli_csv(runner) -> None:
    import csv

    result = runner.invoke(app, [*GPT2, "--gpus", "1,2,4", "--batch", "8", "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["gpus"] for r in rows] == ["1", "2", "4"]
    assert "t_step" in rows[0] and "efficiency" in rows[0]  # headers are the JSON keys (units in the JSON columns)


def test_cli_svg(runner, tmp_path: Path) -> None:
    out = tmp_path / "scaling.svg"
    result = runner.invoke(app, [*GPT2, "--gpus", "1,2,4,...,64", "--batch", "64", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "speedup" in result.stdout  # the table still prints
    root = ET.fromstring(out.read_text())
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(root.findall("s:polyline", ns)) == 2  # speedup and efficiency
    assert len(root.findall("s:circle", ns)) == 2 * 7 + 1  # a point per N in each panel, the knee circled
    assert any("knee: N = 32" in (t.text or "") for t in root.findall("s:text", ns))


def test_cli_reads_at_80_columns() -> None:
    from rich.console import Console

    from parcalc.render.terminal import render_rich
    from parcalc.worksheet import Calculation, run_calculation

    result = run_calculation(Calculation("scaling", {"model": "gpt2-xl", "gpu": "a100-sxm4-80gb", "seq-len": 1024,
                                                     "gpus": "1,2,4,...,256", "batch": 64}))  # fmt: skip
    buffer = io.StringIO()
    render_rich(result, Console(file=buffer, width=80, color_system=None))
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert "┃   N ┃ TPxPPxDP ┃" in text  # the curve stays a table, not wrapped records
    assert "│  32 │ 1x1x32   │" in text


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus: "), (["--gpus", "3"], "neither divide a node of 8"), (["--gpus", ""], "comma list"),
    (["--gpus", "1e9"], "at most"), (["--gpus", "4,2,1"], "increasing order"), (["--gpus", "1,2,2,4"], "listed twice"),
    (["--gpus", "1,2,...,7"], "is not reached"), (["--gpus", "1,...,8"], "a,b,...,z"), (["--gpus", "1,x"], "--gpus: "),
    (["--gpus", "-1,2"], "--gpus: "), (["--gpus", "1,2", "--knee", "0"], "--knee"), (["--gpus", "1,2", "--knee", "1.5"], "--knee"),
    (["--gpus", "1,2", "--knee", "abc"], "--knee"), (["--gpus", "1,2", "--strategy", "foo"], "--strategy"),
    (["--gpus", "1,2", "--tp", "2", "--best"], "one way"), (["--gpus", "1,2", "--zero", "1"], "--zero"),
    (["--gpus", "1,2", "--batch", "0"], "--batch"), (["--gpus", "1,2", "--batch", "-3"], "--batch"),
    (["--gpus", "1,2", "--sequence-parallel"], "--sequence-parallel"), (["--gpus", "1,2", "--batch", "1e9", "--best"], "--batch: "), (["--gpus", "1,2", "--tp", "2", "--zero", "7"], "--zero"),
])  # fmt: skip
def test_cli_hostile_values(run_error, args: list[str], message: str) -> None:
    assert message in run_error([*GPT2, *args])


def test_cli_without_gpu_or_gpus(run_error) -> None:
    assert "--gpus" in run_error(["scaling", "--model", "gpt2-xl", "--gpu", "a100-sxm4-80gb"])
    assert "--gpu" in run_error(["scaling", "--model", "gpt2-xl", "--gpus", "1,2"])


def test_cli_nothing_runs_still_answers_and_exits_1(runner, tmp_path) -> None:
    """No GPU count runs: an infeasible request (README, exit codes: 'an infeasible request exits 1', as fit's), the
    curve's JSON still printed first for a script; with -o nothing is written."""
    import json

    result = runner.invoke(app, [*GPT2, "--gpus", "1,2", "--tp", "8", "--pp", "8", "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["results"] == {}
    assert doc["verdicts"][0].startswith("the strategy runs at none of the GPU counts")
    assert result.stderr.strip().splitlines() == ["Error: " + doc["verdicts"][0]]
    for name in ("curve.svg", "curve.json"):
        out = tmp_path / name
        result = runner.invoke(app, [*GPT2, "--gpus", "1,2", "--tp", "8", "--pp", "8", "-o", str(out)])
        assert result.exit_code == 1 and not out.exists()


def test_cli_terms_table_adds_up_to_the_step(run_json) -> None:
    # The terms table is each term of the step in GPU-seconds per sequence (N t_k / B): they add up to N t_step / B.
    doc = run_json(*GPT2, "--gpus", "1,2,4,8", "--batch", "8", "--strategy", "pp")
    steps = {r["gpus"]: r["t_step"] for r in doc["tables"]["scaling"]["rows"]}
    for row in doc["tables"]["terms"]["rows"]:
        terms = sum(v for k, v in row.items() if k.startswith("t_"))
        assert terms == pytest.approx(row["gpus"] * steps[row["gpus"]] / 8, rel=1e-12)
    assert {"t_compute", "t_bubble", "t_pp", "t_optimizer"} <= set(doc["tables"]["terms"]["rows"][-1])
