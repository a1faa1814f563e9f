"""Ground truth for a pipeline rank under torch's ScheduleZBVZeroBubble (parcalc.core.memory_pipeline_zero_bubble):
MemTracker over torch's PipelineStage and ScheduleZBVZeroBubble running rank r's stages r and 2p - 1 - r of torchtitan's
Llama under apply_fsdp(pp_enabled=True) on a (pp, dp) mesh of fake ranks (tests/ground_truth/tiny_torchtitan_pp_zero_bubble.py,
ModTracker's backward bookkeeping left out: its docstring), for-loop AdamW, as test_torch_memory_pipeline_interleaved.py's
ranks. Ratios measured 2026-11-30 are in the cases' comments: every case to 0.01 %, rank 0 (the first stage and the last),
rank p - 1 (the V's turn, activations and gradients handed over in memory) and a middle rank, m below, at and above 2p - 1,
no and full checkpointing, one and two layers a stage."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402

SHAPE = (512, 4, 2, 1536, 1024, 2, 256)  # hidden, heads, kv heads, ffn, vocab, b, s


def _v_chunks(layers: int, pp: int, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Rank `rank`'s stages r and 2p - 1 - r of layers / 2p layers each (torchtitan's 'v' placement)."""
    per = layers // (2 * pp)
    first, second = rank, 2 * pp - 1 - rank
    return (first * per, (first + 1) * per), (second * per, (second + 1) * per)


CASES = [  # (layers, pp, rank, micro-batches, checkpointing); MemTracker / parcalc measured 2026-11-30
    pytest.param(4, 2, 0, 4, "none", id="first-and-last-of-2-none"),  # 1.0000
    pytest.param(4, 2, 0, 4, "full", id="first-and-last-of-2-full"),  # 1.0000 (the peak in W: a recomputation per param group)
    pytest.param(4, 2, 1, 4, "none", id="turn-of-2-none"),  # 1.0001
    pytest.param(4, 2, 1, 4, "full", id="turn-of-2-full"),  # 1.0001
    pytest.param(4, 2, 0, 1, "full", id="first-and-last-of-2-m1-full"),  # 1.0001 (fewer micro-batches than 2p - 1: actions dropped)
    pytest.param(8, 2, 1, 4, "full", id="turn-of-2-two-layers-full"),  # 1.0001 (two blocks a stage: one holds the other's nodes)
    pytest.param(8, 2, 0, 8, "none", id="first-and-last-of-2-two-layers-m8-none"),  # 1.0000
    pytest.param(12, 3, 1, 6, "none", id="middle-of-3-none"),  # 1.0001
    pytest.param(12, 3, 1, 6, "full", id="middle-of-3-full"),  # 1.0001
    pytest.param(6, 3, 2, 5, "full", id="turn-of-3-m5-full"),  # within 0.1 % (at 12 layers, two a stage: 1.0001 in 21 s; one a stage here, 8 s: the two-layer full path is middle-of-3-full's)
]


@pytest.mark.parametrize("layers, pp, rank, micro_batches, ac", CASES)
def test_v_rank_peak_matches_memtracker(layers: int, pp: int, rank: int, micro_batches: int, ac: str) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_pp_zero_bubble import tracked_v_rank_peak

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    chunks = _v_chunks(layers, pp, rank)
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_v_rank_peak(config, vocab, b, s, pp, 2, rank, chunks, micro_batches, ac)
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    ours = tracked_step_peak(model, b, s, 2, "mixed-bf16", ac, pp=pp, pp_stage=rank, pp_chunks=chunks, pp_zero_bubble=True,
                             micro_batches=micro_batches)  # fmt: skip
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.001), ours.parts


def test_full_checkpointing_holds_more_than_none_with_two_layers_a_stage() -> None:
    """Under ZB-V a checkpointed block is recomputed once per param group of W (nine a block), each recomputation keeping
    what W's other nodes hold: with two layers a stage, rank 0 of 2 at 4 micro-batches holds more under full checkpointing
    than with none (MemTracker 2026-11-30: 360.7 MB full, 303.5 MB none), and parcalc's walk says so too."""
    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    chunks = _v_chunks(8, 2, 0)
    model = titan_llama(hidden, heads, kv_heads, ffn, 8, vocab)
    full, none = (tracked_step_peak(model, b, s, 2, "mixed-bf16", ac, pp=2, pp_stage=0, pp_chunks=chunks, pp_zero_bubble=True,
                                    micro_batches=4).allocated for ac in ("full", "none"))  # fmt: skip
    assert full == pytest.approx(360.7e6, rel=0.001) and none == pytest.approx(303.5e6, rel=0.001), (full, none)


def test_the_action_order_is_torchs() -> None:
    """parcalc's action list (F / I / W, UNSHARD / RESHARD, REDUCE_GRAD) equals the one torch 2.13 lowers for
    ScheduleZBVZeroBubble (_calculate_single_rank_operations, _add_unshard_reshard, _add_reduce_grad) on every rank of
    pipelines of 2 to 8 ranks and 1 to 19 micro-batches (but the last RESHARDs, whose order is a set's)."""
    import types

    from torch.distributed.pipelining.schedules import ScheduleZBVZeroBubble, _add_reduce_grad, _add_unshard_reshard

    from parcalc.core.memory_pipeline_zero_bubble import rank_actions

    names = {"FORWARD": "F", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}
    compared = 0
    for p in (2, 3, 4, 8):
        for m in range(1, 20):
            schedule = types.SimpleNamespace(pp_group_size=p, num_stages=2 * p, _n_microbatches=m)
            for rank in range(p):
                lowered = _add_reduce_grad(_add_unshard_reshard(ScheduleZBVZeroBubble._calculate_single_rank_operations(schedule, rank)), m)
                theirs = [(names.get(a.computation_type.name, a.computation_type.name), a.stage_index,
                           -1 if a.microbatch_index is None else a.microbatch_index) for a in lowered]  # fmt: skip
                ours = rank_actions(rank, p, m)
                tail = next(i for i, a in enumerate(reversed(theirs)) if a[0] != "RESHARD")
                assert ours[: len(ours) - tail] == theirs[: len(theirs) - tail], (p, m, rank)
                assert sorted(ours[len(ours) - tail :]) == sorted(theirs[len(theirs) - tail :]), (p, m, rank)
                compared += 1
    assert compared == 17 * 19
