"""Quantity parsing and formatting: SI vs IEC, bits vs bytes, bad input named by flag."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parcalc.errors import InputError
from parcalc.units import (
    IEC_PREFIXES,
    SI_PREFIXES,
    TIME_UNITS,
    Dimension,
    _exact_product,
    format_bytes,
    format_quantity,
    parse_count,
    parse_quantity,
    split_prefixed,
)

D = Dimension


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        pytest.param("1.41GHz", D.FREQUENCY, 1.41e9, id="GHz"),
        pytest.param("1410MHz", D.FREQUENCY, 1.41e9, id="MHz"),
        pytest.param("1.41e9", D.FREQUENCY, 1.41e9, id="bare-hz"),
        pytest.param("80GiB", D.BYTES, 80 * 2**30, id="GiB-is-IEC"),
        pytest.param("80GB", D.BYTES, 80e9, id="GB-is-SI"),
        pytest.param("512 MiB", D.BYTES, 512 * 2**20, id="space-before-unit"),
        pytest.param("2.039TB/s", D.BANDWIDTH, 2.039e12, id="TB/s"),
        pytest.param("900GB/s", D.BANDWIDTH, 900e9, id="GB/s"),
        # 200 gigabits per second = 200e9 / 8 bytes per second (InfiniBand HDR's port rate)
        pytest.param("200Gb/s", D.BANDWIDTH, 25e9, id="Gb/s-is-bits"),
        pytest.param("400Gbps", D.BANDWIDTH, 50e9, id="Gbps-is-bits"),
        pytest.param("25GiB/s", D.BANDWIDTH, 25 * 2**30, id="GiB/s"),
        pytest.param("4k", D.COUNT, 4000, id="k-is-1000"),
        pytest.param("4K", D.COUNT, 4000, id="K-is-1000"),
        pytest.param("64Ki", D.COUNT, 65536, id="Ki-is-1024"),
        pytest.param("1e12", D.COUNT, 1e12, id="exponent"),
        pytest.param("5us", D.TIME, 5e-6, id="us"),
        pytest.param("1.5ms", D.TIME, 1.5e-3, id="ms"),
        pytest.param("312TFLOP/s", D.FLOP_RATE, 312e12, id="TFLOP/s"),
        pytest.param("312T", D.FLOP_RATE, 312e12, id="bare-prefix-rate"),
        pytest.param("3.15e23", D.FLOP, 3.15e23, id="flop-count"),
        pytest.param("40%", D.FRACTION, 0.4, id="percent"),
    ],
)
def test_parse_known_quantities(text: str, dimension: Dimension, expected: float) -> None:
    assert parse_quantity(text, dimension, "--x") == pytest.approx(expected, rel=1e-15)


def test_decimal_suffixes_parse_exactly() -> None:
    # 2.039 x 10^12 must be the float nearest 2039e9, not 2039000000000.0002 from 2.039 * 1e12,
    # and 3.4 us the float nearest 3.4e-6, not 3.3999999999999995e-06.
    assert parse_quantity("2.039TB/s", D.BANDWIDTH, "--bw") == 2039e9
    assert parse_quantity("3.4 us", D.TIME, "--latency") == 3.4e-6


@pytest.mark.parametrize(
    ("text", "dimension", "fragment"),
    [
        pytest.param("80GX", D.BYTES, "cannot read '80GX' as bytes", id="unknown-unit"),
        pytest.param("fast", D.FREQUENCY, "cannot read 'fast'", id="no-number"),
        pytest.param("-3", D.COUNT, "must not be negative", id="negative"),
        pytest.param("0", D.BYTES, "greater than zero", id="zero"),
        pytest.param("nan", D.COUNT, "not a finite number", id="nan"),
        pytest.param("inf", D.COUNT, "not a finite number", id="inf"),
        pytest.param("900GB", D.BANDWIDTH, "cannot read", id="bytes-for-bandwidth"),
        pytest.param("1.41GHz", D.BYTES, "cannot read", id="hertz-for-bytes"),
    ],
)
def test_bad_quantities_name_the_flag(text: str, dimension: Dimension, fragment: str) -> None:
    with pytest.raises(InputError) as error:
        parse_quantity(text, dimension, "--flag")
    assert str(error.value).startswith("--flag: ")
    assert fragment in str(error.value)


def test_error_lists_accepted_forms() -> None:
    with pytest.raises(InputError, match=r"e\.g\. 80GB, 80GiB"):
        parse_quantity("80GX", D.BYTES, "--memory")


def test_parse_count_rejects_fractions() -> None:
    with pytest.raises(InputError, match="whole number"):
        parse_count("1.5", "--layers")
    assert parse_count("4k", "--seq-len") == 4000


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        # seed 004 question 1.1: 2 x 1.41e9 x 108 x 512 = 155,934,720,000,000 FLOP/s
        pytest.param(155.93472e12, "FLOP/s", "155.93472 TFLOP/s", id="homework-peak"),
        pytest.param(1.41e9, "Hz", "1.41 GHz", id="clock"),
        pytest.param(3 / 19, "fraction", "15.79 %", id="fraction-as-percent"),
        pytest.param(2e-6, "s", "2 µs", id="microseconds"),
        pytest.param(4096, "", "4,096", id="count-separators"),
        pytest.param(1365.3333333, "FLOP/B", "1365.3333 FLOP/B", id="intensity"),
    ],
)
def test_format_quantity(value: float, unit: str, expected: str) -> None:
    assert format_quantity(value, unit) == expected


def test_format_bytes_shows_both_conventions() -> None:
    # 12,884,901,888 = 12 x 2^30 bytes exactly, and 12.884901888 x 10^9 bytes.
    assert format_bytes(12_884_901_888) == "12,884,901,888 B (12.884902 GB = 12 GiB)"


@given(st.floats(min_value=1e-3, max_value=1e20, allow_nan=False, allow_infinity=False))
def test_si_round_trip(value: float) -> None:
    mantissa, unit = split_prefixed(value, "B", significant=17)
    text = f"{mantissa}{unit}"
    assert math.isclose(parse_quantity(text, D.BYTES, "--x"), value, rel_tol=1e-12)


@given(st.integers(min_value=1, max_value=2**60))
def test_iec_round_trip(value: int) -> None:
    mantissa, unit = split_prefixed(value, "B", iec=True, significant=17)
    assert math.isclose(parse_quantity(f"{mantissa}{unit}", D.BYTES, "--x"), value, rel_tol=1e-12)


@given(st.floats(min_value=1, max_value=1e6), st.sampled_from(["k", "M", "G", "T"]))
def test_bits_are_an_eighth_of_bytes(number: float, prefix: str) -> None:
    bits = parse_quantity(f"{number}{prefix}b/s", D.BANDWIDTH, "--bw")
    bytes_ = parse_quantity(f"{number}{prefix}B/s", D.BANDWIDTH, "--bw")
    assert math.isclose(bits * 8, bytes_, rel_tol=1e-12)


def test_a_plain_whole_number_is_read_without_decimal() -> None:
    """parcalc.units reads "1536" as the int it is (no `import decimal`, ~0.8 ms of a start); the values and the
    errors are the exact-decimal path's: 2^53 + 1 is still refused, not rounded, and a fraction or a unit still
    goes through decimal."""
    import subprocess
    import sys

    script = ("import sys\nfrom parcalc.units import Dimension, parse_count, parse_quantity\n"
              "print(parse_count('1536', '--batch'), parse_quantity('4096', Dimension.COUNT, '--m'), 'decimal' in sys.modules)")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split() == ["1536", "4096.0", "False"]
    assert parse_count("9007199254740992", "--n") == 2**53
    with pytest.raises(InputError, match="beyond any possible size"):
        parse_count("9007199254740993", "--n")  # 16 digits: the decimal path, exact
    assert parse_quantity("2.039TB/s", Dimension.BANDWIDTH, "--bw") == 2039e9  # exact product, as before
    assert parse_count("007", "--n") == 7 and parse_count("4k", "--n") == 4000


# Every multiplier a unit stands for (parcalc.units' prefix tables, seconds, bits = an eighth of a byte).
_FACTORS = sorted({1.0, 0.01, 0.125} | {f * s for f in (*SI_PREFIXES.values(), *IEC_PREFIXES.values(), *TIME_UNITS.values())
                                         for s in (1.0, 0.125)})  # fmt: skip


def _decimal_product(number: str, factor: float) -> object:
    """The product as parcalc.units wrote it before the int path: Decimal(number) x Decimal(repr(factor)), 40 digits."""
    from decimal import Context, Decimal

    exact = Context(prec=40, Emax=999_999_999_999_999_999, Emin=-999_999_999_999_999_999, traps=[])
    return exact.multiply(exact.create_decimal(number), Decimal(repr(factor)))


@given(st.from_regex(r"\A[+-]?(\d{1,17}|\d{0,9}\.\d{1,9}|\d{1,3}\.?\d{0,3}[eE][+-]?\d{1,2})\Z"), st.sampled_from(_FACTORS))
def test_a_short_decimal_times_a_unit_is_the_decimal_product(number: str, factor: float) -> None:
    """parcalc.units._exact_product works "3.4" x 1e-06 out in ints (no `import decimal`); the value must be the one the
    exact Decimal product gives: the same float (both correctly rounded: int / int, float(Decimal)), the same sign
    (-0 included), the same wholeness (parse_count refuses a fraction) - for texts the int path takes (<= 15 digits)
    and those it leaves to decimal (longer ones)."""
    fast = _exact_product(number, factor)
    slow = _decimal_product(number, factor)
    assert repr(float(fast)) == repr(float(slow))  # type: ignore[arg-type]
    assert (fast == int(fast)) == (slow == int(slow))  # type: ignore[call-overload]


def test_a_preset_s_fractional_quantities_are_read_without_decimal() -> None:
    """A preset's "3.4 us" latency, "19.5 TFLOP/s" peak and YAML floats (an efficiency of 0.9) are read without
    `import decimal` (~0.8 ms of a one-liner such as comm-volume --strategy 3d); a 20-digit text still goes through it."""
    import subprocess
    import sys

    script = ("import sys\nfrom parcalc.units import Dimension as D, parse_quantity as q\n"
              "print(q('3.4 us', D.TIME, 'l'), q('19.5TFLOP/s', D.FLOP_RATE, 'p'), q(0.9, D.FRACTION, 'e'), "
              "q('200Gb/s', D.BANDWIDTH, 'b'), 'decimal' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3.4e-06", "19500000000000.0", "0.9", "25000000000.0", "False"]
    assert parse_quantity("1.2345678901234567891us", D.TIME, "--x") == 1.2345678901234568e-06  # 20 digits: decimal
    with pytest.raises(InputError, match="whole number"):
        parse_count("1.0005k", "--n")  # 1000.5: a fraction, refused
    # 9999999.99999999 x 2^40 = 10995116277759989004.88...: a fraction whose nearest float is whole; refused as a
    # fraction (the Decimal product says so), not as "beyond any possible size"
    with pytest.raises(InputError, match="whole number"):
        parse_count("9999999.99999999Ti", "--n")
