"""A discrete-event simulation of pipeline-parallel schedules, and the timeline it produces.

A schedule is, for every device, the ordered list of its operations: forward F, backward B and,
where the backward is split (Zero Bubble), the weight-gradient pass W; each names a micro-batch
and a model chunk (a virtual stage of the interleaved schedule). The simulator runs every
device's list in order, one operation at a time, and starts an operation as soon as its device is
free and its dependencies have finished (plus a point-to-point latency when the dependency ran
on another device):

- F of micro-batch i on virtual stage q after F of i on stage q - 1;
- B of i on stage q after B of i on stage q + 1 (on the last stage, after its own F);
- W of i on stage q after B of i on stage q.

Virtual stage q = chunk x p + device (Megatron-LM's interleaved layout: device d holds layers
chunks d, d + p, d + 2p, ...), or, in the V layout of DualPipeV and ZB-V, q = d for chunk 0 and
q = 2p - 1 - d for chunk 1 (device d holds stages d and 2p - 1 - d: the last device both middle
ones, the first device the first and the last). All numbers here are 0-based; renderers print
them from 1, as the papers' figures do.

Times are in seconds. A chunk's operation takes 1/v of its device's per-stage time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from parcalc.frozen import frozen

F, B, W = "F", "B", "W"
OPS = (F, B, W)
INTERLEAVED, V_SHAPE, BIDIRECTIONAL = "interleaved", "v", "bidirectional"  # how a device's chunks map to stages (module docstring)


def virtual_stage(chunk: int, device: int, stages: int, layout: str = INTERLEAVED) -> int:
    """The virtual stage that `device`'s `chunk` holds (module docstring)."""
    if layout == BIDIRECTIONAL:  # DualPipe: stage d of the way down, stage p - 1 - d of the way up
        return device if chunk == 0 else stages - 1 - device
    if layout == V_SHAPE:
        return device if chunk == 0 else 2 * stages - 1 - device
    return chunk * stages + device


def device_of(stage: int, stages: int, layout: str = INTERLEAVED, chunk: int = 0) -> int:
    """The device that holds virtual `stage` (DualPipe: of the pipeline `chunk`, 0 the way down, 1 the way up)."""
    if layout == BIDIRECTIONAL:
        return stage if chunk == 0 else stages - 1 - stage
    if layout == V_SHAPE:
        return stage if stage < stages else 2 * stages - 1 - stage
    return stage % stages


@frozen
class Task:
    """One operation in a device's order: `op` is "F", "B" or "W"; micro_batch and chunk 0-based.

    joined: the operation runs as one unit with the one before it: the unit starts when every
    operation of it can, its operations run back to back, and what they produce is passed on when
    the whole unit ends (DualPipe's overlapped "F & B" pair, and a full backward B + W, whose
    input gradient is sent after its weight gradient is computed)."""

    op: str
    micro_batch: int
    chunk: int = 0
    joined: bool = False


@frozen
class Event:
    """One operation as it ran: device, op, micro-batch and chunk (all 0-based), start and end in s."""

    device: int
    op: str
    micro_batch: int
    chunk: int
    start: float
    end: float


@frozen
class Timeline:
    """The simulated schedule: events in start order and what they add up to.

    makespan: from the first start to the last end (s): one iteration with a pipeline flush.
    busy / idle: per device, time computing and time idle within the makespan (s).
    span: per device, from its own first start to its own last end (s).
    peak_in_flight: per device, the most micro-batches whose activations (those B needs) were
      alive at once, counted from the start of F to the end of B, in units of a whole stage's
      activations of one micro-batch (a chunk counts 1/v).
    pending_weight_at_peak: per device, how many micro-batches had finished B but not W at the
      moment of that peak (Zero Bubble schedules: they hold the smaller activations W needs,
      M_W < M_B, Qi et al. 2024 Table 1; worker i holds (p - i + 1) M_B + (i - 1) M_W in ZB-H1).
    """

    stages: int
    micro_batches: int
    chunks: int
    latency: float
    events: tuple[Event, ...]
    makespan: float
    busy: tuple[float, ...]
    idle: tuple[float, ...]
    span: tuple[float, ...]
    peak_in_flight: tuple[float, ...]
    pending_weight_at_peak: tuple[float, ...]

    @property
    def total_idle(self) -> float:
        return sum(self.idle)

    @property
    def total_busy(self) -> float:
        return sum(self.busy)

    @property
    def bubble_share(self) -> float:
        """Idle device-time as a share of all device-time within the makespan."""
        return self.total_idle / (self.stages * self.makespan) if self.makespan > 0 else 0.0

    @property
    def bubble_relative(self) -> float:
        """Idle device-time relative to the compute (busy) time."""
        return self.total_idle / self.total_busy if self.total_busy > 0 else 0.0

    @property
    def span_bubble(self) -> float:
        """The largest idle time of one device between its own first start and last end (s).

        The measure of Qi et al. 2024 (zero-bubble repository, zb.py: a stage's time is its last
        W's end minus its first F's start): with the optimizer step no longer synchronising the
        stages (their sec. 4), each stage starts its next iteration as soon as it is done.
        """
        return max(s - b for s, b in zip(self.span, self.busy, strict=True))


# ---------------------------------------------------------------------------------------------
# Orders: the operations of each device, in the order the schedule runs them


def gpipe_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """GPipe (Huang et al. 2019, fig. 2c): every forward, then every backward, on each device."""
    forwards = tuple(Task(F, i) for i in range(micro_batches))
    backwards = tuple(Task(B, i) for i in range(micro_batches))
    return tuple(forwards + backwards for _ in range(stages))


def one_f_one_b_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """1F1B / PipeDream-Flush (Narayanan et al. 2021, sec. 2.2, fig. 4 top).

    Device d runs min(p - d - 1, m) warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards: Megatron-LM's
    forward_backward_pipelining_without_interleaving (megatron/core/pipeline_parallel/schedules.py).
    """
    orders = []
    for device in range(stages):
        warm_up = min(stages - device - 1, micro_batches)
        order = [Task(F, i) for i in range(warm_up)]
        for k in range(micro_batches - warm_up):
            order += [Task(F, warm_up + k), Task(B, k)]
        order += [Task(B, micro_batches - warm_up + k) for k in range(warm_up)]
        orders.append(tuple(order))
    return tuple(orders)


def interleaved_order(stages: int, micro_batches: int, chunks: int) -> tuple[tuple[Task, ...], ...]:
    """Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2, fig. 4 bottom).

    Follows forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/
    schedules.py): the k-th forward on a device is micro-batch (k // pv) p + k % p of chunk
    (k % pv) // p, backwards visit the chunks in reverse; device d runs (p - d - 1) x 2 +
    (v - 1) x p warm-up forwards (all m v of them when m = p), then one forward and one backward
    in turn. Micro-batches go in groups of p, hence Megatron's requirement that p divides m.
    """
    if chunks == 1:
        return one_f_one_b_order(stages, micro_batches)
    if micro_batches % stages:
        raise ValueError("the interleaved schedule needs the micro-batch count to be a multiple of the stage count")
    group = stages * chunks
    total = micro_batches * chunks

    def task(op: str, k: int) -> Task:
        chunk = (k % group) // stages
        if op == B:
            chunk = chunks - 1 - chunk
        return Task(op, (k // group) * stages + k % stages, chunk)

    orders = []
    for device in range(stages):
        if micro_batches == stages:
            warm_up = total
        else:
            warm_up = min((stages - device - 1) * 2 + (chunks - 1) * stages, total)
        order = [task(F, k) for k in range(warm_up)]
        for k in range(total - warm_up):
            order += [task(F, warm_up + k), task(B, k)]
        order += [task(B, total - warm_up + k) for k in range(warm_up)]
        orders.append(tuple(order))
    return tuple(orders)


def zb_h1_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """ZB-H1 (Qi et al. 2024, sec. 2.1, fig. 3 top): 1F1B with the backward split into B and W.

    Device d keeps 1F1B's p - d - 1 warm-up forwards but delays its first d weight-gradient
    passes, so that every device holds p micro-batches in flight and the late W passes fill the
    tail bubble. The order follows a public DeepSpeed port of ZB-H1 (class ZeroBubbleH1Pipeline,
    a deepspeed.runtime.pipe PipeSchedule): warm-up F's, then d x (F, B), then (F, B, W) while
    forwards remain, then (B, W), then the remaining W's. Its bubble is Qi et al.'s
    (p - 1)(T_F + T_B - T_W) whenever T_W <= T_F, T_B and m >= p (tests/test_pipeline_sim.py).
    """
    orders = []
    m = micro_batches
    for device in range(stages):
        order: list[Task] = []
        f = b = w = 0
        for _ in range(stages - device - 1):
            if f < m:
                order.append(Task(F, f))
                f += 1
        for _ in range(device):
            if f < m:
                order += [Task(F, f), Task(B, b)]
                f += 1
                b += 1
        while f < m:
            order += [Task(F, f), Task(B, b), Task(W, w)]
            f, b, w = f + 1, b + 1, w + 1
        while b < m:
            order += [Task(B, b), Task(W, w)]
            b, w = b + 1, w + 1
        order += [Task(W, k) for k in range(w, m)]
        orders.append(tuple(order))
    return tuple(orders)


def zb_h2_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """ZB-H2 (Qi et al. 2024, sec. 2.2, fig. 3 bottom): zero bubble with up to 2p - 1 in flight.

    The handcrafted schedule assumes T_F = T_B = T_W. It is built here by running those unit
    times through the rules of the paper's heuristic (sec. 3.1): a device runs a B as soon as it
    can, else an F while fewer than 2p - 1 micro-batches are in flight (F started, W not yet
    run), else a pending W to fill the gap. Device d then runs 2(p - d) - 1 warm-up forwards,
    and the W passes at the tail turn the trapezoid of 1F1B into a parallelogram. The resulting
    order is then simulated with the actual times.
    """
    p, m = stages, micro_batches
    limit = 2 * p - 1
    f_end: dict[tuple[int, int], int] = {}  # (device, micro-batch) -> end time, unit steps
    b_end: dict[tuple[int, int], int] = {}
    next_f, next_b, next_w = [0] * p, [0] * p, [0] * p
    orders: list[list[Task]] = [[] for _ in range(p)]
    t = 0
    while any(n < m for n in next_w):
        started: list[tuple[str, int, int]] = []
        for d in range(p):
            f, b, w = next_f[d], next_b[d], next_w[d]
            b_ready = b < f and (f_end[(d, b)] <= t if d == p - 1 else b_end.get((d + 1, b), t + 1) <= t)
            f_ready = f < m and f - w < limit and (d == 0 or f_end.get((d - 1, f), t + 1) <= t)
            if b_ready:
                started.append((B, d, b))
            elif f_ready:
                started.append((F, d, f))
            elif w < b:
                started.append((W, d, w))
        for op, d, i in started:  # decided on the state at time t, applied together
            orders[d].append(Task(op, i))
            if op == F:
                f_end[(d, i)] = t + 1
                next_f[d] += 1
            elif op == B:
                b_end[(d, i)] = t + 1
                next_b[d] += 1
            else:
                next_w[d] += 1
        t += 1
    return tuple(tuple(order) for order in orders)


def dualpipev_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """DualPipeV (DeepSeek-AI's "cut-in-half" DualPipe, after Sea AI Lab): p devices, 2p stages in a V.

    Ported step for step from deepseek-ai/DualPipe, dualpipe/dualpipev.py @3da1bbe, DualPipeV.step:
    on rank r of p, with chunk 0 the way down (stage r) and chunk 1 the way back (stage 2p - 1 - r),
      1. 2(p - r - 1) x F0;   2. (r + 1) x (F0, F1);   3. (p - r - 1) x (B1 with W deferred, W, F1);
      4. (m - 2p + r + 1) x (F0 & B1, F1 & B0);   5. (p - r - 1) x (B1, F1 & B0);
      6. (r + 1) x (B1, B0), W deferred from the middle on (rank parity decides which comes first);
      7. (p - r - 1) x (W, B0 with W deferred);   8. (r + 1) x W,
    where "F & B" is one forward and one full backward that the reference overlaps with each
    other's communication (`overlapped_forward_backward`), computed one after the other; a full
    backward is B then its W; a deferred W joins a FIFO queue that each lone W pops
    (WeightGradStore). Needs m >= 2p (the reference's assert). Micro-batches count per chunk.
    """
    return tuple(_dual_rank(stages, micro_batches, rank, middle=rank == stages - 1) for rank in range(stages))


def dualpipe_order(stages: int, micro_batches: int) -> tuple[tuple[Task, ...], ...]:
    """DualPipe (DeepSeek-V3 technical report sec. 3.2.1, fig. 5): two pipelines of p stages in opposite directions on
    the same p devices, each fed half of the m micro-batches from its own end; device d holds stage d of the way
    down (chunk 0) and stage p - 1 - d of the way up (chunk 1), so every stage's parameters are on two devices.

    Ported from deepseek-ai/DualPipe, dualpipe/dualpipe.py @3da1bbe, DualPipe.step: the eight steps of DualPipeV
    (dualpipev_order) with num_half_ranks = p/2 and half_rank = min(r, p - 1 - r) in place of p and r, m/2 micro-batches
    in place of m, the un-overlapped first pair of step 4 on the two middle ranks, and the second half of the ranks
    running each step's phases mirrored (phase ^= is_in_second_half). Needs p even, m even and m >= 2p (its asserts).
    The way up's micro-batches are numbered m/2 .. m - 1 here, so that each pipeline's are its own.
    """
    half = micro_batches // 2
    return tuple(_dual_rank(stages // 2, half, min(rank, stages - 1 - rank), middle=rank in (stages // 2 - 1, stages // 2),
                            mirrored=rank >= stages // 2, offset=half) for rank in range(stages))  # fmt: skip


def _dual_rank(p: int, m: int, rank: int, *, middle: bool, mirrored: bool = False, offset: int = 0) -> tuple[Task, ...]:
    """The order of one rank of DualPipeV (p ranks, m micro-batches, rank r) or of DualPipe (p = num_half_ranks,
    m = half the micro-batches, rank = half_rank; mirrored: the second half of the ranks, whose phase 0 is the way up;
    offset: the number of the way up's first micro-batch)."""
    from collections import deque

    order: list[Task] = []
    forwards, backwards = [0, 0], [0, 0]
    deferred: deque[Task] = deque()

    def task(op: str, phase: int, count: int, joined: bool = False) -> Task:
        chunk = phase ^ int(mirrored)
        return Task(op, count + (offset if chunk == 1 else 0), chunk, joined=joined)

    def forward(chunk: int) -> None:
        order.append(task(F, chunk, forwards[chunk]))
        forwards[chunk] += 1

    def backward(chunk: int, defer_weight: bool = False, joined: bool = False) -> None:
        order.append(task(B, chunk, backwards[chunk], joined=joined))
        if defer_weight:
            deferred.append(task(W, chunk, backwards[chunk]))
        else:  # a full backward: its input gradient is sent once its weight gradient is done too
            order.append(task(W, chunk, backwards[chunk], joined=True))
        backwards[chunk] += 1

    def forward_backward(forward_chunk: int, backward_chunk: int) -> None:
        """The overlapped pair: one unit, both results sent when it ends (_forward_backward_chunk)."""
        forward(forward_chunk)
        backward(backward_chunk, joined=True)

    def weight() -> None:
        order.append(deferred.popleft())

    for _ in range(2 * (p - rank - 1)):  # 1
        forward(0)
    for _ in range(rank + 1):  # 2
        forward(0)
        forward(1)
    for _ in range(p - rank - 1):  # 3
        backward(1, defer_weight=True)
        weight()
        forward(1)
    for i in range(m - 2 * p + rank + 1):  # 4
        if i == 0 and middle:  # "We don't overlap these two chunks to further reduce bubble size."
            forward(0)
            backward(1)
        else:
            forward_backward(0, 1)
        forward_backward(1, 0)
    for _ in range(p - rank - 1):  # 5
        backward(1)
        forward_backward(1, 0)
    steps, defer = rank + 1, False  # 6
    for i in range(steps):
        if i == steps // 2 and rank % 2 == 1:
            defer = True
        backward(1, defer)
        if i == steps // 2 and rank % 2 == 0:
            defer = True
        backward(0, defer)
    for _ in range(p - rank - 1):  # 7
        weight()
        backward(0, defer_weight=True)
    for _ in range(rank + 1):  # 8
        weight()
    assert not deferred, "DualPipe(V) leaves no deferred W (the reference asserts the queue empty)"
    return tuple(order)


ZBV_SOURCE = ("sail-sg/zero-bubble-pipeline-parallelism @39f2c186, megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py, "
              "PipelineGraph.try_v_schedule and create_schedule")
# What a pending W holds of a micro-batch's activations M_B (Qi et al. 2024, Table 1; the reference's runtime.py @39f2c186
# sets f_mem = 34 h + 5 a s, w_mem = -32 h per token): 32 of 34 with FlashAttention, which keeps no 5 a s^2 b scores
ZBV_WEIGHT_MEMORY = 32 / 34


def zbv_order(stages: int, micro_batches: int, forward: float = 1.0, backward: float = 1.0, weight: float = 1.0,
              weight_memory: float = ZBV_WEIGHT_MEMORY) -> tuple[tuple[Task, ...], ...]:
    """ZB-V (Qi et al. 2024, arXiv v2 sec. 6, "ZB-V"; Qi et al. 2024b, "Pipeline Parallelism with Controllable Memory"):
    p devices, 2p stages in a V (as DualPipeV: device d holds stage d and 2p - 1 - d), the activation memory of 1F1B
    (2p chunks' M_B on every device) and a split backward whose W passes fill the gaps.

    Ported from the reference's heuristic (ZBV_SOURCE): it places F, B and W of each chunk on each device in a
    simulated clock with the given per-chunk costs (F, B = the input-gradient pass, W), running each device's
    forwards until its memory limit of 2p chunks' M_B, a B as soon as its input is there, and a pending W wherever
    it fills a wait; it tries W-filling before F and before B both ways (create_schedule) and each again with the
    bubbles it found as the bound (approved_bubble), keeping the order with the smallest largest bubble. The
    reference runs it with the profiled per-chunk costs (runtime.py: f_mid, b_mid, w_mid, the communication cost c,
    0 here: parcalc counts the sends apart). Its memory units: F adds 1, B frees 1 - weight_memory, W the rest.
    Chunks are the model's (0: the way down, 1: the way back), micro-batches count per chunk.
    """
    best: tuple[float, list[list[tuple[int, int, int]]]] | None = None
    for fill_b in (True, False):
        for fill_f in (True, False):
            order, bubble = _zbv_try(stages, micro_batches, (forward, backward, weight), (1.0, weight_memory - 1.0, -weight_memory),
                                     fill_f, fill_b, None)  # fmt: skip
            if best is None or bubble < best[0]:
                best = (bubble, order)
    assert best is not None
    # create_schedule: the heuristic names the backward chunks in the order the gradient meets them (its chunk 0 is the
    # model's chunk 1); forwards keep theirs
    return tuple(tuple(Task((F, B, W)[cat], micro, chunk if cat == 0 else 1 - chunk) for cat, chunk, micro in row)
                 for row in best[1])  # fmt: skip


def _zbv_try(n: int, m: int, cost: tuple[float, float, float], mem_of: tuple[float, float, float], fill_f: bool, fill_b: bool,
             approved: list[float] | None) -> tuple[list[list[tuple[int, int, int]]], float]:  # fmt: skip
    """PipelineGraph.try_v_schedule (ZBV_SOURCE), step for step; (cat, chunk, micro-batch) per device, and its largest
    bubble. cat 0/1/2 = F/B/W; its "chunk" is the position along the V in the direction of the pass."""
    from collections import deque

    count = [[0] * 6 for _ in range(n)]
    # the end of each F and B pass, at ((cat * 2 + chunk) * n + stage) * m + micro (-1: not placed): a flat list, since
    # the heuristic asks for one some five million times in a search's ZB-V rows (a W's end is never asked for)
    end = [-1.0] * (4 * n * m)
    now = [0.0] * n
    mem = [0.0] * n
    bubble = [0.0] * n
    pending: list[deque[int]] = [deque() for _ in range(n)]
    schedule: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    approved = approved if approved is not None else [-1.0] * n
    max_approved = max(approved)
    max_mem = 2.0 * n  # the reference's default: 2p chunks' M_B

    def max_bubble(stage: int = -1) -> float:
        most = max(0.0, *bubble)
        return max(most, max_approved - approved[stage]) if stage >= 0 else most

    def done(cat: int, chunk: int, stage: int, micro: int) -> float:
        return end[((cat * 2 + chunk) * n + stage) * m + micro] if micro < m else -1.0

    def put_w(stage: int) -> None:
        put(2, pending[stage].popleft(), stage)

    def put(cat: int, chunk: int, stage: int) -> None:
        no_bubble = finish = now[stage] + cost[cat]
        micro = count[stage][cat * 2 + chunk]
        if micro >= m or mem[stage] + mem_of[cat] > max_mem + 1e-9:
            raise ValueError("ZB-V's heuristic cannot place this pass (the reference asserts)")
        if cat < 2 and (stage < n - 1 if chunk == 1 else stage > 0):
            previous = done(cat, chunk, stage + 1 if chunk == 1 else stage - 1, micro)
            if previous < 0:
                raise ValueError("ZB-V's heuristic placed a pass before its input (the reference asserts)")
            finish = max(finish, previous + cost[cat])
        if count[stage][0] > 0:
            bubble[stage] += finish - no_bubble
        if cat < 2:
            end[((cat * 2 + chunk) * n + stage) * m + micro] = finish
        now[stage] = finish
        mem[stage] += mem_of[cat]
        schedule[stage].append((cat, chunk, micro))
        if cat == 1:
            pending[stage].append(chunk)
        count[stage][cat * 2 + chunk] += 1

    for i in range(n):
        put(0, 0, i)
    for i in range(n - 1, -1, -1):
        if i == n - 1:
            put(0, 1, i)
            continue
        until = done(0, 1, i + 1, 0)
        while mem[i] + mem_of[0] * (2 + i * 2) <= max_mem and now[i] + cost[0] <= until and count[i][0] < m:
            for j in range(i + 1):
                put(0, 0, j)
        put(0, 1, i)
    chunk_ = 0
    for i in range(1, n):
        while count[i][0] + count[i][1] < count[i - 1][0] + count[i - 1][1] or count[i][1] <= count[i - 1][1] < m:
            for j in range(n - 1, i - 1, -1):
                if count[j][chunk_] < m:
                    put(0, chunk_, j)
            chunk_ = 1 - chunk_

    def fill(stage: int, waits_on: float) -> bool:
        """Pending W passes that fit before the input arrives; True if the wait is still longer than the bubble allowed."""
        while pending[stage] and waits_on >= 0 and waits_on >= now[stage] + cost[2]:
            put_w(stage)
        return bool(pending[stage]) and waits_on - now[stage] > max_bubble(stage) - bubble[stage]

    for _ in range(2 * m):
        for i in range(n):
            while mem[i] + mem_of[1] > max_mem:
                put_w(i)
        b0, b1 = [], []
        for i in range(n):
            if count[i][3] >= count[i][2]:
                b0.append(i)
            elif i == n - 1 or done(1, 1, i + 1, count[i][3]) >= 0 or count[i][2] >= m:
                b1.append(i)
            else:
                b0.append(i)
        for i, chunk in [(i, 1) for i in reversed(b1)] + [(i, 0) for i in b0]:
            waits = -1.0
            if chunk == 1 and i < n - 1:
                waits = done(1, 1, i + 1, count[i][3])
            if chunk == 0 and i > 0:
                waits = done(1, 0, i - 1, count[i][2])
            # the reference indexes end_time[-1] (the last node, not yet run: -1) when nothing is waited on
            if fill(i, waits) and (chunk == 1 or fill_b):
                put_w(i)
            put(1, chunk, i)
        for i in range(n):
            if count[i][1] >= m:
                continue
            item = None
            if count[i][1] >= count[i][0]:
                item = 0
            elif i == n - 1 or done(0, 1, i + 1, count[i][1]) >= 0:
                item = 1
            elif count[i][0] < m and (i == 0 or done(0, 0, i - 1, count[i][0]) >= 0):
                item = 0
            if item is None:
                continue
            while mem[i] + mem_of[0] > max_mem + 1e-9:
                put_w(i)
            waits = -1.0
            if item == 0 and i > 0:
                waits = done(0, 0, i - 1, count[i][0])
            if item == 1 and i < n - 1:
                waits = done(0, 1, i + 1, count[i][1])
            if fill(i, waits) and fill_f:
                put_w(i)
            put(0, item, i)
    for i in range(n):
        while pending[i]:
            put_w(i)
    worst = max_bubble()
    if max_approved < 0 or worst < max_approved:
        again, again_worst = _zbv_try(n, m, cost, mem_of, fill_f, fill_b, list(bubble))
        if again_worst < worst:
            return again, again_worst
    return schedule, worst


# ---------------------------------------------------------------------------------------------
# The simulation


def simulate(
    orders: Sequence[Sequence[Task]],
    durations: Sequence[Mapping[str, float]],
    *,
    micro_batches: int,
    chunks: int = 1,
    latency: float = 0.0,
    layout: str = INTERLEAVED,
    chunk_shares: Sequence[Sequence[float]] | None = None,
) -> Timeline:
    """Run each device's order; return the timeline.

    durations[d][op]: seconds of op ("F", "B", "W") for ALL of device d's layers; a chunk's
    operation takes 1/chunks of it, or chunk_shares[d][c] of it when the chunks differ (a
    --pipeline-layout's virtual stages of unequal layers). latency: seconds added to a dependency between devices.
    layout: how chunks map to virtual stages, INTERLEAVED or V_SHAPE (with chunks = 2).
    An order that can never finish (a device waits on an operation queued behind its own)
    raises ValueError: the orders above never do.
    """
    p, v = len(orders), chunks
    last = p - 1 if layout == BIDIRECTIONAL else p * v - 1
    shares = chunk_shares if chunk_shares is not None else [[1.0 / v] * v] * p
    end: dict[tuple[str, int, int], float] = {}  # (op, virtual stage, micro-batch) -> end
    events: list[Event] = []
    position, free = [0] * p, [0.0] * p
    remaining = sum(len(order) for order in orders)
    # A device runs until its next operation waits on one not yet done, and is woken when that one
    # is: O(operations) in all. (Sweeping every device until none progresses was O(p) per sweep and
    # needed O(p) sweeps: p = 4000 stages took 6 s.) An operation's start depends only on its
    # device's order and its dependencies' ends, so the timeline is the same in any run order.
    waiting: dict[tuple[str, int, int], list[int]] = {}
    runnable = list(range(p - 1, -1, -1))  # a stack, device 0 on top
    while runnable:
        device = runnable.pop()
        order = orders[device]
        while position[device] < len(order):
            unit = _unit(order, position[device])
            ready = free[device]
            missing = None
            inside = {(t.op, virtual_stage(t.chunk, device, p, layout), t.micro_batch) for t in unit}
            for task in unit:
                for dep_op, dep_stage in _dependencies(task.op, virtual_stage(task.chunk, device, p, layout), last):
                    key = (dep_op, dep_stage, task.micro_batch)
                    if key in inside:  # within the unit: it runs before, back to back
                        continue
                    if key not in end:
                        missing = key
                        break
                    hop = latency if device_of(dep_stage, p, layout, task.chunk) != device else 0.0
                    ready = max(ready, end[key] + hop)
                if missing is not None:
                    break
            if missing is not None:
                waiting.setdefault(missing, []).append(device)
                break
            start, done_keys = ready, []
            for task in unit:
                finish = start + durations[device][task.op] * shares[device][task.chunk]
                events.append(Event(device, task.op, task.micro_batch, task.chunk, start, finish))
                done_keys.append((task.op, virtual_stage(task.chunk, device, p, layout), task.micro_batch))
                start = finish
            for done in done_keys:  # passed on when the whole unit ends
                end[done] = start
            free[device] = start
            position[device] += len(unit)
            remaining -= len(unit)
            for done in done_keys:
                runnable.extend(waiting.pop(done, ()))
    if remaining:
        stuck = {d: orders[d][position[d]] for d in range(p) if position[d] < len(orders[d])}
        raise ValueError(f"the schedule deadlocks: devices wait on {stuck}")
    # in-flight counts in a device's micro-batches of one stage: DualPipe's chunks are whole stages (one each way)
    return _timeline(events, p, micro_batches, v, latency, 1 if layout == BIDIRECTIONAL else v)


def _unit(order: Sequence[Task], at: int) -> list[Task]:
    """The operation at `at` and those joined to it (Task.joined)."""
    unit = [order[at]]
    while at + len(unit) < len(order) and order[at + len(unit)].joined:
        unit.append(order[at + len(unit)])
    return unit


def _dependencies(op: str, stage: int, last: int) -> tuple[tuple[str, int], ...]:
    if op == F:
        return ((F, stage - 1),) if stage > 0 else ()
    if op == B:
        return ((B, stage + 1),) if stage < last else ((F, stage),)
    return ((B, stage),)


def _timeline(events: list[Event], p: int, m: int, v: int, latency: float, unit: int) -> Timeline:
    events.sort(key=lambda e: (e.start, e.device))
    makespan = max((e.end for e in events), default=0.0)
    busy, span, in_flight, pending = [], [], [], []
    by_device: list[list[Event]] = [[] for _ in range(p)]
    for event in events:
        by_device[event.device].append(event)
    for mine in by_device:
        busy.append(sum(e.end - e.start for e in mine))
        span.append(max(e.end for e in mine) - min(e.start for e in mine) if mine else 0.0)
        peak, waiting = _peak_memory(mine)
        in_flight.append(peak / unit)
        pending.append(waiting / unit)
    return Timeline(
        stages=p,
        micro_batches=m,
        chunks=v,
        latency=latency,
        events=tuple(events),
        makespan=makespan,
        busy=tuple(busy),
        idle=tuple(makespan - b for b in busy),
        span=tuple(span),
        peak_in_flight=tuple(in_flight),
        pending_weight_at_peak=tuple(pending),
    )


def _peak_memory(events: list[Event]) -> tuple[int, int]:
    """(most chunk activations alive at once, W-pending chunks at that moment) on one device.

    A chunk's activations are allocated when its F starts and freed when its B ends; with a
    split backward, what W needs stays from the end of B to the end of W. One device runs one
    operation at a time, so a release and an allocation at the same instant are in sequence:
    releases first.
    """
    split = any(e.op == W for e in events)
    changes: list[tuple[float, int, int, int]] = []  # (time, allocation?, d_alive, d_pending)
    for e in events:
        if e.op == F:
            changes.append((e.start, 1, +1, 0))
        elif e.op == B:
            changes.append((e.end, 0, -1, +1 if split else 0))
        else:
            changes.append((e.end, 0, 0, -1))
    alive = pending = 0
    best = (0, 0)
    for _, _, d_alive, d_pending in sorted(changes):
        alive, pending = alive + d_alive, pending + d_pending
        best = max(best, (alive, pending))
    return best
