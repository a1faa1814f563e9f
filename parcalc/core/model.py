"""The shape of a decoder-style transformer, and the parameter counts that follow from it.

Counts follow the layer as built by Megatron-LM / GPT-2 (biases, LayerNorm, learned positions)
or LLaMA (no biases, RMSNorm, RoPE, SwiGLU, grouped-query attention), chosen by the fields.
With bias=True, norm="layernorm", position="learned" and tied embeddings the total is
Narayanan et al. 2021, sec. 5.1, P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), plus the 2h of
the final LayerNorm that formula leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass

from parcalc.core.choices import Mlp, Norm, Position  # noqa: F401 - re-exported
from parcalc.errors import InputError


@dataclass(frozen=True)
class TransformerModel:
    """A stack of identical transformer layers plus optional embeddings and LM head.

    vocab = 0 means the model has no embedding or output layer (seed 004's homework model).
    dropout = False: a model trained without dropout (Llama), so no dropout masks are kept.
    max_seq_len is the longest sequence the model takes (its position table when positions are
    learned, which is then counted in the parameters); 0 when unknown.
    """

    key: str
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    mlp: Mlp
    vocab: int
    max_seq_len: int
    tied_embeddings: bool
    position: Position
    norm: Norm
    bias: bool
    source: str
    # Whether training applies dropout (attention probabilities, attention and MLP outputs,
    # embeddings), whose 1-byte masks the activations keep (Korthikanti et al. 2022 sec. 4.1).
    # GPT-style models train with it; Llama-family models have no dropout layer at all.
    dropout: bool = True
    dropout_source: str = ""  # why dropout is on or off for this model (a preset's source, a config.json key)

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden"):
            if getattr(self, name) < 1:
                raise InputError(f"model {self.key}: {name} must be at least 1, got {getattr(self, name)}")
        if self.vocab < 0 or self.max_seq_len < 0:
            raise InputError(f"model {self.key}: vocab and max_seq_len must not be negative")
        if self.heads % self.kv_heads:
            raise InputError(
                f"model {self.key}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}) "
                "for grouped-query attention"
            )

    @property
    def q_width(self) -> int:
        """Width of the query projection output: heads x head_dim (usually = hidden)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projections: kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        weights = self.hidden * self.q_width + 2 * self.hidden * self.kv_width + self.q_width * self.hidden
        biases = (self.q_width + 2 * self.kv_width + self.hidden) if self.bias else 0
        return weights + biases

    @property
    def mlp_params_per_layer(self) -> int:
        matrices = 3 if self.mlp.gated else 2
        weights = matrices * self.hidden * self.ffn_hidden
        biases = ((matrices - 1) * self.ffn_hidden + self.hidden) if self.bias else 0
        return weights + biases

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.norm.params_per_channel * self.hidden

    @property
    def params_per_layer(self) -> int:
        return self.attention_params_per_layer + self.mlp_params_per_layer + self.norm_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Token embeddings, learned positions and the final norm (0 without a vocabulary)."""
        if self.vocab == 0:
            return 0
        positions = self.max_seq_len * self.hidden if self.position is Position.LEARNED else 0
        final_norm = self.norm.params_per_channel * self.hidden
        return self.vocab * self.hidden + positions + final_norm

    @property
    def lm_head_params(self) -> int:
        """The output projection to the vocabulary, when not tied to the token embeddings."""
        return 0 if self.vocab == 0 or self.tied_embeddings else self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        return self.layers * self.params_per_layer + self.embedding_params + self.lm_head_params
