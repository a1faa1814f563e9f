"""Expert parallelism: the all-to-all dispatch and combine of every MoE layer, the expert
tensor-parallel collectives, and the expert data-parallel gradient reduction.

Megatron-Core's all-to-all token dispatcher (NVIDIA/Megatron-LM d98e8a64ddf3,
megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher):
- token_dispatch (line 705): one all_to_all over the ep group of the rank's T x k routed token
  copies (hidden h each), after the router picked k experts per token; token_combine (864): the
  reverse all_to_all of the experts' outputs. Each is an autograd function whose backward is the
  opposite all-to-all (megatron/core/tensor_parallel/mappings.py, _AllToAll.backward), so per MoE
  layer and micro-batch: 2 all-to-alls forward, 2 backward (2 more forward with full
  recomputation). Balanced routing leaves (ep - 1)/ep of each buffer on other ranks.
  The dispatcher also all-to-alls the routing probabilities (one fp32 value per token copy,
  line 718): 4 / (h x bytes) of the hidden payload, not counted here (stated).
- with expert tensor parallelism etp > 1, dispatch_postprocess all-gathers the received tokens
  over the expert-TP group (gather_from_sequence_parallel_region, output etp x the received
  tokens) and combine_preprocess reduce-scatters the outputs (reduce_scatter_to_sequence_parallel_region);
  in backward each becomes the other.
- the expert parameters' gradients are reduced over the expert data-parallel group, apart from the
  dense ones (megatron/core/distributed/distributed_data_parallel.py: expert_parallel_buffers with
  the expt_dp group), with the same kind of collective as the dense part (all-reduce for DDP,
  reduce-scatter + all-gather for the distributed optimizer).

Tokens on one rank: T = b s / cp, and / tp with sequence parallelism (Megatron-Core's MoE layer
needs SP when tp > 1 in training: moe_layer.py raises 'MoE and tensor parallelism are enabled
without also enabling sequence parallelism'). The busiest rank's buffer is the balanced one times
the stated imbalance rho >= 1 (--moe-imbalance), capped by the capacity factor when tokens are
dropped (a rank's experts take at most cf x their balanced share).

Rank layout of the expert grid (parallel_state.py, the expert RankGenerator, order tp-ep-dp-pp):
rank = t_e + etp x (e + ep x (d_e + edp x s)) inside the stage's tp x cp x dp block.
"""

from collections import Counter
from typing import Any

from parcalc.core.collectives import Collective
from parcalc.core.comm.plan import (
    Builder,
    Group,
    Layout,
    Options,
    Workload,
    headline,
    term,
)
from parcalc.core.comm.tensors import (
    ParamTensor,
    StageTensors,
    ffn_tensors,
    moe_layer_tensors,  # noqa: F401 - moved to tensors.py; also imported from here
    shard,
)
from parcalc.core.layout import DataParallel
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term

DISPATCHER = ("Megatron-Core MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py, token_dispatch / "
              "token_combine): one all-to-all over the ep group each, and the opposite one in backward")  # fmt: skip


def local_expert_tensors(model: TransformerModel, ep: int, etp: int) -> tuple[ParamTensor, ...]:
    """The routed experts one GPU holds of one MoE layer: experts / ep of them, each split etp ways."""
    assert model.moe is not None
    out: list[ParamTensor] = []
    for i in range(model.moe.experts // ep):
        out += [shard(t, etp, True) for t in ffn_tensors(model, f"experts.{i}", model.moe.expert_ffn_hidden, 0)]
    return tuple(out)


def check_imbalance(value: float, experts: int | None = None) -> None:
    """--moe-imbalance: the busiest rank's load over the balanced one, a finite factor of at least 1
    and at most the routed experts (the busiest of ep ranks receives at most every routed copy of
    its EP group, ep x the balanced share, and ep <= experts)."""
    import math

    from parcalc.errors import InputError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 1.0):
        raise InputError(f"--moe-imbalance: the busiest rank's tokens over the balanced share, a factor of at least 1, got {value!r}")
    if experts is not None and value > experts:
        raise InputError(f"--moe-imbalance: {value:g} is more than the {experts} routed experts allow (a rank receives at most every "
                         "routed token copy of its EP group, ep <= experts times the balanced share)")  # fmt: skip


def tokens_per_rank(work: Workload, par: Layout) -> float:
    """T: tokens of one micro-batch on one rank of the ep group (module docstring)."""
    return work.micro_batch * work.seq_len / (par.cp * (par.tp if par.sequence_parallel else 1))


def busiest_factor(model: TransformerModel, opts: Options) -> float:
    """The busiest rank's share over the balanced one: the imbalance, capped by the capacity factor."""
    assert model.moe is not None
    return model.moe.busiest_share(opts.moe_imbalance)


def expert_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, opts: Options,
                moe_per_stage: list[int], micro_batches: int) -> None:  # fmt: skip
    """The ep all-to-alls, the etp gathers / scatters and the expert-DP gradient reduction."""
    if model.moe is None:  # a dense model: no expert grid (nor its module, at start-up)
        return
    from parcalc.core.expert_parallel import expert_layout

    layout = expert_layout(model, par)
    ep, etp, edp = layout.ep, layout.etp, layout.edp
    block = par.tp * par.cp * par.dp  # the ranks of one pipeline stage
    buffer = tokens_per_rank(work, par) * model.moe.top_k * model.hidden * work.bytes_per_element * busiest_factor(model, opts)
    forward_repeat = 2 if opts.recompute else 1
    for stage, moe in enumerate(moe_per_stage):
        if not moe:
            continue
        base = block * stage
        label = f"stage {stage}" if par.pp > 1 else ""

        def rank(t_e: int, e: int, d_e: int) -> int:
            return base + t_e + etp * (e + ep * d_e)  # noqa: B023 - used inside this iteration only

        ep_groups = [Group(rank(t, 0, d), rank(t, ep - 1, d)) for t in range(etp) for d in range(edp)]
        common: dict[str, Any] = {"dimension": "ep", "group_size": ep, "groups": ep_groups, "stages": label, "roles": ((stage, True),)}
        per_pass = moe * micro_batches
        for purpose, phase, count in (("tokens dispatched to experts", "forward", per_pass * forward_repeat),
                                      ("expert outputs combined", "forward", per_pass * forward_repeat),
                                      ("gradients of the combined outputs", "backward", per_pass),
                                      ("gradients of the dispatched tokens", "backward", per_pass)):  # fmt: skip
            b.add(purpose=purpose, phase=phase, op=Collective.ALL_TO_ALL, call_bytes={buffer: count}, **common)
        if etp > 1:
            etp_groups = [Group(rank(0, e, d), rank(etp - 1, e, d)) for e in range(ep) for d in range(edp)]
            etp_common: dict[str, Any] = {"dimension": "etp", "group_size": etp, "groups": etp_groups, "stages": label, "roles": ((stage, True),)}
            gathered = etp * buffer  # nccl-tests convention: the whole gathered buffer
            for op, phase, count, what in ((Collective.ALL_GATHER, "forward", per_pass * forward_repeat, "dispatched tokens"),
                                           (Collective.REDUCE_SCATTER, "forward", per_pass * forward_repeat, "expert outputs"),
                                           (Collective.REDUCE_SCATTER, "backward", per_pass, "gradients of the dispatched tokens"),
                                           (Collective.ALL_GATHER, "backward", per_pass, "gradients of the expert outputs")):  # fmt: skip
                b.add(purpose=f"{what} (expert tensor parallelism)", phase=phase, op=op, call_bytes={gathered: count}, **etp_common)
        if edp > 1:
            edp_groups = [Group(rank(t, e, 0), rank(t, e, edp - 1)) for t in range(etp) for e in range(ep)]
            edp_common: dict[str, Any] = {"dimension": "edp", "group_size": edp, "groups": edp_groups, "stages": label, "roles": ((stage, True),)}
            _expert_gradient_rows(b, model, work, par, opts, layout.ep, etp, moe, micro_batches, edp_common)


def expert_stage_tensors(model: TransformerModel, ep: int, etp: int, moe: int) -> StageTensors:
    return StageTensors(before=(), layer=local_expert_tensors(model, ep, etp), layers=moe, after=())


def _expert_gradient_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, opts: Options, ep: int, etp: int,
                          moe: int, micro_batches: int, common: dict) -> None:  # fmt: skip
    from parcalc.core.comm.data_parallel import _fsdp_units, _gradient_buckets, _times

    tensors = expert_stage_tensors(model, ep, etp, moe)
    s, s_g, cap = work.bytes_per_element, work.grad_bytes_per_element, opts.bucket_bytes
    kind = par.data_parallel
    if kind is DataParallel.DDP:
        buckets = _gradient_buckets(tensors, s_g, cap, cap)
        b.add(purpose="expert gradients", phase="backward", op=Collective.ALL_REDUCE, call_bytes=buckets, **common)
    elif kind in (DataParallel.ZERO1, DataParallel.ZERO2):
        rs = _gradient_buckets(tensors, s_g, cap, cap)
        ag = rs if s == s_g else _gradient_buckets(tensors, s, cap, cap)
        b.add(purpose="expert gradients", phase="backward", op=Collective.REDUCE_SCATTER, call_bytes=rs, **common)
        b.add(purpose="updated expert parameters", phase="after optimizer step", op=Collective.ALL_GATHER, call_bytes=ag, **common)
    else:
        units = _fsdp_units(tensors, common["group_size"], opts)  # routed experts: gathered in --dtype even with --fp8-all-gather
        gathers = _times(Counter(u * s for _, u, _ in units), micro_batches)
        b.add(purpose="expert parameters", phase="forward", op=Collective.ALL_GATHER, call_bytes=gathers, **common)
        b.add(purpose="expert parameters (re-gathered)", phase="backward", op=Collective.ALL_GATHER, call_bytes=gathers, **common)
        b.add(purpose="expert gradients", phase="backward", op=Collective.REDUCE_SCATTER,
              call_bytes=Counter(u * s_g for _, u, _ in units), **common)  # fmt: skip


def ep_headlines(model: TransformerModel, work: Workload, par: Layout, opts: Options, moe_per_stage: list[int],
                 s: Term, s_g: Term, micro_batches: int) -> list[Derivation]:  # fmt: skip
    """The all-to-all bytes one rank of the busiest stage sends per iteration, and the expert-DP gradient payload."""
    from parcalc.core.expert_parallel import FOLDING, expert_layout

    if model.moe is None:
        return []
    layout = expert_layout(model, par)
    moe = max(moe_per_stage)
    out: list[Derivation] = []
    if layout.ep > 1 and moe:
        calls = 6 if opts.recompute else 4
        split = par.cp * (par.tp if par.sequence_parallel else 1)
        inputs = (
            term("c_a2a", "c", "c", calls, "", "all-to-alls per MoE layer and micro-batch: dispatch and combine, forward and backward"
                 + (", forward replayed by recomputation" if opts.recompute else "")),
            term("L_m", "L_MoE", r"L_{\mathrm{MoE}}", moe, "", "MoE layers" + (" on the busiest stage" if par.pp > 1 else "")),
            term("m", "m", "m", micro_batches, "", "micro-batches per iteration"),
            term("T", "T", "T", tokens_per_rank(work, par), "", f"tokens on one rank: b s / {split}" if split > 1 else "tokens on one rank: b s",
                 "b s / (cp x tp with sequence parallelism); Megatron-Core needs SP with MoE and TP (moe_layer.py)"),
            term("k", "k", "k", model.moe.top_k, "", "experts per token (top-k)"),
            term("h", "h", "h", model.hidden, "", "hidden size"),
            s,
            term("rho", "ρ", r"\rho", busiest_factor(model, opts), "", "busiest rank over balanced: --moe-imbalance"
                 + (f", capped by the capacity factor {model.moe.capacity_factor:g}" if model.moe.capacity_factor is not None else "")),
            term("e", "e", "e", layout.ep, "", "expert-parallel degree"),
        )  # fmt: skip
        value = calls * moe * micro_batches * tokens_per_rank(work, par) * model.moe.top_k * model.hidden * s.value
        value *= busiest_factor(model, opts) * (layout.ep - 1) / layout.ep
        out.append(headline("ep_all_to_all_sent", "Bytes one rank sends in the MoE all-to-alls per iteration", "S_a2a", r"S_{\mathrm{a2a}}",
                            "$c_a2a × $L_m × $m × $T × $k × $h × $s × $rho × ($e - 1) / $e",
                            r"$c_a2a \times $L_m \times $m \times $T \times $k \times $h \times $s \times $rho \times \frac{$e - 1}{$e}",
                            inputs, value, DISPATCHER))  # fmt: skip
    if layout.edp > 1 and moe:
        p_x = sum(t.numel for t in local_expert_tensors(model, layout.ep, layout.etp))
        inputs2 = (term("L_m", "L_MoE", r"L_{\mathrm{MoE}}", moe, "", "MoE layers" + (" on the busiest stage" if par.pp > 1 else "")),
                   term("P_x", "P_x", r"P_{x}", p_x, "", f"routed-expert parameters of one MoE layer on one GPU ({model.moe.experts}/{layout.ep} "
                        f"experts, split {layout.etp} ways)", FOLDING),
                   s_g, term("d_e", "d_e", "d_e", layout.edp, "", "expert data-parallel ranks the gradients are reduced over", FOLDING))  # fmt: skip
        out.append(headline("edp_gradient_payload", "Expert gradients reduced over expert-DP per iteration (payload)", "V_EDP",
                            r"V_{\mathrm{EDP}}", "$L_m × $P_x × $s_g", r"$L_m \times $P_x \times $s_g", inputs2, moe * p_x * s_g.value,
                            "the expert data-parallel group reduces the expert gradients apart from the dense ones "
                            "(Megatron-Core distributed_data_parallel.py, expert_parallel_buffers)"))  # fmt: skip
    return out


def ep_assumptions(model: TransformerModel, par: Layout, opts: Options) -> list[str]:
    if model.moe is None:  # a dense model: no expert grid (nor its module, at start-up)
        return []
    from parcalc.core.expert_parallel import expert_layout

    layout = expert_layout(model, par)
    out = [f"MoE expert grid (Megatron-Core folding): ep {layout.ep} x etp {layout.etp} x expert-DP {layout.edp} over the "
           f"tp x cp x dp = {par.tp * par.cp * par.dp} ranks of a stage; expert ranks ordered etp, ep, expert-DP"]
    if layout.ep > 1:
        out.append(f"all-to-all buffers: the busiest rank sends rho = {busiest_factor(model, opts):g} x its balanced T k h bytes, "
                   "(ep - 1)/ep of them to other ranks; the routing probabilities' all-to-all (4 bytes per token copy) is not counted")
        if par.tp > 1 and not par.sequence_parallel:
            out.append("tp > 1 without sequence parallelism: each TP rank dispatches all b s tokens (Megatron-Core refuses this in training)")
    out.append("dense data-parallel rows hold the non-expert parameters only; DDP buckets follow reverse registration with MoE layers "
               "first (the dense first layers, if any, after them)")
    out.append("TP collectives of an MoE layer are counted as a dense layer's (attention and the MLP block)")
    return out
