"""`parcalc scaling`: one strategy (or the search's best) at N = 1, 2, 4, ... GPUs: step time,
throughput, speedup, efficiency, the terms that grow, and the knee of the curve."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from parcalc.commands.common import FormatOption, PresetsOption, finish, start
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
from parcalc.core.choices import Precision, Recompute
from parcalc.results.scaling import curve_result, gpu_counts

EXAMPLES = """\
\b
Examples:
  parcalc scaling --model gpt2-xl --gpu a100-sxm4-80gb --gpus 1,2,4,...,64 --batch 64 --seq-len 1024
  parcalc scaling --model gpt2-xl --gpu a100-sxm4-80gb --gpus 1,2,4,...,1024 --weak --batch 4 --seq-len 1024
  parcalc scaling --model llama3-8b --gpu h100-sxm5 --gpus 8,16,...,512 --batch 512 --seq-len 8192 \\
      --strategy zero3 --recompute full -o scaling.svg
  parcalc scaling --model gpt3-175b --gpu a100-sxm4-80gb --gpus 64,128,...,1024 --batch 1536 --seq-len 2048 \\
      --tp 8 --pp 8 --sequence-parallel --recompute selective --knee 0.9
  parcalc scaling --model llama3-8b --gpu h100-sxm5 --gpus 8,16,32,64 --batch 256 --seq-len 4096 --best
  parcalc scaling --model gpt2-xl --gpu a100-sxm4-80gb --gpus 1,2,4,8 --weak --batch 8 --ideal-network --format csv

\b
--gpus takes a comma list in increasing order; "a,b,...,z" continues the ratio b/a up to z.
Each count divides a node (--gpus-per-node) or fills whole nodes.
--strategy sets the layout at each N: dp (dp = N), zero1/zero2/zero3 (dp = N, sharded),
tp (tp = N), pp (pp = N, 1F1B); --tp T --pp P pin those and dp = N / (T P); --best takes
`fit --search`'s fastest configuration at each N.
"""


def scaling(
    model: ModelOption = None,
    layers: LayersOption = None,
    hidden: HiddenOption = None,
    heads: HeadsOption = None,
    kv_heads: KvHeadsOption = None,
    ffn_hidden: FfnOption = None,
    mlp: MlpOption = None,
    vocab: VocabOption = None,
    tied: TiedOption = None,
    gpus: Annotated[Text, typer.Option(metavar="N1,N2,...", help="GPU counts of the curve, increasing (required), e.g. 1,2,4,...,1024.")] = None,
    gpu: Annotated[Text, typer.Option(metavar="NAME", help="GPU preset: memory capacity, peak FLOP/s, kernels and node.")] = None,
    gpus_per_node: Annotated[Text, typer.Option(metavar="g", help="GPUs per node (default: the GPU preset's node, else 8).")] = None,
    batch: Annotated[Text, typer.Option(metavar="B", help="Strong scaling: the global batch in sequences (default: the largest N, one sequence per GPU there). Weak: sequences per GPU (default 1).")] = None,
    seq_len: Annotated[Text, typer.Option(metavar="s", help="Sequence length (default: the model's maximum).")] = None,
    weak: Annotated[bool, typer.Option("--weak/--strong", help="Weak scaling (fixed batch per GPU, B = --batch x N) or strong scaling (fixed global batch; the default).")] = False,
    strategy: Annotated[Text, typer.Option(metavar="KIND", help="How the layout grows with N: dp, zero1, zero2, zero3, tp, pp (default: the --framework's own stage, zero3 for torchtitan and fsdp2, else dp; not with --tp/--pp or --best).")] = None,
    tp: Annotated[Text, typer.Option(metavar="T", help="Pin tensor parallelism at every N (dp = N / (tp x pp)).")] = None,
    pp: Annotated[Text, typer.Option(metavar="P", help="Pin pipeline stages at every N (1F1B; see --tp).")] = None,
    zero: Annotated[Text, typer.Option(metavar="0-3", help="ZeRO stage with --tp/--pp (the zero1-3 strategies set their own).")] = None,
    best: Annotated[bool, typer.Option("--best", help="At each N, the fastest configuration of `fit --search` (every layout, micro-batch, recomputation, ZeRO stage).")] = False,
    micro_batch: Annotated[Text, typer.Option(metavar="b", help="Micro-batch size (default 1; with --best: the only one tried).")] = None,
    recompute: Annotated[Optional[Recompute], typer.Option(metavar="KIND", help="Recomputation: none, selective, full, op (default none; with --best: the only one tried).", show_default=False)] = None,  # noqa: UP045
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel", help="Sequence parallelism wherever tp > 1.")] = False,
    knee: Annotated[Text, typer.Option(metavar="E", help="Efficiency threshold of the knee verdict: the first N with E under it (default 0.8; 0.8 or 80%).")] = None,
    precision: Annotated[Optional[Precision], typer.Option(metavar="KIND", help="fp32, mixed-fp16, mixed-bf16, bf16, fp8, fp4 (NVFP4, Blackwell) (default mixed-bf16; mixed-fp16 on a GPU without bf16).", show_default=False)] = None,  # noqa: UP045
    flash_attention: Annotated[bool, typer.Option("--flash-attention/--no-flash-attention", help="FlashAttention/SDPA, what frameworks run (default): no s x s attention scores stored. --no-flash-attention: the scores materialised (Korthikanti et al. 2022's 5as^2b) and attention timed as explicit GEMMs and softmax.")] = True,
    framework: Annotated[Text, typer.Option(metavar="NAME", help="megatron, deepspeed, fsdp2, torchtitan, hf (default megatron).")] = None,
    link: Annotated[Text, typer.Option(metavar="NAME", help="Link inside a node (default: the GPU preset's node).")] = None,
    inter_node_link: Annotated[Text, typer.Option(metavar="NAME", help="One network card's link (default: the GPU preset's node).")] = None,
    ideal_network: Annotated[bool, typer.Option("--ideal-network", help="Zero latency and infinite bandwidth: every collective and pipeline send takes 0 s.")] = False,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout: .svg plots speedup and efficiency against N (the table still prints); .txt .json .csv .md .tex .pdf the result.", show_default=False)] = None,  # noqa: UP045
) -> None:
    """Scaling curve: one strategy (or the search's best) at N = N1 < N2 < ... GPUs, strong or weak,
    with fit's step-time model: step time, tokens/s, speedup, efficiency, the terms that grow, and
    the knee where efficiency drops under a threshold."""
    svg = output if output is not None and output.suffix.lower() == ".svg" else None
    if svg is not None:
        from parcalc.files import check_writable

        check_writable(svg)
    start(None if svg is not None else output, fmt)
    from parcalc.errors import InfeasibleError, InfeasibleResult
    from parcalc.results.scaling import from_flags

    try:
        result = from_flags(model=model, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                            ffn_hidden=ffn_hidden, mlp=mlp, vocab=vocab, tied=tied, gpus=gpus, gpu=gpu,
                            gpus_per_node=gpus_per_node, batch=batch, seq_len=seq_len, weak=weak, strategy=strategy, tp=tp,
                            pp=pp, zero=zero, best=best, micro_batch=micro_batch, recompute=recompute,
                            sequence_parallel=sequence_parallel, knee=knee, precision=precision,
                            flash_attention=flash_attention, framework=framework, link=link,
                            inter_node_link=inter_node_link, ideal_network=ideal_network, presets=presets)
    except InfeasibleResult as error:
        if svg is None and output is None:  # show the curve's table and why, then fail; no file is written
            finish(error.result, fmt, None)
        raise InfeasibleError(str(error)) from None
    if svg is not None:
        import sys

        from parcalc.output import write_atomically
        from parcalc.render.scaling_svg import scaling_svg
        from parcalc.results.scaling import knee_threshold

        write_atomically(svg, scaling_svg(result.tables[0], result.title, knee_threshold(knee)))
        print(f"wrote {svg}", file=sys.stderr)
    finish(result, fmt, None if svg is not None else output)


__all__ = ["curve_result", "gpu_counts", "scaling"]
