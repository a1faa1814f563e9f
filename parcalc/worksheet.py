"""Worksheets: a YAML list of questions, each answered by running parcalc commands.

A worksheet names, for each question, the commands to run and their inputs with the same
names as the CLI flags (`fma-per-clock: 512`), and which results are the answers. Running it
invokes each command exactly as a user would (same parsing, same presets, same errors) and
collects the `Result`s, which the report renders; the report never recomputes anything.

Schema (unknown keys are errors naming the file, the question and the key):

    kind: worksheet
    title: ...                      # required
    author: ... / course: ... / date: ... / intro: ...   # optional text
    questions:
      - id: "1.1"                   # required
        title: ...                  # required
        prose: ...                  # the question as asked (required)
        method: ...                 # one sentence on how it is answered (optional)
        convention: payload | per-device | both     # which traffic convention it asks for
        units: si | iec | both      # GB or GiB in the answer summary (default both)
        figure: roofline | timeline | scaling | none
        calculations:
          - command: peak-flops     # any parcalc calculation command
            inputs: {clock: 1.41GHz, sms: 108, fma-per-clock: 512, dtype: tf32}
            answers: [peak_flops]   # result keys that answer the question (default: all)
            # answers: [] -- none: the calculation is context the question did not ask for (a
            #   figure's data, an assumed case), shown in the full write-up as a labelled aside
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parcalc.derivation import Derivation, Result
from parcalc.errors import InputError, ParcalcError, PresetError, shown
from parcalc.files import beside

_TOP_KEYS = ("kind", "title", "author", "course", "date", "intro", "questions")
_QUESTION_KEYS = ("id", "title", "prose", "method", "convention", "units", "figure", "calculations")
_CALCULATION_KEYS = ("command", "inputs", "answers", "label")
_CHOICES = {
    "convention": ("payload", "per-device", "both"),
    "units": ("si", "iec", "both"),
    "figure": ("roofline", "timeline", "scaling", "none"),
}
# Commands a worksheet may run; `report` itself and `presets` are not calculations.
CALCULATION_COMMANDS = ("peak-flops", "intensity", "comm-volume", "bubble", "memory", "flops", "fit", "analyze", "scaling")


class WorksheetError(PresetError):
    """A worksheet that cannot be read or run; the message names file, question and key."""


@dataclass(frozen=True)
class Calculation:
    command: str
    inputs: Mapping[str, Any]
    answers: tuple[str, ...] = ()
    label: str = ""
    aside: bool = False  # `answers: []`: context, not an answer (its derivations labelled as an aside)

    def argv(self) -> list[str]:
        """The command line a user would type for these inputs."""
        args: list[str] = []
        for key, value in self.inputs.items():
            flag = f"--{key}"
            if value is True:
                args.append(flag)
            elif value is False or value is None:
                continue
            elif isinstance(value, list):
                for item in value:
                    args += [flag, str(item)]
            else:
                args += [flag, str(value)]
        return args


@dataclass(frozen=True)
class Question:
    id: str
    title: str
    prose: str
    calculations: tuple[Calculation, ...]
    method: str = ""
    convention: str = ""
    units: str = "both"
    figure: str = "none"


@dataclass(frozen=True)
class Worksheet:
    path: Path
    title: str
    questions: tuple[Question, ...]
    author: str = ""
    course: str = ""
    date: str = ""
    intro: str = ""


@dataclass(frozen=True)
class Answer:
    question_id: str
    derivation: Derivation
    context: str = ""  # the calculation's label, when a question has several
    calculation: int = 0  # 1-based index of the calculation of its question that gave it

    @property
    def label(self) -> str:
        return f"{self.context}: {self.derivation.label}" if self.context else self.derivation.label


@dataclass(frozen=True)
class SolvedQuestion:
    question: Question
    results: tuple[Result, ...]
    answers: tuple[Answer, ...] = field(default=())


@dataclass(frozen=True)
class SolvedWorksheet:
    worksheet: Worksheet
    questions: tuple[SolvedQuestion, ...]


# ---------------------------------------------------------------------------------------------
# Reading


def load_worksheet(name_or_path: str, extra_dirs: Sequence[Path | str] = ()) -> Worksheet:
    """A packaged or user worksheet by name, or a YAML file by path."""
    from parcalc.files import check_name_length
    from parcalc.preset_files import Category, find
    from parcalc.strict_yaml import read_validated

    candidate = Path(name_or_path)
    check_name_length(candidate, "worksheet")  # ENAMETOOLONG from is_file() was a traceback
    try:
        is_file = candidate.is_file()
    except OSError:  # e.g. a directory on the way that cannot be searched
        is_file = False
    if candidate.suffix.lower() in (".yaml", ".yml") or is_file:
        if not is_file:
            raise InputError(f"worksheet: no such file {shown(name_or_path)}")
        path = candidate
    else:
        path = find(Category.WORKSHEETS, name_or_path, extra_dirs).path
    return read_validated(path, lambda document: worksheet_from_document(path, document))


def _fail(path: Path, where: str, message: str) -> WorksheetError:
    return WorksheetError(f"{path}: {where}: {message}")


def _only(path: Path, where: str, data: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in data:
        if key not in allowed:
            hint = difflib.get_close_matches(str(key), allowed, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise _fail(path, where, f"unknown key '{key}'{suggestion}; allowed: {', '.join(allowed)}")


# Fields that may hold paragraphs; every other text is one line (a title, an id, a date).
_MULTI_LINE = ("prose", "method", "intro")


def _text(path: Path, where: str, data: Mapping[str, Any], key: str, required: bool = False) -> str:
    import datetime

    from parcalc.preset_files import control_character

    value = data.get(key)
    if value is None:
        if required:
            raise _fail(path, where, f"key '{key}' is missing")
        return ""
    if isinstance(value, datetime.date):  # YAML reads `date: 2026-11-22` as a date: print it as written
        return value.isoformat()
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise _fail(path, where, f"key '{key}' must be text")
    text = str(value).strip()
    found = control_character(text, allow_newlines=True)
    if found:  # worksheet text reaches the terminal (errors, Markdown on stdout): no ANSI escapes
        raise _fail(path, where, f"key '{key}': control character {found} in the text; write plain text")
    if key not in _MULTI_LINE:
        # A one-line field with a line break (a blank line ends a TeX argument: \title, \section) is
        # joined into one line, as it reads
        text = " ".join(text.split())
    return text


def worksheet_from_document(path: Path, data: Mapping[str, Any]) -> Worksheet:
    _only(path, "top level", data, _TOP_KEYS)
    if data.get("kind") != "worksheet":
        raise _fail(path, "top level", f"key 'kind' must be 'worksheet', got {shown(data.get('kind'))}")
    questions = data.get("questions")
    if not isinstance(questions, list) or not questions:
        raise _fail(path, "top level", "key 'questions' must be a non-empty list")
    parsed = tuple(_question(path, index, q) for index, q in enumerate(questions, start=1))
    ids = [q.id for q in parsed]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise _fail(path, "questions", f"duplicate question id(s): {', '.join(duplicates)}")
    return Worksheet(
        path=path,
        title=_text(path, "top level", data, "title", required=True),
        author=_text(path, "top level", data, "author"),
        course=_text(path, "top level", data, "course"),
        date=_text(path, "top level", data, "date"),
        intro=_text(path, "top level", data, "intro"),
        questions=parsed,
    )


def _question(path: Path, index: int, data: Any) -> Question:
    where = f"question {index}"
    if not isinstance(data, dict):
        raise _fail(path, where, "must be a mapping")
    qid = _text(path, where, data, "id", required=True)
    where = f"question {qid}"
    _only(path, where, data, _QUESTION_KEYS)
    choices = {}
    for key, allowed in _CHOICES.items():
        value = _text(path, where, data, key)
        if value and value not in allowed:
            raise _fail(path, where, f"key '{key}': {shown(value)} is not one of {', '.join(allowed)}")
        choices[key] = value
    calculations = data.get("calculations")
    if not isinstance(calculations, list) or not calculations:
        raise _fail(path, where, "key 'calculations' must be a non-empty list")
    return Question(
        id=qid,
        title=_text(path, where, data, "title", required=True),
        prose=_text(path, where, data, "prose", required=True),
        method=_text(path, where, data, "method"),
        convention=choices["convention"],
        units=choices["units"] or "both",
        figure=choices["figure"] or "none",
        calculations=tuple(_calculation(path, f"{where}, calculation {i}", c) for i, c in enumerate(calculations, 1)),
    )


def _calculation(path: Path, where: str, data: Any) -> Calculation:
    if not isinstance(data, dict):
        raise _fail(path, where, "must be a mapping")
    _only(path, where, data, _CALCULATION_KEYS)
    command = _text(path, where, data, "command", required=True)
    if command not in CALCULATION_COMMANDS:
        hint = difflib.get_close_matches(command, CALCULATION_COMMANDS, n=1)
        suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise _fail(path, where, f"key 'command': unknown command {shown(command)}{suggestion}")
    inputs = data.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise _fail(path, where, "key 'inputs' must be a mapping of flag names to values")
    for key, value in inputs.items():
        if isinstance(value, dict):
            raise _fail(path, where, f"key 'inputs.{key}' must be a value or a list, not a mapping")
        if key in ("format", "output", "f", "o"):
            raise _fail(path, where, f"key 'inputs.{key}': the report chooses the output, leave it out")
        if key in ("help", "h"):  # `help: true` printed the command's help into the report
            raise _fail(path, where, f"key 'inputs.{key}': not a calculation input, leave it out")
        if key == "presets":
            raise _fail(path, where, "key 'inputs.presets': give the directory to `parcalc report --presets DIR`, which reaches every calculation")
    answers = data.get("answers") or []
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise _fail(path, where, "key 'answers' must be a list of result names")
    aside = data.get("answers") == []  # given, and empty: no answer at all (absent: every result)
    return Calculation(command, dict(inputs), tuple(answers), _text(path, where, data, "label"), aside)


# ---------------------------------------------------------------------------------------------
# Running


def run_calculation(calculation: Calculation, extra_dirs: Sequence[Path | str] = (), base: Path | None = None) -> Result:
    """Run one command with the worksheet's flags, as a user would type them, and return its Result
    (parcalc.results.run, without Click).

    `extra_dirs` are `parcalc report --presets` directories: they reach the command as its own
    --presets, so a worksheet's presets are found where the report's user said (before, only the
    PARCALC_PRESETS variable reached the calculations).

    An input named after a positional argument (`file:` of `analyze FILE`) is passed in its place;
    a relative path there is read from `base`, the worksheet's directory, when it is found there,
    so that a worksheet and its data travel together (packaged ones too)."""
    from parcalc.results.run import run_command
    from parcalc.runfile import signature

    command = signature(calculation.command)
    _check_inputs(calculation, command)
    positional = [p.name for p in command.params if getattr(p, "param_type_name", "") == "argument"]
    options = {k: v for k, v in calculation.inputs.items() if k not in positional}
    inputs: dict[str, Any] = {name: beside(base, str(calculation.inputs[name])) for name in positional if name in calculation.inputs}
    inputs.update(_typed_flags(calculation.command, command, Calculation(calculation.command, options).argv()))
    if any(p.name == "presets" for p in command.params):  # bubble reads no presets
        inputs["presets"] = [*inputs.get("presets", ()), *(str(d) for d in extra_dirs)]
    return run_command(calculation.command, inputs, "", None)


def _typed_flags(command_name: str, command: Any, args: list[str]) -> dict[str, Any]:
    """A command line of flags (old and Megatron-LM spellings translated: parcalc.flags) as the
    flag names and values a run file would hold: a switch as true / false, a repeatable flag a list."""
    declared = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    if any(arg[:2] == "--" and arg.split("=", 1)[0] not in declared for arg in args):
        from parcalc.flags import translate

        args = translate(command_name, args, declared)
    by_flag = {opt: (param, True) for param in command.params for opt in param.opts}
    by_flag.update({opt: (param, False) for param in command.params for opt in param.secondary_opts})
    out: dict[str, Any] = {}
    index = 0
    while index < len(args):
        name, eq, value = args[index].partition("=")
        param, positive = by_flag[name]  # every key was checked by _check_inputs
        if param.is_flag:
            out[param.name] = positive
        else:
            if not eq:
                index += 1
                value = args[index]
            if param.multiple:
                out.setdefault(param.name, []).append(value)
            else:
                out[param.name] = value
        index += 1
    return out


def _check_inputs(calculation: Calculation, command: Any) -> None:
    """Each key of `inputs` names an option of the command (click's "No such option: --x" did not
    say which key of the worksheet, nor what the command takes)."""
    options = sorted({opt[2:] for param in command.params for opt in getattr(param, "opts", ()) if opt.startswith("--")})
    options += [p.name for p in command.params if getattr(p, "param_type_name", "") == "argument"]
    declared = {"--" + option for option in options}
    for key in calculation.inputs:
        if str(key) in options:
            continue
        from parcalc.flags import canonical

        if canonical(calculation.command, "--" + str(key), declared) is not None:  # an old or Megatron-LM spelling
            continue
        close = difflib.get_close_matches(str(key), options, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"inputs: {calculation.command} has no option {shown('--' + str(key))}{hint}; "
                         f"its options: {', '.join(options)}")  # fmt: skip


def solve(worksheet: Worksheet, extra_dirs: Sequence[Path | str] = ()) -> SolvedWorksheet:
    """Run every calculation of every question (with `extra_dirs` as --presets); errors name the
    file, question and command."""
    solved = []
    for question in worksheet.questions:
        results, answers = [], []
        for index, calculation in enumerate(question.calculations, start=1):
            where = f"question {question.id}, calculation {index} ({calculation.command})"
            try:
                result = run_calculation(calculation, extra_dirs, worksheet.path.parent)
            except ParcalcError as error:
                raise _fail(worksheet.path, where, str(error)) from None
            results.append(result)
            answers += _answers(worksheet.path, where, question.id, calculation, result, index)
        solved.append(SolvedQuestion(question, tuple(results), tuple(answers)))
    return SolvedWorksheet(worksheet, tuple(solved))


def _answers(path: Path, where: str, question_id: str, calculation: Calculation, result: Result, index: int) -> list[Answer]:
    if calculation.aside:
        return []
    if not calculation.answers:
        return [Answer(question_id, d, calculation.label, index) for d in result.derivations]
    known = [d.key for d in result.derivations]
    answers = []
    for key in calculation.answers:
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise _fail(path, where, f"key 'answers': no result named {shown(key)}{suggestion}; results: {', '.join(known)}")
        answers.append(Answer(question_id, result.derivation(key), calculation.label, index))
    return answers
