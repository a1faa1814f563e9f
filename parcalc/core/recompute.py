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

from parcalc.core.choices import Recompute
from parcalc.core.model import TransformerModel
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
