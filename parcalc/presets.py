"""Presets: GPUs, links, models and worksheets as YAML data, strictly validated.

Each preset is one file, `<dir>/<category>/<name>.yaml`, so that a lookup parses only the file
asked for. Directories are searched in this order, the first match winning:

1. directories given with `--presets DIR` (the `extra_dirs` argument);
2. `PARCALC_PRESETS` (several directories separated by the OS path separator);
3. `$XDG_CONFIG_HOME/parcalc/presets` (default `~/.config/parcalc/presets`);
4. the presets packaged with parcalc.

A model may also be given as the path of a Hugging Face `config.json` on disk (never fetched).

Every number in a GPU or link preset is `{value: "<number> <unit>", source: <key>}` where the
key names an entry of the file's `sources:` mapping; a model names its `source:` once.
Unknown keys, missing units and missing sources are errors naming the file and the key.
"""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from parcalc.core.dtypes import COMPUTE_DTYPES
from parcalc.core.hardware import (
    DtypeRates,
    Gpu,
    KernelRates,
    Link,
    Node,
    PowerPoint,
    Sourced,
)
from parcalc.errors import InputError, PresetError, shown
from parcalc.files import MAX_PRESET_BYTES  # re-exported: run files read with the same bound
from parcalc.frozen import frozen
from parcalc.resources import data_dir, home_dir

if TYPE_CHECKING:  # only calibrated presets build them (parcalc.core.measured); the model types only model presets (a one-liner
    # about a GPU does not load them)
    from parcalc.core.attention_window import AttentionWindow
    from parcalc.core.linear_attention import GatedDeltaNet
    from parcalc.core.measured import MatmulSweep, MeasuredCollective
    from parcalc.core.model import LatentAttention, MixtureOfExperts, TransformerModel
from parcalc.units import BASE_UNIT, Dimension, parse_quantity

T = TypeVar("T")
ENV_VAR = "PARCALC_PRESETS"


class Category(str, Enum):
    GPUS = "gpus"
    LINKS = "links"
    MODELS = "models"
    WORKSHEETS = "worksheets"
    FRAMEWORKS = "frameworks"

    @property
    def singular(self) -> str:
        return self.value.removesuffix("s")


@frozen
class PresetFile:
    """A preset found on disk: its lookup name, file and where it came from."""

    category: Category
    key: str
    path: Path
    origin: str


# ---------------------------------------------------------------------------------------------
# Finding files


def search_dirs(extra_dirs: Sequence[Path | str] = ()) -> list[tuple[Path, str]]:
    """(directory, origin label) in lookup order."""
    dirs: list[tuple[Path, str]] = [(Path(d), "--presets") for d in extra_dirs]
    env = os.environ.get(ENV_VAR, "")
    dirs += [(Path(d), ENV_VAR) for d in env.split(os.pathsep) if d]
    config = home_dir("XDG_CONFIG_HOME", ".config")
    if config is not None:  # no home: no user preset directory
        dirs.append((config / "parcalc" / "presets", "XDG config"))
    dirs.append((data_dir("presets"), "packaged"))
    return dirs


def _preset_files(folder: Path) -> list[Path]:
    """The .yaml/.yml regular files of `folder`, sorted; none when it cannot be listed.

    A directory on the preset path that is missing or unreadable (no permission, a file where a
    directory should be) holds nothing usable: it is skipped, like a missing one, rather than
    crashing every command. FIFOs and devices named *.yaml are skipped too (reading one would
    block), and so are names with control characters, which would reach the terminal in listings.
    """
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    files = []
    for path in entries:
        try:
            if path.suffix in (".yaml", ".yml") and not control_character(path.stem) and _inside(path, folder):
                files.append(path)
        except OSError:
            continue
    return files


def _inside(path: Path, folder: Path) -> bool:
    """`path` is a regular file that stays inside `folder` once links are followed.

    A preset directory someone shared may hold `gpus/x.yaml -> ~/.ssh/id_rsa`: a link out of the
    folder would be read, and a parse error would quote what it found there. Links within the
    folder (one name for another preset) are fine.
    """
    if not path.is_file():
        return False
    if not path.is_symlink():
        return True
    return path.resolve().is_relative_to(folder.resolve())


def find_all(category: Category, extra_dirs: Sequence[Path | str] = ()) -> list[PresetFile]:
    """Every preset of a category, the first of each name in lookup order, sorted by name."""
    found: dict[str, PresetFile] = {}
    for directory, origin in search_dirs(extra_dirs):
        files = _preset_files(directory / category.value)
        for path in [p for p in files if p.suffix == ".yaml"] + [p for p in files if p.suffix == ".yml"]:
            found.setdefault(path.stem.lower(), PresetFile(category, path.stem.lower(), path, origin))
    return sorted(found.values(), key=lambda p: p.key)


def check_preset_name(category: Category, name: str) -> str:
    """`name` as a lookup key, or a one-line error: a preset name is a file's stem, nothing more.

    A separator or '..' would reach outside the preset folder (`--gpu ../../some/dir/evil`, also
    from a worksheet's inputs); more than 255 bytes is no file name (the file system raised
    ENAMETOOLONG); a control character would be echoed to the terminal.
    """
    wanted = name.strip().lower()
    unknown = f"unknown {category.singular} {shown(name)}"
    if any(ch in wanted for ch in "/\\") or ".." in wanted:
        raise PresetError(f"{unknown}: a preset name has no '/', '\\' or '..' (put the file in DIR/{category.value}/ and use --presets DIR)")
    if len(os.fsencode(wanted)) > 255 - len(".yaml"):
        raise PresetError(f"{unknown}: a preset name is at most 250 bytes")
    if control_character(wanted):
        raise PresetError(f"{unknown}: a preset name has no control characters")
    return wanted


def find(category: Category, name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """The preset called `name` (case-insensitive); unknown names get "did you mean"."""
    wanted = check_preset_name(category, name)
    for directory, origin in search_dirs(extra_dirs) if wanted else ():
        folder = directory / category.value
        for suffix in (".yaml", ".yml"):
            path = folder / f"{wanted}{suffix}"
            try:
                if _inside(path, folder):
                    return PresetFile(category, wanted, path, origin)
                if path.is_symlink() and path.is_file():
                    raise PresetError(f"{path}: links outside {folder}; parcalc follows a preset's link only within its folder (copy the file there)")
            except OSError:  # an unreadable directory on the preset path: skipped (see _preset_files)
                break
        for path in _preset_files(folder):  # case-insensitive file systems aside, match names ignoring case
            if path.stem.lower() == wanted:
                return PresetFile(category, wanted, path, origin)
    known = [p.key for p in find_all(category, extra_dirs)]
    raise PresetError(f"unknown {category.singular} {shown(name)}{_did_you_mean(wanted, known)}")


# C0 and C1 controls and DEL (an ANSI escape starts with ESC), and the bidirectional overrides that
# make text display other than it reads. Newline and tab only where a field allows several lines.
_CONTROLS = frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def control_character(text: str, allow_newlines: bool = False) -> str | None:
    """The first control character of `text` (as a repr), or None; see _CONTROLS."""
    for ch in text:
        if ch in _CONTROLS and not (allow_newlines and ch in "\n\t"):
            return repr(ch)
    return None


def _did_you_mean(wanted: str, known: Iterable[str]) -> str:
    known = list(known)
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5)
    close += [k for k in known if wanted and wanted in k and k not in close][: 3 - len(close)]
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    return f"; see `parcalc presets list` ({len(known)} known)"


# ---------------------------------------------------------------------------------------------
# Reading YAML safely


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
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
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


def _strict_loader() -> type:
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


# ---------------------------------------------------------------------------------------------
# Validation helpers


class _Doc:
    """A YAML mapping being validated; every error names the file and the dotted key."""

    def __init__(self, path: Path, data: Mapping[str, Any], where: str = "") -> None:
        self.path, self.data, self.where = path, data, where

    def error(self, key: str, message: str) -> PresetError:
        dotted = f"{self.where}.{key}" if self.where else key
        return PresetError(f"{self.path}: key '{dotted}': {message}")

    def only(self, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        for key in self.data:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), allowed, n=1)
                suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise self.error(str(key), f"unknown key{suggestion}; allowed: {', '.join(allowed)}")

    def child(self, key: str) -> _Doc:
        value = self.data[key]
        if not isinstance(value, dict):
            raise self.error(key, "expected a mapping")
        return _Doc(self.path, value, f"{self.where}.{key}" if self.where else key)

    def text(self, key: str, required: bool = True, default: str = "") -> str:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, "expected non-empty text")
        return self.printable(key, value.strip())

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of text lines")
        return tuple(self.printable(key, v) for v in value)

    def printable(self, key: str, value: str) -> str:
        """`value` unless it holds a control character: preset text is printed to terminals, where an
        ANSI escape in a name or note would recolour, move or hide what parcalc shows."""
        found = control_character(value, allow_newlines=True)
        if found:
            raise self.error(key, f"control character {found} in the text; write plain text")
        return value

    def integer(self, key: str, required: bool = True, default: int = 0, minimum: int = 1) -> int:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected a whole number >= {minimum}, got {shown(value)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {shown(value)}")
        return value

    def choice(self, key: str, enum: type[Enum], default: Enum) -> Any:
        value = self.data.get(key, default.value)
        try:
            return enum(str(value).lower())
        except ValueError:
            allowed = ", ".join(str(e.value) for e in enum)
            raise self.error(key, f"{shown(value)} is not one of {allowed}") from None

    def sources(self) -> dict[str, str]:
        if "sources" not in self.data:
            raise self.error("sources", "missing: every number needs a source")
        sources = self.child("sources")
        return {self.printable("sources", str(k)): sources.text(str(k)) for k in sources.data}

    def source_ref(self, key: str, sources: Mapping[str, str]) -> str:
        ref = self.text(key)
        if ref not in sources:
            known = ", ".join(sources) or "none"
            raise self.error(key, f"source {shown(ref)} is not a key of 'sources' (known: {known})")
        return sources[ref]

    def quantity(
        self, key: str, dimension: Dimension, sources: Mapping[str, str], required: bool = True
    ) -> Sourced | None:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return None
        node = self.child(key)
        node.only(("value", "source", "note"))
        if "source" not in node.data:
            raise node.error("source", "missing: every number needs a source")
        raw = node.data.get("value")
        if raw is None:
            raise node.error("value", "missing")
        if dimension not in (Dimension.COUNT, Dimension.FRACTION) and not (isinstance(raw, str) and _has_unit(raw)):
            raise node.error("value", f"{shown(raw)} has no unit; write it with one, e.g. {_unit_example(dimension)}")
        try:
            value = parse_quantity(raw, dimension, f"{self.path}: key '{node.where}.value'")
        except InputError as error:
            raise PresetError(str(error)) from None
        source = node.source_ref("source", sources)
        note = node.text("note", required=False)
        return Sourced(value, BASE_UNIT[dimension], f"{source} ({note})" if note else source)


def _has_unit(text: str) -> bool:
    return any(ch.isalpha() for ch in text.lower().replace("e+", "").replace("e-", "").replace("e", ""))


def _unit_example(dimension: Dimension) -> str:
    return {
        Dimension.FREQUENCY: "'1410 MHz'",
        Dimension.BYTES: "'80 GB'",
        Dimension.BANDWIDTH: "'2039 GB/s'",
        Dimension.TIME: "'2 us'",
        Dimension.FLOP_RATE: "'312 TFLOP/s'",
        Dimension.POWER: "'700 W'",
    }.get(dimension, "'1 unit'")


def _check_kind(doc: _Doc, category: Category) -> None:
    kind = doc.text("kind")
    if kind != category.singular:
        raise doc.error("kind", f"expected '{category.singular}' in a {category.value} preset, got {shown(kind)}")


# ---------------------------------------------------------------------------------------------
# GPUs

_GPU_KEYS = (
    "kind", "name", "vendor", "architecture", "sources", "sms", "boost_clock", "memory_capacity",
    "memory_bandwidth", "nvlink_bandwidth_per_direction", "dtypes", "kernels", "node", "notes", "matmul_measured",
    "board_power", "power_curve", "power_limit", "host",
)  # fmt: skip
_KERNEL_KEYS = ("matmul", "tile", "memory", "attention_forward", "attention_backward", "launch", "matmul_isolated", "gemm_tiles",
                "attention_by_head_dim", "calibrated")
_CALIBRATED_KINDS = ("gemm", "attention", "memory", "optimizer")
_NODE_KEYS = ("gpus", "intra_link", "inter_link", "nics", "source")
_RATE_KEYS = ("fma_per_clock_per_sm", "dense_peak", "sparse_peak")


def gpu_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Gpu:
    doc = _Doc(path, data)
    doc.only(_GPU_KEYS)
    _check_kind(doc, Category.GPUS)
    sources = doc.sources()
    dtypes: dict[str, DtypeRates] = {}
    if "dtypes" in doc.data:
        table = doc.child("dtypes")
        for dtype in table.data:
            if dtype not in COMPUTE_DTYPES:
                raise table.error(str(dtype), f"unknown dtype; known: {', '.join(COMPUTE_DTYPES)}")
            rates = table.child(dtype)
            rates.only(_RATE_KEYS)
            parsed = DtypeRates(
                fma_per_clock_per_sm=rates.quantity("fma_per_clock_per_sm", Dimension.COUNT, sources, False),
                dense_peak=rates.quantity("dense_peak", Dimension.FLOP_RATE, sources, False),
                sparse_peak=rates.quantity("sparse_peak", Dimension.FLOP_RATE, sources, False),
            )
            if parsed == DtypeRates():
                raise rates.error("dense_peak", "a dtype needs fma_per_clock_per_sm or dense_peak")
            dtypes[dtype] = parsed
    return Gpu(
        key=key,
        name=doc.text("name"),
        vendor=doc.text("vendor"),
        architecture=doc.text("architecture"),
        sms=doc.quantity("sms", Dimension.COUNT, sources, required=False),
        boost_clock=doc.quantity("boost_clock", Dimension.FREQUENCY, sources, required=False),
        memory_capacity=doc.quantity("memory_capacity", Dimension.BYTES, sources),  # type: ignore[arg-type]
        memory_bandwidth=doc.quantity("memory_bandwidth", Dimension.BANDWIDTH, sources),  # type: ignore[arg-type]
        nvlink_bandwidth=doc.quantity("nvlink_bandwidth_per_direction", Dimension.BANDWIDTH, sources, False),
        dtypes=dtypes,
        notes=doc.texts("notes"),
        kernels=_kernels(doc, sources, dtypes) if "kernels" in doc.data else None,
        node=_node(doc, sources) if "node" in doc.data else None,
        matmul_measured=_matmul_measured(doc, sources, dtypes) if "matmul_measured" in doc.data else (),
        board_power=doc.quantity("board_power", Dimension.POWER, sources, required=False),
        **_power(doc, sources),
        host=_host_costs(doc, sources) if "host" in doc.data else None,
    )


_POWER_POINT_KEYS = ("power", "tensor_scale", "source", "note")


def _power(doc: _Doc, sources: Mapping[str, str]) -> dict[str, Any]:
    """`power_curve:` [{power, tensor_scale, source, note?}] ascending in power, the Tensor Core
    rate (a share of the dense peaks, at most 1) at each board power limit; `power_limit:` the
    default enforced limit, a point the curve covers (parcalc.core.power)."""
    board = doc.quantity("board_power", Dimension.POWER, sources, required=False)
    # points may lie above this board's power: the same die rated higher bounds the interpolation
    curve: list[PowerPoint] = []
    if "power_curve" in doc.data:
        rows = doc.data["power_curve"]
        if not isinstance(rows, list) or not rows:
            raise doc.error("power_curve", "expected a non-empty list of {power, tensor_scale, source} points")
        for index, row in enumerate(rows):
            where = f"{doc.path}: key 'power_curve[{index}]'"
            if not isinstance(row, dict) or not {"power", "tensor_scale", "source"} <= set(row) or not set(row) <= set(_POWER_POINT_KEYS):
                raise PresetError(f"{where}: expected a mapping with the keys power, tensor_scale, source (and an optional note)")
            point = _Doc(doc.path, row, f"power_curve[{index}]")
            if not (isinstance(row["power"], str) and _has_unit(row["power"])):
                raise point.error("power", f"{shown(row['power'])} has no unit; write it with one, e.g. 400W")
            watts = _row_quantity(row, "power", Dimension.POWER, where)
            scale = _row_quantity(row, "tensor_scale", Dimension.FRACTION, where)
            if scale > 1:
                raise point.error("tensor_scale", f"a share of the preset's peaks, at most 1, got {shown(row['tensor_scale'])}")
            if curve and watts <= curve[-1].watts:
                raise point.error("power", "points must ascend in power")
            if curve and scale < curve[-1].tensor_scale:
                raise point.error("tensor_scale", "a higher power limit cannot give a lower Tensor Core rate")
            note = point.text("note", required=False)
            source = point.source_ref("source", sources)
            curve.append(PowerPoint(watts, scale, f"{source} ({note})" if note else source))
    limit = doc.quantity("power_limit", Dimension.POWER, sources, required=False)
    if limit is not None:
        if not curve:
            raise doc.error("power_limit", "a default power limit needs a power_curve to time it")
        if limit.value < curve[0].watts * (1 - 1e-9) or (board is not None and limit.value > board.value * (1 + 1e-9)):
            raise doc.error("power_limit", f"{limit.value:g} W is outside the power curve ({curve[0].watts:g} W up to the board power)")
    return {"power_curve": tuple(curve), "power_limit": limit}


def _kernels(doc: _Doc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> KernelRates:
    """`kernels:` measured shares of the peaks, each with its source (see parcalc.core.timing.compute)."""
    node = doc.child("kernels")
    node.only(_KERNEL_KEYS)
    matmul, isolated = _shares(node, "matmul", sources, dtypes), _shares(node, "matmul_isolated", sources, dtypes)
    tile = node.child("tile")
    tile.only(("m", "n", "source"))
    return KernelRates(
        matmul=tuple(matmul),
        tile_m=tile.integer("m"),
        tile_n=tile.integer("n"),
        tile_source=tile.source_ref("source", sources),
        memory=_share(node, "memory", sources, required=True),  # type: ignore[arg-type]
        attention_forward=_share(node, "attention_forward", sources, required=True),  # type: ignore[arg-type]
        attention_backward=_share(node, "attention_backward", sources, required=True),  # type: ignore[arg-type]
        launch=node.quantity("launch", Dimension.TIME, sources),  # type: ignore[arg-type]
        matmul_isolated=isolated,
        gemm_tiles=_gemm_tiles(node, sources, dtypes) if "gemm_tiles" in node.data else (),
        attention_by_head_dim=_attention_by_head_dim(node, sources) if "attention_by_head_dim" in node.data else (),
        calibrated=_calibrated(node, sources) if "calibrated" in node.data else None,
    )


def _calibrated(node: _Doc, sources: Mapping[str, str]) -> Any:
    """`kernels.calibrated:` {gemm, attention, memory, optimizer: factor on that kind's modelled rate, source, note?}
    (`parcalc calibrate trace`; parcalc.core.hardware.KindEfficiency)."""
    from parcalc.core.hardware import KindEfficiency

    block = node.child("calibrated")
    block.only((*_CALIBRATED_KINDS, "source", "note"))
    factors = {}
    for kind in _CALIBRATED_KINDS:
        value = block.data.get(kind)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.05 <= value <= 20:
            raise block.error(kind, f"a factor on the modelled rate between 0.05 and 20, got {shown(value)}")
        factors[kind] = float(value)
    return KindEfficiency(**factors, source=block.source_ref("source", sources))


def _attention_by_head_dim(node: _Doc, sources: Mapping[str, str]) -> tuple[tuple[int, Sourced, Sourced], ...]:
    """`kernels.attention_by_head_dim:` {head dim: {forward: share, backward: share, source}} of fused attention."""
    table = node.child("attention_by_head_dim")
    out = []
    for key in table.data:
        dim = int(key) if isinstance(key, int) or (isinstance(key, str) and key.isdigit()) else 0
        if dim <= 0:
            raise table.error(str(key), f"a head dimension (a whole number above 0), got {shown(key)}")
        row = table.child(key)
        row.only(("forward", "backward", "source", "note"))
        shares = []
        for name in ("forward", "backward"):
            value = row.data.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise row.error(name, f"a share of the peak in (0, 1], got {shown(value)}")
            shares.append(Sourced(float(value), "fraction", row.source_ref("source", sources)))
        out.append((dim, shares[0], shares[1]))
    return tuple(sorted(out, key=lambda r: r[0]))


def _gemm_tiles(node: _Doc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, Any], ...]:
    """`kernels.gemm_tiles:` dtype -> {sm_rate, tile_overhead, kernel_overhead, split_k_slice, tiles, source}
    (parcalc.core.timing.gemm_tiles)."""
    from parcalc.core.timing.gemm_tiles import TiledGemm

    table = node.child("gemm_tiles")
    out = []
    for dtype in table.data:
        if dtype not in dtypes:
            raise table.error(str(dtype), f"no peak for this dtype in 'dtypes' (known: {', '.join(dtypes)})")
        block = table.child(str(dtype))
        block.only(("sm_rate", "tile_overhead", "kernel_overhead", "split_k_slice", "tiles", "source", "note"))
        for needed in ("sm_rate", "tile_overhead", "kernel_overhead"):
            if needed not in block.data:
                raise block.error(needed, "missing")
        try:
            rate = parse_quantity(block.data["sm_rate"], Dimension.FLOP_RATE, f"{block.path}: key 'gemm_tiles.{dtype}.sm_rate'")
            tile = parse_quantity(block.data["tile_overhead"], Dimension.TIME, f"{block.path}: key 'gemm_tiles.{dtype}.tile_overhead'")
            kernel = parse_quantity(block.data["kernel_overhead"], Dimension.TIME, f"{block.path}: key 'gemm_tiles.{dtype}.kernel_overhead'")
        except InputError as error:
            raise PresetError(str(error)) from None
        tiles = block.data.get("tiles")
        if not (isinstance(tiles, list) and tiles and all(isinstance(t, list) and len(t) == 2 and all(type(v) is int and v > 0 for v in t)
                                                            for t in tiles)):  # fmt: skip
            raise block.error("tiles", f"a list of [tm, tn] tile sizes, got {shown(tiles)}")
        if not (rate > 0 and tile >= 0 and kernel >= 0):
            raise block.error("sm_rate", "a rate above 0 and overheads of at least 0")
        out.append((str(dtype), TiledGemm(rate, tile, kernel, block.integer("split_k_slice"), tuple((t[0], t[1]) for t in tiles),
                                          block.source_ref("source", sources))))  # fmt: skip
    return tuple(out)


def _shares(node: _Doc, key: str, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, Sourced], ...]:
    """`kernels.<key>:` dtype -> share of that dtype's dense peak, each with its source."""
    shares = []
    if key in node.data:
        table = node.child(key)
        for dtype in table.data:
            if dtype not in dtypes:
                raise table.error(str(dtype), f"no peak for this dtype in 'dtypes' (known: {', '.join(dtypes)})")
            share = _share(table, str(dtype), sources, required=True)
            assert share is not None
            shares.append((str(dtype), share))
    return tuple(shares)


def _node(doc: _Doc, sources: Mapping[str, str]) -> Node:
    """`node:` the usual server of this GPU: GPUs, intra-node link, one NIC's link, NICs."""
    node = doc.child("node")
    node.only(_NODE_KEYS)
    return Node(gpus=node.integer("gpus"), intra_link=node.text("intra_link"), inter_link=node.text("inter_link"),
                nics=node.integer("nics"), source=node.source_ref("source", sources))  # fmt: skip


_MATMUL_POINT_KEYS = ("m", "k", "n", "time", "achieved", "quantisation", "share")


def _matmul_measured(doc: _Doc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> tuple[tuple[str, MatmulSweep], ...]:
    from parcalc.core.measured import MatmulPoint, MatmulSweep

    """`matmul_measured:` dtype -> {source, rows: [{m, k, n, time, achieved, quantisation, share}]},
    the sweep `parcalc calibrate gemm` measured (data: the model uses `kernels.matmul`)."""
    table = doc.child("matmul_measured")
    sweeps = []
    for dtype in table.data:
        if dtype not in dtypes:
            raise table.error(str(dtype), f"no peak for this dtype in 'dtypes' (known: {', '.join(dtypes)})")
        sweep = table.child(str(dtype))
        sweep.only(("source", "rows"))
        points = []
        for where, row in _rows(sweep, _MATMUL_POINT_KEYS):
            m, k, n = (_whole(row, key, where) for key in ("m", "k", "n"))
            time = _row_quantity(row, "time", Dimension.TIME, where)
            achieved = _row_quantity(row, "achieved", Dimension.FLOP_RATE, where)
            quantisation = _row_quantity(row, "quantisation", Dimension.FRACTION, where)
            if quantisation > 1:
                raise PresetError(f"{where}.quantisation: a share of at most 1, got {quantisation!r}")
            points.append(MatmulPoint(m, k, n, time, achieved, quantisation, _row_quantity(row, "share", Dimension.FRACTION, where)))
        sweeps.append((str(dtype), MatmulSweep(sweep.source_ref("source", sources), tuple(points))))
    return tuple(sweeps)


def _rows(doc: _Doc, keys: tuple[str, ...]) -> list[tuple[str, Mapping[str, Any]]]:
    """`rows:` a non-empty list of mappings with exactly `keys`; each with its dotted location."""
    rows = doc.data.get("rows")
    if not isinstance(rows, list) or not rows:
        raise doc.error("rows", "expected a non-empty list of rows")
    located: list[tuple[str, Mapping[str, Any]]] = []
    for index, row in enumerate(rows):
        where = f"{doc.path}: key '{doc.where}.rows[{index}]'"
        if not isinstance(row, dict) or set(row) != set(keys):
            raise PresetError(f"{where}: expected a mapping with exactly the keys {', '.join(keys)}")
        located.append((where, row))
    return located


def _whole(row: Mapping[str, Any], key: str, where: str) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PresetError(f"{where}.{key}: expected a whole number >= 1, got {shown(value)}")
    return value


def _row_quantity(row: Mapping[str, Any], key: str, dimension: Dimension, where: str, allow_zero: bool = False) -> float:
    # "<path>: key 'power_curve[0]'" names the row; its field goes inside the quotes: key 'power_curve[0].power'
    label = f"{where[:-1]}.{key}'" if where.endswith("'") else f"{where}.{key}"
    try:
        return parse_quantity(row[key], dimension, label, allow_zero=allow_zero)
    except InputError as error:
        raise PresetError(str(error)) from None


def load_gpu(name: str, extra_dirs: Sequence[Path | str] = ()) -> Gpu:
    preset = find(Category.GPUS, name, extra_dirs)
    return read_validated(preset.path, lambda document: gpu_from_document(preset.key, preset.path, document))


# ---------------------------------------------------------------------------------------------
# Links

_LINK_KEYS = ("kind", "name", "sources", "bandwidth_per_direction", "latency", "nccl_hardware", "nccl_efficiency", "notes", "measured", "nvswitch")
_NCCL_HARDWARE = ("nvlink", "pci", "net")


def link_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Link:
    doc = _Doc(path, data)
    doc.only(_LINK_KEYS)
    _check_kind(doc, Category.LINKS)
    sources = doc.sources()
    return Link(
        key=key,
        name=doc.text("name"),
        bandwidth_per_direction=doc.quantity("bandwidth_per_direction", Dimension.BANDWIDTH, sources),  # type: ignore[arg-type]
        latency=doc.quantity("latency", Dimension.TIME, sources),  # type: ignore[arg-type]
        notes=doc.texts("notes"),
        nccl_hardware=_one_of(doc, "nccl_hardware", _NCCL_HARDWARE, "net"),
        nccl_efficiency=_share(doc, "nccl_efficiency", sources),
        measured=_measured_collective(doc, sources) if "measured" in doc.data else None,
        nvswitch=doc.flag("nvswitch", False),
    )


_MEASURED_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")
_MEASURED_SIZE_KEYS = ("size", "time", "algbw", "busbw")


def _measured_collective(doc: _Doc, sources: Mapping[str, str]) -> MeasuredCollective:
    from parcalc.core.measured import MeasuredCollective, MeasuredSize

    """`measured:` the nccl-tests table `parcalc calibrate nccl` fitted the link to (data)."""
    node = doc.child("measured")
    node.only(("collective", "ranks", "nodes", "source", "rows"))
    rows = []
    for where, row in _rows(node, _MEASURED_SIZE_KEYS):
        rows.append(MeasuredSize(
            size=_row_quantity(row, "size", Dimension.BYTES, where),
            time=_row_quantity(row, "time", Dimension.TIME, where),
            algbw=_row_quantity(row, "algbw", Dimension.BANDWIDTH, where, allow_zero=True),  # nccl-tests prints 0.00 for tiny sizes
            busbw=_row_quantity(row, "busbw", Dimension.BANDWIDTH, where, allow_zero=True),
        ))  # fmt: skip
    if any(b.size <= a.size for a, b in itertools.pairwise(rows)):
        raise node.error("rows", "sizes must increase from row to row")
    collective = node.text("collective")
    if collective not in _MEASURED_COLLECTIVES:
        raise node.error("collective", f"{shown(collective)} is not one of {', '.join(_MEASURED_COLLECTIVES)}")
    return MeasuredCollective(
        collective=collective,
        ranks=node.integer("ranks"),
        nodes=node.integer("nodes"),
        source=node.source_ref("source", sources),
        rows=tuple(rows),
    )


def _one_of(doc: _Doc, key: str, allowed: tuple[str, ...], default: str) -> str:
    value = doc.text(key, required=False, default=default).lower()
    if value not in allowed:
        raise doc.error(key, f"{shown(value)} is not one of {', '.join(allowed)}")
    return value


def _share(doc: _Doc, key: str, sources: Mapping[str, str], required: bool = False) -> Sourced | None:
    """A share between 0 (exclusive) and 1, with its source."""
    share = doc.quantity(key, Dimension.FRACTION, sources, required)
    if share is not None and not 0 < share.value <= 1:
        raise doc.error(key, f"a share between 0 and 1, got {shown(share.value)}")
    return share


def load_link(name: str, extra_dirs: Sequence[Path | str] = ()) -> Link:
    preset = find(Category.LINKS, name, extra_dirs)
    return read_validated(preset.path, lambda document: link_from_document(preset.key, preset.path, document))


# ---------------------------------------------------------------------------------------------
# Models

_MODEL_KEYS = (
    "kind", "name", "sources", "source", "layers", "hidden", "heads", "kv_heads", "head_dim",
    "ffn_hidden", "mlp", "vocab", "max_seq_len", "tied_embeddings", "position", "norm", "bias", "dropout", "notes",
    "moe", "mla", "qk_norm", "window", "post_norms", "attention_sinks", "mtp", "linear_attention", "attention_gate",
)  # fmt: skip
_LINEAR_KEYS = ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel", "full_every", "source")
_WINDOW_KEYS = ("kind", "size", "global_every", "source")
_MTP_KEYS = ("layers", "source")
_MOE_KEYS = (
    "experts", "top_k", "expert_ffn_hidden", "shared_experts", "shared_ffn_hidden", "first_dense_layers", "every",
    "capacity_factor", "router_bias", "shared_expert_gate", "routing_weights_cast", "source",
)  # fmt: skip
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "source")


def _moe(doc: _Doc, sources: Mapping[str, str]) -> MixtureOfExperts | None:
    """The `moe:` block of a model preset (parcalc.core.model.MixtureOfExperts), None when absent."""
    from parcalc.core.model import MixtureOfExperts

    if "moe" not in doc.data:
        return None
    block = doc.child("moe")
    block.only(_MOE_KEYS)
    capacity = block.data.get("capacity_factor")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or not capacity > 0):
        raise block.error("capacity_factor", f"expected a number > 0 (or null: dropless), got {shown(capacity)}")
    return MixtureOfExperts(
        experts=block.integer("experts"),
        top_k=block.integer("top_k"),
        expert_ffn_hidden=block.integer("expert_ffn_hidden"),
        shared_experts=block.integer("shared_experts", required=False, default=0, minimum=0),
        shared_ffn_hidden=block.integer("shared_ffn_hidden", required=False, default=0, minimum=0),
        first_dense_layers=block.integer("first_dense_layers", required=False, default=0, minimum=0),
        every=block.integer("every", required=False, default=1),
        capacity_factor=None if capacity is None else float(capacity),
        router_bias=block.flag("router_bias", default=False),
        source=block.source_ref("source", sources) if "source" in block.data else "",
        shared_expert_gate=block.flag("shared_expert_gate", default=False),
        routing_weights_cast=block.flag("routing_weights_cast", default=False),
    )


def _mla(doc: _Doc, sources: Mapping[str, str]) -> LatentAttention | None:
    """The `mla:` block of a model preset (parcalc.core.model.LatentAttention), None when absent."""
    from parcalc.core.model import LatentAttention

    if "mla" not in doc.data:
        return None
    block = doc.child("mla")
    block.only(_MLA_KEYS)
    return LatentAttention(
        q_lora_rank=block.integer("q_lora_rank", minimum=0),
        kv_lora_rank=block.integer("kv_lora_rank"),
        qk_nope_head_dim=block.integer("qk_nope_head_dim"),
        qk_rope_head_dim=block.integer("qk_rope_head_dim"),
        v_head_dim=block.integer("v_head_dim"),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _window(doc: _Doc, sources: Mapping[str, str]) -> AttentionWindow | None:
    """The `window:` block of a model preset (parcalc.core.attention_window.AttentionWindow), None when absent."""
    from parcalc.core.attention_window import AttentionWindow, WindowKind

    if "window" not in doc.data:
        return None
    block = doc.child("window")
    block.only(_WINDOW_KEYS)
    return AttentionWindow(
        kind=block.choice("kind", WindowKind, WindowKind.SLIDING),
        size=block.integer("size"),
        global_every=block.integer("global_every", required=False, default=0, minimum=0),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _linear_attention(doc: _Doc, sources: Mapping[str, str]) -> GatedDeltaNet | None:
    """The `linear_attention:` block of a model preset (parcalc.core.linear_attention.GatedDeltaNet), None when absent."""
    from parcalc.core.linear_attention import GatedDeltaNet

    if "linear_attention" not in doc.data:
        return None
    block = doc.child("linear_attention")
    block.only(_LINEAR_KEYS)
    return GatedDeltaNet(
        key_heads=block.integer("key_heads"),
        value_heads=block.integer("value_heads"),
        key_head_dim=block.integer("key_head_dim"),
        value_head_dim=block.integer("value_head_dim"),
        conv_kernel=block.integer("conv_kernel"),
        full_every=block.integer("full_every", required=False, default=0, minimum=0),
        source=block.source_ref("source", sources) if "source" in block.data else "",
    )


def _mtp(doc: _Doc, sources: Mapping[str, str]) -> tuple[int, str]:
    """The `mtp:` block of a model preset: (multi-token-prediction modules, their source); (0, "") when absent."""
    if "mtp" not in doc.data:
        return 0, ""
    block = doc.child("mtp")
    block.only(_MTP_KEYS)
    return block.integer("layers", minimum=0), block.source_ref("source", sources) if "source" in block.data else ""


def model_from_document(key: str, path: Path, data: Mapping[str, Any]) -> TransformerModel:
    from parcalc.core.model import Mlp, Norm, Position, TransformerModel

    doc = _Doc(path, data)
    doc.only(_MODEL_KEYS)
    _check_kind(doc, Category.MODELS)
    sources = doc.sources()
    mtp = _mtp(doc, sources)
    hidden = doc.integer("hidden")
    heads = doc.integer("heads")
    if "head_dim" not in doc.data and hidden % heads:
        raise doc.error("head_dim", f"missing, and hidden ({hidden}) is not a multiple of heads ({heads})")
    try:
        return TransformerModel(
            key=key,
            name=doc.text("name"),
            layers=doc.integer("layers"),
            hidden=hidden,
            heads=heads,
            kv_heads=doc.integer("kv_heads", required=False, default=heads),
            head_dim=doc.integer("head_dim", required=False, default=hidden // heads),
            ffn_hidden=doc.integer("ffn_hidden", required=False, default=4 * hidden),
            mlp=doc.choice("mlp", Mlp, Mlp.GELU),
            vocab=doc.integer("vocab", required=False, default=0, minimum=0),
            max_seq_len=doc.integer("max_seq_len", required=False, default=0, minimum=0),
            tied_embeddings=doc.flag("tied_embeddings", default=True),
            position=doc.choice("position", Position, Position.LEARNED),
            norm=doc.choice("norm", Norm, Norm.LAYERNORM),
            bias=doc.flag("bias", default=True),
            source=doc.source_ref("source", sources),
            dropout=doc.flag("dropout", default=True),
            dropout_source=sources.get("dropout", ""),
            moe=_moe(doc, sources),
            mla=_mla(doc, sources),
            qk_norm=doc.flag("qk_norm", default=False),
            window=_window(doc, sources),
            post_norms=doc.flag("post_norms", default=False),
            attention_sinks=doc.flag("attention_sinks", default=False),
            mtp_layers=mtp[0],
            mtp_source=mtp[1],
            linear_attention=_linear_attention(doc, sources),
            attention_gate=doc.flag("attention_gate", default=False),
        )
    except InputError as error:
        raise PresetError(f"{path}: {error}") from None


def _is_file(path: Path) -> bool:
    """Path.is_file, False for a name the file system cannot hold (over 255 bytes: ENAMETOOLONG),
    so that such a --model is 'no model preset' rather than an internal error."""
    try:
        return path.is_file()
    except OSError:
        return False


def load_model(name_or_path: str, extra_dirs: Sequence[Path | str] = ()) -> TransformerModel:
    """A model preset by name, or a Hugging Face config.json: a path ending in .json, or a model
    directory that holds one (a path with a separator, or a directory of that name when no preset
    has it: `--model ./Llama-3.1-8B` or `--model Llama-3.1-8B` as `huggingface-cli download` left it)."""
    from parcalc.hf_config import HF_CONFIG, hf_config_path, model_from_hf_config

    if name_or_path.lower().endswith(".json") or os.sep in name_or_path or (os.altsep and os.altsep in name_or_path):
        return model_from_hf_config(hf_config_path(Path(name_or_path)))
    try:
        preset = find(Category.MODELS, name_or_path, extra_dirs)
    except PresetError:
        if _is_file(Path(name_or_path) / HF_CONFIG):
            return model_from_hf_config(Path(name_or_path) / HF_CONFIG)
        raise
    return read_validated(preset.path, lambda document: model_from_document(preset.key, preset.path, document))


# ---------------------------------------------------------------------------------------------
# Framework profiles

_FRAMEWORK_FLAGS = ("fp32_grads", "overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch", "reshard_after_forward",
                    "tp_comm_overlap")  # fmt: skip
_FRAMEWORK_KEYS = ("kind", "name", "sources", "gradient_buckets", "reduce_bytes", "zero_stages", "notes", "pipeline", *_FRAMEWORK_FLAGS,
                   "kernels", "host", "step_memory", "data_parallel_only")  # fmt: skip
# What a framework's `pipeline` block may change when pp > 1 (parcalc.core.timing.framework.Framework.pipeline)
_PIPELINE_KEYS = ("overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch", "zero_stages", "bf16_grad_accumulation_bytes")


def framework_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Any:
    """A framework profile: every setting a {value, source} pair (parcalc.core.timing.framework)."""
    from parcalc.core.timing.framework import Framework

    doc = _Doc(path, data)
    doc.only(_FRAMEWORK_KEYS)
    _check_kind(doc, Category.FRAMEWORKS)
    sources = doc.sources()
    cited: list[tuple[str, str]] = []

    def setting(block: _Doc, name: str, cite_as: str) -> Any:
        node = block.child(name)
        node.only(("value", "source", "note"))
        if "value" not in node.data:
            raise node.error("value", "missing")
        note = node.text("note", required=False)
        cited.append((cite_as, node.source_ref("source", sources) + (f" ({note})" if note else "")))
        return node.data["value"]

    def value_of(block: _Doc, name: str, cite_as: str) -> Any:
        value = setting(block, name, cite_as)
        if name in _FRAMEWORK_FLAGS:
            if not isinstance(value, bool):
                raise block.error(f"{name}.value", f"expected true or false, got {shown(value)}")
            return value
        if name == "reduce_bytes":
            if value not in (1, 2, 4) or isinstance(value, bool):
                raise block.error("reduce_bytes.value", f"bytes per gradient element on the wire: 1, 2 or 4, got {shown(value)}")
            return float(value)
        if name == "zero_stages":
            if not isinstance(value, list) or not value or any(type(z) is not int or z not in (0, 1, 2, 3) for z in value):
                raise block.error("zero_stages.value", f"a list of ZeRO stages among 0, 1, 2, 3, got {shown(value)}")
            return tuple(sorted(set(value)))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:  # bytes per parameter
            raise block.error(f"{name}.value", f"bytes per parameter between 0 and 100, got {shown(value)}")
        return float(value)

    flags = {name: value_of(doc, name, name) for name in _FRAMEWORK_FLAGS}
    reduce_bytes = value_of(doc, "reduce_bytes", "reduce_bytes")
    stages = value_of(doc, "zero_stages", "zero_stages")
    kernels = "fused"  # optional: profiles written before kernel sets existed time Megatron-LM's fused kernels
    if "kernels" in data:
        from parcalc.core.timing.framework import KERNEL_SETS

        kernels = setting(doc, "kernels", "kernels")
        if kernels not in KERNEL_SETS:
            raise doc.error("kernels.value", f"one of {', '.join(KERNEL_SETS)}, got {shown(kernels)}")
    memory: dict[str, Any] = {}  # optional: profiles without them count memory as the textbook does
    if "step_memory" in data:
        from parcalc.core.timing.framework import STEP_MEMORY_MODELS

        memory["step_memory"] = setting(doc, "step_memory", "step_memory")
        if memory["step_memory"] not in STEP_MEMORY_MODELS:
            raise doc.error("step_memory.value", f"one of {', '.join(STEP_MEMORY_MODELS)}, got {shown(memory['step_memory'])}")
    if "data_parallel_only" in data:
        memory["data_parallel_only"] = setting(doc, "data_parallel_only", "data_parallel_only")
        if not isinstance(memory["data_parallel_only"], bool):
            raise doc.error("data_parallel_only.value", f"expected true or false, got {shown(memory['data_parallel_only'])}")
    host = _host_costs(doc, sources) if "host" in data else None
    pipeline: tuple[tuple[str, Any], ...] = ()
    if "pipeline" in doc.data:
        block = doc.child("pipeline")
        block.only(_PIPELINE_KEYS)
        if not block.data:
            raise doc.error("pipeline", f"give at least one of {', '.join(_PIPELINE_KEYS)}")
        pipeline = tuple((name, value_of(block, name, f"pipeline.{name}")) for name in _PIPELINE_KEYS if name in block.data)
    buckets = doc.child("gradient_buckets")
    buckets.only(("min_params", "params_per_dp_rank", "bytes", "source"))
    cited.append(("bucket", buckets.source_ref("source", sources)))
    numbers = {}
    for name in ("min_params", "params_per_dp_rank"):
        value = buckets.data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise buckets.error(name, f"a number of parameters >= 0, got {shown(value)}")
        numbers[name] = float(value)
    size = buckets.data.get("bytes")
    bucket_bytes = 0.0
    if size is not None:
        try:
            bucket_bytes = parse_quantity(size, Dimension.BYTES, f"{path}: key 'gradient_buckets.bytes'")
        except InputError as error:
            raise PresetError(str(error)) from None
    if not (numbers["min_params"] or numbers["params_per_dp_rank"] or bucket_bytes):
        raise buckets.error("min_params", "give min_params / params_per_dp_rank or bytes")
    return Framework(
        key=key, name=doc.text("name"), bucket_min_params=numbers["min_params"], bucket_params_per_dp_rank=numbers["params_per_dp_rank"],
        bucket_bytes=bucket_bytes, reduce_bytes=reduce_bytes, zero_stages=stages, sources=tuple(cited), pipeline=pipeline, **flags,
        kernels=kernels, host=host, notes=doc.texts("notes"), **memory,
    )  # fmt: skip


def _host_costs(doc: Any, sources: Any) -> Any:
    """A framework's `host:` block: the host's time per kernel issued (parcalc.core.timing.host)."""
    from parcalc.core.timing.host import HostCosts

    block = doc.child("host")
    block.only(("forward", "backward", "optimizer", "source", "note"))
    times = {}
    for name in ("forward", "backward", "optimizer"):
        if name not in block.data:
            raise block.error(name, "missing")
        try:
            times[name] = parse_quantity(block.data[name], Dimension.TIME, f"{doc.path}: key 'host.{name}'")
        except InputError as error:
            raise PresetError(str(error)) from None
        if not 0 <= times[name] < 1e-2:
            raise block.error(name, f"a host time per kernel between 0 and 10 ms, got {shown(block.data[name])}")
    return HostCosts(times["forward"], times["backward"], times["optimizer"], block.source_ref("source", sources))


def load_framework(name: str, extra_dirs: Sequence[Path | str] = ()) -> Any:
    preset = find(Category.FRAMEWORKS, name, extra_dirs)
    return read_validated(preset.path, lambda document: framework_from_document(preset.key, preset.path, document))


# ---------------------------------------------------------------------------------------------
# Generic access for `presets list` / `presets show`

_BUILDERS = {
    Category.GPUS: gpu_from_document,
    Category.LINKS: link_from_document,
    Category.MODELS: model_from_document,
    Category.FRAMEWORKS: framework_from_document,
}


def load_any(category: Category, name: str, extra_dirs: Sequence[Path | str] = ()) -> tuple[PresetFile, Any, dict]:
    """(file, typed preset, raw document) for `presets show`; worksheets stay raw here."""
    preset = find(category, name, extra_dirs)
    builder = _BUILDERS.get(category)
    if builder is None:
        document = read_yaml(preset.path)
        return preset, document, document
    typed, document = read_validated(preset.path, lambda d: (builder(preset.key, preset.path, d), d))
    return preset, typed, document


def find_in_any_category(name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """`presets show NAME` without a category: the first category that has it."""
    for category in (Category.GPUS, Category.LINKS, Category.MODELS, Category.WORKSHEETS, Category.FRAMEWORKS):
        try:
            return find(category, name, extra_dirs)
        except PresetError:
            continue
    known = [p.key for c in Category for p in find_all(c, extra_dirs)]
    raise PresetError(f"unknown preset {shown(name)}{_did_you_mean(name.lower(), known)}")
