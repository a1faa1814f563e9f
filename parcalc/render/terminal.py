"""Coloured terminal rendering with rich, used only when stdout is a terminal and colour is on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from parcalc.render.values import column_heading, format_cell, format_value

if TYPE_CHECKING:
    from parcalc.derivation import Result


def render_rich(result: Result, console: Any, detail: str = "full") -> None:
    """The result in colour: `detail` "full" every input, derivation, table and assumption;
    "brief" the short form (parcalc.render.brief)."""
    if detail != "full":
        render_brief_rich(result, console)
        return
    from rich.markup import escape
    from rich.table import Table as RichTable

    console.print(f"[bold underline]{escape(result.title)}[/]\n")
    if result.answer:  # the answer before the inputs and derivations that lead to it (issue #14)
        answer = result.derivation(result.answer)
        console.print(f"[bold yellow]=>[/] {escape(answer.label)}: [bold green]{escape(format_value(answer.value, answer.unit))}[/]\n")
    if result.lead:  # the verdicts that answer, before the inputs and derivations (issue 28: fit's after ~135 lines)
        console.print(_hanging("[bold yellow]=>[/]", [f"[bold]{escape(v)}[/]" for v in result.verdicts[: result.lead]]))
        console.print()
    if result.inputs:
        # symbol | value and description [n]; the sources follow as numbered dim lines, each once: a
        # fourth column of long sources folded every row into a narrow tower at 80 columns, and a source
        # under every row repeated one whitepaper three times before the answer (peak-flops --gpu)
        numbers: dict[str, int] = {}
        inputs = RichTable.grid(padding=(0, 2))
        inputs.add_column(no_wrap=True)
        inputs.add_column(overflow="fold")
        for term in result.inputs:
            body = f"{escape(format_value(term.value, term.unit)):<22} {escape(term.description)}"
            if term.source:
                body += f" [dim]\\[{numbers.setdefault(term.source, len(numbers) + 1)}][/]"
            inputs.add_row(f"  [cyan]{escape(term.symbol)}[/]", body)
        console.print("[bold]Inputs[/]")
        console.print(inputs)
        if numbers:
            console.print(_hanging("    ", [f"[dim]\\[{n}] {escape(source)}[/]" for source, n in numbers.items()]))
        console.print()
    for d in result.derivations:
        console.print(f"[bold]{escape(d.label)}[/]")
        console.print(_derivation_lines(d))
        console.print()
    for table in result.tables:
        console.print(_table(table, console.width))
        _legend(table, console)
        console.print()
        if table.key == "components" and result.command == "memory":  # the same components as a stacked bar
            from parcalc.render.memory_bar import rich_bar

            console.print(rich_bar(result, console.width))
            console.print()
    # verdicts and assumptions as two-column grids, so that a wrapped line keeps its hanging indent
    if result.verdicts[result.lead :]:
        console.print(_hanging("[bold yellow]=>[/]", [escape(v) for v in result.verdicts[result.lead :]]))
    assumptions = result.all_assumptions()
    if assumptions:
        console.print("\n[bold]Assumptions[/]")
        console.print(_hanging("  [dim]-[/]", [escape(a) for a in assumptions]))


def render_brief_rich(result: Result, console: Any) -> None:
    """The brief form in colour, from the same choices as parcalc.render.brief's plain one."""
    from rich.markup import escape

    from parcalc.render.brief import (
        ASSUMPTIONS_HEADING,
        FOOTER,
        answer_formula,
        assumption_lines,
        shown_terms,
        term_line,
    )

    console.print(f"[bold underline]{escape(result.title)}[/]\n")
    if result.answer:
        answer = result.derivation(result.answer)
        console.print(_hanging("[bold yellow]=>[/]", [f"{escape(answer.label)}: {escape(answer_formula(answer))}"
                                                      f"[bold green]{escape(format_value(answer.value, answer.unit))}[/]"]))  # fmt: skip
        console.print()
    if result.lead:
        console.print(_hanging("[bold yellow]=>[/]", [f"[bold]{escape(v)}[/]" for v in result.verdicts[: result.lead]]))
        console.print()
    terms = [term_line(d) for d in shown_terms(result)]
    if terms:  # one line each, the label cut to the width (the symbol and value are the point)
        symbol_width = max(len(symbol) for symbol, _, _ in terms)
        value_width = max(len(value) for _, value, _ in terms)
        room = console.width - (2 + symbol_width + 3 + value_width + 2)
        for symbol, value, label in terms:
            label = label if len(label) <= room else label[: max(0, room - 1)].rstrip() + "…"
            console.print(f"  [cyan]{escape(symbol):<{symbol_width}}[/] = [bold green]{escape(value):<{value_width}}[/]  {escape(label)}",
                          overflow="ellipsis", no_wrap=True)  # fmt: skip
        console.print()
    for table in result.brief_table_list():
        console.print(_table(table, console.width, compact=True))
        _legend(table, console)
        console.print()
        if table.key == "components" and result.command == "memory":  # the answer at a glance, as in the full form
            from parcalc.render.memory_bar import rich_bar

            console.print(rich_bar(result, console.width))
            console.print()
    if result.verdicts[result.lead :]:
        console.print(_hanging("[bold yellow]=>[/]", [escape(v) for v in result.verdicts[result.lead :]]))
        console.print()
    assumptions = result.moving_assumptions()
    if assumptions:
        console.print(f"[bold]{ASSUMPTIONS_HEADING}[/]")
        for assumption in assumptions:  # its start (the gist), wrapped to at most two lines as the plain form has it
            first, *rest = assumption_lines(assumption, console.width)
            console.print(f"  [dim]-[/] {escape(first[4:])}", no_wrap=True, overflow="ellipsis")
            for line in rest:
                console.print(escape(line), no_wrap=True, overflow="ellipsis")
        console.print()
    console.print(f"[dim]{escape(FOOTER)}[/]")


def _legend(table: Any, console: Any) -> None:
    """What the table's abbreviated headings stand for, dim, under it (parcalc.render.brief.legend_lines)."""
    from rich.markup import escape

    from parcalc.render.brief import legend_lines

    for line in legend_lines(table, console.width):
        console.print(f"[dim]{escape(line)}[/]")


def _header(column: Any) -> str:
    return column_heading(column)


def _table(table: Any, width: int, compact: bool = False) -> Any:
    """A rich table when it fits the terminal's width; else one wrapped record per row.

    Squeezed into 80 columns, the search's 24-column table showed "…" in every cell; as records
    each row reads "header value" pairs, wrapped between pairs (a no-break space inside each)."""
    from rich.markup import escape
    from rich.table import Table as RichTable

    cells = [[format_cell(v, c.unit, c.memory) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    # compact (the brief form): the label alone, as every cell carries its unit (parcalc.render.brief.brief_table_lines)
    headers = [column.label if compact else _header(column) for column in table.columns]
    # compact (the brief form): no vertical rules, one space either side, as plain text lays it out
    # (compact: a column's width, its one space of padding and one of rule; no edges)
    natural = (-1 if compact else 1) + sum((2 if compact else 3) + max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers))
    if natural <= width or not cells:
        from rich import box

        # a title wider than its table is printed above it, wrapped at the terminal's width: rich wraps a table's own
        # title at the table's width, which broke "(N t / B)" of scaling's 48-column terms table in two at 80 columns
        above = len(table.title) > natural
        rich_table = RichTable(title=None if above else escape(table.title), title_justify="left", header_style="bold",
                               box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD)  # fmt: skip
        if compact:
            rich_table.show_edge, rich_table.padding = False, (0, 1, 0, 0)
        for index, header in enumerate(headers):
            numeric = any(not isinstance(row[index], str) for row in table.rows)
            rich_table.add_column(escape(header), justify="right" if numeric else "left")
        for row in cells:
            rich_table.add_row(*(escape(cell) for cell in row))
        if above:
            from rich.console import Group
            from rich.text import Text

            return Group(Text(table.title, style="table.title"), rich_table)
        return rich_table
    grid = RichTable.grid(padding=(0, 1))
    grid.title, grid.title_justify = escape(table.title), "left"
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")  # only a pair longer than a line (a long source) is wrapped by rich
    marker = len(f"{len(cells)}.") + 1  # the number and the grid's one-space padding
    for number, row in enumerate(cells, start=1):
        # the label alone: the cells carry their units ("step 18.5 s", not "step [s] 18.5 s")
        pairs = [(column.label, cell) for column, cell in zip(table.columns, row, strict=True) if cell]
        grid.add_row(f"{number}.", "\n".join(_flow(pairs, max(20, width - marker))))
    return grid


def _flow(pairs: list[tuple[str, str]], width: int) -> list[str]:
    """"label value" pairs, two spaces apart, in lines of at most `width` characters, broken only
    between pairs (rich's own wrapping breaks at any space, no-break ones included)."""
    from rich.markup import escape

    lines: list[str] = []
    current, length = "", 0
    for label, value in pairs:
        size = len(label) + 1 + len(value)
        if current and length + 2 + size > width:
            lines.append(current)
            current, length = "", 0
        piece = f"[bold]{escape(label)}[/] {escape(value)}"
        current, length = (f"{current}  {piece}", length + 2 + size) if current else (piece, size)
    if current:
        lines.append(current)
    return lines


def _derivation_lines(d: Any) -> Any:
    """formula -> substituted -> value, each line after its "symbol =" and the source after "source:", wrapped under
    its own start: at 80 columns a long sum's last term and a source's second line fell back to column 0."""
    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table as RichTable

    pad = " " * len(d.symbol)
    formula, substituted = d.formula_text(), d.substituted_text()
    value = f"[bold green]{escape(format_value(d.value, d.unit))}[/]"
    if formula == d.symbol:  # a value taken as it is: "P_datasheet = P_datasheet" derived nothing
        rows = [(f"[cyan]{escape(d.symbol)}[/] =", value)]
    else:
        rows = [(f"[cyan]{escape(d.symbol)}[/] =", escape(formula)),
                *([(f"{pad} =", escape(substituted))] if substituted != formula else []), (f"{pad} =", value)]  # fmt: skip
    lines = RichTable.grid(padding=(0, 1))
    lines.add_column(no_wrap=True)
    lines.add_column(overflow="fold")
    for marker, text in rows:
        lines.add_row(marker, text)
    if not d.source:
        return Padding(lines, (0, 0, 0, 2))
    source = RichTable.grid(padding=(0, 1))
    source.add_column(no_wrap=True, style="dim")
    source.add_column(overflow="fold", style="dim")
    source.add_row("source:", escape(d.source))
    from rich.console import Group

    return Padding(Group(lines, source), (0, 0, 0, 2))


def _hanging(marker: str, texts: list[str]) -> Any:
    """A rich grid: the marker in its own column, each text wrapped beside it."""
    from rich.table import Table as RichTable

    grid = RichTable.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for text in texts:
        grid.add_row(marker, text)
    return grid
