"""What every step-time estimate states beside its numbers, for `fit` and `scaling` alike: the inputs
(the model, the cluster, the kernel rates and links, with their sources) and the assumptions (the
gradient convention, the kernel set, the overlaps, the pipeline engine, the network)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Precision
from parcalc.results.parse import power_assumptions, power_terms

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Training
    from parcalc.core.model import TransformerModel
    from parcalc.derivation import Term


def _inputs(shape: TransformerModel, training: Training, cluster: Cluster) -> list[Term]:
    from parcalc.core.fit import EFFICIENCY_SOURCE
    from parcalc.core.timing.compute import memory_kernel_count
    from parcalc.core.timing.framework import kernel_set
    from parcalc.derivation import Term
    from parcalc.results.model import model_terms

    kset = kernel_set(training, cluster.framework)
    dropout = shape.dropout if training.dropout is None else training.dropout
    n_mem = memory_kernel_count(shape, kset in ("eager", "hf"), training.compiled, training.flash_attention, dropout, hf=kset == "hf")
    chosen = "--compile" if training.compiled else "--kernels" if training.kernels else f"the {cluster.framework.key} profile's"

    return model_terms(shape) + [
        Term("N", "N", "N", cluster.gpus, "", "GPUs"),
        Term("g", "g", "g", cluster.gpus_per_node, "", "GPUs per node"),
        Term("B", "B", "B", training.global_batch, "", "global batch (sequences per iteration)"),
        Term("s", "s", "s", training.seq_len, "", "sequence length"),
        Term("C", "C", "C", cluster.capacity, "B", f"memory of one {cluster.gpu_name}", cluster.capacity_source),
        Term("R", "R", "R", training.reserve, "B", "reserve (CUDA context, NCCL buffers, fragmentation)"),
        Term("peak", "F_peak", r"F_{\mathrm{peak}}", cluster.peak, "FLOP/s", f"{cluster.dtype} dense peak per GPU", cluster.peak_source),
        *power_terms(cluster.gpu, cluster.peak, cluster.dtype, cluster.peak_source),
        *_gemm_terms(cluster),
        Term("e_mem", "e_mem", r"e_{\mathrm{mem}}", cluster.spec.kernels.memory.value, "fraction", "share of HBM bandwidth memory-bound kernels sustain",
             cluster.spec.kernels.memory.source),
        Term("x", "x", "x", cluster.efficiency, "", "factor on every kernel's rate (--efficiency)", EFFICIENCY_SOURCE),
        Term("n_mem", "n_mem", r"n_{\mathrm{mem}}", n_mem, "",
             f"memory-bound kernels per layer, forward + backward: {'compiled' if training.compiled else kset} ({chosen})",
             "torch.compile (Inductor) fused groups" if training.compiled else cluster.framework.source("kernels") if not training.kernels
             else "--kernels"),
        Term("B_intra", "B_intra", r"B_{\mathrm{intra}}", cluster.intra.bandwidth_per_direction.value, "B/s",
             f"{cluster.intra.name} per GPU, each direction (link inside a node)", cluster.intra.bandwidth_per_direction.source),
        Term("B_nic", "B_nic", r"B_{\mathrm{NIC}}", cluster.inter.bandwidth_per_direction.value, "B/s",
             f"{cluster.inter.name}, one network card, each direction", cluster.inter.bandwidth_per_direction.source),
        Term("nics", "n_NIC", r"n_{\mathrm{NIC}}", cluster.fabric.nics_per_node, "", "network cards per node (rails)",
             cluster.gpu.node.source if cluster.gpu is not None and cluster.gpu.node is not None else "one per GPU (default)"),
    ]


def _gemm_terms(cluster: Cluster) -> list[Term]:
    """How the GEMMs are timed: by shape where the GPU's GEMMs were measured by shape (the tile model at a training step's
    clock), else the share of the peak large GEMMs sustain."""
    from parcalc.derivation import Term

    tiled = cluster.spec.tiled
    if tiled is None:
        return [Term("e_mm", "e_mm", r"e_{\mathrm{mm}}", cluster.spec.matmul.value, "fraction", "share of the peak large GEMMs sustain",
                     cluster.spec.matmul.source)]  # fmt: skip
    terms = [Term("r_sm", "r_SM", r"r_{\mathrm{SM}}", tiled.sm_rate, "FLOP/s", "one SM's GEMM main-loop rate, measured by shape on this GPU "
                  "(each GEMM timed by its tiles, waves, split of K and fixed costs: parcalc.core.timing.gemm_tiles)", tiled.source)]  # fmt: skip
    if tiled.clock_ratio != 1.0:
        terms.append(Term("clock_ratio", "f_train/f_sweep", r"f_{\mathrm{train}}/f_{\mathrm{sweep}}", tiled.clock_ratio, "",
                          f"a training step's SM clock under the power limit ({tiled.training_clock / 1e6:,.1f} MHz) over the GEMM "
                          f"sweep's ({tiled.clock / 1e6:,.1f} MHz)", tiled.clock_source))  # fmt: skip
    return terms


def _assumptions(shape: TransformerModel, training: Training, cluster: Cluster) -> tuple[str, ...]:
    from parcalc.core.activations import attention_assumption
    from parcalc.core.model_states import gradient_convention, state_bytes
    from parcalc.core.timing.compute import compile_assumption, kernel_set_assumption
    from parcalc.core.timing.framework import kernel_set
    from parcalc.results.memory import dropout_assumption
    from parcalc.results.parse import sixteen_bit_default

    per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=shape)
    framework = cluster.framework
    mixed = training.precision.value.startswith("mixed") or training.precision.quantised
    if mixed and training.fp32_grads == framework.fp32_grads:  # the profile decided: its source says why
        kind = "fp32" if training.fp32_grads else "16-bit"
        grads = (f"gradients in {kind}, {per.gradient:g} bytes ({per.total:g} per parameter with {training.optimizer.value}): "
                 f"the {framework.name} profile's default, {framework.source('fp32_grads')}; --fp32-grads / --no-fp32-grads override")  # fmt: skip
    else:
        given = "--fp32-grads" if training.fp32_grads else "--no-fp32-grads" if mixed else f"--precision {training.precision.value}"
        grads = f"gradients: {gradient_convention(per)} ({given})"
    if framework.step_memory != "textbook":  # the walks hold the parameters' own dtype (memory_step_peak.walked_state_bytes)
        from parcalc.core.memory_step_peak import walked_state_bytes

        walked = walked_state_bytes(framework.step_memory, training.precision, training.optimizer)
        dtype = "bf16" if walked.weight == 2 else "fp32"
        grads = (f"gradients where the {framework.key} profile's step is walked: in the parameters' dtype, {dtype}: weights "
                 f"{walked.weight:g}, gradients {walked.gradient:g}, optimizer {walked.optimizer:g} bytes ({walked.total:g} per "
                 f"parameter with {training.optimizer.value}; no master copy: the optimizer updates the {dtype} parameters in place"
                 + ("; DDP's gradient buckets another copy at dp > 1" if framework.step_memory == "hf-eager" else "; each 1/N a shard")
                 + f"); where it is not, the textbook's: {grads}")  # fmt: skip
    dropout = training.dropout if training.dropout is not None else shape.dropout
    hf = kernel_set(training, framework) == "hf"  # transformers' SDPA whatever the flag (refused with --no-flash-attention)
    _, no_bf16 = sixteen_bit_default(cluster.gpu)
    fp16 = (f"{no_bf16}: --precision {training.precision.value}, GEMMs at the {cluster.dtype} peak",) if no_bf16 and cluster.dtype == "fp16" else ()
    return (
        *fp16,
        grads,
        dropout_assumption(shape, dropout, given=training.dropout is not None),
        attention_assumption(training.flash_attention or hf, timed=True),
        (f"links: {cluster.intra.name} inside a node, {cluster.fabric.nics_per_node} x {cluster.inter.name} per node; Megatron-LM's rank "
         "order (TP, then DP, then PP); tp must divide the GPUs of a node unless --allow-cross-node-tp"),
        ("memory per GPU is parcalc memory's (Korthikanti et al. activations, ZeRO model states, 1F1B in-flight micro-batches)"
         if framework.step_memory == "textbook" else f"memory per GPU is the peak of one step of the {framework.key} profile's "
         f"{_walked_code(training, framework)} code as the "
         "caching allocator reserves it, plus the reserve (parcalc.core.memory_timeline, docs/memory-peak.md)"
         + ("" if framework.step_memory == "hf-eager" else "; under fully_shard over all dp ranks of a dense Llama-shaped model "
            "(parcalc.core.memory_fsdp), the textbook sum for other layouts")),
        "step time = compute + TP + bubble + PP sends + exposed DP/ZeRO + optimizer (parcalc.core.timing.step, docs/step-time.md)"
        + (" + offload (PCIe copies beyond their overlap window, the CPU optimizer step memory-bound on 614.4 GB/s of host DRAM per node: "
           "parcalc.core.timing.offload)" if training.offload_optimizer or training.offload_activations else ""),
        *(("--compile: " + compile_assumption(),) if training.compiled and kernel_set(training, framework) == "fused" else ()),
        kernel_set_assumption(kernel_set(training, framework) in ("eager", "hf"), training.compiled, hf=kernel_set(training, framework) == "hf"),
        *_modules_assumption(training),
        *((f"fp8 ({training.fp8_recipe} scaling): the linears' GEMMs "
           + ("by the GPU's FP8 tiles" if cluster.spec.tiled is not None else
              "at the FP8 peak times the preset's block-scaled MXFP8 share (kernels.matmul_mxfp8)"
              if _block_scaled(training, cluster) else "at the FP8 peak times the preset's fp8 share")
           + ", each input quantised by a memory-bound cast kernel (read once, once more per amax pass, written row- and column-wise in FP8); "
           "attention, the LM head and the MoE router in BF16; weights cast once per iteration (not timed)",)
          if training.precision is Precision.FP8 else ()),
        *(("fp4 (Transformer Engine's NVFP4 recipe): the transformer layers' linears' GEMMs (forward, input and weight "
           "gradients) at the FP4 peak times the preset's NVFP4 share (kernels.matmul.fp4), each input quantised by a "
           "memory-bound amax pass and one fused cast writing FP4 row-wise and Hadamard-transformed column-wise copies with an "
           "E4M3 scale per 16 values (gradients: a stochastic-rounding RNG kernel more); attention, the LM head and the MoE "
           "router in BF16; every layer in NVFP4 (Megatron-Bridge's Llama recipes keep none in BF16); weights cast once per "
           "iteration (not timed)",) if training.precision is Precision.FP4 else ()),
        (f"framework {cluster.framework.name}: overlaps grad reduce {str(cluster.overlap_grad).lower()}, param gather "
         f"{str(cluster.overlap_param).lower()}, TP {str(cluster.overlap_tp).lower()}"),
        *_pipeline_engine_assumption(training, cluster),
        ("--ideal-network: every collective and pipeline send takes 0 s (zero latency, infinite bandwidth); the links above are not "
         "used for time; host (PCIe) copies of --offload are not network and keep their time" if cluster.ideal_network else
         "collectives as NCCL would run them (ring or tree, LL / LL128 / Simple; src/graph/tuning.cc)"),
        "GB = 1e9 bytes, GiB = 2^30 bytes",
        *power_assumptions(cluster.gpu, mfu=True),
    )


def _block_scaled(training: Training, cluster: Cluster) -> bool:
    """Whether the FP8 GEMMs run at the GPU preset's block-scaled MXFP8 share (KernelRates.matmul_mxfp8)."""
    kernels = cluster.gpu.kernels if cluster.gpu is not None else None
    return training.fp8_recipe == "mxfp8" and kernels is not None and kernels.matmul_mxfp8 is not None


def _modules_assumption(training: Training) -> tuple[str, ...]:
    """--recompute-modules: what "recompute selective" means in every row, as `memory` states it (the
    settings carried the list, the text and the PDF said only "recompute selective")."""
    if training.recompute_modules is None:
        return ()
    from parcalc.core.recompute import MEGATRON_MODULE_SITES, MEGATRON_MODULES

    modules = training.recompute_modules
    return (f"recompute selective: Megatron-LM's modules {', '.join(modules)} (--recompute-modules; {MEGATRON_MODULES}): "
            + "; ".join(f"{m}: {MEGATRON_MODULE_SITES[m]}" for m in modules),)  # fmt: skip


def _pipeline_engine_assumption(training: Training, cluster: Cluster) -> tuple[str, ...]:
    """What changes when the framework runs its own pipeline engine (pp > 1), in words."""
    base = cluster.framework
    engine = base.at(2)
    if engine is base:
        return ()
    stages = "/".join(str(z) for z in engine.zero_stages)
    accumulate = engine.accumulation_bytes(training.precision)
    return ((f"with pp > 1, {base.name} runs its pipeline engine: ZeRO-{stages} only, gradients reduced once after the pipeline flush"
             f" (overlaps grad reduce {str(cluster.overlap_grad_at(2)).lower()}, param gather {str(cluster.overlap_param_at(2)).lower()})"
             + (f", every micro-batch's bf16 gradients added into fp32 copies ({accumulate:g} B of HBM traffic per parameter), "
                "which are what is reduced and which it holds beside them (2 + 4 bytes of gradients per parameter)" if accumulate else "")
             + f" ({engine.source('zero_stages').split(':')[0].split(' (')[0]})"),)


def _walked_code(training: Any, framework: Any) -> str:
    """Which code the profile's step walk follows: compiled (torchtitan's blocks; hf's whole model where its compiled walk
    has read the step) or eager."""
    if training.compiled and framework.step_memory == "torchtitan-eager":
        return "compiled (each block: parcalc.core.memory_torchtitan_compile)"
    if training.compiled and framework.step_memory == "hf-eager":
        return "compiled (the whole model and its loss, where read: parcalc.core.memory_hf_compiled)"
    return "eager"
