"""JSON: raw numbers in base units, the resolved inputs, every derivation, tables as records.

The shape is a public, versioned interface for scripts (docs/json.md; a JSON Schema per command
in parcalc/schemas, printed by `parcalc schema COMMAND`):
{"schema_version", "parcalc": version, "command", "title", "fits", "settings": {key: value},
 "inputs": {name: term}, "results": {key: derivation}, "tables": {key: {"title", "columns", "rows"}},
 "verdicts": [...], "assumptions": [...]}

SCHEMA_VERSION changes whenever a key changes its meaning, its type or goes away (a new key does
not change it). Top-level inputs are keyed by descriptive names (parcalc.render.json_keys: seq_len,
bytes_per_element, hidden, head_dim), one meaning each; the symbol stays in each record.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, cast

from parcalc import __version__

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result, Table, Term


def term_record(term: Term) -> dict[str, object]:
    return {
        "value": _number(term.value),
        "unit": term.unit,
        "symbol": term.symbol,
        "description": term.description,
        "source": term.source,
    }


def derivation_record(derivation: Derivation) -> dict[str, object]:
    return {
        "label": derivation.label,
        "value": _number(derivation.value),
        "unit": derivation.unit,
        "symbol": derivation.symbol,
        "formula": derivation.formula_text(),
        "formula_latex": derivation.formula_tex(),
        "substituted": derivation.substituted_text(),
        "inputs": {t.key: term_record(t) for t in derivation.inputs},
        "source": derivation.source,
        "assumptions": list(derivation.assumptions),
    }


# 1: descriptive input names, typed settings, fits, schema_version (before it: no version, "0").
SCHEMA_VERSION = 1


def result_record(result: Result) -> dict[str, object]:
    from parcalc.render.json_keys import input_name, setting_value

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


def render_json(result: Result) -> str:
    """The record indented, each table row on one line: json's indenting encoder is pure Python
    (the C encoder takes no indent), and a search's every configuration (~10^5 rows) took seconds
    and ~70 MB indented key by key; compact rows are encoded by the C encoder, a few times faster."""
    record = result_record(result)
    rows: dict[str, list] = {}
    for key, table in cast("dict[str, dict[str, Any]]", record["tables"]).items():  # result_record's tables
        rows[key] = table["rows"]
        table["rows"] = f"\x00rows:{key}\x00"  # a placeholder no text of a result holds (NUL)
    text = json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False)
    for key, table_rows in rows.items():
        encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(", ", ": ")).encode
        body = "[\n" + ",\n".join("        " + encode(row) for row in table_rows) + "\n      ]" if table_rows else "[]"
        text = text.replace(json.dumps(f"\x00rows:{key}\x00", ensure_ascii=False), body, 1)
    return text + "\n"


def _rows(table: Table) -> list[dict[str, object]]:
    """Table.records() with _number on every value, built column-wise: a search's table has ~10^5 rows."""
    keys = [c.key for c in table.columns]
    return [dict(zip(keys, map(_number, row), strict=True)) for row in table.rows]


def _number(value: object) -> object:
    """Whole floats become ints so byte counts read exactly; non-finite values become null."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value
