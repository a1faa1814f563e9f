"""torchtitan's Llama under FSDP2 x context parallel x tensor parallel, at a small size, for FSDPMemTracker.

torchtitan at 9dec370 builds its world mesh in the order ["pp", "dp", "cp", "tp"] (parallelisms/parallel_dims.py
build_mesh), applies apply_tp to world_mesh["tp"], apply_ac, then apply_fsdp over world_mesh["dp_cp"] (parallelize_llama.py
parallelize_llama), and runs forward, loss and backward under train_context(optional_context_parallel_ctx) with loss
parallel (train.py; utils.py get_train_context enters loss_parallel() and the CP context together). So:
- context_parallel shards input_ids, labels and freqs_cis over the CP mesh first (its load balancer's head-tail order);
- the embedding (RowwiseParallel, input Replicate) sees the rank's s / cp tokens and reduce-scatters them to Shard(1) over
  TP: the residual stream is s / cp / tp tokens a rank, all-gathered over TP to s / cp before attention and the MLP;
- wq / wk / wv are ColwiseParallel with use_local_output=True (torch's default): plain tensors of the rank's heads, which
  Attention.forward views as (bs, seqlen, -1, head_dim): SDPA, replaced by torch's ring attention over the CP group, runs
  on the TP rank's local heads over its s / cp tokens.
The modules and apply_tp are tiny_torchtitan_tp's, the CP context tiny_torchtitan_cp's (the ring's op the CPU flash
kernel, torch's own _templated_ring_attention and its backward around it); everything else is torch 2.13's own code.
"""

from __future__ import annotations

import torch

from . import tiny_torchtitan
from .tiny_llama import LlamaConfig
from .tiny_torchtitan import apply_ac
from .tiny_torchtitan_cp import _train_context
from .tiny_torchtitan_pp import _forget_redistribute_plans
from .tiny_torchtitan_tp import (
    Transformer,
    _real_mesh_tables,
    _tracker_class,
    _untracked_sharding_propagation,
    apply_tp,
)


def tracked_cp_tp_peak(c: LlamaConfig, vocab: int, b: int, s: int, dp: int, cp: int, tp: int, ac: str, rotate: str = "allgather",
                       float8: bool = False) -> dict[str, float]:  # fmt: skip
    """FSDPMemTracker's peak of the second of two steps of rank 0 (dp 0, cp 0, tp 0) of a (dp, cp, tp) mesh of fake ranks:
    tiny_torchtitan.two_tracked_steps's loop, each step's forward, loss and backward under context_parallel and loss_parallel.
    `float8`: torchao's converter first and apply_tp's Float8 plans (tiny_torchtitan_tp.tracked_tp_peak)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    _forget_redistribute_plans()  # DTensor's plans cached for an earlier group's meshes (tiny_torchtitan_pp)
    dist.init_process_group("fake", rank=0, world_size=dp * cp * tp, store=FakeStore())
    try:
        return _tracked(c, vocab, b, s, dp, cp, tp, ac, rotate, float8)
    finally:  # nothing of this group's meshes is left cached for the next test
        _forget_redistribute_plans()


def _tracked(c: LlamaConfig, vocab: int, b: int, s: int, dp: int, cp: int, tp: int, ac: str, rotate: str,
             float8: bool) -> dict[str, float]:  # fmt: skip
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel

    mesh = init_device_mesh("cpu", (dp, cp, tp), mesh_dim_names=("dp", "cp", "tp"))
    shard_mesh = mesh["dp", "cp"]._flatten("dp_cp")
    with FakeTensorMode(), _real_mesh_tables(), _untracked_sharding_propagation():
        model = Transformer(c, vocab, s)
        if float8:  # torchtitan/float8.py Float8Handler.convert_to_float8_training at 9dec370
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=False),
                                       module_filter_fn=lambda mod, fqn: fqn != "output")
        apply_tp(model, mesh["tp"], True, enable_float8=float8)
        apply_ac(model, ac)
        opt = tiny_torchtitan.apply_fsdp_with_adamw(model, shard_mesh)
        tracker = _tracker_class()(mod=model, optm=opt)
        with tracker:
            for i in range(2):  # train.py: a new batch each step, sharded in place by context_parallel
                ids, labels = torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))
                opt.zero_grad()
                with _train_context(mesh["cp"], ids, labels, model.freqs_cis, rotate), loss_parallel():
                    pred = model(ids)
                    loss = tiny_torchtitan.loss_fn(pred, labels)
                    del pred
                    loss.backward()
                opt.step()
                if i == 0:
                    tracker.reset_mod_stats()
        return tiny_torchtitan.peak_parts(tracker)


def main() -> None:
    """The tracker's peaks of the cases given as JSON (a list of [shape, dp, cp, tp, ac, rotate]) printed as JSON: the test runs
    them in a process of their own, so that no DTensor state cached for these (dp, cp, tp) meshes reaches the next test module
    (its first TP step could not resolve this run's destroyed process groups)."""
    import json
    import sys

    results = []
    for shape, dp, cp, tp, ac, rotate in json.loads(sys.argv[1]):
        hidden, heads, kv_heads, ffn, layers, vocab, b, s = shape
        config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
        results.append(tracked_cp_tp_peak(config, vocab, b, s, dp, cp, tp, ac, rotate))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
