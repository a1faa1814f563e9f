"""Ground truth for torchao's Float8 training in the torchtitan walk (parcalc.core.memory_torchao_float8): parcalc's step
peak against FSDPMemTracker's over torchtitan's Llama Transformer converted by torchtitan's float8 converter
(torchao 0.18.0 Float8Linear, tensorwise scaling) under fully_shard on 4 fake ranks, with and without
enable_fsdp_float8_all_gather, under activation checkpointing none, full and selective op.

torchao is not a dependency of parcalc: tests/ground_truth/torchao_float8_fsdp.py made the tracker's numbers with torch
2.13.0+cpu and torchao 0.18.0 and wrote them to tests/fixtures/torchao/float8_fsdp_tracker.json, which these tests hold
parcalc to (rerun the script where torchao is installed to remake it). The walk's step is the tracker's: for-loop AdamW,
step counters on the device, two embedding-gradient tables, no cuBLAS workspace (test_torch_memory_torchtitan.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .titan_walks import titan_llama, tracked_step_peak

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torchao" / "float8_fsdp_tracker.json"
CASES = json.loads(FIXTURE.read_text())["cases"]


def _parcalc_peak(case: dict, precision: str = "fp8"):  # type: ignore[no-untyped-def]
    hidden, heads, kv_heads, ffn, layers, vocab, b, s = case["dims"]
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    return tracked_step_peak(model, b, s, case["ranks"], precision, case["ac"], float8_all_gather=case["fp8_all_gather"])


def _id(case: dict) -> str:
    return f"{case['shape']}-{case['ac']}" + ("-fp8-all-gather" if case["fp8_all_gather"] else "")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_float8_peak_matches_fsdp_mem_tracker(case: dict) -> None:
    """Each case's peak within 0.02 % of the tracker's (the walk's 512-byte rounding), measured 2026-11-29: all 18 at
    1.0000-1.0001; FSDP2's own buffers at the peak to the byte but for that rounding."""
    tracked = case["peak"]
    ours = _parcalc_peak(case)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), FSDPMemTracker {tracked['Total']:,.0f} B: {ours.allocated / tracked['Total']:.4f}")
    assert ours.allocated == pytest.approx(tracked["Total"], rel=2e-4), (ours.phase, tracked, ours.parts)
    by_kind = dict(ours.parts)
    for category, kind in (("SHARDED_PARAM", "sharded parameters"), ("UNSHARDED_PARAM", "unsharded parameters"), ("BUFFER", "buffers"),
                           ("ALL_GATHER", "all-gather buffers"), ("REDUCE_SCATTER", "reduce-scatter buffers")):  # fmt: skip
        assert by_kind.get(kind, 0.0) == pytest.approx(tracked.get(category, 0.0), rel=0.01, abs=4096), (category, tracked, ours.parts)


def test_the_fixture_is_what_torchao_tracks_now() -> None:
    """Where torchao is installed, one case of the fixture made again (the script's own function): the fixture is still what
    FSDPMemTracker says over the installed torch and torchao. Skipped without torchao (not a dependency of parcalc)."""
    pytest.importorskip("torchao.float8")
    from .torchao_float8_fsdp import SHAPES, fake_mesh, tracked_float8_peak

    case = next(c for c in CASES if c["shape"] == "activation-heavy" and c["ac"] == "full" and c["fp8_all_gather"])
    import torch.distributed as dist

    try:
        tracked = tracked_float8_peak(SHAPES[case["shape"]], case["ac"], case["fp8_all_gather"], fake_mesh(case["ranks"]))
    finally:  # no process group is left for the next test module (fake_process_group.no_process_group_after)
        if dist.is_initialized():
            dist.destroy_process_group()
    assert tracked["Total"] == pytest.approx(case["peak"]["Total"], rel=1e-6)


def test_float8_costs_more_than_bf16_and_the_fp8_all_gather_less() -> None:
    """The casts' temporaries (9 bytes an element of a cast at once) make the Float8 step's peak higher than bf16's; the
    FP8 all-gather halves the block weights' unsharded bytes (tracker, activation-heavy none: 519.7 MB bf16 (parcalc's
    bf16 walk, test_torch_memory_torchtitan.py), 538.2 MB Float8, 531.2 MB with the FP8 all-gather)."""
    case = next(c for c in CASES if c["shape"] == "activation-heavy" and c["ac"] == "none" and not c["fp8_all_gather"])
    bf16 = _parcalc_peak(case, "mixed-bf16").allocated
    fp8 = _parcalc_peak(case).allocated
    fp8_gathered = _parcalc_peak({**case, "fp8_all_gather": True}).allocated
    assert fp8_gathered < fp8 and bf16 < fp8
    assert fp8 / bf16 == pytest.approx(538_234_548 / 519_655_424, rel=1e-3)


TRAINY = ("--model", "llama3-8b", "--framework", "torchtitan", "--zero", "3", "--dp", "32", "--micro-batch", "2", "--seq-len", "8192",
          "--recompute", "op", "--precision", "fp8")  # tests/published_memory_runs.py's trainy-h200-8b-4-nodes (its eager walk)


def test_memory_fp8_all_gather_flag(run_json, run_error) -> None:  # type: ignore[no-untyped-def]
    """`memory --fp8-all-gather` walks FsdpStep.float8_all_gather: the block weights gathered and unsharded in FP8, and no
    weight cast or its abs cached by selective op checkpointing (walk 2026-11-29: 116.67 -> 103.28 GiB, each stream's own peak
    with the 2 GiB reserve; the allocator replayed with 1.5 GiB, session 19: 120.90 -> 106.86 GiB); without --precision fp8
    --framework torchtitan it is a one-line error."""
    gib = 2**30
    plain = run_json("memory", *TRAINY)["results"]["total"]["value"] / gib
    gathered = run_json("memory", *TRAINY, "--fp8-all-gather")["results"]["total"]["value"] / gib
    assert plain == pytest.approx(120.90, abs=0.01) and gathered == pytest.approx(106.86, abs=0.01)
    line = run_error(["memory", *TRAINY[:-2], "--fp8-all-gather"])
    assert line.startswith("Error: --fp8-all-gather") and "--precision fp8 --framework torchtitan" in line
