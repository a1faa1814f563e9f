"""fit's search rows whose memory is a step walk's, as parcalc.core.memory has it for `fit` of the same layout: the FSDP2 /
torchtitan step's peak under fully_shard (parcalc.core.memory_fsdp), torchtitan's pipeline stages under 1F1B
(parcalc.core.memory_pipeline_stage) and its ranks under ScheduleInterleaved1F1B (parcalc.core.memory_pipeline_interleaved);
the other rows keep their textbook sum."""

from __future__ import annotations

import math

import numpy as np

from parcalc.core.choices import Schedule
from parcalc.core.fit import Cluster, Config, Training
from parcalc.core.layout import Layout
from parcalc.core.model import TransformerModel
from parcalc.core.search_columns import FLOOR, SCHEDULE_CODES
from parcalc.core.search_layouts import RECOMPUTES
from parcalc.core.training_setup import TrainingSetup


def fsdp_rows(memory: np.ndarray, model: TransformerModel, training: Training, profile: str, t: int, p: int, c: int, ep: int, d: int,
               b: np.ndarray, r: np.ndarray, z: np.ndarray, shard: np.ndarray, sp: np.ndarray, cp_comm: str = "p2p",
               basis: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """The rows whose layout the FSDP2 step walk follows (parcalc.core.memory_fsdp.walk_gaps, as parcalc.core.memory's
    _with_fsdp_peak decides): the floor of the allocator's replay over a run of the step plus the replay's reserve
    (training_setup.replayed_reserve), a screen that parcalc.core.search_replay replaces by the replay itself for the rows
    shown; the others keep their textbook sum. `basis` (MEMORY_BASES codes, one a row): FLOOR where a floor is given."""
    from parcalc.core.memory_fsdp import CP_ROTATES, PROFILES, fsdp_step_of, walk_gaps
    from parcalc.core.memory_step_peak import float8_all_gather_gaps
    from parcalc.core.search_walk_runs import floor_total
    from parcalc.core.training_setup import replayed_reserve

    other = tuple(what for what, on in (("--offload", training.offload_optimizer or training.offload_activations),
                                        ("--dropout", bool(model.dropout if training.dropout is None else training.dropout))) if on)  # fmt: skip
    out = memory.copy()
    reserve = replayed_reserve(training.reserve).value
    # the walk's own rule (walk_gaps) decides, once per distinct ZeRO stage, shard group and recomputation of this layout
    for zero, size, rec, seq in set(zip(z.tolist(), shard.tolist(), r.tolist(), sp.tolist(), strict=True)):
        layout = Layout(t, p, d, cp=c, cp_comm=cp_comm, ep=ep, zero=int(zero), shard_group=int(size), sequence_parallel=bool(seq))
        gaps = other + float8_all_gather_gaps(layout, training.float8_all_gather, training.compiled)  # as memory's fsdp_walk_gaps
        if walk_gaps(model, layout, training.precision, training.optimizer, RECOMPUTES[int(rec)], gaps, PROFILES[profile].model_code,
                     compiled=training.compiled):  # fmt: skip
            continue
        for row in np.flatnonzero((z == zero) & (shard == size) & (r == rec) & (sp == seq)):
            # FSDP over dp x cp ranks and the ring's rotation, as parcalc.core.memory_step_peak.fsdp_stage_step asks
            step = fsdp_step_of(profile, int(b[row]), training.seq_len, d * c, training.precision, training.optimizer, RECOMPUTES[int(rec)], t,
                                training.compiled, float8_all_gather=training.float8_all_gather, cp=c,
                                cp_rotate=CP_ROTATES.get(cp_comm, "allgather"), compiled_loss=training.compiled_loss)  # fmt: skip
            out[row] = floor_total(model, step) + reserve
            if basis is not None:
                basis[row] = FLOOR
    return out


def pipeline_stage_rows(memory: np.ndarray, model: TransformerModel, training: Training, cluster: Cluster, cols: dict[str, np.ndarray],
                        given: tuple[int | None, int | None], sizes: tuple[int, int, int, int, int], slots: tuple[int, int],
                        basis: np.ndarray | None = None, torchtitan_split: bool = False) -> np.ndarray:  # fmt: skip
    """The 1F1B, interleaved, ZB-V and DualPipeV rows of a pipelined layout whose ranks the FSDP2 step walk follows (torchtitan's
    PipelineStage, parcalc.core.memory_pipeline_stage, memory_pipeline_interleaved, memory_pipeline_zero_bubble and
    memory_pipeline_dualpipe, as parcalc.core.memory's
    _with_fsdp_peak decides):
    memory_of's fullest stage, once per distinct (ZeRO stage, shard group, recomputation, SP, micro-batch, micro-batches,
    schedule, chunks; `torchtitan_split`: each row's chunks split as torchtitan splits them, as its Config has them,
    parcalc.core.search_columns), so that a row and `fit` of its
    layout give the same memory; the other rows keep what they have. Each such key walks its stages (ms to tens of ms each):
    of the 1F1B rows only those that fit by the textbook sum are walked, since a 1F1B stage's walk keeps at least what the
    textbook does (the unsharded parameters and fp32 gradients of the stage all step) and a row that does not fit stays out
    either way (the textbook's reserve less its fragmentation allowance, which the replay's floor does not have); every
    interleaved row is walked, its ranks' walks keeping more or less than the textbook (with four or more chunks torch
    reshards a rank's stages mid-step; Llama 3 70B on 64 H100: 0.35 to 2.1 times it), and so is every ZB-V row (its split
    backward keeps far more: the textbook 0.25 to 0.73 of the walk for Llama 3 8B) and DualPipeV row (0.28 to 0.76, its
    rank holding one chunk micro-batch more in flight), up to the first rank over the capacity
    (_worst_stage). A key the walk does not follow (walk_gaps) gets memory_of's textbook sum, the row's own.
    `basis`: FLOOR where a row gets its stages' floors (fsdp_rows); a 1F1B row not walked, its textbook sum over the
    capacity, keeps TEXTBOOK. `split`: the Layout's fields that split the layers (first / last stage layers and the
    embedding / loss slots, or torchtitan's layout string and split_by)."""
    from parcalc.core.fit import training_setup_of
    from parcalc.core.memory_fsdp import walk_gaps
    from parcalc.core.training_setup import replayed_reserve

    other = tuple(what for what, on in (("--offload", training.offload_optimizer or training.offload_activations),
                                        ("--dropout", bool(model.dropout if training.dropout is None else training.dropout))) if on)  # fmt: skip
    t, p, d, c, ep = sizes
    one_f_one_b = (cols["schedule"] == SCHEDULE_CODES.index(Schedule.ONE_F_ONE_B)) & (cols["chunks"] == 1)
    # an interleaved rank's walk keeps more or less than the textbook sum (Llama 3 70B on 64 H100: 0.35 to 2.1 times it), so
    # every interleaved row is walked, not only those the textbook lets in (_worst_stage)
    interleaved = (cols["schedule"] == SCHEDULE_CODES.index(Schedule.INTERLEAVED)) & (cols["chunks"] > 1)
    # a ZB-V rank's walk keeps far more than the textbook sum (its split backward holds every saved tensor and output gradient
    # from I to W: for Llama 3 8B the textbook sum is 0.25 to 0.73 of the walk's, docs/memory-peak.md), so every ZB-V row is
    # walked too, and every DualPipeV row (the same V, a forward more in flight at its pairs: memory_pipeline_dualpipe)
    interleaved |= (cols["schedule"] == SCHEDULE_CODES.index(Schedule.ZB_V)) | (cols["schedule"] == SCHEDULE_CODES.index(Schedule.DUALPIPEV))
    rows = np.flatnonzero(interleaved | (one_f_one_b & (memory - (training.reserve - replayed_reserve(training.reserve).value) <= cluster.capacity)))
    if rows.size == 0:
        return memory
    out = memory.copy()
    names = ("zero", "shard_group", "recompute", "sequence_parallel", "schedule", "chunks", "micro_batch", "micro_batches")
    keys = zip(*(cols[k][rows].tolist() for k in names), strict=True)
    walked: dict[tuple[object, ...], tuple[float, bool]] = {}
    followed: dict[tuple[object, ...], bool] = {}  # (ZeRO stage, shard group, recomputation, SP, schedule, v) -> the walk follows it
    for row, key in zip(rows.tolist(), keys, strict=True):
        if key[:6] not in followed:
            zero, size, rec, seq, code, v = key[:6]
            plain = _row_layout(model, (t, p, d, c, ep), Layout(zero=int(zero), shard_group=int(size), sequence_parallel=bool(seq),
                                                                schedule=SCHEDULE_CODES[int(code)], chunks=int(v)), given, slots,
                                torchtitan_split)  # fmt: skip
            followed[key[:6]] = not walk_gaps(model, plain, training.precision, training.optimizer, RECOMPUTES[int(rec)], other,
                                              "torchtitan", pipeline=True, compiled=training.compiled)  # fmt: skip
        if not followed[key[:6]]:
            continue
        if key not in walked:
            zero, size, rec, seq, code, v, micro, _ = key
            layout = _row_layout(model, (t, p, d, c, ep), Layout(zero=int(zero), shard_group=int(size) if int(size) < d * c else None,
                                                                 sequence_parallel=bool(seq), schedule=SCHEDULE_CODES[int(code)],
                                                                 chunks=int(v), gpus_per_node=cluster.gpus_per_node), given, slots,
                                 torchtitan_split)  # fmt: skip
            setup = training_setup_of(Config(layout, int(micro), RECOMPUTES[int(rec)]), training, cluster)
            walked[key] = _worst_stage(model, layout, setup, cluster.capacity)
        out[row], floored = walked[key]
        if basis is not None and floored:
            basis[row] = FLOOR
    return out


def _row_layout(model: TransformerModel, sizes: tuple[int, int, int, int, int], row: Layout, given: tuple[int | None, int | None],
                slots: tuple[int, int], torchtitan_split: bool) -> Layout:  # fmt: skip
    """A row's Layout as its Config has it (parcalc.core.search_columns.config): the sizes, the row's own settings, the split
    given by the stage ends and slots, or torchtitan's split of the row's chunks."""
    t, p, d, c, ep = sizes
    layout = row._replace(tp=t, pp=p, dp=d, cp=c, ep=ep, first_stage_layers=given[0], last_stage_layers=given[1],
                          embedding_in_split=bool(slots[0]), loss_in_split=bool(slots[1]))  # fmt: skip
    if torchtitan_split and p > 1:
        from parcalc.core.pipeline_torchtitan import split_layout

        return split_layout(layout._replace(first_stage_layers=None, last_stage_layers=None), model.layers)
    return layout


def worst_stage_total(model: TransformerModel, layout: Layout, setup: TrainingSetup) -> float:
    """parcalc.core.fit.memory_of(...).worst.total.value of a dense model's pipelined layout with TrainingSetup.allocator_replayed
    False: each stage's floor of the allocator's replay taken from parcalc.core.search_walk_runs (the same bytes, from walks of
    fewer layers and micro-batches) plus the replay's reserve; the textbook total where the walk does not follow the layout."""
    return _worst_stage(model, layout, setup)[0]


def _worst_stage(model: TransformerModel, layout: Layout, setup: TrainingSetup, capacity: float = math.inf) -> tuple[float, bool]:
    """worst_stage_total, and whether it is the stages' (ranks') floors (False: the textbook total). An interleaved layout
    (ScheduleInterleaved1F1B, parcalc.core.memory_pipeline_interleaved): the greatest of its ranks' floors (walked_ranks; a
    ZB-V layout, ScheduleZBVZeroBubble, parcalc.core.memory_pipeline_zero_bubble, or DualPipeV, parcalc.core.memory_pipeline_dualpipe:
    every rank's),
    the walks stopping at the first rank over `capacity`, whose floor the row then carries: it does not fit by the replay
    (memory_of's total is at least that rank's replay, which reserves at least its floor: allocator.reserved_floor_of_sums),
    a lower bound still (search_walk_runs.floor_within)."""
    from dataclasses import replace

    from parcalc.core.memory import memory_breakdown, stage_layers
    from parcalc.core.memory_step_peak import fsdp_stage_step, fsdp_walk_gaps
    from parcalc.core.search_walk_runs import floor_total, floor_within
    from parcalc.core.training_setup import replayed_reserve

    # the textbook stages are those memory_breakdown replaces: step_memory changes a stage only for an MoE model's experts
    # (parcalc.core.memory's fully_shard chunks), which the torchtitan walk does not follow
    assert model.moe is None, "worst_stage_total is for dense models"
    textbook = replace(setup, step_memory="textbook")
    resolved = replace(textbook.for_model(model), step_memory=setup.step_memory)  # as memory_breakdown passes it on (for_model)
    if fsdp_walk_gaps(model, layout, resolved, pipeline=True):
        return memory_breakdown(model, layout, textbook).worst.total.value, False
    split = stage_layers(model, layout)
    reserve = replayed_reserve(setup.reserve).value
    if layout.schedule.v_shape:  # ZB-V, DualPipeV: every rank, its two stages' layers and its place in the V set its order
        ranks: tuple[int, ...] = tuple(range(layout.pp))
    elif layout.schedule is Schedule.INTERLEAVED:
        from parcalc.core.memory_pipeline_interleaved import rank_chunk_layers

        ranks = walked_ranks([tuple(hi - lo for lo, hi in rank_chunk_layers(layout, sum(split), r)) for r in range(layout.pp)])
    else:
        return max(floor_total(model, fsdp_stage_step(layout, resolved, s, split)) + reserve for s in walked_stages(split)), True
    most = 0.0
    for rank in ranks:
        most = max(most, floor_within(model, fsdp_stage_step(layout, resolved, rank, split), capacity - reserve) + reserve)
        if most > capacity:
            break
    return most, True


def walked_ranks(chunks: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The ranks of an interleaved pipeline (each rank's chunks' layers: `chunks`, chunk 0 first) whose walk can reserve the
    most, in the order _worst_stage walks them: rank 0 (the embedding, the longest warm-up), the last (the head), and a
    middle rank only where no earlier middle rank holds at least as many layers in each chunk. A later middle rank r walks
    the same kind of step (ScheduleInterleaved1F1B's order with 2 (p - 1 - r) warm-up forwards more than the last rank's:
    memory_pipeline_interleaved.compute_order) with a shorter warm-up and no more layers in any chunk, so no more is in
    flight at any point (tests/test_search_interleaved_screen.py holds the maximum equal to memory_of's over every rank).
    Torchtitan's 80 layers on PP 16 with two chunks a rank (3 + 3 on rank 1, 3 + 2 on ranks 2 to 14) walk ranks 0, 15 and 1."""
    p = len(chunks)
    ranks = [0, p - 1] if p > 1 else [0]
    for r in range(1, p - 1):
        if not any(all(a <= b for a, b in zip(chunks[r], chunks[q], strict=True)) for q in ranks[2:]):
            ranks.append(r)
    return tuple(ranks)


def walked_stages(split: tuple[int, ...]) -> tuple[int, ...]:
    """The stages of a dense 1F1B pipeline (each stage's layers: `split`) whose walk can reserve the most: the two ends (the
    embedding, the head), and a middle stage only where it holds more layers than every earlier middle one. A later middle
    stage walks the same kind of step (memory_pipeline_stage.walk_stage: its unsharded layers, their gradients, its
    micro-batches' activations and the receive buffers) with no more layers and a warm-up of no more forwards (w = min(m,
    p - s), StagePlan; search_walk_runs.same_walk), so it reserves no more. torchtitan's 80 layers on PP 16 (5, 6, 5 x 13, 4)
    walk stages 0, 1 and 15; tests/test_search_torchtitan_split.py holds the maximum equal to memory_of's over every stage."""
    stages, most = [0], 0
    for s in range(1, len(split) - 1):
        if split[s] > most:
            stages.append(s)
            most = split[s]
    return (*stages, len(split) - 1) if len(split) > 1 else (0,)
