"""The kernels of a gated-DeltaNet hybrid's layers (Qwen3-Next: parcalc.core.linear_attention) on one GPU, forward and
backward: the gated-DeltaNet mixer's GEMMs, its chunked delta rule and its memory-bound kernels, and the layer the step
multiplies with each mixer weighted by its share of the layers (the one hook: parcalc.core.timing.compute.layer_passes).

A Qwen3-Next layer is a transformer layer (norm, mixer, residual, norm, MoE block, residual) whose mixer is softmax
attention in 1 of every `full_every` layers and a gated-DeltaNet mixer in the others; the norms, residuals and the MoE
block are the transformer layer's kernels. The mixer (transformers' Qwen3NextGatedDeltaNet with causal-conv1d and
flash-linear-attention's kernels, fla/ops/gated_delta_rule/chunk.py @bc3b101d), per GPU of a TP group of t (heads / t),
T = b s tokens, chunks of C = 64 tokens, one (sequence, value head, chunk) a group:
- in_proj_qkvz and in_proj_ba: one GEMM T x h x (2 key_dim + 2 value_dim + 2 value heads) / t, fed by the norm;
- causal_conv1d_fwd with SiLU over cat(q, k, v): memory-bound, reads and writes T x conv_dim / t; its backward runs the
  forward again (CausalConv1dFn keeps x only), then reads x and dy and writes dx;
- the decay g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) in PyTorch (fp32 g), and l2norm_fwd of q and k:
  memory-bound;
- the chunked delta rule, its products as layer_ops.linear_attention_ops counts them (K_beta K^T, Q K^T, K_cum S, Q S,
  the chunk's attention times the new values, the state update K^T V_new), each a batched GEMM of its shape; the UT
  transform as fla runs it: solve_tril inverts each chunk's system into A, then recompute_w_u_fwd multiplies A by the
  decayed K_beta and by V_beta (two [C x C]·[C x d] GEMMs, twice the triangular solves' FLOPs parcalc flops counts);
  the chunk states h (d_k x d_v per group, in the inputs' dtype) written by chunk_gated_delta_rule_fwd_h and read by
  chunk_fwd_o: memory-bound;
- backward (chunk_gated_delta_rule_bwd): w, u and h computed again (recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h),
  then every product's two gradients (its operands', the FLOP convention of parcalc.core.flops), the states' gradients
  dh written and read;
- fla's fused gated RMSNorm over T x value_dim / t (o and z in, y out; backward dy, o, z in, do, dz out); out_proj, a
  GEMM T x (value_dim / t) x h.
The batched products are timed as GEMMs of their shape (parcalc.core.timing.kernels.gemm: the GPU's measured tiles and
waves); the Triton kernels' own efficiency is not measured here: it is the assumption that moves this mixer most.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from parcalc.core.linear_attention import CHUNK, chunks
from parcalc.core.model import TransformerModel
from parcalc.core.timing.kernels import ComputeSpec, Kernel, LayerKernels, linear_kernels, memory_op
from parcalc.core.timing.layer_shard import LayerShard
from parcalc.errors import InputError

if TYPE_CHECKING:
    from parcalc.core.timing.compute import LayerPasses

Kernels = tuple[Kernel, ...]
FP32 = 4.0
LINEAR_KERNELS_SOURCE = (
    "transformers models/qwen3_next/modeling_qwen3_next.py (5.24) Qwen3NextGatedDeltaNet; fla-org/flash-linear-attention "
    "fla/ops/gated_delta_rule/chunk.py @bc3b101d (chunk_gated_delta_rule_fwd: chunk_local_cumsum, "
    "chunk_gated_delta_rule_fwd_intra, chunk_gated_delta_rule_fwd_h, chunk_fwd_o; chunk_gated_delta_rule_bwd: "
    "recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h again, chunk_bwd_dv_local, chunk_gated_delta_rule_bwd_dhu, "
    "chunk_bwd_dqkwg, prepare_wy_repr_bwd); Dao-AILab/causal-conv1d CausalConv1dFn (the conv recomputed in backward)"
)
# the softmax-attention mixer's kernels in a transformer layer (parcalc.core.timing.compute._attention_block): what a
# gated-DeltaNet layer runs its own mixer in place of; the norms, residuals and the MLP / MoE block stay
ATTENTION_MIXER = ("qkv", "q_norm", "k_norm", "qk_norm", "rope", "attn", "proj")


def check_kernel_set(shard: LayerShard) -> None:
    """Qwen3-Next trains with flash-linear-attention's Triton kernels; eager, compiled and Hugging Face sets are not listed."""
    if shard.eager or shard.compiled or shard.hf:
        raise InputError("--kernels: a gated-DeltaNet hybrid is timed with fused kernels (--kernels fused) only")
    if shard.cp > 1:
        raise InputError("--cp: the delta rule's state passed between context-parallel ranks is not modelled")


def gdn_mixer(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> tuple[Kernels, Kernels]:
    """(forward, backward) kernels of one gated-DeltaNet mixer on one GPU (the module docstring)."""
    gdn = model.linear_attention
    assert gdn is not None
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h = b * s, model.hidden
    hv, hk = gdn.value_heads // t, gdn.key_heads // t
    kd, vd = hk * gdn.key_head_dim, hv * gdn.value_head_dim
    conv = 2 * kd + vd
    dk, dv, c = gdn.key_head_dim, gdn.value_head_dim, CHUNK
    groups = b * hv * chunks(s)
    kernels = LayerKernels(spec, e, shard.fp8)
    forward, backward, mem = kernels.forward, kernels.backward, kernels.mem
    kernels.linear("gdn.in_proj", tokens, h, 2 * kd + 2 * vd + 2 * hv, norm_fed=True)
    qkv = f"[{tokens}×{conv}]"
    forward.append(memory_op("gdn.conv", 2 * e * tokens * conv, spec, qkv))
    backward.append(memory_op("gdn.conv.bwd", (2 + 3) * e * tokens * conv, spec, qkv))  # the forward again, then x, dy -> dx
    gates = f"[{tokens}×{hv}]"
    # a and b in, beta out (e); softplus's input and output and g (fp32) out; backward: dg, dbeta and the saved in, da, db out
    mem("gdn.gates", (2 * e + e + 3 * FP32) * tokens * hv, (3 * FP32 + e + 2 * e) * tokens * hv, gates)
    mem("gdn.l2norm", 2 * 2 * e * tokens * kd + 2 * FP32 * tokens * hk, 2 * 3 * e * tokens * kd, f"[{tokens}×{kd}] ×2")
    mem("gdn.g_cumsum", 2 * FP32 * tokens * hv, 2 * FP32 * tokens * hv, gates)
    per = f" ×{groups}"
    products = (("gdn.kkt", c, dk, c), ("gdn.w", c, c, dk), ("gdn.u", c, c, dv), ("gdn.h", dk, c, dv), ("gdn.v_new", c, dk, dv),
                ("gdn.qk", c, dk, c), ("gdn.o_inter", c, dk, dv), ("gdn.o_intra", c, c, dv))  # fmt: skip
    again = ("gdn.w", "gdn.u", "gdn.h", "gdn.v_new")  # recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h in backward
    states = e * groups * dk * dv
    for key, m, k, n in products:
        fwd, dgrad, wgrad = linear_kernels(key, m, k, n, e, spec, groups)
        forward.append(fwd._replace(shape=f"[{m}×{k}]·[{k}×{n}]{per}"))
        if key in again:
            backward.append(fwd._replace(key=f"{key}.again", shape=f"[{m}×{k}]·[{k}×{n}]{per}"))
        backward.extend((dgrad, wgrad))
    forward.append(memory_op("gdn.states", 2 * states, spec, f"[{dk}×{dv}]{per}"))  # h written, read by chunk_fwd_o
    backward.append(memory_op("gdn.states.bwd", 4 * states, spec, f"[{dk}×{dv}]{per}"))  # h again, dh: each written and read
    y = f"[{tokens}×{vd}]"
    mem("gdn.gated_norm", 3 * e * tokens * vd, 5 * e * tokens * vd, y)
    kernels.linear("gdn.out_proj", tokens, vd, h)
    return tuple(forward), tuple(backward)


def _scaled(kernels: Kernels, share: float) -> Kernels:
    return tuple(k._replace(flops=k.flops * share, bytes=k.bytes * share, time=k.time * share) for k in kernels)


def _is_attention_mixer(kernel: Kernel) -> bool:
    return kernel.key.split(".")[0] in ATTENTION_MIXER


def with_linear_mixers(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, passes: LayerPasses) -> LayerPasses:
    """The model's mean layer from a transformer layer's kernels (`passes`, a LayerPasses): the softmax-attention mixer's
    kernels weighted by the attention layers' share (12 / 48 in Qwen3-Next) and the gated-DeltaNet mixer's by theirs
    (36 / 48), in the mixer's place; so that L layers of it are the model's layers exactly (a pipeline stage is timed as
    its layers' count of the mean layer: its own mix differs by a layer or two)."""
    gdn = model.linear_attention
    assert gdn is not None
    check_kernel_set(shard)
    share = gdn.linear_layers_in(0, model.layers) / model.layers
    mixer_f, mixer_b = gdn_mixer(model, shard, spec)

    def mixed(kernels: Kernels, mixer: Kernels) -> Kernels:
        out: list[Kernel] = []
        placed = False
        for k in kernels:
            if _is_attention_mixer(k):
                if not placed:  # the gated-DeltaNet mixer where attention's begins
                    out.extend(_scaled(mixer, share))
                    placed = True
                out.append(k._replace(flops=k.flops * (1 - share), bytes=k.bytes * (1 - share), time=k.time * (1 - share)))
            else:
                out.append(k)
        return tuple(out)

    forward = mixed(passes.forward, mixer_f)
    core = tuple(forward[[k.key for k in forward].index(k.key)] for k in passes.attention_core)
    return replace(passes, forward=forward, backward=mixed(passes.backward, mixer_b), attention_core=core)
