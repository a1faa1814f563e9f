"""A calibrated preset (parcalc calibrate gemm|nccl|trace) as YAML text, read back and validated as `--presets` reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def validated_preset(
    document: dict[str, Any], key: str, output: Path | None, category: str, header: str
) -> tuple[str, Any]:
    """The preset as YAML text, read back and validated exactly as `--presets` will read it."""
    import yaml

    from parcalc.errors import PresetError
    from parcalc.preset_hardware import gpu_from_document, link_from_document
    from parcalc.strict_yaml import strict_loader

    text = f"# {header}\n" + yaml.dump(
        _flow_leaves(document),
        Dumper=_dumper(),
        sort_keys=False,
        allow_unicode=True,
        width=4096,
    )
    reread = yaml.load(
        text, Loader=strict_loader()  # noqa: S506 - a SafeLoader subclass, as presets are read
    )
    build = gpu_from_document if category == "gpus" else link_from_document
    try:
        typed = build(key, output or Path(f"<{category}/{key}.yaml>"), reread)
    except (
        PresetError
    ) as error:  # a bug of this command, but the user should see a line, not a trace
        raise PresetError(f"the calibrated preset does not validate: {error}") from None
    return text, typed


class _Flow(dict):
    """A mapping of plain values, written on one line: {value: 300 GB/s, source: datasheet}."""


def _flow_leaves(node: Any, key: str = "") -> Any:
    if isinstance(node, dict):
        if (
            key != "sources"
            and node
            and all(not isinstance(v, (dict, list)) for v in node.values())
        ):
            return _Flow(node)
        return {k: _flow_leaves(v, str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_flow_leaves(v) for v in node]
    return node


def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(
        _Flow,
        lambda dumper, data: dumper.represent_mapping(
            "tag:yaml.org,2002:map", data.items(), flow_style=True
        ),
    )
    return Dumper


def check_preset_output(output: Path | None, force: bool, category: str) -> None:
    """Fail before measuring: an existing file without --force, a missing directory, a preset of
    one kind headed for another kind's folder."""
    if output is None:
        return
    from parcalc.errors import InputError
    from parcalc.files import check_writable

    if output.suffix.lower() not in (".yaml", ".yml"):
        raise InputError(f"--output: a preset is a .yaml file, got {str(output)!r}")
    folder = output.parent.name.lower()
    if (
        folder in ("gpus", "links", "models", "worksheets", "frameworks")
        and folder != category
    ):
        raise InputError(
            f"--output: this is a {category.removesuffix('s')} preset; it belongs in a '{category}' folder, not '{folder}'"
        )
    check_writable(output)
    if output.exists() and not force:
        raise InputError(
            f"--output: {str(output)!r} exists; pass --force to replace it"
        )
