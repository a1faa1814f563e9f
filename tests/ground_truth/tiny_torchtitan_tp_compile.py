"""torchtitan's Llama under tensor parallelism with each block compiled, one step's memory counted on the CPU.

How torch.compile and tensor parallelism compose (torch 2.13.0, as torchtitan at 9dec370 runs them:
parallelize_llama.py apply_tp, then apply_ac, then apply_compile, then apply_fsdp): apply_tp has swapped each block's
parameters for DTensors and registered the plan's input / output hooks (SequenceParallel, PrepareModuleInput,
ColwiseParallel, RowwiseParallel); torch.compile(block, fullgraph=True) traces the block with those hooks inside it.
Dynamo traces DTensor's redistribute (Shard(1) -> Replicate before attention and the MLP, Partial -> Shard(1) after wo
and w2), and AOTAutograd desugars the DTensors into their local tensors and the redistributions into functional
collectives (_c10d_functional.all_gather_into_tensor / reduce_scatter_tensor and wait_tensor) in the block's joint graph,
so the forward's collectives and their backward's (the reduce-scatter's backward an all-gather and the reverse) are
compiled with the block; Inductor emits them as fallback calls, each a new output buffer, and plans the rest of the
block's buffers around them. The min-cut partitioner chooses what the forward keeps (the all-gathered norm outputs are
collective outputs: whether they are saved or re-gathered in the backward is its choice, read in the generated code).

What is counted: every allocation of the second step with torch.profiler (allocation_peak_without_cpu_scratch: less the CPU
kernels' scratch), over
real CPU tensors on a fake process group (its collectives allocate their outputs and move no data). No FSDP (its buffers
are eager, around the compiled block: their walk under TP is held by test_torch_memory_torchtitan_tp.py): bf16
parameters, as FSDP2's param_dtype makes them. The step runs under loss_parallel() as train.py's train_context does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .tiny_llama import LlamaConfig
from .tiny_torchtitan import loss_fn
from .tiny_torchtitan_compile import built_as_train_py, fake_ranks, second_step_peak_on_fake_ranks
from .tiny_torchtitan_tp import Transformer, apply_tp


class WaitedTransformer(Transformer):
    """tiny_torchtitan_tp's Transformer with the embedding's output made a plain tensor (a clone) before the compiled blocks.

    One substitution: RowwiseParallel's output (use_local_output) is an AsyncCollectiveTensor (the reduce-scatter's
    functional-collective wrapper, torch/distributed/_functional_collectives.py); fed to a compiled block on torch 2.13 on the
    CPU, the block's input gradient reaches the redistribution's backward as a plain tensor and fails there
    (AttributeError: 'Tensor' object has no attribute '_local_tensor', in _redistribute.py NestedRedistribute), which a
    clone's plain tensor avoids. The clone costs T / tp x hidden bf16 for as long as the reduce-scatter's output would have
    lived beside it (the forward's embedding, not a peak); its backward passes the gradient through."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens).clone()
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def save_device_mesh_as_opaque() -> None:
    """Another substitution, for full checkpointing: torch 2.13's min-cut partitioner saves apply_tp's DeviceMesh (an opaque
    object, a graph input through the plan's hooks, which the recomputation inside the compiled backward needs) for the
    backward, and the forward returns it between the saved tensors and the checkpointed SDPA's CPU RNG state (a uint8
    tensor), where AOTAutograd's runtime expects tensors first and opaque objects after them, so it refuses the step
    (runtime_wrappers.py _AutogradSavedState.save_from_forward: "expected all tensors_saved_with_vc_check to be Tensors").
    Here, where the saved outputs hold a non-tensor, the tensors before it are saved with save_for_backward and the mesh and
    what follows it are handed to the backward on ctx.opaque_objects, which the generated backward takes right after the
    saved tensors: the forward's order, every saved tensor kept alive as before. A mesh holds no memory; no tensor moves."""
    import torch._functorch.aot_autograd  # (runtime_wrappers imports it back: load it whole first)
    from torch._functorch._aot_autograd import runtime_wrappers

    state = runtime_wrappers._AutogradSavedState
    original = state.save_from_forward
    if getattr(original, "hands_on_the_mesh", False):
        return

    def save_from_forward(self, ctx, fw_outs):  # type: ignore[no-untyped-def]
        m = self.metadata
        saved = list(fw_outs[m.num_forward:])
        first_object = next((i for i, o in enumerate(saved) if not isinstance(o, torch.Tensor)), None)
        if first_object is None or m.num_symints_saved_for_bw or m.num_tensors_saved_with_no_vc_check:
            return original(self, ctx, fw_outs)
        # the tensors before the mesh saved as save_for_backward saves them; the mesh and what follows it (the CPU RNG state of
        # the checkpointed SDPA) handed to the backward after them, in the forward's order, as the generated backward takes them
        ctx.save_for_backward(*(t.detach() if t._is_view() else t for t in saved[:first_object]))
        ctx._tensors_no_vc_check = []
        ctx.symints = []
        ctx.opaque_objects = saved[first_object:]
        return None

    save_from_forward.hands_on_the_mesh = True  # type: ignore[attr-defined]
    state.save_from_forward = save_from_forward


# the CPU kernels whose own scratch is not counted: each op's memory events count as one, at its start (what it leaves allocated)
CPU_SCRATCH_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                   "aten::_scaled_mm")


def allocation_peak_without_cpu_scratch(step) -> int:  # type: ignore[no-untyped-def]
    """tiny_torchtitan_compile.allocation_peak, less the CPU kernels' own scratch, which a GPU's kernels do not take as the CPU's
    do: the CPU flash attention's forward and backward (pytorch/pytorch v2.13.0 aten/src/ATen/native/cpu/FlashAttentionKernel.cpp:
    per-thread fp32 buffers of qSplitSize x kvSplitSize, which grow with the sequence; the walk, as the compiled block's without
    TP, keeps the GPU kernels' outputs and logsumexp) and torch._scaled_mm (torchao_float8_compile.
    allocation_peak_without_cpu_scaled_mm_scratch: its fp32 dequantization) count as what each leaves allocated, at its start;
    and an allocation that the very next memory event frees, of a size no tensor of these steps has (no multiple of 512 B:
    e.g. 476,928 B at the output projection of the logged shape at tp 4; which CPU kernel allocates it was not identified)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = list(prof.profiler.kineto_results.events())
    inside = sorted((e.start_ns(), e.start_ns() + e.duration_ns()) for e in events if e.name() in CPU_SCRATCH_OPS)
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    kept = [(t, size) for t, size in memory if not any(start <= t <= end for start, end in inside)]
    kept += [(start, sum(size for t, size in memory if start <= t <= end)) for start, end in inside]
    sizes = [size for _, size in sorted(kept)]
    scratch = {i + k for i in range(len(sizes) - 1) if sizes[i] > 0 and sizes[i + 1] == -sizes[i] and sizes[i] % 512 for k in (0, 1)}
    now = peak = 0
    for i, size in enumerate(sizes):
        if i not in scratch:
            now += size
            peak = max(peak, now)
    return peak


def tp_step_peak(shape: tuple, ac: str, tp: int, compiled: bool = True, float8: bool = False,
                 peak: Callable = allocation_peak_without_cpu_scratch) -> int:  # fmt: skip
    """The second step's allocation peak on TP rank 0 of `tp` fake ranks (torchtitan's Transformer of `shape` = (hidden,
    heads, KV heads, ffn, layers, vocab, b, s), bf16 parameters, apply_tp with sequence and loss parallel, apply_ac's `ac`,
    each block compiled by Inductor where `compiled`; `float8`: torchtitan's float8 converter first and apply_tp's Float8
    styles, as tiny_torchtitan_tp.tracked_tp_peak)."""
    from torch.distributed.tensor.parallel import loss_parallel

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    mesh = fake_ranks(tp, "tp")
    save_device_mesh_as_opaque()
    torch.manual_seed(0)
    torch._dynamo.reset()

    def convert(model) -> None:  # type: ignore[no-untyped-def]  # torchtitan/float8.py Float8Handler.convert_to_float8_training at 9dec370
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=False),
                                   module_filter_fn=lambda mod, fqn: fqn != "output")

    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    model = built_as_train_py(WaitedTransformer(config, vocab, s), ac, "inductor" if compiled else None, convert if float8 else None,
                              lambda model: apply_tp(model, mesh, loss_parallel=True, enable_float8=float8))  # fmt: skip
    ids = torch.randint(0, vocab, (b, s))

    def step() -> None:
        with loss_parallel():
            pred = model(ids)
            loss = loss_fn(pred, ids)
            del pred
            loss.backward()
        model.zero_grad(set_to_none=True)

    return second_step_peak_on_fake_ranks(step, peak)


if __name__ == "__main__":
    import sys

    shape = tuple(int(v) for v in sys.argv[1].split(","))
    print(tp_step_peak(shape, sys.argv[2], int(sys.argv[3]), compiled=sys.argv[4:5] != ["eager"]))
