"""A small JSON Schema validator for the subset parcalc/schemas use (draft 2020-12 keywords: type,
const, enum, properties, required, additionalProperties, items, propertyNames with pattern).

jsonschema is not a dependency of parcalc; tests/test_json_schema.py uses it as well when it is
installed. Each problem is one line naming where in the document it is."""

from __future__ import annotations

import re
from typing import Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
KNOWN = {"$schema", "$id", "title", "description", "type", "const", "enum", "properties", "required", "additionalProperties",
         "items", "propertyNames", "pattern"}  # fmt: skip


def problems(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError(f"{where}: keywords this checker does not know: {sorted(unknown)}")
    out: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return [f"{where}: {value!r:.60} is not {' or '.join(types)}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        out.append(f"{where}: {value!r:.60} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r:.60} is not one of {schema['enum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        out.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        out += [f"{where}: '{key}' is required" for key in schema.get("required", ()) if key not in value]
        for key, item in value.items():
            if "propertyNames" in schema:
                out += problems(key, schema["propertyNames"], f"{where} (name {key!r})")
            if key in props:
                out += problems(item, props[key], f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{where}: '{key}' is not allowed")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += problems(item, schema["additionalProperties"], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            out += problems(item, schema["items"], f"{where}[{i}]")
    return out
