"""One pipeline stage of torchtitan's Llama under FSDP2 and torch's Schedule1F1B, tensor by tensor.

torchtitan (parallelisms/pipeline_llama.py pipeline_llama_manual_split at 9dec370) gives each pipeline rank a copy of the
Transformer with only its layers, the embedding on the first stage, the final norm and output on the last;
apply_fsdp(pp_enabled=True) wraps every block and the root with reshard_after_forward=False. torch's pipelining then
(PP_SOURCES):
- runs the stage's micro-batches in 1F1B order: min(m, p - s) forwards, then one backward and one forward in turn, then
  the remaining backwards;
- keeps the stage's unsharded parameters from the first forward to the end of the last backward (no reshard after
  forward, set_reshard_after_backward(False) for every backward), and every unsharded gradient across micro-batches in
  FSDP2's reduce dtype (fp32): the first backward copies each bf16 gradient to fp32, later ones add in place; only
  perform_reduce_grad, after the last backward, reshards and reduce-scatters each unit (root first);
- holds one activation receive buffer per micro-batch on every stage but the first and one gradient receive buffer per
  micro-batch on every stage but the last (persistent; a received gradient is its buffer), each micro-batch's stage
  output in fwd_cache until its backward, the input's gradient in the send ops until the next backward's are made,
  and, where the trainer asks step() for its outputs (return_outputs: torchtitan at 9dec370 took the default, True;
  since pytorch/torchtitan#1922, 2025-10-22, it passes False), every micro-batch's output (pred) on the last stage in
  output_chunks, concatenated at the end of step() and kept until the next step; without them a pred goes with its
  micro-batch's fwd_cache entry, at the end of its backward.
With tp > 1 each stage's blocks, embedding and loss are memory_torchtitan_tp's (PP_SOURCES['tp']); with cp > 1 the blocks run
torch's ring attention (memory_torchtitan_cp, its CP_SOURCES['pp'] for what context_parallel holds around schedule.step).
The model code is memory_torchtitan's (its blocks keyed per micro-batch); the loss is train.py's loss_fn, computed by
the schedule right after the last stage's forward of each micro-batch (pred is not deleted: fwd_cache holds it).

Ground truth: MemTracker over torch's PipelineStage and Schedule1F1B running torchtitan's stage on fake ranks
(tests/ground_truth/tiny_torchtitan_pp.py, test_torch_memory_pipeline.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.core import memory_torchtitan_tp as tp_walk
from parcalc.core.memory_torchtitan import block_backward, block_forward, mm_backward, norm_backward
from parcalc.core.memory_torchtitan_compile import compiled_block_backward, compiled_block_forward
from parcalc.core.memory_torchtitan_tp_compile import compiled_tp_block_backward, compiled_tp_block_forward
from parcalc.core.memory_walk import StepHooks, StepShapes, Walk, cross_entropy_backward, norm_forward
from parcalc.core.model import TransformerModel

TORCH_PP = "pytorch/pytorch v2.13.0 torch/distributed/pipelining"
PP_SOURCES = {
    "split": ("pytorch/torchtitan at 9dec370 torchtitan/parallelisms/pipeline_llama.py pipeline_llama_manual_split (layers outside "
              "the stage deleted, tok_embeddings / norm / output None off the first / last stage; model.py Transformer.forward "
              "passes through them); parallelize_llama.py apply_fsdp: reshard_after_forward=False for every block and the root "
              "when pp_enabled"),
    "order": f"{TORCH_PP}/schedules.py:1049-1177 Schedule1F1B._step_microbatches (warmup_chunks = min(m, p - s), then 1B1F, then the rest)",
    "no_sync": (f"{TORCH_PP}/stage.py:844-847 backward_maybe_with_nosync (set_reshard_after_backward(False), "
                "set_requires_gradient_sync(False)), 1164-1191 perform_reduce_grad (post_backward of every param group, then "
                "the root's final callback); torch/distributed/fsdp/_fully_shard/_fsdp_param.py:802-821 "
                "to_accumulated_grad_if_needed (the bf16 gradient copied to reduce_dtype) and accumulate_unsharded_grad_if_needed "
                "(added in place)"),
    "buffers": (f"{TORCH_PP}/stage.py _create_act_recv_info / _create_grad_recv_info (one receive buffer per micro-batch, kept), "
                "forward_one_chunk fwd_cache (the stage's output and inputs until the micro-batch's backward), output_chunks "
                "and schedules.py _merge_outputs (the last stage's outputs, concatenated at the end of step)"),
    "tp": ("pytorch/torchtitan at 9dec370 train.py: models_pipelining_fns splits the model into model_parts, then `for m in "
           "model_parts: models_parallelize_fns[model_name](m, world_mesh, parallel_dims, job_config)` (apply_tp, apply_ac, "
           "apply_fsdp on each stage's module, parallelize_llama.py); under apply_tp a block returns RowwiseParallel(output_layouts="
           "Shard(1))'s local tensor, b x s / tp x hidden, which the stage sends (the 2024 pipeline_llama sized its stages' "
           "I/O the same way: local_seq_len = seq_len // tp); train_context's loss_parallel() around schedule.step"),
    "outputs": (f"{TORCH_PP}/schedules.py step(return_outputs=True by default; save_forward_output=return_outputs keeps each "
                "output in output_chunks); pytorch/torchtitan e5ef99a 'Update PP to release memory earlier (#1922)', 2025-10-22: "
                "trainer.py passes return_outputs=False"),
}


@dataclass(frozen=True)
class StagePlan:
    index: int  # s
    stages: int  # p
    micro_batches: int  # m
    first_layer: int
    last_layer: int  # exclusive
    return_outputs: bool = False  # the last stage keeps every micro-batch's output and merges them (PP_SOURCES['outputs'])
    tp: int = 1  # the stage's blocks under apply_tp (PP_SOURCES['tp']): sequence shards sent and received, loss parallel
    compiled: bool = False  # each block under torch.compile (its TP code: parcalc.core.memory_torchtitan_tp_compile)
    # one of a rank's virtual stages under an interleaved schedule (parcalc.core.memory_pipeline_interleaved): its tensors
    # keyed apart from the rank's other stages' (each its own PipelineStage: fwd_cache, receive buffers, grads_input), its
    # phases named by it; "" for the one stage of a 1F1B rank
    tag: str = ""
    where: str = ""

    def key(self, name: str) -> str:
        """The schedule's per-stage tensor `name` (pp.act_recv{j}, pp.sent_grad, ...) of this stage."""
        return f"pp.{self.tag}{name}"

    def mb(self, j: int) -> str:
        """The key prefix of micro-batch j's tensors on this stage."""
        return f"m{j}.{self.tag}"

    def stream_bytes(self, x: StepShapes) -> float:
        """A micro-batch's residual stream as the stage sends and receives it: under apply_tp its sequence shard."""
        return x.T / self.tp * x.h * x.c

    @property
    def first(self) -> bool:
        return self.index == 0

    @property
    def last(self) -> bool:
        return self.index == self.stages - 1

    def order(self) -> list[tuple[str, int]]:
        """Schedule1F1B's order on this stage (PP_SOURCES['order'])."""
        m = self.micro_batches
        warmup = min(m, self.stages - self.index)
        steps = [("F", j) for j in range(warmup)]
        forward, backward = warmup, 0
        while True:
            steps.append(("B", backward))
            backward += 1
            if forward == m:
                break
            steps.append(("F", forward))
            forward += 1
        steps += [("B", j) for j in range(backward, m)]
        return steps


class PipelineHooks(StepHooks):
    """FSDP2's gradient accumulation across micro-batches (PP_SOURCES['no_sync']) around another hooks object's
    unsharding: `accumulate` after each unit's backward, `reduce_all` at the end."""

    def __init__(self, fsdp: StepHooks, grad_bytes: float, reduce_bytes: float) -> None:
        self.fsdp = fsdp
        self.ratio = reduce_bytes / grad_bytes
        self.accumulated: dict[str, list[str]] = {}

    def accumulate(self, walk: Walk, unit: str, grads: list[str]) -> None:
        first = unit not in self.accumulated  # the unit's first backward (each stage's own, on a rank of several)
        for key in grads:
            if first:
                name = f"acc.{unit}.{key.split('.', 1)[1]}"
                walk.alloc(name, walk.live[key].bytes * self.ratio, "gradients", "unsharded gradients accumulated in fp32")
                self.accumulated.setdefault(unit, []).append(name)
            walk.free(key)

    def before_forward(self, walk: Walk) -> None:
        self.fsdp.before_forward(walk)

    def before_layer(self, walk: Walk, i: int) -> None:
        self.fsdp.before_layer(walk, i)

    def after_forward(self, walk: Walk) -> None:
        self.fsdp.after_forward(walk)
    # the backward's unshard and prefetch hooks find every unit unsharded since the first forward: nothing to do


def _stage_forward(walk: Walk, model: TransformerModel, x: StepShapes, plan: StagePlan, policies: tuple[str, ...], j: int,
                   hooks: PipelineHooks) -> None:  # fmt: skip
    p = plan.mb(j)
    walk.phase = f"forward: micro-batch {j + 1} of {plan.micro_batches}{plan.where}"
    hooks.before_forward(walk)
    if plan.first and plan.tp > 1:
        current = tp_walk.embedding_forward(walk, x, plan.tp, p)
    elif plan.first:
        current = f"{p}emb"
        walk.alloc(current, x.T * x.h * x.c, "activations", "embedding output (residual stream)")
    else:
        current = plan.key(f"act_recv{j}")
    for i in range(plan.first_layer, plan.last_layer):
        hooks.before_layer(walk, i)
        out = walk.replayable(_layer_forward, f"{p}L{i}", (current,), x, plan.tp, policies[i], plan.compiled)
        if policies[i] == "none" and not current.startswith("pp.") and not plan.compiled:  # a compiled block saves its input
            walk.free(current)
        current = out
    if plan.last and plan.tp > 1:  # loss parallel on the rank's vocabulary shard; pred kept by fwd_cache
        tp_walk.head_forward(walk, x, plan.tp, current, p)
        walk.relabel(f"{p}head.out", "pred (kept by fwd_cache and output_chunks)" if plan.return_outputs else
                     "pred (kept by fwd_cache until its backward)")  # fmt: skip
        hooks.after_forward(walk)
        tp_walk.loss_forward(walk, x, plan.tp, p)
    elif plan.last:
        y = norm_forward(walk, x, f"{p}final", current, saved=True)
        walk.free(current)
        walk.alloc(f"{p}head.out", x.T * x.V * x.c, "logits and loss",
                   "pred (kept by fwd_cache and output_chunks)" if plan.return_outputs else "pred (kept by fwd_cache until its backward)")
        walk.relabel(y, "final norm output (the output projection's input)", "activations")
        hooks.after_forward(walk)
        walk.alloc(f"{p}logits32", x.T * x.V * 4, "logits and loss", "pred.flatten(0, 1).float()")
        walk.alloc(f"{p}logsoftmax", x.T * x.V * 4, "logits and loss", "cross_entropy's log_softmax (fp32, saved)")
        walk.transient(f"{p}loss", 4, "logits and loss", "loss")
        walk.free(f"{p}logits32")
    else:
        walk.rename(current, f"{p}stage.out", "the stage's output (fwd_cache, until its backward)")
        hooks.after_forward(walk)


def _stage_backward(walk: Walk, model: TransformerModel, x: StepShapes, plan: StagePlan, policies: tuple[str, ...], j: int,
                    embedding_tables: int, hooks: PipelineHooks, root: str = "root") -> None:  # fmt: skip
    """Micro-batch j's whole backward on the stage; `root`: the FSDP unit of the stage's embedding or head (a V's rank 0
    holds both ends, each its own root: memory_pipeline_zero_bubble.root_unit)."""
    p = plan.mb(j)
    walk.phase = f"backward: micro-batch {j + 1} of {plan.micro_batches}{plan.where}"
    if plan.last and plan.tp > 1:
        tp_walk.loss_backward(walk, x, plan.tp, p)
        tp_walk.head_backward(walk, x, plan.tp, f"{p}g_stream", p)
    elif plan.last:
        walk.rename(f"{p}logsoftmax", "logsoftmax")
        g32 = cross_entropy_backward(walk, x)
        walk.alloc(f"{p}g_logits", x.T * x.V * x.c, "logits and loss", "pred's gradient (.float()'s backward, bf16)")
        walk.free(g32)
        mm_backward(walk, x, f"{p}head", f"{p}g_logits", x.h, x.V, f"{p}final.g_y", f"{p}final.out", converted=False)
        norm_backward(walk, x, f"{p}final", f"{p}final.g_y", f"{p}g_stream")
    else:
        walk.rename(plan.key(f"grad_recv{j}"), f"{p}g_stream")
    for i in reversed(range(plan.first_layer, plan.last_layer)):
        inp = (f"{p}emb" if plan.first else plan.key(f"act_recv{j}")) if i == plan.first_layer else f"{p}L{i - 1}.x2"
        hooks.before_layer_backward(walk, i)
        walk.replayable(_layer_backward, f"{p}L{i}", (inp, f"{p}g_stream", f"{p}g_stream_next"), x, plan.tp, policies[i], plan.compiled)
        if not inp.startswith("pp."):
            walk.free(inp)
        walk.rename(f"{p}g_stream_next", f"{p}g_stream")
        hooks.accumulate(walk, f"L{i}", walk.keys_under(f"{p}L{i}.", ".grad"))
    walk.free(f"{p}stage.out")
    if plan.last and not plan.return_outputs:  # backward_one_chunk popped its fwd_cache entry: pred goes when it returns
        walk.free(f"{p}head.out")
    if plan.first and plan.tp > 1:
        tp_walk.embedding_backward(walk, x, plan.tp, f"{p}g_stream", embedding_tables, p)
    elif plan.first:
        for table in range(embedding_tables):
            walk.alloc(f"{p}g_embedding{table}", x.V * x.h * x.c, "gradients", "embedding gradient")
        walk.free(f"{p}g_stream", *(f"{p}g_embedding{t}" for t in range(1, embedding_tables)))
        walk.rename(f"{p}g_embedding0", f"{p}embedding.grad")
    else:  # the input's gradient, sent to the stage before: the schedule's send ops hold it until the next backward's are made
        walk.free(plan.key("sent_grad"))
        walk.rename(f"{p}g_stream", plan.key("sent_grad"), "the stage input's gradient (held by the schedule's send ops)")
    if not plan.last:
        walk.alloc(plan.key(f"grad_recv{j}"), plan.stream_bytes(x), "buffers", "gradient receive buffer (one per micro-batch)")
    hooks.accumulate(walk, root, [k for k in (f"{p}embedding.grad", f"{p}head.grad", f"{p}final.grad") if k in walk.live])


def _layer_forward(walk: Walk, layer: str, names: tuple[str, ...], x: StepShapes, tp: int, policy: str, compiled: bool = False) -> str:
    """Block i's forward on a micro-batch (`layer`: its tensors' prefix m{j}.L{i}; names: its input), as Walk.replayable
    calls it; returns its output's key."""
    prefix, i = _prefix_and_index(layer)
    (inp,) = names
    if compiled and tp > 1:
        return compiled_tp_block_forward(walk, x, i, inp, policy, tp, prefix=prefix)
    if compiled:
        return compiled_block_forward(walk, x, i, inp, policy, prefix=prefix)
    if tp > 1:
        return tp_walk.block_forward(walk, x, i, inp, policy, tp, prefix=prefix)
    return block_forward(walk, x, i, inp, policy, prefix=prefix)


def _layer_backward(walk: Walk, layer: str, names: tuple[str, ...], x: StepShapes, tp: int, policy: str, compiled: bool = False) -> None:
    """Block i's recomputation (unless its policy keeps everything) and backward on a micro-batch, as Walk.replayable
    calls it; names: its input, the gradient it receives, the one it passes on."""
    prefix, i = _prefix_and_index(layer)
    inp, g_out, into = names
    if compiled:  # the recomputation, if any, is part of the compiled backward, which frees its input: not a receive buffer
        held = f"{prefix}L{i}.received" if inp.startswith("pp.") else inp
        if tp > 1:
            compiled_tp_block_backward(walk, x, i, tp, held, g_out, into, policy, prefix=prefix)
        else:
            compiled_block_backward(walk, x, i, held, g_out, into, policy, prefix=prefix)
    elif tp > 1:
        if policy != "none":
            tp_walk.gathered_output_gradient(walk, x, tp, f"{prefix}L{i}.w2")  # before the recomputation (memory_torchtitan_tp)
            tp_walk.block_forward(walk, x, i, inp, policy, tp, recomputing=True, prefix=prefix)
        tp_walk.block_backward(walk, x, i, tp, g_out, into, prefix=prefix)
    else:
        if policy != "none":
            block_forward(walk, x, i, inp, policy, recomputing=True, prefix=prefix)
        block_backward(walk, x, i, g_out, into, prefix=prefix)


def _prefix_and_index(layer: str) -> tuple[str, int]:
    """`m{j}.` (StagePlan.mb) and i of a block's key prefix m{j}.L{i}."""
    prefix, _, index = layer.rpartition("L")
    return prefix, int(index)


def walk_stage(walk: Walk, model: TransformerModel, x: StepShapes, plan: StagePlan, policies: tuple[str, ...], embedding_tables: int,
               hooks: PipelineHooks) -> None:  # fmt: skip
    """The stage's step in Schedule1F1B's order, then perform_reduce_grad and the merge of the last stage's outputs."""
    receive_buffers(walk, x, plan)
    for kind, j in plan.order():
        if kind == "F":
            _stage_forward(walk, model, x, plan, policies, j, hooks)
        else:
            _stage_backward(walk, model, x, plan, policies, j, embedding_tables, hooks)
    walk.phase = "backward: perform_reduce_grad (each unit's reduce-scatter)"
    hooks.fsdp.reduce_all(walk, hooks.accumulated)  # type: ignore[attr-defined]
    walk.free(plan.key("sent_grad"))  # step() returns
    if plan.last and plan.return_outputs:
        walk.phase = "end of step: the outputs merged"
        walk.transient("pp.merged", plan.micro_batches * x.T * (x.V // plan.tp) * x.c, "logits and loss", "output_chunks concatenated")


def receive_buffers(walk: Walk, x: StepShapes, plan: StagePlan) -> None:
    """The stage's receive buffers, one per micro-batch each way, made by its first step and kept (PP_SOURCES['buffers'])."""
    for j in range(plan.micro_batches):
        if not plan.first:
            walk.alloc(plan.key(f"act_recv{j}"), plan.stream_bytes(x), "buffers", "activation receive buffer (one per micro-batch)")
        if not plan.last:
            walk.alloc(plan.key(f"grad_recv{j}"), plan.stream_bytes(x), "buffers", "gradient receive buffer (one per micro-batch)")
