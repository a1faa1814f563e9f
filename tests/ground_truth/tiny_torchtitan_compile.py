"""torchtitan's Llama Transformer with each block compiled (apply_ac, then apply_compile: torchtitan's parallelize_llama.py
at 9dec370, lines 66-77 and 297-306), one training step's memory counted on the CPU with torch.profiler.

Why the profiler: MemTracker cannot follow a compiled module: under its TorchDispatchMode torch.compile skips every frame
("non-infra torch dispatch mode present, this is not supported today in torch.compile"; with fullgraph=True it raises
"found no compiled frames", tried with torch 2.13.0), Inductor's generated code allocates its buffers outside the
dispatcher (`empty_strided_cpu`) in any case, and FakeTensorMode cannot run the generated C++ kernels. The
profiler's memory events come from the CPU allocator (c10's reportMemoryUsage): every allocation and free of the process,
whoever makes it, with its size and a nanosecond time stamp. The peak of their running sum over a step is the step's peak
above what was allocated before it (the parameters, the token ids, freqs_cis). What it sees beyond a GPU's allocations:
the CPU kernels' own scratch (the CPU flash attention's per-thread buffers, oneDNN's), counted where they are live at the
peak; what it cannot see: nothing allocated outside c10's allocator (none in these steps). The eager model's step
measured this way equals parcalc's eager walk, which FSDPMemTracker holds (test_torch_memory_torchtitan.py), to 8 bytes.
"""

from __future__ import annotations

import torch

from .tiny_llama import LlamaConfig
from .tiny_torchtitan import Transformer, apply_ac, loss_fn


def allocation_peak(step) -> int:  # type: ignore[no-untyped-def]
    """Bytes: the peak of what `step()` allocates beyond what was live when it began (every CPU allocation, in order)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    now = peak = 0
    for _, size in events:
        now += size
        peak = max(peak, now)
    return peak


def built_as_train_py(model, ac: str, backend: str | None = "inductor", convert=None, apply_tp=None):  # type: ignore[no-untyped-def]
    """`model` as train.py and parallelize_llama make it, in their order (no FSDP: its buffers are eager, outside the compiled
    blocks): bf16 parameters (FSDP2's param_dtype), the model converters (`convert(model)`, e.g. torchao's Float8),
    apply_tp (`apply_tp(model)`), apply_ac's `ac`, apply_compile (each checkpoint-wrapped block by `backend`, fullgraph;
    None: eager)."""
    for p in model.parameters():
        p.data = p.data.to(torch.bfloat16)
    if convert is not None:
        convert(model)
    if apply_tp is not None:
        apply_tp(model)
    apply_ac(model, ac)
    if backend is not None:
        for layer_id, block in model.layers.items():
            model.layers[layer_id] = torch.compile(block, backend=backend, fullgraph=True)
    return model


def fake_ranks(world: int, dim: str):  # type: ignore[no-untyped-def]
    """A new fake process group of `world` ranks (this process rank 0; its collectives allocate their outputs and move no
    data) and its 1-D device mesh, named `dim`: the TP and CP compiled steps' (tiny_torchtitan_tp_compile, _cp_compile)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    return init_device_mesh("cpu", (world,), mesh_dim_names=(dim,))


def second_step_peak_on_fake_ranks(step, peak) -> int:  # type: ignore[no-untyped-def]
    """`peak(step)` of the second step (the first compiles), then Dynamo's caches reset and fake_ranks' group destroyed."""
    import torch.distributed as dist

    step()
    try:
        return int(peak(step))
    finally:
        torch._dynamo.reset()
        dist.destroy_process_group()


def compiled_step_peak(c: LlamaConfig, vocab: int, b: int, s: int, ac: str, backend: str | None = "inductor", convert=None,  # type: ignore[no-untyped-def]
                       peak=allocation_peak, compile_loss: bool = False) -> int:  # fmt: skip
    """The second step's allocation peak of torchtitan's Transformer (bf16 parameters, as FSDP2's param_dtype makes them;
    no FSDP: its buffers are eager, outside the compiled blocks) with apply_ac's `ac` and each block compiled by `backend`
    (None: eager). train.py's step: forward, loss, del pred, backward; the gradients set to None before. `convert(model)`:
    a model converter applied before apply_ac (train.py's order: converters, then parallelize_llama); `peak(step)`: how
    the step's allocations are counted; `compile_loss`: the loss compiled by Inductor too, as torchtitan's
    components/loss.py build_cross_entropy_loss does with --training.compile from bbb1b616e (2025-04-02; e7c0cae's lines 25-30)."""
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = built_as_train_py(Transformer(c, vocab, s), ac, backend, convert)
    ids = torch.randint(0, vocab, (b, s))
    loss_of = torch.compile(loss_fn) if compile_loss and backend is not None else loss_fn

    def step() -> None:
        pred = model(ids)
        loss = loss_of(pred, ids)
        del pred
        loss.backward()

    step()  # compiles
    model.zero_grad(set_to_none=True)
    try:
        return int(peak(step))
    finally:
        torch._dynamo.reset()
