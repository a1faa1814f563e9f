"""A pipeline stage of torchtitan's Llama under FSDP2 and torch.distributed.pipelining's Schedule1F1B, for MemTracker.

The stage is built as torchtitan/parallelisms/pipeline_llama.py pipeline_llama_manual_split does at 9dec370: the whole
Transformer (tiny_torchtitan_tp's copy of model.py) with the layers outside [start, stop) deleted, tok_embeddings None but
on the first stage, norm and output None but on the last; Transformer.forward passes through what is None. Then
apply_ac and apply_fsdp with pp_enabled (every block and the root with reshard_after_forward=False), PipelineStage and
Schedule1F1B(n_microbatches, loss_fn) run one rank's stage on a (pp, dp) mesh of fake ranks; train.py's step:
schedule.step(ids) on the first stage, step(target=labels, losses=[]) on the last, then the optimizer.

Three things are set for the CPU under FakeTensorMode, none of them memory of the GPU step:
- the stage's input and output shapes are given (PipelineStage's input_args / output_args / output_grads /
  input_grads) and the schedule's P2P warm-up vote (a .item() on a received tensor, torch 2.13 schedules.py:372) is
  replaced by its outcome, static shapes;
- MemTracker refuses a module's second forward in one iteration (mem_tracker.py:671, "multiple iterative calls"), which
  every micro-batch is: here a repeated forward only adds its snapshots; the memory accounting is untouched;
- DTensor's sharding propagation is left untracked (tiny_torchtitan_tp._untracked_sharding_propagation).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from copy import deepcopy

import torch
import torch.nn.functional as F

from . import tiny_torchtitan_tp as tt
from .tiny_llama import LlamaConfig
from .tiny_torchtitan import apply_ac, loss_fn, update_own_peak


class Stage(tt.Transformer):
    """pipeline_llama_manual_split's stage: layers [start, stop) of the whole model, the embedding on the first, the final
    norm and output on the last; model.py's forward passes through the missing ones."""

    def __init__(self, c: LlamaConfig, vocab: int, seq: int, start: int, stop: int, first: bool, last: bool) -> None:
        super().__init__(c, vocab, seq)
        for name in list(self.layers.keys()):
            if not start <= int(name) < stop:
                del self.layers[name]
        if not first:
            self.tok_embeddings = None  # type: ignore[assignment]
        if not last:
            self.norm = None  # type: ignore[assignment]
            self.output = None  # type: ignore[assignment]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens) if self.tok_embeddings else tokens
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        h = self.norm(h) if self.norm else h
        return self.output(h) if self.output else h


@contextmanager
def _cp_context(cp_mesh, ids: torch.Tensor, labels: torch.Tensor) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """train.py's CP context around schedule.step under PP at 9dec370: create_context_parallel_ctx(cp_buffers=[input_ids,
    labels, model.freqs_cis], ...) with `model` the whole model train.py built under torch.device("meta") (train.py:110) and
    pipelined by deep copies (pipeline_llama.py:76): its freqs_cis is a meta tensor, no device memory, and each stage's own
    freqs_cis stays whole (apply_rotary_emb slices freqs_cis[0:seqlen]: a view). So the device buffers context_parallel
    shards are the ids and labels; the ring attention as tiny_torchtitan_cp's."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    from .tiny_torchtitan_cp import _ring_attention

    set_rotate_method("allgather")  # torchtitan's default
    with context_parallel(cp_mesh, buffers=[ids, labels], buffer_seq_dims=[1, 1], no_restore_buffers={ids, labels}):
        patched, F.scaled_dot_product_attention = F.scaled_dot_product_attention, _ring_attention(cp_mesh.get_group())
        try:
            yield
        finally:
            F.scaled_dot_product_attention = patched


def _forget_redistribute_plans() -> None:
    """DTensor caches its redistribution plans and sharding decisions by mesh (torch 2.13 distributed/tensor/_redistribute.py:
    _planner_cache and the @cache of _gen_transform_infos; _sharding_prop.py's lru caches); a mesh equal to one of an
    earlier, destroyed process group would reuse that group's name. Cleared before and after each run (host-side
    bookkeeping, no memory of the step)."""
    from torch.distributed.tensor import DTensor, _redistribute

    _redistribute.clear_redistribute_planner_cache()
    _redistribute._gen_transform_infos.cache_clear()
    propagator = DTensor._op_dispatcher.sharding_propagator
    propagator.propagate_op_sharding.cache_clear()
    propagator._propagate_tensor_meta_cached.cache_clear()


LAST_PARTS: dict[str, float] = {}  # the last tracked peak by MemTracker's categories (parameters, gradients, ...)


def peak_total(snapshot: dict) -> float:
    """The one device's peak of a MemTracker "peak" snapshot, its categories kept in LAST_PARTS (both schedules' runs)."""
    (_device, parts), = snapshot.items()
    LAST_PARTS.clear()
    LAST_PARTS.update({str(k): float(v) for k, v in parts.items()})
    return float(parts["Total"])


def _tracker():  # type: ignore[no-untyped-def]
    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker, _ModState

    class Tracker(MemTracker):
        def _track(self, reftype, t):  # type: ignore[no-untyped-def]
            tt.track_every_storage(self, reftype, t)

        def _pre_fw_hook(self, module, inputs):  # type: ignore[no-untyped-def]
            if module in self.memory_tracking and not self._mod_tracker.is_bw:  # a micro-batch's forward: snapshots only
                stats = self.memory_tracking[module]
                stats.input_mem = self._track_inputs_or_outputs(inputs)
                snapshot = self.get_tracker_snapshot()
                stats.local_peak = {dev: snap[_TOTAL_KEY] for dev, snap in snapshot.items()}
                stats.snapshots.setdefault(_ModState.PEAK_FW, []).append(snapshot)
                stats.snapshots.setdefault(_ModState.PRE_FW, []).append(deepcopy(snapshot))
                return
            super()._pre_fw_hook(module, inputs)

        def _update_peak_stats(self, peak_state):  # type: ignore[no-untyped-def]
            update_own_peak(self, peak_state)  # only the tracker's own peak, the one the runs here read

    return Tracker()


def tracked_stage_peak(c: LlamaConfig, vocab: int, b: int, s: int, pp: int, dp: int, stage: int, bounds: tuple[int, int],
                       microbatches: int, ac: str, return_outputs: bool = False, tp: int = 1, float8: bool = False, cp: int = 1,
                       fp8_all_gather: bool = False) -> float:  # fmt: skip
    """MemTracker's peak (bytes) over two steps of stage `stage` of `pp` holding layers [bounds), under FSDP2 over `dp` ranks
    (bf16 params, fp32 reduce, for-loop AdamW) and Schedule1F1B over `microbatches` micro-batches of b x s tokens; the last
    stage's step(return_outputs=...) as torchtitan's trainer calls it (False since pytorch/torchtitan#1922). With `tp` > 1
    the stage is parallelised as train.py at 9dec370 does each of its model_parts (models_parallelize_fns: apply_tp with
    loss parallel, apply_ac, apply_fsdp) on a (pp, dp, tp) mesh, the step under loss_parallel() (train_context); the
    stage sends and receives the sequence shard its last block returns (RowwiseParallel(output_layouts=Shard(1)) with
    use_local_output: a b x s / tp x hidden local tensor). `float8`: torchtitan's float8 converter first (train.py at 9dec370
    converts the whole model before pipelining it; tiny_torchtitan_tp.tracked_tp_peak's), apply_tp's Float8 plans with tp.
    `cp` > 1: a (pp, dp, cp, tp) mesh, fully_shard over the flattened dp x cp ranks, each step's batch made anew and
    schedule.step run under torch's context_parallel as train.py at 9dec370 runs it (_cp_context: the ids and labels
    sharded over the CP group, the ring attention in place of SDPA), the stage's I/O b x s / cp / tp x hidden.
    `fp8_all_gather`: the converter's enable_fsdp_float8_all_gather (tiny_torchtitan_tp.tracked_tp_peak's)."""
    import contextlib

    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, schedules
    from torch.distributed.pipelining._utils import InferenceMode
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # one group per world size: a mesh equal to that of a destroyed group would find that group's names in DTensor's
    # caches (_forget_redistribute_plans); the stage is PipelineStage's stage_index, whatever this rank's pp coordinate
    if dist.is_initialized() and (dist.get_world_size() != pp * dp * tp * cp or cp > 1):
        dist.destroy_process_group()
        _forget_redistribute_plans()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=pp * dp * tp * cp, store=FakeStore())
    if cp > 1:
        mesh = init_device_mesh("cpu", (pp, dp, cp, tp), mesh_dim_names=("pp", "dp", "cp", "tp"))
        shard_mesh = mesh["dp", "cp"]._flatten("dp_cp")
    else:
        mesh = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
        shard_mesh = mesh["dp"]
    first, last = stage == 0, stage == pp - 1

    def static_shapes(self, stages, has_backward, p2p_done):  # type: ignore[no-untyped-def]
        for st in stages:
            st._inference_mode = InferenceMode.STATIC

    warmup = schedules.PipelineScheduleSingle._warmup_p2p
    schedules.PipelineScheduleSingle._warmup_p2p = static_shapes
    try:
        with FakeTensorMode(), tt._real_mesh_tables(), tt._untracked_sharding_propagation():
            model = Stage(c, vocab, s, *bounds, first, last)
            if float8:  # torchtitan/float8.py Float8Handler.convert_to_float8_training at 9dec370
                from torchao.float8 import Float8LinearConfig, convert_to_float8_training

                convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=fp8_all_gather),
                                           module_filter_fn=lambda mod, fqn: fqn != "output")
            if tp > 1:
                tt.apply_tp(model, mesh["tp"], enable_float8=float8)
            apply_ac(model, ac)
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for block in model.layers.values():
                fully_shard(block, mesh=shard_mesh, mp_policy=policy, reshard_after_forward=False)
            fully_shard(model, mesh=shard_mesh, mp_policy=policy, reshard_after_forward=False)
            local = s // cp  # the CP shard's tokens
            # a received activation requires grad (torch 2.13 stage.py _retrieve_recv_activations: its metadata's requires_grad;
            # inferred, it is the previous stage's output's): static input_args carry their own flag, and without it no stage
            # computes or sends its input's gradient (the 1F1B last stage's 1.0089 of session 20 was that gradient)
            inp = (torch.empty(b, local, dtype=torch.int64) if first
                   else torch.empty(b, local // tp, c.hidden, dtype=torch.bfloat16, requires_grad=True))
            out = torch.empty(b, local, vocab, dtype=torch.bfloat16) if last else torch.empty(b, local // tp, c.hidden, dtype=torch.bfloat16)
            pipeline_stage = PipelineStage(model, stage, pp, torch.device("cpu"), input_args=(inp,), output_args=(out,),
                                           output_grads=None if last else (torch.empty_like(out),),
                                           input_grads=(None,) if first else (torch.empty_like(inp),), group=mesh["pp"].get_group())  # fmt: skip
            schedule = Schedule1F1B(pipeline_stage, n_microbatches=microbatches, loss_fn=loss_fn)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
            ids = torch.randint(0, vocab, (b * microbatches, s))
            tracker = _tracker()
            tracker.track_external(model, opt)
            with tracker, (loss_parallel() if tp > 1 else contextlib.nullcontext()):
                for i in range(2):
                    opt.zero_grad()
                    if cp > 1:  # train.py: a new batch each step, sharded in place by context_parallel
                        ids = torch.randint(0, vocab, (b * microbatches, s))
                        labels = torch.randint(0, vocab, (b * microbatches, s))
                    else:
                        labels = ids
                    with _cp_context(mesh["cp"], ids, labels) if cp > 1 else contextlib.nullcontext():
                        if first:
                            schedule.step(ids)
                        elif last:
                            schedule.step(target=labels, losses=[], return_outputs=return_outputs)
                        else:
                            schedule.step()
                    opt.step()
                    if i == 0:
                        tracker.reset_mod_stats()
            snapshot = tracker.get_tracker_snapshot("peak")
    finally:
        schedules.PipelineScheduleSingle._warmup_p2p = warmup
        _forget_redistribute_plans()
    return peak_total(snapshot)
