"""Validating a preset's YAML mapping: every error names the file and the dotted key; quantities
with units and a source; the row tables and blocks several kinds of preset share."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from parcalc.core.hardware import Sourced
from parcalc.errors import InputError, PresetError, shown
from parcalc.preset_files import Category, control_character
from parcalc.units import BASE_UNIT, Dimension, parse_quantity


class PresetDoc:
    """A YAML mapping being validated; every error names the file and the dotted key."""

    def __init__(self, path: Path, data: Mapping[str, Any], where: str = "") -> None:
        self.path, self.data, self.where = path, data, where

    def error(self, key: str, message: str) -> PresetError:
        dotted = f"{self.where}.{key}" if self.where else key
        return PresetError(f"{self.path}: key '{dotted}': {message}")

    def only(self, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        for key in self.data:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1)
                suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise self.error(str(key), f"unknown key{suggestion}; allowed: {', '.join(allowed)}")

    def child(self, key: str) -> PresetDoc:
        value = self.data[key]
        if not isinstance(value, dict):
            raise self.error(key, "expected a mapping")
        return PresetDoc(self.path, value, f"{self.where}.{key}" if self.where else key)

    def text(self, key: str, required: bool = True, default: str = "") -> str:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "expected non-empty text")
        return self.printable(key, value.strip())

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of text lines")
        return tuple(self.printable(key, v) for v in value)

    def printable(self, key: str, value: str) -> str:
        """`value` unless it holds a control character: preset text is printed to terminals, where an
        ANSI escape in a name or note would recolour, move or hide what parcalc shows."""
        found = control_character(value, allow_newlines=True)
        if found:
            raise self.error(key, f"control character {found} in the text; write plain text")
        return value

    def integer(self, key: str, required: bool = True, default: int = 0, minimum: int = 1) -> int:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected a whole number >= {minimum}, got {shown(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {shown(value)}")
        return value

    def choice(self, key: str, enum: type[Enum], default: Enum) -> Any:
        value = self.data.get(key, default.value)
        try:
            return enum(str(value).lower())
        except ValueError:
            allowed = ", ".join(str(e.value) for e in enum)
            raise self.error(key, f"{shown(value)} is not one of {allowed}") from None

    def sources(self) -> dict[str, str]:
        if "sources" not in self.data:
            raise self.error("sources", "missing: every number needs a source")
        sources = self.child("sources")
        return {self.printable("sources", str(k)): sources.text(str(k)) for k in sources.data}

    def source_ref(self, key: str, sources: Mapping[str, str]) -> str:
        ref = self.text(key)
        if ref not in sources:
            known = ", ".join(sources) or "none"
            raise self.error(key, f"source {shown(ref)} is not a key of 'sources' (known: {known})")
        return sources[ref]

    def quantity(
        self, key: str, dimension: Dimension, sources: Mapping[str, str], required: bool = True
    ) -> Sourced | None:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return None
        node = self.child(key)
        node.only(("value", "source", "note"))
        if "source" not in node.data:
            raise node.error("source", "missing: every number needs a source")
        raw = node.data.get("value")
        if raw is None:
            raise node.error("value", "missing")
        if dimension not in (Dimension.COUNT, Dimension.FRACTION) and not (isinstance(raw, str) and has_unit(raw)):
            raise node.error("value", f"{shown(raw)} has no unit; write it with one, e.g. {_unit_example(dimension)}")
        try:
            value = parse_quantity(raw, dimension, f"{self.path}: key '{node.where}.value'")
        except InputError as error:
            raise PresetError(str(error)) from None
        source = node.source_ref("source", sources)
        note = node.text("note", required=False)
        return Sourced(value, BASE_UNIT[dimension], f"{source} ({note})" if note else source)


def has_unit(text: str) -> bool:
    return any(ch.isalpha() for ch in text.lower().replace("e+", "").replace("e-", "").replace("e", ""))


def _unit_example(dimension: Dimension) -> str:
    return {
        Dimension.FREQUENCY: "'1410 MHz'",
        Dimension.BYTES: "'80 GB'",
        Dimension.BANDWIDTH: "'2039 GB/s'",
        Dimension.TIME: "'2 us'",
        Dimension.FLOP_RATE: "'312 TFLOP/s'",
        Dimension.POWER: "'700 W'",
    }.get(dimension, "'1 unit'")


def opened(path: Path, data: Mapping[str, Any], keys: Iterable[str], category: Category) -> tuple[PresetDoc, dict[str, str]]:
    """A preset's document with only `keys`, its `kind:` the category's, and its `sources:` read: every builder's start."""
    doc = PresetDoc(path, data)
    doc.only(keys)
    kind = doc.text("kind")
    if kind != category.singular:
        raise doc.error("kind", f"expected '{category.singular}' in a {category.value} preset, got {shown(kind)}")
    return doc, doc.sources()



def rows_of(doc: PresetDoc, keys: tuple[str, ...]) -> list[tuple[str, Mapping[str, Any]]]:
    """`rows:` a non-empty list of mappings with exactly `keys`; each with its dotted location."""
    rows = doc.data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise doc.error("rows", "expected a non-empty list of rows")
    located: list[tuple[str, Mapping[str, Any]]] = []
    for index, row in enumerate(rows):
        where = f"{doc.path}: key '{doc.where}.rows[{index}]'"
        if not isinstance(row, dict) or set(row) != set(keys):
            raise PresetError(f"{where}: expected a mapping with exactly the keys {', '.join(keys)}")
        located.append((where, row))
    return located


def whole_number(row: Mapping[str, Any], key: str, where: str) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PresetError(f"{where}.{key}: expected a whole number >= 1, got {shown(value)}")
    return value


def row_quantity(row: Mapping[str, Any], key: str, dimension: Dimension, where: str, allow_zero: bool = False) -> float:
    # "<path>: key 'power_curve[0]'" names the row; its field goes inside the quotes: key 'power_curve[0].power'
    label = f"{where[:-1]}.{key}'" if where.endswith("'") else f"{where}.{key}"
    try:
        return parse_quantity(row[key], dimension, label, allow_zero=allow_zero)
    except InputError as error:
        raise PresetError(str(error)) from None


def one_of(doc: PresetDoc, key: str, allowed: tuple[str, ...], default: str) -> str:
    value = doc.text(key, required=False, default=default).lower()
    if value not in allowed:
        raise doc.error(key, f"{shown(value)} is not one of {', '.join(allowed)}")
    return value


def share_of(doc: PresetDoc, key: str, sources: Mapping[str, str], required: bool = False) -> Sourced | None:
    """A share between 0 (exclusive) and 1, with its source."""
    share = doc.quantity(key, Dimension.FRACTION, sources, required)
    if share is not None and not 0 < share.value <= 1:
        raise doc.error(key, f"a share between 0 and 1, got {shown(share.value)}")
    return share


def host_costs_of(doc: Any, sources: Any) -> Any:
    """A framework's `host:` block: the host's time per kernel issued (parcalc.core.timing.host)."""
    from parcalc.core.timing.host import HostCosts

    block = doc.child("host")
    block.only(("forward", "backward", "optimizer", "optimizer_prelude", "source", "note"))
    times = {"optimizer_prelude": 0.0}  # optional: the optimizer's Python per parameter tensor before its first launch
    for name in ("forward", "backward", "optimizer", "optimizer_prelude"):
        if name not in block.data:
            if name == "optimizer_prelude":
                continue
            raise block.error(name, "missing")
        try:
            times[name] = parse_quantity(block.data[name], Dimension.TIME, f"{doc.path}: key 'host.{name}'")
        except InputError as error:
            raise PresetError(str(error)) from None
        if not 0 <= times[name] < 1e-2:
            raise block.error(name, f"a host time per kernel between 0 and 10 ms, got {shown(block.data[name])}")
    return HostCosts(times["forward"], times["backward"], times["optimizer"], block.source_ref("source", sources), times["optimizer_prelude"])


def compiled_host_costs_of(doc: Any, sources: Any) -> Any:
    """A framework's `compiled_host:` block: the host's time per kernel of compiled code (parcalc.core.timing.host
    CompiledHostCosts): per generated kernel, per extern GEMM, per attention op forward and backward, the wrapper's own
    lines per kernel."""
    from parcalc.core.timing.host import CompiledHostCosts

    names = ("generated", "gemm", "attention_forward", "attention_backward", "wrapper")
    block = doc.child("compiled_host")
    block.only((*names, "source", "note"))
    times = {}
    for name in names:
        if name not in block.data:
            raise block.error(name, "missing")
        try:
            times[name] = parse_quantity(block.data[name], Dimension.TIME, f"{doc.path}: key 'compiled_host.{name}'")
        except InputError as error:
            raise PresetError(str(error)) from None
        if not 0 <= times[name] < 1e-2:
            raise block.error(name, f"a host time per kernel between 0 and 10 ms, got {shown(block.data[name])}")
    return CompiledHostCosts(**times, source=block.source_ref("source", sources))
