"""The torchtitan step walk under context parallelism (parcalc.core.memory_torchtitan_cp) through `parcalc memory`: which layouts
it follows, what it says where it does not (the textbook sum stands, the reason in the derivation), and the ring's tensors.
The walk's bytes are checked against FSDPMemTracker in tests/ground_truth/test_torch_memory_torchtitan_cp.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from parcalc.core.choices import Precision, Recompute
from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_peak
from parcalc.errors import InputError
from parcalc.presets import load_model

_8B = ("--model", "llama3-8b", "--framework", "torchtitan", "--zero", "3", "--micro-batch", "1", "--seq-len", "65536")


@pytest.mark.parametrize("comm, rotate", [("all-gather", "all-gathered once (allgather rotate)"), ("p2p", "passed on every step (alltoall rotate)")])
def test_cp_layout_is_walked(run_json, comm: str, rotate: str) -> None:
    document = run_json("memory", *_8B, "--dp", "4", "--cp", "2", "--recompute", "full", "--cp-comm", comm)
    assert "step_reserved" in document["results"]
    assert "parcalc.core.memory_torchtitan_cp" in json.dumps(document) and rotate in json.dumps(document)


def test_the_alltoall_ring_keeps_less_than_the_all_gathered_keys() -> None:
    """At cp 4 the all-gather holds 4 ranks' K/V through the ring, the alltoall ring at most two received blocks at once
    (FSDPMemTracker, RING_HEAVY cp 4: 31,919,672 B allgather, 29,044,280 B alltoall; ground truth)."""
    gathered = fsdp_step_peak(_ring_model(), _step(4)).allocated
    ring = fsdp_step_peak(_ring_model(), replace(_step(4), cp_rotate="alltoall")).allocated
    assert ring == pytest.approx(29_044_280, rel=0.001)
    assert gathered - ring == pytest.approx(31_919_672 - 29_044_280, rel=0.01)


@pytest.mark.parametrize("flags, reason", [
    (("--dp", "4", "--cp", "2", "--recompute", "op"), "--recompute op with cp"),
    # the compiled ring is read with allgather (without --cp-comm torchtitan's own allgather is walked: tests/test_cp_comm_default.py)
    (("--dp", "4", "--cp", "2", "--recompute", "full", "--compile", "--cp-comm", "p2p"), "--compile with --cp-comm p2p"),
    (("--dp", "4", "--cp", "2", "--recompute", "full", "--precision", "fp8"), "--precision fp8 with cp"),
    (("--dp", "4", "--cp", "2", "--recompute", "full", "--cp-comm", "a2a", "--seq-len", "8192"), "--cp-comm a2a"),
])  # fmt: skip
def test_what_the_cp_walk_does_not_follow_keeps_the_textbook_and_says_why(run_json, flags: tuple[str, ...], reason: str) -> None:
    document = run_json("memory", *_8B, *flags)
    assert "step_reserved" not in document["results"]
    text = json.dumps(document)
    assert "memory: the textbook sum" in text and reason in text


CP_TP = ("--dp", "2", "--cp", "2", "--tp", "2", "--sequence-parallel", "--recompute", "full")


def test_memory_and_fit_walk_cp_with_tp(run_json) -> None:
    """cp with tp is walked (the ring on each TP rank's local heads: tests/ground_truth/test_torch_memory_torchtitan_cp_tp.py) by
    memory and fit to the same total (walk 2026-11-29: 55.56 GiB with the 2 GiB reserve at s 65536; the allocator replayed + 1.5 GiB,
    session 19: 59.53 GiB), and inside pipeline stages by memory."""
    walked = run_json("memory", *_8B, *CP_TP)["results"]
    assert walked["total"]["value"] / 2**30 == pytest.approx(59.53, abs=0.01) and "step_reserved" in walked
    fit = run_json("fit", *_8B, *CP_TP, "--gpus", "8", "--gpu", "h100-sxm5")["results"]
    assert fit["total"]["value"] == pytest.approx(walked["total"]["value"], rel=0.01)
    staged = run_json("memory", *_8B, *CP_TP, "--pp", "2", "--micro-batches", "4")["results"]
    assert "step_reserved" in staged


def test_a_sequence_the_load_balancer_cannot_split_is_bad_input(run_error) -> None:
    # context_parallel balances causal attention over 2 x cp chunks (its _HeadTailLoadBalancer; memory_torchtitan_cp.CP_SOURCES)
    assert "not a multiple of 2 x cp" in run_error(["memory", *_8B, "--dp", "4", "--cp", "2", "--seq-len", "65538"])


def test_cp_with_transformers_code_keeps_the_textbook(run_json) -> None:
    document = run_json("memory", "--model", "llama3-8b", "--framework", "fsdp2", "--zero", "3", "--micro-batch", "1", "--seq-len", "8192",
                        "--dp", "4", "--cp", "2")  # fmt: skip
    assert "step_reserved" not in document["results"]
    assert "the walk follows torchtitan's context_parallel" in json.dumps(document)


def _ring_model():
    # tests/ground_truth/test_torch_memory_torchtitan_cp.py RING_HEAVY: hidden 512, 8 heads of 64, 2 KV heads, ffn 512, 1 layer, vocab 64
    return replace(load_model("llama3-8b"), layers=1, hidden=512, heads=8, kv_heads=2, head_dim=64, ffn_hidden=512, vocab=64,
                   tied_embeddings=False)  # fmt: skip


def _step(cp: int, recompute: Recompute = Recompute.NONE, seq: int = 1024) -> FsdpStep:
    return FsdpStep(2, seq, cp, Precision.MIXED_BF16, 4.0, optimizer_impl="for-loop", recompute=recompute, reshard_last_block=False,
                    cublas_workspace=0.0, embedding_backward_tables=2, step_counters_on_device=True, model_code="torchtitan", cp=cp)  # fmt: skip


def test_ring_backward_holds_the_all_gathered_keys_at_the_peak() -> None:
    """RING_HEAVY at cp 4 (FSDPMemTracker 31,919,672 B, ground truth): the peak is in the ring's backward, the all-gathered K/V
    (cp x the rank's keys and values after repeat_kv: 4 x 2 x (2 x 256 tokens) x 512 x 2 B = 4 MiB) live."""
    peak = fsdp_step_peak(_ring_model(), _step(4))
    assert peak.allocated == pytest.approx(31_919_672, rel=0.001)
    gathered = {t.what: t.bytes for t in peak.live}["ring backward: all-gathered K/V"]
    assert gathered == 4 * 2 * (2 * 256) * 512 * 2


def test_the_step_walk_refuses_what_it_cannot_follow() -> None:
    with pytest.raises(InputError, match="checkpointing 'op' with cp"):
        fsdp_step_peak(_ring_model(), _step(2, Recompute.OP))
    with pytest.raises(InputError, match="not a multiple of 2 x cp"):
        fsdp_step_peak(_ring_model(), _step(4, seq=1020))
