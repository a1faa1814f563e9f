"""`parcalc fit`: which strategies fit on N GPUs and how deep a model they hold, or (--search)
the fastest TP x PP x DP configuration of every valid one. The flags and the output; the work and
the Result are parcalc.results.fit's."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from parcalc.commands.common import (
    CpCommOption,
    CpOption,
    EmbeddingInSplitOption,
    EpOption,
    EpOverlapOption,
    EtpOption,
    ExpertActivationOption,
    FirstStageLayersOption,
    FormatOption,
    Fp8RecipeOption,
    GpuPowerOption,
    IterationsOption,
    KernelsOption,
    LastStageLayersOption,
    LossInSplitOption,
    MaxNodesOption,
    MoeDispatcherOption,
    MoeImbalanceOption,
    MoeRoutingOption,
    PipelineLayoutOption,
    PowerLimitOption,
    PresetsOption,
    PueOption,
    RecomputeLayersOption,
    RecomputeModulesOption,
    ShardGroupOption,
    TokensOption,
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
    Text,
    TiedOption,
    VocabOption,
)
from parcalc.core.choices import Offload, Optimizer, Precision, Recompute, ZeroStage
from parcalc.output import OutputFormat
from parcalc.results.cluster import cluster_from_flags as _cluster  # noqa: F401 - its old name here (tests import it)
from parcalc.results.fit import DEFAULT_TOP  # --top's help

TimelineOutputOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--output", "-o", metavar="FILE",
                 help="Write to FILE instead of stdout, all or nothing: .trace.json the modelled step as a Chrome trace (one track "
                      "per stream; opens in ui.perfetto.dev, reads back with calibrate trace); .svg draws the picture; .txt .json "
                      ".csv .md .tex .pdf the result (.pdf and .tex with the picture, .md with it as NAME-KIND.svg beside).",
                 show_default=False),
]  # fmt: skip

EXAMPLES = """\
\b
Examples:
  parcalc fit --model homework-7b --gpu a100-sxm4-80gb --gpus 2 --seq-len 2048
  parcalc fit --model homework-7b --gpu a100-sxm4-80gb --gpus 2 --seq-len 2048 --layers 8 --batch 8 \\
      --ideal-network
  parcalc fit --model gpt3-175b --gpu a100-sxm4-80gb --gpus 1024 --batch 1536 --seq-len 2048 --search
  parcalc fit --model gpt3-175b --gpu a100-sxm4-80gb --gpus 1024 --batch 1536 --search --recompute selective --explain
  parcalc fit --model llama3-70b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 4096 --search --format csv -o configs.csv
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 8 --tp 2 --pp 2 --dp 2 -o step.trace.json    # open it in ui.perfetto.dev
  parcalc fit --model gpt3-175b --gpu a100-sxm4-80gb --gpus 64 --batch 64 --tp 8 --pp 8 --dp 1 --micro-batch 1 \\
      --recompute selective --sequence-parallel --schedule interleaved --chunks 3
  parcalc fit --model mixtral-8x7b --gpu h100-sxm5 --gpus 256 --batch 1024 --seq-len 4096 --tp 2 --pp 4 --dp 32 --ep 8 --etp 1 --sequence-parallel --zero 1
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 8192 --framework fsdp2 --search
  parcalc fit --model llama2-7b --gpu h200 --gpus 1 --batch 8 --seq-len 4096 --framework hf --recompute full --tp 1 --pp 1 --dp 1
  parcalc fit --model llama3-70b --gpu h100-sxm5 --gpus 512 --batch 512 --seq-len 4096 --framework fsdp2 \\
      --tp 1 --pp 1 --dp 512 --zero 3 --shard-group 64 --recompute full
  parcalc fit --model mixtral-8x7b --gpu h100-sxm5 --gpus 256 --batch 1024 --seq-len 4096 --search
  parcalc fit --model mixtral-8x7b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 4096 --search --ep 8 --zero 0
  parcalc fit --model deepseek-v3 --gpu h800-sxm5 --gpus 2048 --batch 4096 --seq-len 4096 --search --pp 8   # layout strings
  parcalc fit --model qwen3-30b-a3b --gpu h100-sxm5 --gpus 16 --batch 1024 --seq-len 4096 --tp 1 --pp 1 \\
      --dp 16 --ep 16 --zero 1 --moe-dispatcher hybridep --ep-overlap 1f1b
  parcalc fit --model qwen3-30b-a3b --gpu mi355x --gpus 8 --batch 512 --seq-len 4096 --micro-batch 4 --tp 1 --pp 1 \\
      --dp 8 --ep 8 --zero 1 --precision fp8 --fp8-recipe current --moe-dispatcher deepep --moe-routing round-robin \\
      --expert-activation eager
  parcalc fit --model llama3-70b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 8192 --tp 8 --pp 1 --dp 8 \\
      --sequence-parallel --zero 1 --precision fp8 --fp8-recipe current
  parcalc fit --model llama3-70b --gpu gb200 --gpus 64 --batch 256 --seq-len 8192 --tp 2 --pp 4 --dp 8 --micro-batch 1 \\
      --sequence-parallel --zero 1 --recompute none --schedule interleaved --chunks 5 --precision fp4
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 8 --seq-len 131072 --search --cp-comm all-gather
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 64 --seq-len 8192 --search --cp 2
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 8 --seq-len 131072 --tp 8 --cp 8 --pp 1 --sequence-parallel --recompute full
  parcalc fit --model llama3-405b --gpu h100-sxm5 --gpus 16384 --batch 2048 --seq-len 8192 \\
      --tp 8 --pp 16 --dp 128 --first-stage-layers 7 --last-stage-layers 7 --zero 1 --sequence-parallel --recompute none
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 8 --batch 64 --seq-len 4096 --precision fp8 --search
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 8 --batch 64 --seq-len 4096 --tp 1 --pp 1 --dp 8 --zero 2 \\
      --optimizer lion --offload optimizer --host-link pcie5-x16
  parcalc fit --model llama3-8b --gpu a100-sxm4-80gb --gpus 64 --batch 64 --seq-len 8192 --framework torchtitan \\
      --tp 1 --pp 1 --dp 64 --zero 3 --recompute op
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 8 --batch 16 --seq-len 8192 --framework torchtitan \\
      --tp 1 --pp 1 --dp 8 --zero 3 --micro-batch 2 --recompute op --compile
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 8 --batch 16 --seq-len 8192 --framework torchtitan \\
      --tp 1 --pp 1 --dp 8 --zero 3 --micro-batch 2 --recompute op --kernels fused
  parcalc fit --model gpt3-175b --gpu a100-sxm4-80gb --gpus 1024 --batch 1536 --tp 8 --pp 16 --dp 8 --sequence-parallel \\
      --recompute full --recompute-layers 2
  parcalc fit --model deepseek-v3 --gpu h100-sxm5 --gpus 1024 --batch 8192 --seq-len 4096 --precision fp8 \\
      --fp8-recipe blockwise --tp 2 --pp 8 --dp 64 --ep 64 --etp 1 --sequence-parallel --zero 1 --first-stage-layers 9 \\
      --last-stage-layers 4 --moe-dispatcher deepep --max-nodes-per-token 4 --ep-overlap 1f1b --recompute selective \\
      --recompute-modules mla_up_proj,mlp
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 8192 --search --power-limit 500W
  parcalc fit --model llama3-8b --gpu h100-sxm5-96gb-hbm2e --gpus 8 --batch 16 --seq-len 8192 \\
      --framework torchtitan --tp 1 --pp 1 --dp 8 --zero 3 --micro-batch 2 --recompute selective
  parcalc fit --model llama3-8b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 8192 --search --tokens 15T \\
      --price 2.50/GPU-h --pue 1.2
  parcalc fit --model llama3-8b --gpus 64 --batch 512 --seq-len 8192 --search --tokens 1T \\
      --gpu h100-sxm5 --price 2.50 --gpu a100-sxm4-80gb --price 1.20 --rank-by cost
  parcalc fit --model gpt3-175b --gpu a100-sxm4-80gb --gpus 1024 --batch 1536 --tp 8 --pp 16 --dp 8 --recompute full \\
      --tokens 300B --gpu-power 400W
  parcalc fit --model llama3-8b --gpu a100-sxm4-80gb --gpus 8 --seq-len 4096 -o fit.svg
  parcalc fit --model llama3-70b --gpu h100-sxm5 --gpus 64 --batch 512 --seq-len 4096 --search -o search.svg
"""


def fit(
    model: ModelOption = None,
    layers: LayersOption = None,
    hidden: HiddenOption = None,
    heads: HeadsOption = None,
    kv_heads: KvHeadsOption = None,
    ffn_hidden: FfnOption = None,
    mlp: MlpOption = None,
    vocab: VocabOption = None,
    tied: TiedOption = None,
    gpus: Annotated[Text, typer.Option(metavar="N", help="GPUs in all (required).")] = None,
    gpu: Annotated[Optional[list[str]], typer.Option(metavar="NAME", help="GPU preset: memory capacity and peak FLOP/s. --search takes several (repeat --gpu) to compare GPU types, each with its --price.", show_default=False)] = None,  # noqa: UP045
    gpus_per_node: Annotated[Text, typer.Option(metavar="g", help="GPUs per node (default 8): TP stays inside a node; wider groups use --inter-node-link.")] = None,
    batch: Annotated[Text, typer.Option(metavar="B", help="Global batch in sequences per iteration (default: one per GPU).")] = None,
    seq_len: Annotated[Text, typer.Option(metavar="s", help="Sequence length (default: the model's maximum).")] = None,
    micro_batch: Annotated[Optional[list[str]], typer.Option(metavar="b", help="Micro-batch size (table: default 1; --search: try only these, repeatable).", show_default=False)] = None,  # noqa: UP045
    recompute: Annotated[Optional[list[Recompute]], typer.Option(metavar="KIND", help="Recomputation to try: none, selective, full, op (PyTorch/TorchTitan op-level selective checkpointing) (repeatable; default: none, selective, full in the table, all four with --search).", show_default=False)] = None,  # noqa: UP045
    zero: Annotated[Optional[list[ZeroStage]], typer.Option(metavar="0-3", help="--search: ZeRO stages to try (repeatable; default 0-3).", show_default=False)] = None,  # noqa: UP045
    shard_group: ShardGroupOption = None,
    ep: EpOption = None,
    etp: EtpOption = None,
    moe_dispatcher: MoeDispatcherOption = None,
    max_nodes_per_token: MaxNodesOption = None,
    ep_overlap: EpOverlapOption = None,
    moe_imbalance: MoeImbalanceOption = None,
    moe_routing: MoeRoutingOption = None,
    expert_activation: ExpertActivationOption = None,
    sequence_parallel: Annotated[Optional[bool], typer.Option("--sequence-parallel/--no-sequence-parallel", help="--search: only with, or only without, sequence parallelism (default: both; --framework torchtitan: with, whenever --tp > 1).", show_default=False)] = None,  # noqa: UP045
    interleaved: Annotated[bool, typer.Option("--interleaved/--no-interleaved", help="--search: try the interleaved schedule with v chunks beside 1F1B.")] = True,
    allow_cross_node_tp: Annotated[bool, typer.Option("--allow-cross-node-tp", help="--search: let tensor parallelism span nodes.")] = False,
    precision: Annotated[Optional[Precision], typer.Option(metavar="KIND", help="fp32, mixed-fp16, mixed-bf16, bf16, fp8 (Transformer Engine: GEMMs at the FP8 peak, FP8 linear inputs and weight copies), fp4 (Transformer Engine's NVFP4 recipe, Megatron-LM --fp4-format e2m1: GEMMs at the FP4 peak, Blackwell only) (bytes per parameter and activation; default mixed-bf16, mixed-fp16 on a GPU without bf16 such as the V100).", show_default=False)] = None,  # noqa: UP045
    fp8_recipe: Fp8RecipeOption = None,
    optimizer: Annotated[Optimizer, typer.Option(metavar="NAME", help="adam, adamw, lion, sgd-momentum, sgd, adam-8bit, adafactor, muon (state bytes and the step's memory traffic).")] = Optimizer.ADAMW,
    offload: Annotated[Optional[list[Offload]], typer.Option(metavar="KIND", help="Move to host memory (repeatable): optimizer (ZeRO-Offload; CPU step and PCIe copies in t_offload), activations (copied out and back, overlapped with compute). Not searched: applies to every configuration.", show_default=False)] = None,  # noqa: UP045
    host_link: Annotated[Text, typer.Option(metavar="NAME", help="The GPU's link to the host for --offload (default: pcie5-x16 on Hopper/Blackwell, else pcie4-x16).")] = None,
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention", help="FlashAttention/SDPA, what frameworks run (default): no s x s attention scores stored. --no-flash-attention: the scores materialised (Korthikanti et al. 2022's 5as^2b) and attention timed as explicit GEMMs and softmax.")] = True,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile (Inductor): the memory-bound kernels between GEMMs fused into fewer kernels (which: see Assumptions); --framework torchtitan walks the compiled block's memory.")] = False,
    compile_loss: Annotated[bool, typer.Option("--compile-loss", help="With --compile --framework torchtitan: the loss compiled too (memory only: its time is the eager loss's), as torchtitan does from 2025-04-02 (components/loss.py build_cross_entropy_loss; the Dec 2024 code, the profile's, keeps it eager): no fp32 copy of the logits, the compiled graph keeps the bf16 logits for its backward.")] = False,
    fp8_all_gather: Annotated[bool, typer.Option("--fp8-all-gather", help="With --precision fp8 --framework torchtitan: torchao's enable_fsdp_float8_all_gather (torchtitan's --float8.enable_fsdp_float8_all_gather, with precompute_float8_dynamic_scale_for_fsdp): FSDP gathers the Float8 linears' weights in FP8 (1 byte an element on the wire, the norms, embedding and output in bf16), and they are not cast again; one all-reduce of their amaxes after the optimizer step.")] = False,
    kernels: KernelsOption = None,
    dropout: Annotated[Optional[bool], typer.Option("--dropout/--no-dropout", help="Dropout masks in the activations (default: the model's; Llama presets train without).", show_default=False)] = None,  # noqa: UP045
    capacity: Annotated[Text, typer.Option(metavar="BYTES", help="GPU memory instead of --gpu's, e.g. 80GiB.")] = None,
    reserve: Annotated[Text, typer.Option(metavar="BYTES", help="CUDA context, NCCL buffers, fragmentation (default 2GiB; see `parcalc memory`).")] = None,
    dtype: Annotated[Text, typer.Option("--dtype", metavar="DTYPE", help="Which of the GPU's peaks the GEMMs run at (default: follows --precision: fp32 for fp32, fp16 for mixed-fp16, else bf16).")] = None,
    peak: Annotated[Text, typer.Option(metavar="FLOP/s", help="Peak per GPU instead of --gpu's, e.g. 312TFLOP/s.")] = None,
    efficiency: Annotated[Text, typer.Option(metavar="x", help="A factor on every kernel's rate (default 1: the GPU preset's measured kernel shares; 0.9 = 10 % slower kernels).")] = None,
    link: Annotated[Text, typer.Option(metavar="NAME", help="Link inside a node (default: the GPU preset's node, else nvlink3).")] = None,
    inter_node_link: Annotated[Text, typer.Option(metavar="NAME", help="One network card's link (default: the GPU preset's node, else ib-hdr).")] = None,
    nics_per_node: Annotated[Text, typer.Option(metavar="n", help="Network cards per node for GPU traffic (default: the GPU preset's node, else one per GPU).")] = None,
    framework: Annotated[Text, typer.Option(metavar="NAME", help="megatron, deepspeed, fsdp2, torchtitan, hf: buckets, gradient dtype, overlaps, ZeRO stages (default megatron; `parcalc presets list frameworks`).")] = None,
    dp_overlap: Annotated[Optional[bool], typer.Option("--dp-overlap/--no-dp-overlap", help="Overlap the data-parallel gradient reduce and parameter gather with compute (default: the framework's).", show_default=False)] = None,  # noqa: UP045
    tp_comm_overlap: Annotated[Optional[bool], typer.Option("--tp-comm-overlap/--no-tp-comm-overlap", help="Overlap TP collectives with the GEMMs (default: the framework's).", show_default=False)] = None,  # noqa: UP045
    ideal_network: Annotated[bool, typer.Option("--ideal-network", help="An ideal network: zero latency and infinite bandwidth, so every collective and pipeline send takes 0 s (what is left is compute, bubble and optimizer).")] = False,
    fp32_grads: Annotated[Optional[bool], typer.Option("--fp32-grads/--no-fp32-grads", help="fp32 gradients beside 16-bit weights (default: the framework's; Megatron-LM keeps fp32 main gradients).", show_default=False)] = None,  # noqa: UP045
    tp: Annotated[Text, typer.Option(metavar="T", help="Tensor-parallel size: with --pp and --dp (or alone, the rest filled in) evaluates that one configuration; with --search, pins it.")] = None,
    pp: Annotated[Text, typer.Option(metavar="P", help="Pipeline stages (see --tp).")] = None,
    dp: Annotated[Text, typer.Option(metavar="D", help="Data-parallel size (see --tp).")] = None,
    cp: CpOption = None,
    cp_comm: CpCommOption = None,
    schedule: Annotated[Optional[str], typer.Option(metavar="KIND", help="1f1b, interleaved (with --chunks), zb-h1, zb-h2, zb-v, dualpipev or dualpipe for the configuration given by --tp/--pp/--dp; with --search, zb-h1, zb-h2, zb-v or dualpipev for every pipelined layout.")] = None,  # noqa: UP045
    chunks: Annotated[Text, typer.Option(metavar="v", help="Model chunks per GPU of the interleaved schedule.")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    pipeline_layout: PipelineLayoutOption = None,
    search: Annotated[bool, typer.Option("--search", help="Evaluate every configuration and rank those that fit by step time.")] = False,
    top: Annotated[Optional[int], typer.Option(metavar="K", help=f"--search: layouts shown (tp x pp x dp x cp x ep), each at its fastest configuration (default {DEFAULT_TOP}).", show_default=False)] = None,  # noqa: UP045
    explain: Annotated[bool, typer.Option("--explain", help="--search: the derivation of the best configuration's memory and step time.")] = False,
    max_layers: Annotated[bool, typer.Option("--max-layers/--no-max-layers", help="Table: the deepest model of this layer shape each strategy holds.")] = True,
    tokens: TokensOption = None,
    iterations: IterationsOption = None,
    gpu_power: GpuPowerOption = None,
    pue: PueOption = None,
    price: Annotated[Optional[list[str]], typer.Option("--price", metavar="PRICE", help="Price per GPU-hour for the run's cost, e.g. 2.50, 2.50/GPU-h, EUR1.20 (yours: no price presets); one per --gpu.", show_default=False)] = None,  # noqa: UP045
    rank_by: Annotated[Optional[str], typer.Option("--rank-by", metavar="KEY", help="--search: rank by time (step time; the default) or cost (per token: price x GPUs x step time; the default with several --gpu and their --price).", show_default=False)] = None,  # noqa: UP045
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: TimelineOutputOption = None,
    recompute_layers: RecomputeLayersOption = None,
    recompute_modules: RecomputeModulesOption = None,
    power_limit: PowerLimitOption = None,
) -> None:
    """What fits on N GPUs: one row per strategy (single GPU, DP, ZeRO-1/2/3, TP, PP, TP x PP, each
    without and with recomputation; with --framework, those its stack runs) with its memory and the
    most layers it holds; with --search, every TP x PP x DP configuration ranked by estimated step
    time (with EP for MoE models, and CP from 16,384 tokens or with --cp)."""
    start(output, fmt, picture=True)
    timeline = _is_timeline(fmt, output)
    from parcalc.errors import InfeasibleError, InfeasibleResult
    from parcalc.output import draws_figures
    from parcalc.results.fit import from_flags

    try:
        result = from_flags(model=model, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                            ffn_hidden=ffn_hidden, mlp=mlp, vocab=vocab, tied=tied, gpus=gpus, gpu=gpu,
                            gpus_per_node=gpus_per_node, batch=batch, seq_len=seq_len, micro_batch=micro_batch,
                            recompute=recompute, zero=zero, shard_group=shard_group, ep=ep, etp=etp,
                            moe_dispatcher=moe_dispatcher, max_nodes_per_token=max_nodes_per_token, ep_overlap=ep_overlap,
                            moe_imbalance=moe_imbalance, moe_routing=moe_routing, expert_activation=expert_activation, sequence_parallel=sequence_parallel, interleaved=interleaved,
                            allow_cross_node_tp=allow_cross_node_tp, precision=precision, fp8_recipe=fp8_recipe,
                            optimizer=optimizer, offload=offload, host_link=host_link, flash_attention=flash_attention,
                            compile_=compile_, compile_loss=compile_loss, fp8_all_gather=fp8_all_gather, kernels=kernels, dropout=dropout, capacity=capacity, reserve=reserve,
                            dtype=dtype, peak=peak, efficiency=efficiency, link=link, inter_node_link=inter_node_link,
                            nics_per_node=nics_per_node, framework=framework, dp_overlap=dp_overlap,
                            tp_comm_overlap=tp_comm_overlap, ideal_network=ideal_network, fp32_grads=fp32_grads, tp=tp,
                            pp=pp, dp=dp, cp=cp, cp_comm=cp_comm, schedule=schedule, chunks=chunks,
                            first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                            embedding_in_split=embedding_in_split, loss_in_split=loss_in_split, pipeline_layout=pipeline_layout, search=search, top=top,
                            explain=explain, max_layers=max_layers, tokens=tokens, iterations=iterations,
                            gpu_power=gpu_power, pue=pue, price=price, rank_by=rank_by, presets=presets,
                            recompute_layers=recompute_layers, recompute_modules=recompute_modules,
                            power_limit=power_limit, every_row=_streams_every_row(fmt, output) and not timeline,
                            pictures=draws_figures(fmt, output))
    except InfeasibleResult as error:
        if output is None:  # show what was tried (the table, the search's configurations), then fail; a file is written only on success
            from parcalc.results.fit_brief import briefed

            finish(briefed(error.result), fmt, output)
        raise InfeasibleError(str(error)) from None
    if timeline:
        _write_timeline(result, output)
        return
    finish(result, fmt, output)




TIMELINE_SUFFIX = ".trace.json"


def _is_timeline(fmt: OutputFormat | None, output: Any) -> bool:
    """-o FILE.trace.json: the modelled step as a Chrome trace (parcalc.render.chrome_trace), not the JSON report."""
    if output is None or not output.name.lower().endswith(TIMELINE_SUFFIX):
        return False
    if fmt is not None:
        from parcalc.errors import InputError, shown

        raise InputError(f"--format {fmt.value} and -o {shown(str(output))} disagree: a .trace.json file is the step's timeline "
                         "(Chrome trace events); drop --format, or name the file .json for the report")  # fmt: skip
    return True


def _write_timeline(result: Any, output: Any) -> None:
    import sys

    from parcalc.files import write_atomically
    from parcalc.render.chrome_trace import render_chrome_trace
    from parcalc.results.parse import check_finite

    check_finite(result)
    write_atomically(output, render_chrome_trace(result))
    print(f"wrote {output} (open it in ui.perfetto.dev)", file=sys.stderr)


def _streams_every_row(fmt: OutputFormat | None, output: Any) -> bool:
    """JSON and CSV carry every evaluated configuration (for plotting); the other formats the top-k."""
    from parcalc.output import is_picture, resolve_format

    return not is_picture(fmt, output) and resolve_format(fmt, output) in (OutputFormat.JSON, OutputFormat.CSV)
