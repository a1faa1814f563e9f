"""Is the MoE family's excess the host? The dispatcher's sync under Megatron-Core's 1F1B EP overlap (issue #32): a
report, not a model. Nothing here changes a prediction.

    python benchmarks/moe_host_overlap.py

The hypothesis: Megatron-LM's MoE dispatchers copy the tokens per expert to the host and wait for them in every MoE
layer's forward, so the GPU's queue is empty there, and every launch after the sync (the expert GEMMs one per local
expert, their FP8 casts, the permutations, the combine, the next layer's attention...) keeps the GPU waiting until the
host has caught up; parcalc's expert_host_exposed counts only the expert GEMMs' loop against the experts' own time.

What the sources say about the queue at the sync. Every MoE run of the family (the four rows of tests/modern_cases.py
CASES with categories "moe") ran with --overlap-moe-expert-parallel-comm (ep_overlap "1f1b"), i.e. Megatron-Core's
combined 1F1B schedule, whose host issues the nodes of one micro-batch's forward layer and another's backward layer in
this order (Megatron-LM @2edffadb megatron/core/models/common/model_chunk_schedule_plan.py,
TransformerLayerSchedulePlan.run, lines 214-251):

    combine_bwd(b) | attn_fwd(f) | mlp_bwd(b) | dispatch_fwd(f) | mlp_bwd_dw(b) | dispatch_bwd(b) | mlp_fwd(f)
    | combine_fwd(f) | attn_bwd(b), attn_bwd_dw(b)

attn_fwd holds the attention, the pre-MLP norm, the router and the dispatcher's preprocess and permutation
(megatron/core/models/gpt/fine_grained_callables.py @2edffadb submodule_attn_forward, lines 445-520). The all-to-all
dispatcher copies the counts to the host on a side stream at `before_permutation_1` (the side stream first waits for
the compute stream: token_dispatcher.py @2edffadb _maybe_dtoh_and_synchronize, lines 867-906) and waits for that copy
(`self.d2h_event.synchronize()`) at `before_ep_alltoall`, inside dispatch_fwd (token_dispatch, lines 651-678; the sync
point is `before_ep_alltoall` whenever EP > 1, preprocess lines 564-566). Between the two the host has issued the other
micro-batch's mlp_bwd, which the event does not wait for. So at the sync the GPU still holds that expert backward (and
the permutation): the queue is not empty, the host resumes with that much GPU work ahead of it, and the sync only keeps
it from running more than about one layer ahead. The host then matters only where it issues a layer step (a forward
and a backward layer) slower than the GPU runs it.

What this script does, per row: parcalc's kernel list of the MoE layer cut into those nodes (each per-expert GEMM and
cast once per local expert, a per-tensor current-scaling cast as its three kernels: benchmarks/moe_host_gap.py
layer_launches), the host's time per launch at the measured prices (the HF profile's host time per kernel, forward
30.56 and backward 28.76 us, presets/frameworks/hf.yaml, from the H200 trace; the same trace's host work per traced
launch, profiler removed, is 34.54 / 1.30 = 26.6 us forward and 34.40 / 1.54 = 22.3 us backward), and a steady-state
simulation of the host and the compute stream in that issue order with the sync waiting for attn_fwd (`overlap_ms`:
the GPU's idle time per layer step; the exchanges' exposure is parcalc's own, not re-timed here). Beside it the same
layer without the overlap (the known-gap FP8 row's recipe: the forward's sync empties the queue, the backward runs
ahead), and the factor `k` by which every launch would have to cost more (or the list be longer) for the host to
explain the row's excess.

What it gives (session 20, with the all-to-all dispatcher's sort): at the measured prices the host issues a layer step
of the family's rows in 1.5-4.8 ms against 4.9-14.4 ms of GPU kernels, and the simulated wait is 0 on all five
overlapped rows (1.06 ms a layer and micro-batch on the known-gap FP8 row without overlap, whose gap is 3.67 ms). The
excess per layer step (0.09-2.28 ms) would need every launch of the list at k = 2.8 (Qwen3-30B BF16), 3.3 (Qwen3-235B
FP8), 4.0-5.6 (DeepSeek-V3) times its measured price; one k for all is a fit to the rows, not a measurement: at k = 3 the
family would read +8.6 / +9.2 / +0.9 / +9.1 / -6.8 % (mean 6.9 %), the host binding first where a layer step has the
least GPU work. That is the shape the hypothesis predicts, but the k it needs is what a count of Megatron-Core's real
launches per layer (about 3x parcalc's fused list) and a price per launch of its Python and Transformer Engine's C++
would have to give; neither is measured (docs/step-time.md), so nothing is landed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))  # this checkout's parcalc, run as a script from anywhere

import modern_cases
from moe_host_gap import HF_PER_KERNEL, KERNELS_PER_EXPERT_QUANTIZE, recipe_of

from parcalc.core.fit import estimate
from parcalc.core.timing.compute import layer_passes
from parcalc.core.timing.moe import layer_exchange, routed_rows, routed_tokens
from parcalc.core.timing.step import _layer_shard, layer_pieces

# The H200 trace's host work per traced launch (parcalc.core.calibrate.trace.summarise of trace-llama1b-b4-s4096.json.gz:
# forward 903 launches at 34.54 us, backward 1,823 at 34.40 us, profiled) less the profiler's share
# (parcalc.core.timing.host.PROFILED_HOST_SLOWDOWN: 1.30, 1.54)
TRACE_PER_LAUNCH = (34.54e-6 / 1.30, 34.40e-6 / 1.54)
# Megatron-LM @2edffadb model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run: the host's issue order of one layer
# step under --overlap-moe-expert-parallel-comm; "sync" is dispatch_fwd's d2h_event.synchronize(), which waits for the
# compute stream up to the end of attn_fwd (the side stream's copy was queued behind it at before_permutation_1)
OVERLAP_ORDER = ("combine_b", "attn_f", "mlp_b", "sync", "mlp_b_dw", "mlp_f", "combine_f", "attn_b")
# the same layer without the overlap: the forward layer (its sync after attn_f), then, after all forward layers, the
# backward layer, which has no sync (the all-to-all's backward reuses the host splits; HybridEP / DeepEP likewise)
PLAIN_FORWARD = ("attn_f", "sync", "mlp_f", "combine_f")
PLAIN_BACKWARD = ("combine_b", "mlp_b", "mlp_b_dw", "attn_b")


class Node(NamedTuple):
    launches: int
    gpu: float  # s on the compute stream


def launches_of(kernel: Any, recipe: str, local: int) -> int:
    """Launches of one kernel of parcalc's list (benchmarks/moe_host_gap.layer_launches, one kernel at a time)."""
    cast = kernel.key.endswith(".cast")
    per_expert = kernel.key.startswith("moe.experts.fc") and not (cast and recipe == "delayed")
    return (KERNELS_PER_EXPERT_QUANTIZE["current"] if cast and recipe == "current" else 1) * (local if per_expert else 1)


def node_of(key: str, backward: bool) -> str:
    """The schedule node a kernel of an MoE layer belongs to (fine_grained_callables.py @2edffadb: attn = attention, pre-MLP
    norm, shared experts, router, permutation; mlp = the routed experts with the all-to-all dispatcher's sort and unsort
    (moe_layer.py routed_experts_compute: dispatch_postprocess, experts, combine_preprocess); combine = the un-permutation
    and the residual)."""
    if key.startswith(("moe.experts", "moe.sort", "moe.unsort")):  # routed_experts_compute: sort, experts, unsort
        if backward:
            return "mlp_b_dw" if ".wgrad" in key else "mlp_b"
        return "mlp_f"
    if key.startswith(("moe.unpermute", "residual2")):
        return "combine_b" if backward else "combine_f"
    return "attn_b" if backward else "attn_f"


def nodes(passes: Any, recipe: str, local: int, waits: dict[str, float]) -> dict[str, Node]:
    """The layer's nodes: launches and compute-stream seconds, `waits` (s the compute stream waits in a node for the
    exchanges and the recomputation parcalc times, by node) added to their GPU time."""
    out: dict[str, list[float]] = {name: [0, seconds] for name, seconds in waits.items()}
    for backward, kernels in ((False, passes.forward), (True, passes.backward)):
        for k in kernels:
            node = out.setdefault(node_of(k.key, backward), [0, 0.0])
            node[0] += launches_of(k, recipe, local)
            node[1] += k.time
    return {name: Node(int(n), g) for name, (n, g) in out.items()}


def host_of(name: str, node: Node, price: tuple[float, float]) -> float:
    return node.launches * (price[1] if name.endswith(("_b", "_b_dw")) else price[0])


def issue(layer: dict[str, Node], order: Any, price: tuple[float, float], host: float, gpu: float) -> tuple[float, float]:
    """The host and GPU clocks after one layer's nodes in `order`: the host issues each node in its host time, the GPU runs
    it no sooner than it is issued (fluid within a node); at "sync" the host waits until the GPU has run attn_f."""
    attn_done = 0.0
    for name in order:
        if name == "sync":
            host = max(host, attn_done)
            continue
        node = layer.get(name, Node(0, 0.0))
        host += host_of(name, node, price)
        gpu = max(gpu + node.gpu, host)
        if name == "attn_f":
            attn_done = gpu
    return host, gpu


def overlap_idle(layer: dict[str, Node], price: tuple[float, float], steps: int = 40) -> float:
    """Seconds per layer step the compute stream waits for the host in the combined 1F1B schedule's issue order, in the
    steady state: the host issues each node in its host time, the GPU runs a node no sooner than the host has issued it
    (fluid within a node), the host waits at the sync until the GPU has run attn_fwd."""
    host = gpu = 0.0
    marks = []
    for _ in range(steps):
        host, gpu = issue(layer, OVERLAP_ORDER, price, host, gpu)
        marks.append(gpu)
    period = (marks[-1] - marks[steps // 4]) / (steps - 1 - steps // 4)
    return max(period - sum(n.gpu for n in layer.values()), 0.0)


def plain_idle(layer: dict[str, Node], price: tuple[float, float], layers: int) -> float:
    """The same per layer and micro-batch without the overlap: every forward layer's sync waits for its attn_fwd; the
    backward layers follow without a sync, the host running ahead."""
    host = gpu = 0.0
    for _ in range(layers):
        host, gpu = issue(layer, PLAIN_FORWARD, price, host, gpu)
    for _ in range(layers):
        host, gpu = issue(layer, PLAIN_BACKWARD, price, host, gpu)
    return max(gpu / layers - sum(n.gpu for n in layer.values()), 0.0)


def price_factor(idle: Any, target: float) -> float:
    """The factor k on both per-launch prices at which the simulated idle time per layer step reaches `target` seconds
    (bisection; idle grows with k)."""
    lo, hi = 0.0, 1.0
    while idle(hi) < target and hi < 1e3:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if idle(mid) < target else (lo, mid)
    return hi


def report() -> list[dict[str, Any]]:
    results = []
    for case in modern_cases.CASES + modern_cases.KNOWN_GAPS:
        if "moe" not in case.run.categories:
            continue
        model, config, training, cluster = modern_cases.inputs(case)
        est = estimate(model, config, training, cluster)
        published = training.global_batch * training.seq_len / (modern_cases.published_tokens_per_gpu(case, model, training.seq_len)
                                                                 * case.run.gpus)  # fmt: skip
        layout, experts = config.layout, config.experts()
        tokens = routed_tokens(config.micro_batch, training.seq_len, layout.tp, layout.sequence_parallel)
        _, local = routed_rows(model, tokens, experts)
        recipe = recipe_of(training)
        passes = layer_passes(model, _layer_shard(model, layout, config.micro_batch, training, cluster), cluster.spec, experts)
        pieces = layer_pieces(model, layout, config.micro_batch, config.recompute, training, cluster, experts=experts)
        overlapped = config.ep_overlap == "1f1b"
        exchange = layer_exchange(model, tokens, training.precision.activation_bytes,
                                  recipe != "bf16" and cluster.framework.fp8_dispatch, experts, cluster.fabric, cluster.gpus_per_node)
        # what parcalc exposes of the exchanges: beside the partner, the expert forward waits for the dispatch; alone, the
        # expert forward waits for the dispatch, the un-permute for the combine, and the backward likewise
        if overlapped:
            waits = {"mlp_f": pieces.ep_paired, "attn_b": pieces.r_moe}
        else:
            waits = {"mlp_f": exchange.forward / 2, "combine_f": exchange.forward / 2, "mlp_b": exchange.backward / 2,
                     "attn_b": exchange.backward / 2 + pieces.r_moe}
        layer = nodes(passes, recipe, local, waits)
        steps = config.micro_batches(training) * model.moe_layers_in(0, model.layers) / layout.pp  # layer steps per step, slowest stage
        gap = (published - est.step.value) / steps
        gpu = passes.t_forward + passes.t_backward
        host = sum(host_of(name, n, HF_PER_KERNEL) for name, n in layer.items())
        if overlapped:
            def idle(k: float, layer: dict[str, Node] = layer) -> float:
                return overlap_idle(layer, (HF_PER_KERNEL[0] * k, HF_PER_KERNEL[1] * k))
        else:
            moe_layers = model.moe_layers_in(0, model.layers)

            def idle(k: float, layer: dict[str, Node] = layer, moe_layers: int = moe_layers) -> float:
                return plain_idle(layer, (HF_PER_KERNEL[0] * k, HF_PER_KERNEL[1] * k), moe_layers)
        results.append({
            "row": case.key, "overlap": config.ep_overlap, "recipe": recipe, "local": local,
            "launches": sum(n.launches for n in layer.values()), "host_ms": host * 1e3, "gpu_ms": gpu * 1e3,
            "step_ms": sum(n.gpu for n in layer.values()) * 1e3,
            "gap_ms": gap * 1e3, "error": published and est.step.value and (published / est.step.value - 1),
            "idle_hf_ms": idle(1.0) * 1e3, "idle_trace_ms": (overlap_idle(layer, TRACE_PER_LAUNCH) if overlapped else
                                                             plain_idle(layer, TRACE_PER_LAUNCH, model.moe_layers_in(0, model.layers))) * 1e3,
            "k": price_factor(idle, gap) if gap > 0 else 0.0,
            "known_gap": case in modern_cases.KNOWN_GAPS, "idle": idle, "steps": steps, "predicted": est.step.value,
        })  # fmt: skip
    return results


def main() -> None:
    rows = report()
    print(f"{'row':<58} {'overlap':>7} {'rec':>8} {'n':>2} {'launch':>6} | per MoE layer step, ms: {'host':>5} {'gpu':>5} "
          f"{'pred':>5} {'gap':>5} {'idle':>5} {'idle2':>5} {'k':>5}")  # fmt: skip
    for r in rows:
        mark = " (known gap)" if r["known_gap"] else ""
        print(f"{r['row'] + mark:<58} {r['overlap']:>7} {r['recipe']:>8} {r['local']:>2} {r['launches']:>6} | {'':>23}"
              f"{r['host_ms']:>5.2f} {r['gpu_ms']:>5.2f} {r['step_ms']:>5.2f} {r['gap_ms']:>5.2f} {r['idle_hf_ms']:>5.2f} "
              f"{r['idle_trace_ms']:>5.2f} {r['k']:>5.2f}")  # fmt: skip
    print("n: local experts; launch: launches of one MoE layer (forward + backward) from parcalc's kernel list, per-expert "
          "kernels once per local expert; host: their host time at the HF per-kernel price; gpu: the layer's kernels; pred: "
          "parcalc's layer step (kernels, recomputation, exposed exchanges); gap: the published step's excess per layer step; "
          "idle / idle2: the simulated wait for the host at the HF price / at the trace's price per launch; k: the factor on "
          "the price at which the wait would equal the gap")  # fmt: skip
    print("the family's rows with every launch at k times the HF price (a fit to the rows, not landed):")
    for k in (2.0, 2.78, 3.0, 3.31, 3.96):
        errors = family_at(rows, k)
        print(f"  k = {k:.2f}: " + " ".join(f"{e * 100:+6.1f} %" for e in errors) + f"   mean |error| {mean_abs(errors) * 100:.1f} %")


def family_at(rows: list[dict[str, Any]], k: float) -> list[float]:
    """The family rows' errors (predicted over published throughput, minus 1) with the simulated wait at k times the price
    added to every layer step."""
    return [(1 + r["error"]) * r["predicted"] / (r["predicted"] + r["idle"](k) * r["steps"]) - 1 for r in rows if not r["known_gap"]]


def mean_abs(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors)

if __name__ == "__main__":
    main()
