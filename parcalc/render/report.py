"""Worksheet reports: the solved questions as a LaTeX document or Markdown, from templates.

Everything printed comes from the Results the commands returned; figures are drawn from the
same numbers (roofline from the intensity results, timeline from the bubble simulator's table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.render.latex import Latex, result_context
from parcalc.render.latex_math import tex_number, tex_quantity, tex_unit
from parcalc.units import format_number, split_prefixed

if TYPE_CHECKING:
    from parcalc.derivation import Derivation, Result
    from parcalc.worksheet import SolvedQuestion, SolvedWorksheet  # what a report renders: the worksheet solved

TIMELINE_TABLE = "timeline"


def answer_text(derivation: Derivation, units: str = "both") -> str:
    """An answer in words: exact bytes and FLOP with separators, then GB and/or GiB."""
    value, unit = derivation.value, derivation.unit
    if unit == "B":
        si, si_unit = split_prefixed(value, "B")
        iec, iec_unit = split_prefixed(value, "B", iec=True)
        forms = {"si": [f"{si} {si_unit}"], "iec": [f"{iec} {iec_unit}"], "both": [f"{si} {si_unit}", f"{iec} {iec_unit}"]}
        return f"{format_number(value)} bytes (" + " = ".join(forms[units]) + ")"
    from parcalc.render.values import format_value

    rounded = _rounded(value, unit)
    return format_value(value, unit) + (f" ≈ {rounded[0]} {rounded[1]}".rstrip() if rounded else "")


def _rounded(value: float, unit: str) -> tuple[str, str] | None:
    """The value to two decimals, as homework answers state it, when that drops digits."""
    if unit in ("fraction", "s", ""):
        return None
    mantissa, prefixed = split_prefixed(value, unit) if unit in ("FLOP", "FLOP/s", "B/s", "Hz") else (f"{value:.8g}", unit)
    if "." not in mantissa or len(mantissa.split(".")[1]) <= 2 or "e" in mantissa:
        return None
    return f"{float(mantissa):.2f}", prefixed


def answer_tex(derivation: Derivation, units: str = "both") -> Latex:
    value, unit = derivation.value, derivation.unit
    if unit == "B":
        exact = tex_number(format_number(value)) + r"\ \text{bytes}"
        si, si_unit = split_prefixed(value, "B")
        iec, iec_unit = split_prefixed(value, "B", iec=True)
        forms = {"si": [(si, si_unit)], "iec": [(iec, iec_unit)], "both": [(si, si_unit), (iec, iec_unit)]}
        chain = "".join(f" {'=' if _exact(m, u, value) else chr(92) + 'approx'} {tex_number(m)}{tex_unit(u)}" for m, u in forms[units])
        return Latex(f"${exact}{chain}$")
    rounded = _rounded(value, unit)
    approx = rf" \approx {rounded[0]}{tex_unit(rounded[1])}" if rounded else ""
    return Latex(f"${tex_quantity(value, unit)}{approx}$")


def _exact(mantissa: str, unit: str, value: float) -> bool:
    from parcalc.units import Dimension, parse_quantity

    return parse_quantity(f"{mantissa}{unit}", Dimension.BYTES, "answer") == value


def roofline_figure(results: Sequence[Result]) -> dict[str, Any] | None:
    """Points (intensity, attainable) of each intensity result under the GPU's two roofs."""
    points: list[dict[str, Any]] = []
    peak = bandwidth = None
    for index, result in enumerate(results, start=1):
        keys = {d.key for d in result.derivations}
        if not {"intensity", "ridge", "attainable"} <= keys:
            continue
        ridge = result.derivation("ridge")
        peak, bandwidth = ridge.term("peak").value, ridge.term("bw").value
        points.append({"label": str(index), "x": result.derivation("intensity").value,
                       "y": result.derivation("attainable").value / 1e12, "title": result.title})  # fmt: skip
    if not points or peak is None or bandwidth is None:
        return None
    ridge_x = peak / bandwidth
    xs = [p["x"] for p in points] + [ridge_x]
    x_min = 10 ** math.floor(math.log10(min(xs) / 2))
    x_max = 10 ** math.ceil(math.log10(max(xs) * 2))
    return {
        "points": points,
        "peak": peak / 1e12,
        "bandwidth": bandwidth / 1e12,
        "ridge": ridge_x,
        "x_min": x_min,
        "x_max": x_max,
        "y_min": bandwidth * x_min / 1e12,
        "y_max": peak / 1e12 * 3,
    }


def timeline_figure(results: Sequence[Result]) -> dict[str, Any] | None:
    """Boxes of the pipeline timeline from a bubble result's event table."""
    for result in results:
        for table in result.tables:
            if table.key != TIMELINE_TABLE:
                continue
            events: list[dict[str, Any]] = table.records()  # cells of the timeline's known columns
            if not events:
                return None
            makespan = max(float(e["end"]) for e in events)
            devices = sorted({int(e["device"]) for e in events})
            width = 13.5  # cm of page the makespan spans: with the GPU labels within the 16.4-cm line, never shrunk
            boxes = [
                {
                    "x0": float(e["start"]) / makespan * width,
                    "x1": float(e["end"]) / makespan * width,
                    "y": len(devices) - 1 - devices.index(int(e["device"])),
                    "op": str(e["op"]).upper(),
                    "label": str(e.get("micro_batch", "")),
                }
                for e in events
            ]
            return {"boxes": boxes, "devices": devices, "rows": len(devices), "width": width}
    return None


def scaling_figure(results: Sequence[Result]) -> dict[str, Any] | None:
    """Speedup and efficiency against N from a `parcalc scaling` result's points table (the points with a step time)."""
    for result in results:
        if result.command != "scaling":
            continue
        table = next(t for t in result.tables if t.key == "scaling")
        records: list[dict[str, Any]] = [r for r in table.records() if r["speedup"] is not None]
        if not records:
            return None
        n_ref = float(records[0]["gpus"]) / float(records[0]["speedup"])  # S(N_ref) = 1
        points = [{"n": int(r["gpus"]), "s": float(r["speedup"]), "e": float(r["efficiency"]),
                   "ideal": int(r["gpus"]) / n_ref} for r in records]  # fmt: skip
        knee = next((d for d in result.derivations if d.key == "knee"), None)
        threshold = knee.term("E_min").value if knee is not None else _knee_threshold(result)
        at = next((p for p in points if knee is not None and p["n"] == int(knee.value)), None)
        return {"points": points, "xticks": ",".join(str(p["n"]) for p in points), "threshold": threshold, "knee": at}
    return None


def _knee_threshold(result: Result) -> float:
    """The --knee threshold the result used (its setting "knee"; every scaling result carries it)."""
    return float(dict(result.settings).get("knee", "0.8"))
DETAILS = ("brief", "full")


def brief_context(solved: SolvedQuestion) -> dict[str, Any]:
    """A question as a homework answer: the answers' own derivations (formula, substitution, value),
    each after the derivations of its result that give its inputs (issue 28: question 1.2's brief
    form showed I = F / Q with F and Q as bare inputs, not the F = 2mkn and Q the homework asks
    for), the remaining inputs once each, and their sources as numbered notes of the question."""
    from parcalc.render.latex import SourceNotes, derivation_steps, heading_tex, inline_lines, is_wide, term_row

    notes = SourceNotes()
    inputs, seen = [], set()
    derivations = []
    several = len({answer.calculation for answer in solved.answers}) > 1
    for answer in solved.answers:
        chain = [*feeding(answer.derivation, solved, answer.calculation), answer.derivation]
        derived = {d.key for d in chain[:-1]}
        for derivation in chain:
            for term in derivation.inputs:
                if derivation is answer.derivation and term.key in derived:
                    continue  # shown as its own derivation just above
                if (term.latex, term.value, term.unit) not in seen:
                    seen.add((term.latex, term.value, term.unit))
                    row = term_row(term, notes)
                    if several:  # the same symbol in each calculation: say which one
                        row["description"] = f"{term.description} (calculation {answer.calculation})"
                    inputs.append(row)
            label = answer.label if derivation is answer.derivation else (
                f"{answer.context}: {derivation.label}" if answer.context else derivation.label)  # fmt: skip
            steps = derivation_steps(derivation)
            derivations.append({"label": heading_tex(label, (derivation,)), "steps": steps, "note": notes.number(derivation.source),
                                "wide": is_wide(steps), "lines": inline_lines(steps)})  # fmt: skip
    return {"inputs": inputs, "derivations": derivations, "notes": notes.entries()}


def feeding(derivation: Derivation, solved: SolvedQuestion, calculation: int) -> list[Derivation]:
    """The derivations of the answer's own result that compute its inputs (a formula, not a value
    taken as it is), in the result's order: I = F / Q is fed by F = 2mkn and Q = 2(mk + kn + mn)."""
    if not 1 <= calculation <= len(solved.results):
        return []
    wanted = {t.key for t in derivation.inputs}
    return [d for d in solved.results[calculation - 1].derivations
            if d.key in wanted and d is not derivation and d.formula_text() != d.symbol]  # fmt: skip


ASIDE = "Aside, not asked"


def asides(solved: SolvedQuestion) -> tuple[bool, ...]:
    """Per result of the question: whether its calculation is an aside (`answers: []`), context the
    question did not ask for, which the full write-up labels as such."""
    calculations = solved.question.calculations
    return tuple(i < len(calculations) and calculations[i].aside for i in range(len(solved.results)))


def _result_entry(result: Result, aside: bool) -> dict[str, Any]:
    entry = result_context(result, skip_tables=(TIMELINE_TABLE,))
    if aside:
        entry["title"] = f"{ASIDE}: {entry['title']}"
    return entry


def question_context(solved: SolvedQuestion) -> dict[str, Any]:
    question = solved.question
    drawers = {"roofline": roofline_figure, "timeline": timeline_figure, "scaling": scaling_figure}
    drawing = drawers[question.figure](solved.results) if question.figure in drawers else None
    figure = {"kind": question.figure, **drawing} if drawing else None
    return {
        "id": question.id,
        "title": question.title,
        "prose": question.prose,
        "method": question.method,
        "convention": question.convention,
        "results": [_result_entry(r, aside) for r, aside in zip(solved.results, asides(solved), strict=True)],
        "answers": [
            {"label": a.label, "tex": answer_tex(a.derivation, question.units),
             "text": answer_text(a.derivation, question.units), "value": a.derivation.value, "unit": a.derivation.unit}
            for a in solved.answers
        ],  # fmt: skip
        "figure": figure,
        "brief": brief_context(solved),
    }


def report_context(solved: SolvedWorksheet, detail: str = "full") -> dict[str, Any]:
    sheet = solved.worksheet
    return {
        "detail": detail,
        "title": sheet.title,
        "author": sheet.author,
        "course": sheet.course,
        "date": sheet.date,
        "intro": sheet.intro,
        "questions": [question_context(q) for q in solved.questions],
    }


def render_report_latex(solved: SolvedWorksheet, template_dirs: Sequence[Path] = (), detail: str = "full") -> str:
    """The write-up as LaTeX; detail "brief" keeps per question the question, the method, the answers'
    derivations with their inputs and numbered sources, and the boxed answers; "full" adds every
    derivation, table, figure, verdict and assumption of the commands run."""
    from parcalc.render.latex import render_template

    return render_template("report.tex.j2", report_context(solved, detail), template_dirs)


def question_figure(solved: SolvedQuestion) -> Any:
    """The question's picture (parcalc.render.figures.Figure) for a Markdown report: its roofline or
    its pipeline timeline, drawn from the same results as the PDF's TikZ figure; None without one."""
    from parcalc.render.figures import timeline_figure, worksheet_roofline

    question = solved.question
    if question.figure == "roofline":
        return worksheet_roofline(solved.results, f"Roofline: {question.id} {question.title}")
    if question.figure == "timeline":
        return next((f for f in (timeline_figure(r) for r in solved.results) if f is not None), None)
    return None


def figure_file_name(stem: str, question_id: str, key: str) -> str:
    """NAME-QUESTION-KIND.svg, the question id reduced to characters safe in a file name and a link."""
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", question_id).strip("-.") or "q"
    return f"{stem}-{safe}-{key}.svg"


def render_report_markdown(solved: SolvedWorksheet, template_dirs: Sequence[Path] = (), detail: str = "full",
                           figure_files: dict[str, str] | None = None) -> str:  # fmt: skip
    """Markdown through a template with Jinja's ordinary delimiters and no LaTeX escaping.

    figure_files: question id -> the SVG file written beside the report for it (linked)."""
    from parcalc.render.latex import render_in, sandboxed_environment
    from parcalc.render.markdown import derivation_markdown, table_markdown

    environment = sandboxed_environment(template_dirs)  # templates are code: see sandboxed_environment
    environment.filters["md"] = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    questions = []
    for solved_question in solved.questions:
        context = question_context(solved_question)
        context["figure_file"] = (figure_files or {}).get(solved_question.question.id)
        if detail == "brief":  # the answers' own derivations after those that give their inputs, no tables
            context["derivation_blocks"] = ["\n".join(derivation_markdown(d)) for a in solved_question.answers
                                            for d in (*feeding(a.derivation, solved_question, a.calculation), a.derivation)]  # fmt: skip
            context["table_blocks"] = []
        else:
            context["derivation_blocks"] = [  # an aside's first derivation says so
                (f"*{ASIDE}: {r.title}*\n\n" if aside and j == 0 else "") + "\n".join(derivation_markdown(d))
                for r, aside in zip(solved_question.results, asides(solved_question), strict=True)
                for j, d in enumerate(r.derivations)
            ]
            context["table_blocks"] = [
                "\n".join(table_markdown(t)) for r in solved_question.results for t in r.tables if t.key != TIMELINE_TABLE
            ]
        questions.append(context)
    context = {**report_context(solved, detail), "questions": questions}
    return render_in(environment, "report.md.j2", context)
