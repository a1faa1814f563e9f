"""torchtitan's own pipeline split (parcalc.core.pipeline_torchtitan): against torchtitan's function as written, against
values worked by hand from its formula, and through memory and fit under --framework torchtitan."""

from __future__ import annotations

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.layout import Layout
from parcalc.core.pipeline_layout import parse_pipeline_layout
from parcalc.core.pipeline_torchtitan import configurable, layout_text, split_layout, virtual_stage_layers
from parcalc.errors import InputError


def _torchtitan_fqns(num_stages: int, num_layers: int, input_weight: int = 1, output_weight: int = 1) -> list[list[str]]:
    """pytorch/torchtitan @b5bcd76c torchtitan/distributed/pipeline_parallel.py, _generate_llm_fqn_per_model_part, as written
    there (its docstring and messages left out; BSD-3-Clause, Copyright (c) Meta Platforms, Inc. and affiliates)."""
    if num_stages < 1:
        raise ValueError("Number of stages must be at least 1")
    if num_stages == 1:
        layer_names = [f"layers.{i}" for i in range(num_layers)]
        return [["tok_embeddings"] + layer_names + ["norm", "lm_head"]]
    num_effective_layers = num_layers + input_weight + output_weight
    if num_stages > num_effective_layers:
        raise ValueError("stages > effective layers")
    layers_per_stage = num_effective_layers // num_stages
    extra_layers = num_effective_layers % num_stages
    if layers_per_stage == 0:
        raise ValueError("empty stages")
    if input_weight > layers_per_stage:
        raise ValueError("input_weight exceeds minimum layers per stage")
    if output_weight > layers_per_stage:
        raise ValueError("output_weight exceeds minimum layers per stage")
    module_names_per_stage = []
    current_layer = 0
    for stage_idx in range(num_stages):
        stage_modules = []
        effective_layers_for_stage = layers_per_stage
        if stage_idx < extra_layers:
            effective_layers_for_stage += 1
        if stage_idx == 0:
            stage_modules.append("tok_embeddings")
            remaining_layers_for_stage = effective_layers_for_stage - input_weight
            for _ in range(remaining_layers_for_stage):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
        elif stage_idx == num_stages - 1:
            remaining_layers_for_stage = effective_layers_for_stage - output_weight
            for _ in range(remaining_layers_for_stage):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
            stage_modules.extend(["norm", "lm_head"])
        else:
            for _ in range(effective_layers_for_stage):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
        module_names_per_stage.append(stage_modules)
    return module_names_per_stage


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 8, 16, 24, 32, 63])
@pytest.mark.parametrize("layers", [6, 16, 32, 61, 80, 126])
def test_the_split_is_torchtitans_own(stages: int, layers: int) -> None:
    """Every (stages, layers) pair: the same layers per stage as torchtitan's function, or an error where it raises one."""
    try:
        fqns = _torchtitan_fqns(stages, layers)
    except ValueError:
        with pytest.raises(InputError, match="torchtitan's pipeline split"):
            virtual_stage_layers(stages, layers)
        return
    assert virtual_stage_layers(stages, layers) == tuple(sum(n.startswith("layers.") for n in names) for names in fqns)


def _ranks(stages: tuple[int, ...], pp: int, v_shape: bool = False) -> tuple[int, ...]:
    return parse_pipeline_layout(layout_text(stages), pp, sum(stages), 0, v_shape).stage_layers()


def test_cases_worked_by_hand() -> None:
    # L + 2 effective layers, q = floor((L + 2) / S) a stage, one more on the first (L + 2) mod S; the first and last less one
    # Llama 3 405B on 8 x 2: 128 / 16 = 8, r = 0: 7 + 14 x 8 + 7; rank r runs r and r + 8: 15 + 6 x 16 + 15
    assert virtual_stage_layers(16, 126) == (7,) + (8,) * 14 + (7,)
    assert _ranks(virtual_stage_layers(16, 126), 8) == (15,) + (16,) * 6 + (15,)
    assert layout_text(virtual_stage_layers(16, 126)) == "Et*7|(t*8|)*14t*7L"  # the layout tests/test_pipeline_layout.py writes
    # 126 on 8 x 1 (1F1B): 128 / 8 = 16: 15 + 6 x 16 + 15
    assert virtual_stage_layers(8, 126) == (15,) + (16,) * 6 + (15,)
    # 32 on 4 x 2: 34 / 8 = 4 r 2: 5 - 1, 5, 4, 4, 4, 4, 4, 4 - 1; ranks (r, r + 4): 8, 9, 8, 7
    assert virtual_stage_layers(8, 32) == (4, 5, 4, 4, 4, 4, 4, 3)
    assert _ranks(virtual_stage_layers(8, 32), 4) == (8, 9, 8, 7)
    # 80 on 8 x 1: 82 / 8 = 10 r 2: 11 - 1, 11, 10 x 5, 10 - 1, uneven although 8 divides 80 (Megatron: 10 each)
    assert virtual_stage_layers(8, 80) == (10, 11, 10, 10, 10, 10, 10, 9)
    # DeepSeek-V3's 61 on 8: 63 / 8 = 7 r 7: 8 - 1, 6 x 8, 7 - 1
    assert virtual_stage_layers(8, 61) == (7,) + (8,) * 6 + (6,)
    # 61 on 8 x 2: 63 / 16 = 3 r 15: 4 - 1, 14 x 4, 3 - 1; ranks (r, r + 8): 3 + 4, 6 x 8, 4 + 2
    assert virtual_stage_layers(16, 61) == (3,) + (4,) * 14 + (2,)
    assert _ranks(virtual_stage_layers(16, 61), 8) == (7,) + (8,) * 6 + (6,)
    # 61 in the V of pp 16 (32 stages): 63 / 32 = 1 r 31: 2 - 1, 30 x 2, 1 - 1 (the last stage only the norm and head);
    # rank 0 runs stages 0 and 31: 1 layer, ranks 1-15 two stages of 2
    assert virtual_stage_layers(32, 61) == (1,) + (2,) * 30 + (0,)
    assert _ranks(virtual_stage_layers(32, 61), 16, v_shape=True) == (1,) + (4,) * 15


def test_where_torchtitan_refuses() -> None:
    with pytest.raises(InputError, match="16 virtual stages exceed the 6 effective layers"):
        virtual_stage_layers(16, 4)
    with pytest.raises(InputError, match="exceeds minimum layers per stage"):
        virtual_stage_layers(4, 2, input_weight=2)  # 6 / 4 = 1 effective layer a stage, below the embedding's 2


def test_the_split_fills_the_layout_only_when_none_is_given() -> None:
    split = split_layout(Layout(pp=8, chunks=2), 126)
    assert split.pipeline_layout == "Et*7|(t*8|)*14t*7L" and split.split_by == "torchtitan"
    for given in (Layout(pp=1), Layout(pp=8, first_stage_layers=15, last_stage_layers=15), Layout(pp=8, pipeline_layout="Et*63|t*63L"),
                  Layout(pp=2, embedding_in_split=True)):  # fmt: skip
        assert split_layout(given, 126) is given
    with pytest.raises(InputError, match="torchtitan trains the multi-token-prediction module without pipeline parallelism"):
        split_layout(Layout(pp=8), 61, mtp_layers=1)


_405B = ["--model", "llama3-405b", "--framework", "torchtitan", "--seq-len", "8192"]


def test_memory_shows_torchtitans_split(run_json) -> None:
    result = run_json("memory", *_405B, "--tp", "8", "--pp", "8", "--dp", "8", "--schedule", "interleaved", "--chunks", "2")
    layers = result["results"]["stage_layers"]  # stage 1's: its chunks 7 + 8 (test_cases_worked_by_hand)
    assert layers["label"] == "Layers on stage 1 (torchtitan's split of 126 layers over 16 virtual stages)"
    assert layers["value"] == 15 and layers["substituted"] == "7 + 8" and "_generate_llm_fqn_per_model_part" in layers["source"]


def test_fit_runs_the_405b_line_of_issue_31(run_json) -> None:
    """Issue #31's line: refused before ('pp x chunks = 8 x 2 does not divide the 126 layers'); now torchtitan's
    15 + 6 x 16 + 15 ranks, as --pipeline-layout 'Et*7|(t*8|)*14t*7L' gives them (the same step time)."""
    line = ["fit", *_405B, "--gpu", "h100-sxm5", "--gpus", "512", "--tp", "8", "--pp", "8", "--chunks", "2", "--batch", "64",
            "--micro-batch", "1"]  # fmt: skip
    auto = run_json(*line)
    assert any("interleaved 1F1B v = 2, torchtitan's split 15 + 6 x 16 + 15 layers" in v for v in auto["verdicts"])
    written = run_json(*line, "--pipeline-layout", "Et*7|(t*8|)*14t*7L")
    assert auto["results"]["t_step"]["value"] == pytest.approx(written["results"]["t_step"]["value"], rel=1e-12)


def test_torchtitan_405b_published_rows_without_a_split_given(run_json) -> None:
    """torchtitan's Table 5 rows (tests/test_pipeline_layout.py, _TT_405B: 512 H100, FSDP 8 x TP 8 x PP 8, 1F1B 100 and
    interleaved 1F1B 128 TPS/GPU, published, held out) with no split given: torchtitan's own split makes them, the same
    step as the split written out (--first-stage-layers 15 --last-stage-layers 15; --pipeline-layout 'Et*7|(t*8|)*14t*7L'),
    within issue #31's 30 % (91.3 / 100 and 118.6 / 128 when written)."""
    from tests.test_pipeline_layout import _TT_405B

    def tps(*extra: str) -> float:
        result = run_json(*_TT_405B, *extra)
        assert result["fits"]
        return 256 * 8192 / (result["results"]["t_step"]["value"] * 512)

    one_f_one_b, interleaved = tps(), tps("--chunks", "2")
    assert one_f_one_b == pytest.approx(tps("--first-stage-layers", "15", "--last-stage-layers", "15"), rel=1e-12)
    assert interleaved == pytest.approx(tps("--pipeline-layout", "Et*7|(t*8|)*14t*7L"), rel=1e-12)
    assert abs(one_f_one_b / 100 - 1) <= 0.30 and abs(interleaved / 128 - 1) <= 0.30


def test_the_strategy_table_and_its_deepest_model_split_as_torchtitan() -> None:
    """fit's strategy table under --framework torchtitan: the PP row of Llama 3 8B on 8 GPUs holds torchtitan's 4, 5, 4, 4,
    4, 4, 4, 3 (34 effective layers on 8 stages, test_cases_worked_by_hand's rule), not Megatron's 4 each; at another depth
    (the deepest-model column) the split is made again for that depth: 64 layers, 66 / 8 = 8 r 2: 8, 9, 8 x 5, 7."""
    from parcalc.core.fit import Config
    from parcalc.core.fit_table import at_depth, framework_split
    from parcalc.presets import load_framework, load_model

    model, titan = load_model("llama3-8b"), load_framework("torchtitan")
    config = framework_split(model, Config.of(1, 8, 1, 1), titan)
    assert config.layout.stage_layers(32) == (4, 5, 4, 4, 4, 4, 4, 3) and config.layout.split_by == "torchtitan"
    deeper, split = at_depth(model, config, 64, titan)
    assert deeper.layers == 64 and split.layout.stage_layers(64) == (8, 9, 8, 8, 8, 8, 8, 7)
    assert framework_split(model, Config.of(1, 8, 1, 1), load_framework("megatron")).layout.pipeline_layout is None


def test_the_search_splits_as_torchtitan() -> None:
    """fit --search --framework torchtitan: Llama 3 405B on PP 8 runs torchtitan's 15 + 6 x 16 + 15, interleaved too (v = 2:
    its 7 + 14 x 8 + 7 virtual stages, rank r holding r and r + 8), which Megatron's rule refuses (v must divide 15 and 16:
    its search interleaves only its 14 + 6 x 16 + 16 and 16 + 6 x 16 + 14 splits);
    each row is the configuration fit times (the same step as the row), and a split whose middle ranks differ (Llama 3 70B's
    80 layers on 8: 10, 11, 10 x 5, 9) is timed as torchtitan splits it, not as Megatron's even split (before issue #31's
    change: rejected, 'torchtitan's split is not a first / even middle / last one')."""
    from parcalc.core.fit import estimate
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    common = {"search": True, "gpus": "512", "gpu": ["h100-sxm5-96gb-hbm2e"], "seq_len": "8192", "batch": "256", "tp": "8", "pp": "8",
              "precision": Precision.FP8, "compile_": True, "recompute": [Recompute.FULL]}  # fmt: skip
    titan = request(model="llama3-405b", framework="torchtitan", **common)
    found = search(titan.model, titan.training, titan.cluster, titan.space)
    c = found.evaluated.columns
    chunks = set(c["chunks"].tolist())
    assert {1, 2} <= chunks and set(c["first_stage_layers"].tolist()) == {15} and set(c["last_stage_layers"].tolist()) == {15}
    row = next(int(i) for i in found.ranked() if c["chunks"][i] == 2)
    config = found.evaluated.config(row)
    assert config.layout.pipeline_layout == "Et*7|(t*8|)*14t*7L" and config.layout.split_by == "torchtitan"
    assert c["t_step"][row] == pytest.approx(estimate(titan.model, config, titan.training, titan.cluster).step.value, rel=1e-9)
    megatron = request(model="llama3-405b", framework="megatron", **{**common, "compile_": False})  # Megatron-LM compiles nothing
    m = search(megatron.model, megatron.training, megatron.cluster, megatron.space).evaluated.columns
    assert set(m["first_stage_layers"][m["chunks"] == 2].tolist()) == {14, 16}  # Megatron's v = 2 only on 14 / 16 / 16 splits
    seventy = request(model="llama3-70b", framework="torchtitan", **common)
    timed = search(seventy.model, seventy.training, seventy.cluster, seventy.space)
    s = timed.evaluated.columns
    assert len(timed.evaluated) and set(s["first_stage_layers"].tolist()) == {10} and set(s["last_stage_layers"].tolist()) == {9}
    row = next(int(i) for i in timed.ranked())
    config = timed.evaluated.config(row)
    assert config.layout.stage_layers(80) == (10, 11, 10, 10, 10, 10, 10, 9) and config.layout.split_by == "torchtitan"
    assert s["t_step"][row] == pytest.approx(estimate(seventy.model, config, seventy.training, seventy.cluster).step.value, rel=1e-9)


def test_presets_show_names_the_split(run_json) -> None:
    rows = run_json("presets", "show", "torchtitan")["tables"]["fields"]["rows"]
    split = [r for r in rows if r["field"] == "pipeline_split"]
    assert split and split[0]["value"] == "torchtitan" and "_generate_llm_fqn_per_model_part" in split[0]["source"]


def test_bad_splits_are_one_line(run_error) -> None:
    line = run_error(["memory", "--model", "llama3-8b", "--pp", "64", "--framework", "torchtitan", "--seq-len", "4096"])
    assert line.startswith("Error: --pp 64: torchtitan's pipeline split: 64 virtual stages exceed the 34 effective layers")
    line = run_error(["fit", "--model", "deepseek-v3", "--gpu", "h100-sxm5", "--gpus", "1024", "--tp", "8", "--pp", "8", "--framework",
                      "torchtitan", "--seq-len", "4096", "--batch", "1024"])  # fmt: skip
    assert "torchtitan trains the multi-token-prediction module without pipeline parallelism only" in line


@pytest.mark.parametrize("layers", [32, 61, 80, 126])
def test_the_stage_counts_torchtitan_can_be_asked_for(layers: int) -> None:
    """torchtitan/distributed/pipeline_parallel.py @b5bcd76c _get_pipeline_metadata: pipeline_parallel_layers_per_stage k
    gives num_virtual_stages = ceil((L + input_weight + output_weight) / k); every k tried, the counts it reaches are the
    ones configurable() accepts (70B: 82, 41, 28, 21, 17, 14, 12, 11, ..., never 36)."""
    effective = layers + 2
    reached = {-(-effective // k) for k in range(1, effective + 1)}
    assert {s for s in range(1, effective + 1) if configurable(s, layers)} == reached
    if layers == 80:
        assert 36 not in reached and {82, 41, 28, 21, 17, 14, 12} <= reached


def test_the_search_interleaves_only_what_torchtitan_runs() -> None:
    """Llama 3 70B on 32 H100 under torchtitan: PP 2's interleaved rows take v whose 2v stages some k gives (v 2-7, 14,
    41 where each rank keeps 40 layers); before, v 18 (36 stages) was the fifth-fastest layout shown."""
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-70b", gpus="32", gpu=["h100-sxm5"], framework="torchtitan", seq_len="8192",
                  batch="32")  # fmt: skip
    c = search(req.model, req.training, req.cluster, req.space).evaluated.columns
    chunks = set(c["chunks"][c["pp"] == 2].tolist())
    assert chunks and all(configurable(2 * v, 80) for v in chunks if v > 2) and 18 not in chunks


def test_a_chunk_count_torchtitan_cannot_make_is_one_line(run_error) -> None:
    line = run_error(["fit", "--model", "llama3-70b", "--gpu", "h100-sxm5", "--gpus", "32", "--framework", "torchtitan", "--tp", "8",
                      "--pp", "2", "--dp", "2", "--chunks", "18", "--seq-len", "8192", "--batch", "32", "--micro-batch", "4"])  # fmt: skip
    assert line == ("Error: --chunks 18: torchtitan makes ceil(82 / k) virtual stages of 80 layers (pipeline_parallel_layers_per_stage "
                    "k, or two a rank by default), never 36 = --pp 2 x 18; give --pipeline-layout to time such a split")  # fmt: skip
