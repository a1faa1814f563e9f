"""Tensor parallelism (Megatron) and sequence parallelism: the collectives inside the layers, at
the embedding and at the LM head.

- TP (Megatron): two all-reduces of b x s x h per layer in forward (after the attention and MLP
  row-parallel matmuls) and two in backward (the conjugate `f` operators before the
  column-parallel ones) (Shoeybi et al. 2019, sec. 3, fig. 4).
- SP: each all-reduce becomes an all-gather and a reduce-scatter of the same size (Korthikanti
  et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, sec. 4.2.2).
  Each column-parallel linear (Q/K/V, MLP up, and the LM head when vocabulary-parallel) keeps
  only its sequence shard of the input for backward and all-gathers it again there to compute
  its weight gradient ("we store only the Y_i^s part ... and perform an extra all-gather in the
  backward pass", ibid.). Megatron-LM, megatron/core/tensor_parallel/layers.py,
  LinearWithGradAccumulationAndAsyncCommunication (core_v0.9.0): forward saves the shard
  (`ctx.save_for_backward(input, weight)`, line 392) and gathers it into a shared buffer
  (400-409); backward gathers it again with `async_op=True` (433-447), computes
  `grad_input = grad_output.matmul(weight)` meanwhile (450), waits (452-453), then computes the
  weight gradient from the gathered input (481-517). Per layer that is 6 all-gathers and 4
  reduce-scatters, not 4 and 4. Full recomputation replays the forward's 2 and 2 and still
  re-gathers in backward: the recomputed forward runs the same function, which saves the shard
  again. The gradients of norms and row-parallel biases, computed on a slice of the sequence, are
  all-reduced over the TP group (megatron/core/distributed/finalize_model_grads.py,
  _allreduce_layernorm_grads / _allreduce_non_tensor_model_parallel_grads).
- Vocabulary-parallel embedding and loss with TP (Megatron, `vocab_parallel`): an all-reduce of
  the embedding output, one of the LM head input's gradient, and three of b x s fp32 values in
  the cross-entropy (megatron/core/tensor_parallel/cross_entropy.py).
"""

from collections import Counter
from typing import Any

from parcalc.core.collectives import Collective
from parcalc.core.comm.plan import (
    Builder,
    Group,
    Layout,
    Options,
    Workload,
    headline,
    rank_of,
    term,
)
from parcalc.core.comm.tensors import Split, StageTensors
from parcalc.core.model import TransformerModel
from parcalc.derivation import Derivation, Term

CROSS_ENTROPY_BYTES = 4.0  # Megatron's vocab-parallel cross-entropy reduces fp32 values
REGATHER = "activations (sequence-parallel, re-gathered for the weight gradient)"
MAMBA_TP = ("Megatron-LM megatron/core/ssm/mamba_mixer.py @d98e8a64: in_proj a ColumnParallelLinear (gather_output=False, "
            "lines 280-295), out_proj row-parallel (input_is_parallel=True, lines 437-451), the conv1d, scan and gated norm on "
            "the rank's heads between them; mamba_layer.py MambaLayer: norm, mixer, residual (one block a layer)")


def tensor_parallel_rows(b: Builder, model: TransformerModel, work: Workload, par: Layout, opts: Options,
                          layers: tuple[int, ...], per_stage: list[StageTensors], micro_batches: int) -> None:  # fmt: skip
    n = par.tp
    if n < 2:
        return
    activation = work.micro_batch * work.seq_len * model.hidden * work.bytes_per_element
    repeat = 2 if opts.recompute else 1  # recomputation replays the forward collectives in backward
    for stage, held in enumerate(layers):
        groups = [Group(rank_of(par, 0, d, stage, c), rank_of(par, n - 1, d, stage, c)) for d in range(par.dp) for c in range(par.cp)]
        label = f"stage {stage}" if par.pp > 1 else ""
        common: dict[str, Any] = {"dimension": "tp", "group_size": n, "groups": groups, "stages": label, "roles": ((stage, True),)}
        # two per transformer layer per micro-batch (attention, MLP); one per block of a Mamba-2 hybrid (TP_SITES_PER_BLOCK)
        per_pass = model.tp_sites_per_layer * held * micro_batches
        if par.sequence_parallel:
            for phase, count in (("forward", per_pass * repeat), ("backward", per_pass)):
                b.add(purpose="activations (sequence-parallel)", phase=phase, op=Collective.ALL_GATHER,
                      call_bytes={activation: count}, **common)  # fmt: skip
                b.add(purpose="activations (sequence-parallel)", phase=phase, op=Collective.REDUCE_SCATTER,
                      call_bytes={activation: count}, **common)  # fmt: skip
            if opts.sp_regather:  # the inputs of Q/K/V and MLP up (a hybrid's in_proj), for their weight gradients: once per backward
                b.add(purpose=REGATHER, phase="backward", op=Collective.ALL_GATHER, call_bytes={activation: per_pass}, **common)
            tensors = per_stage[stage]
            slices = (Split.NORM, Split.ROW_BIAS) if opts.sp_row_bias_sync else (Split.NORM,)  # computed on a sequence slice
            sizes = [t.numel * work.grad_bytes_per_element for t in tensors.layer if t.split in slices] * tensors.layers
            sizes += [t.numel * work.grad_bytes_per_element for t in tensors.moe_layer if t.split in slices] * tensors.moe_layers
            sizes += [t.numel * work.grad_bytes_per_element for block in tensors.blocks for t in block if t.split in slices]
            sizes += [t.numel * work.grad_bytes_per_element for t in tensors.outside_layers() if t.split in slices]
            calls = Counter(sizes) if not opts.coalesce_sp_grads else {float(sum(sizes)): 1}
            what = "norm and row-parallel bias gradients" if opts.sp_row_bias_sync else "norm gradients"
            b.add(purpose=what, phase="after backward", op=Collective.ALL_REDUCE, call_bytes=calls, **common)
        else:
            b.add(purpose="activations", phase="forward", op=Collective.ALL_REDUCE,
                  call_bytes={activation: per_pass * repeat}, **common)  # fmt: skip
            b.add(purpose="activation gradients", phase="backward", op=Collective.ALL_REDUCE,
                  call_bytes={activation: per_pass}, **common)  # fmt: skip
        if model.vocab > 0:
            _outside_layer_rows(b, work, par, opts, stage, activation, micro_batches, common)


def _outside_layer_rows(b: Builder, work: Workload, par: Layout, opts: Options, stage: int, activation: float,
                        micro_batches: int, common: dict) -> None:  # fmt: skip
    """TP collectives at the embedding and the LM head (Megatron's language model)."""
    sp, mb = par.sequence_parallel, micro_batches
    first, last = stage == 0, stage == par.pp - 1
    if first and opts.vocab_parallel:  # each rank looks up its slice of the vocabulary: partial sums
        op = Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE
        b.add(purpose="embedding output", phase="forward", op=op, call_bytes={activation: mb}, **common)
    if first and sp:  # the backward of scattering the sequence (or of the reduce-scatter) gathers it
        b.add(purpose="embedding output gradient", phase="backward", op=Collective.ALL_GATHER,
              call_bytes={activation: mb}, **common)  # fmt: skip
    if last and sp:  # the head sees the whole sequence
        b.add(purpose="LM head input", phase="forward", op=Collective.ALL_GATHER, call_bytes={activation: mb}, **common)
    if last and opts.vocab_parallel:
        op = Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE  # the gradient of a replicated input
        b.add(purpose="LM head input gradient", phase="backward", op=op, call_bytes={activation: mb}, **common)
        if sp and opts.sp_regather:  # Megatron's LM head is a column-parallel linear too
            b.add(purpose="LM head input, re-gathered for the weight gradient", phase="backward", op=Collective.ALL_GATHER,
                  call_bytes={activation: mb}, **common)  # fmt: skip
        logits = work.micro_batch * work.seq_len * CROSS_ENTROPY_BYTES
        b.add(purpose="cross-entropy max, target logit, sum of exp", phase="forward", op=Collective.ALL_REDUCE,
              call_bytes={logits: 3 * mb}, **common)  # fmt: skip


def tp_headlines(model: TransformerModel, work: Workload, par: Layout, opts: Options, layers: tuple[int, ...],
                  s: Term, micro_batches: int) -> list[Derivation]:  # fmt: skip
    sites = model.tp_sites_per_layer  # 2 in a transformer layer (attention, MLP), 1 in a Mamba-2 hybrid's (its one block)
    per_layer = sites * (3 if opts.recompute else 2)
    count = term("c", "c", "c", per_layer, "", f"collectives per layer per micro-batch ({sites} forward + {sites} backward"
                 + (f" + {sites} replayed by recomputation)" if opts.recompute else ")")
                 + ("; a Mamba-2 hybrid's layer is one block: Mamba-2 (in_proj / out_proj), attention or MLP" if model.mamba else ""),
                 MAMBA_TP if model.mamba else "")  # fmt: skip
    layer_count = max(layers)
    l_term = term("l", "N_layer", r"N_{\mathrm{layer}}", layer_count, "", "layers" + (" on the largest stage" if par.pp > 1 else ""))
    b = term("b", "B", "B", work.global_batch // par.dp, "", "sequences per iteration" + (" per replica (--batch / --dp)" if par.dp > 1 else ""))
    seq = term("seq", "L", "L", work.seq_len, "", "sequence length")
    h = term("h", "D", "D", model.hidden, "", "hidden size")
    inputs = (count, l_term, b, seq, h, s)
    value = per_layer * layer_count * b.value * work.seq_len * model.hidden * work.bytes_per_element
    text, tex = "$c × $l × $b × $seq × $h × $s", r"$c \times $l \times $b \times $seq \times $h \times $s"
    source = "Megatron-LM (Shoeybi et al. 2019) sec. 3: 2 all-reduces of b×s×h per layer in forward, 2 in backward"
    if not par.sequence_parallel:
        return [headline("tp_allreduce_payload", "Activations all-reduced per iteration in the layers (payload)", "V_TP",
                            r"V_{\mathrm{TP}}", text, tex, inputs, value, source)]  # fmt: skip
    sp_source = "Korthikanti et al. 2022 sec. 4.2.2: each all-reduce becomes an all-gather plus a reduce-scatter of the same size"
    reduce_scatter = headline("sp_reduce_scatter_payload", "Activations reduce-scattered per iteration in the layers (payload)",
                              "V_RS", r"V_{\mathrm{RS}}", text, tex, inputs, value, sp_source)  # fmt: skip
    if not opts.sp_regather:
        return [headline("sp_all_gather_payload", "Activations all-gathered per iteration in the layers (payload)", "V_AG",
                         r"V_{\mathrm{AG}}", text, tex, inputs, value, sp_source), reduce_scatter]  # fmt: skip
    # The all-gathers: the same c as the reduce-scatters, and the 2 inputs of the column-parallel
    # linears gathered again for their weight gradients (not replayed: once per backward).
    regather = term("c_r", "c_r", r"c_{r}", sites, "", "column-parallel inputs ("
                    + ("in_proj, linear_qkv or fc1: one a block" if model.mamba else "Q/K/V, MLP up")
                    + ") all-gathered again in backward for the weight gradient")  # fmt: skip
    ag_value = (per_layer + sites) * layer_count * b.value * work.seq_len * model.hidden * work.bytes_per_element
    ag_source = (sp_source + "; and 'we store only the Y_i^s part ... and perform an extra all-gather in the backward pass' "
                 "(Megatron-LM tensor_parallel/layers.py, LinearWithGradAccumulationAndAsyncCommunication.backward)")
    all_gather = headline("sp_all_gather_payload", "Activations all-gathered per iteration in the layers (payload)", "V_AG",
                          r"V_{\mathrm{AG}}", "($c + $c_r) × $l × $b × $seq × $h × $s",
                          r"($c + $c_r) \times $l \times $b \times $seq \times $h \times $s", (count, regather, *inputs[1:]),
                          ag_value, ag_source)  # fmt: skip
    return [all_gather, reduce_scatter]


def tp_assumptions(model: TransformerModel, par: Layout, opts: Options) -> list[str]:
    out = []
    if par.tp > 1 and model.vocab > 0:
        out.append("vocabulary-parallel embedding, LM head and cross-entropy (Megatron)" if opts.vocab_parallel
                   else "embedding and LM head replicated on every TP rank: no TP collectives outside the layers")  # fmt: skip
    if par.tp > 1 and par.sequence_parallel:
        out.append("sequence parallelism: each column-parallel linear keeps only its sequence shard of the input and all-gathers "
                   "it again in backward for its weight gradient (Megatron-LM; in training that gather overlaps the input-gradient GEMM)"
                   if opts.sp_regather else
                   "sequence parallelism: column-parallel linears keep the gathered input for backward (PyTorch DTensor), no re-gather")  # fmt: skip
    return out
