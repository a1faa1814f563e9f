"""The kernels of a Mamba-2 hybrid's layers (Nemotron-H: one block per layer, parcalc.core.mamba) on one GPU, forward and
backward, as Megatron-LM trains it: the Mamba-2 block's GEMMs and its SSD and conv kernels, the attention block and the MLP
block, and the mean layer the step multiplies (the one hook: parcalc.core.timing.compute.layer_passes, which hands in its
attention kernels).

The Mamba-2 block (Megatron-LM megatron/core/ssm/mamba_mixer.py @00bebb45, MambaMixer._ssm_training; mamba_ssm
mamba_ssm/ops/triton/ssd_combined.py, MambaSplitConv1dScanCombinedFn and _mamba_chunk_scan_combined_fwd / _bwd), per GPU of
a TP group of t (H / t heads, G / t groups, d_inner / t channels), T = b s tokens, chunks of Q tokens:
- the block norm (fused into in_proj, TELayerNormColumnParallelLinear) and in_proj: a GEMM T x h x (in_proj_width / t);
- causal_conv1d_fwd with SiLU over x, B, C: memory-bound, reads and writes T x conv_dim / t; its backward reads x and dy
  and writes dx, after the forward runs again (the combined function keeps zxBCdt, not the conv's output);
- _chunk_cumsum_fwd: the discretised dt and its cumulative sum per chunk (fp32): memory-bound, T x H / t;
- _chunk_state_fwd: each chunk's state B^T X, a batched GEMM [N x Q]·[Q x P] per (sequence, chunk, head);
- _state_passing_fwd: the states passed from chunk to chunk (fp32): memory-bound, reading and writing b c H P N / t;
- _bmm_chunk_fwd: C B^T per (sequence, chunk, group), [Q x N]·[N x Q];
- _chunk_scan_fwd: the intra-chunk (masked C B^T)·X, [Q x Q]·[Q x P], and the state's output C·h, [Q x N]·[N x P], per head;
- the gated RMSNorm (RMSNormGated on y·silu(z)): memory-bound over T x d_inner / t; out_proj: a GEMM T x (d_inner / t) x h;
  the residual add.
Every product's backward is two products of its size (its input and its other operand's gradients: the FLOP convention
of parcalc.core.flops), the state passing's backward reads the states and their gradients and writes one. The GEMM-like
SSD kernels are timed as GEMMs of their shape (parcalc.core.timing.kernels.gemm: the GPU's measured tiles and waves); the
Triton kernels' own efficiency is not measured here: it is the assumption that moves this block most.
"""

from __future__ import annotations

from parcalc.core.choices import Norm
from parcalc.core.mamba import ATTENTION, MAMBA, MLP
from parcalc.core.model import TransformerModel
from parcalc.core.timing.kernels import ComputeSpec, Kernel, LayerKernels, linear_kernels, memory_op
from parcalc.core.timing.layer_shard import LayerShard
from parcalc.errors import InputError

Kernels = tuple[Kernel, ...]
STATE_BYTES = 4.0  # the chunk states and dA_cumsum are fp32 in mamba_ssm (_state_passing_fwd out_dtype, _chunk_cumsum_fwd)
MAMBA_KERNELS_SOURCE = (
    "Megatron-LM megatron/core/ssm/mamba_mixer.py @00bebb45 (MambaMixer._ssm_training: mamba_split_conv1d_scan_combined, then "
    "the gated norm and out_proj); state-spaces/mamba mamba_ssm/ops/triton/ssd_combined.py (_mamba_chunk_scan_combined_fwd: "
    "_chunk_cumsum_fwd, _chunk_state_fwd, _state_passing_fwd, _bmm_chunk_fwd, _chunk_scan_fwd; the conv recomputed in backward)"
)


def check_kernel_set(shard: LayerShard) -> None:
    """Nemotron-H trains under Megatron-LM's fused kernels; eager, compiled and Hugging Face kernel sets are not listed.
    Under context parallelism the shard is s/cp tokens with heads / t, the same work as Megatron-Core's conv1d and scan on
    s tokens with heads / (t cp) (parcalc.core.hybrid_context.KERNELS_UNDER_CP)."""
    if shard.eager or shard.compiled or shard.hf:
        raise InputError("--kernels: a Mamba-2 hybrid is timed with Megatron-LM's fused kernels (--kernels fused) only")


def mamba_block(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """(forward, backward) kernels of one Mamba-2 block on one GPU (the module docstring)."""
    mamba = model.mamba
    assert mamba is not None
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h = b * s, model.hidden
    heads, groups, inner = mamba.heads // t, mamba.groups // t, mamba.d_inner // t
    conv = inner + 2 * groups * mamba.state
    q, n, p = mamba.chunk, mamba.state, mamba.head_dim
    chunks = b * mamba.chunks(s)
    seq_tokens = tokens // t if shard.sequence_parallel else tokens
    kernels = LayerKernels(spec, e, shard.fp8)
    forward, backward, mem = kernels.forward, kernels.backward, kernels.mem
    act = f"[{seq_tokens}×{h}]"
    if model.norm is not Norm.NONE:
        mem("norm1", 2 * e * seq_tokens * h, 3 * e * seq_tokens * h, act)
    kernels.linear("ssm.in_proj", tokens, h, mamba.in_proj_width // t, norm_fed=model.norm is not Norm.NONE)
    xbc = f"[{tokens}×{conv}]"
    forward.append(memory_op("ssm.conv", 2 * e * tokens * conv, spec, xbc))
    backward.append(memory_op("ssm.conv.bwd", (2 + 3) * e * tokens * conv, spec, xbc))  # the forward again, then x, dy -> dx
    dt = f"[{tokens}×{heads}]"
    mem("ssm.dt_cumsum", (e + 2 * STATE_BYTES) * tokens * heads, 3 * STATE_BYTES * tokens * heads, dt)
    ssd: list[tuple[str, int, int, int, int]] = [("ssd.chunk_state", n, q, p, chunks * heads), ("ssd.cb", q, n, q, chunks * groups),
                                                 ("ssd.scan_diag", q, q, p, chunks * heads), ("ssd.scan_off", q, n, p, chunks * heads)]  # fmt: skip
    states = chunks * heads * p * n
    for key, m, k, width, batch in ssd[:2]:
        fwd, dgrad, wgrad = linear_kernels(key, m, k, width, e, spec, batch)
        forward.append(fwd)
        backward.extend((dgrad, wgrad))
    forward.append(memory_op("ssd.state_passing", 2 * STATE_BYTES * states, spec, f"[{p}×{n}] ×{chunks * heads}"))
    backward.append(memory_op("ssd.state_passing.bwd", 3 * STATE_BYTES * states, spec, f"[{p}×{n}] ×{chunks * heads}"))
    for key, m, k, width, batch in ssd[2:]:
        fwd, dgrad, wgrad = linear_kernels(key, m, k, width, e, spec, batch)
        forward.append(fwd)
        backward.extend((dgrad, wgrad))
    y = f"[{tokens}×{inner}]"
    mem("ssm.gated_norm", 3 * e * tokens * inner, 5 * e * tokens * inner, y)  # y and z in, out; dy, y, z in, dy, dz out
    kernels.linear("ssm.out_proj", tokens, inner, h)
    mem("residual", 3 * e * seq_tokens * h, 0.0, act)
    return tuple(forward), tuple(backward)


def mlp_block(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """(forward, backward) kernels of one MLP block: its norm, fc1, squared ReLU, fc2, the residual add."""
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h, f = b * s, model.hidden, model.ffn_hidden // t
    seq_tokens = tokens // t if shard.sequence_parallel else tokens
    kernels = LayerKernels(spec, e, shard.fp8)
    act = f"[{seq_tokens}×{h}]"
    if model.norm is not Norm.NONE:
        kernels.mem("norm2", 2 * e * seq_tokens * h, 3 * e * seq_tokens * h, act)
    kernels.linear("mlp.up", tokens, h, f, norm_fed=model.norm is not Norm.NONE)
    kernels.mem("mlp.act", 2 * e * tokens * f, 3 * e * tokens * f, f"[{tokens}×{f}]")
    kernels.linear("mlp.down", tokens, f, h)
    kernels.mem("residual", 3 * e * seq_tokens * h, 0.0, act)
    return tuple(kernels.forward), tuple(kernels.backward)


def attention_block(layer_attention: tuple[tuple[Kernel, ...], ...]) -> tuple[tuple[Kernel, ...], ...]:
    """(forward, backward, attention core) of one attention block from a transformer layer's kernels up to its MLP
    (compute._attention_block), without the second norm: a Nemotron-H block has one norm (the next block's is its own)."""
    forward, backward, core = layer_attention
    drop = ("norm2", "norm2.bwd")
    return tuple(k for k in forward if k.key not in drop), tuple(k for k in backward if k.key not in drop), core


def _scaled(kernels: tuple[Kernel, ...], share: float) -> tuple[Kernel, ...]:
    return tuple(k._replace(flops=k.flops * share, bytes=k.bytes * share, time=k.time * share) for k in kernels)


def mean_layer_kernels(model: TransformerModel, shard: LayerShard, spec: ComputeSpec,
                       layer_attention: tuple[tuple[Kernel, ...], ...]) -> tuple[Kernels, Kernels, Kernels]:  # fmt: skip
    """(forward, backward, attention core) of the model's mean layer: each block's kernels weighted by its share of the
    layers (24 / 52 Mamba-2, 4 / 52 attention, 24 / 52 MLP in Nemotron-H-8B), so that L layers of it are the model's layers
    exactly; a pipeline stage is timed as its layers' count of the mean layer (its own mix differs by a block or two).
    `layer_attention`: a transformer layer's kernels up to its MLP (compute._attention_block), whose hook calls this."""
    assert model.mamba is not None
    check_kernel_set(shard)
    counts = model.mamba.blocks_in(0, model.layers)
    shares = {MAMBA: counts.mamba / model.layers, ATTENTION: counts.attention / model.layers, MLP: counts.mlp / model.layers}
    ssm_f, ssm_b = mamba_block(model, shard, spec)
    att_f, att_b, core = attention_block(layer_attention)
    mlp_f, mlp_b = mlp_block(model, shard, spec)
    attention = _scaled(att_f, shares[ATTENTION])
    core_scaled = tuple(attention[att_f.index(k)] for k in core)  # the same kernels as in forward (LayerPasses.attention_core)
    forward = _scaled(ssm_f, shares[MAMBA]) + attention + _scaled(mlp_f, shares[MLP])
    backward = _scaled(ssm_b, shares[MAMBA]) + _scaled(att_b, shares[ATTENTION]) + _scaled(mlp_b, shares[MLP])
    return forward, backward, core_scaled


# Each block's column-parallel linear (parcalc.core.mamba.TP_SITES_PER_BLOCK): what SP gathers again in its backward
BLOCK_COLUMN_DGRADS = {MAMBA: "ssm.in_proj.dgrad", ATTENTION: "qkv.dgrad", MLP: "mlp.up.dgrad"}


def mean_layer_regather(model: TransformerModel, backward: Kernels, gather: float) -> tuple[float, float]:
    """Sequence parallelism's backward re-gather of the mean layer (parcalc.core.timing.step.regather_per_layer for a block):
    each block's column-parallel linear gathers its input again (one all-gather of b s h) beside its input-gradient GEMM,
    so a layer gathers once, and what stays exposed is each block's max(0, t_AG - t_dgrad) weighted by its share of the
    layers; `backward`: the mean layer's kernels (each scaled by its block's share)."""
    assert model.mamba is not None
    counts = model.mamba.blocks_in(0, model.layers)
    shares = {MAMBA: counts.mamba / model.layers, ATTENTION: counts.attention / model.layers, MLP: counts.mlp / model.layers}
    times = {k.key: k.time for k in backward}
    exposed = sum(share * max(0.0, gather - times.get(BLOCK_COLUMN_DGRADS[block], 0.0) / share)
                  for block, share in shares.items() if share > 0)  # fmt: skip
    return gather, exposed
