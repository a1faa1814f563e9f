"""`comm-volume`: one collective's algorithms (payload, per-device traffic, alpha-beta and NCCL times), or
every collective of one training iteration under a strategy, or every strategy compared."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Algorithm, Collective, Mlp, Recompute, Schedule, Strategy, ZeroStage
from parcalc.frozen import frozen
from parcalc.results.model import ModelFlags, model_from_flags
from parcalc.results.parse import (
    cp_flags,
    expert_flags,
    imbalance_flag,
    pipeline_layout_chunks,
    preset_dirs,
    shard_group_flag,
    stage_flags,
)

if TYPE_CHECKING:
    from parcalc.core.comm import CommPlan, Network, Options, StrategyComparison, Workload
    from parcalc.core.hardware import Gpu, Link
    from parcalc.core.layout import Layout
    from parcalc.core.model import TransformerModel
    from parcalc.derivation import Result, Table, Term


@frozen
class NcclHardware:
    """The hardware NCCL's own choice is timed on (--gpu, --gpus-per-node, --inter-node-link): the
    link inside a node is the collective's `link`."""

    gpu: Gpu | None
    gpus_per_node: int
    inter: Link


@frozen
class CollectiveRequest:
    """One collective, parsed: the message in bytes (and its elements), the ranks, the link its
    alpha-beta time uses, and the hardware when NCCL's choice is asked for."""

    op: Collective
    algorithm: Algorithm  # as given, else the collective's default
    message: float  # bytes
    gpus: int
    link: Link
    dtype: str  # canonical
    items: float | None = None  # --elements
    item_bytes: float | None = None
    compare: bool = False
    hardware: NcclHardware | None = None


@frozen
class StrategyRequest:
    """One training iteration's collectives under a strategy (or every strategy: "all"), parsed."""

    model: TransformerModel
    strategy: str  # a Strategy's value
    layout: Layout
    workload: Workload  # its micro_batch: the given one, else 1 until the strategy's default is taken
    network: Network
    options: Options
    micro_batch: int | None = None  # --micro-batch (None: the strategy's default)
    no_ops: tuple[str, ...] = ()  # flags taken as no-ops (parcalc.results.parse.stated_no_ops)


@frozen
class CommVolumeRequest:
    """What `comm-volume` is asked: one collective or one iteration's, exactly one of the two."""

    collective: CollectiveRequest | None = None
    strategy: StrategyRequest | None = None


def request(collective: Collective | None = None, strategy: Strategy | None = None,
            algorithm: Algorithm | None = None, size: str | None = None, elements: str | None = None,
            compare: bool = False, model: str | None = None, layers: str | None = None, hidden: str | None = None,
            heads: str | None = None, kv_heads: str | None = None, ffn_hidden: str | None = None,
            mlp: Mlp | None = None, vocab: str | None = None, tied: bool | None = None, batch: str | None = None,
            micro_batch: str | None = None, seq_len: str | None = None, dtype: str = "bf16",
            grad_dtype: str | None = None, gpus: str | None = None, tp: str | None = None, pp: str | None = None,
            dp: str | None = None, cp: str | None = None, cp_comm: str | None = None, ep: str | None = None,
            etp: str | None = None, moe_imbalance: str | None = None, zero: ZeroStage = ZeroStage.ZERO0,
            shard_group: str | None = None, sequence_parallel: bool = False,
            schedule: Schedule = Schedule.ONE_F_ONE_B, chunks: str | None = None,
            first_stage_layers: str | None = None, last_stage_layers: str | None = None,
            embedding_in_split: bool = False, loss_in_split: bool = False, pipeline_layout: str | None = None, gpu: str | None = None,
            gpus_per_node: str | None = None, link: str | None = None, inter_node_link: str | None = None,
            bandwidth: str | None = None, latency: str | None = None, bucket_size: str | None = None,
            ddp_first_iteration: bool = False, shard_padding: bool = True, reshard_root: bool = True,
            vocab_parallel: bool = True, fp8_all_gather: bool = False, recompute: Recompute = Recompute.NONE,
            presets: list[Path] | None = None) -> CommVolumeRequest:  # fmt: skip
    """The request from `comm-volume`'s flag texts; bad input raises InputError naming the flag."""
    args = dict(locals())  # every flag by name, taken before any other local exists
    from parcalc.errors import InputError

    if (collective is None) == (strategy is None):
        raise InputError("give one of --collective OP (one collective's algorithms) or --strategy NAME (a training iteration)")
    dirs = preset_dirs(presets)
    _check_mode_flags(args, collective is not None)
    if collective is not None:
        return CommVolumeRequest(collective=_collective_request(collective, algorithm, size, elements, dtype, gpus, compare, link, bandwidth,
                                                                latency, dirs, (gpu, gpus_per_node, inter_node_link)))  # fmt: skip
    return CommVolumeRequest(strategy=_strategy_request(args, dirs))


def result(req: CommVolumeRequest) -> Result:
    """The collective's algorithms (or NCCL's choice), or the iteration's collectives; no parsing."""
    if req.collective is not None:
        return _collective_result(req.collective)
    assert req.strategy is not None  # request(): one of the two
    return _strategy_result(req.strategy)


def from_flags(**flags: Any) -> Result:
    """`comm-volume`'s Result from its flags as the command line gives them (texts with units, choices,
    switches): what parcalc.commands.comm_volume and the library (parcalc.results.run) both call."""
    return result(request(**flags))


DEFAULT_LINK = "nvlink3"


DEFAULT_INTER_NODE_LINK = "ib-hdr"


DEFAULT_GPUS = 8


_COLLECTIVE_ONLY = ("size", "elements", "gpu")


_STRATEGY_ONLY = ("model", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "mlp", "vocab", "tied", "batch", "micro_batch", "seq_len", "grad_dtype",
                  "tp", "pp", "dp", "cp", "chunks", "bucket_size", "first_stage_layers",
                  "last_stage_layers", "ep", "etp", "moe_imbalance", "shard_group", "pipeline_layout")  # fmt: skip


def _check_mode_flags(args: dict[str, Any], collective_mode: bool) -> None:
    """A flag of the other mode is an error, not silently ignored."""
    from parcalc.errors import InputError

    if collective_mode:
        wrong = [name for name in _STRATEGY_ONLY if args[name] is not None]
        wrong += [name for name in ("sequence_parallel", "embedding_in_split", "loss_in_split", "fp8_all_gather") if args[name]]
        mode, other = "--collective", "--strategy"
    else:
        wrong = [name for name in _COLLECTIVE_ONLY if args[name] is not None] + (["compare"] if args["compare"] else [])
        mode, other = "--strategy", "--collective"
    if wrong:
        flags = ", ".join("--" + name.replace("_", "-") for name in wrong)
        raise InputError(f"{flags}: applies to {other}, not {mode}")


def _collective_request(collective: Collective, algorithm: Algorithm | None, size: str | None, elements: str | None,
                        dtype: str, workers: str | None, compare: bool, link: str | None, bandwidth: str | None,
                        latency: str | None, dirs: tuple, hardware: tuple[str | None, str | None, str | None] = (None, None, None),
                        ) -> CollectiveRequest:  # fmt: skip
    from parcalc.core import collectives as co
    from parcalc.core.dtypes import bytes_per_element, canonical_dtype
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_count, parse_quantity

    op = collective
    algo = algorithm if algorithm is not None else co.default_algorithm(op)
    if size is not None and elements is not None:
        raise InputError("--size: give the message as --size BYTES or as --elements N with --dtype, not both")
    items, item_bytes, dtype_key = None, None, canonical_dtype(dtype)
    if size is not None:
        message = parse_quantity(size, Dimension.BYTES, "--size", require_unit=True)
    elif elements is not None:
        items = parse_quantity(elements, Dimension.COUNT, "--elements")
        item_bytes = bytes_per_element(dtype_key)
        message = items * item_bytes
    else:
        raise InputError("--size: required (bytes, e.g. 1GB or 512MiB), or --elements N with --dtype")
    if workers is None:
        if op is not co.Collective.POINT_TO_POINT:
            raise InputError("--gpus: required (the number of ranks taking part)")
        count = 2
    else:
        count = parse_count(workers, "--gpus")
    if hardware[0] is not None and link is None and bandwidth is None and latency is None:  # --gpu: its node's link, textbook too
        from parcalc.presets import load_gpu

        node = load_gpu(hardware[0], dirs).node
        link = node.intra_link if node is not None else None
    chosen = _intra_link(link, bandwidth, latency, dirs)
    nccl = None
    if any(x is not None for x in hardware):
        if algorithm is not None or compare or bandwidth is not None or latency is not None:
            flag = "--algorithm" if algorithm is not None else "--compare" if compare else "--bandwidth / --latency"
            raise InputError(f"{flag}: describes the textbook alpha-beta model; --gpu / --gpus-per-node / --inter-node-link ask for "
                             "NCCL's own choice of algorithm and protocol on that hardware (give one or the other)")  # fmt: skip
        if count < 2:
            raise InputError(f"--gpus: {count} rank; NCCL's model times a collective of at least 2 ranks (one rank moves nothing)")
        nccl = _nccl_hardware(hardware, dirs)
    return CollectiveRequest(op, algo, message, count, chosen, dtype_key, items, item_bytes, compare, nccl)


def _nccl_hardware(hardware: tuple[str | None, str | None, str | None], dirs: tuple) -> NcclHardware:
    """--gpu, --gpus-per-node and --inter-node-link read: the GPU, its node's size and network link."""
    from parcalc.presets import load_gpu, load_link
    from parcalc.results.parse import MAX_GPUS_PER_NODE, check_at_most
    from parcalc.units import parse_count

    gpu_name, per_node_text, inter_name = hardware
    gpu = load_gpu(gpu_name, dirs) if gpu_name is not None else None
    node = gpu.node if gpu is not None else None
    inter = load_link(inter_name if inter_name is not None else (node.inter_link if node else DEFAULT_INTER_NODE_LINK), dirs)
    per_node = parse_count(per_node_text, "--gpus-per-node") if per_node_text is not None else (node.gpus if node else 8)
    check_at_most(per_node, MAX_GPUS_PER_NODE, "--gpus-per-node", "GPUs per node")
    return NcclHardware(gpu, per_node, inter)


def _collective_result(req: CollectiveRequest) -> Result:
    from parcalc.core import collectives as co
    from parcalc.derivation import Column, Result, Table

    op, algo, message, count, chosen, compare = req.op, req.algorithm, req.message, req.gpus, req.link, req.compare
    beta, alpha = chosen.bandwidth_per_direction.value, chosen.latency.value
    m_term = co.size_term(message, req.items, req.item_bytes, req.dtype)
    derivations = list(co.cost_derivations(op, algo, m_term, count, beta, alpha))
    if op is co.Collective.ALL_REDUCE and (algo is co.Algorithm.RING or compare):
        derivations.append(co.seed002_ring_time(req.items if req.items is not None else message, req.item_bytes or 1.0, count, beta, alpha))
    tables: tuple[Table, ...] = ()
    if compare:
        rows = co.compare_algorithms(op, message, count, beta, alpha)
        columns = (
            Column("algorithm", "algorithm"), Column("steps", "steps"), Column("sent", "sent per worker", "B"),
            Column("received", "received per worker", "B"), Column("total", "total on network", "B"),
            Column("slide_formula", "approximation"), Column("slide_total", "approximate total", "B"),
            Column("slide_time", "approximate time"), Column("time", "time (alpha-beta)", "s"), Column("busbw", "busbw", "B/s"),
        )  # fmt: skip
        tables = (Table("algorithms", f"{op.value} of M = {message:,.0f} B over N = {count} workers", columns, tuple(
            (r.algorithm.value, r.cost.steps, r.cost.sent, r.cost.received, r.cost.total, r.slide_formula, r.slide_total,
             r.slide_time, r.time, r.busbw) for r in rows)),)  # fmt: skip
    inputs = (m_term, *(t for t in derivations[4].inputs if t.key in ("n", "alpha", "beta")))
    if req.hardware is not None:
        return _nccl_result(op, message, m_term, count, req.hardware, chosen, derivations)
    return Result(
        command="comm-volume",
        title=f"{algo.value} {op.value}: M = {message:,.0f} B over {count} workers on {chosen.name}",
        inputs=tuple(inputs),
        derivations=tuple(derivations),
        tables=tables,
        verdicts=(
            f"per worker: sends {derivations[1].value:,.0f} B, receives {derivations[2].value:,.0f} B; "
            f"all messages together: {derivations[3].value:,.0f} B",
        ),
        assumptions=(co.ALPHA_BETA, "nccl-tests convention: M is the whole array (all-gather: the output; reduce-scatter: the input)",
                     *((co.APPROXIMATIONS,) if compare and op is co.Collective.ALL_REDUCE else ()),
                     *((LATENCY_NOT_GIVEN,) if chosen.latency.source == LATENCY_NOT_GIVEN else ())),
        settings=(("collective", op.value), ("algorithm", algo.value), ("link", chosen.key)),
    )


def _nccl_result(op: Collective, message: float, m_term: Any, count: int, hardware: NcclHardware, intra: Link,
                 textbook: list) -> Result:  # fmt: skip
    """--collective on hardware (--gpu, --gpus-per-node or --inter-node-link): the time NCCL's own
    choice takes (parcalc.core.timing.nccl_call, the function fit's step model calls for every
    collective), nccl-tests' algbw and busbw; the textbook counts stay, its alpha-beta time is kept
    as time_alpha_beta."""
    from dataclasses import replace

    from parcalc.core.timing.nccl_call import nccl_call_derivations
    from parcalc.core.timing.network import node_fabric, placement
    from parcalc.derivation import Result
    from parcalc.units import format_time as _seconds

    gpu, per_node, inter = hardware.gpu, hardware.gpus_per_node, hardware.inter
    node = gpu.node if gpu is not None else None
    nics = node.nics if node is not None and per_node == node.gpus else per_node  # one NIC per GPU unless the preset's node says
    fabric = node_fabric(per_node, intra, inter, nics, gpu)
    group = placement(count, 1, per_node)
    (time, algbw, busbw), call = nccl_call_derivations(op, m_term, group, fabric)
    renamed = tuple(replace(d, key=f"{d.key}_alpha_beta", label=d.label.replace("(nccl-tests", "(alpha-beta, nccl-tests"))
                    if d.key in ("time", "algbw", "busbw") else d for d in textbook)  # fmt: skip
    where = f"{group.nodes} node{'s' if group.nodes > 1 else ''} of {per_node} GPUs" + (f" ({gpu.name})" if gpu is not None else "")
    network = f"{intra.name} inside a node" + (f", {nics} x {inter.name} per node" if group.nodes > 1 else "")
    return Result(
        command="comm-volume",
        title=f"{op.value}: M = {message:,.0f} B over {count} ranks on {where}, as NCCL runs it",
        inputs=(m_term, *time.inputs),
        derivations=(time, algbw, busbw, *renamed),
        verdicts=(f"NCCL would run {call.algorithm} with {call.protocol}: {_seconds(call.time)}, algbw "
                  f"{call.algbw / 1e9:.4g} GB/s, busbw {call.busbw / 1e9:.4g} GB/s (nccl-tests' conventions)",
                  f"the textbook {textbook[4].label.lower()}: {_seconds(textbook[4].value)}"),  # fmt: skip
        assumptions=(f"links: {network}; ranks consecutive on the nodes (nccl-tests' one process per GPU)",
                     *(("NCCL arch row sm80 (give --gpu for the GPU's own)",) if gpu is None else ()),
                     "nccl-tests convention: M is the whole array (all-gather: the output; reduce-scatter: the input)"),
        settings=(("collective", op.value), ("algorithm", call.algorithm), ("protocol", call.protocol), ("link", intra.key),
                  ("inter_node_link", inter.key), ("gpus_per_node", str(per_node)), *((("gpu", gpu.key),) if gpu is not None else ())),
    )  # fmt: skip


# --bandwidth alone describes a link by its bandwidth: the alpha-beta time keeps only the beta term.
LATENCY_NOT_GIVEN = "--latency not given: 0 s, so times are the bandwidth term alone (add --latency for the alpha term)"


def _intra_link(name: str | None, bandwidth: str | None, latency: str | None, dirs: tuple) -> Link:
    """--link NAME, or --bandwidth (and --latency, 0 when left out), which also override a named link's values."""
    from dataclasses import replace

    from parcalc.core.hardware import Link, Sourced
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    beta = parse_quantity(bandwidth, Dimension.BANDWIDTH, "--bandwidth", require_unit=True) if bandwidth is not None else None
    alpha = parse_quantity(latency, Dimension.TIME, "--latency", allow_zero=True, require_unit=True) if latency is not None else None
    given = "given on the command line"
    if name is None and (beta is not None or alpha is not None):
        if beta is None:
            raise InputError("--latency: give --bandwidth with it (or a --link preset)")
        alpha_term = Sourced(alpha, "s", given) if alpha is not None else Sourced(0.0, "s", LATENCY_NOT_GIVEN)
        return Link("given", "the given link", Sourced(beta, "B/s", given), alpha_term)
    from parcalc.presets import load_link

    chosen = load_link(name or DEFAULT_LINK, dirs)
    if beta is not None:
        chosen = replace(chosen, bandwidth_per_direction=Sourced(beta, "B/s", given))
    if alpha is not None:
        chosen = replace(chosen, latency=Sourced(alpha, "s", given))
    return chosen


def _model(args: dict[str, Any], dirs: tuple) -> TransformerModel:
    """From flags alone, seed 004's layer: weight matrices only, no biases, norms or positions."""
    return model_from_flags(ModelFlags(*(args[name] for name in ModelFlags._fields)), dirs, bare=True)


def _degrees(args: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(gpus, tp, pp, dp, cp) from --gpus and the degree flags, the strategy's own dimension taking
    the rest (cp's with --strategy cp); gpus = tp x pp x cp x dp."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    given = {k: parse_count(args[k], f"--{k}") for k in ("tp", "pp", "dp", "cp") if args[k] is not None}
    total = parse_count(args["gpus"], "--gpus") if args["gpus"] is not None else None
    own = {"ep": "dp", "dp": "dp", "zero1": "dp", "zero2": "dp", "zero3": "dp", "fsdp": "dp", "tp": "tp", "pp": "pp", "cp": "cp"}.get(args["strategy"].value)
    if own is not None and own not in given:
        others = given.get("tp", 1) * given.get("pp", 1) * given.get("dp", 1) * given.get("cp", 1)
        total = total if total is not None else DEFAULT_GPUS
        if total % others:
            raise InputError(f"--gpus: {total} GPUs do not split into the given degrees ({others} GPUs per {own} rank)")
        given[own] = total // others
    tp, pp, dp, cp = given.get("tp", 1), given.get("pp", 1), given.get("dp", 1), given.get("cp", 1)
    if total is not None and total != tp * pp * cp * dp:
        if cp > 1:
            raise InputError(f"--gpus: {total} is not tp x pp x cp x dp = {tp} x {pp} x {cp} x {dp} = {tp * pp * cp * dp}")
        raise InputError(f"--gpus: {total} is not tp x pp x dp = {tp} x {pp} x {dp} = {tp * pp * dp}")
    return tp * pp * cp * dp, tp, pp, dp, cp


def _strategy_request(args: dict[str, Any], dirs: tuple) -> StrategyRequest:
    from parcalc.core import comm
    from parcalc.core.dtypes import bytes_per_element, canonical_dtype
    from parcalc.errors import InputError
    from parcalc.results.parse import stated_no_ops
    from parcalc.units import parse_count

    name = args["strategy"].value
    shape = _model(args, dirs)
    args["_ep"], args["_etp"] = expert_flags(args["ep"], args["etp"], shape)
    if name == "ep" and shape.moe is None:
        raise InputError(f"--strategy ep: model {shape.key} has no experts (no moe: block)")
    par = _parallelism(args)
    dtype_key = canonical_dtype(args["dtype"])
    grad_key = canonical_dtype(args["grad_dtype"], "--grad-dtype") if args["grad_dtype"] else dtype_key
    seq = parse_count(args["seq_len"], "--seq-len") if args["seq_len"] is not None else shape.max_seq_len
    if seq == 0:
        raise InputError("--seq-len: required (the model gives no maximum sequence length)")
    global_batch = parse_count(args["batch"], "--batch") if args["batch"] is not None else par.gpus
    given_micro = parse_count(args["micro_batch"], "--micro-batch") if args["micro_batch"] is not None else None
    opts = _options(args)
    network = comm.Network(
        intra=_intra_link(args["link"], args["bandwidth"], args["latency"], dirs),
        inter=_inter_link(args["inter_node_link"], par.gpus > par.gpus_per_node, dirs),
    )
    work = comm.Workload(global_batch, given_micro or 1, seq, bytes_per_element(dtype_key),
                         bytes_per_element(grad_key, "--grad-dtype"), dtype_key, grad_key)  # fmt: skip
    zero = args["zero"] if name == "3d" else ZeroStage.ZERO0  # the other strategies name their own data-parallel flavour
    if opts.float8_all_gather and (name == "all" or par.data_parallel.value != "zero3"):
        raise InputError("--fp8-all-gather: torchao's FP8 all-gather is FSDP's (--strategy fsdp or zero3, or 3d with --zero 3)")
    no_ops = stated_no_ops(par.sequence_parallel, par.tp, zero, par.dp * par.cp)[2] if name != "all" else ()
    return StrategyRequest(shape, name, par, work, network, opts, given_micro, no_ops)


def _strategy_result(req: StrategyRequest) -> Result:
    from dataclasses import replace

    from parcalc.core import comm

    shape, name, par, work, network, opts, given_micro = req.model, req.strategy, req.layout, req.workload, req.network, req.options, req.micro_batch
    settings = [("model", shape.key), ("strategy", name), ("dtype", work.dtype), ("grad_dtype", work.grad_dtype),
                ("link", network.intra.key), ("inter_node_link", network.inter.key if network.inter else "none (one node)"),
                ("all_reduce_algorithm", opts.algorithm.value)]  # fmt: skip
    if name == "all":
        comparison = comm.compare_strategies(shape, work, par.gpus, network, opts, par.gpus_per_node, given_micro,
                                             cp=par.cp, cp_comm=par.cp_comm)  # fmt: skip
        return _comparison_result(shape, work, par.gpus, comparison, network, settings)
    work = work._replace(micro_batch=given_micro or comm.default_micro_batch(work, par))
    plan = comm.iteration_plan(shape, work, par, network, opts, strategy=name)
    settings += [("tp", str(par.tp)), ("pp", str(par.pp)), ("dp", str(par.dp)), ("data_parallel", par.data_parallel.value),
                 ("sequence_parallel", str(par.sequence_parallel).lower()), ("schedule", str(getattr(par.schedule, "value", par.schedule)))]  # fmt: skip
    if par.cp > 1:
        settings += [("cp", str(par.cp)), ("cp_comm", par.cp_comm)]
    if par.shard_group is not None:
        settings.append(("shard_group", str(par.shard_group)))
    if opts.float8_all_gather:
        settings.append(("fp8_all_gather", "true"))
    result = _plan_result(shape, work, par, plan, network, settings)
    return replace(result, assumptions=req.no_ops + tuple(result.assumptions)) if req.no_ops else result


def _parallelism(args: dict[str, Any]) -> Any:
    """Degrees, data-parallel flavour (the strategy, or --zero for 3d), schedule and node size."""
    from parcalc.core import comm
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    name = args["strategy"].value
    if name == "all":
        if (any(args[k] is not None for k in ("tp", "pp", "dp", "first_stage_layers", "last_stage_layers", "pipeline_layout"))
                or args["embedding_in_split"] or args["loss_in_split"]):  # fmt: skip
            raise InputError("--strategy all: gives all GPUs to one dimension at a time; use --gpus, not --tp/--pp/--dp "
                             "(or --first-stage-layers / --last-stage-layers: use --strategy pp or 3d)")
        gpus = parse_count(args["gpus"], "--gpus") if args["gpus"] is not None else DEFAULT_GPUS
        cp, _ = cp_flags(args["cp"], args["cp_comm"])
        if gpus % cp:
            raise InputError(f"--cp: {cp} does not divide the {gpus} GPUs; --strategy all gives each strategy gpus / cp in its dimension")
        tp, pp, dp = 1, 1, gpus // cp
    else:
        _, tp, pp, dp, cp = _degrees(args)
    cp_kind = cp_flags(None, args["cp_comm"])[1]
    if name == "all" and args["shard_group"] is not None:
        raise InputError("--shard-group: --strategy all compares each strategy with full sharding; give --strategy zero1, zero2, "
                         "fsdp or 3d --zero 1-3 with --shard-group")  # fmt: skip
    if name == "all" and (args["ep"] is not None or args["etp"] is not None):
        raise InputError("--ep / --etp: --strategy all gives all GPUs to one dimension at a time; use --strategy ep or 3d with --ep")
    zero = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}.get(name, int(args["zero"].value))
    first, last = stage_flags(args["first_stage_layers"], args["last_stage_layers"])
    schedule, chunks = pipeline_layout_chunks(args["pipeline_layout"], pp, args["schedule"],
                                              parse_count(args["chunks"], "--chunks") if args["chunks"] else None)  # fmt: skip
    return comm.Layout(
        tp=tp, pp=pp, dp=dp, zero=zero, sequence_parallel=args["sequence_parallel"],
        schedule=schedule, chunks=chunks if chunks is not None else 1, pipeline_layout=args["pipeline_layout"],
        gpus_per_node=parse_count(args["gpus_per_node"], "--gpus-per-node") if args["gpus_per_node"] is not None else 8,
        first_stage_layers=first, last_stage_layers=last, embedding_in_split=args["embedding_in_split"],
        loss_in_split=args["loss_in_split"], cp=cp, cp_comm=cp_kind, ep=args["_ep"], etp=args["_etp"],
        shard_group=shard_group_flag(args["shard_group"]),
    )  # fmt: skip


def _options(args: dict[str, Any]) -> Any:
    from parcalc.core import comm
    from parcalc.core.collectives import ALGORITHMS
    from parcalc.errors import InputError
    from parcalc.units import Dimension, parse_quantity

    algorithm = args["algorithm"] or Algorithm.RING
    if algorithm not in ALGORITHMS[Collective.ALL_REDUCE]:
        raise InputError(f"--algorithm: {algorithm.value} is not an all-reduce algorithm")
    bucket = parse_quantity(args["bucket_size"], Dimension.BYTES, "--bucket-size", require_unit=True) if args["bucket_size"] else None
    return comm.Options(
        algorithm=algorithm,
        bucket_bytes=bucket or comm.DDP_BUCKET_BYTES,
        first_bucket_bytes=bucket or comm.DDP_FIRST_BUCKET_BYTES,  # PyTorch: an explicit cap applies to the first bucket too
        ddp_first_iteration=args["ddp_first_iteration"], shard_padding=args["shard_padding"],
        reshard_root=args["reshard_root"], vocab_parallel=args["vocab_parallel"], recompute=_replays_forward(args["recompute"]),
        moe_imbalance=imbalance_flag(args["moe_imbalance"]), float8_all_gather=args["fp8_all_gather"],
    )  # fmt: skip


def _replays_forward(recompute: Recompute) -> bool:
    """Whether recomputation runs a layer's forward collectives again in backward: full recomputation
    re-runs the layer's whole forward function in backward, its TP / CP / EP collectives included
    (NVIDIA/Megatron-LM megatron/core/tensor_parallel/random.py, CheckpointFunction.backward calls
    the saved run_function again); selective recomputation re-runs the attention core alone (QK^T,
    softmax, dropout, attention over V: Korthikanti et al. 2022, section 5), which holds no
    collective. TorchTitan's op-level checkpointing keeps reduce-scatters but recomputes gathers:
    parcalc's fit counts that; this per-collective table does not model it."""
    from parcalc.errors import InputError

    if recompute is Recompute.OP:
        raise InputError("--recompute op: comm-volume counts whole replayed layers (full) or none (selective); fit's step time "
                         "counts op-level checkpointing's replayed gathers")  # fmt: skip
    return recompute is Recompute.FULL


def _inter_link(name: str | None, needed: bool, dirs: tuple) -> Link | None:
    if name is None and not needed:
        return None
    from parcalc.presets import load_link

    return load_link(name or DEFAULT_INTER_NODE_LINK, dirs)


def _workload_terms(shape: TransformerModel, work: Any, network: Any, per_strategy_micro_batch: bool = False) -> tuple[Term, ...]:
    from parcalc.derivation import Term

    terms = [
        Term("params", "P", "P", shape.total_params, "", f"parameters of {shape.name}", shape.source),
        Term("layers", "N_layer", r"N_{\mathrm{layer}}", shape.layers, "", "transformer layers"),
        Term("hidden", "D", "D", shape.hidden, "", "hidden size"),
        Term("heads", "n_H", "n_H", shape.heads, "", "attention heads"),
        Term("batch", "B", "B", work.global_batch, "", "sequences per iteration (global batch)"),
        Term("micro_batch", "b", "b", work.micro_batch, "", "sequences per micro-batch per replica"),
        Term("seq_len", "L", "L", work.seq_len, "", "sequence length"),
        Term("s", "s", "s", work.bytes_per_element, "B", f"bytes per {work.dtype} element"),
        Term("s_g", "s_g", "s_g", work.grad_bytes_per_element, "B", f"bytes per {work.grad_dtype} gradient"),
        Term("beta_intra", "β_intra", r"\beta_{\mathrm{intra}}", network.intra.bandwidth_per_direction.value, "B/s",
             f"{network.intra.name}, per direction", network.intra.bandwidth_per_direction.source),
        Term("alpha_intra", "α_intra", r"\alpha_{\mathrm{intra}}", network.intra.latency.value, "s", f"{network.intra.name}, latency",
             network.intra.latency.source),
    ]  # fmt: skip
    if per_strategy_micro_batch:
        terms = [t for t in terms if t.key != "micro_batch"]
    if network.inter is not None:
        terms += [
            Term("beta_inter", "β_inter", r"\beta_{\mathrm{inter}}", network.inter.bandwidth_per_direction.value, "B/s",
                 f"{network.inter.name}, per direction", network.inter.bandwidth_per_direction.source),
            Term("alpha_inter", "α_inter", r"\alpha_{\mathrm{inter}}", network.inter.latency.value, "s",
                 f"{network.inter.name}, latency", network.inter.latency.source),
        ]  # fmt: skip
    return tuple(terms)


def _calls_table(plan: CommPlan) -> Table:
    from parcalc.derivation import Column, Table

    columns = (
        Column("dimension", "group"), Column("stages", "where"), Column("phase", "phase"), Column("purpose", "what"),
        Column("op", "op"), Column("group_size", "group size"), Column("groups", "groups"), Column("calls", "calls/iter"),
        Column("mean_bytes_per_call", "bytes/call", "B"), Column("payload", "payload/iter", "B"), Column("algorithm", "algorithm"),
        Column("sent", "sent/device/iter", "B"), Column("received", "received/device/iter", "B"), Column("direction", "direction"),
        Column("link", "link"), Column("inter_node", "inter-node"), Column("time", "time/iter", "s"),
    )  # fmt: skip
    rows = tuple(
        (c.dimension, c.stages, c.phase, c.purpose, c.op.value, c.group_size, c.groups, c.calls, c.bytes_per_call,
         c.payload, c.algorithm.value, c.sent, c.received, c.direction, c.link, c.inter_node, c.time)
        for c in plan.calls
    )  # fmt: skip
    # the brief terminal form: which group does what, how much in both conventions (payload and per-device
    # traffic), how long; the rest is --detail full's
    return Table("collectives", "Collectives of one iteration (payload and traffic per group; 'groups' such groups run at once)",
                 columns, rows, brief_columns=("dimension", "phase", "purpose", "op", "payload", "sent", "time"))  # fmt: skip


def _conventions(plan: CommPlan) -> tuple[str, ...]:
    """One line per kind of collective naming both conventions: payload and per-device traffic."""
    from parcalc.units import format_bytes

    lines = []
    for total in plan.totals:
        where = f" {total.direction}" if total.direction else ""
        stage = f", stage {total.stage}" if plan.parallelism.pp > 1 else ""
        lines.append(
            f"{total.dimension} {total.op.value}{where}: payload (bytes aggregated) {format_bytes(total.payload)} per iteration; "
            f"per-device traffic {format_bytes(total.sent)} sent (group of {total.group_size}{stage})"
        )
    return tuple(lines)


def _plan_result(shape: TransformerModel, work: Any, par: Any, plan: CommPlan, network: Any, settings: list) -> Result:
    from parcalc.derivation import Result

    return Result(
        command="comm-volume",
        title=(f"Communication of one iteration: {plan.strategy} ({par.tp} TP x {par.pp} PP"
               + (f" x {par.cp} CP" if par.cp > 1 else "") + f" x {par.dp} DP = {par.gpus} GPUs) on {shape.name}"),
        inputs=_workload_terms(shape, work, network),
        derivations=plan.derivations,
        tables=(_calls_table(plan),),
        verdicts=_conventions(plan),
        assumptions=plan.assumptions,
        settings=tuple(settings),
        # the brief terminal form (parcalc.render.brief): each collective by what it moves and how long it takes
        key_terms=("sent_per_device", "comm_time"),
    )


def _comparison_result(shape: TransformerModel, work: Any, gpus: int, comparison: StrategyComparison, network: Any,
                       settings: list) -> Result:  # fmt: skip
    from parcalc.derivation import Column, Derivation, Result, Table

    derivations = []
    rows = []
    totals = []
    for plan in comparison.plans:
        for d in plan.derivations:  # dataclasses.replace without its per-call field walk (~10 µs a call)
            derivations.append(Derivation(**{**vars(d), "key": f"{plan.strategy}.{d.key}", "label": f"{plan.strategy}: {d.label}"}))
        for c in plan.calls:
            rows.append((plan.strategy, c.dimension, c.stages, c.phase, c.purpose, c.op.value, c.group_size, c.groups,
                         c.calls, c.payload, c.sent, c.direction, c.time))  # fmt: skip
        time = next((d.value for d in plan.derivations if d.key == "comm_time"), 0.0)
        sent = next((d.value for d in plan.derivations if d.key == "sent_per_device"), 0.0)
        totals.append((plan.strategy, plan.parallelism.tp, plan.parallelism.pp, plan.parallelism.dp, plan.workload.micro_batch, sent, time))
    columns = (
        Column("strategy", "strategy"), Column("dimension", "group"), Column("stages", "where"), Column("phase", "phase"),
        Column("purpose", "what"), Column("op", "op"), Column("group_size", "group size"), Column("groups", "groups"),
        Column("calls", "calls/iter"), Column("payload", "payload/iter", "B"),
        Column("sent", "sent/device/iter", "B"), Column("direction", "direction"), Column("time", "time/iter", "s"),
    )  # fmt: skip
    total_columns = (
        Column("strategy", "strategy"), Column("tp", "TP"), Column("pp", "PP"), Column("dp", "DP"),
        Column("micro_batch", "micro-batch"), Column("sent", "sent/device/iter", "B"), Column("time", "comm time/iter", "s"),
    )  # fmt: skip
    verdicts = [f"{name} skipped: {why}" for name, why in comparison.skipped]
    if totals:
        fastest = min(totals, key=lambda t: t[-1])
        verdicts.insert(0, f"least communication time: {fastest[0]} ({fastest[-1]:.4g} s per iteration, no overlap)")
    assumptions: dict[str, None] = {}
    for plan in comparison.plans:
        assumptions.update(dict.fromkeys(plan.assumptions))
    return Result(
        command="comm-volume",
        title=f"Communication of one iteration, every strategy on {gpus} GPUs: {shape.name}",
        inputs=_workload_terms(shape, work, network, per_strategy_micro_batch=True),
        derivations=tuple(derivations),
        tables=(  # the full table first: CSV output writes the first table
            Table("collectives", "Per strategy: every collective (payload per group)", columns, tuple(rows)),
            Table("totals", "Per strategy: the busiest device", total_columns, tuple(totals)),
        ),
        verdicts=tuple(verdicts),
        assumptions=tuple(assumptions),
        settings=tuple(settings + [("gpus", str(gpus))]),
        # the brief terminal form (parcalc.render.brief): the per-strategy totals answer "which strategy communicates least"
        key_terms=tuple(d.key for d in derivations if d.key.endswith(".comm_time")), brief_tables=("totals",),
    )
