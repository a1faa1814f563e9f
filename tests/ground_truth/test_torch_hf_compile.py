"""Ground truth for `fit --framework hf --compile` (parcalc.core.timing.hf_compiled_kernels) with real PyTorch on the CPU:
transformers' own LlamaForCausalLM (GQA, tied embeddings) compiled whole with its loss, as the Trainer's torch_compile runs
it (torch.compile default mode around autocast(bfloat16) over fp32 weights), forward and backward through TorchInductor.
Inductor's scheduler is read after fusion, before code generation: every node it generates a kernel for (not the extern
GEMMs and SDPA, not the no-op views) and its own count of the node's HBM bytes (Scheduler.get_read_write_buffers_sizes:
each buffer read once and written once, the fused intermediates not at all).

One layer's kernels are the difference between a 3-layer and a 2-layer model (the ends and the first layer cancel).
Where Inductor's CUDA backend groups differently from the CPU's, the CPU's numbers are brought to CUDA's (the module
docstring of hf_compiled_kernels, with sources): rotate_half's cat is lowered as a pointwise cat
(config.force_pointwise_cat, what lowering.cat chooses on a GPU); the CPU's residual adds, which Triton fuses into the
RMSNorm reduction after them, are merged into it here (one kernel fewer each, and the norm's re-read of the sum gone); the
CPU's own copy of SDPA's logsumexp in the backward is left out (the CUDA kernel needs none)."""

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

    def is_residual_add(self) -> bool:  # x + sublayer(x) alone: what Triton fuses into the next RMSNorm
        return self.ops <= {"add.Tensor", "reshape", "view"} and "add.Tensor" in self.ops

    def is_cpu_logsumexp_copy(self) -> bool:
        return any("flash_attention_for_cpu_backward" in op for op in self.ops)


@contextlib.contextmanager
def scheduled() -> Iterator[list[list[Generated]]]:
    """Inductor's generated kernels of each graph it compiles, in order (forward, then backward)."""
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode, Scheduler

    graphs: list[list[Generated]] = []
    codegen = Scheduler.codegen

    def record(self: Scheduler) -> None:
        nodes = []
        for node in self.nodes:
            if isinstance(node, (ExternKernelSchedulerNode, NopKernelSchedulerNode)):
                continue
            ops = frozenset(str(o.target).replace("aten.", "").replace(".default", "") for n in node.get_nodes() if n.node is not None
                            for o in n.node.origins if o.op == "call_function")  # fmt: skip
            nodes.append(Generated(node.get_read_buffer_sizes(), node.get_write_buffer_sizes(), ops))
        graphs.append(nodes)
        return codegen(self)

    Scheduler.codegen = record  # type: ignore[method-assign]
    try:
        yield graphs
    finally:
        Scheduler.codegen = codegen  # type: ignore[method-assign]


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
    """(kernels, bytes) of a graph's generated kernels as Triton groups them (the module docstring)."""
    kept = [n for n in nodes if not n.is_cpu_logsumexp_copy()]
    adds = [n for n in kept if n.is_residual_add()]
    return len(kept) - len(adds), sum(n.bytes for n in kept) - sum(n.written for n in adds)


def test_one_graph_each_way(steps: dict[int, list[list[Generated]]]) -> None:
    """The whole model, loss included, is one forward and one backward graph: no graph break in transformers' Llama."""
    assert [len(graphs) for graphs in steps.values()] == [2, 2]


def test_layer_kernels_equal_inductors(steps: dict[int, list[list[Generated]]]) -> None:
    """One layer (3 layers' kernels minus 2 layers'): 14 generated kernels forward on the CPU, 367,424 B by Inductor's count,
    12 as Triton fuses the two residual adds into the norms, 351,040 B (the norm's re-read of each fp32 sum gone: 2 x 8,192 B,
    32 tokens x hidden 64); 17 backward, 455,232 B, 16 without the CPU's copy of SDPA's logsumexp (4 heads x 2 x 16 fp32,
    read and written), 454,208 B. parcalc's list: the same kernels, the same bytes (eager transformers: 40 kernels and
    643,072 B forward, 72 and 1,121,792 B backward, tests/ground_truth/test_torch_hf_kernels.py)."""
    (fwd2, bwd2), (fwd3, bwd3) = steps[2], steps[3]
    f2, f3, b2, b3 = cuda_view(fwd2), cuda_view(fwd3), cuda_view(bwd2), cuda_view(bwd3)
    forward, backward = (f3[0] - f2[0], f3[1] - f2[1]), (b3[0] - b2[0], b3[1] - b2[1])
    assert len(fwd3) - len(fwd2) == 14 and len(bwd3) - len(bwd2) == 17  # the CPU's own groups
    assert sum(n.bytes for n in fwd3) - sum(n.bytes for n in fwd2) == 367_424
    assert sum(n.bytes for n in bwd3) - sum(n.bytes for n in bwd2) == 455_232
    assert forward[1] == 351_040 and backward[1] == 454_208
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True)
    passes = layer_passes(llama_shape(C), shard, SPEC)
    mine_f = [k for k in passes.forward if k.kind == "memory"]
    mine_b = [k for k in passes.backward if k.kind == "memory"]
    assert (len(mine_f), len(mine_b)) == (forward[0], backward[0]) == (12, 16)
    assert sum(k.bytes for k in mine_f) == forward[1]
    assert sum(k.bytes for k in mine_b) == backward[1]


def test_the_loss_never_writes_fp32_logits(steps: dict[int, list[list[Generated]]]) -> None:
    """ForCausalLMLoss traced in: the fp32 upcast of the logits fuses into the softmax's reductions. Forward, one online-softmax
    kernel reads the bf16 logits (T x V x 2 B) and writes a max and a sum per row, and no kernel writes a [T, V] tensor;
    backward, one kernel writes the bf16 gradient of the logits. parcalc's loss kernels say the same (hf_compiled_ends)."""
    logits = TOKENS * VOCAB
    forward, backward = steps[2]
    loss = [n for n in forward if n.ops & {"amax", "gather"}]  # the softmax statistics, the label's log-probability
    assert len(loss) == 2 and max(n.written for n in loss) <= TOKENS * 4 * 2  # per row at most: the max, the sum, -log p
    softmax = [n for n in forward if "amax" in n.ops]
    assert [(n.read, n.written) for n in softmax] == [(2 * logits, 2 * 4 * TOKENS)]
    # the logits' gradient: reads the bf16 logits (and a few values per row), writes a bf16 tensor of their size
    grads = [n for n in backward if n.written == 2 * logits and 2 * logits <= n.read < 2 * logits + 32 * TOKENS]
    assert len(grads) == 1 and "eq.Tensor" in grads[0].ops  # eq: the label's one-hot
    shard = LayerShard(BATCH, SEQ, 1, False, True, False, True, 2.0, compiled=True, eager=True, hf=True)
    model = replace(llama_shape(C), vocab=VOCAB, tied_embeddings=True)
    mine = {k.key: k for k in end_passes(model, shard, SPEC).kernels}
    assert mine["loss.max_sumexp"].bytes == softmax[0].bytes
    assert abs(mine["loss.logits_grad.bwd"].bytes - grads[0].bytes) <= 32  # the padded labels' and the scalars' few bytes
