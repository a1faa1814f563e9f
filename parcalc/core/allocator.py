"""PyTorch's CUDA caching allocator: what a tensor's storage takes (allocated) and what the
allocator holds from the driver for it (reserved), from its rounding rules.

Source: pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (constants and round_size /
get_allocation_size, unchanged from PyTorch 2.0 to 2.11):
- kMinBlockSize = 512: every block is a multiple of 512 bytes, at least 512 (round_size, with the
  default roundup_power2_divisions off); torch.cuda.memory_allocated counts these block sizes;
- kSmallSize = 1 MiB: requests up to it come from the small pool, in 2 MiB segments (kSmallBuffer);
- kMinLargeAlloc = 10 MiB: requests between 1 and 10 MiB take a 20 MiB segment (kLargeBuffer);
  larger ones a segment of their own size rounded up to kRoundLarge = 2 MiB.
A block split from a cached segment keeps the rest for later requests, so reserved_bytes is the
least the allocator must hold for a set of live tensors: small and medium ones packed into their
segments, each large one in its own 2 MiB-rounded segment. Fragmentation on top of that (cached
blocks that no later request fits) depends on the whole history of allocations: CachingAllocator
replays the allocator's block rules over such a history.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20
ALLOCATOR_SOURCE = ("pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp: round_size (kMinBlockSize = 512 B blocks), "
                    "get_allocation_size (2 MiB segments for requests up to kSmallSize = 1 MiB, 20 MiB kLargeBuffer up to "
                    "kMinLargeAlloc = 10 MiB, larger rounded to kRoundLarge = 2 MiB)")


def block_bytes(size: float) -> float:
    """The block a request of `size` bytes gets: round_size."""
    if size <= 0:
        return 0.0
    return float(K_MIN_BLOCK * max(1, math.ceil(size / K_MIN_BLOCK)))


def segment_bytes(size: float) -> float:
    """The segment cudaMalloc'd for a request that no cached block serves: get_allocation_size."""
    if size <= K_SMALL_SIZE:
        return float(K_SMALL_BUFFER)
    if size < K_MIN_LARGE_ALLOC:
        return float(K_LARGE_BUFFER)
    return float(K_ROUND_LARGE * math.ceil(size / K_ROUND_LARGE))


def reserved_bytes(blocks: Iterable[float]) -> float:
    """The least the allocator reserves to hold these live blocks at once (module docstring)."""
    small = medium = large = 0.0
    for size in blocks:
        if size <= K_SMALL_SIZE:
            small += size
        elif size < K_MIN_LARGE_ALLOC:
            medium += size
        else:
            large += segment_bytes(size)
    return reserved_of_sums(small, medium, large)


def reserved_of_sums(small: float, medium: float, large: float) -> float:
    """reserved_bytes from its three sums: the small blocks' bytes, the medium ones', the large ones' segments."""
    return K_SMALL_BUFFER * math.ceil(small / K_SMALL_BUFFER) + K_LARGE_BUFFER * math.ceil(medium / K_LARGE_BUFFER) + large


def reserved_floor_of_sums(allocated: float, small: float, expandable: bool) -> float:
    """The least a stream's pools can have reserved once `allocated` bytes of blocks were live on it at once, `small` of
    them in the small pool (blocks up to kSmallSize), whatever came before: each pool reserves at least what it has
    allocated, in whole units, and never gives any back in a run (nothing released without empty_cache or an OOM retry).
    The small pool's unit is 2 MiB (kSmallBuffer segments; expandable segments map 2 MiB pages); the large pool's is 2 MiB
    without expandable segments (its segments are 20 MiB or kRoundLarge multiples) and 20 MiB with them (kLargeBuffer
    pages). So the replay of any run in which the stream reaches that peak reserves at least this on it (the search's
    screen: parcalc.core.search_walk_runs.floor_total); each stream's segment rounding of its own peak (reserved_of_sums)
    is not such a bound: blocks split from one cached segment, or packed into 20 MiB pages, take less."""
    page = K_LARGE_BUFFER if expandable else K_ROUND_LARGE
    return K_SMALL_BUFFER * math.ceil(small / K_SMALL_BUFFER) + page * math.ceil((allocated - small) / page)


class CachingAllocator:
    """The caching allocator's block rules replayed over a sequence of mallocs and frees, to see what it reserves
    (c10/cuda/CUDACachingAllocator.cpp, the defaults: one stream, expandable_segments off, max_split_size unlimited,
    no garbage-collection threshold, nothing released to the driver without an OOM or empty_cache):
    - a request is rounded to 512 B (round_size) and served from the small pool (<= kSmallSize) or the large pool;
    - get_free_block: the smallest cached free block of the pool that holds it (best fit; ties by address);
    - else alloc_block: a new segment of get_allocation_size(request) (segment_bytes);
    - should_split: the block is split when what remains is >= 512 B (small pool) or > kSmallSize (large pool), the
      rest staying cached as a free block of the same segment;
    - free_block: the block merges with free neighbours of its segment (try_merge_blocks) and goes back to its pool.
    What a segment holds free is reserved all the same: fragmentation is the reserved total less the live blocks."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[float, float]]] = {True: [], False: []}  # small? -> sorted (size, address)
        self._blocks: dict[float, list] = {}  # address -> [size, segment start, segment end, small, free]
        self._ending_at: dict[float, float] = {}  # a block's end address -> its address
        self._next_address = 0.0
        self.reserved = 0.0
        self.allocated = 0.0
        self.peak_allocated = 0.0

    def _put(self, address: float, size: float, start: float, end: float, small: bool, free: bool) -> None:
        self._blocks[address] = [size, start, end, small, free]
        self._ending_at[address + size] = address
        if free:
            insort(self._free[small], (size, address))

    def _take(self, address: float) -> list:
        block = self._blocks.pop(address)
        del self._ending_at[address + block[0]]
        if block[4]:  # its place in the sorted free list, found by bisection (the pair is unique: one block an address)
            pool = self._free[block[3]]
            del pool[bisect_left(pool, (block[0], address))]
        return block

    def malloc(self, size: float) -> float:
        """A block for `size` bytes; returns its address (the handle to free it with)."""
        if size <= 0:
            return -1.0  # nothing allocated (free(-1.0) does nothing)
        size = block_bytes(size)
        small = size <= K_SMALL_SIZE
        pool = self._free[small]
        at = bisect_left(pool, (size, -1.0))
        if at < len(pool):
            address = pool[at][1]
            block_size, start, end, _, _ = self._take(address)
        else:
            block_size, address = segment_bytes(size), self._next_address
            start, end = address, address + block_size
            self._next_address = end
            self.reserved += block_size
        remaining = block_size - size
        if remaining >= K_MIN_BLOCK if small else remaining > K_SMALL_SIZE:
            self._put(address + size, remaining, start, end, small, True)
            block_size = size
        self._put(address, block_size, start, end, small, False)
        self.allocated += block_size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return address

    def free(self, address: float) -> None:
        if address < 0:
            return
        blocks = self._blocks
        size, start, end, small, _ = self._take(address)
        self.allocated -= size
        following = address + size
        if following < end:  # the next block of the segment, if free
            after = blocks.get(following)
            if after is not None and after[4]:
                size += self._take(following)[0]
        if address > start:  # and with the previous one
            previous = self._ending_at.get(address)
            if previous is not None and blocks[previous][4]:
                size += self._take(previous)[0]
                address = previous
        self._put(address, size, start, end, small, True)


EXPANDABLE_SOURCE = (
    "pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (read at 001074d; the same rules since expandable segments came in "
    "PyTorch 2.1): Note [Expandable Segments] (one segment per stream and pool, mapped in 2 MiB pages for the small pool and "
    "kLargeBuffer = 20 MiB pages for the large one); alloc_block -> try_allocate_expandable_block(p.size()): "
    "find_expandable_block takes the segment's lowest unmapped block, starting at the free block just before it, and map_block "
    "maps what the request lacks, rounded up to whole pages (ExpandableSegment::map), merged with that free block; "
    "reserved_bytes grows by the mapped pages (map_block) and shrinks only in unmap_block, called from release_cached_blocks "
    "(empty_cache or an allocation that fails); should_split: with expandable segments any remainder of >= 512 B is split off, "
    "large pool too; get_free_block: best fit, the free block at the top of the mapped range counted at the size it can "
    "expand to, so it is taken only when no other free block fits; free_block merges with free neighbours (try_merge_blocks)"
)


class ExpandableSegments(CachingAllocator):
    """One CUDA stream's pools under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (EXPANDABLE_SOURCE): each pool (small,
    large) one segment that grows at its top in whole pages and never shrinks in a run that neither empties the cache nor
    runs out of memory. A request is rounded to 512 B; the best-fitting free block below the top serves it (the rest split
    off when >= 512 B); else the free block at the top (if any) is extended by the pages the request still lacks. `reserved`
    is the mapped pages of both pools: what torch.cuda.memory_reserved counts. CachingAllocator's blocks, splitting and
    merging (free), each pool one segment without an end; only how a request finds its block differs."""

    def __init__(self) -> None:
        super().__init__()
        # each pool's segment starts at its own address, 1 PiB apart (the two never meet; addresses stay exact floats)
        self._base: dict[bool, float] = {True: float(2**50), False: 0.0}
        self._mapped: dict[bool, float] = dict(self._base)
        # each pool's high water: the highest end of a block it ever handed out, above its base. The mapped pages are it
        # rounded up to whole pages (map_block maps what a request lacks, at the top): reserved = page x ceil(high / page)
        self.high_water: dict[bool, float] = {True: 0.0, False: 0.0}

    def malloc(self, size: float) -> float:
        """A block for `size` bytes; returns its address (the handle to free it with)."""
        if size <= 0:
            return -1.0
        size = block_bytes(size)
        small = size <= K_SMALL_SIZE
        pool, top, base = self._free[small], self._mapped[small], self._base[small]
        at = bisect_left(pool, (size, -1.0))
        if at < len(pool) and pool[at][0] + pool[at][1] == top and at + 1 < len(pool):
            at += 1  # get_free_block: the top block's expandable size is the largest, another fitting block goes first
        if at < len(pool):
            address = pool[at][1]
            block_size = self._take(address)[0]
        else:  # try_allocate_expandable_block: the free block at the top (if any) and the pages the request still lacks
            below = self._ending_at.get(top)
            address, have = top, 0.0
            if below is not None and self._blocks[below][4]:
                address, have = below, self._take(below)[0]
            page = float(K_SMALL_BUFFER if small else K_LARGE_BUFFER)
            grow = page * math.ceil((size - have) / page)
            self._mapped[small] = top + grow
            self.reserved += grow
            block_size = have + grow
        if block_size - size >= K_MIN_BLOCK:  # should_split under expandable segments, both pools
            self._put(address + size, block_size - size, base, math.inf, small, True)
            block_size = size
        self._put(address, block_size, base, math.inf, small, False)
        if address + block_size - base > self.high_water[small]:
            self.high_water[small] = address + block_size - base
        self.allocated += block_size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return address


class StreamAllocators:
    """The caching allocator over several CUDA streams: a freed block goes back to the pool of the stream it was allocated
    on and only that stream's requests take it (get_free_block compares the stream first, BlockComparatorSize), and with
    expandable segments each stream maps its own segments (find_expandable_block): so each stream is an allocator of its
    own, and what is reserved is their sum. `expandable`: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."""

    def __init__(self, expandable: bool) -> None:
        self.expandable = expandable
        self.streams: dict[str, CachingAllocator | ExpandableSegments] = {}

    def malloc(self, stream: str, size: float) -> tuple[str, float]:
        allocator = self.streams.get(stream)
        if allocator is None:
            allocator = self.streams[stream] = ExpandableSegments() if self.expandable else CachingAllocator()
        return stream, allocator.malloc(size)

    def free(self, handle: tuple[str, float]) -> None:
        self.streams[handle[0]].free(handle[1])

    @property
    def reserved(self) -> float:
        return sum(a.reserved for a in self.streams.values())
