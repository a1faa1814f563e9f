"""The model flags that `memory`, `flops`, `comm-volume`, `fit` and `scaling` share; how they become a
TransformerModel (a preset or config.json, any shape flag overriding it, or the flags alone) is
parcalc.results.model, re-exported here."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from parcalc.core.choices import Mlp
from parcalc.results.model import (  # noqa: F401 - re-exported: the commands import them from here
    ModelFlags,
    _check_heads,
    _model_from_flags,
    model_and_seq_len,
    model_from_flags,
    model_terms,
)

Text = Optional[str]  # noqa: UP045 - typer reads Optional at runtime

ModelOption = Annotated[Text, typer.Option(metavar="NAME|config.json", help="Model preset or Hugging Face config.json; the shape flags below override it.")]
LayersOption = Annotated[Text, typer.Option(metavar="L", help="Transformer layers.")]
HiddenOption = Annotated[Text, typer.Option(metavar="h", help="Hidden size.")]
HeadsOption = Annotated[Text, typer.Option(metavar="a", help="Attention heads.")]
KvHeadsOption = Annotated[Text, typer.Option(metavar="N", help="Key/value heads (grouped-query attention; default: --heads).")]
FfnOption = Annotated[Text, typer.Option(metavar="f", help="MLP width (default 4 x hidden; for gated MLPs the width of each of gate and up).")]
MlpOption = Annotated[Optional[Mlp], typer.Option(metavar="KIND", help="MLP: relu, gelu, swiglu, geglu (default: the preset's; for a model from flags see the command's help).", show_default=False)]  # noqa: UP045
VocabOption = Annotated[Text, typer.Option(metavar="V", help="Vocabulary size (0: no embeddings or LM head).")]
TiedOption = Annotated[Optional[bool], typer.Option("--tied/--untied", help="Tie the LM head to the word embeddings (default: the preset's; tied from flags).", show_default=False)]  # noqa: UP045
