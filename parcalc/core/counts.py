"""The checks every command's counts pass before any math: a whole number from 1 to 2^53, and a
sequence no longer than a model's learned positions. Their own module, so that a one-liner
(`flops`) checks its input without loading the activation model (parcalc.core.activations,
which re-exports them where its callers found them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.core.choices import Position
from parcalc.errors import InputError

if TYPE_CHECKING:
    from parcalc.core.model import TransformerModel

MAX_COUNT = 2**53  # counts above this are not exact in floating point, and no run is that large


def check_count(flag: str, value: object) -> None:
    """A whole number from 1 to 2^53; anything else is an InputError naming the flag."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{flag}: must be a whole number of at least 1, got {value!r}")
    if value > MAX_COUNT:
        raise InputError(f"{flag}: {value:.4g} is beyond any possible size (at most 2^53 = {MAX_COUNT:,})")


def check_sequence(model: TransformerModel, seq_len: int) -> None:
    """A model with learned positions has no position beyond its table."""
    if model.position is Position.LEARNED and model.max_seq_len and seq_len > model.max_seq_len:
        raise InputError(
            f"--seq-len: {seq_len} tokens, but {model.name} has {model.max_seq_len} learned positions; "
            f"no position embedding exists beyond them (use --seq-len <= {model.max_seq_len})"
        )
