"""Where the packaged data lives: inside the wheel (parcalc/presets) or, in a source checkout
or editable install, at the repository's top level (presets/, templates/)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The packaged `presets` or `templates` directory."""
    inside_wheel = _PACKAGE_DIR / name
    if inside_wheel.is_dir():
        return inside_wheel
    return _PACKAGE_DIR.parent / name
