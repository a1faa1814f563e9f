"""The pictures of a Result: roofline, memory per GPU as stacked bars, the search's configurations,
the pipeline timeline, each laid out once on a parcalc.render.canvas.Canvas (SVG or TikZ).

Renderers only format: every number drawn is a value of the result (a derivation, an input or a
table cell); this module chooses pixels for them. Which picture a result has follows from its
command and its tables:

- intensity with a machine (--gpu, or --peak and --bandwidth): the roofline, the matmul or each of
  the layer's operations a point on it (Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4));
- memory, and fit's one configuration (--tp/--pp/--dp): a stacked bar per pipeline stage (table
  "stage_components"; the components in the groups of parcalc.render.memory_bar.MEMORY_GROUPS),
  else the fullest GPU's components (table "components");
- fit's strategy table: a stacked bar per strategy row (table "strategy_memory");
- fit --search: every configuration evaluated as step time against memory per GPU (table
  "configurations"), the GPU's capacity (the fits / does-not-fit boundary) and the fastest
  configuration at each memory budget (parcalc.core.frontier) marked;
- bubble: the simulated timeline (table "timeline").
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from parcalc.errors import InputError
from parcalc.render.canvas import Canvas, Scale, linear_ticks, log_ticks, text_width
from parcalc.render.memory_bar import COLOUR_OF, MEMORY_GROUPS, grouped
from parcalc.units import format_quantity

if TYPE_CHECKING:
    from parcalc.derivation import Result, Table

GIB = 2**30
WIDTH = 640.0
# Tables that exist to be drawn: a document shows their picture, not their rows.
FIGURE_TABLES = frozenset({"timeline", "configurations", "stage_components", "strategy_memory"})


@dataclass(frozen=True)
class Figure:
    key: str  # roofline, memory, strategies, search, timeline: also the suffix of a Markdown report's file
    title: str
    canvas: Canvas


def figures_of(result: Result) -> list[Figure]:
    """Every picture `result` has (none for most commands)."""
    keys = {t.key for t in result.tables}
    found: list[Figure | None] = []
    if result.command == "intensity":
        found.append(roofline_figure(result))
    if result.command == "memory" or "stage_components" in keys:  # fit's one configuration too
        found.append(memory_figure(result))
    if "strategy_memory" in keys:
        found.append(strategies_figure(result))
    if "configurations" in keys:
        found.append(search_figure(result))
    if "timeline" in keys:
        found.append(timeline_figure(result))
    return [f for f in found if f is not None]


def the_figure(result: Result, flag: str = "--output") -> Figure:
    """The one picture of `result`, or an InputError saying why there is none."""
    figures = figures_of(result)
    if figures:
        return figures[0]
    if result.command == "fit" and any(t.key == "gpu_types" for t in result.tables):
        raise InputError(f"{flag}: the search's picture shows one GPU type; give one --gpu")
    hints = {
        "intensity": "the roofline needs a machine: give --gpu, or --peak and --bandwidth",
        "bubble": "give --timeline to draw the schedule",
        "fit": "fit draws its strategy table, one configuration's memory (--tp/--pp/--dp) or the search's configurations (--search)",
    }
    why = hints.get(result.command, f"{result.command} has no picture; .svg is for intensity, memory, fit and bubble")
    raise InputError(f"{flag}: nothing to draw: {why}")


def table_of(result: Result, key: str) -> Table | None:
    return next((t for t in result.tables if t.key == key), None)


def _term_value(result: Result, key: str) -> float | None:
    for term in result.inputs:
        if term.key == key:
            return term.value
    for derivation in result.derivations:
        for term in derivation.inputs:
            if term.key == key:
                return term.value
    return None


def _short(value: float, unit: str) -> str:
    return format_quantity(value, unit, significant=3)


def _gib(value: float) -> str:
    return f"{value / GIB:.3g} GiB"


def _title(canvas: Canvas, text: str, width: float = WIDTH) -> float:
    """The title, wrapped at spaces to the canvas (a long model name takes a second line; a word longer
    than a line is broken); returns the y below it."""
    size, leading = 14.0, 18.0
    room = max(int((width - 24) / (size * 0.6)), 8)
    lines = textwrap.wrap(text, room, break_long_words=True, break_on_hyphens=False) or [""]
    for index, line in enumerate(lines):
        canvas.text(12, 24 + index * leading, line, size=size, bold=True)
    return 36.0 + (len(lines) - 1) * leading


# ---------------------------------------------------------------------------------------------
# Roofline


RooflinePoint = tuple[str, float, float, bool]  # name, intensity (FLOP/B), attainable (FLOP/s), compute-bound


def roofline_points(result: Result, name: str = "Y = XW") -> list[RooflinePoint]:
    """Each operation of a layer's table "ops", or the matmul's (named `name`); [] without a machine."""
    ops = table_of(result, "ops")
    if ops is not None:
        if "attainable" not in [c.key for c in ops.columns]:
            return []
        return [(str(r["op"]), float(r["intensity"]), float(r["attainable"]), r["bound"] == "compute")  # type: ignore[arg-type]
                for r in ops.records()]  # fmt: skip
    if not {"intensity", "attainable", "ridge"} <= {d.key for d in result.derivations}:
        return []
    intensity = result.derivation("intensity").value
    return [(name, intensity, result.derivation("attainable").value, intensity >= result.derivation("ridge").value)]


def roofline_figure(result: Result) -> Figure | None:
    """Each operation (a layer's table "ops") or the matmul as a point under the two roofs."""
    peak, bandwidth = _term_value(result, "peak"), _term_value(result, "bw")
    points = roofline_points(result)
    if peak is None or bandwidth is None or not points:
        return None
    return roofline_of(f"Roofline: {result.title}", points, peak, bandwidth)


def worksheet_roofline(results: Sequence[Result], title: str) -> Figure | None:
    """A worksheet question's matmuls (one intensity result each, on one machine), numbered in order."""
    points = [p for i, r in enumerate(results, start=1) for p in roofline_points(r, f"product {i}")]
    machines = {(_term_value(r, "peak"), _term_value(r, "bw")) for r in results if roofline_points(r)}
    if not points or len(machines) != 1:
        return None
    peak, bandwidth = machines.pop()
    if peak is None or bandwidth is None:
        return None
    return roofline_of(title, points, peak, bandwidth)


def roofline_of(title: str, points: list[RooflinePoint], peak: float, bandwidth: float) -> Figure:
    ridge = peak / bandwidth  # where the two roofs meet: the x of the corner drawn
    canvas = Canvas(WIDTH, 0, title=title)
    top = _title(canvas, title)
    left, right, plot_top, plot_height = 116.0, WIDTH - 24, top + 14, 300.0
    xs = [p[1] for p in points]
    # at least 1.5 decades of each roof around the ridge point, so that the corner reads as one
    x_low = 10 ** math.floor(math.log10(min(min(xs) / 2, ridge / 30)))
    x_high = 10 ** math.ceil(math.log10(max(max(xs) * 2, ridge * 30)))
    y_low, y_high = bandwidth * x_low, peak * 2.5
    x = Scale(x_low, x_high, left, right, log=True)
    y = Scale(y_low, y_high, plot_top + plot_height, plot_top, log=True)
    bottom = plot_top + plot_height
    _frame(canvas, left, right, plot_top, bottom)
    for tick in log_ticks(x_low, x_high):
        _xtick(canvas, x(tick), bottom, f"{tick:g}", grid_top=plot_top)
    for tick in log_ticks(y_low, y_high):
        _ytick(canvas, y(tick), left, _short(tick, "FLOP/s"), grid_right=right)
    canvas.text((left + right) / 2, bottom + 36, "arithmetic intensity (FLOP/byte)", size=12, anchor="middle")
    canvas.text(16, (plot_top + bottom) / 2, "attainable FLOP/s", size=12, anchor="middle", rotate=True)
    # the roofs: bandwidth x intensity up to the ridge point, the peak after it
    canvas.line([(x(x_low), y(y_low)), (x(ridge), y(peak)), (x(x_high), y(peak))], stroke="#000000", width=2.2)
    canvas.line([(x(ridge), y(peak)), (x(ridge), bottom)], stroke="#888888", width=1, dashed=True)
    canvas.text(x(ridge) + 4, bottom - 6, f"ridge {ridge:.4g} FLOP/B", size=11, fill="#555555")
    # points: one per distinct position, numbered; the legend below names them
    groups: dict[tuple[float, float], list[int]] = {}
    for index, (_, intensity, attainable, _) in enumerate(points, start=1):
        groups.setdefault((intensity, attainable), []).append(index)
    for order, ((intensity, attainable), numbers) in enumerate(sorted(groups.items())):
        compute = points[numbers[0] - 1][3]
        colour = "#1f5fa8" if compute else "#d62728"
        names = "; ".join(points[n - 1][0] for n in numbers)
        tip = f"{names}: {intensity:.4g} FLOP/B, {_short(attainable, 'FLOP/s')}"
        canvas.circle(x(intensity), y(attainable), 5, colour, stroke="white", tooltip=tip)
        below = order % 2 == 0  # neighbours' numbers alternate below and above their points
        canvas.text(x(intensity), y(attainable) + (18 if below else -9), ",".join(map(str, numbers)), size=11, anchor="middle", fill=colour)
    legend = [("dot", "#1f5fa8", "compute-bound"), ("dot", "#d62728", "memory-bound"),
              ("line", "#000000", f"roofs: peak {_short(peak, 'FLOP/s')}, memory {_short(bandwidth, 'B/s')}")]  # fmt: skip
    line_y = _legend(canvas, legend, left, bottom + 62) + 20
    texts = [f"{index}  {name}: {intensity:.4g} FLOP/B" for index, (name, intensity, _, _) in enumerate(points, start=1)]
    half = int((right - left) / 2 / (11 * 0.6)) - 1
    columns = 2 if all(len(text) <= half for text in texts) else 1  # long names: one column, wrapped, never cut
    room = half if columns == 2 else int((right - left) / (11 * 0.6)) - 1
    for row in range(0, len(texts), columns):
        lines_here = 1
        for offset, text in enumerate(texts[row:row + columns]):
            lines = textwrap.wrap(text, room, subsequent_indent="    ", break_on_hyphens=False) or [""]
            for k, line in enumerate(lines):
                canvas.text(left + offset * (right - left) / 2, line_y + k * 16, line, size=11)
            lines_here = max(lines_here, len(lines))
        line_y += lines_here * 16
    canvas.height = line_y + 8
    return Figure("roofline", canvas.title, canvas)


# ---------------------------------------------------------------------------------------------
# Stacked memory bars


@dataclass(frozen=True)
class Bar:
    label: str
    parts: tuple[tuple[str, float], ...]  # (group, bytes) in MEMORY_GROUPS order
    total: float
    faded: bool = False  # does not fit (drawn lighter)


def memory_figure(result: Result) -> Figure | None:
    """A bar per pipeline stage (one GPU of each), or the fullest GPU's alone."""
    capacity = _term_value(result, "C")
    stages = table_of(result, "stage_components")
    bars: list[Bar] = []
    if stages is not None:
        names = [c.label for c in stages.columns[1:-1]]
        for row in stages.rows:
            bars.append(Bar(f"stage {row[0]}", grouped(list(zip(names, (float(v) for v in row[1:-1]), strict=True))), float(row[-1])))  # type: ignore[arg-type]
    else:
        components = table_of(result, "components")
        if components is None:
            return None
        rows = [(str(r[0]), float(r[1])) for r in components.rows if r[0] != "total"]  # type: ignore[arg-type]
        total = next(float(r[1]) for r in components.rows if r[0] == "total")  # type: ignore[arg-type]
        bars.append(Bar("fullest GPU", grouped(rows), total))
    title = f"Memory per GPU: {result.title.removeprefix('Memory per GPU: ')}"
    return Figure("memory", title, _stacked_bars(title, bars, capacity, "bytes on one GPU"))


def strategies_figure(result: Result) -> Figure | None:
    """A bar per row of fit's strategy table that has a layout (table "strategy_memory")."""
    table = table_of(result, "strategy_memory")
    if table is None or not table.rows:
        return None
    names = [c.label for c in table.columns[2:-1]]
    bars = [Bar(str(row[0]), grouped(list(zip(names, (float(v) for v in row[2:-1]), strict=True))), float(row[-1]), faded=row[1] != "yes")  # type: ignore[arg-type]
            for row in table.rows]  # fmt: skip
    title = result.title
    return Figure("strategies", title, _stacked_bars(title, bars, _term_value(result, "C"), "bytes on the fullest GPU; lighter: does not fit"))


def _stacked_bars(title: str, bars: list[Bar], capacity: float | None, caption: str) -> Canvas:
    """Horizontal stacked bars, one row each, with the GPU's capacity as a dashed line."""
    canvas = Canvas(WIDTH, 0, title=title)
    top = _title(canvas, title)
    label_width = min(max(text_width(b.label, 11) for b in bars) + 10, 220.0)
    left, right = 12 + label_width, WIDTH - 70
    row = 22.0 if len(bars) <= 40 else max(6.0, 880.0 / len(bars))
    items = [("box", colour, group) for group, colour, _ in MEMORY_GROUPS if any(g == group for b in bars for g, _ in b.parts)]
    if capacity:
        items.append(("dash", "#b00020", f"capacity {_gib(capacity)}"))
    legend_y = _legend(canvas, items, 12.0, top + 12)
    plot_top = legend_y + 14
    high = max([b.total for b in bars] + ([capacity] if capacity else []))
    ticks = linear_ticks(0, high / GIB)
    scale = Scale(0, max(ticks[-1], high / GIB) * GIB, left, right)
    bottom = plot_top + row * len(bars)
    for tick in ticks:
        px = scale(tick * GIB)
        canvas.line([(px, plot_top), (px, bottom)], stroke="#e6e6e6", width=0.8)
        canvas.line([(px, bottom), (px, bottom + 4)], stroke="#000000")
        canvas.text(px, bottom + 17, f"{tick:g}", size=11, anchor="middle")
    canvas.text((left + right) / 2, bottom + 34, f"GiB ({caption})", size=11, anchor="middle")
    every = max(1, math.ceil(14 / row))  # a label every `every` rows when the rows are thinner than the text
    for index, bar in enumerate(bars):
        y = plot_top + index * row
        x0 = left
        for group, value in bar.parts:
            x1 = x0 + scale(value) - scale(0)
            colour = COLOUR_OF[group]
            canvas.rect(x0, y + row * 0.15, x1 - x0, row * 0.7, _faded(colour) if bar.faded else colour,
                        tooltip=f"{bar.label}: {group} {_gib(value)}")  # fmt: skip
            x0 = x1
        if index % every == 0:
            canvas.text(left - 8, y + row / 2 + 4, bar.label, size=11, anchor="end", fill="#777777" if bar.faded else "#000000")
            if row >= 14:
                canvas.text(x0 + 4, y + row / 2 + 4, _gib(bar.total), size=11, fill="#333333")
    canvas.line([(left, plot_top), (left, bottom)], stroke="#000000")
    canvas.line([(left, bottom), (right, bottom)], stroke="#000000")
    if capacity:
        cx = scale(capacity)
        canvas.line([(cx, plot_top - 4), (cx, bottom)], stroke="#b00020", width=1.4, dashed=True)
    canvas.height = bottom + 44
    return canvas


def _faded(colour: str) -> str:
    """`colour` mixed 55 % with white."""
    value = colour.lstrip("#")
    r, g, b = (int(value[i : i + 2], 16) for i in (0, 2, 4))
    return "#" + "".join(f"{round(c + (255 - c) * 0.55):02x}" for c in (r, g, b))


# ---------------------------------------------------------------------------------------------
# The search


def search_figure(result: Result) -> Figure | None:
    """Step time against memory per GPU of every configuration evaluated."""
    from parcalc.core.frontier import pareto_front

    table = table_of(result, "configurations")
    capacity = _term_value(result, "C")
    if table is None or not table.rows or capacity is None:
        return None
    keys = [c.key for c in table.columns]
    if "gpu" in keys:  # several GPU types compared: no picture (the_figure says why)
        return None
    at = {k: keys.index(k) for k in ("memory", "fits", "t_step", "tp", "pp", "dp")}
    memory = [float(r[at["memory"]]) for r in table.rows]  # type: ignore[arg-type]
    step = [float(r[at["t_step"]]) for r in table.rows]  # type: ignore[arg-type]
    fits = [bool(r[at["fits"]]) for r in table.rows]
    fitting = [i for i in range(len(memory)) if fits[i]]
    front = pareto_front([memory[i] for i in fitting], [step[i] for i in fitting])
    front_rows = [fitting[i] for i in front]
    title = result.title.replace("Fastest configurations", "Step time against memory")
    canvas = Canvas(WIDTH, 0, title=title)
    top = _title(canvas, title)
    legend = [("dot", "#6baed6", f"fits ({len(fitting):,})"), ("dot", "#cfcfcf", f"does not fit ({len(memory) - len(fitting):,})"),
              ("line", "#08306b", "fastest within each memory budget")]  # fmt: skip
    left, right, plot_height = 78.0, WIDTH - 24, 330.0
    plot_top = _legend(canvas, legend, left, top + 16) + 18
    bottom = plot_top + plot_height
    lowest, highest = min(min(memory), capacity), max(max(memory), capacity)
    if highest > 8 * lowest:  # memory over decades (ZeRO-3 next to DDP): a log axis keeps the fitting ones apart
        x = Scale(lowest / 1.15, highest * 1.15, left, right, log=True)
        ticks = log_ticks(lowest / 1.15 / GIB, highest * 1.15 / GIB)
    else:
        ticks = linear_ticks(0, highest * 1.05 / GIB)
        x = Scale(0, max(ticks[-1], highest * 1.05 / GIB) * GIB, left, right)
    low, high = min(step), max(step)
    log = high > 20 * low
    if log:
        y_low, y_high = low / 1.25, high * 1.25
        y = Scale(y_low, y_high, bottom, plot_top, log=True)
        y_ticks = log_ticks(y_low, y_high)
    else:
        y_ticks = linear_ticks(0, high * 1.05)
        y = Scale(0, max(y_ticks[-1], high * 1.05), bottom, plot_top)
    # beyond the capacity: does not fit
    cx = x(capacity)
    canvas.rect(cx, plot_top, right - cx, plot_height, "#fbe9e9")
    _frame(canvas, left, right, plot_top, bottom)
    for tick in ticks:
        _xtick(canvas, x(tick * GIB), bottom, f"{tick:g}", grid_top=plot_top)
    for tick in y_ticks:
        _ytick(canvas, y(tick), left, format_quantity(tick, "s", significant=3), grid_right=right)
    canvas.text((left + right) / 2, bottom + 36, "memory per GPU (GiB), fullest stage" + (", log scale" if x.log else ""), size=12, anchor="middle")
    canvas.text(16, (plot_top + bottom) / 2, "step time" + (" (log scale)" if log else ""), size=12, anchor="middle", rotate=True)
    canvas.line([(cx, plot_top), (cx, bottom)], stroke="#b00020", width=1.4, dashed=True)
    note = f"capacity {_gib(capacity)}: beyond it, does not fit"
    inside = cx + 5 + text_width(note, 11) < right
    canvas.text(cx + 5 if inside else cx - 5, plot_top + 15, note, size=11, anchor="start" if inside else "end", fill="#b00020")
    dots: list[tuple[float, float]] = []  # where the dots are drawn: the fastest's label is set clear of them
    for group in (False, True):  # those that fit drawn last, on top
        for px, py in _thinned([(x(memory[i]), y(step[i])) for i in range(len(memory)) if fits[i] is group]):
            canvas.circle(px, py, 2.4, "#6baed6" if group else "#cfcfcf")
            dots.append((px, py))
    if front_rows:
        path: list[tuple[float, float]] = []
        for i in sorted(front_rows, key=lambda k: memory[k]):
            px, py = x(memory[i]), y(step[i])
            if path:
                path.append((px, path[-1][1]))
            path.append((px, py))
        path.append((cx, path[-1][1]))
        canvas.line(path, stroke="#08306b", width=2)
        best = min(fitting, key=lambda k: (step[k], memory[k]))
        canvas.circle(x(memory[best]), y(step[best]), 6, "none", stroke="#d62728")
        label = f"fastest: tp {table.rows[best][at['tp']]} pp {table.rows[best][at['pp']]} dp {table.rows[best][at['dp']]}, {format_quantity(step[best], 's', significant=3)}"
        bx, by = x(memory[best]), y(step[best])
        width = text_width(label, 11)
        note_box = (cx + 5, cx + 5 + text_width(note, 11), plot_top + 4, plot_top + 18) if inside else (
            cx - 5 - text_width(note, 11), cx - 5, plot_top + 4, plot_top + 18)  # fmt: skip
        # beside the point where that is clear of every dot; else the clearest spot inside the plot, with a leader line
        near = [(bx + 10, by + 18), (bx - 10 - width, by + 18), (bx + 10, by - 10), (bx - 10 - width, by - 10)]
        far = [(left + 6, bottom - 6), (left + 6, plot_top + 30), (cx - 6 - width, bottom - 6), (cx - 6 - width, plot_top + 30)]
        spots = [(sx, sy) for sx, sy in near + far if left + 2 <= sx and sx + width <= right - 2 and plot_top + 12 <= sy <= bottom - 2]
        sx, sy = min(spots or near[:1], key=lambda spot: (_covered(spot, width, 11, dots, note_box), spots.index(spot) if spot in spots else 0))
        if (sx, sy) not in near:
            canvas.line([(bx, by), (sx + width / 2, sy - 11 if sy > by else sy + 3)], stroke="#d62728", width=0.8)
        canvas.text(sx, sy, label, size=11, anchor="start", fill="#d62728")
    canvas.height = bottom + 50
    return Figure("search", title, canvas)


def _covered(spot: tuple[float, float], width: float, size: float, dots: list[tuple[float, float]],
             box: tuple[float, float, float, float]) -> int:
    """How many dots (radius 2.4) a label of `width` set at `spot` (its baseline's start) would
    overprint, and 1000 more if it would cross the capacity note's box `box` (x0, x1, y0, y1)."""
    x0, x1, y0, y1 = spot[0] - 3, spot[0] + width + 3, spot[1] - size - 3, spot[1] + 4
    crossed = 1000 if x0 < box[1] and box[0] < x1 and y0 < box[3] and box[2] < y1 else 0
    return crossed + sum(1 for px, py in dots if x0 <= px <= x1 and y0 <= py <= y1)


# At most this many dots of one kind: a PDF's TikZ takes ~0.5 ms of TeX per dot and pass, and the
# eye cannot tell 8,000 overlapping dots of 2.4 px from 3,000.
MAX_DOTS = 3000


def _thinned(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """One point per cell of a grid (1.5 px, coarser until at most MAX_DOTS remain), first come
    first kept: configurations that fall on the same spot share one dot."""
    grid = 1.5
    while True:
        seen: dict[tuple[int, int], tuple[float, float]] = {}
        for px, py in points:
            seen.setdefault((round(px / grid), round(py / grid)), (px, py))
        if len(seen) <= MAX_DOTS:
            return list(seen.values())
        grid *= 1.4


# ---------------------------------------------------------------------------------------------
# Pipeline timeline (the same colours as parcalc.render.timeline_svg)


def timeline_figure(result: Result) -> Figure | None:
    from parcalc.render.timeline_svg import FILLS

    table = table_of(result, "timeline")
    if table is None or not table.rows:
        return None
    records = table.records()
    devices = max(int(r["device"]) for r in records)  # type: ignore[call-overload]
    makespan = max(float(r["end"]) for r in records)  # type: ignore[arg-type]
    title = f"Timeline: {result.title}"
    canvas = Canvas(WIDTH, 0, title=title)
    top = _title(canvas, title)
    left, right = 70.0, WIDTH - 16
    row = 22.0 if devices <= 24 else max(6.0, 528.0 / devices)
    legend_y = top + 12
    split = any(r["op"] == "W" for r in records)
    x_pos = left
    for op, name in (("F", "forward"), ("B", "backward (input gradient)" if split else "backward"), ("W", "weight gradient")):
        if op == "W" and not split:
            continue
        canvas.rect(x_pos, legend_y - 9, 10, 10, FILLS[op][0])
        canvas.text(x_pos + 14, legend_y, name, size=11)
        x_pos += 28 + text_width(name, 11)
    canvas.text(x_pos, legend_y, "white: idle (bubble)", size=11, fill="#555555")
    plot_top = legend_y + 12
    x = Scale(0, makespan, left, right)
    for r in records:
        device, op, chunk = int(r["device"]), str(r["op"]), int(r["chunk"])  # type: ignore[call-overload]
        y = plot_top + (device - 1) * row
        x0, x1 = x(float(r["start"])), x(float(r["end"]))  # type: ignore[arg-type]
        shades = FILLS[op]
        canvas.rect(x0, y + 1, x1 - x0, row - 2, shades[(chunk - 1) % len(shades)], stroke="white",
                    tooltip=f"{op} micro-batch {r['micro_batch']} on device {device}")  # fmt: skip
        label = str(r["micro_batch"])
        if row >= 14 and x1 - x0 >= text_width(label, 11) + 4:
            canvas.text((x0 + x1) / 2, y + row / 2 + 4, label, size=11, anchor="middle", fill="white" if (chunk - 1) % len(shades) == 0 else "black")
    every = max(1, math.ceil(14 / row))
    for device in range(1, devices + 1):
        if (device - 1) % every == 0:
            canvas.text(left - 6, plot_top + (device - 1) * row + row / 2 + 4, f"GPU {device}", size=11, anchor="end")
    bottom = plot_top + devices * row
    canvas.line([(left, bottom + 2), (right, bottom + 2)], stroke="#000000")
    for tick in linear_ticks(0, makespan, 8):
        px = x(tick)
        canvas.line([(px, bottom + 2), (px, bottom + 6)], stroke="#000000")
        canvas.text(px, bottom + 19, format_quantity(tick, "s", significant=4), size=11, anchor="middle")
    canvas.text(right, bottom + 36, "time", size=11, anchor="end")
    canvas.height = bottom + 44
    return Figure("timeline", title, canvas)


# ---------------------------------------------------------------------------------------------
# Axis pieces


def _legend(canvas: Canvas, items: list[tuple[str, str, str]], left: float, y: float) -> float:
    """Legend entries (kind "box", "dash", "line" or "dot"; colour; label) in rows that wrap at the
    canvas's width; returns the baseline of the last row."""
    x = left
    for kind, colour, label in items:
        needed = 18 + text_width(label, 11)
        if x > left and x + needed > canvas.width - 12:
            x, y = left, y + 17
        if kind == "box":
            canvas.rect(x, y - 9, 10, 10, colour)
        elif kind == "dot":
            canvas.circle(x + 5, y - 4, 3.5, colour)
        else:
            canvas.line([(x - 2, y - 4), (x + 12, y - 4)], stroke=colour, width=1.6, dashed=kind == "dash")
        canvas.text(x + 16, y, label, size=11, fill=colour if kind == "dash" else "#000000")
        x += needed + 20
    return y


def _frame(canvas: Canvas, left: float, right: float, top: float, bottom: float) -> None:
    canvas.line([(left, top), (left, bottom), (right, bottom)], stroke="#000000", width=1)


def _xtick(canvas: Canvas, px: float, bottom: float, label: str, grid_top: float) -> None:
    canvas.line([(px, grid_top), (px, bottom)], stroke="#e6e6e6", width=0.8)
    canvas.line([(px, bottom), (px, bottom + 4)], stroke="#000000")
    canvas.text(px, bottom + 17, label, size=11, anchor="middle")


def _ytick(canvas: Canvas, py: float, left: float, label: str, grid_right: float) -> None:
    canvas.line([(left, py), (grid_right, py)], stroke="#e6e6e6", width=0.8)
    canvas.line([(left - 4, py), (left, py)], stroke="#000000")
    canvas.text(left - 7, py + 4, label, size=11, anchor="end")
