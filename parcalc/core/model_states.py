"""Model states on one GPU: the bytes per parameter of weights, gradients, the fp32 master copy and
the optimizer's states (`state_bytes`, by precision and optimizer), and how ZeRO shards them over
the data-parallel ranks (`model_states`; the routed experts over expert-DP, `expert_model_states`).

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(SC20), sec. 3.1 and 5: mixed-precision Adam keeps 2 bytes of fp16 parameters, 2 of fp16 gradients
and K = 12 of optimizer states per parameter; stage 1 shards the states over the N_d ranks, stage
2 the gradients too, stage 3 the parameters too (parcalc.core.memory's module docstring has the
other precisions and optimizers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from parcalc.core.choices import Optimizer, Precision
from parcalc.core.expert_parallel import FOLDING
from parcalc.core.layout import ONE_GPU, Layout
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

ZERO = "Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models' (SC20)"
ZERO_MIXED = f"{ZERO}, sec. 3.1 (mixed-precision Adam: 2 + 2 + K bytes per parameter, K = 12)"
ZERO_STAGES = f"{ZERO}, sec. 5.1-5.3 and Figure 1 (P_os, P_os+g, P_os+g+p shard over N_d ranks)"

@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter: weight, gradient, fp32 master copy, each optimizer state."""

    weight: float
    gradient: float
    master: float
    per_state: float
    states: float  # state tensors per parameter (a mean over the model for Adafactor and Muon; parcalc.core.optimizers)
    state_text: str = ""
    state_source: str = ""

    @property
    def optimizer(self) -> float:
        """K of the ZeRO paper: master copy plus the optimizer's states."""
        return self.master + self.states * self.per_state

    @property
    def total(self) -> float:
        return self.weight + self.gradient + self.optimizer


def state_bytes(precision: Precision, optimizer: Optimizer, *, fp32_grads: bool = False, model: TransformerModel | None = None,
                moment_bytes: float | None = None, grad_copies: bool = False) -> StateBytes:  # fmt: skip
    """Bytes per parameter of each model state (see the module docstring for the sources; the
    optimizer's states per parameter from parcalc.core.optimizers, Adafactor's and Muon's counted
    from `model`'s shapes). fp8 (Transformer Engine) keeps the bytes of mixed-bf16: bf16 weights
    and gradients, an fp32 master copy and fp32 states (its FP8 weight copies: fp8_weight_cache).
    moment_bytes: the optimizer states' element size beside an fp32 master copy (None: the state
    precision; 2 for Megatron-LM's --use-precision-aware-optimizer --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16, parcalc.core.optimizers.PRECISION_AWARE). grad_copies: the 16-bit
    gradients and a full fp32 copy of them, 2 + 4 bytes (DeepSpeed's BF16_Optimizer, GRADS_DEEPSPEED_BF16)."""
    from parcalc.core.optimizers import PRECISION_AWARE, optimizer_state

    opt = optimizer_state(optimizer, model)
    states: float = int(opt.states) if opt.states == int(opt.states) else opt.states
    if moment_bytes is not None:
        if opt.element_bytes is not None:
            raise InputError(f"--moment-dtype: {optimizer.value} keeps its states in {opt.element_bytes:g} bytes of its own; "
                             "the moment dtype applies to optimizers whose states follow the training precision")  # fmt: skip
        if precision in (Precision.FP32, Precision.BF16):
            raise InputError(f"--moment-dtype: applies beside an fp32 master copy (mixed-bf16, mixed-fp16, fp8; Megatron-LM's "
                             f"precision-aware optimizer); --precision {precision.value} keeps its states in the parameters' dtype")  # fmt: skip
        opt = replace(opt, element_bytes=moment_bytes, text=f"{opt.text}, in {moment_bytes:g} bytes each (precision-aware optimizer)",
                      source=f"{opt.source}; {PRECISION_AWARE}")  # fmt: skip

    def per(state_dtype_bytes: float) -> float:
        return opt.element_bytes if opt.element_bytes is not None else state_dtype_bytes

    if precision is Precision.FP32:
        return StateBytes(4.0, 4.0, 0.0, per(4.0), states, opt.text, opt.source)
    if precision is Precision.BF16:
        if fp32_grads:
            raise InputError("--fp32-grads: applies to mixed precision (fp32 main gradients beside 16-bit weights), not to pure bf16")
        return StateBytes(2.0, 2.0, 0.0, per(2.0), states, opt.text, opt.source)
    gradient = 6.0 if grad_copies else 4.0 if fp32_grads else 2.0
    return StateBytes(2.0, gradient, 4.0, per(4.0), states, opt.text, opt.source)


# Where the gradient bytes come from: conventions differ between the paper and the frameworks.
GRADS_ZERO = "Rajbhandari et al. 2020 sec. 3.1: fp16 gradients, 2 + 2 + K = 16 bytes per parameter with Adam"
GRADS_MEGATRON = ("Megatron-LM megatron/training/arguments.py: with --bf16, accumulate_allreduce_grads_in_fp32 = True "
                  "(fp32 main_grad buffers): 2 + 4 + K = 18 bytes per parameter with Adam")  # fmt: skip
GRADS_DEEPSPEED_BF16 = ("DeepSpeed deepspeed/runtime/bf16_optimizer.py (BF16_Optimizer, its bf16 pipelines): the bf16 gradients and "
                        "fp32_groups_gradients_flat, a full fp32 copy (torch.zeros_like(bf16 flat, dtype=float32)): 2 + 4 bytes per parameter")
GRADS_DEEPSPEED = ("DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py, estimate_zero2_model_states_mem_needs: "
                   "4 Psi + 16 Psi / N (16-bit weights and gradients, and an fp32 gradient partition with the states): 20 bytes at N = 1")  # fmt: skip


def gradient_convention(per: StateBytes) -> str:
    """The gradient bytes in force and the convention they follow, with the sources of the others."""
    if not per.master:  # fp32 or pure bf16: gradients in the parameters' dtype, no master copy
        return f"gradients {per.gradient:g} bytes, in the parameters' dtype (no master copy)"
    if per.gradient == 4.0:
        return f"fp32 gradients (4 bytes, {per.total:g} per parameter): {GRADS_MEGATRON}"
    return (f"16-bit gradients (2 bytes, {per.total:g} per parameter): {GRADS_ZERO}; Megatron-LM keeps fp32 gradients "
            "(--fp32-grads, 18 with Adam); DeepSpeed's estimate_zero2_model_states_mem_needs counts 20 at N = 1 "
            "(an fp32 gradient partition beside the 16-bit gradients)")  # fmt: skip




@dataclass(frozen=True)
class ModelStates:
    weights: Derivation
    gradients: Derivation
    optimizer: Derivation

    @property
    def total(self) -> float:
        return self.weights.value + self.gradients.value + self.optimizer.value


def model_states(params: float, per: StateBytes, layout: Layout = ONE_GPU, params_source: str = "") -> ModelStates:
    """Weights, gradients and optimizer states of `params` parameters on one GPU, with the layout's ZeRO
    stage sharding over its dp ranks (Rajbhandari et al. 2020 sec. 5; see the module docstring),
    or over dp x cp ranks with context parallelism: Megatron-LM reduces gradients and shards its
    distributed optimizer over the data-parallel group with the context-parallel ranks in it
    (parcalc.core.context.MEGATRON_DP_CP), since those ranks hold the same weights. With a shard
    group S (hybrid sharding, parcalc.core.sharding) the divisor is S, not dp x cp: the states are
    replicated over the dp x cp / S groups."""
    zero, dp, cp, shard_group = layout.zero, layout.dp, layout.cp, layout.shard_group
    if zero not in (0, 1, 2, 3):
        raise InputError(f"--zero: the ZeRO stage is 0, 1, 2 or 3, got {zero!r}")
    if not (params >= 0 and math.isfinite(params)):
        raise InputError(f"parameters must be a finite count of at least 0, got {params!r}")
    psi = Term("psi", "Ψ", r"\Psi", params, "", "parameters on this GPU", params_source)
    nd = Term("N_d", "N_d", "N_d", dp * cp, "", "data-parallel degree (ZeRO shards over it)" if cp == 1 else
              f"data-parallel x context-parallel ranks, {dp} x {cp} (ZeRO shards over the dp-cp group)")  # fmt: skip
    if shard_group is not None:
        from parcalc.core.sharding import HSDP_SOURCE, check_shard_group

        check_shard_group(shard_group, dp * cp, zero)
        nd = Term("N_d", "S", "S", shard_group, "", f"shard group: ZeRO shards over S of the {dp * cp} data-parallel ranks "
                  f"and replicates over {dp * cp // shard_group} such groups (hybrid sharding)", HSDP_SOURCE)  # fmt: skip
    dp = dp * cp if shard_group is None else shard_group

    def part(key: str, label: str, symbol: str, latex_symbol: str, bytes_term: Term, sharded: bool, source: str) -> Derivation:
        inputs: tuple[Term, ...]
        if sharded:
            formula, latex, inputs, value = f"${bytes_term.key} × $psi / $N_d", rf"\frac{{${bytes_term.key} \times $psi}}{{$N_d}}", (bytes_term, psi, nd), bytes_term.value * params / dp
        else:
            formula, latex, inputs, value = f"${bytes_term.key} × $psi", rf"${bytes_term.key} \times $psi", (bytes_term, psi), bytes_term.value * params
        where = f"sharded over N_d by ZeRO-{zero}" if sharded else "replicated on every data-parallel rank"
        if sharded and shard_group is not None:
            where = f"sharded over the shard group S = {shard_group} by ZeRO-{zero}"
        return Derivation(key, f"{label} ({where})", symbol, latex_symbol, formula, latex, inputs, value, "B", source)

    w = Term("w", "w", "w", per.weight, "B", "bytes per parameter (weights)")
    g_source = GRADS_DEEPSPEED_BF16 if per.gradient == 6.0 else GRADS_MEGATRON if per.master and per.gradient == 4.0 else GRADS_ZERO if per.master else ""
    g = Term("g", "g", "g", per.gradient, "B", "bytes per gradient", g_source)
    k_text = f"master copy {per.master:g} + {per.states:g} state(s) x {per.per_state:g}" if per.master else f"{per.states:g} state(s) x {per.per_state:g}"
    k_source = ZERO_MIXED + (f"; states: {per.state_source}" if per.state_source else "")
    k = Term("K", "K", "K", per.optimizer, "B", f"optimizer bytes per parameter ({k_text})", k_source)
    return ModelStates(
        weights=part("weights", "Weights", "M_w", r"M_{\mathrm{w}}", w, zero >= 3, ZERO_STAGES if zero >= 3 else ZERO_MIXED),
        gradients=part("gradients", "Gradients", "M_g", r"M_{\mathrm{g}}", g, zero >= 2, ZERO_STAGES if zero >= 2 else ZERO_MIXED),
        optimizer=part("optimizer_states", "Optimizer states", "M_os", r"M_{\mathrm{os}}", k, zero >= 1, ZERO_STAGES if zero >= 1 else ZERO_MIXED),
    )


def expert_model_states(dense: float, experts: float, per: StateBytes, zero: int, n_dense: int, n_expert: float,
                        params_source: str = "") -> ModelStates:  # fmt: skip
    """model_states for a GPU holding routed experts: ZeRO shards the dense states over the dense
    data-parallel ranks N_d (dp x cp: Megatron's distributed optimizer uses the dp-cp group) and
    the expert states over the expert data-parallel ranks N_e (Megatron-Core keeps expert
    parameters in their own buffers, reduced and sharded over the expert-DP group:
    megatron/core/distributed/distributed_data_parallel.py, expert_parallel_buffers with
    expt_dp_group; parallel_state.get_expert_data_parallel_group)."""
    if zero not in (0, 1, 2, 3):
        raise InputError(f"--zero: the ZeRO stage is 0, 1, 2 or 3, got {zero!r}")
    psi_d = Term("psi_d", "Ψ_d", r"\Psi_d", dense, "", "non-expert parameters on this GPU", params_source)
    psi_x = Term("psi_x", "Ψ_x", r"\Psi_x", experts, "", "routed-expert parameters on this GPU", FOLDING)
    nd = Term("N_d", "N_d", "N_d", n_dense, "", "dense data-parallel ranks (dp x cp; ZeRO shards the dense states over them)")
    ne = Term("N_e", "N_e", "N_e", n_expert, "", "expert data-parallel ranks (tp x cp x dp / (etp x ep))", FOLDING)

    def part(key: str, label: str, symbol: str, latex_symbol: str, b: Term, sharded: bool, source: str) -> Derivation:
        inputs: tuple[Term, ...]
        if sharded:
            formula = f"${b.key} × ($psi_d / $N_d + $psi_x / $N_e)"
            latex = rf"${b.key} \times \left(\frac{{$psi_d}}{{$N_d}} + \frac{{$psi_x}}{{$N_e}}\right)"
            inputs, value = (b, psi_d, nd, psi_x, ne), b.value * (dense / n_dense + experts / n_expert)
            where = f"sharded by ZeRO-{zero}: dense over N_d, experts over N_e"
        else:
            formula, latex = f"${b.key} × ($psi_d + $psi_x)", rf"${b.key} \times ($psi_d + $psi_x)"
            inputs, value = (b, psi_d, psi_x), b.value * (dense + experts)
            where = "replicated on every data-parallel rank"
        return Derivation(key, f"{label} ({where})", symbol, latex_symbol, formula, latex, inputs, value, "B", source)

    w = Term("w", "w", "w", per.weight, "B", "bytes per parameter (weights)")
    g_source = GRADS_DEEPSPEED_BF16 if per.gradient == 6.0 else GRADS_MEGATRON if per.master and per.gradient == 4.0 else GRADS_ZERO if per.master else ""
    g = Term("g", "g", "g", per.gradient, "B", "bytes per gradient", g_source)
    k = Term("K", "K", "K", per.optimizer, "B", "optimizer bytes per parameter (master copy and states)", ZERO_MIXED)
    return ModelStates(
        weights=part("weights", "Weights", "M_w", r"M_{\mathrm{w}}", w, zero >= 3, ZERO_STAGES if zero >= 3 else ZERO_MIXED),
        gradients=part("gradients", "Gradients", "M_g", r"M_{\mathrm{g}}", g, zero >= 2, ZERO_STAGES if zero >= 2 else ZERO_MIXED),
        optimizer=part("optimizer_states", "Optimizer states", "M_os", r"M_{\mathrm{os}}", k, zero >= 1, ZERO_STAGES if zero >= 1 else ZERO_MIXED),
    )
