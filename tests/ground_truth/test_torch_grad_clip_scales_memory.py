"""Ground truth for what parcalc's FSDP2 walk leaves out of the optimizer phase (parcalc.core.memory_fsdp; issue #30's
candidates, tests/published_memory_runs.py's session-18 comments): torchtitan's gradient clipping and torchao's precomputed
Float8 scales allocate scalars only, not a copy of the sharded gradients or weights.

Both run after backward over the sharded DTensors of fully_shard, here with real tensors on the CPU and a fake process group
of 4 ranks (its collectives do nothing), every allocation of each call counted with torch.profiler (tiny_torchtitan_compile.
allocation_peak):
- torchtitan e7c0cae torchtitan/distributed/utils.py:278-342 clip_grad_norm_ (train.py:428-433 calls it with max_norm 1.0,
  foreach=True): torch.nn.utils.get_total_norm over the gradients (torch._foreach_norm: one Partial norm a gradient, stacked),
  full_tensor() (an all-reduce of one scalar), clip_grads_with_norm_ (torch._foreach_mul_ in place);
- torchao 0afa4c1 torchao/float8/fsdp_utils.py:58-75 precompute_float8_dynamic_scale_for_fsdp, the ops it runs on the
  Float8Linears' sharded weights (torchtitan's post-optimizer hook with --float8.precompute_float8_dynamic_scale_for_fsdp):
  torch._foreach_norm(weights, ord=inf), torch.stack, torch.clamp (an all-reduce of the amaxes), float64 scales, to_local.
  The weights here are plain DTensors (torchao is not a dependency): its WeightWithDynamicFloat8CastTensor unwraps to the same
  local ops.
On a GPU _foreach_norm's fused kernel writes one fp32 value per tensor chunk (aten/src/ATen/native/cuda/ForeachReduceOp.cu);
the CPU's slow path runs a norm per tensor: either way no tensor of a shard's size. Measured 2026-11-29 (torch 2.13.0): 80 B
for the clipping and 136 B for the scales, against 4 MiB shards (the numbers in the tests)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from .fake_process_group import fake_mesh, no_process_group_after  # noqa: E402, F401  (after the skip; the fixture is autouse)

WORLD = 4
# (out, in) of each linear: 4096 x 1024 fp32 is a 4 MiB shard on each of 4 ranks, the largest
LINEARS = ((1024, 512), (4096, 1024), (1024, 4096), (512, 1024))


def _sharded_model():  # type: ignore[no-untyped-def]
    """Linears under fully_shard (each, then the root) with sharded fp32 gradients after one backward."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    mesh = fake_mesh(WORLD)
    model = torch.nn.Sequential(*(torch.nn.Linear(i, o, bias=False) for o, i in LINEARS))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model(torch.randn(8, LINEARS[0][1])).sum().backward()
    return model


def _largest_shard_bytes(model) -> int:  # type: ignore[no-untyped-def]
    return max(p.to_local().numel() * p.element_size() for p in model.parameters())


def torchtitan_clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, foreach: bool | None = True):  # type: ignore[no-untyped-def]
    """torchtitan e7c0cae torchtitan/distributed/utils.py:278-342 without pipeline parallelism (pp_mesh None)."""
    from torch.distributed.tensor import DTensor

    parameters = list(parameters)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type, False, foreach)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def precompute_scales(weights: list) -> object:
    """The ops of torchao 0afa4c1 precompute_float8_dynamic_scale_for_fsdp (fsdp_utils.py:58-75), e4m3 tensorwise."""
    max_weights = torch._foreach_norm(weights, ord=math.inf)
    amax_tensor = torch.clamp(torch.stack(max_weights), 1e-12)  # torchao/float8/float8_utils.py EPS
    scale_tensor = torch.finfo(torch.float8_e4m3fn).max / amax_tensor.to(torch.float64)
    return scale_tensor.to_local().to(torch.float32)


def test_gradient_clipping_allocates_scalars_only() -> None:
    from .tiny_torchtitan_compile import allocation_peak

    model = _sharded_model()
    shard = _largest_shard_bytes(model)
    assert shard == 4096 * 1024 // WORLD * 4  # fully_shard's dim-0 chunks: the sharded fp32 gradient is as large
    with torch.no_grad():
        peak = allocation_peak(lambda: torchtitan_clip_grad_norm_(model.parameters(), 1.0))
    # measured 2026-11-29: 80 B (the norms of the four gradients and their stack; the same with foreach=False), against a
    # 4 MiB shard
    assert 0 < peak <= 4096, peak
    assert peak < shard / 1000
    # the count sees the local shards' allocations: abs() of every gradient, kept, is their 9 MiB (0.5 + 4 + 4 + 0.5)
    with torch.no_grad():
        assert allocation_peak(lambda: [p.grad.abs() for p in model.parameters()]) == (2 * 512 * 1024 + 2 * 4096 * 1024) // WORLD * 4


def test_precomputed_float8_scales_allocate_scalars_only() -> None:
    from .tiny_torchtitan_compile import allocation_peak

    model = _sharded_model()
    weights = list(model.parameters())
    with torch.no_grad():
        peak = allocation_peak(lambda: precompute_scales(weights))
    assert 0 < peak <= 4096, peak  # measured 2026-11-29: 136 B (a few fp32 and float64 values per weight)
    assert peak < _largest_shard_bytes(model) / 1000
