"""`parcalc comm-volume`: one collective's algorithms, or every collective of a training iteration
(parcalc.results.comm_volume)."""

# No `from __future__ import annotations` here: typer reads the command's annotations with
# inspect.signature(eval_str=True), which compiles and evaluates each one given as a string (~1.3 ms
# of a flops run, every start); written as objects they are evaluated once, where the function is defined.
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
    OutputOption,
    PipelineLayoutOption,
    PresetsOption,
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
    Text,
    TiedOption,
)
from parcalc.core.choices import Algorithm, Collective, Recompute, Schedule, Strategy, ZeroStage
from parcalc.results.comm_volume import (  # the flags' help; fit imports them here
    DEFAULT_GPUS,
    DEFAULT_INTER_NODE_LINK,
    DEFAULT_LINK,
)

EXAMPLES = """\
\b
Examples:
  parcalc comm-volume --collective all-reduce --size 1GB --gpus 8 --link nvlink3 --compare
  parcalc comm-volume --collective all-reduce --elements 25M --dtype fp32 --gpus 4 --bandwidth 25GB/s --latency 5us
  parcalc comm-volume --collective all-gather --size 512MiB --gpus 16 --link ib-ndr
  parcalc comm-volume --collective all-reduce --size 1GiB --gpus 16 --gpu h100-sxm5
  parcalc comm-volume --strategy all --model homework-7b --batch 128 --seq-len 4096 --dtype fp16 --gpus 8
  parcalc comm-volume --strategy fsdp --model homework-7b --batch 128 --dtype fp16 --gpus 8
  parcalc comm-volume --strategy fsdp --model llama3-70b --batch 64 --seq-len 4096 --gpus 64 --shard-group 8
  parcalc comm-volume --strategy tp --sequence-parallel --layers 32 --hidden 4096 --heads 32 --batch 8 --seq-len 4096 --gpus 8
  parcalc comm-volume --strategy 3d --model homework-7b --tp 2 --pp 4 --dp 2 --gpus-per-node 4 --batch 64 --seq-len 4096
  parcalc comm-volume --strategy ep --model mixtral-8x7b --tp 2 --dp 16 --ep 8 --etp 1 --sequence-parallel --zero 1 --batch 64 --seq-len 4096 --moe-imbalance 1.2
  parcalc comm-volume --strategy 3d --model llama3-405b --tp 8 --pp 16 --dp 2 --first-stage-layers 7 --last-stage-layers 7 --batch 32 --seq-len 8192
  parcalc comm-volume --strategy cp --model llama3-8b --cp 4 --batch 4 --seq-len 32768
  parcalc comm-volume --strategy 3d --model llama3-405b --tp 8 --cp 16 --pp 16 --dp 4 --cp-comm all-gather --batch 16 --seq-len 131072
"""


_Text = Text

def comm_volume(
    collective: Annotated[Optional[Collective], typer.Option(metavar="OP", help="One collective: all-reduce, reduce-scatter, all-gather, broadcast, reduce, all-to-all, point-to-point.", show_default=False)] = None,  # noqa: UP045
    strategy: Annotated[Optional[Strategy], typer.Option(metavar="NAME", help="Every collective of one iteration: dp, zero1, zero2, zero3, fsdp, tp, pp, cp, 3d, ep (an MoE model's expert parallelism, with the 3d degrees), or all to compare them.", show_default=False)] = None,  # noqa: UP045
    algorithm: Annotated[Optional[Algorithm], typer.Option(metavar="ALGO", help="All-reduce: parameter-server, naive, ring (default), tree, double-binary-tree, butterfly, halving-doubling.", show_default=False)] = None,  # noqa: UP045
    size: Annotated[_Text, typer.Option(metavar="BYTES", help="--collective: message size M (nccl-tests convention: the whole array), e.g. 1GB, 512MiB.")] = None,
    elements: Annotated[_Text, typer.Option(metavar="N", help="--collective: message as a count of elements of --dtype, e.g. 25M.")] = None,
    compare: Annotated[bool, typer.Option("--compare", help="--collective: every algorithm side by side, with its approximate total and time (N - 1 taken as N).")] = False,
    model: Annotated[_Text, typer.Option(metavar="NAME|config.json", help="--strategy: model preset or Hugging Face config.json.")] = None,
    layers: LayersOption = None,
    hidden: HiddenOption = None,
    heads: HeadsOption = None,
    kv_heads: KvHeadsOption = None,
    ffn_hidden: FfnOption = None,
    mlp: MlpOption = None,
    vocab: Annotated[_Text, typer.Option(metavar="V", help="Vocabulary size (default 0: no embeddings; weight matrices of the layers only).")] = None,
    tied: TiedOption = None,
    batch: Annotated[_Text, typer.Option(metavar="B", help="Global batch in sequences per iteration (default: one per GPU).")] = None,
    micro_batch: Annotated[_Text, typer.Option(metavar="b", help="Sequences per micro-batch per replica (default: the replica's batch without PP, 1 with PP).")] = None,
    seq_len: Annotated[_Text, typer.Option(metavar="L", help="Sequence length (default: the model's maximum).")] = None,
    dtype: Annotated[str, typer.Option("--dtype", metavar="DTYPE", help="Element type of parameters and activations (and of --elements).")] = "bf16",
    grad_dtype: Annotated[_Text, typer.Option(metavar="DTYPE", help="Element type of gradients (default: --dtype).")] = None,
    gpus: Annotated[_Text, typer.Option(metavar="N", help=f"GPUs in all: --collective, the ranks taking part (--workers is its old name); --strategy, tp x pp x cp x dp (default: the product, or {DEFAULT_GPUS}).")] = None,
    tp: Annotated[_Text, typer.Option(metavar="N", help="Tensor-parallel degree.")] = None,
    pp: Annotated[_Text, typer.Option(metavar="N", help="Pipeline-parallel degree (stages).")] = None,
    dp: Annotated[_Text, typer.Option(metavar="N", help="Data-parallel degree.")] = None,
    cp: CpOption = None,
    cp_comm: CpCommOption = None,
    ep: EpOption = None,
    etp: EtpOption = None,
    moe_imbalance: Annotated[_Text, typer.Option(metavar="RHO", help="MoE all-to-alls: the busiest rank's tokens over the balanced share (default 1.0: balanced routing; at least 1).")] = None,
    zero: Annotated[ZeroStage, typer.Option(metavar="0-3", help="--strategy 3d: ZeRO stage of the data-parallel dimension (0: DDP all-reduce); 1-3 with dp x cp = 1 is a stated no-op.")] = ZeroStage.ZERO0,
    shard_group: ShardGroupOption = None,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism with TP: all-gathers and reduce-scatters.")] = False,
    schedule: Annotated[Schedule, typer.Option(metavar="NAME", help="Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev, dualpipe.")] = Schedule.ONE_F_ONE_B,
    chunks: Annotated[_Text, typer.Option(metavar="V", help="Model chunks per device (--schedule interleaved).")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    pipeline_layout: PipelineLayoutOption = None,
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="--collective: the GPU preset whose node (NVLink, NICs, network) NCCL's model times the call on.")] = None,
    gpus_per_node: Annotated[_Text, typer.Option(metavar="N", help="GPUs per node: groups wider than a node use --inter-node-link (--collective: NCCL's model).")] = None,
    link: Annotated[_Text, typer.Option(metavar="NAME", help=f"Link preset within a node (default {DEFAULT_LINK}).")] = None,
    inter_node_link: Annotated[_Text, typer.Option(metavar="NAME", help=f"Link preset between nodes (default {DEFAULT_INTER_NODE_LINK}).")] = None,
    bandwidth: Annotated[_Text, typer.Option(metavar="B/s", help="Bandwidth per direction instead of --link, e.g. 25GB/s or 200Gb/s.")] = None,
    latency: Annotated[_Text, typer.Option(metavar="TIME", help="Latency per message (alpha) instead of --link, e.g. 5us (0 when only --bandwidth is given).")] = None,
    bucket_size: Annotated[_Text, typer.Option(metavar="BYTES", help="DDP / ZeRO bucket cap (default 25MiB, with DDP's 1MiB first bucket).")] = None,
    ddp_first_iteration: Annotated[bool, typer.Option("--ddp-first-iteration", help="DDP's first iteration: every gradient in one bucket.")] = False,
    shard_padding: Annotated[bool, typer.Option("--shard-padding/--no-shard-padding", help="FSDP2 pads each tensor's dim 0 to a multiple of the group.")] = True,
    reshard_root: Annotated[bool, typer.Option("--reshard-root/--no-reshard-root", help="FSDP: re-gather the root unit in backward (FSDP2 does not).")] = True,
    vocab_parallel: Annotated[bool, typer.Option("--vocab-parallel/--no-vocab-parallel", help="TP: Megatron's vocabulary-parallel embedding and loss.")] = True,
    fp8_all_gather: Annotated[bool, typer.Option("--fp8-all-gather", help="FSDP (ZeRO-3): torchao's FP8 all-gather (torchtitan's --float8.enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp): the Float8 linears' weights gathered at 1 byte an element, the norms, embedding and output at --dtype; one all-reduce of their fp32 amaxes after the optimizer step.")] = False,
    recompute: Annotated[Recompute, typer.Option(metavar="KIND", help="Activation recomputation: none, selective (attention core: no collective replayed) or full (each layer's forward TP, CP and EP collectives replayed in backward); a bare --recompute (its old form, a switch) is full.")] = Recompute.NONE,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
) -> None:
    """Communication volume: a collective's algorithms (--collective), or every collective of one
    training iteration under DP, ZeRO, FSDP, TP, SP, PP or 3D (--strategy), with payload and
    per-device traffic and alpha-beta times."""
    start(output, fmt)
    from parcalc.results.comm_volume import from_flags

    result = from_flags(collective=collective, strategy=strategy, algorithm=algorithm, size=size, elements=elements,
                        compare=compare, model=model, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                        ffn_hidden=ffn_hidden, mlp=mlp, vocab=vocab, tied=tied, batch=batch, micro_batch=micro_batch,
                        seq_len=seq_len, dtype=dtype, grad_dtype=grad_dtype, gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp,
                        cp_comm=cp_comm, ep=ep, etp=etp, moe_imbalance=moe_imbalance, zero=zero,
                        shard_group=shard_group, sequence_parallel=sequence_parallel, schedule=schedule, chunks=chunks,
                        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
                        embedding_in_split=embedding_in_split, loss_in_split=loss_in_split, pipeline_layout=pipeline_layout, gpu=gpu,
                        gpus_per_node=gpus_per_node, link=link, inter_node_link=inter_node_link, bandwidth=bandwidth,
                        latency=latency, bucket_size=bucket_size, ddp_first_iteration=ddp_first_iteration,
                        shard_padding=shard_padding, reshard_root=reshard_root, vocab_parallel=vocab_parallel,
                        fp8_all_gather=fp8_all_gather, recompute=recompute, presets=presets)
    finish(result, fmt, output)


# --recompute was a switch (full recomputation): alone it still means full (parcalc.cli._bare_values)
BARE_OPTIONS = {"--recompute": "full"}


# ---------------------------------------------------------------------------------------------
# --collective


# ---------------------------------------------------------------------------------------------
# --strategy
