"""An MoE layer's kernels on one GPU, and the time of its token dispatch and combine.

Kernels (Megatron-Core's MoELayer with the all-to-all or flex dispatcher; Shazeer et al. 2017):
- router: a GEMM of the tokens this rank routes (T, the sequence shard under sequence parallelism)
  by hidden x experts, then the gate (softmax or sigmoid, top-k) over T x E scores in fp32,
  memory-bound;
- permute: each token copied once per chosen expert into expert order (read T h, write T k h),
  and after the experts the weighted un-permute (read T k h and the k probabilities, write T h);
  backward the same traffic;
- sort (the all-to-all dispatcher with EP and several local experts): the all-to-all delivers the
  received copies in source-rank order, so they are sorted into local-expert order after it and
  back before the combine, a read and a write of every received copy each way (and of its fp32
  probability on the way in), the gradients likewise backward (SORT_SOURCE); DeepEP and HybridEP
  permute the received tokens into expert order once (the permute above);
- routed experts: a grouped GEMM per linear over the E/ep local experts, each with the rows routed
  to it: m_e = rho x etp x T k ep / E (dropless and balanced: every expert gets T k ep / E of the
  ep x T k copies of its EP group, x etp when the expert TP group gathers its tokens, x rho for the
  busiest rank under imbalance, capped by the capacity factor). Tile and wave quantisation of
  parcalc.core.timing.compute apply per expert, so small m_e pays for its partial tiles;
- shared experts: a dense MLP of the shared width over all b s tokens, split over tp like the
  dense MLP (Megatron-Core SharedExpertMLP).

Dispatch and combine (one of each forward, their gradients backward; replayed with full
recomputation): per rank T k rho h bytes of token copies (DeepEP, HybridEP: T D rho h, below).
- "alltoall" (NCCL all-to-all, Megatron's MoEAlltoAllTokenDispatcher): every copy bound for a GPU
  on another node crosses the network on its own (parcalc.core.timing.network's all-to-all);
- "deepep" (DeepEP, Megatron's flex dispatcher; DeepSeek-V3 sec. 3.2.2) and "hybridep" (HybridEP, the
  flex dispatcher's other backend): a token goes
  over the network once per destination node, to the GPU of the same rail there, and is forwarded
  over NVLink to the GPUs that hold its experts; so the network carries T x n_remote x h bytes,
  n_remote the expected number of other nodes a token's top-k experts fall on. NVLink carries one copy
  per destination GPU, not one per expert: DeepEP's get_dispatch_layout marks
  is_token_in_rank (a rank's bit set once however many of the token's top-k it hosts) and counts
  num_tokens_per_rank from it, the intranode and internode kernels send a token only where that bit is
  set (internode: one RDMA copy per node, then the NVLink forward to the node's GPUs whose bit is set,
  SourceMeta.is_token_in_nvl_rank_bits), and the receiving rank gets the token once with its local top-k
  indices, permuting it to its experts after the dispatch (deepseek-ai/DeepEP @dd758caf
  csrc/kernels/legacy/layout.cu get_dispatch_layout, intranode.cu, internode.cu); combine sends one
  reduced copy per rank back (Megatron-LM @2edffadb token_dispatcher.py _DeepepManager
  get_restored_hidden_states_by_experts: the local experts' outputs un-permuted, weighted and summed into
  the dispatched rows, one a source token, before fused_combine). HybridEP does the same: its dispatch
  kernel's S2G warp sends each token the node needs once to each GPU of the node that needs it, one
  output row per rank (NVIDIA's hybrid-ep code
  of DeepEP, as in the fork shifangx/DeepEP @c9f647dd csrc/kernels/hybrid_ep_backend.cuh
  S2G_warp_group_device_function: 'multicast to all ranks within this node which need this token', one
  sparse_to_dense_map index per rank; Megatron-LM @2edffadb fused_a2a.py imports HybridEPBuffer from
  deep_ep and permutes after it, dispatch_with_permute). So a token moves
  D = M g (1 - C(E' - E/R, k) / C(E', k)) copies, the expected distinct ranks among its top-k (R ranks
  of E/R experts, g a node, E' = M E / N the experts of its M chosen nodes), of which (R - 1)/R leave the GPU inside one node and (g - 1)/g cross
  NVLink across nodes (the rail peer keeps its own). The all-to-all dispatcher sends per expert
  (MoEAlltoAllTokenDispatcher permutes the tokens into expert order before its all-to-all: Megatron-LM
  @2edffadb moe/token_dispatcher.py dispatch_preprocess 'Permutation 1', then
  all_to_all(..., self.input_splits, ...)).
  With --max-nodes-per-token M (node-limited routing, DeepSeek-V3 sec. 2.1.2 / 3.2.2) the top-k
  fall on at most M nodes.
  Routing (--moe-routing, ROUTINGS): D above is "uniform" routing, each k-subset of experts equally likely,
  as trained routers are in expectation when balanced and as Megatron's benchmark switch forces it
  (--moe-router-force-load-balancing: i.i.d. normal logits, Megatron-LM @d98e8a64 moe/router.py and
  moe_utils.py RandomSTE `logits.clone().normal_()`). "round-robin" is Primus's 'even' force-balanced routing
  (--moe-router-force-load-balancing-type even): token t of a rank's micro-batch gets the experts (t k + j) mod E,
  j < k (AMD-AGI/Primus @fd1eeabb primus/backends/megatron/core/extensions/primus_turbo.py dispatch_preprocess,
  `token_indices = torch.arange(num_tokens * topk).view(num_tokens, topk) % num_experts`), k consecutive experts,
  so D is the mean over one period of t of the distinct ranks those k fall on (1 for 128 experts, top-8, on 8
  ranks: every token to one rank), and the nodes likewise; every expert gets exactly T k / E of a rank's tokens
  (rho = 1), and the node limit does not apply (the indices replace the router's choice). Under FP8 training DeepEP can dispatch in FP8 with one fp32 scale per 128
  values and combine in BF16 (DeepEP README: 'FP8 dispatching and BF16 combining'), as DeepSeek-V3 did
  (sec. 3.3.2); a framework profile says whether its stack does (Framework.fp8_dispatch): Megatron-Core
  hands DeepEP the BF16 hidden states (moe/fused_a2a.py FusedDispatch, `buffer.dispatch(x, ...)`, and
  token_dispatcher.py `fused_dispatch(hidden_states, ...)`, core_v0.13.0 to @2edffadb; the experts'
  GroupedLinear quantises after the dispatch), and HybridEP refuses FP8 ('HybridEP dispatcher does not
  support fp8 dispatch now', fused_a2a.py @2edffadb).

Messages: DeepEP and HybridEP send more than the token's row, and not the same in each of the four exchanges of a layer
(Megatron-LM @2edffadb and @d98e8a64 moe/fused_a2a.py: FusedDispatch.forward dispatches x with topk_idx and topk_weights,
'DeepEP only supports float32 probs'; FusedCombine.forward combines x alone; FusedCombine.backward dispatches the gradients
with the handle, the cached mode that takes no top-k (deep_ep/buffers/legacy.py @dd758caf: 'assert topk_idx is None and
topk_weights is None'); FusedDispatch.backward combines them with topk_weights = the probabilities' gradients; HybridEPDispatch
and HybridEPCombine the same with probs: dispatch_with_permute(probs=probs) forward, combine_with_unpermute(probs=grad_probs)
for the dispatch's gradient, neither for the combine and its gradient). Per token copy (message_bytes):
- DeepEP in one node (csrc/kernels/legacy/intranode.cu @dd758caf dispatch lines 377-393, combine 823-829): the row, its
  source index (int, 4 B) always, in the forward dispatch the k top-k indices (topk_idx_t, int64 unless built with
  EP_NUM_TOPK_IDX_BITS: deep_ep/include/deep_ep/common/compiled.cuh) and k fp32 weights, in the dispatch's gradient the k
  fp32 weights' gradients; Primus-Turbo's port (AMD-AGI/Primus-Turbo @a6a16cdc csrc/kernels/deep_ep/intranode.cu 331-349,
  csrc/pytorch/deep_ep/deep_ep.cpp: topk_idx data_ptr<int64_t>) sends the same;
- DeepEP across nodes (internode.cu get_num_bytes_per_token, the RDMA and NVLink buffers both): the row, a SourceMeta (two
  ints, 8 B), k int32 indices and k fp32 weights in the forward dispatch, k weights in the dispatch's gradient, the whole
  aligned up to 16 B (sizeof(int4)); FP8 rows carry their h/128 fp32 scales (FP8_DISPATCH_BYTES) in either kernel;
- HybridEP (shifangx/DeepEP @c9f647dd csrc/kernels/hybrid_ep_backend.cuh: S2G_warp_group_device_function's
  FORWARD_DISPATCH store of intra_node_prob_buffer, the intra-node G2S warp group's BACKWARD_COMBINE load of
  remote_expert_input_prob; the inter-node buffer rdma_inter_node_group_prob the same length): the row and, in the forward
  dispatch and the dispatch's gradient, the fp32 probabilities of every expert of the node, NUM_OF_EXPERTS_PER_RANK x
  NUM_OF_RANKS_PER_NODE = E/R x g of them (512 B beside Qwen3-30B-A3B's 4,096 B row on 8 GPUs).

Overlap (--ep-overlap), stated per micro-batch and MoE layer:
- none: dispatch and combine on the critical path;
- shared: the shared experts run beside them (Megatron --moe-shared-expert-overlap): each pass
  exposes max(0, A - C_shared);
- 1f1b: the forward of one micro-batch and the backward of another run layer by layer together
  (Megatron --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe pairing), so the forward's
  exchanges hide under the other's backward compute and vice versa: max(0, A_f - C_b) +
  max(0, A_b - C_f); the warm-up and cool-down micro-batches of the pipeline have no partner
  (parcalc.core.timing.step.combine).
Host-looped expert GEMMs (Megatron-LM with Transformer Engine's GroupedLinear, the framework profile's
expert_gemm_host): the dispatcher copies the tokens per expert to the host and waits for them in every MoE layer
(Megatron-LM @d98e8a64 megatron/core/transformer/moe/token_dispatcher.py: MoEAlltoAllTokenDispatcher's
_maybe_dtoh_and_synchronize, `self.d2h_event.synchronize()`; the flex dispatcher's HybridEP 'CPU sync in dispatch'),
and GroupedLinear takes those counts as host integers (TE @d0067d0d transformer_engine/pytorch/module/grouped_linear.py:
`m_splits = m_splits.tolist()`) and launches one cuBLASLt GEMM per local expert in a host loop
(common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm): forward one per linear (fc1, fc2), backward two (dgrad and
wgrad, general_grouped_gemm twice). With the queue emptied at the sync, the GPU waits while the host issues them:
per MoE layer and micro-batch max(0, n_local x 2 x c - G_experts,f) forward, and max(0, n_local x 4 x c - G_layer,b)
backward, where the host may have run ahead by the rest of the layer's backward (a lower bound: the other kernels'
host time is taken as free). c is the host's time per expert GEMM of that loop.

Hidden communication still occupies SMs: its kernels hold s_comm of the GPU's S SMs while they
run, so the compute beside them slows by hidden x s_comm / S, s_comm the dispatcher's (COMM_SMS):
DeepEP 20 (Megatron-Core's moe_deepep_num_sms default; DeepSeek-V3 sec. 3.2.2: 'only 20 SMs are
sufficient to fully utilize the bandwidths of IB and NVLink'), HybridEP 32 (the moe_hybridep_num_sms
of Megatron-Bridge's performance recipes), NCCL's all-to-all one CTA per p2p channel, 32 on a Hopper
NVSwitch node (NCCL's init line there: '32 p2p channels'; src/graph/paths.cc ncclTopoComputeP2pChannels:
the collective channels, 24, rounded up to a power of two).
"""

from __future__ import annotations

import math
from typing import Any

from parcalc.errors import InputError
from parcalc.frozen import frozen

DISPATCHERS = ("alltoall", "deepep", "hybridep")
ROUTINGS = ("uniform", "round-robin")
ROUTING_SOURCE = {
    "uniform": ("each k-subset of the experts equally likely: Megatron-LM's --moe-router-force-load-balancing draws i.i.d. normal "
                "router logits (Megatron-LM @d98e8a64 megatron/core/transformer/moe/router.py TopKRouter.routing, "
                "moe_utils.py RandomSTE: `logits.clone().normal_()`), a balanced trained router in expectation"),
    "round-robin": ("Primus's 'even' force-balanced routing (--moe-router-force-load-balancing-type even): token t gets experts "
                    "(t k + j) mod E, j < k (AMD-AGI/Primus @fd1eeabb primus/backends/megatron/core/extensions/primus_turbo.py "
                    "dispatch_preprocess: `token_indices = torch.arange(num_tokens * topk).view(num_tokens, topk) % num_experts`)"),
}
EP_OVERLAPS = ("none", "shared", "1f1b")
GATE_BYTES = 4.0  # router scores and probabilities in fp32 (Megatron-Core TopKRouter upcasts the logits)
SORT_SOURCE = ("Megatron-LM @2edffadb megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: "
               "dispatch_postprocess 'Permutation 2: Sort tokens by local expert' (if self.num_local_experts > 1: "
               "sort_chunks_by_idxs(global_input_tokens, ..., probs=global_probs, fused=moe_permute_fusion), line 737) and "
               "combine_preprocess 'Unpermutation 2' (line 772); fused, Transformer Engine @366798ef pytorch/permutation.py "
               "_moe_chunk_sort: make_chunk_sort_map, then sort_chunks_by_map reading and writing every row (and its prob) "
               "once, its backward one sort_chunks_by_map of the gradients. TorchTitan does the same after its all-to-all "
               "(@b5bcd76c6 torchtitan/models/common/token_dispatcher.py _permute: 'Reorder tokens from rank-major to "
               "expert-major layout', routed_input_RD[permuted_indices, :], and _unpermute)")  # fmt: skip
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # E4M3 values and one fp32 scale per 128 (DeepEP / DeepSeek-V3 sec. 3.3.2)
# SMs a dispatch / combine kernel holds while it runs, by dispatcher (module docstring)
COMM_SMS = {"alltoall": 32, "deepep": 20, "hybridep": 32}
COMM_SMS_SOURCE = {
    "alltoall": ("NCCL's all-to-all runs one CTA per p2p channel: 32 on an 8 x H100 NVSwitch node (NCCL_DEBUG=INFO init line "
                 "there: '24 coll channels, ..., 32 p2p channels'; presets/gpus/h200.yaml nccl_channels), NVIDIA/nccl "
                 "src/graph/paths.cc ncclTopoComputeP2pChannels: p2pnChannels = pow2Up(min(nChannels, NCCL_MAX_P2P_NCHANNELS)), "
                 "24 -> 32; taken for every GPU"),
    "deepep": ("Megatron-LM @2edffadb megatron/core/transformer/transformer_config.py 'moe_deepep_num_sms: int = 20' (DeepEP's "
               "Buffer.num_sms default); DeepSeek-V3 Technical Report sec. 3.2.2: 'only 20 SMs are sufficient to fully utilize "
               "the bandwidths of IB and NVLink'"),
    "hybridep": ("Megatron-Bridge performance recipes: 'recipe.model.moe_hybridep_num_sms = 32' whenever the flex backend is "
                 "hybridep (scripts/performance/utils/overrides.py _set_common_perf_overrides @v0.4.2; helpers.py @v0.2.0); "
                 "Megatron-Core's own default is None, HybridEP's"),
}
OVERLAP_SOURCE = ("Megatron-Core --overlap-moe-expert-parallel-comm (combined 1F1B: one micro-batch's forward beside "
                  "another's backward, layer by layer) and --moe-shared-expert-overlap; DeepSeek-V3 sec. 3.2.1 (DualPipe)")  # fmt: skip


@frozen
class ExpertShard:
    """How one GPU runs the MoE layers: its expert-parallel and expert-TP sizes, the busiest rank's
    token share rho, the dispatcher, the routing limit and the overlap of the exchanges."""

    ep: int = 1
    etp: int = 1
    imbalance: float = 1.0
    dispatcher: str = "alltoall"
    max_nodes_per_token: int | None = None
    overlap: str = "none"
    routing: str = "uniform"  # ROUTINGS: which experts a token's top-k are (module docstring)


def routed_tokens(micro_batch: int, seq_len: int, tp: int, sequence_parallel: bool) -> int:
    """T: the tokens one rank routes, its sequence shard under sequence parallelism (Megatron-Core's MoE layer input)."""
    return micro_batch * seq_len // tp if sequence_parallel else micro_batch * seq_len


def routed_rows(model: Any, tokens: int, experts: ExpertShard) -> tuple[float, int]:
    """(rows one local expert computes, local experts): m_e = rho x etp x T k ep / E (module docstring)."""
    moe = model.moe
    rho = moe.busiest_share(experts.imbalance)
    local = max(moe.experts // experts.ep, 1)
    return rho * experts.etp * tokens * moe.top_k * experts.ep / moe.experts, local


def check_routing(model: Any, experts: ExpertShard, nodes: int) -> None:
    """--max-nodes-per-token must fit the EP group and leave room for top-k experts."""
    if experts.dispatcher not in DISPATCHERS:
        raise InputError(f"--moe-dispatcher: one of {', '.join(DISPATCHERS)}, got {experts.dispatcher!r}")
    if experts.overlap not in EP_OVERLAPS:
        raise InputError(f"--ep-overlap: one of {', '.join(EP_OVERLAPS)}, got {experts.overlap!r}")
    check_routing_choice(experts.routing, experts.max_nodes_per_token, experts.imbalance)
    m = experts.max_nodes_per_token
    if m is None:
        return
    if m < 1:
        raise InputError(f"--max-nodes-per-token: at least 1, got {m}")
    if m > nodes:
        raise InputError(f"--max-nodes-per-token: {m} nodes is more than the {nodes} node(s) the EP group of {experts.ep} spans")
    if model.moe is not None and m * model.moe.experts // nodes < model.moe.top_k:
        raise InputError(f"--max-nodes-per-token: {m} node(s) hold {m * model.moe.experts // nodes} experts, fewer than top-k = "
                         f"{model.moe.top_k}")  # fmt: skip


def check_routing_choice(routing: str, max_nodes: int | None, imbalance: float) -> None:
    """--moe-routing is one of ROUTINGS; round-robin fixes each token's experts, so neither a node limit nor an imbalance
    applies to it."""
    if routing not in ROUTINGS:
        raise InputError(f"--moe-routing: one of {', '.join(ROUTINGS)}, got {routing!r}")
    if routing == "round-robin":
        if max_nodes is not None:
            raise InputError("--max-nodes-per-token: round-robin routing sets every token's experts itself ((t k + j) mod E); "
                             "the node limit applies to --moe-routing uniform")
        if imbalance != 1.0:
            raise InputError(f"--moe-imbalance: round-robin routing gives every expert the same tokens (T k / E), so the busiest "
                             f"rank's share is 1, not {imbalance:g}")


def remote_nodes_per_token(experts_total: int, top_k: int, nodes: int, max_nodes: int | None, routing: str = "uniform") -> float:
    """Expected other nodes a token's top-k experts fall on: the experts spread evenly over `nodes`,
    the top-k uniform among those of the M chosen nodes (force-balanced routing):
    M (1 - C(E' - E/N, k) / C(E', k)) distinct nodes, E' = M E / N, of which (N - 1)/N not the
    sender's own (every node equally likely to be chosen); round-robin routing: its distinct nodes
    (round_robin_holders), (N - 1)/N of them another's (every rank runs the same token indices, and over a period
    of t each node is among a token's as often as any other)."""
    if nodes <= 1:
        return 0.0
    if routing == "round-robin":
        return round_robin_holders(experts_total, top_k, experts_total // nodes) * (nodes - 1) / nodes
    chosen = nodes if max_nodes is None else max_nodes
    per_node = experts_total / nodes
    return distinct_holders(chosen * per_node, per_node, top_k) * (nodes - 1) / nodes


def distinct_holders(pool_experts: float, per_holder: float, top_k: int) -> float:
    """Expected distinct holders (nodes or ranks) of `per_holder` experts each among a token's top-k, drawn uniformly
    without replacement from `pool_experts`: (pool / per_holder) (1 - C(pool - per_holder, k) / C(pool, k))."""
    miss = 1.0  # C(pool - per_holder, k) / C(pool, k) as a product
    for i in range(top_k):
        miss *= max(pool_experts - per_holder - i, 0.0) / (pool_experts - i)
    return pool_experts / per_holder * (1.0 - miss)


def round_robin_holders(experts_total: int, top_k: int, per_holder: int) -> float:
    """Mean distinct holders (ranks or nodes) of `per_holder` consecutive experts each among token t's experts
    (t k + j) mod E, j < k, under round-robin routing (ROUTING_SOURCE), over one period of t (E / gcd(k, E) tokens:
    t k mod E repeats after it; a micro-batch holds thousands of periods)."""
    period = experts_total // math.gcd(top_k, experts_total)
    holders = (len({((t * top_k + j) % experts_total) // per_holder for j in range(top_k)}) for t in range(period))
    return sum(holders) / period


def ranks_per_token(experts_total: int, top_k: int, ranks: int, nodes: int, max_nodes: int | None, routing: str = "uniform") -> float:
    """D: expected distinct EP ranks a token's top-k experts fall on, the copies DeepEP sends per token (module docstring):
    the E/R experts of each of R ranks, the top-k uniform among the E' = M E / N experts of the M chosen nodes; or
    round-robin's consecutive experts (round_robin_holders)."""
    if routing == "round-robin":
        return round_robin_holders(experts_total, top_k, experts_total // ranks)
    chosen = nodes if max_nodes is None else max_nodes
    return distinct_holders(experts_total * chosen / nodes, experts_total / ranks, top_k)


# The four exchanges of an MoE layer (module docstring, "Messages"): the forward dispatch and combine, the combine's
# gradient (a dispatch of the output gradients) and the dispatch's gradient (a combine of the input gradients)
EXCHANGES = ("dispatch", "combine", "combine_grad", "dispatch_grad")
SRC_IDX_BYTES = 4  # DeepEP intranode: channel_src_idx_buffers[slot] = static_cast<int>(token_idx), every exchange
TOPK_IDX_BYTES = 8  # DeepEP intranode: topk_idx_t, int64 (EP_NUM_TOPK_IDX_BITS 64 by default)
TOPK_IDX_BYTES_INTERNODE = 4  # DeepEP internode: get_num_bytes_per_token's num_topk_idx * sizeof(int)
TOPK_WEIGHT_BYTES = 4  # fp32 weights (and their gradients): 'DeepEP only supports float32 probs'
SOURCE_META_BYTES = 8  # DeepEP internode: struct SourceMeta { int src_rdma_rank, is_token_in_nvl_rank_bits; }
MESSAGE_ALIGN = 16  # DeepEP internode: align_up(..., sizeof(int4))
PROB_BYTES = 4  # HybridEP: one fp32 probability per expert of the node


def message_bytes(model: Any, row_bytes: float, dispatcher: str, exchange: str, group: Any) -> float:
    """Bytes of one token copy in `exchange` (EXCHANGES) under `dispatcher`: the row of row_bytes and what DeepEP and
    HybridEP send beside it (module docstring, "Messages"); the all-to-all dispatcher: the row."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange: one of {', '.join(EXCHANGES)}, got {exchange!r}")  # a caller's bug, not user input
    k = model.moe.top_k
    if dispatcher == "deepep" and group.nodes == 1:  # the intranode kernels
        topk = {"dispatch": k * (TOPK_IDX_BYTES + TOPK_WEIGHT_BYTES), "dispatch_grad": k * TOPK_WEIGHT_BYTES}.get(exchange, 0)
        return row_bytes + SRC_IDX_BYTES + topk
    if dispatcher == "deepep":  # the internode kernels: one message size for the RDMA and the NVLink legs
        topk = {"dispatch": k * (TOPK_IDX_BYTES_INTERNODE + TOPK_WEIGHT_BYTES), "dispatch_grad": k * TOPK_WEIGHT_BYTES}.get(exchange, 0)
        return math.ceil((row_bytes + SOURCE_META_BYTES + topk) / MESSAGE_ALIGN) * MESSAGE_ALIGN
    if dispatcher == "hybridep" and exchange in ("dispatch", "dispatch_grad"):
        node_experts = model.moe.experts // group.size * group.per_node  # NUM_OF_EXPERTS_PER_RANK x NUM_OF_RANKS_PER_NODE
        return row_bytes + node_experts * PROB_BYTES
    return row_bytes


def exchange_time(model: Any, tokens: int, element_bytes: float, experts: ExpertShard, fabric: Any, group: Any,
                  exchange: str = "dispatch") -> float:  # fmt: skip
    """Seconds of one of a layer's exchanges (EXCHANGES) of T k rho copies per rank (DeepEP, HybridEP: T D rho) of h
    elements of `element_bytes` each and what the dispatcher sends beside them (message_bytes)."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, node_forwarded_exchange

    moe = model.moe
    rho = moe.busiest_share(experts.imbalance)
    per_token = float(moe.top_k)  # the all-to-all sends a copy per expert
    if experts.dispatcher != "alltoall":  # DeepEP, HybridEP: one copy per destination rank (module docstring)
        per_token = ranks_per_token(moe.experts, moe.top_k, group.size, group.nodes, experts.max_nodes_per_token, experts.routing)
    message = message_bytes(model, model.hidden * element_bytes, experts.dispatcher, exchange, group)
    copies = tokens * per_token * rho * message
    if experts.dispatcher == "alltoall" or group.nodes == 1:
        return collective_time(Collective.ALL_TO_ALL, copies, group, fabric).time
    remote = remote_nodes_per_token(moe.experts, moe.top_k, group.nodes, experts.max_nodes_per_token, experts.routing)
    # Over NVLink: every copy but those for this GPU's own slot of a node, (g - 1)/g of them, either sent
    # to a GPU of this node or forwarded by the receiving rank to its node mate (tests/ground_truth:
    # node_limited_worker counts the messages with gloo).
    per_node = group.per_node
    return node_forwarded_exchange(tokens * rho * remote * message, copies * (per_node - 1) / per_node, fabric)


@frozen
class ExchangeTimes:
    """One MoE layer's dispatch and combine for one micro-batch, seconds."""

    forward: float  # dispatch + combine (and the expert-TP gather/scatter)
    backward: float  # their gradients
    dispatch_bytes: float  # per rank, one dispatch: T k h e, or T D m for DeepEP / HybridEP (one copy a destination rank, m its message)


def layer_exchange(model: Any, tokens: int, activation_bytes: float, fp8_dispatch: bool, experts: ExpertShard, fabric: Any,
                   gpus_per_node: int) -> ExchangeTimes:  # fmt: skip
    """Dispatch + combine of one MoE layer, forward and backward (module docstring); fp8_dispatch: FP8 training on a stack
    whose DeepEP dispatch sends FP8 (Framework.fp8_dispatch)."""
    from parcalc.core.choices import Collective
    from parcalc.core.timing.network import collective_time, placement

    if model.moe is None or experts.ep * experts.etp == 1:
        return ExchangeTimes(0.0, 0.0, 0.0)
    dispatch_e = FP8_DISPATCH_BYTES if fp8_dispatch and experts.dispatcher == "deepep" else activation_bytes
    rows, local = routed_rows(model, tokens, experts)
    if experts.ep > 1:
        group = placement(experts.ep, experts.etp, gpus_per_node)
        dispatch = exchange_time(model, tokens, dispatch_e, experts, fabric, group, "dispatch")
        combine = exchange_time(model, tokens, activation_bytes, experts, fabric, group, "combine")
        grads = (exchange_time(model, tokens, activation_bytes, experts, fabric, group, "combine_grad")
                 + exchange_time(model, tokens, activation_bytes, experts, fabric, group, "dispatch_grad"))  # fmt: skip
    else:
        dispatch = combine = grads = 0.0
    if experts.etp > 1:  # the expert-TP group gathers its ranks' tokens, and reduce-scatters the outputs
        gathered = rows * local * model.hidden * activation_bytes
        etp_group = placement(experts.etp, 1, gpus_per_node)
        pair = (collective_time(Collective.ALL_GATHER, gathered, etp_group, fabric).time
                + collective_time(Collective.REDUCE_SCATTER, gathered, etp_group, fabric).time)  # fmt: skip
    else:
        pair = 0.0
    per_token, message = float(model.moe.top_k), model.hidden * dispatch_e
    if experts.ep > 1:
        message = message_bytes(model, message, experts.dispatcher, "dispatch", group)
        if experts.dispatcher != "alltoall":
            per_token = ranks_per_token(model.moe.experts, model.moe.top_k, group.size, group.nodes, experts.max_nodes_per_token,
                                        experts.routing)
    bytes_out = tokens * per_token * message
    return ExchangeTimes(dispatch + combine + pair, grads + pair, bytes_out)


def exposed_per_layer(exchange: ExchangeTimes, compute_forward: float, compute_backward: float, shared_forward: float,
                      shared_backward: float, overlap: str, sms: int, replay: bool, dispatcher: str = "deepep") -> tuple[float, float]:  # fmt: skip
    """(exposed with a partner micro-batch, exposed alone) per MoE layer and micro-batch, the SM
    cost of what hides included (the dispatcher's COMM_SMS of the GPU's `sms`); replay: full recomputation runs the
    forward exchange again."""
    a_f = exchange.forward * (2 if replay else 1)
    a_b = exchange.backward
    alone = a_f + a_b
    if overlap == "none" or alone == 0.0:
        return alone, alone
    share = COMM_SMS[dispatcher] / sms if sms else 0.0
    if overlap == "shared":
        exposed = max(0.0, a_f - shared_forward * (2 if replay else 1)) + max(0.0, a_b - shared_backward)
        return exposed + (alone - exposed) * share, exposed + (alone - exposed) * share
    paired = max(0.0, a_f - compute_backward) + max(0.0, a_b - compute_forward)
    return paired + (alone - paired) * share, alone


GEMMS_PER_EXPERT = (2, 4)  # forward: fc1, fc2; backward: the dgrad and wgrad of each (TE GroupedLinear, module docstring)
EXPERT_HOST_SOURCE = ("Megatron-LM @d98e8a64 moe/token_dispatcher.py (_maybe_dtoh_and_synchronize: the tokens per expert copied "
                      "to the host and waited for in every MoE layer) and Transformer Engine @d0067d0d GroupedLinear (host "
                      "m_splits, one cuBLASLt GEMM per local expert in a host loop: multi_stream_cublas_gemm)")  # fmt: skip


def expert_host_exposed(local: int, per_gemm: float, experts_forward: float, layer_backward: float) -> tuple[float, float]:
    """(forward, backward) seconds one MoE layer's GPU waits, per micro-batch, for the host issuing its `local` experts'
    GEMMs one by one at `per_gemm` seconds each (module docstring): forward after the dispatcher's sync, against the
    experts' own GPU time; backward against the whole layer's backward GPU time."""
    if per_gemm <= 0.0 or local < 1:
        return 0.0, 0.0
    forward, backward = (local * n * per_gemm for n in GEMMS_PER_EXPERT)
    return max(0.0, forward - experts_forward), max(0.0, backward - layer_backward)


def unpaired_micro_batches(p: int, v: Any, m: Any) -> Any:
    """Micro-batches of the first stage whose forward (and backward) has no partner under 1F1B
    overlap: the warm-up forwards, p - 1 (1F1B) or (2 (p - 1) + (v - 1) p) / v interleaved
    (Megatron-LM's get_forward_backward_func warm-up of rank 0), at least the first; at most m."""
    import numpy as np

    warm = np.where(np.asarray(v) > 1, (2 * (p - 1) + (np.asarray(v) - 1) * p) / np.asarray(v), p - 1)
    return np.minimum(np.maximum(warm, 1.0), m)
