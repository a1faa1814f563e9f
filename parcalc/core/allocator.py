"""PyTorch's CUDA caching allocator: what a tensor's storage takes (allocated) and what the
allocator holds from the driver for it (reserved), from its rounding rules.

Source: pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (constants and round_size /
get_allocation_size, unchanged from PyTorch 2.0 to 2.11):
- kMinBlockSize = 512: every block is a multiple of 512 bytes, at least 512 (round_size, with the
  default roundup_power2_divisions off); torch.cuda.memory_allocated counts these block sizes;
- kSmallSize = 1 MiB: requests up to it come from the small pool, in 2 MiB segments (kSmallBuffer);
- kMinLargeAlloc = 10 MiB: requests between 1 and 10 MiB take a 20 MiB segment (kLargeBuffer);
  larger ones a segment of their own size rounded up to kRoundLarge = 2 MiB.
A block split from a cached segment keeps the rest for later requests, so "reserved" here is the
least the allocator must hold for a set of live tensors: small and medium ones packed into their
segments, each large one in its own 2 MiB-rounded segment. Fragmentation on top of that (cached
blocks that no later request fits) depends on the whole history of allocations and is not modelled.
"""

from __future__ import annotations

import math
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
    return K_SMALL_BUFFER * math.ceil(small / K_SMALL_BUFFER) + K_LARGE_BUFFER * math.ceil(medium / K_LARGE_BUFFER) + large
