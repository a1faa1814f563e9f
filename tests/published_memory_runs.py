"""Published per-GPU memory peaks of training runs, with the flags that describe each to `parcalc memory`.

Plain data (no parcalc imports, no tests): tests/test_memory_published.py runs them. Every number was read
in its source with git from a fetched snapshot (pytorch/torchtitan at b5bcd76c66d0, whose history holds the
benchmark commits): each row quotes it. A row says what of its run parcalc's memory does not model
(`gaps`); a row with none is a mechanism parcalc models, held to a band; the others print as known gaps.

What torchtitan's 'Memory(GiB)' is: torchtitan/metrics.py get_peak_stats at 9dec370 (the Dec 2024 page's
commit) and torchtitan/components/metrics.py at b5bcd76 log `reserved_bytes.all.peak` of
torch.cuda.memory_stats, i.e. the caching allocator's peak reserved bytes, as 'memory: X GiB'; the Dec 2024
page: 'Different PP ranks can have different peak memory usages. We take the maximum across all GPUs.'

Searched, and left out: NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and its archive (snapshot 067f987d:
no memory column; `git grep -i memory` finds none; the one Megatron-Bridge memory figure, a DeepSeek-V3 rank-0 peak
allocated, is in tests/published_modern_runs.py and tested by tests/test_moe_memory_published.py); Moonlight (a search
of stored pages found no per-GPU memory figure); Qwen3: only torchtitan's torchtitan/components/quantization/nvfp4.md
prints bf16 rows (Qwen3 8B and Llama 3 8B, FSDP 4, torch.compile) without naming the GPU or the checkpointing.
"""

from __future__ import annotations

from dataclasses import dataclass

TT_DEC24 = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torch 1963fc8, torchtitan 9dec370)"
TT_TRAINY = "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torch 2.8.0a0+5228986c39, torchtitan e7c0cae)"
# torchtitan's llama3_8b.toml at 9dec370 (train_configs/) and e7c0cae (torchtitan/models/llama3/train_configs/): seq_len = 8192,
# activation_checkpoint mode 'selective' with selective_ac_option 'op'
TOML_8B = "train_configs/llama3_8b.toml: seq_len = 8192, [activation_checkpoint] mode = 'selective', selective_ac_option = 'op'"
# Table 4 (FSDP 32 x TP 8, Float8, full checkpointing) was walked eager in session 16 (compiled since session 17: COMPILE_TP below): torchao's Float8 TP styles
# (tests/ground_truth/test_torch_memory_float8_tp.py, 9 FSDPMemTracker cases 0.9997-1.0006). Its reserved peak, 59.75 GiB of
# 71.9 (0.831; the textbook sum before: 0.745), equals the bf16 walk's: the peak is loss parallel's backward (four fp32
# logits-sized tensors of 131072 tokens x 16032 vocabulary rows, 31.3 GiB), after every block's recomputation and casts
FP8_ALL_GATHER_405B = ("torchao's FP8 all-gather in FSDP (train_configs/llama3_405b.toml at 9dec370: enable_fsdp_float8_all_gather and "
                       "precompute_float8_dynamic_scale_for_fsdp true): walked eager with TP and in pipeline stages, not with the "
                       "compiled TP block (its Inductor code is read with the weights cast in the block), the weights gathered in bf16 here")
# Tables 4, 5 and 6's CP 1 row ran torch.compile with TP (and PP): walked with --compile since session 17, each block's Inductor
# code with apply_tp's collectives traced into it (parcalc.core.memory_torchtitan_tp_compile; tests/ground_truth/
# test_torch_memory_torchtitan_tp_compile.py, profiler-counted compiled TP steps on fake ranks, bf16 and torchao's Float8 TP
# styles). Walked eager before (session 16) -> compiled: Table 4 0.831 -> 0.831 (the peak stays loss parallel's backward, where a
# fully checkpointed block, compiled or eager, keeps its input alone), Table 5 0.925 -> 0.931, Table 6 CP 1 1.014 -> 1.020 (the
# last stage's peak 0.5 GiB higher compiled). What the read code leaves out: AsyncTP (Tables 5 and 6: torchtitan sets
# torch._inductor.config._micro_pipeline_tp, fusing the all-gathers and reduce-scatters with the matmuls over symmetric memory).
COMPILE_TP = ("torch.compile with TP and CP: the compiled TP block (parcalc.core.memory_torchtitan_tp_compile) has no ring attention "
              "and the CP walk no TP")
# the FSDP Float8 rows: compiled, the walk follows Inductor's code for torchao's casts (parcalc.core.memory_float8_compile,
# tests/ground_truth/test_torch_memory_float8_compile.py: 9 profiler-counted compiled steps on the CPU, 0.9984-0.9998). Until
# session 15 --compile --precision fp8 kept the textbook sum (0.944 / 0.946 of Table 1 / 3's rows by luck; the eager Float8
# walk gives 1.666 / 1.842: eager selective op checkpointing caches abs(x) of each cast and a cast holds 9 B an element, where
# Inductor fuses each cast into one kernel writing the FP8 copy and saves only the amax scalars). Walked compiled: Table 1
# 0.924, Table 3 0.920 (the bf16 compiled rows: 0.921 / 0.917), Table 2's FSDP 8 row 0.904 (textbook 0.718).
# The Trainy rows ran torchtitan e7c0cae, whose components/loss.py:25-30 build_cross_entropy_loss compiles the loss with
# --training.compile (from bbb1b616e, 2025-04-02; 9dec370 keeps it eager): walked with --compile-loss (parcalc.core.
# memory_compiled_loss; tests/ground_truth/test_torch_memory_compiled_loss.py, profiler-counted compiled steps on the CPU within
# 500 B). The peak stays in the loss's backward, now the bf16 logits the compiled graph saved and their bf16 gradient (7.83 GiB)
# where the eager loss held three fp32 logits-sized tensors (23.5 GiB): 4 nodes 59.28 -> 43.62 GiB (1.236 -> 0.909), 8 nodes
# 57.37 -> 41.71 GiB (1.221 -> 0.888; textbook 1.278 / 1.265). What is left is what the walked FSDP rows of Tables 1 and 3 miss
# (6-7.5 GiB there, 4.3 / 5.3 GiB here): at 8 nodes it puts the row just under the band.
# Session 17: every walked row is compared with the allocator replayed per CUDA stream over a run (the build, a first step
# without optimizer states, two steady steps) with expandable segments, as torchtitan's run_llama_train.sh / run_train.sh set
# them (parcalc.core.memory_fsdp.replayed_reserve, step_reserved_replayed), where it was each stream's pool at its own peak:
# Table 1 FSDP 0.910 -> 0.962, compile 0.921 -> 0.979, compile + Float8 0.924 -> 0.982; Table 3 0.908 -> 0.970, 0.917 -> 0.986,
# 0.920 -> 0.990; Table 2 CP 1 / 2 / 4 / 8 0.904 / 0.902 / 0.905 / 0.901 -> 1.005 / 1.026 / 1.037 / 1.035; Table 4 0.831 ->
# 0.922; Table 5 0.925 -> 0.950; Table 6 CP 1 1.014 -> 1.057; Trainy 4 / 8 nodes 0.909 / 0.888 -> 0.917 / 0.898. Most of it is
# the default stream's, and it forms in the eager loss's backward (session 18, replaying the events one by one: Table 1's FSDP
# row is 4.18 GiB above its live blocks from the moment the fp32 gradient of the logits (7.83 GiB) finds no hole it fits and is
# mapped at the top; it is there in the first step, before any optimizer state exists, and the states add only their own 8 B a
# parameter; the compiled Float8 rows of Tables 1 and 3 the same, 4.4 GiB). The Trainy rows (--compile-loss, no fp32 logits)
# gain 0.4 GiB: their loss holds two bf16 logits-sized tensors, which leave no such hole.
# Session 18 (issue #30, what the Trainy rows hold that the walk did not find): the allocator they ran. The Trainy page's command
# (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, as first published at a0e5b6c8b and since) starts `torchrun ...
# torchtitan/train.py` itself, not run_train.sh, and sets no PYTORCH_CUDA_ALLOC_CONF; torchtitan e7c0cae sets expandable_segments
# in its launch scripts only (run_train.sh:24; `git grep expandable_segments e7c0cae` finds nothing in torchtitan/), and torch
# 2.8's default is off (c10/cuda/CUDAAllocatorConfig). So the rows are replayed with the allocator's defaults, a cudaMalloc'd
# segment for each request no cached block serves (memory --no-expandable-segments; parcalc.core.allocator.CachingAllocator):
# 44.00 -> 47.41 GiB (0.917 -> 0.988) and 42.16 -> 46.46 GiB (0.898 -> 0.989), the 8-node row in the band, and the replayed
# drop from 4 to 8 nodes 0.95 GiB against the published 0.99 (with expandable segments 1.84: the figure that showed the rows
# were not replayed as they ran). What the segments hold beyond the live blocks is 3.8 / 4.8 GiB: the loss's and the blocks'
# large tensors each take a segment of their own size when no freed one fits, and a freed segment is reused only by requests
# it fits. The Dec 2024 page names no launcher, and its rows keep run_llama_train.sh's expandable segments (FSDP_SOURCES
# ['launcher']); with the defaults instead they would be Table 1 0.995 / 0.999 / 1.003, Table 3 1.000 / 0.999 / 1.004, Table 2
# 0.991 / 0.955 / 0.953 / 0.973, Table 4 0.912, Table 5 1.047, Table 6 1.144 / 1.043 / 1.022 / 1.006 (Table 6's CP 1 row out
# of the band): no setting is taken from those numbers.
# The other candidates, each read at the versions that ran (torchtitan e7c0cae, torchao 0afa4c1, torch 2.8.0a0), and what each
# moves (4 / 8 nodes, replayed with expandable segments, GiB):
# - the Trainy command as first published (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md at a0e5b6c8b, #1361) also passes
#   --float8.precompute_float8_dynamic_scale_for_fsdp and --float8.force_recompute_fp8_weight_in_bwd. The first makes
#   fsdp_pre_all_gather cast with the precomputed scale (torchao 0afa4c1 torchao/float8/fsdp_utils.py:218-220, no abs(x) of the
#   shard) after torch._foreach_norm(weights, ord=inf) and torch.stack of one scalar a weight (fsdp_utils.py:60-61; torchtitan
#   components/quantization/float8.py:89, 117-121, a post-optimizer hook): walked with the precomputed cast the replayed figure
#   moves by under 0.01 GiB (the abs of one fp32 shard at a time on the all-gather stream, 7 MB at most); the second has no
#   effect at 0afa4c1 (torchao/float8/config.py:195-198: 'deprecated and currently has no effect'). Refuted as the gap.
# - AdamW: e7c0cae's config_manager.py:139 defaults optimizer.implementation to "fused" (torch._fused_adamw_, in place, a step
#   counter on the GPU per parameter); the torchtitan profile walks 9dec370's foreach, whose torch._foreach_sqrt holds one fp32
#   copy of the states at once in the optimizer step, far below the step's peak. Walked fused: 44.00 -> 43.96, 42.16 -> 42.08
#   (the wrong way; not switched here: --framework torchtitan is 9dec370's profile, and no flag picks the implementation yet).
# - gradient clipping (max_norm = 1.0, config_manager.py:210; train.py:428-433 dist_utils.clip_grad_norm_(..., foreach=True),
#   distributed/utils.py:278-342): torch.nn.utils.get_total_norm's torch._foreach_norm over the DTensor gradients gives one
#   Partial scalar a gradient, full_tensor() all-reduces one scalar, clip_grads_with_norm_'s torch._foreach_mul_ is in place:
#   scalars in the small pool. Refuted; held on the CPU (tests/ground_truth/test_torch_grad_clip_scales_memory.py: 80 B for the
#   clipping, 136 B for the precomputed scales' ops, over fully_shard's DTensors with 4 MiB shards).
# - the training loop (train.py:403-439 at e7c0cae): `del pred` before backward; it keeps loss.detach() scalars and no grad norm
#   across steps; metrics read torch.cuda.memory_stats (components/metrics.py:70) and reset the peak after each log (:340, :413),
#   which changes nothing of reserved_bytes.all.peak in a run that never empties the cache. Refuted.
# - e7c0cae's selective op _save_list (models/llama3/parallelize_llama.py:218-227) no longer holds aten.abs (9dec370's did): it
#   can only save less than the policy the compiled Float8 programs were generated with (memory_float8_compile). Not the gap.
# - torch.compile's first step (compilation, Triton autotuning clones of mutated arguments, at most an activation-sized buffer of
#   one block, 0.44 GiB) and the optimizer states created lazily at its end: the replay's first step stays 1.9 / 1.0 GiB under
#   the steady step's reserved figure (the states come after its peak), so nothing of the first step sets the peak. Refuted.
# - ProcessGroupNCCL's record_stream on collective tensors (the freed block waits for the NCCL stream's event): FSDP2 keeps each
#   all-gather output and reduce-scatter input until after its copy-out or the next post-backward, and the step's peak (the
#   loss's backward) comes before any reduce-scatter of the step; its size in time is not walked (a replay has no clock).
# What the published rows themselves say (test_memory_published.py holds both):
# - from 4 to 8 nodes only the shard group changes (same command, commit, batch); the sharded fp32 parameters and the two AdamW
#   states, live through the whole step, fall by 12 B x 8.03e9 x (1/32 - 1/64) = 1.40 GiB, and no allocation grows with the
#   shard group (every dimension of Llama 3 8B divides by 64: no padding; NCCL's buffers are outside the caching allocator). The
#   published peak falls 0.99 GiB: at 8 nodes at least 0.41 GiB more is reserved and free than at 4 nodes, which no tensor can
#   give and the default allocator's segments do (replayed: 0.95 GiB).
# - Table 3's compiled Float8 row (FSDP 128, 9dec370, the eager fp32 loss) less the Trainy 8-node row: published 61.8 - 46.97 =
#   14.83 GiB; the walk's live blocks at each stream's peak (step_reserved) differ by 15.12 GiB (the loss's three fp32
#   logits-sized tensors against the compiled loss's two bf16 ones, the shard groups, the FP8 all-gather), the replayed figures,
#   each with its run's allocator, by 14.75 (61.21 - 46.46; both with expandable segments 19.05).
# torchtitan/parallelisms/pipelining_utils.py generate_split_points at 9dec370: 126 layers over 8 single-stage ranks, base 15 and
# the 6 extra layers to middle stages: 15 + 6 x 16 + 15
SPLIT_405B = ("--first-stage-layers", "15", "--last-stage-layers", "15")
# train_configs/llama3_405b.toml at 9dec370 sets [float8] enable_float8_linear, enable_fsdp_float8_all_gather and
# precompute_float8_dynamic_scale_for_fsdp true, and torchtitan/float8.py at 9dec370 (Float8Handler, lines 51-53) turns the FP8
# all-gather on only where parallel_dims.dp_shard_enabled (dp_shard > 1): Table 5 (FSDP 8) and Table 6's FSDP 8 / 4 / 2 rows
# gathered in FP8, its FSDP 1, CP 8 row in bf16 (fully_shard still shards over the 8 CP ranks). Since session 17 the eager rows
# pass --fp8-all-gather (tests/ground_truth/test_torch_memory_float8_all_gather_tp_pp.py: FSDPMemTracker with TP, MemTracker
# over Schedule1F1B stages with TP and CP x TP, 0.9966-1.0006): Table 6 CP 2 1.006 -> 0.924, CP 4 0.991 -> 0.910 by the step's
# streams (step_reserved), 1.038 -> 0.946 and 1.026 -> 0.935 with the allocator replayed (step_reserved_replayed, the figure
# test_memory_published.py holds) (each stage keeps its 15-16 blocks unsharded through the step, reshard_after_forward=False:
# their TP-local Float8 weights in FP8 hold 6.2 GiB less than in bf16); CP 8 stays 0.907 / 0.927 (bf16 gathers, as it ran). Table 5 and Table 6's CP 1 row ran compiled with TP,
# whose Inductor code is read with the weights cast in the block: gathered in bf16 here (FP8_ALL_GATHER_405B).
# torchtitan 9dec370's CP rotates K/V with torch's 'allgather' method (config_manager.py --experimental.context_parallel_rotate_method
# default): --cp-comm all-gather. Table 2's CP 2 / 4 / 8 rows (compile, Float8, full checkpointing) are walked as they ran since
# session 16 (parcalc.core.memory_torchtitan_cp_compile: the block's Inductor code with the ring traced into it, profiler-held on
# the CPU, tests/ground_truth/test_torch_memory_torchtitan_cp_compile.py): 75.95 / 84.2 (0.902), 76.01 / 84.0 (0.905), 76.13 /
# 84.5 (0.901); before, the textbook sum: 0.721, 0.723, 0.724. Under full checkpointing the compiled block keeps its input alone,
# as the eager one does, and the step's peak is in the loss's backward: the compiled rows equal their bf16 eager twins.
# Table 2's rows walked as their bf16 eager twins (without --compile and --precision fp8): the walk's
# reserved peak 75.87 GiB of 83.9 (0.904, CP 1), 75.95 of 84.2 (0.902, CP 2), 76.01 of 84.0 (0.905, CP 4), 76.13 of 84.5 (0.901,
# CP 8): flat across the CP degrees as the published peaks are (each rank s / cp = 32768 tokens; the ring's all-gathered K/V and
# the merge's fp32 copies are small beside the 128K-vocabulary logits of the loss's backward, the peak). What is left of each CP
# row is what is left of the FSDP 8 row: Float8 and its compilation (test_memory_published.py checks the twins).
# The compiled rows of Tables 1 and 3 are walked with each block's compiled code (--compile): 72.94 / 77.0 GiB (0.947; the
# eager walk gave 76.94, 0.999) and 58.83 / 62.0 GiB (0.949; eager walk 62.83, 1.013). The walk's compiled step keeps 4.0 GiB
# less than its eager one (w2's output, which eager selective op checkpointing caches and the compiled partitioner does not
# save: 8192 x 2 tokens x 4096 x 2 B x 32 blocks, at the peak in the loss's backward); the published runs drop 5.4 and 5.0 GiB.
# Both the eager and the compiled rows come out 0.93-0.95 of the published reserved peak, and parcalc's total holds a 2 GiB
# reserve (CUDA context, NCCL buffers, fragmentation) that reserved_bytes does not hold but for its fragmentation: without it
# the walk's reserved peak is 0.909 / 0.908 (eager) and 0.921 / 0.917 (compiled) of the published figures.
FRAGMENTATION = "torch.compile's and Float8's allocations replayed as the walk orders them (the allocator replayed per stream)"


@dataclass(frozen=True)
class MemoryRun:
    key: str
    source: str  # where, and the row as printed
    flags: tuple[str, ...]  # `parcalc memory` flags for the run (model, layout, batch, sequence, recomputation, precision, framework)
    published_gib: float  # per GPU, as printed
    what: str  # what the figure is
    gaps: tuple[str, ...]  # what of the run parcalc does not model (empty: held to the band)
    in_band_despite: str = ""  # why a row with gaps is held to the band all the same (it lands there), else ""


_8B = ("--model", "llama3-8b", "--framework", "torchtitan", "--flash-attention", "--zero", "3")
_70B = ("--model", "llama3-70b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--sequence-parallel")
_405B = ("--model", "llama3-405b", "--framework", "torchtitan", "--flash-attention", "--zero", "3", "--sequence-parallel")
_RESERVED = "max over GPUs of torch.cuda reserved_bytes.all.peak (torchtitan's 'memory')"


def _t1(row: str, gib: float, gaps: tuple[str, ...], gpus: int = 8, table: str = "Table 1", fp8: bool = False,
        luck: str = "") -> MemoryRun:  # fmt: skip
    compiled = ("--compile",) if "torch.compile" in row else ()
    return MemoryRun(f"tt2412-8b-{gpus}gpu-{row.lower().replace(' + ', '-').replace(' ', '-').replace('.', '')}",
                     f"{TT_DEC24}, {table} '1D Parallelism (FSDP). Llama 3.1 8B model. {gpus} GPUs. Local batch size 2, global batch "
                     f"size {2 * gpus}. Selective activation checkpointing.', row '| {row} | ... | {gib} |'; {TOML_8B}",
                     (*_8B, "--dp", str(gpus), "--micro-batch", "2", "--seq-len", "8192", "--recompute", "op",
                      *(("--precision", "fp8") if fp8 else ()), *compiled), gib, _RESERVED, gaps, luck)  # fmt: skip


def _t2(fsdp: int, cp: int, seq: int, gib: float) -> MemoryRun:
    return MemoryRun(f"tt2412-8b-fsdp{fsdp}-cp{cp}-s{seq}",
                     f"{TT_DEC24}, Table 2 'FSDP + CP + torch.compile + Float8. Llama 3.1 8B model. 8 GPUs. Local batch size 1. Full "
                     f"activation checkpointing.', row '| FSDP {fsdp}, CP {cp} | {seq} | ... | {gib} |'",
                     (*_8B, "--dp", str(fsdp), "--cp", str(cp), *(("--cp-comm", "all-gather") if cp > 1 else ()), "--micro-batch", "1",
                      "--seq-len", str(seq), "--recompute", "full", "--precision", "fp8", "--compile"), gib, _RESERVED,
                     (FRAGMENTATION,),
                     f"the compiled Float8 walk{' under CP' if cp > 1 else ''} (full checkpointing), the allocator replayed per "
                     "stream with expandable segments over a run, lands at 1.00-1.04")  # fmt: skip


# Tables 5 and 6 are walked eager since session 16 with Float8 inside the pipeline stages (tests/ground_truth/
# test_torch_memory_float8_pp.py: MemTracker over Schedule1F1B stages with torchao's Float8 TP styles, 0.9999-1.0003):
# Table 5's 1F1B row 76.33 GiB of 82.5 (0.925; the textbook sum before 0.516; the bf16 walk 0.930), Table 6's FSDP 8 CP 1
# row 76.32 of 75.3 (1.014; before 0.565); since session 17 both walked compiled (Inductor's TP block: 0.931 / 1.020). Table 6's CP 2 / 4 / 8 rows are walked since session 17 with torch's ring attention
# on each TP rank's local heads inside the stages, all-gather rotation as torchtitan's default (parcalc.core.memory_torchtitan_cp;
# tests/ground_truth/test_torch_memory_torchtitan_cp_tp.py, FSDPMemTracker on (dp, cp, tp) meshes, bf16 and Float8, 1.0003-1.0006;
# the stage walk under CP: test_torch_memory_pipeline_cp.py, MemTracker over Schedule1F1B stages, bf16 0.9965-1.0001, Float8
# 1.0000-1.0003): 76.36 / 75.9 (1.006), 76.39 / 77.1 (0.991), 77.01 / 84.9 (0.907); the textbook sum before: 0.562, 0.554, 0.504.
# The peak is the first stage's (15 blocks) backward of its second micro-batch: its fp32 gradient accumulators (30.1 GiB), the
# checkpointed block inputs of the micro-batches in flight, the unsharded parameters; the ring adds 0.6 GiB at CP 8 (its
# all-gathered K/V in the backward). The published peak rises 7.8 GiB from CP 4 to CP 8 where that walk rose 0.6; with the FP8
# all-gather walked as the rows ran (below: on at FSDP 2 / 4, off at FSDP 1) the walk rises 6.8 GiB (70.17 -> 77.01; replayed
# 72.08 -> 78.73, 6.7), the CP 8 row's bf16 unsharded weights; the remaining 1 GiB is not found.
FLOAT8_PP_WALKED = ("the compiled Float8 TP blocks inside the pipeline stages (Inductor's code with torchao's TP styles) land in the "
                    "band; AsyncTP and the FP8 all-gather of llama3_405b.toml are not walked")
FLOAT8_PP_CP_WALKED = ("the eager Float8 walk inside the pipeline stages with torch's ring attention on each TP rank's heads (ground "
                       "truth to 0.06 % with TP, 0.35 % in the stages), the weights all-gathered in FP8 where the run did (FSDP > 1), "
                       "lands in the band; the blocks' compilation with CP is not walked")


def _t6(fsdp: int, cp: int, seq: int, gib: float) -> MemoryRun:
    return MemoryRun(f"tt2412-405b-tp8-pp8-fsdp{fsdp}-cp{cp}-s{seq}",
                     f"{TT_DEC24}, Table 6 '4D parallelism (FSDP + TP + PP + CP) + torch.compile + Float8 + AsyncTP + 1F1B. Llama 3.1 "
                     f"405B model. 512 GPUs (TP 8, PP8). Local batch size 8. Full activation checkpointing.', row '| FSDP {fsdp}, CP {cp} "
                     f"| {seq} | ... | {gib} |'",
                     (*_405B, *SPLIT_405B, "--tp", "8", "--pp", "8", "--dp", str(fsdp), "--cp", str(cp), *(("--cp-comm", "all-gather") if cp > 1 else ()),
                      # eager rows: the FP8 all-gather where torchtitan's converter turned it on (dp_shard > 1), as they ran
                      *(("--fp8-all-gather",) if cp > 1 and fsdp > 1 else ()),
                      "--micro-batch", "1", "--micro-batches", "8",
                      "--seq-len", str(seq), "--recompute", "full", "--precision", "fp8", *(() if cp > 1 else ("--compile",))),
                     gib, _RESERVED, (COMPILE_TP,) if cp > 1 else ("AsyncTP (torch._inductor.config._micro_pipeline_tp: not in the "
                                                                "read code)", FP8_ALL_GATHER_405B),
                     FLOAT8_PP_CP_WALKED if cp > 1 else FLOAT8_PP_WALKED)  # fmt: skip


RUNS: tuple[MemoryRun, ...] = (
    _t1("FSDP", 82.4, ()),
    _t1("FSDP + torch.compile", 77.0, ()),
    _t1("FSDP + torch.compile + Float8", 76.8, (), fp8=True),
    _t1("FSDP", 67.0, (), gpus=128, table="Table 3"),
    _t1("FSDP + torch.compile", 62.0, (), gpus=128, table="Table 3"),
    _t1("FSDP + torch.compile + Float8", 61.8, (), gpus=128, table="Table 3", fp8=True),
    _t2(8, 1, 32768, 83.9),
    _t2(4, 2, 65536, 84.2),
    _t2(2, 4, 131072, 84.0),
    _t2(1, 8, 262144, 84.5),
    MemoryRun("tt2412-70b-fsdp32-tp8", f"{TT_DEC24}, Table 4 '2D parallelism (FSDP + TP) + torch.compile + Float8. Llama 3.1 70B model. "
              "256 GPUs (FSDP 32, TP 8). Local batch size 16, global batch size 512. Full activation checkpointing.', row "
              f"'| 2D | 829 | 71.9 |'; sequence length not printed: {TOML_8B.replace('8b', '70b')} is not re-read, 8192 taken",
              (*_70B, "--tp", "8", "--dp", "32", "--micro-batch", "16", "--seq-len", "8192", "--recompute", "full", "--precision", "fp8",
               "--compile"),
              71.9, _RESERVED, ("the sequence length (not printed; train_configs/llama3_70b.toml at 9dec370: seq_len = 8192)",
                                "5.6 GiB the replayed allocator does not find (0.922)"),
              "walked compiled with Float8's TP styles, the allocator replayed per stream with expandable segments over a run: 0.922 "
              "(each stream's own peak, no fragmentation: 0.831)"),
    MemoryRun("tt2412-405b-fsdp8-tp8-pp8-1f1b", f"{TT_DEC24}, Table 5 '3D parallelism (FSDP + TP + PP) + torch.compile + Float8 + AsyncTP. "
              "Llama 3.1 405B model. 512 GPUs (FSDP 8, TP 8, PP8). Local batch size 32, global batch size 256. Full activation "
              "checkpointing.', row '| 1F1B | 100 | 82.5 |'",
              (*_405B, *SPLIT_405B, "--tp", "8", "--pp", "8", "--dp", "8", "--micro-batch", "4", "--micro-batches", "8", "--seq-len", "8192",
               "--recompute", "full", "--precision", "fp8", "--schedule", "1f1b", "--compile"),
              82.5, _RESERVED, ("AsyncTP (torch._inductor.config._micro_pipeline_tp: the collectives fused with the matmuls; the compiled "
                                "TP block is read without it)", FP8_ALL_GATHER_405B, "the sequence length and micro-batch size (not printed: 8192 and 32 / 8 taken)"),
              FLOAT8_PP_WALKED),
    _t6(8, 1, 32768, 75.3),
    _t6(4, 2, 65536, 75.9),
    _t6(2, 4, 131072, 77.1),
    _t6(1, 8, 262144, 84.9),
    *(MemoryRun(f"trainy-h200-8b-{n}-nodes", f"{TT_TRAINY}, '| NUM_NODES | TPS/GPU | Memory(GiB) |' row '| {n} | ... | {gib} |'; command: "
                "torchrun --nnodes $NUM_NODES --nproc_per_node 8 ... torchtitan/train.py (no PYTORCH_CUDA_ALLOC_CONF, not run_train.sh) "
                "--job.config-file torchtitan/models/llama3/train_configs/llama3_8b.toml --training.local_batch_size=2 --training.compile --model.converters=\"float8\" --float8.enable_fsdp_float8_all_gather "
                "--float8.precompute_float8_dynamic_scale_for_fsdp --float8.force_recompute_fp8_weight_in_bwd (as first published, "
                "a0e5b6c8b); 8 H200 per node; llama3_8b.toml at e7c0cae: seq_len 8192, "
                "selective 'op' checkpointing",
                (*_8B, "--dp", str(8 * n), "--micro-batch", "2", "--seq-len", "8192", "--recompute", "op", "--precision", "fp8", "--compile",
                 "--fp8-all-gather", "--compile-loss", "--no-expandable-segments"),
                gib, "torch.cuda reserved_bytes.all.peak (torchtitan's 'memory'), 'arbitrarily sampled at the 100th iteration'",
                ()) for n, gib in ((4, 47.96), (8, 46.97))),
)
