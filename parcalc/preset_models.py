"""Model presets: a YAML document made into parcalc.core.model's TransformerModel (and its MoE,
MLA, window, linear-attention, Mamba-2 and MTP blocks); the model types load only when a model is read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.errors import InputError, PresetError, shown
from parcalc.preset_doc import PresetDoc, opened
from parcalc.preset_files import Category

if TYPE_CHECKING:  # a one-liner about a GPU does not load the model types
    from parcalc.core.attention_window import AttentionWindow
    from parcalc.core.linear_attention import GatedDeltaNet
    from parcalc.core.mamba import Mamba2
    from parcalc.core.model import LatentAttention, MixtureOfExperts, TransformerModel

_MODEL_KEYS = (
    "kind", "name", "sources", "source", "layers", "hidden", "heads", "kv_heads", "head_dim",
    "ffn_hidden", "mlp", "vocab", "max_seq_len", "tied_embeddings", "position", "norm", "bias", "dropout", "notes",
    "moe", "mla", "qk_norm", "window", "post_norms", "attention_sinks", "mtp", "linear_attention", "attention_gate",
    "mamba",
)  # fmt: skip
_LINEAR_KEYS = ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel", "full_every", "source")
_MAMBA_KEYS = ("heads", "head_dim", "state", "groups", "conv_kernel", "chunk", "pattern", "conv_bias", "source")
_WINDOW_KEYS = ("kind", "size", "global_every", "source")
_MTP_KEYS = ("layers", "source")
_MOE_KEYS = (
    "experts", "top_k", "expert_ffn_hidden", "shared_experts", "shared_ffn_hidden", "first_dense_layers", "every",
    "capacity_factor", "router_bias", "shared_expert_gate", "routing_weights_cast", "top_k_renormalised", "source",
)  # fmt: skip
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "source")


def _moe(doc: PresetDoc, sources: Mapping[str, str]) -> MixtureOfExperts | None:
    """The `moe:` block of a model preset (parcalc.core.model.MixtureOfExperts), None when absent."""
    from parcalc.core.model import MixtureOfExperts

    if "moe" not in doc.data:
        return None
    block = doc.child("moe")
    block.only(_MOE_KEYS)
    capacity = block.data.get("capacity_factor")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or not capacity > 0):
        raise block.error("capacity_factor", f"expected a number > 0 (or null: dropless), got {shown(capacity)}")
    return MixtureOfExperts(
        experts=block.integer("experts"),
        top_k=block.integer("top_k"),
        expert_ffn_hidden=block.integer("expert_ffn_hidden"),
        shared_experts=block.integer("shared_experts", required=False, default=0, minimum=0),
        shared_ffn_hidden=block.integer("shared_ffn_hidden", required=False, default=0, minimum=0),
        first_dense_layers=block.integer("first_dense_layers", required=False, default=0, minimum=0),
        every=block.integer("every", required=False, default=1),
        capacity_factor=None if capacity is None else float(capacity),
        router_bias=block.flag("router_bias", default=False),
        source=block.source_ref("source", sources) if "source" in block.data else "",
        shared_expert_gate=block.flag("shared_expert_gate", default=False),
        routing_weights_cast=block.flag("routing_weights_cast", default=False),
        top_k_renormalised=block.flag("top_k_renormalised", default=True),
    )


def _mla(doc: PresetDoc, sources: Mapping[str, str]) -> LatentAttention | None:
    """The `mla:` block of a model preset (parcalc.core.model.LatentAttention), None when absent."""
    from parcalc.core.model import LatentAttention

    if "mla" not in doc.data:
        return None
    block = doc.child("mla")
    block.only(_MLA_KEYS)
    return LatentAttention(
        q_lora_rank=block.integer("q_lora_rank", minimum=0),
        kv_lora_rank=block.integer("kv_lora_rank"),
        qk_nope_head_dim=block.integer("qk_nope_head_dim"),
        qk_rope_head_dim=block.integer("qk_rope_head_dim"),
        v_head_dim=block.integer("v_head_dim"),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _window(doc: PresetDoc, sources: Mapping[str, str]) -> AttentionWindow | None:
    """The `window:` block of a model preset (parcalc.core.attention_window.AttentionWindow), None when absent."""
    if "window" not in doc.data:  # its module loads only for a model that has one
        return None
    from parcalc.core.attention_window import AttentionWindow, WindowKind

    block = doc.child("window")
    block.only(_WINDOW_KEYS)
    return AttentionWindow(
        kind=block.choice("kind", WindowKind, WindowKind.SLIDING),
        size=block.integer("size"),
        global_every=block.integer("global_every", required=False, default=0, minimum=0),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _linear_attention(doc: PresetDoc, sources: Mapping[str, str]) -> GatedDeltaNet | None:
    """The `linear_attention:` block of a model preset (parcalc.core.linear_attention.GatedDeltaNet), None when absent."""
    if "linear_attention" not in doc.data:  # its module loads only for a model that has one
        return None
    from parcalc.core.linear_attention import GatedDeltaNet

    block = doc.child("linear_attention")
    block.only(_LINEAR_KEYS)
    return GatedDeltaNet(
        key_heads=block.integer("key_heads"),
        value_heads=block.integer("value_heads"),
        key_head_dim=block.integer("key_head_dim"),
        value_head_dim=block.integer("value_head_dim"),
        conv_kernel=block.integer("conv_kernel"),
        full_every=block.integer("full_every", required=False, default=0, minimum=0),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _mamba(doc: PresetDoc, sources: Mapping[str, str]) -> Mamba2 | None:
    """The `mamba:` block of a model preset (parcalc.core.mamba.Mamba2: the Mamba-2 mixers and the layer pattern), None when absent."""
    if "mamba" not in doc.data:  # its module loads only for a model that has one
        return None
    from parcalc.core.mamba import Mamba2

    block = doc.child("mamba")
    block.only(_MAMBA_KEYS)
    return Mamba2(
        heads=block.integer("heads"),
        head_dim=block.integer("head_dim"),
        state=block.integer("state"),
        groups=block.integer("groups"),
        conv_kernel=block.integer("conv_kernel"),
        chunk=block.integer("chunk"),
        pattern=block.text("pattern"),
        conv_bias=block.flag("conv_bias", default=True),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _mtp(doc: PresetDoc, sources: Mapping[str, str]) -> tuple[int, str]:
    """The `mtp:` block of a model preset: (multi-token-prediction modules, their source); (0, "") when absent."""
    if "mtp" not in doc.data:
        return 0, ""
    block = doc.child("mtp")
    block.only(_MTP_KEYS)
    return block.integer("layers", minimum=0), block.source_ref("source", sources) if "source" in block.data else ""


def model_from_document(key: str, path: Path, data: Mapping[str, Any]) -> TransformerModel:
    from parcalc.core.model import Mlp, Norm, Position, TransformerModel

    doc, sources = opened(path, data, _MODEL_KEYS, Category.MODELS)
    mtp = _mtp(doc, sources)
    hidden = doc.integer("hidden")
    heads = doc.integer("heads")
    if "head_dim" not in doc.data and hidden % heads:
        raise doc.error("head_dim", f"missing, and hidden ({hidden}) is not a multiple of heads ({heads})")
    try:
        return TransformerModel(
            key=key,
            name=doc.text("name"),
            layers=doc.integer("layers"),
            hidden=hidden,
            heads=heads,
            kv_heads=doc.integer("kv_heads", required=False, default=heads),
            head_dim=doc.integer("head_dim", required=False, default=hidden // heads),
            ffn_hidden=doc.integer("ffn_hidden", required=False, default=4 * hidden),
            mlp=doc.choice("mlp", Mlp, Mlp.GELU),
            vocab=doc.integer("vocab", required=False, default=0, minimum=0),
            max_seq_len=doc.integer("max_seq_len", required=False, default=0, minimum=0),
            tied_embeddings=doc.flag("tied_embeddings", default=True),
            position=doc.choice("position", Position, Position.LEARNED),
            norm=doc.choice("norm", Norm, Norm.LAYERNORM),
            bias=doc.flag("bias", default=True),
            source=doc.source_ref("source", sources),
            dropout=doc.flag("dropout", default=True),
            dropout_source=sources.get("dropout", ""),
            moe=_moe(doc, sources),
            mla=_mla(doc, sources),
            qk_norm=doc.flag("qk_norm", default=False),
            window=_window(doc, sources),
            post_norms=doc.flag("post_norms", default=False),
            attention_sinks=doc.flag("attention_sinks", default=False),
            mtp_layers=mtp[0],
            mtp_source=mtp[1],
            linear_attention=_linear_attention(doc, sources),
            attention_gate=doc.flag("attention_gate", default=False),
            mamba=_mamba(doc, sources),
        )
    except InputError as error:
        raise PresetError(f"{path}: {error}") from None
