"""One pipeline rank of torchtitan's Llama holding two stages in a V under FSDP2 and torch's ScheduleZBVZeroBubble
(torchtitan's pipeline_parallel_schedule 'ZBVZeroBubble'), tensor by tensor in the runtime's action order.

torchtitan places two stages on each rank in a V (ZERO_BUBBLE_SOURCES['placement']): rank r of p holds stage r and stage
2p - 1 - r, so rank 0 holds the first stage (the embedding) and the last (the norm, the output and the loss), and rank p - 1
stages p - 1 and p, which pass their activations and gradients to each other in memory, not over the network. torch's
schedule (ZERO_BUBBLE_SOURCES['order']) splits each backward in two: I, the gradient of the stage's input only
(stage_backward_input: torch.autograd.grad to the inputs with retain_graph=True, the gradients reaching each parameter's
first node kept in its param group), then W, the weight gradients from those kept gradients (stage_backward_weight);
the first stage skips I and runs its whole backward at W. The runtime lowers the order as it lowers any schedule's
(memory_pipeline_interleaved.lower): with two stages a rank both stay unsharded the whole step, and REDUCE_GRAD follows
a stage's last W.

Under full checkpointing (torchtitan's apply_ac) each of W's param groups is its own graph task, so a block is recomputed
once in I and once for every one of its nine groups in W, and each recomputation keeps, until W frees the nodes holding
them, the tensors of nodes that W never runs (ZERO_BUBBLE_SOURCES['checkpoint'], _Graph): more than the same step holds
without checkpointing once a stage has two layers or more.

Ground truth: MemTracker over torch's PipelineStage and ScheduleZBVZeroBubble running a rank's two stages of torchtitan's
Llama on fake ranks (tests/ground_truth/tiny_torchtitan_pp_zero_bubble.py, test_torch_memory_pipeline_zero_bubble.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parcalc.core.memory_pipeline_interleaved import (
    TORCH_SCHEDULES,
    Action,
    InterleavedHooks,
    lower,
    reported,
    shard_action,
)
from parcalc.core.memory_pipeline_stage import StagePlan, _stage_backward, _stage_forward, receive_buffers
from parcalc.core.memory_torchtitan import block_forward, repeat_kv_and_rope_backward
from parcalc.core.memory_walk import StepShapes, Walk, add_into
from parcalc.core.model import TransformerModel
from parcalc.errors import InputError

ZERO_BUBBLE_SOURCES = {
    "placement": ("pytorch/torchtitan @b5bcd76c torchtitan/distributed/pipeline_parallel.py: _get_stage_indices style 'v' for "
                  "ScheduleZBVZeroBubble and ScheduleDualPipeV (rank r holds stages r and 2 pp - 1 - r; 'v schedules assume 2 "
                  "stages per rank')"),
    "order": (f"{TORCH_SCHEDULES} ScheduleZBVZeroBubble._calculate_single_rank_operations: n_micro = max(2 p - 1, m); warm-up "
              "2 (p - r) - 1 forwards of chunk 0, r pairs of chunk-1 and chunk-0 forwards, p - r chunk-1 F I W; the stable "
              "phase F0 I0 W0 F1 I1 W1; the cool-down r pairs of I0 I1, p - r pairs of I0 W0, then the chunk-1 Ws and the "
              "chunk-0 Ws left; actions on micro-batches >= m dropped"),
    "split": ("pytorch/pytorch v2.13.0 torch/distributed/pipelining/stage.py: backward_one_chunk(full_backward=False) runs "
              "stage_backward_input (but on stage 0) and keeps (input_values, param_groups, stage_output, output_grads) in "
              "backward_state; backward_weight_one_chunk pops it and runs stage_backward_weight (stage 0: the full "
              "stage_backward); _backward.py stage_backward_input (retain_graph=True, each param group's intermediates' "
              "incoming gradients kept by pre-hooks)"),
    "weight": ("pytorch/pytorch v2.13.0 torch/distributed/pipelining/_backward.py stage_backward_weight: one torch.autograd.grad "
               "per param group (retain_graph=False), del param_group['intermediates'] before it, del param_group['grads'] after; "
               "the loop's valid_edges keeps the group's GradientEdge (its node) until the next group rebinds it; get_param_groups "
               "orders the groups as submod.parameters()"),
    "checkpoint": ("pytorch/pytorch v2.13.0 torch/utils/checkpoint.py non-reentrant checkpoint: unpack_hook recomputes the block "
                   "once per graph task (gid = torch._C._current_graph_task_id()); the recomputation's pack hook stores a "
                   "tensor for every holder still alive (frame.recomputed[gid], keyed by the holder's handle) and keeps the "
                   "others only until it stops (early stop after the last saved tensor); each stored tensor is dropped when "
                   "unpacked (Rule 4) or when its holder dies with its node"),
}


def compute_order(rank: int, pp: int, micro_batches: int) -> list[tuple[str, int, int]]:
    """Rank `rank`'s forwards (F), input gradients (I) and weight gradients (W) in ScheduleZBVZeroBubble's order, as
    (F | I | W, stage, micro-batch) (ZERO_BUBBLE_SOURCES['order']); InputError where the rank is not one of the pipeline's."""
    if not 0 <= rank < pp:
        raise InputError(f"pipeline rank {rank}: ZB-V has ranks 0 to {pp - 1}")
    n_micro = max(2 * pp - 1, micro_batches)
    chunk0, chunk1 = rank, 2 * pp - 1 - rank
    order: list[tuple[str, int, int]] = []
    count = {("F", 0): 0, ("F", 1): 0, ("I", 0): 0, ("I", 1): 0, ("W", 0): 0, ("W", 1): 0}

    def act(kind: str, chunk: int) -> None:
        order.append((kind, chunk0 if chunk == 0 else chunk1, count[kind, chunk]))
        count[kind, chunk] += 1

    for _ in range(2 * (pp - rank) - 1):
        act("F", 0)
    for _ in range(rank):
        act("F", 1)
        act("F", 0)
    for _ in range(pp - rank):
        act("F", 1)
        act("I", 1)
        act("W", 1)
    while count["F", 1] < count["F", 0] or count["F", 0] < n_micro:
        if count["F", 0] < n_micro:
            act("F", 0)
        act("I", 0)
        act("W", 0)
        act("F", 1)
        act("I", 1)
        act("W", 1)
    for _ in range(rank):
        act("I", 0)
        act("I", 1)
    for _ in range(pp - rank):
        act("I", 0)
        act("W", 0)
    while count["W", 1] < count["I", 1]:
        act("W", 1)
    while count["W", 0] < count["I", 0]:
        act("W", 0)
    return [a for a in order if a[2] < micro_batches]


def rank_actions(rank: int, pp: int, micro_batches: int) -> list[Action]:
    """The compute order lowered by the runtime (memory_pipeline_interleaved.lower): UNSHARD / RESHARD, REDUCE_GRAD."""
    return lower(compute_order(rank, pp, micro_batches), micro_batches)


@dataclass(frozen=True)
class VRankPlan:
    """Rank `rank` of `stages` pipeline ranks under ZB-V: stage r with the layers chunks[0], stage 2p - 1 - r with chunks[1]."""

    rank: int  # r
    stages: int  # p, the pipeline ranks
    micro_batches: int  # m
    chunks: tuple[tuple[int, int], tuple[int, int]]

    def stage_plan(self, k: int) -> StagePlan:
        index = self.rank if k == 0 else 2 * self.stages - 1 - self.rank
        first, last = self.chunks[k]
        return StagePlan(index, 2 * self.stages, self.micro_batches, first, last, False, tag=f"s{index}.",
                         where=f", stage {index} ({'first' if k == 0 else 'second'} of the V)")  # fmt: skip


def root_unit(plan: StagePlan) -> str:
    """The FSDP unit of a stage's own root (the embedding on the first stage, the final norm and output on the last):
    rank 0 holds both, each its own fully_shard root."""
    return "root.last" if plan.last and plan.index > 0 else "root"


def stage_units(plan: StagePlan) -> list[str]:
    """The stage's FSDP units in module order (its root, then its blocks)."""
    return ([root_unit(plan)] if plan.first or plan.last else []) + [f"L{i}" for i in range(plan.first_layer, plan.last_layer)]


class _Held:
    """What a stage's input backward (I) of one micro-batch leaves for its weight backward (W): the gradient each parameter
    group's first node received, kept by stage_backward_input's pre-hooks (ZERO_BUBBLE_SOURCES['split'])."""

    def __init__(self) -> None:
        self.pinned: dict[str, str] = {}  # a live gradient's key -> the param group that keeps it (the key still in use)
        self.captured: dict[str, str] = {}  # param group -> the key of the gradient it keeps (no longer in use otherwise)

    def capture(self, group: str, key: str) -> None:
        self.pinned[key] = group

    def release(self, walk: Walk, *keys: str) -> None:
        """The engine is done with these gradients: those a param group keeps stay."""
        for key in keys:
            if key in self.pinned:
                self._keep(walk, key)
            else:
                walk.free(key)

    def add(self, walk: Walk, grad: str, into: str) -> None:
        """`grad` added into `into`'s gradient: in place, unless a param group keeps `into`; then the sum is a new tensor
        (torch/csrc/autograd/input_buffer.cpp can_accumulate_inplace: nothing else may hold the buffer)."""
        if into not in self.pinned:
            add_into(walk, grad, into)
            return
        size = walk.live[into].bytes
        self._keep(walk, into)
        walk.alloc(into, size, "temporaries", "input gradient (summed out of place)")
        walk.free(grad)

    def _keep(self, walk: Walk, key: str) -> None:
        group = self.pinned.pop(key)
        walk.rename(key, f"{key}@{group}", "a gradient kept for the weight backward (stage_backward_input)")
        self.captured[group] = f"{key}@{group}"

    def done(self, walk: Walk) -> None:
        """The end of the input backward: every pinned gradient now only the param group's."""
        for key in list(self.pinned):
            self._keep(walk, key)


def _norm_input_backward(walk: Walk, x: StepShapes, key: str, g_out: str, held: _Held, group: str,
                         unpacked: Callable[..., None] = lambda *names: None) -> str:  # fmt: skip
    """torchtitan's RMSNorm backward to its input only (memory_torchtitan.norm_backward's nodes without the weight's product
    and sum, TT_SOURCES['norm_backward']), every saved tensor kept (retain_graph=True); the output's gradient kept for the
    weight's group; `unpacked(*names)`: the block's recomputed tensors dropped as their nodes run. Returns the bf16 input
    gradient's key."""
    norm = key.rsplit(".", 1)[1]
    T, h, c = x.T, x.h, x.c
    size = T * h
    held.capture(group, g_out)
    walk.alloc(f"{key}.g_nb", size * c, "temporaries", "RMSNorm backward: grad * weight")
    held.release(walk, g_out)
    unpacked(f"{norm}.normed_w")
    walk.alloc(f"{key}.g_n", size * 4, "temporaries", "RMSNorm backward: type_as's gradient (fp32)")
    walk.free(f"{key}.g_nb")
    walk.alloc(f"{key}.g_x32", size * 4, "temporaries", "RMSNorm backward: grad * rsqrt")
    walk.alloc(f"{key}.g_rfull", size * 4, "temporaries", "RMSNorm backward: grad * x32 (before its sum)")
    walk.alloc(f"{key}.g_r", T * 4, "temporaries", "RMSNorm backward: rsqrt's gradient")
    walk.free(f"{key}.g_rfull", f"{key}.g_n")
    walk.alloc(f"{key}.g_a", T * 4, "temporaries", "RMSNorm backward: rsqrt backward")
    walk.free(f"{key}.g_r")
    unpacked(f"{norm}.rsqrt")
    walk.alloc(f"{key}.g_p", size * 4, "temporaries", "RMSNorm backward: mean backward (expand / h)")
    walk.free(f"{key}.g_a")
    walk.alloc(f"{key}.pow1", size * 4, "temporaries", "RMSNorm backward: x32.pow(1)")
    walk.alloc(f"{key}.pow2", size * 4, "temporaries", "RMSNorm backward: 2 * x32.pow(1)")
    walk.alloc(f"{key}.g_pow", size * 4, "temporaries", "RMSNorm backward: pow backward")
    walk.free(f"{key}.pow1", f"{key}.pow2", f"{key}.g_p")
    unpacked(f"{norm}.fp32")
    add_into(walk, f"{key}.g_pow", f"{key}.g_x32")
    walk.alloc(f"{key}.g_in", size * c, "temporaries", "RMSNorm input gradient (bf16)")
    walk.free(f"{key}.g_x32")
    return f"{key}.g_in"


def _mm_input_backward(walk: Walk, x: StepShapes, key: str, g_out: str, d_in: int, into: str, held: _Held,
                       unpacked: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """A linear's MmBackward run for its input's gradient only (added into `into`); its output's gradient kept for the
    weight's group; `unpacked`: what of its saved tensors goes when it has run (a recomputed input)."""
    held.capture(key, g_out)
    walk.alloc(f"{key}.gin", x.T * d_in * x.c, "temporaries", "input gradient")
    held.release(walk, g_out)
    unpacked()
    held.add(walk, f"{key}.gin", into)


def block_input_backward(walk: Walk, x: StepShapes, k: str, g_out: str, into: str, held: _Held, recomputed: bool = False) -> None:
    """Block k's backward to its input (I) as stage_backward_input runs it: memory_torchtitan.block_backward's nodes in
    the same order, no weight gradient, each linear's and norm's output gradient kept for W (ZERO_BUBBLE_SOURCES['split']).
    What the forward saved stays (retain_graph=True); what a checkpointed block's recomputation made (`recomputed`) goes
    where block_backward frees it, each recomputed tensor dropped once unpacked (ZERO_BUBBLE_SOURCES['checkpoint'])."""
    T, h, q, kv, f, c = x.T, x.h, x.q, x.kv, x.f, x.c
    n_rep = q // kv

    def unpacked(*names: str) -> None:
        if recomputed:
            walk.free(*(f"{k}.{name}" for name in names))
    walk.rename(g_out, f"{k}.g_x1")  # out = h + w2: both get the same gradient tensor
    held.capture(f"{k}.w2", f"{k}.g_x1")
    walk.alloc(f"{k}.g_prod", T * f * c, "temporaries", "w2 input gradient")
    unpacked("prod")
    walk.alloc(f"{k}.g_act", T * f * c, "temporaries", "mul backward: silu's gradient")
    walk.alloc(f"{k}.g_u", T * f * c, "temporaries", "mul backward: w3's gradient")
    walk.free(f"{k}.g_prod")
    unpacked("act", "w3.out")
    _mm_input_backward(walk, x, f"{k}.w3", f"{k}.g_u", h, f"{k}.g_y2", held)
    walk.alloc(f"{k}.g_g", T * f * c, "temporaries", "silu backward")
    walk.free(f"{k}.g_act")
    unpacked("w1.out")
    _mm_input_backward(walk, x, f"{k}.w1", f"{k}.g_g", h, f"{k}.g_y2", held, lambda: unpacked("n2.out"))
    held.add(walk, _norm_input_backward(walk, x, f"{k}.n2", f"{k}.g_y2", held, f"{k}.n2", unpacked), f"{k}.g_x1")
    # h = x + wo(attention): wo's branch gets the same gradient
    held.capture(f"{k}.o", f"{k}.g_x1")
    walk.alloc(f"{k}.g_attn", T * q * c, "temporaries", "wo input gradient")
    width = q if n_rep > 1 else kv
    walk.alloc(f"{k}.g_q", T * q * c, "temporaries", "SDPA backward dq")
    walk.alloc(f"{k}.g_k", T * width * c, "temporaries", "SDPA backward dk")
    walk.alloc(f"{k}.g_v", T * width * c, "temporaries", "SDPA backward dv")
    walk.free(f"{k}.g_attn")
    unpacked("attn", "lse", "q.rope", "k.rope", "keys", "values", "v.out")
    repeat_kv_and_rope_backward(walk, k, T, (q, kv), c, n_rep)
    _mm_input_backward(walk, x, f"{k}.v", f"{k}.g_v", h, f"{k}.g_y", held)
    _mm_input_backward(walk, x, f"{k}.k", f"{k}.g_k16", h, f"{k}.g_y", held)
    _mm_input_backward(walk, x, f"{k}.q", f"{k}.g_q16", h, f"{k}.g_y", held, lambda: unpacked("n1.out"))
    held.add(walk, _norm_input_backward(walk, x, f"{k}.n1", f"{k}.g_y", held, f"{k}.n1", unpacked), f"{k}.g_x1")
    walk.rename(f"{k}.g_x1", into)


def _block_input(plan: StagePlan, i: int, j: int) -> str:
    """The key of block i's input on micro-batch j (a checkpointed block's saved input): the stage's received activation
    for its first block, else the block before's output."""
    return plan.key(f"act_recv{j}") if i == plan.first_layer else f"{plan.mb(j)}L{i - 1}.x2"


def _stage_input_backward(walk: Walk, x: StepShapes, plan: StagePlan, policies: tuple[str, ...], j: int, hooks: InterleavedHooks,
                          held: _Held) -> None:  # fmt: skip
    """I of micro-batch j on a stage but the first: the input's gradient, kept by the input's .grad (stage_backward_input
    sets it; only the next step's clear_runtime_states drops it) and handed to the stage before."""
    p = plan.mb(j)
    T, V, c = x.T, x.V, x.c
    walk.phase = f"backward (input): micro-batch {j + 1} of {plan.micro_batches}{plan.where}"
    if plan.last:  # the loss's nodes run with retain_graph=True: the saved log-softmax stays until the loss is detached
        walk.alloc(f"{p}g_logsoftmax", T * V * 4, "logits and loss", "nll_loss gradient (fp32, b x s x V)")
        walk.alloc(f"{p}g_logits32", T * V * 4, "logits and loss", "log_softmax gradient (fp32, b x s x V)")
        walk.free(f"{p}g_logsoftmax")
        walk.alloc(f"{p}g_logits", T * V * c, "logits and loss", "pred's gradient (.float()'s backward, bf16)")
        walk.free(f"{p}g_logits32")
        _mm_input_backward(walk, x, f"{p}head", f"{p}g_logits", x.h, f"{p}final.g_y", held)
        walk.rename(_norm_input_backward(walk, x, f"{p}final", f"{p}final.g_y", held, f"{p}final"), f"{p}g_stream")
    else:
        walk.rename(plan.key(f"grad_recv{j}"), f"{p}g_stream")
    for i in reversed(range(plan.first_layer, plan.last_layer)):
        recomputed = policies[i] != "none"
        if recomputed:  # the checkpoint's recomputation for this graph task (ZERO_BUBBLE_SOURCES['checkpoint'])
            block_forward(walk, x, i, _block_input(plan, i, j), policies[i], recomputing=True, prefix=p)
        block_input_backward(walk, x, f"{p}L{i}", f"{p}g_stream", f"{p}g_stream_next", held, recomputed)
        walk.rename(f"{p}g_stream_next", f"{p}g_stream")
        # FSDP2's post-backward of the block (its input's gradient complete): the previous W's bf16 gradients folded in fp32
        hooks.accumulate(walk, f"L{i}", walk.keys_under(f"{plan.tag}L{i}.", ".grad"))
    held.done(walk)
    if plan.last:  # the root's post-backward at the stage's input; the loss detached: the nodes above the head's go
        unit = root_unit(plan)
        hooks.accumulate(walk, unit, walk.keys_under(f"{plan.tag}{unit}.", ".grad"))
        walk.free(f"{p}logsoftmax", f"{p}head.out")
    walk.rename(f"{p}g_stream", plan.key(f"input_grad{j}"), "the stage input's gradient (its .grad, until the next step)")


# a block's autograd nodes that hold what its forward saved, each with the nodes it points to (toward the block's input)
# and the tensors it saved (torchtitan's TransformerBlock, memory_torchtitan.block_forward's names): a node lives while a
# live node points to it or W's loop still holds it; what it saved goes when it dies or runs under retain_graph=False
BLOCK_NODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "add2": (("add1", "mm_w2"), ()),  # out = h + w2(...): the block's output
    "mm_w2": (("mul_prod",), ("prod",)),
    "mul_prod": (("silu", "mm_w3"), ("act", "w3.out")),  # silu(w1(x)) * w3(x)
    "silu": (("mm_w1",), ("w1.out",)),
    "mm_w1": (("mul_n2",), ("n2.out",)),
    "mm_w3": (("mul_n2",), ("n2.out",)),
    "mul_n2": (("n2_chain",), ("n2.normed_w",)),  # normed.type_as(x) * weight
    "n2_chain": (("add1",), ("n2.fp32", "n2.rsqrt")),  # x.float(), pow, mean, rsqrt, x * rsqrt
    "add1": (("input", "mm_o"), ()),  # h = x + wo(attention)
    "mm_o": (("sdpa",), ("attn",)),
    "sdpa": (("mm_q", "mm_k", "mm_v"), ("q.rope", "k.rope", "keys", "values", "v.out", "attn", "lse")),  # through RoPE, repeat_kv
    "mm_q": (("mul_n1",), ("n1.out",)),
    "mm_k": (("mul_n1",), ("n1.out",)),
    "mm_v": (("mul_n1",), ("n1.out",)),
    "mul_n1": (("n1_chain",), ("n1.normed_w",)),
    "n1_chain": (("input",), ("n1.fp32", "n1.rsqrt")),
}
# a block's param groups in its parameters' order (torchtitan's TransformerBlock: attention's wq, wk, wv, wo, feed_forward's
# w1, w2, w3, then attention_norm, ffn_norm), each with the node its I reached first (its W's autograd.grad starts there)
BLOCK_GROUPS = (("q", "mm_q"), ("k", "mm_k"), ("v", "mm_v"), ("o", "mm_o"), ("w1", "mm_w1"), ("w2", "mm_w2"), ("w3", "mm_w3"),
                ("n1", "mul_n1"), ("n2", "mul_n2"))  # fmt: skip
# the last stage's final norm and output, outside the blocks (apply_ac wraps the blocks), after them in the parameters
FINAL_NODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mm_head": (("mul_final",), ("out",)), "mul_final": (("final_chain",), ("normed_w",)), "final_chain": (("top",), ("fp32", "rsqrt"))}  # fmt: skip


class _Graph:
    """What of a micro-batch's autograd graph W still holds: nodes alive (pointed to by a live node, or by W's loop), those
    W has run (their saved tensors released), and the copies each saved tensor has (the forward's, or a checkpointed
    block's recomputations, one per graph task: ZERO_BUBBLE_SOURCES['checkpoint'])."""

    def __init__(self, walk: Walk, p: str, layers: range, last: bool, checkpointed: dict[int, bool]) -> None:
        self.walk, self.p = walk, p
        self.nodes: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        for i in layers:
            below = f"L{i - 1}.add2" if i > layers.start else ""
            for name, (children, saved) in BLOCK_NODES.items():
                kids = tuple(below if c == "input" else f"L{i}.{c}" for c in children)
                self.nodes[f"L{i}.{name}"] = (tuple(k for k in kids if k), tuple(f"L{i}.{t}" for t in saved))
        if last:
            for name, (children, saved) in FINAL_NODES.items():
                kids = tuple(f"L{layers.stop - 1}.add2" if c == "top" else c for c in children)
                self.nodes[name] = (kids, tuple(f"final.{t}" for t in saved))
        self.roots = {f"L{i}.{node}" for i in layers for _, node in BLOCK_GROUPS} | ({"mm_head", "mul_final"} if last else set())
        self.ran: set[str] = set()
        self.checkpointed = checkpointed
        self.copies: dict[str, list[str]] = {}
        for _, saved in self.nodes.values():
            for t in saved:  # the forward's own, where the block kept them (a checkpointed block kept only its input)
                if t.startswith("final.") or not checkpointed[int(t.split(".", 1)[0][1:])]:
                    self.copies.setdefault(t, [f"{p}{t}"])
        # each saved tensor's holders and each block's saved tensors, in the nodes' order: held() asks only a tensor's own
        # nodes (asking every node made a W cubic in a stage's layers: 80 % of a 4-layer stage's walk at 32 micro-batches)
        self.holders: dict[str, list[str]] = {}
        self.block_tensors: dict[str, dict[str, None]] = {f"L{i}.": {} for i in layers}  # "L{i}." -> its tensors (a dict: ordered)
        for node, (_, saved) in self.nodes.items():
            for t in saved:
                self.holders.setdefault(t, []).append(node)
                if t.startswith("L"):
                    self.block_tensors[t.split(".", 1)[0] + "."][t] = None
        self._alive = self._reach()

    def _reach(self) -> set[str]:
        alive, todo = set(), list(self.roots)
        while todo:
            node = todo.pop()
            if node not in alive:
                alive.add(node)
                todo += self.nodes[node][0]
        return alive

    def held(self, tensor: str) -> bool:
        """Whether a live node that has not run holds `tensor`."""
        return any(node in self._alive and node not in self.ran for node in self.holders.get(tensor, ()))

    def block_held(self, i: int) -> bool:
        return any(self.held(t) for t in self.block_tensors.get(f"L{i}.", ()))

    def update(self, drop: str = "", ran: str = "") -> None:
        """W's loop lets go of node `drop` / node `ran` has run: every copy of what no live node still holds goes."""
        self.roots.discard(drop)
        if ran:
            self.ran.add(ran)
        self._alive = self._reach()
        for tensor in [t for t in self.copies if not self.held(t)]:
            self.walk.free(*self.copies.pop(tensor))

    def recompute(self, walk: Walk, x: StepShapes, i: int, inp: str, policy: str, again: str) -> None:
        """The block's checkpoint recomputed for a new graph task: the tensors a live node holds kept, the rest dropped when
        the recomputation stops."""
        block_forward(walk, x, i, inp, policy, recomputing=True, prefix=again)
        for t in self.block_tensors.get(f"L{i}.", ()):
            if f"{again}{t}" not in walk.live:
                continue
            if self.held(t):
                self.copies.setdefault(t, []).append(f"{again}{t}")
            else:
                walk.free(f"{again}{t}")


def _stage_weight_backward(walk: Walk, x: StepShapes, plan: StagePlan, policies: tuple[str, ...], j: int, held: _Held) -> None:
    """W of micro-batch j on a stage but the first: stage_backward_weight, one param group at a time in the parameters'
    order, each its own torch.autograd.grad from the gradient its I kept (retain_graph=False: the node it starts at releases
    what it saved); the loop holds a group's node until the next group's turn, and what no live node holds any more goes
    (_Graph); the rest when W returns. A checkpointed block is recomputed for each of its groups' graph tasks
    (ZERO_BUBBLE_SOURCES['checkpoint'])."""
    p = plan.mb(j)
    h, q, kv, f, c = x.h, x.q, x.kv, x.f, x.c
    walk.phase = f"backward (weights): micro-batch {j + 1} of {plan.micro_batches}{plan.where}"
    shapes = {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h), "w1": (h, f), "w2": (f, h), "w3": (h, f)}
    if not plan.last:  # the received gradient, which the last block's w2 group kept, is the stage's receive buffer
        k = f"{p}L{plan.last_layer - 1}"
        walk.rename(held.captured.pop(f"{k}.w2"), plan.key(f"grad_recv{j}"), "gradient receive buffer (one per micro-batch)")
    layers = range(plan.first_layer, plan.last_layer)
    graph = _Graph(walk, p, layers, plan.last, {i: policies[i] != "none" for i in layers})
    groups = [(i, name, f"L{i}.{node}") for i in layers for name, node in BLOCK_GROUPS]
    groups += [(-1, "final", "mul_final"), (-1, "head", "mm_head")] if plan.last else []
    previous = ""
    for n, (i, name, node) in enumerate(groups):
        graph.update(drop=previous)  # valid_edges rebound: the group before's node let go
        if i > layers.start and policies[i] != "none" and not graph.block_held(i - 1):
            walk.free(f"{p}L{i - 1}.x2")  # nothing holds block i - 1's nodes: its output, block i's checkpoint input, goes
        if i >= 0 and policies[i] != "none":
            graph.recompute(walk, x, i, _block_input(plan, i, j), policies[i], f"{p}w{n}.")
        if name in ("n1", "n2", "final"):
            key = f"{p}L{i}.{name}" if i >= 0 else f"{p}final"
            walk.alloc(f"{key}.g_wfull", x.T * h * c, "temporaries", "RMSNorm weight backward: grad * normed (before its sum)")
            _weight_grad(walk, f"{plan.tag}{f'L{i}' if i >= 0 else root_unit(plan)}.{name}.grad", h * c)
            walk.free(f"{key}.g_wfull")
        else:
            d_in, d_out = shapes.get(name, (h, x.V))
            _weight_grad(walk, f"{plan.tag}{f'L{i}' if i >= 0 else root_unit(plan)}.{name}.grad", d_in * d_out * c)
        graph.update(ran=node)
        walk.free(held.captured.pop(f"{p}L{i}.{name}" if i >= 0 else f"{p}{name}", ""))
        previous = node
    for key in [k for k in walk.live if k.startswith(p)]:  # the graph's other saved tensors, the stage output kept for W
        walk.free(key)


def _weight_grad(walk: Walk, key: str, size: float) -> None:
    """A weight's gradient from W: the unsharded parameter's .grad (bf16), or added in place into the one a W before left
    (no I between them to fold it: stage_backward_weight's weight.grad += dw)."""
    if key in walk.live:
        walk.transient(f"{key}.dw", size, "temporaries", "weight gradient (added into .grad)")
    else:
        walk.alloc(key, size, "gradients", "weight gradients (bf16, until FSDP2 folds them)")


def walk_v_rank(walk: Walk, model: TransformerModel, x: StepShapes, plan: VRankPlan, policies: tuple[str, ...], embedding_tables: int,
                hooks: InterleavedHooks, progress: Callable[[int, int], None] | None = None, actions: list[Action] | None = None,
                full_backward: Callable[..., None] | None = None) -> None:  # fmt: skip
    """The rank's step in the runtime's action order (rank_actions, or another V schedule's `actions`), its two stages
    walked as memory_pipeline_stage walks a stage's forward, the split backward as ZERO_BUBBLE_SOURCES['split'] and
    ['weight'] run it; a whole backward (B: ScheduleDualPipeV's) as `full_backward(walk, model, x, stage, plans, policies,
    j, embedding_tables, hooks)` walks it (parcalc.core.memory_pipeline_dualpipe); `progress(done, total)` before each
    action (memory_walk.WALK_PROGRESS)."""
    if any(policy not in ("none", "full") for policy in policies):
        raise InputError("the V schedules' walk follows blocks with no or full checkpointing")
    fsdp = hooks.fsdp
    plans = {p.index: p for p in (plan.stage_plan(0), plan.stage_plan(1))}
    for stage in plans.values():
        receive_buffers(walk, x, stage)
    held: dict[tuple[int, int], _Held] = {}
    if actions is None:
        actions = rank_actions(plan.rank, plan.stages, plan.micro_batches)
    for kind, index, j in reported(actions, progress):
        stage = plans[index]
        units = stage_units(stage)
        if shard_action(walk, fsdp, kind, index, units):
            continue
        if kind == "REDUCE_GRAD":  # perform_reduce_grad: each unit's post_backward, the last W's gradients folded first
            walk.phase = f"backward: perform_reduce_grad of stage {index} (each unit's reduce-scatter)"
            for unit in units:
                bf16 = walk.keys_under(f"{stage.tag}{unit}.", ".grad")
                if unit in hooks.accumulated:
                    hooks.accumulate(walk, unit, bf16)
                fsdp.post_backward(walk, unit, hooks.accumulated.get(unit, bf16))  # type: ignore[attr-defined]
            if fsdp.kept_reduce_scatter is not None:  # type: ignore[attr-defined]
                walk.free(fsdp.kept_reduce_scatter)  # type: ignore[attr-defined]
                fsdp.kept_reduce_scatter = None  # type: ignore[attr-defined]
            continue
        for unit in units:  # _assert_unsharded
            fsdp.wait_for_unshard(walk, unit, forward=False)  # type: ignore[attr-defined]
        if kind == "F":
            _stage_forward(walk, model, x, stage, policies, j, hooks)
            if index + 1 in plans:  # the V's turn on rank p - 1: the output is the next stage's input (set_local_fwd_input)
                after = plans[index + 1]
                walk.free(after.key(f"act_recv{j}"))
                walk.rename(f"{stage.mb(j)}stage.out", after.key(f"act_recv{j}"), "the stage's output, the next stage's input")
        elif kind == "I" and not stage.first:
            held[index, j] = _Held()
            _stage_input_backward(walk, x, stage, policies, j, hooks, held[index, j])
            if index - 1 in plans:  # get_local_bwd_output: the input's gradient is the stage before's received gradient
                before = plans[index - 1]
                walk.free(before.key(f"grad_recv{j}"))
                walk.rename(stage.key(f"input_grad{j}"), before.key(f"grad_recv{j}"), "the next stage's input gradient")
        elif kind == "W" and stage.first:  # the first stage skipped I: its W is the whole backward
            _stage_backward(walk, model, x, stage, policies, j, embedding_tables, hooks)
        elif kind == "W":
            _stage_weight_backward(walk, x, stage, policies, j, held.pop((index, j)))
        elif kind == "B":
            if full_backward is None:
                raise AssertionError(f"a whole backward of stage {index} with no walk for it")  # a bug in the walk, not user input
            full_backward(walk, model, x, stage, plans, policies, j, embedding_tables, hooks)


def v_rank_chunk_layers(layout: Any, layers: int, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The layers [first, last) of rank `rank`'s two stages, r and 2p - 1 - r: the layout's own split (torchtitan's, or
    --pipeline-layout, placed in the V: pipeline_layout.PipelineSplit.rank_of) or 2p stages of layers / 2p layers each
    (parcalc.core.pipeline_step.schedule_reason asks 2p to divide the layers)."""
    if layout.pipeline_layout is not None:
        first, second = layout.pipeline_split(layers).stage_ranges()[rank]
        return (first.start, first.stop), (second.start, second.stop)
    per = layers // (2 * layout.pp)
    low, high = rank, 2 * layout.pp - 1 - rank
    return (low * per, (low + 1) * per), (high * per, (high + 1) * per)


def zero_bubble_gaps(layout: Any, layers: int, recompute: Any, compiled: bool, precision: Any) -> list[str]:
    """What of a ZB-V layout the walk does not follow: it walks torch's ScheduleZBVZeroBubble over 2p stages in a V, each
    holding transformer layers, the embedding with the first and the head with the last, eager bf16 (or fp32) blocks with no
    or full checkpointing, no tp or cp."""
    why = [what for what, gap in ((f"--recompute {recompute.value} (the split backward is walked with no or full checkpointing)",
                                   recompute.value not in ("none", "full")),
                                  ("tp", layout.tp > 1), ("cp", layout.cp > 1), ("--compile", compiled),
                                  (f"--precision {precision.value}", precision.value not in ("mixed-bf16", "bf16", "fp32"))) if gap]  # fmt: skip
    if layout.pipeline_layout is not None:
        stages = layout.pipeline_split(layers).stages
        odd = [what for what, gap in (("a stage without transformer layers", any(s.layers == 0 for s in stages)),
                                      ("the embedding off the first stage", not stages[0].embedding or any(s.embedding for s in stages[1:])),
                                      ("the head off the last stage", not stages[-1].loss or any(s.loss for s in stages[:-1])),
                                      ("multi-token prediction", any(s.mtp for s in stages))) if gap]  # fmt: skip
        why += [f"the pipeline layout {layout.pipeline_layout!r}: {', '.join(odd)}"] if odd else []
    return [f"{what} under ZB-V" for what in why]
