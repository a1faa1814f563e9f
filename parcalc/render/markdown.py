"""Markdown with `$...$` math: the derivation as formula, substitution and value."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from parcalc.render.latex_math import term_tex, tex_value
from parcalc.render.values import column_heading, format_cell, format_value

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result, Table


def render_markdown(result: Result, figures: Sequence[tuple[str, str]] = ()) -> str:
    """`figures`: (title, file) of pictures written beside the Markdown file; they are linked
    after the derivations, and the tables they were drawn from (parcalc.render.figures.
    FIGURE_TABLES) are left out."""
    out = [f"# {result.title}", ""]
    if result.inputs:
        out += ["## Inputs", "", "| symbol | value | meaning | source |", "|---|---|---|---|"]
        for t in result.inputs:
            out.append(f"| ${t.latex}$ | {_cell(format_value(t.value, t.unit))} | {_cell(t.description)} | {_cell(t.source)} |")
        out.append("")
    if result.derivations:
        out += ["## Derivation", ""]
        for d in result.derivations:
            out += derivation_markdown(d)
    skipped: frozenset[str] = frozenset()
    if figures:
        from parcalc.render.figures import FIGURE_TABLES

        skipped = FIGURE_TABLES
        out += ["## Figures", ""]
        for title, path in figures:
            out += [f"![{_alt(title)}]({_link(path)})", ""]
    for table in result.tables:
        if table.key not in skipped:
            out += table_markdown(table)
    if result.verdicts:
        out += ["## Verdict", ""] + [f"- {v}" for v in result.verdicts] + [""]
    assumptions = result.all_assumptions()
    if assumptions:
        out += ["## Assumptions", ""] + [f"- {_cell(a)}" for a in assumptions] + [""]
    return "\n".join(out).rstrip() + "\n"


def derivation_markdown(d: Derivation) -> list[str]:
    lhs = d.latex_symbol
    formula = d.formula_tex()
    substituted = d.substituted_tex(term_tex)
    value = tex_value(d.value, d.unit)
    # the same steps as the LaTeX (render/latex.derivation_steps): a value taken as it is once, a
    # substitution that is already the value not again ("= 84.3011 ms = 84.3011 ms", issue #14)
    steps = [f"{lhs} = {value}"] if formula == lhs else [f"{lhs} = {formula}"]
    if formula != lhs and substituted != formula:
        steps.append(f"\\phantom{{{lhs}}} = {substituted}")
    if formula != lhs and value not in (substituted, formula):
        steps.append(f"\\phantom{{{lhs}}} = {value}")
    lines = [f"**{_cell(d.label)}**", "", "$$", " \\\\\n".join(steps), "$$", ""]
    lines += [f"Result: **{_cell(format_value(d.value, d.unit))}**", ""]
    if d.source:
        lines += [f"*Source:* {_cell(d.source)}", ""]
    return lines


def table_markdown(table: Table) -> list[str]:
    headers = [column_heading(c, "()") for c in table.columns]
    out = [f"### {_cell(table.title)}", "", "| " + " | ".join(map(_cell, headers)) + " |"]
    out.append("|" + "|".join("---" for _ in headers) + "|")
    for row in table.rows:
        out.append("| " + " | ".join(_cell(format_cell(v, c.unit, c.memory)) for v, c in zip(row, table.columns, strict=True)) + " |")
    return out + [""]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _alt(text: str) -> str:
    """Image alt text: no brackets or newlines that would end it."""
    return text.replace("[", "(").replace("]", ")").replace("\n", " ")


def _link(path: str) -> str:
    """A relative link to a file beside the .md: spaces and parentheses percent-encoded."""
    from urllib.parse import quote

    return quote(path)
