"""A pipeline timeline in the terminal, drawn like the figures of GPipe and Megatron-LM.

One row per device, time running left to right; each operation is a block of cells starting
with its micro-batch number (numbered from 1, as in the papers' figures), forward, backward and
weight-gradient passes told apart by colour (rich) or, with colour off, by a letter and a fill
character: `F3-`, `B3====`, `W3~`; idle time is dots. A model chunk other than the first
(interleaved schedule) is written `3.2` (micro-batch 3, chunk 2) and drawn in a lighter shade.

A cell is one time quantum: the shortest operation, or a fraction of it when that makes every
start and end fall on a cell boundary. Long timelines wrap into bands that fit the width (8
stages x 32 micro-batches of 1F1B is four bands at 120 columns), so every number stays legible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from parcalc.core.pipeline_sim import B, Event, F, Timeline, W
from parcalc.units import format_quantity

MAX_CELLS = 4000  # beyond this a timeline is scaled: a cell covers more than the shortest operation
FILL = {F: "-", B: "=", W: "~"}
NAMES = {F: "forward", B: "backward", W: "weight gradient"}
# rich styles per op; chunk k uses entry k modulo the length (dark first chunk, lighter later
# ones, as in Narayanan et al. 2021 fig. 4)
STYLES = {
    F: ("bold white on blue", "black on steel_blue1", "black on sky_blue1", "white on dodger_blue2"),
    B: ("bold black on dark_orange", "black on light_salmon1", "black on navajo_white1", "black on orange1"),
    W: ("bold white on green4", "black on pale_green3", "black on dark_sea_green2", "black on green3"),
}
IDLE_STYLE = "dim"


@dataclass(frozen=True)
class TextGrid:
    """The timeline on a character grid: per device a string and, per character, its event (or None)."""

    quantum: float  # seconds per cell
    cell: int  # characters per cell
    label_width: int
    labels: tuple[str, ...]
    rows: tuple[str, ...]
    owners: tuple[tuple[Event | None, ...], ...]
    cells: int

    def bands(self, width: int) -> list[tuple[int, int]]:
        """[start, end) character ranges, each fitting `width` beside the device labels, cut at cell boundaries."""
        per_band = max(1, (width - self.label_width) // self.cell) * self.cell
        total = self.cells * self.cell
        return [(start, min(start + per_band, total)) for start in range(0, max(total, 1), per_band)]


def layout(timeline: Timeline, *, coloured: bool = False) -> TextGrid:
    """Place every event on the grid. `coloured` drops the op letter (the colour shows it)."""
    events = timeline.events
    quantum = _quantum(events, timeline.makespan)
    cells = max(1, math.ceil(timeline.makespan / quantum - 1e-9)) if events else 1
    cell = max(len(_label(e, timeline.chunks, coloured)) for e in events) + 1 if events else 2
    labels = tuple(f"Device {d + 1}" for d in range(timeline.stages))
    label_width = max(len(label) for label in labels) + 2
    rows, owners = [], []
    by_device: list[list[Event]] = [[] for _ in range(timeline.stages)]
    for event in events:
        by_device[event.device].append(event)
    for mine in by_device:
        chars: list[str] = ["."] * (cells * cell)
        owner: list[Event | None] = [None] * (cells * cell)
        for event in mine:
            first, last = _cell_of(event.start, quantum) * cell, _cell_of(event.end, quantum) * cell
            last = min(last, cells * cell)
            if last <= first:
                continue  # shorter than half a cell: too small to draw at this scale
            text = _block(_label(event, timeline.chunks, coloured), event.op, last - first, coloured)
            chars[first:last] = text
            owner[first:last] = [event] * (last - first - 1) + [None]  # the last character separates blocks
        rows.append("".join(chars))
        owners.append(tuple(owner))
    return TextGrid(quantum, cell, label_width, labels, tuple(rows), tuple(owners), cells)


def _quantum(events: tuple[Event, ...], makespan: float) -> float:
    durations = sorted({e.end - e.start for e in events if e.end > e.start})
    if not durations:
        return makespan or 1.0
    base = durations[0]
    marks = {e.start for e in events} | {e.end for e in events}
    for divisor in (1, 2, 3, 4, 5, 6, 8, 10, 12):
        quantum = base / divisor
        if makespan / quantum > MAX_CELLS:
            break
        if all(abs(x / quantum - round(x / quantum)) < 1e-6 for x in marks):
            return quantum
    return max(base, makespan / MAX_CELLS)


def _cell_of(time: float, quantum: float) -> int:
    return math.floor(time / quantum + 0.5)


def _label(event: Event, chunks: int, coloured: bool) -> str:
    number = str(event.micro_batch + 1) + (f".{event.chunk + 1}" if chunks > 1 else "")
    return number if coloured else event.op + number


def _block(label: str, op: str, width: int, coloured: bool) -> str:
    """An operation `width` characters wide: its label, fill, and one separating space."""
    if width == 1:
        return label[0] if not coloured else " "
    body = width - 1
    fill = " " if coloured else FILL[op]
    text = label if len(label) <= body else (op if not coloured else "")
    return (text + fill * body)[:body] + " "


def legend(timeline: Timeline, quantum: float, coloured: bool) -> str:
    ops = [F, B, W] if any(e.op == W for e in timeline.events) else [F, B]
    split = W in ops
    names = {**NAMES, B: "backward (input gradient)" if split else "backward"}
    if coloured:
        parts = [f"{names[op]} ({_colour_word(op)})" for op in ops]
    else:
        parts = [f"{op}{FILL[op] * 2} {names[op]}" for op in ops]
    chunk_note = "; 3.2 = micro-batch 3, chunk 2" if timeline.chunks > 1 else ""
    idle = "· idle" if coloured else ". idle"
    return f"{', '.join(parts)}, {idle}; numbers are micro-batches{chunk_note}; one cell = {format_quantity(quantum, 's')}"


def _colour_word(op: str) -> str:
    return {F: "blue", B: "orange", W: "green"}[op]


def timeline_text(timeline: Timeline, width: int = 100, title: str = "") -> str:
    """The timeline in plain characters (no colour), wrapped into bands of at most `width` columns."""
    grid = layout(timeline)
    lines = [title] if title else []
    lines.append(legend(timeline, grid.quantum, coloured=False))
    for start, end in grid.bands(width):
        lines.append("")
        lines.append(_band_header(grid, start, end))
        for label, row in zip(grid.labels, grid.rows, strict=True):
            lines.append(f"{label:<{grid.label_width}}{row[start:end]}".rstrip())
    return "\n".join(lines) + "\n"


def _band_header(grid: TextGrid, start: int, end: int) -> str:
    t0 = start // grid.cell * grid.quantum
    t1 = end // grid.cell * grid.quantum
    return f"{'':<{grid.label_width}}time {format_quantity(t0, 's')} to {format_quantity(t1, 's')}"


def print_timeline(timeline: Timeline, console: Any, title: str = "") -> None:
    """The timeline with rich colours on `console`, wrapped to its width."""
    from rich.text import Text

    grid = layout(timeline, coloured=True)
    if title:
        console.print(Text(title, style="bold"))
    console.print(Text(legend(timeline, grid.quantum, coloured=True), style="dim"))
    for start, end in grid.bands(console.width):
        console.print()
        console.print(Text(_band_header(grid, start, end), style="dim"))
        for label, row, owner in zip(grid.labels, grid.rows, grid.owners, strict=True):
            line = Text(f"{label:<{grid.label_width}}", no_wrap=True, overflow="crop")
            for text, event in _runs(row[start:end], owner[start:end]):
                if event is None:
                    line.append(text.replace(".", "·"), style=IDLE_STYLE)
                else:
                    styles = STYLES[event.op]
                    line.append(text, style=styles[event.chunk % len(styles)])
            console.print(line, no_wrap=True, overflow="crop", soft_wrap=False)


def _runs(row: str, owner: tuple[Event | None, ...]) -> list[tuple[str, Event | None]]:
    """Consecutive characters with the same owner, as (text, owner)."""
    runs: list[tuple[str, Event | None]] = []
    for char, event in zip(row, owner, strict=True):
        if runs and runs[-1][1] is event:
            runs[-1] = (runs[-1][0] + char, event)
        else:
            runs.append((char, event))
    return runs
