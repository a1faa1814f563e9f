"""The parameter tensors, as a GPT-style model registers them, and the part of each one device
of a pipeline stage holds after tensor-parallel sharding (Megatron's column / row split)."""

from __future__ import annotations

from enum import Enum
from functools import lru_cache

from parcalc.core.comm.plan import Layout, Options
from parcalc.core.model import TransformerModel
from parcalc.core.stages import stage_split
from parcalc.named_tuple import NamedTuple


class Split(str, Enum):
    """How Megatron's tensor parallelism splits a tensor (Shoeybi et al. 2019, sec. 3)."""

    COLUMN = "column"  # output features: QKV, gate, up (weights and biases)
    ROW = "row"  # input features: attention output, MLP down (weights)
    ROW_BIAS = "row-bias"  # replicated, computed on a sequence slice under SP
    NORM = "norm"  # replicated, computed on a sequence slice under SP
    VOCAB = "vocab"  # word embedding / LM head rows, when vocabulary-parallel
    REPLICATED = "replicated"  # learned positions


class ParamTensor(NamedTuple):
    """One parameter as nn.Linear / nn.Embedding store it: `rows` = dim 0 (out features).

    A NamedTuple (immutable, compared by value) rather than a dataclass: a model has thousands."""

    name: str
    rows: int
    cols: int
    split: Split
    layer: int = -1  # -1: not in a transformer layer

    @property
    def numel(self) -> int:
        return self.rows * self.cols


def layer_tensors(model: TransformerModel, layer: int) -> list[ParamTensor]:
    """One layer's tensors in GPT-2 / Megatron registration order (norm, Q, K, V, O, norm, MLP)."""
    h, q, kv, f = model.hidden, model.q_width, model.kv_width, model.ffn_hidden
    out: list[ParamTensor] = []

    def linear(name: str, rows: int, cols: int, split: Split) -> None:
        out.append(ParamTensor(f"layers.{layer}.{name}.weight", rows, cols, split, layer))
        if model.bias or (model.qkv_bias and name in ("attn.q", "attn.k", "attn.v")):  # Qwen2-MoE: q, k, v biases only
            bias_split = Split.ROW_BIAS if split is Split.ROW else split
            out.append(ParamTensor(f"layers.{layer}.{name}.bias", rows, 1, bias_split, layer))

    def norm(name: str) -> None:
        for part in ("weight", "bias")[: model.norm.params_per_channel]:
            out.append(ParamTensor(f"layers.{layer}.{name}.{part}", h, 1, Split.NORM, layer))

    norm("ln1")
    linear("attn.q", q, h, Split.COLUMN)
    linear("attn.k", kv, h, Split.COLUMN)
    linear("attn.v", kv, h, Split.COLUMN)
    linear("attn.o", h, q, Split.ROW)
    norm("ln2")
    if model.mlp.gated:
        linear("mlp.gate", f, h, Split.COLUMN)
    linear("mlp.up", f, h, Split.COLUMN)
    linear("mlp.down", h, f, Split.ROW)
    return out


def block_tensors(model: TransformerModel, layer: int) -> list[ParamTensor]:
    """One layer of a Mamba-2 hybrid, its one block (parcalc.core.mamba), in the order Megatron-Core registers it. The
    block's norm is fused into its first linear (megatron/core/models/hybrid/hybrid_layer_specs.py @d98e8a64, line 116:
    in_proj=TELayerNormColumnParallelLinear; attention's linear_qkv and the MLP's fc1 likewise): replicated on the TP
    ranks, reduced over TP under SP. A Mamba-2 mixer as Megatron-Core's MambaMixer splits it (megatron/core/ssm/
    mamba_mixer.py @d98e8a64): its own parameters first, conv1d_weight / conv1d_bias, dt_bias, A_log and D, each
    `tensor_model_parallel` with partition_dim 0 (lines 325-421); then in_proj, a ColumnParallelLinear of [z, x, B, C, dt]
    (lines 280-308); the gated norm's weight, split too (lines 423-434); out_proj, row-parallel (lines 437-451). An
    attention block: Q, K, V and O; an MLP block: its gate / up and down, split as in a transformer layer."""
    from parcalc.core.mamba import ATTENTION, MAMBA

    assert model.mamba is not None
    block = model.mamba.block(layer)
    whole = layer_tensors(model, layer)
    norm = [t for t in whole if t.name.startswith(f"layers.{layer}.ln1.")]
    if block == ATTENTION:
        return norm + [t for t in whole if ".attn." in t.name]
    if block != MAMBA:
        return norm + [t for t in whole if ".mlp." in t.name]
    m, h, name = model.mamba, model.hidden, f"layers.{layer}.mixer"
    out = [ParamTensor(f"{name}.conv1d.weight", m.conv_dim, m.conv_kernel, Split.COLUMN, layer)]
    if m.conv_bias:
        out.append(ParamTensor(f"{name}.conv1d.bias", m.conv_dim, 1, Split.COLUMN, layer))
    out += [ParamTensor(f"{name}.{p}", m.heads, 1, Split.COLUMN, layer) for p in ("dt_bias", "A_log", "D")]
    out += norm + [ParamTensor(f"{name}.in_proj.weight", m.in_proj_width, h, Split.COLUMN, layer)]
    if model.bias:  # use_bias (Megatron-Core's MambaMixer asserts it off; transformers' mixer allows it)
        out.append(ParamTensor(f"{name}.in_proj.bias", m.in_proj_width, 1, Split.COLUMN, layer))
    out += [ParamTensor(f"{name}.norm.weight", m.d_inner, 1, Split.COLUMN, layer),
            ParamTensor(f"{name}.out_proj.weight", h, m.d_inner, Split.ROW, layer)]
    if model.bias:
        out.append(ParamTensor(f"{name}.out_proj.bias", h, 1, Split.ROW_BIAS, layer))
    return out


def moe_layer_tensors(model: TransformerModel, layer: int) -> list[ParamTensor]:
    """The non-expert tensors of an MoE layer in registration order: norms, attention, router
    (replicated on the TP ranks and, under SP, reduced like a norm: Megatron marks it
    sequence_parallel), the shared experts as dense MLPs (column / row split)."""
    assert model.moe is not None
    out = [t for t in layer_tensors(model, layer) if ".mlp." not in t.name]
    out.append(ParamTensor(f"layers.{layer}.router.weight", model.moe.experts, model.hidden, Split.NORM, layer))
    if model.moe.router_bias:
        out.append(ParamTensor(f"layers.{layer}.router.bias", model.moe.experts, 1, Split.NORM, layer))
    width = model.moe.shared_width
    for i in range(model.moe.shared_experts):
        out += ffn_tensors(model, f"layers.{layer}.shared.{i}", width, layer)
    if model.moe.shared_expert_gate and model.moe.shared_experts:  # Qwen2-MoE's 1 x hidden gate, replicated like the router
        out.append(ParamTensor(f"layers.{layer}.shared_gate.weight", 1, model.hidden, Split.NORM, layer))
    return out


def ffn_tensors(model: TransformerModel, prefix: str, width: int, layer: int) -> list[ParamTensor]:
    """A dense MLP's tensors (gate, up, down or up, down) of `width` under `prefix`: a shared or a routed expert."""
    out = []
    names = ("gate", "up", "down") if model.mlp.gated else ("up", "down")
    for name in names:
        rows, cols, split = (model.hidden, width, Split.ROW) if name == "down" else (width, model.hidden, Split.COLUMN)
        out.append(ParamTensor(f"{prefix}.{name}.weight", rows, cols, split, layer))
        if model.bias:
            out.append(ParamTensor(f"{prefix}.{name}.bias", rows, 1, Split.ROW_BIAS if split is Split.ROW else split, layer))
    return out


def embedding_tensors(model: TransformerModel) -> list[ParamTensor]:
    if model.vocab == 0:
        return []
    out = [ParamTensor("wte.weight", model.vocab, model.hidden, Split.VOCAB)]
    if model.position.value == "learned":
        out.append(ParamTensor("wpe.weight", model.max_seq_len, model.hidden, Split.REPLICATED))
    return out


def final_tensors(model: TransformerModel, copy_of_tied_embedding: bool = False) -> list[ParamTensor]:
    """Final norm and the LM head (or, across pipeline stages, Megatron's copy of a tied embedding)."""
    if model.vocab == 0:
        return []
    out = [ParamTensor(f"ln_f.{part}", model.hidden, 1, Split.NORM) for part in ("weight", "bias")[: model.norm.params_per_channel]]
    if not model.tied_embeddings:
        out.append(ParamTensor("lm_head.weight", model.vocab, model.hidden, Split.VOCAB))
    elif copy_of_tied_embedding:
        out.append(ParamTensor("lm_head.weight (copy of tied wte)", model.vocab, model.hidden, Split.VOCAB))
    return out


def parameter_tensors(model: TransformerModel) -> tuple[ParamTensor, ...]:
    """Every parameter tensor in registration order; their numel sums to model.total_params."""
    tensors = embedding_tensors(model)
    for layer in range(model.layers):
        tensors += layer_tensors(model, layer) if model.mamba is None else block_tensors(model, layer)
    return tuple(tensors + final_tensors(model))


@lru_cache(maxsize=256)  # asked once per stage and per plan: a 1F1B plan over 8 stages asks 9 times
def stage_layers(layers: int, pp: int, first: int | None = None, last: int | None = None) -> tuple[range, ...]:
    """Layers of each pipeline stage. With `first` / `last` (--first-stage-layers /
    --last-stage-layers), Megatron-LM's uneven split (parcalc.core.stages); without them, as even
    as possible, earlier stages taking the remainder (the seed exercises' split: a p that does not
    divide L is allowed here, unlike in `memory` and `fit`, which follow Megatron-LM's rule)."""
    if first is not None or last is not None:
        counts = stage_split(layers, pp, first, last)
    else:
        base, extra = divmod(layers, pp)
        counts = tuple(base + (1 if stage < extra else 0) for stage in range(pp))
    stages, start = [], 0
    for count in counts:
        stages.append(range(start, start + count))
        start += count
    return tuple(stages)


def stage_ranges(layers: int, par: Layout) -> tuple[tuple[range, ...], ...]:
    """The layer ranges each pipeline stage holds: one (stage_layers' split), or with --pipeline-layout one per model
    chunk, as the layout string places them (parcalc.core.pipeline_layout)."""
    if par.pipeline_layout is not None:
        return tuple(par.pipeline_split(layers).stage_ranges())
    return tuple((r,) for r in stage_layers(layers, par.pp, *par.stage_ends(layers)))


def shard(tensor: ParamTensor, tp: int, vocab_parallel: bool) -> ParamTensor:
    """The part of `tensor` one TP rank holds (rounded up where TP does not divide it)."""
    if tp == 1:
        return tensor
    if tensor.split is Split.COLUMN or (tensor.split is Split.VOCAB and vocab_parallel):
        return tensor._replace(rows=-(-tensor.rows // tp))
    if tensor.split is Split.ROW:
        return tensor._replace(cols=-(-tensor.cols // tp))
    return tensor


class StageTensors(NamedTuple):
    """The tensors one device of a pipeline stage holds after TP sharding: those before the
    layers (embeddings), one layer's (every layer alike), how many layers, and those after
    (final norm, LM head). Kept per layer, not expanded, so that a 96-layer model costs no more."""

    before: tuple[ParamTensor, ...]
    layer: tuple[ParamTensor, ...]
    layers: int
    after: tuple[ParamTensor, ...]
    # MoE models: the non-expert tensors of an MoE layer and how many such layers (`layer` and
    # `layers` are then the dense layers); the routed experts are parcalc.core.comm.expert's.
    moe_layer: tuple[ParamTensor, ...] = ()
    moe_layers: int = 0
    # A Mamba-2 hybrid (parcalc.core.mamba): its layers are not alike, so each layer's tensors, in order (`layer` is then
    # empty and `layers` 0)
    blocks: tuple[tuple[ParamTensor, ...], ...] = ()

    @property
    def numel(self) -> int:
        return (sum(t.numel for t in self.before + self.after) + self.layers * sum(t.numel for t in self.layer)
                + self.moe_layers * sum(t.numel for t in self.moe_layer) + sum(t.numel for b in self.blocks for t in b))  # fmt: skip

    def sizes_in_order(self) -> list[int]:
        """numel of every tensor in registration order (MoE layers after the dense ones)."""
        return ([t.numel for t in self.before] + [t.numel for t in self.layer] * self.layers
                + [t.numel for t in self.moe_layer] * self.moe_layers + [t.numel for b in self.blocks for t in b]
                + [t.numel for t in self.after])  # fmt: skip

    def layer_units(self) -> list[tuple[ParamTensor, ...]]:
        """Each layer's tensors, in forward order (a hybrid's blocks, or the dense then the MoE layers)."""
        return [self.layer] * self.layers + [self.moe_layer] * self.moe_layers + list(self.blocks)

    def outside_layers(self) -> tuple[ParamTensor, ...]:
        return self.before + self.after


def device_tensors(model: TransformerModel, par: Layout, stage: int, opts: Options) -> StageTensors:
    """The tensors one device of pipeline `stage` holds, after TP sharding."""
    ranges = stage_ranges(model.layers, par)[stage]
    held = sum(len(r) for r in ranges)
    before = embedding_tensors(model) if stage == 0 else []
    after = final_tensors(model, copy_of_tied_embedding=par.pp > 1) if stage == par.pp - 1 else []
    if model.mamba is not None:
        return StageTensors(before=tuple(shard(t, par.tp, opts.vocab_parallel) for t in before), layer=(), layers=0,
                            after=tuple(shard(t, par.tp, opts.vocab_parallel) for t in after),
                            blocks=tuple(_sharded_block(model, i, par.tp) for r in ranges for i in r))  # fmt: skip
    moe = sum(model.moe_layers_in(r.start, r.stop) for r in ranges)
    return StageTensors(
        before=tuple(shard(t, par.tp, opts.vocab_parallel) for t in before),
        layer=_sharded_layer(model, par.tp, opts.vocab_parallel),
        layers=held - moe,
        after=tuple(shard(t, par.tp, opts.vocab_parallel) for t in after),
        moe_layer=_sharded_moe_layer(model, par.tp, opts.vocab_parallel) if moe else (),
        moe_layers=moe,
    )


def _sharded_block(model: TransformerModel, layer: int, tp: int) -> tuple[ParamTensor, ...]:
    return tuple(shard(t, tp, False) for t in block_tensors(model, layer))


@lru_cache(maxsize=64)
def _sharded_moe_layer(model: TransformerModel, tp: int, vocab_parallel: bool) -> tuple[ParamTensor, ...]:
    return tuple(shard(t, tp, vocab_parallel) for t in moe_layer_tensors(model, 0))


@lru_cache(maxsize=64)
def _sharded_layer(model: TransformerModel, tp: int, vocab_parallel: bool) -> tuple[ParamTensor, ...]:
    return tuple(shard(t, tp, vocab_parallel) for t in layer_tensors(model, 0))


def padded_numel(tensor: ParamTensor, group: int) -> int:
    """FSDP2's storage for a tensor sharded over `group`: dim 0 rounded up to a multiple of it."""
    return -(-tensor.rows // group) * group * tensor.cols
