"""One pipeline rank of torchtitan's Llama holding several virtual stages under FSDP2 and torch's ScheduleInterleaved1F1B.

torchtitan's default schedule for pipeline parallelism is Interleaved1F1B with two virtual stages a rank (INTERLEAVED_SOURCES
['torchtitan']): rank r of p holds stages r, r + p, ..., each a model part of its own layers (the embedding on stage 0,
the final norm and output on the last), parallelised and wrapped by fully_shard on its own, and one PipelineStage each.
torch's schedule (INTERLEAVED_SOURCES['order']) runs the rank's action list, lowered from the compute order:
- the compute order: warm-up forwards, then a forward and a backward in turn, then the cool-down backwards, the stage of
  each op chosen round by round (depth first: micro-batches_per_round forwards on one stage before the next);
- UNSHARD / RESHARD (_add_unshard_reshard): before each op, the next three distinct stages to compute are unsharded (every
  FSDP module of the stage all-gathered at once, async; the copy-out when the stage next computes, _assert_unsharded), and
  stages not among them resharded: with two or three stages a rank, all of them stay unsharded the whole step;
- REDUCE_GRAD (_add_reduce_grad): right after a stage's last backward, its perform_reduce_grad reshards and reduce-scatters
  the stage's accumulated gradients, while the rank's other stages still run backwards.
Each stage is what parcalc.core.memory_pipeline_stage walks for a 1F1B stage (its receive buffers, fwd_cache, the input
gradient its send ops hold, FSDP2's unsharded parameters and fp32 gradients accumulated across micro-batches under
backward_maybe_with_nosync), keyed apart from the rank's other stages.

Ground truth: MemTracker over torch's PipelineStage and ScheduleInterleaved1F1B running a rank's stages of torchtitan's
Llama on fake ranks (tests/ground_truth/tiny_torchtitan_pp_interleaved.py, test_torch_memory_pipeline_interleaved.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from parcalc.core.memory_pipeline_stage import (
    PipelineHooks,
    StagePlan,
    _stage_backward,
    _stage_forward,
    receive_buffers,
)
from parcalc.core.memory_walk import StepShapes, Walk
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

TORCH_SCHEDULES = "pytorch/pytorch v2.13.0 torch/distributed/pipelining/schedules.py"
INTERLEAVED_SOURCES = {
    "torchtitan": ("pytorch/torchtitan @b5bcd76c torchtitan/distributed/pipeline_parallel.py: pipeline_llm builds a model part and "
                   "a PipelineStage per virtual stage (stage indices rank + k pp, style 'loop'), parallelize_fn on each part "
                   "(apply_fsdp with reshard_after_forward=False under PP); config: pipeline_parallel_schedule 'Interleaved1F1B', "
                   "two virtual stages a rank by default (_get_pipeline_metadata)"),
    "order": (f"{TORCH_SCHEDULES} ScheduleInterleaved1F1B._calculate_single_rank_operations, _get_warmup_ops (multiply_factor 2), "
              "_get_1f1b_rank_ops: rounds = max(1, m // p), m / rounds micro-batches a round, warm-up (v - 1) x that + 2 (p - 1 - "
              "rank) ops, capped at v m"),
    "lowering": (f"{TORCH_SCHEDULES} _PipelineScheduleRuntime._prepare_schedule_with_comms (format 'compute_only'): "
                 "_add_unshard_reshard(max_active_stages=3), _add_reduce_grad; _step_microbatches: UNSHARD runs unshard(async_op=True) "
                 "on every FSDPModule of the stage, _assert_unsharded waits on them before the stage's next compute (outside "
                 "forward: each all-gather output freed after its copy-out, _fsdp_param_group.py wait_for_unshard), REDUCE_GRAD "
                 "calls stage.perform_reduce_grad"),
    "sends": (f"{TORCH_SCHEDULES} _PipelineScheduleRuntime._step_microbatches: SEND_B appends _batch_p2p(stage.get_bwd_send_ops(mb)) "
              "(its Works) to send_ops, waited at the end of step; stage.py get_bwd_send_ops pops the gradient from bwd_cache, so "
              "nothing else keeps it (Schedule1F1B keeps the last send's P2POps until the next backward's are made)"),
}

Action = tuple[str, int, int]  # (UNSHARD | RESHARD | F | B | I | W | REDUCE_GRAD, virtual stage, micro-batch or -1)


def compute_order(rank: int, pp: int, chunks: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Rank `rank`'s forwards and backwards in ScheduleInterleaved1F1B's order, as (F | B, virtual stage, micro-batch)
    (INTERLEAVED_SOURCES['order']); InputError where torch refuses the micro-batch count."""
    m = micro_batches
    rounds = max(1, m // pp)
    per_round = m // rounds
    if m % rounds:
        raise InputError(f"{m} micro-batches: ScheduleInterleaved1F1B needs a multiple of its {rounds} rounds (max(1, m // pp))")
    warmup = min((chunks - 1) * per_round + 2 * (pp - 1 - rank), m * chunks)
    ops = chunks * m

    def forward_stage(op: int) -> int:
        return (op // per_round) % chunks * pp + rank

    def backward_stage(op: int) -> int:
        return (chunks - 1 - (op - warmup) // per_round % chunks) * pp + rank

    forwards: dict[int, int] = defaultdict(int)
    backwards: dict[int, int] = defaultdict(int)
    order: list[tuple[str, int, int]] = []
    for op in range(ops + warmup):  # warm-up forwards, ops - warm-up forward-backward pairs, warm-up cool-down backwards
        if op < ops:
            stage = forward_stage(op)
            order.append(("F", stage, forwards[stage]))
            forwards[stage] += 1
        if op >= warmup:
            stage = backward_stage(op)
            order.append(("B", stage, backwards[stage]))
            backwards[stage] += 1
    return order


def rank_actions(rank: int, pp: int, chunks: int, micro_batches: int, max_active_stages: int = 3) -> list[Action]:
    """The compute order lowered as the runtime lowers it (INTERLEAVED_SOURCES['lowering']): UNSHARD / RESHARD around the
    next `max_active_stages` stages to compute, REDUCE_GRAD after each stage's last backward."""
    return lower(compute_order(rank, pp, chunks, micro_batches), micro_batches, max_active_stages)


def lower(order: list[tuple[str, int, int]], micro_batches: int, max_active_stages: int = 3) -> list[Action]:
    """A rank's compute order (F, B, I, W actions) lowered as _PipelineScheduleRuntime lowers any schedule's
    (INTERLEAVED_SOURCES['lowering']): _add_unshard_reshard, then _add_reduce_grad, which counts a stage's B and W actions
    and puts REDUCE_GRAD after its `micro_batches`-th."""
    active: list[int] = []
    actions: list[Action] = []
    gradient_passes: dict[int, int] = defaultdict(int)
    for i, (kind, stage, j) in enumerate(order):
        upcoming: list[int] = []
        for _, s, _ in order[i:]:
            if s not in upcoming:
                upcoming.append(s)
                if len(upcoming) == max_active_stages:
                    break
        for s in [s for s in active if s not in upcoming]:
            active.remove(s)
            actions.append(("RESHARD", s, -1))
        for s in [s for s in upcoming if s not in active]:
            active.append(s)
            actions.append(("UNSHARD", s, -1))
        actions.append((kind, stage, j))
        if kind in ("B", "W"):
            gradient_passes[stage] += 1
            if gradient_passes[stage] == micro_batches:
                actions.append(("REDUCE_GRAD", stage, -1))
    actions += [("RESHARD", s, -1) for s in active]
    return actions


@dataclass(frozen=True)
class RankPlan:
    rank: int  # r
    stages: int  # p, the pipeline ranks
    micro_batches: int  # m
    chunks: tuple[tuple[int, int], ...]  # the layers [first, last) of virtual stage r + k p, k = 0, 1, ...
    tp: int = 1
    compiled: bool = False

    def stage_plan(self, k: int) -> StagePlan:
        """Virtual stage r + k p as memory_pipeline_stage walks a stage (of p x v)."""
        v = len(self.chunks)
        index = self.rank + k * self.stages
        first, last = self.chunks[k]
        return StagePlan(index, self.stages * v, self.micro_batches, first, last, False, self.tp, self.compiled, tag=f"s{index}.",
                         where=f", stage {index} (chunk {k + 1} of {v})")  # fmt: skip


class InterleavedHooks(PipelineHooks):
    """FSDP2's hooks under the runtime: every unit of a stage is unsharded by the schedule's UNSHARD before the stage
    computes (rank_actions), so the modules' own pre-forward hooks find nothing to gather."""

    def before_forward(self, walk: Walk) -> None: ...
    def before_layer(self, walk: Walk, i: int) -> None: ...
    def after_forward(self, walk: Walk) -> None: ...


def stage_units(plan: StagePlan) -> list[str]:
    """The FSDP units of a stage in module order: its root (the embedding on stage 0, the final norm and output on the
    last; no parameters of its own otherwise), then its blocks."""
    root = ["root"] if plan.first or plan.last else []
    return root + [f"L{i}" for i in range(plan.first_layer, plan.last_layer)]


def reported(actions: list[Action], progress: Callable[[int, int], None] | None) -> Iterator[Action]:
    """Each of a rank's actions in order, `progress(done, total)` called before it (memory_walk.WALK_PROGRESS): the
    interleaved, ZB-V and DualPipeV walks' one loop head."""
    for done, action in enumerate(actions):
        if progress is not None:
            progress(done, len(actions))
        yield action


def walk_rank(walk: Walk, model: TransformerModel, x: StepShapes, plan: RankPlan, policies: tuple[str, ...], embedding_tables: int,
              hooks: InterleavedHooks, progress: Callable[[int, int], None] | None = None) -> None:  # fmt: skip
    """The rank's step in the runtime's action order (rank_actions), each stage as memory_pipeline_stage walks one;
    `progress(done, total)` before each action (memory_walk.WALK_PROGRESS)."""
    fsdp = hooks.fsdp
    plans = {p.index: p for p in (plan.stage_plan(k) for k in range(len(plan.chunks)))}
    for stage in plans.values():
        receive_buffers(walk, x, stage)
    for kind, index, j in reported(rank_actions(plan.rank, plan.stages, len(plan.chunks), plan.micro_batches), progress):
        stage = plans[index]
        units = stage_units(stage)
        if shard_action(walk, fsdp, kind, index, units):
            continue
        if kind == "REDUCE_GRAD":
            walk.phase = f"backward: perform_reduce_grad of stage {index} (each unit's reduce-scatter)"
            fsdp.reduce_units(walk, hooks.accumulated, units)  # type: ignore[attr-defined]
            continue
        for unit in units:  # _assert_unsharded: the stage's pending all-gathers copied out
            fsdp.wait_for_unshard(walk, unit, forward=False)  # type: ignore[attr-defined]
        if kind == "F":
            _stage_forward(walk, model, x, stage, policies, j, hooks)
        else:
            _stage_backward(walk, model, x, stage, policies, j, embedding_tables, hooks)
            # SEND_B right after: get_bwd_send_ops pops the input's gradient from bwd_cache into a P2POp the runtime
            # does not keep (only the Work, which holds no tensor: INTERLEAVED_SOURCES['sends'])
            walk.free(stage.key("sent_grad"))


def shard_action(walk: Walk, fsdp: Any, kind: str, index: int, units: Any) -> bool:
    """UNSHARD (every FSDP unit of the stage all-gathered, async) or RESHARD (those unsharded freed) as the pipeline runtime
    runs them (INTERLEAVED_SOURCES['lowering']); False where `kind` is neither. Every multi-stage rank walk's
    (ScheduleInterleaved1F1B here, ScheduleZBVZeroBubble in memory_pipeline_zero_bubble)."""
    if kind == "UNSHARD":
        walk.phase = f"unshard: stage {index}"
        for unit in units:
            fsdp.unshard(walk, unit)
        return True
    if kind == "RESHARD":
        for unit in units:
            if unit in fsdp.unsharded:
                fsdp.reshard(walk, unit)
        return True
    return False


def rank_chunk_layers(layout: Any, layers: int, rank: int) -> tuple[tuple[int, int], ...]:
    """The layers [first, last) of each virtual stage rank `rank` holds, chunk 0 first: the layout's own split (torchtitan's,
    or --pipeline-layout) or Megatron-LM's v equal chunks of each rank's layers (expert_parallel.stage_ranges)."""
    from parcalc.core.expert_parallel import stage_ranges

    if layout.pipeline_layout is not None:
        ranges = layout.pipeline_split(layers).stage_ranges()[rank]
    else:
        ranges = stage_ranges(layout.stage_layers(layers), layout.chunks)[rank]
    return tuple((r.start, r.stop) for r in ranges)


def interleaved_gaps(layout: Any, layers: int) -> list[str]:
    """What of an interleaved layout the walk does not follow: it walks torch's ScheduleInterleaved1F1B over v >= 2 virtual
    stages a rank placed round-robin, each holding transformer layers, the embedding with the first and the head with the last."""
    if layout.chunks < 2:
        return ["the interleaved schedule with one chunk a stage"]
    if layout.pipeline_layout is not None:
        split = layout.pipeline_split(layers)
        stages = split.stages
        if split.v_shape or split.chunks < 2:
            return [f"the pipeline layout {layout.pipeline_layout!r} under the interleaved schedule"]
        odd = [what for what, gap in (("a virtual stage without transformer layers", any(s.layers == 0 for s in stages)),
                                      ("the embedding off the first virtual stage", not stages[0].embedding or any(s.embedding for s in stages[1:])),
                                      ("the head off the last virtual stage", not stages[-1].loss or any(s.loss for s in stages[:-1])),
                                      ("multi-token prediction", any(s.mtp for s in stages))) if gap]  # fmt: skip
        return [f"the pipeline layout {layout.pipeline_layout!r}: {', '.join(odd)}"] if odd else []
    uneven = [n for n in layout.stage_layers(layers) if n % layout.chunks or n == 0]
    return [f"{layout.chunks} chunks of a stage's {uneven[0]} layers (not whole, or none)"] if uneven else []
