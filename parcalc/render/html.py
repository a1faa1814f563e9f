"""HTML for notebooks: the Markdown renderer's page (parcalc.render.markdown) as HTML.

Jupyter shows `Result._repr_html_` in preference to `_repr_markdown_`, so both must show the same
thing: here the Markdown is converted by markdown-it-py (CommonMark with tables; rich, a
dependency of parcalc, already requires it) with raw HTML off, so a preset's text cannot inject
markup. The `$...$` / `$$...$$` LaTeX spans are taken out before the conversion and put back
HTML-escaped but otherwise untouched: Markdown would read their `\\\\` and `_` as escapes and
emphasis. Jupyter typesets them with MathJax as it does in Markdown cells.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parcalc.derivation import Result


# $$ ... $$ over lines first, then $...$ within a line (a lone $ in text is left alone)
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)


def render_html(result: Result) -> str:
    from parcalc.render.markdown import render_markdown

    return markdown_to_html(render_markdown(result))


def markdown_to_html(text: str) -> str:
    from markdown_it import MarkdownIt

    spans: list[str] = []

    def hold(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"PARCALCMATH{len(spans) - 1}X"

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(_MATH.sub(hold, text))
    body = re.sub(r"PARCALCMATH(\d+)X", lambda m: html.escape(spans[int(m.group(1))], quote=False), body)
    return f'<div class="parcalc-result">\n{body}</div>\n'
