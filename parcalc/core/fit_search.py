"""Every configuration of a training run on N GPUs, evaluated at once with numpy.

The space: tp dividing the heads, K/V heads and MLP width (within a node unless allowed), pp
dividing the layers or, when it does not, Megatron-LM's uneven splits (below), dp = N / (tp pp)
dividing the global batch, micro-batch b dividing the replica's batch, recomputation none /
selective / full, ZeRO 0-3 (1-3 only with dp > 1), sequence parallelism (only with tp > 1), and
the 1F1B or interleaved schedule with v chunks (v dividing the layers of every stage, m a
multiple of p); or, asked for (SearchSpace.schedule), one split-backward schedule on every pipelined
layout, its bubble simulated (parcalc.core.pipeline_step.step_bubble).

Uneven splits. When pp does not divide the L layers, the search tries the splits Megatron-LM
allows (n_first layers on the first stage, n_last on the last, the rest evenly over the middle:
parcalc.core.stages) whose fullest stage holds ceil(L / pp) layers, the fewest any split can give
(stages.balanced_splits; 126 layers on 16 stages: 6 / 8, 7 / 7 and 8 / 6 with 8 on each middle
stage). A layout none of whose splits is that balanced is rejected. Every such split is evaluated,
and each configuration keeps its best split: the one that fits with the lowest step time (ties:
less memory), or, when none fits, the one with the least memory. That is the split that balances
the stages' time, embedding and LM head included. `--first-stage-layers` / `--last-stage-layers`
with a pinned pp try that split only.

A --pipeline-layout string is kept as written (pipeline_layout.search_reason says which pp can run it, with v =
stages / pp chunks); the stages' parameters, MoE layers, pacing and MTP activations come from its own layer ranges.

Hybrid sharding. Every ZeRO-1/2/3 configuration is tried with each shard group S dividing dp x cp
from one node's share of the data-parallel group (GPUs per node / tp ranks) up to dp x cp
(SearchSpace.shard_groups_of; parcalc.core.sharding), ZeRO-0 once with S = dp x cp: column
`shard_group`. The data-parallel pieces are computed once per distinct S and gathered into arrays.

Whatever depends on the layer's shape comes from the scalar cores once per distinct value
(parcalc.core.activations for one sequence, parcalc.core.memory for a stage's parameters,
parcalc.core.flops per recomputation, parcalc.core.collectives for two message sizes, since an
alpha-beta time is affine in the size); the arithmetic that combines them, per configuration, runs
on arrays. The formulas are parcalc.core.fit's, term for term; tests/test_fit_search.py checks
random samples against parcalc.core.fit.estimate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from parcalc.core.activations import (
    ActivationConfig,
    embedding_activations,
    layer_activations,
    output_activations,
    recompute_working_set,
)
from parcalc.core.best_split import TIME_FIELDS, TIMED, best_splits
from parcalc.core.choices import Precision, Recompute, Schedule
from parcalc.core.fit import Cluster, Config, Training, group_spans_nodes, with_accumulation
from parcalc.core.layout import Layout
from parcalc.core.memory import (
    FSDP2_PROFILES,
    fp8_weight_cache,
    fsdp_pipeline_reduce_bytes,
    fullest_candidates,
    moe_layers_per_stage,
    stage_expert_parameters,
    stage_moe_layers,
    stage_parameters,
    weight_pass_share,
    zero3_working_set,
)
from parcalc.core.model import TransformerModel
from parcalc.core.model_states import state_bytes
from parcalc.core.pipeline_layout import parse_pipeline_layout
from parcalc.core.search_columns import (  # re-exported: the search's columns and result
    BASIS_FIELDS,
    CONFIG_FIELDS,
    COST_FIELDS,
    LAYOUT_FIELDS,
    PARALLEL_COST_FIELDS,
    PARALLEL_FIELDS,
    REPLAYED,
    SCHEDULE_CODES,
    SHARD_FIELDS,
    TEXTBOOK,
    Evaluated,
    SearchResult,
    searched_routing_limit,
)
from parcalc.core.search_layouts import (
    CP_MIN_SEQ_LEN,
    RECOMPUTES,
    SearchSpace,
    divisors,
    parallel_layouts,
    proposed_layouts,
    split_layers,
    splits,
)
from parcalc.core.search_step_peaks import fsdp_rows, pipeline_stage_rows
from parcalc.core.stages import stage_split
from parcalc.core.timing.step import (
    DataParallelPieces,
    FullestStage,
    LayerPieces,
    StagePieces,
    assemble_stage,
    combine,
    dp_exposed,
    embedding_sync_time,
    layer_pieces,
    offload_step_time,
    optimizer_step_time,
    pipeline_send_bytes,
)
from parcalc.core.timing.terms import STEP, STEP_TERMS
from parcalc.errors import InputError

# ---------------------------------------------------------------------------------------------
# What depends on the shape only, from the scalar cores, once per distinct value


def op_supported(model: TransformerModel) -> bool:
    """Whether op-level checkpointing is modelled for this model (parcalc.core.recompute.check_op_supported)."""
    return model.moe is None and model.mla is None


class _Shapes:
    """Memoised scalar quantities: activations per sequence, stage parameters, collective times."""

    def __init__(self, model: TransformerModel, training: Training, cluster: Cluster, cp_comm: str = "p2p",
                 moe: tuple[float, str, int | None, str, str] = (1.0, "alltoall", None, "none", "uniform")) -> None:  # fmt: skip
        from parcalc.core.flops import training_flops

        self.model, self.training, self.cluster, self.cp_comm, self.moe = model, training, cluster, cp_comm, moe
        self.hosts: dict[tuple[int, ...], tuple[float, float]] = {}  # (tp, cp, b, SP, recompute) -> host seconds of a forward, a backward
        self.per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=model)
        # fully_shard under torch's pipelining keeps each stage unsharded with its gradients (memory.pipelined_fsdp_working_set)
        self.pipeline_reduce = fsdp_pipeline_reduce_bytes(cluster.framework.step_memory)
        # with pp > 1 a framework's own pipeline engine may keep fp32 copies of the gradients (DeepSpeed's BF16_Optimizer)
        copies = bool(cluster.framework.at(2).accumulation_bytes(training.precision))
        self.per_pipelined = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=model,
                                         grad_copies=copies) if copies else self.per  # fmt: skip
        self.e = training.precision.activation_bytes
        self.op_supported = op_supported(model)
        counted = {r: training_flops(model, training.global_batch, training.seq_len, recompute=r.value, flash_attention=training.flash_attention,
                                     recompute_modules=training.recompute_modules if r is Recompute.SELECTIVE else None)
                   for r in RECOMPUTES if (r is not Recompute.OP or self.op_supported)
                   and ((model.linear_attention is None and model.mamba is None) or r in (Recompute.NONE, Recompute.FULL))}  # fmt: skip
        self.model_flops = counted[Recompute.NONE].model.value
        self.hardware_flops = np.array([counted[r].hardware.value if r in counted else math.nan for r in RECOMPUTES])
        self._activations: dict[tuple[int, bool, Recompute, int, str], tuple[float, ...]] = {}
        self._mixers: dict[tuple[int, bool, Recompute, int, str], float] = {}  # a gated-DeltaNet layer's mixer beyond attention's
        self._blocks: dict[tuple[int, bool, Recompute, int, str], tuple[float, float, float]] = {}  # a Mamba-2 hybrid's blocks
        self._block_stages: dict[tuple[int | None, ...], tuple[float, tuple[int, int, int]]] = {}  # its stages: parameters, blocks
        self._linear_layers: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}
        self._activation_tables: dict[tuple[int, int, str], np.ndarray] = {}
        self._dispatch_pairs: dict[tuple[int, int, int], np.ndarray] = {}
        self._mtp_stages: dict[tuple[int, str], int] = {}
        self.grid_terms: dict[tuple[object, ...], _GridTerms] = {}  # _layout_arrays' key -> what memory takes from the grid
        self._dp: dict[tuple[object, ...], tuple[DataParallelPieces, tuple[float, ...]]] = {}
        self._fullest: dict[tuple[int | str | None, ...], FullestStage] = {}  # (tp, pp, first, last, ep, layout) -> the fullest stage
        self._layers: dict[tuple[int | str, ...], tuple[LayerPieces, tuple[float, ...]]] = {}  # the pieces, and their fields in order
        self._sends: dict[tuple[int, ...], float] = {}
        self._states: dict[tuple[int | bool | str | None, ...], tuple[float, ...]] = {}
        self._state_keys: dict[tuple[int | str | None, ...], tuple[int | bool | str | None, ...]] = {}
        self.time_all = False  # SearchSpace.time_all
        # (tp, pp, dp, cp, ep, schedules) -> a layout's configurations but the split's columns, and the rejections it counted
        self.grids: dict[tuple[object, ...], tuple[dict[str, np.ndarray] | None, Counter]] = {}
        self.schedules: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, int], ...]] = {}  # (pp, split) -> _schedules
        self._filled: dict[tuple[int, int], np.ndarray] = {}
        self._moe_layers: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}
        self._candidates: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
        # the layout string of the pipelines evaluated now: SearchSpace.pipeline_layout, or the one the search proposes for a
        # (pp, v) (search_layouts.proposed_layouts); a stage's layers, MoE layers and MTP from its chunks. The caches that
        # read it key by it.
        self.pipeline_layout: str | None = None
        self.schedule: Schedule | None = None  # SearchSpace.schedule: the split-backward schedule of the pipelined layouts
        self.slots: tuple[int, int] = (0, 0)  # SearchSpace.slots
        self.torchtitan = False  # SearchSpace.torchtitan_split: every pipeline is torchtitan's own split (torchtitan_layout)
        self._torchtitan_texts: dict[tuple[int, int], str | None] = {}  # (pp, chunks) -> torchtitan's layout string (None: even)
        self._split_stages: dict[tuple[int | bool | str | None, ...], tuple[float, float]] = {}  # (tp, pp, stage, layout) -> split_stage
        self._layout_ranks: dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...], int]] = {}  # (layout, pp) -> layout_ranks

    def activations(self, tp: int, sp: bool, recompute: Recompute, cp: int = 1, cp_comm: str = "p2p") -> tuple[float, ...]:
        """Per sequence (b = 1): layer, embedding, output (both per micro-batch in flight), recompute
        working set, an MoE layer's (0 for a dense model), context parallelism's working set
        (parcalc.core.context.context_working_set; 0 at cp = 1), the MTP modules' (inside the output's too);
        each is b times its b = 1 value."""
        from parcalc.core.context import context_working_set
        from parcalc.core.hybrid_context import mixer_cp_reason

        key = (tp, sp, recompute, cp, cp_comm)
        if key not in self._activations:
            t = self.training
            gdn = self.model.linear_attention is not None  # a gated-DeltaNet hybrid: recomputation none or full; CP where
            # Megatron-Core's all-to-alls split its heads (parcalc.core.hybrid_context); a Mamba-2 hybrid likewise
            hybrid = gdn or self.model.mamba is not None
            if (sp and tp == 1) or (recompute is Recompute.OP and not self.op_supported) or (
                    hybrid and (mixer_cp_reason(self.model, tp, cp) is not None or recompute not in (Recompute.NONE, Recompute.FULL))):
                self._activations[key] = (math.nan,) * 7
            else:
                dropout = self.model.dropout if t.dropout is None else t.dropout  # None: the model's own
                config = ActivationConfig(1, t.seq_len, tp, sp, recompute, t.flash_attention, dropout, self.e,
                                          gemm_input_bytes=t.precision.gemm_input_bytes, cp=cp,
                                          recompute_modules=t.recompute_modules if recompute is Recompute.SELECTIVE else None)  # fmt: skip
                vocab = self.model.vocab > 0
                working = recompute_working_set(self.model, config)
                if gdn:  # with full recomputation the largest layer lives again: a gated-DeltaNet one
                    from parcalc.core.linear_attention_memory import linear_recompute_working_set, mixer_delta

                    working = linear_recompute_working_set(self.model, config, working)
                    self._mixers[key] = mixer_delta(self.model, config)  # beyond attention's, per gated-DeltaNet layer (on_stage)
                context = context_working_set(self.model, 1, t.seq_len, Layout(tp, cp=cp, cp_comm=cp_comm), self.e)
                if self.model.mamba is not None:  # one block a layer, each kind its own (parcalc.core.mamba_memory, as memory counts it)
                    self._activations[key] = self._mamba_activations(key, config, context.value if context is not None else 0.0)
                    return self._activations[key]
                self._activations[key] = (
                    layer_activations(self.model, config).per_layer.value,
                    embedding_activations(self.model, config, 1.0).value if vocab else 0.0,
                    (output_activations(self.model, config, 1.0).value if vocab else 0.0) + mtp_output(self.model, config),
                    working.value if working is not None else 0.0,
                    layer_activations(self.model, config, moe_layer=True).per_layer.value if self.model.moe is not None else 0.0,
                    context.value if context is not None else 0.0,
                    mtp_output(self.model, config),  # its share of the output's, apart: a --pipeline-layout may place it elsewhere
                )
        return self._activations[key]

    def _mamba_activations(self, key: tuple[int, bool, Recompute, int, str], config: ActivationConfig, context: float) -> tuple[float, ...]:
        """activations() of a Mamba-2 hybrid: its layers' are its blocks' (block_table), so 0 in the layer's place; the
        embedding's, the output's, the recomputation working set (the largest block's) and CP's as memory has them."""
        from parcalc.core.mamba import BLOCKS
        from parcalc.core.mamba_memory import block_activation_bytes, mamba_recompute_working_set

        vocab = self.model.vocab > 0
        self._blocks[key] = tuple(block_activation_bytes(self.model, config, block) for block in BLOCKS)  # type: ignore[assignment]
        working = mamba_recompute_working_set(self.model, config)
        return (0.0, embedding_activations(self.model, config, 1.0).value if vocab else 0.0,
                output_activations(self.model, config, 1.0).value if vocab else 0.0, working.value if working is not None else 0.0,
                0.0, context, 0.0)  # fmt: skip

    def block_table(self, tp: int, cp: int, cp_comm: str) -> np.ndarray:
        """A Mamba-2 hybrid's Mamba-2, attention and MLP blocks' activations per sequence, as one array [block, sp,
        recompute] (parcalc.core.mamba_memory.block_activation_bytes; nan where activations() is)."""
        return np.moveaxis(np.array([[self._blocks.get((tp, bool(s), rec, cp, cp_comm), (math.nan,) * 3)
                                      if not math.isnan(self.activations(tp, bool(s), rec, cp, cp_comm)[0]) else (math.nan,) * 3
                                      for rec in RECOMPUTES] for s in (False, True)]), 2, 0)  # fmt: skip

    def block_stage(self, tp: int, pp: int, first: int | None, last: int | None, chunks: int, stage: int) -> tuple[float, tuple[int, int, int]]:
        """A Mamba-2 hybrid's stage on one GPU: its parameters (parcalc.core.memory.stage_parameters) and its Mamba-2,
        attention and MLP blocks (parcalc.core.mamba_memory.stage_block_counts), with interleaved chunks as memory places them."""
        key = (tp, pp, first, last, chunks, stage)
        if key not in self._block_stages:
            from parcalc.core.mamba import BLOCKS
            from parcalc.core.mamba_memory import stage_block_counts

            schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
            par = Layout(tp, pp, 1, first_stage_layers=first, last_stage_layers=last, schedule=schedule, chunks=chunks)
            counts = stage_block_counts(self.model, par, stage)
            self._block_stages[key] = stage_parameters(self.model, par, stage).value, tuple(counts[k] for k in BLOCKS)  # type: ignore[assignment]
        return self._block_stages[key]

    def mixer_table(self, tp: int, cp: int, cp_comm: str) -> np.ndarray:
        """A gated-DeltaNet layer's activations beyond a softmax-attention layer's, per sequence, as one array [sp, recompute]
        (parcalc.core.linear_attention_memory.mixer_delta; nan where activations() is)."""
        return np.array([[self._mixers.get((tp, bool(s), rec, cp, cp_comm), math.nan) if not math.isnan(self.activations(tp, bool(s), rec, cp, cp_comm)[0])
                          else math.nan for rec in RECOMPUTES] for s in (False, True)])  # fmt: skip

    def linear_layers(self, split: tuple[int, ...], chunks: int) -> tuple[int, ...]:
        """parcalc.core.linear_attention_memory.linear_layers_per_stage, kept by (split, chunks)."""
        key = (split, chunks)
        if key not in self._linear_layers:
            from parcalc.core.linear_attention_memory import linear_layers_per_stage

            self._linear_layers[key] = linear_layers_per_stage(self.model, split, chunks)
        return self._linear_layers[key]

    def moe_layers(self, split: tuple[int, ...], chunks: int) -> tuple[int, ...]:
        """parcalc.core.memory.moe_layers_per_stage, kept by (split, chunks) (its own cache hashes the model each time)."""
        key = (split, chunks)
        if key not in self._moe_layers:
            self._moe_layers[key] = moe_layers_per_stage(self.model, split, chunks)
        return self._moe_layers[key]

    def candidates(self, split: tuple[int, ...], chunk_values: tuple[int, ...]) -> list[int]:
        """The stages whose memory can be the largest for any of these chunk counts (parcalc.core.memory.fullest_candidates)."""
        key = (split, chunk_values)
        if key not in self._candidates and self.model.linear_attention is not None:  # stages differ by their gated-DeltaNet layers
            self._candidates[key] = list(range(len(split)))
        if key not in self._candidates:
            self._candidates[key] = sorted(set().union(*(fullest_candidates(self.model, split, k) for k in chunk_values)))
        return self._candidates[key]

    def filled(self, n: int, value: int) -> np.ndarray:
        """np.full(n, value), read-only and shared (a split's columns of its first and last stage's layers)."""
        key = (n, value)
        if key not in self._filled:
            self._filled[key] = np.full(n, value)
            self._filled[key].flags.writeable = False
        return self._filled[key]

    def head_stage(self, p: int) -> int:
        """The stage that holds the final norm, the LM head and the loss: the last, or rank 0 in a V (ZB-V, DualPipeV: rank 0
        runs the first virtual stage and the last; parcalc.core.memory.head_stage)."""
        return 0 if self.schedule is not None and self.schedule.v_shape and p > 1 else p - 1

    def v_schedule(self, p: int) -> dict[str, Any]:
        """The Layout's schedule where it places the head (a V: on rank 0), for the scalar cores' stages; {} otherwise."""
        return {"schedule": self.schedule} if self.schedule is not None and self.schedule.v_shape and p > 1 else {}

    def mtp_stage(self, p: int) -> int:
        """The MTP modules' stage: the head's (parcalc.core.memory.MTP_PLACEMENT) or where the --pipeline-layout's m is."""
        if self.pipeline_layout is not None and p > 1 and self.model.mtp_layers:
            key = (p, self.pipeline_layout)
            if key not in self._mtp_stages:
                self._mtp_stages[key] = parse_pipeline_layout(self.pipeline_layout, p, self.model.layers, self.model.mtp_layers).mtp_rank() or 0
            return self._mtp_stages[key]
        return self.head_stage(p)

    def activation_table(self, tp: int, cp: int, cp_comm: str) -> np.ndarray:
        """activations() of every (SP, recomputation) as one array [what, sp, recompute] (read-only)."""
        key = (tp, cp, cp_comm)
        if key not in self._activation_tables:
            table = np.array([[self.activations(tp, bool(s), rec, cp, cp_comm) for rec in RECOMPUTES] for s in (False, True)])
            table = np.ascontiguousarray(np.moveaxis(table, 2, 0))
            table.flags.writeable = False
            self._activation_tables[key] = table
        return self._activation_tables[key]

    def dispatch_pair(self, tp: int, cp: int, ep: int) -> np.ndarray:
        """dispatch() without and with sequence parallelism (read-only)."""
        key = (tp, cp, ep)
        if key not in self._dispatch_pairs:
            pair = np.array([self.dispatch(tp, bool(x), cp, ep) for x in (0, 1)])
            pair.flags.writeable = False
            self._dispatch_pairs[key] = pair
        return self._dispatch_pairs[key]

    def moe_states(self, tp: int, pp: int, cp: int, dp: int, ep: int, first: int | None, last: int | None,
                   chunks: int, stage: int, gathered: bool = True) -> tuple[float, ...]:  # fmt: skip
        """One stage of an MoE model on one GPU: (parameters, routed-expert parameters, ZeRO-3
        gathered buffers, MoE layers), from parcalc.core.memory with the configuration's ep and
        interleaved chunks. None of them depends on dp or cp (expert_layout only checks that ep x etp
        divides tp x cp x dp, which the layout passed), so they are not in the key. gathered=False: the
        ZeRO-3 buffers are not wanted (no ZeRO-3 row), nan in their place unless already known."""
        par_key = (tp, pp, ep, first, last, chunks, stage, self.pipeline_layout)
        key = self._state_keys.get(par_key)
        if key is None:
            if self.pipeline_layout is not None and pp > 1:  # the layout's own layer ranges (parcalc.core.memory)
                key = self.layout_stage_key(tp, ep, pp, stage)
            elif self.torchtitan and pp > 1:  # torchtitan's layout of pp x chunks virtual stages (one per pp and chunks)
                key = (tp, ep, -2, pp, chunks, stage)
            else:
                # the values depend on the stage only through its layers, its MoE layers and which end of
                # the pipeline it holds (parcalc.core.memory.stage_parameters, _stage_ends, root_unit): most
                # splits and pipeline depths share them
                split = stage_split(self.model.layers, pp, first, last)
                key = (tp, ep, split[stage], self.moe_layers(split, chunks)[stage], stage == 0, stage == self.head_stage(pp), pp > 1)
            self._state_keys[par_key] = key
        states = self._states.get(key)
        if states is None or (gathered and math.isnan(states[2])):
            schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
            if self.pipeline_layout is not None and pp > 1:
                par = Layout(tp, pp, dp, schedule=schedule, chunks=chunks, cp=cp, ep=ep, pipeline_layout=self.pipeline_layout)
            elif self.torchtitan and pp > 1:
                par = self.torchtitan_layout(tp, pp, dp, chunks, cp=cp, ep=ep)
            else:
                par = Layout(tp, pp, dp, schedule=schedule, chunks=chunks, first_stage_layers=first, last_stage_layers=last, cp=cp, ep=ep)
                par = par._replace(**self.v_schedule(pp))  # a V's head on rank 0
            if states is None:
                states = (stage_parameters(self.model, par, stage).value, float(stage_expert_parameters(self.model, par, stage)), math.nan,
                          float(stage_moe_layers(self.model, par, stage)))  # fmt: skip
            if gathered:
                states = (states[0], states[1], zero3_working_set(self.model, par, self.per, stage, self.pipeline_reduce).value, states[3])
            self._states[key] = states
        return states

    def layout_ranks(self, pp: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """The layout string evaluated now over pp ranks: each rank's transformer layers, its MoE layers (its chunks' own
        ranges, parcalc.core.memory.stage_moe_layers) and the rank of its MTP layers (the head's where it has none)."""
        assert self.pipeline_layout is not None
        key = (self.pipeline_layout, pp)
        if key not in self._layout_ranks:
            from parcalc.core.expert_parallel import moe_layers_on

            split = parse_pipeline_layout(self.pipeline_layout, pp, self.model.layers, self.model.mtp_layers)
            moe = tuple(moe_layers_on(self.model, ranges) for ranges in split.stage_ranges()) if self.model.moe is not None else (0,) * pp
            mtp = split.mtp_rank()
            self._layout_ranks[key] = split.stage_layers(), moe, pp - 1 if mtp is None else mtp
        return self._layout_ranks[key]

    def layout_candidates(self, pp: int) -> list[int]:
        """The stages of the layout string evaluated now whose memory can be the largest: every one where its MTP layers are
        not on the head's rank, else as parcalc.core.memory.fullest_candidates picks them, the first and the last and of the
        middle ranks the earliest of each (layers, MoE layers) (the same parameters, layout_stage_key, and no fewer
        micro-batches in flight: an earlier rank's warm-up is longer, interleaved or not)."""
        split, moe, mtp = self.layout_ranks(pp)
        if mtp != pp - 1:
            return list(range(pp))
        stages, seen = [0], set()
        for s in range(1, pp - 1):
            if (split[s], moe[s]) not in seen:
                seen.add((split[s], moe[s]))
                stages.append(s)
        return [*stages, pp - 1]

    def layout_stage_key(self, tp: int, ep: int, pp: int, stage: int) -> tuple[int | bool | str | None, ...]:
        """The key of a stage of the layout string evaluated now in _states: a stage's parameters, routed experts, ZeRO-3
        buffers and MoE layers depend on it through its layers, its MoE layers and which of the embedding, the head and the
        MTP layers it holds (parcalc.core.memory.stage_parameters, _stage_ends, mtp_stage, root_unit); with the MTP layers on
        the head's rank (every layout the search proposes) that is the key of a split's stage (moe_states), shared with
        the splits and the other layouts; elsewhere the layout's own (-1: no layer count)."""
        split, moe, mtp = self.layout_ranks(pp)
        if mtp != pp - 1:
            return (tp, ep, -1, pp, stage, self.pipeline_layout)
        return (tp, ep, split[stage], moe[stage], stage == 0, stage == pp - 1, True)

    def fp8_layer(self, tp: int, ep: int = 1) -> tuple[float, float]:
        """Transformer Engine's FP8 weight copies of one dense layer and of one MoE layer (its experts
        / ep, etp = tp) on one GPU (parcalc.core.memory.fp8_weight_cache; 0 unless --precision fp8)."""
        if not self.training.precision.quantised:
            return 0.0, 0.0
        fp4 = self.training.precision is Precision.FP4  # NVFP4's copies (parcalc.core.memory.NVFP4_WEIGHT_BYTES)
        dense = fp8_weight_cache(self.model, Layout(tp), 1, fp4=fp4).value
        return dense, (fp8_weight_cache(self.model, Layout(tp, ep=ep, etp=tp), 1, 1, fp4=fp4).value if self.model.moe is not None else dense)

    def dispatch(self, tp: int, sp: bool, cp: int, ep: int) -> float:
        """An MoE layer's token-exchange buffers for one sequence (b = 1) on one GPU, etp = tp
        (parcalc.core.expert_parallel.moe_dispatch_working_set; 0 without expert parallelism)."""
        from parcalc.core.expert_parallel import moe_dispatch_working_set

        if self.model.moe is None or ep == 1 or (sp and tp == 1):
            return 0.0
        found = moe_dispatch_working_set(self.model, 1, self.training.seq_len, Layout(tp, cp=cp, sequence_parallel=sp, ep=ep, etp=tp), self.e,
                                         self.moe[0])  # fmt: skip
        return found.value if found is not None else 0.0

    def pipeline(self, tp: int, pp: int, dp: int, first: int | None, last: int | None, **more: Any) -> Layout:
        """The Layout of a configuration's pipeline as the scalar cores take it: the split (first, last), or the search's
        --pipeline-layout itself (its stages' own layers, MoE layers and MTP placement: parcalc.core.timing.step.paced_stages)."""
        if self.pipeline_layout is not None and pp > 1:
            return Layout(tp, pp, dp, pipeline_layout=self.pipeline_layout, **more)
        if self.torchtitan and pp > 1:  # torchtitan's own split, as fit's Config has it (Evaluated.config)
            return self.torchtitan_layout(tp, pp, dp, 1, **more)
        return Layout(tp, pp, dp, first_stage_layers=first, last_stage_layers=last, **{**self.v_schedule(pp), **more})

    def torchtitan_layout(self, tp: int, pp: int, dp: int, chunks: int, **more: Any) -> Layout:
        """The Layout of torchtitan's own split of pp x chunks virtual stages (2 pp in a V), as fit takes it
        (parcalc.core.pipeline_torchtitan.split_layout: its layout string where the stages differ, split_by 'torchtitan'):
        each rank's layers, whatever they are (80 layers on PP 8: 10 + 11 + 5 x 10 + 9), and the rank of the head."""
        from parcalc.core.pipeline_torchtitan import SPLIT, split_layout

        schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
        if self.schedule is not None and self.schedule.v_shape:  # its 2p stages in the V, whatever the chunks
            schedule, chunks = self.schedule, 1
        key = (pp, chunks)
        if key not in self._torchtitan_texts:
            self._torchtitan_texts[key] = split_layout(Layout(tp, pp, dp, schedule=schedule, chunks=chunks), self.model.layers).pipeline_layout
        return Layout(tp, pp, dp, schedule=schedule, chunks=chunks, pipeline_layout=self._torchtitan_texts[key], split_by=SPLIT, **more)

    def split_stage(self, tp: int, pp: int, stage: int) -> tuple[float, float]:
        """A dense model's stage under torchtitan's split or the layout string evaluated now, on one GPU: its parameters
        (parcalc.core.memory.stage_parameters) and ZeRO-3's gathered buffers (zero3_working_set, root unit included), from
        its own layers and ends (torchtitan_layout; the layout's chunks)."""
        key: tuple[int | bool | str | None, ...] = (tp, pp, stage, self.pipeline_layout)
        if self.pipeline_layout is not None:
            key = ("layout", *self.layout_stage_key(tp, 1, pp, stage))
        if key not in self._split_stages:
            if self.pipeline_layout is not None:
                from parcalc.core.pipeline_layout import virtual_stage_count

                chunks = virtual_stage_count(self.pipeline_layout) // pp
                schedule = Schedule.INTERLEAVED if chunks > 1 else Schedule.ONE_F_ONE_B
                par = Layout(tp, pp, 1, schedule=schedule, chunks=chunks, pipeline_layout=self.pipeline_layout)
            else:
                par = self.torchtitan_layout(tp, pp, 1, 1)
            self._split_stages[key] = (stage_parameters(self.model, par, stage).value,
                                       zero3_working_set(self.model, par, self.per, stage, self.pipeline_reduce).value)  # fmt: skip
        return self._split_stages[key]

    def stage_params(self, tp: int, pp: int, first: int | None, last: int | None) -> tuple[float, float, float]:
        """Parameters on one GPU of the first, the second (the first middle one; with even stages
        not needed, nan) and the last stage."""
        par = Layout(tp, pp, 1, first_stage_layers=first, last_stage_layers=last, **self.v_schedule(pp))  # a V: the head on stage 0
        second = stage_parameters(self.model, par, 1).value if pp > 2 and (first is not None or last is not None) else math.nan
        return stage_parameters(self.model, par, 0).value, second, stage_parameters(self.model, par, pp - 1).value

    def gathered(self, tp: int, pp: int, first: int | None, last: int | None) -> tuple[float, float, float]:
        """ZeRO-3's gathered buffers on one GPU of the first, the second (nan when not needed, as in
        stage_params) and the last stage: parcalc.core.memory.zero3_working_set, root unit included."""
        par = Layout(tp, pp, 1, first_stage_layers=first, last_stage_layers=last, **self.v_schedule(pp))
        second = zero3_working_set(self.model, par, self.per, 1, self.pipeline_reduce).value if pp > 2 and (first is not None or last is not None) else math.nan
        first_stage = zero3_working_set(self.model, par, self.per, 0, self.pipeline_reduce).value
        return first_stage, second, zero3_working_set(self.model, par, self.per, pp - 1, self.pipeline_reduce).value

    def dp(self, tp: int, pp: int, dp: int, first: int | None, last: int | None, shard_group: int | None = None, ep: int = 1) -> DataParallelPieces:
        """parcalc.core.timing.step.dp_pieces, once per distinct fullest stage (most splits of a
        layout share it)."""
        return self._dp_entry(tp, pp, dp, first, last, shard_group, ep)[0]

    def _dp_entry(self, tp: int, pp: int, dp: int, first: int | None, last: int | None, shard_group: int | None,
                  ep: int) -> tuple[DataParallelPieces, tuple[float, ...]]:  # fmt: skip
        """dp()'s pieces, and their float fields in _DP_ARRAY_FIELDS order."""
        from parcalc.core.timing.step import dp_pieces_of, float8_gathered

        stage = self.fullest_stage(tp, pp, dp, first, last, ep)
        key = (tp, dp, shard_group, ep, stage, pp > 1 and self.cluster.framework.at(pp) is not self.cluster.framework)
        if key not in self._dp:
            layout = self.pipeline(tp, pp, dp, first, last, ep=ep)  # dp: the dp x cp ranks
            found = dp_pieces_of(stage, layout, self.training, self.cluster, shard_group=shard_group,
                                 float8=float8_gathered(self.model, tp, self.training))  # fmt: skip
            self._dp[key] = found, tuple(getattr(found, name) for name in _DP_ARRAY_FIELDS)
        return self._dp[key]

    def fullest_stage(self, tp: int, pp: int, dp: int, first: int | None, last: int | None, ep: int) -> FullestStage:
        """parcalc.core.timing.step._fullest_stage of the split (first, last) or the layout string evaluated now, kept (it
        does not depend on dp): an MoE model's from moe_states (_fullest_moe_stage)."""
        from parcalc.core.timing.step import _fullest_stage

        key = (tp, pp, first, last, ep, self.pipeline_layout)
        stage = self._fullest.get(key)
        if stage is None:
            layout = self.pipeline(tp, pp, dp, first, last, ep=ep)
            stage = self._fullest[key] = self._fullest_moe_stage(layout) if self.model.moe is not None else _fullest_stage(self.model, layout)
        return stage

    def _fullest_moe_stage(self, layout: Layout) -> FullestStage:
        """parcalc.core.timing.step._fullest_stage of an MoE model's split (1F1B) or layout string: the same stages (a
        layout's: every one) and the same functions, their parameters taken from moe_states (kept by the stage's layers, MoE
        layers and ends, so that the splits, layouts and pipeline depths that share a stage share them)."""
        from parcalc.core.memory import _stage_ends, stage_layers

        t, p, first, last = layout.tp, layout.pp, layout.first_stage_layers, layout.last_stage_layers
        split = stage_layers(self.model, layout)
        chunks = 1
        if layout.pipeline_layout is not None:
            from parcalc.core.pipeline_layout import virtual_stage_count

            chunks = virtual_stage_count(layout.pipeline_layout) // p
        best: FullestStage | None = None
        for s in range(p) if layout.pipeline_layout is not None else fullest_candidates(self.model, split):  # the first of equals, as
            params, experts, _, _ = self.moe_states(t, p, 1, layout.dp, layout.ep, first, last, chunks, s, gathered=False)  # _fullest_stage_of
            if best is None or float(params) > best.params:
                best = FullestStage(float(params), float(experts), float(sum(_stage_ends(self.model, layout, s))), split[s])
        assert best is not None
        return best

    def dp_arrays(self, tp: int, pp: int, ranks: int, first: int | None, last: int | None, sizes: np.ndarray, ep: int = 1, *,
                  distinct: tuple[np.ndarray, np.ndarray] | None = None) -> DataParallelPieces:  # fmt: skip
        """dp() for every configuration's shard group (an array of S; S = ranks: full sharding), as
        one DataParallelPieces whose fields are arrays (scalars when every S is the same). distinct: np.unique(sizes,
        return_inverse=True), or the distinct sizes of a larger set and the inverse of these (dp() only for those present)."""
        unique, inverse = distinct if distinct is not None else np.unique(sizes, return_inverse=True)
        present = _present(unique.size, inverse)
        if len(present) == 1:
            size = int(unique[present[0]])
            return self.dp(tp, pp, ranks, first, last, None if size >= ranks else size, ep)
        rows = {}
        for i in present:
            size = int(unique[i])
            pieces, rows[i] = self._dp_entry(tp, pp, ranks, first, last, None if size >= ranks else size, ep)
            layers = pieces.layers  # the same stage's for every size
        # one row per distinct size (an absent size's: any, never taken), one column per float field, then each configuration's
        table = np.array([rows.get(i, rows[present[0]]) for i in range(unique.size)], dtype=float).T.take(inverse, axis=1)
        return DataParallelPieces(**dict(zip(_DP_ARRAY_FIELDS, table, strict=True)), layers=layers)  # numpy columns in the float fields: the scalar formulas run on arrays

    def stage_arrays(self, tp: int, pp: int, dp: int, split: tuple[int | None, int | None], b: np.ndarray, sp: np.ndarray,
                     r: np.ndarray, cp: int = 1, cp_comm: str = "p2p", ep: int = 1, *,
                     distinct: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[StagePieces, np.ndarray, np.ndarray]:  # fmt: skip
        """parcalc.core.timing.step.stage_pieces for every configuration: the per-layer pieces once per
        distinct (b, SP, r) (parcalc.core.timing.step.layer_pieces), the stage assembled on arrays by
        the same code as the scalar path (parcalc.core.timing.step.assemble_stage). distinct: the distinct keys
        b 8 + SP 4 + r of a larger set of rows and the inverse of these rows (layer_pieces only for those present)."""
        from parcalc.core.choices import Collective
        from parcalc.core.timing.network import collective_time, placement

        unique, inverse = distinct if distinct is not None else np.unique(b * 8 + sp.astype(int) * 4 + r, return_inverse=True)
        present = _present(unique.size, inverse)
        if len(present) < unique.size:  # only the keys these rows have, each row's index among them
            remap = np.zeros(unique.size, dtype=np.intp)
            remap[present] = np.arange(len(present))
            unique, inverse = unique[present], remap[inverse]
        first, last = split
        layers, sends = [], []
        for key in unique.tolist():
            size, rest = divmod(key, 8)
            layer_key = (tp, size, rest, cp, cp_comm, ep, pp > 1 and self.schedule is Schedule.DUALPIPEV)
            if layer_key not in self._layers:
                experts = None
                if self.model.moe is not None:
                    from parcalc.core.timing.moe import ExpertShard

                    imbalance, dispatcher, limit, overlap, routing = self.moe  # etp = tp in the search
                    if pp > 1 and self.schedule is Schedule.DUALPIPEV and overlap == "none":  # its pairs overlap (Config.experts)
                        overlap = "1f1b"
                    experts = ExpertShard(ep, tp, imbalance, dispatcher, searched_routing_limit(limit, ep, tp, self.cluster.gpus_per_node),
                                          overlap, routing)  # fmt: skip
                shard = Layout(tp, cp=cp, cp_comm=cp_comm, sequence_parallel=bool(rest // 4))
                found = layer_pieces(self.model, shard, size, RECOMPUTES[rest % 4], self.training, self.cluster, experts=experts)
                self._layers[layer_key] = found, astuple_shallow(found)
            piece, row = self._layers[layer_key]
            layers.append(row)
            sequence_parallel = bool(rest // 4)
            send_key = (tp, cp, dp, size, sequence_parallel)
            if pp > 1 and send_key not in self._sends:  # stage_pieces' pipeline send (b s h / t where split: pipeline_send_bytes)
                group = placement(2, tp * cp * dp, self.cluster.gpus_per_node)
                sent = pipeline_send_bytes(piece.activation, Layout(tp, sequence_parallel=sequence_parallel), self.cluster.framework)
                self._sends[send_key] = collective_time(Collective.POINT_TO_POINT, sent, group, self.cluster.fabric).time
            sends.append(self._sends[send_key] if pp > 1 else 0.0)
        # one row per distinct key, one column per field, then each configuration's row: the fields as columns of one array
        table = np.array(layers, dtype=float).T.take(inverse, axis=1)
        lp = LayerPieces(*table)  # numpy columns, as above
        pipeline = self.pipeline(tp, pp, dp, first, last)  # the split as the timing takes it (no slots)
        stage = assemble_stage(self.model, pipeline, lp, np.array(sends, dtype=float)[inverse], self.cluster.overlap_tp)
        sync = embedding_sync_time(self.model, tp, pp, cp * dp, self.schedule, self.training, self.cluster)
        if sync:  # the tied embedding's gradient all-reduce between the pipeline's ends (stage_pieces)
            stage = replace(stage, embedding_sync=sync)
        if self.model.moe is not None:  # ZeRO-3's prefetch windows: the mean layer of the slowest stage (stage_pieces)
            per = np.maximum(stage.layers, 1)
            return stage, stage.forward / per, (stage.backward + stage.recompute) / per
        return stage, lp.f_dense, lp.b_dense + lp.r_dense  # type: ignore[return-value]  # lp's fields are arrays here


_DP_ARRAY_FIELDS = tuple(name for name in DataParallelPieces.__dataclass_fields__ if name != "layers")  # dp_arrays' columns


def _present(size: int, inverse: np.ndarray) -> list[int]:
    """The indices in range(size) that `inverse` takes, in order."""
    present = np.zeros(size, dtype=bool)
    present[inverse] = True
    return np.flatnonzero(present).tolist()


def astuple_shallow(pieces: Any) -> tuple[Any, ...]:
    """A dataclass's fields in order, as they are (dataclasses.astuple copies them deeply)."""
    return tuple(getattr(pieces, name) for name in pieces.__dataclass_fields__)


def mtp_output(model: Any, config: ActivationConfig) -> float:
    """The MTP modules' activations per micro-batch on the last stage (parcalc.core.activations.mtp_activations; 0
    without MTP), counted with the output layer's, which the search multiplies by the last stage's micro-batches."""
    from parcalc.core.activations import mtp_activations

    found = mtp_activations(model, config, 1.0)
    return found.value if found is not None else 0.0


# ---------------------------------------------------------------------------------------------
# One layout's configurations, as arrays


def _layout_arrays(shapes: _Shapes, t: int, p: int, d: int, split: tuple[int, ...], space: SearchSpace,
                   rejected: Counter, c: int = 1, ep: int = 1, proposed: tuple[int, int] | None = None,
                   ) -> tuple[dict[str, np.ndarray], tuple[object, ...]] | None:  # fmt: skip
    """One layout's configurations with the layers per stage `split` (every stage's, first to last), and the key of
    their grid. The split changes only the schedules (the chunks v must divide every stage's layers) and the columns
    of the first and last stage's layers: the rest is made once per layout and schedules (_Shapes.grids, the key)
    and shared, read-only. proposed: (v, its index among the search's proposed layouts) of a layout string the search
    proposes (search_layouts.proposed_layouts): its chunks v alone, and the column pipeline_layout its index."""
    chunks = proposed[0] if proposed is not None else 1
    if chunks > 1:  # one grid for every v the search proposes a layout for: the rows of interleaved with any v (the same m)
        schedules: tuple[tuple[int, int], ...] = ((1, 2),)  # its chunks column is this layout's v (below)
    elif proposed is not None:  # v = 1: 1F1B, the grid of a split's
        schedules = ((0, 1),)
    else:
        known = shapes.schedules.get((p, split))
        schedules = known if known is not None else shapes.schedules.setdefault((p, split), _schedules(p, split, space))
    # a split-backward schedule's rules read the split's ends (pipeline_step.schedule_reason): its grid is the split's own
    key: tuple[object, ...] = (t, p, d, c, ep, schedules, split if space.schedule is not None else None)
    if key not in shapes.grids:
        reasons: Counter = Counter()
        shapes.grids[key] = _layout_grid(shapes, t, p, d, schedules, space, reasons, c, ep, split), reasons
    grid, reasons = shapes.grids[key]
    rejected.update(reasons)
    if grid is None:
        return None
    n = grid["tp"].size
    # the layout string of each row: the search's proposed one (its index), SearchSpace.pipeline_layout (0), or none (-1)
    code = proposed[1] if proposed is not None else (0 if space.pipeline_layout is not None and p > 1 else -1)
    made = grid | {"first_stage_layers": shapes.filled(n, split[0]), "last_stage_layers": shapes.filled(n, split[-1]),
                   "pipeline_layout": shapes.filled(n, code)}
    if chunks > 1:  # the proposed layout's v; what memory takes from the grid alone is the shared grid's (_GridTerms.with_chunks)
        made["chunks"] = shapes.filled(n, chunks)
        return made, (*key, chunks)
    return made, key


def _schedules(p: int, split: tuple[int, ...], space: SearchSpace) -> tuple[tuple[int, int], ...]:
    """(interleaved, chunks v) of each schedule a layout with this split runs: 1F1B, and interleaved with every v
    that divides every stage's layers (or a --pipeline-layout's own chunks)."""
    schedules = [(0, 1)]
    if space.schedule is not None and p > 1:  # the split-backward schedule asked for, on every pipelined layout
        schedules = [(SCHEDULE_CODES.index(space.schedule), 1)]
    elif space.torchtitan_split and p > 1:  # torchtitan's own split: the chunks v whose split leaves every rank its layers
        from parcalc.core.pipeline_torchtitan import configurable
        from parcalc.core.search_layouts import torchtitan_ranks

        if space.schedule is None and space.interleaved:
            top = min(split) if space.max_chunks is None else min(min(split), space.max_chunks)  # v chunks of a layer or more a rank
            layers = sum(split)  # v: two a rank (torchtitan's default) or a count its layers_per_stage can ask for
            schedules += [(1, v) for v in range(2, top + 1)
                          if (v == 2 or configurable(p * v, layers)) and torchtitan_ranks(layers, p, p * v) == split]
    elif space.pipeline_layout is not None:  # its chunks, stages / pp, as written (_layout_reason)
        from parcalc.core.pipeline_layout import virtual_stage_count

        v_layout = virtual_stage_count(space.pipeline_layout) // p
        schedules = [(1, v_layout)] if v_layout > 1 else [(0, 1)]
    elif p > 1 and space.interleaved:
        embedding, loss = space.slots  # v must divide every stage's layers, or its layer slots (Megatron-LM, parcalc.core.stages)
        per_stage = math.gcd(split[0] + embedding, *split[1:-1], split[-1] + loss)
        schedules += [(1, v) for v in divisors(per_stage) if v > 1 and (space.max_chunks is None or v <= space.max_chunks)]
    return tuple(schedules)


def _layout_grid(shapes: _Shapes, t: int, p: int, d: int, schedules: tuple[tuple[int, int], ...], space: SearchSpace,
                 rejected: Counter, c: int, ep: int, split: tuple[int, ...]) -> dict[str, np.ndarray] | None:  # fmt: skip
    """_layout_arrays' columns but the split's (read-only arrays); `split` is read only by a split-backward schedule's
    rules (space.schedule), whose grids are then one per split."""
    training = shapes.training
    replica = training.global_batch // d
    sizes = [b for b in divisors(replica) if space.micro_batches is None or b in space.micro_batches]
    recomputes = [i for i, r in enumerate(RECOMPUTES) if r in space.recomputes and (r is not Recompute.OP or shapes.op_supported)]
    hybrid = shapes.model.linear_attention is not None or shapes.model.mamba is not None
    if shapes.cluster.framework.step_memory == "hf-eager" or hybrid:  # HF checkpoints whole decoder layers or nothing; a
        # hybrid's memory is counted with none or full (linear_attention_memory, mamba_memory)
        recomputes = [i for i in recomputes if RECOMPUTES[i] in (Recompute.NONE, Recompute.FULL)]
    engine = shapes.cluster.framework.at(p)  # a pipeline engine of its own (DeepSpeed's) may offer fewer ZeRO stages
    zeros = [z for z in space.zero_stages if (z == 0 or d * c > 1) and (engine is shapes.cluster.framework or z in engine.zero_stages)
             and not (z == 3 and shapes.model.mamba is not None)]  # a Mamba-2 hybrid's memory: no ZeRO-3 yet (mamba_layout_reason)
    sps = [sp for sp in space.sequence_parallel if not sp or (t > 1 and (training.seq_len // c) % t == 0)]
    if t > 1 and shapes.cluster.framework.sequence_parallel_with_tp:  # torchtitan's apply_tp runs TP with SP only
        sps = [sp for sp in sps if sp]
    if not sizes and space.micro_batches is not None:  # the named sizes divide this layout's replica batch nowhere
        given = ", ".join(str(b) for b in space.micro_batches)
        many = len(space.micro_batches) > 1
        rejected[f"micro-batch{'es' if many else ''} {given} divide{'' if many else 's'} no replica batch B / dp"] += 1
    if not (sizes and recomputes and zeros and sps):
        return None
    groups = np.array(space.shard_groups_of(d * c, t, shapes.cluster.gpus_per_node), dtype=np.int64)
    if groups.size == 0 and any(z for z in zeros):  # a pinned shard group that does not divide this layout's dp x cp
        rejected["shard group does not divide dp x cp (ZeRO-1/2/3)"] += 1
        zeros = [z for z in zeros if z == 0]
        if not zeros:
            return None
    mesh = np.meshgrid(np.array(sizes), np.array(recomputes), np.array(zeros), np.array([int(s) for s in sps]),
                       np.arange(len(schedules)), indexing="ij")  # fmt: skip
    b, r, z, sp, k = (a.ravel() for a in mesh)
    # ZeRO-1/2/3 rows once per shard group S; ZeRO-0 rows once, with S = dp x cp (nothing sharded)
    reps = np.where(z >= 1, max(groups.size, 1), 1)
    row = np.repeat(np.arange(z.size), reps)
    within = np.arange(row.size) - np.repeat(np.cumsum(reps) - reps, reps)
    b, r, z, sp, k = (a[row] for a in (b, r, z, sp, k))
    shard = np.where(z >= 1, groups[np.minimum(within, max(groups.size - 1, 0))] if groups.size else d * c, d * c)
    sched = np.array([s for s, _ in schedules])[k]
    v = np.array([c for _, c in schedules])[k]
    m = replica // b
    valid = (sched != 1) | (m % p == 0)
    if not valid.all():
        rejected["interleaved needs m a multiple of p"] += int((~valid).sum())
        b, r, z, sp, sched, v, m, shard = (a[valid] for a in (b, r, z, sp, sched, v, m, shard))
    if space.schedule is not None and p > 1:  # its rules (parcalc.core.pipeline_step.schedule_reason), once per micro-batch count
        from parcalc.core.pipeline_step import schedule_reason

        even = len(set(split)) == 1 and not any(space.slots)
        layout = Layout(t, p, d, schedule=space.schedule, pipeline_layout=space.pipeline_layout,
                        first_stage_layers=None if even else split[0], last_stage_layers=None if even else split[-1])  # fmt: skip
        if shapes.torchtitan:  # torchtitan's own split, its layout string placed in the V where the schedule is one
            layout = shapes.torchtitan_layout(t, p, d, 1)._replace(schedule=space.schedule)
        reasons = {n: schedule_reason(shapes.model.layers, layout, n) for n in np.unique(m).tolist()}
        valid = np.array([reasons[n] is None for n in m.tolist()], dtype=bool)
        for reason in {reasons[n] for n in m[~valid].tolist()}:
            assert reason is not None
            rejected[reason] += int(sum(1 for n in m[~valid].tolist() if reasons[n] == reason))
        b, r, z, sp, sched, v, m, shard = (a[valid] for a in (b, r, z, sp, sched, v, m, shard))
    if b.size == 0:
        return None
    n = b.size
    grid = {"tp": np.full(n, t), "pp": np.full(n, p), "dp": np.full(n, d), "micro_batch": b, "micro_batches": m, "recompute": r,
            "zero": z, "sequence_parallel": sp.astype(bool), "schedule": sched, "chunks": v, "cp": np.full(n, c), "ep": np.full(n, ep),
            "shard_group": shard}  # fmt: skip
    for column in grid.values():
        column.flags.writeable = False  # shared by the layout's splits
    return grid


def _split_in_flight(schedule: Schedule, p: int, m: np.ndarray, stage: int, weight_share: float) -> np.ndarray:
    """parcalc.core.memory's in-flight count of a split-backward schedule, n_B + r_W n_W, once per micro-batch count."""
    from parcalc.core.pipeline import in_flight_micro_batches, pending_weight_gradients

    values = {n: in_flight_micro_batches(schedule, p, n, stage) + weight_share * pending_weight_gradients(schedule, p, n, stage)
              for n in np.unique(m).tolist()}  # fmt: skip
    return np.array([values[n] for n in m.tolist()], dtype=float)


def _in_flight(p: int, m: np.ndarray, stage: int, interleaved: np.ndarray, v: np.ndarray) -> np.ndarray:
    """parcalc.core.pipeline.in_flight_micro_batches for 1F1B and interleaved, on arrays."""
    plain = np.minimum(p - stage, m).astype(float)
    if not interleaved.any():  # 1F1B throughout (np.where below would take `plain` everywhere)
        return plain
    warm_up = (p - stage - 1) * 2 + (v - 1) * p
    chunked = np.where(m == p, m.astype(float), np.minimum(warm_up + 1, m * v) / v)
    return np.where(interleaved.astype(bool) & (v > 1), chunked, plain)


@dataclass
class _GridTerms:
    """What the memory of a layout's configurations takes from their grid alone (_layout_arrays' key), the same for
    every split: the activations per row, the state bytes per parameter (ZeRO over the shard group), the MoE exchange
    buffers, the ZeRO-3 rows; per stage the micro-batches in flight and the embedding's and output's activations."""

    activations: np.ndarray  # [7, rows]: _Shapes.activations times b
    dense_per_param: np.ndarray
    dispatch: np.ndarray
    zero3: np.ndarray  # ZeRO-3 rows
    layer_keys: tuple[np.ndarray, np.ndarray]  # the distinct b 8 + SP 4 + r, and each row's (stage_arrays)
    shard_groups: tuple[np.ndarray, np.ndarray]  # the distinct shard groups, and each row's (dp_arrays)
    chunks: np.ndarray  # each row's chunk count v
    stages: dict[int, tuple[np.ndarray, Any]] = field(default_factory=dict)
    experts: np.ndarray | None = None
    _chunks: tuple[list[int], np.ndarray] | None = None
    mixer: np.ndarray | None = None  # a gated-DeltaNet hybrid's: each row's mixer_table times b
    blocks: np.ndarray | None = None  # a Mamba-2 hybrid's [3, rows]: each row's block_table times b

    def linear_layers(self, shapes: _Shapes, split: tuple[int, ...], stage: int) -> np.ndarray:
        """Each row's gated-DeltaNet layers on `stage` (its chunk count decides them under interleaving)."""
        values, index = self.chunk_values()
        return np.array([shapes.linear_layers(split, k)[stage] for k in values])[index]

    @staticmethod
    def of(shapes: _Shapes, cols: dict[str, np.ndarray], per: Any) -> _GridTerms:
        t, c, ep = int(cols["tp"][0]), int(cols["cp"][0]), int(cols["ep"][0])
        b, r, z, sp = cols["micro_batch"], cols["recompute"], cols["zero"], cols["sequence_parallel"]
        sp_index = sp.astype(int)
        activations = shapes.activation_table(t, c, shapes.cp_comm)[:, sp_index, r] * b  # [7, sp, r] per row
        mixer = shapes.mixer_table(t, c, shapes.cp_comm)[sp_index, r] * b if shapes.model.linear_attention is not None else None
        blocks = shapes.block_table(t, c, shapes.cp_comm)[:, sp_index, r] * b if shapes.model.mamba is not None else None
        return _GridTerms(activations, _per_param(shapes.training, per, z, cols["shard_group"]), shapes.dispatch_pair(t, c, ep)[sp_index] * b,
                          z == 3, np.unique(b * 8 + sp_index * 4 + r, return_inverse=True),
                          np.unique(cols["shard_group"], return_inverse=True), cols["chunks"], mixer=mixer, blocks=blocks)  # fmt: skip

    def with_chunks(self, chunks: np.ndarray) -> _GridTerms:
        """These terms for the same rows with other chunk counts (a layout the search proposes for another v): the
        micro-batches in flight and the chunk counts its own, the rest shared."""
        return replace(self, chunks=chunks, stages={}, _chunks=None)

    def chunk_values(self) -> tuple[list[int], np.ndarray]:
        """The distinct chunk counts v of the grid, and each row's index among them."""
        if self._chunks is None:
            values = sorted(set(self.chunks.tolist()))  # np.unique's values (np.unique without indices imports numpy.ma: ~10 ms)
            self._chunks = values, np.searchsorted(np.array(values), self.chunks)
        return self._chunks

    def expert_per_param(self, shapes: _Shapes, cols: dict[str, np.ndarray], per: Any) -> np.ndarray:
        """The routed experts' state bytes per parameter: sharded over expert-DP; under fully_shard by whole experts over
        the shard group (parcalc.core.memory_fsdp.expert_shard_ranks: FSDP2 chunks an expert stack's dim 0)."""
        if self.experts is None:
            from parcalc.core.expert_parallel import expert_layout

            t, p, d, c, ep = (int(cols[k][0]) for k in ("tp", "pp", "dp", "cp", "ep"))
            ranks: int | np.ndarray = expert_layout(shapes.model, Layout(tp=t, pp=p, dp=d, cp=c, ep=ep)).edp
            if shapes.cluster.framework.step_memory in FSDP2_PROFILES and shapes.model.moe is not None:
                from parcalc.core.memory_fsdp import expert_shard_ranks

                ranks = expert_shard_ranks(shapes.model.moe.experts // ep, np.minimum(cols["shard_group"], ranks))
            self.experts = _per_param(shapes.training, per, cols["zero"], ranks)
        return self.experts

    def in_flight(self, stage: int, p: int, cols: dict[str, np.ndarray], mtp_at: int, split_schedule: Schedule | None,
                  weight_share: float) -> tuple[np.ndarray, Any]:  # fmt: skip
        """A stage's micro-batches in flight (a split-backward schedule's: _split_in_flight), and its embedding's and
        output's activations (MTP's where the layout puts it)."""
        if stage not in self.stages:
            if split_schedule is None or p == 1:
                n = _in_flight(p, cols["micro_batches"], stage, cols["schedule"], cols["chunks"])
            else:
                n = _split_in_flight(split_schedule, p, cols["micro_batches"], stage, weight_share)
            _, a_emb, a_out, _, _, _, a_mtp = self.activations
            head = 0 if split_schedule is not None and split_schedule.v_shape and p > 1 else p - 1  # a V: rank 0 (_Shapes.head_stage)
            ends = (a_emb * n if stage == 0 else 0.0) + (a_out * n if stage == head else 0.0)
            if mtp_at != head:  # the MTP modules' activations where the layout's m puts them
                ends = ends + (a_mtp * n if stage == mtp_at else 0.0) - (a_mtp * n if stage == head else 0.0)
            self.stages[stage] = n, ends
        return self.stages[stage]


def _per_param(training: Training, per: Any, z: np.ndarray, ranks: int | np.ndarray) -> np.ndarray:
    """State bytes per parameter, ZeRO-sharded over `ranks` (parcalc.core.model_states.model_states); ZeRO-Offload:
    from ZeRO-2 the gradients leave bucket by bucket."""
    replicated = np.ones_like(z, dtype=float)
    grads_on_gpu = 0.0 if training.offload_optimizer else 1.0
    shard_w = np.where(z >= 3, ranks, 1) * replicated
    shard_g = np.where(z >= 2, ranks, 1) * replicated
    shard_o = np.where(z >= 1, ranks, 1) * replicated
    return (per.weight / shard_w + per.gradient / shard_g * np.where(z >= 2, grads_on_gpu, 1.0)
            + (0.0 if training.offload_optimizer else per.optimizer) / shard_o)  # fmt: skip


def _evaluate_layout(shapes: _Shapes, cols: dict[str, np.ndarray], given: tuple[int | None, int | None], split: tuple[int, ...],
                     grid: tuple[object, ...]) -> None:  # fmt: skip
    """Fill in COST_FIELDS for one layout's configurations (parcalc.core.fit.estimate, on arrays);
    `given`: the (first, last) stage layers as a Config has them, `split`: every stage's layers, `grid`: the key of the
    configurations but the split's columns (_layout_arrays: what depends on them alone is computed once per key)."""
    model, training, cluster = shapes.model, shapes.training, shapes.cluster
    t, p, d, c, ep = (int(cols[k][0]) for k in ("tp", "pp", "dp", "cp", "ep"))
    per = shapes.per_pipelined if p > 1 else shapes.per
    b, m, r, z, sp, v = cols["micro_batch"], cols["micro_batches"], cols["recompute"], cols["zero"], cols["sequence_parallel"], cols["chunks"]
    first, last = given
    cp_comm = shapes.cp_comm
    space_schedule = shapes.schedule  # a split-backward schedule: its in-flight count (parcalc.core.memory._split_in_flight)
    weight_share = weight_pass_share(model, training) if space_schedule is not None else 0.0

    # Memory: the first and the last stage, and with uneven stages the second, the fullest middle
    # one (middle stages hold the same layers, and the earlier keep more micro-batches in flight);
    # with even stages the middle ones hold no more than the first.
    rows_of = shapes.grid_terms.get(grid)
    if rows_of is None and len(grid) == 8:  # a proposed layout's v on the shared grid (_layout_arrays): its terms but the chunks'
        shared = shapes.grid_terms.get(grid[:7])
        if shared is None:
            shared = shapes.grid_terms[grid[:7]] = _GridTerms.of(shapes, cols, per)
        rows_of = shapes.grid_terms[grid] = shared.with_chunks(cols["chunks"])
    if rows_of is None:
        rows_of = shapes.grid_terms[grid] = _GridTerms.of(shapes, cols, per)
    a_layer, _, _, a_re, a_moe, a_cp, _ = rows_of.activations  # the embedding, output and MTP ones: rows_of.in_flight
    mtp_at = shapes.mtp_stage(p)
    shard = cols["shard_group"]
    dense_per_param = rows_of.dense_per_param  # the dense states shard over the dp-cp group (Megatron-LM), or the shard group S
    fp8_dense, fp8_moe = shapes.fp8_layer(t, ep)  # TE's FP8 weight copies per layer (0 unless --precision fp8)
    dispatch = rows_of.dispatch  # MoE exchange buffers
    # states[stage] = (parameters, routed-expert parameters, ZeRO-3 gathered buffers, MoE layers) of
    # the stages whose memory can be the largest: the first and the last, and with uneven stages the
    # second, the fullest middle one (middle stages hold the same layers, and the earlier keep more
    # micro-batches in flight); with even stages the middle ones hold no more than the first. An MoE
    # model's middle stages differ by their MoE layers (parcalc.core.memory.fullest_candidates).
    # (a state the same on every row is a number: the arithmetic below gives each row what an array of it would)
    states: dict[int, tuple[Any, Any, Any, Any]] = {}
    zero3 = rows_of.zero3
    block_counts: dict[int, np.ndarray] = {}  # a Mamba-2 hybrid's: each stage's [3, rows] Mamba-2, attention and MLP blocks
    if model.mamba is not None:  # every stage: they differ by their blocks (per chunk count: interleaving moves them)
        chunk_values, index = rows_of.chunk_values()
        for at in range(p):
            held = [shapes.block_stage(t, p, first, last, k, at) for k in chunk_values]
            states[at] = (np.array([params for params, _ in held])[index], 0.0, 0.0, 0.0)
            block_counts[at] = np.array([counts for _, counts in held], dtype=float)[index].T
        expert_per_param = dense_per_param
    elif model.moe is None and (shapes.torchtitan or shapes.pipeline_layout is not None) and p > 1:  # torchtitan's split or a
        # layout string: any per-rank layers (the middle ranks may differ)
        # the earliest rank of each layer count, the ends among them, keeps the most (fullest_candidates); a split-backward
        # schedule's in-flight counts are its own (a V's too, its head on rank 0): every rank
        for at in range(p) if space_schedule is not None else fullest_candidates(model, split):
            params, gathered = shapes.split_stage(t, p, at)
            states[at] = (params, 0.0, np.where(zero3, gathered, 0.0), 0.0)
        expert_per_param = dense_per_param
    elif model.moe is None:
        ends = (shapes.stage_params(t, p, first, last), shapes.gathered(t, p, first, last))
        wanted = {0: 0, p - 1: 2}
        if p > 2 and (first is not None or last is not None):
            wanted[1] = 1
        for at, which in wanted.items():
            params, gathered = ends[0][which], ends[1][which]
            states[at] = (params, 0.0, np.where(zero3, gathered, 0.0), 0.0)
        expert_per_param = dense_per_param
    else:  # per chunk count: interleaving moves MoE layers between stages (parcalc.core.memory.stage_moe_layers)
        chunk_values, index = rows_of.chunk_values()
        any_zero3 = bool(zero3.any())  # the gathered buffers count only on ZeRO-3 rows (np.where below)
        if shapes.pipeline_layout is not None and p > 1:  # a layout: the stages whose memory can be the largest (layout_candidates)
            wanted_stages = shapes.layout_candidates(p)
        elif shapes.torchtitan and p > 1:  # every stage, as step.py's
            wanted_stages = list(range(p))
        else:
            wanted_stages = shapes.candidates(split, tuple(chunk_values))
        for at in wanted_stages:
            if len(chunk_values) == 1:
                params, experts, gathered, moe = shapes.moe_states(t, p, c, d, ep, first, last, chunk_values[0], at, any_zero3)
                states[at] = (params, experts, np.where(zero3, gathered, 0.0), moe)
                continue
            column = np.array([shapes.moe_states(t, p, c, d, ep, first, last, k, at, any_zero3) for k in chunk_values], dtype=float)[index]
            states[at] = (column[:, 0], column[:, 1], np.where(zero3, column[:, 2], 0.0), column[:, 3])
        expert_per_param = rows_of.expert_per_param(shapes, cols, per)  # experts shard over expert-DP (fully_shard: whole experts)

    def on_stage(stage: int) -> np.ndarray:  # states and activations of one GPU of a stage
        params, experts, gathered, moe = states[stage]
        layers = split[stage]
        n, ends = rows_of.in_flight(stage, p, cols, mtp_at, space_schedule, weight_share)
        if training.offload_activations:
            activations = a_layer * min(layers, 2)
        elif model.moe is None:
            activations = a_layer * layers * n
        else:
            activations = (a_layer * (layers - moe) + a_moe * moe) * n
        if rows_of.blocks is not None:  # a Mamba-2 hybrid: each block kind's activations times its count (mamba_stage_activations)
            activations = (rows_of.blocks * block_counts[stage]).sum(axis=0) * n
        if rows_of.mixer is not None:  # each gated-DeltaNet layer's mixer in place of attention's (linear_attention_memory)
            activations = activations + rows_of.mixer * rows_of.linear_layers(shapes, split, stage) * n
        fp8 = fp8_dense * (layers - moe) + fp8_moe * moe
        return ((params - experts) * dense_per_param + experts * expert_per_param + fp8 + gathered + activations + np.where(moe > 0, dispatch, 0.0)
                + ends + a_re + a_cp + training.reserve)  # fmt: skip

    memory = np.max([on_stage(stage) for stage in states], axis=0)
    basis = np.full(b.size, TEXTBOOK, dtype=np.int8)  # what each row's memory is (MEMORY_BASES)
    if cluster.framework.step_memory == "hf-eager":  # the step's peak (parcalc.core.memory_timeline), as parcalc.core.fit.memory_of has it
        from parcalc.core.memory_timeline import hf_reserved_total
        from parcalc.core.training_setup import replayed_reserve

        memory = np.array([hf_reserved_total(model, int(bb), training.seq_len, training.precision, training.optimizer, RECOMPUTES[int(rr)],
                                             ddp_buckets=d > 1, compiled=training.compiled)
                           for bb, rr in zip(b, r, strict=True)]) + replayed_reserve(training.reserve).value  # fmt: skip
        basis[:] = REPLAYED
    elif cluster.framework.step_memory in ("fsdp2-eager", "torchtitan-eager"):  # the step's peak under fully_shard where it applies,
        memory = fsdp_rows(memory, model, training, cluster.framework.step_memory, t, p, c, ep, d, b, r, z, cols["shard_group"],
                            cols["sequence_parallel"], cp_comm, basis)  # as memory_of has it
        # 1F1B, interleaved, ZB-V and DualPipeV rows: the schedules the pipeline walks follow (memory_fsdp.pipeline_gaps)
        if (cluster.framework.step_memory == "torchtitan-eager" and p > 1 and space_schedule in (None, Schedule.ZB_V, Schedule.DUALPIPEV)
                and shapes.pipeline_layout is None):  # fmt: skip
            memory = pipeline_stage_rows(memory, model, training, cluster, cols, given, (t, p, d, c, ep), shapes.slots, basis,
                                         shapes.torchtitan)

    # Time: only for the configurations that fit (the search ranks those; the others keep their
    # memory and nan times, null in JSON), from the pieces of the scalar timing models once per
    # distinct (b, SP, recomputation); the same combination as parcalc.core.fit.estimate, on arrays.
    fits = memory <= cluster.capacity
    timed = np.full((len(TIME_FIELDS), b.size), math.nan)  # one row per field (the fields are its rows)
    cols.update(memory=memory, fits=fits, memory_basis=basis, **dict(zip(TIME_FIELDS, timed, strict=True)))
    cols[TIMED] = timed
    rows = np.arange(b.size) if shapes.time_all else np.flatnonzero(fits)
    if rows.size == 0:
        return
    b, m, r, z, sp, v, shard, a_layer = (a[rows] for a in (b, m, r, z, sp, v, shard, a_layer))
    keys, groups = rows_of.layer_keys, rows_of.shard_groups
    stage, f_layer, b_layer = shapes.stage_arrays(t, p, d, given, b, sp, r, c, cp_comm, ep, distinct=(keys[0], keys[1][rows]))
    # gradients over the dp-cp group (Megatron-LM), or hybrid sharding
    dp = shapes.dp_arrays(t, p, d * c, first, last, shard, ep, distinct=(groups[0], groups[1][rows]))
    stage = with_accumulation(stage, dp.accumulate)
    framework = cluster.framework.at(p)
    t_dp = dp_exposed(z, m, stage, dp, overlap_grad=cluster.overlap_grad_at(p), overlap_param=cluster.overlap_param_at(p),
                      reduce_every=framework.reduce_every_micro_batch, reshard=framework.reshard_after_forward,
                      layer_forward=f_layer, layer_backward=b_layer)  # fmt: skip
    layout = shapes.pipeline(t, p, d, first, last, cp=c, ep=ep)  # ZeRO and the shard group: arrays
    t_opt = optimizer_step_time(model, layout, training, cluster, zero=z, shard_group=shard, fullest=shapes.fullest_stage(t, p, d * c, first, last, ep))
    t_off = offload_step_time(model, layout, training, cluster, activation_layer=a_layer, stage_layers=split[0], m=m, stage=stage, zero=z,
                              shard_group=shard)  # fmt: skip
    t_host = _host_times(shapes, t, p, d, c, b, sp, r, z, m, stage, t_opt)
    terms = combine(stage, m, v, p, t_dp, t_opt, tp_overlap=cluster.overlap_tp, t_offload=t_off, t_host=t_host,
                    schedule=shapes.schedule if p > 1 else None, overlap_p2p=framework.overlap_p2p_comm)
    t_step = terms.t_step
    n, peak = cluster.gpus, cluster.peak
    values = {term.key: getattr(terms, term.key) for term in (*STEP_TERMS, STEP)} | dict(
        tokens_per_second=training.global_batch * training.seq_len / t_step,
        mfu=shapes.model_flops / (t_step * n * peak), hfu=shapes.hardware_flops[r] / (t_step * n * peak),
    )  # fmt: skip
    for name, value in values.items():
        cols[name][rows] = value




def _host_times(shapes: _Shapes, t: int, p: int, d: int, c: int, b: np.ndarray, sp: np.ndarray, r: np.ndarray, z: np.ndarray,
                m: np.ndarray, stage: Any, t_opt: Any) -> Any:  # fmt: skip
    """t_host of each configuration as parcalc.core.fit._host_derivation has it (one stage, a profile that measured its host;
    0 otherwise): kernel launches once per distinct (b, SP, recomputation), the fluid model on arrays."""
    from parcalc.core.fit_term_derivations import host_costs, phase_hosts
    from parcalc.core.timing.host import host_exposed_repeated, optimizer_launches
    from parcalc.core.timing.step import stage_launches_by_kind

    model, training, cluster = shapes.model, shapes.training, shapes.cluster
    costs = host_costs(cluster)
    if costs is None or p > 1:
        return 0.0
    h_f, h_b = np.empty(b.size), np.empty(b.size)
    for key in set(zip(b.tolist(), sp.tolist(), r.tolist(), strict=True)):
        config = Config.of(t, p, d, int(key[0]), RECOMPUTES[int(key[2])], sequence_parallel=bool(key[1]), cp=c)
        rows = (b == key[0]) & (sp == key[1]) & (r == key[2])
        if (t, c, *key) not in shapes.hosts:  # each phase's host time (eager or compiled costs: parcalc.core.timing.host)
            shapes.hosts[(t, c, *key)] = phase_hosts(*stage_launches_by_kind(model, config, training, cluster), training, cluster)
        h_f[rows], h_b[rows] = shapes.hosts[(t, c, *key)]
    if t == 1 and not training.offload_optimizer:
        from parcalc.core.comm.tensors import parameter_tensors

        sizes = [x.rows * x.cols for x in parameter_tensors(model)]
        n_opt, n_par = np.where(z == 0, optimizer_launches(sizes), 0), np.where(z == 0, len(sizes), 0)
    else:
        n_opt = n_par = np.zeros(b.size)
    return host_exposed_repeated(h_f, stage.forward, h_b, stage.backward + stage.recompute, m,
                                 n_opt * costs.optimizer, t_opt, n_par * costs.prelude, cluster.framework.sync_after_backward)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The search


def search(model: TransformerModel, training: Training, cluster: Cluster, space: SearchSpace = SearchSpace(),
           progress: Callable[[int, int], None] | None = None) -> SearchResult:  # fmt: skip
    """Every configuration of the space evaluated; `progress(done, total)` after each layout."""
    import gc

    # The search makes hundreds of thousands of small objects (arrays, tuples, the cores' dataclasses) that refcounting
    # frees, and no reference cycles of its own; the cyclic collector, run by their number, walked the process's objects
    # again and again (DeepSeek-V3 on 2,048 GPUs: 75 collections, ~100 ms of a 1.9 s search on a loaded 2-core machine).
    # Paused for the search, restored after it, whatever happens.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _search(model, training, cluster, space, progress)
    finally:
        if paused:
            gc.enable()


def _search(model: TransformerModel, training: Training, cluster: Cluster, space: SearchSpace,
            progress: Callable[[int, int], None] | None) -> SearchResult:  # fmt: skip
    if cluster.gpus < 1:
        raise InputError(f"--gpus: must be at least 1, got {cluster.gpus}")
    if model.mamba is not None:  # what a Mamba-2 hybrid's memory covers (parcalc.core.mamba_memory.check_mamba_memory)
        for refused, what in ((cluster.framework.step_memory != "textbook", f"with the {cluster.framework.step_memory} step walk"),
                              (training.precision.quantised, f"with {training.precision.value.upper()}"),
                              (training.offload_activations or training.offload_optimizer, "with offload"),
                              (space.pipeline_layout is not None, "with --pipeline-layout"),
                              (space.schedule is not None, "with a split-backward --schedule"),
                              (any(space.slots), "with the embedding / loss in the split")):  # fmt: skip
            if refused:
                raise InputError(f"--model: {model.name} has Mamba-2 layers; fit's search counts them {what} not yet; "
                                 "give a layout (--tp, --pp, ...) without --search")
    if model.linear_attention is not None:  # each stage's gated-DeltaNet layers: counted on the MoE path of the stages (_evaluate_layout)
        for refused, what in ((model.moe is None, "without MoE layers"), (training.offload_activations, "with activation offload"),
                              (space.pipeline_layout is not None, "with --pipeline-layout")):  # fmt: skip
            if refused:
                raise InputError(f"--model: {model.name} has gated-DeltaNet layers; fit's search counts them {what} not yet; "
                                 "give a layout (--tp, --pp, ...) without --search")
    if space.first_stage_layers is not None or space.last_stage_layers is not None:
        if space.pp is None:
            flag = "--first-stage-layers" if space.first_stage_layers is not None else "--last-stage-layers"
            raise InputError(f"{flag}: give --pp with it (the split is of that many stages)")
        stage_split(model.layers, space.pp, space.first_stage_layers, space.last_stage_layers,
                    embedding_in_split=space.embedding_in_split, loss_in_split=space.loss_in_split)
    if space.pipeline_layout is not None:
        if space.first_stage_layers is not None or space.last_stage_layers is not None or any(space.slots):
            raise InputError("--pipeline-layout: gives every stage's layers; --first-stage-layers, --last-stage-layers and the embedding / "
                             "loss slots split the stages another way (give one of them)")  # fmt: skip
        parse_pipeline_layout(space.pipeline_layout, 1, model.layers, model.mtp_layers)  # its letters against the model, once
    rejected: Counter = Counter()
    shapes = _Shapes(model, training, cluster, space.cp_comm, space.moe)
    shapes.time_all = space.time_all
    shapes.pipeline_layout = space.pipeline_layout
    shapes.schedule = space.schedule
    shapes.slots = space.slots
    shapes.torchtitan = space.torchtitan_split
    found = parallel_layouts(model, training, cluster, space, rejected)
    texts: list[str] = [space.pipeline_layout] if space.pipeline_layout is not None else []  # Evaluated.layouts
    parts = []
    for i, (t, p, c, d, e) in enumerate(found):
        per_split, proposals = [], []
        for given in splits(model, p, space):
            split = split_layers(model, p, space, given)
            made = _layout_arrays(shapes, t, p, d, split, space, rejected, c, e)
            if made is not None:
                cols, grid = made
                _evaluate_layout(shapes, cols, given, split, grid)
                per_split.append(cols)
        for chunks, text in proposed_layouts(model, p, space, cluster):  # the v the splits do not run: Megatron-LM's layout string
            if text not in texts:
                texts.append(text)
            split = parse_pipeline_layout(text, p, model.layers, model.mtp_layers).stage_layers()
            shapes.pipeline_layout = text  # the caches that read it key by it
            try:
                made = _layout_arrays(shapes, t, p, d, split, space, rejected, c, e, proposed=(chunks, texts.index(text)))
                if made is not None:
                    cols, grid = made
                    _evaluate_layout(shapes, cols, (split[0], split[-1]), split, grid)
                    proposals.append(cols)  # its v none of the splits runs: no other split of the same configuration
            finally:
                shapes.pipeline_layout = None
        if len(per_split) > 1:
            best, dropped = best_splits(per_split)
            rejected["another uneven split of the same configuration is better"] += dropped
            parts.append(best)
        else:
            parts += per_split
        parts += proposals
        if progress is not None:
            progress(i + 1, len(found))
    every = CONFIG_FIELDS + COST_FIELDS + PARALLEL_FIELDS + PARALLEL_COST_FIELDS + SHARD_FIELDS + BASIS_FIELDS + LAYOUT_FIELDS
    if parts:
        timed = dict(zip(TIME_FIELDS, np.concatenate([c[TIMED] for c in parts], axis=1), strict=True))
        columns = {k: timed[k] if k in timed else np.concatenate([c[k] for c in parts]) for k in every}
    else:
        columns = {k: np.array([]) for k in every}
    evaluated = Evaluated(columns, model.layers, space.slots, space.cp_comm, space.moe, cluster.gpus_per_node, tuple(texts),
                          "torchtitan" if space.torchtitan_split else None)  # fmt: skip
    rejected["memory (does not fit)"] += int(len(evaluated) - np.count_nonzero(columns["fits"])) if len(evaluated) else 0
    return SearchResult(evaluated, rejected, len(found))


__all__ = [
    "CP_MIN_SEQ_LEN",
    "PARALLEL_COST_FIELDS",
    "PARALLEL_FIELDS",
    "RECOMPUTES",
    "SHARD_FIELDS",
    "Evaluated",
    "SearchResult",
    "SearchSpace",
    "group_spans_nodes",
    "search",
]
