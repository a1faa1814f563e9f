"""`fit`'s flags read into a typed request: the model, the Training, the cluster of each GPU type, the
run's plan, and what is asked: the strategy table, one pinned configuration (a Config: a Layout and how
each replica runs on it), or the search over a SearchSpace. parcalc.results.fit computes the Result."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.choices import Mlp, Offload, Optimizer, Precision, Recompute, ZeroStage
from parcalc.frozen import frozen
from parcalc.results.cluster import cluster_from_flags
from parcalc.results.parse import (
    MAX_SEARCH_BATCH,
    check_at_most,
    compile_loss_flag,
    cp_comm_note,
    cp_flags,
    expert_activation_flag,
    expert_flags,
    fp4_gpu_check,
    fp8_all_gather_flag,
    fp8_recipe_flag,
    framework_recomputes,
    framework_runs,
    framework_sequence_parallel,
    framework_zero_stage,
    kernels_flag,
    moe_timing_flags,
    mxfp8_gpu_check,
    power_limited,
    preset_dirs,
    recompute_layers_flag,
    recompute_modules_flag,
    shard_group_flag,
    stage_flags,
)

if TYPE_CHECKING:
    from parcalc.core.fit import Cluster, Config, Training
    from parcalc.core.fit_search import SearchSpace
    from parcalc.core.model import TransformerModel
    from parcalc.core.training_cost import RunPlan

DEFAULT_TOP = 5
CP_SEARCH_MIN_SEQ_LEN = 16384  # parcalc.core.fit_search.CP_MIN_SEQ_LEN (not imported here: start-up stays light)


class FitMode(str, Enum):
    """What fit is asked: the strategy table, one configuration (--tp, --pp, --dp), or --search."""

    STRATEGIES = "strategies"
    CONFIGURATION = "configuration"
    SEARCH = "search"


@frozen
class FitRequest:
    """What `fit` is asked, parsed (module docstring). Several clusters only with the search, which
    compares the GPU types; the fields of one mode are left at their defaults in the others."""

    model: TransformerModel
    training: Training
    clusters: tuple[Cluster, ...]  # one per --gpu, in order
    gpu_keys: tuple[str, ...]  # each cluster's GPU preset name (settings.gpu; "none" for --capacity and --peak)
    plans: tuple[RunPlan | None, ...]  # the run on each GPU type (None: no --tokens / --iterations)
    mode: FitMode
    settings: tuple[tuple[str, str], ...]  # how it was asked, as the Result's settings
    rank_by: str = "time"  # the search's ranking: time or cost
    micro_batch: int = 1  # the strategy table's micro-batch size
    recomputes: tuple[Recompute, ...] = ()  # the strategy table's recomputations
    max_layers: bool = True  # the strategy table's deepest-model column
    runnable_only: bool = False  # the strategy table: only the families --framework's stack runs (given explicitly)
    config: Config | None = None  # the pinned configuration
    no_ops: tuple[str, ...] = ()  # flags the configuration takes as no-ops
    notes: tuple[str, ...] = ()  # what parsing chose for a flag not given: --cp-comm's framework default
    space: SearchSpace | None = None  # what the search tries
    top: int = DEFAULT_TOP  # the search's layouts shown
    explain: bool = False  # the search's best with every derivation

    @property
    def cluster(self) -> Cluster:
        return self.clusters[0]


def request(model: str | None = None, layers: str | None = None, hidden: str | None = None,
            heads: str | None = None, kv_heads: str | None = None, ffn_hidden: str | None = None,
            mlp: Mlp | None = None, vocab: str | None = None, tied: bool | None = None, gpus: str | None = None,
            gpu: list[str] | None = None, gpus_per_node: str | None = None, batch: str | None = None,
            seq_len: str | None = None, micro_batch: list[str] | None = None,
            recompute: list[Recompute] | None = None, zero: list[ZeroStage] | None = None,
            shard_group: str | None = None, ep: str | None = None, etp: str | None = None,
            moe_dispatcher: str | None = None, max_nodes_per_token: str | None = None,
            ep_overlap: str | None = None, moe_imbalance: str | None = None, moe_routing: str | None = None,
            expert_activation: str | None = None,
            sequence_parallel: bool | None = None,
            interleaved: bool = True, allow_cross_node_tp: bool = False, precision: Precision | None = None,
            fp8_recipe: str | None = None, optimizer: Optimizer = Optimizer.ADAMW,
            offload: list[Offload] | None = None, host_link: str | None = None, flash_attention: bool = True,
            compile_: bool = False, compile_loss: bool = False, fp8_all_gather: bool = False, kernels: str | None = None,
            dropout: bool | None = None,
            capacity: str | None = None, reserve: str | None = None, dtype: str | None = None,
            peak: str | None = None, efficiency: str | None = None, link: str | None = None,
            inter_node_link: str | None = None, nics_per_node: str | None = None, framework: str | None = None,
            dp_overlap: bool | None = None, tp_comm_overlap: bool | None = None, ideal_network: bool = False,
            fp32_grads: bool | None = None, tp: str | None = None, pp: str | None = None, dp: str | None = None,
            cp: str | None = None, cp_comm: str | None = None, schedule: str | None = None, chunks: str | None = None,
            first_stage_layers: str | None = None, last_stage_layers: str | None = None, pipeline_layout: str | None = None,
            embedding_in_split: bool = False, loss_in_split: bool = False, search: bool = False,
            top: int | None = None, explain: bool = False, max_layers: bool = True, tokens: str | None = None,
            iterations: str | None = None, gpu_power: str | None = None, pue: str | None = None,
            price: list[str] | None = None, rank_by: str | None = None, presets: list[Path] | None = None,
            recompute_layers: str | None = None, recompute_modules: str | None = None,
            power_limit: str | None = None) -> FitRequest:  # fmt: skip
    """The request from `fit`'s flag texts; bad input raises InputError naming the flag."""
    from parcalc.core.fit import Training
    from parcalc.errors import InputError
    from parcalc.results.model import ModelFlags, model_and_seq_len
    from parcalc.units import Dimension, parse_count, parse_quantity

    dirs = preset_dirs(presets)
    if gpus is None:
        raise InputError("--gpus: how many GPUs? (e.g. --gpus 8)")
    shape, seq = model_and_seq_len(ModelFlags(model, layers, hidden, heads, kv_heads, ffn_hidden, mlp, vocab, tied), seq_len, dirs)
    from parcalc.core.timing.framework import kernel_set
    from parcalc.presets import load_framework

    profile = load_framework(framework if framework is not None else "megatron", dirs)
    from parcalc.presets import load_gpu

    names = list(gpu or [])
    if len(set(names)) != len(names):
        raise InputError("--gpu: each GPU type once (several --gpu compare GPU types in --search)")
    if len(names) > 1 and not search:
        raise InputError("--gpu: several GPU types are compared by --search only; give one --gpu for one configuration or the table")
    if len(names) > 1 and (capacity is not None or peak is not None):
        raise InputError("--capacity / --peak: describe one GPU; not with several --gpu")
    gpu_name = names[0] if names else None
    device = load_gpu(gpu_name, dirs) if gpu_name is not None and dtype is None else None
    for name in names if precision is not None and peak is None else ():  # NVFP4 and MXFP8 on Blackwell only, each GPU compared
        fp4_gpu_check(precision, load_gpu(name, dirs))
        if precision is Precision.FP8:
            mxfp8_gpu_check(fp8_recipe, load_gpu(name, dirs))
    if precision is None:  # the default must hold on the GPU given: mixed-bf16, or mixed-fp16 without bf16 (V100)
        from parcalc.results.parse import sixteen_bit_default

        sixteen, _ = sixteen_bit_default(device)
        precision = Precision.MIXED_FP16 if sixteen == "fp16" else Precision.MIXED_BF16
    elif device is not None and peak is None and precision.gemm_dtype not in device.dtypes:  # name the flag that was typed
        raise InputError(f"--precision {precision.value}: {device.name} has no {precision.gemm_dtype} rate in its datasheet "
                         f"(it lists {', '.join(device.dtypes)}); choose another --precision, or --dtype for the GEMMs")  # fmt: skip
    cluster = cluster_from_flags(gpus, gpu_name, gpus_per_node, capacity, dtype or precision.gemm_dtype, peak, efficiency, link, inter_node_link,
                       nics_per_node, dp_overlap, tp_comm_overlap, allow_cross_node_tp, profile, dirs, ideal_network=ideal_network,
                       power_limit=power_limit)  # fmt: skip
    plans = _run_plans(names, tokens, iterations, gpu_power, pue, price, rank_by, search, dirs, power_limit=power_limit, peak_given=peak is not None)
    ranking = _rank_by(rank_by, plans, len(names)) if search else "time"
    from parcalc.core.training_setup import DEFAULT_RESERVE_BYTES

    mixed = precision in (Precision.MIXED_BF16, Precision.MIXED_FP16) or precision.quantised  # fp8, fp4: bf16 weights, fp32 master
    if fp32_grads and not mixed:
        raise InputError("--fp32-grads: applies to mixed precision (fp32 gradients beside 16-bit weights)")
    training = Training(
        global_batch=parse_count(batch, "--batch") if batch is not None else cluster.gpus, seq_len=seq, precision=precision,
        optimizer=optimizer, flash_attention=flash_attention, dropout=dropout,
        fp32_grads=(profile.fp32_grads if fp32_grads is None else fp32_grads) and mixed,
        reserve=parse_quantity(reserve, Dimension.BYTES, "--reserve", allow_zero=True, require_unit=True) if reserve is not None else DEFAULT_RESERVE_BYTES,
        offload_optimizer=Offload.OPTIMIZER in (offload or ()), offload_activations=Offload.ACTIVATIONS in (offload or ()),
        host_link=_host_link(host_link, offload, dirs, cluster.gpu), fp8_recipe=fp8_recipe_flag(fp8_recipe, precision), compiled=compile_,
        compiled_loss=compile_loss_flag(compile_loss, compile_, profile.step_memory),
        float8_all_gather=fp8_all_gather_flag(fp8_all_gather, precision, profile.step_memory),
        recompute_modules=recompute_modules_flag(recompute_modules),
        kernels=kernels_flag(kernels),
        expert_activation=expert_activation_flag(expert_activation, shape),
    )  # fmt: skip
    cluster = cluster.for_training(training)  # MXFP8's block-scaled GEMM share where the GPU preset measures one
    sizes = tuple(parse_count(b, "--micro-batch") for b in micro_batch) if micro_batch else None
    given_recomputes = tuple(dict.fromkeys(recompute)) if recompute else None
    if framework is not None:  # what the chosen stack does not run is refused, and left out of the search
        framework_runs(profile, given_recomputes or (), compile_)
    if search:
        from parcalc.core.fit_search import RECOMPUTES

        recomputes = given_recomputes or (framework_recomputes(profile, RECOMPUTES) if framework is not None else RECOMPUTES)
    else:
        from parcalc.core.memory_timeline import recompute_reason

        # the table's rows: those the stack's step walk offers (hf: none and full; selective is refused below when asked)
        recomputes = given_recomputes or tuple(r for r in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
                                               if recompute_reason(profile.step_memory, r) is None)  # fmt: skip
    for asked in given_recomputes or ():  # a recomputation the framework's stack does not offer: refused here, not row by row
        from parcalc.core.memory_timeline import recompute_reason

        if (reason := recompute_reason(profile.step_memory, asked)) is not None:
            raise InputError(reason)
    if Recompute.OP in (given_recomputes or ()) and (shape.moe is not None or shape.mla is not None):
        from parcalc.core.recompute import check_op_supported

        check_op_supported(shape)
    if training.recompute_modules is not None:  # Megatron's modules: what "selective" means, in the table, one configuration and the search
        from parcalc.core.recompute import check_modules

        if given_recomputes is not None and Recompute.SELECTIVE not in given_recomputes:
            raise InputError(f"--recompute-modules: needs --recompute selective (Megatron-LM applies recompute_modules with "
                             f"--recompute-granularity selective), got --recompute {', '.join(r.value for r in given_recomputes)}")  # fmt: skip
        check_modules(training.recompute_modules, Recompute.SELECTIVE, shape)
    n_recompute = recompute_layers_flag(recompute_layers)
    if n_recompute is not None and not search and tp is None and pp is None and dp is None:
        raise InputError("--recompute-layers: describes one configuration (--tp, --pp, --dp with --recompute full); the table "
                         "and --search do not vary it")  # fmt: skip
    if n_recompute is not None and search:
        raise InputError("--recompute-layers: describes one configuration (without --search); the search tries none, selective, full and op")
    pinned = {name: parse_count(value, f"--{name}") for name, value in (("tp", tp), ("pp", pp), ("dp", dp)) if value is not None}
    first, last = stage_flags(first_stage_layers, last_stage_layers)
    # the split's pinned fields, as Config and SearchSpace name them
    ends: dict[str, Any] = {"first_stage_layers": first, "last_stage_layers": last, "embedding_in_split": embedding_in_split,
            "loss_in_split": loss_in_split}  # fmt: skip
    c, cp_kind = cp_flags(cp, cp_comm, profile)  # not given: the stack's own exchange (torchtitan: all-gather)
    cp_notes = cp_comm_note(cp_comm, profile) if c > 1 or (search and cp is None and training.seq_len >= CP_SEARCH_MIN_SEQ_LEN) else ()
    if c > 1 or cp is not None:
        if not pinned and not search:
            raise InputError("--cp: applies to one configuration (--tp, --pp, --dp) or pins it for --search; the strategy table "
                             "does not try context parallelism")  # fmt: skip
        ends = {**ends, "cp": c, "cp_comm": cp_kind}
        settings_cp = [("cp", str(c)), ("cp_comm", cp_kind)]
    elif search:  # the search tries cp for long sequences (fit_search.SearchSpace.cp_values), with this exchange
        ends = {**ends, "cp_comm": cp_kind}
        settings_cp = [("cp_comm", cp_kind)] if training.seq_len >= CP_SEARCH_MIN_SEQ_LEN else []
    else:
        settings_cp = []
    expert = dict(zip(("ep", "etp"), expert_flags(ep, etp, shape), strict=True))
    if (ep is not None or etp is not None) and not (search or pinned):
        raise InputError("--ep / --etp: apply to one configuration (--tp, --pp, --dp) or, --ep, pin it for --search")
    if etp is not None and search:
        raise InputError("--etp: describes one configuration (--tp, --pp, --dp); the search keeps etp = tp")
    if search and ep is not None:
        ends = {**ends, "ep": expert["ep"]}
    ends = {**ends, **moe_timing_flags(moe_dispatcher, max_nodes_per_token, ep_overlap, moe_imbalance, shape, moe_routing)}
    sg = shard_group_flag(shard_group)
    if sg is not None:
        if not (search or pinned):
            raise InputError("--shard-group: applies to one configuration (--tp, --pp, --dp with --zero 1-3) or pins it for --search; "
                             "the strategy table shards over every data-parallel rank")  # fmt: skip
        ends = {**ends, "shard_group": sg}
        settings_cp = [*settings_cp, ("shard_group", str(sg))]
    if (first is not None or last is not None) and not (search or pinned):
        flag = "--first-stage-layers" if first is not None else "--last-stage-layers"
        raise InputError(f"{flag}: applies to one configuration (--tp, --pp, --dp) or to --search with --pp")
    if pipeline_layout is not None:
        if not (search or pinned):  # the search keeps it fixed: pp dividing its stages (parcalc.core.pipeline_layout.search_reason)
            raise InputError("--pipeline-layout: gives one configuration's pipeline (with --tp, --pp, --dp) or the search's; not the "
                             "strategy table")  # fmt: skip
        ends = {**ends, "pipeline_layout": pipeline_layout}
    if not search and (schedule is not None or chunks is not None) and not pinned:
        raise InputError("--schedule / --chunks: give the configuration with --tp, --pp and --dp")
    keys: dict[str | None, str] = {name: _gpu_key(name, dirs) for name in names}  # settings.gpu: the preset name; gpu_name: its display name
    settings = [("model", shape.key), ("gpu", keys.get(gpu_name, "none")), ("gpu_name", cluster.gpu_name), ("precision", precision.value), ("optimizer", optimizer.value),
                ("flash_attention", str(flash_attention).lower()), ("compile", str(compile_).lower()), ("framework", profile.key),
                ("kernels", kernel_set(training, profile)),
                ("mode", "search" if search else "configuration" if pinned else "strategies")] + settings_cp  # fmt: skip
    if offload:
        settings.append(("offload", ",".join(dict.fromkeys(o.value for o in offload))))
    if ideal_network:
        settings.append(("network", "ideal"))
    if compile_loss:
        settings.append(("compile_loss", "true"))
    if fp8_all_gather:
        settings.append(("fp8_all_gather", "true"))
    if training.recompute_modules is not None:
        settings.append(("recompute_modules", ",".join(training.recompute_modules)))
    if ends.get("moe_routing", "uniform") != "uniform":
        settings.append(("moe_routing", ends["moe_routing"]))
    if training.expert_activation != "fused":
        settings.append(("expert_activation", training.expert_activation))
    clusters = [cluster]
    if search:
        check_at_most(training.global_batch, MAX_SEARCH_BATCH, "--batch", "sequences per batch to search (the search divides it every way)")
        top = DEFAULT_TOP if top is None else top
        if top < 1:
            raise InputError(f"--top: at least 1, got {top}")
        searched = search_schedule(schedule, chunks)
        if searched is not None:
            settings.append(("schedule", searched.value))
        clusters += [cluster_from_flags(gpus, name, gpus_per_node, capacity, dtype or precision.gemm_dtype, peak, efficiency, link,
                                        inter_node_link, nics_per_node, dp_overlap, tp_comm_overlap, allow_cross_node_tp, profile,
                                        dirs, ideal_network=ideal_network, power_limit=power_limit).for_training(training)
                     for name in names[1:]]  # fmt: skip
        from parcalc.core.fit_search import SearchSpace

        framework_sequence_parallel(profile, sequence_parallel, pinned.get("tp", 2))  # refuses --no-sequence-parallel where SP is always on

        if framework is not None:  # a stage the chosen stack does not run is refused, not searched under its profile
            for z in zero or ():
                framework_zero_stage(profile, int(z.value), 1)
        space = SearchSpace(
            recomputes=recomputes,
            zero_stages=tuple(sorted({int(z.value) for z in zero})) if zero else profile.zero_stages,
            sequence_parallel=(sequence_parallel,) if sequence_parallel is not None else (False, True),
            interleaved=interleaved, micro_batches=sizes, tp=pinned.get("tp"), pp=pinned.get("pp"), dp=pinned.get("dp"),
            schedule=searched, framework_split=profile.pipeline_split, **ends,
        )  # fmt: skip
        return FitRequest(shape, training, tuple(clusters), tuple(keys[name] for name in names) or ("none",), tuple(plans),
                          FitMode.SEARCH, tuple(settings), ranking, space=space, top=top, explain=explain, notes=cp_notes)  # fmt: skip
    if pinned:
        if n_recompute is not None:
            settings.append(("recompute_layers", str(n_recompute)))
        config, no_ops = pinned_config(cluster, pinned, sizes, given_recomputes or (Recompute.NONE,), zero, sequence_parallel, schedule,
                                       chunks, {**ends, **expert, **({"recompute_layers": n_recompute} if n_recompute is not None else {})})  # fmt: skip
        if framework is not None:  # with pp > 1 the pipeline engine's stages are parcalc.core.fit.invalid_reason's
            framework_zero_stage(profile, config.layout.zero, 1)
        if profile.pipeline_split == "torchtitan":  # its own split when none is given (parcalc.core.pipeline_torchtitan)
            from parcalc.core.pipeline_torchtitan import split_layout

            config = config.replaced(**split_layout(config.layout, shape.layers, shape.mtp_layers)._asdict())
        return FitRequest(shape, training, (cluster,), (keys.get(gpu_name, "none"),), tuple(plans), FitMode.CONFIGURATION,
                          tuple(settings), config=config, no_ops=no_ops, notes=cp_notes)  # fmt: skip
    if plans[0] is not None:
        flag = "--tokens" if tokens is not None else "--iterations"
        raise InputError(f"{flag}: a run's time needs a step time: give one configuration (--tp, --pp, --dp) or --search")
    for flag, given in (("--zero", zero), ("--sequence-parallel", sequence_parallel), ("--explain", explain or None),
                        ("--top", top)):
        if given:
            raise InputError(f"{flag}: applies to --search (the strategy table shows every family)")
    if sizes is not None and len(sizes) > 1:
        raise InputError("--micro-batch: the strategy table takes one micro-batch size (several only with --search)")
    micro = sizes[0] if sizes else 1
    if training.global_batch % micro:
        raise InputError(f"--micro-batch: {micro} does not divide the global batch of {training.global_batch}")
    return FitRequest(shape, training, (cluster,), (keys.get(gpu_name, "none"),), tuple(plans), FitMode.STRATEGIES, tuple(settings),
                      micro_batch=micro, recomputes=recomputes, max_layers=max_layers, runnable_only=framework is not None)  # fmt: skip


def search_schedule(schedule: str | None, chunks: str | None) -> Any:
    """fit --search --schedule: a split-backward schedule every pipelined layout of the search runs (None: 1F1B and
    interleaved, as the search tries them by default). DualPipe is not searched: its two stages a GPU change every
    stage's memory (one configuration only)."""
    from parcalc.core.choices import Schedule
    from parcalc.errors import InputError

    if chunks is not None:
        raise InputError("--chunks: describes one configuration (without --search); --no-interleaved limits the search")
    if schedule is None:
        return None
    searchable = [s.value for s in Schedule if s.splits_backward and s is not Schedule.DUALPIPE]
    if schedule.lower() not in searchable:
        raise InputError(f"--schedule with --search: {', '.join(searchable[:-1])} or {searchable[-1]} (the search tries 1F1B and "
                         f"interleaved itself; --no-interleaved limits it; dualpipe describes one configuration), got {schedule!r}")
    return Schedule(schedule.lower())


def pinned_config(cluster: Cluster, pinned: dict[str, int], sizes: tuple[int, ...] | None, recomputes: tuple[Recompute, ...],
                  zero: list[ZeroStage] | None, sequence_parallel: bool | None, schedule: str | None, chunks: str | None,
                  ends: dict[str, Any]) -> tuple[Config, tuple[str, ...]]:  # fmt: skip
    """Exactly one configuration from the pinned degrees (the one left out takes the rest of the GPUs)
    and the settings, and the flags taken as no-ops (parcalc.results.parse.stated_no_ops)."""
    from parcalc.core.choices import Schedule
    from parcalc.core.fit import Config
    from parcalc.errors import InputError
    from parcalc.results.parse import stated_no_ops
    from parcalc.units import parse_count

    n = cluster.gpus
    for name, value in pinned.items():
        if value > n:
            raise InputError(f"--{name}: {value:.4g} is more than the {n} GPUs")
    missing = [name for name in ("tp", "pp", "dp") if name not in pinned]
    if len(missing) > 1:
        raise InputError(f"--{' and --'.join(missing)}: give at least two of --tp, --pp, --dp for one configuration (or use --search)")
    given = {**pinned}
    if missing:
        rest = given.get("tp", 1) * given.get("pp", 1) * given.get("dp", 1) * ends.get("cp", 1)
        if n % rest:
            named = {**pinned, **({"cp": ends["cp"]} if ends.get("cp", 1) > 1 else {})}
            raise InputError(f"--{missing[0]}: {' x '.join(f'{k} {v}' for k, v in named.items())} does not divide the {n} GPUs")
        given[missing[0]] = n // rest
    for flag, values in (("--micro-batch", sizes), ("--recompute", recomputes), ("--zero", zero)):
        if values is not None and len(values) > 1:
            raise InputError(f"{flag}: one value for one configuration (several only with --search)")
    kinds = tuple(s.value for s in Schedule if s is not Schedule.GPIPE)  # fit times the schedules Megatron-style stacks run
    if schedule is not None and schedule.lower() not in kinds:
        raise InputError(f"--schedule: {', '.join(kinds[:-1])} or {kinds[-1]}, got {schedule!r}")
    v = parse_count(chunks, "--chunks") if chunks is not None else 1
    if ends.get("pipeline_layout") is not None and chunks is None:  # its virtual stages / pp (parcalc.core.pipeline_layout)
        from parcalc.core.pipeline_layout import virtual_stage_count

        v = max(1, virtual_stage_count(ends["pipeline_layout"]) // given["pp"])
    kind = Schedule(schedule.lower()) if schedule is not None else Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B
    if kind.splits_backward and ends.get("pipeline_layout") is not None and chunks is None:
        if kind.v_shape or kind is Schedule.DUALPIPE:  # the layout places virtual stage i on GPU i mod p (the core says why not)
            v = 1
        elif v > 1:
            raise InputError(f"--pipeline-layout: {v} chunks per GPU run the interleaved schedule, not --schedule {kind.value}")
    if kind.splits_backward and v > 1:
        raise InputError(f"--chunks: only the interleaved schedule splits a GPU's layers into chunks (got --chunks {v} with {kind.value}"
                         + (f"; {kind.label}'s two chunks a GPU are its V, not a choice)" if kind.v_shape else ")"))  # fmt: skip
    if kind is Schedule.ONE_F_ONE_B and v > 1:
        kind = Schedule.INTERLEAVED
    if kind is Schedule.INTERLEAVED and v == 1:
        raise InputError("--schedule interleaved: give --chunks v > 1 (model chunks per GPU)")
    sequence_parallel = framework_sequence_parallel(cluster.framework, sequence_parallel, given["tp"])
    ranks = given["dp"] * ends.get("cp", 1)
    default = cluster.framework.at(given["pp"]).default_zero if ranks > 1 else 0  # the stack's own stage without --zero
    sp, stage, no_ops = stated_no_ops(bool(sequence_parallel), given["tp"], zero[0] if zero else ZeroStage(str(default)), ranks)
    config = Config.of(given["tp"], given["pp"], given["dp"], sizes[0] if sizes else 1, recomputes[0], zero=int(stage.value),
                       sequence_parallel=sp, schedule=kind, chunks=v, gpus_per_node=cluster.gpus_per_node, **ends)  # fmt: skip
    return config, no_ops


def _gpu_key(name: str, dirs: tuple) -> str:
    """The GPU preset's own name (settings.gpu), whatever case or alias --gpu was typed in."""
    from parcalc.presets import load_gpu

    return load_gpu(name, dirs).key


def _host_link(name: str | None, offload: list[Offload] | None, dirs: tuple, gpu: Any) -> Any:
    """The --host-link preset, only with --offload; not given: the GPU's default PCIe (default_host_link_name)."""
    from parcalc.core.timing.offload import default_host_link_name
    from parcalc.errors import InputError
    from parcalc.presets import load_link

    if name is not None and not offload:
        raise InputError("--host-link: the link to the host is used by --offload only (give --offload optimizer or activations)")
    if not offload:
        return None
    return load_link(name if name is not None else default_host_link_name(gpu), dirs)


RANK_KEYS = ("time", "cost")


def _run_plans(names: list[str], tokens: str | None, iterations: str | None, gpu_power: str | None, pue: str | None,
               price: list[str] | None, rank_by: str | None, search: bool, dirs: tuple, power_limit: str | None = None,
               peak_given: bool = False) -> list[Any]:  # fmt: skip
    """One RunPlan per GPU type (its board power, its --price), or [None] without --tokens / --iterations."""
    from parcalc.errors import InputError
    from parcalc.presets import load_gpu
    from parcalc.results.parse import run_plan

    if rank_by is not None:
        if rank_by.lower() not in RANK_KEYS:
            raise InputError(f"--rank-by: time or cost, got {rank_by!r}")
        if not search:
            raise InputError("--rank-by: ranks the configurations of --search")
    prices = price or []
    if len(prices) > max(1, len(names)):
        raise InputError(f"--price: one per --gpu ({len(names) or 1} GPU type(s), {len(prices)} prices)")
    if prices and len(prices) != max(1, len(names)):
        raise InputError(f"--price: one per --gpu, in the same order ({len(names)} GPU types, {len(prices)} price)")
    devices = [power_limited(load_gpu(name, dirs), power_limit, peak_given) for name in names] or [None]
    return [run_plan(tokens, iterations, gpu_power, device, pue, prices[i] if prices else None) for i, device in enumerate(devices)]


def _rank_by(rank_by: str | None, plans: list[Any], types: int) -> str:
    """time or cost: --rank-by, else cost when several GPU types each have a price, else time."""
    from parcalc.errors import InputError

    priced = all(p is not None and p.price is not None for p in plans)
    if rank_by is not None and rank_by.lower() == "cost" and not priced:
        raise InputError("--rank-by cost: give --tokens (or --iterations) and a --price for each --gpu")
    if rank_by is not None:
        return rank_by.lower()
    return "cost" if types > 1 and priced else "time"


