"""The caching allocator's rules (parcalc.core.allocator) run over a step compiled to one program per CUDA stream: what
memory_fsdp.replayed_reserve runs, at a fraction of the cost of replaying the walk's keyed events through the allocator's
classes.

Why per stream: a freed block goes back to the pool of the stream it was allocated on and only that stream's requests take
it (allocator.StreamAllocators), so each stream's allocator sees its own mallocs and frees only; how the streams interleave
changes nothing any of them reserves. Why compiled: every steady step allocates and frees the same tensors in the same order
(the walk's events), so the keys, renames and stream lookups are resolved once (compile_streams): a program is a tuple of
(block bytes, slot) ops, a malloc when the bytes are > 0 (rounded to 512 B blocks, allocator.block_bytes), a free of the
block in `slot` when they are 0. run_program then applies CachingAllocator's (or ExpandableSegments') malloc and free to plain
lists and dicts, their steps inlined: the same best fit, splits and merges, in the same order, so the same blocks at the
same addresses (tests/test_allocator_programs.py holds every state equal to the classes' on random sequences and the replayed
steps of tests/test_search_replay.py to the byte). Two streams whose programs are equal reserve the same (replay_stream is
memoised on the program itself: a pipeline's middle stages with as many micro-batches in flight replay once)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from dataclasses import dataclass, field

from parcalc.core.allocator import K_LARGE_BUFFER, K_MIN_BLOCK, K_SMALL_BUFFER, K_SMALL_SIZE, segment_bytes

Program = tuple[tuple[float, int], ...]  # (block bytes, slot): a malloc into `slot` (bytes > 0) or a free of it (0)


@dataclass(frozen=True)
class StreamProgram:
    """One stream's share of a run (memory_fsdp.replayed_reserve): `build` allocated once and kept, the `first` step, then
    `steady` steps; `slots` how many blocks a step's ops name (each step starts with none live: zero_grad frees what is left)."""

    build: Program
    first: Program
    steady: Program
    slots: int
    _hash: int = field(default=0, compare=False, repr=False)

    def __hash__(self) -> int:  # the memo's key (replay_stream): hashed once, the programs being long
        if not self._hash:
            object.__setattr__(self, "_hash", hash((self.build, self.first, self.steady, self.slots)) or 1)
        return self._hash


@dataclass(frozen=True)
class StreamReplayed:
    """What one stream's allocator holds at the end of the run: reserved bytes and, with expandable segments, the high water
    of its small and its large pool (allocator.ExpandableSegments.high_water)."""

    reserved: float
    high_water_small: float
    high_water_large: float


class _State:
    """CachingAllocator's (or ExpandableSegments') state: the free blocks of each pool sorted by (size, address), every block
    by address as [size, segment start, segment end, small, free], each block's end address -> its address."""

    def __init__(self, expandable: bool) -> None:
        self.free: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        self.blocks: dict[float, list] = {}
        self.ending_at: dict[float, float] = {}
        self.next_address = 0.0
        self.reserved = 0.0
        self.expandable = expandable
        self.base = {True: float(2**50), False: 0.0}  # ExpandableSegments' two segments
        self.mapped = dict(self.base)
        self.high_water = {True: 0.0, False: 0.0}


_MEMO: dict[tuple[StreamProgram, bool, int], StreamReplayed] = {}
_MEMO_SIZE = 64  # each key holds its programs (tens of thousands of ops): a bound on what is kept


def replay_stream(program: StreamProgram, expandable: bool, steps: int) -> StreamReplayed:
    """The stream's allocator after `build`, the first step and steps - 1 steady ones."""
    key = (program, expandable, steps)
    done = _MEMO.get(key)
    if done is None:
        state = _State(expandable)
        addresses = [0.0] * (program.slots + 1)
        run_program(state, program.build, addresses)
        run_program(state, program.first, addresses)
        for _ in range(steps - 1):
            run_program(state, program.steady, addresses)
        done = StreamReplayed(state.reserved, state.high_water[True], state.high_water[False])
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        _MEMO[key] = done
    return done


def run_program(state: _State, ops: Program, addresses: list[float]) -> None:
    """Each op's malloc or free on `state` (module docstring), the allocator's methods inlined."""
    if state.expandable:
        _run_expandable(state, ops, addresses)
    else:
        _run_segments(state, ops, addresses)


def _free(blocks: dict[float, list], ending_at: dict[float, float], free: dict[bool, list[tuple[float, float]]], address: float) -> None:
    """CachingAllocator.free: free_block, then try_merge_blocks with a free neighbour on either side (both allocators:
    expandable segments map pages but merge and pool blocks alike)."""
    block = blocks.pop(address)
    size, start, end, small = block[0], block[1], block[2], block[3]
    del ending_at[address + size]
    pool = free[small]
    following = address + size
    if following < end:
        after = blocks.get(following)
        if after is not None and after[4]:
            del blocks[following]
            del ending_at[following + after[0]]
            del pool[bisect_left(pool, (after[0], following))]
            size += after[0]
    if address > start:
        previous = ending_at.get(address)
        if previous is not None:
            before = blocks[previous]
            if before[4]:
                del blocks[previous]
                del ending_at[address]
                del pool[bisect_left(pool, (before[0], previous))]
                size += before[0]
                address = previous
    block[0], block[4] = size, True
    blocks[address] = block
    ending_at[address + size] = address
    insort(pool, (size, address))


def _run_segments(state: _State, ops: Program, addresses: list[float]) -> None:
    """CachingAllocator.malloc and .free over `ops` (expandable segments off)."""
    free, blocks, ending_at = state.free, state.blocks, state.ending_at
    for size, slot in ops:
        if not size:  # free_block, try_merge_blocks with its neighbours (CachingAllocator.free)
            _free(blocks, ending_at, free, addresses[slot])
            continue
        small = size <= K_SMALL_SIZE
        pool = free[small]
        at = bisect_left(pool, (size, -1.0))
        if at < len(pool):  # get_free_block: the best fit
            block_size, address = pool.pop(at)
            block = blocks[address]
            start, end = block[1], block[2]
            del ending_at[address + block_size]
        else:  # alloc_block: a new segment
            block_size = segment_bytes(size)
            address = state.next_address
            start, end = address, address + block_size
            state.next_address = end
            state.reserved += block_size
            block = [block_size, start, end, small, False]
        remaining = block_size - size
        if remaining >= K_MIN_BLOCK if small else remaining > K_SMALL_SIZE:  # should_split
            rest = address + size
            blocks[rest] = [remaining, start, end, small, True]
            ending_at[rest + remaining] = rest
            insort(pool, (remaining, rest))
            block_size = size
        block[0], block[4] = block_size, False
        blocks[address] = block
        ending_at[address + block_size] = address
        addresses[slot] = address


def _run_expandable(state: _State, ops: Program, addresses: list[float]) -> None:
    """ExpandableSegments.malloc and .free over `ops`."""
    free, blocks, ending_at, mapped, base_of, high_water = state.free, state.blocks, state.ending_at, state.mapped, state.base, state.high_water
    for size, slot in ops:
        if not size:  # free_block, try_merge_blocks with its neighbours (CachingAllocator.free)
            _free(blocks, ending_at, free, addresses[slot])
            continue
        small = size <= K_SMALL_SIZE
        pool, top, base = free[small], mapped[small], base_of[small]
        at = bisect_left(pool, (size, -1.0))
        if at < len(pool) and pool[at][0] + pool[at][1] == top and at + 1 < len(pool):
            at += 1  # get_free_block: the top block's expandable size is the largest, another fitting block goes first
        if at < len(pool):
            block_size, address = pool.pop(at)
            block = blocks[address]
            del ending_at[address + block_size]
        else:  # try_allocate_expandable_block: the free block at the top (if any) and the pages the request still lacks
            below = ending_at.get(top, -1.0)
            candidate = blocks[below] if below >= 0 else None
            if candidate is not None and candidate[4]:
                address, have, block = below, candidate[0], candidate
                del ending_at[top]
                del pool[bisect_left(pool, (have, below))]
            else:
                address, have, block = top, 0.0, [0.0, base, math.inf, small, False]
            page = float(K_SMALL_BUFFER if small else K_LARGE_BUFFER)
            grow = page * math.ceil((size - have) / page)
            mapped[small] = top + grow
            state.reserved += grow
            block_size = have + grow
        if block_size - size >= K_MIN_BLOCK:  # should_split under expandable segments, both pools
            rest = address + size
            blocks[rest] = [block_size - size, base, math.inf, small, True]
            ending_at[rest + (block_size - size)] = rest
            insort(pool, (block_size - size, rest))
            block_size = size
        block[0], block[4] = block_size, False
        blocks[address] = block
        ending_at[address + block_size] = address
        if address + block_size - base > high_water[small]:
            high_water[small] = address + block_size - base
        addresses[slot] = address
