"""--table NAME (parcalc.cli adds it to every command with --format csv): which of a result's
tables CSV prints, set for each run and read by parcalc.render.csv_out.

A module of its own, this small, so that the CLI sets the choice at every run without importing the
CSV renderer, and the renderer reads it without importing parcalc.output, which imports it.
"""

from __future__ import annotations

from contextvars import ContextVar

chosen_table: ContextVar[str | None] = ContextVar("chosen_table", default=None)
