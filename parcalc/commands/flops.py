"""`parcalc flops`: training FLOPs per iteration and per token, 6ND, Narayanan's formula, MFU / HFU
(parcalc.results.flops)."""

# No `from __future__ import annotations` here: typer reads the command's annotations with
# inspect.signature(eval_str=True), which compiles and evaluates each one given as a string (~1.3 ms
# of a flops run, every start); written as objects they are evaluated once, where the function is defined.
from typing import Annotated, Optional

import typer

from parcalc.commands.common import (
    EmbeddingInSplitOption,
    FirstStageLayersOption,
    FormatOption,
    GpuPowerOption,
    IterationsOption,
    LastStageLayersOption,
    LossInSplitOption,
    OutputOption,
    PipelineLayoutOption,
    PresetsOption,
    PueOption,
    RecomputeLayersOption,
    RecomputeModulesOption,
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
from parcalc.core.choices import Recompute
from parcalc.results.flops import _peak  # noqa: F401 - re-exported: fit imports it from here

EXAMPLES = """\
\b
Examples:
  parcalc flops --model gpt3-175b --batch 1536 --seq-len 2048
  parcalc flops --model gpt3-175b --params 175e9 --tokens 300e9
  parcalc flops --layers 48 --hidden 6144 --heads 64 --vocab 51200 --batch 4 --seq-len 2048 --recompute selective --step-time 1.10s --gpus 8 --gpu a100-sxm4-80gb
  parcalc flops --model llama3-405b --batch 2048 --seq-len 8192 --causal --pp 16 --first-stage-layers 7 --last-stage-layers 7
  parcalc flops --model llama3-8b --batch 512 --seq-len 8192 --causal --step-time 6.5s --gpus 64 --gpu h100-sxm5 --dtype bf16
  parcalc flops --model deepseek-v3 --batch 15360 --seq-len 4096 --causal
  parcalc flops --model deepseek-v3 --batch 15360 --seq-len 4096 --causal --pp 8 --pipeline-layout "Et|(tt|)*30mL"
  parcalc flops --model llama3-8b --batch 1 --seq-len 131072 --causal --cp 16
  parcalc flops --model llama3-8b --batch 64 --seq-len 8192 --causal --recompute op
  parcalc flops --model gpt3-175b --batch 1536 --seq-len 2048 --recompute full --pp 16 --recompute-layers 2
  parcalc flops --model deepseek-v3 --batch 8192 --seq-len 4096 --causal --recompute selective --recompute-modules mla_up_proj,mlp
  parcalc flops --model gpt3-175b --tokens 300B --tflops-per-gpu 140 --gpus 1024 --recompute full --gpu a100-sxm4-80gb
  parcalc flops --model llama3-70b --tokens 15T --batch 2048 --seq-len 8192 --mfu 40% --gpus 8192 --gpu h100-sxm5 --price 2.50/GPU-h
  parcalc flops --model llama3-8b --batch 512 --seq-len 8192 --tokens 1T --step-time 6.5s --gpus 64 --gpu h100-sxm5 --pue 1.2
  parcalc flops --model llama3-8b --batch 512 --seq-len 8192 --iterations 10k --step-time 6.5s --gpus 64 --gpu-power 1275W
"""

_Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime


def flops(
    model: ModelOption = None,
    layers: LayersOption = None,
    hidden: HiddenOption = None,
    heads: HeadsOption = None,
    kv_heads: KvHeadsOption = None,
    ffn_hidden: FfnOption = None,
    mlp: MlpOption = None,
    vocab: VocabOption = None,
    tied: TiedOption = None,
    batch: Annotated[_Text, typer.Option(metavar="B", help="Sequences per iteration, all GPUs together (default 1).")] = None,
    seq_len: Annotated[_Text, typer.Option(metavar="s", help="Sequence length (default: the model's maximum).")] = None,
    recompute: Annotated[Recompute, typer.Option(metavar="KIND", help="Recomputation counted in hardware FLOPs: none, selective, full, op (TorchTitan's op-level checkpointing: every second matmul).")] = Recompute.NONE,
    causal: Annotated[bool, typer.Option("--causal", help="Count Q·K^T and score·V at half (kernels that skip the masked triangle).")] = False,
    tokens: Annotated[_Text, typer.Option(metavar="D", help="Training tokens of a whole run (15T, 300B, 2.5e12): total FLOPs, exact per token and 6ND; with --step-time, --tflops-per-gpu or --mfu, the run's days, GPU-hours, energy and cost.")] = None,
    iterations: IterationsOption = None,
    tflops_per_gpu: Annotated[_Text, typer.Option(metavar="X", help="Achieved hardware TFLOP/s per GPU (recomputation counted, as --recompute says) for the run's time T = C / (N X), e.g. 140 (Narayanan et al.'s GPT-3 run); with --gpus.")] = None,
    mfu: Annotated[_Text, typer.Option(metavar="x", help="Model FLOPs utilization, e.g. 0.4 or 40%, for the run's time T = C_model / (N x MFU x peak); with --gpus and --gpu or --peak.")] = None,
    gpu_power: GpuPowerOption = None,
    pue: PueOption = None,
    price: Annotated[_Text, typer.Option("--price", metavar="PRICE", help="Price per GPU-hour for the run's cost, e.g. 2.50, 2.50/GPU-h, EUR1.20 (yours: parcalc has no price presets).")] = None,
    params: Annotated[_Text, typer.Option(metavar="N", help="Parameters N for 6ND (default: the model's count).")] = None,
    step_time: Annotated[_Text, typer.Option(metavar="TIME", help="Measured time of one iteration, for MFU and HFU (with --gpus) and, with --tokens, the run's time.")] = None,
    gpus: Annotated[_Text, typer.Option(metavar="n", help="GPUs running the iteration (for MFU and HFU, and a run's time).")] = None,
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="GPU preset whose datasheet peak MFU uses, and whose board power a run's energy uses.")] = None,
    dtype: Annotated[_Text, typer.Option("--dtype", metavar="DTYPE", help="Which of the GPU's peaks: bf16 (default; fp16 on a GPU without bf16, e.g. V100), fp16, tf32, fp8...")] = None,
    peak: Annotated[_Text, typer.Option(metavar="FLOP/s", help="Peak FLOP/s per GPU instead of --gpu's, e.g. 312TFLOP/s.")] = None,
    pp: Annotated[_Text, typer.Option(metavar="p", help="Pipeline stages: the FLOPs of each stage and the busiest one (totals do not change).")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    pipeline_layout: PipelineLayoutOption = None,
    cp: Annotated[_Text, typer.Option(metavar="c", help="Context-parallel ranks sharing each sequence: FLOPs of the busiest rank, with Megatron's 2cp-chunk causal balancing and without.")] = None,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    recompute_layers: RecomputeLayersOption = None,
    recompute_modules: RecomputeModulesOption = None,
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention", help="With --recompute op: fused attention (SDPA, the default), whose output op-level checkpointing saves; --no-flash-attention: Q·K^T and score·V are recomputed.")] = True,
) -> None:
    """Training FLOPs per iteration and per token: the exact count of the layer's matmuls (model and
    hardware FLOPs), 6ND, Narayanan et al.'s 96 B s l h^2 (...) formula, and MFU / HFU from a
    measured step time."""
    start(output, fmt)
    from parcalc.results.flops import from_flags

    result = from_flags(model=model, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                        ffn_hidden=ffn_hidden, mlp=mlp, vocab=vocab, tied=tied, batch=batch, seq_len=seq_len,
                        recompute=recompute, causal=causal, tokens=tokens, iterations=iterations,
                        tflops_per_gpu=tflops_per_gpu, mfu=mfu, gpu_power=gpu_power, pue=pue, price=price,
                        params=params, step_time=step_time, gpus=gpus, gpu=gpu, dtype=dtype, peak=peak, pp=pp,
                        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                        embedding_in_split=embedding_in_split, loss_in_split=loss_in_split, cp=cp, presets=presets,
                        recompute_layers=recompute_layers, recompute_modules=recompute_modules,
                        flash_attention=flash_attention, pipeline_layout=pipeline_layout)
    finish(result, fmt, output)
