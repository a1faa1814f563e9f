"""The exceptions parcalc raises. Only the CLI turns them into `Error: ...` and an exit code."""

from __future__ import annotations


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
