"""Coloured terminal rendering with rich, used only when stdout is a terminal and colour is on."""

from __future__ import annotations

from typing import Any

from parcalc.derivation import Result, assumptions_of
from parcalc.render.values import format_cell, format_value


def render_rich(result: Result, console: Any) -> None:
    from rich.markup import escape
    from rich.table import Table as RichTable

    console.print(f"[bold underline]{escape(result.title)}[/]\n")
    if result.inputs:
        # symbol | value and description, the source on its own dim line below: a fourth column of
        # long sources would fold every row into a narrow tower at 80 columns
        inputs = RichTable.grid(padding=(0, 2))
        inputs.add_column(no_wrap=True)
        inputs.add_column(overflow="fold")
        for term in result.inputs:
            body = f"{escape(format_value(term.value, term.unit)):<22} {escape(term.description)}"
            if term.source:
                body += f"\n[dim]{escape(term.source)}[/]"
            inputs.add_row(f"  [cyan]{escape(term.symbol)}[/]", body)
        console.print("[bold]Inputs[/]")
        console.print(inputs)
        console.print()
    for d in result.derivations:
        pad = " " * len(d.symbol)
        console.print(f"[bold]{escape(d.label)}[/]")
        formula, substituted = d.formula_text(), d.substituted_text()
        console.print(f"  [cyan]{escape(d.symbol)}[/] = {escape(formula)}")
        if substituted != formula:
            console.print(f"  {pad} = {escape(substituted)}")
        console.print(f"  {pad} = [bold green]{escape(format_value(d.value, d.unit))}[/]")
        if d.source:
            console.print(f"  [dim]source: {escape(d.source)}[/]")
        console.print()
    for table in result.tables:
        rich_table = RichTable(title=escape(table.title), title_justify="left", header_style="bold")
        for column in table.columns:
            unit = f" [{column.unit}]" if column.unit and column.unit != "fraction" else ""
            numeric = any(not isinstance(row[table.columns.index(column)], str) for row in table.rows)
            rich_table.add_column(escape(column.label + unit), justify="right" if numeric else "left")
        for row in table.rows:
            rich_table.add_row(*(escape(format_cell(v, c.unit)) for v, c in zip(row, table.columns, strict=True)))
        console.print(rich_table)
        console.print()
    # verdicts and assumptions as two-column grids, so that a wrapped line keeps its hanging indent
    if result.verdicts:
        console.print(_hanging("[bold yellow]=>[/]", [escape(v) for v in result.verdicts]))
    assumptions = assumptions_of(result)
    if assumptions:
        console.print("\n[bold]Assumptions[/]")
        console.print(_hanging("  [dim]-[/]", [escape(a) for a in assumptions]))


def _hanging(marker: str, texts: list[str]) -> Any:
    """A rich grid: the marker in its own column, each text wrapped beside it."""
    from rich.table import Table as RichTable

    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for text in texts:
        grid.add_row(marker, text)
    return grid
