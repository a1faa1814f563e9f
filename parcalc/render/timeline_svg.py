"""A pipeline timeline as a standalone SVG file, written as text (no plotting library).

One row per device (numbered from 1), a box per operation from its start to its end, labelled
with its micro-batch number (from 1) where the box is wide enough; forward, backward and
weight-gradient passes in blue, orange and green, later model chunks in lighter shades (as in
Narayanan et al. 2021 fig. 4); blank space is the bubble. Every box carries a <title> tooltip
with its exact times.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

from parcalc.core.pipeline_sim import B, F, Timeline, W
from parcalc.units import format_quantity

PLOT_WIDTH = 1000.0  # px the makespan spans
ROW_HEIGHT = 26.0
ROW_GAP = 6.0
LEFT = 80.0
TOP = 56.0
# fill per op; chunk k uses entry k modulo the length, darker first
FILLS = {
    F: ("#1f5fa8", "#6fa8dc", "#9fc5e8", "#cfe2f3"),
    B: ("#e07b00", "#f6b26b", "#f9cb9c", "#fce5cd"),
    W: ("#2e7d32", "#81c784", "#a5d6a7", "#c8e6c9"),
}
NAMES = {F: "forward", B: "backward", W: "weight gradient"}
FONT = "font-family=\"Helvetica, Arial, sans-serif\""


def timeline_svg(timeline: Timeline, title: str = "") -> str:
    """The timeline as an SVG document (UTF-8 text)."""
    makespan = timeline.makespan or 1.0
    scale = PLOT_WIDTH / makespan
    rows = timeline.stages
    plot_height = rows * (ROW_HEIGHT + ROW_GAP)
    height = TOP + plot_height + 70
    width = LEFT + PLOT_WIDTH + 30
    split = any(e.op == W for e in timeline.events)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<title>{escape(title or 'Pipeline timeline')}</title>",
        '<rect x="0" y="0" width="100%" height="100%" fill="white"/>',
    ]
    if title:
        out.append(f'<text x="{LEFT:.0f}" y="22" {FONT} font-size="15" font-weight="bold">{escape(title)}</text>')
    out += _legend(split, timeline.chunks)
    for device in range(rows):
        y = TOP + device * (ROW_HEIGHT + ROW_GAP)
        out.append(f'<text x="{LEFT - 8:.0f}" y="{y + ROW_HEIGHT / 2 + 4:.1f}" {FONT} font-size="12" text-anchor="end">Device {device + 1}</text>')
        out.append(f'<line x1="{LEFT:.0f}" y1="{y + ROW_HEIGHT:.1f}" x2="{LEFT + PLOT_WIDTH:.0f}" y2="{y + ROW_HEIGHT:.1f}" stroke="#dddddd" stroke-width="0.5"/>')
    for event in timeline.events:
        y = TOP + event.device * (ROW_HEIGHT + ROW_GAP)
        x0, x1 = LEFT + event.start * scale, LEFT + event.end * scale
        shades = FILLS[event.op]
        fill = shades[event.chunk % len(shades)]
        chunk = f", chunk {event.chunk + 1}" if timeline.chunks > 1 else ""
        tip = (f"{NAMES[event.op]} of micro-batch {event.micro_batch + 1}{chunk} on device {event.device + 1}: "
               f"{format_quantity(event.start, 's')} to {format_quantity(event.end, 's')}")  # fmt: skip
        out.append(
            f'<rect x="{x0:.3f}" y="{y:.1f}" width="{max(x1 - x0, 0.0):.3f}" height="{ROW_HEIGHT:.1f}" '
            f'fill="{fill}" stroke="white" stroke-width="0.6"><title>{escape(tip)}</title></rect>'
        )
        label = str(event.micro_batch + 1)
        if x1 - x0 >= 7.0 * len(label) + 2:
            colour = "white" if event.chunk % len(shades) == 0 else "black"
            out.append(f'<text x="{(x0 + x1) / 2:.3f}" y="{y + ROW_HEIGHT / 2 + 4:.1f}" {FONT} font-size="11" '
                       f'text-anchor="middle" fill="{colour}">{label}</text>')  # fmt: skip
    out += _axis(makespan, scale, TOP + plot_height)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(split: bool, chunks: int) -> list[str]:
    items = [(F, "forward"), (B, "backward (input gradient)" if split else "backward")] + ([(W, "weight gradient")] if split else [])
    out, x = [], LEFT
    for op, name in items:
        out.append(f'<rect x="{x:.0f}" y="32" width="12" height="12" fill="{FILLS[op][0]}"/>')
        out.append(f'<text x="{x + 16:.0f}" y="42" {FONT} font-size="12">{escape(name)}</text>')
        x += 30 + 7 * len(name)
    note = "white: idle (bubble)" + ("; lighter shade: later model chunk" if chunks > 1 else "")
    out.append(f'<text x="{x:.0f}" y="42" {FONT} font-size="12" fill="#555555">{escape(note)}</text>')
    return out


def _axis(makespan: float, scale: float, y: float) -> list[str]:
    step = _tick_step(makespan)
    out = [f'<line x1="{LEFT:.0f}" y1="{y + 4:.1f}" x2="{LEFT + PLOT_WIDTH:.0f}" y2="{y + 4:.1f}" stroke="black" stroke-width="1"/>']
    ticks = int(makespan / step + 1e-9)
    for k in range(ticks + 1):
        t = k * step
        x = LEFT + t * scale
        out.append(f'<line x1="{x:.3f}" y1="{y + 4:.1f}" x2="{x:.3f}" y2="{y + 9:.1f}" stroke="black" stroke-width="1"/>')
        out.append(f'<text x="{x:.3f}" y="{y + 22:.1f}" {FONT} font-size="11" text-anchor="middle">{escape(format_quantity(t, "s", significant=4))}</text>')
    out.append(f'<text x="{LEFT + PLOT_WIDTH:.0f}" y="{y + 40:.1f}" {FONT} font-size="12" text-anchor="end">time</text>')
    return out


def _tick_step(span: float) -> float:
    """A round step (1, 2 or 5 x 10^k) giving about 8 to 16 ticks."""
    rough = span / 10
    power = 10 ** math.floor(math.log10(rough))
    for factor in (1, 2, 5, 10):
        if factor * power >= rough:
            return factor * power
    return 10 * power

