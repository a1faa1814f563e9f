"""LaTeX: a Result as a fragment, and whole documents from Jinja templates.

Templates use LaTeX-friendly delimiters so braces stay readable: `\\VAR{x}` prints, `\\BLOCK{...}`
runs a statement, `\\#{...}` is a comment. Every value printed by `\\VAR{}` is escaped for
LaTeX unless it is a `Latex` string, i.e. built here from trusted pieces (formulas, numbers).
User-supplied text (worksheet prose, preset names, labels) can therefore never inject TeX.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.errors import shown
from parcalc.render.latex_math import term_tex, tex_term_cell, tex_value
from parcalc.render.tex_text import Latex, tex_escape  # tex_escape: also imported from here (report, tests)
from parcalc.render.values import column_heading, format_cell, format_value
from parcalc.resources import data_dir

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result, Table, Term

def prose_tex(value: object) -> Latex:
    """Worksheet prose: `$...$` inline math set through render/latex_math.math_tex (an allowed set of
    commands, re-emitted token by token), every other character escaped by tex_escape; math outside
    that set is printed as the text it is, dollars included."""
    from parcalc.render.latex_math import MathRejected, math_tex, split_inline_math

    out: list[str] = []
    for is_math, piece in split_inline_math(str(value)):
        if is_math:
            try:
                out.append(f"${math_tex(piece)}$")
                continue
            except MathRejected:
                piece = f"${piece}$"
        out.append(tex_escape(piece))
    return Latex("".join(out))




# ---------------------------------------------------------------------------------------------
# Pieces of a result, prepared for templates


def heading_tex(label: str, derivations: Sequence[Derivation]) -> Latex:
    """A derivation's label as a heading: the symbols it names as identifiers ("Bubble time per
    iteration (t_pb, ...)", the core's text labels) set as the math they are ($t_{pb}$), not as raw
    text with an underscore (issue 28); every other character escaped. Only symbols with a subscript
    (an underscore) are set: a bare "S" or "E" in prose is a word."""
    symbols = {t.symbol: t.latex for d in derivations for t in (*d.inputs, d.as_term()) if "_" in t.symbol and t.latex}
    if not symbols:
        return Latex(tex_escape(label))
    pattern = re.compile(r"(?<![\w])(" + "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True)) + r")(?![\w])")
    out, at = [], 0
    for match in pattern.finditer(label):
        out += [tex_escape(label[at : match.start()]), f"${symbols[match.group()]}$"]
        at = match.end()
    return Latex("".join(out) + tex_escape(label[at:]))


def derivation_steps(derivation: Derivation) -> list[Latex]:
    """The lines of an align* block: formula, substitution, value (repeats dropped)."""
    formula = derivation.formula_tex()
    substituted = derivation.substituted_tex(term_tex)
    value = tex_value(derivation.value, derivation.unit)
    if formula == derivation.latex_symbol:  # a value taken as it is: "P_ds = P_ds" derives nothing
        return [Latex(f"{derivation.latex_symbol} &= {value}")]
    lines = [Latex(f"{derivation.latex_symbol} &= {formula}")]
    if substituted != formula:
        lines.append(Latex(f"&= {substituted}"))
    if value != substituted:
        lines.append(Latex(f"&= {value}"))
    return lines


# A display line wider than this (estimated from its LaTeX, 5.5 pt a character of 11-pt math) cannot be
# set in align*, which never breaks a line: fit's t_tp / t_dp substitutions ran 18-140 pt off the page.
# Such a derivation is set as paragraphs of inline math instead, which TeX breaks after + and \times.
DISPLAY_LINE_CHARS = 76


def display_chars(step: str) -> int:
    """Roughly how many characters a line of LaTeX math prints: commands and braces removed, but a
    Greek letter one character and an operator name (max, min, log) its letters: fit's t_tp with a
    checkpointed MLP's re-gather (max(0, 99.7805 us - ...) twice) estimated at 76 ran 10 pt off the page."""
    text = re.sub(r"\\(alpha|beta|gamma|delta|epsilon|eta|theta|kappa|lambda|mu|nu|xi|pi|rho|sigma|tau|phi|chi|psi|omega)(?![A-Za-z])",
                  "g", step)  # \mu\text{s} prints two characters, not a command \mus
    text = re.sub(r"\\(max|min|log|exp|ln)(?![A-Za-z])", r"\1", text)
    text = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(?:times|cdot|approx|le|ge|in)\b", "x", text)
    text = re.sub(r"\\[A-Za-z]+|\\.|[{}&^_]", "", text)
    return len(text)


def inline_lines(steps: Sequence[str]) -> list[Latex]:
    """A wide derivation's steps as lines of inline math (the alignment mark dropped) that TeX may
    break after +, x and relations, and after the comma between a function's arguments (max(a, b))."""
    return [Latex(step.replace("&", "", 1).replace(", ", r",\allowbreak ")) for step in steps]


def is_wide(steps: Sequence[str]) -> bool:
    return any(display_chars(step) > DISPLAY_LINE_CHARS for step in steps)


def term_row(term: Term, notes: SourceNotes | None = None) -> dict[str, Any]:
    return {
        "symbol": Latex(f"${term.latex}$"),
        "value": Latex(tex_term_cell(term.value, term.unit)),
        "description": term.description,
        "source": term.source,
        "note": notes.number(term.source) if notes is not None else 0,
    }


class SourceNotes:
    """Sources as numbered notes: a table cell shows [n], the text is set below as a wrapping list
    (a source column of its own ran off the page). The same text keeps its number."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def number(self, source: str) -> int:
        """The note number of `source`, 0 for no source."""
        if not source:
            return 0
        return self._numbers.setdefault(source, len(self._numbers) + 1)

    def entries(self) -> list[dict[str, Any]]:
        return [{"number": n, "text": text} for text, n in self._numbers.items()]


# A table wider than this many columns but with no more rows than TRANSPOSE_ROWS is set on its side
# (one line per column): shrunk to the line width, comm-volume's 17 columns came out in 3-pt type.
TRANSPOSE_COLUMNS = 8
TRANSPOSE_ROWS = 6

# Table layout without shrinking (issue #14: \resizebox set fit's 15-column strategy table and the
# collectives tables in 3-4 pt type). Widths are estimated from the text: in \footnotesize (9 pt in an
# 11-pt document) Latin Modern's digits are 0.5 em = 4.5 pt wide and its lower-case letters 2.5-5 pt
# (4.1 on average), so 4.5 pt a character errs wide but for capitals; each column adds
# 2 \tabcolsep = 12 pt. The line is A4 less 2 x 2.3 cm (templates/preamble.tex.j2):
# 595.3 - 130.4 = 464.9 pt, 460 kept for rounding.
TABLE_PT_PER_CHAR = 4.5
# ... but capitals are wider: Latin Modern's average 0.72 em = 6.5 pt at 9 pt, 2 pt more than the estimate above
# (a column of "5.77244 TFLOP" cells ran 2.7 pt past the line counted at 4.5 pt a character)
TABLE_PT_PER_CAPITAL_EXTRA = 2.0
TABLE_COLUMN_PAD_PT = 12.0
TABLE_LINE_PT = 460.0
# A column wider than this many characters wraps (a p{} column, at spaces) before the table is split
TABLE_WRAP_CHARS = 16


def _text_pt(text: str) -> float:
    """The estimated width of `text` in a footnotesize table cell (TABLE_PT_PER_CHAR, capitals wider)."""
    return len(text) * TABLE_PT_PER_CHAR + sum(ch.isupper() for ch in text) * TABLE_PT_PER_CAPITAL_EXTRA


def _longest_word(text: str) -> float:
    """The widest word of `text` (pt): where a wrapping cell cannot break."""
    return max((_text_pt(word) for word in text.split()), default=0.0)


def table_parts(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> list[dict[str, Any]]:
    """Column groups of a table, each narrower than the line: text columns longer than
    TABLE_WRAP_CHARS wrap at spaces (p{} columns sharing the room the others leave), and a table that
    still does not fit is split into groups of columns that each repeat the row key (the leading
    columns that tell the rows apart: row_key_columns).
    Each part: `columns` (indices), `align` (a tabular preamble)."""
    count = len(headers)
    cells = [[headers[j], *(row[j] for row in rows)] for j in range(count)]
    natural = [max(map(_text_pt, column)) for column in cells]
    if sum(natural) + TABLE_COLUMN_PAD_PT * count <= TABLE_LINE_PT:
        return [{"columns": list(range(count)), "align": Latex("".join("r" if n else "l" for n in numeric))}]
    # cells wrap at spaces only: a number, or a word, is as wide as it is
    unbreakable = [max(_longest_word(c) for c in column) for column in cells]
    wraps = [natural[j] > TABLE_WRAP_CHARS * TABLE_PT_PER_CHAR for j in range(count)]
    least = [max(unbreakable[j], TABLE_WRAP_CHARS * TABLE_PT_PER_CHAR) if wraps[j] else natural[j] for j in range(count)]
    key = row_key_columns(rows, [least[j] + TABLE_COLUMN_PAD_PT for j in range(count)])
    key_pt = sum(least[j] + TABLE_COLUMN_PAD_PT for j in range(key))
    groups: list[list[int]] = []
    current: list[int] = []
    used = key_pt
    for j in range(key, count):
        need = least[j] + TABLE_COLUMN_PAD_PT
        if current and used + need > TABLE_LINE_PT:
            groups.append(current)
            current, used = [], key_pt
        current.append(j)
        used += need
    groups.append(current)
    parts = []
    for group in groups:
        columns = [*range(key), *group] if count > 1 else group
        widths = _share_line(columns, natural, least, wraps)
        align = "".join(_column_spec(numeric[j], widths[j], wraps[j]) for j in columns)
        parts.append({"columns": columns, "align": Latex(align)})
    return parts


# The row key a part repeats may take at most this share of the line (the rest is the part's own columns)
ROW_KEY_SHARE = 0.45


def row_key_columns(rows: Sequence[Sequence[str]], widths: Sequence[float]) -> int:
    """How many leading columns each part of a split table repeats: the fewest that tell every row
    apart (issue 28: fit's strategy table repeated only `strategy`, so its three "single GPU" rows,
    none / selective / full recomputation, could not be told apart in parts 2 and 3), within
    ROW_KEY_SHARE of the line; 1 when no such prefix is that narrow."""
    count = len(widths)
    for key in range(1, count):
        if sum(widths[:key]) > ROW_KEY_SHARE * TABLE_LINE_PT:
            break
        if len({tuple(row[:key]) for row in rows}) == len(rows):
            return key
    return 1


def _share_line(columns: Sequence[int], natural: Sequence[float], least: Sequence[float], wraps: Sequence[bool]) -> dict[int, float]:
    """Widths of one part's columns: the fixed ones as they are, the wrapping ones sharing what is
    left of the line in proportion to what they lack, none below its least width nor above its natural one."""
    widths = {j: (least[j] if wraps[j] else natural[j]) for j in columns}
    free = TABLE_LINE_PT - TABLE_COLUMN_PAD_PT * len(columns) - sum(widths.values())
    # a wrapping column whose longest word is its whole width (a long path, a 17-character name) is
    # already at its natural width: it lacks nothing, and must not take a share (nor divide by zero)
    growing = [j for j in columns if wraps[j] and natural[j] > widths[j]]
    while free > 1 and growing:  # in proportion to what each still lacks: a long source column gets most
        total = sum(natural[j] - widths[j] for j in growing)
        if total <= 0:
            break
        for j in list(growing):
            widths[j] += free * (natural[j] - widths[j]) / total
        free = 0.0
        for j in list(growing):
            if widths[j] > natural[j]:
                free += widths[j] - natural[j]
                widths[j] = natural[j]
                growing.remove(j)
    return widths


def _column_spec(numeric: bool, width_pt: float, wraps: bool) -> str:
    if not wraps:
        return "r" if numeric else "l"
    side = r"\raggedleft" if numeric else r"\raggedright"
    return rf">{{{side}\arraybackslash}}p{{{width_pt:.0f}pt}}"


def table_context(table: Table, max_rows: int = 60) -> dict[str, Any]:
    headers = [column_heading(c, "()") for c in table.columns]
    numeric = [not all(isinstance(row[i], str) for row in table.rows) for i in range(len(table.columns))]
    rows = [[format_cell(v, c.unit, c.memory) for v, c in zip(row, table.columns, strict=True)] for row in table.rows[:max_rows]]
    if len(headers) > TRANSPOSE_COLUMNS and 0 < len(rows) <= TRANSPOSE_ROWS:
        # the first column names each original row; every other column becomes a line
        names = [row[0] or f"row {i + 1}" for i, row in enumerate(rows)]
        first = 1
        if len(set(names)) < len(names):  # fit --search's top 5 named "4, 4, 8, 8": number them, keep the column
            names, first = [f"#{i + 1}" for i in range(len(rows))], 0
        headers, rows = ["" if first == 0 else headers[0], *names], [[headers[j], *(row[j] for row in rows)] for j in range(first, len(headers))]
        numeric = [False, *([True] * len(names))]
        return _table_layout(table, headers, rows, numeric, 0)
    return _table_layout(table, headers, rows, numeric, max(0, len(table.rows) - max_rows))


def _table_layout(table: Table, headers: list[str], rows: list[list[str]], numeric: list[bool], omitted: int) -> dict[str, Any]:
    split = table_parts(headers, rows, numeric)
    if len(split) > 1 and not _parts_tell_rows_apart(split, rows):
        # no narrow prefix of columns tells the rows apart (comm-volume's collectives: strategy, group, phase, what):
        # each part leads with the row's number instead
        headers, rows, numeric = ["#", *headers], [[str(i + 1), *row] for i, row in enumerate(rows)], [True, *numeric]
        split = table_parts(headers, rows, numeric)
    parts = [
        {"align": part["align"], "headers": [headers[j] for j in part["columns"]],
         "rows": [[row[j] for j in part["columns"]] for row in rows]}
        for part in split
    ]  # fmt: skip
    return {
        "title": table.title,
        "key": table.key,
        "headers": headers,
        "align": Latex("".join("r" if n else "l" for n in numeric)),
        "rows": rows,
        "omitted": omitted,
        "parts": parts,
    }


def _parts_tell_rows_apart(parts: Sequence[dict[str, Any]], rows: Sequence[Sequence[str]]) -> bool:
    """Whether the columns every part repeats (their common leading columns) tell the rows apart."""
    first = parts[0]["columns"]
    key = next((i for i in range(len(first)) if any(len(p["columns"]) <= i or p["columns"][i] != first[i] for p in parts)), len(first))
    return len({tuple(row[j] for j in first[:key]) for row in rows}) == len(rows)


def result_context(
    result: Result, *, max_table_rows: int = 60, skip_tables: Collection[str] = (), notes: SourceNotes | None = None
) -> dict[str, Any]:
    """Everything a template needs to typeset one result. Input and derivation sources are numbered
    in `notes` (by default the result's own, set after its inputs table)."""
    own = notes is None
    notes = SourceNotes() if notes is None else notes
    inputs = [term_row(t, notes) for t in result.inputs]
    return {
        "title": result.title,
        "command": result.command,
        "settings": list(result.settings),
        "inputs": inputs,
        "notes": notes.entries() if own else [],
        "derivations": [
            {
                "key": d.key,
                "label": heading_tex(d.label, result.derivations),
                "steps": derivation_steps(d),
                "wide": is_wide(derivation_steps(d)),
                "lines": inline_lines(derivation_steps(d)),
                "value_text": format_value(d.value, d.unit),
                "value": d.value,
                "unit": d.unit,
                "source": d.source,
                "note": notes.number(d.source) if not own else 0,
            }
            for d in result.derivations
        ],
        "tables": [table_context(t, max_table_rows) for t in result.tables if t.key not in skip_tables],
        "verdicts": list(result.verdicts),
        "assumptions": list(result.all_assumptions()),
    }


# ---------------------------------------------------------------------------------------------
# Templates


def sandboxed_environment(template_dirs: Sequence[Path] = (), **options: Any) -> Any:
    """A Jinja environment over the user's template directories, then the packaged templates.

    Templates are code: with a plain Environment, `\\VAR{ cycler.__init__.__globals__.os.system(...) }`
    in a `--template` directory ran a shell command. The immutable sandbox refuses attributes such
    as `__init__` / `__globals__` and any call that changes a value, which parcalc's own templates
    never need, so both are rendered in it.
    """
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from parcalc.render.template_sandbox import bounded_binop

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        """The immutable sandbox with `*` and `**` bounded (parcalc.render.template_sandbox)."""

        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            return bounded_binop(operator, left, right)

    search = [str(d) for d in template_dirs] + [str(data_dir("templates"))]
    environment = BoundedSandbox(
        loader=jinja2.FileSystemLoader(search),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        **options,
    )
    return environment


def template_environment(template_dirs: Sequence[Path] = ()) -> Any:
    """A Jinja environment with LaTeX delimiters and escaping of every printed value."""
    environment = sandboxed_environment(
        template_dirs,
        block_start_string=r"\BLOCK{",
        block_end_string="}",
        variable_start_string=r"\VAR{",
        variable_end_string="}",
        comment_start_string=r"\#{",
        comment_end_string="}",
        line_statement_prefix=None,
        autoescape=False,
        finalize=tex_escape,
    )
    environment.filters["tex"] = tex_escape
    environment.filters["prose"] = prose_tex  # worksheet text with $...$ inline math
    environment.filters["latex"] = Latex  # mark trusted LaTeX built in Python
    return environment


def render_template(name: str, context: dict[str, Any], template_dirs: Sequence[Path] = ()) -> str:
    return render_in(template_environment(template_dirs), name, context)


def render_in(environment: Any, name: str, context: dict[str, Any]) -> str:
    """Render template `name`; every template failure becomes one line naming the template.

    A template that breaks the sandbox or includes itself is bad input (exit 2); any other
    template error is a failed render (exit 1), as before.
    """
    from jinja2 import TemplateError
    from jinja2.sandbox import SecurityError

    from parcalc.errors import InputError, RenderError

    try:
        return environment_render(environment, name, context)
    except SecurityError as error:
        raise InputError(f"template {name}{_line(error)}: not allowed in a template: {str(error)[:200]}") from None
    except RecursionError:  # `include` of itself, directly or in a ring: Python's stack runs out
        raise InputError(f"template {name}: includes itself (directly or through other templates)") from None
    except TemplateError as error:
        raise RenderError(f"template {name}{_line(error)}: {shown(str(error.message or error), 200)}") from None


def _line(error: Exception) -> str:
    lineno = getattr(error, "lineno", None)
    return f" (line {lineno})" if lineno else ""


def environment_render(environment: Any, name: str, context: dict[str, Any]) -> str:
    from parcalc.render.template_sandbox import render_bounded

    return render_bounded(environment.get_template(name), context)


def render_latex_fragment(result: Result, template_dirs: Sequence[Path] = ()) -> str:
    """`--format latex`: a fragment to \\input into a document that loads amsmath and booktabs."""
    return render_template("fragment.tex.j2", {"result": result_context(result)}, template_dirs)


def render_latex_document(result: Result, template_dirs: Sequence[Path] = ()) -> str:
    """A complete document around one result (for `-o result.pdf`), with its pictures in TikZ
    (parcalc.render.figures; the tables they are drawn from are not repeated as tables)."""
    from parcalc.render.figures import FIGURE_TABLES, figures_of

    figures = figures_of(result)
    context = result_context(result, skip_tables=FIGURE_TABLES if figures else ())
    return render_template("single.tex.j2", {"result": context, "figures": figure_contexts(figures)}, template_dirs)


def figure_contexts(figures: Sequence[Any]) -> list[dict[str, Any]]:
    """Pictures (parcalc.render.figures.Figure) as TikZ for templates/partials/figures.tex.j2."""
    from parcalc.render.canvas import to_tikz

    return [{"key": f.key, "title": f.title, "tikz": Latex(to_tikz(f.canvas))} for f in figures]
