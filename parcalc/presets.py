"""Presets: GPUs, links, models, frameworks and worksheets as YAML data, strictly validated; loading one by name.

Where the files are found is parcalc.preset_files; how YAML is read safely, parcalc.strict_yaml; how a
document is validated, parcalc.preset_doc; each kind's document made into the core's type,
parcalc.preset_hardware (GPUs, links), parcalc.preset_models and parcalc.preset_frameworks.

A model may also be given as the path of a Hugging Face `config.json` on disk (never fetched).

Every number in a GPU or link preset is `{value: "<number> <unit>", source: <key>}` where the
key names an entry of the file's `sources:` mapping; a model names its `source:` once.
Unknown keys, missing units and missing sources are errors naming the file and the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parcalc.errors import PresetError, shown
from parcalc.preset_files import Category, PresetFile, did_you_mean, find, find_all
from parcalc.strict_yaml import read_validated, read_yaml

if TYPE_CHECKING:
    from parcalc.core.hardware import Gpu, Link
    from parcalc.core.model import TransformerModel


def load_gpu(name: str, extra_dirs: Sequence[Path | str] = ()) -> Gpu:
    return _typed(find(Category.GPUS, name, extra_dirs))


def load_link(name: str, extra_dirs: Sequence[Path | str] = ()) -> Link:
    return _typed(find(Category.LINKS, name, extra_dirs))


def _typed(preset: PresetFile) -> Any:
    """The GPU, link, model or framework a preset file holds, validated (a worksheet is read raw: read_preset)."""
    build = _builder(preset.category)
    assert build is not None, preset.category
    return read_validated(preset.path, lambda document: build(preset.key, preset.path, document))


def _builder(category: Category) -> Callable[[str, Path, Mapping[str, Any]], Any] | None:
    """The function that makes `category`'s typed preset from its document; None for a worksheet (raw YAML).

    Imported here, when a preset of that kind is read, not with this module: each kind's validation is a module of its
    own, and a one-liner reads one or two kinds (peak-flops a GPU, flops a model, comm-volume a model and links)."""
    if category is Category.GPUS or category is Category.LINKS:
        from parcalc.preset_hardware import gpu_from_document, link_from_document

        return gpu_from_document if category is Category.GPUS else link_from_document
    if category is Category.MODELS:
        from parcalc.preset_models import model_from_document

        return model_from_document
    if category is Category.FRAMEWORKS:
        from parcalc.preset_frameworks import framework_from_document

        return framework_from_document
    return None


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
    if name_or_path.lower().endswith(".json") or os.sep in name_or_path or (os.altsep and os.altsep in name_or_path):
        from parcalc.hf_config import hf_config_path, model_from_hf_config  # here: a preset by name does not load it

        return model_from_hf_config(hf_config_path(Path(name_or_path)))
    try:
        preset = find(Category.MODELS, name_or_path, extra_dirs)
    except PresetError:
        from parcalc.hf_config import HF_CONFIG, model_from_hf_config

        if _is_file(Path(name_or_path) / HF_CONFIG):
            return model_from_hf_config(Path(name_or_path) / HF_CONFIG)
        raise
    return _typed(preset)


def load_framework(name: str, extra_dirs: Sequence[Path | str] = ()) -> Any:
    return _typed(find(Category.FRAMEWORKS, name, extra_dirs))


# ---------------------------------------------------------------------------------------------
# Generic access for `presets list` / `presets show`

def load_any(category: Category, name: str, extra_dirs: Sequence[Path | str] = ()) -> tuple[PresetFile, Any, dict]:
    """(file, typed preset, raw document) for `presets show`; worksheets stay raw here."""
    preset = find(category, name, extra_dirs)
    typed, document = read_preset(preset)
    return preset, typed, document


def read_preset(preset: PresetFile) -> tuple[Any, dict]:
    """(typed preset, raw document) of a preset found on disk, validated as the commands that name it read it (a worksheet:
    its YAML, raw; `report` checks its questions); PresetError (one line naming the file and the key) where it cannot be."""
    builder = _builder(preset.category)
    if builder is None:
        document = read_yaml(preset.path)
        return document, document
    return read_validated(preset.path, lambda d: (builder(preset.key, preset.path, d), d))


def find_in_any_category(name: str, extra_dirs: Sequence[Path | str] = ()) -> PresetFile:
    """`presets show NAME` without a category: the first category that has it."""
    for category in (Category.GPUS, Category.LINKS, Category.MODELS, Category.WORKSHEETS, Category.FRAMEWORKS):
        try:
            return find(category, name, extra_dirs)
        except PresetError:
            continue
    known = [p.key for c in Category for p in find_all(c, extra_dirs)]
    raise PresetError(f"unknown preset {shown(name)}{did_you_mean(name.lower(), known)}")
