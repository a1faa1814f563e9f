"""One fake process group for the FSDP2 memory ground truths (test_torch_memory_fsdp.py, test_torch_memory_torchtitan.py):
PyTorch's "fake" backend, whose collectives do nothing, so that fully_shard builds each rank's shards of a `world`-rank
group in one process under FakeTensorMode; FSDPMemTracker then files what one rank holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def fake_mesh(world: int) -> Any:
    """A 1-D device mesh of `world` ranks over the fake backend (the group remade when its size differs)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != world:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    return init_device_mesh("cpu", (world,))


@pytest.fixture(autouse=True, scope="module")
def no_process_group_after() -> Iterator[None]:
    """The fake process group is the importing module's: none is left for the next test module."""
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
