"""torchtitan's tensor and pipeline parallelism together in the step walk: each pipeline stage's blocks under apply_tp
(parcalc.core.memory_pipeline_stage with memory_torchtitan_tp's blocks, PP_SOURCES['tp']). Held against MemTracker in
tests/ground_truth/test_torch_memory_pipeline.py (the tp2 cases); here the sizes its sources give and the CLI's use."""

from __future__ import annotations

from dataclasses import replace

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_fsdp import FsdpStep, StreamWalk, walk_fsdp_step

LLAMA_8B = ["--model", "llama3-8b", "--seq-len", "4096", "--micro-batch", "1", "--gpu", "h100-sxm5", "--flash-attention",
            "--framework", "torchtitan", "--recompute", "full", "--zero", "3", "--sequence-parallel"]  # fmt: skip


def _tiny():
    from parcalc.presets import load_model

    return replace(load_model("llama3-8b"), layers=4, hidden=512, heads=4, kv_heads=2, head_dim=128, ffn_hidden=1536, vocab=1024,
                   tied_embeddings=False)  # fmt: skip


def _events(stage: int, tp: int) -> list[tuple[str, float]]:
    step = FsdpStep(2, 256, 2, Precision.MIXED_BF16, 4.0, optimizer_impl="for-loop", recompute=Recompute.FULL, reshard_last_block=False,
                    cublas_workspace=0.0, embedding_backward_tables=2, model_code="torchtitan", pp=2, pp_stage=stage,
                    stage_layers=(0, 2) if stage == 0 else (2, 4), micro_batches=4, tp=tp)  # fmt: skip
    walk = StreamWalk()
    walk.events = []
    walk_fsdp_step(_tiny(), step, walk)
    return walk.events


def test_the_first_tp_stage_accumulates_the_whole_vocabularys_embedding_gradient() -> None:
    """FSDP2 under PP copies each unsharded gradient to fp32 after the first backward (_fsdp_param.py
    to_accumulated_grad_if_needed): a block's are its TP shard (w2: ffn / tp x hidden x 4 B), the embedding's is of the
    whole vocabulary (V x hidden x 4 B), which DTensor's embedding backward computes replicated (memory_torchtitan_tp
    TP_SOURCES['embedding_backward']; without it the first stage was 0.981 of MemTracker, with it 1.0001)."""
    accumulated = {key: size for key, size in _events(0, 2) if key.startswith("acc.") and size > 0}
    assert accumulated["acc.root.embedding.grad"] == 1024 * 512 * 4
    assert accumulated["acc.L0.L0.w2.grad"] == 1536 // 2 * 512 * 4
    without_tp = {key: size for key, size in _events(0, 1) if key.startswith("acc.") and size > 0}
    assert without_tp["acc.root.embedding.grad"] == accumulated["acc.root.embedding.grad"]
    assert without_tp["acc.L0.L0.w2.grad"] == 2 * accumulated["acc.L0.L0.w2.grad"]


def test_a_tp_stage_receives_its_sequence_shard() -> None:
    """The last block's RowwiseParallel(output_layouts=Shard(1)) returns b x s / tp x hidden: each receive buffer of the
    last stage (one per micro-batch) is 2 x 256 / 2 tokens x 512 x 2 B."""
    received = {key: size for key, size in _events(1, 2) if key.startswith("pp.act_recv") and size > 0}
    assert sorted(received) == [f"pp.act_recv{j}" for j in range(4)]
    assert set(received.values()) == {2 * 256 // 2 * 512 * 2}


def test_the_last_tp_stage_runs_loss_parallel_on_its_vocabulary_shard() -> None:
    """loss_parallel's log-softmax (fp32) of the rank's V / tp columns: 2 x 256 tokens x 1024 / 2 x 4 B."""
    saved = {key: size for key, size in _events(1, 2) if key.endswith("logsoftmax") and size > 0}
    assert set(saved.values()) == {2 * 256 * 1024 // 2 * 4}


def test_memory_and_fit_walk_tp_with_pp_alike(run_json) -> None:
    """Llama 3 8B as TP 2 x PP 2 x FSDP 2: `memory` walks each stage (no textbook fallback), `fit` for the same layout
    gives the same total."""
    memory = run_json("memory", *LLAMA_8B, "--tp", "2", "--pp", "2", "--dp", "2")
    assert "step_peak" in memory["results"]
    assert not [a for a in memory["assumptions"] if a.startswith("memory: the textbook sum")]
    fit = run_json("fit", *LLAMA_8B, "--gpus", "8", "--batch", "8", "--tp", "2", "--pp", "2", "--dp", "2")["results"]
    assert fit["total"]["value"] == pytest.approx(memory["results"]["total"]["value"], rel=0.01)

