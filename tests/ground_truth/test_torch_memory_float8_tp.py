"""Ground truth for torchao's Float8 under tensor parallelism in the torchtitan walk (parcalc.core.memory_torchtitan_tp with
Float8 linears, parcalc.core.memory_torchao_float8.AO_TP_SOURCES): parcalc's step peak against FSDPMemTracker's over
torchtitan's Llama code converted by torchtitan's float8 converter and parallelised with apply_tp's Float8 plans
(Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput) and FSDP2 on a (dp, tp) mesh of fake ranks.

torchao is not a dependency of parcalc: tests/ground_truth/torchao_float8_tp.py made the tracker's numbers with torch
2.13.0+cpu and torchao 0.18.0 and wrote them to tests/fixtures/torchao/float8_tp_tracker.json, which these tests hold parcalc
to. The walk's step is the tracker's: for-loop AdamW, step counters on the device, two embedding-gradient tables, no cuBLAS
workspace (test_torch_memory_torchtitan_tp.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .titan_walks import titan_llama, tracked_step_peak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_tp_tracker.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def _parcalc_peak(case: dict, precision: str = "fp8"):  # type: ignore[no-untyped-def]
    hidden, heads, kv_heads, ffn, layers, vocab, b, s = case["dims"]
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, case["dp"], precision, case["ac"], tp=case["tp"])


def _id(case: dict) -> str:
    return f"{case['shape']}-dp{case['dp']}-tp{case['tp']}-{case['ac']}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_float8_tp_peak_matches_fsdp_mem_tracker(case: dict) -> None:
    """Each case's peak within 0.1 % of the tracker's, measured 2026-11-29: 0.9997-1.0006 over the 9 cases (the walk leaves
    out the casts' scalar amax and scale tensors, 512-byte blocks each); FSDP2's own buffers at the peak within 1 %."""
    tracked = case["peak"]
    ours = _parcalc_peak(case)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=1e-3), (ours.phase, tracked, ours.parts)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers"),
                           ("ALL_GATHER", "all-gather buffers"), ("REDUCE_SCATTER", "reduce-scatter buffers")):  # fmt: skip
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked.get(category, 0.0), rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_the_fixture_is_what_torchao_tracks_now() -> None:
    """Where torchao is installed, one case of the fixture made again (the script's own function). Skipped without torchao
    (not a dependency of parcalc)."""
    pytest.importorskip("torchao.float8")
    import torch.distributed as dist

    from .torchao_float8_tp import tracked_float8_tp_peak

    case = next(c for c in CASES if c["shape"] == "logits-heavy" and c["ac"] == "full")
    try:
        tracked = tracked_float8_tp_peak(case["shape"], case["dp"], case["tp"], case["ac"])
    finally:  # no process group is left for the next test module (fake_process_group.no_process_group_after)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert tracked["Total"] == pytest.approx(case["peak"]["Total"], rel=1e-6)


def test_float8_tp_saves_fp8_gathered_inputs() -> None:
    """What Float8 changes of the TP step (logits-heavy, no checkpointing; tracker 2026-11-29: 63,657,056 B in bf16,
    62,050,424 B with Float8): the column-parallel linears save the all-gathered input in FP8 (1 B an element where bf16
    saves 2) and w2 its FP8 input in place of its bf16 one, so the saved activations shrink and the bf16 step's peak in the
    loss's backward drops below the Float8 step's own, now in the second block's forward, where w2's input cast holds 9 B an
    element at once."""
    case = next(c for c in CASES if c["shape"] == "logits-heavy" and c["ac"] == "none")
    fp8, bf16 = _parcalc_peak(case), _parcalc_peak(case, "mixed-bf16")
    assert fp8.phase.startswith("forward: layer 2") and bf16.phase.startswith("backward: loss")
    assert bf16.allocated == pytest.approx(63_657_056, rel=1e-3)
    assert fp8.allocated == pytest.approx(case["peak"]["Total"], rel=1e-3) and fp8.allocated < bf16.allocated


TP_FP8 = ("--model", "llama3-8b", "--framework", "torchtitan", "--zero", "3", "--sequence-parallel", "--tp", "2", "--dp", "4",
          "--micro-batch", "1", "--seq-len", "4096", "--recompute", "full", "--precision", "fp8")


def test_memory_and_fit_walk_float8_with_tp(run_json) -> None:  # type: ignore[no-untyped-def]
    """`memory` and `fit` walk --precision fp8 with --tp under the torchtitan profile (the textbook sum until session 16),
    to the same total (walk 2026-11-29: 24.02 GiB with the 2 GiB reserve, step reserved 22.02 GiB; since session 19 the
    allocator replayed + 1.5 GiB: 24.20 GiB); with --fp8-all-gather walked too since session 17
    (test_torch_memory_float8_all_gather_tp_pp.py): 23.91 GiB (replayed: 23.87), the unsharded TP-local Float8 weights in FP8
    (before: the textbook sum, 27.26 GiB)."""
    gib = 2**30
    walked = run_json("memory", *TP_FP8)["results"]
    assert walked["total"]["value"] / gib == pytest.approx(24.20, abs=0.01) and "step_reserved" in walked
    fit = run_json("fit", *TP_FP8, "--gpus", "8", "--gpu", "h100-sxm5")["results"]
    assert fit["total"]["value"] == pytest.approx(walked["total"]["value"], rel=0.01)
    gathered = run_json("memory", *TP_FP8, "--fp8-all-gather")["results"]
    assert "step_reserved" in gathered and gathered["total"]["value"] / gib == pytest.approx(23.87, abs=0.01)
    fit_gathered = run_json("fit", *TP_FP8, "--fp8-all-gather", "--gpus", "8", "--gpu", "h100-sxm5")["results"]
    assert fit_gathered["total"]["value"] == pytest.approx(gathered["total"]["value"], rel=0.01)
