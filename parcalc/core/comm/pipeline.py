"""Pipeline parallelism: point-to-point sends between stages, and the tied embedding's sync.

- PP: each micro-batch's activations go point-to-point from stage i to i+1, their gradients
  back (Huang et al., GPipe 2019; Narayanan et al. 2021, sec. 2.2): the same bytes for GPipe and
  1F1B; interleaving with v chunks sends v times as often (Narayanan et al. 2021, sec. 2.2.2);
  DualPipeV's and ZB-V's V (device d holds stages d and 2p - 1 - d) crosses every device boundary twice, on the
  way down and on the way back up, so each pair of neighbours sends both ways in both passes
  (deepseek-ai/DualPipe dualpipev.py: _send_forward(0) to the next rank, _send_forward(1) to the previous).
  With TP every TP rank sends the full activation, with SP its sequence slice.
- Tied word embeddings with PP > 1: the first and last stage all-reduce the embedding gradient
  (megatron/core/distributed/finalize_model_grads.py, _allreduce_word_embedding_grads).
"""

from parcalc.core.collectives import Collective
from parcalc.core.comm.plan import (
    DUALPIPE,
    INTERLEAVED,
    V_SCHEDULES,
    Builder,
    Group,
    Layout,
    Options,
    Workload,
    choice_value,
    headline,
    rank_of,
    term,
)
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term


def pipeline_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, micro_batches: int) -> None:
    if par.pp < 2:
        return
    activation = work.micro_batch * work.seq_len * model.hidden * work.bytes_per_element
    if par.sequence_parallel and par.tp > 1:
        activation /= par.tp  # each TP rank holds and sends its sequence slice
    v = par.chunks if par.schedule == INTERLEAVED else 1
    pairs = [(t, d, c) for t in range(par.tp) for d in range(par.dp) for c in range(par.cp)]
    # DualPipe: half the micro-batches go down the devices, half up (dualpipe.py: the second pipeline enters at the last rank)
    bidirectional = choice_value(par.schedule) == DUALPIPE
    down = micro_batches // 2 if bidirectional else micro_batches
    for stage in range(par.pp - 1):
        groups = [Group(rank_of(par, t, d, stage, c), rank_of(par, t, d, stage + 1, c)) for t, d, c in pairs]
        for phase, direction, purpose, sender in (("forward", "i → i+1", "activations", stage),
                                                  ("backward", "i+1 → i", "activation gradients", stage + 1)):
            receiver = stage + 1 if sender == stage else stage
            b.add(dimension="pp", purpose=purpose, phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                  call_bytes={activation: down * v}, groups=groups, stages=f"boundary {stage}→{stage + 1}",
                  direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip
        if bidirectional:  # the pipeline the other way: stage p - 1 - (i + 1) on device i + 1 feeds device i
            for phase, direction, purpose, sender in (("forward", "i+1 → i", "activations (the pipeline up)", stage + 1),
                                                      ("backward", "i → i+1", "activation gradients (the pipeline up)", stage)):
                receiver = stage + 1 if sender == stage else stage
                b.add(dimension="pp", purpose=purpose, phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                      call_bytes={activation: micro_batches - down}, groups=groups, stages=f"boundary {stage}→{stage + 1}",
                      direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip
        if choice_value(par.schedule) in V_SCHEDULES:  # the way back up the V: stage 2p - 1 - (i + 1) on device i + 1 feeds device i
            for phase, direction, purpose, sender in (("forward", "i+1 → i", "activations (way back up the V)", stage + 1),
                                                      ("backward", "i → i+1", "activation gradients (way back up the V)", stage)):
                receiver = stage + 1 if sender == stage else stage
                b.add(dimension="pp", purpose=purpose, phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                      call_bytes={activation: micro_batches}, groups=groups, stages=f"boundary {stage}→{stage + 1}",
                      direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip
    if v > 1:  # interleaving: the last device hands each chunk's output back to the first
        groups = [Group(rank_of(par, t, d, 0, c), rank_of(par, t, d, par.pp - 1, c)) for t, d, c in pairs]
        last = par.pp - 1
        for phase, direction, purpose, sender in (("forward", f"{last} → 0", "activations", last),
                                                  ("backward", f"0 → {last}", "activation gradients", 0)):
            receiver = 0 if sender == last else last
            b.add(dimension="pp", purpose=purpose + " (next chunk)", phase=phase, op=Collective.POINT_TO_POINT, group_size=2,
                  call_bytes={activation: micro_batches * (v - 1)}, groups=groups, stages=f"boundary {last}→0",
                  direction=direction, roles=((sender, True), (receiver, False)))  # fmt: skip


def embedding_sync_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, opts: Options) -> None:
    if par.pp < 2 or model.vocab == 0 or not model.tied_embeddings or not opts.embedding_sync:
        return
    rows = -(-model.vocab // par.tp) if opts.vocab_parallel else model.vocab
    grads = rows * model.hidden * work.grad_bytes_per_element
    groups = [Group(rank_of(par, t, d, 0, c), rank_of(par, t, d, par.pp - 1, c)) for t in range(par.tp) for d in range(par.dp)
              for c in range(par.cp)]  # fmt: skip
    b.add(dimension="embedding", purpose="tied word-embedding gradients", phase="after backward", op=Collective.ALL_REDUCE,
          group_size=2, call_bytes={grads: 1}, groups=groups, stages=f"stages 0, {par.pp - 1}",
          roles=((0, True), (par.pp - 1, True)))  # fmt: skip


def pp_headline(model: TransformerModel, work: Workload, par: Layout, s: Term) -> Derivation:
    b = term("b", "B", "B", work.global_batch // par.dp, "", "sequences per iteration" + (" per replica" if par.dp > 1 else ""))
    seq = term("seq", "L", "L", work.seq_len, "", "sequence length")
    h = term("h", "D", "D", model.hidden, "", "hidden size")
    inputs: tuple[Term, ...]
    text, tex, inputs = "$b × $seq × $h × $s", r"$b \times $seq \times $h \times $s", (b, seq, h, s)
    value = b.value * work.seq_len * model.hidden * work.bytes_per_element
    v = par.chunks if par.schedule == INTERLEAVED else 1
    if par.sequence_parallel and par.tp > 1:
        t = term("t", "t", "t", par.tp, "", "TP ranks (each sends its sequence slice)")
        text, tex, inputs, value = text + " / $t", rf"\frac{{{tex}}}{{$t}}", (*inputs, t), value / par.tp
    if v > 1:
        vt = term("v", "v", "v", v, "", "model chunks per device (interleaved)")
        text, tex, inputs, value = "$v × " + text, r"$v \times " + tex, (vt, *inputs), value * v
    if choice_value(par.schedule) in V_SCHEDULES:
        both = term("ways", "2", "2", 2, "", "crossings of each device boundary: down the V and back up")
        text, tex, inputs, value = "2 × " + text, r"2 \times " + tex, (both, *inputs), value * 2
    return headline(
        "pp_p2p_per_boundary", "Activations sent from stage i to i+1 per iteration (and as many gradient bytes back)",
        "V_PP", r"V_{\mathrm{PP}}", text, tex, inputs, value,
        "GPipe / 1F1B: each micro-batch's activations cross each stage boundary once forward and their gradients once "
        "backward; the total does not depend on the number of micro-batches",
    )  # fmt: skip


def pp_assumptions(par: Layout) -> list[str]:
    if par.pp > 1 and par.tp > 1:
        return ["pipeline sends: each TP rank sends " + ("its sequence slice" if par.sequence_parallel else "the full activation")
                + " to its peer in the next stage"]  # fmt: skip
    return []
