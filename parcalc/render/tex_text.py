"""Text set in LaTeX: every character of user-supplied text escaped (a per-character map), and
`Latex`, the string already LaTeX that passes unescaped.

A module of its own so that the TikZ canvas (render/canvas.py) and the LaTeX renderer
(render/latex.py), which draws canvases, both use it without importing each other.
"""

from __future__ import annotations

import re

# One entry per character: LaTeX specials, and the non-ASCII symbols parcalc's own labels use, set
# in math. Letters (Greek Δ, Σ, µ among them) pass as text: LuaLaTeX sets them from the fonts, and
# render/pdf.py ascii_only gives pdfLaTeX their math forms.
_TEX_ESCAPES: dict[str, str] = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "&": r"\&",
    "#": r"\#",
    "^": r"\textasciicircum{}",
    "_": r"\_",  # a line may break after it inside long identifiers: _escape_chars, _UNDERSCORE_BREAK
    "~": r"\textasciitilde{}",
    "%": r"\%",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    # Brackets in braces: after `\\` (a table row, an answer line) or `\item` a leading `[` is read
    # as an optional argument, and a question id like "[a]" broke the PDF with a raw TeX error.
    # A break allowed after each closing bracket: source texts quote C array indices
    # (hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING]...) as one 300-pt word that ran off the page.
    "[": "{[}",
    "]": r"{]}\allowbreak{}",
    "×": r"$\times$",
    "·": r"$\cdot$",
    "√": r"$\surd$",
    "∈": r"$\in$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "≈": r"$\approx$",
    "⊙": r"$\odot$",
    "→": r"$\rightarrow$",
    "←": r"$\leftarrow$",
    "–": "--",
    "—": "---",
    # Curly quotes as TeX's ligatures (_escape_chars keeps adjacent ones apart)
    "\u201c": "``",
    "\u201d": "''",
    "\u2018": "`",
    "\u2019": "'",
    "\u00a0": "~",
}
# Letters, digits, marks, punctuation and symbols of any script pass through (José Müller, Greek,
# CJK: LuaLaTeX sets them, render/pdf.py turns them into "?" for pdfLaTeX); other spaces become a space;
# control, format (bidirectional overrides, zero-width), private-use and unassigned characters become
# '?', so that no input can break the document.
_PRINTABLE = {chr(c) for c in range(32, 127)} | {"\n", "\t"}


def _plain_char(ch: str) -> str:
    if ch in _PRINTABLE:
        return ch
    import unicodedata

    category = unicodedata.category(ch)
    if category == "Zs":
        return " "
    return ch if category[0] in "LMNPS" else "?"


class Latex(str):
    """A string that is already LaTeX and must not be escaped again."""


def tex_escape(value: object) -> Latex:
    """Escape text for LaTeX, character by character; `Latex` strings pass through."""
    if isinstance(value, Latex):
        return value
    text = _quotes(str(value))
    out, start = [], 0
    for match in _POWER.finditer(text):  # "2^30", "R^(m×k)": a superscript, not a literal caret
        out.append(_escape_chars(text[start : match.start()]))
        out.append(rf"\textsuperscript{{{_escape_chars(match.group(1) or match.group(2))}}}")
        start = match.end()
    out.append(_escape_chars(text[start:]))
    return Latex("".join(out))


# Straight quotes as TeX reads them: `"` always prints a closing double quote (a worksheet's "7B" came
# out as ”7B”), so each becomes an opening or a closing one from what stands before it. `'` is TeX's
# right quote, right for apostrophes (it's, '80s, Megatron-LM's) and closing quotes; it becomes an
# opening one only where a quotation opens: after a space, a bracket or a dash, before a letter. The
# curly quotes chosen here are then set as TeX's ligatures by _TEX_ESCAPES.
_OPENERS = frozenset(" \t\n([{<-/\u00a0\u2013\u2014\u201c\u2018")


def _quotes(text: str) -> str:
    out: list[str] = []
    for i, ch in enumerate(text):
        before = out[-1] if out else " "
        if ch == '"':
            out.append("\u201c" if before in _OPENERS else "\u201d")
        elif ch == "'" and before in _OPENERS and text[i + 1 : i + 2].isalpha():
            out.append("\u2018")
        else:
            out.append(ch)
    return "".join(out)


# An exponent written in text: ^ and digits, or ^ and a short parenthesised group
_POWER = re.compile(r"\^(?:(-?\d+)|\(([^()]{1,40})\))")


# A line may break after an underscore between two word pieces of three or more characters: source paths
# and identifiers (multi_latent_attention.py) wrap, while a subscript-like symbol in prose (t_1, k_opt,
# r_SM) stays whole, as TeX's own hyphenation keeps at least 2 letters before a break and 3 after it.
_UNDERSCORE_BREAK = re.compile(r"(?<=[A-Za-z0-9]{3})_(?=[A-Za-z0-9]{3})")
# So may it after the dot of a module path (parcalc.core.timing.compute) and the slash of a file path
# (models/llama/modeling_llama.py) between letters: pdfTeX hyphenates only a path's first word, so "(parcalc.core.timing
# .compute)" ran 13 pt into fit's margin. Not after a number's point (1.5), an abbreviation's (e.g.), a file's
# extension (.py) or a unit's slash (GB/s, tokens/s).
_PATH_BREAK = re.compile(r"(?<=[A-Za-z]{2})[./](?=[A-Za-z]{3})")


def _escape_chars(text: str) -> str:
    breaks = {m.start() for m in _UNDERSCORE_BREAK.finditer(text)} | {m.start() for m in _PATH_BREAK.finditer(text)}
    # "-" before another "-" gets a zero kern so that "--flag" keeps two hyphens (TeX makes "--" an en
    # dash); so does a quote before another quote, which TeX would otherwise join into a different pair.
    # A kern, not "{}": LuaLaTeX's font ligatures join "-{}-" into an en dash all the same.
    return "".join(
        ("-" + NO_LIGATURE) if ch == "-" and text[i + 1 : i + 2] == "-"
        else (_TEX_ESCAPES.get(ch) or _plain_char(ch)) + (NO_LIGATURE if ch in _QUOTE_CHARS and text[i + 1 : i + 2] in _QUOTE_CHARS else "")
        + (r"\allowbreak{}" if i in breaks else "")
        for i, ch in enumerate(text)
    )  # fmt: skip


NO_LIGATURE = r"{\kern0pt}"


_QUOTE_CHARS = frozenset("'`\u201c\u201d\u2018\u2019")
