"""One transformer block's forward in a step walk as torchtitan's code runs it under its checkpointing policy: what each op
allocates, what autograd saves (kept) and what Python drops (freed). Shared by the block walks of
parcalc.core.memory_torchtitan (attention and the FeedForward), memory_torchtitan_tp and memory_torchtitan_moe (the MoE in
place of the FeedForward), each of which calls it and none of which the others need."""

from __future__ import annotations

from parcalc.core.memory_walk import StepShapes, Walk

# the matmul outputs torchtitan's op policy caches: the odd-numbered of wq, wk, wv, wo, w1, w3, w2 (memory_torchtitan.TT_SOURCES['ac'])
OP_CACHED = ("q.out", "v.out", "w1.out", "w2.out", "attn", "lse")


class BlockWalk:
    """One block's forward: allocations, and what Python drops (freed unless autograd saved it or SAC cached it)."""

    def __init__(self, walk: Walk, x: StepShapes, i: int, policy: str, recomputing: bool, prefix: str = "") -> None:
        self.walk, self.x, self.k = walk, x, f"{prefix}L{i}"
        self.saving = policy == "none" or recomputing  # autograd keeps what the ops save
        self.caching = policy == "op"
        self.held: set[str] = set()

    def alloc(self, name: str, size: float, what: str, saved: bool) -> str:
        key = f"{self.k}.{name}"
        if self.caching and name in OP_CACHED and key in self.walk.live:  # the recomputation returns the cached output,
            if saved and self.saving:  # which the op's consumers save as they would a computed one
                self.held.add(key)
            return key
        cached = self.caching and name in OP_CACHED and not self.saving
        kind = "activations" if (saved and self.saving) or cached else "temporaries"
        self.walk.alloc(key, size, kind, what + (" (cached by selective op checkpointing)" if cached else ""))
        if (saved and self.saving) or cached:
            self.held.add(key)
        return key

    def drop(self, *keys: str) -> None:
        for key in keys:
            if key not in self.held:
                self.walk.free(key)

    def save(self, key: str) -> None:
        """A tensor already allocated that a later op saves for backward."""
        if self.saving:
            self.held.add(key)
