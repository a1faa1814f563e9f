"""What the host's per-expert work explains of the fine-grained MoE rows' gap under Megatron-LM (issues #31, #32): a
report, not a model. Nothing here changes a prediction.

    python benchmarks/moe_host_gap.py

Qwen3-30B-A3B (128 experts of FFN 768, top 8, 48 MoE layers) under Megatron-Bridge comes out far too fast on the rows
whose experts are many and small per GPU; the gap per MoE layer and micro-batch is about the same at MBS 1 (B200) and
MBS 4 (GB200), a cost that does not scale with tokens. This script counts, from the sources of the releases those rows
ran (NeMo 25.11: Transformer Engine 2.9, Megatron-Core 0.15, Megatron-Bridge docs/releases/changelog.md @76966997e), the
host's launches per MoE layer and micro-batch that parcalc does not yet time, and prices them at the two measured
per-launch host costs parcalc has, against the measured gap:

- **Syncs.** Megatron-Core 0.15's MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py @
  core_v0.15.0): dropless, EP > 1: the counts are copied to the host on a side stream at `before_permutation_1` and
  waited for (`self.d2h_event.synchronize()`) at `before_ep_alltoall`, once per MoE layer's forward; the backward
  reuses the host splits and does not wait. DeepEP / HybridEP (the flex dispatcher) hand the received counts to the
  host in their dispatch likewise. So every MoE layer's forward starts with the GPU's queue empty; the backward can
  run ahead.
- **Per-expert launches.** TE 2.9 GroupedLinear (transformer_engine/pytorch/module/grouped_linear.py @v2.9) quantises
  each expert's split in its own call: `tex.split_quantize` forward (fc1's and fc2's inputs) and backward (their output
  gradients), whose C++ (pytorch/csrc/extensions/cast.cpp @v2.9, multi_tensor_quantize_impl) has a fused
  multi-tensor kernel only for delayed scaling and otherwise calls `quantizer->quantize` per expert: one
  `nvte_quantize_v2` for MXFP8 and FP8 blockwise, three for per-tensor current scaling (quantizer.cpp @v2.9,
  Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax_with_config, nvte_compute_scale_from_amax,
  nvte_quantize_v2). BF16 splits are views (`torch.split`). The GEMMs themselves (2 per expert forward, 4 backward,
  cuBLASLt one by one) are already timed (parcalc.core.timing.moe.expert_host_exposed, 24.75 us each).
- **Per-launch host cost.** Not measured for a TE C++ quantize call. Two measured numbers bracket a launch: the H200
  trace's median `cudaLaunchKernel` (the CUDA runtime alone, under CUPTI: 6.47 us on the autograd thread, 7.22 us on
  the main thread; ../shared/measurements/h200-2026-11-28/trace-llama1b-b4-s4096.json.gz), and the Hugging Face
  profile's host time per kernel (presets/frameworks/hf.yaml host: 30.56 us forward, 28.76 us backward: Python model
  code, ATen dispatch and the launch). A TE C++ loop has no Python per expert, so the second overstates it.

The last columns price every launch of the MoE layer at the Hugging Face per-kernel cost (parcalc's fused kernel list,
each per-expert GEMM and cast once per local expert; a lower count than Megatron issues: memsets, the count
all-gather, D2H copies and index kernels are not in it) against the predicted and the measured time per MoE layer
and micro-batch, and put them through parcalc's host model with the dispatcher's sync as a segment cut (`fluid`: each
layer's forward a segment from the previous layer's experts to its own permute, the backward one segment; the exchanges
as without overlap, the layer's kernels only: no optimizer, data-parallel or pipeline terms).

What it gives (session 15): the per-expert quantisations are 64 launches per MoE layer and micro-batch on the Blackwell
rows (16 local experts, MXFP8) and 96 on the H100 FP8 row (8, current scaling): 0.44-1.90 ms and 0.66-2.85 ms at the
two prices, against gaps of 5.6-6.1 ms and 3.7 ms. Every launch of the layer at the HF price, through the sync-cut host
model, gives 5.64 ms on the B200 (host-bound: the launches' host time; measured 9.18; 5.75 ms and 195 launches
with the all-to-all's sort, session 20) and 7.83 ms on the GB200 (measured
14.36, where its GPU work would hide most of the host). The GB200's gap, the same per micro-batch at four times the
tokens, is as if the host's time added to the GPU's, which the host model produces only where the GPU waits at syncs
that the sources do not show in the backward. So the mechanism is not sourced well enough to land: see the report.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

import modern_cases
from published_blackwell_amd_runs import RUNS
from test_published_blackwell_amd import fit_inputs

from parcalc.core.fit import estimate
from parcalc.core.timing.compute import layer_passes
from parcalc.core.timing.host import Phase, host_exposed
from parcalc.core.timing.moe import ExchangeTimes, layer_exchange, routed_rows, routed_tokens
from parcalc.core.timing.step import _layer_shard

# split_quantize calls per MoE layer and micro-batch: forward fc1's and fc2's inputs, backward fc2's and fc1's output
# gradients (TE 2.9 grouped_linear.py: _GroupedLinear.forward `tex.split_quantize(inp_view, m_splits, input_quantizers)`,
# backward `tex.split_quantize(grad_output_view, ctx.m_splits, ctx.grad_output_quantizers)`)
QUANTIZE_CALLS = (2, 2)
# kernels each expert's quantisation launches in a split_quantize call (TE 2.9 cast.cpp multi_tensor_quantize_impl and
# quantizer.cpp); delayed scaling: one fused nvte_multi_cast_transpose for all experts of the call, none per expert
KERNELS_PER_EXPERT_QUANTIZE = {"bf16": 0, "delayed": 0, "mxfp8": 1, "blockwise": 1, "current": 3}
# median cudaLaunchKernel in the H200 trace of the HF Llama 1B b 4 step (profiled), autograd and main thread
LAUNCH_RUNTIME = (6.47e-6, 7.22e-6)
# presets/frameworks/hf.yaml host: forward, backward per kernel (the HF step's host work per kernel, profiler removed)
HF_PER_KERNEL = (30.56e-6, 28.76e-6)
# Megatron-Bridge @1faf74e32 docs/training/cuda-graphs.md: Qwen3-30B-A3B, 16 H100, BF16, EP 16, all-to-all
# dispatcher, MBS 1, GBS 1024, no EP overlap: 'replay iterations 5-8 averaged 42.00 s versus 41.36 s for eager'
BRIDGE_EAGER_ALLTOALL_STEP = 41.36


class Row(NamedTuple):
    label: str
    inputs: tuple[Any, Any, Any, Any]
    measured_step: float  # s per step, from the published throughput
    source: str


def rows() -> list[Row]:
    out = []
    for run in RUNS:
        if run.model == "qwen3-30b-a3b" and "turbo" not in run.key:
            out.append(Row(run.key, fit_inputs(run), run.global_batch * run.seq_len / (run.tokens_per_s_per_gpu * run.gpus),
                           "tests/published_blackwell_amd_runs.py"))  # fmt: skip
    for case in modern_cases.CASES + modern_cases.KNOWN_GAPS:
        if case.model == "qwen3-30b-a3b":
            model, config, training, cluster = inputs = modern_cases.inputs(case)
            tokens = modern_cases.published_tokens_per_gpu(case, model, training.seq_len)
            out.append(Row(case.key, inputs, training.global_batch * training.seq_len / (tokens * case.run.gpus), "tests/modern_cases.py"))  # fmt: skip
            # the same layout eager with Megatron's all-to-all dispatcher: the Bridge docs' A/B of CUDA graphs
            if case.dispatcher == "deepep" and case.ep_overlap == "1f1b":
                a2a = (model, replace(config, moe_dispatcher="alltoall", ep_overlap="none"), training, cluster)
                out.append(Row("bridge-docs-qwen3-30b-a3b-16xh100-bf16-alltoall-eager", a2a, BRIDGE_EAGER_ALLTOALL_STEP,
                               "Megatron-Bridge @1faf74e32 docs/training/cuda-graphs.md"))  # fmt: skip
    return out


def recipe_of(training: Any) -> str:
    return training.fp8_recipe if training.precision.gemm_dtype != "bf16" else "bf16"


def quantize_launches(recipe: str, local: int) -> tuple[int, int]:
    """(forward, backward) kernels the per-expert quantisations of one MoE layer launch per micro-batch (module docstring)."""
    per_expert = KERNELS_PER_EXPERT_QUANTIZE[recipe]
    if recipe == "delayed":
        return QUANTIZE_CALLS
    return QUANTIZE_CALLS[0] * per_expert * local, QUANTIZE_CALLS[1] * per_expert * local


def layer_launches(passes: Any, recipe: str, local: int) -> tuple[int, int]:
    """(forward, backward) launches of one MoE layer from parcalc's kernel list: each per-expert GEMM and cast once per
    local expert, a per-tensor current-scaling cast as its three kernels."""

    def count(kernels: Any) -> int:
        n = 0
        for k in kernels:
            per_expert = k.key.startswith("moe.experts.fc")
            cast = k.key.endswith(".cast")
            launches = KERNELS_PER_EXPERT_QUANTIZE["current"] if cast and recipe == "current" else 1
            n += launches * (local if per_expert and not (cast and recipe == "delayed") else 1)
        return n

    return count(passes.forward), count(passes.backward)


def split_launches(kernels: Any, recipe: str, local: int, before_sync: bool) -> tuple[int, float]:
    """(launches, GPU seconds) of a layer's forward kernels up to the dispatcher's sync (attention, router, permute) or
    after it (the experts, the un-permute and the residual)."""
    cut = next(i for i, k in enumerate(kernels) if k.key.startswith("moe.experts"))
    part = kernels[:cut] if before_sync else kernels[cut:]
    return layer_launches(_Passes(part, ()), recipe, local)[0], sum(k.time for k in part)


class _Passes(NamedTuple):
    forward: Any
    backward: Any


def fluid_layer(passes: Any, exchange: ExchangeTimes, recipe: str, local: int, layers: int) -> float:
    """Seconds per MoE layer and micro-batch with every launch at the HF per-kernel host cost and parcalc's host model
    (parcalc.core.timing.host.host_exposed): the forward cut at each layer's dispatcher sync into segments of (the
    previous layer's experts, combine and residual; this layer's attention, router and permute), the backward one
    segment over the layers (no sync); exchanges exposed as without overlap."""
    n_pre, g_pre = split_launches(passes.forward, recipe, local, True)
    n_post, g_post = split_launches(passes.forward, recipe, local, False)
    forward = [Phase(n_post * HF_PER_KERNEL[0], g_post + exchange.forward), Phase(n_pre * HF_PER_KERNEL[0], g_pre)]
    g_b = passes.t_backward + exchange.backward
    n_b = layer_launches(passes, recipe, local)[1]
    backward = host_exposed([Phase(n_b * HF_PER_KERNEL[1], g_b)] * layers) / layers
    return g_pre + g_post + exchange.forward + host_exposed(forward) + g_b + backward


def report() -> list[dict[str, Any]]:
    results = []
    for row in rows():
        model, config, training, cluster = row.inputs
        est = estimate(model, config, training, cluster)
        m = config.micro_batches(training)
        moe_layers = model.layers  # every layer of Qwen3-30B-A3B is an MoE layer
        experts = config.experts()
        layout = config.layout
        _, local = routed_rows(model, routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel), experts)  # fmt: skip
        recipe = recipe_of(training)
        q_f, q_b = quantize_launches(recipe, local)
        passes = layer_passes(model, _layer_shard(model, layout, config.micro_batch, training, cluster), cluster.spec, experts)  # fmt: skip
        l_f, l_b = layer_launches(passes, recipe, local)
        per = m * moe_layers
        tokens = routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel)
        exchange = layer_exchange(model, tokens, 2.0, recipe != "bf16" and cluster.framework.fp8_dispatch, experts, cluster.fabric,
                                  cluster.gpus_per_node)
        results.append({
            "row": row.label, "local": local, "recipe": recipe, "m": m, "predicted": est.step.value, "measured": row.measured_step,
            "gap_ms": (row.measured_step - est.step.value) / per * 1e3,
            "predicted_ms": est.step.value / per * 1e3, "measured_ms": row.measured_step / per * 1e3,
            "quantize_launches": q_f + q_b,
            "quantize_low_ms": (q_f * LAUNCH_RUNTIME[1] + q_b * LAUNCH_RUNTIME[0]) * 1e3,
            "quantize_high_ms": (q_f * HF_PER_KERNEL[0] + q_b * HF_PER_KERNEL[1]) * 1e3,
            "layer_launches": l_f + l_b, "layer_host_ms": (l_f * HF_PER_KERNEL[0] + l_b * HF_PER_KERNEL[1]) * 1e3,
            "layer_gpu_ms": (passes.t_forward + passes.t_backward) * 1e3, "fluid_ms": fluid_layer(passes, exchange, recipe, local, moe_layers) * 1e3, "source": row.source,
        })  # fmt: skip
    return results


def main() -> None:
    print(f"{'row':<58} {'n':>3} {'recipe':>8} {'m':>3} {'pred s':>7} {'meas s':>7} | per MoE layer and micro-batch, ms: "
          f"{'gap':>5} {'q':>4} {'q lo':>5} {'q hi':>5} | {'all':>4} {'host':>5} {'kern':>5} {'pred':>5} {'meas':>5} {'fluid':>5}")  # fmt: skip
    for r in report():
        print(f"{r['row']:<58} {r['local']:>3} {r['recipe']:>8} {r['m']:>3} {r['predicted']:>7.2f} {r['measured']:>7.2f} |"
              f"{'':>35}{r['gap_ms']:>5.2f} {r['quantize_launches']:>4} {r['quantize_low_ms']:>5.2f} {r['quantize_high_ms']:>5.2f} | "
              f"{r['layer_launches']:>4} {r['layer_host_ms']:>5.2f} {r['layer_gpu_ms']:>5.2f} {r['predicted_ms']:>5.2f} {r['measured_ms']:>5.2f} {r['fluid_ms']:>5.2f}")  # fmt: skip
    print("n: local experts; q: per-expert quantisation launches not timed, priced at the runtime's launch (lo) and the HF "
          "per-kernel host cost (hi); all: every launch of the layer in parcalc's kernel list, host: at the HF cost, kern: "
          "the kernels' GPU time (no exchange), pred / meas: the step per MoE layer and micro-batch")  # fmt: skip


if __name__ == "__main__":
    main()
