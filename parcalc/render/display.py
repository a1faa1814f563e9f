"""How a Result shows itself (Result.to_dict, and the Jupyter hooks _repr_markdown_ / _repr_html_):
the one place the data layer (parcalc.derivation) reaches up into the renderers, when asked.

The renderers import parcalc.derivation for its types only (under TYPE_CHECKING), so this reach
up is no import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parcalc.derivation import Result


def result_dict(result: Result) -> dict[str, object]:
    """`--format json`'s document as Python values: numbers in base units, null for a non-finite one."""
    import json

    from parcalc.render.json_out import render_json

    return json.loads(render_json(result))


def result_markdown(result: Result) -> str:
    from parcalc.render.markdown import render_markdown

    return render_markdown(result)


def result_html(result: Result) -> str:
    from parcalc.render.html import render_html

    return render_html(result)
