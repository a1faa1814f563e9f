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
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.core.dtypes import COMPUTE_DTYPES
from parcalc.core.hardware import (
    DtypeRates,
    Gpu,
    KernelRates,
    Link,
    Node,
    Sourced,
)
from parcalc.core.model import Mlp, Norm, Position, TransformerModel
from parcalc.errors import InputError, PresetError
from parcalc.resources import data_dir

if TYPE_CHECKING:  # only calibrated presets build them (parcalc.core.measured)
    from parcalc.core.measured import MatmulSweep, MeasuredCollective
from parcalc.units import BASE_UNIT, Dimension, parse_quantity

MAX_PRESET_BYTES = 1 << 20
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


@dataclass(frozen=True)
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
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    dirs.append((Path(xdg) / "parcalc" / "presets", "XDG config"))
    dirs.append((data_dir("presets"), "packaged"))
    return dirs


def find_all(category: Category, extra_dirs: Sequence[Path | str] = ()) -> list[PresetFile]:
    """Every preset of a category, the first of each name in lookup order, sorted by name."""
    found: dict[str, PresetFile] = {}
    for directory, origin in search_dirs(extra_dirs):
        folder = directory / category.value
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.yml")):
            found.setdefault(path.stem.lower(), PresetFile(category, path.stem.lower(), path, origin))
    return sorted(found.values(), key=lambda p: p.key)


def find(category: Category, name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """The preset called `name` (case-insensitive); unknown names get "did you mean"."""
    wanted = name.strip().lower()
    # A preset name is a file's stem: no separators (nothing outside the folder) and short enough to
    # be a file name (a 300-character name would make the file system raise, not "not found").
    plain = bool(wanted) and not any(ch in wanted for ch in "/\\\0") and len(wanted.encode()) <= 200
    for directory, origin in search_dirs(extra_dirs):
        folder = directory / category.value
        for suffix in (".yaml", ".yml") if plain else ():
            path = folder / f"{wanted}{suffix}"
            if path.is_file():
                return PresetFile(category, wanted, path, origin)
        if folder.is_dir():  # case-insensitive file systems aside, match names ignoring case
            for path in folder.iterdir():
                if path.suffix in (".yaml", ".yml") and path.stem.lower() == wanted:
                    return PresetFile(category, wanted, path, origin)
    known = [p.key for p in find_all(category, extra_dirs)]
    raise PresetError(f"unknown {category.singular} {name!r}{_did_you_mean(wanted, known)}")


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
    from parcalc import preset_cache

    cached = preset_cache.load(path)
    if cached is not None:
        return cached
    document = _parse_yaml(path)
    preset_cache.store(path, document)
    return document


def _parse_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        size = path.stat().st_size
        if size > MAX_PRESET_BYTES:
            raise PresetError(f"{path}: {size} bytes is too large for a preset (limit {MAX_PRESET_BYTES})")
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise PresetError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise PresetError(f"{path}: not UTF-8 text") from None
    try:
        document = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise PresetError(f"{path}: {_yaml_problem(error)}") from None
    if not isinstance(document, dict):
        raise PresetError(f"{path}: expected a mapping of keys at the top level")
    return document


def _yaml_problem(error: Exception) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f"line {mark.line + 1}: " if mark is not None else ""
    return f"{where}invalid YAML: {problem}"


_LOADER: type | None = None


def _strict_loader() -> type:
    global _LOADER
    if _LOADER is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class StrictLoader(base):  # type: ignore[misc, valid-type]
            def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
                seen: set[object] = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r}", key_node.start_mark
                        )
                    seen.add(key)
                return super().construct_mapping(node, deep=deep)

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
        return value.strip()

    def texts(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of text lines")
        return tuple(value)

    def integer(self, key: str, required: bool = True, default: int = 0, minimum: int = 1) -> int:
        if key not in self.data:
            if required:
                raise self.error(key, "missing")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected a whole number >= {minimum}, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def choice(self, key: str, enum: type[Enum], default: Enum) -> Any:
        value = self.data.get(key, default.value)
        try:
            return enum(str(value).lower())
        except ValueError:
            allowed = ", ".join(str(e.value) for e in enum)  # type: ignore[attr-defined]
            raise self.error(key, f"{value!r} is not one of {allowed}") from None

    def sources(self) -> dict[str, str]:
        if "sources" not in self.data:
            raise self.error("sources", "missing: every number needs a source")
        sources = self.child("sources")
        return {str(k): sources.text(str(k)) for k in sources.data}

    def source_ref(self, key: str, sources: Mapping[str, str]) -> str:
        ref = self.text(key)
        if ref not in sources:
            known = ", ".join(sources) or "none"
            raise self.error(key, f"source {ref!r} is not a key of 'sources' (known: {known})")
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
            raise node.error("value", f"{raw!r} has no unit; write it with one, e.g. {_unit_example(dimension)}")
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
    }.get(dimension, "'1 unit'")


def _check_kind(doc: _Doc, category: Category) -> None:
    kind = doc.text("kind")
    if kind != category.singular:
        raise doc.error("kind", f"expected '{category.singular}' in a {category.value} preset, got {kind!r}")


# ---------------------------------------------------------------------------------------------
# GPUs

_GPU_KEYS = (
    "kind", "name", "vendor", "architecture", "sources", "sms", "boost_clock", "memory_capacity",
    "memory_bandwidth", "nvlink_bandwidth_per_direction", "dtypes", "kernels", "node", "notes", "matmul_measured",
)  # fmt: skip
_KERNEL_KEYS = ("matmul", "tile", "memory", "attention_forward", "attention_backward", "launch")
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
    )


def _kernels(doc: _Doc, sources: Mapping[str, str], dtypes: Mapping[str, DtypeRates]) -> KernelRates:
    """`kernels:` measured shares of the peaks, each with its source (see parcalc.core.timing.compute)."""
    node = doc.child("kernels")
    node.only(_KERNEL_KEYS)
    matmul = []
    if "matmul" in node.data:
        table = node.child("matmul")
        for dtype in table.data:
            if dtype not in dtypes:
                raise table.error(str(dtype), f"no peak for this dtype in 'dtypes' (known: {', '.join(dtypes)})")
            share = _share(table, str(dtype), sources, required=True)
            assert share is not None
            matmul.append((str(dtype), share))
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
    )


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
    located = []
    for index, row in enumerate(rows):
        where = f"{doc.path}: key '{doc.where}.rows[{index}]'"
        if not isinstance(row, dict) or set(row) != set(keys):
            raise PresetError(f"{where}: expected a mapping with exactly the keys {', '.join(keys)}")
        located.append((where, row))
    return located


def _whole(row: Mapping[str, Any], key: str, where: str) -> int:
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PresetError(f"{where}.{key}: expected a whole number >= 1, got {value!r}")
    return value


def _row_quantity(row: Mapping[str, Any], key: str, dimension: Dimension, where: str, allow_zero: bool = False) -> float:
    try:
        return parse_quantity(row[key], dimension, f"{where}.{key}", allow_zero=allow_zero)
    except InputError as error:
        raise PresetError(str(error)) from None


def load_gpu(name: str, extra_dirs: Sequence[Path | str] = ()) -> Gpu:
    preset = find(Category.GPUS, name, extra_dirs)
    return gpu_from_document(preset.key, preset.path, read_yaml(preset.path))


# ---------------------------------------------------------------------------------------------
# Links

_LINK_KEYS = ("kind", "name", "sources", "bandwidth_per_direction", "latency", "nccl_hardware", "nccl_efficiency", "notes", "measured")
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
        raise node.error("collective", f"{collective!r} is not one of {', '.join(_MEASURED_COLLECTIVES)}")
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
        raise doc.error(key, f"{value!r} is not one of {', '.join(allowed)}")
    return value


def _share(doc: _Doc, key: str, sources: Mapping[str, str], required: bool = False) -> Sourced | None:
    """A share between 0 (exclusive) and 1, with its source."""
    share = doc.quantity(key, Dimension.FRACTION, sources, required)
    if share is not None and not 0 < share.value <= 1:
        raise doc.error(key, f"a share between 0 and 1, got {share.value!r}")
    return share


def load_link(name: str, extra_dirs: Sequence[Path | str] = ()) -> Link:
    preset = find(Category.LINKS, name, extra_dirs)
    return link_from_document(preset.key, preset.path, read_yaml(preset.path))


# ---------------------------------------------------------------------------------------------
# Models

_MODEL_KEYS = (
    "kind", "name", "sources", "source", "layers", "hidden", "heads", "kv_heads", "head_dim",
    "ffn_hidden", "mlp", "vocab", "max_seq_len", "tied_embeddings", "position", "norm", "bias", "dropout", "notes",
)  # fmt: skip


def model_from_document(key: str, path: Path, data: Mapping[str, Any]) -> TransformerModel:
    doc = _Doc(path, data)
    doc.only(_MODEL_KEYS)
    _check_kind(doc, Category.MODELS)
    sources = doc.sources()
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
        )
    except InputError as error:
        raise PresetError(f"{path}: {error}") from None


def load_model(name_or_path: str, extra_dirs: Sequence[Path | str] = ()) -> TransformerModel:
    """A model preset by name, or a Hugging Face config.json (a path ending in .json)."""
    if name_or_path.lower().endswith(".json") or os.sep in name_or_path:
        return model_from_hf_config(Path(name_or_path))
    preset = find(Category.MODELS, name_or_path, extra_dirs)
    return model_from_document(preset.key, preset.path, read_yaml(preset.path))


# Architectures whose MLP is gated (three matrices): their config's hidden_act names the gate.
_GATED_ARCHITECTURES = {
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "olmo",
    "olmo2", "deepseek_v2", "deepseek_v3", "internlm2", "cohere", "granite", "starcoder2_gated",
}  # fmt: skip
_LEARNED_POSITIONS = {"gpt2", "bert", "roberta", "opt", "gpt_neo", "gpt_bigcode", "megatron-bert", "xlm-roberta"}


# Keys by which a config.json declares experts: Mixtral's num_local_experts, DeepSeek-V2/V3's
# n_routed_experts, Qwen2-MoE / Qwen3-MoE / OLMoE's num_experts, and the moe_* family
# (moe_intermediate_size, moe_layer_freq, ...). A dense reading of such a model counts one expert's
# MLP per layer (Mixtral 8x7B as 7.24 B parameters, not 46.7 B), so until experts are modelled it is
# refused rather than silently wrong.
_EXPERT_COUNT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", "num_experts_per_tok", "n_shared_experts")


def _refuse_mixture_of_experts(path: Path, config: Mapping[str, Any]) -> None:
    """A Mixture-of-Experts config.json: InputError naming the key found (parcalc models dense layers)."""
    found = [k for k in _EXPERT_COUNT_KEYS if _declares(config.get(k))]
    found += sorted(k for k in config if k.lower().startswith("moe_") and _declares(config[k]))
    if found:
        key = found[0]
        raise InputError(f"--model: {path} is a Mixture-of-Experts model ({key}: {config[key]!r}); parcalc models dense "
                         "transformers only and would count one expert per layer (give a dense model)")  # fmt: skip


def _declares(value: Any) -> bool:
    """Whether a config value declares experts: a count above 1, or any other set value (null, 0, 1, false and '' do not)."""
    if value is None or value is False or value == "" or value == [] or value == {}:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > 1
    return True


# Dropout probabilities as Hugging Face configs name them: Llama / Mistral / Qwen2 / OPT
# (attention_dropout), GPT-2 and Phi (attn_pdrop, resid_pdrop, embd_pdrop), BERT
# (attention_probs_dropout_prob, hidden_dropout_prob), GPT-NeoX / Falcon (hidden_dropout), OPT
# (dropout, activation_dropout).
_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "hidden_dropout", "hidden_dropout_prob",
                 "resid_pdrop", "embd_pdrop", "embedding_dropout", "dropout", "activation_dropout", "ffn_dropout")  # fmt: skip


def _trains_with_dropout(config: Mapping[str, Any], architecture: str) -> tuple[bool, str]:
    """Whether the model trains with dropout, and why: any dropout probability above 0 in the
    config; with none given, the architecture's default: none for the Llama family (Meta's
    llama/model.py has no dropout layer, and transformers' LlamaConfig defaults attention_dropout
    to 0.0), dropout for the GPT-2 / BERT family (their configs default to 0.1)."""
    given = {k: config[k] for k in _DROPOUT_KEYS if isinstance(config.get(k), (int, float)) and not isinstance(config.get(k), bool)}
    if given:
        listed = ", ".join(f"{k} {v:g}" for k, v in given.items())
        return any(p > 0 for p in given.values()), f"config.json: {listed}"
    if architecture in _GATED_ARCHITECTURES:
        return False, f"config.json gives no dropout; model_type {architecture!r} has none by default (transformers: attention_dropout 0.0)"
    return True, "config.json gives no dropout probability; assumed on (GPT-2 / BERT configs default to 0.1)"


def model_from_hf_config(path: Path) -> TransformerModel:
    """Read the shape of a model from a Hugging Face `config.json` on disk."""
    if not path.is_file():
        raise InputError(f"--model: no such file {str(path)!r} (a config.json is read from disk, never downloaded)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PresetError(f"{path}: not a readable JSON config: {error}") from None
    if not isinstance(config, dict):
        raise PresetError(f"{path}: expected a JSON object")

    def pick(*names: str, default: Any = None) -> Any:
        for name in names:
            if config.get(name) is not None:
                return config[name]
        if default is None:
            raise PresetError(f"{path}: key '{names[0]}' missing (looked for {', '.join(names)})")
        return default

    _refuse_mixture_of_experts(path, config)
    architecture = str(config.get("model_type", "")).lower()
    hidden = int(pick("hidden_size", "n_embd", "d_model"))
    heads = int(pick("num_attention_heads", "n_head", "num_heads"))
    kv_heads = int(pick("num_key_value_heads", default=1 if config.get("multi_query") else heads))
    activation = str(pick("hidden_act", "activation_function", "hidden_activation", default="gelu")).lower()
    gated = architecture in _GATED_ARCHITECTURES
    if gated:
        mlp = Mlp.GEGLU if "gelu" in activation else Mlp.SWIGLU
    else:
        mlp = Mlp.RELU if "relu" in activation else Mlp.GELU
    if architecture in _LEARNED_POSITIONS:
        position = Position.LEARNED
    elif "alibi" in json.dumps(config).lower():
        position = Position.ALIBI
    else:
        position = Position.ROPE
    dropout, dropout_source = _trains_with_dropout(config, architecture)
    try:
        return TransformerModel(
            key=path.parent.name or path.stem,
            name=str(config.get("_name_or_path") or path.parent.name or path.stem),
            layers=int(pick("num_hidden_layers", "n_layer", "num_layers")),
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=int(pick("head_dim", default=hidden // heads)),
            ffn_hidden=int(pick("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden)),
            mlp=mlp,
            vocab=int(pick("vocab_size")),
            max_seq_len=int(pick("max_position_embeddings", "n_positions", "n_ctx", default=0)),
            tied_embeddings=bool(config.get("tie_word_embeddings", True)),
            position=position,
            norm=Norm.RMSNORM if "rms_norm_eps" in config else Norm.LAYERNORM,
            bias=bool(config.get("attention_bias", config.get("bias", not gated))),
            source=f"Hugging Face config.json at {path}",
            dropout=dropout,
            dropout_source=dropout_source,
        )
    except (TypeError, ValueError) as error:
        raise PresetError(f"{path}: {error}") from None


# ---------------------------------------------------------------------------------------------
# Framework profiles

_FRAMEWORK_FLAGS = ("fp32_grads", "overlap_grad_reduce", "overlap_param_gather", "reduce_every_micro_batch", "reshard_after_forward",
                    "tp_comm_overlap")  # fmt: skip
_FRAMEWORK_KEYS = ("kind", "name", "sources", "gradient_buckets", "reduce_bytes", "zero_stages", "notes", *_FRAMEWORK_FLAGS)


def framework_from_document(key: str, path: Path, data: Mapping[str, Any]) -> Any:
    """A framework profile: every setting a {value, source} pair (parcalc.core.timing.framework)."""
    from parcalc.core.timing.framework import Framework

    doc = _Doc(path, data)
    doc.only(_FRAMEWORK_KEYS)
    _check_kind(doc, Category.FRAMEWORKS)
    sources = doc.sources()
    cited: list[tuple[str, str]] = []

    def setting(name: str) -> Any:
        node = doc.child(name)
        node.only(("value", "source", "note"))
        if "value" not in node.data:
            raise node.error("value", "missing")
        note = node.text("note", required=False)
        cited.append((name, node.source_ref("source", sources) + (f" ({note})" if note else "")))
        return node.data["value"]

    flags = {}
    for name in _FRAMEWORK_FLAGS:
        value = setting(name)
        if not isinstance(value, bool):
            raise doc.error(f"{name}.value", f"expected true or false, got {value!r}")
        flags[name] = value
    reduce_bytes = setting("reduce_bytes")
    if reduce_bytes not in (1, 2, 4):
        raise doc.error("reduce_bytes.value", f"bytes per gradient element on the wire: 1, 2 or 4, got {reduce_bytes!r}")
    stages = setting("zero_stages")
    if not isinstance(stages, list) or not stages or any(z not in (0, 1, 2, 3) or isinstance(z, bool) for z in stages):
        raise doc.error("zero_stages.value", f"a list of ZeRO stages among 0, 1, 2, 3, got {stages!r}")
    buckets = doc.child("gradient_buckets")
    buckets.only(("min_params", "params_per_dp_rank", "bytes", "source"))
    cited.append(("bucket", buckets.source_ref("source", sources)))
    numbers = {}
    for name in ("min_params", "params_per_dp_rank"):
        value = buckets.data.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise buckets.error(name, f"a number of parameters >= 0, got {value!r}")
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
        bucket_bytes=bucket_bytes, reduce_bytes=float(reduce_bytes), zero_stages=tuple(sorted(set(stages))), sources=tuple(cited), **flags,
    )  # fmt: skip


def load_framework(name: str, extra_dirs: Sequence[Path | str] = ()) -> Any:
    preset = find(Category.FRAMEWORKS, name, extra_dirs)
    return framework_from_document(preset.key, preset.path, read_yaml(preset.path))


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
    document = read_yaml(preset.path)
    builder = _BUILDERS.get(category)
    typed = builder(preset.key, preset.path, document) if builder else document
    return preset, typed, document


def find_in_any_category(name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """`presets show NAME` without a category: the first category that has it."""
    for category in (Category.GPUS, Category.LINKS, Category.MODELS, Category.WORKSHEETS, Category.FRAMEWORKS):
        try:
            return find(category, name, extra_dirs)
        except PresetError:
            continue
    known = [p.key for c in Category for p in find_all(c, extra_dirs)]
    raise PresetError(f"unknown preset {name!r}{_did_you_mean(name.lower(), known)}")
