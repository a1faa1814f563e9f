"""torchtitan's compiled TransformerBlock under tensor parallelism in the step walk: the block's Inductor code with apply_tp's
collectives traced into it, buffer by buffer, on one TP rank, under no and full checkpointing.

torchtitan applies apply_tp, then apply_ac, then apply_compile (each block, fullgraph=True), then apply_fsdp
(TP_COMPILE_SOURCES['torchtitan']): the compiled block holds the plan's hooks and its DTensor parameters. Dynamo traces the
hooks' redistributions and AOTAutograd desugars the DTensors into their local shards and functional collectives
(TP_COMPILE_SOURCES['dtensor']), so the whole TP block, its collectives and their backward's, is one graph, and Inductor plans
its buffers around the collectives' outputs. What the compiled block allocates differs from the eager TP block
(parcalc.core.memory_torchtitan_tp):
- each norm runs on the sequence shard, one fused kernel writing its bf16 output (no fp32 copies), which is all-gathered
  (all_gather_into_tensor: a new buffer of tp x the shard, gathered on dim 0) and copied into the whole sequence's layout by
  one fused kernel (the eager torch.cat's copy); the gathered norm outputs are what the partitioner saves for the column-
  parallel linears' weight gradients (no checkpointing), where eager saves them too;
- wo's and w2's partial sums are written, chunk by chunk, into the reduce-scatter's input by a fused kernel (the eager cat)
  and reduce-scattered (reduce_scatter_tensor: a new buffer of the shard); the block's residual adds are one kernel;
- the rest is the compiled block's (parcalc.core.memory_torchtitan_compile) on a rank's heads and MLP width: no fp32 norm or
  RoPE copies kept, SwiGLU fused, the backward's recomputation (full checkpointing) inside the compiled backward, and the
  backward's all-gather of each row-parallel output gradient and reduce-scatter of each replicated input's gradient;
- in the backward the norms' weight gradients are the rank's partial sums over its sequence shard (DTensor's Partial; bf16,
  hidden-sized).
Sizes are memory_torchtitan_compile._sizes's symbols of a rank's local widths (q, kv, f, heads, vocabulary over tp, the whole
sequence), and the sequence shard's: Tsh (T / tp x hidden, bf16) and Ts4 (T / tp, fp32). torchtitan's Llama has q = hidden,
so a rank's T x q / tp is Tsh too (the reading cannot tell them apart; the walk is refused where heads x head_dim != hidden).

The programs below are generated from Inductor's code (torch 2.13.0, inductor backend on the CPU, TORCH_LOGS=output_code,
graph_code) by tests/ground_truth/inductor_tp_programs.py (the reader of inductor_float8_programs.py), one per TP degree
(2, 4, 8: the collectives' chunk copies follow the degree) and policy, in bf16, and at tp 8 at micro-batch 1 too.
Left out, as for the compiled block without TP: the CPU RNG state under full checkpointing (5 KB on the CPU; a CUDA one is 16
bytes). What is not read: torchao's Float8 TP styles compiled (Float8ColwiseParallel, Float8RowwiseParallel,
PrepareFloat8ModuleInput): the compiled Float8 block under TP is refused. Two substitutions in the ground truth (where torch
2.13 on the CPU fails where torchtitan's GPUs ran: tests/ground_truth/tiny_torchtitan_tp_compile.py) change no block buffer.
Ground truth: tests/ground_truth/test_torch_memory_torchtitan_tp_compile.py, profiler-counted compiled steps under apply_tp
on fake ranks.
"""

from __future__ import annotations

from dataclasses import replace

from parcalc.core.memory_float8_compile import WHAT, as_block_program
from parcalc.core.memory_torchtitan_compile import run_program, sizes_of
from parcalc.core.memory_walk import StepShapes, Walk

Step = tuple[str, ...]

TP_COMPILE_SOURCES = {
    "torchtitan": ("pytorch/torchtitan at 9dec370 torchtitan/parallelisms/parallelize_llama.py:37-100 parallelize_llama: apply_tp "
                   "(enable_async_tp from job_config.experimental.enable_async_tensor_parallel), apply_ac, apply_compile, then "
                   "apply_fsdp; 297-306 apply_compile: torch.compile(transformer_block, fullgraph=True) for each block; 113-199 "
                   "apply_tp's plan (SequenceParallel norms, PrepareModuleInput Shard(1) -> Replicate, Colwise / RowwiseParallel "
                   "with output Shard(1)); with AsyncTP it sets torch._inductor.config._micro_pipeline_tp = True and "
                   "enable_symm_mem_for_group (the compiled collectives fused with the matmuls: not in the read code)"),
    "dtensor": ("pytorch/pytorch v2.13.0 torch/distributed/tensor/_redistribute.py (Redistribute: Shard -> Replicate an "
                "all_gather_tensor, Partial -> Shard a reduce_scatter_tensor, torch/distributed/_functional_collectives.py), "
                "traced by Dynamo and desugared by AOTAutograd's subclass handling into _c10d_functional ops of the joint graph; "
                "Inductor emits them as fallback calls (torch/_inductor/comm_lowering.py), each output a new buffer"),
}
DEGREES = (2, 4, 8)  # the TP degrees whose code is read

# what the sequence shard's size symbols hold
SHARD_WHAT = {"Tsh": "bf16 activation (a rank's sequence shard, hidden width; or a rank's heads over the sequence)",
              "Ts4": "fp32 row values of a rank's sequence shard (1/rms, sums)"}


def tp_programs(tp: int, batch_one: bool) -> tuple[dict[str, tuple[Step, ...]], dict[str, tuple[Step, ...]]]:
    """The compiled TP block's forward and backward programs by policy at TP degree `tp` (one of DEGREES); `batch_one`:
    micro-batch 1's, where read (at tp 8), else the micro-batch > 1 code's."""
    what = {**WHAT, **SHARD_WHAT}
    pairs = {policy: PROGRAMS.get(("bf16", tp, policy, batch_one), PROGRAMS[("bf16", tp, policy, False)]) for policy in ("none", "full")}
    return ({p: as_block_program(f, what) for p, (f, _) in pairs.items()}, {p: as_block_program(b, what) for p, (_, b) in pairs.items()})


def _sizes(x: StepShapes, tp: int) -> dict[str, float]:
    """The programs' size symbols in bytes: the compiled block's of a rank's local widths over the whole sequence, and the
    sequence shard's."""
    local = replace(x, q=x.q // tp, kv=x.kv // tp, f=x.f // tp, heads=x.heads // tp, V=x.V // tp)
    return {**sizes_of(local), "Tsh": x.T / tp * x.h * x.c, "Ts4": x.T / tp * 4}


def compiled_tp_block_forward(walk: Walk, x: StepShapes, i: int, inp: str, policy: str, tp: int, prefix: str = "") -> str:
    """The compiled forward of block i on one TP rank (its input, the sequence shard `inp`, is saved by every policy);
    returns its output's key."""
    k = f"{prefix}L{i}"
    out = f"{k}.x2"
    names = {"IN": inp, "OUT": out}
    run_program(walk, x, tp_programs(tp, x.b == 1)[0][policy], lambda name: names.get(name, f"{k}.{name}"), _sizes(x, tp))
    return out


def compiled_tp_block_backward(walk: Walk, x: StepShapes, i: int, tp: int, inp: str, g_out: str, into: str, policy: str,
                               prefix: str = "") -> None:  # fmt: skip
    """The compiled backward of block i on one TP rank (with its recomputation under full checkpointing): frees what the
    forward saved and the block input, leaves the weight gradients (`{k}.NAME.grad`, the rank's shards) and the input's
    gradient (the sequence shard) in `into`."""
    k = f"{prefix}L{i}"
    names = {"IN": inp, "GOUT": g_out, "GIN": into}
    run_program(walk, x, tp_programs(tp, x.b == 1)[1][policy], lambda name: names.get(name, f"{k}.{name}"), _sizes(x, tp))


# generated by tests/ground_truth/inductor_tp_programs.py from tests/fixtures/torchtitan_tp/inductor_*.log (do not edit):
# ("+", key, size, kind) / ("-", key) / ("=", old, new, size, kind); kind A activations (saved), T temporaries, G gradients
PROGRAMS: dict[tuple[str, int, str, bool], tuple[tuple[Step, ...], tuple[Step, ...]]] = {
    ('bf16', 2, 'none', False): (
        (
            ('+', 'f0', 'Ts4', 'T'), ('=', 'f0', 'f1', 'Ts4', 'A'), ('+', 'f2', 'Tsh', 'T'), ('+', 'f3', 'Th', 'T'),
            ('+', 'f8', 'Th', 'A'), ('=', 'f2', 'f9', 'Tsh', 'T'), ('+', 'f10', 'Tkv', 'T'), ('+', 'f11', 'Tkv', 'T'),
            ('+', 'f12', 'Tq4', 'T'), ('+', 'f15', 'Tkv4', 'T'), ('-', 'f10'), ('+', 'f20', 'Tq4', 'T'), ('-', 'f12'),
            ('+', 'f24', 'Tkv4', 'T'), ('-', 'f15'), ('=', 'f9', 'f28', 'Tsh', 'A'), ('+', 'f29', 'Tsh', 'A'),
            ('+', 'f30', 'Tsh', 'A'), ('-', 'f11'), ('-', 'f20'), ('-', 'f24'), ('+', 'f31_0', 'Tsh', 'A'),
            ('+', 'f31_1', 'lse', 'A'), ('=', 'f3', 'f34', 'Th', 'T'), ('+', 'f37', 'Th', 'T'), ('+', 'f38', 'Tsh', 'A'),
            ('+', 'f41', 'Ts4', 'T'), ('=', 'f41', 'f42', 'Ts4', 'A'), ('+', 'f43', 'Tsh', 'T'), ('+', 'f44', 'Th', 'T'),
            ('-', 'f43'), ('=', 'f37', 'f49', 'Th', 'A'), ('+', 'f50', 'Tf', 'A'), ('+', 'f51', 'Tf', 'A'),
            ('+', 'f52', 'Tf', 'A'), ('=', 'f44', 'f53', 'Th', 'T'), ('=', 'f34', 'f56', 'Th', 'T'), ('-', 'f53'),
            ('+', 'f57', 'Tsh', 'T'), ('-', 'f56'), ('+', 'OUT', 'Tsh', 'A'), ('-', 'f57'),
        ),
        (
            ('+', 'b0', 'Th', 'T'), ('+', 'b5', 'Th', 'T'), ('-', 'b0'), ('+', 'w2.grad', 'hf', 'G'), ('-', 'f52'),
            ('+', 'b7', 'Tf', 'T'), ('-', 'b5'), ('+', 'b8', 'Tf', 'T'), ('=', 'f51', 'b12', 'Tf', 'T'), ('-', 'b7'),
            ('-', 'f50'), ('+', 'w3.grad', 'hf', 'G'), ('+', 'b10', 'Th', 'T'), ('-', 'b8'), ('+', 'w1.grad', 'hf', 'G'),
            ('-', 'f49'), ('+', 'b14', 'Th', 'T'), ('-', 'b12'), ('+', 'b17', 'Th', 'T'), ('+', 'b18', 'Tsh', 'T'),
            ('+', 'b22', 'Ts4', 'T'), ('+', 'b23', 'Tsh', 'T'), ('-', 'GOUT'), ('+', 'b24', 'Th', 'T'),
            ('=', 'b17', 'b29', 'Th', 'T'), ('+', 'b31', 'Tsh', 'T'), ('+', 'b32', 'lse', 'T'), ('-', 'f31_1'),
            ('+', 'b33_0', 'Tsh', 'T'), ('+', 'b33_1', 'Tsh', 'T'), ('+', 'b33_2', 'Tsh', 'T'), ('-', 'b32'), ('-', 'f28'),
            ('-', 'f29'), ('-', 'f30'), ('+', 'b57', 'Tkv', 'T'), ('=', 'b24', 'b59', 'Th', 'T'), ('+', 'b37', 'Tkv4', 'T'),
            ('+', 'b44', 'conj', 'T'), ('+', 'b46', 'Tkv4', 'T'), ('-', 'b37'), ('+', 'b60', 'Tkv', 'T'), ('-', 'b46'),
            ('=', 'b14', 'b62', 'Th', 'T'), ('-', 'b33_1'), ('-', 'b33_2'), ('+', 'b48', 'Tq4', 'T'), ('-', 'b33_0'),
            ('+', 'b51', 'Tq4', 'T'), ('-', 'b44'), ('-', 'b48'), ('=', 'b31', 'b63', 'Tsh', 'T'), ('-', 'b51'),
            ('=', 'b10', 'b65', 'Th', 'T'), ('+', 'b68', 'Th', 'T'), ('-', 'b59'), ('-', 'b62'), ('-', 'b65'),
            ('+', 'b69', 'Tsh', 'T'), ('-', 'b68'), ('+', 'n2.grad', 'h', 'G'), ('+', 'n1.grad', 'h', 'G'), ('-', 'b18'),
            ('-', 'f42'), ('-', 'f38'), ('+', 'o.grad', 'hq', 'G'), ('-', 'b29'), ('-', 'f31_0'), ('+', 'v.grad', 'hkv', 'G'),
            ('-', 'b57'), ('+', 'k.grad', 'hkv', 'G'), ('-', 'b60'), ('+', 'q.grad', 'hq', 'G'), ('-', 'b63'), ('-', 'f8'),
            ('=', 'b22', 'b73', 'Ts4', 'T'), ('=', 'b23', 'GIN', 'Tsh', 'T'), ('-', 'b69'), ('-', 'b73'), ('-', 'IN'),
            ('-', 'f1'),
        ),
    ),
    ('bf16', 2, 'full', False): (
        (
            ('+', 'f0', 'Ts4', 'T'), ('+', 'f1', 'Tsh', 'T'), ('+', 'f2', 'Th', 'T'), ('+', 'f7', 'Th', 'T'),
            ('=', 'f1', 'f8', 'Tsh', 'T'), ('+', 'f9', 'Tkv', 'T'), ('+', 'f10', 'Tkv', 'T'), ('+', 'f11', 'Tq4', 'T'),
            ('+', 'f14', 'Tkv4', 'T'), ('-', 'f9'), ('+', 'f19', 'Tq4', 'T'), ('-', 'f11'), ('+', 'f23', 'Tkv4', 'T'),
            ('-', 'f14'), ('=', 'f8', 'f27', 'Tsh', 'T'), ('+', 'f28', 'Tsh', 'T'), ('+', 'f29', 'Tsh', 'T'), ('-', 'f10'),
            ('-', 'f19'), ('-', 'f23'), ('+', 'f30_0', 'Tsh', 'T'), ('+', 'f30_1', 'lse', 'T'), ('-', 'f27'), ('-', 'f28'),
            ('-', 'f29'), ('-', 'f30_1'), ('=', 'f7', 'f34', 'Th', 'T'), ('=', 'f2', 'f37', 'Th', 'T'), ('-', 'f34'),
            ('+', 'f38', 'Tsh', 'T'), ('=', 'f0', 'f41', 'Ts4', 'T'), ('=', 'f30_0', 'f42', 'Tsh', 'T'), ('-', 'f41'),
            ('+', 'f43', 'Th', 'T'), ('-', 'f42'), ('=', 'f37', 'f48', 'Th', 'T'), ('-', 'f43'), ('+', 'f49', 'Tf', 'T'),
            ('+', 'f50', 'Tf', 'T'), ('-', 'f48'), ('=', 'f49', 'f51', 'Tf', 'T'), ('-', 'f50'), ('+', 'f52', 'Th', 'T'),
            ('-', 'f51'), ('+', 'f55', 'Th', 'T'), ('-', 'f52'), ('+', 'f56', 'Tsh', 'T'), ('-', 'f55'), ('+', 'OUT', 'Tsh', 'A'),
            ('-', 'f38'), ('-', 'f56'),
        ),
        (
            ('+', 'b0', 'Th', 'T'), ('+', 'b5', 'Th', 'T'), ('+', 'b6', 'Ts4', 'T'), ('+', 'b7', 'Tsh', 'T'),
            ('+', 'b8', 'Th', 'T'), ('=', 'b0', 'b13', 'Th', 'T'), ('=', 'b7', 'b14', 'Tsh', 'T'), ('+', 'b15', 'Tkv', 'T'),
            ('+', 'b16', 'Tkv', 'T'), ('+', 'b17', 'Tq4', 'T'), ('+', 'b20', 'Tkv4', 'T'), ('-', 'b15'), ('+', 'b25', 'Tq4', 'T'),
            ('-', 'b17'), ('+', 'b29', 'Tkv4', 'T'), ('-', 'b20'), ('=', 'b14', 'b33', 'Tsh', 'T'), ('+', 'b34', 'Tsh', 'T'),
            ('+', 'b35', 'Tsh', 'T'), ('-', 'b16'), ('-', 'b25'), ('-', 'b29'), ('+', 'b36_0', 'Tsh', 'T'),
            ('+', 'b36_1', 'lse', 'T'), ('=', 'b8', 'b39', 'Th', 'T'), ('+', 'b42', 'Th', 'T'), ('-', 'b39'),
            ('+', 'b43', 'Tsh', 'T'), ('+', 'b46', 'Ts4', 'T'), ('+', 'b47', 'Tsh', 'T'), ('+', 'b48', 'Th', 'T'), ('-', 'b47'),
            ('=', 'b42', 'b53', 'Th', 'T'), ('-', 'b48'), ('+', 'b54', 'Tf', 'T'), ('+', 'b56', 'Tf', 'T'),
            ('+', 'b59', 'Tf', 'T'), ('+', 'b57', 'Tf', 'T'), ('+', 'b60', 'Tf', 'T'), ('+', 'b64', 'Tf', 'T'), ('-', 'b54'),
            ('-', 'b56'), ('-', 'b59'), ('+', 'w2.grad', 'hf', 'G'), ('-', 'b57'), ('+', 'w3.grad', 'hf', 'G'),
            ('=', 'b5', 'b62', 'Th', 'T'), ('-', 'b60'), ('+', 'w1.grad', 'hf', 'G'), ('=', 'b53', 'b66', 'Th', 'T'),
            ('-', 'b64'), ('+', 'b69', 'Th', 'T'), ('+', 'b70', 'Tsh', 'T'), ('+', 'b74', 'Ts4', 'T'), ('+', 'b75', 'Tsh', 'T'),
            ('-', 'b74'), ('-', 'GOUT'), ('+', 'b76', 'Th', 'T'), ('=', 'b69', 'b81', 'Th', 'T'), ('+', 'b83', 'Tsh', 'T'),
            ('+', 'b84', 'lse', 'T'), ('-', 'b36_1'), ('+', 'b85_0', 'Tsh', 'T'), ('+', 'b85_1', 'Tsh', 'T'),
            ('+', 'b85_2', 'Tsh', 'T'), ('-', 'b33'), ('-', 'b34'), ('-', 'b35'), ('-', 'b84'), ('+', 'b107', 'Tkv', 'T'),
            ('=', 'b76', 'b109', 'Th', 'T'), ('+', 'b89', 'Tkv4', 'T'), ('+', 'b94', 'conj', 'T'), ('+', 'b96', 'Tkv4', 'T'),
            ('-', 'b89'), ('+', 'b110', 'Tkv', 'T'), ('-', 'b96'), ('=', 'b66', 'b112', 'Th', 'T'), ('-', 'b85_1'),
            ('-', 'b85_2'), ('+', 'b98', 'Tq4', 'T'), ('-', 'b85_0'), ('+', 'b101', 'Tq4', 'T'), ('-', 'b94'), ('-', 'b98'),
            ('=', 'b83', 'b113', 'Tsh', 'T'), ('-', 'b101'), ('=', 'b62', 'b115', 'Th', 'T'), ('+', 'b118', 'Th', 'T'),
            ('-', 'b109'), ('-', 'b112'), ('-', 'b115'), ('+', 'b119', 'Tsh', 'T'), ('-', 'b118'), ('+', 'n2.grad', 'h', 'G'),
            ('+', 'n1.grad', 'h', 'G'), ('-', 'b43'), ('-', 'b70'), ('+', 'o.grad', 'hq', 'G'), ('-', 'b36_0'), ('-', 'b81'),
            ('+', 'v.grad', 'hkv', 'G'), ('-', 'b107'), ('+', 'k.grad', 'hkv', 'G'), ('-', 'b110'), ('+', 'q.grad', 'hq', 'G'),
            ('-', 'b113'), ('-', 'b13'), ('=', 'b46', 'b123', 'Ts4', 'T'), ('=', 'b75', 'GIN', 'Tsh', 'T'), ('-', 'b119'),
            ('-', 'b123'), ('-', 'b6'), ('-', 'IN'),
        ),
    ),
}  # fmt: skip
