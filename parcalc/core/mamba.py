"""Mamba-2 mixers (Dao & Gu 2024, 'Transformers are SSMs', arXiv:2405.21060: the SSD algorithm) as Nemotron-H stacks them
with attention and MLP blocks: the mixer's shape, its parameters, and which layers are which block.

The mixer, as transformers' NemotronHMamba2Mixer builds it (models/nemotron_h/modeling_nemotron_h.py, transformers 5.24;
Megatron-LM's MambaMixer is the same layer): in_proj (h -> [z, x, B, C, dt]: d_inner + d_inner + 2 G N + H, bias
use_bias), a depthwise causal conv1d of K taps over [x, B, C] (conv_dim = d_inner + 2 G N channels, with a bias when
use_conv_bias), dt_bias, A_log and D (one per head), a gated RMSNorm of width d_inner (NemotronHRMSNormGated: y * silu(z),
normalised per group of d_inner / G), and out_proj (d_inner -> h). d_inner = H x P (mamba_num_heads x mamba_head_dim),
G = n_groups (B and C shared by the H / G heads of a group), N = ssm_state_size.

A Nemotron-H layer is ONE block: RMSNorm, then one mixer, then the residual add (NemotronHBlock). Which mixer is named
per layer by hybrid_override_pattern (NemotronHConfig._pattern_to_list: 'M' Mamba-2, '*' attention, '-' MLP, 'E' MoE),
so Nemotron-H-8B's 52 layers are 24 Mamba-2, 4 attention and 24 MLP blocks.
"""

from __future__ import annotations

import math
from functools import lru_cache

from parcalc.errors import InputError
from parcalc.frozen import frozen

MAMBA2_SOURCE = (
    "transformers models/nemotron_h/modeling_nemotron_h.py (5.24): NemotronHMamba2Mixer (in_proj to [z, xBC, dt], "
    "conv1d over xBC, dt_bias, A_log, D, NemotronHRMSNormGated, out_proj) and mamba2_chunk_scan; Dao & Gu 2024, "
    "'Transformers are SSMs' (arXiv:2405.21060), sec. 6 (the SSD algorithm by chunks)"
)
PATTERN_SOURCE = "transformers NemotronHConfig._pattern_to_list: 'M' linear_attention (Mamba-2), '*' full_attention, '-' mlp, 'E' moe"
MAMBA, ATTENTION, MLP = "M", "*", "-"
# Each block is one mixer between a column-parallel and a row-parallel linear (Megatron-LM MambaMixer @00bebb45
# mamba_mixer.py: in_proj column-parallel, out_proj row-parallel; attention: linear_qkv / linear_proj; the MLP: fc1 / fc2),
# so a layer of a hybrid runs one tensor-parallel collective forward and one backward (SP: an all-gather before and a
# reduce-scatter after); a transformer layer runs two of each (attention and MLP)
TP_SITES_PER_BLOCK = 1
BLOCKS = {MAMBA: "Mamba-2", ATTENTION: "attention", MLP: "MLP"}


@frozen
class BlockCounts:
    """How many layers of a range hold each kind of block."""

    mamba: int
    attention: int
    mlp: int


@frozen
class Mamba2:
    """The Mamba-2 mixers of a hybrid model and the layer pattern that places them.

    heads H, head_dim P, state N, groups G, conv_kernel K, chunk Q (the SSD's chunk length: chunk_size, 128 in
    Nemotron-H and in mamba_ssm's Mamba2 default, 256 in Megatron-LM's MambaMixer when unset). pattern: one character
    per layer, 'M' a Mamba-2 block, '*' an attention block, '-' an MLP block.
    """

    heads: int
    head_dim: int
    state: int
    groups: int
    conv_kernel: int
    chunk: int
    pattern: str
    conv_bias: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        if min(self.heads, self.head_dim, self.state, self.groups, self.conv_kernel, self.chunk) < 1:
            raise InputError("Mamba-2: heads, head_dim, state, groups, conv_kernel and chunk must be at least 1")
        if self.heads % self.groups:
            raise InputError(f"Mamba-2: heads ({self.heads}) must be a multiple of groups ({self.groups})")
        unknown = sorted(set(self.pattern) - set(BLOCKS))
        if "E" in unknown:
            raise InputError("Mamba-2 pattern: 'E' (MoE) blocks are not modelled yet; parcalc counts 'M' (Mamba-2), '*' (attention) "
                             "and '-' (MLP) blocks")  # fmt: skip
        if unknown or not self.pattern:
            raise InputError(f"Mamba-2 pattern: expected one of 'M', '*', '-' per layer, got {self.pattern!r}")

    @property
    def d_inner(self) -> int:
        """H x P: the width of x, z and the scan's output (expand x hidden in Nemotron-H)."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the depthwise conv1d: x, B and C (d_inner + 2 G N)."""
        return self.d_inner + 2 * self.groups * self.state

    @property
    def in_proj_width(self) -> int:
        """Output features of in_proj: z (d_inner), xBC (conv_dim) and dt (H)."""
        return self.d_inner + self.conv_dim + self.heads

    def params(self, hidden: int, bias: bool = False) -> int:
        """One mixer: in_proj, conv1d (K taps per channel, a bias per channel when conv_bias), dt_bias, A_log, D, the gated
        norm's weight (d_inner) and out_proj; `bias`: in_proj and out_proj with biases (use_bias)."""
        projections = hidden * self.in_proj_width + self.d_inner * hidden + ((self.in_proj_width + hidden) if bias else 0)
        conv = self.conv_dim * self.conv_kernel + (self.conv_dim if self.conv_bias else 0)
        return projections + conv + 3 * self.heads + self.d_inner

    def chunks(self, seq_len: int) -> int:
        """Chunks of one sequence: the sequence padded to a whole chunk (mamba2_chunk_scan pads; mamba_ssm's kernels mask)."""
        return math.ceil(seq_len / self.chunk)

    def block(self, index: int) -> str:
        return self.pattern[index]

    def blocks_in(self, start: int, end: int) -> BlockCounts:
        """The Mamba-2, attention and MLP blocks among layers start .. end - 1 (0-based)."""
        return _counts(self.pattern, max(start, 0), max(end, start, 0))


@lru_cache(maxsize=4096)
def _counts(pattern: str, start: int, end: int) -> BlockCounts:
    part = pattern[start:end]
    return BlockCounts(part.count(MAMBA), part.count(ATTENTION), part.count(MLP))
