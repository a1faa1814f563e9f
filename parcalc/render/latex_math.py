"""Values and units as LaTeX math, shared by the Markdown and LaTeX renderers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parcalc.units import format_number, format_quantity, split_prefixed

if TYPE_CHECKING:
    from parcalc.derivation import Term

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


def tex_term_cell(value: float, unit: str) -> str:
    """An input's value as a cell of the inputs table (text mode): bytes from 1 KiB up in both
    conventions, as the terminal gives them, the binary form on a second line so that the column
    keeps its width ("85.899346 GB" over "= 80 GiB": a capacity is binary, the verdict says GiB)."""
    if unit == "B" and abs(value) >= 1024:
        mantissa, prefixed = split_prefixed(value, unit, iec=True)
        binary = tex_number(mantissa) + tex_unit(prefixed)
        return rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}${tex_quantity(value, unit)}$\\$= {binary}$\end{{tabular}}"
    return f"${tex_quantity(value, unit)}$"


def tex_value(value: float, unit: str) -> str:
    """A result in full: exact bytes and FLOP with separators, then the prefixed form."""
    if unit in ("B", "FLOP") and float(value).is_integer() and abs(value) >= 1e3:
        exact = tex_number(format_number(value)) + tex_unit(unit)
        relation = "=" if is_exact_prefixed(value, unit) else r"\approx"
        text = rf"{exact} {relation} {tex_quantity(value, unit)}"
        if unit == "B" and abs(value) >= 1024:  # and in binary units, as the terminal and the verdicts give memory
            mantissa, prefixed = split_prefixed(value, unit, iec=True)
            factor = 1024 ** ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei").index(prefixed[:-1])
            binary = "=" if float(mantissa) * factor == value else r"\approx"
            text += rf" {binary} {tex_number(mantissa)}{tex_unit(prefixed)}"
        return text
    return tex_quantity(value, unit)


def is_exact_prefixed(value: float, unit: str) -> bool:
    mantissa, prefixed = split_prefixed(value, unit)
    factor = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}[prefixed[: -len(unit)]]
    return float(mantissa) * factor == value


def term_tex(term: Term) -> str:
    return tex_quantity(term.value, term.unit)


# ---------------------------------------------------------------------------------------------
# Inline math in worksheet prose: "$4D^2 + 8D^2$" parsed and set again from an allowed vocabulary


class MathRejected(ValueError):
    """Text between dollars that is not in the allowed vocabulary: it is printed as text instead."""


# Commands a worksheet's inline math may use, with the number of brace arguments each takes
MATH_COMMANDS: dict[str, int] = {
    **dict.fromkeys((
        "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi rho sigma"
        " tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega"
        " times cdot div pm mp le leq ge geq ne neq approx sim propto equiv in notin subset subseteq cup cap"
        " infty sum prod log ln exp min max lfloor rfloor lceil rceil ldots cdots dots to rightarrow leftarrow"
        " quad qquad"
    ).split(), 0),
    "frac": 2, "sqrt": 1, "mathbb": 1, "mathrm": 1, "mathbf": 1, "mathit": 1, "bar": 1, "hat": 1, "tilde": 1,
}  # fmt: skip
# Control symbols: thin, medium and negative spaces, literal braces
MATH_SYMBOLS = frozenset(",;!{}")
MATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 +-=()[]<>,.;:/*|!")
MATH_MAX_CHARS = 300
_MATH_NAMED = {"×": r"\times ", "·": r"\cdot ", "≤": r"\le ", "≥": r"\ge ", "≈": r"\approx ", "∈": r"\in ", "−": "-"}


def math_tex(source: str) -> str:
    """Inline math re-emitted token by token from MATH_COMMANDS, MATH_SYMBOLS and MATH_CHARS, with
    balanced braces, complete arguments and at most one superscript and one subscript per atom, so
    that it can neither run TeX code nor stop TeX with an error. Raises MathRejected otherwise."""
    text = "".join(_MATH_NAMED.get(ch, ch) for ch in source)
    if not text.strip() or len(text) > MATH_MAX_CHARS:
        raise MathRejected(source)
    out, position = _math_list(text, 0, closing=False)
    if position != len(text):
        raise MathRejected(source)
    return out


def _math_list(text: str, i: int, closing: bool) -> tuple[str, int]:
    """A sequence of atoms up to the end (or a closing brace when `closing`)."""
    out: list[str] = []
    scripts: set[str] = set()  # the scripts the last atom already has
    while i < len(text):
        ch = text[i]
        if ch == "}":
            if not closing:
                raise MathRejected(text)
            return "".join(out), i
        if ch in "^_":
            if ch in scripts or not out:
                raise MathRejected(text)  # a double superscript or subscript is a TeX error
            scripts.add(ch)
            argument, i = _math_argument(text, i + 1)
            out.append(ch + argument)
            continue
        atom, i = _math_atom(text, i)
        out.append(atom)
        if atom.strip():
            scripts = set()
    if closing:
        raise MathRejected(text)
    return "".join(out), i


def _math_argument(text: str, i: int) -> tuple[str, int]:
    """One argument: a braced group, or a single atom (a character or an argument-free command)."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text) or text[i] in "^_}":
        raise MathRejected(text)
    if text[i] == "{":
        inner, i = _math_list(text, i + 1, closing=True)
        return "{" + inner + "}", i + 1
    atom, j = _math_atom(text, i)
    if atom.startswith("\\") and MATH_COMMANDS.get(atom.strip()[1:], 0):
        raise MathRejected(text)
    return "{" + atom.strip() + "}", j


def _math_atom(text: str, i: int) -> tuple[str, int]:
    ch = text[i]
    if ch == "{":
        inner, j = _math_list(text, i + 1, closing=True)
        return "{" + inner + "}", j + 1
    if ch == "\\":
        j = i + 1
        while j < len(text) and text[j].isascii() and text[j].isalpha():
            j += 1
        name = text[i + 1 : j]
        if not name:
            if j < len(text) and text[j] in MATH_SYMBOLS:
                return "\\" + text[j], j + 1
            raise MathRejected(text)
        if name not in MATH_COMMANDS:
            raise MathRejected(text)
        out = "\\" + name
        for _ in range(MATH_COMMANDS[name]):
            while j < len(text) and text[j] == " ":
                j += 1
            if j >= len(text) or text[j] != "{":
                raise MathRejected(text)
            inner, j = _math_list(text, j + 1, closing=True)
            out += "{" + inner + "}"
            j += 1
        return out + " ", j
    if ch in MATH_CHARS:
        return ch, i + 1
    raise MathRejected(text)


def _closing_dollar(text: str, start: int) -> int:
    """Where the math opened at `start` closes, or -1. As pandoc reads TeX math: the opening dollar is
    followed by a non-space, the closing one preceded by a non-space and not followed by a digit, so
    that "costs $5 and $10" stays text."""
    if start + 1 >= len(text) or text[start + 1].isspace():
        return -1
    end = text.find("$", start + 1)
    while end > 0:
        if not text[end - 1].isspace() and text[end - 1] != "\\" and not text[end + 1 : end + 2].isdigit():
            return end
        end = text.find("$", end + 1)
    return -1


def split_inline_math(text: str) -> list[tuple[bool, str]]:
    """Pieces of prose: (True, math) for each `$...$` pair, (False, text) between; `\\$` is a dollar sign
    and an unpaired `$` stays text."""
    pieces: list[tuple[bool, str]] = []
    plain: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("\\$", i):
            plain.append("$")
            i += 2
            continue
        if text[i] == "$":
            end = _closing_dollar(text, i)
            if end > 0:
                if plain:
                    pieces.append((False, "".join(plain)))
                    plain = []
                pieces.append((True, text[i + 1 : end]))
                i = end + 1
                continue
        plain.append(text[i])
        i += 1
    if plain:
        pieces.append((False, "".join(plain)))
    return pieces
