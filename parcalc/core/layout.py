"""The parallel layout of a training run: one value that memory, FLOPs, communication, the step
time and the search all take.

A `Layout` says how the GPUs split the work and how the pipeline runs it:
- the degrees: tensor (tp), pipeline (pp), context (cp) and data (dp) parallelism, so that
  GPUs = tp x pp x cp x dp; expert parallelism (ep, with etp-way expert tensor parallelism)
  folds over the tp x cp x dp ranks of the dense part and adds no GPUs (Megatron-Core's "MoE
  parallel folding"; etp None: etp = tp, Megatron-Core's default);
- how the data-parallel ranks hold the model states: the ZeRO stage (0 = DDP; 3 = FSDP) and the
  hybrid-sharding group (ZeRO over `shard_group` of the dp x cp ranks, replicated over the
  others; None: over all of them; parcalc.core.sharding);
- how tensor and context parallelism run: Megatron's sequence parallelism, and how attention gets
  the other CP ranks' keys and values (p2p, all-gather, a2a; parcalc.core.context);
- the pipeline: its schedule, the model chunks per stage of the interleaved schedule, the stage
  split (Megatron-LM's even split, or uneven first / last stages, or the embedding / loss as one
  layer slot; parcalc.core.stages);
- placement: GPUs per node, ranks in Megatron-LM's order tp-cp-ep-dp-pp, so a group whose ranks
  sit on more than one node crosses the network (parcalc.core.comm.plan).

What the layout does not hold, because it follows from the batch and not from the GPUs: the
micro-batch size and the number of micro-batches per iteration (m = B / (d b)).

A NamedTuple, not a frozen dataclass: the search and `comm-volume`'s start-up create many, and a
NamedTuple is cheaper to define and to create (parcalc.core.comm.plan's note). It is checked once
against the model where it enters (`check_layout`).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from parcalc.core.choices import Schedule
from parcalc.named_tuple import NamedTuple


class DataParallel(str, Enum):
    """How the data-parallel dimension synchronises (the ZeRO stage by the name comm-volume uses)."""

    DDP = "dp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"


ZERO_STAGES = (DataParallel.DDP, DataParallel.ZERO1, DataParallel.ZERO2, DataParallel.ZERO3)


class Layout(NamedTuple):
    """Degrees, sharding, schedule, stage split and placement of one training run (module docstring)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    zero: int = 0
    shard_group: int | None = None
    sequence_parallel: bool = False
    cp_comm: str = "p2p"  # a parcalc.core.context.CpComm value
    schedule: Schedule = Schedule.ONE_F_ONE_B
    chunks: int = 1  # model chunks per device (the interleaved schedule's v)
    first_stage_layers: int | None = None  # Megatron-LM's uneven first / last stage; None: the even split
    last_stage_layers: int | None = None
    embedding_in_split: bool = False  # the embedding / the loss as one layer slot of the split
    loss_in_split: bool = False
    gpus_per_node: int = 8
    # Megatron-LM's custom layout (--pipeline-layout "Et|(tt|)*30mL"): every virtual stage's layers, in place of the
    # even or uneven split above; its chunks are the stages / pp (parcalc.core.pipeline_layout)
    pipeline_layout: str | None = None
    # Who wrote pipeline_layout: None, the user (--pipeline-layout); "torchtitan", the framework's own split of the layers
    # when none was given (parcalc.core.pipeline_torchtitan), shown and derived as torchtitan's
    split_by: str | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def data_parallel(self) -> DataParallel:
        """The ZeRO stage by comm-volume's name for it (dp, zero1, zero2, zero3)."""
        return ZERO_STAGES[self.zero]

    @property
    def expert_tp(self) -> int:
        """Expert tensor parallelism in force (etp, or tp when not given: Megatron-Core's default)."""
        return self.tp if self.etp is None else self.etp

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Transformer layers of each pipeline stage, first to last (parcalc.core.stages: Megatron-LM's rule; or the
        custom layout's, parcalc.core.pipeline_layout)."""
        if self.pipeline_layout is not None:
            return self.pipeline_split(layers).stage_layers()
        from parcalc.core.stages import stage_split

        return stage_split(layers, self.pp, self.first_stage_layers, self.last_stage_layers, self.chunks,
                           embedding_in_split=self.embedding_in_split, loss_in_split=self.loss_in_split)  # fmt: skip

    def stage_ends(self, layers: int) -> tuple[int | None, int | None]:
        """(first, last) stage layers as the uneven split takes them (parcalc.core.stages.stage_ends); a custom layout's
        end stages (its middle stages may differ: parcalc.core.timing.step.paced_stages takes its fullest)."""
        if self.pipeline_layout is not None:
            split = self.pipeline_split(layers).stage_layers()
            return (split[0], split[-1]) if self.pp > 1 else (None, None)
        from parcalc.core.stages import stage_ends

        return stage_ends(layers, self.pp, self.first_stage_layers, self.last_stage_layers, self.chunks,
                          embedding_in_split=self.embedding_in_split, loss_in_split=self.loss_in_split)  # fmt: skip

    def pipeline_split(self, layers: int, mtp_layers: int | None = None) -> Any:
        """The custom layout parsed over pp ranks (parcalc.core.pipeline_layout.PipelineSplit); mtp_layers None: not checked."""
        from parcalc.core.pipeline_layout import parse_pipeline_layout

        assert self.pipeline_layout is not None
        v_shape = self.schedule.v_shape and self.pp > 1  # DualPipeV, ZB-V: the virtual stages in a V (pipeline_layout.V_PLACEMENT)
        return parse_pipeline_layout(self.pipeline_layout, self.pp, layers, mtp_layers, v_shape)

    def degrees_label(self) -> str:
        """'TP 8 x PP 4 x DP 16' (CP with its K/V exchange when cp > 1)."""
        cp = f" x CP {self.cp} ({self.cp_comm})" if self.cp > 1 else ""
        return f"TP {self.tp} x PP {self.pp}{cp} x DP {self.dp}"


ONE_GPU = Layout()  # no parallelism: the default of the core functions that take a layout
