"""A stage's memory as the step's peak in place of the textbook sum, where a walk of the framework's own code follows the
layout: the hf profile (parcalc.core.memory_timeline) and the fsdp2 / torchtitan profiles under fully_shard
(parcalc.core.memory_fsdp, with torchtitan's pipeline stages); the textbook sum stays beside, named as such."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.core.choices import Optimizer, Precision
from parcalc.core.layout import Layout
from parcalc.core.model import TransformerModel
from parcalc.core.stage_memory import StageMemory
from parcalc.core.training_setup import TrainingSetup, replayed_reserve
from parcalc.derivation import Derivation
from parcalc.errors import InputError

if TYPE_CHECKING:  # parcalc.core.memory builds the stages and imports this module
    from parcalc.core.memory_fsdp import FsdpStep
    from parcalc.core.memory_walk import StepPeak
    from parcalc.core.model_states import StateBytes


def check_hf_layout(par: Layout, setup: TrainingSetup) -> None:
    """What the hf profile's step walk covers: one data-parallel replica per GPU (DDP), no offload."""
    other = [f"{name} = {getattr(par, name)}" for name in ("tp", "pp", "cp", "ep") if getattr(par, name) > 1]
    if other:
        raise InputError(f"--framework hf: the Hugging Face Trainer (DDP) runs data parallelism only, not {', '.join(other)}")
    if par.zero:
        raise InputError(f"--framework hf --zero {par.zero}: plain DDP keeps whole replicas (ZeRO is the deepspeed and fsdp2 profiles)")
    if setup.offload_optimizer or setup.offload_activations:
        raise InputError("--framework hf --offload: the step walk has no offload (the Trainer offloads through DeepSpeed: --framework deepspeed)")
    # Megatron-LM's options, which the walk would otherwise accept and not count (found by the session's review)
    if setup.moment_bytes is not None:
        raise InputError("--framework hf --moment-dtype: torch.optim keeps AdamW's states in the parameter's dtype; it has no such option")
    if setup.dropout:
        raise InputError("--framework hf --dropout: the walk follows LlamaForCausalLM, which trains without dropout (attention_dropout 0.0)")
    if not setup.flash_attention:
        raise InputError("--framework hf --no-flash-attention: the walk follows transformers' default attention, SDPA, which keeps no "
                         "s x s scores (attn_implementation 'eager' is not walked)")


def with_step_peak(model: TransformerModel, par: Layout, setup: TrainingSetup, stage: StageMemory, split: tuple[int, ...]) -> StageMemory:
    """A textbook StageMemory with its total replaced by the step's peak as the allocator reserves it, plus the reserve
    (here, not in parcalc.core.memory_timeline: the walk knows nothing of this module's types)."""
    from parcalc.core.memory_timeline import HfStep, check_hf_model, hf_step_peak
    from parcalc.core.step_peak_derivation import peak_derivation, reserved_derivation

    if setup.step_memory != "hf-eager":
        return _with_fsdp_peak(model, par, setup, stage, split)
    check_hf_model(model)  # what the walk follows first, then the options it counts
    check_hf_layout(par, setup)
    step = HfStep(setup.micro_batch, setup.seq_len, setup.precision, setup.optimizer, setup.recompute, ddp_buckets=par.dp > 1,
                  compiled=setup.compiled)
    peak = hf_step_peak(model, step)
    allocated = peak_derivation(peak, model, step)
    reserved = reserved_derivation(peak)
    return _at_peak(stage, peak, allocated, reserved, "parcalc.core.memory_timeline (hf profile)", replayed_reserve(setup.reserve))


def _with_fsdp_peak(model: TransformerModel, par: Layout, setup: TrainingSetup, stage: StageMemory, split: tuple[int, ...]) -> StageMemory:
    """The fsdp2 and torchtitan profiles: the step's peak under fully_shard (parcalc.core.memory_fsdp) where its walk follows
    the layout (FSDP over all dp ranks of a dense Llama-shaped model), else the textbook sum as it is."""
    from parcalc.core.memory_fsdp import fsdp_step_floor, fsdp_walked
    from parcalc.core.step_peak_derivation import (
        fsdp_peak_derivation,
        replay_floor_derivation,
        replayed_reserved_derivation,
        reserved_derivation,
    )

    if fsdp_walk_gaps(model, par, setup, pipeline=True):
        return stage
    step = fsdp_stage_step(par, setup, stage.stage, split)
    source = "parcalc.core.memory_fsdp (fully_shard), the caching allocator replayed over a run of the step"
    if setup.allocator_replayed:
        peak, replayed, _ = fsdp_walked(model, step)
        in_total = replayed_reserved_derivation(replayed)
    else:  # the floor of the replay: a screen (TrainingSetup.allocator_replayed)
        peak, floor = fsdp_step_floor(model, step)
        in_total, source = replay_floor_derivation(floor, step.expandable_segments), "parcalc.core.memory_fsdp (fully_shard), the floor of the allocator's replay"
    allocated = fsdp_peak_derivation(peak, model, step, setup.step_memory.removesuffix("-eager"))
    return _at_peak(stage, peak, allocated, reserved_derivation(peak), source, replayed_reserve(setup.reserve), in_total)


def fsdp_stage_step(par: Layout, setup: TrainingSetup, stage: int, split: tuple[int, ...]) -> FsdpStep:
    """The FSDP2 step the walk follows on stage `stage` of the layout (its own layers of `split` under a pipeline); fit's
    search asks the same (parcalc.core.search_step_peaks)."""
    from parcalc.core.memory_fsdp import CP_ROTATES, fsdp_step_of

    step = fsdp_step_of(setup.step_memory, setup.micro_batch, setup.seq_len, par.dp * par.cp, setup.precision, setup.optimizer,
                        setup.recompute, par.tp, setup.compiled, setup.float8_all_gather, par.cp,
                        CP_ROTATES.get(par.cp_comm, "allgather"), setup.compiled_loss, setup.expandable_segments)  # fmt: skip
    if par.pp > 1:  # this stage of the pipeline (parcalc.core.memory_pipeline_stage), its own layers
        from dataclasses import replace as replaced

        from parcalc.core.choices import Schedule

        if par.schedule.v_shape:  # the rank's two stages in a V (parcalc.core.memory_pipeline_zero_bubble, _dualpipe)
            from parcalc.core.memory_pipeline_zero_bubble import v_rank_chunk_layers

            pair = v_rank_chunk_layers(par, sum(split), stage)
            return replaced(step, pp=par.pp, pp_stage=stage, pp_chunks=pair, pp_zero_bubble=True,
                            pp_dualpipev=par.schedule is Schedule.DUALPIPEV, micro_batches=setup.micro_batches)  # fmt: skip
        if par.schedule is Schedule.INTERLEAVED:  # the rank's virtual stages (parcalc.core.memory_pipeline_interleaved)
            from parcalc.core.memory_pipeline_interleaved import rank_chunk_layers

            chunks = rank_chunk_layers(par, sum(split), stage)
            return replaced(step, pp=par.pp, pp_stage=stage, pp_chunks=chunks, micro_batches=setup.micro_batches)
        first = sum(split[:stage])
        step = replaced(step, pp=par.pp, pp_stage=stage, stage_layers=(first, first + split[stage]), micro_batches=setup.micro_batches)
    return step


def fsdp_walk_gaps(model: TransformerModel, par: Layout, setup: TrainingSetup, pipeline: bool = False) -> list[str]:
    """What of this layout and setup the FSDP2 step walk does not follow (none: it gives the memory)."""
    from parcalc.core.memory_fsdp import PROFILES, walk_gaps

    other = tuple(what for what, on in (("--offload", setup.offload_optimizer or setup.offload_activations),
                                        ("--recompute-layers", setup.recompute_layers is not None),
                                        ("--moment-dtype", setup.moment_bytes is not None), ("--dropout", bool(setup.dropout))) if on)
    other += float8_all_gather_gaps(par, setup.float8_all_gather, setup.compiled)
    code = PROFILES[setup.step_memory].model_code if setup.step_memory in PROFILES else "transformers"
    return walk_gaps(model, par, setup.precision, setup.optimizer, setup.recompute, other, code, pipeline, setup.compiled)


def float8_all_gather_gaps(par: Layout, float8_all_gather: bool, compiled: bool) -> tuple[str, ...]:
    """What of --fp8-all-gather the FSDP2 step walk does not follow (memory, fit and fit's search ask the same). It follows
    torchao's FP8 all-gather under FSDP, under tp with torchao's Float8 TP styles (the TP-local weight's dp shard cast and
    gathered in FP8, a DTensor over a Float8TrainingTensor that no Float8Linear casts again), in pipeline stages and with
    eager cp x tp (tests/ground_truth/torchao_float8_all_gather_tp_pp.py), compiled under FSDP alone and in pipeline stages
    without tp (memory_float8_compile); not the compiled TP block or the compiled ring, whose Inductor code is read with the
    weights cast in the block."""
    if not float8_all_gather:
        return ()
    return tuple(what for what, on in (("--fp8-all-gather with tp and --compile (the compiled TP block's code is read with the "
                                        "weights cast in the block)", par.tp > 1 and compiled),
                                       # memory_torchtitan_cp_compile reads the compiled ring with the weights cast in the block
                                       ("--fp8-all-gather with cp and --compile", par.cp > 1 and compiled)) if on)  # fmt: skip


def _at_peak(stage: StageMemory, peak: StepPeak, allocated: Derivation, reserved: Derivation, source: str, reserve: Derivation,
             replayed: Derivation | None = None) -> StageMemory:  # fmt: skip
    """A textbook StageMemory with its total replaced by the step's peak as reserved plus `reserve` (the replayed allocator's:
    training_setup.replayed_reserve), the textbook kept beside. `replayed`: the FSDP2 walks' reserved figure over a run (the
    allocator replayed per stream, or its floor), which the total takes, `reserved` (each stream's own peak) shown beside."""
    from dataclasses import replace as replaced

    textbook = replaced(stage.total, key="textbook_total", label="Textbook sum (states + Korthikanti's activations + reserve), "
                        "for comparison", symbol="M_textbook", latex_symbol=r"M_{\mathrm{textbook}}")
    held = replayed if replayed is not None else reserved
    label = ("Total on one GPU: what the caching allocator reserves over a run of the step, plus the reserve" if replayed is not None
             else "Total on one GPU: the step's peak as reserved, plus the reserve")
    total = Derivation("total", label, "M_total", r"M_{\mathrm{total}}", "$M_res + $R", "$M_res + $R",
                       (held.as_term("M_res"), reserve.as_term("R")), held.value + reserve.value, "B", source)
    return replaced(stage, reserve=reserve, total=total, peak=allocated, peak_reserved=reserved, peak_replayed=replayed, textbook=textbook,
                    peak_parts=tuple((kind, value) for kind, value in peak.parts if value),
                    peak_live=tuple((t.what, t.kind, t.bytes) for t in peak.live))


def walked_state_bytes(step_memory: str, precision: Precision, optimizer: Optimizer, dp: int = 1) -> StateBytes:
    """Bytes per parameter of each model state as the step walks hold them, where they differ from the textbook's 16-bit
    weights beside an fp32 master (parcalc.core.model_states.state_bytes): the parameters in their own dtype, fp32 under
    mixed precision (memory_walk.parameter_bytes), which the optimizer updates in place (no master copy), their gradients
    and torch.optim's states in that dtype. The hf walk under DDP (dp > 1) holds each gradient twice: the .grad and DDP's
    bucket (gradient_as_bucket_view=False, memory_timeline's 'ddp_buckets'). Under fully_shard each is 1/N a shard
    (memory_fsdp: the parameter shards, the reduce-scatter output cast to the shards' dtype, AdamW's zeros_like of the
    shards); the 16-bit unsharded parameters and gradients of the units being run are transients, not per parameter."""
    from parcalc.core.memory_walk import parameter_bytes
    from parcalc.core.model_states import StateBytes
    from parcalc.core.optimizers import optimizer_state

    w = parameter_bytes(precision)
    opt = optimizer_state(optimizer)
    gradient = 2 * w if step_memory == "hf-eager" and dp > 1 else w
    return StateBytes(w, gradient, 0.0, w, opt.states, opt.text, opt.source)
