"""Hybrid sharding: ZeRO / FSDP states sharded over a group of S data-parallel ranks and
replicated over the N / S such groups (N = dp x cp, the data-parallel group with its
context-parallel ranks).

The same idea under four names:
- PyTorch FSDP2 HSDP: `fully_shard(module, mesh=mesh)` on a 2-D DeviceMesh (replicate, shard):
  "If 2D, then parameters are sharded across the 1st dim and replicated across the 0th dim (HSDP)
  with (Replicate(), Shard(0)) placement" (torch/distributed/fsdp/_fully_shard/_fully_shard.py,
  fully_shard's docstring, torch 2.13.0). Per unit, backward reduce-scatters the gradients in the
  shard group and then all-reduces the reduce-scattered shard over the replicate group
  (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, foreach_reduce: reduce_scatter_comm
  over reduce_scatter_group, then `dist.all_reduce(reduce_output, group=all_reduce_group)`, "HSDP"
  where all_reduce_group is not None); FSDP1's ShardingStrategy.HYBRID_SHARD the same.
- Megatron-LM --num-distributed-optimizer-instances k (S = dp x cp / k): the distributed
  optimizer shards over "intra partial data-parallel" groups of S consecutive ranks of the dp-cp
  group (megatron/core/parallel_state.py at d98e8a6, initialize_model_parallel:
  intra_partial_data_parallel_size = dp x cp // num_distributed_optimizer_instances, slices of
  ranks_with_cp); each bucket is reduce-scattered in that group, then its local shard all-reduced
  over the inter-instance group (megatron/core/distributed/param_and_grad_buffer.py at d98e8a6,
  start_grad_sync: dist_reduce_scatter_func(local_data_view, ...) then
  torch.distributed.all_reduce(local_data_view, group=self.inter_distributed_optimizer_instance_group)).
- DeepSpeed MiCS (Zhang et al. 2022, "MiCS: Near-linear Scaling for Training Gigantic Model on
  Public Cloud", VLDB): model states partitioned within a partition group and replicated across
  the groups, gradients synchronised across the replicas.
- DeepSpeed ZeRO++ hpZ (Wang et al. 2023, "ZeRO++") is a neighbour, not the same: it keeps the
  optimizer states sharded over every rank and only a secondary copy of the weights inside a
  node for the backward's gathers; --shard-group shards every state over S.

Placement: the S ranks of a shard group are consecutive data-parallel ranks, tp apart in
Megatron-LM's rank order (usually inside one node); a replica group takes one rank of each shard
group, tp x S apart.

This module only checks and names; parcalc.core.memory divides the states by S,
parcalc.core.comm.data_parallel places the collectives and parcalc.core.timing.step times them.
"""

from parcalc.errors import InputError

FSDP2_HSDP = ("PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (torch 2.13.0), foreach_reduce: the unit's "
              "gradients reduce-scattered over the shard group, then the shard all-reduced over the replicate group (HSDP)")
MEGATRON_INSTANCES = ("Megatron-LM megatron/core/distributed/param_and_grad_buffer.py (d98e8a6), start_grad_sync: each bucket "
                      "reduce-scattered in its distributed-optimizer instance, then its local shard all-reduced across instances "
                      "(--num-distributed-optimizer-instances)")
HSDP_SOURCE = f"{FSDP2_HSDP}; {MEGATRON_INSTANCES}"
FLAG = "--shard-group"


def check_shard_group(shard_group: int | None, ranks: int, zero: int) -> None:
    """A shard group S must be a whole number from 1 to N = dp x cp that divides N, and applies to
    ZeRO-1/2/3 only (with ZeRO-0 every rank holds every state: there is nothing to shard)."""
    if shard_group is None:
        return
    if isinstance(shard_group, bool) or not isinstance(shard_group, int) or shard_group < 1:
        raise InputError(f"{FLAG}: must be a whole number of at least 1, got {shard_group!r}")
    if not zero:
        raise InputError(f"{FLAG}: hybrid sharding shards ZeRO states over S ranks; with --zero 0 (DDP) every rank holds the "
                         "whole model and nothing is sharded (give --zero 1, 2 or 3)")  # fmt: skip
    if shard_group > ranks or ranks % shard_group:
        raise InputError(f"{FLAG}: {shard_group:,} does not divide the data-parallel ranks dp x cp = {ranks:,} (the shard groups "
                         "tile the data-parallel group; S = dp x cp is full sharding)")  # fmt: skip


def shard_ranks(shard_group: int | None, ranks: int) -> int:
    """S: the ranks ZeRO shards over, the whole data-parallel group N when no group is given."""
    return ranks if shard_group is None else shard_group


def is_hybrid(shard_group: int | None, ranks: int) -> bool:
    """Whether states are replicated over more than one shard group (1 < N / S)."""
    return shard_group is not None and shard_group < ranks
