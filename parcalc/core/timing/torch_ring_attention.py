"""PyTorch's experimental ring attention (torch.distributed.tensor.experimental context_parallel), as torchtitan runs it:
what one layer's ring adds to the attention kernels on one context-parallel rank, per micro-batch.

torchtitan (9dec370, Dec 2024) wraps forward, loss and backward in torch's context_parallel (train.py:269-302), over
`sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION])` (utils.py get_train_context), with the rotate method of
--experimental.context_parallel_rotate_method, 'allgather' by default (config_manager.py; set_rotate_method). Its Llama
repeats K and V to the query heads before SDPA (torchtitan/models/llama/model.py:201-209, repeat_kv), so the ring moves
K/V of all `heads / tp` heads, not the kv_heads ones: B_ring = 2 b (s/cp) (heads/tp) d e.

What the ring runs (TORCH_RING): the sequence in 2cp chunks, rank r holding r and 2cp - 1 - r (the round-robin load
balancer); step 0 a causal SDPA over the rank's shard, steps 1 .. cp-1 a full-rectangle SDPA over either all queries
against the first half of the received keys (i <= r) or the second half of the queries against all of them (i > r),
every step the same score pairs, which parcalc's attention kernel already counts. Beside those kernels:
- the exchanges. allgather: key and value concatenated and all-gathered once per ring (a buffer of cp x B_ring);
  alltoall: the concatenation permuted to the next rank at each of the cp - 1 steps (`permute_tensor`, an
  all_to_all_single with one peer). Backward: the K/V exchanged again the same way, and the dK/dV accumulated in fp32
  (convert_to_f32: `accum_dtype = torch.float32`) concatenated and permuted to the next rank at every one of the cp
  steps, 2 B_ring bytes each (fp32 of the bf16 K/V);
- the merge of each step's output into the running one by its log-sum-exp in fp32 (_SDPAMerger: the output cast to fp32,
  out - sigmoid(lse_b - lse) * (out - out_b), lse - logsigmoid(lse - lse_b); the partial steps' merged half written back
  by torch.cat), the K/V made contiguous and concatenated, and in backward the fp32 accumulations of dQ, dK, dV, their
  concatenations and the final casts back to bf16 (ring_merge_bytes).

Overlap, as the code orders it:
- eager: the all-gather is issued before step 0's SDPA and waited for at step 1 (exposed: max(0, t_gather - one step's
  attention)); a permuted block is waited for one step later (exposed max(0, t_send - one step)); backward's dK/dV sent at
  the end of step i is waited for after step i + 1's SDPA backward, and the last one after the loop, whole.
- torch.compile (the ring traced into each block's graph: parcalc.core.memory_torchtitan_cp_compile): the generated code
  waits for each collective right after issuing it (tests/fixtures/torchtitan_cp/inductor_bf16_{none,full}_cp{2,4,8}.log:
  `all_gather_into_tensor` then `wait_tensor` before the first SDPA; each dK/dV `all_to_all_single` then `wait_tensor`
  before the next kernel), so every exchange is on the critical path; under full checkpointing the backward's K/V
  gather is the recomputed forward's (one all-gather, common-subexpression-eliminated), without it the forward's saved
  one (under Float8 and full checkpointing Inductor slips up to two kernels, a dQ accumulation or an FP8 cast and one
  projection GEMM of the backward, between a dK/dV send and its wait: not subtracted). The merges are fused: one kernel a forward step (reading the running fp32 output and the step's bf16 one, writing
  the merged fp32 output), one add-and-concatenate a backward step, the K/V written once into their concatenation.

The ring's structure is the same in torch 2.13 (torch/distributed/tensor/experimental/_context_parallel/_attention.py,
which the ground truth runs on the CPU) as at the Dec 2024 commit of the TorchTitan table (1963fc8, between
set_rotate_method, pytorch/pytorch#142093 of 2024-12-09, and torch 2.6): the stored Dec 2024 file
(torch/distributed/tensor/experimental/_attention.py with `_RotateMethod.ALL_GATHER` as the default and set_rotate_method's
'after the first sub-SDPA computation') has the same loop, merger and backward. The compiled ordering was read from torch
2.13's Inductor on the CPU, not from the GPU code of Dec 2024.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from parcalc.core.choices import Collective, Recompute
from parcalc.core.context import CpComm, cp_comm_of

TORCH_RING = ("pytorch/pytorch torch/distributed/tensor/experimental/_attention.py (Dec 2024, the stored version with "
              "set_rotate_method) = v2.13.0 _context_parallel/_attention.py: _templated_ring_attention, _SDPAMerger, "
              "_templated_ring_attention_backward, _AllGatherRotater / _AllToAllRotater, _ContextParallelOptions(convert_to_f32="
              "True, enable_load_balance=True, rotate_method=ALL_GATHER)")  # fmt: skip
TORCHTITAN_CP = ("pytorch/torchtitan 9dec370 train.py:269-302 (context_parallel around forward and backward), utils.py "
                 "create_context_parallel_ctx (set_rotate_method, default 'allgather': config_manager.py), "
                 "models/llama/model.py:201-209 (repeat_kv before F.scaled_dot_product_attention)")  # fmt: skip
COMPILED_ORDER = ("tests/fixtures/torchtitan_cp/inductor_bf16_{none,full}_cp{2,4,8}.log (torch 2.13 Inductor's code of the "
                  "traced ring): wait_tensor right after each all_gather_into_tensor and all_to_all_single")  # fmt: skip
FP32 = 4.0  # bytes of the ring's fp32 merges and accumulations (convert_to_f32)


def torch_rotate(cp_comm: object) -> str:
    """torch's rotate method for a --cp-comm: all-gather -> 'allgather' (torchtitan's default), p2p -> 'alltoall' (a ring of
    permutes); a2a (Ulysses) is not a rotate method of torch's ring (parcalc.core.memory_fsdp refuses it too)."""
    comm = cp_comm_of(cp_comm)
    return {CpComm.ALL_GATHER: "allgather", CpComm.P2P: "alltoall"}.get(comm, "")


def ring_elements(model: Any, micro_batch: int, seq_len: int, layout: Any) -> float:
    """E: elements of one CP rank's queries (= of its repeated keys, = of its values) on one TP rank: b (s/cp) (heads/tp) d."""
    return micro_batch * (seq_len / layout.cp) * (model.heads / layout.tp) * model.head_dim


def ring_kv_bytes(model: Any, micro_batch: int, seq_len: int, layout: Any, element_bytes: float) -> float:
    """B_ring: the K/V one rank passes on, K and V repeated to the query heads (torchtitan's repeat_kv): 2 E e."""
    return 2.0 * ring_elements(model, micro_batch, seq_len, layout) * element_bytes


def _step_queries(cp: int, rank: int, step: int) -> float:
    """The share of the rank's queries step `step` computes: all at step 0 and where i <= rank, the second half where i > rank."""
    return 1.0 if step == 0 or step <= rank else 0.5


def ring_merge_bytes(cp: int, rank: int, head_dim: int, compiled: bool, element_bytes: float = 2.0,
                     kv_share: float = 1.0) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one ring's element-wise kernels on CP rank `rank`, per element of E (multiply by E).

    Eager (one kernel per ATen op of TORCH_RING; the log-sum-exp's ops, E / d elements, counted with their 1/d):
    - forward: key and value made contiguous (2 copies of E, bf16), K/V concatenated at steps 0 .. cp-2 (a copy of 2E);
      step 0's output cast to fp32; each later step of n = E or E/2 queries: cast (2 + 4) n, out - out_b (12 n),
      sigmoid(.) * (.) (8 n + 4 L), out - (.) (12 n), and on the log-sum-exp (L = n / d): block_lse - lse (12 L),
      sigmoid (8 L), lse - block_lse (12 L), logsigmoid (8 L), lse - (.) (12 L); a partial step (i > rank) then writes
      the whole running output and log-sum-exp back (torch.cat: read and write 4 E and 4 E/d); the result cast to bf16.
    - backward: zeros for dQ, dK, dV (fp32), key and value made contiguous again, K/V concatenated at steps 0 .. cp-2;
      each step: dQ += dq_step (10 E) or, partial, into its second half (5 E) and torch.cat (8 E), the last half's
      log-sum-exp made contiguous (4 L); dK and dV += (10 E each) or, at steps 1 .. rank, into their first half (5 E) and
      torch.cat (8 E) each; dK/dV concatenated for the send (16 E), at step 0 after flatten() has copied them (16 E: the
      zeros_like of the key that torchtitan passes transposed keeps its strides); at the end dQ cast to bf16 (6 E) and the received
      dK/dV cast to bf16 (12 E).
    Compiled (Inductor's fused kernels, COMPILED_ORDER's code): the K/V written once more into their concatenation (2 E e,
    read from the K/V before repeat_kv: `kv_share` = kv_heads / heads of that); each forward step i >= 1 reads the running fp32 output (step 1: step 0's bf16) and the step's
    bf16 output and writes the merged fp32 output (8 E + 2 n; 6 E + 2 n at step 1); the last also the bf16 result (2 E);
    each backward step adds the step's bf16 dK, dV into the received fp32 dK/dV and writes their concatenation (16 E + 4 n_k,
    step 0 from zeros: 8 E + 4 E), the dQ parts summed once (2 n per step read, 2 E written), the received dK/dV cast (12 E).
    """
    e, d = element_bytes, float(head_dim)
    steps = range(cp)
    if compiled:
        forward = 2 * e * (1 + kv_share)  # K/V written into their concatenation (2E e), read before repeat_kv (kv_heads/heads of it)
        for i in steps[1:]:
            n = _step_queries(cp, rank, i)
            forward += (6.0 if i == 1 else 8.0) + 2 * n
        forward += 2.0  # the result in bf16
        backward = 0.0
        for i in steps:
            n_k = 0.5 if 0 < i <= rank else 1.0  # keys of this step: the first half of the received ones at 1 <= i <= rank
            backward += (12.0 if i == 0 else 16.0 + 4 * n_k)
            backward += 2 * _step_queries(cp, rank, i)  # this step's dQ read by the sum
        backward += 2.0 + 12.0
        return forward, backward
    lse = 1.0 / d  # log-sum-exp elements per output element
    copies = 2 * (2 * e)  # key.contiguous(), value.contiguous(): read and write E each
    cats = (cp - 1) * 2 * (2 * e)  # torch.cat([key.flatten(), value.flatten()]) at i < cp - 1
    forward = copies + cats + (e + FP32)  # step 0's output cast to fp32
    for i in steps[1:]:
        n = _step_queries(cp, rank, i)
        forward += (e + FP32) * n + 12 * n + (8 * n + 4 * lse * n) + 12 * n + (12 + 8 + 12 + 8 + 12) * lse * n
        if i > rank:  # _partial_update: torch.cat of the running output and log-sum-exp
            forward += 8 + 8 * lse
    forward += FP32 + e  # results(): the output back to bf16
    backward = 3 * FP32 + copies + cats  # zeros_like x 3 in fp32, contiguous copies, K/V concatenations
    for i in steps:
        partial = i > rank
        backward += (5 + 8 + 4 * lse) if partial else 10.0  # dQ (and the half log-sum-exp made contiguous)
        if 0 < i <= rank:
            backward += 2 * (5 + 8)  # dK, dV into their first half, then torch.cat
        else:
            backward += 2 * 10.0
        backward += 2 * (2 * FP32)  # torch.cat of dK and dV (fp32) for the send
        if i == 0:  # zeros_like(key) kept the transposed key's strides: flatten() copies dK and dV before the cat
            backward += 2 * (2 * FP32)
    backward += (FP32 + e) + 2 * (FP32 + e)  # dQ to bf16, the received dK/dV to bf16
    return forward, backward


@lru_cache(maxsize=256)
def busiest_merge_bytes(cp: int, head_dim: int, compiled: bool, element_bytes: float, kv_share: float) -> tuple[float, float]:
    """(forward, backward) ring_merge_bytes of the rank with the most, each pass on its own (a search asks once per shape)."""
    merges = [ring_merge_bytes(cp, r, head_dim, compiled, element_bytes, kv_share) for r in range(cp)]
    return max(f for f, _ in merges), max(b for _, b in merges)


def torch_ring_layer_time(model: Any, micro_batch: int, seq_len: int, layout: Any, element_bytes: float, attention_forward: float,
                          attention_backward: float, recompute: Any, compiled: bool, gpus_per_node: int, fabric: Any,
                          spec: Any) -> tuple[float, float]:  # fmt: skip
    """(time, exposed time) of what one layer's ring adds for one micro-batch on the busiest CP rank, seconds: its exchanges
    (time: all of them; exposed: by the overlap rules of the module docstring) and its merge kernels (on the compute
    stream: exposed whole). attention_forward / attention_backward: this rank's attention kernels of that layer (cp steps of
    equal work: one step is 1/cp of them)."""
    from parcalc.core.timing.kernels import memory_op
    from parcalc.core.timing.network import collective_time, placement

    cp = layout.cp
    if cp <= 1:
        return 0.0, 0.0
    rotate = torch_rotate(layout.cp_comm)
    group = placement(cp, layout.tp, gpus_per_node)
    kv = ring_kv_bytes(model, micro_batch, seq_len, layout, element_bytes)
    step_f, step_b = attention_forward / cp, attention_backward / cp
    replay = recompute is Recompute.FULL
    send_grads = collective_time(Collective.POINT_TO_POINT, kv * FP32 / element_bytes, group, fabric).time
    if rotate == "allgather":
        gather = collective_time(Collective.ALL_GATHER, cp * kv, group, fabric).time
        if compiled:  # forward (and its replay) and, without a replay, the backward's gather is the forward's saved one
            forward_total = forward_exposed = gather
            backward_total = backward_exposed = 0.0
        else:
            forward_total, forward_exposed = gather, max(0.0, gather - step_f)
            backward_total, backward_exposed = gather, max(0.0, gather - step_b)
    else:
        send = collective_time(Collective.POINT_TO_POINT, kv, group, fabric).time
        forward_total = (cp - 1) * send
        forward_exposed = forward_total if compiled else (cp - 1) * max(0.0, send - step_f)
        backward_total = forward_total
        backward_exposed = forward_total if compiled else (cp - 1) * max(0.0, send - step_b)
    grads_total = cp * send_grads
    grads_exposed = grads_total if compiled else (cp - 1) * max(0.0, send_grads - step_b) + send_grads
    elements = ring_elements(model, micro_batch, seq_len, layout)
    per_element_f, per_element_b = busiest_merge_bytes(cp, model.head_dim, compiled, element_bytes, model.kv_heads / model.heads)
    merge_f = memory_op("cp.ring.merge", elements * per_element_f, spec).time
    merge_b = memory_op("cp.ring.merge.bwd", elements * per_element_b, spec).time
    passes = 2 if replay else 1
    total = passes * (forward_total + merge_f) + backward_total + grads_total + merge_b
    exposed = passes * (forward_exposed + merge_f) + backward_exposed + grads_exposed + merge_b
    return total, exposed
