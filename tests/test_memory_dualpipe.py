"""`memory` / `fit --framework torchtitan --schedule dualpipev` walk each pipeline rank's two stages as torch's
ScheduleDualPipeV runs them (parcalc.core.memory_pipeline_dualpipe; its ground truth:
tests/ground_truth/test_torch_memory_pipeline_dualpipe.py, MemTracker to 0.01 %), and fit --search screens DualPipeV rows
by their ranks' walks as it screens ZB-V's."""

from __future__ import annotations

import pytest

DUALPIPEV = ("memory", "--model", "llama3-8b", "--framework", "torchtitan", "--seq-len", "8192", "--pp", "2", "--dp", "4",
             "--zero", "3", "--schedule", "dualpipev", "--micro-batches", "8", "--gpu", "h200")  # fmt: skip
STEP_PEAK = 123_455_795_200  # bytes: the walk's step peak of DUALPIPEV's fullest rank (115.0 GiB), 2026-11-30


def test_dualpipev_ranks_are_walked(run_json):
    """Llama 3 8B, s 8192, PP 2 x FSDP 4, m 8 on H200: rank 0 holds torchtitan's first and last stages of 4 (its split of
    32 layers, the embedding and the output weighed as a layer each), the fullest. The walk's step peak is 115.0 GiB where
    the textbook sum, which memory gave as the total before this walk, is 92.2 GiB (values of this walk, 2026-11-30)."""
    doc = run_json(*DUALPIPEV)
    results = doc["results"]
    walked = next(a for a in doc["assumptions"] if a.startswith("the model code walked is"))
    assert "pipeline rank 1 of 2: stages 0 and 3 of 4 (layers (0, 8) and (25, 32)) under ScheduleDualPipeV's runtime over 8" in walked
    assert results["step_peak"]["value"] == pytest.approx(STEP_PEAK, rel=1e-9)
    assert results["textbook_total"]["value"] == pytest.approx(99_034_718_208, rel=1e-9)
    assert "step_reserved_replayed" in results
    assert not any("does not cover pp" in a or a.startswith("memory: the textbook sum") for a in doc["assumptions"])


def test_dualpipev_keeps_one_chunk_more_in_flight_than_zb_v(run_json):
    """DualPipeV runs an OVERLAP_F_B pair's forward before its backward (DUALPIPE_SOURCES['overlap']), so a rank holds 2p + 1
    chunk micro-batches at most (forwards not yet backward or W) where ZB-V holds 2p, on every rank of p 2 to 8; on the
    layout above the step peak is 8.9 GiB above ZB-V's (115.0 vs 106.0 GiB: a quarter more activations in flight at p 2)."""
    from parcalc.core.memory_pipeline_dualpipe import compute_order as dualpipev
    from parcalc.core.memory_pipeline_zero_bubble import compute_order as zb_v

    def most_in_flight(order: list[tuple[str, int, int]]) -> int:
        live = most = 0
        for kind, _, _ in order:
            live += {"F": 1, "B": -1, "W": -1}.get(kind, 0)
            most = max(most, live)
        return most

    for p in (2, 3, 4, 8):
        for m in (2 * p, 2 * p + 3, 4 * p):
            for rank in range(p):
                assert most_in_flight(zb_v(rank, p, m)) == 2 * p, (p, m, rank)
                assert most_in_flight(dualpipev(rank, p, m)) == 2 * p + 1, (p, m, rank)
    zb = run_json(*DUALPIPEV[:-6], "--schedule", "zb-v", *DUALPIPEV[-4:])["results"]["step_peak"]["value"]
    assert (STEP_PEAK - zb) / 2**30 == pytest.approx(8.94, abs=0.01), zb


def test_pipeline_gaps_follow_dualpipev():
    from parcalc.core.choices import Recompute, Schedule
    from parcalc.core.layout import Layout
    from parcalc.core.memory_fsdp import pipeline_gaps

    layout = Layout(1, 4, 2, zero=3, schedule=Schedule.DUALPIPEV)
    assert pipeline_gaps(layout, "torchtitan", True, 32) == []
    assert pipeline_gaps(layout, "torchtitan", True, 32, Recompute.FULL) == []
    assert pipeline_gaps(layout, "torchtitan", True, 32, Recompute.OP) == [
        "pp = 4: --recompute op (the split backward is walked with no or full checkpointing) under DualPipeV"]
    assert pipeline_gaps(Layout(2, 4, 1, zero=3, schedule=Schedule.DUALPIPEV), "torchtitan", True, 32) == ["pp = 4: tp under DualPipeV"]


@pytest.mark.parametrize("extra, line", [
    (("--micro-batches", "3"), "Error: --micro-batches: DualPipeV needs at least 2p = 4 micro-batches (got 3; deepseek-ai/DualPipe "
                               "dualpipev.py asserts num_chunks >= num_ranks * 2)"),
    (("--micro-batches", "8", "--chunks", "3"), "Error: --chunks: only the interleaved schedule splits a device's layers into chunks "
                                                "(got --schedule dualpipev)"),
])  # fmt: skip
def test_what_dualpipev_refuses_is_one_line_error(run_error, extra, line):
    """torch's ScheduleDualPipeV refuses fewer micro-batches than its 2p stages ('DualPipeV requires at least as many
    microbatches as stages') and any but two stages a rank ('ZBV requires exactly 2 stages per rank')."""
    assert run_error([*DUALPIPEV[:-4], *extra, "--gpu", "h200"]) == line


def test_the_core_refuses_what_torch_refuses():
    from parcalc.core.memory_pipeline_dualpipe import compute_order
    from parcalc.errors import InputError

    with pytest.raises(InputError, match="at least as many as its 2p = 8 stages"):
        compute_order(0, 4, 7)
    with pytest.raises(InputError, match="ranks 0 to 3"):
        compute_order(4, 4, 8)


def test_the_search_screens_dualpipev_rows_by_their_ranks_floor():
    """fit --search --schedule dualpipev under torchtitan screens each DualPipeV row the walk follows by its ranks' floor of
    the allocator replay, as it screens ZB-V's. Llama 3 8B on 8 H100, s 8192, batch 32: of its 28 ZeRO-3 pipelined rows 8
    are walked (the others tp 2, or op / selective checkpointing, keep the textbook sum, memory_of's too) and none fits;
    with the textbook screen 4 of them were let in that do not fit by memory_of (measured before the screen, 2026-11-30).
    TP 1 x PP 2 x FSDP 4, b 1, m 8, no checkpointing: textbook 77.6 GB, under the 85.9 GB capacity; memory_of 144.0 GB."""
    import numpy as np

    from parcalc.core.choices import Recompute, Schedule
    from parcalc.core.fit import memory_of
    from parcalc.core.fit_search import search
    from parcalc.core.search_columns import FLOOR, SCHEDULE_CODES
    from parcalc.results.fit_request import request

    req = request(search=True, model="llama3-8b", gpus="8", gpu=["h100-sxm5"], framework="torchtitan", seq_len="8192",
                  schedule="dualpipev", batch="32")  # fmt: skip
    found = search(req.model, req.training, req.cluster, req.space)
    c = found.evaluated.columns
    rows = np.flatnonzero((c["schedule"] == SCHEDULE_CODES.index(Schedule.DUALPIPEV)) & (c["pp"] > 1) & (c["zero"] == 3)).tolist()
    walked = [i for i in rows if int(c["memory_basis"][i]) == FLOOR]
    assert len(rows) == 28 and len(walked) == 8
    assert not any(bool(c["fits"][i]) for i in walked)
    (row,) = [i for i in walked if (c["tp"][i], c["pp"][i], c["micro_batches"][i]) == (1, 2, 8)
              and found.evaluated.config(i).recompute is Recompute.NONE]  # fmt: skip
    total = memory_of(req.model, found.evaluated.config(row), req.training, req.cluster).worst.total.value
    assert c["memory"][row] <= total and total == pytest.approx(143_969_484_800, rel=1e-9), (c["memory"][row], total)


@pytest.mark.parametrize("pp, rank", [(2, 0), (2, 1), (4, 0), (4, 2)])
@pytest.mark.parametrize("rec", ["none", "full"])
def test_a_replayed_dualpipev_rank_is_the_walked_rank(pp: int, rank: int, rec: str) -> None:
    """fit's search walks DualPipeV ranks with replayed blocks (parcalc.core.search_segment_walk): a whole backward whose
    block finds a W's gradients under its prefix (_full_backward renames them there) is a kind of call of its own, so the
    replayed walk leaves the same state as the walked one, segment by segment and tensor by tensor."""
    from dataclasses import replace

    from parcalc.core.choices import Optimizer, Precision, Recompute
    from parcalc.core.memory_fsdp import fsdp_step_of
    from tests.test_fit_search_replay import LLAMA, _fresh_caches, _walked

    model = replace(LLAMA, layers=4 * pp)
    chunks = ((2 * rank, 2 * rank + 2), (2 * (2 * pp - 1 - rank), 2 * (2 * pp - rank)))
    step = replace(fsdp_step_of("torchtitan-eager", 1, 1024, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute(rec), 1), pp=pp,
                   pp_stage=rank, pp_chunks=chunks, pp_zero_bubble=True, pp_dualpipev=True, micro_batches=2 * pp + 1)  # fmt: skip
    with _fresh_caches():
        replayed = _walked(model, step, replay=True)
    assert replayed == _walked(model, step, replay=False)
