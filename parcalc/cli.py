"""The `parcalc` command: a thin Typer layer over the library.

Each command parses its flags, loads presets, makes one core call and hands the result to one
renderer. Errors from the core (ParcalcError) and from flag parsing become one line on stderr,
`Error: ...`, with exit code 2 for bad input and 1 for an infeasible request, a failed render or
an output that cannot be written. Ctrl-C exits 130; an exception nobody anticipated (a bug of
parcalc) is one line, "internal error: ...", and exit 70, its traceback only with PARCALC_DEBUG=1.

Commands are registered by name in COMMANDS and imported only when invoked (or when the
top-level help lists them), so that a one-liner pays for its own command only.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from parcalc.errors import InputError, ParcalcError
from parcalc.frozen import frozen
from parcalc.messages import DEBUG_VAR, internal_error_line, one_line, unknown_command

if TYPE_CHECKING:
    from typer.models import ParamMeta


@frozen
class CommandSpec:
    """Where a command lives: `function` is a command function, or `app` a Typer sub-app."""

    module: str
    function: str = ""
    app: str = ""


COMMANDS: dict[str, CommandSpec] = {
    "peak-flops": CommandSpec("parcalc.commands.peak_flops", function="peak_flops"),
    "intensity": CommandSpec("parcalc.commands.intensity", function="intensity"),
    "comm-volume": CommandSpec("parcalc.commands.comm_volume", function="comm_volume"),
    "bubble": CommandSpec("parcalc.commands.bubble", function="bubble"),
    "memory": CommandSpec("parcalc.commands.memory", function="memory"),
    "flops": CommandSpec("parcalc.commands.flops", function="flops"),
    "fit": CommandSpec("parcalc.commands.fit", function="fit"),
    "presets": CommandSpec("parcalc.commands.presets", app="presets_app"),
    "calibrate": CommandSpec("parcalc.commands.calibrate", app="calibrate_app"),
    "report": CommandSpec("parcalc.commands.report", function="report"),
    "analyze": CommandSpec("parcalc.commands.analyze", function="analyze"),
    "scaling": CommandSpec("parcalc.commands.scaling", function="scaling"),
    "sweep": CommandSpec("parcalc.commands.sweep", function="sweep"),
    "schema": CommandSpec("parcalc.commands.schema", function="schema"),
}


# `parcalc --help`'s one line per command: a whole sentence that fits beside the name at 80 columns
# (click cut each docstring's first sentence at ~45 characters, mid-phrase). At most SUMMARY_CHARS.
SUMMARIES: dict[str, str] = {
    "analyze": "Speedup and efficiency from measured step timings.",
    "bubble": "Pipeline bubble of a schedule, closed form and simulated.",
    "calibrate": "Measure this machine and write GPU and link presets.",
    "comm-volume": "Bytes and time of collectives, one or a whole iteration.",
    "fit": "What fits on N GPUs, and how fast, per strategy.",
    "flops": "Training FLOPs per iteration and per token.",
    "intensity": "Arithmetic intensity of a GEMM or a layer, on a roofline.",
    "memory": "Per-GPU memory of training, term by term.",
    "peak-flops": "Peak FLOP/s of a GPU from clock, SMs and FMA rate.",
    "presets": "List and show GPU, link, model and worksheet presets.",
    "report": "Answer a worksheet and write it up as PDF or Markdown.",
    "scaling": "Speedup and efficiency as the GPU count grows.",
    "schema": "Print the JSON Schema of a command's output.",
    "sweep": "Run one command over a grid of flag values.",
}
SUMMARY_CHARS = 60  # 80 columns less the indent, the longest name (comm-volume) and the gaps


def _click_message(error: Exception) -> str:
    """Click's message, the same on every click the package allows: an unknown option is said
    "No such option: --x" by the click typer vendors (0.26+) and "No such option '--x'. Did you mean
    '--y'?" by click 8.2+, so parcalc says it one way."""
    if type(error).__name__ == "NoSuchOption" and getattr(error, "option_name", None):
        possibilities = sorted(getattr(error, "possibilities", None) or ())
        hint = f" (did you mean {', '.join(possibilities)}?)" if possibilities else ""
        return f"No such option: {error.option_name}{hint}"  # type: ignore[attr-defined]
    return str(error.format_message())  # type: ignore[attr-defined]


def _click_exception() -> type[Exception]:
    """Click's base exception, whether typer vendors click (0.26+) or depends on it."""
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == "ClickException")


def load_command(name: str) -> Any:
    """Build the click command for one registered name."""
    spec = COMMANDS[name]
    module = importlib.import_module(spec.module)
    if spec.app:
        command = _get_command(getattr(module, spec.app))
    else:
        single = typer.Typer(rich_markup_mode=None, add_completion=False)
        single.command(name, epilog=getattr(module, "EXAMPLES", None))(getattr(module, spec.function))
        command = _get_command(single)
    command.name = name
    if name not in NO_CONFIG:
        _give_config_option(command, name)
    if name in SUMMARIES:
        command.short_help = SUMMARIES[name]
    _accept_vocabulary(command, name, getattr(module, "BARE_OPTIONS", {}))
    from parcalc.help_panels import group_help

    group_help(command)  # --help by section, examples first (typer's rich_help_panel, in click's plain help)
    if COMPLETE_VAR in os.environ:  # only while the shell asks for completions: see parcalc.completion
        from parcalc.completion import complete_preset_names

        complete_preset_names(command)
    return command


def leaf_command(command_name: str) -> Any:
    """The click command of `command_name`: "memory", or "presets show" for a group's command (the
    library's signatures are written from them: parcalc.signatures)."""
    from parcalc.errors import shown

    group, _, sub = command_name.partition(" ")
    if group not in COMMANDS:
        raise InputError(unknown_command(group, sorted(COMMANDS)))
    command = load_command(group)
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        if sub:
            raise InputError(f"{group} has no subcommands; got {shown(command_name)}")
        return command
    if sub not in subcommands:
        raise InputError(f"{group}: name one of its commands ({', '.join(sorted(subcommands))}), e.g. '{group} {sorted(subcommands)[0]}'")
    return subcommands[sub]


# Commands without --config: sweep reads a run file as its argument.
NO_CONFIG = ("sweep",)


CONFIG_HELP = ("Read flags from a run file (YAML or .toml; - for stdin): keys are flag names (seq-len: 4096, "
               "sequence-parallel: true); flags on the command line win.")  # fmt: skip


def _give_config_option(command: Any, name: str) -> None:
    """--config FILE on every leaf command, with its example in the epilog; the file is read by
    parcalc.runfile (imported only when --config is given: start-up)."""
    from typer.core import TyperOption

    def reader(leaf: Any, path: str) -> Any:
        def read_config(ctx: Any, param: Any, value: str | None) -> None:
            if value is not None and not ctx.resilient_parsing:
                from parcalc.commands.config import apply_config

                apply_config(ctx, leaf, path, value)

        return read_config

    subcommands = getattr(command, "commands", None)
    for sub_name, sub in (subcommands or {name: command}).items():
        path = f"{name} {sub_name}" if subcommands else name
        sub.params.append(TyperOption(param_decls=["--config"], metavar="FILE", is_eager=True, expose_value=False,
                                      callback=reader(sub, path), help=CONFIG_HELP))  # fmt: skip
        sub.epilog = (sub.epilog or "").rstrip("\n") + (
            f"\n\n\b\nRun files (flags by name in YAML or TOML; the command line wins):\n"
            f"  parcalc {path} --config run.yaml\n  cat run.yaml | parcalc {path} --config - --format json\n"
        )
def _accept_vocabulary(command: Any, path: str, bare: dict[str, str] | None = None) -> None:
    """Choices in any case (`--format JSON`, `--recompute FULL`), and the hidden spellings of the
    flag vocabulary (parcalc.flags: old names, Megatron-LM's) on the command and its subcommands.

    The vocabulary is imported only when a command line holds a long option the command does not
    declare, so a one-liner in parcalc's own spelling pays one set lookup per flag."""
    for sub_name, sub in getattr(command, "commands", {}).items():
        _accept_vocabulary(sub, f"{path} {sub_name}")
    for param in command.params:
        if hasattr(param.type, "case_sensitive"):
            param.type.case_sensitive = False
    fmt = next((p for p in command.params if p.name == "fmt"), None)
    if fmt is not None and "csv" in getattr(fmt.type, "choices", ()):
        command.params.append(type(fmt)(
            param_decls=["--table"], metavar="NAME", expose_value=False, callback=_choose_table,
            help="With --format csv: which of the result's tables to print (CSV holds one; the name as in the JSON's tables).",
        ))  # fmt: skip
    # every command whose output has the text form (--format table); report has its own --detail, of its documents
    if fmt is not None and {"table", "text"} & set(getattr(fmt.type, "choices", ())) and not any(p.name == "detail" for p in command.params):
        command.params.append(type(fmt)(
            param_decls=["--detail"], metavar="LEVEL", expose_value=False, callback=_choose_detail,
            help="How much the text output shows: brief (default) the answer, key terms, main table and the assumptions "
                 "that move it; full every input, derivation with its source, column and assumption. JSON, CSV, "
                 "Markdown, LaTeX and PDF always hold everything.",
        ))  # fmt: skip
    parse = command.parse_args

    def parse_args(ctx: Any, args: list[str]) -> Any:
        declared = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        if any(arg[:2] == "--" and arg.split("=", 1)[0] not in declared for arg in args):
            from parcalc.flags import translate

            args = translate(path, args, declared)
        if bare:
            args = _bare_values(args, bare)
        return parse(ctx, args)

    command.parse_args = parse_args


def _choose_table(ctx: Any, param: Any, value: str | None) -> None:
    """--table NAME: read by parcalc.render.csv_out when it picks the table to print; set at every
    invocation (None when not given), so that one run's choice never reaches the next in-process
    (a worksheet's calculations, a sweep, tests)."""
    from parcalc.render.csv_table import chosen_table

    chosen_table.set(value)


def _choose_detail(ctx: Any, param: Any, value: str | None) -> None:
    """--detail LEVEL: read by parcalc.output when it renders the text form; set at every invocation
    (None when not given: brief), as --table is."""
    from parcalc.render.brief import DETAILS, chosen_detail

    level = None if value is None else value.strip().lower()
    if level is not None and level not in DETAILS:
        from parcalc.errors import shown

        raise InputError(f"--detail: {shown(value, 40)} is not one of {', '.join(DETAILS)}")
    chosen_detail.set(level)


def _bare_values(args: list[str], bare: dict[str, str]) -> list[str]:
    """`--recompute` followed by nothing or by another option becomes `--recompute full`."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        out.append(arg)
        following = args[i + 1] if i + 1 < len(args) else None
        if arg in bare and (following is None or following.startswith("-")):
            out.append(bare[arg])
    return out


def _get_command(typer_app: typer.Typer) -> Any:
    """typer.main.get_command, reading each command function's parameters once, and their type
    hints only if typer looks one up.

    typer 0.28 reads them twice per command (typer/main.py, get_command_from_info: once in
    get_params_convertors_ctx_param_name_from_function to make the click parameters, again in
    get_callback, which uses only their names), and each read evaluates every annotation
    (typing.get_type_hints) and copies every typer.Option: ~1 ms of comm-volume's 52 flags, at
    every start. The second read gets the first's result. Each read also asks typing.get_type_hints
    for all the annotations (typer/utils.py, get_params_from_function), which rebuilds every
    Annotated type without its metadata, and uses them only for a parameter without a typer.Option
    or typer.Argument in its annotation, which no parcalc command has: they are computed when looked
    up (_HintsOnDemand), so never (~0.3 ms of flops' 40 flags). The patches last for this call only.
    """
    read = getattr(typer.main, "get_params_from_function", None)
    utils = getattr(typer, "utils", None)
    hints = getattr(utils, "get_type_hints", None)
    if read is None or hints is None:  # a typer without them: nothing to save
        return typer.main.get_command(typer_app)
    seen: dict[Any, Any] = {}

    def read_once(func: Callable[..., Any]) -> dict[str, ParamMeta]:
        if func not in seen:
            seen[func] = read(func)
        return seen[func]

    typer.main.get_params_from_function = read_once
    utils.get_type_hints = lambda func: _HintsOnDemand(lambda: hints(func))  # type: ignore[union-attr]
    try:
        return typer.main.get_command(typer_app)
    finally:
        typer.main.get_params_from_function = read
        utils.get_type_hints = hints  # type: ignore[union-attr]


class _HintsOnDemand(Mapping[str, Any]):
    """typing.get_type_hints(func), computed at the first look-up (see _get_command)."""

    def __init__(self, compute: Callable[[], dict[str, Any]]) -> None:
        self._compute = compute
        self._hints: dict[str, Any] | None = None

    def _all(self) -> dict[str, Any]:
        if self._hints is None:
            self._hints = self._compute()
        return self._hints

    def __getitem__(self, name: str) -> Any:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


# Set by the completion scripts of `parcalc --show-completion SHELL` (click's convention: _PROG_COMPLETE).
COMPLETE_VAR = "_PARCALC_COMPLETE"


def _skip_exit_collection() -> None:
    """At interpreter exit CPython runs a full collection over every object left (~6 ms of a
    one-liner's ~90 ms); all of them are about to go, so freeze them out of it."""
    gc.freeze()


atexit.register(_skip_exit_collection)


class ParcalcGroup(TyperGroup):
    """Lazy commands, and every expected failure as one line on stderr with the right exit code."""

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        from parcalc.help_panels import format_epilog

        format_epilog(self, ctx, formatter)  # the examples folded to the terminal's width, as every command's

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(set(COMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in COMMANDS:
            return load_command(cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        # `parcalc memroy`: one line with the nearest command, instead of click's "No such command"
        name = args[0] if args else ""
        if name and not name.startswith("-") and not ctx.resilient_parsing and name not in self.list_commands(ctx):
            raise InputError(unknown_command(name, self.list_commands(ctx)))
        return super().resolve_command(ctx, args)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        # A one-liner keeps nearly every object it makes until it exits, so the collector's passes
        # over them (one per 700 allocations) find nothing: run them less often while a command
        # runs, as mypy does (python/mypy, mypy/build.py). See also _skip_exit_collection.
        thresholds = gc.get_threshold()
        gc.set_threshold(200_000, *thresholds[1:])
        try:
            return self._main(*args, standalone_mode=standalone_mode, **kwargs)
        finally:
            # Restored as it is, the threshold would start a pass over everything the command
            # made at the next allocation; freeze + unfreeze moves it all to the oldest generation
            # unscanned and zeroes the counts, leaving it to the next full collection.
            gc.freeze()
            gc.unfreeze()
            gc.set_threshold(*thresholds)

    def _main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if COMPLETE_VAR in os.environ:
            # typer registers its bash/zsh/fish/powershell completers only for an app made with
            # add_completion=True (typer/completion.py, get_completion_inspect_parameters ->
            # completion_init), which would also build its --install-completion options at every
            # start; without them click answers "Shell bash not supported." Register them here, when
            # a shell asks.
            from parcalc.completion import register_shells

            register_shells()
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]  # args: click's (args, prog_name) only
        from parcalc import streams

        streams.prepare()
        try:
            with warnings.catch_warnings():
                # numpy's overflow / invalid-value warnings at the ends of the float range: every
                # result is checked for inf and NaN before it is shown (commands.common.check_finite)
                warnings.simplefilter("ignore", RuntimeWarning)
                code = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[misc]  # as above
            streams.flush_stdout()  # here, so that a full disk is an error now, not at exit
        except ParcalcError as error:
            _fail(f"Error: {one_line(str(error))}", error.exit_code)
        except _click_exception() as error:
            if type(error).__name__ == "NoArgsIsHelpError":  # bare `parcalc`: show help, not an error
                typer.echo(error.format_message())  # type: ignore[attr-defined]
                sys.exit(0)
            context = getattr(error, "ctx", None)
            hint = f" (see '{context.command_path} --help')" if context is not None else ""
            from parcalc.commands.config import from_run_file

            hint = from_run_file(error) + hint  # a bad value read from --config's file names the file
            _fail(f"Error: {one_line(_click_message(error))}{hint}", error.exit_code)  # type: ignore[attr-defined]
        except streams.StdoutError as error:
            streams.discard_stdout()
            if error.broken_pipe:  # `parcalc ... | head -1`: the reader has all it wanted
                sys.exit(ENVIRONMENT_EXIT)
            _fail(f"Error: {error}", ENVIRONMENT_EXIT)
        except (KeyboardInterrupt, _click_abort()):
            _fail("Interrupted", INTERRUPTED_EXIT)
        except MemoryError:
            _fail("Error: out of memory", ENVIRONMENT_EXIT)
        except Exception as error:  # noqa: BLE001 - a bug of parcalc: one line, not a traceback
            if os.environ.get(DEBUG_VAR):
                import traceback

                traceback.print_exc()
            _fail(internal_error_line(error), INTERNAL_ERROR_EXIT)
        finally:
            streams.restore()
        if code == INTERRUPTED_EXIT:  # typer turns a KeyboardInterrupt inside a command into Exit(130), silently
            _fail("Interrupted", INTERRUPTED_EXIT)
        sys.exit(code if isinstance(code, int) else 0)


# Exit codes (README, "Exit codes"): 0 done, 2 bad input, 1 infeasible request / failed render /
# environment (an unwritable stdout, no memory), 70 a bug of parcalc (EX_SOFTWARE of sysexits.h),
# 130 interrupted (128 + SIGINT, as shells report it).
ENVIRONMENT_EXIT = 1
INTERNAL_ERROR_EXIT = 70
INTERRUPTED_EXIT = 130


def _click_abort() -> type[BaseException]:
    """click's Abort: what a KeyboardInterrupt inside a command becomes."""
    return next(k for k in typer.Abort.__mro__ if k.__name__ == "Abort")


def _fail(line: str, code: int) -> None:
    from parcalc import streams

    streams.say(line)
    sys.exit(code)


app = typer.Typer(
    cls=ParcalcGroup,
    name="parcalc",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _show_version(value: bool) -> None:
    if value:
        from parcalc import __version__

        typer.echo(f"parcalc {__version__}")
        raise typer.Exit


def _show_completion(value: str | None) -> None:
    if value is not None:
        from parcalc.completion import completion_script

        typer.echo(completion_script(value))
        raise typer.Exit


EXAMPLES = """\b
Examples:
  parcalc peak-flops --gpu a100-sxm4-80gb --dtype tf32
  parcalc --version
  eval "$(parcalc --show-completion bash)"    # in ~/.bashrc; zsh and fish alike
"""


@app.callback(epilog=EXAMPLES)
def parcalc_main(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version, help="Print parcalc's version and exit."),
    show_completion: str = typer.Option(
        None, "--show-completion", metavar="SHELL", is_eager=True, callback=_show_completion,
        help="Print the completion script for SHELL (bash, zsh or fish) and exit: commands, flags and preset names.",
    ),  # fmt: skip
) -> None:
    """What does a parallel training run cost, and what fits? Peak FLOP/s, arithmetic intensity,
    communication volume, pipeline bubbles, memory and configuration search, each answer with its
    derivation (formula, substituted values, result, source).

    Run `parcalc COMMAND --help` for a command's options and examples.
    """
