"""`parcalc sweep`: run a run file's command over a grid of flag values, one CSV or JSON row per point."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

EXAMPLES = """\
\b
Examples:
  parcalc sweep examples/sweep.yaml --vary tp=1,2,4,8 --vary pp=1,2,4
  parcalc sweep run.yaml --vary tp=4,8 --vary sequence-parallel=true,false -f json -o sweep.json
  parcalc sweep run.toml --vary seq-len=2048,4096,8192 -o sweep.csv
  printf 'command: memory\\nmodel: gpt3-175b\\ngpu: a100-sxm4-80gb\\n' | parcalc sweep - --vary tp=1,2,4,8,16
\b
A run file names the command and holds its flags by name, as --config's do
(examples/sweep.yaml in parcalc's repository):
  command: fit
  model: gpt3-175b
  gpu: a100-sxm4-80gb
  gpus: 64
  batch: 64
  micro-batch: 1
"""

FORMATS = ("csv", "json")


def sweep(
    run_file: Annotated[str, typer.Argument(metavar="RUN_FILE", help="YAML or .toml run file naming the command (command: fit) and its flags; - for stdin.")],
    vary: Annotated[Optional[list[str]], typer.Option("--vary", metavar="KEY=V1,V2,...", help="A flag and the values it takes (repeatable): the grid is every combination, the last --vary changing fastest.", show_default=False)] = None,  # noqa: UP045
    fmt: Annotated[Optional[str], typer.Option("--format", "-f", metavar="FORMAT", help="csv (default) or json; default from -o's extension.", show_default=False)] = None,  # noqa: UP045
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="FILE", help="Write to FILE (.csv or .json) instead of stdout, all or nothing.", show_default=False)] = None,  # noqa: UP045
) -> None:
    """Run the run file's command at every point of a grid of flag values, in-process, and write
    one row per point: the point, ok / infeasible / error with the reason (an invalid combination
    is a row, not a failed sweep), and every result's value in base units. Exit 0 when a point
    succeeded."""
    from parcalc.errors import InputError

    kind = _format(fmt, output)
    if output is not None:
        from parcalc.files import check_writable

        check_writable(output)
    from parcalc.commands.common import ProgressBar
    from parcalc.runfile import read_run_file
    from parcalc.sweeps import parse_vary, run_sweep

    grid = parse_vary(vary or [])
    run = read_run_file(run_file, "RUN_FILE")
    if not run.command:
        raise InputError(f"{run.label}: name the command to sweep, e.g. `command: fit`")
    bar = ProgressBar(f"sweep {run.command}")
    try:
        result = run_sweep(run.command, run.inputs, grid, run.label, run.base, progress=bar, keep_results=False)
    finally:
        bar.close()
    text = result.to_csv() if kind == "csv" else _json(result.to_dict())
    if output is None:
        from parcalc.streams import write_out

        write_out(text)
    else:
        from parcalc.files import write_atomically

        write_atomically(output, text)
    _summary(result, output)
    if not result.succeeded:
        from parcalc.sweeps import INFEASIBLE

        raise typer.Exit(1 if any(row.status == INFEASIBLE for row in result.rows) else 2)


def _format(fmt: str | None, output: Path | None) -> str:
    from parcalc.errors import InputError

    if fmt is not None:
        if fmt.lower() not in FORMATS:
            raise InputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
        return fmt.lower()
    if output is None or output.suffix.lower() == ".csv":
        return "csv"
    if output.suffix.lower() == ".json":
        return "json"
    raise InputError(f"--output: use .csv or .json (or --format), not {output.suffix or 'no extension'!r}")


def _json(document: object) -> str:
    import json

    return json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _summary(result: object, output: Path | None) -> None:
    """One line on stderr: how many points, how many of each status, where it went."""
    from collections import Counter

    from parcalc.streams import say

    counts = Counter(row.status for row in result.rows)  # type: ignore[attr-defined]
    parts = ", ".join(f"{n} {status}{'s' if status == 'error' and n != 1 else ''}" for status, n in counts.items())
    where = f"; wrote {output}" if output is not None else ""
    say(f"sweep {result.command}: {len(result.rows)} point{'s' if len(result.rows) != 1 else ''} ({parts}){where}")  # type: ignore[attr-defined]
