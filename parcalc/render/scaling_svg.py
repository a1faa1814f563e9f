"""A scaling curve as a standalone SVG file, written as text (no plotting library).

Two panels over the same x axis, GPUs N on a base-2 log scale: the speedup S(N) on a log scale
beside the ideal N / N_ref (dashed), and the parallel efficiency E(N) on a linear scale with the
knee threshold (dotted) and the knee circled. Every point carries a <title> tooltip with its
values. Only the points with a step time are drawn (the others have none).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

if TYPE_CHECKING:
    from parcalc.derivation import Table


WIDTH = 720.0
LEFT = 70.0
RIGHT = 30.0
TOP = 50.0
PANEL = 220.0  # px height of each panel
GAP = 60.0
FONT = 'font-family="Helvetica, Arial, sans-serif"'
BLUE = "#1f5fa8"
ORANGE = "#e07b00"
TITLE_CHAR = 8.6  # px per character of the 14 px bold title (Helvetica's widest average), so that it is never cut


def scaling_svg(table: Table, title: str, threshold: float) -> str:
    """The points table of `parcalc scaling` (columns gpus, speedup, efficiency) as an SVG document."""
    records = [r for r in table.records() if r.get("speedup") is not None]
    width, height = max(WIDTH, LEFT + TITLE_CHAR * len(title) + RIGHT), TOP + 2 * PANEL + GAP + 60  # the title on one line
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">',
        f"<title>{escape(title)}</title>",
        '<rect x="0" y="0" width="100%" height="100%" fill="white"/>',
        f'<text x="{LEFT:.0f}" y="24" {FONT} font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    if not records:
        out.append(f'<text x="{LEFT:.0f}" y="{TOP + 40:.0f}" {FONT} font-size="13">No GPU count of the list runs and fits.</text>')
        return "\n".join([*out, "</svg>"]) + "\n"
    ns = [int(r["gpus"]) for r in records]  # type: ignore[call-overload]
    n_ref = ns[0] / float(records[0]["speedup"])  # type: ignore[arg-type]  # S(N_ref) = 1
    lo, hi = math.log2(min(ns)), math.log2(max(ns))
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    pad = 0.04 * (hi - lo)  # the first and last points off the frame
    lo, hi = lo - pad, hi + pad
    plot_w = width - LEFT - RIGHT

    def x(n: float) -> float:
        return LEFT + (math.log2(n) - lo) / (hi - lo) * plot_w

    speedups = [float(r["speedup"]) for r in records]  # type: ignore[arg-type]
    ideal_top = max(ns) / n_ref
    s_lo = 2 ** math.floor(math.log2(min(min(speedups), 1.0)))
    s_hi = 2 ** math.ceil(math.log2(max(max(speedups), ideal_top, 2.0)))
    top1 = TOP

    def y_s(s: float) -> float:
        return top1 + PANEL - (math.log2(s) - math.log2(s_lo)) / (math.log2(s_hi) - math.log2(s_lo)) * PANEL

    top2 = TOP + PANEL + GAP
    effs = [float(r["efficiency"]) for r in records]  # type: ignore[arg-type]
    e_hi = max(1.0, max(effs)) * 1.05

    def y_e(e: float) -> float:
        return top2 + PANEL - e / e_hi * PANEL

    out += _frame(top1, plot_w, "speedup S (log)")
    out += _frame(top2, plot_w, "efficiency E")
    for n in ns:  # x grid and labels
        for top in (top1, top2):
            out.append(f'<line x1="{x(n):.1f}" y1="{top:.1f}" x2="{x(n):.1f}" y2="{top + PANEL:.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x(n):.1f}" y="{top2 + PANEL + 16:.1f}" {FONT} font-size="11" text-anchor="middle">{n}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{top2 + PANEL + 36:.1f}" {FONT} font-size="12" text-anchor="middle">GPUs N (log scale)</text>')
    k = math.log2(s_lo)
    while k <= math.log2(s_hi) + 1e-9:  # y grid of the speedup panel: powers of two
        s = 2**k
        out.append(f'<line x1="{LEFT:.0f}" y1="{y_s(s):.1f}" x2="{LEFT + plot_w:.0f}" y2="{y_s(s):.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{LEFT - 6:.0f}" y="{y_s(s) + 4:.1f}" {FONT} font-size="11" text-anchor="end">{s:g}</text>')
        k += 1 if math.log2(s_hi) - math.log2(s_lo) <= 12 else 2
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line x1="{LEFT:.0f}" y1="{y_e(tick):.1f}" x2="{LEFT + plot_w:.0f}" y2="{y_e(tick):.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{LEFT - 6:.0f}" y="{y_e(tick) + 4:.1f}" {FONT} font-size="11" text-anchor="end">{tick:.0%}</text>')
    # the ideal speedup N / N_ref, dashed, from the first point to the last
    out.append(f'<line x1="{x(ns[0]):.1f}" y1="{y_s(ns[0] / n_ref):.1f}" x2="{x(ns[-1]):.1f}" y2="{y_s(ns[-1] / n_ref):.1f}" '
               'stroke="#888888" stroke-dasharray="6 4"/>')  # fmt: skip
    out.append(f'<text x="{x(ns[-1]) - 4:.1f}" y="{y_s(ns[-1] / n_ref) - 6:.1f}" {FONT} font-size="11" fill="#666666" text-anchor="end">ideal N/N_ref</text>')
    out.append(f'<line x1="{LEFT:.0f}" y1="{y_e(threshold):.1f}" x2="{LEFT + plot_w:.0f}" y2="{y_e(threshold):.1f}" '
               f'stroke="{ORANGE}" stroke-dasharray="2 3"/>')  # fmt: skip
    out.append(f'<text x="{LEFT + plot_w - 4:.0f}" y="{y_e(threshold) - 5:.1f}" {FONT} font-size="11" fill="{ORANGE}" text-anchor="end">knee threshold {threshold:.0%}</text>')
    out.append(_polyline([(x(n), y_s(s)) for n, s in zip(ns, speedups, strict=True)], BLUE))
    out.append(_polyline([(x(n), y_e(e)) for n, e in zip(ns, effs, strict=True)], BLUE))
    knee = next((n for n, e in zip(ns, effs, strict=True) if e < threshold), None)
    for r, n, s, e in zip(records, ns, speedups, effs, strict=True):
        tip = escape(f"N = {n}: speedup {s:.4g}, efficiency {e:.2%}, step {float(r['t_step']):.4g} s")  # type: ignore[arg-type]
        for cy in (y_s(s), y_e(e)):
            out.append(f'<circle cx="{x(n):.1f}" cy="{cy:.1f}" r="3.5" fill="{BLUE}"><title>{tip}</title></circle>')
    if knee is not None:
        e = effs[ns.index(knee)]
        out.append(f'<circle cx="{x(knee):.1f}" cy="{y_e(e):.1f}" r="8" fill="none" stroke="{ORANGE}" stroke-width="2"/>')
        out.append(f'<text x="{x(knee) + 10:.1f}" y="{y_e(e) + 16:.1f}" {FONT} font-size="11" fill="{ORANGE}">knee: N = {knee}</text>')
    return "\n".join([*out, "</svg>"]) + "\n"


def _frame(top: float, plot_w: float, label: str) -> list[str]:
    return [f'<rect x="{LEFT:.0f}" y="{top:.1f}" width="{plot_w:.1f}" height="{PANEL:.0f}" fill="none" stroke="#999999"/>',
            f'<text x="18" y="{top + PANEL / 2:.1f}" {FONT} font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 18 {top + PANEL / 2:.1f})">{escape(label)}</text>']  # fmt: skip


def _polyline(points: list[tuple[float, float]], colour: str) -> str:
    coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in points)
    return f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>'
