"""Plain-text rendering (no colour, no rich): for pipes, NO_COLOR, files and fast start-up."""

from __future__ import annotations

from parcalc.derivation import Derivation, Result, Table, assumptions_of
from parcalc.render.values import format_cell, format_value


def render_plain(result: Result) -> str:
    lines = [result.title, "=" * len(result.title), ""]
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
    if result.verdicts:
        lines += [f"=> {verdict}" for verdict in result.verdicts] + [""]
    assumptions = assumptions_of(result)
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
    lines.append(f"  {derivation.symbol} = {formula}")
    if substituted != formula:
        lines.append(f"  {pad} = {substituted}")
    if value != substituted:
        lines.append(f"  {pad} = {value}")
    if derivation.source:
        lines.append(f"  source: {derivation.source}")
    return lines


def table_lines(table: Table) -> list[str]:
    headers = [c.label + (f" [{c.unit}]" if c.unit and c.unit != "fraction" else "") for c in table.columns]
    cells = [[format_cell(v, c.unit) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [not all(isinstance(row[i], str) for row in table.rows) for i in range(len(headers))]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  " + "  ".join(parts).rstrip()

    out = [table.title, line(headers), "  " + "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return out
