"""fit's search: what the allocator reserves over an FSDP2 step walk (parcalc.core.memory_fsdp.fsdp_reserved_total), byte
for byte, from walks of a few of its repeated units: a model's identical layers (a step without a pipeline) or a 1F1B
stage's micro-batches. A search walks the step once per distinct row key (Llama 3 70B on 256 GPUs: 133 walks, ~940,000
allocations); the walks here are of 4 and 5 layers, or of 2w + 4 and 2w + 5 micro-batches (w the stage's warm-up).

Why it is exact. The reserved total is, for each CUDA stream, parcalc.core.allocator.reserved_bytes of the blocks live at
that stream's first peak: a function of four sums over those blocks (all of them, the small ones, the medium ones, the
large ones' segments), each additive over the live blocks. A walk of N identical units runs each unit's events in the same
order with the same sizes, between a start and an end that do not depend on N except through what every unit adds (its
sharded parameters and states, its optimizer temporaries, a micro-batch's receive buffers). So, unit by unit:
- in unit i, every stream's four sums are those of unit i - 1 shifted by one constant vector (what a unit leaves live:
  saved activations in forward, sharded gradients in backward, nothing in a 1F1B steady state): within a run of such units
  the first peak is at the run's first or last unit (a line in i has its maximum at an end; a tie goes to the first);
- every other phase (the first and last units, which meet the hooks' special cases, the head and loss, the optimizer)
  has sums affine in N: a constant plus N times what one unit adds.
The walk keeps, for each phase it enters and each stream, the four sums at the stream's first peak within the phase
(SegmentWalk). Walks of a and a + 1 units (a = 2 x the units at each end that are not yet periodic) give each such
phase's sums at a and a + 1, hence at N; the middle units are left out (their peaks are at the ends of their run). The
two walks are checked against each other, the middle unit of the longer against its neighbours (three terms of one line);
a walk that fails either check, or a step whose units are not identical, is walked whole. tests/test_fit_search_walk_runs.py
holds the value equal to the whole walk's over many layouts, micro-batches, recomputations and stages.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from parcalc.core.allocator import K_MIN_LARGE_ALLOC, K_SMALL_SIZE, block_bytes, reserved_of_sums, segment_bytes
from parcalc.core.memory_fsdp import STREAMS, FsdpStep, fsdp_reserved_total, stream_of, walk_fsdp_step
from parcalc.core.memory_walk import LiveTensor, Walk
from parcalc.core.model import TransformerModel

Sums = tuple[float, float, float, float]  # all blocks, small ones, medium ones, large ones' segments (bytes)
Segment = tuple[str, dict[str, Sums]]  # a phase and each stream's sums at its first peak in it
_NUMBERED = re.compile(r"^(forward|backward): (layer|micro-batch) (\d+) of (\d+)")


class SegmentWalk(Walk):
    """A step walk that keeps, for each phase it enters (each assignment of `phase`) and each stream
    (memory_fsdp.stream_of), the stream's four sums at its first peak within that phase. Nothing else of the peak."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self._best: dict[str, Sums] = {}
        self._phase = ""
        super().__init__()
        self.key_stream: dict[str, str] = {}
        self.sums: dict[str, list[float]] = {s: [0.0, 0.0, 0.0, 0.0] for s in STREAMS}

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        self._phase, self._best = value, {}
        self.segments.append((value, self._best))

    def alloc(self, key: str, size: float, kind: str, what: str) -> None:
        if size <= 0:
            return
        if key in self.live:
            raise AssertionError(f"tensor {key} allocated twice")  # a bug in the walk, not user input
        block = block_bytes(size)
        self.live[key] = LiveTensor(what, kind, block)
        stream = self.key_stream[key] = stream_of(key)
        sums = self.sums[stream]
        sums[0] += block
        if block <= K_SMALL_SIZE:
            sums[1] += block
        elif block < K_MIN_LARGE_ALLOC:
            sums[2] += block
        else:
            sums[3] += segment_bytes(block)
        best = self._best.get(stream)
        if best is None or sums[0] > best[0]:
            self._best[stream] = (sums[0], sums[1], sums[2], sums[3])

    def free(self, *keys: str) -> None:
        for key in keys:
            tensor = self.live.pop(key, None)
            if tensor is None:
                continue
            block, sums = tensor.bytes, self.sums[self.key_stream.pop(key)]
            sums[0] -= block
            if block <= K_SMALL_SIZE:
                sums[1] -= block
            elif block < K_MIN_LARGE_ALLOC:
                sums[2] -= block
            else:
                sums[3] -= segment_bytes(block)

    def rename(self, old: str, new: str, what: str | None = None, kind: str | None = None) -> None:
        tensor = self.live.pop(old)
        self.live[new] = LiveTensor(what or tensor.what, kind or tensor.kind, tensor.bytes)
        self.key_stream[new] = self.key_stream.pop(old)  # the block stays in its stream's pool (StreamWalk.rename)

    def relabel(self, key: str, what: str, kind: str | None = None) -> None:
        tensor = self.live[key]
        self.live[key] = LiveTensor(what, kind or tensor.kind, tensor.bytes)


def reserved_total(model: TransformerModel, step: FsdpStep) -> float:
    """fsdp_reserved_total(model, step), from walks of fewer units where the step's units repeat (module docstring)."""
    return _reserved_total(model, step)


@lru_cache(maxsize=4096)
def _reserved_total(model: TransformerModel, step: FsdpStep) -> float:
    fast = reserved_from_runs(model, step)
    return fsdp_reserved_total(model, step) if fast is None else fast


def reserved_from_runs(model: TransformerModel, step: FsdpStep) -> float | None:
    """The reserved total from the two short walks; None where the step's units do not repeat, are too few to save
    anything, or the walks fail the checks (module docstring)."""
    plan = _units(model, step)
    if plan is None:
        return None
    units, ends, joint = plan
    a = ends if joint else 2 * ends  # the short walk: every place at one end or the other (a joint pass has 2 units' places)
    if units <= 2 * a + 1:  # the two short walks would take as long as the whole one
        return None
    short, _ = _segments(model, step, a, ends, joint)
    long, middle = _segments(model, step, a + 1, ends, joint)
    sums = _extrapolated(short, long, middle, units - a)
    if sums is None:
        return None
    total = 0.0
    for stream in STREAMS:  # each stream's pool at its first peak, as StreamWalk.pools, summed in the same order
        peak: Sums | None = None
        for phase in sums:
            v = phase.get(stream)
            if v is not None and v[0] > (0.0 if peak is None else peak[0]):
                peak = v
        total += 0.0 if peak is None else reserved_of_sums(peak[1], peak[2], peak[3])
    return total


def _units(model: TransformerModel, step: FsdpStep) -> tuple[int, int, bool] | None:
    """The step's repeated units (how many), how many places at each end are not yet periodic, and whether the places
    count forwards and backwards together (1F1B interleaves them; a step without a pipeline runs all forwards, then all
    backwards); None: nothing repeats (walk whole). Without a pipeline the units are the layers, two places at each end of
    each pass: the first two layers meet the root's all-gather and the embedding's output, the last two the unresharded last
    block and the root's prefetch. Under 1F1B they are the micro-batches, places in Schedule1F1B's order: w warm-up
    forwards, the first backward (its gradients allocated for accumulation), then forward and backward by turns (a period of
    two places) up to the w cool-down backwards; w + 4 places at each end."""
    uniform = (step.block_policies is None and model.moe is None and model.mamba is None and model.window is None
               and model.linear_attention is None and step.model_code == "torchtitan")  # fmt: skip
    if not uniform:
        return None
    if step.pp > 1:
        if step.pp_return_outputs:  # the merged outputs grow with the micro-batches at the end of the step
            return None
        warmup = min(step.micro_batches, step.pp - step.pp_stage)
        return step.micro_batches, warmup + 4, True
    return model.layers, 2, False


Label = tuple[object, ...]


def _segments(model: TransformerModel, step: FsdpStep, units: int, ends: int, joint: bool
              ) -> tuple[list[tuple[Label, dict[str, Sums]]], list[tuple[dict[str, Sums], Label, Label]]]:  # fmt: skip
    """The walk of `units` units: each phase's label (its place counted from the nearer end, or its place in the middle) and
    sums; and each middle phase's sums with the labels of the same phase one period before and after it."""
    walk = SegmentWalk()
    if step.pp > 1:
        walk_fsdp_step(model, replace(step, micro_batches=units), walk)
    else:
        walk_fsdp_step(replace(model, layers=units), step, walk)
    places = 2 * units if joint else units
    period = 2 if joint else 1
    labelled: list[tuple[Label, dict[str, Sums]]] = []
    middle: list[tuple[dict[str, Sums], Label, Label]] = []
    seen: dict[str, int] = {}
    unit: tuple[object, ...] = ("start", 0)
    sub = 0
    for phase, sums in walk.segments:
        numbered = _NUMBERED.match(phase)
        if numbered:
            counter = "both" if joint else numbered.group(1)
            t = seen[counter] = seen.get(counter, -1) + 1
            unit, sub = ((counter, "head", t) if t < ends else (counter, "tail", places - 1 - t) if t >= places - ends
                         else (counter, "mid", t)), 0  # fmt: skip
        own = _NUMBERED.sub(r"\1: \2", phase)
        labelled.append(((*unit, sub, own), sums))
        if unit[1] == "mid":
            t = int(unit[2])  # type: ignore[call-overload]
            middle.append((sums, (unit[0], "head", t - period, sub, own), (unit[0], "tail", places - 1 - t - period, sub, own)))
        sub += 1
    return labelled, middle


def _extrapolated(short: list[tuple[Label, dict[str, Sums]]], long: list[tuple[Label, dict[str, Sums]]],
                  middle: list[tuple[dict[str, Sums], Label, Label]], more: int) -> list[dict[str, Sums]] | None:  # fmt: skip
    """Each phase's sums with `more` units beyond the short walk's, in the short walk's order; None where the two walks do
    not agree with the module's account (the caller then walks the step whole)."""
    kept = [(label, sums) for label, sums in long if label[1] != "mid"]
    if [label for label, _ in kept] != [label for label, _ in short]:
        return None
    by_label = dict(kept)
    for sums, before_label, after_label in middle:  # a middle phase on the line through its neighbours: the run is periodic up to a shift
        before, after = by_label.get(before_label), by_label.get(after_label)
        if before is None or after is None or not (before.keys() == sums.keys() == after.keys()):
            return None
        if any(2 * m != b + c for s in sums for m, b, c in zip(sums[s], before[s], after[s], strict=True)):
            return None
    out = []
    for (_, s_sums), (_, l_sums) in zip(short, kept, strict=True):
        if s_sums.keys() != l_sums.keys():
            return None
        out.append({s: tuple(x + more * (y - x) for x, y in zip(s_sums[s], l_sums[s], strict=True)) for s in s_sums})
    return out  # type: ignore[return-value]
