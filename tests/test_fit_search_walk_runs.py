"""parcalc.core.search_walk_runs: the reserved peak of an FSDP2 / torchtitan step walk from two short walks equals the
whole walk's (parcalc.core.memory_fsdp.fsdp_step_peak), byte for byte, and the short path is the one taken."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.choices import Optimizer, Precision, Recompute, Schedule
from parcalc.core.memory_fsdp import fsdp_step_of, fsdp_step_peak
from parcalc.core.search_columns import MEMORY_BASES, RECOMPUTES, SCHEDULE_CODES
from parcalc.core.search_walk_runs import reserved_from_runs, reserved_total, same_walk, shrinks, three_run_plan
from parcalc.presets import load_model

LLAMA = load_model("llama3-8b", ())  # 32 identical layers: torchtitan's Llama code, the walk's own model


@settings(max_examples=20, deadline=None)
@given(micro=st.sampled_from([1, 2]), seq=st.sampled_from([512, 2048, 4096]), shards=st.sampled_from([2, 8, 64]),
       rec=st.sampled_from([Recompute.NONE, Recompute.FULL, Recompute.OP]), tp=st.sampled_from([1, 2, 4]),
       precision=st.sampled_from([Precision.MIXED_BF16, Precision.BF16]), layers=st.integers(1, 40))  # fmt: skip
def test_layers_walked_twice_give_the_whole_walks_reserved_peak(micro, seq, shards, rec, tp, precision, layers) -> None:  # type: ignore[no-untyped-def]
    if tp > 1 and rec is Recompute.OP:  # the TP walk checkpoints whole blocks or nothing (memory_fsdp.tp_gaps)
        rec = Recompute.FULL
    model = replace(LLAMA, layers=layers)
    step = fsdp_step_of("torchtitan-eager", micro, seq, shards, precision, Optimizer.ADAMW, rec, tp)
    whole = fsdp_step_peak(model, step).reserved
    fast = reserved_from_runs(model, step)
    assert (fast is not None) == (layers >= 12)  # the short walks pay from 12 layers (shrinks) and pass their checks
    assert fast is None or fast == whole
    assert reserved_total(model, step) == whole  # short or whole, the search's value


@settings(max_examples=40, deadline=None)
@given(pp=st.sampled_from([2, 3, 4, 8]), stage_share=st.floats(0, 0.999), micro_batches=st.integers(1, 20),
       layers=st.integers(1, 9), rec=st.sampled_from([Recompute.NONE, Recompute.FULL, Recompute.OP]),
       shards=st.sampled_from([2, 8]), micro=st.sampled_from([1, 2]))  # fmt: skip
def test_a_stage_walked_short_gives_the_whole_walks_reserved_peak(pp, stage_share, micro_batches, layers, rec, shards, micro) -> None:  # type: ignore[no-untyped-def]
    """Every 1F1B stage, its layers and micro-batches on both sides of where the short walks start to pay (more than 5
    layers; more than w + 5 micro-batches), and the middle stages shared by same_walk."""
    stage = int(stage_share * pp)
    model = replace(LLAMA, layers=layers * pp)
    step = replace(fsdp_step_of("torchtitan-eager", micro, 1024, shards, Precision.MIXED_BF16, Optimizer.ADAMW, rec, 1), pp=pp,
                   pp_stage=stage, stage_layers=(stage * layers, (stage + 1) * layers), micro_batches=micro_batches)  # fmt: skip
    whole = fsdp_step_peak(model, step).reserved
    fast = reserved_from_runs(model, step)
    warmup = min(micro_batches, pp - stage)
    pays = any(shrinks(layers, (micro_batches, warmup + 4))) or three_run_plan(step, layers) is not None
    assert (fast is not None) == pays  # the checks pass wherever it pays
    assert fast is None or fast == whole
    assert reserved_total(model, step) == whole


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([6, 8, 12, 16]), stage_share=st.floats(0, 0.999), more=st.integers(1, 30), layers=st.integers(1, 9),
       rec=st.sampled_from([Recompute.NONE, Recompute.FULL, Recompute.OP]), tp=st.sampled_from([1, 2]), shards=st.sampled_from([2, 8, 64]),
       micro=st.sampled_from([1, 2]), precision=st.sampled_from([Precision.MIXED_BF16, Precision.BF16]))  # fmt: skip
def test_a_middle_stage_from_shorter_runs_gives_the_whole_walks_reserved_peak(pp, stage_share, more, layers, rec, tp, shards, micro,
                                                                              precision) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """A middle stage of deep pipelines (warm-ups w = p - s up to 15) with m = w + more micro-batches: its warm-up,
    steady and cool-down runs shrunk (search_walk_runs.three_run_plan, walks of stages with warm-ups 4 and 5) give the
    whole walk's bytes."""
    if tp > 1 and rec is Recompute.OP:  # the TP walk checkpoints whole blocks or nothing (memory_fsdp.tp_gaps)
        rec = Recompute.FULL
    stage = 1 + int(stage_share * (pp - 2))
    warmup = pp - stage
    model = replace(LLAMA, layers=layers * pp)
    step = replace(fsdp_step_of("torchtitan-eager", micro, 1024, shards, precision, Optimizer.ADAMW, rec, tp), pp=pp, pp_stage=stage,
                   stage_layers=(stage * layers, (stage + 1) * layers), micro_batches=warmup + more)  # fmt: skip
    whole = fsdp_step_peak(model, step).reserved
    assert reserved_total(model, step) == whole
    plan = three_run_plan(step, layers)
    if plan is not None:
        assert reserved_from_runs(model, step) == whole  # the short walks passed their checks


def test_middle_stages_share_their_short_walks() -> None:
    """Stages 6 to 10 of a 16-stage pipeline with 16 micro-batches (warm-ups 10 to 6, steady pairs 6 to 10, as Llama 3 70B's
    PP 16 rows in fit --search) take their reserved totals from the same three short walks."""
    from parcalc.core.search_walk_runs import _middle_stage_segments

    model = replace(LLAMA, layers=5 * 16)
    base = replace(fsdp_step_of("torchtitan-eager", 1, 1024, 4, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.NONE, 1), pp=16,
                   micro_batches=16)  # fmt: skip
    _middle_stage_segments.cache_clear()
    for stage in range(6, 11):
        step = replace(base, pp_stage=stage, stage_layers=(stage * 5, stage * 5 + 5))
        assert three_run_plan(step, 5) is not None
        assert reserved_from_runs(model, step) == fsdp_step_peak(model, step).reserved
    assert _middle_stage_segments.cache_info().misses == 3


def test_a_step_whose_units_differ_is_walked_whole() -> None:
    """Selective layer checkpointing (one policy a block) has no repeated unit: the caller walks it whole."""
    step = replace(fsdp_step_of("torchtitan-eager", 1, 1024, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.NONE, 1),
                   block_policies=("full", "none") * 16)  # fmt: skip
    assert reserved_from_runs(LLAMA, step) is None


@settings(max_examples=8, deadline=None)
@given(pp=st.sampled_from([3, 4, 8]), stage_share=st.floats(0, 0.999), micro_batches=st.integers(1, 8), layers=st.sampled_from([1, 2, 3]),
       rec=st.sampled_from([Recompute.NONE, Recompute.FULL, Recompute.OP]))  # fmt: skip
def test_middle_stages_with_the_same_warm_up_walk_the_same(pp, stage_share, micro_batches, layers, rec) -> None:  # type: ignore[no-untyped-def]
    """same_walk: a middle stage whose warm-up is all its micro-batches reserves what stage 1 of the same layer count does."""
    stage = int(stage_share * pp)
    model = replace(LLAMA, layers=layers * pp)
    step = replace(fsdp_step_of("torchtitan-eager", 1, 1024, 4, Precision.MIXED_BF16, Optimizer.ADAMW, rec, 1), pp=pp,
                   pp_stage=stage, stage_layers=(stage * layers, (stage + 1) * layers), micro_batches=micro_batches)  # fmt: skip
    assert fsdp_step_peak(model, same_walk(model, step)).reserved == fsdp_step_peak(model, step).reserved
    assert reserved_total(model, step) == fsdp_step_peak(model, step).reserved


def test_torchtitan_search_rows_are_fits_memory() -> None:
    """Agreement end to end: sampled rows of `fit --search --framework torchtitan` (Llama 3 8B on 8 H100, fit's defaults:
    plain, TP and 1F1B-pipelined layouts, every recomputation) carry memory_of's total for their configuration, whose
    walks are whole (parcalc.core.fit.memory_of -> memory_step_peak)."""
    import random

    from parcalc.core.fit import memory_of
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-8b", gpus="8", gpu=["h100-sxm5"], framework="torchtitan")
    ev = search(req.model, req.training, req.cluster, req.space).evaluated
    rows = random.Random(15).sample(range(len(ev)), 24)
    c, one_f_one_b = ev.columns, SCHEDULE_CODES.index(Schedule.ONE_F_ONE_B)
    walked = [i for i in range(len(ev)) if c["pp"][i] > 1 and c["schedule"][i] == one_f_one_b and c["zero"][i] == 3 and c["fits"][i]]
    assert len(walked) >= 8  # the stage walks' rows (search_step_peaks.pipeline_stage_rows), TP ones with sequence parallelism only
    sharded = [i for i in range(len(ev)) if c["pp"][i] == 1 and c["zero"][i] == 3 and c["shard_group"][i] == c["dp"][i]]
    assert len(sharded) >= 12  # the step walks' rows without a pipeline, TP among them (search_step_peaks.fsdp_rows)
    assert all(c["sequence_parallel"][i] for i in range(len(ev)) if c["tp"][i] > 1)  # torchtitan's apply_tp: SP always
    # an interleaved row the walk follows carries its ranks' floor (search_step_peaks._worst_stage): memory_of's where it
    # fits, over the capacity and at most it where not (the walks stop at the first rank over); one it does not follow
    # (selective checkpointing) the textbook sum, memory_of's too; the rows shown are walked and replayed
    # (test_search_rows_match_memory.py)
    interleaved = [i for i in range(len(ev)) if c["pp"][i] > 1 and c["chunks"][i] > 1 and c["zero"][i] == 3]
    assert len(interleaved) >= 8
    assert {int(c["memory_basis"][i]) for i in interleaved} == {MEMORY_BASES.index("floor"), MEMORY_BASES.index("textbook")}
    for i in interleaved[:: len(interleaved) // 6]:
        walked_total = memory_of(req.model, ev.config(i), req.training, req.cluster, allocator_replayed=False).worst.total.value
        if c["fits"][i] or c["memory_basis"][i] == MEMORY_BASES.index("textbook"):
            assert c["memory"][i] == pytest.approx(walked_total, rel=1e-12), ev.config(i)
        else:
            assert req.cluster.capacity < c["memory"][i] <= walked_total, ev.config(i)
    for i in [i for i in rows if i not in interleaved] + walked[:: max(1, len(walked) // 12)] + sharded[:: len(sharded) // 12]:
        config = ev.config(i)  # unreplayed, a row carries the floor of the allocator's replay (parcalc.core.search_replay)
        # to the last bits of a fractional byte count (the interleaved in-flight factor), summed in another order there
        assert ev.columns["memory"][i] == pytest.approx(memory_of(req.model, config, req.training, req.cluster,
                                                                  allocator_replayed=False).worst.total.value, rel=1e-12), config  # fmt: skip
    from parcalc.core.search_replay import replay_rows

    found = search(req.model, req.training, req.cluster, req.space)
    some = walked[:: max(1, len(walked) // 4)] + sharded[:: len(sharded) // 4]
    replay_rows(found, some, req.model, req.training, req.cluster)
    for i in some:  # replayed, it is fit's total of its configuration, and never below its floor
        config = found.evaluated.config(i)
        assert found.evaluated.columns["memory"][i] == pytest.approx(memory_of(req.model, config, req.training, req.cluster).worst.total.value,
                                                                     rel=1e-12), config  # fmt: skip
        assert found.evaluated.columns["memory"][i] >= ev.columns["memory"][i]


@pytest.mark.parametrize("cp_comm", ["all-gather", "p2p"])
def test_torchtitan_search_rows_with_context_parallelism_are_fits_memory(cp_comm: str) -> None:
    """A search with --cp walks its FSDP x CP rows as `memory` does (the ring attention of parcalc.core.memory_torchtitan_cp,
    FSDP over dp x cp ranks): before the merge of session 15 the search kept the textbook sum for them (30.16 GB at b 1 with
    full checkpointing where memory_of walks 45.53 GB for Llama 3 8B, s 32768, CP 2 x DP 8)."""
    from parcalc.core.fit import memory_of
    from parcalc.core.fit_search import search
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-8b", gpus="16", gpu=["h100-sxm5"], framework="torchtitan", cp=2, cp_comm=cp_comm,
                  batch="32", seq_len="32768")  # fmt: skip
    ev = search(req.model, req.training, req.cluster, req.space).evaluated
    c = ev.columns
    rows = [i for i in range(len(ev)) if c["pp"][i] == 1 and c["tp"][i] == 1 and c["zero"][i] == 3 and c["shard_group"][i] == 16]
    assert len(rows) >= 8
    for i in rows:
        config = ev.config(i)
        assert c["memory"][i] == memory_of(req.model, config, req.training, req.cluster, allocator_replayed=False).worst.total.value, config
    # the walked figure, not the textbook's: b 1, full checkpointing. Each stream's own peak + 2 GiB was 45,527,072,768 B
    # (`parcalc memory --cp 2 ... --recompute full` before session 19); the search's rows now carry the floor of the allocator's
    # replay + 1.5 GiB (parcalc.core.search_replay; the rows shown are replayed): 44,931,481,600 B
    full = [i for i in rows if c["micro_batch"][i] == 1 and RECOMPUTES[int(c["recompute"][i])] is Recompute.FULL]
    assert [c["memory"][i] for i in full] == [44_931_481_600]
