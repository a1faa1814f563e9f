"""The commands as Python functions: `parcalc.memory(...)`, `parcalc.fit(...)`, ...

Each function takes its command's flags as keyword arguments with Python names (`--seq-len` is
`seq_len`, `--sequence-parallel` is `sequence_parallel=True`, a repeatable flag such as
`--offload` takes a list) and returns the `parcalc.Result` the command shows: its inputs,
derivations (formula, substituted values, value in base units, source), tables and verdicts.
A Result displays as a Markdown / HTML page in Jupyter and converts with `to_dict()` to what
`--format json` prints.

    >>> import parcalc
    >>> r = parcalc.memory(model="gpt3-175b", tp=8, pp=8, dp=16, zero=1, sequence_parallel=True,
    ...                    recompute="selective", gpu="a100-sxm4-80gb")
    >>> r.derivation("total").value          # bytes per GPU

Values are given as on the command line (numbers or text with units: `capacity="80GiB"`), and are
checked as the CLI checks them: bad input raises parcalc.errors.InputError (a ValueError) with
the message the CLI prints after `Error:`, an infeasible request InfeasibleError, an unknown
keyword TypeError. The command runs through parcalc.results.run.run_command, the runner of run
files, sweeps and worksheets, which calls the command's module in parcalc.results (the code the
command line runs too), without Click: `import parcalc` and a library call load no Typer.

Where a command has parallel degrees (memory, fit, comm_volume, flops), `layout=` takes them as one
value, the `parcalc.Layout` that the core computes with, instead of the flags one by one:

    >>> r = parcalc.memory(model="gpt3-175b", layout=parcalc.Layout(tp=8, pp=8, dp=16, zero=1, sequence_parallel=True),
    ...                    recompute="selective", gpu="a100-sxm4-80gb")

is the call above with tp=8, pp=8, dp=16, zero=1, sequence_parallel=True (parcalc.results.layout_flags says
which flags each field sets); `fit(layout=...)` pins one configuration and takes --gpus from it. A flag
the layout sets given beside it is an InputError naming both.

The functions are made on first use from the commands' own flags, as written to
parcalc/results/signatures.json from the commands (parcalc.signatures; a test holds the
two equal), so that each takes exactly its command's flags and says what they mean in its
docstring (`help(parcalc.fit)`), and `import parcalc` stays as cheap as before. `peak_flops` here is the command; the name
`parcalc.peak_flops` is the formula (parcalc.core.peak_flops.peak_flops), as it was before the commands
joined the library.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

# A Result from here shows itself in Jupyter (its _repr_html_ / _repr_markdown_) through the renderers' presenters
# (parcalc.derivation.PRESENTERS), which parcalc.render.display hands in when loaded: a few lines that load no renderer
# until a result is shown.
import parcalc.render.display  # noqa: F401

if TYPE_CHECKING:
    from parcalc.derivation import Result
    from parcalc.sweeps import Sweep

# Python name -> command (a subcommand as "group name").
COMMAND_FUNCTIONS: dict[str, str] = {
    "peak_flops": "peak-flops",
    "intensity": "intensity",
    "comm_volume": "comm-volume",
    "bubble": "bubble",
    "memory": "memory",
    "flops": "flops",
    "fit": "fit",
    "scaling": "scaling",
    "analyze": "analyze",
    "presets_list": "presets list",
    "presets_show": "presets show",
}
# Flags that choose where and how a result is printed: a function returns the Result instead.
_NOT_ARGUMENTS = ("fmt", "output", "help", "config")

__all__ = [*COMMAND_FUNCTIONS, "run", "sweep"]


def run(command: str, **inputs: Any) -> Result:
    """Run `command` (a name as on the command line: "comm-volume", "presets show") with `inputs`
    (flag names, dashes or underscores) and return its Result; `run("memory", tp=8)` is
    `memory(tp=8)`."""
    from parcalc.results.run import run_command

    return run_command(command, _with_layout(command, dict(inputs), f"{command}()"), f"{command}()")


def sweep(command: str, vary: Mapping[str, Sequence[Any]], progress: Callable[[int, int], None] | None = None,
          **inputs: Any) -> Sweep:  # fmt: skip
    """Run `command` at every point of the grid `vary` ({flag: values}) with `inputs`, as
    `parcalc sweep` does: a `parcalc.sweeps.Sweep` whose `rows` each hold the point, a status
    (ok, infeasible, error), the reason, and the Result; `records()` gives one flat dict per row
    (e.g. for pandas.DataFrame), `to_csv()` and `to_dict()` what the CLI writes.

        >>> s = parcalc.sweep("fit", {"tp": [1, 2, 4, 8], "pp": [1, 2, 4]}, model="gpt3-175b",
        ...                   gpu="a100-sxm4-80gb", gpus=64, batch=64, micro_batch=1)
    """
    from parcalc.sweeps import run_sweep

    grid = {key: tuple(values) if isinstance(values, (list, tuple)) else (values,) for key, values in vary.items()}
    return run_sweep(command, inputs, grid, f"sweep({command!r})", progress=progress)


_MADE: dict[str, Callable[..., Result]] = {}


def __getattr__(name: str) -> Any:
    if name in COMMAND_FUNCTIONS:
        if name not in _MADE:
            _MADE[name] = command_function(name, COMMAND_FUNCTIONS[name])
        return _MADE[name]
    raise AttributeError(f"module 'parcalc.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def command_function(name: str, command_name: str) -> Callable[..., Result]:
    """A function that runs `command_name` with its flags as keyword arguments: its signature
    and docstring are read from the command's parameters."""
    from parcalc.results.layout_flags import LAYOUT_FLAGS
    from parcalc.runfile import signature as command_signature

    command = command_signature(command_name)
    params = [p for p in command.params if p.name not in _NOT_ARGUMENTS]
    parameters = [_parameter(p) for p in sorted(params, key=_positional_first)]
    if command_name in LAYOUT_FLAGS:  # layout=parcalc.Layout(...): the degree, ZeRO, SP and schedule flags from one value
        parameters.append(inspect.Parameter("layout", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Layout | None"))
    signature = inspect.Signature(parameters)

    def call(*args: Any, **kwargs: Any) -> Result:
        return _call(name, command_name, signature, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = "parcalc"
    call.__doc__ = _docstring(command, command_name, name, params)
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


def _positional_first(param: Any) -> int:
    return 0 if _is_argument(param) else 1


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _parameter(param: Any) -> inspect.Parameter:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if _is_argument(param) else inspect.Parameter.KEYWORD_ONLY
    default = param.default
    if isinstance(default, (list, tuple)):
        default = list(default) or None
    default = getattr(default, "value", default)  # an Enum as its value, as typed
    if getattr(param, "multiple", False):
        annotation = "list[str] | None"
    elif getattr(param, "is_flag", False):
        annotation = "bool | None" if default is None else "bool"
    else:
        annotation = "str | float | None"
    if default is None and _is_argument(param) and param.required:
        default = inspect.Parameter.empty
    return inspect.Parameter(param.name, kind, default=default, annotation=annotation)


def _call(name: str, command_name: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Result:
    from parcalc.results.run import run_command

    for key in kwargs:
        if key not in signature.parameters:
            import difflib

            close = difflib.get_close_matches(key, list(signature.parameters), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; see help(parcalc.{name})"
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}{hint}")
    bound = signature.bind_partial(*args, **kwargs)  # too many positional arguments: TypeError
    inputs = dict(bound.arguments)
    return run_command(command_name, _with_layout(command_name, inputs, f"{name}()"), f"{name}()")


def _with_layout(command_name: str, inputs: dict[str, Any], label: str) -> dict[str, Any]:
    """`inputs` with a `layout` (a parcalc.Layout) read into the flags it sets (parcalc.results.layout_flags)."""
    layout = inputs.pop("layout", None)
    if layout is None:
        return inputs
    from parcalc.results.layout_flags import layout_inputs

    return {**inputs, **layout_inputs(command_name, layout, inputs, f"{label}: layout=")}


def _docstring(command: Any, command_name: str, name: str, params: list[Any]) -> str:
    summary = inspect.cleandoc(command.help or "").strip()
    lines = [summary, "", f"The flags of `parcalc {command_name}`, as keyword arguments with Python names; returns a",
             "parcalc.Result (`.to_dict()` is its --format json). Bad input raises parcalc.errors.InputError.", "",
             "Arguments:"]  # fmt: skip
    from parcalc.results.layout_flags import LAYOUT_FLAGS

    if command_name in LAYOUT_FLAGS:
        fields = ", ".join(f"--{f.replace('_', '-')}" for f in LAYOUT_FLAGS[command_name])
        lines.append(f"    layout (parcalc.Layout): sets {fields}{' and --gpus' if command_name == 'fit' else ''} from one value "
                     "(parcalc.results.layout_flags); not together with any of those flags")  # fmt: skip
    for param in params:
        flag = next((o for o in getattr(param, "opts", ()) if o.startswith("--")), None) or str(getattr(param, "metavar", None) or param.name).upper()
        text = " ".join((getattr(param, "help", None) or "").split())
        lines.append(f"    {param.name} ({flag}): {text}" if text else f"    {param.name} ({flag})")
    example = _example(command, command_name, name)
    if example:
        lines += ["", "Example (the first of the command's examples):", f"    >>> {example}"]
    return "\n".join(lines) + "\n"


def _example(command: Any, command_name: str, name: str) -> str:
    """The command's first example in its --help as a call of this function."""
    import shlex

    from parcalc.runfile import input_slots

    prefix = f"parcalc {command_name} "
    line = next((ln.strip() for ln in (command.epilog or "").splitlines() if ln.strip().startswith(prefix)), "")
    if not line or line.endswith("\\"):
        return ""
    try:
        words = shlex.split(line[len(prefix):])
    except ValueError:
        return ""
    slots = input_slots(command)
    positional: list[str] = []
    named: dict[str, Any] = {}
    index = 0
    while index < len(words):
        word = words[index]
        slot = slots.get(word[2:]) if word.startswith("--") else None
        if word.startswith("-") and slot is None:
            return ""  # -o, -f: not a function argument
        if slot is None:
            positional.append(repr(word))
        elif getattr(slot.param, "is_flag", False):
            named[slot.param.name] = slot.positive
        elif index + 1 < len(words):
            index += 1
            if getattr(slot.param, "multiple", False):
                named.setdefault(slot.param.name, []).append(words[index])
            else:
                named[slot.param.name] = words[index]
        index += 1
    parts = positional + [f"{key}={value!r}" for key, value in named.items() if key not in _NOT_ARGUMENTS]
    return f"parcalc.{name}({', '.join(parts)})"
