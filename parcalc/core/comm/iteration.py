"""One training iteration's plan: validate the configuration, let each strategy family add its
rows, merge the rows that differ only in their stage, and derive the headlines."""

from collections.abc import Sequence

from parcalc.core.collectives import Collective
from parcalc.core.comm.context import context_parallel_rows, cp_assumptions, cp_headlines, mixer_cp_headlines
from parcalc.core.comm.data_parallel import (
    data_parallel_rows,
    dp_assumptions,
    dp_headlines,
)
from parcalc.core.comm.expert import check_imbalance, ep_assumptions, ep_headlines, expert_rows
from parcalc.core.comm.pipeline import (
    embedding_sync_rows,
    pipeline_rows,
    pp_assumptions,
    pp_headline,
)
from parcalc.core.comm.plan import (
    DEFAULT_OPTIONS,
    INTERLEAVED,
    Builder,
    CollectiveCall,
    CommPlan,
    Layout,
    Network,
    Options,
    OpTotal,
    Workload,
    choice_value,
    headline,
    term,
)
from parcalc.core.comm.tensor import tensor_parallel_rows, tp_assumptions, tp_headlines
from parcalc.core.comm.tensors import StageTensors, device_tensors, stage_ranges
from parcalc.core.model import TransformerModel
from parcalc.core.stages import split_text, stage_split
from parcalc.derivation import Derivation
from parcalc.errors import InputError


def validate(model: TransformerModel, work: Workload, par: Layout) -> int:
    """Check the configuration; returns the number of micro-batches per replica per iteration."""
    for flag, value in (("--tp", par.tp), ("--pp", par.pp), ("--dp", par.dp), ("--gpus-per-node", par.gpus_per_node),
                        ("--chunks", par.chunks), ("--batch", work.global_batch), ("--micro-batch", work.micro_batch),
                        ("--seq-len", work.seq_len), ("--cp", par.cp)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{flag}: must be a whole number of at least 1, got {value!r}")
    if par.cp > 1:
        from parcalc.core.context import check_context_parallel

        check_context_parallel(model, work.seq_len, par)
        if model.linear_attention is not None or model.mamba is not None:  # the recurrent mixers' all-to-alls over heads (Megatron-Core)
            from parcalc.core.hybrid_context import check_mixer_cp

            check_mixer_cp(model, par.tp, par.cp)
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
        if model.mamba is not None:  # Megatron-LM megatron/core/ssm/mamba_mixer.py @d98e8a64, lines 262 and 270
            for what, count in (("heads", model.mamba.heads), ("groups", model.mamba.groups)):
                if count % par.tp:
                    raise InputError(f"--tp: {par.tp} does not divide the {count} Mamba-2 {what} (Megatron-Core's MambaMixer "
                                     f"asserts n{what} % tp_size == 0)")  # fmt: skip
    if par.sequence_parallel and (work.seq_len // par.cp) % par.tp:
        shard = f"the sequence shard s/cp = {work.seq_len // par.cp}" if par.cp > 1 else f"the sequence length {work.seq_len}"
        raise InputError(f"--sequence-parallel: {shard} must be a multiple of --tp {par.tp}")
    slots = model.layers + int(par.embedding_in_split) + int(par.loss_in_split)  # the embedding / loss may take a layer's slot
    if par.pp * par.chunks > slots:
        what = f"--pp {par.pp} x --chunks {par.chunks}" if par.chunks > 1 else f"--pp {par.pp}"
        raise InputError(f"--pp: {what} is more stages than the model's {slots} layer slots" if slots > model.layers
                         else f"--pp: {what} is more stages than the model's {model.layers} layers")  # fmt: skip
    if par.chunks > 1 and par.schedule != INTERLEAVED:
        raise InputError("--chunks: model chunks need --schedule interleaved")
    if par.pipeline_layout is not None:  # Megatron-LM's layout string: its letters, chunks and schedule (parcalc.core.pipeline_layout)
        from parcalc.core.pipeline_layout import check_layout_settings

        check_layout_settings(par, model)
    elif par.first_stage_layers is not None or par.last_stage_layers is not None or par.embedding_in_split or par.loss_in_split:
        stage_split(model.layers, par.pp, par.first_stage_layers, par.last_stage_layers, par.chunks,
                    embedding_in_split=par.embedding_in_split, loss_in_split=par.loss_in_split)  # fmt: skip
    elif par.schedule == INTERLEAVED and model.layers % (par.pp * par.chunks):
        raise InputError(f"--chunks: {model.layers} layers do not split into {par.pp} stages x {par.chunks} chunks evenly")
    if model.moe is not None or par.ep != 1 or par.etp is not None:
        from parcalc.core.expert_parallel import expert_layout

        expert_layout(model, par)  # Megatron-Core's folding rules, and no --ep on a dense model
    if par.shard_group is not None:
        from parcalc.core.sharding import check_shard_group

        check_shard_group(par.shard_group, par.dp * par.cp, par.zero)
    if work.global_batch % par.dp:
        raise InputError(f"--batch: the global batch {work.global_batch} is not a multiple of --dp {par.dp}")
    per_replica = work.global_batch // par.dp
    if per_replica % work.micro_batch:
        raise InputError(
            f"--micro-batch: {work.micro_batch} does not divide the {per_replica} sequences each data-parallel replica "
            "processes per iteration (--batch / --dp)"
        )
    return per_replica // work.micro_batch


def iteration_plan(model: TransformerModel, work: Workload, par: Layout, network: Network,
                   opts: Options = DEFAULT_OPTIONS, strategy: str = "") -> CommPlan:  # fmt: skip
    """Every collective of one training iteration, with the headline payloads as derivations."""
    micro_batches = validate(model, work, par)
    check_imbalance(opts.moe_imbalance, model.moe.experts if model.moe is not None else None)
    builder = Builder(par, network, opts)
    per_stage = [device_tensors(model, par, s, opts) for s in range(par.pp)]
    layers = tuple(sum(len(r) for r in ranges) for ranges in stage_ranges(model.layers, par))
    shard = work._replace(seq_len=work.seq_len // par.cp)  # each CP rank's tokens: what TP, SP and PP move
    float8 = _float8_weights(model, par, opts)
    data_parallel_rows(builder, per_stage, work, par, opts, micro_batches, float8)
    tensor_parallel_rows(builder, model, shard, par, opts, layers, per_stage, micro_batches)
    context_parallel_rows(builder, model, work, par, opts, layers, micro_batches)
    pipeline_rows(builder, model, shard, par, micro_batches)
    embedding_sync_rows(builder, model, work, par, opts)
    moe_per_stage = [s.moe_layers for s in per_stage]
    expert_rows(builder, model, work, par, opts, moe_per_stage, micro_batches)
    rows = _merge(builder.rows, par.pp)
    derivations = _headlines(model, work, par, opts, per_stage, layers, micro_batches, float8)
    if model.moe is not None:
        s = term("s", "s", "s", work.bytes_per_element, "B", f"bytes per {work.dtype or 'parameter/activation'} element")
        s_g = term("s_g", "s_g", r"s_{g}", work.grad_bytes_per_element, "B", f"bytes per {work.grad_dtype or 'gradient'} element")
        derivations += tuple(ep_headlines(model, work, par, opts, moe_per_stage, s, s_g, micro_batches))
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


def _describe(par: Layout) -> str:
    parts = []
    if par.dp > 1:
        parts.append(f"{par.data_parallel.value} {par.dp}")
    if par.shard_group is not None and par.shard_group < par.dp * par.cp:
        parts.append(f"shard group {par.shard_group}")
    if par.tp > 1:
        parts.append(f"tp {par.tp}" + (" + sp" if par.sequence_parallel else ""))
    if par.cp > 1:
        parts.append(f"cp {par.cp} ({choice_value(par.cp_comm)})")
    if par.pp > 1:
        parts.append(f"pp {par.pp} ({choice_value(par.schedule)})")
    if par.ep > 1:
        parts.append(f"ep {par.ep}" + (f" (etp {par.etp})" if par.etp is not None and par.etp != par.tp else ""))
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


def _float8_weights(model: TransformerModel, par: Layout, opts: Options) -> frozenset[str]:
    """The Float8 weights' names (layer 0's) FSDP gathers in FP8: under Options.float8_all_gather with ZeRO-3, else none."""
    from parcalc.core.layout import DataParallel

    if not opts.float8_all_gather or par.data_parallel is not DataParallel.ZERO3:
        return frozenset()
    from parcalc.core.comm.float8_all_gather import float8_names

    return float8_names(model)


def _headlines(model: TransformerModel, work: Workload, par: Layout, opts: Options, per_stage: list[StageTensors],
               layers: tuple[int, ...], micro_batches: int, float8: frozenset[str] = frozenset()) -> tuple[Derivation, ...]:  # fmt: skip
    out: list[Derivation] = []
    s = term("s", "s", "s", work.bytes_per_element, "B", f"bytes per {work.dtype or 'parameter/activation'} element")
    s_g = term("s_g", "s_g", r"s_{g}", work.grad_bytes_per_element, "B", f"bytes per {work.grad_dtype or 'gradient'} element")
    shard = work._replace(seq_len=work.seq_len // par.cp)
    if par.dp * par.cp > 1:
        out += dp_headlines(par, opts, per_stage, s, s_g, micro_batches, float8)
    if par.tp > 1:
        out += tp_headlines(model, shard, par, opts, layers, s, micro_batches)
    if par.cp > 1:
        out += cp_headlines(model, work, par, opts) + mixer_cp_headlines(model, work, par)
    if par.pp > 1:
        out.append(pp_headline(model, shard, par, s))
    return tuple(out)


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
                sent_slot = sent.setdefault(stage, {})
                sent_slot[key] = max(sent_slot.get(key, 0.0), row.sent)
    busiest = max(time, key=lambda s: sum(time[s].values()))
    names = {"dp": "data-parallel", "tp": "tensor-parallel", "pp": "pipeline", "embedding": "embedding sync", "cp": "context-parallel",
             "ep": "expert-parallel all-to-all", "etp": "expert tensor-parallel", "edp": "expert data-parallel"}
    by_dim_time: dict[str, float] = {}
    by_dim_sent: dict[str, float] = {}
    for key, value in time[busiest].items():
        by_dim_time[key[0]] = by_dim_time.get(key[0], 0.0) + value
    for key, value in sent.get(busiest, {}).items():
        by_dim_sent[key[0]] = by_dim_sent.get(key[0], 0.0) + value
    t_terms = tuple(term(f"t_{d}", f"t_{d}", rf"t_{{\mathrm{{{d}}}}}", v, "s", f"{names.get(d, d)} collectives")
                    for d, v in by_dim_time.items())  # fmt: skip
    s_terms = tuple(term(f"s_{d}", f"S_{d}", rf"S_{{\mathrm{{{d}}}}}", v, "B", f"sent in {names.get(d, d)} collectives")
                    for d, v in by_dim_sent.items())  # fmt: skip
    where = f" (a device of stage {busiest})" if len(time) > 1 else ""
    out = []
    if s_terms:
        out.append(headline(
            "sent_per_device", f"Bytes one device sends per iteration{where}", "S_dev", r"S_{\mathrm{dev}}",
            " + ".join(f"${t.key}" for t in s_terms), " + ".join(f"${t.key}" for t in s_terms), s_terms,
            sum(t.value for t in s_terms), "per-device traffic: the algorithm's bytes per worker, summed over calls",
        ))  # fmt: skip
    out.append(headline(
        "comm_time", f"Communication time per iteration{where}, no overlap", "T_comm", r"T_{\mathrm{comm}}",
        " + ".join(f"${t.key}" for t in t_terms), " + ".join(f"${t.key}" for t in t_terms), t_terms,
        sum(t.value for t in t_terms), "alpha-beta time of every call on its link, one after another",
    ))  # fmt: skip
    return tuple(out)


def _assumptions(model: TransformerModel, par: Layout, opts: Options) -> tuple[str, ...]:
    out = [
        "payload ('bytes aggregated') = size of each call summed over calls; per-device traffic = bytes one device sends with the algorithm",
        ("Megatron rank order: TP ranks adjacent, then DP, then PP" if par.cp == 1 else "Megatron rank order \"tp-cp-ep-dp-pp\": TP ranks adjacent, then CP, then DP, then PP")
        + "; a group spanning two nodes runs at the inter-node link's speed",
        "no overlap of communication with computation or with other communication",
    ]
    out += dp_assumptions(par, opts) if par.dp * par.cp > 1 else []
    out += tp_assumptions(model, par, opts)
    out += cp_assumptions(model, par, opts)
    counts = tuple(sum(len(r) for r in ranges) for ranges in stage_ranges(model.layers, par))
    if len(set(counts)) > 1:  # equal stages need no word
        how = (f"--pipeline-layout {par.pipeline_layout}" if par.pipeline_layout is not None
               else "the embedding / loss as layer slots, --embedding-in-split / --loss-in-split" if par.embedding_in_split or par.loss_in_split
               else "Megatron-LM's uneven split, --first-stage-layers / --last-stage-layers" if par.first_stage_layers is not None
               or par.last_stage_layers is not None else "as even as possible, earlier stages taking any remainder")  # fmt: skip
        out.append(f"pipeline stages hold {split_text(counts)} layers ({how}); per-stage TP and DP volumes follow each stage's layers")
    out += pp_assumptions(par)
    out += ep_assumptions(model, par, opts)
    return tuple(out)
