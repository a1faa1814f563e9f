"""Data parallelism: DDP's gradient all-reduce, ZeRO-1/2 and ZeRO-3 / FSDP.

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
- Hybrid sharding (a shard group of S < N = dp x cp ranks, parcalc.core.sharding): the all-gathers
  and reduce-scatters above run inside groups of S consecutive data-parallel ranks (stride tp),
  FSDP2 padding each tensor to a multiple of S; after each reduce-scatter, the rank's shard of it
  (1/S of the call) is all-reduced over the N / S replicas, one rank of each shard group (stride
  tp x S): FSDP2's foreach_reduce per unit, Megatron-LM's start_grad_sync per bucket.
- torchao's FP8 all-gather (Options.float8_all_gather; parcalc.core.comm.float8_all_gather): each unit's Float8 linears' weights
  travel at 1 byte an element in the unit's one call (FSDP2 packs its dtypes into one byte buffer), the rest at the
  parameters' bytes; after the optimizer step one all-reduce of the stage's Float8 weights' fp32 amaxes
  (precompute_float8_dynamic_scale_for_fsdp). The reduce-scatter is unchanged.
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from parcalc.core.collectives import Collective
from parcalc.core.comm.plan import (
    Builder,
    Group,
    Layout,
    Options,
    Workload,
    headline,
    rank_of,
    term,
)
from parcalc.core.comm.tensors import ParamTensor, StageTensors, padded_numel
from parcalc.core.layout import DataParallel
from parcalc.derivation import Derivation, Term


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

    if tensors.blocks:  # a hybrid's blocks differ: no repeated period, every tensor in turn
        tail = [x for block in reversed(tensors.blocks) for x in in_bytes(block)] + in_bytes(tensors.before)
        return ddp_bucket_counts(in_bytes(tensors.after), [], 0, tail, cap, first_cap)
    if tensors.moe_layers:  # reverse order: the MoE layers (the later ones) first, then any dense first layers
        tail = in_bytes(tensors.layer) * tensors.layers + in_bytes(tensors.before)
        return ddp_bucket_counts(in_bytes(tensors.after), in_bytes(tensors.moe_layer), tensors.moe_layers, tail, cap, first_cap)
    return ddp_bucket_counts(in_bytes(tensors.after), in_bytes(tensors.layer), tensors.layers, in_bytes(tensors.before), cap, first_cap)


def shard_size(par: Layout) -> int:
    """S: the ranks ZeRO shards over (the whole dp x cp group unless a shard group is given)."""
    n = par.dp * par.cp
    return n if par.shard_group is None else par.shard_group


def _hybrid_groups(par: Layout, stage: int, size: int) -> tuple[list[Group], list[Group]]:
    """(shard groups, replica groups) of one stage: S consecutive data-parallel ranks tp apart, and
    one rank of each shard group, tp x S apart (a dp-cp index j sits at rank t + tp x j)."""
    n, tp = par.dp * par.cp, par.tp
    replicas = n // size
    shards, across = [], []
    for t in range(tp):
        base = rank_of(par, t, 0, stage)
        shards += [Group(base + tp * k * size, base + tp * ((k + 1) * size - 1)) for k in range(replicas)]
        across += [Group(base + tp * i, base + tp * (i + size * (replicas - 1))) for i in range(size)]
    return shards, across


FLOAT8_BYTES = 1.0  # e4m3: what fsdp_pre_all_gather returns (float8_tensor._data)
AMAX_BYTES = 4.0  # an fp32 amax of an fp32 shard (torch._foreach_norm(weights, ord=inf))


def data_parallel_rows(b: Builder, per_stage: list[StageTensors], work: Workload, par: Layout,
                        opts: Options, micro_batches: int, float8: frozenset[str] = frozenset()) -> None:  # fmt: skip
    """Each stage's data-parallel collectives; `float8`: the Float8 weights' names (layer 0's) under the FP8 all-gather."""
    n = par.dp * par.cp  # context-parallel ranks hold the same weights: Megatron-LM's dp-cp group
    if n < 2:
        return
    size = shard_size(par)
    for stage, tensors in enumerate(per_stage):
        groups = [Group(rank_of(par, t, 0, stage), rank_of(par, t, par.dp - 1, stage, par.cp - 1)) for t in range(par.tp)]
        label = f"stage {stage}" if par.pp > 1 else ""
        common: dict[str, Any] = {"dimension": "dp", "group_size": n, "stages": label, "roles": ((stage, True),)}
        if size < n and par.data_parallel is not DataParallel.DDP:
            _hybrid_rows(b, tensors, work, par, opts, micro_batches, stage, label, size, float8)
            continue
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
            units = _fsdp_units(tensors, n, opts, float8)
            fwd = _times(Counter(_unit_bytes(u, f, s) for _, u, f in units), micro_batches)
            bwd = _times(Counter(_unit_bytes(u, f, s) for root, u, f in units if opts.reshard_root or not root), micro_batches)
            rs = Counter(u * work.grad_bytes_per_element for _, u, _ in units)
            fp8 = ", Float8 weights in FP8" if float8 else ""
            b.add(purpose="parameters (Float8 weights in FP8)" if float8 else "parameters", phase="forward", op=Collective.ALL_GATHER,
                  call_bytes=fwd, groups=groups, **common)  # fmt: skip
            b.add(purpose=f"parameters (re-gathered{fp8})", phase="backward", op=Collective.ALL_GATHER, call_bytes=bwd,
                  groups=groups, **common)  # fmt: skip
            b.add(purpose="gradients", phase="backward", op=Collective.REDUCE_SCATTER, call_bytes=rs, groups=groups, **common)
            if float8:
                b.add(purpose="Float8 weights' amaxes", phase="after optimizer step", op=Collective.ALL_REDUCE,
                      call_bytes={_amax_bytes(tensors, float8): 1}, groups=groups, **common)  # fmt: skip


def _hybrid_rows(b: Builder, tensors: StageTensors, work: Workload, par: Layout, opts: Options, micro_batches: int,
                 stage: int, label: str, size: int, float8: frozenset[str] = frozenset()) -> None:  # fmt: skip
    """One stage's collectives under hybrid sharding: ZeRO's in the shard groups of `size` ranks,
    then each rank's shard of every reduce-scatter all-reduced over the replicas."""
    shards, across = _hybrid_groups(par, stage, size)
    replicas = par.dp * par.cp // size
    inside: dict[str, Any] = {"dimension": "dp", "group_size": size, "stages": label, "roles": ((stage, True),)}
    over: dict[str, Any] = {"dimension": "dp", "group_size": replicas, "stages": label, "roles": ((stage, True),)}
    s, s_g, cap = work.bytes_per_element, work.grad_bytes_per_element, opts.bucket_bytes
    if par.data_parallel in (DataParallel.ZERO1, DataParallel.ZERO2):
        rs = _gradient_buckets(tensors, s_g, cap, cap)
        ag = rs if s == s_g else _gradient_buckets(tensors, s, cap, cap)
        b.add(purpose="gradients (in the shard group)", phase="backward", op=Collective.REDUCE_SCATTER, call_bytes=rs, groups=shards,
              **inside)  # fmt: skip
        b.add(purpose="gradient shards (across the replicas)", phase="backward", op=Collective.ALL_REDUCE,
              call_bytes={size_ / size: count for size_, count in rs.items()}, groups=across, **over)  # fmt: skip
        b.add(purpose="updated parameters (in the shard group)", phase="after optimizer step", op=Collective.ALL_GATHER,
              call_bytes=ag, groups=shards, **inside)  # fmt: skip
        return
    units = _fsdp_units(tensors, size, opts, float8)  # FSDP2 pads to a multiple of the shard group's size
    fwd = _times(Counter(_unit_bytes(u, f, s) for _, u, f in units), micro_batches)
    bwd = _times(Counter(_unit_bytes(u, f, s) for root, u, f in units if opts.reshard_root or not root), micro_batches)
    fp8 = ", Float8 weights in FP8" if float8 else ""
    b.add(purpose=f"parameters (in the shard group{fp8})", phase="forward", op=Collective.ALL_GATHER, call_bytes=fwd, groups=shards, **inside)
    b.add(purpose=f"parameters (re-gathered, in the shard group{fp8})", phase="backward", op=Collective.ALL_GATHER, call_bytes=bwd,
          groups=shards, **inside)  # fmt: skip
    b.add(purpose="gradients (in the shard group)", phase="backward", op=Collective.REDUCE_SCATTER,
          call_bytes=Counter(u * s_g for _, u, _ in units), groups=shards, **inside)  # fmt: skip
    b.add(purpose="gradient shards (across the replicas)", phase="backward", op=Collective.ALL_REDUCE,
          call_bytes=Counter(u * s_g / size for _, u, _ in units), groups=across, **over)  # fmt: skip
    if float8:  # the weights' Partial amax is reduced over the mesh dimension FSDP shards on
        b.add(purpose="Float8 weights' amaxes (in the shard group)", phase="after optimizer step", op=Collective.ALL_REDUCE,
              call_bytes={_amax_bytes(tensors, float8): 1}, groups=shards, **inside)  # fmt: skip


def _times(counts: Mapping[float, int], factor: int) -> dict[float, int]:
    return {size: count * factor for size, count in counts.items()}


def _fsdp_units(tensors: StageTensors, group: int, opts: Options, float8: frozenset[str] = frozenset()) -> list[tuple[bool, int, int]]:
    """(is root unit, elements incl. padding, of them the Float8 weights' named in `float8`) per FSDP unit: the root
    (non-layer tensors) first, then one unit per layer, in forward order."""
    size = (lambda t: padded_numel(t, group)) if opts.shard_padding else (lambda t: t.numel)
    root = sum(size(t) for t in tensors.outside_layers())

    def unit(part: Sequence[ParamTensor]) -> tuple[bool, int, int]:
        return False, sum(size(t) for t in part), sum(size(t) for t in part if t.name in float8)

    # the layers alike are one tuple, repeated (StageTensors.layer_units): summed once (GPT-3's 96 layers, 24 a stage)
    alike: dict[int, tuple[bool, int, int]] = {}
    units = [(True, root, 0)] if root else []
    for part in tensors.layer_units():
        if id(part) not in alike:
            alike[id(part)] = unit(part)
        units.append(alike[id(part)])
    return units


def _unit_bytes(elements: int, float8: int, s: float) -> float:
    """Bytes one unit's all-gather moves: its Float8 weights at 1 byte an element (torchao's FP8 all-gather), the rest at s."""
    return (elements - float8) * s + float8 * FLOAT8_BYTES


def _amax_bytes(tensors: StageTensors, float8: frozenset[str]) -> float:
    """precompute_float8_dynamic_scale_for_fsdp's one all-reduce: an fp32 amax per Float8 weight of the stage."""
    weights = sum(t.name in float8 for part in tensors.layer_units() for t in part)
    return weights * AMAX_BYTES


def dp_headlines(par: Layout, opts: Options, per_stage: list[StageTensors], s: Term, s_g: Term,
                  micro_batches: int, float8: frozenset[str] = frozenset()) -> list[Derivation]:  # fmt: skip
    stage = max(range(par.pp), key=lambda i: per_stage[i].numel)
    tensors = per_stage[stage]
    where = f" (stage {stage}, the largest)" if par.pp > 1 else ""
    per_device = "parameters per device" if par.tp * par.pp > 1 else "parameters"
    p = term("p", "P", "P", tensors.numel, "", per_device + where)
    n = shard_size(par)  # ZeRO's group: every data-parallel rank, or the shard group
    kind = par.data_parallel
    if kind is DataParallel.DDP:
        return [headline("dp_allreduce_payload", "Gradients all-reduced per iteration (payload)", "V_AR", r"V_{\mathrm{AR}}",
                            "$p × $s_g", r"$p \times $s_g", (p, s_g), p.value * s_g.value,
                            "data parallelism all-reduces every gradient once per iteration (PyTorch DDP, Li et al. 2020 sec. 3.2; ZeRO sec. 7.1)")]  # fmt: skip
    if kind in (DataParallel.ZERO1, DataParallel.ZERO2):
        zero = "ZeRO (Rajbhandari et al. 2020) sec. 7.2.1"
        return [
            headline("zero_reduce_scatter_payload", "Gradients reduce-scattered per iteration (payload)", "V_RS",
                        r"V_{\mathrm{RS}}", "$p × $s_g", r"$p \times $s_g", (p, s_g), p.value * s_g.value, zero),
            headline("zero_all_gather_payload", "Parameters all-gathered per iteration (payload)", "V_AG",
                        r"V_{\mathrm{AG}}", "$p × $s", r"$p \times $s", (p, s), p.value * s.value, zero),
            *_replica_headline(par, p, s_g),
        ]  # fmt: skip
    units = _fsdp_units(tensors, n, opts, float8)
    root = sum(u for is_root, u, _ in units if is_root)
    layer_elements = sum(u for is_root, u, _ in units if not is_root)
    padded = " incl. FSDP2's dim-0 padding to a multiple of N" if opts.shard_padding else ""
    mb = term("mb", "m", "m", micro_batches, "", "micro-batches per iteration (parameters gathered for each)")
    source = "FSDP / ZeRO-3: all-gather in forward and again in backward, reduce-scatter of gradients (ZeRO, Rajbhandari et al. 2020 sec. 7.2.2)"
    rs_p = term("p", "P", "P", root + layer_elements, "", per_device + where + padded)
    ag_source = source
    if float8:
        # here and below: only --fp8-all-gather reads torchao's sources (a one-liner without it does not load them)
        from parcalc.core.comm.float8_all_gather import SOURCES as FLOAT8_SOURCES

        text, tex, inputs, value = _float8_gathered(units, opts, s, per_device + where + padded)
        ag_source += f"; torchao's FP8 all-gather: {FLOAT8_SOURCES['all_gather']}"
    elif opts.reshard_root or root == 0:
        text, tex, inputs, value = "2 × $p × $s", r"2 \times $p \times $s", (rs_p, s), 2 * rs_p.value * s.value
    else:
        p_l = term("p_l", "P_layers", r"P_{\mathrm{layers}}", layer_elements, "", "parameters in transformer layers" + padded)
        p_r = term("p_r", "P_root", r"P_{\mathrm{root}}", root, "", "parameters outside the layers (root unit, not resharded)" + padded)
        text, tex, inputs = "(2 × $p_l + $p_r) × $s", r"(2 $p_l + $p_r) \times $s", (p_l, p_r, s)
        value = (2 * p_l.value + p_r.value) * s.value
    if micro_batches > 1:
        text, tex, inputs, value = f"$mb × {text}", rf"$mb \times {tex}", (mb, *inputs), micro_batches * value
    amax = []
    if float8:
        from parcalc.core.comm.float8_all_gather import SOURCES as FLOAT8_SOURCES

        n_w = term("n_8", "n_8", r"n_{8}", _amax_bytes(tensors, float8) / AMAX_BYTES, "", "Float8 weights" + per_device.removeprefix("parameters") + where)
        a = term("a", "a", "a", AMAX_BYTES, "B", "bytes per amax (fp32, the shards' dtype)")
        amax = [headline("fsdp_float8_amax_payload", "Float8 weights' amaxes all-reduced per iteration (payload)", "V_amax",
                         r"V_{\mathrm{amax}}", "$n_8 × $a", r"$n_8 \times $a", (n_w, a), n_w.value * a.value, FLOAT8_SOURCES["precompute"])]
    return [
        headline("fsdp_all_gather_payload", "Parameters all-gathered per iteration (payload)", "V_AG", r"V_{\mathrm{AG}}",
                    text, tex, inputs, value, ag_source),
        headline("fsdp_reduce_scatter_payload", "Gradients reduce-scattered per iteration (payload)", "V_RS",
                    r"V_{\mathrm{RS}}", "$p × $s_g", r"$p \times $s_g", (rs_p, s_g), rs_p.value * s_g.value, source),
        *amax,
        *_replica_headline(par, rs_p, s_g),
    ]  # fmt: skip


def _float8_gathered(units: list[tuple[bool, int, int]], opts: Options, s: Term, what: str) -> tuple[str, str, tuple[Term, ...], float]:
    """The FSDP all-gather payload of one micro-batch under the FP8 all-gather, both parts named: the Float8 linears' weights
    at s_8 = 1 byte, the other parameters at s, all gathered twice (forward, backward) but the root unit's where FSDP2 keeps
    it unsharded after forward."""
    root = sum(u for is_root, u, _ in units if is_root)
    layers = sum(u for is_root, u, _ in units if not is_root)
    p_8 = term("p_8", "P_8", r"P_{8}", sum(f for _, _, f in units), "", "Float8 linears' weight elements (all in the layers) of the " + what)
    s_8 = term("s_8", "s_8", r"s_{8}", FLOAT8_BYTES, "B", "bytes per Float8 weight element on the wire (e4m3, fsdp_pre_all_gather's data)")
    if opts.reshard_root or root == 0:
        p_o = term("p_o", "P_o", r"P_{o}", root + layers - p_8.value, "", "other parameters (norms, embedding, output projection), in bf16")
        value = 2 * (p_8.value * s_8.value + p_o.value * s.value)
        return "2 × ($p_8 × $s_8 + $p_o × $s)", r"2 ($p_8 \times $s_8 + $p_o \times $s)", (p_8, s_8, p_o, s), value
    p_o = term("p_o", "P_o", r"P_{o}", layers - p_8.value, "", "other parameters in the layers (norms), in bf16")
    p_r = term("p_r", "P_root", r"P_{\mathrm{root}}", root, "", "parameters outside the layers (root unit, not resharded), in bf16")
    value = 2 * (p_8.value * s_8.value + p_o.value * s.value) + p_r.value * s.value
    return ("2 × ($p_8 × $s_8 + $p_o × $s) + $p_r × $s", r"2 ($p_8 \times $s_8 + $p_o \times $s) + $p_r \times $s",
            (p_8, s_8, p_o, s, p_r), value)  # fmt: skip


def _replica_headline(par: Layout, p: Term, s_g: Term) -> list[Derivation]:
    """Hybrid sharding: the gradient shards one rank all-reduces across the replicas, P s_g / S."""
    size = shard_size(par)
    if size == par.dp * par.cp:
        return []
    from parcalc.core.sharding import HSDP_SOURCE

    shard = term("S", "S", "S", size, "", f"shard group (ZeRO shards over S of the {par.dp * par.cp} data-parallel ranks)")
    return [headline("hsdp_all_reduce_payload", f"Gradient shards all-reduced across the {par.dp * par.cp // size} replicas per "
                     "iteration (payload)", "V_AR", r"V_{\mathrm{AR}}", "$p × $s_g / $S", r"\frac{$p \times $s_g}{$S}", (p, s_g, shard),
                     p.value * s_g.value / size, HSDP_SOURCE)]  # fmt: skip


def dp_assumptions(par: Layout, opts: Options) -> list[str]:
    out = []
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
            out.append("shard padding: each tensor's dim 0 rounded up to a multiple of the " + (
                "shard group's size S (FSDP2)" if shard_size(par) < par.dp * par.cp else "data-parallel size (FSDP2)"))
        if not opts.reshard_root:
            out.append("the root unit is not resharded after forward, so it is not re-gathered in backward (FSDP2's default)")
        if opts.float8_all_gather:
            out.append("FP8 all-gather (torchao, torchtitan's converter): every linear weight of the layers whose dims are multiples of 16 "
                       "gathered at 1 byte an element, the norms, embedding and output projection at --dtype; the scales from one "
                       "all-reduce of the weights' fp32 amaxes after the optimizer step (precompute_float8_dynamic_scale_for_fsdp; "
                       "without it, each weight's pre-all-gather would all-reduce its own amax)")  # fmt: skip
    else:
        out.append(f"ZeRO-1/2 gradients and parameters move in buckets of {opts.bucket_bytes:.0f} B")
    size = shard_size(par)
    if kind is not DataParallel.DDP and size < par.dp * par.cp:
        out.append(f"hybrid sharding: states sharded over shard groups of S = {size} consecutive data-parallel ranks (stride tp), "
                   f"replicated over {par.dp * par.cp // size}; gathers and reduce-scatters inside a shard group, then each rank's "
                   f"1/S shard of every reduce-scatter all-reduced over the replicas (stride tp x S), as FSDP2's HSDP and Megatron-LM's "
                   "--num-distributed-optimizer-instances do")  # fmt: skip
    return out
