"""--pipeline-layout in `bubble`, `flops` and `fit --search` (issue #31): Megatron-LM's layout strings
(megatron/core/transformer/pipeline_parallel_layer_layout.py @d98e8a64dd) where a layout is given.

The layouts are the issue's: DeepSeek-V3's Megatron-Bridge recipe `Et|(tt|)*30mL` on PP 8 x v 4 (rank 0: 1 + 2 + 2 + 2
layers, ranks 1-6: 2 x 4, rank 7: 2 + 2 + 2 and the MTP layer; tests/test_pipeline_layout.py::test_deepseek_v3_recipe),
Megatron's documented `Et*3|(tt|)*29m|L`, and torchtitan's Llama 3.1 405B split 15 + 6 x 16 + 15, 1F1B and interleaved as
7 + 14 x 8 + 7 virtual stages (torchtitan Dec 2024 Table 5)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from parcalc.cli import app
from parcalc.core.choices import Recompute
from parcalc.core.fit import Cluster, Training, estimate
from parcalc.core.fit_search import SearchSpace, search
from parcalc.core.pipeline import Schedule
from parcalc.core.pipeline_layout import virtual_stage_count
from parcalc.presets import load_gpu, load_link, load_model
from parcalc.results.bubble import outcome, request
from parcalc.results.flops import from_flags as flops_from_flags

DEEPSEEK = "Et|(tt|)*30mL"
DEEPSEEK_DOCS = "Et*3|(tt|)*29m|L"
TITAN_1F1B = "Et*15|(t*16|)*6t*15L"
TITAN_V2 = "Et*7|(t*8|)*14t*7L"


def one_line_error(runner, args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    out = result.stdout + result.stderr
    assert result.exit_code == 2, out
    assert out.startswith("Error:") and out.count("\n") == 1 and message in out, out


# ---------------------------------------------------------------------------------------------
# bubble


def test_bubble_runs_the_deepseek_recipe_interleaved_with_each_chunk_its_own_layers() -> None:
    # PP 8 x v 4 from the string alone; t_f = 12 ms per layer, t_b = 2 t_f (bubble's default): a device's busy time is
    # its layers x m x 3 t_f, the MTP layer m counted as one layer (7, 8 x 6, 7)
    shown = outcome(request("8", "64", t_forward="12ms", pipeline_layout=DEEPSEEK))
    analysis = shown.analysis
    assert analysis.schedule is Schedule.INTERLEAVED and analysis.chunks == 4
    assert analysis.chunk_layers == ((1, 2, 2, 2),) + ((2, 2, 2, 2),) * 6 + ((2, 2, 2, 1),)
    timeline = analysis.timeline
    assert timeline is not None
    for device, layers in enumerate((7, 8, 8, 8, 8, 8, 8, 7)):
        assert timeline.busy[device] == pytest.approx(layers * 64 * 3 * 0.012, rel=1e-12)
    # every operation takes its own chunk's layers: rank 0's chunk 0 (E and one layer) one layer's 12 ms, its chunk 1 two
    forward = {(e.device, e.chunk): e.end - e.start for e in timeline.events if e.op == "F"}
    assert forward[(0, 0)] == pytest.approx(0.012) and forward[(0, 1)] == pytest.approx(0.024) and forward[(7, 3)] == pytest.approx(0.012)
    assert ("pipeline_layout", DEEPSEEK) in shown.result.settings
    assert "unequal chunks" in shown.result.verdicts[-1]


@pytest.mark.parametrize(("layout", "pp", "flags"), [
    (TITAN_1F1B, "8", {"layers": "126", "first_stage_layers": "15", "last_stage_layers": "15"}),  # v = 1: Megatron's first/last split
    ("Et*4|t*4|t*4|t*4L", "2", {"layers": "16", "schedule": "interleaved", "chunks": "2"}),  # even chunks: the even interleaved split
])  # fmt: skip
def test_bubble_layout_equals_the_split_it_spells(layout: str, pp: str, flags: dict) -> None:
    by_layout = outcome(request(pp, "16", t_forward="10ms", pipeline_layout=layout)).analysis
    by_split = outcome(request(pp, "16", t_forward="10ms", **flags)).analysis
    assert by_layout.timeline is not None and by_split.timeline is not None
    assert by_layout.timeline.makespan == pytest.approx(by_split.timeline.makespan, rel=1e-12)
    assert by_layout.timeline.busy == pytest.approx(by_split.timeline.busy, rel=1e-12)
    assert by_layout.closed_form("bubble_time").value == pytest.approx(by_split.closed_form("bubble_time").value, rel=1e-12)


@pytest.mark.parametrize(("extra", "message"), [
    (["--pp", "8", "--pipeline-layout", "Et|(tt|)*29mL"], "31 virtual stages"),  # does not add up over pp
    (["--pp", "2", "--pipeline-layout", "Etx|tL"], "unknown letter 'x'"),
    (["--pp", "2", "--pipeline-layout", "Et||tL"], "virtual stage 2 of 3 holds nothing"),
    (["--pp", "2", "--pipeline-layout", "Et|t|t|tL", "--chunks", "3"], "are 2 chunks per device, not --chunks 3"),
    (["--pp", "2", "--pipeline-layout", "Et|t|t|tL", "--schedule", "zb-h1"], "run the interleaved schedule"),
    (["--pp", "2", "--pipeline-layout", "Ett|ttL", "--layers", "4"], "gives every stage's layers"),
    (["--pp", "2", "--pipeline-layout", "E|tttL"], "pipeline rank 1 holds no layer"),
    (["--pp", "2", "--pipeline-layout", "Ett|ttL", "--schedule", "dualpipev"], "DualPipeV"),
])  # fmt: skip
def test_bubble_layout_errors_are_one_line(runner, extra: list[str], message: str) -> None:
    one_line_error(runner, ["bubble", "--micro-batches", "8", *extra], message)


# ---------------------------------------------------------------------------------------------
# flops


def stage_rows(result) -> list[tuple]:
    return list(next(t for t in result.tables if t.key == "stage_flops").rows)


def hardware(result) -> float:
    return next(d for d in result.derivations if d.key == "hardware_flops").value


@pytest.mark.parametrize("recompute", [Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL])
@pytest.mark.parametrize(("model", "layout"), [("deepseek-v3", DEEPSEEK), ("deepseek-v3", DEEPSEEK_DOCS), ("llama3-405b", TITAN_V2)])
def test_flops_ranks_add_up_to_the_iteration(model: str, layout: str, recompute: Recompute) -> None:
    result = flops_from_flags(model=model, batch="64", seq_len="4096", causal=True, pp="8", pipeline_layout=layout, recompute=recompute)
    rows = stage_rows(result)
    assert len(rows) == 8
    assert sum(row[2] for row in rows) == pytest.approx(hardware(result), rel=1e-12)


@pytest.mark.parametrize(("model", "layout", "first", "last"), [
    ("llama3-405b", TITAN_1F1B, "15", "15"),
    ("deepseek-v3", "Et*7|(t*8|)*6t*6mL", "7", "6"),  # MoE: 3 dense layers, then MoE; the MTP module and the LM head on the last rank
])  # fmt: skip
def test_flops_one_chunk_layout_equals_the_first_last_split(model: str, layout: str, first: str, last: str) -> None:
    by_layout = stage_rows(flops_from_flags(model=model, batch="32", seq_len="8192", causal=True, pp="8", pipeline_layout=layout))
    by_split = stage_rows(flops_from_flags(model=model, batch="32", seq_len="8192", causal=True, pp="8", first_stage_layers=first,
                                           last_stage_layers=last))  # fmt: skip
    assert [row[2] for row in by_layout] == pytest.approx([row[2] for row in by_split], rel=1e-12)


def test_flops_deepseek_mtp_sits_where_its_m_is() -> None:
    # Megatron's documented layout: rank 14 of 16 holds the MTP layer in its chunk 2, rank 15 the loss (and the LM head)
    result = flops_from_flags(model="deepseek-v3", batch="64", seq_len="4096", causal=True, pp="16", pipeline_layout=DEEPSEEK_DOCS)
    rows = stage_rows(result)
    assert rows[14][1] == "2 + 0 + MTP" and rows[15][1] == "2 + 0"
    middle = rows[13][2]  # 4 MoE layers
    assert rows[14][2] > middle / 2 and rows[15][2] > middle / 2  # 2 MoE layers, plus the MTP module / the LM head


@pytest.mark.parametrize(("extra", "message"), [
    (["--pipeline-layout", DEEPSEEK], "give --pp too"),
    (["--pp", "8", "--pipeline-layout", "Et|t|(tt|)*29mL"], "the layout holds 60 transformer layers"),
    (["--pp", "8", "--pipeline-layout", "Et|(tt|)*30L"], "the layout holds 0 MTP layers"),
    (["--pp", "8", "--pipeline-layout", DEEPSEEK, "--first-stage-layers", "7"], "gives every stage's layers"),
])  # fmt: skip
def test_flops_layout_errors_are_one_line(runner, extra: list[str], message: str) -> None:
    one_line_error(runner, ["flops", "--model", "deepseek-v3", "--batch", "64", "--seq-len", "4096", *extra], message)


# ---------------------------------------------------------------------------------------------
# fit --search


H100 = load_gpu("h100-sxm5", ())


def h100s(gpus: int) -> Cluster:
    return Cluster(gpus=gpus, gpus_per_node=8, peak=989.4e12, capacity=H100.memory_capacity.value, intra=load_link("nvlink4", ()),
                   inter=load_link("ib-ndr", ()))  # fmt: skip


@pytest.mark.parametrize(("model", "layout", "batch", "seq"), [
    ("deepseek-v3", DEEPSEEK, 4096, 4096), ("deepseek-v3", DEEPSEEK_DOCS, 4096, 4096),
    ("llama3-405b", TITAN_V2, 512, 8192), ("llama3-405b", TITAN_1F1B, 512, 8192),
])  # fmt: skip
def test_search_with_a_layout_agrees_with_the_scalar_estimate(model: str, layout: str, batch: int, seq: int) -> None:
    # the search's arrays take the layout's own stages (MoE layers per range, the MTP rank) through the scalar cores, so
    # each sampled row is parcalc.core.fit.estimate's on the same Config, the layout string in it
    shape, training, cluster = load_model(model, ()), Training(batch, seq, flash_attention=True), h100s(1024)
    found = search(shape, training, cluster, SearchSpace(pipeline_layout=layout))
    evaluated = found.evaluated
    fitting = np.flatnonzero(evaluated.columns["fits"]).tolist()
    assert len(evaluated) > 100 and fitting
    rng = random.Random(layout)
    for i in rng.sample(range(len(evaluated)), 12) + rng.sample(fitting, 12):
        config = evaluated.config(i)
        assert config.layout.pipeline_layout == layout and config.layout.chunks * config.layout.pp == virtual_stage_count(layout)
        scalar = estimate(shape, config, training, cluster)
        assert evaluated.columns["memory"][i] == pytest.approx(scalar.total_memory, rel=1e-9), config.label()
        if evaluated.columns["fits"][i]:
            assert evaluated.columns["t_step"][i] == pytest.approx(scalar.step.value, rel=1e-9), config.label()


def test_search_keeps_the_layout_and_rejects_pp_that_do_not_split_it() -> None:
    shape = load_model("deepseek-v3", ())
    found = search(shape, Training(4096, 4096, flash_attention=True), h100s(1024), SearchSpace(pipeline_layout=DEEPSEEK))
    columns = found.evaluated.columns
    # 32 virtual stages: pp 2, 4, 8, 16 with v = 16, 8, 4, 2 (pp 32: its last rank holds m and L only, no transformer layer)
    assert set(zip(columns["pp"].tolist(), columns["chunks"].tolist(), strict=True)) <= {(2, 16), (4, 8), (8, 4), (16, 2)}
    assert found.rejected["pp does not split the --pipeline-layout's 32 virtual stages"] > 0
    assert found.rejected["a rank holds no transformer layer under the --pipeline-layout (the search's arrays time a stage by its layers)"] > 0


def test_fit_search_with_a_layout_from_the_command_line(run_json, runner) -> None:
    result = run_json("fit", "--model", "deepseek-v3", "--gpu", "h800-sxm5", "--gpus", "2048", "--batch", "15360", "--seq-len", "4096",
                      "--search", "--pp", "8", "--pipeline-layout", DEEPSEEK)  # fmt: skip
    assert "pipeline layout Et|(tt|)*30mL" in json.dumps(result["verdicts"])
    rows = result["tables"]["top"]["rows"]
    assert rows and all(row["pp"] == 8 and row["chunks"] == 4 and row["schedule"] == "interleaved" for row in rows), rows[0]
    one_line_error(runner, ["fit", "--model", "deepseek-v3", "--gpu", "h800-sxm5", "--gpus", "2048", "--batch", "15360", "--seq-len", "4096",
                            "--search", "--pp", "3", "--pipeline-layout", DEEPSEEK], "pp does not split the --pipeline-layout")  # fmt: skip
    one_line_error(runner, ["fit", "--model", "deepseek-v3", "--gpu", "h800-sxm5", "--gpus", "2048", "--batch", "15360", "--seq-len", "4096",
                            "--search", "--pipeline-layout", "Et|(tt|)*30L"], "the layout holds 0 MTP layers")  # fmt: skip
