"""JSON: raw numbers in base units, the resolved inputs, every derivation, tables as records.

The record is the Result's own plain form (parcalc.derivation.result_record, what Result.to_dict() gives); this module
writes it as text, each table row on one line. The shape is a public, versioned interface for scripts (a JSON Schema per
command in parcalc/schemas, printed by `parcalc schema COMMAND`):
{"schema_version", "parcalc": version, "command", "title", "fits", "settings": {key: value},
 "inputs": {name: term}, "results": {key: derivation}, "tables": {key: {"title", "columns", "rows"}},
 "verdicts": [...], "assumptions": [...]}

SCHEMA_VERSION (parcalc.derivation) changes whenever a key changes its meaning, its type or goes away (a new key does
not change it). Top-level inputs are keyed by descriptive names (parcalc.json_keys: seq_len,
bytes_per_element, hidden, head_dim), one meaning each; the symbol stays in each record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from parcalc.derivation import result_record

if TYPE_CHECKING:
    from parcalc.derivation import Result


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
