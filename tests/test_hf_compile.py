"""`fit --framework hf --compile`: transformers' Llama compiled whole, timed by Inductor's kernels of it
(parcalc.core.timing.hf_compiled_kernels; the kernel list is held against Inductor's scheduler at a tiny shape in
tests/ground_truth/test_torch_hf_compile.py). Here: the list at the real shape of the shared H200 step (Llama 3.2 1B,
b 4, s 4096) by formula, its launches in the host model, and the step time it predicts against eager. No compiled HF
step was measured in ../shared/measurements/h200-2026-11-28 (the eager one, 367.0 ms, is docs/step-time.md's), so the
compiled prediction is pinned as what the held-back measurement will check, not fitted to anything."""

from __future__ import annotations

import pytest

from parcalc.core.timing.compute import LayerShard, compute_spec, end_passes, layer_passes
from parcalc.presets import load_gpu, load_model

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
    128 B each), silu * mul (6 T f); backward 7 weight-gradient casts, SwiGLU's backward (10 T f), rotary's, and each norm's
    backward as a mix-order reduction (T h >= 5 x 2^20, T >= 2 h, T >= 4096: hf_compiled_kernels.mix_order_applies): one
    kernel reads the G bf16 gradients of the normed output, the fp32 input, 1/rms, the weight and the residual gradient
    (G 2 T h + 4 T h + 4 T + 4 h + 4 T h) and writes the input gradient and its bf16 copy (6 T h) and the partial weight
    gradients (T / 16 rows of h fp32: split_size 16 on 132 SMs), then their sum (read them, write 4 h), G = 3 (q, k, v) and
    2 (gate, up)."""
    model = load_model("llama3.2-1b")
    h, f, t = model.hidden, model.ffn_hidden, B * S
    q_w, kv_w = model.heads * model.head_dim, model.kv_heads * model.head_dim
    weights = 6 * (h * q_w + 2 * h * kv_w + q_w * h + 3 * h * f)
    inv_freq = 4 * model.head_dim // 2
    forward = 2 * (12 * t * h + 4 * h + 4 * t) + weights + 2 * (4 * t * (q_w + kv_w) // 2) + 2 * inv_freq + 6 * t * f
    partials = 4 * h * t // 16
    norms = sum(2 * g * t * h + 4 * t * h + 4 * t + 4 * h + 4 * t * h + 6 * t * h + partials + (partials + 4 * h) for g in (3, 2))
    backward = weights + 10 * t * f + 2 * (4 * t * (q_w + kv_w) // 2) + 2 * inv_freq + norms
    passes = layer_passes(model, SHARD, compute_spec(load_gpu("h200"), "bf16", 1e15))  # 132 SMs
    mine_f, mine_b = _memory(passes.forward), _memory(passes.backward)
    assert (len(mine_f), len(mine_b)) == (12, 14)
    assert sum(k.bytes for k in mine_f) == forward == 2_143_437_056
    # 570.6 MB less than the two reductions apart (their separate reads, 18 T h + 8 T, less the partials written and read)
    assert sum(k.bytes for k in mine_b) == backward == 3_754_197_248 - 570_556_416 == 3_183_640_832


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
    forward 16 layers x (12 generated + 7 GEMMs + SDPA) + 6 at the ends (final norm, the head's weight cast, its GEMM, the
    label shift, online softmax, nll with the mean) = 326; backward 16 x (14 + 14 GEMMs + SDPA's) + 8 (the embedding's
    zeroed table and scatter-add, the final norm's two reductions (mix-order: one and the partials' sum), the head's two
    GEMMs, the tied add, the loss's) = 472.
    Eager transformers launches 785 and 1,416."""
    launches = {}
    for flags in ((), ("--compile",)):
        value = {k: v["value"] for k, v in run_json(*H200_HF, *flags)["results"]["t_host"]["inputs"].items()}
        if flags:  # compiled: by kind, generated (g), extern GEMMs (k), attention ops (a) (tests/test_compiled_host.py)
            launches[flags] = (value["g_f"] + value["k_f"] + value["a_f"], value["g_b"] + value["k_b"] + value["a_b"])
        else:
            launches[flags] = (value["n_f"], value["n_b"])
    assert launches[("--compile",)] == (16 * (12 + 7 + 1) + 6, 16 * (14 + 14 + 1) + 8) == (326, 472)
    assert launches[()] == (785, 1416)


def test_compiled_step_prediction_on_the_h200(run_json) -> None:
    """What parcalc predicts for the compiled HF step of the shared H200 run (1B b4 s4096), for the held-back measurement to
    check: 249.3 ms against eager's 353.1 ms (measured eager: 367.0 ms), 0.706 of it. The memory-bound kernels go from 148.3
    (the non-vectorised paths at the step's clock) to 24.6 ms; SDPA is the same extern kernel (40.3 ms both); the GEMMs take longer, 152.4 -> 172.2 ms, at the lower SM clock
    the 700 W board leaves a step busier on its Tensor Cores (parcalc.core.timing.step_clock: 1,662.7 -> 1,455.1 MHz)."""
    eager, compiled = (run_json(*H200_HF, *flags)["results"] for flags in ((), ("--compile",)))

    def ms(results: dict, key: str) -> float:
        return results[key]["value"] * 1e3

    assert ms(compiled, "t_attention") == pytest.approx(ms(eager, "t_attention"), rel=1e-9)
    assert ms(eager, "t_memory_bound") == pytest.approx(148.3, abs=0.1)
    assert ms(compiled, "t_memory_bound") == pytest.approx(24.6, abs=0.1)
    assert ms(compiled, "t_gemm") > ms(eager, "t_gemm")  # the clock
    assert ms(eager, "t_step") == pytest.approx(353.1, abs=0.1)
    assert ms(compiled, "t_step") == pytest.approx(249.3, abs=0.1)
    assert ms(compiled, "t_step") / ms(eager, "t_step") == pytest.approx(0.706, abs=0.001)


def test_mix_order_reduction_only_where_inductor_makes_one() -> None:
    """The norms' backward is Inductor's mix-order reduction where MixOrderReduction.can_fuse's sizes hold (T h >= 5 x 2^20,
    T >= 2 h, T >= 4096, h <= 16,384): at b 4 s 4096 (T 16,384, h 2,048) a 'dx+dw' kernel and the partials' sum; at the b 1
    s 2048 step of the same shared run (T 2,048 < 4,096) and at the ground truth's tiny shape the two reductions apart.
    Partials: one row of h per split_size tokens, split_size = last power of 2 of T / (8 x 132 SMs) clamped to [16, 128]."""
    from parcalc.core.timing.hf_compiled_kernels import mix_order_applies, mix_order_split

    assert mix_order_applies(16384, 2048) and not mix_order_applies(2048, 2048) and not mix_order_applies(32, 64)
    assert not mix_order_applies(16384, 16384)  # T < 2 h
    assert (mix_order_split(16384, 132), mix_order_split(65536, 132), mix_order_split(10**6, 132)) == (16, 32, 128)
    model = load_model("llama3.2-1b")
    spec = compute_spec(load_gpu("h200"), "bf16", 1e15)
    keys = {s: [k.key for k in layer_passes(model, LayerShard(b, s, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True),
                                            spec).backward if "layernorm" in k.key] for b, s in ((4, 4096), (1, 2048))}  # fmt: skip
    assert keys[4096] == ["input_layernorm.dx+dw.bwd", "input_layernorm.dw.bwd", "post_attention_layernorm.dx+dw.bwd",
                          "post_attention_layernorm.dw.bwd"]  # fmt: skip
    assert keys[2048] == ["input_layernorm.dw.bwd", "input_layernorm.dx.bwd", "post_attention_layernorm.dw.bwd",
                          "post_attention_layernorm.dx.bwd"]  # fmt: skip
