"""parcalc.core.search_segment_walk: a step walk whose blocks are replayed from recordings equals the same walk with every
block walked, segment by segment (each stream's four sums at its first peak), live tensor by live tensor (in order) and
in each stream's running sums; calls that touch what a replay cannot follow are walked, and a recording is only replayed
where the touched state is the same."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core import memory_pipeline_stage, search_segment_walk
from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import fsdp_step_of, fsdp_step_peak, walk_fsdp_step
from parcalc.core.memory_walk import Walk
from parcalc.core.search_segment_walk import SegmentWalk
from parcalc.core.search_walk_runs import reserved_total
from parcalc.presets import load_model

LLAMA = load_model("llama3-8b", ())  # torchtitan's Llama code, the walk's own model


def _state(walk: SegmentWalk) -> tuple[object, ...]:
    """All a walk leaves: its segments, its live tensors in order, each tensor's block and stream, the streams' sums, the
    live block tensors by layer."""
    held = {key: value[1:] for key, value in walk._held.items()}
    spaces = {name: list(space.items()) for name, space in walk._spaces.items() if space}
    return walk.segments, list(walk.live.items()), held, {s: tuple(v) for s, v in walk.sums.items()}, spaces


@contextmanager
def _fresh_caches() -> Iterator[None]:
    """The module's caches across walks (recordings, keys' streams, layers and prefixes) empty, as in a new process: a walk
    then meets every key first in a replay, none looked up before by a walked call."""
    names = ("_RECORDINGS", "_SHAPES", "_SPACE_OF", "_STREAM_OF", "_LAYER_OF", "_KEY_INFO", "_ALLOC_RUNS")
    kept = [getattr(search_segment_walk, name) for name in names]
    for name in names:
        setattr(search_segment_walk, name, {})
    try:
        yield
    finally:
        for name, cache in zip(names, kept, strict=True):
            setattr(search_segment_walk, name, cache)


def _walked(model, step, replay: bool) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    walk = SegmentWalk(layer_keys=True, replay=replay)
    walk_fsdp_step(model, step, walk)
    return _state(walk)


@settings(max_examples=40, deadline=None)
@given(pp=st.sampled_from([2, 3, 4, 8]), stage_share=st.floats(0, 0.999), micro_batches=st.integers(1, 12), layers=st.integers(1, 5),
       rec=st.sampled_from([Recompute.NONE, Recompute.FULL, Recompute.OP]), tp=st.sampled_from([1, 2, 4]), shards=st.sampled_from([2, 8]),
       micro=st.sampled_from([1, 2]), precision=st.sampled_from([Precision.MIXED_BF16, Precision.BF16]),
       outputs=st.booleans())  # fmt: skip
def test_a_stage_with_replayed_blocks_is_the_walked_stage(pp, stage_share, micro_batches, layers, rec, tp, shards, micro, precision,
                                                          outputs) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """Every 1F1B stage (first, middle, last; torchtitan's return_outputs or not) under every checkpointing policy, TP
    degree and precision: twice replayed (the second from recordings made by the first walk or an earlier example) and
    once walked, the same state."""
    if tp > 1 and rec is Recompute.OP:  # the TP walk checkpoints whole blocks or nothing (memory_fsdp.tp_gaps)
        rec = Recompute.FULL
    stage = int(stage_share * pp)
    model = replace(LLAMA, layers=layers * pp)
    step = replace(fsdp_step_of("torchtitan-eager", micro, 1024, shards, precision, Optimizer.ADAMW, rec, tp), pp=pp, pp_stage=stage,
                   stage_layers=(stage * layers, (stage + 1) * layers), micro_batches=micro_batches, pp_return_outputs=outputs)  # fmt: skip
    with _fresh_caches():
        replayed = _walked(model, step, replay=True)  # first: recorded and replayed in one walk
        again = _walked(model, step, replay=True)  # replayed from the first walk's recordings
    walked = _walked(model, step, replay=False)
    assert replayed == walked
    assert again == walked


def test_a_stage_with_a_policy_per_block_is_the_walked_stage() -> None:
    """torchtitan's selective layer checkpointing (a policy per block): each block's kind of its own, the same state."""
    model = replace(LLAMA, layers=8)
    step = replace(fsdp_step_of("torchtitan-eager", 1, 1024, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.FULL, 1), pp=4,
                   pp_stage=1, stage_layers=(2, 4), micro_batches=6, block_policies=("none", "full", "op", "none") * 2)  # fmt: skip
    with _fresh_caches():
        replayed = _walked(model, step, replay=True)
    assert replayed == _walked(model, step, replay=False)


def test_the_blocks_are_replayed_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage of 4 layers and 8 micro-batches: 32 block forwards and 32 backwards, of which the replaying walk walks two
    of each (one per kind of call: the stage's first layer, whose input is a receive buffer, and the others), the rest
    replayed."""
    calls = {"forward": 0, "backward": 0}

    def counted(name, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(memory_pipeline_stage, "block_forward", counted("forward", memory_pipeline_stage.block_forward))
    monkeypatch.setattr(memory_pipeline_stage, "block_backward", counted("backward", memory_pipeline_stage.block_backward))
    model = replace(LLAMA, layers=16, hidden=512, heads=8, kv_heads=8, head_dim=64, ffn_hidden=1536)  # shapes no other test walks (new kinds)
    step = replace(fsdp_step_of("torchtitan-eager", 1, 512, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.NONE, 1), pp=4,
                   pp_stage=1, stage_layers=(4, 8), micro_batches=8)  # fmt: skip
    with _fresh_caches():
        replayed = _walked(model, step, replay=True)
    assert calls == {"forward": 2, "backward": 2}  # walked once each for the stage's first layer (its input received), once for the others
    assert replayed == _walked(model, step, replay=False)
    assert calls == {"forward": 34, "backward": 34}


def test_the_search_value_is_the_whole_walks_with_replay() -> None:
    """Llama 3 8B's stage 2 of 4 with 12 micro-batches, TP 2: reserved_total (short walks, replayed blocks) equals the
    whole walk's reserved peak (memory_fsdp.fsdp_step_peak, a StreamWalk: every op walked), byte for byte."""
    step = replace(fsdp_step_of("torchtitan-eager", 1, 2048, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.FULL, 2), pp=4,
                   pp_stage=2, stage_layers=(16, 24), micro_batches=12)  # fmt: skip
    assert reserved_total(LLAMA, step) == fsdp_step_peak(LLAMA, step).reserved


# -- the rules, on ops of our own ---------------------------------------------------------------------------------------


def _ops(walk: Walk, layer: str, names: tuple[str, ...], size: float) -> str:
    """A block-like call: temporaries, a saved tensor, its input freed where it is live, a gradient added into a name."""
    (inp,) = names
    walk.alloc(f"{layer}.a", size, "temporaries", "a")
    walk.alloc(f"{layer}.b", 2 * size, "temporaries", "b")
    walk.free(f"{layer}.a")
    walk.alloc(f"{layer}.saved", size, "activations", "saved")
    walk.free(f"{layer}.b", inp)
    if f"{layer}.cached" not in walk.live:
        walk.alloc(f"{layer}.cached", 3 * size, "activations", "cached")
    walk.alloc(f"{layer}.out", size, "activations", "out")
    return f"{layer}.out"


def _looking_at_everything(walk: Walk, layer: str, names: tuple[str, ...], size: float) -> str:
    walk.alloc(f"{layer}.x{len(walk.live)}", size, "temporaries", "depends on how much is live")
    return ""


def _program(walk: SegmentWalk, fn, size: float) -> list[str]:  # type: ignore[no-untyped-def]
    """Calls on layers of two micro-batches, with inputs live or not and a cached tensor present on one layer."""
    outs = []
    walk.phase = "forward: micro-batch 1 of 2"
    walk.alloc("m0.in", size, "activations", "input")
    walk.alloc("m1.L2.cached", 3 * size, "activations", "cached")  # this layer's call then touches another state
    for j in (0, 1):
        current = f"m{j}.in"
        for i in range(4):
            if i == 2:
                walk.alloc("big", 64 * size, "temporaries", "a peak of the phase before the call")
            outs.append(walk.replayable(fn, f"m{j}.L{i}", (current,), size))
            if i == 2:
                walk.free("big")
            current = outs[-1] or current
        walk.phase = "forward: micro-batch 2 of 2"
    return outs


@pytest.mark.parametrize("size", [1000.0, 3 * 2**20, 2**30])  # a small block, a medium one, a large one's segment
@pytest.mark.parametrize("fn", [_ops, _looking_at_everything])
def test_replayed_calls_keep_peaks_order_and_state(fn, size) -> None:  # type: ignore[no-untyped-def]
    walked, replayed = SegmentWalk(layer_keys=True, replay=False), SegmentWalk(layer_keys=True, replay=True)
    with _fresh_caches():
        out = _program(replayed, fn, size)
    assert out == _program(walked, fn, size)
    assert _state(replayed) == _state(walked)
