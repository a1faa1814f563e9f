"""Context parallelism: what attention exchanges over the cp ranks of each layer, forward and backward.

Per layer and micro-batch, on one device (one TP rank of one CP rank), with B_kv = 2 b (s/cp)
(kv_heads d / t) e the K and V of its sequence shard (GQA: kv_heads x head_dim) and B_q = b (s/cp)
(heads d / t) e its Q (parcalc.core.context):

- p2p, Transformer Engine's AttnFuncWithCPAndKVP2P: forward, cp - 1 ring steps, each an isend of
  one K/V block (K and V in one buffer) to the next rank with an irecv from the previous:
  (cp - 1) B_kv sent in cp - 1 calls. Backward, cp steps: the first sends the K/V block, the
  middle cp - 2 send it with the dK/dV accumulated so far ([2, *kv.shape] buffers), the last only
  dK/dV, which lands on the rank that owns those keys: 2 (cp - 1) B_kv in cp calls.
- all-gather, AttnFuncWithCPAndKVAllGather (Llama 3 sec. 3.3.2): forward one all-gather of K and
  one of V (gather_along_first_dim), backward the same two again (only the shard is saved) and a
  reduce-scatter of dK and one of dV; a call's payload is the gathered tensor, cp B_kv / 2, and
  each device sends (cp - 1)/cp of it: (cp - 1) B_kv forward, 2 (cp - 1) B_kv backward, the
  same bytes as p2p in 2 and 4 calls.
- a2a, AttnFuncWithCPAndQKVOA2A (DeepSpeed-Ulysses): forward all-to-alls of Q, K, V and of the
  output, backward of dO, dQ, dK, dV; each call's payload is one rank's buffer, each device sends
  (cp - 1)/cp of it: (cp - 1)/cp (2 B_q + B_kv) in each direction, in 4 calls.

Full recomputation runs each layer's forward again before its backward, exchanges included.
Placement: Megatron-LM's order "tp-cp-ep-dp-pp" puts the cp ranks of a group tp apart
(rank = t + tp (c + cp (d + dp s))), so cp x tp <= GPUs per node keeps the group in one node.
Source: parcalc.core.context (Transformer Engine context_parallel.py at d0067d0, with line numbers).
"""

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
from parcalc.core.context import TE_CP, CpComm, cp_comm_of, kv_block_bytes, q_block_bytes
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation


def cp_call_bytes(model: TransformerModel, work: Workload, par: Layout, recompute: bool = False
                  ) -> tuple[tuple[str, str, Collective, dict[float, int]], ...]:  # fmt: skip
    """(purpose, phase, op, {bytes of a call: calls}) of one layer for one micro-batch, on one
    device, as Builder.add takes them (payload convention: the gathered tensor for all-gather and
    reduce-scatter, a rank's buffer for all-to-all, the message for send/recv)."""
    cp = par.cp
    if cp < 2:
        return ()
    comm = cp_comm_of(par.cp_comm)
    kv = kv_block_bytes(model, work.micro_batch, work.seq_len, par, work.bytes_per_element)
    repeat = 2 if recompute else 1
    if comm is CpComm.P2P:
        backward: dict[float, int] = {kv: 2} if cp == 2 else {kv: 2, 2 * kv: cp - 2}
        return (("K/V blocks, ring", "forward", Collective.POINT_TO_POINT, {kv: (cp - 1) * repeat}),
                ("K/V and dK/dV blocks, ring", "backward", Collective.POINT_TO_POINT, backward))  # fmt: skip
    if comm is CpComm.ALL_GATHER:
        full = kv * cp / 2  # K (or V) of the whole sequence: the gathered tensor
        return (("K and V", "forward", Collective.ALL_GATHER, {full: 2 * repeat}),
                ("K and V (re-gathered)", "backward", Collective.ALL_GATHER, {full: 2}),
                ("dK and dV", "backward", Collective.REDUCE_SCATTER, {full: 2}))  # fmt: skip
    q = q_block_bytes(model, work.micro_batch, work.seq_len, par, work.bytes_per_element)
    forward: dict[float, int] = {q: 2 * repeat}  # Q and the output: B_q each; K and V: B_kv / 2 each
    forward[kv / 2] = forward.get(kv / 2, 0) + 2 * repeat
    backward = {q: 2}
    backward[kv / 2] = backward.get(kv / 2, 0) + 2
    return (("Q, K, V in; output back", "forward", Collective.ALL_TO_ALL, forward),
            ("dO in; dQ, dK, dV back", "backward", Collective.ALL_TO_ALL, backward))  # fmt: skip


def mixer_call_bytes(model: TransformerModel, work: Workload, par: Layout, recompute: bool = False
                     ) -> tuple[tuple[str, str, Collective, dict[float, int]], ...]:  # fmt: skip
    """cp_call_bytes for one recurrent-mixer layer of a hybrid (Mamba-2, gated DeltaNet): Megatron-Core's all-to-alls over
    heads, forward (replayed by full recomputation) and their transposes backward (parcalc.core.hybrid_context)."""
    from parcalc.core.hybrid_context import mixer_a2a_buffers

    buffers = mixer_a2a_buffers(model, work.micro_batch, work.seq_len, par.tp, par.cp, work.bytes_per_element)
    if not buffers:
        return ()
    sizes: dict[float, int] = {}
    for _, size in buffers:
        sizes[size] = sizes.get(size, 0) + 1
    what = "Mamba-2" if model.mamba is not None else "gated-DeltaNet"
    repeat = 2 if recompute else 1
    return ((f"{what} mixer: heads in, output back", "forward", Collective.ALL_TO_ALL, {k: v * repeat for k, v in sizes.items()}),
            (f"{what} mixer: gradients (transposed)", "backward", Collective.ALL_TO_ALL, dict(sizes)))  # fmt: skip


def context_parallel_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, opts: Options,
                          layers: tuple[int, ...], micro_batches: int) -> None:  # fmt: skip
    """Every context-parallel exchange of one iteration, per pipeline stage (its layers x micro-batches); a hybrid's
    attention layers run attention's exchange, its recurrent mixers their all-to-alls (mixer_call_bytes)."""
    if par.cp < 2:
        return
    from parcalc.core.comm.tensors import stage_ranges
    from parcalc.core.hybrid_context import exchanging_layers

    calls = cp_call_bytes(model, work, par, opts.recompute)
    mixers = mixer_call_bytes(model, work, par, opts.recompute)
    ranges = stage_ranges(model.layers, par)
    for stage, held in enumerate(layers):
        groups = [Group(rank_of(par, t, d, stage, 0), rank_of(par, t, d, stage, par.cp - 1)) for t in range(par.tp) for d in range(par.dp)]
        label = f"stage {stage}" if par.pp > 1 else ""
        counts = [exchanging_layers(model, r.start, r.stop) for r in ranges[stage]] if mixers else [(held, 0)]
        attention, recurrent = sum(a for a, _ in counts), sum(m for _, m in counts)
        for kind_calls, n in ((calls, attention * micro_batches), (mixers, recurrent * micro_batches)):
            if not n:
                continue
            for purpose, phase, op, sizes in kind_calls:
                p2p = op is Collective.POINT_TO_POINT
                b.add(dimension="cp", purpose=purpose, phase=phase, op=op, group_size=2 if p2p else par.cp,
                      call_bytes={size: count * n for size, count in sizes.items()}, groups=groups, stages=label,
                      direction=f"c → c+1 (ring of {par.cp})" if p2p else "", roles=((stage, True),))  # fmt: skip


def cp_sent_per_layer(model: TransformerModel, work: Workload, par: Layout, phase: str, recompute: bool = False) -> float:
    """Bytes one device sends in one layer's context-parallel exchange for one micro-batch, in `phase`
    ('forward' or 'backward'): the algorithm's per-device traffic (point-to-point: the message)."""
    from parcalc.core.collectives import collective_cost, default_algorithm

    total = 0.0
    for _, ph, op, sizes in cp_call_bytes(model, work, par, recompute):
        if ph != phase:
            continue
        workers = 2 if op is Collective.POINT_TO_POINT else par.cp
        total += sum(collective_cost(op, default_algorithm(op), size, workers).sent * k for size, k in sizes.items())
    return total


def cp_headlines(model: TransformerModel, work: Workload, par: Layout, opts: Options) -> list[Derivation]:
    """Bytes one device sends per layer per micro-batch, forward and backward, in closed form."""
    cp, comm = par.cp, cp_comm_of(par.cp_comm)
    kv = kv_block_bytes(model, work.micro_batch, work.seq_len, par, work.bytes_per_element)
    c = term("cp", "cp", r"c_p", cp, "", f"context-parallel ranks ({comm.value})")
    bkv = term("B_kv", "B_kv", r"B_{\mathrm{kv}}", kv, "B", "K and V of one rank's sequence shard: 2 b (s/cp) (kv_heads d / t) e", TE_CP)
    out = []
    if comm is CpComm.A2A:
        q = q_block_bytes(model, work.micro_batch, work.seq_len, par, work.bytes_per_element)
        bq = term("B_q", "B_q", r"B_{\mathrm{q}}", q, "B", "Q (or the output) of one rank's sequence shard: b (s/cp) (heads d / t) e")
        text, tex = "($cp - 1) / $cp × (2 × $B_q + $B_kv)", r"\frac{$cp - 1}{$cp} (2 $B_q + $B_kv)"
        value = (cp - 1) / cp * (2 * q + kv)
        src = f"{TE_CP}, AttnFuncWithCPAndQKVOA2A: all-to-all of Q, K, V and O forward, dO, dQ, dK, dV backward"
        out.append(headline("cp_forward_sent", "CP bytes one device sends per layer per micro-batch, forward", "S_cp,f",
                            r"S_{\mathrm{cp,f}}", text, tex, (c, bq, bkv), value, src))
        out.append(headline("cp_backward_sent", "CP bytes one device sends per layer per micro-batch, backward", "S_cp,b",
                            r"S_{\mathrm{cp,b}}", text, tex, (c, bq, bkv), value, src))
        return out
    if comm is CpComm.P2P:
        src_f = f"{TE_CP}, AttnFuncWithCPAndKVP2P.forward: cp - 1 isend/irecv steps of the K/V block (lines 1698-1715)"
        src_b = f"{TE_CP}, AttnFuncWithCPAndKVP2P.backward: cp steps, K/V, then K/V with dK/dV, then dK/dV (lines 2459-2500)"
    else:
        src_f = f"{TE_CP}, AttnFuncWithCPAndKVAllGather.forward: all-gather of K and of V, (cp - 1)/cp of cp B_kv / 2 each"
        src_b = f"{TE_CP}, AttnFuncWithCPAndKVAllGather.backward: K, V gathered again, dK, dV reduce-scattered"
    out.append(headline("cp_forward_sent", "CP bytes one device sends per layer per micro-batch, forward", "S_cp,f",
                        r"S_{\mathrm{cp,f}}", "($cp - 1) × $B_kv", r"($cp - 1) \times $B_kv", (c, bkv), (cp - 1) * kv, src_f))
    out.append(headline("cp_backward_sent", "CP bytes one device sends per layer per micro-batch, backward", "S_cp,b",
                        r"S_{\mathrm{cp,b}}", "2 × ($cp - 1) × $B_kv", r"2 ($cp - 1) \times $B_kv", (c, bkv), 2 * (cp - 1) * kv, src_b))
    return out


def mixer_cp_headlines(model: TransformerModel, work: Workload, par: Layout) -> list[Derivation]:
    """Bytes one device sends per recurrent-mixer layer per micro-batch, forward and backward alike, in closed form:
    (cp - 1)/cp of each all-to-all's buffer b (s/cp) w e (parcalc.core.hybrid_context); [] for other models."""
    from parcalc.core.hybrid_context import GDN_CP, MAMBA_CP, mixer_a2a_widths, mixer_cp_sent

    widths = mixer_a2a_widths(model, par.tp, par.cp)
    if not widths:
        return []
    cp = par.cp
    width = sum(w for _, w in widths)
    mamba = model.mamba is not None
    what = "Mamba-2" if mamba else "gated-DeltaNet"
    text = ("(2 d_inner + H) / t + 2 N max(G / t, cp) + d_inner / t" if mamba
            else "(2 key_dim + 2 value_dim + 2 H_v) / t + value_dim / t")  # fmt: skip
    inputs = (term("cp", "cp", r"c_p", cp, "", "context-parallel ranks"),
              term("b", "b", "b", work.micro_batch, "", "micro-batch (sequences)"),
              term("s", "s", "s", work.seq_len, "", "sequence length (tokens)"),
              term("w", "w", "w", width, "", f"elements per token of a rank's shard its all-to-alls carry, in and back: {text} "
                   f"({', '.join(f'{k} {v:g}' for k, v in widths)})", MAMBA_CP if mamba else GDN_CP),
              term("e", "e", "e", work.bytes_per_element, "B", "bytes per activation element"))
    value = mixer_cp_sent(model, work.micro_batch, work.seq_len, par.tp, cp, work.bytes_per_element)
    return [headline(f"cp_mixer_{phase}_sent", f"CP bytes one device sends per {what} layer per micro-batch, {phase}", f"S_mix,{phase[0]}",
                     rf"S_{{\mathrm{{mix,{phase[0]}}}}}", "($cp - 1) / $cp × $b × $s / $cp × $w × $e",
                     r"\frac{$cp - 1}{$cp} $b \frac{$s}{$cp} $w $e", inputs, value,
                     f"{MAMBA_CP if mamba else GDN_CP}" + ("" if phase == "forward" else "; backward: each all-to-all's transpose"))
            for phase in ("forward", "backward")]  # fmt: skip


def cp_assumptions(model: TransformerModel, par: Layout, opts: Options) -> list[str]:
    if par.cp < 2:
        return []
    comm = cp_comm_of(par.cp_comm)
    out = [f"context parallelism over {par.cp} ranks, {comm.label}: the exchanges of every layer, per micro-batch; "
           "TP, SP and pipeline volumes are those of the s/cp-token shard; gradients are reduced over the dp x cp ranks "
           "(Megatron-LM's dp-cp group)"]  # fmt: skip
    if model.kv_heads < model.heads:
        out.append(f"grouped-query attention: K and V are {model.kv_heads} of {model.heads} heads wide, so are the exchanged blocks")
    if opts.recompute:
        out.append("full recomputation repeats each layer's forward context-parallel exchange before its backward")
    if model.mamba is not None or model.linear_attention is not None:
        out.append("a hybrid's recurrent mixers pass no state between CP ranks: Megatron-Core swaps the sequence split for a head "
                   "split with all-to-alls around the conv1d and the scan, and back (parcalc.core.hybrid_context); only its "
                   "attention layers run the exchange above")  # fmt: skip
    return out
