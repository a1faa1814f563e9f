"""The fullest GPU's memory as one stacked bar of characters, under `memory`'s component table.

Weights, gradients, optimizer states, activations and buffers + reserve (the groups of
MEMORY_GROUPS), each a run of its own letter in plain text (pipes, files,
NO_COLOR) or of its own colour through rich; the free memory up to the GPU's capacity as dots. The
numbers are the table's and the headroom derivation's; the bar fits 80 columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parcalc.derivation import Result


# Memory components (parcalc.core.memory.StageMemory.components) in five groups, in stacking order.
# Every component name the core produces must be here (tests/test_figures.py checks it).
MEMORY_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("weights", "#4c78a8", ("weights", "FP8 weight copies", "NVFP4 weight copies", "autocast weight copies", "sharded parameters", "unsharded parameters")),
    ("gradients", "#f58518", ("gradients", "sharded gradients")),
    ("optimizer states", "#54a24b", ("optimizer states",)),
    ("activations", "#e45756", ("activations (layers)", "activations (embeddings)", "logits / cross-entropy", "multi-token prediction",
                                "recomputation working set", "activations", "logits and loss", "temporaries")),
    ("buffers + reserve", "#9d9da0", ("ZeRO-3 gathered buffers", "context-parallel buffers", "MoE exchange buffers", "reserve",
                                      "workspace", "allocator: reserved beyond the live blocks", "all-gather buffers", "reduce-scatter buffers",
                                      "buffers")),
)  # fmt: skip
GROUP_OF = {name: group for group, _, names in MEMORY_GROUPS for name in names}
COLOUR_OF = {group: colour for group, colour, _ in MEMORY_GROUPS}
BAR_COLUMNS = 72  # characters of the bar itself: with its indent and brackets, 76 of 80 columns
LETTERS = {"weights": "W", "gradients": "G", "optimizer states": "O", "activations": "A", "buffers + reserve": "R"}
STYLES = {"weights": "blue", "gradients": "yellow", "optimizer states": "green", "activations": "red", "buffers + reserve": "grey62",
          "free": "dim", "capacity": "bold bright_white on red"}  # fmt: skip
GLYPH = {"free": "░", "capacity": "│"}
GIB = 2**30


def grouped(components: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    """Components (name, bytes) summed into MEMORY_GROUPS, in their order (the empty ones left out)."""
    sums = {group: 0.0 for group, _, _ in MEMORY_GROUPS}
    for name, value in components:
        if name not in GROUP_OF:
            raise KeyError(f"memory component {name!r} has no group in MEMORY_GROUPS")
        sums[GROUP_OF[name]] += value
    return tuple((group, value) for group, value in sums.items() if value > 0)


def bar_data(result: Result) -> tuple[tuple[tuple[str, float], ...], float, float | None] | None:
    """(groups, total, headroom) of a memory result's component table, or None for other results."""
    if result.command != "memory":
        return None
    table = next((t for t in result.tables if t.key == "components"), None)
    if table is None:
        return None
    rows = [(str(r[0]), float(r[1])) for r in table.rows if r[0] != "total"]  # type: ignore[arg-type]
    total = next((float(r[1]) for r in table.rows if r[0] == "total"), None)  # type: ignore[arg-type]
    if total is None or total <= 0:
        return None
    headroom = next((d.value for d in result.derivations if d.key == "headroom"), None)
    return grouped(rows), total, headroom


def cells(groups: tuple[tuple[str, float], ...], total: float, headroom: float | None, columns: int = BAR_COLUMNS) -> list[str]:
    """One group name (or "free") per character: the bar spans the capacity when the total fits
    in it, else the total. Largest remainders share the characters out; a group that is there
    gets at least one."""
    capacity_span = total + headroom if headroom is not None and headroom > 0 else total
    shares = [(name, value / capacity_span * columns) for name, value in groups]
    if headroom is not None and headroom > 0:
        shares.append(("free", headroom / capacity_span * columns))
    counts = {name: max(1, int(share)) if share > 0 else 0 for name, share in shares}
    while sum(counts.values()) > columns:  # the minimum of one character overshot: take from the widest
        widest = max(counts, key=lambda n: counts[n])
        counts[widest] -= 1
    spare = columns - sum(counts.values())
    for name, _ in sorted(shares, key=lambda item: item[1] - int(item[1]), reverse=True)[: max(spare, 0)]:
        counts[name] += 1
    out: list[str] = []
    for name, _ in shares:
        out += [name] * counts[name]
    return out


def _legend_items(groups: tuple[tuple[str, float], ...], headroom: float | None) -> list[tuple[str, str]]:
    items = [(name, f"{name} {value / GIB:.3g} GiB") for name, value in groups]
    if headroom is not None and headroom >= 0:
        items.append(("free", f"free {headroom / GIB:.3g} GiB"))
    elif headroom is not None:
        items.append(("capacity", f"capacity, {-headroom / GIB:.3g} GiB too much"))
    return items


def capacity_mark(total: float, headroom: float | None, columns: int) -> int | None:
    """The character where the capacity falls inside a bar that overshoots it (None: it fits)."""
    if headroom is None or headroom >= 0:
        return None
    return min(columns - 1, round((total + headroom) / total * columns))


SYMBOL = {"free": ".", "capacity": "|"}


def _flow(pieces: list[str], width: int, indent: str = "  ") -> list[str]:
    lines, current = [], indent
    for piece in pieces:
        if current.strip() and len(current) + 2 + len(piece) > width:
            lines.append(current.rstrip())
            current = indent
        current += ("  " if current.strip() else "") + piece
    if current.strip():
        lines.append(current.rstrip())
    return lines


def bar_lines(result: Result, width: int = 80) -> list[str]:
    """The bar and its legend as plain text ([] for results without one)."""
    data = bar_data(result)
    if data is None:
        return []
    groups, total, headroom = data
    columns = min(BAR_COLUMNS, width - 6)
    marks = cells(groups, total, headroom, columns)
    mark = capacity_mark(total, headroom, columns)
    if mark is not None:
        marks[mark] = "capacity"
    bar = "".join(SYMBOL.get(name) or LETTERS[name] for name in marks)
    heading = f"Memory of the fullest GPU: {total / GIB:.3g} GiB" + (
        "" if headroom is None else f" of {(total + headroom) / GIB:.3g} GiB")  # fmt: skip
    pieces = [f"{SYMBOL.get(name) or LETTERS[name]} {text}" for name, text in _legend_items(groups, headroom)]
    return [heading, f"  [{bar}]", *_flow(pieces, width)]


def rich_bar(result: Result, width: int) -> Any:
    """The bar and its legend as a rich Text (None for results without one)."""
    data = bar_data(result)
    if data is None:
        return None
    from rich.text import Text

    groups, total, headroom = data
    columns = min(BAR_COLUMNS, width - 6)
    marks = cells(groups, total, headroom, columns)
    mark = capacity_mark(total, headroom, columns)
    if mark is not None:
        marks[mark] = "capacity"
    text = Text()
    text.append("Memory of the fullest GPU: ", style="bold")
    text.append(f"{total / GIB:.3g} GiB" + ("" if headroom is None else f" of {(total + headroom) / GIB:.3g} GiB"))
    text.append("\n  ")
    start = 0
    for index in range(1, len(marks) + 1):  # runs of one group: one style each
        if index == len(marks) or marks[index] != marks[start]:
            text.append(GLYPH.get(marks[start], "█") * (index - start), style=STYLES[marks[start]])
            start = index
    line = 2
    text.append("\n  ")
    for name, label in _legend_items(groups, headroom):
        size = 2 + len(label)
        if line > 2 and line + 2 + size > width:
            text.append("\n  ")
            line = 2
        elif line > 2:
            text.append("  ")
            line += 2
        text.append(GLYPH.get(name, "■") + " ", style=STYLES[name])
        text.append(label)
        line += size
    return text
