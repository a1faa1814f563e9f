"""fit's search: what the allocator reserves over an FSDP2 step walk (parcalc.core.memory_fsdp.fsdp_reserved_total), byte
for byte, from walks of a few of its repeated units: a model's identical layers, and a 1F1B stage's micro-batches. A search
walks the step once per distinct row key (Llama 3 70B on 256 H100: 133 walks, ~940,000 allocations, 4.6 of its 4.9 CPU
seconds); the walks here are of 4 and 5 layers, times w + 4 and w + 5 micro-batches on a pipeline stage (w its warm-up).
The walk itself is parcalc.core.search_segment_walk.SegmentWalk, which keeps each phase's peak sums and replays a pipeline
stage's blocks from recordings of the same block (the same bytes; since session 16, where the search walks TP x PP stages
as `fit` does: Llama 3 70B on 256 H100 walks 836 stage walks, ~29,000 layer-micro-batches, 57,694 of its block calls replayed).

Why it is exact. The reserved total is, for each CUDA stream, parcalc.core.allocator.reserved_bytes of the blocks live at
that stream's first peak: a function of four sums over those blocks (all of them, the small ones, the medium ones, the
large ones' segments), each additive over the live blocks. A walk of N identical units runs each unit's events in the same
order with the same sizes, between a start and an end that do not depend on N except through what every unit adds (its
sharded parameters and states, its optimizer temporaries, a micro-batch's receive buffers). So, unit by unit:
- in unit i, every stream's four sums are those of unit i - 1 shifted by one constant vector (what a unit leaves live:
  saved activations in forward, sharded gradients in backward, nothing in a 1F1B steady state): within a run of such units
  the first peak is at the run's first or last unit (a line in i has its maximum at an end; a tie goes to the first);
- every other phase (the units at the ends, which meet the hooks' special cases, the head and loss, the optimizer) has
  sums affine in N: a constant plus N times what one unit adds. On a pipeline stage the two kinds of unit do not mix: what
  a micro-batch holds is its layers' (affine in the layers at a fixed place of the schedule), what the schedule holds is
  per micro-batch (its receive buffers).
The walk keeps, for each phase it enters and each stream, the four sums at the stream's first peak within the phase
(SegmentWalk; a stage's phases are its micro-batches, cut at each layer's first block tensor). Walks of a and a + 1 units
(a: every place at one end or the other) give each such phase's sums at a and a + 1, hence at N; the middle units are
left out (their peaks are at the ends of their run); on a stage, one more walk with a + 1 micro-batches. The walks are
checked against each other (the same phases in the same order once the middle is left out) and each middle phase against
its neighbours (three terms of one line); walks that fail a check, or a step whose units are not identical (a policy a
block, experts, windows, Mamba), are walked whole, as are steps too short to gain. tests/test_fit_search_walk_runs.py holds
the value equal to the whole walk's over layers, micro-batches, stages, recomputations, TP and precisions.

A middle stage's three runs (three_run_plan). A middle stage s of p warms up with w = p - s forwards, then runs m - w
steady pairs (a backward, a forward), then w cool-down backwards, and is walked the same as any middle stage of the same
warm-up (same_walk). Each run is a run of identical units in the sense above: the warm-up's forwards each add a
micro-batch's saved activations, the cool-down's backwards each take them away, the steady pairs keep w micro-batches in
flight; the phases at the runs' ends are affine in w and in m - w (a micro-batch in flight, a receive buffer). So walks
of the stages with warm-ups a and a + 1 (stages p - a and p - a - 1) and of a and a + 1 steady pairs give every middle
stage's phases: the stages of one pipeline whose runs both shrink share the same three short walks (Llama 3 70B's PP 16
with 16 micro-batches: stages 6 to 10). The warm-up does not shrink together with the layers: a warm-up place holds its
micro-batches in flight times their layers' activations, a product of the two counts.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from parcalc.core.allocator import reserved_floor_of_sums, reserved_of_sums
from parcalc.core.memory_fsdp import STREAMS, FsdpStep, stream_of, walk_fsdp_step
from parcalc.core.model import TransformerModel
from parcalc.core.search_segment_walk import LAYER_MARK, SegmentWalk, Sums, _block

_NUMBERED = re.compile(r"^(forward|backward): (layer|micro-batch) (\d+) of (\d+)")


def reserved_total(model: TransformerModel, step: FsdpStep) -> float:
    """fsdp_reserved_total(model, step), from walks of fewer units where the step's units repeat (module docstring)."""
    return _reserved_of(_stream_peaks(model, same_walk(model, step)))


def floor_total(model: TransformerModel, step: FsdpStep) -> float:
    """memory_fsdp.StreamWalk.floor of the step (the least its allocator replay can reserve), from the same peaks as
    reserved_total: each stream's sums at its first peak, its pools rounded up to their units (allocator.reserved_floor_of_sums).
    What fit's search screens its rows by before it replays the ones it shows (parcalc.core.search_replay)."""
    return sum(reserved_floor_of_sums(peak[0], peak[1], step.expandable_segments)
               for peak in _stream_peaks(model, same_walk(model, step)) if peak is not None)  # fmt: skip


@lru_cache(maxsize=4096)
def floor_within(model: TransformerModel, step: FsdpStep, budget: float) -> float:
    """floor_total(model, step) where it is at most `budget`; where it is over, possibly less than it but still over
    `budget`: the walk of a step that is walked whole (an interleaved rank: _runs) stops at the first phase by whose end
    the floor of each stream's peak so far is over `budget`. That is a lower bound of the replay as the floor is: each
    stream's pool, which never gives a block back in a run, has reserved at least the floor of what was live on it at any
    point (allocator.reserved_floor_of_sums), so at least that at the end. fit's search screens an interleaved row with it
    (search_step_peaks._worst_stage): a rank over the capacity by it is out, however much more it would reserve."""
    if _runs(model, step) is not None:  # short walks: the whole step's floor at their cost
        return floor_total(model, step)
    try:
        peaks = _rank_peaks(model, step, budget)
    except _OverBudget as over:
        return over.floor
    return sum(reserved_floor_of_sums(peak[0], peak[1], step.expandable_segments) for peak in peaks if peak is not None)


def fewer_rounds(step: FsdpStep) -> int | None:
    """The rounds (p micro-batches each) of a shorter walk with the same peaks but for the receive buffers of the rounds
    left out, for an interleaved rank of m = k p micro-batches (ScheduleInterleaved1F1B, memory_pipeline_interleaved):
    K = 2 + ceil(w / (v p)) where k > K, with w = (v - 1) p + 2 (p - 1 - r) its warm-up forwards; None otherwise.

    Why. With m = k p torch's order has k rounds of p micro-batches a chunk (per_round = p: compute_order), and its warm-up
    w does not depend on k once k >= 2 (it is capped at v m only below). The forwards' chunk, (op // p) % v, and the
    backwards', counted from the step's end, repeat every v p ops; the first v p backwards give every chunk its first
    backward (its accumulated gradients allocated), and each chunk's last backward (its reduce-scatter) is in the last v p.
    So once the first v p backwards are done and before the forwards' last v p ops and the last round's backwards, every
    v p pairs (a forward, a backward) leave the rank as they found it: the same micro-batches in flight on each chunk, the
    same stages unsharded (the next three to compute) and the same gradients held, only the micro-batches' numbers moved
    on. The walk of k rounds is that of K rounds with k - K such periods inserted where they fit (after backward v p, and
    before forward (K - 1) v p, hence K v p >= 2 v p + w), each stream's sums at every phase shifted only by the k - K
    rounds' receive buffers (memory_pipeline_stage.receive_buffers: one a micro-batch each way, made before the first
    forward and kept), and every inserted phase repeating one of the K rounds' own. So each stream's first peak is the K
    rounds' plus those buffers (_rank_peaks). Not with CP (its buffers per micro-batch: context_parallel_buffers) or a last
    stage returning its outputs. tests/test_search_interleaved_screen.py holds the floor equal to the whole walk's."""
    chunks = len(step.pp_chunks)
    if step.pp_zero_bubble:  # ScheduleZBVZeroBubble's and ScheduleDualPipeV's orders are not ScheduleInterleaved1F1B's: walked whole
        return None
    if not 2 <= chunks <= 3 or step.cp > 1 or step.pp_return_outputs or step.micro_batches % step.pp:
        return None
    p = step.pp
    warmup = (chunks - 1) * p + 2 * (p - 1 - step.pp_stage)
    rounds = 2 + -(-warmup // (chunks * p))
    return rounds if step.micro_batches // p > rounds else None


def _rank_peaks(model: TransformerModel, step: FsdpStep, budget: float = float("inf")) -> tuple[Sums | None, ...]:
    """Each stream's sums at its first peak over an interleaved rank's walk, from the walk of fewer rounds where
    fewer_rounds says so; _OverBudget as soon as their floor is over `budget`."""
    rounds = fewer_rounds(step)
    short = step if rounds is None else replace(step, micro_batches=rounds * step.pp)
    more = 0 if rounds is None else step.micro_batches // step.pp - rounds
    walk = _BudgetWalk(budget, step.expandable_segments, step.pp, more)
    walk_fsdp_step(model, short, walk)
    return walk.peaks()


class _OverBudget(Exception):  # a stop, not an error: floor_within catches it
    def __init__(self, floor: float) -> None:
        super().__init__(floor)
        self.floor = floor


_RECEIVED = re.compile(r"^pp\.s\d+\.(act|grad)_recv0$")  # a virtual stage's first receive buffer (receive_buffers)


class _BudgetWalk(SegmentWalk):
    """A SegmentWalk of an interleaved rank that raises _OverBudget when a phase starts and the floor of each stream's first
    peak over the phases before it is over `budget` (floor_within); each stream's sums with `more` rounds' receive buffers
    added (`pp` micro-batches each, a buffer each way of each virtual stage as the walk's own: fewer_rounds)."""

    def __init__(self, budget: float, expandable: bool, pp: int, more: int) -> None:
        self._budget, self._expandable, self._checked, self._pp, self._more = budget, expandable, 0, pp, more
        self._peaks: dict[str, Sums] = {}
        self._added: dict[str, Sums] | None = None if more else {}
        super().__init__()

    def _received(self) -> dict[str, Sums] | None:
        """The receive buffers of the rounds left out, as each stream's four sums (None: the walk has made none yet)."""
        if self._added is None:
            buffers = [(key, tensor.bytes) for key, tensor in self.live.items() if _RECEIVED.match(key)]
            if not buffers:
                return None
            added: dict[str, list[float]] = {}
            for key, size in buffers:
                block, part, counted = _block(size)
                sums = added.setdefault(stream_of(key), [0.0, 0.0, 0.0, 0.0])
                sums[0] += self._more * self._pp * block
                sums[part] += self._more * self._pp * counted
            self._added = {stream: (v[0], v[1], v[2], v[3]) for stream, v in added.items()}
        return self._added

    def peaks(self) -> tuple[Sums | None, ...]:
        """Each stream's first peak over the phases entered so far (STREAMS order; _peaks_at's rule), the left-out rounds'
        buffers added: at a phase's start or the walk's end, every phase entered is done."""
        peaks = self._peaks
        for _, sums in self.segments[self._checked:]:
            for stream, v in sums.items():
                peak = peaks.get(stream)
                if v[0] > (0.0 if peak is None else peak[0]):
                    peaks[stream] = v
        self._checked = len(self.segments)
        added = self._received() or {}
        zero = (0.0, 0.0, 0.0, 0.0)
        out: list[Sums | None] = []
        for stream in STREAMS:
            peak = peaks.get(stream)
            extra = added.get(stream, zero)
            if peak is None and extra != zero:  # a stream only the left-out buffers use: not how the walks go
                raise AssertionError(f"receive buffers on {stream}, which the walk's phases never use")
            out.append(None if peak is None else (peak[0] + extra[0], peak[1] + extra[1], peak[2] + extra[2], peak[3] + extra[3]))
        return tuple(out)

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        if getattr(self, "segments", None) and self._budget < float("inf"):
            floor = sum(reserved_floor_of_sums(v[0], v[1], self._expandable) for v in self.peaks() if v is not None)
            if floor > self._budget:
                raise _OverBudget(floor)
        SegmentWalk.phase.fset(self, value)  # type: ignore[attr-defined]


def same_walk(model: TransformerModel, step: FsdpStep) -> FsdpStep:
    """A step whose walk is this one's, event for event but for the layers' names: a middle stage of a 1F1B pipeline
    (neither the embedding's nor the loss's) is walked the same whatever its index and layers but for its warm-up,
    w = min(m, p - s) forwards (memory_pipeline_stage.StagePlan.order); every middle stage whose warm-up is all its
    micro-batches (m <= p - s) is stage 1's walk, its layers counted from 0. Other steps: themselves."""
    if step.pp < 3 or not 0 < step.pp_stage < step.pp - 1 or step.pp - step.pp_stage < step.micro_batches or step.pp_chunks:
        return step
    if step.block_policies is not None:  # a policy a block: the layers' own
        return step
    lo, hi = step.stage_layers or (0, model.layers)
    return replace(step, pp_stage=1, stage_layers=(0, hi - lo))


@lru_cache(maxsize=4096)
def _stream_peaks(model: TransformerModel, step: FsdpStep) -> tuple[Sums | None, ...]:
    fast = _peaks_from_runs(model, step)
    if fast is not None:
        return fast
    if fewer_rounds(step) is not None:
        return _rank_peaks(model, step)
    walk = SegmentWalk()  # the whole walk, its peaks kept as the short walks keep them (lighter than a StreamWalk's)
    walk_fsdp_step(model, step, walk)
    return _peaks_at([sums for _, sums in walk.segments])


def reserved_from_runs(model: TransformerModel, step: FsdpStep) -> float | None:
    """The reserved total from the short walks; None where the step's units do not repeat, are too few to save anything,
    or the walks fail the checks (module docstring)."""
    peaks = _peaks_from_runs(model, step)
    return None if peaks is None else _reserved_of(peaks)


def _peaks_from_runs(model: TransformerModel, step: FsdpStep) -> tuple[Sums | None, ...] | None:
    runs = _runs(model, step)
    if runs is None:
        return None
    layers, micro = runs
    three = _three_runs(model, step, layers)
    if three is not None:
        return three
    shrink_layers, shrink_micro = shrinks(layers, micro)
    if not (shrink_layers or shrink_micro):
        return None
    a_layers = 2 * LAYER_ENDS if shrink_layers else layers
    a_micro = None if micro is None else micro[1] if shrink_micro else micro[0]
    # places counted from the ends in a dimension that shrinks; every place its own in one that does not
    layer_ends = LAYER_ENDS if shrink_layers else layers
    ends = None if micro is None else micro[1] if shrink_micro else 2 * micro[0]
    base = _segments(model, step, a_layers, a_micro, ends, layer_ends)
    terms = []
    if shrink_layers:
        terms.append((_segments(model, step, a_layers + 1, a_micro, ends, layer_ends), layers - a_layers))
    if shrink_micro:
        assert micro is not None and a_micro is not None
        terms.append((_segments(model, step, a_layers, a_micro + 1, ends, layer_ends), micro[0] - a_micro))
    sums = _extrapolated(base, terms)
    return None if sums is None else _peaks_at(sums)


def _three_runs(model: TransformerModel, step: FsdpStep, layers: int) -> tuple[Sums | None, ...] | None:
    """The reserved total of a middle 1F1B stage from walks of shorter runs (three_run_plan), or None (not this way)."""
    plan = three_run_plan(step, layers)
    if plan is None:
        return None
    (a_l, a_w, a_n), extra, ends = plan
    # the walks' stage: p - w', its layers counted from 0 (same_walk), so that the stages of a pipeline share them
    stage = replace(step, pp_stage=1, stage_layers=(0, layers), micro_batches=1)

    def walked(n: int, ww: int, nn: int) -> Walked:
        return _middle_stage_segments(model, replace(stage, pp_stage=step.pp - ww), n, ww + nn, ends)

    sums = _extrapolated(walked(a_l, a_w, a_n), [(walked(*sizes), more) for sizes, more in extra])
    return None if sums is None else _peaks_at(sums)


Sizes = tuple[int, int, int]  # a walk's layers, warm-up forwards and steady pairs


def three_run_plan(step: FsdpStep, layers: int) -> tuple[Sizes, list[tuple[Sizes, int]], tuple[int, int, int]] | None:
    """A middle 1F1B stage that warms up with fewer than all its micro-batches (p - s = w < m): its order is three runs,
    w warm-up forwards, m - w steady pairs (a backward, a forward), w cool-down backwards; its walk is any middle
    stage's of the same warm-up (same_walk), so the walks of warm-up a and a + 1 are those of stages p - a and p - a - 1.
    Each run shrinks to its ends (WARM_UP_ENDS places of a warm-up or cool-down run, STEADY_ENDS of the steady one), the
    layers to LAYER_ENDS: walks of w', n' = m' - w' and n layers for each that shrinks and the base, extrapolated as the
    module says. The base walk's sizes, each longer walk's with how many more units the step has, and the places at the
    ends of the warm-up (and cool-down) run, of the steady run and of the layers; None where this saves nothing over the
    other ways (reserved_from_runs). The walks are checked as the others are (_extrapolated)."""
    if step.pp_chunks or not (step.pp > 2 and 0 < step.pp_stage < step.pp - 1):
        return None
    w = step.pp - step.pp_stage
    pairs = step.micro_batches - w
    if pairs < 1:  # all warm-up: a run of forwards, then of backwards
        return None
    # which runs shrink: the cheapest way; the warm-up and the layers not both (a warm-up place's micro-batches in flight
    # hold each its layers' activations: a product of the two counts, not a sum)
    ways = [(by_w, by_s, by_l) for by_w in (False, True) for by_s in (False, True) for by_l in (False, True)
            if (by_w or by_s) and not (by_w and by_l) and (not by_w or w > 2 * WARM_UP_ENDS + 1) and (not by_s or pairs > STEADY_ENDS + 1)
            and (not by_l or layers > 2 * LAYER_ENDS + 1)]  # fmt: skip
    if not ways:
        return None
    # the walks of a way that shrinks the warm-up and the steady pairs, and not the layers, are the same for every middle
    # stage whose runs both shrink (_middle_stage_segments keeps them): each such stage pays its share
    sharing = sum(1 for s in range(1, step.pp - 1)
                  if step.pp - s > 2 * WARM_UP_ENDS + 1 and step.micro_batches - (step.pp - s) > STEADY_ENDS + 1)  # fmt: skip
    cost, (shrink_w, shrink_s, shrink_l), extra, (a_l, a_w, a_n) = min(_three_run_walks(layers, w, pairs, *way, sharing) for way in ways)
    micro = (step.micro_batches, w + 4)
    by_layers, by_micro = shrinks(layers, micro)  # the other ways' cost, as shrinks() counts it
    other = [(2 * LAYER_ENDS if by_layers else layers, micro[1] if by_micro else micro[0])]
    other += [(other[0][0] + 1, other[0][1])] if by_layers else []
    other += [(other[0][0], other[0][1] + 1)] if by_micro else []
    if cost >= sum((n + 2) * mm for n, mm in other):
        return None
    ends = (WARM_UP_ENDS if shrink_w else a_w, STEADY_ENDS if shrink_s else 2 * a_n, LAYER_ENDS if shrink_l else layers)
    return (a_l, a_w, a_n), extra, ends


@lru_cache(maxsize=256)
def _middle_stage_segments(model: TransformerModel, stage: FsdpStep, layers: int, micro_batches: int, ends: tuple[int, int, int]) -> Walked:
    """_segments of a middle stage labelled by its three runs (three_run_plan), kept: every stage of a pipeline with warm-ups
    long enough asks for the same few (read only)."""
    return _segments(model, stage, layers, micro_batches, None, ends[2], runs=ends[:2])


def _three_run_walks(layers: int, w: int, pairs: int, shrink_w: bool, shrink_s: bool, shrink_l: bool,
                     sharing: int) -> tuple[int, tuple[bool, bool, bool], list[tuple[Sizes, int]], Sizes]:  # fmt: skip
    """three_run_plan's walks one way: their cost (as shrinks() counts it; shared by `sharing` stages where they can be),
    the way, each longer walk with how many more units the step has than the base walk, and the base walk."""
    a_w = 2 * WARM_UP_ENDS if shrink_w else w
    a_n = STEADY_ENDS if shrink_s else pairs  # pairs: STEADY_ENDS places at each end
    a_l = 2 * LAYER_ENDS if shrink_l else layers
    extra = [((a_l, a_w + 1, a_n), w - a_w)] if shrink_w else []
    extra += [((a_l, a_w, a_n + 1), pairs - a_n)] if shrink_s else []
    extra += [((a_l + 1, a_w, a_n), layers - a_l)] if shrink_l else []
    cost = sum((n + 2) * (ww + nn) for n, ww, nn in [(a_l, a_w, a_n), *(sizes for sizes, _ in extra)])
    if shrink_w and shrink_s and not shrink_l:
        cost //= max(sharing, 1)
    return cost, (shrink_w, shrink_s, shrink_l), extra, (a_l, a_w, a_n)


def _peaks_at(phases: list[dict[str, Sums]]) -> tuple[Sums | None, ...]:
    """Each stream's sums at its first peak over the phases in order (STREAMS order; None: nothing on it)."""
    peaks: list[Sums | None] = []
    for stream in STREAMS:
        peak: Sums | None = None
        for phase in phases:
            v = phase.get(stream)
            if v is not None and v[0] > (0.0 if peak is None else peak[0]):
                peak = v
        peaks.append(peak)
    return tuple(peaks)


def _reserved_of(peaks: tuple[Sums | None, ...]) -> float:
    """Each stream's pool at its first peak, as StreamWalk.pools, summed in the same order."""
    total = 0.0
    for peak in peaks:
        total += 0.0 if peak is None else reserved_of_sums(peak[1], peak[2], peak[3])
    return total


def shrinks(layers: int, micro: tuple[int, int] | None) -> tuple[bool, bool]:
    """Whether the short walks shrink the layers, the micro-batches: the cheapest of the whole walk and each way that
    applies (a dimension shrinks to every place at one end or the other, so only where it has more), a walk costing
    (layers + 2) x micro-batches (the embedding, head, loss and optimizer about two layers' worth); a tie walks whole."""
    count = micro[0] if micro is not None else 1
    options = []
    for by_layers in (False, True):
        for by_micro in (False, True):
            if (by_layers and layers <= 2 * LAYER_ENDS + 1) or (by_micro and (micro is None or micro[0] <= micro[1] + 1)):
                continue
            short_layers = 2 * LAYER_ENDS if by_layers else layers
            short_micro = micro[1] if by_micro and micro is not None else count
            walks = [(short_layers, short_micro), *([(short_layers + 1, short_micro)] if by_layers else []),
                     *([(short_layers, short_micro + 1)] if by_micro else [])]  # fmt: skip
            options.append((sum((n + 2) * m for n, m in walks), by_layers, by_micro))
    _, by_layers, by_micro = min(options)
    return by_layers, by_micro


WARM_UP_ENDS = 2  # a warm-up run's first forward (the first to unshard) and second; its last two, before the first backward
STEADY_ENDS = 4  # the steady pairs' first four places (the first backward allocates the accumulated gradients) and last four
LAYER_ENDS = 2  # the first two layers meet the root's all-gather and the embedding's output; the last two the unresharded
# last block, the root's prefetch, the final norm


def _runs(model: TransformerModel, step: FsdpStep) -> tuple[int, tuple[int, int] | None] | None:
    """The step's repeated units: its layers (of the stage), and under 1F1B its micro-batches with how many places of
    Schedule1F1B's order at each end are not yet periodic: w warm-up forwards, the first backward (its gradients allocated
    for accumulation), a forward and a backward, then forward and backward by turns (a period of two places) up to the w
    cool-down backwards: w + 4 places, i.e. a walk of w + 4 micro-batches has every place at one end or the other. None:
    nothing repeats (walk whole)."""
    uniform = (step.block_policies is None and model.moe is None and model.mamba is None and model.window is None
               and model.linear_attention is None and step.model_code == "torchtitan")  # fmt: skip
    if not uniform or step.pp_chunks:  # an interleaved rank's order is not 1F1B's runs: walked whole
        return None
    if step.pp > 1:
        if step.pp_return_outputs:  # the merged outputs grow with the micro-batches at the end of the step
            return None
        lo, hi = step.stage_layers or (0, model.layers)
        warmup = min(step.micro_batches, step.pp - step.pp_stage)
        return hi - lo, (step.micro_batches, warmup + 4)
    return model.layers, None


Label = tuple[object, ...]
Walked = tuple[list[tuple[Label, dict[str, Sums]]], list[tuple[dict[str, Sums], Label, Label]]]


def _segments(model: TransformerModel, step: FsdpStep, layers: int, micro_batches: int | None, micro_ends: int | None,
              layer_ends: int, runs: tuple[int, int] | None = None) -> Walked:  # fmt: skip
    """The walk with `layers` layers (of the stage) and `micro_batches`: each phase's label (its micro-batch's and layer's
    places, each counted from the nearer end or 'mid'; then its order within them and its text) and sums; and each
    middle phase's sums with the labels of the same phase one period before and after it."""
    walk = SegmentWalk(layer_keys=step.pp > 1)
    if step.pp > 1 and micro_batches is not None:
        lo, _ = step.stage_layers or (0, model.layers)
        walk_fsdp_step(model, replace(step, micro_batches=micro_batches, stage_layers=(lo, lo + layers)), walk)
    else:
        lo = 0
        walk_fsdp_step(replace(model, layers=layers), step, walk)
    places = 2 * (micro_batches or 0)
    # runs: a middle stage's places labelled within its three runs (_three_runs), with these ends (warm-up / cool-down, steady)
    warm = min(micro_batches or 0, step.pp - step.pp_stage)
    steady = places - 2 * warm
    labelled: list[tuple[Label, dict[str, Sums]]] = []
    middle: list[tuple[dict[str, Sums], Label, Label]] = []
    seen = -1
    unit: Label = ("start",)
    layer: Label = ()
    sub = 0
    for phase, sums in walk.segments:
        numbered, own, in_layer = _phase_parts(phase)
        if numbered and not in_layer and numbered.group(2) == "micro-batch":
            seen += 1
            if runs is None:
                unit = _place(seen, places, micro_ends or 0)
            elif seen < warm:
                unit = ("W", *_place(seen, warm, runs[0]))
            elif seen < warm + steady:
                unit = ("S", *_place(seen - warm, steady, runs[1]))
            else:
                unit = ("C", *_place(seen - warm - steady, warm, runs[0]))
            layer, sub = (), 0
        elif numbered and not in_layer:
            layer, sub = _place(int(numbered.group(3)) - 1, layers, layer_ends), 0
        elif in_layer:
            layer, sub = _place(int(in_layer) - lo, layers, layer_ends), 0
        label = (*unit, *layer, sub, own)
        labelled.append((label, sums))
        if len(layer) == 2 and layer[0] == "mid":
            k = int(layer[1])  # type: ignore[call-overload]
            middle.append((sums, (*unit, "head", k - 1, sub, own), (*unit, "tail", layers - 2 - k, sub, own)))
        elif runs is not None and len(unit) == 3 and unit[1] == "mid":  # within its run: the steady one's period is two places
            run, k = unit[0], int(unit[2])  # type: ignore[call-overload]
            period, count = (2, steady) if run == "S" else (1, warm)
            middle.append((sums, (run, "head", k - period, *layer, sub, own), (run, "tail", count - 1 - k - period, *layer, sub, own)))
        elif len(unit) == 2 and unit[0] == "mid":
            t = int(unit[1])  # type: ignore[call-overload]
            middle.append((sums, ("head", t - 2, *layer, sub, own), ("tail", places - 3 - t, *layer, sub, own)))
        sub += 1
    return labelled, middle


@lru_cache(maxsize=8192)
def _phase_parts(phase: str) -> tuple[re.Match[str] | None, str, str]:
    """A segment's numbered part (micro-batch or layer, which of how many), its text without the numbers, and its layer
    mark's layer; walks repeat the same few phases."""
    text, _, in_layer = phase.partition(LAYER_MARK)
    return _NUMBERED.match(text), _NUMBERED.sub(r"\1: \2", text), in_layer


def _place(index: int, count: int, ends: int) -> Label:
    """A unit's place: its index from the start or from the end where within `ends` of one, else in the middle."""
    return ("head", index) if index < ends else ("tail", count - 1 - index) if index >= count - ends else ("mid", index)


def _extrapolated(base: Walked, terms: list[tuple[Walked, int]]) -> list[dict[str, Sums]] | None:
    """Each phase's sums of the base walk, plus for each longer walk `more` times what its one more unit adds, in the base
    walk's order; None where the walks do not agree with the module's account (the caller then walks the step whole)."""
    labels = [label for label, _ in base[0]]
    out = [dict(sums) for _, sums in base[0]]
    for (walked, middle), more in terms:
        kept = [(label, sums) for label, sums in walked if "mid" not in label[:-2]]
        if [label for label, _ in kept] != labels:
            return None
        by_label = dict(kept)
        for sums, before_label, after_label in middle:  # a middle phase on the line through its neighbours: periodic up to a shift
            before, after = by_label.get(before_label), by_label.get(after_label)
            if before is None or after is None or not (before.keys() == sums.keys() == after.keys()):
                return None
            if any(2 * m != b + c for s in sums for m, b, c in zip(sums[s], before[s], after[s], strict=True)):
                return None
        for phase, (_, b_sums), (_, l_sums) in zip(out, base[0], kept, strict=True):
            if b_sums.keys() != l_sums.keys():
                return None
            for s in b_sums:
                phase[s] = tuple(x + more * (y - z) for x, y, z in zip(phase[s], l_sums[s], b_sums[s], strict=True))  # type: ignore[assignment]
    return out
