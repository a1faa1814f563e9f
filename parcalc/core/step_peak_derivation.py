"""The step walks' peaks as Derivations (parcalc.core.memory_timeline for hf, parcalc.core.memory_fsdp for FSDP2):
the parts live at the peak as inputs, each with the source of what it holds; the phase and the largest tensors in the
assumptions; and what the caching allocator reserves around the peak."""

from __future__ import annotations

from collections.abc import Mapping

from parcalc.core.allocator import ALLOCATOR_SOURCE, EXPANDABLE_SOURCE
from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_fsdp import FSDP_SOURCES, FsdpStep, Replayed
from parcalc.core.memory_timeline import HF_SOURCES, MEASURED, REPLAYED_STEPS, HfStep
from parcalc.core.memory_torchao_float8 import AO_SOURCES
from parcalc.core.memory_torchtitan import TT_SOURCES
from parcalc.core.memory_walk import StepPeak
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term

# Each kind of what is live, as a symbol: M_<symbol>
SYMBOLS = {"weights": "W", "sharded parameters": "Ps", "optimizer states": "O", "sharded gradients": "Gs", "unsharded parameters": "Pu",
           "gradients": "G", "all-gather buffers": "AG", "reduce-scatter buffers": "RS", "activations": "A",
           "autocast weight copies": "C", "logits and loss": "X", "temporaries": "Tmp", "workspace": "Ws", "buffers": "B"}  # fmt: skip
TEMPORARIES = "the op running at the peak: its outputs and scratch tensors"
STEADY_STATE = "steady state: AdamW's states exist, gradients freed by zero_grad(set_to_none=True) before the step"


def model_code(model: TransformerModel) -> str:
    """The transformers class whose step the walks follow."""
    return "MixtralForCausalLM" if model.moe else "LlamaForCausalLM"


def _model_tensors(model: TransformerModel) -> dict[str, str]:
    """Sources of what the model code itself keeps: activations, the loss's tensors, the cuBLAS workspace."""
    blocks = ("rmsnorm", *(("qk_norm",) if model.qk_norm else ()), "attention", "sdpa", "moe" if model.moe else "mlp", "residual")
    return {"activations": "; ".join(HF_SOURCES[k] for k in blocks), "logits and loss": f"{HF_SOURCES['loss']}; {HF_SOURCES['loss_backward']}",
            "temporaries": TEMPORARIES, "workspace": HF_SOURCES["cublas"]}  # fmt: skip


def _peak(peak: StepPeak, label: str, sources: Mapping[str, str], source: str, assumptions: tuple[str, ...]) -> Derivation:
    inputs = tuple(Term(f"M_{SYMBOLS[kind]}", f"M_{SYMBOLS[kind]}", rf"M_{{\mathrm{{{SYMBOLS[kind]}}}}}", value, "B",
                        f"{kind} live at the peak", sources[kind]) for kind, value in peak.parts if value)  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in inputs)
    top = "; ".join(f"{t.what} {t.bytes / 2**30:.2f} GiB" for t in peak.live[:8])
    return Derivation(key="step_peak", label=label, symbol="M_peak", latex_symbol=r"M_{\mathrm{peak}}", formula=formula,
                      formula_latex=formula, inputs=inputs, value=peak.allocated, unit="B", source=source,
                      assumptions=(f"the peak happens in the phase '{peak.phase}'; largest live there: {top}", *assumptions))  # fmt: skip


def peak_derivation(peak: StepPeak, model: TransformerModel, step: HfStep) -> Derivation:
    """The hf walk's peak (parcalc.core.memory_timeline)."""
    sources = {"weights": HF_SOURCES["adamw"], "optimizer states": HF_SOURCES["adamw"], "gradients": HF_SOURCES["grads"],
               "autocast weight copies": HF_SOURCES["autocast_cache"], **_model_tensors(model)}  # fmt: skip
    checkpoint = ", each decoder layer checkpointed" if step.recompute is Recompute.FULL else ""
    if step.compiled:
        from parcalc.core.memory_hf_compiled import HF_COMPILE_SOURCES, compiled_walk_gaps

        gaps = compiled_walk_gaps(model, step.precision, step.recompute)
        if not gaps:
            compiled = "; ".join(HF_COMPILE_SOURCES.values())
            sources = {**sources, "activations": compiled, "autocast weight copies": HF_COMPILE_SOURCES["partitioner"],
                       "logits and loss": compiled, "temporaries": f"{TEMPORARIES}: {HF_COMPILE_SOURCES['inductor']}"}  # fmt: skip
            return _peak(peak, f"Peak allocated during the step (hf, compiled: {peak.phase})", sources,
                         f"a walk of one step of transformers' {model_code(model)} compiled whole with its loss "
                         f"({step.precision.value}, {step.optimizer.value}) as Inductor's generated code allocates and frees, "
                         "each tensor in the caching allocator's 512-byte blocks; parcalc.core.memory_hf_compiled; checked on the "
                         "CPU against every allocation of a compiled step (tests/ground_truth/test_torch_memory_hf_compiled.py); "
                         "a prediction on a GPU: no compiled step was measured there",
                         (STEADY_STATE, "SDPA on fused kernels: q, k, v, output and logsumexp saved, kernel-internal scratch not counted",
                          "no attention mask (no padding): HF passes is_causal to SDPA"))  # fmt: skip
        checkpoint += f"; --compile: the eager walk stands (the compiled walk has not read {', '.join(gaps)})"
    return _peak(peak, f"Peak allocated during the step (hf: {peak.phase})", sources,
                 f"a walk of one step of transformers' {model_code(model)} ({step.precision.value}, {step.optimizer.value}{checkpoint}) "
                 "taking the maximum of what is live, each tensor in the caching allocator's 512-byte blocks; "
                 f"parcalc.core.memory_timeline; checked against {MEASURED}",
                 (STEADY_STATE, "SDPA on fused kernels (cuDNN / flash): q, k, v, output and logsumexp saved, kernel-internal scratch not counted",
                  "no attention mask (no padding): HF passes is_causal to SDPA"))  # fmt: skip


def fsdp_peak_derivation(peak: StepPeak, model: TransformerModel, step: FsdpStep, profile: str) -> Derivation:
    """The FSDP2 walk's peak (parcalc.core.memory_fsdp)."""
    sources = {"sharded parameters": FSDP_SOURCES["shards"], "optimizer states": FSDP_SOURCES["adamw"],
               "sharded gradients": FSDP_SOURCES["reduce"], "unsharded parameters": f"{FSDP_SOURCES['unsharded']}; {FSDP_SOURCES['reshard']}",
               "gradients": f"unsharded, until the block's reduce-scatter: {HF_SOURCES['grads']}; {FSDP_SOURCES['reduce']}",
               "all-gather buffers": f"{FSDP_SOURCES['all_gather']}; {FSDP_SOURCES['prefetch']}",
               "reduce-scatter buffers": FSDP_SOURCES["reduce"], **_model_tensors(model)}  # fmt: skip
    checkpoint = {Recompute.FULL: ", each block checkpointed", Recompute.OP: ", torchtitan's selective op checkpointing"}.get(step.recompute, "")
    if step.model_code == "torchtitan":
        sources = {**sources, "activations": f"{TT_SOURCES['model']}; {TT_SOURCES['ac']}; {TT_SOURCES['sac_cache']}",
                   "logits and loss": f"{TT_SOURCES['loss']}; {HF_SOURCES['loss_backward']}", "buffers": TT_SOURCES["model"]}
        code = "torchtitan's Llama Transformer (parcalc.core.memory_torchtitan) and train.py's fp32 cross-entropy"
        if model.moe is not None:  # torchtitan's MoE in place of the FeedForward (parcalc.core.memory_torchtitan_moe)
            from parcalc.core.memory_torchtitan_moe import TT_MOE_SOURCES

            moe = "; ".join(TT_MOE_SOURCES.values())
            sources = {**sources, "activations": f"{sources['activations']}; {moe}", "temporaries": f"{sources.get('temporaries', '')}; {moe}".lstrip("; "),
                       "buffers": f"{sources['buffers']}; {TT_MOE_SOURCES['moe']}"}  # fmt: skip
            shared = f", {model.moe.shared_experts} shared" if model.moe.shared_experts else ""
            which = "each block's" if model.moe.first_dense_layers == 0 and model.moe.every == 1 else "the MoE layers'"
            if which != "each block's":  # the dense layers run the FeedForward (memory_torchtitan.layer_shapes)
                from parcalc.core.memory_torchtitan import TT_MOE_DENSE_SOURCE

                sources = {**sources, "activations": f"{sources['activations']}; {TT_MOE_DENSE_SOURCE}"}
            code += (f", {which} FeedForward torchtitan's MoE ({model.moe.experts} routed experts, top-{model.moe.top_k}{shared}: its router "
                     "in fp32, local token dispatcher and grouped experts at ep = 1; parcalc.core.memory_torchtitan_moe)")
        if model.mla is not None:  # DeepSeek's latent attention (memory_torchtitan_mla)
            from parcalc.core.memory_torchtitan_mla import TT_MLA_SOURCES

            sources = {**sources, "activations": f"{sources['activations']}; {'; '.join(TT_MLA_SOURCES.values())}",
                       "buffers": f"{sources['buffers']}; {TT_MLA_SOURCES['model']}"}  # fmt: skip
            m = model.mla
            code += (f", its attention DeepSeek's multi-head latent attention as torchtitan's deepseek_v3 runs it (q_lora_rank "
                     f"{m.q_lora_rank}, kv_lora_rank {m.kv_lora_rank}, rope {m.qk_rope_head_dim}, FlexAttention, a RoPE cache "
                     "in every layer; parcalc.core.memory_torchtitan_mla)")
        if model.qk_norm:  # Qwen3's q_norm / k_norm in the attention (memory_torchtitan.head_norms_forward)
            from parcalc.core.memory_torchtitan import TT_QK_NORM_SOURCES

            sources = {**sources, "activations": f"{sources['activations']}; {'; '.join(TT_QK_NORM_SOURCES.values())}"}
            code += (", its attention with Qwen3's q_norm and k_norm on the head dim before RoPE (nn.RMSNorm's fused CUDA kernel: "
                     "the projections' outputs and an fp32 rstd a head saved; parcalc.core.memory_torchtitan.head_norms_forward)")
        if step.tp > 1:
            sources = {**sources, "activations": f"{sources['activations']}; {TT_SOURCES['tp']}; {TT_SOURCES['tp_collectives']}; "
                       f"{TT_SOURCES['tp_accumulate']}", "logits and loss": f"{TT_SOURCES['loss']}; {TT_SOURCES['loss_parallel']}"}
            code = (f"torchtitan's Llama Transformer under apply_tp over {step.tp} ranks, sequence and loss parallel "
                    "(parcalc.core.memory_torchtitan_tp)")
        if step.cp > 1:  # torch's context_parallel and its ring attention (parcalc.core.memory_torchtitan_cp)
            from parcalc.core.memory_torchtitan_cp import CP_SOURCES

            ring = "; ".join(CP_SOURCES.values())
            sources = {**sources, "activations": f"{sources['activations']}; {ring}", "temporaries": f"{sources.get('temporaries', '')}; {ring}".lstrip("; ")}
            passed = "all-gathered once (allgather rotate)" if step.cp_rotate == "allgather" else "passed on every step (alltoall rotate)"
            code += (f", its sequence sharded over {step.cp} context-parallel ranks (s / cp tokens each, torch's ring attention "
                     f"with the K/V {passed}, the parameters sharded over dp x cp = {step.shards} ranks: parcalc.core."
                     "memory_torchtitan_cp, CP rank 0)")
        if step.precision is Precision.FP8:  # torchao's Float8Linear in each block (parcalc.core.memory_torchao_float8)
            float8 = f"{AO_SOURCES['converter']}; {AO_SOURCES['linear']}; {AO_SOURCES['cast']}"
            sources = {**sources, "activations": f"{sources['activations']}; {float8}", "temporaries": f"{sources['temporaries']}; {float8}",
                       **({"unsharded parameters": f"{sources['unsharded parameters']}; {AO_SOURCES['all_gather']}",
                           "all-gather buffers": f"{sources['all-gather buffers']}; {AO_SOURCES['all_gather']}"} if step.float8_all_gather else {})}  # fmt: skip
            code += (", its block linears torchao's Float8Linear (tensorwise scaling)"
                     + (", the weights all-gathered in FP8" if step.float8_all_gather else ""))
        if step.compiled:
            from parcalc.core.memory_torchtitan_compile import COMPILE_SOURCES

            sources = {**sources, "activations": f"{sources['activations']}; {'; '.join(COMPILE_SOURCES.values())}"}
            code = (f"{code}, each block under torch.compile (Inductor's generated forward and backward, buffer by buffer: "
                    "parcalc.core.memory_torchtitan_compile)")
        if step.compiled_loss:  # the loss compiled too (parcalc.core.memory_compiled_loss)
            from parcalc.core.memory_compiled_loss import LOSS_SOURCES

            sources = {**sources, "logits and loss": "; ".join(LOSS_SOURCES.values())}
            code += ", and the loss (its fused bf16 cross-entropy: parcalc.core.memory_compiled_loss)"
    else:
        code = (f"transformers' {model_code(model)} and its fp32 cross-entropy; torchtitan's own Llama differs in RoPE (complex "
                "fp32 products) and repeat_kv")
    reduce = "fp32" if step.reduce_bytes == 4 else "bf16"
    accumulation = "no gradient accumulation (a reduce-scatter after every backward)"
    if step.pp > 1:
        from parcalc.core.memory_pipeline_stage import PP_SOURCES

        sources = {**sources, "gradients": PP_SOURCES["no_sync"], "buffers": f"{PP_SOURCES['buffers']}; {TT_SOURCES['model']}"}
        if step.pp_dualpipev:  # the rank's two stages in a V under DualPipeV (parcalc.core.memory_pipeline_dualpipe)
            from parcalc.core.memory_pipeline_dualpipe import DUALPIPE_SOURCES
            from parcalc.core.memory_pipeline_zero_bubble import ZERO_BUBBLE_SOURCES
            from parcalc.core.memory_walk import ACCUMULATE_GRAD

            sources = {**sources, "activations": f"{DUALPIPE_SOURCES['overlap']}; {DUALPIPE_SOURCES['full']}; {ZERO_BUBBLE_SOURCES['split']}",
                       "gradients": f"{sources['gradients']}; {ACCUMULATE_GRAD}"}
            first, second = step.pp_stage, 2 * step.pp - 1 - step.pp_stage
            code = (f"{code}, pipeline rank {step.pp_stage + 1} of {step.pp}: stages {first} and {second} of {2 * step.pp} (layers "
                    f"{step.pp_chunks[0]} and {step.pp_chunks[1]}) under ScheduleDualPipeV's runtime over {step.micro_batches} "
                    f"micro-batches, each OVERLAP_F_B pair a forward then a whole backward, the warm-up's and the cool-down's "
                    f"backwards split in I and W (parcalc.core.memory_pipeline_dualpipe: {DUALPIPE_SOURCES['order']})")
        elif step.pp_zero_bubble:  # the rank's two stages in a V (parcalc.core.memory_pipeline_zero_bubble)
            from parcalc.core.memory_pipeline_zero_bubble import ZERO_BUBBLE_SOURCES

            sources = {**sources, "activations": ZERO_BUBBLE_SOURCES["split"]}
            first, second = step.pp_stage, 2 * step.pp - 1 - step.pp_stage
            code = (f"{code}, pipeline rank {step.pp_stage + 1} of {step.pp}: stages {first} and {second} of {2 * step.pp} (layers "
                    f"{step.pp_chunks[0]} and {step.pp_chunks[1]}) under ScheduleZBVZeroBubble's runtime over {step.micro_batches} "
                    f"micro-batches, each backward split in I and W (parcalc.core.memory_pipeline_zero_bubble: {ZERO_BUBBLE_SOURCES['order']})")
        elif step.pp_chunks:  # the rank's virtual stages (parcalc.core.memory_pipeline_interleaved)
            from parcalc.core.memory_pipeline_interleaved import INTERLEAVED_SOURCES

            code = (f"{code}, pipeline rank {step.pp_stage + 1} of {step.pp}: virtual stages of layers {', '.join(map(str, step.pp_chunks))} "
                    f"under ScheduleInterleaved1F1B's runtime over {step.micro_batches} micro-batches "
                    f"(parcalc.core.memory_pipeline_interleaved: {INTERLEAVED_SOURCES['order']})")
        else:
            code = (f"{code}, stage {step.pp_stage + 1} of {step.pp} (layers {step.stage_layers}) under Schedule1F1B over "
                    f"{step.micro_batches} micro-batches (parcalc.core.memory_pipeline_stage: {PP_SOURCES['order']})")
        accumulation = ("the unsharded gradients accumulated in fp32 across the micro-batches and reduce-scattered after the "
                        "last backward, as torch's pipelining runs FSDP2")
    return _peak(peak, f"Peak allocated during the step ({profile}: {peak.phase})", sources,
                 f"a walk of one step under fully_shard over {step.shards} ranks (one unit per transformer block and the root; "
                 f"{step.precision.value}, reduce in {reduce}, {step.optimizer_impl} {step.optimizer.value}{checkpoint}) taking the "
                 "maximum of what is live, each tensor in the caching allocator's 512-byte blocks; parcalc.core.memory_fsdp; "
                 "checked against torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker under FakeTensorMode; the model "
                 f"code's tensors as parcalc.core.memory_timeline walks them ({MEASURED})",
                 (f"the model code walked is {code}", STEADY_STATE,
                  f"{accumulation}, no CPU offload, no HSDP replicas"))  # fmt: skip


def reserved_derivation(peak: StepPeak) -> Derivation:
    allocated = Term("M_peak", "M_peak", r"M_{\mathrm{peak}}", peak.allocated, "B", "peak allocated (512-byte blocks)")
    if peak.reserved_by == "streams":
        symbols = {"default": "def", "all-gather copy-in": "AG", "reduce-scatter": "RS"}
        pools = tuple(Term(f"R_{symbols[name]}", f"R_{symbols[name]}", rf"R_{{\mathrm{{{symbols[name]}}}}}", size, "B",
                           f"the {name} stream's pool: its own peak of live blocks, rounded to the allocator's segments",
                           FSDP_SOURCES["streams"]) for name, size in peak.stream_pools)  # fmt: skip
        formula = " + ".join(f"${t.key}" for t in pools)
        return Derivation("step_reserved", "Reserved by the caching allocator: each CUDA stream's pool at its own peak", "M_res",
                          r"M_{\mathrm{res}}", formula, formula, pools, peak.reserved, "B", f"{ALLOCATOR_SOURCE}; {FSDP_SOURCES['streams']}",
                          (f"the step's allocated peak is {peak.allocated / 2**30:.2f} GiB; the pools never shrink (no empty_cache), "
                           "so at steady state each holds its own peak: the all-gather outputs on the copy-in stream, the sharded "
                           "gradients on the reduce-scatter stream, the rest on the default stream",
                           "within a pool, fragmentation is not derived here: step_reserved_replayed replays the allocator over a "
                           "run (memory_fsdp.replayed_reserve), which memory's total, fit and the rows fit's search shows take"))  # fmt: skip
    if peak.reserved_by == "replayed":
        held = Term("R_frag", "R_frag", r"R_{\mathrm{frag}}", peak.reserved - peak.allocated, "B",
                    "segments the allocator holds beyond the peak's live blocks: 2 MiB / 20 MiB rounding and cached free blocks "
                    "that no later request fitted, from its block rules replayed over the steps' allocations in order "
                    "(parcalc.core.allocator.CachingAllocator)", ALLOCATOR_SOURCE)  # fmt: skip
        return Derivation("step_reserved", "Reserved by the caching allocator (its rules replayed over the steps)", "M_res",
                          r"M_{\mathrm{res}}", "$M_peak + $R_frag", "$M_peak + $R_frag", (allocated, held), peak.reserved, "B",
                          f"{ALLOCATOR_SOURCE}; best fit, block splitting and merging (get_free_block, should_split, "
                          "try_merge_blocks), segments kept; checked against max_memory_reserved measured on one H200 "
                          "(../shared/measurements/h200-2026-11-28/train-steps.json)",
                          (f"replayed: the model built on the GPU, the first step (optimizer states created at its end) and "
                           f"{REPLAYED_STEPS - 1} steady ones, one CUDA stream, expandable_segments off",))  # fmt: skip
    rounding = Term("R_seg", "R_seg", r"R_{\mathrm{seg}}", peak.reserved - peak.allocated, "B",
                    "large allocations rounded up to the allocator's 2 MiB segments", ALLOCATOR_SOURCE)
    return Derivation("step_reserved", "Reserved by the caching allocator at the peak (rounding only)", "M_res", r"M_{\mathrm{res}}",
                      "$M_peak + $R_seg", "$M_peak + $R_seg", (allocated, rounding), peak.reserved, "B", ALLOCATOR_SOURCE,
                      ("fragmentation (cached free blocks that no request fits) is not derived: it depends on the order and sizes of "
                       "every allocation before the peak; measured on the H200: reserved 3.7-5.2 % above allocated "
                       "(train-steps.json), which this rounding does not include",))  # fmt: skip


STREAM_SYMBOLS = {"default": "def", "all-gather copy-in": "AG", "reduce-scatter": "RS"}


def replayed_reserved_derivation(replayed: Replayed) -> Derivation:
    """What the caching allocator reserves over a run of the FSDP2 step (parcalc.core.memory_fsdp.replayed_reserve): each
    stream's pool at its own peak (step_reserved's terms) and what the replayed allocator holds on that stream beyond it,
    its fragmentation; the sum is torch.cuda's reserved_bytes.all.peak over the run."""
    terms = []
    for (name, pool), (_, held) in zip(replayed.stream_pools, replayed.stream_reserved, strict=True):
        s = STREAM_SYMBOLS[name]
        terms.append(Term(f"R_{s}", f"R_{s}", rf"R_{{\mathrm{{{s}}}}}", pool, "B",
                          f"the {name} stream's pool at its own peak of live blocks, rounded to the allocator's segments", FSDP_SOURCES["streams"]))
        terms.append(Term(f"F_{s}", f"F_{s}", rf"F_{{\mathrm{{{s}}}}}", held - pool, "B",
                          f"the {name} stream's fragmentation: what the replayed allocator maps on it beyond that",
                          EXPANDABLE_SOURCE if replayed.expandable else ALLOCATOR_SOURCE))  # fmt: skip
    formula = " + ".join(f"${t.key}" for t in terms)
    setting = ("expandable_segments:True (one segment per stream and pool, grown in 2 MiB / 20 MiB pages)" if replayed.expandable
               else "expandable_segments off (a cudaMalloc'd segment per request no cached block serves)")
    return Derivation("step_reserved_replayed", "Reserved by the caching allocator over a run: its rules replayed per CUDA stream",
                      "M_res,run", r"M_{\mathrm{res,run}}", formula, formula, tuple(terms), replayed.reserved, "B",
                      f"{EXPANDABLE_SOURCE if replayed.expandable else ALLOCATOR_SOURCE}; {FSDP_SOURCES['streams']}; parcalc.core.memory_fsdp.replayed_reserve",
                      (f"replayed: the sharded model built on the GPU, the first step (optimizer states created at its end) and "
                       f"{replayed.steps - 1} steady ones, each tensor on its stream, {setting}; nothing released (no empty_cache, "
                       "no out-of-memory retry), so the end is the peak",
                       "what memory's total, fit and the rows fit's search shows add the reserve to (its fragmentation in place of "
                       "the default reserve's 0.5 GiB allowance); a stream's F is negative where whole pages pack its blocks closer "
                       "than a 2 MiB-rounded segment each"))  # fmt: skip


def replay_floor_derivation(floor: float, expandable: bool) -> Derivation:
    """The least the caching allocator replayed over a run of the FSDP2 step can reserve (memory_fsdp.StreamWalk.floor): a
    screen, never a shown total but for a row whose floor is already over the capacity."""
    unit = "20 MiB pages" if expandable else "2 MiB"
    term = Term("R_floor", "R_floor", r"R_{\mathrm{floor}}", floor, "B",
                f"each stream's live blocks at its own peak, its small pool rounded up to 2 MiB and its large pool to {unit}",
                "parcalc.core.allocator.reserved_floor_of_sums")  # fmt: skip
    return Derivation("step_reserved_floor", "Reserved by the caching allocator over a run, at least (the floor of its replay)",
                      "M_res,min", r"M_{\mathrm{res,min}}", "$R_floor", "$R_floor", (term,), floor, "B",
                      f"{EXPANDABLE_SOURCE if expandable else ALLOCATOR_SOURCE}; parcalc.core.allocator.reserved_floor_of_sums",
                      ("a pool reserves at least what it has allocated, in whole segments or pages, and keeps it for the run: so the "
                       "replay reserves at least this; fragmentation beyond it is the replay's",))  # fmt: skip
