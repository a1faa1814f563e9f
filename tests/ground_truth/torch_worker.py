"""Run one training step of a small GPT under real torch.distributed (CPU, gloo) and record
every collective and point-to-point call: op, bytes, dtype, group size, peer.

    python tests/ground_truth/torch_worker.py --world 2 --out DIR [--scenarios ddp,fsdp,...]

Spawns `--world` processes on 127.0.0.1 (a free port); each writes DIR/rank<r>.json:
{scenario: {phase: [call, ...]}} with phases "setup", "step1" and, where measured, "step2".

Calls are seen by a TorchDispatchMode, which intercepts the dispatcher ops behind every c10d
collective (torch.ops.c10d.*) and functional collective (torch.ops._c10d_functional.*), the way
torch.distributed.tensor.debug.CommDebugMode counts them (torch/distributed/tensor/debug/
_comm_mode.py). That covers calls issued from C++ too (DDP's Reducer); for DDP a communication
hook that performs the default all-reduce also records each bucket, as a second witness.

Sizes follow nccl-tests: all-gather counts its output, reduce-scatter its input.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from gloo_ranks import gloo_parser, spawn_gloo  # a sibling: this folder is sys.path[0] when run as a script
from torch.utils._python_dispatch import TorchDispatchMode

SCENARIOS = ("ddp", "ddp-buckets", "fsdp", "tp", "sp", "pp-gpipe", "pp-1f1b", "fsdp-tp", "hsdp")

# The model: GPT-2 layout (learned positions, LayerNorm, biases, GELU MLP, tied LM head).
HIDDEN, HEADS, FFN, SEQ, BATCH = 64, 4, 256, 16, 4
VOCAB = 129  # odd, so that FSDP2 pads the embedding's dim 0 on 2 and 4 ranks
PP_MICRO_BATCH = 1
DDP_SMALL_BUCKET_MB = 0.05  # 52,428 bytes: several buckets for this model


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # view(..., -1, head_dim): under tensor parallelism each rank holds heads / tp heads
        q, k, v = (proj(x).view(b, t, -1, self.head_dim).transpose(1, 2) for proj in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(HIDDEN), Attention(HIDDEN, HEADS)
        self.ln2, self.mlp = nn.LayerNorm(HIDDEN), Mlp(HIDDEN, FFN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Registration order: wte, wpe, layers.*, ln_f, lm_head (parcalc.core.comm.parameter_tensors)."""

    def __init__(self, layers: int, tied: bool = True) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)
        self.layers = nn.ModuleList(Block() for _ in range(layers))
        self.ln_f = nn.LayerNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_f(x))


def loss_of(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


# ---------------------------------------------------------------------------------------------
# Recording


def _group_size(args: tuple, kwargs: dict) -> int:
    """Size of the process group among the arguments: a boxed ProcessGroup (c10d ops reach the
    dispatcher with it as a torch.ScriptObject) or a group name (functional collectives)."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.ScriptObject):
            try:
                return int(dist.ProcessGroup.unbox(value).size())
            except Exception:  # noqa: BLE001 - a boxed ReduceOp, not a group
                continue
        if isinstance(value, str):
            try:
                return int(_resolve_process_group(value).size())
            except Exception:  # noqa: BLE001 - a reduce-op name, not a group
                continue
    return -1


def _group_ranks(args: tuple, kwargs: dict) -> list[int]:
    """Global ranks of the process group among the arguments (as _group_size finds it); [] if none."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    for value in list(args) + list(kwargs.values()):
        try:
            if isinstance(value, torch.ScriptObject):
                return list(dist.get_process_group_ranks(dist.ProcessGroup.unbox(value)))
            if isinstance(value, str):
                return list(dist.get_process_group_ranks(_resolve_process_group(value)))
        except Exception:  # noqa: BLE001 - not a group
            continue
    return []


def _nbytes(value: object) -> int:
    leaves = torch.utils._pytree.tree_leaves(value)
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))


def _dtype(value: object) -> str:
    for leaf in torch.utils._pytree.tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            return str(leaf.dtype).removeprefix("torch.")
    return ""


OPS = {
    "allreduce_": "all-reduce", "all_reduce": "all-reduce", "allreduce_coalesced_": "all-reduce",
    "all_reduce_coalesced": "all-reduce", "_allgather_base_": "all-gather", "allgather_": "all-gather",
    "all_gather_into_tensor": "all-gather", "allgather_into_tensor_coalesced_": "all-gather",
    "all_gather_into_tensor_coalesced": "all-gather", "_reduce_scatter_base_": "reduce-scatter",
    "reduce_scatter_": "reduce-scatter", "reduce_scatter_tensor": "reduce-scatter",
    "reduce_scatter_tensor_coalesced_": "reduce-scatter", "reduce_scatter_tensor_coalesced": "reduce-scatter",
    "broadcast_": "broadcast", "broadcast": "broadcast", "send": "send", "recv_": "recv", "scatter_": "scatter",
    "gather_": "gather", "reduce_": "reduce", "alltoall_": "all-to-all", "alltoall_base_": "all-to-all",
    "all_to_all_single": "all-to-all", "barrier": "barrier", "monitored_barrier_": "barrier",
}  # fmt: skip
IGNORED = {"wait", "wait_tensor", "_wrap_tensor_autograd", "_are_all_awaitables"}


def describe(name: str, args: tuple, kwargs: dict) -> dict:
    """op, bytes (nccl-tests convention), dtype, group size and peer of one dispatcher call."""
    op = OPS.get(name, name)
    group = _group_size(args, kwargs)
    peer = -1
    if name in ("_allgather_base_", "_reduce_scatter_base_"):
        size = _nbytes(args[0]) if name == "_allgather_base_" else _nbytes(args[1])  # (output, input)
    elif name in ("all_gather_into_tensor", "all_gather_into_tensor_coalesced"):
        size = _nbytes(args[0]) * int(args[1])  # functional: (input, group_size, group_name) -> the output
    elif name == "allgather_":
        size = _nbytes(args[0])  # output lists
    elif name in ("allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_"):
        size = _nbytes(args[0]) if name.startswith("allgather") else _nbytes(args[1])
    elif name == "reduce_scatter_":
        size = _nbytes(args[1])  # input lists
    elif name in ("send", "recv_"):
        size, peer = _nbytes(args[0]), int(args[2])
    elif name == "scatter_":
        size = _nbytes(args[0]) * max(group, 1)
    else:
        size = _nbytes(args[0]) if args else 0
    return {"op": op, "name": name, "bytes": size, "dtype": _dtype(args[0] if args else None), "group": group, "peer": peer,
            "ranks": _group_ranks(args, kwargs)}


class Recorder(TorchDispatchMode):
    """Appends every c10d / functional-collective dispatcher call to `calls`."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        from torch.distributed.tensor import DTensor

        if any(isinstance(t, type) and issubclass(t, DTensor) for t in types):
            return NotImplemented  # let DTensor lower itself to collectives first (as CommDebugMode does)
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.OpOverload) and func.namespace in ("c10d", "_c10d_functional", "c10d_functional"):
            name = func._overloadpacket.__name__
            if name not in IGNORED:
                self.calls.append(describe(name, args, kwargs))
        return func(*args, **kwargs)


def recorded(fn) -> list[dict]:  # type: ignore[no-untyped-def]
    recorder = Recorder()
    with recorder:
        fn()
    return recorder.calls


# ---------------------------------------------------------------------------------------------
# Scenarios: each returns {phase: calls}


def batch_for(rank: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed * 1000 + rank)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    return idx, torch.roll(idx, -1, dims=1)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, idx: torch.Tensor, target: torch.Tensor) -> None:
    loss_of(model(idx), target).backward()
    optimizer.step()
    optimizer.zero_grad()


def scenario_ddp(rank: int, world: int, bucket_cap_mb: float | None) -> dict:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = GPT(layers=2)
    out: dict = {}
    holder: dict = {}
    kwargs = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    out["setup"] = recorded(lambda: holder.setdefault("ddp", DDP(model, **kwargs)))
    ddp = holder["ddp"]
    buckets: list[int] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]
        buffer = bucket.buffer()
        buckets.append(buffer.numel() * buffer.element_size())
        return default_hooks.allreduce_hook(state, bucket)  # the default all-reduce (divides by world size)

    ddp.register_comm_hook(dist.group.WORLD, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in (1, 2):
        idx, target = batch_for(rank, step)
        buckets.clear()
        out[f"step{step}"] = recorded(lambda: train_step(ddp, optimizer, idx, target))  # noqa: B023 - called at once
        out[f"hook{step}"] = [{"op": "all-reduce", "bytes": b, "group": world} for b in buckets]
    return out


def scenario_fsdp(rank: int, world: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = GPT(layers=2)
    mesh = init_device_mesh("cpu", (world,))

    def wrap() -> None:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)

    out = {"setup": recorded(wrap)}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    idx, target = batch_for(rank, 1)
    out["step1"] = recorded(lambda: train_step(model, optimizer, idx, target))
    return out


def _tp_plan(sequence_parallel: bool) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    if not sequence_parallel:
        # Megatron: Q, K, V and MLP-up column-parallel, attention output and MLP-down row-parallel.
        # PrepareModuleInput keeps the attention input a replicated DTensor, so that the gradients
        # of Q, K and V add up as partial sums before the one all-reduce of Megatron's `f`.
        return {
            "attn": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(),
            "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel(),
        }  # fmt: skip
    return {  # Korthikanti et al. 2022: norms on sequence slices, all-gather before and reduce-scatter after
        "ln1": SequenceParallel(),
        "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.o": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "ln2": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }  # fmt: skip


class SequenceParallelGPT(nn.Module):
    """The GPT with its residual stream split along the sequence between the embedding and the LM head,
    as Megatron does: scatter after the embedding (backward: all-gather), gather before the head."""

    def __init__(self, gpt: GPT, mesh) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.gpt, self.mesh = gpt, mesh

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Replicate, Shard

        x = DTensor.from_local(self.gpt.embed(idx), self.mesh, [Replicate()], run_check=False)
        x = x.redistribute(self.mesh, [Shard(1)])
        for layer in self.gpt.layers:
            x = layer(x)
        x = self.gpt.ln_f(x)
        return self.gpt.lm_head(x.redistribute(self.mesh, [Replicate()]).to_local())


def scenario_tp(rank: int, world: int, sequence_parallel: bool) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    torch.manual_seed(0)
    gpt = GPT(layers=2)
    mesh = init_device_mesh("cpu", (world,))

    def wrap() -> None:
        for layer in gpt.layers:
            parallelize_module(layer, mesh, _tp_plan(sequence_parallel))
        if sequence_parallel:
            parallelize_module(gpt.ln_f, mesh, SequenceParallel())

    out = {"setup": recorded(wrap)}
    model: nn.Module = SequenceParallelGPT(gpt, mesh) if sequence_parallel else gpt
    # Plain SGD reads each gradient once. (AdamW reads a partial DTensor gradient three times and
    # DTensor all-reduces it on each read: see docs/known-differences.md.)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    idx, target = batch_for(0, 1)  # every TP rank sees the same batch
    out["step1"] = recorded(lambda: train_step(model, optimizer, idx, target))
    return out


class Stage(nn.Module):
    """One pipeline stage of the untied GPT: embeddings on the first, final norm and head on the last."""

    def __init__(self, gpt: GPT, stage: int, stages: int) -> None:
        super().__init__()
        per = len(gpt.layers) // stages
        self.embedding = nn.ModuleDict({"wte": gpt.wte, "wpe": gpt.wpe}) if stage == 0 else None
        self.layers = nn.ModuleList(gpt.layers[stage * per:(stage + 1) * per])
        self.head = nn.ModuleDict({"ln_f": gpt.ln_f, "lm_head": gpt.lm_head}) if stage == stages - 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding["wte"](x) + self.embedding["wpe"](torch.arange(x.shape[1]))
        for layer in self.layers:
            x = layer(x)
        if self.head is not None:
            x = self.head["lm_head"](self.head["ln_f"](x))
        return x


def scenario_pp(rank: int, world: int, schedule: str) -> dict:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    torch.manual_seed(0)
    gpt = GPT(layers=world, tied=False)  # one layer per stage; a tied head would need a cross-stage sync
    stage = PipelineStage(Stage(gpt, rank, world), rank, world, torch.device("cpu"))
    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    runner = cls(stage, n_microbatches=BATCH // PP_MICRO_BATCH, loss_fn=loss_of)
    optimizer = torch.optim.SGD(stage.submod.parameters(), lr=0.01)
    out: dict = {"setup": []}
    for step in (1, 2):
        idx, target = batch_for(0, step)

        def run() -> None:
            if rank == 0:
                runner.step(idx)  # noqa: B023 - run() is called in this iteration only
            elif rank == world - 1:
                runner.step(target=target)  # noqa: B023
            else:
                runner.step()
            optimizer.step()
            optimizer.zero_grad()

        out[f"step{step}"] = recorded(run)
    return out


def scenario_fsdp_tp(rank: int, world: int) -> dict:
    """2D: tensor parallelism inside pairs of ranks, FSDP2 across the pairs (data-parallel replicas)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    torch.manual_seed(0)
    model = GPT(layers=2)
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))  # TP ranks adjacent, as Megatron

    def wrap() -> None:
        for layer in model.layers:
            parallelize_module(layer, mesh["tp"], _tp_plan(False))
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])

    out = {"setup": recorded(wrap)}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    idx, target = batch_for(mesh["dp"].get_local_rank(), 1)  # one batch per data-parallel replica
    out["step1"] = recorded(lambda: train_step(model, optimizer, idx, target))
    return out


def scenario_hsdp(rank: int, world: int) -> dict:
    """HSDP: FSDP2 `fully_shard` on a 2-D DeviceMesh (replicate world / 2, shard 2). Parameters are
    sharded over pairs of adjacent ranks (0, 1) and (2, 3) and replicated across the pairs; each
    unit's gradients are reduce-scattered in its pair, then the shard all-reduced across the pairs
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, foreach_reduce)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = GPT(layers=2)
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))

    def wrap() -> None:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)

    out = {"setup": recorded(wrap)}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    idx, target = batch_for(rank, 1)  # every rank its own batch: 4 data-parallel ranks in all
    out["step1"] = recorded(lambda: train_step(model, optimizer, idx, target))
    return out


def run_scenario(name: str, rank: int, world: int) -> dict:
    if name == "ddp":
        return scenario_ddp(rank, world, None)
    if name == "ddp-buckets":
        return scenario_ddp(rank, world, DDP_SMALL_BUCKET_MB)
    if name == "fsdp":
        return scenario_fsdp(rank, world)
    if name in ("tp", "sp"):
        return scenario_tp(rank, world, name == "sp")
    if name == "fsdp-tp":
        return scenario_fsdp_tp(rank, world) if world >= 4 else {"not run": "2D needs 4 ranks"}
    if name == "hsdp":
        return scenario_hsdp(rank, world) if world >= 4 else {"not run": "HSDP on a 2 x 2 mesh needs 4 ranks"}
    if name.startswith("pp-"):
        return scenario_pp(rank, world, name.removeprefix("pp-"))
    raise ValueError(name)


def run(rank: int, world: int, scenarios: list[str]) -> dict:
    """Every scenario on this rank, each one's error reported in its place (gloo_ranks writes the dict)."""
    results: dict = {"config": {
        "hidden": HIDDEN, "heads": HEADS, "ffn": FFN, "seq": SEQ, "batch": BATCH, "vocab": VOCAB,
        "pp_micro_batch": PP_MICRO_BATCH, "ddp_small_bucket_bytes": int(DDP_SMALL_BUCKET_MB * 1024 * 1024),
        "params": {"gpt2-tied": sum(p.numel() for p in GPT(2).parameters()),
                   "pp-untied": sum(p.numel() for p in GPT(world, tied=False).parameters())},
    }}  # fmt: skip
    for name in scenarios:
        try:
            results[name] = run_scenario(name, rank, world)
        except Exception as error:  # noqa: BLE001 - reported, so that a test can say exactly what failed
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        dist.barrier()
    return results


def main(argv: list[str]) -> None:
    parser = gloo_parser()
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    spawn_gloo(run, args.world, args.out, scenarios)


if __name__ == "__main__":
    main(sys.argv[1:])
