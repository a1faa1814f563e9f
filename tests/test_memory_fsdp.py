"""The fsdp2 and torchtitan profiles' memory: the peak of one step under fully_shard (parcalc.core.memory_fsdp),
FSDP2's own tensors as PyTorch v2.13.0's torch/distributed/fsdp/_fully_shard allocates them. Held against
FSDPMemTracker in tests/ground_truth/test_torch_memory_fsdp.py; here the exact sizes its sources give."""

from __future__ import annotations

from dataclasses import replace

import pytest

from parcalc.core.choices import Recompute
from parcalc.core.memory_fsdp import FsdpStep, fsdp_step_of, fsdp_step_peak

# Llama 3 8B (the llama3-8b preset, Hugging Face config.json): untied, every dim 0 a multiple of 8 (no shard padding)
P_8B = 8_030_261_248
P_LAYER = 218_112_000
P_EMBEDDING = 128_256 * 4096
LLAMA_8B = ["--model", "llama3-8b", "--seq-len", "4096", "--micro-batch", "1", "--gpu", "h100-sxm5", "--flash-attention"]


def llama3_8b():
    from parcalc.presets import load_model

    return load_model("llama3-8b")


def test_fsdp_tensors_of_llama3_8b_on_8_ranks() -> None:
    """torchtitan on 8 ranks: fp32 shards (P/8 x 4 B), two AdamW states on them (foreach AdamW: step counters on the host);
    at the loss's backward the root (embedding, final norm, LM head) and the last block (not resharded after forward)
    unsharded in bf16, and nothing else of FSDP's (the last block needs no all-gather)."""
    peak = fsdp_step_peak(llama3_8b(), fsdp_step_of("torchtitan-eager", 1, 32768, 8, *_mixed_adamw(), Recompute.FULL))
    parts = dict(peak.parts)
    assert peak.phase.startswith("backward: loss")
    assert parts["sharded parameters"] == P_8B // 8 * 4 == 4_015_130_624
    assert parts["optimizer states"] == 2 * P_8B // 8 * 4
    tensors = 9 * 32 + 3  # per block 7 linears and 2 norms; embedding, final norm, LM head
    fused = fsdp_step_peak(llama3_8b(), FsdpStep(1, 32768, 8, optimizer_impl="fused", recompute=Recompute.FULL))
    assert dict(fused.parts)["optimizer states"] == 2 * P_8B // 8 * 4 + tensors * 512  # fused: step counters on the GPU, 512-B blocks
    assert parts["unsharded parameters"] == (2 * P_EMBEDDING + 4096 + P_LAYER) * 2
    assert parts["all-gather buffers"] == 0 and parts["reduce-scatter buffers"] == 0
    # fsdp2 (every block resharded): the root's pre-backward prefetches the last block, whose all-gather output is live instead
    fsdp2 = dict(fsdp_step_peak(llama3_8b(), fsdp_step_of("fsdp2-eager", 1, 32768, 8, *_mixed_adamw(), Recompute.FULL)).parts)
    assert fsdp2["unsharded parameters"] == (2 * P_EMBEDDING + 4096) * 2
    assert fsdp2["all-gather buffers"] == P_LAYER * 2


def _mixed_adamw():
    from parcalc.core.choices import Optimizer, Precision

    return Precision.MIXED_BF16, Optimizer.ADAMW


def test_reduce_scatter_in_fp32_doubles_its_buffer_at_a_block_backward_peak() -> None:
    """A peak inside a block's backward: the block after it's reduce-scatter input is still held (one buffer, N x shards),
    in reduce_dtype: bf16 for fsdp2's defaults, fp32 for torchtitan; the sharded gradients are fp32 either way."""
    short_vocab = replace(llama3_8b(), vocab=4096)  # each block checkpointed: the peak in a recomputed block's backward
    bf16 = fsdp_step_peak(short_vocab, FsdpStep(4, 4096, 8, reduce_bytes=2.0, recompute=Recompute.FULL))
    fp32 = fsdp_step_peak(short_vocab, FsdpStep(4, 4096, 8, reduce_bytes=4.0, recompute=Recompute.FULL))
    assert bf16.phase.startswith("backward: layer") and fp32.phase.startswith("backward: layer")
    assert dict(bf16.parts)["reduce-scatter buffers"] == P_LAYER * 2
    assert dict(fp32.parts)["reduce-scatter buffers"] == P_LAYER * 4
    assert fp32.allocated - bf16.allocated == pytest.approx(P_LAYER * 2, rel=0.001)


def test_the_peak_parts_add_up_to_the_peak() -> None:
    peak = fsdp_step_peak(llama3_8b(), FsdpStep(2, 8192, 8, recompute=Recompute.FULL))
    assert sum(v for _, v in peak.parts) == peak.allocated
    assert peak.allocated <= peak.reserved


def test_each_stream_pool_holds_its_own_peak() -> None:
    """FSDP_SOURCES['streams']: the all-gather outputs are allocated on the copy-in stream, the reduce-scatter outputs (the
    sharded gradients) on the reduce-scatter stream; each pool keeps its own peak, so what the allocator reserves is their
    sum, above the step's allocated peak. Llama 3 8B on 8 ranks, fsdp2's defaults (reduce in bf16, cast to fp32 shards)."""
    model = llama3_8b()
    peak = fsdp_step_peak(model, FsdpStep(2, 8192, 8, recompute=Recompute.FULL))
    pools = dict(peak.stream_pools)
    assert peak.reserved_by == "streams" and peak.reserved == sum(pools.values())
    h, v = model.hidden, model.vocab
    root = 2 * v * h + h  # embedding, output projection, final norm
    # the root's all-gather output is kept until the first block's copy-out, while that block's copy-in casts (its shards in
    # bf16, _fsdp_collectives.py:337, freed after the copy) and its own output are live
    assert pools["all-gather copy-in"] == pytest.approx((root + P_LAYER + P_LAYER / 8) * 2, rel=0.005)
    # every fp32 sharded gradient at the end of backward, and the root's bf16 reduce output beside its cast
    sharded = (root + model.layers * P_LAYER) * 4 / 8
    # (each block rounded up to the allocator's 2 MiB segments: 1.6 % here)
    assert pools["reduce-scatter"] == pytest.approx(sharded + root * 2 / 8, rel=0.02)
    assert peak.reserved - peak.allocated > sharded  # the default stream's peak (in the loss) holds no sharded gradient


@pytest.mark.parametrize("framework, recompute", [("fsdp2", "none"), ("fsdp2", "full"), ("torchtitan", "none"), ("torchtitan", "full"),
                                                  ("torchtitan", "op")])  # fmt: skip
def test_memory_and_fit_agree_under_fully_shard(run_json, framework: str, recompute: str) -> None:
    common = [*LLAMA_8B, "--framework", framework, "--recompute", recompute, "--zero", "3"]
    memory = run_json("memory", *common, "--dp", "8")["results"]
    fit = run_json("fit", *common, "--gpus", "8", "--batch", "8", "--tp", "1", "--pp", "1", "--dp", "8")["results"]
    assert "step_peak" in memory and "step_peak" in fit
    assert fit["total"]["value"] == pytest.approx(memory["total"]["value"], rel=0.01)


def test_the_search_ranks_fully_shard_rows_by_the_walk(run_json) -> None:
    """fit --search's ZeRO-3 row without TP carries the walk's memory, the same as the pinned layout's (51.73 GB here)."""
    search = run_json("fit", *LLAMA_8B, "--gpus", "8", "--batch", "16", "--framework", "fsdp2", "--search")["tables"]["top"]
    walked = next(r for r in search["rows"] if (r["tp"], r["pp"], r["zero"], r["recompute"]) == (1, 1, 3, "none"))
    pinned = run_json("fit", *LLAMA_8B, "--gpus", "8", "--batch", "16", "--framework", "fsdp2", "--tp", "1", "--pp", "1", "--dp", "8",
                      "--zero", "3")["results"]  # fmt: skip
    assert "step_peak" in pinned
    assert walked["memory"] == pytest.approx(pinned["total"]["value"], rel=1e-9)


def test_the_torchtitan_search_ranks_selective_op_rows_by_its_walk(run_json) -> None:
    """torchtitan's walk follows its selective op checkpointing (parcalc.core.memory_torchtitan): fit --search's op row
    carries the walk's memory, as `memory` does for the pinned layout."""
    search = run_json("fit", *LLAMA_8B, "--gpus", "8", "--batch", "16", "--framework", "torchtitan", "--search",
                      "--recompute", "op")["tables"]["top"]  # fmt: skip
    walked = next(r for r in search["rows"] if (r["tp"], r["pp"], r["zero"], r["recompute"]) == (1, 1, 3, "op"))
    memory = run_json("memory", *LLAMA_8B, "--framework", "torchtitan", "--zero", "3", "--dp", "8", "--recompute", "op")["results"]
    assert "step_peak" in memory
    assert walked["memory"] == pytest.approx(memory["total"]["value"], rel=1e-9)


@pytest.mark.parametrize("args", [["--tp", "2"], ["--zero", "1"], ["--recompute", "selective"]], ids=["tp", "zero-1", "selective"])
def test_layouts_the_walk_does_not_follow_keep_the_textbook_sum(run_json, args: list[str]) -> None:
    flags = [*LLAMA_8B, "--framework", "fsdp2", "--zero", "3", *args]
    results = run_json("memory", *flags)["results"]
    assert "step_peak" not in results and "textbook_total" not in results


def test_a_textbook_fsdp_memory_says_why(run_json) -> None:
    doc = run_json("memory", *LLAMA_8B, "--framework", "torchtitan", "--zero", "3", "--tp", "2", "--recompute", "selective")
    said = [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    assert said and "tp = 2" in said[0] and "--recompute selective" in said[0]
    walked = run_json("memory", *LLAMA_8B, "--framework", "torchtitan", "--zero", "3", "--dp", "8")
    assert not [a for a in walked["assumptions"] if a.startswith("memory: the textbook sum")]


@pytest.mark.parametrize("flags, gap", [
    # Qwen3's q/k norms are walked in the eager block under FSDP2 alone (memory_torchtitan.head_norms_forward)
    (["--model", "qwen3-30b-a3b", "--cp", "2"], "q/k norms with cp = 2"),
    # torchtitan's MoE is walked in bf16 (memory_torchtitan_moe), not with torchao's Float8 grouped GEMMs
    (["--model", "mixtral-8x7b", "--precision", "fp8"], "experts with --precision fp8"),
    # DeepSeek's latent attention is walked in the eager block under FSDP2 alone (memory_torchtitan_mla); MTP is not
    (["--model", "deepseek-v3"], "MTP modules"),
    (["--model", "deepseek-v2", "--tp", "2"], "latent attention (MLA) with tp = 2"),
    (["--model", "llama3-8b", "--precision", "fp32"], "--precision fp32 (the torchtitan walk follows bf16 compute)"),
])  # fmt: skip
def test_what_torchtitans_llama_code_lacks_keeps_the_textbook_sum(run_json, flags: list[str], gap: str) -> None:
    doc = run_json("memory", *flags, "--framework", "torchtitan", "--zero", "3", "--dp", "8", "--seq-len", "4096", "--micro-batch", "1")
    said = [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    assert said and gap in said[0]
    assert "step_peak" not in doc["results"]


def test_torchtitans_moe_is_walked_and_named(run_json) -> None:
    """Mixtral-shaped experts under --framework torchtitan: the step walk with torchtitan's MoE block (memory_torchtitan_moe),
    the derivation naming it; its router's fp32 input copy (T x h x 4 bytes, b 1 x s 4096 x h 4096) among what is live."""
    doc = run_json("memory", "--model", "mixtral-8x7b", "--framework", "torchtitan", "--zero", "3", "--dp", "8", "--seq-len", "4096",
                   "--micro-batch", "1", "--gpu", "h200")  # fmt: skip
    assert not [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    text = str(doc)
    assert "torchtitan's MoE (8 routed experts, top-2" in text
    assert "router input cast to fp32 (saved by the gate)" in text


def test_qwen3_moe_under_torchtitan_is_walked_with_its_q_k_norms(run_json) -> None:
    """Qwen3-30B-A3B under --framework torchtitan: the step walk with torchtitan's MoE and GQAttention's q_norm / k_norm
    (memory_torchtitan.head_norms_forward), named in the derivation (what the norms save: test_torch_memory_torchtitan_moe)."""
    doc = run_json("memory", "--model", "qwen3-30b-a3b", "--framework", "torchtitan", "--zero", "3", "--dp", "8", "--seq-len", "4096",
                   "--micro-batch", "1", "--gpu", "h200", "--recompute", "none")  # fmt: skip
    assert not [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    text = str(doc)
    assert "Qwen3's q_norm and k_norm on the head dim" in text and "torchtitan's MoE (128 routed experts, top-8" in text


def test_deepseek_v2_under_torchtitan_is_walked_with_its_latent_attention(run_json) -> None:
    """DeepSeek-V2 (q_lora_rank 1536, 160 routed experts, 2 shared, the first layer dense) under --framework torchtitan: the
    step walk with DeepSeek's latent attention (memory_torchtitan_mla), named in the derivation; what FlexAttention keeps
    among the peak's live tensors."""
    doc = run_json("memory", "--model", "deepseek-v2", "--framework", "torchtitan", "--zero", "3", "--dp", "64", "--seq-len", "4096",
                   "--micro-batch", "1", "--gpu", "h200", "--recompute", "none")  # fmt: skip
    assert not [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    text = str(doc)
    assert "DeepSeek's multi-head latent attention" in text and "q = cat(q_nope, q_pe) (saved by FlexAttention)" in text
