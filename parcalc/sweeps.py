"""Sweeps: one command run over a grid of flag values, one row per point.

`parcalc sweep run.yaml --vary tp=1,2,4,8 --vary pp=1,2,4` and `parcalc.sweep(...)` run the run
file's command (parcalc.runfile) at every point of the grid, in-process, as a worksheet runs its
calculations. A point the command refuses (an invalid combination: `--tp 8` on a model of 12
heads, say) is a row with the reason the CLI would print after `Error:`, not a failed sweep.

A row holds the point's values, its status (ok, infeasible: the command's exit 1, error: bad
input, exit 2), the reason, and every result's value in base units (the JSON output's
`results.KEY.value`); the units are the same for every row and are listed once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.errors import InfeasibleError, InputError, ParcalcError, shown

if TYPE_CHECKING:
    from parcalc.derivation import Result

# Each point runs a whole command (a pinned fit: ~50 ms): this bounds a sweep to minutes.
MAX_POINTS = 10_000
OK, INFEASIBLE, ERROR = "ok", "infeasible", "error"


@dataclass(frozen=True)
class SweepRow:
    """One point of the grid: its flag values, how the command ended, what a row of the output holds
    (the first verdict, each result's value and unit) and, when the sweep keeps them, its Result.

    The CLI keeps no Results: a bubble Result holds its whole timeline, and 10,000 of them took 5 GB
    (issue 28); a row's few numbers are all it writes."""

    point: Mapping[str, Any]
    status: str
    error: str = ""
    result: Result | None = field(default=None, repr=False)
    first_verdict: str = ""
    results: tuple[tuple[str, float, str], ...] = ()  # (key, value in base units, unit) of each derivation
    fits: bool | None = None  # the Result's: whether it fits in the GPU's memory (None: no capacity, or no result)

    def verdict(self) -> str:
        """The result's first verdict line (fit: the configuration, its step time and whether it fits)."""
        return self.first_verdict

    def values(self) -> dict[str, Any]:
        """Each derivation's value in base units, keyed as in the JSON output's `results`."""
        return {key: value for key, value, _ in self.results}


@dataclass(frozen=True)
class Sweep:
    """The rows of a sweep, in grid order (the last --vary changes fastest)."""

    command: str
    inputs: Mapping[str, Any]
    vary: Mapping[str, tuple[Any, ...]]
    rows: tuple[SweepRow, ...]

    @property
    def succeeded(self) -> int:
        return sum(row.status == OK for row in self.rows)

    def units(self) -> dict[str, str]:
        """The unit of each result key, in order of first appearance."""
        units: dict[str, str] = {}
        for row in self.rows:
            for key, _, unit in row.results:
                units.setdefault(key, unit)
        return units

    def records(self) -> list[dict[str, Any]]:
        """One flat mapping per row: the point, status, error, then every result key (None where a
        row has no such result)."""
        keys = list(self.units())
        out = []
        for row in self.rows:
            values = row.values()
            out.append({**row.point, "status": row.status, "error": row.error or None, "fits": row.fits, "verdict": row.verdict() or None,
                        **{k: values.get(k) for k in keys}})  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        """The sweep as `parcalc sweep --format json` prints it."""
        from parcalc import __version__
        from parcalc.derivation import SCHEMA_VERSION, plain_number

        keys = list(self.units())
        return {
            "schema_version": SCHEMA_VERSION,  # parcalc/schemas/sweep.json
            "parcalc": __version__,
            "command": self.command,
            "inputs": {k: _plain(v) for k, v in self.inputs.items()},
            "vary": {k: [shown_value(x) for x in v] for k, v in self.vary.items()},
            "units": self.units(),
            "rows": [
                {"point": dict(row.point), "status": row.status, "error": row.error or None, "fits": row.fits, "verdict": row.verdict() or None,
                 "results": {k: plain_number(v) for k, v in row.values().items() if k in keys}}
                for row in self.rows
            ],
        }  # fmt: skip

    def to_csv(self) -> str:
        """One header row (the --vary keys, status, error, verdict, the result keys: JSON's keys, values in
        the base units that `units` of the JSON names), then a row per point."""
        import csv
        import io

        from parcalc.derivation import plain_number

        records = self.records()
        header = [*self.vary, "status", "error", "fits", "verdict", *self.units()]
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        for record in records:
            writer.writerow(["" if record[k] is None else _cell(plain_number(record[k])) for k in header])
        return buffer.getvalue()


def _cell(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def _plain(value: Any) -> Any:
    """A run file's value as JSON can hold it: a TOML date or an infinite float as its text."""
    import math

    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def parse_vary(texts: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """`--vary tp=1,2,4,8` flags as {key: values}; a key given twice, no `=`, or an empty value is an error."""
    vary: dict[str, tuple[str, ...]] = {}
    for text in texts:
        key, sep, values = text.partition("=")
        key = key.strip().removeprefix("--")
        if not sep or not key:
            raise InputError(f"--vary: {shown(text)}: write KEY=V1,V2,... (e.g. tp=1,2,4,8)")
        items = tuple(v.strip() for v in values.split(","))
        if not values.strip() or any(not v for v in items):
            raise InputError(f"--vary {key}: an empty value in {shown(values)}; write the values separated by commas")
        if key in vary:
            raise InputError(f"--vary {key}: given twice; put all its values in one --vary {key}=V1,V2,...")
        vary[key] = items
    return vary


def run_sweep(command: str, inputs: Mapping[str, Any], vary: Mapping[str, Sequence[Any]], label: str = "inputs",
              base: Path | None = None, progress: Callable[[int, int], None] | None = None,
              keep_results: bool = True) -> Sweep:  # fmt: skip
    """Run `command` with `inputs` at every point of the grid `vary` ({flag: values}, the values
    of a point overriding `inputs`). The inputs and the --vary keys are checked once, before any
    point runs (an unknown flag would fail every row); each point's own error becomes its row.
    keep_results=False keeps of each point only what its row prints (SweepRow), so that memory does
    not grow with the Results."""
    from parcalc.runfile import NEVER, OUTPUT_KEYS, defaults_for, input_slots, refused, signature, unknown_key
    from parcalc.worksheet import CALCULATION_COMMANDS

    if command not in CALCULATION_COMMANDS:
        import difflib

        close = difflib.get_close_matches(command, CALCULATION_COMMANDS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"{label}: key 'command': {shown(command)} is not a calculation{hint}; one of {', '.join(CALCULATION_COMMANDS)}")
    flags = signature(command)
    defaults_for(flags, command, inputs, label, base, refuse=OUTPUT_KEYS)  # the file's errors: once, up front
    slots = input_slots(flags)
    grid: dict[str, tuple[Any, ...]] = {}
    for key, values in vary.items():
        if key in OUTPUT_KEYS or key in NEVER:
            raise InputError(f"--vary {key}: {refused(key)}")
        if key not in slots:
            raise unknown_key("--vary", command, key, slots, what="key")
        grid[key] = tuple(_run_value(slots[key].param, key, v) for v in values)
        if not grid[key]:
            raise InputError(f"--vary {key}: no values")
    total = 1
    for values in grid.values():
        total *= len(values)
        if total > MAX_POINTS:
            raise InputError(f"--vary: more than {MAX_POINTS:,} points in the grid; sweep fewer values")
    rows = []
    names = list(grid)
    for index, combination in enumerate(itertools.product(*grid.values()) if grid else [()], start=1):
        point = dict(zip(names, combination, strict=True))
        shown_point = {k: shown_value(v) for k, v in point.items()}
        rows.append(_run_point(command, _merged(inputs, point, slots), shown_point, label, base, keep_results))
        if progress is not None:
            progress(index, total)
    return Sweep(command, dict(inputs), grid, tuple(rows))


def _merged(inputs: Mapping[str, Any], point: Mapping[str, Any], slots: Mapping[str, Any]) -> dict[str, Any]:
    """The run file's inputs with the point's values in place of those for the same flag (a file's
    `seq_len` and a --vary `seq-len` are the same flag)."""
    varied = {slots[k].param.name for k in point}
    return {**{k: v for k, v in inputs.items() if k not in slots or slots[k].param.name not in varied}, **point}


_INT = r"[+-]?\d+"
_FLOAT = r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?"


def _run_value(param: Any, key: str, value: Any) -> Any:
    """A --vary value as a run file would hold it: true / false for a switch, else as typed."""
    if not isinstance(value, str) or not getattr(param, "is_flag", False):
        return value
    lowered = value.lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise InputError(f"--vary {key}: a switch takes true or false, got {shown(value)}")


def shown_value(value: Any) -> Any:
    """A point's value in a row: a number where the text reads as one (so JSON rows carry numbers)."""
    import re

    if isinstance(value, str) and len(value) <= 40:  # longer: no flag's number; int() of 5,000 digits raised
        if re.fullmatch(_INT, value):
            return int(value)
        if re.fullmatch(_FLOAT, value):
            number = float(value)
            return number if math.isfinite(number) else value  # 1e999: the text, JSON has no infinity
    return value


def _run_point(command: str, inputs: Mapping[str, Any], point: Mapping[str, Any], label: str, base: Path | None,
               keep_result: bool = True) -> SweepRow:  # fmt: skip
    from parcalc.messages import internal_error_line, one_line
    from parcalc.results.run import run_command

    try:
        result = run_command(command, inputs, label, base)
    except InfeasibleError as error:
        return SweepRow(point, INFEASIBLE, one_line(str(error)), fits=False)  # infeasible: nothing fits (the command exits 1)
    except ParcalcError as error:
        return SweepRow(point, ERROR, one_line(str(error)))
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as error:  # noqa: BLE001 - a bug of parcalc at one point: its row says so, the sweep goes on
        return SweepRow(point, ERROR, internal_error_line(error))
    return SweepRow(point, OK, "", result if keep_result else None, result.verdicts[0] if result.verdicts else "",
                    tuple((d.key, d.value, d.unit) for d in result.derivations), result.fits)  # fmt: skip
