"""fit --search proposes Megatron-LM layout strings (issue #31): where the layers do not split over pp x v virtual
stages, the search evaluates the balanced layout (parcalc.core.pipeline_layout.balanced_layout) for the v the
published layouts' chunk sizes give (parcalc.core.search_layouts.proposed_layouts), and each such row carries its string.

The recipes: Megatron-Bridge @067f987df src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py (DeepSeek-V3,
61 layers + 1 MTP, PP 8 x VP 4: 'Et|(tt|)*30mL'), perf_recipes/kimi/h100/kimi_k2.py (Kimi K2, 61 layers, PP 8 x VP 4:
'Et|(tt|)*30L'), perf_recipes/llama/h100/llama3.py (Llama 3 70B, 80 layers, PP 8 x VP 5:
'Et*2|(t*2|)*34,t*3|(t*2|)*3,tL'), perf_recipes/deepseek/gb300/deepseek_v3.py (PP 2 x VP 8: 'Et*4|(t*4|)*14tmL')."""

from __future__ import annotations

import random

import numpy as np
import pytest

from parcalc.core.fit import Training
from parcalc.core.fit_search import SearchSpace, search
from parcalc.core.pipeline_layout import balanced_layout, parse_pipeline_layout, unrolled
from parcalc.core.search_layouts import NO_SPLIT, proposed_layouts
from parcalc.presets import load_model
from tests.search_rows import assert_row_is_estimate, layout_flags
from tests.test_pipeline_layout_commands import h100s

DEEPSEEK_H100 = "Et|(tt|)*30mL"
H800 = ["--model", "deepseek-v3", "--gpu", "h800-sxm5", "--gpus", "2048", "--batch", "4096", "--seq-len", "4096"]


def slots(stage: object) -> int:
    """A virtual stage's slots as balanced_layout counts them: E, each t, each m and L one each."""
    return stage.layers + stage.embedding + stage.mtp + stage.loss  # type: ignore[attr-defined]


def test_the_rule_writes_the_h100_recipes() -> None:
    # 61 + 1 + 2 = 64 slots over 32 virtual stages: 2 each, E with layer 0, m and L together last (DeepSeek-V3's recipe);
    # Kimi K2 without MTP: 63 slots, the last stage the one short, L alone (its recipe)
    assert balanced_layout(61, 1, 8, 4) == DEEPSEEK_H100
    assert balanced_layout(61, 0, 8, 4) == "Et|(tt|)*30L"
    # Megatron-LM's docs example for PP 16 x VP 2 is 'Et*3|(tt|)*29,m|L' (m and L on stages of their own); the rule
    # spells the same 32 virtual stages as the H100 recipe
    assert balanced_layout(61, 1, 16, 2) == DEEPSEEK_H100


def test_the_llama_recipe_holds_the_same_stages_in_another_order() -> None:
    # Llama 3 70B on PP 8 x VP 5: 82 slots over 40 virtual stages, two of 3 and 38 of 2; the recipe puts its 3-layer stage
    # at virtual stage 36, the rule the extra slots in the first two stages (E + 2 layers, then 3 layers)
    recipe = parse_pipeline_layout("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL", 8, 80, 0)
    ours = parse_pipeline_layout(balanced_layout(80, 0, 8, 5) or "", 8, 80, 0)
    assert sorted(slots(s) for s in recipe.stages) == sorted(slots(s) for s in ours.stages) == [2] * 38 + [3] * 2
    assert [slots(s) for s in ours.stages[:3]] == [3, 3, 2]


def test_the_gb300_recipe_counts_the_embedding_otherwise() -> None:
    # DeepSeek-V3 on PP 2 x VP 8, 4 slots a stage: the GB300 recipe 'Et*4|(t*4|)*14tmL' puts 4 layers beside E and 1 beside
    # m and L (the embedding not counted); the rule counts E as a slot, as the H100 recipes do
    assert balanced_layout(61, 1, 2, 8) == "Et*3|(t*4|)*14ttmL"
    assert unrolled("Et*3|(t*4|)*14ttmL").count("t") == unrolled("Et*4|(t*4|)*14tmL").count("t") == 61


@pytest.mark.parametrize(("layers", "mtp", "pp", "chunks"), [
    (61, 1, 8, 2), (61, 1, 5, 3), (96, 0, 7, 4), (126, 0, 16, 4), (80, 0, 32, 1), (48, 1, 2, 4), (61, 2, 4, 4),
])  # fmt: skip
def test_a_balanced_layout_is_one_megatron_reads(layers: int, mtp: int, pp: int, chunks: int) -> None:
    # Megatron-LM's checks (parse_pipeline_layout): E first, L last, every layer and MTP layer once, pp x v stages; the
    # stages' slots differ by one at most, the fuller ones first
    text = balanced_layout(layers, mtp, pp, chunks)
    assert text is not None
    split = parse_pipeline_layout(text, pp, layers, mtp)
    counts = [slots(s) for s in split.stages]
    assert len(counts) == pp * chunks and sum(counts) == layers + mtp + 2
    assert max(counts) - min(counts) <= 1 and counts == sorted(counts, reverse=True)
    assert split.stages[-1].mtp == mtp  # every MTP layer in the last virtual stage, with L (Megatron-LM: one stage, the rank's last)


def test_no_layout_where_the_mtp_layers_and_the_loss_do_not_fit_the_last_stage() -> None:
    # 64 slots over 64 stages: one each, and the last would hold m and L (two)
    assert balanced_layout(61, 1, 32, 2) is None
    assert balanced_layout(61, 1, 1, 1) is None  # one stage: nothing to lay out


def test_one_layout_per_pp_and_v_where_the_splits_run_none() -> None:
    model, cluster = load_model("deepseek-v3", ()), h100s(1024)
    # 61 layers on PP 8: the balanced uneven splits (8 on the middle stages) run 1F1B only; 4 and 2 slots a virtual stage
    # give v = 64 / (8 x 4) = 2 and 64 / (8 x 2) = 4
    assert proposed_layouts(model, 8, SearchSpace(), cluster) == ((2, "Et*3|(t*4|)*14ttmL"), (4, DEEPSEEK_H100))
    assert proposed_layouts(model, 16, SearchSpace(), cluster) == ((2, DEEPSEEK_H100),)
    assert proposed_layouts(model, 8, SearchSpace(interleaved=False), cluster) == ()  # v = 1: the splits run it
    assert proposed_layouts(model, 8, SearchSpace(max_chunks=2), cluster) == ((2, "Et*3|(t*4|)*14ttmL"),)
    # 126 layers on PP 16: the splits 6 / 8 / 8 run v = 2 (parcalc.core.search_layouts.covered_chunks); 128 slots give v = 4
    llama = load_model("llama3-405b", ())
    assert [v for v, _ in proposed_layouts(llama, 16, SearchSpace(), cluster)] == [4]
    # Llama 3 70B on PP 8: 10 layers a stage run v = 2, 5, 10 as splits; 82 slots at 4 a virtual stage give v = 3, which
    # 10 layers do not split
    assert proposed_layouts(load_model("llama3-70b", ()), 8, SearchSpace(), cluster) == ((3, "Et*3|(t*4|)*9(t*3|)*13ttL"),)
    # nothing where the splits run those v (GPT-3's 96 layers on PP 8: 12 a stage, v = 3 and 6), nor where a layout is
    # given, nor outside Megatron-LM's profile
    assert proposed_layouts(load_model("gpt3-175b", ()), 8, SearchSpace(), cluster) == ()
    assert proposed_layouts(model, 8, SearchSpace(pipeline_layout=DEEPSEEK_H100), cluster) == ()
    assert proposed_layouts(model, 8, SearchSpace(framework_split="torchtitan"), cluster) == ()


@pytest.mark.parametrize(("name", "gpus", "batch", "seq", "pp"), [
    ("deepseek-v3", 1024, 4096, 4096, None),  # PP 2 to 16, v 2 to 16, MoE layers by each layout's ranges, the MTP layer
    ("llama3-405b", 1024, 512, 8192, 16),  # 126 layers: PP 16 x VP 4, 'Et|(tt|)*62tL'
    # 96 layers on PP 5: v = 5 and 10 ('Et*3|(t*4|)*22t*3|ttL', 'Et|(tt|)*47t|L'); B = 1,920 = 15 x 128, so that m can be a
    # multiple of p (the interleaved schedule's rule)
    ("gpt3-175b", 640, 1920, 2048, 5),
])  # fmt: skip
def test_proposed_rows_are_fits_estimate_of_the_layout(name: str, gpus: int, batch: int, seq: int, pp: int | None) -> None:
    # a proposed row is parcalc.core.fit.estimate's on its Config, the layout string in it: the same memory, and the
    # same step where it fits
    model, training, cluster = load_model(name, ()), Training(batch, seq, flash_attention=True), h100s(gpus)
    found = search(model, training, cluster, SearchSpace(pp=pp))
    columns = found.evaluated.columns
    proposed = np.flatnonzero(columns["pipeline_layout"] >= 0).tolist()
    fitting = [i for i in proposed if columns["fits"][i]]
    assert proposed and fitting
    rng = random.Random(name)
    for i in rng.sample(proposed, min(10, len(proposed))) + rng.sample(fitting, min(10, len(fitting))):
        config = assert_row_is_estimate(found, i, model, training, cluster)
        text = config.layout.pipeline_layout
        assert text is not None and text == balanced_layout(model.layers, model.mtp_layers, config.layout.pp, config.layout.chunks)
    # the rows without a layout are the splits', as before
    assert (columns["pipeline_layout"] == -1).any() if pp is None else True


@pytest.mark.parametrize(("name", "layout", "pp", "ranks"), [
    ("llama3-70b", "Ett|(t*3|)*17(tt|)*13tL", 32, (2,) + (3,) * 17 + (2,) * 13 + (1,)),
    ("deepseek-v3", "Et*3|(tt|)*29,m|L", 16, (5,) + (4,) * 13 + (2, 2)),  # Megatron-LM's docs example, m and L apart
])  # fmt: skip
def test_a_given_layout_whose_ranks_are_no_first_middle_last_split_is_searched(name: str, layout: str, pp: int,
                                                                               ranks: tuple[int, ...]) -> None:  # fmt: skip
    # the search held a --pipeline-layout to a first / even middle / last split ('ranks are not a first / even middle /
    # last split'); its arrays now take every rank's layers from the layout, and each row is fit's estimate
    model, training, cluster = load_model(name, ()), Training(512 if pp == 32 else 4096, 4096, flash_attention=True), h100s(1024)
    assert parse_pipeline_layout(layout, pp, model.layers, model.mtp_layers).stage_layers() == ranks
    found = search(model, training, cluster, SearchSpace(pipeline_layout=layout, pp=pp))
    columns = found.evaluated.columns
    assert len(found.evaluated) and set(columns["pp"].tolist()) == {pp}
    fitting = np.flatnonzero(columns["fits"]).tolist()
    assert fitting
    rng = random.Random(layout)
    for i in rng.sample(range(len(found.evaluated)), 8) + rng.sample(fitting, min(8, len(fitting))):
        assert assert_row_is_estimate(found, i, model, training, cluster).layout.pipeline_layout == layout


def test_the_deepseek_recipe_is_evaluated_and_pinning_a_proposed_row_gives_that_row(run_json) -> None:
    result = run_json("fit", *H800, "--search", "--pp", "8")
    rows = result["tables"]["configurations"]["rows"]
    recipe = [r for r in rows if r["pipeline_layout"] == DEEPSEEK_H100]
    assert recipe and all(r["pp"] == 8 and r["chunks"] == 4 and r["schedule"] == "interleaved" for r in recipe)
    assert any(r["fits"] for r in recipe)
    assert {r["pipeline_layout"] for r in rows} == {None, "Et*3|(t*4|)*14ttmL", DEEPSEEK_H100}
    # the fastest row here is a proposed layout (v = 2), and the flags that pin it carry its string
    top = result["tables"]["top"]["rows"][0]
    assert top["pipeline_layout"] == "Et*3|(t*4|)*14ttmL" and top["chunks"] == 2, top
    assert "--pipeline-layout 'Et*3|(t*4|)*14ttmL'" in " ".join(result["verdicts"])
    for row in (top, min((r for r in recipe if r["fits"]), key=lambda r: r["t_step"])):
        flags = layout_flags(row, 61)
        at = flags.index("--micro-batches")  # fit takes m from B / (dp b)
        pinned = run_json("fit", *H800, *flags[:at], *flags[at + 2:])["results"]
        assert pinned["total"]["value"] == pytest.approx(row["memory"], rel=1e-9)
        assert pinned["t_step"]["value"] == pytest.approx(row["t_step"], rel=1e-9)


def test_a_pp_with_no_split_but_a_layout_is_searched(run_json) -> None:
    # Llama 3 70B's 80 layers on PP 32: no first / even middle / last split holds at most ceil(80 / 32) = 3 layers a stage
    # (30 middle stages of 3 are 90), so the search rejected PP 32; its v = 1 layout deals 82 slots as 18 stages of 3 and
    # 14 of 2: 'Ett|(t*3|)*17(tt|)*13tL'
    result = run_json("fit", "--model", "llama3-70b", "--gpu", "h100-sxm5", "--gpus", "256", "--batch", "512", "--seq-len", "4096",
                      "--search", "--pp", "32")  # fmt: skip
    rows = result["tables"]["configurations"]["rows"]
    assert rows and {r["pipeline_layout"] for r in rows} == {"Ett|(t*3|)*17(tt|)*13tL"}
    assert all(r["chunks"] == 1 and r["first_stage_layers"] == 2 and r["last_stage_layers"] == 1 for r in rows)
    assert not any(reason == NO_SPLIT for reason, _ in result["tables"]["rejected"]["rows"])


def test_other_frameworks_get_no_layout(run_json) -> None:
    # --pipeline-layout is Megatron-LM's flag: DeepSpeed's pipeline engine splits the layers its own way
    result = run_json("fit", *H800, "--search", "--pp", "8", "--framework", "deepspeed")
    assert all(r.get("pipeline_layout") is None for r in result["tables"]["configurations"]["rows"])
