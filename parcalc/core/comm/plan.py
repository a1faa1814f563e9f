"""The plan every strategy family fills: the configuration (workload, parallelism, options,
network), one row per kind of collective, and the builder that splits each row by node and times it.

Two conventions, both kept (seed 003 sec. 11 and seed 004 Q2 use different ones):
- payload ("bytes aggregated"): the size of the data each call works on, summed over the calls
  of one group: an all-reduce of the gradients has payload P x bytes per gradient; all-gather
  and reduce-scatter count the full (unsharded) tensor, as nccl-tests does;
- per-device traffic: the bytes one device sends with the algorithm, e.g. 2 (n-1)/n x payload
  for a ring all-reduce (core.collectives).

Rank layout: Megatron-LM's default order, tensor-parallel ranks adjacent, then data-parallel,
then pipeline (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"):
rank = t + tp x (c + cp x (d + dp x s)) with context parallelism. A group whose ranks sit on more than one node of
`gpus_per_node` GPUs uses the inter-node link, else the intra-node one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from parcalc.core.collectives import (
    Algorithm,
    Collective,
    collective_cost,
    default_algorithm,
)
from parcalc.core.hardware import Link
from parcalc.core.layout import Layout
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError
from parcalc.named_tuple import NamedTuple

MIB = 1024 * 1024
DDP_BUCKET_BYTES = 25 * MIB  # torch/nn/parallel/distributed.py: _DEFAULT_BUCKET_CAP_MB = 25 (MiB)
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
# Schedules are named by parcalc.core.pipeline.Schedule's values; compared as strings so that this
# module does not import the pipeline simulator (start-up time of `comm-volume`).
INTERLEAVED = "interleaved"
DUALPIPEV = "dualpipev"  # two stages a device in a V: each boundary carried down and back up (parcalc.core.comm.pipeline)
V_SCHEDULES = (DUALPIPEV, "zb-v")  # DualPipeV and ZB-V: the same V (Schedule.v_shape)
DUALPIPE = "dualpipe"  # two pipelines, one each way over the same devices (parcalc.core.comm.pipeline)


def choice_value(choice: object) -> str:
    """A str Enum's value, or the string itself (schedules arrive either way)."""
    return str(getattr(choice, "value", choice))


# ---------------------------------------------------------------------------------------------
# Immutable records throughout this package are NamedTuples rather than frozen dataclasses:
# `comm-volume` is a one-liner, and defining a frozen dataclass costs 0.5-1 ms at import (its
# methods are generated with exec) against ~0.1 ms for a NamedTuple, whose instances are also
# cheaper to create (a frozen dataclass sets each field through object.__setattr__).


class Workload(NamedTuple):
    """One iteration: `global_batch` sequences of `seq_len` tokens, in micro-batches of `micro_batch`
    sequences per data-parallel replica; bytes per element of activations/parameters and gradients."""

    global_batch: int
    micro_batch: int
    seq_len: int
    bytes_per_element: float
    grad_bytes_per_element: float
    dtype: str = ""
    grad_dtype: str = ""


class Options(NamedTuple):
    """Implementation choices that change calls or bytes; defaults follow PyTorch and Megatron-LM."""

    algorithm: Algorithm = Algorithm.RING  # for all-reduces
    bucket_bytes: float = DDP_BUCKET_BYTES
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES
    ddp_first_iteration: bool = False
    shard_padding: bool = True
    reshard_root: bool = True
    vocab_parallel: bool = True
    recompute: bool = False
    embedding_sync: bool = True
    # SP: Megatron adds a row-parallel bias after the reduce-scatter, on a sequence slice, so its
    # gradient is all-reduced with the norms'; PyTorch's RowwiseParallel adds it before (as a
    # partial sum) and its gradient needs no all-reduce.
    sp_row_bias_sync: bool = True
    # SP: Megatron all-reduces those gradients in one flattened call; DTensor, one call per tensor.
    coalesce_sp_grads: bool = True
    # SP: Megatron's column-parallel linear saves only its sequence shard of the input and
    # all-gathers it again in backward for the weight gradient (Korthikanti et al. 2022 sec. 4.2.2;
    # megatron/core/tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication);
    # PyTorch's DTensor keeps the gathered input for the backward instead (more memory, no call).
    sp_regather: bool = True
    # MoE: the busiest rank's all-to-all buffer over the balanced one (--moe-imbalance, >= 1).
    moe_imbalance: float = 1.0
    # ZeRO-3 / FSDP: torchao's FP8 all-gather (--fp8-all-gather; parcalc.core.comm.float8_all_gather): the Float8 linears' weights
    # gathered at 1 byte an element, and their amaxes all-reduced once a step after the optimizer step.
    float8_all_gather: bool = False


DEFAULT_OPTIONS = Options()  # one shared default (the record is immutable)


class Network(NamedTuple):
    """The link inside a node and the one between nodes (None when every group fits in a node)."""

    intra: Link
    inter: Link | None = None


class CollectiveCall(NamedTuple):
    """One kind of collective in an iteration, for one group (and `groups` identical ones).

    bytes_per_call: the mean size of a call (nccl-tests convention); payload = calls x that,
    per group and iteration ("bytes aggregated"); sent / received: bytes one device of the group
    sends / receives per iteration with `algorithm` (for point-to-point: the sending stage /
    the receiving stage); time: seconds per iteration of these calls on `link`, no overlap.
    """

    dimension: str  # "dp", "tp", "pp", "embedding"
    purpose: str
    phase: str
    op: Collective
    group_size: int
    groups: int
    calls: int
    bytes_per_call: float
    payload: float
    algorithm: Algorithm
    sent: float
    received: float
    direction: str
    inter_node: bool
    link: str
    time: float
    stages: str = ""
    call_sizes: tuple[tuple[float, int], ...] = ()  # (bytes, calls) per distinct size, when sizes differ


class OpTotal(NamedTuple):
    """One kind of collective (dimension, op, direction) for a device of its busiest pipeline
    stage, in both conventions: payload of its group and bytes the device sends, per iteration."""

    dimension: str
    op: Collective
    direction: str
    group_size: int
    payload: float
    sent: float
    stage: int


class CommPlan(NamedTuple):
    """What one iteration communicates: the collectives, headline derivations and assumptions."""

    strategy: str
    parallelism: Layout
    workload: Workload
    micro_batches: int  # per replica per iteration
    calls: tuple[CollectiveCall, ...]
    derivations: tuple[Derivation, ...]
    assumptions: tuple[str, ...]
    totals: tuple[OpTotal, ...] = ()

    def payload(self, dimension: str | None = None, op: Collective | None = None, purpose: str | None = None) -> float:
        """Payload summed over matching rows, each row counted once (not x its groups): one group's
        payload when the rows belong to one group, as in a single-dimension plan."""
        return sum(c.payload for c in self._select(dimension, op, purpose))

    def _select(self, dimension: str | None, op: Collective | None, purpose: str | None) -> list[CollectiveCall]:
        return [
            c for c in self.calls
            if (dimension is None or c.dimension == dimension) and (op is None or c.op is op)
            and (purpose is None or purpose in c.purpose)
        ]  # fmt: skip


class Group(NamedTuple):
    """Rank span of one group, for the node check: ranks first .. last (monotonic)."""

    first: int
    last: int


def rank_of(par: Layout, t: int, d: int, s: int, c: int = 0) -> int:
    """Global rank of TP rank t, CP rank c, DP rank d, stage s in Megatron-LM's order
    "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py line 617 at d98e8a6; ep folds over the rest)."""
    return t + par.tp * (c + par.cp * (d + par.dp * s))


def node_split(groups: Iterable[Group], gpus_per_node: int) -> tuple[int, int]:
    """(groups within one node, groups across nodes)."""
    intra = inter = 0
    for group in groups:
        if group.first // gpus_per_node == group.last // gpus_per_node:
            intra += 1
        else:
            inter += 1
    return intra, inter


class Builder:
    """Collects rows for one plan, splitting each by intra/inter-node and timing it."""

    def __init__(self, par: Layout, network: Network, opts: Options) -> None:
        self.par, self.network, self.opts = par, network, opts
        self.rows: list[CollectiveCall] = []
        # per row: (pipeline stage, whether that stage's devices send) for each stage taking part
        self.roles: list[tuple[tuple[int, bool], ...]] = []

    def add(self, *, dimension: str, purpose: str, phase: str, op: Collective, group_size: int,
            call_bytes: Mapping[float, int], groups: Iterable[Group], stages: str, direction: str = "",
            roles: tuple[tuple[int, bool], ...] = ((0, True),)) -> None:  # fmt: skip
        """`call_bytes`: {size of a call in bytes: number of such calls per iteration}."""
        sizes = {float(size): count for size, count in call_bytes.items() if count > 0 and size > 0}
        if group_size < 2 or not sizes:
            return
        algorithm = self.opts.algorithm if op is Collective.ALL_REDUCE else default_algorithm(op)
        intra, inter = node_split(groups, self.par.gpus_per_node)
        costs = [(collective_cost(op, algorithm, size, group_size), count) for size, count in sizes.items()]
        calls = sum(sizes.values())
        payload = sum(size * count for size, count in sizes.items())
        sent = sum(cost.sent * count for cost, count in costs)
        received = sum(cost.received * count for cost, count in costs)
        call_sizes = tuple(sorted(sizes.items())) if len(sizes) > 1 else ()
        for count, crosses in ((intra, False), (inter, True)):
            if count == 0:
                continue
            link = self._link(crosses)
            bandwidth, latency = link.bandwidth_per_direction.value, link.latency.value
            self.rows.append(
                CollectiveCall(
                    dimension=dimension, purpose=purpose, phase=phase, op=op, group_size=group_size, groups=count,
                    calls=calls, bytes_per_call=payload / calls, payload=payload, algorithm=algorithm, sent=sent,
                    received=received, direction=direction, inter_node=crosses, link=link.key,
                    time=sum(cost.time(bandwidth, latency) * k for cost, k in costs), stages=stages, call_sizes=call_sizes,
                )
            )  # fmt: skip
            self.roles.append(roles)

    def _link(self, inter_node: bool) -> Link:
        if not inter_node:
            return self.network.intra
        if self.network.inter is None:
            raise InputError("--inter-node-link: some groups span nodes (more GPUs than --gpus-per-node); name the link between nodes")
        return self.network.inter


# ---------------------------------------------------------------------------------------------
# Headline derivations: the helpers every family's headlines use


def term(key: str, symbol: str, latex: str, value: float, unit: str, description: str, source: str = "") -> Term:
    return Term(key, symbol, latex, float(value), unit, description, source)


def headline(key: str, label: str, symbol: str, latex: str, text: str, tex: str, inputs: Sequence[Term],
                value: float, source: str) -> Derivation:  # fmt: skip
    return Derivation(key, label, symbol, latex, text, tex, tuple(inputs), float(value), "B" if key != "comm_time" else "s", source)
