"""The configurations no other beats on both memory and step time (a Pareto front).

Configuration a dominates b when a needs at most b's memory and at most b's step time, and less
of one of them. The front is what a user choosing under a memory budget picks from: for every
budget, the fastest configuration that fits in it lies on the front (the step function of the
budget drawn by `fit --search -o search.svg`).
"""

from __future__ import annotations

from collections.abc import Sequence


def pareto_front(memory: Sequence[float], time: Sequence[float]) -> list[int]:
    """Indices of the non-dominated points, by increasing memory (and decreasing time).

    Sorted by memory (ties: the faster first), a point is on the front when it is faster than
    every point before it; O(n log n). Equal points: the first index only."""
    order = sorted(range(len(memory)), key=lambda i: (memory[i], time[i], i))
    front: list[int] = []
    best = float("inf")
    for i in order:
        if time[i] < best:
            front.append(i)
            best = time[i]
    return front
