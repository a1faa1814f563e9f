"""The allocator's replay over compiled per-stream programs (parcalc.core.allocator_replay, memory_fsdp.compile_streams) is
the allocator's classes replaying the walk's keyed events (parcalc.core.allocator, the replay as session 19 landed it),
to the byte: the same blocks at the same addresses after every op of random sequences, the same replayed bytes on every
step of tests/test_search_replay.py's grid, and `memory` / `fit`'s totals of the two commands the replay made slow (issue
#30) as main gave them before the change (03aa8c4). And REPLAYED_STEPS: the allocator's state repeats within the three
replayed steps, so more steps change nothing (issue #30, MEMFAST)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from parcalc.core.allocator import K_SMALL_SIZE, CachingAllocator, ExpandableSegments, StreamAllocators, block_bytes
from parcalc.core.allocator_replay import _MEMO, _State, replay_stream, run_program
from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import (
    _STATE,
    OPTIMIZER_PHASE,
    SET_UP_PHASE,
    STREAMS,
    EventWalk,
    _unit_order,
    compile_streams,
    fsdp_step_of,
    replayed_reserve,
    stream_of,
    walk_fsdp_step,
)
from parcalc.core.memory_timeline import REPLAYED_STEPS
from parcalc.presets import load_model
from tests.test_search_replay import GRID

GIB = 2**30
MIB = 2**20


def _class_state(a: CachingAllocator) -> tuple:
    """The class's state in _State's terms: every block, each pool's free list, the ends, what is reserved."""
    high = dict(a.high_water) if isinstance(a, ExpandableSegments) else {True: 0.0, False: 0.0}
    return ({k: list(v) for k, v in a._blocks.items()}, {k: list(v) for k, v in a._free.items()}, dict(a._ending_at), a.reserved, high)


def _program_state(s: _State) -> tuple:
    return ({k: list(v) for k, v in s.blocks.items()}, {k: list(v) for k, v in s.free.items()}, dict(s.ending_at), s.reserved,
            dict(s.high_water))  # fmt: skip


@pytest.mark.parametrize("expandable", [False, True], ids=("segments", "expandable"))
@pytest.mark.parametrize("seed", range(6))
def test_every_op_leaves_the_classes_state(expandable: bool, seed: int) -> None:
    """Random mallocs (small, 1-10 MiB and large requests, odd sizes: rounding, splits, both pools) and frees: after each
    op the inlined rules hold the same blocks, free lists and ends as CachingAllocator / ExpandableSegments."""
    rng = random.Random(seed)
    reference = ExpandableSegments() if expandable else CachingAllocator()
    state = _State(expandable)
    addresses = [0.0] * 400
    live: list[tuple[int, float]] = []  # (slot, the class's address)
    for slot in range(1, 400):
        if live and rng.random() < 0.45:
            at, handle = live.pop(rng.randrange(len(live)))
            reference.free(handle)
            run_program(state, ((0.0, at),), addresses)
        else:
            size = rng.choice((rng.randint(1, K_SMALL_SIZE), rng.randint(K_SMALL_SIZE, 10 * MIB), rng.randint(10 * MIB, 90 * MIB)))
            handle = reference.malloc(size)
            run_program(state, ((block_bytes(size), slot),), addresses)
            assert addresses[slot] == handle
            live.append((slot, handle))
        assert _program_state(state) == _class_state(reference)


def _reference_replay(walk: EventWalk, expandable: bool, steps: int = REPLAYED_STEPS) -> tuple[float, tuple, tuple]:
    """memory_fsdp.replayed_reserve as session 19 landed it (main at 03aa8c4): StreamAllocators over the walk's keyed events,
    step by step; (reserved, each stream's, each stream's high water)."""
    events = walk.events
    assert events is not None
    set_up_end = next((at for at, phase in walk.marks if phase != SET_UP_PHASE and at > 0), len(events))
    optimizer_at = next((at for at, phase in walk.marks if phase.startswith(OPTIMIZER_PHASE)), len(events))
    set_up, body, optimizer = events[:set_up_end], events[set_up_end:optimizer_at], events[optimizer_at:]
    allocators = StreamAllocators(expandable)
    states = [(key, size) for key, size in set_up if size > 0 and _STATE.search(key)]
    for key, size in set_up:
        if size > 0 and key != "cublas" and not _STATE.search(key):
            allocators.malloc("default", size)
    cublas = next((size for key, size in set_up if key == "cublas"), 0.0)
    handles: dict[str, tuple[str, float]] = {}

    def replay(part: list[tuple[str, float]]) -> None:
        for key, size in part:
            if size > 0:
                handles[key] = allocators.malloc(stream_of(key), size)
            elif size < 0:
                old, new = key.split("\0")
                if old in handles:
                    handles[new] = handles.pop(old)
            elif key in handles:
                allocators.free(handles.pop(key))

    for i in range(steps):
        if i == 0 and cublas > 0:
            for _ in range(2):
                allocators.malloc("default", cublas / 2)
        replay(body)
        if i == 0:
            for _, size in states:
                allocators.malloc("default", size)
        replay(optimizer)
        for key in sorted(handles, key=_unit_order):
            allocators.free(handles.pop(key))
    stream_reserved = tuple((s, allocators.streams[s].reserved if s in allocators.streams else 0.0) for s in STREAMS)
    high = tuple((s, a.high_water[True], a.high_water[False]) for s in STREAMS
                 if isinstance(a := allocators.streams.get(s), ExpandableSegments))  # fmt: skip
    return allocators.reserved, stream_reserved, high if expandable else ()


def _walk(model, step) -> EventWalk:
    walk = EventWalk()
    walk_fsdp_step(model, step, walk)
    return walk


def _grid_step(profile, b, s, shards, rec, tp, stage, expandable):
    step = fsdp_step_of(profile, b, s, shards, Precision.MIXED_BF16, Optimizer.ADAMW, rec, tp=tp, expandable_segments=expandable)
    if stage is not None:
        index, pp, layers, m = stage
        step = replace(step, pp=pp, pp_stage=index, stage_layers=layers, micro_batches=m)
    return step


@pytest.mark.parametrize("expandable", [True, False], ids=("expandable", "segments"))
@pytest.mark.parametrize("model,profile,b,s,shards,rec,tp,stage", GRID, ids=[f"{g[0].key}-{g[1]}-b{g[2]}-{g[5].value}-tp{g[6]}-pp{g[7] is not None}" for g in GRID])
def test_the_compiled_replay_is_the_keyed_one(model, profile, b, s, shards, rec, tp, stage, expandable) -> None:
    """Every step of the floor's grid: the same reserved bytes, stream by stream, and the same high water."""
    walk = _walk(model, _grid_step(profile, b, s, shards, rec, tp, stage, expandable))
    _MEMO.clear()
    replayed = replayed_reserve(walk, expandable)
    assert (replayed.reserved, replayed.stream_reserved, replayed.stream_high_water) == _reference_replay(walk, expandable)


LLAMA_405B = load_model("llama3-405b")
# torchtitan's Table 5 (tests/published_memory_runs.py, tt2412-405b-fsdp8-tp8-pp8-1f1b): Llama 3.1 405B, FSDP 8 x TP 8 x PP 8,
# b 4, 8 micro-batches, s 8192, full recomputation, Float8 compiled, 1F1B, stages of 15 + 6 x 16 + 15 layers
TABLE_5 = replace(fsdp_step_of("torchtitan-eager", 4, 8192, 8, Precision.FP8, Optimizer.ADAMW, Recompute.FULL, tp=8, compiled=True),
                  pp=8, micro_batches=8)  # fmt: skip


def _stage(step, index: int, split: tuple[int, ...] = (15, 16, 16, 16, 16, 16, 16, 15)):
    first = sum(split[:index])
    return replace(step, pp_stage=index, stage_layers=(first, first + split[index]))


def test_middle_stages_with_as_many_micro_batches_in_flight_replay_once() -> None:
    """Schedule1F1B runs min(m, p - s) warm-up forwards on stage s: with 2 micro-batches on PP 8, stages 1-6 hold the same
    tensors in the same order (their layers' names aside), so their programs are equal and the replay is memoised: stage 1's
    result is stage 6's without a replay of its own. Stage 7 (the loss, no gradient receive buffers) differs."""
    step = replace(TABLE_5, micro_batches=2)
    programs = [compile_streams(_walk(LLAMA_405B, _stage(step, i)))["default"] for i in (1, 6, 7)]
    assert programs[0] == programs[1] != programs[2]
    _MEMO.clear()
    replay_stream(programs[0], True, REPLAYED_STEPS)
    assert len(_MEMO) == 1
    replay_stream(programs[1], True, REPLAYED_STEPS)
    assert len(_MEMO) == 1  # a hit


# REPLAYED_STEPS: the replay stops after the first step and two steady ones. The allocator's state after a steady step that
# starts where the previous one started is where that one ended: every later step repeats it, so what is reserved no longer
# grows. Cases: a pipeline stage (Table 5's stage 1, where without expandable segments the second steady step still maps
# 1.5 GiB more: 70.38 -> 71.88 GiB, and the third none), FSDP with its all-gather prefetch and no recomputation (Llama 3 8B,
# FSDP 8, torchtitan's op-level selective checkpointing and full recomputation), TP 2 with full recomputation.
STEPS_CASES = [
    pytest.param(LLAMA_405B, _stage(TABLE_5, 1), id="405b-table5-stage1"),
    pytest.param(LLAMA_405B, _stage(TABLE_5, 7), id="405b-table5-last-stage"),
    *(pytest.param(load_model("llama3-8b"), fsdp_step_of("torchtitan-eager", 1, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, rec),
                   id=f"8b-fsdp8-{rec.value}") for rec in (Recompute.NONE, Recompute.OP, Recompute.FULL)),
    pytest.param(load_model("llama3-8b"), fsdp_step_of("torchtitan-eager", 2, 8192, 4, Precision.MIXED_BF16, Optimizer.ADAMW,
                                                       Recompute.FULL, tp=2), id="8b-tp2-fsdp4-full"),
]  # fmt: skip


@pytest.mark.parametrize("expandable", [True, False], ids=("expandable", "segments"))
@pytest.mark.parametrize("model,step", STEPS_CASES)
def test_five_replayed_steps_reserve_what_three_do(model, step, expandable: bool) -> None:
    walk = _walk(model, replace(step, expandable_segments=expandable))
    _MEMO.clear()
    three, five = replayed_reserve(walk, expandable), replayed_reserve(walk, expandable, steps=5)
    assert (five.reserved, five.stream_reserved, five.stream_high_water) == (three.reserved, three.stream_reserved,
                                                                               three.stream_high_water)  # fmt: skip
    assert three.reserved == _reference_replay(walk, expandable, steps=5)[0]


def test_the_third_step_is_where_table_5s_stage_settles() -> None:
    """Why two steady steps and not one: Table 5's stage 1 without expandable segments reserves 70.383 GiB on its default
    stream after the first steady step and 71.883 after the second (a 1.5 GiB segment more), then no more (the five-step
    case above); its all-gather (1.582 GiB) and reduce-scatter (3.0 GiB) streams settle in the first step."""
    walk = _walk(LLAMA_405B, replace(_stage(TABLE_5, 1), expandable_segments=False))
    _MEMO.clear()
    two, three = (dict(replayed_reserve(walk, False, steps=steps).stream_reserved) for steps in (2, 3))
    assert two["default"] == pytest.approx(70.3828125 * GIB)
    assert three["default"] == pytest.approx(71.8828125 * GIB)
    assert two["all-gather copy-in"] == three["all-gather copy-in"] == pytest.approx(1.58203125 * GIB)
    assert two["reduce-scatter"] == three["reduce-scatter"] == pytest.approx(3.0 * GIB)


MEMORY_405B = ("memory", "--model", "llama3-405b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--sequence-parallel",
               "--first-stage-layers", "15", "--last-stage-layers", "15", "--tp", "8", "--pp", "8", "--dp", "8", "--micro-batch", "4",
               "--micro-batches", "8", "--seq-len", "8192", "--recompute", "full", "--precision", "fp8", "--schedule", "1f1b", "--compile")  # fmt: skip


def test_the_405b_memory_total_is_unchanged(run_json) -> None:
    """`memory` of Table 5's layout: every stage walked and replayed; the bytes main gave before the compiled replay (03aa8c4)."""
    results = run_json(*MEMORY_405B)["results"]
    assert results["step_reserved_replayed"]["value"] == 85_188_411_392
    assert results["total"]["value"] == 86_799_024_128


def test_the_8b_strategy_table_is_unchanged(run_json) -> None:
    """`fit`'s strategy table for Llama 3 8B on 8 H100 under torchtitan, s 8192, B 8: the ZeRO-3 rows (walked, replayed, the
    deepest model found by replays) as main gave them before the compiled replay (03aa8c4)."""
    rows = run_json("fit", "--model", "llama3-8b", "--gpus", "8", "--gpu", "h100-sxm5", "--framework", "torchtitan", "--seq-len", "8192",
                    "--batch", "8")["tables"]["strategies"]["rows"]  # fmt: skip
    zero3 = [(r["memory"], r["max_layers"]) for r in rows if r["strategy"] == "ZeRO-3 (FSDP)"]
    assert zero3 == [(94_132_764_672, 28), (63_513_960_448, 46), (40_368_078_848, 122)]


@pytest.mark.parametrize("layout", [(1, 1, 8, 3), (2, 1, 4, 3), (1, 2, 4, 3), (2, 2, 2, 0)], ids=("fsdp8", "tp2-fsdp4", "pp2-fsdp4", "tp2-pp2-ddp"))
@pytest.mark.parametrize("rec", [Recompute.NONE, Recompute.FULL], ids=("none", "full"))
def test_the_deepest_model_screen_is_memory_ofs_floor(layout, rec) -> None:
    """fit_table.max_layers screens depths by the search's floor (search_step_peaks.worst_stage_total, from walks of 4 and 5
    layers) where it walked every depth (memory_of with allocator_replayed=False): the same bytes at every depth tried."""
    from parcalc.core.fit import Config, memory_of, training_setup_of, with_layers
    from parcalc.core.search_step_peaks import worst_stage_total
    from parcalc.results.fit_request import request

    req = request(model="llama3-8b", gpus="8", gpu=["h100-sxm5"], framework="torchtitan", seq_len="8192", batch="8")
    tp, pp, dp, zero = layout
    config = Config.of(tp, pp, dp, 1, rec, zero=zero, sequence_parallel=tp > 1)
    setup = training_setup_of(config, req.training, req.cluster)
    for layers in (pp, 2 * pp, 30, 64):
        deeper = with_layers(req.model, layers)
        walked = memory_of(deeper, config, req.training, req.cluster, allocator_replayed=False).worst.total.value
        assert worst_stage_total(deeper, config.layout, setup) == walked, layers


def test_no_bound_of_the_replay_by_the_blocks_at_peak() -> None:
    """Issue #30 (MEMFAST) asked for an upper bound of a stage's replay (each pool's blocks at its peak plus a segment or a
    page), so that rows under it need no replay to be listed: there is none of that form. A best-fit allocator that never
    gives memory back reserves for the history, not the peak: requests that each outgrow the free blocks left by the last
    (c10/cuda/CUDACachingAllocator.cpp get_free_block: a cached block is taken only if it holds the request) map new memory
    every time. Without expandable segments, 12, 14, ..., 20 MiB requests each freed before the next: 80 MiB reserved for
    20 MiB live at most (4 x the peak; n growing requests, n times). With them, each request followed by a 2 MiB block that
    pins its hole: 140 MiB reserved for 110 MiB at the peak, over the peak plus one 20 MiB page. So the search lists only
    rows it replayed (parcalc.core.search_replay)."""
    segments, peak = CachingAllocator(), 0.0
    for size in (12, 14, 16, 18, 20):
        handle = segments.malloc(size * MIB)
        peak = max(peak, segments.allocated)
        segments.free(handle)
    assert (segments.reserved, peak) == (80 * MIB, 20 * MIB)
    expandable, peak = ExpandableSegments(), 0.0
    for size in (20, 40, 60, 80, 100):
        handle = expandable.malloc(size * MIB)
        expandable.malloc(2 * MIB)
        peak = max(peak, expandable.allocated)
        expandable.free(handle)
    assert (expandable.reserved, peak) == (140 * MIB, 110 * MIB)
    assert expandable.reserved > peak + 20 * MIB  # above the blocks at the peak and one page of the large pool
