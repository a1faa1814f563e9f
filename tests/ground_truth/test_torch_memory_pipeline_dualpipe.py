"""Ground truth for a pipeline rank under torch's ScheduleDualPipeV (parcalc.core.memory_pipeline_dualpipe): MemTracker over
torch's PipelineStage and ScheduleDualPipeV running rank r's stages r and 2p - 1 - r of torchtitan's Llama under
apply_fsdp(pp_enabled=True) on a (pp, dp) mesh of fake ranks (tests/ground_truth/tiny_torchtitan_pp_zero_bubble.py with
schedule_name 'DualPipeV', ModTracker's backward bookkeeping left out as for ZB-V), for-loop AdamW. Ratios measured
2026-11-30 are in the cases' comments: every case to 0.01 %, rank 0 (the first stage and the last), rank p - 1 (the V's
turn, a whole backward's input gradient handed over in memory) and a middle rank, no and full checkpointing, one layer a
stage (two layers a stage measured too, not run for time: 8 layers on p 2, rank 0 m 5 none 1.0000, rank 1 m 6 full 1.0001)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .test_torch_memory_pipeline_zero_bubble import SHAPE, _v_chunks  # noqa: E402
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402

CASES = [  # (layers, pp, rank, micro-batches, checkpointing); MemTracker / parcalc measured 2026-11-30
    # the first B of the head's stage finds the warm-up W's gradients unfolded and adds into them in place: walked as
    # new gradients kept beside them, 1.047
    pytest.param(4, 2, 0, 4, "none", id="first-and-last-of-2-none"),  # 1.0000 (peak at B0.1, an OVERLAP_F_B's backward)
    pytest.param(4, 2, 1, 4, "full", id="turn-of-2-full"),  # 1.0001 (peak at W2.3)
    pytest.param(8, 4, 2, 9, "none", id="middle-of-4-m9-none"),  # 1.0001 (peak at B5.2; without the in-place add 1.029)
]  # also measured (not run: 26 s under load): 8 layers on p 4, rank 3 m 8 full (the turn) 1.0001, rank 1 m 8 full 1.0001


@pytest.mark.parametrize("layers, pp, rank, micro_batches, ac", CASES)
def test_dualpipev_rank_peak_matches_memtracker(layers: int, pp: int, rank: int, micro_batches: int, ac: str) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_pp_zero_bubble import tracked_v_rank_peak

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    chunks = _v_chunks(layers, pp, rank)
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_v_rank_peak(config, vocab, b, s, pp, 2, rank, chunks, micro_batches, ac, schedule_name="DualPipeV")
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    ours = tracked_step_peak(model, b, s, 2, "mixed-bf16", ac, pp=pp, pp_stage=rank, pp_chunks=chunks, pp_zero_bubble=True,
                             pp_dualpipev=True, micro_batches=micro_batches)  # fmt: skip
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.001), ours.parts


def test_the_action_order_is_torchs() -> None:
    """parcalc's action list (F / B / I / W, UNSHARD / RESHARD, REDUCE_GRAD) equals the one torch 2.13 lowers for
    ScheduleDualPipeV (_calculate_single_rank_operations, _add_unshard_reshard, _add_reduce_grad), each OVERLAP_F_B as
    its sub-actions in turn (_step_microbatches), on every rank of pipelines of 2 to 8 ranks and 2p to 2p + 11
    micro-batches (but the last RESHARDs, whose order is a set's)."""
    import types

    from torch.distributed.pipelining.schedules import ScheduleDualPipeV, _add_reduce_grad, _add_unshard_reshard

    from parcalc.core.memory_pipeline_dualpipe import rank_actions

    names = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}

    def flat(action):  # type: ignore[no-untyped-def]
        if action.computation_type.name == "OVERLAP_F_B":
            return [a for sub in action.sub_actions for a in flat(sub)]
        index = -1 if action.microbatch_index is None else action.microbatch_index
        return [(names.get(action.computation_type.name, action.computation_type.name), action.stage_index, index)]

    compared = 0
    for p in (2, 3, 4, 8):
        for m in range(2 * p, 2 * p + 12):
            schedule = types.SimpleNamespace(pp_group_size=p, num_stages=2 * p, _n_microbatches=m)
            for rank in range(p):
                lowered = _add_reduce_grad(_add_unshard_reshard(ScheduleDualPipeV._calculate_single_rank_operations(schedule, rank)), m)
                theirs = [a for action in lowered for a in flat(action)]
                ours = rank_actions(rank, p, m)
                tail = next(i for i, a in enumerate(reversed(theirs)) if a[0] != "RESHARD")
                assert ours[: len(ours) - tail] == theirs[: len(theirs) - tail], (p, m, rank)
                assert sorted(ours[len(ours) - tail :]) == sorted(theirs[len(theirs) - tail :]), (p, m, rank)
                compared += 1
    assert compared == 12 * (2 + 3 + 4 + 8)
