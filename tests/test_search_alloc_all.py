"""SegmentWalk.alloc_all (a run of allocations at once: a stage's sharded parameters and optimizer states, foreach AdamW's
temporaries; parcalc.core.memory_fsdp._unit_allocs) leaves a walk as alloc() one by one does: the same segments (each
stream's four sums at its first peak), live tensors in order, blocks, streams and running sums, over whole step walks of
pipeline stages and interleaved ranks (where it is first in its phase and where a phase's peak came before it)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import fsdp_step_of, walk_fsdp_step
from parcalc.core.memory_walk import Walk
from parcalc.core.search_segment_walk import SegmentWalk
from parcalc.presets import load_model

LLAMA = load_model("llama3-8b", ())  # torchtitan's Llama code, the walk's own model


class _OneByOne(SegmentWalk):
    """The same walk, each allocation of a run made by alloc() in turn (Walk.alloc_all)."""

    def alloc_all(self, allocs: tuple[tuple[str, float, str, str], ...]) -> None:
        Walk.alloc_all(self, allocs)


def _state(walk: SegmentWalk) -> tuple[object, ...]:
    held = {key: value[1:] for key, value in walk._held.items()}
    return walk.segments, list(walk.live.items()), held, {s: tuple(v) for s, v in walk.sums.items()}


def _both(model, step) -> tuple[tuple[object, ...], tuple[object, ...]]:  # type: ignore[no-untyped-def]
    at_once, one_by_one = SegmentWalk(layer_keys=True), _OneByOne(layer_keys=True)
    walk_fsdp_step(model, step, at_once)
    walk_fsdp_step(model, step, one_by_one)
    return _state(at_once), _state(one_by_one)


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([1, 2, 4]), rank_share=st.floats(0, 0.999), chunks=st.sampled_from([1, 2, 3, 4]), layers=st.integers(1, 3),
       micro_batches=st.sampled_from([1, 2, 4, 8]), shards=st.sampled_from([2, 8, 64]), impl=st.sampled_from(["foreach", "fused", "for-loop"]),
       precision=st.sampled_from([Precision.MIXED_BF16, Precision.BF16]), rec=st.sampled_from([Recompute.NONE, Recompute.FULL]))  # fmt: skip
def test_a_run_of_allocations_at_once_is_the_walk_one_by_one(pp, rank_share, chunks, layers, micro_batches, shards, impl, precision,
                                                             rec) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """FSDP alone, 1F1B stages and interleaved ranks of Llama 3 8B's shapes (fewer layers), every AdamW implementation and
    precision: the walk with runs allocated at once is, segment by segment and tensor by tensor, the walk one by one."""
    rank = int(rank_share * pp)
    step = replace(fsdp_step_of("torchtitan-eager", 1, 1024, shards, precision, Optimizer.ADAMW, rec, 1), optimizer_impl=impl)
    if pp == 1:
        model = replace(LLAMA, layers=layers * 2)
    elif chunks == 1:
        model = replace(LLAMA, layers=layers * pp)
        step = replace(step, pp=pp, pp_stage=rank, stage_layers=(rank * layers, (rank + 1) * layers), micro_batches=micro_batches)
    else:  # virtual stage rank + k pp holds layers [(rank + k pp) layers, ... + layers) (ScheduleInterleaved1F1B's round robin)
        model = replace(LLAMA, layers=layers * pp * chunks)
        ranges = tuple(((rank + k * pp) * layers, (rank + k * pp + 1) * layers) for k in range(chunks))
        step = replace(step, pp=pp, pp_stage=rank, pp_chunks=ranges, micro_batches=max(micro_batches, pp))
    at_once, one_by_one = _both(model, step)
    assert at_once == one_by_one
    # the walk's states were allocated: Llama's 9 parameters a block, each a shard and two AdamW states (3 tensors)
    assert sum(1 for key, _ in at_once[1] if key.startswith("fsdp.L") and key.endswith((".shard", ".state0", ".state1"))) >= 27 * layers


def test_a_run_after_a_higher_peak_keeps_the_phase_peak() -> None:
    """A run whose end stays below the phase's peak so far leaves the peak where it was (the walk's first-peak rule: only a
    strictly higher point moves it), as one by one; and one that ends higher moves it to its end."""
    runs = (("fsdp.a.shard", 4096.0, "sharded parameters", "parameter shards"), ("fsdp.b.shard", 8192.0, "sharded parameters", "parameter shards"))
    for first in (1 << 20, 1024):
        walks = SegmentWalk(), _OneByOne()
        for walk in walks:
            walk.phase = "before the step"
            walk.alloc("big", first, "activations", "a tensor")
            walk.free("big")
            walk.alloc_all(runs)
        assert _state(walks[0]) == _state(walks[1])
        peak = walks[0].segments[-1][1]["default"][0]
        # 1 MiB then freed: the peak stays 1 MiB (> 4 KiB + 8 KiB); 1 KiB (a 1,024-byte block) then freed: the run's end, 12 KiB
        assert peak == (1 << 20 if first == 1 << 20 else 12288.0)
