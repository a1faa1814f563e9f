"""Ground truth for a pipeline rank of several virtual stages (parcalc.core.memory_pipeline_interleaved): MemTracker over
torch's PipelineStage and ScheduleInterleaved1F1B running rank r's stages r, r + p, ... of torchtitan's Llama under apply_ac
and apply_fsdp(pp_enabled=True) on a (pp, dp) mesh of fake ranks (tests/ground_truth/tiny_torchtitan_pp_interleaved.py),
for-loop AdamW, as test_torch_memory_pipeline.py's stages. Ratios measured 2026-11-30 are in the cases' comments: every case
to 0.01 %, two chunks a rank (torchtitan's default) and four (the runtime then reshards a stage and gathers it again);
with each stage under apply_tp over 2 ranks, to 0.03 %."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining")

from .fake_process_group import no_process_group_after  # noqa: E402, F401  (after the skips; the fixture is autouse)
from .titan_walks import titan_llama, tracked_step_peak  # noqa: E402

SHAPE = (512, 4, 2, 1536, 1024, 2, 256)  # hidden, heads, kv heads, ffn, vocab, b, s


def _chunks(layers: int, pp: int, v: int, rank: int) -> tuple[tuple[int, int], ...]:
    """Rank `rank`'s virtual stages rank + k pp of layers / (pp v) layers each (torchtitan's 'loop' placement)."""
    per = layers // (pp * v)
    return tuple(((rank + k * pp) * per, (rank + k * pp + 1) * per) for k in range(v))


CASES = [  # (layers, pp, chunks a rank, rank, micro-batches, checkpointing); MemTracker / parcalc measured 2026-11-30
    pytest.param(4, 2, 2, 0, 4, "full", id="first-of-2-v2-full"),  # 1.0000
    pytest.param(4, 2, 2, 0, 4, "none", id="first-of-2-v2-none"),  # 1.0000
    pytest.param(4, 2, 2, 1, 4, "full", id="last-of-2-v2-full"),  # 1.0000
    pytest.param(4, 2, 2, 1, 4, "none", id="last-of-2-v2-none"),  # 1.0000
    pytest.param(12, 3, 2, 1, 6, "full", id="middle-of-3-v2-full"),  # 1.0001
    pytest.param(12, 3, 2, 1, 6, "none", id="middle-of-3-v2-none"),  # 1.0001
    pytest.param(8, 2, 4, 0, 4, "none", id="first-of-2-v4-none"),  # 1.0000 (stages resharded and gathered again)
    pytest.param(8, 2, 4, 1, 4, "full", id="last-of-2-v4-full"),  # 1.0000
]
TP_CASES = [  # each stage's model part under apply_tp over 2 ranks, a (pp, dp, tp) = (2, 2, 2) mesh, loss parallel
    pytest.param(4, 2, 2, 0, 4, "full", 2, id="tp2-first-of-2-v2-full"),  # 1.0002
    pytest.param(4, 2, 2, 0, 4, "none", 2, id="tp2-first-of-2-v2-none"),  # 1.0001
    pytest.param(4, 2, 2, 1, 4, "full", 2, id="tp2-last-of-2-v2-full"),  # 1.0000
    pytest.param(4, 2, 2, 1, 4, "none", 2, id="tp2-last-of-2-v2-none"),  # 0.9997
]


@pytest.mark.parametrize("layers, pp, v, rank, micro_batches, ac, tp", [*(pytest.param(*c.values, 1, id=c.id) for c in CASES), *TP_CASES])
def test_rank_peak_matches_memtracker(layers: int, pp: int, v: int, rank: int, micro_batches: int, ac: str, tp: int) -> None:
    from .tiny_llama import LlamaConfig
    from .tiny_torchtitan_pp_interleaved import tracked_rank_peak

    hidden, heads, kv_heads, ffn, vocab, b, s = SHAPE
    chunks = _chunks(layers, pp, v, rank)
    config = LlamaConfig(hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn, layers=layers)
    tracked = tracked_rank_peak(config, vocab, b, s, pp, 2, rank, chunks, micro_batches, ac, tp)
    model = titan_llama(hidden, heads, kv_heads, ffn, layers, vocab)
    ours = tracked_step_peak(model, b, s, 2, "mixed-bf16", ac, pp=pp, pp_stage=rank, pp_chunks=chunks, micro_batches=micro_batches, tp=tp)
    print(f"parcalc {ours.allocated:,.0f} B ({ours.phase}), MemTracker {tracked:,.0f} B: {ours.allocated / tracked:.4f}")
    assert ours.allocated == pytest.approx(tracked, rel=0.001), ours.parts


def test_the_action_order_is_torchs() -> None:
    """parcalc's action list (compute order, UNSHARD / RESHARD, REDUCE_GRAD) equals the one torch 2.13 lowers for
    ScheduleInterleaved1F1B (_calculate_single_rank_operations, _add_unshard_reshard, _add_reduce_grad) on every rank of
    pipelines of 2 to 8 ranks, 2 to 5 chunks and 1 to 16 micro-batches (but the last RESHARDs, whose order is a set's)."""
    import types

    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, _add_reduce_grad, _add_unshard_reshard

    from parcalc.core.memory_pipeline_interleaved import rank_actions

    names = {"FORWARD": "F", "FULL_BACKWARD": "B"}
    compared = 0
    for p in (2, 3, 4, 8):
        for v in (2, 3, 4, 5):
            for m in (1, 2, 3, 4, 6, 8, 12, 16):
                rounds = max(1, m // p)
                if m % rounds:
                    continue
                schedule = types.SimpleNamespace(n_local_stages=v, pp_group_size=p, microbatches_per_round=m // rounds, _n_microbatches=m)
                for rank in range(p):
                    lowered = _add_reduce_grad(_add_unshard_reshard(ScheduleInterleaved1F1B._calculate_single_rank_operations(schedule, rank)), m)
                    theirs = [(names.get(a.computation_type.name, a.computation_type.name), a.stage_index,
                               -1 if a.microbatch_index is None else a.microbatch_index) for a in lowered]  # fmt: skip
                    ours = rank_actions(rank, p, v, m)
                    tail = next(i for i, a in enumerate(reversed(theirs)) if a[0] != "RESHARD")  # the stages still gathered at the end
                    assert ours[:-tail] == theirs[:-tail] and sorted(ours[-tail:]) == sorted(theirs[-tail:]), (p, v, m, rank)
                    compared += 1
    assert compared > 300


def test_two_chunks_hold_both_stages_gathered() -> None:
    """With two (or three) stages a rank, _add_unshard_reshard's three active stages gather each stage once, before the first
    forward, and reshard it only after its last backward; with four, stages are resharded within the step and gathered again."""
    from parcalc.core.memory_pipeline_interleaved import rank_actions

    for v in (2, 3):
        actions = rank_actions(0, 4, v, 8)
        assert [a[0] for a in actions[:v]] == ["UNSHARD"] * v and sum(a[0] == "UNSHARD" for a in actions) == v
        for stage in {a[1] for a in actions}:
            last_backward = max(i for i, a in enumerate(actions) if a[:2] == ("B", stage))
            assert all(i > last_backward for i, a in enumerate(actions) if a[:2] == ("RESHARD", stage))
    four = rank_actions(0, 4, 4, 8)
    assert sum(a[0] == "UNSHARD" for a in four) > 4
