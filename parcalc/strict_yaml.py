"""Reading YAML safely: one mapping from a bounded regular file, no aliases, bounded nesting,
no duplicate keys, no base-60 or oversize numbers; the parse of an unchanged file cached
(parcalc.preset_cache). Presets, worksheets, run files and timings files all read YAML here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from parcalc.errors import PresetError
from parcalc.files import MAX_PRESET_BYTES

T = TypeVar("T")


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse one YAML mapping with the safe loader; duplicate keys and oversize files are errors.

    A parse of an unchanged file is taken from parcalc.preset_cache instead.
    """
    return read_validated(path, lambda document: document)


def read_validated(path: Path, build: Callable[[dict[str, Any]], T]) -> T:
    """`build(document)` of the YAML mapping in `path`, the parse cached only once `build` accepted it.

    Validating before caching keeps an invalid file out of the cache (and, before aliases were
    refused, kept the cache from serialising an expanded alias bomb). The cache is keyed by the
    very bytes parsed here, so an entry never stands for other contents of the file.
    """
    from parcalc import preset_cache

    data = _read_preset_bytes(path)
    cached = preset_cache.load(path, data)
    if cached is not None:
        return build(cached)
    document = _parse_yaml(path, data)
    built = build(document)
    preset_cache.store(path, document, data)
    return built


def _read_preset_bytes(path: Path) -> bytes:
    from parcalc.files import NotRegularFileError, TooLargeError, read_regular

    try:
        return read_regular(path, MAX_PRESET_BYTES)
    except TooLargeError as error:
        raise PresetError(f"{path}: too large for a preset: {error}") from None
    except NotRegularFileError as error:
        raise PresetError(f"{path}: cannot read: {error}") from None
    except OSError as error:
        raise PresetError(f"{path}: cannot read: {error.strerror or error}") from None


# Presets and worksheets are flat data: a few levels of mappings and lists. Anything deeper is a
# mistake or an attack (30,000 nested brackets overflow libyaml's composer and kill the process;
# a few thousand raise RecursionError), so the parser's events are walked before composing.
MAX_YAML_DEPTH = 32


def _parse_yaml(path: Path, data: bytes | None = None) -> dict[str, Any]:
    if data is None:
        data = _read_preset_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PresetError(f"{path}: not UTF-8 text") from None
    document = load_yaml_text(path, text)
    if not isinstance(document, dict):
        raise PresetError(f"{path}: expected a mapping of keys at the top level")
    return document


def load_yaml_text(path: Path, text: str, label: str = "") -> Any:
    """A YAML document with no aliases and bounded nesting (checked on the parser's events before
    any node is built), through the strict loader; a problem is a PresetError naming `label` (default
    the path). Presets, worksheets and timings files all read YAML through here."""
    import yaml

    try:
        _check_yaml_events(path, text)
        return yaml.load(text, Loader=strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise PresetError(f"{label or path}: {_yaml_problem(error)}") from None


def _check_yaml_events(path: Path, text: str) -> None:
    """Refuse aliases and deep nesting from the parser's event stream, before any node is built.

    An alias (`*name`) lets 4 KB expand into gigabytes ("billion laughs"); parcalc's files never
    need one, so none is accepted (anchors alone are harmless). The event parser keeps its own
    stack on the heap, so this walk is safe however deep the input nests.
    """
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        depth = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise PresetError(f"{path}: line {line}: YAML aliases (*{str(event.anchor)[:40]}) are not allowed; write the value out")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else "?"
                    raise PresetError(f"{path}: line {line}: nested more than {MAX_YAML_DEPTH} levels deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
    except yaml.YAMLError as error:
        # PyYAML 6.0.4's libyaml stops a flow collection nested past its own limit in the scanner,
        # before the parser emits the events counted above: the same problem, said the same way.
        if "maximum nesting depth" not in str(error):
            raise
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else "?"
        raise PresetError(f"{path}: line {line}: nested more than {MAX_YAML_DEPTH} levels deep") from None
    finally:
        loader.dispose()


def _yaml_problem(error: Exception) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {problem}"


_LOADER: type | None = None
# The largest integer a preset may hold: a 64-bit count. Python's int() refuses more than 4,300
# digits with a ValueError (a traceback), and a 400-digit count overflows float in the core.
MAX_INTEGER = 2**63 - 1


def strict_loader() -> type:
    global _LOADER
    if _LOADER is None:
        import collections.abc
        import math

        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        problem = yaml.constructor.ConstructorError

        class StrictLoader(base):  # type: ignore[misc, valid-type]
            def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
                seen: set[object] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    if not isinstance(key, collections.abc.Hashable):  # `? [1, 2]`: `key in seen` would raise
                        raise problem(None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark)
                    if key in seen:
                        raise problem(None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark)
                    seen.add(key)
                return super().construct_mapping(node, deep=deep)

            def construct_yaml_int(self, node):  # type: ignore[no-untyped-def]
                if ":" in node.value:  # YAML 1.1 reads 34:08 as base 60 (2048): a typo, not a count
                    raise problem(None, None, f"{node.value[:40]!r} is a YAML 1.1 base-60 number; write the number, or quote it", node.start_mark)
                if len(node.value) > 40:  # before int(): 5,000 digits exceed Python's int-str limit
                    raise problem(None, None, f"a number of {len(node.value)} digits is too large", node.start_mark)
                value = super().construct_yaml_int(node)
                if abs(value) > MAX_INTEGER:
                    raise problem(None, None, f"{node.value[:40]!r} is too large (at most {MAX_INTEGER})", node.start_mark)
                return value

            def construct_yaml_float(self, node):  # type: ignore[no-untyped-def]
                if ":" in node.value:  # 1:30.5 is YAML 1.1's base 60 (90.5)
                    raise problem(None, None, f"{node.value[:40]!r} is a YAML 1.1 base-60 number; write the number, or quote it", node.start_mark)
                value = super().construct_yaml_float(node)
                if not math.isfinite(value):  # .inf, .nan and 1.0e+999: no preset number is infinite
                    raise problem(None, None, f"{node.value[:40]!r} is not a finite number", node.start_mark)
                return value

        StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
        StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
        _LOADER = StrictLoader
    return _LOADER
