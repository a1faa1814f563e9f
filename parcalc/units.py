"""Units: parse quantities such as "1.41GHz", "80GiB", "200Gb/s" into base units, and format them back.

Base units everywhere in the core: FLOP, FLOP/s, bytes ("B"), bytes per second ("B/s"),
seconds ("s"), hertz ("Hz"), plain numbers ("") and fractions ("fraction", shown as %).

SI prefixes (k, M, G, T, P, E: powers of 1000) and IEC prefixes (Ki, Mi, Gi, Ti, Pi, Ei:
powers of 1024) are kept apart, as in pint's definitions: "80GB" is 80e9 bytes and "80GiB" is
80 * 2**30 bytes. A lower-case "b" is a bit: "200Gb/s" is 25e9 bytes per second.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

from parcalc.errors import InputError

if TYPE_CHECKING:
    from decimal import Context, Decimal

SI_PREFIXES: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}
IEC_PREFIXES: dict[str, float] = {
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
TIME_UNITS: dict[str, float] = {
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "min": 60.0,
    "h": 3600.0,
}
BITS_PER_BYTE = 8

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40

MAX_COUNT = 2**53  # counts above this are not exact in floating point, and no run is that large
# No quantity needs more characters than this; longer text is refused before the regex sees it
# (a long run of digits makes its backtracking quadratic).
MAX_QUANTITY_CHARS = 100
# Error messages show at most this many characters of a value a user gave.
MAX_SHOWN_CHARS = 80


class Dimension(str, Enum):
    """What a quantity measures; decides which suffixes parse and how values print."""

    COUNT = "count"
    FREQUENCY = "frequency"
    BYTES = "bytes"
    BANDWIDTH = "bandwidth"
    TIME = "time"
    FLOP = "flop"
    FLOP_RATE = "flop_rate"
    FRACTION = "fraction"
    POWER = "power"


BASE_UNIT: dict[Dimension, str] = {
    Dimension.COUNT: "",
    Dimension.FREQUENCY: "Hz",
    Dimension.BYTES: "B",
    Dimension.BANDWIDTH: "B/s",
    Dimension.TIME: "s",
    Dimension.FLOP: "FLOP",
    Dimension.FLOP_RATE: "FLOP/s",
    Dimension.FRACTION: "fraction",
    Dimension.POWER: "W",
}

EXAMPLES: dict[Dimension, str] = {
    Dimension.COUNT: "4096, 4k, 1.5M, 1e12, 64Ki",
    Dimension.FREQUENCY: "1.41GHz, 1410MHz",
    Dimension.BYTES: "80GB, 80GiB, 512MiB (B = bytes, b = bits)",
    Dimension.BANDWIDTH: "900GB/s, 2.039TB/s, 200Gb/s (bits), 25GiB/s",
    Dimension.TIME: "5us, 1.5ms, 2s, 100ns",
    Dimension.FLOP: "3.15e23, 1.2PFLOP",
    Dimension.FLOP_RATE: "312TFLOP/s, 312T",
    Dimension.FRACTION: "0.4, 40%",
    Dimension.POWER: "700W, 1.2kW",
}

# What a CLI flag of each dimension looks like with its unit, for "has no unit" errors.
UNIT_EXAMPLES: dict[Dimension, str] = {
    Dimension.FREQUENCY: "1.41GHz",
    Dimension.BYTES: "24GiB",
    Dimension.BANDWIDTH: "900GB/s",
    Dimension.TIME: "5us",
    Dimension.FLOP: "1.2PFLOP",
    Dimension.FLOP_RATE: "312TFLOP/s",
    Dimension.POWER: "700W",
}

_NUMBER = re.compile(
    r"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|infinity|nan))"
    r"\s*(?P<suffix>\S*)\s*$",
    re.IGNORECASE,
)


def _prefix_factor(prefix: str) -> float | None:
    if prefix in SI_PREFIXES:
        return SI_PREFIXES[prefix]
    if prefix == "K":  # common spelling of kilo in "4K" sequence lengths
        return 1e3
    return IEC_PREFIXES.get(prefix)


def _suffix_factor(suffix: str, dimension: Dimension) -> float | None:
    """The multiplier a suffix stands for in this dimension, or None if it does not belong."""
    if dimension is Dimension.COUNT:
        return _prefix_factor(suffix)
    if dimension is Dimension.TIME:
        return TIME_UNITS.get(suffix, 1.0 if suffix == "" else None)
    if dimension is Dimension.FRACTION:
        return {"": 1.0, "%": 0.01}.get(suffix)
    if dimension is Dimension.FREQUENCY:
        if suffix == "":
            return 1.0
        if suffix.lower().endswith("hz"):
            prefix = suffix[:-2]
            return _prefix_factor(prefix) or _prefix_factor(prefix.upper())
        return None
    if dimension is Dimension.BYTES:
        return _data_factor(suffix, per_second=False)
    if dimension is Dimension.BANDWIDTH:
        return _data_factor(suffix, per_second=True)
    if dimension is Dimension.POWER:
        return _prefix_factor(suffix[:-1]) if suffix.endswith("W") else (1.0 if suffix == "" else None)
    if dimension in (Dimension.FLOP, Dimension.FLOP_RATE):
        unit = "FLOP/s" if dimension is Dimension.FLOP_RATE else "FLOP"
        for spelling in (unit, "FLOPS") if dimension is Dimension.FLOP_RATE else (unit,):
            if suffix.upper().endswith(spelling.upper()):
                return _prefix_factor(suffix[: -len(spelling)])
        return _prefix_factor(suffix)
    return None


def _data_factor(suffix: str, per_second: bool) -> float | None:
    if suffix == "":
        return 1.0
    body = suffix
    if per_second:
        for ending in ("/s", "ps"):
            if body.endswith(ending):
                body = body[: -len(ending)]
                break
        else:
            return None
    if body.endswith("B"):
        scale = 1.0
    elif body.endswith("b"):
        scale = 1.0 / BITS_PER_BYTE
    else:
        return None
    prefix = _prefix_factor(body[:-1])
    return None if prefix is None else prefix * scale


def parse_quantity(
    text: str | float | int,
    dimension: Dimension,
    flag: str,
    *,
    allow_zero: bool = False,
    allow_negative: bool = False,
    require_unit: bool = False,
) -> float:
    """Parse `text` as a quantity of `dimension`, returned in base units.

    `flag` names where the text came from (a CLI flag or preset key), for the error message.
    Non-finite values are always rejected; zero and negative ones unless allowed.
    `require_unit`: text without a unit (other than a plain 0) is an error for the dimensions of
    UNIT_EXAMPLES, so that `--clock 1.41` is not silently 1.41 Hz.
    """
    return float(_parse_exact(text, dimension, flag, allow_zero, allow_negative, require_unit))


def _parse_exact(text: str | float | int, dimension: Dimension, flag: str, allow_zero: bool, allow_negative: bool,
                 require_unit: bool) -> Decimal | float | int:  # fmt: skip
    """The quantity, exact: a Decimal, an int, or a float (a YAML float as it is; a short decimal's fraction
    rounded once, see _exact_product; inf / nan spellings)."""
    if isinstance(text, bool):
        raise _bad(text, dimension, flag)
    if isinstance(text, int):
        value: Decimal | float | int = text
    elif isinstance(text, float):
        # exact as it is: Decimal(text) would hold the very same value, and every check below compares it exactly
        value = float(text)
    else:
        if len(str(text)) > MAX_QUANTITY_CHARS:
            raise InputError(f"{flag}: {shown(text)} is too long to be a quantity; {_expected(dimension)}")
        match = _NUMBER.match(str(text))
        if match is None:
            raise _bad(text, dimension, flag)
        factor = _suffix_factor(match["suffix"], dimension)
        if factor is None:
            raise _bad(text, dimension, flag)
        if require_unit and not match["suffix"] and dimension in UNIT_EXAMPLES and _is_nonzero(match["number"]):
            raise InputError(f"{flag}: {shown(text)} has no unit; write it with one, e.g. {UNIT_EXAMPLES[dimension]}")
        value = _exact_product(match["number"], factor)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{flag}: {shown(text)} is not a finite number")
    if value < 0 and not allow_negative:
        raise InputError(f"{flag}: {shown(text)} must not be negative")
    if value == 0 and not allow_zero:
        raise InputError(f"{flag}: {shown(text)} must be greater than zero")
    as_float = float(value)
    if math.isinf(as_float):
        raise InputError(f"{flag}: {shown(text)} is too large (beyond {_FLOAT_MAX})")
    if as_float == 0 and value != 0:
        raise InputError(f"{flag}: {shown(text)} is too small (below {_FLOAT_MIN}, the smallest number parcalc can hold)")
    return value


_FLOAT_MAX = "1.8e308"
_FLOAT_MIN = "5e-324"
# A plain whole number of at most this many digits ("4096", "1536") is read as an int: exact, and a float
# holds it exactly (< 2^53). A short decimal with a unit is worked out in ints (_exact_product); anything else goes
# through decimal (_exact_context).
_PLAIN_DIGITS = 15


def _plain_whole(number: str) -> bool:
    return number.isascii() and number.isdigit() and len(number) <= _PLAIN_DIGITS


@cache
def _exact_context() -> Context:
    """Exact decimal arithmetic that never traps: an exponent of a million gives Infinity (too large)
    or 0 (too small) instead of decimal.Overflow. Made on first use: importing decimal (~0.8 ms of a
    start) is paid only by a quantity with a fraction, an exponent or a unit, not by `--batch 1536`."""
    from decimal import Context

    return Context(prec=40, Emax=999_999_999_999_999_999, Emin=-999_999_999_999_999_999, traps=[])


def _is_nonzero(number: str) -> bool:
    """Nonzero and finite: inf and nan are refused as not finite, whatever their unit."""
    if _plain_whole(number):
        return int(number) != 0
    short = _short_decimal(number)
    if short is not None:
        return short[0] != 0
    return not number.lstrip("+-")[:1].isalpha() and _exact_context().create_decimal(number) != 0


# The largest power of ten _short_decimal writes out as an int: a preset's "3.4 us" or "19.5 TFLOP/s" is 10^-7 or
# 10^12 of a base unit; anything beyond goes to decimal, which bounds nothing.
_SHORT_EXPONENT = 30


def _short_decimal(text: str) -> tuple[int, int] | None:
    """A decimal text of at most _PLAIN_DIGITS digits ("3.4", "-19.5", "1e-06", "125000000.0") as the exact
    fraction numerator / denominator, the denominator a power of ten; None for a longer text or a larger exponent."""
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole.lstrip("+-") + fraction
    if not (digits.isascii() and digits.isdigit() and len(digits) <= _PLAIN_DIGITS):
        return None
    if exponent and not exponent.lstrip("+-").isdigit():
        return None
    power = (int(exponent) if exponent else 0) - len(fraction)
    if abs(power) > _SHORT_EXPONENT:
        return None
    numerator = -int(digits) if whole.startswith("-") else int(digits)
    return (numerator * 10**power, 1) if power >= 0 else (numerator, 10**-power)


def _exact_product(number: str, factor: float) -> Decimal | float | int:
    """number x factor, exact, so that "2.039TB/s" is exactly 2039e9 B/s once rounded to a float.

    A short decimal times a unit's factor ("3.4" x 1e-06: every preset quantity) is worked out in ints: the
    product, whole, is that int; else the float of the fraction, which Python rounds correctly (int / int), as
    float() of the Decimal product does (decimal's 40 digits hold a product of 15 and 17 digits exactly): the
    same float, without importing decimal (~0.8 ms of a one-liner's start). A fraction whose float is whole
    (beyond 2^52) keeps the Decimal, so that parse_count still sees it is not a whole number."""
    if number.lstrip("+-")[:1].isalpha():  # inf / nan spellings
        return float(number) * factor
    if factor == 1.0 and _plain_whole(number):  # the same value as the Decimal product, without decimal
        return int(number)
    # repr() gives the shortest decimal of the factor (1e-06, not 9.99...e-07): its exact value, as Decimal reads it
    short, unit = _short_decimal(number), _short_decimal(repr(factor))
    if short is not None and unit is not None:
        numerator, denominator = short[0] * unit[0], short[1] * unit[1]
        if numerator == 0 and number.startswith("-"):
            return -0.0  # Decimal's -0, as a float
        if numerator % denominator == 0:
            return numerator // denominator
        rounded = numerator / denominator
        if not rounded.is_integer():
            return rounded
    from decimal import Decimal

    exact = _exact_context()
    # repr() gives the shortest decimal of the factor (1e-06, not 9.99...e-07)
    return exact.multiply(exact.create_decimal(number), Decimal(repr(factor)))


def parse_count(text: str | float | int, flag: str, *, allow_zero: bool = False) -> int:
    """Parse a whole number such as "4096", "4k" or "1e6", at most 2^53; a fraction is an error.

    Checked in exact decimals: 9007199254740993 is refused, not rounded to the float 2^53."""
    value = _parse_exact(text, Dimension.COUNT, flag, allow_zero, False, False)
    if value != int(value):
        raise InputError(f"{flag}: {shown(text)} must be a whole number")
    if value > MAX_COUNT:
        amount = f"{int(value):,}" if value < 10**16 else f"{float(value):.4g}"  # as parcalc.core.activations.check_count says it
        raise InputError(f"{flag}: {amount} is beyond any possible size (at most 2^53 = {MAX_COUNT:,})")
    return int(value)


def shown(value: object) -> str:
    """A value for an error message: repr-quoted, control characters escaped, at most
    MAX_SHOWN_CHARS characters of it (the rest as "…"), so that a pasted megabyte stays one line."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_SHOWN_CHARS:
        return repr(text[: MAX_SHOWN_CHARS - 1])[:-1] + "…" + repr(text[:1])[-1]
    return repr(text)


def _expected(dimension: Dimension) -> str:
    return f"use a number with an optional unit, e.g. {EXAMPLES[dimension]}"


def _bad(text: object, dimension: Dimension, flag: str) -> InputError:
    return InputError(f"{flag}: cannot read {shown(text)} as {dimension.value.replace('_', ' ')}; {_expected(dimension)}")


# ---------------------------------------------------------------------------------------------
# Formatting


_SI_STEPS = [("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)]
_IEC_STEPS = [("Ei", 2.0**60), ("Pi", 2.0**50), ("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10), ("", 1.0)]
_SI_PREFIXED_UNITS = {"FLOP", "FLOP/s", "B", "B/s", "Hz", "W", "Wh"}


def format_number(value: float, significant: int = 8) -> str:
    """A plain number: integers with thousands separators, others with `significant` digits."""
    if isinstance(value, bool):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e21:
        return f"{int(value):,}"
    text = f"{value:.{significant}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}e{int(exponent)}"
    return text


def _trimmed(value: float, significant: int) -> str:
    text = f"{value:.{significant}g}"
    if "e" in text:  # only for values that cannot be scaled further
        return format_number(value, significant)
    return text


def split_prefixed(value: float, unit: str, *, iec: bool = False, significant: int = 8) -> tuple[str, str]:
    """Scale `value` (in base `unit`) to the largest prefix that keeps the mantissa >= 1.

    Returns (mantissa text, prefixed unit): (155.93472e12, "FLOP/s") -> ("155.93472", "TFLOP/s").
    """
    steps = _IEC_STEPS if iec else _SI_STEPS
    magnitude = abs(value)
    for prefix, factor in steps:
        if magnitude >= factor:
            return _trimmed(value / factor, significant), prefix + unit
    return _trimmed(value, significant), unit


def format_time(seconds: float, significant: int = 4) -> str:
    magnitude = abs(seconds)
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if magnitude >= factor:
            return f"{_trimmed(seconds / factor, significant)} {unit}"
    return "0 s" if seconds == 0 else f"{seconds:.{significant}g} s"


def format_quantity(value: float, unit: str, *, significant: int = 8, iec: bool = False) -> str:
    """Human text for a value in base `unit`, the unit always shown (except for plain numbers)."""
    if unit in _SI_PREFIXED_UNITS:
        mantissa, prefixed = split_prefixed(value, unit, iec=iec and unit in ("B", "B/s"), significant=significant)
        return f"{mantissa} {prefixed}"
    if unit == "s":
        return format_time(value, significant=min(significant, 6))
    if unit == "fraction":
        return f"{_trimmed(value * 100, 4)} %"
    if unit == "":
        return format_number(value, significant)
    return f"{format_number(value, significant)} {unit}"


def format_bytes(value: float) -> str:
    """Exact bytes with both conventions: '12,884,901,888 B (12.884902 GB = 12 GiB)'."""
    si_mantissa, si_unit = split_prefixed(value, "B")
    iec_mantissa, iec_unit = split_prefixed(value, "B", iec=True)
    exact = format_number(value)
    if si_unit == "B":
        return f"{exact} B"
    return f"{exact} B ({si_mantissa} {si_unit} = {iec_mantissa} {iec_unit})"


# ---------------------------------------------------------------------------------------------
# Training tokens and prices (parcalc.core.training_cost)

# "300B tokens": in a token count, B is a billion (GPT-3's "300B tokens" beside Llama 3's "15T"),
# the one spelling a count takes beyond the SI prefixes; elsewhere B stays a byte.


def parse_tokens(text: str, flag: str) -> int:
    """A token count such as "15T", "300B", "2.5e12" or "1.5M": a whole number, at most 2^53."""
    written = str(text)
    spelled = written.rstrip()[:-1] + "G" if written.rstrip().endswith("B") else written  # B = billion = G
    try:
        return parse_count(spelled, flag)
    except InputError as error:
        message = str(error).replace(shown(spelled), shown(written))
        if "cannot read" in message:
            message = f"{flag}: cannot read {shown(written)} as a token count; use e.g. 15T, 300B, 2.5e12, 1.5M"
        raise InputError(message) from None


# A price per GPU-hour: "2.50", "2.50/GPU-h", "$2.50/GPU-h", "€1.20", "1.20 EUR/h". A pattern, compiled by re
# on first use: only a run given a price reads one (~0.2 ms of every start otherwise).
_PRICE = r"^\s*(?P<pre>[$€£¥]|[A-Z]{3}\s)?\s*(?P<number>[0-9.eE+-]+)\s*(?P<post>[A-Z]{3})?\s*(?P<per>/\s*(?:GPU-?h(?:our)?|h(?:our)?))?\s*$"


def parse_price(text: str, flag: str) -> tuple[float, str]:
    """(price per GPU-hour, currency) from "2.50", "2.50/GPU-h", "$2.50/GPU-h", "€1.20/h" or
    "1.20 EUR/GPU-h"; the currency is "$" when none is written. Zero, negative and non-finite
    prices are refused."""
    if len(str(text)) > MAX_QUANTITY_CHARS:
        raise InputError(f"{flag}: {shown(text)} is too long to be a price")
    match = re.match(_PRICE, str(text))
    if match is None or (match["pre"] and match["post"]):
        raise InputError(f"{flag}: cannot read {shown(text)} as a price per GPU-hour; use e.g. 2.50, 2.50/GPU-h, $2.50/GPU-h, €1.20/GPU-h")
    try:
        value = parse_quantity(match["number"], Dimension.COUNT, flag)
    except InputError:
        raise InputError(f"{flag}: cannot read {shown(text)} as a price per GPU-hour (above zero); use e.g. 2.50, 2.50/GPU-h, "
                         "$2.50/GPU-h") from None  # fmt: skip
    currency = (match["pre"] or match["post"] or "$").strip()
    return value, currency
