"""`memory`: per-GPU memory of training, term by term (weights, gradients, optimizer states, activations,
buffers), stage by stage, with its tables and verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Mlp, Offload, Optimizer, Precision, Recompute, Schedule, ZeroStage
from parcalc.frozen import frozen
from parcalc.results.model import model_terms
from parcalc.results.parse import imbalance_flag

if TYPE_CHECKING:
    from parcalc.core.hardware import Gpu
    from parcalc.core.layout import Layout
    from parcalc.core.memory import MemoryBreakdown
    from parcalc.core.model import TransformerModel
    from parcalc.core.timing.framework import Framework
    from parcalc.core.training_setup import TrainingSetup
    from parcalc.derivation import Result, Table


@frozen
class MemoryRequest:
    """What `memory` is asked, parsed: the model, the layout, the training setup (micro-batch and
    count, precision, optimizer, recomputation, capacity and reserve in bytes), and what the
    Result says of how it was asked (the GPU, the flags given)."""

    model: TransformerModel
    layout: Layout
    setup: TrainingSetup
    gpu: Gpu | None = None  # --gpu's preset (its capacity is setup.capacity unless --capacity)
    per_stage: bool = False
    compile: bool = False  # --compile: a note only (memory counts eager activations)
    offload: tuple[Offload, ...] = ()  # as given, in order (setup holds the booleans)
    fp32_grads: bool = False  # --fp32-grads given (setup.fp32_grads may also come from --framework)
    dropout_given: bool = False
    moment_dtype: str | None = None  # --moment-dtype, lower case (setup.moment_bytes its bytes)
    moe_imbalance_given: bool = False
    notes: tuple[str, ...] = ()  # what parsing assumed: the 16-bit default on a GPU without bf16
    no_ops: tuple[str, ...] = ()  # flags taken as no-ops (parcalc.results.parse.stated_no_ops)


def request(model: str | None = None, layers: str | None = None, hidden: str | None = None,
            heads: str | None = None, kv_heads: str | None = None, ffn_hidden: str | None = None,
            mlp: Mlp | None = None, vocab: str | None = None, tied: bool | None = None,
            micro_batch: str | None = None, batch: str | None = None, seq_len: str | None = None,
            tp: str | None = None, pp: str | None = None, dp: str | None = None, gpus: str | None = None,
            cp: str | None = None, cp_comm: str | None = None, sequence_parallel: bool = False, ep: str | None = None,
            etp: str | None = None, zero: ZeroStage | None = None, shard_group: str | None = None,
            recompute: Recompute = Recompute.NONE, precision: Precision | None = None,
            optimizer: Optimizer = Optimizer.ADAMW, offload: list[Offload] | None = None, fp32_grads: bool = False,
            schedule: Schedule = Schedule.ONE_F_ONE_B, micro_batches: str | None = None, chunks: str | None = None,
            first_stage_layers: str | None = None, last_stage_layers: str | None = None,
            embedding_in_split: bool = False, loss_in_split: bool = False, pipeline_layout: str | None = None,
            flash_attention: bool = True,
            compile_: bool = False, dropout: bool | None = None, gpu: str | None = None,
            capacity: str | None = None, reserve: str | None = None, per_stage: bool = False,
            presets: list[Path] | None = None, recompute_layers: str | None = None, moment_dtype: str | None = None,
            recompute_mla_up_proj: bool = False, recompute_modules: str | None = None,
            moe_imbalance: str | None = None, framework: str | None = None, fp8_all_gather: bool = False,
            compile_loss: bool = False, expandable_segments: bool | None = None) -> MemoryRequest:  # fmt: skip
    """The request from `memory`'s flag texts; bad input raises InputError naming the flag."""
    from parcalc.core.layout import Layout
    from parcalc.core.training_setup import DEFAULT_RESERVE_BYTES, TrainingSetup
    from parcalc.errors import InputError
    from parcalc.results.model import ModelFlags, model_and_seq_len
    from parcalc.results.parse import (
        compile_loss_flag,
        cp_comm_note,
        cp_flags,
        expandable_segments_flag,
        expert_flags,
        fp8_all_gather_flag,
        framework_runs,
        framework_sequence_parallel,
        framework_zero_stage,
        pipeline_layout_chunks,
        preset_dirs,
        recompute_layers_flag,
        recompute_modules_flag,
        shard_group_flag,
        stage_flags,
        stated_no_ops,
    )
    from parcalc.units import Dimension, parse_count, parse_quantity

    dirs = preset_dirs(presets)
    shape, seq = model_and_seq_len(ModelFlags(model, layers, hidden, heads, kv_heads, ffn_hidden, mlp, vocab, tied), seq_len, dirs)
    c, cp_kind = cp_flags(cp, cp_comm)
    t, p, d = _degrees(tp, pp, dp, gpus, c)
    chosen, given_v = pipeline_layout_chunks(pipeline_layout, p, schedule, parse_count(chunks, "--chunks") if chunks is not None else None)
    v = given_v if given_v is not None else 1
    if chunks is not None and chosen is not Schedule.INTERLEAVED:
        raise InputError(f"--chunks: only the interleaved schedule splits a device's layers into chunks (got --schedule {chosen.value})")
    default_m = 2 * p if chosen is Schedule.INTERLEAVED and v > 1 else p
    m = parse_count(micro_batches, "--micro-batches") if micro_batches is not None else default_m
    b = parse_count(micro_batch, "--micro-batch") if micro_batch is not None else 1
    if batch is not None:
        m = micro_batches_of(parse_count(batch, "--batch"), b, d, m if micro_batches is not None else None)
    stated_zero = zero is not None
    sequence_parallel, zero, no_ops = stated_no_ops(sequence_parallel, t, zero or ZeroStage.ZERO0, d * c)
    cap, cap_source, device = None, "", None
    notes: tuple[str, ...] = ()
    if gpu is not None:
        from parcalc.presets import load_gpu

        device = load_gpu(gpu, dirs)
        cap, cap_source = device.memory_capacity.value, device.memory_capacity.source
        if precision is Precision.FP8 and "fp8" not in device.dtypes:
            raise InputError(f"--precision fp8: {device.name} has no FP8 rate in its datasheet (it lists {', '.join(device.dtypes)}); "
                             "FP8 Tensor Cores start with Hopper (H100, H200) and Ada")  # fmt: skip
        if precision is Precision.FP4:
            from parcalc.results.parse import fp4_gpu_check

            fp4_gpu_check(precision, device)
        if precision is None:  # the default must hold on the GPU given: no bf16 on a V100
            from parcalc.results.parse import sixteen_bit_default

            _, note = sixteen_bit_default(device)
            if note is not None:
                precision = Precision.MIXED_FP16
                notes = (f"{note}: mixed-fp16 (the same bytes as mixed-bf16; --precision chooses)",)
    if precision is None:
        precision = Precision.MIXED_BF16
    if capacity is not None:
        cap, cap_source = parse_quantity(capacity, Dimension.BYTES, "--capacity", require_unit=True), "given on the command line"
    reserve_bytes = parse_quantity(reserve, Dimension.BYTES, "--reserve", allow_zero=True, require_unit=True) if reserve is not None else DEFAULT_RESERVE_BYTES
    first, last = stage_flags(first_stage_layers, last_stage_layers)
    e, et = expert_flags(ep, etp, shape)
    sg = shard_group_flag(shard_group)
    profile = _profile(framework, dirs, Layout(tp=t, pp=p, cp=c, ep=e))  # the degrees (the ZeRO stage: check_hf_layout says more)
    if not stated_zero and profile is not None and d * c > 1 and profile.at(p).default_zero:  # the stack's own stage
        zero = ZeroStage(str(profile.at(p).default_zero))
        notes = (*notes, f"ZeRO-{zero.value}: the {profile.name} profile's stage without --zero ({profile.source('default_zero')})")
    if cp_comm is None and profile is not None:  # the stack's own exchange (torchtitan: all-gather)
        cp_kind = cp_flags(None, None, profile)[1]
        notes = (*notes, *(cp_comm_note(cp_comm, profile) if c > 1 else ()))
    if profile is not None and not profile.data_parallel_only:  # hf: check_hf_layout's own message
        framework_zero_stage(profile, int(zero.value), p)
    if profile is not None:
        framework_runs(profile, (recompute,), compile_)
    fp8_all_gather_flag(fp8_all_gather, precision, profile.step_memory if profile is not None else None)
    if framework_sequence_parallel(profile, None, t) and t > 1:  # torchtitan's apply_tp: sequence parallel always
        sequence_parallel = True
    compile_loss_flag(compile_loss, compile_, profile.step_memory if profile is not None else None)
    expandable_segments_flag(expandable_segments, profile.step_memory if profile is not None else None)
    par = Layout(tp=t, pp=p, dp=d, cp=c, ep=e, etp=et, zero=int(zero.value), shard_group=sg, sequence_parallel=sequence_parallel,
                 cp_comm=cp_kind, schedule=chosen, chunks=v, first_stage_layers=first, last_stage_layers=last,
                 embedding_in_split=embedding_in_split, loss_in_split=loss_in_split, pipeline_layout=pipeline_layout)  # fmt: skip
    if profile is not None and profile.pipeline_split == "torchtitan":  # its own split when none is given (core.pipeline_torchtitan)
        from parcalc.core.pipeline_torchtitan import split_layout

        par = split_layout(par, shape.layers, shape.mtp_layers)
    setup = TrainingSetup(
        micro_batch=b, seq_len=seq,
        precision=precision, optimizer=optimizer, recompute=recompute,
        flash_attention=flash_attention, dropout=dropout, fp32_grads=fp32_grads or bool(profile and profile.fp32_grads and precision.value.startswith("mixed")), reserve=reserve_bytes,
        capacity=cap,
        capacity_source=cap_source, offload_optimizer=Offload.OPTIMIZER in (offload or ()),
        offload_activations=Offload.ACTIVATIONS in (offload or ()), recompute_layers=recompute_layers_flag(recompute_layers),
        moment_bytes=_moment_bytes(moment_dtype), mla_up_proj=recompute_mla_up_proj, moe_imbalance=_imbalance(moe_imbalance, shape),
        recompute_modules=recompute_modules_flag(recompute_modules), micro_batches=m, compiled=compile_, float8_all_gather=fp8_all_gather,
        compiled_loss=compile_loss, expandable_segments=expandable_segments, **_profile_setup(profile, p, precision),
    )  # fmt: skip
    return MemoryRequest(shape, par, setup, device, per_stage=per_stage, compile=compile_, offload=tuple(offload or ()),
                         fp32_grads=fp32_grads, dropout_given=dropout is not None,
                         moment_dtype=moment_dtype.lower() if moment_dtype is not None else None,
                         moe_imbalance_given=moe_imbalance is not None, notes=notes, no_ops=no_ops)  # fmt: skip


def result(req: MemoryRequest, *, pictures: bool = False) -> Result:
    """The memory of the request's fullest stage, term by term, its tables and verdicts; no parsing.
    `pictures`: add the table the memory picture is drawn from (every stage's components)."""
    from parcalc.core.memory import memory_breakdown
    from parcalc.results.parse import ProgressBar

    par, setup = req.layout, req.setup
    # a framework's step walk of every stage and the allocator replayed over a run of each: seconds for a deep pipeline
    progress = ProgressBar("walking each pipeline stage's step")
    try:
        breakdown = memory_breakdown(req.model, par, setup, progress)
    finally:
        progress.close()
    settings = [("model", req.model.key), ("gpu", req.gpu.key if req.gpu is not None else "none"), ("precision", setup.precision.value),
                ("optimizer", setup.optimizer.value), ("zero", str(par.zero)), ("recompute", setup.recompute.value),
                ("schedule", par.schedule.value), ("sequence_parallel", str(par.sequence_parallel).lower()),
                ("flash_attention", str(setup.flash_attention).lower()), ("dropout", str(breakdown.setup.dropout).lower()),
                ("fp32_grads", str(req.fp32_grads).lower())]  # fmt: skip
    if setup.float8_all_gather:
        settings.append(("fp8_all_gather", "true"))
    if req.offload:
        settings.append(("offload", ",".join(dict.fromkeys(o.value for o in req.offload))))
    compile_note: tuple[str, ...] = ()
    if req.compile:
        from parcalc.core.activations import COMPILE_ACTIVATIONS
        from parcalc.core.memory_hf_compiled import HF_COMPILED_WALK, compiled_walk_gaps
        from parcalc.core.memory_torchtitan_compile import COMPILED_WALK

        settings.append(("compile", "true"))
        walked = breakdown.worst.peak is not None and setup.step_memory == "torchtitan-eager"
        compile_note = ("--compile: " + (COMPILED_WALK if walked else COMPILE_ACTIVATIONS),)
        if breakdown.worst.peak is not None and setup.step_memory == "hf-eager":
            gaps = compiled_walk_gaps(req.model, setup.precision, setup.recompute)
            compile_note = ("--compile: " + (HF_COMPILED_WALK if not gaps else
                                             f"the eager step walk stands: the compiled walk has not read {', '.join(gaps)}"),)
        if setup.compiled_loss:
            from parcalc.core.memory_compiled_loss import COMPILED_LOSS_WALK

            settings.append(("compile_loss", "true"))
            compile_note += ("--compile-loss: " + (COMPILED_LOSS_WALK if walked else "no step walk here: the textbook sum stands"),)
    if setup.expandable_segments is not None:
        settings.append(("expandable_segments", str(setup.expandable_segments).lower()))
    if par.cp > 1:
        settings += [("cp", str(par.cp)), ("cp_comm", par.cp_comm)]
    if setup.recompute_layers is not None:
        settings.append(("recompute_layers", str(setup.recompute_layers)))
    if par.shard_group is not None:
        settings.append(("shard_group", str(par.shard_group)))
    if req.moment_dtype is not None:
        settings.append(("moment_dtype", req.moment_dtype))
    if setup.mla_up_proj:
        settings.append(("recompute_mla_up_proj", "true"))
    if setup.recompute_modules is not None:
        settings.append(("recompute_modules", ",".join(setup.recompute_modules)))
    if req.moe_imbalance_given:
        settings.append(("moe_imbalance", f"{setup.moe_imbalance:g}"))
    result = memory_result(breakdown, req.per_stage, settings, dropout_given=req.dropout_given, notes=req.notes + compile_note + req.no_ops)
    if pictures:  # the picture's bars: every stage's components
        from dataclasses import replace

        result = replace(result, tables=result.tables + (stage_components_table(breakdown),))
    return result


def from_flags(*, pictures: bool = False, **flags: Any) -> Result:
    """`memory`'s Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.memory and the library (parcalc.results.run) both call."""
    return result(request(**flags), pictures=pictures)


def micro_batches_of(batch: int, micro_batch: int, dp: int, given: int | None) -> int:
    """--batch B as micro-batches per pipeline per iteration: m = B / (b x d) (Megatron-LM's
    get_num_microbatches: global_batch_size // (micro_batch_size * data_parallel_size),
    megatron/core/num_microbatches_calculator.py); it must divide, and agree with --micro-batches."""
    from parcalc.errors import InputError

    if batch % (micro_batch * dp):
        raise InputError(f"--batch: {batch:,} sequences do not split into micro-batches of b = {micro_batch} over d = {dp} replicas "
                         f"(B must be a multiple of b x d = {micro_batch * dp:,})")  # fmt: skip
    m = batch // (micro_batch * dp)
    if given is not None and given != m:
        raise InputError(f"--micro-batches: {given} is not B / (b x d) = {batch:,} / ({micro_batch} x {dp}) = {m}; give one of them")
    return m


def _degrees(tp: str | None, pp: str | None, dp: str | None, gpus: str | None, cp: int = 1) -> tuple[int, int, int]:
    """(t, p, d) from the degree flags; --gpus gives d, or must equal t x p x c x d (c: --cp)."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    t, p = (parse_count(v, flag) if v is not None else 1 for v, flag in ((tp, "--tp"), (pp, "--pp")))
    total = parse_count(gpus, "--gpus") if gpus is not None else None
    if dp is not None:
        d = parse_count(dp, "--dp")
        if total is not None and total != t * p * cp * d:
            if cp > 1:
                raise InputError(f"--gpus: {total} is not t x p x c x d = {t} x {p} x {cp} x {d} = {t * p * cp * d}")
            raise InputError(f"--gpus: {total} is not t x p x d = {t} x {p} x {d} = {t * p * d}")
        return t, p, d
    if total is None:
        return t, p, 1
    if total % (t * p * cp):
        if cp > 1:
            raise InputError(f"--gpus: {total} GPUs do not divide into tensor x pipeline x context groups of t x p x c = {t * p * cp}")
        raise InputError(f"--gpus: {total} GPUs do not divide into tensor x pipeline groups of t x p = {t * p}")
    return t, p, total // (t * p * cp)


def _profile(name: str | None, dirs: tuple, layout: Layout) -> Framework | None:
    """--framework's profile (None when not given), checked against the layout."""
    if name is None:
        return None
    from parcalc.errors import InputError
    from parcalc.presets import load_framework

    profile = load_framework(name, dirs)
    reason = profile.layout_reason(layout)
    if reason is not None:
        raise InputError(reason)
    return profile


def _profile_setup(profile: Framework | None, p: int, precision: Precision) -> dict[str, Any]:
    """What --framework sets in the TrainingSetup, as fit sets it (parcalc.core.fit.memory_of)."""
    if profile is None:
        return {}
    return {"grad_copies": bool(profile.at(p).accumulation_bytes(precision)),
            "step_memory": profile.step_memory}


MOMENT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}  # Megatron-LM --exp-avg-dtype choices but fp8 (scaled; not modelled)


def _moment_bytes(text: str | None) -> float | None:
    """--moment-dtype as bytes per state element (None: not given)."""
    from parcalc.errors import InputError

    if text is None:
        return None
    if text.lower() not in MOMENT_BYTES:
        raise InputError(f"--moment-dtype: one of {', '.join(MOMENT_BYTES)}, got {text!r}")
    return MOMENT_BYTES[text.lower()]


def _imbalance(text: str | None, shape: TransformerModel) -> float:
    """--moe-imbalance for the MoE exchange buffers (1.0 when not given); on a dense model an error."""
    from parcalc.errors import InputError

    if text is not None and shape.moe is None:
        raise InputError(f"--moe-imbalance: model {shape.key} has no experts (no moe: block); it applies to MoE models only")
    return imbalance_flag(text, shape.moe.experts if shape.moe is not None else None)


def memory_result(breakdown: MemoryBreakdown, per_stage: bool, settings: list[tuple[str, str]], dropout_given: bool = False,
                  notes: tuple[str, ...] = ()) -> Result:  # fmt: skip
    """The fullest stage's derivations, its component table, one layer's saved tensors, verdicts."""
    from parcalc.derivation import Column, Result, Table, Term
    from parcalc.units import GIB

    shape, par, setup, worst = breakdown.model, breakdown.parallelism, breakdown.setup, breakdown.worst
    inputs = model_terms(shape) + [
        Term("b", "b", "b", setup.micro_batch, "", "sequences per micro-batch"),
        Term("s", "s", "s", setup.seq_len, "", "sequence length"),
        Term("t", "t", "t", par.tp, "", "tensor-parallel degree"),
        Term("p", "p", "p", par.pp, "", "pipeline stages"),
        Term("d", "d", "d", par.dp, "", "data-parallel degree"),
        Term("m", "m", "m", setup.micro_batches, "", "micro-batches per iteration"),
    ]
    if par.cp > 1:
        inputs.append(Term("c", "c", "c", par.cp, "", f"context-parallel degree ({par.cp_comm})"))
    if par.shard_group is not None:
        inputs.append(Term("S", "S", "S", par.shard_group, "", "shard group: ZeRO shards over S data-parallel ranks (hybrid sharding)"))
    if par.chunks > 1:
        inputs.append(Term("v", "v", "v", par.chunks, "", "model chunks per device"))
    if shape.moe is not None:
        from parcalc.core.expert_parallel import expert_layout

        layout = expert_layout(shape, par)
        inputs += [Term("e", "e", "e", layout.ep, "", "expert-parallel degree (routed experts split over e ranks)"),
                   Term("etp", "t_e", "t_e", layout.etp, "", "expert tensor-parallel degree (each expert split t_e ways)"),
                   Term("d_e", "d_e", "d_e", layout.edp, "", "expert data-parallel degree: t x cp x d / (t_e x e)")]  # fmt: skip
    layer = breakdown.layer
    derivations = [worst.parameters, worst.states.weights, worst.states.gradients, worst.states.optimizer]
    derivations += [x for x in (worst.fp8_weights, worst.gathered) if x is not None]
    if shape.mamba is None:  # a Mamba-2 hybrid has no layer of attention and MLP: its blocks are in the stage's activations
        derivations += [layer.per_layer] + ([layer.korthikanti] if layer.korthikanti is not None else [])
    derivations += [worst.layers, worst.in_flight, worst.activations]
    derivations += [x for x in (worst.embedding, worst.output, worst.recompute, worst.context, worst.dispatch) if x is not None]
    derivations += [worst.states_total, worst.activations_total, worst.reserve]
    derivations += [x for x in (worst.textbook, worst.peak, worst.peak_reserved) if x is not None]  # --framework hf: the step's peak
    derivations.append(worst.total)
    headroom = breakdown.headroom()
    if headroom is not None:
        derivations.append(headroom)
    if worst.host is not None:
        from parcalc.core.offload import pcie_traffic

        derivations.append(worst.host)
        derivations += pcie_traffic(worst.parameters.value, breakdown.per_parameter, par, layer.per_layer.value, int(worst.layers.value),
                                    setup.micro_batches, setup.offload_optimizer, setup.offload_activations)  # fmt: skip
    components = Table(
        "components",
        f"Memory of one GPU of stage {worst.stage + 1} of {par.pp} (the fullest)",
        (Column("component", "component"), Column("bytes", "bytes", "B", memory=True), Column("share", "share", "fraction")),
        tuple((name, value, value / worst.total.value) for name, value in worst.components() if value)
        + (("total", worst.total.value, 1.0),),
    )
    tensors = Table(
        "layer_activations",
        "What one layer keeps for backward (one micro-batch, one GPU)",
        (Column("tensor", "tensor"), Column("elements", "elements"), Column("bytes_per_element", "bytes/element", "B", memory=True),
         Column("split", "split over"), Column("bytes", "bytes", "B", memory=True), Column("source", "source")),
        layer.rows(),
    )  # fmt: skip
    if shape.mamba is not None:
        from parcalc.core.mamba_memory import block_tensor_rows

        tensors = Table("layer_activations", "What each block keeps for backward (one micro-batch, one GPU)", tensors.columns,
                        block_tensor_rows(shape, layer.config))  # fmt: skip
    elif shape.linear_attention is not None:  # the attention layer's tensors, then what a gated-DeltaNet mixer keeps instead
        from parcalc.core.linear_attention_memory import layer_rows

        tensors = Table("layer_activations", "What one layer keeps for backward (one micro-batch, one GPU); a gated-DeltaNet layer "
                        "keeps its mixer's tensors in place of attention's (from qkv_input to proj_input)", tensors.columns,
                        layer.rows() + layer_rows(shape, layer.config))  # fmt: skip
    if worst.peak is not None:  # --framework hf: the step's peak and what is live then; the textbook sum beside it
        derivations = [worst.parameters, *worst.memory_derivations(), *(x for x in (worst.textbook, worst.total, headroom) if x is not None)]
        if par.pp > 1:  # the walked stage's layers and how the split gives them (torchtitan's, a layout's, Megatron-LM's)
            derivations.insert(0, worst.layers)
        tensors = Table("live_at_peak", f"What is live at the peak: {worst.peak.label.split(': ', 1)[-1][:-1]}",
                        (Column("tensor", "tensor"), Column("kind", "kind"), Column("bytes", "bytes", "B", memory=True)), worst.peak_live)  # fmt: skip
    tables: list[Table] = [components, tensors]
    if per_stage:
        tables.append(_stage_table(breakdown))
    verdicts = [_fit_verdict(breakdown, GIB)]
    if layer.korthikanti is not None and shape.mamba is None:
        verdicts.append(_korthikanti_verdict(layer.per_layer.value, layer.korthikanti.value))
    title = (f"Memory per GPU: {shape.name}, b = {setup.micro_batch}, s = {setup.seq_len}, "
             f"{par.tp} TP x {par.pp} PP" + (f" x {par.cp} CP" if par.cp > 1 else "") + f" x {par.dp} DP"
             + (f", EP {par.ep}" if par.ep > 1 else "") + (f", ETP {par.etp}" if par.etp is not None and par.etp != par.tp else "")
             + (f", ZeRO-{par.zero}" if par.zero else "")
             + (f", shard group {par.shard_group}" if par.shard_group is not None and par.shard_group < par.dp * par.cp else ""))  # fmt: skip
    assumptions = (
        *notes,
        *state_bytes_assumptions(breakdown),
        *((f"offloaded to the host: {', '.join(worst.offloaded) or 'activations'}; not on the GPU's total",) if worst.host else ()),
        "GB = 1e9 bytes, GiB = 2^30 bytes; GPU capacities are binary (80 GiB for an '80GB' HBM part)",
        _stages_assumption(breakdown),
        dropout_assumption(shape, bool(setup.dropout), dropout_given),
        *context_assumptions(par),
        *shard_group_assumptions(breakdown),
        *step_walk_assumptions(breakdown),
    )  # fmt: skip
    return Result(
        command="memory",
        title=title,
        inputs=tuple(inputs),
        derivations=tuple(derivations),
        tables=tuple(tables),
        verdicts=tuple(verdicts),
        assumptions=assumptions,
        settings=tuple(settings),
        fits=None if setup.capacity is None else worst.total.value <= setup.capacity,  # as _fit_verdict says it
        main_table="stages" if per_stage else "",  # --per-stage --format csv: the stages, as asked
        lead=1,  # the fit verdict (or the total without a capacity) first, before ~100 lines of derivations (issue 28)
        # the brief terminal form (parcalc.render.brief): the terms of the total, the components and stages
        # tables (not the per-tensor activations), the assumptions that change bytes per parameter or activations
        key_terms=BRIEF_TERMS, brief_tables=("components", "stages"), key_assumptions=BRIEF_ASSUMPTIONS,
    )


# The terms the total is the sum of, the total and the headroom; the per-layer and per-stage steps are --detail full's.
BRIEF_TERMS = ("weights", "gradients", "optimizer_states", "stage_activations", "model_states", "activations", "reserve", "total", "headroom")
# Bytes per parameter (precision, optimizer, gradients), attention's kernel, dropout, offload, ZeRO's shard group,
# context parallelism and the step walk of the framework: each changes the total; unit conventions do not.
BRIEF_ASSUMPTIONS = ("bytes per parameter", "16-bit gradients", "gradients in", "fp32 gradients", "attention:", "no dropout", "dropout",
                     "offloaded", "hybrid sharding", "context parallel", "memory:", "recomput")


def state_bytes_assumptions(breakdown: MemoryBreakdown) -> tuple[str, str, str]:
    """Bytes per parameter of weights, gradients and optimizer states, the optimizer, and the gradients' convention: the
    textbook's (parcalc.core.model_states.state_bytes), or, where the step is walked (hf, fsdp2, torchtitan), the walk's
    own (parcalc.core.memory_step_peak.walked_state_bytes: the parameters in fp32 under mixed precision, no master copy)."""
    from parcalc.core.model_states import gradient_convention

    setup, per = breakdown.setup, breakdown.per_parameter
    optimizer = f"optimizer {setup.optimizer.value}: {per.state_text} ({per.state_source})"
    if breakdown.worst.peak is None:  # the textbook sum
        return (f"bytes per parameter: weights {per.weight:g}, gradients {per.gradient:g}, optimizer {per.optimizer:g} "
                f"(master {per.master:g} + {per.states:g} state(s) x {per.per_state:g})", optimizer, gradient_convention(per))
    from parcalc.core.memory_step_peak import walked_state_bytes

    par = breakdown.parallelism
    walked = walked_state_bytes(setup.step_memory, setup.precision, setup.optimizer, par.dp)
    dtype = "bf16" if walked.weight == 2 else "fp32"
    profile = setup.step_memory.removesuffix("-eager")
    fsdp = setup.step_memory != "hf-eager"
    ddp = not fsdp and par.dp > 1
    sharded = f", each sharded over the {par.dp * par.cp} fully_shard ranks" if fsdp and par.dp * par.cp > 1 else ""
    grads = (f"gradients {walked.gradient:g}" + (f" (the .grad {walked.weight:g} + DDP's bucket {walked.weight:g})" if ddp else ""))
    line = (f"bytes per parameter: weights {walked.weight:g}, {grads}, optimizer {walked.optimizer:g} ({walked.states:g} state(s) x "
            f"{walked.per_state:g}; no master copy: the optimizer updates the {dtype} parameters in place), as the {profile} "
            f"step walk holds them{sharded}")  # fmt: skip
    cast = ("FSDP2's MixedPrecisionPolicy casts the shards to bf16 at each all-gather (the unsharded copies are transients)" if fsdp
            else "torch.autocast computes in bf16 over them (its weight copies are transients)")
    convention = (f"gradients in the parameters' dtype, {dtype} ({walked.weight:g} bytes)" +
                  (f": mixed precision keeps fp32 parameters and {cast}" if dtype == "fp32" and setup.precision is not Precision.FP32 else "")
                  + ("; the reduce-scatter's output is cast to the shards' dtype" if fsdp else "")
                  + f"; {walked.total:g} per parameter")  # fmt: skip
    return line, optimizer, convention


def step_walk_assumptions(breakdown: MemoryBreakdown) -> tuple[str, ...]:
    """Why an fsdp2 / torchtitan memory is the textbook sum: what of the layout the step walk does not follow."""
    from parcalc.core.memory_step_peak import fsdp_walk_gaps

    setup = breakdown.setup
    if setup.step_memory not in ("fsdp2-eager", "torchtitan-eager") or breakdown.worst.peak is not None:
        return ()
    gaps = fsdp_walk_gaps(breakdown.model, breakdown.parallelism, setup, pipeline=True)
    return (f"memory: the textbook sum; the {setup.step_memory.removesuffix('-eager')} profile's step walk (parcalc.core.memory_fsdp: "
            f"fully_shard over all dp ranks of a Llama-shaped model, its MLP dense or routed experts) does not cover {'; '.join(gaps)}",)


def shard_group_assumptions(breakdown: MemoryBreakdown) -> tuple[str, ...]:
    """Hybrid sharding, in words (none without --shard-group)."""
    par = breakdown.parallelism
    if par.shard_group is None:
        return ()
    n = par.dp * par.cp
    text = (f"hybrid sharding: ZeRO-{par.zero} shards over a group of S = {par.shard_group} of the {n} data-parallel ranks "
            f"and replicates over {n // par.shard_group} such groups (FSDP2 HSDP, Megatron-LM --num-distributed-optimizer-instances "
            f"{n // par.shard_group}): the ZeRO divisor is S, not dp x cp")  # fmt: skip
    if breakdown.model.moe is not None:
        text += "; the routed experts' states stay sharded over the expert data-parallel ranks, as without a shard group"
    return (text,)


def context_assumptions(par: object) -> tuple[str, ...]:
    """What context parallelism does to memory, in words (none without it)."""
    cp = getattr(par, "cp", 1)
    if cp <= 1:
        return ()
    from parcalc.core.context import CpComm, cp_comm_of

    kind = cp_comm_of(getattr(par, "cp_comm", "p2p"))
    held = {CpComm.P2P: "p2p keeps the received K/V blocks of one layer (max(cp, 4) blocks) while it runs",
            CpComm.ALL_GATHER: "all-gather holds the gathered K/V and full-length dK/dV (2 cp blocks) in one layer's backward",
            CpComm.A2A: "a2a holds the all-to-all output buffers of Q, K, V of one layer"}[kind]  # fmt: skip
    return (f"context parallelism over {cp} ranks ({kind.label}): activations, embeddings' and logits' memory divide by cp "
            f"(s/cp tokens per GPU, the sequence in 2cp chunks for causal balancing); {held}; only the local shards are saved "
            "for backward (Transformer Engine context_parallel.py)",
            "ZeRO shards and gradients are reduced over the data-parallel x context-parallel ranks (Megatron-LM's dp-cp group), "
            "which hold the same weights")  # fmt: skip


def _stage_table(breakdown: MemoryBreakdown) -> Table:
    from parcalc.derivation import Column, Table

    cap = breakdown.setup.capacity
    columns = (
        Column("stage", "stage"), Column("layers", "layers"), Column("parameters", "parameters"), Column("weights", "weights", "B", memory=True),
        Column("gradients", "gradients", "B", memory=True), Column("optimizer", "optimizer", "B", memory=True), Column("in_flight", "in flight"),
        Column("activations", "activations", "B", memory=True), Column("embeddings", "embeddings", "B", memory=True), Column("logits", "logits", "B", memory=True),
        Column("other", "gathered + recompute + reserve", "B", memory=True), Column("total", "total", "B", memory=True), Column("headroom", "headroom", "B", memory=True),
    )  # fmt: skip
    rows = []
    for s in breakdown.stages:
        other = s.reserve.value + (s.gathered.value if s.gathered else 0.0) + (s.recompute.value if s.recompute else 0.0)
        rows.append((s.stage + 1, int(s.layers.value), s.parameters.value, s.states.weights.value, s.states.gradients.value, s.states.optimizer.value,
                     s.in_flight.value, s.activations.value, s.embedding.value if s.embedding else 0.0,
                     s.output.value if s.output else 0.0, other, s.total.value,
                     None if cap is None else cap - s.total.value))  # fmt: skip
    return Table("stages", "Every pipeline stage (one GPU each)", columns, tuple(rows))


def stage_components_table(breakdown: MemoryBreakdown) -> Table:
    """One GPU of every stage, component by component (StageMemory.components), and its total:
    what `memory -o mem.svg` stacks into one bar per stage."""
    from parcalc.derivation import Column, Table

    # every component any stage has, in the order they first appear: a walked step's stages differ in their parts (the
    # first holds the embedding's, the last the logits'), and a stage without one holds 0 B of it
    components = [dict(s.components()) for s in breakdown.stages]
    names = list(dict.fromkeys(name for s in breakdown.stages for name, _ in s.components()))
    columns = (Column("stage", "stage"), *(Column(f"c{i}", name, "B", memory=True) for i, name in enumerate(names)), Column("total", "total", "B", memory=True))
    rows = tuple((s.stage + 1, *(parts.get(name, 0.0) for name in names), s.total.value) for s, parts in zip(breakdown.stages, components, strict=True))
    return Table("stage_components", "Memory of one GPU of each stage, by component", columns, rows)


def _stages_assumption(breakdown: MemoryBreakdown) -> str:
    from parcalc.core.memory import stage_layers
    from parcalc.core.stages import split_text

    par = breakdown.parallelism
    ends = "the first also the embeddings, the last the final norm and LM head"
    split = split_text(stage_layers(breakdown.model, par))
    if par.embedding_in_split or par.loss_in_split:
        both = par.embedding_in_split and par.loss_in_split
        slots = "the embedding and the loss each take" if both else f"the {'embedding' if par.embedding_in_split else 'loss'} takes"
        return (f"pipeline stages hold {split} layers: {slots} one layer slot of the split (Megatron-LM's "
                f"--account-for-embedding/loss-in-pipeline-split); {ends}")
    if par.first_stage_layers is None and par.last_stage_layers is None:
        return f"pipeline stages hold L/p layers each; {ends}"
    return f"pipeline stages hold {split} layers (--first-stage-layers / --last-stage-layers, Megatron-LM's uneven split); {ends}"


def _fit_verdict(breakdown: MemoryBreakdown, gib: float) -> str:
    worst = breakdown.worst
    total = worst.total.value
    cap = breakdown.setup.capacity
    if cap is None:
        return f"the fullest GPU (stage {worst.stage + 1}) needs {total / gib:.2f} GiB ({total / 1e9:.2f} GB); give --gpu or --capacity for a verdict"
    if total <= cap:
        return f"fits: the fullest GPU (stage {worst.stage + 1}) needs {total / gib:.2f} GiB of {cap / gib:.2f} GiB, {(cap - total) / gib:.2f} GiB headroom"
    return f"does not fit: the fullest GPU (stage {worst.stage + 1}) needs {total / gib:.2f} GiB of {cap / gib:.2f} GiB, {(total - cap) / gib:.2f} GiB too much"


def _korthikanti_verdict(counted: float, closed: float) -> str:
    if abs(counted - closed) <= 1e-9 * max(counted, closed):
        return "the tensor-by-tensor count equals Korthikanti et al.'s closed form for this layer"
    return (f"the tensor-by-tensor count ({counted:,.0f} B) differs from Korthikanti et al.'s closed form ({closed:,.0f} B) "
            f"by {(counted - closed) / closed * 100:+.2f} %: their form assumes a 4h GELU MLP, MHA and 16-bit activations")  # fmt: skip


def dropout_assumption(shape: TransformerModel, dropout: bool, given: bool) -> str:
    """Whether dropout masks are counted, and who decided: the flag, or the model (with its source)."""
    counted = "dropout masks counted (1 byte per element)" if dropout else "no dropout masks"
    if given:
        return f"{counted}: --{'' if dropout else 'no-'}dropout"
    if dropout:
        why = f"{shape.dropout_source}; " if shape.dropout_source else "the GPT default; "
        return f"{counted}: {shape.name} trains with dropout ({why}--no-dropout leaves them out)"
    why = shape.dropout_source or shape.source
    return f"{counted}: {shape.name} trains without dropout ({why}; --dropout counts them)"
