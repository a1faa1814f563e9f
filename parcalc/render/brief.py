"""The terminal's brief form, the default of the text output (issue 28: `fit` printed 25 lines of
sourced inputs before its answer): the title, the answer and the verdicts that lead, the key
derivations one line each (symbol = value, no sources), the tables the command marks as its main
ones cut to their brief columns, the remaining verdicts, the assumptions that move the answer (each
wrapped to at most two lines, so that its gist survives an 80-column terminal), and a last line naming `--detail full`, which prints the whole derivation as before.

What is key is data on the Result (`key_terms`, `brief_tables`, each table's `brief_columns`,
`key_assumptions`), chosen by the command's results module; this module only formats it. The
plain form is here; the rich one (colour, a terminal) is parcalc.render.terminal's, from the same
choices.
"""

from __future__ import annotations

import shutil
import textwrap
from contextvars import ContextVar
from typing import TYPE_CHECKING

from parcalc.render.values import format_value
from parcalc.units import format_quantity

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result, Table

BRIEF = "brief"
FULL = "full"
DETAILS = (BRIEF, FULL)

# --detail LEVEL (parcalc.cli adds it to every command with --format): set at every invocation,
# read where the text is rendered (None: not given, the brief form).
chosen_detail: ContextVar[str | None] = ContextVar("chosen_detail", default=None)

FOOTER = "--detail full shows the derivation with sources, every input and assumption."
ASSUMPTIONS_HEADING = "Assumptions that move it"
# An assumption says what was assumed, then after its first ": " outside brackets why and from where (its sources, up to
# 800 characters: --detail full's). The brief form shows the what, its gist, in full, wrapped as a verdict is, to at most
# ASSUMPTION_LINES lines, the line it ends on filled: "GEMMs by their tiles at 1,429.7 MHz (bf16: one SM's main loop at
# 5.4414 TFLOP/s at the sweep's 1,328.5 MHz, ...)" needs two lines of 80 columns to get past its numbers, where one line
# stopped inside "5.4414 TFL…"; "links: NVLink 4 ..." keeps its one line.
ASSUMPTION_LINES = 2


def terminal_width() -> int:
    """The width text is laid out for: the terminal's, or $COLUMNS, or 80 (a pipe)."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def term_line(derivation: Derivation) -> tuple[str, str, str]:
    """One key derivation as (symbol, value, label): `t_step = 16.7 s  Fastest strategy that fits`."""
    return derivation.symbol, brief_value(derivation.value, derivation.unit), derivation.label


def brief_value(value: float, unit: str) -> str:
    """A value to 6 significant digits with its unit; bytes in both conventions, 4 digits each
    ("60.85 GB = 56.67 GiB"), since a derivation may be memory (GiB) or bytes moved (GB)."""
    if unit == "B" and abs(value) >= 1000:
        return f"{format_quantity(value, unit, significant=4)} = {format_quantity(value, unit, significant=4, iec=True)}"
    return format_quantity(value, unit, significant=6)


def answer_formula(answer: Derivation) -> str:
    """The answer's formula in symbols before its value ("P = 2 × f × N_SM × FMA = "), so that the
    brief form still says how the answer is made; "" for a value taken as it is."""
    formula = answer.formula_text()
    return "" if formula == answer.symbol else f"{answer.symbol} = {formula} = "


def shown_terms(result: Result) -> tuple[Derivation, ...]:
    """The key derivations, less the answer the title block already shows."""
    return tuple(d for d in result.brief_derivations() if d.key != result.answer)


def render_brief_plain(result: Result, width: int | None = None) -> str:
    width = width or terminal_width()
    title = textwrap.wrap(result.title, width, break_on_hyphens=False) or [""]
    lines = [*title, "=" * max(map(len, title)), ""]
    if result.answer:
        answer = result.derivation(result.answer)
        lines += _wrapped(f"{answer.label}: {answer_formula(answer)}{format_value(answer.value, answer.unit)}", width, "=> ") + [""]
    for verdict in result.verdicts[: result.lead]:
        lines += _wrapped(verdict, width, "=> ")
    if result.lead:
        lines.append("")
    terms = [term_line(d) for d in shown_terms(result)]
    if terms:
        symbol_width = max(len(symbol) for symbol, _, _ in terms)
        value_width = max(len(value) for _, value, _ in terms)
        for symbol, value, label in terms:
            line = f"  {symbol:<{symbol_width}} = {value:<{value_width}}  {label}"
            lines.append(_clipped(line, width))
        lines.append("")
    for table in result.brief_table_list():
        shown = brief_table_lines(table)
        if max(map(len, shown[1:])) > width and table.rows:
            shown = record_lines(table, width)
        lines += textwrap.wrap(table.title, width, break_on_hyphens=False) + shown[1:] + legend_lines(table, width) + [""]
        if table.key == "components" and result.command == "memory":  # the answer at a glance, as in the full form
            from parcalc.render.memory_bar import bar_lines

            lines += bar_lines(result) + [""]
    for verdict in result.verdicts[result.lead :]:
        lines += _wrapped(verdict, width, "=> ")
    if result.verdicts[result.lead :]:
        lines.append("")
    assumptions = result.moving_assumptions()
    if assumptions:
        lines.append(ASSUMPTIONS_HEADING)
        lines += [line for a in assumptions for line in assumption_lines(a, width)]
        lines.append("")
    lines.append(FOOTER)
    return "\n".join(lines) + "\n"


def legend_lines(table: Table, width: int) -> list[str]:
    """What the table's abbreviated headings stand for (Column.about), wrapped under it: `S: shard group ...; v: ...`."""
    told = "; ".join(f"{c.label}: {c.about}" for c in table.columns if c.about)
    return textwrap.wrap(told, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False) if told else []


def brief_table_lines(table: Table) -> list[str]:
    """The table as parcalc.render.plain.table_lines lays it out, with its headings' units left out
    ("step", not "step [s]"): every cell carries its unit ("15.8 s", "2.2 TFLOP"), so the brief form
    spends no width saying it twice. Numbers right-aligned, text left."""
    from parcalc.render.values import format_cell

    headers = [c.label for c in table.columns]
    cells = [[format_cell(v, c.unit, c.memory) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [any(not isinstance(row[i], str) and row[i] is not None for row in table.rows) for i in range(len(headers))]

    def line(values: list[str]) -> str:
        return "  " + "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    return [table.title, line(headers), "  " + "  ".join("-" * w for w in widths), *(line(row) for row in cells)]


def record_lines(table: Table, width: int) -> list[str]:
    """A table too wide for the terminal as one record per row: "label value" pairs, wrapped
    between pairs (rich's record form, parcalc.render.terminal._table, in plain text)."""
    from parcalc.render.values import format_cell

    lines = [table.title]  # the caller wraps it
    marker = len(f"{len(table.rows)}.") + 1
    for number, row in enumerate(table.rows, start=1):
        cells = [(c.label, format_cell(v, c.unit, c.memory)) for v, c in zip(row, table.columns, strict=True)]
        pairs = [f"{label} {cell}" for label, cell in cells if cell]
        pieces: list[str] = []
        current = ""
        for pair in pairs:
            if current and len(current) + 2 + len(pair) > width - marker:
                pieces.append(current)
                current = pair
            else:
                current = f"{current}  {pair}" if current else pair
        if current or not pieces:  # a row of empty cells still gets its number
            pieces.append(current)
        lines.append(f"{f'{number}.':<{marker}}{pieces[0]}")
        lines += [" " * marker + piece for piece in pieces[1:]]
    return lines


def _wrapped(text: str, width: int, marker: str) -> list[str]:
    """A verdict wrapped to the width with a hanging indent under its marker."""
    return textwrap.wrap(text, width, initial_indent=marker, subsequent_indent=" " * len(marker),
                         break_on_hyphens=False, break_long_words=True) or [marker.rstrip()]  # fmt: skip


def assumption_lines(assumption: str, width: int, marker: str = "  - ") -> list[str]:
    """One assumption of the brief form under its marker: wrapped as a verdict is, on as many lines as its gist needs
    (gist_length) and at most ASSUMPTION_LINES, the last ending in an ellipsis when the text goes on (cut between words)."""
    lines = _wrapped(assumption, width, marker)
    gist = gist_length(assumption)
    shown, needed = 0, 0
    for needed, line in enumerate(lines, start=1):  # noqa: B007 - the count is what the loop is for
        shown += len(line) - len(marker) + 1  # the line's text and the space the wrap took away
        if shown > gist:
            break
    count = min(max(needed, 1), ASSUMPTION_LINES)
    if len(lines) <= count:
        return lines
    kept = lines[:count]
    last = kept[-1]
    if len(last) >= width:  # no room for the ellipsis: the last word goes (a line of one word: its end)
        words = last[len(marker) :].rsplit(" ", 1)
        last = last[: len(marker)] + words[0] if len(words) == 2 else last[: width - 1]
    kept[-1] = last.rstrip() + "…"
    return kept


def gist_length(assumption: str) -> int:
    """The length of what an assumption assumes: up to its first ": " outside brackets, where why and from where begin
    (the whole text when it has none)."""
    depth = 0
    for i, char in enumerate(assumption):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == ":" and depth == 0 and assumption[i + 1 : i + 2] == " ":
            return i
    return len(assumption)


def _clipped(line: str, width: int) -> str:
    """A line cut to the width, ending in an ellipsis when cut (an assumption's gist is its start)."""
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"
