"""Values and units as LaTeX math, shared by the Markdown and LaTeX renderers."""

from __future__ import annotations

from parcalc.derivation import Term
from parcalc.units import format_number, format_quantity, split_prefixed

_PREFIXED = {"FLOP", "FLOP/s", "B", "B/s", "Hz", "W", "Wh"}


def tex_number(text: str) -> str:
    """'12,884,901,888' -> '12{,}884{,}901{,}888'; '1.5e-06' -> '1.5 \\times 10^{-6}'."""
    if "e" in text and not text.startswith("inf"):
        mantissa, exponent = text.split("e")
        return rf"{mantissa} \times 10^{{{int(exponent)}}}"
    return text.replace(",", "{,}")


def tex_unit(unit: str) -> str:
    return r"\,\%" if unit == "%" else rf"\ \text{{{unit}}}" if unit else ""


def tex_quantity(value: float, unit: str, significant: int = 8) -> str:
    """Compact: '1.41\\ \\text{GHz}', '108', '155.93472\\ \\text{TFLOP/s}'."""
    if unit in _PREFIXED:
        mantissa, prefixed = split_prefixed(value, unit, significant=significant)
        return tex_number(mantissa) + tex_unit(prefixed)
    if unit == "fraction":
        return tex_number(format_quantity(value, unit).removesuffix(" %")) + tex_unit("%")
    if unit == "s":
        number, _, prefixed = format_quantity(value, unit).partition(" ")
        if prefixed.startswith("µ"):
            return tex_number(number) + r"\ \mu\text{s}"
        return tex_number(number) + tex_unit(prefixed)
    return tex_number(format_number(value, significant)) + tex_unit(unit)


def tex_value(value: float, unit: str) -> str:
    """A result in full: exact bytes and FLOP with separators, then the prefixed form."""
    if unit in ("B", "FLOP") and float(value).is_integer() and abs(value) >= 1e3:
        exact = tex_number(format_number(value)) + tex_unit(unit)
        relation = "=" if is_exact_prefixed(value, unit) else r"\approx"
        return rf"{exact} {relation} {tex_quantity(value, unit)}"
    return tex_quantity(value, unit)


def is_exact_prefixed(value: float, unit: str) -> bool:
    mantissa, prefixed = split_prefixed(value, unit)
    factor = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}[prefixed[: -len(unit)]]
    return float(mantissa) * factor == value


def term_tex(term: Term) -> str:
    return tex_quantity(term.value, term.unit)
