"""The terms of one iteration's time, each defined once: its key (the field of
parcalc.core.timing.step.StepTerms, the derivation's key, fit --search's column), what it is in
words, its symbol in text and LaTeX, its formula and its source.

    t_step = t_compute + t_host + t_tp + t_cp + t_ep + t_bubble + t_pp + t_dp + t_optimizer + t_offload

step.combine computes the terms (floats for one configuration, arrays in the search); fit's
derivations (parcalc.core.fit), its search table and verdicts (parcalc.results.fit), the speedup and
scaling tables (parcalc.core.speedup, parcalc.results.scaling) all name them from STEP_TERMS, so a
term's label, symbol, formula and source are written here and nowhere else.

A formula is a Derivation template over its inputs' keys ($m, $t_f, ...). Where the configuration
decides the shape (the collectives of t_tp and t_dp, the parts of t_offload, which terms the bubble
stretches) `formula` is the general form and fit writes the instance in force from its parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from parcalc.core.context import TE_CP
from parcalc.core.timing.moe import OVERLAP_SOURCE
from parcalc.core.timing.offload import ZERO_OFFLOAD_OVERLAP
from parcalc.derivation import Derivation, Term

KERNEL_SOURCE = "per-kernel roofline: GEMMs by shape, FlashAttention, memory-bound operations (parcalc.core.timing.compute)"
NCCL_SOURCE = "NCCL's cost model (src/graph/tuning.cc; parcalc.core.timing.network)"
NARAYANAN = "Narayanan et al. 2021 (Megatron-LM, SC'21)"
KORTHIKANTI = "Korthikanti et al. 2022 (Reducing Activation Recomputation)"


@dataclass(frozen=True)
class StepTerm:
    """One term of t_step. key: StepTerms' field and the derivation's key; label: the derivation's
    title; name: the term in a sentence ("TP communication"); heading: a table column's; symbol and
    latex: how it prints; formula: its Derivation template (the general form where fit writes the
    configuration's own); source: where the formula comes from."""

    key: str
    label: str
    name: str
    heading: str
    symbol: str
    latex: str
    formula: str
    source: str

    def derivation(self, inputs: list[Term] | tuple[Term, ...], value: float, *, formula: str | None = None, source: str | None = None,
                   assumptions: tuple[str, ...] = ()) -> Derivation:  # fmt: skip
        """This term as a Derivation in seconds: its own formula and source unless the configuration's are given."""
        return derivation(self.key, self.label, self.symbol, self.latex, formula or self.formula, list(inputs), value, "s",
                          source or self.source, assumptions)  # fmt: skip

    def zero(self, why: str) -> Derivation:
        """The term where the configuration has none of it (no pipeline, no TP, ...): 0 s, and why."""
        return derivation(self.key, self.label, self.symbol, self.latex, "0", [], 0.0, "s", why)


def derivation(key: str, label: str, symbol: str, latex_symbol: str, formula: str, inputs: list[Term], value: float,
               unit: str, source: str, assumptions: tuple[str, ...] = ()) -> Derivation:  # fmt: skip
    """A derivation whose LaTeX formula follows from the text one (formula_latex)."""
    return Derivation(key, label, symbol, latex_symbol, formula, formula_latex(formula), tuple(inputs), float(value), unit, source,
                      assumptions)  # fmt: skip


# The text formulas' symbols as LaTeX math: × → \times, Σ → \Sigma, ≥ → \geq, max/min as operators
_MATH_SYMBOLS = (("×", r"\times "), ("Σ", r"\Sigma "), ("≥", r"\geq "), ("≤", r"\leq "), ("max(", r"\max("), ("max_", r"\max_"),
                 ("min(", r"\min("), ("ceil(", r"\mathrm{ceil}("))  # fmt: skip
# Words of a formula written partly in prose (t_host's "Σ over the segments between synchronisations of max(...)", t_tp's
# "(SP re-gathers)", t_dp's module path): runs of words that start with two letters, set upright as text with their spaces.
# In math they were a product of italic letters ("overthesegmentsbetween...", 64 pt off fit's PDF). Not a word: a
# placeholder ($n_f), what follows an underscore or a backslash (t_compute's "compute", \times), a symbol with a subscript
# (H_i), an operator applied to "(". A line may break before a run that follows a comma, as between a function's arguments.
_WORD = r"[A-Za-z]{2}(?:[\w'.-]*[A-Za-z])?"
_PROSE = re.compile(rf"( ?)(?<![\w$\\{{])({_WORD}(?: {_WORD})*)(?![\w(])( ?)")


def formula_latex(formula: str) -> str:
    """A text formula (`×`, `Σ`, `max(`, prose words) as the LaTeX math template of the same Derivation."""
    for text, latex in _MATH_SYMBOLS:
        formula = formula.replace(text, latex)
    # the spaces around a run as math's control spaces, not inside \text: glue, which a line break discards
    texted = _PROSE.sub(lambda m: (m[1] and "\\ ") + r"\text{" + m[2].replace("_", r"\_") + "}" + (m[3] and "\\ "), formula)
    return texted.replace(r",\ \text{", r",\allowbreak\ \text{")


COMPUTE = StepTerm(
    "t_compute", "Compute per iteration (kernels of the slowest stage, every micro-batch)", "compute", "compute",
    "t_compute", r"t_{\mathrm{compute}}", "$m × ($t_f + $t_b + $t_r)", KERNEL_SOURCE)  # fmt: skip
HOST = StepTerm(
    "t_host", "GPU waiting for the host per iteration (kernels issued one by one)", "host wait", "host wait",
    "t_host", r"t_{\mathrm{host}}",
    "Σ over the segments between synchronisations of max(ΣH, max_j(Σ_{i<j} H_i + Σ_{i≥j} G_i)) - ΣG over their phases "
    "(forward, backward) × $m, the optimizer's Python, its launches; "
    "H = $n_f × $c_f, $n_b × $c_b, $n_p × $c_p, $n_o × $c_o; G = $G_f, $G_b, 0, $G_o",
    "fluid model of one CUDA stream fed by the host (parcalc.core.timing.host)")  # fmt: skip
TP = StepTerm(
    "t_tp", "Tensor-parallel communication exposed per iteration", "TP communication", "TP comm", "t_tp", r"t_{\mathrm{tp}}",
    "$m × max(0, $C_tp + $L_s × (SP re-gathers) - $H_tp)", f"{KORTHIKANTI} sec. 4.2.2; Shoeybi et al. 2019 sec. 3; {NCCL_SOURCE}")  # fmt: skip
CP = StepTerm(
    "t_cp", "Context-parallel communication exposed per iteration", "CP exchanges", "CP comm", "t_cp", r"t_{\mathrm{cp}}",
    "$m × $E_cp", f"{TE_CP}; {NCCL_SOURCE}")  # fmt: skip
EP = StepTerm(
    "t_ep", "Expert-parallel dispatch and combine exposed per iteration", "MoE dispatch and combine", "EP comm", "t_ep",
    r"t_{\mathrm{ep}}", "$u × $A + ($m - $u) × $E", f"parcalc.core.timing.moe; {OVERLAP_SOURCE}; {NCCL_SOURCE}")  # fmt: skip
BUBBLE = StepTerm(
    "t_bubble", "Pipeline bubble per iteration", "bubble", "bubble", "t_bubble", r"t_{\mathrm{bubble}}",
    "($p - 1) / ($v × $m) × ($t_compute + $t_tp + $t_cp + $t_ep)", f"{NARAYANAN} sec. 2.2 (the slowest stage sets the pace)")  # fmt: skip
PP = StepTerm(
    "t_pp", "Pipeline sends per iteration (activations forward, gradients backward)", "PP sends", "PP comm", "t_pp", r"t_{\mathrm{pp}}",
    "2 × $m × $v × $T_p2p", f"{NARAYANAN} sec. 2.2 and 4.1 (one send per micro-batch, chunk and direction)")  # fmt: skip
DP = StepTerm(
    "t_dp", "Data-parallel communication exposed per iteration", "exposed DP sync", "DP exposed", "t_dp", r"t_{\mathrm{dp}}",
    "the reduce, gather and re-gather of the ZeRO stage in force beyond their overlap windows (parcalc.core.timing.step.dp_exposed)",
    "Rajbhandari et al. 2020 sec. 7 (ZeRO volumes); Zhao et al. 2023 (FSDP prefetch)")  # fmt: skip (fit adds the framework's buckets and NCCL)
OPTIMIZER = StepTerm(
    "t_optimizer", "Optimizer step (memory-bound over the local parameters)", "optimizer", "optimizer", "t_opt", r"t_{\mathrm{opt}}",
    "$w × $P × $Q_p / ($BW × $e_mem × $x × $d_z)",
    "reads and writes every optimizer state once (parcalc.core.timing.compute.optimizer_bytes)")  # fmt: skip
OFFLOAD = StepTerm(
    "t_offload", "Offloading exposed per iteration (PCIe copies, CPU optimizer step)", "offload", "offload", "t_offload",
    r"t_{\mathrm{offload}}",
    "the gradient copy beyond the backward + the CPU step + the weight copy + the activation copies beyond the passes",
    f"{ZERO_OFFLOAD_OVERLAP}; parcalc.core.timing.offload")  # fmt: skip
STEP = StepTerm(
    "t_step", "Time per iteration", "step", "step", "t_step", r"t_{\mathrm{step}}",
    "$t_compute + $t_host + $t_tp + $t_cp + $t_ep + $t_bubble + $t_pp + $t_dp + $t_optimizer + $t_offload",
    "the sum of the terms above (parcalc.core.timing.step)")  # fmt: skip

# The terms t_step adds, in the order fit shows them (StepTerms' fields but beta and t_step).
STEP_TERMS: tuple[StepTerm, ...] = (COMPUTE, HOST, TP, CP, EP, BUBBLE, PP, DP, OPTIMIZER, OFFLOAD)
BY_KEY: dict[str, StepTerm] = {t.key: t for t in (*STEP_TERMS, STEP)}

# t_compute split by kind of work (parcalc.core.timing.kinds): (key, label, symbol, LaTeX, the per-micro-batch input)
KIND_TERMS = (("gemm", "t_gemm", "GEMM kernels per iteration", "t_gemm", r"t_{\mathrm{gemm}}", "G_mb"),
              ("attention", "t_attention", "Attention kernels per iteration", "t_attn", r"t_{\mathrm{attn}}", "A_mb"),
              ("memory", "t_memory_bound", "Memory-bound kernels per iteration", "t_mem", r"t_{\mathrm{mem}}", "M_mb"))  # fmt: skip
# recomputation as a term of its own, split off t_compute (parcalc.core.speedup.step_terms); its column in the tables
RECOMPUTE_NAME, RECOMPUTE_KEY, RECOMPUTE_HEADING = "recomputation", "t_recompute", "recomp."


def only_terms(formula: str, present: list[Derivation] | tuple[Derivation, ...] | list[Term]) -> str:
    """`formula` without the summands `+ $t_x` of the terms the configuration lacks (t_step without t_cp or t_host, the
    bubble without t_ep): the sums above are written for every term, a derivation shows those it adds."""
    import re

    keys = {x.key for x in present}
    for term in STEP_TERMS:
        if term.key not in keys:
            formula = re.sub(rf" \+ \${term.key}\b", "", formula)
    return formula
