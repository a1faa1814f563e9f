"""CSV: a result's first table when it has one, otherwise one row per derivation. Raw base units."""

from __future__ import annotations

import csv
import io

from parcalc.derivation import Result
from parcalc.render.json_out import _number


def render_csv(result: Result) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if result.tables:
        table = result.tables[0]
        writer.writerow([c.key + (f" [{c.unit}]" if c.unit else "") for c in table.columns])
        for row in table.rows:
            writer.writerow([_number(v) for v in row])
    else:
        writer.writerow(["key", "label", "value", "unit", "formula", "substituted", "source"])
        for d in result.derivations:
            writer.writerow([d.key, d.label, _number(d.value), d.unit, d.formula_text(), d.substituted_text(), d.source])
    return buffer.getvalue()
