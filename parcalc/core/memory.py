"""Per-GPU memory of training: model states under ZeRO, activations per pipeline stage, reserve.

Model states follow Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models" (SC20), sec. 3.1 and 5: mixed-precision Adam keeps 2 bytes of fp16
parameters, 2 of fp16 gradients and K = 12 of optimizer states (fp32 parameters, momentum,
variance) per parameter, (2 + 2 + K) Psi in all; stage 1 (P_os) shards the optimizer states
over the N_d data-parallel ranks, stage 2 (P_os+g) the gradients too, stage 3 (P_os+g+p) the
parameters too. Their Figure 1: Psi = 7.5 B, N_d = 64, K = 12 gives 120, 31.4, 16.6 and 1.9 GB
(GB = 1e9 bytes).

Other precisions and optimizers change the bytes per parameter (`state_bytes`):
- fp32: 4 + 4, states in fp32, no master copy;
- mixed-fp16 / mixed-bf16: 16-bit weights and gradients, an fp32 master copy with the states
  (ZeRO's K = 12 for Adam); Megatron-LM keeps the gradients in fp32 (`main_grad`, 18 bytes per
  parameter: megatron/training/theoretical_memory_usage.py), `fp32_grads=True`;
- bf16: weights, gradients and states all bf16, no master copy (torch.optim.AdamW creates its
  states with torch.zeros_like(param), in the parameter's dtype: torch/optim/adam.py,
  Adam._init_group, which AdamW inherits).
Adam/AdamW keep two states per parameter (exp_avg, exp_avg_sq), SGD with momentum one, plain SGD
none (Kingma & Ba 2015; torch/optim/sgd.py keeps a momentum_buffer only when momentum != 0).

Activations come from parcalc.core.activations (Korthikanti et al. 2022) times the layers of a
stage (L/p, or Megatron-LM's uneven first and last stages: parcalc.core.stages) and the micro-batches the pipeline schedule keeps in flight on it
(parcalc.core.pipeline.in_flight_micro_batches; Korthikanti's interleaving factor is its value
for the first stage divided by p).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from parcalc.core.activations import (
    LayerActivations,
    Recompute,
    check_count,
    check_tensor_parallel,
    embedding_activations,
    layer_activations,
    mtp_activations,
    output_activations,
    recompute_working_set,
)
from parcalc.core.choices import Precision  # re-exported
from parcalc.core.context import check_context_parallel, context_working_set
from parcalc.core.dtypes import NVFP4_COPY_BYTES
from parcalc.core.expert_parallel import (
    FOLDING,
    ROUTER_SOURCE,
    expert_layout,
    expert_params_per_rank,
    moe_dense_params_per_rank,
    moe_dispatch_working_set,
    moe_layers_on,
    stage_ranges,
)
from parcalc.core.layer_params import layer_params_per_rank  # here too: callers import it from memory
from parcalc.core.layout import Layout
from parcalc.core.model import Norm, Position, TransformerModel
from parcalc.core.model_states import (
    ZERO,
    ZERO_STAGES,
    StateBytes,
    expert_model_states,
    model_states,
    state_bytes,
)
from parcalc.core.pipeline import Schedule, check_shape, in_flight_micro_batches
from parcalc.core.pipeline_sim import ZBV_WEIGHT_MEMORY
from parcalc.core.stage_memory import StageMemory
from parcalc.core.stages import stage_layers_derivation
from parcalc.core.training_setup import (
    TrainingSetup,
    reserve_derivation,
)
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

if TYPE_CHECKING:
    pass

PIPELINED_FSDP = ("pytorch/torchtitan at 9dec370 parallelize_llama.py apply_fsdp (reshard_after_forward=False when pp_enabled); "
                  "pytorch/pytorch v2.13.0 torch/distributed/pipelining/stage.py:844-847 backward_maybe_with_nosync, 1164-1191 "
                  "perform_reduce_grad; torch/distributed/fsdp/_fully_shard/_fsdp_param.py:802-821 to_accumulated_grad_if_needed")
FSDP = "Zhao et al. 2023, 'PyTorch FSDP' (VLDB), sec. 3.3-3.4: a unit's parameters are gathered for its compute, the next unit's prefetched"

# ---------------------------------------------------------------------------------------------
# Parameters on one GPU


def check_parallelism(model: TransformerModel, par: Layout, micro_batches: int) -> None:
    """Degrees that do not divide heads, layers or the vocabulary's shards, ZeRO without DP: InputError."""
    for flag, value in (("--tp", par.tp), ("--pp", par.pp), ("--dp", par.dp), ("--micro-batches", micro_batches), ("--chunks", par.chunks),
                        ("--cp", par.cp)):  # fmt: skip
        check_count(flag, value)
    if par.zero not in (0, 1, 2, 3):
        raise InputError(f"--zero: the ZeRO stage is 0, 1, 2 or 3, got {par.zero!r}")
    if par.zero and par.dp * par.cp == 1:
        raise InputError(
            f"--zero {par.zero}: ZeRO shards model states over the data-parallel ranks; with --dp 1 there is only one rank "
            "and nothing is sharded (use --dp > 1, or --zero 0)"
        )
    check_tensor_parallel(model, par.tp)
    check_count("--cp", par.cp)
    from parcalc.core.sharding import check_shard_group

    check_shard_group(par.shard_group, par.dp * par.cp, par.zero)
    expert_layout(model, par)  # --ep / --etp: Megatron-Core's folding rules
    check_shape(par.schedule, par.pp, micro_batches, par.chunks)
    if (par.schedule.v_shape or par.schedule is Schedule.DUALPIPE) and par.pp > 1:  # two stages a device (pipeline_step.schedule_reason)
        from parcalc.core.pipeline_step import schedule_reason

        reason = schedule_reason(model.layers, par, micro_batches)
        if reason is not None:
            raise InputError(f"--schedule {par.schedule.value}: {reason}")
    if par.pipeline_layout is not None:  # Megatron-LM's custom layout: its letters against the model, its chunks against --chunks
        from parcalc.core.pipeline_layout import check_layout_settings

        check_layout_settings(par, model)
    stage_layers(model, par)  # Megatron-LM's split, even or with uneven first and last stages, or the custom layout's


def vocab_shard(model: TransformerModel, tp: int) -> int:
    """Rows of the vocabulary on one TP rank: ceil(V / t), the fewest any padding gives.

    Megatron-LM pads V further, to a multiple of 128 t by default (--make-vocab-size-divisible-by,
    megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding): a preset whose V is
    already padded counts that padding; an unpadded V counts ceil(V / t) rows."""
    return math.ceil(model.vocab / tp)


def stage_layers(model: TransformerModel, par: Layout) -> tuple[int, ...]:
    """Transformer layers of each stage, first to last (parcalc.core.stages: Megatron-LM's rule; or the custom layout's)."""
    return par.stage_layers(model.layers)


def stage_moe_layers(model: TransformerModel, par: Layout, stage: int) -> int:
    """MoE layers among the layers of stage `stage` (0 for a dense model; parcalc.core.expert_parallel.stage_ranges)."""
    if model.moe is None:
        return 0
    if par.pipeline_layout is not None:  # the layout's own layer ranges, chunk by chunk
        return moe_layers_on(model, par.pipeline_split(model.layers).stage_ranges()[stage])
    return moe_layers_per_stage(model, stage_layers(model, par), par.chunks)[stage]


@lru_cache(maxsize=4096)  # pure; asked for every stage of every layout of a search
def moe_layers_per_stage(model: TransformerModel, split: tuple[int, ...], chunks: int = 1) -> tuple[int, ...]:
    """MoE layers of each stage holding `split` layers (interleaved: `chunks` model chunks per stage
    when they divide every stage's layers, parcalc.core.expert_parallel.stage_ranges)."""
    v = chunks if all(n % chunks == 0 for n in split) else 1
    return tuple(moe_layers_on(model, ranges) for ranges in stage_ranges(split, v))


def fullest_candidates(model: TransformerModel, split: tuple[int, ...], chunks: int = 1) -> tuple[int, ...]:
    """The stages whose memory or parameters can be the largest: the first and the last (they hold
    the embedding and the head), and of the middle stages the earliest of each (layers, MoE layers)
    pair. Middle stages differ only in those (DeepSeek's leading dense layers, MoE every k-th
    layer, an uneven split's second stage), and of two with the same pair the earlier keeps no
    fewer micro-batches in flight; so the largest of these is the largest of all stages."""
    pp = len(split)
    if pp == 1:
        return (0,)
    counts = moe_layers_per_stage(model, split, chunks) if model.moe is not None else (0,) * pp
    stages, seen = [0], set()
    for s in range(1, pp - 1):
        if (split[s], counts[s]) not in seen:
            seen.add((split[s], counts[s]))
            stages.append(s)
    return (*stages, pp - 1)


def stage_expert_parameters(model: TransformerModel, par: Layout, stage: int) -> int:
    """The routed-expert parameters one GPU of stage `stage` holds (sharded by ZeRO over expert-DP)."""
    moe = stage_moe_layers(model, par, stage) + (model.mtp_layers if stage == mtp_stage(model, par) and model.mtp_layer_is_moe else 0)
    if not moe:
        return 0
    return moe * expert_params_per_rank(model, par)


MTP_PLACEMENT = ("Megatron-LM: the MTP block sits on the last pipeline stage (megatron/core/models/gpt/gpt_model.py: mtp_process), "
                 "which then holds the embedding too ('if self.pre_process or self.mtp_process: self.embedding = ...')")


def head_stage(model: TransformerModel, par: Layout) -> int:
    """The pipeline rank that holds the final norm, the LM head and the loss: the last; under a --pipeline-layout the rank of
    its last virtual stage (the L), which in a V (DualPipeV, ZB-V: parcalc.core.pipeline_layout.V_PLACEMENT) is rank 0
    (deepseek-ai/DualPipe @3da1bbe examples/example_dualpipev.py: rank r holds modules r and 2p - 1 - r (line 137), the loss
    comes out on rank 0 (line 152)), with a layout or without one (its 2p equal chunks in the same V)."""
    if par.schedule.v_shape and par.pp > 1:
        return 0
    if par.pipeline_layout is not None and par.pp > 1:
        split = par.pipeline_split(model.layers)
        return int(split.rank_of(len(split.stages) - 1))
    return par.pp - 1


def mtp_stage(model: TransformerModel, par: Layout) -> int:
    """The pipeline stage that holds the MTP modules: the last (MTP_PLACEMENT), or where --pipeline-layout puts its `m`
    (the last chunk of that rank: Megatron-LM validate_layer_layout)."""
    if par.pipeline_layout is not None and model.mtp_layers:
        rank = par.pipeline_split(model.layers).mtp_rank()
        if rank is not None:
            return int(rank)
    return head_stage(model, par)


def mtp_params_per_rank(model: TransformerModel, par: Layout) -> int:
    """The MTP modules on one GPU of the last stage: their norms (replicated), eh_proj (2h x h, column-parallel: /t),
    the block as a layer of its kind on one TP rank (an MoE block's experts / ep, each split etp ways), and with
    p > 1 a copy of the word embeddings (V/t rows) the modules look the shifted tokens up in (MTP_PLACEMENT)."""
    if not model.mtp_layers:
        return 0
    if model.mtp_layer_is_moe:
        block = moe_dense_params_per_rank(model, par.tp) + expert_params_per_rank(model, par)
    else:
        block = layer_params_per_rank(model, par.tp)
    features_in, features_out = model.mtp_projection
    own = model.mtp_norm_params + features_in * features_out // par.tp
    embedding = vocab_shard(model, par.tp) * model.hidden if par.pp > 1 and model.vocab else 0
    return model.mtp_layers * (own + block) + embedding


def _stage_ends(model: TransformerModel, par: Layout, stage: int) -> tuple[int, int]:
    """(embedding, head) parameters of a stage on one TP rank: word embeddings (V/t rows) and
    learned positions on the first; final norm and LM head (untied, or a copy of the tied word
    embeddings when p > 1) on the last; 0 where the stage holds none."""
    if not model.vocab:
        return 0, 0
    word = vocab_shard(model, par.tp) * model.hidden
    positions = model.max_seq_len * model.hidden if model.position is Position.LEARNED else 0
    final_norm = model.norm.params_per_channel * model.hidden if model.norm is not Norm.NONE else 0
    first, last = stage == 0, stage == head_stage(model, par)
    embed = word + positions if first else 0
    head = (final_norm if last else 0) + (word if last and (not model.tied_embeddings or par.pp > 1) else 0)
    return embed, head


def stage_parameters(model: TransformerModel, par: Layout, stage: int) -> Derivation:
    """Parameters held by one GPU of pipeline stage `stage` (0-based), after the TP split.

    First stage: word embeddings (V/t rows) and learned positions; last stage: final norm and LM
    head (untied), or a copy of the word embeddings when tied and p > 1 (Megatron-LM keeps one
    on each end and all-reduces their gradients).
    """
    layers = stage_layers(model, par)[stage]
    per_layer = layer_params_per_rank(model, par.tp)
    inputs = [
        Term("L_s", "L_stage", r"L_{\mathrm{stage}}", layers, "", "layers on this stage"),
        Term("P_l", "P_layer/t", r"P_{\mathrm{layer}}/t", per_layer, "", "parameters of one layer on one TP rank"),
    ]
    formula, latex = "$L_s × $P_l", r"$L_s \times $P_l"
    value = layers * per_layer
    moe = stage_moe_layers(model, par, stage)
    if moe:  # MoE layers: their non-expert part split by tp, and experts / ep experts split etp ways (parcalc.core.expert_parallel)
        layout = expert_layout(model, par)
        assert model.moe is not None
        dense_part, experts = moe_dense_params_per_rank(model, par.tp), expert_params_per_rank(model, par)
        inputs = [
            Term("L_d", "L_dense", r"L_{\mathrm{dense}}", layers - moe, "", "dense layers on this stage"),
            Term("P_l", "P_layer/t", r"P_{\mathrm{layer}}/t", per_layer, "", "parameters of one dense layer on one TP rank"),
            Term("L_m", "L_MoE", r"L_{\mathrm{MoE}}", moe, "", "MoE layers on this stage"),
            Term("P_m", "P_MoE,dense", r"P_{\mathrm{MoE,dense}}", dense_part, "",
                 "one MoE layer's attention and norms (/t), router (replicated), shared experts (/t)", ROUTER_SOURCE),
            Term("P_x", "P_experts", r"P_{\mathrm{experts}}", experts, "",
                 f"routed experts of one MoE layer on this GPU: {model.moe.experts}/ep = {model.moe.experts // par.ep} experts, "
                 f"each split etp = {layout.etp} ways", FOLDING),
        ]  # fmt: skip
        formula = "$L_d × $P_l + $L_m × ($P_m + $P_x)"
        latex = r"$L_d \times $P_l + $L_m \times ($P_m + $P_x)"
        value = (layers - moe) * per_layer + moe * (dense_part + experts)
    if model.mamba is not None:  # one block per layer, each kind its own size (parcalc.core.mamba_memory)
        from parcalc.core.mamba_memory import stage_layer_params

        inputs, formula, latex, value = stage_layer_params(model, par, stage)
    if model.vocab:
        word = vocab_shard(model, par.tp) * model.hidden
        embed, head = _stage_ends(model, par, stage)
        last = stage == head_stage(model, par)
        if embed:
            inputs.append(Term("P_e", "P_embed", r"P_{\mathrm{embed}}", embed, "", "word embeddings (V/t rows) and learned positions"))
            formula, latex, value = formula + " + $P_e", latex + " + $P_e", value + embed
        if head:
            what = "final norm and LM head (V/t rows)" if word and (not model.tied_embeddings or par.pp > 1) else "final norm"
            if model.tied_embeddings and par.pp > 1 and last:
                what += ", a copy of the tied word embeddings (Megatron-LM)"
            inputs.append(Term("P_h", "P_head", r"P_{\mathrm{head}}", head, "", what))
            formula, latex, value = formula + " + $P_h", latex + " + $P_h", value + head
    mtp = mtp_params_per_rank(model, par) if stage == mtp_stage(model, par) else 0
    if mtp:
        inputs.append(Term("P_mtp", "P_mtp", r"P_{\mathrm{mtp}}", mtp, "",
                           f"{model.mtp_layers} multi-token-prediction module(s): norms, eh_proj, a block"
                           + (", and a copy of the word embeddings" if par.pp > 1 else ""), MTP_PLACEMENT))
        formula, latex, value = formula + " + $P_mtp", latex + " + $P_mtp", value + mtp
    return Derivation(
        key="stage_parameters",
        label=f"Parameters on one GPU of stage {stage + 1}",
        symbol="P_gpu",
        latex_symbol=r"P_{\mathrm{GPU}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(inputs),
        value=float(value),
        unit="",
        source="Megatron-LM tensor and pipeline split (Shoeybi et al. 2019 sec. 3; Narayanan et al. 2021 sec. 2.2)",
    )


def root_unit(model: TransformerModel, par: Layout, stage: int) -> tuple[int, int]:
    """The root unit of a stage on one TP rank, as (early, late): the parameters outside its
    transformer layers whose gradients appear at the start of the backward (final norm and LM head,
    or the tied word embeddings the head multiplies by) and those whose gradients appear only at its
    end (untied word embeddings, learned positions). (0, 0) on a stage with neither end."""
    embed, head = _stage_ends(model, par, stage)
    if head and embed and model.tied_embeddings:  # one stage holds both ends: the head's matmul uses the embeddings
        word = vocab_shard(model, par.tp) * model.hidden
        return head + word, embed - word
    return head, embed


def fsdp_pipeline_reduce_bytes(step_memory: str) -> float | None:
    """The bytes of FSDP2's reduce dtype under a framework profile whose data parallelism is fully_shard (FSDP2_PROFILES:
    parcalc.core.memory_fsdp.PROFILES), the gradient accumulator pipelined_fsdp_working_set counts; None for the others."""
    if step_memory not in FSDP2_PROFILES:
        return None
    from parcalc.core.memory_fsdp import PROFILES

    return PROFILES[step_memory].reduce_bytes


def pipelined_fsdp_working_set(model: TransformerModel, par: Layout, per: StateBytes, stage: int, reduce_bytes: float) -> Derivation:
    """fully_shard inside torch's pipelining (the fsdp2 and torchtitan profiles at pp > 1), on one GPU of stage `stage`:
    the stage's every unit unsharded, and its unsharded gradients accumulated, all step.

    torchtitan's apply_fsdp(pp_enabled=True) wraps every block and the root with reshard_after_forward=False, and torch's
    PipelineStage.backward_maybe_with_nosync sets set_reshard_after_backward(False) and set_requires_gradient_sync(False)
    for every micro-batch's backward of every stage a rank holds (interleaved schedules: each of its chunks); only
    perform_reduce_grad after the last backward reshards and reduce-scatters (parcalc.core.memory_pipeline_stage.PP_SOURCES
    'split' and 'no_sync'). So the rank keeps its stages' parameters in param_dtype (w) and their gradients in FSDP2's
    reduce dtype (r: the first backward copies a bf16 gradient to it, later ones add in place; with reduce_dtype None the
    gradient stays in param_dtype) from the first forward to the end of the last backward: (w + r) x P_stage. The stage
    walk (memory_pipeline_stage) holds these two to the byte at its peak (M_Pu and M_G); this term stands for it in the
    textbook sum where the walk does not follow the layout (interleaved or split-backward schedules, MoE, the fsdp2
    profile's transformers code) and in fit's search.
    """
    params = stage_parameters(model, par, stage)
    grad = max(reduce_bytes, per.weight)  # reduce_dtype None (fsdp2's defaults): the gradient in param_dtype
    inputs = (
        params.as_term("P_stage"),
        Term("w", "w", "w", per.weight, "B", "bytes per unsharded parameter (MixedPrecisionPolicy's param_dtype)"),
        Term("r", "r", "r", grad, "B", "bytes per unsharded gradient accumulated across micro-batches (FSDP2's reduce dtype)"),
    )
    return Derivation(
        key="zero3_gathered",
        label="FSDP2 under pipelining: the stage's unsharded parameters and accumulated gradients, all step",
        symbol="M_gather",
        latex_symbol=r"M_{\mathrm{gather}}",
        formula="($w + $r) × $P_stage",
        formula_latex=r"($w + $r) \times $P_stage",
        inputs=inputs,
        value=(per.weight + grad) * params.value,
        unit="B",
        source=f"{PIPELINED_FSDP}; {FSDP}",
    )


def zero3_working_set(model: TransformerModel, par: Layout, per: StateBytes, stage: int = 0,
                      pipeline_reduce_bytes: float | None = None) -> Derivation:  # fmt: skip
    """ZeRO-3 / FSDP on one GPU of stage `stage`: the parameters gathered at the peak of the backward
    (`pipeline_reduce_bytes`: fully_shard under torch's pipelining, fsdp_pipeline_reduce_bytes; at pp > 1 the stage's
    whole parameters and gradients instead, pipelined_fsdp_working_set).

    PyTorch FSDP2, one unit per transformer block and the root (embedding, final norm, LM head):
    - the root unit is gathered at the root's forward and not resharded after it (FSDPState._lazy_init,
      torch/distributed/fsdp/_fully_shard/_fsdp_state.py: 'For the root, do not reshard after
      forward'), so its weights stay whole through forward and backward;
    - its gradients are reduce-scattered only at the end of the backward (the root's inputs, token
      ids, need no gradient, so its post-backward runs in _root_post_backward_final_callback): the LM
      head's unsharded gradient lives through the layers' backward;
    - each block is gathered for its forward and again for its backward, the next one prefetched:
      two layers' weights and one layer's unsharded gradients (Zhao et al. 2023 sec. 3.3-3.4);
    - the untied word embeddings' gradient appears last, after the layers' buffers are freed.
    Hence w P_root + g P_early + max((2w + g) P_l, g P_late) (root_unit gives P_early, P_late).

    DeepSpeed ZeRO-3 gathers module by module; its estimator counts 4 bytes per parameter of the
    largest module, `largest_layer_memory = 4 * largest_layer_params` with the largest over
    `model.modules()` of `m.parameters(recurse=False)` (deepspeed/runtime/zero/stage3.py,
    estimate_zero3_model_states_mem_needs, model_to_params): the embedding or LM head (V h) for every
    Llama 3 size, which this count also holds (see assumptions).
    """
    if pipeline_reduce_bytes is not None and par.pp > 1:
        return pipelined_fsdp_working_set(model, par, per, stage, pipeline_reduce_bytes)
    p_layer = layer_params_per_rank(model, par.tp)
    if stage_moe_layers(model, par, stage):  # an MoE layer's unit: its non-expert part and this GPU's experts, gathered whole
        moe_unit = moe_dense_params_per_rank(model, par.tp) + expert_params_per_rank(model, par)
        p_layer = max(p_layer, moe_unit) if stage_moe_layers(model, par, stage) < stage_layers(model, par)[stage] else moe_unit
    early, late = root_unit(model, par, stage)
    terms = [
        Term("P_l", "P_layer/t", r"P_{\mathrm{layer}}/t", p_layer, "", "parameters of one layer on one TP rank"),
        Term("w", "w", "w", per.weight, "B", "bytes per parameter (weights)"),
        Term("g", "g", "g", per.gradient, "B", "bytes per gradient"),
    ]
    layers = (2 * per.weight + per.gradient) * p_layer
    if not (early or late):
        formula, latex, value = "(2 × $w + $g) × $P_l", r"(2 \times $w + $g) \times $P_l", layers
        label = "ZeRO-3 gathered parameters and gradients (two layers' weights, one layer's gradients)"
        assumptions: tuple[str, ...] = ("this stage holds no embedding or LM head: its root unit is empty",)
    else:
        terms += [
            Term("P_root", "P_root", r"P_{\mathrm{root}}", early + late, "", "root unit on one TP rank: embedding, final norm, LM head on this stage",
                 "FSDP2 keeps the root unit unsharded from its forward to the end of backward (_fsdp_state.py)"),
            Term("P_early", "P_early", r"P_{\mathrm{early}}", early, "",
                 "root parameters whose gradients appear first (final norm, LM head / tied embeddings), held to the end of backward"),
            Term("P_late", "P_late", r"P_{\mathrm{late}}", late, "", "root parameters whose gradients appear last (untied embeddings, positions)"),
        ]  # fmt: skip
        formula = "$w × $P_root + $g × $P_early + max((2 × $w + $g) × $P_l, $g × $P_late)"
        latex = r"$w \times $P_root + $g \times $P_early + \max\left((2 \times $w + $g) \times $P_l,\ $g \times $P_late\right)"
        value = per.weight * (early + late) + per.gradient * early + max(layers, per.gradient * late)
        label = "ZeRO-3 gathered parameters and gradients (the root unit, two layers' weights, one layer's gradients)"
        # DeepSpeed's largest module: the embedding or LM head (V h / t), else an MLP matrix (h f / t)
        largest = max(vocab_shard(model, par.tp) * model.hidden, model.hidden * model.ffn_hidden // par.tp)
        assumptions = (
            ("FSDP2 wrapping (fully_shard per transformer block, then the root): the root unit's weights stay gathered through "
             "forward and backward, its LM-head gradient to the end of backward"),
            (f"DeepSpeed's estimate_zero3_model_states_mem_needs counts 4 x its largest module, here {4 * largest:,.0f} B "
             "(deepspeed/runtime/zero/stage3.py); TorchTitan wraps the embeddings and [norm, output] as units of their own, "
             "which frees the head after its backward (less than counted here)"),
        )  # fmt: skip
    return Derivation(
        key="zero3_gathered",
        label=label,
        symbol="M_gather",
        latex_symbol=r"M_{\mathrm{gather}}",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(terms),
        value=value,
        unit="B",
        source=f"{FSDP}; PyTorch torch/distributed/fsdp/_fully_shard/_fsdp_state.py (root not resharded); {ZERO}, sec. 5.3",
        assumptions=assumptions,
    )


# ---------------------------------------------------------------------------------------------
# One stage, and every stage


@dataclass(frozen=True)
class MemoryBreakdown:
    model: TransformerModel
    parallelism: Layout
    setup: TrainingSetup
    per_parameter: StateBytes
    layer: LayerActivations
    stages: tuple[StageMemory, ...]

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total.value)

    def headroom(self) -> Derivation | None:
        """Capacity minus the worst stage's total (negative: does not fit)."""
        if self.setup.capacity is None:
            return None
        worst = self.worst
        cap = Term("C", "C", "C", self.setup.capacity, "B", "GPU memory capacity", self.setup.capacity_source)
        return Derivation(
            key="headroom",
            label=f"Headroom on the fullest GPU (stage {worst.stage + 1})",
            symbol="H",
            latex_symbol="H",
            formula="$C - $M_total",
            formula_latex=r"$C - $M_total",
            inputs=(cap, worst.total.as_term("M_total")),
            value=self.setup.capacity - worst.total.value,
            unit="B",
            source="capacity from the GPU preset or --capacity",
        )


DUALPIPE_COPIES = ("DeepSeek-V3 technical report sec. 3.2.1: 'DualPipe requires keeping two copies of the model parameters'; "
                   "deepseek-ai/DualPipe README @3da1bbe: parameters per device 2x; examples/example_dualpipe.py keeps both copies' "
                   ".grad and adds the mirror's (p0.grad += p1all[pp_size - 1 - rank]), so an optimizer over a device's two modules "
                   "keeps states for both (neither source says otherwise)")


def dualpipe_parameters(model: TransformerModel, par: Layout, stage: int, own: Derivation) -> Derivation:
    """DualPipe's device `stage` holds stage d of the way down and stage p - 1 - d of the way up: both stages' parameters."""
    mirror = stage_parameters(model, par, par.pp - 1 - stage)
    return Derivation(
        key=own.key,
        label=f"Parameters on one GPU of device {stage + 1} (DualPipe: stage {stage + 1} and stage {par.pp - stage})",
        symbol=own.symbol,
        latex_symbol=own.latex_symbol,
        formula="$P_d + $P_mirror",
        formula_latex=r"$P_d + $P_mirror",
        inputs=(own.as_term("P_d"), mirror.as_term("P_mirror")),
        value=own.value + mirror.value,
        unit=own.unit,
        source=DUALPIPE_COPIES,
    )


def weight_pass_share(model: TransformerModel, config: Any) -> float:
    """What a micro-batch waiting for its W pass still holds, as a share of its activations M_B: M_W / M_B = 32 h / (34 h + 5 a s)
    per token, 32/34 where FlashAttention keeps no a s^2 b scores (Qi et al. 2024 Table 1; the zero-bubble repository's
    runtime.py @39f2c186: f_mem = 34 h + 5 a s, w_mem = -32 h): W needs each linear's input and output gradient."""
    scores = 0.0 if config.flash_attention else 5 * model.heads * config.seq_len
    return 32 * model.hidden / (34 * model.hidden + scores)


def _in_flight(par: Layout, micro_batches: int, stage: int, weight_share: float = ZBV_WEIGHT_MEMORY) -> Derivation:
    value = in_flight_micro_batches(par.schedule, par.pp, micro_batches, stage, par.chunks)
    inputs = [
        Term("p", "p", "p", par.pp, "", "pipeline stages"),
        Term("m", "m", "m", micro_batches, "", "micro-batches per iteration"),
    ]
    if par.schedule.splits_backward and par.pp > 1:
        return _split_in_flight(par, micro_batches, stage, weight_share, value, inputs)
    if par.schedule is Schedule.GPIPE:
        formula, latex, source = "$m", "$m", "GPipe runs every forward before any backward (Huang et al. 2019)"
    elif par.schedule is Schedule.INTERLEAVED and par.chunks > 1 and micro_batches > par.pp:
        inputs.append(Term("v", "v", "v", par.chunks, "", "model chunks per device"))
        if stage == 0:
            formula, latex = "$p × (1 + ($p - 1) / ($p × $v))", r"$p \times \left(1 + \frac{$p - 1}{$p \times $v}\right)"
        else:
            inputs.append(Term("i", "i", "i", stage, "", "stage index, from 0"))
            formula = "min(2 × ($p - $i - 1) + ($v - 1) × $p + 1, $m × $v) / $v"
            latex = r"\frac{\min\left(2 \times ($p - $i - 1) + ($v - 1) \times $p + 1,\ $m \times $v\right)}{$v}"
        source = ("Korthikanti et al. 2022 sec. 4.2.3 (interleaving factor 1 + (p-1)/(pv)); Megatron-LM's warm-up, "
                  "megatron/core/pipeline_parallel/schedules.py (parcalc.core.pipeline.in_flight_micro_batches)")  # fmt: skip
    else:
        inputs.append(Term("i", "i", "i", stage, "", "stage index, from 0"))
        formula, latex = "min($p - $i, $m)", r"\min($p - $i,\ $m)"
        source = "1F1B / PipeDream-Flush warm-up (Narayanan et al. 2021 sec. 2.2; parcalc.core.pipeline.in_flight_micro_batches)"
        if par.schedule is Schedule.INTERLEAVED and par.chunks > 1:
            formula, latex = "$m", "$m"
            source = "Megatron-LM runs every forward first when m = p (parcalc.core.pipeline.in_flight_micro_batches)"
    return Derivation(
        key="in_flight",
        label=f"Micro-batches whose activations stage {stage + 1} holds at once ({par.schedule.label})",
        symbol="n",
        latex_symbol="n",
        formula=formula,
        formula_latex=latex,
        inputs=tuple(inputs),
        value=value,
        unit="",
        source=source,
    )


def _split_in_flight(par: Layout, micro_batches: int, stage: int, weight_share: float, alive: float, inputs: list[Term]) -> Derivation:
    """The split-backward schedules: the micro-batches whose activations a stage holds (F started, B not done) and those
    waiting for W, which hold the share M_W / M_B of theirs, at the stage's peak (parcalc.core.pipeline)."""
    from parcalc.core.pipeline import pending_weight_gradients

    waiting = pending_weight_gradients(par.schedule, par.pp, micro_batches, stage)
    inputs = [*inputs, Term("i", "i", "i", stage, "", "stage index, from 0"),
              Term("n_B", "n_B", r"n_{B}", alive, "", "micro-batches whose activations B still needs at the peak"),
              Term("n_W", "n_W", r"n_{W}", waiting, "", "micro-batches then waiting for W (B done)"),
              Term("r_W", "r_W", r"r_{W}", weight_share, "fraction", "what a micro-batch waiting for W holds of its activations: M_W / M_B, "
                   "32 h / (34 h + 5 a s), 32/34 with FlashAttention (Qi et al. 2024 Table 1)")]  # fmt: skip
    where = {Schedule.ZB_H1: "min($p - $i, $m) B-pending, min($i, $m - n_B) W-pending (Qi et al. 2024 sec. 2.3: (p - i + 1) M_B + (i - 1) M_W on worker i)",
             Schedule.ZB_H2: "min(2($p - $i) - 1, $m) B-pending, min(2 $i, $m - n_B) W-pending (Qi et al. 2024 sec. 2.3)",
             Schedule.DUALPIPEV: "2p + 1 chunks' activations, p + 1/2 stage micro-batches (the DualPipe README's PP + 1 over PP = 2p stages; "
                                 "the simulation of dualpipev.py's order counts the same)",
             Schedule.ZB_V: "the simulation of ZB-V's order (zbv.py; its memory limit: 2p chunks' activations, 1F1B's p)",
             Schedule.DUALPIPE: "p + 1 stage micro-batches (the DualPipe README's PP + 1; the simulation of dualpipe.py's order counts "
                                "the same)"}[par.schedule]  # fmt: skip
    return Derivation(
        key="in_flight",
        label=f"Micro-batches whose activations stage {stage + 1} holds at once ({par.schedule.label}, W-pending ones at r_W)",
        symbol="n",
        latex_symbol="n",
        formula="$n_B + $r_W × $n_W",
        formula_latex=r"$n_B + $r_W \times $n_W",
        inputs=tuple(inputs),
        value=alive + weight_share * waiting,
        unit="",
        source=f"{where}; parcalc.core.pipeline.in_flight_micro_batches and pending_weight_gradients",
    )


def _sum(key: str, label: str, symbol: str, latex_symbol: str, parts: list[Derivation], source: str) -> Derivation:
    keys = [d.key for d in parts]
    terms = tuple(d.as_term(k) for d, k in zip(parts, keys, strict=True))
    return Derivation(
        key=key,
        label=label,
        symbol=symbol,
        latex_symbol=latex_symbol,
        formula=" + ".join(f"${k}" for k in keys),
        formula_latex=" + ".join(f"${k}" for k in keys),
        inputs=terms,
        value=sum(d.value for d in parts),
        unit="B",
        source=source,
    )


# the profiles whose data parallelism is PyTorch's fully_shard (parcalc.core.memory_fsdp.PROFILES)
FSDP2_PROFILES = ("fsdp2-eager", "torchtitan-eager")


def stage_memory(model: TransformerModel, par: Layout, setup: TrainingSetup, per: StateBytes,
                 layer: LayerActivations, stage: int) -> StageMemory:  # fmt: skip
    """The memory of one GPU of pipeline stage `stage` (0-based)."""
    from parcalc.core.offload import host_memory, offloaded_activations

    config = layer.config
    params = stage_parameters(model, par, stage)
    experts = stage_expert_parameters(model, par, stage)
    dualpipe = par.schedule is Schedule.DUALPIPE and par.pp > 1
    if dualpipe:  # the stage each way: its parameters, gradients and optimizer states twice over the pipeline
        params, experts = dualpipe_parameters(model, par, stage, params), experts + stage_expert_parameters(model, par, par.pp - 1 - stage)
    if experts:
        layout = expert_layout(model, par)
        # hybrid sharding: the dense states over the shard group S, the experts' over expert-DP as before
        dense_ranks = layout.dense_dp if par.shard_group is None else par.shard_group
        expert_ranks: float = layout.edp
        if setup.step_memory in FSDP2_PROFILES and par.zero == 3 and model.moe is not None:  # fully_shard chunks each expert stack by whole experts
            from parcalc.core.memory_fsdp import expert_shard_ranks

            expert_ranks = expert_shard_ranks(model.moe.experts // layout.ep, min(dense_ranks, layout.edp))
        states = expert_model_states(params.value - experts, experts, per, par.zero, dense_ranks, expert_ranks,
                                     params_source=params.label)  # fmt: skip
    else:
        states = model_states(params.value, per, par, params_source=params.label)
    gathered = zero3_working_set(model, par, per, stage, fsdp_pipeline_reduce_bytes(setup.step_memory)) if par.zero == 3 else None
    if par.split_by == "torchtitan" and par.pp > 1:  # torchtitan's own split (parcalc.core.pipeline_torchtitan)
        from parcalc.core.pipeline_torchtitan import stage_layers_derivation as torchtitan_stage_layers

        layers = torchtitan_stage_layers(par, model.layers, stage)
    elif par.pipeline_layout is not None:
        from parcalc.core.pipeline_layout import stage_layers_of_layout

        layers = stage_layers_of_layout(par.pipeline_split(model.layers), stage)
    else:
        layers = stage_layers_derivation(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers, stage, par.chunks,
                                         embedding_in_split=par.embedding_in_split, loss_in_split=par.loss_in_split)
    n_layers = int(layers.value)
    in_flight = _in_flight(par, setup.micro_batches, stage, weight_pass_share(model, config))
    moe_here = stage_moe_layers(model, par, stage) if setup.moe_memory_detail else 0
    fp8_weights = fp8_weight_cache(model, par, n_layers, moe_here, fp4=setup.precision is Precision.FP4) if setup.precision.quantised else None
    if setup.offload_activations:
        activations = offloaded_activations(layer, layers, in_flight)
    elif setup.recompute_layers is not None and setup.recompute is Recompute.FULL:
        activations = _partly_recomputed_activations(model, par, layer, layers, in_flight, setup.recompute_layers, stage)
    elif model.mamba is not None:
        from parcalc.core.mamba_memory import mamba_stage_activations

        activations = mamba_stage_activations(model, par, config, in_flight, stage)
    elif model.moe is not None:
        activations = _moe_stage_activations(model, par, layer, layers, in_flight, stage)
    else:
        activations = Derivation(
            key="stage_activations",
            label=f"Activations of the layers of stage {stage + 1}",
            symbol="A_stage",
            latex_symbol=r"A_{\mathrm{stage}}",
            formula="$A_layer × $L_stage × $n",
            formula_latex=r"$A_layer \times $L_stage \times $n",
            inputs=(layer.per_layer.as_term("A_layer"), layers.as_term("L_stage"), in_flight.as_term("n")),
            value=layer.per_layer.value * n_layers * in_flight.value,
            unit="B",
            source="Korthikanti et al. 2022 sec. 4.2.3: the first stage keeps p micro-batches of its layers (L/p each: L layers' worth)",
        )
    if model.linear_attention is not None and not setup.offload_activations and setup.recompute_layers is None:
        from parcalc.core.linear_attention_memory import with_linear_mixers

        # a gated-DeltaNet layer's mixer in place of attention's
        activations = with_linear_mixers(model, par, config, activations, stage)
    ends = (0, par.pp - 1)  # DualPipe: the first and the last device hold both ends (stage 0 one way, stage p - 1 the other)
    embedding = embedding_activations(model, config, in_flight.value) if (stage == 0 or (dualpipe and stage in ends)) and model.vocab else None
    output = output_activations(model, config, in_flight.value) if (stage == head_stage(model, par) or (dualpipe and stage in ends)) and model.vocab else None
    mtp = mtp_activations(model, config, in_flight.value) if stage == mtp_stage(model, par) else None
    recompute = recompute_working_set(model, config) if setup.recompute_layers != 0 and model.mamba is None else None
    if model.mamba is not None:
        from parcalc.core.mamba_memory import mamba_recompute_working_set

        recompute = mamba_recompute_working_set(model, config)
    elif model.linear_attention is not None:
        from parcalc.core.linear_attention_memory import linear_recompute_working_set

        recompute = linear_recompute_working_set(model, config, recompute)
    context = context_working_set(model, config.micro_batch, config.seq_len, par, config.activation_bytes)
    dispatch = (moe_dispatch_working_set(model, config.micro_batch, config.seq_len, par, config.activation_bytes, setup.moe_imbalance)
                if moe_here and par.ep > 1 else None)  # fmt: skip
    reserve = reserve_derivation(setup.reserve)
    offloaded = (("optimizer_states",) + (("gradients",) if par.zero >= 2 else ())) if setup.offload_optimizer else ()
    host = host_memory(params.value, per, par, layer, layers, in_flight, setup) if setup.offload_optimizer or setup.offload_activations else None
    kept = [d for key, d in (("weights", states.weights), ("gradients", states.gradients), ("optimizer_states", states.optimizer))
            if key not in offloaded]  # fmt: skip
    state_parts = [*kept, *([fp8_weights] if fp8_weights else []), *([gathered] if gathered else [])]
    states_total = _sum("model_states", "Model states (weights, gradients, optimizer states)", "M_states", r"M_{\mathrm{states}}",
                        state_parts, ZERO_STAGES)  # fmt: skip
    act_parts = [activations, *([embedding] if embedding else []), *([output] if output else []), *([mtp] if mtp else []),
                 *([recompute] if recompute else []),
                 *([context] if context else []), *([dispatch] if dispatch else [])]  # fmt: skip
    activations_total = _sum("activations", "Activations (layers, embeddings, logits, recomputation)", "M_act", r"M_{\mathrm{act}}",
                             act_parts, "Korthikanti et al. 2022 sec. 4")  # fmt: skip
    total = _sum("total", f"Total on one GPU of stage {stage + 1}", "M_total", r"M_{\mathrm{total}}",
                 [states_total, activations_total, reserve], "sum of the components above")  # fmt: skip
    return StageMemory(stage, params, states, gathered, layers, in_flight, activations, embedding, output, recompute, reserve,
                       states_total, activations_total, total, fp8_weights, host, offloaded, context, dispatch, mtp)  # fmt: skip


TE_WEIGHT_CACHE = (
    "NVIDIA/TransformerEngine transformer_engine/pytorch/module/linear.py (@3ec87875), _Linear.forward: "
    "weight_quantizer.set_usage(rowwise=True, columnwise=is_grad_enabled) and module.get_weight_workspace(..., "
    "cache_name=(None if is_first_microbatch is None else 'weight')): the FP8 weight and its FP8 transpose are kept "
    "as a workspace across micro-batches (Megatron-LM passes is_first_microbatch)"
)


def linear_weights_per_rank(model: TransformerModel, tp: int) -> int:
    """Weights of one layer's linears (QKV, projection, MLP) on one TP rank: what TE runs in FP8."""
    from parcalc.core.expert_parallel import fp8_linear_weights_per_rank

    return fp8_linear_weights_per_rank(model, Layout(tp))  # multi-head latent attention: its own projections (not q_width / kv_width)


# NVFP4's cached weight: FP4 data (1/2 byte) and one E4M3 scale byte per 16 values, row-wise and column-wise (2D 16 x 16
# blocks: both copies from the same block scales, NVFP4Quantizer::create_tensor allocates both with their scale_inv)
NVFP4_WEIGHT_BYTES = 2 * NVFP4_COPY_BYTES
NVFP4_WEIGHT_SOURCE = (f"{TE_WEIGHT_CACHE}; under NVFP4 the workspace holds NVFP4Quantizer's row-wise and column-wise FP4 data with "
                       "their E4M3 scales (transformer_engine/pytorch/csrc/quantizer.cpp NVFP4Quantizer::create_tensor, @d0067d0d)")

TE_GROUPED_CACHE = ("NVIDIA/TransformerEngine transformer_engine/pytorch/module/grouped_linear.py (@d0067d0), _GroupedLinear.forward "
                    "lines 267-300: the experts' weights quantised with the same workspace cache across micro-batches "
                    "(update_workspace = is_first_microbatch is None or is_first_microbatch)")  # fmt: skip


def fp8_weight_cache(model: TransformerModel, layout: Layout, layers: int, moe_layers: int = 0, fp4: bool = False) -> Derivation:
    """Transformer Engine's FP8 copies of the linear weights of a stage on one GPU: a row-wise FP8
    weight for the forward GEMM and a column-wise (transposed) one for the input-gradient GEMM on
    Hopper, 1 byte each, cached across micro-batches (TE_WEIGHT_CACHE). The embedding and LM head
    stay bf16 (TE runs the transformer layers' linears only). Not sharded by ZeRO. Of the
    `layers`, `moe_layers` are MoE layers: their shared experts (/tp) and this rank's experts / ep
    routed experts (/etp), cached by TE's GroupedLinear alike (TE_GROUPED_CACHE), in place of the
    dense MLP; 0: every layer counted with the dense layer's shapes. `fp4`: NVFP4's copies (NVFP4_WEIGHT_BYTES a weight)."""
    from parcalc.core.expert_parallel import fp8_linear_weights_per_rank

    per_layer = linear_weights_per_rank(model, layout.tp)
    c8 = Term("c_8", "c_fp8", r"c_{\mathrm{fp8}}", 2.0, "B", "bytes per linear weight: FP8 weight + FP8 transpose", TE_WEIGHT_CACHE)
    notes: tuple[str, ...] = ("Hopper FP8 (per-tensor scaling): row-wise and column-wise copies, 1 byte each; Blackwell MXFP8 adds "
                              "one E8M0 scale per 32 elements per copy (not counted)",)
    if fp4:
        c8 = Term("c_8", "c_fp4", r"c_{\mathrm{fp4}}", NVFP4_WEIGHT_BYTES, "B",
                  "bytes per linear weight: NVFP4 row-wise + column-wise copies, each 1/2 byte + an E4M3 scale per 16", NVFP4_WEIGHT_SOURCE)
        notes = ("NVFP4 (Transformer Engine NVFP4BlockScaling): the weight's row-wise (forward) and column-wise (input-gradient) "
                 "FP4 copies from 16 x 16 2D blocks, with their scale bytes; Megatron-Bridge's fp4_param_gather (FP4 weights "
                 "gathered, no BF16 compute copy) is not modelled",)
    symbol, latex = ("M_fp4", r"M_{\mathrm{fp4}}") if fp4 else ("M_fp8", r"M_{\mathrm{fp8}}")  # the key stays fp8_weights
    if moe_layers and model.moe is not None:
        per_moe = fp8_linear_weights_per_rank(model, layout, moe_layer=True)
        inputs: tuple[Term, ...] = (
            c8,
            Term("P_lin", "P_linear/t", r"P_{\mathrm{linear}}/t", per_layer, "", "weights of one dense layer's linears on one TP rank"),
            Term("L_d", "L_dense", r"L_{\mathrm{dense}}", layers - moe_layers, "", "dense layers on this stage"),
            Term("P_moe", "P_moe,linear", r"P_{\mathrm{MoE,linear}}", per_moe, "",
                 f"one MoE layer's linears on this GPU: attention and shared experts /t, {model.moe.experts // layout.ep} routed experts /etp "
                 "(router not FP8)", TE_GROUPED_CACHE),
            Term("L_m", "L_MoE", r"L_{\mathrm{MoE}}", moe_layers, "", "MoE layers on this stage"),
        )  # fmt: skip
        value = c8.value * (per_layer * (layers - moe_layers) + per_moe * moe_layers)
        return Derivation("fp8_weights", f"{'NVFP4' if fp4 else 'FP8'} weight copies (Transformer Engine: weight and transpose, cached; experts included)", symbol,
                          latex, "$c_8 × ($P_lin × $L_d + $P_moe × $L_m)", r"$c_8 \times ($P_lin \times $L_d + $P_moe \times $L_m)",
                          inputs, value, "B", f"{TE_WEIGHT_CACHE}; {TE_GROUPED_CACHE}", notes)  # fmt: skip
    inputs = (
        c8,
        Term("P_lin", "P_linear/t", r"P_{\mathrm{linear}}/t", per_layer, "", "weights of one layer's linears on one TP rank"),
        Term("L_s", "L_stage", r"L_{\mathrm{stage}}", layers, "", "layers on this stage"),
    )
    return Derivation("fp8_weights", f"{'NVFP4' if fp4 else 'FP8'} weight copies (Transformer Engine: weight and transpose, cached)", symbol, latex,
                      "$c_8 × $P_lin × $L_s", r"$c_8 \times $P_lin \times $L_s", inputs, c8.value * per_layer * layers, "B", TE_WEIGHT_CACHE,
                      (*notes, "dense layer shapes"))  # fmt: skip


def _partly_recomputed_activations(model: TransformerModel, par: Layout, layer: LayerActivations, layers: Derivation,
                                   in_flight: Derivation, n: int, stage: int) -> Derivation:  # fmt: skip
    """--recompute-layers n (Megatron-LM's block method, parcalc.core.recompute.MEGATRON_BLOCK): the
    first n layers of each of the stage's v model chunks keep their input only (full recomputation,
    `layer`), the others every tensor (no recomputation)."""
    from dataclasses import replace as replaced

    from parcalc.core.recompute import MEGATRON_BLOCK

    plain = layer_activations(model, replaced(layer.config, recompute=Recompute.NONE))
    n_layers = int(layers.value)
    again = min(n, n_layers // par.chunks) * par.chunks
    inputs = (Term("A_full", "A_full", r"A_{\mathrm{full}}", layer.per_layer.value, "B", "one recomputed layer's activations (its input)",
                   layer.per_layer.source),
              Term("L_re", "L_re", r"L_{\mathrm{re}}", again, "", f"recomputed layers of stage {stage + 1} (--recompute-layers {n} "
                   f"x {par.chunks} chunk{'s' if par.chunks > 1 else ''})"),
              Term("A_none", "A_none", r"A_{\mathrm{none}}", plain.per_layer.value, "B", "one other layer's activations (every saved tensor)",
                   plain.per_layer.source),
              layers.as_term("L_stage"), in_flight.as_term("n"))  # fmt: skip
    return Derivation(
        key="stage_activations",
        label=f"Activations of the layers of stage {stage + 1} ({again} of {n_layers} recomputed)",
        symbol="A_stage",
        latex_symbol=r"A_{\mathrm{stage}}",
        formula="($A_full × $L_re + $A_none × ($L_stage - $L_re)) × $n",
        formula_latex=r"\left($A_full \times $L_re + $A_none \times ($L_stage - $L_re)\right) \times $n",
        inputs=inputs,
        value=(layer.per_layer.value * again + plain.per_layer.value * (n_layers - again)) * in_flight.value,
        unit="B",
        source=f"{MEGATRON_BLOCK}; per layer Korthikanti et al. 2022 sec. 4-5",
    )


def _moe_stage_activations(model: TransformerModel, par: Layout, layer: LayerActivations, layers: Derivation,
                           in_flight: Derivation, stage: int) -> Derivation:  # fmt: skip
    """A stage of a Mixture-of-Experts model: its dense layers and its MoE layers, each with its own activations."""
    from parcalc.core.activations import layer_activations as activations_of

    moe_layer = activations_of(model, layer.config, moe_layer=True)
    n_layers = int(layers.value)
    moe = stage_moe_layers(model, par, stage)
    dense = n_layers - moe
    inputs = (layer.per_layer.as_term("A_layer"), Term("L_d", "L_dense", r"L_{\mathrm{dense}}", dense, "", f"dense layers of stage {stage + 1}"),
              Term("A_moe", "A_moe", r"A_{\mathrm{moe}}", moe_layer.per_layer.value, "B",
                   "activations of one MoE layer per micro-batch (parcalc.core.activations.moe_tensors)"), Term("L_m", "L_moe", r"L_{\mathrm{moe}}", moe, "", f"MoE layers of stage {stage + 1}"),
              in_flight.as_term("n"))  # fmt: skip
    return Derivation(
        key="stage_activations",
        label=f"Activations of the layers of stage {stage + 1} (dense and MoE layers each their own)",
        symbol="A_stage",
        latex_symbol=r"A_{\mathrm{stage}}",
        formula="($A_layer × $L_d + $A_moe × $L_m) × $n",
        formula_latex=r"\left($A_layer \times $L_d + $A_moe \times $L_m\right) \times $n",
        inputs=inputs,
        value=(layer.per_layer.value * dense + moe_layer.per_layer.value * moe) * in_flight.value,
        unit="B",
        source="Korthikanti et al. 2022 sec. 4.2.3 per layer; an MoE layer's tensors by parcalc.core.activations.moe_tensors",
        assumptions=moe_layer.per_layer.assumptions[-1:],
    )


def memory_breakdown(model: TransformerModel, par: Layout, setup: TrainingSetup,
                     progress: Callable[[int, int], None] | None = None) -> MemoryBreakdown:
    """Every pipeline stage's per-GPU memory; `.worst` is the fullest GPU. `progress(done, total)` after each
    stage's step walk (a framework's step memory: a second or more on a large pipeline), in thousandths of a stage of
    the pp walks this function runs (1000 pp in all), and within a multi-stage rank's walk as it goes (ZB-V and
    interleaved: up to a minute a rank at 512 micro-batches; memory_walk.WALK_PROGRESS)."""
    if model.mamba is not None:  # a Mamba-2 hybrid: its blocks by parcalc.core.mamba_memory
        from parcalc.core.mamba_memory import check_mamba_memory

        check_mamba_memory(model, par, setup.recompute, step_memory=setup.step_memory, fp8=setup.precision.quantised,
                           offload=setup.offload_activations or setup.offload_optimizer, recompute_layers=setup.recompute_layers)  # fmt: skip
    elif model.linear_attention is not None:  # a gated-DeltaNet hybrid: its mixers by parcalc.core.linear_attention_memory
        from parcalc.core.linear_attention_memory import check_linear_memory

        check_linear_memory(model, par, setup.recompute, step_memory=setup.step_memory)
        if setup.offload_activations or setup.recompute_layers is not None:
            raise InputError(f"--model: {model.name} has gated-DeltaNet layers; their memory is counted without activation offload "
                             "or --recompute-layers")
    check_parallelism(model, par, setup.micro_batches)
    check_context_parallel(model, setup.seq_len, par)
    setup = setup.for_model(model)
    if not (setup.reserve >= 0 and math.isfinite(setup.reserve)):
        raise InputError(f"--reserve: must be a size of at least 0 bytes, got {setup.reserve!r}")
    per = state_bytes(setup.precision, setup.optimizer, fp32_grads=setup.fp32_grads, model=model, moment_bytes=setup.moment_bytes,
                      grad_copies=setup.grad_copies)  # fmt: skip
    if setup.mla_up_proj and model.mla is None:
        raise InputError(f"--recompute-mla-up-proj: {model.name} has no multi-head latent attention (no mla: block)")
    from parcalc.core.recompute import check_modules

    check_modules(setup.recompute_modules, setup.recompute, model)
    layer = layer_activations(model, setup.activation_config(par))
    if setup.recompute_layers is not None:
        from parcalc.core.recompute import check_recompute_layers, chunk_layers

        split = stage_layers(model, par)
        check_recompute_layers(setup.recompute_layers, setup.recompute, chunk_layers(split, par.chunks), model)
    stages = tuple(stage_memory(model, par, setup, per, layer, s) for s in range(par.pp))
    if setup.step_memory != "textbook":
        from parcalc.core.memory_step_peak import with_step_peak
        from parcalc.core.memory_walk import WALK_PROGRESS

        split = stage_layers(model, par)
        walked = []
        for done, stage in enumerate(stages, start=1):
            # a multi-stage rank's walk (ZB-V, interleaved) reports its actions: the bar moves within a stage too, in
            # thousandths of a stage
            within = None if progress is None else (lambda k, n, s=done - 1: progress(1000 * s + 1000 * k // n, 1000 * par.pp))
            token = WALK_PROGRESS.set(within)
            try:
                walked.append(with_step_peak(model, par, setup, stage, split))
            finally:
                WALK_PROGRESS.reset(token)
            if progress is not None:
                progress(1000 * done, 1000 * par.pp)
        stages = tuple(walked)
    if not all(math.isfinite(s.total.value) for s in stages):
        raise InputError("--seq-len / --micro-batch: these sizes give more bytes than a number can hold; no GPU holds them")
    return MemoryBreakdown(model, par, setup, per, layer, stages)
