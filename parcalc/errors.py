"""The exceptions parcalc raises. Only the CLI turns them into `Error: ...` and an exit code."""

from __future__ import annotations

from typing import Any

# How much of a bad value an error message echoes: enough to recognise it, never a screenful.
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` for an error message: its repr (so control characters show as escapes), cut to about
    `limit` characters with an ellipsis and the full length when longer."""
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4,300 digits has no repr
        return "a number too large to show"
    if len(text) <= limit:
        return text
    length = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return f"{text[: limit - 1]}…{length}"


class ParcalcError(Exception):
    """Base class: a message a person can act on, and the exit code the CLI uses for it."""

    exit_code = 2


class InputError(ParcalcError, ValueError):
    """A flag, quantity or argument that cannot be used as given."""

    exit_code = 2


class PresetError(ParcalcError):
    """A preset that is unknown, malformed or invalid; the message names the file and key."""

    exit_code = 2


class InfeasibleError(ParcalcError):
    """A well-formed request with no answer (nothing fits, say)."""

    exit_code = 1


class RenderError(ParcalcError):
    """An output that could not be produced (TeX failed, say)."""

    exit_code = 1


class InfeasibleResult(InfeasibleError):
    """Nothing fits, with the Result that shows why (every configuration tried): the command prints
    it, in any format (a sweep's script still gets its JSON), then fails with exit 1."""

    # result: a parcalc.derivation.Result, not named here: derivation imports this module, and the errors are the ground floor
    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result
