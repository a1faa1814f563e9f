"""Every collective of one training iteration under DP, ZeRO-1/2/3 (FSDP), TP, SP, PP and 3D.

One module per idea, sharing one plan type:
- plan: the configuration (Workload, Layout, Options, Network), the rows (CollectiveCall),
  the plan (CommPlan) and the builder that places each group on nodes and times it;
- tensors: the parameter tensors as a GPT-style model registers them, and their TP shards;
- data_parallel: DDP, ZeRO-1/2, ZeRO-3 / FSDP;
- tensor: tensor and sequence parallelism (inside the layers, at the embedding and the LM head);
- pipeline: point-to-point sends between stages and the tied embedding's sync;
- iteration: validation and one iteration's plan, the families' rows merged, with headlines;
- strategies: every strategy on one model (`--strategy all`).
Each module's docstring gives the sources of what its family communicates.
"""

from parcalc.core.comm.data_parallel import ddp_bucket_counts, ddp_buckets
from parcalc.core.comm.iteration import iteration_plan, validate
from parcalc.core.comm.plan import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    INTERLEAVED,
    MIB,
    CollectiveCall,
    CommPlan,
    Layout,
    Network,
    Options,
    OpTotal,
    Workload,
)
from parcalc.core.comm.strategies import (
    STRATEGIES,
    StrategyComparison,
    compare_strategies,
    default_micro_batch,
    single_strategy,
)
from parcalc.core.comm.tensor import CROSS_ENTROPY_BYTES
from parcalc.core.comm.tensors import (
    ParamTensor,
    Split,
    StageTensors,
    device_tensors,
    embedding_tensors,
    final_tensors,
    layer_tensors,
    padded_numel,
    parameter_tensors,
    shard,
    stage_layers,
)
from parcalc.core.layout import DataParallel

__all__ = [
    "CROSS_ENTROPY_BYTES",
    "DDP_BUCKET_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "INTERLEAVED",
    "MIB",
    "STRATEGIES",
    "CollectiveCall",
    "CommPlan",
    "DataParallel",
    "Layout",
    "Network",
    "OpTotal",
    "Options",
    "ParamTensor",
    "Split",
    "StageTensors",
    "StrategyComparison",
    "Workload",
    "compare_strategies",
    "ddp_bucket_counts",
    "ddp_buckets",
    "default_micro_batch",
    "device_tensors",
    "embedding_tensors",
    "final_tensors",
    "iteration_plan",
    "layer_tensors",
    "padded_numel",
    "parameter_tensors",
    "shard",
    "single_strategy",
    "stage_layers",
    "validate",
]  # fmt: skip
