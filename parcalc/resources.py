"""Where the packaged data lives: inside the wheel (parcalc/presets) or, in a source checkout
or editable install, at the repository's top level (presets/, templates/)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def home_dir(xdg_var: str, default: str) -> Path | None:
    """An XDG base directory ($XDG_CONFIG_HOME, $XDG_CACHE_HOME), else ~/`default`; None when there is
    neither (no HOME and a uid without a passwd entry, as in some containers: Path.home() raises)."""
    import os

    if os.environ.get(xdg_var):
        return Path(os.environ[xdg_var])
    try:
        return Path.home() / default
    except RuntimeError:
        return None


def data_dir(name: str) -> Path:
    """The packaged `presets` or `templates` directory."""
    inside_wheel = _PACKAGE_DIR / name
    if inside_wheel.is_dir():
        return inside_wheel
    return _PACKAGE_DIR.parent / name
