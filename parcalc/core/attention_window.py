"""Local attention: layers whose queries see a window (or a chunk) of W tokens, not the whole prefix.

- Sliding window (Mistral 7B, Gemma 2/3, gpt-oss): query i sees keys i - W + 1 .. i, min(i + 1, W)
  of them (transformers masking_utils.py: sliding_window_overlay, kv_idx > q_idx - sliding_window,
  and'ed with causal_mask_function, kv_idx <= q_idx; FlashAttention's window_size = (W - 1, 0)).
- Chunked (Llama 4's attention_chunk_size): the sequence is cut into chunks of W tokens and a query
  sees the keys of its own chunk up to itself (masking_utils.py chunked_overlay:
  kv_idx // chunk_size == q_idx // chunk_size, with the causal mask).

Which layers are local: all of them (Mistral 7B v0.1), or all but every `global_every`-th, counting
1-based (the global ones are layers i with (i + 1) % global_every == 0): Gemma 3's
sliding_window_pattern 6 (Gemma3TextConfig: "sliding_attention" if (i + 1) % pattern else
"full_attention"), gpt-oss's alternation (GptOssConfig.layer_types: sliding at even i), Llama 4's
no_rope_layer_interval 4 (Llama4TextConfig: the NoPE layer (i + 1) % 4 == 0 is the full one, the
other three chunked).

Work counted (the FLOPs convention of parcalc.core.flops): the attention core of a causal layer is
the area of the computed part of the s x s score square, s^2 / 2 for a full causal layer (the
convention of Megatron-LM's num_floating_point_operations and of FlashAttention's benchmarks for
causal); the same area for a window:

    sliding:  s^2 / 2 - (s - W)^2 / 2   (s > W; s^2 / 2 otherwise) = s W - W^2 / 2
    chunked:  n W^2 / 2 + r^2 / 2       (s = n W + r)

These are what FlashAttention-style kernels run: they skip the key blocks wholly outside the band
(FlashAttention-2 csrc/flash_attn/src/flash_fwd_kernel.h: n_block_min = max(0, (m_block x kBlockM
+ s_k - s_q - window_size_left) / kBlockN), n_block_max cut at the diagonal), to within the blocks
that straddle the band's edges. The exact count of unmasked (query, key) pairs is sum_i min(i + 1, W) =
s W - W^2 / 2 + W / 2 (sliding) and s^2 / 2 + s / 2 (full causal): the area plus half the
diagonal band's edge, the same half-diagonal parcalc leaves out of every causal count. Eager
attention (transformers' eager_attention_forward, Megatron's unfused softmax) and SDPA's math path
multiply the whole s x s square and mask it after: there the window saves no FLOPs and no memory,
which is what parcalc counts without --causal (torch.utils.flop_counter counts the full square).
"""

from __future__ import annotations

from enum import Enum

from parcalc.core.layer_pattern import check_every, layers_in, on_layer
from parcalc.errors import InputError
from parcalc.frozen import frozen

WINDOW_SOURCE = (
    "transformers masking_utils.py: sliding_window_overlay (kv_idx > q_idx - sliding_window) and chunked_overlay "
    "(kv_idx // chunk_size == q_idx // chunk_size), each and'ed with causal_mask_function (kv_idx <= q_idx); "
    "FlashAttention window_size = (W - 1, 0) skips the key blocks outside the band"
)


class WindowKind(str, Enum):
    SLIDING = "sliding"
    CHUNKED = "chunked"


@frozen
class AttentionWindow:
    """The local layers of a model: `kind` of `size` tokens on every layer but every `global_every`-th (0: all local)."""

    kind: WindowKind
    size: int
    global_every: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise InputError(f"attention window: size must be at least 1 token, got {self.size}")
        check_every(self.global_every, "attention window", "global_every")

    def is_local(self, index: int) -> bool:
        """Whether layer `index` (0-based) attends within the window."""
        return on_layer(index, self.global_every)

    def local_layers_in(self, start: int, end: int) -> int:
        """Local layers among start .. end - 1 (0-based), in closed form: all but the multiples of global_every (1-based)."""
        return layers_in(start, end, self.global_every)

    def pairs(self, seq_len: int) -> float:
        """Area of the computed (query, key) band of one sequence of a local layer (see the module's docstring)."""
        s, w = seq_len, self.size
        if self.kind is WindowKind.CHUNKED:
            full, rest = divmod(s, w)
            return full * w * w / 2 + rest * rest / 2
        return s * s / 2 - max(s - w, 0) ** 2 / 2

    @property
    def describe(self) -> str:
        pattern = ("every layer" if not self.global_every else
                   f"all layers but one in {self.global_every} (layers {self.global_every}, {2 * self.global_every}, ... attend to the whole prefix)")
        return f"{self.kind.value} window of {self.size:,} tokens on {pattern}"


def causal_pairs(seq_len: int) -> float:
    """Area of the causal triangle of one sequence: s^2 / 2 (a full causal layer's attention core)."""
    return seq_len * seq_len / 2


def core_share(window: AttentionWindow | None, layers: int, seq_len: int) -> float:
    """The attention core (Q·K^T and score·V) of a causal model's mean layer as a share of the full s x s
    square: (L_global x s^2/2 + L_local x pairs(s)) / (L s^2); 1/2 without a window."""
    if window is None:
        return 0.5
    local = window.local_layers_in(0, layers)
    return ((layers - local) * causal_pairs(seq_len) + local * window.pairs(seq_len)) / (layers * seq_len * seq_len)
