"""Memory as FSDP2 allocates it: the peak over one training step under `fully_shard`.

PyTorch's FSDP2 (torch.distributed.fsdp.fully_shard) applied to each transformer block and to the
root module (which keeps the embedding, the final norm and the LM head) holds, on each of the N
ranks of its shard group, the model's parameters in 1/N shards and gathers one block at a time.
This module walks one steady-state step tensor by tensor, as parcalc.core.memory_timeline does for
the hf profile, and reuses that walk for what the model code saves (the same transformers
`LlamaDecoderLayer`, its RMSNorm, RoPE, SDPA, SwiGLU MLP or Mixtral's routed experts, and the LM head's fp32 loss): FSDP2's
MixedPrecisionPolicy casts the gathered parameters to param_dtype, so the model runs in that dtype
without autocast (the walk's --precision bf16 path). FSDP2's own tensors enter through the walk's
hooks around each block (FSDP_SOURCES, torch 2.13's torch/distributed/fsdp/_fully_shard/*.py):

- before the step: each parameter's padded fp32 shard (ceil(rows / N) rows), AdamW's two states on
  the shards (torch.optim, zeros_like of the sharded DTensor); gradients freed by zero_grad;
- forward, per unit (root first, then each block): the all-gather copy-in (the shards cast to
  param_dtype, a transient), the all-gather output (N x the unit's shards), the unsharded parameters
  it is copied out to; the previous unit's all-gather output is freed only at this copy-out (it is
  kept to overlap copy-out and the next all-gather); a block's unsharded parameters are freed after
  its forward (reshard_after_forward), the root's are kept (never resharded after forward);
- backward, per block from the last: the root's pre-backward hook prefetches the last block's
  all-gather; each block's pre-backward copies its own out and prefetches the block before it; the
  block's unsharded gradients (param_dtype) live until its post-backward, which reshards its
  parameters, frees the previous block's reduce-scatter input, copies the gradients into a new one
  (N x shards, reduce_dtype), frees them, and keeps the reduced shard (cast to the shards' dtype
  when reduce_dtype differs) as the sharded gradient; the root's reduce-scatter runs in the final
  callback, after the embedding's backward;
- the optimizer step: fused AdamW in place; foreach AdamW's sqrt of every exp_avg_sq at once
  (torch/optim/adam.py _multi_tensor_adam); the for-loop's two temporaries of one parameter.

Ground truth: torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker over transformers'
LlamaForCausalLM under FakeTensorMode with a fake process group, as torchtitan's
scripts/estimate/estimation.py runs it (tests/ground_truth/test_torch_memory_fsdp.py). Nothing here
is fitted to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from parcalc.core import memory_torchao_float8 as float8
from parcalc.core.allocator import K_SMALL_SIZE, block_bytes, reserved_bytes, reserved_floor_of_sums
from parcalc.core.allocator_replay import StreamProgram, replay_stream
from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.layout import Layout
from parcalc.core.memory_timeline import (
    REPLAYED_STEPS,
    check_hf_model,
    hf_model_gaps,
    shapes_of,
    walk_backward,
    walk_forward,
)
from parcalc.core.memory_torchtitan import POLICIES, layer_model
from parcalc.core.memory_torchtitan import walk_step as torchtitan_step
from parcalc.core.memory_torchtitan_cp import context_parallel_buffers
from parcalc.core.memory_torchtitan_tp import walk_step as torchtitan_tp_step
from parcalc.core.memory_walk import WALK_PROGRESS, StepHooks, StepPeak, Walk, parameter_bytes, peak_of
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

TORCH = "pytorch/pytorch v2.13.0 torch/distributed/fsdp/_fully_shard"
FSDP_SOURCES = {
    "shards": (f"{TORCH}/_fsdp_param.py:307 FSDPParam._init_sharded_param: param_data.new_zeros(padded_sharded_size), dim 0 "
               "padded to a multiple of the shard group (ceil(rows / N) rows a rank), in the parameter's own dtype"),
    "copy_in": (f"{TORCH}/_fsdp_collectives.py:419 _get_param_all_gather_inputs: one flat param_dtype tensor of all the unit's "
                "shards (the MixedPrecisionPolicy cast), freed when foreach_all_gather returns"),
    "all_gather": (f"{TORCH}/_fsdp_collectives.py:351 foreach_all_gather: all_gather_output of N x the unit's shards in "
                   "param_dtype; _fsdp_param_group.py:429-432 and 483 wait_for_unshard: in forward the result is kept in "
                   "comm_ctx.all_gather_state until the next unit's copy-out (or the root's post-forward, _fsdp_state.py:342); "
                   "in backward it is freed right after its own copy-out"),
    "unsharded": (f"{TORCH}/_fsdp_param.py:616-626 init_all_gather_outputs and 1066-1072 alloc_storage / free_storage: each "
                  "parameter's unsharded param_dtype tensor (N x its padded shard), allocated at copy-out "
                  "(_fsdp_collectives.py:431 foreach_all_gather_copy_out) and freed by reshard"),
    "reshard": (f"{TORCH}/_fsdp_param_group.py:499 reshard and 557-563 post_forward (reshard_after_forward=True, the default, "
                "frees a block's unsharded parameters after its forward); _fsdp_state.py:203-207 _lazy_init: the root is "
                "never resharded after forward (its parameters are used again at once in backward)"),
    "prefetch": (f"{TORCH}/_fsdp_param_group.py:576-586 pre_backward and 795-830 _backward_prefetch: each unit's pre-backward "
                 "(a hook on its outputs' gradients) all-gathers the unit that ran before it in forward; the root's (on the loss) "
                 "prefetches the last block"),
    "reduce": (f"{TORCH}/_fsdp_param_group.py:588-720 post_backward: reshard, then free the previous unit's reduce-scatter "
               "input (reduce_scatter_max_input_buffers = 1, lines 648-657); _fsdp_collectives.py:597-612 foreach_reduce: "
               "the reduce-scatter input (N x shards, reduce_dtype; the unsharded gradients freed after the copy-in, line "
               "606), its output (the shards, reduce_dtype), line 696 cast to the parameters' dtype when reduce_dtype "
               "differs; the sharded gradients are views of that flat tensor; line 717 the input is kept "
               "(reduce_scatter_states) until the next post-backward"),
    "root_reduce": (f"{TORCH}/_fsdp_state.py:395-431 _root_post_backward_final_callback: the root's post_backward (its inputs, "
                    "the token ids, need no gradient, so autograd never calls it) and then reduce_scatter_states.clear()"),
    "adamw": ("pytorch/pytorch v2.13.0 torch/optim/adam.py: fused (torch._fused_adamw_, in place), foreach (_multi_tensor_adam "
              "line 762: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), every state's size at once), for-loop "
              "(_single_tensor_adam line 544: exp_avg_sq.sqrt() / bias_correction2_sqrt, two temporaries of one parameter); "
              "states created with zeros_like on the sharded parameters"),
    "streams": (f"{TORCH}/_fsdp_collectives.py:336-354 foreach_all_gather allocates the all-gather output (and the copy-in casts) "
                "under `with device_handle.stream(all_gather_copy_in_stream)` (separate streams for implicit prefetching, "
                "_fsdp_param_group.py _all_gather_streams); 597 the reduce-scatter input on the current stream; 611-617 the "
                "reduce-scatter output, whose views are the sharded gradients, and 697 its cast to the parameters' dtype under "
                "`with device_handle.stream(reduce_scatter_stream)`; c10/cuda/CUDACachingAllocator.cpp: a freed block returns "
                "to the pool of the stream it was allocated on (get_free_block matches BlockPool keys on the stream; with "
                "expandable_segments each stream maps its own segment), so each stream's pool holds its own peak"),
    "torchtitan": ("pytorch/torchtitan at 9dec370 (the commit of its Dec 2024 benchmarks, benchmarks/llama3_h100_202412_torchtitan.md): "
                   "torchtitan/parallelisms/parallelize_llama.py:329-339 apply_fsdp: fully_shard(transformer_block, "
                   "reshard_after_forward=int(layer_id) < len(model.layers) - 1) and fully_shard(model, ...); config_manager.py: "
                   "mixed_precision_param bfloat16, mixed_precision_reduce float32 (the only choice), --optimizer.fused off by "
                   "default, so optimizer.py builds AdamW with foreach=True; metrics.py get_peak_stats logs "
                   "reserved_bytes.all.peak as 'memory'. Later torchtitan (b5bcd76) defaults to fused AdamW and wraps "
                   "tok_embeddings and [norm, lm_head] as units of their own"),
    "launcher": ("pytorch/torchtitan run_llama_train.sh:22 at 9dec370 (the Dec 2024 benchmarks) and run_train.sh:24 at e7c0cae: "
                 "PYTORCH_CUDA_ALLOC_CONF=\"expandable_segments:True\" torchrun ..., so the caching allocator maps one growing "
                 "segment per stream and pool (parcalc.core.allocator.EXPANDABLE_SOURCE); torchtitan's train.py sets no allocator "
                 "setting of its own (`git grep expandable_segments` at e7c0cae finds the launch scripts only), so a run started "
                 "with torchrun directly, as the Trainy H200 page's command is (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md), "
                 "runs the allocator's defaults, expandable_segments off (memory --no-expandable-segments)"),
}
# "gradients": the unsharded ones (param_dtype), as the walk of the model code files a weight's .grad
KINDS = ("sharded parameters", "optimizer states", "sharded gradients", "unsharded parameters", "gradients",
         "all-gather buffers", "reduce-scatter buffers", "buffers", "activations", "logits and loss", "temporaries", "workspace")  # fmt: skip
OPTIMIZER_IMPLS = ("fused", "foreach", "for-loop")
CP_ROTATES = {"all-gather": "allgather", "p2p": "alltoall"}  # --cp-comm: torch's set_rotate_method (memory_torchtitan_cp)


@dataclass(frozen=True)
class FsdpStep:
    """What decides the memory of one step under fully_shard besides the model."""

    micro_batch: int
    seq_len: int
    shards: int  # N, the ranks of the shard group
    precision: Precision = Precision.MIXED_BF16  # mixed: fp32 shards, param_dtype bf16; bf16 / fp32: no cast
    reduce_bytes: float = 2.0  # reduce_dtype's bytes (MixedPrecisionPolicy(reduce_dtype=None) reduces in param_dtype)
    optimizer: Optimizer = Optimizer.ADAMW
    optimizer_impl: str = "foreach"  # torch.optim's default on CUDA, and torchtitan's at 9dec370 (fused in later versions)
    recompute: Recompute = Recompute.NONE  # full: each block checkpointed (its input kept, recomputed before its backward)
    reshard_last_block: bool = True  # torchtitan: False (FSDP_SOURCES['torchtitan'])
    cublas_workspace: float = 2 * 32 * 2**20  # HF_SOURCES["cublas"]; 0 on the CPU (FSDPMemTracker)
    embedding_backward_tables: int = 1  # memory_timeline.HfStep; 2 under FakeTensorMode (PyTorch's decomposition)
    step_counters_on_device: bool | None = None  # AdamW's state['step'] tensors: on the GPU for fused only (None: so)
    # whose model code runs: transformers' Llama / Mixtral decoder, or torchtitan's Transformer (parcalc.core.memory_torchtitan)
    model_code: str = "transformers"
    # torchtitan's code: each block's checkpointing ("none", "full", "op"; memory_torchtitan.POLICIES), where it is not the
    # same for all (selective layer checkpointing, every k-th block full); None: `recompute` for every block
    block_policies: tuple[str, ...] | None = None
    # torchtitan's code: the tensor-parallel ranks of apply_tp (sequence and loss parallel; parcalc.core.memory_torchtitan_tp),
    # `shards` then being the data-parallel ranks FSDP2 shards each rank's TP-local parameters over
    tp: int = 1
    # a pipeline stage of torchtitan's code (parcalc.core.memory_pipeline_stage): stage `pp_stage` of `pp`, its layers
    # [first, last), `micro_batches` micro-batches of micro_batch x seq_len tokens under Schedule1F1B
    pp: int = 1
    pp_stage: int = 0
    stage_layers: tuple[int, int] | None = None
    micro_batches: int = 1
    # whether Schedule1F1B.step keeps the last stage's outputs and concatenates them (return_outputs; PP_SOURCES['outputs']):
    # torchtitan passes False since pytorch/torchtitan#1922 (2025-10-22); the Dec 2024 code (9dec370) took the default, True
    pp_return_outputs: bool = False
    # an interleaved schedule (ScheduleInterleaved1F1B; parcalc.core.memory_pipeline_interleaved): the layers [first, last)
    # of each virtual stage pp_stage + k pp the rank holds, k = 0, 1, ... (stage_layers unused); () for one stage a rank
    pp_chunks: tuple[tuple[int, int], ...] = ()
    # torch's ScheduleZBVZeroBubble (parcalc.core.memory_pipeline_zero_bubble): pp_chunks are the layers of the rank's two
    # stages in a V, pp_stage and 2 pp - 1 - pp_stage, rank 0 holding the first stage and the last
    pp_zero_bubble: bool = False
    # with pp_zero_bubble: the V under torch's ScheduleDualPipeV instead (parcalc.core.memory_pipeline_dualpipe), its
    # forwards paired with whole backwards
    pp_dualpipev: bool = False
    # torchtitan's code with each block under torch.compile (apply_compile; parcalc.core.memory_torchtitan_compile)
    compiled: bool = False
    # and the loss compiled too (torchtitan's build_cross_entropy_loss from 2025-04-02; parcalc.core.memory_compiled_loss)
    compiled_loss: bool = False
    # --precision fp8 under torchtitan: torchao's enable_fsdp_float8_all_gather (memory_torchao_float8 AO_SOURCES['all_gather']):
    # the Float8Linears' weights all-gathered in FP8 with a precomputed scale, the unsharded weights FP8
    float8_all_gather: bool = False
    # torchtitan's context-parallel ranks (parcalc.core.memory_torchtitan_cp): each runs s / cp tokens of every sequence and
    # the ring attention; `shards` then counts dp x cp ranks (apply_fsdp over dp_cp)
    cp: int = 1
    # torch's set_rotate_method under cp: "allgather" (torchtitan's default, --cp-comm all-gather) or "alltoall" (a ring, --cp-comm p2p)
    cp_rotate: str = "allgather"
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as the framework's launcher sets it (FsdpProfile.expandable_segments):
    # what the allocator reserves is replayed with it (replayed_reserve)
    expandable_segments: bool = False


@dataclass(frozen=True)
class FsdpProfile:
    """What a framework profile's FSDP2 sets (Framework.step_memory names one of PROFILES)."""

    reduce_bytes: float
    optimizer_impl: str
    reshard_last_block: bool
    source: str
    model_code: str = "transformers"  # FsdpStep.model_code
    expandable_segments: bool = False  # FsdpStep.expandable_segments, as the framework's launcher sets it


PROFILES = {
    "fsdp2-eager": FsdpProfile(2.0, "foreach", True, "PyTorch fully_shard's defaults: MixedPrecisionPolicy(param_dtype=bfloat16, "
                               "reduce_dtype=None) reduces in param_dtype, reshard_after_forward=True on every block; torch.optim.AdamW "
                               "picks foreach on CUDA (torch/optim/optimizer.py _default_to_fused_or_foreach); the caching allocator's "
                               "defaults (expandable_segments off: c10/cuda/CUDAAllocatorConfig)"),
    "torchtitan-eager": FsdpProfile(4.0, "foreach", False, f"{FSDP_SOURCES['torchtitan']}; {FSDP_SOURCES['launcher']}", "torchtitan", True),
}


def fsdp_step_of(profile: str, micro_batch: int, seq_len: int, shards: int, precision: Precision, optimizer: Optimizer,
                 recompute: Recompute, tp: int = 1, compiled: bool = False,
                 float8_all_gather: bool = False, cp: int = 1, cp_rotate: str = "allgather", compiled_loss: bool = False,
                 expandable_segments: bool | None = None) -> FsdpStep:  # fmt: skip
    """The step of a framework profile (PROFILES) on a GPU (`tp`: torchtitan's apply_tp ranks, `shards` the dp (x cp) ones;
    `compiled`: --compile; `float8_all_gather`: FsdpStep.float8_all_gather; `cp`: FsdpStep.cp; `compiled_loss`: --compile-loss;
    `expandable_segments`: --[no-]expandable-segments, None: as the profile's launcher sets it)."""
    settings = PROFILES[profile]
    expandable = settings.expandable_segments if expandable_segments is None else expandable_segments
    return FsdpStep(micro_batch, seq_len, shards, precision, settings.reduce_bytes, optimizer, settings.optimizer_impl, recompute,
                    settings.reshard_last_block, model_code=settings.model_code, tp=tp, compiled=compiled,
                    expandable_segments=expandable,
                    float8_all_gather=float8_all_gather, cp=cp, cp_rotate=cp_rotate, compiled_loss=compiled_loss)  # fmt: skip


def walk_gaps(model: TransformerModel, layout: Layout, precision: Precision, optimizer: Optimizer, recompute: Recompute,
              other: tuple[str, ...] = (), model_code: str = "transformers", pipeline: bool = False,
              compiled: bool = False) -> list[str]:  # fmt: skip
    """What of a layout the walk does not follow (none: its peak is the memory; else the textbook sum is).
    It follows fully_shard over all the data-parallel ranks of a dense Llama-shaped model; `other`: the
    caller's own (offload, a recomputed subset of layers, ...); `pipeline`: the caller walks pipeline stages."""
    zero, dp, shard_group = layout.zero, layout.dp, layout.shard_group
    gaps = [*model_gaps(model, model_code), *other]
    if model.moe is not None and precision is Precision.FP32:  # HF_SOURCES['grouped_mm']: the experts' matmuls take bf16
        gaps.append("experts in fp32 (transformers' grouped_mm experts take bf16 only)")
    if model.moe is not None and model.moe.shared_experts and model_code != "torchtitan":  # the torchtitan walk's MoE has them
        gaps.append("a shared expert (the fsdp2 walk shards the routed experts' blocks)")
    gaps += cp_gaps(model, layout, model_code, recompute, precision, compiled)
    if layout.ep > 1:
        gaps.append(f"ep = {layout.ep}")
    gaps += pipeline_gaps(layout, model_code, pipeline, model.layers, recompute, compiled, precision)
    gaps += tp_gaps(model, layout.tp, model_code, recompute)
    if layout.tp > 1 and not layout.sequence_parallel:
        gaps.append(f"tp = {layout.tp} without sequence parallelism (torchtitan's apply_tp always shards the sequence)")
    if zero != 3:
        gaps.append(f"ZeRO-{zero} (fully_shard is ZeRO-3)")
    elif dp * layout.cp < 2:
        gaps.append("dp = 1 (nothing sharded)")
    if shard_group is not None and shard_group != dp * layout.cp:
        gaps.append(f"hybrid sharding over {shard_group} of {dp * layout.cp} ranks")
    if precision not in (Precision.MIXED_BF16, Precision.BF16, Precision.FP32):
        gaps += float8_gaps(layout, precision, model_code)
    if optimizer not in (Optimizer.ADAMW, Optimizer.ADAM, Optimizer.SGD, Optimizer.SGD_MOMENTUM):
        gaps.append(f"--optimizer {optimizer.value}")
    if recompute not in recomputes_of(model_code):
        gaps.append(f"--recompute {recompute.value}")
    if model_code == "torchtitan":
        gaps += torchtitan_code_gaps(model, precision)
        gaps += torchtitan_block_layout_gaps(model, layout.tp, layout.pp, compiled, {recompute.value}, layout.cp)
    if compiled:
        gaps += compile_gaps(model, layout.tp, layout.pp, model_code, precision)
    return gaps


# torchtitan's MoE adds its shared experts as a plain FeedForward (parcalc.core.memory_torchtitan_moe), not transformers' Qwen2-MoE
_HF_SHARED_GAP = "shared experts without Qwen2-MoE's sigmoid gate"
# and its walk runs a MoE model's dense layers as FeedForward blocks (memory_torchtitan.layer_shapes); DeepSeek's router bias
# (e_score_correction_bias) is torchtitan's expert_bias_E buffer, added to the scores for the choice (memory_torchtitan_moe)
_TT_WALKED = (_HF_SHARED_GAP, "dense layers between the MoE layers", "a router bias", "latent attention (MLA)")


def model_gaps(model: TransformerModel, model_code: str) -> list[str]:
    """What of the model the model code's walk does not follow (memory_timeline.hf_model_gaps; torchtitan's MoE walk has
    shared experts without a gate, memory_torchtitan_moe.moe_gaps)."""
    return [gap for gap in hf_model_gaps(model) if not (model_code == "torchtitan" and gap in _TT_WALKED)]


def cp_gaps(model: TransformerModel, layout: Layout, model_code: str, recompute: Recompute, precision: Precision,
            compiled: bool) -> list[str]:  # fmt: skip
    """What of context parallelism the walk does not follow: it follows torchtitan's context_parallel (torch's ring attention,
    allgather rotation, load-balanced causal shards; parcalc.core.memory_torchtitan_cp) in its eager bf16 block under FSDP2
    alone, with no or full checkpointing (memory, fit and fit's search all walk it); compiled, the block's Inductor code with
    the ring traced into it, bf16 or Float8, at the CP degrees whose code is read (parcalc.core.memory_torchtitan_cp_compile)."""
    from parcalc.core.memory_torchtitan_cp_compile import DEGREES

    cp = layout.cp
    if cp <= 1:
        return []
    why = [what for what, gap in (("the walk follows torchtitan's context_parallel", model_code != "torchtitan"),
                                  (f"--compile with cp = {cp} (the compiled ring's code is read at cp {', '.join(map(str, DEGREES))})",
                                   compiled and cp not in DEGREES),
                                  (f"--compile with cp and {'tp' if layout.tp > 1 else 'pp'} (the compiled ring's code is read under FSDP x CP "
                                   "alone, the compiled TP block's without the ring)", compiled and (layout.tp > 1 or layout.pp > 1)),
                                  ("--compile with --cp-comm p2p (the compiled ring's code is read with the allgather rotate method)",
                                   compiled and layout.cp_comm == "p2p"),
                                  (f"--precision {precision.value} with cp without --compile or tp (the eager ring is walked in bf16, "
                                   "and with torchao's Float8 TP styles under tp)", precision is Precision.FP8 and not compiled and layout.tp == 1),
                                  (f"--recompute {recompute.value} with cp (torch's CP dispatch hides the ring's ops from selective "
                                   "op checkpointing; the walk follows none and full)", recompute not in (Recompute.NONE, Recompute.FULL)),
                                  ("the model has experts (the ring's walk follows dense blocks)", model.moe is not None),
                                  ("--cp-comm a2a (torch's context_parallel rotates K/V in a ring: --cp-comm all-gather, torchtitan's "
                                   "default, or p2p)", layout.cp_comm == "a2a")) if gap]  # fmt: skip
    return [f"cp = {cp}: " + "; ".join(why)] if why else []


def check_cp(model: TransformerModel, step: FsdpStep) -> None:
    policies = set(step.block_policies or ()) | ({step.recompute.value} if step.block_policies is None else set())
    comm = next((flag for flag, method in CP_ROTATES.items() if method == step.cp_rotate), "all-gather")
    layout = Layout(step.tp, step.pp, max(step.shards // step.cp, 1), cp=step.cp, cp_comm=comm)
    gaps = cp_gaps(model, layout, step.model_code, Recompute.NONE, step.precision, step.compiled)
    if step.compiled and step.float8_all_gather:
        gaps.append("--fp8-all-gather with cp and --compile (the compiled ring's code is read with the weights cast in the block)")
    gaps += [f"checkpointing {p!r} with cp" for p in sorted(policies) if p not in ("none", "full")]
    if step.cp_rotate not in CP_ROTATES.values():
        gaps.append(f"rotate method {step.cp_rotate!r} (one of {', '.join(CP_ROTATES.values())})")
    if step.seq_len % (2 * step.cp):
        gaps.append(f"sequence {step.seq_len} not a multiple of 2 x cp (context_parallel's load balancer needs it)")
    if gaps:
        raise InputError(f"{model.name}: the step walk under context parallelism: {'; '.join(gaps)}")


def compile_gaps(model: TransformerModel, tp: int, pp: int, model_code: str, precision: Precision = Precision.MIXED_BF16) -> list[str]:
    """What of torch.compile the walk does not follow: it follows torchtitan's compiled block (Inductor's code for grouped-query
    attention, whose repeat_kv copies k and v) under FSDP2 (parcalc.core.memory_torchtitan_compile), in bf16 and with
    torchao's Float8Linear, its weights cast in the block or all-gathered in FP8 (parcalc.core.memory_float8_compile, read
    from torchtitan's Llama, where q = h); under apply_tp in bf16, its collectives traced into it, at the TP degrees whose code
    is read, and with torchao's Float8 TP styles (parcalc.core.memory_torchtitan_tp_compile, q = h too); in the pipeline stages, each stage's blocks so compiled."""
    from parcalc.core.memory_timeline import shapes_of
    from parcalc.core.memory_torchtitan import repeat_kv_copies
    from parcalc.core.memory_torchtitan_tp_compile import DEGREES, FLOAT8_DEGREES

    if model_code != "torchtitan":
        return ["--compile (the compiled walk follows torchtitan's block; this profile's walk is eager transformers code)"]
    kv_heads = "one KV head (repeat_kv's view)" if model.kv_heads == 1 else "multi-head attention (no repeat_kv copy)"
    return [what for what, gap in ((f"--compile with {kv_heads}: Inductor's code for it is not walked",
                                    not repeat_kv_copies(shapes_of(model, 1, 1, 2.0, 2.0, False))),
                                   (f"--compile with tp = {tp} (the compiled TP block's code is read at tp {', '.join(map(str, DEGREES))})",
                                    tp > 1 and tp not in DEGREES),
                                   (f"--compile --precision fp8 with tp = {tp} (the compiled block with torchao's Float8 TP styles is "
                                    f"read at tp {', '.join(map(str, FLOAT8_DEGREES))})",
                                    tp > 1 and precision is Precision.FP8 and tp not in FLOAT8_DEGREES),
                                   ("--compile --precision fp8 with heads x head_dim != hidden (the compiled Float8 block is read "
                                    "from torchtitan's Llama, whose head_dim is dim // n_heads)",
                                    precision is Precision.FP8 and model.heads * model.head_dim != model.hidden),
                                   (f"--compile with tp = {tp} and heads x head_dim != hidden (the compiled TP block is read from "
                                    "torchtitan's Llama, whose head_dim is dim // n_heads)",
                                    tp > 1 and precision is not Precision.FP8 and model.heads * model.head_dim != model.hidden)) if gap]  # fmt: skip


def float8_gaps(layout: Layout, precision: Precision, model_code: str) -> list[str]:
    """--precision fp8 is followed as torchtitan's float8 converter runs it (torchao's Float8Linear, tensorwise:
    parcalc.core.memory_torchao_float8) on torchtitan's code, under tp with torchao's Float8 TP styles as apply_tp picks them
    (memory_torchao_float8.AO_TP_SOURCES), in pipeline stages as each stage's blocks run (memory_pipeline_stage)."""
    if precision is not Precision.FP8 or model_code != "torchtitan":
        return [f"--precision {precision.value}" + (" (followed as torchao's Float8Linear with torchtitan's code)" if precision is Precision.FP8 else "")]
    return []


def torchtitan_code_gaps(model: TransformerModel, precision: Precision) -> list[str]:
    """What torchtitan's Llama code (parcalc.core.memory_torchtitan) with its MoE in place of the FeedForward
    (parcalc.core.memory_torchtitan_moe) does not have, or the walk of it does not follow."""
    from parcalc.core.memory_torchtitan_moe import moe_gaps

    return [*moe_gaps(model.moe)] + [
            what for what, gap in (("experts with --precision fp8 (the walk follows torchtitan's MoE in bf16)",
                                    model.moe is not None and precision is Precision.FP8),
                                   ("q/k norms with --precision fp8 (the walk follows Qwen3's q_norm / k_norm in bf16)",
                                    model.qk_norm and precision is Precision.FP8),
                                   ("latent attention with --precision fp8 (the walk follows DeepSeek's MLA in bf16)",
                                    model.mla is not None and precision is Precision.FP8),
                                   ("tied embeddings (torchtitan's Llama has its own output projection)", model.tied_embeddings),
                                   ("--precision fp32 (the torchtitan walk follows bf16 compute)", precision is Precision.FP32)) if gap]  # fmt: skip


def torchtitan_block_layout_gaps(model: TransformerModel, tp: int, pp: int, compiled: bool, policies: set[str], cp: int = 1) -> list[str]:
    """What the walks of torchtitan's MoE block and of Qwen3's q/k norms do not follow of a layout: each walks the eager
    block under FSDP2 alone (ep = 1, no tp, pp, cp or compile), with no or full checkpointing
    (parcalc.core.memory_torchtitan_moe; memory_torchtitan.head_norms_forward)."""
    layout = ((f"tp = {tp}", tp > 1), (f"pp = {pp}", pp > 1), (f"cp = {cp}", cp > 1), ("--compile", compiled),
              *((f"checkpointing {p!r}", p not in ("none", "full")) for p in sorted(policies)))
    return [f"{part} with {what} (the walk follows {code} under FSDP2 alone)"
            for part, code, present in (("experts", "torchtitan's eager MoE", model.moe is not None),
                                        ("q/k norms", "Qwen3's eager attention", model.qk_norm),
                                        ("latent attention (MLA)", "DeepSeek's eager attention", model.mla is not None)) if present
            for what, gap in layout if gap]  # fmt: skip


def recomputes_of(model_code: str) -> tuple[Recompute, ...]:
    """The checkpointing the model code's walk follows: whole blocks or none; torchtitan's selective op too."""
    return (Recompute.NONE, Recompute.FULL, *((Recompute.OP,) if model_code == "torchtitan" else ()))


def chunk_rows(rows: Any, ranks: Any) -> Any:
    """Rows of dim 0 one rank of `ranks` holds, padded: ceil(rows / ranks) (FSDP_SOURCES['shards']: FSDP2 chunks dim 0, so
    an expert stack (experts x out x in) is sharded by whole experts). Ints or numpy arrays (fit's search)."""
    return -(-rows // ranks)


def expert_shard_ranks(local_experts: int, ranks: Any) -> Any:
    """The divisor that gives one rank's share of an expert stack of `local_experts` sharded over `ranks` by FSDP2:
    local_experts / ceil(local_experts / ranks). It is `ranks` where they divide the experts, and `local_experts` on more
    ranks than experts (each rank keeps one whole expert: Mixtral's 8 over 32 ranks keep an eighth, not a 32nd). The
    one rule of every fsdp2 / torchtitan path: the step walk (_Param.shard), parcalc.core.memory's states and fit's search."""
    return local_experts / chunk_rows(local_experts, ranks)


@dataclass(frozen=True)
class _Param:
    name: str
    rows: int
    cols: int

    def shard(self, n: int) -> int:
        """Elements of one rank's padded shard (FSDP_SOURCES['shards'])."""
        return int(chunk_rows(self.rows, n)) * self.cols


@lru_cache(maxsize=256)  # every walk asks it for each of its layers (fit's search: ~900 walks); the tuple is immutable
def _block_params(model: TransformerModel, tp: int = 1, shared: bool = False) -> tuple[_Param, ...]:
    """One decoder layer's parameters in constructor order (nn.Linear weights are out x in; an expert stack is
    experts x out x in, sharded over its experts: FSDP2 shards dim 0). Under apply_tp (tp > 1) a rank's own: the
    column-parallel weights' rows and the row-parallel weights' columns split tp ways, the norms whole (FSDP2 then shards
    dim 0 of that local tensor). `shared`: torchtitan's shared experts, which the walk of its code follows."""
    h, q, kv, f = model.hidden, model.heads * model.head_dim // tp, model.kv_heads * model.head_dim // tp, model.ffn_hidden // tp
    attention = (_Param("q", q, h), _Param("k", kv, h), _Param("v", kv, h), _Param("o", h, q),
                 *((_Param("qn", model.head_dim, 1), _Param("kn", model.head_dim, 1)) if model.qk_norm else ()))
    if model.mla is not None:  # torchtitan's deepseek_v3 Attention (memory_torchtitan_mla): wq or wq_a, q_norm, wq_b; wkv_a, kv_norm, wkv_b; wo
        m, n = model.mla, model.heads
        query = ((_Param("wq_a", m.q_lora_rank, h), _Param("qan", m.q_lora_rank, 1), _Param("wq_b", n * m.qk_head_dim, m.q_lora_rank))
                 if m.q_lora_rank else (_Param("q", n * m.qk_head_dim, h),))
        attention = (*query, _Param("wkv_a", m.kv_lora_rank + m.qk_rope_head_dim, h), _Param("kvn", m.kv_lora_rank, 1),
                     _Param("wkv_b", n * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank), _Param("o", h, n * m.v_head_dim))
    if model.moe is not None:  # MixtralSparseMoeBlock: router, then the experts' gate_up_proj and down_proj
        e, fe = model.moe.experts, model.moe.expert_ffn_hidden
        mlp: tuple[_Param, ...] = (_Param("router", e, h), _Param("gate_up", e, 2 * fe * h), _Param("down", e, h * fe))
        if shared and model.moe.shared_experts:  # torchtitan's shared_experts, one FeedForward as wide as all of them (memory_torchtitan_moe)
            fs = model.moe.shared_experts * model.moe.shared_width
            mlp += (_Param("shared_w1", fs, h), _Param("shared_w2", h, fs), _Param("shared_w3", fs, h))
    else:
        mlp = (_Param("gate", f, h), _Param("up", f, h), _Param("down", h, f))
    return (*attention, *mlp, _Param("n1", h, 1), _Param("n2", h, 1))


@lru_cache(maxsize=256)
def _root_params(model: TransformerModel, tp: int = 1) -> tuple[_Param, ...]:
    """The root unit's: the embedding (the LM head's weight too when tied), the final norm, an untied LM head; under
    apply_tp the embedding's and the output projection's vocabulary rows split tp ways."""
    own = (_Param("head", model.vocab // tp, model.hidden),) if not model.tied_embeddings else ()
    return (_Param("embedding", model.vocab // tp, model.hidden), _Param("final_norm", model.hidden, 1), *own)


# a block's linears, the weights torchtitan's float8 converter swaps for Float8Linear (memory_torchao_float8)
FLOAT8_LINEARS = ("q", "k", "v", "o", "gate", "up", "down")

STREAMS = ("default", "all-gather copy-in", "reduce-scatter")


def stream_of(key: str) -> str:
    """The CUDA stream a walk tensor is allocated on (FSDP_SOURCES['streams'])."""
    if key.startswith("fsdp."):
        if key.endswith((".ag", ".copy_in")) or ".copy_in." in key:  # the copy-in's Float8 casts too
            return "all-gather copy-in"
        if key.endswith((".rs_out", ".grad")):
            return "reduce-scatter"
    return "default"


class StreamWalk(Walk):
    """A Walk that also follows each stream's pool: its live blocks and the peak of each (FSDP_SOURCES['streams'])."""

    def __init__(self) -> None:
        super().__init__()
        self.stream_live: dict[str, dict[str, float]] = {s: {} for s in STREAMS}
        self.stream_peak: dict[str, tuple[float, tuple[float, ...]]] = dict.fromkeys(STREAMS, (0.0, ()))
        self.stream_now: dict[str, float] = dict.fromkeys(STREAMS, 0.0)
        self.key_stream: dict[str, str] = {}
        self._stream_due: set[str] = set()  # streams at a new peak whose blocks are copied when they next lose one (Walk._peak_due)

    def alloc(self, key: str, size: float, kind: str, what: str) -> None:
        super().alloc(key, size, kind, what)
        if size <= 0:
            return
        stream = self.key_stream[key] = stream_of(key)
        self.stream_live[stream][key] = self.live[key].bytes
        self.stream_now[stream] += self.live[key].bytes
        if self.stream_now[stream] > self.stream_peak[stream][0]:
            self.stream_peak[stream] = (self.stream_now[stream], ())
            self._stream_due.add(stream)

    def _copy_stream_peak(self, stream: str) -> None:
        if stream in self._stream_due:
            self.stream_peak[stream] = (self.stream_peak[stream][0], tuple(self.stream_live[stream].values()))
            self._stream_due.discard(stream)

    def free(self, *keys: str) -> None:
        super().free(*keys)
        for key in keys:
            stream = self.key_stream.pop(key, None)
            if stream is not None:
                self._copy_stream_peak(stream)
                self.stream_now[stream] -= self.stream_live[stream].pop(key)

    def rename(self, old: str, new: str, what: str | None = None, kind: str | None = None) -> None:
        super().rename(old, new, what, kind)
        stream = self.key_stream.pop(old)
        self._copy_stream_peak(stream)
        self.key_stream[new] = stream
        self.stream_live[stream][new] = self.stream_live[stream].pop(old)

    def pools(self) -> tuple[tuple[str, float], ...]:
        """What each stream's pool reserves: the least that holds its own peak's blocks (parcalc.core.allocator)."""
        for stream in tuple(self._stream_due):
            self._copy_stream_peak(stream)
        return tuple((s, reserved_bytes(self.stream_peak[s][1])) for s in STREAMS)

    def floor(self, expandable: bool) -> float:
        """The least the allocator replayed over a run of this step can reserve: each stream's pools at their units above the
        blocks live at its own peak (allocator.reserved_floor_of_sums), summed; the search screens its rows by it."""
        for stream in tuple(self._stream_due):
            self._copy_stream_peak(stream)
        total = 0.0
        for stream in STREAMS:
            blocks = self.stream_peak[stream][1]
            total += reserved_floor_of_sums(sum(blocks), sum(b for b in blocks if b <= K_SMALL_SIZE), expandable)
        return total


# ---------------------------------------------------------------------------------------------
# What the allocator reserves over a run of such steps: its rules replayed per stream

SET_UP_PHASE = "before the step"
OPTIMIZER_PHASE = "optimizer step"
_STATE = re.compile(r"\.state\d+$|^step_count\d+$")
_UNIT = re.compile(r"^fsdp\.(?:m\d+\.)?L(\d+)\.")


class EventWalk(StreamWalk):
    """A StreamWalk that records its allocations, frees and renames in order (Walk.events) and where each phase begins."""

    def __init__(self) -> None:
        self.marks: list[tuple[int, str]] = []
        super().__init__()
        self.events = []

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, value: str) -> None:
        self._phase = value
        events = getattr(self, "events", None)
        self.marks.append((len(events) if events is not None else 0, value))


@dataclass(frozen=True)
class Replayed:
    """The replay's result: what each stream reserves at the end (its peak), and their sum."""

    reserved: float
    stream_reserved: tuple[tuple[str, float], ...]  # (stream, bytes), in memory_fsdp.STREAMS order
    stream_pools: tuple[tuple[str, float], ...]  # each stream's pool at its own peak (StreamWalk.pools: no fragmentation)
    expandable: bool
    steps: int
    # with expandable segments, each stream's high water in its small and its large pool (allocator.ExpandableSegments
    # .high_water: what it maps is these rounded up to 2 MiB / 20 MiB pages); () without
    stream_high_water: tuple[tuple[str, float, float], ...] = ()


def replayed_reserve(walk: EventWalk, expandable: bool, steps: int = REPLAYED_STEPS, cublas_handles: int = 2) -> Replayed:
    """What the caching allocator reserves over FSDP2 training steps: its block rules replayed per CUDA stream over the step
    walk's allocations and frees in program order (parcalc.core.allocator.StreamAllocators), with expandable segments on or off
    as the framework's launcher sets them.

    The walk (parcalc.core.memory_fsdp.walk_fsdp_step) gives one steady step. A run is the model built on the GPU, a first step
    with no optimizer states (torch.optim creates them lazily, at the first optimizer.step: torch/optim/adam.py _init_group,
    zeros_like of each sharded parameter), then steady steps; the allocator keeps every page it mapped (or segment it
    cudaMalloc'd) until empty_cache or an out-of-memory retry, neither of which a run that fits meets, so what it reserves at
    the end of the replay is its peak, `reserved_bytes.all.peak` as torchtitan logs it. As memory_timeline's hf replay does
    (REPLAYED_STEPS): the build, the first step, two steady ones. Each tensor goes to the stream the walk files it on
    (memory_fsdp.stream_of: the all-gather outputs and copy-in casts on the all-gather stream, the reduce-scatter's outputs on the
    reduce-scatter stream, the rest on the default stream; FSDP_SOURCES['streams']); a freed block goes back to its own stream's
    pool. The build: each parameter's sharded tensor and the buffers (torchtitan's model.to_empty(device) and init_weights), the
    batch's ids; the cuBLAS workspaces at the first step's first matmuls (one per handle, HF_SOURCES['cublas']); zero_grad at each
    step's end frees the sharded gradients (the reduce-scatter outputs their .grad views hold), unit by unit in parameter order.
    The replay runs each stream's compiled program (compile_streams; parcalc.core.allocator_replay.replay_stream: the
    allocator's rules inlined, the same blocks at the same addresses as StreamAllocators replaying the keyed events)."""
    programs = compile_streams(walk, cublas_handles)
    stream_reserved, high = [], []
    for stream in STREAMS:
        program = programs.get(stream)
        if program is None:  # nothing allocated on it: StreamAllocators never made its allocator
            stream_reserved.append((stream, 0.0))
            continue
        done = replay_stream(program, expandable, steps)
        stream_reserved.append((stream, done.reserved))
        high.append((stream, done.high_water_small, done.high_water_large))
    return Replayed(sum(r for _, r in stream_reserved), tuple(stream_reserved), walk.pools(), expandable, steps,
                    tuple(high) if expandable else ())


def compile_streams(walk: EventWalk, cublas_handles: int = 2) -> dict[str, StreamProgram]:
    """The run replayed_reserve replays, as one program per stream (parcalc.core.allocator_replay): the build on the default
    stream (every set-up tensor but the optimizer states and the cuBLAS workspaces); the first step (the workspaces before
    its body, the states after it, on the default stream); each step's body and optimizer events on their streams (stream_of),
    a rename handing the block on, a free of a tensor the step did not allocate (a set-up one) doing nothing; then zero_grad
    freeing what the step left live, unit by unit in parameter order. Only streams that allocate get a program."""
    assert walk.events is not None
    events = walk.events
    set_up_end = next((at for at, phase in walk.marks if phase != SET_UP_PHASE and at > 0), len(events))
    optimizer_at = next((at for at, phase in walk.marks if phase.startswith(OPTIMIZER_PHASE)), len(events))
    set_up = events[:set_up_end]
    build = tuple((block_bytes(size), 0) for key, size in set_up if size > 0 and key != "cublas" and not _STATE.search(key))
    states = tuple((block_bytes(size), 0) for key, size in set_up if size > 0 and _STATE.search(key))
    cublas = next((size for key, size in set_up if key == "cublas"), 0.0)
    workspaces = ((block_bytes(cublas / cublas_handles), 0),) * cublas_handles if cublas > 0 else ()
    streams = _STREAM_OF_KEY
    ops: dict[str, list[tuple[float, int]]] = {}
    slots: dict[str, int] = {}
    live: dict[str, tuple[str, int]] = {}  # a key the step allocated -> its stream and slot (replay's handles)
    blocks: dict[float, float] = {}  # block_bytes, by request (a step repeats its sizes)
    body_ops: dict[str, int] = {}  # each stream's ops before the optimizer step
    for at, (key, size) in enumerate(events[set_up_end:], start=set_up_end):
        if at == optimizer_at:
            body_ops = {s: len(o) for s, o in ops.items()}
        if size > 0:
            stream = streams.get(key)
            if stream is None:
                stream = streams[key] = stream_of(key)
                if len(streams) > 1 << 20:  # keys repeat across steps and walks; a bound on what is kept
                    streams.clear()
            slot = slots.get(stream, 1)  # slot 0: the blocks never freed (build, workspaces, states)
            slots[stream] = slot + 1
            live[key] = (stream, slot)
            rounded = blocks.get(size)
            if rounded is None:
                rounded = blocks[size] = block_bytes(size)
            ops.setdefault(stream, []).append((rounded, slot))
        elif size < 0:  # Walk.rename: old\0new
            old, new = key.split("\0")
            if old in live:
                live[new] = live.pop(old)
        elif key in live:
            stream, slot = live.pop(key)
            ops[stream].append((0.0, slot))
    if optimizer_at >= len(events):
        body_ops = {s: len(o) for s, o in ops.items()}
    for key in sorted(live, key=_unit_order):  # zero_grad(set_to_none=True)
        stream, slot = live[key]
        ops[stream].append((0.0, slot))
    programs = {}
    for stream in STREAMS:
        steady = tuple(ops.get(stream, ()))
        if stream != "default":
            if steady:
                programs[stream] = StreamProgram((), steady, steady, slots[stream])
            continue
        body = body_ops.get(stream, 0)
        first = workspaces + steady[:body] + states + steady[body:]
        if build or first:
            programs[stream] = StreamProgram(build, first, steady, slots.get(stream, 1))
    return programs


_STREAM_OF_KEY: dict[str, str] = {}  # stream_of, kept by key (compile_streams)


def _unit_order(key: str) -> tuple[int, str]:
    match = _UNIT.match(key)
    return (int(match.group(1)) if match else 10**9, key)


Allocs = tuple[tuple[str, float, str, str], ...]  # (key, bytes, kind, what) in order


@dataclass(frozen=True)
class _UnitAllocs:
    """What a walk allocates for every parameter of its units, in order (walk_fsdp_step)."""

    states: Allocs  # _FsdpHooks.sharded_state's: each parameter's shard, then its optimizer states
    shards: tuple[float, ...]  # each parameter's shard in the master dtype (bytes)
    sqrt: Allocs  # foreach AdamW's sqrt of every exp_avg_sq, one a shard
    sqrt_keys: tuple[str, ...]


_UNIT_ALLOCS: dict[tuple[object, ...], tuple[tuple[tuple[_Param, ...], ...], _UnitAllocs]] = {}


def _unit_allocs(units: dict[str, tuple[_Param, ...]], n: int, master: float, states: int) -> _UnitAllocs:
    """A walk's allocations for every parameter of `units` sharded `n` ways. Kept by the units' names and parameters (by
    identity: _block_params and _root_params hand every walk the same ones; the entry holds them, so no other object takes
    their ids while it is kept), the shards and the bytes: fit's search walks ~900 steps of a few dozen distinct stages,
    and looking them up is cheaper than making ~1,500 keys a walk (or hashing each parameter)."""
    cache_key = (tuple(units), tuple(map(len, units.values())), tuple(id(p) for params in units.values() for p in params), n, master, states)
    found = _UNIT_ALLOCS.get(cache_key)
    if found is None:
        if len(_UNIT_ALLOCS) >= 1024:
            _UNIT_ALLOCS.clear()
        shards = tuple(p.shard(n) * master for params in units.values() for p in params)
        held = tuple((key, size, kind, what) for (unit, p), size in zip(((u, p) for u, ps in units.items() for p in ps), shards, strict=True)
                     for key, kind, what in ((f"fsdp.{unit}.{p.name}.shard", "sharded parameters", "parameter shards"),
                                             *((f"fsdp.{unit}.{p.name}.state{s}", "optimizer states", "AdamW states on the shards")
                                               for s in range(states))))  # fmt: skip
        sqrt = tuple((f"opt.sqrt{k}", size, "temporaries", "foreach AdamW: sqrt of every exp_avg_sq") for k, size in enumerate(shards))
        found = _UNIT_ALLOCS[cache_key] = (tuple(units.values()), _UnitAllocs(held, shards, sqrt, tuple(key for key, *_ in sqrt)))
    return found[1]


class _FsdpHooks(StepHooks):
    """FSDP2's allocations around the walk of the model's step (module docstring, FSDP_SOURCES)."""

    def __init__(self, model: TransformerModel, step: FsdpStep, param_bytes: float, master_bytes: float) -> None:
        self.n = step.shards
        self.layers = model.layers
        self.units = {"root": _root_params(model, step.tp), **{f"L{i}": _block_params(layer_model(model, i), step.tp, step.model_code == "torchtitan")
                                                               for i in range(model.layers)}}  # fmt: skip
        self.p = param_bytes
        self.master = master_bytes
        self.reduce = step.reduce_bytes
        self.reshard_after_forward = {f"L{i}": step.reshard_last_block or i < model.layers - 1 for i in range(model.layers)}
        self.gathering: set[str] = set()  # units whose all-gather output is live, not yet copied out
        self.unsharded: set[str] = set()
        self.kept_all_gather: str | None = None  # forward: comm_ctx.all_gather_state
        self.kept_reduce_scatter: str | None = None  # comm_ctx.reduce_scatter_states
        self.float8_all_gather = step.float8_all_gather and step.precision is Precision.FP8

    def _gathered_bytes(self, unit: str, p: _Param) -> float:
        """Bytes an element of `p` is all-gathered and unsharded in: FP8 for a block's Float8Linear weight under
        enable_fsdp_float8_all_gather (torchtitan's converter leaves the root's output projection a Linear), else param_dtype."""
        return 1.0 if self.float8_all_gather and unit != "root" and p.name in FLOAT8_LINEARS else self.p

    def _shards(self, unit: str) -> int:
        return sum(p.shard(self.n) for p in self.units[unit])

    def sharded_state(self, walk: Walk, states: int) -> None:
        walk.alloc_all(_unit_allocs(self.units, self.n, self.master, states).states)

    def unshard(self, walk: Walk, unit: str) -> None:
        """FSDPParamGroup.unshard: the copy-in (transient) and the all-gather output (FSDP_SOURCES['copy_in'], ['all_gather'])."""
        if unit in self.gathering or unit in self.unsharded:
            return
        params = self.units[unit]
        cast = [p for p in params if self._gathered_bytes(unit, p) == self.p]
        if self.p != self.master:  # the foreach copy-in casts the shards; without a param_dtype they are gathered as they are
            walk.alloc(f"fsdp.{unit}.copy_in", sum(p.shard(self.n) for p in cast) * self.p, "all-gather buffers", "all-gather copy-in (param_dtype)")
        # fsdp_pre_all_gather of each Float8 weight: its fp32 shard cast to FP8, the scale from its amax (all-reduced: scalars)
        fp8 = [float8.cast(walk, f"fsdp.{unit}.{p.name}.copy_in", p.shard(self.n), self.master) for p in params if p not in cast]
        walk.alloc(f"fsdp.{unit}.ag", self.n * sum(p.shard(self.n) * self._gathered_bytes(unit, p) for p in params), "all-gather buffers",
                   "all-gather output")  # fmt: skip
        walk.free(f"fsdp.{unit}.copy_in", *fp8)
        self.gathering.add(unit)

    def wait_for_unshard(self, walk: Walk, unit: str, forward: bool) -> None:
        """FSDPParamGroup.wait_for_unshard: the copy-out into the unsharded parameters (FSDP_SOURCES['unsharded'])."""
        if unit not in self.gathering:
            return
        if forward and self.kept_all_gather is not None:
            walk.free(self.kept_all_gather)
            self.kept_all_gather = None
        for p in self.units[unit]:
            walk.alloc(f"fsdp.{unit}.{p.name}.full", self.n * p.shard(self.n) * self._gathered_bytes(unit, p), "unsharded parameters",
                       "unsharded parameters")  # fmt: skip
        self.gathering.discard(unit)
        self.unsharded.add(unit)
        if forward:
            self.kept_all_gather = f"fsdp.{unit}.ag"
        else:
            walk.free(f"fsdp.{unit}.ag")

    def reshard(self, walk: Walk, unit: str) -> None:
        walk.free(*(f"fsdp.{unit}.{p.name}.full" for p in self.units[unit]))
        self.unsharded.discard(unit)

    def post_backward(self, walk: Walk, unit: str, grads: list[str]) -> None:
        """Reshard, then reduce-scatter the unit's gradients (FSDP_SOURCES['reduce'])."""
        self.reshard(walk, unit)
        if self.kept_reduce_scatter is not None:
            walk.free(self.kept_reduce_scatter)
        shards = self._shards(unit)
        walk.alloc(f"fsdp.{unit}.rs_in", self.n * shards * self.reduce, "reduce-scatter buffers", "reduce-scatter input")
        walk.free(*grads)
        walk.alloc(f"fsdp.{unit}.rs_out", shards * self.reduce, "sharded gradients", "sharded gradients")
        if self.reduce != self.master:
            walk.alloc(f"fsdp.{unit}.grad", shards * self.master, "sharded gradients", "sharded gradients")
            walk.free(f"fsdp.{unit}.rs_out")
        self.kept_reduce_scatter = f"fsdp.{unit}.rs_in"

    # the walk's hooks
    def before_forward(self, walk: Walk) -> None:
        walk.phase = "forward: the root's all-gather"
        self.unshard(walk, "root")
        self.wait_for_unshard(walk, "root", forward=True)

    def before_layer(self, walk: Walk, i: int) -> None:
        self.unshard(walk, f"L{i}")
        self.wait_for_unshard(walk, f"L{i}", forward=True)

    def after_layer(self, walk: Walk, i: int) -> None:
        if self.reshard_after_forward[f"L{i}"]:
            self.reshard(walk, f"L{i}")

    def after_forward(self, walk: Walk) -> None:  # the root's post-forward frees the last all-gather output
        if self.kept_all_gather is not None:
            walk.free(self.kept_all_gather)
            self.kept_all_gather = None

    def before_backward(self, walk: Walk) -> None:
        self.unshard(walk, f"L{self.layers - 1}")  # the root's pre-backward prefetch (FSDP_SOURCES['prefetch'])

    def before_layer_backward(self, walk: Walk, i: int) -> None:
        self.unshard(walk, f"L{i}")
        self.wait_for_unshard(walk, f"L{i}", forward=False)
        if i > 0:
            self.unshard(walk, f"L{i - 1}")

    def after_layer_backward(self, walk: Walk, i: int) -> None:
        grads = [key for key in walk.live if key.startswith(f"L{i}.") and key.endswith(".grad")]
        self.post_backward(walk, f"L{i}", grads)

    def reduce_all(self, walk: Walk, accumulated: dict[str, list[str]]) -> None:
        """A pipeline stage's perform_reduce_grad: each unit's post_backward in module order (the root first), on the
        gradients accumulated across micro-batches, then the root's final callback (memory_pipeline_stage.PP_SOURCES)."""
        self.reduce_units(walk, accumulated, list(self.units))

    def reduce_units(self, walk: Walk, accumulated: dict[str, list[str]], units: list[str]) -> None:
        """perform_reduce_grad of the stage holding `units` (module order), one of a rank's several under an interleaved
        schedule (memory_pipeline_interleaved)."""
        for unit in units:
            self.post_backward(walk, unit, accumulated.get(unit, []))
        if self.kept_reduce_scatter is not None:
            walk.free(self.kept_reduce_scatter)
            self.kept_reduce_scatter = None

    def after_backward(self, walk: Walk) -> None:
        walk.phase = "backward: the root's reduce-scatter (final callback)"
        self.post_backward(walk, "root", ["head.grad", "embedding.grad", "final.grad"])
        if self.kept_reduce_scatter is not None:
            walk.free(self.kept_reduce_scatter)
            self.kept_reduce_scatter = None


def check_fsdp_step(model: TransformerModel, step: FsdpStep) -> None:
    if step.model_code != "torchtitan" or model_gaps(model, step.model_code):
        check_hf_model(model)
    if step.shards < 1:
        raise InputError(f"the FSDP shard group: at least 1 rank, got {step.shards}")
    walked_float8 = step.precision is Precision.FP8 and step.model_code == "torchtitan"
    if step.precision not in (Precision.MIXED_BF16, Precision.BF16, Precision.FP32) and not walked_float8:
        raise InputError(f"--precision {step.precision.value}: the FSDP2 step walk knows MixedPrecisionPolicy(param_dtype=bfloat16) "
                         "over fp32 shards, bf16 and fp32, and fp8 as torchao's Float8Linear in torchtitan's code")  # fmt: skip
    if step.optimizer not in (Optimizer.ADAMW, Optimizer.ADAM, Optimizer.SGD, Optimizer.SGD_MOMENTUM):
        raise InputError(f"--optimizer {step.optimizer.value}: the FSDP2 step walk knows torch.optim's AdamW, Adam and SGD")
    if step.recompute not in recomputes_of(step.model_code):
        raise InputError(f"--recompute {step.recompute.value}: the FSDP2 step walk checkpoints whole blocks (full) or nothing"
                         + ("" if step.model_code == "torchtitan" else ", and torchtitan's selective op policy (op) with its own model"))
    if step.block_policies is not None and (step.model_code != "torchtitan" or len(step.block_policies) != model.layers
                                            or not set(step.block_policies) <= set(POLICIES)):  # fmt: skip
        raise InputError(f"block checkpointing {step.block_policies}: torchtitan's code, one of {', '.join(POLICIES)} for each of "
                         f"the {model.layers} blocks")
    if step.tp > 1:
        check_tp(model, step)
    if step.tp > 1 and step.compiled and step.float8_all_gather and step.precision is Precision.FP8:
        raise InputError(f"{model.name}: the compiled step walk under tp = {step.tp} follows Inductor's code for torchao's Float8 TP "
                         "styles with the weights cast in the block, not all-gathered in FP8 (enable_fsdp_float8_all_gather)")
    if step.cp > 1:
        check_cp(model, step)
    if step.compiled and (gaps := compile_gaps(model, step.tp, step.pp, step.model_code, step.precision)):
        raise InputError(f"{model.name}: the compiled step walk: {'; '.join(gaps)}")
    policies = set(step.block_policies or ()) | ({step.recompute.value} if step.block_policies is None else set())
    missing = (torchtitan_code_gaps(model, step.precision) + torchtitan_block_layout_gaps(model, step.tp, step.pp, step.compiled, policies, step.cp)
               if step.model_code == "torchtitan" else [])
    if missing:
        raise InputError(f"{model.name}: the torchtitan profile's step walk follows torchtitan's Llama code in bf16; {'; '.join(missing)}")
    if step.optimizer_impl not in OPTIMIZER_IMPLS:
        raise InputError(f"optimizer implementation {step.optimizer_impl!r}: one of {', '.join(OPTIMIZER_IMPLS)}")


def pipeline_gaps(layout: Layout, model_code: str, pipeline: bool, layers: int, recompute: Recompute = Recompute.NONE,
                  compiled: bool = False, precision: Precision = Precision.MIXED_BF16) -> list[str]:  # fmt: skip
    """What of pipeline parallelism the walk does not follow: it walks one stage of torchtitan's code under Schedule1F1B,
    or a rank's virtual stages under ScheduleInterleaved1F1B (parcalc.core.memory_pipeline_interleaved), its blocks under
    apply_tp where tp > 1, or a rank's two stages in a V under ScheduleZBVZeroBubble (parcalc.core.memory_pipeline_zero_bubble)
    or ScheduleDualPipeV (parcalc.core.memory_pipeline_dualpipe; `recompute`, `compiled`, `precision`: what of those walks
    the step asks), rank by rank (`pipeline`: the caller walks each rank, as parcalc.core.memory does; fit's search does not)."""
    from parcalc.core.choices import Schedule
    from parcalc.core.memory_pipeline_dualpipe import dualpipe_gaps
    from parcalc.core.memory_pipeline_interleaved import interleaved_gaps
    from parcalc.core.memory_pipeline_zero_bubble import zero_bubble_gaps

    if layout.pp <= 1:
        return []
    interleaved = layout.schedule is Schedule.INTERLEAVED
    walked = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_V, Schedule.DUALPIPEV)
    why = [what for what, gap in (("fit's search (one walk per stage and micro-batch count)", not pipeline),
                                  ("the walk follows torchtitan's PipelineStage", model_code != "torchtitan"),
                                  (f"--schedule {layout.schedule.value} (the walk follows 1F1B, interleaved 1F1B, ZB-V and DualPipeV)",
                                   layout.schedule not in walked),
                                  (f"{layout.chunks} chunks a stage under {layout.schedule.value}", layout.chunks > 1 and not interleaved))
           if gap]  # fmt: skip
    if interleaved and not why:
        why = interleaved_gaps(layout, layers)
    if layout.schedule is Schedule.ZB_V and not why:
        why = zero_bubble_gaps(layout, layers, recompute, compiled, precision)
    if layout.schedule is Schedule.DUALPIPEV and not why:
        why = dualpipe_gaps(layout, layers, recompute, compiled, precision)
    # a pipeline layout of one virtual stage a rank under 1F1B (torchtitan's own split, or --pipeline-layout) is stages of
    # contiguous layers, the embedding on the first and the head on the last: the walk takes each stage's own layers
    return [f"pp = {layout.pp}: " + "; ".join(why)] if why else []


def tp_gaps(model: TransformerModel, tp: int, model_code: str, recompute: Recompute) -> list[str]:
    """What of tensor parallelism the walk does not follow: it follows torchtitan's apply_tp over whole heads, KV heads,
    MLP columns and vocabulary rows, with no or full checkpointing (parcalc.core.memory_torchtitan_tp)."""
    if tp <= 1:
        return []
    if model_code != "torchtitan":
        return [f"tp = {tp} (the step walk follows tensor parallelism as torchtitan's apply_tp runs it)"]
    counts = (("attention heads", model.heads), ("KV heads", model.kv_heads), ("MLP columns", model.ffn_hidden), ("vocabulary rows", model.vocab))
    gaps = [f"tp = {tp} over {n} {what} (not whole per rank)" for what, n in counts if n % tp]
    if recompute not in (Recompute.NONE, Recompute.FULL):
        gaps.append(f"--recompute {recompute.value} with tp = {tp} (the TP walk checkpoints whole blocks or nothing)")
    return gaps


def check_tp(model: TransformerModel, step: FsdpStep) -> None:
    policies = set(step.block_policies or ()) | ({step.recompute.value} if step.block_policies is None else set())
    gaps = tp_gaps(model, step.tp, step.model_code, Recompute.NONE) + [f"checkpointing {p!r} with tp" for p in policies if p not in ("none", "full")]
    if gaps:
        raise InputError(f"{model.name}: the step walk under tensor parallelism: {'; '.join(gaps)}")


def fsdp_step_peak(model: TransformerModel, step: FsdpStep) -> StepPeak:
    """The allocation peak of one steady-state step of one rank under fully_shard (module docstring)."""
    walk = StreamWalk()
    walk_fsdp_step(model, step, walk)
    pools = walk.pools()
    return replace(peak_of(walk, KINDS), reserved=sum(size for _, size in pools), reserved_by="streams", stream_pools=pools)


def walk_fsdp_step(model: TransformerModel, step: FsdpStep, walk: Walk) -> None:
    """One steady-state step of one rank under fully_shard, event by event into `walk` (a StreamWalk for fsdp_step_peak;
    fit's search passes its own, parcalc.core.search_walk_runs)."""
    check_fsdp_step(model, step)
    master = parameter_bytes(step.precision)  # the shards (and their gradients and AdamW states) in the parameters' dtype
    compute = 4.0 if step.precision is Precision.FP32 else 2.0
    x = shapes_of(model, step.micro_batch, step.seq_len // step.cp, compute, compute, False)  # MixedPrecisionPolicy: no autocast
    x = replace(x, cp=step.cp, cp_rotate=step.cp_rotate)
    if step.model_code == "torchtitan" and model.moe is not None:  # the shared experts' one FeedForward (memory_torchtitan_moe)
        x = replace(x, fs=model.moe.shared_experts * model.moe.shared_width)
    if step.model_code == "torchtitan" and model.mla is not None:  # DeepSeek's latent attention (memory_torchtitan_mla)
        m = model.mla
        x = replace(x, mla=(m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim))
    # torchao's Float8Linear under MixedPrecisionPolicy(param_dtype=bfloat16) (memory_torchao_float8: check_fsdp_step)
    x = replace(x, float8=step.precision is Precision.FP8, float8_weights=step.float8_all_gather and step.precision is Precision.FP8)
    hooks = _FsdpHooks(model, step, compute, master)
    if step.pp > 1:  # the stage's own units (pipeline_llama_manual_split), none resharded during the step
        ranges = step.pp_chunks or (step.stage_layers or (0, model.layers),)
        root = {p.name: p for p in _root_params(model, step.tp)}
        own = ((root["embedding"],) if step.pp_stage == 0 else ()) + ((root["final_norm"], root["head"]) if step.pp_stage == step.pp - 1 else ())
        roots = {"root": own}
        if step.pp_zero_bubble:  # rank 0 holds the first stage and the last, each its own root (memory_pipeline_zero_bubble.root_unit)
            roots = {"root": (root["embedding"],), "root.last": (root["final_norm"], root["head"])} if step.pp_stage == 0 else {"root": ()}
        hooks.units = {**roots, **{f"L{i}": _block_params(layer_model(model, i), step.tp, step.model_code == "torchtitan") for lo, hi in ranges
                                   for i in range(lo, hi)}}  # fmt: skip
        hooks.reshard_after_forward = dict.fromkeys(hooks.units, False)
    walk.phase = "before the step"
    hooks.sharded_state(walk, step.optimizer.states)
    walk.alloc("cublas", step.cublas_workspace, "workspace", "cuBLAS workspaces")
    if step.cp > 1:  # the batch and freqs_cis as context_parallel leaves them (memory_torchtitan_cp.CP_SOURCES['buffers'])
        context_parallel_buffers(walk, x, step.seq_len, model.head_dim, step.micro_batches if step.pp > 1 else 0)
    else:
        walk.alloc("ids", x.T * 8, "activations", "input ids and labels (int64)")
    on_device = step.optimizer_impl == "fused" if step.step_counters_on_device is None else step.step_counters_on_device
    if step.optimizer.states and on_device:
        for k in range(sum(len(p) for p in hooks.units.values())):  # a 4-byte tensor each, a 512-byte block each
            walk.alloc(f"step_count{k}", 4, "optimizer states", "AdamW step counters")
    checkpointed = step.recompute is Recompute.FULL
    if step.model_code == "torchtitan" and model.mla is not None:  # a ComplexRoPE cache in every attention, resized to the
        for i in range(model.layers):  # training length (memory_torchtitan_mla.TT_MLA_SOURCES['model']), unsharded
            walk.alloc(f"L{i}.rope_cache", step.seq_len * model.mla.qk_rope_head_dim // 2 * 8, "buffers", "RoPE cache buffer (complex64)")
    elif step.model_code == "torchtitan":  # its own Transformer, the freqs_cis buffer (max_seq_len = seq_len) unsharded
        walk.alloc("freqs_cis", step.seq_len * model.head_dim // 2 * 8, "buffers", "RoPE freqs_cis buffer (complex64)")
    if step.model_code == "torchtitan":
        if model.moe is not None:  # each MoE block's expert_bias_E and tokens_per_expert_E (memory_torchtitan_moe)
            from parcalc.core.memory_torchtitan_moe import moe_buffers

            for unit in hooks.units:  # the MoE layers' only (layer_model)
                if unit.startswith("L") and model.moe.is_moe_layer(int(unit[1:])):
                    moe_buffers(walk, model.moe.experts, unit)
        for k in range(1, len(step.pp_chunks)):  # each virtual stage a deep copy of the model with its own buffer
            walk.alloc(f"freqs_cis.{k}", step.seq_len * model.head_dim // 2 * 8, "buffers", "RoPE freqs_cis buffer of another stage")
        policy = {Recompute.NONE: "none", Recompute.FULL: "full", Recompute.OP: "op"}[step.recompute]
        policies = step.block_policies or (policy,) * model.layers
        if step.pp > 1:
            _pipeline_stage(walk, model, x, step, policies, hooks)
        elif step.tp > 1:
            torchtitan_tp_step(walk, model, x, policies, step.embedding_backward_tables, step.tp, hooks, step.compiled)
        else:
            torchtitan_step(walk, model, x, policies, step.embedding_backward_tables, hooks, step.compiled, step.compiled_loss)
    else:
        walk_forward(walk, model, x, checkpointed, hooks)
        walk_backward(walk, model, x, checkpointed, step.embedding_backward_tables, hooks)
    walk.phase = f"optimizer step ({step.optimizer_impl})"
    allocs = _unit_allocs(hooks.units, step.shards, master, step.optimizer.states)
    if step.optimizer.states == 2 and step.optimizer_impl == "foreach":
        walk.alloc_all(allocs.sqrt)
        walk.free(*allocs.sqrt_keys)
    elif step.optimizer.states == 2 and step.optimizer_impl == "for-loop":
        largest = max(allocs.shards)
        walk.alloc("opt.sqrt", largest, "temporaries", "AdamW: exp_avg_sq.sqrt()")
        walk.transient("opt.denom", largest, "temporaries", "AdamW: sqrt / bias correction")
        walk.free("opt.sqrt")


def _pipeline_stage(walk: Walk, model: TransformerModel, x: Any, step: FsdpStep, policies: tuple[str, ...], hooks: _FsdpHooks) -> None:
    """A pipeline stage under FSDP2: only its own units, none resharded during the step (memory_pipeline_stage)."""
    from parcalc.core.memory_pipeline_stage import PipelineHooks, StagePlan, walk_stage

    if step.pp_zero_bubble:  # two stages a rank in a V under ScheduleZBVZeroBubble or ScheduleDualPipeV
        from parcalc.core.memory_pipeline_dualpipe import walk_dualpipe_rank
        from parcalc.core.memory_pipeline_interleaved import InterleavedHooks
        from parcalc.core.memory_pipeline_zero_bubble import VRankPlan, walk_v_rank

        (first, second) = step.pp_chunks
        v_rank = VRankPlan(step.pp_stage, step.pp, step.micro_batches, (first, second))
        walk_v = walk_dualpipe_rank if step.pp_dualpipev else walk_v_rank
        walk_v(walk, model, x, v_rank, policies, step.embedding_backward_tables, InterleavedHooks(hooks, x.c, step.reduce_bytes),
               WALK_PROGRESS.get())  # fmt: skip
        return
    if step.pp_chunks:  # several virtual stages a rank under ScheduleInterleaved1F1B
        from parcalc.core.memory_pipeline_interleaved import InterleavedHooks, RankPlan, walk_rank

        rank = RankPlan(step.pp_stage, step.pp, step.micro_batches, step.pp_chunks, step.tp, step.compiled)
        walk_rank(walk, model, x, rank, policies, step.embedding_backward_tables, InterleavedHooks(hooks, x.c, step.reduce_bytes),
                  WALK_PROGRESS.get())  # fmt: skip
        return
    lo, hi = step.stage_layers or (0, model.layers)
    plan = StagePlan(step.pp_stage, step.pp, step.micro_batches, lo, hi, step.pp_return_outputs, step.tp, step.compiled)
    walk_stage(walk, model, x, plan, policies, step.embedding_backward_tables, PipelineHooks(hooks, x.c, step.reduce_bytes))


def fsdp_replayed(model: TransformerModel, step: FsdpStep) -> Replayed:
    """What the caching allocator reserves over a run of this step (replayed_reserve, expandable segments as the step's
    profile sets them): the reserved figure memory's total, `fit` and the rows fit's search shows take (fsdp_walked)."""
    return fsdp_walked(model, step)[1]


@lru_cache(maxsize=256)
def fsdp_walked(model: TransformerModel, step: FsdpStep) -> tuple[StepPeak, Replayed, float]:
    """One walk of the step: its allocation peak (fsdp_step_peak's), the allocator replayed over a run of it
    (replayed_reserve), and the floor of that replay from each stream's own peak (StreamWalk.floor). The replay costs
    about what the walk does (0.03-0.1 s of CPU a step, Llama 3 8B FSDP 8 to a 405B TP 8 x PP 8 stage)."""
    walk = EventWalk()
    walk_fsdp_step(model, step, walk)
    return _peak_of(walk), replayed_reserve(walk, step.expandable_segments), walk.floor(step.expandable_segments)


@lru_cache(maxsize=4096)
def fsdp_step_floor(model: TransformerModel, step: FsdpStep) -> tuple[StepPeak, float]:
    """The step's allocation peak and the floor of its replay (StreamWalk.floor), from one walk without the replay: what
    `fit`'s deepest-model answer screens layer counts by before it replays the one it gives (for dense models the search's
    floor, from shorter walks: fit_table.max_layers)."""
    walk = StreamWalk()
    walk_fsdp_step(model, step, walk)
    return _peak_of(walk), walk.floor(step.expandable_segments)


def _peak_of(walk: StreamWalk) -> StepPeak:
    pools = walk.pools()
    return replace(peak_of(walk, KINDS), reserved=sum(size for _, size in pools), reserved_by="streams", stream_pools=pools)


@lru_cache(maxsize=4096)
def fsdp_reserved_total(model: TransformerModel, step: FsdpStep) -> float:
    """The step's peak as the allocator reserves it (no reserve added): fit's search, one row at a time."""
    return fsdp_step_peak(model, step).reserved
