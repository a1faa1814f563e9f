"""The step's terms are defined once (parcalc.core.timing.terms): StepTerms' fields, fit's derivations, the search's
columns and the speedup/scaling term splits all name them from that table."""

from __future__ import annotations

from pathlib import Path

import pytest

from parcalc.core.choices import Recompute
from parcalc.core.fit import Cluster, Config, Training, estimate
from parcalc.core.speedup import step_terms
from parcalc.core.timing.step import StepTerms
from parcalc.core.timing.terms import BY_KEY, STEP, STEP_TERMS, only_terms
from parcalc.presets import load_framework, load_gpu, load_link, load_model

FIXTURES = Path(__file__).parent / "fixtures" / "h200"  # the shared H200 steps' Hugging Face configs (tests/step_parts_cases.py)


def _cluster(gpus: int, framework: str) -> Cluster:
    gpu = load_gpu("h100-sxm5")
    assert gpu.node is not None and gpu.dtypes["bf16"].dense_peak is not None
    return Cluster(gpus=gpus, gpus_per_node=8, peak=gpu.dtypes["bf16"].dense_peak.value, capacity=gpu.memory_capacity.value,
                   intra=load_link(gpu.node.intra_link), inter=load_link(gpu.node.inter_link), gpu=gpu, framework=load_framework(framework))  # fmt: skip


def test_the_table_names_every_field_of_step_terms() -> None:
    # combine's NamedTuple: every field is a term of the table but beta (the bubble's share, not a time) and t_step (their sum)
    assert {t.key for t in STEP_TERMS} == set(StepTerms._fields) - {"beta", "t_step"}
    assert STEP.formula == " + ".join(f"${t.key}" for t in STEP_TERMS)


def test_only_terms_drops_the_summands_a_configuration_lacks() -> None:
    present = [BY_KEY[k] for k in ("t_compute", "t_tp", "t_bubble", "t_pp", "t_dp", "t_optimizer")]
    assert only_terms(STEP.formula, present) == "$t_compute + $t_tp + $t_bubble + $t_pp + $t_dp + $t_optimizer"  # type: ignore[arg-type]
    assert only_terms(BY_KEY["t_bubble"].formula, present) == "($p - 1) / ($v × $m) × ($t_compute + $t_tp)"  # type: ignore[arg-type]


def test_fits_derivations_carry_the_tables_label_symbol_and_source() -> None:
    # llama3-8b on 16 H100s, TP 2 x PP 2 x DP 4 with ZeRO-1: every term but t_cp, t_ep, t_host and t_offload in play
    est = estimate(load_model("llama3-8b"), Config.of(2, 2, 4, 1, Recompute.SELECTIVE, 1), Training(64, 4096), _cluster(16, "megatron"))
    shown = est.step_terms()
    assert [d.key for d in shown] == ["t_compute", "t_tp", "t_bubble", "t_pp", "t_dp", "t_optimizer"]
    for d in (*shown, est.step):
        term = BY_KEY[d.key]
        assert (d.label, d.symbol, d.latex_symbol, d.unit) == (term.label, term.symbol, term.latex, "s")
        assert d.source.startswith(term.source)
    assert est.step.formula == "$t_compute + $t_tp + $t_bubble + $t_pp + $t_dp + $t_optimizer"
    assert est.bubble.formula == BY_KEY["t_bubble"].formula.replace(" + $t_cp + $t_ep", "")
    assert est.step.value == pytest.approx(sum(d.value for d in shown), rel=1e-12)


def test_the_speedup_split_adds_the_host_wait_up_to_t_step() -> None:
    # The hf profile models its host (presets/frameworks/hf.yaml `host:`): t_host is a term of t_step, and the split by name
    # (parcalc.core.speedup.step_terms) left it out before the terms came from one table: 14.6 of this step's 87.3 ms went missing.
    model = load_model(str(FIXTURES / "llama3.2-1b.json"))
    est = estimate(model, Config.of(1, 1, 1, 1, Recompute.NONE), Training(1, 2048, flash_attention=True, dropout=False),
                   _cluster(1, "hf"))  # fmt: skip
    assert est.host is not None and est.host.value > 0
    split = step_terms(est)
    assert split["host wait"] == est.host.value
    assert sum(split.values()) == pytest.approx(est.step.value, rel=1e-12)
