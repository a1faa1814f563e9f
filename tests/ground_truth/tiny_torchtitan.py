"""torchtitan's Llama Transformer at a small size, wrapped as torchtitan wraps it, for FSDPMemTracker.

The model is pytorch/torchtitan torchtitan/models/llama/model.py at 9dec370 (the commit of torchtitan's Dec 2024
benchmarks): tok_embeddings, the freqs_cis buffer (complex64, max_seq_len x head_dim / 2), TransformerBlocks
(eager_ops.TitanBlock: norms.py's RMSNorm, complex RoPE, repeat_kv, SDPA, w2(silu(w1(x)) * w3(x))), the final norm
and an untied output projection. Checkpointing is torchtitan's parallelize_llama.py _apply_ac_to_transformer_block
at 9dec370 (lines 213-284): checkpoint_wrapper(block, preserve_rng_state=False) for 'full', with
create_selective_checkpoint_contexts and its `_custom_policy` for selective 'op' (save the outputs of the ops of
`_save_list`, except every second aten.mm), every k-th block for selective 'k'. On the CPU
F.scaled_dot_product_attention runs aten._scaled_dot_product_flash_attention_for_cpu, the counterpart of the CUDA
flash kernel in torchtitan's list: it is added to the list here, and nothing else is. The loss is train.py's
loss_fn (cross_entropy of pred.flatten(0, 1).float()), and train.py deletes pred before backward.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

from .eager_ops import RMSNorm, TitanBlock
from .tiny_llama import LlamaConfig, rope

# torchtitan/parallelisms/parallelize_llama.py at 9dec370, lines 214-223, plus the CPU flash kernel (docstring)
SAVE_LIST = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.abs.default,
    torch.ops.aten.max.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


class Transformer(nn.Module):
    """torchtitan's Transformer (model.py at 9dec370) of `c.layers` blocks, vocabulary `vocab`, max_seq_len `seq`."""

    block = TitanBlock  # a subclass names its own (tiny_torchtitan_tp: the module names apply_tp's plan reads)

    def __init__(self, c: LlamaConfig, vocab: int, seq: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, c.hidden)
        self.register_buffer("freqs_cis", rope(seq, c.head_dim), persistent=True)
        self.layers = nn.ModuleDict({str(i): self.block(c) for i in range(c.layers)})
        self.norm = RMSNorm(c.hidden)
        self.output = nn.Linear(c.hidden, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h))


def _op_policy(meta: dict):
    from torch.utils.checkpoint import CheckpointPolicy

    def _custom_policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        mm_count_key = f"{mode}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[mm_count_key] += 1
        # Saves output of all compute ops, except every second mm
        to_save = func in SAVE_LIST and not (func == torch.ops.aten.mm.default and meta[mm_count_key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return _custom_policy


def apply_ac(model: Transformer, mode: str) -> None:
    """torchtitan's apply_ac: mode 'none', 'full', 'op' (selective op) or a number k (selective: every k-th block)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    def context_fn():
        return create_selective_checkpoint_contexts(_op_policy(defaultdict(int)))

    for count, (layer_id, block) in enumerate(list(model.layers.items()), start=1):
        if mode == "full" or (mode.isdigit() and count % int(mode) == 0):
            model.layers[layer_id] = checkpoint_wrapper(block, preserve_rng_state=False)
        elif mode == "op":
            model.layers[layer_id] = checkpoint_wrapper(block, context_fn=context_fn, preserve_rng_state=False)


def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """train.py's loss_fn at 9dec370."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def tracked_torchtitan_peak(c: LlamaConfig, vocab: int, b: int, s: int, world: int, ac: str, mesh) -> dict[str, float]:
    """FSDPMemTracker's peak of the second of two steps of torchtitan's loop (train.py at 9dec370: zero_grad, forward,
    loss, del pred, backward, optimizer step) under apply_fsdp (each block, reshard_after_forward but for the last,
    then the root; param_dtype bf16, reduce_dtype fp32), for-loop AdamW (see test_torch_memory_fsdp.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    with FakeTensorMode():
        model = Transformer(c, vocab, s)
        apply_ac(model, ac)
        opt = apply_fsdp_with_adamw(model, mesh)
        ids = torch.randint(0, vocab, (b, s))
        return two_tracked_steps(FSDPMemTracker(mod=model, optm=opt), model, opt, ids)


def apply_fsdp_with_adamw(model, mesh):  # type: ignore[no-untyped-def]
    """apply_fsdp (parallelize_llama.py at 9dec370) on `mesh`: each block, resharded after its forward but the last, then the
    root; param_dtype bf16, reduce_dtype fp32; and the loop's optimizer over the shards, AdamW (foreach=False: for-loop)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer_id, block in model.layers.items():
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=int(layer_id) < len(model.layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)


def peak_parts(tracker) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The tracker's peak snapshot of its one device: bytes by reference type (its enum's name)."""
    (_device, parts), = tracker.get_tracker_snapshot("peak").items()
    return {str(k).split(".")[-1]: float(v) for k, v in parts.items()}


def update_own_peak(tracker, peak_state) -> None:  # type: ignore[no-untyped-def]
    """MemTracker._update_peak_stats (torch v2.13.0 torch/distributed/_tools/mem_tracker.py) without its loop over every
    module's peak: the tracker's own peak, kept as it keeps it. The ground truths read get_tracker_snapshot("peak") only,
    and that loop (a WeakIdKeyDictionary walked at each allocation) was ~40 % of a ZB-V rank's run (middle-of-3-full: 96 s
    of 250 s under cProfile); the peaks read are the same to the byte."""
    from copy import deepcopy

    from torch.distributed._tools.mem_tracker import _TOTAL_KEY

    for dev, dev_snap in tracker._curr_mem_snap.items():
        if tracker._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
            tracker._peak_mem[dev] = dev_snap[_TOTAL_KEY]
            tracker._peak_mem_snap[dev] = deepcopy(dev_snap)


def two_tracked_steps(tracker, model, opt, ids, context=contextlib.nullcontext) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """train.py's step twice under the tracker (the second's peak: the optimizer states exist), each loss under `context`
    (loss parallel's); the peak's bytes by reference type; the tracker keeps only its own peak (update_own_peak)."""
    import types

    tracker._update_peak_stats = types.MethodType(update_own_peak, tracker)
    tracker.track_inputs((ids,))
    with tracker:
        for i in range(2):
            opt.zero_grad()
            with context():
                pred = model(ids)
                loss = loss_fn(pred, ids)
                del pred
                loss.backward()
            opt.step()
            if i == 0:
                tracker.reset_mod_stats()
    return peak_parts(tracker)
