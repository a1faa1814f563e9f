"""A layer kind on every layer but every N-th, counting 1-based: layer i (0-based) is of the other kind when
(i + 1) % N == 0, and N = 0 puts the kind on every layer. Hugging Face writes both patterns parcalc reads
this way: Gemma 3's sliding_window_pattern ("sliding_attention" if (i + 1) % pattern else "full_attention",
transformers models/gemma3/configuration_gemma3.py) and Qwen3-Next's full_attention_interval ("linear_attention"
if (i + 1) % interval else "full_attention", models/qwen3_next/configuration_qwen3_next.py)."""

from __future__ import annotations

from parcalc.errors import InputError


def check_every(every: int, what: str, key: str) -> None:
    """N = 0 (every layer of the kind) or at least 2 (N = 1 would leave none of it: a typo)."""
    if every < 0 or every == 1:
        raise InputError(f"{what}: {key} must be 0 (every layer {'local' if key == 'global_every' else 'linear'}) or at least 2, got {every}")


def on_layer(index: int, every: int) -> bool:
    """Whether layer `index` (0-based) is of the kind: not every `every`-th (1-based)."""
    return not every or (index + 1) % every != 0


def layers_in(start: int, end: int, every: int) -> int:
    """Layers of the kind among start .. end - 1 (0-based), in closed form: all but the multiples of `every` (1-based)."""
    if end <= start:
        return 0
    if not every:
        return end - start
    return (end - start) - (end // every - start // every)
