"""Run files: a command's flags in a YAML or TOML mapping, and running a command from such inputs.

A run file holds flags by their names, as a worksheet's `inputs:` do (parcalc.worksheet):

    # run.yaml
    command: fit                  # optional for --config (then it must name the command run); required by sweep
    model: gpt3-175b
    gpu: a100-sxm4-80gb
    gpus: 64
    seq-len: 2048                 # or seq_len: the Python name
    sequence-parallel: true       # a switch: true or false (dropout: false is --no-dropout)
    offload: [optimizer]          # a repeatable flag: a list (or one value)

`parcalc COMMAND --config run.yaml` (or run.toml, or `-` for stdin) reads it; every key becomes
that flag's default for this run (click's Context.default_map), so a flag on the command line wins
over the file. The library (parcalc.api), `parcalc sweep` and worksheets run a command from the
same mapping through parcalc.results.run.run_command, without Click: the command's flags are read
from parcalc/results/signatures.json as `ParamSpec`s, which answer the questions asked here
(name, flags, switch, repeatable) as a Click parameter does, so that one set of rules reads a
run file for the CLI's --config and for the library.

Files are read as presets are (parcalc.strict_yaml.load_yaml_text): no YAML aliases (a "billion
laughs" bomb expands from a few KB), bounded nesting, no duplicate keys, at most 1 MiB.
Every problem is one InputError / PresetError naming the file and the key: exit 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parcalc.errors import InputError, shown
from parcalc.files import beside
from parcalc.frozen import frozen

STDIN = "-"
# Keys a run file may not hold for a command: help would print help instead of running; a run
# file naming another run file would be a chain to follow.
NEVER = ("help", "h", "config")
# What the in-process runner refuses besides: the caller (library, sweep) chooses the output.
OUTPUT_KEYS = ("format", "fmt", "f", "output", "o")


@frozen
class RunFile:
    """A run file as read: the command it names ("" when none) and its flags, with where it came
    from (`label` for messages; `base`, the directory relative paths are read from)."""

    label: str
    inputs: Mapping[str, Any]
    command: str = ""
    base: Path | None = None


def read_run_file(source: str, flag: str = "--config") -> RunFile:
    """The run file at `source` (a path, or "-" for stdin): a mapping of flag names to values.
    `flag` names where it was given, for messages."""
    if source == STDIN:
        return _run_file_from("<stdin>", _read_stdin(flag), toml=False, base=None)
    if not source.strip():
        raise InputError(f"{flag}: give a file name (or - for stdin)")
    from parcalc.files import MAX_PRESET_BYTES, NotRegularFileError, TooLargeError, check_name_length, read_regular

    path = Path(source)
    check_name_length(path, flag)
    try:
        data = read_regular(path, MAX_PRESET_BYTES)
    except FileNotFoundError:
        raise InputError(f"{flag}: no such file {shown(source)}") from None
    except (TooLargeError, NotRegularFileError) as error:
        raise InputError(f"{flag}: {shown(source)}: {error}") from None
    except OSError as error:
        raise InputError(f"{flag}: cannot read {shown(source)}: {error.strerror or error}") from None
    return _run_file_from(str(path), data, toml=path.suffix.lower() == ".toml", base=path.parent)


def _read_stdin(flag: str) -> bytes:
    import sys

    from parcalc.files import MAX_PRESET_BYTES

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InputError(f"{flag} -: no standard input to read")
    data = stream.read(MAX_PRESET_BYTES + 1)
    if len(data) > MAX_PRESET_BYTES:
        raise InputError(f"{flag} -: more than {MAX_PRESET_BYTES:,} bytes on standard input; a run file is a short mapping")
    return data


def _run_file_from(label: str, data: bytes, toml: bool, base: Path | None) -> RunFile:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{label}: not UTF-8 text") from None
    document = _parse_toml(label, text) if toml else _parse_yaml(label, text)
    if document is None:
        raise InputError(f"{label}: empty; a run file is a mapping of flag names to values, e.g. `tp: 8`")
    if not isinstance(document, dict):
        raise InputError(f"{label}: must be a mapping of flag names to values (e.g. `tp: 8`), not a {_kind(document)}")
    inputs = dict(document)
    command = inputs.pop("command", "")
    if not isinstance(command, str):
        raise InputError(f"{label}: key 'command' must be a command name such as fit, got {shown(command)}")
    for key in inputs:
        if not isinstance(key, str):
            raise InputError(f"{label}: key {shown(key)} must be a flag name such as tp or seq-len")
    return RunFile(label, inputs, command.strip(), base)


def _parse_yaml(label: str, text: str) -> Any:
    from parcalc.strict_yaml import load_yaml_text

    return load_yaml_text(Path(label), text, label)  # aliases, nesting, duplicates: a PresetError (exit 2)


def _parse_toml(label: str, text: str) -> Any:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{label}: invalid TOML: {error}") from None
    except RecursionError:  # tomllib recurses on nested arrays: thousands of `[` exhaust the stack
        raise InputError(f"{label}: nested too deeply for a run file") from None
    except ValueError:  # int() of more than 4,300 digits (Python's int-str limit), raised inside tomllib
        raise InputError(f"{label}: a number too large for any flag (more than 4,300 digits)") from None


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "text"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# Inputs as a command's defaults


@frozen
class _Slot:
    """One key a run file may use: the click parameter, and False for a switch's --no-x form."""

    param: Any
    positive: bool = True


def input_slots(command: Any) -> dict[str, _Slot]:
    """Every key that names a parameter of `command`: each long flag without its dashes
    (`seq-len`, `no-dropout`), the same with underscores (`seq_len`, the Python name), and each
    positional argument's name (`file`)."""
    slots: dict[str, _Slot] = {}
    for param in command.params:
        if getattr(param, "param_type_name", "") == "argument":
            slots[param.name] = _Slot(param)
            continue
        for opt in getattr(param, "opts", ()):
            if opt.startswith("--"):
                slots[opt[2:]] = _Slot(param)
        for opt in getattr(param, "secondary_opts", ()):
            if opt.startswith("--"):
                slots[opt[2:]] = _Slot(param, positive=False)
        if param.name:
            slots.setdefault(param.name, _Slot(param))
    for key in list(slots):
        slots.setdefault(key.replace("-", "_"), slots[key])
    return slots


def unknown_key(label: str, command_name: str, key: str, known: Mapping[str, Any], what: str = "key") -> InputError:
    """`run.yaml: unknown key 'tpp' (did you mean 'tp'?); see 'parcalc fit --help' for its flags`."""
    import difflib

    names = sorted(k for k in known if "_" not in k or k.replace("_", "-") not in known)
    close = difflib.get_close_matches(str(key).lower(), names, n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return InputError(f"{label}: {command_name} has no flag for the {what} {shown(key)}{hint}; "
                      f"see 'parcalc {command_name} --help'")  # fmt: skip


def defaults_for(command: Any, command_name: str, inputs: Mapping[str, Any], label: str, base: Path | None = None,
                 refuse: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """`inputs` (flag names or Python names to values) as click's default_map of `command`:
    parameter names to the values the command line would give (text, a tuple of texts for a
    repeatable flag, True/False for a switch). Unknown keys, keys in `refuse`, and values of the
    wrong kind (a mapping, a list for a one-value flag, a number for a switch) are InputErrors."""
    slots = input_slots(command)
    defaults: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in inputs.items():
        if key in NEVER or key in refuse:
            raise InputError(f"{label}: key {shown(key)}: {refused(key)}")
        slot = slots.get(key)
        if slot is None:
            raise unknown_key(label, command_name, key, slots)
        name = slot.param.name
        if name in given:
            raise InputError(f"{label}: keys {shown(given[name])} and {shown(key)} set the same flag; keep one")
        given[name] = key
        if value is None:  # `tp:` with nothing after it: the flag is not given
            continue
        defaults[name] = _value(label, key, slot, value, base)
    return defaults


def refused(key: str) -> str:
    if key in OUTPUT_KEYS:
        return "the caller chooses the output here (sweep: its own --format and -o); leave it out"
    if key == "config":
        return "a run file cannot name another run file; put the flags here"
    return "not a calculation input; leave it out"


def _value(label: str, key: str, slot: _Slot, value: Any, base: Path | None) -> Any:
    import datetime
    import enum

    param = slot.param
    where = f"{label}: key {shown(key)}"
    if isinstance(value, dict):
        raise InputError(f"{where}: must be a value or a list, not a mapping")
    if getattr(param, "is_flag", False) and getattr(param, "is_bool_flag", True):
        if not isinstance(value, bool):
            raise InputError(f"{where}: a switch, true or false, got {shown(value)}")
        return value if slot.positive else not value
    if not slot.positive:  # a --no-x form of something that is not a switch: cannot happen in click
        raise InputError(f"{where}: not a switch")
    repeatable = getattr(param, "multiple", False) or getattr(param, "nargs", 1) == -1
    many = isinstance(value, (list, tuple))  # a YAML / TOML list, or a list or tuple from Python
    items = list(value) if many else [value]
    if many and not repeatable:
        raise InputError(f"{where}: takes one value, got a list of {len(value)}")
    texts = []
    for item in items:
        if isinstance(item, (dict, list, tuple)):
            raise InputError(f"{where}: each value must be a number or text, not a {_kind(item)}")
        if isinstance(item, bool):
            raise InputError(f"{where}: takes a value such as {_metavar(param)}, got {str(item).lower()}")
        if isinstance(item, datetime.date):
            item = item.isoformat()
        text = str(item.value if isinstance(item, enum.Enum) else item)  # an Enum from Python: its value, as typed
        if "\x00" in text:  # a file name with one reached os.stat's ValueError (exit 70); no command line can pass one
            raise InputError(f"{where}: {shown(text)} holds a NUL character, which no flag value can")
        texts.append(beside(base, text) if _is_input_path(param) else text)
    return tuple(texts) if repeatable else texts[0]


def _metavar(param: Any) -> str:
    return str(getattr(param, "metavar", None) or param.name)


def _is_input_path(param: Any) -> bool:
    """A file or directory parcalc reads (analyze's FILE, --presets DIR): found beside the run file."""
    return getattr(param, "param_type_name", "") == "argument" or param.name in ("presets", "timings", "template")


def check_command(run: RunFile, command_name: str) -> None:
    """A run file that names a command is for that command only."""
    if run.command and run.command != command_name:
        raise InputError(f"{run.label}: key 'command': the file is for {shown(run.command)}, not {command_name!r}")


# ---------------------------------------------------------------------------------------------
# A command's flags without Click


@frozen
class ParamSpec:
    """One flag or argument of a command as parcalc/results/signatures.json records it, with the
    attribute names of a Click parameter, so that the rules above read both."""

    name: str
    opts: tuple[str, ...] = ()
    secondary_opts: tuple[str, ...] = ()
    param_type_name: str = "option"
    is_flag: bool = False
    is_bool_flag: bool = True
    multiple: bool = False
    nargs: int = 1
    required: bool = False
    default: Any = None
    type: str = "text"  # text, choice, path, int
    choices: tuple[str, ...] = ()
    enum: str = ""  # "module.Class": the Enum (of parcalc.core.choices) the command takes the choice as
    metavar: str | None = None
    help: str = ""

    @property
    def human_readable_name(self) -> str:
        """As Click names it in "Missing argument 'FILE'.": an argument's metavar, else its name."""
        if self.param_type_name == "argument":
            return self.metavar or self.name.upper()
        return self.name


@frozen
class CommandSignature:
    """A command's help, its examples (the epilog) and its parameters, read without Click."""

    name: str
    help: str
    epilog: str
    params: tuple[ParamSpec, ...]


_SIGNATURES: dict[str, CommandSignature] = {}


def signature(command_name: str) -> CommandSignature:
    """The flags of `command_name` ("memory", "presets show") from parcalc/results/signatures.json."""
    if not _SIGNATURES:
        import json

        records = json.loads((Path(__file__).parent / "results" / "signatures.json").read_text(encoding="utf-8"))
        for name, record in records.items():
            _SIGNATURES[name] = CommandSignature(name, record["help"], record["epilog"], tuple(_spec(p) for p in record["params"]))
    if command_name not in _SIGNATURES:
        from parcalc.messages import unknown_command

        group = command_name.partition(" ")[0]
        groups = sorted({name.partition(" ")[0] for name in _SIGNATURES})
        if group in groups:
            subs = sorted(name.partition(" ")[2] for name in _SIGNATURES if name.partition(" ")[0] == group)
            if not subs[0]:
                raise InputError(f"{group} has no subcommands; got {shown(command_name)}")
            raise InputError(f"{group}: name one of its commands ({', '.join(subs)}), e.g. '{group} {subs[0]}'")
        raise InputError(unknown_command(group, groups))
    return _SIGNATURES[command_name]


def _spec(record: Mapping[str, Any]) -> ParamSpec:
    argument = record["argument"]
    return ParamSpec(
        name=record["name"], opts=tuple(record["flags"]), secondary_opts=tuple(record["negative"]),
        param_type_name="argument" if argument else "option", is_flag=record["switch"], multiple=record["repeatable"],
        required=record["required"], default=record["default"], type=record["type"], choices=tuple(record["choices"]), enum=record.get("enum", ""),
        metavar=record["metavar"] or None, help=record["help"],
    )  # fmt: skip


def __getattr__(name: str) -> Any:
    # Moved to the CLI's side (parcalc.cli, parcalc.commands.config), which build Click commands; kept
    # under the old names for callers of this module. Imported by name when asked: run files are read
    # by the CLI (--config), so this module depends on nothing of the CLI.
    homes = {"leaf_command": "parcalc.cli", "apply_config": "parcalc.commands.config", "from_run_file": "parcalc.commands.config"}
    if name in homes:
        import importlib

        return getattr(importlib.import_module(homes[name]), name)
    raise AttributeError(f"module 'parcalc.runfile' has no attribute {name!r}")
