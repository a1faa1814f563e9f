"""`fit --framework hf --compile`: transformers' Llama compiled whole, timed by Inductor's kernels of it
(parcalc.core.timing.hf_compiled_kernels; the kernel list is held against Inductor's scheduler at a tiny shape in
tests/ground_truth/test_torch_hf_compile.py). Here: the list at the real shape of the shared H200 step (Llama 3.2 1B,
b 4, s 4096) by formula, its launches in the host model, and the step time it predicts against eager. No compiled HF
step was measured in ../shared/measurements/h200-2026-11-28 (the eager one, 367.0 ms, is docs/step-time.md's), so the
compiled prediction is pinned as what the held-back measurement will check, not fitted to anything."""

from __future__ import annotations

import pytest

from parcalc.core.timing.compute import LayerShard, compute_spec, end_passes, layer_passes
from parcalc.presets import load_model

H200_HF = ("fit", "--model", "llama3.2-1b", "--gpu", "h200", "--gpus", "1", "--framework", "hf", "--micro-batch", "4",
           "--seq-len", "4096", "--batch", "4", "--tp", "1", "--pp", "1", "--dp", "1")  # fmt: skip
B, S = 4, 4096
SHARD = LayerShard(B, S, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True)


def _memory(kernels) -> list:
    return [k for k in kernels if k.kind == "memory"]


def test_layer_bytes_at_the_real_shape_by_formula() -> None:
    """Llama 3.2 1B (h 2048, 32 query heads and 8 KV heads of 64, FFN 8192), T = 4 x 4096 tokens: per layer, forward two
    add + RMSNorm kernels (read the fp32 stream, the bf16 branch, the fp32 weight; write the fp32 sum, 1/rms, the bf16
    normed input: 12 T h + 4 h + 4 T each), 7 weight casts (6 bytes a weight), rotary on q and k (4 T w + inv_freq's
    128 B each), silu * mul (6 T f); backward two bf16 casts of the fp32 residual gradient (6 T h each), 7 weight-gradient
    casts, SwiGLU's backward (10 T f), rotary's, the two norms' weight- (G 2 T h + 4 T h + 4 T + 4 h) and input-gradient
    reductions (the same reads, the weight, the residual gradient; written 4 T h), G = 3 (q, k, v) and 2 (gate, up)."""
    model = load_model("llama3.2-1b")
    h, f, t = model.hidden, model.ffn_hidden, B * S
    q_w, kv_w = model.heads * model.head_dim, model.kv_heads * model.head_dim
    weights = 6 * (h * q_w + 2 * h * kv_w + q_w * h + 3 * h * f)
    inv_freq = 4 * model.head_dim // 2
    forward = 2 * (12 * t * h + 4 * h + 4 * t) + weights + 2 * (4 * t * (q_w + kv_w) // 2) + 2 * inv_freq + 6 * t * f
    norms = sum(2 * g * t * h + 4 * t * h + 4 * t + 4 * h + (2 * g * t * h + 4 * t * h + 4 * t + 4 * h + 4 * t * h + 4 * t * h)
                for g in (3, 2))  # fmt: skip
    backward = 2 * 6 * t * h + weights + 10 * t * f + 2 * (4 * t * (q_w + kv_w) // 2) + 2 * inv_freq + norms
    passes = layer_passes(model, SHARD, compute_spec(None, "bf16", 1e15))
    mine_f, mine_b = _memory(passes.forward), _memory(passes.backward)
    assert (len(mine_f), len(mine_b)) == (12, 16)
    assert sum(k.bytes for k in mine_f) == forward == 2_143_437_056
    assert sum(k.bytes for k in mine_b) == backward == 4_022_632_704


def test_the_loss_reads_the_bf16_logits_once_each_way() -> None:
    """The loss compiled with the model: forward one pass over the bf16 logits (T x V x 2 B = 4.2 GB for V 128,256), backward
    one read and one write of them; eager transformers reads and writes the fp32 logits in 7 kernels (hf_kernels.hf_ends:
    the cast 6, log_softmax's passes 16, nll's zeroed gradient 4, log_softmax's backward 16, the cast back 6): 48 T V bytes
    against 6 T V (and a few bytes per row: the labels, the statistics)."""
    model = load_model("llama3.2-1b")
    spec = compute_spec(None, "bf16", 1e15)
    logits = B * S * model.vocab

    def loss_bytes(shard: LayerShard) -> float:
        return sum(k.bytes for k in end_passes(model, shard, spec).kernels if k.key.startswith("loss."))

    eager = LayerShard(B, S, 1, False, True, False, True, 2.0, eager=True, hf=True)
    assert loss_bytes(SHARD) == pytest.approx(6 * logits, rel=1e-3)
    assert loss_bytes(eager) == pytest.approx(48 * logits, rel=1e-3)


def test_compiled_step_launches_its_kernel_list(run_json) -> None:
    """The host model counts the compiled step's launches from the compiled list (parcalc.core.timing.step.stage_launches):
    forward 16 layers x (12 generated + 7 GEMMs + SDPA) + 7 at the ends (final norm, the head's weight cast, its GEMM, the
    label shift, online softmax, nll, mean) = 327; backward 16 x (16 + 14 GEMMs + SDPA's) + 9 (the embedding's zeroed
    table and scatter-add, the final norm's two reductions, the head's two GEMMs, the tied add, the loss's two) = 505.
    Eager transformers launches 785 and 1,416."""
    launches = {}
    for flags in ((), ("--compile",)):
        inputs = run_json(*H200_HF, *flags)["results"]["t_host"]["inputs"]
        launches[flags] = (inputs["n_f"]["value"], inputs["n_b"]["value"])
    assert launches[("--compile",)] == (16 * (12 + 7 + 1) + 7, 16 * (16 + 14 + 1) + 9) == (327, 505)
    assert launches[()] == (785, 1416)


def test_compiled_step_prediction_on_the_h200(run_json) -> None:
    """What parcalc predicts for the compiled HF step of the shared H200 run (1B b4 s4096), for the held-back measurement to
    check: 251.8 ms against eager's 352.5 ms (measured eager: 367.0 ms), 0.714 of it. The memory-bound kernels go from 147.6
    to 27.7 ms; SDPA is the same extern kernel (40.3 ms both); the GEMMs take longer, 152.4 -> 171.6 ms, at the lower SM clock
    the 700 W board leaves a step busier on its Tensor Cores (parcalc.core.timing.step_clock: 1,662.7 -> 1,460.7 MHz)."""
    eager, compiled = (run_json(*H200_HF, *flags)["results"] for flags in ((), ("--compile",)))

    def ms(results: dict, key: str) -> float:
        return results[key]["value"] * 1e3

    assert ms(compiled, "t_attention") == pytest.approx(ms(eager, "t_attention"), rel=1e-9)
    assert ms(eager, "t_memory_bound") == pytest.approx(147.6, abs=0.1)
    assert ms(compiled, "t_memory_bound") == pytest.approx(27.7, abs=0.1)
    assert ms(compiled, "t_gemm") > ms(eager, "t_gemm")  # the clock
    assert ms(eager, "t_step") == pytest.approx(352.5, abs=0.1)
    assert ms(compiled, "t_step") == pytest.approx(251.8, abs=0.1)
    assert ms(compiled, "t_step") / ms(eager, "t_step") == pytest.approx(0.714, abs=0.001)
