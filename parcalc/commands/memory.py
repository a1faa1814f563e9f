"""`parcalc memory`: per-GPU memory of training under TP, SP, PP, DP and ZeRO, and whether it fits.

The flags; the work and the Result are parcalc.results.memory's."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from parcalc.commands.common import (
    CpCommOption,
    CpOption,
    EmbeddingInSplitOption,
    EpOption,
    EtpOption,
    FirstStageLayersOption,
    FormatOption,
    LastStageLayersOption,
    LossInSplitOption,
    MoeImbalanceOption,
    PictureOutputOption,
    PipelineLayoutOption,
    PresetsOption,
    RecomputeLayersOption,
    RecomputeModulesOption,
    ShardGroupOption,
    finish,
    start,
)
from parcalc.commands.model_options import (
    FfnOption,
    HeadsOption,
    HiddenOption,
    KvHeadsOption,
    LayersOption,
    MlpOption,
    ModelOption,
    TiedOption,
    VocabOption,
)
from parcalc.core.choices import Offload, Optimizer, Precision, Recompute, Schedule, ZeroStage
from parcalc.results.memory import (  # noqa: F401 - re-exported: fit imports them from here
    MOMENT_BYTES,
    context_assumptions,
    dropout_assumption,
    memory_result,
    micro_batches_of,
    shard_group_assumptions,
    stage_components_table,
)

EXAMPLES = """\
\b
Examples:
  parcalc memory --model homework-7b --micro-batch 1 --seq-len 4096 --gpu a100-sxm4-80gb
  parcalc memory --model gpt3-175b --micro-batch 1 --tp 8 --pp 8 --dp 16 --zero 1 --sequence-parallel --recompute selective --no-flash-attention --gpu a100-sxm4-80gb
  parcalc memory --model llama3-70b --micro-batch 1 --seq-len 8192 --tp 8 --pp 4 --schedule interleaved --chunks 2 --micro-batches 16 --gpu h100-sxm5 --per-stage
  parcalc memory --model llama3-405b --seq-len 8192 --tp 8 --pp 16 --dp 128 --zero 1 --sequence-parallel --first-stage-layers 7 --last-stage-layers 7 --gpu h100-sxm5 --per-stage
  parcalc memory --model llama3-405b --seq-len 131072 --tp 8 --pp 16 --cp 16 --dp 4 --zero 1 --sequence-parallel --recompute full --embedding-in-split --loss-in-split --schedule interleaved --chunks 8 --micro-batches 16 --gpu h100-sxm5
  parcalc memory --model llama3-8b --seq-len 131072 --tp 8 --cp 8 --cp-comm all-gather --recompute full --gpu h100-sxm5
  parcalc memory --model llama3-8b --seq-len 8192 --dp 64 --zero 3 --recompute op --gpu a100-sxm4-80gb
  parcalc memory --model gpt3-175b --tp 8 --pp 16 --dp 8 --sequence-parallel --recompute full --recompute-layers 2 --gpu a100-sxm4-80gb
  parcalc memory --layers 48 --hidden 6144 --heads 64 --vocab 51200 --seq-len 2048 --micro-batch 4 --tp 8 --sequence-parallel
  parcalc memory --model llama3-8b --seq-len 8192 --precision fp8 --gpu h100-sxm5
  parcalc memory --model llama3-8b --seq-len 4096 --dp 8 --zero 2 --optimizer adam-8bit --gpu a100-sxm4-80gb
  parcalc memory --model llama3-70b --seq-len 4096 --dp 8 --zero 2 --offload optimizer --offload activations --gpu h100-sxm5
  parcalc memory --model llama3-70b --seq-len 4096 --dp 64 --zero 3 --shard-group 16 --recompute full --gpu h100-sxm5
  parcalc memory --model llama3-8b --seq-len 8192 --dp 8 --zero 3 --compile --gpu h100-sxm5
  parcalc memory --model llama3-70b --seq-len 8192 --tp 8 --pp 4 --dp 4 --zero 1 --gpu h100-sxm5 -o mem.svg
  parcalc memory --model qwen3-30b-a3b --seq-len 4096 --dp 16 --ep 16 --etp 1 --zero 1 --moe-imbalance 1.2 --gpu h100-sxm5
  parcalc memory --model deepseek-v3 --seq-len 4096 --tp 2 --pp 16 --dp 64 --ep 64 --etp 1 --sequence-parallel --zero 1 --recompute-mla-up-proj --moment-dtype bf16 --last-stage-layers 1 --gpu h100-sxm5
  parcalc memory --model deepseek-v3 --seq-len 4096 --tp 2 --pp 8 --dp 64 --ep 64 --etp 1 --sequence-parallel --zero 1 --precision fp8 --recompute selective --recompute-modules mla_up_proj,mlp --first-stage-layers 9 --last-stage-layers 4 --micro-batches 128 --gpu h100-sxm5
  parcalc memory --model llama2-7b --seq-len 4096 --framework hf --recompute full --gpu h200
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime
# The default and its sources, as parcalc.core.memory.RESERVE_PARTS has them (the core is not
# imported here, to keep start-up fast; tests/test_cli_memory.py checks that the two agree).
# --ep / --etp: their example (`--model mixtral-8x7b --tp 2 --dp 16 --ep 8 --etp 1 --zero 1`) joins
# EXAMPLES when the mixtral-8x7b preset lands (branch moe-count); test_cli_flops runs every example.
RESERVE_HELP = (
    "Memory the formulas do not see. Default 2GiB: CUDA context 0.5GiB (287-667 MB measured in PyTorch PR #86509), "
    "NCCL buffers 1GiB (4 MiB + LL + LL128 per channel and peer, NVIDIA/nccl src/init.cc), allocator fragmentation "
    "0.5GiB (an allowance, left out where the allocator is replayed over a step walk: --framework hf, fsdp2, torchtitan)."
)


def memory(
    model: ModelOption = None,
    layers: LayersOption = None,
    hidden: HiddenOption = None,
    heads: HeadsOption = None,
    kv_heads: KvHeadsOption = None,
    ffn_hidden: FfnOption = None,
    mlp: MlpOption = None,
    vocab: VocabOption = None,
    tied: TiedOption = None,
    micro_batch: Annotated[_Text, typer.Option(metavar="b", help="Sequences per micro-batch (default 1).")] = None,
    batch: Annotated[_Text, typer.Option(metavar="B", help="Global batch, sequences per iteration: gives the micro-batches m = B / (b x d) of each pipeline (instead of --micro-batches).", show_default=False)] = None,
    seq_len: Annotated[_Text, typer.Option(metavar="s", help="Sequence length (default: the model's maximum).")] = None,
    tp: Annotated[_Text, typer.Option(metavar="t", help="Tensor-parallel degree.")] = None,
    pp: Annotated[_Text, typer.Option(metavar="p", help="Pipeline-parallel degree (stages).")] = None,
    dp: Annotated[_Text, typer.Option(metavar="d", help="Data-parallel degree (ZeRO shards over it; default: --gpus / (t x p), else 1).")] = None,
    gpus: Annotated[_Text, typer.Option(metavar="N", help="GPUs in all: t x p x c x d (gives d when --dp is left out).")] = None,
    cp: CpOption = None,
    cp_comm: CpCommOption = None,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism (needs --tp > 1; --framework torchtitan: always on with --tp > 1).")] = False,
    ep: EpOption = None,
    etp: EtpOption = None,
    zero: Annotated[Optional[ZeroStage], typer.Option(metavar="0-3", help="ZeRO stage over the data-parallel ranks: 0 (DDP), 1 optimizer states, 2 + gradients, 3 + weights. Default: the --framework's own (torchtitan, fsdp2: 3), else 0.", show_default=False)] = None,  # noqa: UP045
    shard_group: ShardGroupOption = None,
    recompute: Annotated[Recompute, typer.Option(metavar="KIND", help="Activation recomputation: none, selective (attention core), full (layer input only), op (TorchTitan's op-level checkpointing: every other matmul output kept).")] = Recompute.NONE,
    precision: Annotated[Optional[Precision], typer.Option(metavar="KIND", help="fp32, mixed-fp16, mixed-bf16 (16-bit weights + fp32 master copy), bf16 (no master copy), fp8 (Transformer Engine: FP8 GEMM inputs and weight copies, bf16 weights, fp32 master; needs a GPU with an FP8 peak), fp4 (NVFP4: FP4 linear inputs with E4M3 scales per 16 and weight copies; Blackwell); default mixed-bf16, mixed-fp16 on a GPU without bf16 (V100).", show_default=False)] = None,  # noqa: UP045
    optimizer: Annotated[Optimizer, typer.Option(metavar="NAME", help="adam, adamw (2 states), lion, sgd-momentum (1), sgd (0), adam-8bit (2 x 8-bit + block scales), adafactor (factored: r + c per matrix), muon (1 for hidden matrices, AdamW for the rest).")] = Optimizer.ADAMW,
    offload: Annotated[Optional[list[Offload]], typer.Option(metavar="KIND", help="Move to host memory (repeatable): optimizer (ZeRO-Offload: fp32 master, states, fp32 gradients), activations (saved tensors, as Megatron-LM's CPU offloading). Shows host bytes and PCIe bytes per iteration.", show_default=False)] = None,  # noqa: UP045
    fp32_grads: Annotated[bool, typer.Option("--fp32-grads", help="Mixed precision with fp32 gradients (Megatron-LM's main_grad: 18 bytes per parameter with Adam).")] = False,
    schedule: Annotated[Schedule, typer.Option(metavar="NAME", help="Pipeline schedule: gpipe, 1f1b, interleaved.")] = Schedule.ONE_F_ONE_B,
    micro_batches: Annotated[_Text, typer.Option(metavar="m", help="Micro-batches per iteration (default: p; 2p interleaved).")] = None,
    chunks: Annotated[_Text, typer.Option(metavar="v", help="Model chunks per device (--schedule interleaved).")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    pipeline_layout: PipelineLayoutOption = None,
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention", help="FlashAttention/SDPA, what frameworks run (default): no s x s attention scores stored. --no-flash-attention: the scores materialised (Korthikanti et al. 2022's 5as^2b).")] = True,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile (Inductor) on each block: --framework torchtitan walks the compiled code; otherwise what its partitioner saves for backward (the same tensors; see Assumptions).")] = False,
    dropout: Annotated[Optional[bool], typer.Option("--dropout/--no-dropout", help="Dropout layers (their 1-byte masks) in attention, MLP and embeddings (default: the model's; Llama presets train without).", show_default=False)] = None,  # noqa: UP045
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="GPU preset: its memory capacity decides fits / does not fit.")] = None,
    capacity: Annotated[_Text, typer.Option(metavar="BYTES", help="GPU memory capacity instead of --gpu's, e.g. 80GiB.")] = None,
    reserve: Annotated[_Text, typer.Option(metavar="BYTES", help=RESERVE_HELP)] = None,
    per_stage: Annotated[bool, typer.Option("--per-stage", help="A table of every pipeline stage, not only the fullest.")] = False,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: PictureOutputOption = None,
    recompute_layers: RecomputeLayersOption = None,
    moment_dtype: Annotated[_Text, typer.Option(metavar="DTYPE", help="Adam's moments (every optimizer state) in fp32, bf16 or fp16 beside the fp32 master copy: Megatron-LM's --use-precision-aware-optimizer --exp-avg-dtype / --exp-avg-sq-dtype (default: fp32, the training precision's).", show_default=False)] = None,
    recompute_mla_up_proj: Annotated[bool, typer.Option("--recompute-mla-up-proj", help="Multi-head latent attention: recompute the up-projections and RoPE in backward, keeping only the latents (Megatron-LM's --recompute-modules mla_up_proj; the same module list as --recompute-modules, added to it).")] = False,
    recompute_modules: RecomputeModulesOption = None,
    moe_imbalance: MoeImbalanceOption = None,
    framework: Annotated[_Text, typer.Option(metavar="NAME", help="Framework profile (megatron, deepspeed, fsdp2, torchtitan, hf): its gradient dtype, as fit has it; hf counts the peak of a step of transformers' eager code (logits upcast to fp32, autocast weight copies, allocator rounding). Default: the textbook sum without a profile.", show_default=False)] = None,
    fp8_all_gather: Annotated[bool, typer.Option("--fp8-all-gather", help="With --precision fp8 --framework torchtitan: torchao's enable_fsdp_float8_all_gather (torchtitan's --float8.enable_fsdp_float8_all_gather): FSDP gathers the Float8 linears' weights in FP8, and they are not cast again.")] = False,
    compile_loss: Annotated[bool, typer.Option("--compile-loss", help="With --compile --framework torchtitan: the loss compiled too, as torchtitan does from 2025-04-02 (components/loss.py build_cross_entropy_loss; the Dec 2024 code, the profile's, keeps it eager): no fp32 copy of the logits, the compiled graph keeps the bf16 logits for its backward.")] = False,
    expandable_segments: Annotated[Optional[bool], typer.Option("--expandable-segments/--no-expandable-segments", help="With --framework fsdp2 or torchtitan: the caching allocator replayed over the step walk (step_reserved_replayed) with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or without (the allocator's default). Default: as the framework's launcher sets it (torchtitan's run_train.sh: on; fsdp2: off); --no-expandable-segments for a run started with torchrun directly.", show_default=False)] = None,  # noqa: UP045
) -> None:
    """Per-GPU memory of training: weights, gradients and optimizer states (ZeRO), activations
    (Korthikanti et al.) of the fullest pipeline stage, embeddings, logits, reserve, and whether
    it fits on the GPU."""
    start(output, fmt, picture=True)
    from parcalc.output import draws_figures
    from parcalc.results.memory import from_flags

    result = from_flags(model=model, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                        ffn_hidden=ffn_hidden, mlp=mlp, vocab=vocab, tied=tied, micro_batch=micro_batch, batch=batch,
                        seq_len=seq_len, tp=tp, pp=pp, dp=dp, gpus=gpus, cp=cp, cp_comm=cp_comm,
                        sequence_parallel=sequence_parallel, ep=ep, etp=etp, zero=zero, shard_group=shard_group,
                        recompute=recompute, precision=precision, optimizer=optimizer, offload=offload,
                        fp32_grads=fp32_grads, schedule=schedule, micro_batches=micro_batches, chunks=chunks,
                        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                        embedding_in_split=embedding_in_split, loss_in_split=loss_in_split, pipeline_layout=pipeline_layout,
                        flash_attention=flash_attention, compile_=compile_, dropout=dropout, gpu=gpu,
                        capacity=capacity, reserve=reserve, per_stage=per_stage, presets=presets,
                        recompute_layers=recompute_layers, moment_dtype=moment_dtype,
                        recompute_mla_up_proj=recompute_mla_up_proj, recompute_modules=recompute_modules,
                        moe_imbalance=moe_imbalance, framework=framework, fp8_all_gather=fp8_all_gather, compile_loss=compile_loss,
                        expandable_segments=expandable_segments, pictures=draws_figures(fmt, output))
    finish(result, fmt, output)
