"""How a Result shows itself in Jupyter (its hooks _repr_markdown_ / _repr_html_): loading this module hands these
functions to parcalc.derivation.PRESENTERS, so that the data layer imports no renderer (a renderer imports the data, not
the other way round). parcalc.api loads it; the renderers themselves load when a result is shown. Result.to_dict needs
none: its plain form is the data's own (parcalc.derivation).
"""

from __future__ import annotations

from parcalc.derivation import PRESENTERS, Result


def result_markdown(result: Result) -> str:
    from parcalc.render.markdown import render_markdown

    return render_markdown(result)


def result_html(result: Result) -> str:
    from parcalc.render.html import render_html

    return render_html(result)


PRESENTERS.update(markdown=result_markdown, html=result_html)
