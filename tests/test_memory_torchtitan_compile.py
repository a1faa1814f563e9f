"""--compile under the torchtitan profile: each block's compiled code in the step walk (parcalc.core.memory_torchtitan_compile),
held against every allocation of a compiled step on the CPU in tests/ground_truth/test_torch_memory_torchtitan_compile.py;
here what follows from it: the saved set is the partitioner's (tests/ground_truth/test_torch_compile.py), the programs free
what they allocate, and memory, fit and fit --search give the same walk."""

from __future__ import annotations

from dataclasses import replace

import pytest

from parcalc.core.choices import Optimizer, Precision, Recompute
from parcalc.core.memory_fsdp import fsdp_step_of, fsdp_step_peak
from parcalc.core.memory_timeline import shapes_of
from parcalc.core.memory_torchtitan_compile import POLICIES, compiled_block_backward, compiled_block_forward
from parcalc.core.memory_walk import Walk

LLAMA_8B = ["--model", "llama3-8b", "--seq-len", "4096", "--micro-batch", "1", "--gpu", "h100-sxm5", "--flash-attention"]


def _llama3_8b():
    from parcalc.presets import load_model

    return load_model("llama3-8b")


def _one_block(policy: str, b: int = 2, s: int = 1024) -> tuple[Walk, float, object]:
    x = shapes_of(_llama3_8b(), b, s, 2.0, 2.0, False)
    walk = Walk()
    walk.alloc("x", x.T * x.h * x.c, "activations", "block input")
    out = compiled_block_forward(walk, x, 0, "x", policy)
    return walk, sum(t.bytes for k, t in walk.live.items() if k != out), x


def test_the_compiled_forward_saves_the_partitioners_set() -> None:
    """No checkpointing: what the compiled forward keeps besides its output is what test_torch_compile.py finds the min-cut
    partitioner hands the backward (saved_tensors_hooks): parcalc's fused-kernel count (FlashAttention, no dropout, 2-byte
    activations), plus both RMSNorms' fp32 1/rms per token and k, v after repeat_kv at the query width; the RoPE table is the
    model's freqs_cis buffer, counted once by the step, not per block."""
    from parcalc.core.activations import ActivationConfig, layer_activations

    _, kept, x = _one_block("none")
    model = _llama3_8b()
    fused = layer_activations(model, ActivationConfig(2, 1024, flash_attention=True, dropout=False, activation_bytes=2.0)).per_layer.value
    rstd = 2 * x.T * 4
    repeat_kv = 2 * x.T * (x.q - x.kv) * 2
    assert kept == fused + rstd + repeat_kv


@pytest.mark.parametrize("policy, saved", [("op", ("wq", "wv", "w1", "attn", "lse")), ("full", ())])
def test_checkpointed_compiled_forwards_keep_the_policys_tensors(policy: str, saved: tuple[str, ...]) -> None:
    """Selective op: the block input and the outputs the policy saves that the backward reads (wq, wv, w1, SDPA's output and
    logsumexp; w2's output is marked but not read, so not saved); full: the input only."""
    _, kept, x = _one_block(policy)
    sizes = {"wq": x.T * x.q * 2, "wv": x.T * x.kv * 2, "w1": x.T * x.f * 2, "attn": x.T * x.q * 2, "lse": x.b * x.heads * x.s * 4}
    assert kept == x.T * x.h * 2 + sum(sizes[name] for name in saved)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_compiled_backward_leaves_the_gradients_only(policy: str) -> None:
    walk, _, x = _one_block(policy)
    walk.free("L0.x2")  # the block output, which the next block's forward (or the final norm) consumes
    walk.alloc("g_out", x.T * x.h * 2, "temporaries", "output gradient")
    compiled_block_backward(walk, x, 0, "x", "g_out", "g_in", policy)
    left = {k for k in walk.live if not k.endswith(".grad")}
    assert left == {"g_in"}, left
    grads = sum(t.bytes for k, t in walk.live.items() if k.endswith(".grad"))
    assert grads == (2 * x.h * x.q + 2 * x.h * x.kv + 3 * x.h * x.f + 2 * x.h) * 2  # every weight of the block, bf16
    assert walk.live["g_in"].bytes == x.T * x.h * 2


def test_compile_frees_w2s_output_at_the_published_layouts_peak() -> None:
    """Llama 3 8B, FSDP 8, b 2, s 8192, selective op (torchtitan's Table 1 layout): the peak is in the loss's backward either
    way, and the compiled step keeps 4.0 GiB less, exactly w2's output of every block (cached by eager selective op
    checkpointing, not saved by the compiled partitioner since the backward never reads it)."""
    model = _llama3_8b()
    eager = fsdp_step_peak(model, fsdp_step_of("torchtitan-eager", 2, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.OP))
    compiled = fsdp_step_peak(model, fsdp_step_of("torchtitan-eager", 2, 8192, 8, Precision.MIXED_BF16, Optimizer.ADAMW, Recompute.OP,
                                                  compiled=True))  # fmt: skip
    assert eager.phase.startswith("backward: loss") and compiled.phase.startswith("backward: loss")
    assert eager.allocated - compiled.allocated == model.layers * 2 * 8192 * model.hidden * 2 == 4 * 2**30


@pytest.mark.parametrize("recompute", ["none", "full", "op"])
def test_memory_and_fit_agree_with_compile(run_json, recompute: str) -> None:
    common = [*LLAMA_8B, "--framework", "torchtitan", "--recompute", recompute, "--zero", "3", "--compile"]
    memory = run_json("memory", *common, "--dp", "8")["results"]
    fit = run_json("fit", *common, "--gpus", "8", "--batch", "8", "--tp", "1", "--pp", "1", "--dp", "8")["results"]
    eager = run_json("memory", *common[:-1], "--dp", "8")["results"]
    assert "step_peak" in memory and "step_peak" in fit
    assert fit["total"]["value"] == pytest.approx(memory["total"]["value"], rel=1e-9)
    # full: both keep each block's input alone, and the peak is in the loss's backward (a 128K vocabulary): the same peak
    assert memory["step_peak"]["value"] < eager["step_peak"]["value"] or recompute == "full"
    assert memory["step_peak"]["value"] <= eager["step_peak"]["value"]


def test_the_search_ranks_compiled_rows_by_the_compiled_walk(run_json) -> None:
    search = run_json("fit", *LLAMA_8B, "--gpus", "8", "--batch", "16", "--framework", "torchtitan", "--search", "--recompute", "op",
                      "--compile")["tables"]["top"]  # fmt: skip
    walked = next(r for r in search["rows"] if (r["tp"], r["pp"], r["zero"], r["recompute"]) == (1, 1, 3, "op"))
    memory = run_json("memory", *LLAMA_8B, "--framework", "torchtitan", "--zero", "3", "--dp", "8", "--recompute", "op", "--compile")
    assert walked["memory"] == pytest.approx(memory["results"]["total"]["value"], rel=1e-9)
    assert any("Inductor generates" in note for note in memory["assumptions"])


@pytest.mark.parametrize("flags, gap", [
    (["--framework", "fsdp2"], "--compile (the compiled walk follows torchtitan's block"),
    # the compiled block with torchao's Float8 TP styles is read at tp 2 and 8 (memory_torchtitan_tp_compile.FLOAT8_DEGREES)
    (["--framework", "torchtitan", "--tp", "4", "--recompute", "full", "--sequence-parallel", "--precision", "fp8"],
     "--compile --precision fp8 with tp = 4"),
])  # fmt: skip
def test_what_the_compiled_walk_does_not_follow_keeps_the_textbook_sum(run_json, flags: list[str], gap: str) -> None:
    doc = run_json("memory", *LLAMA_8B, *flags, "--zero", "3", "--dp", "8", "--compile")
    said = [a for a in doc["assumptions"] if a.startswith("memory: the textbook sum")]
    assert said and gap in said[0], doc["assumptions"]
    assert "step_peak" not in doc["results"]


def test_multi_head_attention_is_not_walked_compiled() -> None:
    from parcalc.core.memory_fsdp import compile_gaps

    mha = replace(_llama3_8b(), kv_heads=32)
    assert compile_gaps(mha, 1, 1, "torchtitan") == ["--compile with multi-head attention (no repeat_kv copy): Inductor's code for it "
                                                      "is not walked"]
    assert compile_gaps(_llama3_8b(), 1, 1, "torchtitan") == []
