"""Where the small-expert MoE rows' gap lives: the same Qwen3-30B-A3B layouts dropless and token-dropping (issues #31,
#32): a report, not a model. Nothing here changes a prediction.

    python benchmarks/moe_dropless_pairs.py

Megatron-Bridge's performance archive (tests/published_blackwell_amd_runs.py MBRIDGE, @067f987df03b) prints Qwen3-30B-A3B
on the same layouts twice: token-dropping in the 25.09 container ('Qwen3_30B_a3B (tokendrop)') and dropless from 25.11
('all benchmarks are token-dropless'), routing force-balanced in both. The pair isolates what dropless adds:

- **The same expert work.** The 25.09 recipe (Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py) applies
  `apply_moe_token_drop` to Qwen3-30B-A3B on every GPU: capacity factor 1.0, `moe_pad_expert_input_to_capacity`
  (src/megatron/bridge/training/utils/moe_token_drop.py). Force balancing routes by random logits (Megatron-Core
  router.py `apply_random_logits`), so every expert gets T k / E copies on average and capacity 1.0 pads or drops the
  few percent an expert is off it: the GEMM rows are those of dropless routing within about 1 %.
- **No host sync.** With `drop_and_pad` the all-to-all dispatcher computes the splits from the capacity on the host and
  never waits for the GPU (Megatron-Core token_dispatcher.py @core_v0.14.0 and @core_v0.15.0: `cuda_sync_point` stays
  'no_sync', `_maybe_dtoh_and_synchronize` returns before its `d2h_event.synchronize()`); dropless, it copies the
  counts to the host and waits for them once per MoE layer's forward ('before_ep_alltoall' with EP > 1).
- **Graphs.** The 25.09 B200 / GB200 rows captured each whole transformer layer in a CUDA graph (perf matrix
  qwen3_30b_a3b_llm_pretrain.yaml `cuda_graphs: true` -> `enable_cuda_graph`, Megatron-Core's CudaGraphManager with
  cuda_graph_scope 'full': the MoE too, its shapes static under drop_and_pad), so their host issues no kernel one by one:
  they are timed here without parcalc's host loop of expert GEMMs (Framework.expert_gemm_host = 0). The 25.09 H100 row
  ran eager (`cuda_graphs: false`), as did the 25.11 H100 FP8 recipe (no cuda_graph_impl, Megatron-Bridge v0.2.0
  scripts/performance/configs/qwen3/workload_base_configs.py); the 25.11 Blackwell rows captured only the router and
  the dispatcher's preprocess (`cuda_graph_scope=["moe_router", "moe_preprocess"]`).

What it gives (session 23), predicted over published tokens per second per GPU, and the step per MoE layer and
micro-batch measured and predicted:
- H100, FP8 current scaling, 16 GPUs, PP 2, VP 24, EP 8, MBS 2 (printed identically in 25.09 and 25.11; the v0.2.0
  recipe reads VP 12, MBS 1 and moe_a2a_overlap, so the 25.11 run's exact recipe is not settled): token-dropping
  10,494 tok/s, parcalc +25 %; dropless 5,275, parcalc +149 %. Both eager, the same GPU work: dropless ran 1.99x slower.
- B200, MXFP8, 8 GPUs, EP 8, MBS 1: token-dropping (whole layers graphed) 18,066, parcalc +96 % without the host loop;
  dropless (25.11) 9,299, parcalc +154 %: 1.94x slower.
- GB200, MXFP8, 8 GPUs, EP 8, MBS 4: token-dropping (all-to-all, graphed) 22,775, parcalc +69 %; dropless (HybridEP)
  23,766, parcalc +73 %: no slower.
So two things are missing, not one: (1) on the H100, where the same layout eager without the sync comes out at +25 %,
the per-layer sync of the dropless dispatcher doubles the step: the host cannot run ahead of the
GPU past it, and with a host time per layer comparable to the GPU's the two add instead of overlapping (a step of
max(H, G) becomes about H + G, parcalc.core.timing.host's fluid model cut at the sync); parcalc charges only the expert
GEMMs' host loop against the experts' own GPU time (moe.expert_host_exposed), 1.24 ms a layer and micro-batch on the
B200 row, where the pair shows 4.46 ms; and parcalc's host model with parcalc's launch list at the HF price (149 + 182
launches, 9.79 ms of host against 11.33 ms of GPU a layer and micro-batch on the H100) gives the cut 1.10x the step
run ahead (`sync_cut_ratio`), not 1.99x. (2) Without the sync the layer is still slower than parcalc's beyond the dense
rows of the same GPUs: graphed on Blackwell, with no host in the way, 1.7-2.0x parcalc's GPU time (+69 / +96 %) against
+18 .. +32 % for the dense Blackwell rows; eager on the H100 +25 % against -13.5 .. +2.0 % for the dense H100 FP8 rows
(tests/test_published_blackwell_amd.py): a part of the small-expert layer (per-expert kernels of a few microseconds,
each with its own launch and tail, the all-to-all at 17-67 MB a peer) that parcalc's kernel list does not carry.
Neither lands: (1) needs the host's time per MoE layer, which no measurement gives (read off the pair it would be a fit
to the rows), (2) a per-kernel floor and an all-to-all rate measured at these sizes.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

import moe_host_gap as gap
from published_blackwell_amd_runs import RUNS
from test_published_blackwell_amd import fit_inputs

from parcalc.core.fit import estimate
from parcalc.core.timing.compute import layer_passes
from parcalc.core.timing.host import Phase, host_exposed
from parcalc.core.timing.moe import layer_exchange, routed_rows, routed_tokens
from parcalc.core.timing.step import _layer_shard

ARCHIVE = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md @067f987df03b, sections '## 25.09 NeMo "
           "Container' and '## 25.11 NeMo Container'")  # fmt: skip
MOE_LAYERS = 48  # Qwen3-30B-A3B: every layer an MoE layer


class Row(NamedTuple):
    label: str
    run: Any  # a BlackwellAmdRun with the row's layout
    tokens_per_s_per_gpu: float
    quote: str  # the archive's row as printed
    dropless: bool
    graphed_layers: bool  # the recipe captured whole transformer layers in CUDA graphs: no host loop of expert GEMMs


def _base(key: str) -> Any:
    return next(r for r in RUNS if r.key == key)


_B200 = _base("mb2511-b200-qwen3-30b-a3b-8gpu-mxfp8")
_GB200 = _base("mb2511-gb200-qwen3-30b-a3b-8gpu-mxfp8")
# the printed H100 layout of both releases: 16 GPUs, FP8-CS, MBS 2, PP 2, VP 24, EP 8, the all-to-all dispatcher
_H100 = _B200._replace(key="h100-qwen3-30b-a3b-16gpu-fp8cs", system="DGX-H100", gpu="h100-sxm5", gpus=16, precision="fp8-cs",
                       micro_batch=2, pp=2, vp=24)  # fmt: skip

ROWS = (
    Row("H100 FP8-CS MBS 2, token-drop (25.09)", _H100, 10494,
        "| Qwen3_30B_a3B (tokendrop) | 16 | 512 | 2 | 4096 | 0 | 1 | 2 | 1 | 24 | 8 | 32 | 10494 | 241 |", False, False),
    Row("H100 FP8-CS MBS 2, dropless (25.11)", _H100, 5275,
        "| Qwen3_30B_a3B | 16 | FP8-CS | 512 | 2 | 4096 | 0 | 1 | 2 | 1 | 24 | 8 | 32 | 5275 | 121 |", True, False),
    Row("B200 MXFP8 MBS 1, token-drop (25.09)", _B200, 18066,
        "| Qwen3_30B_a3B (tokendrop) | 8 | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 64 | 18066 | 416 |", False, True),
    Row("B200 MXFP8 MBS 1, dropless (25.11)", _B200, 9299, _B200.quote, True, False),
    Row("GB200 MXFP8 MBS 4, token-drop (25.09)", _GB200._replace(dispatcher="alltoall"), 22775,
        "| Qwen3_30B_a3B (tokendrop) | 8 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 16 | 22775 (23723) | 524 (546) |", False, True),
    Row("GB200 MXFP8 MBS 4, dropless (25.11)", _GB200, 23766, _GB200.quote, True, False),
)  # fmt: skip
# (token-drop, dropless) pairs of ROWS: the same GPU and printed layout
PAIRS = ((0, 1), (2, 3), (4, 5))


def measured_step(row: Row) -> float:
    """Seconds per step from the printed rate: global batch x sequence / (tokens per second per GPU x GPUs)."""
    run = row.run
    return run.global_batch * run.seq_len / (row.tokens_per_s_per_gpu * run.gpus)


def layer_micro_batches(row: Row) -> int:
    """MoE layers times micro-batches one GPU runs per step (the layers of its pipeline stage)."""
    run = row.run
    micro_batches = run.global_batch // (run.gpus // (run.tp * run.pp * run.cp) * run.micro_batch)
    return micro_batches * MOE_LAYERS // run.pp


def predicted_step(row: Row) -> float:
    model, config, training, cluster = fit_inputs(row.run)
    if row.graphed_layers:  # the whole layer replays as a graph: no expert GEMM is issued from the host's loop
        cluster = replace(cluster, framework=replace(cluster.framework, expert_gemm_host=0.0))
    return estimate(model, config, training, cluster).step.value


def sync_cut_ratio(row: Row) -> float:
    """What parcalc's own host model gives the sync: one MoE layer and micro-batch with every launch of parcalc's kernel
    list at the HF per-kernel host cost (benchmarks/moe_host_gap.py), cut at each layer's dispatcher sync
    (moe_host_gap.fluid_layer), over the same layers run ahead without the cut (the forward and backward of the
    stage's layers one fluid segment each way); exchanges exposed, as without EP overlap."""
    model, config, training, cluster = fit_inputs(row.run)
    layout, experts = config.layout, config.experts()
    tokens = routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel)
    _, local = routed_rows(model, tokens, experts)
    recipe = gap.recipe_of(training)
    passes = layer_passes(
        model, _layer_shard(model, layout, config.micro_batch, training, cluster), cluster.spec, experts
    )
    exchange = layer_exchange(model, tokens, 2.0, False, experts, cluster.fabric, cluster.gpus_per_node)
    layers = MOE_LAYERS // row.run.pp
    launches_f, launches_b = gap.layer_launches(passes, recipe, local)
    g_f, g_b = passes.t_forward + exchange.forward, passes.t_backward + exchange.backward
    ahead = [Phase(launches_f * gap.HF_PER_KERNEL[0], g_f)] * layers + [
        Phase(launches_b * gap.HF_PER_KERNEL[1], g_b)
    ] * layers
    no_cut = g_f + g_b + host_exposed(ahead) / layers
    return gap.fluid_layer(passes, exchange, recipe, local, layers) / no_cut


def report() -> list[dict[str, Any]]:
    out = []
    for row in ROWS:
        measured, predicted, per = measured_step(row), predicted_step(row), layer_micro_batches(row)
        out.append({"row": row.label, "measured_s": measured, "predicted_s": predicted, "error": measured / predicted - 1,
                    "measured_ms": measured / per * 1e3, "predicted_ms": predicted / per * 1e3})  # fmt: skip
    return out


def main() -> None:
    results = report()
    print(
        f"{'row':<40} {'meas s':>7} {'pred s':>7} {'error':>7} | per MoE layer and micro-batch: {'meas ms':>7} {'pred ms':>7}"
    )
    for r in results:
        print(f"{r['row']:<40} {r['measured_s']:7.2f} {r['predicted_s']:7.2f} {r['error']:+7.1%} |{'':>31}"
              f"{r['measured_ms']:7.2f} {r['predicted_ms']:7.2f}")  # fmt: skip
    for drop, dropless in PAIRS:
        print(
            f"{ROWS[dropless].label} over {ROWS[drop].label}: {results[dropless]['measured_s'] / results[drop]['measured_s']:.2f}x"
        )
    # the H100 pair only: both eager, so the host's model applies to both rows (the B200 token-drop row replayed graphs)
    h100 = ROWS[PAIRS[0][1]]
    print(
        f"{h100.label}: parcalc's launches at the HF price, cut at the sync: {sync_cut_ratio(h100):.2f}x the step run ahead"
    )
    print(f"error: predicted over published tokens per second per GPU - 1; source: {ARCHIVE}")


if __name__ == "__main__":
    main()
