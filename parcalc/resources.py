"""Where the packaged data lives: inside the wheel (parcalc/presets) or, in a source checkout
or editable install, at the repository's top level (presets/, templates/)."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def home_dir(xdg_var: str, default: str) -> Path | None:
    """An XDG base directory ($XDG_CONFIG_HOME, $XDG_CACHE_HOME), else ~/`default`; None when there is
    neither (no HOME and a uid without a passwd entry, as in some containers: Path.home() raises).

    A relative value is ignored, as the XDG Base Directory Specification (0.8) says it must be ("All paths set in
    these environment variables must be absolute ... consider the path invalid and ignore it"): taken as given it
    put the caches under whatever folder parcalc ran in, and read user presets from there."""
    import os

    value = os.environ.get(xdg_var)
    if value and os.path.isabs(value):
        return Path(value)
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
