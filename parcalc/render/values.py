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


def format_cell(value: object, unit: str = "", memory: bool = False) -> str:
    """A table cell: compact, prefixed, unit shown. `memory`: bytes in binary units to 4 digits
    ("63.91 GiB"), as the fits verdict and the GPU's capacity are written."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    if memory:
        return format_quantity(float(value), unit, significant=4, iec=True)  # type: ignore[arg-type]
    if unit == "fraction" and 0 < abs(float(value)) < 1e-5:  # type: ignore[arg-type]
        # a share too small to matter in a table ("7.417e-5 %" reads as noise); the exact value is in --format json
        return "< 0.001 %" if float(value) > 0 else "> -0.001 %"  # type: ignore[arg-type]
    return format_quantity(float(value), unit, significant=6)  # type: ignore[arg-type]


def column_heading(column: object, brackets: str = "[]") -> str:
    """A column's heading with its unit once: "compute [s]"; a memory column's cells carry their
    binary unit each ("63.91 GiB", "64 KiB"), so its heading carries none (no "[B]" over GiB cells)."""
    label: str = getattr(column, "label", "")
    unit: str = getattr(column, "unit", "")
    if not unit or unit == "fraction" or getattr(column, "memory", False):
        return label
    return f"{label} {brackets[0]}{unit}{brackets[1]}"
