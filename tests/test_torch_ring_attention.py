"""PyTorch's ring attention as torchtitan runs it (parcalc.core.timing.torch_ring_attention): the compiled ring's exchanges
read from Inductor's code, the layer time against its pieces, and which stacks run it. The eager ring's exchanges and
element-wise bytes are measured in tests/ground_truth/test_torch_ring_attention_kernels.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parcalc.core.choices import Collective, Recompute
from parcalc.core.layout import Layout
from parcalc.core.timing.kernels import memory_op
from parcalc.core.timing.network import collective_time, placement
from parcalc.core.timing.torch_ring_attention import (
    ring_elements,
    ring_kv_bytes,
    ring_merge_bytes,
    torch_ring_layer_time,
    torch_rotate,
)
from parcalc.presets import load_framework, load_model

LOGS = Path(__file__).parent / "fixtures" / "torchtitan_cp"
# the logged block (tests/ground_truth/inductor_cp_programs.py): b 8, 8 heads of d 16 (K/V repeated from 2), 256 tokens a rank
LOGGED_KV = 2 * 8 * 8 * 256 * 16  # elements of one rank's K and V concatenated


def _graphs(precision: str, policy: str, cp: int) -> list[list[str]]:
    """The code lines of the logged forward and backward graphs (each `def call`)."""
    text = (LOGS / f"inductor_{precision}_{policy}_cp{cp}.log").read_text()
    lines = [re.sub(r"^\[__\w+\]\s*", "", line) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("def call(")]
    return [lines[a:b] for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]


def _collectives(graph: list[str]) -> list[tuple[str, int, int]]:
    """(op, output elements, kernels run between the call and its wait_tensor) of each c10d_functional collective of a graph;
    -1 kernels where an SDPA runs before the wait (the exchange would then hide behind it)."""
    found = []
    for i, line in enumerate(graph):
        m = re.search(r"(buf\d+) = torch\.ops\._c10d_functional\.(\w+)\.default\(", line)
        if not m:
            continue
        size = next(int(x.group(1)) for x in (re.match(rf"assert_size_stride\({m.group(1)}, \((\d+), \)", y) for y in graph[i + 1:]) if x)
        wait = next(j for j in range(i + 1, len(graph)) if graph[j].startswith(f"torch.ops._c10d_functional.wait_tensor.default({m.group(1)})"))
        between = graph[i + 1:wait]
        kernels = sum(x.startswith(("cpp_fused", "extern_kernels")) or "torch.ops.aten" in x or "torch.ops.higher_order" in x
                      for x in between if not x.startswith("assert_"))  # fmt: skip
        found.append((m.group(2), size, -1 if any("scaled_dot_product" in x for x in between) else kernels))
    return found


@pytest.mark.parametrize("precision", ["bf16", "float8"])
@pytest.mark.parametrize("policy", ["none", "full"])
@pytest.mark.parametrize("cp", [2, 4, 8])
def test_the_compiled_ring_waits_for_every_exchange_at_once(precision: str, policy: str, cp: int) -> None:
    """Inductor's code of torchtitan's block with the ring traced in (torch 2.13, the fixture logs): the forward all-gathers
    the rank's K/V concatenation once (cp x its elements out) and waits for it before any other kernel; the backward sends
    dK/dV (fp32, as many elements as the bf16 K/V) cp times, each waited for before the next SDPA (bf16: at once; float8
    under full checkpointing: after at most two kernels, a dQ accumulation, or an FP8 cast and one projection GEMM of the
    backward, which parcalc does not subtract), and all-gathers the K/V once more
    only under full checkpointing (the recomputed forward's gather, shared with the backward ring). So
    torch_ring_layer_time counts every compiled exchange whole."""
    forward, backward = (_collectives(g) for g in _graphs(precision, policy, cp))
    assert forward == [("all_gather_into_tensor", cp * LOGGED_KV, 0)]
    gathers = [c for c in backward if c[0] == "all_gather_into_tensor"]
    assert gathers == ([("all_gather_into_tensor", cp * LOGGED_KV, 0)] if policy == "full" else [])
    sends = [c for c in backward if c[0] == "all_to_all_single"]
    assert [c[:2] for c in sends] == [("all_to_all_single", LOGGED_KV)] * cp
    assert all(0 <= c[2] <= (2 if precision == "float8" and policy == "full" else 0) for c in sends), sends


def test_ring_kv_moves_the_repeated_heads() -> None:
    """Llama 3 8B (32 heads of 128, 8 K/V heads) at s 262,144 on cp 8: torchtitan repeats K/V to 32 heads before SDPA
    (model.py:201-202), so a rank's ring block is 2 x 32,768 x 32 x 128 x 2 B = 536,870,912 B, 4x its GQA K/V."""
    model = load_model("llama3-8b", ())
    layout = Layout(cp=8, cp_comm="all-gather")
    assert ring_elements(model, 1, 262144, layout) == 32768 * 32 * 128
    assert ring_kv_bytes(model, 1, 262144, layout, 2.0) == 536870912
    assert torch_rotate("all-gather") == "allgather" and torch_rotate("p2p") == "alltoall" and torch_rotate("a2a") == ""


def test_compiled_layer_time_is_its_exchanges_and_merges_whole() -> None:
    """Under torch.compile and full checkpointing, a layer's ring on cp 8 costs two all-gathers of cp x B_ring (forward and its
    replay), cp sends of the fp32 dK/dV (2 B_ring) and the fused merges, all exposed; eager hides the gathers behind
    step 0's attention and each dK/dV send but the last behind the next step's backward (module docstring)."""
    from parcalc.core.fit import Cluster
    from parcalc.presets import load_gpu, load_link

    model = load_model("llama3-8b", ())
    gpu = load_gpu("h100-sxm5-96gb-hbm2e", ())
    assert gpu.node is not None
    cluster = Cluster(gpus=8, gpus_per_node=8, peak=gpu.dtypes["bf16"].dense_peak.value, capacity=gpu.memory_capacity.value,
                      intra=load_link(gpu.node.intra_link, ()), inter=load_link(gpu.node.inter_link, ()), gpu=gpu, dtype="bf16",
                      framework=load_framework("torchtitan", ()))  # fmt: skip
    layout = Layout(cp=8, cp_comm="all-gather")
    kv = ring_kv_bytes(model, 1, 262144, layout, 2.0)
    group = placement(8, 1, 8)
    gather = collective_time(Collective.ALL_GATHER, 8 * kv, group, cluster.fabric).time
    grads = collective_time(Collective.POINT_TO_POINT, 2 * kv, group, cluster.fabric).time
    elements = ring_elements(model, 1, 262144, layout)
    merges = [ring_merge_bytes(8, r, 128, True, 2.0, 0.25) for r in range(8)]
    merge = (2 * memory_op("f", elements * max(f for f, _ in merges), cluster.spec).time
             + memory_op("b", elements * max(b for _, b in merges), cluster.spec).time)  # fmt: skip
    attention_f, attention_b = 0.25, 0.62  # a layer's attention at this shape is ~0.25 s forward (8 steps of ~31 ms)
    total, exposed = torch_ring_layer_time(model, 1, 262144, layout, 2.0, attention_f, attention_b, Recompute.FULL, True, 8,
                                           cluster.fabric, cluster.spec)  # fmt: skip
    assert exposed == pytest.approx(2 * gather + 8 * grads + merge, rel=1e-12)
    assert total == pytest.approx(exposed, rel=1e-12)
    _, eager = torch_ring_layer_time(model, 1, 262144, layout, 2.0, attention_f, attention_b, Recompute.FULL, False, 8,
                                     cluster.fabric, cluster.spec)  # fmt: skip
    eager_merges = [ring_merge_bytes(8, r, 128, False) for r in range(8)]
    eager_merge = (2 * memory_op("f", elements * max(f for f, _ in eager_merges), cluster.spec).time
                   + memory_op("b", elements * max(b for _, b in eager_merges), cluster.spec).time)  # fmt: skip
    assert eager == pytest.approx(grads + eager_merge, rel=1e-12)  # the gathers (~10 ms) hide behind a 31 ms step


def test_torchtitan_runs_torch_ring_and_megatron_transformer_engine() -> None:
    """presets/frameworks/torchtitan.yaml: context_parallel torch-ring (torchtitan 9dec370 train.py's context_parallel);
    Megatron-LM's profile keeps Transformer Engine's (the default)."""
    assert load_framework("torchtitan", ()).context_parallel == "torch-ring"
    assert load_framework("megatron", ()).context_parallel == "transformer-engine"
