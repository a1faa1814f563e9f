"""A figure as a list of drawing primitives, written out as SVG or as a TikZ picture.

One layout, two outputs: every figure of parcalc.render.figures is laid out once, in pixels with
y pointing down (as SVG has it), and the same primitives become an SVG document (standalone files,
Markdown reports) or a `tikzpicture` (PDF reports, through pdfLaTeX with the tikz package the
preamble already loads). No plotting library: a one-liner that draws nothing imports none of this,
and a drawing one costs a few milliseconds of string building.

TikZ output scales the picture to TIKZ_WIDTH_CM; text keeps its size relative to the drawing
(a 11 px label on a 640 px canvas is 11 x 15 cm / 640 px = 7.3 pt) but no smaller than
TIKZ_MIN_PT, so canvases that go to PDF are laid out with no text under MIN_TEXT_PX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FONT_FAMILY = "Helvetica, Arial, sans-serif"
TIKZ_WIDTH_CM = 15.0
PT_PER_CM = 72.27 / 2.54
# Text of this many px is 7 pt in TikZ on a canvas 640 px wide (the footnote size of a 10-pt body):
# the layouts below use no smaller text.
MIN_TEXT_PX = 11.0
# No text in a PDF's picture under this size: \footnotesize of a 10-pt document (8 pt), the least
# the reports use for their own text; 11 px on the 640-px canvases would be 7.3 pt, so TikZ sets
# the small labels a little larger than the drawing's scale (TeX's sans serif is narrower than the
# Helvetica the layouts assume, so they keep their room).
TIKZ_MIN_PT = 8.0
# Mean advance of a Helvetica character, as a share of the font size (for laying out labels; the
# widest common glyphs are ~0.9, digits 0.56): enough to keep labels apart, not a measurement.
CHAR_WIDTH = 0.58
# Circles drawn by one TikZ path: TeX keeps a path in main memory until it is drawn, and one path
# of 7,000 points exceeded it (TeX capacity exceeded, main memory size=5000000).
CIRCLES_PER_PATH = 250


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    fill: str
    stroke: str = "none"
    tooltip: str = ""


@dataclass(frozen=True)
class Line:
    points: tuple[tuple[float, float], ...]
    stroke: str = "#000000"
    width: float = 1.0
    dashed: bool = False


@dataclass(frozen=True)
class Circle:
    x: float
    y: float
    radius: float
    fill: str
    stroke: str = "none"
    tooltip: str = ""


@dataclass(frozen=True)
class Text:
    x: float
    y: float  # the baseline
    text: str
    size: float = 12.0
    anchor: str = "start"  # start, middle, end
    bold: bool = False
    fill: str = "#000000"
    rotate: bool = False  # a quarter turn anticlockwise (a y-axis label)


@dataclass
class Canvas:
    """Primitives in drawing order on a width x height pixel area (y down)."""

    width: float
    height: float
    title: str = ""
    items: list[Rect | Line | Circle | Text] = field(default_factory=list)

    def rect(self, x: float, y: float, width: float, height: float, fill: str, stroke: str = "none", tooltip: str = "") -> None:
        self.items.append(Rect(x, y, max(width, 0.0), max(height, 0.0), fill, stroke, tooltip))

    def line(self, points: list[tuple[float, float]], stroke: str = "#000000", width: float = 1.0, dashed: bool = False) -> None:
        self.items.append(Line(tuple(points), stroke, width, dashed))

    def circle(self, x: float, y: float, radius: float, fill: str, stroke: str = "none", tooltip: str = "") -> None:
        self.items.append(Circle(x, y, radius, fill, stroke, tooltip))

    def text(self, x: float, y: float, text: str, size: float = 12.0, anchor: str = "start", bold: bool = False,
             fill: str = "#000000", rotate: bool = False) -> None:  # fmt: skip
        self.items.append(Text(x, y, text, max(size, MIN_TEXT_PX), anchor, bold, fill, rotate))

    def of(self, kind: type) -> list:
        """The items of one kind (tests count bars and points with it)."""
        return [item for item in self.items if isinstance(item, kind)]


def escape(text: str) -> str:
    """Text for XML character data (what xml.sax.saxutils.escape does, without importing xml.sax)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def quoteattr(text: str) -> str:
    """A double-quoted XML attribute value."""
    return '"' + escape(text).replace('"', "&quot;") + '"'


def text_width(text: str, size: float) -> float:
    """Estimated width in px of `text` at `size` px."""
    return len(text) * size * CHAR_WIDTH


# ---------------------------------------------------------------------------------------------
# SVG


def to_svg(canvas: Canvas) -> str:
    """The canvas as a standalone SVG document (UTF-8 text)."""
    w, h = f"{canvas.width:.0f}", f"{canvas.height:.0f}"
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family={quoteattr(FONT_FAMILY)}>',
        f"<title>{escape(canvas.title)}</title>",
        '<rect x="0" y="0" width="100%" height="100%" fill="white"/>',
    ]
    for item in canvas.items:
        out.append(_svg_item(item))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _svg_item(item: Rect | Line | Circle | Text) -> str:
    if isinstance(item, Rect):
        stroke = f' stroke="{item.stroke}" stroke-width="0.8"' if item.stroke != "none" else ""
        body = f"<title>{escape(item.tooltip)}</title>" if item.tooltip else ""
        attrs = f'x="{item.x:.2f}" y="{item.y:.2f}" width="{item.width:.2f}" height="{item.height:.2f}" fill="{item.fill}"{stroke}'
        return f'<rect class="bar" {attrs}>{body}</rect>' if body else f"<rect {attrs}/>"
    if isinstance(item, Line):
        points = " ".join(f"{x:.2f},{y:.2f}" for x, y in item.points)
        dash = ' stroke-dasharray="5,4"' if item.dashed else ""
        return f'<polyline points="{points}" fill="none" stroke="{item.stroke}" stroke-width="{item.width:g}"{dash}/>'
    if isinstance(item, Circle):
        stroke = f' stroke="{item.stroke}" stroke-width="1"' if item.stroke != "none" else ""
        body = f"<title>{escape(item.tooltip)}</title>" if item.tooltip else ""
        return (f'<circle class="point" cx="{item.x:.2f}" cy="{item.y:.2f}" r="{item.radius:g}" fill="{item.fill}"{stroke}>'
                f"{body}</circle>")  # fmt: skip
    weight = ' font-weight="bold"' if item.bold else ""
    turn = f' transform="rotate(-90 {item.x:.2f} {item.y:.2f})"' if item.rotate else ""
    return (f'<text x="{item.x:.2f}" y="{item.y:.2f}" font-size="{item.size:g}" text-anchor="{item.anchor}" '
            f'fill="{item.fill}"{weight}{turn}>{escape(item.text)}</text>')  # fmt: skip


# ---------------------------------------------------------------------------------------------
# TikZ


def to_tikz(canvas: Canvas, width_cm: float = TIKZ_WIDTH_CM) -> str:
    """The canvas as a `tikzpicture` (LaTeX text; needs tikz and xcolor), width_cm wide.

    Colours are given inline ({rgb,255:red,..}), text is escaped by parcalc.render.tex_text.tex_escape,
    so nothing in a label can reach TeX as a command."""
    from parcalc.render.tex_text import tex_escape

    scale = width_cm / canvas.width

    def at(x: float, y: float) -> str:
        return f"({x * scale:.3f},{(canvas.height - y) * scale:.3f})"

    out = [r"\begin{tikzpicture}[x=1cm,y=1cm,every node/.style={inner sep=0pt,outer sep=0pt}]",
           # the canvas's own bounding box, so that the picture keeps its margins
           rf"\path[use as bounding box] (0,0) rectangle ({canvas.width * scale:.3f},{canvas.height * scale:.3f});"]  # fmt: skip
    items = canvas.items
    index = 0
    while index < len(items):
        item = items[index]
        index += 1
        if isinstance(item, Circle):
            # a run of like circles (a scatter's thousands of points) as one path: TeX parses one
            # command's options instead of one per point (search.pdf built in 40 s, now in a few)
            run = [item]
            while len(run) < CIRCLES_PER_PATH and index < len(items) and isinstance(items[index], Circle) and _same_circle(items[index], item):  # type: ignore[arg-type]
                run.append(items[index])  # type: ignore[arg-type]
                index += 1
            out += _pgf_circles(run, scale, canvas.height)
            continue
        if isinstance(item, Rect):
            if item.width <= 0 or item.height <= 0:
                continue
            draw = f",draw={_colour(item.stroke)},line width=0.3pt" if item.stroke != "none" else ""
            out.append(rf"\fill[fill={_colour(item.fill)}{draw}] {at(item.x, item.y + item.height)} rectangle {at(item.x + item.width, item.y)};")
        elif isinstance(item, Line):
            dash = ",dashed" if item.dashed else ""
            path = " -- ".join(at(x, y) for x, y in item.points)
            out.append(rf"\draw[draw={_colour(item.stroke)},line width={item.width * scale * PT_PER_CM:.2f}pt{dash}] {path};")
        else:
            size = max(item.size * scale * PT_PER_CM, TIKZ_MIN_PT)
            anchor = {"start": "base west", "middle": "base", "end": "base east"}[item.anchor]
            font = rf"\fontsize{{{size:.1f}}}{{{size * 1.2:.1f}}}\selectfont\sffamily" + (r"\bfseries" if item.bold else "")
            rotate = ",rotate=90" if item.rotate else ""
            out.append(rf"\node[anchor={anchor},text={_colour(item.fill)},font={font}{rotate}] at {at(item.x, item.y)} {{{tex_escape(item.text)}}};")
    out.append(r"\end{tikzpicture}")
    return "\n".join(out)


def _pgf_circles(run: list[Circle], scale: float, height: float) -> list[str]:
    """Like circles through PGF's basic layer (\\pgfpathcircle with \\pgfqpoint in pt): TikZ's path
    parser took most of a 50-second build of a search's 8,000 points; this is several times faster.
    One line per circle (TeX's input buffer is finite)."""
    first = run[0]
    pt = scale * PT_PER_CM
    lines = [r"\begin{pgfscope}"]
    if first.fill != "none":
        lines.append(rf"\definecolor{{pcfill}}{{RGB}}{{{_rgb(first.fill)}}}\pgfsetfillcolor{{pcfill}}")
    if first.stroke != "none":
        lines.append(rf"\definecolor{{pcstroke}}{{RGB}}{{{_rgb(first.stroke)}}}\pgfsetstrokecolor{{pcstroke}}\pgfsetlinewidth{{0.4pt}}")
    for c in run:
        lines.append(rf"\pgfpathcircle{{\pgfqpoint{{{c.x * pt:.2f}pt}}{{{(height - c.y) * pt:.2f}pt}}}}{{{c.radius * pt:.2f}pt}}")
    use = ",".join(u for u, on in (("fill", first.fill != "none"), ("stroke", first.stroke != "none")) if on)
    lines += [rf"\pgfusepath{{{use}}}", r"\end{pgfscope}"]
    return lines


def _rgb(hex_colour: str) -> str:
    """'#1f5fa8' -> '31,95,168'."""
    if hex_colour in ("white", "black"):
        return "255,255,255" if hex_colour == "white" else "0,0,0"
    value = hex_colour.lstrip("#")
    return ",".join(str(int(value[i : i + 2], 16)) for i in (0, 2, 4))


def _same_circle(a: Circle, b: Circle) -> bool:
    return (a.fill, a.stroke, a.radius) == (b.fill, b.stroke, b.radius)


def _colour(hex_colour: str) -> str:
    """'#1f5fa8' -> '{rgb,255:red,31;green,95;blue,168}' (xcolor's inline form)."""
    if hex_colour in ("white", "black"):
        return hex_colour
    value = hex_colour.lstrip("#")
    r, g, b = (int(value[i : i + 2], 16) for i in (0, 2, 4))
    return f"{{rgb,255:red,{r};green,{g};blue,{b}}}"


# ---------------------------------------------------------------------------------------------
# Axes


def nice_step(span: float, target: int = 6) -> float:
    """A round step (1, 2 or 5 x 10^k) giving about `target` ticks over `span` (> 0)."""
    rough = span / target
    power = 10 ** math.floor(math.log10(rough))
    for factor in (1, 2, 5, 10):
        if factor * power >= rough:
            return factor * power
    return 10 * power


def linear_ticks(low: float, high: float, target: int = 6) -> list[float]:
    """Round values from the first multiple of the step at or above `low` to `high`."""
    if not high > low:
        return [low]
    step = nice_step(high - low, target)
    first = math.ceil(low / step - 1e-9)
    ticks = []
    k = first
    while k * step <= high * (1 + 1e-9) + 1e-300:
        ticks.append(k * step)
        k += 1
    return ticks


def log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten from low to high (both > 0)."""
    first, last = math.floor(math.log10(low) + 1e-9), math.ceil(math.log10(high) - 1e-9)
    within = [10.0**k for k in range(first, last + 1) if low * (1 - 1e-9) <= 10.0**k <= high * (1 + 1e-9)]
    if len(within) >= 3:
        return within
    # under three decades: 1, 2 and 5 of each
    return [m * 10.0**k for k in range(first, last + 1) for m in (1, 2, 5) if low * (1 - 1e-9) <= m * 10.0**k <= high * (1 + 1e-9)]


@dataclass(frozen=True)
class Scale:
    """A value axis mapped to pixels: linear or logarithmic, increasing from `start` to `end` px."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            a, b, v = math.log10(self.low), math.log10(self.high), math.log10(max(value, self.low * 1e-3))
        else:
            a, b, v = self.low, self.high, value
        share = 0.0 if b == a else (v - a) / (b - a)
        return self.start + share * (self.end - self.start)
