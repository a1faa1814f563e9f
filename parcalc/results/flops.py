"""`flops`: training FLOPs per iteration and per token (the layer's matmuls counted, model and hardware
FLOPs), 6ND, Narayanan et al.'s formula, the stages, context parallelism, MFU / HFU and the run's cost."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Mlp, Recompute
from parcalc.frozen import frozen

if TYPE_CHECKING:
    from parcalc.core.flops import TrainingFlops
    from parcalc.core.model import TransformerModel
    from parcalc.core.training_cost import RunPlan
    from parcalc.derivation import Derivation, Result, Table


@frozen
class Utilization:
    """--step-time on --gpus against a peak: what MFU and HFU are computed from (seconds, FLOP/s)."""

    step_time: float
    gpus: int
    peak: float
    peak_source: str
    gpu_key: str  # the GPU preset's name ("none" for --peak)
    dtype: str
    note: str | None = None  # the 16-bit default on a GPU without bf16


@frozen
class RunRequest:
    """A whole run (--tokens or --iterations) timed from a step time or a throughput per GPU."""

    plan: RunPlan
    gpus: int | None = None  # None: no time (then the run is its FLOPs alone)
    step_time: float | None = None  # seconds, --step-time
    tflops_per_gpu: float | None = None  # FLOP/s, --tflops-per-gpu
    mfu: float | None = None  # a fraction, --mfu
    mfu_peak: float | None = None  # FLOP/s, the peak --mfu is a share of
    mfu_peak_source: str = ""


@frozen
class FlopsRequest:
    """What `flops` is asked, parsed: the model, the batch, recomputation, and the optional parts
    (a run's tokens, MFU from a step time, the run's time and cost, the stages, context parallelism)."""

    model: TransformerModel
    batch: int  # sequences per iteration (1 when not given)
    seq_len: int
    recompute: Recompute = Recompute.NONE
    causal: bool = False
    flash_attention: bool = True
    params: float | None = None  # --params: the parameter count 6ND uses
    recompute_layers: int | None = None  # --recompute-layers
    recomputed_layers: int | None = None  # the layers recomputed over the whole model (from the stage split)
    recompute_modules: tuple[str, ...] | None = None
    batch_given: bool = False
    tokens: float | None = None  # --tokens: 6ND and the run's FLOPs
    utilization: Utilization | None = None
    run: RunRequest | None = None
    pp: int | None = None  # None: no stage table
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    embedding_in_split: bool = False
    loss_in_split: bool = False
    cp: int | None = None  # --cp: one rank's FLOPs
    pipeline_layout: str | None = None  # --pipeline-layout: each rank's FLOPs from its virtual stages (with pp)


def request(model: str | None = None, layers: str | None = None, hidden: str | None = None,
            heads: str | None = None, kv_heads: str | None = None, ffn_hidden: str | None = None,
            mlp: Mlp | None = None, vocab: str | None = None, tied: bool | None = None, batch: str | None = None,
            seq_len: str | None = None, recompute: Recompute = Recompute.NONE, causal: bool = False,
            tokens: str | None = None, iterations: str | None = None, tflops_per_gpu: str | None = None,
            mfu: str | None = None, gpu_power: str | None = None, pue: str | None = None, price: str | None = None,
            params: str | None = None, step_time: str | None = None, gpus: str | None = None,
            gpu: str | None = None, dtype: str | None = None, peak: str | None = None, pp: str | None = None,
            first_stage_layers: str | None = None, last_stage_layers: str | None = None,
            embedding_in_split: bool = False, loss_in_split: bool = False, cp: str | None = None,
            presets: list[Path] | None = None, recompute_layers: str | None = None,
            recompute_modules: str | None = None, flash_attention: bool = True,
            pipeline_layout: str | None = None) -> FlopsRequest:  # fmt: skip
    """The request from `flops`' flag texts; bad input raises InputError naming the flag."""
    from parcalc.errors import InputError
    from parcalc.results.model import ModelFlags, model_and_seq_len
    from parcalc.results.parse import preset_dirs, recompute_layers_flag, recompute_modules_flag, stage_flags
    from parcalc.units import Dimension, parse_count, parse_quantity

    dirs = preset_dirs(presets)
    shape, seq = model_and_seq_len(ModelFlags(model, layers, hidden, heads, kv_heads, ffn_hidden, mlp, vocab, tied), seq_len, dirs)
    sequences = parse_count(batch, "--batch") if batch is not None else 1
    n_params = parse_quantity(params, Dimension.COUNT, "--params") if params is not None else None
    first, last = stage_flags(first_stage_layers, last_stage_layers)
    n_recompute = recompute_layers_flag(recompute_layers)
    modules = recompute_modules_flag(recompute_modules)
    again_layers = None
    if n_recompute is not None:
        from parcalc.core.recompute import check_recompute_layers, recomputed_layer_count
        from parcalc.core.stages import stage_split

        split = stage_split(shape.layers, parse_count(pp, "--pp") if pp is not None else 1, first, last,
                            embedding_in_split=embedding_in_split, loss_in_split=loss_in_split)  # fmt: skip
        check_recompute_layers(n_recompute, recompute, split, shape)
        again_layers = recomputed_layer_count(n_recompute, split, 1)
    total_tokens = None
    if tokens is not None:
        from parcalc.units import parse_tokens

        total_tokens = parse_tokens(tokens, "--tokens")
    throughput = tflops_per_gpu is not None or mfu is not None
    if not throughput and (step_time is None) != (gpus is None):
        raise InputError("--step-time and --gpus: give both for MFU and HFU (the time of one iteration on that many GPUs)")
    if throughput and (gpus is None or step_time is not None):
        flag = "--tflops-per-gpu" if tflops_per_gpu is not None else "--mfu"
        raise InputError(f"{flag}: give --gpus with it, and not --step-time (the run's time comes from one of them)")
    if step_time is None and not throughput and (gpu is not None or peak is not None):
        flag = "--gpu" if gpu is not None else "--peak"
        raise InputError(f"{flag}: the peak is used only for MFU and HFU; give --step-time and --gpus with it")
    if gpu is not None and peak is not None:
        raise InputError("--peak: give --gpu (its datasheet peak for --dtype) or --peak, not both")
    run_only = gpu is None and peak is None and (tokens is not None or iterations is not None)  # a step time for the run alone
    utilization = None
    if step_time is not None and not run_only:
        seconds = parse_quantity(step_time, Dimension.TIME, "--step-time", require_unit=True)
        assert gpus is not None  # --step-time comes with --gpus (checked above)
        count = parse_count(gpus, "--gpus")
        note = None
        if dtype is None:  # the default must hold on the GPU given: bf16, or fp16 where it has none (V100)
            from parcalc.presets import load_gpu
            from parcalc.results.parse import sixteen_bit_default

            dtype, note = sixteen_bit_default(load_gpu(gpu, dirs) if gpu is not None else None)
        peak_value, peak_source, device_key = _peak(gpu, peak, dtype, dirs)
        utilization = Utilization(seconds, count, peak_value, peak_source, device_key, dtype, note)
    run = None
    if any(f is not None for f in (tokens, iterations, gpu_power, pue, price)) or throughput:
        from parcalc.presets import load_gpu
        from parcalc.results.parse import run_plan

        device = load_gpu(gpu, dirs) if gpu is not None else None
        plan = run_plan(tokens, iterations, gpu_power, device, pue, price)
        if plan is None:  # a throughput alone: no run to time (it was an internal error, NoneType has no 'iterations')
            flag = "--tflops-per-gpu" if tflops_per_gpu is not None else "--mfu"
            raise InputError(f"{flag}: times a whole run; give --tokens D (or --iterations I) with it")
        run = _run_request(plan, batch is not None, gpus, step_time, tflops_per_gpu, mfu, peak, dtype, gpu, dirs)
    stages = None
    if pipeline_layout is not None:
        if first is not None or last is not None or embedding_in_split or loss_in_split or n_recompute is not None:
            raise InputError("--pipeline-layout: gives every stage's layers; not with --first-stage-layers, --last-stage-layers, "
                             "--embedding-in-split, --loss-in-split or --recompute-layers")  # fmt: skip
        if pp is None:
            raise InputError("--pipeline-layout: give --pp too (the layout's virtual stages are split over that many ranks)")
        stages = parse_count(pp, "--pp")
    elif pp is not None or first is not None or last is not None or embedding_in_split or loss_in_split:
        stages = parse_count(pp, "--pp") if pp is not None else 1
    return FlopsRequest(shape, sequences, seq, recompute, causal, flash_attention, n_params, n_recompute, again_layers, modules,
                        batch_given=batch is not None, tokens=total_tokens, utilization=utilization, run=run, pp=stages,
                        first_stage_layers=first, last_stage_layers=last, embedding_in_split=embedding_in_split,
                        loss_in_split=loss_in_split, cp=parse_count(cp, "--cp") if cp is not None else None,
                        pipeline_layout=pipeline_layout)  # fmt: skip


def result(req: FlopsRequest) -> Result:
    """The iteration's FLOPs counted matmul by matmul, with the parts the request asks for; no parsing."""
    from parcalc.core.flops import flops_utilization, six_nd, training_flops
    from parcalc.derivation import Result, Term
    from parcalc.results.model import model_terms

    shape, seq, sequences, recompute, causal = req.model, req.seq_len, req.batch, req.recompute, req.causal
    counted = training_flops(shape, sequences, seq, recompute=recompute.value, causal=causal, params=req.params,
                             flash_attention=req.flash_attention, recomputed_layers=req.recomputed_layers,
                             recompute_modules=req.recompute_modules)  # fmt: skip
    derivations = list(counted.derivations())
    verdicts = [_narayanan_verdict(counted)]
    settings = [("model", shape.key), ("recompute", recompute.value), ("causal", str(causal).lower())]
    if req.recompute_layers is not None:
        settings.append(("recompute_layers", str(req.recompute_layers)))
    if req.recompute_modules is not None:
        settings.append(("recompute_modules", ",".join(req.recompute_modules)))
    if recompute is Recompute.OP:
        settings.append(("flash_attention", str(req.flash_attention).lower()))
    if req.tokens is not None:
        run_n = req.params if req.params is not None else float(shape.active_params)  # active = total for a dense model
        what = f"active parameters of {shape.name}" if shape.moe is not None else f"parameters of {shape.name}"
        derivations.append(six_nd(run_n, req.tokens, key="six_nd_run", params_source="given" if req.params else what))
        derivations.append(_run_flops(counted, req.tokens))
    note = None
    if req.utilization is not None:
        u = req.utilization
        note = u.note
        derivations.append(flops_utilization(counted.model, u.step_time, u.gpus, u.peak, peak_source=u.peak_source))
        derivations.append(flops_utilization(counted.hardware, u.step_time, u.gpus, u.peak, hardware=True, peak_source=u.peak_source))
        if counted.korthikanti_selective is not None:
            derivations.append(flops_utilization(counted.korthikanti_selective, u.step_time, u.gpus, u.peak, hardware=True,
                                                 peak_source=u.peak_source, key="hfu_korthikanti",
                                                 label="HFU with Korthikanti et al.'s eq. (8) (the convention of their Table 5)"))  # fmt: skip
        settings += [("gpu", u.gpu_key), ("dtype", u.dtype)]
    run_assumptions: tuple[str, ...] = ()
    if req.run is not None:
        run_derivations, run_verdicts, run_assumptions = _training_run(req.run, counted, shape, sequences if req.batch_given else None,
                                                                       seq, req.params, recompute.value)  # fmt: skip
        derivations += run_derivations
        verdicts += run_verdicts
    inputs = model_terms(shape) + [
        Term("B", "B", "B", sequences, "", "sequences per iteration (global batch)"),
        Term("s", "s", "s", seq, "", "sequence length"),
    ]
    tables = [_ops_table(counted, recompute.value, shape, req.flash_attention, req.recomputed_layers, req.recompute_modules)]
    if req.pp is not None:
        if req.pipeline_layout is not None:
            busiest, table, verdict = _layout_stages(counted, shape, req.pipeline_layout, req.pp)
            settings.append(("pipeline_layout", req.pipeline_layout))
        else:
            busiest, table, verdict = _stages(counted, shape.layers, req.pp, req.first_stage_layers, req.last_stage_layers,
                                              embedding_in_split=req.embedding_in_split, loss_in_split=req.loss_in_split)  # fmt: skip
        derivations.append(busiest)
        tables.append(table)
        verdicts.append(verdict)
        inputs.append(Term("p", "p", "p", req.pp, "", "pipeline stages"))
    if req.cp is not None:
        from parcalc.core.context import causal_imbalance, cp_rank_flops

        ranks = req.cp
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
    return Result(
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
            *run_assumptions,
        ),
        settings=tuple(settings),
    )


def from_flags(**flags: Any) -> Result:
    """`flops`' Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.flops and the library (parcalc.results.run) both call."""
    return result(request(**flags))


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


def _layout_stages(counted: TrainingFlops, shape: TransformerModel, text: str, pp: int) -> tuple[Derivation, Table, str]:
    """_stages for a --pipeline-layout: each rank's FLOPs, the sum of its chunks' (parcalc.core.flops.layout_rank_flops)."""
    from parcalc.core.flops import layout_rank_flops
    from parcalc.core.pipeline_layout import parse_pipeline_layout
    from parcalc.derivation import Column, Table

    split = parse_pipeline_layout(text, pp, shape.layers, shape.mtp_layers)
    each = [layout_rank_flops(counted, split, rank) for rank in range(pp)]
    total = counted.hardware.value
    index = max(range(pp), key=lambda s: each[s].value)
    busiest = each[index]
    rows = tuple((s + 1, " + ".join(f"{c.layers}{' + MTP' * c.mtp}" for c in split.rank_chunks(s)), d.value, d.value / total) for s, d in enumerate(each))
    columns = (Column("stage", "stage"), Column("layers", "layers (per chunk)"), Column("flops", "hardware FLOPs", "FLOP"),
               Column("share", "share", "fraction"))  # fmt: skip
    table = Table("stage_flops", f"Hardware FLOPs of each pipeline stage per iteration (--pipeline-layout {text}, {split.chunks} "
                  f"chunk{'s' if split.chunks > 1 else ''} per stage)", columns, rows)  # fmt: skip
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
    from parcalc.core.peak_flops import gpu_peak_flops
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
               again_layers: int | None = None, modules: tuple[str, ...] | None = None) -> Table:  # fmt: skip
    """One layer's matmuls (and the LM head): forward, backward, recomputed, per iteration (recomputed
    per layer on average with --recompute-layers)."""
    from parcalc.core.recompute import module_replays_op
    from parcalc.derivation import Column, Table

    op_keys: tuple[str, ...] = ()
    chosen = modules if recompute == "selective" and modules is not None else ("core_attn",) if recompute == "selective" else ()
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
            replayed = bool(chosen) and module_replays_op(op.key, chosen, shape, kind == "MoE layer")  # type: ignore[arg-type]
            again = f if recompute == "full" or replayed or op.key in op_keys else 0.0
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
    # the brief terminal form: each matmul's forward, backward and total (its shape, count and recomputation,
    # whose sum F_re the brief form shows, are --detail full's)
    return Table("layer_flops", "Matmuls of one layer (whole batch) and of the LM head", columns, tuple(rows),
                 brief_columns=("op", "forward", "backward", "total"))  # fmt: skip


def _run_request(plan: RunPlan, batch_given: bool, gpus: str | None, step_time: str | None, tflops_per_gpu: str | None,
                 mfu: str | None, peak: str | None, dtype: str | None, gpu: str | None, dirs: tuple) -> RunRequest:  # fmt: skip
    """The run's flags read: its step time, or its throughput per GPU (--tflops-per-gpu, or --mfu of a peak)."""
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_count, parse_quantity

    if step_time is None and tflops_per_gpu is None and mfu is None:
        flag = next(f for f, v in (("--price", plan.price), ("--gpu-power", plan.power)) if v is not None) if (plan.price or plan.power) else None
        if flag is not None:
            raise InputError(f"{flag}: the run's cost and energy need its time: give --step-time and --gpus, or --tflops-per-gpu / "
                             "--mfu and --gpus")  # fmt: skip
        if plan.iterations is not None:
            raise InputError("--iterations: the run's time needs --step-time and --gpus (or --tflops-per-gpu / --mfu and --gpus)")
        return RunRequest(plan)
    assert gpus is not None  # a run time comes with --gpus (request() checks it)
    n = parse_count(gpus, "--gpus")
    if step_time is not None:
        if not batch_given:
            raise InputError("--tokens with --step-time: give --batch B too (iterations = ceil(D / (B s)), each of --step-time)")
        return RunRequest(plan, n, step_time=parse_quantity(step_time, Dimension.TIME, "--step-time", require_unit=True))
    if tflops_per_gpu is not None:
        if mfu is not None:
            raise InputError("--tflops-per-gpu / --mfu: give one throughput, not both")
        if peak is not None:
            raise InputError("--peak: used for MFU; --tflops-per-gpu gives the throughput itself")
        import re

        text = tflops_per_gpu.strip()
        bare = re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text) is not None  # a bare number is TFLOP/s
        try:
            rate = parse_quantity(text + "T" if bare else text, Dimension.FLOP_RATE, "--tflops-per-gpu")
        except InputError as error:  # name the value as typed, not with the T parcalc added
            raise InputError(str(error).replace(repr(text + "T"), repr(text))) from None
        return RunRequest(plan, n, tflops_per_gpu=rate)
    assert mfu is not None  # neither --step-time nor --tflops-per-gpu: --mfu (the return above)
    share = parse_quantity(mfu, Dimension.FRACTION, "--mfu")
    if share > 1:
        raise InputError(f"--mfu: a share of the peak of at most 1 (100 %), got {mfu!r}")
    if dtype is None:
        from parcalc.presets import load_gpu
        from parcalc.results.parse import sixteen_bit_default

        dtype, _ = sixteen_bit_default(load_gpu(gpu, dirs) if gpu is not None else None)
    peak_value, peak_source, _ = _peak(gpu, peak, dtype, dirs)
    return RunRequest(plan, n, mfu=share, mfu_peak=peak_value, mfu_peak_source=peak_source)


def _training_run(req: RunRequest, counted: TrainingFlops, shape: TransformerModel, batch: int | None, seq: int, params: float | None,
                  recompute: str) -> tuple[list, list[str], tuple[str, ...]]:  # fmt: skip
    """The run's derivations (time, GPU-hours, energy, cost), verdicts and assumptions: from a
    measured step time, or from a throughput per GPU (--tflops-per-gpu, --mfu)."""
    from parcalc.core.training_cost import narayanan_time, run_from_step, run_from_throughput
    from parcalc.derivation import Term
    from parcalc.results.parse import run_verdict

    plan, n = req.plan, req.gpus
    if n is None:
        return [], [], ()
    notes: list[str] = []
    verdicts: list[str] = []
    extra: list[Derivation] = []
    if req.step_time is not None:
        assert batch is not None  # _run_request checks it
        run = run_from_step(plan, Term("t_step", "t_step", r"t_{\mathrm{step}}", req.step_time, "s", "time of one iteration (--step-time)",
                                       "measured (given)"), n, batch, seq)  # fmt: skip
    elif req.tflops_per_gpu is not None:
        x = Term("X", "X", "X", req.tflops_per_gpu, "FLOP/s", "achieved hardware FLOP/s per GPU", "--tflops-per-gpu (given)")
        run = run_from_throughput(plan, counted.hardware_per_token, n, x, batch, seq)
        if plan.tokens is not None:
            n_params = params if params is not None else float(shape.active_params)
            extra.append(narayanan_time(plan.tokens, n_params, n, x))
            eq4_days = extra[-1].value / 86_400
            why = ("the attention scores and the LM head beyond eq. (4)'s 8 P per token" if recompute == "full" else
                   f"--recompute {recompute} runs fewer than eq. (4)'s 4 passes of 2 P per token; --recompute full is the paper's setting")
            verdicts = [f"Narayanan et al.'s eq. (4), 8 T P / (n X): {eq4_days:,.1f} days; the exact count gives {run.days.value:,.1f} "
                        f"days ({run.days.value / eq4_days:.3f} x: {why})"]  # fmt: skip
        notes.append(f"--tflops-per-gpu counts hardware FLOPs (recomputation as --recompute {recompute} says), as "
                     "Narayanan et al.'s 140 TFLOP/s per GPU do; their eq. (4) assumes full recomputation (8 = 2 x 4 passes)")  # fmt: skip
    else:
        assert req.mfu is not None and req.mfu_peak is not None  # _run_request: one of the three
        share, peak_value = req.mfu, req.mfu_peak
        x = Term("X", "X", "X", share * peak_value, "FLOP/s", f"model FLOP/s per GPU: MFU {share:.4g} x peak {peak_value:.4g} FLOP/s",
                 f"--mfu x {req.mfu_peak_source}")  # fmt: skip
        run = run_from_throughput(plan, counted.model_per_token, n, x, batch, seq)
    if run.energy is None:
        notes.append("energy: no board power (give --gpu with a preset that has one, or --gpu-power W)")
    return [*run.derivations(), *extra], [run_verdict(run, n), *verdicts], tuple(notes)
