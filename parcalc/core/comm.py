"""Every collective of one training iteration under DP, ZeRO-1/2/3 (FSDP), TP, SP, PP and 3D.

Two conventions, both kept (seed 003 sec. 11 and seed 004 Q2 use different ones):
- payload ("bytes aggregated"): the size of the data each call works on, summed over the calls
  of one group: an all-reduce of the gradients has payload P x bytes per gradient; all-gather
  and reduce-scatter count the full (unsharded) tensor, as nccl-tests does;
- per-device traffic: the bytes one device sends with the algorithm, e.g. 2 (n-1)/n x payload
  for a ring all-reduce (core.collectives).

Rank layout: Megatron-LM's default order, tensor-parallel ranks adjacent, then data-parallel,
then pipeline (megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"):
rank = t + tp x (d + dp x s). A group whose ranks sit on more than one node of
`gpus_per_node` GPUs uses the inter-node link, else the intra-node one.

What each strategy communicates, with sources:
- DP: all-reduce of the gradients (Li et al., "PyTorch Distributed", VLDB 2020). DDP packs
  gradients into buckets in reverse registration order, closing a bucket once it reaches the cap
  (torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size; 25 MiB cap and a
  1 MiB first bucket, torch/nn/parallel/distributed.py). Buckets set the number of calls, not
  the bytes. On the first iteration DDP puts every gradient into one bucket unless
  find_unused_parameters (distributed.py, compute_bucket_size_limits); `ddp_first_iteration`.
- ZeRO-1/2: reduce-scatter of the gradients and all-gather of the updated parameters
  (Rajbhandari et al., "ZeRO", SC 2020, sec. 7.2.1): the same traffic as DP.
- ZeRO-3 / FSDP: per unit (a transformer layer; the rest of the model is the root unit) an
  all-gather of its parameters in forward, another in backward, and a reduce-scatter of its
  gradients (ZeRO sec. 7.2.2; Zhao et al., "PyTorch FSDP", VLDB 2023). FSDP2 pads each tensor's
  dim 0 to a multiple of the group size (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
  _chunk_with_empty) and does not reshard the root unit after forward (_fsdp_state.py,
  _lazy_init): `shard_padding`, `reshard_root`.
- TP (Megatron): two all-reduces of b x s x h per layer in forward (after the attention and MLP
  row-parallel matmuls) and two in backward (the conjugate `f` operators before the
  column-parallel ones) (Shoeybi et al. 2019, sec. 3, fig. 4).
- SP: each all-reduce becomes an all-gather and a reduce-scatter of the same size (Korthikanti
  et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, sec. 4.2.2);
  the gradients of norms and row-parallel biases, computed on a slice of the sequence, are
  all-reduced over the TP group (megatron/core/distributed/finalize_model_grads.py,
  _allreduce_layernorm_grads / _allreduce_non_tensor_model_parallel_grads).
- PP: each micro-batch's activations go point-to-point from stage i to i+1, their gradients
  back (Huang et al., GPipe 2019; Narayanan et al. 2021, sec. 2.2): the same bytes for GPipe and
  1F1B; interleaving with v chunks sends v times as often (Narayanan et al. 2021, sec. 2.2.2).
  With TP every TP rank sends the full activation, with SP its sequence slice.
- Tied word embeddings with PP > 1: the first and last stage all-reduce the embedding gradient
  (megatron/core/distributed/finalize_model_grads.py, _allreduce_word_embedding_grads).
- Vocabulary-parallel embedding and loss with TP (Megatron, `vocab_parallel`): an all-reduce of
  the embedding output, one of the LM head input's gradient, and three of b x s fp32 values in
  the cross-entropy (megatron/core/tensor_parallel/cross_entropy.py).
"""

# No `from __future__ import annotations`: under it a NamedTuple compiles every field's annotation
# (typing.ForwardRef), doubling the cost of defining one; `comm-volume` start-up counts.

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from functools import lru_cache
from typing import NamedTuple

from parcalc.core.collectives import Algorithm, Collective, collective_cost, default_algorithm
from parcalc.core.hardware import Link
from parcalc.core.model import TransformerModel
from parcalc.core.stages import split_text, stage_split
from parcalc.derivation import Derivation, Term
from parcalc.errors import InputError

MIB = 1024 * 1024
DDP_BUCKET_BYTES = 25 * MIB  # torch/nn/parallel/distributed.py: _DEFAULT_BUCKET_CAP_MB = 25 (MiB)
DDP_FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
CROSS_ENTROPY_BYTES = 4.0  # Megatron's vocab-parallel cross-entropy reduces fp32 values
# Schedules are named by parcalc.core.pipeline.Schedule's values; compared as strings so that this
# module does not import the pipeline simulator (start-up time of `comm-volume`).
INTERLEAVED = "interleaved"


def _value(choice: object) -> str:
    return str(getattr(choice, "value", choice))


class DataParallel(str, Enum):
    """How the data-parallel dimension synchronises."""

    DDP = "dp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"


# ---------------------------------------------------------------------------------------------
# Immutable records throughout this module are NamedTuples rather than frozen dataclasses:
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


class Parallelism(NamedTuple):
    """Degrees of tensor, pipeline and data parallelism (GPUs = tp x pp x dp) and how each runs."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    data_parallel: DataParallel = DataParallel.DDP
    sequence_parallel: bool = False
    schedule: str = "1f1b"  # a parcalc.core.pipeline.Schedule value (a str Enum, so either spelling works)
    chunks: int = 1  # model chunks per device for the interleaved schedule
    gpus_per_node: int = 8
    first_stage_layers: int | None = None  # Megatron-LM's uneven first / last stage (parcalc.core.stages)
    last_stage_layers: int | None = None

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


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


class Network(NamedTuple):
    """The link inside a node and the one between nodes (None when every group fits in a node)."""

    intra: Link
    inter: Link | None = None


# ---------------------------------------------------------------------------------------------
# The parameter tensors, as a GPT-style model registers them


class Split(str, Enum):
    """How Megatron's tensor parallelism splits a tensor (Shoeybi et al. 2019, sec. 3)."""

    COLUMN = "column"  # output features: QKV, gate, up (weights and biases)
    ROW = "row"  # input features: attention output, MLP down (weights)
    ROW_BIAS = "row-bias"  # replicated, computed on a sequence slice under SP
    NORM = "norm"  # replicated, computed on a sequence slice under SP
    VOCAB = "vocab"  # word embedding / LM head rows, when vocabulary-parallel
    REPLICATED = "replicated"  # learned positions


class ParamTensor(NamedTuple):
    """One parameter as nn.Linear / nn.Embedding store it: `rows` = dim 0 (out features).

    A NamedTuple (immutable, compared by value) rather than a dataclass: a model has thousands."""

    name: str
    rows: int
    cols: int
    split: Split
    layer: int = -1  # -1: not in a transformer layer

    @property
    def numel(self) -> int:
        return self.rows * self.cols


def layer_tensors(model: TransformerModel, layer: int) -> list[ParamTensor]:
    """One layer's tensors in GPT-2 / Megatron registration order (norm, Q, K, V, O, norm, MLP)."""
    h, q, kv, f = model.hidden, model.q_width, model.kv_width, model.ffn_hidden
    out: list[ParamTensor] = []

    def linear(name: str, rows: int, cols: int, split: Split) -> None:
        out.append(ParamTensor(f"layers.{layer}.{name}.weight", rows, cols, split, layer))
        if model.bias:
            bias_split = Split.ROW_BIAS if split is Split.ROW else split
            out.append(ParamTensor(f"layers.{layer}.{name}.bias", rows, 1, bias_split, layer))

    def norm(name: str) -> None:
        for part in ("weight", "bias")[: model.norm.params_per_channel]:
            out.append(ParamTensor(f"layers.{layer}.{name}.{part}", h, 1, Split.NORM, layer))

    norm("ln1")
    linear("attn.q", q, h, Split.COLUMN)
    linear("attn.k", kv, h, Split.COLUMN)
    linear("attn.v", kv, h, Split.COLUMN)
    linear("attn.o", h, q, Split.ROW)
    norm("ln2")
    if model.mlp.gated:
        linear("mlp.gate", f, h, Split.COLUMN)
    linear("mlp.up", f, h, Split.COLUMN)
    linear("mlp.down", h, f, Split.ROW)
    return out


def embedding_tensors(model: TransformerModel) -> list[ParamTensor]:
    if model.vocab == 0:
        return []
    out = [ParamTensor("wte.weight", model.vocab, model.hidden, Split.VOCAB)]
    if model.position.value == "learned":
        out.append(ParamTensor("wpe.weight", model.max_seq_len, model.hidden, Split.REPLICATED))
    return out


def final_tensors(model: TransformerModel, copy_of_tied_embedding: bool = False) -> list[ParamTensor]:
    """Final norm and the LM head (or, across pipeline stages, Megatron's copy of a tied embedding)."""
    if model.vocab == 0:
        return []
    out = [ParamTensor(f"ln_f.{part}", model.hidden, 1, Split.NORM) for part in ("weight", "bias")[: model.norm.params_per_channel]]
    if not model.tied_embeddings:
        out.append(ParamTensor("lm_head.weight", model.vocab, model.hidden, Split.VOCAB))
    elif copy_of_tied_embedding:
        out.append(ParamTensor("lm_head.weight (copy of tied wte)", model.vocab, model.hidden, Split.VOCAB))
    return out


def parameter_tensors(model: TransformerModel) -> tuple[ParamTensor, ...]:
    """Every parameter tensor in registration order; their numel sums to model.total_params."""
    tensors = embedding_tensors(model)
    for layer in range(model.layers):
        tensors += layer_tensors(model, layer)
    return tuple(tensors + final_tensors(model))


@lru_cache(maxsize=256)  # asked once per stage and per plan: a 1F1B plan over 8 stages asks 9 times
def stage_layers(layers: int, pp: int, first: int | None = None, last: int | None = None) -> tuple[range, ...]:
    """Layers of each pipeline stage. With `first` / `last` (--first-stage-layers /
    --last-stage-layers), Megatron-LM's uneven split (parcalc.core.stages); without them, as even
    as possible, earlier stages taking the remainder (the seed exercises' split: a p that does not
    divide L is allowed here, unlike in `memory` and `fit`, which follow Megatron-LM's rule)."""
    if first is not None or last is not None:
        counts = stage_split(layers, pp, first, last)
    else:
        base, extra = divmod(layers, pp)
        counts = tuple(base + (1 if stage < extra else 0) for stage in range(pp))
    stages, start = [], 0
    for count in counts:
        stages.append(range(start, start + count))
        start += count
    return tuple(stages)


def shard(tensor: ParamTensor, tp: int, vocab_parallel: bool) -> ParamTensor:
    """The part of `tensor` one TP rank holds (rounded up where TP does not divide it)."""
    if tp == 1:
        return tensor
    if tensor.split is Split.COLUMN or (tensor.split is Split.VOCAB and vocab_parallel):
        return tensor._replace(rows=-(-tensor.rows // tp))
    if tensor.split is Split.ROW:
        return tensor._replace(cols=-(-tensor.cols // tp))
    return tensor


class StageTensors(NamedTuple):
    """The tensors one device of a pipeline stage holds after TP sharding: those before the
    layers (embeddings), one layer's (every layer alike), how many layers, and those after
    (final norm, LM head). Kept per layer, not expanded, so that a 96-layer model costs no more."""

    before: tuple[ParamTensor, ...]
    layer: tuple[ParamTensor, ...]
    layers: int
    after: tuple[ParamTensor, ...]

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.before + self.after) + self.layers * sum(t.numel for t in self.layer)

    def sizes_in_order(self) -> list[int]:
        """numel of every tensor in registration order."""
        return [t.numel for t in self.before] + [t.numel for t in self.layer] * self.layers + [t.numel for t in self.after]

    def outside_layers(self) -> tuple[ParamTensor, ...]:
        return self.before + self.after


def device_tensors(model: TransformerModel, par: Parallelism, stage: int, opts: Options) -> StageTensors:
    """The tensors one device of pipeline `stage` holds, after TP sharding."""
    layers = stage_layers(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers)[stage]
    before = embedding_tensors(model) if stage == 0 else []
    after = final_tensors(model, copy_of_tied_embedding=par.pp > 1) if stage == par.pp - 1 else []
    return StageTensors(
        before=tuple(shard(t, par.tp, opts.vocab_parallel) for t in before),
        layer=_sharded_layer(model, par.tp, opts.vocab_parallel),
        layers=len(layers),
        after=tuple(shard(t, par.tp, opts.vocab_parallel) for t in after),
    )


@lru_cache(maxsize=64)
def _sharded_layer(model: TransformerModel, tp: int, vocab_parallel: bool) -> tuple[ParamTensor, ...]:
    return tuple(shard(t, tp, vocab_parallel) for t in layer_tensors(model, 0))


def padded_numel(tensor: ParamTensor, group: int) -> int:
    """FSDP2's storage for a tensor sharded over `group`: dim 0 rounded up to a multiple of it."""
    return -(-tensor.rows // group) * group * tensor.cols


def ddp_buckets(tensor_bytes: Sequence[float], cap: float, first_cap: float) -> tuple[float, ...]:
    """Bucket sizes (bytes) DDP forms from gradients in the order given.

    A bucket closes as soon as it reaches its cap (the tensor that crosses it stays in), the
    first cap applying to the first bucket only (reducer.cpp, compute_bucket_assignment_by_size).
    """
    buckets: list[float] = []
    current, limit = 0.0, first_cap
    for size in tensor_bytes:
        current += size
        if current >= limit:
            buckets.append(current)
            current, limit = 0.0, cap
    if current > 0:
        buckets.append(current)
    return tuple(buckets)


def ddp_bucket_counts(head: Sequence[float], period: Sequence[float], repeats: int, tail: Sequence[float], cap: float,
                      first_cap: float) -> dict[float, int]:  # fmt: skip
    """{bucket bytes: count} of ddp_buckets(head + period x repeats + tail, cap, first_cap), in
    order of first appearance, as Counter(ddp_buckets(...)) gives them, without walking every period.

    A model's layers repeat, so the bucketing does too: a period that begins in the state the one
    before it began in (the same bytes carried into it, the same cap in force) closes the same
    buckets, and so does every later one; those are counted, not walked. GPT-3's 96 layers
    (1,536 of its 1,540 gradients) take two walked periods. Every sum is one ddp_buckets makes.
    """
    counts: dict[float, int] = {}
    current, limit = 0.0, first_cap

    def walk(sizes: Sequence[float]) -> list[float]:
        nonlocal current, limit
        closed = []
        for size in sizes:
            current += size
            if current >= limit:
                closed.append(current)
                current, limit = 0.0, cap
        for bucket in closed:
            counts[bucket] = counts.get(bucket, 0) + 1
        return closed

    walk(head)
    for done in range(1, repeats + 1):
        start = (current, limit)
        closed = walk(period)
        if (current, limit) == start:  # a fixed point: the remaining periods close these same buckets
            for bucket in closed:
                counts[bucket] += repeats - done
            break
    walk(tail)
    if current > 0:
        counts[current] = counts.get(current, 0) + 1
    return counts


def _gradient_buckets(tensors: StageTensors, element_bytes: float, cap: float, first_cap: float) -> dict[float, int]:
    """DDP's buckets of one device's tensors, filled in reverse registration order (reducer.cpp)."""
    def in_bytes(part: Sequence[ParamTensor]) -> list[float]:
        return [t.numel * element_bytes for t in reversed(part)]

    return ddp_bucket_counts(in_bytes(tensors.after), in_bytes(tensors.layer), tensors.layers, in_bytes(tensors.before), cap, first_cap)


# ---------------------------------------------------------------------------------------------
# The plan


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
    parallelism: Parallelism
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


class _Group(NamedTuple):
    """Rank span of one group, for the node check: ranks first .. last (monotonic)."""

    first: int
    last: int


def _rank(par: Parallelism, t: int, d: int, s: int) -> int:
    return t + par.tp * (d + par.dp * s)


def _node_split(groups: Iterable[_Group], gpus_per_node: int) -> tuple[int, int]:
    """(groups within one node, groups across nodes)."""
    intra = inter = 0
    for group in groups:
        if group.first // gpus_per_node == group.last // gpus_per_node:
            intra += 1
        else:
            inter += 1
    return intra, inter


class _Builder:
    """Collects rows for one plan, splitting each by intra/inter-node and timing it."""

    def __init__(self, par: Parallelism, network: Network, opts: Options) -> None:
        self.par, self.network, self.opts = par, network, opts
        self.rows: list[CollectiveCall] = []
        # per row: (pipeline stage, whether that stage's devices send) for each stage taking part
        self.roles: list[tuple[tuple[int, bool], ...]] = []

    def add(self, *, dimension: str, purpose: str, phase: str, op: Collective, group_size: int,
            call_bytes: Mapping[float, int], groups: Iterable[_Group], stages: str, direction: str = "",
            roles: tuple[tuple[int, bool], ...] = ((0, True),)) -> None:  # fmt: skip
        """`call_bytes`: {size of a call in bytes: number of such calls per iteration}."""
        sizes = {float(size): count for size, count in call_bytes.items() if count > 0 and size > 0}
        if group_size < 2 or not sizes:
            return
        algorithm = self.opts.algorithm if op is Collective.ALL_REDUCE else default_algorithm(op)
        intra, inter = _node_split(groups, self.par.gpus_per_node)
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
# Validation


def validate(model: TransformerModel, work: Workload, par: Parallelism) -> int:
    """Check the configuration; returns the number of micro-batches per replica per iteration."""
    for flag, value in (("--tp", par.tp), ("--pp", par.pp), ("--dp", par.dp), ("--gpus-per-node", par.gpus_per_node),
                        ("--chunks", par.chunks), ("--batch", work.global_batch), ("--micro-batch", work.micro_batch),
                        ("--seq-len", work.seq_len)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{flag}: must be a whole number of at least 1, got {value!r}")
    for flag, size in (("--dtype", work.bytes_per_element), ("--grad-dtype", work.grad_bytes_per_element)):
        if not size > 0:
            raise InputError(f"{flag}: bytes per element must be positive, got {size}")
    if par.tp > 1:
        if model.heads % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the {model.heads} attention heads (Megatron splits whole heads)")
        if model.kv_heads % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the {model.kv_heads} key/value heads")
        if model.hidden % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the hidden size {model.hidden}")
        if model.ffn_hidden % par.tp:
            raise InputError(f"--tp: {par.tp} does not divide the MLP width {model.ffn_hidden}")
    if par.sequence_parallel and work.seq_len % par.tp:
        raise InputError(f"--sequence-parallel: the sequence length {work.seq_len} must be a multiple of --tp {par.tp}")
    if par.pp * par.chunks > model.layers:
        what = f"--pp {par.pp} x --chunks {par.chunks}" if par.chunks > 1 else f"--pp {par.pp}"
        raise InputError(f"--pp: {what} is more stages than the model's {model.layers} layers")
    if par.chunks > 1 and par.schedule != INTERLEAVED:
        raise InputError("--chunks: model chunks need --schedule interleaved")
    if par.first_stage_layers is not None or par.last_stage_layers is not None:
        stage_split(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers, par.chunks)
    elif par.schedule == INTERLEAVED and model.layers % (par.pp * par.chunks):
        raise InputError(f"--chunks: {model.layers} layers do not split into {par.pp} stages x {par.chunks} chunks evenly")
    if work.global_batch % par.dp:
        raise InputError(f"--batch: the global batch {work.global_batch} is not a multiple of --dp {par.dp}")
    per_replica = work.global_batch // par.dp
    if per_replica % work.micro_batch:
        raise InputError(
            f"--micro-batch: {work.micro_batch} does not divide the {per_replica} sequences each data-parallel replica "
            "processes per iteration (--batch / --dp)"
        )
    return per_replica // work.micro_batch


# ---------------------------------------------------------------------------------------------
# Planning


def iteration_plan(model: TransformerModel, work: Workload, par: Parallelism, network: Network,
                   opts: Options = Options(), strategy: str = "") -> CommPlan:  # fmt: skip
    """Every collective of one training iteration, with the headline payloads as derivations."""
    micro_batches = validate(model, work, par)
    builder = _Builder(par, network, opts)
    per_stage = [device_tensors(model, par, s, opts) for s in range(par.pp)]
    layers = stage_layers(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers)
    _data_parallel_rows(builder, per_stage, work, par, opts, micro_batches)
    _tensor_parallel_rows(builder, model, work, par, opts, layers, per_stage, micro_batches)
    _pipeline_rows(builder, model, work, par, micro_batches)
    _embedding_sync_rows(builder, model, work, par, opts)
    rows = _merge(builder.rows, par.pp)
    derivations = _headlines(model, work, par, opts, per_stage, layers, micro_batches)
    derivations += _traffic_headlines(builder.rows, builder.roles)
    totals = _op_totals(builder.rows, builder.roles)
    return CommPlan(
        strategy=strategy or _describe(par),
        parallelism=par,
        workload=work,
        micro_batches=micro_batches,
        calls=rows,
        derivations=derivations,
        assumptions=_assumptions(model, par, opts),
        totals=totals,
    )


def _op_totals(rows: Sequence[CollectiveCall], roles: Sequence[tuple[tuple[int, bool], ...]]) -> tuple[OpTotal, ...]:
    """Per (dimension, op, direction): payload and bytes sent by one device of the busiest stage.

    Rows split into intra- and inter-node groups count once; a point-to-point row counts at its
    sending stage."""
    per: dict[tuple, dict[int, dict[tuple, tuple[float, float, int]]]] = {}
    for row, row_roles in zip(rows, roles, strict=True):
        key = (row.dimension, row.op, row.direction)
        for stage, sends in row_roles:
            if row.op is Collective.POINT_TO_POINT and not sends:
                continue
            slot = per.setdefault(key, {}).setdefault(stage, {})
            same = (row.purpose, row.phase, row.stages)
            old = slot.get(same, (0.0, 0.0, row.group_size))
            slot[same] = (max(old[0], row.payload), max(old[1], row.sent), row.group_size)
    out = []
    for (dimension, op, direction), stages in per.items():
        stage = max(stages, key=lambda s: sum(v[0] for v in stages[s].values()))
        values = list(stages[stage].values())
        out.append(OpTotal(dimension, op, direction, values[0][2], sum(v[0] for v in values), sum(v[1] for v in values), stage))
    return tuple(out)


def _describe(par: Parallelism) -> str:
    parts = []
    if par.dp > 1:
        parts.append(f"{par.data_parallel.value} {par.dp}")
    if par.tp > 1:
        parts.append(f"tp {par.tp}" + (" + sp" if par.sequence_parallel else ""))
    if par.pp > 1:
        parts.append(f"pp {par.pp} ({_value(par.schedule)})")
    return " × ".join(parts) or "1 GPU"


def _merge(rows: list[CollectiveCall], pp: int) -> tuple[CollectiveCall, ...]:
    """Rows that differ only in their stage become one row whose `groups` adds up."""
    merged: dict[tuple, CollectiveCall] = {}
    labels: dict[tuple, list[CollectiveCall]] = {}
    for row in rows:
        key = (row.dimension, row.purpose, row.phase, row.op, row.group_size, row.calls, row.bytes_per_call,
               row.call_sizes, row.direction, row.inter_node, row.link)  # fmt: skip
        if key in merged:
            labels[key].append(row)
        else:
            merged[key] = row
            labels[key] = [row]
    out = []
    for key, row in merged.items():
        if len(labels[key]) == 1:
            out.append(row)
            continue
        row = row._replace(groups=sum(r.groups for r in labels[key]))
        stages = [r.stages for r in labels[key] if r.stages]
        label = "" if not stages else stages[0] if len(stages) == 1 else _join_stages(stages)
        if len(stages) > 1 and len(stages) == pp and stages[0].startswith("stage "):
            label = f"all {pp} stages"
        elif len(stages) > 1 and len(stages) == pp - 1 and stages[0].startswith("boundary "):
            label = f"all {pp - 1} boundaries"
        out.append(row._replace(stages=label))
    return tuple(out)


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0–2, 5"."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(f"{start}–{n}" if n > start + 1 else (f"{start}, {n}" if n == start + 1 else f"{n}"))
            start = None
    return ", ".join(parts)


def _join_stages(labels: list[str]) -> str:
    """"stage 0" + "stage 1" -> "stages 0, 1"; "boundary 0→1" + "boundary 1→2" -> "boundaries 0→1, 1→2"."""
    if all(label.startswith("stage ") for label in labels):
        return "stages " + _ranges([int(label.removeprefix("stage ")) for label in labels])
    if all(label.startswith("boundary ") for label in labels):
        return "boundaries " + ", ".join(label.removeprefix("boundary ") for label in labels)
    return "; ".join(labels)


def _data_parallel_rows(b: _Builder, per_stage: list[StageTensors], work: Workload, par: Parallelism,
                        opts: Options, micro_batches: int) -> None:  # fmt: skip
    n = par.dp
    if n < 2:
        return
    for stage, tensors in enumerate(per_stage):
        groups = [_Group(_rank(par, t, 0, stage), _rank(par, t, n - 1, stage)) for t in range(par.tp)]
        label = f"stage {stage}" if par.pp > 1 else ""
        common = dict(dimension="dp", group_size=n, stages=label, roles=((stage, True),))
        kind = par.data_parallel
        s, s_g, cap = work.bytes_per_element, work.grad_bytes_per_element, opts.bucket_bytes
        if kind is DataParallel.DDP:
            if opts.ddp_first_iteration:  # one bucket, summed in the order DDP fills it (reverse registration)
                buckets: Mapping[float, int] = {float(sum(k * s_g for k in tensors.sizes_in_order()[::-1])): 1}
            else:
                buckets = _gradient_buckets(tensors, s_g, cap, opts.first_bucket_bytes)
            b.add(purpose="gradients", phase="backward", op=Collective.ALL_REDUCE, call_bytes=buckets, groups=groups, **common)
        elif kind in (DataParallel.ZERO1, DataParallel.ZERO2):
            rs = _gradient_buckets(tensors, s_g, cap, cap)
            ag = rs if s == s_g else _gradient_buckets(tensors, s, cap, cap)
            b.add(purpose="gradients", phase="backward", op=Collective.REDUCE_SCATTER, call_bytes=rs, groups=groups, **common)
            b.add(purpose="updated parameters", phase="after optimizer step", op=Collective.ALL_GATHER, call_bytes=ag,
                  groups=groups, **common)  # fmt: skip
        else:
            units = _fsdp_units(tensors, n, opts)
            fwd = _times(Counter(u * work.bytes_per_element for _, u in units), micro_batches)
            bwd = _times(Counter(u * work.bytes_per_element for root, u in units if opts.reshard_root or not root), micro_batches)
            rs = [u * work.grad_bytes_per_element for _, u in units]
            b.add(purpose="parameters", phase="forward", op=Collective.ALL_GATHER, call_bytes=fwd, groups=groups, **common)
            b.add(purpose="parameters (re-gathered)", phase="backward", op=Collective.ALL_GATHER, call_bytes=bwd,
                  groups=groups, **common)  # fmt: skip
            b.add(purpose="gradients", phase="backward", op=Collective.REDUCE_SCATTER, call_bytes=Counter(rs), groups=groups, **common)


def _times(counts: Mapping[float, int], factor: int) -> dict[float, int]:
    return {size: count * factor for size, count in counts.items()}


def _fsdp_units(tensors: StageTensors, group: int, opts: Options) -> list[tuple[bool, int]]:
    """(is root unit, elements incl. padding) per FSDP unit: the root (non-layer tensors) first,
    then one unit per layer, in forward order."""
    size = (lambda t: padded_numel(t, group)) if opts.shard_padding else (lambda t: t.numel)
    root = sum(size(t) for t in tensors.outside_layers())
    layer = sum(size(t) for t in tensors.layer)
    units = [(True, root)] if root else []
    return units + [(False, layer)] * tensors.layers


def _tensor_parallel_rows(b: _Builder, model: TransformerModel, work: Workload, par: Parallelism, opts: Options,
                          layers: tuple[range, ...], per_stage: list[StageTensors], micro_batches: int) -> None:  # fmt: skip
    n = par.tp
    if n < 2:
        return
    activation = work.micro_batch * work.seq_len * model.hidden * work.bytes_per_element
    repeat = 2 if opts.recompute else 1  # recomputation replays the forward collectives in backward
    for stage, stage_range in enumerate(layers):
        groups = [_Group(_rank(par, 0, d, stage), _rank(par, n - 1, d, stage)) for d in range(par.dp)]
        label = f"stage {stage}" if par.pp > 1 else ""
        common = dict(dimension="tp", group_size=n, groups=groups, stages=label, roles=((stage, True),))
        per_pass = 2 * len(stage_range) * micro_batches  # two per layer per micro-batch
        if par.sequence_parallel:
            for phase, count in (("forward", per_pass * repeat), ("backward", per_pass)):
                b.add(purpose="activations (sequence-parallel)", phase=phase, op=Collective.ALL_GATHER,
                      call_bytes={activation: count}, **common)  # fmt: skip
                b.add(purpose="activations (sequence-parallel)", phase=phase, op=Collective.REDUCE_SCATTER,
                      call_bytes={activation: count}, **common)  # fmt: skip
            tensors = per_stage[stage]
            slices = (Split.NORM, Split.ROW_BIAS) if opts.sp_row_bias_sync else (Split.NORM,)  # computed on a sequence slice
            sizes = [t.numel * work.grad_bytes_per_element for t in tensors.layer if t.split in slices] * tensors.layers
            sizes += [t.numel * work.grad_bytes_per_element for t in tensors.outside_layers() if t.split in slices]
            calls = Counter(sizes) if not opts.coalesce_sp_grads else {float(sum(sizes)): 1}
            what = "norm and row-parallel bias gradients" if opts.sp_row_bias_sync else "norm gradients"
            b.add(purpose=what, phase="after backward", op=Collective.ALL_REDUCE, call_bytes=calls, **common)
        else:
            b.add(purpose="activations", phase="forward", op=Collective.ALL_REDUCE,
                  call_bytes={activation: per_pass * repeat}, **common)  # fmt: skip
            b.add(purpose="activation gradients", phase="backward", op=Collective.ALL_REDUCE,
                  call_bytes={activation: per_pass}, **common)  # fmt: skip
        if model.vocab > 0:
            _outside_layer_rows(b, work, par, opts, stage, activation, micro_batches, common)


def _outside_layer_rows(b: _Builder, work: Workload, par: Parallelism, opts: Options, stage: int, activation: float,
                        micro_batches: int, common: dict) -> None:  # fmt: skip
    """TP collectives at the embedding and the LM head (Megatron's language model)."""
    sp, mb = par.sequence_parallel, micro_batches
    first, last = stage == 0, stage == par.pp - 1
    if first and opts.vocab_parallel:  # each rank looks up its slice of the vocabulary: partial sums
        op = Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE
        b.add(purpose="embedding output", phase="forward", op=op, call_bytes={activation: mb}, **common)
    if first and sp:  # the backward of scattering the sequence (or of the reduce-scatter) gathers it
        b.add(purpose="embedding output gradient", phase="backward", op=Collective.ALL_GATHER,
              call_bytes={activation: mb}, **common)  # fmt: skip
    if last and sp:  # the head sees the whole sequence
        b.add(purpose="LM head input", phase="forward", op=Collective.ALL_GATHER, call_bytes={activation: mb}, **common)
    if last and opts.vocab_parallel:
        op = Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE  # the gradient of a replicated input
        b.add(purpose="LM head input gradient", phase="backward", op=op, call_bytes={activation: mb}, **common)
        logits = work.micro_batch * work.seq_len * CROSS_ENTROPY_BYTES
        b.add(purpose="cross-entropy max, target logit, sum of exp", phase="forward", op=Collective.ALL_REDUCE,
              call_bytes={logits: 3 * mb}, **common)  # fmt: skip


def _pipeline_rows(b: _Builder, model: TransformerModel, work: Workload, par: Parallelism, micro_batches: int) -> None:
    if par.pp < 2:
        return
    activation = work.micro_batch * work.seq_len * model.hidden * work.bytes_per_element
    if par.sequence_parallel and par.tp > 1:
        activation /= par.tp  # each TP rank holds and sends its sequence slice
    v = par.chunks if par.schedule == INTERLEAVED else 1
    pairs = [(t, d) for t in range(par.tp) for d in range(par.dp)]
    for stage in range(par.pp - 1):
        groups = [_Group(_rank(par, t, d, stage), _rank(par, t, d, stage + 1)) for t, d in pairs]
        for phase, direction, purpose, sender in (("forward", "i → i+1", "activations", stage),
                                                  ("backward", "i+1 → i", "activation gradients", stage + 1)):
            receiver = stage + 1 if sender == stage else stage
            b.add(dimension="pp", purpose=purpose, phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                  call_bytes={activation: micro_batches * v}, groups=groups, stages=f"boundary {stage}→{stage + 1}",
                  direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip
    if v > 1:  # interleaving: the last device hands each chunk's output back to the first
        groups = [_Group(_rank(par, t, d, 0), _rank(par, t, d, par.pp - 1)) for t, d in pairs]
        last = par.pp - 1
        for phase, direction, purpose, sender in (("forward", f"{last} → 0", "activations", last),
                                                  ("backward", f"0 → {last}", "activation gradients", 0)):
            receiver = 0 if sender == last else last
            b.add(dimension="pp", purpose=purpose + " (next chunk)", phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                  call_bytes={activation: micro_batches * (v - 1)}, groups=groups, stages=f"boundary {last}→0",
                  direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip


def _embedding_sync_rows(b: _Builder, model: TransformerModel, work: Workload, par: Parallelism, opts: Options) -> None:
    if par.pp < 2 or model.vocab == 0 or not model.tied_embeddings or not opts.embedding_sync:
        return
    rows = -(-model.vocab // par.tp) if opts.vocab_parallel else model.vocab
    grads = rows * model.hidden * work.grad_bytes_per_element
    groups = [_Group(_rank(par, t, d, 0), _rank(par, t, d, par.pp - 1)) for t in range(par.tp) for d in range(par.dp)]
    b.add(dimension="embedding", purpose="tied word-embedding gradients", phase="after backward", op=Collective.ALL_REDUCE,
          group_size=2, call_bytes={grads: 1}, groups=groups, stages=f"stages 0, {par.pp - 1}",
          roles=((0, True), (par.pp - 1, True)))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Headline derivations


def _t(key: str, symbol: str, latex: str, value: float, unit: str, description: str, source: str = "") -> Term:
    return Term(key, symbol, latex, float(value), unit, description, source)


def _headlines(model: TransformerModel, work: Workload, par: Parallelism, opts: Options,
               per_stage: list[StageTensors], layers: tuple[range, ...], micro_batches: int) -> tuple[Derivation, ...]:  # fmt: skip
    out: list[Derivation] = []
    s = _t("s", "s", "s", work.bytes_per_element, "B", f"bytes per {work.dtype or 'parameter/activation'} element")
    s_g = _t("s_g", "s_g", r"s_{g}", work.grad_bytes_per_element, "B", f"bytes per {work.grad_dtype or 'gradient'} element")
    if par.dp > 1:
        out += _dp_headlines(par, opts, per_stage, s, s_g, micro_batches)
    if par.tp > 1:
        out += _tp_headlines(model, work, par, opts, layers, s, micro_batches)
    if par.pp > 1:
        out.append(_pp_headline(model, work, par, s))
    return tuple(out)


def _dp_headlines(par: Parallelism, opts: Options, per_stage: list[StageTensors], s: Term, s_g: Term,
                  micro_batches: int) -> list[Derivation]:  # fmt: skip
    stage = max(range(par.pp), key=lambda i: per_stage[i].numel)
    tensors = per_stage[stage]
    where = f" (stage {stage}, the largest)" if par.pp > 1 else ""
    per_device = "parameters per device" if par.tp * par.pp > 1 else "parameters"
    p = _t("p", "P", "P", tensors.numel, "", per_device + where)
    n = par.dp
    kind = par.data_parallel
    if kind is DataParallel.DDP:
        return [_derivation("dp_allreduce_payload", "Gradients all-reduced per iteration (payload)", "V_AR", r"V_{\mathrm{AR}}",
                            "$p × $s_g", r"$p \times $s_g", (p, s_g), p.value * s_g.value,
                            "data parallelism all-reduces every gradient once per iteration (seed 004 Q2.1)")]  # fmt: skip
    if kind in (DataParallel.ZERO1, DataParallel.ZERO2):
        zero = "ZeRO (Rajbhandari et al. 2020) sec. 7.2.1"
        return [
            _derivation("zero_reduce_scatter_payload", "Gradients reduce-scattered per iteration (payload)", "V_RS",
                        r"V_{\mathrm{RS}}", "$p × $s_g", r"$p \times $s_g", (p, s_g), p.value * s_g.value, zero),
            _derivation("zero_all_gather_payload", "Parameters all-gathered per iteration (payload)", "V_AG",
                        r"V_{\mathrm{AG}}", "$p × $s", r"$p \times $s", (p, s), p.value * s.value, zero),
        ]  # fmt: skip
    units = _fsdp_units(tensors, n, opts)
    root = sum(u for is_root, u in units if is_root)
    layer_elements = sum(u for is_root, u in units if not is_root)
    padded = " incl. FSDP2's dim-0 padding to a multiple of N" if opts.shard_padding else ""
    mb = _t("mb", "m", "m", micro_batches, "", "micro-batches per iteration (parameters gathered for each)")
    source = "FSDP / ZeRO-3: all-gather in forward and again in backward, reduce-scatter of gradients (seed 004 Q2.4)"
    if opts.reshard_root or root == 0:
        p_all = _t("p", "P", "P", root + layer_elements, "", per_device + where + padded)
        text, tex, inputs, value = "2 × $p × $s", r"2 \times $p \times $s", (p_all, s), 2 * p_all.value * s.value
        rs_p = p_all
    else:
        p_l = _t("p_l", "P_layers", r"P_{\mathrm{layers}}", layer_elements, "", "parameters in transformer layers" + padded)
        p_r = _t("p_r", "P_root", r"P_{\mathrm{root}}", root, "", "parameters outside the layers (root unit, not resharded)" + padded)
        text, tex, inputs = "(2 × $p_l + $p_r) × $s", r"(2 $p_l + $p_r) \times $s", (p_l, p_r, s)
        value = (2 * p_l.value + p_r.value) * s.value
        rs_p = _t("p", "P", "P", root + layer_elements, "", per_device + where + padded)
    if micro_batches > 1:
        text, tex, inputs, value = f"$mb × {text}", rf"$mb \times {tex}", (mb, *inputs), micro_batches * value
    return [
        _derivation("fsdp_all_gather_payload", "Parameters all-gathered per iteration (payload)", "V_AG", r"V_{\mathrm{AG}}",
                    text, tex, inputs, value, source),
        _derivation("fsdp_reduce_scatter_payload", "Gradients reduce-scattered per iteration (payload)", "V_RS",
                    r"V_{\mathrm{RS}}", "$p × $s_g", r"$p \times $s_g", (rs_p, s_g), rs_p.value * s_g.value, source),
    ]  # fmt: skip


def _tp_headlines(model: TransformerModel, work: Workload, par: Parallelism, opts: Options, layers: tuple[range, ...],
                  s: Term, micro_batches: int) -> list[Derivation]:  # fmt: skip
    per_layer = 6 if opts.recompute else 4
    count = _t("c", "c", "c", per_layer, "", "collectives per layer per micro-batch (2 forward + 2 backward"
               + (" + 2 replayed by recomputation)" if opts.recompute else ")"))
    layer_count = max(len(r) for r in layers)
    l_term = _t("l", "N_layer", r"N_{\mathrm{layer}}", layer_count, "", "layers" + (" on the largest stage" if par.pp > 1 else ""))
    b = _t("b", "B", "B", work.global_batch // par.dp, "", "sequences per iteration" + (" per replica (--batch / --dp)" if par.dp > 1 else ""))
    seq = _t("seq", "L", "L", work.seq_len, "", "sequence length")
    h = _t("h", "D", "D", model.hidden, "", "hidden size")
    inputs = (count, l_term, b, seq, h, s)
    value = per_layer * layer_count * b.value * work.seq_len * model.hidden * work.bytes_per_element
    text, tex = "$c × $l × $b × $seq × $h × $s", r"$c \times $l \times $b \times $seq \times $h \times $s"
    source = "Megatron-LM (Shoeybi et al. 2019) sec. 3: 2 all-reduces of b×s×h per layer in forward, 2 in backward (seed 004 Q2.3)"
    if not par.sequence_parallel:
        return [_derivation("tp_allreduce_payload", "Activations all-reduced per iteration in the layers (payload)", "V_TP",
                            r"V_{\mathrm{TP}}", text, tex, inputs, value, source)]  # fmt: skip
    sp_source = "Korthikanti et al. 2022 sec. 4.2.2: each all-reduce becomes an all-gather plus a reduce-scatter of the same size"
    return [
        _derivation("sp_all_gather_payload", "Activations all-gathered per iteration in the layers (payload)", "V_AG",
                    r"V_{\mathrm{AG}}", text, tex, inputs, value, sp_source),
        _derivation("sp_reduce_scatter_payload", "Activations reduce-scattered per iteration in the layers (payload)", "V_RS",
                    r"V_{\mathrm{RS}}", text, tex, inputs, value, sp_source),
    ]  # fmt: skip


def _pp_headline(model: TransformerModel, work: Workload, par: Parallelism, s: Term) -> Derivation:
    b = _t("b", "B", "B", work.global_batch // par.dp, "", "sequences per iteration" + (" per replica" if par.dp > 1 else ""))
    seq = _t("seq", "L", "L", work.seq_len, "", "sequence length")
    h = _t("h", "D", "D", model.hidden, "", "hidden size")
    text, tex, inputs = "$b × $seq × $h × $s", r"$b \times $seq \times $h \times $s", (b, seq, h, s)
    value = b.value * work.seq_len * model.hidden * work.bytes_per_element
    v = par.chunks if par.schedule == INTERLEAVED else 1
    if par.sequence_parallel and par.tp > 1:
        t = _t("t", "t", "t", par.tp, "", "TP ranks (each sends its sequence slice)")
        text, tex, inputs, value = text + " / $t", rf"\frac{{{tex}}}{{$t}}", (*inputs, t), value / par.tp
    if v > 1:
        vt = _t("v", "v", "v", v, "", "model chunks per device (interleaved)")
        text, tex, inputs, value = "$v × " + text, r"$v \times " + tex, (vt, *inputs), value * v
    return _derivation(
        "pp_p2p_per_boundary", "Activations sent from stage i to i+1 per iteration (and as many gradient bytes back)",
        "V_PP", r"V_{\mathrm{PP}}", text, tex, inputs, value,
        "GPipe / 1F1B: each micro-batch's activations cross each stage boundary once forward and their gradients once "
        "backward; the total does not depend on the number of micro-batches (seed 004 Q2.2)",
    )  # fmt: skip


def _traffic_headlines(rows: Sequence[CollectiveCall], roles: Sequence[tuple[tuple[int, bool], ...]]) -> tuple[Derivation, ...]:
    """Bytes sent and time per iteration of the busiest device, by dimension.

    A device of stage s takes part in one group of each row its stage has a role in; where a
    row is split into intra- and inter-node groups, the slower one counts.
    """
    if not rows:
        return ()
    time: dict[int, dict[tuple, float]] = {}
    sent: dict[int, dict[tuple, float]] = {}
    for row, row_roles in zip(rows, roles, strict=True):
        key = (row.dimension, row.purpose, row.phase, row.op, row.direction, row.stages)
        for stage, sends in row_roles:
            slot = time.setdefault(stage, {})
            slot[key] = max(slot.get(key, 0.0), row.time)
            if sends:
                out = sent.setdefault(stage, {})
                out[key] = max(out.get(key, 0.0), row.sent)
    busiest = max(time, key=lambda s: sum(time[s].values()))
    names = {"dp": "data-parallel", "tp": "tensor-parallel", "pp": "pipeline", "embedding": "embedding sync"}
    by_dim_time: dict[str, float] = {}
    by_dim_sent: dict[str, float] = {}
    for key, value in time[busiest].items():
        by_dim_time[key[0]] = by_dim_time.get(key[0], 0.0) + value
    for key, value in sent.get(busiest, {}).items():
        by_dim_sent[key[0]] = by_dim_sent.get(key[0], 0.0) + value
    t_terms = tuple(_t(f"t_{d}", f"t_{d}", rf"t_{{\mathrm{{{d}}}}}", v, "s", f"{names.get(d, d)} collectives")
                    for d, v in by_dim_time.items())  # fmt: skip
    s_terms = tuple(_t(f"s_{d}", f"S_{d}", rf"S_{{\mathrm{{{d}}}}}", v, "B", f"sent in {names.get(d, d)} collectives")
                    for d, v in by_dim_sent.items())  # fmt: skip
    where = f" (a device of stage {busiest})" if len(time) > 1 else ""
    out = []
    if s_terms:
        out.append(_derivation(
            "sent_per_device", f"Bytes one device sends per iteration{where}", "S_dev", r"S_{\mathrm{dev}}",
            " + ".join(f"${t.key}" for t in s_terms), " + ".join(f"${t.key}" for t in s_terms), s_terms,
            sum(t.value for t in s_terms), "per-device traffic: the algorithm's bytes per worker, summed over calls",
        ))  # fmt: skip
    out.append(_derivation(
        "comm_time", f"Communication time per iteration{where}, no overlap", "T_comm", r"T_{\mathrm{comm}}",
        " + ".join(f"${t.key}" for t in t_terms), " + ".join(f"${t.key}" for t in t_terms), t_terms,
        sum(t.value for t in t_terms), "alpha-beta time of every call on its link, one after another",
    ))  # fmt: skip
    return tuple(out)


def _derivation(key: str, label: str, symbol: str, latex: str, text: str, tex: str, inputs: Sequence[Term],
                value: float, source: str) -> Derivation:  # fmt: skip
    return Derivation(key, label, symbol, latex, text, tex, tuple(inputs), float(value), "B" if key != "comm_time" else "s", source)


def _assumptions(model: TransformerModel, par: Parallelism, opts: Options) -> tuple[str, ...]:
    out = [
        "payload ('bytes aggregated') = size of each call summed over calls; per-device traffic = bytes one device sends with the algorithm",
        "Megatron rank order: TP ranks adjacent, then DP, then PP; a group spanning two nodes runs at the inter-node link's speed",
        "no overlap of communication with computation or with other communication",
    ]
    if par.dp > 1:
        kind = par.data_parallel
        if kind is DataParallel.DDP:
            out.append("gradients are synchronised once per iteration (accumulated locally across micro-batches, as DDP's no_sync)")
            out.append("DDP's first iteration: one bucket of all gradients" if opts.ddp_first_iteration else
                       f"DDP buckets after the first iteration, in reverse registration order: first {opts.first_bucket_bytes:.0f} B, "
                       f"then {opts.bucket_bytes:.0f} B caps")  # fmt: skip
        elif kind is DataParallel.ZERO3:
            out.append("FSDP units: one per transformer layer; embeddings, final norm and LM head form the root unit")
            out.append("parameters are all-gathered for every micro-batch; gradients are reduce-scattered once per iteration")
            if opts.shard_padding:
                out.append("shard padding: each tensor's dim 0 rounded up to a multiple of the data-parallel size (FSDP2)")
            if not opts.reshard_root:
                out.append("the root unit is not resharded after forward, so it is not re-gathered in backward (FSDP2's default)")
        else:
            out.append(f"ZeRO-1/2 gradients and parameters move in buckets of {opts.bucket_bytes:.0f} B")
    if par.tp > 1 and model.vocab > 0:
        out.append("vocabulary-parallel embedding, LM head and cross-entropy (Megatron)" if opts.vocab_parallel
                   else "embedding and LM head replicated on every TP rank: no TP collectives outside the layers")  # fmt: skip
    counts = tuple(len(r) for r in stage_layers(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers))
    if len(set(counts)) > 1:  # equal stages need no word
        how = ("Megatron-LM's uneven split, --first-stage-layers / --last-stage-layers" if par.first_stage_layers is not None
               or par.last_stage_layers is not None else "as even as possible, earlier stages taking any remainder")
        out.append(f"pipeline stages hold {split_text(counts)} layers ({how}); per-stage TP and DP volumes follow each stage's layers")
    if par.pp > 1 and par.tp > 1:
        out.append("pipeline sends: each TP rank sends " + ("its sequence slice" if par.sequence_parallel else "the full activation")
                   + " to its peer in the next stage")  # fmt: skip
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Every strategy on one model (`--strategy all`)


STRATEGIES: tuple[str, ...] = ("dp", "zero1", "zero2", "fsdp", "tp", "tp+sp", "pp-gpipe", "pp-1f1b")


# strategy -> (the dimension that takes every GPU, the rest of its Parallelism)
_SINGLE_STRATEGIES: dict[str, tuple[str, dict[str, object]]] = {
    "dp": ("dp", {}),
    "zero1": ("dp", {"data_parallel": DataParallel.ZERO1}),
    "zero2": ("dp", {"data_parallel": DataParallel.ZERO2}),
    "zero3": ("dp", {"data_parallel": DataParallel.ZERO3}),
    "fsdp": ("dp", {"data_parallel": DataParallel.ZERO3}),
    "tp": ("tp", {}),
    "tp+sp": ("tp", {"sequence_parallel": True}),
    "pp-gpipe": ("pp", {"schedule": "gpipe"}),
    "pp-1f1b": ("pp", {"schedule": "1f1b"}),
}


def single_strategy(name: str, gpus: int, gpus_per_node: int) -> Parallelism:
    """All `gpus` in one dimension: the configurations `--strategy all` compares."""
    dimension, rest = _SINGLE_STRATEGIES[name]
    return Parallelism(gpus_per_node=gpus_per_node, **{dimension: gpus}, **rest)  # type: ignore[arg-type]


class StrategyComparison(NamedTuple):
    plans: tuple[CommPlan, ...]
    skipped: tuple[tuple[str, str], ...]  # (strategy, why)


def default_micro_batch(work: Workload, par: Parallelism) -> int:
    """One micro-batch per replica without pipelining; single sequences with it (Megatron's usual --micro-batch-size 1)."""
    return max(1, work.global_batch // par.dp) if par.pp == 1 else 1


def compare_strategies(model: TransformerModel, work: Workload, gpus: int, network: Network, opts: Options = Options(),
                       gpus_per_node: int = 8, micro_batch: int | None = None) -> StrategyComparison:  # fmt: skip
    """Each strategy with all `gpus` in its one dimension; those that cannot run are skipped with the reason.

    `micro_batch` None: each strategy takes default_micro_batch; `work.micro_batch` is ignored.
    """
    plans, skipped = [], []
    planned: dict[tuple[Parallelism, Workload], CommPlan | str] = {}  # the plan, or why it cannot run
    for name in STRATEGIES:
        par = single_strategy(name, gpus, gpus_per_node)
        workload = work._replace(micro_batch=micro_batch or default_micro_batch(work, par))
        key = (_same_communication(par), workload)
        if key not in planned:
            try:
                planned[key] = iteration_plan(model, workload, par, network, opts, strategy=name)
            except InputError as error:
                planned[key] = str(error)
        plan = planned[key]
        if isinstance(plan, str):
            skipped.append((name, plan))
        else:
            plans.append(plan._replace(strategy=name, parallelism=par, workload=workload))
    return StrategyComparison(tuple(plans), tuple(skipped))


def _same_communication(par: Parallelism) -> Parallelism:
    """A representative of the configurations that communicate exactly as `par` does: ZeRO-1 and
    ZeRO-2 move the same bytes (ZeRO sec. 7.2.1; they differ in what is kept, not in what is sent),
    and so do GPipe and 1F1B (the same sends per micro-batch, in another order); only the
    interleaved schedule sends more. `--strategy all` plans each such class once."""
    if par.data_parallel is DataParallel.ZERO2:
        par = par._replace(data_parallel=DataParallel.ZERO1)
    if _value(par.schedule) != INTERLEAVED:
        par = par._replace(schedule="1f1b")
    return par


__all__ = [
    "CollectiveCall", "CommPlan", "DataParallel", "Network", "OpTotal", "Options", "ParamTensor", "Parallelism", "Split",
    "StageTensors", "StrategyComparison", "Workload", "compare_strategies", "ddp_bucket_counts", "ddp_buckets", "default_micro_batch", "device_tensors", "iteration_plan",
    "padded_numel", "parameter_tensors", "single_strategy", "stage_layers", "validate",
]  # fmt: skip

