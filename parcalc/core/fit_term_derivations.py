"""fit's derivations of the step's exposed terms, one function a term (t_host, t_offload, t_cp, t_ep, t_dp, the kinds of
t_compute, DualPipe's note), and the Term helper they and parcalc.core.fit's estimate build their inputs with."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parcalc.core.fit_config import Cluster, Config, Training
from parcalc.core.memory import MemoryBreakdown
from parcalc.core.model import TransformerModel
from parcalc.core.timing.network import placement
from parcalc.core.timing.terms import (
    CP,
    DP,
    EP,
    HOST,
    KERNEL_SOURCE,
    KIND_TERMS,
    NCCL_SOURCE,
    OFFLOAD,
    derivation,
)
from parcalc.derivation import Derivation, Term


def term_of(key: str, symbol: str, value: float, unit: str, description: str, source: str = "", latex: str | None = None) -> Term:
    return Term(key, symbol, latex or latex_symbol(symbol), float(value), unit, description, source)


def latex_symbol(symbol: str) -> str:
    r"""A plain symbol in LaTeX: a subscript of several letters braced and upright (C_tp: C_{\mathrm{tp}}, not C_t p)."""
    base, _, sub = symbol.partition("_")
    return symbol if len(sub) <= 1 else rf"{base}_{{\mathrm{{{sub}}}}}"


def kind_derivations(kinds: Any, accumulate: float, m_term: Term, compute: Derivation) -> tuple[Derivation, Derivation, Derivation]:
    """t_compute split by kind of work (parcalc.core.timing.kinds): each m x that kind's kernels of one micro-batch on the
    slowest stage (forward, backward, recomputed); the fp32 gradient accumulation counts as memory-bound."""
    from parcalc.core.timing.kinds import KIND_TEXT

    values = {"gemm": kinds.gemm, "attention": kinds.attention, "memory": kinds.memory + accumulate}
    out = []
    for kind, key, label, symbol, latex, per in KIND_TERMS:
        value, what = values[kind], KIND_TEXT[kind]
        inputs = [m_term, term_of(per, per, value, "s", f"{what}, one micro-batch on the slowest stage")]
        out.append(derivation(key, label, symbol, latex, f"$m × ${per}", inputs, float(m_term.value * value), "s", KERNEL_SOURCE,
                               (f"t_gemm + t_attention + t_memory_bound = t_compute ({compute.value:.6g} s)",)))  # fmt: skip
    return out[0], out[1], out[2]


def host_costs(cluster: Cluster) -> Any:
    """The host's time per kernel issued (parcalc.core.timing.host.HostCosts), where the framework profile models its host:
    the GPU preset's where a trace of this machine calibrated it (`calibrate trace`), else the profile's; None: not modelled."""
    costs = cluster.framework.host
    if costs is not None and cluster.gpu is not None and cluster.gpu.host is not None:
        return cluster.gpu.host
    return costs


def compiled_host(training: Training, cluster: Cluster) -> Any:
    """The host's time per kernel of compiled code (parcalc.core.timing.host.CompiledHostCosts) when the model is compiled
    and the framework profile gives it; None: the eager costs stand for it."""
    return cluster.framework.compiled_host if training.compiled and host_costs(cluster) is not None else None


def phase_hosts(forward: dict[str, int], backward: dict[str, int], training: Training, cluster: Cluster) -> tuple[float, float]:
    """(H_f, H_b): seconds the host takes to issue one micro-batch's forward and backward, of these kernels by kind
    (parcalc.core.timing.step.stage_launches_by_kind): kernels x the eager costs per phase, or under --compile each kind x
    the compiled code's cost (parcalc.core.timing.host)."""
    compiled = compiled_host(training, cluster)
    if compiled is not None:
        return (compiled.phase(forward["memory"], forward["gemm"], forward["attention"], backward=False),
                compiled.phase(backward["memory"], backward["gemm"], backward["attention"], backward=True))  # fmt: skip
    costs = host_costs(cluster)
    return sum(forward.values()) * costs.forward, sum(backward.values()) * costs.backward


# t_host's formula under --compile: each phase's host time by kind of kernel (parcalc.core.timing.host.CompiledHostCosts)
COMPILED_HOST_FORMULA = ("Σ over the segments between synchronisations of max(ΣH, max_j(Σ_{i<j} H_i + Σ_{i≥j} G_i)) - ΣG over their "
                         "phases (forward, backward) × $m, the optimizer's Python, its launches; "
                         "H = $g_f × $c_g + $k_f × $c_mm + $a_f × $c_af + ($g_f + $k_f + $a_f) × $c_w, "
                         "$g_b × $c_g + $k_b × $c_mm + $a_b × $c_ab + ($g_b + $k_b + $a_b) × $c_w, $n_p × $c_p, "
                         "$n_o × $c_o; G = $G_f, $G_b, 0, $G_o")  # fmt: skip


def host_derivation(model: TransformerModel, config: Config, training: Training, cluster: Cluster, stage: Any, m: int,
                     t_opt: float) -> Derivation | None:  # fmt: skip
    """t_host: the GPU waiting for the host that issues eager PyTorch's kernels one by one (parcalc.core.timing.host), for a
    framework profile that measured its host (`host:`), one stage (pp = 1: the phases are the micro-batches' passes); under
    --compile the model's kernels at compiled code's costs (`compiled_host:`), the optimizer's at the eager ones."""
    from parcalc.core.comm.tensors import parameter_tensors
    from parcalc.core.timing.host import MULTI_TENSOR_SOURCE, host_exposed_segments, optimizer_launches, step_segments
    from parcalc.core.timing.step import stage_launches_by_kind

    costs = host_costs(cluster)
    if costs is None or config.layout.pp > 1:
        return None
    forward, backward = stage_launches_by_kind(model, config, training, cluster)
    n_f, n_b = sum(forward.values()), sum(backward.values())
    h_f, h_b = phase_hosts(forward, backward, training, cluster)
    sizes = [x.rows * x.cols for x in parameter_tensors(model)] if config.layout.tp == 1 else []
    stepped = bool(sizes) and not training.offload_optimizer and config.layout.zero == 0
    n_opt = optimizer_launches(sizes) if stepped else 0
    n_par = len(sizes) if stepped else 0
    synced = cluster.framework.sync_after_backward
    g_f, g_b = float(stage.forward), float(stage.backward + stage.recompute)
    value = host_exposed_segments(step_segments(h_f, g_f, h_b, g_b, m, n_par * costs.prelude, n_opt * costs.optimizer, t_opt, synced))
    compiled = compiled_host(training, cluster)
    optimizer_counts = [term_of("n_o", "n_o", n_opt, "", "kernels of the fused optimizer step (" + MULTI_TENSOR_SOURCE + ")"),
                        term_of("n_p", "n_p", n_par, "", "parameter tensors the optimizer's Python walks before its first launch")]  # fmt: skip
    optimizer_costs = [term_of("c_o", "c_o", costs.optimizer, "s", "host time per optimizer kernel", costs.source),
                       term_of("c_p", "c_p", costs.prelude, "s", "host time per parameter tensor of the optimizer's Python before its "
                               "first launch", costs.source)]  # fmt: skip
    if compiled is None:
        counts = [term_of("n_f", "n_f", n_f, "", "kernels of one micro-batch's forward on the stage (parcalc's kernel list, one launch each)"),
                  term_of("n_b", "n_b", n_b, "", "kernels of its backward (and recomputed forward)")]  # fmt: skip
        model_costs = [term_of("c_f", "c_f", costs.forward, "s", "host time per forward kernel (Python model code, dispatcher, launch)", costs.source),
                       term_of("c_b", "c_b", costs.backward, "s", "host time per backward kernel (autograd engine, launch)", costs.source)]  # fmt: skip
        formula = None
    else:
        src = compiled.source
        counts = [term_of("g_f", "g_f", forward["memory"], "", "generated (Triton) kernels of one micro-batch's compiled forward"),
                  term_of("k_f", "k_f", forward["gemm"], "", "extern GEMMs of its forward (extern_kernels.mm)"),
                  term_of("a_f", "a_f", forward["attention"], "", "attention ops of its forward (the SDPA ATen op)"),
                  term_of("g_b", "g_b", backward["memory"], "", "generated kernels of its compiled backward (and recomputed forward)"),
                  term_of("k_b", "k_b", backward["gemm"], "", "extern GEMMs of its backward"),
                  term_of("a_b", "a_b", backward["attention"], "", "attention ops of its backward")]  # fmt: skip
        model_costs = [term_of("c_g", "c_g", compiled.generated, "s", "host time per generated kernel's launch (Inductor's "
                               "CachingAutotuner.run, launcher, cuLaunchKernel)", src),
                       term_of("c_mm", "c_mm", compiled.gemm, "s", "host time per extern GEMM (aten::mm and cuBLASLt's host work)", src),
                       term_of("c_af", "c_af", compiled.attention_forward, "s", "host time per attention op forward (SDPA's ATen op)", src),
                       term_of("c_ab", "c_ab", compiled.attention_backward, "s", "host time per attention op backward", src),
                       term_of("c_w", "c_w", compiled.wrapper, "s", "host time of the wrapper's own lines per kernel (the output's "
                               "allocation, views, checks)", src)]  # fmt: skip
        formula = COMPILED_HOST_FORMULA
    inputs = [term_of("m", "m", m, "", "micro-batches per replica"), *counts, *optimizer_counts, *model_costs, *optimizer_costs,
              term_of("G_f", "G_f", g_f, "s", "GPU time of one micro-batch's forward"), term_of("G_b", "G_b", g_b, "s", "GPU time of its backward"),
              term_of("G_o", "G_o", t_opt, "s", "GPU time of the optimizer step")]  # fmt: skip
    loop = (("the loop synchronises after every micro-batch's backward (" + cluster.framework.source("sync_after_backward")
             + "): each micro-batch and the optimizer step are fluid models of their own") if synced
            else "the host runs ahead of the GPU through the whole step (no synchronisation inside it)")  # fmt: skip
    assumptions: tuple[str, ...] = (loop,)
    if compiled is not None:
        assumptions += ("compiled: the model's kernels issued from Inductor's generated wrapper (one autograd node for the whole "
                        "backward), the optimizer eager; the compiled call's fixed host work (Dynamo's guards, AOTAutograd's "
                        "runtime wrappers, the wrapper's input checks) not counted",)  # fmt: skip
    return HOST.derivation(inputs, value, formula=formula, assumptions=assumptions)


def offload_derivation(model: TransformerModel, config: Config, training: Training, cluster: Cluster, breakdown: MemoryBreakdown,
                        stage: Any, m: int, value: float) -> Derivation:  # fmt: skip
    """t_offload with its pieces (parcalc.core.timing.offload.offload_times, the same numbers)."""
    from parcalc.core.model_states import state_bytes
    from parcalc.core.timing.compute import optimizer_bytes
    from parcalc.core.timing.offload import (
        HOST_BANDWIDTH_SOURCE,
        HOST_MEMORY_BANDWIDTH,
        host_link_of,
    )
    from parcalc.core.timing.step import _fullest_stage

    link = host_link_of(training)
    bw = link.bandwidth_per_direction
    terms = [term_of("B_pcie", "B_pcie", bw.value, "B/s", f"{link.name} bandwidth per direction", bw.source, r"B_{\mathrm{pcie}}")]
    parts = []
    if training.offload_optimizer:
        params = _fullest_stage(model, config.layout._replace(ep=1, etp=None)).params  # as offload_step_time counts them
        ranks = config.layout.dp * config.layout.cp if config.layout.shard_group is None else config.layout.shard_group  # hybrid sharding: 1/S
        shard = params / ranks if config.layout.zero >= 1 else params
        per = state_bytes(training.precision, training.optimizer, fp32_grads=training.fp32_grads, model=model)
        q_cpu = optimizer_bytes(per.states, 4.0, per.weight, True, state_bytes=per.per_state)
        terms += [term_of("psi_z", "Ψ_z", shard, "", "parameters of this GPU's optimizer shard", latex=r"\Psi_z"),
                  term_of("w", "w", per.weight, "B", "bytes per 16-bit gradient down and weight up (ZeRO-Offload)"),
                  term_of("W_b", "W_b", stage.last_backward, "s", "backward of the last micro-batch (hides the gradient copy)", latex=r"W_{b}"),
                  term_of("Q_cpu", "Q_cpu", q_cpu, "B", "host bytes one parameter's CPU-Adam update moves", latex=r"Q_{\mathrm{cpu}}"),
                  term_of("BW_h", "BW_host", HOST_MEMORY_BANDWIDTH, "B/s", "host memory bandwidth per node", HOST_BANDWIDTH_SOURCE, r"BW_{\mathrm{host}}"),
                  term_of("g", "g", cluster.gpus_per_node, "", "GPUs per node sharing it")]  # fmt: skip
        parts.append("max(0, $w × $psi_z / $B_pcie - $W_b) + $psi_z × $Q_cpu / ($BW_h / $g) + $w × $psi_z / $B_pcie")
    if training.offload_activations:
        layers = config.stage_layers(model)[0]
        terms += [term_of("A_l", "A_layer", breakdown.layer.per_layer.value, "B", "one layer's saved activations, one micro-batch", latex=r"A_{\mathrm{layer}}"),
                  term_of("L_s", "L_s", layers, "", "layers of the first stage"), term_of("m", "m", m, "", "micro-batches per replica"),
                  term_of("t_f", "t_f", stage.forward, "s", "forward of one micro-batch"),
                  term_of("t_b", "t_b", stage.backward + stage.recompute, "s", "backward (and recomputation) of one micro-batch")]  # fmt: skip
        parts.append("max(0, $A_l × $L_s × $m / $B_pcie - $m × $t_f) + max(0, $A_l × $L_s × $m / $B_pcie - $m × $t_b)")
    return OFFLOAD.derivation(terms, value, formula=" + ".join(parts), assumptions=(
                       f"host memory bandwidth {HOST_MEMORY_BANDWIDTH / 1e9:g} GB/s per node, CPU-Adam memory-bound (a lower bound on its time)",
                        f"one PCIe latency ({link.latency.value * 1e6:g} us) per copy, left out of the formula"))  # fmt: skip


def cp_derivation(config: Config, cluster: Cluster, stage: Any, m_term: Term, value: float,
                  model: TransformerModel | None = None, compiled: bool = False) -> Derivation:  # fmt: skip
    """t_cp: the context-parallel exchanges of one micro-batch left exposed, times m (parcalc.core.timing.context); a hybrid
    `model`'s recurrent mixers exchange by all-to-alls (parcalc.core.hybrid_context); a stack that runs PyTorch's ring
    attention (torchtitan; `compiled`: under torch.compile) its exchanges and merge kernels
    (parcalc.core.timing.torch_ring_attention)."""
    from parcalc.core.context import TE_CP, CpComm, cp_comm_of

    kind = cp_comm_of(config.layout.cp_comm)
    group = placement(config.layout.cp, config.layout.tp, cluster.gpus_per_node)
    where = "inside a node" if group.nodes == 1 else f"across {group.nodes} nodes"
    inputs = [m_term, term_of("C_cp", "C_cp", stage.cp_total, "s", f"{kind.value} exchanges of one micro-batch over cp = {config.layout.cp} "
                         f"({where}), {stage.layers} layers, NCCL model", TE_CP),
              term_of("E_cp", "E_cp", stage.cp, "s", "of which exposed: " + (
                  "per ring step max(0, t_send - t_attention / cp) (TE overlaps each step's send with the attention of the block before)"
                  if kind is CpComm.P2P else "all of it (the attention waits for the exchange)"))]  # fmt: skip
    assumptions = ["K/V blocks of kv_heads x head_dim per token (GQA), the cp ranks placed tp apart (Megatron-LM's tp-cp-ep-dp-pp order)"]
    hybrid = model is not None and (model.mamba is not None or model.linear_attention is not None)
    from parcalc.core.timing.torch_ring_attention import COMPILED_ORDER, TORCH_RING, TORCHTITAN_CP, torch_rotate

    rotate = torch_rotate(config.layout.cp_comm)
    if cluster.framework.context_parallel == "torch-ring" and rotate and not hybrid:  # torchtitan: PyTorch's ring attention
        overlap = "compiled: every exchange waited for at once" if compiled else "eager: step 0 hides the gather, each step the next send"
        inputs[1] = replace(inputs[1], description=f"PyTorch's ring attention ({rotate} rotate) over cp = {config.layout.cp} ({where}), "
                            f"{stage.layers} layers: K/V repeated to the query heads, fp32 dK/dV sent every backward step, and its "
                            "fp32 merge kernels, NCCL and HBM models", source=f"{TORCH_RING}; {TORCHTITAN_CP}")  # fmt: skip
        inputs[2] = replace(inputs[2], description=f"of which exposed ({overlap}; the merges on the compute stream, whole)",
                            source=COMPILED_ORDER if compiled else TORCH_RING)  # fmt: skip
        assumptions = ["the busiest CP rank's merges (the largest bytes over the ranks: ring_merge_bytes); the ring's structure of torch "
                       "Dec 2024 (1963fc8) and v2.13.0 alike", "the cp ranks placed tp apart"]
    if model is not None and (model.mamba is not None or model.linear_attention is not None):
        from parcalc.core.hybrid_context import GDN_CP, KERNELS_UNDER_CP, MAMBA_CP, layer_shares

        attention, mixers = layer_shares(model)
        what = "Mamba-2" if model.mamba is not None else "gated-DeltaNet"
        inputs[1] = replace(inputs[1], description=f"{inputs[1].description}; the {what} layers' all-to-alls over heads",
                            source=f"{TE_CP}; {MAMBA_CP if model.mamba is not None else GDN_CP}")  # fmt: skip
        assumptions += [f"a hybrid's mean layer: attention's exchange x {attention:.3f} of the layers, the {what} mixer's all-to-alls "
                        f"(Megatron-Core: in before the conv1d and scan, back after; whole on the critical path) x {mixers:.3f}",
                        KERNELS_UNDER_CP]  # fmt: skip
    source = f"{TORCH_RING}; {NCCL_SOURCE}" if inputs[1].source.startswith(TORCH_RING) else None
    return CP.derivation(inputs, value, source=source, assumptions=tuple(assumptions))


def dualpipe_note(model: TransformerModel, config: Config, training: Training, cluster: Cluster, stage: Any) -> tuple[str, ...]:
    """How far DualPipe's bubble (DeepSeek-V3; --schedule dualpipe schedules it) is from the 1F1B
    bubble the model uses, for this configuration's slowest stage."""
    from parcalc.core.pipeline import dualpipe_bubble
    from parcalc.core.timing.step import layer_pieces
    from parcalc.units import format_time as _ms

    lp = layer_pieces(model, config.layout, config.micro_batch, config.recompute, training, cluster, experts=config.experts())
    f, b = float(stage.forward), float(stage.backward + stage.recompute)
    w = (stage.layers - stage.moe_layers) * lp.wgrad_dense + stage.moe_layers * lp.wgrad_moe
    p = config.layout.pp
    one_f_one_b = (p - 1) * (f + b)
    dualpipe = dualpipe_bubble(p, f, b, w)
    return (f"schedule {'interleaved ' if config.layout.chunks > 1 else ''}1F1B as given; DualPipe (--schedule dualpipe; DeepSeek-V3 sec. 3.2.1, Table 2: "
            f"bubble (p/2 - 1)(F&B + B - 3W) per step with F, B, W of one of its two chunks per GPU; F&B taken as F + B) would leave "
            f"{_ms(dualpipe)} idle per iteration where 1F1B's (p - 1)(F + B) is {_ms(one_f_one_b)} here (per micro-batch of the "
            f"slowest stage F = {_ms(f)}, B = {_ms(b)}, of which weight gradients W = {_ms(w)}), and holds 2x the parameters",)


def ep_derivation(model: TransformerModel, config: Config, training: Training, cluster: Cluster, stage: Any, m: int,
                   value: float) -> Derivation | None:  # fmt: skip
    """t_ep: the MoE dispatch and combine of the slowest stage (parcalc.core.timing.moe), the
    pipeline's partnerless micro-batches exposing all of theirs."""
    from parcalc.core.timing.moe import COMM_SMS, COMM_SMS_SOURCE, unpaired_micro_batches
    from parcalc.core.timing.network import placement as place

    if model.moe is None or (config.layout.ep == 1 and (config.layout.etp or config.layout.tp) == 1):
        return None
    experts = config.experts()
    group = place(experts.ep, experts.etp, cluster.gpus_per_node)
    where = "inside a node" if group.nodes == 1 else f"across {group.nodes} nodes"
    how = ("NCCL all-to-all: every token copy for another node over the network" if experts.dispatcher == "alltoall"
           else f"{'DeepEP' if experts.dispatcher == 'deepep' else 'HybridEP'}-style: one copy per token and destination node "
           "over the network, forwarded over NVLink"
           + (f", at most {experts.max_nodes_per_token} nodes per token" if experts.max_nodes_per_token else "")
           + (", round-robin routing (token t to experts (t k + j) mod E)" if experts.routing == "round-robin" else ""))  # fmt: skip
    if config.layout.schedule.pairs_forward_backward and config.layout.pp > 1:  # overlapped F & B pairs (timing.step.combine)
        from parcalc.core.pipeline_step import paired_passes

        pairs = paired_passes(config.layout.schedule, config.layout.pp, m)
        alone = m - pairs * (0.5 if config.layout.schedule.v_shape else 1.0)
    else:
        alone = float(unpaired_micro_batches(config.layout.pp, config.layout.chunks, m))
    inputs = [term_of("m", "m", m, "", "micro-batches per replica"),
              term_of("u", "u", alone, "", "micro-batches without a partner (pipeline warm-up; all of them without 1F1B overlap; "
                 "DualPipe(V): m less its overlapped F & B pairs, each pairing two passes (a V's: of half the stage))"),
              term_of("L_m", "L_MoE", stage.moe_layers, "", "MoE layers of the slowest stage", latex=r"L_{\mathrm{MoE}}"),
              term_of("A", "A", stage.ep_total, "s", f"dispatch + combine of one micro-batch, forward and backward, all {stage.moe_layers} "
                 f"MoE layers, over ep = {experts.ep} ({where}), {how}"),
              term_of("E", "E", stage.ep, "s", f"of which exposed beside a partner ({experts.overlap} overlap; the SMs the hidden part "
                 f"holds slow the compute beside it)")]  # fmt: skip
    assumptions = [f"busiest rank's tokens over the balanced share rho = {experts.imbalance:g} (--moe-imbalance)",
                   f"communication kernels hold {COMM_SMS[experts.dispatcher]} of the GPU's SMs while they run "
                   f"({COMM_SMS_SOURCE[experts.dispatcher]})"]
    if experts.overlap == "none":
        assumptions.append("not overlapped with compute (--ep-overlap none)")
    per_gemm = cluster.framework.expert_gemm_host
    if per_gemm:
        from parcalc.core.timing.moe import EXPERT_HOST_SOURCE, GEMMS_PER_EXPERT

        assumptions.append(f"A and E include the GPU's wait for the host issuing each local expert's GEMMs one by one after the "
                           f"dispatcher's host sync: {GEMMS_PER_EXPERT[0]} forward and {GEMMS_PER_EXPERT[1]} backward per expert at "
                           f"{per_gemm * 1e6:.2f} us each ({cluster.framework.source('expert_gemm_host')}), less the GPU time they "
                           f"overlap ({EXPERT_HOST_SOURCE})")  # fmt: skip
    return EP.derivation(inputs, value, assumptions=tuple(assumptions))


def dp_derivation(config: Config, cluster: Cluster, stage: Any, dp: Any, f_layer: float, b_layer: float, m: int, value: float,
                   training: Training, hidden: float = 0.0, sm_loss: float = 0.0) -> Derivation:  # fmt: skip
    """t_dp with the collectives it is made of, in words (the formula is parcalc.core.timing.step.dp_exposed), and the
    compute the hidden ones slow (`hidden` seconds, `sm_loss` of them lost: parcalc.core.timing.sm_contention)."""
    d, z = config.layout.dp * config.layout.cp, config.layout.zero  # gradients sync over the dp-cp group (Megatron-LM; dp_pieces gets d x cp)
    if d == 1:
        return DP.zero("no data parallelism")
    group = placement(d, config.layout.tp, cluster.gpus_per_node)
    where = "inside a node" if group.nodes == 1 else f"over {group.nodes} nodes, {group.per_node} GPU(s) each"
    size = config.layout.shard_group if z and config.layout.shard_group is not None and config.layout.shard_group < d else d  # hybrid sharding: S < d
    zero_group = f"d = {d} ({where})"
    if size < d:
        shards, replicas = placement(size, config.layout.tp, cluster.gpus_per_node), placement(d // size, config.layout.tp * size, cluster.gpus_per_node)

        def at(p: Any) -> str:
            return "inside a node" if p.nodes == 1 else f"over {p.nodes} nodes, {p.per_node} GPU(s) each"

        zero_group = f"the shard group S = {size} of d = {d} ({at(shards)})"
        a_where = f"the {d // size} replicas, tp x S apart ({at(replicas)})"
    fw = cluster.framework.at(config.layout.pp)
    overlap_grad, overlap_param = cluster.overlap_grad_at(config.layout.pp), cluster.overlap_param_at(config.layout.pp)
    overlap = ("overlapped with the backward of the last micro-batch" if overlap_grad else "not overlapped")
    n_b = term_of("n_b", "n_b", dp.buckets, "", f"gradient buckets ({fw.name}: {fw.source('bucket')})")
    w_b = term_of("W_b", "W_b", stage.last_backward, "s", "backward of one micro-batch on the stage (the overlap window)", latex=r"W_{b}")
    if z == 0:
        terms = [term_of("T_ar", "T_ar", dp.grad_all_reduce, "s", f"all-reduce of every bucket over d = {d} ({where})", latex=r"T_{\mathrm{ar}}"), n_b, w_b]
        formula = "max($T_ar - $W_b, $T_ar / $n_b)" if overlap_grad else "$T_ar"
    elif z in (1, 2):
        w_f = term_of("W_f", "W_f", stage.first_forward, "s", "forward of the first micro-batch (hides the parameter gather)", latex=r"W_{f}")
        reduce = (f"all-reduce of every bucket's fp32 gradients over {zero_group} ({fw.name}'s BF16_Optimizer shards its states only)"
                  if fw.accumulation_bytes(training.precision) and size == d else f"reduce-scatter of every bucket over {zero_group}")
        terms = [term_of("T_rs", "T_rs", dp.grad_reduce_scatter, "s", reduce, latex=r"T_{\mathrm{rs}}"),
                 term_of("T_ag", "T_ag", dp.param_gather, "s", "all-gather of the updated weights", latex=r"T_{\mathrm{ag}}"), n_b, w_b, w_f]  # fmt: skip
        rs = "$T_rs"
        if size < d:  # each bucket's shard all-reduced over the replicas after its reduce-scatter (Megatron-LM's start_grad_sync)
            terms.insert(1, term_of("T_ar", "T_ar", dp.grad_replica_all_reduce, "s", f"all-reduce of every bucket's 1/S shard over {a_where}",
                               latex=r"T_{\mathrm{ar}}"))  # fmt: skip
            rs = "($T_rs + $T_ar)"
        scatter = f"max({rs} - $W_b, {rs} / $n_b)" if overlap_grad else rs
        if z == 2 and fw.reduce_every_micro_batch:  # DeepSpeed ZeRO-2 reduces each micro-batch's gradients
            terms.append(term_of("m", "m", m, "", "micro-batches per replica (gradients reduced in each)"))
            scatter = f"$m × {scatter}"
        formula = scatter + (" + max($T_ag - $W_f, $T_ag / $n_b)" if overlap_param else " + $T_ag")
    else:
        terms = [term_of("m", "m", m, "", "micro-batches per replica"), term_of("L_s", "L_s", dp.layers, "", "layers (sharding units) per stage"),
                 term_of("g", "g", dp.layer_gather, "s", f"all-gather of one layer's weights over {zero_group}"
                         + (" (its Float8 linears' in FP8, the rest in bf16: --fp8-all-gather)" if training.float8_all_gather else "")),
                 term_of("r", "r", dp.layer_reduce, "s", "reduce-scatter of one layer's gradients"),
                 term_of("g_0", "g_0", dp.root_gather, "s", "all-gather of the root unit (embedding, final norm, LM head)"),
                 term_of("f_l", "f_l", f_layer, "s", "one layer's forward (the prefetch window)"),
                 term_of("b_l", "b_l", b_layer, "s", "one layer's backward and recomputation")]  # fmt: skip
        # parcalc.core.timing.step.dp_exposed, written out for the settings in force
        g_b = "$g" if fw.reshard_after_forward else "0"
        r = "$r"
        if size < d:  # FSDP2's foreach_reduce: the unit's reduce-scatter, then its shard's all-reduce over the replicate group
            terms.insert(4, term_of("a", "a", dp.layer_replica_reduce, "s", f"all-reduce of one layer's 1/S gradient shard over {a_where}"))
            r = "($r + $a)"
        forward = "$g_0 + $g + ($L_s - 1) × max(0, $g - $f_l)" if overlap_param else "$g_0 + $L_s × $g"
        regather = f"$L_s × max(0, {g_b} - $b_l)" if overlap_grad else f"$L_s × {g_b}"
        reduce = (f"$L_s × max(0, {r} - max(0, $b_l - {g_b})) + {r}" if overlap_grad else f"$L_s × {r}")
        syncs = "$m" if fw.reduce_every_micro_batch else "1"
        formula = f"$m × ({forward} + {regather}) + {syncs} × ({reduce})"
        if dp.float8_amax:  # --fp8-all-gather: the scales' all-reduce after the optimizer step (parcalc.core.comm.float8_all_gather)
            from parcalc.core.comm.float8_all_gather import SOURCES as FLOAT8_SOURCES

            terms.append(term_of("a_8", "a_8", dp.float8_amax, "s", "all-reduce of the Float8 weights' fp32 amaxes over "
                                 f"{zero_group}, once a step after the optimizer step (precompute_float8_dynamic_scale_for_fsdp), exposed",
                                 FLOAT8_SOURCES["precompute"], latex=r"a_{8}"))  # fmt: skip
            formula += " + $a_8"
    source = f"{DP.source}; {fw.name} buckets, {overlap}; {NCCL_SOURCE}"
    assumptions: tuple[str, ...] = ()
    if size < d:
        from parcalc.core.sharding import HSDP_SOURCE

        source += f"; hybrid sharding: {HSDP_SOURCE}"
        assumptions = (f"hybrid sharding over S = {size}: each reduce-scatter's all-reduce over the replicas follows it on the critical "
                       "path of the reduce (the next reduce-scatter running beside it on another stream is not credited)",)  # fmt: skip
    if sm_loss and hidden > 0:  # the compute beside the hidden collectives runs on the SMs NCCL leaves it
        from parcalc.core.timing.sm_contention import SOURCE as CONTENTION_SOURCE

        gpu = cluster.gpu
        assert gpu is not None and gpu.nccl_channels is not None and gpu.sms is not None
        terms += [term_of("H", "H", hidden, "s", "the collectives' time hidden under compute (all of it less what stays exposed)"),
                  term_of("lambda", "λ", sm_loss, "", f"the share of it the compute beside loses: 1 - t / t_stretched of a layer's kernels "
                     f"with {gpu.nccl_channels.value:g} of the {gpu.sms.value:g} SMs held by NCCL ({gpu.nccl_channels.source})", CONTENTION_SOURCE,
                     latex=r"\lambda")]  # fmt: skip
        formula = f"{formula} + $H × $lambda"
        source += f"; {CONTENTION_SOURCE}"
        assumptions += ("a persistent GEMM's CTAs past the free SMs wait for a whole CTA's work (its second round), other compute-"
                        "bound kernels slow by S / (S - c), memory-bound ones not; each hidden collective spans whole kernels",)  # fmt: skip
    return DP.derivation(terms, value, formula=formula, source=source, assumptions=assumptions)
