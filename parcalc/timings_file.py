"""Reading a file of measured timings (CSV or YAML) into parcalc.core.analyze's `Measurement`s.

CSV: a header row, then one row per measured configuration; lines starting with '#' are comments
(a fixture can cite its source). YAML: a list of mappings with the same keys, or a mapping with
`rows:` (that list) and optionally `time_is:`. Columns:

    gpus            GPUs of the run (required)
    batch_per_gpu   batch per GPU (weak scaling per step)   } exactly one of the two
    global_batch    global batch (strong scaling)           }
    time            measured time of a step or an epoch (required); plain numbers are seconds
    time_is         step or epoch (or `parcalc analyze --time-is`); the same on every row
    compute, comm   optional compute and communication times over the same period
    message_bytes   optional bytes of one all-reduce (the gradient buffer); plain numbers are bytes
    allreduces      optional number of all-reduces inside the measured comm time (default 1)

Every error names the file, the row (and the CSV line) and the column.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parcalc.core.analyze import BatchKind, Measurement, TimeKind
from parcalc.errors import InputError, ParcalcError, shown

# A lab's table is a few hundred bytes; a million is room for a thousand rows with comments.
MAX_TIMINGS_BYTES = 1_000_000
MAX_CELL_CHARS = 100
COLUMNS = ("gpus", "batch_per_gpu", "global_batch", "time", "time_is", "compute", "comm", "message_bytes", "allreduces")


@dataclass(frozen=True)
class TimingsFile:
    rows: tuple[Measurement, ...]
    batch_kind: BatchKind
    time_kind: TimeKind | None  # None: the file does not say
    has_message: bool


@dataclass(frozen=True)
class _Row:
    number: int  # 1-based data row
    where: str  # "row 3 (line 5)"
    cells: Mapping[str, Any]


def read_timings(path: Path, label: str = "") -> TimingsFile:
    """The measurements of a CSV (.csv, or any other name) or YAML (.yaml / .yml) file."""
    from parcalc.files import NotRegularFileError, TooLargeError, check_name_length, read_regular

    name = label or str(path)
    check_name_length(path, "FILE")
    try:
        data = read_regular(path, MAX_TIMINGS_BYTES)
    except FileNotFoundError:
        raise InputError(f"FILE: no such file {shown(str(path))}") from None
    except TooLargeError:
        raise InputError(f"{name}: larger than {MAX_TIMINGS_BYTES:,} bytes; a timings file holds one row per measured "
                         "configuration") from None  # fmt: skip
    except NotRegularFileError as error:  # the path as given, as for a missing file ('tmp: ...' named a directory by its base name)
        raise InputError(f"FILE: cannot read {shown(str(path))}: {error}") from None
    except OSError as error:
        raise InputError(f"FILE: cannot read {shown(str(path))}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{name}: not UTF-8 text") from None
    if "\x00" in text:
        raise InputError(f"{name}: contains NUL bytes; not a text file")
    if not text.strip():
        raise InputError(f"{name}: empty; give a header row (gpus, batch_per_gpu or global_batch, time) and one row per measurement")
    yaml = path.suffix.lower() in (".yaml", ".yml")
    rows, file_kind = _yaml_rows(path, name, text) if yaml else (_csv_rows(name, text), None)
    return _measurements(name, rows, file_kind)


def _csv_rows(name: str, text: str) -> list[_Row]:
    import csv

    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise InputError(f"{name}: no header row; give gpus, batch_per_gpu or global_batch, and time")
    try:
        parsed = list(csv.reader([line for _, line in lines], skipinitialspace=True))
    except csv.Error as error:
        raise InputError(f"{name}: not CSV: {error}") from None
    if len(parsed) != len(lines):
        raise InputError(f"{name}: a quoted cell runs over a line break; give each row on one line")
    header = [cell.strip().lower() for cell in parsed[0]]
    _check_columns(name, f"header (line {lines[0][0]})", header)
    rows = []
    for index, ((line, _), cells) in enumerate(zip(lines[1:], parsed[1:], strict=True), start=1):
        where = f"row {index} (line {line})"
        if len(cells) > len(header):
            raise InputError(f"{name}: {where}: {len(cells)} cells under a header of {len(header)} columns")
        rows.append(_Row(index, where, {column: cell.strip() for column, cell in zip(header, cells, strict=False) if cell.strip()}))
    return rows


def _yaml_rows(path: Path, name: str, text: str) -> tuple[list[_Row], TimeKind | None]:
    from parcalc.strict_yaml import load_yaml_text

    try:
        document = load_yaml_text(path, text, name)
    except ParcalcError as error:
        raise InputError(str(error)) from None
    kind = None
    if isinstance(document, dict):
        unknown = [k for k in document if k not in ("rows", "time_is")]
        if unknown:
            raise InputError(f"{name}: unknown key {shown(str(unknown[0]))}; a timings mapping has 'rows' and 'time_is'")
        if "time_is" in document:
            kind = _time_kind(name, "top level, key 'time_is'", document["time_is"])
        document = document.get("rows")
    if not isinstance(document, list):
        raise InputError(f"{name}: expected a list of rows (mappings with gpus, batch_per_gpu or global_batch, time)")
    rows = []
    for index, item in enumerate(document, start=1):
        where = f"row {index}"
        if not isinstance(item, dict):
            raise InputError(f"{name}: {where}: expected a mapping of column to value, got {shown(item)}")
        keys = [str(k).strip().lower() for k in item]
        _check_columns(name, where, keys, header=False)
        cells = {str(k).strip().lower(): v for k, v in item.items() if v is not None and str(v).strip() != ""}
        rows.append(_Row(index, where, cells))
    return rows, kind


def _check_columns(name: str, where: str, columns: list[str], header: bool = True) -> None:
    seen = set()
    for column in columns:
        if column not in COLUMNS:
            if not column:
                raise InputError(f"{name}: {where}: an empty column name")
            hint = difflib.get_close_matches(column, COLUMNS, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise InputError(f"{name}: {where}: unknown column {shown(column)}{suggestion}; columns: {', '.join(COLUMNS)}")
        if column in seen:
            raise InputError(f"{name}: {where}: column '{column}' twice")
        seen.add(column)
    if not header:
        return
    for required in ("gpus", "time"):
        if required not in seen:
            raise InputError(f"{name}: {where}: no '{required}' column; columns needed: gpus, batch_per_gpu or global_batch, time")
    if ("batch_per_gpu" in seen) == ("global_batch" in seen):
        raise InputError(f"{name}: {where}: give exactly one of the columns 'batch_per_gpu' (weak scaling) and 'global_batch' (strong scaling)")


def _time_kind(name: str, where: str, value: Any) -> TimeKind:
    text = str(value).strip().lower()
    try:
        return TimeKind(text)
    except ValueError:
        raise InputError(f"{name}: {where}: {shown(value)} is not step or epoch") from None


def _measurements(name: str, rows: list[_Row], file_kind: TimeKind | None) -> TimingsFile:
    from parcalc.units import Dimension, parse_count, parse_quantity

    if not rows:
        raise InputError(f"{name}: no data rows; give one row per measured configuration (gpus, batch, time)")
    batch_column = next((c for c in ("batch_per_gpu", "global_batch") if any(c in r.cells for r in rows)), None)
    if batch_column is None:
        raise InputError(f"{name}: {rows[0].where}, column 'batch_per_gpu': missing; give batch_per_gpu or global_batch on every row")
    other = "global_batch" if batch_column == "batch_per_gpu" else "batch_per_gpu"
    kinds: dict[TimeKind, str] = {file_kind: "the top level"} if file_kind is not None else {}
    out = []
    for row in rows:
        at = f"{name}: {row.where}, column"
        if other in row.cells:
            raise InputError(f"{at} '{other}': the file uses '{batch_column}'; give one kind of batch on every row")
        for required in ("gpus", batch_column, "time"):
            if required not in row.cells:
                raise InputError(f"{at} '{required}': missing")
        for column, value in row.cells.items():
            if isinstance(value, (list, dict, bool)) or len(str(value)) > MAX_CELL_CHARS:
                raise InputError(f"{at} '{column}': {shown(value)} is not a value")
        if "time_is" in row.cells:
            kinds.setdefault(_time_kind(name, f"{row.where}, column 'time_is'", row.cells["time_is"]), row.where)
            if len(kinds) > 1:
                raise InputError(f"{at} 'time_is': step and epoch times mixed ({' and '.join(f'{k.value} at {w}' for k, w in kinds.items())}); "
                                 "analyse them in separate files")  # fmt: skip

        def time(column: str) -> float | None:
            value = row.cells.get(column)  # noqa: B023 - called in this iteration only
            return None if value is None else parse_quantity(value, Dimension.TIME, f"{at} '{column}'")  # noqa: B023

        def count(column: str) -> int | None:
            value = row.cells.get(column)  # noqa: B023 - called in this iteration only
            return None if value is None else parse_count(value, f"{at} '{column}'")  # noqa: B023

        message = row.cells.get("message_bytes")
        out.append(Measurement(
            row=row.number,
            gpus=count("gpus") or 0,
            batch=count(batch_column) or 0,
            time=time("time") or 0.0,
            compute=time("compute"),
            comm=time("comm"),
            message=None if message is None else parse_quantity(message, Dimension.BYTES, f"{at} 'message_bytes'"),
            allreduces=count("allreduces") or 1,
        ))  # fmt: skip
    kind = next(iter(kinds)) if kinds else None
    batch_kind = BatchKind.PER_GPU if batch_column == "batch_per_gpu" else BatchKind.GLOBAL
    return TimingsFile(tuple(out), batch_kind, kind, any(m.message is not None for m in out))
