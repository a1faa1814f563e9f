"""Fused attention by its tiles: why a short sequence runs below the rate a long one was measured at.

A fused attention kernel (FlashAttention-2/3, cuDNN's SDPA) gives each thread block one tile of `tile` query rows of
one (batch, head) and walks the key/value blocks of `tile` columns that tile attends to: all `n = s_k / tile` without a
mask, `i + 1` for query tile `i` under the causal mask (the blocks above the diagonal are skipped). Each tile also
pays a fixed cost that does not depend on how many blocks it walks: loading its queries, the prologue of its
pipeline, the softmax's final rescale and writing its output (forward), or its dQ / dK / dV accumulators (backward).
So a tile's time is

    t(tile) = t_0 + blocks x t_block,    t_block = 2 x tile^2 x (d_qk + d_v) [x 2.5 backward] / r_SM

and the kernel's time is when the last SM finishes its tiles. FlashAttention-3's causal scheduler hands out the
longest tiles first (hopper/tile_scheduler.hpp, `SingleTileLPTScheduler`, Dao et al. 2024, arXiv:2407.08608); cuDNN's
scheduler is not public, so parcalc takes the same longest-first order for it. With many tiles a causal kernel
approaches the fluid limit (every SM busy to the end) and t_0 is a small share of each tile; with few or short ones
(b 1, s 2,048: 512 tiles of at most 16 blocks on 132 SMs) the fixed cost and the last wave are a large share, which
is what a single rate measured at s 4,096 - 8,192 cannot say.

The GPU preset gives `kernels.attention_tiles` (the tile, t_0 forward and backward, each with its source) and its
`attention_by_head_dim` shares are then the rate of the blocks alone (r_SM x SMs over the 16-bit peak), without t_0
(`tiled_attention_time`). A preset without `attention_tiles` keeps one rate at every shape.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

from parcalc.frozen import frozen

# Above this many tiles per SM the schedule is taken as fluid: the last wave's share of the time is under
# 1 / WAVES_EXACT and the longest-first simulation would cost O(tiles log SMs) for nothing.
WAVES_EXACT = 64


@frozen
class AttentionTiles:
    """How a GPU's fused attention kernel splits its work (`kernels.attention_tiles` of the preset)."""

    tile: int  # query rows per thread block, and key/value columns per block it walks
    forward_overhead: float  # t_0 of a forward tile, seconds
    backward_overhead: float  # t_0 of a backward tile, seconds
    source: str  # of all three (plain numbers: core.hardware, which holds this, is not imported back)


@frozen
class AttentionShape:
    """One fused attention pass as its tiles see it: `heads` (batch x heads) blocks of `s_q` query rows over `s_k`
    key/value rows, `dims` = d_qk + d_v; `triangle`: the causal square (s_q == s_k) whose tile i walks i + 1 blocks,
    else each tile walks `share` x s_k / tile blocks (a window, a context-parallel rank's balanced chunks, no mask)."""

    heads: int
    s_q: int
    s_k: int
    dims: int
    share: float
    triangle: bool


def attention_shape(heads: int, s_q: int, s_k: int, dims: int, share: float, causal: bool) -> AttentionShape:
    """The pass computing `share` of the s_q x s_k rectangle: the causal triangle where it is exactly that (a causal
    mask over s_q == s_k with half the square computed), else `share` spread evenly over the tiles."""
    return AttentionShape(heads, s_q, s_k, dims, share, causal and s_q == s_k and abs(share - 0.5) < 1e-12)


def tiled_attention_time(shape: AttentionShape, tiles: AttentionTiles, block_rate: float, backward: bool, sms: int,
                         backward_flops: float) -> float:  # fmt: skip
    """Seconds of the pass: its tiles, longest first, over `sms` SMs, each block at `block_rate` / sms FLOP/s (the
    fluid rate the preset's share gives) and each tile with its fixed cost."""
    block_flops = 2.0 * tiles.tile**2 * shape.dims * (backward_flops if backward else 1.0)
    block_time = block_flops / (block_rate / sms)
    overhead = tiles.backward_overhead if backward else tiles.forward_overhead
    return block_time * _makespan_blocks(shape, tiles.tile, round(overhead / block_time, 6), sms)


@lru_cache(maxsize=4096)
def _makespan_blocks(shape: AttentionShape, tile: int, overhead_blocks: float, sms: int) -> float:
    """When the last SM finishes, in block times."""
    rows = -(-shape.s_q // tile)
    if shape.triangle:
        sizes = [(float(i + 1), shape.heads) for i in range(rows)]  # tile i walks i + 1 blocks, `heads` of each
    else:
        sizes = [(max(shape.s_k / tile * shape.share, 1.0), shape.heads * rows)]
    tiles = shape.heads * rows
    work = sum(blocks * count for blocks, count in sizes) + tiles * overhead_blocks
    if tiles > WAVES_EXACT * sms:
        return work / sms
    loads = [0.0] * sms
    for blocks, count in sorted(sizes, reverse=True):  # longest first, each to the SM that is free first
        for _ in range(count):
            heapq.heapreplace(loads, loads[0] + overhead_blocks + blocks)
    return max(loads)
