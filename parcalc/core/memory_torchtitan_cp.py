"""torchtitan's context parallelism in the step walk: one CP rank's ring attention, tensor by tensor.

torchtitan (9dec370) runs forward, loss and backward under torch's context_parallel (CP_SOURCES['torchtitan']): the batch
and the freqs_cis buffer are sharded over the sequence, so every block runs on s / cp tokens of each sequence (the
load balancer's head-tail chunks for causal masks), and SDPA becomes torch's ring attention over the CP group
(CP_SOURCES['ring']). The parameters are sharded by fully_shard over dp x cp ranks. What the ring allocates, on CP rank 0
(the rank whose every step after the first takes the second half of its queries and merges it back with two torch.cat
copies: the largest of the ranks; rank 0's peak is the tracker's largest in the ground truth):

- forward: key and value made contiguous (copies of repeat_kv's transposed outputs), the K/V concatenated and, under the
  allgather rotate method (torchtitan's default), all-gathered once: cp x the rank's K/V alive through the ring (under
  alltoall, permuted to the next rank every step: this step's received block and the last one alive); each
  step's SDPA output (bf16) and logsumexp, the output cast to fp32 (convert_to_f32) and merged into the running fp32
  output and logsumexp by _SDPAMerger (out - sigmoid(lse_b - lse) * (out - out_b): its temporaries), the partial steps'
  merged halves written back by torch.cat; the merged output cast back to bf16 is what the attention saves, with the
  merged logsumexp;
- backward: fp32 zeros for dq, dk, dv, key and value made contiguous again, the K/V all-gathered again, each step's
  SDPA backward (bf16 dq, dk, dv), the fp32 dK/dV concatenated and rotated to the next rank (all-to-all permute: a new
  buffer each step, the received one alive until the next), dq's partial steps merged by torch.cat; at the end dq cast
  to bf16 and the received dK/dV cast to bf16 (one buffer for both).

With tensor parallelism (CP_SOURCES['tp']) the ring runs inside memory_torchtitan_tp's block on the TP rank's local heads over
the CP shard's whole sequence (the logsumexp and the fp32 merge buffers of heads / tp); inside pipeline stages
(CP_SOURCES['pp']) each micro-batch's blocks run it as they do without stages, and context_parallel holds the stage's ids and
labels of all its micro-batches.

Ground truth: FSDPMemTracker over torchtitan's code under torch's context_parallel and its ring attention on fake ranks
(tests/ground_truth/tiny_torchtitan_cp.py, test_torch_memory_torchtitan_cp.py; with TP tiny_torchtitan_cp_tp.py,
test_torch_memory_torchtitan_cp_tp.py; in pipeline stages tiny_torchtitan_pp.py's `cp`, test_torch_memory_pipeline_cp.py).
"""

from __future__ import annotations

from typing import Protocol

from parcalc.core.memory_walk import StepShapes, Walk


class BlockAllocations(Protocol):
    """What the ring needs of the block it runs in (memory_torchtitan.BlockWalk, which calls the ring: named by its shape
    here so that this module does not import back up into the walk that imports it)."""

    walk: Walk
    x: StepShapes  # the rank's shapes: under apply_tp its local heads (memory_torchtitan_tp)
    k: str  # the block's key prefix
    saving: bool  # autograd keeps what the ops save
    held: set[str]  # keys autograd or checkpointing keeps

    def alloc(self, name: str, size: float, what: str, saved: bool) -> str: ...

ATTENTION = "pytorch/pytorch v2.13.0 torch/distributed/tensor/experimental/_context_parallel/_attention.py"
CP_SOURCES = {
    "torchtitan": ("pytorch/torchtitan at 9dec370 train.py: train_context(optional_context_parallel_ctx) around model(input_ids), "
                   "loss_fn, del pred, loss.backward(); utils.py create_context_parallel_ctx: set_rotate_method(config_manager.py "
                   "--experimental.context_parallel_rotate_method, default 'allgather'; 'alltoall' the other), "
                   "context_parallel(cp_mesh, buffers=[input_ids, labels, model.freqs_cis], buffer_seq_dims=[1, 1, 0]); parallelize_llama.py apply_fsdp over world_mesh['dp_cp'] (the CP ranks shard "
                   "the parameters too)"),
    "ring": (f"{ATTENTION}: _templated_ring_attention (key / value .contiguous(), torch.cat of K and V, _AllGatherRotater: one "
             "all_gather_single, chunks of it each step; load balance: step 0 causal over the whole shard, later steps on rank r "
             "the first half of the keys (i <= r) or the second half of the queries, partial (i > r)), _SDPAMerger "
             "(convert_to_f32: each output cast to fp32, out - sigmoid(block_lse - lse) * (out - block_out), "
             "lse - logsigmoid(lse - block_lse), _partial_update: torch.cat of the chunks; results() casts the output back), "
             "_templated_ring_attention_backward (zeros_like in fp32 for dq, dk, dv, the K/V all-gathered again, dK/dV "
             "concatenated and rotated by _AllToAllRotater's permute_tensor every step, dq merged, dq and the received dK/dV "
             "cast back at the end), _ContextParallelOptions defaults (convert_to_f32, enable_load_balance, ALL_GATHER); "
             "set_rotate_method('alltoall'): _AllToAllRotater, permute_tensor of the K/V to the next rank every step"),
    "tp": ("pytorch/torchtitan at 9dec370 torchtitan/parallelisms/parallelize_llama.py apply_tp (lines 117-199): wq / wk / wv "
           "colwise_parallel() with use_local_output left True (torch/distributed/tensor/parallel/style.py ColwiseParallel): plain "
           "tensors of the rank's heads, which model.py's Attention views as (bs, seqlen, -1, head_dim), so F.scaled_dot_product_attention, "
           "which context_parallel replaces by the ring over world_mesh['cp'], runs on the TP rank's local heads over the CP shard's "
           "tokens; the sequence is sharded over CP by context_parallel before the embedding and over TP by sequence parallel within it "
           "(the embedding's RowwiseParallel(output_layouts=Shard(1)))"),
    "pp": ("pytorch/torchtitan at 9dec370 train.py:269-292: create_context_parallel_ctx(cp_buffers=[input_ids, labels, "
           "model.freqs_cis]) around pp_schedule.step(...), `model` the whole Transformer built under torch.device('meta') "
           "(train.py:110) and deep-copied into the stages (parallelisms/pipeline_llama.py:76): its freqs_cis has no device "
           "storage, each stage's own stays whole (model.py reshape_for_broadcast slices freqs_cis[0:seqlen], a view); the ids and "
           "labels are the stage's whole local batch (all its micro-batches); PipelineStage infers the stage's I/O at run time: "
           "b x s / cp / tp x hidden"),
    "buffers": (f"{ATTENTION} context_parallel: the buffers cloned for restoring (not the no-restore ones: freqs_cis is), each "
                "shard cloned, then buffer.resize_(shard.shape) and copy_ (resize_ to a smaller shape keeps the storage)"),
}


def context_parallel_buffers(walk: Walk, x: StepShapes, seq_len: int, head_dim: int, stage_micro_batches: int = 0) -> None:
    """What context_parallel keeps of the batch and freqs_cis while the step runs (CP_SOURCES['buffers']): input_ids and labels
    resized in place to the rank's shard, their storages whole (b x s int64 each); the shards _context_parallel_buffers made
    (input_ids', labels' and freqs_cis's, held by its `shards` list in the generator's frame) and the last clone of them (freqs_cis's);
    freqs_cis cloned whole to restore it (the buffer itself keeps its whole storage: the walk's 'freqs_cis').
    `stage_micro_batches` > 0: a pipeline stage's step (CP_SOURCES['pp']): the ids and labels of all its micro-batches, and no
    freqs_cis of the device (the one context_parallel shards is the meta-device whole model's)."""
    micro_batches = stage_micro_batches or 1
    whole, rows = micro_batches * x.b * seq_len * 8, head_dim // 2 * 8  # int64 tokens; a complex64 row of freqs_cis
    walk.alloc("ids", whole, "activations", "input ids (int64; context_parallel's resize_ keeps the whole storage)")
    walk.alloc("labels", whole, "activations", "labels (int64; context_parallel's resize_ keeps the whole storage)")
    if not stage_micro_batches:
        walk.alloc("cp.freqs_restore", seq_len * rows, "activations", "freqs_cis cloned by context_parallel to restore it")
    walk.alloc("cp.ids_shard", micro_batches * x.T * 8, "activations", "context_parallel: the input ids' shard")
    walk.alloc("cp.labels_shard", micro_batches * x.T * 8, "activations", "context_parallel: the labels' shard")
    if stage_micro_batches:
        return
    walk.alloc("cp.freqs_shard", x.s * rows, "activations", "context_parallel: freqs_cis's shard")
    walk.alloc("cp.freqs_clone", x.s * rows, "activations", "context_parallel: freqs_cis's shard cloned (the loop's last `shard`)")


def ring_forward(b: BlockAllocations, x: StepShapes, q: int, keys: str, values: str, width: int) -> tuple[str, str]:
    """The ring's forward on CP rank 0 from the rank's q (`q` wide), keys and values (`width` wide, repeat_kv's copies or wk / wv's
    outputs); returns the keys of the saved merged output (bf16) and logsumexp (fp32). Under apply_tp the ring runs on the TP
    rank's local heads (b.x.heads: wq / wk / wv ColwiseParallel with use_local_output, CP_SOURCES['tp']) over the CP shard's
    whole sequence (x.T)."""
    walk, k, cp = b.walk, b.k, x.cp
    T, c = x.T, x.c
    kv = T * width * c
    out, out32, lse = T * q * c, T * q * 4, x.b * b.x.heads * x.s * 4
    walk.alloc(f"{k}.ring.kc", kv, "temporaries", "ring attention: key.contiguous()")
    walk.alloc(f"{k}.ring.vc", kv, "temporaries", "ring attention: value.contiguous()")
    previous = ""
    gathered = x.cp_rotate == "allgather"
    for i in range(cp):
        if i < cp - 1:
            walk.alloc(f"{k}.ring.cat", 2 * kv, "temporaries", "ring attention: torch.cat of K and V")
            if gathered and i == 0:
                walk.alloc(f"{k}.ring.ag", cp * 2 * kv, "temporaries", "ring attention: all-gathered K/V (allgather rotate)")
            elif not gathered:  # _AllToAllRotater: the K/V permuted to the next rank, a new buffer every step
                walk.alloc(f"{k}.ring.recv{i}", 2 * kv, "temporaries", "ring attention: K/V received (alltoall rotate)")
            walk.free(f"{k}.ring.cat")
        if i == 1:  # `q, k, v, partial = ...` rebinds the last names that held the contiguous copies
            walk.free(f"{k}.ring.kc", f"{k}.ring.vc")
        elif i > 1:  # ... or the K/V received two steps before
            walk.free(f"{k}.ring.recv{i - 2}")
        share = 1.0 if i == 0 else 0.5  # rank 0 after step 0: the second half of its queries
        walk.alloc(f"{k}.ring.o{i}", out * share, "temporaries", "ring attention: a step's SDPA output")
        walk.alloc(f"{k}.ring.l{i}", lse * share, "temporaries", "ring attention: a step's logsumexp")
        if previous:
            walk.free(f"{k}.ring.o{previous}", f"{k}.ring.l{previous}" if previous != "0" else "")
        walk.alloc(f"{k}.ring.o32_{i}", out32 * share, "temporaries", "ring attention: the step's output in fp32")
        if i == 0:
            walk.rename(f"{k}.ring.o32_0", f"{k}.ring.acc")
            walk.rename(f"{k}.ring.l0", f"{k}.ring.lacc")
        else:
            _merge_partial(walk, k, out32, lse, i)
        previous = str(i)
    attn = b.alloc("attn", out, "SDPA output (ring attention's merged output, bf16)", True)
    walk.free(f"{k}.ring.acc", f"{k}.ring.ag", f"{k}.ring.o{previous}", f"{k}.ring.l{previous}", f"{k}.ring.recv{cp - 2}")
    walk.rename(f"{k}.ring.lacc", f"{k}.lse", "SDPA logsumexp (ring attention's merged, fp32)", "activations" if b.saving else "temporaries")
    if b.saving:
        b.held.add(f"{k}.lse")
    return attn, f"{k}.lse"


def _merge_partial(walk: Walk, k: str, out32: float, lse: float, i: int) -> None:
    """_SDPAMerger._merge_one of a partial step: the second halves merged, then written back by torch.cat."""
    half, lhalf = out32 / 2, lse / 2
    walk.alloc(f"{k}.ring.t1", lhalf, "temporaries", "ring merge: block_lse - lse")
    walk.alloc(f"{k}.ring.t2", lhalf, "temporaries", "ring merge: sigmoid")
    walk.free(f"{k}.ring.t1")
    walk.alloc(f"{k}.ring.t3", half, "temporaries", "ring merge: out - block_out")
    walk.alloc(f"{k}.ring.t4", half, "temporaries", "ring merge: sigmoid x difference")
    walk.free(f"{k}.ring.t2", f"{k}.ring.t3")
    walk.alloc(f"{k}.ring.t5", half, "temporaries", "ring merge: the merged half")
    walk.free(f"{k}.ring.t4")
    walk.alloc(f"{k}.ring.t6", lhalf, "temporaries", "ring merge: lse - block_lse")
    walk.alloc(f"{k}.ring.t7", lhalf, "temporaries", "ring merge: logsigmoid")
    walk.free(f"{k}.ring.t6")
    walk.alloc(f"{k}.ring.t8", lhalf, "temporaries", "ring merge: the merged logsumexp half")
    walk.free(f"{k}.ring.t7")
    walk.alloc(f"{k}.ring.lacc+", lse, "temporaries", "ring merge: logsumexp written back (torch.cat)")
    walk.free(f"{k}.ring.t8", f"{k}.ring.lacc")
    walk.rename(f"{k}.ring.lacc+", f"{k}.ring.lacc")
    walk.alloc(f"{k}.ring.acc+", out32, "temporaries", "ring merge: output written back (torch.cat, fp32)")
    walk.free(f"{k}.ring.t5", f"{k}.ring.acc", f"{k}.ring.o32_{i}")
    walk.rename(f"{k}.ring.acc+", f"{k}.ring.acc")


def ring_backward(walk: Walk, x: StepShapes, k: str, width: int) -> None:
    """The ring's backward on CP rank 0 (the block's g_attn in hand): leaves dq as `{k}.g_q` and dK/dV, one bf16 buffer,
    as `{k}.g_k` (`{k}.g_v` a view of it, no storage of its own). Under apply_tp `x` is the rank's local heads' shapes."""
    T, c, q, cp = x.T, x.c, x.q, x.cp
    kv, q32, kv32, lse = T * width * c, T * q * 4, T * width * 4, x.b * x.heads * x.s * 4
    # zeros_like(query / key / value, dtype=float32): strided like the saved (transposed) inputs, so not contiguous
    walk.alloc(f"{k}.rb.gq", q32, "temporaries", "ring backward: dq accumulator (fp32 zeros)")
    walk.alloc(f"{k}.rb.gk", kv32, "temporaries", "ring backward: dk accumulator (fp32 zeros)")
    walk.alloc(f"{k}.rb.gv", kv32, "temporaries", "ring backward: dv accumulator (fp32 zeros)")
    walk.alloc(f"{k}.rb.kc", kv, "temporaries", "ring backward: key.contiguous()")
    walk.alloc(f"{k}.rb.vc", kv, "temporaries", "ring backward: value.contiguous()")
    for i in range(cp):
        if i != cp - 1:  # next_kv: the K/V concatenated (all-gathered once), held until the next concatenation
            walk.alloc(f"{k}.rb.cat{i}", 2 * kv, "temporaries", "ring backward: torch.cat of K and V")
            if i > 0:
                walk.free(f"{k}.rb.cat{i - 1}")
            if x.cp_rotate == "allgather" and i == 0:
                walk.alloc(f"{k}.rb.ag", cp * 2 * kv, "temporaries", "ring backward: all-gathered K/V")
            elif x.cp_rotate != "allgather":
                walk.alloc(f"{k}.rb.kv{i}", 2 * kv, "temporaries", "ring backward: K/V received (alltoall rotate)")
        share = 1.0 if i == 0 else 0.5  # rank 0 after step 0: the second half of its queries
        if i > 0:  # logsumexp.chunk(2)[1].contiguous()
            walk.alloc(f"{k}.rb.lse{i}", lse / 2, "temporaries", "ring backward: the logsumexp's second half (contiguous)")
            walk.free(f"{k}.rb.lse{i - 1}")
        if i == 1:  # `q, k, v, out_, dout, lse = ...` rebinds the last names that held the contiguous copies
            walk.free(f"{k}.rb.kc", f"{k}.rb.vc")
        elif i > 1:  # ... or the K/V received two steps before
            walk.free(f"{k}.rb.kv{i - 2}")
        walk.alloc(f"{k}.rb.dq{i}", T * q * c * share, "temporaries", "ring backward: a step's dq (bf16)")
        walk.alloc(f"{k}.rb.dk{i}", kv, "temporaries", "ring backward: a step's dk (bf16)")
        walk.alloc(f"{k}.rb.dv{i}", kv, "temporaries", "ring backward: a step's dv (bf16)")
        if i > 0:
            walk.free(f"{k}.rb.dq{i - 1}", f"{k}.rb.dk{i - 1}", f"{k}.rb.dv{i - 1}")
            # next_grad_kv rebound to the received dK/dV (the previous concatenation goes), grad_key / grad_value to views
            # of it (the accumulators, or the dK/dV received a step earlier, go)
            walk.free(f"{k}.rb.send{i - 1}", f"{k}.rb.gk", f"{k}.rb.gv", f"{k}.rb.recv{i - 2}")
            walk.alloc(f"{k}.rb.send{i}", 2 * kv32, "temporaries", "ring backward: torch.cat of dK and dV (fp32)")
        else:  # flatten() of the strided accumulators copies them before the concatenation
            walk.alloc(f"{k}.rb.gk_flat", kv32, "temporaries", "ring backward: dk.flatten() (a copy)")
            walk.alloc(f"{k}.rb.gv_flat", kv32, "temporaries", "ring backward: dv.flatten() (a copy)")
            walk.alloc(f"{k}.rb.send0", 2 * kv32, "temporaries", "ring backward: torch.cat of dK and dV (fp32)")
            walk.free(f"{k}.rb.gk_flat", f"{k}.rb.gv_flat")
        walk.alloc(f"{k}.rb.recv{i}", 2 * kv32, "temporaries", "ring backward: dK/dV rotated (all-to-all permute)")
        if i > 0:  # dq's partial update: torch.cat of its chunks
            walk.alloc(f"{k}.rb.gq+", q32, "temporaries", "ring backward: dq written back (torch.cat, fp32)")
            walk.free(f"{k}.rb.gq")
            walk.rename(f"{k}.rb.gq+", f"{k}.rb.gq")
    walk.alloc(f"{k}.g_q", T * q * c, "temporaries", "SDPA backward dq (ring, bf16)")
    walk.alloc(f"{k}.g_k", 2 * kv, "temporaries", "SDPA backward dk and dv (ring: the received dK/dV in bf16)")
    walk.free(*(key for key in list(walk.live) if key.startswith(f"{k}.rb.")))
