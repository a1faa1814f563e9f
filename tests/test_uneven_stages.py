"""Uneven pipeline stages (issue #11, item 5): Megatron-LM's --decoder-first-pipeline-num-layers /
--decoder-last-pipeline-num-layers as parcalc's --first-stage-layers / --last-stage-layers, in the
split rule (parcalc.core.stages), memory, flops, comm-volume, bubble and fit (scalar and search)."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.cli import app
from parcalc.core import comm
from parcalc.core.bubble_analysis import analyse_bubble
from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, estimate, invalid_reason
from parcalc.core.fit_search import COST_FIELDS, SearchSpace, search
from parcalc.core.flops import stage_flops, training_flops
from parcalc.core.layout import Layout
from parcalc.core.memory import memory_breakdown
from parcalc.core.pipeline import pass_times
from parcalc.core.search_layouts import search_splits
from parcalc.core.stages import (
    balanced_splits,
    split_text,
    stage_layers_derivation,
    stage_split,
)
from parcalc.core.training_setup import TrainingSetup
from parcalc.errors import InputError
from parcalc.presets import load_gpu, load_link, load_model

LLAMA = load_model("llama3-405b", ())
H100 = load_gpu("h100-sxm5", ())
A100 = load_gpu("a100-sxm4-80gb", ())


# ---------------------------------------------------------------------------------------------
# The split rule against Megatron-LM's


def megatron_layers(layers: int, pp: int, first: int | None, last: int | None, vp: int | None) -> tuple[int, ...]:
    """Transformer layers each pipeline rank builds, transcribed from NVIDIA/Megatron-LM at d98e8a64ddf3:
    TransformerConfig.__post_init__, 'Uneven PP' (megatron/core/transformer/transformer_config.py
    lines 2294-2366), get_num_layers_to_build (megatron/core/transformer/transformer_block.py lines
    103-181) and validate_args (megatron/training/arguments.py lines 985-998). Raises ValueError /
    AssertionError where Megatron-LM does; vp is the virtual pipeline size (None: no interleaving)."""
    if first is not None or last is not None:  # transformer_config.py 2294-2366
        num_layers, stages = layers, pp
        for n in (first, last):
            if n is None:
                continue
            if n <= 0:
                raise ValueError("must be larger than 0")
            if vp is not None and n % vp != 0:
                raise ValueError("must be divisible by virtual pipeline parallel degree")
            num_layers -= n
            stages -= 1
        if bool(num_layers) != bool(stages):
            raise ValueError("Mismatch")
        if stages and not num_layers % stages == 0:
            raise ValueError("number of layers at middle stage must be divisible")
        if stages and vp is not None and not (num_layers // stages) % vp == 0:
            raise ValueError("layers on each middle rank must be divisible by vp")
    else:  # arguments.py 985-998
        assert layers % pp == 0, "Number of layers should be divisible by the pipeline-model-parallel size"
    built = []
    for rank in range(pp):  # transformer_block.py get_num_layers_to_build, 103-181
        if first is not None or last is not None:
            to_distribute, left = layers, pp
            if first is not None:
                to_distribute -= first
                left -= 1
            if last is not None:
                to_distribute -= last
                left -= 1
            if left > 0:
                assert to_distribute % left == 0
                per_rank = to_distribute // left
            else:
                per_rank = 0
            if rank == 0 and first is not None:
                per_rank = first
            if rank == pp - 1 and last is not None:
                per_rank = last
        else:
            assert layers % pp == 0
            per_rank = layers // pp
        if vp is not None:
            assert per_rank % vp == 0
        built.append(per_rank)
    return tuple(built)


def megatron_accepts(layers: int, pp: int, first: int | None, last: int | None, vp: int | None) -> tuple[int, ...] | None:
    """Megatron-LM's split, or None where it refuses. Megatron-LM does not check that a middle
    stage keeps a positive count when n_first + n_last exceeds L (-6 layers over 2 middle stages
    passes the modulo test) and would build nothing there; parcalc refuses that too."""
    try:
        split = megatron_layers(layers, pp, first, last, vp)
    except (ValueError, AssertionError):
        return None
    return split if all(n >= 1 for n in split) else None


@pytest.mark.parametrize(
    ("layers", "pp", "first", "last", "chunks", "expected"),
    [
        # Llama 3 405B: 'we reduce one Transformer layer each from the first and the last stages'
        # (Dubey et al. 2024 sec. 3.3.2): 7 + 14 x 8 + 7 = 126
        pytest.param(126, 16, 7, 7, 1, (7,) + (8,) * 14 + (7,), id="llama3-405b"),
        # BLOOM: 'pp rank 0: [embed | 5 transformer blocks] ... [6 transformer blocks] ... pp rank 11:
        # [5 transformer blocks | embed]' (bigscience train/tr11-176B-ml/README.md): 5 + 10 x 6 + 5 = 70
        pytest.param(70, 12, 5, 5, 1, (5,) + (6,) * 10 + (5,), id="bloom"),
        pytest.param(126, 16, 6, None, 1, (6,) + (8,) * 15, id="first-only"),  # (126 - 6) / 15 = 8
        pytest.param(126, 16, None, 6, 1, (8,) * 15 + (6,), id="last-only"),
        pytest.param(10, 2, 4, 6, 1, (4, 6), id="two-stages"),
        pytest.param(10, 2, 3, None, 1, (3, 7), id="two-stages-first-only"),
        pytest.param(20, 4, 4, 4, 2, (4, 6, 6, 4), id="interleaved"),
        pytest.param(48, 4, None, None, 1, (12,) * 4, id="even"),
    ],
)
def test_the_split_follows_megatron(layers: int, pp: int, first: int | None, last: int | None, chunks: int,
                                    expected: tuple[int, ...]) -> None:  # fmt: skip
    assert stage_split(layers, pp, first, last, chunks) == expected
    assert megatron_layers(layers, pp, first, last, chunks if chunks > 1 else None) == expected
    assert sum(expected) == layers


@pytest.mark.parametrize(
    ("layers", "pp", "first", "last", "chunks"),
    [
        pytest.param(126, 16, 6, 6, 1, id="remainder-does-not-divide"),  # 114 / 14
        pytest.param(126, 16, 0, 7, 1, id="zero-first"),  # 'must be larger than 0'
        pytest.param(10, 2, 4, 4, 1, id="two-stages-short"),  # 'Mismatch': 2 layers left, no middle stage
        pytest.param(10, 3, 5, 5, 1, id="empty-middle"),  # 'Mismatch': no layer left for the middle stage
        pytest.param(20, 4, 3, 5, 2, id="chunks-first"),  # 3 % 2
        pytest.param(20, 4, 4, 4, 4, id="chunks-middle"),  # 6 % 4
        pytest.param(126, 16, None, None, 1, id="even-does-not-divide"),
    ],
)
def test_megatron_refusals_are_input_errors(layers: int, pp: int, first: int | None, last: int | None, chunks: int) -> None:
    assert megatron_accepts(layers, pp, first, last, chunks if chunks > 1 else None) is None
    with pytest.raises(InputError):
        stage_split(layers, pp, first, last, chunks)


ENDS = st.one_of(st.none(), st.integers(-2, 40))


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 36), st.integers(2, 9), ENDS, ENDS, st.sampled_from([1, 2, 3]))
def test_stage_split_agrees_with_megatron_everywhere(layers: int, pp: int, first: int | None, last: int | None, chunks: int) -> None:
    expected = megatron_accepts(layers, pp, first, last, chunks if chunks > 1 else None)
    if expected is None:
        with pytest.raises(InputError):
            stage_split(layers, pp, first, last, chunks)
    else:
        assert stage_split(layers, pp, first, last, chunks) == expected


def test_one_stage_takes_no_uneven_split() -> None:
    # Megatron-LM would take --decoder-first-pipeline-num-layers L with PP 1 (nothing left, no stage
    # left); parcalc refuses a flag that changes nothing.
    with pytest.raises(InputError, match="needs --pp > 1"):
        stage_split(126, 1, 126, None)


def test_the_search_candidates_are_the_most_balanced_megatron_splits() -> None:
    assert balanced_splits(126, 16) == ((6, 8), (7, 7), (8, 6))
    assert search_splits(126, 16) == ((6, 8), (7, 7), (8, 6))
    assert search_splits(70, 12) == ((4, 6), (5, 5), (6, 4))
    assert search_splits(96, 64) == ()  # 17 + 62 x 1 + 17 is the best Megatron's form gives: rejected
    assert search_splits(48, 4) == ()  # pp divides: the even split only
    for f, z in balanced_splits(126, 8):
        assert max(stage_split(126, 8, f, z)) == 16  # ceil(126 / 8)


def test_split_text_and_derivation() -> None:
    assert split_text(stage_split(126, 16, 7, 7)) == "7 + 14 x 8 + 7"
    middle = stage_layers_derivation(126, 16, 7, 7, 5)
    assert middle.value == 8 and middle.formula == "($L - $n_first - $n_last) / ($p - 2)"
    assert "get_num_layers_to_build" in middle.source
    assert stage_layers_derivation(126, 16, 7, 7, 0).value == 7
    assert stage_layers_derivation(48, 4, None, None, 2).formula == "$L / $p"


# ---------------------------------------------------------------------------------------------
# memory


def test_memory_of_the_seven_layer_first_stage_by_hand() -> None:
    # Llama 3 405B, t = 8, p = 16 (7 + 14 x 8 + 7), b = 1, s = 8192, FlashAttention, no dropout,
    # mixed bf16 AdamW (2 + 2 + 12 bytes per parameter), 1F1B with m = 16.
    par = Layout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7)
    setup = TrainingSetup(1, 8192, flash_attention=True, dropout=False, micro_batches=16)
    first = memory_breakdown(LLAMA, par, setup).stages[0]
    h, q, kv, f, v, t, a, s = 16384, 16384, 1024, 53248, 128256, 8, 128, 8192
    # one layer on one TP rank: Q, K, V, O, gate, up, down split over t; two RMSNorm weights whole
    layer = (h * q + 2 * h * kv + q * h + 3 * h * f) // t + 2 * h
    assert layer == 398_491_648
    params = 7 * layer + (v // t) * h  # + the word embeddings' V/t rows (RoPE: no position table)
    assert params == 3_052_109_824 == first.parameters.value
    states = 16 * params
    # per layer (Korthikanti et al. 2022 sec. 4.1, FlashAttention-2 Algorithm 1): whole on every TP
    # rank the two norm inputs and the QKV and MLP-up inputs (2 sbh each); split over t: Q and the
    # output-projection input (2 sbh each), K and V (2 s b kv each), gate, up and their product
    # (2 sbf each); and the fp32 log-sum-exp (4 a s b / t)
    per_layer = s * (8 * h + (4 * h + 4 * kv + 6 * f) // t) + 4 * a * s // t
    assert per_layer == 1_472_724_992
    in_flight = 16  # 1F1B: the first stage holds min(p, m) micro-batches
    activations = per_layer * 7 * in_flight
    token_ids = 8 * s * in_flight  # int64 ids for the embedding's backward
    reserve = 2 * 2**30
    assert first.total.value == states + activations + token_ids + reserve == 215_927_488_512
    assert first.layers.value == 7


def test_the_fullest_stage_is_the_first_middle_one() -> None:
    # 8 layers x 15 micro-batches on stage 2 outweigh 7 x 16 on stage 1
    par = Layout(tp=8, pp=16, first_stage_layers=7, last_stage_layers=7)
    breakdown = memory_breakdown(LLAMA, par, TrainingSetup(1, 8192, flash_attention=True, micro_batches=16))
    assert [int(x.layers.value) for x in breakdown.stages] == [7] + [8] * 14 + [7]
    assert breakdown.worst.stage == 1


# ---------------------------------------------------------------------------------------------
# flops, comm-volume, bubble


def test_stage_flops_add_up_to_the_total() -> None:
    counted = training_flops(LLAMA, 16, 8192, recompute="full", causal=True)
    split = stage_split(126, 16, 7, 7)
    each = [stage_flops(counted, split, s).value for s in range(16)]
    assert sum(each) == pytest.approx(counted.hardware.value, rel=1e-12)
    assert each[1] == max(each) and each[0] < each[15] < each[1]  # the LM head does not make up for a layer


def test_comm_follows_the_stage_layers() -> None:
    par = comm.Layout(tp=8, pp=16, dp=2, first_stage_layers=7, last_stage_layers=7)
    assert [len(r) for r in comm.stage_layers(126, 16, 7, 7)] == [7] + [8] * 14 + [7]
    work = comm.Workload(32, 1, 8192, 2.0, 2.0)
    net = comm.Network(intra=load_link("nvlink4", ()), inter=load_link("ib-ndr", ()))
    plan = comm.iteration_plan(LLAMA, work, par, net)
    tp = next(d for d in plan.derivations if d.key == "tp_allreduce_payload")
    assert tp.term("l").value == 8  # the largest stage
    with pytest.raises(InputError, match="--first-stage-layers"):
        comm.iteration_plan(LLAMA, work, par._replace(first_stage_layers=6, last_stage_layers=6), net)


def test_bubble_runs_at_the_pace_of_the_slowest_stage() -> None:
    times = pass_times(0.025)
    uneven = analyse_bubble(Schedule.ONE_F_ONE_B, 16, 32, times=times, stage_layers=stage_split(126, 16, 7, 7))
    assert uneven.closed_form("bubble_time").value == pytest.approx(15 * 3 * 8 * 0.025)  # (p - 1)(t_f + t_b) of an 8-layer stage
    even = analyse_bubble(Schedule.ONE_F_ONE_B, 16, 32, times=times, stage_layers=(8,) * 16)
    assert even.stage_times is None and even.closed_form("ideal_time").value == uneven.closed_form("ideal_time").value
    assert uneven.timeline is not None and uneven.timeline.makespan < even.timeline.makespan  # two stages finish early


# ---------------------------------------------------------------------------------------------
# fit: one configuration, and the search


def h100_cluster(gpus: int) -> Cluster:
    assert H100.node is not None
    peak = H100.dtypes["bf16"].dense_peak
    assert peak is not None
    return Cluster(gpus, 8, peak.value, H100.memory_capacity.value, load_link(H100.node.intra_link, ()),
                   load_link(H100.node.inter_link, ()), gpu=H100)  # fmt: skip


def test_fit_uses_the_slowest_stage() -> None:
    training = Training(256, 8192, flash_attention=True)
    cluster = h100_cluster(2048)
    uneven = Config.of(8, 16, 16, 1, Recompute.NONE, 1, True, first_stage_layers=7, last_stage_layers=7)
    assert invalid_reason(LLAMA, uneven, training, cluster) is None
    est = estimate(LLAMA, uneven, training, cluster)
    assert "8 layers" in est.compute.term("t_f").description  # a middle stage sets the pace
    assert est.memory.worst.stage == 1
    # the same model with 128 layers on 16 equal stages runs no faster: 8 layers per stage either way
    deeper = estimate(replace(LLAMA, layers=128), uneven.replaced(first_stage_layers=None, last_stage_layers=None), training, cluster)
    assert deeper.step.value >= est.step.value
    assert "do not split evenly" in (
        invalid_reason(LLAMA, uneven.replaced(first_stage_layers=6, last_stage_layers=6), training, cluster) or ""
    )


def test_the_search_tries_uneven_splits_and_keeps_the_best() -> None:
    training = Training(256, 8192, flash_attention=True)
    cluster = h100_cluster(2048)
    found = search(LLAMA, training, cluster, SearchSpace(pp=16, tp=8, zero_stages=(1,), sequence_parallel=(True,)))
    c = found.evaluated.columns
    assert len(found.evaluated) > 0 and set(c["pp"].tolist()) == {16}
    pairs = set(zip(c["first_stage_layers"].tolist(), c["last_stage_layers"].tolist(), strict=True))
    assert pairs <= {(6, 8), (7, 7), (8, 6)}
    # every configuration was evaluated with each split whose stages its v chunks divide (v = 2: 6 / 8 and 8 / 6)
    # (the rows of the layout the search proposes for v = 4, 'Et|(tt|)*62tL', have no other split: tests/test_search_layouts.py)
    alternatives = sum(2 if v == 1 else 1 for v, code in zip(c["chunks"].tolist(), c["pipeline_layout"].tolist(), strict=True) if code < 0)
    assert found.rejected["another uneven split of the same configuration is better"] == alternatives
    splits_rows = [i for i in range(len(found.evaluated)) if c["pipeline_layout"][i] < 0]
    for i in random.Random(5).sample(splits_rows, 6):
        config = found.evaluated.config(i)
        assert invalid_reason(LLAMA, config, training, cluster) is None
        others = [config.replaced(first_stage_layers=f, last_stage_layers=z) for f, z in search_splits(126, 16)]
        options = [estimate(LLAMA, x, training, cluster) for x in others if invalid_reason(LLAMA, x, training, cluster) is None]
        fitting = [e for e in options if e.fits]
        chosen = min(fitting, key=lambda e: (e.step.value, e.total_memory)) if fitting else min(options, key=lambda e: e.total_memory)
        assert (config.layout.first_stage_layers, config.layout.last_stage_layers) == (chosen.config.layout.first_stage_layers, chosen.config.layout.last_stage_layers)


def test_a_pinned_split_is_the_only_one_searched() -> None:
    training = Training(256, 8192, flash_attention=True)
    found = search(LLAMA, training, h100_cluster(2048), SearchSpace(pp=16, first_stage_layers=7, last_stage_layers=7, interleaved=False))
    c = found.evaluated.columns
    assert set(c["first_stage_layers"].tolist()) == {7} and set(c["last_stage_layers"].tolist()) == {7}
    with pytest.raises(InputError, match="give --pp"):
        search(LLAMA, training, h100_cluster(2048), SearchSpace(first_stage_layers=7))


@pytest.mark.parametrize(
    ("layers", "training", "gpus", "zero_stages"),
    [
        pytest.param(126, Training(512, 4096), 2048, (0, 1, 2, 3), id="llama3-405b-2048"),
        pytest.param(70, Training(256, 2048, Precision.MIXED_FP16, Optimizer.ADAM), 96, (0, 1, 3), id="70-layers-96"),
    ],
)
def test_vectorised_search_agrees_with_the_scalar_estimate_on_uneven_splits(layers: int, training: Training, gpus: int,
                                                                               zero_stages: tuple[int, ...]) -> None:  # fmt: skip
    model = replace(LLAMA, layers=layers)
    cluster = Cluster(gpus, 8, 312e12, A100.memory_capacity.value, load_link("nvlink3", ()), load_link("ib-hdr", ()),
                      allow_cross_node_tp=True)  # fmt: skip
    found = search(model, training, cluster, SearchSpace(zero_stages=zero_stages))
    evaluated = found.evaluated
    uneven = [i for i in range(len(evaluated)) if evaluated.config(i).layout.first_stage_layers is not None
              and evaluated.columns["fits"][i]]  # the search times what fits
    assert len(uneven) > 50
    for i in random.Random(layers).sample(uneven, 50):
        config = evaluated.config(i)
        assert invalid_reason(model, config, training, cluster) is None
        scalar = estimate(model, config, training, cluster)
        expected = {
            "memory": scalar.total_memory, "fits": scalar.fits, "t_compute": scalar.compute.value, "t_tp": scalar.tp_comm.value,
            "t_bubble": scalar.bubble.value, "t_pp": scalar.pp_comm.value, "t_dp": scalar.dp_comm.value,
            "t_optimizer": scalar.optimizer.value, "t_step": scalar.step.value, "tokens_per_second": scalar.tokens_per_second.value,
            "mfu": scalar.mfu.value, "hfu": scalar.hfu.value,
        }  # fmt: skip
        assert set(expected) == set(COST_FIELDS)
        for key, value in expected.items():
            assert evaluated.columns[key][i] == pytest.approx(value, rel=1e-9, abs=1e-15), (config.label(), key)
    assert np.all(evaluated.columns["first_stage_layers"] >= 1)


# ---------------------------------------------------------------------------------------------
# The CLI


LLAMA_FIT = ["fit", "--model", "llama3-405b", "--gpu", "h100-sxm5", "--gpus", "2048", "--batch", "256", "--seq-len", "8192",
             "--flash-attention"]  # fmt: skip


def test_fit_evaluates_exactly_the_given_split(run_json) -> None:
    doc = run_json(*LLAMA_FIT, "--tp", "8", "--pp", "16", "--dp", "16", "--zero", "1", "--sequence-parallel", "--recompute", "none",
                   "--first-stage-layers", "7", "--last-stage-layers", "7")  # fmt: skip
    rows = doc["tables"]["stages"]["rows"]
    assert [r["layers"] for r in rows] == [7] + [8] * 14 + [7]
    assert rows[0]["also"] == "embedding" and rows[-1]["also"] == "LM head"
    assert "first stage 7 layers, last stage 7 layers" in " ".join(doc["verdicts"][:2])  # the layout: first, or after "does not fit"
    assert "8 layers" in doc["results"]["t_compute"]["inputs"]["t_f"]["description"]


def test_fit_search_json_shows_the_stage_layers(runner) -> None:
    result = runner.invoke(app, [*LLAMA_FIT, "--search", "--tp", "8", "--pp", "16", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = doc["tables"]["configurations"]["rows"]
    assert rows and all((r["first_stage_layers"], r["last_stage_layers"]) in {(6, 8), (7, 7), (8, 6)} for r in rows)


def test_memory_per_stage_shows_the_layers(run_json) -> None:
    doc = run_json("memory", "--model", "llama3-405b", "--seq-len", "8192", "--tp", "8", "--pp", "16", "--first-stage-layers", "7",
                   "--last-stage-layers", "7", "--flash-attention", "--per-stage")  # fmt: skip
    assert [r["layers"] for r in doc["tables"]["stages"]["rows"]] == [7] + [8] * 14 + [7]
    assert any("7 + 14 x 8 + 7" in a for a in doc["assumptions"])


def test_flops_per_stage(run_json) -> None:
    doc = run_json("flops", "--model", "llama3-405b", "--batch", "16", "--seq-len", "8192", "--pp", "16", "--first-stage-layers", "7",
                   "--last-stage-layers", "7")  # fmt: skip
    rows = doc["tables"]["stage_flops"]["rows"]
    assert [r["layers"] for r in rows] == [7] + [8] * 14 + [7]
    assert sum(r["flops"] for r in rows) == pytest.approx(doc["results"]["hardware_flops"]["value"], rel=1e-12)


def test_bubble_from_layers(run_json) -> None:
    doc = run_json("bubble", "--stages", "12", "--micro-batches", "24", "--layers", "70", "--first-stage-layers", "5",
                   "--last-stage-layers", "5", "--t-forward", "10ms")  # fmt: skip
    assert doc["results"]["bubble_time"]["value"] == pytest.approx(11 * 6 * 0.030)  # (p - 1) x 6 layers x (10 + 20) ms
    assert doc["settings"]["stage_layers"] == [5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5]


FIT_ONE = [*LLAMA_FIT, "--tp", "8", "--pp", "16", "--dp", "16"]
MEMORY = ["memory", "--model", "llama3-405b", "--seq-len", "8192", "--tp", "8", "--pp", "16"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            [*MEMORY, "--first-stage-layers", "100", "--last-stage-layers", "30"],
            "100 + 30 = 130 layers, more than the model's 126",
            id="memory-first-plus-last-too-many",
        ),
        pytest.param(
            [*MEMORY, "--first-stage-layers", "6", "--last-stage-layers", "6"],
            "the 114 layers left after 6 + 6 do not split evenly over the 14 middle stage(s)",
            id="memory-remainder",
        ),
        pytest.param(
            [*MEMORY, "--first-stage-layers", "0", "--last-stage-layers", "7"],
            "--first-stage-layers: at least 1 layer, got 0",
            id="memory-zero",
        ),
        pytest.param([*MEMORY, "--last-stage-layers", "-7"], "--last-stage-layers: '-7' must not be negative", id="memory-negative"),
        pytest.param(
            [*MEMORY, "--first-stage-layers", "126"],
            "--first-stage-layers: 126 layers leave none for the other 15 stage(s)",
            id="memory-all-layers",
        ),
        pytest.param(
            [*MEMORY, "--first-stage-layers", "1e30"], "--first-stage-layers: 1e+30 is beyond any possible size", id="memory-huge"
        ),
        pytest.param([*MEMORY, "--first-stage-layers", "abc"], "--first-stage-layers: cannot read 'abc'", id="memory-text"),
        pytest.param([*MEMORY, "--first-stage-layers", "7.5"], "--first-stage-layers: '7.5' must be a whole number", id="memory-fraction"),
        pytest.param(
            ["memory", "--model", "llama3-405b", "--seq-len", "8192", "--first-stage-layers", "7"],
            "--first-stage-layers: an uneven split needs --pp > 1",
            id="memory-without-pp",
        ),
        pytest.param(
            [
                *MEMORY,
                "--first-stage-layers",
                "6",
                "--last-stage-layers",
                "8",
                "--schedule",
                "interleaved",
                "--chunks",
                "4",
                "--micro-batches",
                "32",
            ],
            "--chunks: 4 chunks per stage do not divide the 6 layers of the first stage",
            id="memory-chunks",
        ),
        pytest.param(MEMORY, "--pp: 126 layers do not split evenly over pp = 16", id="memory-even-does-not-divide"),
        pytest.param(
            [*FIT_ONE, "--first-stage-layers", "6", "--last-stage-layers", "6"],
            "do not split evenly over the 14 middle stage(s)",
            id="fit-remainder",
        ),
        pytest.param([*FIT_ONE, "--first-stage-layers", "0"], "--first-stage-layers: at least 1 layer", id="fit-zero"),
        pytest.param([*FIT_ONE, "--last-stage-layers", "1e30"], "--last-stage-layers: 1e+30 is beyond any possible size", id="fit-huge"),
        pytest.param([*LLAMA_FIT, "--first-stage-layers", "7"], "--first-stage-layers: applies to one configuration", id="fit-table"),
        pytest.param([*LLAMA_FIT, "--search", "--last-stage-layers", "7"], "--last-stage-layers: give --pp with it", id="fit-search-no-pp"),
        pytest.param(
            ["flops", "--model", "llama3-405b", "--last-stage-layers", "7"],
            "--last-stage-layers: an uneven split needs --pp > 1",
            id="flops-without-pp",
        ),
        pytest.param(
            ["flops", "--model", "llama3-405b", "--pp", "16", "--first-stage-layers", "200", "--last-stage-layers", "1"],
            "--first-stage-layers: 200 layers leave none",
            id="flops-more-than-layers",
        ),
        pytest.param(
            [
                "comm-volume",
                "--strategy",
                "3d",
                "--model",
                "llama3-405b",
                "--tp",
                "8",
                "--pp",
                "16",
                "--dp",
                "1",
                "--first-stage-layers",
                "8",
                "--last-stage-layers",
                "8",
            ],
            "do not split evenly over the 14 middle stage(s)",
            id="comm-remainder",
        ),
        pytest.param(
            ["comm-volume", "--strategy", "all", "--model", "llama3-405b", "--first-stage-layers", "7"], "--strategy all", id="comm-all"
        ),
        pytest.param(
            ["bubble", "--stages", "16", "--micro-batches", "16", "--first-stage-layers", "7"],
            "--first-stage-layers: give --layers",
            id="bubble-without-layers",
        ),
        pytest.param(
            ["bubble", "--stages", "16", "--micro-batches", "16", "--layers", "126", "--last-stage-layers", "abc"],
            "--last-stage-layers: cannot read 'abc'",
            id="bubble-text",
        ),
        pytest.param(
            ["bubble", "--stages", "1", "--micro-batches", "4", "--layers", "126", "--first-stage-layers", "7"],
            "--first-stage-layers: an uneven split needs --pp > 1",
            id="bubble-one-stage",
        ),
        pytest.param(
            ["bubble", "--stages", "4", "--micro-batches", "4", "--layers", "1e308"],
            "--layers: 1e+308 is beyond any possible size",
            id="bubble-huge-layers",
        ),
        pytest.param(
            ["memory", "--model", "llama3-405b", "--pp", "16", "--first-stage-layers", "1e308", "--last-stage-layers", "7"],
            "--first-stage-layers: 1e+308 is beyond any possible size",
            id="huge-first",
        ),
        pytest.param(
            ["bubble", "--stages", "4", "--micro-batches", "4", "--layers", "12", "--stage-times", "1s,1s,1s,1s"],
            "--layers: gives each stage's time from its layers; not with --stage-times",
            id="bubble-both",
        ),
    ],
)
def test_bad_stage_flags_are_one_error_line(run_error, args: list[str], message: str) -> None:
    assert message in run_error(args)
