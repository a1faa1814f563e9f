"""Ground truth for torchao's Float8 inside pipeline stages of the torchtitan walk (parcalc.core.memory_pipeline_stage with
Float8 linears; under TP torchao's Float8 TP styles, memory_torchao_float8.AO_TP_SOURCES): parcalc's stage peak against
MemTracker's over torch's PipelineStage and Schedule1F1B running a stage of torchtitan's Llama converted by torchtitan's
float8 converter, parallelised as train.py at 9dec370 parallelises each stage (apply_tp with its Float8 plans where tp > 1,
apply_ac, apply_fsdp), on a (pp, dp, tp) mesh of fake ranks.

torchao is not a dependency of parcalc: tests/ground_truth/torchao_float8_pp.py made the tracker's numbers with torch
2.13.0+cpu and torchao 0.18.0 and wrote them to tests/fixtures/torchao/float8_pp_tracker.json. The walk's step is the
tracker's (test_torch_memory_pipeline.py): for-loop AdamW, step counters on the device, two embedding-gradient tables, no
cuBLAS workspace, the last stage's step(return_outputs=False)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .titan_walks import titan_llama, tracked_step_peak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_pp_tracker.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def _parcalc_peak(case: dict, precision: str = "fp8"):  # type: ignore[no-untyped-def]
    hidden, heads, kv_heads, ffn, vocab, b, s = case["dims"]
    model = titan_llama(hidden, heads, kv_heads, ffn, case["layers"], vocab)
    return tracked_step_peak(model, b, s, case["dp"], precision, case["ac"], pp=case["pp"], pp_stage=case["stage"],
                             stage_layers=tuple(case["bounds"]), micro_batches=case["micro_batches"], pp_return_outputs=False,
                             tp=case["tp"])  # fmt: skip


def _id(case: dict) -> str:
    where = {0: "first"}.get(case["stage"], "last" if case["stage"] == case["pp"] - 1 else "middle")
    return f"tp{case['tp']}-{where}-of-{case['pp']}-{case['ac']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_float8_stage_peak_matches_memtracker(case: dict) -> None:
    """Each stage's peak within 0.1 % of MemTracker's, measured 2026-11-29: 7 cases at 1.0000-1.0003 (tp 2: first stage
    full / none, last, middle; tp 1: first, last, middle)."""
    ours = _parcalc_peak(case)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {case['peak']:,.0f} B: {ours.allocated / case['peak']:.4f}")
    assert ours.allocated == pytest.approx(case["peak"], rel=1e-3), (ours.phase, case["parts"], ours.parts)


def test_the_fixture_is_what_torchao_tracks_now() -> None:
    """Where torchao is installed, one case of the fixture made again (the script's own function). Skipped without torchao
    (not a dependency of parcalc)."""
    pytest.importorskip("torchao.float8")
    import torch.distributed as dist

    from .torchao_float8_pp import CASES as SCRIPT_CASES
    from .torchao_float8_pp import tracked_float8_stage_peak

    try:
        total, _parts = tracked_float8_stage_peak(SCRIPT_CASES[2])
    finally:  # no process group is left for the next test module (fake_process_group.no_process_group_after)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert total == pytest.approx(CASES[2]["peak"], rel=1e-6)
