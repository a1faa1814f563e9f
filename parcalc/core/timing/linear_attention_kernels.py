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
- the chunked delta rule as fla's fused Triton kernels, each one kernel (fused_kernel): its products per group at the
  GPU's rate for a GEMM of their shape, and in HBM its inputs read once and its outputs written once:
  chunk_gated_delta_rule_fwd_intra (K_beta K^T, the inverse A of each chunk's unit-triangular UT system, then
  w = A·(decayed K_beta) and u = A·V_beta: two [C x C]·[C x d] GEMMs, twice the triangular solves' FLOPs parcalc flops
  counts), chunk_gated_delta_rule_fwd_h (chunk by chunk v_new = u - w·h and h += K^T v_new; h written per chunk) and
  chunk_fwd_o (Q K^T, Q·h, A·v_new); the reads and writes as chunk_gated_delta_rule_fwd passes them;
- backward (chunk_gated_delta_rule_bwd): recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h again, then
  chunk_bwd_dv_local, chunk_gated_delta_rule_bwd_dhu (dh per chunk), chunk_bwd_dqkwg and prepare_wy_repr_bwd, each
  reading and writing the tensors the source passes it, and the products the chunkwise WY gradients take (Yang et al.
  2024, 'Parallelizing Linear Transformers with the Delta Rule over Sequence Length', sec. 3: the chain rule through
  A = (I + strictly-lower(diag(beta) K K^T))^-1 costs two C x C x C products);
- fla's fused gated RMSNorm over T x value_dim / t (o and z in, y out; backward dy, o, z in, do, dz out); out_proj, a
  GEMM T x (value_dim / t) x h.
The Triton kernels' own efficiency is not measured here (no published kernel timings of fla's chunk_gated_delta_rule at
this shape were found): the products run at the GEMM rate parcalc gives their shape; it is the assumption that moves the
mixer most.
"""

from __future__ import annotations

from parcalc.core.linear_attention import CHUNK, chunks
from parcalc.core.model import TransformerModel
from parcalc.core.timing.kernels import ComputeSpec, Kernel, LayerKernels, _roofline, gemm, memory_op, quantisation
from parcalc.core.timing.layer_shard import LayerShard
from parcalc.errors import InputError

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
    """Qwen3-Next trains with flash-linear-attention's Triton kernels; eager, compiled and Hugging Face sets are not listed.
    Under context parallelism the shard is s/cp tokens with heads / t, the same work as Megatron-Core's delta rule on s
    tokens with heads / (t cp) (parcalc.core.hybrid_context.KERNELS_UNDER_CP)."""
    if shard.eager or shard.compiled or shard.hf:
        raise InputError("--kernels: a gated-DeltaNet hybrid is timed with fused kernels (--kernels fused) only")


Product = tuple[int, int, int]  # (m, k, n) of one [m x k]·[k x n] per group


def fused_kernel(key: str, products: tuple[Product, ...], extra_flops: float, traffic: float, groups: int, e: float,
                 spec: ComputeSpec) -> Kernel:  # fmt: skip
    """One of fla's fused Triton kernels: its products per group (sequence, value head, chunk) at the GPU's rate for a
    GEMM of each product's shape (parcalc.core.timing.kernels.gemm where that is compute-bound; its share of the peak
    after tile and wave quantisation otherwise, the operands then being in registers, not HBM), `extra_flops` at the
    first product's rate, and `traffic` the bytes the kernel reads and writes in HBM (its inputs once, its outputs once)."""
    flops, seconds = 0.0, 0.0
    for m, k, n in products:
        alone = gemm(key, m, k, n, e, spec, groups)
        rate = alone.flops / alone.time if alone.bound == "compute" else spec.peak * spec.matmul.value * quantisation(m, n, groups, spec)
        flops += alone.flops
        seconds += alone.flops / rate
    if extra_flops:
        m, k, n = products[0]
        seconds += extra_flops / (spec.peak * spec.matmul.value * quantisation(m, n, groups, spec))
        flops += extra_flops
    shape = " + ".join(f"[{m}×{k}]·[{k}×{n}]" for m, k, n in products) + f" ×{groups}"
    return _roofline(key, "gemm", flops, traffic, flops / seconds, spec, shape)


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
    # the tensors fla's kernels read and write, bytes (GVA: q and k at the key heads; w, u, v_new, o at the value heads)
    q = k = e * tokens * kd
    v = u = v_new = o = w_v = e * tokens * vd
    w = e * tokens * hv * dk
    beta, g, a_inv = e * tokens * hv, FP32 * tokens * hv, e * tokens * hv * c
    states = e * groups * dk * dv  # h (and dh): one d_k x d_v state per chunk
    inverse = c * (c - 1) * (c - 2) / 3  # a unit lower-triangular C x C inverted: C (C - 1) (C - 2) / 6 multiply-adds
    kkt, wy_k, wy_v = (c, dk, c), (c, c, dk), (c, c, dv)
    read_state, write_state = (c, dk, dv), (dk, c, dv)
    fused = lambda key, products, traffic, extra=0.0: fused_kernel(key, products, extra * groups, traffic, groups, e, spec)  # noqa: E731
    intra = fused("gdn.fwd_intra", (kkt, wy_k, wy_v), k + v + beta + g + a_inv + w + u, inverse)
    recurrence = fused("gdn.fwd_h", (read_state, write_state), k + w + u + g + states + v_new)
    forward += [intra, recurrence,
                fused("gdn.fwd_o", ((c, dk, c), read_state, (c, c, dv)), q + k + v_new + states + g + o)]  # fmt: skip
    backward += [  # chunk_gated_delta_rule_bwd: w, u and h again, then the gradients kernel by kernel
        fused("gdn.recompute_w_u", (wy_k, wy_v), k + v + beta + a_inv + g + w + u),
        recurrence._replace(key="gdn.fwd_h.again"),
        fused("gdn.bwd_dv_local", ((c, dk, c), (c, c, dv)), q + k + g + o + v),
        fused("gdn.bwd_dhu", (read_state, write_state, write_state), q + k + w + g + o + v + states + v),
        fused("gdn.bwd_dqkwg", ((c, dv, c), (c, dv, dk), (c, c, dk), (c, dv, dk), (c, c, dk), (c, dv, dk)),
              q + k + v_new + w + g + states + v + o + states + q + k + w + g),
        fused("gdn.prepare_wy_bwd", ((c, dk, c), (c, dv, c), wy_k, wy_v, (c, c, c), (c, c, c), (c, c, dk), (c, c, dk)),
              k + v + beta + g + a_inv + w + w_v + k + v + beta + g),
    ]  # fmt: skip
    y = f"[{tokens}×{vd}]"
    mem("gdn.gated_norm", 3 * e * tokens * vd, 5 * e * tokens * vd, y)
    kernels.linear("gdn.out_proj", tokens, vd, h)
    return tuple(forward), tuple(backward)


def _scaled(kernels: Kernels, share: float) -> Kernels:
    return tuple(k._replace(flops=k.flops * share, bytes=k.bytes * share, time=k.time * share) for k in kernels)


def _is_attention_mixer(kernel: Kernel) -> bool:
    return kernel.key.split(".")[0] in ATTENTION_MIXER


def with_linear_mixers(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, forward: Kernels, backward: Kernels,
                       attention_core: Kernels) -> tuple[Kernels, Kernels, Kernels]:
    """The model's mean layer (forward, backward, attention core) from a transformer layer's kernels (parcalc.core.timing.
    compute.LayerPasses' three, which the caller builds again: this module stays below compute): the softmax-attention mixer's
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

    mean_forward = mixed(forward, mixer_f)
    core = tuple(mean_forward[[k.key for k in mean_forward].index(k.key)] for k in attention_core)
    return mean_forward, mixed(backward, mixer_b), core


def mean_layer_regather(model: TransformerModel, backward: Kernels, gather: float) -> tuple[float, float]:
    """Sequence parallelism's backward re-gathers of the mean layer (parcalc.core.timing.step.regather_per_layer): each
    column-parallel linear gathers its input again beside its input-gradient GEMM, the mixer's (attention's QKV in its
    share of the layers, in_proj in the gated-DeltaNet layers') and the MLP's; what stays exposed is max(0, t_AG - t_dgrad)
    of each, the mixers' weighted by their shares; `backward`: the mean layer's kernels (the mixers' scaled by share)."""
    gdn = model.linear_attention
    assert gdn is not None
    share = gdn.linear_layers_in(0, model.layers) / model.layers
    times = {k.key: k.time for k in backward}
    exposed = sum(w * max(0.0, gather - times[key] / w) for key, w in (("qkv.dgrad", 1 - share), ("gdn.in_proj.dgrad", share))
                  if w > 0 and key in times)  # fmt: skip
    mlp = [k.time for k in backward if k.key in ("mlp.up.dgrad", "mlp.gate_up.dgrad")]
    return (1 + len(mlp)) * gather, exposed + sum(max(0.0, gather - t) for t in mlp)
