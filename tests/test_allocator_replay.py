"""The caching allocator replayed per CUDA stream, with expandable segments (parcalc.core.allocator.ExpandableSegments,
StreamAllocators) and over FSDP2 steps (parcalc.core.memory_fsdp.replayed_reserve). The expected values are worked by hand
from pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (read at 001074d): get_free_block, should_split,
try_allocate_expandable_block / find_expandable_block / map_block, free_block / try_merge_blocks (EXPANDABLE_SOURCE)."""

from __future__ import annotations

from parcalc.core.allocator import CachingAllocator, ExpandableSegments, StreamAllocators
from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import EventWalk, fsdp_replayed, fsdp_step_of, replayed_reserve, walk_fsdp_step
from parcalc.presets import load_model

MIB = 2**20


def test_a_segment_grows_by_whole_20_mib_pages_from_its_free_top() -> None:
    a = ExpandableSegments()
    first = a.malloc(30 * MIB)  # maps 2 pages: [0, 40 MiB), the top 10 MiB free
    assert a.reserved == 40 * MIB
    a.malloc(5 * MIB)  # the free top block serves it: nothing mapped
    assert a.reserved == 40 * MIB
    a.free(first)  # [0, 30) free below; [35, 40) free at the top
    # 35 MiB: no free block holds it; find_expandable_block starts at the free top block (5 MiB) and map_block maps
    # ceil(30 / 20) = 2 pages more: 80 MiB, not the 100 a fresh segment would take
    a.malloc(35 * MIB)
    assert a.reserved == 80 * MIB


def test_the_top_block_is_taken_last() -> None:
    """get_free_block counts the top block at the size it can expand to: an 8 MiB request takes the 15 MiB block below
    (address 0), not the smaller 10 MiB top one, so a 12 MiB request then finds neither and maps a page."""
    a = ExpandableSegments()
    low = a.malloc(15 * MIB)
    a.malloc(15 * MIB)  # [15, 30), the top [30, 40) free
    a.free(low)
    assert a.malloc(8 * MIB) == 0  # address 0 of the large pool (handle = 2 x address)
    a.malloc(12 * MIB)  # free: [8, 15) and the top [30, 40): the top's 10 MiB and one more page
    assert a.reserved == 60 * MIB  # the top taken first would have left [0, 15) for it: 40 MiB


def test_expandable_segments_split_any_remainder_and_merge_on_free() -> None:
    a = ExpandableSegments()
    blocks = [a.malloc(2 * MIB) for _ in range(10)]  # 10 x 2 MiB in one 20 MiB page (should_split: remainder >= 512 B)
    assert a.reserved == 20 * MIB and a.allocated == 20 * MIB
    for b in blocks:
        a.free(b)
    a.malloc(20 * MIB)  # merged back into one free 20 MiB block
    assert a.reserved == 20 * MIB
    small = ExpandableSegments()
    small.malloc(1000)  # the small pool maps 2 MiB pages
    assert small.reserved == 2 * MIB and small.allocated == 1024


def test_a_freed_block_serves_only_its_own_stream() -> None:
    for expandable, one_stream in ((False, 40 * MIB), (True, 40 * MIB)):
        a = StreamAllocators(expandable)
        a.free(a.malloc("default", 30 * MIB))
        a.malloc("default", 30 * MIB)
        assert a.reserved == (30 if not expandable else 40) * MIB <= one_stream
        a.malloc("reduce-scatter", 30 * MIB)  # another stream's pool: a segment of its own
        assert a.reserved == (60 if not expandable else 80) * MIB


def test_without_expandable_segments_the_replay_is_the_caching_allocator() -> None:
    ours, theirs = StreamAllocators(False), CachingAllocator()
    for size in (3 * MIB, 30 * MIB, 700, 12 * MIB):
        ours.malloc("default", size)
        theirs.malloc(size)
    # 3 MiB: a 20 MiB kLargeBuffer segment, its 17 MiB rest cached (split: > kSmallSize); 30 MiB its own segment; 700 B a
    # 2 MiB small segment; 12 MiB: the cached 17 MiB block, split
    assert ours.reserved == theirs.reserved == 20 * MIB + 30 * MIB + 2 * MIB


LLAMA3_8B_FSDP8 = fsdp_step_of("torchtitan-eager", 2, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.OP)


def test_torchtitan_runs_with_expandable_segments_and_fsdp2_without() -> None:
    # run_llama_train.sh at 9dec370: PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"; PyTorch's default: off
    assert LLAMA3_8B_FSDP8.expandable_segments
    assert not fsdp_step_of("fsdp2-eager", 2, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.OP).expandable_segments


def test_the_replayed_run_of_llama3_8b_on_8_ranks() -> None:
    """Table 1's FSDP row (torchtitan, b 2, s 8192, selective op): each stream's pool at its own peak sums to 74.94 GiB
    (the step walk's reserved figure); the replayed run maps 79.24 GiB (published: 82.4 GiB), 4.15 GiB of it on the
    default stream beyond its peak: the optimizer states the first step creates at its end sit where that step's
    activations were, and the next step's activations map above them. Steady from the second step on."""
    replayed = fsdp_replayed(load_model("llama3-8b"), LLAMA3_8B_FSDP8)
    assert replayed.reserved == 85_083_553_792  # 79.24 GiB
    assert sum(size for _, size in replayed.stream_pools) == 80_469_819_392  # 74.94 GiB, fsdp_step_peak's
    default = dict(replayed.stream_reserved)["default"] - dict(replayed.stream_pools)["default"]
    assert 4.1 * 2**30 < default < 4.2 * 2**30
    walk = EventWalk()
    walk_fsdp_step(load_model("llama3-8b"), LLAMA3_8B_FSDP8, walk)
    by_steps = [replayed_reserve(walk, True, n).reserved for n in (1, 2, 3, 4)]
    assert by_steps[0] < by_steps[1] == by_steps[2] == by_steps[3]
    # without expandable segments (each request no cached block serves its own cudaMalloc): 82.0 GiB
    assert replayed_reserve(walk, False).reserved == 88_051_023_872


def test_memory_shows_the_replayed_run_beside_the_total(run_json) -> None:
    results = run_json("memory", "--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--dp", "8",
                       "--micro-batch", "2", "--seq-len", "8192", "--recompute", "op")["results"]  # fmt: skip
    assert results["step_reserved_replayed"]["value"] == 85_083_553_792  # the total's M_res since session 19
    assert results["step_reserved"]["value"] == 80_469_819_392  # each stream's own peak, beside (the total's M_res before)
    assert results["reserve"]["value"] == 1.5 * 2**30  # CUDA context and NCCL: the fragmentation allowance is the replay's
    assert results["total"]["value"] == results["step_reserved_replayed"]["value"] + results["reserve"]["value"]


def test_a_negative_fragmentation_term_reads_as_a_minus() -> None:
    """A stream's F can be negative (whole 20 MiB pages pack blocks closer than a 2 MiB-rounded segment each): the filled
    formula says "- 56.6 MB", not "+ -56.6 MB" (parcalc.derivation._signed)."""
    from parcalc.derivation import Derivation, Term

    terms = (Term("R", "R", "R", 4.0e9, "B", "a pool"), Term("F", "F", "F", -56_623_104.0, "B", "its fragmentation"))
    d = Derivation("x", "x", "M", "M", "$R + $F", "$R + $F", terms, 4.0e9 - 56_623_104.0, "B", "source")
    assert d.substituted_text() == "4 GB - 56.623104 MB"
    assert d.substituted_tex(lambda t: f"{t.value:.0f}") == "4000000000 - 56623104"
