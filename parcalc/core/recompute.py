"""Recomputation as people run it, beyond Korthikanti et al.'s none / selective / full.

Op-level selective activation checkpointing (`--recompute op`), as TorchTitan wraps each transformer
block: PyTorch's `torch.utils.checkpoint` with `create_selective_checkpoint_contexts` and a policy
that saves the outputs of a list of ops and recomputes every other op in backward (TT_POLICY):

    "Saves output of all compute ops, except every second mm"

The list (TT_SAVE_LIST): aten.mm, the fused SDPA kernels (flash, memory-efficient) and the TP
reduce-scatter; every second aten.mm of a block (the 2nd, 4th, ...) is recomputed all the same. So
one layer keeps, per micro-batch (op_saved_tensors):
- its input (the checkpoint's argument, held by the wrapper);
- the outputs of the odd-numbered matmuls, in TorchTitan's order (Llama: wq, wk, wv, wo, w1, w3,
  w2, one aten.mm each): Q, V, the gate projection (w1) and the down projection (w2); without a
  gate (up, down) Q, V and up;
- with FlashAttention (SDPA): its output and the fp32 log-sum-exp of each row;
- under sequence parallelism the two reduce-scatter outputs (after wo and w2).
A row-parallel matmul's output (wo, w2) under TP is a partial sum over all tokens, b s h elements
on every TP rank. Everything else is recomputed in backward: the norms, RoPE, the activation, the
residual adds, every second matmul (wk, wo, w3; without a gate wk, wo, w2) and, without
FlashAttention, the attention core (its matmuls are aten.bmm, not in the list).

Recomputing that needs the whole block's forward again minus the saved ops: TorchTitan passes
early_stop=False (the replay runs to the block's end), so the last residual add and, without a
gate, the down projection run again too.

Megatron-LM's `--recompute-granularity full --recompute-method block --recompute-num-layers n`
(`--recompute-layers n`): in each pipeline stage's model chunk the first n layers are checkpointed
(full recomputation: their input kept, their forward run again in backward) and the others keep
everything (MEGATRON_BLOCK).
"""

from __future__ import annotations

import re

from parcalc.core.choices import Recompute
from parcalc.core.model import Mlp, Norm, TransformerModel
from parcalc.errors import InputError

TT_COMMIT = "1ea476e9f24be439eda358aa864f45c1c37a8a88"  # 2024-04-24, the commit of TorchTitan's published Llama 3 8B table
TT_POLICY = (
    f"pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py at {TT_COMMIT[:9]} (2024-04-24), lines 35-72: "
    "no_recompute_list = {aten.mm, aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_flash_attention, "
    "_c10d_functional.reduce_scatter_tensor}; _custom_policy: 'Saves output of all compute ops, except every second mm' "
    "(meta[mm_count] % 2 == 0 recomputed); the same rule today in torchtitan/distributed/activation_checkpoint.py "
    "(b5bcd76c, SelectiveAC._wrap_block, lines 243-287: early_stop=False)"
)
TT_SAVE_LIST = ("aten.mm", "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
                "_c10d_functional.reduce_scatter_tensor")  # fmt: skip
TT_ORDER = ("pytorch/torchtitan torchtitan/models/llama/model.py at 1ea476e9f: Attention.forward runs wq, wk, wv, SDPA, wo; "
            "FeedForward.forward w2(F.silu(w1(x)) * w3(x)): seven aten.mm per block, w1 before w3")  # fmt: skip
MEGATRON_BLOCK = (
    "NVIDIA/Megatron-LM megatron/core/transformer/transformer_block.py at core_v0.9.0 (1afee592), "
    "TransformerBlock._checkpointed_forward, recompute_method == 'block' (lines 325-344): layers 0 .. "
    "recompute_num_layers - 1 of this block (one pipeline stage's model chunk) run under checkpoint, the rest plainly; "
    "transformer_config.py: recompute_num_layers must be None with selective granularity"
)


# ---------------------------------------------------------------------------------------------
# --recompute op


def check_op_supported(model: TransformerModel) -> None:
    """`--recompute op` is modelled for dense layers with standard attention (TorchTitan's Llama)."""
    if model.moe is not None or model.mla is not None:
        what = "Mixture-of-Experts" if model.moe is not None else "multi-head latent attention"
        raise InputError(f"--recompute op: modelled for dense layers with standard attention (TorchTitan's Llama block); "
                         f"{model.name} has {what} layers, whose op order parcalc does not model yet (use none, selective or full)")  # fmt: skip


def op_matmuls(model: TransformerModel) -> tuple[str, ...]:
    """The block's aten.mm calls in the order they run (parcalc.core.layer_ops keys), TT_ORDER."""
    mlp = ("mlp_gate", "mlp_up", "mlp_down") if model.mlp.gated else ("mlp_up", "mlp_down")
    return ("q_proj", "k_proj", "v_proj", "out_proj", *mlp)


def op_saved_matmuls(model: TransformerModel) -> tuple[str, ...]:
    """The matmuls whose output the policy saves: the 1st, 3rd, 5th, ... (odd counts)."""
    return op_matmuls(model)[0::2]


def op_recomputed_matmuls(model: TransformerModel, flash_attention: bool) -> tuple[str, ...]:
    """The matmuls run again in backward: every second aten.mm, and without FlashAttention the
    attention core's Q·K^T and score·V (aten.bmm, not in the list)."""
    core = () if flash_attention else ("scores", "context")
    return (*op_matmuls(model)[1::2], *core)


def op_kernel_shares(model: TransformerModel, flash_attention: bool) -> dict[str, float]:
    """The share of each forward GEMM kernel of parcalc.core.timing.compute that runs again (its
    keys; kernels absent here: memory-bound kernels all run again, attention as flash_attention says).
    The fused QKV and gate-up GEMMs stand for separate matmuls: the recomputed one's share of the
    fused kernel's FLOPs (K: kv / (q + 2 kv); up: 1/2)."""
    again = set(op_recomputed_matmuls(model, flash_attention))
    q, kv = model.q_width, model.kv_width
    qkv = sum(w for key, w in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)) if key in again) / (q + 2 * kv)
    shares = {"qkv": qkv, "proj": float("out_proj" in again), "mlp.down": float("mlp_down" in again)}
    if model.mlp.gated:
        shares["mlp.gate_up"] = (("mlp_gate" in again) + ("mlp_up" in again)) / 2
    else:
        shares["mlp.up"] = float("mlp_up" in again)
    return shares


# ---------------------------------------------------------------------------------------------
# --recompute-layers n


def check_recompute_layers(n: int | None, recompute: Recompute, chunk_layers: tuple[int, ...], model: TransformerModel | None = None) -> None:
    """n layers of each model chunk (a stage, or one of its interleaved chunks): 0 <= n <= the
    fewest layers a chunk holds, and only with full recomputation (MEGATRON_BLOCK)."""
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int):
        raise InputError(f"--recompute-layers: a whole number of layers, got {n!r}")
    if recompute is not Recompute.FULL:
        raise InputError(f"--recompute-layers: needs --recompute full (Megatron-LM's --recompute-num-layers with "
                         f"--recompute-granularity full; it refuses it with selective), got --recompute {recompute.value}")  # fmt: skip
    if model is not None and model.moe is not None:
        raise InputError(f"--recompute-layers: modelled for dense models; {model.name} has Mixture-of-Experts layers "
                         "(use --recompute full for all layers)")  # fmt: skip
    if n < 0:
        raise InputError(f"--recompute-layers: must be 0 or more, got {n}")
    fewest = min(chunk_layers)
    if n > fewest:
        raise InputError(f"--recompute-layers: {n} layers, but a pipeline stage's model chunk holds {fewest} "
                         f"(layers per chunk: {', '.join(str(c) for c in dict.fromkeys(chunk_layers))}); n counts the "
                         "layers of each stage (of each interleaved chunk) that are recomputed")  # fmt: skip


def chunk_layers(stage_layers: tuple[int, ...], chunks: int) -> tuple[int, ...]:
    """The layers of each model chunk of each stage: a stage's layers / v (parcalc.core.stages
    guarantees v divides them)."""
    return tuple(s // chunks for s in stage_layers)


def recomputed_layer_count(n: int | None, stage_layers: tuple[int, ...], chunks: int) -> int:
    """Layers the whole model recomputes: n per chunk of every stage (all of them with n None)."""
    if n is None:
        return sum(stage_layers)
    return sum(min(n, c) for c in chunk_layers(stage_layers, chunks)) * chunks


# ---------------------------------------------------------------------------------------------
# --recompute-modules (Megatron-Core's selective recomputation of named modules)

MEGATRON_MODULES_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_MODULES = (
    f"NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py at {MEGATRON_MODULES_COMMIT[:8]}, "
    "TransformerConfig.recompute_modules (lines 560-582: 'moe_act', 'layernorm', 'mla_up_proj' use output-discarding "
    "checkpointing, 'core_attn', 'mlp', 'moe', and 'shared_experts' use normal checkpointing; default ['core_attn']) and "
    "__post_init__ (lines 1940-1973: the list applies with recompute_granularity 'selective')"
)
MEGATRON_MODULE_SITES = {
    "core_attn": "megatron/core/transformer/attention.py, Attention._checkpointed_attention_forward (tensor_parallel.checkpoint "
                 "around the core attention: keeps Q, K, V, replays the kernel)",
    "mla_up_proj": "megatron/core/transformer/multi_latent_attention.py, qkv_up_proj_and_rope_apply under "
                   "CheckpointWithoutOutput (keeps the latents, discards Q, K, V and the latent norms' outputs)",
    "layernorm": "megatron/core/transformer/transformer_layer.py lines 475-527: input_layernorm and pre_mlp_layernorm under "
                 "CheckpointWithoutOutput when they are not IdentityOp (their outputs discarded after the next module); "
                 "gpt_layer_specs.py (TE spec): a dense layer's norms are fused into linear_qkv and linear_fc1 (IdentityOp), "
                 "MLA's input_layernorm and an MoE layer's pre_mlp_layernorm are TENorm",
    "mlp": "megatron/core/transformer/transformer_layer.py lines 537-539 and 992-1010: tensor_parallel.checkpoint around a "
           "dense layer's MLP (not an MoE layer's); with the TE spec the pre-MLP norm is fused into linear_fc1, so the "
           "checkpoint keeps the residual stream and replays norm, fc1, activation and fc2",
    "moe": "megatron/core/transformer/moe/moe_layer.py lines 247-249 and 701-716: tensor_parallel.checkpoint around the MoE "
           "layer's custom_forward (router, dispatch, experts, combine, shared experts): keeps its input",
    "shared_experts": "megatron/core/transformer/moe/moe_layer.py lines 252-254 and 517-530: checkpoint around the shared "
                      "experts: keeps their input",
    "moe_act": "megatron/core/transformer/moe/experts.py lines 1019-1030: the experts' activation (times the routing "
               "probabilities) under CheckpointWithoutOutput, its output discarded after linear_fc2",
}
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")  # Megatron's names and order (less its GatedDeltaNet and mHC ones, which parcalc has no layers for)
DEFAULT_MODULES = ("core_attn",)


def parse_modules(text: str) -> tuple[str, ...]:
    """'a,b,...' (Megatron's names, comma- or space-separated) as a tuple without repeats; an unknown
    or empty name is an InputError listing the choices."""
    names = [n.lower() for n in re.split(r"[,\s]+", text.strip()) if n]  # a choice, in any case (parcalc.flags.TYPES)
    if not names:
        raise InputError(f"--recompute-modules: name at least one module of {', '.join(RECOMPUTE_MODULES)}")
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown:
        raise InputError(f"--recompute-modules: unknown module {unknown[0]!r}; Megatron-LM's recompute_modules are "
                         f"{', '.join(RECOMPUTE_MODULES)}")  # fmt: skip
    return tuple(dict.fromkeys(names))


def check_modules(modules: tuple[str, ...] | None, recompute: Recompute, model: TransformerModel) -> None:
    """--recompute-modules needs --recompute selective (Megatron-LM: recompute_granularity 'selective'),
    and each module must exist in the model's layers (Megatron refuses mla_up_proj without MLA and
    moe_act without grouped experts; parcalc refuses every module that would recompute nothing)."""
    if modules is None:
        return
    if recompute is not Recompute.SELECTIVE:
        raise InputError(f"--recompute-modules: needs --recompute selective (Megatron-LM applies recompute_modules with "
                         f"--recompute-granularity selective), got --recompute {recompute.value}")  # fmt: skip
    for name in modules:
        if name not in RECOMPUTE_MODULES:
            raise InputError(f"--recompute-modules: unknown module {name!r}; choose from {', '.join(RECOMPUTE_MODULES)}")
    moe = model.moe
    missing = {
        "mla_up_proj": (model.mla is None, "has no multi-head latent attention (no mla: block)"),
        "moe": (moe is None, "has no Mixture-of-Experts layers"),
        "moe_act": (moe is None, "has no Mixture-of-Experts layers"),
        "shared_experts": (moe is None or not moe.shared_experts, "has no shared experts"),
        "mlp": (model.moe_layers >= model.layers, "has no dense MLP (every layer is MoE; Megatron's 'mlp' skips MoE layers: use moe)"),
        "layernorm": (model.norm is Norm.NONE or (model.mla is None and moe is None),
                      "has no separate norm to recompute (Megatron's TE layer spec fuses a dense layer's norms into "
                      "linear_qkv and linear_fc1; only MLA's input norm and an MoE layer's pre-MLP norm are separate)"),
    }
    for name in modules:
        absent, why = missing.get(name, (False, ""))
        if absent:
            raise InputError(f"--recompute-modules {name}: {model.name} {why}")


def recomputed_modules(recompute: Recompute, modules: tuple[str, ...] | None, mla_up_proj: bool = False) -> tuple[str, ...]:
    """The modules selective recomputation checkpoints: `modules`, Megatron's default ['core_attn'] when
    None, nothing without selective recomputation; `mla_up_proj` (--recompute-mla-up-proj, the old
    spelling) adds mla_up_proj whatever the granularity but full (which keeps only the layer input)."""
    if recompute is Recompute.FULL or recompute is Recompute.OP:
        return ()
    chosen = (DEFAULT_MODULES if modules is None else modules) if recompute is Recompute.SELECTIVE else ()
    if mla_up_proj and "mla_up_proj" not in chosen:
        chosen = (*chosen, "mla_up_proj")
    return tuple(chosen)


def module_drops(tensor_key: str, attention_core: bool, modules: tuple[str, ...], model: TransformerModel, moe_layer: bool) -> bool:
    """Whether checkpointing `modules` drops the saved tensor `tensor_key` of a layer
    (parcalc.core.activations.layer_saved_tensors keys; MEGATRON_MODULE_SITES says what each keeps):
    core_attn the attention core's own tensors; layernorm the separate norms' outputs (MLA's down
    projections' input, an MoE layer's router input); mlp a dense layer's fused norm output and its
    intermediates (the checkpoint keeps the norm's input, the residual stream); moe every tensor of
    the MoE block after its input; shared_experts the shared experts' intermediates; moe_act the
    experts' activation output (fc2's input). mla_up_proj is applied by mla_tensors itself."""
    mla, moe = model.mla is not None, moe_layer and model.moe is not None
    if "core_attn" in modules and attention_core:
        return True
    if "layernorm" in modules and model.norm is not Norm.NONE and ((mla and tensor_key == "qkv_input") or (moe and tensor_key == "mlp_input")):
        return True
    if "mlp" in modules and not moe and (tensor_key in MLP_TENSORS or (tensor_key == "mlp_input" and model.norm is not Norm.NONE)):
        return True
    if "moe" in modules and moe and tensor_key.startswith(MOE_TENSOR_PREFIXES):
        return True
    if "shared_experts" in modules and moe and tensor_key.startswith("shared_"):
        return True
    return "moe_act" in modules and moe and tensor_key == "expert_down_input" and model.mlp is not Mlp.RELU


MLP_TENSORS = ("gate_output", "up_output", "down_input", "activation_input", "relu_output")  # activations._mlp_tensors keys
MOE_TENSOR_PREFIXES = ("router_probs", "routing_indices", "permuted_tokens", "expert_", "routing_weights", "shared_")


def module_replays_kernel(kernel_key: str, modules: tuple[str, ...], model: TransformerModel, moe_layer: bool,
                          attention_core: frozenset[str] = frozenset()) -> bool:  # fmt: skip
    """Whether the forward kernel `kernel_key` (parcalc.core.timing.compute / timing.moe keys; '.cast' the
    FP8 cast of a linear's input) runs again in backward when `modules` are checkpointed."""
    key = kernel_key.removesuffix(".cast")
    if "core_attn" in modules and kernel_key in attention_core:
        return True
    if "mla_up_proj" in modules and model.mla is not None and key in ("mla.q_norm", "mla.q_up", "mla.kv_norm", "mla.kv_up", "rope"):
        return True
    if "layernorm" in modules and ((model.mla is not None and key == "norm1") or (moe_layer and key == "norm2")):
        return True
    if "mlp" in modules and not moe_layer and (key == "norm2" or key.startswith("mlp.")):
        return True
    if "moe" in modules and moe_layer and key.startswith("moe."):
        return True
    if "shared_experts" in modules and moe_layer and key.startswith("moe.shared."):
        return True
    return "moe_act" in modules and moe_layer and (key == "moe.experts.act" or key.startswith("moe.experts.act."))


def module_replays_op(op_key: str, modules: tuple[str, ...], model: TransformerModel, moe_layer: bool) -> bool:
    """Whether the forward operation `op_key` (parcalc.core.layer_ops keys) runs again in backward when
    `modules` are checkpointed: its FLOPs count in hardware FLOPs."""
    if "core_attn" in modules and op_key in ("scores", "context", "softmax"):
        return True
    if "mla_up_proj" in modules and op_key in ("q_up", "kv_up"):
        return True
    if "mlp" in modules and not moe_layer and (op_key.startswith("mlp_") or op_key == "activation"):
        return True
    if "moe" in modules and moe_layer and (op_key in ("router", "router_score", "shared_gate") or op_key.startswith(("expert_", "shared_"))):
        return True
    if "shared_experts" in modules and moe_layer and (op_key.startswith("shared_")):
        return True
    return "moe_act" in modules and moe_layer and op_key == "expert_activation"
