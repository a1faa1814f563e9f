"""CSV: one table of a result (--table NAME picks it), or one row per derivation. Raw base units.

The header row holds the JSON keys of the columns (`tables.NAME.columns[].key`); each column's
unit is that column's `unit` in the JSON, and `parcalc schema COMMAND` describes them. Booleans
are `true` / `false` and a missing value an empty cell, as JSON has them. With several tables and
no --table, one line on stderr says which was printed and which others there are.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

from parcalc.derivation import plain_number
from parcalc.render.csv_table import chosen_table

if TYPE_CHECKING:
    from parcalc.derivation import Result

DERIVATIONS = "results"  # the name of the one-row-per-derivation table, as the JSON's "results"


def table_names(result: Result) -> list[str]:
    return [t.key for t in result.tables] + [DERIVATIONS]


def render_csv(result: Result) -> str:
    name = chosen_table.get()
    names = table_names(result)
    if name is not None and name not in names:
        from parcalc.errors import InputError

        raise InputError(f"--table: {result.command} has no table {name!r} here; its tables: {', '.join(names)}")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if name is None and result.tables:
        table = next((t for t in result.tables if t.key == result.main_table), result.tables[0])
        if len(names) > 2:  # more than one table besides the derivations
            from parcalc.streams import say

            others = ", ".join(n for n in names if n != table.key)
            say(f"csv: printed table '{table.key}'; the others: {others} (--table NAME picks one)")
        name = table.key
    if name is not None and name != DERIVATIONS:
        table = next(t for t in result.tables if t.key == name)
        writer.writerow([c.key for c in table.columns])
        for row in table.rows:
            writer.writerow([_cell(v) for v in row])
    else:
        writer.writerow(["key", "label", "value", "unit", "formula", "substituted", "source"])
        for d in result.derivations:
            writer.writerow([d.key, d.label, _cell(d.value), d.unit, d.formula_text(), d.substituted_text(), d.source])
    return buffer.getvalue()


def _cell(value: object) -> object:
    """JSON's spelling of a value: true / false, an empty cell for none, whole floats as integers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    number = plain_number(value)
    return "" if number is None else number
