"""torchtitan's Llama under FSDP2 + context parallelism, at a small size, for FSDPMemTracker.

torchtitan at 9dec370 applies CP in its training loop (train.py: `train_context(optional_context_parallel_ctx)` around
forward, loss and backward; utils.py create_context_parallel_ctx: set_rotate_method(job_config.experimental.
context_parallel_rotate_method, 'allgather' by default), then torch's context_parallel(cp_mesh, buffers=[input_ids, labels,
model.freqs_cis], buffer_seq_dims=[1, 1, 0], no_restore_buffers={input_ids, labels})), and shards the parameters with
fully_shard over the flattened dp x cp mesh (parallelize_llama.py apply_fsdp on world_mesh['dp_cp']). The model is
tiny_torchtitan's (model.py, norms.py and train.py's loss at 9dec370).

What runs is torch 2.13's own code: context_parallel shards the buffers (its load balancer's head-tail order for causal
masks; the buffers' clones kept for restoring), and the attention is torch's `_templated_ring_attention` and
`_templated_ring_attention_backward` (torch/distributed/tensor/experimental/_context_parallel/_attention.py) over the
CP group. One thing differs from a GPU: torch's CP handler dispatches the CUDA SDPA kernels only (flash, efficient,
cuDNN: `custom_ops`), so on the CPU the ring's `op` is the CPU flash kernel (aten._scaled_dot_product_flash_attention_for_cpu
and its backward), called from an autograd.Function that saves what the flash kernel's autograd node saves (q, k, v,
the merged output and logsumexp). The rest of torch's handler (DTensor.from_local and to_local around the op) makes views.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .tiny_llama import LlamaConfig
from .tiny_torchtitan import Transformer, apply_ac, apply_fsdp_with_adamw, loss_fn, peak_parts

aten = torch.ops.aten


def _ring_attention(group):  # type: ignore[no-untyped-def]
    """F.scaled_dot_product_attention as torch's CP handler runs it on `group`, with the CPU flash kernel as the ring's op."""
    from torch.distributed.tensor.experimental._context_parallel._attention import (
        _templated_ring_attention,
        _templated_ring_attention_backward,
    )

    def forward_op(q, k, v, is_causal=False, **kwargs):  # type: ignore[no-untyped-def]
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=is_causal)

    def backward_op(grad_out, query, key, value, out, logsumexp, is_causal=False, **kwargs):  # type: ignore[no-untyped-def]
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp, 0.0, is_causal)

    class Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):  # type: ignore[no-untyped-def]
            out, lse = _templated_ring_attention(group, 2, forward_op, q, k, v, is_causal=True)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, grad_out):  # type: ignore[no-untyped-def]
            q, k, v, out, lse = ctx.saved_tensors
            return tuple(_templated_ring_attention_backward(group, 2, backward_op, grad_out, "grad_out", q, k, v, out, lse, True))[:3]

    def sdpa(q, k, v, is_causal=False, **kwargs):  # type: ignore[no-untyped-def]
        return Ring.apply(q, k, v)

    return sdpa


@contextmanager
def _train_context(cp_mesh, ids: torch.Tensor, labels: torch.Tensor, freqs: torch.Tensor, rotate: str) -> Iterator[None]:
    """torchtitan's CP context: torch's context_parallel over the buffers, the SDPA call replaced by the ring (docstring)."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    set_rotate_method(rotate)
    with context_parallel(cp_mesh, buffers=[ids, labels, freqs], buffer_seq_dims=[1, 1, 0], no_restore_buffers={ids, labels}):
        patched, F.scaled_dot_product_attention = F.scaled_dot_product_attention, _ring_attention(cp_mesh.get_group())
        try:
            yield
        finally:
            F.scaled_dot_product_attention = patched


def tracked_cp_peak(c: LlamaConfig, vocab: int, b: int, s: int, dp: int, cp: int, ac: str, rank: int, rotate: str = "allgather") -> dict[str, float]:
    """FSDPMemTracker's peak of the second of two steps of rank `rank` of a (dp, cp) mesh of fake ranks: the loop of
    tiny_torchtitan.tracked_torchtitan_peak, each step's forward, loss and backward under _train_context."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=dp * cp, store=FakeStore())
    mesh = init_device_mesh("cpu", (dp, cp), mesh_dim_names=("dp", "cp"))
    shard_mesh = mesh._flatten("dp_cp")
    with FakeTensorMode():
        model = Transformer(c, vocab, s)
        apply_ac(model, ac)
        opt = apply_fsdp_with_adamw(model, shard_mesh)
        tracker = FSDPMemTracker(mod=model, optm=opt)
        with tracker:
            for i in range(2):  # train.py: a new batch each step, sharded in place by context_parallel
                ids, labels = torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))
                opt.zero_grad()
                with _train_context(mesh["cp"], ids, labels, model.freqs_cis, rotate):
                    pred = model(ids)
                    loss = loss_fn(pred, labels)
                    del pred
                    loss.backward()
                opt.step()
                if i == 0:
                    tracker.reset_mod_stats()
        return peak_parts(tracker)
