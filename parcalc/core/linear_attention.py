"""Gated DeltaNet layers (Yang, Kautz & Hatamizadeh 2025, 'Gated Delta Networks', arXiv:2412.06464), as Qwen3-Next
interleaves them with full attention: parameters and the forward's operations of one such mixer.

The mixer, as transformers' Qwen3NextGatedDeltaNet builds it (models/qwen3_next/modeling_qwen3_next.py, transformers
5.24): in_proj_qkvz (h -> 2 key_dim + 2 value_dim: queries, keys, values and the output gate z), in_proj_ba
(h -> 2 value heads: the write strength beta and the decay's input a), a depthwise causal conv1d of K taps over the
queries, keys and values (no bias), dt_bias and A_log (one per value head), a gated RMSNorm of the value head's width,
and out_proj (value_dim -> h), none with biases. key_dim = key heads x key head dim, value_dim likewise.

The delta rule runs chunk by chunk (torch_chunk_gated_delta_rule there; flash-linear-attention's chunk_gated_delta_rule
on a GPU), chunks of C = 64 tokens, the queries and keys repeated to the value heads. Per chunk and value head:
K_beta K^T and Q K^T (C x d_k x C each), two unit-triangular solves for the UT transform (C (C - 1) / 2 multiply-adds
per right-hand column: d_v for the new values, d_k for the decayed keys), and against the recurrent state S (d_k x d_v)
K_cum S, Q S, the chunk's attention times the new values (C x C x d_v) and the state update K^T V_new (d_k x C x d_v).
torch.utils.flop_counter counts the matmuls and the convolution, not torch.linalg.solve_triangular (it has no formula
for it): the tests add the solves to its count. Which layers: all but every `full_every`-th, counting 1-based
(Qwen3NextConfig: layer_types from full_attention_interval 4, 'full_attention' where (i + 1) % 4 == 0).
"""

from __future__ import annotations

import math

from parcalc.core.layer_pattern import check_every, layers_in, on_layer
from parcalc.errors import InputError
from parcalc.frozen import frozen

GDN_SOURCE = (
    "transformers models/qwen3_next/modeling_qwen3_next.py (5.24): Qwen3NextGatedDeltaNet (in_proj_qkvz, in_proj_ba, "
    "conv1d, dt_bias, A_log, norm, out_proj) and torch_chunk_gated_delta_rule (chunk_size 64); Yang et al. 2025, "
    "'Gated Delta Networks' (arXiv:2412.06464), sec. 3"
)
CHUNK = 64  # torch_chunk_gated_delta_rule(chunk_size=64); flash-linear-attention's chunk_gated_delta_rule uses 64 too


@frozen
class GatedDeltaNet:
    """The linear-attention layers of a hybrid model: their shape and which layers they are."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    full_every: int = 0  # 0: every layer linear; N: layer i is full attention when (i + 1) % N == 0
    source: str = ""

    def __post_init__(self) -> None:
        if min(self.key_heads, self.value_heads, self.key_head_dim, self.value_head_dim, self.conv_kernel) < 1:
            raise InputError("gated delta net: heads, head dimensions and the conv kernel must be at least 1")
        if self.value_heads % self.key_heads:
            raise InputError(f"gated delta net: value heads ({self.value_heads}) must be a multiple of key heads ({self.key_heads})")
        check_every(self.full_every, "gated delta net", "full_every")

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise conv1d: queries, keys and values."""
        return 2 * self.key_dim + self.value_dim

    def is_linear(self, index: int) -> bool:
        return on_layer(index, self.full_every)

    def linear_layers_in(self, start: int, end: int) -> int:
        """Linear-attention layers among start .. end - 1 (0-based), in closed form."""
        return layers_in(start, end, self.full_every)

    def params(self, hidden: int) -> int:
        """One mixer: in_proj_qkvz, in_proj_ba, conv1d (conv_dim x K), dt_bias, A_log, the gated norm, out_proj."""
        projections = hidden * (2 * self.key_dim + 2 * self.value_dim) + hidden * 2 * self.value_heads + self.value_dim * hidden
        return projections + self.conv_dim * self.conv_kernel + 2 * self.value_heads + self.value_head_dim


def chunks(seq_len: int) -> int:
    """Chunks of one sequence: the sequence padded to a multiple of CHUNK (torch_chunk_gated_delta_rule pads)."""
    return math.ceil(seq_len / CHUNK)
