"""How the replayed allocator's reserve (parcalc.core.memory_fsdp.replayed_reserve, expandable segments) grows with the
number of identical transformer blocks: what a cheap form for fit's search may and may not assume (issue #30).

What holds: with expandable segments each pool maps its high water rounded up to whole pages (2 MiB small, 20 MiB large;
allocator.ExpandableSegments.high_water), so a cheap form must extrapolate the high water, not the mapped bytes, and round
last. What does not: the high water is not affine in the layer count from 4 and 5 layers, as search_walk_runs extrapolates
each stream's peak of live blocks. It settles only after a transient of several layers (Llama 3 70B, TP 8, full
checkpointing: 7 layers, one of them lowering it by 360 MiB), and where it settles it may be periodic rather than affine
(Llama 3 8B, selective op checkpointing: the default stream's large pool rises 1,272 MiB a layer, and 1,400 about every
fourth, with a slip of the period between 16 and 24 layers). The values are the replay's own (the allocator's rules as
pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp has them, EXPANDABLE_SOURCE), pinned so that a change to the walk or the
replay that moves them is seen."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise

import pytest

from parcalc.core.allocator import K_LARGE_BUFFER, K_SMALL_BUFFER
from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import fsdp_replayed, fsdp_step_of
from parcalc.presets import load_model

MIB = 2**20
# Table 1's FSDP row (torchtitan, Llama 3 8B, b 2, s 8192, selective op, FSDP 8) and Table 4's 70B row's step (TP 8, FSDP 32,
# full checkpointing, b 1): tests/published_memory_runs.py
LLAMA3_8B_OP = fsdp_step_of("torchtitan-eager", 2, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.OP)
LLAMA3_70B_TP8 = fsdp_step_of("torchtitan-eager", 1, 8192, 32, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.FULL, tp=8)


def _high_water(model: str, step, layers: int) -> dict[str, tuple[float, float]]:
    replayed = fsdp_replayed(replace(load_model(model), layers=layers), step)
    return {stream: (small, large) for stream, small, large in replayed.stream_high_water}


def _rises(model: str, step, layers: range, stream: str) -> list[float]:
    """The large pool's high water on `stream`, what each more layer adds (MiB)."""
    highs = [_high_water(model, step, n)[stream][1] for n in layers]
    return [(b - a) / MIB for a, b in pairwise(highs)]


@pytest.mark.parametrize(("model", "step"), [("llama3-8b", LLAMA3_8B_OP), ("llama3-70b", LLAMA3_70B_TP8)], ids=["8b-op", "70b-tp8"])
def test_each_pool_maps_its_high_water_rounded_to_whole_pages(model: str, step) -> None:
    replayed = fsdp_replayed(load_model(model), step)
    for (stream, small, large), (name, reserved) in zip(replayed.stream_high_water, replayed.stream_reserved, strict=True):
        assert stream == name
        assert reserved == K_SMALL_BUFFER * math.ceil(small / K_SMALL_BUFFER) + K_LARGE_BUFFER * math.ceil(large / K_LARGE_BUFFER)


def test_without_expandable_segments_there_is_no_high_water() -> None:
    fsdp2 = fsdp_step_of("fsdp2-eager", 1, 4096, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.NONE)
    assert fsdp_replayed(replace(load_model("llama3-8b"), layers=4), fsdp2).stream_high_water == ()


def test_the_70b_high_water_settles_only_after_seven_layers() -> None:
    """From 4 and 5 layers the default stream's large pool falls 66.5 MiB a layer; from 7 layers on it rises 47.5 MiB a
    layer (a checkpointed block's input and its shards and states). At 80 layers it is 7,399.94 MiB: the 4/5-layer line
    would give less than nothing."""
    assert _rises("llama3-70b", LLAMA3_70B_TP8, range(3, 11), "default") == [33.5, -66.5, 47.5, -360.5625, 47.5, 47.5, 47.5]
    assert _rises("llama3-70b", LLAMA3_70B_TP8, range(3, 6), "reduce-scatter") == [12.751953125, 12.751953125]
    full = {stream: large for stream, _, large in fsdp_replayed(load_model("llama3-70b"), LLAMA3_70B_TP8).stream_high_water}
    assert full["default"] / MIB == 7399.9375
    four, five = (_high_water("llama3-70b", LLAMA3_70B_TP8, n)["default"][1] for n in (4, 5))
    assert four + (80 - 4) * (five - four) < 0


def test_the_8b_high_water_is_periodic_not_affine() -> None:
    """Selective op checkpointing: about every fourth layer the default stream's large pool rises 128 MiB more. The line
    through 12 and 13 layers overshoots the 32-layer replay by 392 MiB, and the period of four layers from 8 and 12 layers
    undershoots it by 128 MiB: the pattern slips a layer between 16 and 24 layers (its rises from 4 to 32 layers: 1,400 at
    4 -> 5, 8 -> 9, 12 -> 13, 16 -> 17, then 19 -> 20, 23 -> 24, 27 -> 28, 31 -> 32), as a gap that grows a little every
    layer fits a block after three layers once in a while, not four. Only a replay that sees the allocator's state can
    tell when its pattern repeats."""
    rises = _rises("llama3-8b", LLAMA3_8B_OP, range(4, 14), "default")
    assert rises == [1400.0, 1272.0, 1272.0, 1272.0, 1400.0, 1272.0, 1272.0, 1272.0, 1400.0]
    highs = {n: _high_water("llama3-8b", LLAMA3_8B_OP, n)["default"][1] for n in (8, 12, 13)}
    full = _high_water("llama3-8b", LLAMA3_8B_OP, 32)["default"][1]
    assert full / MIB == 74607.0
    assert (highs[12] + 19 * (highs[13] - highs[12]) - full) / MIB == 392.0
    assert (highs[12] + 5 * (highs[12] - highs[8]) - full) / MIB == -128.0  # 32 = 12 + 5 periods of 4
