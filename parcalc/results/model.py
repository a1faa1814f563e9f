"""The model flags that `memory`, `flops`, `comm-volume` and `fit` share, and the one way they
become a TransformerModel: a preset or config.json, any shape flag overriding it, or the flags alone.

Without Click: parcalc.commands.model_options declares the flags and re-exports these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.core.choices import Mlp
from parcalc.named_tuple import NamedTuple

if TYPE_CHECKING:
    from parcalc.core.model import TransformerModel
    from parcalc.derivation import Term


class ModelFlags(NamedTuple):
    """The model flags as typed, before parsing."""

    model: str | None = None
    layers: str | None = None
    hidden: str | None = None
    heads: str | None = None
    kv_heads: str | None = None
    ffn_hidden: str | None = None
    mlp: Mlp | None = None
    vocab: str | None = None
    tied: bool | None = None


def model_from_flags(flags: ModelFlags, dirs: tuple, *, seq_len: int | None = None, bare: bool = False) -> TransformerModel:
    """A preset or config.json with any shape flag overriding it, or a model from the flags alone,
    of at most MAX_LAYERS layers (see _model_from_flags)."""
    from parcalc.results.parse import check_layers

    shape = _model_from_flags(flags, dirs, seq_len=seq_len, bare=bare)
    check_layers(shape.layers, "--layers" if flags.layers is not None else f"--model {shape.key}")
    return shape


def _model_from_flags(flags: ModelFlags, dirs: tuple, *, seq_len: int | None, bare: bool) -> TransformerModel:
    """A preset or config.json with any shape flag overriding it, or a model from the flags alone.

    From flags alone the layer is Korthikanti et al.'s GPT layer (LayerNorm, biases, learned
    positions, GELU 4h MLP), or with `bare` seed 004's matmul-only layer (no norms, biases or
    positions; ReLU), whose parameters are exactly the weight matrices the homework counts."""
    from dataclasses import replace

    from parcalc.core.model import Norm, Position, TransformerModel
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    given = {"layers": flags.layers, "hidden": flags.hidden, "heads": flags.heads, "kv_heads": flags.kv_heads,
             "ffn_hidden": flags.ffn_hidden, "vocab": flags.vocab}  # fmt: skip
    shape = {k: parse_count(v, f"--{k.replace('_', '-')}", allow_zero=k == "vocab") for k, v in given.items() if v is not None}
    if flags.model is not None:
        from parcalc.presets import load_model

        base = load_model(flags.model, dirs)
        changes: dict[str, object] = dict(shape)
        if flags.mlp is not None:
            changes["mlp"] = flags.mlp
        if flags.tied is not None:
            changes["tied_embeddings"] = flags.tied
        if not changes:
            return base
        if "hidden" in shape or "heads" in shape:
            h, a = shape.get("hidden", base.hidden), shape.get("heads", base.heads)
            _check_heads(h, a)
            changes["head_dim"] = h // a
            if "heads" in shape and "kv_heads" not in shape:
                changes["kv_heads"] = a if base.kv_heads == base.heads else base.kv_heads
        return replace(base, key=base.key + "*", name=base.name + " (modified)", **changes)  # type: ignore[arg-type]
    missing = [f"--{n}" for n in ("layers", "hidden", "heads") if n not in shape]
    if missing:
        raise InputError(f"--model: give a model preset, or the shape with {', '.join(missing)}")
    h, a, layers = shape["hidden"], shape["heads"], shape["layers"]
    _check_heads(h, a)
    common = dict(key="custom", layers=layers, hidden=h, heads=a, kv_heads=shape.get("kv_heads", a), head_dim=h // a,
                  ffn_hidden=shape.get("ffn_hidden", 4 * h), vocab=shape.get("vocab", 0), max_seq_len=seq_len or 0,
                  tied_embeddings=True if flags.tied is None else flags.tied, source="given on the command line")  # fmt: skip
    if bare:
        return TransformerModel(name=f"{layers}-layer transformer, D = {h}", mlp=flags.mlp or Mlp.RELU,
                                position=Position.NONE, norm=Norm.NONE, bias=False, **common)  # type: ignore[arg-type]  # fmt: skip
    return TransformerModel(name=f"{layers}-layer GPT, h = {h}", mlp=flags.mlp or Mlp.GELU,
                            position=Position.LEARNED, norm=Norm.LAYERNORM, bias=True, **common)  # type: ignore[arg-type]  # fmt: skip


def model_and_seq_len(flags: ModelFlags, seq_len: str | None, dirs: tuple) -> tuple[TransformerModel, int]:
    """The model and the sequence length: --seq-len, else the model's maximum; one of them is required."""
    from parcalc.errors import InputError
    from parcalc.units import parse_count

    given = parse_count(seq_len, "--seq-len") if seq_len is not None else None
    shape = model_from_flags(flags, dirs, seq_len=given)
    seq = given or shape.max_seq_len
    if not seq:
        raise InputError("--seq-len: required (the model gives no maximum sequence length)")
    return shape, seq


def _check_heads(hidden: int, heads: int) -> None:
    from parcalc.errors import InputError

    if hidden % heads:
        raise InputError(f"--heads: {heads} heads do not divide the hidden size {hidden}")


def model_terms(shape: TransformerModel) -> list[Term]:
    """The model's shape as inputs of a result."""
    from parcalc.derivation import Term

    terms = [
        Term("P", "P", "P", shape.total_params, "", f"parameters of {shape.name}", shape.source),
        Term("L", "L", "L", shape.layers, "", "transformer layers"),
        Term("h", "h", "h", shape.hidden, "", "hidden size"),
        Term("a", "a", "a", shape.heads, "", "attention heads"),
    ]
    if shape.kv_heads != shape.heads:
        terms.append(Term("kv", "a_kv", r"a_{\mathrm{kv}}", shape.kv_heads, "", "key/value heads (grouped-query attention)"))
    terms.append(Term("f", "f", "f", shape.ffn_hidden, "", f"MLP width ({shape.mlp.value})"))
    if shape.vocab:
        terms.append(Term("V", "V", "V", shape.vocab, "", "vocabulary size" + ("" if shape.tied_embeddings else " (untied LM head)")))
    return terms
