"""torchtitan's Llama with each block compiled, under torch's context_parallel, one step's memory counted on the CPU.

How torch.compile and context parallelism compose (torch 2.13.0, as torchtitan at 9dec370 runs them): torchtitan compiles
each block (apply_compile, fullgraph=True) and runs forward, loss and backward under context_parallel (train.py's
train_context), which monkey-patches F.scaled_dot_product_attention (_attention.py _distribute_function): the patched
function wraps q, k and v as DTensors sharded on the sequence (sdpa_input_fn, DTensor.from_local), calls SDPA on them and
unwraps the output (sdpa_output_fn, to_local). Dynamo traces through the patched function and DTensor.from_local /
to_local, and AOTAutograd desugars the DTensors: their SDPA op and its backward dispatch to context parallelism's handler
(_sdpa_handler, enabled by _enable_cp_dtensor_dispatcher), whose ring (_templated_ring_attention and its backward, their
functional all-gather and all-to-all) is traced into the block's joint graph as plain ATen and c10d_functional ops. Nothing
graph-breaks (fullgraph holds); Inductor compiles the ring with the rest of the block: the merges' fp32 arithmetic fused
into kernels, the SDPA steps ATen fallbacks, the collectives c10d_functional calls, and the min-cut partitioner chooses what
the forward keeps of the ring (the generated code read in tests/ground_truth/inductor_cp_programs.py).

One substitution, as in tiny_torchtitan_cp.py: torch's CP handler knows the CUDA SDPA kernels only (`custom_ops` and the
Shard(2) sharding rules of _sharding_rules.py: flash, efficient, cuDNN), so on the CPU the CPU flash kernel and its backward
(aten._scaled_dot_product_flash_attention_for_cpu, the kernel SDPA picks for CPU tensors) are given the same handler and the
same sharding rule here (enable_cpu_ring): the ring calls the CPU kernel where a GPU's calls the CUDA one. The rest is
torch's own code, the DTensor path included.

What is counted: every allocation of the second step with torch.profiler (tiny_torchtitan_compile.allocation_peak: why
the profiler and not MemTracker, its docstring), over real CPU tensors on a fake process group (its collectives allocate
their outputs and move no data). No FSDP (its buffers are eager, around the compiled block: their walk is held by
test_torch_memory_torchtitan_cp.py): bf16 parameters, as FSDP2's param_dtype makes them. Each step makes a new batch
inside the counted step, as train.py does, which context_parallel shards in place.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .tiny_llama import LlamaConfig
from .tiny_torchtitan import Transformer, loss_fn
from .tiny_torchtitan_compile import allocation_peak, built_as_train_py, fake_ranks, second_step_peak_on_fake_ranks

aten = torch.ops.aten


def enable_cpu_ring() -> None:
    """The CPU flash kernel in torch's CP handler (the module docstring): its ring and the CUDA kernels' Shard(2) rule."""
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy, register_op_strategy
    from torch.distributed.tensor.experimental._context_parallel import _attention
    from torch.distributed.tensor.placement_types import Shard

    forward_op = aten._scaled_dot_product_flash_attention_for_cpu.default
    backward_op = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    if forward_op in _attention.custom_ops:
        return

    def forward_rule(op_schema):  # type: ignore[no-untyped-def]  # (output, logsumexp, q, k, v) all Shard(2)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(), op_schema, [[Shard(2)] * 5], input_index=2)

    def backward_rule(op_schema):  # type: ignore[no-untyped-def]  # (dq, dk, dv, grad_out, q, k, v, out, logsumexp)
        return expand_to_full_mesh_op_strategy(op_schema.get_mesh_from_args(validate=False), op_schema, [[Shard(2)] * 9], input_index=3)

    register_op_strategy(forward_op)(forward_rule)
    register_op_strategy(backward_op)(backward_rule)

    def ring(mesh, query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):  # type: ignore[no-untyped-def]
        return _attention._templated_ring_attention(mesh.get_group(), 2, forward_op, query, key, value, is_causal=is_causal)

    def ring_backward(mesh, grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None):  # type: ignore[no-untyped-def]
        def op(query, key, value, out, logsumexp, is_causal, grad_out):  # type: ignore[no-untyped-def]
            return backward_op(grad_out, query, key, value, out, logsumexp, 0.0, is_causal)

        return _attention._templated_ring_attention_backward(mesh.get_group(), 2, op, grad_out, "grad_out", query, key, value, out,
                                                             logsumexp, is_causal)  # fmt: skip

    def handler(op_call, args, kwargs):  # type: ignore[no-untyped-def]  # _attention._sdpa_handler with the CPU kernels
        from torch.distributed.tensor import DTensor

        op_info = DTensor._op_dispatcher.unwrap_to_op_info(op_call, args, kwargs)
        DTensor._op_dispatcher.sharding_propagator.propagate(op_info)
        sharding = op_info.output_sharding
        assert sharding is not None and not sharding.needs_redistribute
        fn = ring if op_call == forward_op else ring_backward
        return DTensor._op_dispatcher.wrap(fn(op_info.compute_mesh, *op_info.local_args, **op_info.local_kwargs), sharding.output_spec)

    _attention.custom_ops[forward_op] = handler
    _attention.custom_ops[backward_op] = handler


def cp_step_peak(shape: tuple, ac: str, cp: int, compiled: bool = True, convert: Callable | None = None,
                 peak: Callable = allocation_peak, rotate: str = "allgather") -> int:  # fmt: skip
    """The second step's allocation peak on CP rank 0 of `cp` fake ranks (torchtitan's Transformer of `shape` = (hidden, heads,
    KV heads, ffn, layers, vocab, b, s), bf16 parameters, apply_ac's `ac`, each block compiled by Inductor where `compiled`;
    `convert(model)`: a model converter applied first, as train.py does, e.g. torchao's Float8)."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
    mesh = fake_ranks(cp, "cp")
    enable_cpu_ring()
    torch.manual_seed(0)
    torch._dynamo.reset()
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    model = built_as_train_py(Transformer(config, vocab, s), ac, "inductor" if compiled else None, convert)
    set_rotate_method(rotate)

    def step() -> None:  # train.py: a new batch, sharded in place by context_parallel (utils.py create_context_parallel_ctx)
        ids, labels = torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))
        with context_parallel(mesh, buffers=[ids, labels, model.freqs_cis], buffer_seq_dims=[1, 1, 0], no_restore_buffers={ids, labels}):
            pred = model(ids)
            loss = loss_fn(pred, labels)
            del pred
            loss.backward()
        model.zero_grad(set_to_none=True)

    return second_step_peak_on_fake_ranks(step, peak)

