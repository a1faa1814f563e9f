"""torchtitan's Llama under 2-D parallelism (FSDP2 + tensor parallel), at a small size, for FSDPMemTracker.

The modules are pytorch/torchtitan torchtitan/models/llama/model.py at 9dec370 with its own module tree (Attention and
FeedForward as submodules, `view(bs, seqlen, -1, head_dim)` so each rank's heads are its local ones), as apply_tp's plan
names them; the norm and loss are tiny_torchtitan's (eager_ops.RMSNorm, tiny_llama.rope, train.py's loss_fn), RoPE
model.py's own. Parallelised as torchtitan/parallelisms/parallelize_llama.py at 9dec370 does it: apply_tp (lines
113-199: the embedding RowwiseParallel(input Replicate, output Shard(1)), the final norm SequenceParallel, the output
ColwiseParallel(input Shard(1), output Shard(-1), use_local_output=False) under loss parallel; each block's norms
SequenceParallel, PrepareModuleInput(Shard(1) -> Replicate) on attention and feed_forward, wq / wk / wv / w1 / w3
ColwiseParallel, wo / w2 RowwiseParallel(output Shard(1))), then apply_ac, then apply_fsdp on the data-parallel mesh
dimension (each block, reshard_after_forward but for the last, then the root; bf16 params, fp32 reduce). The step runs
under loss_parallel() as train.py's train_context does (utils.py get_train_context: the loss and its backward)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import tiny_torchtitan
from .eager_ops import RMSNorm
from .tiny_llama import LlamaConfig, repeat_kv
from .tiny_torchtitan import apply_ac


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """model.py's apply_rotary_emb and reshape_for_broadcast at 9dec370, as written (xq_out and xk_out named, cast at the return)."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    seqlen = xq_.shape[1]
    freqs_cis = freqs_cis[0:seqlen]
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.n_rep, self.head_dim = c.heads // c.kv_heads, c.head_dim
        self.wq = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys, values = repeat_kv(xk, self.n_rep), repeat_kv(xv, self.n_rep)
        output = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), is_causal=True)
        return self.wo(output.transpose(1, 2).contiguous().view(bs, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(c.hidden, c.ffn, bias=False)
        self.w2 = nn.Linear(c.ffn, c.hidden, bias=False)
        self.w3 = nn.Linear(c.hidden, c.ffn, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.attention, self.feed_forward = Attention(c), FeedForward(c)
        self.attention_norm, self.ffn_norm = RMSNorm(c.hidden), RMSNorm(c.hidden)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(tiny_torchtitan.Transformer):
    block = TransformerBlock


def apply_tp(model: Transformer, tp_mesh, loss_parallel: bool = True, enable_float8: bool = False) -> None:
    """parallelize_llama.py apply_tp at 9dec370 (no AsyncTP). `enable_float8` (job_config.float8.enable_float8_linear, the
    blocks' linears already Float8Linear): the blocks' plans use torchao's Float8ColwiseParallel, Float8RowwiseParallel and
    PrepareFloat8ModuleInput (torchao/float8/float8_tensor_parallel.py), as apply_tp's `if enable_float8:` branch picks them;
    the embedding, final norm and output projection keep the plain styles."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                  use_local_output=not loss_parallel),
    })
    rowwise, colwise, prepare_input = RowwiseParallel, ColwiseParallel, PrepareModuleInput
    if enable_float8:
        from torchao.float8.float8_tensor_parallel import (
            Float8ColwiseParallel,
            Float8RowwiseParallel,
            PrepareFloat8ModuleInput,
        )

        rowwise, colwise, prepare_input = Float8RowwiseParallel, Float8ColwiseParallel, PrepareFloat8ModuleInput
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, {
            "attention_norm": SequenceParallel(),
            "attention": prepare_input(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
            "attention.wq": colwise(), "attention.wk": colwise(), "attention.wv": colwise(),
            "attention.wo": rowwise(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": prepare_input(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": colwise(), "feed_forward.w2": rowwise(output_layouts=Shard(1)),
            "feed_forward.w3": colwise(),
        })


@contextmanager
def _real_mesh_tables() -> Iterator[None]:
    """fully_shard over a TP-sharded parameter joins the dp and tp meshes (DeviceMesh._concatenate, torch 2.13
    device_mesh.py:1430), whose rank tables (small int tensors, host-side bookkeeping, no device memory) FakeTensorMode
    cannot compute (aten.nonzero): built outside the fake mode."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    original = DeviceMesh._concatenate

    def concatenate(meshes):  # type: ignore[no-untyped-def]
        with unset_fake_temporarily():
            return original(meshes)

    DeviceMesh._concatenate = staticmethod(concatenate)
    try:
        yield
    finally:
        DeviceMesh._concatenate = staticmethod(original)


_PROPAGATING = [0]


@contextmanager
def _untracked_sharding_propagation() -> Iterator[None]:
    """DTensor's sharding propagation runs each op on fake tensors of the global shapes to learn the output's metadata
    (torch 2.13 distributed/tensor/_sharding_prop.py:546 `fake_mode = detect_fake_mode() or FakeTensorMode()`): on a GPU
    in a FakeTensorMode of its own, no device memory; under the tracker's FakeTensorMode it reuses that mode, and the
    tracker would count those global-size tensors (the loss-parallel log_softmax's and nll_loss's full-vocabulary logits,
    the optimizer's unsharded states). They are not tracked here."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def propagate(self, op_schema):  # type: ignore[no-untyped-def]
        _PROPAGATING[0] += 1
        try:
            return original(self, op_schema)
        finally:
            _PROPAGATING[0] -= 1

    ShardingPropagator._propagate_tensor_meta_non_cached = propagate
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original


def track_every_storage(tracker, reftype, t) -> None:  # type: ignore[no-untyped-def]
    """MemTracker._track for a tensor the tracker sees, outside DTensor's sharding propagation (_untracked_sharding_propagation),
    with every storage of a tensor subclass tracked: MemTracker._track (torch 2.13 distributed/_tools/mem_tracker.py:525-547)
    returns at the first of a tensor's storages it already knows, so of torchao's Float8TrainingTensor (its FP8 `_data` and
    its `_scale`) made by an op that keeps the input's scale (the FP8 all-gather's torch.cat: float8_ops.py) the new data
    went untracked whenever the set of storages listed the scale first (a set ordered by id: peaks differing by one FP8
    sequence from run to run). Plain tensors have one storage: nothing changes for them."""
    from torch.distributed._tools.common_utils import get_untyped_storages
    from torch.distributed._tools.mem_tracker import MemTracker, _UpdateType, _WeakRefInfo
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if _PROPAGATING[0]:
        return
    if not is_traceable_wrapper_subclass(t):
        MemTracker._track(tracker, reftype, t)
        return
    for st in get_untyped_storages(t):  # mem_tracker.py's loop, with `continue` for a known storage
        winfo, _ = tracker._WINFO.get(st, (None, None))
        if winfo is not None:
            if winfo.size != st.size():
                old = winfo.mem_consumed
                winfo.update_mem_consumed(st)
                tracker._update_snap(_UpdateType.SIZE, winfo, old_mem_consumed=old)
            continue
        winfo, w_st = _WeakRefInfo.create_winfo(st, t.device, reftype, tracker._delete_callback)
        tracker._WINFO[st] = (winfo, w_st)
        if winfo.mem_consumed > 0:
            tracker._update_snap(_UpdateType.ADD, winfo)


def _tracker_class():  # type: ignore[no-untyped-def]
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    class Tracker(FSDPMemTracker):
        """FSDPMemTracker tracking as track_every_storage does."""

        def _track(self, reftype, t):  # type: ignore[no-untyped-def]
            track_every_storage(self, reftype, t)

    return Tracker


def tracked_tp_peak(c: LlamaConfig, vocab: int, b: int, s: int, dp: int, tp: int, ac: str, loss_parallel: bool = True,
                    float8: bool = False, tracker=None, fp8_all_gather: bool = False) -> dict[str, float]:  # type: ignore[no-untyped-def]  # fmt: skip
    """FSDPMemTracker's peak of the second of two steps on a (dp, tp) mesh of fake ranks (tiny_torchtitan.tracked_torchtitan_peak's
    loop: zero_grad, forward, loss, del pred, backward, for-loop AdamW step), the loss and backward under loss_parallel().
    `float8`: torchtitan's float8 converter first (train.py at 9dec370 converts before parallelize_llama: torchao's
    convert_to_float8_training, every linear but the output projection, tensorwise dynamic scaling, no FP8 all-gather in FSDP),
    then apply_tp's Float8 plans (apply_tp's enable_float8). `tracker`: a tracker class in place of FSDPMemTracker's
    (its `_track` filtered as _tracker_class's). `fp8_all_gather`: the converter's enable_fsdp_float8_all_gather (torchtitan's
    --float8.enable_fsdp_float8_all_gather): each weight a WeightWithDynamicFloat8CastTensor, which apply_tp distributes and
    fully_shard shards further, all-gathered over dp in FP8 (torchao fsdp_utils.py fsdp_pre_all_gather)."""
    import contextlib

    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel as loss_parallel_ctx
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != dp * tp:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=dp * tp, store=FakeStore())
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    with FakeTensorMode(), _real_mesh_tables(), _untracked_sharding_propagation():
        model = Transformer(c, vocab, s)
        if float8:  # torchtitan/float8.py Float8Handler.convert_to_float8_training at 9dec370
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            convert_to_float8_training(model, config=Float8LinearConfig(enable_fsdp_float8_all_gather=fp8_all_gather),
                                       module_filter_fn=lambda mod, fqn: fqn != "output")
        apply_tp(model, mesh["tp"], loss_parallel, enable_float8=float8)
        apply_ac(model, ac)
        opt = tiny_torchtitan.apply_fsdp_with_adamw(model, mesh["dp"])
        ids = torch.randint(0, vocab, (b, s))
        return tiny_torchtitan.two_tracked_steps((tracker or _tracker_class())(mod=model, optm=opt), model, opt, ids,
                                                 loss_parallel_ctx if loss_parallel else contextlib.nullcontext)
