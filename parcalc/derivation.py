"""Results that carry their own derivation: formula, substituted values, value, unit, source.

A `Derivation` holds its formula as a template whose placeholders (`$f`, `$n_sm`) name its
input `Term`s. The same template gives the formula in symbols, the formula with the values
substituted, and (from `formula_latex`) both again in LaTeX, so that the terminal, the JSON and
the PDF show the same derivation without anyone writing it twice.

A `Result` is what a command shows: its resolved inputs, its derivations, its tables, short
verdicts and the assumptions made. Renderers format a `Result`; they never compute.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import cast

from parcalc import __version__
from parcalc.frozen import frozen
from parcalc.units import format_quantity


@frozen
class Term:
    """One named input of a formula.

    key: the placeholder name in formula templates ("f" for `$f`) and the JSON key.
    symbol / latex: how the symbol prints in text and in LaTeX.
    value, unit: in base units (see parcalc.units).
    """

    key: str
    symbol: str
    latex: str
    value: float
    unit: str
    description: str
    source: str = ""


@frozen
class Derivation:
    """A headline number and how it was obtained.

    formula / formula_latex: templates over the input keys, e.g. "2 × $f × $n_sm × $fma".
    value, unit: the result in base units.
    source: the paper, equation or datasheet the formula comes from.
    """

    key: str
    label: str
    symbol: str
    latex_symbol: str
    formula: str
    formula_latex: str
    inputs: tuple[Term, ...]
    value: float
    unit: str
    source: str
    assumptions: tuple[str, ...] = ()

    def term(self, key: str) -> Term:
        for term in self.inputs:
            if term.key == key:
                return term
        raise KeyError(key)

    def as_term(self, key: str | None = None, description: str | None = None) -> Term:
        """This result as the input of another formula (chains of derivations)."""
        return Term(
            key=key or self.key,
            symbol=self.symbol,
            latex=self.latex_symbol,
            value=self.value,
            unit=self.unit,
            description=description or self.label,
            source=self.source,
        )

    def formula_text(self) -> str:
        return fill(self.formula, {t.key: t.symbol for t in self.inputs})

    def substituted_text(self, show: Callable[[Term], str] | None = None) -> str:
        show = show or (lambda t: format_quantity(t.value, t.unit))
        return _signed(fill(self.formula, {t.key: show(t) for t in self.inputs}))

    def formula_tex(self) -> str:
        return fill(self.formula_latex, {t.key: t.latex for t in self.inputs})

    def substituted_tex(self, show: Callable[[Term], str]) -> str:
        # "$n $beta" reads as a product in symbols but "4 31.5 GB/s" once filled, "2 ($p - 1)" as
        # "2 (4 - 1)": a value, a number or a closing bracket written beside a placeholder, a number or an
        # opening bracket gets an explicit \times, and the formula's own \cdot between what are now two
        # numbers becomes \times too (the terminal's formulas carry their ×; issue #14)
        juxtaposed = re.sub(_JUXTAPOSED, r"\1 \\times ", self.formula_latex).replace(r"\cdot", r"\times")
        return _signed(fill(juxtaposed, {t.key: show(t) for t in self.inputs}))


# a placeholder, a number that is not part of a LaTeX command or a closing bracket, then spaces, then a
# placeholder, an opening bracket or such a number (compiled by re on first use, by LaTeX output only)
_JUXTAPOSED = (
    r"(\$\{?[A-Za-z_]\w*\}?|(?<![\\A-Za-z_^\d.])\d+(?:\.\d+)?|(?<!\\right)\)|\})\s+"
    r"(?=\$\{?[A-Za-z_]|\(|\d|\\frac\b)"
)


def _signed(text: str) -> str:
    """A negative value filled after a plus reads as a minus: "a + -b" -> "a - b"."""
    return text.replace("+ -", "- ")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace `$key` / `${key}` placeholders; a missing key is a programming error."""
    import string  # here: only a formula written out needs it, and its import compiles Template's pattern (~0.4 ms)

    return string.Template(template).substitute(values)


@frozen
class Column:
    """One column of a Table: its key in JSON and CSV, its heading, the unit of its values.
    `memory`: bytes of GPU (or host) memory, which the human formats show in binary units (GiB, as
    GPU capacities and the fits verdict are); bytes moved stay decimal (GB, beside GB/s)."""

    key: str
    label: str
    unit: str = ""
    memory: bool = False
    about: str = ""  # what an abbreviated label stands for: the terminal tells it under the table (not in JSON / CSV)


@frozen
class Table:
    """Rows of plain values (numbers in base units, strings, booleans) under typed columns."""

    key: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[object, ...], ...]
    # the columns the terminal's brief form shows (keys; empty: all): a table of 26 columns wraps
    # into soup at 80 columns, and the full table stays in --detail full, JSON and CSV (issue 28)
    brief_columns: tuple[str, ...] = ()

    def brief(self) -> Table:
        """This table as the brief form shows it: only its brief columns."""
        if not self.brief_columns:
            return self
        keep = [i for i, c in enumerate(self.columns) if c.key in self.brief_columns]
        return Table(self.key, self.title, tuple(self.columns[i] for i in keep),
                     tuple(tuple(row[i] for i in keep) for row in self.rows))  # fmt: skip

    def records(self) -> list[dict[str, object]]:
        return [dict(zip((c.key for c in self.columns), row, strict=True)) for row in self.rows]


@frozen
class Result:
    """Everything one command shows, in the order it is shown."""

    command: str
    title: str
    inputs: tuple[Term, ...]
    derivations: tuple[Derivation, ...]
    tables: tuple[Table, ...] = ()
    verdicts: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = field(default=())
    settings: tuple[tuple[str, str], ...] = ()  # non-numeric inputs as resolved: ("gpu", "a100-sxm4-80gb")
    answer: str = ""  # key of the derivation that answers the command, shown first on a terminal
    fits: bool | None = None  # memory and fit: whether it fits in the GPU's memory (None: no capacity given, or not a question of fitting)
    main_table: str = ""  # the table --format csv prints without --table (default: the first)
    lead: int = 0  # how many of the verdicts answer the command: shown first in text (before the inputs), not last
    # What the terminal's brief form (the default; --detail full shows everything) keeps, chosen by
    # the command's results module (issue 28: fit's answer came after 25 lines of sourced inputs):
    key_terms: tuple[str, ...] = ()  # derivation keys shown as one line each (empty: every derivation)
    brief_tables: tuple[str, ...] = ()  # table keys shown (empty: every table), each with its brief_columns
    key_assumptions: tuple[str, ...] = ()  # the assumptions that move the answer, by how their text starts (empty: all)

    def derivation(self, key: str) -> Derivation:
        for derivation in self.derivations:
            if derivation.key == key:
                return derivation
        raise KeyError(key)

    def brief_derivations(self) -> tuple[Derivation, ...]:
        """The derivations the brief form shows, one line each, in the order of key_terms."""
        if not self.key_terms:
            return self.derivations
        return tuple(d for key in self.key_terms for d in self.derivations if d.key == key)

    def brief_table_list(self) -> tuple[Table, ...]:
        """The tables the brief form shows, each cut to its brief columns."""
        chosen = [t for t in self.tables if not self.brief_tables or t.key in self.brief_tables]
        return tuple(t.brief() for t in chosen)

    def moving_assumptions(self) -> tuple[str, ...]:
        """The assumptions the brief form shows: those starting with one of key_assumptions (all when empty)."""
        every = self.all_assumptions()
        if not self.key_assumptions:
            return every
        return tuple(a for a in every if a.startswith(self.key_assumptions))

    def all_assumptions(self) -> tuple[str, ...]:
        """The result's assumptions and its derivations', each once, in order of appearance."""
        seen: dict[str, None] = dict.fromkeys(self.assumptions)
        for derivation in self.derivations:
            seen.update(dict.fromkeys(derivation.assumptions))
        return tuple(seen)

    def to_dict(self) -> dict[str, object]:
        """This result as `--format json` prints it, as Python values (result_dict, below: no renderer is loaded): the
        same keys, numbers in base units, null for a non-finite number."""
        return result_dict(self)

    # Jupyter's hooks show a Result through the renderers, one layer up, which hand their functions in (PRESENTERS) when
    # they are loaded: the data imports no renderer (docs/architecture.md).
    def _repr_markdown_(self) -> str | None:
        """Jupyter and IPython show a result as its Markdown page (parcalc.render.markdown); None (IPython then shows
        the next format it has, the plain repr) where no renderer is loaded."""
        return _present(self, "markdown")

    def _repr_html_(self) -> str | None:
        """The same page as HTML (parcalc.render.html), which Jupyter prefers to Markdown."""
        return _present(self, "html")


# How a Result shows itself in Jupyter ("markdown" and "html": its hooks), filled by parcalc.render.display when it is
# loaded, which parcalc.api (the library's face) does.
# Python finds _repr_html_ on the object, so the hooks stay methods; their work is the renderers'.
PRESENTERS: dict[str, Callable[[Result], object]] = {}


def _present(result: Result, how: str) -> str | None:
    """The page `how` of `result`; None where no renderer is loaded (a parcalc.results module imported on its own, without
    parcalc.api): IPython's display protocol then skips the format, so a notebook shows the plain repr, not an error."""
    presenter = PRESENTERS.get(how)
    return None if presenter is None else str(presenter(result))


def assumptions_of(result: Result) -> tuple[str, ...]:
    """The result's assumptions and its derivations', each once, in order of appearance."""
    return result.all_assumptions()


def first_non_finite(result: Result) -> str | None:
    """Where `result` holds an infinite or NaN number (an input, a derivation or one of its inputs,
    a table cell), named for an error message; None when every number is finite.

    Inputs near the ends of the float range (1e308 Hz, 1e-320 s) give such results; they are
    refused rather than shown as "inf EFLOP/s" or "MFU = inf %"."""

    def bad(value: object) -> bool:
        return isinstance(value, float) and not math.isfinite(value)

    for term in result.inputs:
        if bad(term.value):
            return f"the input {term.symbol} ({term.description})"
    for derivation in result.derivations:
        if bad(derivation.value):
            return f"{derivation.symbol} ({derivation.label})"
        for term in derivation.inputs:
            if bad(term.value):
                return f"{term.symbol} ({term.description}) in {derivation.label}"
    for table in result.tables:
        # x - x is NaN for inf and NaN, 0 for any other float: one cheap pass over many rows
        if not any(x.__class__ is float and x - x != 0.0 for row in table.rows for x in row):
            continue
        for row in table.rows:
            for column, cell in zip(table.columns, row, strict=False):
                if bad(cell):
                    return f"the column {column.label!r} of the table {table.title!r}"
    return None


# ---------------------------------------------------------------------------------------------
# A Result as plain data: `--format json`'s document as Python values (dicts, lists, numbers in base units, text), what
# Result.to_dict() returns and parcalc.render.json_out writes as text; here, beside the Result, so that a result turns
# into data with no renderer loaded (docs/architecture.md). Top-level inputs are keyed by descriptive names
# (parcalc.json_keys: seq_len, bytes_per_element, hidden, head_dim), one meaning each; the symbol stays in each record.
# SCHEMA_VERSION changes whenever a key changes its meaning, its type or goes away (a new key does not change it).

# 1: descriptive input names, typed settings, fits, schema_version (before it: no version, "0").
SCHEMA_VERSION = 1


def term_record(term: Term) -> dict[str, object]:
    return {
        "value": plain_number(term.value),
        "unit": term.unit,
        "symbol": term.symbol,
        "description": term.description,
        "source": term.source,
    }


def derivation_record(derivation: Derivation) -> dict[str, object]:
    return {
        "label": derivation.label,
        "value": plain_number(derivation.value),
        "unit": derivation.unit,
        "symbol": derivation.symbol,
        "formula": derivation.formula_text(),
        "formula_latex": derivation.formula_tex(),
        "substituted": derivation.substituted_text(),
        "inputs": {t.key: term_record(t) for t in derivation.inputs},
        "source": derivation.source,
        "assumptions": list(derivation.assumptions),
    }


def result_record(result: Result) -> dict[str, object]:
    """`--format json`'s document (module docstring of parcalc.render.json_out: its shape, a public versioned interface)."""
    from parcalc.json_keys import input_name, setting_value

    return {
        "schema_version": SCHEMA_VERSION,
        "parcalc": __version__,
        "command": result.command,
        "title": result.title,
        "fits": result.fits,
        "settings": {key: setting_value(key, value) for key, value in result.settings},
        "inputs": {input_name(result.command, t.key): term_record(t) for t in result.inputs},
        "results": {d.key: derivation_record(d) for d in result.derivations},
        "tables": {
            t.key: {
                "title": t.title,
                "columns": [{"key": c.key, "label": c.label, "unit": c.unit} for c in t.columns],
                "rows": _rows(t),
            }
            for t in result.tables
        },
        "verdicts": list(result.verdicts),
        "assumptions": list(result.all_assumptions()),
    }


def result_dict(result: Result) -> dict[str, object]:
    """result_record as the JSON text reads back: lists for tuples, and an error (ValueError) for a non-finite number that
    plain_number did not turn into null, as `--format json` gives (json.dumps with allow_nan=False)."""
    import json  # not at the top: a one-line command loads no json (tests/test_command_imports.py)

    return cast("dict[str, object]", json.loads(json.dumps(result_record(result), ensure_ascii=False, allow_nan=False)))


def _rows(table: Table) -> list[dict[str, object]]:
    """Table.records() with plain_number on every value, built column-wise: a search's table has ~10^5 rows."""
    keys = [c.key for c in table.columns]
    return [dict(zip(keys, map(plain_number, row), strict=True)) for row in table.rows]


def plain_number(value: object) -> object:
    """Whole floats become ints so byte counts read exactly; non-finite values become null."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value
