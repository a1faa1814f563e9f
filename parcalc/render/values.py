"""How values print in every text format: one place, so the terminal and the reports agree."""

from __future__ import annotations

from parcalc.units import format_bytes, format_number, format_quantity, split_prefixed


def format_value(value: object, unit: str = "") -> str:
    """A result value in full: exact counts with separators, and the prefixed form beside them."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    number = float(value)  # type: ignore[arg-type]
    if unit == "B":
        return format_bytes(number)
    if unit == "FLOP" and number.is_integer() and abs(number) >= 1e3:
        mantissa, prefixed = split_prefixed(number, unit)
        return f"{format_number(number)} FLOP ({mantissa} {prefixed})"
    return format_quantity(number, unit)


def format_cell(value: object, unit: str = "") -> str:
    """A table cell: compact, prefixed, unit shown."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    return format_quantity(float(value), unit, significant=6)  # type: ignore[arg-type]
