"""`parcalc flops`: training FLOPs per iteration and per token, 6ND, Narayanan's formula, MFU / HFU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from parcalc.commands.common import (
    EmbeddingInSplitOption,
    FirstStageLayersOption,
    FormatOption,
    LastStageLayersOption,
    LossInSplitOption,
    OutputOption,
    PresetsOption,
    RecomputeLayersOption,
    finish,
    preset_dirs,
    recompute_layers_flag,
    stage_flags,
    start,
)
from parcalc.commands.model_options import (
    FfnOption,
    HeadsOption,
    HiddenOption,
    KvHeadsOption,
    LayersOption,
    MlpOption,
    ModelFlags,
    ModelOption,
    TiedOption,
    VocabOption,
)
from parcalc.core.choices import Recompute

if TYPE_CHECKING:
    from parcalc.core.flops import TrainingFlops
    from parcalc.derivation import Derivation, Table

EXAMPLES = """\
\b
Examples:
  parcalc flops --model gpt3-175b --batch 1536 --seq-len 2048
  parcalc flops --model gpt3-175b --params 175e9 --tokens 300e9
  parcalc flops --layers 48 --hidden 6144 --heads 64 --vocab 51200 --batch 4 --seq-len 2048 --recompute selective --step-time 1.10s --gpus 8 --gpu a100-sxm4-80gb
  parcalc flops --model llama3-405b --batch 2048 --seq-len 8192 --causal --pp 16 --first-stage-layers 7 --last-stage-layers 7
  parcalc flops --model llama3-8b --batch 512 --seq-len 8192 --causal --step-time 6.5s --gpus 64 --gpu h100-sxm5 --dtype bf16
  parcalc flops --model deepseek-v3 --batch 15360 --seq-len 4096 --causal
  parcalc flops --model llama3-8b --batch 1 --seq-len 131072 --causal --cp 16
  parcalc flops --model llama3-8b --batch 64 --seq-len 8192 --causal --recompute op --flash-attention
  parcalc flops --model gpt3-175b --batch 1536 --seq-len 2048 --recompute full --pp 16 --recompute-layers 2
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
    tokens: Annotated[_Text, typer.Option(metavar="D", help="Training tokens of a whole run: total FLOPs, exact per token and 6ND.")] = None,
    params: Annotated[_Text, typer.Option(metavar="N", help="Parameters N for 6ND (default: the model's count).")] = None,
    step_time: Annotated[_Text, typer.Option(metavar="TIME", help="Measured time of one iteration, for MFU and HFU (with --gpus).")] = None,
    gpus: Annotated[_Text, typer.Option(metavar="n", help="GPUs running the iteration (for MFU and HFU).")] = None,
    gpu: Annotated[_Text, typer.Option(metavar="NAME", help="GPU preset whose datasheet peak MFU uses.")] = None,
    dtype: Annotated[_Text, typer.Option(metavar="DTYPE", help="Which of the GPU's peaks: bf16 (default; fp16 on a GPU without bf16, e.g. V100), fp16, tf32, fp8...")] = None,
    peak: Annotated[_Text, typer.Option(metavar="FLOP/s", help="Peak FLOP/s per GPU instead of --gpu's, e.g. 312TFLOP/s.")] = None,
    pp: Annotated[_Text, typer.Option(metavar="p", help="Pipeline stages: the FLOPs of each stage and the busiest one (totals do not change).")] = None,
    first_stage_layers: FirstStageLayersOption = None,
    last_stage_layers: LastStageLayersOption = None,
    embedding_in_split: EmbeddingInSplitOption = False,
    loss_in_split: LossInSplitOption = False,
    cp: Annotated[_Text, typer.Option(metavar="c", help="Context-parallel ranks sharing each sequence: FLOPs of the busiest rank, with Megatron's 2cp-chunk causal balancing and without.")] = None,
    presets: PresetsOption = None,
    fmt: FormatOption = None,
    output: OutputOption = None,
    recompute_layers: RecomputeLayersOption = None,
    flash_attention: Annotated[bool, typer.Option("--flash-attention", help="With --recompute op: fused attention (SDPA), whose output op-level checkpointing saves; without it Q·K^T and score·V are recomputed.")] = False,
) -> None:
    """Training FLOPs per iteration and per token: the exact count of the layer's matmuls (model and
    hardware FLOPs), 6ND, Narayanan et al.'s 96 B s l h^2 (...) formula, and MFU / HFU from a
    measured step time."""
    start(output, fmt)
    from parcalc.commands.model_options import model_and_seq_len, model_terms
    from parcalc.core.flops import flops_utilization, six_nd, training_flops
    from parcalc.derivation import Result, Term
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_count, parse_quantity

    dirs = preset_dirs(presets)
    shape, seq = model_and_seq_len(ModelFlags(model, layers, hidden, heads, kv_heads, ffn_hidden, mlp, vocab, tied), seq_len, dirs)
    sequences = parse_count(batch, "--batch") if batch is not None else 1
    n_params = parse_quantity(params, Dimension.COUNT, "--params") if params is not None else None
    first, last = stage_flags(first_stage_layers, last_stage_layers)
    slots = {"embedding_in_split": embedding_in_split, "loss_in_split": loss_in_split}
    n_recompute = recompute_layers_flag(recompute_layers)
    again_layers = None
    if n_recompute is not None:
        from parcalc.core.recompute import check_recompute_layers, recomputed_layer_count
        from parcalc.core.stages import stage_split

        split = stage_split(shape.layers, parse_count(pp, "--pp") if pp is not None else 1, first, last, **slots)
        check_recompute_layers(n_recompute, recompute, split, shape)
        again_layers = recomputed_layer_count(n_recompute, split, 1)
    counted = training_flops(shape, sequences, seq, recompute=recompute.value, causal=causal, params=n_params,
                             flash_attention=flash_attention, recomputed_layers=again_layers)  # fmt: skip
    derivations = list(counted.derivations())
    note: str | None = None
    verdicts = [_narayanan_verdict(counted)]
    settings = [("model", shape.key), ("recompute", recompute.value), ("causal", str(causal).lower())]
    if n_recompute is not None:
        settings.append(("recompute_layers", str(n_recompute)))
    if recompute is Recompute.OP:
        settings.append(("flash_attention", str(flash_attention).lower()))
    if tokens is not None:
        total_tokens = parse_quantity(tokens, Dimension.COUNT, "--tokens")
        run_n = n_params if n_params is not None else float(shape.active_params)  # active = total for a dense model
        what = f"active parameters of {shape.name}" if shape.moe is not None else f"parameters of {shape.name}"
        derivations.append(six_nd(run_n, total_tokens, key="six_nd_run", params_source="given" if n_params else what))
        derivations.append(_run_flops(counted, total_tokens))
    if (step_time is None) != (gpus is None):
        raise InputError("--step-time and --gpus: give both for MFU and HFU (the time of one iteration on that many GPUs)")
    if step_time is None and (gpu is not None or peak is not None):
        flag = "--gpu" if gpu is not None else "--peak"
        raise InputError(f"{flag}: the peak is used only for MFU and HFU; give --step-time and --gpus with it")
    if gpu is not None and peak is not None:
        raise InputError("--peak: give --gpu (its datasheet peak for --dtype) or --peak, not both")
    if step_time is not None:
        seconds = parse_quantity(step_time, Dimension.TIME, "--step-time", require_unit=True)
        count = parse_count(gpus, "--gpus")
        if dtype is None:  # the default must hold on the GPU given: bf16, or fp16 where it has none (V100)
            from parcalc.commands.common import sixteen_bit_default
            from parcalc.presets import load_gpu

            dtype, note = sixteen_bit_default(load_gpu(gpu, dirs) if gpu is not None else None)
        peak_value, peak_source, device_key = _peak(gpu, peak, dtype, dirs)
        derivations.append(flops_utilization(counted.model, seconds, count, peak_value, peak_source=peak_source))
        derivations.append(flops_utilization(counted.hardware, seconds, count, peak_value, hardware=True, peak_source=peak_source))
        if counted.korthikanti_selective is not None:
            derivations.append(flops_utilization(counted.korthikanti_selective, seconds, count, peak_value, hardware=True,
                                                 peak_source=peak_source, key="hfu_korthikanti",
                                                 label="HFU with Korthikanti et al.'s eq. (8) (the convention of their Table 5)"))  # fmt: skip
        settings += [("gpu", device_key), ("dtype", dtype)]
    inputs = model_terms(shape) + [
        Term("B", "B", "B", sequences, "", "sequences per iteration (global batch)"),
        Term("s", "s", "s", seq, "", "sequence length"),
    ]
    tables = [_ops_table(counted, recompute.value, shape, flash_attention, again_layers)]
    if pp is not None or first is not None or last is not None or embedding_in_split or loss_in_split:
        stages = parse_count(pp, "--pp") if pp is not None else 1
        busiest, table, verdict = _stages(counted, shape.layers, stages, first, last, **slots)
        derivations.append(busiest)
        tables.append(table)
        verdicts.append(verdict)
        inputs.append(Term("p", "p", "p", stages, "", "pipeline stages"))
    if cp is not None:
        from parcalc.core.context import causal_imbalance, cp_rank_flops

        ranks = parse_count(cp, "--cp")
        balanced = cp_rank_flops(counted, seq, ranks, balanced=True)
        derivations.append(balanced)
        if causal:
            plain = cp_rank_flops(counted, seq, ranks, balanced=False)
            derivations.append(plain)
            verdicts.append(f"context parallelism over {ranks} ranks: the 2cp-chunk balancing gives every rank the same causal "
                            f"attention work; the plain split's last rank runs "
                            f"{causal_imbalance(seq, ranks, False).value:.3f} x the mean rank's attention and "
                            f"{plain.value / balanced.value:.3f} x the balanced rank's FLOPs")  # fmt: skip
        inputs.append(Term("c_p", "cp", r"c_p", ranks, "", "context-parallel degree"))
        settings.append(("cp", str(ranks)))
    result = Result(
        command="flops",
        title=f"Training FLOPs: {shape.name}, B = {sequences} sequences of s = {seq} tokens per iteration",
        inputs=tuple(inputs),
        derivations=tuple(derivations),
        tables=tuple(tables),
        verdicts=tuple(verdicts),
        assumptions=(
            "matmuls only, 2 FLOP per multiply-add; a matmul's backward is two matmuls of its size (input and weight gradients)",
            "model FLOPs leave recomputation out, hardware FLOPs count it (Korthikanti et al. 2022, Appendix A)",
            *((f"{note} (MFU against the fp16 peak; --dtype chooses)",) if note else ()),
            *(_moe_assumptions(shape) if shape.moe is not None else ()),
        ),
        settings=tuple(settings),
    )
    finish(result, fmt, output)


def _stages(counted: TrainingFlops, layers: int, pp: int, first: int | None, last: int | None, *, embedding_in_split: bool,
            loss_in_split: bool) -> tuple[Derivation, Table, str]:  # fmt: skip
    """The busiest stage's FLOPs, every stage's, and how far the busiest is above an even share."""
    from parcalc.core.flops import stage_flops
    from parcalc.core.stages import split_text, stage_split
    from parcalc.derivation import Column, Table

    split = stage_split(layers, pp, first, last, embedding_in_split=embedding_in_split, loss_in_split=loss_in_split)
    each = [stage_flops(counted, split, s) for s in range(pp)]
    total = counted.hardware.value
    index = max(range(pp), key=lambda s: each[s].value)
    busiest = each[index]
    rows = tuple((s + 1, split[s], d.value, d.value / total) for s, d in enumerate(each))
    columns = (Column("stage", "stage"), Column("layers", "layers"), Column("flops", "hardware FLOPs", "FLOP"),
               Column("share", "share", "fraction"))  # fmt: skip
    table = Table("stage_flops", f"Hardware FLOPs of each pipeline stage per iteration ({split_text(split)} layers)", columns, rows)
    verdict = (f"the busiest stage, stage {index + 1}, runs {busiest.value / total:.2%} of the iteration's hardware FLOPs against an even "
               f"1/{pp} = {1 / pp:.2%}: the others wait for it, so the pipeline keeps its GPUs at most "
               f"{total / (pp * busiest.value):.1%} busy with FLOPs (mean stage / busiest stage)")  # fmt: skip
    return busiest, table, verdict


def _moe_assumptions(shape) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    from parcalc.core.flops import MOE_MFU

    moe = shape.moe
    capacity = "dropless (every routed token computed)" if moe.capacity_factor is None else f"capacity factor {moe.capacity_factor:g}"
    return (
        f"Mixture-of-Experts: {shape.moe_layers} of {shape.layers} layers have {moe.experts} routed experts, top_k {moe.top_k}"
        + (f", {moe.shared_experts} shared" if moe.shared_experts else "") + f"; {capacity}, balanced routing",
        MOE_MFU,
        "Megatron-LM's num_floating_point_operations leaves out the router GEMM that these totals count (2 h x experts per token)",
    )


def _run_flops(counted: TrainingFlops, total_tokens: float) -> Derivation:
    from parcalc.derivation import Derivation, Term

    per = counted.model_per_token
    return Derivation(
        key="model_flops_run",
        label="Model FLOPs of the whole run (exact count per token x tokens)",
        symbol="C",
        latex_symbol="C",
        formula="$f_tok × $D_run",
        formula_latex=r"$f_tok \, $D_run",
        inputs=(per.as_term("f_tok"), Term("D_run", "D", "D", total_tokens, "", "training tokens")),
        value=per.value * total_tokens,
        unit="FLOP",
        source=per.source,
    )


def _peak(gpu: str | None, peak: str | None, dtype: str, dirs: tuple) -> tuple[float, str, str]:
    """Peak FLOP/s per GPU for MFU: --peak, else the GPU's datasheet dense peak for --dtype."""
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    if peak is not None:
        return parse_quantity(peak, Dimension.FLOP_RATE, "--peak", require_unit=True), "given on the command line", "none"
    if gpu is None:
        raise InputError("--gpu: MFU needs a peak: give --gpu NAME (its datasheet peak for --dtype) or --peak FLOP/s")
    from parcalc.core.dtypes import canonical_dtype
    from parcalc.core.flops import gpu_peak_flops
    from parcalc.presets import load_gpu

    device = load_gpu(gpu, dirs)
    key = canonical_dtype(dtype)
    chosen = gpu_peak_flops(device, key)
    # MFU is quoted against the datasheet's peak (Korthikanti et al. 2022 footnote: A100 312 TFLOP/s)
    if chosen.datasheet is not None:
        return chosen.datasheet.value, chosen.datasheet.source, device.key
    return chosen.value, f"{device.name}: 2 x clock x SMs x FMA/clock/SM for {key}", device.key


def _narayanan_verdict(counted: TrainingFlops) -> str:
    exact_full = counted.forward.value * 4 - (counted.head_op.flops if counted.head_op is not None else 0.0)
    closed = counted.narayanan.value
    if counted.causal:
        return "Narayanan et al.'s formula counts the full attention matrix; --causal halves it in the exact count"
    if abs(exact_full - closed) <= 1e-9 * closed:
        return ("Narayanan et al.'s formula equals the exact count with full recomputation "
                "(4 x every layer's forward + 3 x the LM head's) for this model")  # fmt: skip
    return (f"Narayanan et al.'s formula differs from the exact count with full recomputation ({exact_full:.6g} FLOP) by "
            f"{(closed - exact_full) / exact_full * 100:+.2f} %: it assumes a 4h MLP, multi-head attention and an LM head")  # fmt: skip


def _ops_table(counted: TrainingFlops, recompute: str, shape: object = None, flash_attention: bool = False,
               again_layers: int | None = None) -> Table:  # fmt: skip
    """One layer's matmuls (and the LM head): forward, backward, recomputed, per iteration (recomputed
    per layer on average with --recompute-layers)."""
    from parcalc.core.flops import ATTENTION_CORE_OPS
    from parcalc.derivation import Column, Table

    op_keys: tuple[str, ...] = ()
    if recompute == "op":
        from parcalc.core.recompute import op_recomputed_matmuls

        op_keys = op_recomputed_matmuls(shape, flash_attention)  # type: ignore[arg-type]
    rows = []
    kinds = counted.layer_kinds()
    for kind, ops, layers, _ in kinds:
        if not layers:
            continue
        for op in ops:
            if op.kind != "matmul":
                continue
            f = counted.op_flops(op)
            again = f if recompute == "full" or (recompute == "selective" and op.key in ATTENTION_CORE_OPS) or op.key in op_keys else 0.0
            if recompute == "full" and again_layers is not None and layers:
                again *= again_layers / layers  # --recompute-layers: the share of layers recomputed
            name = f"{op.name} [{kind}]" if len(kinds) > 1 else op.name
            rows.append((name, op.shape, layers, f, 2 * f, again, layers * (3 * f + again)))
    if counted.head_op is not None:
        head = counted.head_op
        rows.append((head.name, head.shape, 1, head.flops, 2 * head.flops, 0.0, 3 * head.flops))
    columns = (
        Column("op", "op"), Column("shape", "shape"), Column("count", "times per iteration"),
        Column("forward", "forward", "FLOP"), Column("backward", "backward", "FLOP"),
        Column("recomputed", "recomputed", "FLOP"), Column("total", "total per iteration", "FLOP"),
    )  # fmt: skip
    return Table("layer_flops", "Matmuls of one layer (whole batch) and of the LM head", columns, tuple(rows))
