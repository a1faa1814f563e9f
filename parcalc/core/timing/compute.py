"""Which kernels one transformer layer runs on one GPU, forward and backward, and those of the model's ends.

Each kernel is timed by parcalc.core.timing.kernels (a roofline: GEMMs by shape, memory-bound kernels by
bytes and path, fused attention at its measured share). The operations and their traffic follow
Megatron-LM's GPT layer (fused bias-GeLU, fused bias-dropout-add, fused scale-mask-softmax) and Llama's
(RMSNorm, RoPE, SwiGLU); eager PyTorch runs one kernel per ATen op (EAGER_SOURCE), Hugging Face's Llama
under autocast its own set (parcalc.core.timing.hf_kernels). With tensor parallelism each GPU holds 1/t
of the heads and of the MLP width; with sequence parallelism the norms and residual adds see 1/t of the
tokens (Korthikanti et al. 2022, sec. 4.2.2).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property, lru_cache
from typing import Any

from parcalc.core.attention_window import core_share
from parcalc.core.choices import Norm, Position, Recompute
from parcalc.core.model import TransformerModel
from parcalc.core.timing.attention_tiles import attention_shape
from parcalc.core.timing.hf_compiled_kernels import hf_compiled_ends, hf_compiled_layer
from parcalc.core.timing.hf_kernels import hf_applies, hf_ends, hf_layer
from parcalc.core.timing.kernels import (  # noqa: F401 - the kernel primitives, re-exported where callers found them
    COLUMN_PARALLEL_DGRADS,
    FLASH_BACKWARD_FLOPS,
    FP8_RECIPE_SOURCE,
    FP8_RECIPES,
    GENERIC,
    GENERIC_BANDWIDTH,
    GENERIC_KERNELS,
    GENERIC_MATMUL,
    GENERIC_SMS,
    LOGIT_BYTES,
    MASK_BYTES,
    ComputeSpec,
    Kernel,
    LayerKernels,
    compute_spec,
    flash_attention,
    fp8_cast,
    gemm,
    linear_kernels,
    linear_passes,
    memory_op,
    quantisation,
    sixteen_bit_peak,
)
from parcalc.core.timing.kinds import KindTimes, kind_times
from parcalc.core.timing.layer_shard import LayerShard
from parcalc.core.timing.moe import GATE_BYTES, ExpertShard, routed_rows, routed_tokens
from parcalc.frozen import frozen

# ---------------------------------------------------------------------------------------------
# One layer


@frozen
class LayerPasses:
    """The kernels of one layer: forward, backward, and what selective recomputation runs again."""

    forward: tuple[Kernel, ...]
    backward: tuple[Kernel, ...]
    attention_core: tuple[Kernel, ...]  # the forward kernels selective recomputation replays
    shared_forward: float = 0.0  # an MoE layer's shared experts, forward and backward (what --ep-overlap shared hides under)
    shared_backward: float = 0.0

    @cached_property
    def t_forward(self) -> float:
        return sum(k.time for k in self.forward)

    @cached_property
    def t_backward(self) -> float:
        return sum(k.time for k in self.backward)

    def t_recompute(self, recompute: Recompute, model: TransformerModel | None = None, modules: tuple[str, ...] | None = None) -> float:
        """Forward kernels run again in backward (recompute_weights: how often each forward kernel replays)."""
        return sum(k.time * w for k, w in zip(self.forward, self.recompute_weights(recompute, model, modules), strict=True))

    def recompute_weights(self, recompute: Recompute, model: TransformerModel | None = None,
                          modules: tuple[str, ...] | None = None) -> tuple[float, ...]:  # fmt: skip
        """The share of each forward kernel that runs again in backward. OP (op-level selective
        checkpointing, model needed): every memory-bound kernel, the recomputed matmuls' share of their
        GEMM kernels (parcalc.core.recompute.op_kernel_shares) and, without FlashAttention, the attention
        core; FlashAttention's forward is saved, not run again. SELECTIVE: the attention core, or with
        `modules` (Megatron-LM's recompute_modules; model needed) the kernels of each checkpointed
        module (parcalc.core.recompute.module_replays_kernel)."""
        if recompute is Recompute.FULL:
            return (1.0,) * len(self.forward)
        if recompute is Recompute.SELECTIVE and modules is not None and tuple(modules) != ("core_attn",):
            from parcalc.core.recompute import module_replays_kernel

            if model is None:
                raise ValueError("t_recompute(Recompute.SELECTIVE, modules=...) needs the model (which kernels run again)")
            moe_layer = any(k.key.startswith("moe.") for k in self.forward)
            core = frozenset(k.key for k in self.attention_core)
            return tuple(1.0 if module_replays_kernel(k.key, tuple(modules), model, moe_layer, core) else 0.0 for k in self.forward)
        if recompute is Recompute.SELECTIVE:
            ids = {id(k) for k in self.attention_core}  # the same kernels as in `forward` (_attention_block)
            return tuple(1.0 if id(k) in ids else 0.0 for k in self.forward)
        if recompute is Recompute.OP:
            from parcalc.core.recompute import op_kernel_shares

            if model is None:
                raise ValueError("t_recompute(Recompute.OP) needs the model (which matmuls run again)")
            flash = any(k.key == "attn.flash" for k in self.forward)
            shares = op_kernel_shares(model, flash)
            core = frozenset(k.key for k in self.attention_core)
            return tuple((0.0 if flash else 1.0) if k.key in core else 1.0 if k.kind == "memory" else shares.get(k.key, 0.0)
                         for k in self.forward)  # fmt: skip
        return (0.0,) * len(self.forward)

    def kinds(self, recompute: Recompute, model: TransformerModel | None = None, modules: tuple[str, ...] | None = None,
              recompute_share: float = 1.0) -> KindTimes:  # fmt: skip
        """Forward, backward and `recompute_share` of the recomputed kernels, by kind (parcalc.core.timing.kinds)."""
        weights = tuple(1.0 + recompute_share * w for w in self.recompute_weights(recompute, model, modules))
        return kind_times(self.forward, weights) + kind_times(self.backward)

    def t_attention(self) -> tuple[float, float]:
        """(forward, backward) time of the attention kernels (what a context-parallel ring step hides behind)."""
        return (sum(k.time for k in self.forward if k.key.startswith("attn")),
                sum(k.time for k in self.backward if k.key.startswith("attn")))  # fmt: skip

    def t_gemms(self) -> float:
        """Forward + backward time of the linear layers (what TP communication can hide behind)."""
        return sum(k.time for k in self.forward + self.backward if k.kind == "gemm" and not k.key.startswith("attn"))

    def t_column_dgrads(self) -> tuple[float, ...]:
        """The input-gradient GEMM of each column-parallel linear (Q/K/V, MLP up or gate-up), in
        layer order: under sequence parallelism Megatron-LM runs it while the linear's input is
        all-gathered again for the weight gradient (parcalc.core.timing.step.regather_pieces)."""
        return tuple(k.time for k in self.backward if k.key in COLUMN_PARALLEL_DGRADS)


# torch.compile (Inductor) fuses the memory-bound operations between two GEMMs into one kernel
# (torch/_inductor/scheduler.py at torch 2.13.0, Scheduler.can_fuse, line 7327; a cuBLAS GEMM is an
# extern kernel it does not fuse into), which reads its inputs from HBM once and writes its outputs once.
# parcalc's kernels are already the hand-fused ones of Megatron-LM and Apex (fused bias-GeLU, SwiGLU,
# bias-dropout-add, RoPE, scale-mask-softmax), so compiling changes only the groups below; each
# saves the HBM write and re-read of the intermediate between its members (and one launch).
COMPILE_GROUPS = (
    "residual add + the next norm, forward: the sum is written once and not read again (norm input from registers)",
    "attention softmax + dropout (without FlashAttention), forward and backward: the probabilities are not re-read",
)
COMPILE_PER_BLOCK = (
    "eager model code compiled (--kernels eager --compile): TorchTitan compiles each TransformerBlock on its own "
    "(torchtitan/parallelisms/parallelize_llama.py apply_compile at 9dec370: torch.compile(transformer_block, "
    "fullgraph=True)), so a block's last residual add is not fused with the next block's first norm, and the final "
    "norm and the loss stay eager; each norm's "
    "backward absorbs autograd's adds of its input's gradients (the projections' and the residual branch's); SDPA is "
    "an extern kernel, so repeat_kv's K and V stay materialised at the query heads (Inductor's partitioner saves them: "
    "tests/ground_truth/test_torch_compile.py); Inductor generates no code for complex tensors (torch/_inductor/"
    "lowering.py), so the complex RoPE products stay ATen kernels between generated fp32 casts (compiled_rope)"
)
COMPILE_SOURCE = ("torch.compile / TorchInductor (torch 2.13.0): pointwise and reduction nodes between GEMMs fused into "
                  "one generated kernel, never into an extern (cuBLAS) GEMM (torch/_inductor/scheduler.py, Scheduler.can_fuse, "
                  "line 7327: 'node1 is extern but not a triton kernel'); one HBM read of the inputs and one write of the "
                  "outputs per fused group")  # fmt: skip



def compile_assumption() -> str:
    """What --compile changes, in words (fit's and intensity's assumptions)."""
    return ("torch.compile (Inductor) fuses " + "; ".join(COMPILE_GROUPS) + f" ({COMPILE_SOURCE}); parcalc's other kernels are "
            "already the hand-fused ones (fused bias-GeLU/SwiGLU, bias-dropout-add, RoPE), so nothing else changes; saved "
            "activations: Inductor's min-cut partitioner (torch/_functorch/partitioners.py) keeps what parcalc counts "
            "(tests/ground_truth/test_torch_compile.py)")


def layer_passes(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, experts: ExpertShard | None = None) -> LayerPasses:
    """Every kernel of one layer's forward and backward on one GPU (see the module docstring);
    with `experts`, an MoE layer of the model (parcalc.core.timing.moe) instead of a dense one; a Mamba-2 hybrid's mean
    layer (parcalc.core.timing.mamba_kernels)."""
    if model.mamba is not None:
        from parcalc.core.timing.mamba_kernels import mean_layer_kernels

        return LayerPasses(*mean_layer_kernels(model, shard, spec, _attention_block(model, shard, spec)))
    if model.linear_attention is not None:  # gated-DeltaNet mixers in place of attention in their share of the layers
        from parcalc.core.timing.linear_attention_kernels import with_linear_mixers

        passes = _layer_passes(model, shard, spec, experts)
        forward, backward, core = with_linear_mixers(model, shard, spec, passes.forward, passes.backward, passes.attention_core)
        return replace(passes, forward=forward, backward=backward, attention_core=core)
    return _layer_passes(model, shard, spec, experts)


# ---------------------------------------------------------------------------------------------
# Eager PyTorch: one kernel per ATen op of the model code

FUSED_SOURCE = ("Megatron-LM / Transformer Engine / Apex hand-fused kernels: fused LayerNorm/RMSNorm (TE, Apex), "
                "bias-GeLU and bias-SwiGLU (megatron/core/fusions/fused_bias_gelu.py, fused_bias_swiglu.py), fused RoPE, "
                "bias-dropout-add, scale-mask-softmax")  # fmt: skip
EAGER_SOURCE = (
    "eager PyTorch launches one kernel per ATen op of the model code, each reading its inputs from HBM and writing its "
    "outputs: RMSNorm as TorchTitan writes it (torchtitan/models/norms.py at 9dec370: self._norm(x.float()).type_as(x) "
    "* self.weight, _norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)): 8 kernels forward, 16 backward "
    "(autograd's formulas for _to_copy, pow, mean, add, rsqrt, mul); LayerNorm one (aten.native_layer_norm, its "
    "backward native_layer_norm_backward; llm-foundry's LPLayerNorm calls F.layer_norm, llmfoundry/models/layers/"
    "norm.py at 061f2c7); RoPE through complex64 (torchtitan/models/llama/model.py apply_rotary_emb: x.float(), "
    "complex mul, type_as; backward also materialises conj(freqs_cis)); repeat_kv's reshape copies K and V to the "
    "query heads before SDPA; SwiGLU w2(F.silu(w1(x)) * w3(x)) as silu and mul; GeLU one aten.gelu "
    "(llm-foundry ffn.py nn.GELU); residual adds; autograd adds the gradients of a tensor with two consumers (the "
    "residual branches, w1 / w3's input, wq / wk / wv's input); a bias gradient is a sum over tokens. Recorded with a "
    "TorchDispatchMode on a TorchTitan block (tests/ground_truth/test_torch_eager_kernels.py)"
)  # fmt: skip
RMS_STATS = 4.0  # RMSNorm's statistics and the normalised copy are fp32 (the x.float() upcast)
LN_STATS = 4.0  # native_layer_norm's mean and 1/sigma: fp32 for 16-bit inputs on CUDA (acc type; the CPU keeps bf16)


def separate_projections(model: TransformerModel) -> bool:
    """Eager code of the Llama family (RoPE and a gated MLP: Llama's reference model.py, TorchTitan, Hugging Face
    LlamaAttention) has separate wq, wk, wv; GPT-2 (c_attn), llm-foundry MPT (Wqkv), GPT-NeoX fuse them. Gated
    MLPs keep w1 and w3 (gate_proj, up_proj) apart in all of them."""
    return model.position is Position.ROPE and model.mlp.gated


def eager_norm(kernels: LayerKernels, key: str, norm: Norm, rows: int, h: int, bias: bool = False) -> None:
    """A norm over `rows` x h values as eager PyTorch runs it (EAGER_SOURCE): forward and backward kernels."""
    e, f, n, spec = kernels.e, RMS_STATS, rows * h, kernels.spec
    shape = f"[{rows}×{h}]"
    if norm is Norm.LAYERNORM:
        params = e * h * (2 if bias else 1)
        kernels.forward.append(memory_op(key, e * n + params + e * n + 2 * LN_STATS * rows, spec, shape))
        kernels.backward.append(memory_op(f"{key}.bwd", 2 * e * n + 2 * LN_STATS * rows + e * h + e * n + params, spec, shape))
        return
    if norm is not Norm.RMSNORM:
        return
    r = rows
    forward = (  # (op, bytes): x.float(); pow; mean; + eps; rsqrt; x * rstd; type_as; * weight
        ("to_fp32", e * n + f * n), ("pow", 2 * f * n), ("mean", f * n + f * r), ("add_eps", 2 * f * r), ("rsqrt", 2 * f * r),
        ("mul_rstd", 2 * f * n + f * r), ("to_bf16", f * n + e * n), ("mul_weight", 2 * e * n + e * h))
    backward = (  # autograd of the above, last op first: weight's grad (mul, sum), x's through the fp32 chain
        ("mul_weight.dw", 3 * e * n), ("mul_weight.dx", 2 * e * n + e * h), ("sum_dw", e * n + e * h), ("to_fp32", e * n + f * n),
        ("mul_rstd.drstd", 3 * f * n), ("mul_rstd.dx", 2 * f * n + f * r), ("sum_drstd", f * n + f * r),
        ("rsqrt.pow", 2 * f * r), ("rsqrt.scale", 2 * f * r), ("rsqrt.mul", 3 * f * r), ("mean.div", f * r + f * n),
        ("pow.pow", 2 * f * n), ("pow.scale", 2 * f * n), ("pow.mul", 3 * f * n), ("add_grads", 3 * f * n), ("to_bf16", f * n + e * n))
    per_row = ("add_eps", "rsqrt", "rsqrt.pow", "rsqrt.scale", "rsqrt.mul")  # on the [rows] statistics only
    kernels.forward.extend(memory_op(f"{key}.{op}", traffic, spec, f"[{rows}]" if op in per_row else shape) for op, traffic in forward)
    kernels.backward.extend(memory_op(f"{key}.{op}.bwd", traffic, spec, f"[{rows}]" if op in per_row else shape)
                            for op, traffic in backward)  # fmt: skip


def eager_rope(kernels: LayerKernels, tokens: int, seq: int, widths: tuple[int, ...], head_dim: int) -> None:
    """TorchTitan's apply_rotary_emb on Q and K (`widths`: their values per token): per tensor x.float(), the
    complex64 product with freqs_cis (s x d/2 complex, read once per tensor), type_as; backward: the fp32 cast
    of the gradient, conj(freqs_cis) materialised, the product, the cast back."""
    e, f, spec = kernels.e, RMS_STATS, kernels.spec
    table = seq * head_dim * 4.0  # complex64 [s, d/2]
    for name, width in zip(("q", "k"), widths, strict=False):
        n = tokens * width
        shape = f"[{tokens}×{width}]"
        kernels.forward.extend((memory_op(f"rope.{name}.to_fp32", e * n + f * n, spec, shape),
                                memory_op(f"rope.{name}.mul", 2 * f * n + table, spec, shape),
                                memory_op(f"rope.{name}.to_bf16", f * n + e * n, spec, shape)))  # fmt: skip
        kernels.backward.extend((memory_op(f"rope.{name}.to_fp32.bwd", e * n + f * n, spec, shape),
                                 memory_op(f"rope.{name}.conj.bwd", 2 * table, spec, f"[{seq}×{head_dim // 2}] complex"),
                                 memory_op(f"rope.{name}.mul.bwd", 2 * f * n + table, spec, shape),
                                 memory_op(f"rope.{name}.to_bf16.bwd", f * n + e * n, spec, shape)))  # fmt: skip


def eager_residual(kernels: LayerKernels, key: str, n: int, dropout: bool, shape: str) -> None:
    """x + dropout(y): the add (and native_dropout with its 1-byte mask); backward: the dropout's mask
    multiply, and autograd's add of the two gradients of x (the residual branch and the sublayer)."""
    e, spec = kernels.e, kernels.spec
    if dropout:
        kernels.mem(f"{key}.dropout", (2 * e + MASK_BYTES) * n, (2 * e + MASK_BYTES) * n, shape)
    kernels.forward.append(memory_op(key, 3 * e * n, spec, shape))
    kernels.backward.append(memory_op(f"{key}.add_grads.bwd", 3 * e * n, spec, shape))


def grad_sum(kernels: LayerKernels, key: str, n: int, count: int, shape: str) -> None:
    """Autograd's adds of a tensor's gradients from `count` consumers (count - 1 kernels)."""
    kernels.backward.extend(memory_op(f"{key}.add_grads.bwd" + (f".{i}" if count > 2 else ""), 3 * kernels.e * n, kernels.spec, shape)
                            for i in range(count - 1))  # fmt: skip


def bias_grads(kernels: LayerKernels, key: str, tokens: int, widths: tuple[int, ...]) -> None:
    """A linear's bias gradient: the output gradient summed over tokens (one reduction per linear)."""
    for i, width in enumerate(widths):
        name = key if len(widths) == 1 else f"{key}.{i}"
        kernels.backward.append(memory_op(f"{name}.bias_grad.bwd", kernels.e * (tokens * width + width), kernels.spec,
                                          f"[{tokens}×{width}]"))  # fmt: skip


def memory_kernel_count(model: TransformerModel, eager: bool, compiled: bool, flash: bool, dropout: bool, hf: bool = False) -> int:
    """Memory-bound kernels of one dense layer, forward + backward, under a kernel set (fit's inputs: n_mem).
    Independent of the shape: a micro-batch of 1 x 8 tokens on one GPU with generic rates counts them."""
    shard = LayerShard(1, 8, 1, False, flash, dropout, True, 2.0, compiled=compiled, eager=eager or hf, hf=hf)
    passes = layer_passes(model, shard, compute_spec(None, "bf16", 1e15))
    return sum(k.kind == "memory" for k in passes.forward + passes.backward)


def compiled_rope(kernels: LayerKernels, tokens: int, seq: int, q_w: int, kv_w: int, head_dim: int, rope: bool, repeat: bool) -> None:
    """RoPE and repeat_kv of eager code under Inductor (COMPILE_PER_BLOCK). Inductor generates no code for complex
    tensors (torch/_inductor/lowering.py, unsupported_input_tensor: 'Torchinductor does not support code generation
    for complex operators'), so apply_rotary_emb's complex products stay ATen kernels; around them the fp32 casts are
    generated kernels, and the casts back fuse with repeat_kv's copies of K and V (the SDPA inputs) into one.
    Seen in Inductor's output code for TorchTitan's block (torch 2.13 on the CPU): forward cast q, cast k, mul q,
    mul k, cast back + repeat; backward the K gradient's repeat sum + cast, conj(freqs_cis), mul k, cast q, mul q,
    the V gradient's repeat sum, cast back k, cast back q."""
    e, f, spec, t = kernels.e, RMS_STATS, kernels.spec, tokens
    k_out = q_w if repeat else kv_w  # K as SDPA reads it
    if not rope:
        if repeat:
            kernels.mem("repeat_kv", e * t * (2 * kv_w + 2 * q_w), e * t * (2 * q_w + 2 * kv_w), f"[{t}×{q_w}]")
        return
    table = seq * head_dim * 4.0
    q, k = f"[{t}×{q_w}]", f"[{t}×{kv_w}]"
    kernels.forward.extend((
        memory_op("rope.q.to_fp32", (e + f) * t * q_w, spec, q), memory_op("rope.k.to_fp32", (e + f) * t * kv_w, spec, k),
        memory_op("rope.q.mul", 2 * f * t * q_w + table, spec, q), memory_op("rope.k.mul", 2 * f * t * kv_w + table, spec, k),
        memory_op("rope.to_bf16+repeat_kv", f * t * (q_w + kv_w) + e * t * (q_w + k_out) + (e * t * (kv_w + q_w) if repeat else 0.0),
                  spec, q)))  # fmt: skip
    kernels.backward.extend((
        memory_op("rope.k.to_fp32.bwd", e * t * k_out + f * t * kv_w, spec, k),
        memory_op("rope.conj.bwd", 2 * table, spec, f"[{seq}×{head_dim // 2}] complex"),
        memory_op("rope.k.mul.bwd", 2 * f * t * kv_w + table, spec, k),
        memory_op("rope.q.to_fp32.bwd", (e + f) * t * q_w, spec, q), memory_op("rope.q.mul.bwd", 2 * f * t * q_w + table, spec, q),
        *((memory_op("repeat_kv.v.bwd", e * t * (q_w + kv_w), spec, k),) if repeat else ()),
        memory_op("rope.k.to_bf16.bwd", (f + e) * t * kv_w, spec, k), memory_op("rope.q.to_bf16.bwd", (f + e) * t * q_w, spec, q)))  # fmt: skip


def kernel_set_assumption(eager: bool, compiled: bool, hf: bool = False) -> str:
    """Which kernels parcalc times between the GEMMs, in words (fit's and intensity's assumptions)."""
    if hf and not compiled:
        from parcalc.core.timing.hf_kernels import HF_SOURCE

        return "kernels (hf): " + HF_SOURCE + "; other layer kinds (MoE, MLA, LayerNorm, biases) as the eager set"
    if compiled and hf:
        from parcalc.core.timing.hf_compiled_kernels import HF_COMPILED_SOURCE

        return ("--compile: " + HF_COMPILED_SOURCE + "; other layer kinds (MoE, MLA, LayerNorm, biases) as TorchTitan's block "
                "compiled: " + COMPILE_PER_BLOCK)
    if compiled and eager:
        return "--compile: Inductor's kernels of the eager model code: " + COMPILE_PER_BLOCK
    if compiled:
        return "kernels (fused, then compiled as above): " + FUSED_SOURCE
    if eager:
        return "kernels (eager): " + EAGER_SOURCE
    return "kernels: fused, " + FUSED_SOURCE


@lru_cache(maxsize=4096)
def _attention_block(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> tuple[tuple[Kernel, ...], ...]:
    """A layer's kernels up to its MLP (norm, QKV, attention, projection, residual, second norm),
    the same in a dense and an MoE layer (computed once for both): (forward, backward, attention core)."""
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens = b * s
    h = model.hidden
    heads = model.heads // t
    kv = max(model.kv_heads // t, 1)
    hd = model.head_dim
    q_w, kv_w = heads * hd, kv * hd
    seq_tokens = tokens // t if shard.sequence_parallel else tokens  # what norms and residual adds see
    kernels = LayerKernels(spec, e, shard.fp8)
    forward, backward, mem, linear = kernels.forward, kernels.backward, kernels.mem, kernels.linear

    norm = model.norm is not Norm.NONE
    residual_fwd = (3 * e + (MASK_BYTES if shard.dropout else 0)) * seq_tokens * h  # x + dropout(y): read 2, write 1 (+ mask)
    residual_bwd = ((2 * e + MASK_BYTES) if shard.dropout else 0.0) * seq_tokens * h  # dropout backward; a plain add passes dy on
    act = f"[{seq_tokens}×{h}]"
    # Compiled: a norm after a residual add is fused into it (COMPILE_GROUPS): the add writes the sum and
    # the normalised output in one kernel, the norm's own read is gone. norm1 follows the previous layer's
    # residual2, so its fused part is charged there (steady state: every layer alike).
    fuse_norm = norm and shard.compiled
    norm_write = e * seq_tokens * h
    mla = model.mla
    eager = shard.eager and not shard.compiled and mla is None  # EAGER_SOURCE (MLA keeps the fused set)
    per_block = shard.eager and shard.compiled and mla is None  # eager model code compiled per block (COMPILE_PER_BLOCK)
    stats = (2 if model.norm is Norm.LAYERNORM else 1) * RMS_STATS * seq_tokens  # fp32 statistics per row, saved
    if eager:
        eager_norm(kernels, "norm1", model.norm, seq_tokens, h, model.bias)
    elif per_block and norm:  # its own kernel (the previous block's graph ends before it); backward fused with the
        # adds of the Q/K/V input gradients and of the residual branch's gradient (COMPILE_PER_BLOCK)
        consumers = 3 if separate_projections(model) else 1
        mem("norm1", 2 * e * seq_tokens * h + stats, (consumers + 3) * e * seq_tokens * h + stats, act)
    elif norm:
        if fuse_norm:
            backward.append(memory_op("norm1.bwd", 3 * e * seq_tokens * h, spec, act))
        else:
            mem("norm1", 2 * e * seq_tokens * h, 3 * e * seq_tokens * h, act)
    if mla is None:
        linear("qkv", tokens, h, q_w + 2 * kv_w, norm_fed=norm)
        if eager:
            if separate_projections(model):  # wq, wk, wv: three input gradients, two adds
                grad_sum(kernels, "qkv", tokens * h, 3, f"[{tokens}×{h}]")
            if model.bias:
                bias_grads(kernels, "qkv", tokens, (q_w + 2 * kv_w,))
            if model.position is Position.ROPE:
                eager_rope(kernels, tokens, s, (q_w, kv_w), hd)
            if kv < heads:  # repeat_kv before SDPA (model code, whatever SDPA's backend): K and V copied to the query heads
                kernels.mem("repeat_kv.k", e * tokens * (kv_w + q_w), e * tokens * (q_w + kv_w), f"[{tokens}×{q_w}]")
                kernels.mem("repeat_kv.v", e * tokens * (kv_w + q_w), e * tokens * (q_w + kv_w), f"[{tokens}×{q_w}]")
        elif per_block:
            compiled_rope(kernels, tokens, s, q_w, kv_w, hd, model.position is Position.ROPE, kv < heads and shard.flash_attention)
        elif model.position is Position.ROPE:
            mem("rope", 2 * e * tokens * (q_w + kv_w), 2 * e * tokens * (q_w + kv_w), f"[{tokens}×{q_w + kv_w}]")
        qk_dim, v_dim = hd, hd
    else:  # multi-head latent attention: low-rank query and key/value paths (parcalc.core.model.LatentAttention)
        qk_dim, v_dim = mla.qk_head_dim, mla.v_head_dim
        if mla.q_lora_rank:
            linear("qkv", tokens, h, mla.q_lora_rank, norm_fed=norm)  # q down-projection, replicated over TP ranks
            mem("mla.q_norm", 2 * e * tokens * mla.q_lora_rank, 3 * e * tokens * mla.q_lora_rank, f"[{tokens}×{mla.q_lora_rank}]")
            linear("mla.q_up", tokens, mla.q_lora_rank, heads * qk_dim)
        else:
            linear("qkv", tokens, h, heads * qk_dim)
        linear("mla.kv_down", tokens, h, mla.kv_lora_rank + mla.qk_rope_head_dim)
        mem("mla.kv_norm", 2 * e * tokens * mla.kv_lora_rank, 3 * e * tokens * mla.kv_lora_rank, f"[{tokens}×{mla.kv_lora_rank}]")
        linear("mla.kv_up", tokens, mla.kv_lora_rank, heads * (mla.qk_nope_head_dim + v_dim))
        rotary = tokens * (heads + 1) * mla.qk_rope_head_dim
        mem("rope", 2 * e * rotary, 2 * e * rotary, f"[{tokens}×{(heads + 1) * mla.qk_rope_head_dim}]")
        q_w, kv_w = heads * qk_dim, heads * (qk_dim + v_dim) // 2  # per token: K of qk_dim and V of v_dim per head
    core: list[Kernel] = []
    sk = s * shard.cp  # keys and values: the whole sequence (with CP, s is this rank's query shard; the 2cp-chunk
    # balancing gives every rank half of its s x s·cp causal square, as without CP)
    aspec = spec.sixteen_bit or spec  # attention's matmuls stay in 16 bits under FP8
    if shard.flash_attention:
        work = 2.0 * b * heads * s * sk * (qk_dim + v_dim) * attention_share(model, shard)
        io = e * b * (2 * s * q_w + 2 * sk * kv_w)  # read Q, K, V, write O
        shape = f"b·a/t = {b * heads}, s = {s}, d = {qk_dim}"
        tiles = attention_shape(b * heads, s, sk, qk_dim + v_dim, attention_share(model, shard), shard.causal)
        core.append(flash_attention("attn.flash", work, io, False, spec, shape, qk_dim, tiles))
        forward.extend(core)
        backward.append(flash_attention("attn.flash.bwd", FLASH_BACKWARD_FLOPS * work, 2 * io + e * b * s * q_w, True, spec, shape, qk_dim,
                                        tiles))  # fmt: skip
    else:
        scores = b * heads * s * sk
        square = f"[{s}×{sk}] ×{b * heads}"
        core.append(gemm("attn.scores", s, qk_dim, sk, e, aspec, batch=b * heads))
        if shard.dropout and shard.compiled:  # one kernel: read the scores, write the probabilities and the mask
            core.append(memory_op("attn.softmax+dropout", (2 * e + MASK_BYTES) * scores, spec, square))
        else:
            core.append(memory_op("attn.softmax", 2 * e * scores, spec, square))
        if shard.dropout and not shard.compiled:
            core.append(memory_op("attn.dropout", (2 * e + MASK_BYTES) * scores, spec, square))
        core.append(gemm("attn.context", s, sk, v_dim, e, aspec, batch=b * heads))
        forward.extend(core)
        backward.extend((gemm("attn.context.dgrad", s, v_dim, sk, e, aspec, batch=b * heads),
                         gemm("attn.context.wgrad", sk, s, v_dim, e, aspec, batch=b * heads)))  # fmt: skip
        if shard.dropout and shard.compiled:  # read dP, the mask and P, write dS
            backward.append(memory_op("attn.softmax+dropout.bwd", (3 * e + MASK_BYTES) * scores, spec, square))
        else:
            if shard.dropout:
                backward.append(memory_op("attn.dropout.bwd", (2 * e + MASK_BYTES) * scores, spec, square))
            backward.append(memory_op("attn.softmax.bwd", 3 * e * scores, spec, square))
        backward.extend((gemm("attn.scores.dgrad", s, sk, qk_dim, e, aspec, batch=b * heads),
                         gemm("attn.scores.wgrad", sk, s, qk_dim, e, aspec, batch=b * heads)))  # fmt: skip
    linear("proj", tokens, heads * v_dim if mla is not None else q_w, h)
    if eager:
        if model.bias:
            bias_grads(kernels, "proj", tokens, (h,))
        eager_residual(kernels, "residual1", seq_tokens * h, shard.dropout, act)
        eager_norm(kernels, "norm2", model.norm, seq_tokens, h, model.bias)
    elif per_block and norm:  # backward fused with the adds of the MLP's input gradients and the residual branch's
        mem("residual1+norm2", residual_fwd + norm_write + stats, residual_bwd, act)
        consumers = 2 if model.mlp.gated else 1
        backward.append(memory_op("norm2.bwd", (consumers + 3) * e * seq_tokens * h + stats, spec, act))
    elif fuse_norm:
        mem("residual1+norm2", residual_fwd + norm_write, residual_bwd, act)
        backward.append(memory_op("norm2.bwd", 3 * e * seq_tokens * h, spec, act))
    else:
        mem("residual1", residual_fwd, residual_bwd, act)
        if norm:
            mem("norm2", 2 * e * seq_tokens * h, 3 * e * seq_tokens * h, act)
    return tuple(forward), tuple(backward), tuple(core)


def attention_share(model: TransformerModel, shard: LayerShard) -> float:
    """The share of the s x s score square a fused attention kernel computes for the mean layer: 1/2 causal (it skips
    the blocks above the diagonal), less where layers attend within a window (FlashAttention's window_size skips the
    blocks left of the band too; parcalc.core.attention_window.core_share, over the whole sequence s x cp); 1 without
    a causal mask. A stage is timed at the mean layer's share."""
    return core_share(model.window, model.layers, shard.seq_len * shard.cp) if shard.causal else 1.0


@lru_cache(maxsize=4096)
def _layer_passes(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, experts: ExpertShard | None) -> LayerPasses:
    if shard.hf and experts is None and hf_applies(model):
        return _hf_layer_passes(model, shard, spec)
    attention_forward, attention_backward, core = _attention_block(model, shard, spec)
    forward, backward = list(attention_forward), list(attention_backward)
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h, f = b * s, model.hidden, model.ffn_hidden // t
    seq_tokens = tokens // t if shard.sequence_parallel else tokens  # as in _attention_block
    residual_fwd = (3 * e + (MASK_BYTES if shard.dropout else 0)) * seq_tokens * h
    residual_bwd = ((2 * e + MASK_BYTES) if shard.dropout else 0.0) * seq_tokens * h
    act = f"[{seq_tokens}×{h}]"
    fuse_norm = model.norm is not Norm.NONE and shard.compiled
    norm_write = e * seq_tokens * h
    kernels = LayerKernels(spec, e, shard.fp8, forward, backward)
    mem, linear = kernels.mem, kernels.linear

    # the next layer's norm1, unless each block is compiled on its own (COMPILE_PER_BLOCK)
    last = ("residual2+norm1", residual_fwd + norm_write) if fuse_norm and not shard.eager else ("residual2", residual_fwd)
    if experts is not None and model.moe is not None:
        moe_forward, moe_backward, shared_f, shared_b = moe_kernels(model, shard, spec, experts)
        forward.extend(moe_forward)
        backward.extend(moe_backward)
        mem(last[0], last[1], residual_bwd, act)
        return LayerPasses(tuple(forward), tuple(backward), tuple(core), shared_f, shared_b)
    if shard.eager and not shard.compiled and model.mla is None:
        _eager_mlp(model, kernels, tokens, h, f, seq_tokens, shard.dropout, act)
        return LayerPasses(tuple(forward), tuple(backward), tuple(core))
    if model.mlp.gated:
        linear("mlp.gate_up", tokens, h, 2 * f, norm_fed=model.norm is not Norm.NONE)
        mem("mlp.act", 3 * e * tokens * f, 5 * e * tokens * f, f"[{tokens}×{f}]")
    else:
        linear("mlp.up", tokens, h, f, norm_fed=model.norm is not Norm.NONE)
        mem("mlp.act", 2 * e * tokens * f, 3 * e * tokens * f, f"[{tokens}×{f}]")
    linear("mlp.down", tokens, f, h)
    mem(last[0], last[1], residual_bwd, act)
    return LayerPasses(tuple(forward), tuple(backward), tuple(core))


class _HfKernels:
    """parcalc.core.timing.hf_kernels' view of a layer's kernel lists: fwd / bwd add one memory-bound kernel."""

    def __init__(self, kernels: LayerKernels) -> None:
        self.kernels, self.e, self.sms = kernels, kernels.e, kernels.spec.sms

    def fwd(self, key: str, traffic: float, shape: str, path: str = "", elements: float = 0.0) -> None:
        self.kernels.forward.append(memory_op(key, traffic, self.kernels.spec, shape, path, elements))

    def bwd(self, key: str, traffic: float, shape: str, path: str = "", elements: float = 0.0) -> None:
        self.kernels.backward.append(memory_op(key, traffic, self.kernels.spec, shape, path, elements))


def _hf_layer_passes(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> LayerPasses:
    """A LlamaDecoderLayer as transformers runs it under autocast (parcalc.core.timing.hf_kernels), or compiled
    (parcalc.core.timing.hf_compiled_kernels); its attention is SDPA's fused kernel whatever --flash-attention says
    (transformers' default attn_implementation; an extern kernel Inductor calls as it is)."""
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    kernels = LayerKernels(spec, e, shard.fp8)
    core: list[Kernel] = []
    sk = s * shard.cp
    hd = model.head_dim

    def attention(q_w: int, kv_w: int) -> None:
        work = 2.0 * b * (q_w // hd) * s * sk * 2 * hd * attention_share(model, shard)
        io = e * b * (2 * s * q_w + 2 * sk * kv_w)
        shape = f"b·a/t = {b * (q_w // hd)}, s = {s}, d = {hd}"
        tiles = attention_shape(b * (q_w // hd), s, sk, 2 * hd, attention_share(model, shard), shard.causal)
        core.append(flash_attention("attn.flash", work, io, False, spec, shape, hd, tiles))
        kernels.forward.extend(core)
        kernels.backward.append(flash_attention("attn.flash.bwd", FLASH_BACKWARD_FLOPS * work, 2 * io + e * b * s * q_w, True, spec, shape, hd,
                                                tiles))  # fmt: skip

    if shard.compiled:
        hf_compiled_layer(_HfKernels(kernels), kernels.linear, attention, model, b * s, t)
    else:
        hf_layer(_HfKernels(kernels), kernels.linear, attention, model, b * s, s, t)
    return LayerPasses(tuple(kernels.forward), tuple(kernels.backward), tuple(core))


def _eager_mlp(model: TransformerModel, kernels: LayerKernels, tokens: int, h: int, f: int, seq_tokens: int, dropout: bool,
               act: str) -> None:  # fmt: skip
    """The dense MLP and the second residual as eager PyTorch runs them (EAGER_SOURCE)."""
    e, mid = kernels.e, f"[{tokens}×{f}]"
    name = "silu" if model.mlp.value == "swiglu" else "gelu" if model.mlp.value in ("gelu", "geglu") else "relu"
    if model.mlp.gated:  # act(w1 x) * (w3 x): the activation, the product; backward two products, the activation's
        kernels.linear("mlp.gate_up", tokens, h, 2 * f)
        grad_sum(kernels, "mlp.gate_up", tokens * h, 2, f"[{tokens}×{h}]")  # w1 and w3 read the same input
        kernels.mem(f"mlp.{name}", 2 * e * tokens * f, 3 * e * tokens * f, mid)
        kernels.forward.append(memory_op("mlp.mul", 3 * e * tokens * f, kernels.spec, mid))
        kernels.backward.extend(memory_op(f"mlp.mul.{x}.bwd", 3 * e * tokens * f, kernels.spec, mid) for x in ("d_act", "d_up"))
        widths: tuple[int, ...] = (f, f)
    else:
        kernels.linear("mlp.up", tokens, h, f)
        kernels.mem(f"mlp.{name}", 2 * e * tokens * f, 3 * e * tokens * f, mid)
        widths = (f,)
    if model.bias:
        bias_grads(kernels, "mlp.up", tokens, widths)
    kernels.linear("mlp.down", tokens, f, h)
    if model.bias:
        bias_grads(kernels, "mlp.down", tokens, (h,))
    eager_residual(kernels, "residual2", seq_tokens * h, dropout, act)


@frozen
class EndPasses:
    """Forward and backward time of what sits outside the layers: embedding (first stage), final
    norm, LM head and cross-entropy (last stage)."""

    t_first_forward: float
    t_first_backward: float
    t_last_forward: float
    t_last_backward: float
    kernels: tuple[Kernel, ...]


@lru_cache(maxsize=1024)
def end_passes(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> EndPasses:
    if model.vocab == 0:
        return EndPasses(0.0, 0.0, 0.0, 0.0, ())
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h = b * s, model.hidden
    vocab = math.ceil(model.vocab / t)
    embed = memory_op("embedding", 2 * e * tokens * h, spec, f"[{tokens}×{h}]")  # gather rows, write activations
    embed_bwd = memory_op("embedding.bwd", 2 * e * tokens * h, spec, f"[{tokens}×{h}]")  # scatter-add of the gradient rows
    fwd, dgrad, wgrad = linear_kernels("lm_head", tokens, h, vocab, e, spec.sixteen_bit or spec)  # BF16 under FP8 (Megatron's output layer)
    ce = memory_op("cross_entropy", (e + LOGIT_BYTES) * tokens * vocab, spec, f"[{tokens}×{vocab}]")
    ce_bwd = memory_op("cross_entropy.bwd", (LOGIT_BYTES + e) * tokens * vocab, spec, f"[{tokens}×{vocab}]")
    norm = memory_op("final_norm", 2 * e * tokens * h, spec, f"[{tokens}×{h}]")  # read x, write y
    norm_bwd = memory_op("final_norm.bwd", 3 * e * tokens * h, spec, f"[{tokens}×{h}]")  # read x and dy, write dx
    if shard.hf and hf_applies(model):
        return _hf_ends(model, shard, spec, tokens, vocab)
    if shard.eager:  # compiled eager code too: TorchTitan compiles the blocks only (COMPILE_PER_BLOCK), not the ends
        return _eager_ends(model, shard, spec, embed, embed_bwd, (fwd, dgrad, wgrad), tokens, vocab)
    return EndPasses(embed.time, embed_bwd.time, norm.time + fwd.time + ce.time, ce_bwd.time + dgrad.time + wgrad.time + norm_bwd.time,
                     (embed, embed_bwd, norm, fwd, ce, ce_bwd, dgrad, wgrad, norm_bwd))  # fmt: skip


def _eager_ends(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, embed: Kernel, embed_bwd: Kernel,
                head: tuple[Kernel, Kernel, Kernel], tokens: int, vocab: int) -> EndPasses:  # fmt: skip
    """The final norm and the loss as eager PyTorch runs them: the norm's ATen ops (eager_norm) and
    F.cross_entropy(pred.float(), labels) (TorchTitan train.py loss_fn at 9dec370): the logits cast to fp32,
    _log_softmax, nll_loss; backward nll_loss_backward (writes the whole fp32 gradient), _log_softmax_backward_data
    and the cast back."""
    e, f, n = shard.bytes_per_element, LOGIT_BYTES, tokens * vocab
    logits = f"[{tokens}×{vocab}]"
    norm = LayerKernels(spec, e, "")
    eager_norm(norm, "final_norm", model.norm, tokens, model.hidden, model.bias)
    fwd, dgrad, wgrad = head
    ce = (memory_op("cross_entropy.to_fp32", (e + f) * n, spec, logits), memory_op("cross_entropy.log_softmax", 2 * f * n, spec, logits),
          memory_op("cross_entropy.nll_loss", (8 + f) * tokens, spec, f"[{tokens}]"))  # int64 labels, one log-probability each  # fmt: skip
    ce_bwd = (memory_op("cross_entropy.nll_loss.bwd", f * n, spec, logits), memory_op("cross_entropy.log_softmax.bwd", 3 * f * n, spec, logits),
              memory_op("cross_entropy.to_bf16.bwd", (f + e) * n, spec, logits))  # fmt: skip
    t_norm, t_norm_bwd = sum(k.time for k in norm.forward), sum(k.time for k in norm.backward)
    return EndPasses(embed.time, embed_bwd.time, t_norm + fwd.time + sum(k.time for k in ce),
                     sum(k.time for k in ce_bwd) + dgrad.time + wgrad.time + t_norm_bwd,
                     (embed, embed_bwd, *norm.forward, fwd, *ce, *ce_bwd, dgrad, wgrad, *norm.backward))  # fmt: skip


def _hf_ends(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, tokens: int, vocab: int) -> EndPasses:
    """The embedding, rotary table (first stage), final norm, LM head and loss (last stage) of transformers' Llama under
    autocast (parcalc.core.timing.hf_kernels.hf_ends), or compiled (parcalc.core.timing.hf_compiled_kernels.hf_compiled_ends)."""
    kernels = LayerKernels(spec, shard.bytes_per_element, "")
    if shard.compiled:
        hf_compiled_ends(_HfKernels(kernels), lambda key, m, k, n: kernels.linear(key, m, k, n), model, tokens, vocab)
    else:
        hf_ends(_HfKernels(kernels), lambda key, m, k, n: kernels.linear(key, m, k, n), model, tokens, shard.seq_len, vocab)

    def first(k: Kernel) -> bool:
        return k.key.startswith(FIRST_STAGE_KEYS)

    f_first = sum(k.time for k in kernels.forward if first(k))
    b_first = sum(k.time for k in kernels.backward if first(k))
    return EndPasses(f_first, b_first, sum(k.time for k in kernels.forward) - f_first, sum(k.time for k in kernels.backward) - b_first,
                     (*kernels.forward, *kernels.backward))  # fmt: skip


def mtp_kernels(model: TransformerModel, shard: LayerShard, spec: ComputeSpec) -> tuple[tuple[Kernel, ...], tuple[Kernel, ...]]:
    """The kernels of one multi-token-prediction module besides its block and the ends it shares with the main model
    (forward, backward): the norms of its two inputs (enorm, hnorm) and the projection eh_proj (2h -> h, column-parallel:
    h/t outputs) (Megatron-LM multi_token_prediction.py, MultiTokenPredictionLayer.forward)."""
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    tokens, h = b * s, model.hidden
    proj = linear_kernels("mtp.eh_proj", tokens, 2 * h, math.ceil(h / t), e, spec)
    norms = memory_op("mtp.norms", 2 * 2 * e * tokens * h, spec, f"2 x [{tokens}×{h}]")
    norms_bwd = memory_op("mtp.norms.bwd", 2 * 3 * e * tokens * h, spec, f"2 x [{tokens}×{h}]")
    return (norms, proj[0]), (norms_bwd, proj[1], proj[2])


def mtp_passes(model: TransformerModel, shard: LayerShard, spec: ComputeSpec, block: LayerPasses, ends: EndPasses) -> tuple[float, float]:
    """Forward and backward time of the model's multi-token-prediction modules on the last stage (0 without): each
    module runs its own kernels (mtp_kernels), one block (`block`: the passes of a layer of its kind, not recomputed),
    the final norm, shared head and loss as the main model's last stage does, and the embedding lookup of the shifted
    tokens (`ends`) (Megatron-LM multi_token_prediction.py; DeepSeek-V3 report sec. 2.2). The block's TP, CP and
    expert exchanges are the stage's (parcalc.core.timing.step.assemble_stage counts the MTP blocks among its layers')."""
    if not model.mtp_layers:
        return 0.0, 0.0
    own_forward, own_backward = mtp_kernels(model, shard, spec)
    forward = sum(k.time for k in own_forward) + block.t_forward + ends.t_last_forward + ends.t_first_forward
    backward = sum(k.time for k in own_backward) + block.t_backward + ends.t_last_backward + ends.t_first_backward
    return model.mtp_layers * forward, model.mtp_layers * backward


# The end kernels of the first pipeline stage (the embedding, and the rotary table the model computes once per forward)
FIRST_STAGE_KEYS = ("embedding", "rotary")


def multi_tensor_waves(sms: int) -> float:
    """How much longer a multi_tensor_apply launch takes than its bytes at the HBM rate: its 320 blocks of 65,536
    elements (parcalc.core.timing.host.BLOCKS_PER_LAUNCH) spread over the SMs, the launch ends when the SMs holding
    ceil(320 / SMs) blocks are done, each SM drawing its share of HBM: ceil(320 / SMs) / (320 / SMs) (1.2375 on 132 SMs:
    3 blocks on 56 of them against 2.42 on average). Measured on one H200: a full launch of the fused AdamW kernel takes
    167-171 us for 587 MB, 137 us at the 4.28 TB/s copy rate (../shared/measurements/h200-2026-11-28,
    trace-llama1b-b4-s4096.json.gz; tests/test_step_parts.py)."""
    from parcalc.core.timing.host import BLOCKS_PER_LAUNCH

    per_sm = BLOCKS_PER_LAUNCH / max(sms, 1)
    return math.ceil(per_sm) / per_sm


def optimizer_time(params: float, bytes_per_param: float, spec: ComputeSpec, kind: str = "optimizer") -> float:
    """The optimizer step over the local parameters: memory-bound (reads and writes its states), in launches of PyTorch's
    (and Apex's) multi_tensor_apply (multi_tensor_waves). kind: whose trace factor applies ('memory' for the gradient
    accumulation timed the same way, an element-wise add without the launch quantisation)."""
    waves = multi_tensor_waves(spec.sms) if kind == "optimizer" else 1.0
    return waves * params * bytes_per_param / (spec.bandwidth * spec.kernels.memory.value * spec.scale * spec.kind_rate(kind))


def optimizer_bytes(optimizer_states: float, gradient_bytes: float, weight_bytes: float, master: bool,
                    state_bytes: float | None = None, writes_copy: bool = True) -> float:  # fmt: skip
    """HBM traffic of one parameter's update: read and write the fp32 master weight and each
    state, read the gradient, write the 16-bit copy (mixed precision) — Adam: 4+4+4 read, 4+4+4
    written, the gradient read, 2 written. state_bytes: bytes per state element when they differ
    from the master's (adam-8bit: 1 + 4/2048; None: 4 with a master copy, else the weight's);
    optimizer_states may be a mean (Adafactor's factored statistics, Muon's mix). writes_copy: False where the model
    runs its fp32 weights under autocast (no 16-bit copy to write: Framework.optimizer_writes_weight_copy); fused AdamW
    over fp32 then moves 4+4+4 read, 4+4+4 written and the fp32 gradient read, 28 B. Measured on one H200: a full
    fused-AdamW launch (320 x 65,536 = 20.97 M parameters) takes 164-173 us (trace-llama1b-b4-s4096.json.gz), 170 us
    at 28 B a parameter (587 MB at 4.28 TB/s x multi_tensor_waves), 182 us at the 30 B a written copy would add."""
    kept = 4.0 if master else weight_bytes
    per_state = kept if state_bytes is None else state_bytes
    return 2 * (kept + optimizer_states * per_state) + gradient_bytes + (weight_bytes if master and writes_copy else 0.0)


EXPERT_ACTIVATIONS = ("fused", "eager")
EXPERT_ACTIVATION_SOURCE = {
    "fused": ("one kernel each way: Megatron-LM's weighted bias-SwiGLU (megatron/core/fusions/fused_bias_swiglu.py "
              "weighted_bias_swiglu_impl, with bias_swiglu_fusion) or Primus-Turbo's swiglu_with_probs (AMD-AGI/Primus "
              "@fd1eeabb primus/backends/megatron/core/transformer/experts.py, use_turbo_fused_act_with_probs): forward reads "
              "the fc1 output and the probabilities and writes [R, w], backward reads the gradient and the fc1 output and writes "
              "its gradient"),
    "eager": ("AMD-AGI/Primus @fd1eeabb primus/backends/megatron/core/transformer/experts.py PrimusGroupedMLP.bias_act_func, "
              "its last branch (neither use_te_activation_func nor bias_activation_fusion: Primus's qwen3_30B_A3B.yaml sets "
              "bias_swiglu_fusion: false): `activation_func(x_glu) * (x_linear + glu_linear_offset)` on torch.chunk(x, 2, -1), "
              "then `intermediate_parallel * permuted_probs` with fp32 probs [R, 1] (an fp32 product) and "
              ".to(original_dtype), one ATen kernel an op: forward silu, add, mul, mul, _to_copy; backward _to_copy, mul, "
              "mul, _to_copy, sum, mul, mul, silu_backward, cat (recorded with a TorchDispatchMode on the CPU: "
              "tests/ground_truth/test_primus_expert_activation.py)"),
}


def eager_expert_activation(forward: list[Any], backward: list[Any], spec: Any, rows: int, width: int, e: float,
                            gated: bool) -> None:  # fmt: skip
    """The routed experts' activation times the routing probabilities as eager ATen ops (EXPERT_ACTIVATION_SOURCE["eager"]):
    [rows, w] values at e bytes, the probabilities one fp32 value a row (GATE_BYTES), their product in fp32."""
    n, p, shape = rows * width, GATE_BYTES * rows, f"[{rows}×{width}]"
    fwd = [("silu", 2 * e * n)] + ([("offset_add", 2 * e * n), ("mul", 3 * e * n)] if gated else []) + [
        ("probs", (e + 4) * n + p), ("cast", (4 + e) * n)]  # fmt: skip
    bwd = [("cast.bwd", (e + 4) * n), ("probs.bwd", 8 * n + p), ("probs.bwd.cast", (4 + e) * n), ("probs.bwd.dprobs", (8 + e) * n),
           ("probs.bwd.sum", 4 * n + p)]  # fmt: skip
    bwd += [("mul.bwd.d_act", 3 * e * n), ("mul.bwd.d_linear", 3 * e * n)] if gated else []
    bwd += [("silu.bwd", 3 * e * n)] + ([("chunk.bwd", 4 * e * n)] if gated else [])
    forward.extend(memory_op(f"moe.experts.act.{name}", traffic, spec, shape) for name, traffic in fwd)
    backward.extend(memory_op(f"moe.experts.act.{name}", traffic, spec, shape) for name, traffic in bwd)


def moe_kernels(model: Any, shard: Any, spec: Any, experts: ExpertShard) -> tuple[list[Any], list[Any], float, float]:
    """(forward kernels, backward kernels, shared-expert forward time, shared-expert backward time)
    of an MoE layer's feed-forward block on one GPU (parcalc.core.timing.moe's docstring: the routed
    tokens, the experts' GEMMs and the permutations). Here beside linear_passes and memory_op, which
    it is built from, so that moe.py needs nothing of this module."""
    moe = model.moe
    b, s, t, e = shard.micro_batch, shard.seq_len, shard.tp, shard.bytes_per_element
    h = model.hidden
    tokens = routed_tokens(b, s, t, shard.sequence_parallel)
    forward: list[Any] = []
    backward: list[Any] = []

    def linear(key: str, m: int, k: int, n: int, batch: int = 1, sixteen_bit: bool = False) -> None:
        use = (spec.sixteen_bit or spec) if sixteen_bit else spec
        fwd, bwd = linear_passes(key, m, k, n, e, use, "" if sixteen_bit else shard.fp8, batch)
        forward.extend(fwd)
        backward.extend(bwd)

    def mem(key: str, fwd: float, bwd: float, shape: str) -> None:
        forward.append(memory_op(key, fwd, spec, shape))
        backward.append(memory_op(f"{key}.bwd", bwd, spec, shape))

    scores = f"[{tokens}×{moe.experts}]"
    linear("moe.router", tokens, h, moe.experts, sixteen_bit=True)  # the router stays in 16 bits under FP8 (DeepSeek-V3 sec. 3.3.1)
    mem("moe.gate", 3 * GATE_BYTES * tokens * moe.experts, 3 * GATE_BYTES * tokens * moe.experts, scores)
    copies = tokens * moe.top_k
    mem("moe.permute", e * (tokens + copies) * h, e * (tokens + copies) * h, f"[{copies}×{h}]")
    rows, local = routed_rows(model, tokens, experts)
    m_e = max(math.ceil(rows), 1)
    width = max(moe.expert_ffn_hidden // experts.etp, 1)
    gated = model.mlp.gated
    # the all-to-all delivers the received copies in source-rank order; with several local experts they are sorted into
    # expert order after it and back before the combine (moe.py docstring, SORT_SOURCE): a read and a write of every copy each way
    sorted_rows = m_e * local if experts.dispatcher == "alltoall" and experts.ep > 1 and local > 1 else 0
    sort_bytes = 2 * (e * h + GATE_BYTES) * sorted_rows
    if sorted_rows:
        mem("moe.sort", sort_bytes, sort_bytes, f"[{sorted_rows}×{h}]")
    linear("moe.experts.fc1", m_e, h, 2 * width if gated else width, batch=local)
    act_rows = m_e * local
    if shard.expert_activation == "eager":
        eager_expert_activation(forward, backward, spec, act_rows, width, e, gated)
    else:
        mem("moe.experts.act", (3 if gated else 2) * e * act_rows * width, (5 if gated else 3) * e * act_rows * width, f"[{act_rows}×{width}]")
    linear("moe.experts.fc2", m_e, width, h, batch=local)
    if sorted_rows:
        mem("moe.unsort", 2 * e * h * sorted_rows, 2 * e * h * sorted_rows, f"[{sorted_rows}×{h}]")
    mem("moe.unpermute", e * (copies + tokens) * h + GATE_BYTES * copies, e * (copies + tokens) * h + GATE_BYTES * copies, f"[{copies}×{h}]")
    shared_f = shared_b = 0.0
    if moe.shared_experts:
        before_f, before_b = len(forward), len(backward)
        all_tokens = b * s
        sw = max(moe.shared_experts * moe.shared_width // t, 1)
        linear("moe.shared.fc1", all_tokens, h, 2 * sw if gated else sw)
        mem("moe.shared.act", (3 if gated else 2) * e * all_tokens * sw, (5 if gated else 3) * e * all_tokens * sw, f"[{all_tokens}×{sw}]")
        linear("moe.shared.fc2", all_tokens, sw, h)
        shared_f = sum(k.time for k in forward[before_f:])
        shared_b = sum(k.time for k in backward[before_b:])
    return forward, backward, shared_f, shared_b
