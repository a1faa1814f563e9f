"""How a Result shows itself (Result.to_dict, and the Jupyter hooks _repr_markdown_ / _repr_html_):
loading this module hands these functions to parcalc.derivation.PRESENTERS, so that the data layer
imports no renderer (a renderer imports the data, not the other way round). parcalc.results loads it:
every Result a client gets comes through there. The renderers themselves load when a result is shown.
"""

from __future__ import annotations

from parcalc.derivation import PRESENTERS, Result


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


PRESENTERS.update(dict=result_dict, markdown=result_markdown, html=result_html)
