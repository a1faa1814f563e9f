"""One pipeline rank of torchtitan's Llama holding several stages under FSDP2 and torch's ScheduleInterleaved1F1B, for
MemTracker.

torchtitan's pipeline_llm (torchtitan/distributed/pipeline_parallel.py @b5bcd76c) gives rank r of p the virtual stages
r, r + p, ... (style 'loop'), each a copy of the Transformer with only its layers (tiny_torchtitan_pp.Stage), each
parallelised on its own (apply_ac, then apply_fsdp with every block and the stage's root reshard_after_forward=False),
and builds one PipelineStage per virtual stage and ScheduleInterleaved1F1B over the rank's stages. Here the rank's
stages run two steps on a (pp, dp) mesh of fake ranks under MemTracker, as tiny_torchtitan_pp.tracked_stage_peak runs one
stage (its workarounds: static shapes for the P2P warm-up vote, a module's repeated forward adding snapshots only, DTensor's
sharding propagation untracked); the optimizer is one for-loop AdamW over every stage's parameters (torchtitan builds one
per model part: the same tensors).
"""

from __future__ import annotations

import torch

from . import tiny_torchtitan_tp as tt
from .tiny_llama import LlamaConfig
from .tiny_torchtitan import apply_ac, loss_fn
from .tiny_torchtitan_pp import Stage, _forget_redistribute_plans, _tracker, peak_total


def tracked_rank_peak(c: LlamaConfig, vocab: int, b: int, s: int, pp: int, dp: int, rank: int,
                      chunk_bounds: tuple[tuple[int, int], ...], microbatches: int, ac: str, tp: int = 1) -> float:  # fmt: skip
    """MemTracker's peak (bytes) over two steps of pipeline rank `rank` of `pp`, holding virtual stages rank + k pp with the
    layers chunk_bounds[k], under FSDP2 over `dp` ranks (bf16 params, fp32 reduce) and ScheduleInterleaved1F1B over
    `microbatches` micro-batches of b x s tokens; the last rank's step(target=..., losses=[], return_outputs=False) as
    torchtitan's trainer calls it. `tp` > 1: each stage's model part under apply_tp on a (pp, dp, tp) mesh and the step under
    loss_parallel(), as tiny_torchtitan_pp.tracked_stage_peak parallelises a stage (its I/O the b x s / tp x hidden shard)."""
    import contextlib

    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B, schedules
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # one group per world size (a re-made group of the same size would leave its name in DTensor's caches:
    # tiny_torchtitan_pp._forget_redistribute_plans); the schedule is told which rank's action list to run below
    if dist.is_initialized() and dist.get_world_size() != pp * dp * tp:
        dist.destroy_process_group()
        _forget_redistribute_plans()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=pp * dp * tp, store=FakeStore())
    mesh = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    chunks = len(chunk_bounds)
    stages = pp * chunks
    indices = [rank + k * pp for k in range(chunks)]

    def static_shapes(self, stage_list, has_backward, p2p_done):  # type: ignore[no-untyped-def]
        for st in stage_list:
            st._inference_mode = InferenceMode.STATIC

    warmup = schedules.PipelineScheduleMulti._warmup_p2p
    schedules.PipelineScheduleMulti._warmup_p2p = static_shapes
    try:
        with FakeTensorMode(), tt._real_mesh_tables(), tt._untracked_sharding_propagation():
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            models, pipeline_stages = [], []
            for index, bounds in zip(indices, chunk_bounds, strict=True):
                first, last = index == 0, index == stages - 1
                model = Stage(c, vocab, s, *bounds, first, last)
                if tp > 1:
                    tt.apply_tp(model, mesh["tp"])
                apply_ac(model, ac)
                for block in model.layers.values():
                    fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
                fully_shard(model, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
                # a received activation requires grad (tiny_torchtitan_pp.tracked_stage_peak)
                inp = (torch.empty(b, s, dtype=torch.int64) if first
                       else torch.empty(b, s // tp, c.hidden, dtype=torch.bfloat16, requires_grad=True))
                out = torch.empty(b, s, vocab, dtype=torch.bfloat16) if last else torch.empty(b, s // tp, c.hidden, dtype=torch.bfloat16)
                pipeline_stages.append(PipelineStage(model, index, stages, torch.device("cpu"), input_args=(inp,), output_args=(out,),
                                                     output_grads=None if last else (torch.empty_like(out),),
                                                     input_grads=(None,) if first else (torch.empty_like(inp),),
                                                     group=mesh["pp"].get_group()))  # fmt: skip
                models.append(model)
            schedule = ScheduleInterleaved1F1B(pipeline_stages, n_microbatches=microbatches, loss_fn=loss_fn)
            # it runs pipeline_order_with_comms[self.rank], its stages' group rank (0 for this fake rank): rank `rank`'s list
            schedule.rank = rank
            opt = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-4, foreach=False)
            ids = torch.randint(0, vocab, (b * microbatches, s))
            tracker = _tracker()
            tracker.track_external(*models, opt)
            with tracker, (loss_parallel() if tp > 1 else contextlib.nullcontext()):
                for i in range(2):
                    opt.zero_grad()
                    if rank == 0:
                        schedule.step(ids)
                    elif rank == pp - 1:
                        schedule.step(target=ids, losses=[], return_outputs=False)
                    else:
                        schedule.step()
                    opt.step()
                    if i == 0:
                        tracker.reset_mod_stats()
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        schedules.PipelineScheduleMulti._warmup_p2p = warmup
        _forget_redistribute_plans()
    return peak_total(snapshot)
