"""parcalc's side of the torchtitan ground truths: the Llama 3 preset at the widths of tiny_torchtitan's Transformer, and the
FSDP2 step that the CPU trackers count (tiny_torchtitan.two_tracked_steps and the scripts built on it) as FsdpStep's
settings, so that each test says only what its case changes (ranks, TP, CP, stages, Float8, compile)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parcalc.core.choices import Precision, Recompute
    from parcalc.core.memory_walk import StepPeak
    from parcalc.core.model import TransformerModel


def titan_llama(hidden: int, heads: int, kv_heads: int, ffn: int, layers: int, vocab: int) -> TransformerModel:
    """Llama 3 8B's preset at tiny_torchtitan's widths: torchtitan's head_dim (hidden // heads) and an untied output."""
    from parcalc.presets import load_model

    return replace(load_model("llama3-8b"), layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=hidden // heads,
                   ffn_hidden=ffn, vocab=vocab, tied_embeddings=False)  # fmt: skip


# the tracked CPU step (tiny_torchtitan.tracked_torchtitan_peak): fp32 reduce_dtype, torch.optim.AdamW(foreach=False) with its
# step counters beside its states, the last block not resharded after its forward (apply_fsdp), no cuBLAS workspace on the
# CPU, two embedding-gradient tables (PyTorch's decomposition under FakeTensorMode: memory_timeline.HfStep), torchtitan's code
TRACKED_STEP: dict[str, Any] = {"reduce_bytes": 4.0, "optimizer_impl": "for-loop", "reshard_last_block": False, "cublas_workspace": 0.0,
                                "embedding_backward_tables": 2, "step_counters_on_device": True, "model_code": "torchtitan"}  # fmt: skip


def tracked_step_peak(model: TransformerModel, b: int, s: int, shards: int, precision: str | Precision, recompute: str | Recompute,
                      **settings: Any) -> StepPeak:  # fmt: skip
    """parcalc's peak of `model`'s FSDP2 step on `shards` ranks as the CPU trackers run it (TRACKED_STEP, `settings` over it)."""
    from parcalc.core.choices import Precision, Recompute
    from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_peak

    step = FsdpStep(b, s, shards, Precision(precision), recompute=Recompute(recompute), **{**TRACKED_STEP, **settings})
    return fsdp_step_peak(model, step)
