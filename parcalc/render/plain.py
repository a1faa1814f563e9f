"""Plain-text rendering (no colour, no rich): for pipes, NO_COLOR, files and fast start-up."""

from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING

from parcalc.render.values import column_heading, format_cell, format_value

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result, Table


def render_plain(result: Result) -> str:
    lines = [result.title, "=" * len(result.title), ""]
    if result.answer:  # the answer before the inputs and derivations that lead to it (issue #14)
        answer = result.derivation(result.answer)
        lines += [f"=> {answer.label}: {format_value(answer.value, answer.unit)}", ""]
    if result.lead:  # the verdicts that answer, before the inputs and derivations (issue 28: fit's after ~135 lines)
        lines += [f"=> {verdict}" for verdict in result.verdicts[: result.lead]] + [""]
    if result.inputs:
        lines.append("Inputs")
        width = max(len(t.symbol) for t in result.inputs)
        for term in result.inputs:
            source = f"  [{term.source}]" if term.source else ""
            lines.append(f"  {term.symbol:<{width}}  {format_value(term.value, term.unit):<24} {term.description}{source}")
        lines.append("")
    for derivation in result.derivations:
        lines += derivation_lines(derivation) + [""]
    for table in result.tables:
        lines += table_lines(table) + [""]
        if table.key == "components" and result.command == "memory":  # the same components as a stacked bar
            from parcalc.render.memory_bar import bar_lines

            lines += bar_lines(result) + [""]
    if result.verdicts[result.lead :]:
        lines += [f"=> {verdict}" for verdict in result.verdicts[result.lead :]] + [""]
    assumptions = result.all_assumptions()
    if assumptions:
        lines.append("Assumptions")
        lines += [f"  - {a}" for a in assumptions]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def derivation_lines(derivation: Derivation) -> list[str]:
    lines = [derivation.label]
    formula = derivation.formula_text()
    substituted = derivation.substituted_text()
    value = format_value(derivation.value, derivation.unit)
    pad = " " * len(derivation.symbol)
    if formula == derivation.symbol:  # a value taken as it is ("P_datasheet = P_datasheet" derived nothing)
        return [lines[0], f"  {derivation.symbol} = {value}"] + ([f"  source: {derivation.source}"] if derivation.source else [])
    lines.append(f"  {derivation.symbol} = {formula}")
    if substituted != formula:
        lines.append(f"  {pad} = {substituted}")
    if value != substituted:
        lines.append(f"  {pad} = {value}")
    if derivation.source:
        lines.append(f"  source: {derivation.source}")
    return lines


def table_lines(table: Table) -> list[str]:
    # Written column-wise with C-level helpers (map, zip, max): a comparison's tables have ~450
    # cells, and this is the one-liner's largest rendering cost.
    headers = [column_heading(c) for c in table.columns]
    units = [(c.unit, c.memory) for c in table.columns]
    seen: dict[tuple[type, object, tuple[str, bool]], str] = {}  # columns repeat their values (group sizes, counts): format each once

    def cell(value: object, unit: tuple[str, bool]) -> str:
        if isinstance(value, str) or not value:  # zeros bypass: -0.0 == 0.0 would share a key
            return format_cell(value, *unit)
        key = (type(value), value, unit)
        text = seen.get(key)
        if text is None:
            text = seen[key] = format_cell(value, *unit)
        return text

    cells = [[v if type(v) is str else cell(v, u) for v, u in zip(row, units, strict=True)] for row in table.rows]
    widths = [max(map(len, column)) for column in zip(headers, *cells, strict=True)]
    if table.rows:
        numeric = [not all(map(isinstance, column, repeat(str))) for column in zip(*table.rows, strict=True)]
    else:
        numeric = [False] * len(headers)
    justify = [str.rjust if num else str.ljust for num in numeric]

    def line(values: list[str]) -> str:
        return "  " + "  ".join([just(v, w) for just, v, w in zip(justify, values, widths, strict=True)]).rstrip()

    out = [table.title, line(headers), "  " + "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return out
