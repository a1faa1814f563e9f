"""Ground truth for parcalc.core.timing.torch_ring_attention: torch's own ring attention (v2.13.0
torch/distributed/tensor/experimental/_context_parallel/_attention.py: _templated_ring_attention and its backward, the code
torchtitan's context_parallel runs) on one rank of a fake process group under FakeTensorMode, every ATen op it dispatches
recorded by a TorchDispatchMode:

- the SDPA steps: their query and key lengths (the load-balanced split: step 0 the whole shard, causal; later steps half
  of the queries or half of the keys, the same score pairs each);
- the collectives: all_gather_into_tensor (allgather rotate) and all_to_all_single (alltoall's permute, and the fp32 dK/dV
  of every backward step), calls and bytes, against ring_kv_bytes;
- the element-wise ops' HBM bytes (every op that is not a view, a collective or SDPA: its tensor inputs read, its outputs
  written; zero_ writes only, log_sigmoid_forward's CPU-only buffer left out, as on a GPU it is empty), against
  ring_merge_bytes (eager) per element of the rank's queries.

As in tests/ground_truth/tiny_torchtitan_cp.py, the ring's `op` is the CPU flash kernel (torch's handler dispatches the CUDA
ones only); key and value enter as the transposed (b, s, heads, d) tensors torchtitan's Attention passes (repeat_kv's
output, .transpose(1, 2)), so the ring's .contiguous() copies happen as on a GPU."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from parcalc.core.timing.torch_ring_attention import ring_merge_bytes  # noqa: E402

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (the fixture is autouse)

aten = torch.ops.aten
B, HEADS, HEAD_DIM, LOCAL = 2, 4, 16, 64  # the rank's shard: b x heads x LOCAL tokens x d
VIEWS = {"view", "_unsafe_view", "reshape", "split", "chunk", "unsqueeze", "squeeze", "transpose", "slice", "t", "expand",
         "alias", "detach", "as_strided", "select", "permute", "_reshape_alias", "empty_like", "empty", "empty_strided"}  # fmt: skip
COLLECTIVES = {"all_gather_into_tensor", "all_to_all_single", "wait_tensor"}
ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"}


def _bytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(y) for y in x)
    return 0


class Recorder(TorchDispatchMode):
    """Every op's name, and for the element-wise ones the bytes read and written."""

    def __init__(self) -> None:
        super().__init__()
        self.elementwise = 0
        self.collectives: list[tuple[str, int]] = []
        self.attention: list[tuple[str, int, int]] = []  # (op, query length, key length)
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name in ATTENTION:
            self.attention.append((name, args[0].shape[2] if name.endswith("cpu") else args[1].shape[2],
                                   args[1].shape[2] if name.endswith("cpu") else args[2].shape[2]))  # fmt: skip
        elif name in COLLECTIVES:
            if name != "wait_tensor":
                self.collectives.append((name, _bytes(args[0])))
        elif name not in VIEWS and _bytes(out):  # ops that return no tensor (prim.device, sizes) move nothing
            written = _bytes(out[0] if name == "log_sigmoid_forward" else out)
            read = 0 if name in ("zero_", "fill_", "zeros_like", "zeros") else _bytes(list(args) + list(kwargs.values()))
            self.elementwise += read + written
        return out


def _ring(cp: int, rank: int, rotate: str) -> tuple[Recorder, Recorder]:
    """(forward, backward) records of one ring on `rank` of `cp` fake ranks."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.tensor.experimental._attention import set_rotate_method
    from torch.distributed.tensor.experimental._context_parallel._attention import (
        _templated_ring_attention,
        _templated_ring_attention_backward,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=rank, world_size=cp, store=FakeStore())
    group = dist.group.WORLD
    set_rotate_method(rotate)

    def forward_op(q, k, v, is_causal=False, **kwargs):  # type: ignore[no-untyped-def]
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=is_causal)

    def backward_op(grad_out, query, key, value, out, logsumexp, is_causal=False, **kwargs):  # type: ignore[no-untyped-def]
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out, logsumexp, 0.0, is_causal)

    with FakeTensorMode():
        shape = (B, LOCAL, HEADS, HEAD_DIM)
        q, k, v = (torch.randn(shape, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        with Recorder() as forward:
            out, lse = _templated_ring_attention(group, 2, forward_op, q, k, v, is_causal=True)
        grad_out = torch.randn_like(out)
        with Recorder() as backward:
            _templated_ring_attention_backward(group, 2, backward_op, grad_out, "grad_out", q, k, v, out, lse, True)
    set_rotate_method("allgather")
    return forward, backward


ELEMENTS = B * HEADS * LOCAL * HEAD_DIM  # E: the rank's queries (= its repeated keys, = its values)
KV = 2 * ELEMENTS * 2  # B_ring: bf16 K and V


@pytest.mark.parametrize("cp, rank", [(2, 0), (2, 1), (4, 0), (4, 2), (4, 3), (8, 0), (8, 5)])
@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_eager_ring_moves_and_merges_what_parcalc_counts(cp: int, rank: int, rotate: str) -> None:
    """Measured (torch 2.13, the fake ranks above): the ring's exchanges and element-wise bytes on one rank equal
    ring_merge_bytes x E and ring_kv_bytes's B_ring exactly, at every CP degree, rank and rotate method."""
    forward, backward = _ring(cp, rank, rotate)
    # SDPA: step 0 the causal square, every later step the same score pairs (the load balancer's halves)
    assert [(q, k) for _, q, k in forward.attention] == [(LOCAL, LOCAL)] + [
        (LOCAL, LOCAL // 2) if i <= rank else (LOCAL // 2, LOCAL) for i in range(1, cp)]
    assert [(q, k) for _, q, k in backward.attention] == [(q, k) for _, q, k in forward.attention]
    # exchanges: allgather gathers the K/V once a ring; alltoall permutes them cp - 1 times; dK/dV in fp32 every step
    if rotate == "allgather":
        assert forward.collectives == [("all_gather_into_tensor", KV)]
        assert backward.collectives.count(("all_gather_into_tensor", KV)) == 1
    else:
        assert forward.collectives == [("all_to_all_single", KV)] * (cp - 1)
        assert backward.collectives.count(("all_to_all_single", KV)) == cp - 1
    assert backward.collectives.count(("all_to_all_single", 2 * KV)) == cp  # 2 B_ring: dK and dV in fp32
    expected_f, expected_b = ring_merge_bytes(cp, rank, HEAD_DIM, compiled=False)
    assert forward.elementwise == pytest.approx(expected_f * ELEMENTS, rel=1e-12), dict(forward.ops)
    assert backward.elementwise == pytest.approx(expected_b * ELEMENTS, rel=1e-12), dict(backward.ops)
