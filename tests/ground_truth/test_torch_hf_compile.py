"""Ground truth for `fit --framework hf --compile` (parcalc.core.timing.hf_compiled_kernels) with real PyTorch on the CPU:
transformers' own LlamaForCausalLM (GQA, tied embeddings) compiled whole with its loss, as the Trainer's torch_compile runs
it (torch.compile default mode around autocast(bfloat16) over fp32 weights), forward and backward through TorchInductor.

What is read is Inductor's scheduler after fusion, with the fusion rules of its CUDA backend: before the CPU's own
scheduler runs on each graph, a second one is built over the same IR nodes with TritonScheduling (torch/_inductor/
codegen/simd.py: SIMDScheduling.can_fuse, what decides Triton's fusion groups; no Triton and no GPU needed to decide them)
and thrown away after it is read. Every node it would generate a kernel for (not the extern GEMMs and SDPA, not the no-op
views) is taken with Inductor's own count of its HBM bytes (Scheduler.get_read_write_buffers_sizes: each buffer read once
and written once, the fused intermediates not at all). The lowering before the scheduler is the GPU's where it differs in
a way that matters here: rotate_half's cat as a pointwise cat (config.force_pointwise_cat: lowering.cat's choice on a GPU;
the CPU always makes a ConcatKernel). Left out: the CPU's copy of SDPA's logsumexp in the backward (the CUDA kernel needs
none). The CPU's own groups differ (its residual adds apart from the norms, the norms' bf16 gradient casts apart).

One layer's kernels are the difference between a 3-layer and a 2-layer model (the ends and the first layer cancel)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
import torch

from parcalc.core.timing.compute import LayerShard, compute_spec, end_passes, layer_passes

from .test_torch_recompute import llama_shape
from .tiny_llama import LlamaConfig

BATCH, SEQ, VOCAB = 2, 16, 256
C = LlamaConfig()  # hidden 64, 4 heads of 16, 2 KV heads, FFN 160
SPEC = compute_spec(None, "bf16", 1e12)
TOKENS = BATCH * SEQ


@dataclass(frozen=True)
class Generated:
    """One kernel Inductor generates: its bytes (read, written) and the ATen ops fused into it."""

    read: int
    written: int
    ops: frozenset[str]

    @property
    def bytes(self) -> int:
        return self.read + self.written

    def is_cpu_logsumexp_copy(self) -> bool:
        return any("flash_attention_for_cpu_backward" in op for op in self.ops)


@contextlib.contextmanager
def scheduled() -> Iterator[list[list[Generated]]]:
    """The kernels Inductor's Triton fusion rules make of each graph it compiles, in order (forward, then backward)."""
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode, Scheduler
    from torch._inductor.virtualized import V

    graphs: list[list[Generated]] = []
    init, create_backend = Scheduler.__init__, Scheduler.create_backend

    def triton(self: Scheduler, device: torch.device) -> object:
        V.graph.add_device_info(device)
        return TritonScheduling(self)

    def read(nodes: list) -> list[Generated]:
        dry = object.__new__(Scheduler)
        graph = V.graph
        removed = (set(graph.removed_buffers), set(graph.removed_operations), set(graph.inplaced_to_remove))
        Scheduler.create_backend = triton  # type: ignore[method-assign]
        try:
            init(dry, nodes)
            return [Generated(node.get_read_buffer_sizes(), node.get_write_buffer_sizes(),
                              frozenset(str(o.target).replace("aten.", "").replace(".default", "") for n in node.get_nodes()
                                        if n.node is not None for o in n.node.origins if o.op == "call_function"))
                    for node in dry.nodes if not isinstance(node, (ExternKernelSchedulerNode, NopKernelSchedulerNode))]  # fmt: skip
        finally:  # what the dry scheduler marked removed, undone for the CPU's own
            Scheduler.create_backend = create_backend  # type: ignore[method-assign]
            for names, kept in zip((graph.removed_buffers, graph.removed_operations, graph.inplaced_to_remove), removed, strict=True):
                names.clear()
                names.update(kept)

    def record(self: Scheduler, nodes: list) -> None:
        graphs.append(read(nodes))
        init(self, nodes)

    Scheduler.__init__ = record  # type: ignore[method-assign]
    try:
        yield graphs
    finally:
        Scheduler.__init__ = init  # type: ignore[method-assign]


def compiled_step(layers: int) -> list[list[Generated]]:
    """Inductor's kernels of one training step of a `layers`-layer LlamaForCausalLM, compiled whole with its loss."""
    import transformers
    from torch._functorch import config as functorch_config
    from torch._inductor import config

    from .hf_causal_lm import hf_causal_lm

    with hf_causal_lm(layers, C.hidden, C.heads, C.ffn, VOCAB, fake=False) as model:
        model.config.num_key_value_heads = C.kv_heads  # hf_causal_lm builds MHA; rebuild with Llama 3's GQA
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(model.config)
        ids = torch.randint(0, VOCAB, (BATCH, SEQ))

        def step(ids: torch.Tensor) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # accelerate wraps the forward in autocast, then compiles
                return model(input_ids=ids, labels=ids).loss

        torch._dynamo.reset()
        # scheduled afresh, not loaded from Inductor's or AOTAutograd's graph caches (the C++ kernels may come from the cache)
        with config.patch(force_pointwise_cat=True, fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False), \
                scheduled() as graphs:  # fmt: skip
            torch.compile(step)(ids).backward()
    return graphs


@pytest.fixture(scope="module")
def steps() -> dict[int, list[list[Generated]]]:
    return {layers: compiled_step(layers) for layers in (2, 3)}


def cuda_view(nodes: list[Generated]) -> tuple[int, int]:
    """(kernels, bytes) of a graph's generated kernels, the CPU's logsumexp copy left out."""
    kept = [n for n in nodes if not n.is_cpu_logsumexp_copy()]
    return len(kept), sum(n.bytes for n in kept)


def test_one_graph_each_way(steps: dict[int, list[list[Generated]]]) -> None:
    """The whole model, loss included, is one forward and one backward graph: no graph break in transformers' Llama."""
    assert [len(graphs) for graphs in steps.values()] == [2, 2]


def test_layer_kernels_equal_inductors(steps: dict[int, list[list[Generated]]]) -> None:
    """One layer (3 layers' kernels minus 2 layers'): 12 generated kernels forward, 351,040 B by Inductor's count (each
    residual add fused into the RMSNorm after it); 14 backward, 437,824 B (each norm's input gradient writes the bf16 copy
    the linear before it reads), 15 and 438,848 B with the CPU's copy of SDPA's logsumexp (4 heads x 2 x 16 fp32, read and
    written). parcalc's list: the same kernels, the same bytes. Eager transformers: 40 kernels and 643,072 B forward, 72 and
    1,121,792 B backward (tests/ground_truth/test_torch_hf_kernels.py)."""
    (fwd2, bwd2), (fwd3, bwd3) = steps[2], steps[3]
    f2, f3, b2, b3 = cuda_view(fwd2), cuda_view(fwd3), cuda_view(bwd2), cuda_view(bwd3)
    forward, backward = (f3[0] - f2[0], f3[1] - f2[1]), (b3[0] - b2[0], b3[1] - b2[1])
    assert (len(bwd3) - len(bwd2), sum(n.bytes for n in bwd3) - sum(n.bytes for n in bwd2)) == (15, 438_848)
    assert forward == (12, 351_040) and backward == (14, 437_824)
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True)
    passes = layer_passes(llama_shape(C), shard, SPEC)
    mine_f = [k for k in passes.forward if k.kind == "memory"]
    mine_b = [k for k in passes.backward if k.kind == "memory"]
    assert (len(mine_f), sum(k.bytes for k in mine_f)) == forward
    assert (len(mine_b), sum(k.bytes for k in mine_b)) == backward


def test_the_loss_never_writes_fp32_logits(steps: dict[int, list[list[Generated]]]) -> None:
    """ForCausalLMLoss traced in: the fp32 upcast of the logits fuses into the softmax's reductions. Forward, one kernel reads
    the bf16 logits (T x V x 2 B) and writes a max and a log-sum-exp per row (online softmax), one gathers each row's label
    logit and writes the mean's two scalars; no kernel writes a [T, V] tensor. Backward, one kernel reads the bf16 logits
    and writes their bf16 gradient. parcalc's loss kernels (hf_compiled_ends) match, except the gather, which Inductor
    counts as the whole logits (the worst case of an indirect read) and parcalc as one logit a row."""
    logits = TOKENS * VOCAB
    forward, backward = steps[2]
    loss = [n for n in forward if n.ops & {"amax", "gather"}]  # the softmax statistics, the label's log-probability
    assert [(n.read, n.written) for n in loss] == [(2 * logits, 2 * 4 * TOKENS), (2 * logits + 2 * 4 * TOKENS + 8 * BATCH * (SEQ + 1), 8)]
    # the logits' gradient: reads the bf16 logits (and a few values per row), writes a bf16 tensor of their size
    grads = [n for n in backward if n.written == 2 * logits and 2 * logits <= n.read < 2 * logits + 32 * TOKENS]
    assert len(grads) == 1 and "eq.Tensor" in grads[0].ops  # eq: the label's one-hot
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True)
    model = replace(llama_shape(C), vocab=VOCAB, tied_embeddings=True)
    mine = {k.key: k for k in end_passes(model, shard, SPEC).kernels}
    assert mine["loss.max_logsumexp"].bytes == loss[0].bytes
    assert mine["loss.nll_mean"].bytes == loss[1].bytes - 2 * logits + 2 * TOKENS - 8 * BATCH  # one logit a row; labels s, not s + 1
    assert mine["loss.logits_grad.bwd"].bytes == grads[0].bytes - 8 * BATCH  # the padded labels' extra column
