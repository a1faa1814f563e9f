"""fit's derivations of the bubble and the pipeline sends under the schedules that split the backward (ZB-H1, ZB-H2,
ZB-V, DualPipeV, DualPipe), whose bubble the step-time model takes from the event simulation of their order
(parcalc.core.pipeline_step.step_bubble; the terms themselves are combined in parcalc.core.timing.step.combine).

Their sources, per schedule:
- ZB-H1 / ZB-H2: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024), sec. 2 (the handcrafted orders);
- ZB-V: the zero-bubble repository's V heuristic (parcalc.core.pipeline_sim.ZBV_SOURCE);
- DualPipe and DualPipeV: deepseek-ai/DualPipe @3da1bbe, dualpipe/dualpipe.py and dualpipev.py (step), whose overlapped "F & B" pairs
  hide one chunk's expert-parallel and pipeline communication under the other's compute (DeepSeek-V3 technical report
  sec. 3.2.1; the DualPipe README: "full overlap of forward and backward computation-communication phases").
"""

from __future__ import annotations

from typing import Any

from parcalc.core.choices import Schedule
from parcalc.core.layout import Layout
from parcalc.core.pipeline import DUALPIPE_README, QI_TABLE_2
from parcalc.core.pipeline_sim import ZBV_SOURCE
from parcalc.core.pipeline_step import paired_passes, step_micro_batches
from parcalc.core.timing.terms import BUBBLE, PP
from parcalc.derivation import Derivation, Term

SCHEDULE_SOURCES = {
    Schedule.ZB_H1: f"{QI_TABLE_2}; the order of sec. 2.1 (parcalc.core.pipeline_sim.zb_h1_order)",
    Schedule.ZB_H2: f"{QI_TABLE_2}; the order of sec. 2.2 (parcalc.core.pipeline_sim.zb_h2_order)",
    Schedule.ZB_V: ZBV_SOURCE,
    Schedule.DUALPIPEV: "deepseek-ai/DualPipe @3da1bbe, dualpipe/dualpipev.py, DualPipeV.step (parcalc.core.pipeline_sim.dualpipev_order); "
                        + DUALPIPE_README,
    Schedule.DUALPIPE: "deepseek-ai/DualPipe @3da1bbe, dualpipe/dualpipe.py, DualPipe.step (parcalc.core.pipeline_sim.dualpipe_order); "
                       "DeepSeek-V3 technical report sec. 3.2.1, Table 2",
}
SIMULATION = "the event simulation of the schedule's order (parcalc.core.pipeline_sim, parcalc.core.pipeline_step.step_bubble)"


def _t(key: str, symbol: str, value: float, unit: str, description: str, latex: str | None = None) -> Term:
    return Term(key, symbol, latex or symbol, float(value), unit, description)


def simulated_bubble_derivation(layout: Layout, m_term: Term, stage: Any, stretched: list[Term], value: float) -> Derivation:
    """t_bubble of a split-backward schedule: the pacing stage's idle time in its simulated order (seconds).

    stretched: t_compute, t_tp and, where present, t_cp and t_ep (their sum over m is one micro-batch's work and exposed
    communication); stage: the slowest stage's StagePieces (forward, backward, recompute, wgrad)."""
    schedule, p, m = layout.schedule, layout.pp, int(m_term.value)
    comm = sum(t.value for t in stretched[1:]) / m
    weight = min(float(stage.wgrad), float(stage.backward))
    forward, input_gradient = float(stage.forward), float(stage.backward + stage.recompute) - weight
    inputs = [
        _t("p", "p", p, "", "pipeline devices" + (", two stages each in a V (stage d and 2p - 1 - d)" if schedule.v_shape else "")),
        m_term,
        _t("F", "F", forward, "s", "forward of one micro-batch on the slowest stage"),
        _t("B", "B", input_gradient, "s", "its input-gradient pass: the backward and recomputation less W"),
        _t("W", "W", weight, "s", "its weight-gradient pass: the weight-gradient GEMMs of its layers (dW = X^T dY of every linear)"),
        _t("c", "c", comm, "s", "exposed communication of one micro-batch, (" + " + ".join(f"${t.key}" for t in stretched[1:]) + ") / m"
           if len(stretched) > 1 else "exposed communication of one micro-batch (none)"),
        *stretched[1:],
    ]
    assumptions = [
        "every stage takes the slowest stage's F, B and W (the closed forms' balanced stages); the stage's exposed communication "
        "per micro-batch is split evenly between its forward and backward (each layer's forward collectives mirror its backward ones)",
        "the iteration ends when the last stage is done: the optimizer step waits for every stage (Megatron-LM's global gradient "
        "norm); Qi et al.'s post-validation (sec. 4), which lets each stage start its next iteration when done, is not modelled",
    ]
    simulated = step_micro_batches(schedule, p, m)
    if simulated < m:
        assumptions.append(f"simulated with {simulated} micro-batches: the steady phase adds none to the idle time")
    if schedule.pairs_forward_backward:
        assumptions.append("an overlapped F & B pair computes its two passes one after the other: the pair hides communication, not compute")
    if schedule is Schedule.ZB_V:
        assumptions.append("ZB-V's order is the reference heuristic's for these F, B, W per chunk (half of each) and 1F1B's memory limit")
    formula = f"T_sim({schedule.label}; $p, $m, $F + $c / 2, $B + $c / 2, $W) - $m × ($F + $B + $W + $c)"
    return BUBBLE.derivation(inputs, value, formula=formula, source=f"{SIMULATION}; the order: {SCHEDULE_SOURCES[schedule]}",
                             assumptions=tuple(assumptions))


def embedding_sync_term(stage: Any) -> Term | None:
    """T_emb of t_pp: the tied embedding's gradient all-reduce between the pipeline's ends (parcalc.core.timing.step.
    embedding_sync_time), or None where there is none."""
    if not stage.embedding_sync:
        return None
    return _t("T_emb", "T_emb", float(stage.embedding_sync), "s", "all-reduce of the tied word embedding's gradient between the "
              "first and the last stage, after the flush (Megatron-LM's embedding group; DeepSpeed's ReduceTiedGrads), NCCL model",
              r"T_{\mathrm{emb}}")  # fmt: skip


def split_sends_derivation(layout: Layout, m_term: Term, stage: Any, value: float, send: str, sync: Term | None = None) -> Derivation:
    """t_pp of a split-backward schedule: 2 m sends (a V: 4 m, down and back up), less the two sends of each of
    DualPipeV's overlapped pairs (they run under the pair's compute), plus the tied embedding's all-reduce (sync, where there is
    one). send: what one send carries (step.pipeline_send_description)."""
    schedule, p, m = layout.schedule, layout.pp, int(m_term.value)
    ways = 2 if schedule.v_shape else 1
    inputs = [m_term, _t("k", "k", ways, "", "chunk passes of a micro-batch on a device each way (a V: down and back up)"),
              _t("T_p2p", "T_p2p", stage.p2p, "s", send, r"T_{\mathrm{p2p}}")]
    formula = "2 × $k × $m × $T_p2p"
    if schedule.pairs_forward_backward:
        pairs = paired_passes(schedule, p, m)
        inputs.append(_t("P", "P", pairs, "", "overlapped F & B pairs on the device with the fewest"
                         + (" (device 1: 2m - 3p + 1)" if schedule.v_shape else "") + ", whose sends run under the pair's compute"))  # fmt: skip
        formula = "(2 × $k × $m - 2 × $P) × $T_p2p"
    if sync is not None:  # the tied embedding's gradient all-reduce between the ends (never for a V: one device holds both)
        inputs.append(sync)
        formula += " + $T_emb"
    return PP.derivation(inputs, value, formula=formula, source=f"{PP.source}; {SCHEDULE_SOURCES[schedule]}")
