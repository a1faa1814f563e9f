"""One pipeline rank of torchtitan's Llama holding its two V-placed stages under FSDP2 and torch's ScheduleZBVZeroBubble,
for MemTracker.

torchtitan's pipeline_llm (torchtitan/distributed/pipeline_parallel.py @b5bcd76c, _get_stage_indices style 'v') gives rank
r of p the stages r and 2p - 1 - r for ZBVZeroBubble and DualPipeV; each is a copy of the Transformer with only its layers
(tiny_torchtitan_pp.Stage), parallelised on its own (apply_ac, apply_fsdp with reshard_after_forward=False) and wrapped in
a PipelineStage. Here the rank's two stages run two steps on a (pp, dp) mesh of fake ranks under MemTracker, as
tiny_torchtitan_pp_interleaved.tracked_rank_peak runs a rank of the interleaved schedule (its workarounds); rank 0 holds
both the first stage and the last, so it gives step() the inputs, the targets and losses=[], return_outputs=False.
"""

from __future__ import annotations

import torch

from . import tiny_torchtitan_tp as tt
from .tiny_llama import LlamaConfig
from .tiny_torchtitan import apply_ac, loss_fn
from .tiny_torchtitan_pp import Stage, _forget_redistribute_plans, _tracker, peak_total


def v_stages(pp: int, rank: int) -> tuple[int, int]:
    """The stages rank `rank` of `pp` holds under a V schedule (torchtitan's _get_stage_indices, style 'v')."""
    return rank, 2 * pp - 1 - rank


def _no_backward_bookkeeping(register):  # type: ignore[no-untyped-def]
    """ModTracker's backward bookkeeping (register_multi_grad_hook over each module's inputs and outputs) left out. Under the
    split backward it breaks twice: stage_backward_input's torch.autograd.grad refuses a multi-grad hook on a leaf (a stage's
    received input: 'A leaf node was passed to _will_engine_execute_node but we are currently running autograd.grad()'),
    and, with the leaves skipped, the 'all' hooks' per-graph-task buffers keep gradients that the pass never completes:
    measured on rank 0 of 2 (4 layers, 4 micro-batches), live bytes 44 MiB above this walk at the second step's start and
    11 MiB more at each W of the last stage; without the hooks the live bytes after every action equal the walk's to 0.01 MiB.
    The hooks only move ModTracker's module stack; MemTracker's totals come from its tensor tracking."""

    def register_nothing(tensors, fn, mode="all"):  # type: ignore[no-untyped-def]
        return None

    return register_nothing


def tracked_v_rank_peak(c: LlamaConfig, vocab: int, b: int, s: int, pp: int, dp: int, rank: int,
                        chunk_bounds: tuple[tuple[int, int], tuple[int, int]], microbatches: int, ac: str,
                        schedule_name: str = "ZBVZeroBubble", trace: list | None = None) -> float:  # fmt: skip
    """MemTracker's peak (bytes) over two steps of pipeline rank `rank` of `pp`, holding stages v_stages(pp, rank) with the
    layers chunk_bounds (in that order), under FSDP2 over `dp` ranks (bf16 params, fp32 reduce) and torch's `schedule_name`
    schedule (ZBVZeroBubble or DualPipeV) over `microbatches` micro-batches of b x s tokens. `trace`: a list to which the
    second step's (action, live bytes after it, peak bytes so far) are appended, action by action (a debugging aid)."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools import mod_tracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage, schedules
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != pp * dp:
        dist.destroy_process_group()
        _forget_redistribute_plans()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=pp * dp, store=FakeStore())
    mesh = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp"))
    stages = 2 * pp
    indices = v_stages(pp, rank)

    def static_shapes(self, stage_list, has_backward, p2p_done):  # type: ignore[no-untyped-def]
        for st in stage_list:
            st._inference_mode = InferenceMode.STATIC

    warmup = schedules.PipelineScheduleMulti._warmup_p2p
    schedules.PipelineScheduleMulti._warmup_p2p = static_shapes
    hook = mod_tracker.register_multi_grad_hook
    mod_tracker.register_multi_grad_hook = _no_backward_bookkeeping(hook)
    try:
        with FakeTensorMode(), tt._real_mesh_tables(), tt._untracked_sharding_propagation():
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            models, pipeline_stages = [], []
            for index, bounds in zip(indices, chunk_bounds, strict=True):
                first, last = index == 0, index == stages - 1
                model = Stage(c, vocab, s, *bounds, first, last)
                apply_ac(model, ac)
                for block in model.layers.values():
                    fully_shard(block, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
                fully_shard(model, mesh=mesh["dp"], mp_policy=policy, reshard_after_forward=False)
                inp = torch.empty(b, s, dtype=torch.int64) if first else torch.empty(b, s, c.hidden, dtype=torch.bfloat16, requires_grad=True)
                out = torch.empty(b, s, vocab, dtype=torch.bfloat16) if last else torch.empty(b, s, c.hidden, dtype=torch.bfloat16)
                pipeline_stages.append(PipelineStage(model, index, stages, torch.device("cpu"), input_args=(inp,), output_args=(out,),
                                                     output_grads=None if last else (torch.empty_like(out),),
                                                     input_grads=(None,) if first else (torch.empty_like(inp),),
                                                     group=mesh["pp"].get_group()))  # fmt: skip
                models.append(model)
            schedule_class = schedules.get_schedule_class(schedule_name)
            schedule = schedule_class(pipeline_stages, n_microbatches=microbatches, loss_fn=loss_fn)
            schedule.rank = rank  # run rank `rank`'s action list (this fake rank's group rank is 0)
            opt = torch.optim.AdamW([p for m in models for p in m.parameters()], lr=1e-4, foreach=False)
            ids = torch.randint(0, vocab, (b * microbatches, s))
            tracker = _tracker()
            tracker.track_external(*models, opt)
            if trace is not None:
                for st in pipeline_stages:
                    _trace_actions(st, tracker, trace)
            with tracker:
                for i in range(2):
                    if trace is not None:
                        trace.clear()
                    opt.zero_grad()
                    if rank == 0:
                        schedule.step(ids, target=ids, losses=[], return_outputs=False)
                    else:
                        schedule.step()
                    opt.step()
                    if trace is not None:
                        trace.append(("opt.step", *_totals(tracker)))
                    if i == 0:
                        tracker.reset_mod_stats()
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        schedules.PipelineScheduleMulti._warmup_p2p = warmup
        mod_tracker.register_multi_grad_hook = hook
        _forget_redistribute_plans()
    return peak_total(snapshot)


def _totals(tracker) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """MemTracker's live bytes now and its peak so far, on the one device."""
    (current,) = tracker.get_tracker_snapshot().values()
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    return float(current["Total"]), float(peak["Total"])


def _trace_actions(stage, tracker, trace: list) -> None:  # type: ignore[no-untyped-def]
    """Record (action, live, peak) after each of the stage's forwards, input and weight backwards and its reduce."""
    names = {"forward_one_chunk": "F", "backward_one_chunk": "I", "backward_weight_one_chunk": "W", "perform_reduce_grad": "R"}
    for method, kind in names.items():
        original = getattr(stage, method)

        def traced(*args, _original=original, _kind=kind, **kwargs):  # type: ignore[no-untyped-def]
            out = _original(*args, **kwargs)
            j = args[0] if _kind != "R" else ""
            if _kind == "I" and kwargs.get("full_backward", True):
                _kind = "B"
            trace.append((f"{_kind}{stage.stage_index}.{j}", *_totals(tracker)))
            return out

        setattr(stage, method, traced)
