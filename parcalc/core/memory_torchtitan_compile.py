"""torchtitan's TransformerBlock under torch.compile (Inductor) in the step walk: what its compiled forward and backward
allocate and free, buffer by buffer, under each activation-checkpointing policy.

torchtitan compiles each block on its own after wrapping it for activation checkpointing, and shards it with fully_shard
after that (COMPILE_SOURCES['torchtitan']): FSDP2's all-gathers and reduce-scatters stay eager around the compiled block,
so parcalc.core.memory_fsdp's hooks are unchanged, and only the block's own tensors differ from the eager walk
(parcalc.core.memory_torchtitan.block_forward / block_backward).

AOTAutograd traces the block's forward and backward into one joint graph; the min-cut partitioner
(COMPILE_SOURCES['partitioner']) splits it and chooses what the forward hands the backward; Inductor then generates one
function for each, whose buffers are allocated in program order (`empty_strided`), reused where a dead buffer of the same
size and dtype is at hand (`# reuse`), and freed at their last use (`del buf..`). The programs below are those functions
as Inductor writes them for torchtitan's block (eager_ops.TitanBlock in tests/ground_truth: RMSNorm, complex RoPE, repeat_kv,
SDPA, SwiGLU), read with TORCH_LOGS=output_code (torch 2.13.0, inductor backend, on the CPU), one line per buffer:
  ("+", key, size, kind, what)           a buffer allocated (empty_strided), or an ATen fallback kernel's output;
  ("-", key, ...)                       buffers whose storage goes (`del`, the last name of it);
  ("=", old, new, size, kind, what)     Inductor reuses `old`'s storage for `new` (same size: no allocation); a size that
                                        differs (another model's widths) allocates `new` and frees `old` after the kernel.
Sizes are symbols of the block's widths (sizes_of). What the forward saves (the partitioner's choice, COMPILE_SOURCES):
- no checkpointing: the block input, both norms' fp32 1/rms and bf16 outputs, q after RoPE, k and v after repeat_kv (every
  query head), SDPA's output and logsumexp, wo's output (not h = x + wo: the backward adds it again), w1's and w3's outputs
  and silu(w1) * w3; none of eager's fp32 norm and RoPE copies (tests/ground_truth/test_torch_compile.py);
- torchtitan's selective op policy (its MUST_SAVE marks reach the partitioner through the checkpoint's tags): the block
  input, wq's, wv's and w1's outputs, SDPA's output and logsumexp; w2's output is marked but not saved (the backward never
  reads it); the backward recomputes the rest;
- full checkpointing: the block input only (and SDPA's RNG state, a few bytes); the backward recomputes the whole forward.
Inside the compiled code Inductor's fused kernels write only their outputs (an RMSNorm is one kernel: its fp32
temporaries never exist in memory); the complex RoPE products stay ATen kernels (Inductor generates no code for complex
tensors), so their fp32 and complex64 tensors are allocated as in eager.

What the CPU's code has that a GPU's has not, and is left out: the CPU flash-attention backward's copy of the logsumexp
in its own layout (the same size as the logsumexp, freed before the backward kernel runs: the walk keeps the logsumexp
instead), and the CPU generator's RNG state saved under full checkpointing (5 KB; a CUDA one is 16 bytes). Inductor's
CUDA code fuses the same nodes into Triton kernels; its buffers (the matmuls' outputs, the kernels' outputs, what is saved)
are the same tensors, although it may order or reuse them otherwise: the GPU's code is not read here.

Ground truth: tests/ground_truth/test_torch_memory_torchtitan_compile.py runs torchtitan's Transformer with each block
compiled by Inductor on the CPU and counts every allocation of the step with torch.profiler (profile_memory).
"""

from __future__ import annotations

from collections.abc import Callable

from parcalc.core.allocator import block_bytes
from parcalc.core.memory_walk import StepShapes, Walk

COMPILE_SOURCES = {
    "torchtitan": ("pytorch/torchtitan at 9dec370 torchtitan/parallelisms/parallelize_llama.py:66-88 parallelize_llama: apply_ac, "
                   "then apply_compile, then apply_fsdp; 297-306 apply_compile: torch.compile(transformer_block, fullgraph=True) "
                   "for each block, registered in its place; 309-339 apply_fsdp: fully_shard on each (compiled) block and the root"),
    "partitioner": ("pytorch/pytorch v2.13.0 torch/_functorch/partitioners.py:3725 min_cut_rematerialization_partition (the "
                    "inductor backend's partition_fn, torch/_inductor/compile_fx.py): the tensors the backward needs that are "
                    "cheapest to save; nodes tagged by a checkpoint (torch/_higher_order_ops/wrap.py:369 TagActivationCheckpoint, "
                    "torch/utils/checkpoint.py CheckpointPolicy MUST_SAVE / PREFER_RECOMPUTE) are recomputed in the backward "
                    "unless their policy says save"),
    "inductor": ("pytorch/pytorch v2.13.0 torch/_inductor/codegen/wrapper.py: buffers allocated in program order (894 AllocateLine), a dead buffer "
                 "of the same size reused (1069 ReuseLine, '# reuse'), freed at the last use (1002 FreeIfNotReusedLine, 'del buf'); "
                 "torch/_inductor/lowering.py:2634: no code generation for complex operators (ATen fallbacks); the generated "
                 "code of torchtitan's block read with TORCH_LOGS=output_code, torch 2.13.0 on the CPU"),
}

# what `memory --compile` says where the torchtitan walk follows the compiled block
COMPILED_WALK = ("the step's peak walks each block's torch.compile'd code as Inductor generates it (the min-cut partitioner's "
                 "saved tensors: no fp32 RMSNorm or RoPE copies kept; fused kernels write only their outputs; under op and full "
                 "checkpointing the recomputation runs inside the compiled backward; under tensor parallelism apply_tp's "
                 "all-gathers and reduce-scatters are compiled into the block: parcalc.core.memory_torchtitan_compile and "
                 "memory_torchtitan_tp_compile, checked on the CPU against every allocation of a compiled step)")

A, T_, G = "activations", "temporaries", "gradients"
POLICIES = ("none", "op", "full")

# one line of a program: (op, names...) as the module docstring says; the block's own names, and IN / OUT / GOUT / GIN for
# its input, its output, its output's gradient and its input's gradient (the walk's keys, given by the caller)
Step = tuple[str, ...]


def _attention_forward(q_kind: str, v_kind: str) -> tuple[Step, ...]:
    """wq, wk, wv and RoPE's fp32 and complex64 tensors (ATen kernels), as every forward (and the recomputation) runs them."""
    return (("+", "q", "Tq", q_kind, "wq output"),
            ("+", "k", "Tkv", T_, "wk output"),
            ("+", "v", "Tkv", v_kind, "wv output"),
            ("+", "q32", "Tq4", T_, "RoPE: q in fp32 (view_as_complex)"),
            ("+", "k32", "Tkv4", T_, "RoPE: k in fp32 (view_as_complex)"),
            ("-", "k"),
            ("+", "qc", "Tq4", T_, "RoPE: q * freqs_cis (complex64, an ATen kernel)"),
            ("-", "q32"),
            ("+", "kc", "Tkv4", T_, "RoPE: k * freqs_cis (complex64, an ATen kernel)"),
            ("-", "k32"))  # fmt: skip


FORWARD: dict[str, tuple[Step, ...]] = {
    "none": (("+", "rstd1", "T4", A, "attention_norm 1/rms (fp32)"),
             ("+", "n1", "Th", A, "attention_norm output (wq / wk / wv's input)"),
             *_attention_forward(A, T_),
             ("=", "q", "qrope", "Tq", A, "SDPA q (RoPE written into wq's buffer)"),
             ("+", "keys", "Tq", A, "SDPA k (RoPE's output, repeat_kv copy)"),
             ("+", "values", "Tq", A, "SDPA v (repeat_kv copy)"),
             ("-", "qc", "kc", "v"),
             ("+", "attn", "Tq", A, "SDPA output (wo's input)"),
             ("+", "lse", "lse", A, "SDPA logsumexp (fp32)"),
             ("+", "o", "Th", A, "wo output"),
             ("+", "rstd2", "T4", A, "ffn_norm 1/rms (fp32)"),
             ("+", "n2", "Th", A, "ffn_norm output (w1 / w3's input)"),
             ("+", "w1", "Tf", A, "w1 output"),
             ("+", "w3", "Tf", A, "w3 output"),
             ("+", "prod", "Tf", A, "silu(w1) * w3 (w2's input)"),
             ("+", "OUT", "Th", A, "block output (w2's output, the residual added in place)")),
    "op": (("+", "rstd1", "T4", T_, "attention_norm 1/rms (fp32)"),
           ("+", "n1", "Th", T_, "attention_norm output"),
           *_attention_forward(A, A),
           ("=", "n1", "qrope", "Tq", T_, "SDPA q (RoPE's output)"),
           ("+", "keys", "Tq", T_, "SDPA k (RoPE's output, repeat_kv copy)"),
           ("+", "values", "Tq", T_, "SDPA v (repeat_kv copy)"),
           ("-", "qc", "kc"),
           ("+", "attn", "Tq", A, "SDPA output"),
           ("+", "lse", "lse", A, "SDPA logsumexp (fp32)"),
           ("-", "qrope"),
           ("=", "values", "o", "Th", T_, "wo output"),
           ("=", "rstd1", "rstd2", "T4", T_, "ffn_norm 1/rms (fp32)"),
           ("=", "keys", "n2", "Th", T_, "ffn_norm output"),
           ("-", "rstd2"),
           ("+", "w1", "Tf", A, "w1 output"),
           ("+", "w3", "Tf", T_, "w3 output"),
           ("-", "n2"),
           ("=", "w3", "prod", "Tf", T_, "silu(w1) * w3"),
           ("+", "w2", "Th", T_, "w2 output"),
           ("-", "prod"),
           ("=", "o", "OUT", "Th", A, "block output (the residual added in place)"),
           ("-", "w2")),
    "full": (("+", "rstd1", "T4", T_, "attention_norm 1/rms (fp32)"),
             ("+", "n1", "Th", T_, "attention_norm output"),
             *_attention_forward(T_, T_),
             ("=", "q", "qrope", "Tq", T_, "SDPA q (RoPE written into wq's buffer)"),
             ("=", "n1", "keys", "Tq", T_, "SDPA k (RoPE's output, repeat_kv copy)"),
             ("+", "values", "Tq", T_, "SDPA v (repeat_kv copy)"),
             ("-", "qc", "kc", "v"),
             ("+", "attn", "Tq", T_, "SDPA output"),
             ("+", "lse", "lse", T_, "SDPA logsumexp (fp32)"),
             ("-", "qrope", "keys", "lse"),
             ("=", "values", "o", "Th", T_, "wo output"),
             ("=", "rstd1", "rstd2", "T4", T_, "ffn_norm 1/rms (fp32)"),
             ("=", "attn", "n2", "Th", T_, "ffn_norm output"),
             ("-", "rstd2"),
             ("+", "w1", "Tf", T_, "w1 output"),
             ("+", "w3", "Tf", T_, "w3 output"),
             ("-", "n2"),
             ("=", "w1", "prod", "Tf", T_, "silu(w1) * w3"),
             ("-", "w3"),
             ("+", "w2", "Th", T_, "w2 output"),
             ("-", "prod"),
             ("=", "o", "OUT", "Th", A, "block output (the residual added in place)"),
             ("-", "w2")),
}


def _mlp_backward(recomputed: bool) -> tuple[Step, ...]:
    """w2's, the SwiGLU product's, w3's and w1's backward. Where the forward saved silu(w1) * w3 (no checkpointing) w2's
    weight gradient comes first and w1's gradient is written into w3's buffer; where it is recomputed one fused kernel
    writes the product and both gradients at once, and w1's input gradient goes into ffn_norm's recomputed output."""
    if recomputed:
        return (("+", "gprod", "Tf", T_, "w2 input gradient"),
                ("+", "prod", "Tf", T_, "silu(w1) * w3 (recomputed)"),
                ("+", "gu", "Tf", T_, "w3 output gradient"),
                ("+", "gg", "Tf", T_, "w1 output gradient (silu backward)"),
                ("-", "w3", "gprod", "w1"),
                ("+", "w2.grad", "hf", G, "weight gradients"),
                ("-", "prod"),
                ("+", "w3.grad", "hf", G, "weight gradients"),
                ("+", "gin3", "Th", T_, "w3 input gradient"),
                ("-", "gu"),
                ("+", "w1.grad", "hf", G, "weight gradients"),
                ("=", "n2", "gin1", "Th", T_, "w1 input gradient"),
                ("-", "gg"))  # fmt: skip
    return (("+", "w2.grad", "hf", G, "weight gradients"),
            ("-", "prod"),
            ("+", "gprod", "Tf", T_, "w2 input gradient"),
            ("+", "gu", "Tf", T_, "w3 output gradient"),
            ("=", "w3", "gg", "Tf", T_, "w1 output gradient (silu backward, in w3's buffer)"),
            ("-", "gprod", "w1"),
            ("+", "w3.grad", "hf", G, "weight gradients"),
            ("+", "gin3", "Th", T_, "w3 input gradient"),
            ("-", "gu"),
            ("+", "w1.grad", "hf", G, "weight gradients"),
            ("-", "n2"),
            ("+", "gin1", "Th", T_, "w1 input gradient"),
            ("-", "gg"))  # fmt: skip


def _attention_backward(reused: dict[str, str], sdpa_inputs_freed: bool) -> tuple[Step, ...]:
    """SDPA's backward (dk and dv at every query head), repeat_kv's sum, RoPE's backward (ATen complex kernels), wv's, wk's and
    wq's input gradients. `reused`: the dead buffer Inductor writes each of these into, where the generated code reuses one."""

    def out(new: str, size: str, what: str) -> Step:
        return ("=", reused[new], new, size, T_, what) if new in reused else ("+", new, size, T_, what)

    return (("+", "dq", "Tq", T_, "SDPA backward: dq"),
            ("+", "dk", "Tq", T_, "SDPA backward: dk (every query head)"),
            ("+", "dv", "Tq", T_, "SDPA backward: dv (every query head)"),
            ("-", "lse", *(("qrope", "keys", "values") if sdpa_inputs_freed else ())),
            out("dvs", "Tkv", "repeat_kv backward: dv summed"),
            ("-", "dv"),
            out("ginv", "Th", "wv input gradient"),
            out("dk32", "Tkv4", "RoPE backward: dk summed, in fp32"),
            ("-", "dk"),
            ("+", "conj", "conj", T_, "RoPE backward: conj(freqs_cis) (a clone)"),
            ("+", "dkc", "Tkv4", T_, "RoPE backward: dk * conj(freqs_cis)"),
            ("-", "dk32"),
            ("+", "dk16", "Tkv", T_, "RoPE backward: dk (bf16)"),
            ("-", "dkc"),
            out("gink", "Th", "wk input gradient"),
            out("dq32", "Tq4", "RoPE backward: dq in fp32"),
            ("-", "dq"),
            ("+", "dqc", "Tq4", T_, "RoPE backward: dq * conj(freqs_cis)"),
            ("-", "conj", "dq32"),
            out("dq16", "Tq", "RoPE backward: dq (bf16)"),
            ("-", "dqc"),
            out("ginq", "Th", "wq input gradient"))  # fmt: skip


def _weight_gradients_and_input_gradient(saved_all: bool) -> tuple[Step, ...]:
    """The norms' weight gradients, wo's, wv's, wk's, wq's, then attention_norm's backward into the input's gradient (one fused
    kernel), written into the buffer of the gradient at h."""
    return (("+", "n2.grad", "h", G, "weight gradients"),
            ("+", "n1.grad", "h", G, "weight gradients"),
            ("-", "o", "gin3", "gin1", *(("rstd2",) if saved_all else ())),
            ("+", "o.grad", "hq", G, "weight gradients"),
            ("-", "attn"),
            ("+", "v.grad", "hkv", G, "weight gradients"),
            ("-", "dvs"),
            ("+", "k.grad", "hkv", G, "weight gradients"),
            ("-", "dk16"),
            ("+", "q.grad", "hq", G, "weight gradients"),
            ("-", "dq16", "n1"),
            ("=", "s2" if saved_all else "rstd2", "s1", "T4", T_, "attention_norm backward: sum (fp32)"),
            ("=", "gh", "GIN", "Th", T_, "block input gradient"),
            ("-", "rstd1", "s1", "ginv", "gink", "ginq", "IN"))  # fmt: skip


def _norm2_backward() -> tuple[Step, ...]:
    """ffn_norm's backward plus the residual: the gradient at h (one fused kernel) and its fp32 row sums, kept for
    attention_norm's (no checkpointing)."""
    return (("+", "s2", "T4", T_, "ffn_norm backward: sum (fp32)"),
            ("+", "gh", "Th", T_, "gradient at h (the residual's and ffn_norm's backward)"),
            ("-", "GOUT"))  # fmt: skip


def _recomputed_mlp_input() -> tuple[Step, ...]:
    return (("+", "o", "Th", T_, "wo output (recomputed)"),
            ("+", "rstd2", "T4", T_, "ffn_norm 1/rms (recomputed)"),
            ("+", "n2", "Th", T_, "ffn_norm output (recomputed)"))  # fmt: skip


# live at the start: what the forward saved, and GOUT; the recomputation (op, full) runs inside the backward's code
BACKWARD: dict[str, tuple[Step, ...]] = {
    "none": (*_mlp_backward(recomputed=False),
             *_norm2_backward(),
             ("+", "gattn", "Tq", T_, "wo input gradient"),
             *_attention_backward({"ginv": "gattn"}, sdpa_inputs_freed=True),
             *_weight_gradients_and_input_gradient(saved_all=True)),
    "op": (*_recomputed_mlp_input(),
           ("+", "w3", "Tf", T_, "w3 output (recomputed)"),
           *_mlp_backward(recomputed=True),
           ("+", "s2", "T4", T_, "ffn_norm backward: sum (fp32)"),
           ("+", "rstd1", "T4", T_, "attention_norm 1/rms (recomputed)"),
           ("+", "gh", "Th", T_, "gradient at h (the residual's and ffn_norm's backward)"),
           ("+", "n1", "Th", T_, "attention_norm output (recomputed)"),
           ("-", "s2", "GOUT"),
           ("+", "gattn", "Tq", T_, "wo input gradient"),
           ("+", "q32", "Tq4", T_, "RoPE: q in fp32 (recomputed from the saved wq output)"),
           ("-", "q"),
           ("+", "qc", "Tq4", T_, "RoPE: q * freqs_cis (recomputed)"),
           ("+", "qrope", "Tq", T_, "SDPA q (recomputed)"),
           ("-", "qc"),
           ("+", "k", "Tkv", T_, "wk output (recomputed)"),
           ("+", "k32", "Tkv4", T_, "RoPE: k in fp32 (recomputed)"),
           ("+", "kc", "Tkv4", T_, "RoPE: k * freqs_cis (recomputed)"),
           ("+", "keys", "Tq", T_, "SDPA k (recomputed, repeat_kv copy)"),
           ("+", "values", "Tq", T_, "SDPA v (recomputed from the saved wv output, repeat_kv copy)"),
           ("-", "kc", "v"),
           *_attention_backward({"dvs": "k", "ginv": "values", "dk32": "k32", "gink": "keys", "dq32": "q32", "dq16": "qrope",
                                 "ginq": "gattn"}, sdpa_inputs_freed=False),
           *_weight_gradients_and_input_gradient(saved_all=False)),
    "full": (("+", "rstd1", "T4", T_, "attention_norm 1/rms (recomputed)"),
             ("+", "n1", "Th", T_, "attention_norm output (recomputed)"),
             *_attention_forward(T_, T_),
             ("=", "q", "qrope", "Tq", T_, "SDPA q (recomputed)"),
             ("+", "keys", "Tq", T_, "SDPA k (recomputed, repeat_kv copy)"),
             ("+", "values", "Tq", T_, "SDPA v (recomputed, repeat_kv copy)"),
             ("-", "qc", "kc", "v"),
             ("+", "attn", "Tq", T_, "SDPA output (recomputed)"),
             ("+", "lse", "lse", T_, "SDPA logsumexp (recomputed)"),
             *_recomputed_mlp_input(),
             ("+", "w1", "Tf", T_, "w1 output (recomputed)"),
             ("+", "w3", "Tf", T_, "w3 output (recomputed)"),
             *_mlp_backward(recomputed=True),
             ("+", "s2", "T4", T_, "ffn_norm backward: sum (fp32)"),
             ("+", "gh", "Th", T_, "gradient at h (the residual's and ffn_norm's backward)"),
             ("-", "s2", "GOUT"),
             ("+", "gattn", "Tq", T_, "wo input gradient"),
             *_attention_backward({"ginv": "gattn", "gink": "values", "dq16": "keys", "ginq": "qrope"}, sdpa_inputs_freed=False),
             *_weight_gradients_and_input_gradient(saved_all=False)),
}


def sizes_of(x: StepShapes) -> dict[str, float]:
    """The programs' size symbols in bytes: activations of T = b x s tokens (bf16 unless named fp32 / complex64), weight
    gradients (bf16, FSDP2's param_dtype)."""
    T, c = x.T, x.c
    return {"T4": T * 4, "Th": T * x.h * c, "Tq": T * x.q * c, "Tkv": T * x.kv * c, "Tf": T * x.f * c, "Tq4": T * x.q * 4,
            "Tkv4": T * x.kv * 4, "lse": x.b * x.heads * x.s * 4, "conj": x.s * (x.q // x.heads) * 4,  # freqs_cis[:s], complex64
            "h": x.h * c, "hq": x.h * x.q * c, "hkv": x.h * x.kv * c, "hf": x.h * x.f * c,
            # the Float8 block's (memory_float8_compile): FP8 copies (1 byte an element), fp32 ffn-wide tensors, amax / scale
            "Th1": T * x.h, "Tkv1": T * x.kv, "Tf1": T * x.f, "hq1": x.h * x.q, "hkv1": x.h * x.kv, "hf1": x.h * x.f,
            "Tf4": T * x.f * 4, "scalar": 4,
            # the ring attention's, under context parallelism (memory_torchtitan_cp_compile): the repeated K and V concatenated
            # and all-gathered over the CP ranks, a later step's half of the queries, the fp32 dK/dV sent on
            "kvcat": 2 * T * x.q * c, "kvgather": x.cp * 2 * T * x.q * c, "Tq_half": T * x.q * c / 2, "Tq4_half": T * x.q * 2,
            "lse_half": x.b * x.heads * x.s * 2, "kvcat4": 2 * T * x.q * 4}  # fmt: skip


def run_program(walk: Walk, x: StepShapes, program: tuple[Step, ...], key: Callable[[str], str],
                sizes: dict[str, float] | None = None) -> None:  # fmt: skip
    """Replay one generated function's buffers on the walk (the module docstring's three kinds of line); `sizes`: the size
    symbols' bytes where not sizes_of(x)'s (a TP rank's: parcalc.core.memory_torchtitan_tp_compile)."""
    sizes = sizes_of(x) if sizes is None else sizes
    for step in program:
        if step[0] == "+":
            walk.alloc(key(step[1]), sizes[step[2]], step[3], step[4])
        elif step[0] == "-":
            walk.free(*(key(name) for name in step[1:]))
        else:  # "=": Inductor's reuse of a dead buffer of the same size; another size is a new buffer, the old one freed
            old, new, size = key(step[1]), key(step[2]), sizes[step[3]]
            if old in walk.live and walk.live[old].bytes == block_bytes(size):
                walk.rename(old, new, step[5], step[4])
            else:
                walk.alloc(new, size, step[4], step[5])
                walk.free(old)


def _keys(k: str, names: dict[str, str]) -> Callable[[str], str]:
    return lambda name: names.get(name, f"{k}.{name}")


def compiled_block_forward(walk: Walk, x: StepShapes, i: int, inp: str, policy: str, prefix: str = "") -> str:
    """The compiled forward of block i under `policy` (its input `inp` is saved by every policy); returns its output's key."""
    k = f"{prefix}L{i}"
    out = f"{k}.x2"
    run_program(walk, x, _programs(x)[0][policy], _keys(k, {"IN": inp, "OUT": out}))
    return out


def compiled_block_backward(walk: Walk, x: StepShapes, i: int, inp: str, g_out: str, into: str, policy: str, prefix: str = "") -> None:
    """The compiled backward of block i (with its recomputation, under op and full): frees what the forward saved and the
    block input, leaves the weight gradients (`{k}.NAME.grad`) and the input's gradient in `into`."""
    k = f"{prefix}L{i}"
    run_program(walk, x, _programs(x)[1][policy], _keys(k, {"IN": inp, "GOUT": g_out, "GIN": into}))


def _programs(x: StepShapes) -> tuple[dict[str, tuple[Step, ...]], dict[str, tuple[Step, ...]]]:
    """The bf16 block's programs, or the Float8 block's (torchao's Float8Linear: parcalc.core.memory_float8_compile) where
    x.float8, its weights cast inside the compiled code or, where x.float8_weights, all-gathered in FP8 already; under context
    parallelism (x.cp > 1) the block's code with the ring attention traced into it (parcalc.core.memory_torchtitan_cp_compile)."""
    if x.cp > 1:
        from parcalc.core.memory_torchtitan_cp_compile import cp_programs

        return cp_programs(x.cp, x.float8)
    if x.float8:
        from parcalc.core import memory_float8_compile as float8

        if x.float8_weights:
            return float8.FLOAT8_WEIGHTS_FORWARD, float8.FLOAT8_WEIGHTS_BACKWARD
        return float8.FLOAT8_FORWARD, float8.FLOAT8_BACKWARD
    return FORWARD, BACKWARD
