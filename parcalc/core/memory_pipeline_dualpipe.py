"""One pipeline rank of torchtitan's Llama holding two stages in a V under FSDP2 and torch's ScheduleDualPipeV
(torchtitan's pipeline_parallel_schedule 'DualPipeV'), tensor by tensor in the runtime's action order.

torchtitan places DualPipeV's stages as ZB-V's (memory_pipeline_zero_bubble.ZERO_BUBBLE_SOURCES['placement']): rank r of p
holds stage r and stage 2p - 1 - r. torch's schedule (DUALPIPE_SOURCES['order']) is DeepSeek's DualPipeV: most micro-batches
run a forward on one of the rank's stages paired with a whole backward (B, not split) on the other, OVERLAP_F_B; only the
warm-up's chunk-1 backwards and the cool-down's second half are split in I and W, as ZB-V splits them. The runtime lowers
the order as it lowers any schedule's (memory_pipeline_interleaved.lower) and runs an OVERLAP_F_B's two sub-actions one
after the other, the forward first (DUALPIPE_SOURCES['overlap']): on one CUDA stream, nothing of the forward is freed before
the backward starts, so the pair holds what the forward made while the backward runs. So the rank's step is ZB-V's walk
(memory_pipeline_zero_bubble.walk_v_rank: F, I, W, UNSHARD / RESHARD, REDUCE_GRAD) with the whole backward added:
- B on a stage is Schedule1F1B's backward of the stage (memory_pipeline_stage._stage_backward: stage_backward, every saved
  tensor released as its node runs, the input's .grad set to None), its input's gradient popped from bwd_cache by SEND_B
  or, on the V's turn (rank p - 1, stage p), handed to stage p - 1 as its received gradient (DUALPIPE_SOURCES['full']);
- the first B of a chunk-1 stage after the warm-up's last W finds that W's weight gradients still unfolded (FSDP2 folds a
  .grad into its fp32 accumulator only at the unit's post-backward: ZB-V's next I, or here the B): autograd adds each new
  gradient into that .grad in place (memory_walk.ACCUMULATE_GRAD) and the block's post-backward folds the sum.

Ground truth: MemTracker over torch's PipelineStage and ScheduleDualPipeV running a rank's two stages of torchtitan's Llama
on fake ranks (tests/ground_truth/tiny_torchtitan_pp_zero_bubble.py, test_torch_memory_pipeline_dualpipe.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parcalc.core.memory_pipeline_interleaved import TORCH_SCHEDULES, Action, InterleavedHooks, lower
from parcalc.core.memory_pipeline_stage import StagePlan, _stage_backward
from parcalc.core.memory_pipeline_zero_bubble import VRankPlan, root_unit, walk_v_rank
from parcalc.core.memory_walk import StepShapes, Walk
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

DUALPIPE_SOURCES = {
    "order": (f"{TORCH_SCHEDULES} ScheduleDualPipeV._calculate_single_rank_operations: 2 (p - r - 1) chunk-0 forwards; r + 1 "
              "pairs F0 F1; p - r - 1 times I1, the oldest pending W, F1; m - 2p + r + 1 times OVERLAP_F_B (F0, B1) (on rank "
              "p - 1 the first as F0 then B1) and OVERLAP_F_B (F1, B0); p - r - 1 times B1, OVERLAP_F_B (F1, B0); r + 1 pairs "
              "B1 B0, split in I from the middle one on (rank r odd: from its B1, even: its B0); p - r - 1 times a pending W "
              "and B0 (or I0); the W left; m >= 2p ('DualPipeV requires at least as many microbatches as stages')"),
    "overlap": (f"{TORCH_SCHEDULES} _PipelineScheduleRuntime._step_microbatches: an OVERLAP_F_B action (no custom function "
                "registered, as torchtitan's pipeline_llm registers none) runs its sub_actions in turn, FORWARD then "
                "FULL_BACKWARD; _add_unshard_reshard and _add_reduce_grad count the sub-actions"),
    "full": ("pytorch/pytorch v2.13.0 torch/distributed/pipelining/stage.py backward_one_chunk(full_backward=True): fwd_cache "
             "popped, stage_backward (_backward.py: torch.autograd.backward, each input's .grad read then set to None), the "
             "input's gradient kept in bwd_cache until SEND_B's get_bwd_send_ops pops it, or on the V's turn "
             "get_local_bwd_output pops it and the stage before's set_local_bwd_input makes it that stage's received "
             "gradient (schedules.py [Note: V-schedule special case])"),
}


def compute_order(rank: int, pp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Rank `rank`'s forwards (F), whole backwards (B), input (I) and weight (W) backwards in ScheduleDualPipeV's order, as
    (F | B | I | W, stage, micro-batch), each OVERLAP_F_B as its forward then its backward (DUALPIPE_SOURCES['order'],
    ['overlap']); InputError where torch refuses the rank or the micro-batch count."""
    if not 0 <= rank < pp:
        raise InputError(f"pipeline rank {rank}: DualPipeV has ranks 0 to {pp - 1}")
    if micro_batches < 2 * pp:
        raise InputError(f"{micro_batches} micro-batches: ScheduleDualPipeV needs at least as many as its 2p = {2 * pp} stages")
    stage = (rank, 2 * pp - 1 - rank)
    order: list[tuple[str, int, int]] = []
    count: dict[tuple[str, int], int] = {}
    pending: list[tuple[int, int]] = []  # the I's whose W has not run, oldest first

    def act(kind: str, chunk: int) -> None:
        counter = "I" if kind in ("B", "I") else kind  # a whole backward counts as an I (and its W)
        j = count.get((counter, chunk), 0)
        order.append((kind, stage[chunk], j))
        count[counter, chunk] = j + 1
        if kind == "I":
            pending.append((stage[chunk], j))

    def weight() -> None:
        if pending:
            order.append(("W", *pending.pop(0)))

    for _ in range(2 * (pp - rank - 1)):
        act("F", 0)
    for _ in range(rank + 1):
        act("F", 0)
        act("F", 1)
    for _ in range(pp - rank - 1):
        act("I", 1)
        weight()
        act("F", 1)
    for _ in range(micro_batches - 2 * pp + rank + 1):
        act("F", 0)  # OVERLAP_F_B (F0, B1), on rank p - 1 the first not overlapped: the same order
        act("B", 1)
        act("F", 1)  # OVERLAP_F_B (F1, B0)
        act("B", 0)
    for _ in range(pp - rank - 1):
        act("B", 1)
        act("F", 1)  # OVERLAP_F_B (F1, B0)
        act("B", 0)
    split = False
    for i in range(rank + 1):
        split |= i == (rank + 1) // 2 and rank % 2 == 1
        act("I" if split else "B", 1)
        split |= i == (rank + 1) // 2 and rank % 2 == 0
        act("I" if split else "B", 0)
    for _ in range(pp - rank - 1):
        weight()
        act("I" if split else "B", 0)
    for _ in range(rank + 1):
        weight()
    return order


def rank_actions(rank: int, pp: int, micro_batches: int) -> list[Action]:
    """The compute order lowered by the runtime (memory_pipeline_interleaved.lower): UNSHARD / RESHARD, REDUCE_GRAD."""
    return lower(compute_order(rank, pp, micro_batches), micro_batches)


def _full_backward(walk: Walk, model: TransformerModel, x: StepShapes, stage: StagePlan, plans: dict[int, StagePlan],
                   policies: tuple[str, ...], j: int, embedding_tables: int, hooks: InterleavedHooks) -> None:  # fmt: skip
    """B of micro-batch j on one of the V's stages (DUALPIPE_SOURCES['full']): Schedule1F1B's stage backward, the gradients
    a W left unfolded added into in place, the input's gradient sent or handed to the stage before on the rank."""
    p, root = stage.mb(j), root_unit(stage)
    for key in walk.keys_under(stage.tag, ".grad"):  # a W's .grad, under the name the backward gives the same parameter's
        name = key.removeprefix(stage.tag)
        walk.rename(key, p + name.removeprefix(f"{root}."))
    _stage_backward(walk, model, x, stage, policies, j, embedding_tables, hooks, root=root)
    if stage.first:
        return
    before = plans.get(stage.index - 1)
    if before is None:  # SEND_B: get_bwd_send_ops pops it from bwd_cache into a P2POp the runtime does not keep
        walk.free(stage.key("sent_grad"))
        return
    walk.free(before.key(f"grad_recv{j}"))  # set_local_bwd_input: the received gradient of the stage before, in memory
    walk.rename(stage.key("sent_grad"), before.key(f"grad_recv{j}"), "the next stage's input gradient")


def walk_dualpipe_rank(walk: Walk, model: TransformerModel, x: StepShapes, plan: VRankPlan, policies: tuple[str, ...],
                       embedding_tables: int, hooks: InterleavedHooks, progress: Callable[[int, int], None] | None = None) -> None:  # fmt: skip
    """The rank's step under ScheduleDualPipeV: ZB-V's walk of the V (memory_pipeline_zero_bubble.walk_v_rank) over this
    schedule's actions, its whole backwards as _full_backward walks them; `progress(done, total)` before each action."""
    actions = rank_actions(plan.rank, plan.stages, plan.micro_batches)
    walk_v_rank(walk, model, x, plan, policies, embedding_tables, hooks, progress, actions, _full_backward)


def dualpipe_gaps(layout: Any, layers: int, recompute: Any, compiled: bool, precision: Any) -> list[str]:
    """What of a DualPipeV layout the walk does not follow: ZB-V's walk's gaps (the same stages, blocks and split backward)."""
    from parcalc.core.memory_pipeline_zero_bubble import zero_bubble_gaps

    return [gap.removesuffix(" under ZB-V") + " under DualPipeV" for gap in zero_bubble_gaps(layout, layers, recompute, compiled, precision)]
